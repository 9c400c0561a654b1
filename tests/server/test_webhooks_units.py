"""The webhook pieces without a server (docs/webhooks.md): the SSRF rule, the signature as
``standardwebhooks`` checks it, the journal after a torn line, bad files, the CLI."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from standardwebhooks import Webhook, WebhookVerificationError
from typer.testing import CliRunner

import gitmem
from gitmem import webhooks
from gitmem.cli.app import app
from gitmem.engine import events
from gitmem.errors import ConfigError, ForbiddenError, InvalidInputError

runner = CliRunner()


@pytest.mark.parametrize(
    "host",
    ["127.0.0.1", "10.1.2.3", "192.168.0.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "[::1]",
     "[::ffff:127.0.0.1]", "[fe80::1]", "[fc00::1]", "localhost"],
)  # fmt: skip
def test_a_non_public_address_is_refused_unless_allowed(host: str) -> None:
    url = f"http://{host}:8080/hook"
    with pytest.raises(ForbiddenError, match="not a public address"):
        webhooks.destination(url, allow_private=False)
    address, port = webhooks.destination(url, allow_private=True)
    assert port == 8080 and address


def test_a_public_address_passes_and_bad_urls_are_refused() -> None:
    assert webhooks.destination("https://93.184.216.34/x", False) == ("93.184.216.34", 443)
    for bad in (
        "file:///etc/passwd",
        "http://user:pw@93.184.216.34/",
        "gopher://x/",
        "http://",
        "http://a b/",
    ):
        with pytest.raises(InvalidInputError):
            webhooks.destination(bad, True)


def test_the_signature_is_standard_webhooks() -> None:
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"type":"event","id":"wevt_1"}'
    ts = int(time.time())
    headers = {"webhook-id": "wevt_1", "webhook-timestamp": str(ts)}
    headers["webhook-signature"] = webhooks.sign(secret, "wevt_1", ts, body)
    assert Webhook(secret).verify(body, headers) == {"type": "event", "id": "wevt_1"}
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b"1", b"2"), headers)
    with pytest.raises(WebhookVerificationError):  # another id, same body and signature
        Webhook(secret).verify(body, {**headers, "webhook-id": "wevt_2"})


def test_a_torn_journal_line_costs_no_later_event(workspace: Path) -> None:
    ep, _secret = webhooks.add_endpoint(workspace, "http://127.0.0.1:9/hook", allow_private=True)
    journal = workspace / "webhooks" / events.JOURNAL_FILE
    with gitmem.create_store("before the crash", home=workspace) as s:
        before = s.id
    assert (journal.stat().st_mode & 0o777) == 0o600
    with journal.open("ab") as f:
        f.write(b'{"seq": 2, "id": "wevt_torn", "ty')  # a crash mid-append
    with gitmem.create_store("after the crash", home=workspace) as s:
        after = s.id
    state = events.load_state(workspace, ep.id)
    got = [p.event for p in events.pending(workspace, state, {}, frozenset(events.EVENT_TYPES)) if p.event]
    assert [(e["data"]["type"], e["data"]["id"]) for e in got] == [
        ("memory_store.created", before),
        ("memory_store.created", after),
    ]


def test_bad_files_are_config_errors_and_ids_cannot_leave_the_directory(workspace: Path) -> None:
    ep, _ = webhooks.add_endpoint(workspace, "http://127.0.0.1:9/hook", allow_private=True)
    path = workspace / "webhooks" / events.ENDPOINTS_FILE
    good = path.read_text()
    raw = json.loads(good)
    raw["endpoints"][0]["id"] = "../../escape"
    path.write_text(json.dumps(raw))
    with pytest.raises(ConfigError, match="not an endpoint id"):
        webhooks.load_endpoints(workspace)
    path.write_text("{not json")
    with pytest.raises(ConfigError):
        webhooks.load_endpoints(workspace)
    path.write_text(good)
    events.state_path(workspace, ep.id).write_text("[]")
    with pytest.raises(ConfigError, match="not a webhook cursor"):
        events.load_state(workspace, ep.id)


def test_the_cli_adds_lists_and_removes_and_never_shows_a_secret_twice(workspace: Path) -> None:
    home = ["--home", str(workspace)]
    refused = runner.invoke(app, ["webhook", "add", "http://127.0.0.1:9/hook", *home])
    assert refused.exit_code == 6 and "not a public address" in refused.output
    assert (
        runner.invoke(
            app, ["webhook", "add", "http://127.0.0.1:9/", "--event", "nope", "--allow-private", *home]
        ).exit_code
        == 2
    )
    added = runner.invoke(
        app, ["webhook", "add", "http://127.0.0.1:9/hook", "--allow-private", "--json", *home]
    )
    assert added.exit_code == 0, added.output
    created = json.loads(added.stdout)
    secret, ep_id = created["secret"], created["id"]
    assert secret.startswith("whsec_")
    listed = runner.invoke(app, ["webhook", "list", "--json", *home])
    assert json.loads(listed.stdout)[0]["id"] == ep_id and secret not in listed.output
    assert secret not in runner.invoke(app, ["webhook", "list", *home]).output
    d = workspace / "webhooks"
    assert oct(d.stat().st_mode & 0o777) == "0o700"
    for f in d.rglob("*"):
        if f.is_file():
            assert f.stat().st_mode & 0o077 == 0, f
            if f.name != events.ENDPOINTS_FILE:
                assert secret.encode() not in f.read_bytes(), f  # only the endpoints file holds it
    test = runner.invoke(app, ["webhook", "test", ep_id, *home])  # port 9: nobody listens
    assert test.exit_code == 1 and "not delivered" in test.output
    assert runner.invoke(app, ["webhook", "remove", ep_id, *home]).exit_code == 0
    assert runner.invoke(app, ["webhook", "remove", ep_id, *home]).exit_code == 3
    assert not events.state_path(workspace, ep_id).exists()
    assert os.listdir(d / "state") == [] or all(n.startswith(".") for n in os.listdir(d / "state"))
