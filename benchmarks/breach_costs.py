"""What the defences against crowded copy checks, URL copies, a poisoned re-training estimate and starved
keyless PRs cost an honest PR (CPU; no GPU needed).

Usage:
    python benchmarks/breach_costs.py                 # the full run (RESULTS.md §19)
    python benchmarks/breach_costs.py --quick         # a smoke run, smaller sizes

Measures: the copy index's exact band against the old estimate alone (one PR against N earlier ones) and how
many honest concurrent deltas fall in the band (extra exact reads); the proof that a delta's bytes are its
declared sha256; the re-training estimate; the download times kept on disk; the task-record key binding;
the LoRA metadata check; the wall time a pass waits for open PRs' URL deltas (a quick one, and beside
slow ones). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import http.server
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SEED = b"k" * 32


def _timed(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _model(params: int, tensors: int = 20, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {f"t{i}": torch.randn(max(1, params // tensors), generator=g) * 0.01 for i in range(tensors)}


def _before(mine, earlier: list, threshold: float) -> list:
    """CopyIndex.candidates as it was at 0807695 (the estimate alone, at most MAX_EXACT): the baseline."""
    from woolf.core.sketch import estimate_many

    same = [(2.0, item) for item, other in earlier if other is not None and other.content == mine.content]
    alike = [(item, other) for item, other in earlier if other is not None and other.content != mine.content
             and other.names == mine.names]
    scored = list(same)
    if alike and mine.names:
        cos, share = estimate_many(mine.sketch, torch.stack([o.sketch for _, o in alike]), max(0.0, threshold - 0.35))
        for (item, _), c, s in zip(alike, cos.tolist(), share.tolist(), strict=True):
            if abs(c) >= threshold - 0.35 or s >= 0.5:
                scored.append((max(abs(c), s), item))
    scored.sort(key=lambda x: -x[0])
    return [item for _, item in scored[:8]]


def copy_band(params_list, open_list) -> dict:
    """One PR against N earlier entries: CopyIndex.candidates before (the estimate alone) and now."""
    from woolf.validator.copyindex import CopyIndex

    out = {}
    for params in params_list:
        index = CopyIndex(SEED)
        me = index.add("me", _model(int(params)))
        pool = [index.entry(f"o{i}", lambda i=i, p=params: _model(int(p), seed=i + 1)) for i in range(20)]
        row = {}
        for n in open_list:
            earlier = [(i, pool[i % len(pool)]) for i in range(n)]
            row[f"before_{n}_s"] = round(_timed(lambda e=earlier, m=me: _before(m, e, 0.97)), 4)
            row[f"candidates_{n}_s"] = round(_timed(lambda e=earlier, m=me, ix=index: ix.candidates(m, e, 0.97)), 4)
        out[str(int(params))] = row
    return out


def honest_band(n: int, steps: int) -> dict:
    """Concurrent honest charlm deltas from one base (the demo's model): pairs in the exact band (compared
    exactly however many) and pairs in the old wide net (at most 8 a PR), at genesis and after training."""
    from woolf.core.sketch import estimate_many, matrix, may_copy_many, sketch
    from woolf.workloads.charlm import CharLM

    wl = CharLM()
    genesis = wl.genesis(0)
    trained, _ = wl.train(genesis, wl.default_data("w0", 0), 120, seed=99)
    out = {}
    for label, base, seed in (("genesis", genesis, 7), ("after_120_steps", trained, 17)):
        deltas = []
        for w in range(n):
            got, _ = wl.train(base, wl.default_data(f"w{w}", 0), steps, seed=seed + w)
            deltas.append({k: (got[k] - base[k]).float() for k in base if base[k].is_floating_point()})
        sks = [matrix(sketch(d, SEED)) for d in deltas]
        n2s = [torch.tensor([float(d[k].double().norm() ** 2) for k in sorted(d)]) for d in deltas]
        band = wide = pairs = 0
        cosines = []
        for i in range(n):
            others = torch.stack([sks[j] for j in range(n) if j != i])
            band += int(may_copy_many(sks[i], n2s[i], others, 0.97).sum())
            cos, share = estimate_many(sks[i], others, 0.62)
            wide += int(((cos.abs() >= 0.62) | (share >= 0.5)).sum())
            pairs += n - 1
            flat = [torch.cat([d[k].flatten() for k in sorted(d)]) for d in deltas]
            cosines += [float(torch.nn.functional.cosine_similarity(flat[i], flat[j], dim=0))
                        for j in range(i + 1, n)]
        out[label] = {"pairs": pairs, "in_exact_band": band, "in_old_wide_net": wide,
                      "cosine_min": round(min(cosines), 3), "cosine_max": round(max(cosines), 3)}
    return out


def _pair(kind: str, cos: float, g: torch.Generator) -> tuple[dict, dict]:
    """(other, mine): mine at exactly ``cos`` with other, their difference shaped as ``kind`` says."""
    import math

    z = torch.zeros(256, 256)
    if kind == "dense":
        a, e = {"w": torch.randn(256, 256, generator=g)}, {"w": torch.randn(256, 256, generator=g)}
    elif kind.startswith("spikes"):  # a difference of k unit spikes: the sketch's heavy tail (collisions)
        k = int(kind[6:])
        a, e = {"w": torch.randn(256, 256, generator=g)}, {"w": z.clone()}
        e["w"].view(-1)[torch.randperm(256 * 256, generator=g)[:k]] = torch.randn(k, generator=g).sign()
    elif kind == "other_tensor":  # the difference in a tensor the original does not touch
        a, e = {"w": torch.randn(256, 256, generator=g), "v": z}, {"w": z, "v": torch.randn(256, 256, generator=g)}
    else:  # "20_tensors"
        a = {f"t{i}": torch.randn(128, 128, generator=g) for i in range(20)}
        e = {f"t{i}": torch.randn(128, 128, generator=g) for i in range(20)}
    flat = lambda d: torch.cat([d[k].reshape(-1) for k in sorted(d)])  # noqa: E731
    coef = float(flat(e) @ flat(a)) / float(flat(a) @ flat(a))
    e = {k: e[k] - coef * a[k] for k in a}
    na, ne = float(flat(a).norm()), float(flat(e).norm())
    return a, {k: cos * a[k] / na + math.sqrt(1 - cos * cos) * e[k] / ne for k in a}


def band_width(trials: int) -> dict:
    """How often core/sketch.py may_copy_many keeps a pair, a secret seed each: a copy just over the
    threshold (0.9701: must always be kept) and an honest pair at 0.91 (the fewer the better)."""
    import secrets

    from woolf.core.sketch import matrix, may_copy_many, sketch

    g = torch.Generator().manual_seed(1)
    out = {}
    for cos in (0.9701, 0.91):
        for kind in ("dense", "spikes2", "spikes3", "spikes8", "other_tensor", "20_tensors"):
            kept = 0
            for _ in range(trials):
                a, b = _pair(kind, cos, g)
                seed = secrets.token_bytes(32)
                n2 = torch.tensor([float(b[k].double().norm() ** 2) for k in sorted(b)])
                kept += int(may_copy_many(matrix(sketch(b, seed)), n2, matrix(sketch(a, seed)).unsqueeze(0), 0.97)[0])
            out[f"{cos}_{kind}"] = f"{kept}/{trials}"
    return out


def proof_and_store(tmp: Path, mib: int) -> dict:
    """The sha256 proof of a cached object (recorded when it was fetched, or hashed once), download
    times on disk, the re-training estimate, the LoRA metadata check."""
    from woolf.core.retrain_speed import Clock, RetrainSpeed
    from woolf.storage.files import hashes_of_file
    from woolf.storage.verified import VerifiedHashes
    from woolf.validator.downloads import DownloadTimes, spent_key

    tmp.mkdir(parents=True, exist_ok=True)
    blob = tmp / "obj"
    blob.write_bytes(torch.randn(mib << 18).numpy().tobytes())  # mib MiB
    vh = VerifiedHashes(tmp / "verified")
    first = _timed(lambda: hashes_of_file(blob), repeat=3)
    vh.hashes(blob)
    recorded = _timed(lambda: vh.hashes(blob), repeat=50)
    times = DownloadTimes.open(tmp)
    for i in range(128):
        times.record(spent_key(f"pr{i}", "s" * 64), 1.0)
    write = _timed(lambda: times.record(spent_key("pr0", "s" * 64), 1.0), repeat=20)
    read = _timed(lambda: DownloadTimes.open(tmp), repeat=20)
    speed = RetrainSpeed()
    recipe = {"steps": 20, "batch": 8, "params": {}, "seconds": 1.0}

    class Wl:
        batch_size, context = 8, 32

    def rec():
        c = Clock()
        for _ in range(20):
            c.tick()
        speed.record("fp", "c", recipe, Wl, c)

    return {"object_mib": mib, "sha256_proof_unrecorded_s": round(first, 4), "sha256_proof_recorded_s": round(recorded, 6),
            "download_times_write_128_s": round(write, 5), "download_times_read_128_s": round(read, 5),
            "retrain_record_s": round(_timed(rec, repeat=50), 6),
            "retrain_estimate_s": round(_timed(lambda: speed.over(recipe, Wl, "fp", 600.0), repeat=50), 7),
            "lora_metadata_check_s": round(_lora_check(tmp), 6)}


def _lora_check(tmp: Path) -> float:
    """The extra header read a LoraTensors.open does now (one header, already checked)."""
    from woolf.protocol.config import LimitsConfig
    from woolf.storage.kinds.lora_file import LoraFile, LoraTensors
    from woolf.storage.weights import spec_of

    model = {"w": torch.randn(256, 256)}
    g = torch.Generator().manual_seed(1)
    path = tmp / "lora.safetensors"
    LoraFile({"w": (torch.randn(8, 256, generator=g), torch.randn(256, 8, generator=g), 1.0)}, spec_of(model),
             64).write(path)
    opened = LoraTensors.open(path, LimitsConfig(), expect=spec_of(model))

    def extra():
        opened._fh.seek(8)
        json.loads(opened._fh.read(opened._start - 8))

    return _timed(extra, repeat=50)


def task_binding(tmp: Path, records: int) -> dict:
    """check_task of a keyless task's next record: its first record's key found and compared."""
    from tests.conftest import key_for
    from tests.gitobjects import commit_tree, git_out, tree_of
    from woolf.git.repo import Git
    from woolf.protocol import layout
    from woolf.protocol.config import LedgerConfig
    from woolf.protocol.config_text import render_config
    from woolf.protocol.rules.tasks import check_task
    from woolf.protocol.tasks import TaskRecord
    from woolf.protocol.trailers import format_message

    repo = tmp / "tasks"
    repo.mkdir()
    git_out(repo, "init", "-q", "-b", "main")
    tree = tree_of(repo, {layout.CONFIG: render_config(LedgerConfig()).encode(), layout.POINTER: b"p\n"})
    genesis = commit_tree(repo, tree, format_message("woolf: version 0", {"Woolf-Version": 0}))
    git_out(repo, "update-ref", layout.MAIN, genesis)
    task = "20260101T000000000Z-carol-0c0c0c0c"
    rec = TaskRecord(task, "reserved", "carol", 0, genesis, "carol@v0", 60, 600.0)
    now = int(time.time())
    tip = commit_tree(repo, tree, rec.message(), [genesis], key=key_for("carol"), when=now)
    for _ in range(records - 1):
        beat = TaskRecord(**{**rec.to_json(), "state": "heartbeat"})
        tip = commit_tree(repo, tree, beat.message(), [tip], key=key_for("carol"), when=now)
    nxt = commit_tree(repo, tree, TaskRecord(**{**rec.to_json(), "state": "heartbeat"}).message(), [tip],
                      key=key_for("carol"), when=now)
    g = Git(repo)
    main = g.rev_parse(layout.MAIN)
    assert check_task(g, task, tip, nxt, main, now=now) == []
    from woolf.protocol.rules.tasks import _first_key_problem

    nxt_rec = TaskRecord(**{**rec.to_json(), "state": "heartbeat"})
    return {"chain_records": records,
            "check_task_s": round(_timed(lambda: check_task(g, task, tip, nxt, main, now=now), repeat=5), 4),
            "of_which_key_binding_s": round(_timed(lambda: _first_key_problem(g, nxt_rec, nxt), repeat=5), 4)}


class _Serve:
    """A local HTTP server: files from a directory, and /slow/* trickling 64 bytes every 0.5 s."""

    def __init__(self, root: Path):
        self.root, self.stop = root, threading.Event()

    def __enter__(self):
        outer = self

        class H(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **kw):
                super().__init__(*a, directory=str(outer.root), **kw)

            def do_GET(self):
                if not self.path.startswith("/slow/"):
                    return super().do_GET()
                self.send_response(200)
                self.end_headers()
                try:
                    while not outer.stop.is_set():
                        self.wfile.write(b"\0" * 64)
                        self.wfile.flush()
                        outer.stop.wait(0.5)
                except OSError:
                    pass

            def log_message(self, *a):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def url_wait(tmp: Path, mib: int, slow_counts) -> dict:
    """Wall seconds copyfetch.fetch_for_copies takes for one quick URL delta of ``mib`` MiB, alone and
    beside N trickling URLs (COPY_FETCH_SECONDS shortened to 3 s: the wait is that bound, whatever N)."""
    import hashlib
    from types import SimpleNamespace

    from tests.conftest import make_network
    from woolf.storage.pointer import Pointer
    from woolf.validator import copyfetch
    from woolf.validator.copyindex import CopyIndex
    from woolf.validator.downloads import DownloadTimes

    copyfetch.COPY_FETCH_SECONDS = 3.0
    tmp.mkdir(parents=True, exist_ok=True)
    net = make_network(tmp / "net", **{"forge.delta_schemes": '["https", "http"]'})
    val = net.clone("val")
    data = torch.randn(mib << 18).numpy().tobytes()
    (tmp / "files").mkdir()
    (tmp / "files" / "d").write_bytes(data)
    out = {}
    with _Serve(tmp / "files") as srv:
        for n in slow_counts:
            val.store.cache_path(hashlib.md5(data).hexdigest()).unlink(missing_ok=True)
            md5 = hashlib.md5(data).hexdigest()
            honest = (SimpleNamespace(id="honest", submission={"delta": {"sha256": "a" * 64}}),
                      Pointer(md5, len(data), "delta.safetensors"), {"url": f"{srv.url}/d"})
            slow = [(SimpleNamespace(id=f"s{i}", submission={"delta": {"sha256": f"{i:064x}"}}),
                     Pointer(f"{i + 1:032x}", 1 << 20, "delta.safetensors"), {"url": f"{srv.url}/slow/{i}"})
                    for i in range(n)]
            state = SimpleNamespace(open_snapshot=[object()], keyless_spent=DownloadTimes(None))
            t0 = time.perf_counter()
            copyfetch.fetch_for_copies(val, state, CopyIndex(SEED), [honest], slow)
            out[f"slow_{n}_s"] = round(time.perf_counter() - t0, 3)
            assert val.store.cache_path(md5).is_file()
    return {"delta_mib": mib, **out}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    q = args.quick
    with tempfile.TemporaryDirectory(prefix="woolf-breach-") as tmp:
        tmp = Path(tmp)
        result = {
            "copy_band": copy_band([1e5] if q else [1e6, 1e7], [100] if q else [1000, 5000]),
            "honest_band": honest_band(3 if q else 8, 10 if q else 30),
            "band_width": band_width(5 if q else 300),
            "store": proof_and_store(tmp / "s", 4 if q else 64),
            "task_binding": task_binding(tmp, 10 if q else 100),
            "url_wait": url_wait(tmp / "u", 4 if q else 40, [0, 8] if q else [0, 8, 64]),
        }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
