"""`woolf train --data PATH`: a participant's own text files, read for the built-in text workloads.

Usage:
    data = user_texts("my-notes/", min_bytes=66)   # TrainData: texts, source "private", files, skipped
    data.skipped                                    # ["repo/.git (hidden)", "img.png (not text)", ...]

A directory is read recursively, in sorted order, but not everything under it is text to train on: a
hidden file or directory (a name beginning with ".", e.g. ``.git``'s objects) and a file that is not text
(a NUL byte, or not UTF-8, in its first 64 KiB) are skipped, and each skip is named in ``skipped`` so that
`woolf train` can say so. The data's place on this machine stays here: ``source`` is "private", and what a
PR publishes of it is a count (woolf/ledger/submission.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from woolf.errors import UsageError
from woolf.workloads.base import TrainData

PRIVATE = "private"  # the TrainData.source of a participant's own files: never their path
_SNIFF = 1 << 16


def _is_text(head: bytes) -> bool:
    if b"\0" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:  # a multi-byte character cut at the sniff's end is still text
        return exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
    return True


def _walk(root: Path, skipped: list[str]) -> list[Path]:
    """Every regular file under ``root``, hidden ones (and everything in hidden directories) left out."""
    out = []
    for here, dirs, names in os.walk(root, onerror=lambda exc: skipped.append(f"{exc.filename} (unreadable)")):
        for d in sorted(dirs):
            if d.startswith("."):
                skipped.append(f"{Path(here, d).relative_to(root)}/ (hidden)")
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for n in sorted(names):
            p = Path(here, n)
            if n.startswith("."):
                skipped.append(f"{p.relative_to(root)} (hidden)")
            elif p.is_file():
                out.append(p)
    return sorted(out)


def user_texts(path: str | Path, min_bytes: int = 1) -> TrainData:
    """The text files at ``path`` (a file, or a directory read recursively); UsageError when there is
    nothing to train on."""
    p = Path(path)
    if not p.exists():
        raise UsageError(f"--data {path}: no such file or directory")
    skipped: list[str] = []
    files = _walk(p, skipped) if p.is_dir() else [p]
    texts, kept = [], []
    for f in files:
        shown = f.relative_to(p) if p.is_dir() else f.name
        try:
            data = f.read_bytes()
        except OSError as exc:
            skipped.append(f"{shown} (unreadable: {exc.strerror})")
            continue
        if not _is_text(data[:_SNIFF]):
            skipped.append(f"{shown} (not text)")
            continue
        texts.append(data)
        kept.append(str(f))
    if not p.is_dir() and not texts:
        raise UsageError(f"--data {path}: {skipped[0].split(' (', 1)[1].rstrip(')')}; woolf trains on text files",
                         hint="give a UTF-8 text file, or a directory of them")
    total = sum(len(t) for t in texts)
    if total < min_bytes:
        more = f"; skipped {len(skipped)}: {', '.join(skipped[:3])}" if skipped else ""
        raise UsageError(f"--data {path}: not enough text to train on ({total} bytes in {len(texts)} file(s), "
                         f"need {min_bytes}+){more}")
    return TrainData(texts, PRIVATE, kept, skipped)
