"""A real ``gitmem serve`` app on uvicorn, in a thread on 127.0.0.1 and a free port, for the tests."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
import uvicorn

from gitmem.server.app import create_app
from gitmem.server.tokens import TokenStore
from tests.helpers import patience


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def running(home: Path, **app_kw: object) -> Iterator[str]:
    """Serve ``home``; yields the base URL; stops the server (gracefully) on exit."""
    port = free_port()
    config = uvicorn.Config(
        create_app(home, **app_kw),  # type: ignore[arg-type]
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=10,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = patience(20)
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=20)


def token(home: Path, **kw: object) -> str:
    return TokenStore(home).create(**kw)[1]  # type: ignore[arg-type]


def client(url: str, secret: str, **kw: object) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key=secret, **kw)  # type: ignore[arg-type]
