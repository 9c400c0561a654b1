"""The checkpoint ref's layout and the frontier's caches (docs/transparency.md#checkpoints): an append
writes one object (the notes in the commit's message, the tree unchanged), commits of the earlier
layout (notes as tree blobs) read the same and are continued, and a stale or damaged frontier cache
never gets a wrong root signed."""

from __future__ import annotations

import json
import os

import pygit2

from gitmem.audit import transparency
from gitmem.engine import checkpoints, ledger
from gitmem.model.tlog import merkle, note
from gitmem.model.tlog.checkpoint import parse_body
from gitmem.store import Store


def _size(store: Store) -> int:
    return parse_body(note.parse(checkpoints.current(store.core)["checkpoint"]).text).size


def _ledger_root(store: Store) -> bytes:
    return merkle.Tree([merkle.leaf_hash(x) for x in ledger.leaves(store.core)]).root()


def test_an_append_writes_one_commit_over_the_same_tree(store: Store) -> None:
    core, repo = store.core, store.core.repo
    ledger.append(core, "flag", {"n": 0})
    before = repo.references[checkpoints.CHECKPOINTS_REF].target
    ledger.append(core, "flag", {"n": 1})
    after = repo.references[checkpoints.CHECKPOINTS_REF].target
    a, b = repo[before], repo[after]
    assert b.parent_ids == [before] and b.tree_id == a.tree_id  # one new object: the commit
    assert [e.name for e in b.tree] == ["keys"]
    subject, _, body = b.message.partition("\n\n")
    assert subject.startswith("gitmem checkpoint ") and body == checkpoints.current(core)["checkpoint"]
    assert transparency.check(core) == []


def test_the_earlier_layout_reads_the_same_and_is_continued(store: Store) -> None:
    core, repo = store.core, store.core.repo
    ledger.append(core, "flag", {"n": 0})
    files = checkpoints.current(core)
    tip = repo.references[checkpoints.CHECKPOINTS_REF].target
    builder = repo.TreeBuilder()  # the earlier layout: every file a blob of the tree
    for name in sorted(files):
        builder.insert(name, repo.create_blob(files[name].encode()), pygit2.enums.FileMode.BLOB)
    sig = pygit2.Signature("gitmem", "gitmem", 0, 0)
    old = repo.create_commit(None, sig, sig, "gitmem checkpoint 1: earlier\n", builder.write(), [tip])
    repo.references[checkpoints.CHECKPOINTS_REF].set_target(old, "test")
    assert checkpoints.current(core) == files
    assert checkpoints.history(core)[-1] == files["checkpoint"]
    size = _size(store)
    ledger.append(core, "flag", {"n": 1})
    assert _size(store) == size + 1 and transparency.check(core) == []
    assert [e.name for e in repo[repo.references[checkpoints.CHECKPOINTS_REF].target].tree] == ["keys"]


def test_a_damaged_frontier_cache_is_rebuilt_not_signed(store: Store) -> None:
    core = store.core
    for i in range(5):
        ledger.append(core, "flag", {"n": i})
    n = _size(store)
    tdir = core.gitmem_dir / checkpoints.TLOG_DIR
    # A cache of the right size and shape but wrong hashes, and no in-memory frontier.
    (tdir / checkpoints.STATE_FILE).write_text(
        json.dumps({"size": n, "range": [os.urandom(32).hex() for _ in range(bin(n).count("1"))]})
    )
    checkpoints._ranges.clear()
    ledger.append(core, "flag", {"n": 5})
    assert _size(store) == n + 1 and transparency.check(core) == []
    assert parse_body(note.parse(checkpoints.current(core)["checkpoint"]).text).root == _ledger_root(store)
    # A damaged leaf-hash cache extending an older state file: the same.
    (tdir / checkpoints.STATE_FILE).write_text(json.dumps({"size": 0, "range": []}))
    data = bytearray((tdir / checkpoints.LEAVES_FILE).read_bytes())
    data[40] ^= 0xFF
    (tdir / checkpoints.LEAVES_FILE).write_bytes(bytes(data))
    checkpoints._ranges.clear()
    ledger.append(core, "flag", {"n": 6})
    assert _size(store) == n + 2 and transparency.check(core) == []
    assert parse_body(note.parse(checkpoints.current(core)["checkpoint"]).text).root == _ledger_root(store)
    # And a stale in-memory frontier (another process appended meanwhile) is not trusted either.
    checkpoints._ranges[core.path] = merkle.CompactRange(
        7, [os.urandom(32) for _ in range(bin(7).count("1"))]
    )
    ledger.append(core, "flag", {"n": 7})
    assert _size(store) == n + 3 and transparency.check(core) == []
