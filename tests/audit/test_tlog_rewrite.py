"""An operator's rewrite of the ledger, re-signed with the same key, is caught by ``verify`` on a
clone that saw an older checkpoint (docs/transparency.md#verify)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pygit2
import pytest

import gitmem
from gitmem.audit import transparency
from gitmem.audit.verify import verify
from gitmem.engine import checkpoints, ledger
from gitmem.errors import IntegrityError
from gitmem.model.tlog import merkle, note
from gitmem.model.tlog.checkpoint import parse_body
from gitmem.push.clone import clone
from gitmem.store import Store


def _flags(store: Store, n: int, tag: str) -> None:
    for i in range(n):
        ledger.append(store.core, "flag", {"note": f"{tag} {i}"}, actor="user:op")


def _operator_rewrite(store: Store) -> None:
    """Reset the ledger and the checkpoints to the first entry, erase every private trace, append
    different entries: each is signed again with the store's own key."""
    core, repo = store.core, store.core.repo
    first = ledger.entries(core)[0]
    repo.references[ledger.LEDGER_REF].set_target(pygit2.Oid(hex=first.commit), "operator")
    cps = repo.references[checkpoints.CHECKPOINTS_REF]
    oid = cps.target
    while repo[oid].parent_ids:
        oid = repo[oid].parent_ids[0]
    cps.set_target(oid, "operator")
    tdir = core.gitmem_dir / checkpoints.TLOG_DIR
    for name in (ledger.ANCHOR_FILE,):
        (core.gitmem_dir / name).unlink(missing_ok=True)
    for name in (checkpoints.STATE_FILE, transparency.SEEN_FILE):
        (tdir / name).unlink(missing_ok=True)
    _flags(store, 3, "rewritten")


def test_every_append_signs_a_checkpoint_of_the_ledger(store: Store) -> None:
    _flags(store, 4, "x")
    leaves = ledger.leaves(store.core)
    signed = note.open_note(
        checkpoints.current(store.core)["checkpoint"],
        [note.ed25519_verifier(transparency.log_vkey(store.core))],
    )
    cp = parse_body(signed.text)
    assert len(leaves) == 5 and (cp.origin, cp.size) == (f"gitmem/{store.settings.id}", 5)
    assert cp.root == merkle.root_hash([merkle.leaf_hash(x) for x in leaves])
    assert leaves[1] == ledger.canonical({**_body(ledger.entries(store.core)[1])}).encode()
    assert len(checkpoints.history(store.core)) == 5
    key = store.core.gitmem_dir / "tlog" / "log.key"
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert transparency.check(store.core) == []


def _body(e: ledger.LedgerEntry) -> dict[str, object]:
    return {"seq": e.seq, "kind": e.kind, "at": e.at, "actor": e.actor, "data": e.data, "prev": e.prev}


def test_rewrite_resigned_is_caught_on_a_clone_that_saw_the_old_checkpoint(
    store: Store, tmp_path: Path
) -> None:
    _flags(store, 3, "true")
    dest = tmp_path / "c"
    clone("notes", dest)
    with gitmem.open_store(dest) as c:
        verify(c.core)  # clean; remembers the checkpoint of size 4
    _operator_rewrite(store)
    with gitmem.open_store(store.path) as s:  # on the store itself, with every trace erased, it passes
        assert transparency.check(s.core) == []
    subprocess.run(  # plain git, forced: gitmem fetch would refuse the non-extension
        ["git", "fetch", "-q", "origin", "+refs/gitmem/*:refs/gitmem/*"],
        cwd=dest,
        check=True,
        capture_output=True,
    )
    with gitmem.open_store(dest) as c:
        problems = transparency.check(c.core)
        assert any("size 4 seen before is not consistent with the newest (size 4)" in p for p in problems), (
            problems
        )
        with pytest.raises(IntegrityError, match="transparency log"):
            verify(c.core)


def test_a_rotated_key_is_trusted_through_the_cross_signed_checkpoint(store: Store, tmp_path: Path) -> None:
    _flags(store, 2, "a")
    dest = tmp_path / "c"
    clone("notes", dest)
    with gitmem.open_store(dest) as c:
        verify(c.core)
    old = transparency.log_vkey(store.core)
    new = checkpoints.rotate_key(store.core)
    assert new.verifier().vkey() != old
    retired = list((store.core.gitmem_dir / "tlog").glob("log.key.retired-*"))
    assert len(retired) == 1 and stat.S_IMODE(os.stat(retired[0]).st_mode) == 0o600
    _flags(store, 2, "b")
    n = note.parse(checkpoints.current(store.core)["checkpoint"])
    assert [s.key_id for s in n.sigs] == [new.key_id]  # only the new key signs from now on
    subprocess.run(["git", "fetch", "-q", "origin", "refs/gitmem/*:refs/gitmem/*"], cwd=dest, check=True)
    with gitmem.open_store(dest) as c:
        assert transparency.check(c.core) == []


def test_a_checkpoint_signed_by_an_unknown_key_is_refused_on_the_clone(store: Store, tmp_path: Path) -> None:
    dest = tmp_path / "c"
    clone("notes", dest)
    with gitmem.open_store(dest) as c:
        verify(c.core)
    (store.core.gitmem_dir / "tlog" / "log.key").unlink()  # the operator swaps keys without cross-signing
    checkpoints._signers.clear()
    _flags(store, 1, "z")
    subprocess.run(["git", "fetch", "-q", "origin", "refs/gitmem/*:refs/gitmem/*"], cwd=dest, check=True)
    with gitmem.open_store(dest) as c:
        assert any("not signed by a trusted log key" in p for p in transparency.check(c.core))


def _mth(leaves: list[bytes]) -> bytes:
    """RFC 6962 section 2.1, written again here from the RFC's text (not gitmem's merkle module)."""
    import hashlib

    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return hashlib.sha256(b"\x00" + leaves[0]).digest()
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _mth(leaves[:k]) + _mth(leaves[k:])).digest()


def test_the_stores_checkpoint_checked_by_hand(store: Store) -> None:
    """The note split, key id, Ed25519 signature and root recomputed with hashlib and cryptography."""
    import base64
    import hashlib

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    _flags(store, 6, "hand")
    signed = checkpoints.current(store.core)["checkpoint"]
    text, _, sigline = signed.rpartition("\n\n")
    name, b64 = sigline.strip().removeprefix("\u2014 ").split(" ")
    vname, vid, vkey = transparency.log_vkey(store.core).split("+", 2)
    raw = base64.b64decode(vkey)
    assert raw[0] == 1 and name == vname == f"gitmem/{store.settings.id}"
    assert hashlib.sha256(name.encode() + b"\n\x01" + raw[1:]).digest()[:4].hex() == vid
    sig = base64.b64decode(b64)
    assert sig[:4].hex() == vid
    Ed25519PublicKey.from_public_bytes(raw[1:]).verify(sig[4:], (text + "\n").encode())
    origin, size, root = text.split("\n")
    bodies = [
        c.raw_message.decode().partition("\n\n")[2].rstrip("\n").encode() for c in _ledger_commits(store)
    ]
    assert (origin, int(size)) == (name, len(bodies)) and base64.b64decode(root) == _mth(bodies)


def _ledger_commits(store: Store) -> list[pygit2.Commit]:
    repo = store.core.repo
    out = list(repo.walk(repo.references[ledger.LEDGER_REF].target))
    return list(reversed(out))
