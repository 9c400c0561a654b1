"""Export and import: JSONL round trips, directory seeding, git bundles, and the CLI over them."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pygit2
import pytest
from typer.testing import CliRunner, Result

import gitmem
from gitmem.cli.app import app
from gitmem.engine import transfer
from gitmem.errors import InvalidInputError, NotFoundError
from gitmem.store import Store


def gm(*args: str, input: str | bytes | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input)


def fill(store: Store) -> None:
    store.write("/notes/a.md", "alpha\n", description="About alpha")
    store.write("/notes/b.md", "beta")
    store.write("/team.md", "---\nowner: x\n---\nteam\n", scope="team", description="Team page")


def snapshot(store: Store) -> dict[tuple[str, str], tuple[str | None, str | None]]:
    out = {}
    for scope in store.scopes():
        for m in store.list(scope=scope, with_content=True):
            assert isinstance(m, gitmem.Memory)
            out[(scope, m.path)] = (m.content, m.description)
    return out


def test_export_jsonl_records(store: Store) -> None:
    fill(store)
    buf = io.BytesIO()
    result = transfer.export_jsonl(store.core, buf)
    records = [json.loads(line) for line in buf.getvalue().decode().splitlines()]
    assert result.memories == 3 and result.scopes == ["main", "team"]
    assert [(r["scope"], r["path"]) for r in records] == [
        ("main", "/notes/a.md"),
        ("main", "/notes/b.md"),
        ("team", "/team.md"),
    ]
    assert set(records[0]) == set(transfer.FIELDS)
    assert records[0]["description"] == "About alpha" and records[1]["size"] == 4
    assert records[0]["memory_id"] == store.read("/notes/a.md").memory_id


def test_jsonl_round_trip_keeps_content_descriptions_scopes(store: Store, workspace: Path) -> None:
    fill(store)
    buf = io.StringIO()
    transfer.export_jsonl(store.core, buf)
    with gitmem.create_store("copy", home=workspace) as copy:
        result = transfer.import_jsonl(copy.core, io.StringIO(buf.getvalue()), actor="user:importer")
        assert len(result.versions) == 3 and result.refused == [] and result.unchanged == 0
        assert snapshot(copy) == snapshot(store)
        again = transfer.import_jsonl(copy.core, io.StringIO(buf.getvalue()))
        assert (again.versions, again.unchanged) == ([], 3)
        assert copy.versions("/notes/a.md")[0].actor == "user:importer"
        assert copy.read("/notes/a.md").memory_id == store.read("/notes/a.md").memory_id


def test_import_never_gives_a_live_memory_id_to_a_second_memory(store: Store) -> None:
    live = store.write("/a.md", "a")
    assert live is not None
    line = json.dumps({"path": "/b.md", "content": "b", "memory_id": live.memory_id}) + "\n"
    transfer.import_jsonl(store.core, io.StringIO(line + line.replace("/b.md", "/c.md")))
    ids = {store.read(p).memory_id for p in ("/a.md", "/b.md", "/c.md")}
    assert len(ids) == 3


def test_import_is_one_branch_move_per_scope(store: Store) -> None:
    tips: list[str] = []
    lines = "".join(json.dumps({"path": f"/m{i}.md", "content": str(i)}) + "\n" for i in range(5))
    transfer.import_jsonl(
        store.core, io.StringIO(lines), progress=lambda d, t: tips.append(str(store.core.tip("main")))
    )
    # The branch did not move while the batch was being built, then moved once to its last commit.
    assert tips[:-1] == ["None"] * 5 and tips[-1] == str(store.core.tip("main"))
    assert len(store.versions(scope="main")) == 5


def test_import_jsonl_malformed_line_writes_nothing(store: Store) -> None:
    src = io.StringIO('{"path": "/a.md", "content": "a"}\nnot json\n')
    with pytest.raises(InvalidInputError, match="line 2: not valid JSON"):
        transfer.import_jsonl(store.core, src)
    with pytest.raises(InvalidInputError, match="line 1: 'content' is missing"):
        transfer.import_jsonl(store.core, io.StringIO('{"path": "/a.md"}\n'))
    assert store.scopes() == []


def test_import_reports_refused_records_and_imports_the_rest(store: Store) -> None:
    lines = [
        {"path": "/ok.md", "content": "fine"},
        {"path": "/../x", "content": "bad"},
        {"path": "/big.md", "content": "x" * 102401},
    ]
    result = transfer.import_jsonl(
        store.core, io.StringIO("".join(json.dumps(x) + "\n" for x in lines)), scope="s1", prefix="/in/"
    )
    assert [v.path for v in result.versions] == ["/in/ok.md"]
    assert [(r.path, r.exit_code) for r in result.refused] == [("/in/../x", 2), ("/in/big.md", 5)]
    assert "102400" in result.refused[1].reason


def test_import_tree_seeds_a_scope(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "seed"
    (src / "docs" / "deep").mkdir(parents=True)
    (src / ".git").mkdir()
    (src / ".git" / "config").write_text("ignored")
    (src / "readme.md").write_text("top\n")
    (src / "docs" / "deep" / "x.txt").write_text("deep\n")
    (src / "bin.dat").write_bytes(b"\x00\x01")
    (src / "link.md").symlink_to(src / "readme.md")
    result = transfer.import_tree(store.core, src, scope="seeded", prefix="/kb/")
    assert sorted(v.path for v in result.versions) == ["/kb/docs/deep/x.txt", "/kb/readme.md"]
    assert sorted(r.path for r in result.refused) == ["/kb/bin.dat", "/kb/link.md"]
    assert store.read("/kb/docs/deep/x.txt", scope="seeded").content == "deep\n"
    with pytest.raises(NotFoundError):
        transfer.import_tree(store.core, tmp_path / "missing")


def test_bundle_has_all_refs_and_clones_with_git(store: Store, tmp_path: Path) -> None:
    fill(store)
    store.core.repo.references.create("refs/gitmem/test", store.core.tip("main"))
    bundle = tmp_path / "notes.bundle"
    result = transfer.export_bundle(store.core, bundle)
    assert result.scopes == ["main", "team"]
    heads = subprocess.run(
        ["git", "bundle", "list-heads", str(bundle)], capture_output=True, text=True, check=True
    )
    refs = {line.split()[1] for line in heads.stdout.splitlines()}
    assert {"refs/heads/main", "refs/heads/team", "refs/gitmem/test"} <= refs
    dest = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(bundle), str(dest)], check=True)
    assert (dest / "notes" / "b.md").read_text() == "beta"
    assert pygit2.Repository(str(dest)).head.target == store.core.tip("main")


def test_bundle_of_empty_store_is_refused(store: Store, tmp_path: Path) -> None:
    for name in list(store.core.repo.references):  # a store may already hold server refs (the ledger)
        store.core.repo.references.delete(name)
    with pytest.raises(NotFoundError, match="nothing to bundle"):
        transfer.export_bundle(store.core, tmp_path / "x.bundle")
    assert not (tmp_path / "x.bundle").exists()


def test_cli_export_stdout_then_import(store: Store, tmp_path: Path) -> None:
    fill(store)
    out = gm("export", "notes")
    assert out.exit_code == 0 and len(out.stdout.splitlines()) == 3
    only_team = gm("export", "notes", "--scope", "team", "--json")
    assert [json.loads(x)["path"] for x in only_team.stdout.splitlines()] == ["/team.md"]
    assert gm("store", "create", "copy").exit_code == 0
    r = gm("import", "copy", "-", input=out.stdout)
    assert r.exit_code == 0 and r.stdout == "imported 3 memories, 0 unchanged\n"
    assert gm("read", "copy", "/team.md", "-s", "team").stdout == store.read("/team.md", scope="team").content


def test_cli_export_output_file_and_bundle(store: Store, tmp_path: Path) -> None:
    fill(store)
    f = tmp_path / "out.jsonl"
    r = gm("export", "notes", "-o", str(f), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"memories": 3, "scopes": ["main", "team"]}
    assert len(f.read_text().splitlines()) == 3
    assert gm("export", "notes", "--format", "bundle").exit_code == 2
    assert gm("export", "notes", "--format", "bundle", "-o", str(tmp_path / "b")).exit_code == 0
    assert gm("export", "notes", "--scope", "nope").exit_code == 3


def test_cli_import_directory_with_refusals(store: Store, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "good.md").write_text("good")
    (tmp_path / "d" / "bad.md").write_bytes(b"\xff\xfe")
    r = gm("import", "notes", str(tmp_path / "d"), "--prefix", "/seed/", "--json")
    assert r.exit_code == 2 and r.stderr == ""
    data = json.loads(r.stdout)
    assert data["imported"] == 1 and [x["path"] for x in data["refused"]] == ["/seed/bad.md"]
    assert gm("read", "notes", "/seed/good.md").stdout == "good"
    again = gm("import", "notes", str(tmp_path / "d"), "--prefix", "/seed/")
    assert again.exit_code == 2 and again.stdout == "imported 0 memories, 1 unchanged\n"
    assert again.stderr.startswith("Error: refused /seed/bad.md in scope 'main': ")
    assert gm("import", "notes", str(tmp_path / "nothing")).exit_code == 3
