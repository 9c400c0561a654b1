"""History commands through CliRunner (log, show, diff, restore, reindex), and help text for every command."""

from __future__ import annotations

import json
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from gitmem.cli.app import app
from gitmem.model.versions import Version
from gitmem.store import Store


def gm(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def written(v: Version | None) -> Version:
    assert v is not None
    return v


def test_log_plain_lines_newest_first(store: Store) -> None:
    v1 = written(store.write("/a.md", "1", actor="user:alice"))
    v2 = written(store.write("/a.md", "2", session="sesn_x"))
    r = gm("log", "notes")
    assert r.exit_code == 0
    rows = [line.split("\t") for line in r.stdout.splitlines()[1:]]
    assert [row[0] for row in rows] == [v2.id, v1.id]
    assert rows[1][2:] == ["main", "created", "/a.md", "user:alice", "-"]
    assert rows[0][2:] == ["main", "modified", "/a.md", "session:sesn_x", "sesn_x"]


def test_log_filters(store: Store) -> None:
    a = written(store.write("/a.md", "1", actor="user:alice"))
    written(store.write("/b.md", "1", actor="user:bob", session="s1"))
    written(store.write("/a.md", "2", actor="user:bob"))
    written(store.write("/t.md", "t", scope="team"))

    def ids(*args: str) -> list[str]:
        r = gm("log", "notes", "--json", *args)
        assert r.exit_code == 0, r.stderr
        return [v["path"] + ":" + v["operation"] for v in json.loads(r.stdout)]

    assert ids("/a.md") == ["/a.md:modified", "/a.md:created"]
    assert ids("--actor", "user:alice") == ["/a.md:created"]
    assert ids("--session", "s1") == ["/b.md:created"]
    assert ids("--op", "modified") == ["/a.md:modified"]
    assert ids("--scope", "team") == ["/t.md:created"]
    assert ids("--memory", a.memory_id, "--limit", "1") == ["/a.md:modified"]
    assert ids("--since", "2999-01-01") == []
    assert len(ids("--until", "2999-01-01T00:00:00Z")) == 4


def test_log_bad_filters_exit_2(store: Store) -> None:
    r = gm("log", "notes", "--since", "the day before")
    assert r.exit_code == 2 and r.stderr.startswith(
        "Error: --since 'the day before' is not a date: use ISO 8601"
    )
    assert gm("log", "notes", "--op", "renamed").exit_code == 2


def test_log_follows_renames(store: Store) -> None:
    store.write("/a.md", "x")
    store.rename("/a.md", "/b.md")
    rows = [line.split("\t") for line in gm("log", "notes", "/b.md").stdout.splitlines()[1:]]
    assert [r[4] for r in rows] == ["/a.md -> /b.md", "/a.md"]


def test_show_prints_metadata_then_content(store: Store) -> None:
    v = written(store.write("/a.md", "hello\n", actor="user:alice"))
    r = gm("show", "notes", v.id)
    assert r.exit_code == 0
    head, content = r.stdout.split("\n\n", 1)
    assert content == "hello\n"
    assert f"id:             {v.id}" in head.splitlines()
    assert "actor:          user:alice" in head.splitlines()
    data = json.loads(gm("show", "notes", v.id, "--json").stdout)
    assert data["content"] == "hello\n" and data["operation"] == "created"


def test_show_deletion_has_no_content_and_unknown_version(store: Store) -> None:
    store.write("/a.md", "x")
    d = store.delete("/a.md")
    assert json.loads(gm("show", "notes", d.id, "--json").stdout)["content"] is None
    assert gm("show", "notes", "memver_01M8N6VCM772QXFMK3R9Z4YWT8").exit_code == 3
    r = gm("show", "notes", "v1")
    assert r.exit_code == 2 and r.stderr.startswith("Error: invalid version id 'v1'")


def test_diff_exact_output(store: Store) -> None:
    v1 = written(store.write("/a.md", "one\ntwo\n"))
    v2 = written(store.write("/a.md", "one\n2\n"))
    expected = "--- a/a.md\n+++ b/a.md\n@@ -1,2 +1,2 @@\n one\n-two\n+2\n"
    assert gm("diff", "notes", v2.id).stdout == expected
    assert gm("diff", "notes", v1.id, v2.id).stdout == expected
    assert json.loads(gm("diff", "notes", v1.id, "--json").stdout)["diff"].startswith("--- /dev/null\n")


def test_restore_writes_old_content_as_new_version(store: Store) -> None:
    v1 = written(store.write("/a.md", "first"))
    store.write("/a.md", "second")
    r = gm("restore", "notes", v1.id, "--actor", "user:admin")
    assert r.exit_code == 0 and r.stdout.startswith("modified /a.md  memver_")
    assert gm("read", "notes", "/a.md").stdout == "first"
    assert [v.actor for v in store.versions("/a.md")][0] == "user:admin"
    head = store.versions("/a.md")[0]  # restoring the content it has: the version it is at
    assert (
        gm("restore", "notes", v1.id).stdout
        == f"unchanged /a.md  {head.id}  {head.memory_id} (no new version)\n"
    )


def test_restore_deleted_memory(store: Store) -> None:
    v1 = written(store.write("/a.md", "back"))
    store.delete("/a.md")
    assert gm("restore", "notes", v1.id).exit_code == 0
    assert store.read("/a.md").memory_id == v1.memory_id


def test_reindex_rebuilds(store: Store) -> None:
    store.write("/a.md", "1")
    store.write("/a.md", "2")
    store.close()
    for f in (store.core.gitmem_dir).glob("index.sqlite*"):
        f.unlink()
    r = gm("reindex", "notes")
    assert r.exit_code == 0 and r.stdout == "indexed 2 versions\n"
    assert json.loads(gm("reindex", "notes", "--json").stdout) == {"versions": 2}
    assert len(gm("log", "notes").stdout.splitlines()) == 3  # a header row, then 2 versions


def _commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every (sub)command; typer may vendor click, so groups are found by their ``commands``."""
    out = []
    for name, cmd in group.commands.items():
        out.append((prefix + name, cmd))
        if hasattr(cmd, "commands"):
            out += _commands(cmd, prefix + name + " ")
    return out


ALL = _commands(typer.main.get_command(app))


def test_the_commands_of_design_section_9_exist() -> None:
    names = {n for n, _ in ALL}
    wanted = "store create,store list,store show,store update,store archive,store delete,write,create,read,ls,edit,"
    wanted += "rm,mv,log,show,diff,restore,reindex,export,import"
    assert set(wanted.split(",")) <= names


@pytest.mark.parametrize("name,cmd", ALL, ids=[n for n, _ in ALL])
def test_every_command_has_help_and_json(name: str, cmd: Any) -> None:
    assert (cmd.help or "").strip(), f"{name} has no help text"
    r = gm(*name.split(), "--help")
    assert r.exit_code == 0 and "Usage:" in r.stdout
    if not hasattr(cmd, "commands") and name not in ("help", "completion"):
        assert any("--json" in p.opts for p in cmd.params), f"{name} has no --json"
