"""CLI conventions (docs: README "CLI"): --version, -h, help COMMAND, grouped help, metavars, usage
errors as Error:/JSON, did-you-mean, one JSON shape, --nl, TSV headers, '-' content, descriptions
kept, relative dates, colour only on a terminal (a pty) and never with NO_COLOR, logging, completion,
and what session sync tells scripts."""

from __future__ import annotations

import datetime as dt
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner, Result

import gitmem
from gitmem.cli.app import app
from gitmem.cli.versions import parse_time
from gitmem.store import Store


def gm(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input, env=env)


def test_version_and_short_help() -> None:
    assert gm("--version").stdout == f"gitmem {gitmem.__version__}\n"
    short, long = gm("-h"), gm("--help")
    assert short.exit_code == 0 and short.stdout == long.stdout
    assert gm("write", "-h").stdout.startswith("Usage: gitmem write [OPTIONS] STORE PATH [TEXT]\n")


def test_help_command_is_the_commands_help() -> None:
    assert gm("help", "session", "sync").stdout == gm("session", "sync", "--help").stdout
    r = gm("help", "sesion")
    assert (
        r.exit_code == 3
        and r.stderr
        == "Error: command 'sesion' does not exist; did you mean 'session' or 'revert-session' or 'completion'?\n"
    )


def test_grouped_help_with_whole_descriptions_and_readable_metavars() -> None:
    out = gm("--help").stdout
    sections = [line for line in out.splitlines() if line and not line.startswith(" ") and line.endswith(":")]
    assert sections == [
        "Options:", "Memories:", "History:", "Stores:", "Sessions:", "Audit and redaction:", "Git:",
        "Server:", "Help:",
    ]  # fmt: skip
    assert "..." not in out.split("Memories:")[1]  # no description cut off
    start = gm("session", "start", "-h").stdout
    assert "--store STORE" in start and "<list[str]>" not in start and "<str>" not in start
    assert "--since DATE" in gm("log", "-h").stdout


def test_usage_errors_plain_and_json() -> None:
    r = gm("ls", "notes", "--bogus")
    assert r.exit_code == 2
    assert r.stderr == (
        "Usage: gitmem ls [OPTIONS] STORE [PREFIX]\nTry 'gitmem ls -h' for help.\nError: No such option: --bogus\n"
    )
    r = gm("ls", "notes", "--bogus", "--json")
    assert r.exit_code == 2
    assert json.loads(r.stderr) == {"error": {"type": "usage", "message": "No such option: --bogus"}}


def test_unknown_scope_and_store_exit_3_with_did_you_mean(store: Store) -> None:
    store.write("/a.md", "a", scope="team")
    r = gm("ls", "notes", "--scope", "teams")
    assert (
        r.exit_code == 3
        and r.stderr == "Error: scope 'teams' does not exist in store 'notes'; did you mean 'team'?\n"
    )
    assert gm("log", "notes", "-s", "nosuch").exit_code == 3
    assert gm("search", "notes", "a", "-s", "nosuch").exit_code == 3
    r = gm("ls", "notse")
    assert r.exit_code == 3 and r.stderr.endswith("; did you mean 'notes'?\n")


def test_one_json_shape_for_writes_no_null(store: Store) -> None:
    first = json.loads(gm("write", "notes", "/a.md", "x", "--json").stdout)
    again = json.loads(gm("write", "notes", "/a.md", "x", "--json").stdout)
    assert set(first) == set(again) and first["type"] == again["type"] == "version"
    assert again["id"] == first["id"]  # nothing changed: the version it is at
    edit = json.loads(gm("edit", "notes", "/a.md", "--replace", "x", "x", "--json").stdout)
    assert edit["id"] == first["id"]


def test_nl_streams_and_tsv_header(store: Store) -> None:
    store.write("/a.md", "a")
    store.write("/b.md", "b")
    lines = gm("log", "notes", "--nl").stdout.splitlines()
    assert [json.loads(line)["path"] for line in lines] == ["/b.md", "/a.md"]
    assert [json.loads(line)["path"] for line in gm("--nl", "ls", "notes").stdout.splitlines()] == [
        "/a.md",
        "/b.md",
    ]
    assert gm("ls", "notes").stdout.splitlines()[0] == "PATH\tSIZE\tUPDATED\tDESCRIPTION"


def test_content_starting_with_a_dash(store: Store) -> None:
    assert gm("write", "notes", "/a.md", "--", "-starts with a dash").exit_code == 0
    assert store.read("/a.md").content == "-starts with a dash"
    assert gm("write", "notes", "/b.md", "--text", "--also").exit_code == 0
    assert store.read("/b.md").content == "--also"


def test_rewrite_keeps_description_unless_told(store: Store) -> None:
    gm("write", "notes", "/a.md", "one", "-d", "Editor preferences")
    gm("write", "notes", "/a.md", "two")
    memory = store.read("/a.md")
    assert memory.description == "Editor preferences" and memory.content.endswith("two")
    gm("write", "notes", "/a.md", "three", "-d", "")
    assert store.read("/a.md").description is None


def test_relative_dates() -> None:
    now = dt.datetime(2026, 3, 10, 15, 30, tzinfo=dt.UTC)
    assert parse_time("yesterday", "--since", now) == dt.datetime(2026, 3, 9, tzinfo=dt.UTC)
    assert parse_time("2 weeks ago", "--since", now) == now - dt.timedelta(days=14)
    assert parse_time("3.days.ago", "--since", now) == now - dt.timedelta(days=3)
    assert parse_time("2026-01-31", "--since", now) == dt.datetime(2026, 1, 31, tzinfo=dt.UTC)


def test_log_since_yesterday_includes_todays_versions(store: Store) -> None:
    store.write("/a.md", "a")
    assert len(gm("log", "notes", "--since", "yesterday", "--nl").stdout.splitlines()) == 1
    assert gm("log", "notes", "--until", "2 days ago", "--nl").stdout == ""


def test_store_show_prints_every_setting_and_no_none(store: Store) -> None:
    out = gm("store", "show", "notes").stdout
    assert "None" not in out
    for key in ("limits:", "retention:", "acl:", "require_trailers:", "archived_at:      -"):
        assert key in out


def _gitmem_env(workspace: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}
    return {**env, "GITMEM_HOME": str(workspace), "TERM": "xterm", **extra}


def _on_a_pty(args: list[str], env: dict[str, str]) -> str:
    """Run gitmem with stdout and stderr on a pseudo-terminal; what it printed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gitmem", *args], stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    out = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    proc.wait()
    os.close(leader)
    return out.decode()


def test_colour_on_a_terminal_none_in_pipes_or_with_no_color(store: Store, workspace: Path) -> None:
    v1 = store.write("/a.md", "old\n")
    v2 = store.write("/a.md", "new\n")
    assert v1 is not None and v2 is not None
    on_tty = _on_a_pty(["diff", "notes", v2.id], _gitmem_env(workspace))
    assert "\x1b[32m+new" in on_tty and "\x1b[31m-old" in on_tty
    err_tty = _on_a_pty(
        ["read", "notes", "/nope.md", "--scope", "main", "--json", "--home", str(workspace)],
        _gitmem_env(workspace),
    )
    assert "not_found" in err_tty
    missing = _on_a_pty(["ls", "nosuchstore"], _gitmem_env(workspace))
    assert "\x1b[31m\x1b[1mError:" in missing or "\x1b[1m\x1b[31mError:" in missing
    no_color = _on_a_pty(["diff", "notes", v2.id], _gitmem_env(workspace, NO_COLOR="1"))
    assert "\x1b[" not in no_color and "+new" in no_color
    piped = subprocess.run(
        [sys.executable, "-m", "gitmem", "diff", "notes", v2.id],
        capture_output=True,
        text=True,
        env=_gitmem_env(workspace),
    )
    assert "\x1b[" not in piped.stdout and "+new" in piped.stdout


def test_verbose_logs_writes_silent_by_default(store: Store, workspace: Path) -> None:
    env = _gitmem_env(workspace)
    quiet = subprocess.run(
        [sys.executable, "-m", "gitmem", "write", "notes", "/a.md", "x"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert quiet.returncode == 0 and quiet.stderr == ""
    loud = subprocess.run(
        [sys.executable, "-m", "gitmem", "-v", "write", "notes", "/b.md", "x"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert loud.stderr.startswith("gitmem: gitmem.write: created /b.md memver_")
    debug = subprocess.run(
        [sys.executable, "-m", "gitmem", "write", "notes", "/c.md", "x"],
        capture_output=True,
        text=True,
        env={**env, "GITMEM_LOG": "debug"},
    )
    assert "gitmem.write: created /c.md" in debug.stderr


def test_completion_installs_and_completes(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "HOME": str(home), "SHELL": "/bin/bash"}
    # the shell named, not detected: typer looks for a shell among the parent processes, and a run
    # started from a daemon (a CI runner, a detached job) has none ("Shell None is not supported")
    r = subprocess.run(
        [sys.executable, "-m", "gitmem", "--install-completion", "bash"],
        capture_output=True,
        text=True,
        env={**env, "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"},
    )
    assert r.returncode == 0, r.stderr
    assert "gitmem" in (home / ".bashrc").read_text() or any(home.rglob("*gitmem*"))
    script = subprocess.run(
        [sys.executable, "-m", "gitmem", "completion", "bash"], capture_output=True, text=True, env=env
    )
    assert "_GITMEM_COMPLETE" in script.stdout
    done = subprocess.run(
        [sys.executable, "-m", "gitmem"],
        capture_output=True,
        text=True,
        env={**env, "_GITMEM_COMPLETE": "complete_bash", "COMP_WORDS": "gitmem sess", "COMP_CWORD": "1"},
    )
    assert "session" in done.stdout


def test_session_sync_exit_codes_and_mass_delete(store: Store, tmp_path: Path) -> None:
    for i in range(4):
        store.write(f"/m{i}.md", f"memory {i}\n")
    gitmem.create_store("ref", home=store.path.parent.parent).close()
    with gitmem.open_store("ref", store.path.parent.parent) as ref:
        ref.write("/rule.md", "be brief\n")
    root = tmp_path / "mnt"
    start = gm("session", "start", "--store", "notes", "--store", "ref:ro", "--root", str(root), "--json")
    sid = json.loads(start.stdout)["id"]
    assert json.loads(gm("session", "list", "--status", "active", "--json").stdout)[0]["id"] == sid
    assert gm("session", "list", "--status", "ended", "--json").stdout == "[]\n"
    # a refused edit in a read-only mount: exit 6, and the file has the store's content again
    os.chmod(root / "ref", 0o755)
    os.chmod(root / "ref/rule.md", 0o644)
    (root / "ref/rule.md").write_text("be verbose\n")
    r = gm("session", "sync", sid, "--json")
    assert r.exit_code == 6 and json.loads(r.stdout)["mounts"][1]["refused"][0]["path"] == "/rule.md"
    assert (root / "ref/rule.md").read_text() == "be brief\n"
    assert gm("session", "sync", sid).exit_code == 0
    # deleting most of a mount needs --allow-mass-delete: exit 1, nothing deleted
    for i in range(3):
        (root / f"notes/m{i}.md").unlink()
    r = gm("session", "sync", sid, "--json")
    assert r.exit_code == 1 and "--allow-mass-delete" in json.loads(r.stdout)["mounts"][0]["error"]
    assert len(store.list("/")) == 4
    assert gm("session", "sync", sid, "--allow-mass-delete").exit_code == 0
    assert len(store.list("/")) == 1
    # files under /.gitmem/ and hard links are reported, not synced
    (root / "notes/.gitmem/notes.md").write_text("hidden\n")
    os.link(root / "notes/m3.md", root / "notes/linked.md")
    report = json.loads(gm("session", "sync", sid, "--json").stdout)["mounts"][0]
    refused = {i["path"]: i["reason"] for i in report["refused"]}
    assert "/.gitmem/notes.md" in refused and "hard link" in refused["/linked.md"]
    assert [m.path for m in store.list("/")] == ["/m3.md"]


def test_import_excludes_skips_dotfiles_and_refuses_bad_utf8(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "docs"
    (src / "build").mkdir(parents=True)
    (src / "a.md").write_text("keep\n")
    (src / "debug.log").write_text("noise\n")
    (src / "build" / "out.md").write_text("generated\n")
    (src / ".env").write_text("API_KEY=secret\n")
    r = gm("import", "notes", str(src), "--exclude", "*.log", "--exclude", "build/")
    assert r.exit_code == 0, r.stderr
    assert [m.path for m in store.list("/")] == ["/a.md"]
    assert gm("import", "notes", str(src), "--include-hidden", "-x", "*.log", "-x", "build/").exit_code == 0
    assert [m.path for m in store.list("/")] == ["/.env", "/a.md"]
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"path": "/x.md", "content": "caf\xe9"}\n')
    r = gm("import", "notes", str(bad))
    assert r.exit_code == 2 and r.stderr.endswith("line 1: not valid UTF-8 (byte 33)\n")
    assert "/x.md" not in [m.path for m in store.list("/")]
