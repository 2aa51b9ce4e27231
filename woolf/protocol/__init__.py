"""Layer 2: what every byte of a ledger means and who may write it. Standard library only.

This package is exactly the import closure of the hub's pre-receive hook (woolf/hub/hook.py), which
runs as `python -S`: no torch, no DVC, no site-packages. A test checks it.

Modules: layout (paths, ref names, limits), config / config_check / config_text (ledger/woolf.toml),
trailers, safejson, compress_spec, contributor (ids), signers (allowed_signers), signatures
(git verify), versions, tally (agreement of ballots) and votes, tasks (task records);
rules/ holds the checks: main, quorum, tasks, push, submitter.

Usage:
    from woolf.protocol import layout
    from woolf.protocol.config import parse_config
"""
