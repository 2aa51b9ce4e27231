"""Bytes sealed to one validator: a private-data PR's audited samples, readable only by the validator that asked.

Usage:
    private, public_hex = validator_key(ledger)       # made once: .woolf/validator/proof-x25519
    blob = seal_to(public_hex, data)                  # the participant: what it uploads
    data = open_sealed(private, blob)                 # the validator: ValueError when it is not sealed to it

X25519 with a fresh ephemeral key per blob, HKDF-SHA256 over the shared secret (and both public keys)
to an AES-256-GCM key: the blob is ephemeral public key (32 bytes) | nonce (12) | ciphertext. The
validator's public key travels in its challenge (woolf/protocol/challenge.py); its private key never
leaves its clone. Storage is readable by whoever reads the ledger's remote; the answer naming the
blob is public: only the key keeps the samples to that validator.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from woolf.protocol import layout

KEY_FILE = "proof-x25519"
_INFO = b"woolf-proof-samples"


def _derive(shared: bytes, ephemeral: bytes, recipient: bytes) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=ephemeral + recipient, info=_INFO).derive(shared)


def validator_key(ledger) -> tuple[bytes, str]:
    """(private key bytes, public key hex) of this validator's sealing key, made once."""
    path = Path(ledger.root) / layout.WORK / "validator" / KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{KEY_FILE}.{os.getpid()}.tmp")
        tmp.write_bytes(os.urandom(32))
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    raw = path.read_bytes()
    public = X25519PrivateKey.from_private_bytes(raw).public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    return raw, public.hex()


def seal_to(public_hex: str, data: bytes) -> bytes:
    recipient = bytes.fromhex(public_hex)
    eph = X25519PrivateKey.generate()
    eph_pub = eph.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key = _derive(eph.exchange(X25519PublicKey.from_public_bytes(recipient)), eph_pub, recipient)
    nonce = os.urandom(12)
    return eph_pub + nonce + AESGCM(key).encrypt(nonce, data, None)


def open_sealed(private: bytes, blob: bytes) -> bytes:
    """The sealed bytes; ValueError when the blob is not sealed to this key (or was changed)."""
    if len(blob) < 32 + 12 + 16:
        raise ValueError("too short to be sealed")
    me = X25519PrivateKey.from_private_bytes(private)
    mine = me.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key = _derive(me.exchange(X25519PublicKey.from_public_bytes(blob[:32])), blob[:32], mine)
    try:
        return AESGCM(key).decrypt(blob[32:44], blob[44:], None)
    except InvalidTag:
        raise ValueError("not sealed to this validator's key") from None
