"""Build hand-made (often hostile) submissions for validator tests.

Usage:
    sub_id = craft_pr(ledger, tensors=delta)                        # a well-formed PR
    craft_pr(ledger, raw=b"junk", extra_files={"ledger/woolf.toml": b"..."})
    craft_pr(ledger, tensors=delta, who="alice", sign_key=key_for("mallory"))   # signed by someone else
    open_prs(ledger, [craft_commit(ledger, tensors=d, fetch=False) for d in deltas])   # 16 per push
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path

from safetensors.torch import save

from woolf.forges.local import LocalForge
from woolf.protocol import layout
from woolf.protocol.rules.flood import PUSH_MAX_NEW_PRS
from woolf.storage.files import hashes_of_file


def craft_pr(led, tensors=None, raw: bytes | None = None, extra_files=None, meta_patch=None,
             base=None, parent: str | None = None, who: str = "mallory", files_patch=None, forge=None,
             remote: str = "storage", sign_key=None, sub_id: str | None = None) -> str:
    """``sign_key``: sign the submission commit with this key (default: ``who``'s own listed key when it
    has one, as that contributor's clone would; else unsigned; False: unsigned). A PR naming a listed
    contributor that her key did not sign is nobody's (issue 25, breach 3)."""
    sub_id, commit = craft_commit(led, tensors, raw, extra_files, meta_patch, base, parent, who, files_patch,
                                  remote, sign_key, sub_id)
    (forge or LocalForge.for_ledger(led)).open(sub_id, commit)
    return sub_id


def open_prs(led, made: list[tuple[str, str]]) -> list[str]:
    """Open crafted PRs [(id, commit)] on the hub in order, as many per push as the hub takes
    (PUSH_MAX_NEW_PRS): what one contributor's ``woolf submit`` loop leaves, in fewer hook runs."""
    refs = [(commit, f"{layout.PR_PREFIX}/{sub_id}/head") for sub_id, commit in made]
    for i in range(0, len(refs), PUSH_MAX_NEW_PRS):
        chunk = refs[i:i + PUSH_MAX_NEW_PRS]
        led.git.push("origin", chunk, leases={ref: None for _, ref in chunk})
        for commit, ref in chunk:
            led.git.run("update-ref", "--create-reflog", ref, commit)
    return [sub_id for sub_id, _ in made]


def craft_prs(led, cases: list[dict]) -> list[str]:
    """craft_pr for each of ``cases`` (its keyword arguments), main fetched once, opened in order
    and together: 16 per push (open_prs). For PRs that wait in the queue together anyway."""
    return open_prs(led, [craft_commit(led, fetch=i == 0, **kw) for i, kw in enumerate(cases)])


def craft_commit(led, tensors=None, raw: bytes | None = None, extra_files=None, meta_patch=None,
                 base=None, parent: str | None = None, who: str = "mallory", files_patch=None,
                 remote: str = "storage", sign_key=None, sub_id: str | None = None,
                 fetch: bool = True) -> tuple[str, str]:
    """(id, commit) of a crafted submission, its delta in storage, not opened yet (craft_pr's arguments;
    ``fetch``: False when the clone fetched main already)."""
    from tests.conftest import CONTRIBUTORS, key_for

    if sign_key is None and who in CONTRIBUTORS:
        sign_key = key_for(who)
    if fetch:
        led.fetch()
    base = base or led.head("refs/remotes/origin/main")
    sub_id = sub_id or f"20261129T000000{secrets.randbelow(999):03d}Z-{who}-{secrets.token_hex(4)}"
    data = raw if raw is not None else save(tensors)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "delta.safetensors"
        p.write_bytes(data)
        md5, sha = hashes_of_file(p)
        ptr = led.store.put(p, "delta.safetensors", md5=md5, remote=remote)
    meta = {"schema": 1, "id": sub_id, "contributor": who, "base_version": base.version,
            "base_commit": base.commit, "message": "",
            "delta": {"kind": "dense", "sha256": sha, "md5": md5, "size": len(data)}}
    meta.update(meta_patch or {})
    _, ptr_rel, meta_rel = layout.submission_paths(sub_id)
    files = {ptr_rel: ptr.render(), meta_rel: json.dumps(meta).encode()}
    files.update(extra_files or {})
    if files_patch:
        files = files_patch(files, sub_id)
    parent = parent or base.commit
    own_key, led.git.sign_key = led.git.sign_key, (str(sign_key) if sign_key else None)  # False: unsigned
    try:
        commit = led.git.commit_tree_with(parent, files, f"crafted {sub_id}\n", parents=[parent])
    finally:
        led.git.sign_key = own_key
    return sub_id, commit


# `git push --receive-pack=UNHOOKED`: a push that the hub's own hook does not see (an unprotected forge)
UNHOOKED = "git -c core.hooksPath=/dev/null -c receive.fsckObjects=false receive-pack"


def force_ref(hub: Path, clone: Path, commit: str, ref: str) -> None:
    """Set ``ref`` in the bare ``hub`` to ``commit`` from ``clone`` without its hook: what a forge
    without branch protection lets any writer do (fetch into the hub runs no receive hook)."""
    from woolf.git.repo import Git

    Git(hub).run("fetch", "-q", str(clone), f"+{commit}:{ref}")


def random_delta(led, scale=0.01, seed=0):
    """A seeded random delta shaped like origin's newest version."""
    import torch

    g = torch.Generator().manual_seed(seed)
    w = led.load_weights(led.head("refs/remotes/origin/main"))
    return {k: (torch.randn(v.shape, generator=g) * scale).to(v.dtype) for k, v in w.items()}


def push(led, *refspecs: str):
    """`git push` of raw refspecs from a clone to its hub, as an attacker would, bypassing woolf."""
    import subprocess

    from woolf.git.repo import clean_env

    return subprocess.run(["git", "push", "--porcelain", "origin", *refspecs], cwd=led.root,
                          capture_output=True, text=True, env=clean_env())


def next_second() -> None:
    """Sleep into the next whole second: a clone's reflog stamps when it received a ref in whole
    seconds, so what is fetched after this was received later than anything fetched before it.
    (A fixed 1.1 s sleep did the same and waited 0.6 s longer on average.)"""
    import time

    time.sleep(1.02 - time.time() % 1)


def refused(proc, needle: str) -> bool:
    return proc.returncode != 0 and "woolf hub: refused" in proc.stderr and needle in proc.stderr
