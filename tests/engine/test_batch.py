"""Batches: many versions, one ref move; all or nothing unless ``skip_refused``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import gitmem
from gitmem.config import Limits
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import LimitExceededError, NotFoundError, PathConflictError, PreconditionFailedError
from gitmem.store import Store
from tests.helpers import commit_count, fast_workspace, snapshot, tip_hex


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from fast_workspace(tmp_path, monkeypatch)


def test_batch_makes_one_version_per_op_and_moves_branch_to_last(store: Store) -> None:
    store.write("/old", "x")
    result = apply_batch(
        store.core,
        [
            BatchOp("write", "/a", "1"),
            BatchOp("create", "/b", "2", description="bee"),
            BatchOp("rename", "/old", new_path="/moved"),
            BatchOp("delete", "/a"),
        ],
        actor="service:import",
    )
    assert [v.operation for v in result.versions] == ["created", "created", "modified", "deleted"]
    assert result.commit == tip_hex(store)
    assert commit_count(store) == 5
    assert [m.path for m in store.list()] == ["/b", "/moved"]
    assert store.read("/b").description == "bee"
    assert {v.actor for v in result.versions} == {"service:import"}


def test_batch_versions_match_history(store: Store) -> None:
    result = apply_batch(store.core, [BatchOp("write", "/a", "1"), BatchOp("write", "/a", "2")], session="s9")
    assert [v.id for v in store.versions("/a")] == [v.id for v in reversed(result.versions)]
    assert [v.session for v in store.versions(session="s9")] == ["s9", "s9"]


def test_batch_skips_no_ops(store: Store) -> None:
    store.write("/a", "same")
    result = apply_batch(store.core, [BatchOp("write", "/a", "same"), BatchOp("write", "/b", "new")])
    assert [v.path for v in result.versions] == ["/b"]
    before = snapshot(store)
    empty = apply_batch(store.core, [BatchOp("write", "/a", "same")])
    assert empty.versions == [] and empty.commit == tip_hex(store)
    assert snapshot(store) == before


def test_refused_op_aborts_whole_batch_and_writes_no_ref(store: Store) -> None:
    store.write("/a", "x")
    before_tip = tip_hex(store)
    with pytest.raises(PathConflictError):
        apply_batch(store.core, [BatchOp("write", "/b", "1"), BatchOp("create", "/a", "dup")])
    assert tip_hex(store) == before_tip
    with pytest.raises(NotFoundError):
        store.read("/b")


def test_skip_refused_reports_and_applies_the_rest(store: Store) -> None:
    store.write("/a", "x")
    result = apply_batch(
        store.core,
        [BatchOp("create", "/a", "dup"), BatchOp("write", "/b", "1"), BatchOp("write", "/c/../d", "bad")],
        skip_refused=True,
    )
    assert [v.path for v in result.versions] == ["/b"]
    assert [(r.op.path, type(r.error).__name__) for r in result.refused] == [
        ("/a", "PathConflictError"),
        ("/c/../d", "InvalidInputError"),
    ]


def test_later_ops_see_earlier_ones(store: Store) -> None:
    result = apply_batch(
        store.core,
        [BatchOp("create", "/a", "1"), BatchOp("rename", "/a", new_path="/b"), BatchOp("write", "/b", "2")],
    )
    assert len({v.memory_id for v in result.versions}) == 1
    assert store.read("/b").content == "2"


def test_batch_memory_limit_counts_ops_in_the_batch(workspace: Path) -> None:
    s = gitmem.create_store("lim", limits=Limits(max_memories=2), home=workspace)
    s.write("/a", "1")
    before = snapshot(s)
    with pytest.raises(LimitExceededError):
        apply_batch(s.core, [BatchOp("write", "/b", "2"), BatchOp("write", "/c", "3")])
    assert snapshot(s)[0] == before[0]  # the ref did not move
    result = apply_batch(
        s.core, [BatchOp("delete", "/a"), BatchOp("write", "/b", "2"), BatchOp("write", "/c", "3")]
    )
    assert len(result.versions) == 3


def test_batch_store_bytes_limit_counts_ops_in_the_batch(workspace: Path) -> None:
    s = gitmem.create_store("lim", limits=Limits(max_store_bytes=5), home=workspace)
    with pytest.raises(LimitExceededError):
        apply_batch(s.core, [BatchOp("write", "/a", "123"), BatchOp("write", "/b", "456")])
    assert s.core.tip("main") is None


def test_batch_progress_callback_is_called(store: Store) -> None:
    seen: list[tuple[int, int]] = []
    apply_batch(
        store.core,
        [BatchOp("write", f"/m{i}", str(i)) for i in range(3)],
        progress=lambda n, t: seen.append((n, t)),
    )
    assert seen == [(1, 3), (2, 3), (3, 3)]


def test_batch_create_can_revive_a_memory_id(store: Store) -> None:
    v = store.write("/a", "1")
    store.delete("/a")
    result = apply_batch(store.core, [BatchOp("create", "/a", "1", memory_id=v.memory_id)])  # type: ignore[union-attr]
    assert result.versions[0].memory_id == v.memory_id  # type: ignore[union-attr]
    assert store.read("/a").memory_id == v.memory_id  # type: ignore[union-attr]


def test_batch_write_with_if_sha256_of_missing_memory_conflicts(store: Store) -> None:
    # Regression: the batch created the memory, while Store.write refuses (nothing to match).
    with pytest.raises(PreconditionFailedError):
        apply_batch(store.core, [BatchOp("write", "/a", "x", if_sha256="a" * 64)])
    assert store.core.tip("main") is None


def test_batch_if_sha256_mismatch_on_delete_and_rename(store: Store) -> None:
    store.write("/a", "x")
    for op in (
        BatchOp("delete", "/a", if_sha256="a" * 64),
        BatchOp("rename", "/a", new_path="/b", if_sha256="a" * 64),
    ):
        with pytest.raises(PreconditionFailedError):
            apply_batch(store.core, [op])
    assert [m.path for m in store.list()] == ["/a"]
