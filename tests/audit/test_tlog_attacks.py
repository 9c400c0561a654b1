"""Adversarial inputs to the transparency log (docs/transparency.md): forged and garbled witness
answers are not stored, racing submissions never roll a witness back, a witness killed with SIGKILL
keeps what it cosigned, bad receipts and policies are refused with the right exit codes, and a
pattern redaction's receipt holds neither the pattern nor the erased ids."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gitmem.audit import redact, transparency
from gitmem.audit import redaction_receipts as rr
from gitmem.audit.witness import Witness
from gitmem.audit.witnessing import cosign_round, submit
from gitmem.cli.app import app
from gitmem.engine import checkpoints, ledger
from gitmem.errors import InvalidInputError
from gitmem.model.tlog import note, proof
from gitmem.model.tlog import policy as policy_mod
from gitmem.model.tlog.checkpoint import Cosigner
from gitmem.server.witness_http import make_server
from gitmem.store import Store

runner = CliRunner()


@pytest.fixture
def liar() -> Iterator[dict[str, object]]:
    """An HTTP 'witness' whose answer the test sets."""
    state: dict[str, object] = {"answer": (200, "")}

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            status, body = state["answer"]  # type: ignore[misc]
            data = str(body).encode()
            self.send_response(int(status))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    state["url"] = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()


def test_forged_and_garbled_cosignatures_are_not_stored(store: Store, liar: dict[str, object]) -> None:
    real = Cosigner("witness.test/w1", os.urandom(32))
    forger = Cosigner("witness.test/w1", os.urandom(32))
    policy = policy_mod.parse(
        f"log {transparency.log_vkey(store.core)}\nwitness w1 {real.verifier().vkey()} {liar['url']}\nquorum w1\n"
    )
    body = transparency.newest(store.core).cp.body()
    bad = forger.cosign(body, 1700000000)
    liar["answer"] = (
        200,
        note.Signature(real.name, real.key_id, bad.sig).line(),
    )  # the real key's id, not its signature
    assert cosign_round(store.core, policy)["w1"].startswith("bad cosignature")
    liar["answer"] = (200, "\u2014 witness.test/w1 !!!not base64!!!\n")
    assert cosign_round(store.core, policy)["w1"].startswith("bad cosignature")
    liar["answer"] = (200, forger.cosign(body, 1700000000).line())  # another key: not its cosignature
    assert cosign_round(store.core, policy)["w1"] == "answered without a cosignature from its key"
    liar["answer"] = (409, "999999\n")  # a witness claiming a size the log never had
    assert cosign_round(store.core, policy)["w1"].startswith("refused (409)")
    assert len(note.parse(transparency.newest(store.core).text).sigs) == 1  # nothing was stored


def test_racing_submissions_never_roll_a_witness_back(store: Store, tmp_path: Path) -> None:
    w = Witness(tmp_path / "w", "witness.test/race")
    w.add_log(transparency.log_vkey(store.core))
    notes = []
    for i in range(6):
        ledger.append(store.core, "flag", {"n": i})
        notes.append(transparency.newest(store.core).text)
    answers: list[int] = []
    threads = [
        threading.Thread(target=lambda n=n: answers.append(w.add_checkpoint(f"old 0\n\n{n}".encode()).status))
        for n in notes
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(answers) == [200, 409, 409, 409, 409, 409]
    won = next(
        n
        for n in notes
        if note.parse(n).text == note.parse(str(w.state()[checkpoints.origin(store.core)]["note"])).text
    )
    assert won in notes


def test_a_witness_killed_keeps_what_it_cosigned(store: Store, tmp_path: Path) -> None:
    d = tmp_path / "w"
    args = [
        sys.executable,
        "-m",
        "gitmem",
        "witness",
        "serve",
        "--dir",
        str(d),
        "--name",
        "witness.test/k",
        "--port",
        "0",
    ]
    p = subprocess.Popen(
        [*args, "--log", transparency.log_vkey(store.core)], stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    url = p.stdout.readline().split()[-1]
    signed = transparency.newest(store.core).text
    assert submit(url, 0, [], signed)[0] == 200
    p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)
    again = Witness(d)  # a fresh process would read the same state
    assert again.add_checkpoint(f"old 0\n\n{signed}".encode()).status == 409


def test_the_witness_http_face_refuses_what_it_cannot_read(store: Store, tmp_path: Path) -> None:
    import http.client

    server = make_server(Witness(tmp_path / "w", "witness.test/h"))
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    port = server.server_address[1]
    try:
        for headers, status in (({"Content-Length": str(10**7)}, 413), ({"Content-Length": "x"}, 411)):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.putrequest("POST", "/add-checkpoint")
            for k, v in headers.items():
                conn.putheader(k, v)
            conn.endheaders()
            assert conn.getresponse().status == status
            conn.close()
        assert submit(f"http://127.0.0.1:{port}", 0, [], "not a note")[0] == 400
    finally:
        server.shutdown()
        server.server_close()


def test_bad_receipts_and_policies_exit_7_and_2(store: Store, tmp_path: Path) -> None:
    pol = tmp_path / "p.policy"
    pol.write_text(f"log {transparency.log_vkey(store.core)}\nquorum none\n")
    junk = tmp_path / "junk"
    junk.write_bytes(b"\xff\xfe garbage")
    r = runner.invoke(app, ["receipt", "verify", str(junk), "--policy", str(pol)])
    assert r.exit_code == 7 and "not a valid receipt" in r.output
    bad = tmp_path / "bad.policy"
    bad.write_text("witness a b+00000000+AAAA\nquorum a\n")
    r = runner.invoke(app, ["receipt", "verify", str(junk), "--policy", str(bad)])
    assert r.exit_code == 2 and "policy line 1" in r.output


@pytest.mark.parametrize(
    "text",
    [
        "quorum none\nquorum none\n",
        "group g 1 nobody\nquorum g\n",
        "witness a {w}\ngroup g 2 a\nquorum g\n",
        "witness a {w}\nwitness b {w}\nquorum a\n",
        "witness a {w}\ngroup g any a a\nquorum g\n",
        "witness a {w}\n",
        "witness none {w}\nquorum none\n",
        "log {w}\nquorum none\n",  # a cosignature key where a log key belongs
    ],
)
def test_malformed_policies_are_refused(text: str) -> None:
    w = Cosigner("witness.test/p", bytes(32)).verifier().vkey()
    with pytest.raises(InvalidInputError):
        policy_mod.parse(text.format(w=w))


def test_a_pattern_redactions_receipt_holds_no_pattern_and_no_erased_id(store: Store) -> None:
    v = store.write("/users/ann@example.com.md", "ann's token tok-998877", actor="user:ann")
    store.write("/users/ann@example.com.md", "gone", actor="user:ann")
    store.rename("/users/ann@example.com.md", "/users/former.md", actor="user:ann")
    r = redact.redact_pattern(store.core, r"ann@example\.com|tok-\d+", reason="gdpr request")
    rec = rr.receipt(store.core, r.id)
    p = proof.parse(rec.text)
    assert p.extra is not None
    everything = rec.text + p.extra.decode() + base64.b64decode(base64.b64encode(p.extra)).decode()
    for needle in ["ann@example.com", "tok-998877", "ann@example\\\\.com", *r.blobs, v.commit]:
        assert needle not in everything, needle
    assert rec.status == "pending" and rec.cosigned_by == []


def test_names_sizes_and_base64_are_matched_whole(store: Store, tmp_path: Path) -> None:
    for name in ("witness\n", "w\u2003x", "a+b", ""):
        with pytest.raises(InvalidInputError):
            note.check_name(name)
    with pytest.raises(InvalidInputError):
        note.b64decode("AAAAAAA\n")
    w = Witness(tmp_path / "w", "witness.test/u")
    w.add_log(transparency.log_vkey(store.core))
    signed = transparency.newest(store.core).text
    for old in ("\uff10", "00", "-0", "1 "):  # a fullwidth zero, leading zeroes, signs, spaces
        assert w.add_checkpoint(f"old {old}\n\n{signed}".encode()).status == 400


def test_the_witness_http_face_answers_in_one_write(tmp_path: Path) -> None:
    """Status line, headers and body leave in one write (two wait for the client's delayed ACK and
    cost it a second receive): one receive gets the whole answer; an unreadable request line is
    still answered (the buffered writer is flushed when the connection closes)."""
    import socket

    server = make_server(Witness(tmp_path / "w", "witness.test/h"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _, body = s.recv(65536).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 404") and body == b"no such endpoint\n"
            s.sendall(b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n")  # kept alive: asked again
            assert s.recv(65536).endswith(b"\r\n\r\nno such endpoint\n")
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"NOT A REQUEST LINE AT ALL\r\n\r\n")  # (answered as HTTP/0.9: a body only)
            assert b"Error code: 400" in s.recv(65536)
    finally:
        server.shutdown()
        server.server_close()
