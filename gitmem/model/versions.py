"""Version records: the trailers of a version commit, and the frozen value types the API returns."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from gitmem.errors import InvalidInputError

OPERATIONS = ("created", "modified", "deleted")
TRAILER_KEYS = (
    "Gitmem-Version",
    "Gitmem-Memory",
    "Gitmem-Operation",
    "Gitmem-Session",
    "Gitmem-Actor",
)
REVERTS = "Gitmem-Reverts"  # on the versions of a revert-session: the session it undoes
FLAG = "Gitmem-Flag"  # the guard's findings on a version written in ``flag`` mode (docs/guard.md)
REVIEWED_BY = "Gitmem-Reviewed-By"  # the reviewer who accepted a proposed version (docs/review.md)
#: Every trailer gitmem writes (verify, the push checks and the lifecycle tests use this list); any
#: other ``Gitmem-*`` trailer in a pushed commit is refused.
KNOWN_TRAILERS = (*TRAILER_KEYS, REVERTS, "Gitmem-Compaction", "Gitmem-Snapshot", FLAG, REVIEWED_BY)
_SESSION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}\Z")  # \Z: "$" allows a final "\n"
_ACTOR_RE = re.compile(r"^(session|user|api|service|git):[^\s<>\x00-\x1f\x7f]{1,200}\Z")
UNKNOWN_ACTOR = "unknown"  # the actor of a push nobody authenticated (docs/identity.md)
_TRAILER_RE = re.compile(r"^(Gitmem-[A-Za-z-]+): ?(.*)$")


@dataclass(frozen=True)
class RedactionInfo:
    id: str
    actor: str
    redacted_at: dt.datetime
    reason: str


@dataclass(frozen=True)
class Version:
    """One immutable change to one memory (a commit on the scope's branch)."""

    id: str
    memory_id: str
    scope: str
    path: str
    operation: str
    actor: str
    session: str | None
    created_at: dt.datetime
    commit: str
    content_sha256: str | None = None
    size: int | None = None
    previous_path: str | None = None
    redaction: RedactionInfo | None = None


def validate_session(session: str | None) -> str | None:
    if session is None:
        return None
    if not _SESSION_RE.match(session):
        raise InvalidInputError(
            f"invalid session id {session!r}: 1-128 characters of letters, digits and _.:- "
            "starting with a letter or digit"
        )
    return session


def validate_actor(actor: str) -> str:
    if not _ACTOR_RE.match(actor):
        raise InvalidInputError(
            f"invalid actor {actor!r}: expected session:<id>, user:<id>, api:<key-id> or service:<id>"
        )
    return actor


def resolve_actor(actor: str | None, session: str | None) -> str:
    """The actor recorded on a write: explicit, else the session, else ``user:local``."""
    if actor is not None:
        return validate_actor(actor)
    if session is not None:
        return f"session:{session}"
    return "user:local"


def format_message(
    operation: str,
    path: str,
    version_id: str,
    memory_id: str,
    actor: str,
    session: str | None,
    previous_path: str | None = None,
    reverts: str | None = None,
    *,
    flag: str | None = None,
    reviewed_by: str | None = None,
) -> str:
    """A version commit's message: a human subject, then the gitmem trailers (``flag``: what the
    write-time guard flagged, as a ``Gitmem-Flag`` trailer)."""
    if previous_path is not None and previous_path != path:
        subject = f"renamed {previous_path} to {path}"
    else:
        subject = f"{operation} {path}"
    lines = [
        subject,
        "",
        f"Gitmem-Version: {version_id}",
        f"Gitmem-Memory: {memory_id}",
        f"Gitmem-Operation: {operation}",
    ]
    if session is not None:
        lines.append(f"Gitmem-Session: {session}")
    lines.append(f"Gitmem-Actor: {actor}")
    if reverts is not None:
        lines.append(f"{REVERTS}: {reverts}")
    if flag is not None:
        lines.append(f"Gitmem-Flag: {flag}")
    if reviewed_by is not None:
        lines.append(f"Gitmem-Reviewed-By: {reviewed_by}")
    return "\n".join(lines) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    """The ``Gitmem-*`` trailers of a commit message (last paragraph only, like git)."""
    paragraphs = message.rstrip("\n").split("\n\n")
    if len(paragraphs) < 2:
        return {}
    out: dict[str, str] = {}
    for line in paragraphs[-1].split("\n"):
        m = _TRAILER_RE.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def trailer_problems(trailers: dict[str, str]) -> list[str]:
    """What is wrong with a commit's gitmem trailers (empty list: well-formed)."""
    from gitmem.ids import is_id

    problems = []
    if not is_id(trailers.get("Gitmem-Version", ""), "memver"):
        problems.append("Gitmem-Version is missing or not a memver_ id")
    if not is_id(trailers.get("Gitmem-Memory", ""), "mem"):
        problems.append("Gitmem-Memory is missing or not a mem_ id")
    if trailers.get("Gitmem-Operation") not in OPERATIONS:
        problems.append("Gitmem-Operation is missing or not created/modified/deleted")
    if not _ACTOR_RE.match(trailers.get("Gitmem-Actor", "")):
        problems.append("Gitmem-Actor is missing or malformed")
    session = trailers.get("Gitmem-Session")
    if session is not None and not _SESSION_RE.match(session):
        problems.append("Gitmem-Session is malformed")
    return problems


def timestamp(seconds: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


SNAPSHOT = "Gitmem-Snapshot"
COMPACTION = "Gitmem-Compaction"


SnapshotEntry = tuple[str, str, str, int, str, str | None, str]


def parse_snapshot(message: str) -> list[SnapshotEntry] | None:
    """The kept versions a compaction root lists (None: not a compaction root, or a malformed one:
    readers then treat the commit as plain git, and ``verify`` reports it). Never raises."""
    if f"\n{COMPACTION}: " not in message:
        return None
    out: list[SnapshotEntry] = []
    for line in message.splitlines():
        if line.startswith(SNAPSHOT + ":"):
            entry = _snapshot_entry(line[len(SNAPSHOT) + 1 :].strip())
            if entry is None:
                return None
            out.append(entry)
    return out


def _snapshot_entry(text: str) -> SnapshotEntry | None:
    from gitmem.ids import is_id
    from gitmem.model.paths import is_valid_tree_path

    parts = text.split(" ", 6)
    if len(parts) != 7:
        return None
    vid, mid, op, when, actor, session, path = parts
    if not (is_id(vid, "memver") and is_id(mid, "mem") and op in OPERATIONS and when.isdigit()):
        return None
    if not (_ACTOR_RE.match(actor) or actor == UNKNOWN_ACTOR):
        return None
    if session != "-" and not _SESSION_RE.match(session):
        return None
    if not path.startswith("/") or is_valid_tree_path(path[1:]) is not None or len(when) > 12:
        return None
    return vid, mid, op, int(when), actor, None if session == "-" else session, path


def _repeated(message: str) -> list[tuple[str, int]]:
    paragraphs = message.rstrip("\n").split("\n\n")
    counts: dict[str, int] = {}
    for line in paragraphs[-1].split("\n") if len(paragraphs) > 1 else ():
        m = _TRAILER_RE.match(line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    return sorted((k, n) for k, n in counts.items() if n > 1)


def malformed_trailers(message: str) -> list[str]:
    """What is wrong with the ``Gitmem-*`` trailers a commit carries, as a pushed commit must have
    them (empty: none, or all well-formed). Unknown ``Gitmem-*`` keys, a half set of version
    trailers, bad values and a compaction root that does not parse are all refused."""
    trailers = parse_trailers(message)
    if not trailers:
        return []
    problems = [f"unknown trailer {k}" for k in sorted(trailers) if k not in KNOWN_TRAILERS]
    # Readers keep the last of a repeated key, other tools the first: one commit, two claims.
    problems += [f"trailer {k} appears {n} times" for k, n in _repeated(message) if k != SNAPSHOT]
    if COMPACTION in trailers or SNAPSHOT in trailers:
        from gitmem.ids import is_id

        if not is_id(trailers.get(COMPACTION, ""), "compact"):
            problems.append(f"{COMPACTION} is missing or not a compact_ id")
        elif parse_snapshot(message) is None:
            problems.append(f"a {SNAPSHOT} trailer is malformed")
        return problems
    if any(k in trailers for k in ("Gitmem-Version", "Gitmem-Memory", "Gitmem-Operation")):
        problems += trailer_problems(trailers)  # a version's trailers come as a set
    else:
        actor = trailers.get("Gitmem-Actor")
        if actor is not None and not _ACTOR_RE.match(actor):
            problems.append("Gitmem-Actor is malformed")
        session = trailers.get("Gitmem-Session")
        if session is not None and not _SESSION_RE.match(session):
            problems.append("Gitmem-Session is malformed")
    reverts = trailers.get(REVERTS)
    if reverts is not None and not _SESSION_RE.match(reverts):
        problems.append(f"{REVERTS} is not a session id")
    return problems
