"""git smart HTTP on ``gitmem serve`` (``/git/<store>.git``): real ``git clone/fetch/push`` and
``gitmem clone/fetch`` against the running server, with read-write, read-only and wrong tokens."""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

pytest.importorskip("uvicorn")

from serverkit import running, token  # noqa: E402

import gitmem  # noqa: E402
from gitmem.push.clone import clone as gitmem_clone  # noqa: E402
from gitmem.push.clone import fetch as gitmem_fetch  # noqa: E402
from gitmem.store import Store  # noqa: E402


def git(*args: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GITMEM_ACTOR")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def bearer(secret: str) -> list[str]:
    return ["-c", f"http.extraHeader=Authorization: Bearer {secret}"]


def with_basic(url: str, secret: str) -> str:
    return url.replace("http://", f"http://agent:{secret}@")


def commit_all(work: Path, message: str = "edit over http") -> str:
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", message, cwd=work)
    return git("rev-parse", "HEAD", cwd=work).stdout.strip()


def remote_lines(stderr: str) -> list[str]:
    return [line.rstrip() for line in stderr.splitlines() if line.startswith("remote: gitmem:")]


def pushes(store: Store) -> list[dict[str, object]]:
    gitmem.open_store(store.path).close()  # the next gitmem process records the spooled pushes
    path = store.core.gitmem_dir / "pushes.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def status_of(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


@pytest.fixture
def served(store: Store, workspace: Path) -> Iterator[tuple[str, Store]]:
    store.write("/a.md", "alpha\n", actor="user:seed")
    with running(workspace) as url:
        yield url, store


def test_clone_with_basic_and_bearer_push_attributed_to_the_token(
    served: tuple[str, Store], workspace: Path, tmp_path: Path
) -> None:
    url, store = served
    rw = token(workspace, actor="user:alice", stores={"notes": "rw"}, session="sesn_gitpush")
    ro = token(workspace, actor="user:bob", stores={"notes": "ro"})
    repo_url = f"{url}/git/notes.git"

    git("clone", "-q", with_basic(repo_url, rw), str(tmp_path / "basic"))
    git(*bearer(ro), "clone", "-q", repo_url, str(tmp_path / "bearer"))
    assert (tmp_path / "bearer" / "a.md").read_text() == "alpha\n"

    work = tmp_path / "basic"
    (work / "b.md").write_text("beta\n")
    new = commit_all(work)
    git("push", "-q", "origin", "main", cwd=work)
    assert store.core.tip("main") == pygit2.Oid(hex=new)
    record = pushes(store)[-1]
    assert (record["new"], record["actor"], record["session"]) == (new, "user:alice", "sesn_gitpush")
    assert [v.path for v in store.versions(scope="main") if v.commit == new] == ["/b.md"]

    # The read-only token fetches the new commit, but its push is refused before receive-pack runs.
    other = tmp_path / "bearer"
    git(*bearer(ro), "pull", "-q", "--ff-only", cwd=other)
    assert (other / "b.md").read_text() == "beta\n"
    (other / "c.md").write_text("from a reader\n")
    commit_all(other)
    before = (store.core.tip("main"), len(pushes(store)))
    proc = git(*bearer(ro), "push", "origin", "main", cwd=other, check=False)
    assert proc.returncode != 0
    assert "may read store 'notes' but not push to it" in proc.stderr
    assert "403" in proc.stderr
    assert (store.core.tip("main"), len(pushes(store))) == before


def test_pushed_versions_carry_the_token_actor(
    served: tuple[str, Store], workspace: Path, tmp_path: Path
) -> None:
    try:
        import gitmem.engine.receipts  # noqa: F401
    except ImportError:
        pytest.skip("version attribution from the pusher needs the push receipts of gitmem.engine.receipts")
    url, store = served
    rw = token(workspace, actor="user:alice", stores={"notes": "rw"})
    work = tmp_path / "w"
    git("clone", "-q", with_basic(f"{url}/git/notes.git", rw), str(work))
    (work / "b.md").write_text("beta\n")
    new = commit_all(work)
    git("push", "-q", "origin", "main", cwd=work)
    assert {v.actor for v in store.versions(scope="main") if v.commit == new} == {"user:alice"}


def test_violating_push_is_refused_with_the_hook_lines(
    served: tuple[str, Store], workspace: Path, tmp_path: Path
) -> None:
    url, store = served
    rw = token(workspace, actor="user:alice", stores={"notes": "rw"})
    work = tmp_path / "w"
    git("clone", "-q", with_basic(f"{url}/git/notes.git", rw), str(work))
    (work / "nul.md").write_bytes(b"a\0b")
    (work / ".gitmem").mkdir()
    (work / ".gitmem" / "x").write_text("x")
    bad = commit_all(work)
    before = store.core.tip("main")
    proc = git("push", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0
    assert remote_lines(proc.stderr) == [
        f"remote: gitmem: refs/heads/main {bad[:12]}: invalid path '/.gitmem/x': paths under /.gitmem/ are reserved",
        f"remote: gitmem: refs/heads/main {bad[:12]}: /nul.md contains a NUL byte; memories are text",
        "remote: gitmem: push rejected (2 problem(s)); nothing was changed",
    ]
    assert store.core.tip("main") == before


def test_acl_sees_the_token_actor_as_pusher(
    served: tuple[str, Store], workspace: Path, tmp_path: Path
) -> None:
    url, store = served
    store.update_settings(acl={"write": {"main": ["user:alice"]}})
    alice = token(workspace, actor="user:alice", stores={"notes": "rw"})
    mallory = token(workspace, actor="user:mallory", stores={"notes": "rw"})
    work = tmp_path / "w"
    git("clone", "-q", with_basic(f"{url}/git/notes.git", mallory), str(work))
    (work / "b.md").write_text("beta\n")
    commit_all(work)
    proc = git("push", "origin", "main", cwd=work, check=False)
    assert remote_lines(proc.stderr)[0] == (
        "remote: gitmem: refs/heads/main: user:mallory may not write scope 'main' (acl.write['main'])"
    )
    git(*bearer(alice), "push", "-q", with_basic(f"{url}/git/notes.git", alice), "main", cwd=work)
    assert pushes(store)[-1]["actor"] == "user:alice"


def test_refusals_401_404_403(served: tuple[str, Store], workspace: Path, tmp_path: Path) -> None:
    url, _store = served
    gitmem.create_store("secret", home=workspace)
    rw = token(workspace, actor="user:alice", stores={"notes": "rw"})
    scoped = token(workspace, actor="user:carol", stores={"notes": "rw"}, scope="carol")
    refs = "/info/refs?service=git-upload-pack"

    status, headers, _ = status_of(f"{url}/git/notes.git{refs}")
    assert status == 401 and headers["www-authenticate"] == 'Basic realm="gitmem"'
    bad_basic = {"Authorization": "Basic " + base64.b64encode(b"x:gitmem_nope").decode()}
    assert status_of(f"{url}/git/notes.git{refs}", bad_basic)[0] == 401
    proc = git("clone", "-q", f"{url}/git/notes.git", str(tmp_path / "anon"), check=False)
    assert proc.returncode != 0 and not (tmp_path / "anon").exists()

    auth = {"Authorization": f"Bearer {rw}"}
    no_grant = status_of(f"{url}/git/secret.git{refs}", auth)
    missing = status_of(f"{url}/git/nothere.git{refs}", auth)
    assert no_grant[0] == missing[0] == 404
    assert no_grant[2].replace("secret", "X") == missing[2].replace("nothere", "X")  # nothing revealed
    assert status_of(f"{url}/git/notes.git/HEAD", auth)[0] == 404  # the dumb protocol is not served
    assert status_of(f"{url}/git/notes.git/gitmem/index.sqlite", auth)[0] == 404
    assert status_of(f"{url}/git/notes.git/info/refs", auth)[0] == 404
    assert status_of(f"{url}/git/..%2Fetc.git{refs}", auth)[0] == 404
    status, _h, body = status_of(f"{url}/git/notes.git{refs}", {"Authorization": f"Bearer {scoped}"})
    assert status == 403 and "limited to scope 'carol'" in body
    assert status_of(f"{url}/git/notes.git{refs}", auth)[0] == 200


def test_gitmem_clone_and_fetch_over_http(served: tuple[str, Store], workspace: Path, tmp_path: Path) -> None:
    url, store = served
    ro = token(workspace, actor="user:bob", stores={"notes": "ro"})
    dest = tmp_path / "clone"
    result = gitmem_clone(with_basic(f"{url}/git/notes.git", ro), dest)
    assert result.scopes == ["main"] and "refs/gitmem/ledger" in result.gitmem_refs
    assert ro not in result.source  # the secret is not echoed back
    with gitmem.open_store(dest) as clone:
        assert clone.is_clone and clone.name == "notes"  # the settings came along
        assert clone.read("/a.md").content == "alpha\n"
    ledger_before = git("rev-parse", "refs/gitmem/ledger", cwd=dest).stdout.strip()
    store.write("/b.md", "beta\n", actor="user:seed")
    store.update_settings(description="changed", actor="user:seed")  # a ledger entry
    fetched = gitmem_fetch(dest)
    assert fetched.updated == ["main"] and fetched.rewritten == []
    assert git("show", "origin/main:b.md", cwd=dest).stdout == "beta\n"
    assert git("rev-parse", "refs/gitmem/ledger", cwd=dest).stdout.strip() != ledger_before


def test_many_clones_at_once_and_a_push_over_a_megabyte(
    served: tuple[str, Store], workspace: Path, tmp_path: Path
) -> None:
    url, store = served
    rw = token(workspace, actor="user:alice", stores={"notes": "rw"})
    work = tmp_path / "w"
    git("clone", "-q", with_basic(f"{url}/git/notes.git", rw), str(work))
    for i in range(14):  # incompressible: the pack is over 1 MiB, so git sends it chunked
        (work / f"big{i}.md").write_text(secrets.token_hex(45_000))
    new = commit_all(work)
    git("push", "-q", "origin", "main", cwd=work)
    assert store.core.tip("main") == pygit2.Oid(hex=new)

    results: list[int] = []

    def one(i: int) -> None:
        proc = git(
            "clone", "-q", with_basic(f"{url}/git/notes.git", rw), str(tmp_path / f"c{i}"), check=False
        )
        results.append(proc.returncode)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == [0] * 6
    for i in range(6):
        assert git("rev-parse", "HEAD", cwd=tmp_path / f"c{i}").stdout.strip() == new
