"""Rewritten twins (gitmem/engine/derive.py ``reused_version_id``): a commit with another commit's
signatures and trailers byte for byte. A redaction leaves such twins of the commits it rewrites (in
another scope, between its branch swap and its index step); anything else that looks like one is a
copy, whose ids are taken. Commits are made with plain git (pygit2) directly in the bare store, as
a script or an admin on the server would."""

from __future__ import annotations

from pathlib import Path

import pygit2

from gitmem.model.versions import parse_trailers
from gitmem.store import Store
from tests.engine.test_identity import clone, git


def _ids(store: Store) -> list[tuple[str, str, str]]:
    store.core.index.ensure_all()
    return sorted((r.id, r.scope, r.commit_id) for r in store.core.index.version_rows())


def _twin(
    repo: pygit2.Repository, of: pygit2.Commit, content: bytes, parent: pygit2.Commit | None
) -> pygit2.Oid:
    """A commit with ``of``'s author, committer and message, changing /secret.md to ``content``."""
    tb = repo.TreeBuilder(parent.tree) if parent is not None else repo.TreeBuilder()
    tb.insert("secret.md", repo.create_blob(content), pygit2.GIT_FILEMODE_BLOB)
    parents = [parent.id] if parent is not None else []
    return repo.create_commit(None, of.author, of.committer, of.message, tb.write(), parents)


def _seed(store: Store) -> tuple[pygit2.Repository, pygit2.Commit, pygit2.Commit]:
    store.write("/secret.md", "the real secret\n", actor="user:alice")
    store.write("/secret.md", "edited\n", actor="user:alice")
    repo = pygit2.Repository(str(store.path))
    second = repo[repo.references["refs/heads/main"].target]
    assert isinstance(second, pygit2.Commit)
    return repo, second.parents[0], second


def test_a_twin_on_the_same_scope_is_a_new_version_not_a_lost_one(store: Store) -> None:
    """Before: a commit on ``main`` copying main's first commit (signatures and trailers) with other
    content took that version's id; ``INSERT OR IGNORE`` dropped it from history while the head
    named the old version, whose content it is not. History had 2 versions for 3 commits, and
    ``read(version=V)`` answered bytes that were never the head's."""
    repo, first, second = _seed(store)
    v1 = store.versions(path="/secret.md")[-1]
    forged = _twin(repo, first, b"forged content\n", second)
    repo.references["refs/heads/main"].set_target(forged)
    store.core.index.forget("main")
    history = store.versions(path="/secret.md")
    assert len(history) == 3
    head = store.read("/secret.md")
    assert head.content == "forged content\n"
    assert head.version_id != v1.id
    # the twin carries its model's (older) time: where it sorts among the others depends on the
    # clock, so it is found by its commit (under load the two writes fall in different seconds)
    (twin,) = [v for v in history if v.commit == str(forged)]
    assert twin.id == head.version_id
    assert store.read("/secret.md", version=v1.id).content == "the real secret\n"
    before = _ids(store)
    store.core.index.rebuild()
    assert _ids(store) == before


def _pushed_twin(store: Store, tmp_path: Path, scope: str, env: dict[str, str]) -> tuple[str, str, str]:
    """Clone, make a twin of main's first commit as a new root of ``scope``, push it as ``env``."""
    repo, first, _second = _seed(store)
    work = clone(store, tmp_path)
    wrepo = pygit2.Repository(str(work))
    forged = _twin(wrepo, wrepo[first.id], b"forged content\n", None)  # type: ignore[arg-type]
    wrepo.references.create(f"refs/heads/{scope}", forged)
    proc = git("push", "origin", f"{scope}:{scope}", cwd=work, check=False, env=env)
    vid = parse_trailers(first.message)["Gitmem-Version"]
    return vid, str(forged), proc.stderr if proc.returncode else ""


def test_an_untrusted_pushers_twin_owns_no_version_id(store: Store, tmp_path: Path) -> None:
    vid, forged, refused = _pushed_twin(store, tmp_path, "evil", {"REMOTE_USER": "mallory"})
    assert refused == ""
    (copy,) = store.versions(scope="evil")
    assert copy.commit == forged and copy.id != vid and copy.actor == "user:mallory"
    assert store.version(vid).scope == "main"
    before = _ids(store)
    store.core.index.rebuild()
    assert _ids(store) == before


def test_a_trusted_pushers_twin_of_a_known_version_is_refused(store: Store, tmp_path: Path) -> None:
    store.update_settings(acl={"trust_trailers": ["user:mirror"]}, actor="user:root")
    vid, forged, refused = _pushed_twin(store, tmp_path, "evil", {"GITMEM_ACTOR": "user:mirror"})
    assert f"{vid} is a version this store already has" in refused
    assert "evil" not in store.scopes()


def test_a_rebuild_gives_a_copied_id_to_the_same_commit_whatever_the_scope_names(store: Store) -> None:
    repo, first, _second = _seed(store)
    tb = repo.TreeBuilder()
    tb.insert("secret.md", repo.create_blob(b"copy\n"), pygit2.GIT_FILEMODE_BLOB)
    later = pygit2.Signature("admin", "admin@example.com", first.committer.time + 5, 0)
    copy = repo.create_commit(None, first.author, later, first.message, tb.write(), [])
    repo.references.create("refs/heads/aaa", copy)
    before = _ids(store)
    store.core.index.rebuild()
    assert _ids(store) == before


def test_a_copy_dated_before_the_original_owns_the_id_in_both_paths(store: Store) -> None:
    """The rule both ways (docs/identity.md): the earliest claimant owns the id, here the copy on a
    scope sorted after main; the incremental index re-derives main when the copy outranks it."""
    repo, first, _second = _seed(store)
    tb = repo.TreeBuilder()
    tb.insert("secret.md", repo.create_blob(b"copy\n"), pygit2.GIT_FILEMODE_BLOB)
    earlier = pygit2.Signature("admin", "admin@example.com", first.committer.time - 5, 0)
    copy = repo.create_commit(None, first.author, earlier, first.message, tb.write(), [])
    repo.references.create("refs/heads/zzz", copy)
    vid = parse_trailers(first.message)["Gitmem-Version"]
    before = _ids(store)
    assert [(scope, commit) for v, scope, commit in before if v == vid] == [("zzz", str(copy))]
    store.core.index.rebuild()
    assert _ids(store) == before


def test_a_fork_of_a_compacted_scope_is_no_forged_compaction_root(store: Store, tmp_path: Path) -> None:
    """Before: ``git push origin main:fork`` by anyone after a retention compaction gave the
    server's compaction root an untrusted receipt on ``fork``, and ``gitmem verify`` failed from
    then on ("claims to be a compaction root but was pushed by unknown"): a false tampering alarm
    at will. A copy is marked as one; a root a pusher writes is still refused by pre-receive."""
    import time

    from gitmem import config
    from gitmem.audit import retention
    from gitmem.audit.verify import verify

    for i in range(5):
        store.write("/a.md", f"v{i}\n")
    store.update_settings(
        retention=config.Retention(min_days=1, max_days=1, keep_recent=2), actor="user:root"
    )
    assert retention.prune(store.core, now=int(time.time()) + 400 * 86400).compactions
    work = clone(store, tmp_path)
    git("push", "-q", "origin", "main:fork", cwd=work, env={"REMOTE_USER": "mallory"})
    report = verify(store.core, raise_on_failure=False)
    assert report.ok, [c for c in report.checks if not c.ok]
    assert {v.actor for v in store.versions(scope="fork")} == {"user:mallory"}
    # A root the pusher writes itself is refused, as before.
    root = pygit2.Repository(str(work))
    first = root[root.references["refs/remotes/origin/main"].target]
    assert isinstance(first, pygit2.Commit)
    while first.parents:
        first = first.parents[0]
    forged = root.create_commit(None, first.author, first.committer, first.message + "\n", first.tree_id, [])
    root.references.create("refs/heads/forged", forged)
    proc = git("push", "origin", "forged:forged", cwd=work, check=False, env={"REMOTE_USER": "mallory"})
    assert proc.returncode != 0 and "compaction" in proc.stderr
    before = _ids(store)
    store.core.index.rebuild()
    assert _ids(store) == before
