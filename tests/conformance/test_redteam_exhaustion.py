"""Resource exhaustion per token (issue 25's adversarial review, docs/access.md "one body policy
per face"): /mcp and the console read its body whole within the server's body deadline (408 after it), like the
Anthropic and Databricks APIs, so that a token sending a body slowly or never cannot hold
connections open for ever. The test failed before its fix (the MCP session manager waited)."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

from serverkit import running, token

import gitmem

DEADLINE = 1.0  # the server's body deadline here; the client waits far longer (a ratio, no limit)


def _slow(
    url: str,
    path: str,
    secret: str,
    extra: str = "",
    body: bytes | None = None,
    kind: str = "application/json",
) -> tuple[int, float]:
    """Headers and a tenth of the body, then nothing: the status line and when it came."""
    if body is None:
        body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {}}).encode()
    host, port = url.removeprefix("http://").split(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=40 * DEADLINE) as s:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {secret}\r\n{extra}"
            f"Content-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        s.sendall(head.encode() + body[: len(body) // 10])
        reply = s.recv(65536).decode("latin-1")
    return int(reply.split()[1]), time.monotonic() - started


def test_a_slow_mcp_body_is_cut_off_at_the_body_deadline_as_on_the_apis(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        sid = s.settings.id
    secret = token(workspace, actor="user:slow", stores={"notes": "rw"})
    accept = "Accept: application/json, text/event-stream\r\n"
    with running(workspace, body_timeout=DEADLINE) as url:
        api_status, api_took = _slow(url, f"/v1/memory_stores/{sid}/memories", secret)
        mcp_status, mcp_took = _slow(url, "/mcp", secret, accept)
    assert api_status == 408
    assert mcp_status == 408
    assert mcp_took < 10 * max(api_took, DEADLINE)  # the same deadline, not another face's own


def test_a_slow_console_form_is_cut_off_at_the_body_deadline(workspace: Path) -> None:
    """The sign-in form is posted before any token is known: without a deadline anyone could hold
    the server's connections with half-sent forms."""
    gitmem.create_store("notes", home=workspace).close()
    form = b"csrf=abc&token=" + b"x" * 200
    kind = "application/x-www-form-urlencoded"
    with running(workspace, body_timeout=DEADLINE) as url:
        status, took = _slow(url, "/console/login", "none", body=form, kind=kind)
    assert status == 408 and took < 30 * DEADLINE
