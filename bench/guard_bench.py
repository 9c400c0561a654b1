#!/usr/bin/env python3
"""What the write-time guard adds to a write: a real ``store.write`` of a 10 kB and a 100 kB memory
into a store whose guard is off (the floor) against the same write into stores with the guard on
(the write path scans), in one run, interleaved (which store writes first rotates every round:
a write right after another's flush costs a little more).

    python bench/guard_bench.py [--quick] [--rounds N] [--json out.json]

The ratio is median(guarded write) / median(write). Targets (issue 19): <= 1.05 at 10 kB, <= 1.20 at
100 kB. The memories are ordinary notes with code, URLs, hashes and ids (the corpus negatives of
``tests/data/guard/negatives.txt`` and seeded prose), each round's copy made unique by its first
line. Each size is measured as rewrites of one memory (the write path rescans only paragraphs it
has not found clean before) and as new memories (the whole text scanned). Also reported: the
false-positive rate of the guard over that corpus.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from bench.common import Content  # noqa: E402
from gitmem.model.guard import GuardPolicy, scan  # noqa: E402

NEGATIVES = Path(__file__).resolve().parent.parent / "tests" / "data" / "guard" / "negatives.txt"
LIMITS = {10_000: 1.05, 100_000: 1.20}
POLICIES = {"default (secrets reject)": GuardPolicy(), "secrets + pii flag": GuardPolicy(pii="flag")}


@dataclass(frozen=True)
class Row:
    size: int
    kind: str  # "rewrite" (of an existing memory) or "new" (a memory created)
    policy: str
    write_ms: float
    write_scan_ms: float
    ratio: float
    limit: float


def negatives() -> list[str]:
    lines = NEGATIVES.read_text(encoding="utf-8").split("\n")
    text = "\n".join(line for line in lines if not line.startswith("#:"))
    return [e.strip("\n") for e in text.split("\n%%\n") if e.strip()]


def memory_text(size: int, seed: int = 19) -> str:
    """About ``size`` characters of notes: prose paragraphs and the corpus's snippets, shuffled."""
    rng = random.Random(seed)
    pool = Content(seed).pool
    parts, total = [], 0
    snippets = negatives()
    while total < size:
        if rng.random() < 0.5:
            start = rng.randrange(len(pool) - 600)
            part = pool[start : start + rng.randint(200, 600)]
        else:
            part = rng.choice(snippets)
        parts.append(part)
        total += len(part) + 2
    return "\n\n".join(parts)[:size]


def measure(stores: dict[str, gitmem.Store], size: int, rounds: int, kind: str) -> list[Row]:
    """``stores``: "floor" (guard off) and one per policy of POLICIES. ``kind``: "rewrite", every
    timed write a new version of one memory (the write path then rescans only the paragraphs not
    found clean before, docs/guard.md#speed), or "new", every timed write a memory of its own
    (the whole text scanned)."""
    base = memory_text(size)
    floor: list[float] = []
    guarded: dict[str, list[float]] = {name: [] for name in POLICIES}
    for policy in POLICIES.values():
        if findings := scan(base, policy):
            raise SystemExit(f"the bench memory has findings: {[f.describe() for f in findings]}")
    if kind == "rewrite":
        for store in stores.values():
            store.write(f"/bench/guard-{size}.md", base)  # the memory exists: every write modifies it
    for n in range(rounds):
        path = f"/bench/guard-{size}.md" if kind == "rewrite" else f"/bench/new-{size}-{n}.md"
        content = f"# round {n}\n{base}"
        order = ["floor", *POLICIES]
        order = order[n % len(order) :] + order[: n % len(order)]  # who goes first rotates
        for name in order:
            t0 = time.perf_counter()
            stores[name].write(path, content + ("\nfloor" if name == "floor" else "\nguarded"))
            (floor if name == "floor" else guarded[name]).append(time.perf_counter() - t0)
    write = statistics.median(floor)
    rows = []
    for name, times in guarded.items():
        with_scan = statistics.median(times)
        rows.append(Row(size, kind, name, write * 1e3, with_scan * 1e3, with_scan / write, LIMITS[size]))
    return rows


def false_positive_rate() -> tuple[int, int]:
    """(flagged, total) over the corpus negatives, with every rule on."""
    corpus = negatives()
    return sum(1 for n in corpus if scan(n, GuardPolicy(pii="flag"))), len(corpus)


def scan_only(size: int, rounds: int) -> float:
    text = memory_text(size)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        scan(text)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def table(rows: list[Row]) -> str:
    out = [
        "| memory | write | policy | write, guard off | write, guard on | ratio | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ok = "ok" if r.ratio <= r.limit else "OVER"
        out.append(
            f"| {r.size // 1000} kB | {r.kind} | {r.policy} | {r.write_ms:.2f} ms | {r.write_scan_ms:.2f} ms "
            f"| {r.ratio:.3f} | <= {r.limit} {ok} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="few rounds (seconds)")
    ap.add_argument("--rounds", type=int, default=None, help="writes per case (default 60; quick: 8)")
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    rounds = args.rounds or (8 if args.quick else 60)
    with tempfile.TemporaryDirectory(prefix="gitmem-guard-bench-") as home:
        stores = {"floor": gitmem.create_store("guard-off", home=home)}
        stores["floor"].update_settings(guard=GuardPolicy(secrets="off", pii="off"))
        for n, (name, policy) in enumerate(POLICIES.items()):
            stores[name] = gitmem.create_store(f"guard-{n}", home=home)
            stores[name].update_settings(guard=policy)
        try:
            rows = [
                row
                for size in LIMITS
                for kind in ("rewrite", "new")
                for row in measure(stores, size, rounds, kind)
            ]
        finally:
            for store in stores.values():
                store.close()
    flagged, total = false_positive_rate()
    scans = {f"{size // 1000} kB": scan_only(size, max(rounds, 20)) for size in LIMITS}
    print(table(rows))
    print("\nscan alone (default policy): " + ", ".join(f"{k}: {v:.0f} us" for k, v in scans.items()))
    print(f"false positives on the corpus negatives: {flagged}/{total} = {flagged / total:.2%}")
    if args.json:
        fp = {"flagged": flagged, "negatives": total, "rate": flagged / total}
        results = {
            "rounds": rounds,
            "writes": [asdict(r) for r in rows],
            "scan_us": scans,
            "false_positives": fp,
        }
        args.json.write_text(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
