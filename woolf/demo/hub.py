"""Build a demo hub on this machine: a signed ledger, a hooked bare hub as forge, a storage directory.

Usage:
    hub = create_hub(Path("woolf-demo"), participants=["p1", "p2"], validators=["v1"], overrides={})
    hub.clone_of("p1")     # Path of p1's clone
    create_hub(..., replace=True)   # an earlier demo hub at root is refused unless replace

Every participant and validator gets an SSH key under keys/ and is listed in
ledger/allowed_signers (validators as validators, participants as contributors);
the hub is made by `woolf hub init`, so its hook enforces the ref rules.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from woolf.errors import UsageError
from woolf.git.keys import configure, create_key
from woolf.git.repo import Git, clean_env
from woolf.hub.create import init_hub
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.protocol.config import LedgerConfig
from woolf.protocol.config_text import apply_overrides
from woolf.protocol.signers import signer_line

MARKER = ".woolf-demo.json"


@dataclass
class Hub:
    root: Path

    @property
    def bare(self) -> Path:
        return self.root / "hub.git"

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    def clone_of(self, name: str) -> Path:
        return self.root / "clones" / name

    def key_of(self, name: str) -> Path:
        return self.root / "keys" / name


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, env=clean_env())


def earlier_hub(root: Path) -> dict | None:
    """What an earlier demo left at ``root`` (its marker: when it was made, who took part), or None."""
    try:
        marker = json.loads((root / MARKER).read_text())
    except OSError:
        return None
    except ValueError:
        marker = {}
    return marker if isinstance(marker, dict) else {}


def describe_earlier(root: Path) -> str:
    """One line about the earlier demo hub at ``root``, for a refusal or a prompt."""
    marker = earlier_hub(root) or {}
    created = marker.get("created")
    when = (time.strftime("%Y-%m-%d %H:%M", time.localtime(created))
            if isinstance(created, (int, float)) else "earlier")
    clones = sorted(p.name for p in (root / "clones").iterdir()) if (root / "clones").is_dir() else []
    return (f"{root} holds the demo hub made {when}" + (f" (clones: {', '.join(clones)})" if clones else "")
            + "; replacing it makes its clones' open PRs and their view of main stale")


def prepare_dir(root: Path, replace: bool = False) -> None:
    """Refuse a directory that holds anything but an earlier demo hub; an earlier hub too unless
    ``replace`` (then it is cleared)."""
    if root.exists() and any(root.iterdir()):
        if not (root / MARKER).exists():
            raise UsageError(f"{root} exists and is not an earlier demo hub",
                             hint="choose another --dir, or remove it yourself")
        if not replace:
            raise UsageError(describe_earlier(root), hint="choose another --dir, or pass --force to replace it")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)


def create_hub(root: Path, participants: list[str], validators: list[str],
               overrides: dict[str, str], replace: bool = False, weights: Path | None = None) -> Hub:
    """``weights``: genesis from this checkpoint (demo/regimes.py: a pretrained one), else seeded."""
    apply_overrides(LedgerConfig(name="woolf-demo"), overrides)  # a bad --set fails before anything is made
    prepare_dir(root, replace)
    (root / MARKER).write_text(json.dumps({"created": time.time(), "participants": participants,
                                           "validators": validators}))
    hub = Hub(root)
    seed = root / "seed"
    lines = []
    for name in ["maintainer", *participants, *validators]:
        _, public = create_key(hub.key_of(name), name)
        if name != "maintainer":
            lines.append(signer_line(name, public, ["validator"] if name in validators else []))
    options = CreateOptions(storage=str(hub.storage), name="woolf-demo", overrides=overrides, weights=weights,
                            signing_key=hub.key_of("maintainer"), signer="maintainer",
                            extra_signers=lines)
    Ledger.init(seed, options)
    init_hub(hub.bare, seed)
    shutil.rmtree(seed)
    for name in [*participants, *validators, "observer"]:
        dest = hub.clone_of(name)
        dest.parent.mkdir(parents=True, exist_ok=True)
        _git("clone", "-q", str(hub.bare), str(dest), cwd=root)
        _git("config", "user.name", name, cwd=dest)
        if name != "observer":
            configure(Git(dest), hub.key_of(name))
    (root / "logs").mkdir(exist_ok=True)
    return hub
