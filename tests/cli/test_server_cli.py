"""`gitmem token ...` and a real `gitmem serve` subprocess (started, used by the SDK, stopped by SIGTERM)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx2 as httpx
from serverkit import client, free_port
from typer.testing import CliRunner

import gitmem
from gitmem.cli.app import app
from tests.helpers import patience

runner = CliRunner()


def test_token_create_list_revoke(workspace: Path) -> None:
    missing = runner.invoke(app, ["token", "create", "--store", "notes:ro"])
    assert missing.exit_code == 3  # a grant names a store that exists: it holds that store's id
    with gitmem.create_store("notes", home=workspace) as store:
        sid = store.id
    made = runner.invoke(
        app, ["token", "create", "--actor", "user:alice", "--store", "notes:ro", "--expires", "30d", "--json"]
    )
    assert made.exit_code == 0, made.output
    data = json.loads(made.stdout)
    assert data["secret"].startswith("gitmem_") and data["token"]["stores"] == {sid: "ro"}
    listed = runner.invoke(app, ["token", "list", "--json"])
    assert data["secret"] not in listed.stdout and data["token"]["id"] in listed.stdout
    assert runner.invoke(app, ["token", "revoke", data["token"]["id"]]).exit_code == 0
    assert json.loads(runner.invoke(app, ["token", "list", "--json"]).stdout) == []
    bad = runner.invoke(app, ["token", "create", "--store", "notes:rx"])
    assert bad.exit_code == 2 and "STORE:ro" in bad.output


def test_gitmem_serve_subprocess(workspace: Path) -> None:
    gitmem.create_store("notes", home=workspace).close()
    secret = json.loads(runner.invoke(app, ["token", "create", "--admin", "--json"]).stdout)["secret"]
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitmem", "serve", "--home", str(workspace), "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = patience(30)
        while True:
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()  # a server still starting is stopped first: communicate() would wait on it
                raise AssertionError(proc.communicate(timeout=60))
            time.sleep(0.1)
        c = client(url, secret)
        sid = c.beta.memory_stores.list().data[0].id
        assert c.beta.memory_stores.memories.create(sid, path="/x.md", content="x").path == "/x.md"
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    # uvicorn re-raises the signal once it has shut down cleanly
    assert proc.returncode in (0, -signal.SIGTERM) and "Application shutdown complete" in err, err
    access = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(
        a["status"] == 200 and a["route"] == "/v1/memory_stores/{memory_store_id}/memories" for a in access
    )
    assert all(a["request_id"].startswith("req_") for a in access)
