"""Pages to browse: stores, a store's tree and search, a memory with its history and diffs, restore."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from gitmem.config import StoreSettings
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.model.paths import validate_prefix
from gitmem.model.versions import Version
from gitmem.server.console import diff, internals
from gitmem.server.console.web import PREFIX, Ctx, Page, Redirect
from gitmem.store import Memory, Prefix, Store

TREE_PAGE = 200
HISTORY_PAGE = 100
SEARCH_LIMIT = 20


@dataclass(frozen=True)
class StoreRow:
    settings: StoreSettings
    scopes: list[internals.ScopeStats]
    memories: int
    bytes: int
    last_write: Version | None
    writable: bool


def store_url(name: str, tail: str = "", **query: str | None) -> str:
    q = "&".join(f"{k}={quote(v, safe='/')}" for k, v in query.items() if v)
    return f"{PREFIX}/stores/{quote(name, safe='')}{tail}" + (f"?{q}" if q else "")


def memory_url(name: str, scope: str, memory_id: str, **query: str | None) -> str:
    return store_url(name, "/memory", scope=scope, id=memory_id, **query)


def _page_number(ctx: Ctx, key: str) -> int:
    raw = ctx.query.get(key, "1")
    if not raw.isdigit() or not 1 <= int(raw) <= 1_000_000:
        raise InvalidInputError(f"{key}: expected a page number, got {raw!r}")
    return int(raw)


# ---------------------------------------------------------------------- stores
def stores(ctx: Ctx) -> Page:
    rows = []
    handles = ctx.pool.handles()
    for settings in ctx.pool.all_settings():
        if not ctx.token.may_read(settings.id) or settings.id not in handles:
            continue
        handle = handles[settings.id]
        with ctx.pool.store(handle) as store:
            scopes = ctx.scopes(handle, store)
            stats = internals.scope_stats(store, scopes, ctx.caller)
            newest = [v for sc in scopes for v in store.versions(scope=sc, limit=1)]
            rows.append(
                StoreRow(
                    settings,
                    stats,
                    sum(s.memories for s in stats),
                    sum(s.bytes for s in stats),
                    max(newest, key=lambda v: v.created_at, default=None),
                    ctx.token.may_write(settings.id) and settings.archived_at is None,
                )
            )
    return Page("stores.html", {"stores": rows, "title": "Stores"})


# ---------------------------------------------------------------------- a store
def _crumbs(prefix: str) -> list[tuple[str, str]]:
    parts = [p for p in prefix.split("/") if p]
    return [(p, "/" + "/".join(parts[: i + 1]) + "/") for i, p in enumerate(parts)]


def store_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    prefix = ctx.query.get("prefix") or "/"
    try:
        validate_prefix(prefix)
    except InvalidInputError as exc:
        raise InvalidInputError(f"prefix: {exc.message}") from None
    page = _page_number(ctx, "page")
    query = (ctx.query.get("q") or "").strip()
    mode = ctx.query.get("mode") or "lexical"
    if mode not in internals.MODES:
        raise InvalidInputError(f"mode: use one of {', '.join(internals.MODES)}, not {mode[:40]!r}")
    with ctx.pool.store(name) as store:
        scopes = ctx.scopes(name, store)
        scope = ctx.scope_of(name, store, default=scopes[0] if scopes else None)
        known = scope in scopes
        items: list[Memory | Prefix] = store.list(prefix, scope=scope, depth=1) if known else []
        found = internals.Found([], mode, mode, 0)
        if query and known:
            path_prefix = None if prefix == "/" else prefix
            found = internals.search(
                store,
                query,
                scope=scope,
                limit=SEARCH_LIMIT,
                path_prefix=path_prefix,
                caller=ctx.caller,
                mode=mode,
            )
        stats = (
            internals.scope_stats(store, [scope], ctx.caller)[0]
            if known
            else internals.ScopeStats(scope, 0, 0)
        )
        values: dict[str, Any] = {
            "title": name,
            "name": name,
            "settings": store.settings,
            "scopes": scopes,
            "scope": scope,
            "prefix": prefix,
            "crumbs": _crumbs(prefix),
            "items": items[(page - 1) * TREE_PAGE : page * TREE_PAGE],
            "shown_from": (page - 1) * TREE_PAGE + 1,
            "total_items": len(items),
            "page": page,
            "more": len(items) > page * TREE_PAGE,
            "stats": stats,
            "open_proposals": len(  # those the token may read (its own, or all for a reviewer)
                store.proposals(status="open", caller=ctx.caller)
            ),
            "query": query,
            "hits": found.hits,
            "found": found,
            "modes": internals.MODES,
            "mode": mode,
            "Prefix": Prefix,
            "store_url": store_url,
            "memory_url": memory_url,
        }
    return Page("store.html", values)


# ---------------------------------------------------------------------- a memory
def _resolve(ctx: Ctx, name: str, store: Store, scope: str) -> tuple[str, Memory | None]:
    """(memory id, the live memory or None when deleted); 404 when the memory is not in this scope."""
    mid, path = ctx.query.get("id"), ctx.query.get("path")
    if mid:
        head = internals.head_of(store, scope, mid, ctx.caller)
        if head is None:
            if not store.versions(memory_id=mid, scope=scope, limit=1):
                raise NotFoundError(f"memory {mid} does not exist in scope {scope!r}")
            return mid, None
        path = head.path
    if not path:
        raise InvalidInputError("give the memory's id or path")
    memory = store.read(path, scope=scope)
    return memory.memory_id, memory


def _same_memory(store: Store, vid: str, mid: str, scope: str) -> Version:
    try:
        v = store.version(vid, scope=scope)  # a version a fork shares with main answers for the fork
    except NotFoundError:
        v = None
    if v is None or v.memory_id != mid:
        raise NotFoundError(f"version {vid} is not a version of memory {mid} in scope {scope!r}")
    return v


def memory_page(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    hpage = _page_number(ctx, "hpage")
    mode = ctx.query.get("mode") or "unified"
    if mode not in ("unified", "split"):
        raise InvalidInputError(f"mode: use unified or split, not {mode!r}")
    with ctx.pool.store(name) as store:
        scope = ctx.scope_of(name, store)
        mid, memory = _resolve(ctx, name, store, scope)
        history = store.versions(memory_id=mid, scope=scope)
        a, b = ctx.query.get("a"), ctx.query.get("b")
        lines: list[diff.Line] = []
        pairs: list[diff.Pair] = []
        va = vb = None
        if a and b:
            va, vb = _same_memory(store, a, mid, scope), _same_memory(store, b, mid, scope)
            if (va.created_at, va.id) > (vb.created_at, vb.id):
                va, vb = vb, va  # always from the older to the newer
            lines = diff.unified(store.diff(va.id, vb.id))
            pairs = diff.side_by_side(lines) if mode == "split" else []
        writable = ctx.token.may_write(name, scope) and store.settings.archived_at is None
        head_id = memory.version_id if memory else None
        values: dict[str, Any] = {
            "title": memory.path if memory else f"{mid} (deleted)",
            "name": name,
            "scope": scope,
            "memory_id": mid,
            "memory": memory,
            "path": history[0].path if history else "",
            "history": history[(hpage - 1) * HISTORY_PAGE : hpage * HISTORY_PAGE],
            "total_versions": len(history),
            "hpage": hpage,
            "more": len(history) > hpage * HISTORY_PAGE,
            "head_id": head_id,
            "a": va,
            "b": vb,
            "mode": mode,
            "lines": lines,
            "pairs": pairs,
            "writable": writable,
            "admin": ctx.token.admin,  # redaction works in archived stores too
            "done": ctx.query.get("done"),
            "store_url": store_url,
            "memory_url": memory_url,
        }
    return Page("memory.html", values)


def version_redirect(ctx: Ctx) -> Redirect:
    """``/stores/S/versions/V``: the memory page of version V, at its row in the history."""
    name = ctx.readable(ctx.params["store"])
    vid = ctx.params["version"]
    with ctx.pool.store(name) as store:
        v = store.version(vid)
        if not ctx.token.may_read(name, v.scope):  # a fork may share it: a scope the token reads
            shared = [scope for scope in store.version_scopes(v.id) if ctx.token.may_read(name, scope)]
            if not shared:
                raise NotFoundError(f"version {vid} does not exist in store {name!r}")
            v = store.version(vid, scope=sorted(shared)[0])
    return Redirect(memory_url(name, v.scope, v.memory_id) + f"#{v.id}")


# ---------------------------------------------------------------------- restore
def _restorable(ctx: Ctx, store: Store, name: str) -> tuple[Version, str | None]:
    vid = ctx.form.get("version") or ctx.query.get("version") or ""
    scope = ctx.form.get("scope") or ctx.query.get("scope") or None  # a fork's shared version
    v = store.version(vid, scope=scope)
    if not ctx.token.may_read(name, v.scope):
        raise NotFoundError(f"version {vid} does not exist in store {name!r}")
    ctx.need_write(name, v.scope, store)
    if v.redaction is not None or v.operation == "deleted":
        raise InvalidInputError(f"version {vid} has no content to restore (it is redacted or a deletion)")
    head = internals.head_of(store, v.scope, v.memory_id, ctx.caller)
    return v, head.id if head else None


def restore_confirm(ctx: Ctx) -> Page:
    name = ctx.readable(ctx.params["store"])
    with ctx.pool.store(name) as store:
        v, head_id = _restorable(ctx, store, name)
        content = store.read(v.path, scope=v.scope, version=v.id).content
        lines = diff.unified(store.diff(head_id, v.id)) if head_id and head_id != v.id else []
    values = {
        "title": f"Restore {v.path}",
        "name": name,
        "v": v,
        "content": content,
        "lines": lines,
        "head_id": head_id,
        "memory_url": memory_url,
        "store_url": store_url,
    }
    return Page("restore.html", values)


def restore_do(ctx: Ctx) -> Page | Redirect:
    name = ctx.readable(ctx.params["store"])
    with ctx.pool.store(name) as store:
        v, _head = _restorable(ctx, store, name)
        if not ctx.confirmed():
            return restore_confirm(ctx)
        with ctx.pool.write_lock(name, v.scope):
            new = store.restore(
                v.id, actor=ctx.token.actor, session=ctx.token.session, scope=v.scope, caller=ctx.caller
            )
    done = f"restored:{new.id}" if new is not None else "unchanged"
    return Redirect(memory_url(name, v.scope, v.memory_id, done=done))


def when(value: object) -> str:
    """A time for people: ``2026-01-31 12:00 UTC``."""
    if isinstance(value, int | float):
        value = dt.datetime.fromtimestamp(value, dt.UTC)
    if isinstance(value, str):
        try:
            value = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return str(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return "" if value is None else str(value)
