"""A dream's record against a redaction and a proposal's erasure. A dream keeps, in
``<home>/dreams/<id>.json``, each change's path and the model's reasoning (docs/dreams.md), and
serves them through the Dreams API to every token that may read the store (those still in review
only to the proposal's readers, its reviewers). docs/redaction.md:
redacted content or paths leave every place gitmem keeps them; the redaction's records step
(gitmem.audit.record_scrub) nulls a redacted version's path there (as webhook events do) and
replaces a pattern's matches, and the purge proof reads those records too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dreamkit import Script, memory, text
from serverkit import client, running, token

import gitmem
from gitmem.audit.purge_proof import prove_purged
from tests.server.test_server_dreams import finished, inputs, seed

EMAIL = "alice.client@example.com"


@pytest.fixture
def env(workspace: Path, model: Script) -> Iterator[dict[str, Any]]:
    seed(workspace)
    writer = token(workspace, actor="user:bob", stores={"notes": "rw"})
    reader = token(workspace, actor="user:carol", stores={"notes": "ro"})
    with running(workspace) as url:
        w = client(url, writer)
        sid = next(s for s in w.beta.memory_stores.list() if s.name == "notes").id
        yield {"home": workspace, "sid": sid, "writer": w, "reader": client(url, reader), "model": model}


def _dream(env: dict[str, Any], *, review: bool) -> Any:
    sid, model, w = env["sid"], env["model"], env["writer"]
    model.turns[:] = [
        [
            text(f"The session names the client's contact {EMAIL}: keep it."),
            memory(1, command="create", path=f"/memories/people/{EMAIL}.md", file_text=f"Contact: {EMAIL}\n"),
        ],
        [text("Done.")],
    ]
    d = w.beta.dreams.create(
        inputs=inputs(sid),
        model="m",
        output_behavior={"type": "update_existing", "memory_store_id": sid},
        extra_body={"gitmem": {"review": review}},
    )
    d = finished(w, d.id)
    assert d.status == "completed", d
    assert EMAIL in d.model_dump_json()
    return d


def _store_path(home: Path) -> Path:
    with gitmem.open_store("notes", home) as s:
        return s.path


def test_a_redacted_text_is_not_served_from_a_dreams_record(env: dict[str, Any]) -> None:
    home = env["home"]
    d = _dream(env, review=False)
    repo = _store_path(home)
    # the record is where the proof looks: before the redaction it finds the address there
    assert any("file" in f for f in prove_purged(repo, secrets=[EMAIL.encode()]).found_secrets)
    # a replicated copy of the record (gitmem/cluster/dream_copies.py) is scrubbed too
    copy = repo / "gitmem" / "dreams" / f"{d.id}.json"
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_bytes((home / "dreams" / f"{d.id}.json").read_bytes())
    # the owner erases the address: the memory deleted, then every match redacted from history
    with gitmem.open_store("notes", home) as s:
        s.delete(f"/people/{EMAIL}.md", actor="user:alice")
        red = s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        assert not [m for m in s.list() if EMAIL in m.path]
        assert all(EMAIL not in v.path for v in s.versions())
    shown = env["reader"].beta.dreams.retrieve(d.id).model_dump_json()
    assert EMAIL not in shown, "the redacted address is still served by the dream's record"
    change = json.loads(shown)["gitmem"]["changes"][0]
    assert change["path"] is None and change["version_id"]  # who and when stay; the path is gone
    assert f"[redacted: {red.id}]" in change["reasoning"]
    assert EMAIL.encode() not in copy.read_bytes()
    proof = prove_purged(repo, secrets=[EMAIL.encode()])
    assert not proof.found_secrets, proof


def test_an_erased_proposal_is_not_served_from_a_dreams_record(env: dict[str, Any]) -> None:
    home = env["home"]
    d = _dream(env, review=True)
    pid = d.model_dump()["gitmem"]["proposal_id"]
    assert pid
    with gitmem.open_store("notes", home) as s:
        erased = s.erase_proposal(pid, reviewer="user:lead", reason="the client's address")
    shown = env["writer"].beta.dreams.retrieve(d.id).model_dump_json()  # a reviewer of the store
    assert EMAIL not in shown, "the erased proposal's path and text are still served by the dream's record"
    change = json.loads(shown)["gitmem"]["changes"][0]
    assert change["path"] is None and change["reasoning"] == f"[redacted: {erased.id}]"
    # a reader never read the proposal: nothing of an erased one either (docs/dreams.md)
    shown = env["reader"].beta.dreams.retrieve(d.id).model_dump_json()
    assert EMAIL not in shown and json.loads(shown)["gitmem"]["changes"] == []
