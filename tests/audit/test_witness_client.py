"""The lean witness HTTP client (gitmem.audit.witness_client) reads what an HTTP/1.1 server may send:
a Content-Length body on a kept connection, a chunked body, a body up to the close, and refuses a
malformed status line; submit() retries once on a kept connection the server closed."""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator

import pytest

from gitmem.audit import witness_client, witnessing


@pytest.fixture
def server() -> Iterator[tuple[int, list[bytes], list[bytes]]]:
    """A socket server answering each request with the next canned response; a response of b""
    closes the connection without answering."""
    answers: list[bytes] = []
    requests: list[bytes] = []
    lsock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = lsock.accept()
            except OSError:
                return
            with conn:
                buf = b""
                while answers:
                    while b"\r\n\r\n" not in buf:
                        data = conn.recv(65536)
                        if not data:
                            break
                        buf += data
                    if b"\r\n\r\n" not in buf:
                        break
                    head, _, rest = buf.partition(b"\r\n\r\n")
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    while len(rest) < length:
                        rest += conn.recv(65536)
                    requests.append(head + b"\r\n\r\n" + rest[:length])
                    buf = rest[length:]
                    answer = answers.pop(0)
                    if not answer:
                        break
                    conn.sendall(answer)
                    if (
                        b"Connection: close" in answer
                        or b"Content-Length" not in answer
                        and b"chunked" not in answer
                    ):
                        break

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield lsock.getsockname()[1], answers, requests
    stop.set()
    lsock.close()


def test_content_length_chunked_and_to_the_close(server: tuple[int, list[bytes], list[bytes]]) -> None:
    port, answers, requests = server
    answers += [
        b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 6\r\n\r\n\xe2\x80\x94 a\n",
        b"HTTP/1.1 409 Conflict\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n12\r\n1;x=y\r\n\n\r\n0\r\n\r\n",
        b"HTTP/1.0 404 Not Found\r\n\r\nno such log\n",
    ]
    conn = witness_client.Conn("127.0.0.1", port, 5.0)
    assert conn.post("/add-checkpoint", b"old 0\n\nbody\n", 5.0) == (200, "\u2014 a\n", True)
    assert conn.post("/add-checkpoint", b"x", 5.0) == (409, "12\n", True)
    assert conn.post("/add-checkpoint", b"y", 5.0) == (404, "no such log\n", False)
    conn.close()
    assert requests[0].startswith(b"POST /add-checkpoint HTTP/1.1\r\n")
    assert requests[0].endswith(b"Content-Length: 12\r\n\r\nold 0\n\nbody\n")


def test_a_malformed_status_line_is_refused(server: tuple[int, list[bytes], list[bytes]]) -> None:
    port, answers, _ = server
    answers.append(b"SMTP ready\r\n\r\n")
    conn = witness_client.Conn("127.0.0.1", port, 5.0)
    with pytest.raises(http.client.HTTPException):
        conn.post("/add-checkpoint", b"x", 5.0)
    conn.close()


def test_submit_retries_once_on_a_kept_connection_the_server_closed(
    server: tuple[int, list[bytes], list[bytes]],
) -> None:
    port, answers, requests = server
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
    answers += [ok, b"", ok]  # the second request finds its kept connection closed
    url = f"http://127.0.0.1:{port}"
    assert witnessing.submit(url, 0, [], "note\n") == (200, "ok\n")
    assert witnessing.submit(url, 0, [], "note\n") == (200, "ok\n")
    assert len(requests) == 3
    assert not answers


def test_a_witness_that_never_answers_times_out() -> None:
    """The kernel's receive timeout (SO_RCVTIMEO) ends a wait on a silent witness with an OSError,
    as Python's own socket timeout did."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        port = srv.getsockname()[1]
        conn = witness_client.Conn("127.0.0.1", port, 0.2)
        try:
            peer, _ = srv.accept()  # accepted, read from never, never answered
            with peer, pytest.raises(OSError):
                conn.post("/add-checkpoint", b"old 0\n\n", 0.2)
        finally:
            conn.close()
