"""Full-text search within one scope (docs/architecture.md#the-index-and-search), on an SQLite FTS5 table in the derived index.

The index keeps one FTS5 row per live memory per scope (its path, description and body: the file
without its front-matter block), maintained by :class:`gitmem.engine.index.Index` wherever the ``heads``
table changes, so the table only ever holds current head content: redacting an older version never
needs to touch it. ``search_docs`` maps each FTS5 rowid to (scope, path), so an update or delete is
one keyed row. Deleted rows leave FTS5's content table at once; their terms stay in older index
segments until FTS5 merges them, which :meth:`gitmem.engine.index.Index.purge_search` forces ('optimize'
plus a WAL checkpoint) after every history rewrite (redaction and compaction call it, and so does a
catch-up that finds history rewritten); SQLite >= 3.44 also gets FTS5's 'secure-delete'. The index
runs with ``secure_delete`` on, so freed pages hold zeros rather than old text.

Queries: natural language ranked over any of its words (stop words dropped; English stemming,
case and diacritics folded); ``"quoted phrases"`` and words joined by ``AND`` must match;
``prefix*`` terms. Everything else a user types is escaped, so FTS5 syntax
(``-``, ``:``, ``(``, ``AND``/``OR``/``NEAR``, stray ``*`` or ``"``) never raises; ``raw=True`` passes
FTS5 syntax through for experts. Ranking is BM25 with the description weighted above path and body.
A prefix is matched against stemmed terms (``memo*`` finds "memory", stored as "memori"; ``runn*``
does not find "running", stored as "run").
"""

from __future__ import annotations

import contextlib
import sqlite3
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gitmem.errors import InvalidInputError
from gitmem.model import frontmatter
from gitmem.model.paths import validate_prefix, validate_scope
from gitmem.model.reserved import SHORTTERM_PREFIXES

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

MAX_LIMIT = 1000
#: BM25 column weights (body, description, path): a description hit outranks a body or path hit.
#: Body comes first so that snippets prefer it when several columns match equally well.
WEIGHTS = (1.0, 4.0, 2.0)
SNIPPET_OPEN, SNIPPET_CLOSE, SNIPPET_ELLIPSIS, SNIPPET_TOKENS = "**", "**", "…", 16

SCHEMA = """
CREATE TABLE IF NOT EXISTS search_docs(
    docid INTEGER PRIMARY KEY, scope TEXT NOT NULL, path TEXT NOT NULL, version_id TEXT NOT NULL,
    UNIQUE(scope, path));
CREATE VIRTUAL TABLE IF NOT EXISTS search_fts USING fts5(
    body, description, path, tokenize='porter unicode61 remove_diacritics 2');
"""

_QUERY = f"""
SELECT d.path, f.description, -f.rank, snippet(search_fts, -1, ?, ?, ?, ?), d.version_id
FROM search_fts AS f JOIN search_docs AS d ON d.docid = f.rowid
WHERE search_fts MATCH ? AND f.rank MATCH 'bm25({", ".join(map(str, WEIGHTS))})' AND d.scope = ? {{prefix}}
ORDER BY f.rank LIMIT ?
"""
_SNIPPET = "snippet(search_fts, -1, ?, ?, ?, ?)"
_QUERY_BARE = _QUERY.replace(_SNIPPET, "''")  # ranking alone: hybrid search's candidates
# One memory's snippet: FTS5 seeks the rowid instead of matching the whole table again.
_SNIPPET_ONE = f"SELECT {_SNIPPET} FROM search_fts AS f WHERE search_fts MATCH ? AND f.rowid = ?"


@dataclass(frozen=True)
class SearchHit:
    """One search result. ``score`` is BM25 relevance (higher is better); ``snippet`` is a short
    excerpt of the best-matching column with the matched terms between ``**``."""

    path: str
    description: str | None
    score: float
    snippet: str
    version_id: str


def search(
    store: StoreCore,
    query: str,
    *,
    scope: str = "main",
    limit: int = 10,
    path_prefix: str | None = None,
    raw: bool = False,
    marks: tuple[str, str] = (SNIPPET_OPEN, SNIPPET_CLOSE),
    snippets: bool = True,
) -> list[SearchHit]:
    """Memories at the head of ``scope`` matching ``query``, best first (``snippets=False``: every
    snippet empty, for a caller that makes its own for the few hits it keeps: :func:`snippets_for`).

    Args:
        query: words (any may match, best first), required ``"phrases"`` and ``a AND b``, and ``prefix*`` terms; with ``raw``, an
            FTS5 query over the columns ``path``, ``description`` and ``body``.
        scope: the one scope searched; other scopes' memories are never returned.
        limit: at most this many hits (1-1000).
        path_prefix: only memories under this directory (``/notes/``, segment-aligned).
        marks: what the snippet puts before and after each match (a caller that must tell them
            from the same text in the memory, as the web console does, passes unguessable ones).

    Raises:
        InvalidInputError: a bad scope, limit or prefix, or (with ``raw``) an FTS5 syntax error.
    """
    validate_scope(scope)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInputError(f"invalid limit {limit!r}: use 1 to {MAX_LIMIT}")
    if path_prefix is not None:
        validate_prefix(path_prefix)
    expression = query if raw else fts_query(query)
    if not expression.strip():
        return []
    index = store.index
    index.ensure(scope)  # catch up from git: pushes, syncs and rewrites made elsewhere show up
    params: list[object] = [marks[0], marks[1], SNIPPET_ELLIPSIS, SNIPPET_TOKENS] if snippets else []
    params += [expression, scope]
    where = ""
    if path_prefix is not None and path_prefix != "/":
        # Every path under the prefix sorts between prefix and prefix + U+10FFFF.
        where = "AND d.path >= ? AND d.path < ?"
        params += [path_prefix, path_prefix + "\U0010ffff"]
    if not any((path_prefix or "/").startswith(p) for p in SHORTTERM_PREFIXES):
        # Conversations and checkpoints are short-term records: searched only when asked for by prefix.
        for reserved in SHORTTERM_PREFIXES:
            where += " AND NOT (d.path >= ? AND d.path < ?)"
            params += [reserved, reserved + "\U0010ffff"]
    params.append(limit)
    try:
        rows = index.db.execute((_QUERY if snippets else _QUERY_BARE).format(prefix=where), params).fetchall()
    except sqlite3.OperationalError as exc:
        raise InvalidInputError(f"invalid search query {query!r}: {exc}") from None
    return [SearchHit(path, desc, float(score), snip or "", vid) for path, desc, score, snip, vid in rows]


def snippets_for(
    store: StoreCore,
    query: str,
    scope: str,
    paths: list[str],
    marks: tuple[str, str] = (SNIPPET_OPEN, SNIPPET_CLOSE),
) -> dict[str, str]:
    """The snippets :func:`search` would give the memories at ``paths`` for ``query`` (in the index
    as it is now: call it right after the search)."""
    expression = fts_query(query)
    if not paths or not expression.strip():
        return {}
    db = store.index.db
    out: dict[str, str] = {}
    for path in paths:
        row = db.execute("SELECT docid FROM search_docs WHERE scope=? AND path=?", (scope, path)).fetchone()
        if row is None:
            continue
        params = [marks[0], marks[1], SNIPPET_ELLIPSIS, SNIPPET_TOKENS, expression, row[0]]
        found = db.execute(_SNIPPET_ONE, params).fetchone()
        out[path] = (found[0] if found else "") or ""
    return out


# ---------------------------------------------------------------------- query parsing
#: Words that carry no meaning in a question ("What does Alice prefer to drink?"): dropped from
#: the any-term part of a query unless nothing else is left. Written for this project.
STOP_WORDS = frozenset(
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "between",
        "both",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "doing",
        "done",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "he",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "itself",
        "just",
        "me",
        "more",
        "most",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "on",
        "once",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "please",
        "same",
        "she",
        "should",
        "so",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "us",
        "very",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "yourself",
        "yourselves",
        "tell",
        "know",
        "remember",
        "recall",
        "anything",
        "something",
        "thing",
        "things",
    ]
)


def _terms(text: str) -> list[tuple[str, str, bool]]:
    """The query as (kind, text, prefix) terms: ``word``, ``phrase`` or the operator ``AND``."""
    out: list[tuple[str, str, bool]] = []
    # Control characters (NUL ends an FTS5 string early) separate words like spaces do.
    text = "".join(" " if unicodedata.category(c) in ("Cc", "Cs") else c for c in text)
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        if ch == '"':
            end = text.find('"', i + 1)
            end = n if end < 0 else end
            term, i = text[i + 1 : end], end + 1
            prefix = i < n and text[i] == "*"
            while i < n and text[i] == "*":
                i += 1
            if any(c.isalnum() for c in term):
                out.append(("phrase", term, prefix))
            continue
        start = i
        while i < n and not text[i].isspace() and text[i] != '"':
            i += 1
        term = text[start:i]
        if term == "AND":
            out.append(("AND", term, False))
            continue
        prefix = term.endswith("*")
        term = term.rstrip("*")
        # Punctuation around a word ("drink?", "Alice:") is no part of it; inside one it stays
        # ("e-mail", "v1.2") and the tokenizer splits it as it split the indexed text.
        term = term.strip("".join(c for c in set(term) if not c.isalnum()) or " ") if not prefix else term
        if any(c.isalnum() for c in term):
            out.append(("word", term, prefix))
    return out


def _quote(term: str, prefix: bool) -> str:
    return '"' + term.replace('"', '""') + '"' + ("*" if prefix else "")


def fts_query(text: str) -> str:
    """A user's query as a valid FTS5 expression ("" for nothing), never an FTS5 syntax error.

    Natural language ranks by relevance over *any* of its words: plain words are OR-ed (stop words
    dropped, stemming by the index's Porter tokenizer), so BM25 puts the memories that match more
    and rarer words first. What must match is said explicitly: a ``"quoted phrase"`` is required,
    and so are the words on either side of an ``AND`` (``tea AND alice``). ``word*`` and
    ``"phrase"*`` are prefix terms.
    """
    terms = _terms(text)
    required: list[str] = []
    optional: list[tuple[str, str, bool]] = []
    for idx, (kind, term, prefix) in enumerate(terms):
        if kind == "AND":
            continue
        joined = (idx > 0 and terms[idx - 1][0] == "AND") or (
            idx + 1 < len(terms) and terms[idx + 1][0] == "AND"
        )
        if kind == "phrase" or joined:
            required.append(_quote(term, prefix))
        else:
            optional.append((kind, term, prefix))
    meaningful = [t for t in optional if t[2] or t[1].lower() not in STOP_WORDS]
    words = [_quote(term, prefix) for _kind, term, prefix in (meaningful or optional)]
    if required and not meaningful:
        words = []  # "the" beside a phrase adds nothing
    parts = list(dict.fromkeys(required))
    if words:
        unique = list(dict.fromkeys(words))
        parts.append(unique[0] if len(unique) == 1 else "(" + " OR ".join(unique) + ")")
    return " AND ".join(parts)


# ---------------------------------------------------------------------- index maintenance
def body_text(content: str) -> str:
    """What the ``body`` column holds: the file without its front-matter block."""
    m = frontmatter._block(content)
    return content if m is None else content[m.end() :]


def configure(db: sqlite3.Connection) -> None:
    """Once, when the index is created: deleted rows leave the FTS5 index at once where SQLite
    supports it (3.44+); older versions rely on merges and :func:`optimize`."""
    if sqlite3.sqlite_version_info >= (3, 44, 0):
        # An FTS5 built without it still purges through merges.
        with contextlib.suppress(sqlite3.OperationalError):
            db.execute("INSERT INTO search_fts(search_fts, rank) VALUES('secure-delete', 1)")


def index_text(
    db: sqlite3.Connection, scope: str, path: str, version_id: str, description: str | None, data: bytes
) -> None:
    """Add (or replace) the row of the memory at ``path`` with its head content ``data``. A path
    that has a row keeps its ``docid`` (its ``search_docs`` row is updated in place, its text row
    replaced): four statements on the write path instead of five, and no b-tree delete and
    insert in ``search_docs`` and its index."""
    row = db.execute("SELECT docid FROM search_docs WHERE scope=? AND path=?", (scope, path)).fetchone()
    if row is None:
        docid = db.execute(
            "INSERT INTO search_docs(scope, path, version_id) VALUES(?,?,?)", (scope, path, version_id)
        ).lastrowid
    else:
        docid = row[0]
        db.execute("UPDATE search_docs SET version_id=? WHERE docid=?", (version_id, docid))
        db.execute("DELETE FROM search_fts WHERE rowid=?", row)
    body = body_text(data.decode("utf-8", "replace"))
    db.execute(
        "INSERT INTO search_fts(rowid, path, description, body) VALUES(?,?,?,?)",
        (docid, path, description, body),
    )


def index_texts(
    db: sqlite3.Connection, texts: Iterable[tuple[int, str, str, str, str | None, bytes]]
) -> None:
    """Rows for many paths that have none yet, as (docid, scope, path, version_id, description,
    head content), in two executemany (a fresh walk's heads)."""
    docs, fts = [], []
    for docid, scope, path, version_id, description, data in texts:
        docs.append((docid, scope, path, version_id))
        fts.append((docid, path, description, body_text(data.decode("utf-8", "replace"))))
    db.executemany("INSERT INTO search_docs(docid, scope, path, version_id) VALUES(?,?,?,?)", docs)
    db.executemany("INSERT INTO search_fts(rowid, path, description, body) VALUES(?,?,?,?)", fts)


def unindex_text(db: sqlite3.Connection, scope: str, path: str) -> None:
    """Remove the row of ``path`` (no-op when there is none)."""
    row = db.execute("SELECT docid FROM search_docs WHERE scope=? AND path=?", (scope, path)).fetchone()
    if row is not None:
        db.execute("DELETE FROM search_fts WHERE rowid=?", row)
        db.execute("DELETE FROM search_docs WHERE docid=?", row)


def drop_scope_text(db: sqlite3.Connection, scope: str) -> int:
    """Remove every row of ``scope``; returns how many there were."""
    cur = db.execute(
        "DELETE FROM search_fts WHERE rowid IN (SELECT docid FROM search_docs WHERE scope=?)", (scope,)
    )
    db.execute("DELETE FROM search_docs WHERE scope=?", (scope,))
    return max(cur.rowcount, 0)


def optimize(db: sqlite3.Connection) -> None:
    """Merge every FTS5 segment into one, so terms of deleted rows leave the index b-trees."""
    db.execute("INSERT INTO search_fts(search_fts) VALUES('optimize')")
