"""Follow the ledger while training: move local progress onto each newer version (rebase).

Usage:
    follow = Follower(ledger, head, base_weights)   # or None: read from the ledger when needed
    shift = follow()          # None, or {name: new_version - old_base} to add to the local weights
    follow.base               # the version the delta is now relative to (submit against it)

Without it, a contribution of K steps is measured against the version it
started from, and every merge that lands meanwhile makes it staler: the
validator attenuates it (1/(1+s)) or the gate refuses it, and the compute is
partly lost. With it, every few steps the participant fetches main, and if a
newer version exists moves its weights by exactly what main moved
(``local += new - old``), keeping its own progress and its optimizer state.
The delta it submits is then relative to the newest version it saw, so it
merges at staleness 0 or 1 and is applied (nearly) in full: asynchronous SGD
with a delay of a few steps rather than a whole contribution
(benchmarks/RESULTS.md §3). Only versions that descend from the current base
on origin's first-parent chain, and that verify (signed ledgers), are followed; any
error leaves the base as it was.
"""

from __future__ import annotations

import torch

from woolf.errors import WoolfError
from woolf.ledger.trust import require_trusted_head


class Follower:
    def __init__(self, ledger, head, base_weights: dict[str, torch.Tensor] | None = None):
        self.ledger, self.base, self._base_weights = ledger, head, base_weights
        self.rebases = 0

    @property
    def base_weights(self) -> dict[str, torch.Tensor]:
        """The base's weights: given, or read from the ledger when first needed (a workload that
        trains in place has written over the ones it was given)."""
        if self._base_weights is None:
            self._base_weights = self.ledger.load_weights(self.base)
        return self._base_weights

    def __call__(self) -> dict[str, torch.Tensor] | None:
        try:
            self.ledger.fetch(prs=False)  # main only: this runs every few training steps
            newest = self.ledger.head("refs/remotes/origin/main")
            if newest.version <= self.base.version or not self.ledger.on_chain(self.base, newest):
                return None
            require_trusted_head(self.ledger, newest)  # signed by a validator (woolf/ledger/trust.py)
            new = self.ledger.load_weights(newest)
        except WoolfError:
            return None  # the hub or storage is unreachable for now: keep training where we are
        if any(k not in new or new[k].shape != v.shape for k, v in self.base_weights.items()) \
                or set(new) != set(self.base_weights):
            return None  # not the model being trained (another workload on main): keep training here
        shift = {k: new[k].to(torch.float32) - self.base_weights[k].to(torch.float32) for k in new}
        self.base, self._base_weights = newest, new
        self.rebases += 1
        return shift
