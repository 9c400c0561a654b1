"""The write fence of a store in a cluster (docs/cluster.md#the-fence): ``$GIT_DIR/gitmem/fence.json``.

A cluster node that holds a store's write lease (epoch N) writes this file at every renewal, saying
until when, on this machine's monotonic clock, its lease certainly still holds: it renewed at
monotonic time ``t`` for ``L`` seconds, so the database's lease runs to at least ``t + L`` (the
renewal started before the database's ``now()``); the fence is valid to ``t + L * SAFETY``, which
leaves room for the two clocks' rates to differ and for a write in flight. ``CLOCK_MONOTONIC`` is
one clock for every process of a boot, so the library (at every ref move, :meth:`Repo.cas`) and the
pre-receive hook (in another process) read the same deadline; the file records the boot it was
written in, and after a reboot it is expired.

A store with no fence file is not in a cluster and is never fenced. Once a node fenced a store,
only a valid fence lets a write through: a replica's copy (fenced expired), a home that lost its
lease (it cannot renew, so its fence runs out before anyone can take the lease over) and a
garbled file all refuse, failing closed.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

from gitmem.errors import ForbiddenError

FENCE_FILE = "fence.json"
LOCK_FILE = "fence.lock"  # held shared from a write's fence check to its ref move, exclusive to shut
SAFETY = 0.6  # the share of a lease a fence trusts


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:  # pragma: no cover - not Linux: a fence never outlives its process's view
        return "unknown"


def fence_path(git_dir: str | os.PathLike[str]) -> Path:
    return _fence_path(os.fspath(git_dir))


@functools.lru_cache(maxsize=256)
def _fence_path(git_dir: str) -> Path:  # every ref move asks (fenced, check_fence)
    return Path(git_dir) / "gitmem" / FENCE_FILE


def write_fence(
    git_dir: str | os.PathLike[str], *, node: str, epoch: int, renewed_at: float, lease_seconds: float
) -> None:
    """Record that ``node`` holds the store's lease at ``epoch`` since monotonic ``renewed_at``
    (taken before the renewal was sent); ``lease_seconds`` 0 fences the store shut."""
    path = fence_path(git_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "node": node,
        "epoch": epoch,
        "boot_id": _boot_id(),
        "valid_until": renewed_at + lease_seconds * SAFETY if lease_seconds > 0 else 0.0,
    }
    tmp = path.with_name(f".{FENCE_FILE}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(body, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def check_fence(git_dir: str | os.PathLike[str]) -> None:
    """Raise ForbiddenError when the store is fenced and this node's lease is not known to hold."""
    path = fence_path(git_dir)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ForbiddenError(f"the store's cluster fence {path} cannot be read ({exc}): no write") from None
    try:
        body = json.loads(raw)
        node, epoch, boot, until = (
            body["node"],
            int(body["epoch"]),
            body["boot_id"],
            float(body["valid_until"]),
        )
    except (ValueError, KeyError, TypeError):
        raise ForbiddenError(
            f"the store's cluster fence {path} is garbled: no write until it is renewed"
        ) from None
    if boot != _boot_id() or time.monotonic() >= until:
        raise ForbiddenError(
            f"this node ({node}) does not hold the store's write lease at epoch {epoch} any more: "
            "writes go to the store's home (docs/cluster.md)"
        )


@contextlib.contextmanager
def fenced(git_dir: str | os.PathLike[str]) -> Iterator[None]:
    """:func:`check_fence`, then the block (a ref move) with the fence lock held shared, so that a
    write that passed the check has moved its ref before :func:`shut_fence` returns: a handoff that
    shuts the fence and then reads the store's state misses no write (docs/cluster.md). A store
    with no fence (not in a cluster) takes no lock."""
    path = fence_path(git_dir)
    if not path.exists():
        check_fence(git_dir)  # (it may have appeared since: the check reads it again)
        yield
        return
    fd = os.open(path.with_name(LOCK_FILE), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        check_fence(git_dir)
        yield
    finally:
        os.close(fd)  # releases the lock


def read_fence(git_dir: str | os.PathLike[str]) -> dict[str, object] | None:
    """The fence as written (None: no fence, or one that cannot be read)."""
    try:
        body = json.loads(fence_path(git_dir).read_bytes())
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def shut_fence(git_dir: str | os.PathLike[str], node: str) -> None:
    """Fence the store shut here, remembering the epoch at which ``node`` last held it (a copy
    that was a home's until a failover or a move, see gitmem/cluster/handoff.py)."""
    lock = fence_path(git_dir).with_name(LOCK_FILE)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        # shut while no write is between its fence check and its ref move (:func:`fenced`): when
        # this returns, every write that passed the check has landed, and no later one passes it
        fcntl.flock(fd, fcntl.LOCK_EX)
        body = read_fence(git_dir) or {}
        epoch = body.get("epoch", 0) if body.get("node") == node else 0
        write_fence(
            git_dir,
            node=node,
            epoch=epoch if isinstance(epoch, int) else 0,
            renewed_at=0.0,
            lease_seconds=0,
        )
    finally:
        os.close(fd)
