"""The memory-tool examples run (the live one is only imported: it needs an API key and network)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

pytest.importorskip("anthropic")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_scripted_memory_tool_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert load("memory_tool_scripted").main(["--home", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert "ERROR File /memories/tasks/report.md already exists" in out
    assert "ERROR Path /memories/../etc/passwd would escape /memories directory" in out
    log = out.split("$ gitmem log agent --session sesn_scripted_demo\n", 1)[1].splitlines()
    assert log.pop(0).startswith("VERSION\tTIME\t")  # the TSV header row
    assert len(log) == 6
    assert all(line.endswith("\tsesn_scripted_demo") for line in log)
    assert log[0].split("\t")[3:5] == ["deleted", "/done/report.md"]


def test_live_example_imports_and_parses_its_options() -> None:
    live = load("memory_tool_live")
    with pytest.raises(SystemExit) as exit_info:
        live.main(["--help"])
    assert exit_info.value.code == 0
