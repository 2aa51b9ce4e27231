"""One root error type with a few subclasses, each mapped to an exit code.

Usage:
    raise NotALedgerError(f"{path} holds no ledger/woolf.toml", hint="run `woolf init`")
"""

from __future__ import annotations


class WoolfError(Exception):
    """An error a user can act on: a message, a hint, and an exit code."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class UsageError(WoolfError):
    """The command was called in a way that cannot work (bad argument, wrong place)."""

    exit_code = 2


class NotALedgerError(UsageError):
    """The path is not a git repository, or holds no ledger."""


class ConfigError(WoolfError):
    """ledger/woolf.toml has an unknown key or a bad value."""

    exit_code = 3


class StorageError(WoolfError):
    """The DVC remote is unreachable, or an object is missing from it."""

    exit_code = 4


class IntegrityError(WoolfError):
    """Bytes do not match their recorded hash: corrupted or tampered data."""

    exit_code = 5


class UnknownVersionError(UsageError):
    """A version number that the ledger does not have."""


class InvalidWeightsError(WoolfError):
    """A weights or delta file that is malformed, hostile, or of another model."""

    exit_code = 6


class ForgeError(WoolfError):
    """The forge (git remote or API) refused or failed a request."""

    exit_code = 7


class RaceLostError(WoolfError):
    """Another writer moved a ref first; the caller re-fetches and retries."""

    exit_code = 8


class Rejected(WoolfError):
    """A PR fails a check; the message is the verdict's reason (the validator turns it into one)."""


class TrainingFailed(WoolfError):
    """Training stopped before its end (a process of a torchrun group died, a device ran out of
    memory); nothing from the run was saved or submitted."""
