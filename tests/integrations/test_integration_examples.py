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


def test_dream_example_runs_end_to_end_and_skips_the_live_part_without_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("uvicorn")
    for name in ("ANTHROPIC_API_KEY", "GITMEM_DREAM_BASE_URL", "GITMEM_DREAM_API_KEY"):
        monkeypatch.setenv(name, "")  # recorded, so that what the example sets is undone after it
        monkeypatch.delenv(name)
    assert load("dream").main(["--home", str(tmp_path / "ws")]) == 0
    out = capsys.readouterr().out
    assert ": completed, 800 input / 80 output tokens" in out
    assert "proposed deleted /prefs/coffee-again.md: The two coffee notes say the same thing" in out
    assert "accepted prop_" in out and ": accepted" in out
    assert "/facts/office.md: The office is in Lisbon." in out
    assert "/prefs/coffee-again.md" not in out.split("accepted prop_", 1)[1]
    assert out.rstrip().endswith("skipped: ANTHROPIC_API_KEY is not set")
