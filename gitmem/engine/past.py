"""Point-in-time reads (docs/point-in-time.md): a scope as it was at a moment, read from history.

``at`` is a version time as ``gitmem log`` shows it (ISO 8601; naive means UTC; or ``@EPOCH``), a
version id (``memver_...``) or a commit id. A time picks the newest commit of the scope's first-parent
line whose version time is at or before it; the version time is the one the index derives
(:func:`gitmem.engine.derive.rows_for_commit`): the receive time of a commit pushed by an untrusted
pusher (its receipt), else the later of its author and committer times. A clone has no receipts (they
stay on the server), so there a pushed commit's time is its own committer time. The state is the tree
of that commit, read from git: the derived index is consulted only for the ids and times of the
memories it lists, and only where its row names the very blob the tree holds.

Redaction rewrites history, so a redacted version reads as redacted at every moment. Compaction
squashes the history before its horizon into a root commit: a time before that root's time is refused
with the horizon named, since history no longer knows those states.
"""

from __future__ import annotations

import datetime as dt
import re
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from gitmem.engine import receipts
from gitmem.engine import search as lexical
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.ids import is_id
from gitmem.model.frontmatter import parse_description
from gitmem.model.paths import validate_path, validate_prefix, validate_scope
from gitmem.model.versions import COMPACTION, timestamp

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.engine.memories import Memory, Prefix
    from gitmem.engine.search import SearchHit

_HEX = re.compile(r"^[0-9a-f]{40}$")
_EPOCH = re.compile(r"^@(\d{1,12})$")


@dataclass(frozen=True)
class Moment:
    """A scope at a moment: ``commit`` is None before the scope's first version."""

    scope: str
    at: str
    commit: pygit2.Commit | None
    time: int | None  # the version time of ``commit``

    @property
    def tree(self) -> pygit2.Tree | None:
        return None if self.commit is None else self.commit.tree


def parse_time(value: str) -> int:
    """Epoch seconds of an ISO 8601 time (naive: UTC) or ``@EPOCH``; InvalidInputError otherwise."""
    text = value.strip()
    m = _EPOCH.match(text)
    if m:
        return int(m.group(1))
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
    except ValueError:
        raise InvalidInputError(
            f"--at {value!r} is neither a time (ISO 8601, e.g. 2026-01-31T12:00:00Z, or @EPOCH) nor a "
            "version id (memver_...) nor a commit id"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return int(parsed.timestamp())


def version_time(commit: pygit2.Commit, scope: str, book: receipts.Receipts) -> int:
    """The version time of ``commit`` in ``scope``, as the index derives it."""
    receipt = book.get(str(commit.id), scope)
    if receipt is not None and not receipt.trusted:
        return receipt.at
    return max(commit.author.time, commit.committer.time)


def _iso(epoch: int) -> str:
    return dt.datetime.fromtimestamp(epoch, dt.UTC).isoformat().replace("+00:00", "Z")


def _line(store: StoreCore, scope: str) -> list[pygit2.Commit]:
    """The scope's first-parent line, newest first."""
    tip = store.tip(scope)
    out: list[pygit2.Commit] = []
    c = store.commit(tip) if tip is not None else None
    while c is not None:
        out.append(c)
        c = c.parents[0] if c.parents else None
    return out


def resolve(store: StoreCore, scope: str, at: str) -> Moment:
    """The moment ``at`` of ``scope`` (see the module's docstring).

    Raises:
        InvalidInputError: a malformed ``at``, or a time before a compaction's horizon.
        NotFoundError: an empty scope, or a version or commit that is not on the scope's line.
    """
    validate_scope(scope)
    if not isinstance(at, str) or not at.strip():
        raise InvalidInputError("--at needs a time, a version id or a commit id")
    line = _line(store, scope)
    if not line:
        raise NotFoundError(f"scope {scope!r} is empty")
    book = receipts.load(Path(store.repo.path))
    text = at.strip()
    if is_id(text, "memver") or _HEX.match(text):
        commit_id = text
        if text.startswith("memver_"):
            row = store.index.db.execute(
                "SELECT commit_id FROM versions WHERE scope=? AND id=?", (scope, text)
            ).fetchone()
            if row is None:
                raise NotFoundError(f"version {text} is not in scope {scope!r}")
            commit_id = row[0]
        for c in line:
            if str(c.id) == commit_id:
                return Moment(scope, at, c, version_time(c, scope, book))
        raise NotFoundError(f"{text} is not on the history of scope {scope!r}")
    when = parse_time(text)
    for c in line:
        t = version_time(c, scope, book)
        if t <= when:
            return Moment(scope, at, c, t)
    root = line[-1]
    if COMPACTION in root.message:
        raise InvalidInputError(
            f"--at {at}: before the compaction horizon of scope {scope!r} ({_iso(version_time(root, scope, book))}); "
            "history no longer holds the states before it"
        )
    return Moment(scope, at, None, None)


@dataclass(frozen=True)
class State:
    """What ``at`` names in a scope, without git objects (for faces): the commit id (None: before the
    scope's first version) and its version time (RFC 3339, UTC)."""

    scope: str
    at: str
    commit: str | None
    time: str | None


def state_at(store: StoreCore, scope: str, at: str) -> State:
    """:func:`resolve`, as a :class:`State`."""
    m = resolve(store, scope, at)
    return State(
        scope, at, None if m.commit is None else str(m.commit.id), None if m.time is None else _iso(m.time)
    )


def _blobs(tree: pygit2.Tree | None, prefix: str = "/") -> list[tuple[str, pygit2.Oid]]:
    """(memory path, blob id) of every blob under ``prefix`` in ``tree``, in path order."""
    if tree is None:
        return []
    out: list[tuple[str, pygit2.Oid]] = []
    start: pygit2.Tree | None = tree
    if prefix != "/":
        try:
            obj = tree[prefix.strip("/")]
        except KeyError:
            return []
        start = obj if isinstance(obj, pygit2.Tree) else None
    stack: list[tuple[str, pygit2.Tree]] = [(prefix, start)] if start is not None else []
    while stack:
        base, t = stack.pop()
        for e in t:
            if e.type_str == "tree":
                stack.append((f"{base}{e.name}/", e))  # type: ignore[arg-type]
            elif e.type_str == "blob":
                out.append((f"{base}{e.name}", e.id))
    out.sort()
    return out


class _Annotations:
    """The ids and times of the memories of a moment, from the index's version rows of the commits on
    the scope's line up to the moment's commit, used only where a row names the tree's very blob."""

    def __init__(self, store: StoreCore, moment: Moment) -> None:
        self.rows: dict[str, tuple[str, str, str | None, int]] = {}  # path -> (memory, version, blob, time)
        self.first: dict[str, int] = {}  # memory id -> time of its first version
        if moment.commit is None:
            return
        line: set[str] = set()
        c: pygit2.Commit | None = moment.commit
        while c is not None:
            line.add(str(c.id))
            c = c.parents[0] if c.parents else None
        for path, mid, vid, blob, at, commit_id, op in store.index.db.execute(
            "SELECT path, memory_id, id, blob, created_at, commit_id, operation FROM versions "
            "WHERE scope=? ORDER BY seq",
            (moment.scope,),
        ):
            if commit_id not in line:
                continue
            self.first.setdefault(mid, at)
            if op == "deleted":
                self.rows.pop(path, None)
            else:
                self.rows[path] = (mid, vid, blob, at)

    def get(self, path: str, blob: str) -> tuple[str, str, int | None, int | None]:
        row = self.rows.get(path)
        if row is None or row[2] != blob:
            return "", "", None, None
        return row[0], row[1], self.first.get(row[0]), row[3]


def _memory(
    store: StoreCore,
    moment: Moment,
    notes: _Annotations,
    path: str,
    blob: pygit2.Oid,
    with_content: bool = True,
) -> Memory:
    from gitmem.engine.memories import Memory
    from gitmem.engine.writer import decode_content, sha256_hex

    data = store.blob_data(blob)
    text = decode_content(data)
    mid, vid, created, updated = notes.get(path, str(blob))
    return Memory(
        path=path,
        scope=moment.scope,
        content=text if with_content else None,
        content_sha256=sha256_hex(data),
        size=len(data),
        description=parse_description(text),
        memory_id=mid,
        version_id=vid,
        created_at=timestamp(created) if created is not None else None,
        updated_at=timestamp(updated) if updated is not None else None,
    )


def read_at(store: StoreCore, path: str, *, scope: str = "main", at: str) -> Memory:
    """The memory at ``path`` as ``scope`` held it at ``at``."""
    validate_path(path)
    moment = resolve(store, scope, at)
    tree = moment.tree
    try:
        obj = tree[path[1:]] if tree is not None else None
    except KeyError:
        obj = None
    if obj is None or obj.type_str != "blob":
        raise NotFoundError(f"memory {path} did not exist in scope {scope!r} at {at}")
    return _memory(store, moment, _Annotations(store, moment), path, obj.id)


def list_at(
    store: StoreCore,
    prefix: str = "/",
    *,
    scope: str = "main",
    at: str,
    depth: int = 0,
    with_content: bool = False,
) -> list[Memory | Prefix]:
    """Memories under ``prefix`` as ``scope`` held them at ``at`` (as ``list_memories`` lists them)."""
    from gitmem.engine.memories import Prefix

    validate_prefix(prefix)
    if depth not in (0, 1):
        raise InvalidInputError(f"invalid depth {depth}: use 0 (whole subtree) or 1 (immediate children)")
    moment = resolve(store, scope, at)
    notes = _Annotations(store, moment)
    out: list[Memory | Prefix] = []
    rollup: dict[str, int] = {}
    for path, blob in _blobs(moment.tree, prefix):
        rest = path[len(prefix) :]
        if depth == 1 and "/" in rest:
            sub = prefix + rest.split("/", 1)[0] + "/"
            if sub not in rollup:
                rollup[sub] = 0
                out.append(Prefix(sub, 0))
            rollup[sub] += 1
            continue
        out.append(_memory(store, moment, notes, path, blob, with_content))
    return [Prefix(i.path, rollup[i.path]) if isinstance(i, Prefix) else i for i in out]


def search_at(
    store: StoreCore,
    query: str,
    *,
    scope: str = "main",
    at: str,
    limit: int = 10,
    path_prefix: str | None = None,
    marks: tuple[str, str] = (lexical.SNIPPET_OPEN, lexical.SNIPPET_CLOSE),
) -> list[SearchHit]:
    """Lexical search over ``scope`` as it was at ``at``: the state's memories go into a private
    in-memory FTS5 table built like the index's (same tokenizer, weights, query parsing)."""
    from gitmem.engine.search import SearchHit

    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= lexical.MAX_LIMIT:
        raise InvalidInputError(f"invalid limit {limit!r}: use 1 to {lexical.MAX_LIMIT}")
    if path_prefix is not None:
        validate_prefix(path_prefix)
    moment = resolve(store, scope, at)
    expression = lexical.fts_query(query)
    if not expression.strip():
        return []
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(lexical.SCHEMA)
        rows = []
        notes = _Annotations(store, moment)
        for i, (path, blob) in enumerate(_blobs(moment.tree, path_prefix or "/"), start=1):
            data = store.blob_data(blob)
            text = data.decode("utf-8", "replace")
            _mid, vid, _c, _u = notes.get(path, str(blob))
            rows.append((i, scope, path, vid, parse_description(text), data))
        lexical.index_texts(db, rows)
        params: list[object] = [
            marks[0],
            marks[1],
            lexical.SNIPPET_ELLIPSIS,
            lexical.SNIPPET_TOKENS,
            expression,
            scope,
            limit,
        ]
        try:
            found = db.execute(lexical._QUERY.format(prefix=""), params).fetchall()
        except sqlite3.OperationalError as exc:
            raise InvalidInputError(f"invalid search query {query!r}: {exc}") from None
    finally:
        db.close()
    return [SearchHit(p, d, float(s), snip or "", v) for p, d, s, snip, v in found]


def diff_between(store: StoreCore, scope: str, start: str, end: str) -> str:
    """The whole scope's unified diff from moment ``start`` to moment ``end`` (``git diff`` of the
    two trees; an empty state diffs as an empty tree)."""
    a = resolve(store, scope, start)
    b = resolve(store, scope, end)
    ta, tb = a.tree, b.tree
    if ta is None and tb is None:
        return ""
    if ta is None:
        patch = tb.diff_to_tree(swap=True).patch  # type: ignore[union-attr]
    elif tb is None:
        patch = ta.diff_to_tree().patch
    else:
        patch = ta.diff_to_tree(tb).patch
    return str(patch or "")
