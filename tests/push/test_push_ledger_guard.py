"""Real ``git push``: what a push puts into the audit ledger (the pusher, the session, the ref
names, the author e-mails of the commits it brings) is screened by the store's guard in
pre-receive, as the library screens an actor (docs/guard.md#text-in-the-audit-ledger). The ledger
is hash-chained and cloned and cannot be redacted: a secret in a commit's author e-mail would live
there forever. A refused push names the ref, the commit and the finding, never the secret, and
changes nothing: no ref, no object, no ledger entry."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem.engine import ledger
from gitmem.model.guard import GuardPolicy, scan
from gitmem.store import Store


def _aws_key(seed: int) -> str:
    """An AWS-access-key-shaped string made at run time (``AKIA`` + 16 base32 characters)."""
    rng = random.Random(seed)
    return "AKIA" + "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))


KEY = _aws_key(11)
IDENTITY = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")


def git(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    base.update({"GIT_AUTHOR_NAME": "Alice", "GIT_AUTHOR_EMAIL": "alice@example.com"})
    base.update({"GIT_COMMITTER_NAME": "Alice", "GIT_COMMITTER_EMAIL": "alice@example.com"})
    base.update(env or {})
    return subprocess.run(["git", *args], cwd=cwd, env=base, capture_output=True, text=True, timeout=60)


def ok(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def snapshot(store: Store) -> tuple[dict[str, str], int]:
    repo = pygit2.Repository(str(store.path))
    refs = {n: str(repo.references[n].target) for n in repo.references}
    return refs, sum(1 for _ in pygit2.Odb(str(store.path / "objects")))


def ledger_text(store: Store) -> str:
    return ok(git("--git-dir", str(store.path), "log", "-p", "--format=%B", "refs/gitmem/ledger"))


def entries(store: Store) -> list[ledger.LedgerEntry]:
    gitmem.open_store(store.path).close()  # a gitmem process records the spooled pushes first
    return ledger.entries(store.core)


def clone_with_commit(store: Store, work: Path, env: dict[str, str] | None = None) -> str:
    ok(git("clone", "-q", f"file://{store.path}", str(work)))
    (work / "b.md").write_text("beta\n")
    ok(git("add", "-A", cwd=work))
    ok(git("commit", "-q", "-m", "a plain note", cwd=work, env=env))
    return ok(git("rev-parse", "HEAD", cwd=work)).strip()


@pytest.fixture
def seeded(store: Store) -> Store:
    store.write("/a.md", "alpha\n", actor="user:alice")
    return store


def test_the_key_is_one_the_default_policy_catches() -> None:
    assert [f.rule for f in scan(f"dev+{KEY}@example.com", GuardPolicy())] == ["aws-access-key-id"]


@pytest.mark.parametrize(
    ("var", "value", "field"),
    [
        ("GIT_AUTHOR_EMAIL", f"dev+{KEY}@example.com", "the author's e-mail"),
        ("GIT_AUTHOR_NAME", f"deploy {KEY}", "the author's name"),
        ("GIT_COMMITTER_EMAIL", f"{KEY}@example.com", "the committer's e-mail"),
    ],
    ids=["author-email", "author-name", "committer-email"],
)
@pytest.mark.parametrize("mode", ["reject", "flag"])
def test_a_secret_in_a_pushed_commits_identity_refuses_the_push(
    seeded: Store, tmp_path: Path, var: str, value: str, field: str, mode: str
) -> None:
    if mode == "flag":  # a memory would be kept and flagged; ledger text cannot be flagged
        seeded.update_settings(actor="user:alice", guard={"secrets": "flag"})
    work = tmp_path / "work"
    bad = clone_with_commit(seeded, work, env={var: value})
    before, chain = snapshot(seeded), len(entries(seeded))
    proc = git("push", "origin", "main", cwd=work)
    assert proc.returncode != 0
    lines = [line.rstrip() for line in proc.stderr.splitlines() if line.startswith("remote: gitmem:")]
    assert lines[0].startswith(
        f"remote: gitmem: refs/heads/main {bad[:12]}: {field}: refused by the store's guard: "
        "secret aws-access-key-id at line 1, column"
    ), lines
    assert "audit ledger, which nothing can redact" in lines[0]
    assert lines[-1] == "remote: gitmem: push rejected (1 problem(s)); nothing was changed"
    assert KEY not in proc.stderr
    assert snapshot(seeded) == before  # no ref moved, no object kept
    assert len(entries(seeded)) == chain and KEY not in ledger_text(seeded)
    assert KEY not in (seeded.core.gitmem_dir / "rejected.jsonl").read_text()


def test_a_secret_in_the_pusher_or_a_ref_name_refuses_the_push(seeded: Store, tmp_path: Path) -> None:
    work = tmp_path / "work"
    clone_with_commit(seeded, work)
    before, chain = snapshot(seeded), len(entries(seeded))
    proc = git("push", "origin", "main", cwd=work, env={"GITMEM_ACTOR": f"user:{KEY}"})
    assert proc.returncode != 0 and KEY not in proc.stderr
    assert "remote: gitmem: refs/heads/main: the pusher: refused by the store's guard: secret " in proc.stderr
    proc = git("push", "origin", f"main:deploy-{KEY}", cwd=work)  # (git itself echoes a ref it pushes)
    assert proc.returncode != 0
    assert (
        f"remote: gitmem: refs/heads/deploy-{KEY}: the ref name: refused by the store's guard: "
        "secret aws-access-key-id at line 1, column 19"
    ) in proc.stderr
    assert snapshot(seeded) == before and len(entries(seeded)) == chain
    log = (seeded.core.gitmem_dir / "rejected.jsonl").read_text()
    assert KEY not in log and log.count("withheld by the guard: secret aws-access-key-id") == 2
    assert KEY not in ledger_text(seeded)


def test_a_normal_push_lands_with_its_authors_in_the_ledger(seeded: Store, tmp_path: Path) -> None:
    """Under ``pii: flag`` too: an author's e-mail address is who acted, not PII to refuse."""
    seeded.update_settings(actor="user:alice", guard={"secrets": "reject", "pii": "flag"})
    work = tmp_path / "work"
    good = clone_with_commit(seeded, work, env={"GITMEM_ACTOR": "user:bob@example.com"})
    ok(
        git(
            "push",
            "-q",
            "-o",
            "session=sesn_bob_1",
            "origin",
            "main",
            cwd=work,
            env={"GITMEM_ACTOR": "user:bob@example.com"},
        )
    )
    assert seeded.core.tip("main") == pygit2.Oid(hex=good)
    (push,) = [e for e in entries(seeded) if e.kind == "push"]
    assert (push.actor, push.data["authors"], push.data["session"]) == (
        "user:bob@example.com",
        ["alice@example.com"],
        "sesn_bob_1",
    )
    assert json.loads(json.dumps(push.data))["push_options"] == ["session"]
