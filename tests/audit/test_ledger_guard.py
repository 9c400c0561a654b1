"""The secret guard against the audit ledger (docs/guard.md#text-in-the-audit-ledger). The guard screens what a write stores (content,
paths, commit messages: docs/guard.md). The ledger (``refs/gitmem/ledger``) is git history that no
redaction may rewrite (it is hash-chained, checkpointed and witnessed: docs/transparency.md), and it
travels to every clone and every ``/git`` reader. Free text callers put into it (a reviewer's
rejection reason, a redaction's reason, a store's description) must be screened as a write is:
refused, or never stored in the clear. (A red-team probe first, tests/probe.)"""

from __future__ import annotations

import contextlib
import json
import random
import string
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import gitmem
from gitmem.audit import review
from gitmem.engine import ledger
from gitmem.errors import GitmemError, GuardRejectedError, InvalidInputError, NotFoundError
from gitmem.model.caller import Caller


def _fake_token(seed: int) -> str:
    """A GitHub-token-shaped string made at run time (as tests/conformance/kit.py makes them)."""
    rng = random.Random(seed)
    alphabet = string.ascii_letters + string.digits
    while True:
        body = "".join(rng.choice(alphabet) for _ in range(36))
        if (
            any(c.isdigit() for c in body)
            and any(c.isupper() for c in body)
            and any(c.islower() for c in body)
        ):
            return "ghp_" + body


SECRET = _fake_token(7)


def _ledger(repo: Path) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(repo), "log", "-p", "--format=%B", "refs/gitmem/ledger"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def _reject(s: gitmem.Store) -> None:
    agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
    s.write("/draft.md", "draft\n", caller=agent)
    (p,) = s.proposals()
    s.reject(p.id, reviewer="user:lead", reason=f"leaks the deploy token {SECRET}")


def _redact(s: gitmem.Store) -> None:
    v = s.write("/old.md", "stale note\n", actor="user:alice")
    s.write("/old.md", "fresh note\n", actor="user:alice")
    s.redact(v.id, reason=f"it was next to {SECRET}")


def _describe(s: gitmem.Store) -> None:
    s.update_settings(actor="user:alice", description=f"deploys with {SECRET}")


@pytest.mark.parametrize(
    "how", [_reject, _redact, _describe], ids=["reject-reason", "redact-reason", "description"]
)
def test_a_secret_never_lands_in_the_ledger(workspace: Path, how: Callable[[gitmem.Store], None]) -> None:
    with gitmem.create_store("notes", home=workspace) as s:
        s.write("/keep.md", "kept\n", actor="user:alice")
        with pytest.raises(GitmemError):
            s.write("/leak.md", f"token {SECRET}\n", actor="user:alice")  # the guard holds for memories
        with contextlib.suppress(GitmemError):  # refused: the guarantee holds
            how(s)
        repo = s.path
    assert SECRET not in _ledger(repo)


def _entries(s: gitmem.Store) -> int:
    return len(ledger.entries(s.core))


def _proposal(s: gitmem.Store) -> str:
    agent = Caller(actor="user:agent", session="sesn_agent1", review=True, rights=frozenset({"write"}))
    s.write("/draft.md", "draft\n", caller=agent)
    (p,) = s.proposals()
    return p.id


def test_a_refused_reason_names_its_field_and_changes_nothing(store: gitmem.Store) -> None:
    pid = _proposal(store)
    before = _entries(store)
    with pytest.raises(GuardRejectedError) as got:
        store.reject(pid, reviewer="user:lead", reason=f"leaks {SECRET}")
    assert got.value.message.startswith("reason: refused by the store's guard: secret github-token")
    assert SECRET not in got.value.message and "nothing was written" in got.value.message
    (p,) = store.proposals()
    assert (p.status, p.decisions, _entries(store)) == ("open", [], before)
    with pytest.raises(GuardRejectedError):  # an accept's reason is kept with the decision
        store.accept(pid, reviewer="user:lead", reason=f"ok {SECRET}")
    assert [q.status for q in store.proposals()] == ["open"]
    with pytest.raises(NotFoundError):
        store.read("/draft.md")
    store.reject(pid, reviewer="user:lead", reason="not needed")  # a clean reason: recorded as given
    assert ledger.entries(store.core)[-1].data["reason"] == "not needed"


def test_an_erasure_reason_is_screened(store: gitmem.Store) -> None:
    pid = _proposal(store)
    before = _entries(store)
    with pytest.raises(GuardRejectedError, match="^reason: "):
        review.erase(store.core, pid, reviewer="user:lead", reason=f"it held {SECRET}")
    assert _entries(store) == before and not (store.core.gitmem_dir / review.ERASE_FILE).exists()
    assert [q.status for q in store.proposals()] == ["open"]


def test_a_refused_redaction_reason_rewrites_nothing(store: gitmem.Store) -> None:
    v = store.write("/old.md", "stale note\n", actor="user:alice")
    store.write("/old.md", "fresh note\n", actor="user:alice")
    before = _entries(store)
    with pytest.raises(GuardRejectedError, match="^reason: "):
        store.redact(v.id, reason=f"it was next to {SECRET}")
    with pytest.raises(GuardRejectedError, match="^reason: "):
        store.redact_pattern("stale", reason=f"it was next to {SECRET}")
    assert _entries(store) == before and store.version(v.id).redaction is None


def test_flag_mode_refuses_ledger_text_it_would_store_in_a_memory(store: gitmem.Store) -> None:
    store.update_settings(actor="user:alice", guard={"secrets": "flag", "pii": "flag"})
    flagged = store.write("/leak.md", f"token {SECRET}\n", actor="user:alice")  # a memory: kept, flagged
    assert flagged.id
    pid = _proposal(store)
    with pytest.raises(GuardRejectedError, match="^reason: .*secret github-token"):
        store.reject(pid, reviewer="user:lead", reason=f"leaks {SECRET}")
    with pytest.raises(GuardRejectedError, match="^reason: .*pii email"):  # pii: flag refuses too
        store.reject(pid, reviewer="user:lead", reason="ask alice.smith@example.com")
    with pytest.raises(GuardRejectedError, match="^description: "):
        store.update_settings(actor="user:alice", description=f"deploys with {SECRET}")
    assert SECRET not in _ledger(store.path)


def test_secrets_off_screens_nothing(store: gitmem.Store) -> None:
    store.update_settings(actor="user:alice", guard={"secrets": "off"})
    store.update_settings(actor="user:alice", description=f"deploys with {SECRET}")  # the store's choice
    assert store.settings.description.endswith(SECRET)


def test_settings_values_are_screened_before_anything_is_saved(store: gitmem.Store) -> None:
    before, description = _entries(store), store.settings.description
    with pytest.raises(GuardRejectedError, match="^metadata.deploy: "):
        store.update_settings(actor="user:alice", metadata={"deploy": SECRET})
    with pytest.raises(GuardRejectedError, match="^description: "):
        store.update_settings(actor="user:alice", description=f"x {SECRET}", metadata={"a": "b"})
    assert (_entries(store), store.settings.description, store.settings.metadata) == (before, description, {})


def test_a_new_store_with_a_secret_in_its_name_or_description_is_not_made(workspace: Path) -> None:
    for kwargs in ({"description": f"uses {SECRET}"}, {"metadata": {"k": SECRET}}):
        with pytest.raises(GuardRejectedError):
            gitmem.create_store("notes", home=workspace, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(GuardRejectedError, match="^name: "):
        gitmem.create_store(f"notes {SECRET}", home=workspace)
    assert gitmem.list_stores(home=workspace) == []


def test_the_ledger_itself_refuses_unscreened_caller_text(store: gitmem.Store) -> None:
    """The last line: a caller that forgot to screen cannot append the text either."""
    before = _entries(store)
    data = {
        "id": "prop_x",
        "scope": "main",
        "proposer": "user:a",
        "session": None,
        "paths": [],
        "reason": SECRET,
    }
    with pytest.raises(GuardRejectedError, match="proposal_rejected entry's reason"):
        ledger.append(store.core, "proposal_rejected", data, actor="user:lead")
    assert _entries(store) == before and SECRET not in _ledger(store.path)


def test_a_hand_edit_and_an_allow_entry_are_withheld_from_the_ledger(store: gitmem.Store) -> None:
    """What was never screened (a hand edit of gitmem.yaml, the old value in a later diff, the
    guard's own allow-list, which holds the very text it allows) is withheld, not recorded."""
    path = store.core.settings_path
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("Test notes", f"Test notes {SECRET}"), encoding="utf-8")
    store.core.reload_settings()
    store.update_settings(actor="user:alice", description="clean again")  # the diff's old value
    store.update_settings(actor="user:alice", guard={"secrets": "reject", "allow": [SECRET]})
    store.write("/allowed.md", f"token {SECRET}\n", actor="user:alice")  # the allow-list works
    log = _ledger(store.path)
    assert SECRET not in log
    withheld = [e for e in ledger.entries(store.core) if "withheld by the guard" in json.dumps(e.data)]
    assert len(withheld) >= 3, [e.data for e in ledger.entries(store.core)]


def test_clean_text_is_scanned_once_per_operation(
    store: gitmem.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The append's last-line check finds the reason its caller screened among the texts found
    clean: it is not scanned a second time (the real scan, counted)."""
    from gitmem.engine import ledger_text

    pid = _proposal(store)
    reason = "superseded by the plan in /plans/q3.md"
    scanned: list[str] = []
    real = ledger_text.scan

    def counting(text: str, *args: Any, **kwargs: Any) -> Any:
        scanned.append(text)
        return real(text, *args, **kwargs)

    monkeypatch.setattr(ledger_text, "scan", counting)
    store.reject(pid, reviewer="user:lead", reason=reason)
    assert scanned.count(reason) == 1
    assert ledger.entries(store.core)[-1].data["reason"] == reason


def test_reasons_over_limits_are_refused_before_the_guard(store: gitmem.Store) -> None:
    v = store.write("/old.md", "stale\n", actor="user:alice")
    store.write("/old.md", "fresh\n", actor="user:alice")
    with pytest.raises(InvalidInputError, match="1-1024"):
        store.redact(v.id, reason="x" * 2000)
