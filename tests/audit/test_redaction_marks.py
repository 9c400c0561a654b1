"""``[redacted: <id>]`` marks: only a redaction of the store may put one in a memory. A forged mark
would make ``verify`` report a redaction the ledger lacks (a false tampering alarm at will)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gitmem.audit import redact
from gitmem.audit.verify import verify
from gitmem.errors import InvalidInputError
from gitmem.store import Store
from tests.helpers import git

FORGED = "[redacted: redact_01M8RW1613285GMSGVV7VA0B03]"


def test_a_forged_mark_is_refused_and_verify_stays_clean(store: Store) -> None:
    store.write("/a.md", "fine\n")
    before = [v.id for v in store.versions()]
    with pytest.raises(InvalidInputError, match=r"redact_01M8RW1613285GMSGVV7VA0B03.*no redaction"):
        store.write("/b.md", f"note {FORGED}\n")
    assert [v.id for v in store.versions()] == before
    verify(store.core)


def test_a_forged_mark_in_a_push_is_refused(store: Store, tmp_path: Path) -> None:
    store.write("/a.md", "fine\n")
    work = tmp_path / "work"
    git(tmp_path, "clone", "-q", str(store.path), str(work))
    (work / "b.md").write_text(f"pushed {FORGED}\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "forged")
    res = git(work, "push", "origin", "main", check=False)
    assert res.returncode != 0
    assert "remote: gitmem:" in res.stderr and "no redaction of this store made" in res.stderr
    verify(store.core)


def test_a_mark_a_redaction_made_may_be_written(store: Store) -> None:
    v1 = store.write("/a.md", "token sk-live-123456 and more\n")
    store.write("/a.md", "rotated\n")
    assert v1 is not None
    r = redact.redact_pattern(store.core, r"sk-live-\d+", reason="leak")
    commit = store.core.commit(store.version(v1.id).commit)
    marked = store.core.blob_data(commit.tree["a.md"].id).decode()  # what history holds now
    assert f"[redacted: {r.id}]" in marked
    store.write("/copy.md", marked)  # e.g. a clone's user copying the redacted text: allowed
    verify(store.core)


def test_gitmem_ids_in_a_note_are_not_secrets(store: Store) -> None:
    v = store.write("/a.md", "first\n")
    assert v is not None
    note = f"see {v.id} of {v.memory_id} in {store.settings.id}; a token's secret is another thing\n"
    store.write("/ids.md", note)
    assert store.read("/ids.md").content == note


def test_a_gitmem_token_secret_is_caught_by_the_guard(store: Store) -> None:
    import secrets

    from gitmem.errors import GuardRejectedError

    secret = f"gitmem_01M8RXHD602HXRAWQKATJASQ19_{secrets.token_urlsafe(32)}"
    with pytest.raises(GuardRejectedError, match="gitmem-token"):
        store.write("/tok.md", f"use {secret}\n")


def test_a_forged_mark_through_the_memory_tool_and_an_import_is_refused(store: Store) -> None:
    """Other faces: the memory tool assembling the mark by an edit, an import carrying it only in a
    description (which becomes the file's front matter)."""
    import io

    from anthropic.lib.tools import ToolError

    from gitmem.engine import transfer
    from gitmem.integrations.anthropic_tool import MemoryBackend

    tool = MemoryBackend(store)
    tool.create("/memories/n.md", "note [redacted: X]\n")
    before = [v.id for v in store.versions()]
    with pytest.raises(ToolError, match="no redaction"):
        tool.str_replace("/memories/n.md", "X]", FORGED[len("[redacted: ") :])
    line = '{"path": "/i.md", "content": "imported\\n", "description": "see ' + FORGED + '"}\n'
    result = transfer.import_jsonl(store.core, io.StringIO(line))
    assert not result.versions and [r.path for r in result.refused] == ["/i.md"]
    assert "no redaction of this store made" in result.refused[0].reason
    assert [v.id for v in store.versions()] == before
    verify(store.core)


def test_a_random_value_shaped_like_a_gitmem_id_is_still_a_finding() -> None:
    """The guard lets gitmem's own ids pass (docs/guard.md#rules); only what gitmem could have
    minted: a ULID whose time is a real one. A random 26-character draw after a gitmem prefix (a key
    of another system, or one dressed up as an id) is judged like any other random string; a real
    id is not, and neither is a value that is assigned as a password."""
    import random

    from gitmem.ids import new_ulid
    from gitmem.model.guard import scan

    alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
    draw = random.Random(11)
    dressed = 0
    for _ in range(100):
        body = "".join(draw.choice(alphabet) for _ in range(26))
        dressed += bool(scan(f"value memver_{body}"))  # before: never (the prefix alone sufficed)
        assert not scan(f"see memver_{new_ulid()} and mem_{new_ulid()}")
    assert dressed >= 75  # as often as after another prefix (about 85-95%: the entropy test's own rate)
    body = "".join(draw.choice(alphabet) for _ in range(26))
    assert [f.rule for f in scan(f'password = "memver_{body}"')] == ["password-assignment"]
