"""An MCP server for gitmem stores, over stdio (``gitmem mcp``), built on the ``mcp`` package (2.x).

Tools: ``list_memories``, ``read_memory``, ``memory_history`` and ``search_memories`` for every
served store; ``write_memory``, ``create_memory``, ``edit_memory``
(str_replace or insert), ``delete_memory`` and ``rename_memory`` only when at least one store is
served read-write, and then only for those stores (a server of read-only stores has no write tools).
Resources: every memory as ``gitmem://STORE/PATH`` (``gitmem://notes/prefs/editor.md``), listed live.

Every write is a version tagged with the server's session id (``--session``, else a new
``sesn_<ulid>``: one MCP connection is one session). Gitmem errors come back as tool errors
(``is_error``), never as a crash of the server.

``review=True`` (``gitmem mcp --review``): every write lands as the session's proposal and reads
show it on top of the scope (docs/review.md). ``reviewer=True`` (``--reviewer``) adds the tools of
a reviewing agent: ``list_proposals``, ``show_proposal``, ``diff_proposal``, ``accept_proposal`` and
``reject_proposal`` (decisions are recorded under the server's actor).
"""

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from mcp.types import Resource as MCPResource
from mcp.types import ToolAnnotations
from pydantic import Field

from gitmem.engine.memories import Memory
from gitmem.errors import GitmemError, InvalidInputError
from gitmem.ids import new_id
from gitmem.model.versions import Version, validate_session
from gitmem.store import Store, open_store

__all__ = ["ServedStore", "build_server", "parse_store_spec", "serve"]

T = TypeVar("T")
URI_PREFIX = "gitmem://"
_READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
_WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False)
_DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True)


@dataclass(frozen=True)
class ServedStore:
    """A store the server exposes, and whether it may be written through it."""

    name: str
    store: Store
    read_only: bool = False


@dataclass(frozen=True)
class ServeSummary:
    """What a finished ``gitmem mcp`` run served (printed with ``--json`` when the client hangs up)."""

    session: str
    scope: str
    stores: list[str]


def parse_store_spec(spec: str) -> tuple[str, bool]:
    """``NAME``, ``NAME:rw`` or ``NAME:ro`` -> (name, read_only)."""
    name, sep, mode = spec.rpartition(":")
    if not sep:
        return spec, False
    if mode not in ("ro", "rw"):
        raise InvalidInputError(f"invalid store {spec!r}: use NAME, NAME:rw or NAME:ro")
    return name, mode == "ro"


def _version_dict(v: Version | None) -> dict[str, Any]:
    if v is None:
        return {"changed": False}
    return {
        "changed": True,
        "version": v.id,
        "memory_id": v.memory_id,
        "operation": v.operation,
        "path": v.path,
        "previous_path": v.previous_path,
        "content_sha256": v.content_sha256,
        "size": v.size,
        "session": v.session,
        "actor": v.actor,
        "created_at": v.created_at.isoformat().replace("+00:00", "Z"),
    }


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=1)


class GitmemMCPServer(MCPServer[Any]):
    """MCPServer whose resource list is the served stores' memories at the time of the request."""

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

    async def list_resources(self) -> list[MCPResource]:
        out = await super().list_resources()
        for name, served in self._gitmem_stores.items():
            for m in self._gitmem_call(served.store.list, "/", scope=self._gitmem_scope):
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


def build_server(
    stores: list[ServedStore],
    *,
    scope: str = "main",
    session: str | None = None,
    actor: str | None = None,
    review: bool = False,
    reviewer: bool = False,
) -> GitmemMCPServer:
    """An MCP server exposing ``stores`` (in ``scope``); writes are tagged with ``session``
    (``review``: as the session's proposal; ``reviewer``: with the proposal-review tools)."""
    if not stores:
        raise InvalidInputError("serve at least one store")
    if review and reviewer:
        raise InvalidInputError("a server in review mode cannot review proposals: use --review or --reviewer")
    session = validate_session(session) or new_id("sesn")
    from gitmem.engine import proposals

    by_name = {s.name: s for s in stores}
    writable = [s.name for s in stores if not s.read_only]
    lock = threading.Lock()  # MCPServer runs sync tools in worker threads; a Store is not thread-safe

    def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with lock, proposals.reviewing(review, owner=session if review else None):
            try:
                return fn(*args, **kwargs)
            except GitmemError as exc:
                raise ToolError(f"{exc.type_name}: {exc.message}") from None

    def readable(name: str) -> Store:
        if name not in by_name:
            raise ToolError(f"not_found: store {name!r} is not served here; use one of {', '.join(by_name)}")
        return by_name[name].store

    def rw(name: str) -> Store:
        if name in by_name and by_name[name].read_only:
            raise ToolError(f"forbidden: store {name!r} is served read-only")
        return readable(name)

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
    kw: dict[str, Any] = {"actor": actor, "session": session, "scope": scope}
    store_list = ", ".join(f"{s.name} ({'read-only' if s.read_only else 'read-write'})" for s in stores)
    server = GitmemMCPServer(
        by_name,
        scope,
        session,
        call,
        name="gitmem",
        version="0.1.0",
        log_level="WARNING",
        instructions=f"gitmem memory stores: {store_list}; scope {scope!r}; session {session}. "
        "Every change is a version: memory_history shows them.",
    )

    # ---------------------------------------------------------------- read tools (every store)
    def list_memories(store: StoreArg, prefix: str = "/", depth: int = 0) -> str:
        """List memories under a prefix ('/' or a directory ending in '/'); depth 1 rolls up subdirectories."""
        s = readable(store)
        items = call(lambda: s.list(prefix, scope=scope, depth=depth))
        rows = [
            {"path": m.path, "size": m.size, "description": m.description, "content_sha256": m.content_sha256}
            if isinstance(m, Memory)
            else {"prefix": m.path, "memories": m.memories}
            for m in items
        ]
        return _text(rows)

    def read_memory(store: StoreArg, path: PathArg, version: str | None = None) -> str:
        """Read a memory's content (at its head, or at an older version id)."""
        s = readable(store)
        memory = call(lambda: s.read(path, scope=scope, version=version))
        return memory.content or ""

    def memory_history(store: StoreArg, path: PathArg | None = None, limit: int = 20) -> str:
        """Versions, newest first: of one memory (across renames) or of the whole scope."""
        s = readable(store)
        found = call(lambda: s.versions(path, scope=scope, limit=limit))
        return _text([_version_dict(v) for v in found])

    server.add_tool(list_memories, annotations=_READ_ONLY, structured_output=False)
    server.add_tool(read_memory, annotations=_READ_ONLY, structured_output=False)
    server.add_tool(memory_history, annotations=_READ_ONLY, structured_output=False)

    def search_memories(store: StoreArg, query: str, limit: int = 10, prefix: str | None = None) -> str:
        """Full-text search over paths, descriptions and contents; best matches first."""
        s = readable(store)
        hits = call(lambda: s.search(query, scope=scope, limit=limit, path_prefix=prefix))
        return _text(
            [
                {"path": h.path, "description": h.description, "score": h.score, "snippet": h.snippet}
                for h in hits
            ]
        )

    server.add_tool(search_memories, annotations=_READ_ONLY, structured_output=False)

    # ---------------------------------------------------------------- write tools (read-write stores only)
    if writable:

        def write_memory(
            store: WStoreArg,
            path: PathArg,
            content: str,
            description: str | None = None,
            if_sha256: ShaArg = None,
        ) -> str:
            """Create or replace a memory with the whole new content. Writing the same content is a no-op."""
            s = rw(store)
            v = call(lambda: s.write(path, content, description=description, if_sha256=if_sha256, **kw))
            return _text(_version_dict(v))

        def create_memory(
            store: WStoreArg, path: PathArg, content: str, description: str | None = None
        ) -> str:
            """Create a new memory; fails if the path (or an overlapping one) exists."""
            s = rw(store)
            return _text(_version_dict(call(lambda: s.create(path, content, description=description, **kw))))

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
        ) -> str:
            """Edit a memory: give old_str (+ new_str) to replace one unique occurrence, or
            insert_line + insert_text to insert after a line."""
            s = rw(store)
            if (old_str is None) == (insert_line is None):
                raise ToolError("invalid_input: give either old_str (str_replace) or insert_line (insert)")
            if old_str is not None:
                new = new_str or ""
                v = call(lambda: s.str_replace(path, old_str, new, if_sha256=if_sha256, **kw))
            else:
                assert insert_line is not None
                text = insert_text or ""
                v = call(lambda: s.insert(path, insert_line, text, if_sha256=if_sha256, **kw))
            return _text(_version_dict(v))

        def delete_memory(store: WStoreArg, path: PathArg, if_sha256: ShaArg = None) -> str:
            """Delete a memory (its versions stay in the history)."""
            s = rw(store)
            return _text(_version_dict(call(lambda: s.delete(path, if_sha256=if_sha256, **kw))))

        def rename_memory(store: WStoreArg, old_path: PathArg, new_path: PathArg) -> str:
            """Move a memory to a new path, keeping its identity and history; never overwrites."""
            s = rw(store)
            return _text(_version_dict(call(lambda: s.rename(old_path, new_path, **kw))))

        server.add_tool(write_memory, annotations=_WRITE, structured_output=False)
        server.add_tool(create_memory, annotations=_WRITE, structured_output=False)
        server.add_tool(edit_memory, annotations=_WRITE, structured_output=False)
        server.add_tool(delete_memory, annotations=_DESTRUCTIVE, structured_output=False)
        server.add_tool(rename_memory, annotations=_WRITE, structured_output=False)

    if reviewer:
        _add_review_tools(server, readable, rw, call, StoreArg, WStoreArg, actor or f"session:{session}")

    # ---------------------------------------------------------------- resources
    def memory_resource(store: str, path: str) -> str:
        if store not in by_name:
            raise ResourceNotFoundError(f"store {store!r} is not served here")
        s = by_name[store].store
        with lock, proposals.reviewing(review, owner=session if review else None):
            try:
                return s.read("/" + path, scope=scope).content or ""
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
    review: bool = False,
    reviewer: bool = False,
) -> ServeSummary:
    """Open the stores named by ``specs`` (``NAME[:ro|:rw]``) and serve them over stdio until EOF."""
    from gitmem.model.paths import validate_scope

    validate_scope(scope)
    stores = []
    for spec in specs:
        name, read_only = parse_store_spec(spec)
        opened = open_store(name, home)
        stores.append(ServedStore(opened.name, opened, read_only))
    server = build_server(stores, scope=scope, session=session, actor=actor, review=review, reviewer=reviewer)
    server.run("stdio")
    return ServeSummary(server.session, scope, [s.name for s in stores])


def _add_review_tools(
    server: GitmemMCPServer,
    readable: Callable[[str], Store],
    rw: Callable[[str], Store],
    call: Callable[..., Any],
    StoreArg: Any,
    WStoreArg: Any,
    who: str,
) -> None:
    """The tools of a reviewing agent (docs/review.md)."""
    import dataclasses

    from gitmem.audit import review
    from gitmem.engine import proposals

    def plain(value: Any) -> Any:
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if hasattr(value, "isoformat"):
            return value.isoformat().replace("+00:00", "Z")
        return value

    IdArg = Annotated[str, Field(description="Proposal id (prop_...).")]
    PathsArg = Annotated[
        list[str] | None, Field(description="Only these paths (default: every undecided one).")
    ]

    def list_proposals(store: StoreArg, status: str | None = "open") -> str:
        """Proposals waiting for review (or with another status): who proposed, paths, conflicts."""
        s = readable(store)
        return _text(
            plain(
                call(lambda: [review.summary(s.core, p) for p in proposals.proposals(s.core, status=status)])
            )
        )

    def show_proposal(store: StoreArg, proposal: IdArg) -> str:
        """The versions a proposal holds, oldest first, and the decisions so far."""
        s = readable(store)
        p = call(lambda: proposals.get(s.core, proposal))
        return _text(
            plain(
                {
                    "proposal": call(review.summary, s.core, p),
                    "versions": call(proposals.versions, s.core, p.id),
                }
            )
        )

    def diff_proposal(store: StoreArg, proposal: IdArg) -> str:
        """Each changed path against the scope's current content (clean, conflict with a three-way
        diff, or same)."""
        s = readable(store)
        return _text(plain(call(review.diff, s.core, proposal)))

    def accept_proposal(store: WStoreArg, proposal: IdArg, paths: PathsArg = None, reason: str = "") -> str:
        """Publish a proposal (or some of its paths) onto the scope; refused on a conflict."""
        s = rw(store)
        done = call(lambda: review.accept(s.core, proposal, reviewer=who, paths=paths, reason=reason))
        return _text(plain({"status": done.proposal.status, "paths": done.paths, "versions": done.versions}))

    def reject_proposal(store: WStoreArg, proposal: IdArg, reason: str, paths: PathsArg = None) -> str:
        """Reject a proposal (or some of its paths), with the reason."""
        s = rw(store)
        p = call(lambda: review.reject(s.core, proposal, reviewer=who, reason=reason, paths=paths))
        return _text({"status": p.status})

    for tool in (list_proposals, show_proposal, diff_proposal):
        server.add_tool(tool, annotations=_READ_ONLY, structured_output=False)
    server.add_tool(accept_proposal, annotations=_WRITE, structured_output=False)
    server.add_tool(reject_proposal, annotations=_DESTRUCTIVE, structured_output=False)
