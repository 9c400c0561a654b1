"""A node's own webhook files, as a cluster node keeps them level with the cluster's endpoints in
PostgreSQL (:mod:`gitmem.cluster.webhook_state`, docs/cluster.md#webhooks): the endpoints file,
each endpoint's cursor file, the workspace's ids, and the ids the node's copy held at its last
sync. The library layer (the files' formats are :mod:`gitmem.engine.events`'), so the cluster
face reaches nothing below the public API."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gitmem import webhooks
from gitmem.engine import events

SEEN_FILE = "cluster_seen.json"


def configured(home: Path) -> bool:
    """An endpoints file exists (an endpoint was ever added here)."""
    return (events.webhooks_dir(home) / events.ENDPOINTS_FILE).is_file()


@contextlib.contextmanager
def locked(home: Path) -> Iterator[None]:
    """The webhooks lock of ``home`` (the one ``add``, ``remove`` and ``enable`` take)."""
    with events.locked(events.webhooks_dir(home) / ".lock"):
        yield


def store_cursors(home: Path, endpoint_id: str) -> dict[str, Any]:
    """The endpoint's cursor per store, from its local cursor file."""
    return dict(events.load_state(home, endpoint_id)["stores"])


def begin(home: Path, endpoint_id: str) -> None:
    """Start the endpoint's local cursor now (the journal's end, every scope's tip)."""
    events.begin(home, endpoint_id)


def forget(home: Path, endpoint_id: str) -> None:
    events.state_path(home, endpoint_id).unlink(missing_ok=True)


def row(ep: webhooks.Endpoint) -> dict[str, Any]:
    """An endpoint as it is kept (its secret included)."""
    return {**ep.public(), "secret": ep.secret, "resumes": ep.resumes}


def endpoint(body: dict[str, Any]) -> webhooks.Endpoint:
    return webhooks.endpoint_from(body)


def workspace_ids(home: Path) -> dict[str, str]:
    """This workspace's event ids (made now if it has none; the caller holds :func:`locked`)."""
    return events.workspace_ids_unlocked(home)


def set_workspace_ids(home: Path, ids: dict[str, str]) -> None:
    events.write_atomic(events.webhooks_dir(home) / "workspace.json", json.dumps(ids).encode())


def seen(home: Path) -> set[str]:
    try:
        return set(json.loads((events.webhooks_dir(home) / SEEN_FILE).read_text()))
    except (FileNotFoundError, ValueError):
        return set()


def set_seen(home: Path, ids: set[str]) -> None:
    events.write_atomic(events.webhooks_dir(home) / SEEN_FILE, json.dumps(sorted(ids)).encode())


def journal(home: Path) -> list[dict[str, Any]]:
    """This workspace's store-level journal entries, in order."""
    return events.journal_entries(home)


def journal_cursor(home: Path, endpoint_id: str) -> int:
    """The last journal entry (its seq) the endpoint's own cursor file says was sent."""
    return int(events.load_state(home, endpoint_id).get("journal", 0))
