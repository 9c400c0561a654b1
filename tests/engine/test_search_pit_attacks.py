"""Attacks on search modes and point-in-time reads: scope confinement of shared vectors, forged
moments, and a redacted version read at its own moment through every read."""

from __future__ import annotations

import pytest

from gitmem.engine import past, vectors
from gitmem.errors import GitmemError, InvalidInputError, NotFoundError
from gitmem.store import Store

semantic = pytest.mark.skipif(not vectors.available(), reason="the extra 'semantic' is not installed")


@semantic
def test_vectors_shared_by_blob_never_cross_scopes(store: Store) -> None:
    store.write("/a.md", "the weather is mild")
    store.write("/secret.md", "Bob cannot eat peanuts or shellfish", scope="other")
    store.write("/same.md", "Bob cannot eat peanuts or shellfish", scope="third")  # the same blob
    for mode in ("semantic", "hybrid"):
        store.search("food allergies", mode=mode, scope="third")  # embeds the shared blob
        hits = store.search("food allergies", mode=mode)
        assert all(h.path == "/a.md" for h in hits), mode
        assert [h.path for h in store.search("food allergies", mode=mode, scope="other")][:1] == [
            "/secret.md"
        ]


@pytest.mark.parametrize(
    "moment",
    [
        "",
        "   ",
        "@",
        "@-5",
        "@9999999999999",
        "2026-13-01",
        "yesterday",
        "memver_xyz",
        "0" * 39,
        "' OR 1=1 --",
        "a\x00b",
    ],
)
def test_forged_moments_are_refused_cleanly(store: Store, moment: str) -> None:
    store.write("/a.md", "x")
    before = store.versions()
    with pytest.raises((InvalidInputError, NotFoundError)):
        store.list(at=moment)
    with pytest.raises((InvalidInputError, NotFoundError)):
        store.read("/a.md", at=moment)
    with pytest.raises((InvalidInputError, NotFoundError)):
        store.search("x", at=moment)
    assert store.versions() == before  # nothing written


def test_moments_of_another_scope_or_unknown_commits_are_not_found(store: Store) -> None:
    store.write("/a.md", "main text")
    store.write("/b.md", "other text", scope="other")
    other_version = store.versions(scope="other")[0]
    with pytest.raises(NotFoundError):
        store.list(at=other_version.id)  # a version of another scope: not on main's line
    with pytest.raises(NotFoundError):
        store.list(at=str(other_version.commit))
    with pytest.raises(NotFoundError):
        store.list(at="@0", scope="empty-scope")
    with pytest.raises(InvalidInputError):
        store.list(at="@0", scope="../main")


def test_a_redacted_version_reads_redacted_through_every_read_at_its_moment(store: Store) -> None:
    store.write("/s.md", "pin 90210 for the gate")
    secret = store.versions()[0]
    store.write("/s.md", "pin rotated")
    store.redact(secret.id, reason="pin", actor="user:admin")
    at = secret.id
    assert "90210" not in (store.read("/s.md", at=at).content or "")
    assert all("90210" not in (m.content or "") for m in store.list(at=at, with_content=True))  # type: ignore[union-attr]
    assert store.search("90210", at=at) == []
    assert "90210" not in store.diff_at("@0", at)
    import io

    from gitmem.engine import transfer

    buf = io.BytesIO()
    transfer.export_jsonl(store.core, buf, at=at)
    assert b"90210" not in buf.getvalue()


def test_mode_errors_are_gitmem_errors(store: Store) -> None:
    store.write("/a.md", "x")
    for bad in ("", "LEXICAL", "semantic ", None):
        with pytest.raises(GitmemError):
            store.search("x", mode=bad)  # type: ignore[arg-type]
    assert past.parse_time("@12") == 12
