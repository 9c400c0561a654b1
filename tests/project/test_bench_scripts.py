"""Every benchmark script in bench/ has ``--quick`` (its smoke run) and is run by ``make bench-all``,
as README.md and bench/README.md say: a script added without either fails here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def scripts() -> list[Path]:
    """The runnable scripts of bench/ (its modules, such as common.py, have no ``__main__``)."""
    found = [p for p in sorted((ROOT / "bench").glob("*.py")) if '__name__ == "__main__"' in p.read_text()]
    assert len(found) >= 13, found
    return found


def makefile_scripts() -> list[str]:
    """The scripts ``make bench-all`` runs: its ``BENCH_SCRIPTS`` (``name.py`` or ``name.py,--arg``)."""
    text = (ROOT / "Makefile").read_text()
    match = re.search(r"^BENCH_SCRIPTS := ((?:.*\\\n)*.*)$", text, re.M)
    assert match is not None
    assert re.search(r"^bench-all: .*\n\t.*for s in \$\(BENCH_SCRIPTS\)", text, re.M)
    return match.group(1).replace("\\\n", " ").split()


def test_bench_all_runs_every_benchmark_script() -> None:
    listed = {s.split(",")[0] for s in makefile_scripts()} | {
        "locomo_eval.py"
    }  # LoCoMo: when its data is set
    assert "$${GITMEM_LOCOMO_DIR:+locomo_eval.py}" in (ROOT / "Makefile").read_text()
    missing = [p.name for p in scripts() if p.name not in listed]
    assert not missing, f"make bench-all does not run {missing}"
    assert not listed - {p.name for p in scripts()}, "make bench-all names a script bench/ does not hold"


def test_every_benchmark_script_takes_quick() -> None:
    procs = {
        p.name: subprocess.Popen(
            [sys.executable, str(p), "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for p in scripts()
    }
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, (name, err)
        assert "--quick" in out, f"bench/{name} --help lists no --quick"
