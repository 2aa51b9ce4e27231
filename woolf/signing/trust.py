"""Before building on main: is its head, and the config in force, signed by the right keys?

Usage:
    require_trusted_head(ledger, head)         # raises IntegrityError when not
    require_validator_key(ledger, head)        # raises UsageError when this clone cannot sign merges

Validators call both before every evaluation, `woolf train` calls the first:
a config or a version that did not come from a maintainer or validator key is
never used. The whole chain is re-checked by `woolf audit`.
"""

from __future__ import annotations

from woolf import layout
from woolf.errors import IntegrityError, UsageError
from woolf.signing.authority import chain_problems, signers_text
from woolf.signing.signers import SIGNERS_PATH, Signers

_TRUSTED: set[tuple[str, str]] = set()


def is_signed(ledger, commit: str) -> bool:
    return signers_text(ledger.git, commit) is not None


def require_trusted_head(ledger, head) -> None:
    key = (str(ledger.root), head.commit)
    if key in _TRUSTED:
        return
    git = ledger.git
    last_change = git.out("log", "-1", "--first-parent", "--format=%H", head.commit, "--",
                          layout.CONFIG, SIGNERS_PATH)
    for commit, what in ((head.commit, f"main's head (version {head.version})"),
                         (last_change, "the commit that last changed the config or signers")):
        if not commit:
            continue
        problems = chain_problems(git, [commit])[commit]
        if problems:
            raise IntegrityError(f"{what} {commit[:12]} is not trusted: {'; '.join(problems)}",
                                 hint="nothing is built on it; run `woolf audit` and tell the ledger's maintainers")
    _TRUSTED.add(key)


def require_validator_key(ledger, head) -> None:
    text = signers_text(ledger.git, head.commit)
    if text is None:
        return  # unsigned ledger
    from woolf.signing.keys import public_of

    key = ledger.git.sign_key
    if not key:
        raise UsageError("this ledger is signed: a validator needs its SSH key",
                         hint="`woolf key create`, ask a maintainer to add it as validator, then "
                              "`git config gpg.format ssh; git config user.signingkey PATH` (or WOOLF_SIGNING_KEY)")
    parts = public_of(key).split()
    signers = Signers.parse(text.decode(errors="replace"))
    if not any(s.key == parts[1] and "validator" in s.roles for s in signers.entries):
        raise UsageError(f"the key {key} is not a validator key in ledger/allowed_signers",
                         hint="ask a maintainer to add it: `woolf signers add NAME --role validator --key KEY.pub`")


def require_validator(ledger, head) -> None:
    """Both checks a validator makes before it evaluates anything against ``head``."""
    require_trusted_head(ledger, head)
    require_validator_key(ledger, head)
