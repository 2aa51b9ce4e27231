"""The proof hook a workload's training loop calls: commit to the path (woolf train), or replay one segment of it.

Usage (a workload whose FEATURES has PROOF; its loop, around its own steps):
    first, last, done = hook.begin(params, opt, gen, done, steps, device) if hook else (0, steps, done)
    for step in range(first + 1, last + 1):
        ... lr from step and done, forward, backward, gnorm = clip_grad_norm_(...), opt.step(), follow ...
        if hook:
            hook.step(step, loss, gnorm)

    rec = Recorder(every=4, keep=Path(".woolf/work/proof"))   # woolf train: a link every 4 steps
    rep = Replay(state, first=8, last=12)                     # a validator: steps 9..12 from a served state
    rep.fingerprints, rep.end, rep.end_state                  # what the replay gave

``params`` are the trainable parameters by name (every one for dense training, the adapters for
LoRA), ``opt`` their optimizer, ``gen`` the batches' generator (its state is the data position),
``done`` the optimizer's own step count at the run's start (LR ramps). The state at a link is
``params/*``, ``opt/<key>/*``, ``data`` and ``rng/r<rank>/{cpu,cuda}`` (every rank's default generator:
dropout), digested by woolf/core/chain.py; a step's fingerprint is its loss's and gradient norm's
float32 bits (woolf/protocol/proof.py). A recorder keeps the state files of its links within a
byte budget (always the first and the final segment's start), so that it can answer an audit.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from woolf.core.chain import digests
from woolf.errors import Rejected
from woolf.protocol.proof import COMPONENTS, fingerprint, link_steps, segment_digest, state_digest
from woolf.storage.weights import save_atomic

KEEP_BYTES = 1 << 30  # state files a recorder keeps per run beyond the two it always keeps


def device_class(device, autocast: str = "off") -> dict:
    """What must match for a replay to be compared bit for bit (protocol/proof.py CLASS_KEYS; measured in
    benchmarks/RESULTS.md §21): the device type, torch's version, the CPU's vector unit (its kernels) or
    the GPU and its architecture, autocast, deterministic algorithms; and the thread count, which a
    replay adopts (``torch.set_num_threads``: the same partition of every reduction)."""
    dev = torch.device(device)
    out = {"device": dev.type, "torch": torch.__version__.split("+")[0], "threads": torch.get_num_threads(),
           "autocast": autocast or "off",
           "deterministic": "on" if torch.are_deterministic_algorithms_enabled() else "off"}
    if dev.type == "cuda":
        major, minor = torch.cuda.get_device_capability(dev)
        out["gpu"] = f"{torch.cuda.get_device_name(dev)} sm_{major}{minor} cuda {torch.version.cuda}"
    else:
        out["capability"] = torch.backends.cpu.get_cpu_capability()
    return out


class Stop(Exception):  # noqa: N818 - a signal, not an error: a start check needs no training step
    """Raised by StartCheck.begin: the state at step 0 is all it wanted."""


def _rank_world() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _rng(device) -> dict[str, torch.Tensor]:
    """This process's default generators (dropout draws from them)."""
    out = {"cpu": torch.get_rng_state()}
    dev = torch.device(device)
    if dev.type == "cuda":
        out["cuda"] = torch.cuda.get_rng_state(dev)
    return out


def _all_rng(device) -> dict[str, torch.Tensor]:
    """Every rank's generators, named ``rng/r<rank>/<kind>`` (gathered on every rank: a collective)."""
    rank, world = _rank_world()
    mine = _rng(device)
    if world == 1:
        return {f"rng/r0/{k}": v for k, v in mine.items()}
    gathered: list = [None] * world
    dist.all_gather_object(gathered, {k: bytes(v.numpy()) for k, v in mine.items()})
    return {f"rng/r{r}/{k}": torch.frombuffer(bytearray(b), dtype=torch.uint8)
            for r, got in enumerate(gathered) for k, b in got.items()}


def capture(params: dict, opt, gen, device) -> dict[str, torch.Tensor]:
    """The training state now, as a flat dict of tensors (the live tensors: digest or copy before the next step)."""
    state = {f"params/{n}": p.detach() for n, p in params.items()}
    for n, p in params.items():
        for key, value in opt.state.get(p, {}).items():
            state[f"opt/{key}/{n}"] = value.detach() if torch.is_tensor(value) else torch.tensor(float(value))
    state["data"] = gen.get_state()
    state.update(_all_rng(device))
    return state


def restore(state: dict[str, torch.Tensor], params: dict, opt, gen, device) -> int:
    """Put ``state`` into the model's parameters, the optimizer, the batches' generator and this rank's
    default generators; the optimizer's step count it holds. Rejected when it does not fit the model."""
    names = {k[len("params/"):] for k in state if k.startswith("params/")}
    if names != set(params):
        extra, missing = sorted(names - set(params))[:3], sorted(set(params) - names)[:3]
        raise Rejected(f"retrain: a served state does not fit the model (extra {extra}, missing {missing})")
    with torch.no_grad():
        for n, p in params.items():
            t = state[f"params/{n}"]
            if t.shape != p.shape or t.dtype != p.dtype:
                raise Rejected(f"retrain: a served state's {n} is {t.dtype} {list(t.shape)}, the model's "
                               f"{p.dtype} {list(p.shape)}")
            p.copy_(t)
    opt.state.clear()
    steps = []
    fused = any(g.get("fused") or g.get("capturable") for g in opt.param_groups)
    for key, t in state.items():
        parts = key.split("/", 2)
        if parts[0] != "opt":
            continue
        if len(parts) != 3 or parts[2] not in params:
            raise Rejected(f"retrain: a served state names optimizer state {key[:80]!r} of no parameter")
        p = params[parts[2]]
        if parts[1] != "step" and t.shape != p.shape:
            raise Rejected(f"retrain: a served state's {key[:80]} does not fit its parameter")
        on = p.device if parts[1] != "step" or fused else t.device
        opt.state.setdefault(p, {})[parts[1]] = t.to(on).clone()
        if parts[1] == "step":
            steps.append(float(t))
    gen.set_state(_bytes_state(state, "data"))
    rank, _ = _rank_world()
    torch.set_rng_state(_bytes_state(state, f"rng/r{rank}/cpu"))
    if torch.device(device).type == "cuda" and f"rng/r{rank}/cuda" in state:
        torch.cuda.set_rng_state(_bytes_state(state, f"rng/r{rank}/cuda"), torch.device(device))
    return int(max(steps)) if steps else 0


def _bytes_state(state: dict, key: str) -> torch.Tensor:
    t = state.get(key)
    if t is None or t.dtype != torch.uint8 or t.dim() != 1:
        raise Rejected(f"retrain: a served state has no valid {key!r} (a uint8 generator state)")
    return t.clone()


class _Hook:
    """What the recorder and the replays share: the loop's objects and the fingerprints of its steps."""

    def __init__(self):
        self.params: dict = {}
        self.opt = self.gen = self.device = None
        self._fingerprints: list[str] = []
        self._pending: list = []  # (loss, gnorm) tensors not read yet: on a GPU, read at the next link
        self.current = 0  # the last step taken (a ReplayFollow reads it)

    @property
    def fingerprints(self) -> list[str]:
        """Every step's fingerprint so far (reading the device's values once, not at every step)."""
        if self._pending:
            self._fingerprints += [fingerprint(float(loss), float(gnorm)) for loss, gnorm in self._pending]
            self._pending = []
        return self._fingerprints

    @fingerprints.setter
    def fingerprints(self, value: list[str]) -> None:
        self._fingerprints, self._pending = list(value), []

    def _bind(self, params, opt, gen, device) -> None:
        self.params, self.opt, self.gen, self.device = dict(params), opt, gen, device

    def _fingerprint(self, step: int, loss, gnorm) -> None:
        self.current = step
        self._pending.append((loss.detach(), gnorm.detach()))

    def state(self) -> dict[str, torch.Tensor]:
        return capture(self.params, self.opt, self.gen, self.device)


class Recorder(_Hook):
    """Commits to a run: the state's digest at every link, the steps' fingerprints between them."""

    def __init__(self, every: int, keep: Path | None = None, keep_bytes: int = KEEP_BYTES, follower=None):
        super().__init__()
        self.every, self.keep, self.keep_bytes, self.follower = every, keep, keep_bytes, follower
        self.at: list[int] = []
        self.links: list[list[str]] = []  # [S_i, F_i]
        self.components: list[dict[str, str]] = []  # each link's component digests
        self.follow: list[list[int]] = []  # [step, version] of each rebase onto a newer version
        self.kept: dict[int, str] = {}  # link index -> state file name
        self._since = 0  # fingerprints since the last link
        self._rebases = 0
        self._kept_bytes = 0

    def begin(self, params, opt, gen, done: int, steps: int, device="cpu") -> tuple[int, int, int]:
        self._bind(params, opt, gen, device)
        self.at = link_steps(steps, self.every)
        self._link(0)
        return 0, steps, done

    def step(self, step: int, loss, gnorm) -> None:
        self._fingerprint(step, loss, gnorm)
        if self.follower is not None and self.follower.rebases != self._rebases:
            self._rebases = self.follower.rebases
            self.follow.append([step, self.follower.base.version])
        if step in self.at[1:]:
            self._link(self.at.index(step))

    def followed_at_end(self, step: int) -> None:
        """The last look at main after the loop (participant/train.py) moved the weights: recorded at ``step``."""
        if self.follower is not None and self.follower.rebases != self._rebases:
            self._rebases = self.follower.rebases
            self.follow.append([step, self.follower.base.version])

    def _link(self, i: int) -> None:
        rank, _ = _rank_world()
        state = self.state()  # a collective under torchrun: every rank takes part
        if rank != 0:
            return
        comps = digests(state, COMPONENTS)
        fps = self.fingerprints[len(self.fingerprints) - (self.at[i] - self.at[i - 1]):] if i else []
        self.links.append([state_digest(comps), segment_digest(fps) if i else ""])
        self.components.append(comps)
        if self.keep is not None and self._keeps(i, state):
            name = f"link-{i:04d}.safetensors"
            self.keep.mkdir(parents=True, exist_ok=True)
            save_atomic(state, self.keep / name, metadata={"step": str(self.at[i])}, durable=False)
            self.kept[i] = name
            self._write_fingerprints(i, fps)

    def _keeps(self, i: int, state: dict) -> bool:
        """Link 0 and the final segment's start always; the others while the budget lasts."""
        size = sum(t.numel() * t.element_size() for t in state.values())
        if i in (0, len(self.at) - 2):
            return True
        if self._kept_bytes + size > self.keep_bytes:
            return False
        self._kept_bytes += size
        return True

    def _write_fingerprints(self, i: int, fps: list[str]) -> None:
        if i:
            (self.keep / f"steps-{i:04d}.txt").write_text(",".join(fps))

    def segment_fingerprints(self, i: int) -> list[str]:
        """The fingerprints of segment i-1 -> i (steps at[i-1]+1 .. at[i])."""
        return self.fingerprints[self.at[i - 1]:self.at[i]]


class Replay(_Hook):
    """One segment replayed from a served state: steps first+1 .. last; its fingerprints and end digest."""

    def __init__(self, state: dict[str, torch.Tensor], first: int, last: int, keep_end: bool = False):
        super().__init__()
        self.start_state, self.first, self.last, self.keep_end = state, first, last, keep_end
        self.end: dict[str, str] | None = None  # the end state's component digests
        self.end_state: dict[str, torch.Tensor] | None = None  # a copy, with keep_end

    def begin(self, params, opt, gen, done: int, steps: int, device="cpu") -> tuple[int, int, int]:
        self._bind(params, opt, gen, device)
        if not 0 <= self.first < self.last <= steps:
            raise Rejected(f"retrain: segment {self.first}..{self.last} is not within its {steps} steps")
        opt_steps = restore(self.start_state, self.params, opt, gen, device)
        self.start_state = {}  # restored: the copies are the model's now
        self.current = self.first
        return self.first, self.last, (opt_steps - self.first if opt_steps else done)

    def step(self, step: int, loss, gnorm) -> None:
        self._fingerprint(step, loss, gnorm)
        if step == self.last:
            state = self.state()
            if _rank_world()[0] == 0:
                self.end = digests(state, COMPONENTS)
                if self.keep_end:
                    self.end_state = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


class StartCheck(_Hook):
    """The state at step 0 as training would begin it (the version's weights, a fresh optimizer, adapters
    from the seed), digested; raises Stop so that no step is taken."""

    def __init__(self):
        super().__init__()
        self.start: dict[str, str] | None = None

    def begin(self, params, opt, gen, done: int, steps: int, device="cpu") -> tuple[int, int, int]:
        self._bind(params, opt, gen, device)
        self.start = digests(self.state(), COMPONENTS)
        raise Stop()

    def step(self, step: int, loss, gnorm) -> None:  # never reached
        raise Stop()
