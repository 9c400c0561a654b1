"""The ``webhooks`` operation (docs/webhooks.md): an admin's endpoint management, driven through
the server's admin API with httpx (list, create, delete, enable, test, each call made), the CLI
(typer's runner on the real app) and the library (``gitmem.webhooks``). An allowed cell makes an
endpoint at the module's receiver on 127.0.0.1 (``allow_private``: the server opts in with
``GITMEM_WEBHOOK_ALLOW_PRIVATE=1``), lists it, has a signed test event delivered and checks the
signature, enables it and deletes it; a refused cell makes every call and must get one code for
all of them, the endpoint it aimed at untouched."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2 as httpx
from kit import Got, World, receiver
from matrix import Cell
from typer.testing import CliRunner

from gitmem import webhooks

BASE = "/v1/gitmem/webhooks"
OPT_IN = "GITMEM_WEBHOOK_ALLOW_PRIVATE"
Driver = Callable[[World, Cell], Got]


def routed(driver: Driver, webhook_driver: Driver) -> Driver:
    """A face's driver, with its ``webhooks`` cells sent to ``webhook_driver``."""

    def drive(w: World, cell: Cell) -> Got:
        return (webhook_driver if cell.op == "webhooks" else driver)(w, cell)

    return drive


@contextmanager
def _opted_in(on: bool) -> Iterator[None]:
    """The server's environment for this cell (the app is served in this process)."""
    old = os.environ.pop(OPT_IN, None)
    if on:
        os.environ[OPT_IN] = "1"
    try:
        yield
    finally:
        os.environ.pop(OPT_IN, None)
        if old is not None:
            os.environ[OPT_IN] = old


def _delivered(w: World, event_id: str, secret: str) -> str | None:
    """None when the receiver got ``event_id`` with a valid signature, else what is wrong."""
    _url, got = receiver(w)
    for headers, body in list(got):
        if headers.get("webhook-id") == event_id:
            ts = int(headers["webhook-timestamp"])
            if headers.get("webhook-signature") != webhooks.sign(secret, event_id, ts, body):
                return f"{event_id}: the signature does not verify"
            return None
    return f"{event_id}: never received"


def _ids(w: World) -> set[str]:
    return {ep.id for ep in webhooks.load_endpoints(w.home)}


def api(w: World, cell: Cell) -> Got:
    url, _got = receiver(w)
    with httpx.Client(base_url=w.url, headers=w.headers(cell.caller), timeout=60) as h:
        if cell.caller == "admin" and not cell.case:
            with _opted_in(True):
                return _admin_lifecycle(w, h, url)
        if cell.caller == "admin" and cell.case == "private":
            with _opted_in(False):
                before = _ids(w)
                codes = {
                    "allow_private": h.post(BASE, json={"url": url, "allow_private": True}).status_code,
                    "loopback": h.post(BASE, json={"url": url}).status_code,  # SSRF: 127.0.0.1
                }
                return _one_code(codes, added=_ids(w) - before)
        # a caller that is not an admin: every call, on an endpoint that exists
        ep, _secret = webhooks.add_endpoint(w.home, url, allow_private=True, description=cell.id)
        try:
            before, known = webhooks.describe(w.home, ep), _ids(w)
            with _opted_in(True):
                codes = {
                    "list": h.get(BASE).status_code,
                    "create": h.post(BASE, json={"url": url, "allow_private": True}).status_code,
                    "delete": h.delete(f"{BASE}/{ep.id}").status_code,
                    "enable": h.post(f"{BASE}/{ep.id}/enable").status_code,
                    "test": h.post(f"{BASE}/{ep.id}/test").status_code,
                }
            if ep.id not in _ids(w):
                return Got("deleted", detail=f"{ep.id} was deleted by {cell.caller}: {codes}")
            if webhooks.describe(w.home, ep) != before:
                return Got("changed", detail=f"{ep.id} changed: {codes}")
            return _one_code(codes, added=_ids(w) - known)
        finally:
            webhooks.remove_endpoint(w.home, ep.id)


def _one_code(codes: dict[str, int], added: set[str]) -> Got:
    if added:
        return Got("allowed", detail=f"endpoints added {sorted(added)}: {codes}")
    if len(set(codes.values())) != 1:
        return Got("mixed", detail=str(codes))
    code = next(iter(codes.values()))
    return Got("refused" if code >= 400 else "allowed", code, str(codes))


def _admin_lifecycle(w: World, h: httpx.Client, url: str) -> Got:
    made = h.post(BASE, json={"url": url, "allow_private": True, "description": "conformance"})
    if made.status_code != 200:
        return Got("refused", made.status_code, made.text)
    ep = made.json()
    eid, secret = ep["id"], ep["secret"]
    try:
        if not secret.startswith("whsec_"):
            return Got("nothing", detail=f"create answered no secret: {ep}")
        listed = h.get(BASE)
        rows = [r for r in listed.json()["data"] if r["id"] == eid]
        if listed.status_code != 200 or len(rows) != 1 or "secret" in json.dumps(rows):
            return Got("nothing", detail=f"list: {listed.status_code} {listed.text}")
        tested = h.post(f"{BASE}/{eid}/test").json()
        if not tested.get("delivered"):
            return Got("nothing", detail=f"test: {tested}")
        wrong = _delivered(w, tested["id"], secret)
        if wrong:
            return Got("nothing", detail=wrong)
        enabled = h.post(f"{BASE}/{eid}/enable")
        if enabled.status_code != 200 or enabled.json()["id"] != eid:
            return Got("nothing", detail=f"enable: {enabled.status_code} {enabled.text}")
        gone = h.delete(f"{BASE}/{eid}")
        if gone.status_code != 200 or eid in _ids(w):
            return Got("nothing", detail=f"delete: {gone.status_code} {gone.text}")
        return Got("allowed", detail="created, listed, tested, enabled, deleted")
    finally:
        if eid in _ids(w):
            webhooks.remove_endpoint(w.home, eid)


def cli(w: World, cell: Cell) -> Got:
    from gitmem.cli.app import app

    url, _got = receiver(w)

    def gm(*args: str) -> Any:
        return CliRunner().invoke(app, ["--home", str(w.home), "webhook", *args, "--json"], env={})

    if cell.case == "private":  # without --allow-private, 127.0.0.1 is refused (SSRF)
        r = gm("add", url)
        return Got("refused" if r.exit_code else "allowed", r.exit_code, r.output)
    r = gm("add", url, "--allow-private", "--description", cell.id)
    if r.exit_code:
        return Got("refused", r.exit_code, r.output)
    ep = json.loads(r.stdout)
    eid, secret = ep["id"], ep["secret"]
    try:
        listed = gm("list")
        if listed.exit_code or eid not in {e["id"] for e in json.loads(listed.stdout)}:
            return Got("nothing", detail=f"list: {listed.output}")
        if "whsec_" in listed.stdout:
            return Got("nothing", detail="list shows a secret")
        tested = gm("test", eid)
        if tested.exit_code:
            return Got("nothing", detail=f"test: {tested.output}")
        wrong = _delivered(w, json.loads(tested.stdout)["id"], secret)
        if wrong:
            return Got("nothing", detail=wrong)
        for verb in ("enable", "remove"):
            done = gm(verb, eid)
            if done.exit_code:
                return Got("nothing", detail=f"{verb}: {done.output}")
        if eid in _ids(w):
            return Got("nothing", detail=f"{eid} still configured after remove")
        return Got("allowed", detail="added, listed, tested, enabled, removed")
    finally:
        if eid in _ids(w):
            webhooks.remove_endpoint(w.home, eid)


def library(w: World, cell: Cell) -> Got:
    """``gitmem.webhooks`` itself, as the workspace's owner calls it (full trust)."""
    url, _got = receiver(w)
    ep, secret = webhooks.add_endpoint(w.home, url, allow_private=True, description=cell.id)
    try:
        if ep.id not in _ids(w):
            return Got("nothing", detail=f"{ep.id} not listed")
        event = webhooks.test_event(w.home)
        webhooks.post(webhooks.get_endpoint(w.home, ep.id), event, timeout=60)
        wrong = _delivered(w, event["id"], secret)
        if wrong:
            return Got("nothing", detail=wrong)
        webhooks.resume_endpoint(w.home, ep.id)
        webhooks.remove_endpoint(w.home, ep.id)
        return Got("allowed" if ep.id not in _ids(w) else "nothing", detail="added, tested, removed")
    finally:
        if ep.id in _ids(w):
            webhooks.remove_endpoint(w.home, ep.id)
