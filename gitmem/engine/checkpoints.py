"""The ledger's signed checkpoints on ``refs/gitmem/checkpoints`` (docs/transparency.md).

Every ledger append (:func:`on_append`, called by :func:`gitmem.engine.ledger.append` under the ledger
lock) extends an RFC 6962 tree whose leaves are the entries' canonical JSON and signs a C2SP
checkpoint with the store's Ed25519 key. Each commit on the ref carries ``checkpoint`` (the newest
signed note, with the cosignatures gathered so far) as its message's body, then, after a form feed
line, ``witnessed`` (the newest checkpoint a witness cosigned, when it is not the newest); its tree
holds one blob, ``keys`` (every log vkey, oldest first). (Older commits hold ``checkpoint`` and
``witnessed`` as blobs; they read the same.) The key is ``$GIT_DIR/gitmem/tlog/log.key`` (0600);
the tree's frontier is kept in memory, cached in ``$GIT_DIR/gitmem/tlog/state.json`` and rebuilt
from the ledger when it does not give the newest signed root. Nothing blocks on a witness:
listeners (:func:`add_listener`) are told of each new checkpoint. With a committing one (``gitmem
serve``'s witness worker) an append signs and pays no commit: the checkpoint and the cosignatures
(:func:`add_cosignatures`) wait in memory (:func:`current`, :func:`history` show them; a newer
append supersedes) until :func:`flush` folds them in one commit. A crash loses only what can be
rebuilt: the entries are durable, the same tree signs to the same note (Ed25519 is deterministic:
:func:`gitmem.audit.witnessing.resign`), and a witness asked again cosigns again.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from gitmem.engine.checkpoint_ref import CHECKPOINTS_REF as CHECKPOINTS_REF
from gitmem.engine.checkpoint_ref import CLONE_CHECKPOINTS_REFS as CLONE_CHECKPOINTS_REFS
from gitmem.engine.checkpoint_ref import commit as _commit
from gitmem.engine.checkpoint_ref import files_at as _files
from gitmem.engine.checkpoint_ref import keys_of as _keys
from gitmem.engine.checkpoint_ref import ref_tip as _tip
from gitmem.errors import GitmemError
from gitmem.git.locks import file_lock
from gitmem.model.tlog import checkpoint as checkpoint_mod
from gitmem.model.tlog import note
from gitmem.model.tlog.checkpoint import Checkpoint, parse_body
from gitmem.model.tlog.merkle import CompactRange, leaf_hash

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

TLOG_DIR = "tlog"
KEY_FILE = "log.key"
STATE_FILE = "state.json"
LEAVES_FILE = "leaves"
_listeners: list[Callable[[Path], None]] = []
_committers: list[Callable[[Path], None]] = []  # listeners that commit what they are told of
_signers: dict[Path, tuple[float, note.Ed25519Signer, str]] = {}  # store -> (key mtime, key, key path)
_ranges: dict[Path, CompactRange] = {}  # the frontier after the last append of this process
_roots: dict[Path, bytes] = {}  # and its root
_signed_here: dict[Path, tuple[str, str]] = {}  # the note this process signed last, and by which vkey
_mem = threading.RLock()  # this process's uncommitted checkpoints change under it (after the ledger lock)
_recent: dict[Path, tuple[int, list[bytes]]] = {}  # the leaf hashes of this process's last appends
STATE_EVERY = 64  # state.json is rewritten every this many appends (the leaves file fills the gap)


def add_listener(fn: Callable[[Path], None], commits: bool = False) -> None:
    """Call ``fn(store path)`` after each new checkpoint of this process (it must not block).
    ``commits``: ``fn`` promises to have the checkpoint committed soon (:func:`flush`): while such a
    listener is registered, an append signs and leaves the commit to it, and cosignatures are kept
    with the uncommitted checkpoint (the witness worker: no commit on an append's path)."""
    if fn not in _listeners:
        _listeners.append(fn)
    if commits and fn not in _committers:
        _committers.append(fn)


def remove_listener(fn: Callable[[Path], None]) -> None:
    for group in (_listeners, _committers):
        if fn in group:
            group.remove(fn)


@dataclass(frozen=True)
class _Pending:  # a checkpoint signed (or cosigned) and not committed yet: the tip it extends, its files
    tip: pygit2.Oid | None
    files: dict[str, str]
    what: str


_pending: dict[Path, _Pending] = {}


def _pending_for(store: StoreCore, tip: pygit2.Oid | None) -> _Pending | None:
    """This process's uncommitted checkpoint for the store, when the ref has not moved since."""
    p = _pending.get(store.path)
    return p if p is not None and p.tip == tip else None


def flush(store: StoreCore) -> bool:
    """Commit this process's uncommitted checkpoint of the store, if any; whether one was."""
    if store.path not in _pending:
        return False
    with file_lock(store.gitmem_dir / "ledger.lock"):
        return _flush_locked(store)


def _flush_locked(store: StoreCore) -> bool:
    if store.path not in _pending:
        return False
    with _mem:
        tip = _tip(store)
        p = _pending_for(store, tip)
        if p is None:
            _pending.pop(store.path, None)
            return False
        _commit(store, tip, p.files, p.what)
        _pending.pop(store.path, None)
        return True


def pending_paths() -> list[Path]:
    """The stores with a checkpoint signed by this process and not committed yet."""
    return list(_pending)


_made: dict[Path, tuple[Path, str]] = {}  # store path -> its tlog directory (Path and str)


def tlog_dir(store: StoreCore) -> Path:
    """``$GIT_DIR/gitmem/tlog``, made (0700) when missing (paths built once per store)."""
    d = _made.get(store.path)
    if d is None or not os.path.isdir(d[1]):
        path = store.gitmem_dir / TLOG_DIR
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        d = _made[store.path] = (path, str(path))
    return d[0]


def origin(store: StoreCore) -> str:
    """The log's origin line and key name: ``gitmem/<store id>``."""
    return f"gitmem/{store.settings.id}"


def leaf_bytes(canonical_json: str) -> bytes:
    """A leaf: the entry's canonical JSON, ASCII (what the ledger commit's message body holds)."""
    return canonical_json.encode("ascii")


# ---------------------------------------------------------------------- the key
def _write_private(path: Path, text: str) -> None:
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def signer(store: StoreCore) -> note.Ed25519Signer:
    """The store's log key, created (0600) on first use (read again when its file changes)."""
    cached = _signers.get(store.path)
    if cached is not None:
        with contextlib.suppress(OSError):
            if os.stat(cached[2]).st_mtime == cached[0]:
                return cached[1]
    path = tlog_dir(store) / KEY_FILE
    try:
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        with file_lock(path.with_name(KEY_FILE + ".lock")):
            if not path.exists():
                _write_private(path, note.Ed25519Signer(origin(store), os.urandom(32)).skey() + "\n")
        mtime = path.stat().st_mtime
    s = note.ed25519_signer(path.read_text(encoding="ascii"))
    _signers[store.path] = (mtime, s, str(path))
    return s


def rotate_key(store: StoreCore) -> note.Ed25519Signer:
    """A new log key: the newest checkpoint is signed again by the old and the new key (so verifiers
    trusting the old key learn the new one), the old key file is kept as ``log.key.retired-<id>``."""
    old = signer(store)
    new = note.Ed25519Signer(origin(store), os.urandom(32))
    with file_lock(store.gitmem_dir / "ledger.lock"):
        _flush_locked(store)
        tip = _tip(store)
        files = _files(store, tip)
        body = parse_body(note.parse(files["checkpoint"]).text).body() if "checkpoint" in files else None
        if body is None:
            body = Checkpoint(origin(store), 0, CompactRange().root()).body()
        signed = note.sign(body, [old, new]).encode()
        keys = _keys(files) + [new.verifier().vkey()]
        path = tlog_dir(store) / KEY_FILE
        retired = path.with_name(f"{KEY_FILE}.retired-{old.key_id:08x}")
        _write_private(retired, old.skey() + "\n")
        _commit(
            store,
            tip,
            {**files, "checkpoint": signed, "keys": "".join(k + "\n" for k in keys)},
            "key rotated",
        )
        _write_private(path, new.skey() + "\n")
    return new


# ---------------------------------------------------------------------- the tree's frontier
def _load_range(store: StoreCore) -> CompactRange | None:
    try:
        data = json.loads((tlog_dir(store) / STATE_FILE).read_text(encoding="ascii"))
        return CompactRange(int(data["size"]), [bytes.fromhex(h) for h in data["range"]])
    except Exception:  # noqa: BLE001 - a missing or damaged cache is rebuilt, never trusted
        return None


def _save_range(store: StoreCore, cr: CompactRange) -> None:
    path = tlog_dir(store) / STATE_FILE
    tmp = path.with_name(f"{STATE_FILE}.tmp{os.getpid()}")
    tmp.write_text(json.dumps({"size": cr.size, "range": [h.hex() for h in cr.hashes]}), encoding="ascii")
    os.replace(tmp, path)  # a cache: no fsync, a lost one is rebuilt from the ledger


def _frontier(
    store: StoreCore, seq: int, prev: Checkpoint | None, leaves: Callable[[], Iterable[bytes]]
) -> CompactRange:
    """The frontier of the tree of the first ``seq`` leaves: this process's own (the common case),
    else ``state.json`` extended from the leaf-hash cache, else rebuilt from the ledger. A cached one is
    used only when it gives the root of the newest signed checkpoint (of size ``seq``): a stale or
    damaged cache never gets a wrong root signed."""
    cr = _ranges.get(store.path)
    if prev is not None and cr is not None and (cr.size, _roots.get(store.path)) == (seq, prev.root):
        return CompactRange(cr.size, cr.hashes)  # the frontier this process signed ``prev`` from
    if cr is None or cr.size != seq:
        cr = _load_range(store)
        if cr is not None and cr.size < seq:
            more = cached_leaf_hashes(store, cr.size, seq)
            for h in more or ():
                cr.append(h)
    if (
        cr is not None
        and cr.size == seq
        and (seq == 0 or (prev is not None and prev.size == seq and cr.root() == prev.root))
    ):
        return CompactRange(cr.size, cr.hashes)
    cr = CompactRange()
    rebuilt = [leaf_hash(data) for i, data in enumerate(leaves()) if i < seq]
    for h in rebuilt:
        cr.append(h)
    (tlog_dir(store) / LEAVES_FILE).write_bytes(b"".join(rebuilt))
    return cr


def on_append(store: StoreCore, seq: int, leaf: bytes, leaves: Callable[[], Iterable[bytes]]) -> str:
    """Sign and commit the checkpoint of the tree with entry ``seq`` (``leaf``) as its last leaf;
    ``leaves`` gives every leaf when the cached frontier lags. Runs under the ledger lock. Returns
    the signed note. Its cost (bench/tlog_bench.py): a few hashes, one signature, one commit object
    (the tree is the previous one's), one fsync and the ref's move; with a committing listener, no
    commit (the fold's)."""
    with _mem:
        signed = _sign(store, seq, leaf, leaves)
    for fn in list(_listeners):
        with contextlib.suppress(Exception):  # a listener never fails a write
            fn(store.path)
    return signed


def _sign(store: StoreCore, seq: int, leaf: bytes, leaves: Callable[[], Iterable[bytes]]) -> str:
    if not _committers:
        _flush_locked(store)  # a committer left: what it did not fold is committed first
    tip = _tip(store)
    p = _pending_for(store, tip) if _committers else None
    files = dict(p.files) if p is not None else _files(store, tip)  # a newer append supersedes it
    prev = files.get("checkpoint")
    prev_cp = None
    if prev is not None:  # its text is what precedes the blank line (parse_body memoises it)
        with contextlib.suppress(GitmemError, ValueError):
            prev_cp = parse_body(prev[: prev.index("\n\n") + 1])
    cr = _frontier(store, seq, prev_cp, leaves)
    new = leaf_hash(leaf)
    cr.append(new)
    root = cr.root()
    body = checkpoint_mod.remember(Checkpoint(origin(store), cr.size, root))
    s = signer(store)
    keys, vkey = _keys(files), s.vkey
    signed = note.remember(note.sign(body, [s]))  # the round reads it next: no parse there
    files = {**files, "checkpoint": signed}
    if vkey not in keys:
        files["keys"] = "".join(k + "\n" for k in [*keys, vkey])
    if prev and _cosigned(prev):  # the witnessed one stays readable once a newer one is signed
        files["witnessed"] = prev
    if _committers:  # the witness worker folds it, with the cosignatures gathered by then
        _pending[store.path] = _Pending(tip, files, f"ledger entry #{seq}")
    else:
        _commit(store, tip, files, f"ledger entry #{seq}")
    _ranges[store.path], _roots[store.path] = cr, root
    _signed_here[store.path] = (signed, vkey)
    if cr.size % STATE_EVERY == 0:
        _save_range(store, cr)
    recent = _recent.get(store.path)
    if recent is None or recent[0] + len(recent[1]) != seq or len(recent[1]) >= 64:
        recent = _recent[store.path] = (seq, [])
    recent[1].append(new)
    fd = os.open(os.path.join(tlog_dir(store), LEAVES_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:  # the leaf hashes (proofs without the ledger); a cache, checked against signed roots
        os.write(fd, new) if os.fstat(fd).st_size == seq * 32 else os.ftruncate(fd, 0)
    finally:
        os.close(fd)
    return signed


def signed_here(store: StoreCore, text: str) -> str | None:
    """The vkey that signed ``text`` when it is the note this process signed last for the store
    (its signature needs no check), else None."""
    mine = _signed_here.get(store.path)
    return mine[1] if mine is not None and mine[0] == text else None


def cached_leaf_hashes(store: StoreCore, start: int, end: int) -> list[bytes] | None:
    """Leaf hashes ``[start, end)`` from this process's last appends or ``gitmem/tlog/leaves`` (None
    when the cache lacks them); a cache: proofs built on it are checked against a signed root."""
    recent = _recent.get(store.path)
    if recent is not None and recent[0] <= start and end <= recent[0] + len(recent[1]):
        return recent[1][start - recent[0] : end - recent[0]]
    try:
        with open(store.gitmem_dir / TLOG_DIR / LEAVES_FILE, "rb") as fh:
            fh.seek(start * 32)
            data = fh.read((end - start) * 32)
    except FileNotFoundError:
        return None
    if len(data) != (end - start) * 32:
        return None
    return [data[i : i + 32] for i in range(0, len(data), 32)]


def _cosigned(signed: str) -> bool:  # whether a note carries more than the log's signature
    return signed.count("\n" + note.DASH) > 1


# ---------------------------------------------------------------------- reading
def current(store: StoreCore) -> dict[str, str]:
    """The newest commit's files: ``checkpoint``, ``keys`` and maybe ``witnessed`` (empty: none);
    in the process that signed it, the checkpoint not committed yet."""
    tip = _tip(store)
    p = _pending_for(store, tip)
    return dict(p.files) if p is not None else _files(store, tip)


def history(store: StoreCore) -> list[str]:
    """Every checkpoint note the ref's history holds, oldest first (cosignature updates included)."""
    out = list(newest_first(store))
    out.reverse()
    return out


def newest_first(store: StoreCore) -> Iterator[str]:
    """:func:`history`, newest first and read lazily (a receipt stops at the first that will do)."""
    oid = _tip(store)
    p = _pending_for(store, oid)
    if p is not None:
        yield p.files["checkpoint"]
    while oid is not None:
        commit = store.commit(oid)
        files = _files(store, oid)
        if "checkpoint" in files:
            yield files["checkpoint"]
        oid = commit.parent_ids[0] if commit.parent_ids else None


def add_cosignatures(store: StoreCore, body: str, sigs: Iterable[note.Signature]) -> bool:
    """Store witness cosignatures of checkpoint ``body`` with it (on ``checkpoint`` when it is still the
    newest, else on ``witnessed``); the caller verified them. Returns whether anything changed. With
    a committing listener they join the uncommitted checkpoint, in memory (no commit and no file
    lock: :func:`flush` folds them, checking the ref did not move; one lost in a crash is asked for
    again), else they are committed now."""
    new = list(sigs)
    if _committers or store.path in _pending:
        with _mem:
            p = _pending.get(store.path)
            tip = p.tip if p is not None else _tip(store)
            got = _merged(store, dict(p.files) if p is not None else _files(store, tip), body, new)
            if got is not None:
                what = f"{p.what}, {got[1]}" if p is not None else got[1]
                _pending[store.path] = _Pending(tip, got[0], what)
            return got is not None
    with file_lock(store.gitmem_dir / "ledger.lock"), _mem:
        tip = _tip(store)
        got = _merged(store, _files(store, tip), body, new)
        if got is not None:
            _commit(store, tip, got[0], got[1])
        return got is not None


def _merged(
    store: StoreCore, files: dict[str, str], body: str, new: list[note.Signature]
) -> tuple[dict[str, str], str] | None:
    """``files`` with the cosignatures ``new`` of ``body`` added, and what to call it (None: nothing new)."""
    for slot in ("checkpoint", "witnessed"):
        text = files.get(slot)
        if text is not None and note.parse(text).text == body:
            break
    else:
        slot, text = "witnessed", None
        old = files.get("witnessed")
        if old is not None and parse_body(note.parse(old).text).size > parse_body(body).size:
            return None  # a newer checkpoint is already witnessed
        logged = [n for n in history(store) if note.parse(n).text == body]
        if not logged:
            return None
        text = logged[-1]
    parsed = note.parse(text)
    have = {(s.name, s.key_id) for s in parsed.sigs}
    added = [s for s in new if (s.name, s.key_id) not in have]
    if not added:
        return None
    files[slot] = note.Note(parsed.text, (*parsed.sigs, *added)).encode()
    return files, f"cosigned by {', '.join(s.name for s in added)}"
