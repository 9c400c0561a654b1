"""``gitmem session ...`` and ``gitmem revert-session`` through CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

import gitmem
from gitmem.cli.app import app
from gitmem.store import Store


def gm(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def start(tmp_path: Path, *stores: str) -> dict[str, object]:
    args = [a for s in stores for a in ("--store", s)]
    r = gm("session", "start", *args, "--root", str(tmp_path / "mnt"), "--json")
    assert r.exit_code == 0, r.stderr
    data: dict[str, object] = json.loads(r.stdout)
    return data


def test_start_prints_the_system_prompt(store: Store, tmp_path: Path) -> None:
    r = gm(
        "session",
        "start",
        "--store",
        "notes:ro",
        "--root",
        str(tmp_path / "mnt"),
        "--instructions",
        "notes=Read first.",
    )
    assert r.exit_code == 0, r.stderr
    assert r.stdout == (tmp_path / "mnt/SYSTEM_PROMPT.md").read_text()
    assert "- Access: read-only\n- Description: Test notes\n- Instructions: Read first.\n" in r.stdout


def test_start_json_is_the_session_record(store: Store, tmp_path: Path) -> None:
    data = start(tmp_path, "notes")
    assert data["status"] == "active" and str(data["id"]).startswith("sesn_")
    assert data["mounts"] == [
        {
            "store": store.id,  # an attachment names the store by id
            "store_path": str(store.path),
            "scope": "main",
            "access": "rw",
            "slug": "notes",
            "path": str(tmp_path / "mnt/notes"),
            "description": "Test notes",
            "instructions": "",
            "name": "notes",
            "at": "",
            "shows": "",
            "versions": 0,
        }
    ]
    assert data["type"] == "session" and data["created_at"].endswith("Z")


def test_nine_stores_exit_5(workspace: Path, tmp_path: Path) -> None:
    for i in range(9):
        gitmem.create_store(f"s{i}", home=workspace).close()
    r = gm(
        "session",
        "start",
        *[a for i in range(9) for a in ("--store", f"s{i}")],
        "--root",
        str(tmp_path / "m"),
    )
    assert r.exit_code == 5 and r.stderr == "Error: a session can attach at most 8 stores, not 9\n"
    assert not (tmp_path / "m").exists()


def test_sync_show_prompt_end(store: Store, tmp_path: Path) -> None:
    sid = str(start(tmp_path, "notes")["id"])
    (tmp_path / "mnt/notes/learned.md").write_text("fact\n")
    r = gm("session", "sync", sid)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("notes (rw): 1 version(s)\n  created /learned.md  memver_")
    r = gm("session", "show", "--session", sid, "--json")
    shown = json.loads(r.stdout)
    assert [(v["operation"], v["path"]) for v in shown["history"]["notes"]] == [("created", "/learned.md")]
    assert shown["mounts"][0]["versions"] == 1 and shown["type"] == "session"
    assert gm("session", "prompt", sid).stdout.startswith("# Memory stores\n")
    r = gm("session", "end", sid)
    assert r.exit_code == 0 and r.stdout.endswith(f"session {sid} ended\n")
    listed = json.loads(gm("session", "list", "--json").stdout)
    assert [(d["id"], d["status"]) for d in listed] == [(sid, "ended")]
    # the same record as session start and show print (one JSON shape per kind of object)
    assert set(listed[0]) == set(shown) - {"history"}


def test_sync_watch_bounded_by_max_seconds(store: Store, tmp_path: Path) -> None:
    sid = str(start(tmp_path, "notes")["id"])
    (tmp_path / "mnt/notes/early.md").write_text("x\n")
    r = gm("session", "sync", sid, "--watch", "--max-seconds", "0", "--json")
    assert r.exit_code == 0, r.stderr
    first, final = r.stdout.strip().split("\n", 1)
    assert json.loads(first)["mounts"][0]["versions"][0]["path"] == "/early.md"
    assert json.loads(final) == {"syncs": 1}


def test_sync_without_active_session_exits_3(workspace: Path) -> None:
    r = gm("session", "sync")
    assert r.exit_code == 3 and "no active session" in r.stderr


def test_revert_session_dry_run_then_revert(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "good\n")
    sid = str(start(tmp_path, "notes")["id"])
    (tmp_path / "mnt/notes/a.md").write_text("poisoned\n")
    assert gm("session", "sync", sid).exit_code == 0
    r = gm("revert-session", "notes", sid, "--dry-run")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.startswith("restore /a.md to memver_") and r.stdout.endswith(
        "dry run: 1 memory(ies) would change\n"
    )
    assert store.read("/a.md").content == "poisoned\n"
    r = gm("revert-session", "notes", sid, "--json")
    assert r.exit_code == 0 and [v["operation"] for v in json.loads(r.stdout)["versions"]] == ["modified"]
    assert store.read("/a.md").content == "good\n"


def test_every_session_command_has_help() -> None:
    for cmd in ("start", "sync", "end", "list", "show", "prompt"):
        r = gm("session", cmd, "--help")
        assert r.exit_code == 0 and "--json" in r.stdout
    assert "Undo everything SESSION wrote" in gm("revert-session", "--help").stdout
