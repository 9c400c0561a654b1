"""Webhook delivery across a server restart (docs/webhooks.md#guarantees): a graceful restart
loses and repeats nothing; a SIGKILL loses nothing and repeats at most the one delivery in
flight, with the same ``webhook-id`` (at-least-once, idempotent by id)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from serverkit import free_port, running
from test_webhooks import Receiver, add, fast_worker, receiver, version_ids, versions_in_order  # noqa: F401

import gitmem
from tests.helpers import patience


def test_a_graceful_restart_mid_stream_loses_and_repeats_nothing(
    workspace: Path,
    receiver: Receiver,  # noqa: F811 - the fixture of test_webhooks
) -> None:
    with gitmem.create_store("Notes", home=workspace) as s:
        sid = s.id
    add(workspace, receiver)
    receiver.delay = 0.1
    with running(workspace):
        with gitmem.open_store(sid, workspace) as s:
            for i in range(30):
                s.write(f"/m{i}.md", f"{i}\n")
        receiver.wait_for(5)
    stopped_at = len(receiver.payloads())
    with gitmem.open_store(sid, workspace) as s:  # written while no server runs
        for i in range(30, 40):
            s.write(f"/m{i}.md", f"{i}\n")
    with running(workspace):
        got = receiver.wait_for(40)
        time.sleep(0.5)
        got = receiver.payloads()
    assert stopped_at < 30  # stopped mid-stream
    assert version_ids(got) == versions_in_order(workspace, sid)  # exactly once, in order
    assert len(got) == 40


def _serve(workspace: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(Path(gitmem.__file__).parent.parent)}
    args = [sys.executable, "-m", "gitmem", "--home", str(workspace), "serve", "--port", str(port)]
    p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = patience(120)
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5):
                return p
        except OSError:
            time.sleep(0.1)
    p.kill()
    raise RuntimeError("gitmem serve did not start")


def test_sigkill_mid_stream_loses_nothing_and_repeats_only_the_delivery_in_flight(
    workspace: Path,
    receiver: Receiver,  # noqa: F811 - the fixture of test_webhooks
) -> None:
    with gitmem.create_store("Notes", home=workspace) as s:
        sid = s.id
    add(workspace, receiver)
    receiver.delay = 0.2  # the server is killed while a delivery waits for its answer
    with gitmem.open_store(sid, workspace) as s:
        for i in range(20):
            s.write(f"/m{i}.md", f"{i}\n")
    first = _serve(workspace, free_port())
    try:
        receiver.wait_for(4)
        while len(receiver.attempts) == len(receiver.payloads()):  # kill with one in flight
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait(60)
    finally:
        first.kill()
    with gitmem.open_store(sid, workspace) as s:
        for i in range(20, 25):
            s.write(f"/m{i}.md", f"{i}\n")
    receiver.delay = 0.0
    second = _serve(workspace, free_port())
    try:
        expected = versions_in_order(workspace, sid)
        deadline = patience(180)
        while set(expected) - set(version_ids(receiver.payloads())) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)
    finally:
        second.send_signal(signal.SIGTERM)
        second.wait(60)
    got = receiver.payloads()
    ids = version_ids(got)
    deduped = [v for i, v in enumerate(ids) if i == 0 or ids[i - 1] != v]
    assert deduped == expected  # nothing lost, order kept
    assert len(ids) - len(expected) <= 1  # at most the one in flight, again
    webhook_ids = [p["id"] for p in got]
    for i in range(1, len(ids)):
        if ids[i] == ids[i - 1]:
            assert webhook_ids[i] == webhook_ids[i - 1] and got[i] == got[i - 1]  # the same event
