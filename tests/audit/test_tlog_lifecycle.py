"""The transparency log through the lifecycle (docs/transparency.md#lifecycle): clone and fetch carry
``refs/gitmem/checkpoints``; a bundle restore with the log key continues the log, without it starts
a new log identity; a crash between the ledger append and its checkpoint heals at the next append."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gitmem
from gitmem.audit import transparency
from gitmem.audit.verify import verify
from gitmem.cli.app import app
from gitmem.engine import checkpoints, ledger
from gitmem.model.tlog import note
from gitmem.model.tlog.checkpoint import parse_body
from gitmem.push.clone import clone, fetch
from gitmem.store import Store


def gm(*args: str) -> object:
    return CliRunner().invoke(app, list(args))


def _size(core: object) -> int:
    return parse_body(note.parse(checkpoints.current(core)["checkpoint"]).text).size  # type: ignore[arg-type]


def test_clone_and_fetch_carry_the_checkpoints(store: Store, tmp_path: Path) -> None:
    ledger.append(store.core, "flag", {"n": 1})
    r = clone("notes", tmp_path / "c")
    assert checkpoints.CHECKPOINTS_REF in r.gitmem_refs
    ledger.append(store.core, "flag", {"n": 2})
    fetch(tmp_path / "c")
    with gitmem.open_store(tmp_path / "c") as c:
        assert _size(c.core) == 3 and transparency.check(c.core) == []
        assert verify(c.core).ok


def _export(store: Store, tmp_path: Path, with_key: bool) -> tuple[Path, Path]:
    bundle, files = tmp_path / "notes.bundle", tmp_path / "backup"
    assert gm("export", str(store.path), "--format", "bundle", "-o", str(bundle)).exit_code == 0  # type: ignore[attr-defined]
    files.mkdir()
    shutil.copy2(store.path / "gitmem.yaml", files)
    for name in ("secret", "denylist", "ledger_head"):
        if (store.path / "gitmem" / name).exists():
            shutil.copy2(store.path / "gitmem" / name, files)
    if with_key:
        shutil.copy2(store.path / "gitmem" / "tlog" / "log.key", files)
    return bundle, files


@pytest.mark.parametrize("with_key", [True, False])
def test_restore_continues_the_log_with_its_key_or_starts_a_new_one(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, with_key: bool
) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    ledger.append(store.core, "flag", {"n": 1})
    vkey, old = transparency.log_vkey(store.core), checkpoints.history(store.core)
    bundle, files = _export(store, tmp_path, with_key)
    home = tmp_path / "elsewhere"
    monkeypatch.setenv("GITMEM_HOME", str(home))
    r = gm("store", "create", "notes", "--from-bundle", str(bundle), "--backup", str(files))
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    with gitmem.open_store("notes", home=home) as s:
        assert transparency.check(s.core) == []
        history = checkpoints.history(s.core)
        assert (transparency.log_vkey(s.core) == vkey) is with_key
        assert (history[: len(old)] == old) is with_key  # continued, or a new log from the restore on
        assert _size(s.core) == len(ledger.entries(s.core))


def test_a_checkpoint_lost_in_a_crash_is_signed_by_the_next_append(store: Store) -> None:
    def boom(*a: object, **k: object) -> str:
        raise OSError("disk full")

    real = checkpoints.on_append
    checkpoints.on_append = boom  # type: ignore[assignment]
    try:
        ledger.append(store.core, "flag", {"n": 1})
    finally:
        checkpoints.on_append = real  # type: ignore[assignment]
    assert any("signing a checkpoint failed" in p for p in transparency.check(store.core))
    ledger.append(store.core, "flag", {"n": 2})
    assert _size(store.core) == 3 and transparency.check(store.core) == []


def test_a_store_from_before_checkpoints_verifies_and_its_next_append_signs_all(store: Store) -> None:
    ledger.append(store.core, "flag", {"n": 1})
    store.core.repo.references.delete(checkpoints.CHECKPOINTS_REF)
    for name in ("state.json", "leaves"):
        (store.core.gitmem_dir / "tlog" / name).unlink(missing_ok=True)
    assert transparency.check(store.core) == []
    ledger.append(store.core, "flag", {"n": 2})
    assert _size(store.core) == 3 and transparency.check(store.core) == []
    verify(store.core)
    store.core.repo.references.delete(checkpoints.CHECKPOINTS_REF)  # now that it was seen: reported
    assert transparency.check(store.core) == [
        "refs/gitmem/checkpoints is gone, although checkpoints were seen here before"
    ]
