"""`woolf hub init`: the bare repository participants push to, with the rule-enforcing hook.

Usage:
    hub = init_hub(Path("hub.git"), source=Path("my-ledger"))   # then: git -C my-ledger remote add origin hub.git
    install_hook(Path("hub.git"))                                # refresh the hook of an existing hub

The post-receive hook appends the hub's receipt log (woolf/hub/receipts.py: in which
order the hub received each PR). The hooks run this Python (`sys.executable`, recorded now) without site-packages,
with woolf's source directory (recorded now) on its path; re-run
`woolf hub init PATH --from X --hook-only` after moving the virtualenv or the source.
Git itself refuses a push whose pack is over receive.maxInputSize (MAX_PUSH_BYTES,
`--max-push-mb`), before the hook runs.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from woolf.errors import UsageError
from woolf.git.repo import Git, clean_env
from woolf.protocol import layout
from woolf.protocol.signers import signers_text

HOOK = """#!/bin/sh
# Installed by `woolf hub init`: refuses pushes that break the ledger's ref rules
# (see docs/protocol.md#the-hub). Runs the Python that installed it, without
# site-packages (-S: it needs only the standard library and woolf, found here).
exec {python} -S -c {code}
"""
# The receipt log records pushes that create PR heads; any other push (a merge, a verdict, a vote, a
# task record) ends here without starting Python. The Python code matches each line itself: this
# only skips pushes in which no line could match (no ref created under refs/woolf/pr/ ending /head).
RECEIPT_HOOK = """#!/bin/sh
# Installed by `woolf hub init`: appends the hub's receipt log for pushes that open PRs
# (see docs/protocol.md#the-hub). Runs the Python that installed it, without site-packages.
input=$(cat)
opens=
while read -r old new ref; do
  case "$old $ref" in
    0000000000000000000000000000000000000000\\ refs/woolf/pr/*/head) opens=1 ;;
  esac
done <<EOF
$input
EOF
[ -n "$opens" ] || exit 0
printf '%s\\n' "$input" | exec {python} -S -c {code}
"""
_CODE = "import sys; sys.path.append({root!r}); from woolf.hub.{module} import main; sys.exit(main())"
HOOKS = {"pre-receive": "hook", "post-receive": "receipts"}  # the rules; the receipt log (woolf/hub/receipts.py)


MAX_PUSH_BYTES = 16 << 20  # receive.maxInputSize: ours are commits and pointers (KiB); deltas go to storage


def install_hook(hub: Path, max_push_bytes: int | None = None) -> Path:
    """Install the hook and the receive settings; ``max_push_bytes`` (git's receive.maxInputSize,
    the largest pack one push may send): MAX_PUSH_BYTES when the hub has none yet, else kept."""
    hub = Path(hub).resolve()
    if not (hub / "HEAD").exists() or (hub / ".git").exists():
        raise UsageError(f"{hub} is not a bare git repository")
    (hub / "hooks").mkdir(exist_ok=True)
    root = Path(__file__).resolve().parents[2]  # the dir holding woolf/
    for name, module in HOOKS.items():
        hook = hub / "hooks" / name
        code = _CODE.format(root=str(root), module=module)
        text = RECEIPT_HOOK if name == "post-receive" else HOOK
        hook.write_text(text.format(python=shlex.quote(sys.executable), code=shlex.quote(code)))
        hook.chmod(0o755)
    hook = hub / "hooks" / "pre-receive"
    git = Git(hub)
    for key, value in (("receive.denyDeletes", "true"), ("receive.denyNonFastForwards", "true"),
                       ("receive.fsckObjects", "true"), ("core.logAllRefUpdates", "true")):
        git.run("config", key, value)
    if max_push_bytes is not None or not git.out("config", "--get", "receive.maxInputSize", check=False):
        git.run("config", "receive.maxInputSize", str(max_push_bytes or MAX_PUSH_BYTES))
    return hook


def init_hub(path: Path, source: Path | str, max_push_bytes: int | None = None) -> dict:
    """A bare hub cloned from the ledger at ``source`` (main only), with the hook installed."""
    path = Path(path).resolve()
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} exists and is a file", hint="choose a new path for the hub")
    if path.exists() and any(path.iterdir()):
        raise UsageError(f"{path} exists and is not empty", hint="choose a new path for the hub")
    if Path(str(source)).exists() and not Path(str(source)).is_dir():
        raise UsageError(f"--from {source} is a file, not a ledger", hint="give the directory `woolf init` made")
    src = Git(Path(source).resolve()) if Path(str(source)).exists() else None
    if src is not None and src.show_bytes(f"{layout.MAIN}:{layout.CONFIG}") is None:
        raise UsageError(f"{source} holds no ledger (no {layout.CONFIG} on main)",
                         hint="create one with `woolf init PATH` first")
    proc = subprocess.run(["git", "clone", "-q", "--bare", "--single-branch", "--branch", "main",
                           "--no-tags", str(source), str(path)], capture_output=True, env=clean_env())
    if proc.returncode != 0:
        raise UsageError(f"cannot clone {source}: {proc.stderr.decode(errors='replace').strip()}")
    install_hook(path, max_push_bytes)
    hub = Git(path)
    head = hub.rev_parse(layout.MAIN)
    return {"path": str(path), "main": head, "signed": signers_text(hub, head) is not None}
