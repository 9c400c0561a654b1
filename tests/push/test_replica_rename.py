"""A replicated store keeps replicating after it is renamed (docs/stores.md, docs/git-servers.md):
the replica is registered in the store's own repository, ``<home>/stores/<id>.git``, which a
rename does not move; pushes, library writes pushed with ``gitmem replica push <id>`` and a
redaction after the rename all reach the replica, and the redacted bytes leave it."""

from __future__ import annotations

from pathlib import Path

from secret_scan import find_secret, scan_store
from test_replica import SECRET, fsck_clean, git, push_file, refs
from typer.testing import CliRunner

from gitmem.cli.app import app
from gitmem.push.replica import add_replica, init_replica, last_pushes, push_replicas, replicas
from gitmem.store import Store, open_store

runner = CliRunner()
NEW_NAME = "Renamed Notes (EU)"


def test_a_renamed_store_keeps_replicating_pushes_writes_and_redactions(
    store: Store, workspace: Path, tmp_path: Path
) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    replica = init_replica(tmp_path / "replica.git")
    add_replica(store.core, str(replica))
    [first] = push_replicas(store.path)
    assert first.ok
    work = tmp_path / "work"
    git("clone", "-q", f"file://{store.path}", str(work))
    before = store.path

    store.update_settings(name=NEW_NAME, actor="user:admin")
    # the registration is the id's: the store did not move, its config still names the replica
    assert store.path == before and store.path.name == f"{store.id}.git"
    assert [r.name for r in replicas(store.path)] == ["replica"]
    for text in (
        (store.path / "config").read_text(),
        *(p.read_text() for p in (store.path / "hooks").iterdir()),
    ):
        assert "notes" not in text and NEW_NAME not in text  # nothing keyed by a display name

    # a push after the rename: the post-receive shim mirrors it
    proc = push_file(work, "b.md", b"beta\n", "add b")
    assert "not updated" not in proc.stderr
    assert refs(replica) == refs(store.path)

    # a library write, pushed by id and by the new (unique) name; the old name names nothing
    store.write("/lib.md", "by the library", actor="user:alice")
    home = ["--home", str(workspace)]
    res = runner.invoke(app, ["replica", "push", store.id, *home])
    assert res.exit_code == 0 and "updated" in res.output, res.output
    assert refs(replica) == refs(store.path)
    store.write("/lib2.md", "again", actor="user:alice")
    res = runner.invoke(app, ["replica", "push", NEW_NAME, *home])
    assert res.exit_code == 0, res.output
    assert refs(replica) == refs(store.path)
    assert runner.invoke(app, ["replica", "push", "notes", *home]).exit_code == 3

    # a redaction after the rename reaches the replica and purges the bytes there
    git("pull", "-q", "origin", "main", cwd=work)
    push_file(work, "secret.md", SECRET + b"\n", "add secret")
    assert find_secret([replica], SECRET, git_dirs=[replica])
    push_file(work, "secret.md", b"rotated\n", "rotate secret")
    [created] = [
        v for v in store.versions(scope="main") if v.path == "/secret.md" and v.operation == "created"
    ]
    store.update_settings(name="Renamed Twice", actor="user:admin")
    with open_store(store.id, workspace) as again:
        again.redact(created.id, reason="leaked credential", actor="user:root")
    assert scan_store(store.path, SECRET) == []
    assert find_secret([replica], SECRET, git_dirs=[replica]) == []
    assert refs(replica) == refs(store.path)
    fsck_clean(replica)
    last = last_pushes(store.path)["replica"]
    assert last.ok and last.purged is not None and last.purged > 0

    # and replication goes on after the redaction: the clone rebased onto the new history pushes
    git("fetch", "-q", "origin", cwd=work)
    git("reset", "-q", "--hard", "origin/main", cwd=work)
    proc = push_file(work, "c.md", b"gamma\n", "add c")
    assert "not updated" not in proc.stderr
    assert refs(replica) == refs(store.path)
    reader = tmp_path / "reader"
    git("clone", "-q", str(replica), str(reader))
    assert (reader / "c.md").read_bytes() == b"gamma\n" and (reader / "lib2.md").read_text() == "again"
