"""The Store API against a dict model: random operation sequences (hypothesis stateful)."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

import gitmem
from gitmem import Memory
from gitmem.errors import GitmemError, InvalidInputError, NotFoundError, PathConflictError
from gitmem.model.frontmatter import parse_description, set_description
from gitmem.model.versions import Version
from gitmem.store import Store

# tmpfs when there is one: the library fsyncs every write, and this test makes hundreds.
FAST_TMP = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
PATHS = ["/a", "/b", "/d", "/d/a", "/d/b", "/d/e/f"]
SCOPES = ["main", "alt"]
paths = st.sampled_from(PATHS)
scopes = st.sampled_from(SCOPES)
texts = st.text(alphabet="ab\n", max_size=6)


@dataclass
class Mem:
    content: str
    memory_id: str


@dataclass
class Model:
    live: dict[str, Mem] = field(default_factory=dict)
    versions: list[tuple[str, str, str]] = field(default_factory=list)  # (memory id, operation, path)

    def conflict(self, path: str, ignore: str | None = None) -> bool:
        return any(
            p != ignore and (p == path or p.startswith(path + "/") or path.startswith(p + "/"))
            for p in self.live
        )


class StoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.home = Path(tempfile.mkdtemp(prefix="gitmem-model-", dir=FAST_TMP))
        first = gitmem.create_store("model", home=self.home)
        # Two handles on one store, as two processes would have: each keeps its own index caches.
        self.handles = [first, gitmem.open_store(str(first.path))]
        self.current = 0
        self.models = {s: Model() for s in SCOPES}

    def teardown(self) -> None:
        for handle in self.handles:
            handle.close()
        shutil.rmtree(self.home, ignore_errors=True)

    @property
    def store(self) -> Store:
        return self.handles[self.current]

    # ------------------------------------------------------------------ helpers
    def _record(self, scope: str, v: Version | None, expect: str | None) -> None:
        if expect is None:
            assert v is None
            return
        assert v is not None and v.operation == expect and v.scope == scope
        self.models[scope].versions.append((v.memory_id, v.operation, v.path))

    # ------------------------------------------------------------------ rules
    @rule()
    def switch_handle(self) -> None:
        self.current = 1 - self.current

    @rule(scope=scopes, path=paths, text=texts)
    def write(self, scope: str, path: str, text: str) -> None:
        m = self.models[scope]
        if path in m.live:
            expect = None if m.live[path].content == text else "modified"
            v = self.store.write(path, text, scope=scope)
            self._record(scope, v, expect)
            if v is not None:
                assert v.memory_id == m.live[path].memory_id
                m.live[path].content = text
        elif m.conflict(path):
            with pytest.raises(PathConflictError):
                self.store.write(path, text, scope=scope)
        else:
            v = self.store.write(path, text, scope=scope)
            self._record(scope, v, "created")
            assert v is not None
            m.live[path] = Mem(text, v.memory_id)

    @rule(scope=scopes, path=paths, text=texts)
    def create(self, scope: str, path: str, text: str) -> None:
        m = self.models[scope]
        if m.conflict(path):
            with pytest.raises(PathConflictError):
                self.store.create(path, text, scope=scope)
            return
        v = self.store.create(path, text, scope=scope)
        self._record(scope, v, "created")
        assert all(v.memory_id != other.memory_id for other in m.live.values())
        m.live[path] = Mem(text, v.memory_id)

    @rule(scope=scopes, path=paths)
    def delete(self, scope: str, path: str) -> None:
        m = self.models[scope]
        if path not in m.live:
            with pytest.raises(NotFoundError):
                self.store.delete(path, scope=scope)
            return
        v = self.store.delete(path, scope=scope)
        self._record(scope, v, "deleted")
        assert v.memory_id == m.live.pop(path).memory_id

    @rule(scope=scopes, old=paths, new=paths)
    def rename(self, scope: str, old: str, new: str) -> None:
        m = self.models[scope]
        if old not in m.live:
            with pytest.raises(NotFoundError):
                self.store.rename(old, new, scope=scope)
        elif old == new:
            assert self.store.rename(old, new, scope=scope) is None
        elif m.conflict(new, ignore=old):
            with pytest.raises(PathConflictError):
                self.store.rename(old, new, scope=scope)
        else:
            v = self.store.rename(old, new, scope=scope)
            self._record(scope, v, "modified")
            assert v is not None and v.previous_path == old
            m.live[new] = m.live.pop(old)
            assert v.memory_id == m.live[new].memory_id

    @rule(scope=scopes, path=paths, old=st.sampled_from(["a", "b", "ab", "\n"]), new=texts)
    def str_replace(self, scope: str, path: str, old: str, new: str) -> None:
        m = self.models[scope]
        if path not in m.live:
            with pytest.raises(NotFoundError):
                self.store.str_replace(path, old, new, scope=scope)
            return
        count = m.live[path].content.count(old)
        if count != 1:
            with pytest.raises(InvalidInputError, match="not found" if count == 0 else "times"):
                self.store.str_replace(path, old, new, scope=scope)
            return
        result = m.live[path].content.replace(old, new)
        v = self.store.str_replace(path, old, new, scope=scope)
        self._record(scope, v, None if result == m.live[path].content else "modified")
        m.live[path].content = result

    @rule(scope=scopes, path=paths, line=st.integers(-1, 4), text=texts)
    def insert(self, scope: str, path: str, line: int, text: str) -> None:
        m = self.models[scope]
        if path not in m.live:
            with pytest.raises(NotFoundError):
                self.store.insert(path, line, text, scope=scope)
            return
        lines = m.live[path].content.split("\n")
        if lines[-1] == "":
            lines.pop()
        if not 0 <= line <= len(lines):
            with pytest.raises(InvalidInputError):
                self.store.insert(path, line, text, scope=scope)
            return
        new_lines = [*lines[:line], text[:-1] if text.endswith("\n") else text, *lines[line:]]
        result = "\n".join(new_lines)
        if line == len(lines) or m.live[path].content.endswith("\n"):
            result += "\n"
        v = self.store.insert(path, line, text, scope=scope)
        self._record(scope, v, None if result == m.live[path].content else "modified")
        m.live[path].content = result

    @rule(scope=scopes, path=paths, description=st.sampled_from(["", "d1", "two words", 'q"uote']))
    def describe(self, scope: str, path: str, description: str) -> None:
        m = self.models[scope]
        if path not in m.live:
            return
        result = set_description(m.live[path].content, description)
        v = self.store.write(path, m.live[path].content, scope=scope, description=description)
        self._record(scope, v, None if result == m.live[path].content else "modified")
        m.live[path].content = result

    # ------------------------------------------------------------------ checks after every step
    @invariant()
    def reads_and_listings_match_the_model(self) -> None:
        for scope, m in self.models.items():
            listed = self.store.list(scope=scope)
            assert [x.path for x in listed] == sorted(m.live)
            for item in listed:
                assert isinstance(item, Memory)
                mem = m.live[item.path]
                assert item.memory_id == mem.memory_id
                assert item.description == parse_description(mem.content)
                got = self.store.read(item.path, scope=scope)
                assert (got.content, got.memory_id) == (mem.content, mem.memory_id)
            for p in set(PATHS) - set(m.live):
                with pytest.raises(GitmemError):
                    self.store.read(p, scope=scope)

    @invariant()
    def versions_match_the_model(self) -> None:
        for scope, m in self.models.items():
            got = [(v.memory_id, v.operation, v.path) for v in self.store.versions(scope=scope)]
            assert got == list(reversed(m.versions))
            for path, mem in m.live.items():
                mine = [(x, op) for x, op, _p in reversed(m.versions) if x == mem.memory_id]
                assert [(v.memory_id, v.operation) for v in self.store.versions(path, scope=scope)] == mine


def test_store_behaves_like_the_dict_model() -> None:
    run_state_machine_as_test(
        StoreMachine,
        settings=settings(
            max_examples=40,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
