"""Session sync benchmark (docs/architecture.md#performance-targets, issue 5): ``session sync`` of N changed files in a
mount of a 10k-memory store, against ``apply_batch`` writing the same N memories in one batch.

Two private copies of the same generated store: one is mounted in a session (its sync scans and
hashes every file of the mount, plans 3-way against the tip, applies one batch, refreshes and moves
the marker), the other takes the same writes through ``apply_batch`` directly (the floor). Rounds
alternate between them; each round rewrites the same N memories with new content.

After the rounds both stores must hold the last round's content at every changed path (the sync
wrote what the batch wrote), and each sync must have committed one version per changed file.

Usage: ``python bench/sync_bench.py [--quick] [--memories 10000] [--changes 1000] [--rounds 3] [--json F]``
(``--quick``: 1,000 memories, 100 changes, one round: a smoke run in seconds; the test suite runs it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from bench.common import CACHE_DIR, Spec, cached_store, memory_path  # noqa: E402
from gitmem import sessions  # noqa: E402
from gitmem.engine.batch import BatchOp, apply_batch  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="1,000 memories, 100 changes, one round (seconds)")
    ap.add_argument("--memories", type=int, help="memories of the store (default 10,000; quick 1,000)")
    ap.add_argument("--changes", type=int, help="files changed each round (default 1,000; quick 100)")
    ap.add_argument("--rounds", type=int, help="rounds (default 3; quick 1)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    ap.add_argument("--cache", type=Path, default=CACHE_DIR, help="where generated stores are kept")
    args = ap.parse_args()
    memories = args.memories or (1_000 if args.quick else 10_000)
    changes = args.changes or (100 if args.quick else 1_000)
    rounds = args.rounds or (1 if args.quick else 3)
    built = cached_store(Spec(memories, memories), cache=args.cache, log=lambda m: print(m, file=sys.stderr))
    step = max(1, memories // changes)
    paths = [memory_path(i, memories) for i in range(0, memories, step)][:changes]
    with tempfile.TemporaryDirectory(prefix="gitmem-sync-bench-") as tmp:
        home = Path(tmp)
        for name in ("mounted", "floor"):
            shutil.copytree(built.path, home / "stores" / f"{name}.git")
        t = time.perf_counter()
        s = sessions.start_session(["mounted"], root=home / "mnt", home=home, actor="service:bench")
        start_s = time.perf_counter() - t
        mount = Path(s.mounts[0].path)
        floor = gitmem.open_store("floor", home=home)
        sync_t: list[float] = []
        batch_t: list[float] = []
        versions = 0
        for r in range(rounds):
            content = {p: f"round {r} of {p}\n".encode() * 8 for p in paths}
            for p, data in content.items():
                (mount / p[1:]).write_bytes(data)
            t = time.perf_counter()
            report = sessions.sync_session(s.id, home=home)
            sync_t.append(time.perf_counter() - t)
            versions = report.versions
            ops = [BatchOp("write", p, content=data) for p, data in content.items()]
            t = time.perf_counter()
            result = apply_batch(floor.core, ops, actor="service:bench", session=s.id)
            batch_t.append(time.perf_counter() - t)
            if versions != len(paths) or len(result.versions) != len(paths):
                raise RuntimeError(f"expected {len(paths)} versions, got {versions} / {len(result.versions)}")
        mounted = gitmem.open_store("mounted", home=home)
        last = {p: data.decode() for p, data in content.items()}  # the last round's files
        differing = [p for p in paths if not mounted.read(p).content == floor.read(p).content == last[p]]
        mounted.close()
        floor.close()
        if differing:
            raise RuntimeError(
                f"{len(differing)} paths do not hold the last round's content, e.g. {differing[0]}"
            )
        sync_s, batch_s = statistics.median(sync_t), statistics.median(batch_t)
        figures = {
            "memories": memories,
            "changes": len(paths),
            "rounds": rounds,
            "versions_per_sync": versions,
            "paths_equal": len(paths),
            "session_start_s": round(start_s, 3),
            "sync_s": round(sync_s, 3),
            "apply_batch_s": round(batch_s, 3),
            "ratio": round(sync_s / batch_s, 2),
        }
    print(f"session start (materialise {memories} files): {start_s:.2f} s")
    print(f"sync of {len(paths)} changed files: {sync_s:.3f} s (median of {rounds})")
    print(f"apply_batch of the same {len(paths)} writes: {batch_s:.3f} s")
    print(f"ratio sync / apply_batch: {figures['ratio']:.2f}x")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
