"""Loose objects are packed geometrically: by writes when they pile up, or by gitmem maintain."""

from __future__ import annotations

import os
import subprocess

import pytest
from typer.testing import CliRunner

from gitmem.cli.app import app
from gitmem.engine.core import StoreCore
from gitmem.store import Store


def _loose(store: Store) -> int:
    objects = store.path / "objects"
    return sum(len(os.listdir(d)) for d in objects.iterdir() if len(d.name) == 2)


def _packs(store: Store) -> int:
    return len(list((store.path / "objects" / "pack").glob("*.pack")))


def test_maintain_packs_loose_objects_and_keeps_unreachable_ones(store: Store) -> None:
    for i in range(5):
        store.write(f"/m{i}.md", f"memory {i}")
    pending = store.core.repo.create_blob(b"a concurrent writer's object, not yet referenced")
    assert _loose(store) > 5 and _packs(store) == 0
    assert CliRunner().invoke(app, ["maintain", "notes"]).exit_code == 0
    assert _packs(store) == 1 and _loose(store) == 0
    # Unreachable objects are packed too, never deleted: a concurrent writer may be about to use one.
    assert subprocess.run(["git", "cat-file", "-e", str(pending)], cwd=store.path).returncode == 0
    assert store.read("/m3.md").content == "memory 3"
    assert subprocess.run(["git", "fsck", "--strict"], cwd=store.path, capture_output=True).returncode == 0


def test_a_write_repacks_when_loose_objects_pile_up(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(StoreCore, "LOOSE_SAMPLE_LIMIT", 0)  # one loose object in objects/17 is "many"
    for i in range(400):  # each write adds ~5 objects: one lands in objects/17 within a few dozen
        store.write("/a.md", f"version {i}")
        if _packs(store):
            break
    assert _packs(store) == 1
    assert not (store.path / "objects" / "17").is_dir() or not any((store.path / "objects" / "17").iterdir())
    assert store.read("/a.md").content == f"version {i}"
