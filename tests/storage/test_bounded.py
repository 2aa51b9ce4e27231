"""No read of an untrusted object, blob or URL passes its declared size or its deadline."""

from __future__ import annotations

import http.server
import os
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import SMALL
from woolf.errors import IntegrityError, InvalidWeightsError, StorageError
from woolf.forges.base import _META_CACHE, PullRequest, fill_from_submission
from woolf.git.repo import BlobTooLargeError
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.protocol.config import LimitsConfig
from woolf.storage.fetch_url import download
from woolf.storage.pointer import Pointer
from woolf.storage.weights import read_spec


@pytest.fixture(scope="module")
def led(tmp_path_factory):
    root = tmp_path_factory.mktemp("bounded")
    return Ledger.init(root / "led", CreateOptions(storage=str(root / "storage"), overrides=SMALL))


def _object(led, md5: str) -> Path:
    odb = led.store._remote_odb()
    path = Path(odb.oid_to_path(md5))
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _leftovers(led) -> list[Path]:
    return [p for p in (led.root / ".dvc" / "cache").rglob(".fetch.*")]


def _in_thread(fn, timeout: float = 60.0):
    """Run fn; fail (instead of hanging the suite) if it does not return in time."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    start = time.monotonic()
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"still reading after {timeout}s"
    return box, time.monotonic() - start


@pytest.mark.parametrize("kind,needle", [
    ("fifo", "not a regular file"),
    ("dev-zero", "symbolic link"),
    ("sparse 1 TiB", "has 1099511627776 bytes, its pointer declares 1000"),
    ("bigger", "has 5000 bytes, its pointer declares 1000"),
    ("smaller", "has 10 bytes, its pointer declares 1000"),
])
def test_storage_object_read_is_bounded(led, kind, needle):
    md5 = os.urandom(16).hex()
    obj = _object(led, md5)
    if kind == "fifo":
        os.mkfifo(obj)
    elif kind == "dev-zero":
        obj.symlink_to("/dev/zero")
    elif kind.startswith("sparse"):
        with open(obj, "wb") as fh:
            fh.truncate(1 << 40)
    else:
        obj.write_bytes(b"x" * (5000 if kind == "bigger" else 10))
    box, _ = _in_thread(lambda: led.store.fetch_object(Pointer(md5, 1000, "d"), max_bytes=10**6, deadline=5))
    assert isinstance(box.get("error"), IntegrityError), box
    assert needle in box["error"].message  # and it returned: a FIFO or /dev/zero read never ends
    assert not _leftovers(led) and not led.store.cache_path(md5).exists()


def test_missing_object_is_a_storage_error_without_the_url(led):
    md5 = os.urandom(16).hex()
    with pytest.raises(StorageError) as err:
        led.store.fetch_object(Pointer(md5, 1000, "d"))
    assert "missing from storage" in err.value.message and "storage" in (err.value.hint or "")
    assert str(led.store.remote_url()) not in err.value.message  # reasons are public; the URL is in the hint


@pytest.mark.unit
def test_read_spec_refuses_a_fifo_and_a_device(tmp_path):
    fifo = tmp_path / "w.safetensors"
    os.mkfifo(fifo)
    box, _ = _in_thread(lambda: read_spec(fifo, LimitsConfig()))
    assert isinstance(box.get("error"), InvalidWeightsError) and "not a regular file" in box["error"].message
    link = tmp_path / "z.safetensors"
    link.symlink_to("/dev/zero")
    box, _ = _in_thread(lambda: read_spec(link, LimitsConfig()))
    assert isinstance(box.get("error"), InvalidWeightsError)


@pytest.mark.unit
def test_a_4mb_pointer_costs_nothing():
    start = time.monotonic()
    with pytest.raises(IntegrityError, match="over 4096"):
        Pointer.parse(b"outs:\n- md5: " + b"[" * (4 << 20))
    assert time.monotonic() - start < 10  # not a parse of 4 MB of nesting (a generous bound: no idle machine assumed)
    good = Pointer("a" * 32, 5, "delta.safetensors")
    assert Pointer.parse(good.render()) == good


def test_blob_size_is_checked_before_reading(led):
    big = led.git.out("hash-object", "-w", "--stdin", input=b"{" + b" " * (20 << 20) + b"}")
    with pytest.raises(BlobTooLargeError) as err:
        led.git.show_bytes(big, max_bytes=65536)
    assert err.value.size == (20 << 20) + 2
    assert led.git.show_bytes(big, max_bytes=None) is not None  # the unbounded read still exists for trusted blobs
    # a PR listing parses submission.json once per blob, and never one over the limit
    sub = "20261129T000000000Z-mallory-00000000"
    commit = led.git.commit_tree_with(led.head().commit, {f"submissions/{sub}/submission.json": b"{" + b" " * (20 << 20) + b"}"},
                                      "x\n", parents=[led.head().commit])
    pr = fill_from_submission(led.git, PullRequest(sub, "open", commit))
    assert pr.submission is None and pr.contributor is None
    oid = led.git.out("rev-parse", f"{commit}:submissions/{sub}/submission.json")
    assert oid in _META_CACHE and _META_CACHE[oid] is None


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path not in ("/slow-headers", "/slow-body", "/endless", "/small"):
            self.send_error(404)
            return
        try:
            if self.path == "/slow-headers":
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for _ in range(100):
                    self.wfile.write(b"X-Drip: 1\r\n")
                    self.wfile.flush()
                    time.sleep(0.2)
                return
            self.send_response(200)
            if self.path == "/slow-body":
                self.send_header("Content-Length", "1000")
                self.end_headers()
                for _ in range(1000):
                    self.wfile.write(b"x")
                    self.wfile.flush()
                    time.sleep(0.2)
            elif self.path == "/endless":
                self.end_headers()
                while True:
                    self.wfile.write(b"z" * 65536)
            elif self.path == "/small":
                self.send_header("Content-Length", "5")
                self.end_headers()
                self.wfile.write(b"hello")
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture(scope="module")
def server():
    srv = _Server(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


@pytest.mark.unit
@pytest.mark.parametrize("path", ["/slow-body", "/slow-headers"])
def test_url_deadline_is_wall_clock(server, tmp_path, path):
    start = time.monotonic()
    with pytest.raises(IntegrityError, match="took longer than 1.5s"):
        download(server + path, tmp_path / "d", {"http"}, max_bytes=10**6, deadline=1.5)
    assert time.monotonic() - start < 30  # before: still downloading after 120 s (generous: no idle machine assumed)


@pytest.mark.unit
def test_url_size_cap_and_a_good_download(server, tmp_path):
    with pytest.raises(IntegrityError, match="passed the limit of 100000 bytes"):
        download(server + "/endless", tmp_path / "d", {"http"}, max_bytes=100_000, deadline=10)
    assert (tmp_path / "d").stat().st_size <= 100_000
    assert download(server + "/small", tmp_path / "ok", {"http"}, max_bytes=5, deadline=10) == 5
    assert (tmp_path / "ok").read_bytes() == b"hello"
    with pytest.raises(IntegrityError, match="not allowed"):
        download(server + "/small", tmp_path / "no", {"https"}, max_bytes=5, deadline=10)


@pytest.mark.unit
def test_url_errors_are_public_safe(server, tmp_path):
    with pytest.raises(StorageError) as closed:  # nothing listens on port 9
        download("http://127.0.0.1:9/secret-internal-path", tmp_path / "d", {"http"}, max_bytes=5, deadline=5)
    assert "secret-internal-path" not in closed.value.message
    with pytest.raises(StorageError) as open_port:  # an HTTP server answers 404 here
        download(server + "/secret-internal-path", tmp_path / "e", {"http"}, max_bytes=5, deadline=5)
    # a verdict's reason is public: a closed port and an open one read the same (no port scan through PRs)
    assert closed.value.message == open_port.value.message == "cannot download the delta from its URL: it gave no file"
