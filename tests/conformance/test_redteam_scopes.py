"""Cross-scope reveal (issue 25's adversarial review, docs/access.md "access"): a scope-confined
token that guesses or learns a version id of another scope gets exactly the answer an unknown id
gets, on every face that reads by version id. Each test failed before its fix."""

from __future__ import annotations

import json
from pathlib import Path

import httpx2 as httpx
from serverkit import running, token

import gitmem

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream"}
UNKNOWN = "memver_01ZZZZZZZZZZZZZZZZZZZZZZZZ"


def _tool(http: httpx.Client, h: dict[str, str], args: dict[str, str]) -> str:
    call = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "read_memory", "arguments": args},
    }
    r = http.post("/mcp", headers=h, json=call)
    assert r.status_code == 200, r.text
    body = r.text.split("data: ", 1)[-1] if "data:" in r.text else r.text
    return str(json.loads(body)["result"]["content"][0]["text"])


def test_another_scopes_version_id_reads_as_an_unknown_one_over_mcp(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/shared.md", "in both\n", actor="user:seed")
        main_only = s.write("/shared.md", "main only\n", actor="user:seed")
        s.write("/shared.md", "in both\n", scope="team", actor="user:seed")
        assert main_only is not None
    scoped = token(workspace, actor="user:scoped", stores={"notes": "rw"}, scope="team")
    with running(workspace) as url, httpx.Client(base_url=url, timeout=30) as http:
        h = {"authorization": f"Bearer {scoped}", **ACCEPT}
        r = http.post("/mcp", headers=h, json=INIT)
        assert r.status_code == 200, r.text
        if r.headers.get("mcp-session-id"):
            h["mcp-session-id"] = r.headers["mcp-session-id"]
        http.post("/mcp", headers=h, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        other = _tool(http, h, {"store": "notes", "path": "/shared.md", "version": main_only.id})
        unknown = _tool(http, h, {"store": "notes", "path": "/shared.md", "version": UNKNOWN})
        assert "main only" not in other
        assert other.replace(main_only.id, UNKNOWN) == unknown
