"""Adversarial reads against Index.head_at's per-path cache and Repo.cas's target re-check: every
read names the version that history at the scope's tip holds, whatever moved the branch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pygit2
import pytest

import gitmem
from gitmem.errors import ForbiddenError, GitmemError
from gitmem.git.repo import Repo
from gitmem.model.versions import Version
from gitmem.store import Store


def git(*args: str, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_plain_git_reset_back_to_a_tip_with_the_same_text_names_that_tips_version(store: Store) -> None:
    v1 = put(store, "/a.md", "same text", actor="user:alice")
    first_tip = str(store.core.tip("main"))
    store.write("/a.md", "other text", actor="user:alice")
    v3 = put(store, "/a.md", "same text", actor="user:alice")  # back to the first text: same blob
    assert store.read("/a.md").version_id == v3.id
    git("update-ref", "refs/heads/main", first_tip, cwd=store.path)  # a reset with plain git on the bare repo
    got = store.read("/a.md")
    assert got.content == "same text"
    assert got.version_id == v1.id  # v3 is not in history at this tip
    with gitmem.open_store(store.path) as other:
        assert other.read("/a.md").version_id == v1.id


def test_plain_git_reset_back_drops_newer_memories_from_lists_and_reads(store: Store) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    first_tip = str(store.core.tip("main"))
    store.write("/b.md", "beta, written later", actor="user:alice")
    assert [m.path for m in store.list("/")] == ["/a.md", "/b.md"]
    git("update-ref", "refs/heads/main", first_tip, cwd=store.path)
    assert [m.path for m in store.list("/")] == ["/a.md"]
    assert store.search("written later") == []


def put(s: Store, path: str, text: str, **kw: Any) -> Version:
    v = s.write(path, text, **kw)
    assert v is not None
    return v


def truth(store: Store, path: str, scope: str = "main") -> str:
    """The Gitmem-Version of the newest commit at the scope's tip that touched ``path``, from git."""
    repo = pygit2.Repository(str(store.path))
    tip = repo.references[f"refs/heads/{scope}"].target
    for commit in repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL):
        mine = commit.tree[path[1:]].id if path[1:] in commit.tree else None
        before = [p.tree[path[1:]].id if path[1:] in p.tree else None for p in commit.parents]
        if not before or any(b != mine for b in before):
            for line in commit.message.splitlines():
                if line.startswith("Gitmem-Version: "):
                    return line.split(": ", 1)[1]
    raise AssertionError(f"{path} never written")


def same(a: Store, b: Store, path: str, scope: str = "main") -> None:
    got = a.read(path, scope=scope)
    assert got.version_id == truth(b, path, scope)
    with gitmem.open_store(b.path) as fresh:
        want = fresh.read(path, scope=scope)
    assert (got.version_id, got.memory_id, got.content_sha256, got.description, got.content) == (
        want.version_id,
        want.memory_id,
        want.content_sha256,
        want.description,
        want.content,
    )


def test_redaction_from_another_handle_between_cached_reads(store: Store) -> None:
    with gitmem.open_store(store.path) as other:
        store.write("/a.md", "---\ndescription: public\n---\nkeep", actor="user:alice")
        secret = put(store, "/a.md", "---\ndescription: the secret\n---\nsecret", actor="user:alice")
        assert store.read("/a.md").description == "the secret"  # cached at this tip
        store.write("/a.md", "---\ndescription: public again\n---\nkept", actor="user:alice")
        store.write("/b.md", "bee", actor="user:alice")
        assert store.read("/a.md").description == "public again"
        other.redact(secret.id, reason="leak", actor="user:admin")
        got = store.read("/a.md")
        assert "secret" not in f"{got.content} {got.description}"
        assert got.content_sha256 != secret.content_sha256
        same(store, other, "/a.md")
        same(store, other, "/b.md")


def test_redacting_an_older_version_with_the_heads_text(store: Store) -> None:
    with gitmem.open_store(store.path) as other:
        old = put(store, "/a.md", "---\ndescription: d1\n---\nsame", actor="user:alice")
        store.write("/a.md", "between", actor="user:alice")
        head = put(store, "/a.md", "---\ndescription: d1\n---\nsame", actor="user:alice")
        assert store.read("/a.md").version_id == head.id
        with pytest.raises(ForbiddenError):  # the head's text: refused, nothing rewritten
            other.redact(old.id, reason="leak", actor="user:admin")
        same(store, other, "/a.md")


def test_rename_away_and_back_delete_and_recreate_two_scopes(store: Store) -> None:
    with gitmem.open_store(store.path) as other:
        store.write("/a.md", "text", actor="user:alice")
        store.read("/a.md")
        other.rename("/a.md", "/b.md", actor="user:alice")
        same(store, other, "/b.md")
        other.rename("/b.md", "/a.md", actor="user:alice")
        same(store, other, "/a.md")
        other.delete("/a.md", actor="user:alice")
        other.write("/a.md", "text", actor="user:alice")
        same(store, other, "/a.md")
        store.write("/a.md", "text", scope="team", actor="user:alice")
        other.write("/a.md", "text2", scope="team", actor="user:alice")
        other.write("/a.md", "text", scope="team", actor="user:alice")
        same(store, other, "/a.md", "team")
        same(store, other, "/a.md")
        assert store.read("/a.md", scope="team").version_id != store.read("/a.md").version_id


def test_index_rebuilt_by_another_handle_then_written(store: Store) -> None:
    with gitmem.open_store(store.path) as other:
        store.write("/a.md", "one", actor="user:alice")
        store.read("/a.md")
        other.core.index.rebuild()
        other.write("/a.md", "two", actor="user:alice")
        same(store, other, "/a.md")
        os.unlink(store.core.gitmem_dir / "index.sqlite") if (
            store.core.gitmem_dir / "index.sqlite"
        ).exists() else None
        other.write("/a.md", "one", actor="user:alice")
        same(store, other, "/a.md")


def fresh_read(store: Store, path: str, scope: str = "main") -> tuple[object, ...]:
    with gitmem.open_store(store.path) as other:
        m = other.read(path, scope=scope)
    return (m.version_id, m.memory_id, m.content_sha256, m.description, m.content, m.updated_at)


def as_tuple(store: Store, path: str, scope: str = "main") -> tuple[object, ...]:
    m = store.read(path, scope=scope)
    return (m.version_id, m.memory_id, m.content_sha256, m.description, m.content, m.updated_at)


def test_pushes_through_the_hooks_between_cached_reads(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "---\ndescription: first\n---\nsame", actor="user:alice")
    before = str(store.core.tip("main"))
    secret = put(store, "/a.md", "---\ndescription: secret\n---\nsecret", actor="user:alice")
    work = tmp_path / "work"
    git("clone", "-q", f"file://{store.path}", str(work))
    (work / "a.md").write_text("---\ndescription: first\n---\nsame")  # back to the first text: same blob
    git("commit", "-qam", "back with plain git", cwd=work)
    assert as_tuple(store, "/a.md")[3] == "secret"  # cached at the old tip
    git("push", "-q", "origin", "main", cwd=work)
    assert as_tuple(store, "/a.md") == fresh_read(store, "/a.md")
    assert as_tuple(store, "/a.md")[0] not in (secret.id, truth(store, "/a.md"))  # a pushed commit's own id
    store.redact(secret.id, reason="leak", actor="user:admin")
    pushed_back = as_tuple(store, "/a.md")
    assert pushed_back == fresh_read(store, "/a.md")
    redacted_tip = str(store.core.tip("main"))
    # Pushing the old history back (before the push, or with the secret) is refused whole.
    for old in (before, git("rev-parse", "HEAD", cwd=work)):
        proc = subprocess.run(
            ["git", "push", "--force", "origin", f"{old}:refs/heads/main"],
            cwd=work,
            capture_output=True,
            text=True,
        )
        assert proc.returncode != 0 and "not a fast-forward" in proc.stderr
        assert str(store.core.tip("main")) == redacted_tip
        assert as_tuple(store, "/a.md") == pushed_back


def test_threads_sharing_one_store_read_consistent_versions(store: Store) -> None:
    import threading

    from gitmem.engine import history

    texts = ["---\ndescription: even\n---\nsame", "---\ndescription: odd\n---\nother"]
    store.write("/a.md", texts[0], actor="user:alice")
    seen: list[tuple[str, str | None, str | None, str | None]] = []
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for n in range(1, 25):
                store.write("/a.md", texts[n % 2], actor="user:alice")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(60):
                m = store.read("/a.md")
                seen.append((m.version_id, m.content_sha256, m.description, m.content))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for vid, sha, desc, content in seen:  # each read's version holds exactly the text it returned
        v = history.read_version(store.core, vid, path="/a.md", scope="main")
        assert (v.content, v.content_sha256, v.description) == (content, sha, desc)
    same(store, store, "/a.md")


def test_read_at_a_version_and_proposal_readers_next_to_cached_head(store: Store) -> None:
    from gitmem.audit import review
    from gitmem.engine import proposals

    first = put(store, "/a.md", "same", actor="user:alice")
    store.write("/a.md", "between", actor="user:alice")
    last = put(store, "/a.md", "same", actor="user:alice")
    assert store.read("/a.md").version_id == last.id
    at = store.read("/a.md", version=first.id)
    assert (at.version_id, at.content) == (first.id, "same")
    assert store.read("/a.md").version_id == last.id
    store.update_settings(acl={"review": {"main": ["session:*"]}})
    mine = put(store, "/a.md", "proposed", session="sesn_a")
    assert store.read("/a.md", session="sesn_a").version_id == mine.id
    assert store.read("/a.md").version_id == last.id  # others still see the head
    (p,) = [p for p in proposals.proposals(store.core) if p.owner == "sesn_a"]
    review.accept(store.core, p.id, reviewer="user:rev")
    for reader in (None, "sesn_a"):
        got = store.read("/a.md", session=reader)
        assert (got.content, got.version_id) == ("proposed", truth(store, "/a.md"))
    same(store, store, "/a.md")


def test_redact_pattern_between_cached_reads(store: Store) -> None:
    from gitmem.audit import redact

    with gitmem.open_store(store.path) as other:
        store.write("/a.md", "---\ndescription: token sk-LEAK1234\n---\nsk-LEAK1234", actor="user:alice")
        store.write("/b.md", "clean", actor="user:alice")
        assert "sk-LEAK" in str(store.read("/a.md").description)
        store.write("/a.md", "---\ndescription: fine\n---\nfine", actor="user:alice")
        assert store.read("/a.md").description == "fine"
        redact.redact_pattern(other.core, r"sk-LEAK\d+", reason="leak", actor="user:admin")
        for path in ("/a.md", "/b.md"):
            same(store, other, path)
            assert "LEAK" not in str(as_tuple(store, path))


def test_reset_with_plain_git_under_a_handle_that_knows_the_old_tip(store: Store) -> None:
    with gitmem.open_store(store.path) as reader:
        v1 = put(store, "/a.md", "same", actor="user:alice")
        store.write("/b.md", "bee", actor="user:alice")
        first_tip = str(store.core.tip("main"))
        reader.read("/b.md")  # the reader now knows the index at this tip (and caches only /b.md)
        store.write("/a.md", "between", actor="user:alice")
        store.write("/a.md", "same", actor="user:alice")
        git("update-ref", "refs/heads/main", first_tip, cwd=store.path)
        assert reader.read("/a.md").version_id == v1.id
        assert [getattr(m, "version_id", None) for m in reader.list("/") if m.path == "/a.md"] == [v1.id]


# ---------------------------------------------------------------------- Repo.cas's target re-check
def _repo(store: Store) -> Repo:
    return Repo(pygit2.Repository(str(store.path)), Path(store.path))


def test_cas_to_a_missing_object_fails_after_its_retries_and_moves_nothing(store: Store) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    tip = store.core.tip("main")
    assert tip is not None
    repo = _repo(store)
    missing = pygit2.Oid(hex="12" * 20)
    with pytest.raises(GitmemError, match="doesn't exist"):
        repo.cas("refs/heads/main", tip, missing)
    with pytest.raises(GitmemError, match="doesn't exist"):
        repo.cas("refs/heads/new", None, missing)
    lock = store.path / "refs" / "heads" / "main.lock"
    lock.write_text("held by another writer\n")
    try:  # a missing object stays an error, not a lost race, while another writer holds the lock
        with pytest.raises(GitmemError, match="doesn't exist"):
            repo.cas("refs/heads/main", tip, missing)
    finally:
        lock.unlink()
    fresh = pygit2.Repository(str(store.path))
    assert fresh.references["refs/heads/main"].target == tip
    assert "refs/heads/new" not in fresh.references


def test_cas_still_loses_a_race_and_finds_a_commit_another_process_packed(store: Store) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    tip = store.core.tip("main")
    assert tip is not None
    repo = _repo(store)
    repo.commit(tip)  # this handle has listed the packs already
    tree = git("rev-parse", f"{tip}^{{tree}}", cwd=store.path)
    new = git("commit-tree", tree, "-p", str(tip), "-m", "made by another process", cwd=store.path)
    packed = subprocess.run(
        ["git", "pack-objects", "-q", "objects/pack/pack"],
        cwd=store.path,
        input=new + "\n",
        text=True,
        capture_output=True,
    )
    assert packed.returncode == 0, packed.stderr
    git("prune-packed", cwd=store.path)  # now only in a pack this handle has not seen
    assert not (store.path / "objects" / new[:2] / new[2:]).exists()
    assert repo.cas("refs/heads/main", pygit2.Oid(hex="34" * 20), pygit2.Oid(hex=new)) is False
    lock = store.path / "refs" / "heads" / "main.lock"
    lock.write_text("held by another writer\n")
    try:
        assert repo.cas("refs/heads/main", tip, pygit2.Oid(hex=new)) is False
    finally:
        # The move waits up to STALE_REF_LOCK_SECONDS for the holder; by then the lock is that old
        # and removed as a killed writer's (gitmem.git.reflocks): the move still lost its race.
        lock.unlink(missing_ok=True)
    assert pygit2.Repository(str(store.path)).references["refs/heads/main"].target == tip
    assert repo.cas("refs/heads/main", tip, pygit2.Oid(hex=new)) is True
    assert repo.cas("refs/heads/main", tip, pygit2.Oid(hex=new)) is False  # moved: a lost race
    assert str(pygit2.Repository(str(store.path)).references["refs/heads/main"].target) == new


def test_retention_compaction_from_another_handle_between_cached_reads(store: Store) -> None:
    from gitmem.audit import retention
    from gitmem.config import Retention
    from tests.audit.test_retention import NOW, write_at

    v = {
        "a1": write_at(store, "/a.md", "---\ndescription: one\n---\nsame\n", 100),
        "b1": write_at(store, "/b.md", "b one\n", 95),
        "a2": write_at(store, "/a.md", "a two\n", 90),
        "a3": write_at(store, "/a.md", "---\ndescription: one\n---\nsame\n", 80),  # back to the first text
        "c1": write_at(store, "/c.md", "c young\n", 5),
    }
    store.update_settings(retention=Retention(min_days=10, max_days=30, keep_recent=1))
    before = {p: as_tuple(store, p) for p in ("/a.md", "/b.md", "/c.md")}  # cached at the old tip
    assert before["/a.md"][0] == v["a3"]
    with gitmem.open_store(store.path) as other:
        [c] = retention.prune(other.core, actor="service:janitor", now=NOW).compactions
        assert v["a1"] in c.dropped and v["a2"] in c.dropped and v["a3"] not in c.dropped
        kept = {x.id for x in other.versions()}
        for p in ("/a.md", "/b.md", "/c.md"):
            got = as_tuple(store, p)
            assert got == fresh_read(store, p)
            assert got[0] in kept
