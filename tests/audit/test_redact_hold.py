"""Redaction that holds (issue 11): across scopes, sessions, clones, git maintenance, pushes.

Each test names the item it covers; every one failed on the code before this change."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

import gitmem
from gitmem.audit import redact
from gitmem.audit.verify import verify
from gitmem.cli.app import app
from gitmem.errors import ForbiddenError
from gitmem.store import Store
from tests.helpers import git
from tests.secret_scan import scan_store

SECRET = "sk-XYZ-9f8e7d6c"


def _one_scope(store: Store) -> gitmem.Version:
    """A superseded version holding the secret, in scope main only."""
    v = store.write("/k.md", f"key {SECRET}\n")
    store.write("/k.md", "rotated\n")
    store.write("/other.md", "unrelated\n")
    assert v is not None
    return v


def _two_scopes(store: Store) -> tuple[gitmem.Version, gitmem.Version]:
    a = store.write("/k.md", f"key {SECRET}\n")
    b = store.write("/k.md", f"key {SECRET}\n", scope="alice")
    store.write("/k.md", "rotated\n")
    store.write("/k.md", "rotated too\n", scope="alice")
    assert a is not None and b is not None
    return a, b


# ---------------------------------------------------------------------- 1. several scopes
def test_1_one_redaction_covers_every_scope(store: Store, workspace: Path) -> None:
    a, b = _two_scopes(store)
    r = redact.redact(store.core, b.id, reason="leak")
    assert r.scopes == ["alice", "main"]
    assert {(t.scope, t.version) for t in r.touched} == {("main", a.id), ("alice", b.id)}
    assert store.read("/k.md").content == "rotated\n"
    assert store.read("/k.md", scope="alice").content == "rotated too\n"
    assert scan_store(store.path, SECRET.encode(), workspace=workspace) == []
    assert verify(store.core).ok


def test_1_pattern_covers_every_scope_and_scope_narrows(store: Store) -> None:
    _two_scopes(store)
    store.write("/t.md", "only in team: sk-XYZ-other\n", scope="team")
    store.write("/t.md", "clean\n", scope="team")
    with pytest.raises(ForbiddenError, match="also in scope"):
        redact.redact_pattern(store.core, r"sk-XYZ-9f8e7d6c", reason="x", scope="main")
    r = redact.redact_pattern(store.core, r"sk-XYZ-[0-9a-z]+", reason="x", scope="team")
    assert r.scopes == ["team"]
    r = redact.redact_pattern(store.core, r"sk-XYZ-[0-9a-f]+", reason="x")
    assert r.scopes == ["alice", "main"]
    assert scan_store(store.path, b"sk-XYZ", remembered_pattern=True) == []


def test_1_every_live_match_listed_at_once(store: Store) -> None:
    store.write("/k.md", f"key {SECRET}\n")
    store.write("/k.md", f"key {SECRET}\n", scope="alice")
    store.write("/j.md", f"other {SECRET}\n", scope="bob")
    before = _state(store)
    with pytest.raises(ForbiddenError) as exc:
        redact.redact_pattern(store.core, SECRET, reason="x")
    msg = exc.value.message
    assert (
        "/k.md in scope 'alice'" in msg and "/k.md in scope 'main'" in msg and "/j.md in scope 'bob'" in msg
    )
    assert _state(store) == before


def _state(store: Store) -> dict[str, bytes]:
    """Every file of the store's git dir (refs, objects, ledger, deny-list, index) by content."""
    out = {}
    for dirpath, _d, names in os.walk(store.path):
        for n in names:
            p = Path(dirpath) / n
            if n.endswith(("-shm", "-wal", ".lock", "lock")):
                continue
            out[str(p.relative_to(store.path))] = p.read_bytes()
    return out


# ---------------------------------------------------------------------- 3. git maintenance
@pytest.mark.parametrize(
    "maintenance",
    [
        [["gc", "--aggressive", "--prune=now"]],
        [["repack", "-a", "-d", "--write-bitmap-index"], ["multi-pack-index", "write", "--bitmap"]],
        [["repack", "-d"], ["commit-graph", "write", "--reachable", "--split"]],
        [["pack-refs", "--all"], ["commit-graph", "write", "--reachable"]],
    ],
)
def test_3_redaction_after_git_maintenance(store: Store, maintenance: list[list[str]]) -> None:
    a = _one_scope(store)
    for args in maintenance:
        git(store.path, *args)
    r = redact.redact(store.core, a.id, reason="leak")
    assert verify(store.core).ok
    assert git(store.path, "fsck", "--full", "--strict").returncode == 0
    blob = [b for b in r.versions]
    assert blob
    assert scan_store(store.path, SECRET.encode()) == []
    # Nothing git maintenance left names the redacted blob or a retired commit.
    retired = _retired_ids(store, r.id)
    left = [f for f in scan_store(store.path, b"", ids=retired) if "/gitmem/denylist:" not in f]
    assert retired and left == []
    # And a second redaction after more maintenance works too.
    v = store.write("/z.md", "second sk-AAA\n")
    store.write("/z.md", "fine\n")
    assert v is not None
    git(store.path, "gc", "--prune=now")
    git(store.path, "commit-graph", "write", "--reachable")
    redact.redact(store.core, v.id, reason="leak")
    assert verify(store.core).ok


def _retired_ids(store: Store, rid: str) -> list[str]:
    from gitmem.engine import ledger

    return sorted(ledger.denied_by(store.core)[f"redaction {rid}"])


# ---------------------------------------------------------------------- 6. concurrent repack
def test_6_purge_survives_concurrent_repack(store: Store) -> None:
    versions = []
    for i in range(30):
        v = store.write(f"/m{i}.md", f"secret {SECRET} {i}\n")
        versions.append(v)
        store.write(f"/m{i}.md", f"clean {i}\n")
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            subprocess.run(["git", f"--git-dir={store.path}", "repack", "-d", "-q"], check=False)
            subprocess.run(["git", f"--git-dir={store.path}", "prune-packed"], check=False)

    t = threading.Thread(target=churn)
    t.start()
    try:
        r = redact.redact_pattern(store.core, r"sk-XYZ-[0-9a-f]+", reason="x")
    finally:
        stop.set()
        t.join()
    assert len(r.versions) == 30
    assert scan_store(store.path, SECRET.encode()) == []
    assert verify(store.core).ok


# ---------------------------------------------------------------------- 10. modes
def test_10_private_files_are_0600(store: Store) -> None:
    a = _one_scope(store)
    redact.redact(store.core, a.id, reason="leak")
    redact_dir = store.path / "gitmem"
    for name in ("denylist", "secret", "index.sqlite", "ledger_head"):
        mode = stat.S_IMODE((redact_dir / name).stat().st_mode)
        assert mode == 0o600, (name, oct(mode))
    v = store.write("/p.md", "pat sk-QQQ1\n")
    store.write("/p.md", "x\n")
    assert v is not None
    redact.redact_pattern(store.core, "sk-QQQ[0-9]", reason="x")
    assert stat.S_IMODE((redact_dir / "denypatterns").stat().st_mode) == 0o600


# ---------------------------------------------------------------------- 11. archived stores
def test_11_redaction_works_in_an_archived_store(store: Store) -> None:
    a = _one_scope(store)
    store.update_settings(archived_at="2026-01-01T00:00:00Z")
    r = redact.redact(store.core, a.id, reason="leak")
    assert r.scopes == ["main"]
    assert scan_store(store.path, SECRET.encode()) == []
    with pytest.raises(ForbiddenError, match="archived"):
        store.write("/n.md", "new\n")


def test_11_deleting_memories_works_in_an_archived_store(store: Store, workspace: Path) -> None:
    store.write("/keep.md", "keep\n", actor="user:a")
    store.write("/gone.md", "gone\n", actor="user:a")
    store.update_settings(archived_at="2026-01-01T00:00:00Z")
    v = store.delete("/gone.md", actor="user:admin")  # erasure: allowed in an archived store
    assert v.operation == "deleted" and [m.path for m in store.list()] == ["/keep.md"]
    result = CliRunner().invoke(app, ["rm", "notes", "/keep.md", "--home", str(workspace)])
    assert result.exit_code == 0, result.output
    assert store.list() == []
    for write in (lambda: store.write("/n.md", "n\n"), lambda: store.create("/n.md", "n\n")):
        with pytest.raises(ForbiddenError, match="archived"):
            write()


# ---------------------------------------------------------------------- 2. pushes and rewrites
KILLED = """
import sys
import gitmem
from gitmem.audit.redact import redact
store = gitmem.open_store(sys.argv[1])
redact(store.core, sys.argv[2], reason="crash test", actor="user:admin")
"""


def _clone(store: Store, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    subprocess.run(["git", "clone", "-q", f"file://{store.path}", str(work)], check=True, capture_output=True)
    return work


def test_2_fork_pushed_after_a_killed_redaction_is_refused(store: Store, tmp_path: Path) -> None:
    import signal
    import sys

    store.write("/a.md", "one\n")
    v = store.write("/a.md", f"key {SECRET}\n")
    store.write("/a.md", "three\n")
    assert v is not None
    work = _clone(store, tmp_path)
    path = store.path
    store.close()
    env = dict(os.environ, GITMEM_FAULT="ref")  # killed between the branch swap and the deny-list
    res = subprocess.run([sys.executable, "-c", KILLED, str(path), v.id], env=env, capture_output=True)
    assert res.returncode == -signal.SIGKILL, res.stderr
    push = subprocess.run(
        ["git", "push", "origin", "main~1:refs/heads/fork"], cwd=work, capture_output=True, text=True
    )
    assert push.returncode != 0
    assert "gitmem:" in push.stderr  # retired (deny-listed) or already purged: refused either way
    assert git(path, "fsck", "--full").returncode == 0
    with gitmem.open_store(str(path)) as again:
        assert verify(again.core).ok
        assert "fork" not in again.scopes()
        assert scan_store(path, SECRET.encode()) == []


def test_2_push_waits_for_a_running_rewrite(store: Store, tmp_path: Path) -> None:
    from gitmem.audit.journal import store_lock

    store.write("/a.md", "one\n")
    v = store.write("/a.md", f"key {SECRET}\n")
    store.write("/a.md", "three\n")
    assert v is not None
    work = _clone(store, tmp_path)
    results: dict[str, subprocess.CompletedProcess[str]] = {}
    with store_lock(store.core):  # a rewrite is running: the push must wait for it
        t = threading.Thread(
            target=lambda: results.setdefault(
                "push",
                subprocess.run(
                    ["git", "push", "origin", "main~1:refs/heads/fork"],
                    cwd=work,
                    capture_output=True,
                    text=True,
                ),
            )
        )
        t.start()
        t.join(1.0)
        assert t.is_alive()  # still waiting for the lock
    t.join()
    # Released without a rewrite: the fork is ordinary history and is accepted.
    assert results["push"].returncode == 0, results["push"].stderr


def test_2_push_during_redaction_never_breaks_the_store(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "one\n")
    v = store.write("/a.md", f"key {SECRET}\n")
    store.write("/a.md", "three\n")
    store.write("/b.md", "four\n")
    assert v is not None
    work = _clone(store, tmp_path)
    outcome: dict[str, object] = {}

    def pusher() -> None:
        outcome["push"] = subprocess.run(
            ["git", "push", "origin", "main~1:refs/heads/fork"], cwd=work, capture_output=True, text=True
        )

    t = threading.Thread(target=pusher)
    t.start()
    try:
        redact.redact(store.core, v.id, reason="leak")
    except gitmem.errors.GitmemError as exc:
        outcome["redact"] = exc
    t.join()
    assert git(store.path, "fsck", "--full").returncode == 0
    report = verify(store.core, raise_on_failure=False)
    if "fork" in store.scopes() and "redact" not in outcome:
        # The fork landed before the redaction: it was covered too.
        assert report.ok
    assert all(c.ok for c in report.checks if c.name in ("fsck", "index", "trailers"))


# ---------------------------------------------------------------------- 4, 5. sessions, write paths
def _contents(store: Store) -> dict[str, str | None]:
    return {m.path: m.content for m in store.list(with_content=True)}  # type: ignore[union-attr]


def test_4_a_session_cannot_bring_a_redacted_secret_back(
    store: Store, tmp_path: Path, workspace: Path
) -> None:
    from gitmem import sessions

    v = store.write("/k.md", f"key {SECRET}\n")
    assert v is not None
    editing = sessions.start_session(["notes"], root=tmp_path / "m1")
    idle = sessions.start_session(["notes"], root=tmp_path / "m2")
    store.write("/k.md", "rotated\n", actor="user:bob")
    r = redact.redact_pattern(store.core, r"sk-XYZ-[0-9a-f]+", reason="leak")
    from gitmem.sessions.redaction import mounts_holding

    assert mounts_holding(store.path, r.blobs, pattern=r"sk-XYZ-[0-9a-f]+") == sorted(
        [f"{editing.id}:{tmp_path / 'm1' / 'notes'}", f"{idle.id}:{tmp_path / 'm2' / 'notes'}"]
    )
    # The agent keeps editing its copy, which still holds the secret.
    (tmp_path / "m1" / "notes" / "k.md").write_text(f"key {SECRET}\nand more notes\n")
    first = sessions.sync_session(editing.id).mounts[0]
    second = sessions.sync_session(idle.id).mounts[0]
    assert first.versions == [] and second.versions == []
    assert all(SECRET not in (c or "") for c in _contents(store).values())
    assert (tmp_path / "m1" / "notes" / "k.md").read_text() == "rotated\n"
    assert (tmp_path / "m2" / "notes" / "k.md").read_text() == "rotated\n"
    assert any("redacted" in i.reason for i in first.refused)
    assert verify(store.core).ok
    found = scan_store(store.path, SECRET.encode(), workspace=workspace, remembered_pattern=True)
    found += [
        f for f in scan_store(tmp_path / "m1", SECRET.encode()) + scan_store(tmp_path / "m2", SECRET.encode())
    ]
    assert found == []


def test_4_every_write_path_refuses_redacted_content(store: Store, tmp_path: Path) -> None:
    from gitmem.engine.batch import BatchOp, apply_batch
    from gitmem.integrations.anthropic_tool import MemoryBackend

    v = store.write("/k.md", f"key {SECRET}\n")
    store.write("/k.md", "rotated\n")
    p = store.write("/p.md", "pw hunter2-abc\n")
    store.write("/p.md", "none\n")
    assert v is not None and p is not None
    redact.redact(store.core, v.id, reason="leak")
    redact.redact_pattern(store.core, r"hunter2-[a-z]+", reason="pw")
    before = _state(store)
    with pytest.raises(ForbiddenError, match="redacted"):
        store.write("/again.md", f"key {SECRET}\n")  # the deny-listed blob, byte for byte
    with pytest.raises(ForbiddenError, match="pattern"):
        store.write("/again.md", "new hunter2-xyz\n")
    with pytest.raises(ForbiddenError, match="pattern"):
        store.write("/hunter2-abc.md", "clean\n")  # in a path
    with pytest.raises(ForbiddenError):
        apply_batch(store.core, [BatchOp("create", "/b.md", content="hunter2-qq\n")], scope="main")
    tool = MemoryBackend(store)
    with pytest.raises(Exception, match="redacted pattern"):
        tool.create("/memories/t.md", "tool hunter2-zz\n")
    assert _state(store) == before
    # A push with a match is refused by the hook.
    work = _clone(store, tmp_path)
    (work / "x.md").write_text("pushed hunter2-pp\n")
    git(work, "add", "x.md")
    git(work, "commit", "-qm", "x")
    push = subprocess.run(["git", "push", "origin", "main"], cwd=work, capture_output=True, text=True)
    assert push.returncode != 0 and "redacted pattern" in push.stderr


def test_5_a_refused_conflict_copy_keeps_both_sides(store: Store, tmp_path: Path) -> None:
    from gitmem import sessions

    long = "/" + "n" * 230 + ".md"  # fits a file name, but not with ".conflict-<session>" added
    store.write(long, "original\n")
    sess = sessions.start_session(["notes"], root=tmp_path / "m")
    store.write(long, "theirs\n", actor="user:bob")
    local = tmp_path / "m" / "notes" / long[1:]
    local.write_text("mine\n")
    report = sessions.sync_session(sess.id).mounts[0]
    assert [(c.path, c.kept_as) for c in report.conflicts] == [(long, None)]
    assert local.read_text() == "mine\n" and store.read(long).content == "theirs\n"
    # The next sync must not overwrite the other writer's change.
    again = sessions.sync_session(sess.id).mounts[0]
    assert store.read(long).content == "theirs\n" and local.read_text() == "mine\n"
    assert [c.path for c in again.conflicts] == [long]


# ---------------------------------------------------------------------- 7, 8. clones
def test_7_fetch_purge_removes_redacted_content_from_a_clone(store: Store, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gitmem.cli.app import app
    from gitmem.push.clone import clone

    a = _one_scope(store)
    dest = tmp_path / "c"
    clone(str(store.path), dest)
    git(dest, "gc", "-q")  # the clone packed its objects too
    redact.redact(store.core, a.id, reason="leak")
    assert scan_store(store.path, SECRET.encode()) == []
    res = CliRunner().invoke(app, ["fetch", "--purge", str(dest)])
    assert res.exit_code == 0, res.output
    assert "purged" in res.output and "(verified)" in res.output
    assert scan_store(store.path, SECRET.encode(), clones=[dest]) == []
    assert (dest / "k.md").read_text() == "rotated\n"
    assert git(dest, "fsck", "--full").returncode == 0
    out = CliRunner().invoke(app, ["verify", str(dest)])
    assert "skipped\tredactions purged: a clone has no deny-list" in out.output
    assert "ok\tredactions purged" not in out.output


def test_7_fetch_purge_refuses_local_work_on_the_old_history(store: Store, tmp_path: Path) -> None:
    from gitmem.errors import ConflictError
    from gitmem.push.clone import clone, fetch

    a = _one_scope(store)
    dest = tmp_path / "c"
    clone(str(store.path), dest)
    (dest / "mine.md").write_text("local work\n")
    git(dest, "add", "mine.md")
    git(dest, "commit", "-qm", "mine")
    redact.redact(store.core, a.id, reason="leak")
    head = git(dest, "rev-parse", "HEAD").stdout
    with pytest.raises(ConflictError, match="rebase them first"):
        fetch(dest, purge=True)
    assert git(dest, "rev-parse", "HEAD").stdout == head  # nothing was purged or reset


def test_7_verify_on_a_plain_git_clone_does_not_say_ok(store: Store, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gitmem.cli.app import app

    _two_scopes(store)
    dest = tmp_path / "plain"
    subprocess.run(["git", "clone", "-q", str(store.path), str(dest)], check=True)
    out = CliRunner().invoke(app, ["verify", str(dest)]).output
    assert "ok\tledger" not in out and "ok\tredactions purged" not in out
    assert "skipped\tledger" in out and "skipped\tredactions purged" in out


def test_8_fetch_never_replaces_the_clone_ledger(store: Store, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gitmem.cli.app import app
    from gitmem.engine import ledger
    from gitmem.push.clone import clone

    _two_scopes(store)
    store.update_settings(description="two entries in the ledger")
    dest = tmp_path / "c"
    clone(str(store.path), dest)
    mine = git(dest, "rev-parse", "refs/gitmem/ledger").stdout.strip()
    # Rewrite the store's ledger: a new chain with different entries.
    repo = store.core.repo
    tip = repo.references[ledger.LEDGER_REF].target
    first = store.core.commit(tip)
    while first.parents:
        first = first.parents[0]
    repo.references[ledger.LEDGER_REF].set_target(first.id)
    (store.core.gitmem_dir / ledger.ANCHOR_FILE).unlink()
    ledger.append(store.core, "settings_changed", {"changes": {"x": 1}})  # a forged continuation
    res = CliRunner().invoke(app, ["fetch", str(dest)])
    assert res.exit_code == 7, res.output
    assert "ledger" in res.output and "rewritten" in res.output
    assert git(dest, "rev-parse", "refs/gitmem/ledger").stdout.strip() == mine


# ---------------------------------------------------------------------- 9. ledger tampering
def _drop_last_ledger_entries(store: Store, keep: int) -> None:
    from gitmem.engine import ledger

    entries = ledger.entries(store.core)
    store.core.repo.references[ledger.LEDGER_REF].set_target(entries[keep - 1].commit)


def test_9_deleted_anchor_is_detected(store: Store) -> None:
    from gitmem.engine import ledger

    a = _one_scope(store)
    redact.redact(store.core, a.id, reason="leak")
    n = len(ledger.entries(store.core))
    _drop_last_ledger_entries(store, n - 1)  # the redaction entry is gone...
    (store.core.gitmem_dir / ledger.ANCHOR_FILE).unlink()  # ...and so is the anchor
    report = verify(store.core, raise_on_failure=False)
    assert not report.ok
    assert any("anchor" in c.detail for c in report.checks if not c.ok)


def test_9_removing_an_entry_with_its_denylist_block_is_detected(store: Store) -> None:
    from gitmem.engine import ledger

    a = _one_scope(store)
    r = redact.redact(store.core, a.id, reason="leak")
    n = len(ledger.entries(store.core))
    _drop_last_ledger_entries(store, n - 1)
    entries = ledger.entries(store.core)
    (store.core.gitmem_dir / ledger.ANCHOR_FILE).write_text(f"{entries[-1].seq} {entries[-1].digest}\n")
    deny = store.core.gitmem_dir / "denylist"
    text = deny.read_text()
    deny.write_text(text[: text.index(f"# redaction {r.id}")])
    report = verify(store.core, raise_on_failure=False)
    assert not report.ok
    bad = [c for c in report.checks if not c.ok]
    assert any(r.id in c.detail for c in bad), bad


# ---------------------------------------------------------------------- 13. previews
def test_13_dry_runs_list_exactly_and_write_nothing(store: Store) -> None:
    from typer.testing import CliRunner

    from gitmem.cli.app import app

    a, b = _two_scopes(store)
    before = _state(store)
    res = CliRunner().invoke(
        app, ["redact", "notes", "--pattern", "sk-XYZ-[0-9a-f]+", "--reason", "x", "--dry-run"]
    )
    assert res.exit_code == 0, res.output
    assert "would redact 2 version(s) in scope(s) 'alice', 'main'" in res.output
    assert f"main\t{a.id}\t/k.md" in res.output and f"alice\t{b.id}\t/k.md" in res.output
    store.write("/live.md", f"now {SECRET}\n")
    before = _state(store)
    res = CliRunner().invoke(
        app, ["redact", "notes", "--pattern", "sk-XYZ-[0-9a-f]+", "--reason", "x", "--dry-run"]
    )
    assert res.exit_code == 6 and "/live.md in scope 'main'" in res.output
    assert _state(store) == before
    store.update_settings(retention=store.settings.retention.__class__(max_days=1, min_days=0, keep_recent=1))
    before = _state(store)
    res = CliRunner().invoke(app, ["prune", "notes", "--dry-run"])
    assert res.exit_code == 0, res.output
    assert _state(store) == before


def test_refusals_are_one_error_line_and_change_nothing(store: Store) -> None:
    from typer.testing import CliRunner

    from gitmem.cli.app import app

    store.write("/k.md", f"key {SECRET}\n")
    before = _state(store)
    cases = [
        (["redact", "notes", "--pattern", "(", "--reason", "x"], 2, "invalid pattern"),
        (["redact", "notes", "--pattern", "x*", "--reason", "x"], 2, "empty string"),
        (["redact", "notes", "--pattern", "nomatch", "--reason", "x"], 2, "matches no version"),
        (["redact", "notes", "--pattern", SECRET, "--reason", "x"], 6, "current content of /k.md"),
        (["redact", "notes", "memver_00000000000000000000000000", "--reason", "x"], 3, "does not exist"),
        (["redact", "notes", "--pattern", SECRET, "--reason", ""], 2, "reason"),
    ]
    for args, code, text in cases:
        res = CliRunner().invoke(app, args)
        assert res.exit_code == code, (args, res.output)
        lines = [ln for ln in res.output.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("Error: ") and text in lines[0], (args, res.output)
        assert _state(store) == before


# ---------------------------------------------------------------------- 12. secrets in paths
def test_12_pattern_redaction_covers_paths(store: Store, workspace: Path) -> None:
    email = "alice.secret@example.com"
    v = store.write(f"/users/{email}.md", "prefers tea\n")
    store.write("/team.md", "shared\n")
    store.write(f"/users/{email}.md", "prefers coffee\n", scope="alice")
    assert v is not None
    store.rename(f"/users/{email}.md", "/users/alice.md")
    store.delete(f"/users/{email}.md", scope="alice")
    r = redact.redact_pattern(store.core, r"alice\.secret@example\.com", reason="pii in path")
    assert r.scopes == ["alice", "main"]
    assert all(email not in t.path for t in r.touched)
    assert store.read("/users/alice.md").content == "prefers tea\n"
    assert email not in git(store.path, "log", "--all", "--format=%B", "--name-only").stdout
    assert scan_store(store.path, email.encode(), workspace=workspace, remembered_pattern=True) == []
    assert verify(store.core).ok
    assert all(email not in x.path for x in store.versions(scope="main") + store.versions(scope="alice"))
    with pytest.raises(ForbiddenError, match="pattern"):
        store.write(f"/users/{email}.md", "again\n")


def test_12_a_live_path_match_is_refused(store: Store) -> None:
    store.write("/users/bob@example.com.md", "x\n")
    before = _state(store)
    with pytest.raises(ForbiddenError, match="rename or delete"):
        redact.redact_pattern(store.core, r"bob@example\.com", reason="pii")
    assert _state(store) == before


def test_2_a_push_keeps_the_store_lock_until_receive_pack_exits(tmp_path: Path) -> None:
    import fcntl

    from gitmem.push.pushlock import acquire_shared, hold_until_exit

    git_dir = tmp_path / "s.git"
    git_dir.mkdir()
    stand_in = subprocess.Popen(["sleep", "1.5"])  # plays receive-pack, the hook's parent
    fd = acquire_shared(git_dir, 1.0)
    assert fd is not None
    hold_until_exit(fd, stand_in.pid)
    probe = os.open(git_dir / "gitmem" / "lock", os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a rewrite must wait
        stand_in.wait()
        for _ in range(200):
            try:
                fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                threading.Event().wait(0.02)
        else:
            pytest.fail("the lock was not released after the push ended")
    finally:
        os.close(probe)


def test_1_killed_between_two_scopes_swaps_is_completed(store: Store, workspace: Path) -> None:
    import signal
    import sys

    a, _b = _two_scopes(store)
    path = store.path
    store.close()
    env = dict(os.environ, GITMEM_FAULT="first-ref")  # one branch moved, the other not yet
    res = subprocess.run([sys.executable, "-c", KILLED, str(path), a.id], env=env, capture_output=True)
    assert res.returncode == -signal.SIGKILL, res.stderr
    with gitmem.open_store(str(path)) as again:  # opening completes the rewrite
        assert not (again.core.gitmem_dir / "journal.json").exists()
        assert verify(again.core).ok
        assert again.read("/k.md", scope="alice").content == "rotated too\n"
        assert scan_store(path, SECRET.encode(), workspace=workspace) == []
