"""A real `gitmem serve` under 1, 8 and 32 concurrent clients, as ratios against floors of the same run.

    python bench/serve_bench.py [--quick] [--requests 100] [--stores 1000] [--memory-clients 32] [--json FILE]

The server is a ``gitmem serve --home H --port P`` subprocess on 127.0.0.1 (a free port), its token
made with :class:`TokenStore`; the clients are threads of this process with keep-alive httpx
clients, so server and clients do not share a GIL. Operations: create, update with a
content_sha256 precondition, retrieve and list. Floors, measured in the same run: the library call
in-process (``Store.read`` / ``Store.write``, on a store of its own; the write is the update
row's: same depth, directory size and precondition) and a no-op endpoint served
by the same stack (uvicorn, Starlette and gitmem's front middleware, ``gitmem serve``'s options
and log level) in a subprocess of its own, each taken just before the row it is the floor of. Rows:

- retrieve p50 / (no-op p50 + library read p50)        target <= 1.5
- update p50 - (no-op p50 + library write p50), in ms   target <= 1 ms
- 8 writers to one scope: durable versions/s / 1 writer's   target >= 4
- peak RSS (VmHWM) of the ``gitmem serve`` process over ``--stores`` stores (default 1,000) while
  ``--memory-clients`` clients (default 32) read random stores    target < 300 MB

``--quick`` (a smoke run, a few seconds; the test suite runs it) uses 1 and 8 clients, few requests
and 30 stores with 8 clients for the memory row.

``--many`` runs only the many-stores row instead: ``--many-stores`` stores (default 10,000; quick 60),
``--touched`` of them (default 1,000; quick 12) read and written by ``--many-clients`` clients
(default 64; quick 8), ``--many-requests`` each (default 20; quick 4): first every client lists the
memories of random touched stores, then every client creates memories in random touched stores.
It reports throughput, p50 and p99 of each phase, the server's peak RSS and the most descriptors it
had open (``/proc/PID/fd``, sampled every 50 ms). Targets: peak RSS < 400 MB, p99 <= 5x p50 for
reads and for writes, open files bounded (reported against the pool's bound of idle stores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gitmem  # noqa: E402
from gitmem.engine.writer import sha256_hex  # noqa: E402
from gitmem.server.pool import MAX_IDLE  # noqa: E402
from gitmem.server.tokens import TokenStore  # noqa: E402

Ids = dict[tuple[int, int], tuple[str, str]]
MEMORY_TARGET_MB = 300.0
MANY_MEMORY_TARGET_MB = 400.0
CONVOY_TARGET = 5.0  # p99 / p50


def _noop_main(port: int) -> None:
    """The no-op floor's server (``--noop-server PORT``): one route behind gitmem's front
    middleware on uvicorn, configured as ``gitmem serve`` configures it."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    from gitmem.server.app import _Front, uvicorn_options
    from gitmem.server.metrics import Metrics

    async def noop(request: Request) -> Response:
        return JSONResponse({"ok": True})

    app = _Front(Starlette(routes=[Route("/noop", noop)]), Metrics(), 1 << 20)
    # The options and log level of `gitmem serve` (its default, info): the front middleware then
    # writes its access line here as there (before, at "warning", the floor skipped that work).
    uvicorn.run(app, **uvicorn_options(host="127.0.0.1", port=port))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def subprocess_server(args: list[str], port: int, ready: str) -> Iterator[tuple[str, int]]:
    """Run a server process (this interpreter, ``args``) on 127.0.0.1:``port`` until the block ends;
    yields its URL and pid once ``ready`` answers."""
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,  # `-m gitmem` imports from the working directory first: this tree's, not the caller's
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{' '.join(args)} exited with {proc.returncode}")
            try:
                if httpx.get(url + ready, timeout=5).status_code < 500:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{' '.join(args)} did not start")
            time.sleep(0.05)
        yield url, proc.pid
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def gitmem_serve(home: Path) -> Any:
    port = _free_port()
    return subprocess_server(
        ["-m", "gitmem", "serve", "--home", str(home), "--port", str(port)], port, "/metrics"
    )


def noop_server() -> Any:
    port = _free_port()
    return subprocess_server([str(Path(__file__).resolve()), "--noop-server", str(port)], port, "/noop")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stats(samples: list[float], wall: float) -> dict[str, float]:
    return {
        "n": len(samples),
        "rps": len(samples) / wall if wall else 0.0,
        "p50_ms": statistics.median(samples) * 1000,
        "p99_ms": pct(samples, 0.99) * 1000,
    }


def run_clients(
    n: int, per_client: int, op: Callable[[httpx.Client, int, int], object], url: str, auth: str
) -> dict[str, float]:
    samples: list[list[float]] = [[] for _ in range(n)]

    def worker(k: int) -> None:
        with httpx.Client(base_url=url, headers={"authorization": f"Bearer {auth}"}, timeout=60) as c:
            for i in range(per_client):
                t0 = time.perf_counter()
                op(c, k, i)
                samples[k].append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(n)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats([s for lst in samples for s in lst], time.perf_counter() - t0)


def library_floor(home: Path, rounds: int, tag: str) -> dict[str, float]:
    """Store.write and Store.read p50, each in a loop of its own, on a store of their own (its tip
    stays put for the reads: the server's retrieve row reads a scope no write moves in between;
    reads interleaved with writes each paid an index catch-up, about 3x a plain read).

    The write floor is the write the update row makes, through the library: a new content for
    each of ``rounds`` memories that share one directory two levels down (as the served store's
    ``/c1/k0/m{i}.md``), with the content_sha256 precondition. A write at the root of a store
    with one memory rewrites one small tree instead of three, one of them as big as the
    directory: about 0.3 ms less on this machine, which the row would have charged the server."""
    with gitmem.open_store("floor", home) as store:  # not the served store: its tip stays put
        store.write("/floor.md", "0")
        paths = [f"/{tag}/k0/m{i}.md" for i in range(rounds)]
        for i, path in enumerate(paths):
            store.write(path, f"0 {i}")
        reads, writes = [], []
        for i, path in enumerate(paths):
            t0 = time.perf_counter()
            store.write(path, f"0 {i} updated", if_sha256=sha256_hex(f"0 {i}".encode()))
            writes.append(time.perf_counter() - t0)
        for _ in range(rounds):
            t0 = time.perf_counter()
            store.read("/floor.md")
            reads.append(time.perf_counter() - t0)
    return {"read_p50_ms": statistics.median(reads) * 1000, "write_p50_ms": statistics.median(writes) * 1000}


def bench(clients: list[int], per_client: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    try:
        return _bench(home, clients, per_client)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _bench(home: Path, clients: list[int], per_client: int) -> dict[str, Any]:
    gitmem.create_store("bench", home=home).close()
    gitmem.create_store("floor", home=home).close()
    _tok, secret = TokenStore(home).create(stores={"bench": "rw"})
    out: dict[str, Any] = {"floors": {}}
    rounds = max(20, per_client)
    # Both floor servers run for the whole bench, and the floors of a row are measured just before
    # it: on a shared machine the load moves within a run (a floor taken minutes earlier made
    # ratios anywhere from 0.8x to 2x).
    with noop_server() as (noop_url, _pid), gitmem_serve(home) as (url, _pid):

        def floors(op: str) -> None:
            noop = run_clients(1, rounds, lambda c, k, i: c.get("/noop").raise_for_status(), noop_url, secret)
            out["floors"][op] = {"noop": noop, "library": library_floor(home, rounds, f"floor-{op}")}

        sid = httpx.get(url + "/v1/memory_stores", headers={"authorization": f"Bearer {secret}"}).json()[
            "data"
        ][0]["id"]
        base = f"/v1/memory_stores/{sid}/memories"
        for n in clients:
            ids: Ids = {}

            def create(c: httpx.Client, k: int, i: int, n: int = n, ids: Ids = ids) -> None:
                r = c.post(base, json={"path": f"/c{n}/k{k}/m{i}.md", "content": f"{k} {i}"})
                r.raise_for_status()
                ids[(k, i)] = (r.json()["id"], r.json()["content_sha256"])

            def update(c: httpx.Client, k: int, i: int, ids: Ids = ids) -> None:
                mid, sha = ids[(k, i)]
                content = f"{k} {i} updated"
                pre = {"type": "content_sha256", "content_sha256": sha}
                c.post(f"{base}/{mid}", json={"content": content, "precondition": pre}).raise_for_status()
                ids[(k, i)] = (mid, sha256_hex(content.encode()))

            def retrieve(c: httpx.Client, k: int, i: int, ids: Ids = ids) -> None:
                c.get(f"{base}/{ids[(k, i)][0]}").raise_for_status()

            def listing(c: httpx.Client, k: int, i: int, n: int = n) -> None:
                c.get(base, params={"path_prefix": f"/c{n}/k{k}/", "limit": 20}).raise_for_status()

            row = {}
            for name, fn in (
                ("create", create),
                ("update", update),
                ("retrieve", retrieve),
                ("list", listing),
            ):
                if n == clients[0] and name in ("update", "retrieve"):
                    floors(name)
                row[name] = run_clients(n, per_client, fn, url, secret)
            out[f"clients_{n}"] = row
    with gitmem.open_store("bench", home) as store:  # every acknowledged update is a version
        updates = len(store.versions(operation="modified"))  # the floors write another store
    expected = sum(n * per_client for n in clients)
    if updates < expected:
        raise RuntimeError(f"{expected} updates acknowledged, {updates} versions in the store")
    fr, fu = out["floors"]["retrieve"], out["floors"]["update"]
    one = out[f"clients_{clients[0]}"]
    eight = out.get("clients_8", one)
    out["ratios"] = {
        "retrieve_p50_vs_noop_plus_read": one["retrieve"]["p50_ms"]
        / (fr["noop"]["p50_ms"] + fr["library"]["read_p50_ms"]),
        "update_p50_minus_noop_plus_write_ms": one["update"]["p50_ms"]
        - (fu["noop"]["p50_ms"] + fu["library"]["write_p50_ms"]),
        "writers8_vs_writer1_versions_per_s": eight["update"]["rps"] / one["update"]["rps"],
    }
    return out


def _status_mb(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_memory(stores: int, clients: int, per_client: int) -> dict[str, Any]:
    """A real ``gitmem serve`` subprocess over ``stores`` stores; ``clients`` threads each list the
    memories of random stores; the server's peak RSS (VmHWM) while they do. Stores open lazily
    and at most a bounded number stay open while idle (gitmem/server/pool.py)."""
    home = Path(tempfile.mkdtemp(prefix="serve-bench-mem-"))
    try:
        return _bench_memory(home, stores, clients, per_client)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def _bench_memory(home: Path, stores: int, clients: int, per_client: int) -> dict[str, Any]:
    ids = []
    t0 = time.perf_counter()
    for i in range(stores):
        with gitmem.create_store(f"s{i:04d}", home=home) as st:
            st.write("/hello.md", f"store {i}\n")
            ids.append(st.settings.id)
    built = time.perf_counter() - t0
    _tok, secret = TokenStore(home).create(admin=True)
    with gitmem_serve(home) as (url, pid):
        started_mb = _status_mb(pid, "VmRSS")
        rng = random.Random(7)
        picks = [[rng.choice(ids) for _ in range(per_client)] for _ in range(clients)]

        def read(c: httpx.Client, k: int, i: int) -> None:
            c.get(f"/v1/memory_stores/{picks[k][i]}/memories").raise_for_status()

        row = run_clients(clients, per_client, read, url, secret)
        return {
            "stores": stores,
            "clients": clients,
            "requests": row["n"],
            "distinct_stores": len({p for lst in picks for p in lst}),
            "rps": row["rps"],
            "p50_ms": row["p50_ms"],
            "started_rss_mb": started_mb,
            "peak_rss_mb": _status_mb(pid, "VmHWM"),
            "build_s": built,
        }


def _make_store(job: tuple[Path, int, bool]) -> tuple[int, str]:
    home, i, touched = job
    with gitmem.create_store(f"m{i:05d}", home=home) as st:
        if touched:
            st.write("/hello.md", f"store {i}\n")
        return i, st.settings.id


_LINKED = ("objects", "hooks", "refs", "info", "HEAD", "config", "description")


def _copy_template(template: Path, home: Path, i: int) -> str:
    """An untouched store as a copy of ``template`` (an empty store made by ``create_store``) with
    its own id and name: git's files hard-linked, gitmem's own (settings, keys, locks) copied with
    the id and name rewritten. Its ledger's first entry still names the template's id, so it is no
    store to verify or write; the run never opens one (the server lists them, by settings)."""
    from gitmem.ids import new_id

    old_id = template.name[: -len(".git")]
    sid = new_id("memstore")
    dest = template.parent / f"{sid}.git"

    def copy(src: str, dst: str) -> None:
        rel = Path(src).relative_to(template)
        if rel.parts[0] in _LINKED:
            os.link(src, dst)
            return
        data = Path(src).read_bytes().replace(old_id.encode(), sid.encode())
        if rel.name == "gitmem.yaml":
            data = data.replace(b"name: template\n", f"name: m{i:05d}\n".encode())
        Path(dst).write_bytes(data)

    shutil.copytree(template, dest, copy_function=copy)
    return sid


def bench_many(stores: int, touched: int, clients: int, per_client: int) -> dict[str, Any]:
    """One ``gitmem serve`` over ``stores`` stores; ``clients`` clients read, then write, random
    stores among the first ``touched``. The touched stores are created by 16 processes (a store's
    creation is mostly waiting for its flushes, which overlap); the others are copies of one empty
    store with their own ids (:func:`_copy_template`), which the run never opens."""
    from multiprocessing import Pool

    home = Path(tempfile.mkdtemp(prefix="serve-bench-many-"))
    try:
        t0 = time.perf_counter()
        ids: dict[int, str] = {}
        with Pool(16) as pool:
            jobs = [(home, i, True) for i in range(touched)]
            for i, sid in pool.imap_unordered(_make_store, jobs, chunksize=16):
                ids[i] = sid
        if stores > touched:
            with gitmem.create_store("template", home=home) as tpl:
                template = tpl.core.path
            for i in range(touched, stores):
                ids[i] = _copy_template(template, home, i)
            shutil.rmtree(template)
        built = time.perf_counter() - t0
        _tok, secret = TokenStore(home).create(admin=True)
        hot = [ids[i] for i in range(touched)]
        with gitmem_serve(home) as (url, pid):
            started_mb = _status_mb(pid, "VmRSS")
            fds = [len(os.listdir(f"/proc/{pid}/fd"))]
            stop = threading.Event()

            def sample() -> None:
                while not stop.wait(0.05):
                    try:
                        fds.append(len(os.listdir(f"/proc/{pid}/fd")))
                    except OSError:
                        return

            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            rng = random.Random(11)
            picks = [[rng.choice(hot) for _ in range(per_client)] for _ in range(clients)]

            def read(c: httpx.Client, k: int, i: int) -> None:
                c.get(f"/v1/memory_stores/{picks[k][i]}/memories").raise_for_status()

            def write(c: httpx.Client, k: int, i: int) -> None:
                body = {"path": f"/many/k{k}/m{i}.md", "content": f"client {k} request {i}"}
                c.post(f"/v1/memory_stores/{picks[k][i]}/memories", json=body).raise_for_status()

            try:
                reads = run_clients(clients, per_client, read, url, secret)
                writes = run_clients(clients, per_client, write, url, secret)
            finally:
                stop.set()
                sampler.join()
            peak_mb = _status_mb(pid, "VmHWM")
        created = 0
        for sid in set(p for lst in picks for p in lst):  # by id: a name would list every store
            with gitmem.open_store(sid, home) as st:
                created += sum(1 for m in st.list("/many/", depth=0))
        if created != clients * per_client:
            raise RuntimeError(f"{clients * per_client} creates acknowledged, {created} memories found")
        return {
            "stores": stores,
            "touched": touched,
            "clients": clients,
            "distinct_stores": len({p for lst in picks for p in lst}),
            "reads": reads,
            "writes": writes,
            "started_rss_mb": started_mb,
            "peak_rss_mb": peak_mb,
            "max_open_fds": max(fds),
            "started_fds": fds[0],
            "build_s": built,
        }
    finally:
        shutil.rmtree(home, ignore_errors=True)


def report_many(m: dict[str, Any]) -> bool:
    ok = m["peak_rss_mb"] < MANY_MEMORY_TARGET_MB
    for name in ("reads", "writes"):
        s = m[name]
        ratio = s["p99_ms"] / s["p50_ms"]
        good = ratio <= CONVOY_TARGET
        ok = ok and good
        sys.stdout.write(
            f"many stores, {name:>6}: {s['n']} requests, {s['rps']:.1f} req/s, p50 {s['p50_ms']:.2f} ms, "
            f"p99 {s['p99_ms']:.2f} ms, p99/p50 {ratio:.2f}x (target <= {CONVOY_TARGET:g}x) "
            f"{'pass' if good else 'FAIL'}\n"
        )
    sys.stdout.write(
        f"gitmem serve, {m['stores']} stores ({m['touched']} touched, {m['distinct_stores']} read and written), "
        f"{m['clients']} clients: peak RSS {m['peak_rss_mb']:.0f} MB (at start {m['started_rss_mb']:.0f} MB; "
        f"target < {MANY_MEMORY_TARGET_MB:.0f} MB) {'pass' if m['peak_rss_mb'] < MANY_MEMORY_TARGET_MB else 'FAIL'}; "
        f"open files at most {m['max_open_fds']} (at start {m['started_fds']}; idle stores kept open <= "
        f"{MAX_IDLE}); stores built in {m['build_s']:.0f} s\n"
    )
    return bool(ok)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="1 and 8 clients, few requests (a smoke run)")
    ap.add_argument("--stores", type=int, help="stores of the memory row (default 1000; quick: 30)")
    ap.add_argument("--memory-clients", type=int, help="clients of the memory row (default 32; quick: 8)")
    ap.add_argument("--requests", type=int, help="requests per client and operation (default 100; quick: 5)")
    ap.add_argument("--json", type=Path, help="write the results as JSON to this file")
    ap.add_argument("--many", action="store_true", help="only the many-stores row (see above)")
    ap.add_argument("--many-stores", type=int, help="stores of the many-stores row (default 10000; quick 60)")
    ap.add_argument("--touched", type=int, help="stores read and written (default 1000; quick 12)")
    ap.add_argument("--many-clients", type=int, help="clients of the many-stores row (default 64; quick 8)")
    ap.add_argument("--many-requests", type=int, help="requests per client and phase (default 20; quick 4)")
    ap.add_argument("--noop-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.noop_server:
        _noop_main(args.noop_server)
        return 0
    if args.many:
        q = args.quick
        many = bench_many(
            args.many_stores or (60 if q else 10_000),
            args.touched or (12 if q else 1000),
            args.many_clients or (8 if q else 64),
            args.many_requests or (4 if q else 20),
        )
        report_many(many)
        if args.json:
            args.json.write_text(json.dumps({"many": many}, indent=2))
        return 0
    clients, per = ([1, 8], 5) if args.quick else ([1, 8, 32], 100)
    per = args.requests or per
    stores = args.stores or (30 if args.quick else 1000)
    mem_clients = args.memory_clients or (8 if args.quick else 32)
    result = bench(clients, per)
    result["memory"] = bench_memory(stores, mem_clients, 5 if args.quick else 60)
    for key, row in result.items():
        if key.startswith("clients_"):
            for op, s in row.items():
                sys.stdout.write(
                    f"{key:>10} {op:>8}: {s['rps']:8.1f} req/s  p50 {s['p50_ms']:7.2f} ms  p99 {s['p99_ms']:7.2f} ms\n"
                )
    fr, fu = result["floors"]["retrieve"], result["floors"]["update"]
    sys.stdout.write(
        f"floors (each just before its row): no-op endpoint p50 {fr['noop']['p50_ms']:.2f} ms and "
        f"library read {fr['library']['read_p50_ms']:.2f} ms (retrieve); no-op {fu['noop']['p50_ms']:.2f} ms "
        f"and library write {fu['library']['write_p50_ms']:.2f} ms (update)\n"
    )
    r = result["ratios"]
    m = result["memory"]
    ok = {
        "retrieve": r["retrieve_p50_vs_noop_plus_read"] <= 1.5,
        "update": r["update_p50_minus_noop_plus_write_ms"] <= 1.0,
        "writers": r["writers8_vs_writer1_versions_per_s"] >= 4.0,
        "memory": m["peak_rss_mb"] < MEMORY_TARGET_MB,
    }

    def verdict(key: str) -> str:
        return "pass" if ok[key] else "FAIL"

    sys.stdout.write(
        f"retrieve p50 / (no-op + library read): {r['retrieve_p50_vs_noop_plus_read']:.2f}x "
        f"(target <= 1.5) {verdict('retrieve')}\n"
        f"update p50 - (no-op + library write): {r['update_p50_minus_noop_plus_write_ms']:.2f} ms "
        f"(target <= 1) {verdict('update')}\n"
        f"8 writers / 1 writer, durable versions/s: {r['writers8_vs_writer1_versions_per_s']:.2f}x "
        f"({result['clients_8']['update']['rps']:.0f} vs {result[f'clients_{clients[0]}']['update']['rps']:.0f}; "
        f"target >= 4) {verdict('writers')}\n"
        f"gitmem serve, {m['stores']} stores, {m['clients']} clients ({m['requests']} reads over "
        f"{m['distinct_stores']} stores, {m['rps']:.0f} req/s): peak RSS {m['peak_rss_mb']:.0f} MB "
        f"(at start {m['started_rss_mb']:.0f} MB; target < {MEMORY_TARGET_MB:.0f} MB) {verdict('memory')}\n"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
