"""Training tasks: a reserved shard with a lease, heartbeats while training, a final state.

Modules: records.py (a record: a commit on refs/woolf/task/<id>), lifecycle.py (reserve,
heartbeat, finish, derived states, `woolf tasks`), rules.py (what the hub accepts).
"""
