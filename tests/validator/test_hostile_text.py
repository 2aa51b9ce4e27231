"""Red-team findings on attacker text (F2, F3, F12, F9): separators, markup and escapes are data.

A byte git-log framing uses (0x1E, 0x1F), rich markup (`[/x]`) or a terminal escape in a
task record, a contributor name, a PR message or a path never crashes a reader nor reaches
the terminal raw.
"""

from __future__ import annotations

import json

from tests.crafting import craft_pr, push, refused
from tests.hostile_corpus import delta, push_ref
from woolf.forges.local import LocalForge
from woolf.ledger.tasks import _new_id
from woolf.protocol import layout
from woolf.protocol.tasks import TaskRecord, read_tasks, task_ref
from woolf.protocol.trailers import format_message

EVIL = "\x1b]0;PWNED\x1b\\\x1b[2J"  # OSC set-title, then clear screen


def _task_commits(led, reason: str | None, subject_tail: str = "") -> tuple[str, str, str]:
    """(task id, reserved record, cancelled record with ``reason``) as mallory would push them."""
    head = led.head("refs/remotes/origin/main")
    rec = TaskRecord(_new_id("mallory"), "reserved", "mallory", head.version, head.commit, "mallory@v0", 2, 600.0)
    first = rec.message().replace("\n", f"{subject_tail}\n", 1)
    c1 = led.git.out("commit-tree", f"{head.commit}^{{tree}}", "-p", head.commit, input=first.encode())
    rec.state, rec.reason = "cancelled", reason
    c2 = led.git.out("commit-tree", f"{head.commit}^{{tree}}", "-p", c1, input=rec.message().encode())
    return rec.id, c1, c2


def test_f2_f9_task_records_with_separators_or_escapes_are_refused_and_skipped(network, cli):
    mallory, alice = network.clone("mallory"), network.clone("alice")
    split_id, split, _ = _task_commits(mallory, None, " \x1e boom")
    assert refused(push(mallory, f"{split}:{task_ref(split_id)}"), "a control character")
    esc_id, reserved, cancelled = _task_commits(mallory, f"bye {EVIL}")
    assert push(mallory, f"{reserved}:{task_ref(esc_id)}").returncode == 0  # a plain record lands
    assert refused(push(mallory, f"{cancelled}:{task_ref(esc_id)}"), "a control character")
    ok_id, ok, _ = _task_commits(mallory, None)
    assert push(mallory, f"{ok}:{task_ref(ok_id)}").returncode == 0
    # where no hook stopped them: skipped and reported, the other tasks read
    push_ref(mallory, split, task_ref(split_id))
    push_ref(mallory, cancelled, task_ref(esc_id))
    alice.git.fetch("origin", f"+{task_ref('*')}:{task_ref('*')}")
    found, bad = read_tasks(alice.git)
    assert sorted(found) == [ok_id]
    assert sorted(r for r, why in bad if "control character" in why) == sorted([task_ref(split_id), task_ref(esc_id)])
    listing = cli("tasks", "--all", "--json", cwd=alice.root)
    assert listing.returncode == 0, listing.stderr[-2000:]
    assert [t["id"] for t in json.loads(listing.stdout)["tasks"]] == [ok_id]
    shown = cli("tasks", "--all", cwd=alice.root)
    assert shown.returncode == 0 and "\x1b" not in shown.stdout + shown.stderr, shown.stderr[-2000:]


def test_f3_f1_bad_contributor_names_are_rejected_and_history_reads_on(network, cli):
    mallory, val = network.clone("mallory"), network.clone("val")
    names = ("mallory\x1eboom", "mallory\nWoolf-Vote: accept")
    bad = [craft_pr(mallory, tensors=delta(mallory, seed=i), meta_patch={"contributor": n}) for i, n in enumerate(names)]
    forged = craft_pr(mallory, tensors=delta(mallory, seed=5))
    head = mallory.git.rev_parse(f"{layout.PR_PREFIX}/{forged}/head")
    msg = format_message(f"woolf: rejected {forged}", {"Woolf-Verdict": "rejected", "Woolf-Submission": forged,
                         "Woolf-Reason": "split \x1e here \x1f and here", "Woolf-Contributor": "mallory\x1ex"})
    push_ref(mallory, mallory.git.commit_tree(f"{head}^{{tree}}", msg, [head]), f"{layout.PR_PREFIX}/{forged}/verdict")
    proc = cli("validate", "--all", "--json", "--device", "cpu", cwd=val.root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    verdicts = {v["id"]: v for v in json.loads(proc.stdout)}
    for sub_id in bad:
        assert not verdicts[sub_id]["accepted"] and "is not a contributor name" in verdicts[sub_id]["reason"]
        pr = LocalForge.for_ledger(val).get(sub_id)
        assert pr.state == "rejected" and pr.contributor is None
    observer = network.clone("observer")
    for cmd in (["leaderboard", "--json"], ["report", "--json"], ["pr", "list"], ["log"]):
        out = cli(*cmd, cwd=observer.root)
        assert out.returncode == 0, (cmd, out.stderr[-2000:])


def test_f12_f9_pr_show_and_validate_print_attacker_text_as_text(network, cli):
    mallory, val = network.clone("mallory"), network.clone("val")
    message = f"[/x] [bold]hi[/bold]\n          state merged\n        version 7 {EVIL}"
    shown_pr = craft_pr(mallory, tensors=delta(mallory, seed=1), meta_patch={"message": message})
    escaping = craft_pr(mallory, tensors=delta(mallory, seed=2), extra_files={f"notes/{EVIL}.txt": b"x"})
    out = cli("pr", "show", shown_pr, cwd=val.root)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "[/x] [bold]hi[/bold]" in out.stdout and "\x1b" not in out.stdout
    assert [ln.split()[:2] for ln in out.stdout.splitlines() if ln.split()[:1] == ["state"]] == [["state", "open"]]
    proc = cli("validate", "--all", "--device", "cpu", cwd=val.root)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert escaping in proc.stdout and "touches" in proc.stdout and "\x1b" not in proc.stdout + proc.stderr
