"""A fresh walk's heads get their search rows from a thread beside the walk
(gitmem/engine/search_ahead.py ``SearchAhead``): the index is the one the walk writes alone, row
for row and answer for answer, whether the thread's rows are kept (a history without a merge) or
thrown away (a merge, a git that fails, an insert that fails), and a walk that fails leaves no
thread behind and no row."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pytest

from gitmem.engine import derive, search, search_ahead
from gitmem.engine import index_catchup as index_mod
from gitmem.store import Store
from tests.engine.test_index_fresh import _answers, _history, _tables
from tests.helpers import plain_commit


def _linear_history(store: Store, seed: int) -> None:
    """Creates (some with descriptions), edits, renames, deletes, a path edited back to an
    earlier content, plain git commits of several files and a memory in a second scope."""
    rng = random.Random(seed)
    live: list[str] = []
    for step in range(90):
        op = rng.random()
        if op < 0.4 or len(live) < 4:
            path = f"/{rng.choice(['', 'd/', 'd/e/'])}m{step}.md"
            body = (
                f"---\ndescription: made {step}\n---\nbody {step}\n" if rng.random() < 0.5 else f"b {step}\n"
            )
            store.write(path, body)
            live.append(path)
        elif op < 0.6:
            store.write(rng.choice(live), f"edit {step} {'words ' * rng.randint(1, 5)}\n")
        elif op < 0.7:
            path = rng.choice(live)
            before = store.read(path).content
            store.write(path, f"for a while {step}\n")
            store.write(path, before)  # its final content is one it had before
        elif op < 0.8:
            path = rng.choice(live)
            new = f"/r{step}.md"
            store.rename(path, new)
            live[live.index(path)] = new
        elif op < 0.88:
            path = rng.choice(live)
            store.delete(path)
            live.remove(path)
        else:
            files: dict[str, bytes | None] = {p[1:]: f"plain {step}\n".encode() for p in rng.sample(live, 3)}
            files[f"p{step}.md"] = b"---\ndescription: plain\n---\nplain body\n"
            plain_commit(store, files, message=f"plain {step}\n")
            live.append(f"/p{step}.md")
    store.write("/t", "team note\n", scope="team")
    store.list("/")
    store.list("/", scope="team")


def _rebuild(store: Store, monkeypatch: pytest.MonkeyPatch, after: int) -> tuple[list[Any], list[bool]]:
    """Rebuild with the thread started after ``after`` commits; the tables and, per thread that
    reached its end, whether its rows were kept."""
    kept: list[bool] = []
    finish = search_ahead.SearchAhead.finish

    def counting_finish(self: search_ahead.SearchAhead, heads: dict[str, str]) -> Any:
        got = finish(self, heads)
        kept.append(got is not None)
        return got

    with monkeypatch.context() as m:
        m.setattr(index_mod, "SEARCH_AHEAD_AFTER", after)
        m.setattr(search_ahead.SearchAhead, "finish", counting_finish)
        store.core.index.rebuild()
    return _tables(store), kept


def _orphans(store: Store) -> int:
    db = store.core.index.db
    return int(
        db.execute(
            "SELECT COUNT(*) FROM search_fts WHERE rowid NOT IN (SELECT docid FROM search_docs)"
        ).fetchone()[0]
    )


@pytest.mark.parametrize("seed", [1, 2])
def test_rows_written_beside_the_walk_are_the_walks_own(
    store: Store, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    _linear_history(store, seed)
    incremental, answers = _tables(store), _answers(store)
    alone, none = _rebuild(store, monkeypatch, 10**9)
    beside, kept = _rebuild(store, monkeypatch, 3)
    late, kept_late = _rebuild(store, monkeypatch, 60)  # started with heads already derived
    assert none == [] and kept == [True] and kept_late == [True]  # main's walk is long enough; team's is not
    assert alone == beside == late == incremental
    assert _answers(store) == answers and _orphans(store) == 0
    assert [h.path for h in store.search("plain body")]  # the thread's rows answer queries


def test_a_merge_or_a_failure_throws_the_threads_rows_away(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _history(store, tmp_path)  # a merge in the middle of main's history
    incremental, answers = _tables(store), _answers(store)
    merged, kept = _rebuild(store, monkeypatch, 2)
    # main's thread is discarded at its merge (never finished); team's walk has none
    assert kept == [True] and merged == incremental and _orphans(store) == 0
    assert _answers(store) == answers


def test_a_git_or_an_insert_that_fails_leaves_the_rows_to_the_walk(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _linear_history(store, 4)
    incremental = _tables(store)
    with monkeypatch.context() as m:  # ls-tree fails: the thread writes nothing
        m.setattr(search_ahead, "tip_files", lambda git_dir, tip: None)
        no_files, kept = _rebuild(store, monkeypatch, 2)
    assert no_files == incremental and kept == [False]  # (team has one commit: no thread)
    calls: list[int] = []
    insert = search.index_bodies

    def failing_insert(db: Any, rows: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk gone")
        insert(db, rows)

    with monkeypatch.context() as m:  # the third insert fails: the first two's rows are deleted
        m.setattr(search_ahead, "_ROWS", 2)
        m.setattr(search_ahead, "_BATCH", 2)
        m.setattr(search, "index_bodies", failing_insert)
        failed, kept = _rebuild(store, monkeypatch, 2)
    assert failed == incremental and kept[0] is False and len(calls) == 3 and _orphans(store) == 0


def test_a_failed_walk_leaves_no_thread_and_no_row(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    _linear_history(store, 3)
    incremental = _tables(store)
    rows_for_commit = derive.rows_for_commit
    seen: list[int] = []

    def failing(*args: Any, **kwargs: Any) -> Any:
        seen.append(1)
        if len(seen) == 40:
            raise OSError("object store gone")
        return rows_for_commit(*args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(index_mod, "SEARCH_AHEAD_AFTER", 3)
        m.setattr(derive, "rows_for_commit", failing)
        with pytest.raises(OSError):
            store.core.index.rebuild()
    assert not [t for t in threading.enumerate() if t.name == "gitmem-search-ahead"]
    rebuilt, kept = _rebuild(store, monkeypatch, 3)
    assert rebuilt == incremental and kept == [True] and _orphans(store) == 0
