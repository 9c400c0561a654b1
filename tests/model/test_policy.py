"""Limits and integrity rules: refused writes raise the right error and write nothing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import gitmem
from gitmem.config import Limits, now_rfc3339
from gitmem.errors import ForbiddenError, InvalidInputError, LimitExceededError
from gitmem.model import policy
from gitmem.store import Store
from tests.helpers import fast_workspace, snapshot


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from fast_workspace(tmp_path, monkeypatch)


def test_memory_of_exactly_102400_bytes_is_accepted(store: Store) -> None:
    v = store.write("/big.txt", "x" * 102_400)
    assert v is not None
    assert store.read("/big.txt").size == 102_400


def test_memory_of_102401_bytes_is_refused_and_nothing_is_written(store: Store) -> None:
    store.write("/a.txt", "first")
    before = snapshot(store)
    with pytest.raises(LimitExceededError, match="102401 bytes"):
        store.write("/big.txt", "x" * 102_401)
    assert snapshot(store) == before


def test_oversize_update_of_existing_memory_is_refused(store: Store) -> None:
    store.write("/a.txt", "small")
    before = snapshot(store)
    with pytest.raises(LimitExceededError):
        store.write("/a.txt", "é" * 51_201)  # 102,402 bytes as UTF-8
    assert snapshot(store) == before
    assert store.read("/a.txt").content == "small"


def test_nul_byte_is_refused(store: Store) -> None:
    before = snapshot(store)
    with pytest.raises(InvalidInputError, match="NUL"):
        store.write("/a.txt", "a\0b")
    assert snapshot(store) == before


def test_invalid_utf8_is_refused(store: Store) -> None:
    before = snapshot(store)
    with pytest.raises(InvalidInputError, match="UTF-8"):
        store.write("/a.txt", b"caf\xe9")
    with pytest.raises(InvalidInputError):
        store.write("/b.txt", "lone \ud800 surrogate")
    assert snapshot(store) == before


def test_bad_path_writes_nothing(store: Store) -> None:
    before = snapshot(store)
    for path in (
        "../x",
        "/a/./b",
        "/a//b",
        "/a\x01b",
        "/e\u0301",
        "/.gitmem/x",
        "/" + "a" * 1024,
        "/.git/x",
        "/a/GIT~1",
    ):
        with pytest.raises(InvalidInputError):
            store.write(path, "x")
    assert snapshot(store) == before


def test_max_memories_is_per_scope(workspace: Path) -> None:
    s = gitmem.create_store("lim", limits=Limits(max_memories=2), home=workspace)
    s.write("/a", "1")
    s.write("/b", "2")
    before = snapshot(s)
    with pytest.raises(LimitExceededError, match="limit is 2"):
        s.write("/c", "3")
    assert snapshot(s) == before
    assert s.write("/c", "3", scope="other") is not None  # another scope has its own count
    assert s.write("/a", "changed") is not None  # replacing does not add a memory


def test_delete_frees_a_memory_slot(workspace: Path) -> None:
    s = gitmem.create_store("lim", limits=Limits(max_memories=1), home=workspace)
    s.write("/a", "1")
    s.delete("/a")
    assert s.write("/b", "2") is not None


def test_max_store_bytes_counts_every_scope(workspace: Path) -> None:
    s = gitmem.create_store("lim", limits=Limits(max_store_bytes=10), home=workspace)
    s.write("/a", "12345", scope="main")
    s.write("/a", "1234", scope="team")
    before = snapshot(s)
    with pytest.raises(LimitExceededError, match="limit is 10"):
        s.write("/b", "12", scope="third")
    assert snapshot(s) == before
    assert s.write("/b", "1", scope="third") is not None  # exactly 10 bytes is fine


def test_shrinking_a_memory_is_allowed_over_store_limit(workspace: Path) -> None:
    s = gitmem.create_store("lim", limits=Limits(max_store_bytes=10), home=workspace)
    s.write("/a", "1234567890")
    assert s.write("/a", "123") is not None
    assert s.write("/b", "1234567") is not None
    with pytest.raises(LimitExceededError):
        s.write("/b", "12345678")


def test_max_path_bytes_is_a_limit(workspace: Path) -> None:
    s = gitmem.create_store("lim", limits=Limits(max_path_bytes=8), home=workspace)
    assert s.write("/1234567", "x") is not None
    with pytest.raises(LimitExceededError, match="limit is 8"):
        s.write("/12345678", "x")


def test_archived_store_refuses_every_write(store: Store) -> None:
    """Every write of new content; deleting (erasure, like redaction) stays possible."""
    v = store.write("/a.txt", "one")
    assert v is not None
    store.update_settings(archived_at=now_rfc3339())
    before = snapshot(store)
    for call in (
        lambda: store.write("/b.txt", "x"),
        lambda: store.create("/c.txt", "x"),
        lambda: store.str_replace("/a.txt", "one", "two"),
        lambda: store.insert("/a.txt", 0, "top"),
        lambda: store.rename("/a.txt", "/z.txt"),
        lambda: store.restore(v.id),
        lambda: store.update_settings(description="x"),
    ):
        with pytest.raises(ForbiddenError, match="archived"):
            call()
    assert snapshot(store) == before
    assert store.read("/a.txt").content == "one"  # reads still work


def test_archived_store_stays_archived_when_reopened(store: Store, workspace: Path) -> None:
    store.update_settings(archived_at=now_rfc3339())
    reopened = gitmem.open_store("notes", home=workspace)
    with pytest.raises(ForbiddenError):
        reopened.write("/a", "x")


def test_check_content_reports_every_problem_at_once() -> None:
    v = policy.check_content("/a", b"\0" * 11, Limits(max_memory_bytes=10))
    assert [x.rule for x in v] == ["max_memory_bytes", "nul"]
    assert v[0].limit == 10 and v[0].actual == 11 and v[0].path == "/a"


@pytest.mark.parametrize(
    ("mode", "ok"), [(0o100644, True), (0o100755, False), (0o120000, False), (0o160000, False)]
)
def test_check_mode_accepts_only_plain_files(mode: int, ok: bool) -> None:
    assert (policy.check_mode("/a", mode) == []) is ok


def test_check_memory_count_and_store_bytes_boundaries() -> None:
    limits = Limits(max_memories=3, max_store_bytes=100)
    assert policy.check_memory_count("main", 3, limits) == []
    assert policy.check_memory_count("main", 4, limits)[0].rule == "max_memories"
    assert policy.check_store_bytes(100, limits) == []
    assert policy.check_store_bytes(101, limits)[0].actual == 101


def test_raise_first_maps_rules_to_error_classes() -> None:
    with pytest.raises(LimitExceededError):
        policy.raise_first(policy.check_store_bytes(2, Limits(max_store_bytes=1)))
    with pytest.raises(ForbiddenError):
        policy.raise_first(policy.check_archived("2026-01-01T00:00:00Z", "s"))
    with pytest.raises(InvalidInputError):
        policy.raise_first(policy.check_path("/a/../b", Limits()))
    policy.raise_first([])
