"""Retrieval on LoCoMo (Maharana et al., ACL 2024): plain BM25, gitmem lexical and gitmem hybrid.

Each conversation becomes one store and each turn one memory, written through gitmem's real write
path (one ``apply_batch`` per conversation, then the index catches up from git). Every question of
categories 1-4 (the adversarial category 5 has no evidence) is asked through ``Store.search``; its
gold is its evidence turns. Printed per system and category:

* turn level ``recall_any@k`` (k = 1, 5, 10): the share of questions with at least one evidence turn
  among the first k hits;
* session level ``recall_any@k``: the hits' sessions in order of first appearance, against the
  sessions of the evidence turns.

Systems: ``bm25`` (a plain Okapi BM25 as the data's README defines it: k1 1.2, b 0.75, lower-cased
alphanumeric tokens, a small stop list, over the turn's text), ``lexical`` (``Store.search(mode=
"lexical")``), ``semantic`` and ``hybrid`` (with the extra ``semantic`` installed). Then the cost: query
latency p50/p95 per system over the questions, on the conversation stores and on a 10k-memory store
(the five conversations' turns repeated under other session names; quick: 3k), and indexing CPU per
memory (the batch plus the lexical catch-up; the vectors' catch-up apart).

The data is read from ``--data DIR`` (or ``$GITMEM_LOCOMO_DIR``): the directory of the dev split's
``NN.json`` files. It is used for evaluation only and never copied anywhere.

Usage: ``python bench/locomo_eval.py --data DIR [--quick] [--systems bm25,lexical,hybrid] [--json F]``
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from gitmem.engine.batch import BatchOp, apply_batch  # noqa: E402
from gitmem.store import Store  # noqa: E402

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10)

# --------------------------------------------------------------------- data
_SESSION = re.compile(r"^session_(\d+)$")


@dataclass
class Turn:
    dia_id: str
    session: int
    speaker: str
    text: str
    date: str

    @property
    def path(self) -> str:
        s, t = self.dia_id[1:].split(":")
        return f"/session-{int(s):02d}/turn-{int(t):03d}.md"

    @property
    def body(self) -> str:
        return f"{self.speaker}: {self.text}"


@dataclass
class Question:
    text: str
    category: int
    evidence: list[str]


@dataclass
class Conversation:
    name: str
    turns: list[Turn]
    questions: list[Question]


def load(data: Path, limit: int | None = None) -> list[Conversation]:
    files = sorted(data.glob("*.json"))
    if not files:
        raise SystemExit(f"no LoCoMo conversations (*.json) in {data}")
    out = []
    for f in files[:limit]:
        raw = json.loads(f.read_text())
        turns = []
        for key in sorted((k for k in raw if _SESSION.match(k)), key=lambda k: int(k.split("_")[1])):
            n = int(key.split("_")[1])
            date = raw.get(f"{key}_date_time", "")
            for t in raw[key]:
                text = t["text"]
                if t.get("blip_caption"):
                    text += f" [shares a photo of {t['blip_caption']}]"
                turns.append(Turn(t["dia_id"], n, t["speaker"], text, date))
        ids = {t.dia_id for t in turns}
        qs = []
        for q in raw["qa"]:
            ev = [e.strip() for es in q.get("evidence", []) for e in es.split(";") if e.strip() in ids]
            if q["category"] in CATEGORIES and ev:
                qs.append(Question(q["question"], q["category"], ev))
        out.append(Conversation(f.stem, turns, qs))
    return out


# --------------------------------------------------------------------- plain BM25
BM25_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    ]
)
_TOKEN = re.compile(r"[a-z0-9]+")


def bm25_tokens(text: str) -> list[str]:
    return [t for t in _TOKEN.findall(text.lower()) if t not in BM25_STOP]


class PlainBM25:
    """Okapi BM25 (k1 1.2, b 0.75) over the turns' text, nothing else."""

    def __init__(self, docs: Sequence[str], k1: float = 1.2, b: float = 0.75) -> None:
        self.k1, self.b = k1, b
        self.tfs = [Counter(bm25_tokens(d)) for d in docs]
        self.lens = [sum(tf.values()) for tf in self.tfs]
        self.avg = sum(self.lens) / max(len(self.lens), 1)
        df: Counter[str] = Counter()
        for tf in self.tfs:
            df.update(tf.keys())
        n = len(docs)
        self.idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
        self.postings: dict[str, list[int]] = defaultdict(list)
        for i, tf in enumerate(self.tfs):
            for t in tf:
                self.postings[t].append(i)

    def rank(self, query: str, k: int) -> list[int]:
        scores: dict[int, float] = defaultdict(float)
        for t in set(bm25_tokens(query)):
            idf = self.idf.get(t)
            if idf is None:
                continue
            for i in self.postings[t]:
                f = self.tfs[i][t]
                scores[i] += (
                    idf * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self.lens[i] / self.avg))
                )
        return sorted(scores, key=lambda i: (-scores[i], i))[:k]


# --------------------------------------------------------------------- metrics
@dataclass
class Tally:
    turn: dict[int, int] = field(default_factory=lambda: dict.fromkeys(KS, 0))
    session: dict[int, int] = field(default_factory=lambda: dict.fromkeys(KS, 0))
    n: int = 0

    def add(self, ranked: list[str], evidence: list[str]) -> None:
        self.n += 1
        gold = set(evidence)
        gold_s = {e.split(":")[0] for e in evidence}
        sessions = list(dict.fromkeys(r.split(":")[0] for r in ranked))
        for k in KS:
            self.turn[k] += bool(gold & set(ranked[:k]))
            self.session[k] += bool(gold_s & set(sessions[:k]))


def dia_of(path: str) -> str:
    m = re.match(r"^/session-(\d+)/turn-(\d+)\.md$", path)
    assert m, path
    return f"D{int(m[1])}:{int(m[2])}"


@dataclass
class Result:
    system: str
    tallies: dict[str, Tally]
    latencies: list[float]
    index_cpu_per_memory: float | None = None
    modes: Counter[str] = field(default_factory=Counter)
    extra: dict[str, Any] = field(default_factory=dict)


def evaluate(
    convs: list[Conversation], system: str, rank: Callable[[int, str, int], tuple[list[str], str]]
) -> Result:
    tallies: dict[str, Tally] = defaultdict(Tally)
    lat: list[float] = []
    cpu: list[float] = []
    modes: Counter[str] = Counter()
    for ci, conv in enumerate(convs):
        for q in conv.questions:
            c0, t0 = time.process_time(), time.perf_counter()
            ranked, mode = rank(ci, q.text, max(KS) * 3)
            lat.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            modes[mode] += 1
            for key in ("all", CATEGORIES[q.category]):
                tallies[key].add(ranked, q.evidence)
    return Result(system, dict(tallies), lat, modes=modes, extra={"cpu": cpu})


# --------------------------------------------------------------------- stores
def build_store(
    home: Path, conv: Conversation, name: str, turns: Sequence[Turn] | None = None, *, described: bool = True
) -> tuple[Store, float]:
    """One store holding one memory per turn (one batch); returns it and the CPU seconds the batch
    and the lexical index's catch-up took. ``described``: each memory's description is its speaker
    and its session's date (the fields a memory-writing agent would give); else none."""
    store = gitmem.create_store(name, home=home)
    ops = [
        BatchOp(
            "write",
            t.path,
            t.body,
            description=(f"{t.speaker}, {t.date}" if t.date else t.speaker) if described else None,
        )
        for t in (turns if turns is not None else conv.turns)
    ]
    c0 = time.process_time()
    apply_batch(store.core, ops, scope="main", actor="user:locomo")
    store.core.index.ensure("main")
    return store, time.process_time() - c0


def pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def print_table(results: list[Result], out: Callable[[str], None]) -> None:
    cats = ["all"] + list(CATEGORIES.values())
    out(
        "| system | category | n | turn R@1 | turn R@5 | turn R@10 | session R@1 | session R@5 | session R@10 |"
    )
    out("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        for c in cats:
            t = r.tallies.get(c)
            if t is None or not t.n:
                continue
            cells = [f"{t.turn[k] / t.n:.3f}" for k in KS] + [f"{t.session[k] / t.n:.3f}" for k in KS]
            out(f"| {r.system} | {c} | {t.n} | " + " | ".join(cells) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.environ.get("GITMEM_LOCOMO_DIR"))
    ap.add_argument("--quick", action="store_true", help="two conversations, a 3k latency store")
    ap.add_argument("--systems", default="bm25,lexical-plain,lexical,semantic,hybrid")
    ap.add_argument(
        "--fusions",
        default="",
        help="extra hybrid rows, e.g. weighted:0.3,rrf:1 (fusion:alpha; the default row uses gitmem's own)",
    )
    ap.add_argument("--scale", type=int, default=None, help="memories of the latency store (default 10000)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if not args.data:
        ap.error("--data DIR (or $GITMEM_LOCOMO_DIR) is required: the LoCoMo dev split's directory")
    convs = load(Path(args.data), 2 if args.quick else None)
    systems = [s for s in args.systems.split(",") if s]
    scale = args.scale or (3000 if args.quick else 10000)
    out = print
    log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    semantic_ok = _semantic_available()
    if not semantic_ok:
        dropped = [s for s in systems if s in ("semantic", "hybrid")]
        if dropped:
            log(f"the extra 'semantic' is not installed: {', '.join(dropped)} skipped")
        systems = [s for s in systems if s not in dropped]
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="gitmem-locomo-") as tmp:
        home = Path(tmp)
        stores: list[Store] = []
        cpu, memories = 0.0, 0
        plain_stores: list[Store] = []
        if any(s != "bm25" for s in systems):
            for conv in convs:
                log(f"conversation {conv.name}: {len(conv.turns)} turns, {len(conv.questions)} questions")
                store, c = build_store(home, conv, f"locomo-{conv.name}")
                stores.append(store)
                cpu += c
                memories += len(conv.turns)
                if "lexical-plain" in systems:
                    plain_stores.append(
                        build_store(home, conv, f"locomo-plain-{conv.name}", described=False)[0]
                    )
        from gitmem.engine import hybrid

        variants = [(f"hybrid[{v}]", v) for v in args.fusions.split(",") if v]
        systems += [name for name, _v in variants]
        vec_cpu = 0.0
        if semantic_ok and any(s in ("semantic", "hybrid") for s in systems):
            from gitmem.engine import vectors

            c0 = time.process_time()
            for store in stores:
                vectors.catch_up(store.core, "main")
            vec_cpu = time.process_time() - c0
        for system in systems:
            log(f"evaluating {system}")
            if system == "bm25":
                indexes = []
                c0 = time.process_time()
                for conv in convs:
                    indexes.append(PlainBM25([t.body for t in conv.turns]))
                bcpu = time.process_time() - c0

                def rank_bm25(
                    ci: int, q: str, k: int, _ix: list[PlainBM25] = indexes
                ) -> tuple[list[str], str]:
                    return [convs[ci].turns[i].dia_id for i in _ix[ci].rank(q, k)], "bm25"

                r = evaluate(convs, system, rank_bm25)
                r.index_cpu_per_memory = bcpu / sum(len(c.turns) for c in convs)
            else:
                mode, pool = system, stores
                if system == "lexical-plain":
                    mode, pool = "lexical", plain_stores
                saved = hybrid.ALPHA, hybrid.FUSION
                if system.startswith("hybrid["):
                    fusion, alpha = dict(variants)[system].split(":")
                    mode, hybrid.FUSION, hybrid.ALPHA = "hybrid", fusion, float(alpha)

                def rank_store(
                    ci: int, q: str, k: int, _mode: str = mode, _pool: list[Store] = pool
                ) -> tuple[list[str], str]:
                    res = _pool[ci].search(q, limit=k, mode=_mode)
                    return [dia_of(h.path) for h in res], res.mode

                r = evaluate(convs, system, rank_store)
                hybrid.ALPHA, hybrid.FUSION = saved
                r.index_cpu_per_memory = cpu / max(memories, 1)
                if mode in ("semantic", "hybrid"):
                    r.extra["vector_cpu_per_memory"] = vec_cpu / max(memories, 1)
            results.append(r)
        # Latency at scale: one store of `scale` turns (the conversations' turns under other sessions).
        scale_lat: dict[str, list[float]] = {}
        if any(s != "bm25" for s in systems):
            pool = [t for c in convs for t in c.turns]
            turns = []
            for i in range(scale):
                t = pool[i % len(pool)]
                rep = i // len(pool)
                s, n = t.dia_id[1:].split(":")
                turns.append(
                    Turn(
                        f"D{int(s) + 100 * rep + 1000 * (i % len(pool) // 1000)}:{i}",
                        0,
                        t.speaker,
                        t.text,
                        t.date,
                    )
                )
            log(f"latency store: {scale} memories")
            big, bc = build_store(home, convs[0], "locomo-scale", turns)
            scale_index_cpu = bc / scale
            if semantic_ok and any(s in ("semantic", "hybrid") for s in systems):
                from gitmem.engine import vectors

                c0 = time.process_time()
                vectors.catch_up(big.core, "main")
                scale_lat["_vector_cpu_per_memory"] = [(time.process_time() - c0) / scale]
            qs = [q.text for c in convs for q in c.questions][:300]
            for system in systems:
                if system == "bm25" or "[" in system or system == "lexical-plain":
                    continue
                big.search(qs[0], limit=10, mode=system)  # warm
                lats, cpus = [], []
                for q in qs:
                    c0, t0 = time.process_time(), time.perf_counter()
                    big.search(q, limit=10, mode=system)
                    lats.append(time.perf_counter() - t0)
                    cpus.append(time.process_time() - c0)
                scale_lat[system] = lats
                scale_lat["_cpu_" + system] = cpus
            big.close()
        for s in stores + plain_stores:
            s.close()
    out(
        f"LoCoMo dev: {len(convs)} conversations, {sum(len(c.turns) for c in convs)} turns, "
        f"{sum(len(c.questions) for c in convs)} questions (categories 1-4)"
    )
    out("")
    print_table(results, out)
    out("")
    out(
        "| system | query p50 (conv stores) | p95 | CPU p50 | index CPU / memory | vector CPU / memory | modes |"
    )
    out("|---|---|---|---|---|---|---|")
    for r in results:
        v = r.extra.get("vector_cpu_per_memory")
        out(
            f"| {r.system} | {pct(r.latencies, 50) * 1e3:.2f} ms | {pct(r.latencies, 95) * 1e3:.2f} ms | "
            f"{pct(r.extra.get('cpu') or [0.0], 50) * 1e3:.2f} ms | "
            f"{(r.index_cpu_per_memory or 0) * 1e3:.2f} ms | {'' if v is None else f'{v * 1e3:.2f} ms'} | "
            f"{dict(r.modes)} |"
        )
    if scale_lat:
        out("")
        out(f"| system | query p50 ({scale} memories) | p95 | CPU p50 | CPU p95 |")
        out("|---|---|---|---|---|")
        for system, lats in scale_lat.items():
            if system.startswith("_"):
                continue
            cpus = scale_lat["_cpu_" + system]
            out(
                f"| {system} | {pct(lats, 50) * 1e3:.2f} ms | {pct(lats, 95) * 1e3:.2f} ms | "
                f"{pct(cpus, 50) * 1e3:.2f} ms | {pct(cpus, 95) * 1e3:.2f} ms |"
            )
        out(
            f"index CPU / memory on the {scale}-memory store (batch + lexical catch-up): {scale_index_cpu * 1e3:.2f} ms"
        )
        if "_vector_cpu_per_memory" in scale_lat:
            out(
                f"vector CPU / memory on the {scale}-memory store: {scale_lat['_vector_cpu_per_memory'][0] * 1e3:.2f} ms"
            )
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    r.system: {
                        c: {
                            "n": t.n,
                            "turn": {k: t.turn[k] / t.n for k in KS},
                            "session": {k: t.session[k] / t.n for k in KS},
                        }
                        for c, t in r.tallies.items()
                    }
                    | {"p50_ms": pct(r.latencies, 50) * 1e3}
                    for r in results
                },
                indent=1,
            )
        )
    return 0


def _semantic_available() -> bool:
    try:
        from gitmem.engine import vectors
    except ImportError:
        return False
    return vectors.available()


if __name__ == "__main__":
    raise SystemExit(main())
