"""The write-time guard on every write path (issue 19): a secret under ``secrets: reject`` is
refused with nothing written and never echoed; under ``flag`` the version lands with a
``Gitmem-Flag`` trailer and a ``flag`` ledger entry that ``gitmem audit --flagged`` shows."""

from __future__ import annotations

import io
import json
import os
import random
import string
import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest
import yaml
from typer.testing import CliRunner

import gitmem
from gitmem import sessions
from gitmem.audit.timeline import audit
from gitmem.cli.app import app
from gitmem.engine import ledger
from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.engine.transfer import import_jsonl
from gitmem.errors import ConfigError, GuardRejectedError
from gitmem.store import Store


def fake_token(seed: int = 7) -> str:
    """A GitHub-token-shaped string built at run time (no secret-shaped literal in the repository)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "gh" + "p_" + body


SECRET = fake_token()
NOTE = f"# Deploy notes\n\nThe CI uses the token {SECRET} for releases.\n"


def state(store: Store) -> tuple[dict[str, str], int]:
    """Every ref and the object count: a refused write must change neither."""
    repo = pygit2.Repository(str(store.path))
    refs = {n: str(repo.references[n].target) for n in repo.references}
    return refs, sum(1 for _ in pygit2.Odb(str(store.path / "objects")))


def refused(exc: GuardRejectedError | str) -> None:
    text = exc if isinstance(exc, str) else exc.message
    assert "github-token" in text and "line 3" in text
    assert SECRET not in text and SECRET[4:20] not in text


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/a.md", "alpha\n")
    return store


def test_new_store_has_the_default_guard_in_its_settings(store: Store) -> None:
    data = yaml.safe_load((store.path / "gitmem.yaml").read_text())
    assert data["guard"]["secrets"] == "reject" and data["guard"]["pii"] == "off"
    assert store.settings.guard["secrets"] == "reject"
    with pytest.raises(ConfigError, match="guard.secrets"):
        store.update_settings(guard={"secrets": "maybe"})
    with pytest.raises(ConfigError, match="guard.nope"):
        store.update_settings(guard={"nope": 1})
    assert store.settings.guard["secrets"] == "reject"


def test_library_writes_refuse_a_secret_with_nothing_written(seeded: Store) -> None:
    before = state(seeded)
    attempts: list[Any] = [
        lambda: seeded.write("/n.md", NOTE),
        lambda: seeded.create("/n.md", NOTE),
        lambda: seeded.write("/a.md", NOTE),
        lambda: seeded.str_replace("/a.md", "alpha", NOTE),
        lambda: seeded.insert("/a.md", 1, NOTE),
    ]
    for attempt in attempts:
        with pytest.raises(GuardRejectedError) as info:
            attempt()
        if "line 3" in info.value.message:
            refused(info.value)
        assert SECRET not in info.value.message
        assert info.value.exit_code == 2
    assert state(seeded) == before
    assert [v.path for v in seeded.versions()] == ["/a.md"]


def test_restore_of_a_flagged_secret_is_refused_once_the_store_rejects(seeded: Store) -> None:
    seeded.update_settings(guard={"secrets": "flag"})
    flagged = seeded.write("/n.md", NOTE)
    seeded.write("/n.md", "clean now\n")
    seeded.update_settings(guard={"secrets": "reject"})
    seeded.rename("/n.md", "/m.md")  # unchanged content is not rescanned
    before = state(seeded)
    with pytest.raises(GuardRejectedError) as info:
        seeded.restore(flagged.id)
    refused(info.value)
    assert state(seeded) == before


@pytest.mark.parametrize("size", [3, 40])  # pygit2 and git fast-import
def test_batches_refuse_or_skip_the_secret(seeded: Store, size: int) -> None:
    ops = [BatchOp("write", f"/b{n}.md", f"note {n}\n") for n in range(size)]
    ops.insert(1, BatchOp("write", "/secret.md", NOTE))
    before = state(seeded)
    with pytest.raises(GuardRejectedError) as info:
        apply_batch(seeded.core, ops)
    refused(info.value)
    assert state(seeded) == before
    result = apply_batch(seeded.core, ops, skip_refused=True)
    assert [r.op.path for r in result.refused] == ["/secret.md"]
    assert len(result.versions) == size
    assert "/secret.md" not in {m.path for m in seeded.list()}


def test_import_refuses_the_secret(seeded: Store) -> None:
    lines = [
        json.dumps({"path": "/x.md", "content": "fine\n"}),
        json.dumps({"path": "/y.md", "content": NOTE}),
    ]
    result = import_jsonl(seeded.core, io.StringIO("\n".join(lines) + "\n"))
    assert [(r.path, r.exit_code) for r in result.refused] == [("/y.md", 2)]
    refused(result.refused[0].reason)
    assert {m.path for m in seeded.list()} == {"/a.md", "/x.md"}
    runner = CliRunner()
    src = seeded.path.parent / "in.jsonl"
    src.write_text(lines[1] + "\n")
    out = runner.invoke(app, ["import", "notes", str(src)])
    assert out.exit_code == 2 and SECRET not in out.output + (out.stderr or "")


def test_session_sync_reports_the_secret_and_syncs_the_rest(seeded: Store, tmp_path: Path) -> None:
    sess = sessions.start_session(["notes"], root=tmp_path / "mnt")
    (tmp_path / "mnt" / "notes" / "secret.md").write_text(NOTE)
    (tmp_path / "mnt" / "notes" / "ok.md").write_text("fine\n")
    report = sessions.sync_session(sess.id).mounts[0]
    assert [v.path for v in report.versions] == ["/ok.md"]
    (item,) = report.refused
    assert item.path == "/secret.md"
    refused(item.reason)
    assert "/secret.md" not in {m.path for m in seeded.list()}


def test_memory_tool_refuses_the_secret(seeded: Store) -> None:
    pytest.importorskip("anthropic")
    from anthropic.lib.tools import ToolError

    from gitmem.integrations.anthropic_tool import GitmemMemoryTool

    tool = GitmemMemoryTool(seeded, scope="main", session="sesn_tool")
    before = state(seeded)
    with pytest.raises(ToolError) as info:
        tool.call({"command": "create", "path": "/memories/n.md", "file_text": NOTE})
    assert "github-token" in str(info.value.content) and SECRET not in str(info.value.content)
    assert state(seeded) == before


def test_mcp_refuses_the_secret(seeded: Store) -> None:
    pytest.importorskip("mcp")
    import anyio
    from mcp import Client

    from gitmem.integrations.mcp_server import ServedStore, build_server

    server = build_server([ServedStore("notes", seeded)])
    before = state(seeded)

    async def write() -> str:
        async with Client(server) as c:
            result = await c.call_tool("write_memory", {"store": "notes", "path": "/n.md", "content": NOTE})
            assert result.is_error
            return "".join(getattr(part, "text", "") for part in result.content)

    text = anyio.run(write)
    refused(text)
    assert state(seeded) == before


def test_server_api_refuses_the_secret_with_400(seeded: Store, workspace: Path) -> None:
    anthropic = pytest.importorskip("anthropic")
    from serverkit import client, running, token

    secret = token(workspace, actor="user:alice", stores={"notes": "rw"})
    with running(workspace) as url:
        c = client(url, secret)
        sid = next(s for s in c.beta.memory_stores.list() if s.name == "notes").id
        before = state(seeded)
        with pytest.raises(anthropic.BadRequestError) as info:
            c.beta.memory_stores.memories.create(sid, path="/n.md", content=NOTE)
        refused(str(info.value))
        assert state(seeded) == before


def git(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)


def test_push_of_a_secret_is_refused_and_a_flagged_push_is_recorded(seeded: Store, tmp_path: Path) -> None:
    work = tmp_path / "work"
    assert git("clone", "-q", f"file://{seeded.path}", str(work), cwd=tmp_path).returncode == 0
    (work / "deploy.md").write_text(NOTE)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "notes", cwd=work)
    before = state(seeded)
    proc = git("push", "origin", "main", cwd=work)
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.startswith("remote: gitmem:")]
    assert "refused by the store's guard: secret github-token at line 3" in lines[0]
    assert SECRET not in proc.stderr
    assert state(seeded) == before

    seeded.update_settings(guard={"secrets": "flag"})
    assert git("push", "-q", "origin", "main", cwd=work).returncode == 0
    gitmem.open_store(seeded.path).close()  # the next gitmem process records the spooled push
    (event,) = audit(seeded.core, flagged=True)
    assert event.detail["path"] == "/deploy.md"  # shown while unredacted, from the index
    (entry,) = ledger.entries(seeded.core, kind="flag")
    assert "/deploy.md" not in json.dumps(entry.data)  # the ledger keeps a keyed digest only
    assert event.detail["findings"] == [{"rule": "github-token", "kind": "secret", "line": 3}]
    head = git("rev-parse", "HEAD", cwd=work).stdout.strip()
    assert head not in json.dumps(event.detail)  # commit ids go in as keyed digests


def test_flagged_write_lands_with_trailer_ledger_and_audit(seeded: Store) -> None:
    seeded.update_settings(guard={"secrets": "flag", "pii": "flag"})
    version = seeded.write("/n.md", NOTE + "Mail ops@corp.example.org\n", session="sesn_flag")
    clean = seeded.write("/clean.md", "nothing to see\n")
    message = seeded.core.repo[pygit2.Oid(hex=version.commit)].message
    assert "Gitmem-Flag: secret github-token line 3; pii email line 4" in message
    assert "Gitmem-Flag" not in seeded.core.repo[pygit2.Oid(hex=clean.commit)].message
    assert seeded.read("/n.md").content.startswith("# Deploy notes")
    gitmem.open_store(seeded.path).close()  # the next gitmem process records the spooled push
    (event,) = audit(seeded.core, flagged=True)
    assert (event.type, event.subject, event.scope, event.session) == (
        "flag",
        version.id,
        "main",
        "sesn_flag",
    )
    assert [f["rule"] for f in event.detail["findings"]] == ["github-token", "email"]
    assert SECRET not in json.dumps(event.detail)
    assert audit(seeded.core, session="sesn_flag", flagged=True) == [event]
    runner = CliRunner()
    out = runner.invoke(app, ["audit", "notes", "--flagged", "--json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    assert [r["subject"] for r in rows] == [version.id]
    table = runner.invoke(app, ["audit", "notes", "--flagged"])
    assert "github-token line 3" in table.stdout and SECRET not in table.stdout


def test_flagged_batch_is_one_ledger_entry(seeded: Store) -> None:
    seeded.update_settings(guard={"secrets": "flag"})
    ops = [BatchOp("write", f"/s{n}.md", NOTE.replace(SECRET, fake_token(n))) for n in range(40)]
    result = apply_batch(seeded.core, ops)
    events = audit(seeded.core, flagged=True)
    assert sorted(e.subject for e in events) == sorted(v.id for v in result.versions)
    assert len({e.detail["seq"] for e in events}) == 1
    tip = seeded.core.repo[seeded.core.tip("main")]
    assert "Gitmem-Flag: secret github-token line 3" in tip.message


def test_cli_store_update_changes_the_guard(seeded: Store) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["store", "update", "notes", "--guard-secrets", "flag", "--guard-pii", "flag"])
    assert out.exit_code == 0, out.output
    assert seeded.settings.guard["secrets"] == "flag" and seeded.settings.guard["pii"] == "flag"
    bad = runner.invoke(app, ["store", "update", "notes", "--guard-secrets", "sometimes"])
    assert bad.exit_code == 2
    assert seeded.settings.guard["secrets"] == "flag"
