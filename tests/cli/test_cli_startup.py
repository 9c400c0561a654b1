"""A ``gitmem`` process loads only what its command needs (the tour of ``make demo`` runs ~30).

Each command's module is imported when that command runs, so ``gitmem ls`` loads no server, no
sessions, no SDK; ``--help`` and the reference still see every command. Typer's pydantic coercion is
built only for a value that needs it, and then behaves as typer's own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import typer
from typer.testing import CliRunner

from gitmem.cli import app as app_mod
from gitmem.git import intent
from gitmem.store import Store
from tests.helpers import git

PROBE = """
import json, sys
from gitmem.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.__stderr__.write("\\nMODULES " + json.dumps(sorted(sys.modules)) + "\\n")
sys.exit(code)
"""


def run_cli(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=600)
    line = next(li for li in proc.stderr.splitlines() if li.startswith("MODULES "))
    return proc, set(json.loads(line.removeprefix("MODULES ")))


def test_ls_loads_only_its_own_command_module(store: Store) -> None:
    store.write("/a.md", "hello")
    proc, modules = run_cli("ls", "notes")
    assert proc.stdout.splitlines()[1].startswith("/a.md\t"), proc.stdout + proc.stderr
    cli = {m for m in modules if m.startswith("gitmem.cli.")}
    assert cli == {"gitmem.cli.app", "gitmem.cli.common", "gitmem.cli.memories"}, cli
    for heavy in ("gitmem.server", "gitmem.sessions", "gitmem.cluster", "anthropic", "starlette", "pydantic"):
        assert not any(m == heavy or m.startswith(heavy + ".") for m in modules), heavy


def test_a_value_that_needs_coercion_still_gets_typers(store: Store) -> None:
    store.write("/a.md", "hello")
    store.write("/a.md", "hello again")
    proc, modules = run_cli("log", "notes", "--limit", "1")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 2, proc.stdout + proc.stderr
    assert "pydantic" in modules or "pydantic" not in sys.modules  # "1" went to typer's coercion
    bad, _ = run_cli("log", "notes", "--limit", "many")
    assert bad.returncode == 2 and "Invalid value for '--limit'" in bad.stderr, bad.stderr


CASES = (
    ["log", "notes", "--limit", "1"],
    ["log", "notes", "--limit", "0"],
    ["log", "notes", "-n", "x"],
    ["ls", "notes", "--depth", "1"],
    ["ls", "notes", "--scope", "main"],
    ["--json", "read", "notes", "/a.md"],
    ["read", "notes", "/a.md", "--scope", "nosuch"],
    ["log", "notes", "-h"],
    ["help", "session", "sync"],
    ["help", "nosuch"],
)


def test_lazy_coercion_answers_as_typers_own(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.write("/a.md", "hello")
    lazy = [CliRunner().invoke(app_mod.app, args) for args in CASES]
    monkeypatch.setattr(app_mod, "_lazy_coercion", lambda param: None)
    monkeypatch.setattr(app_mod, "_lazy_help_coercion", lambda cmd: None)
    own = [CliRunner().invoke(app_mod.app, args) for args in CASES]
    for args, a, b in zip(CASES, lazy, own, strict=True):
        assert (a.exit_code, a.stdout, a.stderr) == (b.exit_code, b.stdout, b.stderr), args


def test_every_command_is_listed_and_in_one_group() -> None:
    grouped = [name for _title, names in app_mod.GROUPS for name in names]
    root = typer.main.get_command(app_mod.app)
    assert sorted(root.commands) == sorted(grouped)  # loads every module: each registers what COMMANDS says
    assert sorted(app_mod.MODULE_OF) == sorted(set(grouped) - {"help", "completion"})
    listed = CliRunner().invoke(app_mod.app, ["--help"]).stdout
    assert all(f"\n  {name} " in listed for name in grouped)


def test_a_module_registering_other_commands_than_its_row_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(app_mod.COMMANDS, "search", ("search", "find"))
    root = typer.main.get_command(app_mod.app)
    with pytest.raises(RuntimeError, match=r"gitmem.cli.search registers \['search'\]"):
        root.get_command(None, "search")


def test_the_cli_reference_still_covers_every_command() -> None:
    from gitmem.cli import reference

    page = reference.render()
    for name in app_mod.MODULE_OF:
        assert f"\n## gitmem {name}\n" in page


# What `gitmem read STORE PATH` must not load: the CLI framework, the facade and what it opens a
# store with (index, ledger, journal, settings parser), the faces (docs/performance.md).
READ_SKIPS = (
    "typer",
    "click",
    "rich",
    "yaml",
    "sqlite3",
    "cryptography",
    "gitmem.store",
    "gitmem.facade.handle",
    "gitmem.engine.core",
    "gitmem.engine.index",
    "gitmem.engine.ledger",
    "gitmem.audit",
    "gitmem.server",
    "gitmem.sessions",
    "gitmem.integrations",
    "gitmem.cluster",
    "anthropic",
    "starlette",
)


def _loaded(modules: set[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_read_loads_no_cli_framework_no_facade_and_no_index(store: Store) -> None:
    store.write("/a.md", "hello")
    store.write("/b/c.md", "bye", scope="team")
    proc, modules = run_cli("read", str(store.path), "/a.md")
    assert (proc.returncode, proc.stdout) == (0, "hello"), proc.stderr
    assert [m for m in READ_SKIPS if _loaded(modules, m)] == []
    assert "gitmem.facade.headread" in modules  # the light path served it (the probe sees it)
    old = time.time() - 3600  # settings older than the cache's racy window (gitmem.config)
    os.utime(store.path / "gitmem.yaml", (old, old))
    run_cli("read", "notes", "/a.md")  # by name: the resolver keeps the settings as JSON
    proc, modules = run_cli("read", "notes", "/a.md")
    assert (proc.returncode, proc.stdout) == (0, "hello") and not _loaded(modules, "yaml")
    proc, modules = run_cli("read", "notes", "/b/c.md", "--scope", "team")
    assert (proc.returncode, proc.stdout) == (0, "bye") and not _loaded(modules, "gitmem.store")
    missing, modules = run_cli("read", "notes", "/b/c.md")  # not in main: the same error as ever
    assert (missing.returncode, missing.stdout) == (3, "")
    assert "Error: memory /b/c.md does not exist in scope 'main'" in missing.stderr
    assert not _loaded(modules, "gitmem.store")


def test_read_opens_the_store_in_full_when_its_open_has_work(store: Store) -> None:
    store.write("/a.md", "hello")
    settings = store.path / "gitmem.yaml"
    settings.write_text(settings.read_text().replace("Test notes", "Hand-edited notes"))
    proc, modules = run_cli("read", "notes", "/a.md")
    assert (proc.returncode, proc.stdout) == (0, "hello"), proc.stderr
    assert _loaded(modules, "gitmem.store") and _loaded(modules, "gitmem.engine.ledger")
    hand = [e for e in store.audit(type="settings_changed") if e.actor == "unknown"]
    assert len(hand) == 1, hand  # recorded by that read's open, as any open records it
    proc, modules = run_cli("read", "notes", "/a.md")  # nothing due any more: the light path again
    assert (proc.returncode, proc.stdout) == (0, "hello") and not _loaded(modules, "gitmem.store")


def test_read_after_a_reboot_replays_the_intent_log_first(store: Store) -> None:
    """The light path replays the intent log as an open does: a write whose ref move a power loss
    lost is read back (tests/git/test_durability.py has the same disk state through open_store)."""
    store.write("/a.md", "one")
    store.write("/a.md", "two")
    log = store.path / intent.INTENT_LOG
    lines = log.read_text().splitlines()
    last = intent._parse_entry(lines[-1])
    assert last is not None and last[1] is not None
    git(store.path, "update-ref", "refs/heads/main", last[1])  # the last ref move never reached the disk
    log.write_text("\n".join([f"{intent.INTENT_HEADER}another-boot", *lines[1:]]) + "\n")
    proc, modules = run_cli("read", str(store.path), "/a.md")
    assert (proc.returncode, proc.stdout) == (0, "two"), proc.stderr
    assert not _loaded(modules, "gitmem.store")
    assert log.read_text() == f"{intent.INTENT_HEADER}{intent.boot_id()}\n"
