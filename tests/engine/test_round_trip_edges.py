"""Issue 26, the edges still reproducing from earlier reviews: each test failed on the main of the
time. A long path is a limit (exit 5); a description survives malformed front matter elsewhere
in the block; a read-only file system refuses writes (exit 6) and a full disk says so; a queue
request file of a writer killed mid-write goes at once."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gitmem
from gitmem.cli.app import app
from gitmem.errors import ForbiddenError, InvalidInputError, LimitExceededError, PathTooLongError
from gitmem.model.frontmatter import parse_description
from gitmem.model.paths import validate_path
from gitmem.store import Store

runner = CliRunner()


def _mount(*args: str) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount here (needs root): {proc.stderr.strip()}")


def test_a_path_over_the_limit_is_a_limit_error_exit_5(store: Store) -> None:
    path = "/" + "/".join(["d" * 200] * 5) + "/" + "x" * 95  # 1,101 bytes, every segment short
    assert len(path.encode()) == 1101
    with pytest.raises(PathTooLongError, match="1101 bytes") as info:
        validate_path(path)
    assert info.value.exit_code == LimitExceededError.exit_code
    assert isinstance(info.value, InvalidInputError)  # still bad input to the HTTP faces (400)
    result = runner.invoke(app, ["write", "notes", path, "x"])
    assert result.exit_code == 5, result.output + result.stderr


def test_description_survives_malformed_front_matter() -> None:
    content = "---\ndescription: Team standup notes\ntags: [a, b\n---\nbody\n"
    assert parse_description(content) == "Team standup notes"
    quoted = '---\ntags: {unclosed\ndescription: "quoted: with a colon"\n---\nbody\n'
    assert parse_description(quoted) == "quoted: with a colon"
    assert parse_description("---\ntags: [a\n---\nbody\n") is None
    assert parse_description("---\ntags: [a\ndescription: >\n  folded\n---\nbody\n") is None


@pytest.fixture
def read_only_store(store: Store, tmp_path: Path) -> Iterator[Path]:
    store.write("/a.md", "x\n", actor="user:alice")
    ro = tmp_path / "ro"
    ro.mkdir()
    _mount("--bind", "-o", "ro", str(store.path), str(ro))
    try:
        yield ro
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_writes_to_a_read_only_file_system_exit_6(read_only_store: Path) -> None:
    result = runner.invoke(app, ["write", str(read_only_store), "/b.md", "y"])
    assert result.exit_code == 6, result.output + result.stderr
    assert "read-only file system" in result.stderr
    with gitmem.open_store(read_only_store) as s, pytest.raises(ForbiddenError, match="read-only"):
        s.write("/b.md", "y")
    assert runner.invoke(app, ["read", str(read_only_store), "/a.md"]).stdout == "x\n"


def test_a_full_disk_gives_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    _mount("-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk))
    try:
        monkeypatch.setenv("GITMEM_HOME", str(disk / "ws"))
        with gitmem.create_store("full") as s:
            s.write("/a.md", "before\n", actor="user:alice")
        filler = disk / "filler"
        with filler.open("wb") as fh, pytest.raises(OSError):
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
                os.fsync(fh.fileno())
        result = runner.invoke(app, ["write", "full", "/b.md", "z" * 90_000])
        assert result.exit_code != 0
        assert "unexpected" not in result.stderr, result.stderr
        assert "disk" in result.stderr and "full" in result.stderr, result.stderr
        filler.unlink()
        with gitmem.open_store("full") as s:
            assert s.read("/a.md").content == "before\n"
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_killed_writers_temporary_request_is_removed_at_once(store: Store) -> None:
    from gitmem.ids import new_ulid

    store.write("/a.md", "x\n")
    queue = store.path / "gitmem" / "queue" / "main"
    queue.mkdir(parents=True, exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    tmp = queue / f".tmp-{new_ulid()}-{dead.pid}.req"
    tmp.write_text('{"half": ')
    live = queue / f".tmp-{new_ulid()}-{os.getpid()}.req"  # a writer still writing: kept
    live.write_text("{")
    store.write("/b.md", "y\n")
    assert not tmp.exists()
    assert live.exists()
    live.unlink()
