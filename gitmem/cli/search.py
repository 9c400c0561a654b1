"""``gitmem search STORE QUERY``: ranked full-text search within one scope."""

from __future__ import annotations

from typing import Annotated

import typer

from gitmem.cli import common
from gitmem.store import SearchHit, Store

StoreArg = Annotated[str, typer.Argument(help="Store name, or a path to a bare store or a clone.")]
QueryArg = Annotated[str, typer.Argument(help='Words (all must match), "quoted phrases" and prefix* terms.')]
LimitOpt = Annotated[int, typer.Option("--limit", "-n", help="At most this many results (1-1000).")]
PrefixOpt = Annotated[
    str | None, typer.Option("--prefix", "-p", help="Only memories under this directory (e.g. /notes/).")
]
ModeOpt = Annotated[
    str,
    typer.Option(
        "--mode",
        "-m",
        help="lexical (BM25), semantic (vectors), hybrid (both) or auto (hybrid when vectors are ready); "
        "semantic and hybrid need the extra 'semantic'. Which mode answered goes to stderr.",
    ),
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
    mode: ModeOpt = "lexical",
    at: common.AtOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
    nl: common.NlOpt = False,
) -> None:
    """Search the memories of one scope, best match first (BM25, descriptions weigh most; or by
    meaning with --mode semantic/hybrid, docs/search.md)."""

    def fn(s: Store) -> list[SearchHit]:
        common.check_scope(s, scope)
        if at is not None:
            found = s.search(query, scope=scope, limit=limit, path_prefix=prefix, raw=raw, mode=mode, at=at)
        else:
            # A one-shot command: vectors that are behind catch up in a detached process.
            found = s.search(
                query,
                scope=scope,
                limit=limit,
                path_prefix=prefix,
                raw=raw,
                mode=mode,
                background="process",
            )
        note = f"mode: {found.mode}"
        if found.mode != found.requested and found.requested != "auto":
            note += f" ({found.requested} asked"
            if found.pending > 0:
                note += f"; {found.pending} memories still without vectors, catching up)"
            else:
                note += "; no vector file can be kept for this store)" if found.pending < 0 else ")"
        typer.echo(note, err=True)
        return found

    common.run(json, common.with_store(store, home, fn), render, nl=nl)
