"""The hostile corpus: submissions an attacker who read the code builds by hand (git plumbing, not `woolf submit`).

Usage (in a test):
    cases = build_corpus(net, attacker)      # {name: Case(sub_id, expect, needle)}

The crafted PRs are opened together when every case is built, 16 per push (tests/crafting.open_prs:
fewer runs of the hub's hooks); each one's ref is in the attacker's clone from the start.

Each builder writes what an attacker can write: commits and refs pushed to the
hub, objects in storage. ``expect`` is the one outcome the case must end in:
"rejected" (a verdict whose reason contains ``needle``), "quarantined" (shown
by `woolf pr list` with ``needle`` as reason) or "skipped" (a malformed ref
that is no PR; ``needle`` is the ref).
"""

from __future__ import annotations

import json
import os
import secrets
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save

from woolf.protocol import layout

from .conftest import git
from .crafting import UNHOOKED, craft_commit, open_prs
from .crafting import craft_pr as _craft_pr


@dataclass
class Case:
    sub_id: str | None
    expect: str  # rejected | quarantined | skipped
    needle: str


_pending: list[tuple[str, str]] | None = None  # while build_corpus runs: the PRs it opens at its end


def craft_pr(led, **kw) -> str:
    """tests/crafting.craft_pr; while build_corpus runs the PR waits for the others, its ref set here now."""
    if _pending is None:
        return _craft_pr(led, **kw)
    sub_id, commit = craft_commit(led, fetch=not _pending, **kw)  # main does not move while the corpus is built
    led.git.run("update-ref", "--create-reflog", f"{layout.PR_PREFIX}/{sub_id}/head", commit)
    _pending.append((sub_id, commit))
    return sub_id


def new_id(who: str = "mallory", stamp: str = "20000101T000000000Z") -> str:
    return f"{stamp}-{who}-{secrets.token_hex(4)}"


def delta(led, scale=0.001, seed=0, dtype=None):
    g = torch.Generator().manual_seed(seed)
    w = led.load_weights(led.head("refs/remotes/origin/main"))
    return {k: (torch.randn(v.shape, generator=g) * scale).to(dtype or v.dtype) for k, v in w.items()}


def header_file(header, body: bytes = b"", raw_header: bytes | None = None) -> bytes:
    h = raw_header if raw_header is not None else json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


def _one_entry(led, **patch) -> bytes:
    """A header for the model's first tensor with one field replaced."""
    name, t = next(iter(delta(led).items()))
    entry = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [0, t.numel() * 4], **patch}
    return header_file({name: entry}, b"\0" * (t.numel() * 4))


def storage_object(net, md5: str) -> Path:
    return net.root / "storage" / "files" / "md5" / md5[:2] / md5[2:]


def _meta_of(led, sub_id):
    raw = led.git.show_bytes(f"{layout.PR_PREFIX}/{sub_id}/head:{layout.submission_paths(sub_id)[2]}")
    return json.loads(raw)


def _replace_object(net, led, sub_id, make):
    """Swap the PR's delta object in storage for something else (an attacker with storage write access)."""
    obj = storage_object(net, _meta_of(led, sub_id)["delta"]["md5"])
    obj.chmod(0o644)
    obj.unlink()
    make(obj)


def _plumbing_pr(led, files: dict, message: bytes, parent=None) -> str:
    """A PR whose commit message is raw bytes (not UTF-8), pushed to the hub as an attacker does."""
    base = led.head("refs/remotes/origin/main")
    sub_id = new_id()
    data = save(delta(led))
    tmp = led.root / ".woolf" / "x.safetensors"
    tmp.parent.mkdir(exist_ok=True)
    tmp.write_bytes(data)
    from woolf.storage.files import hashes_of_file

    md5, sha = hashes_of_file(tmp)
    ptr = led.store.put(tmp, "delta.safetensors", md5=md5)
    meta = {"schema": 1, "id": sub_id, "contributor": "mallory", "base_version": base.version,
            "base_commit": base.commit, "message": "",
            "delta": {"kind": "dense", "sha256": sha, "md5": md5, "size": len(data)}}
    _, ptr_rel, meta_rel = layout.submission_paths(sub_id)
    scratch = led.git.commit_tree_with(base.commit, {ptr_rel: ptr.render(), meta_rel: json.dumps(meta).encode(),
                                                     **{k.replace("ID", sub_id): v for k, v in files.items()}},
                                       "x\n", parents=[base.commit])
    tree = led.git.out("rev-parse", f"{scratch}^{{tree}}")
    commit = led.git.out("commit-tree", tree, "-p", parent or base.commit, input=message)
    push_ref(led, commit, f"{layout.PR_PREFIX}/{sub_id}/head")
    return sub_id


def push_ref(led, obj: str, ref: str) -> None:
    """Put ``obj`` at ``ref`` in the origin as a forge without protection would let anyone: the hub
    made by `woolf hub init` refuses most of these refs (tests/audit/test_authority.py), so its hook is
    bypassed here to test what a validator does when they exist anyway."""
    git("push", "-q", f"--receive-pack={UNHOOKED}", "origin", f"{obj}:{ref}", cwd=led.root)


def _blob(led, data: bytes) -> str:
    return led.git.out("hash-object", "-w", "--stdin", input=data)


def _raw(name, make_raw, needle):
    return name, lambda net, led: Case(craft_pr(led, raw=make_raw(led)), "rejected", needle)


def _meta(name, patch, needle):
    return name, lambda net, led: Case(craft_pr(led, tensors=delta(led), meta_patch=patch), "rejected", needle)


def _file(name, content_of, needle):
    """The submission.json or the pointer replaced by hostile bytes (content_of(files, sub_id) -> files)."""
    return name, lambda net, led: Case(craft_pr(led, tensors=delta(led), files_patch=content_of), "rejected", needle)


def _set(which: int, data: bytes):
    return lambda files, i: {**files, layout.submission_paths(i)[which]: data}


def _deep_meta(files, i):
    meta = json.loads(files[layout.submission_paths(i)[2]])
    text = json.dumps({**meta, "message": "@"}).replace('"@"', "[" * 30_000 + "]" * 30_000)
    return {**files, layout.submission_paths(i)[2]: text.encode()}


def _storage(name, make, needle):
    def build(net, led):
        sub_id = craft_pr(led, raw=secrets.token_bytes(1000))
        _replace_object(net, led, sub_id, make)
        return Case(sub_id, "rejected", needle)
    return name, build


def _quarantine_verdict(name, verdict_of, needle):
    def build(net, led):
        sub_id = craft_pr(led, tensors=delta(led))
        push_ref(led, verdict_of(led, sub_id), f"{layout.PR_PREFIX}/{sub_id}/verdict")
        return Case(sub_id, "quarantined", needle)
    return name, build


def _head_is(name, obj_of, needle):
    def build(net, led):
        sub_id = new_id()
        push_ref(led, obj_of(led), f"{layout.PR_PREFIX}/{sub_id}/head")
        return Case(sub_id, "quarantined", needle)
    return name, build


def _bad_ref(name, ref_of):
    def build(net, led):
        ref = ref_of(new_id())
        push_ref(led, led.head("refs/remotes/origin/main").commit, ref)
        return Case(None, "skipped", ref)
    return name, build


def _bad_parent(led) -> str:
    """A commit on main whose message is not UTF-8 and whose version trailer is garbage."""
    base = led.head("refs/remotes/origin/main").commit
    return led.git.out("commit-tree", f"{base}^{{tree}}", "-p", base, input=b"\xff\n\nWoolf-Version: \xff1\n")


def _sparse(obj: Path):
    with open(obj, "wb") as fh:
        fh.truncate(2 << 30)


def _sub_tree(led):
    return led.git.out("rev-parse", f"{led.head('refs/remotes/origin/main').commit}^{{tree}}")


CASES = dict([
    # safetensors headers (read_spec)
    _raw("dtype is a list", lambda led: _one_entry(led, dtype=["F32"]), "unsupported dtype"),
    _raw("offsets are strings", lambda led: _one_entry(led, data_offsets=["0", "64"]), "not two integers"),
    _raw("offsets are null", lambda led: _one_entry(led, data_offsets=None), "not two integers"),
    _raw("shape Infinity", lambda led: header_file(None, b"\0" * 8, b'{"w":{"dtype":"F32","shape":[Infinity],'
                                                                   b'"data_offsets":[0,8]}}'), "Infinity is not JSON"),
    _raw("shape 1e999", lambda led: header_file(None, b"\0" * 8, b'{"w":{"dtype":"F32","shape":[1e999],'
                                                                 b'"data_offsets":[0,8]}}'), "overflows to Infinity"),
    _raw("shape of booleans", lambda led: _one_entry(led, shape=[True, True]), "not a list of integers"),
    _raw("entry is a string", lambda led: header_file({"w": "F32"}), "malformed header entry"),
    _raw("header nested 200k deep", lambda led: header_file(None, raw_header=b"[" * 200_000 + b"]" * 200_000),
         "nested deeper than"),
    _raw("metadata not strings", lambda led: header_file({"__metadata__": {"a": [1]}}), "__metadata__"),
    _raw("header NaN", lambda led: header_file(None, raw_header=b'{"w":NaN}'), "NaN is not JSON"),
    _raw("header not UTF-8", lambda led: header_file(None, raw_header=b'{"\xff":1}'), "not UTF-8"),
    _raw("header 5000-digit int", lambda led: header_file(None, raw_header=b'{"w":' + b"9" * 5000 + b"}"),
         "not a safetensors header"),
    _raw("truncated", lambda led: save(delta(led))[:100], "header length"),
    _raw("pickle", lambda led: __import__("pickle").dumps({"w": [0.0] * 64}), "header length"),
    ("nan values", lambda net, led: Case(craft_pr(led, tensors={k: v * float("nan") for k, v in delta(led).items()}),
                                         "rejected", "NaN or Inf")),
    ("norm 1e6", lambda net, led: Case(craft_pr(led, tensors={k: v * 1e9 for k, v in delta(led).items()}),
                                       "rejected", "delta norm")),
    ("wrong dtype", lambda net, led: Case(craft_pr(led, tensors=delta(led, dtype=torch.float64)),
                                          "rejected", "the model has F32")),
    # submission.json
    _file("submission.json nested 30k deep", _deep_meta, "nested deeper than"),
    _file("submission.json 20 MB", _set(2, b" " * (20 << 20) + b"{}"), "over the limit of 65536"),
    _file("submission.json not UTF-8", _set(2, b'{"schema": 1, "id": "\xff"}'), "not UTF-8"),
    _file("submission.json a list", _set(2, b"[1, 2]"), "schema 1"),
    _meta("schema true", {"schema": True}, "schema 1"),
    _meta("size is a float", {"delta": {"kind": "dense", "sha256": "0" * 64, "md5": "0" * 32, "size": 1.5}},
          "schema 1"),
    _meta("contributor markup", {"contributor": "[/red]"}, "schema 1"),
    _meta("url file scheme", {"delta": {"kind": "dense", "sha256": "0" * 64, "md5": "0" * 32, "size": 5,
                                        "url": "file:///etc/passwd"}}, "scheme is not allowed"),
    _meta("id of another PR", {"id": "20261129T000000000Z-alice-00000000"}, "schema 1"),
    # the delta pointer
    _file("pointer 4 MB", _set(1, b"outs:\n- md5: " + b"a" * (4 << 20) + b"\n"), "the limit of 4096"),
    _file("pointer alias bomb", _set(1, b"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nouts: *c\n"),
          "not a valid DVC pointer"),
    _file("pointer path escapes", _set(1, b"outs:\n- md5: " + b"a" * 32 + b"\n  size: 5\n  hash: md5\n"
                                          b"  path: ../../x\n"), "plain file name"),
    _file("pointer not UTF-8", _set(1, b"outs:\n- md5: \xff\n"), "not a valid DVC pointer"),
    # the tree and the commit
    ("non-UTF-8 path", lambda net, led: Case(_plumbing_pr(led, {"submissions/ID/\udcff.txt": b"x"}, b"x\n"),
                                             "rejected", "touches submissions/")),
    ("non-UTF-8 messages", lambda net, led: Case(_plumbing_pr(led, {}, b"\xff\xfe\n", parent=_bad_parent(led)),
                                                 "rejected", "not one commit on top of a version commit")),
    ("executable file", lambda net, led: Case(craft_pr(led, tensors=delta(led), files_patch=lambda f, i: {
        **f, layout.submission_paths(i)[2]: ("100755", f[layout.submission_paths(i)[2]])}), "rejected", "mode 100755")),
    ("submodule", lambda net, led: Case(craft_pr(led, tensors=delta(led), extra_files={
        f"{layout.SUBMISSIONS}/mod": ("160000", led.head("refs/remotes/origin/main").commit.encode())}),
        "rejected", "touches submissions/mod")),
    ("deletes the benchmark", lambda net, led: Case(craft_pr(led, tensors=delta(led), extra_files={
        "ledger/benchmark/benchmark.txt": None}), "rejected", "touches ledger/benchmark/benchmark.txt")),
    # storage objects behind an honest-looking pointer
    _storage("2 GiB sparse behind 1000 bytes", _sparse, "its pointer declares 1000"),
    _storage("FIFO", lambda obj: os.mkfifo(obj), "not a regular file"),
    _storage("symlink to /dev/zero", lambda obj: obj.symlink_to("/dev/zero"), "symbolic link"),
    _storage("deleted object", lambda obj: None, "missing from storage"),
    _storage("same size, other bytes", lambda obj: obj.write_bytes(b"\x08" * 1000), "does not match its hash"),
    # refs
    _bad_ref("ref one level deeper", lambda i: f"{layout.PR_PREFIX}/{i}/x/head"),
    _bad_ref("ref with a bad id", lambda i: f"{layout.PR_PREFIX}/{i.upper()}/head"),
    _bad_ref("verdict without head", lambda i: f"{layout.PR_PREFIX}/{i}/verdict"),
    _head_is("head is a blob", lambda led: _blob(led, b"hello"), "is a blob"),
    _head_is("head is a tree", _sub_tree, "is a tree"),
    _quarantine_verdict("verdict is a blob", lambda led, i: _blob(led, b"merged"), "is a blob"),
    _quarantine_verdict("verdict without trailers", lambda led, i: led.git.commit_tree_with(
        led.head("refs/remotes/origin/main").commit, {}, "just a commit\n", parents=[]), "no Woolf-Verdict"),
])


def build_corpus(net, led) -> dict[str, Case]:
    global _pending
    _pending = []
    try:
        cases = {name: make(net, led) for name, make in CASES.items()}
        open_prs(led, _pending)
    finally:
        _pending = None
    return cases
