"""Redaction receipts: C2SP tlog-proofs that a redaction's ledger entry is in the log
(docs/transparency.md#receipts).

A receipt is a tlog-proof whose ``extra`` line is the entry's leaf bytes (its canonical JSON: what
was erased, by whom, when and why, identified only by keyed digests, never by raw ids of erased
blobs or commits, and never the content), whose index is the entry's ``seq`` and whose checkpoint
is the newest one that holds it and satisfies the policy's quorum (else the newest one: the
receipt is then ``pending``). :func:`verify_receipt` needs nothing but the receipt and a
tlog-policy: it checks the log signature, every cosignature of a known witness, the quorum, the
inclusion proof of ``SHA-256(0x00 || extra)`` and that the entry is a redaction at that index.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.audit import transparency
from gitmem.engine import access, checkpoints, ledger
from gitmem.errors import GitmemError, IntegrityError, InvalidInputError, NotFoundError
from gitmem.model.tlog import merkle, note, proof
from gitmem.model.tlog import policy as policy_mod
from gitmem.model.tlog.checkpoint import parse_body
from gitmem.model.tlog.policy import Policy

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore
    from gitmem.model.caller import Caller

KINDS = ("redaction", "compaction", "proposal_erased")


@dataclass(frozen=True)
class Receipt:
    """A redaction's receipt: ``status`` is ``complete`` once the policy's quorum cosigned."""

    redaction: str
    status: str
    index: int
    size: int
    cosigned_by: list[str] = field(default_factory=list)
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "redaction": self.redaction,
            "status": self.status,
            "index": self.index,
            "tree_size": self.size,
            "cosigned_by": self.cosigned_by,
            "receipt": self.text,
        }


@dataclass(frozen=True)
class Verified:
    """What a receipt proves, once verified."""

    entry: dict[str, Any]
    index: int
    size: int
    origin: str
    witnesses: list[str]


def _cosigners(signed: str, policy: Policy | None) -> list[str]:
    if policy is None:
        return []
    n = note.parse(signed)
    out = []
    for name, w in policy.witnesses.items():
        try:
            if note.verified(n, [w]):
                out.append(name)
        except IntegrityError:
            continue
    return out


def receipt(
    store: StoreCore, redaction_id: str, policy: Policy | None = None, *, caller: Caller | None = None
) -> Receipt:
    """The receipt of redaction ``redaction_id`` (NotFoundError when the ledger has none). A
    ``caller`` that may not read every scope the entry covers is refused (ForbiddenError:
    ``gitmem.engine.access.admit_receipt``): the proof covers the whole entry, so it is the whole
    entry or nothing."""
    entry = next((e for kind in KINDS if (e := ledger.find(store, kind, "id", redaction_id))), None)
    if entry is None:
        raise NotFoundError(f"no redaction {redaction_id} in the ledger of {store.path}")
    access.admit_receipt(store, caller, redaction_id, entry_scopes(entry.data))
    files = checkpoints.current(store)
    current = [files[k] for k in ("checkpoint", "witnessed") if k in files]
    newest: tuple[str, int] | None = None
    chosen: tuple[str, int, list[str]] | None = None
    for i, signed in enumerate(itertools.chain(current, checkpoints.newest_first(store))):
        size = parse_body(note.parse(signed).text).size
        if size <= entry.seq:
            if i >= len(current):  # the ref's history, newest first: every older one is smaller
                break
            continue
        newest = newest or (signed, size)
        names = _cosigners(signed, policy)
        if policy is not None and policy.satisfied(names) and policy.witnesses:
            chosen = (signed, size, names)
            break
    if newest is None:
        raise NotFoundError(f"no checkpoint covers redaction {redaction_id} yet (entry #{entry.seq})")
    status = "complete" if chosen is not None else "pending"
    if chosen is None:
        chosen = (newest[0], newest[1], _cosigners(newest[0], policy))
    signed, size, names = chosen
    leaf = checkpoints.leaf_bytes(ledger.canonical(_body(entry)))
    cp = parse_body(note.parse(signed).text)
    path = transparency.tree_at(store, cp.size, cp.root).inclusion_proof(entry.seq, size)
    if not merkle.verify_inclusion(merkle.leaf_hash(leaf), entry.seq, size, path, cp.root):
        # the ledger's newest entry with this id is not the log's leaf at its seq (an entry
        # appended behind gitmem's back, an id reused): a receipt of it would not verify
        raise IntegrityError(
            f"the ledger's entry for {redaction_id} (#{entry.seq}) is not the log's leaf #{entry.seq}: "
            "the ledger was rewritten; run gitmem verify"
        )
    text = proof.TlogProof(entry.seq, tuple(path), signed, extra=leaf).encode()
    return Receipt(redaction_id, status, entry.seq, size, names, text)


def entry_scopes(data: dict[str, Any]) -> set[str]:
    """Every scope a redaction's (compaction's, erasure's) ledger entry covers: its ``scope``, its
    ``scopes`` and the scope of each version it names."""
    out = {data["scope"]} if isinstance(data.get("scope"), str) else set()
    scopes = data.get("scopes")
    out |= {s for s in scopes if isinstance(s, str)} if isinstance(scopes, list) else set()
    versions = data.get("versions")
    for v in versions if isinstance(versions, list) else []:
        if isinstance(v, dict) and isinstance(v.get("scope"), str):
            out.add(v["scope"])
    return out


def _body(e: ledger.LedgerEntry) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "at": e.at, "actor": e.actor, "data": e.data, "prev": e.prev}


def verify_receipt(text: str | bytes, policy: Policy) -> Verified:
    """Verify a receipt offline against ``policy``; IntegrityError says what does not hold."""
    try:
        p = proof.parse(text)
        signed = note.parse(p.checkpoint)
        cp = parse_body(signed.text)
    except GitmemError as exc:
        raise IntegrityError(f"not a valid receipt: {exc.message}") from None
    if p.extra is None:
        raise IntegrityError("the receipt carries no ledger entry (no extra line)")
    try:
        entry = json.loads(p.extra.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise IntegrityError("the receipt's entry is not JSON") from None
    if not isinstance(entry, dict) or ledger.canonical(entry).encode("ascii") != p.extra:
        raise IntegrityError("the receipt's entry is not a ledger entry in canonical form")
    if entry.get("kind") not in KINDS or entry.get("seq") != p.index:
        raise IntegrityError(f"the receipt's entry is not a redaction at index {p.index}")
    logs = [v for v in policy.logs if v.name == cp.origin]
    if not logs:
        raise IntegrityError(f"the policy trusts no log with origin {cp.origin!r}")
    try:
        if not note.verified(signed, logs):
            raise IntegrityError(f"the checkpoint is not signed by the log {cp.origin!r}")
    except IntegrityError as exc:
        raise IntegrityError(f"log signature: {exc.message}") from None
    names = []
    for name, w in policy.witnesses.items():
        try:
            if note.verified(signed, [w]):
                names.append(name)
        except IntegrityError:
            raise IntegrityError(f"the cosignature of witness {name!r} does not verify") from None
    if not policy.satisfied(names):
        raise IntegrityError(f"the policy's quorum is not met: cosigned by {names or 'no known witness'}")
    if not merkle.verify_inclusion(merkle.leaf_hash(p.extra), p.index, cp.size, p.proof, cp.root):
        raise IntegrityError("the inclusion proof does not bind the entry to the checkpoint's root")
    return Verified(entry, p.index, cp.size, cp.origin, names)


POLICY_FILE = "witnesses.policy"


def policy_path(store: StoreCore) -> Path | None:
    """The witnesses policy for ``store``: ``$GIT_DIR/gitmem/tlog/witnesses.policy``, else the
    workspace's ``<home>/witnesses.policy`` (what ``gitmem serve`` asks); None when neither exists."""
    own = store.gitmem_dir / checkpoints.TLOG_DIR / POLICY_FILE
    if own.is_file():
        return own
    home = store.path.parent.parent if store.path.parent.name == "stores" else None
    if home is not None and (home / POLICY_FILE).is_file():
        return home / POLICY_FILE
    return None


def workspace_policy(store: StoreCore) -> Policy | None:
    """The parsed policy of :func:`policy_path` (None when there is none)."""
    path = policy_path(store)
    return None if path is None else load_policy(path)


# policy text -> its parse (a redaction's receipt and each witness round read the file)
_parsed: dict[str, Policy] = {}


def load_policy(path: Path) -> Policy:
    try:
        text = path.read_text(encoding="utf-8")
        hit = _parsed.get(text)
        if hit is None:
            if len(_parsed) >= 16:
                _parsed.clear()
            hit = _parsed[text] = policy_mod.parse(text)
        return hit
    except FileNotFoundError:
        raise NotFoundError(f"no policy file {path}") from None
    except InvalidInputError as exc:
        raise InvalidInputError(f"{path}: {exc.message}") from None
