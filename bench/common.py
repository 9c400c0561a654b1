"""Shared pieces of the benchmark: deterministic stores built with ``git fast-import``, the on-disk
cache under ``bench/.cache/``, timing helpers and the result table.

Stores are generated, not recorded: the same :class:`Spec` always gives the same commits (fixed
timestamps, ids derived from the version number, seeded content), so a cached store can be reused
by any later run with the same parameters.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import gitmem
from gitmem.config import Limits
from gitmem.engine.index import SCHEMA_VERSION
from gitmem.ids import derived_ulid
from gitmem.model.versions import format_message

BUILD_VERSION = "1"  # bump when the generated layout or content changes: invalidates the cache
T0 = 1_700_000_000  # commit time of version 0; version k is committed at T0 + k
ACTOR = "service:bench"
COMMITTER = "gitmem <gitmem>"
FILES_PER_DIR = 25
# Bench stores hold more than the default limits allow (100k memories, > 100 MB).
BENCH_LIMITS = Limits(max_memories=10_000_000, max_store_bytes=1 << 40)
BENCH_DIR = Path(__file__).resolve().parent
CACHE_DIR = BENCH_DIR / ".cache"


# ---------------------------------------------------------------------- deterministic content
@dataclass(frozen=True)
class Spec:
    """A generated store: ``memories`` created one per commit, then modifications of seeded random
    memories until there are ``versions`` commits (one version each) on ``main``.

    With ``seed_chunk`` > 1 the memories are created ``seed_chunk`` per commit instead, as a plain
    git import would (no gitmem trailers: the index derives the ids): the library's index catch-up
    diffs whole trees per commit, so 100k one-memory commits into a 100k-file tree take far too long.
    """

    memories: int
    versions: int
    seed_chunk: int = 1
    layout: str = "tree"  # see :func:`memory_path`

    def __post_init__(self) -> None:
        if self.memories < 1 or self.versions < self.memories or self.seed_chunk < 1:
            raise ValueError(f"need 1 <= memories <= versions, got {self.memories}/{self.versions}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")

    @property
    def key(self) -> str:
        chunk = f"-c{self.seed_chunk}" if self.seed_chunk > 1 else ""
        layout = f"-{self.layout}" if self.layout != "tree" else ""
        return f"m{self.memories}-v{self.versions}{chunk}{layout}-b{BUILD_VERSION}"

    @property
    def label(self) -> str:
        seeded = f" (seeded {human(self.seed_chunk)}/commit)" if self.seed_chunk > 1 else ""
        layout = f", {self.layout}" if self.layout != "tree" else ""
        return f"{human(self.memories)} mem / {human(self.versions)} ver{seeded}{layout}"


def compile_gitmem() -> None:
    """Write gitmem's bytecode, as installing the package does (pip compiles every module of a
    wheel). Without it an editable install run under ``PYTHONDONTWRITEBYTECODE`` compiles every
    module a hook imports on every push (about 30 ms), which no installed server pays."""
    import compileall

    compileall.compile_dir(str(Path(gitmem.__file__).parent), quiet=1)


def human(n: int) -> str:
    if n >= 1000 and n % 1000 == 0:
        return f"{n // 1000}k"
    return str(n)


#: Where memories live: ``tree`` two levels of ~25-file directories (the default), ``flat`` every
#: memory in one directory (``/bulk/``), ``deep`` six levels of directories, ~25 files at the leaves.
LAYOUTS = ("tree", "flat", "deep")
DEEP_LEVELS = 6


def memory_path(i: int, total: int, layout: str = "tree") -> str:
    """Memory ``i`` of ``total`` at ``/topic-NN/sub-NN/memory-NNNNNN.md``: ~25 files per directory,
    topics and sub-directories fanning out evenly (so tree sizes stay realistic at every scale).
    ``flat``: ``/bulk/memory-NNNNNN.md``; ``deep``: ``/l0-NN/l1-NN/.../l5-NN/memory-NNNNNN.md``."""
    if layout == "flat":
        return f"/bulk/memory-{i:06d}.md"
    if layout == "deep":
        leaves = max(1, math.ceil(total / FILES_PER_DIR))
        fan = max(2, math.ceil(leaves ** (1 / DEEP_LEVELS)))
        leaf, parts = i // FILES_PER_DIR, []
        for level in range(DEEP_LEVELS):
            leaf, digit = divmod(leaf, fan)
            parts.append(f"l{level}-{digit:02d}")
        return "/" + "/".join(reversed(parts)) + f"/memory-{i:06d}.md"
    leaves = max(1, math.ceil(total / FILES_PER_DIR))
    per_topic = max(1, math.ceil(math.sqrt(leaves)))
    leaf = i // FILES_PER_DIR
    return f"/topic-{leaf // per_topic:02d}/sub-{leaf % per_topic:02d}/memory-{i:06d}.md"


_WORDS = (  # noqa: SIM905
    "agent user prefers concise answers project deadline meeting notes database schema migration "
    "python test failing flaky retry config token budget memory store session scope branch commit "
    "review deploy staging production rollback incident customer ticket priority summary todo done "
    "follow up email calendar weekly report metric latency error rate cache index search query"
).split()


class Content:
    """Seeded text of 200-2000 bytes: slices of one pool of words behind a unique header line."""

    def __init__(self, seed: int = 7) -> None:
        rng = random.Random(seed)
        self.pool = " ".join(rng.choice(_WORDS) for _ in range(60_000))
        self.rng = random.Random(seed + 1)

    def make(self, memory: int, version: int) -> bytes:
        size = self.rng.randint(200, 2000)
        start = self.rng.randrange(0, len(self.pool) - size)
        body = self.pool[start : start + size]
        head = f"# memory {memory}, version {version}\n\n"
        if memory % 4 == 0:  # a quarter of the memories carry a description (front matter)
            head = f"---\ndescription: notes about topic {memory % 97}\n---\n" + head
        return (head + body + "\n").encode("ascii")


def commit_ids(k: int, memory: int) -> tuple[str, str, int]:
    """Version id, memory id and commit time of version ``k`` (of memory ``memory``)."""
    when = T0 + k
    return (
        "memver_" + derived_ulid(when * 1000, "bench-version", str(k)),
        "mem_" + derived_ulid(T0 * 1000, "bench-memory", str(memory)),
        when,
    )


def fast_import_stream(
    ops: list[tuple[str, int, bytes]],
    total_memories: int,
    *,
    first_version: int = 0,
    ref: str = "refs/heads/main",
    done: bool = True,
    layout: str = "tree",
) -> Iterator[bytes]:
    """A ``git fast-import`` stream: one commit per (operation, memory, content), with gitmem's
    message and trailers, author = actor and committer = gitmem, exactly like a library write."""
    for n, (operation, memory, data) in enumerate(ops):
        k = first_version + n
        version_id, memory_id, when = commit_ids(k, memory)
        path = memory_path(memory, total_memories, layout)
        message = format_message(operation, path, version_id, memory_id, ACTOR, None).encode()
        yield b"".join(
            (
                f"commit {ref}\n".encode(),
                f"author {ACTOR} <{ACTOR}> {when} +0000\n".encode(),
                f"committer {COMMITTER} {when} +0000\n".encode(),
                f"data {len(message)}\n".encode(),
                message,
                f"M 100644 inline {path[1:]}\ndata {len(data)}\n".encode(),
                data,
                b"\n",
            )
        )
    if done:
        yield b"done\n"


def seed_stream(
    ops: list[tuple[str, int, bytes]],
    total_memories: int,
    chunk: int,
    ref: str = "refs/heads/main",
    layout: str = "tree",
) -> Iterator[bytes]:
    """A ``git fast-import`` stream creating the memories of ``ops`` ``chunk`` per commit, the way a
    plain git import would (no trailers); no ``done``: a :func:`fast_import_stream` follows."""
    for start in range(0, len(ops), chunk):
        part = ops[start : start + chunk]
        when = T0 + start
        message = f"seed memories {start}-{start + len(part) - 1}\n".encode()
        yield b"".join(
            (
                f"commit {ref}\n".encode(),
                f"author bench <bench@example.com> {when} +0000\n".encode(),
                f"committer bench <bench@example.com> {when} +0000\n".encode(),
                f"data {len(message)}\n".encode(),
                message,
            )
        )
        for _op, memory, data in part:
            path = memory_path(memory, total_memories, layout)
            yield f"M 100644 inline {path[1:]}\ndata {len(data)}\n".encode() + data + b"\n"


def spec_stream(spec: Spec) -> Iterator[bytes]:
    """The whole ``git fast-import`` stream of a spec."""
    ops = spec_ops(spec)
    if spec.seed_chunk == 1:
        yield from fast_import_stream(ops, spec.memories, layout=spec.layout)
        return
    yield from seed_stream(ops[: spec.memories], spec.memories, spec.seed_chunk, layout=spec.layout)
    yield from fast_import_stream(
        ops[spec.memories :], spec.memories, first_version=spec.memories, layout=spec.layout
    )


def spec_ops(spec: Spec, content: Content | None = None) -> list[tuple[str, int, bytes]]:
    """The versions of a spec, in order: (operation, memory number, content)."""
    content = content or Content()
    rng = random.Random(spec.memories * 1_000_003 + spec.versions)
    ops = []
    for k in range(spec.versions):
        if k < spec.memories:
            ops.append(("created", k, content.make(k, k)))
        else:
            m = rng.randrange(spec.memories)
            ops.append(("modified", m, content.make(m, k)))
    return ops


def fast_import(repo: Path, stream: Iterator[bytes]) -> None:
    """Feed ``stream`` to ``git fast-import`` in ``repo``, in ~1 MB writes."""
    proc = subprocess.Popen(
        ["git", "-C", str(repo), "fast-import", "--quiet", "--done"], stdin=subprocess.PIPE
    )
    assert proc.stdin is not None
    chunk: list[bytes] = []
    size = 0
    for piece in stream:
        chunk.append(piece)
        size += len(piece)
        if size > 1 << 20:
            proc.stdin.write(b"".join(chunk))
            chunk, size = [], 0
    proc.stdin.write(b"".join(chunk))
    proc.stdin.close()
    if proc.wait() != 0:
        raise RuntimeError(f"git fast-import failed in {repo}")


# ---------------------------------------------------------------------- building and caching
@dataclass(frozen=True)
class Built:
    """A cached store: where it is and what building it cost."""

    spec: Spec
    path: Path
    fast_import_s: float
    index_rebuild_s: float
    cached: bool


def build_store(spec: Spec, dest: Path, log: Callable[[str], None] = print) -> Built:
    """Create a store with gitmem, fill ``main`` with ``git fast-import``, then let the library
    index catch up. ``dest`` is the bare repository to create (its parent must exist)."""
    home = dest.parent / f".home-{os.getpid()}"
    store = gitmem.create_store("bench", description="gitmem benchmark store", limits=BENCH_LIMITS, home=home)
    path = store.path
    store.close()
    log(f"  building {spec.label}: fast-import of {spec.versions} versions ...")
    t = time.perf_counter()
    fast_import(path, spec_stream(spec))
    fi = time.perf_counter() - t
    log(f"  building {spec.label}: fast-import {fi:.1f} s; index catch-up ...")
    idx = _rebuild_index(path, spec)
    log(f"  building {spec.label}: index {idx:.1f} s")
    os.rename(path, dest)
    shutil.rmtree(home, ignore_errors=True)
    return Built(spec, dest, fi, idx, cached=False)


def _rebuild_index(path: Path, spec: Spec) -> float:
    """Rebuild a store's derived index from git; returns the seconds it took."""
    store = gitmem.open_store(path)
    t = time.perf_counter()
    indexed = store.core.index.rebuild()
    seconds = time.perf_counter() - t
    store.close()
    if indexed != spec.versions:
        raise RuntimeError(f"index holds {indexed} versions, expected {spec.versions}")
    return seconds


def cached_store(spec: Spec, cache: Path = CACHE_DIR, log: Callable[[str], None] = print) -> Built:
    """The store for ``spec`` from the cache, built first when missing. Never measure on it
    directly: measurements write, so take a :func:`work_copy`. Several benchmark processes may
    ask for the same store at once: a lock file per key makes one build it and the others wait."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f".{spec.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _cached_store(spec, cache / spec.key, log)


def _cached_store(spec: Spec, entry: Path, log: Callable[[str], None]) -> Built:
    meta = entry / "meta.json"
    if meta.exists():
        info = json.loads(meta.read_text())
        if info.get("index_schema") != SCHEMA_VERSION:  # the library's index changed: rebuild it
            log(f"  {spec.label}: index schema changed, rebuilding the cached index ...")
            info["index_rebuild_s"] = _rebuild_index(entry / "bench.git", spec)
            info["index_schema"] = SCHEMA_VERSION
            meta.write_text(json.dumps(info))
        return Built(spec, entry / "bench.git", info["fast_import_s"], info["index_rebuild_s"], cached=True)
    tmp = entry.parent / f".{spec.key}.building-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    built = build_store(spec, tmp / "bench.git", log)
    info = {
        "fast_import_s": built.fast_import_s,
        "index_rebuild_s": built.index_rebuild_s,
        "index_schema": SCHEMA_VERSION,
    }
    (tmp / "meta.json").write_text(json.dumps(info))
    shutil.rmtree(entry, ignore_errors=True)
    os.rename(tmp, entry)
    return Built(spec, entry / "bench.git", built.fast_import_s, built.index_rebuild_s, cached=False)


def work_copy(built: Built, workdir: Path) -> Path:
    """A private copy of a cached store (with its index) on the same file system, to write into."""
    dest = workdir / built.spec.key / "bench.git"
    if dest.exists():
        shutil.rmtree(dest)
    cache = built.path.parent.parent
    with open(cache / f".{built.spec.key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)  # not while another process rebuilds the cached index
        shutil.copytree(built.path, dest)
    return dest


# ---------------------------------------------------------------------- timing
def clock(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def interleaved(a: Callable[[], object], b: Callable[[], object], rounds: int) -> tuple[float, float]:
    """Median seconds of ``a`` and of ``b``, run alternately so drift hits both alike."""
    ta, tb = [], []
    for i in range(rounds):
        if i % 2:
            tb.append(clock(b))
            ta.append(clock(a))
        else:
            ta.append(clock(a))
            tb.append(clock(b))
    return statistics.median(ta), statistics.median(tb)


def interleaved_many(fns: Sequence[Callable[[], object]], rounds: int) -> list[float]:
    """Median seconds of each of ``fns``, run in rotation (the order shifts every round)."""
    times: list[list[float]] = [[] for _ in fns]
    for i in range(rounds):
        for k in range(len(fns)):
            j = (i + k) % len(fns)
            times[j].append(clock(fns[j]))
    return [statistics.median(t) for t in times]


# ---------------------------------------------------------------------- results
@dataclass(frozen=True)
class Result:
    """One line of the table: ``ratio = gitmem_s / floor_s``; ``limit`` is the target
    (pass when ratio <= limit; None: informative only)."""

    name: str
    gitmem_s: float
    floor_s: float
    floor: str
    limit: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float:
        return self.gitmem_s / self.floor_s if self.floor_s > 0 else float("inf")

    @property
    def passed(self) -> bool | None:
        return None if self.limit is None else self.ratio <= self.limit

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d.update(ratio=round(self.ratio, 4), passed=self.passed)
        return d


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.0f} us"


def fmt_ratio(ratio: float) -> str:
    return f"{ratio:.2f}x" if ratio >= 0.1 else f"{ratio * 100:.3g}%"


def fmt_target(limit: float | None) -> str:
    if limit is None:
        return "-"
    return f"<= {limit * 100:.0f}%" if limit < 0.5 else f"<= {limit:g}x"


def table(results: list[Result]) -> str:
    """The results as a Markdown table."""
    rows = [("measurement", "gitmem", "floor", "ratio", "target", "result")]
    for r in results:
        verdict = {True: "pass", False: "FAIL", None: "info"}[r.passed]
        rows.append(
            (
                r.name,
                fmt_time(r.gitmem_s),
                f"{fmt_time(r.floor_s)} ({r.floor})",
                fmt_ratio(r.ratio),
                fmt_target(r.limit),
                verdict + (f" ({r.note})" if r.note else ""),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)
