"""Where things live in a ledger repository, and in its git remote.

Usage:
    from woolf.protocol.layout import WEIGHTS, POINTER, submission_paths
"""

from __future__ import annotations

import re

CONFIG = "ledger/woolf.toml"
WEIGHTS = "ledger/weights/model.safetensors"  # DVC-tracked, git-ignored
POINTER = WEIGHTS + ".dvc"  # the DVC pointer, committed in every version
STATE = "ledger/weights/outer.safetensors"  # merge-rule state (momentum, buffer), DVC-tracked
STATE_POINTER = STATE + ".dvc"  # committed in versions merged under a rule that keeps state
VERSION_PATHS = frozenset({POINTER, STATE_POINTER})  # all a version commit may change
SUBMISSIONS = "submissions"  # the only area a submission commit may touch
WORK = ".woolf"  # local, git-ignored work area (trained weights, checkouts, participant state)
MAIN = "refs/heads/main"
PR_PREFIX = "refs/woolf/pr"  # local forge: refs/woolf/pr/<id>/{head,verdict}

# \Z, not $: `$` also matches before a final newline, and "alice\n" is no name
SUBMISSION_ID = re.compile(r"^[0-9]{8}T[0-9]{9}Z-[a-z0-9][a-z0-9_.-]{0,38}-[0-9a-f]{8}\Z")
CONTRIBUTOR = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,38}\Z")

META_MAX_BYTES = 64 * 1024  # a PR's submission.json: a few hundred bytes in practice
META_MAX_DEPTH = 8  # schema 1 nests 3 levels (metrics.before.loss)

GITIGNORE = f"/{WORK}/\n/{SUBMISSIONS}/\n"


def submission_paths(sub_id: str) -> tuple[str, str, str]:
    """(delta file, its DVC pointer, metadata file) of a submission, repo-relative."""
    base = f"{SUBMISSIONS}/{sub_id}"
    return f"{base}/delta.safetensors", f"{base}/delta.safetensors.dvc", f"{base}/submission.json"
