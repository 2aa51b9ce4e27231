"""Before building on main: is its head, and the config in force, signed by the right keys?

Usage:
    require_trusted_head(ledger, head)         # raises IntegrityError when not
    require_validator_key(ledger, head)        # raises UsageError when this clone cannot sign merges
    name = signer_name(ledger)                 # this clone's key's name in allowed_signers, or None

Validators call both before every evaluation, `woolf train` calls the first:
a config or a version that did not come from a maintainer or validator key is
never used. The whole chain is re-checked by `woolf audit`.
"""

from __future__ import annotations

import os

from woolf.errors import IntegrityError, UsageError
from woolf.git.keys import public_of
from woolf.protocol import layout
from woolf.protocol.rules.main import chain_problems
from woolf.protocol.signers import SIGNERS_PATH, Signers, signers_text

_TRUSTED: set[tuple[str, str]] = set()


def is_signed(ledger, commit: str) -> bool:
    return signers_text(ledger.git, commit) is not None


def require_trusted_head(ledger, head) -> None:
    git, root = ledger.git, str(ledger.root)
    if (root, head.commit) in _TRUSTED:
        return
    _check(git, head.commit, f"main's head (version {head.version})")
    _TRUSTED.add((root, head.commit))
    if head.submission and head.parents and (root, head.parents[0]) in _TRUSTED:
        return  # a verified merge changes only the weights pointer: its parent's config still holds
    last_change = git.out("log", "-1", "--first-parent", "--format=%H", head.commit, "--",
                          layout.CONFIG, SIGNERS_PATH)
    if last_change and (root, last_change) not in _TRUSTED:
        _check(git, last_change, "the commit that last changed the config or signers")
        _TRUSTED.add((root, last_change))


def _check(git, commit: str, what: str) -> None:
    problems = chain_problems(git, [commit])[commit]
    if problems:
        raise IntegrityError(f"{what} {commit[:12]} is not trusted: {'; '.join(problems)}",
                             hint="nothing is built on it; run `woolf audit` and tell the ledger's maintainers")


def require_validator_key(ledger, head) -> None:
    text = signers_text(ledger.git, head.commit)
    if text is None:
        return  # unsigned ledger

    key = ledger.git.sign_key
    if not key and ledger.config.forge.kind != "local":
        return  # a CI evaluate-only job holds no key; the apply job's merge is signed (ci/merge.sh)
    if not key:
        raise UsageError("this ledger is signed: a validator needs its SSH key",
                         hint="`woolf key create`, ask a maintainer to add it as validator, then "
                              "`git config gpg.format ssh; git config user.signingkey PATH` (or WOOLF_SIGNING_KEY)")
    public = public_of(key).split()[1]
    if _is_validator_key(text, public):
        return
    fetched, newer = _origin_signers(ledger, head)  # this clone may predate the change that added the key
    if newer is not None and _is_validator_key(newer, public):
        return  # the validator works on origin's main, which it fetches before every pass
    raise UsageError(f"the key {key} is not a validator key in ledger/allowed_signers"
                     + (" (nor on origin's main, fetched now)" if fetched else ""),
                     hint="ask a maintainer to add it: `woolf signers add NAME --role validator --key KEY.pub`"
                          + ("" if fetched else "; if one did since this clone last pulled, `woolf pull`"))


def _is_validator_key(text: bytes, public: str) -> bool:
    signers = Signers.parse(text.decode(errors="replace"))
    return any(s.key == public and "validator" in s.roles for s in signers.entries)


def _origin_signers(ledger, head) -> tuple[bool, bytes | None]:
    """(fetched, ledger/allowed_signers on origin's main where that is not ``head``): whether origin
    could be fetched, and its signers. Whether that main is trusted is checked before anything is
    built on it (require_trusted_head)."""
    try:
        ledger.fetch(prs=False)
    except Exception:  # noqa: BLE001 - offline, no origin: the error names `woolf pull` instead
        return False, None
    commit = ledger.git.rev_parse("refs/remotes/origin/main")
    if not commit or commit == head.commit:
        return True, None
    return True, signers_text(ledger.git, commit)


def signer_name(ledger) -> str | None:
    """The name allowed_signers gives the key this clone signs with (origin's main when fetched, else main),
    or None: an unsigned ledger, no key, a key it does not list. A validator's verdicts are named so,
    not host:pid."""
    key = ledger.git.sign_key
    ref = "refs/remotes/origin/main" if ledger.git.rev_parse("refs/remotes/origin/main") else layout.MAIN
    text = signers_text(ledger.git, ledger.git.rev_parse(ref)) if key else None
    if text is None:
        return None
    public = public_of(key).split()[1]
    try:
        signers = Signers.parse(text.decode(errors="replace"))
    except Exception:  # noqa: BLE001 - a malformed list names nobody; the trust checks say what is wrong
        return None
    return next((s.name for s in signers.entries if s.key == public), None)


def require_validator(ledger, head) -> None:
    """Both checks a validator makes before it evaluates anything against ``head``."""
    require_trusted_head(ledger, head)
    require_validator_key(ledger, head)


def require_command_trust(ledger, head) -> None:
    """workload.command runs a program named by the config on this machine: only from a signed config.

    On a signed ledger the config in force was checked by require_trusted_head (a maintainer
    signed its last change). On an unsigned one nobody vouches for it, so the participant must
    opt in with WOOLF_TRUST_COMMAND=1.
    """
    if is_signed(ledger, head.commit) or os.environ.get("WOOLF_TRUST_COMMAND") == "1":
        return
    raise UsageError(
        f"this ledger's config asks to run {(ledger.config.workload.command.split() or [''])[0]!r} for training, "
        "and the ledger is unsigned: nobody vouches for that config",
        hint="if you trust everyone who can push to its main, set WOOLF_TRUST_COMMAND=1; "
             "better, ask its maintainers to sign it (docs/protocol.md#signatures)")
