"""The only places the console reads library internals (the derived index), each a small function.

They answer questions the public ``Store`` methods do not: a store's counts without listing every
memory, the sessions that wrote to a store, a memory's head by id, and the dry-run of a redaction
(which versions it would replace, and which live memories would block it). Nothing here writes.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass, field

import pygit2

from gitmem.engine import hybrid as searching
from gitmem.engine.rows import HeadRow, VersionRow
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.ids import is_id
from gitmem.store import Store


@dataclass(frozen=True)
class ScopeStats:
    scope: str
    memories: int
    bytes: int


def scope_stats(store: Store, scopes: list[str]) -> list[ScopeStats]:
    index = store.core.index
    out = []
    for scope in scopes:
        index.ensure(scope)
        count, size = index.scope_stats(scope)
        out.append(ScopeStats(scope, count, size))
    return out


def head_of(store: Store, scope: str, memory_id: str) -> HeadRow | None:
    store.core.index.ensure(scope)
    return store.core.index.head_by_memory(scope, memory_id)


@dataclass(frozen=True)
class Hit:
    """A search hit with its snippet cut into (matched, text) parts."""

    hit: searching.SearchHit
    parts: list[tuple[bool, str]]


@dataclass(frozen=True)
class Found:
    """A console search's hits and how they were found (the mode that answered, the one asked for,
    memories still waiting for a vector)."""

    hits: list[Hit]
    mode: str
    requested: str
    pending: int


MODES = searching.MODES


def search(
    store: Store, query: str, *, scope: str, limit: int, path_prefix: str | None, mode: str = "lexical"
) -> Found:
    """The store's own search in ``mode`` (docs/search.md), with snippet marks no memory can
    contain: random per call, so a memory's own ``**`` (or anything else it holds) never comes out
    marked as a match."""
    nonce = secrets.token_hex(16)
    start, end = f"\ue000{nonce}<", f">{nonce}\ue000"
    hits = searching.search(
        store.core, query, scope=scope, limit=limit, path_prefix=path_prefix, marks=(start, end), mode=mode
    )
    out = []
    for h in hits:
        parts: list[tuple[bool, str]] = []
        for i, piece in enumerate(h.snippet.split(start)):
            marked, _, rest = piece.partition(end) if i else ("", "", piece)
            parts += [(True, marked)] if marked else []
            parts += [(False, rest)] if rest else []
        out.append(Hit(h, parts))
    return Found(out, hits.mode, hits.requested, hits.pending)


@dataclass(frozen=True)
class SessionWrites:
    """What one session wrote in one scope of a store."""

    session: str
    scope: str
    versions: int
    first_at: int
    last_at: int
    actors: tuple[str, ...]


def session_writes(store: Store, scopes: list[str]) -> list[SessionWrites]:
    index = store.core.index
    for scope in scopes:
        index.ensure(scope)
    if not scopes:
        return []
    marks = ",".join("?" * len(scopes))
    rows = index.db.execute(
        "SELECT session, scope, COUNT(*), MIN(created_at), MAX(created_at), GROUP_CONCAT(DISTINCT actor) "
        f"FROM versions WHERE session IS NOT NULL AND scope IN ({marks}) GROUP BY session, scope "
        "ORDER BY MAX(created_at) DESC",
        tuple(scopes),
    ).fetchall()
    return [
        SessionWrites(r[0], r[1], int(r[2]), int(r[3]), int(r[4]), tuple(sorted(str(r[5]).split(","))))
        for r in rows
    ]


@dataclass(frozen=True)
class RedactionPreview:
    """The dry-run of a redaction: nothing is written. ``blocking``: why it would be refused."""

    scope: str
    what: str
    versions: list[VersionRow] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)


def preview_version(store: Store, version_id: str) -> RedactionPreview:
    if not is_id(version_id, "memver"):
        raise InvalidInputError(f"invalid version id {version_id!r}: expected memver_<ulid>")
    index = store.core.index
    index.ensure_all()
    found = index.version_rows("id=?", (version_id,), 1)
    if not found:
        raise NotFoundError(f"version {version_id} does not exist in store {store.name!r}")
    row = found[0]
    what = f"version {version_id}"
    if row.redaction_id is not None:
        return RedactionPreview(row.scope, what, [row], [f"it was already redacted ({row.redaction_id})"])
    if row.blob is None:
        return RedactionPreview(row.scope, what, [row], [f"it deleted {row.path}: there is no content"])
    return _preview(store, row.scope, [row.blob], what)


PATTERN_SECONDS = 5.0
_MATCHER = (
    "import json, re, sys\n"
    "req = json.load(sys.stdin)\n"
    "rx = re.compile(req['pattern'])\n"
    "print(json.dumps([i for i, t in enumerate(req['texts']) if sum(1 for _ in rx.finditer(t))]))\n"
)


def matching(pattern: str, texts: list[str], seconds: float | None = None) -> list[int]:
    """The indexes of ``texts`` that ``pattern`` matches, every match found (as a redaction's
    substitution finds them), in a child process killed after ``seconds``.

    Python's re holds the GIL while it backtracks, so a pattern such as ``(a+)+$`` over text an
    agent wrote would otherwise freeze every request of the server, for as long as it runs.
    ``seconds``: default :data:`PATTERN_SECONDS`, read at each call."""
    seconds = PATTERN_SECONDS if seconds is None else seconds
    payload = json.dumps({"pattern": pattern, "texts": texts})  # ASCII: lone surrogates escaped
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _MATCHER],
            input=payload,
            capture_output=True,
            text=True,
            timeout=seconds,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InvalidInputError(
            f"pattern {pattern!r} took more than {seconds:g} s over the {len(texts)} versions of the "
            "scope: simplify it (nested repeats such as (a+)+ backtrack without end)"
        ) from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["it failed"])[-1]
        raise InvalidInputError(f"pattern {pattern!r} could not be run: {last}")
    return [int(i) for i in json.loads(proc.stdout)]


def preview_pattern(store: Store, pattern: str, scope: str) -> RedactionPreview:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidInputError(f"invalid pattern {pattern!r}: {exc}") from None
    index = store.core.index
    index.ensure_all()
    blobs = [
        str(r[0])
        for r in index.db.execute(
            "SELECT DISTINCT blob FROM versions WHERE scope=? AND blob IS NOT NULL AND redaction_id IS NULL",
            (scope,),
        )
    ]
    core = store.core
    texts = [core.blob_data(pygit2.Oid(hex=b)).decode("utf-8", "surrogateescape") for b in blobs]
    found = [blobs[i] for i in matching(pattern, texts)]
    what = f"pattern {pattern!r}"
    if not found:
        return RedactionPreview(scope, what, [], [f"the pattern matches no version in scope {scope!r}"])
    return _preview(store, scope, found, what)


def _preview(store: Store, scope: str, blobs: list[str], what: str) -> RedactionPreview:
    index = store.core.index
    marks = ",".join("?" * len(blobs))
    rows = index.version_rows(f"scope=? AND blob IN ({marks})", (scope, *blobs))
    blocking = [
        f"{h.path} currently holds this content (write a new version or delete it first)"
        for h in index.heads(scope)
        if h.blob in blobs
    ]
    others = index.db.execute(
        f"SELECT DISTINCT scope FROM versions WHERE blob IN ({marks}) AND scope != ?", (*blobs, scope)
    ).fetchall()
    blocking += [f"the same content is also in scope {r[0]!r}: redact it there too" for r in others]
    return RedactionPreview(scope, what, rows, blocking)
