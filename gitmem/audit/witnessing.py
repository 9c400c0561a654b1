"""Asking witnesses to cosign the store's checkpoints (docs/transparency.md#witnesses).

:func:`cosign_round` submits the newest checkpoint to every witness of a policy that has a URL and
has not cosigned it yet (old size: what that witness last cosigned, from
``$GIT_DIR/gitmem/tlog/witnesses.json``; a 409 tells the witness's size and the round retries once),
verifies each returned cosignature and stores it with the checkpoint. :class:`Worker` runs rounds in
a background thread for ``gitmem serve``: an append only wakes it, nothing waits for a witness.
With the worker, neither the append's checkpoint nor the cosignatures pay a commit of their own:
they wait in memory and the worker folds them into the repository in one commit, at most once per
``fold_interval`` (and when it stops). Its queue is durable by construction: what is pending is
read from the repository (a newest checkpoint some configured witness has not cosigned, or one that
lags the ledger: :func:`resign`), so a restart, after a crash too, signs again and asks again;
failures are retried with a backoff.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import json
import os
import queue
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gitmem.audit import transparency, witness_client
from gitmem.audit.journal import JOURNAL_FILE
from gitmem.engine import checkpoints, ledger
from gitmem.errors import GitmemError
from gitmem.git.locks import file_lock
from gitmem.model.tlog import note
from gitmem.model.tlog.checkpoint import parse_body
from gitmem.model.tlog.policy import Policy

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

SIZES_FILE = "witnesses.json"
MAX_OPEN = 64  # store handles the witness worker keeps open


@functools.lru_cache(maxsize=64)
def _split(url: str) -> urllib.parse.SplitResult:
    return urllib.parse.urlsplit(url.rstrip("/") + "/add-checkpoint")


_conns: dict[tuple[str, str, int | None], http.client.HTTPConnection] = {}
_conns_lock = threading.Lock()


def submit(url: str, old: int, proof: Iterable[bytes], signed: str, timeout: float = 10.0) -> tuple[int, str]:
    """POST an add-checkpoint request; ``(status, body)``. The connection is kept for the next round
    (HTTP/1.1 keep-alive, as tlog-witness recommends); one that went stale is replaced once."""
    body = f"old {old}\n" + "".join(note.b64(h) + "\n" for h in proof) + "\n" + signed
    u = _split(url)
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


_sizes_memo: dict[Path, tuple[float, dict[str, int]]] = {}  # path -> (read at, sizes)


_sizes_paths: dict[Path, Path] = {}  # store path -> its witnesses.json (built once)


def _sizes_path(store: StoreCore) -> Path:
    path = _sizes_paths.get(store.path)
    if path is None:
        path = _sizes_paths[store.path] = store.gitmem_dir / checkpoints.TLOG_DIR / SIZES_FILE
    return path


def _sizes(store: StoreCore) -> dict[str, int]:
    """What each witness last cosigned (a hint: a witness that knows better answers 409, so a file
    another process rewrote is read again only when this process's copy is older than 2 s)."""
    path = _sizes_path(store)
    memo = _sizes_memo.get(path)
    if memo is not None and time.monotonic() - memo[0] < 2.0:
        return dict(memo[1])
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        sizes = {str(k): int(v) for k, v in data.items()}
    except (FileNotFoundError, ValueError, AttributeError, TypeError):
        sizes = {}
    _sizes_memo[path] = (time.monotonic(), dict(sizes))
    return sizes


def _save_sizes(store: StoreCore, sizes: dict[str, int]) -> None:
    path = checkpoints.tlog_dir(store) / SIZES_FILE
    tmp = path.with_name(f"{SIZES_FILE}.tmp{os.getpid()}.{threading.get_ident()}")
    tmp.write_text(json.dumps(sizes, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
    _sizes_memo[path] = (time.monotonic(), dict(sizes))


def pending(store: StoreCore, policy: Policy, files: dict[str, str] | None = None) -> list[str]:
    """The policy's witnesses (with a URL) that have not cosigned the newest checkpoint (of
    ``files``, the store's :func:`checkpoints.current` when not given)."""
    files = checkpoints.current(store) if files is None else files
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
    files = checkpoints.current(store)  # one look at the ref (and this process's uncommitted one)
    names = pending(store, policy, files)
    if not names:
        return out
    newest = transparency.newest(store, files)
    t = transparency.tree_at(store, newest.cp.size, newest.cp.root)
    sizes = _sizes(store)
    known = _cosigned_sizes(files, policy)
    lock = threading.Lock()

    def one(name: str, answer: Callable[[], tuple[int, str, int]]) -> None:
        try:
            status, text, old = answer()
            out[name] = _take(store, policy, name, newest, status, text)
        except (OSError, http.client.HTTPException) as exc:
            out[name] = f"unreachable: {exc}"
            return
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
    """:func:`cosign_round`, then the checkpoint an append left uncommitted and the cosignatures
    the round gathered go into the repository in one commit (:func:`checkpoints.flush`)."""
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
        got = note.verified(note.with_lines(note.parse(newest.text), text), [policy.witnesses[name]])
    except GitmemError as exc:
        return f"bad cosignature: {exc.message}"
    if not got:
        return "answered without a cosignature from its key"
    checkpoints.add_cosignatures(store, newest.cp.body(), got)
    return "cosigned"


def resign(store: StoreCore) -> bool:
    """Sign the checkpoint of the whole ledger when the newest one lags it: a process that left its
    checkpoint to the worker's fold crashed before it. The entries are durable, so the checkpoint is
    rebuilt; the same tree signs to the same note (Ed25519 is deterministic) and a witness that
    cosigned it before cosigns it again (asked at its own size, after a 409). Whether one was signed."""
    if store.is_clone:
        return False
    with file_lock(store.gitmem_dir / "ledger.lock"):
        tip = store.repo.references.get(ledger.LEDGER_REF)
        if tip is None:
            return False
        last = ledger.parse_commit(store.commit(tip.target))
        signed = checkpoints.current(store).get("checkpoint")
        if signed is not None and parse_body(note.parse(signed).text).size > last.seq:
            return False
        body = {"seq": last.seq, "kind": last.kind, "at": last.at, "actor": last.actor}
        leaf = ledger.canonical({**body, "data": last.data, "prev": last.prev})
        checkpoints.on_append(store, last.seq, checkpoints.leaf_bytes(leaf), lambda: ledger.leaves(store))
        return True


def _fold_or_resign(store: StoreCore) -> None:
    """:func:`checkpoints.flush`; when it dropped this process's uncommitted checkpoint because
    another process moved the ref with one that does not hold its entries (a key rotation's
    cross-signed checkpoint, a cosignature committed by ``gitmem tlog cosign``; an append's would),
    the ledger's newest is signed again (:func:`resign`): else that entry had no checkpoint (and a
    redaction no receipt) until the next append."""
    had = store.path in checkpoints.pending_paths()
    if not checkpoints.flush(store) and had:
        resign(store)


def _opened_state(path: Path, core: StoreCore) -> tuple[int, ...] | None:
    """What a kept handle of the witness worker must match to be used again: the store
    directory's (device, inode) and its settings file's (inode, change and modification times,
    size: a hand edit the open records, a store restored over its directory); None when the next
    use must open anew in any case (a history rewrite's journal is there: the open finishes or
    rolls it back, as a handle opened for each round did)."""
    try:
        if (core.gitmem_dir / JOURNAL_FILE).exists():
            return None
        d = os.stat(path)
        f = os.stat(core.settings_path)
    except OSError:
        return None
    return (d.st_dev, d.st_ino, f.st_ino, f.st_ctime_ns, f.st_mtime_ns, f.st_size)


class Worker:
    """The background witness loop of ``gitmem serve``."""

    def __init__(
        self,
        open_core: Callable[[Path], AbstractContextManager[StoreCore]],
        stores: Callable[[], list[Path]],
        policy: Callable[[], Policy | None],
        interval: float = 2.0,
        max_backoff: float = 60.0,
        fold_interval: float = 1.0,
    ) -> None:
        self._open, self._stores, self._policy = open_core, stores, policy
        self.interval, self.max_backoff, self.fold_interval = interval, max_backoff, fold_interval
        self._due: dict[Path, float] = {}  # path -> when its uncommitted checkpoint is folded
        self._folded: dict[Path, float] = {}  # path -> when it was folded last
        self._checked: set[Path] = set()  # stores looked at since the start (lagging: re-signed)
        self._queue: queue.Queue[Path | None] = queue.Queue()
        self._retry: dict[Path, tuple[float, float]] = {}  # path -> (not before, backoff)
        self._thread = threading.Thread(target=self._run, name="gitmem-witness", daemon=True)
        self.last: dict[Path, dict[str, str]] = {}
        # store path -> its handle's context, the handle (kept from round to round) and what it
        # must match to be used again (_opened_state)
        self._cores: dict[
            Path, tuple[AbstractContextManager[StoreCore], StoreCore, tuple[int, ...] | None]
        ] = {}

    def start(self) -> None:
        checkpoints.add_listener(self.notify, commits=True)  # appends leave their commit to rounds
        self._thread.start()

    def stop(self) -> None:
        checkpoints.remove_listener(self.notify)
        self._queue.put(None)
        self._thread.join(timeout=30)
        alive = self._thread.is_alive()  # (stuck: its handles are left to it)
        for path in checkpoints.pending_paths():  # what no round committed yet
            try:
                with self._open(path) if alive else self._core(path) as core:
                    _fold_or_resign(core)
            except Exception:  # noqa: BLE001,S112 - the next append there signs it again
                continue
        if not alive:
            for path in list(self._cores):
                self._close(path)

    @contextlib.contextmanager
    def _core(self, path: Path) -> Iterator[StoreCore]:
        """The store's handle, kept open from round to round: opening one (recovery checks, the
        repository, the settings) cost more CPU than the round and the fold together. A handle is
        dropped when an error is raised with it, when the store leaves the scan, and when what an
        open does is due again (:func:`_opened_state`: the directory or its settings file is no
        longer the one opened, a history rewrite left its journal); at most :data:`MAX_OPEN` are
        kept, the least recently used closed first. Between rounds a kept handle holds no
        repository: the thread's is dropped after each use, so no pack file a redaction's purge
        (or a repack, or a restore) deleted stays open, and on disk, behind it."""
        held = self._cores.pop(path, None)
        if held is not None and (held[2] is None or _opened_state(path, held[1]) != held[2]):
            with contextlib.suppress(Exception):
                held[0].__exit__(None, None, None)
            held = None
        if held is None:
            cm = self._open(path)
            core = cm.__enter__()
            held = (cm, core, _opened_state(path, core))
        self._cores[path] = held  # the most recently used last
        while len(self._cores) > MAX_OPEN:
            self._close(next(iter(self._cores)))
        try:
            yield held[1]
        except BaseException:
            self._close(path)
            raise
        finally:
            with contextlib.suppress(Exception):
                held[1].reopen_thread_repository()  # (opened again lazily: ~0.1 ms)

    def _close(self, path: Path) -> None:
        held = self._cores.pop(path, None)
        if held is not None:
            with contextlib.suppress(Exception):
                held[0].__exit__(None, None, None)

    def notify(self, path: Path) -> None:
        self._queue.put(path)  # never blocks: the queue is unbounded

    def _run(self) -> None:
        next_scan = 0.0  # the first scan (re-signing what a crash left unsigned) runs at once
        while True:
            now = time.monotonic()
            wait = max(0.0, min([next_scan - now, *(d - now for d in self._due.values())]))
            try:
                item: Path | None | bool = self._queue.get(timeout=wait)
            except queue.Empty:
                item = False  # no wake-up: the periodic scan, or a fold that is due
            if item is None:
                for path in list(self._cores):  # (stop() flushes what waits, with fresh handles)
                    self._close(path)
                return
            now = time.monotonic()
            todo = [item] if isinstance(item, Path) else []
            if now >= next_scan:
                listed = self._stores()
                todo += [p for p in listed if self._retry.get(p, (0.0, 0.0))[0] <= now]
                for gone in set(self._cores) - set(listed):
                    self._close(gone)
                next_scan = now + self.interval
            for path in dict.fromkeys(todo):
                self._one(path)
            for path, due in list(self._due.items()):
                if due <= time.monotonic():
                    self._fold(path)

    def _fold(self, path: Path) -> None:
        """One commit for the store's uncommitted checkpoint and cosignatures."""
        self._due.pop(path, None)
        self._folded[path] = time.monotonic()
        try:
            with self._core(path) as core:
                _fold_or_resign(core)
        except Exception:  # noqa: BLE001,S110 - the next fold, stop() or a restart's resign commits it
            pass

    def _one(self, path: Path) -> None:
        policy = self._policy()
        try:
            with self._core(path) as core:
                if path not in self._checked:
                    self._checked.add(path)
                    resign(core)  # a crash lost a checkpoint left to the fold: sign it again
                if policy is None or not policy.urls:
                    _fold_or_resign(core)
                    return
                result = cosign_round(core, policy)
                if core.path in checkpoints.pending_paths() and path not in self._due:
                    last = self._folded.get(path, float("-inf"))
                    self._due[path] = max(time.monotonic(), last + self.fold_interval)
        except Exception as exc:  # noqa: BLE001 - the loop outlives any one store's trouble
            result = {"*": f"error: {exc}"}
        self.last[path] = result
        if all(v == "cosigned" for v in result.values()):
            self._retry.pop(path, None)
        else:
            _, backoff = self._retry.get(path, (0.0, self.interval / 2))
            backoff = min(backoff * 2, self.max_backoff)
            self._retry[path] = (time.monotonic() + backoff, backoff)
