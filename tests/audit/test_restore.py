"""``gitmem store create NAME --from-bundle FILE``: a store comes back from its bundle (and backup)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import gitmem
from gitmem.cli.app import app
from gitmem.engine import ledger
from gitmem.store import Store


def gm(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def backup(store: Store, tmp_path: Path) -> tuple[Path, Path]:
    """The backup of docs/operations.md#backup: the bundle, and the private files beside it."""
    bundle, files = tmp_path / "notes.bundle", tmp_path / "backup"
    assert gm("export", str(store.path), "--format", "bundle", "-o", str(bundle)).exit_code == 0
    files.mkdir()
    shutil.copy2(store.path / "gitmem.yaml", files)
    for name in ("secret", "denylist", "ledger_head"):
        if (store.path / "gitmem" / name).exists():
            shutil.copy2(store.path / "gitmem" / name, files)
    return bundle, files


@pytest.fixture
def filled(store: Store) -> Store:
    store.write("/a.md", "alpha", description="first", actor="user:alice")
    store.write("/a.md", "alpha 2", actor="user:alice", session="sesn_one")
    store.rename("/a.md", "/renamed.md", actor="user:bob")
    store.write("/leak.md", "the gate code is 7731", scope="team", actor="user:bob")
    store.write("/leak.md", "ask the desk", scope="team", actor="user:bob")
    store.redact(store.versions("/leak.md", scope="team")[-1].id, reason="leak", actor="user:alice")
    store.update_settings(description="Restored notes", actor="user:alice")
    return store


def history(s: Store) -> list[tuple[str, str, str, str, str, str | None]]:
    return [
        (v.id, v.memory_id, v.scope, v.path, v.operation, v.session)
        for scope in s.scopes()
        for v in s.versions(scope=scope)
    ]


def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "restored"
    monkeypatch.setenv("GITMEM_HOME", str(home))
    return home


def test_round_trip_keeps_versions_ids_scopes_ledger_and_verifies(
    filled: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, files = backup(filled, tmp_path)
    before, chain = history(filled), ledger.entries(filled.core)
    home = elsewhere(tmp_path, monkeypatch)
    r = gm(
        "store",
        "create",
        "notes",
        "--from-bundle",
        str(bundle),
        "--backup",
        str(files),
        "--actor",
        "user:ops",
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines()[1:4] == [
        f"restored scopes main, team and {len(chain)} ledger entries from {bundle}",
        "backup files restored: denylist, gitmem.yaml, ledger_head, secret",
        "ok\tfsck",
    ]
    with gitmem.open_store("notes", home=home) as s:
        assert history(s) == before and s.scopes() == ["main", "team"]
        assert (s.settings.id, s.settings.description) == (filled.settings.id, "Restored notes")
        assert (
            s.read("/renamed.md").content == "alpha 2"
            and s.read("/leak.md", scope="team").content == "ask the desk"
        )
        restored = ledger.entries(s.core)
        assert [e.commit for e in restored[:-1]] == [e.commit for e in chain]
        last = restored[-1]
        assert (last.kind, last.actor, last.prev) == ("store_created", "user:ops", chain[-1].digest)
        assert last.data["restored_from"]["sha256"] == hashlib.sha256(bundle.read_bytes()).hexdigest()
        assert oct((s.path / "gitmem" / "secret").stat().st_mode & 0o777) == "0o600"
        assert (s.path / "hooks" / "pre-receive").is_file()
        s.write("/new.md", "after the restore", actor="user:alice")  # the store takes writes
    assert gm("verify", "notes").exit_code == 0
    assert "the gate code" not in subprocess.run(
        ["git", "--git-dir", str(gitmem.open_store("notes", home=home).path), "cat-file", "--batch-all-objects", "--batch"],
        capture_output=True, text=True, errors="replace",
    ).stdout  # fmt: skip


def test_without_a_backup_a_store_with_redactions_is_refused_and_nothing_is_left(
    filled: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, _files = backup(filled, tmp_path)
    home = elsewhere(tmp_path, monkeypatch)
    r = gm("store", "create", "notes", "--from-bundle", str(bundle))
    assert r.exit_code == 7
    assert "does not verify, so it was not kept: redactions purged:" in r.stderr
    assert not (home / "stores").exists() or list((home / "stores").iterdir()) == []
    kept = gm("store", "create", "notes", "--from-bundle", str(bundle), "--allow-unverified", "--json")
    assert kept.exit_code == 7
    checks = {c["name"]: c["ok"] for c in json.loads(kept.stdout)["verify"]["checks"]}
    assert checks["redactions purged"] is False and checks["fsck"] is True
    assert gitmem.open_store("notes", home=home).path.is_dir()


def test_without_a_backup_settings_are_new_but_the_store_id_is_kept(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    bundle, _files = backup(store, tmp_path)
    home = elsewhere(tmp_path, monkeypatch)
    r = gm("store", "create", "copy", "--from-bundle", str(bundle), "-d", "A copy", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["settings"]["id"], out["settings"]["name"], out["private_files"]) == (
        store.settings.id,
        "copy",
        [],
    )
    with gitmem.open_store("copy", home=home) as s:
        assert s.read("/a.md").content == "alpha" and s.settings.description == "A copy"
    assert gm("verify", "copy").exit_code == 0


def stores_of(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "stores").iterdir()) if (home / "stores").exists() else []


def test_bad_bundles_and_backups_are_refused_and_write_nothing(
    filled: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, files = backup(filled, tmp_path)
    home = elsewhere(tmp_path, monkeypatch)
    text = tmp_path / "not-a.bundle"
    text.write_text("hello\n")
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", str(bundle), str(work)], check=True)
    subprocess.run(["git", "-C", str(work), "tag", "v1"], check=True)
    tagged = tmp_path / "tagged.bundle"
    subprocess.run(["git", "-C", str(work), "bundle", "create", "-q", str(tagged), "main", "v1"], check=True)
    incremental = tmp_path / "incremental.bundle"
    subprocess.run(
        ["git", "-C", str(work), "bundle", "create", "-q", str(incremental), "HEAD~1..main"], check=True
    )
    other = tmp_path / "other"
    shutil.copytree(files, other)
    sid = filled.id
    (other / "gitmem.yaml").write_text(
        (other / "gitmem.yaml").read_text().replace(sid, "memstore_" + "0" * 26)
    )
    bad_secret = tmp_path / "bad-secret"
    shutil.copytree(files, bad_secret)
    (bad_secret / "secret").write_text("not hex\n")
    cases = [
        (["--from-bundle", str(tmp_path / "missing.bundle")], "no such bundle file"),
        (["--from-bundle", str(text)], "is not a git bundle"),
        (["--from-bundle", str(tagged)], "holds refs/tags/v1, which no gitmem store has"),
        (["--from-bundle", str(incremental)], "cannot be restored on its own"),
        (["--from-bundle", str(bundle), "--backup", str(other)], f"but the bundle is of store {sid}"),
        (["--from-bundle", str(bundle), "--backup", str(bad_secret)], "not a gitmem secret file"),
        (["--from-bundle", str(bundle), "--max-memories", "3"], "--from-bundle takes the settings"),
        (["--backup", str(files)], "go with --from-bundle"),
    ]
    for args, message in cases:
        r = gm("store", "create", "notes", *args)
        assert (r.exit_code, message in r.stderr) == (2, True), (args, r.output)
        assert stores_of(home) == []


def test_a_backup_newer_than_the_bundle_is_refused(
    filled: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle, files = backup(filled, tmp_path)
    filled.update_settings(description="changed after the export", actor="user:alice")
    shutil.copy2(filled.path / "gitmem" / "ledger_head", files)  # the anchor names an entry the bundle lacks
    home = elsewhere(tmp_path, monkeypatch)
    r = gm("store", "create", "notes", "--from-bundle", str(bundle), "--backup", str(files))
    assert r.exit_code == 7 and "no longer holds entry" in r.stderr
    assert stores_of(home) == []


def test_an_existing_store_is_never_overwritten(filled: Store, tmp_path: Path) -> None:
    bundle, files = backup(filled, tmp_path)
    before = history(filled)
    r = gm("store", "create", "notes", "--from-bundle", str(bundle), "--backup", str(files))
    assert r.exit_code == 0, r.output  # next to its original: another store, a new id (docs/stores.md)
    assert history(filled) == before
    assert len({s.id for s in gitmem.list_stores(filled.path.parent.parent)}) == 2
