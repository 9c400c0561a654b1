"""Identity that holds (docs/identity.md): real pushes over file:// and git daemon with forged
trailers, forged compaction roots, malformed trailers, back-dated roots and identity variables set
by the server vs the client."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
import yaml

import gitmem
from gitmem.audit.timeline import audit
from gitmem.audit.verify import verify
from gitmem.engine import ledger
from gitmem.errors import ConfigError, InvalidInputError
from gitmem.model.paths import validate_path, validate_scope
from gitmem.store import Store
from tests.helpers import patience

IDENTITY_VARS = ("REMOTE_USER", "GL_USERNAME", "GITEA_PUSHER_NAME", "GL_USER", "GITMEM_ACTOR")


def git(
    *args: str, cwd: Path | None = None, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in IDENTITY_VARS}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env={**base, **(env or {})}, capture_output=True, text=True, timeout=60
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed:\n{proc.stderr}")
    return proc


def gitmem_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in IDENTITY_VARS}
    proc = subprocess.run(
        [sys.executable, "-m", "gitmem", *args], env=env, capture_output=True, text=True, timeout=120
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"gitmem {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def remote_lines(stderr: str) -> list[str]:
    return [line.rstrip() for line in stderr.splitlines() if line.startswith("remote: gitmem:")]


def commit(work: Path, message: str, env: dict[str, str] | None = None) -> str:
    git("add", "-A", cwd=work)
    git("commit", "-q", "--allow-empty", "-m", message, cwd=work, env=env)
    return git("rev-parse", "HEAD", cwd=work).stdout.strip()


def clone(store: Store, tmp_path: Path, name: str = "work") -> Path:
    work = tmp_path / name
    git("clone", "-q", f"file://{store.path}", str(work))
    return work


def forged(vid: str, mid: str, actor: str = "user:admin", session: str = "sesn_forged") -> str:
    return (
        "modified /secret.md\n\n"
        f"Gitmem-Version: {vid}\nGitmem-Memory: {mid}\nGitmem-Operation: created\n"
        f"Gitmem-Session: {session}\nGitmem-Actor: {actor}\n"
    )


def ids(store: Store) -> dict[str, tuple[str, str, str]]:
    store.core.index.ensure_all()  # caught up from git (post-receive no longer indexes the push)
    rows = store.core.index.version_rows()
    return {r.id: (r.scope, r.commit_id, r.actor) for r in rows}


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/secret.md", "the real secret\n", actor="user:alice")
    store.write("/secret.md", "the real secret, edited\n", actor="user:alice")
    return store


# ---------------------------------------------------------------------- 1 and 2: forged trailers
def test_forged_version_id_on_a_new_scope_never_owns_the_id(seeded: Store, tmp_path: Path) -> None:
    first = seeded.versions(path="/secret.md")[-1]  # superseded
    work = clone(seeded, tmp_path)
    git("checkout", "-q", "--orphan", "evil", cwd=work)
    git("rm", "-q", "-rf", ".", cwd=work)
    (work / "secret.md").write_text("decoy\n")
    cid = commit(work, forged(first.id, first.memory_id))
    git("push", "-q", "origin", "evil", cwd=work)
    before = ids(seeded)
    assert before[first.id][0] == "main"  # the incremental index never gave it away
    pushed = [v for v in seeded.versions(scope="evil") if v.commit == cid]
    assert len(pushed) == 1 and pushed[0].id != first.id
    assert pushed[0].actor == "unknown" and pushed[0].session is None  # forged actor and session ignored
    gitmem_cli("reindex", "notes")
    seeded.core.index.close()
    assert ids(seeded) == before  # a rebuild gives every id to the same commit
    assert seeded.read("/secret.md", version=first.id).content == "the real secret\n"


def test_session_comes_from_a_push_option_and_bad_ones_are_refused(seeded: Store, tmp_path: Path) -> None:
    work = clone(seeded, tmp_path)
    (work / "b.md").write_text("beta\n")
    cid = commit(work, "plain edit")
    git("push", "-q", "-o", "session=sesn_push1", "origin", "main", cwd=work)
    (v,) = [v for v in seeded.versions() if v.commit == cid]
    assert v.session == "sesn_push1" and v.actor == "unknown"
    (work / "c.md").write_text("gamma\n")
    commit(work, "another")
    proc = git("push", "-o", "session=bad id!", "origin", "main", cwd=work, check=False)
    assert proc.returncode != 0 and any("not a valid session id" in ln for ln in remote_lines(proc.stderr))


def test_trailers_are_believed_only_from_trusted_pushers(seeded: Store, tmp_path: Path) -> None:
    seeded.update_settings(acl={"trust_trailers": ["user:mirror"]}, actor="user:root")
    work = clone(seeded, tmp_path)
    vid, mid = "memver_01JAAAAAAAAAAAAAAAAAAAAAAA", "mem_01JAAAAAAAAAAAAAAAAAAAAAAA"
    (work / "m.md").write_text("mirrored\n")
    cid = commit(work, forged(vid, mid, actor="user:origin-author", session="sesn_orig"))
    git("push", "-q", "origin", "main", cwd=work, env={"GITMEM_ACTOR": "user:mirror"})
    (v,) = [v for v in seeded.versions() if v.commit == cid]
    assert (v.id, v.memory_id, v.actor, v.session) == (vid, mid, "user:origin-author", "sesn_orig")
    # Even a trusted pusher cannot claim an id the store already has.
    old = seeded.versions(path="/secret.md")[-1]
    (work / "n.md").write_text("again\n")
    bad = commit(work, forged(old.id, "mem_01JBBBBBBBBBBBBBBBBBBBBBBB"))
    proc = git("push", "origin", "main", cwd=work, check=False, env={"GITMEM_ACTOR": "user:mirror"})
    assert proc.returncode != 0
    assert f"remote: gitmem: refs/heads/main {bad[:12]}: {old.id} is a version this store already has" in (
        remote_lines(proc.stderr)
    )


def test_forged_compaction_root_is_refused(seeded: Store, tmp_path: Path) -> None:
    work = clone(seeded, tmp_path)
    git("checkout", "-q", "--orphan", "fake", cwd=work)
    msg = (
        "compacted 9 versions\n\nGitmem-Compaction: compact_01JAAAAAAAAAAAAAAAAAAAAAAA\n"
        "Gitmem-Actor: service:gitmem\n"
        "Gitmem-Snapshot: memver_01JAAAAAAAAAAAAAAAAAAAAAAA mem_01JAAAAAAAAAAAAAAAAAAAAAAA created 1 "
        "user:alice - /secret.md\n"
    )
    cid = commit(work, msg)
    proc = git("push", "origin", "fake", cwd=work, check=False)
    assert proc.returncode != 0
    assert (
        f"remote: gitmem: refs/heads/fake {cid[:12]}: compaction roots are written by the gitmem server only; "
        "push plain commits"
    ) in remote_lines(proc.stderr)
    assert "fake" not in seeded.scopes()


# ---------------------------------------------------------------------- 3: malformed trailers
def test_malformed_trailer_is_refused_and_readers_never_crash(seeded: Store, tmp_path: Path) -> None:
    work = clone(seeded, tmp_path)
    git("checkout", "-q", "--orphan", "junk", cwd=work)
    cid = commit(
        work, "x\n\nGitmem-Compaction: compact_01JAAAAAAAAAAAAAAAAAAAAAAA\nGitmem-Snapshot: garbage\n"
    )
    proc = git("push", "origin", "junk", cwd=work, check=False)
    assert proc.returncode != 0
    assert (
        f"remote: gitmem: refs/heads/junk {cid[:12]}: malformed gitmem trailers: a Gitmem-Snapshot trailer is "
        "malformed"
    ) in remote_lines(proc.stderr)
    # The same commit put in by hand (no hook): every reader treats it as plain git.
    git("--git-dir", str(seeded.path), "fetch", "-q", str(work), "junk:refs/heads/junk")
    assert str(pygit2.Repository(str(seeded.path)).references["refs/heads/junk"].target) == cid
    seeded.core.index.rebuild()
    (plain,) = seeded.versions(scope="junk")  # read as a plain git commit
    assert plain.commit == cid and plain.actor == "git:tester@example.com"
    report = verify(seeded.core, raise_on_failure=False)
    trailers = next(c for c in report.checks if c.name == "trailers")
    assert not trailers.ok and "malformed trailers" in (trailers.detail or "")
    assert gitmem_cli("log", "notes", "-s", "junk").returncode == 0
    assert gitmem_cli("export", "notes").returncode == 0


# ---------------------------------------------------------------------- 4: who pushed
def test_server_identity_outranks_the_client(seeded: Store, tmp_path: Path) -> None:
    work = clone(seeded, tmp_path)
    (work / "a.md").write_text("a\n")
    cid = commit(work, "a")
    env = {"REMOTE_USER": "bob", "GITMEM_ACTOR": "user:mallory"}
    git("push", "-q", "origin", "main", cwd=work, env=env)
    (v,) = [v for v in seeded.versions() if v.commit == cid]
    assert v.actor == "user:bob"
    (work / "b.md").write_text("b\n")
    cid = commit(work, "b")
    git("push", "-q", "origin", "main", cwd=work, env={"GITMEM_ACTOR": "user:dave"})
    assert [v.actor for v in seeded.versions() if v.commit == cid] == ["user:dave"]
    push = ledger.entries(seeded.core, kind="push")[-1]
    assert push.actor == "user:dave" and push.data["identity"] == "GITMEM_ACTOR"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def daemon(workspace: Path) -> Iterator[str]:
    """git daemon on 127.0.0.1 whose environment names the pusher, as a git host's would."""
    base = workspace / "stores"
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in IDENTITY_VARS}
    env["GITEA_PUSHER_NAME"] = "carol"
    proc = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--enable=receive-pack", "--listen=127.0.0.1",
         f"--port={port}", f"--base-path={base}", str(base)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        deadline = patience(10)
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("git daemon did not start") from None
                time.sleep(0.05)
        yield f"git://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


def test_git_daemon_push_is_the_servers_pusher_and_identity_can_be_required(
    seeded: Store, daemon: str, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    git("clone", "-q", f"{daemon}/{seeded.id}.git", str(work))
    (work / "d.md").write_text("d\n")
    cid = commit(work, "forged\n\nGitmem-Actor: user:admin\n")
    git("push", "-q", "origin", "main", cwd=work, env={"GITMEM_ACTOR": "user:mallory"})
    assert [v.actor for v in seeded.versions() if v.commit == cid] == ["user:carol"]
    # Unauthenticated pushes are refused when the acl requires identity.
    seeded.update_settings(acl={"require_identity": True}, actor="user:root")
    work2 = clone(seeded, tmp_path, "work2")
    (work2 / "e.md").write_text("e\n")
    commit(work2, "e")
    proc = git("push", "origin", "main", cwd=work2, check=False)
    assert proc.returncode != 0
    assert "requires an authenticated pusher" in proc.stderr


# ---------------------------------------------------------------------- 9: back-dated roots
def test_back_dated_root_gets_the_receive_time_and_survives_prune(seeded: Store, tmp_path: Path) -> None:
    seeded.update_settings(retention=gitmem.config.Retention(min_days=30, max_days=31, keep_recent=0))
    work = clone(seeded, tmp_path)
    git("checkout", "-q", "--orphan", "old", cwd=work)
    git("rm", "-q", "-rf", ".", cwd=work)
    (work / "x.md").write_text("pushed seconds ago\n")
    old = "2025-01-01T00:00:00Z"
    commit(work, "ancient", env={"GIT_AUTHOR_DATE": old, "GIT_COMMITTER_DATE": old})
    start = time.time()
    git("push", "-q", "origin", "old", cwd=work)
    (v,) = seeded.versions(scope="old")
    assert v.created_at.timestamp() >= start - 5
    gitmem_cli("prune", "notes", "-s", "old", check=False)
    seeded.core.index.close()
    assert [x.id for x in seeded.versions(scope="old")] == [v.id]
    assert seeded.read("/x.md", scope="old").content == "pushed seconds ago\n"


# ---------------------------------------------------------------------- 10, 11: settings, names
def test_settings_are_validated_by_type_naming_file_and_key(store: Store) -> None:
    path = store.path / "gitmem.yaml"
    data = yaml.safe_load(path.read_text())
    for acl, key in (
        ({"trust_push_actor": "false"}, "acl.trust_push_actor"),
        ({"write": ["main", "user:*"]}, "acl.write"),
        ({"write": {"main": "user:alice"}}, "acl.write.main"),
        ({"trusted": True}, "acl.trusted"),
    ):
        path.write_text(yaml.safe_dump({**data, "acl": acl}))
        with pytest.raises(ConfigError) as exc:
            gitmem.open_store("notes").settings  # noqa: B018
        assert str(path) in exc.value.message and key in exc.value.message
        proc = gitmem_cli("store", "show", "notes", check=False)
        assert proc.returncode != 0 and key in proc.stderr and "Traceback" not in proc.stderr
    path.write_text(yaml.safe_dump(data))
    proc = gitmem_cli("store", "update", "notes", "--acl", '{"write": ["x"]}', check=False)
    assert proc.returncode == 2 and "acl.write" in proc.stderr


def test_git_special_names_are_refused(store: Store, tmp_path: Path) -> None:
    for scope in ("HEAD", "FETCH_HEAD", "stash"):
        with pytest.raises(InvalidInputError):
            validate_scope(scope)
    for path in ("/.mailmap", "/.gitattributes", "/docs/.gitignore", "/.gitmodules"):
        with pytest.raises(InvalidInputError, match="git itself interprets"):
            validate_path(path)
    with pytest.raises(InvalidInputError):
        store.write("/.mailmap", "Evil <a@b> Alice <alice@example.com>\n")
    store.write("/a.md", "a\n")
    work = clone(store, tmp_path)
    (work / ".mailmap").write_text("Evil <e@x> <tester@example.com>\n")
    commit(work, "mailmap")
    proc = git("push", "origin", "HEAD:refs/heads/HEAD", "main", cwd=work, check=False)
    assert proc.returncode != 0
    lines = remote_lines(proc.stderr)
    assert any("git treats that name specially" in ln for ln in lines)
    assert any("'.mailmap' is a file git itself interprets" in ln for ln in lines)


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_another_users_store_is_permission_denied() -> None:
    import tempfile

    top = Path(tempfile.mkdtemp(prefix="gitmem-perm-"))
    try:
        top.chmod(0o755)
        home = top / "ws"
        with gitmem.create_store("notes", home=home) as s:
            s.write("/a.md", "private\n")
            s.path.chmod(0o700)
            (home / "stores").chmod(0o755)
            home.chmod(0o755)
        site = Path(gitmem.__file__).resolve().parent.parent
        env = {"PATH": os.environ["PATH"], "GITMEM_HOME": str(home), "HOME": "/tmp", "PYTHONPATH": str(site)}
        proc = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
             sys.executable, "-m", "gitmem", "ls", "notes"],
            env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if "No module named" in proc.stderr:
            pytest.skip("the interpreter is not usable by nobody")
        assert proc.returncode == 6, proc.stderr
        assert "permission denied" in proc.stderr and "not a git repository" not in proc.stderr
    finally:
        shutil.rmtree(top)


# ---------------------------------------------------------------------- 5-8: the audit of a day
def test_audit_of_a_scripted_day(workspace: Path, tmp_path: Path) -> None:
    gitmem_cli("store", "create", "day", "--actor", "user:root")
    gitmem_cli("store", "update", "day", "--acl-write", "main=user:*", "--acl-write", "team=user:bob",
               "--retention-min-days", "7", "--trust-trailers", "user:mirror", "--actor", "user:root")  # fmt: skip
    store = gitmem.open_store("day")
    store.write("/notes.md", "hello\n", actor="user:alice", session="sesn_alice")
    store.write("/leak.md", "key sk-123\n", actor="user:alice", session="sesn_bad")
    work = clone(store, tmp_path)
    (work / "pushed.md").write_text("from bob\n")
    pushed = commit(work, "bob's note")
    git("push", "-q", "origin", "main", cwd=work, env={"REMOTE_USER": "bob"})
    (work / "z.md").write_bytes(b"nul\0")
    commit(work, "bad")
    assert git("push", "origin", "main", cwd=work, check=False, env={"REMOTE_USER": "eve"}).returncode != 0
    leak = store.versions(path="/leak.md")[0]
    store.write("/leak.md", "key removed\n", actor="user:alice", session="sesn_bad")
    store.redact(leak.id, reason="leaked key", actor="user:sec")
    from gitmem.sessions import revert_session

    revert_session(store, "sesn_bad", actor="user:root")
    # A hand edit of gitmem.yaml, found by the next open.
    path = store.path / "gitmem.yaml"
    path.write_text(path.read_text().replace("min_days: 7", "min_days: 1"))
    store.close()
    store = gitmem.open_store("day")

    events = audit(store.core)
    kinds = [(e.type, e.actor) for e in events]
    assert kinds[0] == ("store_created", "user:root")
    acl = next(e for e in events if e.type == "settings_changed" and e.actor == "user:root")
    assert {"key": "acl.write", "old": None, "new": {"main": ["user:*"], "team": ["user:bob"]}} in acl.detail[
        "diff"
    ]
    assert "acl" in acl.detail["text"] and "retention.min_days: 30 -> 7" in acl.detail["text"]
    push = next(e for e in events if e.type == "push")
    assert push.actor == "user:bob" and push.scope == "main"
    (bobs,) = store.versions(path="/pushed.md")
    assert bobs.actor == "user:bob" and bobs.commit != pushed  # the redaction rewrote it since
    assert [(v["version"], v["commit"]) for v in push.detail["versions"]] == [(bobs.id, bobs.commit)]
    store.core.index.rebuild()  # the receipt followed the rewrite: same id, same pusher
    assert [(v.id, v.actor) for v in store.versions(path="/pushed.md")] == [(bobs.id, "user:bob")]
    rejected = next(e for e in events if e.type == "push_rejected")
    assert rejected.actor == "user:eve" and rejected.detail["rules"] == {"nul": 1}
    red = next(e for e in events if e.type == "redaction")
    assert red.actor == "user:sec" and leak.id in red.detail["versions"]
    rev = next(e for e in events if e.type == "revert_session")
    assert rev.actor == "user:root" and rev.subject == "sesn_bad"
    reverted = [v for v in store.versions() if v.id in {x["version"] for x in rev.detail["versions"]}]
    assert reverted and all(
        "Gitmem-Reverts: sesn_bad" in store.core.commit(v.commit).message for v in reverted
    )
    hand = [e for e in events if e.type == "settings_changed" and e.actor == "unknown"]
    assert len(hand) == 1 and hand[0].detail["diff"] == [{"key": "retention.min_days", "old": 7, "new": 1}]
    # The human table names them too.
    out = gitmem_cli("audit", "day").stdout
    for needle in ("push_rejected", "rejected: nul x1", "user:bob", "reverted session sesn_bad", "hand edit"):
        assert needle in out
    js = json.loads(gitmem_cli("audit", "day", "--json", "--type", "push_rejected").stdout)
    assert len(js) == 1
    store.close()
