"""Cheap checks on a pull request, before any weights are read.

Usage:
    sub = admit(ledger, pr, main)          # -> Admitted(staleness, pointer, meta, base) or raises Rejected

Everything here reads git objects as data: nothing from the PR is checked
out, imported or executed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from woolf.errors import IntegrityError, InvalidWeightsError, Rejected
from woolf.git.repo import COMMIT_MAX_BYTES, BlobTooLargeError
from woolf.protocol import layout
from woolf.protocol.layout import META_MAX_BYTES, META_MAX_DEPTH
from woolf.protocol.safejson import loads_untrusted
from woolf.protocol.versions import Version
from woolf.storage import kinds
from woolf.storage.pointer import MAX_BYTES as POINTER_MAX_BYTES
from woolf.storage.pointer import Pointer

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_META_KEYS = {"schema", "id", "contributor", "base_version", "base_commit", "message", "delta",
              "training", "metrics", "reverts", "recipe"}  # recipe: protocol/recipe.py


@dataclass
class Admitted:
    base: Version
    staleness: int
    pointer: Pointer
    meta: dict
    screened: object = None  # woolf.validator.screen.Screened, once the delta's tensors are checked
    audit: object = None  # woolf.validator.retrain.Audit: the proof of training's draw and plan


def _blob(git, spec: str, limit: int, what: str) -> bytes:
    """A PR file's bytes, its size checked (`git cat-file -s`) before it is read."""
    try:
        raw = git.show_bytes(spec, max_bytes=limit)
    except BlobTooLargeError as exc:
        raise Rejected(f"{what} is {exc.size} bytes, over the limit of {limit}") from None
    if raw is None:
        raise Rejected(f"{what} is missing or not a file")
    return raw


_DELTA_KEYS = {"kind", "sha256", "md5", "size", "url", *kinds.PARAMS}


def _kind(d: dict, accept: list[str]) -> None:
    """The delta's kind is one this ledger accepts, with exactly its parameters (woolf/storage/kinds/)."""
    try:
        kinds.admitted(d, accept)
    except InvalidWeightsError as exc:
        raise Rejected(exc.message) from None


def _meta(raw: bytes, pr_id: str, max_bytes: int, schemes: list[str], accept: list[str]) -> dict:
    try:
        meta = loads_untrusted(raw, META_MAX_BYTES, META_MAX_DEPTH)
    except ValueError as exc:
        raise Rejected(f"submission.json is not valid: {exc}") from None
    required = {"schema", "id", "contributor", "base_version", "base_commit", "delta"}
    if not isinstance(meta, dict) or set(meta) - _META_KEYS or not required <= set(meta):
        raise Rejected("submission.json does not follow schema 1 (unknown or missing keys)")
    who = meta["contributor"]
    if not isinstance(who, str) or not layout.CONTRIBUTOR.match(who):
        raise Rejected(f"submission.json does not follow schema 1: contributor {str(who)[:60]!r} is not a "
                       "contributor name (1-39 lower-case letters, digits, . _ -; no spaces, newlines or control "
                       "characters)")
    d = meta["delta"]
    ok = (type(meta["schema"]) is int and meta["schema"] == 1 and meta["id"] == pr_id
          and isinstance(meta["base_version"], int) and not isinstance(meta["base_version"], bool)
          and isinstance(meta["base_commit"], str)
          and isinstance(d, dict) and {"kind", "sha256", "md5", "size"} <= set(d) <= _DELTA_KEYS
          and (isinstance(d.get("url", ""), str) and len(d.get("url", "")) <= 2048)
          and isinstance(d["kind"], str) and isinstance(d["sha256"], str) and _HEX64.match(d["sha256"])
          and isinstance(d["md5"], str) and _HEX32.match(d["md5"])
          and isinstance(d["size"], int) and not isinstance(d["size"], bool) and d["size"] > 0)
    if not ok:
        raise Rejected("submission.json does not follow schema 1 (bad types or values)")
    _kind(d, accept)
    if "url" in d and d["url"].split(":", 1)[0].lower() not in schemes:
        raise Rejected(f"delta URL scheme is not allowed (allowed: {', '.join(schemes)})")
    if d["size"] > max_bytes:
        raise Rejected(f"delta is {d['size']} bytes, over the ledger's limit of {max_bytes}")
    return meta


def _check_reverts(ledger, reverts, base: Version) -> None:
    """A revert (woolf/history/revert.py) names a merge version on main at or before its base."""
    if reverts is None:
        return
    ok = (isinstance(reverts, dict) and set(reverts) == {"version", "commit"}
          and type(reverts["version"]) is int and 1 <= reverts["version"] <= base.version
          and isinstance(reverts["commit"], str) and _HEX40.match(reverts["commit"]))
    if not ok:
        raise Rejected("submission.json's reverts is not {version: 1..base, commit: 40 hex}")
    target = ledger.git.rev_parse(f"{base.commit}~{base.version - reverts['version']}")
    if target != reverts["commit"]:
        raise Rejected(f"submission.json reverts version {reverts['version']} with another commit than "
                       "that version on main")


def admit(ledger, pr, main: Version, merged_deltas: set[str]) -> Admitted:
    git, cfg = ledger.git, ledger.config
    parents = git.parents(pr.head)
    if len(parents) != 1:
        raise Rejected(f"the PR head has {len(parents)} parents; a submission is one plain commit")
    try:  # the parent is PR-supplied: its size is checked before its message is read
        base = ledger.version_at(parents[0])
    except BlobTooLargeError as exc:
        raise Rejected(f"the PR's parent commit is {exc.size} bytes, over the limit of {COMMIT_MAX_BYTES} "
                       "(a version commit is a few KiB)") from None
    if base is None:
        raise Rejected("the PR is not one commit on top of a version commit "
                       "(more than one commit, or based on something else)")
    if base.version > main.version or ledger.on_chain(base, main) is False:
        raise Rejected(f"the PR's base {base.commit[:12]} (version {base.version}) is not on main")
    staleness = ledger.staleness(base.commit, main.commit)
    if staleness != main.version - base.version:
        raise Rejected("main's first-parent chain is not numbered consecutively; run `woolf audit`")
    delta_rel, ptr_rel, meta_rel = layout.submission_paths(pr.id)
    for _old_mode, new_mode, status, path in git.diff_raw(base.commit, pr.head):
        if path not in (ptr_rel, meta_rel):
            raise Rejected(f"the PR touches {path}, outside its submission area {layout.SUBMISSIONS}/{pr.id}/")
        if status != "A" or new_mode != "100644":
            kind = {"120000": "a symlink", "160000": "a submodule"}.get(new_mode, f"mode {new_mode}")
            raise Rejected(f"the PR's {path} is {kind} (status {status}); only new plain files are allowed")
    tree = git.ls_tree(pr.head)
    if ptr_rel not in tree or meta_rel not in tree:
        raise Rejected("the PR lacks its delta pointer or submission.json")
    meta = _meta(_blob(git, f"{pr.head}:{meta_rel}", META_MAX_BYTES, "submission.json"), pr.id,
                 cfg.limits.max_delta_bytes, cfg.forge.delta_schemes, cfg.delta.accept)
    if meta["base_version"] != base.version or meta["base_commit"] != base.commit:
        raise Rejected("submission.json names another base than the PR's parent commit")
    try:
        pointer = Pointer.parse(_blob(git, f"{pr.head}:{ptr_rel}", POINTER_MAX_BYTES, "the delta pointer"), ptr_rel)
    except IntegrityError as exc:
        raise Rejected(str(exc)) from None
    d = meta["delta"]
    if pointer.path != "delta.safetensors" or pointer.md5 != d["md5"] or pointer.size != d["size"]:
        raise Rejected("the delta pointer disagrees with submission.json (path, md5 or size)")
    _check_reverts(ledger, meta.get("reverts"), base)
    if d["sha256"] in merged_deltas:
        raise Rejected(f"replay: a delta with sha256 {d['sha256'][:16]}... was already merged")
    if staleness > cfg.merge.max_staleness:
        raise Rejected(f"staleness {staleness} is over the ledger's max_staleness {cfg.merge.max_staleness}; "
                       "train again from the current version")
    return Admitted(base, staleness, pointer, meta)
