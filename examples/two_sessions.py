"""Two agent sessions sharing a memory store: the second one sees what the first one learned.

The "agent" is a plain Python function with file tools only: it reads the mounted directory,
edits files, and never calls gitmem. The session turns its edits into versions tagged with the
session; a read-only reference store is mounted beside it. Run: ``python examples/two_sessions.py``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import gitmem
from gitmem import sessions


def agent(mounts: Path, task: str) -> str:
    """A scripted agent: reads its memories, does the task, writes down what it learned."""
    memory = mounts / "assistant"
    prefs = memory / "user" / "preferences.md"
    known = prefs.read_text() if prefs.exists() else ""
    style = (mounts / "handbook" / "style.md").read_text().strip()
    if "tea" in known:
        answer = f"{task}: making tea, as you like it. ({style})"
        (memory / "scratch.md").unlink(missing_ok=True)  # tidy up what is no longer needed
    else:
        answer = f"{task}: coffee or tea? You said tea; noted. ({style})"
        prefs.parent.mkdir(parents=True, exist_ok=True)
        prefs.write_text("- prefers tea, no sugar\n")
        (memory / "scratch.md").write_text("temporary notes\n")
    log = memory / "log.md"
    log.write_text((log.read_text() if log.exists() else "") + f"- {task}\n")
    return answer


def run_session(home: Path, task: str) -> tuple[str, sessions.SyncReport, str]:
    s = sessions.start_session(
        ["assistant", "handbook:ro"],
        root=home / "mnt",
        home=home,
        instructions={"assistant": "Keep user preferences under /user/."},
    )
    prompt = (Path(s.root) / sessions.PROMPT_FILE).read_text()
    answer = agent(Path(s.root), task)
    ended = sessions.end_session(s.id, home=home)
    return answer, ended.sync, prompt


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        with gitmem.create_store(
            "assistant", description="What the assistant knows about its user", home=home
        ):
            pass
        with gitmem.create_store("handbook", description="House rules", home=home) as handbook:
            handbook.write("/style.md", "Be brief.\n", actor="user:admin")

        answer, report, prompt = run_session(home, "morning drink")
        print("session 1:", answer)
        stores = [line[3:] for line in prompt.splitlines() if line.startswith("## ") and "How" not in line]
        print("  system prompt lists:", ", ".join(stores))
        for v in report.mounts[0].versions:
            print(f"  saved {v.operation} {v.path} ({v.session})")

        answer, report, _ = run_session(home, "afternoon drink")
        print("session 2:", answer)
        for v in report.mounts[0].versions:
            print(f"  saved {v.operation} {v.path} ({v.session})")

        with gitmem.open_store("assistant", home=home) as store:
            print("history of /log.md:", [f"{v.operation} by {v.actor}" for v in store.versions("/log.md")])
            print("preferences:", (store.read("/user/preferences.md").content or "").strip())
    sys.stdout.flush()


if __name__ == "__main__":
    main()
