"""A push pays one Python start (pre-receive); post-receive spools the push durably in shell and the
next gitmem process records it (docs/durability.md, "Pushes")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gitmem
from gitmem.engine import ledger
from gitmem.push import spool
from gitmem.push.hookinstall import install_hooks
from gitmem.store import Store


def git(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _push_one(store: Store, tmp_path: Path, name: str = "b.md", env: dict[str, str] | None = None) -> str:
    work = tmp_path / f"work-{name}"
    git("clone", "-q", str(store.path), str(work))
    (work / name).write_text(f"pushed {name}\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", f"add {name}", cwd=work)
    git("push", "-q", "origin", "main", cwd=work, env=env)
    return git("rev-parse", "HEAD", cwd=work).strip()


def _pushes(store: Store) -> list[dict[str, object]]:
    log = store.core.gitmem_dir / "pushes.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_push_starts_python_once(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "alpha\n")
    starts = tmp_path / "starts"
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f'#!/bin/sh\necho start >> "{starts}"\nexec "{sys.executable}" "$@"\n')
    wrapper.chmod(0o755)
    install_hooks(store.path, python=str(wrapper))
    _push_one(store, tmp_path)
    assert starts.read_text().splitlines() == ["start"]  # pre-receive only


def test_spooled_push_is_recorded_by_the_next_open_once(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "alpha\n")
    path = store.path
    store.close()
    new = _push_one(gitmem.open_store(path), tmp_path, env={"GITMEM_ACTOR": "user:bob\nforged"})
    spooled = list((path / "gitmem" / spool.SPOOL_DIR).glob("*.push"))
    assert len(spooled) == 1  # on disk (flushed) before the push returned; nothing recorded yet
    assert not (path / "gitmem" / "pushes.jsonl").exists()
    # The machine may die here: the next gitmem process records the push, the index catches up.
    with gitmem.open_store(path) as s:
        (record,) = _pushes(s)
        from gitmem.push import pushenv

        # the hook's own rules decide who pushed, from the variables the shim recorded
        expected = pushenv.pusher({"GITMEM_ACTOR": "user:bob\nforged"}, [], False)
        assert (record["new"], record["actor"]) == (new, expected)
        assert len(ledger.entries(s.core, kind="push")) == 1
        assert s.read("/b.md").content == "pushed b.md\n"
        assert not list((path / "gitmem" / spool.SPOOL_DIR).glob("*.push"))
    with gitmem.open_store(path) as s:  # exactly once
        assert len(_pushes(s)) == 1
        assert len(ledger.entries(s.core, kind="push")) == 1


def test_pushes_are_recorded_in_order_with_their_options(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "alpha\n")
    store.update_settings(acl={"trust_push_actor": True})
    work = tmp_path / "work"
    git("clone", "-q", str(store.path), str(work))
    commits = []
    for k in range(3):
        (work / f"m{k}.md").write_text(f"{k}\n")
        git("add", "-A", cwd=work)
        git("commit", "-q", "-m", f"m{k}", cwd=work)
        git("push", "-q", "-o", f"actor=user:p{k}", "-o", "x=y z", "origin", "main", cwd=work)
        commits.append(git("rev-parse", "HEAD", cwd=work).strip())
    with gitmem.open_store(store.path) as s:
        records = _pushes(s)
    assert [r["new"] for r in records] == commits
    assert [r["actor"] for r in records] == ["user:p0", "user:p1", "user:p2"]
    assert records[0]["push_options"] == ["actor=user:p0", "x=y z"]


def test_a_torn_spool_file_is_set_aside(store: Store) -> None:
    d = store.core.gitmem_dir / spool.SPOOL_DIR
    d.mkdir(parents=True)
    (d / "1-1.push").write_text(spool.HEADER + "\nupdate " + "0" * 40 + " " + "1" * 40 + " refs/heads/main\n")
    assert spool.drain(store.core) == 0
    assert (d / "1-1.push.bad").exists()
    assert ledger.entries(store.core, kind="push") == []


def test_a_legacy_post_receive_still_gets_the_input(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "alpha\n")
    got = tmp_path / "legacy-input"
    legacy = store.path / "hooks" / "post-receive.legacy"
    legacy.write_text(f'#!/bin/sh\ncat > "{got}"\n')
    legacy.chmod(0o755)
    new = _push_one(store, tmp_path)
    assert got.read_text().split()[1:] == [new, "refs/heads/main"]


@pytest.mark.parametrize(
    "text", ["", "gitmem-push-spool 1\nbogus line\nend\n", "gitmem-push-spool 1\nenv X zz\nend\n"]
)
def test_parse_refuses_what_is_not_a_whole_record(text: str) -> None:
    assert spool.parse(text) is None


def test_the_shim_records_every_variable_the_hook_reads() -> None:
    from gitmem.push import pushenv

    shim = (Path(spool.__file__).parent / "hooks" / "post-receive").read_text()
    line = next(x for x in shim.splitlines() if x.strip().startswith("for var in "))
    recorded = set(line.split("in", 1)[1].split(";")[0].split())
    assert set(spool.SPOOLED_ENV) == {
        *pushenv.SERVER_IDENTITY,
        pushenv.CLIENT_IDENTITY,
        pushenv.SERVER_SESSION_ENV,
    }
    assert recorded == {*spool.SPOOLED_ENV, "GIT_PUSH_OPTION_COUNT"}


def test_a_refused_push_after_a_spooled_one_leaves_a_sound_store(store: Store, tmp_path: Path) -> None:
    """The pre-receive hook of a later push catches the index up, but never records a spooled push
    from inside its quarantine (whose objects git deletes when it refuses the push)."""
    store.write("/a.md", "alpha\n")
    path = store.path
    _push_one(store, tmp_path, "b.md")
    work = tmp_path / "work-b.md"
    (work / "z.md").write_bytes(b"nul\0")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "bad", cwd=work)
    proc = subprocess.run(["git", "push", "-q", "origin", "main"], cwd=work, capture_output=True, check=False)
    assert proc.returncode != 0
    fsck = subprocess.run(["git", "--git-dir", str(path), "fsck", "--full"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stderr
    with gitmem.open_store(path) as s:
        assert len(ledger.entries(s.core, kind="push")) == 1
