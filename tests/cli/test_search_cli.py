"""``gitmem search`` through CliRunner: output lines, --json shape, options, exit codes."""

from __future__ import annotations

import json

from typer.testing import CliRunner, Result

from gitmem.cli.app import app
from gitmem.store import Store


def gm(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def seed(store: Store) -> tuple[str, str]:
    a = store.write("/notes/owl.md", "The owl hunts\nat night.", description="Night owls", actor="user:t")
    b = store.write("/misc/owl.md", "an owl figurine", actor="user:t")
    store.write("/x.md", "owl in another scope", scope="other", actor="user:t")
    assert a is not None and b is not None
    return a.id, b.id


def test_plain_output_is_one_tab_separated_line_per_hit(store: Store) -> None:
    a, b = seed(store)
    r = gm("search", "notes", "owl")
    assert r.exit_code == 0, r.stderr
    header, *body = r.stdout.splitlines()
    assert header == "PATH\tSCORE\tDESCRIPTION\tSNIPPET\tVERSION"
    lines = [line.split("\t") for line in body]
    assert [(line[0], line[2], line[4]) for line in lines] == [
        ("/notes/owl.md", "Night owls", a),
        ("/misc/owl.md", "", b),
    ]
    assert lines[1][3] == "an **owl** figurine"


def test_json_lists_hits_with_every_field(store: Store) -> None:
    a, _ = seed(store)
    r = gm("search", "notes", "night owls", "--json", "--limit", "1")
    assert r.exit_code == 0, r.stderr
    [hit] = json.loads(r.stdout)
    assert set(hit) == {"path", "description", "score", "snippet", "version_id"}
    assert (hit["path"], hit["version_id"]) == ("/notes/owl.md", a)


def test_scope_and_prefix_options(store: Store) -> None:
    seed(store)
    assert gm("search", "notes", "owl", "--scope", "other").stdout.splitlines()[1].split("\t")[0] == "/x.md"
    r = gm("search", "notes", "owl", "--prefix", "/misc/")
    assert [line.split("\t")[0] for line in r.stdout.splitlines()[1:]] == ["/misc/owl.md"]


def test_no_match_prints_nothing_and_exits_0(store: Store) -> None:
    seed(store)
    r = gm("search", "notes", 'AND OR NEAR ( " -')
    assert (r.exit_code, r.stdout) == (0, "PATH\tSCORE\tDESCRIPTION\tSNIPPET\tVERSION\n")  # header only


def test_raw_syntax_error_is_a_usage_error(store: Store) -> None:
    seed(store)
    r = gm("search", "notes", "owl AND (", "--raw")
    assert r.exit_code == 2
    assert r.stderr.startswith("Error: invalid search query")
    r = gm("search", "notes", "owl NOT figurine", "--raw")
    assert r.stdout.splitlines()[1].split("\t")[0] == "/notes/owl.md"


def test_bad_limit_and_unknown_store(store: Store) -> None:
    assert gm("search", "notes", "owl", "--limit", "0").exit_code == 2
    r = gm("search", "nosuch", "owl", "--json")
    assert r.exit_code == 3 and json.loads(r.stderr)["error"]["type"] == "not_found"


def test_help_describes_the_command() -> None:
    r = gm("search", "--help")
    assert r.exit_code == 0
    assert "Search the memories of one scope" in r.stdout and "--raw" in r.stdout
