"""Download an untrusted URL with limits: allowed schemes on every redirect hop, a size cap, a deadline.

Usage:
    download("https://bucket.example/files/md5/ab/cdef...", Path("tmp"), {"https"}, max_bytes=10**9, deadline=300)

Used for deltas that live in a contributor's own storage (a fork cannot write
to the ledger's). The caller verifies the hashes before reading the bytes.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import requests

from woolf.errors import IntegrityError, StorageError

MAX_REDIRECTS = 5


def download(url: str, dest: Path, schemes: set[str], max_bytes: int, deadline: float) -> int:
    """Write the body of ``url`` to ``dest``; returns its size. Raises IntegrityError on abuse."""
    start = time.monotonic()
    for _ in range(MAX_REDIRECTS + 1):
        scheme = urlsplit(url).scheme.lower()
        if scheme not in schemes:
            raise IntegrityError(f"delta URL scheme {scheme!r} is not allowed (allowed: {sorted(schemes)})")
        try:
            resp = requests.get(url, stream=True, allow_redirects=False, timeout=(10, 30))
        except requests.RequestException as exc:
            raise StorageError(f"cannot download the delta from {url}: {exc}") from None
        with resp:
            if resp.is_redirect:
                url = urljoin(url, resp.headers.get("Location", ""))
                continue
            if resp.status_code != 200:
                raise StorageError(f"delta URL answered {resp.status_code}")
            declared = resp.headers.get("Content-Length")
            if declared and declared.isdigit() and int(declared) > max_bytes:
                raise IntegrityError(f"delta URL declares {declared} bytes, over the limit of {max_bytes}")
            size = 0
            with open(dest, "wb") as fh:
                for chunk in resp.iter_content(1 << 20):
                    size += len(chunk)
                    if size > max_bytes:
                        raise IntegrityError(f"delta download passed the limit of {max_bytes} bytes")
                    if time.monotonic() - start > deadline:
                        raise IntegrityError(f"delta download took longer than {deadline:g}s")
                    fh.write(chunk)
            return size
    raise IntegrityError(f"delta URL redirected more than {MAX_REDIRECTS} times")
