"""A maintainer's change of the ledger: a new version with other config or signers, same weights.

Usage:
    v = set_config(ledger, {"policy.min_improvement": "-0.05"}, reason="looser gate")
    v = set_signer(ledger, "v2", public_key_text, ["validator"])      # add or replace
    v = set_signer(ledger, "v2", None)                                 # remove

A change is a version commit (`Woolf-Version: N+1`, `Woolf-Change: config|signers`)
keeping main's weights and outer state (their pointers and sha256 trailers), whose
tree differs from main's only in ledger/woolf.toml or ledger/allowed_signers,
signed by this clone's key, pushed to main with a lease. On a signed ledger the
hub accepts it only when that key is a maintainer's; validators and `woolf train`
use a config only when its last change verifies.
"""

from __future__ import annotations

from woolf.errors import ConfigError, UsageError
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.config_text import apply_overrides, render_config
from woolf.protocol.signers import SIGNERS_PATH, Signers, signer_line, signers_text
from woolf.protocol.trailers import format_message

ORIGIN_MAIN = "refs/remotes/origin/main"


def _commit_change(ledger, kind: str, files: dict[str, bytes], reason: str):
    head = ledger.head(ORIGIN_MAIN)
    if signers_text(ledger.git, head.commit) is not None and not ledger.git.sign_key:
        raise UsageError("this ledger is signed: a change must be signed with a maintainer's key",
                         hint="git config gpg.format ssh; git config user.signingkey PATH (or WOOLF_SIGNING_KEY)")
    number, reason = head.version + 1, " ".join(reason.split())
    message = format_message(f"woolf: version {number}, {kind} change: {reason}",
                             {"Woolf-Version": number, "Woolf-Change": kind,
                              "Woolf-Weights-Sha256": head.weights_sha256,
                              "Woolf-State-Sha256": head.state_sha256, "Woolf-Reason": reason})
    commit = ledger.git.commit_tree_with(head.commit, files, message, parents=[head.commit])
    ledger.git.push("origin", [(commit, layout.MAIN)], leases={layout.MAIN: head.commit})
    ledger.fetch()
    if ledger.git.rev_parse(layout.MAIN) == head.commit:  # this clone was current: keep it so
        ledger.git.run("merge", "--ff-only", "-q", ORIGIN_MAIN, check=False)
        ledger.reread_config()
    return ledger.head(ORIGIN_MAIN)


def set_config(ledger, overrides: dict[str, str], reason: str = ""):
    ledger.fetch()
    text = (ledger.git.show_bytes(f"{ORIGIN_MAIN}:{layout.CONFIG}") or b"").decode()
    cfg = apply_overrides(parse_config(text), overrides, "woolf config set")  # validates every value
    new = parse_config(text).workload
    if cfg.workload.name != new.name or cfg.workload.params != new.params:
        from woolf.workloads.base import load_workload  # deferred: loads torch

        try:
            load_workload(cfg.workload)  # refuse a workload that does not load here
        except ConfigError as exc:  # the value came from this command, not from a config file on disk
            raise ConfigError(f"woolf config set: {exc.message.removeprefix('ledger/woolf.toml: ')}",
                              hint=exc.hint) from None
    reason = reason or "set " + ", ".join(f"{k}={v}" for k, v in overrides.items())
    return _commit_change(ledger, "config", {layout.CONFIG: render_config(cfg).encode()}, reason)


def set_signer(ledger, name: str, public_key: str | None, roles: list[str] | tuple[str, ...] = (),
               reason: str = ""):
    ledger.fetch()
    text = ledger.git.show_bytes(f"{ORIGIN_MAIN}:{SIGNERS_PATH}")
    if text is None:
        raise UsageError("this ledger is unsigned (no ledger/allowed_signers on main)",
                         hint="signing starts at `woolf init --key`; see docs/protocol.md#signatures")
    signers = Signers.parse(text.decode())
    kept = [s for s in signers.entries if s.name != name]
    if public_key is None and len(kept) == len(signers.entries):
        raise UsageError(f"{name} is not in ledger/allowed_signers")
    lines = [s.line() for s in kept] + ([signer_line(name, public_key, roles)] if public_key else [])
    new = Signers.parse("\n".join(lines))
    if not new.names_with("maintainer"):
        if public_key and len(kept) < len(signers.entries):  # a new key under the maintainer's own name
            raise UsageError(f"{name} is the maintainer's name in ledger/allowed_signers: adding a key under it "
                             "would replace the maintainer's key and leave the ledger without a maintainer",
                             hint="add this key under another name: `woolf signers add OTHER --key KEY.pub` "
                                  "(the key's owner signs as OTHER: `woolf key create --name OTHER`)")
        raise UsageError("that would leave the ledger without a maintainer")
    what = f"add {name} as {', '.join(roles) or 'contributor'}" if public_key else f"remove {name}"
    return _commit_change(ledger, "signers", {SIGNERS_PATH: new.render().encode()}, reason or what)
