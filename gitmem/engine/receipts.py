"""Receipts: what the store knew about each pushed commit when it received it (docs/identity.md).

The pre-receive hook, once a push passed every check and before git moves any ref, appends one
line per commit the push brings to a scope (new to the store, or already in it on another scope) to
``$GIT_DIR/gitmem/receipts.jsonl`` (server-side, never cloned)::

    {"commit": <id>, "key": <id it was received as>, "scope": ..., "actor": <the pusher>,
     "session": <push option or null>, "at": <receive time, epoch seconds>, "trusted": <bool>,
     "copy": <bool: the store already had the commit on another scope; absent in older receipts>}

The index derives a received commit's versions from its receipt, never from what the pusher wrote:
for an untrusted pusher the version and memory ids come from ``key`` (so no pushed commit can claim
an id the store already gave out), the actor is the pusher, the session the push option, the time
the receive time. Because the receipt exists before any reader can see the commit, the incremental
index and any rebuild derive the same versions. A history rewrite (redaction, compaction) that gives
a received commit a new id carries its receipt over (:func:`carry`) before the branch moves; ``key``
stays the id the commit was received as, so its version ids never change.

Receipts are per commit *and scope*: a commit the store already has (another user's version, say)
pushed onto a new scope gets a receipt of its own there, so its copy is the pusher's, with ids of its
own, and never the original author's with the original ids. The first receipt for a (commit, scope)
wins, so every rebuild reads the same one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from gitmem.errors import GitmemError
from gitmem.git.locks import file_lock

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

RECEIPTS_FILE = "receipts.jsonl"


@dataclass(frozen=True)
class Receipt:
    commit: str
    key: str
    scope: str
    actor: str
    session: str | None
    at: int
    trusted: bool
    push: str = ""  # the push that brought it (see gitmem.push.pushenv.push_id)
    # The store already had the commit (on another scope) when it arrived here: the pre-receive
    # checks of new commits never ran on it, because they ran when it first came in. A copy of a
    # compaction root (a scope forked from a compacted one) is therefore no pushed root.
    copy: bool = False

    def to_json(self) -> str:
        data: dict[str, object] = {
            "commit": self.commit,
            "key": self.key,
            "scope": self.scope,
            "actor": self.actor,
            "session": self.session,
            "at": self.at,
            "trusted": self.trusted,
            "push": self.push,
        }
        if self.copy:
            data["copy"] = True
        return json.dumps(data, sort_keys=True)


def _path(git_dir: Path) -> Path:
    return git_dir / "gitmem" / RECEIPTS_FILE


def _parse(line: str) -> Receipt | None:
    try:
        d = json.loads(line)
        return Receipt(
            str(d["commit"]),
            str(d["key"]),
            str(d["scope"]),
            str(d["actor"]),
            None if d.get("session") is None else str(d["session"]),
            int(d["at"]),
            bool(d["trusted"]),
            str(d.get("push", "")),
            d.get("copy") is True,
        )
    except (ValueError, KeyError, TypeError):
        return None  # a torn last line (crash while appending): the push it belonged to never landed


@dataclass(frozen=True)
class Receipts:
    """Every receipt of a store, by (commit, scope); the first one recorded for each wins."""

    exact: dict[tuple[str, str], Receipt]

    def get(self, commit: str, scope: str) -> Receipt | None:
        """The receipt of ``commit`` on ``scope`` (None: the store's own write, or a commit on
        this scope from before receipts existed, whose trailers readers check as they always did)."""
        return self.exact.get((commit, scope))

    def __contains__(self, key: object) -> bool:
        return key in self.exact

    def __bool__(self) -> bool:
        return bool(self.exact)

    def values(self) -> list[Receipt]:
        return list(self.exact.values())


EMPTY = Receipts({})
_cache: dict[Path, tuple[tuple[int, int, int], Receipts]] = {}


def load(git_dir: Path) -> Receipts:
    """Every receipt (the first one recorded for a commit and scope wins), cached by file stat."""
    path = _path(git_dir)
    try:
        st = path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return EMPTY
    key = (st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _cache.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    exact: dict[tuple[str, str], Receipt] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return EMPTY
    for line in text.splitlines():
        r = _parse(line)
        if r is not None:
            exact.setdefault((r.commit, r.scope), r)
    out = Receipts(exact)
    _cache[path] = (key, out)
    return out


def append(git_dir: Path, receipts: Iterable[Receipt]) -> None:
    """Append receipts durably (fsynced) for (commit, scope) pairs not yet received."""
    path = _path(git_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_name(RECEIPTS_FILE + ".lock")):
        known = load(git_dir)
        lines, fresh = [], set()
        for r in receipts:
            if (r.commit, r.scope) not in known and (r.commit, r.scope) not in fresh:
                fresh.add((r.commit, r.scope))
                lines.append(r.to_json() + "\n")
        if not lines:
            return
        fd = os.open(
            path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
        )  # not secret: readers derive from it too
        try:
            os.write(fd, "".join(lines).encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)


def carry(store: StoreCore, commit_map: Mapping[str, str]) -> int:
    """After a rewrite planned ``old -> new`` commit ids: each received commit's receipt also
    names its new id (same key, actor, session and time). A commit the rewrite made of its own (a
    compaction root, whose message differs) gets none. Idempotent; returns how many were added."""
    known = load(store.path)
    if not known:
        return 0
    by_commit: dict[str, list[Receipt]] = {}
    for r in known.values():
        by_commit.setdefault(r.commit, []).append(r)
    out = []
    for old, new in commit_map.items():
        mine = [r for r in by_commit.get(old, []) if (new, r.scope) not in known]
        if not mine:
            continue
        try:
            same = (
                store.commit(pygit2.Oid(hex=old)).raw_message == store.commit(pygit2.Oid(hex=new)).raw_message
            )
        except GitmemError:
            same = False
        if same:
            out += [
                Receipt(new, r.key, r.scope, r.actor, r.session, r.at, r.trusted, r.push, r.copy)
                for r in mine
            ]
    append(store.path, out)
    return len(out)
