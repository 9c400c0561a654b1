from __future__ import annotations

import subprocess
import sys

from gitmem.store import Store


def test_write_then_read_roundtrip(store: Store) -> None:
    v = store.write("/notes/todo.md", "buy milk\n", actor="user:alice")
    assert v is not None and v.operation == "created"
    m = store.read("/notes/todo.md")
    assert m.content == "buy milk\n"
    assert m.version_id == v.id and m.memory_id == v.memory_id


def test_python_dash_m_gitmem_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "gitmem", "--help"], capture_output=True, text=True, check=True
    )
    assert "Memory stores for AI agents" in out.stdout
