"""Every error alpstore raises on purpose, in one hierarchy.

Each error carries a one-line message that names what went wrong and where, an optional hint that
tells the user what to do next, and the exit code the command line uses for it. Only the CLI turns
them into output; the library never prints or exits.
"""

from __future__ import annotations


class AlpstoreError(Exception):
    """Base class: a clean, user-facing failure (never a bug)."""

    exit_code: int = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(AlpstoreError):
    """The caller asked for something that cannot be done as asked."""

    exit_code = 2


class SessionNameTakenError(UsageError):
    """Another session of the archive already has this name (names are unique)."""


class CanonicalJSONError(AlpstoreError):
    """A document cannot be turned into canonical JSON (NaN, non-string key, non-JSON type)."""

    exit_code = 3


class NestedTooDeepError(CanonicalJSONError):
    """A document nests deeper than the archive keeps (``codec.MAX_DEPTH``): it could be
    written but not read back.
    """


class InputError(AlpstoreError):
    """Input read from a file or stdin is malformed (names the file and line or path)."""

    exit_code = 3


class NotFoundError(AlpstoreError):
    """An unknown digest, session, checkpoint or file."""

    exit_code = 4


class IntegrityError(AlpstoreError):
    """Stored content does not match its digest, its recorded size, or its references."""

    exit_code = 5


class CorruptArchiveError(IntegrityError):
    """The archive database itself cannot be read (truncated, not a database, damaged)."""


class SchemaVersionError(AlpstoreError):
    """The archive was written by a newer alpstore, or its schema is not one we know."""

    exit_code = 6


class DatabaseError(AlpstoreError):
    """The database could not be reached or refused an operation (after bounded retries)."""

    exit_code = 7


class PolicyError(AlpstoreError):
    """An invalid checkpoint policy, overlay or workspace config (names the key path)."""

    exit_code = 8


class SecretError(AlpstoreError):
    """A checkpoint or export would contain an inline secret; nothing was written."""

    exit_code = 9


class CheckpointFileError(AlpstoreError):
    """A checkpoint file is invalid: schema, manifest hash, version, size or compression."""

    exit_code = 10


class SessionStateError(AlpstoreError):
    """The session's status forbids the operation (paused, terminated) or history is too short."""

    exit_code = 11


class ContinuityError(AlpstoreError):
    """An execution continuity operation failed (pin limits, bad execution id, unknown pin)."""

    exit_code = 12


class ValidationFinding(AlpstoreError):
    """`context validate` found a problem with checkpoint.json (digest, schema, binding)."""

    exit_code = 13


class StorageError(AlpstoreError):
    """The file system refused a write (disk full, read-only, permission)."""

    exit_code = 14


class Interrupted(AlpstoreError):
    """The user stopped a long operation (Ctrl-C); nothing was changed."""

    exit_code = 130
