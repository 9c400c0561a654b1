"""Workspace location, store settings validation (errors name the file and key), store lifecycle."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import yaml

import gitmem
from gitmem import config
from gitmem.config import Limits, Retention, load_settings, save_settings, settings_from_dict, workspace_home
from gitmem.errors import ConfigError, InvalidInputError, NotFoundError
from gitmem.store import Store


def test_workspace_home_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITMEM_HOME", str(tmp_path / "env"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert workspace_home(tmp_path / "arg") == tmp_path / "arg"
    assert workspace_home() == tmp_path / "env"
    monkeypatch.delenv("GITMEM_HOME")
    assert workspace_home() == tmp_path / "xdg" / "gitmem"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert workspace_home() == Path.home() / ".local" / "share" / "gitmem"


def test_create_store_writes_settings_outside_the_tree(store: Store, workspace: Path) -> None:
    assert store.path == workspace / "stores" / f"{store.id}.git"  # the directory follows the id
    s = load_settings(store.path / "gitmem.yaml")
    assert s.name == "notes" and s.description == "Test notes" and s.id.startswith("memstore_")
    assert s.limits == Limits() and s.retention == Retention() and s.archived_at is None
    assert store.core.repo.is_bare


def test_settings_round_trip(tmp_path: Path) -> None:
    s = settings_from_dict(
        {"id": "memstore_x", "name": "n", "metadata": {"k": "v"}, "limits": {"max_memories": 5}}, "src"
    )
    save_settings(tmp_path / "g.yaml", s)
    assert load_settings(tmp_path / "g.yaml") == s


def test_the_settings_cache_never_keeps_a_file_younger_than_its_racy_window(tmp_path: Path) -> None:
    """An edit in place of the same size within the time stamp's tick keeps inode, size and mtime:
    only a file old enough to have had its last such edit is cached (git's racy files)."""
    path, cache = tmp_path / "g.yaml", tmp_path / "settings.json"
    save_settings(path, settings_from_dict({"id": "memstore_x", "name": "aaaa"}, "src"))
    assert config.load_settings_cached(path, cache).name == "aaaa"
    assert not cache.exists()  # just written: read, not cached
    st = path.stat()
    path.write_text(path.read_text().replace("aaaa", "bbbb"))  # in place, same size, same stamp
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_ino, path.stat().st_size) == (st.st_ino, st.st_size)
    assert config.load_settings_cached(path, cache).name == "bbbb"
    old = time.time() - 3600
    os.utime(path, (old, old))
    assert config.load_settings_cached(path, cache).name == "bbbb" and cache.exists()
    path.write_text(path.read_text().replace("bbbb", "cccc"))  # a later edit: a new stamp
    assert config.load_settings_cached(path, cache).name == "cccc"


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"name": "n"}, "'id'"),
        ({"id": "x", "name": "n", "colour": "red"}, "'colour'"),
        ({"id": "x", "name": "n", "limits": {"max_memories": 0}}, "'limits.max_memories'"),
        ({"id": "x", "name": "n", "limits": {"max_memories": True}}, "'limits.max_memories'"),
        ({"id": "x", "name": "n", "limits": {"max_memory_bytes": "big"}}, "'limits.max_memory_bytes'"),
        ({"id": "x", "name": "n", "limits": {"speed": 1}}, "'limits.speed'"),
        ({"id": "x", "name": "n", "limits": [1]}, "'limits'"),
        ({"id": "x", "name": "n", "retention": {"min_days": -1}}, "'retention.min_days'"),
        ({"id": "x", "name": "n", "description": "d" * 1025}, "'description'"),
        ({"id": "x", "name": "n", "metadata": {str(i): "v" for i in range(17)}}, "'metadata'"),
        ({"id": "x", "name": "n", "archived_at": 5}, "'archived_at'"),
        ({"id": "x", "name": "n", "require_trailers": "yes"}, "'require_trailers'"),
        ({"id": "x", "name": "n", "acl": []}, "'acl'"),
        ({"id": "x", "name": "n", "metadata": []}, "'metadata'"),
        ({"id": "x", "name": "n", "metadata": {"k": 5}}, "'metadata'"),
    ],
)
def test_bad_settings_name_the_file_and_key(data: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        settings_from_dict(data, "/stores/x.git/gitmem.yaml")
    assert "/stores/x.git/gitmem.yaml" in err.value.message and key in err.value.message


def test_retention_max_days_may_be_null() -> None:
    s = settings_from_dict({"id": "x", "name": "n", "retention": {"max_days": None, "keep_recent": 3}}, "s")
    assert s.retention == Retention(max_days=None, keep_recent=3)


def test_malformed_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "gitmem.yaml"
    p.write_text("id: x\nname: [unclosed\n")
    with pytest.raises(ConfigError, match=rf"{p}: not valid YAML \(line \d+\)"):
        load_settings(p)


def test_missing_and_non_mapping_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="missing"):
        load_settings(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- a\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_settings(tmp_path / "list.yaml")


def test_store_with_malformed_settings_refuses_writes_and_changes_nothing(
    store: Store, workspace: Path
) -> None:
    store.write("/a", "x")
    tip = store.core.tip("main")
    store.close()
    settings = store.path / "gitmem.yaml"
    data = yaml.safe_load(settings.read_text())
    data["limits"] = {"max_memory_bytes": -5}
    settings.write_text(yaml.safe_dump(data))
    s = gitmem.open_store("notes", home=workspace)
    with pytest.raises(ConfigError, match="limits.max_memory_bytes"):
        s.write("/b", "y")
    assert s.core.tip("main") == tip
    s.close()


def test_update_settings_validates_before_saving(store: Store) -> None:
    before = store.core.settings_path.read_text()
    with pytest.raises(ConfigError):
        store.update_settings(limits={"max_memories": 0})
    assert store.core.settings_path.read_text() == before
    store.update_settings(description="new", limits=Limits(max_memories=7))
    assert load_settings(store.core.settings_path).limits.max_memories == 7


def test_store_limits_are_read_from_settings(store: Store) -> None:
    store.update_settings(limits=Limits(max_memory_bytes=3))
    with pytest.raises(gitmem.LimitExceededError):
        store.write("/a", "four")


def test_create_store_refuses_bad_names_and_takes_free_text(store: Store, workspace: Path) -> None:
    for name in ("", "x" * 256, "tab\there", "nl\n", "nul\x00", "bell\x07", "del\x7f"):
        with pytest.raises(InvalidInputError):
            gitmem.create_store(name, home=workspace)
    before = sorted(p.name for p in (workspace / "stores").iterdir())
    with pytest.raises(InvalidInputError):
        gitmem.create_store("other", description="d" * 1025, home=workspace)
    assert sorted(p.name for p in (workspace / "stores").iterdir()) == before
    # Names are display names: free text, and not unique (each store its own id and directory).
    for name in ("Bad", "-x", "a/b", "x.git", "notes", "Customer Support Memory (EU)", "é" * 255):
        with gitmem.create_store(name, home=workspace) as made:
            assert made.name == name and made.path.name == f"{made.id}.git"
    assert len([s for s in gitmem.list_stores(home=workspace) if s.name == "notes"]) == 2


def test_list_open_and_delete_stores(store: Store, workspace: Path) -> None:
    gitmem.create_store("b-store", home=workspace).close()
    assert [s.name for s in gitmem.list_stores(home=workspace)] == ["b-store", "notes"]
    gitmem.delete_store("b-store", home=workspace)
    assert [s.name for s in gitmem.list_stores(home=workspace)] == ["notes"]
    with pytest.raises(NotFoundError):
        gitmem.open_store("b-store", home=workspace)
    with pytest.raises(NotFoundError):
        gitmem.delete_store("b-store", home=workspace)


def test_open_store_by_path_and_unknown_paths(store: Store, tmp_path: Path) -> None:
    s = gitmem.open_store(str(store.path))
    assert s.path == store.path and not s.is_clone
    s.close()
    with pytest.raises(NotFoundError):
        gitmem.open_store(str(tmp_path / "nothing.git"))
    plain = tmp_path / "plain.git"
    import pygit2

    pygit2.init_repository(str(plain), bare=True)
    with pytest.raises(NotFoundError, match="not a gitmem store"):
        gitmem.open_store(str(plain))


def test_env_reads_only_non_empty_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITMEM_ACTOR", "")
    assert config.env("GITMEM_ACTOR") is None
    monkeypatch.setenv("GITMEM_ACTOR", "user:x")
    assert config.env("GITMEM_ACTOR") == "user:x"


@pytest.mark.parametrize(
    "line", ["archived_at: 2026-02-30", "created_at: !!float x", "limits: " + "[" * 600 + "]" * 600]
)
def test_yaml_that_fails_to_construct_is_a_config_error(tmp_path: Path, line: str) -> None:
    # Regression: ValueError / RecursionError escaped instead of naming the file.
    p = tmp_path / "gitmem.yaml"
    p.write_text(f"id: x\nname: n\n{line}\n")
    with pytest.raises(ConfigError, match=str(p)):
        load_settings(p)


def test_timestamp_like_values_survive_a_save_and_load(tmp_path: Path) -> None:
    s = settings_from_dict(
        {"id": "x", "name": "n", "archived_at": "2026-01-01", "description": "2026-01-01"}, "s"
    )
    save_settings(tmp_path / "g.yaml", s)
    assert load_settings(tmp_path / "g.yaml") == s


@pytest.mark.parametrize(
    "kw",
    [
        {"limits": Limits(max_memories=0)},
        {"retention": Retention(min_days=-1)},
        {"limits": Limits(max_memory_bytes=-1)},
    ],
)
def test_create_store_with_invalid_limits_creates_nothing(workspace: Path, kw: dict[str, object]) -> None:
    # Regression: the store was created, and every later open failed on its settings file.
    with pytest.raises(ConfigError):
        gitmem.create_store("bad", home=workspace, **kw)  # type: ignore[arg-type]
    assert not (workspace / "stores" / "bad.git").exists()
    assert [p.name for p in (workspace / "stores").iterdir()] == []
