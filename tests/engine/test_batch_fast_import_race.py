"""A batch planned on a scope's tip while a redaction rewrites that scope (and purges the old tip):
the pipeline re-plans on the new tip (gitmem.engine.pipeline.commit, a lost compare-and-swap).
A batch of FAST_IMPORT_MIN changes or more is written by git fast-import from the tip it planned on,
which the purge removed: it is looked for first (gitmem.git.fastimport.NotWritten), and a
fast-import that dies on it anyway is the same lost race, its crash report removed. The re-planned
chain is checked against the deny-list before fast-import writes its pack."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pygit2
import pytest

import gitmem
from gitmem.audit import purge_order, redact
from gitmem.audit.verify import verify
from gitmem.engine import pipeline
from gitmem.engine.batch import BatchOp, BatchResult, apply_batch
from gitmem.errors import ForbiddenError
from gitmem.git import fastimport
from gitmem.git.locks import held_locks
from gitmem.model.caller import Caller
from gitmem.store import Store
from tests.helpers import CheckedThread, patience, wait_until

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


def _then(real: Callable[..., Any], after: Callable[[], Any]) -> Callable[..., Any]:
    """``real``, then ``after()``: hooked on the plan, ``after`` lands after the plan and before a
    fast-import chain takes the purge lock (gitmem.engine.pipeline.commit)."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = real(*args, **kwargs)
        after()
        return out

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
    monkeypatch.setattr(
        pipeline, "_plan", _then(pipeline._plan, _redact_first(store, v.id, ran, lambda: None))
    )
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
    which is the same lost race, and its crash report does not stay in $GIT_DIR. (The pipeline
    holds the purge lock shared over a fast-import chain, so no purge lands there; write_commits
    is called alone, as a writer without that lock.)"""
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    parent = store.core.tip("main")
    assert parent is not None
    ran: list[bool] = []
    real = fastimport._present

    def found_then_purged(git_dir: str, commit: pygit2.Oid) -> bool:
        here = real(git_dir, commit)
        if not ran:
            _redact_first(store, v.id, ran, lambda: None)()
        return here

    monkeypatch.setattr(fastimport, "_present", found_then_purged)
    runs = _count_fast_imports(monkeypatch)
    pending = [
        fastimport.Pending(f"m {i}\n", "user:alice", 1_700_000_000, [(f"f{i}.md", b"x\n")]) for i in range(3)
    ]
    with pytest.raises(fastimport.NotWritten):
        fastimport.write_commits(store.core, pending, parent)
    assert ran and len(runs) == 1 and store.core.tip("main") != parent
    assert store.core.repo.get(parent) is None
    _settled(store)


def _batch_redacted_after_its_plan(
    store: Store, monkeypatch: pytest.MonkeyPatch, version_id: str, path: str, **kw: Any
) -> tuple[list[int], BatchResult]:
    """A fast-import batch of 30 writes and one of SECRET at ``path`` to main, with the redaction
    of ``version_id`` (another handle) run once its plan is made; its fast-import runs, its result."""
    monkeypatch.setattr(pipeline, "FAST_IMPORT_MIN", 20)
    ran: list[bool] = []
    monkeypatch.setattr(
        pipeline, "_plan", _then(pipeline._plan, _redact_first(store, version_id, ran, lambda: None))
    )
    runs = _count_fast_imports(monkeypatch)
    ops = [BatchOp("write", f"/f{i}.md", content=f"n {i}\n") for i in range(30)]
    ops.append(BatchOp("write", path, content=SECRET))
    result = apply_batch(store.core, ops, scope="main", actor="user:alice", **kw)
    assert ran
    return runs, result


def test_a_re_planned_fast_import_batch_refuses_the_content_redacted_from_its_scope(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch holds the bytes its own scope's redaction deny-lists meanwhile: re-planned, that
    write is refused and no pack of the batch holds them."""
    v = store.write("/pw.md", SECRET, actor="user:alice")
    store.write("/pw.md", "rotated\n", actor="user:alice")
    assert v is not None
    runs, result = _batch_redacted_after_its_plan(store, monkeypatch, v.id, "/again.md", skip_refused=True)
    assert len(runs) == 1 and len(result.versions) == 30
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
    runs, result = _batch_redacted_after_its_plan(store, monkeypatch, v.id, "/copy.md")
    assert len(result.versions) == 31
    assert len(runs) == 1  # not once before the purge lock, once under it
    assert store.core.commit(result.versions[0].commit).parent_ids == [main]
    assert store.read("/copy.md").content == SECRET
    _settled(store)


# A proposal's erasure of bytes the batch also writes (it leaves the batch's parent in place), run
# while git fast-import writes the batch's pack: the chain holds the purge lock shared from before
# its deny-list check to its ref move, so the erasure waits for it (then keeps the bytes: the
# scope holds them). Without that, the erasure was proved meanwhile, then the pack put the erased
# bytes back, and the re-planned batch (refusing them) left them there: verify failed.
ERASED = "erased proposal secret 5531\n"


def _erase_once(
    store: Store, pid: str, erasing: list[CheckedThread], asked: threading.Event, real: Callable[..., Any]
) -> Callable[..., Any]:
    """``real``, with the erasure of proposal ``pid`` from another handle (as another process) on a
    thread of its own started on the first call: when this thread holds the purge lock (a
    fast-import chain), the call goes on once the erasure asks for the lock; otherwise the
    erasure lands first."""

    def erase() -> None:
        with gitmem.open_store(str(store.path)) as other:
            other.erase_proposal(pid, reviewer="user:lead", reason="leaked")

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if not erasing:
            t = CheckedThread(erase)
            erasing.append(t)
            t.start()
            if "purge" in held_locks():
                wait_until(lambda: asked.is_set() or not t.is_alive(), "the erasure asks for the purge lock")
            else:
                t.check()
        return real(*args, **kwargs)

    return wrapped


def _erase_race(store: Store, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
    store.write("/p.md", ERASED, caller=agent)
    (p,) = [p for p in store.proposals() if p.status == "open"]
    monkeypatch.setattr(pipeline, "FAST_IMPORT_MIN", 20)
    asked = threading.Event()
    real_purging = purge_order.purging

    def purging(core: Any) -> Any:
        asked.set()  # set up here, before any lock: it only notes that the erasure got this far
        return real_purging(core)

    monkeypatch.setattr(purge_order, "purging", purging)
    erasing: list[CheckedThread] = []
    if where == "after the plan":  # before the chain takes the purge lock: its check refuses
        monkeypatch.setattr(
            pipeline, "_plan", _then(pipeline._plan, _erase_once(store, p.id, erasing, asked, lambda: None))
        )
    else:  # while fast-import runs (its stream is made after it started)
        monkeypatch.setattr(
            fastimport, "_stream", _erase_once(store, p.id, erasing, asked, fastimport._stream)
        )
    ops = [BatchOp("write", f"/f{i}.md", content=f"n {i}\n") for i in range(30)]
    ops.append(BatchOp("write", "/copy.md", content=ERASED))
    result = apply_batch(store.core, ops, scope="main", actor="user:alice", skip_refused=True)
    assert len(erasing) == 1
    erasing[0].check(patience(60) - time.monotonic())
    assert store.proposal(p.id).erased
    blob = pygit2.Repository(str(store.path)).get(pygit2.hash(ERASED.encode()))
    if where == "after the plan":
        assert len(result.versions) == 30
        assert [(r.op.path, type(r.error)) for r in result.refused] == [("/copy.md", ForbiddenError)]
        assert blob is None
    else:  # the erasure waited for the chain: the bytes are main's content, kept
        assert len(result.versions) == 31 and not result.refused
        assert store.read("/copy.md").content == ERASED and blob is not None
    _settled(store)


def test_control_an_erasure_after_the_batch_plan_leaves_no_copy(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _erase_race(store, monkeypatch, "after the plan")


def test_an_erasure_while_fast_import_runs_waits_for_the_chain(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _erase_race(store, monkeypatch, "while fast-import runs")
