"""The console's summary reads, on the public ``Store`` methods (gitmem/facade/console_ops.py):
a store's counts without listing every memory, the sessions that wrote to a store, a memory's head
by id, search with marks no memory can fake, and the dry-run of a redaction (which versions it
would replace, and which live memories would block it). Nothing here writes.
"""

from __future__ import annotations

import json
import re
import secrets
import subprocess
import sys
from dataclasses import dataclass, field

from gitmem.errors import InvalidInputError
from gitmem.model.caller import Caller
from gitmem.store import SEARCH_MODES, SearchHit, SessionWrites, Store, Version


@dataclass(frozen=True)
class ScopeStats:
    scope: str
    memories: int
    bytes: int


def scope_stats(store: Store, scopes: list[str], caller: Caller | None) -> list[ScopeStats]:
    out = []
    for scope in scopes:
        count, size = store.scope_counts(scope, caller=caller)
        out.append(ScopeStats(scope, count, size))
    return out


def head_of(store: Store, scope: str, memory_id: str, caller: Caller | None) -> Version | None:
    return store.memory_head(memory_id, scope=scope, caller=caller)


@dataclass(frozen=True)
class Hit:
    """A search hit with its snippet cut into (matched, text) parts."""

    hit: SearchHit
    parts: list[tuple[bool, str]]


@dataclass(frozen=True)
class Found:
    """A console search's hits and how they were found (the mode that answered, the one asked for,
    memories still waiting for a vector)."""

    hits: list[Hit]
    mode: str
    requested: str
    pending: int


MODES = SEARCH_MODES


def search(
    store: Store,
    query: str,
    *,
    scope: str,
    limit: int,
    path_prefix: str | None,
    caller: Caller | None,
    mode: str = "lexical",
) -> Found:
    """The store's own search in ``mode`` (docs/search.md), with snippet marks no memory can
    contain: random per call, so a memory's own ``**`` (or anything else it holds) never comes out
    marked as a match."""
    nonce = secrets.token_hex(16)
    start, end = f"\ue000{nonce}<", f">{nonce}\ue000"
    hits = store.search_marked(
        query, marks=(start, end), scope=scope, limit=limit, path_prefix=path_prefix, mode=mode, caller=caller
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


def session_writes(store: Store, scopes: list[str], caller: Caller | None) -> list[SessionWrites]:
    return store.session_writes(scopes, caller=caller)


@dataclass(frozen=True)
class RedactionPreview:
    """The dry-run of a redaction: nothing is written. ``blocking``: why it would be refused."""

    scope: str
    what: str
    versions: list[Version] = field(default_factory=list)
    blocking: list[str] = field(default_factory=list)


def preview_version(store: Store, version_id: str, caller: Caller | None) -> RedactionPreview:
    found = store.redaction_preview(version_id, caller=caller)
    return RedactionPreview(found.scope, f"version {version_id}", found.versions, found.blocking)


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


def preview_pattern(store: Store, pattern: str, scope: str, caller: Caller | None) -> RedactionPreview:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise InvalidInputError(f"invalid pattern {pattern!r}: {exc}") from None
    blobs = store.unredacted_blobs(scope, caller=caller)
    texts = [store.blob(b).decode("utf-8", "surrogateescape") for b in blobs]
    found = [blobs[i] for i in matching(pattern, texts)]
    what = f"pattern {pattern!r}"
    if not found:
        return RedactionPreview(scope, what, [], [f"the pattern matches no version in scope {scope!r}"])
    preview = store.redaction_preview_blobs(found, scope=scope, caller=caller)
    return RedactionPreview(scope, what, preview.versions, preview.blocking)
