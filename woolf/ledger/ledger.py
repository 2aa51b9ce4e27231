"""The Training Ledger: a git repository whose first-parent history on main is the model.

Usage:
    ledger = Ledger.init(Path("hub-work"), storage="/srv/woolf-storage")
    ledger = Ledger.open(Path("."))
    ledger.log(limit=10); ledger.show(3); ledger.checkout(3, Path("v3.safetensors"))
    ledger.status(); ledger.pull()
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from woolf.errors import (
    IntegrityError,
    NotALedgerError,
    StorageError,
    UnknownVersionError,
    UsageError,
)
from woolf.git.repo import Git, toplevel
from woolf.ledger.create import CreateOptions, create_ledger
from woolf.protocol import layout
from woolf.protocol.config import LedgerConfig, load_config, parse_config
from woolf.protocol.versions import Version, read_versions, version_from_message
from woolf.storage.dvcstore import DvcStore
from woolf.storage.files import copy_atomic
from woolf.storage.pointer import Pointer
from woolf.workloads.features import BIND, features_of

# weights (torch or numpy) are imported where they are touched: `woolf log` reads git only.


@dataclass
class Status:
    version: int
    commit: str
    weights_path: str
    weights_match: bool | None  # None: no local weights file
    storage_url: str
    storage_reachable: bool
    storage_error: str | None
    behind_origin: int | None
    fetched_at: float | None = None  # when this clone last heard from origin (None: never, or no origin)

    def to_json(self) -> dict:
        return self.__dict__.copy()


class Ledger:
    def __init__(self, root: Path):
        self.root = Path(root).resolve()
        self.git = Git(self.root)
        self.store = DvcStore(self.root)
        self._config: LedgerConfig | None = None
        self._workload: tuple | None = None
        self._origin_seen = False
        # Which ref is "main" for reading: a validator reads origin's, never its own checkout's.
        self.main_ref = layout.MAIN
        self.last_rebuild: dict | None = None  # set when weights_path rebuilt a version storage does not keep

    # -- opening and creating ------------------------------------------------
    @classmethod
    def open(cls, path: Path = Path(".")) -> Ledger:
        root = toplevel(Path(path))
        ledger = cls(root)
        if ledger.git.rev_parse(layout.MAIN) is None or ledger.git.show_bytes(
            f"{layout.MAIN}:{layout.CONFIG}"
        ) is None:
            raise NotALedgerError(
                f"{root} is a git repository but not a ledger (no {layout.CONFIG} on main)",
                hint="clone a ledger, or create one with `woolf init PATH`",
            )
        _ = ledger.config  # a bad config is reported before anything else happens
        return ledger

    @classmethod
    def init(cls, path: Path, options: CreateOptions | None = None) -> Ledger:
        """Create a ledger at ``path`` with version 0 from a CreateOptions (None: its defaults;
        woolf/ledger/create.py)."""
        create_ledger(path, options)
        return cls(Path(path).resolve())

    @property
    def config(self) -> LedgerConfig:
        """The config on main: what validators trust (the workspace copy may be edited)."""
        if self._config is None:
            text = self.git.show_bytes(f"{self.main_ref}:{layout.CONFIG}")
            if text is None:
                self._config = load_config(self.root / layout.CONFIG)
            else:
                self._config = parse_config(text.decode(), layout.CONFIG)
        return self._config

    def staleness(self, base: str, head: str) -> int:
        """Versions on ``head``'s first-parent chain since ``base`` (a commit on it): a delta's staleness."""
        return int(self.git.out("rev-list", "--count", "--first-parent", f"{base}..{head}"))

    def reread_config(self) -> None:
        """The config is read again from main at its next use (main moved, or ``main_ref`` changed)."""
        self._config = None

    def workload(self):
        """The config's workload, given main's model files when it keeps some there (transformers)."""
        from woolf.workloads.base import load_workload  # deferred: loads torch

        cfg = self.config
        if self._workload is None or self._workload[0] != cfg:  # one per config (re-read per PR): built once
            wl = load_workload(cfg.workload)
            if BIND in features_of(wl):
                wl.bind(lambda rel: self.git.show_bytes(f"{self.main_ref}:{rel}"))
            self._workload = (cfg, wl)
        return self._workload[1]

    def benchmark(self, rev: str | None = None) -> bytes:
        cfg = self.config
        rev = rev or self.main_ref
        data = self.git.show_bytes(f"{rev}:{cfg.benchmark.path}")
        if data is None:
            raise IntegrityError(f"benchmark {cfg.benchmark.path} is missing from {rev}")
        if cfg.benchmark.sha256 and hashlib.sha256(data).hexdigest() != cfg.benchmark.sha256:
            raise IntegrityError(f"benchmark {cfg.benchmark.path} does not match benchmark.sha256")
        return data

    # -- reading ---------------------------------------------------------------
    def head(self, ref: str | None = None) -> Version:
        ref = ref or self.main_ref
        versions = read_versions(self.git, ref, limit=1)
        if not versions:
            raise IntegrityError(f"the tip of {ref} is not a version commit (no Woolf-Version trailer)",
                                 hint="main must only move by `woolf init` and validator merges")
        return versions[0]

    def log(self, limit: int | None = None, ref: str | None = None) -> list[Version]:
        return read_versions(self.git, ref or self.main_ref, limit=limit)

    def show(self, number: int, ref: str | None = None) -> Version:
        ref = ref or self.main_ref
        head = self.head(ref)
        if not 0 <= number <= head.version:
            raise UnknownVersionError(
                f"version {number} does not exist; this ledger has versions 0..{head.version}",
                hint="`woolf pull` to see newer versions",
            )
        commit = self.git.rev_parse(f"{head.commit}~{head.version - number}")
        found = self.version_at(commit) if commit else None
        if found is None or found.version != number:
            raise IntegrityError(f"the first-parent chain of {ref} is not numbered 0..{head.version}",
                                 hint="run `woolf audit`")
        return found

    def on_chain(self, version: Version, head: Version) -> bool:
        """Is ``version`` on ``head``'s first-parent chain, at its numbered place?"""
        if version.version > head.version:
            return False
        return self.git.rev_parse(f"{head.commit}~{head.version - version.version}") == version.commit

    def version_at(self, commit: str) -> Version | None:
        for _, parents, time, message in self.git.commit_records([commit]):  # one read (woolf/git/commits.py)
            return version_from_message(commit, parents, time, message)
        parents = self.git.parents(commit)  # no commit git reads whole: read as before, and fail as before
        time = int(self.git.out("show", "-s", "--format=%ct", commit))
        return version_from_message(commit, parents, time, self.git.message(commit))

    def pointer(self, commit: str, path: str = layout.POINTER) -> Pointer:
        data = self.git.show_bytes(f"{commit}:{path}")
        if data is None:
            raise IntegrityError(f"commit {commit[:12]} has no {path}")
        return Pointer.parse(data, f"{commit[:12]}:{path}")

    def weights_path(self, version: Version) -> Path:
        """Cache path of a version's weights, fetched if needed and sha256-verified."""
        ptr = self.pointer(version.commit)
        try:
            path = self.store.fetch_object(ptr)
        except (StorageError, IntegrityError) as exc:  # gc removed it, or other bytes sit at its path
            path = self._rebuilt(version, exc)
        self._verify_sha(path, version, ptr)
        return path

    def _rebuilt(self, version: Version, missing: StorageError) -> Path:
        """`woolf gc` removed it: replayed from a snapshot and the deltas, bit for bit."""
        from woolf.ledger.retention.rebuild import rebuild_missing  # deferred: loads torch, numpy

        return rebuild_missing(self, version, missing)

    def _verify_sha(self, path: Path, version: Version, ptr: Pointer) -> None:
        md5, sha = self.store.hashes(path)
        if md5 == ptr.md5 and (version.weights_sha256 in (None, sha)):
            return
        path.unlink(missing_ok=True)  # a bad cache object must not be served again
        raise IntegrityError(
            f"weights of version {version.version} do not match their recorded hash "
            "(corrupted or tampered)",
            hint="fetch again (`woolf checkout` re-downloads); if storage holds bad bytes, run `woolf audit`",
        )

    def state_path(self, version: Version) -> Path | None:
        """Cache path of a version's outer (merge-rule) state, sha256-verified; None if it has none."""
        if self.git.show_bytes(f"{version.commit}:{layout.STATE_POINTER}") is None:
            if version.state_sha256:
                raise IntegrityError(f"version {version.version} records an outer state but has no "
                                     f"{layout.STATE_POINTER}", hint="run `woolf audit`")
            return None
        ptr = self.pointer(version.commit, layout.STATE_POINTER)
        try:
            path = self.store.fetch_object(ptr)
        except (StorageError, IntegrityError) as exc:
            raise type(exc)(f"outer state of version {version.version}: {exc.message}",
                            hint="nothing can be merged on this version until its state is back in "
                                 "storage as recorded; run `woolf audit`") from None
        md5, sha = self.store.hashes(path)
        if md5 != ptr.md5 or not version.state_sha256 or sha != version.state_sha256:
            path.unlink(missing_ok=True)
            raise IntegrityError(f"outer state of version {version.version} does not match its "
                                 "recorded hash (corrupted or tampered)", hint="run `woolf audit`")
        return path

    def load_weights(self, version: Version, numpy: bool = False) -> dict:
        """A version's weights, sha256-verified: an object not yet verified is hashed as it is loaded."""
        from woolf.storage.weights import load_trusted  # deferred: loads numpy

        ptr = self.pointer(version.commit)
        try:
            path, tensors = self.store.fetch_object(ptr, read=lambda p, on_block: load_trusted(
                p, numpy=numpy, on_block=on_block))
        except StorageError as exc:
            path = self._rebuilt(version, exc)
            self._verify_sha(path, version, ptr)
            return load_trusted(path, numpy=numpy)
        self._verify_sha(path, version, ptr)  # the hashes recorded on the way
        return tensors

    def checkout(self, number: int, out: Path | None = None) -> Path:
        version = self.show(number)
        out = Path(out) if out else self.root / layout.WORK / "versions" / f"v{number}.safetensors"
        copy_atomic(self.weights_path(version), out)  # sha256-verified against the version's record
        return out

    def status(self) -> Status:
        head = self.head()
        ptr = self.pointer(head.commit)
        local = self.root / layout.WEIGHTS
        match = None
        if local.exists():
            match = local.stat().st_size == ptr.size and self.store.hashes(local)[0] == ptr.md5
        ok, err = self.store.reachable()
        behind = None
        if self.git.rev_parse("refs/remotes/origin/main"):
            behind = int(self.git.out("rev-list", "--count", "--first-parent",
                                      "refs/heads/main..refs/remotes/origin/main"))
        url = self.store.remote_url()
        return Status(head.version, head.commit, str(local), match, url, ok,
                      None if ok else err, behind, self.last_fetch())

    # -- syncing ---------------------------------------------------------------
    def has_origin(self) -> bool:
        """Whether the clone has an 'origin' remote; once seen, remembered (woolf never removes one)."""
        if not self._origin_seen:
            self._origin_seen = "origin" in self.git.out("remote").split()
        return self._origin_seen

    def last_fetch(self) -> float | None:
        """When this clone last fetched from origin (or was cloned); None if it has no origin."""
        return self.git.last_fetch_time() if self.has_origin() else None

    def has_pr_refs(self) -> bool:
        return bool(self.git.out("for-each-ref", "--count=1", "--format=%(refname)", layout.PR_PREFIX))

    def fetch(self, prs: bool = True) -> None:
        """origin's main (and, unless ``prs`` is False, every PR ref)."""
        if not self.has_origin():
            raise UsageError("this ledger has no 'origin' remote",
                             hint="clone the ledger from its hub, or `git remote add origin URL`")
        specs = ["+refs/heads/main:refs/remotes/origin/main"]
        if prs:
            specs.append(f"+{layout.PR_PREFIX}/*:{layout.PR_PREFIX}/*")
        self.git.fetch("origin", *specs)

    def pull(self) -> Version:
        """Fast-forward main to origin's, then materialise the current weights."""
        self.fetch()
        dirty = self.git.out("status", "--porcelain", "--untracked-files=no")
        branch = self.git.out("rev-parse", "--abbrev-ref", "HEAD")
        if branch != "main":
            raise UsageError(f"the checkout is on {branch!r}, not main", hint="`git switch main`")
        if dirty:
            raise UsageError(f"uncommitted changes to ledger files:\n{dirty}",
                             hint="commit or `git stash` them, then pull again")
        proc = self.git.run("merge", "--ff-only", "-q", "refs/remotes/origin/main", check=False)
        if proc.returncode != 0:
            raise UsageError("local main has diverged from origin/main; cannot fast-forward",
                             hint="a ledger's main only moves by validators: `git reset --hard origin/main`")
        self._config = None
        head = self.head()
        self.materialize(head)
        return head

    def materialize(self, version: Version) -> Path:
        local = self.root / layout.WEIGHTS
        ptr = self.pointer(version.commit)
        if local.exists() and local.stat().st_size == ptr.size and self.store.hashes(local)[0] == ptr.md5:
            return local
        src = self.weights_path(version)
        self.store.materialize(ptr, local)
        self.store.verified.record(local, *self.store.hashes(src))
        return local
