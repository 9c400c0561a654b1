"""A redaction receipt against scope confinement (docs/redaction.md, "Receipts and scopes";
docs/access.md). A scope-confined caller cannot list or read another scope's history, and ``/git``
refuses scoped tokens outright because a transfer carries every scope. A receipt
(``GET /v1/memory_stores/{id}/memory_versions/{version}/receipt``) is the redaction's whole ledger
entry, which names the versions, paths and authors of every scope the redaction rewrote, and the
log's inclusion proof covers that entry as one leaf: a part of it verifies against nothing. So a
scoped token gets the receipt of a redaction that rewrote its own scope only, and a clear 403 for
one that also rewrote another (naming nothing of it); a caller that reads every scope gets it all."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest
from serverkit import client, running, token

import gitmem
from gitmem.engine import ledger
from gitmem.model.tlog import merkle, note, proof
from gitmem.model.tlog.checkpoint import parse_body

MAIN_PATH = "/hr/layoffs-2027-list.md"


@pytest.fixture
def env(workspace: Path) -> Iterator[dict[str, Any]]:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        main_v = s.write(MAIN_PATH, "shared words\n", actor="user:hr")
        s.write(MAIN_PATH, "rewritten\n", actor="user:hr")
        team_v = s.write("/t.md", "shared words\n", actor="user:alice", scope="team")
        s.write("/t.md", "newer\n", actor="user:alice", scope="team")
        s.redact(team_v.id, reason="cleanup")  # the same blob: main's version is redacted too
        own_v = s.write("/own.md", "team only words\n", actor="user:alice", scope="team")
        s.write("/own.md", "later\n", actor="user:alice", scope="team")
        s.redact(own_v.id, reason="team only")  # a redaction of team's history alone
    team = token(workspace, actor="user:team", stores={"notes": "rw"}, scope="team")
    reader = token(workspace, actor="user:ro", stores={"notes": "ro"})
    with running(workspace) as url:
        sid = next(s for s in client(url, team).beta.memory_stores.list() if s.name == "notes").id
        yield {
            "url": url,
            "home": workspace,
            "team": team,
            "reader": reader,
            "sid": sid,
            "team_v": team_v.id,
            "own_v": own_v.id,
            "main_v": main_v.id,
        }


def _receipt(env: dict[str, Any], who: str, version: str, scope: str = "team") -> httpx.Response:
    return httpx.get(
        f"{env['url']}/v1/memory_stores/{env['sid']}/memory_versions/{version}/receipt",
        params={"scope": scope},
        headers={"authorization": f"Bearer {env[who]}"},
        timeout=30,
    )


def _entry(body: dict[str, Any]) -> str:
    extra = next(line[6:] for line in body["receipt"].splitlines() if line.startswith("extra "))
    return base64.b64decode(extra + "=" * (-len(extra) % 4)).decode()


def test_a_scoped_tokens_receipt_names_nothing_of_another_scope(env: dict[str, Any]) -> None:
    r = _receipt(env, "team", env["team_v"])
    assert r.status_code == 403, r.text
    assert "also rewrote the history of a scope it may not read" in r.json()["error"]["message"]
    assert MAIN_PATH not in r.text and env["main_v"] not in r.text and "main" not in r.text


def test_a_scoped_token_gets_the_receipt_of_its_own_scopes_redaction(env: dict[str, Any]) -> None:
    r = _receipt(env, "team", env["own_v"])
    assert r.status_code == 200, r.text
    entry = json.loads(_entry(r.json()))
    assert entry["data"]["scopes"] == ["team"] and entry["data"]["target"] == env["own_v"]


def test_a_caller_that_reads_every_scope_gets_the_whole_entry_and_it_verifies(env: dict[str, Any]) -> None:
    r = _receipt(env, "reader", env["team_v"])
    assert r.status_code == 200, r.text
    text = r.json()["receipt"]
    entry = json.loads(_entry(r.json()))
    assert sorted(entry["data"]["scopes"]) == ["main", "team"] and env["main_v"] in _entry(r.json())
    assert MAIN_PATH not in _entry(r.json())  # paths by keyed digest (docs/redaction.md)
    p = proof.parse(text)
    root = parse_body(note.parse(p.checkpoint).text)
    assert p.extra is not None
    assert merkle.verify_inclusion(merkle.leaf_hash(p.extra), p.index, root.size, p.proof, root.root)
    # why no partial receipt: the same entry without main's part is no leaf of the log
    entry["data"]["versions"] = [v for v in entry["data"]["versions"] if v["scope"] == "team"]
    entry["data"]["scopes"] = ["team"]
    partial = ledger.canonical(entry).encode("ascii")
    assert not merkle.verify_inclusion(merkle.leaf_hash(partial), p.index, root.size, p.proof, root.root)


def test_the_library_keeps_the_same_rule(env: dict[str, Any]) -> None:
    from gitmem.model.caller import Caller

    with gitmem.open_store("notes", env["home"]) as s:
        team = Caller(actor="user:team", stores={s.settings.id: "rw"}, scope="team")
        rid = s.version(env["team_v"]).redaction.id  # type: ignore[union-attr]
        own = s.version(env["own_v"], scope="team").redaction.id  # type: ignore[union-attr]
        with pytest.raises(gitmem.ForbiddenError):
            s.redaction_receipt(rid, caller=team)
        assert s.redaction_receipt(own, caller=team)["redaction"] == own
        assert s.redaction_receipt(rid)["redaction"] == rid  # the local caller: everything
