"""``gitmem store ...`` through CliRunner: outputs, --json shapes, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

import gitmem
from gitmem.cli.app import app
from gitmem.store import Store


def gm(*args: str, input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input)


def test_create_prints_name_id_description(workspace: Path) -> None:
    r = gm("store", "create", "alpha", "--description", "Team notes")
    assert r.exit_code == 0, r.stderr
    name, sid, desc = r.stdout.rstrip("\n").split("\t")
    assert (name, desc) == ("alpha", "Team notes") and sid.startswith("memstore_")
    assert (workspace / "stores" / f"{sid}.git" / "gitmem.yaml").is_file()


def test_create_with_metadata_and_limits_json() -> None:
    r = gm(
        "store", "create", "beta", "-m", "team=core", "-m", "env=dev", "--max-memory-bytes", "500", "--json"
    )
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["metadata"] == {"team": "core", "env": "dev"}
    assert data["limits"]["max_memory_bytes"] == 500
    assert data["archived_at"] is None
    assert gitmem.open_store("beta").settings.limits.max_memory_bytes == 500


def test_create_bad_metadata_is_usage_error_and_creates_nothing(workspace: Path) -> None:
    r = gm("store", "create", "gamma", "-m", "novalue")
    assert r.exit_code == 2
    assert r.stderr == "Error: metadata 'novalue' is not KEY=VALUE\n"
    assert not (workspace / "stores").exists() or not list((workspace / "stores").iterdir())


def test_create_bad_name_and_a_repeated_name() -> None:
    assert gm("store", "create", "bad\tname").exit_code == 2
    assert gm("store", "create", "x" * 256).exit_code == 2
    first, second = gm("store", "create", "Dup Name"), gm("store", "create", "Dup Name")
    assert first.exit_code == 0 and second.exit_code == 0  # names need not be unique: two stores
    ids = [r.stdout.split("\t")[1] for r in (first, second)]
    assert ids[0] != ids[1]
    r = gm("write", "Dup Name", "/a.md", "x")
    assert r.exit_code == 4 and all(i in r.stderr for i in ids)  # ambiguous: the candidates by id
    assert gm("write", ids[0], "/a.md", "x").exit_code == 0
    assert gm("read", ids[0], "/a.md").stdout == "x"


def test_list_is_tab_separated_when_not_a_tty(store: Store) -> None:
    gm("store", "create", "zeta", "-d", "last")
    r = gm("store", "list")
    assert r.exit_code == 0
    lines = [line.split("\t") for line in r.stdout.splitlines()]
    assert [(x[0], x[2], x[3]) for x in lines] == [
        ("NAME", "ARCHIVED", "DESCRIPTION"),
        ("notes", "-", "Test notes"),
        ("zeta", "-", "last"),
    ]


def test_show_json_has_settings_path_and_scopes(store: Store) -> None:
    store.write("/a.md", "a", scope="team")
    data = json.loads(gm("store", "show", "notes", "--json").stdout)
    assert data["name"] == "notes" and data["scopes"] == ["team"]
    assert data["path"] == str(store.path)
    assert data["limits"]["max_memory_bytes"] == 102400


def test_show_unknown_store_exits_3() -> None:
    r = gm("store", "show", "nope")
    assert r.exit_code == 3
    assert r.stderr.startswith("Error: store 'nope' does not exist in ")


def test_unknown_store_json_error_shape() -> None:
    r = gm("--json", "store", "show", "nope")
    assert r.exit_code == 3
    err = json.loads(r.stderr)["error"]
    assert err["type"] == "not_found" and "nope" in err["message"]


def test_update_patches_description_and_metadata(store: Store) -> None:
    gm("store", "update", "notes", "-m", "a=1", "-m", "b=2")
    r = gm("store", "update", "notes", "-d", "New", "--remove-metadata", "a", "-m", "c=3", "--json")
    assert r.exit_code == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["description"] == "New" and data["metadata"] == {"b": "2", "c": "3"}


def test_update_without_changes_is_usage_error(store: Store) -> None:
    r = gm("store", "update", "notes")
    assert r.exit_code == 2 and r.stderr.startswith("Error: nothing to update")


def test_archive_needs_yes(store: Store) -> None:
    r = gm("store", "archive", "notes")
    assert r.exit_code == 2
    assert r.stderr == "Error: archiving store 'notes' makes it read-only for good; pass --yes to confirm\n"
    assert store.core.reload_settings().archived_at is None


def test_archived_store_refuses_writes_with_exit_6(store: Store) -> None:
    store.write("/keep.md", "kept")
    r = gm("store", "archive", "notes", "--yes")
    assert r.exit_code == 0 and r.stdout.startswith("archived notes at ")
    w = gm("write", "notes", "/new.md", "x")
    assert w.exit_code == 6
    assert w.stderr.startswith("Error: store 'notes' was archived at ") and "read-only" in w.stderr
    assert gm("store", "update", "notes", "-d", "x").exit_code == 6
    assert gm("read", "notes", "/keep.md").stdout == "kept"  # still readable


def test_delete_needs_yes_then_deletes(workspace: Path, store: Store) -> None:
    assert gm("store", "delete", "notes").exit_code == 2
    assert store.path.is_dir()
    r = gm("store", "delete", "notes", "--yes")
    assert r.exit_code == 0 and r.stdout.startswith("deleted notes (")
    assert not store.path.exists()
    assert gm("store", "delete", "notes", "--yes").exit_code == 3


def test_home_option_selects_workspace(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere"
    assert gm("store", "create", "x", "--home", str(other)).exit_code == 0
    assert len(list((other / "stores").glob("memstore_*.git"))) == 1
    assert gm("--home", str(other), "store", "list").stdout.splitlines()[1].startswith("x\t")
    assert gm("store", "list").stdout == "NAME\tID\tARCHIVED\tDESCRIPTION\n"  # no stores: the header only


def test_malformed_settings_error_names_file_and_key(store: Store) -> None:
    path = store.path / "gitmem.yaml"
    path.write_text(path.read_text().replace("max_memory_bytes: 102400", "max_memory_bytes: lots"))
    r = gm("write", "notes", "/a.md", "x")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: {path}: key 'limits.max_memory_bytes' must be an integer")
