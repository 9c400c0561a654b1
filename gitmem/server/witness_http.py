"""``gitmem witness serve``: a tlog-witness over HTTP (stdlib ``http.server``; no extra needed).

``POST /add-checkpoint`` and ``GET /<sha256(origin) hex>/checkpoint``; the logic is
:class:`gitmem.store.Witness`, this module only moves bytes (docs/transparency.md#witnesses). The
background witness loop of ``gitmem serve`` is :func:`gitmem.store.start_witness_worker`.
"""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from gitmem.store import WITNESS_MAX_BODY as MAX_BODY
from gitmem.store import Witness
from gitmem.store import WitnessReply as Reply


def make_server(witness: Witness, host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A threaded HTTP server for ``witness`` (``server_address`` tells the port chosen)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the spec recommends
        wbufsize = -1  # a buffered writer: the status line, headers and body leave in one write
        disable_nagle_algorithm = True  # (two writes wait for the client's delayed ACK)

        def _send(self, reply: Reply) -> None:
            data = reply.body.encode("utf-8")
            self.send_response(reply.status)
            self.send_header("Content-Type", reply.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()  # one send of the whole response

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
