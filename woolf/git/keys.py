"""SSH signing keys: made by ssh-keygen, found through git's own configuration.

Usage:
    private, public = create_key(Path("~/.ssh/woolf-alice").expanduser(), "alice")
    key = signing_key(git)        # WOOLF_SIGNING_KEY, else user.signingkey when gpg.format = ssh
    configure(git, private)       # gpg.format = ssh and user.signingkey in a clone
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from woolf.errors import UsageError

ENV = "WOOLF_SIGNING_KEY"


def ssh_keygen() -> str:
    exe = shutil.which("ssh-keygen")
    if exe is None:
        raise UsageError("ssh-keygen is not installed; signed ledgers need it",
                         hint="install OpenSSH's client (Debian: apt-get install openssh-client)")
    return exe


def create_key(path: Path, name: str) -> tuple[Path, str]:
    """A new ed25519 key without passphrase at ``path`` (and path.pub); returns (path, public text)."""
    path = Path(path)
    if path.exists() or path.with_suffix(path.suffix + ".pub").exists():
        raise UsageError(f"{path} already exists", hint="choose another --out, or use the existing key")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a path under a file, a read-only directory
        raise UsageError(f"--out {path}: cannot create {path.parent} ({exc.strerror})") from None
    proc = subprocess.run([ssh_keygen(), "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"ssh-keygen failed: {proc.stderr.strip()}")
    return path, Path(f"{path}.pub").read_text().strip()


def public_of(private: Path) -> str:
    pub = Path(f"{private}.pub")
    if pub.exists():
        return pub.read_text().strip()
    proc = subprocess.run([ssh_keygen(), "-y", "-f", str(private)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError(f"cannot read the SSH key {private}: {proc.stderr.strip()}")
    return proc.stdout.strip()


def is_public_key(path: Path) -> bool:
    """Whether the file at ``path`` is an SSH public key (one line "ssh-ed25519 AAAA... comment"), not a private one."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(200).decode("ascii", errors="replace").strip()
    except OSError:
        return False  # the signing step says what it cannot read
    return head.startswith(("ssh-", "ecdsa-", "sk-")) and "PRIVATE KEY" not in head


def require_private_key(path: Path, where: str) -> None:
    """``where`` (``--key``, ``WOOLF_SIGNING_KEY``) names a private key: a public one gets one line, not
    ssh-keygen's wall of text."""
    if is_public_key(Path(path)):
        private = Path(path).with_suffix("") if Path(path).suffix == ".pub" else None
        raise UsageError(f"{where}={path} is a public key; point {where} at the private key",
                         hint=f"{where}={private}" if private else "the private key is the file without .pub")


def signing_key(git) -> str | None:
    """The key this clone signs with: $WOOLF_SIGNING_KEY, or git's user.signingkey with gpg.format = ssh."""
    if os.environ.get(ENV):
        require_private_key(Path(os.environ[ENV]), ENV)
        return os.environ[ENV]
    found = {}  # both settings in one `git config` (the last value of each wins, as git reads it)
    out = git.run("config", "-z", "--get-regexp", r"^(gpg\.format|user\.signingkey)$", check=False).stdout
    for item in out.split(b"\0"):
        name, _, value = item.partition(b"\n")
        found[name.decode(errors="replace")] = value.decode(errors="replace").strip()
    key = found.get("user.signingkey", "")
    return key if found.get("gpg.format") == "ssh" and key else None


def configure(git, private: Path) -> None:
    git.run("config", "gpg.format", "ssh")
    git.run("config", "user.signingkey", str(Path(private).resolve()))
