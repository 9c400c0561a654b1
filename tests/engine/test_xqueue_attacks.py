"""Attacks on the cross-process group commit (gitmem/engine/xqueue.py) and on the index record
staged during the flush (gitmem/engine/writer.py publish_recorded, gitmem/git/intent.py _flush):
planted answer files, forged marks in queued content, fork after a write, threads writing many
scopes, a redaction while writers queue. Real processes and real stores; docs/durability.md,
"Group commit"."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import gitmem
from gitmem.audit.verify import verify
from tests.engine.test_group_processes import (
    _commit_order,
    _data,
    _entry,
    _forge,
    _queue,
    _queued,
    _wait_for,
    scope_held,
)
from tests.helpers import git

# One write in a process of its own; prints {"id": ...} or {"none": true} or {"error": class}.
ONE_WRITE = r"""
import json, sys
import gitmem
path, mem, text = sys.argv[1], sys.argv[2], sys.argv[3]
store = gitmem.open_store(path)
try:
    v = store.write(mem, text, actor="service:victim")
except gitmem.GitmemError as exc:
    print(json.dumps({"error": type(exc).__name__}))
else:
    print(json.dumps({"none": True} if v is None else {"id": v.id}))
"""


@pytest.fixture
def store_path(workspace: Path) -> Path:
    with gitmem.create_store("xattack", home=workspace) as store:
        store.write("/seed", "seed\n")
        return store.path


def _clean(path: Path) -> None:
    """The index equal to a rebuild, verify and fsck clean."""
    with gitmem.open_store(str(path)) as store:
        before = sorted((v.id, v.scope, v.path, v.operation) for v in store.versions())
        store.core.index.rebuild()
        assert sorted((v.id, v.scope, v.path, v.operation) for v in store.versions()) == before
        report = verify(store.core)
        assert report.ok, report
    fsck = git(path, "fsck", "--full", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stderr


def _read(store: gitmem.Store, path: str) -> gitmem.Memory | None:
    try:
        return store.read(path)
    except gitmem.NotFoundError:
        return None


def _queue_victim(store_path: Path) -> subprocess.Popen[str]:
    """A writer process writing ``/victim`` while the caller holds the scope lock: returns once
    its request file is queued."""
    proc = subprocess.Popen(
        [sys.executable, "-c", ONE_WRITE, str(store_path), "/victim", "victim\n"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for(lambda: len(_queued(store_path)) == 1, "the victim's request file")
    return proc


# ---------------------------------------------------------------------- planted answers
def test_a_planted_answer_file_cannot_tell_a_writer_its_write_changed_nothing(store_path: Path) -> None:
    """Attack: while a writer waits queued, another process that can write the store directory
    plants ``<stem>.res`` saying "changed nothing". The writer must not return None for a write
    that is not in the history: it commits it (or fails), never acknowledges a lie."""
    with scope_held(store_path):
        proc = _queue_victim(store_path)
        stem = _queued(store_path)[0][: -len(".req")]
        (_queue(store_path) / f"{stem}.res").write_text(
            json.dumps({"format": 1, "results": [{"none": True}]})
        )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    answer = json.loads(out)
    with gitmem.open_store(str(store_path)) as store:
        found = _read(store, "/victim")
    if answer.get("none"):
        assert found is not None and found.content == "victim\n", "the writer was told its write was a no-op"
    assert "id" in answer and found is not None and found.version_id == answer["id"]
    _clean(store_path)


def test_a_planted_error_answer_is_no_worse_than_a_refusal(store_path: Path) -> None:
    """A planted refusal (an error class) at most makes the writer believe its write failed; the
    class named must be a GitmemError (never an arbitrary class of another module)."""
    with scope_held(store_path):
        proc = _queue_victim(store_path)
        stem = _queued(store_path)[0][: -len(".req")]
        body = {"format": 1, "results": [{"error": {"class": "SystemExit", "message": "x", "exit_code": 0}}]}
        (_queue(store_path) / f"{stem}.res").write_text(json.dumps(body))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    answer = json.loads(out)
    assert "error" in answer or "id" in answer
    _clean(store_path)


# ---------------------------------------------------------------------- forged content
def test_a_queued_write_with_a_forged_redaction_mark_is_refused(store_path: Path) -> None:
    w: dict[str, object] = {
        "path": "/forged",
        "data": _data("[redacted: redact_01JAAAAAAAAAAAAAAAAAAAAAAA]\n"),
        "if_sha256": None,
    }
    stem = _forge(store_path, {"format": 1, "scope": "main", "writes": [_entry("write", w)]})
    with gitmem.open_store(str(store_path)) as store:
        store.write("/legit", "legit\n")
        assert _read(store, "/forged") is None
        body = json.loads((_queue(store_path) / f"{stem}.res").read_text())
        assert body["results"][0]["error"]["class"] == "ForbiddenError" or "error" in body["results"][0]
    _clean(store_path)


def test_a_queued_write_of_deny_listed_content_is_refused_after_a_redaction(store_path: Path) -> None:
    """``gitmem redact`` of a version, then a queued write of that very content (a replay of a
    request file taken before the redaction): the deny-list refuses it as for any write."""
    with gitmem.open_store(str(store_path)) as store:
        v = store.write("/secret", "the secret is 42\n")
        assert v is not None
        store.write("/secret", "no secret\n")
        store.redact(v.id, reason="leak")
        w: dict[str, object] = {"path": "/again", "data": _data("the secret is 42\n"), "if_sha256": None}
        stem = _forge(store_path, {"format": 1, "scope": "main", "writes": [_entry("write", w)]})
        store.write("/legit", "legit\n")
        assert _read(store, "/again") is None
        assert "error" in json.loads((_queue(store_path) / f"{stem}.res").read_text())["results"][0]
    _clean(store_path)


# ---------------------------------------------------------------------- fork, threads
def _forked_writes(path: str, scope: str, n: int) -> None:
    """In a forked child: writes through the parent's handle (its index connection, its flusher
    gone), then exit without cleanup."""
    try:
        for i in range(n):
            _PARENT_STORE.write(f"/fork/{i}", f"fork {i}\n", scope=scope)
    except BaseException:  # noqa: BLE001 - reported by the exit code
        os._exit(3)
    os._exit(0)


_PARENT_STORE: gitmem.Store


def test_fork_after_a_write_then_writes_in_parent_and_child(store_path: Path) -> None:
    """A process that wrote (flusher threads started, index connection open) forks; the child
    writes through the inherited handle while the parent keeps writing: every write lands, the
    index equals a rebuild and passes SQLite's integrity check."""
    global _PARENT_STORE
    ctx = multiprocessing.get_context("fork")
    with gitmem.open_store(str(store_path)) as store:
        _PARENT_STORE = store
        store.write("/before", "before\n")
        children = [
            ctx.Process(target=_forked_writes, args=(str(store_path), s, 8)) for s in ("main", "team")
        ]
        for c in children:
            c.start()
        for i in range(8):
            store.write(f"/parent/{i}", f"parent {i}\n")
        for c in children:
            c.join(120)
            assert c.exitcode == 0
        assert {m.path for m in store.list("/fork/")} == {f"/fork/{i}" for i in range(8)}
        assert len(store.list("/fork/", scope="team")) == 8
    db = sqlite3.connect(str(store_path / "gitmem" / "index.sqlite"))
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
    _clean(store_path)


def test_threads_writing_many_scopes_at_once(store_path: Path) -> None:
    """Many threads, each its own scope and some sharing one, through one handle: every write
    acknowledged is in the index and the history, the index equal to a rebuild."""
    errors: list[BaseException] = []
    acked: dict[str, list[str]] = {}
    lock = threading.Lock()
    with gitmem.open_store(str(store_path)) as store:

        def run(t: int) -> None:
            scope = f"team-{t % 6}"
            try:
                for i in range(6):
                    v = store.write(f"/t{t}/{i}", f"thread {t} write {i}\n", scope=scope)
                    assert v is not None
                    with lock:
                        acked.setdefault(scope, []).append(v.id)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(t,)) for t in range(12)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert errors == []
        for scope, ids in acked.items():
            assert {v.id for v in store.versions(scope=scope)} >= set(ids)
            order = _commit_order_of(store_path, scope)
            assert sorted(ids) == sorted(set(ids)) and set(ids) <= set(order)
    _clean(store_path)


def _commit_order_of(path: Path, scope: str) -> list[str]:
    log = git(path, "log", "--format=%(trailers:key=Gitmem-Version,valueonly)", scope)
    return [line.strip() for line in log.stdout.splitlines() if line.strip()]


def test_commit_order_helper_is_the_main_branch(store_path: Path) -> None:
    assert _commit_order(store_path) == _commit_order_of(store_path, "main")


def _fresh_write(path: str) -> None:
    """In a forked child: one write through a handle of its own."""
    try:
        with gitmem.open_store(path) as store:
            store.write("/from-child", f"child {os.getpid()}\n")
    except BaseException:  # noqa: BLE001 - reported by the exit code
        os._exit(3)
    os._exit(0)


def test_fork_while_a_thread_waits_queued_and_another_holds_the_scope_lock(store_path: Path) -> None:
    """A thread of the parent holds the scope lock, another waits queued (its group busy), and
    then the process forks: the child's write to the same scope must finish once the parent let
    the lock go (was: the child waited forever on the group a parent thread was leading, and the
    child's copy of the parent's lock file kept the scope locked for everyone)."""
    ctx = multiprocessing.get_context("fork")
    holding, release = threading.Event(), threading.Event()
    with gitmem.open_store(str(store_path)) as store:
        store.write("/before", "before\n")

        def hold() -> None:
            with scope_held(store_path):
                holding.set()
                release.wait()

        holder = threading.Thread(target=hold)
        holder.start()
        holding.wait()
        queued = threading.Thread(target=store.write, args=("/queued", "queued\n"))
        queued.start()
        _wait_for(lambda: len(_queued(store_path)) == 1, "the queued thread's request file")
        child = ctx.Process(target=_fresh_write, args=(str(store_path),))
        child.start()
        release.set()
        holder.join()
        queued.join(120)
        child.join(120)
        hung = child.is_alive()
        if hung:
            child.kill()
            child.join()
        assert not queued.is_alive() and not hung, "the write of the child or the parent never finished"
        assert child.exitcode == 0
        assert _read(store, "/queued") is not None and _read(store, "/from-child") is not None
    _clean(store_path)


def test_fork_while_a_thread_holds_an_index_write_transaction(store_path: Path) -> None:
    """A child forked while a parent thread has an index write transaction open (a staged record
    during the flush) would inherit SQLite's per-process lock state and find the index busy for
    good: the fork waits for the transaction to end (gitmem/engine/index.py, _ForkGate)."""
    ctx = multiprocessing.get_context("fork")
    holding = threading.Event()
    with gitmem.open_store(str(store_path)) as store:
        store.write("/before", "before\n")

        def hold() -> None:
            with store.core.index._write():
                holding.set()
                time.sleep(0.3)  # a transaction in flight when the fork starts

        holder = threading.Thread(target=hold)
        holder.start()
        holding.wait()
        child = ctx.Process(target=_fresh_write, args=(str(store_path),))
        child.start()
        holder.join()
        child.join(120)
        assert child.exitcode == 0
        store.write("/after", "the parent writes on\n")
    _clean(store_path)


# ---------------------------------------------------------------------- two leaders
def test_two_leaders_when_the_scope_lock_file_is_deleted_under_them(store_path: Path) -> None:
    """The scope lock file deleted again and again while writer processes commit (each deletion
    lets a second leader take a new lock file beside the old one's holder): the compare-and-swap
    keeps every acknowledged write exactly once and in its writer's order, and every answer is the
    one expected."""
    from tests.engine.test_group_processes import _check, _kinds, _spawn, expected

    lock_file = store_path / "gitmem" / "locks" / "scope-main.lock"
    stop = threading.Event()

    def delete_locks() -> None:
        while not stop.is_set():
            with contextlib.suppress(FileNotFoundError):
                lock_file.unlink()
            stop.wait(0.001)

    n = 4
    procs = _spawn(store_path, n, "none", store_path.parent / "unused-marker")
    deleter = threading.Thread(target=delete_locks)
    try:
        with scope_held(store_path):  # their first writes queue, then the deletions start
            for p in procs:
                assert p.stdin is not None
                p.stdin.write("go\n")
                p.stdin.close()
                p.stdin = None
            _wait_for(lambda: len(_queued(store_path)) >= n, f"{n} queued request files")
            deleter.start()
        results = []
        for p in procs:
            out, err = p.communicate(timeout=300)
            results.append((p.returncode, [json.loads(line) for line in out.splitlines() if line], err))
    finally:
        stop.set()
        if deleter.is_alive():
            deleter.join()
    acked: dict[int, list[str]] = {}
    for w, (code, answers, stderr) in enumerate(results):
        assert code == 0, stderr
        assert _kinds(answers) == expected(w), (w, answers)
        acked[w] = [str(a["id"]) for a in answers if "id" in a]
    _check(store_path, acked)


def test_a_redaction_while_writer_processes_queue(store_path: Path) -> None:
    """``redact`` (a history rewrite of the scope) while writer processes have writes queued and
    commit: every acknowledged write stays exactly once and in order, the redacted content is gone
    and the store verifies."""
    from tests.engine.test_group_processes import _check, _kinds, _spawn, expected

    with gitmem.open_store(str(store_path)) as store:
        old = store.write("/secret", "the secret is 42\n")
        assert old is not None
        store.write("/secret", "nothing here\n")
    n = 3
    procs = _spawn(store_path, n, "none", store_path.parent / "unused-marker")
    with scope_held(store_path):
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.close()
            p.stdin = None
        _wait_for(lambda: len(_queued(store_path)) >= n, f"{n} queued request files")
    with gitmem.open_store(str(store_path)) as store:
        store.redact(old.id, reason="leak")
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        results.append((p.returncode, [json.loads(line) for line in out.splitlines() if line], err))
    acked: dict[int, list[str]] = {}
    for w, (code, answers, stderr) in enumerate(results):
        assert code == 0, stderr
        assert _kinds(answers) == expected(w), (w, answers)
        acked[w] = [str(a["id"]) for a in answers if "id" in a]
    _check(store_path, acked)
    log = git(store_path, "log", "-p", "main").stdout
    assert "the secret is 42" not in log


# ---------------------------------------------------------------------- the in-memory index
def test_in_memory_index_fallback_with_threads_and_a_queued_process(store_path: Path) -> None:
    """A directory planted where the index file goes: the store falls back to an in-memory index
    (was: every write raised IsADirectoryError); threads of this process and a writer process
    queued behind them all land, each once."""
    gm = store_path / "gitmem"
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            (gm / f"index.sqlite{suffix}").unlink()
    (gm / "index.sqlite").mkdir()
    errors: list[BaseException] = []
    with gitmem.open_store(str(store_path)) as store:

        def run(t: int) -> None:
            try:
                for i in range(5):
                    assert store.write(f"/t{t}/{i}", f"{t} {i}\n", scope=f"s{t % 2}") is not None
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        with scope_held(store_path):
            proc = _queue_victim(store_path)
        threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        assert store.write("/main-thread", "x\n") is not None
        for th in threads:
            th.join()
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert errors == []
        assert store.core.index.in_memory
        assert "id" in json.loads(out)
        assert len(store.list("/", scope="s0")) == 10 and len(store.list("/", scope="s1")) == 10
        assert _read(store, "/victim") is not None
    _clean(store_path)


# ---------------------------------------------------------------------- a busy index
HOLD_INDEX = r"""
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


def test_writes_while_another_process_holds_the_index_write_lock(store_path: Path) -> None:
    """Another process holds the index's write lock for a while: a durable write (its record
    staged during the flush) and a queued writer process both succeed once it lets go, and the
    index equals a rebuild."""
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_INDEX, str(store_path / "gitmem" / "index.sqlite")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    timer = threading.Timer(2.0, lambda: (holder.stdin.write("go\n"), holder.stdin.flush()))  # type: ignore[union-attr]
    with gitmem.open_store(str(store_path)) as store:
        with scope_held(store_path):
            proc = _queue_victim(store_path)
        timer.start()
        v = store.write("/during", "during\n")
        assert v is not None
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert "id" in json.loads(out)
        timer.join()
        holder.communicate(timeout=60)
        assert store.read("/during").version_id == v.id
        assert _read(store, "/victim") is not None
    _clean(store_path)


# ---------------------------------------------------------------------- a leader killed mid-record
_STAGED_CRASHES = r"""
elif crash == "staged":  # the index record staged (its transaction open), the flush under way
    from gitmem.engine import index as gindex
    orig_st = gindex.Index.stage
    def stage(self, *a, **k):
        out = orig_st(self, *a, **k)
        if out.db is not None:
            die_once()
        return out
    gindex.Index.stage = stage
elif crash == "recorded":  # the ref moved and the record committed, nothing answered
    from gitmem.engine import index as gindex
    orig_sc = gindex.StagedRecord.commit
    def commit(self):
        out = orig_sc(self)
        die_once()
        return out
    gindex.StagedRecord.commit = commit
elif crash == "answers":"""


@pytest.mark.slow  # real processes, SIGKILLed and recovered
@pytest.mark.parametrize("crash", ["staged", "recorded"])
def test_sigkill_of_a_leader_with_its_index_record_staged(
    store_path: Path, crash: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader of a group with queued writes of other processes SIGKILLed with its index record
    staged (the SQLite transaction open, the flush under way) or just committed: the others find
    or commit their writes, each once, and the index equals a rebuild."""
    import tests.engine.test_group_processes as tgp
    from tests.engine.test_group_processes import _check, _kinds, _run, expected

    monkeypatch.setattr(tgp, "CHILD", tgp.CHILD.replace('elif crash == "answers":', _STAGED_CRASHES, 1))
    results = _run(store_path, 4, crash)
    codes = sorted(code for code, _a, _e in results)
    assert codes == [-signal.SIGKILL, 0, 0, 0], [e for _c, _a, e in results]
    acked: dict[int, list[str]] = {}
    for w, (code, answers, stderr) in enumerate(results):
        kinds = _kinds(answers)
        if code == 0:
            assert kinds == expected(w), (w, answers, stderr)
        else:
            assert kinds == expected(w)[: len(kinds)]
        acked[w] = [str(a["id"]) for a in answers if "id" in a]
    _check(store_path, acked)


# ---------------------------------------------------------------------- a planted symlink
def test_a_queue_directory_symlinked_elsewhere_is_not_used(store_path: Path, tmp_path: Path) -> None:
    """Attack: ``queue/main`` made a symlink to a directory outside the store, holding a file
    named like a request of a dead writer. No writer queues there and no leader reads or removes
    anything there; a contended write still lands (its writer waits for the lock instead)."""
    from gitmem.ids import new_ulid

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    bait = outside / f"{new_ulid()}-999999.req"  # a pid no process has: a leader would remove it
    bait.write_text("{}")
    (store_path / "gitmem" / "queue").mkdir(parents=True, exist_ok=True)
    (store_path / "gitmem" / "queue" / "main").symlink_to(outside)
    with scope_held(store_path):
        proc = subprocess.Popen(
            [sys.executable, "-c", ONE_WRITE, str(store_path), "/victim", "victim\n"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(0.5)  # the writer finds the lock taken and the queue unusable
        assert sorted(p.name for p in outside.iterdir()) == [bait.name]
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "id" in json.loads(out)
    assert bait.exists() and sorted(p.name for p in outside.iterdir()) == [bait.name]
    with gitmem.open_store(str(store_path)) as store:
        assert _read(store, "/victim") is not None
        assert store.write("/after", "a lone write with the symlink still there\n") is not None
    assert bait.exists()
    _clean(store_path)
