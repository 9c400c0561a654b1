"""The ``make demo`` tour: the real ``gitmem`` CLI in a fresh temporary workspace, as a shell transcript.

It creates a store, writes and edits memories in two scopes, shows the history with ``gitmem log``
and with plain ``git log`` on the bare store, restores an old version and reads it back. Every
command is checked; the tour exits non-zero at the first surprise. ``--keep`` keeps the workspace.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ENV: dict[str, str] = {}


def run(*args: str, expect: int = 0, git: bool = False, echo: str | None = None) -> str:
    """Echo ``$ gitmem ARGS`` (or ``$ git ARGS``), run it, print its output, check its exit code.

    ``echo`` is a line piped to the command's standard input (shown as ``echo LINE | gitmem ...``).
    """
    shown = ["git" if git else "gitmem", *args]
    pipe = f"echo {shlex.quote(echo)} | " if echo is not None else ""
    print("$ " + pipe + shlex.join(shown), flush=True)
    cmd = ["git", *args] if git else [sys.executable, "-m", "gitmem", *args]
    stdin = echo + "\n" if echo is not None else None
    proc = subprocess.run(cmd, env=ENV, input=stdin, capture_output=True, text=True)
    sys.stdout.write(proc.stdout)
    if proc.stdout and not proc.stdout.endswith("\n"):
        sys.stdout.write("\n")  # `gitmem read` adds no newline; keep the transcript tidy
    sys.stdout.write(proc.stderr)
    print(flush=True)
    if proc.returncode != expect:
        sys.exit(f"demo failed: {shown[0]} {args[0]} exited {proc.returncode}, expected {expect}")
    return proc.stdout


def version_of(output: str) -> str:
    """The version id in a write's output line (``created /path  memver_...  mem_...``)."""
    return next(word for word in output.split() if word.startswith("memver_"))


def check(condition: bool, what: str) -> None:
    if not condition:
        sys.exit(f"demo failed: {what}")


def tour(home: Path) -> None:
    ENV.update(os.environ, GITMEM_HOME=str(home), GIT_CONFIG_NOSYSTEM="1", NO_COLOR="1")
    ENV.pop("GITMEM_ACTOR", None)
    ENV.pop("GITMEM_SESSION", None)
    run("store", "create", "notes", "--description", "What our agents remember about the team")
    first = version_of(
        run(
            "write", "notes", "/prefs/editor.md", "-", "--description", "Editor preferences",
            "--actor", "user:alice", echo="Alice edits with vim.",
        )
    )  # fmt: skip
    run(
        "write",
        "notes",
        "/handbook.md",
        "-",
        "--scope",
        "team",
        "--actor",
        "user:bob",
        echo="Deploys on Tuesdays.",
    )
    edit = version_of(
        run("edit", "notes", "/prefs/editor.md", "--replace", "vim", "helix", "--session", "sesn_demo")
    )
    run("edit", "notes", "/handbook.md", "--insert", "1", "No deploys on Fridays.", "--scope", "team")
    run("create", "notes", "/prefs/editor.md", "again?", expect=4)  # create never overwrites
    run("ls", "notes")
    run("ls", "notes", "--scope", "team")
    check("helix" in run("read", "notes", "/prefs/editor.md"), "the edit is not in the memory")
    run("log", "notes")
    store = str(home / "stores" / "notes.git")
    fmt = "%h %an %s%n%(trailers:key=Gitmem-Version,key=Gitmem-Operation,key=Gitmem-Actor,key=Gitmem-Session)"
    log = run("--git-dir", store, "log", f"--format={fmt}", "main", git=True)
    check(f"Gitmem-Version: {first}" in log, "git log does not show the version trailers")
    run("diff", "notes", edit)
    run("restore", "notes", first, "--actor", "user:alice")
    restored = run("read", "notes", "/prefs/editor.md")
    check(restored.endswith("Alice edits with vim.\n"), "the restored memory does not have the old content")
    check(
        len(run("log", "notes", "/prefs/editor.md").splitlines()[1:]) == 3,
        "expected 3 versions of the memory",
    )
    # --- gitmem serve step (issue 18): the lead adds it here: serve answering one Anthropic SDK call.


def main() -> None:
    keep = "--keep" in sys.argv[1:]
    with tempfile.TemporaryDirectory(prefix="gitmem-demo-") as tmp:
        home = Path(tmp) / "workspace"
        tour(home)
        if keep:
            kept = Path(tempfile.mkdtemp(prefix="gitmem-demo-kept-"))
            subprocess.run(["cp", "-a", str(home), str(kept)], check=True)
            print(f"workspace kept in {kept / 'workspace'} (export GITMEM_HOME={kept / 'workspace'})")
    print("demo finished: every step behaved as expected")


if __name__ == "__main__":
    main()
