"""The transparency-log commands (docs/transparency.md): redact prints its receipt's status, ``tlog
show|rotate-key|cosign``, ``witness init|add-log``, ``receipt show`` of an unknown id."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gitmem.audit import transparency
from gitmem.cli.app import app
from gitmem.store import Store

runner = CliRunner()


def test_redact_prints_the_receipt_and_receipt_show_fetches_it(store: Store) -> None:
    old = store.write("/a.md", "secret 42", actor="user:a")
    store.write("/a.md", "fine", actor="user:a")
    r = runner.invoke(app, ["redact", "notes", old.id, "--reason", "oops", "--actor", "user:admin"])
    assert r.exit_code == 0, r.output
    rid = r.output.split(":", 1)[0]
    assert f"  receipt: pending (gitmem receipt show {rid})" in r.output
    shown = runner.invoke(app, ["receipt", "show", rid, "--store", "notes"])
    assert shown.exit_code == 0 and shown.stdout.startswith("c2sp.org/tlog-proof@v1\nextra ")
    j = runner.invoke(
        app, ["redact", "notes", "--pattern", "nothing-matches-this", "--reason", "x", "--json"]
    )
    assert j.exit_code != 0 or json.loads(j.output)["receipt"] is not None
    assert runner.invoke(app, ["receipt", "show", "redact_01HZZZZZZZZZZZZZZZZZZZZZZZ"]).exit_code == 3


def test_tlog_show_rotate_and_cosign_without_policy(store: Store) -> None:
    r = runner.invoke(app, ["tlog", "show", "notes", "--json"])
    assert r.exit_code == 0 and json.loads(r.output)["vkey"] == transparency.log_vkey(store.core)
    rot = runner.invoke(app, ["tlog", "rotate-key", "notes"])
    assert rot.exit_code == 0 and rot.output.startswith("new log key: gitmem/")
    assert transparency.log_vkey(store.core) in rot.output
    assert runner.invoke(app, ["tlog", "cosign", "notes"]).exit_code == 3


def test_witness_init_and_add_log(store: Store, tmp_path: Path) -> None:
    r = runner.invoke(app, ["witness", "init", "--dir", str(tmp_path / "w"), "--name", "witness.test/cli"])
    assert r.exit_code == 0 and r.output.startswith("witness.test/cli+")
    vkey = transparency.log_vkey(store.core)
    assert runner.invoke(app, ["witness", "add-log", "--dir", str(tmp_path / "w"), vkey]).exit_code == 0
    assert (tmp_path / "w" / "logs").read_text() == vkey + "\n"
    assert runner.invoke(app, ["witness", "add-log", "--dir", str(tmp_path / "w"), "junk"]).exit_code == 2
