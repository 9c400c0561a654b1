#!/usr/bin/env python3
"""What the transparency log costs (docs/transparency.md): CPU added to a redaction by signing its
checkpoint and by one witness round trip, and what it adds to an ordinary write's acknowledgement.

    python bench/tlog_bench.py [--entries 2000] [--rounds 200] [--json out.json]
    python bench/tlog_bench.py --quick          # 200 entries, 40 rounds (seconds)

Rows (medians over the rounds, CPU = this process's ``time.process_time``, wall = ``perf_counter``):

- ``sign (no witness)``: ``checkpoints.on_append`` timed inside each ``ledger.append`` of a store of
  ``--entries`` entries, no witness worker: the tlog's share of an append (frontier, Ed25519
  signature, the checkpoint commit and its flush; the flush's wait is wall time, not CPU).
- ``sign``: the same with witnesses configured and a committing listener registered, as ``gitmem
  serve``'s witness worker registers one: the append signs and leaves the commit to the fold.
- ``witness round trip``: ``witnessing.cosign_round`` (what the worker runs) against one real
  ``gitmem witness serve`` process on 127.0.0.1 after each append: proof, HTTP request, cosignature
  check, the cosignature kept with the uncommitted checkpoint (no commit; the witness's own CPU is
  its process's, reported apart from /proc).
- ``sign + witness``: their sum, the CPU on a redaction's path (target <= 1 ms).
- ``fold``: ``checkpoints.flush``, the one commit that stores the checkpoint and its cosignatures
  (the worker folds at most once a ``fold_interval``, whatever the number of appends and
  cosignatures since the last fold; the bench folds after every round: the worst case, an isolated
  redaction), and ``sign + witness + fold``, the sum with one fold per redaction.
- ``checkpoint commits per append``: commits on ``refs/gitmem/checkpoints`` per append, round and
  fold (1: the fold), and on the append's and the round's path (0).
- ``worker round + fold``: the same, as ``gitmem serve`` runs it: isolated redactions (the last
  fold long ago), each waking the real witness worker (its thread, its kept store handle, the
  policy file), which runs the round and folds at once; the worker thread's CPU from the append
  until the fold committed (``pthread_getcpuclockid``), and ``sign + worker``, with the append's
  signing on the request thread: the whole CPU the log adds to an isolated redaction.
- ``receipt``: building the receipt a redaction returns (on its request thread), for an entry just
  appended to the ledger of ``--entries``.
- ``floor``: one commit object, its flush and a ref move on the same repository (what any commit
  costs on this file system: the fold writes one), right after each fold (the same minutes).
- ``ordinary write``: ``Store.write`` with the witness worker running and a witness configured,
  against the same write without the worker (interleaved blocks of 10); and how many checkpoints
  ordinary writes signed (0:
  writes do not append to the ledger).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gitmem  # noqa: E402
from gitmem.audit import transparency, witnessing  # noqa: E402
from gitmem.engine import checkpoints, ledger  # noqa: E402
from gitmem.engine.core import StoreCore  # noqa: E402
from gitmem.model.tlog import policy as policy_mod  # noqa: E402


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _timed(fn: Callable[[], object]) -> tuple[float, float]:
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return time.process_time() - c0, time.perf_counter() - w0


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextmanager
def _witness(d: Path, log_vkey: str) -> Iterator[tuple[str, str, int]]:
    args = [sys.executable, "-m", "gitmem", "witness", "serve", "--dir", str(d), "--name", "bench.test/w1"]
    p = subprocess.Popen([*args, "--port", "0", "--log", log_vkey], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None
    words = p.stdout.readline().split()
    try:
        yield words[1], words[-1], p.pid
    finally:
        p.terminate()
        p.wait(timeout=30)


class _Floor:
    """One bare commit + flush + ref move on the store's repository (a scratch ref), timed: what any
    commit costs on this file system. Run after each fold, so both meet the same machine."""

    def __init__(self, core: StoreCore) -> None:
        import pygit2

        self.core, self.sig = core, pygit2.Signature("bench", "bench", 0, 0)
        self.tree = core.empty_tree()
        self.tip = core.repo.create_commit(None, self.sig, self.sig, "floor", self.tree, [])
        core.repo.references.create("refs/bench/floor", self.tip, force=True)
        self.cpu: list[float] = []

    def once(self) -> None:
        repo = self.core.repo
        c0 = time.process_time()
        oid = repo.create_commit(None, self.sig, self.sig, f"floor {len(self.cpu)}", self.tree, [self.tip])
        self.core.sync_objects([oid])
        repo.references["refs/bench/floor"].set_target(oid, "bench")
        self.cpu.append(time.process_time() - c0)
        self.tip = oid

    def close(self) -> None:
        self.core.repo.references.delete("refs/bench/floor")


def _worker_rounds(
    home: Path,
    core: StoreCore,
    vkey: str,
    url: str,
    n: int,
    timed_on_append: Callable[..., str],
    sign_cpu: list[float],
) -> tuple[list[float], list[float]]:
    """Isolated redactions as ``gitmem serve`` runs them: each append wakes the real witness worker
    (its own thread, its kept handle, the policy file), which runs the round and folds at once (the
    last fold was long ago); the worker thread's CPU from the append until the fold has committed,
    and the append's signing on the request thread."""
    from gitmem.store import start_witness_worker

    (home / "witnesses.policy").write_text(
        f"log {transparency.log_vkey(core)}\nwitness w1 {vkey} {url}\nquorum w1\n"
    )
    worker = start_witness_worker(home, interval=3600.0)  # no periodic scan: only the appends wake it
    assert worker is not None
    worker.fold_interval = 0.0
    out: list[float] = []
    signs: list[float] = []
    real = checkpoints.on_append
    try:
        time.sleep(0.3)  # its first scan (a store looked at once: re-signed if it lagged)
        clock = time.pthread_getcpuclockid(worker._thread.ident or 0)
        checkpoints.on_append = timed_on_append
        for i in range(n):
            tip = core.repo.references[checkpoints.CHECKPOINTS_REF].target
            c0 = time.clock_gettime(clock)
            ledger.append(core, "flag", {"worker": i})
            signs.append(sign_cpu.pop())
            time.sleep(0.05)  # no polling while the worker runs: it would share the GIL with it
            deadline = time.monotonic() + 60
            while (
                core.repo.references[checkpoints.CHECKPOINTS_REF].target == tip or checkpoints.pending_paths()
            ):
                assert time.monotonic() < deadline, "the worker did not fold"
                time.sleep(0.01)
            out.append(time.clock_gettime(clock) - c0)
            assert worker.last.get(core.path) == {"w1": "cosigned"}, worker.last
    finally:
        checkpoints.on_append = real
        worker.stop()
        (home / "witnesses.policy").unlink()
    return out, signs


def _receipts(core: StoreCore, n: int) -> list[float]:
    """CPU of the receipt a redaction returns (built on its request thread), each for the
    redaction entry just appended to the ledger of the bench's size."""
    from gitmem.audit import redact

    out = []
    for i in range(n):
        rid = f"redact_bench{i}"
        ledger.append(core, "redaction", {"id": rid})
        c0 = time.process_time()
        got = redact._receipt(core, rid)
        out.append(time.process_time() - c0)
        assert got is not None and got["status"] == "pending", got
    return out


def _ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1000, 3)


def run(entries: int, rounds: int, writes: int) -> dict[str, object]:
    home = Path(tempfile.mkdtemp(prefix="gitmem-tlog-bench-"))
    store = gitmem.create_store("bench", home=home)
    core: StoreCore = store.core
    _log(f"seeding {entries} ledger entries")
    for i in range(entries - 1):
        ledger.append(core, "flag", {"bench": i})
    real = checkpoints.on_append
    sign_cpu, sign_wall, round_cpu, round_wall, fold_cpu = [], [], [], [], []
    on_path = 0  # checkpoint commits made by an append or a round (the fold's are counted apart)
    witness_cpu: list[float] = []
    alone: list[float] = []

    def timed_on_append(*a: Any, **k: Any) -> str:  # the tlog's share of ledger.append, alone
        c0, w0 = time.process_time(), time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            sign_cpu.append(time.process_time() - c0)
            sign_wall.append(time.perf_counter() - w0)

    def committer(path: Path) -> None:  # the worker's promise; the loop below runs its round
        return None

    checkpoints.on_append = timed_on_append
    try:
        for i in range(rounds):  # no witness: the append commits its checkpoint itself
            ledger.append(core, "flag", {"alone": i})
    finally:
        checkpoints.on_append = real
    alone, sign_cpu, sign_wall = sign_cpu, [], []
    floor = _Floor(core)
    with _witness(home / "w1", transparency.log_vkey(core)) as (vkey, url, pid):
        policy = policy_mod.parse(f"log {transparency.log_vkey(core)}\nwitness w1 {vkey} {url}\nquorum w1\n")
        assert witnessing.round_and_commit(core, policy) == {"w1": "cosigned"}
        commits_before = len(checkpoints.history(core))
        checkpoints.on_append = timed_on_append
        checkpoints.add_listener(committer, commits=True)
        try:
            for i in range(rounds):
                tip = core.repo.references[checkpoints.CHECKPOINTS_REF].target
                ledger.append(core, "flag", {"on": i})
                assert checkpoints.pending_paths() == [core.path]
                before = _proc_cpu(pid)
                c0, w0 = time.process_time(), time.perf_counter()
                result = witnessing.cosign_round(core, policy)
                c, w = time.process_time() - c0, time.perf_counter() - w0
                assert result == {"w1": "cosigned"}, result
                on_path += core.repo.references[checkpoints.CHECKPOINTS_REF].target != tip
                witness_cpu.append(_proc_cpu(pid) - before)
                round_cpu.append(c)
                round_wall.append(w)
                c0 = time.process_time()
                assert checkpoints.flush(core)  # the worker's fold (here one per round: the worst case)
                fold_cpu.append(time.process_time() - c0)
                floor.once()
                assert not checkpoints.pending_paths()
        finally:
            checkpoints.on_append = real
            checkpoints.remove_listener(committer)
        worker_cpu, worker_sign = _worker_rounds(
            home, core, vkey, url, min(rounds, 60), timed_on_append, sign_cpu
        )
    commits_per_append = (len(checkpoints.history(core)) - commits_before - len(worker_cpu)) / rounds
    assert transparency.newest(core).cp.size == len(ledger.entries(core)), "a checkpoint was not committed"
    total = [a + b for a, b in zip(sign_cpu, round_cpu, strict=True)]
    with_fold = [a + b for a, b in zip(total, fold_cpu, strict=True)]
    floor.close()
    receipt_cpu = _receipts(core, rounds)

    # ordinary writes: with the serve worker running on a configured witness, and without
    entries_before = len(ledger.entries(core))
    plain: list[float] = []
    worked: list[float] = []
    with _witness(home / "w2", transparency.log_vkey(core)) as (vkey, url, _pid):
        text = f"log {transparency.log_vkey(core)}\nwitness w1 {vkey} {url}\nquorum w1\n"
        (home / "witnesses.policy").write_text(text)
        from gitmem.store import start_witness_worker as start_worker

        block = 10  # interleaved blocks, so that the machine's load moves both alike
        for start in range(0, writes, block):
            for i in range(start, min(start + block, writes)):
                _, w = _timed(functools.partial(store.write, f"/plain/{i}.md", f"plain {i}"))
                plain.append(w)
            worker = start_worker(home, interval=0.05)
            try:
                for i in range(start, min(start + block, writes)):
                    _, w = _timed(functools.partial(store.write, f"/worked/{i}.md", f"worked {i}"))
                    worked.append(w)
            finally:
                if worker is not None:
                    worker.stop()
    signed_by_writes = len(ledger.entries(core)) - entries_before  # each entry is one checkpoint
    store.close()
    shutil.rmtree(home, ignore_errors=True)
    rows: dict[str, object] = {
        "entries": entries,
        "rounds": rounds,
        "sign_no_witness_cpu_ms": _ms(alone),
        "sign_cpu_ms": _ms(sign_cpu),
        "sign_wall_ms": _ms(sign_wall),
        "witness_round_cpu_ms": _ms(round_cpu),
        "witness_round_wall_ms": _ms(round_wall),
        "witness_process_cpu_ms": round(sum(witness_cpu) / len(witness_cpu) * 1000, 3),  # ticks: a mean
        "sign_plus_witness_cpu_ms": _ms(total),
        "fold_cpu_ms": _ms(fold_cpu),
        "sign_plus_witness_plus_fold_cpu_ms": _ms(with_fold),
        "floor_commit_cpu_ms": _ms(floor.cpu),
        "worker_round_plus_fold_cpu_ms": _ms(worker_cpu),
        "sign_plus_worker_cpu_ms": _ms([a + b for a, b in zip(worker_sign, worker_cpu, strict=True)]),
        "receipt_cpu_ms": _ms(receipt_cpu),
        "checkpoint_commits_per_append_with_witness": round(commits_per_append, 3),
        "checkpoint_commits_on_the_append_and_round_path": on_path,
        "target_ms": 1.0,
        "sign_plus_witness_over_target": round(_ms(total) / 1.0, 2),
        "write_ack_no_witnesses_ms": _ms(plain),
        "write_ack_with_witness_worker_ms": _ms(worked),
        "checkpoints_signed_by_ordinary_writes": signed_by_writes,
    }
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--entries", type=int)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--writes", type=int)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    entries = args.entries or (200 if args.quick else 2000)
    rounds = args.rounds or (40 if args.quick else 200)
    writes = args.writes or (40 if args.quick else 200)
    rows = run(entries, rounds, writes)
    for k, v in rows.items():
        print(f"{k:42} {v}")
    got = float(str(rows["sign_plus_witness_cpu_ms"]))
    verdict = f"met ({got} ms)" if got <= 1.0 else f"MISSED ({got} ms CPU, {got / 1.0:.1f}x the target)"
    print(f"{'target sign + witness <= 1 ms CPU':42} {verdict}")
    folded = float(str(rows["sign_plus_witness_plus_fold_cpu_ms"]))
    verdict = f"met ({folded} ms)" if folded <= 1.0 else f"MISSED ({folded} ms CPU, {folded:.1f}x the target)"
    print(f"{'  with one fold per redaction (worst case)':42} {verdict}")
    whole = float(str(rows["sign_plus_worker_cpu_ms"]))
    verdict = f"met ({whole} ms)" if whole <= 1.0 else f"MISSED ({whole} ms CPU, {whole:.1f}x the target)"
    print(f"{'  as gitmem serve runs it (sign + worker)':42} {verdict}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
