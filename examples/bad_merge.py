"""Find and undo a bad merge: a worked example on a throwaway ledger (about a minute on 2 CPU cores).

Usage:
    python examples/bad_merge.py [DIR]          # default: a temporary directory, removed at the end

What happens, each step with the same `woolf` commands a person would type:
1. a ledger of a tiny `charlm` (unsigned, local hub and storage), and two
   participants who train on Python and Greek text: versions 1 and 2;
2. mallory submits weights whose non-ASCII input embeddings are scrambled: the
   ledger's benchmark (Python source) cannot see it, so the validator merges it
   (version 3), and two more merges land on top, trained on Python only;
3. `woolf bisect --benchmark greek.txt --good 2` names version 3, mallory and
   the PR; `woolf diff 2 3` shows that only `tok.weight` moved;
4. `woolf revert 3` opens a PR, the validator judges and merges it like any
   other, and `woolf eval` shows the Greek benchmark recovering.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from woolf.cli.main import main as woolf
from woolf.workloads import corpus

TINY = ["workload.params.d_model=32", "workload.params.n_layer=1", "workload.params.context=32",
        "workload.params.batch_size=8", "workload.params.benchmark_bytes=4096", "workload.params.shard_files=2",
        # a poison that neither the benchmark nor its contributor's shard can measure is refused by
        # scoring.min_effect; the story turns that off to have one merged
        "scoring.min_effect=0"]
GREEK = ("Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. Ένα, δύο, τρία, τέσσερα. "
         "Σήμερα ο ουρανός είναι καθαρός και η θάλασσα ήρεμη. ")


def run(cwd: Path, *args: str) -> None:
    print(f"\n$ woolf {' '.join(args)}", flush=True)
    code = woolf(["-C", str(cwd), *args])
    if code not in (0, 1):
        raise SystemExit(f"woolf {args[0]} exited {code}")


def git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def story(root: Path) -> None:
    sets = [x for kv in TINY for x in ("--set", kv)]
    run(root, "init", str(root / "work"), "--unsigned", *sets)
    run(root, "hub", "init", str(root / "hub.git"), "--from", str(root / "work"))
    for name in ("alice", "carol", "mallory", "val"):
        git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
        git("config", "user.name", name, cwd=root / name)
    mixed = root / "mixed"
    mixed.mkdir()
    (mixed / "greek.txt").write_text(GREEK * 40)
    for f in corpus.assign_shard("alice", 0, 2):
        (mixed / Path(f).name).write_bytes(corpus.read(f))
    (root / "greek.txt").write_text(GREEK[40:] * 10 + GREEK[:40])  # held out: another phrase order

    def contribute(who: str, seed: int, data: Path | None = None) -> None:
        run(root / who, "train", "--steps", "20", "--seed", str(seed), "--device", "cpu",
            *(["--data", str(data)] if data else []))
        run(root / who, "submit", "-m", f"{who}'s round")
        run(root / "val", "validate", "--device", "cpu")

    contribute("alice", 0, mixed)
    contribute("carol", 1, mixed)
    run(root / "mallory", "pull")
    weights = root / "mallory" / "ledger" / "weights" / "model.safetensors"
    w = load_file(str(weights))
    w["tok.weight"][128:] += torch.randn(128, w["tok.weight"].shape[1], generator=torch.Generator().manual_seed(7)) * 10
    save_file(w, str(root / "better.safetensors"))
    run(root / "mallory", "submit", "--weights", str(root / "better.safetensors"), "-m", "better embeddings")
    run(root / "val", "validate", "--device", "cpu")  # merged: the benchmark cannot see it
    contribute("carol", 2)
    contribute("alice", 3)

    run(root / "carol", "pull")
    run(root / "carol", "eval", "0", "1", "2", "3", "4", "5", "--benchmark", str(root / "greek.txt"))
    run(root / "carol", "bisect", "--benchmark", str(root / "greek.txt"), "--good", "2", "--threshold", "0.2")
    run(root / "carol", "diff", "2", "3", "--top", "3")
    run(root / "carol", "revert", "3", "-m", "v3 broke Greek")
    run(root / "val", "validate", "--device", "cpu")
    run(root / "carol", "pull")
    run(root / "carol", "eval", "5", "6", "--benchmark", str(root / "greek.txt"))
    run(root / "carol", "log", "-n", "3")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        story(Path(sys.argv[1]).resolve())
    else:
        tmp = Path(tempfile.mkdtemp(prefix="woolf-bad-merge-"))
        try:
            story(tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
