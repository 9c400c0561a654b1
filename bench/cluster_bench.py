"""A gitmem cluster measured on this machine: real PostgreSQL, real ``gitmem serve --cluster-node``
processes on 127.0.0.1, clients in this process (docs/cluster.md).

    python bench/cluster_bench.py [--quick] [--seconds 10] [--clients 8] [--stores 12] [--json FILE]

Rows, all measured in the same run:

- writes/s through 1 node (it homes every store) vs through 3 nodes (stores spread over three homes,
  each request sent to a random node, so two in three are proxied), async replication;
- retrieve p50 and p99 through the store's home vs through a node that is not its home;
- failover time: from SIGKILL of a home to the first write acknowledged by the replica that took
  over (lease 10 s, heartbeat 2 s: the lease length bounds it from below).

On one machine the three nodes share its cores, so 3 nodes are not expected to write faster than
one here; the row shows what the proxy and the replication cost. ``--quick`` (the test suite runs
it) uses 2 stores, 2 clients and 2 seconds a row, and a 2 s lease.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402

from gitmem.cluster.state import ClusterState  # noqa: E402
from gitmem.cluster.tokens import ClusterTokenStore  # noqa: E402
from tests.pgkit import fresh_database, running_postgres  # noqa: E402
from tests.serverkit import free_port  # noqa: E402

HEADERS = {"anthropic-version": "2023-06-01", "anthropic-beta": "managed-agents-2026-04-01"}


def _start(home: Path, name: str, port: int, database: str, lease: float) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GITMEM_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "gitmem", "serve", "--port", str(port), "--cluster-node", name,
         "--database", database, "--lease-seconds", str(lease), "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def _wait_up(url: str, secret: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            if (
                httpx.get(f"{url}/v1/memory_stores", headers={**HEADERS, "x-api-key": secret}).status_code
                == 200
            ):
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit(f"node {url} did not start")
        time.sleep(0.1)


def _percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _writes(urls: list[str], secret: str, stores: list[str], clients: int, seconds: float) -> float:
    done = [0] * clients
    stop = time.monotonic() + seconds

    def client(k: int) -> None:
        rnd = random.Random(k)
        with httpx.Client(headers={**HEADERS, "x-api-key": secret}, timeout=60) as c:
            i = 0
            while time.monotonic() < stop:
                url, store = rnd.choice(urls), rnd.choice(stores)
                r = c.post(
                    f"{url}/v1/memory_stores/{store}/memories",
                    json={"path": f"/b/{k}/{i}.md", "content": f"{k} {i}\n"},
                )
                if r.status_code == 200:
                    done[k] += 1
                i += 1

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done) / (time.monotonic() - start)


def _reads(url: str, secret: str, store: str, memory: str, n: int) -> list[float]:
    out = []
    with httpx.Client(headers={**HEADERS, "x-api-key": secret}, timeout=60) as c:
        for _ in range(n):
            t0 = time.perf_counter()
            r = c.get(f"{url}/v1/memory_stores/{store}/memories/{memory}")
            out.append(time.perf_counter() - t0)
            assert r.status_code == 200, r.text
    return out


def _seed_memory(home_url: str, secret: str, store: str) -> dict[str, Any]:
    """The memory the read rows retrieve, written at the store's home. A busy home can answer a
    transient 409/503 (its lease renewing); retry a few times, then stop naming the answer."""
    last = None
    with httpx.Client(headers={**HEADERS, "x-api-key": secret}, timeout=60) as c:
        for attempt in range(10):
            last = c.post(
                f"{home_url}/v1/memory_stores/{store}/memories",
                json={"path": f"/r{attempt}.md", "content": "r\n"},
            )
            if last.status_code in (200, 201) and "id" in last.json():
                return dict(last.json())
            time.sleep(0.2 * (attempt + 1))
    raise SystemExit(f"seeding the read rows failed: {last.status_code} {last.text[:300]}")


def run(quick: bool, seconds: float, clients: int, n_stores: int) -> dict[str, Any]:
    lease = 2.0 if quick else 10.0
    results: dict[str, Any] = {}
    with running_postgres() as pg, tempfile.TemporaryDirectory(prefix="gitmem-cluster-bench-") as tmp:
        root = Path(tmp)
        for label, n_nodes in (("1 node", 1), ("3 nodes", 3)):
            database = fresh_database(pg, f"bench_{n_nodes}")
            with ClusterState(database) as state:
                state.init()
                _t, secret = ClusterTokenStore(state).create(actor="user:bench", admin=True)
                ports = [free_port() for _ in range(n_nodes)]
                urls = [f"http://127.0.0.1:{p}" for p in ports]
                procs = [
                    _start(root / label / f"n{i}", f"n{i}", ports[i], database, lease) for i in range(n_nodes)
                ]
                try:
                    for u in urls:
                        _wait_up(u, secret)
                    stores = []
                    with httpx.Client(headers={**HEADERS, "x-api-key": secret}, timeout=60) as c:
                        for i in range(n_stores):
                            r = c.post(f"{urls[i % n_nodes]}/v1/memory_stores", json={"name": f"s{i}"})
                            stores.append(r.json()["id"])
                    results[f"writes_per_s, {label}"] = _writes(urls, secret, stores, clients, seconds)
                    if n_nodes == 3:
                        store = stores[0]
                        homed = state.placement(store).home
                        home_url = urls[int(homed[1:])]
                        other_url = next(u for u in urls if u != home_url)
                        m = _seed_memory(home_url, secret, store)
                        n = 30 if quick else 300
                        at_home = _reads(home_url, secret, store, m["id"], n)
                        via = _reads(other_url, secret, store, m["id"], n)
                        results["retrieve_ms, home p50/p99"] = [
                            1000 * _percentile(at_home, 0.5),
                            1000 * _percentile(at_home, 0.99),
                        ]
                        results["retrieve_ms, non-home p50/p99"] = [
                            1000 * _percentile(via, 0.5),
                            1000 * _percentile(via, 0.99),
                        ]
                        # failover: SIGKILL the home, time until a write is acknowledged again
                        time.sleep(lease)  # the replica is level (async) after a beat
                        victim = int(homed[1:])
                        survivor = urls[(victim + 1) % 3]
                        t0 = time.monotonic()
                        os.killpg(procs[victim].pid, signal.SIGKILL)
                        with httpx.Client(headers={**HEADERS, "x-api-key": secret}, timeout=30) as c:
                            i = 0
                            while True:
                                try:
                                    r = c.post(
                                        f"{survivor}/v1/memory_stores/{store}/memories",
                                        json={"path": f"/f/{i}.md", "content": "f\n"},
                                    )
                                    if r.status_code == 200:
                                        break
                                except httpx.HTTPError:
                                    pass
                                i += 1
                                if time.monotonic() - t0 > 300:
                                    raise SystemExit("no failover within 300 s")
                                time.sleep(0.05)
                        results["failover_s"] = time.monotonic() - t0
                finally:
                    for p in procs:
                        if p.poll() is None:
                            os.killpg(p.pid, signal.SIGTERM)
                    for p in procs:
                        try:
                            p.wait(timeout=60)
                        except subprocess.TimeoutExpired:
                            os.killpg(p.pid, signal.SIGKILL)
    results["lease_s"] = lease
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--stores", type=int, default=12)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    if args.quick:
        args.seconds, args.clients, args.stores = 2.0, 2, 3
    res = run(args.quick, args.seconds, args.clients, args.stores)
    w1, w3 = res["writes_per_s, 1 node"], res["writes_per_s, 3 nodes"]
    print("| measurement | result |\n|---|---|")
    print(f"| writes/s, {args.clients} clients over {args.stores} stores, 1 node | {w1:.1f} |")
    print(f"| writes/s, same, 3 nodes (random node per request) | {w3:.1f} ({w3 / w1:.2f}x one node) |")
    h, o = res["retrieve_ms, home p50/p99"], res["retrieve_ms, non-home p50/p99"]
    print(f"| retrieve p50 / p99 through the home | {h[0]:.2f} ms / {h[1]:.2f} ms |")
    print(f"| retrieve p50 / p99 through another node (proxied) | {o[0]:.2f} ms / {o[1]:.2f} ms |")
    print(
        f"| failover: SIGKILL of the home to the next acknowledged write (lease {res['lease_s']:.0f} s) | {res['failover_s']:.1f} s |"
    )
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
