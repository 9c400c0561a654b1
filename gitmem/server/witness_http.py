"""``gitmem witness serve``: a tlog-witness over HTTP (stdlib ``http.server``; no extra needed).

``POST /add-checkpoint`` and ``GET /<sha256(origin) hex>/checkpoint``; the logic is
:class:`gitmem.audit.witness.Witness`, this module only moves bytes (docs/transparency.md#witnesses).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem.audit.redaction_receipts import POLICY_FILE, load_policy
from gitmem.audit.witness import MAX_BODY, Reply, Witness
from gitmem.audit.witnessing import Worker
from gitmem.errors import GitmemError
from gitmem.model.tlog.policy import Policy
from gitmem.store import open_store

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore


def make_server(witness: Witness, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A threaded HTTP server for ``witness`` (``server_address`` tells the port chosen)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the spec recommends

        def _send(self, reply: Reply) -> None:
            data = reply.body.encode("utf-8")
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            if self.path.rstrip("/") != "/add-checkpoint":
                self._send(Reply(404, "no such endpoint\n"))
                return
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self._send(Reply(411, "Content-Length required\n"))
                return
            if not 0 <= length <= MAX_BODY:
                self.close_connection = True
                self._send(Reply(413, "request too large\n"))
                return
            self._send(witness.add_checkpoint(self.rfile.read(length)))

        def do_GET(self) -> None:  # noqa: N802
            parts = self.path.strip("/").split("/")
            if len(parts) == 2 and parts[1] == "checkpoint":
                self._send(witness.latest(parts[0]))
            else:
                self._send(Reply(404, "no such endpoint\n"))

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet
            return

    return ThreadingHTTPServer((host, port), Handler)


def start_worker(home: Path, interval: float = 2.0) -> Worker | None:
    """The background witness loop of ``gitmem serve`` when ``<home>/witnesses.policy`` exists:
    it is woken by each append of this process and scans every store each ``interval`` seconds
    (appends by pushes and other processes; retries)."""
    path = home / POLICY_FILE
    if not path.is_file():
        return None

    @contextlib.contextmanager
    def open_core(store_path: Path) -> Iterator[StoreCore]:
        with open_store(store_path) as s:
            yield s.core

    def stores() -> list[Path]:
        return sorted(p for p in (home / "stores").glob("*.git") if p.is_dir())

    def policy() -> Policy | None:
        try:
            return load_policy(path)
        except GitmemError:
            return None

    worker = Worker(open_core, stores, policy, interval=interval)
    worker.start()
    return worker
