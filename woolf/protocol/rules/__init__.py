"""Who may write which ref: the rules the hub's hook, `require_trusted_head` and the audit share.

Modules: main.py (the kinds of version commit on main and the role that signs each), quorum.py
(does a version or a rejection rest on k agreeing votes), tasks.py (which task records are
accepted), push.py (which ref updates one push may make), submitter.py (a PR's claimed
contributor and its signature). Standard library only.

Usage:
    from woolf.protocol.rules.push import check_push
"""
