"""The ``make demo`` tour runs end to end, and each headline step did what it shows.

The transcript is parsed into commands (``$ ...``), their output and their ``[exit N]`` lines, and
each step's commands are checked by what they printed, not only by the tour's exit code.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

DEMO = Path(__file__).resolve().parents[2] / "examples" / "demo.py"


@dataclass(frozen=True)
class Step:
    command: str
    output: str
    code: int | None  # None: the transcript does not show it (the tour checked it was 0)


# Only a hang guard, never a speed check: the tour takes about 20 s on a quiet machine and took over
# 180 s with both cores saturated; a machine that busy must still pass (the speed target of the
# first hour is measured from a clean clone, docs/performance.md).
HANG_GUARD_S = 1800


def run_demo(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp))  # its workspace lands here, to see it deleted (or kept)
    return subprocess.run(
        [sys.executable, str(DEMO), *args], env=env, capture_output=True, text=True, timeout=HANG_GUARD_S
    )


def parse(transcript: str) -> list[Step]:
    steps: list[Step] = []
    command: str | None = None
    lines: list[str] = []

    def flush() -> None:
        if command is not None:
            body = "\n".join(lines).strip("\n")
            m = re.search(r"\n?\[exit (-?\d+)\]$", body)
            code = int(m.group(1)) if m else None
            steps.append(Step(command, body[: m.start()] if m else body, code))

    for line in transcript.splitlines():
        if line.startswith("$ ") or line.startswith("=== "):
            flush()
            command, lines = (line[2:] if line.startswith("$ ") else None), []
        else:
            lines.append(line)
    flush()
    return steps


def one(steps: list[Step], pattern: str, nth: int = 0) -> Step:
    found = [s for s in steps if re.search(pattern, s.command)]
    assert len(found) > nth, f"no command matching {pattern!r} (#{nth}) in the transcript"
    return found[nth]


def test_demo_tour_shows_every_headline_feature(tmp_path: Path) -> None:
    proc = run_demo(tmp_path / "tmp")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.endswith("demo finished: every step behaved as expected\n")
    assert list((tmp_path / "tmp").iterdir()) == []  # the workspace is gone without --keep
    steps = parse(proc.stdout)

    # 1. two sessions: the first sync saves, the second keeps its text as a conflict copy (exit 4)
    a = one(steps, r"^gitmem session sync sesn_agent_a$")
    assert a.code == 0 and "modified /prefs/drinks.md" in a.output
    b = one(steps, r"^gitmem session sync sesn_agent_b$")
    assert b.code == 4
    assert "conflict /prefs/drinks.md: changed in the store since this mount's base" in b.output
    assert one(steps, r"^ls agent-b").output.splitlines()[-1] == "Alice prefers coffee now."
    assert one(steps, r"^gitmem read notes /prefs/drinks.md$").output == "Alice prefers oolong tea, no sugar."
    # agent b resolves the conflict (both texts merged, its private copy dropped) and syncs it
    assert "modified /prefs/drinks.md" in one(steps, r"^gitmem session sync sesn_agent_b$", 1).output

    # 2. revert-session: the dry run changes nothing, the real run puts both memories back
    dry = one(steps, r"^gitmem revert-session .* --dry-run$")
    assert [re.sub(r"memver_\w+", "V", line) for line in dry.output.splitlines()] == [
        "restore /prefs/drinks.md to V",
        "recreate /prefs/bob.md to V",
        "dry run: 2 memory(ies) would change",
    ]
    assert one(steps, r"^gitmem read notes /prefs/drinks.md$", 1).output.startswith("Alice prefers motor oil")
    assert one(steps, r"^gitmem revert-session notes sesn_poisoned --actor").output.endswith(
        "2 version(s) written"
    )
    assert (
        one(steps, r"^gitmem read notes /prefs/drinks.md$", 2).output
        == "Alice prefers oolong tea, no sugar; coffee some mornings."
    )
    assert one(steps, r"^gitmem read notes /prefs/bob.md$").output == "Bob drinks espresso."

    # 3 and 5. the leak is in the objects, then gone (grep -c 0, exit 1), in the audit and verified
    grep = (
        r"^git --git-dir workspace/stores/memstore_\w+\.git cat-file --batch-all-objects --batch \| grep -c"
    )
    assert one(steps, grep, 0).output == "1"
    assert (one(steps, grep, 1).output, one(steps, grep, 1).code) == ("0", 1)
    assert "purge verified" in one(steps, r"^gitmem redact notes memver_").output
    audit = one(steps, r"^gitmem audit notes --type redaction$").output.splitlines()
    assert len(audit) == 2 and re.search(
        r"\tredaction\tuser:alice\tmain\tredact_\w+\t.*customer address leaked", audit[1]
    )
    verify = one(steps, r"^gitmem verify notes$")
    assert verify.code == 0 and all(line.startswith("ok\t") for line in verify.output.splitlines())

    # 4. the hook refuses the bad push whole, with its remote: gitmem: lines
    push = one(steps, r"^git -C clone push origin main$")
    assert push.code == 1
    remote = [line.rstrip() for line in push.output.splitlines() if line.startswith("remote: gitmem:")]
    assert len(remote) == 2
    assert re.fullmatch(
        r"remote: gitmem: refs/heads/main [0-9a-f]{12}: /binary.md contains a NUL byte; memories are text",
        remote[0],
    )
    assert remote[1] == "remote: gitmem: push rejected (1 problem(s)); nothing was changed"

    # 6. fetch --purge names the rewritten scope, resyncs the clone and removes its old copy
    purged = one(steps, r"^gitmem fetch --purge ./clone$")
    assert purged.output.startswith("main: history was rewritten on the store") and purged.code == 0
    assert "of the old history from the clone (verified)" in purged.output
    clone_grep = r"^git -C clone cat-file --batch-all-objects --batch \| grep -c"
    assert [one(steps, clone_grep, i).output for i in (0, 1)] == ["1", "0"]

    # 7. a question in plain words finds the preference first
    rows = one(steps, r"^gitmem search notes").output.splitlines()
    assert rows[0].startswith("PATH\tSCORE") and rows[1].startswith("/prefs/drinks.md\t")

    # 8. the official SDK lists the store's memories through gitmem serve, which then stops cleanly
    sdk = one(steps, r"^gitmem serve --port \d+ &$").output
    assert re.search(r"^memstore_\w+ 'notes'$", sdk, re.M)
    assert "'/prefs/drinks.md'" in sdk and "'/customers/carol.md'" in sdk
    assert re.search(r"^gitmem serve stopped \(exit (0|-15)\)$", one(steps, r"^kill -TERM").output, re.M)


def test_demo_keep_prints_the_kept_workspace(tmp_path: Path) -> None:
    proc = run_demo(tmp_path / "tmp", "--keep", "--only", "search")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    kept = re.search(r"^workspace kept in (\S+) ", proc.stdout, re.M)
    assert kept is not None and Path(kept.group(1)).parent == tmp_path / "tmp"
    assert len(list((Path(kept.group(1)) / "workspace" / "stores").glob("memstore_*.git"))) == 1
    assert [s.command for s in parse(proc.stdout)][-1].startswith("gitmem search notes")
    assert "=== 1. two agents" not in proc.stdout  # --only runs just that step (and the setup)


def test_demo_only_an_unknown_step_is_refused(tmp_path: Path) -> None:
    proc = run_demo(tmp_path / "tmp", "--only", "nosuch")
    assert proc.returncode != 0 and "unknown step 'nosuch'" in proc.stderr
    assert list((tmp_path / "tmp").iterdir()) == []
