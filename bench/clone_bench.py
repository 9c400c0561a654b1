#!/usr/bin/env python3
"""gitmem clone-then-first-command benchmark: ``gitmem clone`` of a store plus the clone's first
``ls`` against ``git clone --no-local`` of the
same store with a checkout (what a gitmem clone has too). Issue target: <= 1.5x.

    python bench/clone_bench.py [--quick] [--memories 10000] [--versions 100000] [--rounds 3] [--json out.json]

The store is the one of ``bench/run.py`` and ``bench/rebuild_bench.py`` (``bench/common.py``), cached
under ``bench/.cache/``; the clones go to a private directory. Each round runs both, alternating which
goes first, after a ``syncfs`` (a clone's write-back must not land on the next clone). The rows: the
whole (clone + first ls), then the clone alone and the first ls alone as info rows. A local clone
seeds its index from the source's, checked against the clone's git (gitmem/push/clone_index.py);
the bench fails when the clone's ls differs from the source's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from bench.common import CACHE_DIR, Result, Spec, cached_store, table, work_copy  # noqa: E402
from gitmem.git.intent import syncfs  # noqa: E402
from gitmem.push.clone import clone  # noqa: E402


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(store_path: Path, spec: Spec, workdir: Path, rounds: int) -> list[Result]:
    dest, floor_dest = workdir / "clone-gitmem", workdir / "clone-git"
    floor_cmd = ["git", "clone", "-q", "--no-local", str(store_path), str(floor_dest)]
    whole, cloned, first_ls, floor, cpu, floor_cpu = [], [], [], [], [], []
    listed: Sequence[object] = ()
    with gitmem.open_store(store_path) as source:
        expected = source.list("/", depth=0)
    for i in range(rounds):
        for name in ("gitmem", "git") if i % 2 == 0 else ("git", "gitmem"):
            for d in (dest, floor_dest):
                shutil.rmtree(d, ignore_errors=True)
            syncfs(str(store_path))
            t, p = time.perf_counter(), time.process_time()
            if name == "git":
                before = _children_cpu()
                subprocess.run(floor_cmd, check=True)
                floor.append(time.perf_counter() - t)
                floor_cpu.append(_children_cpu() - before)
                continue
            clone(str(store_path), dest)
            c = time.perf_counter()
            with gitmem.open_store(dest) as store:
                listed = store.list("/", depth=0)
            e = time.perf_counter()
            cpu.append(time.process_time() - p)
            whole.append(e - t)
            cloned.append(c - t)
            first_ls.append(e - c)
    for d in (dest, floor_dest):
        shutil.rmtree(d, ignore_errors=True)
    if len(listed) != spec.memories or listed != expected:
        raise RuntimeError(f"the clone's first ls ({len(listed)} memories) differs from the source's")
    f = statistics.median(floor)
    note = f"median of {rounds}"
    cpu_ratio = statistics.median(cpu) / statistics.median(floor_cpu)
    return [
        Result(
            f"clone + first ls, {spec.label}",
            statistics.median(whole),
            f,
            "git clone --no-local",
            1.5,
            f"{note}; CPU {cpu_ratio:.2f}x",
        ),
        Result(
            f"  clone alone, {spec.label}", statistics.median(cloned), f, "git clone --no-local", None, note
        ),
        Result(
            f"  first ls alone, {spec.label}",
            statistics.median(first_ls),
            f,
            "git clone --no-local",
            None,
            note,
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="2k memories / 20k versions, one round")
    ap.add_argument("--memories", type=int, help="memories (default 10,000; quick 2,000)")
    ap.add_argument("--versions", type=int, help="versions (default 100,000; quick 20,000)")
    ap.add_argument("--rounds", type=int, default=0, help="rounds (default 3, quick 1)")
    ap.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    ap.add_argument("--cache", type=Path, default=CACHE_DIR, help="where built stores are cached")
    args = ap.parse_args(argv)
    memories = args.memories or (2000 if args.quick else 10_000)
    versions = args.versions or (20_000 if args.quick else 100_000)
    rounds = args.rounds or (1 if args.quick else 3)
    spec = Spec(memories, versions, seed_chunk=1000 if versions > 100_000 else 1)
    workdir = args.cache / f"work-clone-{os.getpid()}"
    try:
        built = cached_store(spec, args.cache, lambda m: print(m, file=sys.stderr, flush=True))
        path = work_copy(built, workdir)
        results = measure(path, spec, workdir, rounds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([r.to_dict() for r in results], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
