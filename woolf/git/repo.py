"""The real `git` binary, called with a clean environment.

Usage:
    g = Git(repo_dir)
    head = g.rev_parse("refs/heads/main")
    blob = g.show_bytes(f"{head}:ledger/woolf.toml")
    commit = g.commit_tree_with(head, {"path/in/tree": b"content"}, message, parents=[head])
    g.sign_key = "/path/to/ssh/key"   # then every commit made here is SSH-signed (gpg.format = ssh)
    g.push("origin", [(commit, "refs/heads/main")], leases={"refs/heads/main": head})
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from woolf.errors import ForgeError, NotALedgerError, RaceLostError
from woolf.git import batch, memo
from woolf.git.commits import commit_bytes, commit_records, object_bytes
from woolf.git.keys import signing_key
from woolf.git.process import (  # noqa: F401  (re-exported: the names callers know Git by)
    COMMIT_MAX_BYTES,
    IDENTITY,
    BlobTooLargeError,
    GitError,
    as_text,
    clean_env,
)
from woolf.git.trees import tree_with

_UNSET = object()
# seconds between fetches that lost a local ref lock to another process of the same clone, and what git
# says then (a lock held, a value moved or a ref created since the fetch read it; not a name clash)
_REF_LOCK_PAUSES = (0.1, 0.3, 0.6, 1.2, 2.4)
_REF_LOCK_LOST = ("': File exists", "but expected", "reference already exists")


class Git:
    def __init__(self, cwd: Path, identity: dict | None = None, keep_env: dict | None = None):
        self.cwd = Path(cwd)
        self.identity = identity or {}
        self._git_dir: Path | None = None
        self.keep_env = keep_env or {}  # GIT_* a hook must keep (its quarantined object directory)
        self._sign_key = _UNSET

    @property
    def sign_key(self) -> str | None:
        """The SSH key commits made here are signed with (see woolf/git/keys.py), or None."""
        if self._sign_key is _UNSET:
            self._sign_key = signing_key(self)
        return self._sign_key

    @sign_key.setter
    def sign_key(self, key: str | None) -> None:
        self._sign_key = key

    def sign_args(self) -> list[str]:
        key = self.sign_key
        return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key}"] if key else []

    def run(self, *args: str, input: bytes | None = None, env: dict | None = None,
            check: bool = True) -> subprocess.CompletedProcess:
        extra = {**self.identity_env(), **self.keep_env, **(env or {})}
        proc = subprocess.run(
            ["git", *args], cwd=self.cwd, input=input, capture_output=True,
            env=clean_env(extra),
        )
        if check and proc.returncode != 0:
            raise GitError(args, proc.returncode, proc.stderr.decode(errors="replace"))
        return proc

    def identity_env(self) -> dict:
        env = dict(IDENTITY)
        name = self.identity.get("name")
        if name:
            env["GIT_AUTHOR_NAME"] = env["GIT_COMMITTER_NAME"] = name
            env["GIT_AUTHOR_EMAIL"] = env["GIT_COMMITTER_EMAIL"] = f"{name}@woolf.local"
        return env

    def out(self, *args: str, **kw) -> str:
        return as_text(self.run(*args, **kw).stdout).strip()

    # -- reading ---------------------------------------------------------
    def rev_parse(self, rev: str) -> str | None:
        key = memo.immutable(str(self.cwd), rev, "commit")  # a full commit id this repository has: itself
        if memo.recall(key) is not memo.NOT_KNOWN:
            return rev
        found = self._commit_id(rev)
        if found is not None:
            memo.known_commit(str(self.cwd), found)
            if found == rev:
                memo.remember(key, True)
        return found

    def _commit_id(self, rev: str) -> str | None:
        got = batch.info(self, f"{rev}^{{commit}}")  # woolf/git/batch.py: no process per read
        if got is batch.NOT_SERVED:
            proc = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
            return proc.stdout.decode().strip() or None
        return got[0] if got is not None and got[1] == "commit" else None

    def object_info(self, spec: str) -> tuple[str, str, int] | None:
        """(oid, type, size) of ``spec`` without reading it, or None when it does not exist."""
        if "\n" in spec:
            return None
        key = memo.immutable(str(self.cwd), spec, "info")
        hit = memo.recall(key)
        if hit is not memo.NOT_KNOWN:
            return hit
        info = batch.info(self, spec)
        if info is batch.NOT_SERVED:
            proc = self.run("cat-file", "--batch-check", input=spec.encode() + b"\n", check=False)
            parts = as_text(proc.stdout).split()
            if proc.returncode != 0 or len(parts) != 3 or not parts[2].isdigit():
                return None
            info = parts[0], parts[1], int(parts[2])
        if info is None:
            return None
        memo.remember(key, info)
        return info

    def show_bytes(self, spec: str, max_bytes: int | None = None) -> bytes | None:
        """A blob's bytes, or None if there is none; over ``max_bytes`` raises before reading.

        One `git cat-file --batch`: the object's type and size are read before its bytes. What a full
        commit id and a path name is remembered (woolf/git/memo.py): read once per process."""
        key = memo.immutable(str(self.cwd), spec)
        hit = memo.recall(key)
        if hit is memo.MISSING:
            return None
        if hit is memo.NOT_KNOWN:
            hit = self._blob(spec, max_bytes)
            if hit is not None:
                memo.remember(key, hit, len(hit))
            elif memo.absent_for_good(key):
                memo.remember(key, memo.MISSING)
        if hit is not None and max_bytes is not None and len(hit) > max_bytes:
            raise BlobTooLargeError(spec, len(hit), max_bytes)
        return hit

    def _blob(self, spec: str, max_bytes: int | None) -> bytes | None:
        return object_bytes(self, spec, "blob", max_bytes)

    def commit_bytes(self, commit: str, max_bytes: int = COMMIT_MAX_BYTES) -> bytes:
        """A commit object's bytes, its size read first (woolf/git/commits.py)."""
        return commit_bytes(self, commit, max_bytes)

    def commit_records(self, shas: list[str],
                       max_bytes: int = COMMIT_MAX_BYTES) -> list[tuple[str, list[str], int, str]]:
        """(sha, parents, committer time, message) of each commit, framed by size (woolf/git/commits.py)."""
        return commit_records(self, shas, max_bytes)

    def commit_time(self, commit: str) -> int | None:
        """A commit's committer time (`%ct`), None when it is no commit git reads whole (commit_records)."""
        return next((time for _, _, time, _ in self.commit_records([commit])), None)

    def message(self, commit: str, max_bytes: int = COMMIT_MAX_BYTES) -> str:
        """A commit's message; a commit over ``max_bytes`` raises BlobTooLargeError unread."""
        raw = as_text(self.commit_bytes(commit, max_bytes))
        return raw.split("\n\n", 1)[1] if "\n\n" in raw else ""

    def parents(self, commit: str) -> list[str]:
        """A commit's parents; a full commit id's are remembered for the process (woolf/git/memo.py)."""
        key = memo.immutable(str(self.cwd), commit, "parents")
        hit = memo.recall(key)
        if hit is not memo.NOT_KNOWN:
            return list(hit)
        found = self.out("rev-list", "--parents", "-n", "1", commit).split()
        if key is not None and found[:1] == [commit]:  # it was a commit of this repository (not a tag)
            memo.known_commit(str(self.cwd), commit)
            memo.remember(key, tuple(found[1:]), 64 * len(found))
        return found[1:]

    def is_ancestor(self, a: str, b: str) -> bool:
        return self.run("merge-base", "--is-ancestor", a, b, check=False).returncode == 0

    def ls_tree(self, commit: str) -> dict[str, tuple[str, str, str]]:
        """{path: (mode, type, object)} for every entry, recursively."""
        raw = as_text(self.run("ls-tree", "-r", "-z", "--full-tree", commit).stdout)
        entries = {}
        for item in filter(None, raw.split("\0")):
            meta, path = item.split("\t", 1)
            mode, typ, obj = meta.split()
            entries[path] = (mode, typ, obj)
        return entries

    def changed_paths(self, a: str, b: str) -> list[str]:
        raw = self.run("diff-tree", "-r", "-z", "--no-renames", "--name-only", a, b).stdout
        return [p for p in as_text(raw).split("\0") if p]

    def diff_raw(self, a: str, b: str) -> list[tuple[str, str, str, str]]:
        """(old mode, new mode, status letter, path) for each change from a to b."""
        raw = as_text(self.run("diff-tree", "-r", "-z", "--no-renames", "--raw", a, b).stdout)
        parts = raw.split("\0")
        out = []
        for meta, path in zip(parts[0::2], parts[1::2], strict=False):
            if not meta:
                continue
            old_mode, new_mode, _, _, status = meta.lstrip(":").split()
            out.append((old_mode, new_mode, status, path))
        return out

    def refs(self, pattern: str) -> dict[str, str]:
        raw = self.out("for-each-ref", "--format=%(refname) %(objectname)", pattern)
        pairs = (line.split(" ", 1) for line in raw.splitlines() if line)
        return {ref: sha for ref, sha in pairs}

    def refs_typed(self, pattern: str) -> dict[str, tuple[str, str]]:
        """{ref: (object id, object type)}: a ref may point at a blob or a tree, not only a commit."""
        raw = self.out("for-each-ref", "--format=%(objectname) %(objecttype) %(refname)", pattern)
        found = {}
        for line in raw.splitlines():
            sha, typ, ref = (line.split(" ", 2) + ["", ""])[:3]
            if ref:
                found[ref] = (sha, typ)
        return found

    def first_logged(self, ref: str) -> int | None:
        """Unix time of the oldest reflog entry of ``ref`` in this repository (when it first arrived here)."""
        if self._git_dir is None:
            self._git_dir = self.cwd / self.out("rev-parse", "--git-common-dir")
        try:
            with open(self._git_dir / "logs" / ref, "rb") as fh:
                line = as_text(fh.readline(4096))
        except OSError:
            return None
        stamp = line.split("\t", 1)[0].rsplit(" ", 2)
        return int(stamp[1]) if len(stamp) == 3 and stamp[1].isdigit() else None

    # -- writing ---------------------------------------------------------
    def commit_tree_with(self, base: str, files: dict[str, bytes | tuple[str, bytes] | None],
                         message: str, parents: list[str]) -> str:
        """A commit whose tree is ``base``'s tree with ``files`` written (None deletes; a value may be
        (mode, bytes) for another mode than 100644): woolf/git/trees.py, in a private index."""
        return self.commit_tree(tree_with(self, base, files), message, parents)

    def commit_tree(self, tree: str, message: str, parents: list[str]) -> str:
        """A commit of ``tree``; signed with ``sign_key`` when there is one."""
        args = [*self.sign_args(), "commit-tree", tree, *(a for p in parents for a in ("-p", p))]
        if self.sign_key:
            args.append("-S")
        return self.out(*args, "-F", "-", input=message.encode())

    def push(self, remote: str, updates: list[tuple[str, str]],
             leases: dict[str, str | None]) -> None:
        """Atomically set refs on ``remote``; each lease is a compare-and-swap.

        leases[ref] = expected sha, or None for "must not exist yet". Raises
        RaceLostError when another writer got there first.
        """
        args = ["push", "--atomic", "--porcelain", "--no-verify"]
        for ref, expect in leases.items():
            args.append(f"--force-with-lease={ref}:{expect or ''}")
        args.append(remote)
        args += [f"{src}:{dst}" for src, dst in updates]
        proc = self.run(*args, check=False)
        if proc.returncode == 0:
            return
        text = (proc.stdout + proc.stderr).decode(errors="replace")
        if "hook declined" in text:  # the hub's rules (woolf/protocol/rules/push.py), not a race
            said = [ln.split("refused: ", 1)[1] for ln in text.splitlines() if "woolf hub: refused: " in ln]
            raise ForgeError(f"the hub refused the push: {'; '.join(said) or text.strip()[-400:]}",
                             hint="see docs/protocol.md#the-hub for what a hub accepts")
        if "stale info" in text or "rejected" in text or "atomic push failed" in text:
            raise RaceLostError(f"push to {remote} lost a race: {text.strip()[-400:]}")
        raise ForgeError(f"push to {remote} failed: {text.strip()[-800:]}",
                         hint="is the origin reachable and writable?")

    def last_fetch_time(self) -> float | None:
        """FETCH_HEAD's mtime, or for a clone never fetched since, the time its first reflog line records."""
        fetch_head, log = (self.cwd / p for p in self.out(
            "rev-parse", "--git-path", "FETCH_HEAD", "--git-path", "logs/refs/remotes/origin/HEAD").splitlines())
        if fetch_head.exists():
            return fetch_head.stat().st_mtime
        try:  # "<old> <new> <name> <email> <unix time> <tz>\tclone: from ..."
            return float(log.read_text(errors="replace").split("\n", 1)[0].split("\t")[0].split()[-2])
        except (OSError, IndexError, ValueError):
            return None

    def fetch(self, remote: str, *refspecs: str) -> None:
        for pause in (*_REF_LOCK_PAUSES, None):
            # every fetched ref gets a reflog: its first entry is when this clone received it (queue order)
            proc = self.run("-c", "core.logAllRefUpdates=always", "fetch", "--quiet", "--no-tags", "--prune",
                            remote, *refspecs, check=False)
            if proc.returncode == 0:
                return
            err = proc.stderr.decode(errors="replace")
            if pause is None or "cannot lock ref" not in err or not any(m in err for m in _REF_LOCK_LOST):
                break
            # another process of this clone moved or held a ref this fetch updates (`woolf train` mirrors
            # each task record it pushes; a `woolf tasks` fetches the same refs): git refuses the update
            # rather than overwrite a value it did not read. Fetching again reads the new value.
            time.sleep(pause)
        raise ForgeError(f"cannot fetch from {remote}: {err.strip()[-400:]}",
                         hint="check that the origin exists and you can reach it")


def toplevel(path: Path) -> Path:
    if not Path(path).is_dir():
        raise NotALedgerError(f"{path} is not a directory" if Path(path).exists() else f"{path} does not exist",
                              hint="pass a ledger clone's directory with -C / WOOLF_DIR")
    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=path,
                          capture_output=True, env=clean_env())
    if proc.returncode != 0:
        raise NotALedgerError(f"{path} is not inside a git repository",
                              hint="run this inside a ledger clone, or `woolf init PATH`")
    return Path(proc.stdout.decode().strip())
