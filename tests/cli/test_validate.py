"""`woolf validate` tells the maintainer what each PR cost: its seconds per stage, under its verdict line."""

from __future__ import annotations

import re

from tests.crafting import craft_pr, random_delta


def test_each_verdict_line_is_followed_by_its_seconds_per_stage(make_net, cli):
    net = make_net(**{"scoring.enabled": "false"})
    val = net.clone("val")
    sub_id = craft_pr(val, tensors=random_delta(val, scale=1.0), who="carol")  # a clear regression
    out = cli("validate", "--device", "cpu", cwd=val.root)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(sub_id))
    assert "rejected" in lines[at]
    seconds = lines[at + 1]
    assert seconds.startswith("  seconds: ") and "evaluation" in seconds and "checks" in seconds
    stages = dict(re.findall(r"(\w+) (\d+\.\d)", seconds.split("(total")[0]))
    total = float(re.search(r"\(total (\d+\.\d)\)", seconds).group(1))
    assert abs(sum(map(float, stages.values())) - total) <= 0.05 * len(stages) + 0.1
