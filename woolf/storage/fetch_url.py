"""Download an untrusted URL with limits: allowed schemes on every redirect hop, a size cap, a deadline.

Usage:
    download("https://bucket.example/files/md5/ab/cdef...", Path("tmp"), {"https"}, max_bytes=10**9, deadline=300)

Used for deltas that live in a contributor's own storage (a fork cannot write
to the ledger's). The caller verifies the hashes before reading the bytes.

The deadline is wall-clock for the whole download, redirects and headers
included: the transfer runs in a worker thread that the caller stops waiting
for at the deadline (a server that sends one byte every few seconds never
trips a per-read timeout). Errors name what went wrong in words that can be
posted publicly; the raw transport error goes to the log only. A URL that gives no
file (refused connection, unknown host, reset, any status but 200) gets one and the
same public reason, so that a verdict cannot be used to scan which hosts and ports
answer on the validator's network; the status or error is in the validator's log.
"""

from __future__ import annotations

import logging
import socket
import threading
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests

from woolf.errors import IntegrityError, StorageError, WoolfError

MAX_REDIRECTS = 5
log = logging.getLogger("woolf.storage")


def download(url: str, dest: Path, schemes: set[str], max_bytes: int, deadline: float) -> int:
    """Write the body of ``url`` to ``dest``; returns its size. Raises IntegrityError on abuse."""
    box: dict = {}
    cancel = threading.Event()
    fh = open(dest, "wb")  # opened here: after a timeout the worker can only write to this (unlinked) file
    worker = threading.Thread(target=_transfer, args=(url, fh, schemes, max_bytes, deadline, cancel, box),
                              name="woolf-download", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        cancel.set()
        _unblock(box.get("resp"))
        raise IntegrityError(f"delta download took longer than {deadline:g}s (forge.delta_timeout)")
    fh.close()
    if "error" in box:
        raise box["error"]
    return box["size"]


def _unblock(resp) -> None:
    """Shut the response's socket so that the worker's blocked read returns now.

    Not resp.close(): that waits for the reader's buffer lock, i.e. for the slow read itself.
    """
    sock = getattr(getattr(getattr(resp, "raw", None), "_connection", None), "sock", None)
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def _transfer(url, fh, schemes, max_bytes, deadline, cancel, box) -> None:
    try:
        with fh:
            box["size"] = _get(url, fh, schemes, max_bytes, deadline, cancel, box)
    except WoolfError as exc:
        box["error"] = exc
    except Exception as exc:  # noqa: BLE001 - reported to the caller in words, details to the log
        log.warning("delta download from %s failed: %r", url, exc)
        box["error"] = _no_file()


def _no_file() -> StorageError:
    """The one public reason for a URL that gave no file (the details are logged, not posted)."""
    return StorageError("cannot download the delta from its URL: it gave no file",
                        hint="check that the URL serves the file to anyone (e.g. `curl -fI URL`); "
                             "the validator's log has the status or transport error")


def _get(url, fh, schemes, max_bytes, deadline, cancel, box) -> int:
    timeout = (min(10.0, deadline), min(30.0, deadline))
    for _ in range(MAX_REDIRECTS + 1):
        scheme = urlsplit(url).scheme.lower()
        if scheme not in schemes:
            raise IntegrityError(f"delta URL scheme {scheme!r} is not allowed (allowed: {sorted(schemes)})")
        try:
            resp = requests.get(url, stream=True, allow_redirects=False, timeout=timeout)
        except requests.RequestException as exc:
            log.warning("delta download from %s failed: %r", url, exc)
            raise _no_file() from None
        box["resp"] = resp
        with resp:
            if resp.is_redirect:
                url = urljoin(url, resp.headers.get("Location", ""))
                continue
            if resp.status_code != 200:
                log.warning("delta download from %s: status %s", url, resp.status_code)
                raise _no_file()
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise IntegrityError(f"delta URL declares {declared} bytes, over the limit of {max_bytes}")
            size = 0
            for chunk in resp.iter_content(64 * 1024):
                if cancel.is_set():
                    return size
                size += len(chunk)
                if size > max_bytes:
                    raise IntegrityError(f"delta download passed the limit of {max_bytes} bytes")
                fh.write(chunk)
            return size
    raise IntegrityError(f"delta URL redirected more than {MAX_REDIRECTS} times")
