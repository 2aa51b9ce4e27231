"""Layer 4: bytes at rest: DVC objects, safetensors files, bounded reads of untrusted storage.

Modules: dvcstore / dvcremote / localobjects (transfer), pointer (.dvc files), header / weights /
writer / sparse / outer_state (safetensors), bounded / fetch_url (untrusted reads), files /
verified (atomic writes, hashes).

Usage:
    from woolf.storage.weights import load_checked
"""
