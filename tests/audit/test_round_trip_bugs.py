"""Issue 26: where one feature meets the integrity and backup promises of another. Each test
reproduces a defect found on the main of the time; all of them pass now."""

from __future__ import annotations

import random
import string
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest
from typer.testing import CliRunner

import gitmem
from gitmem.audit import review
from gitmem.audit.purge_proof import prove_purged
from gitmem.audit.redact import redact, redact_pattern
from gitmem.audit.verify import verify
from gitmem.cli.app import app
from gitmem.engine import proposals
from gitmem.engine.transfer import export_bundle
from gitmem.errors import ConflictError, IntegrityError
from gitmem.model.versions import KNOWN_TRAILERS
from gitmem.push.clone import clone, fetch
from gitmem.store import Store, restore_store

runner = CliRunner()
AGENT = "sesn_agent_a"


def fake_token(seed: int = 7) -> str:
    """A GitHub-token-shaped string built at run time (the guard finds it; no literal in the repository)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "ghp_" + body


def private_word(seed: int) -> str:
    """A unique text the guard does not flag (a private fact, not a credential)."""
    rng = random.Random(seed)
    return "codeword-" + "".join(rng.choice(string.ascii_lowercase) for _ in range(12))


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def flagged(store: Store) -> Store:
    store.update_settings(guard={"secrets": "flag"})
    store.write("/n.md", f"deploy key {fake_token()}\n", actor="user:alice")
    store.write("/n.md", "rotated\n", actor="user:alice")
    return store


@pytest.fixture
def reviewed(store: Store) -> Store:
    store.write("/base.md", "one\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    store.write("/a.md", "from the agent\n", session=AGENT)
    (p,) = proposals.proposals(store.core)
    review.accept(store.core, p.id, reviewer="user:rev")
    store.write("/b.md", "still open\n", session=AGENT)
    return store


def test_every_gitmem_trailer_written_anywhere_is_known() -> None:
    import re

    written: set[str] = set()
    for path in Path(gitmem.__file__).parent.rglob("*.py"):
        written.update(re.findall(r"\"(Gitmem-[A-Z][A-Za-z-]*[a-z])[:\"]", path.read_text(encoding="utf-8")))
    assert written, "the scan found no trailer at all"
    assert sorted(written - set(KNOWN_TRAILERS)) == []


def test_verify_passes_on_a_flagged_and_on_a_reviewed_store(flagged: Store, reviewed: Store) -> None:
    assert verify(flagged.core).ok
    assert verify(reviewed.core).ok


def test_bundle_of_a_store_with_proposals_restores_every_ref(reviewed: Store, tmp_path: Path) -> None:
    bundle = tmp_path / "r.bundle"
    export_bundle(reviewed.core, bundle)
    original = {n: str(reviewed.core.repo.references[n].target) for n in reviewed.core.repo.references}
    assert any(n.startswith(proposals.REF_PREFIX) for n in original)
    restored = restore_store("copy", bundle)
    assert restored.verify.ok
    with gitmem.open_store("copy") as copy:
        got = {n: str(copy.core.repo.references[n].target) for n in copy.core.repo.references}
        grown = ("refs/gitmem/ledger", "refs/gitmem/checkpoints")  # the restore appends an entry
        assert {n: t for n, t in got.items() if n not in grown} == {
            n: t for n, t in original.items() if n not in grown
        }


def test_bundle_of_a_flagged_store_restores_and_verifies(flagged: Store, tmp_path: Path) -> None:
    bundle = tmp_path / "f.bundle"
    export_bundle(flagged.core, bundle)
    restored = restore_store("copy", bundle)
    assert restored.verify.ok, restored.verify.checks
    with gitmem.open_store("copy") as copy:
        assert copy.read("/n.md").content == "rotated\n"


@pytest.fixture
def leaked(store: Store, tmp_path: Path) -> Iterator[tuple[Store, Path, str]]:
    secret = private_word(11)
    v = store.write("/s.md", f"token {secret}\n", actor="user:alice")
    store.write("/s.md", "rotated\n", actor="user:alice")
    dest = tmp_path / "clone"
    clone(str(store.path), dest)
    redact(store.core, v.id, reason="leaked")
    yield store, dest, secret


def test_fetch_then_fetch_purge_really_removes_the_secret(leaked: tuple[Store, Path, str]) -> None:
    _store, dest, secret = leaked
    plain = runner.invoke(app, ["fetch", str(dest)])
    assert plain.exit_code == 0, plain.output
    # the advice a plain fetch gives must not be a reset that keeps the secret in the clone
    assert "git reset --hard" not in plain.output and "gitmem fetch --purge" in plain.output
    assert not prove_purged(dest / ".git", secrets=[secret.encode()]).ok  # still there after a plain fetch
    purged = runner.invoke(app, ["fetch", "--purge", str(dest)])
    assert purged.exit_code == 0, purged.output
    assert "(verified)" in purged.output
    assert prove_purged(dest / ".git", secrets=[secret.encode()]).ok
    assert (
        secret.encode()
        not in subprocess.run(
            ["git", "cat-file", "--batch-all-objects", "--batch"], cwd=dest, capture_output=True, check=True
        ).stdout
    )


def test_fetch_purge_fails_loudly_when_a_ref_keeps_the_old_history(leaked: tuple[Store, Path, str]) -> None:
    _store, dest, secret = leaked
    git(dest, "tag", "keep-old", "HEAD~1")
    result = runner.invoke(app, ["fetch", "--purge", str(dest)])
    assert result.exit_code != 0
    assert "verified" not in result.output
    assert "keep-old" in result.output + result.stderr


def test_pattern_redaction_covers_open_and_rejected_proposal_chains(store: Store) -> None:
    secret = private_word(21)
    store.write("/base.md", "one\n", actor="user:alice")
    store.write("/pub.md", f"k={secret}\n", actor="user:alice")
    store.write("/pub.md", "rotated\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    store.write("/p.md", f"proposed {secret} here\n", session=AGENT)
    store.write("/q.md", f"rejected {secret} here\n", session="sesn_b")
    (_p, q) = sorted(proposals.proposals(store.core), key=lambda p: p.owner)
    review.reject(store.core, q.id, reviewer="user:rev", reason="no")
    r = redact_pattern(store.core, secret, reason="leaked")
    assert r.purged
    assert prove_purged(store.path, secrets=[secret.encode()]).ok
    assert verify(store.core).ok


def test_pattern_in_an_open_proposal_only_is_redacted(store: Store) -> None:
    secret = private_word(22)
    store.write("/base.md", "one\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    store.write("/p.md", f"proposed {secret}\n", session=AGENT)
    store.write("/p.md", "proposed, rotated\n", session=AGENT)
    redact_pattern(store.core, secret, reason="leaked")
    assert prove_purged(store.path, secrets=[secret.encode()]).ok


def test_redaction_of_a_scope_with_an_open_proposal_keeps_clones_purgeable(
    store: Store, tmp_path: Path
) -> None:
    secret = private_word(23)
    v = store.write("/s.md", f"token {secret}\n", actor="user:alice")
    store.write("/s.md", "rotated\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    store.write("/p.md", "an open proposal\n", session=AGENT)
    dest = tmp_path / "clone"
    clone(str(store.path), dest)
    redact(store.core, v.id, reason="leaked")
    result = fetch(dest, purge=True)
    assert result.purged > 0
    assert prove_purged(dest / ".git", secrets=[secret.encode()]).ok


def test_verify_on_a_read_only_store(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "x\n", actor="user:alice")
    assert verify(store.core).ok
    ro = tmp_path / "ro"
    ro.mkdir()
    proc = subprocess.run(["mount", "--bind", "-o", "ro", str(store.path), str(ro)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot make a read-only bind mount here: {proc.stderr.decode().strip()}")
    try:
        result = runner.invoke(app, ["verify", str(ro)])
        assert result.exit_code == 0, result.output + result.stderr
    finally:
        subprocess.run(["umount", str(ro)], check=True)


def test_purge_proof_finds_ids_and_secrets(store: Store) -> None:
    v = store.write("/a.md", "hello secret-xyz\n", actor="user:alice")
    blob = str(store.core.repo[pygit2.Oid(hex=v.commit)].tree["a.md"].id)
    found = prove_purged(store.path, object_ids=[blob], secrets=[b"secret-xyz"])
    assert not found.ok and blob in found.found_ids and found.found_secrets
    with pytest.raises(IntegrityError, match="secret"):
        found.require()
    assert prove_purged(store.path, object_ids=["0" * 40], secrets=[b"absent-text"]).ok


def test_a_push_that_waited_on_a_redaction_is_refused_by_a_rule(store: Store) -> None:
    """The state a push is judged in after waiting for a redaction: its old value and its parent
    are the retired history (main of the time: "the check failed (NotFoundError: ...)")."""
    from gitmem import config
    from gitmem.push.hook import pre_receive

    store.write("/a.md", "one\n", actor="user:alice")
    v = store.write("/a.md", f"a secret {private_word(31)}\n", actor="user:alice")
    store.write("/a.md", "three\n", actor="user:alice")
    repo = pygit2.Repository(str(store.path))
    old = repo.references["refs/heads/main"].target
    builder = repo.TreeBuilder(repo[old].tree)
    builder.insert("b.md", repo.create_blob(b"pushed\n"), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("Tester", "tester@example.com")
    new = repo.create_commit(None, sig, sig, "add b.md", builder.write(), [old])
    redact(store.core, v.id, reason="leaked")
    lines = pre_receive(
        pygit2.Repository(str(store.path)), f"{old} {new} refs/heads/main\n", config.env_snapshot()
    )
    text = "\n".join(lines)
    assert lines and "NotFoundError" not in text and "object not found" not in text, text
    assert "history was rewritten" in text and "refs/heads/main" in text, text


def test_a_replica_that_did_not_purge_is_reported_not_proved(store: Store, tmp_path: Path) -> None:
    """A replica without gitmem's purging hook (a plain bare mirror) keeps the redacted objects:
    the push to it is reported as failed with the proof's reason, and the purge stays pending."""
    from gitmem.push.replica import add_replica, init_replica, push_replicas

    good = init_replica(tmp_path / "good.git")
    plain = tmp_path / "plain.git"
    subprocess.run(["git", "init", "-q", "--bare", str(plain)], check=True)
    add_replica(store.core, str(good), "good")
    add_replica(store.core, str(plain), "plain")
    secret = private_word(41)
    v = store.write("/s.md", f"token {secret}\n", actor="user:alice")
    store.write("/s.md", "rotated\n", actor="user:alice")
    push_replicas(store.path)
    redact(store.core, v.id, reason="leaked")  # its after-rewrite hook pushes to both replicas
    results = {r.name: r for r in push_replicas(store.path)}
    assert results["good"].ok and prove_purged(good, secrets=[secret.encode()]).ok
    assert not results["plain"].ok and "not proved" in results["plain"].message
    assert results["plain"].purge_pending
    assert not prove_purged(plain, secrets=[secret.encode()]).ok


def test_compaction_moves_an_open_proposal_onto_the_compacted_history(store: Store) -> None:
    """Found by the lifecycle matrix: an open proposal made every compaction of its scope fail
    ("... still reaches the history ... delete or move that ref first")."""
    import time

    from gitmem.audit import retention
    from gitmem.config import Retention

    for n in range(4):
        store.write("/a.md", f"version {n}\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    store.write("/p.md", "proposed\n", session=AGENT)
    (p,) = proposals.proposals(store.core)
    store.update_settings(retention=Retention(min_days=10, max_days=30, keep_recent=1))
    result = retention.prune(store.core, actor="service:janitor", now=int(time.time()) + 400 * 86400)
    assert [c.scope for c in result.compactions] == ["main"], result.skipped
    assert store.read("/p.md", session=AGENT).content == "proposed\n"
    assert [d.path for d in review.diff(store.core, p.id)] == ["/p.md"]
    assert verify(store.core).ok
    review.accept(store.core, p.id, reviewer="user:rev")
    assert store.read("/p.md").content == "proposed\n"
    assert store.read("/a.md").content == "version 3\n"
    assert verify(store.core).ok


def test_compaction_skips_a_scope_whose_open_proposal_started_on_dropped_history(store: Store) -> None:
    import time

    from gitmem.audit import retention
    from gitmem.config import Retention

    store.write("/a.md", "version 0\n", actor="user:alice")
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    store.write("/p.md", "proposed long ago\n", session=AGENT)
    for n in range(1, 4):
        store.write("/a.md", f"version {n}\n", actor="user:alice")
    tip = store.core.tip("main")
    store.update_settings(retention=Retention(min_days=10, max_days=30, keep_recent=1))
    result = retention.prune(store.core, actor="service:janitor", now=int(time.time()) + 400 * 86400)
    assert result.compactions == [] and "decide it" in result.skipped["main"]
    assert store.core.tip("main") == tip
    assert store.read("/p.md", session=AGENT).content == "proposed long ago\n"
    assert verify(store.core).ok


def test_fetch_purge_keeps_local_work_on_the_new_history(leaked: tuple[Store, Path, str]) -> None:
    _store, dest, secret = leaked
    fetch(dest)  # a plain fetch first, then the user rebuilds on the new history by hand
    git(dest, "checkout", "-q", "-b", "work", "origin/main")
    (dest / "mine.md").write_text("my local work\n")
    git(dest, "add", "mine.md")
    git(dest, "commit", "-qm", "local work")
    git(dest, "checkout", "-q", "main")
    result = fetch(dest, purge=True)
    assert result.purged > 0 and result.resynced == ["main"]
    assert git(dest, "show", "work:mine.md") == "my local work\n"
    assert prove_purged(dest, secrets=[secret.encode()]).ok


def test_fetch_purge_refuses_a_stash_of_the_old_history(leaked: tuple[Store, Path, str]) -> None:
    _store, dest, secret = leaked
    (dest / "s.md").write_text("edited over the old history\n")
    git(dest, "stash", "-q")
    with pytest.raises(ConflictError, match="refs/stash"):
        fetch(dest, purge=True)
    git(dest, "stash", "drop", "-q")
    fetch(dest, purge=True)
    assert prove_purged(dest, secrets=[secret.encode()]).ok


def test_restore_refuses_forged_proposal_records_and_receipts(reviewed: Store, tmp_path: Path) -> None:
    import json
    import shutil

    from gitmem.errors import InvalidInputError

    bundle = tmp_path / "r.bundle"
    export_bundle(reviewed.core, bundle)
    backup = tmp_path / "backup"
    shutil.copytree(reviewed.path / "gitmem" / "proposals", backup / "proposals")
    good = restore_store("copy", bundle, backup=backup)
    assert good.verify.ok and "proposals/" + sorted(p.name for p in (backup / "proposals").iterdir())[0] in (
        good.private_files
    )
    with gitmem.open_store("copy") as copy:
        assert {p.id for p in proposals.proposals(copy.core)} == {
            p.id for p in proposals.proposals(reviewed.core)
        }
    first = sorted((backup / "proposals").glob("prop_*.json"))[0]
    record = json.loads(first.read_text())
    other = backup / "proposals" / "prop_01M8AAAAAAAAAAAAAAAAAAAAAA.json"
    other.write_text(json.dumps(record))  # a record under another proposal's name
    with pytest.raises(InvalidInputError, match="not the one its name says"):
        restore_store("copy2", bundle, backup=backup)
    other.unlink()
    (backup / "proposals" / "evil.sh").write_text("#!/bin/sh\n")
    with pytest.raises(InvalidInputError, match="not a gitmem proposal record"):
        restore_store("copy2", bundle, backup=backup)
    (backup / "proposals" / "evil.sh").unlink()
    (backup / "receipts.jsonl").write_text('{"not": "a receipt"}\n{"commit": "x"}\n')
    with pytest.raises(InvalidInputError, match="not a push receipt"):
        restore_store("copy2", bundle, backup=backup)
    assert not (reviewed.path.parent / "copy2.git").exists()


def test_fetch_purge_after_a_hand_reset_without_the_rewrite_remembered(
    leaked: tuple[Store, Path, str],
) -> None:
    """A clone fetched by hand (git fetch; git reset --hard origin/main): gitmem never saw the
    rewrite, yet --purge leaves no retired commit and no secret behind."""
    _store, dest, secret = leaked
    git(dest, "fetch", "-q", "origin", "+refs/heads/*:refs/remotes/origin/*")
    git(dest, "reset", "-q", "--hard", "origin/main")
    assert not prove_purged(dest, secrets=[secret.encode()]).ok  # the reflogs keep it
    fetch(dest, purge=True)
    assert prove_purged(dest, secrets=[secret.encode()]).ok


def test_a_pushed_reviewed_by_trailer_is_refused_from_an_untrusted_pusher(store: Store) -> None:
    """Knowing the review trailer must not let a plain-git push claim a review."""
    from gitmem import config
    from gitmem.ids import new_id
    from gitmem.push.hook import pre_receive

    store.write("/a.md", "one\n", actor="user:alice")
    repo = pygit2.Repository(str(store.path))
    old = repo.references["refs/heads/main"].target
    builder = repo.TreeBuilder(repo[old].tree)
    builder.insert("b.md", repo.create_blob(b"claimed\n"), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("Tester", "tester@example.com")
    msg = (
        "create /b.md\n\n"
        f"Gitmem-Version: {new_id('memver')}\nGitmem-Memory: {new_id('mem')}\nGitmem-Operation: created\n"
        "Gitmem-Actor: user:mallory\nGitmem-Reviewed-By: user:boss\n"
    )
    new = repo.create_commit(None, sig, sig, msg, builder.write(), [old])
    lines = pre_receive(repo, f"{old} {new} refs/heads/main\n", config.env_snapshot())
    assert any("Gitmem-Reviewed-By is written by gitmem review accept only" in ln for ln in lines), lines
