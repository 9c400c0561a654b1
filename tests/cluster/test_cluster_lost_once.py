"""A lost write is recorded once: a replication into an old home that fails after its tail was
recorded finds the same tail at its next attempt, and records nothing new (schema migration 3
makes (store, old home, epoch, commit) unique, keeping the first of any duplicates already there)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace

import psycopg

import gitmem
from gitmem.cluster import endpoints, handoff, schema
from gitmem.cluster.state import ClusterState


def _row(sid: str, commit: str, bundle: str) -> tuple[str, ...]:
    return (sid, "n0", "1", "refs/heads/main", commit, "a subject", bundle)


def test_migration_3_keeps_one_record_of_each_lost_write(database: str) -> None:
    with psycopg.connect(database, autocommit=True) as conn:  # a database at schema version 2
        conn.execute(
            "CREATE TABLE gitmem_schema (version integer PRIMARY KEY, description text NOT NULL,"
            " applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, description, sql in schema.MIGRATIONS[:2]:
            conn.execute(sql)
            conn.execute(
                "INSERT INTO gitmem_schema (version, description) VALUES (%s, %s)", (version, description)
            )
        insert = (
            "INSERT INTO lost_writes (store_id, node, epoch, ref, commit_id, summary, bundle)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s)"
        )
        for row in (_row("s1", "c1", "first"), _row("s1", "c1", "again"), _row("s1", "c2", "first")):
            conn.execute(insert, row)
        conn.execute(insert, ("s1", "n0", "2", "refs/heads/main", "c1", "a later epoch", "other"))
    with ClusterState(database) as state:
        assert state.init() == list(range(3, schema.LATEST + 1))  # and the later migrations
        assert [(w.commit, w.epoch, w.bundle) for w in handoff.lost_writes(state, "s1")] == [
            ("c1", 1, "first"),
            ("c2", 1, "first"),
            ("c1", 2, "other"),
        ]
        again = handoff.LostWrite("s1", "n0", 1, "refs/heads/main", "c1", "a subject", "third")
        fresh = handoff.LostWrite("s1", "n0", 1, "refs/heads/main", "c3", "new", "third")
        assert handoff.record_lost(state, [again, fresh]) == [fresh]
        assert len(handoff.lost_writes(state, "s1")) == 4


def _git(path: Path, *args: str) -> str:
    return subprocess.run(
        ["git", f"--git-dir={path}", *args], capture_output=True, text=True, check=True
    ).stdout


def test_reporting_the_same_tail_again_records_it_once_and_keeps_one_bundle(
    database: str, tmp_path: Path
) -> None:
    with gitmem.open_store(gitmem.create_store("notes", home=tmp_path).path) as s:
        s.write("/a.md", "kept\n", actor="user:ada")
        s.write("/b.md", "lost\n", actor="user:ada")
        path, sid = Path(s.path), s.id
    listed = _git(path, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()
    heads = dict(line.split() for line in listed)
    tip = _git(path, "log", "--all", "-1", "--format=%H", "--", "b.md").strip() or None
    assert tip in heads.values(), (tip, heads)
    parent = _git(path, "rev-parse", f"{tip}^").strip()
    theirs = {name: parent if oid == tip else oid for name, oid in heads.items()}  # the tail: tip
    with ClusterState(database) as state:
        state.init()
        view = SimpleNamespace(state=state, name="n0", lost=[])
        for seq in (5, 6, 5):  # the first attempt failed after recording; then a retry, a replay
            endpoints.report_tail(view, sid, path, 1, heads, theirs, seq)  # type: ignore[arg-type]
        recorded = handoff.lost_writes(state, sid)
        assert [(w.commit, w.bundle) for w in recorded] == [(tip, "gitmem/lost/epoch-1-seq-5.bundle")]
        assert len(view.lost) == 1
    assert sorted(p.name for p in (path / "gitmem" / "lost").iterdir()) == [
        "epoch-1-seq-5.bundle",
        "epoch-1-seq-5.objects",
    ]
    _git(path, "bundle", "verify", str(path / "gitmem" / "lost" / "epoch-1-seq-5.bundle"))
