"""Template ledgers: each test process (one per xdist worker) builds a signed ledger, its DVC storage
and DVC cache once per genesis, and every test gets a copy instead of a ledger built from nothing.

Usage (tests/conftest.py's make_network does this; a test rarely needs it directly):
    work = restore_ledger(root, settings, signed=True)   # root/work and root/storage, version 0
    init_hub(root / "hub.git", work.root)                # the hub is made per test, from the copy

What is copied: root/work (git repository, DVC cache, weights, .dvc/) and root/storage (the DVC
remote holding genesis). Version 0 of a ledger records the absolute path of its storage in
.dvc/config, so a copy would push to the template's storage. restore_ledger rewrites that file (and
ledger/config.toml, for settings that do not change genesis: the template is keyed by those that
do) and makes version 0 again with the product's own Git wrapper: the same message, authorship and
signing key as `woolf init` (woolf/ledger/create.py). tests/test_ledger_template.py checks that a
restored ledger is what `Ledger.init` builds at that path: the same tree but for the storage path,
the same message, signed, audits clean, and pushes to its own storage, never the template's.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path

from woolf.git.repo import Git
from woolf.ledger.create import CreateOptions
from woolf.ledger.ledger import Ledger
from woolf.protocol import layout
from woolf.protocol.config import parse_config
from woolf.protocol.config_text import apply_overrides, render_config

# Keys that change what `woolf init` computes from the workload (genesis weights, benchmark, metrics)
# or where it writes: a template per distinct value. Every other key only changes config.toml.
GENESIS_KEYS = ("workload.", "benchmark.")

_DIR = Path(tempfile.mkdtemp(prefix="woolf-test-templates-"))
atexit.register(shutil.rmtree, _DIR, True)
_TEMPLATES: dict[tuple, Path] = {}


def _storage_line(storage: Path) -> str:
    return f"url = {storage}\n"


def template(settings: dict[str, str], signing: dict) -> Path:
    """The template for these genesis settings (built on first use in this process): tpl/work, tpl/storage."""
    genesis = {k: v for k, v in settings.items() if k.startswith(GENESIS_KEYS)}
    key = (bool(signing), tuple(sorted(genesis.items())))
    if key not in _TEMPLATES:
        tpl = _DIR / f"t{len(_TEMPLATES)}"
        tpl.mkdir()
        Ledger.init(tpl / "work", CreateOptions(storage=str(tpl / "storage"), overrides=genesis, **signing))
        _TEMPLATES[key] = tpl
    return _TEMPLATES[key]


def restore_ledger(root: Path, settings: dict[str, str], signing: dict) -> Ledger:
    """A copy of the template at root/work with its storage at root/storage, version 0 made again for
    this path and these settings (what `Ledger.init(root/"work", storage=root/"storage", ...)` makes)."""
    tpl = template(settings, signing)
    root = Path(root).resolve()
    work, storage = root / "work", root / "storage"
    shutil.copytree(tpl / "work", work, symlinks=True)
    shutil.copytree(tpl / "storage", storage, symlinks=True)
    dvc_config = work / ".dvc" / "config"
    text = dvc_config.read_text()
    old = _storage_line((tpl / "storage").resolve())
    if text.count(old) != 1:
        raise AssertionError(f"the template's .dvc/config does not name its storage once:\n{text}")
    dvc_config.write_text(text.replace(old, _storage_line(storage)))
    config = work / layout.CONFIG
    config.write_text(render_config(apply_overrides(parse_config(config.read_text()), settings)))
    git = Git(work)
    git.run("add", "-A")
    sign = ["-S"] if git.sign_key else []
    git.run(*git.sign_args(), "commit", "-q", "--amend", *sign, "--no-edit", "--allow-empty")
    return Ledger.open(work)
