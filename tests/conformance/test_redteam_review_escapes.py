"""Review escapes (issue 25's adversarial review, docs/access.md "review routing"): an actor the
store's ``acl.review`` names writes proposals on every face; asking a dream to publish without
review must not let it publish as the dreamer instead. Each test failed before its fix."""

from __future__ import annotations

from pathlib import Path

import httpx2 as httpx
from serverkit import running, token

import gitmem
from gitmem.server.dream_jobs import DreamJobs


def test_an_acl_reviewed_actor_cannot_ask_a_dream_to_publish_without_review(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.update_settings(acl={"review": {"main": ["user:gated"]}})
        s.write("/seed.md", "seed\n", actor="user:ada", session="sesn_ada")
        sid = s.settings.id
    gated = token(workspace, actor="user:gated", stores={"notes": "rw"})
    body = {
        "inputs": [
            {"type": "memory_store", "memory_store_id": sid},
            {"type": "sessions", "session_ids": ["sesn_ada"]},
        ],
        "model": "claude-test",
        "output_behavior": {"type": "update_existing", "memory_store_id": sid},
        "gitmem": {"review": False},  # its own writes are reviewed: its dream's must be too
    }
    with running(workspace) as url, httpx.Client(base_url=url, timeout=30) as http:
        h = {"authorization": f"Bearer {gated}"}
        r = http.post("/v1/dreams", headers=h, json=body)
        assert r.status_code == 200, r.text
        assert r.json()["gitmem"]["review"] is True
    assert all(d.review for d in DreamJobs(workspace).all())


def test_an_acl_reviewed_actor_cannot_run_a_pipeline_that_publishes_without_review(workspace: Path) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.update_settings(acl={"review": {"main": ["user:gated"]}})
        s.write("/seed.md", "seed\n", actor="user:ada", session="sesn_ada")
    gated = token(workspace, actor="user:gated", stores={"notes": "rw"})
    pipe = {"model": "claude-test", "output_behavior": "update_existing", "review": False}
    with running(workspace) as url, httpx.Client(base_url=url, timeout=30) as http:
        h = {"authorization": f"Bearer {gated}"}
        r = http.post("/v1/gitmem/stores/notes/dream_pipeline", headers=h, json=pipe)
        assert r.status_code == 200, r.text
        r = http.post("/v1/gitmem/stores/notes/dream_pipeline/run", headers=h, json={})
        assert r.status_code == 200, r.text
        assert r.json()["dream"]["gitmem"]["review"] is True
    (d,) = DreamJobs(workspace).all()
    assert d.review and d.requested_by == "user:gated"
