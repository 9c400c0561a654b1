"""Witnesses and redaction receipts with three real ``gitmem witness serve`` processes on 127.0.0.1
(docs/transparency.md): a receipt verifies offline against a 2-of-3 policy, and fails with a witness
key swapped, the entry altered, or a checkpoint the witnesses never saw; an operator's rewrite is
refused by every witness that cosigned before."""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest
from typer.testing import CliRunner

from gitmem.audit import redaction_receipts as rr
from gitmem.audit import transparency
from gitmem.audit.witness import Witness
from gitmem.audit.witnessing import cosign_round, submit
from gitmem.cli.app import app
from gitmem.engine import checkpoints, ledger
from gitmem.errors import IntegrityError
from gitmem.model.tlog import merkle, note, proof
from gitmem.model.tlog import policy as policy_mod
from gitmem.model.tlog.checkpoint import Checkpoint, Cosigner
from gitmem.store import Store

runner = CliRunner()


@dataclass
class Proc:
    name: str
    vkey: str
    url: str
    dir: Path
    proc: subprocess.Popen[str]


def _start(d: Path, name: str, logs: list[str]) -> Proc:
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
    ]
    for k in logs:
        args += ["--log", k]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None
    line = p.stdout.readline()  # "witness <vkey> listening on http://127.0.0.1:<port>"
    assert line.startswith("witness "), p.stderr.read() if p.stderr else line
    words = line.split()
    return Proc(name, words[1], words[-1], d, p)


@pytest.fixture
def three(store: Store, tmp_path: Path) -> Iterator[list[Proc]]:
    vkey = transparency.log_vkey(store.core)
    procs = [_start(tmp_path / f"w{i}", f"witness.test/w{i}", [vkey] if i < 3 else []) for i in (1, 2, 3)]
    yield procs
    for p in procs:
        p.proc.terminate()
        p.proc.wait(timeout=30)


def _policy_text(store: Store, ws: list[Proc], *, urls: bool = True) -> str:
    lines = [f"log {transparency.log_vkey(store.core)}"]
    for i, w in enumerate(ws, 1):
        lines.append(f"witness w{i} {w.vkey}" + (f" {w.url}" if urls else ""))
    return "\n".join([*lines, "group two 2 w1 w2 w3", "quorum two", ""])


def _redacted(store: Store) -> tuple[str, list[str], list[str], str]:
    """Redact the first version of a memory; returns (redaction id, erased blob ids, retired commit
    ids, the receipt's status as redact returned it)."""
    old = store.write("/notes/creds.md", "the password is hunter2-tlog", actor="user:alice")
    store.write("/notes/creds.md", "rotated", actor="user:alice")
    before = [str(c.id) for c in store.core.repo.walk(store.core.repo.references["refs/heads/main"].target)]
    r = store.redact(old.id, reason="leaked credential", actor="user:admin")
    after = {str(c.id) for c in store.core.repo.walk(store.core.repo.references["refs/heads/main"].target)}
    assert r.receipt is not None
    return r.id, r.blobs, [c for c in before if c not in after], r.receipt["status"]


def test_receipt_is_pending_then_complete_and_verifies_offline_2_of_3(
    store: Store, three: list[Proc], tmp_path: Path
) -> None:
    policy = policy_mod.parse(_policy_text(store, three))
    (tmp_path / "p.policy").write_text(_policy_text(store, three, urls=False))
    (store.core.gitmem_dir / "tlog" / "witnesses.policy").write_text(_policy_text(store, three))
    rid, blobs, retired, status = _redacted(store)
    assert status == "pending"
    outcome = cosign_round(store.core, policy)
    assert outcome["w1"] == outcome["w2"] == "cosigned" and outcome["w3"].startswith("refused (404)")
    rec = rr.receipt(store.core, rid, policy)
    assert (rec.status, rec.cosigned_by) == ("complete", ["w1", "w2"])
    (tmp_path / "r.tlog-proof").write_text(rec.text)
    res = runner.invoke(
        app, ["receipt", "verify", str(tmp_path / "r.tlog-proof"), "--policy", str(tmp_path / "p.policy")]
    )
    assert res.exit_code == 0, res.output
    assert res.output.startswith(f"ok: {rid} by user:admin at ") and "cosigned by w1, w2" in res.output
    shown = runner.invoke(app, ["receipt", "show", rid, "--json"])
    assert shown.exit_code == 0 and json.loads(shown.output)["status"] == "complete"
    # no raw id of erased content (blob or retired commit), nor the content, in the receipt
    p = proof.parse(rec.text)
    assert p.extra is not None
    everything = rec.text + p.extra.decode()
    assert blobs and retired
    for oid in [*blobs, *retired]:
        assert oid not in everything and oid[:12] not in everything
    assert "hunter2" not in everything and "hmac-sha256:" in everything


def test_receipt_fails_with_a_swapped_key_an_altered_entry_or_an_unseen_checkpoint(
    store: Store, three: list[Proc], tmp_path: Path
) -> None:
    policy = policy_mod.parse(_policy_text(store, three))
    rid, *_ = _redacted(store)
    cosign_round(store.core, policy)
    rec = rr.receipt(store.core, rid, policy)
    assert rr.verify_receipt(rec.text, policy).witnesses == ["w1", "w2"]

    stranger = Cosigner("witness.test/w1", os.urandom(32)).verifier().vkey()  # w1's name, another key
    swapped = policy_mod.parse(_policy_text(store, three).replace(three[0].vkey, stranger))
    with pytest.raises(IntegrityError, match="quorum is not met"):
        rr.verify_receipt(rec.text, swapped)

    p = proof.parse(rec.text)
    assert p.extra is not None
    entry = json.loads(p.extra)
    entry["data"]["reason"] = "routine cleanup"
    altered = rec.text.replace(
        base64.b64encode(p.extra).decode(), base64.b64encode(ledger.canonical(entry).encode()).decode()
    )
    with pytest.raises(IntegrityError, match="inclusion proof"):
        rr.verify_receipt(altered, policy)

    # the log signs a checkpoint of another tree holding the same entry; the cosignatures are copied
    leaves = [merkle.leaf_hash(x) for x in ledger.leaves(store.core)][: p.index + 1] + [
        merkle.leaf_hash(b"forged")
    ]
    fork = merkle.Tree(leaves)
    body = Checkpoint(checkpoints.origin(store.core), len(leaves), fork.root()).body()
    real = note.parse(p.checkpoint)
    forged = note.Note(body, (note.sign(body, [checkpoints.signer(store.core)]).sigs[0], *real.sigs[1:]))
    unseen = proof.TlogProof(p.index, tuple(fork.inclusion_proof(p.index)), forged.encode(), p.extra).encode()
    with pytest.raises(IntegrityError, match="cosignature of witness 'w1' does not verify"):
        rr.verify_receipt(unseen, policy)
    bare = proof.TlogProof(
        p.index,
        tuple(fork.inclusion_proof(p.index)),
        note.sign(body, [checkpoints.signer(store.core)]).encode(),
        p.extra,
    ).encode()
    with pytest.raises(IntegrityError, match="quorum is not met"):
        rr.verify_receipt(bare, policy)
    res = runner.invoke(
        app,
        ["receipt", "verify", "-", "--policy", str(_write(tmp_path, policy_text=_policy_text(store, three)))],
        input=unseen,
    )
    assert res.exit_code == 7


def _write(tmp_path: Path, policy_text: str) -> Path:
    path = tmp_path / "x.policy"
    path.write_text(policy_text)
    return path


def test_witnesses_refuse_an_operator_rewrite_resigned_with_the_same_key(
    store: Store, three: list[Proc]
) -> None:
    policy = policy_mod.parse(_policy_text(store, three))
    for i in range(3):
        ledger.append(store.core, "flag", {"n": i})
    assert cosign_round(store.core, policy)["w1"] == "cosigned"
    core, repo = store.core, store.core.repo
    first = ledger.entries(core)[0]
    repo.references[ledger.LEDGER_REF].set_target(pygit2.Oid(hex=first.commit), "operator")
    (core.gitmem_dir / ledger.ANCHOR_FILE).unlink()
    (core.gitmem_dir / "tlog" / checkpoints.STATE_FILE).unlink(missing_ok=True)
    (core.gitmem_dir / "tlog" / "witnesses.json").unlink(
        missing_ok=True
    )  # the log forgets what witnesses saw
    for i in range(6):
        ledger.append(core, "flag", {"n": f"rewritten {i}"})
    outcome = cosign_round(core, policy)
    assert outcome["w1"].startswith("refused (422)") and outcome["w2"].startswith("refused (422)"), outcome
    newest = transparency.newest(core)
    assert [s.name for s in note.parse(newest.text).sigs] == [checkpoints.origin(core)]  # no cosignature


def test_witness_protocol_statuses(store: Store, tmp_path: Path) -> None:
    w = Witness(tmp_path / "w", "witness.test/solo")
    assert stat.S_IMODE(os.stat(tmp_path / "w" / "witness.key").st_mode) == 0o600
    ledger.append(store.core, "flag", {"n": 1})
    signed = transparency.newest(store.core).text
    assert w.add_checkpoint(f"old 0\n\n{signed}".encode()).status == 404  # unknown origin
    w.add_log(transparency.log_vkey(store.core))
    bad = signed[:-10] + ("A" if signed[-10] != "A" else "B") + signed[-9:]
    assert w.add_checkpoint(f"old 0\n\n{bad}".encode()).status == 403
    assert w.add_checkpoint(f"old 9\n\n{signed}".encode()).status == 400
    assert (
        w.add_checkpoint(f"old 0\n{base64.b64encode(bytes(32)).decode()}\n\n{signed}".encode()).status == 422
    )
    ok = w.add_checkpoint(f"old 0\n\n{signed}".encode())
    assert ok.status == 200 and ok.body.startswith("\u2014 witness.test/solo ")
    again = w.add_checkpoint(f"old 0\n\n{signed}".encode())
    assert (again.status, again.body, again.content_type) == (409, "2\n", "text/x.tlog.size")


def test_a_409_over_http_tells_the_size(store: Store, three: list[Proc]) -> None:
    signed = transparency.newest(store.core).text
    assert submit(three[0].url, 0, [], signed)[0] == 200
    assert submit(three[0].url, 0, [], signed) == (409, "1\n")
