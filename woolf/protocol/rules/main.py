"""The rules for main: what each kind of version commit may change, and whose key signs it.

Usage:
    problems = chain_problems(git, commits)      # oldest first; {commit: [problem, ...]}
    kind = version_kind(fields)                  # "genesis" | "merge" | "change" | None

Three kinds of commit may sit on main's first-parent chain, each numbered one
more than its first parent:

- genesis (version 0, no parent): made by `woolf init`, signed by a maintainer
  listed in its own allowed_signers (the root of trust);
- merge (Woolf-Submission): two parents, changes only the weights pointer (and
  the merge rule's state pointer), signed by a validator; under `validators.quorum`
  k > 1 it names k agreeing signed votes (woolf/protocol/rules/quorum.py);
- change (Woolf-Change): one parent, keeps the weights and state, changes only the
  config, allowed_signers or benchmark, signed by a maintainer.

Each signature is checked against the allowed_signers of the first parent:
the keys in force before the commit. A ledger whose parent has no
allowed_signers is unsigned and only the shape rules apply.
"""

from __future__ import annotations

from woolf.errors import ConfigError
from woolf.git.commits import read_commit
from woolf.protocol import layout
from woolf.protocol.rules.quorum import MAX_NAMED, named_votes, version_quorum_problem
from woolf.protocol.signatures import role_problem, signatures
from woolf.protocol.signers import SIGNERS_PATH, Signers, signers_text
from woolf.protocol.trailers import int_field, parse_message

CHANGEABLE = (layout.CONFIG, SIGNERS_PATH)  # the files a change may touch, exactly
CHANGEABLE_DIR = "ledger/benchmark/"  # and anything under this directory
ROLE_OF = {"genesis": "maintainer", "merge": "validator", "change": "maintainer"}


def version_kind(fields: dict) -> str | None:
    if int_field(fields, "Woolf-Version") is None:
        return None
    if fields.get("Woolf-Change"):
        return "change"
    if fields.get("Woolf-Submission"):
        return "merge"
    return "genesis" if int_field(fields, "Woolf-Version") == 0 else None


def shape_problem(git, commit: str, parents: list[str], fields: dict, kind: str | None) -> str | None:
    """What is wrong with this commit as a version on main, apart from its signature."""
    if kind is None:
        return "not a version commit (no Woolf-Version trailer, or neither a merge nor a change)"
    if kind == "genesis":
        return None if not parents else "a version 0 that has a parent"
    if kind == "merge":
        if len(parents) != 2:
            return f"a merge version with {len(parents)} parents (needs version and submission)"
        extra = set(git.changed_paths(parents[0], commit)) - layout.VERSION_PATHS
        return f"the merge also changes {sorted(extra)}" if extra else None
    if len(parents) != 1:
        return f"a change version with {len(parents)} parents"
    changed = git.changed_paths(parents[0], commit)
    bad = [p for p in changed if p not in CHANGEABLE and not p.startswith(CHANGEABLE_DIR)]
    if bad:
        return f"the change touches {sorted(bad)} (a change may touch only config, signers, benchmark)"
    return None


def chain_problems(git, commits: list[str], first_number: int | None = None) -> dict[str, list[str]]:
    """Shape, numbering and signature of each commit of a first-parent chain, oldest first.

    Every signature to check (the commits', and under a quorum the votes each merge names) is
    verified in one batch per allowed-signers text before the quorum checks read the results."""
    problems: dict[str, list[str]] = {c: [] for c in commits}
    wanted: dict[str, bytes] = {}
    read: list[tuple[str, list[str], dict, str | None]] = []
    expect = first_number
    for commit in commits:
        parents, message = read_commit(git, commit)
        _, fields = parse_message(message)
        kind = version_kind(fields)
        number = int_field(fields, "Woolf-Version")
        if expect is not None and number != expect:
            problems[commit].append(f"numbered {number}, expected {expect} (versions must be consecutive)")
        expect = (number if number is not None else (expect or 0)) + 1
        read.append((commit, parents, fields, kind))
        text = signers_text(git, parents[0] if parents else commit)
        if text is not None and kind is not None:
            wanted[commit] = text
            if kind == "merge":  # the votes it names, checked in the same batch (a malformed list: none)
                wanted.update({sha: text for sha in (named_votes(fields)[0] or [])[:MAX_NAMED]})
    found = signatures(git, wanted) if wanted else {}  # remembered: the quorum checks below reuse them
    for commit, parents, fields, kind in read:
        shape = shape_problem(git, commit, parents, fields, kind)
        if not shape and kind == "merge":  # validators.quorum > 1: a quorum of signed votes (woolf/protocol/votes.py)
            shape = version_quorum_problem(git, commit, parents, fields)
        if shape:
            problems[commit].append(shape)
            continue
        text = wanted.get(commit)
        if text is None:
            continue  # unsigned ledger: shape rules only
        try:
            signers = Signers.parse(text.decode(errors="replace"))
        except ConfigError as exc:
            problems[commit].append(f"allowed_signers before it is malformed: {exc.message}")
            continue
        problem = role_problem(found.get(commit), signers, ROLE_OF[kind])
        if problem:
            problems[commit].append(problem)
    return problems
