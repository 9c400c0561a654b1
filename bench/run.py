#!/usr/bin/env python3
"""gitmem benchmark: the targets of docs/architecture.md#performance-targets, each as a ratio against a floor measured in the
same run on the same machine and the same store.

    python bench/run.py [--quick] [--sizes 1000,10000,100000] [--versions 100000] [--json out.json]
                        [--only write,group]

Stores are generated deterministically with ``git fast-import`` and cached under ``bench/.cache/``;
every measurement runs on a private copy, so the cache is never written to. See bench/README.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pygit2

if __package__ in (None, ""):  # run as a script: make ``bench`` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from bench.common import (  # noqa: E402
    ACTOR,
    BENCH_LIMITS,
    CACHE_DIR,
    Built,
    Content,
    Result,
    Spec,
    cached_store,
    clock,
    compile_gitmem,
    fast_import,
    fast_import_stream,
    human,
    interleaved,
    interleaved_many,
    memory_path,
    table,
    work_copy,
)
from gitmem.engine.batch import BatchOp, apply_batch  # noqa: E402
from gitmem.git.intent import syncfs  # noqa: E402
from gitmem.model.versions import format_message  # noqa: E402

FLOOR_REF = "refs/bench/floor"  # outside refs/heads: not a scope, so gitmem never indexes it


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------- write
def _spine(repo: pygit2.Repository, tree: pygit2.Tree, segments: list[str], blob: pygit2.Oid) -> pygit2.Oid:
    tb = repo.TreeBuilder(tree)
    if len(segments) == 1:
        tb.insert(segments[0], blob, pygit2.enums.FileMode.BLOB)
    else:
        sub = tree[segments[0]]
        assert isinstance(sub, pygit2.Tree)
        tb.insert(segments[0], _spine(repo, sub, segments[1:], blob), pygit2.enums.FileMode.TREE)
    return tb.write()


def raw_write(repo: pygit2.Repository, ref_name: str, path: str, data: bytes, message: str) -> pygit2.Oid:
    """The floor of a write: blob, spine trees (TreeBuilder), commit, ref compare-and-swap."""
    ref = repo.references[ref_name]
    tip = ref.target
    commit = repo[tip]
    assert isinstance(commit, pygit2.Commit)
    blob = repo.create_blob(data)
    tree = _spine(repo, commit.tree, path[1:].split("/"), blob)
    now = int(time.time())
    author = pygit2.Signature(ACTOR, ACTOR, now, 0)
    committer = pygit2.Signature("gitmem", "gitmem", now, 0)
    new = repo.create_commit(None, author, committer, message, tree, [tip])
    ref.set_target(new, "bench floor")  # fails if the ref moved since it was read: a CAS
    return new


def measure_write(store_path: Path, label: str, rounds: int, memory: int, memories: int) -> list[Result]:
    """Store.write of a modified memory (durable: one flush, docs/durability.md) vs three floors
    of :func:`raw_write` of the same bytes, timed in rotation in the same run: unsynced, with
    libgit2's own per-file fsync (``enable_fsync_gitdir``), and followed by one ``syncfs`` (the
    single-flush floor)."""
    path = memory_path(memory, memories)
    store = gitmem.open_store(store_path)
    repo = pygit2.Repository(str(store_path))
    main = repo.references["refs/heads/main"].target
    repo.references.create(FLOOR_REF, main, force=True)
    content = Content(seed=memory)
    texts = [content.make(memory, n) for n in range(2 * rounds + 8)]
    message = format_message("modified", path, "memver_" + "0" * 26, "mem_" + "0" * 26, ACTOR, None)
    counter = itertools.count()

    def lib() -> None:
        store.write(path, texts[next(counter) % len(texts)], actor=ACTOR)

    def unsynced() -> None:
        raw_write(repo, FLOOR_REF, path, texts[next(counter) % len(texts)], message)

    def fsynced() -> None:
        pygit2.settings.enable_fsync_gitdir(True)
        raw_write(repo, FLOOR_REF, path, texts[next(counter) % len(texts)], message)
        pygit2.settings.enable_fsync_gitdir(False)

    def one_flush() -> None:
        raw_write(repo, FLOOR_REF, path, texts[next(counter) % len(texts)], message)
        syncfs(str(store_path))

    pygit2.settings.enable_fsync_gitdir(False)  # the library makes its writes durable itself
    # CPU seconds of the process (every thread) per call too: on a loaded machine the wall clock
    # of a flush swings with other processes' writes, the CPU a write costs far less.
    cpu: dict[Callable[[], None], list[float]] = {fn: [] for fn in (lib, one_flush)}

    def cpu_timed(fn: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            t = time.process_time()
            fn()
            cpu[fn].append(time.process_time() - t)

        return run

    fns = [cpu_timed(lib), unsynced, fsynced, cpu_timed(one_flush)]
    for _ in range(3):  # warm up: open the index, load the packs
        for fn in fns:
            fn()
    for samples in cpu.values():
        samples.clear()
    g, u, f, one = interleaved_many(fns, rounds)
    store.close()
    cpu_g, cpu_one = (sum(cpu[fn]) / len(cpu[fn]) for fn in (lib, one_flush))
    cpu_note = f"CPU {cpu_g * 1e3:.2f} vs {cpu_one * 1e3:.2f} ms, {cpu_g / cpu_one:.2f}x"
    return [
        Result(f"write, {label}", g, u, "raw pygit2, unsynced", None, "informative: no durability"),
        Result(f"write, {label}", g, f, "raw pygit2, libgit2 fsync", 1.0),
        Result(
            f"write, {label}",
            g,
            one,
            "raw pygit2 + one syncfs",
            1.25,
            f"{1 / g:,.0f} durable writes/s; {cpu_note}",
        ),
    ]


def _threaded_writes(store_path: Path, writers: int, per_writer: int) -> float:
    """Seconds for ``writers`` threads sharing one Store to make ``per_writer`` durable writes each
    (new memories in one scope: every write a version, no preconditions to collide)."""
    store = gitmem.open_store(store_path)
    tag = next(_GROUP_RUN)
    errors: list[BaseException] = []

    def writer(i: int) -> None:
        try:
            for k in range(per_writer):
                store.write(f"/group/r{tag}/w{i}/m{k}", f"run {tag} writer {i} write {k}\n", actor=ACTOR)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t
    store.close()
    if errors:
        raise errors[0]
    return elapsed


_GROUP_RUN = itertools.count()


def _process_writes(store_path: Path, writers: int, per_writer: int) -> float:
    """Seconds for ``writers`` processes (``gitmem`` CLI-free: one Python each) to write ``per_writer`` each."""
    tag = next(_GROUP_RUN)
    script = (
        "import sys, gitmem\n"
        "s = gitmem.open_store(sys.argv[1]); w = sys.argv[2]\n"
        # One write first (the write path's imports, the settings and index opened), not timed.
        f"s.write(f'/group/p{tag}/w{{w}}/warm', 'warm\\n', actor='{ACTOR}')\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"  # start together
        f"[s.write(f'/group/p{tag}/w{{w}}/m{{k}}', f'{{w}} {{k}}\\n', actor='{ACTOR}') for k in range({per_writer})]\n"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(store_path), str(i)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for i in range(writers)
    ]
    for p in procs:  # every process imported gitmem, opened the store and wrote once
        assert p.stdout is not None
        if p.stdout.readline() != b"ready\n":
            raise RuntimeError("a writer process failed to start")
    t = time.perf_counter()
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(b"go\n")
        p.stdin.close()
    for p in procs:
        if p.wait() != 0:
            raise RuntimeError("a writer process failed")
    return time.perf_counter() - t


def measure_group(store_path: Path, writers: int, per_writer: int, rounds: int) -> list[Result]:
    """Durable versions/s of ``writers`` concurrent writers to one scope (threads sharing one
    Store; separate processes) vs one writer, per version: threads ratio <= 25% is >= 4x one
    writer (DESIGN 11a); processes ratio <= 50% is >= 2x (issue 33: on 2 cores, 2x replaces the 4x)."""
    one = statistics.median(
        _threaded_writes(store_path, 1, per_writer * 2) / (per_writer * 2) for _ in range(rounds)
    )
    threads = statistics.median(
        _threaded_writes(store_path, writers, per_writer) / (writers * per_writer) for _ in range(rounds)
    )
    procs = statistics.median(
        _process_writes(store_path, writers, per_writer) / (writers * per_writer) for _ in range(rounds)
    )
    return [
        Result(
            f"group commit, {writers} threads, one scope",
            threads,
            one,
            "1 writer, per version",
            0.25,
            f"{1 / threads:,.0f} vs {1 / one:,.0f} durable versions/s",
        ),
        Result(
            f"group commit, {writers} processes, one scope",
            procs,
            one,
            "1 writer, per version",
            0.5,
            f"{1 / procs:,.0f} vs {1 / one:,.0f} durable versions/s",
        ),
    ]


def measure_hooks(store_path: Path, workdir: Path, rounds: int) -> Result:
    """What gitmem's receive hooks add to a push of one commit (the same push into a copy of the
    store without hooks subtracted) vs ``python -c "import pygit2"``, the least one Python start costs."""
    from gitmem.push.hookinstall import install_hooks

    install_hooks(store_path, sys.executable)  # the shims of this version (a cached store may be older)
    compile_gitmem()  # the hook starts from bytecode, as an installed gitmem does
    bare = workdir / "hookless.git"
    shutil.rmtree(bare, ignore_errors=True)
    shutil.copytree(store_path, bare)
    for hook in (bare / "hooks").iterdir():
        hook.unlink()
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    env.update(GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="bench@example.com")
    env.update(GIT_COMMITTER_NAME="bench", GIT_COMMITTER_EMAIL="bench@example.com")

    def sh(*args: str, cwd: Path | None = None) -> None:
        subprocess.run(args, cwd=cwd, env=env, check=True, capture_output=True)

    works = {}
    for name, target in (("hooks", store_path), ("plain", bare)):
        work = workdir / f"push-{name}"
        shutil.rmtree(work, ignore_errors=True)
        sh("git", "clone", "-q", str(target), str(work))
        works[name] = work
    counter = itertools.count()

    def push(name: str) -> float:
        work, n = works[name], next(counter)
        (work / "bench").mkdir(exist_ok=True)
        (work / "bench" / f"push-{n}.md").write_text(f"push {n}\n")
        sh("git", "add", "-A", cwd=work)
        sh("git", "commit", "-q", "-m", f"push {n}", cwd=work)
        return clock(lambda: sh("git", "push", "-q", "origin", "HEAD:main", cwd=work))

    floor_cmd = [sys.executable, "-c", "import pygit2"]
    push("hooks")
    push("plain")
    with_hooks, without, floor = [], [], []
    for _ in range(rounds):
        with_hooks.append(push("hooks"))
        without.append(push("plain"))
        floor.append(clock(lambda: subprocess.run(floor_cmd, check=True)))
    added = statistics.median(with_hooks) - statistics.median(without)
    note = f"push {statistics.median(with_hooks) * 1e3:.0f} ms with hooks, {statistics.median(without) * 1e3:.0f} ms without"
    return Result(
        "pre- plus post-receive added to a 1-commit push",
        added,
        statistics.median(floor),
        "python -c 'import pygit2'",
        1.5,
        note,
    )


def measure_clone(store_path: Path, label: str, workdir: Path, rounds: int = 1) -> Result:
    """``gitmem clone`` of a store vs ``git clone --bare --no-local`` of the same store: medians of
    ``rounds`` of each, alternating which goes first (one of each swung from 0.1x to 1.3x with the
    disk between runs)."""
    from gitmem.push.clone import clone

    dest, floor_dest = workdir / "clone-lib", workdir / "clone-floor.git"
    floor_cmd = ["git", "clone", "-q", "--bare", "--no-local", str(store_path), str(floor_dest)]
    # Each clone starts with nothing dirty: the private copy was just written, and each clone leaves
    # its own files (the floor's pack, the checkout), whose write-back the kernel makes the next
    # clone's writes wait for (12.7 s, then 1.0 s, for two clones of a fresh copy in one test).
    runs: dict[str, Callable[[], object]] = {
        "lib": lambda: clone(str(store_path), dest),
        "floor": lambda: subprocess.run(floor_cmd, check=True),
    }
    times: dict[str, list[float]] = {"lib": [], "floor": []}
    for i in range(rounds):
        for name in ("lib", "floor") if i % 2 == 0 else ("floor", "lib"):
            for d in (dest, floor_dest):
                shutil.rmtree(d, ignore_errors=True)
            syncfs(str(store_path))
            times[name].append(clock(runs[name]))
    for d in (dest, floor_dest):
        shutil.rmtree(d, ignore_errors=True)
    g, f = statistics.median(times["lib"]), statistics.median(times["floor"])
    return Result(f"clone, {label}", g, f, "git clone --bare --no-local", 1.2, f"median of {rounds}")


def measure_history_length(short: Path, long: Path, rounds: int) -> Result:
    """Store.write on a store with a long history vs the same write on one with a short history
    (same memories, same layout), run alternately: the cost must not grow with history length."""
    stores = {p: gitmem.open_store(p) for p in (short, long)}
    memories = min(len(s.list("/")) for s in stores.values())
    versions = {p: len(s.versions(scope="main")) for p, s in stores.items()}
    path = memory_path(1, memories)
    content = Content(seed=1)
    texts = [content.make(1, n) for n in range(rounds + 4)]
    counters = {p: itertools.count() for p in stores}

    def write(p: Path) -> None:
        stores[p].write(path, texts[next(counters[p]) % len(texts)], actor=ACTOR)

    pygit2.settings.enable_fsync_gitdir(False)  # the library makes its writes durable itself
    for p in stores:
        write(p)
        write(p)
    g, f = interleaved(lambda: write(long), lambda: write(short), rounds)
    for s in stores.values():
        s.close()
    name = f"write, {human(memories)} mem: {human(versions[long])} vs {human(versions[short])} versions"
    return Result(name, g, f, "gitmem, short history", 1.5, "cost independent of history")


# ---------------------------------------------------------------------- read
def measure_read(store_path: Path, label: str, rounds: int, memories: int, per_round: int = 200) -> Result:
    """Store.read by path in-process vs ``ref.peel(Commit).tree[path]`` + blob data."""
    store = gitmem.open_store(store_path)
    repo = pygit2.Repository(str(store_path))
    # A seeded sample: a quarter of the memories carry front matter at every store size.
    sample = random.Random(memories).sample(range(memories), min(per_round, memories))
    paths = [memory_path(i, memories) for i in sample]

    def lib() -> None:
        for p in paths:
            store.read(p)

    def floor() -> None:
        for p in paths:
            obj = repo.references["refs/heads/main"].peel(pygit2.Commit).tree[p[1:]]
            assert isinstance(obj, pygit2.Blob)
            obj.data  # noqa: B018

    lib()
    floor()
    g, f = interleaved(lib, floor, rounds)
    store.close()
    n = len(paths)
    return Result(f"read, {label}", g / n, f / n, "raw tree[path]", 2.0)


# ---------------------------------------------------------------------- history
def measure_history(
    store_path: Path, label: str, rounds: int, git_rounds: int, memory: int, memories: int
) -> Result:
    """Store.versions(path) vs ``git log --format=%H -- PATH`` (a process) on the same store."""
    path = memory_path(memory, memories)
    store = gitmem.open_store(store_path)
    found = len(store.versions(path))  # warm: open the index, check it is current
    times = [clock(lambda: store.versions(path)) for _ in range(rounds)]
    store.close()
    cmd = ["git", "-C", str(store_path), "log", "--format=%H", "refs/heads/main", "--", path[1:]]
    commits = subprocess.run(cmd, capture_output=True, check=True).stdout.split()
    git_times = [
        clock(lambda: subprocess.run(cmd, capture_output=True, check=True)) for _ in range(git_rounds)
    ]
    note = f"{found} versions" if found == len(commits) else f"MISMATCH: {found} versions, git {len(commits)}"
    return Result(
        f"history of one memory, {label}",
        statistics.median(times),
        statistics.median(git_times),
        "git log -- PATH",
        0.05,
        note,
    )


# ---------------------------------------------------------------------- process start
def gitmem_command() -> list[str]:
    """The installed console script beside this interpreter, else ``python -m gitmem``."""
    script = Path(sys.executable).parent / "gitmem"
    return [str(script)] if script.exists() else [sys.executable, "-m", "gitmem"]


def measure_process(store_path: Path, label: str, rounds: int, memory: int, memories: int) -> Result:
    """``gitmem read STORE PATH`` as a process vs ``python -c "import pygit2"``."""
    compile_gitmem()  # start from bytecode, as an installed gitmem does (pip compiles the wheel)
    path = memory_path(memory, memories)
    cmd = [*gitmem_command(), "read", str(store_path), path]
    floor_cmd = [sys.executable, "-c", "import pygit2"]
    out = subprocess.run(cmd, capture_output=True, check=True).stdout
    if not out.startswith(b"# memory") and not out.startswith(b"---"):
        raise RuntimeError(f"gitmem read printed {out[:80]!r}")
    subprocess.run(floor_cmd, check=True)
    g, f = interleaved(
        lambda: subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True),
        lambda: subprocess.run(floor_cmd, check=True),
        rounds,
    )
    return Result(f"`gitmem read` process, {label}", g, f, "python -c 'import pygit2'", 1.5)


# ---------------------------------------------------------------------- batch
def measure_batch(workdir: Path, n: int, rounds: int) -> Result:
    """apply_batch of ``n`` new memories into an empty store vs ``git fast-import`` writing the
    same ``n`` commits (one per memory, same messages) into an empty bare repository. Both are
    durable: git fsyncs the pack it writes (core.fsync default), the library syncs what it wrote."""
    pygit2.settings.enable_fsync_gitdir(False)
    content = Content(seed=n)
    data = [content.make(i, i) for i in range(n)]
    ops = [BatchOp("write", memory_path(i, n), data[i]) for i in range(n)]
    stream = list(fast_import_stream([("created", i, data[i]) for i in range(n)], n))
    home = workdir / "batch-home"
    lib_times, floor_times = [], []
    for r in range(rounds):
        store = gitmem.create_store(f"batch-{r}", limits=BENCH_LIMITS, home=home)
        lib_times.append(clock(lambda s=store: apply_batch(s.core, ops, actor=ACTOR)))  # type: ignore[misc]
        assert len(store.versions(scope="main")) == n
        store.close()
        repo = workdir / f"floor-{r}.git"
        pygit2.init_repository(str(repo), bare=True).free()
        floor_times.append(clock(lambda repo=repo: fast_import(repo, iter(stream))))  # type: ignore[misc]
    g, f = statistics.median(lib_times), statistics.median(floor_times)
    note = f"{n / g:,.0f} vs {n / f:,.0f} commits/s"
    return Result(f"batch write of {human(n)} memories", g, f, "git fast-import", 1.5, note)


# ---------------------------------------------------------------------- index rebuild
def measure_reindex(store_path: Path, label: str, versions: int) -> Result:
    """Index.rebuild() (drop and re-derive from git) vs ``git log --raw`` over the same history,
    the least a rebuild has to read. Informative: no target of its own."""
    store = gitmem.open_store(store_path)
    g = clock(store.core.index.rebuild)
    store.close()
    cmd = ["git", "-C", str(store_path), "log", "--raw", "--no-abbrev", "--format=%H%n%B", "refs/heads/main"]
    f = clock(lambda: subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True))
    return Result(f"index rebuild, {label}", g, f, "git log --raw", None, f"{versions / g:,.0f} versions/s")


# ---------------------------------------------------------------------- the run
@dataclass(frozen=True)
class Plan:
    """What to build and how hard to measure."""

    sizes: list[int]
    main: Spec  # the write and history store of the targets: 10k memories, 100k versions
    short: Spec  # the history-length pair: few memories, short and long history
    long: Spec
    write_rounds: int
    read_rounds: int
    hist_rounds: int
    git_rounds: int
    proc_rounds: int
    batch: int
    batch_rounds: int
    group_writes: int = 40  # durable writes per writer in the group-commit rows
    rebuild_versions: int = 0  # also rebuild a store this long (--versions 1000000); 0: not run

    @property
    def sizes_spec_small(self) -> Spec:
        return self.size_specs[0]

    @property
    def specs(self) -> list[Spec]:
        return list(dict.fromkeys([*self.size_specs, self.main, self.short, self.long]))

    @property
    def size_specs(self) -> list[Spec]:
        """One store per size, N memories and N versions; above 10k seeded 1,000 per commit (see Spec)."""
        return [Spec(n, n, seed_chunk=1000 if n > 10_000 else 1) for n in self.sizes]


def make_plan(quick: bool, sizes: list[int] | None = None, versions: int | None = None) -> Plan:
    """The plan of a full run, or of a ``--quick`` one (small stores, few rounds)."""
    if quick:
        v = versions or 5000
        return Plan(sizes or [1000], Spec(1000, v), Spec(100, 100), Spec(100, v), 20, 5, 7, 3, 7, 200, 1, 10)
    v = min(versions or 100_000, 100_000)
    return Plan(
        sizes or [1000, 10_000, 100_000],
        Spec(10_000, v),
        Spec(100, 100),
        Spec(100, v),
        60,
        9,
        15,
        5,
        15,
        1000,
        3,
        rebuild_versions=versions if versions is not None and versions > 100_000 else 0,
    )


class Runner:
    """Runs a plan: builds (or finds) the stores, measures on private copies, collects results."""

    def __init__(self, plan: Plan, cache: Path, quick: bool, only: list[str] | None = None) -> None:
        self.plan = plan
        self.only = only  # step names' first words to run (None: all)
        self.quick = quick
        self.cache = cache
        self.workdir = cache / f"work-{os.getpid()}"
        self.results: list[Result] = []
        self.builds: dict[Spec, Built] = {}

    def step(self, what: str, fn: Callable[..., Result | list[Result]], *args: object, **kw: object) -> None:
        if self.only is not None and what.split()[0] not in self.only:
            return
        t = time.perf_counter()
        result = fn(*args, **kw)
        self.results.extend(result if isinstance(result, list) else [result])
        _log(f"  {what}: {time.perf_counter() - t:.1f} s")

    def copy(self, spec: Spec) -> Path:
        return work_copy(self.builds[spec], self.workdir)

    def run(self) -> list[Result]:
        plan = self.plan
        _log(f"stores ({'quick' if self.quick else 'full'} run): " + ", ".join(s.label for s in plan.specs))
        self.builds = {s: cached_store(s, self.cache, _log) for s in plan.specs}
        try:
            self._measure()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return self.results

    def _measure(self) -> None:
        plan, main = self.plan, self.plan.main
        for spec in [*plan.size_specs, main]:
            path = self.copy(spec)
            m = spec.memories // 2 + 1
            self.step(
                f"write {spec.label}", measure_write, path, spec.label, plan.write_rounds, m, spec.memories
            )
            self.step(f"read {spec.label}", measure_read, path, spec.label, plan.read_rounds, spec.memories)
        path = self.copy(main)
        m = main.memories // 3 + 1
        self.step(
            "history", measure_history, path, main.label, plan.hist_rounds, plan.git_rounds, m, main.memories
        )
        self.step("process", measure_process, path, main.label, plan.proc_rounds, m, main.memories)
        short, long = self.copy(plan.short), self.copy(plan.long)
        self.step("history length", measure_history_length, short, long, plan.write_rounds)
        self.step("batch", measure_batch, self.workdir, plan.batch, plan.batch_rounds)
        # A rebuild per run of the 100k-version store would take minutes: take the largest size
        # store up to 10k versions (its build-time catch-up is printed under the table anyway).
        small = [n for n in plan.sizes if n <= 10_000] or [min(plan.sizes)]
        reindex = Spec(max(small), max(small))
        self.step("index rebuild", measure_reindex, self.copy(reindex), reindex.label, reindex.versions)
        if plan.rebuild_versions:
            big = Spec(plan.rebuild_versions // 10, plan.rebuild_versions, seed_chunk=1000)
            self.step("index rebuild, big", measure_reindex, self.copy(big), big.label, big.versions)
        group = self.copy(plan.sizes_spec_small)
        self.step("group commit", measure_group, group, 8, plan.group_writes, plan.batch_rounds)
        self.step("clone", measure_clone, self.copy(main), main.label, self.workdir, 1 if self.quick else 3)
        self.step("hooks", measure_hooks, self.copy(main), self.workdir, plan.proc_rounds)

    def build_info(self) -> list[dict[str, object]]:
        return [
            {
                "store": b.spec.label,
                "key": b.spec.key,
                "fast_import_s": round(b.fast_import_s, 2),
                "index_rebuild_s": round(b.index_rebuild_s, 2),
                "cached": b.cached,
            }
            for b in self.builds.values()
        ]


def environment() -> dict[str, object]:
    git = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    return {
        "python": platform.python_version(),
        "pygit2": getattr(pygit2, "__version__", "?"),
        "libgit2": pygit2.LIBGIT2_VERSION,
        "git": git,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "gitmem": gitmem.__version__,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="small stores and few rounds (under a minute)")
    ap.add_argument(
        "--sizes",
        type=lambda s: [int(x) for x in s.split(",") if x],
        help="memory counts of the size stores (default 1000,10000,100000; quick: 1000)",
    )
    ap.add_argument(
        "--versions",
        type=int,
        help="history length of the long stores (default 100000); above 100000 the main stores keep "
        "100000 and one more store this long is built for an index-rebuild row (e.g. 1000000)",
    )
    ap.add_argument(
        "--only",
        type=lambda s: [x for x in s.split(",") if x],
        help="run only the steps whose name starts with one of these words (write, read, history, "
        "process, batch, index, group, clone, hooks), e.g. --only write,group",
    )
    ap.add_argument("--json", type=Path, help="also write the results as JSON to this file")
    ap.add_argument("--cache", type=Path, default=CACHE_DIR, help="where built stores are cached")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t = time.perf_counter()
    runner = Runner(make_plan(args.quick, args.sizes, args.versions), args.cache, args.quick, args.only)
    results = runner.run()
    builds = runner.build_info()
    elapsed = time.perf_counter() - t
    print(table(results))
    print(
        f"\n{len(results)} measurements in {elapsed:.0f} s; "
        f"{sum(r.passed is False for r in results)} below target"
    )
    for b in builds:
        state = "cached" if b["cached"] else "built now"
        print(
            f"store {b['store']}: fast-import {b['fast_import_s']} s, index catch-up {b['index_rebuild_s']} s ({state})"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "quick": args.quick,
                    "elapsed_s": round(elapsed, 1),
                    "environment": environment(),
                    "results": [r.to_dict() for r in results],
                    "builds": builds,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
