"""The hub: a bare git repository whose hooks enforce who may move which ref.

Usage:
    from woolf.hub import init_hub; init_hub(Path("hub.git"), Path("my-ledger"))
    install_hook(Path("hub.git"))          # the pre-receive hook again (after an upgrade)

Standard library only, like the hook it installs (woolf/hub/hook.py runs under `python -S`).
"""

from woolf.hub.create import init_hub, install_hook

__all__ = ["init_hub", "install_hook"]
