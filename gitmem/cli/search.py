"""``gitmem search STORE QUERY``: ranked full-text search within one scope."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem.cli import common
from gitmem.engine.search import SearchHit
from gitmem.store import Store

StoreArg = Annotated[str, typer.Argument(help="Store name, or a path to a bare store or a clone.")]
QueryArg = Annotated[str, typer.Argument(help='Words (all must match), "quoted phrases" and prefix* terms.')]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="At most this many results (1-1000).")]
PrefixOpt = Annotated[
    str | None, typer.Option("--prefix", "-p", help="Only memories under this directory (e.g. /notes/).")
]
RawOpt = Annotated[
    bool, typer.Option("--raw", help="Pass QUERY to SQLite FTS5 as is (columns: path, description, body).")
]


def register(app: typer.Typer) -> None:
    app.command("search")(search)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def render(hits: list[SearchHit]) -> None:
    rows = [
        [
            hit.path,
            f"{hit.score:.4g}",
            _one_line(hit.description or ""),
            _one_line(hit.snippet),
            hit.version_id,
        ]
        for hit in hits
    ]
    common.print_table(["PATH", "SCORE", "DESCRIPTION", "SNIPPET", "VERSION"], rows)


def search(
    store: StoreArg,
    query: QueryArg,
    scope: common.ScopeOpt = "main",
    limit: LimitOpt = 10,
    prefix: PrefixOpt = None,
    raw: RawOpt = False,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
    nl: common.NlOpt = False,
) -> None:
    """Search the memories of one scope, best match first (BM25; descriptions weigh most)."""

    def fn(s: Store) -> list[SearchHit]:
        common.check_scope(s, scope)
        return s.search(query, scope=scope, limit=limit, path_prefix=prefix, raw=raw)

    common.run(json, common.with_store(store, home, fn), render, nl=nl)
