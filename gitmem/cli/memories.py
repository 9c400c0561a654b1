"""Memory commands: ``write``, ``create``, ``read``, ``ls``, ``edit``, ``rm``, ``mv``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gitmem.cli import common
from gitmem.errors import InvalidInputError
from gitmem.model.versions import Version
from gitmem.store import Memory, Prefix, Store

StoreArg = Annotated[str, typer.Argument(help="Store name, or a path to a bare store or a clone.")]
PathArg = Annotated[str, typer.Argument(help="Memory path, starting with / (e.g. /notes/todo.md).")]
TextArg = Annotated[
    str | None,
    typer.Argument(
        help="The content; '-' reads standard input (content starting with '-': after --, or --text)."
    ),
]
TextOpt = Annotated[str | None, typer.Option("--text", "-t", help="The content, even if it starts with '-'.")]
FileOpt = Annotated[Path | None, typer.Option("--file", "-f", help="Read the content from this file.")]
DescOpt = Annotated[
    str | None, typer.Option("--description", "-d", help="Set the description (front matter of the file).")
]


def register(app: typer.Typer) -> None:
    for name, fn in (
        ("write", write),
        ("create", create),
        ("read", read),
        ("ls", ls),
        ("edit", edit),
        ("rm", rm),
        ("mv", mv),
    ):
        app.command(name)(fn)


def content_bytes(text: str | None, file: Path | None, text_opt: str | None = None) -> bytes:
    """The content of a write, as bytes: TEXT (``-`` = stdin), ``--text`` or ``--file``; the library
    validates it."""
    if sum(x is not None for x in (text, file, text_opt)) > 1:
        raise InvalidInputError("give the content once: TEXT, '-', --text or --file")
    if text_opt is not None:
        return text_opt.encode("utf-8", "surrogateescape")
    if file is not None:
        try:
            return file.read_bytes()
        except OSError as exc:
            raise InvalidInputError(f"cannot read {file}: {exc.strerror}") from None
    if text is None:
        raise InvalidInputError("no content: give TEXT, '-' (standard input) or --file FILE")
    if text == "-":
        return sys.stdin.buffer.read()
    # surrogateescape keeps undecodable argv bytes as they were, so the library can refuse them.
    return text.encode("utf-8", "surrogateescape")


def render_version(version: Version | None) -> None:
    if version is None:
        typer.echo("unchanged (no new version)")
        return
    subject = version.operation
    if version.previous_path and version.previous_path != version.path:
        subject = f"renamed {version.previous_path} ->"
    typer.echo(f"{subject} {version.path}  {version.id}  {version.memory_id}")


def render_unchanged(version: Version) -> None:
    typer.echo(f"unchanged {version.path}  {version.id}  {version.memory_id} (no new version)")


def current_version(s: Store, path: str, scope: str) -> Version:
    """The version a memory is at now (what a write that changed nothing reports)."""
    memory = s.read(path, scope=scope)
    return s.version(memory.version_id)


def kept_description(s: Store, path: str, scope: str, data: bytes, description: str | None) -> str | None:
    """Rewriting a memory without --description keeps its description (unless the new content
    has front matter of its own); ``--description ''`` is how to drop it."""
    if description is not None:
        return description or None
    if data.startswith(b"---"):
        return None
    from gitmem.errors import NotFoundError

    try:
        return s.read(path, scope=scope).description
    except NotFoundError:
        return None


def write(
    store: StoreArg,
    path: PathArg,
    text: TextArg = None,
    text_opt: TextOpt = None,
    file: FileOpt = None,
    description: DescOpt = None,
    scope: common.ScopeOpt = "main",
    if_sha256: common.IfShaOpt = None,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Create or replace a memory (no new version when the content is unchanged).

    Without --description the memory keeps its description; --description '' drops it."""

    unchanged = False

    def fn(s: Store) -> Version:
        nonlocal unchanged
        data = content_bytes(text, file, text_opt)
        version = s.write(
            path,
            data,
            scope=scope,
            description=kept_description(s, path, scope, data, description),
            if_sha256=if_sha256,
            actor=common.actor(actor),
            session=common.session(session),
        )
        if version is None:  # nothing changed: report the version the memory is at (same shape)
            unchanged = True
            version = current_version(s, path, scope)
        return version

    def render(version: Version) -> None:
        render_unchanged(version) if unchanged else render_version(version)

    common.run(json, common.with_store(store, home, fn), render)


def create(
    store: StoreArg,
    path: PathArg,
    text: TextArg = None,
    text_opt: TextOpt = None,
    file: FileOpt = None,
    description: DescOpt = None,
    scope: common.ScopeOpt = "main",
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Create a memory; never overwrites (exit 4 naming the conflicting path)."""

    def fn(s: Store) -> Version:
        return s.create(
            path,
            content_bytes(text, file, text_opt),
            scope=scope,
            description=description,
            actor=common.actor(actor),
            session=common.session(session),
        )

    common.run(json, common.with_store(store, home, fn), render_version)


def read(
    store: StoreArg,
    path: PathArg,
    scope: common.ScopeOpt = "main",
    version: Annotated[str | None, typer.Option("--version", help="Read this version (memver_...).")] = None,
    at: common.AtOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Print a memory's exact content (no added newline); --json adds its metadata."""
    if common.want_json(json) or at is not None:

        def read_memory(s: Store) -> Any:
            if version is None:
                common.check_scope(s, scope)
            return s.read(path, scope=scope, version=version, at=at)

        if at is not None and not common.want_json(json):

            def render_at(memory: Any) -> None:
                sys.stdout.buffer.write((memory.content or "").encode("utf-8"))
                sys.stdout.buffer.flush()

            common.run(False, common.with_store(store, home, read_memory), render_at)
            return

        common.run(json, common.with_store(store, home, read_memory))
        return

    def fn(s: Store) -> bytes:
        # The same function as the fast path (gitmem.cli.fastread, used when typer is not needed).
        from gitmem.cli.fastread import content_bytes

        if version is None:
            common.check_scope(s, scope)
        return content_bytes(s, path, scope, version)

    def render(data: bytes) -> None:
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()

    common.run(False, common.with_store(store, home, fn), render)


def _ls_rows(items: list[Memory | Prefix]) -> list[list[str]]:
    rows = []
    for item in items:
        if isinstance(item, Prefix):
            rows.append([item.path, f"{item.memories} memories", "", ""])
        else:
            updated = common.to_jsonable(item.updated_at) if item.updated_at else ""
            rows.append([item.path, str(item.size), updated, item.description or ""])
    return rows


def ls(
    store: StoreArg,
    prefix: Annotated[str, typer.Argument(help="Only memories under this prefix (ends with /).")] = "/",
    scope: common.ScopeOpt = "main",
    depth: Annotated[int, typer.Option("--depth", help="0: whole subtree; 1: immediate children only.")] = 0,
    at: common.AtOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
    nl: common.NlOpt = False,
) -> None:
    """List memories: path, size, last update, description (directories rolled up with --depth 1)."""

    def render(items: list[Memory | Prefix]) -> None:
        common.print_table(["PATH", "SIZE", "UPDATED", "DESCRIPTION"], _ls_rows(items))

    def fn(s: Store) -> list[Memory | Prefix]:
        common.check_scope(s, scope)
        return s.list(prefix, scope=scope, depth=depth, at=at)

    common.run(json, common.with_store(store, home, fn), render, nl=nl)


def edit(
    store: StoreArg,
    path: PathArg,
    replace: Annotated[
        tuple[str, str] | None, typer.Option("--replace", help="OLD NEW: replace the one occurrence of OLD.")
    ] = None,
    insert: Annotated[
        tuple[int, str] | None, typer.Option("--insert", help="LINE TEXT: insert TEXT after LINE (0 = top).")
    ] = None,
    scope: common.ScopeOpt = "main",
    if_sha256: common.IfShaOpt = None,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Edit a memory in place: --replace OLD NEW (OLD must occur exactly once) or --insert LINE TEXT."""

    def fn(s: Store) -> Version | None:
        kw: dict[str, Any] = {
            "scope": scope,
            "if_sha256": if_sha256,
            "actor": common.actor(actor),
            "session": common.session(session),
        }
        if (replace is None) == (insert is None):
            raise InvalidInputError("give exactly one of --replace OLD NEW or --insert LINE TEXT")
        if replace is not None:
            version = s.str_replace(path, replace[0], replace[1], **kw)
        else:
            assert insert is not None
            version = s.insert(path, insert[0], insert[1], **kw)
        return version or current_version(s, path, scope)  # no change: the version it is at

    common.run(json, common.with_store(store, home, fn), render_version)


def rm(
    store: StoreArg,
    path: PathArg,
    scope: common.ScopeOpt = "main",
    if_sha256: common.IfShaOpt = None,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Delete a memory (its versions stay in history and can be restored)."""

    def fn(s: Store) -> Version:
        return s.delete(
            path, scope=scope, if_sha256=if_sha256, actor=common.actor(actor), session=common.session(session)
        )

    common.run(json, common.with_store(store, home, fn), render_version)


def mv(
    store: StoreArg,
    old: Annotated[str, typer.Argument(help="Current path.")],
    new: Annotated[str, typer.Argument(help="New path (must be free).")],
    scope: common.ScopeOpt = "main",
    if_sha256: common.IfShaOpt = None,
    actor: common.ActorOpt = None,
    session: common.SessionOpt = None,
    home: common.HomeOpt = None,
    json: common.JsonOpt = False,
) -> None:
    """Rename a memory, keeping its memory id; never overwrites."""

    def fn(s: Store) -> Version | None:
        return s.rename(
            old,
            new,
            scope=scope,
            if_sha256=if_sha256,
            actor=common.actor(actor),
            session=common.session(session),
        )

    common.run(json, common.with_store(store, home, fn), render_version)
