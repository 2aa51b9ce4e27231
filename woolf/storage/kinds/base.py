"""What every delta kind answers: the questions the rest of the code asks a delta instead of comparing names.

Usage:
    kind = kind_for(declared)                                    # the registry (woolf/storage/kinds/__init__.py)
    kind.check_declared(declared, params)                        # exactly its fields, else InvalidWeightsError
    kind.size_bound(declared, model_spec, limits)                # the most bytes its file can take for this model
    delta = kind.open(path, declared, model_spec, limits)        # its dense update, read lazily where it can be
    delta = kind.load(path, declared, model_spec, limits, on_block=h)   # held whole where it can be, hashed on the way
    md5, sha256 = kind.write(delta, path, declared, parts)       # a PR's delta file (ledger/submission.py)
    kind.sparse_entries(path, declared, model_spec, limits)      # None, or the kept values for a sparse merge
    kind.unreplayable()                                          # None when an audit can replay it; else why not
    out = kind.proof_train(wl, skeleton, data, recipe, device=d, hook=h, progress=p, extra={})   # its training
    tensors, residual_out = kind.proof_derive(out, Derivation(base=...))   # its file's tensors from the end

``declared`` is submission.json's ``delta`` object (``kind`` and the kind's parameters, beside
``sha256``, ``md5``, ``size`` and ``url``). Whatever a delta's file holds, ``open`` and ``load`` give
its DENSE update: {every tensor name of the model: a tensor of the model's dtype and shape}; that is
how the norm guard, the copy screen, scoring, the copy index, the merge, the audit and rebuild treat
every kind alike. Every byte is untrusted: each reader checks the file against the model and the
declared parameters before any arithmetic, and raises InvalidWeightsError naming the problem.

A kind is a stateless object: one instance per kind, in the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from woolf.errors import InvalidWeightsError
from woolf.protocol.config import LimitsConfig


@dataclass
class Derivation:
    """What a delta is derived with from its training's final state (all tensors torch, on the CPU)."""

    base: dict  # the PR's base version's weights
    shift: dict | None = None  # the last follow's shift (new version - old), applied after the loop
    residual_in: dict | None = None  # top-k: the error-feedback residual the delta went out with
    declared: dict | None = None  # submission.json's delta (its kind's parameters)


class DeltaKind:
    """A kind of delta file; subclasses say what their files hold (see the module docstring)."""

    name: str = ""  # submission.json's delta.kind, and the name delta.accept lists
    params: tuple[str, ...] = ()  # the fields the kind declares beside kind, sha256, md5, size, url
    lazy = False  # ``open`` reads the update tensor by tensor (never whole in memory)
    stores_update = False  # the file's tensors ARE the update: the read that hashes the file can hash them
    bound_words = ""  # what the size refusal says after "a <name> delta of this model"
    trains_adapters = False  # its training trains adapters over the frozen version (a proof's params are theirs)

    def declared(self) -> dict:
        """The fields submission.json's delta carries for this kind (a kind with parameters adds them)."""
        return {"kind": self.name}

    def matches(self, declared) -> bool:
        """``declared`` (submission.json's delta) is of this kind."""
        return isinstance(declared, dict) and declared.get("kind") == self.name

    def accepted_by(self, accept) -> bool:
        """A ledger whose ``delta.accept`` is ``accept`` takes deltas of this kind."""
        return self.name in accept

    def check_declared(self, declared: dict, params: tuple[str, ...]) -> None:
        """Admission's rule: exactly this kind's fields. ``params``: every registered kind's parameters;
        a kind without parameters declares none of them. InvalidWeightsError (one line) otherwise."""
        if not self.params and set(declared) & set(params):
            words = ", ".join(params[:-1]) + f" or {params[-1]}" if len(params) > 1 else params[0]
            raise InvalidWeightsError(f"a {self.name} delta declares no {words}")

    def size_bound(self, declared: dict, model_spec: dict, limits: LimitsConfig) -> int:
        """The most bytes a delta file of this kind, as declared, can take for this model: a PR declaring
        more is refused before anything is downloaded (validator/intake.py)."""
        raise NotImplementedError

    def open(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta"):
        """The file's dense update, read as lazily as the kind allows: every check made now."""
        raise NotImplementedError

    def load(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig, label: str = "delta",
             finite: bool = True, on_block=None):
        """The file's dense update, held in memory where the kind can be (``open`` where it cannot).
        ``finite=False``: not scanned for NaN/Inf here (the caller's norm proves it). ``on_block``: every
        byte of the file as it is read, to hash it on the way (storage/dvcstore.py fetch_object)."""
        raise NotImplementedError

    def held_whole(self, size: int, budget: int) -> bool:
        """Whether a reader that keeps deltas in memory within ``budget`` bytes loads a ``size``-byte file of
        this kind whole (``load``) rather than reading it lazily, unkept (``open``): the copy screen."""
        return True

    def expand_ahead(self, delta, directory: Path) -> None:
        """Work done once, after the delta's checks and hashes passed, that its many later reads would
        each repeat (OSError: nothing changed, each read does it); nothing for most kinds."""

    def write(self, delta, path: Path, declared: dict, parts: dict | None = None) -> tuple[str, str]:
        """A PR's delta file at ``path``; (md5, sha256), hashed while written. ``delta``: what the kind
        writes from (a dict of tensors, or an object that writes itself); ``parts``: made already."""
        raise NotImplementedError

    def sparse_entries(self, path: Path, declared: dict, model_spec: dict, limits: LimitsConfig,
                       label: str = "delta", check: bool = True) -> dict | None:
        """{name: (flat positions, float32 values)} when the kind merges on a fast path touching only those
        values (rebuild under the attenuated rule); None: it is merged through its dense update."""
        return None

    def unreplayable(self) -> str | None:
        """Why an audit cannot replay a delta of this kind (validator/audit_proof.py), None when it can: a
        kind brings its own replay by giving ``proof_derive`` (and ``proof_train`` when its training is
        not the workload's ``train``)."""
        if type(self).proof_derive is DeltaKind.proof_derive:
            return f"a {self.name} delta (its kind brings no replay of its training)"
        return None

    def proof_train(self, wl, skeleton, data, recipe: dict, *, device, hook, progress, extra: dict):
        """The training a delta of this kind comes from, with the proof ``hook`` in its loop (workloads/proof.py):
        a workload's whole-model ``train`` by default. Returns the trained tensors (the final state)."""
        return wl.train(skeleton, data, recipe["steps"], device=device, seed=recipe["seed"], progress=progress,
                        proof=hook, **extra)[0]

    def proof_derive(self, out: dict, d: Derivation) -> tuple[dict, str | None]:
        """(the delta file's tensors, exactly as `woolf submit` makes them from the final state ``out``, the
        digest of the error-feedback residual it leaves or None): what an audit compares bit for bit."""
        raise NotImplementedError
