"""Probe: a dream's record against a redaction. A dream keeps, in ``<home>/dreams/<id>.json``, each
change's path and the model's reasoning (docs/dreams.md), and serves them through the Dreams API to
every token that may read the store. docs/redaction.md says a redaction erases content "for real"
and replaces a path match "in the subjects and trailers..., in the ledger entry's version list and
in the index"; the webhook events drop a redacted version's path. A redacted text must not keep
being served by the server's own dream records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dreamkit import Script, memory, text
from serverkit import client, running, token

import gitmem
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


@pytest.mark.xfail(
    strict=True,
    reason="dream records (gitmem/server/dream_jobs.py) keep a redacted path and text: "
    "gitmem/audit/redact.py never rewrites them, GET /v1/dreams/{id} serves them after the purge",
)
def test_a_redacted_text_is_not_served_from_a_dreams_record(env: dict[str, Any]) -> None:
    sid, home, model = env["sid"], env["home"], env["model"]
    model.turns[:] = [
        [
            text(f"The session names the client's contact {EMAIL}: keep it."),
            memory(1, command="create", path=f"/memories/people/{EMAIL}.md", file_text=f"Contact: {EMAIL}\n"),
        ],
        [text("Done.")],
    ]
    w = env["writer"]
    d = w.beta.dreams.create(
        inputs=inputs(sid),
        model="m",
        output_behavior={"type": "update_existing", "memory_store_id": sid},
        extra_body={"gitmem": {"review": False}},
    )
    d = finished(w, d.id)
    assert d.status == "completed", d
    assert EMAIL in d.model_dump_json()
    # the owner erases the address: the memory deleted, then every match redacted from history
    with gitmem.open_store("notes", home) as s:
        s.delete(f"/people/{EMAIL}.md", actor="user:alice")
        s.redact_pattern(r"alice\.client@example\.com", reason="GDPR erasure request")
        assert not [m for m in s.list() if EMAIL in m.path]
        assert all(EMAIL not in v.path for v in s.versions())
    shown = env["reader"].beta.dreams.retrieve(d.id).model_dump_json()
    assert EMAIL not in shown, "the redacted address is still served by the dream's record"
