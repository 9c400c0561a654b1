"""The push checks and hook entry points with synthetic ``old new ref`` input (no git transport)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pygit2
import pytest

from gitmem import config
from gitmem.engine import ledger
from gitmem.errors import ConflictError, InvalidInputError
from gitmem.push import hook, hookinstall, postreceive, refupdates
from gitmem.store import Store

ROOT = Path(__file__).resolve().parents[2]
NOW = 2_000_000_000
Z = "0" * 40


def commit(
    repo: pygit2.Repository, parent: pygit2.Oid | None, files: dict[str, object], when: int = NOW
) -> str:
    """A commit on top of ``parent`` (no ref moves): ``files`` maps tree paths to bytes, to
    (mode, bytes), or to None (remove)."""
    idx = pygit2.Index()
    if parent is not None:
        idx.read_tree(repo[parent].peel(pygit2.Commit).tree)
    for path, spec in files.items():
        if spec is None:
            idx.remove(path)
            continue
        mode, data = spec if isinstance(spec, tuple) else (0o100644, spec)
        oid = pygit2.Oid(hex="1" * 40) if mode == 0o160000 else repo.create_blob(data)
        idx.add(pygit2.IndexEntry(path, oid, mode))
    tree = idx.write_tree(repo)
    sig = pygit2.Signature("Dev", "dev@example.com", when, 0)
    parents = [parent] if parent is not None else []
    return str(repo.create_commit(None, sig, sig, "plain git commit\n", tree, parents))


def tip(store: Store, scope: str = "main") -> str:
    t = store.core.tip(scope)
    return str(t) if t is not None else Z


def check(store: Store, text: str, **env: str) -> list[str]:
    return hook.pre_receive(store.core.repo, text, env, now=NOW)


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/a.md", "alpha", actor="user:alice")
    return store


def test_parse_updates_reads_lines_and_refuses_garbage() -> None:
    text = f"{Z} {'a' * 40} refs/heads/main\n\n{'b' * 40} {Z} refs/heads/x y\n"
    ups = refupdates.parse_updates(text)
    assert ups == [
        refupdates.RefUpdate(Z, "a" * 40, "refs/heads/main"),
        refupdates.RefUpdate("b" * 40, Z, "refs/heads/x y"),
    ]
    assert ups[0].is_create and ups[1].is_delete and ups[0].scope == "main"
    with pytest.raises(InvalidInputError, match="line 1"):
        refupdates.parse_updates("abc def refs/heads/main\n")


def test_plain_git_commit_is_accepted(seeded: Store) -> None:
    new = commit(seeded.core.repo, seeded.core.tip("main"), {"a.md": b"alpha 2", "notes/b.md": b"beta"})
    assert check(seeded, f"{tip(seeded)} {new} refs/heads/main\n") == []


def test_ref_rules_report_every_bad_ref(seeded: Store) -> None:
    old = tip(seeded)
    other = commit(seeded.core.repo, None, {"x.md": b"x"})
    lines = check(
        seeded,
        f"{Z} {old} refs/tags/v1\n{Z} {old} refs/gitmem/ledger\n{old} {Z} refs/heads/main\n"
        f"{old} {other} refs/heads/main\n{Z} {old} refs/heads/bad..scope\n",
    )
    assert lines[:5] == [
        "gitmem: refs/tags/v1: refs/tags/v1 is not a scope; push to refs/heads/<scope>",
        "gitmem: refs/gitmem/ledger: refs/gitmem/ledger is managed by the gitmem server and cannot be pushed",
        "gitmem: refs/heads/main: deleting scope 'main' is not allowed",
        f"gitmem: refs/heads/main {other[:12]}: {old[:12]}..{other[:12]} is not a fast-forward; "
        "history is rewritten only by the server (redaction, compaction)",
        "gitmem: refs/heads/bad..scope: invalid scope 'bad..scope': no '..', and no '.lock' or '.' at the end",
    ]
    assert lines[-1] == "gitmem: push rejected (5 problem(s)); nothing was changed"


def test_blob_added_and_removed_in_one_push_is_still_refused(seeded: Store) -> None:
    seeded.update_settings(limits=config.Limits(max_memory_bytes=10))
    c1 = commit(seeded.core.repo, seeded.core.tip("main"), {"big.md": b"x" * 11})
    c2 = commit(seeded.core.repo, pygit2.Oid(hex=c1), {"big.md": None})
    lines = check(seeded, f"{tip(seeded)} {c2} refs/heads/main\n")
    assert lines == [
        f"gitmem: refs/heads/main {c1[:12]}: /big.md is 11 bytes; the limit is 10 bytes per memory",
        "gitmem: push rejected (1 problem(s)); nothing was changed",
    ]


def test_content_path_and_mode_rules(seeded: Store) -> None:
    new = commit(
        seeded.core.repo,
        seeded.core.tip("main"),
        {
            "nul.md": b"a\0b",
            "latin1.md": b"caf\xe9",
            ".gitmem/x": b"reserved",
            "link": (0o120000, b"a.md"),
            "run.sh": (0o100755, b"echo"),
            "sub": (0o160000, b""),
        },
    )
    c = new[:12]
    lines = check(seeded, f"{tip(seeded)} {new} refs/heads/main\n")
    assert lines == [
        f"gitmem: refs/heads/main {c}: invalid path '/.gitmem/x': paths under /.gitmem/ are reserved",
        f"gitmem: refs/heads/main {c}: /latin1.md is not valid UTF-8 (byte 3); memories are UTF-8 text",
        f"gitmem: refs/heads/main {c}: /link is a symlink; memories must be plain files (mode 100644)",
        f"gitmem: refs/heads/main {c}: /nul.md contains a NUL byte; memories are text",
        f"gitmem: refs/heads/main {c}: /run.sh is an executable; memories must be plain files (mode 100644)",
        f"gitmem: refs/heads/main {c}: /sub is a submodule; memories must be plain files (mode 100644)",
        "gitmem: push rejected (6 problem(s)); nothing was changed",
    ]


def test_count_and_store_bytes_after_the_push(seeded: Store) -> None:
    seeded.write("/b.md", "beta", scope="team", actor="user:bob")
    seeded.update_settings(limits=config.Limits(max_memories=2, max_store_bytes=20))
    # main holds 1 memory (5 bytes), team 1 (4 bytes): +2 memories and +12 bytes breaks both limits.
    new = commit(seeded.core.repo, seeded.core.tip("main"), {"c.md": b"123456", "d.md": b"123456"})
    lines = check(seeded, f"{tip(seeded)} {new} refs/heads/main\n")
    assert lines[:2] == [
        f"gitmem: refs/heads/main {new[:12]}: scope 'main' would hold 3 memories; the limit is 2",
        "gitmem: refs/heads/main: the store would hold 21 bytes of memories; the limit is 20",
    ]
    smaller = commit(
        seeded.core.repo, seeded.core.tip("main"), {"a.md": None, "c.md": b"123456", "d.md": b"1"}
    )
    assert check(seeded, f"{tip(seeded)} {smaller} refs/heads/main\n") == []


def test_future_dates_and_missing_trailers(seeded: Store) -> None:
    new = commit(seeded.core.repo, seeded.core.tip("main"), {"f.md": b"future"}, when=NOW + 3600)
    assert check(seeded, f"{tip(seeded)} {new} refs/heads/main\n")[:2] == [
        f"gitmem: refs/heads/main {new[:12]}: author date is 3600 seconds in the future; "
        "at most 600 seconds of clock skew allowed",
        f"gitmem: refs/heads/main {new[:12]}: committer date is 3600 seconds in the future; "
        "at most 600 seconds of clock skew allowed",
    ]
    seeded.update_settings(require_trailers=True)
    plain = commit(seeded.core.repo, seeded.core.tip("main"), {"p.md": b"plain"})
    assert check(seeded, f"{tip(seeded)} {plain} refs/heads/main\n")[0] == (
        f"gitmem: refs/heads/main {plain[:12]}: missing or bad gitmem trailers: "
        "Gitmem-Version is missing or not a memver_ id"
    )


def test_library_commits_pass_require_trailers(seeded: Store) -> None:
    seeded.update_settings(require_trailers=True)
    old = tip(seeded)
    seeded.write("/a.md", "alpha 2", actor="user:alice")
    assert check(seeded, f"{old} {tip(seeded)} refs/heads/main\n") == []


def test_denylisted_blob_and_commit_are_refused(seeded: Store) -> None:
    c1 = commit(seeded.core.repo, seeded.core.tip("main"), {"s.md": b"secret"})
    blob = str(seeded.core.repo[c1].peel(pygit2.Commit).tree["s.md"].id)
    (seeded.core.gitmem_dir / "denylist").write_text(f"# redaction red_1\n{blob}\n{c1}  # retired\n")
    lines = check(seeded, f"{tip(seeded)} {c1} refs/heads/main\n")
    assert lines == [
        f"gitmem: refs/heads/main {c1[:12]}: commit {c1} was retired by a redaction or compaction; fetch again",
        f"gitmem: refs/heads/main {c1[:12]}: /s.md is content that was redacted from this store",
        "gitmem: push rejected (2 problem(s)); nothing was changed",
    ]


def test_archived_store_and_acl(seeded: Store) -> None:
    new = commit(seeded.core.repo, seeded.core.tip("main"), {"n.md": b"n"})
    text = f"{tip(seeded)} {new} refs/heads/main\n"
    seeded.update_settings(acl={"write": {"main": ["user:alice"]}, "trust_push_actor": True})
    assert check(seeded, text, REMOTE_USER="alice") == []
    assert check(seeded, text, GIT_PUSH_OPTION_COUNT="1", GIT_PUSH_OPTION_0="actor=user:alice") == []
    assert check(seeded, text, GL_USERNAME="mallory")[0] == (
        "gitmem: refs/heads/main: user:mallory may not write scope 'main' (acl.write['main'])"
    )
    assert check(seeded, f"{Z} {new} refs/heads/other\n", GITMEM_ACTOR="user:alice")[0] == (
        "gitmem: refs/heads/other: no acl.write entry allows writing scope 'other'"
    )
    seeded.update_settings(archived_at="2026-01-01T00:00:00Z")
    assert check(seeded, text, REMOTE_USER="alice")[0] == (
        "gitmem: refs/heads/main: store 'notes' was archived at 2026-01-01T00:00:00Z and is read-only"
    )


def test_post_receive_indexes_plain_commits_and_logs_the_push(seeded: Store) -> None:
    old = tip(seeded)
    new = commit(seeded.core.repo, seeded.core.tip("main"), {"a.md": b"alpha 2", "b.md": b"beta"})
    seeded.core.repo.references["refs/heads/main"].set_target(new)
    env = {"GITMEM_ACTOR": "user:alice", "GIT_PUSH_OPTION_COUNT": "1", "GIT_PUSH_OPTION_0": "ci=1"}
    assert postreceive.post_receive(seeded.core.repo, f"{old} {new} refs/heads/main\n", env) == []
    rows = seeded.core.index.db.execute(
        "SELECT path, operation, actor FROM versions WHERE commit_id=? ORDER BY path", (new,)
    ).fetchall()
    assert rows == [("/a.md", "modified", "git:dev@example.com"), ("/b.md", "created", "git:dev@example.com")]
    record = json.loads((seeded.core.gitmem_dir / "pushes.jsonl").read_text().splitlines()[-1])
    assert {k: record[k] for k in ("ref", "old", "new", "actor", "push_options")} == {
        "ref": "refs/heads/main",
        "old": old,
        "new": new,
        "actor": "user:alice",
        "push_options": ["ci=1"],
    }
    entry = ledger.entries(seeded.core, kind="push")[-1]
    assert entry.actor == "user:alice" and entry.data["push_options"] == ["ci"]
    assert new not in json.dumps(entry.data)  # the public ledger holds keyed digests of commit ids


def test_shims_match_package_data_and_record_the_interpreter(store: Store) -> None:
    for name in hookinstall.HOOK_NAMES:
        shipped = (ROOT / "hooks" / name).read_bytes()
        assert shipped == (ROOT / "gitmem" / "push" / "hooks" / name).read_bytes()
        installed = (store.path / "hooks" / name).read_text()
        assert hookinstall.MARKER in installed
        assert f"GITMEM_PYTHON={sys.executable} # gitmem:python" in installed
        assert os.stat(store.path / "hooks" / name).st_mode & stat.S_IXUSR
    cfg = store.core.repo.config
    for key, value in hookinstall.RECEIVE_CONFIG.items():
        assert (cfg.get_bool(key) if isinstance(value, bool) else cfg.get_int(key)) == value


def test_install_is_idempotent_and_keeps_a_foreign_hook(store: Store) -> None:
    hooks = store.path / "hooks"
    assert {h.action for h in hookinstall.install_hooks(store.path)} == {"unchanged"}
    (hooks / "post-receive").write_text("#!/bin/sh\necho foreign\n")
    result = hookinstall.install_hooks(store.path)
    assert [h.action for h in result] == ["unchanged", "installed"]
    assert (hooks / "post-receive.legacy").read_text() == "#!/bin/sh\necho foreign\n"
    assert result[1].legacy == hooks / "post-receive.legacy"
    assert hookinstall.is_gitmem_hook(hooks / "post-receive")
    (hooks / "post-receive").write_text("#!/bin/sh\necho another\n")
    with pytest.raises(ConflictError, match="post-receive.legacy exists too"):
        hookinstall.install_hooks(store.path)


def test_hook_reads_settings_through_a_cache_that_follows_the_file(seeded: Store) -> None:
    from gitmem.engine.index import INDEX_FILE

    assert hook.INDEX_FILE == INDEX_FILE
    new = commit(seeded.core.repo, seeded.core.tip("main"), {"n.md": b"n"})
    text = f"{tip(seeded)} {new} refs/heads/main\n"
    cache = seeded.core.gitmem_dir / config.SETTINGS_CACHE
    cache.unlink(missing_ok=True)
    assert check(seeded, text) == []
    assert not cache.exists()  # a settings file younger than the racy window is read, not cached
    old = time.time() - 3600
    os.utime(seeded.path / config.SETTINGS_FILE, (old, old))
    assert check(seeded, text) == []
    assert cache.exists()
    seeded.update_settings(archived_at="2026-01-01T00:00:00Z")
    assert "archived" in check(seeded, text)[0]


def test_stale_index_is_caught_up_before_counting(seeded: Store) -> None:
    seeded.update_settings(limits=config.Limits(max_memories=2))
    plain = commit(seeded.core.repo, seeded.core.tip("main"), {"b.md": b"b"})
    seeded.core.repo.references["refs/heads/main"].set_target(plain)  # moved behind the index's back
    new = commit(seeded.core.repo, pygit2.Oid(hex=plain), {"c.md": b"c"})
    assert check(seeded, f"{plain} {new} refs/heads/main\n")[0] == (
        f"gitmem: refs/heads/main {new[:12]}: scope 'main' would hold 3 memories; the limit is 2"
    )


def test_a_stale_index_is_counted_forward_without_a_catch_up(seeded: Store) -> None:
    """Pushes only spool in post-receive, so the index lags behind git: pre-receive counts from the
    index's tips plus the tree diff since, on every scope, and writes nothing to the index."""
    seeded.write("/t.md", "team", scope="team", actor="user:bob")
    seeded.update_settings(limits=config.Limits(max_memories=3, max_store_bytes=30))
    repo = seeded.core.repo
    index = seeded.core.gitmem_dir / hook.INDEX_FILE
    # Behind the index's back: main gains 2 memories (1 + 10 bytes), team one of 10 bytes.
    moved = commit(repo, seeded.core.tip("main"), {"b.md": b"b", "c.md": b"0123456789"})
    repo.references["refs/heads/main"].set_target(moved)
    team = commit(repo, seeded.core.tip("team"), {"u.md": b"0123456789"})
    repo.references["refs/heads/team"].set_target(team)
    seeded.core.index.close()
    before = index.read_bytes()
    stats, total = hook.scope_stats(repo, seeded.path, {"main", "team"})
    assert stats == {"main": (3, 16), "team": (2, 14)} and total == 30
    new = commit(repo, pygit2.Oid(hex=moved), {"d.md": b"d"})
    assert check(seeded, f"{moved} {new} refs/heads/main\n")[:2] == [
        f"gitmem: refs/heads/main {new[:12]}: scope 'main' would hold 4 memories; the limit is 3",
        "gitmem: refs/heads/main: the store would hold 31 bytes of memories; the limit is 30",
    ]
    assert index.read_bytes() == before  # no catch-up ran


def test_an_index_tip_that_is_gone_makes_the_hook_catch_up(seeded: Store) -> None:
    """A tip the index saw that the store no longer has (history rewritten and purged): the
    counts come from a catch-up instead."""
    import sqlite3

    seeded.update_settings(limits=config.Limits(max_memories=1))
    seeded.core.index.close()
    db = sqlite3.connect(seeded.core.gitmem_dir / hook.INDEX_FILE)
    with db:
        db.execute("UPDATE scopes SET tip=?, memories=50 WHERE scope='main'", ("3" * 40,))
    db.close()
    stats, _total = hook.scope_stats(seeded.core.repo, seeded.path, {"main"})
    assert stats == {"main": (1, 5)}
    new = commit(seeded.core.repo, seeded.core.tip("main"), {"b.md": b"b"})
    assert (
        "scope 'main' would hold 2 memories; the limit is 1"
        in check(seeded, f"{tip(seeded)} {new} refs/heads/main\n")[0]
    )


def test_the_hook_replays_the_intent_log_after_a_reboot(
    seeded: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An acknowledged write whose ref move a power loss undid is replayed before the push is
    judged (one read of the log's first line when nothing is due)."""
    from gitmem.git import intent

    v = seeded.write("/b.md", "beta", actor="user:alice")
    assert v is not None
    acked = seeded.core.tip("main")
    assert acked is not None
    parent = seeded.core.commit(acked).parents[0].id
    assert not hook.intent_replay_due(seeded.path)
    subprocess.run(
        ["git", "--git-dir", str(seeded.path), "update-ref", "refs/heads/main", str(parent)], check=True
    )
    monkeypatch.setattr(intent, "boot_id", lambda: "another-boot")
    assert hook.intent_replay_due(seeded.path)
    new = commit(seeded.core.repo, acked, {"c.md": b"c"})
    assert check(seeded, f"{acked} {new} refs/heads/main\n") == []
    assert seeded.core.repo.references["refs/heads/main"].target == acked
    assert not hook.intent_replay_due(seeded.path)


def test_a_file_and_a_directory_at_one_path_is_refused(seeded: Store) -> None:
    # libgit2 cannot build such a tree; git mktree can, and receive.fsckObjects may be off on a server.
    def mktree(lines: str) -> str:
        run = subprocess.run(["git", "mktree"], cwd=seeded.path, input=lines, capture_output=True, text=True)
        return run.stdout.strip()

    blob = str(seeded.core.repo.create_blob(b"x"))
    sub = mktree(f"100644 blob {blob}\tx\n")
    tree = mktree(f"100644 blob {blob}\ta\n040000 tree {sub}\ta\n100644 blob {blob}\tm.md\n")
    sig = pygit2.Signature("Dev", "dev@example.com", NOW, 0)
    new = str(
        seeded.core.repo.create_commit(
            None, sig, sig, "dup\n", pygit2.Oid(hex=tree), [seeded.core.tip("main")]
        )
    )
    assert check(seeded, f"{tip(seeded)} {new} refs/heads/main\n")[0] == (
        f"gitmem: refs/heads/main {new[:12]}: /a is both a file and a directory"
    )


def test_hooks_install_cli(store: Store, workspace: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gitmem.cli.app import app
    from gitmem.push.clone import clone

    runner = CliRunner()
    (store.path / "hooks" / "pre-receive").unlink()
    result = runner.invoke(app, ["hooks", "install", "--all", "--home", str(workspace)])
    assert (result.exit_code, result.stdout) == (
        0,
        "notes\tpre-receive\tinstalled\nnotes\tpost-receive\tunchanged\n",
    )
    assert runner.invoke(app, ["hooks", "install", "--home", str(workspace)]).exit_code == 2
    clone("notes", tmp_path / "c", home=workspace)
    refused = runner.invoke(app, ["hooks", "install", str(tmp_path / "c")])
    assert refused.exit_code == 6 and "is a clone" in refused.stderr
