"""A proposal whose scope moved on (docs/review.md, "When the scope moves"): the proposer's next
write replays its chain onto the scope's tip, so that it can change, rename or delete what was
published after the proposal opened; a path both sides changed stays a conflict for the review,
and an accept applies the proposal's changes on the current tip without losing what others
published meanwhile."""

from __future__ import annotations

import shutil
from pathlib import Path

import pygit2
import pytest

from gitmem.audit import review
from gitmem.engine import proposals as P
from gitmem.engine.proposal_rebase import BASE_SUBJECT, stands_on
from gitmem.errors import ConflictError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.store import Store

BOT = Caller(actor="user:bot", session="sesn_bot", review=True)


def proposal(store: Store) -> P.Proposal:
    p = P.open_proposal(store.core, "main", "sesn_bot")
    assert p is not None
    return p


def statuses(store: Store) -> dict[str, str]:
    return {d.path: d.status for d in review.diff(store.core, proposal(store).id)}


def test_a_review_caller_deletes_a_memory_published_after_its_proposal_opened(store: Store) -> None:
    store.write("/a.md", "a\n", caller=BOT)  # opens the proposal
    store.write("/b.md", "b\n", actor="user:ada")  # published after it
    store.delete("/b.md", caller=BOT)
    p = proposal(store)
    assert "/b.md" in P.touched(store.core, p)
    assert store.read("/b.md").content == "b\n"  # the scope is unchanged until a reviewer accepts
    with pytest.raises(NotFoundError, match="your proposal"):
        store.read("/b.md", caller=BOT)
    assert stands_on(store.core, pygit2.Oid(hex=p.base)) == store.core.tip("main")
    store.write("/c.md", "c\n", actor="user:ada")  # another publication, after the delete
    assert statuses(store) == {"/a.md": "clean", "/b.md": "clean"}
    done = review.accept(store.core, p.id, reviewer="user:rev")
    assert sorted(done.paths) == ["/a.md", "/b.md"]
    assert {m.path for m in store.list()} == {"/a.md", "/c.md"}  # b deleted, c kept
    assert store.read("/a.md").content == "a\n"


def test_a_rebased_chain_keeps_its_versions_and_renames_what_was_published_since(store: Store) -> None:
    store.write("/keep.md", "kept\n", actor="user:ada")
    first = store.write("/a.md", "a\n", caller=BOT)
    store.write("/b.md", "b\n", actor="user:ada")
    b_id = store.read("/b.md").memory_id
    store.rename("/b.md", "/moved/b.md", caller=BOT)
    p = proposal(store)
    vs = P.versions(store.core, p.id)
    assert [v.id for v in vs][0] == first.id and [v.path for v in vs] == ["/a.md", "/moved/b.md"]
    assert store.read("/moved/b.md", caller=BOT).content == "b\n"
    review.accept(store.core, p.id, reviewer="user:rev")
    moved = store.read("/moved/b.md")
    assert moved.memory_id == b_id and moved.content == "b\n"
    assert {m.path for m in store.list()} == {"/a.md", "/keep.md", "/moved/b.md"}


def test_a_path_both_sides_changed_stays_a_conflict_across_the_rebase(store: Store) -> None:
    store.write("/base.md", "one\ntwo\n", actor="user:ada")
    store.str_replace("/base.md", "two", "two (bot)", caller=BOT)
    store.str_replace("/base.md", "two", "two (ada)", actor="user:ada")  # published: both changed it
    store.write("/late.md", "late\n", actor="user:ada")
    store.write("/other.md", "other\n", caller=BOT)  # the next write rebases the proposal
    p = proposal(store)
    base = store.core.commit(pygit2.Oid(hex=p.base))
    assert base.message.startswith(BASE_SUBJECT) and base.parent_ids == [store.core.tip("main")]
    (d,) = [d for d in review.diff(store.core, p.id) if d.path == "/base.md"]
    assert (d.status, d.base, d.current) == ("conflict", "one\ntwo\n", "one\ntwo (ada)\n")
    assert d.proposed == "one\ntwo (bot)\n" and "<<<<<<< scope" in d.three_way
    tip = store.core.tip("main")
    with pytest.raises(ConflictError, match="conflicts"):
        review.accept(store.core, p.id, reviewer="user:rev")
    assert store.core.tip("main") == tip  # nothing written
    assert store.read("/base.md", caller=BOT).content == "one\ntwo (bot)\n"
    store.write("/more.md", "more\n", actor="user:ada")
    store.write("/other.md", "other, again\n", caller=BOT)  # a second rebase keeps the origin
    assert statuses(store) == {"/base.md": "conflict", "/other.md": "clean"}
    review.accept(store.core, p.id, reviewer="user:rev", paths=["/other.md"])
    assert store.read("/base.md").content == "one\ntwo (ada)\n"  # never overwritten
    assert {m.path for m in store.list()} == {"/base.md", "/late.md", "/more.md", "/other.md"}


def test_a_delete_the_scope_answered_with_a_change_is_a_conflict(store: Store) -> None:
    store.write("/x.md", "x\n", actor="user:ada")
    store.delete("/x.md", caller=BOT)
    store.write("/x.md", "x, changed\n", actor="user:ada")
    store.write("/y.md", "y\n", caller=BOT)
    assert statuses(store) == {"/x.md": "conflict", "/y.md": "clean"}
    with pytest.raises(ConflictError):
        review.accept(store.core, proposal(store).id, reviewer="user:rev")
    assert store.read("/x.md").content == "x, changed\n"


def test_the_rebase_resurrects_and_discards_nothing(store: Store) -> None:
    store.write("/keep.md", "kept\n", actor="user:ada")
    store.write("/tmp.md", "mine\n", caller=BOT)
    store.delete("/tmp.md", caller=BOT)  # created and deleted: the proposal changes nothing there
    store.write("/same.md", "same\n", caller=BOT)
    store.write("/tmp.md", "ada's\n", actor="user:ada")  # the scope creates it afterwards
    store.write("/same.md", "same\n", actor="user:ada")  # and makes the proposal's change too
    store.delete("/keep.md", actor="user:ada")
    store.write("/new.md", "new\n", caller=BOT)
    p = proposal(store)
    assert P.touched(store.core, p) == ["/new.md"]
    assert store.read("/tmp.md", caller=BOT).content == "ada's\n"
    with pytest.raises(NotFoundError):
        store.read("/keep.md", caller=BOT)
    review.accept(store.core, p.id, reviewer="user:rev")
    assert {m.path: store.read(m.path).content for m in store.list()} == {
        "/new.md": "new\n",
        "/same.md": "same\n",
        "/tmp.md": "ada's\n",
    }
    assert proposal_closed(store, p.id)


def proposal_closed(store: Store, pid: str) -> bool:
    return P.get(store.core, pid).status == "accepted"


def test_a_proposal_opened_on_an_empty_scope_sees_what_was_published_since(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.delete("/nothing.md", caller=BOT)  # opens the proposal on the empty scope
    store.write("/b.md", "b\n", actor="user:ada")
    store.delete("/b.md", caller=BOT)
    store.write("/a.md", "a\n", caller=BOT)
    p = proposal(store)
    assert P.touched(store.core, p) == ["/a.md", "/b.md"]
    review.accept(store.core, p.id, reviewer="user:rev")
    assert {m.path for m in store.list()} == {"/a.md"}


def test_a_redaction_moves_a_rebased_proposal_and_its_conflict_stays(store: Store) -> None:
    from gitmem.audit import redact

    store.update_settings(guard={"secrets": "off"})
    secret = "hunter" + "2" * 3 + "-sesame"
    store.write("/base.md", "one\n", actor="user:ada")
    store.write("/base.md", "one (bot)\n", caller=BOT)
    leak = store.write("/leak.md", f"pw {secret}\n", actor="user:ada")
    store.write("/leak.md", "clean\n", actor="user:ada")
    store.write("/base.md", "one (ada)\n", actor="user:ada")
    store.write("/other.md", "other\n", caller=BOT)  # rebased: a base that keeps the conflict
    before = [v.id for v in P.versions(store.core, proposal(store).id)]
    redact.redact(store.core, leak.id, reason="leaked", actor="user:rev")
    odb = pygit2.Odb(str(store.path / "objects"))
    blobs = [odb.read(oid)[1] for oid in odb if odb.read(oid)[0] == pygit2.enums.ObjectType.BLOB]
    assert not any(secret.encode() in data for data in blobs)
    p = proposal(store)
    assert stands_on(store.core, pygit2.Oid(hex=p.base)) == store.core.tip("main")
    assert [v.id for v in P.versions(store.core, p.id)] == before
    assert statuses(store) == {"/base.md": "conflict", "/other.md": "clean"}
    store.write("/third.md", "3\n", caller=BOT)  # nothing to replay: the scope did not move
    assert P.get(store.core, p.id).base == p.base


def test_a_compaction_moves_a_rebased_proposal_it_no_longer_holds_back(store: Store) -> None:
    from gitmem.audit import retention
    from gitmem.config import Retention
    from tests.audit.test_retention import NOW, write_at

    write_at(store, "/base.md", "one\n", 100)
    store.write("/base.md", "one (bot)\n", caller=BOT)  # the proposal opens on old history
    write_at(store, "/base.md", "one (ada)\n", 90)
    write_at(store, "/base.md", "one (ada), again\n", 80)
    write_at(store, "/b.md", "b\n", 5)
    store.delete("/b.md", caller=BOT)  # rebased: onto the tip, the conflict kept
    store.update_settings(retention=Retention(min_days=10, max_days=30, keep_recent=1))
    result = retention.prune(store.core, actor="service:janitor", now=NOW)
    assert [c.scope for c in result.compactions] == ["main"] and "main" not in result.skipped
    p = proposal(store)
    assert stands_on(store.core, pygit2.Oid(hex=p.base)) == store.core.tip("main")
    assert statuses(store) == {"/b.md": "clean", "/base.md": "conflict"}
    (d,) = [d for d in review.diff(store.core, p.id) if d.path == "/base.md"]
    assert (d.base, d.current) == ("one\n", "one (ada), again\n")
    review.accept(store.core, p.id, reviewer="user:rev", paths=["/b.md"])
    assert {m.path for m in store.list()} == {"/base.md"}


def test_what_the_chain_wrote_and_took_back_stays_erasable_after_a_rebase(store: Store) -> None:
    from tests.secret_scan import scan_store

    store.update_settings(guard={"secrets": "off"})
    store.write("/tmp.md", "poisoned 7c1e-erase-me\n", caller=BOT)
    store.delete("/tmp.md", caller=BOT)  # taken back: the proposal changes nothing there
    store.write("/tmp.md", "ada's\n", actor="user:ada")
    store.write("/next.md", "next\n", caller=BOT)  # rebased
    p = proposal(store)
    assert P.touched(store.core, p) == ["/next.md"]
    assert [v.path for v in P.versions(store.core, p.id)] == ["/tmp.md", "/tmp.md", "/next.md"]
    review.erase(store.core, p.id, reviewer="user:rev", reason="poisoned")
    assert scan_store(store.path, b"7c1e-erase-me") == []
    assert store.read("/tmp.md").content == "ada's\n"


def test_a_proposer_racing_publishers_loses_nothing(store: Store) -> None:
    import threading

    store.write("/open.md", "opens the proposal\n", caller=BOT)
    for i in range(4):
        store.write(f"/seed{i}.md", f"seed {i}\n", actor="user:ada")  # published after it opened
    errors: list[BaseException] = []

    def publisher(name: str) -> None:
        try:
            for i in range(8):
                store.write(f"/{name}{i}.md", f"{name} {i}\n", actor=f"user:{name}")
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def proposer() -> None:
        try:
            for i in range(8):
                store.write(f"/p{i}.md", f"p {i}\n", caller=BOT)
                if i < 4:
                    store.delete(f"/seed{i}.md", caller=BOT)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=publisher, args=(n,)) for n in ("ada", "bob")]
    threads.append(threading.Thread(target=proposer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    p = proposal(store)
    assert len(P.versions(store.core, p.id)) == 1 + 8 + 4
    review.accept(store.core, p.id, reviewer="user:rev")
    expected = {"/open.md"} | {f"/p{i}.md" for i in range(8)}
    expected |= {f"/{n}{i}.md" for n in ("ada", "bob") for i in range(8)}
    assert {m.path for m in store.list()} == expected


def test_a_file_the_scope_made_a_directory_keeps_the_proposal_on_its_base(store: Store) -> None:
    store.write("/x", "x\n", actor="user:ada")
    store.write("/x", "x (bot)\n", caller=BOT)
    base = proposal(store).base
    store.delete("/x", actor="user:ada")
    store.write("/x/y.md", "y\n", actor="user:ada")  # the scope made a directory of it
    store.write("/z.md", "z\n", caller=BOT)  # no replay: it would drop /x/y.md
    p = proposal(store)
    assert p.base == base
    assert statuses(store) == {"/x": "conflict", "/z.md": "clean"}
    with pytest.raises(ConflictError):
        review.accept(store.core, p.id, reviewer="user:rev")
    review.accept(store.core, p.id, reviewer="user:rev", paths=["/z.md"])
    assert {m.path for m in store.list()} == {"/x/y.md", "/z.md"}


def test_a_store_holding_a_conflict_base_verifies_and_restores_from_its_backup(
    store: Store, tmp_path: Path
) -> None:
    """The base commit a rebase writes (``gitmem proposal base``) is a commit no version names:
    the store's own verify and a restore from its bundle must both accept it."""
    import gitmem

    store.write("/base.md", "one\n", actor="user:ada")
    store.write("/base.md", "one (bot)\n", caller=BOT)
    store.write("/base.md", "one (ada)\n", actor="user:ada")
    store.write("/other.md", "other\n", caller=BOT)  # rebases: /base.md is a conflict
    assert store.core.commit(pygit2.Oid(hex=proposal(store).base)).message.startswith(BASE_SUBJECT)
    assert store.verify(raise_on_failure=False).ok
    bundle = tmp_path / "backup.bundle"
    store.export_bundle(bundle)
    backup = tmp_path / "backup"  # the proposals' records, as docs/operations.md copies them
    shutil.copytree(store.path / "gitmem" / "proposals", backup / "proposals")
    home = store.path.parent.parent
    gitmem.store.restore_store("again", bundle, backup=backup, home=home, actor="user:root")
    with gitmem.open_store("again", home=home) as again:
        assert again.verify(raise_on_failure=False).ok
        assert statuses(again) == statuses(store) == {"/base.md": "conflict", "/other.md": "clean"}
