"""Layer 4: bytes at rest: DVC objects, safetensors files, bounded reads of untrusted storage.

Modules: dvcstore / dvcremote / localobjects (transfer), pointer (.dvc files), header / weights /
writer / lazy / streamdelta / shards / outer_state (safetensors), kinds/ (delta kinds: one module per
kind behind one interface, looked up by name), bounded / fetch_url (untrusted reads), files /
verified (atomic writes, hashes).

Usage:
    from woolf.storage.weights import load_checked
"""
