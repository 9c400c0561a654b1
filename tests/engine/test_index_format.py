"""The index's format (gitmem/engine/index_db.py): an index of format 3 (or of an unknown format) is
derived again from git with the same answers, in the new form, and the queries by version id and
session still read an index, not the whole table."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import gitmem
from gitmem.audit import redact
from gitmem.engine.index import INDEX_FILE, SCHEMA_VERSION
from gitmem.store import Store
from tests.helpers import fast_workspace

# ``versions`` as format 3 made it, verbatim.
_FORMAT_3 = """
CREATE TABLE versions(
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL, memory_id TEXT NOT NULL, scope TEXT NOT NULL, path TEXT NOT NULL,
    prev_path TEXT, operation TEXT NOT NULL, actor TEXT NOT NULL, session TEXT,
    created_at INTEGER NOT NULL, sha256 TEXT, size INTEGER, blob TEXT, commit_id TEXT NOT NULL,
    redaction_id TEXT, UNIQUE(scope, id));
CREATE INDEX versions_id ON versions(id);
CREATE INDEX versions_memory ON versions(memory_id, seq);
CREATE INDEX versions_path ON versions(scope, path, seq);
CREATE INDEX versions_session ON versions(session, seq);
CREATE INDEX versions_commit ON versions(commit_id);
"""
_ROWS = "SELECT * FROM versions ORDER BY seq"


@pytest.fixture
def workspace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield from fast_workspace(tmp_path, monkeypatch)


def _history(store: Store) -> None:
    """Versions with and without a session, in two scopes, a redaction, and a scope whose rows
    are dropped and derived again (so ``seq`` has gaps and the newest rows are not the last made)."""
    store.write("/a", "one\n", session="sesn_1")
    store.write("/b", "two\n")
    store.write("/a", "three\n", session="sesn_1")
    store.write("/t", "team\n", scope="team", session="sesn_2")
    store.rename("/b", "/c")
    store.write("/secret", "key=hunter2\n")
    leaked = store.versions("/secret")[0]
    store.write("/secret", "key=(rotated)\n")
    redact.redact(store.core, leaked.id, reason="leaked key", actor="user:admin")
    store.write("/t", "team two\n", scope="team")
    store.delete("/a", session="sesn_1")


def _answers(store: Store) -> list[Any]:
    out: list[Any] = []
    for scope in ("main", "team"):
        out.append([(m.path, m.memory_id, m.version_id) for m in store.list(scope=scope)])  # type: ignore[union-attr]
        out.append([(v.id, v.path, v.operation, v.session) for v in store.versions(scope=scope)])
        out.append([v.id for v in store.versions(session="sesn_1", scope=scope)])
    return out


def _to_format_3(index_file: Path) -> None:
    """Rewrite ``index_file``'s versions table as format 3 had it, same rows and ``seq``."""
    table, *indexes = [stmt for stmt in _FORMAT_3.split(";") if stmt.strip()]
    db = sqlite3.connect(index_file, isolation_level=None)
    db.execute("BEGIN")
    db.execute("ALTER TABLE versions RENAME TO v4")
    for (name,) in db.execute(
        "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='v4' AND sql IS NOT NULL"
    ).fetchall():
        db.execute(f"DROP INDEX {name}")
    db.execute(table)
    db.execute("INSERT INTO versions SELECT * FROM v4")
    db.execute("DROP TABLE v4")
    for stmt in indexes:
        db.execute(stmt)
    db.execute("UPDATE meta SET value='3' WHERE key='schema'")
    db.execute("COMMIT")
    db.close()


def _reopen(store: Store, workspace: Path) -> Store:
    store.close()
    return gitmem.open_store("notes", home=workspace)


def test_an_index_of_format_3_is_derived_again_with_the_same_rows(store: Store, workspace: Path) -> None:
    _history(store)
    rows = [r[1:] for r in store.core.index.db.execute("SELECT * FROM versions ORDER BY scope, seq")]
    answers = _answers(store)
    index_file = store.core.gitmem_dir / INDEX_FILE
    store.close()
    _to_format_3(index_file)
    old = sqlite3.connect(index_file)
    assert old.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == ("3",)
    old.close()

    store = gitmem.open_store("notes", home=workspace)
    db = store.core.index.db
    assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (SCHEMA_VERSION,)
    sql = db.execute("SELECT sql FROM sqlite_master WHERE name='versions'").fetchone()[0]
    assert "AUTOINCREMENT" not in sql and "UNIQUE(id, scope)" in sql
    names = {n for (n,) in db.execute("SELECT name FROM sqlite_master WHERE tbl_name='versions'")}
    assert "versions_id" not in names and "versions_session" in names
    assert _answers(store) == answers
    assert [r[1:] for r in db.execute("SELECT * FROM versions ORDER BY scope, seq")] == rows
    # A write after it orders after every row present.
    store.write("/d", "four\n", session="sesn_1")
    newest = db.execute("SELECT id FROM versions ORDER BY seq DESC LIMIT 1").fetchone()
    assert newest[0] == store.versions("/d")[0].id
    store.close()


def test_an_index_of_an_unknown_format_is_derived_again(store: Store, workspace: Path) -> None:
    _history(store)
    answers = _answers(store)
    index_file = store.core.gitmem_dir / INDEX_FILE
    store.close()
    db = sqlite3.connect(index_file, isolation_level=None)
    db.execute("UPDATE meta SET value='2' WHERE key='schema'")
    db.execute("DELETE FROM versions")  # what a rebuild derives again
    db.close()
    store = gitmem.open_store("notes", home=workspace)
    assert store.core.index.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (
        SCHEMA_VERSION,
    )
    assert _answers(store) == answers
    store.close()


def test_a_new_row_orders_after_every_row_present_when_the_newest_were_dropped(
    store: Store, workspace: Path
) -> None:
    """``seq`` is no AUTOINCREMENT: the scope whose rows held the largest ``seq`` dropped and
    derived again (as when history is rewritten under the index) reuses those numbers, yet every
    row keeps its order, the re-derived ones come after every row present, and so does a new one."""
    _history(store)
    answers = _answers(store)
    index = store.core.index
    team_max = index.db.execute("SELECT MAX(seq) FROM versions WHERE scope='team'").fetchone()[0]
    main_max = index.db.execute("SELECT MAX(seq) FROM versions WHERE scope='main'").fetchone()[0]
    assert main_max > team_max
    with index._write() as db:
        index._drop_scope(db, "main")
    store = _reopen(store, workspace)
    assert _answers(store) == answers  # main derived again
    db = store.core.index.db
    assert db.execute("SELECT MIN(seq) FROM versions WHERE scope='main'").fetchone()[0] == team_max + 1
    store.write("/e", "five\n", scope="team")
    newest = db.execute("SELECT id, seq FROM versions ORDER BY seq DESC LIMIT 1").fetchone()
    assert newest[0] == store.versions("/e", scope="team")[0].id
    assert newest[1] > db.execute("SELECT MAX(seq) FROM versions WHERE scope='main'").fetchone()[0]
    store.close()


@pytest.mark.parametrize(
    ("query", "index"),
    [
        ("SELECT * FROM versions WHERE id=?", "sqlite_autoindex_versions_1"),
        ("SELECT * FROM versions WHERE id=? AND scope=?", "sqlite_autoindex_versions_1"),
        (
            "SELECT DISTINCT commit_id, scope FROM versions WHERE id=? AND commit_id!=?",
            "sqlite_autoindex_versions_1",
        ),
        ("SELECT * FROM versions WHERE session=?", "versions_session"),
        ("SELECT * FROM versions WHERE session=? AND scope=?", "versions_session"),
        ("SELECT * FROM versions WHERE scope=? AND path=? ORDER BY seq DESC", "versions_path"),
        ("SELECT * FROM versions WHERE memory_id=? AND seq > ?", "versions_memory"),
        ("SELECT * FROM versions WHERE commit_id=?", "versions_commit"),
    ],
)
def test_lookups_of_versions_read_an_index(store: Store, query: str, index: str) -> None:
    store.write("/a", "one\n", session="sesn_1")
    plan = " | ".join(
        r[3] for r in store.core.index.db.execute("EXPLAIN QUERY PLAN " + query, (None,) * query.count("?"))
    )
    assert f"INDEX {index} " in plan and "SCAN versions" not in plan, plan


_OPEN = """
import sys
import gitmem
s = gitmem.open_store(sys.argv[1])
print(len(s.versions(scope="main")), len(s.versions(scope="team")))
s.close()
"""


def test_processes_opening_an_index_of_format_3_at_once_each_answer(store: Store) -> None:
    """Three processes open a format-3 index at once: each derives it again or finds it derived by
    another, all answer what the store holds, and the index ends in this format."""
    _history(store)
    expected = f"{len(store.versions(scope='main'))} {len(store.versions(scope='team'))}"
    path = store.path
    store.close()
    index_file = Path(path) / "gitmem" / INDEX_FILE
    _to_format_3(index_file)
    procs = [
        subprocess.Popen([sys.executable, "-c", _OPEN, str(path)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outs = [p.communicate()[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert outs == [expected] * 3
    db = sqlite3.connect(index_file)
    assert db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == (SCHEMA_VERSION,)
    assert "versions_id" not in {n for (n,) in db.execute("SELECT name FROM sqlite_master")}
    db.close()


@pytest.mark.parametrize("damage", ["deleted", "corrupt"])
def test_an_index_derived_again_keeps_who_redacted_what(store: Store, workspace: Path, damage: str) -> None:
    """Before: only ``gitmem reindex`` replayed the ledger's redactions; an index deleted, corrupt or
    of an older format was derived again without them (every version's redaction: None)."""
    _history(store)
    marked = [(v.id, v.redaction) for v in store.versions("/secret")]
    assert any(info is not None for _, info in marked)
    index_file = store.core.gitmem_dir / INDEX_FILE
    store.close()
    for suffix in ("-wal", "-shm"):
        index_file.with_name(index_file.name + suffix).unlink(missing_ok=True)
    if damage == "deleted":
        index_file.unlink()
    else:
        index_file.write_bytes(b"not a database" * 100)
    store = gitmem.open_store("notes", home=workspace)
    assert [(v.id, v.redaction) for v in store.versions("/secret")] == marked
    assert store.core.index.db.execute("SELECT COUNT(*) FROM meta WHERE key='marks'").fetchone() == (0,)
    store.close()
