#!/usr/bin/env python3
"""gitmem index rebuild benchmark: ``Index.rebuild()`` (drop the index, re-derive it from git) against
``git log --raw`` over the same history, the least a rebuild has to read (issue target: <= 3x).

    python bench/rebuild_bench.py [--quick] [--layouts tree,flat,deep] [--memories 10000]
                                  [--versions 10000,50000,100000] [--json out.json]

Stores are the ones of ``bench/run.py`` (``bench/common.py``: one memory per commit, then
modifications of random memories, a quarter of them with front matter), cached under
``bench/.cache/``; every measurement runs on a private copy. Above 100k versions the memories are
seeded 1,000 per commit (as ``bench/run.py --versions 1000000`` does).

Each layout (``bench.common.LAYOUTS``: ``tree`` the 20-directory two-level layout, ``flat`` every
memory in one directory, ``deep`` six levels of directories) is measured at every store length with
the same number of memories; a ``linear`` row per layout divides the rebuild time of the longest
store by that of the one half as long (target <= 2.2x: the cost per version does not grow with the
history at a fixed directory size).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from bench.common import CACHE_DIR, Result, Spec, cached_store, clock, table, work_copy  # noqa: E402


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(store_path: Path, spec: Spec, rounds: int) -> Result:
    """Best of ``rounds`` rebuilds against the best of as many ``git log --raw`` runs, alternated.
    The note adds the ratio of CPU seconds (this process's against git's), steadier than wall
    time on a machine that others share, and that ratio with the CPU of the rebuild's own git
    subprocesses added (a bulk walk streams ``git log --raw`` beside it: gitmem/git/logdiff.py)."""
    cmd = ["git", "-C", str(store_path), "log", "--raw", "--no-abbrev", "--format=%H%n%B", "refs/heads/main"]
    g, f, g_cpu, f_cpu, k_cpu = [], [], [], [], []
    indexed = 0
    for _ in range(rounds):
        store = gitmem.open_store(store_path)
        t, c, k = time.perf_counter(), time.process_time(), _children_cpu()
        indexed = store.core.index.rebuild()
        g.append(time.perf_counter() - t)
        g_cpu.append(time.process_time() - c)
        k_cpu.append(time.process_time() - c + _children_cpu() - k)
        store.close()
        c = _children_cpu()
        f.append(clock(lambda: subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True)))
        f_cpu.append(_children_cpu() - c)
    if indexed != spec.versions:
        raise RuntimeError(f"rebuild indexed {indexed} versions, expected {spec.versions}")
    best = min(g)
    cpu = min(g_cpu) / min(f_cpu) if min(f_cpu) > 0 else float("inf")
    with_git = min(k_cpu) / min(f_cpu) if min(f_cpu) > 0 else float("inf")
    CPU_SECONDS[spec.key] = min(g_cpu)
    return Result(
        f"index rebuild, {spec.label}",
        best,
        min(f),
        "git log --raw",
        3.0,
        f"{spec.versions / best:,.0f} versions/s; CPU {cpu:.2f}x, with its git {with_git:.2f}x",
    )


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


CPU_SECONDS: dict[str, float] = {}  # the best rebuild's CPU seconds, by store


def spec_for(memories: int, versions: int, layout: str = "tree") -> Spec:
    memories = min(memories, versions)
    return Spec(memories, versions, seed_chunk=1000 if versions > 100_000 else 1, layout=layout)


def linear_row(layout: str, results: dict[int, Result], cpu: dict[int, float]) -> Result | None:
    """The longest store's rebuild time over that of the store half as long (None: no such pair);
    the note gives the ratio of their CPU seconds (steadier on a shared machine) and how much
    ``git log --raw`` itself grew between the two stores (the second half of a store edits
    memories of full directories, the first half fills them: git reads bigger trees there too)."""
    longest = max(results)
    half = results.get(longest // 2)
    if half is None or longest // 2 == longest:
        return None
    notes = []
    if cpu.get(longest // 2):
        notes.append(f"CPU {cpu[longest] / cpu[longest // 2]:.2f}x")
    if half.floor_s > 0:
        notes.append(f"git log --raw {results[longest].floor_s / half.floor_s:.2f}x")
    return Result(
        f"linear in versions, {layout}: {longest:,} vs {longest // 2:,} versions",
        results[longest].gitmem_s,
        half.gitmem_s,
        "rebuild of half as many",
        2.2,
        "; ".join(notes),
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="small stores, one round")
    ap.add_argument(
        "--layouts", default="tree,flat,deep", help="comma-separated layouts (bench.common.LAYOUTS)"
    )
    ap.add_argument("--memories", type=int, default=10_000, help="memories per store (default 10,000)")
    ap.add_argument("--versions", default="10000,50000,100000", help="comma-separated store lengths")
    ap.add_argument("--rounds", type=int, default=0, help="rebuilds per store (default 3, quick 1)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    ap.add_argument("--cache", type=Path, default=CACHE_DIR, help="where built stores are cached")
    args = ap.parse_args(argv)
    layouts = [x for x in args.layouts.split(",") if x]
    memories = 500 if args.quick else args.memories
    sizes = [1000, 2000] if args.quick else [int(v) for v in args.versions.split(",") if v]
    rounds = args.rounds or (1 if args.quick else 3)
    workdir = args.cache / f"work-rebuild-{os.getpid()}"
    load_at_start = _load()
    results = []
    try:
        for layout in layouts:
            by_size: dict[int, Result] = {}
            cpu: dict[int, float] = {}
            for n in sizes:
                spec = spec_for(memories, n, layout)
                built = cached_store(spec, args.cache, lambda m: print(m, file=sys.stderr, flush=True))
                path = work_copy(built, workdir)
                by_size[n] = measure(path, spec, rounds)
                cpu[n] = CPU_SECONDS[spec.key]
                results.append(by_size[n])
                print(table([by_size[n]]).splitlines()[-1], file=sys.stderr, flush=True)
                shutil.rmtree(path.parent, ignore_errors=True)
            row = linear_row(layout, by_size, cpu)
            if row is not None:
                results.append(row)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(results))
    print(
        f"load average (1, 5, 15 min) at the start: {load_at_start}; at the end: {_load()} ({os.cpu_count()} CPUs)"
    )
    if args.json:
        args.json.write_text(json.dumps([r.to_dict() for r in results], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
