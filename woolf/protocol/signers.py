"""`ledger/allowed_signers`: git's allowed-signers file, with each key's roles.

Usage:
    signers = Signers.parse(text)               # raises ConfigError on a bad line
    signers.roles_of("alice")                   # {"validator", "maintainer"}
    line = signer_line("alice", public_key_text, ["validator", "maintainer"])

Each line is what `ssh-keygen -Y verify` reads (principal, options, key type,
key) followed by the key's roles in its comment field:

    alice namespaces="git" ssh-ed25519 AAAA... roles=validator,maintainer

A line without `roles=` is a contributor's key. One plain name per line, so the
principal that git reports (`%GS`) is the name whose roles apply.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from woolf.errors import ConfigError
from woolf.git.commits import COMMIT_ID
from woolf.protocol.layout import CONTRIBUTOR

SIGNERS_PATH = "ledger/allowed_signers"
ROLES = ("validator", "maintainer", "contributor")
_KEYTYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521",
             "ssh-rsa", "sk-ssh-ed25519@openssh.com", "sk-ecdsa-sha2-nistp256@openssh.com")
_B64 = re.compile(r"^[A-Za-z0-9+/]+=*$")


@dataclass(frozen=True)
class Signer:
    name: str
    keytype: str
    key: str
    roles: frozenset[str]

    def line(self) -> str:
        roles = sorted(self.roles - {"contributor"})
        tail = f" roles={','.join(roles)}" if roles else ""
        return f'{self.name} namespaces="git" {self.keytype} {self.key}{tail}'


@dataclass
class Signers:
    entries: list[Signer]

    @classmethod
    def parse(cls, text: str, source: str = SIGNERS_PATH) -> Signers:
        entries = []
        for n, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            entries.append(_parse_line(line, f"{source}:{n}"))
        return cls(entries)

    def roles_of(self, name: str | None) -> set[str]:
        return {r for s in self.entries if s.name == name for r in s.roles}

    def names_with(self, role: str) -> set[str]:
        return {s.name for s in self.entries if role in s.roles}

    def render(self) -> str:
        head = "# who may sign what in this ledger; see docs/protocol.md#signatures\n"
        return head + "".join(s.line() + "\n" for s in self.entries)


def _parse_line(line: str, where: str) -> Signer:
    parts = line.split()
    hint = 'expected: NAME namespaces="git" KEYTYPE BASE64KEY [roles=validator,maintainer]'
    if len(parts) not in (4, 5) or parts[1] != 'namespaces="git"':
        raise ConfigError(f"{where}: not an allowed-signers line of this ledger", hint=hint)
    name, _, keytype, key, *rest = parts
    if not CONTRIBUTOR.match(name):
        raise ConfigError(f"{where}: signer name {name!r} must be one plain contributor id "
                          "(no patterns, no lists)", hint=hint)
    if keytype not in _KEYTYPES or not _B64.match(key):
        raise ConfigError(f"{where}: {keytype!r} is not an SSH public key type", hint=hint)
    roles = {"contributor"}
    if rest:
        if not rest[0].startswith("roles="):
            raise ConfigError(f"{where}: unexpected {rest[0]!r}", hint=hint)
        named = set(rest[0][len("roles="):].split(","))
        if not named or named - set(ROLES):
            raise ConfigError(f"{where}: roles must be drawn from {', '.join(ROLES)}", hint=hint)
        roles |= named
    return Signer(name, keytype, key, frozenset(roles))


def signer_line(name: str, public_key: str, roles: list[str] | tuple[str, ...] = ()) -> str:
    """The allowed_signers line for ``public_key`` (the text of a .pub file)."""
    parts = public_key.split()
    if len(parts) < 2:
        raise ConfigError("not an SSH public key", hint="pass the .pub file `woolf key create` wrote")
    signer = _parse_line(f'{name} namespaces="git" {parts[0]} {parts[1]}'
                         + (f" roles={','.join(roles)}" if roles else ""), "key")
    return signer.line()



def signers_text(git, commit: str | None) -> bytes | None:
    """ledger/allowed_signers at ``commit``; remembered per commit id (its content cannot change)."""
    if not commit:
        return None
    if not COMMIT_ID.match(commit):  # a ref name moves: read it every time
        return git.show_bytes(f"{commit}:{SIGNERS_PATH}")
    cache = git.__dict__.setdefault("_signers_at", {})
    text = cache.get(commit)
    if text is None:  # None (no file, or the commit not fetched yet) is never remembered
        text = git.show_bytes(f"{commit}:{SIGNERS_PATH}")
        if text is not None:
            if len(cache) >= 256:
                cache.clear()
            cache[commit] = text
    return text
