"""``gitmem serve`` asks the workspace's witnesses in the background (docs/transparency.md#witnesses):
a redaction through the API is acknowledged while a witness hangs, the cosignatures of the others
arrive after it, and the receipt (GET .../memory_versions/ID/receipt) turns complete."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import gitmem
from gitmem.audit import redaction_receipts as rr
from gitmem.audit import transparency
from gitmem.model.tlog.checkpoint import Cosigner
from tests.helpers import patience
from tests.serverkit import client, running, token


def _witness(d: Path, name: str, log: str) -> tuple[subprocess.Popen[str], str, str]:
    args = [
        sys.executable,
        "-m",
        "gitmem",
        "witness",
        "serve",
        "--dir",
        str(d),
        "--name",
        name,
        "--port",
        "0",
        "--log",
        log,
    ]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert p.stdout is not None
    words = p.stdout.readline().split()
    return p, words[1], words[-1]


class Hanging:
    """A 'witness' that accepts connections and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.accepted = 0
        self.held: list[socket.socket] = []
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            self.held.append(conn)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def served(workspace: Path, tmp_path: Path) -> Iterator[dict[str, object]]:
    s = gitmem.create_store("notes", home=workspace)
    vkey = transparency.log_vkey(s.core)
    s.close()
    procs = [_witness(tmp_path / f"w{i}", f"witness.test/w{i}", vkey) for i in (1, 2)]
    hang = Hanging()
    silent = Cosigner("witness.test/w3", bytes(32)).verifier().vkey()
    policy = "\n".join(
        [
            f"log {vkey}",
            f"witness w3 {silent} {hang.url}",  # first: a slow witness must not hold back the others
            *(f"witness w{i} {v} {u}" for i, (_, v, u) in enumerate(procs, 1)),
            "group two 2 w1 w2 w3",
            "quorum two",
            "",
        ]
    )
    (workspace / "witnesses.policy").write_text(policy)
    admin = token(workspace, admin=True, actor="user:admin")
    with running(workspace) as url:
        try:
            yield {"url": url, "admin": admin, "hang": hang, "home": workspace}
        finally:
            # before the server stops: its witness worker's request to the hanging witness ends
            # now, not at the request's timeout (10 s of every teardown)
            hang.close()
    for p, _, _ in procs:
        p.terminate()
        p.wait(timeout=30)


def test_redaction_is_acknowledged_while_a_witness_hangs_and_its_receipt_completes(
    served: dict[str, object],
) -> None:
    c = client(str(served["url"]), str(served["admin"]))
    sid = next(s.id for s in c.beta.memory_stores.list() if s.name == "notes")
    m = c.beta.memory_stores.memories.create(sid, path="/k.md", content="api key sk-live-123")
    c.beta.memory_stores.memories.update(m.id, memory_store_id=sid, content="rotated")
    r = c.beta.memory_stores.memory_versions.redact(m.memory_version_id, memory_store_id=sid)
    assert r.redacted_at is not None  # acknowledged
    hang = served["hang"]
    assert isinstance(hang, Hanging)
    c.beta.memory_stores.memories.create(sid, path="/after.md", content="an ordinary write")  # not held
    deadline = patience(120)
    while True:
        req = urllib.request.Request(
            f"{served['url']}/v1/memory_stores/{sid}/memory_versions/{m.memory_version_id}/receipt",
            headers={"x-api-key": str(served["admin"]), "anthropic-version": "2023-06-01"},
        )
        with urllib.request.urlopen(req) as resp:
            got = json.loads(resp.read())
        if got["status"] == "complete" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert got["status"] == "complete" and got["cosigned_by"] == ["w1", "w2"], got
    assert hang.accepted >= 1  # it was asked, and never answered
    policy = rr.load_policy(Path(str(served["home"])) / "witnesses.policy")
    assert rr.verify_receipt(got["receipt"], policy).entry["kind"] == "redaction"


def test_the_receipt_route_needs_read_access_and_a_redacted_version(workspace: Path) -> None:
    import anthropic

    gitmem.create_store("notes", home=workspace).close()
    gitmem.create_store("other", home=workspace).close()
    admin = token(workspace, admin=True, actor="user:admin")
    with running(workspace) as url:
        c = client(url, admin)
        sid = next(s.id for s in c.beta.memory_stores.list() if s.name == "notes")
        m = c.beta.memory_stores.memories.create(sid, path="/k.md", content="pin 4242")
        c.beta.memory_stores.memories.update(m.id, memory_store_id=sid, content="none")
        c.beta.memory_stores.memory_versions.redact(m.memory_version_id, memory_store_id=sid)
        path = f"/v1/memory_stores/{sid}/memory_versions/{{}}/receipt"

        def get(secret: str, version: str) -> tuple[int, dict[str, object]]:
            req = urllib.request.Request(
                url + path.format(version), headers={"x-api-key": secret, "anthropic-version": "2023-06-01"}
            )
            try:
                with urllib.request.urlopen(req) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as exc:
                return exc.code, json.loads(exc.read())

        ro = token(workspace, stores={"notes": "ro"})
        status, body = get(ro, m.memory_version_id)
        assert status == 200 and body["status"] == "pending" and str(body["receipt"]).startswith("c2sp.org/")
        assert get(token(workspace, stores={"other": "rw"}), m.memory_version_id)[0] in (403, 404)
        head = c.beta.memory_stores.memories.retrieve(m.id, memory_store_id=sid)
        assert get(ro, head.memory_version_id)[0] == 404  # not redacted: no receipt
        assert isinstance(c, anthropic.Anthropic)
