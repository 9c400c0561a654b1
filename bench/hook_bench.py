#!/usr/bin/env python3
"""Hook overhead (docs/architecture.md#performance-targets, pre-receive): real ``git push`` runs, as ratios in one run.

    python bench/hook_bench.py [--rounds 7] [--versions 100000] [--json out.json] [--quick]

1. A 1-commit push into a small store with the hooks vs the same push into an identical store without
   them; the gain is compared with the hook's floor, ``python -c "import pygit2"`` (target <= 1.5x).
   pre-receive's own gain (the target) is measured against a store that runs only post-receive, so the
   derived index is current in both, as it is in service; the gain of both hooks (pre-receive plus
   post-receive: index catch-up, ledger entry, push log) against a store without hooks is reported too.
2. A 100-commit push into a 100k-commit store (built with ``git fast-import``, cached by bench/common.py)
   likewise; its floor is the pygit2 floor plus a process reading the pushed objects (every commit,
   its tree diff and the blobs it adds): the cost must follow the push, not the store.

Pushes go over file:// from a client clone; round i pushes the i-th chain of commits on top of round
i-1, into both stores alternately, so every push is a real fast-forward of new objects.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from bench.common import (  # noqa: E402
    ACTOR,
    COMMITTER,
    Content,
    Result,
    Spec,
    cached_store,
    commit_ids,
    compile_gitmem,
    memory_path,
    table,
)
from gitmem.model.versions import format_message  # noqa: E402
from gitmem.push.hookinstall import HOOK_NAMES, install_hooks  # noqa: E402

PY = sys.executable
READ_PUSHED = """
import sys, pygit2
repo = pygit2.Repository(sys.argv[1])
walker = repo.walk(pygit2.Oid(hex=sys.argv[3]))
walker.hide(pygit2.Oid(hex=sys.argv[2]))
for c in walker:
    for d in c.parents[0].tree.diff_to_tree(c.tree).deltas:
        repo[d.new_file.id].data
"""


def run(*args: str, cwd: Path | None = None, stdin: bytes | None = None) -> None:
    subprocess.run(args, cwd=cwd, input=stdin, check=True, capture_output=True)


def out(*args: str, cwd: Path | None = None) -> str:
    return subprocess.run(args, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def set_hooks(store: Path, which: tuple[str, ...]) -> None:
    """Install gitmem's shims, then keep only ``which`` of them."""
    install_hooks(store)
    for name in HOOK_NAMES:
        if name not in which:
            (store / "hooks" / name).unlink()


def chain_stream(
    base: str, first: int, count: int, memories: int, content: Content, base_time: int = 0
) -> bytes:
    """``count`` library-shaped commits (one modified memory each) on top of ``base``, dated after
    ``base_time`` (the base commit's date): the hook refuses back-dated commits."""
    parts = []
    for n in range(count):
        k = first + n
        memory = (k * 7919) % memories
        version_id, memory_id, when = commit_ids(k, memory)
        when = max(when, base_time + n + 1)
        path = memory_path(memory, memories)
        message = format_message("modified", path, version_id, memory_id, ACTOR, None).encode()
        data = content.make(memory, k)
        parts.append(f"commit refs/heads/main\nmark :{n + 1}\n".encode())
        parts.append(f"author {ACTOR} <{ACTOR}> {when} +0000\ncommitter {COMMITTER} {when} +0000\n".encode())
        parts.append(f"data {len(message)}\n".encode() + message)
        if n == 0:
            parts.append(f"from {base}\n".encode())
        parts.append(f"M 100644 inline {path[1:]}\ndata {len(data)}\n".encode() + data + b"\n")
    parts.append(b"done\n")
    return b"".join(parts)


def build_chains(client: Path, rounds: int, per_push: int, memories: int, first: int) -> list[str]:
    """Append ``rounds`` chains of ``per_push`` commits to the client's main; returns each chain's tip."""
    content = Content(seed=11)
    tips = []
    for r in range(rounds):
        base = out("git", "rev-parse", "refs/heads/main", cwd=client)
        base_time = int(out("git", "log", "-1", "--format=%ct", base, cwd=client))
        stream = chain_stream(base, first + r * per_push, per_push, memories, content, base_time)
        run("git", "fast-import", "--quiet", "--done", cwd=client, stdin=stream)
        tips.append(out("git", "rev-parse", "refs/heads/main", cwd=client))
    return tips


def push_times(client: Path, stores: dict[str, Path], tips: list[str]) -> dict[str, list[float]]:
    """Push each tip to every store in turn (rotating the order each round); seconds per push."""
    times: dict[str, list[float]] = {k: [] for k in stores}
    names = list(stores)
    for i, tip in enumerate(tips):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t = time.perf_counter()
            run("git", "push", "-q", f"file://{stores[name]}", f"{tip}:refs/heads/main", cwd=client)
            times[name].append(time.perf_counter() - t)
    return times


def python_floor(rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        run(PY, "-c", "import pygit2")
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def read_floor(store: Path, old: str, new: str, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        run(PY, "-c", READ_PUSHED, str(store), old, new)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def scenario(
    label: str, template: Path, work: Path, rounds: int, per_push: int, memories: int, first: int
) -> tuple[dict[str, float], float, float]:
    """Median push seconds per hook setup, the pygit2 floor, and the read-pushed-objects floor."""
    stores = {}
    for name, hooks in (
        ("none", ()),
        ("post", ("post-receive",)),
        ("both", HOOK_NAMES),
        ("floor", ("post-receive",)),
    ):
        dest = work / f"{label}-{name}.git"
        shutil.copytree(template, dest, symlinks=True)
        set_hooks(dest, hooks)
        stores[name] = dest
    # The floor in place: a pre-receive that only starts Python and imports pygit2 (and reads its input).
    floor_hook = stores["floor"] / "hooks" / "pre-receive"
    floor_hook.write_text(f"#!/bin/sh\nexec {PY} -c 'import sys, pygit2; sys.stdin.read()'\n")
    floor_hook.chmod(0o755)
    client = work / f"{label}-client"
    run("git", "clone", "-q", "--bare", str(template), str(client))
    base = out("git", "rev-parse", "refs/heads/main", cwd=client)
    tips = build_chains(client, rounds + 1, per_push, memories, first)
    warm = push_times(
        client, stores, tips[:1]
    )  # first push warms caches (and builds nothing: index is current)
    del warm
    times = push_times(client, stores, tips[1:])
    medians = {k: statistics.median(v) for k, v in times.items()}
    floor = python_floor(rounds)
    reading = read_floor(stores["none"], tips[0] if per_push > 1 else base, tips[1], rounds)
    return medians, floor, reading


def small_store(work: Path) -> tuple[Path, int]:
    home = work / "home"
    with gitmem.create_store("small", home=home) as s:
        for i in range(20):
            s.write(f"/notes/m{i:02d}.md", f"memory {i}\n", actor="user:bench")
        return s.path, 20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--versions", type=int, default=100_000)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--quick", action="store_true", help="3 rounds into a 2k-version store (a smoke run)")
    args = ap.parse_args()
    if args.quick:
        args.rounds, args.versions = min(args.rounds, 3), min(args.versions, 2_000)
    results: list[Result] = []
    compile_gitmem()  # the hooks start as an installed gitmem does: from bytecode
    with tempfile.TemporaryDirectory(prefix="gitmem-hook-bench-") as tmp:
        work = Path(tmp)
        small, n_small = small_store(work)
        m1, floor1, _ = scenario("small", small, work, args.rounds, 1, n_small, 1_000_000)
        results.append(
            Result(
                "1-commit push: pre-receive gain",
                m1["both"] - m1["post"],
                floor1,
                "python -c 'import pygit2'",
                1.5,
                f"push {m1['post'] * 1e3:.0f} -> {m1['both'] * 1e3:.0f} ms",
            )
        )
        results.append(
            Result(
                "1-commit push: pre-receive gain vs an import-pygit2 hook",
                m1["both"] - m1["post"],
                m1["floor"] - m1["post"],
                "push gain of a pre-receive running python -c 'import pygit2'",
                None,
            )
        )
        results.append(
            Result(
                "1-commit push: pre+post-receive gain",
                m1["both"] - m1["none"],
                floor1,
                "python -c 'import pygit2'",
                None,
                f"push {m1['none'] * 1e3:.0f} -> {m1['both'] * 1e3:.0f} ms",
            )
        )
        spec = Spec(min(10_000, args.versions), args.versions)
        built = cached_store(spec, log=lambda m: print(m, file=sys.stderr))
        m100, floor100, reading = scenario(
            "big", built.path, work, args.rounds, 100, spec.memories, 2 * args.versions
        )
        gain_pre = m100["both"] - m100["post"]
        results.append(
            Result(
                f"100-commit push into {spec.label}: pre-receive gain",
                gain_pre,
                1.5 * floor100 + max(reading - floor100, 0.0),
                "1.5x pygit2 floor + reading the pushed objects",
                1.0,
                f"push {m100['post'] * 1e3:.0f} -> {m100['both'] * 1e3:.0f} ms",
            )
        )
        results.append(
            Result(
                f"100-commit push into {spec.label}: pre-receive gain vs an import-pygit2 hook",
                gain_pre,
                m100["floor"] - m100["post"] + max(reading - floor100, 0.0),
                "that hook's push gain + reading the pushed objects",
                None,
            )
        )
        results.append(
            Result(
                f"100-commit push into {spec.label}: pre+post-receive gain",
                m100["both"] - m100["none"],
                1.5 * floor100 + max(reading - floor100, 0.0),
                "same floor",
                None,
                f"push {m100['none'] * 1e3:.0f} -> {m100['both'] * 1e3:.0f} ms",
            )
        )
        results.append(
            Result(
                "pre-receive gain, 100 commits into 100k vs 1 commit into 20",
                gain_pre,
                m1["both"] - m1["post"],
                "1-commit gain",
                None,
                "growth with the push",
            )
        )
    print(table(results))
    if args.json:
        args.json.write_text(json.dumps([r.to_dict() for r in results], indent=2))
    return 0 if all(r.passed is not False for r in results) else 1


if __name__ == "__main__":
    os.environ.setdefault("GIT_CONFIG_NOSYSTEM", "1")
    sys.exit(main())
