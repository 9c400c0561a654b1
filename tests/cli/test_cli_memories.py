"""Memory commands through CliRunner (write, create, read, ls, edit, rm, mv), and the fast read path."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from gitmem.cli.app import app
from gitmem.store import Store

VERSION_LINE = re.compile(r"^(created|modified|deleted|renamed \S+ ->) (\S+)  memver_\w{26}  mem_\w{26}\n$")


def gm(*args: str, input: str | bytes | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input, env=env)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_write_then_read_exact_bytes(store: Store) -> None:
    r = gm("write", "notes", "/notes/todo.md", "buy milk")
    assert r.exit_code == 0, r.stderr
    assert VERSION_LINE.match(r.stdout) and r.stdout.startswith("created /notes/todo.md  memver_")
    out = gm("read", "notes", "/notes/todo.md")
    assert out.exit_code == 0 and out.stdout_bytes == b"buy milk"


def test_write_from_stdin_and_file_keeps_bytes(store: Store, tmp_path: Path) -> None:
    data = "ünïcode\r\nline two\n".encode()
    assert gm("write", "notes", "/in.md", "-", input=data).exit_code == 0
    assert store.read("/in.md").content_sha256 == sha(data)
    f = tmp_path / "c.md"
    f.write_bytes(b"from file\n")
    assert gm("write", "notes", "/f.md", "--file", str(f)).exit_code == 0
    assert gm("read", "notes", "/f.md").stdout_bytes == b"from file\n"


def test_write_content_arguments_are_checked(store: Store, tmp_path: Path) -> None:
    r = gm("write", "notes", "/a.md")
    assert (
        r.exit_code == 2 and r.stderr == "Error: no content: give TEXT, '-' (standard input) or --file FILE\n"
    )
    f = tmp_path / "x"
    f.write_text("x")
    assert gm("write", "notes", "/a.md", "t", "--file", str(f)).exit_code == 2
    assert store.core.tip("main") is None


def test_write_same_content_creates_no_version(store: Store) -> None:
    gm("write", "notes", "/a.md", "same")
    r = gm("write", "notes", "/a.md", "same")
    v = store.versions("/a.md")[0]
    assert r.exit_code == 0 and r.stdout == f"unchanged /a.md  {v.id}  {v.memory_id} (no new version)\n"
    assert len(store.versions("/a.md")) == 1
    # a no-op write prints the version the memory is at, in the same shape as any write (never null)
    data = json.loads(gm("write", "notes", "/a.md", "same", "--json").stdout)
    assert data["type"] == "version" and data["id"] == v.id


def test_write_json_shape_and_description(store: Store) -> None:
    r = gm("write", "notes", "/a.md", "body\n", "-d", "About a", "--json", "--actor", "user:bob")
    data = json.loads(r.stdout)
    assert data["type"] == "version" and data["operation"] == "created" and data["actor"] == "user:bob"
    assert set(data) >= {
        "id",
        "memory_id",
        "scope",
        "path",
        "session",
        "created_at",
        "commit",
        "content_sha256",
    }
    m = json.loads(gm("read", "notes", "/a.md", "--json").stdout)
    assert m["description"] == "About a" and m["content"].endswith("---\nbody\n")
    assert m["version_id"] == data["id"]


@pytest.mark.parametrize("bad", ["../x", "/a/./b", "/a//b", "/a\x07b", "/cafe\u0301.md"])
def test_bad_paths_exit_2_and_write_nothing(store: Store, bad: str) -> None:
    r = gm("write", "notes", bad, "x")
    assert r.exit_code == 2 and r.stderr.startswith("Error: invalid path")
    assert store.core.tip("main") is None


def test_memory_size_limit_exit_5(store: Store) -> None:
    assert gm("write", "notes", "/ok.md", "-", input=b"a" * 102400).exit_code == 0
    r = gm("write", "notes", "/big.md", "-", input=b"a" * 102401)
    assert r.exit_code == 5 and r.stderr.startswith("Error: ") and "102400" in r.stderr
    assert [m.path for m in store.list()] == ["/ok.md"]


@pytest.mark.parametrize("data", [b"bad \xff utf-8", b"nul \x00 byte"])
def test_non_text_content_refused(store: Store, data: bytes) -> None:
    r = gm("write", "notes", "/a.md", "-", input=data)
    assert r.exit_code == 2 and r.stderr.startswith("Error: ")
    assert store.core.tip("main") is None


def test_unknown_store_exit_3() -> None:
    r = gm("write", "nostore", "/a.md", "x")
    assert r.exit_code == 3 and r.stderr.startswith("Error: store 'nostore' does not exist")


def test_if_sha256_precondition(store: Store) -> None:
    gm("write", "notes", "/a.md", "v1")
    r = gm("write", "notes", "/a.md", "v2", "--if-sha256", sha(b"other"))
    assert r.exit_code == 4 and r.stderr.startswith("Error: /a.md changed: its sha256 is ")
    assert gm("write", "notes", "/a.md", "v2", "--if-sha256", sha(b"v1")).exit_code == 0
    assert gm("read", "notes", "/a.md").stdout == "v2"


def test_create_never_overwrites_and_names_conflict(store: Store) -> None:
    assert gm("create", "notes", "/a/b.md", "x").exit_code == 0
    r = gm("create", "notes", "/a/b.md", "y")
    assert r.exit_code == 4 and r.stderr == "Error: /a/b.md already exists in scope 'main'\n"
    j = gm("create", "notes", "/a", "y", "--json")
    err = json.loads(j.stderr)["error"]
    assert j.exit_code == 4 and err["type"] == "path_conflict" and err["conflicting_path"] == "/a/b.md"
    assert gm("read", "notes", "/a/b.md").stdout == "x"


def test_read_version_and_missing(store: Store) -> None:
    v1 = store.write("/a.md", "one")
    store.write("/a.md", "two")
    assert v1 is not None
    assert gm("read", "notes", "/a.md", "--version", v1.id).stdout == "one"
    r = gm("read", "notes", "/nope.md")
    assert r.exit_code == 3 and r.stderr == "Error: memory /nope.md does not exist in scope 'main'\n"


def test_ls_plain_lines_depth_and_scope(store: Store) -> None:
    store.write("/a/x.md", "xx", description="the x")
    store.write("/a/b/y.md", "y")
    store.write("/top.md", "t")
    store.write("/other.md", "o", scope="team")
    lines = [line.split("\t") for line in gm("ls", "notes").stdout.splitlines()[1:]]
    assert [(x[0], x[3]) for x in lines] == [("/a/b/y.md", ""), ("/a/x.md", "the x"), ("/top.md", "")]
    depth1 = gm("ls", "notes", "--depth", "1").stdout.splitlines()[1:]
    assert [line.split("\t")[:2] for line in depth1] == [["/a/", "2 memories"], ["/top.md", "1"]]
    sub = gm("ls", "notes", "/a/", "--json")
    assert [m["path"] for m in json.loads(sub.stdout)] == ["/a/b/y.md", "/a/x.md"]
    assert gm("ls", "notes", "-s", "team").stdout.startswith(
        "PATH\tSIZE\tUPDATED\tDESCRIPTION\n/other.md\t1\t"
    )
    assert gm("ls", "notes", "--depth", "2").exit_code == 2


def test_edit_replace_and_insert(store: Store) -> None:
    store.write("/a.md", "one\ntwo\n")
    assert VERSION_LINE.match(gm("edit", "notes", "/a.md", "--replace", "two", "2").stdout)
    assert gm("edit", "notes", "/a.md", "--insert", "0", "zero").exit_code == 0
    assert gm("read", "notes", "/a.md").stdout == "zero\none\n2\n"


def test_edit_errors(store: Store) -> None:
    store.write("/a.md", "x\nx\n")
    r = gm("edit", "notes", "/a.md", "--replace", "x", "y")
    assert r.exit_code == 2 and "(lines 1, 2)" in r.stderr
    r = gm("edit", "notes", "/a.md", "--replace", "zz", "y")
    assert r.stderr == "Error: no replacement was made: the text was not found in /a.md\n"
    r = gm("edit", "notes", "/a.md")
    assert (
        r.exit_code == 2
        and r.stderr == "Error: give exactly one of --replace OLD NEW or --insert LINE TEXT\n"
    )
    assert gm("edit", "notes", "/a.md", "--insert", "1", "q", "--if-sha256", sha(b"no")).exit_code == 4
    assert len(store.versions("/a.md")) == 1


def test_rm_and_mv(store: Store) -> None:
    store.write("/a.md", "a")
    store.write("/b.md", "b")
    r = gm("mv", "notes", "/a.md", "/c/a.md")
    assert r.exit_code == 0 and r.stdout.startswith("renamed /a.md -> /c/a.md  memver_")
    assert gm("mv", "notes", "/c/a.md", "/b.md").exit_code == 4
    assert gm("rm", "notes", "/c/a.md").stdout.startswith("deleted /c/a.md  memver_")
    assert gm("rm", "notes", "/c/a.md").exit_code == 3
    assert [m.path for m in store.list()] == ["/b.md"]


def test_attribution_from_environment(store: Store) -> None:
    env = {"GITMEM_ACTOR": "service:bot", "GITMEM_SESSION": "sesn_demo1"}
    assert gm("write", "notes", "/a.md", "x", env=env).exit_code == 0
    v = store.versions("/a.md")[0]
    assert (v.actor, v.session) == ("service:bot", "sesn_demo1")
    gm("write", "notes", "/a.md", "y", "--actor", "user:eve", env=env)
    assert store.versions("/a.md")[0].actor == "user:eve"
    assert gm("write", "notes", "/a.md", "z", "--actor", "nobody").exit_code == 2


def _gitmem(*args: str, home: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "GITMEM_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "gitmem", *args], capture_output=True, env=env)


def test_read_subprocess_fast_path_exact_bytes(store: Store, workspace: Path) -> None:
    data = "---\ndescription: d\n---\nnö newline at end".encode()
    v = store.write("/a.md", data, scope="team")
    store.write("/a.md", "later", scope="team")
    assert v is not None
    fast = _gitmem("read", "notes", "/a.md", "--scope", "team", "--version", v.id, home=workspace)
    assert (fast.returncode, fast.stdout, fast.stderr) == (0, data, b"")
    # A global option before the command sends it through typer: the same bytes.
    slow = _gitmem("--debug", "read", "notes", "/a.md", "-s", "team", "--version", v.id, home=workspace)
    assert slow.stdout == fast.stdout
    missing = _gitmem("read", "notes", "/zz.md", home=workspace)
    assert (
        missing.returncode == 3
        and missing.stderr == b"Error: memory /zz.md does not exist: scope 'main' is empty\n"
    )


def test_ls_is_a_rich_table_on_a_terminal(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    from gitmem.cli import common

    store.write("/a.md", "x", description="the a")
    monkeypatch.setattr(common, "is_tty", lambda: True)
    out = gm("ls", "notes").stdout
    assert out.split()[:4] == ["PATH", "SIZE", "UPDATED", "DESCRIPTION"]
    assert "/a.md" in out and "the a" in out and "\t" not in out
