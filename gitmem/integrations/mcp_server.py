"""An MCP server for gitmem stores, over stdio (``gitmem mcp``), built on the ``mcp`` package (2.x).

Tools: ``list_memories`` (paginated: a page of about 100 with a cursor and totals), ``read_memory``,
``memory_history`` and ``search_memories`` (ranked over any of the words) for every served store;
``write_memory``, ``create_memory``, ``edit_memory`` (str_replace or insert), ``delete_memory`` and
``rename_memory`` only when at least one store is served read-write, and then only for those stores
(a server of read-only stores has no write tools). Every tool declares an output schema and returns
structured content (with the same JSON as text). Arguments are ``store``, ``path`` and ``new_path``
everywhere; an unknown argument is refused, and a bad one is named in one short sentence.
Resources: every memory as ``gitmem://STORE/PATH`` (``gitmem://notes/prefs/editor.md``), listed live
in pages of :data:`PAGE_SIZE`.

A store is served in its own scope (``NAME@SCOPE``) or the server's. Every write is a version tagged
with the server's session id (``--session``, else a new ``sesn_<ulid>``: one MCP connection is one
session). Gitmem errors come back as tool errors (``is_error``), never as a crash of the server.

``review=True`` (``gitmem mcp --review``): every write lands as the session's proposal and reads
show it on top of the scope (docs/review.md). ``reviewer=True`` (``--reviewer``) adds the tools of
a reviewing agent: ``list_proposals``, ``show_proposal``, ``diff_proposal``, ``accept_proposal`` and
``reject_proposal`` (decisions are recorded under the server's actor).
"""

import dataclasses
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import (
    Annotated,
    Any,
    Literal,
    TypeVar,
)

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import ListResourcesResult, PaginatedRequestParams, ToolAnnotations
from mcp.types import Resource as MCPResource
from pydantic import Field, ValidationError

from gitmem.errors import GitmemError, InvalidInputError
from gitmem.ids import new_id
from gitmem.integrations.mcp_shapes import (
    History,
    MemoryContent,
    MemoryEntry,
    MemoryPage,
    PrefixEntry,
    SearchHitResult,
    SearchResults,
    VersionResult,
    _fit,
    _short,
    _version_dict,
    decode_cursor,
    encode_cursor,
)
from gitmem.integrations.mcp_stores import ServedStore, ServeSummary, instructions, labels, parse_store_spec
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_scope
from gitmem.model.versions import validate_actor, validate_session
from gitmem.store import Memory, Store, open_store

__all__ = ["ServeSummary", "ServedStore", "build_server", "labels", "parse_store_spec", "serve"]

T = TypeVar("T")
URI_PREFIX = "gitmem://"
PAGE_SIZE = 100  # memories per list_memories page and per resources/list page
MAX_PAGE = 200
_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
_DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)


class GitmemMCPServer(MCPServer[Any]):
    """MCPServer with gitmem's argument rules and a live, paginated resource list."""

    def __init__(
        self,
        gitmem_stores: dict[str, ServedStore],
        scope: str,
        session: str,
        call: Callable[..., Any],
        **kw: Any,
    ) -> None:
        super().__init__(**kw)
        #: The session id every write through this server is tagged with.
        self.session = session
        self._gitmem_stores = gitmem_stores
        self._gitmem_scope = scope
        self._gitmem_call = call

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            known = set(tool.parameters.get("properties", {}))
            unknown = sorted(set(arguments) - known)
            if unknown:
                raise ToolError(
                    f"invalid_input: unknown argument{'s' if len(unknown) > 1 else ''} "
                    f"{', '.join(map(repr, unknown))} for {name}; it takes {', '.join(sorted(known))}"
                )
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(_short(exc.__cause__)) from None
            raise

    def _all_resources(self) -> list[MCPResource]:
        out = []
        for name, served in self._gitmem_stores.items():
            scope = served.scope or self._gitmem_scope
            for m in self._gitmem_call(served.store.list, "/", scope=scope):
                if isinstance(m, Memory):
                    out.append(
                        MCPResource(
                            uri=f"{URI_PREFIX}{name}{m.path}",
                            name=f"{name}:{m.path}",
                            description=m.description,
                            mime_type="text/plain",
                            size=m.size,
                        )
                    )
        return out

    async def list_resources(self) -> list[MCPResource]:
        return [*await super().list_resources(), *self._all_resources()]

    async def _handle_list_resources(
        self, ctx: Any, params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        items = sorted(self._all_resources(), key=lambda r: str(r.uri))
        start = 0
        if params is not None and params.cursor:
            try:
                after = decode_cursor(params.cursor)
            except InvalidInputError as exc:
                raise ValueError(exc.message) from None
            start = next((i for i, r in enumerate(items) if str(r.uri) > after), len(items))
        page = items[start : start + PAGE_SIZE]
        more = start + PAGE_SIZE < len(items)
        return ListResourcesResult(
            resources=page, next_cursor=encode_cursor(str(page[-1].uri)) if more else None
        )


def build_server(
    stores: Sequence[ServedStore],
    *,
    scope: str = "main",
    session: str | None = None,
    actor: str | None = None,
    review: bool = False,
    reviewer: bool = False,
    caller: Caller | None = None,
) -> GitmemMCPServer:
    """An MCP server exposing ``stores`` (each in its own scope, else ``scope``); writes are tagged
    with ``session`` and ``actor`` (``review``: as the session's proposal; ``reviewer``: with the
    proposal-review tools). ``caller``: who asks (a token's, from ``gitmem serve``; default: the
    local actor), passed to every library call, which decides access and review with it.
    A bad session or actor is refused here, before anything is served."""
    if not stores:
        raise InvalidInputError("serve at least one store")
    if review and reviewer:
        raise InvalidInputError("a server in review mode cannot review proposals: use --review or --reviewer")
    validate_scope(scope)
    session = validate_session(session) or new_id("sesn")
    if actor is not None:
        validate_actor(actor)
    if caller is None:
        caller = dataclasses.replace(Caller.local_actor(actor, session), review=review)
    else:
        caller = dataclasses.replace(caller, session=session)
        review = review or caller.review
    who_asks = caller

    by_name = {s.name: s for s in stores}
    by_id = {s.store.id: s for s in stores}  # every served store answers to its id too
    writable = [s.name for s in stores if not s.read_only]
    lock = threading.Lock()  # MCPServer runs sync tools in worker threads

    def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with lock:
            try:
                return fn(*args, **kwargs)
            except GitmemError as exc:
                raise ToolError(f"{exc.type_name}: {exc.message}") from None

    def served(name: str) -> ServedStore:
        found = by_name.get(name) or by_id.get(name)
        if found is None:
            raise ToolError(f"not_found: store {name!r} is not served here; use one of {', '.join(by_name)}")
        return found

    def scope_of(name: str) -> str:
        return served(name).scope or scope

    def rw(name: str) -> Store:
        found = by_name.get(name) or by_id.get(name)
        if found is not None and found.read_only:
            raise ToolError(f"forbidden: store {name!r} is served read-only")
        return served(name).store

    def kw(name: str) -> dict[str, Any]:
        return {"actor": actor, "session": session, "scope": scope_of(name), "caller": who_asks}

    names = list(by_name)
    StoreArg = Annotated[str, Field(description="Store name.", json_schema_extra={"enum": names})]
    WStoreArg = Annotated[
        str, Field(description="Store name (read-write).", json_schema_extra={"enum": writable})
    ]
    PathArg = Annotated[str, Field(description="Memory path, starting with '/' (e.g. /notes/todo.md).")]
    ShaArg = Annotated[
        str | None,
        Field(description="Only if the memory's current content SHA-256 is this (optimistic lock)."),
    ]
    server = GitmemMCPServer(
        by_name,
        scope,
        session,
        call,
        name="gitmem",
        version="0.1.0",
        log_level="WARNING",
        instructions=instructions(stores, scope, session),
    )

    # ---------------------------------------------------------------- read tools (every store)
    def list_memories(
        store: StoreArg,
        prefix: Annotated[str, Field(description="A directory ending in '/', or '/' for all.")] = "/",
        depth: Annotated[
            int, Field(description="0: the whole subtree; 1: children, subdirectories rolled up.")
        ] = 0,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE, description="Entries per page.")] = PAGE_SIZE,
        cursor: Annotated[str | None, Field(description="next_cursor of the previous page.")] = None,
    ) -> MemoryPage:
        """List memories under a prefix, a page at a time (total says how many there are)."""
        s = served(store).store
        after = call(decode_cursor, cursor) if cursor else None
        items = call(lambda: s.list(prefix, scope=scope_of(store), depth=depth))
        rest = [m for m in items if after is None or m.path > after]
        page = _fit(rest, limit)
        return MemoryPage(
            store=store,
            scope=scope_of(store),
            prefix=prefix,
            total=len(items),
            memories=[
                MemoryEntry(
                    path=m.path, size=m.size, description=m.description, content_sha256=m.content_sha256
                )
                for m in page
                if isinstance(m, Memory)
            ],
            prefixes=[
                PrefixEntry(prefix=m.path, memories=m.memories) for m in page if not isinstance(m, Memory)
            ],
            next_cursor=encode_cursor(page[-1].path) if len(rest) > len(page) else None,
        )

    def read_memory(
        store: StoreArg,
        path: PathArg,
        version: Annotated[str | None, Field(description="An older version id (memver_...).")] = None,
    ) -> MemoryContent:
        """Read a memory's content (at its head, or at an older version id)."""
        s = served(store).store
        m = call(lambda: s.read(path, scope=scope_of(store), version=version, caller=who_asks))
        return MemoryContent(
            path=m.path,
            content=m.content or "",
            description=m.description,
            content_sha256=m.content_sha256,
            version=m.version_id,
            size=m.size,
        )

    def memory_history(
        store: StoreArg,
        path: Annotated[str | None, Field(description="One memory's path; omit for the whole scope.")] = None,
        limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = 20,
    ) -> History:
        """Versions, newest first: of one memory (across renames) or of the whole scope."""
        s = served(store).store
        found = call(lambda: s.versions(path, scope=scope_of(store), limit=limit))
        return History(versions=[_version_dict(v) for v in found])

    def search_memories(
        store: StoreArg,
        query: Annotated[
            str,
            Field(
                description='Words or a question (ranked by relevance); "a phrase" and a AND b must match.'
            ),
        ],
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        prefix: Annotated[str | None, Field(description="Only memories under this directory.")] = None,
        mode: Annotated[
            Literal["lexical", "semantic", "hybrid", "auto"],
            Field(
                description="lexical (words), semantic (meaning), hybrid (both) or auto; `mode` in the answer says which answered."
            ),
        ] = "lexical",
    ) -> SearchResults:
        """Search paths, descriptions and contents; the most relevant memories first."""
        s = served(store).store
        hits = call(
            lambda: s.search(query, scope=scope_of(store), limit=limit, path_prefix=prefix, mode=mode)
        )
        return SearchResults(
            mode=hits.mode,
            query=query,
            hits=[
                SearchHitResult(path=h.path, description=h.description, score=h.score, snippet=h.snippet)
                for h in hits
            ],
        )

    for tool in (list_memories, read_memory, memory_history, search_memories):
        server.add_tool(tool, annotations=_READ_ONLY, structured_output=True)

    # ---------------------------------------------------------------- write tools (read-write stores only)
    if writable:

        def write_memory(
            store: WStoreArg,
            path: PathArg,
            content: str,
            description: str | None = None,
            if_sha256: ShaArg = None,
        ) -> VersionResult:
            """Create or replace a memory with the whole new content. Writing the same content is a no-op."""
            s = rw(store)
            return _version_dict(
                call(
                    lambda: s.write(path, content, description=description, if_sha256=if_sha256, **kw(store))
                )
            )

        def create_memory(
            store: WStoreArg, path: PathArg, content: str, description: str | None = None
        ) -> VersionResult:
            """Create a new memory; fails if the path (or an overlapping one) exists."""
            s = rw(store)
            return _version_dict(call(lambda: s.create(path, content, description=description, **kw(store))))

        def edit_memory(
            store: WStoreArg,
            path: PathArg,
            old_str: Annotated[
                str | None, Field(description="str_replace: the text to replace (unique).")
            ] = None,
            new_str: Annotated[str | None, Field(description="str_replace: its replacement.")] = None,
            insert_line: Annotated[
                int | None, Field(description="insert: after this line (0 = top).")
            ] = None,
            insert_text: Annotated[str | None, Field(description="insert: the text to insert.")] = None,
            if_sha256: ShaArg = None,
        ) -> VersionResult:
            """Edit a memory: give old_str (+ new_str) to replace one unique occurrence, or
            insert_line + insert_text to insert after a line."""
            s = rw(store)
            if (old_str is None) == (insert_line is None):
                raise ToolError("invalid_input: give either old_str (str_replace) or insert_line (insert)")
            if old_str is not None:
                new = new_str or ""
                v = call(lambda: s.str_replace(path, old_str, new, if_sha256=if_sha256, **kw(store)))
            else:
                assert insert_line is not None
                text = insert_text or ""
                v = call(lambda: s.insert(path, insert_line, text, if_sha256=if_sha256, **kw(store)))
            return _version_dict(v)

        def delete_memory(store: WStoreArg, path: PathArg, if_sha256: ShaArg = None) -> VersionResult:
            """Delete a memory (its versions stay in the history)."""
            s = rw(store)
            return _version_dict(call(lambda: s.delete(path, if_sha256=if_sha256, **kw(store))))

        def rename_memory(
            store: WStoreArg,
            path: PathArg,
            new_path: Annotated[str, Field(description="Where the memory moves to (must be free).")],
            if_sha256: ShaArg = None,
        ) -> VersionResult:
            """Move a memory to a new path, keeping its identity and history; never overwrites."""
            s = rw(store)
            return _version_dict(call(lambda: s.rename(path, new_path, if_sha256=if_sha256, **kw(store))))

        server.add_tool(write_memory, annotations=_WRITE, structured_output=True)
        server.add_tool(create_memory, annotations=_WRITE, structured_output=True)
        server.add_tool(edit_memory, annotations=_WRITE, structured_output=True)
        server.add_tool(delete_memory, annotations=_DESTRUCTIVE, structured_output=True)
        server.add_tool(rename_memory, annotations=_WRITE, structured_output=True)

    if reviewer:
        from gitmem.integrations.mcp_review import add_review_tools

        who = actor or f"session:{session}"
        marks = {"read": _READ_ONLY, "write": _WRITE, "destructive": _DESTRUCTIVE}
        add_review_tools(
            server, lambda n: served(n).store, rw, call, StoreArg, WStoreArg, who, marks, caller=who_asks
        )

    # ---------------------------------------------------------------- resources
    def memory_resource(store: str, path: str) -> str:
        found = by_name.get(store) or by_id.get(store)  # its id too, as a tool's store argument
        if found is None:
            raise ResourceNotFoundError(f"store {store!r} is not served here")
        with lock:
            try:
                return found.store.read("/" + path, scope=scope_of(store), caller=who_asks).content or ""
            except GitmemError as exc:
                raise ResourceNotFoundError(f"{exc.type_name}: {exc.message}") from None

    server.resource(
        URI_PREFIX + "{store}/{+path}",
        name="memory",
        description="A memory's content",
        mime_type="text/plain",
    )(memory_resource)
    return server


def serve(
    specs: list[str],
    *,
    home: str | Path | None = None,
    scope: str = "main",
    session: str | None = None,
    actor: str | None = None,
    instructions: dict[str, str] | None = None,
    review: bool = False,
    reviewer: bool = False,
) -> ServeSummary:
    """Open the stores named by ``specs`` (``NAME[@SCOPE][:ro|:rw]``) and serve them over stdio until EOF."""
    validate_scope(scope)
    parsed = [parse_store_spec(spec) for spec in specs]
    notes = dict(instructions or {})
    unknown = sorted(set(notes) - {name for name, _, _ in parsed})
    if unknown:
        raise InvalidInputError(f"--instructions names {', '.join(unknown)}, which is not a served store")
    stores = []
    opened_all = [(open_store(name, home), name, own_scope, ro) for name, own_scope, ro in parsed]
    chosen = labels([(o.id, o.name) for o, _n, _s, _r in opened_all])
    for label, (opened, name, own_scope, read_only) in zip(chosen, opened_all, strict=True):
        stores.append(ServedStore(label, opened, read_only, own_scope, notes.get(name)))
    server = build_server(stores, scope=scope, session=session, actor=actor, review=review, reviewer=reviewer)
    server.run("stdio")
    return ServeSummary(server.session, scope, [s.name for s in stores])
