"""Redaction: erase content from history, keep the audit trail (docs/redaction.md).

:func:`redact` replaces one version's blob, :func:`redact_pattern` every regex match, wherever they
occur in the history of any scope (one operation covers every scope holding the content), by
``[redacted: <id>]``; the transaction (lock, journal, swap, ledger,
deny-list, index, purge and proof) is :func:`gitmem.audit.journal.run_rewrite`.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from typing import Any

import pygit2

from gitmem.audit.journal import Rewrite, run_rewrite_scopes
from gitmem.audit.proposal_chains import chain_blobs, chain_paths, rewrite_chains
from gitmem.audit.redaction_plan import (
    Redaction,
    active_paths,
    check_blobs,
    path_placeholder,
    placeholder,
    prepare,
    preview,
    redact_path,
    scopes_holding,
    seq_of,
    sha256_hex,
    touched_by,
    version_rows,
)
from gitmem.engine import access, denylist, ledger
from gitmem.engine.core import StoreCore
from gitmem.engine.rows import VersionRow
from gitmem.errors import ForbiddenError, GitmemError, InvalidInputError, NotFoundError
from gitmem.git.rewrite import Rewriter
from gitmem.ids import is_id, new_id
from gitmem.model.caller import Caller
from gitmem.model.paths import validate_scope


def _redact(
    store: StoreCore,
    scopes: list[str],
    contents: dict[str, bytes],
    rows: list[VersionRow],
    rid: str,
    *,
    reason: str,
    actor: str,
    extra: dict[str, Any],
    pattern: str | None = None,
    remember: bool = False,
    paths: bool = False,
) -> Redaction:
    repo = store.repo
    blob_map = {pygit2.Oid(hex=b): repo.create_blob(data) for b, data in contents.items()}
    regex = re.compile(pattern) if pattern is not None else None
    rename = message = None
    if regex is not None and paths:
        name_mark = path_placeholder(rid).encode()
        text_mark = path_placeholder(rid)  # subjects and trailers name paths: the same mark

        def rename(name: bytes) -> bytes:
            return regex.sub(name_mark.decode(), name.decode("utf-8", "surrogateescape")).encode(
                "utf-8", "surrogateescape"
            )

        def message(text: bytes) -> bytes:
            return regex.sub(text_mark, text.decode("utf-8", "surrogateescape")).encode(
                "utf-8", "surrogateescape"
            )

    rewriter = Rewriter(store, blob_map, rename=rename, message=message)
    shown = (lambda p: redact_path(regex, p, rid)) if regex is not None and paths else (lambda p: p)
    at = int(time.time())
    by_scope: dict[str, list[VersionRow]] = {}
    for r in rows:
        by_scope.setdefault(r.scope, []).append(r)

    def build(tips: dict[str, pygit2.Oid]) -> Rewrite:
        moves: dict[str, list[str]] = {}
        move_proposals = []
        for scope in scopes:
            tip = tips[scope]
            scope_rows = by_scope.get(scope, [])
            if not scope_rows:  # only this scope's proposal chains hold the content
                moves[scope] = [str(tip), str(tip)]
                move_proposals.append(rewrite_chains(store, scope, rewriter, str(tip)))
                continue
            first = min(scope_rows, key=lambda r: seq_of(store, r)).commit_id
            # Commits before the first affected one keep their ids: the walk starts there.
            walker = repo.walk(tip, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
            for parent in store.commit(first).parent_ids:
                walker.hide(parent)
            commits = list(walker)
            head = store.commit(tip)
            if rewriter.tree(head.tree_id) != head.tree_id:  # a writer just wrote the content back
                raise ForbiddenError(
                    f"cannot redact: the content is again a current memory in scope {scope!r}"
                )
            active = None if paths else active_paths(store, commits, scope_rows)
            last = tip
            for commit in commits:
                if active is None:
                    last = rewriter.commit(commit)
                else:
                    where = active.get(commit.id)
                    last = rewriter.commit(commit, paths=where, same_tree=where is None)
            moves[scope] = [str(tip), str(last)]
            # Proposals (review-gated writes) hold copies too: their chains are rewritten as well.
            move_proposals.append(rewrite_chains(store, scope, rewriter, first))
        rewriter.flush()
        for publish in move_proposals:
            publish()
        affected_commits = {r.commit_id for r in rows}
        originals = {c: store.commit(c) for c in affected_commits}
        listed = []
        for r in rows:
            c = originals[r.commit_id]
            listed.append(
                {
                    "scope": r.scope,
                    "version": r.id,
                    "memory": r.memory_id,
                    # keyed, as review decisions name paths: a path a later redaction erases
                    # would stay in clear here (the ledger is never rewritten)
                    "path_digest": ledger.digest(store, shown(r.path)),
                    "operation": r.operation,
                    "author": f"{c.author.name} <{c.author.email}>",
                    "author_time": c.author.time,
                    "committer": f"{c.committer.name} <{c.committer.email}>",
                    "committer_time": c.committer.time,
                    "commit_digest": ledger.digest(store, r.commit_id),
                    "new_commit": str(rewriter.commits.get(c.id, c.id)),
                }
            )
        commit_map = {str(k): str(v) for k, v in rewriter.commits.items()}
        primary = scopes[0]
        return Rewrite(
            op="redaction",
            id=rid,
            scope=primary,
            actor=actor,
            reason=reason,
            at=at,
            old_tip=moves[primary][0],
            new_tip=moves[primary][1],
            commit_map=commit_map,
            blob_map={
                b: [str(blob_map[pygit2.Oid(hex=b)]), sha256_hex(d), len(d)] for b, d in contents.items()
            },
            retired_trees=rewriter.retired_trees(),
            versions=sorted({r.id for r in rows}),
            tips=moves,
            rederive=paths,
            pattern=pattern,  # the records' scrub (step 6) in a recovery too
            scrub=True,
            ledger={
                "id": rid,
                "scope": primary,
                "scopes": scopes,
                "reason": reason,
                **extra,
                "versions": listed,
                "blob_digests": sorted(ledger.digest(store, b) for b in contents),
                "retired_commits": len(commit_map),
                "retired_commits_digest": ledger.set_digest(store, commit_map),
                "rewritten_commits": len(commit_map),
                "new_tip": moves[primary][1],
                "new_tips": {s: m[1] for s, m in moves.items()},
            },
        )

    if pattern is not None and remember:
        # Remembered before the rewrite: from the moment history no longer holds the content, no
        # write path can store a new match (a crash after this leaves only a stricter store).
        denylist.remember_pattern(store.path, rid, pattern)
    # The records kept beside history (proposals' decisions, dreams' changes) quote it too: the
    # rewrite's finish scrubs them (gitmem.audit.journal, step 6), in a recovery as well.
    rw = run_rewrite_scopes(store, scopes, build)
    return Redaction(
        id=rid,
        scope=rw.scope,
        reason=reason,
        actor=actor,
        redacted_at=dt.datetime.fromtimestamp(at, dt.UTC),
        versions=rw.versions,
        rewritten_commits=len(rw.commit_map),
        new_tip=rw.new_tip,
        purged=True,
        scopes=list(rw.scope_tips()),
        touched=touched_by(rows, shown),
        remembered=pattern is not None and remember,
        blobs=sorted(contents),
        receipt=_receipt(store, rid),
    )


def _receipt(store: StoreCore, rid: str) -> dict[str, Any] | None:
    """The redaction's tlog-proof receipt, pending until witnesses cosign (docs/transparency.md)."""
    from gitmem.audit import redaction_receipts

    try:
        return redaction_receipts.receipt(store, rid, redaction_receipts.workspace_policy(store)).to_dict()
    except GitmemError:  # no checkpoint yet (signing failed: verify reports it); fetch it later
        return None


def redact(
    store: StoreCore,
    version_id: str,
    *,
    reason: str,
    actor: str | None = None,
    dry_run: bool = False,
    caller: Caller | None = None,
) -> Redaction:
    """Replace one version's content by ``[redacted: <id>]`` everywhere it occurs, in every scope
    whose history holds the same content (one operation: one journal, one purge); refused
    (ForbiddenError, every live match listed) while that content is the head of a live memory."""
    actor = prepare(store, reason, caller.claim_actor(actor) if caller is not None else actor)
    if not is_id(version_id, "memver"):
        raise InvalidInputError(f"invalid version id {version_id!r}: expected memver_<ulid>")
    store.index.ensure_all()
    found = version_rows(store, "id=?", (version_id,))
    if not found:
        raise NotFoundError(f"version {version_id} does not exist in store {store.name!r}")
    row = found[0]
    if row.redaction_id is not None:
        raise InvalidInputError(f"version {version_id} was already redacted ({row.redaction_id})")
    if row.blob is None:
        raise InvalidInputError(f"version {version_id} deleted {row.path}: it has no content to redact")
    if caller is not None:
        caller.check_read(store.settings.id, row.scope)  # a version it cannot read: as if unknown
        # every scope the content is in, proposals' chains included, before any live-match check
        access.admit_redaction(store, caller, scopes_holding(store, [row.blob]))
    scopes, rows = check_blobs(store, [row.blob], f"version {version_id}")
    rid = new_id("redact")
    if dry_run:
        return preview(store, scopes, rows, rid, reason, actor)
    return _redact(
        store,
        scopes,
        {row.blob: placeholder(rid)},
        rows,
        rid,
        reason=reason,
        actor=actor,
        extra={"target": version_id},
    )


def redact_pattern(
    store: StoreCore,
    pattern: str,
    *,
    reason: str,
    scope: str | None = None,
    actor: str | None = None,
    dry_run: bool = False,
    remember: bool = True,
    caller: Caller | None = None,
) -> Redaction:
    """Replace every match of the regex ``pattern`` in every historical version of every scope
    (only ``scope`` when given) by ``[redacted: <id>]`` (like ``git filter-repo --replace-text``,
    audited); refused when a live memory's current content matches (all of them listed). The
    pattern is remembered as a deny-pattern (unless ``remember`` is off): no write path may store
    a match again."""
    actor = prepare(store, reason, caller.claim_actor(actor) if caller is not None else actor)
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise InvalidInputError(f"invalid pattern {pattern!r}: {exc}") from None
    if regex.search("") is not None:
        raise InvalidInputError(f"pattern {pattern!r} matches the empty string: it would match everything")
    if caller is not None:
        scope = scope if scope is not None else caller.scope
        access.admit_redaction(store, caller, [scope] if scope is not None else store.scopes())
    if scope is not None:
        validate_scope(scope)
        store.require_scope(scope)
    store.index.ensure_all()
    rid = new_id("redact")
    where, params = ("scope=? AND ", (scope,)) if scope is not None else ("", ())
    blobs = [
        r[0]
        for r in store.index.db.execute(
            f"SELECT DISTINCT blob FROM versions WHERE {where}blob IS NOT NULL", params
        )
    ]
    contents: dict[str, bytes] = {}
    proposed = chain_blobs(store, scope)  # proposal chains hold copies the index does not list
    for b in dict.fromkeys([*blobs, *sorted(proposed)]):
        text = store.blob_data(pygit2.Oid(hex=b)).decode("utf-8", "surrogateescape")
        new = regex.sub(placeholder(rid).decode(), text)
        if new != text:
            contents[b] = new.encode("utf-8", "surrogateescape")
    published = [b for b in contents if b in set(blobs)]
    in_proposals = sorted({s for b in contents if b not in set(blobs) for s in proposed.get(b, ())})
    where_text = f"scope {scope!r}" if scope is not None else f"store {store.name!r}"
    path_rows = [
        r
        for r in version_rows(store, where.replace(" AND ", "") if where else "1=1", params)
        if regex.search(r.path) or (r.prev_path and regex.search(r.prev_path))
    ]
    # paths only a proposal's chain names (a rejected proposal's, say) are matched too
    chain_scopes = sorted(
        {s for p, held in chain_paths(store, scope).items() if regex.search(p) for s in held}
    )
    if not contents and not path_rows and not chain_scopes:
        raise InvalidInputError(f"pattern {pattern!r} matches no version in {where_text}")
    if path_rows or chain_scopes:
        live = [
            h
            for s in sorted({r.scope for r in path_rows} | set(chain_scopes))
            for h in store.index.heads(s)
            if regex.search(h.path)
        ]
        if live:
            listed = ", ".join(f"{h.path} in scope {h.scope!r}" for h in live)
            raise ForbiddenError(
                f"cannot redact pattern {pattern!r}: it matches the path of live memory {listed}; "
                "rename or delete those memories first, then redact"
            )
    if published:
        scopes, rows = check_blobs(store, published, f"pattern {pattern!r}", scope)
    else:
        scopes, rows = [], []
    scopes = sorted(set(scopes) | set(in_proposals))
    known = {(r.scope, r.id) for r in rows}
    rows += [r for r in path_rows if (r.scope, r.id) not in known]
    scopes = sorted(set(scopes) | {r.scope for r in path_rows} | set(chain_scopes))
    paths = bool(path_rows or chain_scopes)
    shown = (lambda p: redact_path(regex, p, rid)) if paths else (lambda p: p)
    if dry_run:
        return preview(store, scopes, rows, rid, reason, actor, shown)
    return _redact(
        store,
        scopes,
        contents,
        rows,
        rid,
        reason=reason,
        actor=actor,
        extra={"pattern_digest": ledger.digest(store, pattern)},
        pattern=pattern,
        remember=remember,
        paths=paths,
    )
