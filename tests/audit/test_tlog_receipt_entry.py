"""A redaction's receipt (docs/transparency.md#receipts) is built from the ledger entry
``ledger.find`` returns (the newest with the redaction's id, walked back from the tip) and the
signed tree: when the ledger holds an entry with that id that is not the log's leaf at its seq (an
operator appended a doctored copy of the redaction's entry, a redaction id reused), no receipt is
handed out that a verifier will refuse: the receipt is checked against the signed root first."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gitmem.audit import redaction_receipts as rr
from gitmem.audit import transparency
from gitmem.engine import ledger
from gitmem.errors import IntegrityError
from gitmem.model.tlog import policy as policy_mod
from gitmem.store import Store


def _git(path: Path, *args: str, input: str | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "GIT_DIR"}
    return subprocess.run(
        ["git", f"--git-dir={path}", *args], input=input, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_doctored_copy_of_a_redactions_entry_gets_no_receipt(store: Store) -> None:
    store.write("/a.md", "one\n")
    v = store.write("/a.md", "secret-for-the-receipt\n")
    store.write("/a.md", "three\n")
    assert v is not None
    red = store.redact(v.id, reason="the real reason", actor="user:admin")
    core = store.core
    policy = policy_mod.parse(f"log {transparency.log_vkey(core)}\nquorum none\n")
    good = rr.receipt(core, red.id)
    assert rr.verify_receipt(good.text, policy).entry["data"]["reason"] == "the real reason"

    # The operator appends, by plain git, a copy of the redaction's entry (same seq, same id) with
    # another reason: what ledger.find meets first from the tip.
    entry = ledger.find(core, "redaction", "id", red.id)
    assert entry is not None
    body = {"seq": entry.seq, "kind": entry.kind, "at": entry.at, "actor": entry.actor,
            "data": {**entry.data, "reason": "a doctored reason"}, "prev": entry.prev}  # fmt: skip
    message = f"{ledger.SUBJECT_PREFIX}{entry.kind} #{entry.seq}\n\n{ledger.canonical(body)}\n"
    path = store.path
    tip = _git(path, "rev-parse", ledger.LEDGER_REF)
    empty = _git(path, "hash-object", "-t", "tree", "-w", "--stdin", input="")
    forged = _git(path, "commit-tree", empty, "-p", tip, "-F", "-", input=message)
    _git(path, "update-ref", ledger.LEDGER_REF, forged, tip)
    assert ledger.find(core, "redaction", "id", red.id).data["reason"] == "a doctored reason"  # type: ignore[union-attr]

    try:
        bad = rr.receipt(core, red.id)
    except IntegrityError as exc:
        assert "not the log's leaf" in exc.message
        return
    rr.verify_receipt(bad.text, policy)  # a receipt handed out verifies (broken: it did not)
