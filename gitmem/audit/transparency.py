"""The ledger as a transparency log, checked (docs/transparency.md#verify).

:func:`check` (a ``gitmem verify`` check, on stores and clones): every checkpoint on
``refs/gitmem/checkpoints`` and every one remembered in ``$GIT_DIR/gitmem/tlog/seen.json`` is signed
by a trusted log key and is consistent (an RFC 6962 consistency proof, computed from the ledger's
leaves and verified against both signed roots) with the newest, whose root is the ledger's. A ledger
reset and re-signed with the same key therefore fails on any clone (or store) that saw an older
checkpoint. :func:`remember` records the newest checkpoint and the trusted keys after a clean verify.

Trust: a clone trusts the keys it remembered, else (first sight) the first key of the ``keys`` file;
a new key becomes trusted when a checkpoint is signed both by it and by a trusted key (rotation).
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.engine import checkpoints, ledger
from gitmem.errors import GitmemError, IntegrityError, InvalidInputError
from gitmem.model.tlog import merkle, note
from gitmem.model.tlog.checkpoint import Checkpoint, parse_body

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

SEEN_FILE = "seen.json"
MAX_SEEN = 512


@dataclass(frozen=True)
class Signed:
    """A checkpoint whose log signature verified: its parsed body and its whole note."""

    cp: Checkpoint
    text: str


def _load_seen(store: StoreCore) -> dict[str, Any]:
    try:
        data = json.loads((store.gitmem_dir / checkpoints.TLOG_DIR / SEEN_FILE).read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, ValueError):
        return {}


def tree(store: StoreCore) -> merkle.Tree:
    """The ledger's Merkle tree (leaf ``i``: entry ``seq == i``'s canonical JSON)."""
    return merkle.Tree([merkle.leaf_hash(leaf) for leaf in ledger.leaves(store)])


_trees: dict[Path, merkle.Tree] = {}


def tree_at(store: StoreCore, size: int, root: bytes) -> merkle.Tree:
    """A tree of at least ``size`` leaves whose root at ``size`` is ``root`` (a signed one): kept in
    memory per store and extended from the leaf-hash cache, so a witness round or a receipt costs
    O(log^2 n); rebuilt from the ledger when the cache does not give that root."""
    t = _trees.get(store.path)
    if t is None or len(t.leaves) > size:
        t = merkle.Tree()
    if len(t.leaves) < size:
        more = checkpoints.cached_leaf_hashes(store, len(t.leaves), size)
        if more is not None:
            t.extend(more)
    if len(t.leaves) < size or t.root(size) != root:
        t = tree(store)
    _trees[store.path] = t
    return t


def trusted_chain(
    notes: list[str], keys: list[str], trusted: set[str]
) -> tuple[list[Signed], set[str], list[str]]:
    """Verify ``notes`` (oldest first) against ``trusted`` vkeys, learning cross-signed keys from
    ``keys``; returns the verified checkpoints, the trusted keys after them, and the problems."""
    trusted = set(trusted)
    out: list[Signed] = []
    problems: list[str] = []
    for text in notes:
        try:
            n = note.parse(text)
            cp = parse_body(n.text)
            good = note.verified(n, [note.ed25519_verifier(k) for k in sorted(trusted)])
            if not good:
                problems.append(f"checkpoint of size {cp.size} is not signed by a trusted log key")
                continue
            for k in keys:
                if k not in trusted and note.verified(n, [note.ed25519_verifier(k)]):
                    trusted.add(k)  # signed by a trusted key and this one: a rotation
        except GitmemError as exc:
            problems.append(f"a checkpoint does not verify: {exc.message}")
            continue
        out.append(Signed(cp, text))
    return out, trusted, problems


def check(store: StoreCore) -> list[str]:
    """Problems with the transparency log (empty: every seen checkpoint extends to the newest)."""
    files = checkpoints.current(store)
    seen = _load_seen(store)
    if not files:  # a store from before checkpoints (its next append signs), a clone without the ref
        if seen.get("checkpoints"):
            return ["refs/gitmem/checkpoints is gone, although checkpoints were seen here before"]
        return []
    leaves = ledger.leaves(store)
    keys = [k for k in files.get("keys", "").splitlines() if k.strip()]
    start = set(seen.get("keys") or keys[:1])
    history, trusted, problems = trusted_chain(checkpoints.history(store), keys, start)
    remembered, _, more = trusted_chain(list(seen.get("checkpoints") or []), [], trusted)
    problems += [f"remembered {p}" for p in more]
    if not history:
        return problems or ["no checkpoint on refs/gitmem/checkpoints verifies"]
    newest = history[-1].cp
    if newest.origin != checkpoints.origin(store):
        problems.append(
            f"the newest checkpoint names origin {newest.origin!r}, not {checkpoints.origin(store)!r}"
        )
    t = merkle.Tree([merkle.leaf_hash(leaf) for leaf in leaves])
    if newest.size > len(leaves):
        return [
            *problems,
            f"the ledger holds {len(leaves)} entries but a checkpoint of size {newest.size} was signed: it was truncated",
        ]
    if t.root(newest.size) != newest.root:
        problems.append(f"the newest checkpoint (size {newest.size}) does not match the ledger's entries")
    lagging = store.gitmem_dir / checkpoints.TLOG_DIR / "lagging"
    if newest.size < len(leaves) and lagging.exists():
        problems.append(f"signing a checkpoint failed: {lagging.read_text(encoding='utf-8').strip()}")
    by_key: dict[tuple[int, bytes], Signed] = {}
    for s in [*history, *remembered]:
        by_key.setdefault((s.cp.size, s.cp.root), s)
    for (size, root), _s in sorted(by_key.items()):
        if size > newest.size:
            problems.append(
                f"a checkpoint of size {size} was seen, newer than the newest ({newest.size}): the log was rolled back"
            )
            continue
        proof = t.consistency_proof(size, newest.size)
        if not merkle.verify_consistency(size, newest.size, root, newest.root, proof):
            problems.append(
                f"the checkpoint of size {size} seen before is not consistent with the newest (size "
                f"{newest.size}): the ledger was rewritten"
            )
    return problems


def remember(store: StoreCore) -> None:
    """Record the newest verified checkpoint and the trusted keys (after a clean verify, a clone).
    Only what is on the ref is remembered: a checkpoint this process signed and left to the witness
    round is committed first (a crash would otherwise leave a remembered one newer than the ref)."""
    with contextlib.suppress(GitmemError, OSError):
        checkpoints.flush(store)
    if store.path in checkpoints.pending_paths():
        return
    files = checkpoints.current(store)
    if not files:
        return
    seen = _load_seen(store)
    keys = [k for k in files.get("keys", "").splitlines() if k.strip()]
    history, trusted, problems = trusted_chain(
        checkpoints.history(store), keys, set(seen.get("keys") or keys[:1])
    )
    if problems or not history:
        return
    notes = [n for n in seen.get("checkpoints") or [] if isinstance(n, str)]
    newest = history[-1].text
    if newest not in notes:
        notes.append(newest)
    data = {"keys": sorted(trusted), "checkpoints": notes[:1] + notes[1:][-(MAX_SEEN - 1) :]}
    path = checkpoints.tlog_dir(store) / SEEN_FILE
    tmp = path.with_name(f"{SEEN_FILE}.tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps(data, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:  # a store on a read-only mount still verifies; it only remembers nothing new
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)


def inclusion(store: StoreCore, index: int, size: int) -> list[bytes]:
    """The inclusion proof of entry ``index`` in the tree of ``size``."""
    return tree(store).inclusion_proof(index, size)


def consistency(store: StoreCore, old: int, new: int) -> list[bytes]:
    """The consistency proof from the tree of ``old`` entries to the tree of ``new``."""
    return tree(store).consistency_proof(old, new)


def rotate_key(store: StoreCore) -> str:
    """Rotate the log key (:func:`gitmem.engine.checkpoints.rotate_key`); returns the new vkey."""
    return checkpoints.rotate_key(store).verifier().vkey()


def log_vkey(store: StoreCore) -> str:
    """The store's current log verifier key (for witnesses' and verifiers' configuration)."""
    return checkpoints.signer(store).verifier().vkey()


_newest_memo: dict[tuple[str, str], Signed] = {}


def newest(store: StoreCore, files: dict[str, str] | None = None) -> Signed:
    """The newest checkpoint (of ``files``, else :func:`checkpoints.current`; its signature checked
    against the store's own keys; memoised by note and keys, which are immutable once read)."""
    files = checkpoints.current(store) if files is None else files
    if "checkpoint" not in files:
        raise InvalidInputError(f"{store.path} has no signed checkpoint yet")
    memo_key = (files["checkpoint"], files.get("keys", ""))
    hit = _newest_memo.get(memo_key)
    if hit is not None:
        return hit
    keys = [k for k in files.get("keys", "").splitlines() if k.strip()]
    n = note.parse(files["checkpoint"])
    if checkpoints.signed_here(store, files["checkpoint"]) not in keys and not note.verified(
        n, [note.ed25519_verifier(k) for k in keys]
    ):  # a note this process signed itself with one of the keys needs no second look
        raise IntegrityError("the newest checkpoint is not signed by the store's log keys")
    if len(_newest_memo) > 64:
        _newest_memo.clear()
    _newest_memo[memo_key] = Signed(parse_body(n.text), files["checkpoint"])
    return _newest_memo[memo_key]
