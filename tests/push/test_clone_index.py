"""A clone's index seeded from its source's: reads right after the clone equal the source's with
no history walk left to do, and a source index that does not match the clone's git is not taken."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import gitmem
from gitmem.push.clone import clone
from gitmem.store import Store


def _fill(store: Store) -> None:
    for i in range(12):
        store.write(
            f"/notes/n{i}.md", f"---\ndescription: note {i}\n---\nbody of note {i}\n", actor="user:alice"
        )
    store.write("/notes/n3.md", "edited three\n", actor="user:bob")
    store.rename("/notes/n4.md", "/archive/n4.md", actor="user:bob")
    store.delete("/notes/n5.md", actor="user:bob")
    store.write("/team.md", "standup 9:00\n", scope="team", actor="user:bob")


def _reads(store: Store) -> tuple[object, ...]:
    return (
        store.list("/", depth=0),
        store.list("/", depth=0, scope="team"),
        store.list("/notes/", depth=1),
        sorted((h.path, h.version_id, round(h.score, 6)) for h in store.search("note")),  # ties: any order
        store.versions(),
    )


def _index_tips(path: Path) -> dict[str, str]:
    db = sqlite3.connect(str(path / ".git" / "gitmem" / "index.sqlite"))
    try:
        return dict(db.execute("SELECT scope, tip FROM scopes").fetchall())
    finally:
        db.close()


def test_reads_right_after_a_clone_equal_the_source_and_need_no_history_walk(
    store: Store, tmp_path: Path
) -> None:
    _fill(store)
    expected = _reads(store)
    result = clone("notes", tmp_path / "c")
    assert result.seeded_index
    # Before the clone is first opened, its index already covers each scope at the clone's own tip:
    # the first command's catch-up finds nothing to walk.
    with gitmem.open_store(tmp_path / "c") as copy:
        tips = {s: str(copy.core.tip(s)) for s in copy.core.scopes()}
    assert _index_tips(tmp_path / "c") == tips == {"main": tips["main"], "team": tips["team"]}
    with gitmem.open_store(tmp_path / "c") as copy:
        assert _reads(copy) == expected
        copy.reindex()  # what the clone derives from git alone is the same
        assert _reads(copy) == expected


def _forge(store: Store, sql: str) -> None:
    store.core.index.close()
    db = sqlite3.connect(str(store.core.gitmem_dir / "index.sqlite"), isolation_level=None)
    try:
        db.execute(sql)
    finally:
        db.close()


def test_a_source_index_that_does_not_match_the_clone_is_not_taken(store: Store, tmp_path: Path) -> None:
    _fill(store)
    expected = _reads(store)
    forgeries = [
        # ids moved consistently in heads and versions: the commit's trailers name others
        "UPDATE heads SET memory_id='mem_01ARZ3NDEKTSV4RRFFQ69G5FAV' WHERE path='/notes/n1.md'",
        "UPDATE heads SET sha256='0' || substr(sha256, 2) WHERE path='/notes/n2.md'",
        "DELETE FROM heads WHERE path='/notes/n6.md'",
        "UPDATE heads SET description='forged' WHERE path='/notes/n7.md'",
        # the head named by the memory's first version (another blob); a version of no commit
        "UPDATE heads SET version_id=(SELECT id FROM versions WHERE path='/notes/n3.md' ORDER BY seq LIMIT 1)"
        " WHERE path='/notes/n3.md'",
        "UPDATE versions SET commit_id='00000000000000000000000000000000000000aa' WHERE path='/notes/n8.md'",
    ]
    for i, sql in enumerate(forgeries):
        _forge(store, sql)
        if i == 0:
            _forge(
                store,
                "UPDATE versions SET memory_id='mem_01ARZ3NDEKTSV4RRFFQ69G5FAV' WHERE path='/notes/n1.md'",
            )
        result = clone("notes", tmp_path / f"c{i}")
        assert not result.seeded_index, sql
        with gitmem.open_store(tmp_path / f"c{i}") as copy:
            assert _reads(copy) == expected, sql  # derived from the clone's git, not the forgery
        store.reindex()  # the source's own index, from git again


def test_tables_that_are_not_the_index_s_own_are_not_carried(store: Store, tmp_path: Path) -> None:
    _fill(store)
    expected = _reads(store)
    _forge(store, "CREATE TABLE private_notes(secret TEXT)")
    _forge(store, "INSERT INTO private_notes VALUES('the source only')")
    result = clone("notes", tmp_path / "c")
    assert result.seeded_index
    data = (tmp_path / "c" / ".git" / "gitmem" / "index.sqlite").read_bytes()
    assert b"the source only" not in data and b"private_notes" not in data
    with gitmem.open_store(tmp_path / "c") as copy:
        assert _reads(copy) == expected


def test_a_source_index_lying_about_older_versions_is_not_taken(store: Store, tmp_path: Path) -> None:
    """Rows of versions that are no longer heads are checked against their commits too: a forged
    actor, session or time, a hidden, added or altered older version is not seeded."""
    _fill(store)
    expected = _reads(store)
    first = "(SELECT MIN(seq) FROM versions WHERE path='/notes/n3.md')"
    forgeries = [
        f"UPDATE versions SET actor='user:mallory' WHERE seq={first}",
        f"UPDATE versions SET session='evil' WHERE seq={first}",
        f"UPDATE versions SET created_at=1 WHERE seq={first}",
        f"DELETE FROM versions WHERE seq={first}",
        f"UPDATE versions SET sha256='0' || substr(sha256, 2) WHERE seq={first}",
        f"UPDATE versions SET operation='modified' WHERE seq={first}",
        "UPDATE versions SET path='/notes/n9.md', prev_path=NULL WHERE path='/archive/n4.md'",
        "INSERT INTO versions(id, memory_id, scope, path, operation, actor, created_at, commit_id)"
        " SELECT 'memver_01ARZ3NDEKTSV4RRFFQ69G5FAV', memory_id, scope, path, 'deleted', actor, created_at,"
        f" commit_id FROM versions WHERE seq={first}",
        "UPDATE heads SET created_at=1 WHERE path='/notes/n3.md'",
        f"UPDATE versions SET size=size+1 WHERE seq={first}",
        # the blob ids an older row names: one of another type, in capitals or carrying a second
        # line is refused (before: a blob id stored as bytes crashed the clone with a TypeError)
        f"UPDATE versions SET blob=CAST(blob AS BLOB) WHERE seq={first}",
        f"UPDATE versions SET blob=upper(blob) WHERE seq={first}",
        f"UPDATE versions SET blob=blob || char(10) || 'contents ' || blob WHERE seq={first}",
    ]
    for i, sql in enumerate(forgeries):
        _forge(store, sql)
        result = clone("notes", tmp_path / f"c{i}")
        assert not result.seeded_index, sql
        with gitmem.open_store(tmp_path / f"c{i}") as copy:
            assert _reads(copy) == expected, sql
        store.reindex()


def test_triggers_and_views_of_the_source_index_are_not_carried(store: Store, tmp_path: Path) -> None:
    """A trigger could rewrite rows after they were checked (here: on the counters' UPDATE the
    check itself makes) or later in the clone; the clone's index has none."""
    _fill(store)
    expected = _reads(store)
    _forge(
        store,
        "CREATE TRIGGER evil AFTER UPDATE ON scopes BEGIN UPDATE versions SET actor='user:mallory'; END",
    )
    _forge(store, "CREATE VIEW peek AS SELECT * FROM versions")
    clone("notes", tmp_path / "c")
    db = sqlite3.connect(str(tmp_path / "c" / ".git" / "gitmem" / "index.sqlite"))
    try:
        kinds = db.execute("SELECT type FROM sqlite_master WHERE type IN ('trigger', 'view')").fetchall()
    finally:
        db.close()
    assert kinds == []
    with gitmem.open_store(tmp_path / "c") as copy:
        assert _reads(copy) == expected
