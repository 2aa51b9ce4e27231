"""The four regimes `woolf demo --regime` trains in: where genesis comes from, whose data is whose.

Usage:
    r = REGIMES["continued-domain"]; r.words     # "each participant trains on its own data, ..."
    weights, overrides = prepare_regime("continued-domain", ["p1", "p2", "p3"], {"workload.steps": "30"})

- ``continued-domain`` (the default): genesis is a `charlm` checkpoint pretrained
  centrally on the corpus (workloads/charlm_pretrained.py), and each participant's
  data is its own part of the corpus (``workload.params.domains``,
  workloads/charlm_data.py); the benchmark spans all of it. What real ledgers
  train in: people bring their own data to a model that already exists. Each
  delta merges at about its share (``merge.alpha_base`` 1/N, polynomial staleness).
- ``continued-iid``: the same genesis, every participant sampling the whole pool.
- ``scratch-domain``: random genesis, each participant its own part.
- ``scratch-iid``: random genesis, everyone sampling the same pool (the hard case,
  where the participants' deltas are largely the same work: benchmarks/RESULTS.md §3).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from woolf.errors import UsageError
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides
from woolf.workloads.base import load_workload
from woolf.workloads.charlm_pretrained import PRETRAIN_STEPS, pretrained_genesis

# A fresh AdamW's first steps on a trained model are a spike the gate refuses (benchmarks/RESULTS.md §4):
# continuing a pretrained model, each participant's optimizer warms up over its first two contributions.
CONTINUED = {"workload.params.optimizer_warmup": "60"}
# Continuing a pretrained model on each participant's own data, one participant's whole delta raises the
# benchmark (30 steps on one part of the corpus: +0.03 to +0.15 nats) and only the mix of all parts helps.
# Each delta then merges at about its share, alpha_base = 1/N, with polynomial staleness (1+s)^-0.5, so the
# N deltas of a round weigh alike and sum to about one (RESULTS.md §4: the gap closed 39-68% against -6
# to 25% with alpha_base 1 and 1/(1+s), on an idle machine). ``alpha_base`` is set in prepare_regime.
OWN_DATA_CONTINUED = (("merge.staleness.kind", "polynomial"),)


@dataclass(frozen=True)
class Regime:
    pretrained: bool  # genesis: the pretrained charlm checkpoint (else seeded random weights)
    own_data: bool  # each participant its own part of the corpus (else the shared pool)
    words: str  # what the summary and the report say
    settings: tuple = ()  # config keys the regime sets (a --set of the same key wins)

    @property
    def short(self) -> str:
        return ("continued training" if self.pretrained else "from scratch") + \
            (", each participant its own data" if self.own_data else ", shared pool")


REGIMES = {
    "continued-domain": Regime(True, True, "each participant trains on its own data, continuing a pretrained model",
                               tuple(CONTINUED.items()) + OWN_DATA_CONTINUED),
    "continued-iid": Regime(True, False, "every participant samples the same pool of data, continuing a "
                                         "pretrained model", tuple(CONTINUED.items())),
    "scratch-domain": Regime(False, True, "each participant trains on its own data, starting from random weights"),
    "scratch-iid": Regime(False, False, "every participant samples the same pool of data, starting from random "
                                        "weights"),
}
DEFAULT = "continued-domain"


def prepare_regime(name: str, participants: list[str], overrides: dict[str, str], pretrain_steps: int | None = None,
                   progress=None) -> tuple[Path | None, dict[str, str]]:
    """The genesis checkpoint to start from (None: seeded random weights) and the config keys to add.

    Checks ``overrides`` first, so a bad --set fails before anything is built; a key the user set
    (workload.params.domains) wins over the regime's.
    """
    if name not in REGIMES:
        raise UsageError(f"unknown regime {name!r}", hint=f"choose one of {', '.join(REGIMES)}")
    regime = REGIMES[name]
    added = {k: v for k, v in regime.settings if k not in overrides}
    if regime.own_data and "workload.params.domains" not in overrides:
        added["workload.params.domains"] = json.dumps(participants)
    if regime.pretrained and regime.own_data and "merge.alpha_base" not in overrides:
        added["merge.alpha_base"] = str(round(1 / max(1, len(participants)), 4))  # each delta at its share
    cfg = apply_overrides(LedgerConfig(), {**added, **overrides})  # the ledger's config, validated
    if not regime.pretrained:
        return None, added
    if cfg.workload.name != "charlm":
        raise UsageError(f"--regime {name} starts from a pretrained charlm; this demo's workload is "
                         f"{cfg.workload.name!r}", hint="use --regime scratch-domain or scratch-iid")
    steps = PRETRAIN_STEPS if pretrain_steps is None else pretrain_steps
    return pretrained_genesis(load_workload(cfg.workload), steps, progress=progress), added
