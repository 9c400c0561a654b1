"""Search modes (docs/search.md): ``lexical`` (BM25 over FTS5), ``semantic`` (dense vectors) and
``hybrid`` (both, fused), and the answer that says which mode answered.

Hybrid fusion is a weighted sum over the union of both candidate lists: BM25 divided by the best BM25
of the query, plus :data:`ALPHA` times the cosine rescaled over the dense candidates (best 1, the
:data:`CANDIDATES`-th 0). Measured against reciprocal-rank fusion on LoCoMo (bench/locomo_eval.py,
docs/search.md), it keeps BM25's exact-word wins and lets meaning decide where words do not.

A semantic or hybrid search on a scope whose vectors are not caught up embeds up to
:data:`gitmem.engine.vectors.INLINE_MAX` memories itself; with more pending it answers ``lexical``
(``SearchResults.pending`` says how many wait) and starts a catch-up, so it never waits on a bulk
embedding (after a clone, a rebuild, a large import).
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING

import pygit2

from gitmem import config
from gitmem.engine import search as lexical
from gitmem.engine.search import SearchHit as SearchHit  # re-exported for faces
from gitmem.errors import InvalidInputError
from gitmem.model.paths import validate_prefix, validate_scope

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

MODES = ("lexical", "semantic", "hybrid", "auto")
ALPHA = float(config.env("GITMEM_HYBRID_ALPHA") or "0.2")
FUSION = config.env("GITMEM_HYBRID_FUSION") or "weighted"  # or "rrf" (measured, docs/search.md)
CANDIDATES = 50  # taken from each side before fusing
RRF_K = 60


class SearchResults(list[SearchHit]):
    """The hits, best first, and how they were found: ``mode`` is the mode that answered
    (``lexical`` when vectors were not ready), ``requested`` the mode asked for, ``pending`` the
    memories of the scope without a vector when the answer was made (-1: no vector file can be
    kept for this store, e.g. a read-only directory)."""

    def __init__(self, hits: list[SearchHit], mode: str, requested: str, pending: int = 0) -> None:
        super().__init__(hits)
        self.mode = mode
        self.requested = requested
        self.pending = pending


def search(
    store: StoreCore,
    query: str,
    *,
    scope: str = "main",
    limit: int = 10,
    path_prefix: str | None = None,
    raw: bool = False,
    mode: str = "lexical",
    marks: tuple[str, str] = (lexical.SNIPPET_OPEN, lexical.SNIPPET_CLOSE),
    background: str = "thread",
) -> SearchResults:
    """:func:`gitmem.engine.search.search` in ``mode``; see the module's docstring.

    ``auto`` is hybrid when the extra ``semantic`` is installed and the scope's vectors are ready,
    lexical otherwise. ``background`` says how a catch-up starts when too many memories wait:
    ``thread`` (a long-lived process), ``process`` (a one-shot command) or ``none``.
    """
    from gitmem.engine import vector_catchup, vectors

    if mode not in MODES:
        raise InvalidInputError(f"invalid search mode {mode!r}: use one of {', '.join(MODES)}")
    if mode == "lexical" or (mode == "auto" and not vectors.available()):
        hits = lexical.search(
            store, query, scope=scope, limit=limit, path_prefix=path_prefix, raw=raw, marks=marks
        )
        return SearchResults(hits, "lexical", mode)
    if raw:
        raise InvalidInputError("raw FTS5 queries are lexical: use mode 'lexical' with raw")
    validate_scope(scope)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= lexical.MAX_LIMIT:
        raise InvalidInputError(f"invalid limit {limit!r}: use 1 to {lexical.MAX_LIMIT}")
    if path_prefix is not None:
        validate_prefix(path_prefix)
    vectors.embedder()  # InvalidInputError without the extra
    want = max(limit, CANDIDATES)
    try:
        dense = vectors.rank(store, scope, query, want, path_prefix)
    except (OSError, sqlite3.Error):
        # No vector file can be kept here (a read-only directory, a full disk): words still answer.
        hits = lexical.search(store, query, scope=scope, limit=limit, path_prefix=path_prefix, marks=marks)
        return SearchResults(hits, "lexical", mode, -1)
    if dense.missing:
        if background == "thread":
            vector_catchup.catch_up_in_background(store, scope)
        elif background == "process":
            vector_catchup.spawn_catch_up(store)
        hits = lexical.search(store, query, scope=scope, limit=limit, path_prefix=path_prefix, marks=marks)
        return SearchResults(hits, "lexical", mode, dense.missing)
    if mode == "semantic":
        return SearchResults([_dense_hit(store, h) for h in dense.hits[:limit]], "semantic", mode)
    lex = lexical.search(store, query, scope=scope, limit=want, path_prefix=path_prefix, snippets=False)
    fused = fuse(store, lex, dense.hits, limit)
    words = {h.path for h in lex}
    snips = lexical.snippets_for(store, query, scope, [h.path for h in fused if h.path in words], marks)
    fused = [
        SearchHit(h.path, h.description, h.score, snips.get(h.path, h.snippet), h.version_id)
        if h.path in words
        else h
        for h in fused
    ]
    return SearchResults(fused, "hybrid", "hybrid" if mode == "auto" else mode)


def search_at(
    store: StoreCore,
    query: str,
    *,
    scope: str,
    at: str,
    limit: int = 10,
    path_prefix: str | None = None,
    mode: str = "lexical",
) -> SearchResults:
    """Search over ``scope`` as it was ``at`` (gitmem.engine.past): lexical, whatever the mode
    asked (``mode`` on the answer says so)."""
    from gitmem.engine import past

    if mode not in MODES:
        raise InvalidInputError(f"invalid search mode {mode!r}: use one of {', '.join(MODES)}")
    hits = past.search_at(store, query, scope=scope, at=at, limit=limit, path_prefix=path_prefix)
    return SearchResults(hits, "lexical", mode)


def fuse(
    store: StoreCore,
    lex: list[SearchHit],
    dense: list[tuple[str, float, str, str | None, str]],
    limit: int,
    *,
    alpha: float | None = None,
    fusion: str | None = None,
) -> list[SearchHit]:
    """The fused ranking of a lexical and a dense list (see the module's docstring)."""
    alpha = ALPHA if alpha is None else alpha
    fusion = FUSION if fusion is None else fusion
    score: dict[str, float] = {}
    if fusion == "rrf":
        for r, h in enumerate(lex):
            score[h.path] = score.get(h.path, 0.0) + 1.0 / (RRF_K + r)
        for r, (p, *_rest) in enumerate(dense):
            score[p] = score.get(p, 0.0) + alpha / (RRF_K + r)
    else:
        top = max((h.score for h in lex), default=0.0) or 1.0
        for h in lex:
            score[h.path] = h.score / top
        if dense:
            hi, lo = dense[0][1], dense[-1][1]
            span = (hi - lo) or 1.0
            for p, c, *_rest in dense:
                score[p] = score.get(p, 0.0) + alpha * (c - lo) / span
    by_path = {h.path: h for h in lex}
    info = {d[0]: d for d in dense}
    order = sorted(score, key=lambda p: (-score[p], p))[:limit]
    out = []
    for p in order:
        found = by_path.get(p)
        h = found if found is not None else _dense_hit(store, info[p])
        out.append(SearchHit(h.path, h.description, score[p], h.snippet, h.version_id))
    return out


def _dense_hit(store: StoreCore, hit: tuple[str, float, str, str | None, str]) -> SearchHit:
    """A hit found by its vector alone: the snippet is the start of its body."""
    path, cos, blob, description, version_id = hit
    data = store.blob_data(pygit2.Oid(hex=blob))
    words = lexical.body_text(data.decode("utf-8", "replace")).split()
    snippet = " ".join(words[: lexical.SNIPPET_TOKENS]) + (
        lexical.SNIPPET_ELLIPSIS if len(words) > lexical.SNIPPET_TOKENS else ""
    )
    return SearchHit(path, description, cos, snippet, version_id)
