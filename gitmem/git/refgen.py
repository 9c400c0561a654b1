"""A store's ref-change generation: a token in ``$GIT_DIR/gitmem/refgen`` that every ref move the
library makes (:meth:`gitmem.git.repo.Repo.cas`) and every push (post-receive) replaces with a new,
unique one (docs/cluster.md#replication-and-failover).

A reader that saw the same token before and after some work knows that no counted ref move ended
in between; one that reads the token *before* listing the refs, and keys the listing by it, never
takes a listing older than a counted move for current. The token is unique (process, time, a
per-process counter and random bits), so concurrent writers never need a read-modify-write: any
new value differs from every earlier one. A missing or unreadable file means "unknown" (read:
list the refs). Nothing durable depends on it (it is a cache key within one boot), so it is not
fsynced; a write that fails removes the file, so that readers fall back to listing the refs.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import threading
import time
from pathlib import Path

FILE = "gitmem/refgen"
_counter = itertools.count()


def bump(git_dir: str | os.PathLike[str]) -> None:
    """A ref of the repository at ``git_dir`` moved: give its generation a new token."""
    base = os.path.join(os.fspath(git_dir), "gitmem")
    if not os.path.exists(os.path.join(base, "fence.json")):  # not in a cluster: no beat reads
        return  # it, so no write on a single node's write path (a store joining has no token yet)
    path = Path(git_dir) / FILE
    token = f"{os.getpid()}-{time.time_ns()}-{next(_counter)}-{secrets.token_hex(4)}"
    tmp = path.with_name(f".refgen.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        tmp.write_text(token)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):  # the old token must not stay: without it, readers list
            path.unlink(missing_ok=True)


def moved(git_dir: str | os.PathLike[str], ok: bool) -> bool:
    """``ok`` (a ref move's outcome), after bumping the generation when the ref moved."""
    if ok:
        bump(git_dir)
    return ok


def read(git_dir: str | os.PathLike[str]) -> str | None:
    """The current token, or None when unknown (never bumped, or unreadable)."""
    try:
        return (Path(git_dir) / FILE).read_text() or None
    except OSError:
        return None
