"""The append-only audit ledger on ``refs/gitmem/ledger`` (docs/architecture.md#the-audit-ledger).

Format (chosen here, and what ``git log refs/gitmem/ledger`` shows): one commit per entry, with the
empty tree, the previous entry's commit as its only parent, author and committer ``gitmem``, and the
message::

    gitmem ledger: <kind> #<seq>

    <the entry as canonical JSON: sorted keys, no spaces, ASCII only>

The entry holds ``seq`` (0, 1, ...), ``kind``, ``at`` (RFC 3339 UTC), ``actor``, ``data`` and ``prev``,
the SHA-256 of the previous entry's canonical JSON ("" for the first). Rewriting any entry breaks every
later ``prev``; rewriting the whole chain is caught by the anchor ``$GIT_DIR/gitmem/ledger_head``
(``<seq> <sha256>`` of the newest entry this store wrote), which ``verify`` compares.

The ledger never holds content, nor raw ids of redacted blobs or retired commits: :func:`digest` gives
keyed digests (HMAC-SHA256 with the per-store secret ``$GIT_DIR/gitmem/secret``, mode 0600); the raw ids
go only to the deny-list ``$GIT_DIR/gitmem/denylist`` (one 40-hex id a line, ``#`` comments), which the
pre-receive hook reads and which is never cloned.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from gitmem import config
from gitmem.engine import checkpoints, denylist, ledger_text
from gitmem.engine.settings_seen import SETTINGS_SEEN, file_digest, read_seen, recorded
from gitmem.errors import ConflictError, GitmemError, IntegrityError
from gitmem.git.fence import check_fence
from gitmem.git.locks import file_lock
from gitmem.git.reflocks import locked_file, wait_or_break_ref_lock
from gitmem.git.repo import retrying

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

LEDGER_REF = "refs/gitmem/ledger"
CLONE_LEDGER_REFS = ("refs/remotes/origin/gitmem/ledger", "refs/gitmem/remote/ledger")
ANCHOR_FILE = "ledger_head"
SEEN_FILE = "ledger_seen"
SECRET_FILE = "secret"
DENYLIST_FILE = "denylist"
SUBJECT_PREFIX = "gitmem ledger: "
KINDS = (
    "store_created",
    "settings_changed",
    "archived",
    "redaction",
    "compaction",
    "push",
    "revert_session",
    "flag",
    "proposal_accepted",
    "proposal_rejected",
    "proposal_erased",
    "store_copied",
)
REJECTED_LOG = "rejected.jsonl"  # rejected pushes, server-side (written by the pre-receive hook)
UNATTRIBUTED = "unknown"
_HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclass(frozen=True)
class LedgerEntry:
    """One ledger entry; ``digest`` is the SHA-256 of its canonical JSON, ``commit`` its commit id."""

    seq: int
    kind: str
    at: str
    actor: str
    data: dict[str, Any] = field(default_factory=dict)
    prev: str = ""
    digest: str = ""
    commit: str = ""


def canonical(body: Mapping[str, Any]) -> str:
    """Canonical JSON: sorted keys, no whitespace, ASCII only (byte-stable across Pythons)."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _body(seq: int, kind: str, at: str, actor: str, data: Mapping[str, Any], prev: str) -> dict[str, Any]:
    return {"seq": seq, "kind": kind, "at": at, "actor": actor, "data": dict(data), "prev": prev}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("ascii")).hexdigest()


# ---------------------------------------------------------------------- files in $GIT_DIR/gitmem
def _dir(store: StoreCore) -> Path:
    d = store.gitmem_dir
    d.mkdir(parents=True, exist_ok=True)
    return d


_secrets: dict[Path, bytes] = {}


def _secret(store: StoreCore) -> bytes:
    cached = _secrets.get(store.path)
    if cached is not None:
        return cached
    path = _dir(store) / SECRET_FILE
    try:
        _secrets[store.path] = bytes.fromhex(path.read_text().strip())
        return _secrets[store.path]
    except FileNotFoundError:
        pass
    tmp = path.with_name(f"{SECRET_FILE}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, (os.urandom(32).hex() + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # atomic and exclusive: a racing creator's secret wins, once
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return bytes.fromhex(path.read_text().strip())


def digest(store: StoreCore, value: str) -> str:
    """Keyed digest of an object id (or a pattern) for the public ledger: ``hmac-sha256:<hex>``."""
    mac = hmac.new(_secret(store), value.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"hmac-sha256:{mac}"


def set_digest(store: StoreCore, oids: Iterable[str]) -> str:
    """One keyed digest of a set of object ids (a rewrite may retire 100k commits)."""
    return digest(store, "\n".join(sorted(oids)))


def deny(
    store: StoreCore,
    oids: Iterable[str],
    comment: str,
    *,
    scoped: Iterable[str] = (),
    scopes: Iterable[str] = (),
) -> int:
    """Add object ids to the deny-list (idempotent); returns how many were new. ``scoped`` ids (a
    redaction's blobs) are refused only in ``scopes`` (:func:`gitmem.engine.denylist.append_block`)."""
    _dir(store)
    return denylist.append_block(store.path, comment, oids, scoped=scoped, scopes=scopes)


def denied_by(store: StoreCore) -> dict[str, set[str]]:
    """The deny-list grouped by the comment above each block (``redaction <id>``, ...)."""
    try:
        text = (store.gitmem_dir / DENYLIST_FILE).read_text(encoding="ascii")
    except FileNotFoundError:
        return {}
    out: dict[str, set[str]] = {}
    current = out.setdefault("", set())
    for line in text.splitlines():
        if line.startswith(denylist.SCOPED):
            continue  # the scopes of the block's blobs: still the block above
        if line.startswith("#"):
            current = out.setdefault(line[1:].strip(), set())
        elif _HEX40.match(line.strip()):
            current.add(line.strip())
    return out


def denied(store: StoreCore) -> set[str]:
    """The raw object ids on the deny-list (empty on a clone: the list is never cloned)."""
    return set(store.denied_ids())


# ---------------------------------------------------------------------- reading
def ledger_tip(store: StoreCore) -> pygit2.Oid | None:
    return store.first_target((LEDGER_REF, *CLONE_LEDGER_REFS) if store.is_clone else (LEDGER_REF,))


def parse_commit(commit: pygit2.Commit) -> LedgerEntry:
    """The entry a ledger commit holds; IntegrityError when it is not one."""
    raw = commit.raw_message.decode("utf-8", "replace")
    subject, _, text = raw.partition("\n\n")
    try:
        body = json.loads(text)
        entry = LedgerEntry(
            seq=int(body["seq"]),
            kind=str(body["kind"]),
            at=str(body["at"]),
            actor=str(body["actor"]),
            data=dict(body["data"]),
            prev=str(body["prev"]),
        )
    except (ValueError, KeyError, TypeError):
        raise IntegrityError(f"ledger commit {commit.id} does not hold a ledger entry") from None
    if canonical(body) != text.rstrip("\n") or not subject.startswith(SUBJECT_PREFIX):
        raise IntegrityError(f"ledger commit {commit.id}: entry #{entry.seq} is not in canonical form")
    return LedgerEntry(
        entry.seq,
        entry.kind,
        entry.at,
        entry.actor,
        entry.data,
        entry.prev,
        _sha(canonical(body)),
        str(commit.id),
    )


def _commits(store: StoreCore, tip: pygit2.Oid | None) -> list[pygit2.Commit]:
    out: list[pygit2.Commit] = []
    oid = tip
    while oid is not None:
        commit = store.commit(oid)
        out.append(commit)
        oid = commit.parent_ids[0] if commit.parent_ids else None
    out.reverse()
    return out


def entries(store: StoreCore, *, kind: str | None = None) -> list[LedgerEntry]:
    """Every entry, oldest first (``kind`` filters). Unparsable entries raise IntegrityError."""
    out = [parse_commit(c) for c in _commits(store, ledger_tip(store))]
    return [e for e in out if kind is None or e.kind == kind]


def check_chain(store: StoreCore) -> list[str]:
    """Problems with the ledger chain (empty: intact), for ``verify``."""
    problems: list[str] = []
    prev, seq = "", 0
    commits = _commits(store, ledger_tip(store))
    by_seq: dict[int, str] = {}
    for commit in commits:
        if len(commit.parent_ids) > 1:
            problems.append(f"ledger commit {commit.id} has {len(commit.parent_ids)} parents")
        try:
            entry = parse_commit(commit)
        except IntegrityError as exc:
            problems.append(exc.message)
            return problems
        if entry.seq != seq:
            problems.append(f"ledger entry {commit.id} has seq {entry.seq}, expected {seq}")
        if entry.prev != prev:
            problems.append(f"ledger entry #{entry.seq} ({commit.id}) does not chain to the previous entry")
        by_seq[entry.seq] = entry.digest
        prev, seq = entry.digest, seq + 1
    for name in (ANCHOR_FILE, SEEN_FILE):
        anchor = _read_anchor(store.gitmem_dir / name)
        if anchor is not None and by_seq.get(anchor[0]) != anchor[1]:
            problems.append(
                f"the ledger was rewritten: entry #{anchor[0]} is not the one recorded in "
                f"$GIT_DIR/gitmem/{name} (history of the audit trail changed)"
            )
    return problems


def _read_anchor(path: Path) -> tuple[int, str] | None:
    try:
        seq, value = path.read_text().split()
        return int(seq), value
    except (FileNotFoundError, ValueError):
        return None


def _write_anchor(path: Path, seq: int, value: str) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(f"{seq} {value}\n")
    os.replace(tmp, path)


def remember_seen(store: StoreCore) -> None:
    """On a clone: record the ledger's newest entry, so a later rewrite of it is detected."""
    chain = entries(store)
    if chain:
        _write_anchor(_dir(store) / SEEN_FILE, chain[-1].seq, chain[-1].digest)


# ---------------------------------------------------------------------- writing
def append(store: StoreCore, kind: str, data: Mapping[str, Any], actor: str | None = None) -> LedgerEntry:
    """Append one entry (serialised by ``$GIT_DIR/gitmem/ledger.lock``, the ref moved by CAS)."""
    if kind not in KINDS:
        raise ValueError(f"unknown ledger entry kind {kind!r}")
    ledger_text.screen_entry(store, kind, data, actor)  # the last line: screened by the caller already
    repo = store.repo
    with file_lock(_dir(store) / "ledger.lock"):
        for _attempt in range(20):
            ref = repo.references.get(LEDGER_REF)
            tip = ref.target if ref is not None else None
            last = parse_commit(store.commit(tip)) if isinstance(tip, pygit2.Oid) else None
            _check_anchor(store, tip if isinstance(tip, pygit2.Oid) else None, last)
            seq = last.seq + 1 if last else 0
            body = _body(
                seq, kind, config.now_rfc3339(), actor or "service:gitmem", data, last.digest if last else ""
            )
            text = canonical(body)
            now = int(time.time())
            sig = pygit2.Signature("gitmem", "gitmem", now, 0)
            message = f"{SUBJECT_PREFIX}{kind} #{seq}\n\n{text}\n"
            parents = [tip] if isinstance(tip, pygit2.Oid) else []
            empty = store.empty_tree()
            oid = retrying(functools.partial(repo.create_commit, None, sig, sig, message, empty, parents))
            store.sync_objects([oid])
            check_fence(repo.path)  # a store in a cluster: only its lease holder appends (docs/cluster.md)
            try:
                if ref is None:
                    repo.references.create(LEDGER_REF, oid, force=False)
                else:
                    ref.set_target(oid, "gitmem ledger")
            except (pygit2.AlreadyExistsError, pygit2.GitError, OSError) as exc:
                if locked_file(exc, LEDGER_REF):  # held, or left by a killed writer: removed when stale
                    wait_or_break_ref_lock(repo.path, LEDGER_REF)  # (libgit2 says so by an OSError)
                elif isinstance(exc, OSError):
                    raise
                continue
            entry = LedgerEntry(
                seq, kind, body["at"], body["actor"], dict(data), body["prev"], _sha(text), str(oid)
            )
            _write_anchor(store.gitmem_dir / ANCHOR_FILE, seq, entry.digest)
            _checkpoint(store, seq, text)
            return entry
    raise ConflictError("could not append to the ledger: refs/gitmem/ledger kept moving")


def leaves(store: StoreCore) -> list[bytes]:
    """The transparency log's leaves: each entry's canonical JSON, oldest first (docs/transparency.md)."""
    return [
        checkpoints.leaf_bytes(canonical(_body(e.seq, e.kind, e.at, e.actor, e.data, e.prev)))
        for e in entries(store)
    ]


def _checkpoint(store: StoreCore, seq: int, text: str) -> None:
    """Sign the checkpoint covering entry ``seq``. The entry is already durable: a failure to sign is
    recorded (``$GIT_DIR/gitmem/tlog/lagging``, reported by verify) and healed by the next append."""
    lagging = store.gitmem_dir / checkpoints.TLOG_DIR / "lagging"
    try:
        checkpoints.on_append(store, seq, checkpoints.leaf_bytes(text), lambda: leaves(store))
    except Exception as exc:  # noqa: BLE001 - the append itself succeeded
        lagging.parent.mkdir(parents=True, exist_ok=True)
        lagging.write_text(f"{seq} {type(exc).__name__}: {exc}\n", encoding="utf-8")
    else:
        lagging.unlink(missing_ok=True)


def _check_anchor(store: StoreCore, tip: pygit2.Oid | None, last: LedgerEntry | None) -> None:
    """Refuse to extend a ledger that no longer holds the entry last written here (truncated or
    rewritten behind gitmem's back): appending would move the anchor and hide the tampering."""
    anchor = _read_anchor(store.gitmem_dir / ANCHOR_FILE)
    if anchor is None:
        return
    seq, digest = anchor
    entry, commit = last, store.commit(tip) if tip is not None else None
    while entry is not None and commit is not None and entry.seq > seq and commit.parents:
        commit = commit.parents[0]  # usually none or one step: a crash between ref and anchor
        entry = parse_commit(commit)
    if entry is None or entry.seq != seq or entry.digest != digest:
        raise IntegrityError(
            f"the audit ledger of {store.path} no longer holds entry #{seq} recorded in "
            f"$GIT_DIR/gitmem/{ANCHOR_FILE}: it was truncated or rewritten; run gitmem verify"
        )


def record_push(store: StoreCore, record: Mapping[str, Any]) -> LedgerEntry:
    """A push the post-receive hook accepted (``record``: ref updates, pusher, ... without content)."""
    actor = record.get("actor")
    return append(store, "push", record, actor=actor if isinstance(actor, str) else None)


def find(store: StoreCore, kind: str, key: str, value: str) -> LedgerEntry | None:
    """The newest entry of ``kind`` whose ``data[key] == value`` (idempotent recovery and a
    redaction's receipt use it): walked from the tip back, so the entry just appended is found in
    one step, not after parsing the whole ledger. An unparsable entry on the way raises
    IntegrityError."""
    oid = ledger_tip(store)
    while oid is not None:
        commit = store.commit(oid)
        entry = parse_commit(commit)
        if entry.kind == kind and entry.data.get(key) == value:
            return entry
        oid = commit.parent_ids[0] if commit.parent_ids else None
    return None


# ---------------------------------------------------------------------- settings changes
def settings_diff(old: Mapping[str, Any], new: Mapping[str, Any], prefix: str = "") -> list[dict[str, Any]]:
    """Readable diff of two settings mappings: one ``{"key", "old", "new"}`` per changed leaf
    (dotted keys, e.g. ``acl.write.team``); ``updated_at`` is left out."""
    out: list[dict[str, Any]] = []
    for key in sorted(set(old) | set(new), key=str):
        name = f"{prefix}{key}"
        if name == "updated_at":
            continue
        a, b = old.get(key), new.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            out += settings_diff(a, b, name + ".")
        elif a != b:
            out.append({"key": name, "old": a, "new": b})
    return out


def remember_settings(store: StoreCore) -> None:
    """Record the settings file as gitmem wrote it (after create or update)."""
    seen = {
        "sha256": file_digest(store.settings_path),
        "settings": _plain(store.reload_settings().to_dict()),
    }
    path = _dir(store) / SETTINGS_SEEN
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(seen, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def _plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def record_settings_change(
    store: StoreCore, old: Mapping[str, Any], changes: Iterable[str], actor: str | None
) -> LedgerEntry:
    """The ledger entry of a settings change made through gitmem: its actor and a readable diff."""
    new = _plain(store.settings.to_dict())
    keys = sorted(changes)
    kind = "archived" if "archived_at" in keys and new.get("archived_at") else "settings_changed"
    data = {"changes": {k: new[k] for k in keys}, "diff": settings_diff(_plain(dict(old)), new)}
    entry = append(store, kind, ledger_text.settings_entry(store, data), actor=actor)
    remember_settings(store)
    return entry


def check_hand_edit(store: StoreCore) -> LedgerEntry | None:
    """A ``gitmem.yaml`` changed behind gitmem's back (a hand edit) is recorded once, as an
    unattributed settings change with its diff; returns that entry (None: no change, or it cannot
    be recorded now: a reader without write access, a ledger ``verify`` must look at first)."""
    if store.is_clone:
        return None
    try:
        with file_lock(store.gitmem_dir / (SETTINGS_SEEN + ".lock")):
            seen = read_seen(store.gitmem_dir)
            if recorded(seen, store.settings_path):
                return None
            if seen is None:  # a store from before this record: start it now
                remember_settings(store)
                return None
            new = _plain(store.reload_settings().to_dict())
            diff = settings_diff(seen.get("settings") or {}, new)
            data = {"source": "hand edit of gitmem.yaml", "unattributed": True, "diff": diff}
            entry = append(
                store, "settings_changed", ledger_text.settings_entry(store, data), actor=UNATTRIBUTED
            )
            remember_settings(store)
            return entry
    except (OSError, GitmemError):  # a broken settings file or ledger: the caller reports it
        return None


def rejected_pushes(store: StoreCore) -> list[dict[str, Any]]:
    """The pushes the pre-receive hook refused (``$GIT_DIR/gitmem/rejected.jsonl``), oldest first."""
    try:
        text = (store.gitmem_dir / REJECTED_LOG).read_text(encoding="utf-8")
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and isinstance(rec.get("at"), int):
            out.append(rec)
    return out
