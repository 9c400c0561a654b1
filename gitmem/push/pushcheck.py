"""The push checks behind the pre-receive hook (docs/architecture.md#hooks), as plain functions.

``check_push`` looks only at what a push brings: the commits reachable from the new tips and not
from any existing ref (plus, behind a real ``git receive-pack``, every object in the quarantine
directory), each diffed against its first parent. Scope counts and store bytes after the push come
from the derived index at the old tips plus the tree diff old -> new, so the cost grows with the push,
not with the store. Every rule reuses :mod:`gitmem.model.policy`, the same functions the library calls.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pygit2

from gitmem.config import StoreSettings
from gitmem.engine.denylist import denied_reason, forged_mark
from gitmem.errors import InvalidInputError
from gitmem.git.treediff import tree_deltas
from gitmem.model import policy
from gitmem.model.paths import validate_scope
from gitmem.model.policy import Violation
from gitmem.push.refupdates import HEADS, PushContext, RefUpdate
from gitmem.push.refupdates import at_ref as _at
from gitmem.push.refupdates import violation as _v


# ---------------------------------------------------------------------- ref-level rules
def check_ref(repo: pygit2.Repository, u: RefUpdate, ctx: PushContext) -> list[Violation]:
    """Ref name, deletion, fast-forward, archived store and acl for one update."""
    if u.ref.startswith("refs/gitmem/"):
        return [_v("ref", f"{u.ref} is managed by the gitmem server and cannot be pushed", u.ref)]
    if not u.ref.startswith(HEADS):
        return [_v("ref", f"{u.ref} is not a scope; push to refs/heads/<scope>", u.ref)]
    try:
        validate_scope(u.scope)
    except InvalidInputError as exc:
        return [_v("ref", exc.message, u.ref)]
    out = [_at(v, u.ref) for v in policy.check_archived(ctx.settings.archived_at, ctx.settings.name)]
    if ctx.pusher is None and ctx.settings.acl.get("require_identity"):
        out.append(
            _v("identity", "this store requires an authenticated pusher (acl.require_identity)", u.ref)
        )
    out += [_at(v, u.ref) for v in policy.check_acl(ctx.settings.acl, u.scope, ctx.pusher)]
    out += check_review(u, ctx)
    if u.is_delete:
        out.append(_v("delete", f"deleting scope {u.scope!r} is not allowed", u.ref))
        return out
    new = _commit(repo, u.new)
    if new is None:
        out.append(_v("object", f"{u.new} is not a commit", u.ref, u.new))
        return out
    if not u.is_create:
        try:
            ff = repo.descendant_of(new.id, pygit2.Oid(hex=u.old)) or u.old == u.new
        except (pygit2.GitError, KeyError, ValueError):
            ff = False
        if not ff:
            out.append(
                _v(
                    "non_fast_forward",
                    f"{u.old[:12]}..{u.new[:12]} is not a fast-forward; history is rewritten only by "
                    "the server (redaction, compaction)",
                    u.ref,
                    u.new,
                )
            )
    return out


def check_review(u: RefUpdate, ctx: PushContext) -> list[Violation]:
    """A pusher in review mode (its token's, or the store's ``acl.review`` for its actor: the
    rule the library applies to writes) may not publish onto a scope: its changes must become
    a proposal, which a push cannot make, so the push is refused (docs/access.md)."""
    from gitmem.engine.proposals import acl_reviews

    if ctx.review or acl_reviews(ctx.settings.acl, u.scope, ctx.pusher or ""):
        who = ctx.pusher or "this pusher"
        return [
            _v(
                "review",
                f"{who} is in review mode on scope {u.scope!r}: its changes need a reviewer, so it "
                "cannot push; write through the API, MCP or the memory tool to make a proposal",
                u.ref,
            )
        ]
    return []


def _commit(repo: pygit2.Repository, hexid: str) -> pygit2.Commit | None:
    try:
        obj = repo[hexid]
    except (KeyError, ValueError):
        return None
    return obj if isinstance(obj, pygit2.Commit) else None


# ---------------------------------------------------------------------- object rules
def new_commits(repo: pygit2.Repository, tips: Sequence[str]) -> list[pygit2.Commit]:
    """Commits reachable from ``tips`` and from no existing ref, oldest first."""
    walker = repo.walk(None, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    pushed = 0
    for tip in tips:
        if _commit(repo, tip) is not None:
            walker.push(pygit2.Oid(hex=tip))
            pushed += 1
    if not pushed:
        return []
    for name in repo.references:
        try:
            target = repo.references[name].resolve().target
        except (pygit2.GitError, KeyError, ValueError):
            continue
        if isinstance(target, pygit2.Oid) and isinstance(repo.get(target), pygit2.Commit):
            walker.hide(target)
    return list(walker)


def arrivals(repo: pygit2.Repository, updates: Sequence[RefUpdate]) -> list[tuple[str, str]]:
    """(commit, scope) for every commit each update brings to its scope, oldest first: the new
    commits, and the ones the store already has on other scopes (a scope made from another one, a
    merge of another scope, another user's version pushed onto a scope). Each gets its own receipt,
    so a copy is the pusher's and never keeps the original's actor or ids (docs/identity.md)."""
    out: list[tuple[str, str]] = []
    for u in updates:
        if not u.scope or u.is_delete or _commit(repo, u.new) is None:
            continue
        walker = repo.walk(
            pygit2.Oid(hex=u.new), pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE
        )
        if not u.is_create and _commit(repo, u.old) is not None:
            walker.hide(pygit2.Oid(hex=u.old))
        out += [(str(c.id), u.scope) for c in walker]
    return out


def check_arrived_scoped(repo: pygit2.Repository, u: RefUpdate, ctx: PushContext) -> list[Violation]:
    """A redaction's blob refused on ``u``'s scope, brought there by a commit the store holds
    already on another scope (a fast-forward to it, a merge of it: no new commit's first-parent
    diff shows the blob). Every commit the update brings to the scope is diffed against each of its
    parents, so a blob its tree holds that the old tip's history does not is seen. Only when the
    scope has such blobs (after a redaction of it)."""
    refused = {o for o, scopes in ctx.denyscoped.items() if u.scope in scopes and o in ctx.denylist}
    if not refused or _commit(repo, u.new) is None:
        return []
    walker = repo.walk(pygit2.Oid(hex=u.new), pygit2.enums.SortMode.TOPOLOGICAL)
    if not u.is_create and _commit(repo, u.old) is not None:
        walker.hide(pygit2.Oid(hex=u.old))
    out: list[Violation] = []
    for commit in walker:
        parents: list[pygit2.Tree | None] = [p.tree for p in commit.parents]
        for parent_tree in parents or [None]:
            for d in tree_deltas(parent_tree, commit.tree):
                if d.kind != "deleted" and str(d.new_id) in refused:
                    path = "/" + d.raw_path.decode("utf-8", "surrogateescape")
                    msg = f"{path} is content that was redacted from this store"
                    out.append(_v("denylist", msg, u.ref, str(commit.id), path))
    return out


def check_commit(
    repo: pygit2.Repository, commit: pygit2.Commit, ref: str, ctx: PushContext, seen: set[pygit2.Oid]
) -> list[Violation]:
    """Every rule for one new commit: dates, trailers, deny-list, and each file it adds or changes."""
    cid = str(commit.id)
    limits = ctx.settings.limits
    out: list[Violation] = []
    now = int(time.time()) if ctx.now is None else ctx.now
    for kind, sig in (("author", commit.author), ("committer", commit.committer)):
        out += [_at(v, ref, cid) for v in policy.check_commit_time(kind, sig.time, now)]
    if commit.parents:
        parent_time = commit.parents[0].committer.time
        out += [_at(v, ref, cid) for v in policy.check_commit_order(commit.committer.time, parent_time)]
    if cid in ctx.denylist:
        out.append(
            _v("denylist", f"commit {cid} was retired by a redaction or compaction; fetch again", ref, cid)
        )
    parent = commit.parents[0].tree if commit.parents else None
    deltas = tree_deltas(parent, commit.tree)
    kinds = [d.kind for d in deltas]
    changed = [d for d in deltas if d.kind != "deleted"]
    for d in changed:
        assert d.new_id is not None
        path = "/" + d.raw_path.decode("utf-8", "surrogateescape")
        out += [_at(v, ref, cid) for v in policy.check_path(path, limits)]
        out += [_at(v, ref, cid) for v in policy.check_mode(path, d.new_mode)]
        out += [_at(v, ref, cid) for v in guard_violations(path, path.encode(), ctx.settings, "path")]
        # (a redaction's blob is refused only in the scopes it rewrote: checked again on each ref)
        if d.new_id in seen and str(d.new_id) not in ctx.denyscoped or d.new_mode == 0o160000:
            continue
        seen.add(d.new_id)
        if str(d.new_id) in ctx.denylist and denied_at(ctx, str(d.new_id), ref):
            out.append(_v("denylist", f"{path} is content that was redacted from this store", ref, cid, path))
            continue
        blob = repo.get(d.new_id)
        if isinstance(blob, pygit2.Blob):
            bad = policy.check_content(path, blob.data, limits)
            out += [_at(v, ref, cid) for v in bad]
            if not bad:
                out += [_at(v, ref, cid) for v in guard_violations(path, blob.data, ctx.settings)]
        why = denied_reason(
            frozenset(), ctx.patterns, path, blob.data if isinstance(blob, pygit2.Blob) else None
        )
        if why is None and ctx.git_dir is not None and isinstance(blob, pygit2.Blob):
            why = forged_mark(ctx.git_dir, path, blob.data)
        if why is not None:
            out.append(_v("denylist", why, ref, cid, path))
    out += [_at(v, ref, cid) for v in overlaps(commit.tree, [d.raw_path for d in changed], seen)]
    message = commit.raw_message.decode("utf-8", "replace") if commit.raw_message else ""
    out += [
        _at(v, ref, cid) for v in guard_violations(f"commit {cid}", message.encode(), ctx.settings, "message")
    ]
    out += check_trailer_claims(commit, ref, ctx)
    if ctx.settings.require_trailers:
        from gitmem.model.versions import parse_trailers, trailer_problems

        problems = trailer_problems(parse_trailers(commit.message))
        rename = sorted(kinds) == ["added", "deleted"]
        if not problems and len(kinds) > 1 and not rename:
            problems = [f"a gitmem version changes one memory; this commit changes {len(kinds)} files"]
        for p in problems:
            out.append(_v("trailers", f"missing or bad gitmem trailers: {p}", ref, cid))
    return out


def guard_violations(
    path: str, data: bytes, settings: StoreSettings, what: str = "content"
) -> list[Violation]:
    """What the store's write-time guard refuses in one pushed blob, path or commit message
    (``what``; docs/guard.md), as the library refuses it: rule, line and a masked preview, never
    the text. Findings the policy only flags are recorded by post-receive."""
    from gitmem.engine.guard import policy_of
    from gitmem.model.guard import action_for, scan

    guard = policy_of(settings.guard)
    if guard.secrets != "reject" and not guard.patterns and not guard.deny_patterns:
        return []  # nothing here can reject: skip the scan (and loading the rules)

    found = [f for f in scan(data.decode("utf-8", "replace"), guard) if action_for(f, guard) == "reject"]
    if not found:
        return []
    shown = "; ".join(f.describe() for f in found[:5])
    more = f"; and {len(found) - 5} more" if len(found) > 5 else ""
    where = {"content": path, "path": f"the path {path}", "message": f"the message of {path}"}[what]
    return [Violation("guard", f"{where}: refused by the store's guard: {shown}{more}", path)]


def check_trailer_claims(commit: pygit2.Commit, ref: str, ctx: PushContext) -> list[Violation]:
    """Gitmem trailers in a pushed commit: malformed ones are refused from everyone (one bad
    trailer must never break the store's readers); compaction roots only the server writes,
    unless the pusher is trusted for trailers (a mirror)."""
    from gitmem.model.versions import COMPACTION, REVIEWED_BY, SNAPSHOT, malformed_trailers, parse_trailers

    message = commit.message
    if "Gitmem-" not in message:
        return []
    cid = str(commit.id)
    out = [_v("trailers", f"malformed gitmem trailers: {p}", ref, cid) for p in malformed_trailers(message)]
    trailers = parse_trailers(message)
    if (COMPACTION in trailers or SNAPSHOT in trailers) and not ctx.trusted:
        out.append(
            _v(
                "compaction",
                "compaction roots are written by the gitmem server only; push plain commits",
                ref,
                cid,
            )
        )
    elif (COMPACTION in trailers or SNAPSHOT in trailers) and commit.parents:
        out.append(_v("compaction", "a compaction root has no parents", ref, cid))
    if REVIEWED_BY in trailers and not ctx.trusted:
        out.append(
            _v(
                "trailers",
                f"{REVIEWED_BY} is written by gitmem review accept only; push plain commits",
                ref,
                cid,
            )
        )
    return out


def check_session(ctx: PushContext, ref: str) -> list[Violation]:
    if ctx.session is None:
        return []
    from gitmem.model.versions import _SESSION_RE

    if _SESSION_RE.match(ctx.session):
        return []
    return [_v("session", f"push option session={ctx.session[:60]!r} is not a valid session id", ref)]


def check_claimed_ids(
    repo: pygit2.Repository, commits: Mapping[str, str], ctx: PushContext
) -> list[Violation]:
    """A trusted pusher's trailers are believed, so the ids they claim must be new: a
    ``Gitmem-Version`` the store already knows (or one claimed twice in a push) is refused, and
    every rebuild of the index then gives each id the commit the incremental index did."""
    import sqlite3

    from gitmem.model.versions import parse_snapshot, parse_trailers

    if not ctx.trusted or not commits:
        return []
    claims: dict[str, tuple[str, str]] = {}
    out: list[Violation] = []
    for cid, scope in commits.items():
        obj = _commit(repo, cid)
        message = obj.message if obj is not None else ""
        ids = [t[0] for t in parse_snapshot(message) or []]
        vid = parse_trailers(message).get("Gitmem-Version")
        ids += [vid] if vid else []
        for v in ids:
            if v in claims:
                out.append(_v("version_id", f"{v} is claimed by two pushed commits", HEADS + scope, cid))
            claims[v] = (cid, scope)
    if not claims:
        return out
    path = Path(repo.path) / "gitmem" / "index.sqlite"
    if path.exists():
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0)
        try:
            for v, (cid, scope) in claims.items():
                row = db.execute("SELECT commit_id FROM versions WHERE id=? LIMIT 1", (v,)).fetchone()
                if row is not None and row[0] != cid:
                    out.append(
                        _v("version_id", f"{v} is a version this store already has", HEADS + scope, cid)
                    )
        finally:
            db.close()
    return out


def overlaps(tree: pygit2.Tree, paths: Sequence[bytes], seen: set[pygit2.Oid]) -> list[Violation]:
    """Names listed twice in one tree (a file and a directory at one path, which git's fsck calls
    duplicateEntries) in the trees along ``paths``; each tree is read once per push."""
    out: list[Violation] = []
    for raw in paths:
        node: pygit2.Tree | None = tree
        prefix = b"/"
        for name in raw.split(b"/"):
            if node is None:
                break
            if node.id not in seen:
                seen.add(node.id)
                names = [e.raw_name or b"" for e in node]
                for dup in sorted({n for n in names if names.count(n) > 1}):
                    path = (prefix + dup).decode("utf-8", "surrogateescape")
                    out.append(Violation("overlap", f"{path} is both a file and a directory", path))
            try:
                child = node[name.decode("utf-8")]
            except (KeyError, UnicodeDecodeError):
                child = None
            node = child if isinstance(child, pygit2.Tree) else None
            prefix += name + b"/"
    return out


# ---------------------------------------------------------------------- limits after the push
def tree_stats(repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree) -> tuple[int, int]:
    """(memories, bytes) that the push adds to a scope, from the tree diff old -> new."""
    count = size = 0
    for d in tree_deltas(old, new):
        if d.kind == "added":
            count += 1
        elif d.kind == "deleted":
            count -= 1
        if d.old_id is not None:
            size -= _blob_size(repo, d.old_id)
        if d.new_id is not None:
            size += _blob_size(repo, d.new_id)
    return count, size


def _blob_size(repo: pygit2.Repository, oid: pygit2.Oid) -> int:
    obj = repo.get(oid)
    return obj.size if isinstance(obj, pygit2.Blob) else 0


def check_totals(
    repo: pygit2.Repository,
    updates: Sequence[RefUpdate],
    ctx: PushContext,
    stats: Mapping[str, tuple[int, int]],
    store_bytes: int,
) -> list[Violation]:
    """``max_memories`` per scope and ``max_store_bytes`` after the push.

    ``stats`` holds (memories, bytes) of each pushed scope at its old tip and ``store_bytes`` the
    store's total before the push, both from the derived index. As for library writes, only growth
    is refused: a push that shrinks a store already over a (lowered) limit is welcome.
    """
    limits = ctx.settings.limits
    out: list[Violation] = []
    total = store_bytes
    for u in updates:
        new = _commit(repo, u.new)
        if new is None or u.is_delete:
            continue
        old = _commit(repo, u.old) if not u.is_create else None
        dcount, dbytes = tree_stats(repo, old.tree if old is not None else None, new.tree)
        count = stats.get(u.scope, (0, 0))[0] + dcount
        if dcount > 0:
            out += [_at(v, u.ref, u.new) for v in policy.check_memory_count(u.scope, count, limits)]
        total += dbytes
    if updates and total > store_bytes:
        out += [_at(v, updates[-1].ref) for v in policy.check_store_bytes(total, limits)]
    return out


def check_push(
    repo: pygit2.Repository,
    updates: Sequence[RefUpdate],
    ctx: PushContext,
    stats: Mapping[str, tuple[int, int]] | None = None,
    store_bytes: int = 0,
    *,
    commits: dict[str, str] | None = None,
) -> list[Violation]:
    """Every violation a push makes; an empty list means the whole push may land. ``commits``, when
    given, receives every new commit the push brings and the scope it arrives on."""
    out: list[Violation] = []
    found: dict[str, str] = {} if commits is None else commits
    for u in updates:
        out += check_ref(repo, u, ctx)
    if updates:
        out += check_session(ctx, updates[0].ref)
    live = [u for u in updates if u.ref.startswith(HEADS) and not u.is_delete]
    seen: set[pygit2.Oid] = set()
    checked: set[pygit2.Oid] = set()
    for u in live:
        for commit in new_commits(repo, [u.new]):
            if commit.id not in checked:
                checked.add(commit.id)
                found[str(commit.id)] = u.scope
                out += check_commit(repo, commit, u.ref, ctx, seen)
    for u in live:
        flagged = {(v.rule, v.ref, v.commit, v.path) for v in out}
        out += [
            v for v in check_arrived_scoped(repo, u, ctx) if (v.rule, v.ref, v.commit, v.path) not in flagged
        ]
    out += check_claimed_ids(repo, found, ctx)
    reported = {v.commit for v in out if v.rule == "denylist"} | {str(o) for o in seen}
    for oid in ctx.quarantine:
        if oid in ctx.denylist and oid not in reported:
            ref = updates[0].ref if updates else ""
            out.append(_v("denylist", f"object {oid} was removed from this store by a redaction", ref, oid))
    if not any(v.rule in ("ref", "delete", "object", "non_fast_forward") for v in out):
        out += check_totals(repo, live, ctx, stats or {}, store_bytes)
    return out


def denied_at(ctx: PushContext, oid: str, ref: str) -> bool:
    """Whether deny-listed ``oid`` is refused on ``ref``: a redaction's blob only in the scopes it
    rewrote (gitmem.engine.denylist.denied_in), anything else everywhere."""
    scopes = ctx.denyscoped.get(oid)
    return scopes is None or not ref.startswith("refs/heads/") or ref[len("refs/heads/") :] in scopes


def format_violation(v: Violation) -> str:
    """The ``gitmem: ...`` line the hook prints for one violation."""
    where = v.ref or ""
    if v.commit:
        where += f" {v.commit[:12]}"
    return f"gitmem: {where}: {v.message}" if where else f"gitmem: {v.message}"
