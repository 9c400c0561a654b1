"""Session sync: turn the changes in a mount into versions, 3-way against the store's tip.

For each file the sync knows three blob ids: ``base`` (the marker: what the mount was last synced
against), ``local`` (the file now) and ``remote`` (the scope's tip). A local change is applied when
the store still has the base (``if_sha256`` guards the race), skipped when the store already has the
local bytes (a repeat after a crash), and otherwise is a conflict: the local bytes are kept in the
mount only, as ``<path>.conflict-<session>`` (private to the session: never written to the shared
scope, so nobody else lists or searches it), and the mount gets the store's file. When that copy
cannot be made, both sides stay (the local file and the store's version) and the conflict is
reported again by every sync until it is resolved. Files holding content that was redacted (the
deny-list, or a remembered deny-pattern) are replaced by the store's version. One ``apply_batch``
per mount moves the branch once; the mount is refreshed with everyone's changes, and only then is
the marker moved to the new tip, so a sync killed at any step is finished by the next one.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from pathlib import Path

from gitmem import config
from gitmem.errors import ConflictError, GitmemError, NotFoundError
from gitmem.model.caller import Caller
from gitmem.model.issues import FileIssue
from gitmem.model.reserved import is_shortterm
from gitmem.model.versions import Version
from gitmem.sessions.mount import (
    Marker,
    Scan,
    check_root,
    lock_tree,
    pinned_tip,
    put_file,
    read_marker,
    remote_blob,
    remove_file,
    scan,
    tree_files,
    unlock_tree,
    write_marker,
)
from gitmem.sessions.state import Mount
from gitmem.store import BatchOp, Store

ATTEMPTS = 3


@dataclass(frozen=True)
class Conflict:
    """A local change that clashed with the store; ``kept_as`` holds the local bytes (if any)."""

    path: str
    kept_as: str | None
    reason: str


@dataclass(frozen=True)
class MountSync:
    """What one sync did in one mount."""

    store: str
    scope: str
    slug: str
    access: str
    base: str | None
    tip: str | None
    versions: list[Version] = field(default_factory=list)
    refused: list[FileIssue] = field(default_factory=list)
    conflicts: list[Conflict] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    error: str | None = None  # the mount could not be synced at all (nothing was written for it)


@dataclass(frozen=True)
class SyncReport:
    session: str
    mounts: list[MountSync] = field(default_factory=list)

    @property
    def versions(self) -> int:
        return sum(len(m.versions) for m in self.mounts)


@dataclass
class _Plan:
    ops: list[BatchOp] = field(default_factory=list)
    secures: dict[int, tuple[str, ...]] = field(default_factory=dict)  # id(op) -> paths it saves
    conflicts: list[Conflict] = field(default_factory=list)
    copies: list[tuple[str, str, bytes]] = field(default_factory=list)  # (path, copy path, local bytes)

    def add(self, op: BatchOp, *paths: str) -> None:
        self.ops.append(op)
        self.secures[id(op)] = paths


def conflict_path(path: str, session_id: str) -> str:
    return f"{path}.conflict-{session_id}"


def is_conflict_copy(path: str, session_id: str) -> bool:
    return path.endswith(f".conflict-{session_id}")


def _private_and_denied(
    store: Store, root: Path, local: Scan, marker: Marker, session_id: str, scope: str
) -> tuple[list[FileIssue], list[str]]:
    """Take this session's conflict copies out of the scan (they stay in the mount, never in the
    store) and find files holding redacted content (to be replaced by the store's version)."""
    held = set(store.redacted_files(local.files, lambda path: _read(root, local, path), scope=scope))
    issues: list[FileIssue] = []
    scrub: list[str] = []
    for path in sorted(local.files):
        if path in held:
            scrub.append(path)
            continue
        if is_conflict_copy(path, session_id):
            base = path[: -len(f".conflict-{session_id}")]
            issues.append(
                FileIssue(
                    path,
                    f"your conflicting version of {base}, kept in this mount only (never saved to the "
                    f"store): merge it into {base} and delete it",
                )
            )
    for path in scrub + [i.path for i in issues]:
        if path in marker.files:
            local.files[path] = marker.files[path]
        else:
            local.files.pop(path, None)
    return issues, scrub


def _read(root: Path, local: Scan, path: str) -> bytes | None:
    data = local.data.get(path)
    if data is not None:
        return data
    try:
        return (root / path[1:]).read_bytes()
    except OSError:
        return None


def _scrub(store: Store, mount: Mount, root: Path, paths: list[str]) -> list[FileIssue]:
    """Replace files holding redacted content by the store's version (or remove them)."""
    tree = store.files(store.tip(mount.scope))
    out = []
    readonly = mount.access == "ro"
    if paths and readonly:
        unlock_tree(root)
    for path in paths:
        blob = remote_blob(tree, path)
        try:
            if blob is not None and not path.endswith(".conflict-" + marker_session(mount)):
                put_file(root, path, store.blob(blob), readonly=readonly)
                what = "replaced by the store's version"
            else:
                remove_file(root, path)
                what = "removed (the store has no other version of it)"
        except OSError as exc:
            what = f"could not be replaced ({exc.strerror}): delete it by hand"
        out.append(FileIssue(path, f"held content that was redacted from the store; {what}"))
    if paths and readonly:
        lock_tree(root)
    return out


def marker_session(mount: Mount) -> str:
    return read_marker(mount).session


# A sync that would delete more than this share of a mount's files (and at least MASS_DELETE_MIN
# of them) writes nothing for that mount unless told ``allow_mass_delete`` (an emptied directory
# is more often an accident than an intent).
MASS_DELETE_SHARE = 0.5
MASS_DELETE_MIN = 3


def sync_mount(
    store: Store, mount: Mount, session_id: str, actor: str | None, *, allow_mass_delete: bool = False
) -> MountSync:
    """Sync one mount; see the module docstring."""
    check_root(mount)
    marker = read_marker(mount)
    root = Path(mount.path)
    local = scan(root, marker.files)
    private, scrub = _private_and_denied(store, root, local, marker, session_id, mount.scope)
    refused = [FileIssue(p, why) for p, why in sorted(local.unusable.items())]
    protected = set(local.unusable) | {i.path for i in private} | set(scrub)
    for path in local.unusable:  # an unusable entry (a link, say) deletes nothing, nor what was under it
        for known in [p for p in marker.files if p == path or p.startswith(path + "/")]:
            local.files[known] = marker.files[known]
            protected.add(known)
    changed = sorted(
        p for p in set(marker.files) | set(local.files) if marker.files.get(p) != local.files.get(p)
    )
    versions: list[Version] = []
    conflicts: list[Conflict] = []
    deleted = [p for p in changed if p in marker.files and p not in local.files]
    if (
        mount.access == "rw"
        and not allow_mass_delete
        and len(deleted) >= MASS_DELETE_MIN
        and len(deleted) > MASS_DELETE_SHARE * len(marker.files)
    ):
        why = (
            f"the sync would delete {len(deleted)} of the mount's {len(marker.files)} memories; "
            "nothing was written: sync with --allow-mass-delete if that is meant"
        )
        return MountSync(
            mount.store, mount.scope, mount.slug, mount.access, marker.base, marker.base, error=why
        )
    if mount.access == "ro":
        # Refused, and put back: the refresh below rewrites each changed file with the store's content.
        refused += [
            FileIssue(p, "read-only mount: the change was not saved; the store's content was put back")
            for p in changed
        ]
    elif changed:
        versions, conflicts, not_saved, copies = _push(
            store, mount, marker, local, changed, session_id, actor
        )
        refused += not_saved
        protected.update(issue.path for issue in not_saved)
        conflicts, kept_both = _keep_copies(root, conflicts, copies)
        protected.update(kept_both)
    kept_base = {c.path for c in conflicts if c.kept_as is None and c.path in local.files}
    refused += private + _scrub(store, mount, root, scrub)
    if mount.at:  # a past state's mount (read-only) shows that state
        tip = pinned_tip(store, mount)[0]
    else:  # a review mount shows the session's proposal on top of the scope
        tip = store.tip(mount.scope, proposer=session_id if mount.access == "review" else None)
    base = marker.base
    put_back = changed if mount.access == "ro" else []
    refreshed = _refresh(store, mount, marker, tip, local, protected, put_back, kept_base)
    return MountSync(
        mount.store,
        mount.scope,
        mount.slug,
        mount.access,
        base,
        tip,
        versions,
        refused,
        conflicts,
        refreshed,
    )


def _sha(store: Store, blob: str) -> str:
    return hashlib.sha256(store.blob(blob)).hexdigest()


def _plan(
    store: Store,
    tree: dict[str, str] | None,
    marker: Marker,
    local: Scan,
    changed: list[str],
    session_id: str,
) -> _Plan:
    base, files = marker.files, local.files
    plan = _Plan()
    renames, singles = _pair_renames(base, files, changed)
    similar, singles = _pair_similar(store, base, local, singles)
    for old, new in renames + similar:
        r_old, r_new = remote_blob(tree, old), remote_blob(tree, new)
        if r_old == base[old] and r_new is None:
            content = local.data[new] if files[new] != base[old] else None  # a rename with an edit
            op = BatchOp("rename", old, new_path=new, content=content, if_sha256=_sha(store, base[old]))
            plan.add(op, old, new)
        elif not (r_old is None and r_new == files[new]):  # else: done by an earlier (killed) sync
            singles += [old, new]
    deletes: list[BatchOp] = []
    writes: list[tuple[BatchOp, str]] = []
    for path in sorted(singles):
        b, here, r = base.get(path), files.get(path), remote_blob(tree, path)
        if here == r:
            continue  # the store already has it
        if r == b:
            if here is None:
                deletes.append(BatchOp("delete", path, if_sha256=_sha(store, r) if r else None))
            elif b is None:
                writes.append((BatchOp("create", path, content=local.data[path]), path))
            else:
                writes.append(
                    (BatchOp("write", path, content=local.data[path], if_sha256=_sha(store, b)), path)
                )
            continue
        if here is None:
            why = "deleted here but changed in the store since; the store's version was kept"
            plan.conflicts.append(Conflict(path, None, why))
            continue
        kept = conflict_path(path, session_id)
        what = "deleted" if r is None else ("created" if b is None else "changed")
        why = (
            f"{what} in the store since this mount's base; your version is kept in this mount only "
            f"as {kept} (private to this session)"
        )
        plan.conflicts.append(Conflict(path, kept, why))
        plan.copies.append((path, kept, local.data[path]))
    # Deletes first (they may free a path), then renames, then writes and creates.
    renamed = plan.ops
    plan.ops = []
    for op in deletes:
        plan.add(op, op.path)
    plan.ops += renamed
    for op, path in writes:
        plan.add(op, path)
    return plan


def _pair_renames(
    base: dict[str, str], files: dict[str, str], changed: list[str]
) -> tuple[list[tuple[str, str]], list[str]]:
    """Deleted path + new path with identical bytes => a rename (pairs in path order)."""
    created: dict[str, list[str]] = {}
    for path in changed:
        if path not in base:
            created.setdefault(files[path], []).append(path)
    pairs: list[tuple[str, str]] = []
    paired: set[str] = set()
    for path in changed:
        if path in files:
            continue
        candidates = created.get(base[path])
        if candidates:
            new = candidates.pop(0)
            pairs.append((path, new))
            paired.update((path, new))
    return pairs, [p for p in changed if p not in paired]


# A deleted file and a new one at least this similar are one memory renamed and edited; files
# under MIN_SIMILAR_BYTES are too short for similarity to mean anything, and pairing is skipped
# when it would compare too many pairs.
SIMILARITY = 0.6
MIN_SIMILAR_BYTES = 32
MAX_PAIRS = 10_000


def _pair_similar(
    store: Store, base: dict[str, str], local: Scan, singles: list[str]
) -> tuple[list[tuple[str, str]], list[str]]:
    """Deleted path + new path with similar content => a rename with an edit (best match first)."""
    gone = sorted(p for p in singles if p in base and p not in local.files)
    new = sorted(p for p in singles if p not in base and p in local.files)
    if not gone or not new or len(gone) * len(new) > MAX_PAIRS:
        return [], singles
    old_text = {p: store.blob(base[p]) for p in gone}
    scored = []
    for o in gone:
        for n in new:
            a, b = old_text[o], local.data[n]
            if min(len(a), len(b)) < max(MIN_SIMILAR_BYTES, SIMILARITY * max(len(a), len(b))):
                continue  # too short, or sizes alone rule it out
            matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
            if matcher.real_quick_ratio() >= SIMILARITY and matcher.quick_ratio() >= SIMILARITY:
                ratio = matcher.ratio()
                if ratio >= SIMILARITY:
                    scored.append((-ratio, o, n))
    pairs: list[tuple[str, str]] = []
    used: set[str] = set()
    for _score, o, n in sorted(scored):
        if o not in used and n not in used:
            pairs.append((o, n))
            used.update((o, n))
    return pairs, [p for p in singles if p not in used]


def _push(
    store: Store,
    mount: Mount,
    marker: Marker,
    local: Scan,
    changed: list[str],
    session_id: str,
    actor: str | None,
) -> tuple[list[Version], list[Conflict], list[FileIssue], list[tuple[str, str, bytes]]]:
    versions: list[Version] = []
    for attempt in range(ATTEMPTS):
        # planned against what the session sees: a review mount, its proposal
        tip = store.tip(mount.scope, proposer=session_id if mount.access == "review" else None)
        plan = _plan(store, store.files(tip), marker, local, changed, session_id)
        if not plan.ops:
            return versions, plan.conflicts, [], plan.copies
        try:
            # a review mount's writes are its session's proposal (docs/access.md: the caller's mode)
            who = Caller(actor, session_id, review=mount.access == "review", local=True)
            result = store.batch(
                plan.ops, scope=mount.scope, session=session_id, skip_refused=True, caller=who
            )
        except GitmemError as exc:  # the whole store refused (archived, say): nothing was written
            return (
                versions,
                plan.conflicts,
                [FileIssue(p, exc.message) for op in plan.ops for p in plan.secures[id(op)]],
                plan.copies,
            )
        versions += result.versions
        config.fault("sync-after-batch")
        raced = any(isinstance(r.error, (ConflictError, NotFoundError)) for r in result.refused)
        if not raced or attempt == ATTEMPTS - 1:
            issues = [
                FileIssue(path, r.error.message) for r in result.refused for path in plan.secures[id(r.op)]
            ]
            return versions, plan.conflicts, issues, plan.copies
    raise AssertionError("unreachable")


def _keep_copies(
    root: Path, conflicts: list[Conflict], copies: list[tuple[str, str, bytes]]
) -> tuple[list[Conflict], set[str]]:
    """Write each conflict copy into the mount. One that cannot be written (a name too long, say)
    loses nothing: the local file stays as it is, the store keeps its version, and the mount's base
    for that path stays where it was, so the next sync reports the conflict again."""
    failed: dict[str, str] = {}
    for path, kept, data in copies:
        try:
            put_file(root, kept, data)
        except OSError as exc:
            failed[path] = (
                f"changed in the store since this mount's base, and your version could not be kept "
                f"beside it as {kept} ({exc.strerror}): your version stays at {path} and the store "
                "keeps its own; merge them by hand, then sync"
            )
    out = [Conflict(c.path, None, failed[c.path]) if c.path in failed else c for c in conflicts]
    return out, set(failed)


def _refresh(
    store: Store,
    mount: Mount,
    marker: Marker,
    tip: str | None,
    local: Scan,
    protected: set[str],
    put_back: list[str] = (),  # type: ignore[assignment]
    kept_base: set[str] = frozenset(),  # type: ignore[assignment]
) -> list[str]:
    """Bring the mount to the tip (except protected paths), then move the marker there (except for
    ``kept_base``: unresolved conflicts keep their base, so the next sync sees them again); the
    ``put_back`` paths (refused edits of a read-only mount) get the store's content again."""
    old_files = dict(marker.files)
    root, readonly = Path(mount.path), mount.access == "ro"
    if marker.base is not None and store.has_object(marker.base):
        new_files = dict(marker.files)
        touched = []
        for path, new in store.changed_files(marker.base, tip):
            if is_shortterm(path):
                continue  # not mounted (docs/conversations.md)
            touched.append(path)
            if new is None:
                new_files.pop(path, None)
            else:
                new_files[path] = new
    else:  # no base, or history was rewritten under it: compare whole maps
        new_files = tree_files(store, tip)
        touched = [p for p in set(marker.files) | set(new_files) if marker.files.get(p) != new_files.get(p)]
    touched = list(touched) + [p for p in put_back if p not in touched]
    todo = [p for p in sorted(touched) if p not in protected and local.files.get(p) != new_files.get(p)]
    if todo and readonly:
        unlock_tree(root)
    done = []
    for path in [p for p in todo if p not in new_files] + [p for p in todo if p in new_files]:
        try:
            if path in new_files:
                put_file(root, path, store.blob(new_files[path]), readonly=readonly)
            else:
                remove_file(root, path)
        except OSError:
            # Something local is in the way (a directory, a link): leave it. The mount then has no
            # file at ``path``, and the marker says so, so nothing is deleted in the store for it.
            new_files.pop(path, None)
            continue
        done.append(path)
    if todo and readonly:
        lock_tree(root)
    for path in kept_base:
        if path in old_files:
            new_files[path] = old_files[path]
        else:
            new_files.pop(path, None)
    config.fault("sync-after-refresh")
    marker.base = str(tip) if tip is not None else None
    marker.files = new_files
    write_marker(mount, marker)
    return sorted(done)
