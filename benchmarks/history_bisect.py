"""Bisect over a long history of the built-in model: evaluations used, and where the time goes.

Usage:
    python benchmarks/history_bisect.py                          # 1,000 versions after genesis
    python benchmarks/history_bisect.py --versions 20 --smoke    # the size the tests run

The ledger: genesis is the default `charlm` trained briefly on Python and Greek
text; each later version is its parent plus a small random step (a real,
distinct weights file in DVC storage: ~550 KB each), written straight into
storage and committed with `git fast-import`, so building 1,000 versions takes
seconds. At version ``--poison`` one merge scrambles the input embeddings of
every non-ASCII byte (the ledger's Python benchmark cannot see it). `woolf
bisect` on a Greek benchmark must name that version, in at most
1 + ceil(log2(n + 1)) evaluations; the wall time is split into evaluation
(the model's forward passes), loading (storage fetch, hash checks, safetensors)
and the rest (git, bookkeeping). A second run is served from the eval cache.
Then, per merge rule in ``--rules``, a tiny ledger with two merges and the
revert of the second: the distance of the result from version 1 (`woolf diff`).
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, timed, write_json  # noqa: E402

from woolf.ledger.create import CreateOptions
from woolf.participant import SubmitOptions, TrainOptions

GREEK = ("Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο. Ένα, δύο, τρία, τέσσερα. "
         "Σήμερα ο ουρανός είναι καθαρός και η θάλασσα ήρεμη. Τα παιδιά παίζουν στην αυλή. ")


def _git(*args, cwd, input=None):
    from woolf.git.repo import clean_env

    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env(),
                          input=input).stdout.decode().strip()


def _genesis(root: Path, steps: int) -> Path:
    import torch
    from safetensors.torch import save_file

    from woolf.workloads import corpus
    from woolf.workloads.base import TrainData
    from woolf.workloads.charlm import CharLM

    wl = CharLM()
    texts = [GREEK.encode() * 60] + [corpus.read(f) for f in corpus.assign_shard("genesis", 0, 4)]
    torch.manual_seed(0)
    w, _ = wl.train(wl.genesis(0), TrainData(texts, "mixed"), steps)
    path = root / "genesis.safetensors"
    save_file(w, str(path))
    return path


def build(root: Path, n: int, poison: int, genesis_steps: int):
    """A ledger with versions 0..n of charlm; returns (ledger, build seconds)."""
    import torch
    from safetensors.torch import load_file, save

    from woolf.ledger.ledger import Ledger
    from woolf.storage.pointer import Pointer

    t0 = time.perf_counter()
    led = Ledger.init(root / "long", CreateOptions(storage=str(root / "storage"), weights=_genesis(root, genesis_steps),
                      overrides={"merge.max_staleness": "1000000"}))
    v0 = led.head()
    w = load_file(str(led.weights_path(v0)))
    g = torch.Generator().manual_seed(1)
    storage = root / "storage" / "files" / "md5"
    stream = []
    for i in range(1, n + 1):
        for k in w:  # a small step: the benchmark drifts by far less than the threshold
            w[k] = w[k] + torch.randn(w[k].shape, generator=g) * 1e-4
        who = f"p{i % 7}"
        if i == poison:
            w["tok.weight"][128:] += torch.randn(128, w["tok.weight"].shape[1], generator=g) * 10
            who = "mallory"
        data = save(w)
        md5, sha = hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()
        obj = storage / md5[:2] / md5[2:]
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(data)
        ptr = Pointer(md5, len(data), "model.safetensors").render()
        sub = f"20261130T000000000Z-{who}-{i:08x}"
        msg = (f"woolf: version {i} from {who}\n\nWoolf-Version: {i}\nWoolf-Submission: {sub}\n"
               f"Woolf-Contributor: {who}\nWoolf-Base-Version: {i - 1}\nWoolf-Staleness: 0\n"
               f"Woolf-Attenuation: 1.0\nWoolf-Alpha: 1.0\nWoolf-Weights-Sha256: {sha}\n").encode()
        stream.append(f"commit refs/heads/main\nmark :{i}\ncommitter woolf <w@woolf> {1_700_000_000 + i} +0000\n"
                      f"data {len(msg)}\n".encode() + msg + (f"from {v0.commit}\n" if i == 1 else "").encode()
                      + f"M 100644 inline ledger/weights/model.safetensors.dvc\ndata {len(ptr)}\n".encode()
                      + ptr + b"\n")
    _git("fast-import", "--quiet", "--force", cwd=led.root, input=b"".join(stream))
    _git("reset", "-q", "--hard", "main", cwd=led.root)
    return Ledger.open(led.root), time.perf_counter() - t0


def run(n: int, poison: int, threshold: float, genesis_steps: int) -> dict:
    from woolf.history import bisect

    with tempfile.TemporaryDirectory(prefix="woolf-bisect-") as tmp:
        root = Path(tmp)
        led, build_s = build(root, n, poison, genesis_steps)
        bench = root / "greek.txt"
        bench.write_text((GREEK[60:] + GREEK[:60]) * 40)
        first_s, first = timed(bisect, led, benchmark=bench, threshold=threshold)
        assert first["found"] is not None and first["found"]["version"] == poison, first["found"]
        second_s, second = timed(bisect, led, benchmark=bench, threshold=threshold)
        assert second["found"]["version"] == poison and second["evaluations"] == 0
        ev, load = first["seconds"]["evaluate"], first["seconds"]["load"]
        return {"versions": n, "poison": poison, "threshold": threshold, "build_seconds": round(build_s, 2),
                "evaluations": first["evaluations"], "max_evaluations": first["max_evaluations"],
                "found": first["found"]["version"], "contributor": first["found"]["contributor"],
                "probes": [(p["version"], round(p["loss"], 4), p["bad"]) for p in first["probes"]],
                "wall_seconds": round(first_s, 3), "evaluate_seconds": round(ev, 3),
                "load_seconds": round(load, 3), "other_seconds": round(first_s - ev - load, 3),
                "evaluate_share": round(ev / first_s, 3), "cached_rerun_seconds": round(second_s, 3),
                "per_evaluation_seconds": round((ev + load) / max(first["evaluations"], 1), 4),
                "storage_mib": round(sum(p.stat().st_size for p in (root / "storage").rglob("*") if p.is_file())
                                     / 2**20, 1)}


TINY = {"workload.params.d_model": "32", "workload.params.n_layer": "1", "workload.params.context": "32",
        "workload.params.batch_size": "8", "workload.params.benchmark_bytes": "4096",
        "workload.params.shard_files": "2", "policy.min_improvement": "-10"}


def revert_exactness(rule: str, steps: int = 10) -> dict:
    """Two merges, then `woolf revert 2` merged at staleness 0: how far is the result from version 1?"""
    from woolf.history import diff_versions, revert
    from woolf.ledger.ledger import Ledger
    from woolf.participant import submit, train
    from woolf.validator import Validator

    with tempfile.TemporaryDirectory(prefix="woolf-revert-") as tmp:
        root = Path(tmp)
        Ledger.init(root / "work", CreateOptions(storage=str(root / "storage"), overrides={**TINY, "merge.rule": rule}))
        _git("clone", "-q", "--bare", str(root / "work"), str(root / "hub.git"), cwd=root)
        for name in ("p", "v"):
            _git("clone", "-q", str(root / "hub.git"), str(root / name), cwd=root)
        p, v = Ledger.open(root / "p"), Validator(Ledger.open(root / "v"), device="cpu", name="v")
        for seed, who in enumerate(("alice", "bob")):
            train(p, TrainOptions(steps=steps, contributor=who, seed=seed, device="cpu"))
            submit(p, SubmitOptions(contributor=who))
            assert v.run()[0].accepted
        revert(p, 2, contributor="carol")
        (verdict,) = v.run()
        assert verdict.accepted and verdict.staleness == 0, verdict.reason
        led = v.ledger
        step, left = diff_versions(led, 1, 2)["total"], diff_versions(led, 1, 3)["total"]
        a, b = led.load_weights(led.show(1)), led.load_weights(led.show(3))
        return {"rule": rule, "step_l2": step["l2"], "left_l2": left["l2"], "left_max_abs": left["max_abs"],
                "left_share": left["l2"] / step["l2"], "elements": sum(t.numel() for t in a.values()),
                "bit_exact": sum(int((a[k] == b[k]).sum()) for k in a)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--versions", type=int, default=1000)
    ap.add_argument("--poison", type=int, help="the poisoned version (default: about 63%% of the way)")
    ap.add_argument("--threshold", type=float, default=0.1)
    ap.add_argument("--smoke", action="store_true", help="a short genesis training (tests)")
    ap.add_argument("--rules", default="attenuated,nesterov,delayed_nesterov",
                    help="merge rules whose revert exactness is measured ('' for none)")
    ap.add_argument("--out", default="history_bisect.json")
    args = ap.parse_args()
    poison = args.poison or max(1, round(args.versions * 0.637))
    row = run(args.versions, poison, args.threshold, 20 if args.smoke else 200)
    print(row, flush=True)
    reverts = [revert_exactness(r) for r in args.rules.split(",") if r]
    for r in reverts:
        print(r, flush=True)
    print(write_json(args.out, {"machine": machine(), "bisect": row, "revert": reverts}))


if __name__ == "__main__":
    main()
