"""The hub: a bare git repository whose hooks enforce who may move which ref.

Usage:
    from woolf.hub.create import init_hub; init_hub(Path("hub.git"), Path("my-ledger"))
"""
