"""`gitmem serve` under 1, 8 and 32 concurrent clients, as ratios against floors of the same run.

Operations: create, update with a content_sha256 precondition, retrieve and list, over HTTP/1.1
(keep-alive clients, one per thread) against uvicorn on 127.0.0.1. Floors, measured in the same run:
the library call in-process (``Store.read`` / ``Store.write``) and a no-op endpoint served by the same
stack (uvicorn, Starlette and gitmem's front middleware). Rows:

- retrieve p50 / (no-op p50 + library read p50)        target <= 1.5
- update p50 - (no-op p50 + library write p50), in ms   target <= 1 ms
- 8 writers to one scope: versions/s / 1 writer's        target >= 4
- peak RSS of a real ``gitmem serve`` process with 1,000 stores and 32 clients  target < 300 MB

``--quick`` (a smoke run, a few seconds) uses 1 and 8 clients and few requests; ``--json FILE``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from gitmem.engine.writer import sha256_hex  # noqa: E402
from gitmem.server.app import _Front, create_app  # noqa: E402
from gitmem.server.metrics import Metrics  # noqa: E402
from gitmem.server.tokens import TokenStore  # noqa: E402

Ids = dict[tuple[int, int], tuple[str, str]]


def _noop_app() -> Any:
    async def noop(request: Any) -> Response:
        return JSONResponse({"ok": True})

    return _Front(Starlette(routes=[Route("/noop", noop)]), Metrics(), 1 << 20)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


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
    n: int, per_client: int, op: Callable[[httpx.Client, int, int], None], url: str, auth: str
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


def library_floor(home: Path, rounds: int) -> dict[str, float]:
    with gitmem.open_store("bench", home) as store:
        store.write("/floor.md", "0")
        reads, writes = [], []
        for i in range(rounds):
            t0 = time.perf_counter()
            store.read("/floor.md")
            reads.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            store.write("/floor.md", str(i + 1))
            writes.append(time.perf_counter() - t0)
    return {"read_p50_ms": statistics.median(reads) * 1000, "write_p50_ms": statistics.median(writes) * 1000}


def bench(clients: list[int], per_client: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    gitmem.create_store("bench", home=home).close()
    _tok, secret = TokenStore(home).create(stores={"bench": "rw"})
    out: dict[str, Any] = {"floor_library": library_floor(home, max(20, per_client))}
    with serving(_noop_app()) as noop_url:
        out["floor_noop"] = run_clients(
            1, max(20, per_client), lambda c, k, i: c.get("/noop").raise_for_status(), noop_url, secret
        )
    with serving(create_app(home)) as url:
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

            row = {
                name: run_clients(n, per_client, fn, url, secret)
                for name, fn in (
                    ("create", create),
                    ("update", update),
                    ("retrieve", retrieve),
                    ("list", listing),
                )
            }
            out[f"clients_{n}"] = row
    lib, noop = out["floor_library"], out["floor_noop"]
    one = out[f"clients_{clients[0]}"]
    eight = out.get("clients_8", one)
    out["ratios"] = {
        "retrieve_p50_vs_noop_plus_read": one["retrieve"]["p50_ms"] / (noop["p50_ms"] + lib["read_p50_ms"]),
        "update_p50_minus_noop_plus_write_ms": one["update"]["p50_ms"]
        - (noop["p50_ms"] + lib["write_p50_ms"]),
        "writers8_vs_writer1_versions_per_s": eight["update"]["rps"] / one["update"]["rps"],
    }
    return out


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def bench_memory(stores: int, clients: int, per_client: int) -> dict[str, Any]:
    """A real ``gitmem serve`` subprocess over ``stores`` stores; ``clients`` threads each read random
    stores; the server's peak RSS (VmHWM) afterwards. Stores open lazily and idle ones close."""
    import os
    import random
    import subprocess

    home = Path(tempfile.mkdtemp(prefix="serve-bench-mem-"))
    ids = []
    for i in range(stores):
        with gitmem.create_store(f"s{i:04d}", home=home) as st:
            st.write("/hello.md", f"store {i}\n")
            ids.append(st.settings.id)
    _tok, secret = TokenStore(home).create(admin=True)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitmem", "serve", "--home", str(home), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.05)
        rng = random.Random(7)
        picks = [[rng.choice(ids) for _ in range(per_client)] for _ in range(clients)]

        def read(c: httpx.Client, k: int, i: int) -> None:
            c.get(f"/v1/memory_stores/{picks[k][i]}/memories").raise_for_status()

        row = run_clients(clients, per_client, read, url, secret)
        return {"stores": stores, "clients": clients, "requests": row["n"], "rps": row["rps"],
                "peak_rss_mb": _peak_rss_mb(proc.pid)}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true", help="1 and 8 clients, few requests (a smoke run)")
    ap.add_argument("--json", type=Path, help="write the results as JSON to this file")
    args = ap.parse_args(argv)
    clients, per = ([1, 8], 5) if args.quick else ([1, 8, 32], 100)
    result = bench(clients, per)
    result["memory"] = bench_memory(30, 8, 5) if args.quick else bench_memory(1000, 32, 60)
    for key, row in result.items():
        if key.startswith("clients_"):
            for op, s in row.items():
                sys.stdout.write(
                    f"{key:>10} {op:>8}: {s['rps']:8.1f} req/s  p50 {s['p50_ms']:7.2f} ms  p99 {s['p99_ms']:7.2f} ms\n"
                )
    r = result["ratios"]
    sys.stdout.write(
        f"retrieve p50 / (no-op + library read): {r['retrieve_p50_vs_noop_plus_read']:.2f}x (target <= 1.5)\n"
        f"update p50 - (no-op + library write): {r['update_p50_minus_noop_plus_write_ms']:.2f} ms (target <= 1)\n"
        f"8 writers / 1 writer, versions/s: {r['writers8_vs_writer1_versions_per_s']:.2f}x (target >= 4)\n"
    )
    m = result["memory"]
    sys.stdout.write(
        f"gitmem serve, {m['stores']} stores, {m['clients']} clients ({m['requests']} reads, "
        f"{m['rps']:.0f} req/s): peak RSS {m['peak_rss_mb']:.0f} MB (target < 300 MB)\n"
    )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
