"""A gitmem backend for Claude's client-side memory tool (``memory_20250818``).

``GitmemMemoryTool(store, scope="main", session=None, actor=None)`` subclasses the Anthropic SDK's
``BetaAbstractMemoryTool``; pass it in ``tools=[...]`` of ``client.beta.messages.tool_runner``.
``/memories/<p>`` is the memory ``/<p>`` in ``scope``; directories are the path prefixes of memories.
Every change is a gitmem version tagged with ``session`` (a new ``sesn_<ulid>`` when none is given).
``GitmemAsyncMemoryTool`` is the same on ``BetaAsyncAbstractMemoryTool``.

Result and error strings are those of the SDK's reference ``BetaLocalFilesystemMemoryTool``
(anthropic 2.x), and the conformance test runs one command sequence through both. Documented
differences (everything else is identical):

1. Directory sizes in ``view`` are the sum of the sizes of the memories under the directory (the
   filesystem shows the directory inode's size, e.g. ``4.0K``); an empty ``/memories`` is ``0B``.
2. Directories exist only while they hold a memory: deleting or renaming the last memory of a
   directory leaves no empty directory behind, so later ``view`` listings omit it.
3. ``..`` segments are refused even when they stay inside ``/memories`` (``/memories/a/../b``:
   ``Path ... contains '..' segments, which are not allowed``); ones that escape get the SDK's
   ``Path ... would escape /memories directory``. Percent-encoded traversal (``%2e%2e%2f``) is
   refused with that same message (the SDK treats it as a literal file name).
4. A path must be ``/memories`` or start with ``/memories/`` (the SDK maps ``/memoriesX`` to ``X``).
5. Paths must follow gitmem's rules (NFC, no control characters, <= 1024 bytes, nothing under
   ``/.gitmem/``): ``Invalid path ...: <rule>``. Empty and ``.`` segments are dropped, as a
   filesystem does. Content must obey the store's limits: ``Error: <limit message>``.
6. Where the SDK lets an ``OSError`` escape (create or rename below a *file*, moving a directory
   into itself), gitmem raises ``ToolError`` with a message saying so.
7. ``str_replace`` without ``new_str`` (``None``) deletes ``old_str``, as the API docs say (the
   SDK would fail with a TypeError).
8. Deleting or renaming a directory writes one version per memory, all moved in one atomic ref
   update; ``clear_all_memory`` deletes every memory of the scope the same way (history is kept).

The search extension: ``tool.search_tool()`` is a ``memory_search`` client tool on the same store and
scope, by words or by meaning (:mod:`gitmem.integrations.memory_search`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from anthropic.lib.tools import BetaAsyncFunctionTool, BetaFunctionTool
from anthropic.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaCacheControlEphemeralParam,
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)
from anyio.to_thread import run_sync

from gitmem.errors import GitmemError, NotFoundError, PreconditionFailedError
from gitmem.ids import new_id
from gitmem.integrations import memory_search
from gitmem.integrations.memory_paths import (
    _EDIT_ATTEMPTS,
    MAX_LINES,
    ROOT,
    T,
    _numbered,
    _split_lines_keeping_cr,
    format_size,
    to_store_path,
)
from gitmem.model.caller import Caller
from gitmem.model.versions import Version
from gitmem.store import BatchOp, Memory, Store

__all__ = ["GitmemAsyncMemoryTool", "GitmemMemoryTool", "MemoryBackend"]


@dataclass
class _Node:
    """A directory of a view listing: children by name, and the bytes of all memories below."""

    size: int = 0
    children: dict[str, _Node | int] = field(default_factory=dict)


class MemoryBackend:
    """The memory tool's commands on one scope of a store; shared by the sync and async tools.

    Calls are serialised by a lock, so one backend may serve a thread pool (the async tool).
    ``versions`` collects every version this backend wrote, oldest first.
    """

    def __init__(
        self,
        store: Store,
        scope: str = "main",
        session: str | None = None,
        actor: str | None = None,
        *,
        caller: Caller | None = None,
    ):
        self.store = store
        self.scope = scope
        self.session = session if session is not None else new_id("sesn")
        self.actor = actor
        self.caller = caller  # who asks: every read and write goes through the engine's access checks
        self.versions: list[Version] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ helpers
    def locked(self, fn: Callable[[], T]) -> T:
        with self._lock:
            return fn()

    def _tip(self) -> str | None:
        """The commit this backend's paths are looked up in: the scope's head, with a review-mode
        caller's own open proposal on top (what it proposed is what it reads back, as
        :meth:`gitmem.Store.read` with that caller shows it)."""
        proposer = self.caller.owner if self.caller is not None and self.caller.review else None
        return self.store.tip(self.scope, proposer=proposer, caller=self.caller)

    def _kind(self, store_path: str) -> str | None:
        """``dir``, ``file``, or None when nothing is at ``store_path``."""
        if store_path == "/":
            return "dir"
        found = self.store.file_at(self._tip(), store_path)
        return found[0] if found is not None else None

    def _file_ancestor(self, store_path: str) -> str | None:
        """The first ancestor of ``store_path`` that is a file, if any."""
        parts = store_path[1:].split("/")
        for i in range(1, len(parts)):
            ancestor = "/" + "/".join(parts[:i])
            if self._kind(ancestor) == "file":
                return ancestor
        return None

    def _memories_under(self, store_path: str) -> list[Memory]:
        prefix = "/" if store_path == "/" else store_path + "/"
        if self.caller is not None and self.caller.review:
            # the listing (the scope's index) knows nothing of proposals: walk the proposal's tip
            paths = sorted(
                p for p in self.store.files(self._tip()) if p.startswith(prefix) and self._shown(p)
            )
            out: list[Memory] = []
            for p in paths:
                try:
                    out.append(self.store.read(p, scope=self.scope, caller=self.caller))
                except NotFoundError:
                    continue  # deleted in the scope since the proposal began: gone for the reader too
            return out
        found = self.store.list(prefix, scope=self.scope, caller=self.caller)
        return [m for m in found if isinstance(m, Memory) and self._shown(m.path)]

    def _shown(self, store_path: str) -> bool:
        """Whether a listing shows ``store_path`` (a subclass may hide some: the dream's tools)."""
        return True

    def _record(self, version: Version | None) -> None:
        if version is not None:
            self.versions.append(version)

    def _batch(self, ops: list[BatchOp]) -> None:
        result = self.store.batch(
            ops, scope=self.scope, actor=self.actor, session=self.session, caller=self.caller
        )
        self.versions.extend(result.versions)

    def _rewrite(self, path: str, store_path: str, edit: Callable[[str], tuple[str, str]]) -> str:
        """Read-modify-write with compare-and-swap: ``edit(content) -> (new content, result)``."""
        kind = self._kind(store_path)
        if kind is None:
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        if kind != "file":
            raise ToolError(f"The path {path} is not a file.")
        for _ in range(_EDIT_ATTEMPTS):
            try:
                memory = self.store.read(store_path, scope=self.scope, caller=self.caller)
            except NotFoundError:
                break
            new_content, result = edit(memory.content or "")
            try:
                self._record(
                    self.store.write(
                        store_path,
                        new_content,
                        scope=self.scope,
                        if_sha256=memory.content_sha256,
                        actor=self.actor,
                        session=self.session,
                        caller=self.caller,
                    )
                )
            except PreconditionFailedError:
                continue  # changed under us: edit the new content
            except GitmemError as exc:
                raise ToolError(f"Error: {exc.message}") from None
            return result
        raise ToolError(f"The file {path} no longer exists (may have been deleted or renamed concurrently).")

    # ------------------------------------------------------------------ commands
    def view(self, path: str, view_range: list[int] | None = None) -> str:
        store_path = to_store_path(path)
        kind = self._kind(store_path)
        if kind is None:
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        if kind == "dir":
            return self._view_dir(path, store_path)
        content = self.store.read(store_path, scope=self.scope, caller=self.caller).content or ""
        lines = content.split("\n")
        if len(lines) > MAX_LINES:
            raise ToolError(f"File {path} exceeds maximum line limit of 999,999 lines.")
        start = 1
        if view_range and len(view_range) == 2:
            first = max(1, view_range[0]) - 1
            end = len(lines) if view_range[1] == -1 else view_range[1]
            lines = lines[first:end]
            start = first + 1
        return f"Here's the content of {path} with line numbers:\n" + _numbered(lines, start)

    def _view_dir(self, path: str, store_path: str) -> str:
        root = _Node()
        base = 0 if store_path == "/" else len(store_path)
        for memory in self._memories_under(store_path):
            root.size += memory.size
            node = root
            parts = memory.path[base + 1 :].split("/")
            for name in parts[:-1]:
                child = node.children.setdefault(name, _Node())
                assert isinstance(child, _Node)
                child.size += memory.size
                node = child
            node.children[parts[-1]] = memory.size
        out = [f"{format_size(root.size)}\t{path}"]

        def walk(node: _Node, rel: str, depth: int) -> None:
            for name in sorted(node.children):
                if name.startswith("."):
                    continue
                item = node.children[name]
                item_rel = f"{rel}/{name}" if rel else name
                if isinstance(item, _Node):
                    out.append(f"{format_size(item.size)}\t{path}/{item_rel}/")
                    if depth < 2:
                        walk(item, item_rel, depth + 1)
                else:
                    out.append(f"{format_size(item)}\t{path}/{item_rel}")

        walk(root, "", 1)
        header = f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:"
        return f"{header}\n" + "\n".join(out)

    def create(self, path: str, file_text: str) -> str:
        store_path = to_store_path(path)
        kind = self._kind(store_path)
        if kind is not None:
            raise ToolError(f"File {path} already exists")
        blocker = self._file_ancestor(store_path)
        if blocker is not None:
            raise ToolError(f"Cannot create {path}: {ROOT}{blocker} is a file, not a directory")
        try:
            self._record(
                self.store.create(
                    store_path,
                    file_text,
                    scope=self.scope,
                    actor=self.actor,
                    session=self.session,
                    caller=self.caller,
                )
            )
        except GitmemError as exc:
            if exc.type_name == "path_conflict":
                raise ToolError(f"File {path} already exists") from None
            raise ToolError(f"Error: {exc.message}") from None
        return f"File created successfully at: {path}"

    def str_replace(self, path: str, old_str: str, new_str: str | None) -> str:
        store_path = to_store_path(path)
        new = new_str if new_str is not None else ""
        changed_line = [0]

        def edit(content: str) -> tuple[str, str]:
            count = content.count(old_str)
            if count == 0:
                raise ToolError(
                    f"No replacement was performed, old_str `{old_str}` did not appear verbatim in {path}."
                )
            if count > 1:
                lines, start = [], 0
                while (pos := content.find(old_str, start)) != -1:
                    lines.append(content[:pos].count("\n") + 1)
                    start = pos + 1
                raise ToolError(
                    f"No replacement was performed. Multiple occurrences of old_str `{old_str}` in lines: "
                    f"{', '.join(map(str, lines))}. Please ensure it is unique"
                )
            changed_line[0] = content[: content.find(old_str)].count("\n")
            new_content = content.replace(old_str, new)
            new_lines = new_content.split("\n")
            first = max(0, changed_line[0] - 2)
            last = min(len(new_lines), changed_line[0] + 3)
            snippet = _numbered(new_lines[first:last], first + 1)
            result = (
                "The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                + snippet
            )
            return new_content, result

        return self._rewrite(path, store_path, edit)

    def insert(self, path: str, insert_line: int, insert_text: str) -> str:
        store_path = to_store_path(path)

        def edit(content: str) -> tuple[str, str]:
            lines = _split_lines_keeping_cr(content)
            if insert_line < 0 or insert_line > len(lines):
                raise ToolError(
                    f"Invalid `insert_line` parameter: {insert_line}. "
                    f"It should be within the range [0, {len(lines)}]."
                )
            lines.insert(insert_line, insert_text.rstrip("\n"))
            new_content = "\n".join(lines)
            if not new_content.endswith("\n"):
                new_content += "\n"
            return new_content, f"The file {path} has been edited."

        return self._rewrite(path, store_path, edit)

    def delete(self, path: str) -> str:
        store_path = to_store_path(path)
        if store_path == "/":
            raise ToolError("Cannot delete the /memories directory itself")
        kind = self._kind(store_path)
        try:
            if kind == "file":
                self._record(
                    self.store.delete(
                        store_path,
                        scope=self.scope,
                        actor=self.actor,
                        session=self.session,
                        caller=self.caller,
                    )
                )
            elif kind == "dir":
                ops = [
                    BatchOp("delete", m.path, if_sha256=m.content_sha256)
                    for m in self._memories_under(store_path)
                ]
                self._batch(ops)
            else:
                raise ToolError(f"The path {path} does not exist")
        except NotFoundError:
            raise ToolError(f"The path {path} does not exist") from None
        except GitmemError as exc:
            raise ToolError(f"Error: {exc.message}") from None
        return f"Successfully deleted {path}"

    def rename(self, old_path: str, new_path: str) -> str:
        old = to_store_path(old_path)
        new = to_store_path(new_path)
        if old == "/":
            raise ToolError("Cannot rename the /memories directory itself")
        if self._kind(new) is not None:
            raise ToolError(f"The destination {new_path} already exists")
        kind = self._kind(old)
        if kind is None:
            raise ToolError(f"The path {old_path} does not exist")
        blocker = self._file_ancestor(new)
        if blocker is not None:
            raise ToolError(
                f"Cannot rename {old_path} to {new_path}: {ROOT}{blocker} is a file, not a directory"
            )
        try:
            if kind == "file":
                self._record(
                    self.store.rename(
                        old, new, scope=self.scope, actor=self.actor, session=self.session, caller=self.caller
                    )
                )
            else:
                if new.startswith(old + "/"):
                    raise ToolError(f"Cannot move the directory {old_path} into itself ({new_path})")
                ops = [
                    BatchOp("rename", m.path, new_path=new + m.path[len(old) :], if_sha256=m.content_sha256)
                    for m in self._memories_under(old)
                ]
                self._batch(ops)
        except NotFoundError:
            raise ToolError(f"The path {old_path} does not exist") from None
        except GitmemError as exc:
            raise ToolError(f"Error: {exc.message}") from None
        return f"Successfully renamed {old_path} to {new_path}"

    def clear_all_memory(self) -> str:
        ops = [BatchOp("delete", m.path, if_sha256=m.content_sha256) for m in self._memories_under("/")]
        try:
            self._batch(ops)
        except GitmemError as exc:
            raise ToolError(f"Error: {exc.message}") from None
        return "All memory cleared"


class _Backed:
    """What both tool classes share: a :class:`MemoryBackend` on one store, scope and session."""

    backend: MemoryBackend

    def __init__(
        self,
        store: Store,
        scope: str = "main",
        session: str | None = None,
        actor: str | None = None,
        *,
        cache_control: BetaCacheControlEphemeralParam | None = None,
    ) -> None:
        super().__init__(cache_control=cache_control)  # type: ignore[call-arg]
        self.backend = MemoryBackend(store, scope, session, actor)

    @property
    def session(self) -> str:
        return self.backend.session

    @property
    def versions(self) -> list[Version]:
        """The versions this tool wrote, oldest first."""
        return self.backend.versions


class GitmemMemoryTool(_Backed, BetaAbstractMemoryTool):
    """Claude's memory tool on a gitmem store: ``tools=[GitmemMemoryTool(store, session=...)]``."""

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return self.backend.locked(lambda: self.backend.view(command.path, command.view_range))

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return self.backend.locked(lambda: self.backend.create(command.path, command.file_text))

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        b = self.backend
        return b.locked(lambda: b.str_replace(command.path, command.old_str, command.new_str))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        b = self.backend
        return b.locked(lambda: b.insert(command.path, command.insert_line, command.insert_text))

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return self.backend.locked(lambda: self.backend.delete(command.path))

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return self.backend.locked(lambda: self.backend.rename(command.old_path, command.new_path))

    def clear_all_memory(self) -> str:
        return self.backend.locked(self.backend.clear_all_memory)

    def search_tool(self, mode: str = "auto") -> BetaFunctionTool[Any]:
        """The search extension, a ``memory_search`` tool on the same store (gitmem.integrations.memory_search)."""
        return memory_search.search_tool(self.backend, mode)


class GitmemAsyncMemoryTool(_Backed, BetaAsyncAbstractMemoryTool):
    """The async variant: each command runs in a worker thread, one at a time per tool."""

    async def _run(self, fn: Callable[[], str]) -> str:
        return await run_sync(self.backend.locked, fn)

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await self._run(lambda: self.backend.view(command.path, command.view_range))

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await self._run(lambda: self.backend.create(command.path, command.file_text))

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await self._run(
            lambda: self.backend.str_replace(command.path, command.old_str, command.new_str)
        )

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await self._run(
            lambda: self.backend.insert(command.path, command.insert_line, command.insert_text)
        )

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await self._run(lambda: self.backend.delete(command.path))

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await self._run(lambda: self.backend.rename(command.old_path, command.new_path))

    async def clear_all_memory(self) -> str:
        return await self._run(self.backend.clear_all_memory)

    def search_tool(self, mode: str = "auto") -> BetaAsyncFunctionTool[Any]:
        """The search extension for an async runner (gitmem.integrations.memory_search)."""
        return memory_search.async_search_tool(self.backend, mode)
