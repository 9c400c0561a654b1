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


class ForbiddenError(GitmemError):
    """A write to an archived store, a read-only clone, a scope the acl denies, a head redaction."""

    exit_code = 6
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
