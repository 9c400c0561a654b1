"""Webhooks, the library's API (docs/webhooks.md): endpoints, Standard Webhooks signatures, one
delivery attempt, and one delivery run of an endpoint over the events after its cursor
(:mod:`gitmem.engine.events`); ``gitmem serve`` schedules the runs (:mod:`gitmem.server.webhooks`).

An admin configures endpoints (``gitmem webhook add``, or the admin API of ``gitmem serve``);
they live in ``<home>/webhooks/endpoints.json`` (0600, in a 0700 directory) with their secrets,
``whsec_<base64 of 32 random bytes>``, shown once at creation and never again. A delivery is
an HTTP POST of the event's JSON with ``webhook-id``, ``webhook-timestamp`` and
``webhook-signature: v1,<base64 HMAC-SHA256 of "<id>.<timestamp>.<body>">``, as the Standard
Webhooks spec has it (what ``standardwebhooks`` and the anthropic SDK's ``webhooks.unwrap``
verify).

SSRF: every address an endpoint's host resolves to must be a global one (no loopback, private,
link-local, multicast or reserved range) unless the endpoint was added with ``allow_private``;
the check runs when it is added and again at each delivery, and the connection goes to the very
address checked (no second lookup a rebinding DNS could answer differently). Redirects are not
followed (a 3xx is a failure).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.client
import ipaddress
import json
import logging
import random
import re
import secrets
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from gitmem.config import env, now_rfc3339
from gitmem.engine import events
from gitmem.errors import ConfigError, ForbiddenError, InvalidInputError, NotFoundError
from gitmem.ids import ULID_RE, new_ulid

MAX_ENDPOINTS = 32
MAX_URL = 2048
USER_AGENT = "gitmem-webhooks/1"
_ID_RE = re.compile(rf"^whep_{ULID_RE}\Z")
log = logging.getLogger("gitmem.webhooks")


@dataclass(frozen=True)
class Endpoint:
    id: str
    url: str
    secret: str = field(repr=False)
    events: tuple[str, ...] = events.EVENT_TYPES
    allow_private: bool = False
    description: str = ""
    created_at: str = ""
    resumes: int = 0  # counted up by ``enable``: an endpoint stopped at a lower count starts again

    def public(self) -> dict[str, Any]:
        """What ``list`` shows: everything but the secret."""
        return {
            "id": self.id,
            "url": self.url,
            "events": list(self.events),
            "allow_private": self.allow_private,
            "description": self.description,
            "created_at": self.created_at,
        }


def _file(home: Path) -> Path:
    return events.webhooks_dir(home) / events.ENDPOINTS_FILE


def load_endpoints(home: Path) -> list[Endpoint]:
    path = _file(home)
    try:
        raw = json.loads(path.read_text())
        if not isinstance(raw, dict) or not isinstance(raw.get("endpoints", []), list):
            raise ValueError("not {endpoints: [...]}")
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    try:
        return _endpoints(raw)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"{path}: a bad endpoint ({type(exc).__name__}: {exc})") from None


def _endpoints(raw: dict[str, Any]) -> list[Endpoint]:
    for e in raw.get("endpoints", []):
        if not (isinstance(e, dict) and isinstance(e.get("id"), str) and _ID_RE.match(e["id"])):
            raise ValueError(f"not an endpoint id: {e.get('id') if isinstance(e, dict) else e!r}")
    return [endpoint_from(e) for e in raw.get("endpoints", [])]


def replace_endpoints(home: Path, endpoints: list[Endpoint]) -> None:
    """Write the endpoints file (the caller holds the webhooks lock): a cluster node's copy of
    the cluster's endpoints (``gitmem.cluster.webhook_state``)."""
    _save(home, endpoints)


def _save(home: Path, endpoints: list[Endpoint]) -> None:
    rows = [{**e.public(), "secret": e.secret, "resumes": e.resumes} for e in endpoints]
    d = events.webhooks_dir(home)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    d.chmod(0o700)
    events.write_atomic(_file(home), json.dumps({"endpoints": rows}, indent=1).encode())


def get_endpoint(home: Path, endpoint_id: str) -> Endpoint:
    for e in load_endpoints(home):
        if e.id == endpoint_id:
            return e
    raise NotFoundError(f"no webhook endpoint {endpoint_id!r}")


def validate_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an http(s) URL without credentials (InvalidInputError else)."""
    if not isinstance(url, str) or len(url) > MAX_URL or any(ord(c) < 33 for c in url):
        raise InvalidInputError("a webhook URL is an http:// or https:// URL of at most 2048 characters")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInputError(f"invalid webhook URL {url!r}: use http:// or https:// with a host")
    if parts.username is not None or parts.password is not None:
        raise InvalidInputError("a webhook URL carries no credentials: the signature authenticates it")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise InvalidInputError(f"invalid port in webhook URL {url!r}") from None
    return parts.scheme, parts.hostname, port


def destination(url: str, allow_private: bool) -> tuple[str, int]:
    """The address to connect to for ``url``: its host resolved once, every address checked
    (ForbiddenError for a non-global one unless ``allow_private``)."""
    _scheme, host, port = validate_url(url)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise InvalidInputError(f"webhook host {host!r} does not resolve: {exc}") from None
    addresses = [str(info[4][0]) for info in infos]
    for a in addresses:
        ip = ipaddress.ip_address(a.split("%", 1)[0])
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if not ip.is_global and not allow_private:
            raise ForbiddenError(
                f"webhook host {host!r} resolves to {a}, not a public address: "
                "add the endpoint with allow_private to deliver there (docs/webhooks.md#ssrf)"
            )
    return addresses[0], port


def add_endpoint(
    home: Path,
    url: str,
    *,
    types: list[str] | None = None,
    allow_private: bool = False,
    description: str = "",
) -> tuple[Endpoint, str]:
    """Configure an endpoint; returns it and its secret (shown this once). Its deliveries start
    with the events after this moment."""
    destination(url, allow_private)
    chosen = tuple(dict.fromkeys(types)) if types else events.EVENT_TYPES
    unknown = [t for t in chosen if t not in events.EVENT_TYPES]
    if unknown:
        raise InvalidInputError(f"unknown event type {unknown[0]!r}: use {', '.join(events.EVENT_TYPES)}")
    if len(description) > 500 or any(ord(c) < 32 for c in description):
        raise InvalidInputError("a description is at most 500 characters, without control characters")
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")
    endpoint = Endpoint(
        id=f"whep_{new_ulid()}",
        url=url,
        secret=secret,
        events=chosen,
        allow_private=allow_private,
        description=description,
        created_at=now_rfc3339(),
    )
    with events.locked(events.webhooks_dir(home) / ".lock"):
        current = load_endpoints(home)
        if len(current) >= MAX_ENDPOINTS:
            raise InvalidInputError(f"at most {MAX_ENDPOINTS} webhook endpoints")
        events.workspace_ids_unlocked(home)
        events.begin(home, endpoint.id)  # the cursor first: no event is sent from before it
        _save(home, [*current, endpoint])
    return endpoint, secret


def remove_endpoint(home: Path, endpoint_id: str) -> None:
    with events.locked(events.webhooks_dir(home) / ".lock"):
        current = load_endpoints(home)
        if not any(e.id == endpoint_id for e in current):
            raise NotFoundError(f"no webhook endpoint {endpoint_id!r}")
        _save(home, [e for e in current if e.id != endpoint_id])
    events.state_path(home, endpoint_id).unlink(missing_ok=True)


def resume_endpoint(home: Path, endpoint_id: str) -> Endpoint:
    """Start a stopped endpoint again, from the event it stopped at (nothing was skipped)."""
    with events.locked(events.webhooks_dir(home) / ".lock"):
        current = load_endpoints(home)
        found = [e for e in current if e.id == endpoint_id]
        if not found:
            raise NotFoundError(f"no webhook endpoint {endpoint_id!r}")
        resumed = Endpoint(**{**found[0].__dict__, "resumes": found[0].resumes + 1})
        _save(home, [resumed if e.id == endpoint_id else e for e in current])
    return resumed


# ---------------------------------------------------------------------- signing and sending
def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix("whsec_"))


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` of ``<msg_id>.<timestamp>.<body>`` (Standard Webhooks)."""
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(_key(secret), signed, hashlib.sha256).digest()).decode("ascii")


def body_of(event: dict[str, Any]) -> bytes:
    return json.dumps(event, separators=(",", ":"), sort_keys=True).encode("utf-8")


class DeliveryError(Exception):
    """A delivery that did not get a 2xx (the message says why)."""


class _PinnedHTTPS(http.client.HTTPSConnection):
    """HTTPS to an address resolved and checked before, verifying the certificate for the host."""

    def __init__(self, host: str, address: str, port: int, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        sock = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(sock, server_hostname=self.host)  # type: ignore[attr-defined]


def post(endpoint: Endpoint, event: dict[str, Any], *, timeout: float = 10.0) -> int:
    """One signed POST of ``event``; its HTTP status (DeliveryError for anything but 2xx)."""
    scheme, host, _port = validate_url(endpoint.url)
    try:
        address, port = destination(endpoint.url, endpoint.allow_private)
    except (ForbiddenError, InvalidInputError) as exc:
        raise DeliveryError(str(exc)) from None
    body = body_of(event)
    ts = int(time.time())
    parts = urlsplit(endpoint.url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": event["id"],
        "webhook-timestamp": str(ts),
        "webhook-signature": sign(endpoint.secret, event["id"], ts, body),
        "host": host if port in (80, 443) else f"{host}:{port}",
    }
    conn: http.client.HTTPConnection
    if scheme == "https":
        conn = _PinnedHTTPS(host, address, port, timeout)
    else:
        conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        conn.request("POST", target, body=body, headers=headers)
        reply = conn.getresponse()
        reply.read(64 * 1024)
        status = reply.status
    except (OSError, http.client.HTTPException) as exc:
        raise DeliveryError(f"{type(exc).__name__}: {exc}") from None
    finally:
        conn.close()
    if not 200 <= status < 300:
        raise DeliveryError(f"HTTP {status}")
    return status


def is_stopped(endpoint: Endpoint, state: events.State) -> bool:
    """Stopped by the worker's failure limit and not enabled since."""
    return bool(state.get("stopped_at")) and int(state.get("stopped_resumes", 0)) >= endpoint.resumes


def describe(home: Path, endpoint: Endpoint) -> dict[str, Any]:
    """An endpoint as ``list`` shows it: its settings (no secret) and its delivery state:
    ``status`` ``active``, ``retrying`` (failures since the last success; ``next_attempt_at``)
    or ``stopped`` (after the worker's failure limit; ``enable`` resumes where it stopped)."""
    state = events.load_state(home, endpoint.id)
    stopped = state.get("stopped_at")
    if is_stopped(endpoint, state):
        status = "stopped"
    elif state.get("failures"):
        status = "retrying"
    else:
        status = "active"
    out = endpoint.public()
    out.update(
        {
            "status": status,
            "failures": int(state.get("failures", 0)),
            "delivered": int(state.get("delivered", 0)),
            "last_delivered_at": state.get("last_delivered_at"),
            "last_error": state.get("last_error"),
            "stopped_at": stopped if status == "stopped" else None,
        }
    )
    return out


def test_event(home: Path) -> dict[str, Any]:
    """The event ``webhook test`` sends: type ``gitmem.webhook_test``, a fresh id."""
    return events.envelope(
        f"wevt_{new_ulid()}", "gitmem.webhook_test", now_rfc3339(), {}, events.workspace_ids(home)
    )


@dataclass(frozen=True)
class Policy:
    """How deliveries are paced (``GITMEM_WEBHOOK_*`` variables override the defaults)."""

    concurrency: int = 4
    interval: float = 1.0
    timeout: float = 10.0
    backoff: float = 1.0
    max_backoff: float = 600.0
    max_failures: int = 12

    @classmethod
    def from_environment(cls) -> Policy:
        values: dict[str, Any] = {}
        for name, cast in (
            ("concurrency", int),
            ("interval", float),
            ("timeout", float),
            ("backoff", float),
            ("max_backoff", float),
            ("max_failures", int),
        ):
            raw = env(f"GITMEM_WEBHOOK_{name.upper()}")
            if raw is not None:
                try:
                    value = cast(raw)
                except ValueError:
                    raise InvalidInputError(
                        f"GITMEM_WEBHOOK_{name.upper()}={raw!r} is not a number"
                    ) from None
                if value <= 0:
                    raise InvalidInputError(f"GITMEM_WEBHOOK_{name.upper()} must be positive")
                values[name] = value
        return cls(**values)


def endpoint_lock(home: Path, endpoint_id: str) -> contextlib.AbstractContextManager[bool]:
    """The lock a delivery run holds (non-blocking: yields False when another process runs it)."""
    path = events.state_path(home, endpoint_id)
    return events.locked(path.with_name(f".{endpoint_id}.lock"), blocking=False)


class SharedCursors(Protocol):
    """Cursors kept beside the local file, shared by the processes that may deliver a store (a
    cluster's nodes, ``gitmem.cluster.webhook_state``): only the store's home delivers it, from
    the cursor the last delivery of that store left, whichever node made it."""

    def delivers(self, store_id: str) -> bool:
        """This process delivers the store's version events now."""
        ...

    def load(self, endpoint_id: str, state: events.State) -> None:
        """Put the shared cursors of the stores delivered here into ``state``."""
        ...

    def save(self, endpoint_id: str, store_id: str, cursor: dict[str, Any] | None) -> bool:
        """Record a store's cursor (None: forgotten); False when this process may no longer."""
        ...

    def journal(self, endpoint_id: str) -> list[dict[str, Any]] | None:
        """The shared store-level entries this process sends the endpoint now, in order (None:
        this workspace's own journal and cursor)."""
        ...

    def journal_sent(self, endpoint_id: str, entry_id: str) -> bool:
        """Record a shared entry as sent; False when this process may no longer send it."""
        ...


def deliver_pending(
    home: Path,
    ep: Endpoint,
    policy: Policy,
    stopping: Callable[[], bool],
    shared: SharedCursors | None = None,
) -> None:
    """One run of an endpoint: the events after its cursor, posted one at a time, in order, the
    cursor saved after each 2xx; the first failure ends the run and schedules the next attempt
    (exponential backoff; a stop after ``policy.max_failures`` in a row). The caller holds the
    endpoint's lock (:func:`endpoint_lock`). ``stopping`` ends the run between two events.
    ``shared``: the stores' cursors are read from it at the start and written to it after each
    event, and only the stores it ``delivers`` are delivered (checked again before each event)."""
    if not any(e.id == ep.id for e in load_endpoints(home)):
        return  # removed since the round began
    if not events.state_path(home, ep.id).is_file():
        events.begin(home, ep.id)
    state = events.load_state(home, ep.id)
    if is_stopped(ep, state):
        return
    if state.get("stopped_at"):  # enabled since it stopped
        state.pop("stopped_at")
        state["failures"] = 0
        state.pop("next_attempt", None)
    if time.time() < float(state.get("next_attempt", 0)):
        return
    if shared is not None:
        shared.load(ep.id, state)
    ids = events.workspace_ids(home)
    cursor = events.state_path(home, ep.id)
    only = shared.delivers if shared is not None else None
    journal = shared.journal(ep.id) if shared is not None else None
    for item in events.pending(home, state, ids, frozenset(ep.events), only, journal):
        if stopping() or not cursor.is_file():  # a stop, or the endpoint was removed meanwhile
            return
        if shared is not None and item.store is not None and not shared.delivers(item.store):
            return  # moved away since the run began: its new home delivers it
        if item.event is not None:
            try:
                post(ep, item.event, timeout=policy.timeout)
            except DeliveryError as exc:
                _failed(ep, policy, home, state, str(exc))
                return
            state["failures"] = 0
            state.pop("next_attempt", None)
            state["delivered"] = int(state.get("delivered", 0)) + 1
            state["last_delivered_at"] = now_rfc3339()
        item.advance(state)
        events.save_state(home, ep.id, state)
        if (
            shared is not None
            and item.journal_id is not None
            and not shared.journal_sent(ep.id, item.journal_id)
        ):
            return  # the entry's store has another home now: it sends the rest
        store = item.store
        if (
            shared is not None
            and store is not None
            and not shared.save(ep.id, store, state["stores"].get(store))
        ):
            return  # no longer this store's home: its new home goes on from the shared cursor


def _failed(ep: Endpoint, policy: Policy, home: Path, state: events.State, error: str) -> None:
    failures = int(state.get("failures", 0)) + 1
    p = policy
    delay = min(p.max_backoff, p.backoff * 2 ** (failures - 1)) * random.uniform(0.8, 1.0)
    state.update(failures=failures, last_error=error, next_attempt=time.time() + delay)
    if failures >= p.max_failures:
        state["stopped_at"] = now_rfc3339()
        state["stopped_resumes"] = ep.resumes
        log.warning("webhooks: endpoint %s stopped after %d failures: %s", ep.id, failures, error)
    events.save_state(home, ep.id, state)


def endpoint_from(body: dict[str, Any]) -> Endpoint:
    """An endpoint from its stored form (the endpoints file; in a cluster, PostgreSQL's copy)."""
    return Endpoint(
        id=body["id"],
        url=body["url"],
        secret=body["secret"],
        events=tuple(body.get("events") or events.EVENT_TYPES),
        allow_private=bool(body.get("allow_private")),
        description=str(body.get("description", "")),
        created_at=str(body.get("created_at", "")),
        resumes=int(body.get("resumes", 0)),
    )
