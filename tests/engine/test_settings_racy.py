"""A long-lived handle sees a settings edit made in place within one tick of the file clock (same
size, time stamp and inode as the version it read): git's "racy" rule (gitmem/engine/core.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import gitmem
from gitmem import config
from tests.helpers import edit_in_place


def test_an_in_place_edit_in_the_same_tick_is_seen(workspace: Path) -> None:
    store = gitmem.create_store("racy", description="aaaa", home=workspace)
    settings_file = store.path / config.SETTINGS_FILE
    store.update_settings(description="aaaa")  # written now: the handle reads a fresh file
    assert store.core.settings.description == "aaaa"
    edit_in_place(settings_file, b"aaaa", b"bbbb")
    assert store.core.settings.description == "bbbb"
    store.close()


def test_an_acl_tightened_in_place_takes_effect_at_once(workspace: Path) -> None:
    store = gitmem.create_store("racy-acl", home=workspace)
    store.update_settings(acl={"write": {"main": ["user:aaaa"]}})
    store.write("/x", "allowed\n", actor="user:aaaa")
    edit_in_place(store.path / config.SETTINGS_FILE, b"user:aaaa", b"user:bbbb")
    with pytest.raises(gitmem.errors.ForbiddenError):
        store.write("/y", "no longer allowed\n", actor="user:aaaa")
    store.close()


def test_an_old_settings_file_is_not_read_again(workspace: Path) -> None:
    """Outside the racy window nothing but one stat is paid (the file is not opened)."""
    store = gitmem.create_store("calm", home=workspace)
    settings_file = store.path / config.SETTINGS_FILE
    old = settings_file.stat().st_mtime_ns - 10_000_000_000
    os.utime(settings_file, ns=(old, old))
    store.core.reload_settings()
    opened: list[str] = []
    real_open = open

    def spy(file: object, *a: object, **k: object) -> object:
        opened.append(str(file))
        return real_open(file, *a, **k)  # type: ignore[call-overload]

    import builtins

    builtins.open = spy  # type: ignore[assignment]
    try:
        for _ in range(3):
            assert store.core.settings.name == "calm"
    finally:
        builtins.open = real_open
    assert str(settings_file) not in opened
    store.close()
