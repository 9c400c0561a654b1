"""``gitmem audit``: one timeline of versions and ledger events (docs/architecture.md#the-audit-ledger)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from gitmem.engine import history, ledger
from gitmem.engine.core import StoreCore
from gitmem.errors import InvalidInputError
from gitmem.model.versions import OPERATIONS

REJECTED = "push_rejected"  # from $GIT_DIR/gitmem/rejected.jsonl (server-side), not the ledger
TYPES = (*OPERATIONS, *ledger.KINDS, REJECTED)


@dataclass(frozen=True)
class AuditEvent:
    """One event: a version (``type`` is its operation) or a ledger entry (``type`` is its kind)."""

    at: dt.datetime
    type: str
    actor: str
    session: str | None
    scope: str | None
    subject: str  # the version id, or the ledger entry's id (redaction/compaction) or kind
    detail: dict[str, Any] = field(default_factory=dict)


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=dt.UTC)


def audit(
    store: StoreCore,
    *,
    since: dt.datetime | None = None,
    until: dt.datetime | None = None,
    actor: str | None = None,
    session: str | None = None,
    type: str | None = None,
    scope: str | None = None,
    flagged: bool = False,
) -> list[AuditEvent]:
    """Versions and ledger events, oldest first, filtered by time, actor, session, type and scope.

    Ledger events carry no session, so a ``session`` filter shows versions only. ``flagged`` shows
    only what the write-time guard flagged (type ``flag``): one event per flagged version or
    pushed file, its detail naming the path and the findings (rule, kind, line)."""
    if flagged:
        if type not in (None, "flag"):
            raise InvalidInputError("--flagged shows events of type flag only; drop --type")
        type = "flag"
    if type is not None and type not in TYPES:
        raise InvalidInputError(f"invalid type {type!r}: use one of {', '.join(TYPES)}")
    since, until = _utc(since), _utc(until)
    events: list[AuditEvent] = []
    if type is None or type in OPERATIONS:
        for v in reversed(
            history.versions(
                store, scope=scope, session=session, actor=actor, operation=type, since=since, until=until
            )
        ):
            detail: dict[str, Any] = {"memory": v.memory_id, "path": v.path, "commit": v.commit}
            if v.previous_path and v.previous_path != v.path:
                detail["previous_path"] = v.previous_path
            if v.redaction is not None:
                detail["redaction"] = v.redaction.id
            events.append(AuditEvent(v.created_at, v.operation, v.actor, v.session, v.scope, v.id, detail))
    if type in (None, "flag"):
        events.extend(_flags(store, since, until, actor, session, scope))
    if session is None and (type is None or type in ledger.KINDS) and type != "flag":
        for e in ledger.entries(store, kind=type):
            if e.kind == "flag":
                continue  # _flags above: one event per flagged version
            at = dt.datetime.fromisoformat(e.at.replace("Z", "+00:00"))
            entry_scope = e.data.get("scope")
            if (actor is not None and e.actor != actor) or (scope is not None and entry_scope != scope):
                continue
            if (since is not None and at < since) or (until is not None and at > until):
                continue
            detail = {"seq": e.seq, "ledger_commit": e.commit, **_summary(store, e)}
            subject = str(e.data.get("id", e.data.get("push", e.data.get("session", e.kind))))
            if e.kind == "push" and entry_scope is None:
                entry_scope = (
                    ",".join(sorted({u["ref"].removeprefix("refs/heads/") for u in _updates(e)})) or None
                )
            events.append(AuditEvent(at, e.kind, e.actor, None, entry_scope, subject, detail))
    if session is None and type in (None, REJECTED):
        for rec in ledger.rejected_pushes(store):
            at = dt.datetime.fromtimestamp(rec["at"], dt.UTC)
            who = str(rec.get("actor", "unknown"))
            refs = [str(r) for r in rec.get("refs", [])]
            scopes = ",".join(r.removeprefix("refs/heads/") for r in refs) or None
            if (actor is not None and who != actor) or (scope is not None and scope not in refs_scopes(refs)):
                continue
            if (since is not None and at < since) or (until is not None and at > until):
                continue
            raw_rules = rec.get("rules")
            rules: dict[str, Any] = raw_rules if isinstance(raw_rules, dict) else {}
            detail = {
                "refs": refs,
                "rules": rules,
                "identity": rec.get("identity"),
                "problems": rec.get("problems"),
            }
            detail["text"] = "rejected: " + ", ".join(f"{k} x{n}" for k, n in sorted(rules.items()))
            events.append(AuditEvent(at, REJECTED, who, None, scopes, "push", detail))
    # Oldest first; within one second (the clocks' resolution) the store's creation comes first and
    # the other ledger events after the versions they follow. The sort is stable: each source keeps
    # its own order.
    events.sort(key=lambda ev: (ev.at, _RANK.get(ev.type, 2)))
    return events


def _flags(
    store: StoreCore,
    since: dt.datetime | None,
    until: dt.datetime | None,
    actor: str | None,
    session: str | None,
    scope: str | None,
) -> list[AuditEvent]:
    out = []
    for e in ledger.entries(store, kind="flag"):
        at = dt.datetime.fromisoformat(e.at.replace("Z", "+00:00"))
        entry_scope = e.data.get("scope")
        entry_session = e.data.get("session")
        if (actor is not None and e.actor != actor) or (scope is not None and entry_scope != scope):
            continue
        if session is not None and entry_session != session:
            continue
        if (since is not None and at < since) or (until is not None and at > until):
            continue
        for item in e.data.get("versions", []) + e.data.get("files", []):
            if not isinstance(item, dict):
                continue
            detail = {"seq": e.seq, "ledger_commit": e.commit, **item}
            if "path" not in item:  # the entry keeps a digest: the path is shown while unredacted
                if item.get("version"):
                    detail["path"] = _version_path(store, str(item["version"]))
                elif isinstance(item.get("path_digest"), str):
                    detail["path"] = _path_of_digest(store, entry_scope, item["path_digest"])
            subject = str(item.get("version") or item.get("commit") or "push")
            sess = entry_session if isinstance(entry_session, str) else None
            out.append(AuditEvent(at, "flag", e.actor, sess, entry_scope, subject, detail))
    return out


_RANK = {"store_created": 0, **{op: 1 for op in OPERATIONS}}


def refs_scopes(refs: list[str]) -> set[str]:
    return {r.removeprefix("refs/heads/") for r in refs}


def _updates(e: ledger.LedgerEntry) -> list[dict[str, Any]]:
    ups = e.data.get("updates")
    return (
        [u for u in ups if isinstance(u, dict) and isinstance(u.get("ref"), str)]
        if isinstance(ups, list)
        else []
    )


def _summary(store: StoreCore, e: ledger.LedgerEntry) -> dict[str, Any]:
    """The parts of an entry a timeline shows (the full entry stays in the ledger), with a one-line
    ``text`` for the human table: a settings diff, the versions a push brought, what was reverted."""
    data = e.data
    if e.kind in ("redaction", "compaction"):
        keys = ("reason", "target", "rewritten_commits", "new_tip")
        out = {k: data[k] for k in keys if k in data}
        out["versions"] = [v.get("version") for v in data.get("versions", []) if isinstance(v, dict)]
        out["text"] = f"{e.kind} of {len(out['versions'])} version(s)" + (
            f": {data['reason']}" if data.get("reason") else ""
        )
        return out
    out = dict(data)
    if e.kind in ("settings_changed", "archived") and isinstance(data.get("diff"), list):
        parts = [f"{d.get('key')}: {_short(d.get('old'))} -> {_short(d.get('new'))}" for d in data["diff"]]
        prefix = "hand edit, unattributed; " if data.get("unattributed") else ""
        out["text"] = prefix + ("; ".join(parts) or "no change")
    elif e.kind == "push":
        versions = [v for v in data.get("versions", []) if isinstance(v, dict)]
        commits = _current_commits(store, [str(v.get("version")) for v in versions])
        for v in versions:
            v["commit"] = commits.get(str(v.get("version")))
        out["versions"] = versions
        out["text"] = (
            f"{len(versions)} version(s): "
            + ", ".join(f"{v.get('version')}@{(v.get('commit') or '?')[:12]}" for v in versions[:5])
            + (" ..." if len(versions) > 5 else "")
        )
    elif e.kind == "revert_session":
        n = len(data.get("versions", []))
        out["text"] = f"reverted session {data.get('session')}: {n} version(s)"
    elif e.kind in ("proposal_accepted", "proposal_rejected"):
        out["paths"] = _decided_paths(store, data)
        n = len(data.get("path_digests", data.get("paths", [])))
        out["text"] = f"{e.kind.removeprefix('proposal_')} {n} path(s) of {data.get('id')}" + (
            f": {', '.join(out['paths'][:5])}" if out["paths"] else ""
        )
    return out


def _version_path(store: StoreCore, version_id: str) -> str | None:
    """A version's path from the index, None when it is redacted (or unknown)."""
    store.index.ensure_all()
    row = store.index.db.execute(
        "SELECT path FROM versions WHERE id=? AND redaction_id IS NULL LIMIT 1", (version_id,)
    ).fetchone()
    return str(row[0]) if row is not None else None


def _path_of_digest(store: StoreCore, scope: object, digest: str) -> str | None:
    """The unredacted path of ``scope`` (every scope: None) whose keyed digest is ``digest`` (a
    pushed file's flag names no version). A clone has no key: None."""
    if store.is_clone:
        return None
    store.index.ensure_all()
    where, params = ("scope=? AND ", (scope,)) if isinstance(scope, str) else ("", ())
    rows = store.index.db.execute(
        f"SELECT DISTINCT path FROM versions WHERE {where}redaction_id IS NULL", params
    ).fetchall()
    return next((str(p) for (p,) in rows if ledger.digest(store, str(p)) == digest), None)


def _decided_paths(store: StoreCore, data: dict[str, Any]) -> list[str]:
    """The paths a review decision names: its entry keeps keyed digests only (a path may be a
    secret, and the ledger cannot be rewritten), resolved here through what a redaction scrubs:
    the published versions in the index (a redacted one's path withheld, as in webhook events) and
    the proposal's record (whose decisions a path redaction rewrites, so no digest matches)."""
    from gitmem.engine import proposals
    from gitmem.errors import GitmemError

    if isinstance(data.get("paths"), list):  # an entry written before digests
        return [str(p) for p in data["paths"]]
    found: set[str] = set()
    versions = [str(v) for v in data.get("versions", [])]
    if versions:
        store.index.ensure_all()
        for vid in versions:
            row = store.index.db.execute(
                "SELECT path FROM versions WHERE id=? AND redaction_id IS NULL LIMIT 1", (vid,)
            ).fetchone()
            if row is not None:
                found.add(row[0])
    digests = set(data.get("path_digests", []))
    if digests and not store.is_clone:  # a clone has no key (and must not make one)
        try:
            p = proposals.get(store, str(data.get("id")))
        except GitmemError:
            return sorted(found)
        found |= {path for d in p.decisions for path in d.paths if ledger.digest(store, path) in digests}
    return sorted(found)


def _short(value: Any) -> str:
    import json

    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def _current_commits(store: StoreCore, version_ids: list[str]) -> dict[str, str]:
    """Each version's commit now (after any rewrite), from the index."""
    if not version_ids:
        return {}
    store.index.ensure_all()
    out: dict[str, str] = {}
    for vid in version_ids:
        row = store.index.db.execute("SELECT commit_id FROM versions WHERE id=? LIMIT 1", (vid,)).fetchone()
        if row is not None:
            out[vid] = row[0]
    return out
