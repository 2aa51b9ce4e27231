"""Who signed a commit, by `git log --format=%G?/%GS` against an allowed-signers file.

Usage:
    found = signatures(git, {commit: signers_text})     # {commit: (status, principal)}
    problem = role_problem(found[commit], signers, "validator")   # None, or why not
    keys = signing_keys(git, [commit, ...])             # {commit: fingerprint of a key that signed it, or ""}

The signature is checked by git itself (`ssh-keygen -Y verify` underneath).
Commits that share one allowed-signers text are verified in one `git log`
call, so a chain of N versions costs a few processes, not N.
"""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

from woolf.protocol.signers import Signers

_STATUS = {"G": "good", "B": "a bad signature", "U": "a good signature by a key not in allowed_signers",
           "X": "an expired signature", "Y": "a signature by an expired key", "R": "a revoked key",
           "E": "a signature that cannot be checked", "N": "no signature"}


_SEEN: dict[tuple[str, bytes], tuple[str, str]] = {}  # (commit, signers text) -> result: a commit id names its bytes


def signatures(git, wanted: dict[str, bytes]) -> dict[str, tuple[str, str]]:
    """{commit: (%G? letter, %GS principal)} for each commit, verified against its signers text.

    Results are remembered per (commit id, allowed-signers text) for the life of the process:
    both are content, so the answer cannot change (a vote is checked by the hook, the tally,
    trust and the audit; each verification runs ssh-keygen)."""
    groups: dict[bytes, list[str]] = defaultdict(list)
    found: dict[str, tuple[str, str]] = {}
    for commit, text in wanted.items():
        if (commit, text) in _SEEN:
            found[commit] = _SEEN[(commit, text)]
        else:
            groups[text].append(commit)
    for text, commits in groups.items():
        with tempfile.TemporaryDirectory() as tmp:
            allowed = Path(tmp) / "allowed_signers"
            allowed.write_bytes(text)
            proc = git.run("-c", f"gpg.ssh.allowedSignersFile={allowed}", "-c", "log.showSignature=false",
                           "log", "--no-walk=unsorted", "--stdin", "--format=%H%x1f%G?%x1f%GS%x1e",
                           input=("\n".join(commits) + "\n").encode())
        for record in proc.stdout.decode(errors="replace").split("\x1e"):
            record = record.strip()
            if record:
                commit, status, principal = (record.split("\x1f") + ["", ""])[:3]
                found[commit] = (status, principal)
                if status != "E":  # "cannot be checked" may be passing (ssh-keygen missing): not remembered
                    if len(_SEEN) > 65536:
                        _SEEN.clear()
                    _SEEN[(commit, text)] = found[commit]
    return found


def role_problem(found: tuple[str, str] | None, signers: Signers, role: str) -> str | None:
    """None when the signature is good and its principal holds ``role``; else why not."""
    status, principal = found or ("N", "")
    if status != "G":
        return f"{_STATUS.get(status, 'an unknown signature state ' + status)} (needs a {role} key)"
    if role not in signers.roles_of(principal):
        return f"signed by {principal}, who is not a {role} in ledger/allowed_signers"
    return None


def signing_keys(git, commits: list[str]) -> dict[str, str]:
    """{commit: the fingerprint (SHA256:...) of the SSH key whose signature on it verifies, listed anywhere
    or not (%G? G or U); "" for none}: who signed, where allowed_signers does not say (a keyless
    contributor's own key, bound by its first task record: protocol/rules/tasks.py)."""
    if not commits:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        allowed = Path(tmp) / "allowed_signers"
        allowed.write_bytes(b"")  # no principal: every good signature is "U", its key still named
        proc = git.run("-c", f"gpg.ssh.allowedSignersFile={allowed}", "-c", "log.showSignature=false",
                       "log", "--no-walk=unsorted", "--stdin", "--format=%H%x1f%G?%x1f%GF%x1e",
                       input=("\n".join(commits) + "\n").encode(), check=False)
    found = dict.fromkeys(commits, "")
    for record in proc.stdout.decode(errors="replace").split("\x1e"):
        commit, status, key = (record.strip().split("\x1f") + ["", ""])[:3]
        if commit in found and status in ("G", "U") and key.startswith("SHA256:"):
            found[commit] = key
    return found
