"""The validator: staleness from ancestry, attenuated merge, benchmark gate, fast-forward main.

Usage:
    v = Validator(ledger, device="auto", name="ci-gpu-1")
    verdicts = v.run()                 # every open PR, in submission order
    v.watch(interval=2.0, stop=lambda: False, on_verdict=print)

Safety: the PR is read as git objects and one safetensors file; model and
evaluation code come from this checkout. Candidate weights are uploaded and
verified before the atomic push that moves main and records the verdict, so a
crash leaves main old or new, never pointing at missing weights; a lost race
re-fetches and re-evaluates.

Modules: queue.py holds the Validator (the queue, one PR at a time, lost
races, retries) over one ValidatorContext (context.py: ledger, forge, device,
name, state); the steps are plain functions over that context: step.py one PR's
evaluation (stages.py its ordered list of stages over one candidate record,
candidate.py), publish.py an accepted PR's upload and atomic push, delta_load.py
its delta, quorum.py votes (validators.quorum > 1), ci.py the two CI jobs;
verdict.py the Verdict record and failpoints; state.py what the Validator
remembers (ValidatorState: per pass and across passes) and the records it keeps.
"""

from woolf.validator.context import ValidatorContext
from woolf.validator.queue import MAX_RACES, ORIGIN_MAIN, Validator
from woolf.validator.verdict import Verdict

__all__ = ["MAX_RACES", "ORIGIN_MAIN", "Validator", "ValidatorContext", "Verdict"]
