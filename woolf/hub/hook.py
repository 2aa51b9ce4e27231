"""The hub's pre-receive hook: read git's ref updates on stdin, refuse the push if any rule fails.

Usage (what `woolf hub init` installs as hooks/pre-receive):
    exec /path/to/python -S -c \
        "import sys; sys.path.append(WOOLF_SRC); from woolf.hub.hook import main; sys.exit(main())"

Runs inside the bare hub; the pushed objects are still in git's quarantine
directory, so the object-directory variables are kept for every git call.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from woolf.git.repo import Git
from woolf.protocol.rules.push import check_push

_KEEP = ("GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_QUARANTINE_PATH")


def main() -> int:
    keep = {k: os.environ[k] for k in _KEEP if k in os.environ}
    git = Git(Path(os.environ.get("GIT_DIR", ".")).resolve(), keep_env=keep)
    updates = []
    for line in sys.stdin.read().splitlines():
        parts = line.split()
        if len(parts) == 3:
            updates.append((parts[0], parts[1], parts[2]))
    try:
        errors = check_push(git, updates)
    except Exception as exc:  # a hook that crashes must still refuse, and say why
        errors = [f"the hub could not check this push: {exc}"]
    for e in errors:
        print(f"woolf hub: refused: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
