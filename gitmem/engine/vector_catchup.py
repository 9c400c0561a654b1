"""The vectors' catch-up off the caller's path (docs/search.md): a daemon thread with its own store
handle, or a detached ``python -m gitmem.engine.vector_catchup STORE_PATH`` process for faces that
exit after one command. Both run :func:`gitmem.engine.vectors.catch_up`, whose lock keeps a second
indexer out."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from gitmem.engine.opening import open_core
from gitmem.engine.vectors import catch_up

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

_threads: dict[str, threading.Thread] = {}
_threads_lock = threading.Lock()


def catch_up_in_background(store: StoreCore, scope: str) -> None:
    """Start a daemon thread catching ``scope`` up (one per store at a time). The thread opens its
    own handle on the store, so the caller's is never used from two threads."""
    key = str(store.path)
    with _threads_lock:
        t = _threads.get(key)
        if t is not None and t.is_alive():
            return
        t = threading.Thread(
            target=_run_detached, args=(store.path, scope), daemon=True, name="gitmem-vectors"
        )
        _threads[key] = t
        t.start()


def spawn_catch_up(store: StoreCore) -> None:
    """Start a detached process catching every scope up (for faces that exit after one command)."""
    subprocess.Popen(  # noqa: S603 - our own interpreter and module, no shell
        [sys.executable, "-m", "gitmem.engine.vector_catchup", str(store.path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _run_detached(path: Path, scope: str | None) -> None:
    with contextlib.suppress(Exception):
        core = open_core(path)
        try:
            catch_up(core, scope)
        finally:
            core.close()


def wait_background(store: StoreCore, timeout: float | None = None) -> None:
    t = _threads.get(str(store.path))
    if t is not None:
        t.join(timeout)


def main(argv: list[str] | None = None) -> int:
    """``python -m gitmem.engine.vector_catchup STORE_PATH``: catch every scope's vectors up, then exit."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        return 2
    _run_detached(Path(args[0]), None)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
