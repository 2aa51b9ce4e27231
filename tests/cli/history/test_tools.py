"""`woolf bisect` (woolf/cli/history/tools.py): a bisect that finds nothing bad exits 0 and says so."""

from __future__ import annotations


def test_bisect_that_finds_nothing_bad_exits_0_and_says_so(network, tmp_path, cli):
    alice = network.clone("alice")
    network.train_submit(alice, "alice", steps=3)
    from woolf.validator import Validator

    Validator(network.clone("val"), device="cpu").run()
    mine = network.clone("mine")
    bench = tmp_path / "bench.txt"
    bench.write_text("def f(x):\n    return x + 1\n" * 200)
    r = cli("bisect", "--benchmark", str(bench), "--threshold", "100", cwd=mine.root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "nothing is bad" in r.stdout and "--threshold 100" in r.stdout, r.stdout
