"""What every git call shares: a clean environment, git's errors, bytes read as text, the commit size cap.

Usage:
    subprocess.run(["git", ...], env=clean_env({"GIT_DIR": d}))
    raise GitError(args, proc.returncode, stderr)
"""

from __future__ import annotations

import os

from woolf.errors import WoolfError

IDENTITY = {
    "GIT_AUTHOR_NAME": "woolf",
    "GIT_AUTHOR_EMAIL": "woolf@localhost",
    "GIT_COMMITTER_NAME": "woolf",
    "GIT_COMMITTER_EMAIL": "woolf@localhost",
}


def clean_env(extra: dict | None = None) -> dict:
    """The caller's environment without GIT_* (a hook or CI job may set GIT_DIR and friends)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env["LC_ALL"] = "C"
    if extra:
        env.update(extra)
    return env


class GitError(WoolfError):
    def __init__(self, args, returncode, stderr):
        cmd = "git " + " ".join(args)
        super().__init__(f"`{cmd}` failed ({returncode}): {stderr.strip()[-800:]}")
        self.returncode = returncode
        self.stderr = stderr


class BlobTooLargeError(WoolfError):
    """A blob is larger than the caller allows; it was not read."""

    def __init__(self, spec: str, size: int, limit: int):
        super().__init__(f"{spec.split(':', 1)[-1]} is {size} bytes, over the limit of {limit}")
        self.size = size


def as_text(raw: bytes) -> str:
    """Git output as text: bytes that are not UTF-8 (hostile paths, messages) become U+FFFD."""
    return raw.decode("utf-8", errors="replace")


COMMIT_MAX_BYTES = 1 << 20  # ours carry a few KiB of trailers; a bigger commit is hand-made, refused unread
