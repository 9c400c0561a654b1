"""Semantic and hybrid search (gitmem.engine.vectors, gitmem.engine.hybrid) with the real bundled
model: paraphrases found by meaning, vectors purged by redaction, rebuilt to the same rankings, never
embedded on a write's path, caught up in the background, and crash-safe."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gitmem.engine import hybrid, vector_catchup, vectors
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.errors import InvalidInputError
from gitmem.store import Store
from tests.helpers import patience

pytestmark = pytest.mark.skipif(not vectors.available(), reason="the extra 'semantic' is not installed")

MEMORIES = {
    "/people/bob.md": "Bob cannot eat peanuts or shellfish; he carries an epipen.",
    "/people/alice.md": "Alice takes her coffee black, no sugar.",
    "/infra/db.md": "The primary database is PostgreSQL 15 on db-primary.",
    "/projects/atlas.md": "Atlas ships with a blue-green rollout on the staging cluster.",
    "/people/carol.md": "Carol lives in Lisbon and works remotely.",
    "/notes/trip.md": "The team offsite is in Oslo in June.",
    "/people/dave.md": "Dave plays the violin in an orchestra on weekends.",
}
PARAPHRASES = {
    "any food allergies?": "/people/bob.md",
    "what does she like to drink": "/people/alice.md",
    "musical hobbies": "/people/dave.md",
    "where is the sql server": "/infra/db.md",
}


@pytest.fixture
def seeded(store: Store) -> Store:
    for path, text in MEMORIES.items():
        store.write(path, text)
    return store


def test_a_paraphrase_is_found_by_meaning_and_not_by_words(seeded: Store) -> None:
    for query, expected in PARAPHRASES.items():
        assert seeded.search(query).mode == "lexical"
        assert [h.path for h in seeded.search(query)] == [], query
        semantic = seeded.search(query, mode="semantic")
        assert semantic.mode == "semantic" and semantic[0].path == expected, query
        hybrid_hits = seeded.search(query, mode="hybrid")
        assert hybrid_hits.mode == "hybrid" and hybrid_hits[0].path == expected, query


def test_hybrid_keeps_exact_word_matches_first(seeded: Store) -> None:
    hits = seeded.search("PostgreSQL", mode="hybrid")
    assert hits.mode == "hybrid" and hits[0].path == "/infra/db.md"
    assert hits[0].snippet and "**PostgreSQL**" in hits[0].snippet
    scoped = seeded.search("musical hobbies", mode="hybrid", path_prefix="/infra/")
    assert [h.path for h in scoped] == ["/infra/db.md"]  # the prefix holds: never Dave's note


def test_a_write_never_embeds(seeded: Store) -> None:
    seeded.search("anything", mode="semantic")  # catches the seeded memories up
    before = vectors.stored_blobs(seeded.core)
    seeded.write("/people/erin.md", "Erin was born on 14 March.")
    blob = str(seeded.core.head_blob("main", "/people/erin.md")[1].id)
    assert blob not in vectors.stored_blobs(seeded.core)
    assert vectors.stored_blobs(seeded.core) == before
    assert seeded.search("birthday", mode="semantic")[0].path == "/people/erin.md"  # embedded inline now
    assert blob in vectors.stored_blobs(seeded.core)


def test_redaction_purges_the_vector(seeded: Store) -> None:
    seeded.write("/secret.md", "the vault combination is left 32 right 17 left 8")
    assert seeded.search("vault combination", mode="semantic")[0].path == "/secret.md"
    blob = str(seeded.core.head_blob("main", "/secret.md")[1].id)
    db = sqlite3.connect(vectors.vector_path(seeded.core))
    (vec,) = db.execute("SELECT vec FROM vectors WHERE blob=?", (blob,)).fetchone()
    db.close()
    version = seeded.versions("/secret.md")[0]
    seeded.write(
        "/secret.md", "the combination was changed; ask Carol"
    )  # redaction wants it gone from the head
    assert blob in vectors.stored_blobs(seeded.core)  # an old content keeps its row until a purge
    seeded.redact(version.id, reason="a secret", actor="user:admin")
    assert blob not in vectors.stored_blobs(seeded.core)
    raw = b"".join(
        Path(str(vectors.vector_path(seeded.core)) + s).read_bytes()
        for s in ("", "-wal")
        if Path(str(vectors.vector_path(seeded.core)) + s).exists()
    )
    assert vec not in raw  # not a row, not a freed page, not a WAL frame
    hits = seeded.search("vault combination", mode="semantic")
    assert all("vault" not in h.snippet for h in hits)


def test_a_rebuild_gives_the_same_rankings(seeded: Store) -> None:
    queries = list(PARAPHRASES) + ["Oslo", "coffee black", "rollout"]
    before = {q: [(h.path, round(h.score, 5)) for h in seeded.search(q, mode="hybrid")] for q in queries}
    path, gitmem_dir = seeded.path, seeded.core.gitmem_dir
    seeded.close()
    for name in ("index.sqlite", "vectors.sqlite"):
        for suffix in ("", "-wal", "-shm"):
            (gitmem_dir / (name + suffix)).unlink(missing_ok=True)
    import gitmem

    again = gitmem.open_store(path)
    try:
        after = {q: [(h.path, round(h.score, 5)) for h in again.search(q, mode="hybrid")] for q in queries}
    finally:
        again.close()
    assert after == before


def test_many_pending_answers_lexically_then_catches_up(store: Store) -> None:
    ops = [BatchOp("write", f"/n/{i:03d}.md", f"note {i} about the weather in town {i}") for i in range(80)]
    ops.append(BatchOp("write", "/n/cat.md", "my cat sleeps all afternoon"))
    apply_batch(store.core, ops)
    first = store.search("kitten", mode="hybrid")
    assert first.mode == "lexical" and first.requested == "hybrid" and first.pending == 81
    vector_catchup.wait_background(store.core, timeout=120)
    second = store.search("kitten", mode="hybrid")
    assert second.mode == "hybrid" and second.pending == 0 and second[0].path == "/n/cat.md"


def test_auto_and_bad_modes(seeded: Store) -> None:
    assert seeded.search("musical hobbies", mode="auto").mode == "hybrid"
    with pytest.raises(InvalidInputError):
        seeded.search("x", mode="vector")
    with pytest.raises(InvalidInputError):
        seeded.search("x", mode="semantic", raw=True)
    with pytest.raises(InvalidInputError):
        seeded.search("x", mode="semantic", limit=0)


def test_a_corrupt_or_foreign_vector_file_is_rebuilt(seeded: Store) -> None:
    seeded.search("musical hobbies", mode="semantic")
    path = vectors.vector_path(seeded.core)
    vectors._forget(seeded.core)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    path.write_bytes(b"this is not a database" * 100)
    assert seeded.search("musical hobbies", mode="semantic")[0].path == "/people/dave.md"
    db = sqlite3.connect(path)
    db.execute("UPDATE meta SET value='another-model' WHERE key='model'")
    db.commit()
    db.close()
    vectors._forget(seeded.core)
    assert seeded.search("musical hobbies", mode="semantic")[0].path == "/people/dave.md"


def test_a_killed_catch_up_leaves_a_consistent_file(store: Store) -> None:
    ops = [
        BatchOp("write", f"/k/{i:04d}.md", f"memory number {i}: " + "words " * (i % 40)) for i in range(1500)
    ]
    apply_batch(store.core, ops)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-m", "gitmem.engine.vector_catchup", str(store.path)], env=env)
    path = vectors.vector_path(store.core)
    deadline = patience(120)
    while time.monotonic() < deadline and len(vectors.stored_blobs(store.core) if path.exists() else ()) == 0:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = len(vectors.stored_blobs(store.core))
    assert 0 < partial <= 1500
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    assert vectors.catch_up(store.core, "main") == 1500 - partial
    assert len(vectors.stored_blobs(store.core)) == 1500
    assert hybrid.search(store.core, "memory number 7", mode="hybrid").mode == "hybrid"


def test_no_vector_file_possible_answers_lexically(seeded: Store) -> None:
    path = vectors.vector_path(seeded.core)
    path.mkdir()  # nothing can open a database there (like a read-only or full directory)
    (path / "keep").write_text("x")
    found = seeded.search("Oslo", mode="hybrid")
    assert found.mode == "lexical" and found.pending == -1 and found[0].path == "/notes/trip.md"
    seeded.write("/more.md", "writes never notice")
    (path / "keep").unlink()
    path.rmdir()
    assert seeded.search("musical hobbies", mode="hybrid").mode == "hybrid"
