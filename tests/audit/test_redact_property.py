"""Property: after any writes and redactions, every version keeps its metadata, and every version
that was not redacted keeps its content."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gitmem
from gitmem.audit import redact
from gitmem.errors import ForbiddenError, NotFoundError

CONTENTS = ["alpha\n", "beta\n", "secret-1\n", "secret-2\n", "gamma\n"]
PATHS = ["/a.md", "/d/b.md", "/d/e/c.md"]
_names = itertools.count()

ops = st.lists(
    st.one_of(
        st.tuples(st.just("write"), st.sampled_from(PATHS), st.sampled_from(CONTENTS)),
        st.tuples(st.just("redact"), st.integers(0, 20), st.just("")),
    ),
    min_size=3,
    max_size=7,
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_writes_and_redactions_keep_everything_else(
    workspace: Path, program: list[tuple[str, object, str]]
) -> None:
    with gitmem.create_store(f"prop{next(_names)}", home=workspace) as store:
        content: dict[str, str] = {}
        redacted: set[str] = set()
        meta = {}
        for op, arg, text in program:
            if op == "write":
                try:
                    v = store.write(str(arg), text, actor="user:p")
                except ForbiddenError:
                    assert text in {content[r] for r in redacted}  # redacted content is never written back
                    continue
                if v is not None:
                    content[v.id] = text
                    meta[v.id] = (v.memory_id, v.path, v.operation, v.actor, v.created_at)
                continue
            candidates = sorted(vid for vid in content if vid not in redacted)
            if not candidates:
                continue
            target = candidates[int(arg) % len(candidates)]  # type: ignore[call-overload]
            try:
                r = redact.redact(store.core, target, reason="prop")
            except ForbiddenError:
                continue  # it was (or a copy was) a head: nothing changed
            assert target in r.versions
            redacted.update(r.versions)
        for vid, text in content.items():
            v = store.version(vid)
            assert (v.memory_id, v.path, v.operation, v.actor, v.created_at) == meta[vid]
            if vid in redacted:
                assert v.redaction is not None
                with pytest.raises(NotFoundError):
                    store.read(v.path, version=vid)
            else:
                assert v.redaction is None
                assert store.read(v.path, version=vid).content == text


SCOPES = ["main", "alice", "team"]
multi_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("write"), st.sampled_from(SCOPES), st.sampled_from(PATHS), st.sampled_from(CONTENTS)
        ),
        st.tuples(st.just("redact"), st.just(""), st.integers(0, 30), st.just("")),
        st.tuples(st.just("pattern"), st.sampled_from(SCOPES + [""]), st.just(0), st.just("")),
    ),
    min_size=4,
    max_size=10,
)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(multi_ops)
def test_multi_scope_writes_and_redactions(
    workspace: Path, program: list[tuple[str, str, object, str]]
) -> None:
    """Across scopes: one redaction covers every scope holding the content; every version keeps its
    metadata; the others keep their content; redacted bytes are nowhere in the store; verify holds."""
    from gitmem.audit.verify import verify
    from tests.secret_scan import scan_store

    with gitmem.create_store(f"multi{next(_names)}", home=workspace) as store:
        content: dict[tuple[str, str], str] = {}  # (scope, version) -> text
        redacted: set[str] = set()
        gone: set[str] = set()  # texts redacted everywhere
        meta = {}
        for op, scope, arg, text in program:
            if op == "write":
                try:
                    v = store.write(str(arg), text, scope=scope, actor="user:p")
                except ForbiddenError:
                    assert text in gone  # redacted content is never written back
                    continue
                if v is not None:
                    content[(scope, v.id)] = text
                    meta[(scope, v.id)] = (v.memory_id, v.path, v.operation, v.actor, v.created_at)
                continue
            if op == "pattern":
                try:
                    r = redact.redact_pattern(store.core, r"secret-\d", reason="prop", scope=scope or None)
                except (ForbiddenError, gitmem.errors.InvalidInputError, NotFoundError):
                    continue
                redacted.update(r.versions)
                gone.update(t for t in CONTENTS if t.startswith("secret-"))  # remembered: refused from now on
                continue
            candidates = sorted(k for k in content if k[1] not in redacted)
            if not candidates:
                continue
            s, target = candidates[int(arg) % len(candidates)]  # type: ignore[call-overload]
            try:
                r = redact.redact(store.core, target, reason="prop")
            except ForbiddenError:
                continue  # a head (in some scope) holds it: nothing changed
            text = content[(s, target)]
            same = {k for k, t in content.items() if t == text}
            assert {k[1] for k in same} <= set(r.versions) | redacted  # every scope holding it
            assert {k[0] for k in same if k[1] in r.versions} <= set(r.scopes)
            redacted.update(r.versions)
            gone.add(text)
        for (scope, vid), text in content.items():
            v = store.version(vid)
            assert (v.memory_id, v.path, v.operation, v.actor, v.created_at) == meta[(scope, vid)]
            if vid in redacted:
                assert v.redaction is not None
            else:
                assert v.redaction is None
                assert store.read(v.path, version=vid, scope=scope).content == text
        # verify first: a purge a reader kept from checkpointing the index's WAL is retried by it
        # (docs/redaction.md: the purge marker), so the scan then sees the store as verify left it
        assert verify(store.core).ok
        for text in gone:
            found = scan_store(store.path, text.encode())
            assert found == [], (found, store.core.index.purge_pending())
