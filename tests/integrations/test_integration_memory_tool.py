"""Conformance of GitmemMemoryTool with the SDK's BetaLocalFilesystemMemoryTool, plus versions/trailers.

One long scripted sequence runs through both tools, called the way the SDK's tool runner calls them
(``tool.call(input)``, ToolError -> error result, anything else -> a crash). Results must be equal,
except at steps marked with the gitmem result expected instead (the differences documented in
``gitmem.integrations.anthropic_tool``); directory sizes in listings are compared as ``<dir>``.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("anthropic")

from anthropic.tools import (  # noqa: E402
    BetaAsyncLocalFilesystemMemoryTool,
    BetaLocalFilesystemMemoryTool,
    ToolError,
)

from gitmem.integrations.anthropic_tool import GitmemAsyncMemoryTool, GitmemMemoryTool  # noqa: E402
from gitmem.store import Store  # noqa: E402

LISTING = "Here're the files and directories up to 2 levels deep in "
SESSION = "sesn_conformance"

Result = tuple[str, Any]


def call(tool: Any, command: dict[str, Any] | str) -> Result:
    """Run one command like the SDK's tool runner: ("ok", text) | ("error", text) | ("crash", type)."""
    try:
        if command == "clear_all_memory":
            return ("ok", tool.clear_all_memory())
        assert isinstance(command, dict)
        return ("ok", tool.call(command))
    except ToolError as exc:
        return ("error", exc.content)
    except Exception as exc:  # the runner reports these as repr(exc)
        return ("crash", type(exc).__name__)


def normalise(result: Result) -> Result:
    """Directory sizes differ by design (filesystem inode size vs bytes of the memories below)."""
    kind, text = result
    if kind != "ok" or not isinstance(text, str) or not text.startswith(LISTING):
        return result
    header, *lines = text.split("\n")
    out = [header]
    for i, line in enumerate(lines):
        size, path = line.split("\t", 1)
        out.append(f"<dir>\t{path}" if i == 0 or path.endswith("/") else line)
    return (kind, "\n".join(out))


def v(path: str, view_range: list[int] | None = None) -> dict[str, Any]:
    cmd: dict[str, Any] = {"command": "view", "path": path}
    if view_range is not None:
        cmd["view_range"] = view_range
    return cmd


def create(path: str, text: str) -> dict[str, Any]:
    return {"command": "create", "path": path, "file_text": text}


def replace(path: str, old: str, new: str) -> dict[str, Any]:
    return {"command": "str_replace", "path": path, "old_str": old, "new_str": new}


def insert(path: str, line: int, text: str) -> dict[str, Any]:
    return {"command": "insert", "path": path, "insert_line": line, "insert_text": text}


def delete(path: str) -> dict[str, Any]:
    return {"command": "delete", "path": path}


def rename(old: str, new: str) -> dict[str, Any]:
    return {"command": "rename", "old_path": old, "new_path": new}


TODO = "/memories/notes/todo.md"
ESCAPE = ("error", "Path /memories/%2e%2e%2fsecret would escape /memories directory")

# (command, expected gitmem result when it differs from the SDK's, else None)
SCRIPT: list[tuple[dict[str, Any] | str, Result | None]] = [
    (v("/memories"), None),
    (v("/memories/missing.md"), None),
    (create(TODO, "- buy milk\n- call bob\n"), None),
    (create(TODO, "again"), None),
    (create("/memories/profile.md", "name: Ada\nlikes: tea\nlikes: cake\n"), None),
    (create("/memories/.hidden", "not listed"), None),
    (create("/memories/a/b/c/deep.txt", "deep\n"), None),
    (create("/memories/a/top.txt", "x" * 2000), None),
    (create("/memories/unicode.md", "héllo wörld ✓\r\nsecond\r\n"), None),
    (create("/memories/notes", "a file where a directory is"), None),
    (create("/memories", "the root"), None),
    (v("/memories"), None),
    (v("/memories/"), None),
    (v("/memories/a"), None),
    (v(TODO), None),
    (v(TODO, [2, -1]), None),
    (v(TODO, [0, 1]), None),
    (v(TODO, [2, 2]), None),
    (v(TODO, [-5, 100]), None),
    (v(TODO, [1]), None),
    (v("/memories//notes/./todo.md"), None),
    (replace(TODO, "buy milk", "buy oat milk"), None),
    (replace(TODO, "buy milk", "x"), None),
    (replace("/memories/profile.md", "likes", "loves"), None),
    (replace("/memories/profile.md", "", "x"), None),
    (replace("/memories/notes", "a", "b"), None),
    (replace("/memories/nope.md", "a", "b"), None),
    (replace("/memories/unicode.md", "wörld ✓", "world"), None),
    (replace("/memories/profile.md", "name: Ada", "name: Ada\nage: 36"), None),
    (insert(TODO, 0, "# TODO"), None),
    (insert(TODO, 99, "nope"), None),
    (insert(TODO, -1, "nope"), None),
    (insert(TODO, 3, "- last\n\n"), None),
    (insert("/memories/unicode.md", 1, "middle"), None),
    (insert("/memories/nope.md", 0, "x"), None),
    (insert("/memories/notes", 0, "x"), None),
    (v(TODO), None),
    (v("/memories/unicode.md"), None),
    (rename("/memories/profile.md", "/memories/people/ada.md"), None),
    (rename("/memories/ghost.md", "/memories/ghost2.md"), None),
    (rename("/memories/unicode.md", TODO), None),
    (rename("/memories/unicode.md", "/memories/notes"), None),
    (rename("/memories/ghost.md", "/memories/notes"), None),
    (rename("/memories", "/memories/elsewhere"), None),
    (rename("/memories/unicode.md", "/memories"), None),
    (rename("/memories/a", "/memories/z"), None),
    (v("/memories"), None),
    (v("/memories/z/b/c/deep.txt"), None),
    (delete("/memories/z"), None),
    (delete("/memories"), None),
    (delete("/memories/"), None),
    (delete("/memories/nothing"), None),
    (v("/memories/z"), None),
    # traversal and paths outside /memories
    (v("/memories/../etc/passwd"), None),
    (create("/memories/../escape.txt", "x"), None),
    (rename(TODO, "/memories/../../moved.md"), None),
    (delete("/memories/notes/../../x"), None),
    (v("/etc/passwd"), None),
    (create("memories/x.md", "x"), None),
    (v("/memories/%2e%2e%2fsecret"), ESCAPE),
    (
        v("/memories/notes/../notes/todo.md"),
        ("error", "Path /memories/notes/../notes/todo.md contains '..' segments, which are not allowed"),
    ),
    (v("/memoriesX"), ("error", "Path must start with /memories, got: /memoriesX")),
    # where the SDK lets an OSError escape, gitmem answers with a ToolError
    (create(TODO + "/x", "x"), ("error", f"Cannot create {TODO}/x: {TODO} is a file, not a directory")),
    (
        rename("/memories/notes", "/memories/notes/inner"),
        ("error", "Cannot move the directory /memories/notes into itself (/memories/notes/inner)"),
    ),
    # deleting the last memory of a directory leaves no empty directory in gitmem
    (delete("/memories/people/ada.md"), None),
    (v("/memories"), None),  # compared below with the empty people/ dropped
    (
        v("/memories/people"),
        ("error", "The path /memories/people does not exist. Please provide a valid path."),
    ),
    ("clear_all_memory", None),
    (v("/memories"), None),
]
NO_EMPTY_DIR_STEP = len(SCRIPT) - 4


def test_same_results_as_the_sdk_reference(store: Store, tmp_path: Path) -> None:
    reference = BetaLocalFilesystemMemoryTool(str(tmp_path / "fs"))
    ours = GitmemMemoryTool(store, session=SESSION, actor="user:ada")
    for n, (command, expected) in enumerate(SCRIPT):
        want = normalise(call(reference, command))
        got = normalise(call(ours, command))
        if n == NO_EMPTY_DIR_STEP:
            want = (want[0], want[1].replace("\n<dir>\t/memories/people/", ""))
        if expected is not None:
            assert want != expected, f"step {n}: no longer a difference, drop the expectation"
            want = expected
        assert got == want, f"step {n}: {command}"
        assert got[0] != "crash", f"step {n}: {command}"


def test_every_change_is_a_version_tagged_with_the_session(store: Store) -> None:
    tool = GitmemMemoryTool(store, session=SESSION)
    for command, _ in SCRIPT:
        call(tool, command)
    mine = store.versions(session=SESSION)
    # 6 creates, 3 replaces, 3 inserts, 1 + 2 renames, 2 + 1 deletes, 3 cleared
    assert len(mine) == len(tool.versions) == 21
    assert {x.actor for x in mine} == {f"session:{SESSION}"}
    assert [x.id for x in mine] == [x.id for x in reversed(tool.versions)]
    assert store.list("/") == []  # clear_all_memory
    log = subprocess.run(
        [
            "git",
            "--git-dir",
            str(store.path),
            "log",
            "--format=%(trailers:key=Gitmem-Session,valueonly,separator=)",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert log.splitlines() == [SESSION] * 21


def test_rename_keeps_the_memory_id_and_history(store: Store) -> None:
    tool = GitmemMemoryTool(store, session=SESSION)
    call(tool, create("/memories/p.md", "one\n"))
    call(tool, replace("/memories/p.md", "one", "two"))
    call(tool, rename("/memories/p.md", "/memories/dir/q.md"))
    history = store.versions("/dir/q.md")
    assert [h.operation for h in history] == ["modified", "modified", "created"]
    assert len({h.memory_id for h in history}) == 1
    assert store.read("/dir/q.md").content == "two\n"


def test_directory_delete_is_one_atomic_ref_move(store: Store) -> None:
    tool = GitmemMemoryTool(store)
    for name in ("a", "b", "c"):
        call(tool, create(f"/memories/d/{name}.md", name))
    before = store.core.tip("main")
    assert call(tool, delete("/memories/d")) == ("ok", "Successfully deleted /memories/d")
    commit = store.core.commit(store.core.tip("main"))
    for _ in range(3):  # three deletion commits chained on the old tip, published by one ref update
        assert "Gitmem-Operation: deleted" in commit.message
        commit = commit.parents[0]
    assert commit.id == before
    assert store.list("/") == []
    assert tool.session.startswith("sesn_")
    assert {x.session for x in store.versions()} == {tool.session}


@pytest.mark.parametrize(
    "path",
    [
        "/memories/%2e%2e%2fsecret",
        "/memories/%2E%2E/secret",
        "/memories/%252e%252e%252fsecret",
        "/memories/..%2fsecret",
        "/memories/a/..\\..\\secret",
        "/memories/../memories/x",
        "/memories/..",
        "/memories2/x",
        "/x",
        "",
    ],
)
def test_traversal_and_outside_paths_are_refused(store: Store, path: str) -> None:
    tool = GitmemMemoryTool(store)
    for command in (create(path, "x"), v(path), delete(path), rename("/memories/ok.md", path)):
        kind, text = call(tool, command)
        assert kind == "error", (command, text)
    assert store.core.tip("main") is None


def test_scope_isolation(store: Store) -> None:
    alice = GitmemMemoryTool(store, scope="alice")
    bob = GitmemMemoryTool(store, scope="bob")
    call(alice, create("/memories/x.md", "alice's"))
    assert call(bob, v("/memories/x.md"))[0] == "error"
    assert store.read("/x.md", scope="alice").content == "alice's"


def test_limits_and_rules_become_tool_errors(store: Store) -> None:
    store.update_settings(limits=store.settings.limits.__class__(max_memory_bytes=10))
    tool = GitmemMemoryTool(store)
    kind, text = call(tool, create("/memories/big.md", "x" * 11))
    assert kind == "error" and text.startswith("Error: ") and "10" in text
    kind, text = call(tool, create("/memories/.gitmem/x", "x"))
    assert kind == "error" and text.startswith("Invalid path /memories/.gitmem/x: ")
    assert store.core.tip("main") is None


def test_async_variant_matches_the_async_reference(store: Store, tmp_path: Path) -> None:
    async def run(tool: Any) -> list[Result]:
        out: list[Result] = []
        for command, expected in SCRIPT[:30]:
            if expected is not None:
                continue
            try:
                out.append(normalise(("ok", await tool.call(command))))
            except ToolError as exc:
                out.append(("error", exc.content))
        out.append(("ok", await tool.clear_all_memory()))
        return out

    want = asyncio.run(run(BetaAsyncLocalFilesystemMemoryTool(str(tmp_path / "fs"))))
    got = asyncio.run(run(GitmemAsyncMemoryTool(store, session=SESSION)))
    assert got == want
    assert len(store.versions(session=SESSION)) > 5
