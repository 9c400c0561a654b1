"""Webhook deliveries of ``gitmem serve`` and its admin API (docs/webhooks.md).

:class:`Deliveries` is a background worker: every ``interval`` seconds (and when woken) it hands
each endpoint that is neither busy, waiting out a backoff nor stopped to a bounded thread pool.
One run of an endpoint reads the events after its cursor (:func:`gitmem.engine.events.pending`),
posts them one at a time, in order, and moves the cursor after each 2xx; the first failure ends
the run and schedules the next after an exponential backoff (``backoff * 2**(failures-1)``, at
most ``max_backoff``, with jitter); after ``max_failures`` failures in a row the endpoint stops
(``webhook list`` shows it; ``webhook enable`` resumes it at the event it stopped on). A run
holds a lock on the endpoint's state file, so several server processes never deliver one
endpoint twice at once. Writes never wait for any of it: the events are read from history.

The admin API (admin tokens only; the secret is in the answer of the create call alone)::

    GET    /v1/gitmem/webhooks                     list
    POST   /v1/gitmem/webhooks                     {"url", "events"?, "description"?, "allow_private"?}
    DELETE /v1/gitmem/webhooks/{endpoint_id}
    POST   /v1/gitmem/webhooks/{endpoint_id}/enable
    POST   /v1/gitmem/webhooks/{endpoint_id}/test  one signed test event, sent now

``allow_private`` through the API needs ``GITMEM_WEBHOOK_ALLOW_PRIVATE=1`` in the server's
environment (a remote admin cannot point deliveries at the server's own network otherwise).
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from starlette.routing import Route

from gitmem import config, webhooks
from gitmem.errors import ForbiddenError, InvalidInputError
from gitmem.server.anthropic_api import AnthropicApi, Call, Json

log = logging.getLogger("gitmem.webhooks")


class Deliveries:
    def __init__(
        self, home: Path, policy: webhooks.Policy | None = None, shared: webhooks.SharedCursors | None = None
    ) -> None:
        self.home = home
        self.shared = shared  # a cluster node's (docs/cluster.md#webhooks)
        self.policy = policy or webhooks.Policy.from_environment()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(self.policy.concurrency, thread_name_prefix="gitmem-webhook")
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="gitmem-webhooks", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        """Stop: a delivery in flight finishes (and its cursor is saved), no other starts."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
        self._pool.shutdown(wait=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                endpoints = webhooks.load_endpoints(self.home)
            except Exception:  # noqa: BLE001 - a bad file is logged, and read again next round
                log.exception("webhooks: endpoints not read")
                endpoints = []
            for ep in endpoints:
                with self._lock:
                    if ep.id in self._busy:
                        continue
                    self._busy.add(ep.id)
                self._pool.submit(self._guarded, ep)
            self._wake.wait(self.policy.interval)
            self._wake.clear()

    def _guarded(self, ep: webhooks.Endpoint) -> None:
        try:
            with webhooks.endpoint_lock(self.home, ep.id) as mine:
                if mine:
                    self._run(ep)
        except Exception:  # noqa: BLE001 - one endpoint's trouble must not stop the worker
            log.exception("webhooks: endpoint %s", ep.id)
        finally:
            with self._lock:
                self._busy.discard(ep.id)

    def _run(self, ep: webhooks.Endpoint) -> None:
        webhooks.deliver_pending(self.home, ep, self.policy, self._stop.is_set, self.shared)


class WebhooksApi:
    """The admin API (module docstring); the Anthropic API's tokens, errors and threading."""

    def __init__(self, api: AnthropicApi, deliveries: Deliveries) -> None:
        self.api = api
        self.deliveries = deliveries

    @property
    def home(self) -> Path:
        return self.api.pool.home

    def routes(self) -> list[Route]:
        e = self.api.endpoint
        base = "/v1/gitmem/webhooks"
        return [
            Route(base, e(self.list), methods=["GET"]),
            Route(base, e(self.create, with_body=True), methods=["POST"]),
            Route(base + "/{endpoint_id}", e(self.remove), methods=["DELETE"]),
            Route(base + "/{endpoint_id}/enable", e(self.enable, with_body=True), methods=["POST"]),
            Route(base + "/{endpoint_id}/test", e(self.test, with_body=True), methods=["POST"]),
        ]

    @staticmethod
    def _admin(call: Call) -> None:
        if not call.token.admin:
            raise ForbiddenError(f"token {call.token.id} is not an admin token: webhooks need one")

    def list(self, call: Call) -> Json:
        self._admin(call)
        return {"data": [webhooks.describe(self.home, ep) for ep in webhooks.load_endpoints(self.home)]}

    def create(self, call: Call) -> Json:
        self._admin(call)
        try:
            data = json.loads(call.raw or b"{}")
        except ValueError:
            raise InvalidInputError("the body is not JSON") from None
        if not isinstance(data, dict) or set(data) - {"url", "events", "description", "allow_private"}:
            raise InvalidInputError("the body is {url, events?, description?, allow_private?}")
        url, types = data.get("url"), data.get("events")
        if not isinstance(url, str):
            raise InvalidInputError("url: a string is required")
        if types is not None and not (isinstance(types, list) and all(isinstance(t, str) for t in types)):
            raise InvalidInputError("events: a list of event types")
        allow_private = data.get("allow_private", False)
        if not isinstance(allow_private, bool):
            raise InvalidInputError("allow_private: true or false")
        if allow_private and config.env("GITMEM_WEBHOOK_ALLOW_PRIVATE") != "1":
            raise ForbiddenError(
                "allow_private through the API needs GITMEM_WEBHOOK_ALLOW_PRIVATE=1 on the server "
                "(or `gitmem webhook add --allow-private` on its machine)"
            )
        description = data.get("description", "")
        if not isinstance(description, str):
            raise InvalidInputError("description: a string")
        ep, secret = webhooks.add_endpoint(
            self.home, url, types=types, allow_private=allow_private, description=description
        )
        self.deliveries.wake()
        return {**webhooks.describe(self.home, ep), "secret": secret}

    def remove(self, call: Call) -> Json:
        self._admin(call)
        webhooks.remove_endpoint(self.home, call.params["endpoint_id"])
        return {"id": call.params["endpoint_id"], "type": "webhook_endpoint_deleted"}

    def enable(self, call: Call) -> Json:
        self._admin(call)
        ep = webhooks.resume_endpoint(self.home, call.params["endpoint_id"])
        self.deliveries.wake()
        return webhooks.describe(self.home, ep)

    def test(self, call: Call) -> Json:
        self._admin(call)
        ep = webhooks.get_endpoint(self.home, call.params["endpoint_id"])
        event = webhooks.test_event(self.home)
        try:
            status = webhooks.post(ep, event, timeout=self.deliveries.policy.timeout)
        except webhooks.DeliveryError as exc:
            return {"id": event["id"], "delivered": False, "error": str(exc)}
        return {"id": event["id"], "delivered": True, "status": status}
