"""Search benchmark (docs/architecture.md#performance-targets: "search over 10k memories within 2x of a raw SQLite FTS5 query").

Builds a store of N generated memories (deterministic, English-like text with Zipf word frequencies,
descriptions on most of them), then measures:

* query: ``Store.search(q, limit=10)`` in-process for 200 queries (words, phrases, prefixes), against
  the same FTS5 expressions run directly on a bare FTS5 table holding the same rows (same tokenizer,
  weights, ranking, snippet, LIMIT) in its own database: median and p95 per query, and their ratios;
* indexing cost of one write: ``Store.write`` of an existing memory with the FTS5 upkeep, against the
  same write with the FTS5 upkeep switched off (interleaved rounds, medians);
* index rebuild from git, with and without the FTS5 upkeep;
* with the extra ``semantic`` installed: every memory embedded (the catch-up's CPU per memory), then
  ``Store.search(q, mode="hybrid")`` and ``mode="lexical"`` for the same queries, p50 and p95 of
  wall and of CPU (``time.process_time``: wall time on a loaded machine measures the machine).

Usage: ``python bench/search_bench.py [--memories 10000] [--queries 200] [--writes 100] [--json F]``
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from gitmem.engine import search as search_mod  # noqa: E402
from gitmem.engine.batch import BatchOp, apply_batch  # noqa: E402
from gitmem.store import Store  # noqa: E402

_COMMON_TEXT = (
    "the of and to in is was it for on with as be at by this had not are but from or have an they which "
    "one you were all we her she there would their will when who him been has more if no out so said what "
    "up its about than into them can only other new some could time these two may then do first any my "
    "now such like our over man me even most made after also did many before must through back years "
    "where much your way well down should because each just those people how too little state good very "
    "make world still own see men work long get here between both life being under never day same "
    "another know while last might us great old year off come since against go came right used take "
    "three meeting project deploy server user customer prefers python release database error config "
    "memory agent session notes todo review budget schedule invoice design test branch merge cache "
    "latency api key token docs report team weekly plan goal issue fix bug feature backlog sprint"
)
COMMON = _COMMON_TEXT.split()
SYLLABLES = "ka lo mi ra te su no vi pe da zo ri fa gu le mo ne si ta ru be co di ex ol an".split()  # noqa: SIM905


def vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    words = list(dict.fromkeys(COMMON))
    seen = set(words)
    while len(words) < size:
        w = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


class Corpus:
    """Deterministic memories: (path, description or None, body)."""

    def __init__(self, n: int, seed: int = 42) -> None:
        self.rng = random.Random(seed)
        self.words = vocabulary(self.rng)
        self.weights = [1.0 / (rank + 1) ** 1.07 for rank in range(len(self.words))]
        self.items = [self._memory(i) for i in range(n)]

    def sentence(self, lo: int, hi: int) -> str:
        words = self.rng.choices(self.words, self.weights, k=self.rng.randint(lo, hi))
        return " ".join(words).capitalize() + "."

    def _memory(self, i: int) -> tuple[str, str | None, str]:
        path = f"/topic-{i % 40:02d}/sub-{(i // 40) % 25:02d}/memory-{i:05d}.md"
        description = self.sentence(4, 10) if self.rng.random() < 0.7 else None
        paragraphs = [
            " ".join(self.sentence(6, 18) for _ in range(self.rng.randint(1, 5)))
            for _ in range(self.rng.randint(1, 4))
        ]
        return path, description, "\n\n".join(paragraphs) + "\n"

    def queries(self, n: int) -> list[str]:
        """Mid-frequency words (single and pairs), phrases taken from bodies, and prefixes."""
        rng = random.Random(7)
        mid = self.words[150:1500]
        out: list[str] = []
        for k in range(n):
            kind = k % 4
            if kind == 0:
                out.append(rng.choice(mid))
            elif kind == 1:
                out.append(f"{rng.choice(self.words[:400])} {rng.choice(mid)}")
            elif kind == 2:
                body = rng.choice(self.items)[2].split()
            else:
                out.append(rng.choice(mid)[:3] + "*")
                continue
            if kind == 2:
                start = rng.randrange(max(1, len(body) - 2))
                out.append('"' + " ".join(w.strip(".").lower() for w in body[start : start + 2]) + '"')
        return out


def build_store(corpus: Corpus, home: Path) -> Store:
    store = gitmem.create_store("bench", home=home)
    ops = [BatchOp("write", p, body, description=d) for p, d, body in corpus.items]
    for start in range(0, len(ops), 2000):
        apply_batch(store.core, ops[start : start + 2000], actor="service:bench")
    return store


def build_raw(store: Store, path: Path) -> sqlite3.Connection:
    """A bare FTS5 table with exactly the rows the index holds (copied from it)."""
    raw = sqlite3.connect(str(path), isolation_level=None)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, description, path, "
        "tokenize='porter unicode61 remove_diacritics 2')"
    )
    raw.execute("BEGIN")
    for row in store.core.index.db.execute("SELECT rowid, body, description, path FROM search_fts"):
        raw.execute("INSERT INTO t(rowid, body, description, path) VALUES(?,?,?,?)", row)
    raw.execute("COMMIT")
    raw.execute("INSERT INTO t(t) VALUES('optimize')")
    store.core.index.purge_search()  # same shape (one segment) for both
    return raw


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": statistics.median(ordered) * 1000,
        "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))] * 1000,
    }


def bench_queries(
    store: Store, raw: sqlite3.Connection, queries: list[str], rounds: int = 3
) -> dict[str, Any]:
    weights = ", ".join(map(str, search_mod.WEIGHTS))
    sql = (
        "SELECT rowid, -rank, snippet(t, -1, '**', '**', '…', 16) FROM t "
        f"WHERE t MATCH ? AND rank MATCH 'bm25({weights})' ORDER BY rank LIMIT 10"
    )
    expressions = [search_mod.fts_query(q) for q in queries]
    lib: list[list[float]] = [[] for _ in queries]
    bare: list[list[float]] = [[] for _ in queries]
    hits = 0
    for _ in range(rounds):
        for i, (q, e) in enumerate(zip(queries, expressions, strict=True)):
            lib[i].append(timed(lambda q=q: store.search(q, limit=10)))  # type: ignore[misc]
            bare[i].append(timed(lambda e=e: raw.execute(sql, (e,)).fetchall()))  # type: ignore[misc]
    for q, e in zip(queries, expressions, strict=True):  # same answers, or the comparison is void
        got = [h.path for h in store.search(q, limit=10)]
        rowids = [r[0] for r in raw.execute(sql, (e,)).fetchall()]
        want = [
            store.core.index.db.execute("SELECT path FROM search_docs WHERE docid=?", (r,)).fetchone()[0]
            for r in rowids
        ]
        assert got == want, (q, got, want)
        hits += len(got)
    lib_s = summary([min(s) for s in lib])
    bare_s = summary([min(s) for s in bare])
    return {
        "queries": len(queries),
        "mean_hits": hits / len(queries),
        "gitmem": lib_s,
        "raw_fts5": bare_s,
        "ratio_median": lib_s["median_ms"] / bare_s["median_ms"],
        "ratio_p95": lib_s["p95_ms"] / bare_s["p95_ms"],
    }


@contextmanager
def fts_upkeep_off() -> Iterator[None]:
    """Switch the index's FTS5 upkeep off (the baseline of 'indexing cost of one write')."""
    saved = search_mod.index_text, search_mod.unindex_text
    search_mod.index_text = lambda *a, **k: None  # type: ignore[assignment]
    search_mod.unindex_text = lambda *a, **k: None  # type: ignore[assignment]
    try:
        yield
    finally:
        search_mod.index_text, search_mod.unindex_text = saved


def timed_write(store: Store, path: str, content: str, description: str | None) -> float:
    t0 = time.perf_counter()
    store.write(path, content, description=description, actor="service:bench")
    return time.perf_counter() - t0


def bench_writes(store: Store, corpus: Corpus, writes: int) -> dict[str, Any]:
    rng = random.Random(3)
    with_fts: list[float] = []
    without: list[float] = []
    upkeep: list[float] = []
    for n in range(writes):
        for mode in (0, 1) if n % 2 else (1, 0):
            path, desc, body = corpus.items[rng.randrange(len(corpus.items))]
            content = body + corpus.sentence(5, 12) + "\n"
            if mode:
                with_fts.append(timed_write(store, path, content, desc))
            else:
                with fts_upkeep_off():
                    without.append(timed_write(store, path, content, desc))
                # Keep the FTS table in step with heads for the rest of the run.
                head = store.core.index.head("main", path)
                assert head is not None
                t0 = time.perf_counter()
                with store.core.index._write() as db:  # the upkeep alone: what the FTS5 rows cost a write
                    search_mod.index_text(
                        db, "main", path, head.version_id, head.description, content.encode()
                    )
                upkeep.append(time.perf_counter() - t0)
    w, wo = statistics.median(with_fts), statistics.median(without)
    return {
        "writes": writes,
        "with_fts_ms": w * 1000,
        "without_fts_ms": wo * 1000,
        "ratio": w / wo,
        "fts_cost_ms": (w - wo) * 1000,
        "fts_upkeep_alone_ms": statistics.median(upkeep) * 1000,
    }


def bench_rebuild(store: Store, rounds: int = 2) -> dict[str, Any]:
    with_fts: list[float] = []
    without: list[float] = []
    for _ in range(rounds):  # interleaved, best of each: the first rebuild also warms caches
        with fts_upkeep_off():
            without.append(timed(store.core.index.rebuild))
        with_fts.append(timed(store.core.index.rebuild))
    t_with, t_without = min(with_fts), min(without)
    return {"with_fts_s": t_with, "without_fts_s": t_without, "ratio": t_with / t_without}


def bench_quality(tmp: Path) -> dict[str, Any]:
    """Recall of natural-language questions on the labelled set of bench/search_eval.py."""
    from bench import search_eval

    with gitmem.create_store("quality", home=tmp / "quality") as store:
        memories = search_eval.seed(store)
        at1, at5 = search_eval.recall_at(store, 1), search_eval.recall_at(store, 5)
    return {
        "memories": memories,
        "questions": at5.questions,
        "recall_at_1": at1.recall,
        "recall_at_5": at5.recall,
        "missed_at_5": [list(m[:2]) for m in at5.missed],
    }


def bench_modes(store: Store, queries: list[str]) -> dict[str, Any] | None:
    """Lexical and hybrid query latency, wall and CPU (None without the extra ``semantic``)."""
    from gitmem.engine import vectors

    if not vectors.available():
        return None
    c0, w0 = time.process_time(), time.perf_counter()
    embedded = vectors.catch_up(store.core, "main")
    embed_cpu, embed_wall = time.process_time() - c0, time.perf_counter() - w0
    out: dict[str, Any] = {
        "embedded": embedded,
        "embed_cpu_ms_per_memory": embed_cpu * 1000 / max(embedded, 1),
        "embed_wall_ms_per_memory": embed_wall * 1000 / max(embedded, 1),
    }
    for mode in ("lexical", "hybrid"):
        for q in queries[:5]:
            store.search(q, limit=10, mode=mode)  # the matrix and the model loaded once
        wall: list[float] = []
        cpu: list[float] = []
        answered = set()
        for q in queries:
            c0, w0 = time.process_time(), time.perf_counter()
            answered.add(store.search(q, limit=10, mode=mode).mode)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        out[mode] = {"answered": sorted(answered), "wall": summary(wall), "cpu": summary(cpu)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--memories", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--writes", type=int, default=100)
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: proves the script runs")
    args = ap.parse_args(argv)
    if args.quick:
        args.memories, args.queries, args.writes = (
            min(args.memories, 300),
            min(args.queries, 20),
            min(args.writes, 5),
        )
    with tempfile.TemporaryDirectory(prefix="gitmem-search-bench-") as tmp:
        corpus = Corpus(args.memories)
        t0 = time.perf_counter()
        store = build_store(corpus, Path(tmp))
        build_s = time.perf_counter() - t0
        raw = build_raw(store, Path(tmp) / "raw.sqlite")
        results = {
            "memories": args.memories,
            "sqlite": sqlite3.sqlite_version,
            "build_s": build_s,
            "index_file_mb": store.core.index.path.stat().st_size / 1e6,
            "query": bench_queries(store, raw, corpus.queries(args.queries)),
            "write": bench_writes(store, corpus, args.writes),
            "rebuild": bench_rebuild(store),
            "quality": bench_quality(Path(tmp)),
        }
        results["modes"] = bench_modes(store, corpus.queries(args.queries))
        raw.close()
        store.close()
    q, w, r = results["query"], results["write"], results["rebuild"]
    print(f"search bench: {args.memories} memories, SQLite {results['sqlite']}, built in {build_s:.1f} s")
    print(f"{'measurement':<34}{'gitmem':>12}{'floor':>12}{'ratio':>8}  target")
    print(
        f"{'query median (' + str(q['queries']) + ' queries)':<34}{q['gitmem']['median_ms']:>10.3f}ms"
        f"{q['raw_fts5']['median_ms']:>10.3f}ms{q['ratio_median']:>8.2f}  <= 2.0"
    )
    print(
        f"{'query p95':<34}{q['gitmem']['p95_ms']:>10.3f}ms{q['raw_fts5']['p95_ms']:>10.3f}ms"
        f"{q['ratio_p95']:>8.2f}  <= 2.0"
    )
    print(
        f"{'write (FTS5 upkeep vs none)':<34}{w['with_fts_ms']:>10.3f}ms{w['without_fts_ms']:>10.3f}ms"
        f"{w['ratio']:>8.2f}"
    )
    print(f"{'  FTS5 upkeep alone (median)':<34}{w['fts_upkeep_alone_ms']:>10.3f}ms")
    print(
        f"{'index rebuild from git':<34}{r['with_fts_s']:>11.2f}s{r['without_fts_s']:>11.2f}s{r['ratio']:>8.2f}"
    )
    print(f"mean hits per query {q['mean_hits']:.1f}; index file {results['index_file_mb']:.1f} MB")
    ql = results["quality"]
    print(
        f"search quality: {ql['questions']} labelled questions over {ql['memories']} memories "
        f"(bench/search_eval.py): recall@1 {ql['recall_at_1']:.2f}, recall@5 {ql['recall_at_5']:.2f}"
    )
    modes = results["modes"]
    if modes is None:
        print("hybrid: the extra semantic is not installed (pip install 'gitmem[semantic]')")
    else:
        print(
            f"embedding {modes['embedded']} memories: {modes['embed_cpu_ms_per_memory']:.2f} ms CPU "
            f"({modes['embed_wall_ms_per_memory']:.2f} ms wall) a memory; target <= 20 ms CPU"
        )
        for mode in ("lexical", "hybrid"):
            m = modes[mode]
            print(
                f"{mode + ' query (' + '/'.join(m['answered']) + ')':<34}"
                f"p50 {m['wall']['median_ms']:.3f} ms wall, {m['cpu']['median_ms']:.3f} ms CPU; "
                f"p95 {m['wall']['p95_ms']:.3f} ms wall, {m['cpu']['p95_ms']:.3f} ms CPU; target p50 <= 20 ms"
            )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
