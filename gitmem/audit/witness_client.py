"""A lean HTTP/1.1 POST over a kept plain-TCP connection, for witness rounds (docs/transparency.md).

``http.client`` parses every response's headers with the ``email`` package, which costs a witness
round more CPU than its signature check; a tlog-witness answer needs only the status, the body's
length (``Content-Length`` or chunked) and whether the connection stays open. HTTPS keeps
``http.client`` (:func:`gitmem.audit.witnessing.submit`).
"""

from __future__ import annotations

import http.client
import socket
import struct

MAX_RESPONSE = 65536


class Conn:
    """One kept connection to ``host:port`` (used by one round at a time)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = b""
        self._timeout: float | None = None
        self._set_timeout(timeout)

    def _set_timeout(self, timeout: float) -> None:
        """A blocking socket whose sends and receives time out in the kernel (SO_SNDTIMEO and
        SO_RCVTIMEO: a timed-out one raises OSError): Python's own timeout costs a poll() before
        every send and receive, and two fcntl() calls to set it."""
        if timeout == self._timeout:
            return
        self.sock.settimeout(None)
        secs = max(timeout, 0.001)
        tv = struct.pack("ll", int(secs), int((secs - int(secs)) * 1_000_000))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self._timeout = timeout

    def close(self) -> None:
        self.sock.close()

    def _more(self) -> None:
        chunk = self.sock.recv(MAX_RESPONSE)
        if not chunk:
            raise ConnectionResetError("the witness closed the connection")
        self._buf += chunk
        if len(self._buf) > 2 * MAX_RESPONSE:
            raise http.client.HTTPException("the witness's response is too large")

    def _line(self) -> bytes:
        while b"\r\n" not in self._buf:
            self._more()
        line, _, self._buf = self._buf.partition(b"\r\n")
        return line

    def _exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            self._more()
        out, self._buf = self._buf[:n], self._buf[n:]
        return out

    def post(self, path: str, body: bytes, timeout: float) -> tuple[int, str, bool]:
        """``(status, body text, whether the connection may be kept)``; OSError or HTTPException
        when the exchange fails (the caller closes the connection)."""
        self._set_timeout(timeout)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: text/plain\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.sock.sendall(head.encode("ascii") + body)
        self._buf = b""
        status_line = self._line().decode("latin-1")
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise http.client.BadStatusLine(status_line[:80])
        version, status = parts[0], int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = self._line()
            if not line:
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep:
                raise http.client.HTTPException(f"malformed header line {line[:60]!r}")
            headers[name.strip().lower()] = value.strip()
        keep = version == "HTTP/1.1" and headers.get("connection", "").lower() != "close"
        if "chunked" in headers.get("transfer-encoding", "").lower():
            data = self._chunked()
        elif "content-length" in headers:
            length = headers["content-length"]
            if not length.isdigit() or int(length) > MAX_RESPONSE:
                raise http.client.HTTPException(f"bad Content-Length {length[:20]!r}")
            data = self._exactly(int(length))
        else:  # the body runs to the end of the connection
            keep = False
            try:
                while len(self._buf) <= MAX_RESPONSE:
                    self._more()
            except ConnectionResetError:
                pass
            data = self._buf
        if self._buf:  # bytes past the response: the connection is out of step
            keep = False
        return status, data[:MAX_RESPONSE].decode("utf-8", "replace"), keep

    def _chunked(self) -> bytes:
        out = b""
        while True:
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise http.client.HTTPException(f"bad chunk size {size_text[:20]!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the blank line
                    pass
                return out
            if len(out) + size > MAX_RESPONSE:
                raise http.client.HTTPException("the witness's response is too large")
            out += self._exactly(size)
            if self._exactly(2) != b"\r\n":
                raise http.client.HTTPException("malformed chunk")
