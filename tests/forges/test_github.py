"""Red-team F7 on the GitHub forge: a verdict is read only from comments by the validators' accounts.

Anyone can comment on a public PR; a stranger's comment carrying a `woolf-verdict` marker used to
rewrite what `woolf pr list/show` and the leaderboard said about a closed PR (reason, version,
metrics, validator). Against the local server checked against GitHub's OpenAPI description.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from tests.crafting import craft_pr
from tests.e2e.test_github import world  # noqa: F401 - the fixture
from woolf.forges import forge_for
from woolf.forges.github import GitHubForge
from woolf.forges.github_api import GitHubAPI
from woolf.validator import Validator

pytestmark = pytest.mark.unit


def test_f7_a_strangers_verdict_comment_is_ignored(world):  # noqa: F811
    gh, val = world["gh"], world["val"]
    sub = craft_pr(val, raw=b"not a safetensors file", forge=GitHubForge(val.git, val.config.forge), who="alice")
    [v] = Validator(val, device="cpu").run()
    assert not v.accepted
    number = 1
    fake = ("thanks!\n<!-- woolf-verdict " + json.dumps({
        "state": "rejected", "reason": "REJECTED: backdoor; alice banned", "Woolf-Validator": "val",
        "Woolf-Version": 99, "Woolf-Metrics-After": {"loss": 999.0}}) + " -->")
    gh.add_user("ghp_mallory", "mallory", "NONE")
    GitHubAPI(gh.url, token="ghp_mallory").json("POST", f"/repos/owner/ledger/issues/{number}/comments",
                                                json={"body": fake})
    assert gh.comments[("owner/ledger", number)][-1]["user"]["login"] == "mallory"
    shown = forge_for(val).get(sub)  # the validator's own account wrote the verdict: read
    assert shown.state == "rejected" and shown.reason == v.reason and shown.version is None
    gh.add_user("ghp_alice", "alice", "CONTRIBUTOR")  # another reader: the owner's comment is read
    shown = GitHubForge(val.git, val.config.forge, api=GitHubAPI(gh.url, token="ghp_alice")).get(sub)
    assert shown.reason == v.reason and shown.version is None
    # an allow-list names the validators' accounts: nobody else's marker counts, not even the owner's
    only = replace(val.config.forge, verdict_authors=["mallory"])
    shown = GitHubForge(val.git, only, api=GitHubAPI(gh.url, token="ghp_alice")).get(sub)
    assert shown.reason.startswith("REJECTED: backdoor")  # (mallory listed, to show the list decides)
    shown = GitHubForge(val.git, replace(only, verdict_authors=["ci-bot"]),
                        api=GitHubAPI(gh.url, token="ghp_alice")).get(sub)
    assert shown.reason is None and shown.version is None
    # the repository's own workflow (woolf-validate.yml comments as github-actions[bot]) is read by default
    gh.add_user("ghs_workflow", "github-actions[bot]", "NONE")
    GitHubAPI(gh.url, token="ghs_workflow").json("POST", f"/repos/owner/ledger/issues/{number}/comments",
                                                 json={"body": fake.replace("REJECTED: backdoor", "from CI")})
    shown = GitHubForge(val.git, val.config.forge, api=GitHubAPI(gh.url, token="ghp_alice")).get(sub)
    assert shown.reason.startswith("from CI")
