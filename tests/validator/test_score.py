"""What a delta is scored on is drawn from what its submitter can neither choose nor know in advance (issue 28).

The scored sample of its shard and the random shards it is compared with come from the
main version it is judged against (and the validators' hidden benchmark when the ledger
pins one), never from the PR id its submitter picks.
"""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest

from tests.crafting import craft_pr
from tests.validator.test_scoring import _trained
from woolf.ledger.benchmark import ENV
from woolf.protocol.config import BenchmarkConfig
from woolf.validator import Validator
from woolf.validator.score import sample, score_seed


def test_the_pr_id_chooses_nothing_about_its_scores(make_net):
    # an impossible gate: every PR is scored, then rejected, so main (what the draw comes from) stays put
    net = make_net(**{"policy.min_improvement": "10"})
    val = net.clone("val")
    delta = _trained(val, "carol")
    got = []
    for sub_id in ("20261129T000000100Z-carol-00000001", "20261129T000000200Z-carol-0badf00d"):
        craft_pr(val, tensors=delta, who="carol", sub_id=sub_id)
        [v] = Validator(val, device="cpu", name="v1").run(ids=[sub_id])
        assert not v.accepted and "improvement" in v.reason and v.scores
        got.append(v.scores)
    # the same delta under another id of its choosing: the same sample, the same random shards, the same scores
    assert {k: got[0][k] for k in ("assigned", "random", "randoms", "seed")} == \
        {k: got[1][k] for k in ("assigned", "random", "randoms", "seed")}
    main = val.head("refs/remotes/origin/main")
    assert got[0]["seed"] == score_seed(val, main)[:32] and len(got[0]["randoms"]) >= 2


@pytest.mark.unit
def test_the_draw_follows_main_and_the_hidden_salt(tmp_path, monkeypatch):
    public = SimpleNamespace(config=SimpleNamespace(benchmark=BenchmarkConfig()))
    a, b = SimpleNamespace(commit="a" * 40), SimpleNamespace(commit="b" * 40)
    assert score_seed(public, a) == score_seed(public, a) != score_seed(public, b)
    secret = b"held-out text only validators hold\n" * 50
    (tmp_path / "hidden.txt").write_bytes(secret)
    monkeypatch.setenv(ENV, str(tmp_path / "hidden.txt"))
    hidden = SimpleNamespace(config=SimpleNamespace(benchmark=BenchmarkConfig(
        hidden_sha256=hashlib.sha256(secret).hexdigest(), hidden_size=len(secret))))
    # with the validators' salt, the public commit alone does not give the draw
    assert score_seed(hidden, a) != score_seed(public, a) and score_seed(hidden, a) == score_seed(hidden, a)
    texts = [bytes(range(256)) * 64, b"x" * 5000]
    s1, s2 = sample(texts, 1024, score_seed(public, a)), sample(texts, 1024, score_seed(public, b))
    assert len(s1) == len(s2) == 1024 and s1 != s2 and s1 == sample(texts, 1024, score_seed(public, a))
    assert all(s1[i * 128:(i + 1) * 128] in b"\n".join(texts) for i in range(8))
    assert sample([b"short"], 1024, "any") == b"short"
