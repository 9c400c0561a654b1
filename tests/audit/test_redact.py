"""Redaction: proved with plain git (cat-file, log -p, grep over every revision, a fresh clone)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem.audit import redact
from gitmem.audit.verify import verify
from gitmem.engine import ledger
from gitmem.errors import ForbiddenError, InvalidInputError, NotFoundError
from gitmem.git import rewrite
from gitmem.store import Store
from tests.helpers import git, snapshot

SECRET = "sk-live-7f3a9c"


def _history(store: Store, scope: str = "main") -> list[pygit2.Commit]:
    tip = store.core.tip(scope)
    assert tip is not None
    return list(store.core.walk(tip))


def _raw_header_without_tree(store: Store, commit: pygit2.Commit) -> tuple[list[bytes], bytes]:
    raw = store.core.repo.odb.read(commit.id)[1]
    header, _, message = raw.partition(b"\n\n")
    kept = [ln for ln in header.split(b"\n") if not ln.startswith((b"tree ", b"parent "))]
    return kept, message


@pytest.fixture
def leaky(store: Store) -> tuple[Store, list[gitmem.Version]]:
    vs = [
        store.write("/notes/a.md", "first\n", actor="user:alice"),
        store.write("/notes/a.md", f"token {SECRET}\n", actor="user:alice", session="sesn-1"),
        store.write("/notes/a.md", "rotated\n", actor="user:bob"),
        store.write("/notes/b.md", "unrelated\n", actor="user:bob"),
    ]
    assert all(v is not None for v in vs)
    return store, vs  # type: ignore[return-value]


def test_redacted_content_is_gone_for_plain_git(
    leaky: tuple[Store, list[gitmem.Version]], tmp_path: Path
) -> None:
    store, vs = leaky
    before = _history(store)
    blob = store.core.repo.get(before[1].tree["notes/a.md"].id)
    assert blob is not None
    r = redact.redact(store.core, vs[1].id, reason="leaked key", actor="user:admin")
    assert r.versions == [vs[1].id] and r.rewritten_commits == 3
    gone = [str(blob.id)] + [str(c.id) for c in before[1:]]
    for oid in gone:
        assert git(store.path, "cat-file", "-e", oid, check=False).returncode != 0
    log = git(store.path, "log", "-p", "--all").stdout
    assert SECRET not in log and f"[redacted: {r.id}]" in log
    revs = git(store.path, "rev-list", "--all").stdout.split()
    assert git(store.path, "grep", SECRET, *revs, check=False).stdout == ""
    clone = tmp_path / "fresh"
    git(tmp_path, "clone", "-q", "--mirror", str(store.path), str(clone))
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in clone.rglob("*") if p.is_file())
    assert git(clone, "log", "-p", "--all").stdout.count(SECRET) == 0


def test_metadata_is_kept_byte_for_byte(leaky: tuple[Store, list[gitmem.Version]]) -> None:
    store, vs = leaky
    before = _history(store)
    raw_before = [_raw_header_without_tree(store, c) for c in before]
    redact.redact(store.core, vs[1].id, reason="leaked key")
    after = _history(store)
    assert after[0].id == before[0].id  # before the first affected commit: ids unchanged
    assert not {c.id for c in after[1:]} & {c.id for c in before[1:]}
    assert [_raw_header_without_tree(store, c) for c in after] == raw_before
    assert [v.id for v in store.versions()] == [v.id for v in reversed(vs)]
    assert store.read("/notes/a.md").content == "rotated\n"
    assert store.read("/notes/a.md", version=vs[0].id).content == "first\n"


def test_redacted_version_shows_who_when_why(leaky: tuple[Store, list[gitmem.Version]]) -> None:
    store, vs = leaky
    r = redact.redact(store.core, vs[1].id, reason="leaked key", actor="user:admin")
    v = store.version(vs[1].id)
    assert v.redaction is not None
    assert (v.redaction.id, v.redaction.actor, v.redaction.reason) == (r.id, "user:admin", "leaked key")
    assert v.content_sha256 is None and v.actor == "user:alice" and v.session == "sesn-1"
    with pytest.raises(NotFoundError, match="redacted"):
        store.read("/notes/a.md", version=vs[1].id)
    store.core.index.rebuild()  # the mark survives re-deriving the index from git (and the ledger)
    assert store.version(vs[1].id).redaction is not None


def test_head_content_is_refused_and_nothing_is_written(store: Store) -> None:
    v = store.write("/a.md", f"{SECRET}\n")
    assert v is not None
    before = snapshot(store)
    with pytest.raises(ForbiddenError, match="write a new version or delete"):
        redact.redact(store.core, v.id, reason="x")
    assert ForbiddenError.exit_code == 6
    assert snapshot(store) == before


def test_content_restored_to_head_elsewhere_is_refused(store: Store) -> None:
    old = store.write("/a.md", f"{SECRET}\n")
    store.write("/a.md", "clean\n")
    store.write("/copy.md", f"{SECRET}\n")
    assert old is not None
    with pytest.raises(ForbiddenError, match="/copy.md"):
        redact.redact(store.core, old.id, reason="x")


def test_pattern_scrubs_history_only(store: Store) -> None:
    store.write("/a.md", "user=al key=sk-111\n")
    store.write("/b.md", "key=sk-222 and sk-333\n")
    store.write("/a.md", "user=al\n")
    store.write("/b.md", "nothing\n")
    r = redact.redact_pattern(store.core, r"sk-\d+", reason="keys")
    assert len(r.versions) == 2
    log = git(store.path, "log", "-p", "--all").stdout
    assert "sk-" not in log.replace(r.id, "")
    old_a = store.versions("/a.md")[-1]
    assert old_a.redaction is not None
    assert store.read("/b.md").content == "nothing\n"


def test_pattern_matching_a_head_is_refused(store: Store) -> None:
    store.write("/a.md", "sk-1\n")
    store.write("/b.md", "old sk-2\n")
    store.write("/b.md", "new\n")
    before = snapshot(store)
    with pytest.raises(ForbiddenError):
        redact.redact_pattern(store.core, r"sk-\d", reason="keys")
    with pytest.raises(InvalidInputError, match="matches no version"):
        redact.redact_pattern(store.core, r"zzz", reason="keys")
    assert snapshot(store) == before


def test_other_scopes_keep_their_commit_ids(store: Store) -> None:
    store.write("/t.md", "team one\n", scope="team")
    store.write("/t.md", "team two\n", scope="team")
    v = store.write("/a.md", f"{SECRET}\n")
    store.write("/a.md", "clean\n")
    assert v is not None
    team = store.core.tip("team")
    redact.redact(store.core, v.id, reason="x")
    assert store.core.tip("team") == team
    assert store.read("/t.md", scope="team").content == "team two\n"


def test_same_content_in_another_scope_is_redacted_there_too(store: Store) -> None:
    v = store.write("/a.md", f"{SECRET}\n")
    store.write("/a.md", "clean\n")
    store.write("/x.md", f"{SECRET}\n", scope="team")
    store.write("/x.md", "gone\n", scope="team")
    assert v is not None
    r = redact.redact(store.core, v.id, reason="x")
    assert r.scopes == ["main", "team"]
    assert {t.scope for t in r.touched} == {"main", "team"}


def test_ledger_and_denylist_hold_digests_not_raw_ids(leaky: tuple[Store, list[gitmem.Version]]) -> None:
    store, vs = leaky
    old_commit = store.version(vs[1].id).commit
    r = redact.redact(store.core, vs[1].id, reason="leaked key")
    entry = ledger.find(store.core, "redaction", "id", r.id)
    assert entry is not None
    listed = entry.data["versions"][0]
    assert listed["version"] == vs[1].id and listed["new_commit"] == store.version(vs[1].id).commit
    assert listed["author"] == "user:alice <user:alice>"
    assert listed["commit_digest"] == ledger.digest(store.core, old_commit)
    text = git(store.path, "log", "refs/gitmem/ledger").stdout
    assert old_commit not in text and SECRET not in text
    assert old_commit in ledger.denied(store.core)
    full = git(store.path, "log", "-p", "--format=%B", "refs/gitmem/ledger").stdout
    assert not [o for o in ledger.denied(store.core) if o in full]  # no raw retired id anywhere in it
    assert (store.core.gitmem_dir / "secret").stat().st_mode & 0o777 == 0o600
    verify(store.core)


def test_concurrent_writer_loses_nothing(leaky: tuple[Store, list[gitmem.Version]], workspace: Path) -> None:
    store, vs = leaky
    written: list[str] = []

    def writer() -> None:
        with gitmem.open_store("notes", home=workspace) as other:
            for i in range(25):
                v = other.write("/busy.md", f"n{i}\n", actor="user:w")
                assert v is not None
                written.append(v.id)

    t = threading.Thread(target=writer)
    t.start()
    redact.redact(store.core, vs[1].id, reason="x")
    t.join()
    ids = {v.id for v in store.versions("/busy.md")}
    assert ids == set(written) and len(ids) == 25
    assert store.read("/busy.md").content == "n24\n"
    assert store.version(vs[1].id).redaction is not None
    verify(store.core)


def test_bad_input_writes_nothing(leaky: tuple[Store, list[gitmem.Version]]) -> None:
    store, vs = leaky
    before = snapshot(store)
    with pytest.raises(InvalidInputError):
        redact.redact(store.core, vs[1].id, reason="  ")
    with pytest.raises(InvalidInputError):
        redact.redact(store.core, "nope", reason="x")
    with pytest.raises(NotFoundError):
        redact.redact(store.core, "memver_01M8N6Y6B4Z6834DD52ZND7DKP", reason="x")
    with pytest.raises(InvalidInputError):
        redact.redact_pattern(store.core, "(", reason="x")
    assert snapshot(store) == before


def test_packed_history_and_plain_git_commits(store: Store) -> None:
    from tests.helpers import plain_commit

    store.write("/a.md", "one\n")
    plain_commit(store, {"a.md": f"{SECRET}\n".encode()}, message="raw message, no newline")
    store.write("/a.md", "three\n")
    git(store.path, "repack", "-a", "-d", "-q")
    leaked = [v for v in store.versions("/a.md") if v.actor == "git:bob@example.com"][0]
    old_commit = leaked.commit
    redact.redact(store.core, leaked.id, reason="x")
    assert git(store.path, "cat-file", "-e", old_commit, check=False).returncode != 0
    commit = store.core.commit(store.version(leaked.id).commit)
    assert commit.raw_message == b"raw message, no newline"
    assert SECRET not in git(store.path, "log", "-p", "--all").stdout
    verify(store.core)


def test_stale_clone_cannot_push_redacted_history_back(
    leaky: tuple[Store, list[gitmem.Version]], tmp_path: Path
) -> None:
    store, vs = leaky
    clone = tmp_path / "stale"
    git(tmp_path, "clone", "-q", str(store.path), str(clone))
    redact.redact(store.core, vs[1].id, reason="leaked key")
    (clone / "notes" / "c.md").write_text("new from a stale clone\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "stale edit")
    git(clone, "pull", "-q", "--no-rebase", "--no-edit", "origin", "main")  # merges the old history in
    res = git(clone, "push", "origin", "HEAD:main", check=False)
    assert res.returncode != 0
    assert "redacted" in res.stderr or "retired" in res.stderr, res.stderr
    assert SECRET not in git(store.path, "log", "-p", "--all").stdout


def test_only_packs_holding_retired_objects_are_rewritten(store: Store) -> None:
    store.write("/old.md", "packed long ago\n")
    git(store.path, "repack", "-d", "-q")  # pack 1: everything so far
    v = store.write("/a.md", f"{SECRET}\n")
    store.write("/a.md", "clean\n")
    assert v is not None
    git(store.path, "repack", "-d", "-q")  # pack 2: the secret and what came with it
    packs = sorted((store.path / "objects" / "pack").glob("*.idx"))
    assert len(packs) == 2
    blob = store.core.index.version_rows("id=?", (v.id,))[0].blob
    assert blob is not None
    kept = rewrite.packs_without(store.core, {blob})
    assert len(kept) == 1 and kept[0] in packs
    with open(kept[0], "rb") as fh:  # plain git agrees that the kept pack lacks the blob
        listed = subprocess.run(["git", "show-index"], stdin=fh, capture_output=True, text=True).stdout
    assert blob not in listed
    redact.redact(store.core, v.id, reason="x")
    assert kept[0].exists()  # the untouched pack was kept as it was
    assert git(store.path, "cat-file", "-e", blob, check=False).returncode != 0


def test_rewritten_objects_come_in_one_valid_pack(leaky: tuple[Store, list[gitmem.Version]]) -> None:
    store, vs = leaky
    packs = set((store.path / "objects" / "pack").glob("*.idx"))
    redact.redact(store.core, vs[1].id, reason="x")
    new = set((store.path / "objects" / "pack").glob("*.idx")) - packs
    assert len(new) == 1
    listed = git(store.path, "verify-pack", "-v", str(new.pop())).stdout
    assert listed.count(" commit ") == 3  # the three rewritten commits
    assert git(store.path, "fsck", "--full", "--strict").returncode == 0


def test_index_keeps_no_redacted_content(leaky: tuple[Store, list[gitmem.Version]]) -> None:
    store, vs = leaky
    store.search("token")  # the search index saw the secret while it was the head
    redact.redact(store.core, vs[1].id, reason="x")
    store.close()
    files = list(store.core.gitmem_dir.glob("index.sqlite*"))
    assert files and all(SECRET.encode() not in f.read_bytes() for f in files)
