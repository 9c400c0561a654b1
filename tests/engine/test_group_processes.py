"""Group commit across processes (docs/durability.md, "Group commit"): writer processes to one
scope, their writes queued for the holder of the scope lock; a leader SIGKILLed at each step of
the publish; forged request files. After each: every acknowledged write present exactly once, each
writer's in its order, refusals delivered to their caller, the queue drained, the index equal to
a rebuild, ``git fsck --full`` and ``gitmem verify`` clean."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import gitmem
import gitmem.config
from gitmem.audit.verify import verify
from gitmem.engine.xqueue import QUEUE_DIR
from gitmem.git.locks import file_lock
from gitmem.ids import new_id, new_ulid
from tests.helpers import git, patience

# A writer process: one line of JSON on stdout per operation, as soon as it returned (acknowledged).
# ``crash`` names a step at which the first process to reach it (the marker file) SIGKILLs itself.
CHILD = r"""
import json, os, signal, sys
import gitmem
import gitmem.config
from gitmem.engine import xqueue
from gitmem.git import intent
from gitmem.git import repo as gitrepo

path, w, crash, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]

def die_once():
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)

def leading(turn):
    return bool(turn.taken)  # this process commits the queued writes of others

if crash == "objects":  # the chain's objects being written, nothing flushed
    orig_c = gitrepo.Repo.create_commit
    def create_commit(self, *a, **k):
        die_once()
        return orig_c(self, *a, **k)
    gitrepo.Repo.create_commit = create_commit
elif crash == "flush":  # objects written, not flushed, the ref not moved
    orig_s = intent.syncfs_fd
    def syncfs_fd(*a, **k):
        die_once()
        return orig_s(*a, **k)
    intent.syncfs_fd = syncfs_fd
elif crash == "ref":  # the ref moved, nothing recorded or answered
    orig_r = gitrepo.Repo.cas
    def cas(self, *a, **k):
        out = orig_r(self, *a, **k)
        die_once()
        return out
    gitrepo.Repo.cas = cas
elif crash == "answers":  # published and indexed, no file answered or removed
    orig_a = xqueue.Turn.answer
    def answer(self):
        if leading(self):
            die_once()
        return orig_a(self)
    xqueue.Turn.answer = answer
elif crash == "answer-file":  # one answer file written, its request not removed yet
    orig_f = xqueue.respond
    def respond(*a, **k):
        out = orig_f(*a, **k)
        die_once()
        return out
    xqueue.respond = respond

store = gitmem.open_store(path)
actor = f"service:w{w}"
p = f"/w{w}"
bad_sha = "0" * 64

def op(k, fn):
    try:
        v = fn()
    except gitmem.GitmemError as exc:
        out = {"k": k, "error": type(exc).__name__}
    else:
        out = {"k": k, "none": True} if v is None else {"k": k, "id": v.id}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()

sys.stdin.readline()  # start when the test says so
if w % 2:
    op(0, lambda: store.write(p + "/a", "a\n", if_sha256=bad_sha, actor=actor))
else:
    op(0, lambda: store.write(p + "/a", "a\n", actor=actor))
op(1, lambda: store.create(p + "/b", "one\ntwo\n", actor=actor))
op(2, lambda: store.str_replace(p + "/b", "two", "three", actor=actor))
op(3, lambda: store.create(p + "/b", "again\n", actor=actor))
op(4, lambda: store.insert(p + "/b", 0, "zero", actor=actor))
op(5, lambda: store.rename(p + "/b", p + "/c", actor=actor))
op(6, lambda: store.write(p + "/d", "d\n", actor=actor))
op(7, lambda: store.write(p + "/d", "d\n", actor=actor))
op(8, lambda: store.delete(p + "/c", actor=actor))
op(9, lambda: store.delete(p + "/c", actor=actor))
"""


def expected(w: int) -> list[str]:
    """What each operation of writer ``w`` answers: ``id``, ``none`` or an error class."""
    return [
        "PreconditionFailedError" if w % 2 else "id",
        "id",
        "id",
        "PathConflictError",
        "id",
        "id",
        "id",
        "none",
        "id",
        "NotFoundError",
    ]


def _queue(path: Path) -> Path:
    return path / "gitmem" / QUEUE_DIR / "main"


def _queued(path: Path, ext: str = ".req") -> list[str]:
    q = _queue(path)
    return sorted(n for n in os.listdir(q) if n.endswith(ext)) if q.is_dir() else []


@contextmanager
def scope_held(path: Path) -> Iterator[None]:
    """Hold the scope lock as a writer process would while it commits."""
    with file_lock(path / "gitmem" / "locks" / "scope-main.lock"):
        yield


def _wait_for(cond: object, what: str) -> None:
    deadline = patience(60)
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _spawn(path: Path, n: int, crash: str, marker: Path) -> list[subprocess.Popen[str]]:
    return [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(w), crash, str(marker)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(n)
    ]


def _run(path: Path, n: int, crash: str = "none") -> list[tuple[int, list[dict[str, object]], str]]:
    """``n`` writers started together while the test holds the scope lock, so that their first
    writes are queued; returns each one's exit code, answers and stderr."""
    marker = path.parent / f"crashed-{crash}"
    procs = _spawn(path, n, crash, marker)
    with scope_held(path):
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.close()
            p.stdin = None  # communicate() below must not flush it
        _wait_for(lambda: len(_queued(path)) >= n, f"{n} queued request files")
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append((p.returncode, [json.loads(line) for line in stdout.splitlines() if line], stderr))
    return out


def _commit_order(path: Path) -> list[str]:
    log = git(path, "log", "--reverse", "--format=%(trailers:key=Gitmem-Version,valueonly)", "main")
    return [line.strip() for line in log.stdout.splitlines() if line.strip()]


def _check(path: Path, acked: dict[int, list[str]]) -> None:
    """Every acknowledged version present exactly once and in its writer's order; the queue
    drained once a write after them ran; the index equal to a rebuild; fsck and verify clean."""
    order = _commit_order(path)
    assert len(order) == len(set(order))
    position = {vid: n for n, vid in enumerate(order)}
    for ids in acked.values():
        assert all(v in position for v in ids), (ids, order)
        assert [position[v] for v in ids] == sorted(position[v] for v in ids)
    with gitmem.open_store(str(path)) as store:
        assert store.write("/after", "a write after them\n") is not None
        assert _queued(path) == [] and _queued(path, ".res") == []
        assert [n for n in os.listdir(_queue(path)) if n.startswith(".tmp-")] == []
        before = sorted((v.id, v.memory_id, v.path, v.operation) for v in store.versions())
        heads = [(m.path, m.memory_id, m.version_id) for m in store.list("/")]  # type: ignore[union-attr]
        assert {v for ids in acked.values() for v in ids} <= {b[0] for b in before}
        store.core.index.rebuild()
        assert sorted((v.id, v.memory_id, v.path, v.operation) for v in store.versions()) == before
        assert [(m.path, m.memory_id, m.version_id) for m in store.list("/")] == heads  # type: ignore[union-attr]
        report = verify(store.core)
        assert report.ok, report
    fsck = git(path, "fsck", "--full", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stderr
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("gitmem")), "verify", str(path)], capture_output=True, check=False
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr


def _kinds(answers: list[dict[str, object]]) -> list[str]:
    return [str(a["error"]) if "error" in a else "none" if a.get("none") else "id" for a in answers]


@pytest.fixture
def store_path(workspace: Path) -> Path:
    with gitmem.create_store("xgroup", home=workspace) as store:
        store.write("/seed", "seed\n")
        return store.path


def test_writer_processes_share_group_commits(store_path: Path) -> None:
    n = 4
    results = _run(store_path, n)
    acked: dict[int, list[str]] = {}
    for w, (code, answers, stderr) in enumerate(results):
        assert code == 0, stderr
        assert [a["k"] for a in answers] == list(range(10))
        assert _kinds(answers) == expected(w), (w, answers)
        acked[w] = [str(a["id"]) for a in answers if "id" in a]
    all_ids = [v for ids in acked.values() for v in ids]
    assert len(all_ids) == len(set(all_ids))
    _check(store_path, acked)
    with gitmem.open_store(str(store_path)) as store:
        for w in range(n):
            assert store.read(f"/w{w}/d").content == "d\n"
            with pytest.raises(gitmem.NotFoundError):
                store.read(f"/w{w}/c")
            history = [v for v in store.versions() if v.path.startswith(f"/w{w}/")]
            assert {v.actor for v in history} == {f"service:w{w}"}
            assert sorted(v.id for v in history) == sorted(acked[w])


def test_queued_writes_are_committed_with_the_leaders_group(store_path: Path) -> None:
    """Writes queued while the lock is held are committed by the first writer that gets it,
    in one chain: the history holds each of them once, and no request file is left."""
    results = _run(store_path, 3)
    assert all(code == 0 for code, _a, _e in results)
    order = _commit_order(store_path)
    firsts = [str(a[0]["id"]) for _c, a, _e in results if "id" in a[0]]
    assert len(firsts) == 2  # writer 1's first write is refused
    assert set(order[1:3]) == set(firsts)  # one chain, right after the seed: nothing came between


@pytest.mark.parametrize("crash", ["objects", "flush", "ref", "answers", "answer-file"])
def test_sigkill_of_a_leader_at_each_step(store_path: Path, crash: str) -> None:
    # Four writers: whoever leads first takes a refusal of another writer (an answer file).
    results = _run(store_path, 4, crash)
    codes = [code for code, _a, _e in results]
    assert sorted(codes) == [-signal.SIGKILL, 0, 0, 0], [e for _c, _a, e in results]
    acked: dict[int, list[str]] = {}
    for w, (code, answers, stderr) in enumerate(results):
        kinds = _kinds(answers)
        if code == 0:
            assert kinds == expected(w), (w, answers, stderr)
        else:
            assert kinds == expected(w)[: len(kinds)]  # what it acknowledged before it died
        acked[w] = [str(a["id"]) for a in answers if "id" in a]
    _check(store_path, acked)


def test_a_writer_killed_while_queued_leaves_nothing_behind(store_path: Path) -> None:
    marker = store_path.parent / "no-crash"
    with scope_held(store_path):
        [proc] = _spawn(store_path, 1, "none", marker)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
        _wait_for(lambda: len(_queued(store_path)) == 1, "the queued request")
        proc.kill()
        proc.wait()
    _check(store_path, {})  # its write was never acknowledged: committed or not, the queue drains


# ---------------------------------------------------------------------- forged request files
def _forge(path: Path, body: object, *, raw: bytes | None = None, pid: int | None = None) -> str:
    q = _queue(path)
    q.mkdir(parents=True, exist_ok=True)
    stem = f"{new_ulid()}-{pid or os.getpid()}"  # this test's pid: a writer that is alive
    (q / f"{stem}.req").write_bytes(raw if raw is not None else json.dumps(body).encode())
    return stem


def _entry(
    op: str, args: dict[str, object], actor: str = "user:mallory", **extra: object
) -> dict[str, object]:
    return {"version": new_id("memver"), "op": op, "args": args, "actor": actor, "session": None, **extra}


def _data(text: str) -> dict[str, str]:
    return {"b64": base64.b64encode(text.encode()).decode()}


def _answer(path: Path, stem: str) -> list[object]:
    body = json.loads((_queue(path) / f"{stem}.res").read_text())
    return [r["error"]["class"] if "error" in r else r for r in body["results"]]


def test_forged_request_files_are_refused_without_harm(store_path: Path, tmp_path: Path) -> None:
    with gitmem.open_store(str(store_path)) as store:
        store.update_settings(
            acl={"write": {"main": ["user:alice", "user:mallory"], "*": ["*"]}},
            limits=gitmem.config.Limits(max_memory_bytes=1000),
        )
        seed = store.version(store.read("/seed").version_id)
        outside = tmp_path / "outside.json"
        outside.write_text(json.dumps({"format": 1, "scope": "main", "writes": []}))
        w: dict[str, object] = {"path": "/x", "data": _data("x\n"), "if_sha256": None}
        bad_json = _forge(store_path, None, raw=b'{"format": 1, "scope": "main", "writes": [')
        deep = _forge(store_path, None, raw=b"[" * 100000)
        other_scope = _forge(store_path, {"format": 1, "scope": "team", "writes": [_entry("write", w)]})
        link = f"{new_ulid()}-{os.getpid()}"
        (_queue(store_path) / f"{link}.req").symlink_to(outside)
        odd = _queue(store_path) / "not-a-request.req"
        odd.write_text("{}")
        (_queue(store_path) / ".tmp-not-a-request.req").write_text("{")
        (_queue(store_path) / ".size-8").write_text(
            ""
        )  # the leader waits for 8 writers: a look at every name
        entries = [
            _entry("write", {**w, "path": "/../../etc/passwd"}),  # path traversal
            _entry("write", w, actor="user:eve"),  # the acl does not let eve write main
            _entry("write", {**w, "data": _data("y" * 5000)}),  # over max_memory_bytes
            _entry("write", w, actor="not an actor"),
            _entry("write", {**w, "path": "/limits"}, limits={"max_memory_bytes": 10**9}),
            _entry("chmod", w),  # no such operation
            _entry("write", {**w, "extra": 1}),
            _entry("write", {**w, "data": {"b64": "%%%"}}),
            _entry("insert", {"path": "/seed", "line": True, "text": "t", "if_sha256": None}),
            {**_entry("write", w), "version": "memver_../../x"},
            {**_entry("write", w), "version": seed.id},  # a version id already in the history
            _entry("write", {**w, "data": _data("seed\n\x00")}),  # NUL: not text
        ]
        several = _forge(store_path, {"format": 1, "scope": "main", "writes": entries})
        dead = _forge(
            store_path, {"format": 1, "scope": "main", "writes": [_entry("write", w)]}, pid=2**22 + 7
        )
        stale = _forge(store_path, {"format": 1, "scope": "main", "writes": [_entry("write", w)]})
        old = time.time() - 3600  # a live pid, but an hour old: perhaps another process's pid by now
        os.utime(_queue(store_path) / f"{stale}.req", (old, old))
        stale_answer = _queue(store_path) / f"{new_ulid()}-{os.getpid()}.res"
        stale_answer.write_text("{}")
        os.utime(stale_answer, (old, old))

        tip = store.core.tip("main")
        assert store.write("/legit", "legit\n", actor="user:alice") is not None  # a leader takes the queue

        assert _answer(store_path, several) == [
            "InvalidInputError",
            "ForbiddenError",
            "LimitExceededError",
            "InvalidInputError",
            "InvalidInputError",
            "InvalidInputError",
            "InvalidInputError",
            "InvalidInputError",
            "InvalidInputError",
            "InvalidInputError",
            "ConflictError",
            "InvalidInputError",
        ]
        left = set(os.listdir(_queue(store_path)))
        assert stale_answer.name not in left
        for stem in (bad_json, deep, other_scope, link, dead, stale):
            assert f"{stem}.req" not in left and f"{stem}.res" not in left  # dropped
        # Answered: the leader removed the request (no next leader takes it again), its writer
        # (alive) reads and removes the answer.
        assert f"{several}.req" not in left and f"{several}.res" in left
        assert outside.exists() and "not-a-request.req" in left  # the symlink removed, not its target
        # Only the legitimate write landed.
        assert git(store_path, "rev-list", "--count", f"{tip}..main").stdout.strip() == "1"
        assert [m.path for m in store.list("/")] == ["/legit", "/seed"]
    fsck = git(store_path, "fsck", "--full", "--strict", "--no-dangling", check=False)
    assert fsck.returncode == 0, fsck.stderr


def test_a_valid_queued_write_of_a_live_writer_is_committed_once(store_path: Path) -> None:
    """A well-formed queued write is committed under the version id it carries, once; a copy of it
    queued again (as a leader that died before answering leaves it) is answered from the history,
    not applied twice (an insert would be)."""
    vid = new_id("memver")
    args = {"path": "/seed", "line": 0, "text": "top", "if_sha256": None}
    body = {"format": 1, "scope": "main", "writes": [{**_entry("insert", args), "version": vid}]}
    first = _forge(store_path, body)
    with gitmem.open_store(str(store_path)) as store:
        store.write("/one", "one\n")
        assert store.read("/seed").version_id == vid
        assert not (_queue(store_path) / f"{first}.res").exists()  # a committed write: the history answers
        assert not (_queue(store_path) / f"{first}.req").exists()  # the leader removed it once answered
        again = _forge(store_path, body)
        store.write("/two", "two\n")
        assert not (_queue(store_path) / f"{again}.res").exists()
        assert store.read("/seed").content == "top\nseed\n"
        assert [v.id for v in store.versions() if v.path == "/seed"][0] == vid
    assert _commit_order(store_path).count(vid) == 1
