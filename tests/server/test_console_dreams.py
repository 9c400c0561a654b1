"""The console's dream pages (docs/dreams.md): a dream's status, each change with the model's
reasoning, the changes as a diff, and accept/reject of its proposal; who sees the forms and the
changes that wait for review (its proposal's readers only), and a dream of a store the token may
not read is a 404."""

from __future__ import annotations

import html
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("jinja2", reason="the console needs jinja2 (pip install 'gitmem-store[server]')")

from dreamkit import CONSOLIDATE, MERGE_REASON, SESSION_NOTE, STALE_REASON, STORE, Script, scripted_model  # noqa: E402

import gitmem  # noqa: E402
from gitmem.server.dream_jobs import DreamJobs  # noqa: E402
from gitmem.server.dream_runs import new_dream  # noqa: E402
from gitmem.server.dreamer import DreamRunner  # noqa: E402
from tests.consolekit import csrf_of, sign_in  # noqa: E402
from tests.helpers import patience
from tests.serverkit import running, token  # noqa: E402


@pytest.fixture
def dreamt(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with gitmem.create_store("notes", home=workspace) as s:
        for path, content in STORE.items():
            s.write(path, content, actor="user:alice")
        s.write(SESSION_NOTE[0], SESSION_NOTE[1], session="sesn_one")
    with gitmem.create_store("other", home=workspace) as s:
        s.write("/x.md", "x\n")
    with scripted_model(Script([list(t) for t in CONSOLIDATE])) as url:
        monkeypatch.setenv("GITMEM_DREAM_BASE_URL", url)
        jobs = DreamJobs(workspace)
        d = new_dream(jobs, workspace, "notes", sessions=["sesn_one"], model="m", behavior="update_existing")
        runner = DreamRunner(workspace, workers=1)
        runner.run(d.id)
        runner.close()
    assert jobs.get(d.id).status == "completed"
    yield d.id


def test_a_reviewer_sees_the_reasoning_and_the_diff_and_accepts_one_change(
    workspace: Path, dreamt: str
) -> None:
    reviewer = token(workspace, actor="user:rev", stores={"notes": "rw"})
    reader = token(workspace, actor="user:ro", stores={"notes": "ro"})
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    outsider = token(workspace, actor="user:out", stores={"other": "rw"})
    with running(workspace) as url:
        for who in (reader, agent):  # no reader of the proposal: the dream, none of its pending changes
            with sign_in(url, who) as c:
                listing = c.get("/console/stores/notes/dreams")
                assert listing.status_code == 200 and dreamt in listing.text
                page = c.get(f"/console/stores/notes/dreams/{dreamt}")
                text = html.unescape(page.text)
                assert page.status_code == 200 and 'id="withheld"' in page.text
                for hidden in (MERGE_REASON, STALE_REASON, "/facts/office.md", "/prefs/coffee-again.md"):
                    assert hidden not in text, hidden
        with sign_in(url, reviewer) as c:
            listing = c.get("/console/stores/notes/dreams")
            assert listing.status_code == 200 and dreamt in listing.text
            page = c.get(f"/console/stores/notes/dreams/{dreamt}")
            assert page.status_code == 200
            text = html.unescape(page.text)
            assert MERGE_REASON in text and STALE_REASON in text
            assert "Lisbon" in text and "Berlin" in text  # the diff of the stale fact
            assert 'id="accept-form"' in page.text
            proposal = DreamJobs(workspace).get(dreamt).proposal_id
            assert proposal is not None
            done = c.post(
                f"/console/stores/notes/proposals/{proposal}/accept",
                data={"csrf": csrf_of(page.text), "path": "/facts/office.md"},
            )
            assert done.status_code == 303
        with gitmem.open_store("notes", workspace) as s:
            assert s.read("/facts/office.md").content == "The office is in Lisbon.\n"
            assert s.read("/prefs/coffee-again.md").content == STORE["/prefs/coffee-again.md"]
        with sign_in(url, reader) as c:  # the accepted change is an ordinary version: a reader's
            page = c.get(f"/console/stores/notes/dreams/{dreamt}")
            assert page.status_code == 200 and 'id="accept-form"' not in page.text
            text = html.unescape(page.text)
            assert STALE_REASON in text and MERGE_REASON not in text and "/prefs/coffee-again.md" not in text
        with sign_in(url, outsider) as c:
            assert c.get(f"/console/stores/notes/dreams/{dreamt}").status_code == 404
            assert c.get(f"/console/stores/other/dreams/{dreamt}").status_code == 404
            assert c.get("/console/stores/other/dreams/drm_01" + "0" * 24).status_code == 404


def test_dream_now_runs_the_pipeline_and_a_review_token_cannot_run_one_without_review(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gitmem.server.dream_jobs import Pipeline

    with gitmem.create_store("notes", home=workspace) as s:
        for path, content in STORE.items():
            s.write(path, content, actor="user:alice")
        s.write(SESSION_NOTE[0], SESSION_NOTE[1], session="sesn_one")
        store_id = s.settings.id  # pipelines are keyed by the store's handle, its id
    jobs = DreamJobs(workspace)
    writer = token(workspace, actor="user:w", stores={"notes": "rw"})
    agent = token(workspace, actor="user:agent", stores={"notes": "rw"}, review=True)
    with scripted_model(Script([list(t) for t in CONSOLIDATE])) as model_url:
        monkeypatch.setenv("GITMEM_DREAM_BASE_URL", model_url)
        with running(workspace) as url:
            jobs.save_pipeline(Pipeline(store_id, "m", review=False))
            with sign_in(url, agent) as c:
                page = c.get("/console/stores/notes/dreams")
                assert page.status_code == 200 and 'id="run-form"' not in page.text
                refused = c.post("/console/stores/notes/dreams/run", data={"csrf": csrf_of(page.text)})
                assert refused.status_code == 403 and jobs.all() == []
            jobs.save_pipeline(Pipeline(store_id, "m"))
            with sign_in(url, writer) as c:
                page = c.get("/console/stores/notes/dreams")
                assert 'id="run-form"' in page.text
                assert c.post("/console/stores/notes/dreams/run", data={}).status_code in (
                    400,
                    403,
                )  # no CSRF
                assert jobs.all() == []
                done = c.post("/console/stores/notes/dreams/run", data={"csrf": csrf_of(page.text)})
                assert done.status_code == 303
                (d,) = jobs.all()
                assert done.headers["location"].endswith(f"/dreams/{d.id}")
                deadline = patience(60)
                while not jobs.get(d.id).final and time.monotonic() < deadline:
                    time.sleep(0.05)
                assert jobs.get(d.id).status == "completed" and jobs.get(d.id).trigger == "console"
                again = c.post("/console/stores/notes/dreams/run", data={"csrf": csrf_of(page.text)})
                assert again.status_code == 303 and again.headers["location"].endswith("nothing=1")
