"""The GitHub forge against a local server checked against GitHub's official OpenAPI description.

End to end: a participant's fork and a hub repo, submit -> PR -> validate through
the adapter -> merged on main with a verdict comment; a rejected PR closed with
its reason; fork deltas read over allowed schemes only; API errors and retries.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from tests.conftest import SMALL, git
from tests.crafting import UNHOOKED, craft_pr
from tests.github_server import GitHubServer, fault, spec_path
from woolf.audit.recompute import audit
from woolf.errors import ForgeError, RaceLostError
from woolf.forges import forge_for
from woolf.forges.github import GitHubForge
from woolf.forges.github_api import GitHubAPI
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.participant import SubmitOptions, TrainOptions, submit, train
from woolf.validator import Validator

TOKEN = "ghp_test_token"


class StorageServer:
    """A contributor's own storage, readable over plain HTTP (https in real life), with some traps."""

    def __init__(self, root: Path):
        self.root = root
        self.routes: dict[str, tuple] = {}

    def __enter__(self):
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(outer.root), **kw)

            def do_GET(self):
                route = outer.routes.get(self.path)
                if route is None:
                    return super().do_GET()
                kind, arg = route
                if kind == "redirect":
                    self.send_response(302)
                    self.send_header("Location", arg)
                    self.end_headers()
                elif kind == "bytes":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(arg)))
                    self.end_headers()
                    self.wfile.write(arg)
                elif kind == "slow":
                    self.send_response(200)
                    self.end_headers()
                    for _ in range(30):
                        self.wfile.write(b"\0" * 64)
                        self.wfile.flush()
                        time.sleep(0.2)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def github_ledger(tmp_path, monkeypatch, overrides: dict, **signing):
    """A ledger on the local GitHub server: owner/ledger (hub.git) and alice's fork (fork.git), each
    bare, and alice's own delta storage served over HTTP; yields (server, storage server, hub, fork)."""
    spec = spec_path()
    if spec is None:
        pytest.skip("GitHub's OpenAPI description (npm @octokit/openapi) is not available")
    monkeypatch.setenv("WOOLF_GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("WOOLF_FORK_OWNER", "alice")
    hub, fork = tmp_path / "hub.git", tmp_path / "fork.git"
    with GitHubServer(spec, TOKEN, {"owner/ledger": hub, "alice/ledger": fork}) as gh, \
            StorageServer(tmp_path / "alice-storage") as store:
        (tmp_path / "alice-storage").mkdir()
        Ledger.init(tmp_path / "work", CreateOptions(storage=str(tmp_path / "storage"), overrides={
            **SMALL, "forge.kind": "github", "forge.repo": "owner/ledger", "forge.api_url": gh.url,
            "forge.delta_schemes": '["https", "http"]', "policy.min_improvement": "-10", **overrides},
            **signing))
        git("clone", "-q", "--bare", str(tmp_path / "work"), str(hub), cwd=tmp_path)
        git("clone", "-q", "--bare", str(hub), str(fork), cwd=tmp_path)
        yield gh, store, hub, fork


@pytest.fixture
def world(tmp_path, monkeypatch):
    with github_ledger(tmp_path, monkeypatch, {"forge.delta_timeout": "2.0"}) as (gh, store, hub, fork):
        git("clone", "-q", str(hub), str(tmp_path / "alice"), cwd=tmp_path)
        git("remote", "add", "fork", str(fork), cwd=tmp_path / "alice")
        # alice cannot write to the ledger's storage: her DVC remote is her own
        (tmp_path / "alice" / ".dvc" / "config.local").write_text(
            f"['remote \"mine\"']\n    url = {tmp_path / 'alice-storage'}\n")
        git("clone", "-q", str(hub), str(tmp_path / "val"), cwd=tmp_path)
        yield {"gh": gh, "store": store, "root": tmp_path, "alice": Ledger.open(tmp_path / "alice"),
               "val": Ledger.open(tmp_path / "val"), "hub": hub}
        assert gh.errors == [], "\n".join(gh.errors)


def test_fork_pr_validated_merged_and_rejected(world):
    gh, alice, val, root = world["gh"], world["alice"], world["val"], world["root"]
    train(alice, TrainOptions(steps=5, contributor="alice"))
    sub = submit(alice, SubmitOptions(contributor="alice", delta_url_base=world["store"].url, delta_remote="mine"))
    assert sub["number"] == 1
    assert not (root / "storage" / "files" / "md5" / sub["delta_sha256"][:2]).exists()
    # a second PR whose delta is absurdly large: rejected with its reason
    w = alice.load_weights(alice.head())
    bad = root / "bad.safetensors"
    bad.write_bytes(save({k: v + 1000.0 for k, v in w.items()}))
    sub2 = submit(alice, SubmitOptions(weights=bad, base_version=0, contributor="alice", delta_url_base=world["store"].url,
                  delta_remote="mine"))
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    assert verdicts[sub["id"]].accepted and verdicts[sub["id"]].version == 1
    assert not verdicts[sub2["id"]].accepted and "delta norm" in verdicts[sub2["id"]].reason
    pulls = gh.pulls["owner/ledger"]
    main = git("rev-parse", "main", cwd=world["hub"])
    assert git("rev-parse", f"{main}^2", cwd=world["hub"]) == pulls[1]["head_sha"]
    merged, rejected = gh.comments[("owner/ledger", 1)][-1]["body"], gh.comments[("owner/ledger", 2)][-1]["body"]
    assert "woolf verdict: merged" in merged and "| staleness | 0 |" in merged
    assert "woolf verdict: rejected" in rejected and "delta norm" in rejected
    assert pulls[1]["labels"] == ["woolf:merged"] and pulls[2]["labels"] == ["woolf:rejected"]
    assert pulls[2]["closed"] and gh.statuses[pulls[2]["head_sha"]][-1]["state"] == "failure"
    forge = forge_for(val)
    states = {p.id: p.state for p in forge.list()}
    assert states == {sub["id"]: "merged", sub2["id"]: "rejected"}
    shown = forge.get(sub2["id"])
    assert "delta norm" in shown.reason and shown.staleness == 1
    assert shown.author == "alice" and shown.number == 2 and len(shown.base_sha) == 40
    # the fork's delta now lives in the ledger's own storage, so anyone can audit
    git("clone", "-q", str(world["hub"]), str(root / "auditor"), cwd=root)
    assert audit(Ledger.open(root / "auditor")).ok


def _crafted(world, url: str, data: bytes | None = None):
    """A PR from alice's fork whose delta lives only in her storage, announced at ``url``."""
    import hashlib

    alice = world["alice"]
    d = {k: torch.full_like(v, 0.001) for k, v in alice.load_weights(alice.head()).items()}
    data = data or save(d)
    md5, sha = hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()
    forge = GitHubForge(alice.git, alice.config.forge, fork_remote="fork", fork_owner="alice")
    meta = {"delta": {"kind": "dense", "sha256": sha, "md5": md5, "size": len(data), "url": url}}
    return craft_pr(alice, raw=data, forge=forge, meta_patch=meta, remote="mine", who="alice"), data


def test_delta_urls_are_read_with_limits(world):
    store, val = world["store"], world["val"]
    world["alice"].pull()
    cases = {
        "ftp": _crafted(world, "ftp://127.0.0.1/x"),
        "redirect": _crafted(world, f"{store.url}/redir"),
        "oversized": _crafted(world, f"{store.url}/big"),
        "slow": _crafted(world, f"{store.url}/slow"),
        "mismatch": _crafted(world, f"{store.url}/other"),
    }
    store.routes["/redir"] = ("redirect", "file:///etc/passwd")
    store.routes["/big"] = ("bytes", b"\0" * 10_000_000)
    store.routes["/slow"] = ("slow", None)
    data = cases["mismatch"][1]
    store.routes["/other"] = ("bytes", data[:-1] + b"\1")
    verdicts = {v.id: v for v in Validator(val, device="cpu").run()}
    reasons = {name: verdicts[sub_id].reason for name, (sub_id, _) in cases.items()}
    assert "scheme is not allowed" in reasons["ftp"]
    assert "'file' is not allowed" in reasons["redirect"]
    assert "passed the limit" in reasons["oversized"] or "over the limit" in reasons["oversized"]
    assert "longer than" in reasons["slow"]
    assert "does not match its md5" in reasons["mismatch"]
    assert not any(v.accepted for v in verdicts.values())
    assert git("rev-list", "--count", "main", cwd=world["hub"]) == "1"


def test_head_change_between_evaluation_and_merge_merges_nothing(world):
    val, alice = world["val"], world["alice"]
    train(alice, TrainOptions(steps=3, contributor="alice"))
    sub = submit(alice, SubmitOptions(contributor="alice", delta_url_base=world["store"].url, delta_remote="mine"))
    forge = forge_for(val)
    val.fetch()
    pr = forge.get(sub["id"])
    main = git("rev-parse", "main", cwd=world["hub"])
    stale = type(pr)(**{**pr.__dict__, "head": "0" * 40})
    with pytest.raises(RaceLostError, match="head changed"):
        forge.merge(stale, main, main)
    assert git("rev-parse", "main", cwd=world["hub"]) == main


def test_pr_changing_a_workflow_and_hostile_branch_names(world):
    val, gh = world["val"], world["gh"]
    d = {k: torch.full_like(v, 0.001) for k, v in val.load_weights(val.head()).items()}
    forge = GitHubForge(val.git, val.config.forge)
    wf = craft_pr(val, tensors=d, forge=forge, extra_files={".github/workflows/x.yml": b"on: push\n"})
    # a PR someone opened by hand with shell syntax in its branch name is not a submission
    git("push", "-q", f"--receive-pack={UNHOOKED}", str(world["hub"]),  # the hub's hook would refuse it
        "main:refs/heads/woolf/$(touch${IFS}pwned)", cwd=val.root)
    gh.handle("POST", "/repos/owner/ledger/pulls", {}, {"Authorization": f"Bearer {TOKEN}"},
              b'{"title": "$(rm -rf /)", "head": "woolf/$(touch${IFS}pwned)", "base": "main"}')
    [v] = Validator(val, device="cpu").run()
    assert v.id == wf and "touches .github/workflows/x.yml" in v.reason
    assert not Path("pwned").exists() and not (val.root / "pwned").exists()


def test_api_errors_and_retries(world):
    gh = world["gh"]
    slept = []
    api = GitHubAPI(gh.url, token=TOKEN, sleep=slept.append)
    gh.faults.append(fault("GET", r"/pulls$", 502, times=2))
    assert api.paginate("GET", "/repos/owner/ledger/pulls") == []
    assert len(slept) == 2
    gh.faults.append(fault("GET", r"/pulls$", 403, headers={"Retry-After": "7", "X-RateLimit-Remaining": "0"},
                           body={"message": "API rate limit exceeded", "documentation_url": "https://docs.github.com"}))
    api.paginate("GET", "/repos/owner/ledger/pulls")
    assert slept[-1] == 7.0
    with pytest.raises(ForgeError, match="401"):
        GitHubAPI(gh.url, token="wrong").json("GET", "/repos/owner/ledger/pulls")
    with pytest.raises(ForgeError, match="404"):
        api.json("GET", "/repos/owner/nothing/pulls")
    with pytest.raises(ForgeError, match="422"):
        api.json("POST", "/repos/owner/ledger/pulls", json={"title": "t", "head": "alice:no-such-branch", "base": "main"})
    # the server's checks can fail: a request that breaks the description is recorded
    import requests

    requests.post(f"{gh.url}/repos/owner/ledger/issues/1/labels", json={"labels": 5},
                  headers={"Authorization": f"Bearer {TOKEN}"})
    assert any("request POST" in e for e in gh.errors)
    gh.errors.clear()
    gh.faults.append(fault("GET", r"/pulls$", 503, times=10))
    with pytest.raises(ForgeError, match="503"):
        api.json("GET", "/repos/owner/ledger/pulls")


def test_pagination_follows_link_headers(world):
    val, gh = world["val"], world["gh"]
    d = {k: torch.full_like(v, 0.001) for k, v in val.load_weights(val.head()).items()}
    forge = GitHubForge(val.git, val.config.forge)
    ids = {craft_pr(val, tensors={k: v * (i + 1) for k, v in d.items()}, forge=forge) for i in range(3)}
    api = GitHubAPI(gh.url, token=TOKEN)
    pages = api.paginate("GET", "/repos/owner/ledger/pulls", params={"state": "all", "per_page": 1})
    assert len(pages) == 3
    assert sum(1 for m, p, _ in gh.log if p.endswith("/pulls") and m == "GET") >= 3
    assert {p.id for p in forge.list()} == ids


def test_ci_split_evaluate_then_apply(world, tmp_path, capsys):
    from woolf.cli.main import main

    alice, val = world["alice"], world["val"]
    train(alice, TrainOptions(steps=3, contributor="alice"))
    first = submit(alice, SubmitOptions(contributor="alice", delta_url_base=world["store"].url, delta_remote="mine"))
    second = submit(alice, SubmitOptions(weights=alice.root / ".woolf" / "work" / "trained.safetensors", base_version=0,
                    contributor="alice", delta_url_base=world["store"].url, delta_remote="mine",
                    message="same weights, a second PR"))
    main_before = git("rev-parse", "main", cwd=world["hub"])
    verdict = tmp_path / "verdict.json"
    # the unprivileged job: evaluate PR #1 by number, write the record, change nothing
    assert main(["-C", str(val.root), "validate", "--forge", "github", "--evaluate-only", str(verdict), "1"]) == 0
    assert git("rev-parse", "main", cwd=world["hub"]) == main_before
    record = __import__("json").loads(verdict.read_text())
    assert record["id"] == first["id"] and record["accepted"] and record["main"] == main_before
    # a stale record for PR #2, evaluated before #1 is merged, cannot be applied after it
    stale = tmp_path / "stale.json"
    assert main(["-C", str(val.root), "validate", "--forge", "github", "--evaluate-only", str(stale), "2"]) == 0
    # the privileged job: re-check and carry out the record
    assert main(["-C", str(val.root), "validate", "--forge", "github", "--apply", str(verdict), "--json"]) == 0
    capsys.readouterr()
    assert git("rev-parse", "main^2", cwd=world["hub"]) == first["commit"]
    from woolf.validator.ci import apply_record

    requeued = apply_record(Validator(Ledger.open(val.root), device="cpu", forge_kind="github"),
                            __import__("json").loads(stale.read_text()))
    assert requeued.state == "requeued" and "main moved since evaluation" in requeued.reason
    assert world["gh"].pulls["owner/ledger"][2]["closed"] is False
    del second


def test_quorum_votes_show_per_validator_and_the_merge_waits_for_two(world):
    """Issue 14 on GitHub: each validator's vote is a status on the PR; one vote merges nothing."""
    from woolf.ledger.change import set_config

    gh, alice, val, root = world["gh"], world["alice"], world["val"], world["root"]
    set_config(val, {"validators.quorum": "2"})
    train(alice, TrainOptions(steps=5, contributor="alice"))
    sub = submit(alice, SubmitOptions(contributor="alice", delta_url_base=world["store"].url, delta_remote="mine"))
    git("clone", "-q", str(world["hub"]), str(root / "val2"), cwd=root)
    assert Validator(val, device="cpu", name="v1").run() == []  # one vote is no quorum
    head = gh.pulls["owner/ledger"][sub["number"]]["head_sha"]
    assert [s["context"] for s in gh.statuses[head]] == ["woolf/vote/v1"]
    assert git("rev-parse", "main", cwd=world["hub"]) == val.head("refs/remotes/origin/main").commit
    [verdict] = Validator(Ledger.open(root / "val2"), device="cpu", name="v2").run()
    assert verdict.accepted and verdict.version == 2  # version 1 is the config change
    contexts = [s["context"] for s in gh.statuses[head]]
    assert contexts[:2] == ["woolf/vote/v1", "woolf/vote/v2"] and contexts[-1] == "woolf/validate"
    assert gh.pulls["owner/ledger"][sub["number"]]["labels"] == ["woolf:merged"]
    git("clone", "-q", str(world["hub"]), str(root / "auditor"), cwd=root)
    assert audit(Ledger.open(root / "auditor")).ok
