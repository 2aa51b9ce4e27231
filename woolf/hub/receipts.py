"""The hub's post-receive hook: append a receipt for every push that created PR heads.

Usage (what `woolf hub init` installs as hooks/post-receive):
    exec /path/to/python -S -c \
        "import sys; sys.path.append(WOOLF_SRC); from woolf.hub.receipts import main; sys.exit(main())"
    record(git, [(old, new, ref), ...])      # the receipt commit, or None when the push created no PR

The format and its readers are woolf/protocol/receipts.py. Runs after git has
updated the refs (the push has landed), with the hub's clock; a receipt that
cannot be written is reported to the pusher and leaves the push as it is (that
PR keeps its validators' own receive order). Concurrent pushes each append: the
ref moves by compare-and-swap, retried.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from woolf.errors import WoolfError
from woolf.git.repo import Git
from woolf.protocol import layout
from woolf.protocol.receipts import RECEIPTS
from woolf.protocol.rules.flood import keyed_names, signed_by_own_key
from woolf.protocol.trailers import format_message, int_field, parse_message

ZERO = "0" * 40
_HEAD = re.compile(r"^refs/woolf/pr/([^/]+)/head$")
_HUB = {"GIT_AUTHOR_NAME": "woolf hub", "GIT_AUTHOR_EMAIL": "hub@woolf", "GIT_COMMITTER_NAME": "woolf hub",
        "GIT_COMMITTER_EMAIL": "hub@woolf"}


def record(git, updates: list[tuple[str, str, str]], tries: int = 64) -> str | None:
    ids = [m.group(1) for old, new, ref in updates
           if old == ZERO and new != ZERO and (m := _HEAD.match(ref)) and layout.SUBMISSION_ID.match(m.group(1))]
    if not ids:
        return None
    main = git.rev_parse(layout.MAIN)
    signed = sorted(signed_by_own_key(git, {i: n for o, n, r in updates for i in ids if r.endswith(f"/{i}/head")},
                                      keyed_names(git, main)[1]))
    empty = git.out("mktree", input=b"")
    for _ in range(tries):
        tip = git.rev_parse(RECEIPTS)
        number = 1 + (int_field(parse_message(git.message(tip))[1], "Woolf-Receipt") or 0) if tip else 1
        message = format_message(f"woolf: hub receipt {number}", {"Woolf-Receipt": number, "Woolf-Received": ids,
                                                                           "Woolf-Signed": signed})
        commit = git.out("commit-tree", empty, *(["-p", tip] if tip else []), "-F", "-",
                         input=message.encode(), env=_HUB)
        if git.run("update-ref", RECEIPTS, commit, tip or ZERO, check=False).returncode == 0:
            return commit
    raise WoolfError(f"the receipt for {len(ids)} PR(s) lost {tries} races with other pushes")


def main() -> int:
    git = Git(Path(os.environ.get("GIT_DIR", ".")).resolve())
    updates = [tuple(p) for p in (line.split() for line in sys.stdin.read().splitlines()) if len(p) == 3]
    try:
        record(git, updates)
    except Exception as exc:  # noqa: BLE001 - the push has landed; say why its receipt is missing
        print(f"woolf hub: no receipt recorded for this push ({exc}); its PRs keep each validator's "
              "receive order", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
