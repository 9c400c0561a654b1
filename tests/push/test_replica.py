"""A read replica kept current by mirror pushes (docs/git-servers.md, "A read replica"): a real bare
primary store with gitmem's hooks, a real bare replica with gitmem's replica hook, real ``git push``.
Writes reach the replica; a redaction on the primary reaches it too and its bytes leave every object
of the replica; a replica that is down never fails a push and catches up at the next mirror push."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from secret_scan import find_secret, scan_store
from typer.testing import CliRunner

from gitmem.cli.app import app
from gitmem.push.replica import add_replica, init_replica, last_pushes, push_replicas, replicas
from gitmem.store import Store

runner = CliRunner()
SECRET = b"vault combination 7731-mauve-otter-quill"


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def refs(git_dir: Path) -> dict[str, str]:
    out = git(f"--git-dir={git_dir}", "for-each-ref", "--format=%(refname) %(objectname)").stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def fsck_clean(git_dir: Path) -> None:
    proc = git(f"--git-dir={git_dir}", "fsck", "--full", "--no-dangling", check=False)
    assert proc.returncode == 0 and not proc.stdout.strip() and "error" not in proc.stderr, proc.stderr


def push_file(work: Path, name: str, data: bytes, message: str) -> subprocess.CompletedProcess[str]:
    (work / name).write_bytes(data)
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", message, cwd=work)
    return git("push", "origin", "main", cwd=work)


@pytest.fixture
def primary(store: Store) -> Store:
    store.write("/a.md", "alpha", actor="user:alice")
    return store


@pytest.fixture
def replica(primary: Store, tmp_path: Path) -> Path:
    path = init_replica(tmp_path / "replica.git")
    add_replica(primary.core, str(path))
    [result] = push_replicas(primary.path)
    assert result.ok and result.purged is None  # first push: nothing was rewritten
    return path


@pytest.fixture
def work(primary: Store, replica: Path, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    git("clone", "-q", f"file://{primary.path}", str(work))
    return work


def test_library_writes_and_pushes_reach_the_replica(
    primary: Store, replica: Path, work: Path, tmp_path: Path
) -> None:
    assert refs(replica) == refs(primary.path)
    assert any(r.startswith("refs/gitmem/") for r in refs(replica))  # the ledger goes along

    primary.write("/lib.md", "by the library", actor="user:alice")  # no push: replica push sends it
    assert refs(replica) != refs(primary.path)
    [result] = push_replicas(primary.path)
    assert result.ok and refs(replica) == refs(primary.path)

    git("pull", "-q", "origin", "main", cwd=work)
    proc = push_file(work, "b.md", b"beta\n", "add b")  # the post-receive shim mirrors it
    assert "not updated" not in proc.stderr
    assert refs(replica) == refs(primary.path)
    reader = tmp_path / "reader"
    git("clone", "-q", str(replica), str(reader))
    assert (reader / "b.md").read_bytes() == b"beta\n"
    assert (reader / "lib.md").read_text() == "by the library"
    fsck_clean(replica)


def _push_secret_and_rotate(primary: Store, work: Path) -> str:
    """Push the secret, then push it away again (a live memory's content cannot be redacted);
    returns the id of the version that created it."""
    push_file(work, "secret.md", SECRET + b"\n", "add secret")
    push_file(work, "secret.md", b"rotated\n", "rotate secret")
    [created] = [
        v for v in primary.versions(scope="main") if v.path == "/secret.md" and v.operation == "created"
    ]
    return created.id


def test_a_redaction_is_pushed_to_the_replica_and_purged_there(
    primary: Store, replica: Path, work: Path
) -> None:
    push_file(work, "secret.md", SECRET + b"\n", "add secret")
    assert find_secret([replica], SECRET, git_dirs=[replica])  # replicated: the scan sees it
    push_file(work, "secret.md", b"rotated\n", "rotate secret")
    [created] = [
        v for v in primary.versions(scope="main") if v.path == "/secret.md" and v.operation == "created"
    ]
    primary.redact(created.id, reason="leaked credential", actor="user:root")

    assert scan_store(primary.path, SECRET) == []
    assert find_secret([replica], SECRET, git_dirs=[replica]) == []
    assert refs(replica) == refs(primary.path)
    fsck_clean(primary.path)
    fsck_clean(replica)
    last = last_pushes(primary.path)["replica"]
    assert last.ok and last.purged is not None and last.purged > 0
    # A reader of the replica sees the redacted history, as on the primary.
    log = git(f"--git-dir={replica}", "log", "-p", "main").stdout
    assert "[redacted: redact_" in log and SECRET.decode() not in log


def test_a_push_while_the_replica_is_down_lands_and_the_replica_catches_up(
    primary: Store, replica: Path, work: Path
) -> None:
    version = _push_secret_and_rotate(primary, work)
    assert find_secret([replica], SECRET, git_dirs=[replica])
    away = replica.with_name("replica.away")
    replica.rename(away)  # unreachable
    proc = push_file(work, "b.md", b"beta\n", "add b")
    assert "remote: gitmem: warning: replica replica not updated" in proc.stderr
    assert primary.read("/b.md").content == "beta\n"  # the push landed

    # A redaction while the replica is down: the redaction succeeds, the failed push is recorded.
    primary.redact(version, reason="leaked credential", actor="user:root")
    assert scan_store(primary.path, SECRET) == []
    last = last_pushes(primary.path)["replica"]
    assert not last.ok and last.message

    away.rename(replica)  # back, still holding the old history and the secret
    assert find_secret([replica], SECRET, git_dirs=[replica])
    git("fetch", "-q", "origin", cwd=work)
    git("reset", "-q", "--hard", "origin/main", cwd=work)  # onto the redacted history
    push_file(work, "c.md", b"gamma\n", "add c")  # the next push's mirror push catches it up
    assert refs(replica) == refs(primary.path)
    assert find_secret([replica], SECRET, git_dirs=[replica]) == []
    fsck_clean(replica)


def test_the_cli_sets_up_pushes_and_lists_replicas(primary: Store, workspace: Path, tmp_path: Path) -> None:
    home = ["--home", str(workspace)]
    path = tmp_path / "r2.git"
    res = runner.invoke(app, ["replica", "init", str(path)])
    assert res.exit_code == 0, res.output
    assert runner.invoke(app, ["replica", "init", str(path)]).exit_code == 0  # idempotent
    res = runner.invoke(app, ["replica", "add", "notes", str(path), "--name", "r2", *home])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["replica", "add", "notes", str(path), "--name", "r2", *home])
    assert res.exit_code == 4  # a second remote of that name: a conflict
    assert "already has a remote named 'r2'" in res.output
    res = runner.invoke(app, ["replica", "list", "notes", *home])
    assert "r2\t" in res.output and "not pushed by gitmem yet" in res.output
    res = runner.invoke(app, ["replica", "push", "notes", *home])
    assert res.exit_code == 0 and "r2\t" in res.output and "updated" in res.output
    assert refs(path) == refs(primary.path)
    res = runner.invoke(app, ["replica", "push", "notes", "--name", "nope", *home])
    assert res.exit_code == 3 and "no replica named 'nope'" in res.output

    path.rename(tmp_path / "gone")
    res = runner.invoke(app, ["replica", "push", "notes", *home])
    assert res.exit_code == 1 and "not updated" in res.output
    assert "last push failed" in runner.invoke(app, ["replica", "list", "notes", *home]).output


def test_bad_replica_input_changes_nothing(primary: Store, tmp_path: Path) -> None:
    from gitmem.errors import ConflictError, InvalidInputError

    for name in ("", "-x", "a b", "../up", "x" * 80):
        with pytest.raises(InvalidInputError):
            add_replica(primary.core, str(tmp_path / "r.git"), name)
    for url in ("", "--upload-pack=touch /tmp/x", "a\nb"):
        with pytest.raises(InvalidInputError):
            add_replica(primary.core, url, "r")
    assert replicas(primary.path) == []
    worktree = tmp_path / "nonbare"
    git("init", "-q", str(worktree))
    with pytest.raises(ConflictError, match="not a bare repository"):
        init_replica(worktree)
    theirs = tmp_path / "theirs.git"
    git("init", "-q", "--bare", str(theirs))
    (theirs / "hooks" / "post-receive").write_text("#!/bin/sh\necho mine\n")
    with pytest.raises(ConflictError, match="not gitmem's replica hook"):
        init_replica(theirs)
    assert (theirs / "hooks" / "post-receive").read_text() == "#!/bin/sh\necho mine\n"
