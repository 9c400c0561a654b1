"""The one mapping from gitmem's exception family to HTTP statuses and Anthropic error bodies.

Body: ``{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}``. Every 409
is deterministic (a failed precondition, a taken path, an archived store) and carries
``x-should-retry: false``, so that the SDK answers a conflict in one attempt instead of three.
Invalid input is 400 and oversize content 413 (both permanent for the SDK), never 422. A client
never learns where the server keeps its files: a 5xx says only "internal server error" (the details
go to the server's log), and the workspace's path is cut out of every other message.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gitmem.errors import (
    AuthenticationError,
    ConfigError,
    ConflictError,
    ForbiddenError,
    GitmemError,
    IntegrityError,
    InvalidInputError,
    LimitExceededError,
    NotFoundError,
    PathConflictError,
    PreconditionFailedError,
    RateLimitedError,
    UnavailableError,
)

# Most specific first: the first class the error is an instance of decides.
STATUSES: tuple[tuple[type[GitmemError], int, str], ...] = (
    (AuthenticationError, 401, "authentication_error"),
    (PathConflictError, 409, "memory_path_conflict_error"),
    (PreconditionFailedError, 409, "memory_precondition_failed_error"),
    (ConflictError, 409, "conflict_error"),
    (NotFoundError, 404, "not_found_error"),
    (RateLimitedError, 429, "rate_limit_error"),
    (LimitExceededError, 413, "request_too_large"),
    (ConfigError, 500, "api_error"),  # a broken settings or token file on the server
    (InvalidInputError, 400, "invalid_request_error"),
    (ForbiddenError, 403, "permission_error"),
    (IntegrityError, 500, "api_error"),
    (UnavailableError, 503, "overloaded_error"),
    (GitmemError, 500, "api_error"),
)


@dataclass(frozen=True)
class ErrorReply:
    status: int
    body: dict[str, object]
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def error_type(self) -> str:
        error = self.body["error"]
        assert isinstance(error, dict)
        return str(error["type"])


def status_of(exc: GitmemError) -> tuple[int, str]:
    for cls, status, name in STATUSES:
        if isinstance(exc, cls):
            return status, name
    return 500, "api_error"  # pragma: no cover - GitmemError is last


def reply(status: int, error_type: str, message: str, request_id: str, **extra: str) -> ErrorReply:
    body: dict[str, object] = {
        "type": "error",
        "error": {"type": error_type, "message": message, **extra},
        "request_id": request_id,
    }
    headers = {"x-should-retry": "false"} if status == 409 else {}
    return ErrorReply(status, body, headers)


def from_exception(exc: GitmemError, request_id: str, home: str = "") -> ErrorReply:
    """The reply for a gitmem error; ``home`` (the workspace path) never appears in it."""
    status, name = status_of(exc)
    extra: dict[str, str] = {}
    if isinstance(exc, PathConflictError):
        extra = {"conflicting_path": exc.conflicting_path, "conflicting_memory_id": exc.conflicting_memory_id}
    if status >= 500:
        return reply(status, name, "internal server error", request_id)
    message = exc.message.replace(home, "<home>") if home else exc.message
    return reply(status, name, message, request_id, **extra)
