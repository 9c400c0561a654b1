"""The short-term memory layout (docs/conversations.md): records, chunks, and what mounts and search leave out."""

from __future__ import annotations

from pathlib import Path

import pytest

import gitmem
from gitmem import sessions
from gitmem.engine import conversations as conv
from gitmem.engine import shortterm
from gitmem.errors import GuardRejectedError, NotFoundError
from gitmem.store import Store


def _files(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file() and ".gitmem" not in p.parts
    )


def _conversation(store: Store, scope: str = "main", text: str = "the quokka is my favourite animal") -> str:
    made, _ = conv.create(
        store.core,
        scope,
        scope_kind="user",
        metadata={},
        seed=conv.normalize_items([{"role": "user", "content": text}]),
        actor="user:alice",
        session=None,
    )
    return made.id


def test_search_and_mounts_leave_the_records_out(store: Store, tmp_path: Path) -> None:
    store.write("/notes/zoo.md", "quokka notes\n")
    _conversation(store)
    # Search: only the ordinary memory, unless the prefix asks for the records.
    assert [h.path for h in store.search("quokka")] == ["/notes/zoo.md"]
    assert [h.path.split("/")[1] for h in store.search("quokka", path_prefix="/conversations/")] == [
        "conversations"
    ]
    # A mount shows no record; a file an agent puts there is refused, not synced.
    sess = sessions.start_session(["notes"], root=tmp_path / "mnt")
    root = tmp_path / "mnt" / "notes"
    assert _files(root) == ["notes/zoo.md"]
    (root / "conversations").mkdir()
    (root / "conversations" / "x.json").write_text("{}")
    (root / "notes" / "zoo.md").write_text("quokka notes, edited\n")
    before = {m.path for m in store.list("/conversations/")}
    report = sessions.sync_session(sess.id)
    (mount,) = report.mounts
    assert [v.path for v in mount.versions] == ["/notes/zoo.md"]
    assert [(i.path, "reserved" in i.reason) for i in mount.refused] == [("/conversations/x.json", True)]
    assert {m.path for m in store.list("/conversations/")} == before
    # A new turn written meanwhile is not brought into the mount either.
    _conversation(store)
    sessions.sync_session(sess.id)
    assert (root / "conversations" / "x.json").read_text() == "{}"  # left alone
    assert _files(root) == [
        "conversations/x.json",
        "notes/zoo.md",
    ]
    sessions.end_session(sess.id, force=True)


def test_chunks_join_and_a_missing_chunk_is_an_integrity_error(store: Store) -> None:
    text = "€" * 5000  # 15 kB of three-byte characters
    ops = shortterm.write_ops("/conversations/x/items/000001-big.json", text, 1000)
    assert len(ops) == 16 and all(len(o.content.encode()) <= 1000 for o in ops)  # type: ignore[union-attr]
    shortterm.commit(store.core, "main", ops, actor="user:a", session=None)
    (rec,) = shortterm.read_records(store.core, "/conversations/x/", "main")
    assert rec.text == text and len(rec.paths) == 16
    store.delete(rec.paths[3])
    with pytest.raises(gitmem.errors.IntegrityError):
        shortterm.read_records(store.core, "/conversations/x/", "main")


def test_one_change_is_one_branch_move_and_the_guard_refuses_it_whole(store: Store) -> None:
    cid = _conversation(store)
    ulid, _sid, _scope = conv.parse_id(cid)
    tip = store.core.tip("main")
    items = conv.normalize_items([{"role": "user", "content": f"n{i}"} for i in range(5)])
    conv.add_items(store.core, "main", ulid, items, actor="user:a", session=None)
    new_tip = store.core.tip("main")
    # Five versions, one per item, published with one move of the branch: a chain of five commits.
    walk = store.core.repo.walk(new_tip)
    chain = [next(walk) for _ in range(6)]
    assert chain[5].id == tip
    bad = conv.normalize_items(
        [{"role": "user", "content": "fine"}, {"role": "user", "content": "AKIA" + "ABCDEFGHIJKLMNOP"}]
    )
    with pytest.raises(GuardRejectedError):
        conv.add_items(store.core, "main", ulid, bad, actor="user:a", session=None)
    assert store.core.tip("main") == new_tip
    assert len(conv.items(store.core, "main", ulid)) == 6


def test_forged_ids_are_not_found() -> None:
    for bad in [
        "",
        "conv_",
        "conv_01ARZ3NDEKTSV4RRFFQ69G5FAV",
        "conv_01ARZ3NDEKTSV4RRFFQ69G5FAV!!",
        "x" * 300,
    ]:
        with pytest.raises(NotFoundError):
            conv.parse_id(bad)
    good = conv.public_id("memstore_X", "user-1", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert conv.parse_id(good) == ("01ARZ3NDEKTSV4RRFFQ69G5FAV", "memstore_X", "user-1")
    with pytest.raises(NotFoundError):
        conv.parse_id(good + "A")  # not the canonical form of any id


def test_a_scope_confined_caller_reads_no_other_scopes_records(store: Store) -> None:
    from gitmem.errors import AccessError
    from gitmem.model.caller import Caller

    path = "/checkpoints/t1/c1.json"
    for scope in ("main", "other"):
        store.batch(shortterm.write_ops(path, f'{{"in": "{scope}"}}', 1 << 20), scope=scope)
    confined = Caller(actor="agent:a", stores={store.id: "rw"}, scope="other", rights=frozenset({"write"}))
    # its own scope reads as before
    rec = store.record(path, scope="other", caller=confined)
    assert rec is not None and rec.text == '{"in": "other"}'
    assert store.record_paths("/checkpoints/", scope="other", caller=confined) == [path]
    assert [r.text for r in store.records("/checkpoints/", scope="other", caller=confined)] == [
        '{"in": "other"}'
    ]
    # another scope's: refused, whether the record exists or not (no existence oracle)
    for p in (path, "/checkpoints/t1/none.json"):
        with pytest.raises(AccessError):
            store.record(p, scope="main", caller=confined)
    with pytest.raises(AccessError):
        store.record_paths("/checkpoints/", scope="main", caller=confined)
    with pytest.raises(AccessError):
        shortterm.read_one(store.core, path, "main", confined)
    with pytest.raises(AccessError):
        shortterm.paths_under(store.core, "/checkpoints/", "main", confined)
    with pytest.raises(AccessError):
        store.records("/checkpoints/", scope="main", caller=confined)
    with pytest.raises(AccessError):
        shortterm.records_under(store.core, "/checkpoints/", "main", confined)
    # a caller of another store reads none of this one's
    stranger = Caller(actor="agent:b", stores={"memstore_someoneelse": "rw"}, rights=frozenset({"write"}))
    with pytest.raises(AccessError):
        store.record(path, scope="other", caller=stranger)
    with pytest.raises(AccessError):
        store.records("/checkpoints/", scope="other", caller=stranger)
    # no caller (the local process): everything, as before
    main = store.record(path, scope="main")
    assert main is not None and main.text == '{"in": "main"}'
