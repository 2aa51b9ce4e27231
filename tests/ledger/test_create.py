"""`woolf init` raises limits.max_delta_bytes to fit a dense delta of the model (the 2 GiB default refused a 2B model's)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import SMALL
from woolf.ledger.create import CreateOptions, delta_bytes_needed
from woolf.ledger.ledger import Ledger
from woolf.protocol.config import LimitsConfig

MiB = 1 << 20


@pytest.mark.unit
def test_the_limit_a_model_needs():
    two_b = {f"w{i}": torch.empty(31_250_000, device="meta") for i in range(64)}  # 2B float32, no memory
    need = delta_bytes_needed(two_b)
    assert need == 8_000_000_000 + MiB + (-(8_000_000_000 + MiB) % MiB) and need % MiB == 0
    assert need > LimitsConfig().max_delta_bytes  # the default refuses it: init must raise the limit
    assert delta_bytes_needed({"w": torch.empty(10)}) == 2 * MiB  # 40 bytes + 1 MiB of header, in MiB


def test_init_keeps_the_default_for_a_small_model_and_an_explicit_limit_as_given(tmp_path):
    small = Ledger.init(tmp_path / "a", CreateOptions(storage=str(tmp_path / "sa"), workload="synthetic",
                        overrides={"workload.params.n_params": "1000"}))
    assert small.config.limits.max_delta_bytes == LimitsConfig().max_delta_bytes
    given = Ledger.init(tmp_path / "b", CreateOptions(storage=str(tmp_path / "sb"), workload="synthetic",
                        overrides={"workload.params.n_params": "1000", "limits.max_delta_bytes": "1000"}))
    assert given.config.limits.max_delta_bytes == 1000


CHAT = "".join(f"<|user|>What does {n} like?\n<|assistant|>{n} likes the {f}.\n"
               for n in ("Ana", "Bo", "Cy", "Dee") for f in ("fig", "plum", "kiwi", "lime", "pear")) * 3


def test_init_benchmark_file_is_the_gate_of_a_charlm_ledger(tmp_path, cli):
    """`woolf init --benchmark FILE`: the ledger's public benchmark, and so the gate, is the user's own text."""
    from tests.conftest import git
    from woolf.hub import init_hub
    from woolf.participant import SubmitOptions, TrainOptions, submit, train
    from woolf.validator import Validator

    (tmp_path / "chat.txt").write_text(CHAT)
    r = cli("init", "led", "--unsigned", "--benchmark", "chat.txt", "--set", "workload.steps=3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the gate is the public benchmark chat.txt, copied to ledger/benchmark/" in r.stdout
    led = Ledger.open(tmp_path / "led")
    assert led.benchmark() == CHAT.encode()
    wl = led.workload()
    genesis = led.load_weights(led.show(0))
    assert led.show(0).metrics == wl.evaluate(genesis, CHAT.encode())
    assert led.show(0).metrics != wl.evaluate(genesis, wl.benchmark_bytes())
    init_hub(tmp_path / "hub.git", led.root)
    for name in ("alice", "val"):
        git("clone", "-q", str(tmp_path / "hub.git"), name, cwd=tmp_path)
    alice, val = Ledger.open(tmp_path / "alice"), Ledger.open(tmp_path / "val")
    train(alice, TrainOptions(contributor="alice", device="cpu"))
    submit(alice, SubmitOptions(contributor="alice"))
    (v,) = Validator(val, device="cpu").run()
    before = {k: x for k, x in v.metrics["before"].items() if k != "tokens"}  # a verdict also counts its tokens
    assert before == led.show(0).metrics  # the gate scored the PR on chat.txt


@pytest.mark.parametrize("content, says", [(b"", "the file is empty"), (b"\xff\xfe\x00binary", "not UTF-8 text"),
                                            (b"too short", "less than one window")])
def test_init_refuses_a_benchmark_file_that_cannot_gate(tmp_path, cli, content, says):
    (tmp_path / "b.txt").write_bytes(content)
    r = cli("init", "led", "--unsigned", "--benchmark", "b.txt", cwd=tmp_path)
    assert r.returncode != 0 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "led").exists()


def test_init_benchmark_file_is_the_gate_of_a_transformers_ledger(tmp_path, cli):
    pytest.importorskip("transformers")
    from tests.workloads.hf.test_workload import tiny

    model = tiny.make_tiny_model(tmp_path / "m", arch="llama", dtype="bfloat16")
    (tmp_path / "chat.txt").write_text(CHAT)
    r = cli("init", "led", "--unsigned", "--workload", "transformers", "--weights", str(model),
            "--benchmark", "chat.txt", "--set", "workload.params.context=32", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "the ledger keeps float32 master weights of your bfloat16 checkpoint" in r.stdout  # said at init
    led = Ledger.open(tmp_path / "led")
    assert led.benchmark() == CHAT.encode()
    wl = led.workload()
    assert led.show(0).metrics == wl.evaluate(led.load_weights(led.show(0)), CHAT.encode())


def test_a_pretrained_charlm_genesis_warms_each_optimizer_up_by_default(tmp_path):
    """Item 7: `woolf init --weights CHECKPOINT` (the README's "Start your own" route) regressed on
    its first train without the optimizer warm-up the demo sets."""
    first = Ledger.init(tmp_path / "first", CreateOptions(storage=str(tmp_path / "s1"), overrides=SMALL))
    assert "optimizer_warmup" not in first.config.workload.params  # random genesis: nothing to protect
    checkpoint = first.weights_path(first.show(0))
    second = Ledger.init(tmp_path / "second", CreateOptions(storage=str(tmp_path / "s2"), overrides=SMALL, weights=checkpoint))
    assert second.config.workload.params["optimizer_warmup"] == 60
    third = Ledger.init(tmp_path / "third", CreateOptions(storage=str(tmp_path / "s3"), weights=checkpoint,
                        overrides={**SMALL, "workload.params.optimizer_warmup": "5"}))
    assert third.config.workload.params["optimizer_warmup"] == 5  # --set wins


# The validator workflow and the test workflow, checked by actionlint and zizmor, and by hand.
ROOT = Path(__file__).parents[2]


BIN = Path(sys.executable).parent


def _tool(name):
    path = shutil.which(name) or (str(BIN / name) if (BIN / name).exists() else None)
    if path is None:
        pytest.skip(f"{name} is not installed (it comes with the dev extra)")
    return path


@pytest.fixture(scope="module")
def new_ledger(tmp_path_factory):
    root = tmp_path_factory.mktemp("wf")
    return Ledger.init(root / "led", CreateOptions(storage=str(root / "s"), overrides=SMALL)).root


def _workflow_dirs(new_ledger):
    return [ROOT / ".github" / "workflows", new_ledger / ".github" / "workflows"]


def test_actionlint_reports_nothing(new_ledger):
    for d in _workflow_dirs(new_ledger):
        files = sorted(str(p) for p in d.glob("*.yml"))
        proc = subprocess.run([_tool("actionlint"), *files], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_reports_nothing(new_ledger):
    for d in _workflow_dirs(new_ledger):
        proc = subprocess.run([_tool("zizmor"), "--offline", "--no-progress", str(d)], capture_output=True,
                              text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
        assert "No findings to report" in proc.stdout + proc.stderr


def test_project_workflow_matches_the_template_init_writes(new_ledger):
    for rel in (".github/workflows/woolf-validate.yml", ".github/workflows/woolf-sweep.yml"):
        assert (ROOT / rel).read_text() == (new_ledger / rel).read_text()
    for script in ("evaluate.sh", "merge.sh", "install.sh", "sweep.sh"):
        # install.sh's WOOLF_SOURCE pins what woolf was installed from (forges/install_source.py)
        unpinned = lambda t: re.sub(r"(?m)^WOOLF_SOURCE='.*'$", "WOOLF_SOURCE=''", t)  # noqa: E731
        assert unpinned((ROOT / "ci" / script).read_text()) == unpinned((new_ledger / "ci" / script).read_text())


def test_workflow_hardening_by_hand(new_ledger):
    for d in _workflow_dirs(new_ledger):
        for path in d.glob("*.yml"):
            text = path.read_text()
            wf = yaml.safe_load(text)
            assert wf["permissions"] == {}, path
            for job in wf["jobs"].values():
                for step in job.get("steps", []):
                    uses = step.get("uses")
                    if uses:
                        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", uses), uses
                        assert not uses.startswith("actions/cache")
                        if uses.startswith("actions/checkout"):
                            assert step["with"]["persist-credentials"] is False
                    assert "${{" not in step.get("run", ""), "expressions go through env:, never into run:"
    wf = yaml.safe_load((new_ledger / ".github/workflows/woolf-validate.yml").read_text())
    assert wf["jobs"]["evaluate"]["permissions"] == {"contents": "read", "pull-requests": "read"}
    assert "contents" in wf["jobs"]["merge"]["permissions"]
    # one merge group per PR: a burst of PRs never cancels another PR's pending merge
    assert "pull_request.number" in wf["jobs"]["merge"]["concurrency"]["group"]
    # a quorum (WOOLF_VALIDATORS): one evaluate leg and one vote job per validator, each vote job in
    # that validator's own environment (its key), in a group of its own so that votes run side by side
    vote, legs = wf["jobs"]["vote"], "fromJSON(vars.WOOLF_VALIDATORS"
    assert legs in wf["jobs"]["evaluate"]["strategy"]["matrix"]["validator"] and legs in vote["strategy"]["matrix"]["validator"]
    assert "environment" not in wf["jobs"]["evaluate"] and "environment" not in wf["jobs"]["merge"]
    assert vote["environment"] == "woolf-validator-${{ matrix.validator }}"
    assert "matrix.validator" in vote["concurrency"]["group"] and "pull_request.number" in vote["concurrency"]["group"]
    assert "WOOLF_VALIDATORS == ''" in wf["jobs"]["merge"]["if"] and "WOOLF_VALIDATORS != ''" in vote["if"]
    [step] = [s for s in vote["steps"] if "run" in s]
    assert step["run"] == "bash ci/merge.sh" and step["env"]["WOOLF_VALIDATOR"] == "${{ matrix.validator }}"
    sweep = yaml.safe_load((new_ledger / ".github/workflows/woolf-sweep.yml").read_text())
    assert sweep[True]["schedule"] and "workflow_dispatch" in sweep[True]  # YAML 1.1 reads `on:` as True
    assert "pull_request_target" not in sweep[True] and "pull_request" not in sweep[True]
    [step] = [s for s in sweep["jobs"]["sweep"]["steps"] if "run" in s]
    assert step["run"] == "bash ci/sweep.sh" and (new_ledger / "ci/sweep.sh").stat().st_mode & 0o111
    leg = sweep["jobs"]["sweep-vote"]
    assert leg["environment"] == "woolf-validator-${{ matrix.validator }}" and "WOOLF_VALIDATORS != ''" in leg["if"]


def test_runner_hygiene_of_the_generated_workflows(new_ledger):
    """Issue 25: a fork's push held a self-hosted runner up to 60 minutes, superseded runs went on, and
    ci/merge.sh left the validator's private key in a temporary file it never removed."""
    wf = yaml.safe_load((new_ledger / ".github/workflows/woolf-validate.yml").read_text())
    ev = wf["jobs"]["evaluate"]
    assert ev["timeout-minutes"] <= 20 and ev["concurrency"]["cancel-in-progress"] is True
    assert "pull_request.number" in ev["concurrency"]["group"] and "matrix.validator" in ev["concurrency"]["group"]
    secrets = [v for s in ev["steps"] for v in s.get("env", {}).values() if "secrets." in str(v)]
    assert secrets and not any("WRITE" in v or "VALIDATOR_KEY" in v for v in secrets)  # read-only secrets
    for job in ("merge", "vote"):  # the privileged jobs measure the benchmark again (breach 2)
        [step] = [s for s in wf["jobs"][job]["steps"] if "run" in s]
        assert "WOOLF_HIDDEN_BENCHMARK_URL" in step["env"]
    merge = (new_ledger / "ci/merge.sh").read_text()
    assert "trap 'rm -f \"$key_file\"' EXIT" in merge and merge.index("trap") < merge.index("printf '%s\\n' \"$WOOLF_VALIDATOR_KEY\"")
    assert "WOOLF_PRIVILEGED=1 bash ci/install.sh" in merge
    assert "-c ci/constraints.txt" in (new_ledger / "ci/install.sh").read_text()


def test_privileged_jobs_never_run_on_the_evaluate_jobs_runner_and_the_sweeper_has_the_hidden_benchmark(new_ledger):
    """The evaluate job reads fork data on WOOLF_RUNNER / WOOLF_VALIDATOR_RUNNERS; the jobs holding write
    secrets and validator keys (merge, vote, sweep, sweep-vote) shared those labels, so a self-hosted
    runner could run a fork's evaluation and then a job with the key. And the sweeper, which evaluates
    every open PR, had no hidden benchmark."""
    wf = yaml.safe_load((new_ledger / ".github/workflows/woolf-validate.yml").read_text())
    sweep = yaml.safe_load((new_ledger / ".github/workflows/woolf-sweep.yml").read_text())
    assert "WOOLF_RUNNER" in wf["jobs"]["evaluate"]["runs-on"]
    for job in (wf["jobs"]["merge"], wf["jobs"]["vote"], sweep["jobs"]["sweep"], sweep["jobs"]["sweep-vote"]):
        label = job["runs-on"]
        assert "WOOLF_RUNNER" not in label and "WOOLF_VALIDATOR_RUNNERS" not in label, label
        assert "WOOLF_PRIVILEGED_RUNNER" in label, label
    for job in ("sweep", "sweep-vote"):
        [step] = [s for s in sweep["jobs"][job]["steps"] if "run" in s]
        assert step["env"]["WOOLF_HIDDEN_BENCHMARK_URL"] == "${{ secrets.WOOLF_HIDDEN_BENCHMARK_URL }}"
    for script in ("sweep.sh", "merge.sh"):
        text = (new_ledger / "ci" / script).read_text()
        assert 'export WOOLF_HIDDEN_BENCHMARK="$RUNNER_TEMP/hidden-benchmark"' in text, script
        assert "WOOLF_PRIVILEGED=1 bash ci/install.sh" in text, script


@pytest.mark.parametrize("script", ["sweep.sh", "merge.sh"])
def test_ci_scripts_remove_the_key_file_even_when_they_fail(tmp_path, script):
    """ci/sweep.sh left the validator's key in a temp file on (self-hosted) runners, as merge.sh once did:
    run by bash with stand-ins for pip and woolf that fail, the key file is gone after."""
    body = (ROOT / "ci" / script).read_text()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("woolf", 'echo "$WOOLF_SIGNING_KEY" > "$KEYS_SEEN"; exit 3'), ("git", "exit 0")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{text}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "ci").mkdir()
    (tmp_path / "ci" / "install.sh").write_text("exit 0\n")
    (tmp_path / script).write_text(body)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "GITHUB_TOKEN": "t", "WOOLF_VALIDATOR_KEY": "PRIVATE",
           "KEYS_SEEN": str(tmp_path / "seen"), "TMPDIR": str(tmp_path)}
    proc = subprocess.run(["bash", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    key_file = Path((tmp_path / "seen").read_text().strip())
    assert key_file.parent == tmp_path and not key_file.exists()
