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
