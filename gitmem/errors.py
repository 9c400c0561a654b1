"""One exception family for gitmem; each class carries the CLI exit code (docs/architecture.md#errors-and-exit-codes)."""

from __future__ import annotations


class GitmemError(Exception):
    """Base of every error gitmem raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code = 1
    type_name = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInputError(GitmemError):
    """Bad arguments: a path, scope, name, option or content that breaks a rule."""

    exit_code = 2
    type_name = "invalid_input"


class NotFoundError(GitmemError):
    """A store, scope, memory or version that does not exist."""

    exit_code = 3
    type_name = "not_found"


class ConflictError(GitmemError):
    """A failed precondition, or a race lost after every retry."""

    exit_code = 4
    type_name = "conflict"


class AmbiguousStoreError(ConflictError):
    """A store name that several stores carry: the caller must name one by id (``candidates``)."""

    def __init__(self, message: str, candidates: list[str] | None = None) -> None:
        super().__init__(message)
        self.candidates = list(candidates or [])


class PathConflictError(ConflictError):
    """A create or rename onto a path that a memory uses, or that overlaps one."""

    type_name = "path_conflict"

    def __init__(self, message: str, conflicting_path: str, conflicting_memory_id: str = "") -> None:
        super().__init__(message)
        self.conflicting_path = conflicting_path
        self.conflicting_memory_id = conflicting_memory_id


class PreconditionFailedError(ConflictError):
    """``if_sha256`` did not match the stored content."""

    type_name = "precondition_failed"


class LimitExceededError(GitmemError):
    """A write that would break one of the store's limits."""

    exit_code = 5
    type_name = "limit_exceeded"


class RateLimitedError(LimitExceededError):
    """Asked again too soon (a full verify from the console): the server answers 429."""

    type_name = "rate_limited"


class PathTooLongError(InvalidInputError):
    """A memory path over the byte limit: bad input to the HTTP faces (400), the limit code (5)
    to the CLI."""

    exit_code = 5


class ForbiddenError(GitmemError):
    """A write to an archived store, a read-only clone, a scope the acl denies, a head redaction."""

    exit_code = 6
    type_name = "forbidden"


class AccessError(ForbiddenError):
    """The caller may not do this: read-only, another scope, a right it lacks, review mode
    (docs/access.md). Faces answer 403 for it, never remap it."""

    type_name = "forbidden"


class AuthenticationError(ForbiddenError):
    """A missing, unknown, revoked or expired API token (the server answers 401)."""

    type_name = "authentication"


class IntegrityError(GitmemError):
    """The store failed a consistency check (verify)."""

    exit_code = 7
    type_name = "integrity"


class ConfigError(InvalidInputError):
    """A malformed settings file; the message names the file and the key."""

    type_name = "config"


class GuardRejectedError(InvalidInputError):
    """A write the store's guard refuses: it holds a secret (or a store pattern that rejects).

    The message names the path, the rule, the line and column, and a masked preview, never the
    matched text; ``findings`` holds the same (:class:`gitmem.model.guard.Finding`)."""

    type_name = "guard_rejected"

    def __init__(self, message: str, findings: tuple[object, ...] = ()) -> None:
        super().__init__(message)
        self.findings = findings


class UnavailableError(GitmemError):
    """A service gitmem depends on cannot be reached now (the cluster's database); try again."""

    exit_code = 8
    type_name = "unavailable"


def from_os_error(exc: BaseException, where: str = "") -> GitmemError | None:
    """The GitmemError a face reports for an error the file system raised (None: no mapping):
    a full disk or quota (also as SQLite reports it), and a read-only file system, said as such."""
    import errno
    import sqlite3

    at = f" ({where})" if where else ""
    if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc):
        return GitmemError(
            f"the disk is full{at}: the index could not be written; nothing more was written, and "
            "what was acknowledged before is intact. Free some space, then retry"
        )
    if not isinstance(exc, OSError):
        return None
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return GitmemError(
            f"the disk is full{at}: {exc.strerror}; nothing more was written, and what was acknowledged "
            "before is intact. Free some space, then retry"
        )
    if exc.errno == errno.EROFS:
        return ForbiddenError(f"read-only file system{at}: {exc.filename or ''} cannot be written")
    return None
