"""Authority by signatures: SSH keys, ledger/allowed_signers, git's own verification.

Usage:
    from woolf.signing.signers import Signers; from woolf.signing.verify import signatures
"""
