"""Limit and integrity rules, shared by the library's write path and the pre-receive hook.

Every check returns ``Violation`` values rather than raising, so the hook can report all of them
at once; the library raises the first one with ``raise_first``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gitmem.config import Limits
from gitmem.errors import ForbiddenError, InvalidInputError, LimitExceededError
from gitmem.model.paths import validate_path

MODE_BLOB = 0o100644

# Rules whose violation is a limit (exit 5) rather than bad input (exit 2).
LIMIT_RULES = frozenset({"max_memory_bytes", "max_memories", "max_store_bytes", "max_path_bytes"})


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    path: str | None = None
    limit: int | None = None
    actual: int | None = None
    ref: str | None = None  # the pushed ref and commit, when the pre-receive hook found it
    commit: str | None = None


def check_path(path: str, limits: Limits) -> list[Violation]:
    """Path rules (docs/architecture.md#memories-and-paths) with the store's ``max_path_bytes``."""
    size = len(path.encode("utf-8", "surrogatepass"))
    if size > limits.max_path_bytes:
        return [
            Violation(
                "max_path_bytes",
                f"path {path!r} is {size} bytes; the limit is {limits.max_path_bytes}",
                path,
                limits.max_path_bytes,
                size,
            )
        ]
    try:
        validate_path(path, max_bytes=max(limits.max_path_bytes, 1024))
    except InvalidInputError as exc:
        return [Violation("path", exc.message, path)]
    return []


def check_mode(path: str, mode: int) -> list[Violation]:
    if mode == MODE_BLOB:
        return []
    kinds = {0o120000: "a symlink", 0o100755: "an executable", 0o160000: "a submodule"}
    kind = kinds.get(mode, f"mode {mode:o}")
    return [Violation("mode", f"{path} is {kind}; memories must be plain files (mode 100644)", path)]


def check_content(path: str, data: bytes, limits: Limits) -> list[Violation]:
    """Size, UTF-8 and NUL rules for one memory's bytes."""
    out: list[Violation] = []
    if len(data) > limits.max_memory_bytes:
        out.append(
            Violation(
                "max_memory_bytes",
                f"{path} is {len(data)} bytes; the limit is {limits.max_memory_bytes} bytes per memory",
                path,
                limits.max_memory_bytes,
                len(data),
            )
        )
    if b"\0" in data:
        out.append(Violation("nul", f"{path} contains a NUL byte; memories are text", path))
    else:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            out.append(
                Violation(
                    "utf8", f"{path} is not valid UTF-8 (byte {exc.start}); memories are UTF-8 text", path
                )
            )
    return out


def check_memory_count(scope: str, count: int, limits: Limits) -> list[Violation]:
    if count <= limits.max_memories:
        return []
    return [
        Violation(
            "max_memories",
            f"scope {scope!r} would hold {count} memories; the limit is {limits.max_memories}",
            None,
            limits.max_memories,
            count,
        )
    ]


def check_store_bytes(total: int, limits: Limits) -> list[Violation]:
    if total <= limits.max_store_bytes:
        return []
    return [
        Violation(
            "max_store_bytes",
            f"the store would hold {total} bytes of memories; the limit is {limits.max_store_bytes}",
            None,
            limits.max_store_bytes,
            total,
        )
    ]


def check_archived(archived_at: str | None, name: str) -> list[Violation]:
    if archived_at is None:
        return []
    return [Violation("archived", f"store {name!r} was archived at {archived_at} and is read-only")]


FUTURE_SKEW_SECONDS = 600


def check_commit_time(kind: str, when: int, now: int, skew: int = FUTURE_SKEW_SECONDS) -> list[Violation]:
    """A commit's author or committer date may not be further than ``skew`` seconds in the future."""
    if when <= now + skew:
        return []
    return [
        Violation(
            "future_date",
            f"{kind} date is {when - now} seconds in the future; at most {skew} seconds of clock skew allowed",
            None,
            skew,
            when - now,
        )
    ]


def check_commit_order(when: int, parent_time: int, skew: int = FUTURE_SKEW_SECONDS) -> list[Violation]:
    """A commit's committer date may not be earlier than its parent's (beyond clock skew): a
    back-dated push would otherwise look old enough for retention to drop at once."""
    if when >= parent_time - skew:
        return []
    return [
        Violation(
            "past_date",
            f"committer date is {parent_time - when} seconds before its parent's; commits must not be "
            f"back-dated (at most {skew} seconds of clock skew allowed)",
            None,
            skew,
            parent_time - when,
        )
    ]


def check_acl(acl: Mapping[str, Any], scope: str, actor: str | None) -> list[Violation]:
    """Whether ``actor`` may write ``scope`` under the store's ``acl``.

    ``acl.write`` maps scope globs to lists of actor globs (fnmatch). Without ``acl.write``
    anyone may write; with it, a scope that no key matches is closed, and the first matching key decides.
    """
    rules = acl.get("write")
    if not rules:
        return []
    for scope_glob, actors in dict(rules).items():
        if fnmatch.fnmatchcase(scope, str(scope_glob)):
            allowed = [str(a) for a in (actors or [])]
            if actor is not None and any(fnmatch.fnmatchcase(actor, a) for a in allowed):
                return []
            who = actor or "an unidentified pusher"
            return [Violation("acl", f"{who} may not write scope {scope!r} (acl.write[{scope_glob!r}])")]
    return [Violation("acl", f"no acl.write entry allows writing scope {scope!r}")]


def raise_first(violations: Iterable[Violation]) -> None:
    """Raise the error for the first violation, if any (library write path)."""
    for v in violations:
        if v.rule in LIMIT_RULES:
            raise LimitExceededError(v.message)
        if v.rule in ("archived", "acl"):
            raise ForbiddenError(v.message)
        raise InvalidInputError(v.message)
