"""Adversarial checks of the planners' cached old content (gitmem/git/blobs.py, ScopeState.blob,
BatchState._base_blob): no plan may see a path's content from before an earlier change of the
same batch, group or retry (a precondition passing on stale content, an 'unchanged' shortcut
skipping a write or a screen)."""

from __future__ import annotations

import hashlib
import threading
from typing import Any

import pytest

from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.engine.history import version_content
from gitmem.errors import GitmemError, GuardRejectedError, PreconditionFailedError
from tests.helpers import run_threads

TOKEN = "ghp_" + "aB3dE5fG7hJ9kL2mN4pQ6rS8tU0vW1xY3zA5"


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_batch_precondition_sees_the_batchs_own_earlier_change(store: Any) -> None:
    store.write("/a.md", "one")
    with pytest.raises(PreconditionFailedError):
        apply_batch(
            store.core,
            [BatchOp("write", "/a.md", "two"), BatchOp("write", "/a.md", "three", if_sha256=sha("one"))],
        )
    result = apply_batch(
        store.core,
        [BatchOp("write", "/a.md", "two"), BatchOp("write", "/a.md", "three", if_sha256=sha("two"))],
    )
    assert len(result.versions) == 2 and store.read("/a.md").content == "three"


def test_a_batch_writing_back_the_tip_content_after_a_change_writes_it(store: Any) -> None:
    store.write("/a.md", "one")
    result = apply_batch(store.core, [BatchOp("write", "/a.md", "two"), BatchOp("write", "/a.md", "one")])
    assert len(result.versions) == 2 and store.read("/a.md").content == "one"


def test_delete_then_recreate_and_rename_chains_see_the_planned_tree(store: Any) -> None:
    store.write("/a.md", "one")
    result = apply_batch(
        store.core,
        [
            BatchOp("delete", "/a.md"),
            BatchOp("write", "/a.md", "one"),  # the same bytes as the tip, after a delete: a version
            BatchOp("rename", "/a.md", new_path="/b.md"),
            BatchOp("write", "/b.md", "one"),  # unchanged at its new path: nothing
            BatchOp("write", "/a.md", "fresh"),
        ],
    )
    assert [v.operation for v in result.versions] == ["deleted", "created", "modified", "created"]
    assert store.read("/b.md").content == "one" and store.read("/a.md").content == "fresh"
    with pytest.raises(PreconditionFailedError):
        apply_batch(
            store.core,
            [
                BatchOp("rename", "/b.md", new_path="/c.md"),
                BatchOp("write", "/b.md", "x", if_sha256=sha("one")),
            ],
        )


def test_concurrent_group_committed_preconditions_let_one_writer_win(store: Any) -> None:
    store.write("/a.md", "base")
    wins: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def writer(n: int) -> None:
        barrier.wait()
        try:
            store.write("/a.md", f"writer {n}", if_sha256=sha("base"))
            wins.append(n)
        except PreconditionFailedError:
            pass
        except GitmemError as exc:
            errors.append(exc)

    run_threads(writer, 6)
    assert not errors and len(wins) == 1
    assert store.read("/a.md").content == f"writer {wins[0]}"


def test_a_group_screens_each_rewrite_against_the_planned_content(store: Any) -> None:
    """Threads rewriting one path in one group: a request whose content equals an earlier
    request's planned content is not screened against the tip's, and a secret is never stored."""
    store.write("/a.md", "base")
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def writer(n: int) -> None:
        barrier.wait()
        text = f"note {n}" + (f" {TOKEN}" if n % 2 else "")
        try:
            store.write("/a.md", text)
            assert n % 2 == 0
        except GuardRejectedError:
            pass
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    run_threads(writer, 4)
    assert not errors
    for v in store.versions("/a.md"):
        assert TOKEN.encode() not in (version_content(store.core, v.id) or b"")


def _update_by_id(store: Any, memory_id: str, content: str, if_sha256: str | None = None) -> Any:
    return store.update_by_id(memory_id, content=content, if_sha256=if_sha256, actor="user:a")


def test_updates_by_memory_id_group_committed_together_resolve_on_the_planned_content(store: Any) -> None:
    """The server's updates by memory id, planned in one group after another write of the same
    memory: the earlier write's planned content (not a stored blob, no id) must not crash the plan,
    and a precondition on the tip's content must not pass over it (one winner)."""
    memory_id = store.write("/a.md", "base").memory_id
    errors: list[BaseException] = []
    wins: list[int] = []
    barrier = threading.Barrier(6)

    def writer(n: int) -> None:
        barrier.wait()
        try:
            _update_by_id(store, memory_id, f"writer {n}", if_sha256=sha("base"))
            wins.append(n)
        except PreconditionFailedError:
            pass
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    for _round in range(3):
        store.write("/a.md", "base")
        wins.clear()
        barrier.reset()
        run_threads(writer, 6)
        assert not errors, errors[0]
        assert len(wins) == 1 and store.read("/a.md").content == f"writer {wins[0]}"


def test_concurrent_updates_by_memory_id_all_land(store: Any) -> None:
    memory_id = store.write("/a.md", "base").memory_id
    errors: list[BaseException] = []
    barrier = threading.Barrier(6)

    def writer(n: int) -> None:
        barrier.wait()
        for k in range(5):
            try:
                _update_by_id(store, memory_id, f"writer {n} {k}")
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

    run_threads(writer, 6)
    assert not errors, errors[0]
    assert len(store.versions("/a.md")) == 1 + 6 * 5
