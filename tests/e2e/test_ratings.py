"""The leaderboard and credit commands and the HTML report on a real ledger's verdict history."""

from __future__ import annotations

import json

from tests.crafting import craft_pr
from tests.validator.test_score import _noise, _trained
from woolf.validator import Validator


def test_leaderboard_and_credit_commands_on_a_real_ledger(network, cli):
    val = network.clone("val")
    for who in ("alice", "bob", "alice"):
        craft_pr(val, tensors=_trained(val, who), who=who)
        Validator(val, device="cpu", name="v1").run()
    # a submission.json whose contributor is not the id's (here alice in another case and Unicode form) is
    # rejected by schema and charged to nobody: junk claiming a name costs its owner nothing
    craft_pr(val, tensors=_noise(val, seed=5), meta_patch={"contributor": "ＡＬＩＣＥ"})
    [v] = Validator(val, device="cpu", name="v1").run()
    assert not v.accepted and v.scores is None
    out = cli("leaderboard", "--json", cwd=val.root)
    assert out.returncode == 0, out.stderr
    rows = {r["contributor"]: r for r in json.loads(out.stdout)["rows"]}
    assert rows["alice"]["merged"] == 2 and rows["alice"]["rejected"] == 0 and rows["bob"]["merged"] == 1
    assert "ＡＬＩＣＥ" not in rows
    assert all(rows[w]["ordinal"] is not None for w in ("alice", "bob"))
    out = cli("credit", "--json", "--since", "1", cwd=val.root)
    data = json.loads(out.stdout)
    assert out.returncode == 0 and data["versions"] == 2 and {r["contributor"] for r in data["rows"]} == {"alice", "bob"}
    human = cli("credit", cwd=val.root)
    assert human.returncode == 0 and "alice" in human.stdout and "total loss improvement" in human.stdout
    from woolf.report.build import build_report

    paths = build_report(val, val.root / "report")
    page = paths["html"].read_text()
    assert "id='leaderboard'" in page and "id='credit'" in page and "ratings.png" in str(paths["plots"][-1])
    assert "## Leaderboard" in paths["markdown"].read_text() and "## Ratings over time" in paths["markdown"].read_text()
    assert "id='ratings-over-time'" in page
