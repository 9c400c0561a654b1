"""Console page timings against the equivalent JSON API call, on one real ``gitmem serve``.

- the store page of a store with N memories (``/console/stores/S``: the depth-1 tree with roll-ups
  and counts) vs ``GET /v1/memory_stores/{id}/memories?depth=1`` (its first page);
- the memory page of a memory with N versions (its history, first page) vs
  ``GET .../memory_versions?memory_id=...`` (its first page).

Target: each page under 2x its API call (medians, interleaved). ``--quick``: small sizes, a few
seconds (the smoke test runs it); the default is 10k memories and 10k versions.

    .venv/bin/python bench/console_bench.py --quick [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import re
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2 as httpx
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gitmem  # noqa: E402
from gitmem.config import Limits  # noqa: E402
from gitmem.engine.batch import BatchOp, apply_batch  # noqa: E402
from gitmem.server.app import create_app  # noqa: E402
from gitmem.server.tokens import TokenStore  # noqa: E402

TARGET = 2.0


def build(home: Path, memories: int, versions: int) -> tuple[str, str]:
    """A store with ``memories`` memories (25 a directory) and one memory with ``versions`` versions."""
    limits = Limits(max_memories=10_000_000, max_store_bytes=1 << 40)
    with gitmem.create_store("big", limits=limits, home=home) as s:
        ops = [BatchOp("write", f"/d{i // 25:04d}/m{i:05d}.md", f"memory {i}\n") for i in range(memories)]
        apply_batch(s.core, ops, actor="service:bench")
        hot = [BatchOp("write", "/hot.md", f"version {k}\n") for k in range(versions)]
        for start in range(0, len(hot), 1000):
            apply_batch(s.core, hot[start : start + 1000], actor="service:bench")
        return s.settings.id, s.read("/hot.md").memory_id


@contextmanager
def serving(home: Path) -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(create_app(home), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the bench server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def signed_in(url: str, secret: str) -> httpx.Client:
    client = httpx.Client(base_url=url, timeout=120)
    page = client.get("/console/login")
    m = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert m is not None
    reply = client.post("/console/login", data={"csrf": m.group(1), "token": secret})
    assert reply.status_code in (200, 303), reply.status_code
    return client


def interleaved(a: Callable[[], object], b: Callable[[], object], rounds: int) -> tuple[float, float]:
    ta: list[float] = []
    tb: list[float] = []
    for _ in range(rounds):
        for fn, out in ((a, ta), (b, tb)):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return statistics.median(ta), statistics.median(tb)


def ok(reply: httpx.Response) -> None:
    if reply.status_code != 200:
        raise RuntimeError(f"{reply.request.url}: {reply.status_code} {reply.text[:200]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a few seconds)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    memories, versions, rounds = (300, 300, 5) if args.quick else (10_000, 10_000, 15)
    results = []
    with tempfile.TemporaryDirectory(prefix="gitmem-console-bench-") as tmp:
        home = Path(tmp) / "ws"
        store_id, memory_id = build(home, memories, versions)
        secret = TokenStore(home).create(actor="user:bench", admin=True)[1]
        with (
            serving(home) as url,
            httpx.Client(base_url=url, timeout=120, headers={"authorization": f"Bearer {secret}"}) as api,
        ):
            console = signed_in(url, secret)
            cases = [
                (
                    f"store page, {memories} memories",
                    lambda: ok(console.get("/console/stores/big")),
                    lambda: ok(
                        api.get(f"/v1/memory_stores/{store_id}/memories", params={"depth": 1, "limit": 100})
                    ),
                ),
                (
                    f"history page, {versions} versions",
                    lambda: ok(
                        console.get("/console/stores/big/memory", params={"scope": "main", "id": memory_id})
                    ),
                    lambda: ok(
                        api.get(
                            f"/v1/memory_stores/{store_id}/memory_versions",
                            params={"memory_id": memory_id, "limit": 100},
                        )
                    ),
                ),
            ]
            for name, page, call in cases:
                page(), call()  # warm the pool, the index and the templates
                t_page, t_api = interleaved(page, call, rounds)
                ratio = t_page / t_api
                results.append(
                    {"case": name, "page_s": t_page, "api_s": t_api, "ratio": ratio, "target": TARGET}
                )
            console.close()
    print(f"{'case':<34} {'page':>10} {'JSON API':>10} {'ratio':>7}  target")
    for r in results:
        verdict = "ok" if r["ratio"] < TARGET else "MISSED"
        print(
            f"{r['case']:<34} {r['page_s'] * 1000:>8.1f}ms {r['api_s'] * 1000:>8.1f}ms {r['ratio']:>6.2f}x  < {TARGET}x {verdict}"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
