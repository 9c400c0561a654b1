"""A bulk catch-up takes each commit's changes from ``git log --raw`` run beside the walk
(gitmem/git/logdiff.py ``StreamDiffer``) where that answer is exact, and from the in-process
differ otherwise: both give the same index, row for row, on random histories with renames,
deletes, nested directories, several changes of a kind in one commit, a file that becomes a
directory and back, a merge and a redaction; and a stream that falls out of step with the walk
or fails is left for the in-process differ."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from gitmem.git import logdiff
from gitmem.git.treediff import TreeDiffer
from gitmem.store import Store
from tests.engine.test_index_fresh import _history, _tables
from tests.helpers import plain_commit


def _random_history(store: Store, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    _history(store, tmp_path)
    live = [m.path for m in store.list("/")]  # type: ignore[union-attr]
    dirs = ["", "d/", "d/e/", "d/e/f/", "a.b/", "a-b/"]
    for step in range(140):
        op = rng.random()
        path = rng.choice(live)
        if op < 0.3:
            store.write(path, f"edit {step} {'words ' * rng.randint(1, 9)}\n")
        elif op < 0.5:
            new = f"/{rng.choice(dirs)}m{step}.md"
            store.write(new, f"---\ndescription: made {step}\n---\nnote body {step}\n")
            live.append(new)
        elif op < 0.6 and len(live) > 5:
            store.delete(path)
            live.remove(path)
        elif op < 0.7:
            new = f"/{rng.choice(dirs)}r{step}.md"
            store.rename(path, new)
            live[live.index(path)] = new
        elif op < 0.8:  # a file "a" that becomes a directory, then a file again, beside "a.b" and "a-b"
            files: dict[str, bytes | None] = {}
            if f"/x{step % 4}" in live:
                files[f"x{step % 4}"] = None
                files[f"x{step % 4}/inner.md"] = f"inner {step}\n".encode()
                live.remove(f"/x{step % 4}")
                live.append(f"/x{step % 4}/inner.md")
            elif f"/x{step % 4}/inner.md" in live:
                files[f"x{step % 4}/inner.md"] = None
                files[f"x{step % 4}"] = f"file again {step}\n".encode()
                live.remove(f"/x{step % 4}/inner.md")
                live.append(f"/x{step % 4}")
            else:
                files[f"x{step % 4}"] = f"a file {step}\n".encode()
                live.append(f"/x{step % 4}")
            files[f"x{step % 4}.b"] = f"beside {step}\n".encode()
            if f"/x{step % 4}.b" not in live:
                live.append(f"/x{step % 4}.b")
            plain_commit(store, files, message=f"type change {step}\n")
            live = [m.path for m in store.list("/")]  # type: ignore[union-attr]
        else:  # plain git: several edits, a move by content, maybe two creates and two deletes
            files = {p[1:]: f"plain {step}\n".encode() for p in rng.sample(live, min(3, len(live)))}
            victim = rng.choice([p for p in live if p[1:] not in files])
            files[victim[1:]] = None
            files[f"{rng.choice(dirs)}moved-{step}.md"] = store.read(victim).content.encode()
            if rng.random() < 0.5 and len(live) > 8:
                for gone in rng.sample([p for p in live if p[1:] not in files], 2):
                    files[gone[1:]] = None
                for k in range(2):
                    files[f"d/e/two-{step}-{k}.md"] = f"two {k}\n".encode()
            plain_commit(store, files, message=f"plain {step}\n")
            live = [m.path for m in store.list("/")]  # type: ignore[union-attr]
    secret = store.write(live[0], "a secret\n")
    store.write(live[0], "no secret\n")
    store.redact(secret.id, reason="test")


def _rebuild(store: Store, monkeypatch: pytest.MonkeyPatch, after: int) -> tuple[list[Any], int]:
    """Rebuild with the stream started after ``after`` commits; the rows and how many commits
    the stream answered."""
    counted: dict[int, int] = {}
    close = logdiff.StreamDiffer.close

    def counting_close(self: logdiff.StreamDiffer) -> None:
        counted[id(self)] = self.streamed
        close(self)

    with monkeypatch.context() as m:
        m.setattr(logdiff, "STREAM_AFTER", after)
        m.setattr(logdiff.StreamDiffer, "close", counting_close)
        store.core.index.rebuild()
    return _tables(store), sum(counted.values())


@pytest.mark.parametrize("seed", [1, 2])
def test_streamed_and_in_process_rebuilds_give_the_same_index(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    _random_history(store, tmp_path, seed)
    store.list("/")
    incremental = _tables(store)
    in_process, none = _rebuild(store, monkeypatch, 10**9)
    streamed, answered = _rebuild(store, monkeypatch, 0)
    late, some = _rebuild(store, monkeypatch, 37)  # the stream starts in the middle of the walk
    assert none == 0
    commits = sum(1 for _ in store.core.walk(store.core.tip("main")))  # type: ignore[arg-type]
    assert answered > commits // 2 and 0 < some < answered  # most commits came from the stream
    assert in_process == streamed == late
    assert in_process == incremental


def test_a_catch_up_of_many_commits_streams_them(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not a rebuild: an index already at an older commit catches up through the stream."""
    store.write("/first", "first\n")
    store.list("/")
    for i in range(60):
        plain_commit(store, {f"d/e/m{i}.md": f"m {i}\n".encode(), f"m{i}.md": None})
        store.core.repo  # noqa: B018
        if i % 3 == 0:
            plain_commit(store, {f"d/e/m{i}.md": None, f"moved/m{i}.md": f"m {i}\n".encode()})
    monkeypatch.setattr(logdiff, "STREAM_AFTER", 5)
    store.list("/")
    caught_up = _tables(store)
    in_process, _ = _rebuild(store, monkeypatch, 10**9)
    assert caught_up == in_process


def test_a_stream_out_of_step_or_failing_is_left_for_the_in_process_differ(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _random_history(store, tmp_path, 3)
    store.list("/")
    in_process, _ = _rebuild(store, monkeypatch, 10**9)
    start = logdiff.StreamDiffer._start
    with monkeypatch.context() as m:  # the stream starts at the root while the walk is at commit 20
        m.setattr(logdiff.StreamDiffer, "_start", lambda self, after: start(self, None))
        out_of_step, answered = _rebuild(store, monkeypatch, 20)
    assert answered == 0 and out_of_step == in_process
    with monkeypatch.context() as m:  # no contents read ahead: every blob is read in process
        m.setattr(logdiff, "_AHEAD_BYTES", 0)
        m.setattr(logdiff, "_AHEAD", 7)
        unread, answered = _rebuild(store, monkeypatch, 20)
    assert answered > 0 and unread == in_process
    with monkeypatch.context() as m:  # git exits with an error: no record, no answer
        m.setattr(logdiff.StreamDiffer, "_start", lambda self, after: start(self, self._tip))
        failing, answered = _rebuild(store, monkeypatch, 20)
    assert answered == 0 and failing == in_process


def test_each_streamed_answer_is_the_in_process_one(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commit by commit: the changes the stream gives are the in-process differ's (in an order
    that may differ only between changes of different kinds)."""
    _random_history(store, tmp_path, 4)
    checked: list[int] = []
    read_ahead: list[bytes] = []
    streamed = logdiff.StreamDiffer._streamed

    def check(self: logdiff.StreamDiffer, commit: Any) -> Any:
        got = streamed(self, commit)
        if got is not None:
            want = TreeDiffer(self._repo).commit_changes(commit)
            assert sorted(map(str, got)) == sorted(map(str, want))
            for kind in ("added", "deleted", "modified"):
                assert [c for c in got if c[0] == kind] == [c for c in want if c[0] == kind]
            checked.append(len(got))
            for c in got:  # contents read ahead by git cat-file are the object's
                data = self.prefetched(str(c[3])) if c[3] is not None else None
                if data is not None:
                    assert data == self._repo.odb.read(c[3])[1]
                    read_ahead.append(data)
        return got

    monkeypatch.setattr(logdiff, "STREAM_AFTER", 0)
    monkeypatch.setattr(logdiff.StreamDiffer, "_streamed", check)
    store.core.index.rebuild()
    assert len(checked) > 100 and max(checked) >= 3
    assert len(read_ahead) > 100
