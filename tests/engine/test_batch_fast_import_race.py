"""A batch planned on a scope's tip while a redaction rewrites that scope (and purges the old tip):
the pipeline re-plans on the new tip (gitmem.engine.pipeline.commit, a lost compare-and-swap).
A batch of FAST_IMPORT_MIN changes or more is written by git fast-import from the tip it planned on,
which the purge removed: it is looked for first (gitmem.git.fastimport.NotWritten), and a
fast-import that dies on it anyway is the same lost race, its crash report removed. The re-planned
chain is checked against the deny-list before fast-import writes its pack."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pygit2
import pytest

import gitmem
from gitmem.audit import redact
from gitmem.audit.verify import verify
from gitmem.engine import pipeline
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import ForbiddenError
from gitmem.git import fastimport
from gitmem.store import Store

SECRET = "fast import secret 8812\n"


def _redact_first(store: Store, version_id: str, ran: list[bool], real: Any) -> Any:
    """``real``, with a redaction of ``version_id`` from another handle (as another process) run
    once before the first call: after the plan, before its objects."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not ran:
            ran.append(True)
            with gitmem.open_store(str(store.path)) as other:
                redact.redact(other.core, version_id, reason="leak", actor="user:admin")
        return real(*args, **kwargs)

    return wrapped


def _count_fast_imports(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per run of git fast-import (each streams its commits once)."""
    runs: list[int] = []
    real: Callable[..., bytes] = fastimport._stream

    def counted(*args: Any) -> bytes:
        runs.append(1)
        return real(*args)

    monkeypatch.setattr(fastimport, "_stream", counted)
    return runs


def _settled(store: Store) -> None:
    report = verify(store.core, raise_on_failure=False)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert not list(store.path.glob("fast_import_crash_*"))


def _race(store: Store, monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    ops = [BatchOp("write", f"/f{i % 5}.md", content=f"n {i}\n") for i in range(n)]
    ran: list[bool] = []
    monkeypatch.setattr(pipeline, "write_commits", _redact_first(store, v.id, ran, pipeline.write_commits))
    monkeypatch.setattr(pipeline, "commit_change", _redact_first(store, v.id, ran, pipeline.commit_change))
    result = apply_batch(store.core, ops, scope="main", actor="user:alice")
    assert ran and len(result.versions) == n
    assert store.read("/f0.md").content == f"n {n - 5}\n"
    _settled(store)


def test_control_a_small_batch_racing_a_redaction_is_re_planned(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _race(store, monkeypatch, 10)


def test_a_fast_import_batch_racing_a_redaction_is_re_planned(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _race(store, monkeypatch, pipeline.FAST_IMPORT_MIN)


def test_a_parent_purged_between_the_look_and_fast_import_is_a_lost_race(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The purge lands after the parent was found: fast-import dies on it ("Not a valid commit"),
    which is the same lost race, and its crash report does not stay in $GIT_DIR."""
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    monkeypatch.setattr(pipeline, "FAST_IMPORT_MIN", 20)
    ran: list[bool] = []
    real = fastimport._present

    def found_then_purged(git_dir: str, commit: pygit2.Oid) -> bool:
        here = real(git_dir, commit)
        if not ran:
            _redact_first(store, v.id, ran, lambda: None)()
        return here

    monkeypatch.setattr(fastimport, "_present", found_then_purged)
    runs = _count_fast_imports(monkeypatch)
    ops = [BatchOp("write", f"/f{i % 5}.md", content=f"n {i}\n") for i in range(30)]
    result = apply_batch(store.core, ops, scope="main", actor="user:alice")
    assert ran and len(runs) == 2 and len(result.versions) == 30
    assert store.read("/f4.md").content == "n 29\n"
    _settled(store)


def test_a_re_planned_fast_import_batch_refuses_the_content_redacted_from_its_scope(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch holds the bytes its own scope's redaction deny-lists meanwhile: re-planned, that
    write is refused and no pack of the batch holds them."""
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    monkeypatch.setattr(pipeline, "FAST_IMPORT_MIN", 20)
    ran: list[bool] = []
    monkeypatch.setattr(pipeline, "write_commits", _redact_first(store, v.id, ran, pipeline.write_commits))
    runs = _count_fast_imports(monkeypatch)
    ops = [BatchOp("write", f"/f{i}.md", content=f"n {i}\n") for i in range(30)]
    ops.append(BatchOp("write", "/again.md", content=SECRET))
    result = apply_batch(store.core, ops, scope="main", actor="user:alice", skip_refused=True)
    assert ran and len(runs) == 1 and len(result.versions) == 30
    assert [(r.op.path, type(r.error)) for r in result.refused] == [("/again.md", ForbiddenError)]
    assert pygit2.Repository(str(store.path)).get(pygit2.hash(SECRET.encode())) is None
    _settled(store)


def test_a_fast_import_batch_is_checked_against_the_deny_list_before_its_pack(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another scope's redaction deny-lists bytes the batch holds after its plan (its own tip stays):
    fast-import does not write them then (the purge removed that copy); the batch is made again
    under the purge lock (docs/redaction.md, "A write racing the purge") and publishes them."""
    v = store.write("/t.md", SECRET, actor="user:alice", scope="team")
    store.write("/t.md", "rotated\n", actor="user:alice", scope="team")
    assert v is not None and store.write("/m.md", "main\n", actor="user:alice") is not None
    main = store.core.tip("main")
    monkeypatch.setattr(pipeline, "FAST_IMPORT_MIN", 20)
    ran: list[bool] = []
    monkeypatch.setattr(pipeline, "write_commits", _redact_first(store, v.id, ran, pipeline.write_commits))
    runs = _count_fast_imports(monkeypatch)
    ops = [BatchOp("write", f"/f{i}.md", content=f"n {i}\n") for i in range(30)]
    ops.append(BatchOp("write", "/copy.md", content=SECRET))
    result = apply_batch(store.core, ops, scope="main", actor="user:alice")
    assert ran and len(result.versions) == 31
    assert len(runs) == 1  # not once before the purge lock, once under it
    assert store.core.commit(result.versions[0].commit).parent_ids == [main]
    assert store.read("/copy.md").content == SECRET
    _settled(store)
