"""The Databricks-shaped entries API: the curl calls of docs/databricks.md run with ``curl`` against
the server, then every error code."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")

from serverkit import running, token  # noqa: E402

import gitmem  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "databricks.md"
pytestmark = pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl (Debian package curl)")


def doc_curls() -> list[str]:
    """Every curl command in the doc's sh blocks (continuation lines joined)."""
    blocks = re.findall(r"```sh\n(.*?)```", DOC.read_text(), re.S)
    commands: list[str] = []
    for block in blocks:
        for cmd in block.replace("\\\n", " ").splitlines():
            if cmd.strip().startswith("curl "):
                commands.append(cmd.strip())
    return commands


def sh(command: str, host: str, secret: str) -> Any:
    env = {**os.environ, "DATABRICKS_HOST": host, "DATABRICKS_TOKEN": secret}
    proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def curl(host: str, secret: str | None, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    args = ["curl", "-sS", "-X", method, "-o", "-", "-w", "\n%{http_code}", host + path]
    if secret:
        args += ["-H", f"Authorization: Bearer {secret}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", "@-"]
    data = None if body is None else body if isinstance(body, str) else json.dumps(body)
    proc = subprocess.run(args, input=data, capture_output=True, text=True, timeout=60)
    out, _, status = proc.stdout.rpartition("\n")
    return int(status), json.loads(out) if out.strip() else None


def test_the_docs_curl_examples(workspace: Path) -> None:
    admin = token(workspace, actor="user:admin", admin=True)
    commands = doc_curls()
    assert len(commands) == 7
    create_store, create_entry, search, get, listing, patch, delete = commands
    with running(workspace) as host:
        made = sh(create_store, host, admin)
        assert (made["full_name"], made["owner"]) == ("main.agents.support_memory", "user:admin")
        entry = sh(create_entry, host, admin)
        assert (entry["path"], entry["contents"], entry["description"]) == (
            "/memories/preferences.md",
            "Prefers email over phone.",
            "Contact preferences",
        )
        found = sh(search, host, admin)
        assert [r["memory_entry"] for r in found["results"]] == [
            {
                "path": "/memories/preferences.md",
                "description": "Contact preferences",
                "contents": "Prefers email over phone.",
            }
        ]
        assert found["results"][0]["score"] > 0
        assert sh(get, host, admin)["contents"] == "Prefers email over phone."
        assert sh(listing, host, admin) == {
            "entries": [
                {
                    "path": "/memories/preferences.md",
                    "description": "Contact preferences",
                    "has_contents": True,
                }
            ]
        }
        patched = sh(patch, host, admin)
        assert (patched["contents"], patched["description"]) == (
            "Prefers chat over phone.",
            "Contact preferences",
        )
        assert sh(delete, host, admin) == {}
    store = gitmem.open_store("main.agents.support_memory", home=workspace)
    versions = store.versions(scope="user-123")
    assert [v.operation for v in versions] == ["deleted", "modified", "created"]
    assert {v.actor for v in versions} == {"user:admin"}


def test_entries_edits_listing_and_stores(workspace: Path) -> None:
    admin = token(workspace, actor="user:admin", admin=True)
    base = "/api/2.1/unity-catalog/memory-stores"
    with running(workspace) as host:
        assert (
            curl(host, admin, "POST", base, {"name": "m", "catalog_name": "Cat", "schema_name": "s"})[0]
            == 200
        )
        s = f"{base}/cat.s.m"
        for i in range(3):
            status, _ = curl(
                host,
                admin,
                "POST",
                f"{s}/entries?scope=u1",
                {"path": f"/memories/n{i}.md", "contents": f"line {i}\n"},
            )
            assert status == 200
        status, page = curl(host, admin, "GET", f"{s}/entries?scope=u1&page_size=2")
        assert [e["path"] for e in page["entries"]] == ["/memories/n0.md", "/memories/n1.md"]
        status, rest = curl(
            host, admin, "GET", f"{s}/entries?scope=u1&page_size=2&page_token={page['next_page_token']}"
        )
        assert [e["path"] for e in rest["entries"]] == ["/memories/n2.md"] and "next_page_token" not in rest
        p = {"scope": "u1", "path": "/memories/n0.md"}
        assert (
            curl(
                host,
                admin,
                "PATCH",
                f"{s}/entries",
                {**p, "insert": {"insert_text": "top", "insert_line": 0}},
            )[1]["contents"]
            == "top\nline 0\n"
        )
        assert (
            curl(host, admin, "PATCH", f"{s}/entries", {**p, "insert": {"insert_text": "end"}})[1]["contents"]
            == "top\nline 0\nend\n"
        )
        got = curl(
            host,
            admin,
            "PATCH",
            f"{s}/entries",
            {**p, "replace_all": {"contents": "new"}, "description": "d"},
        )[1]
        assert (got["contents"], got["description"]) == ("new", "d")
        assert (
            curl(host, admin, "PATCH", f"{s}/entries", {**p, "description": "only the description"})[1][
                "contents"
            ]
            == "new"
        )
        assert curl(host, admin, "GET", f"{s}/entries?scope=u2")[1] == {"entries": []}  # scopes are apart
        status, stores = curl(host, admin, "GET", f"{base}?catalog_name=cat")
        assert [x["full_name"] for x in stores["memory_stores"]] == ["cat.s.m"]
        assert curl(host, admin, "PATCH", s, {"description": "changed"})[1]["description"] == "changed"
        assert curl(host, admin, "GET", s)[1]["description"] == "changed"
        assert curl(host, admin, "DELETE", s) == (200, {})
        assert curl(host, admin, "GET", s)[0] == 404


def test_every_error_code(workspace: Path) -> None:
    admin = token(workspace, actor="user:admin", admin=True)
    base = "/api/2.1/unity-catalog/memory-stores"
    s = f"{base}/main.agents.mem"
    with running(workspace) as host:
        body = {"name": "mem", "catalog_name": "main", "schema_name": "agents"}
        assert curl(host, admin, "POST", base, body)[0] == 200
        # grants name the store that exists (by its unique full name here): they hold its id
        reader = token(workspace, actor="user:r", stores={"main.agents.mem": "ro"})
        scoped = token(workspace, actor="user:c", stores={"main.agents.mem": "rw"}, scope="carol")
        entry = {"path": "/memories/a.md", "contents": "one two one"}
        assert curl(host, admin, "POST", f"{s}/entries?scope=u", entry)[0] == 200
        before = gitmem.open_store("main.agents.mem", home=workspace).versions()

        def expect(status: int, code: str, *args: Any) -> None:
            got_status, got = curl(host, *args)
            assert (got_status, got["error_code"]) == (status, code), got
            assert isinstance(got["message"], str) and got["message"]

        expect(401, "UNAUTHENTICATED", None, "GET", s)
        expect(401, "UNAUTHENTICATED", "gitmem_nope", "GET", s)
        expect(409, "ALREADY_EXISTS", admin, "POST", base, body)
        expect(409, "ALREADY_EXISTS", admin, "POST", f"{s}/entries?scope=u", entry)
        expect(404, "NOT_FOUND", admin, "GET", f"{base}/main.agents.nothere")
        expect(404, "NOT_FOUND", reader, "GET", f"{base}/main.agents.other")
        expect(404, "NOT_FOUND", admin, "GET", f"{s}/entries:get?scope=u&path=/memories/zz.md")
        expect(404, "NOT_FOUND", admin, "DELETE", f"{s}/entries?scope=u&path=/memories/zz.md")
        expect(400, "INVALID_PARAMETER_VALUE", admin, "GET", f"{s}/entries:get?path=/memories/a.md")
        expect(400, "INVALID_PARAMETER_VALUE", admin, "POST", f"{s}/entries?scope=u", "{not json")
        expect(
            400,
            "INVALID_PARAMETER_VALUE",
            admin,
            "POST",
            f"{s}/entries?scope=u",
            {"path": "/../x", "contents": "x"},
        )
        expect(
            400, "INVALID_PARAMETER_VALUE", admin, "POST", f"{s}/entries?scope=u", {"path": "/memories/b.md"}
        )
        expect(
            400,
            "INVALID_PARAMETER_VALUE",
            admin,
            "POST",
            base,
            {"name": "a.b", "catalog_name": "c", "schema_name": "s"},
        )
        p = {"scope": "u", "path": "/memories/a.md"}
        both = {**p, "str_replace": {"old_str": "two", "new_str": "2"}, "replace_all": {"contents": "x"}}
        expect(400, "INVALID_PARAMETER_VALUE", admin, "PATCH", f"{s}/entries", both)
        expect(
            400,
            "INVALID_PARAMETER_VALUE",
            admin,
            "PATCH",
            f"{s}/entries",
            {**p, "str_replace": {"old_str": "one", "new_str": "1"}},
        )
        expect(
            400,
            "INVALID_PARAMETER_VALUE",
            admin,
            "PATCH",
            f"{s}/entries",
            {**p, "str_replace": {"old_str": "zz", "new_str": "1"}},
        )
        expect(400, "INVALID_PARAMETER_VALUE", admin, "PATCH", f"{s}/entries", p)
        expect(
            400,
            "INVALID_PARAMETER_VALUE",
            admin,
            "POST",
            f"{s}/entries:search?scope=u",
            {"query": "x", "top_k": 51},
        )
        expect(400, "INVALID_PARAMETER_VALUE", admin, "GET", f"{s}/entries?scope=u&page_token=page_bogus")
        expect(
            400,
            "INVALID_PARAMETER_VALUE",
            admin,
            "POST",
            f"{s}/entries?scope=u",
            {"path": "/memories/big.md", "contents": "x" * 200_000},
        )
        expect(
            413,
            "INVALID_PARAMETER_VALUE",
            admin,
            "POST",
            f"{s}/entries?scope=u",
            {"path": "/memories/b.md", "contents": "x" * (2 << 20)},
        )
        expect(
            403,
            "PERMISSION_DENIED",
            reader,
            "POST",
            f"{s}/entries?scope=u",
            {"path": "/memories/r.md", "contents": "x"},
        )
        expect(
            403,
            "PERMISSION_DENIED",
            reader,
            "POST",
            base,
            {"name": "x", "catalog_name": "c", "schema_name": "s"},
        )
        expect(403, "PERMISSION_DENIED", reader, "DELETE", s)
        expect(403, "PERMISSION_DENIED", scoped, "GET", f"{s}/entries?scope=u")
        assert curl(host, reader, "GET", f"{s}/entries:get?scope=u&path=/memories/a.md")[0] == 200
        assert gitmem.open_store("main.agents.mem", home=workspace).versions() == before  # nothing written
