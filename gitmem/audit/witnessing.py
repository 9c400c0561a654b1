"""Asking witnesses to cosign the store's checkpoints (docs/transparency.md#witnesses).

:func:`cosign_round` submits the newest checkpoint to every witness of a policy that has a URL and
has not cosigned it yet (old size: what that witness last cosigned, from
``$GIT_DIR/gitmem/tlog/witnesses.json``; a 409 tells the witness's size and the round retries once),
verifies each returned cosignature and stores it with the checkpoint. :class:`Worker` runs rounds in
a background thread for ``gitmem serve``: an append only wakes it, nothing waits for a witness.
Its queue is durable by construction: what is pending is read from the repository (a newest
checkpoint some configured witness has not cosigned), so a restart resumes it; failures are
retried with a backoff.
"""

from __future__ import annotations

import http.client
import json
import os
import queue
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.audit import transparency, witness_client
from gitmem.engine import checkpoints
from gitmem.errors import GitmemError
from gitmem.model.tlog import note
from gitmem.model.tlog.checkpoint import parse_body
from gitmem.model.tlog.policy import Policy

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

SIZES_FILE = "witnesses.json"


_conns: dict[tuple[str, str, int | None], http.client.HTTPConnection] = {}
_conns_lock = threading.Lock()


def submit(url: str, old: int, proof: Iterable[bytes], signed: str, timeout: float = 10.0) -> tuple[int, str]:
    """POST an add-checkpoint request; ``(status, body)``. The connection is kept for the next round
    (HTTP/1.1 keep-alive, as tlog-witness recommends); one that went stale is replaced once."""
    body = f"old {old}\n" + "".join(note.b64(h) + "\n" for h in proof) + "\n" + signed
    u = urllib.parse.urlsplit(url.rstrip("/") + "/add-checkpoint")
    key = (u.scheme, u.hostname or "127.0.0.1", u.port)
    if u.scheme == "http":
        return _submit_plain(key[1], u.port or 80, u.path, body.encode("utf-8"), timeout)
    with _conns_lock:
        conn = _conns.pop(key, None)  # a connection is used by one round at a time
    for attempt in range(2):
        fresh = conn is None
        if conn is None:
            conn_type = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
            conn = conn_type(key[1], u.port, timeout=timeout)
        conn.timeout = timeout
        try:
            conn.request("POST", u.path, body=body.encode("utf-8"), headers={"Content-Type": "text/plain"})
            resp = conn.getresponse()
            text = resp.read(65536).decode("utf-8", "replace")
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = None
            if fresh or attempt:
                raise
            continue  # a kept connection the witness had closed: once more on a new one
        if resp.will_close or not resp.isclosed():
            conn.close()
        else:
            with _conns_lock:
                _conns.setdefault(key, conn)
        return resp.status, text
    raise AssertionError("unreachable")


_plain: dict[tuple[str, int], witness_client.Conn] = {}


def _submit_plain(host: str, port: int, path: str, body: bytes, timeout: float) -> tuple[int, str]:
    """:func:`submit` over plain HTTP, with :mod:`gitmem.audit.witness_client` (the same keep-alive
    and one retry on a kept connection the witness had closed)."""
    with _conns_lock:
        conn = _plain.pop((host, port), None)
    for attempt in range(2):
        fresh = conn is None
        if conn is None:
            conn = witness_client.Conn(host, port, timeout)
        try:
            status, text, keep = conn.post(path, body, timeout)
        except (OSError, http.client.HTTPException):
            conn.close()
            conn = None
            if fresh or attempt:
                raise
            continue
        if keep:
            with _conns_lock:
                if _plain.setdefault((host, port), conn) is not conn:
                    conn.close()
        else:
            conn.close()
        return status, text
    raise AssertionError("unreachable")


_sizes_memo: dict[Path, tuple[tuple[int, int], dict[str, int]]] = {}


def _sizes_path(store: StoreCore) -> Path:
    return store.gitmem_dir / checkpoints.TLOG_DIR / SIZES_FILE


def _sizes(store: StoreCore) -> dict[str, int]:
    """What each witness last cosigned (a hint: a witness that knows better answers 409)."""
    path = _sizes_path(store)
    try:
        st = path.stat()
    except FileNotFoundError:
        _sizes_memo.pop(path, None)
        return {}
    memo = _sizes_memo.get(path)
    if memo is not None and memo[0] == (st.st_ino, st.st_mtime_ns):
        return dict(memo[1])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        sizes = {str(k): int(v) for k, v in data.items()}
    except (FileNotFoundError, ValueError, AttributeError, TypeError):
        return {}
    _sizes_memo[path] = ((st.st_ino, st.st_mtime_ns), dict(sizes))
    return sizes


def _save_sizes(store: StoreCore, sizes: dict[str, int]) -> None:
    path = checkpoints.tlog_dir(store) / SIZES_FILE
    tmp = path.with_name(f"{SIZES_FILE}.tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(sizes, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    st = path.stat()
    _sizes_memo[path] = ((st.st_ino, st.st_mtime_ns), dict(sizes))


def pending(store: StoreCore, policy: Policy) -> list[str]:
    """The policy's witnesses (with a URL) that have not cosigned the newest checkpoint."""
    files = checkpoints.current(store)
    if "checkpoint" not in files:
        return []
    parsed = note.parse(files["checkpoint"])
    have = {(s.name, s.key_id) for s in parsed.sigs}
    return [n for n, w in policy.witnesses.items() if n in policy.urls and (w.name, w.key_id) not in have]


def _ask(url: str, old: int, t: Any, newest: transparency.Signed, timeout: float) -> tuple[int, str, int]:
    """Submit, and once more from the witness's size when it answers 409; ``(status, body, old size
    last sent)``."""
    for _attempt in range(2):
        status, text = submit(url, old, t.consistency_proof(old, newest.cp.size), newest.text, timeout)
        size = text[:-1] if text.endswith("\n") else text
        if (
            status == 409
            and re.fullmatch(r"0|[1-9][0-9]{0,18}", size)
            and int(size) <= newest.cp.size
            and int(size) != old
        ):
            old = int(size)
            continue
        break
    return status, text, old


def _cosigned_sizes(files: dict[str, str], policy: Policy) -> dict[str, int]:
    """Per witness, the size of the newest checkpoint the ref holds with its cosignature."""
    out: dict[str, int] = {}
    for slot in ("witnessed", "checkpoint"):
        text = files.get(slot)
        if text is None:
            continue
        try:
            parsed = note.parse(text)
            size = parse_body(parsed.text).size
        except GitmemError:
            continue
        have = {(s.name, s.key_id) for s in parsed.sigs}
        for name, w in policy.witnesses.items():
            if (w.name, w.key_id) in have:
                out[name] = max(out.get(name, 0), size)
    return out


def cosign_round(store: StoreCore, policy: Policy, timeout: float = 10.0) -> dict[str, str]:
    """One round over the pending witnesses, asked in parallel (a slow one holds back no other);
    each cosignature is verified and stored as it arrives. ``{witness: "cosigned" | what failed}``.
    What a witness last cosigned is read from the ref (the cosignatures stored with the checkpoints)
    and from ``witnesses.json`` (written when a witness told a size by a 409); a witness that knows
    better answers 409 and is asked again once."""
    out: dict[str, str] = {}
    names = pending(store, policy)
    if not names:
        return out
    newest = transparency.newest(store)
    t = transparency.tree_at(store, newest.cp.size, newest.cp.root)
    sizes = _sizes(store)
    known = _cosigned_sizes(checkpoints.current(store), policy)
    lock = threading.Lock()

    def one(name: str, answer: Callable[[], tuple[int, str, int]]) -> None:
        try:
            status, text, old = answer()
            out[name] = _take(store, policy, name, newest, status, text)
        except (OSError, http.client.HTTPException) as exc:
            out[name] = f"unreachable: {exc}"
            return
        finally:  # the first answer commits the append's checkpoint, cosigned by then or not
            checkpoints.flush(store)
        if out[name] != "cosigned" and old != start(name):  # what the witness told us, for next time
            with lock:
                sizes[name] = old
                _save_sizes(store, sizes)

    def start(n: str) -> int:
        return min(max(sizes.get(n, 0), known.get(n, 0)), newest.cp.size)

    def ask(n: str) -> tuple[int, str, int]:
        return _ask(policy.urls[n], start(n), t, newest, timeout)

    if len(names) == 1:  # no thread for a single witness
        one(names[0], lambda: ask(names[0]))
        return out
    with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
        futures = {pool.submit(ask, n): n for n in names}
        for fut in as_completed(futures):
            one(futures[fut], fut.result)
    return out


def round_and_commit(store: StoreCore, policy: Policy, timeout: float = 10.0) -> dict[str, str]:
    """What the worker does after an append: :func:`cosign_round`, the checkpoint the append left
    uncommitted going into the repository with the first cosignature (or alone, after the round)."""
    try:
        return cosign_round(store, policy, timeout)
    finally:
        checkpoints.flush(store)


def _take(
    store: StoreCore, policy: Policy, name: str, newest: transparency.Signed, status: int, text: str
) -> str:
    if status != 200:
        return f"refused ({status}): {text.strip()[:200]}"
    try:
        got = note.verified(note.parse(note.parse(newest.text).text + "\n" + text), [policy.witnesses[name]])
    except GitmemError as exc:
        return f"bad cosignature: {exc.message}"
    if not got:
        return "answered without a cosignature from its key"
    checkpoints.add_cosignatures(store, newest.cp.body(), got)
    return "cosigned"


class Worker:
    """The background witness loop of ``gitmem serve``."""

    def __init__(
        self,
        open_core: Callable[[Path], AbstractContextManager[StoreCore]],
        stores: Callable[[], list[Path]],
        policy: Callable[[], Policy | None],
        interval: float = 2.0,
        max_backoff: float = 60.0,
    ) -> None:
        self._open, self._stores, self._policy = open_core, stores, policy
        self.interval, self.max_backoff = interval, max_backoff
        self._queue: queue.Queue[Path | None] = queue.Queue()
        self._retry: dict[Path, tuple[float, float]] = {}  # path -> (not before, backoff)
        self._thread = threading.Thread(target=self._run, name="gitmem-witness", daemon=True)
        self.last: dict[Path, dict[str, str]] = {}

    def start(self) -> None:
        checkpoints.add_listener(self.notify, commits=True)  # appends leave their commit to rounds
        self._thread.start()

    def stop(self) -> None:
        checkpoints.remove_listener(self.notify)
        self._queue.put(None)
        self._thread.join(timeout=30)
        for path in checkpoints.pending_paths():  # what no round committed yet
            try:
                with self._open(path) as core:
                    checkpoints.flush(core)
            except Exception:  # noqa: BLE001,S112 - the next append there signs it again
                continue

    def notify(self, path: Path) -> None:
        self._queue.put(path)  # never blocks: the queue is unbounded

    def _run(self) -> None:
        next_scan = 0.0
        while True:
            try:
                item: Path | None | bool = self._queue.get(timeout=self.interval)
            except queue.Empty:
                item = False  # no wake-up: only the periodic scan
            if item is None:
                return
            now = time.monotonic()
            todo = [item] if isinstance(item, Path) else []
            if now >= next_scan:
                todo += [p for p in self._stores() if self._retry.get(p, (0.0, 0.0))[0] <= now]
                next_scan = now + self.interval
            for path in dict.fromkeys(todo):
                self._one(path)

    def _one(self, path: Path) -> None:
        policy = self._policy()
        try:
            with self._open(path) as core:
                if policy is None or not policy.urls:
                    checkpoints.flush(core)
                    return
                result = round_and_commit(core, policy)
        except Exception as exc:  # noqa: BLE001 - the loop outlives any one store's trouble
            result = {"*": f"error: {exc}"}
        self.last[path] = result
        if all(v == "cosigned" for v in result.values()):
            self._retry.pop(path, None)
        else:
            _, backoff = self._retry.get(path, (0.0, self.interval / 2))
            backoff = min(backoff * 2, self.max_backoff)
            self._retry[path] = (time.monotonic() + backoff, backoff)
