"""Store.search: scope isolation, ranking, query syntax, incremental index upkeep, purge of old text."""

from __future__ import annotations

import sqlite3
import subprocess
from pathlib import Path

import pygit2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gitmem
from gitmem.engine.search import fts_query
from gitmem.errors import InvalidInputError
from gitmem.store import Store

ACTOR = "user:tester"


def paths(hits: list[gitmem.SearchHit]) -> list[str]:
    return [h.path for h in hits]


def write(store: Store, path: str, content: str, **kw: object) -> None:
    store.write(path, content, actor=ACTOR, **kw)  # type: ignore[arg-type]


def plain_commit(store: Store, files: dict[str, bytes | None], scope: str = "main") -> None:
    """A commit made behind the library's back with plain pygit2 (no trailers, no index update)."""
    repo, parent = store.core.repo, store.core.tip(scope)
    tree = store.core.tree_of(parent)
    for path, data in files.items():
        oid = store.core.update_tree(
            tree, path.split("/"), repo.create_blob(data) if data is not None else None
        )
        tree = repo[oid] if oid is not None else None  # type: ignore[assignment]
    sig = pygit2.Signature("Bob", "bob@example.com")
    tree_id = tree.id if tree is not None else store.core.empty_tree()
    repo.create_commit(f"refs/heads/{scope}", sig, sig, "plain edit\n", tree_id, [parent] if parent else [])


def index_bytes(store: Store) -> bytes:
    base = store.core.index.path
    files = [base.with_name(base.name + suffix) for suffix in ("", "-wal", "-shm")]
    return b"".join(f.read_bytes() for f in files if f.exists())


# ---------------------------------------------------------------------- results and ranking
def test_hit_carries_path_description_snippet_and_head_version(store: Store) -> None:
    write(store, "/pets/cat.md", "My cat sleeps all day.", description="About the cat")
    [hit] = store.search("sleeps")
    assert (hit.path, hit.description) == ("/pets/cat.md", "About the cat")
    assert hit.snippet == "My cat **sleeps** all day."
    assert hit.version_id == store.read("/pets/cat.md").version_id
    assert hit.score > 0


def test_scopes_are_isolated(store: Store) -> None:
    write(store, "/a.md", "alpha secret plan", scope="alice")
    write(store, "/a.md", "alpha public plan", scope="bob")
    assert [h.snippet for h in store.search("alpha", scope="alice")] == ["**alpha** secret plan"]
    assert store.search("secret", scope="bob") == []
    assert store.search("alpha") == []  # main is empty


def test_description_hit_ranks_above_body_hit(store: Store) -> None:
    write(store, "/body.md", "notes about the garden and the kitchen and giraffes")
    write(store, "/desc.md", "unrelated text about the kitchen", description="giraffes")
    assert paths(store.search("giraffes")) == ["/desc.md", "/body.md"]


def test_path_matches_and_ranks_below_description(store: Store) -> None:
    write(store, "/recipes/lasagna.md", "layers of pasta")
    write(store, "/other.md", "a dish", description="lasagna")
    assert paths(store.search("lasagna")) == ["/other.md", "/recipes/lasagna.md"]


def test_limit_and_best_first(store: Store) -> None:
    for i in range(5):
        write(store, f"/n{i}.md", "kiwi " * (i + 1) + "filler text " * 10)
    hits = store.search("kiwi", limit=3)
    assert paths(hits) == ["/n4.md", "/n3.md", "/n2.md"]
    assert hits[0].score > hits[1].score > hits[2].score


# ---------------------------------------------------------------------- query syntax
def test_plain_words_rank_by_how_many_match_with_stemming_case_and_diacritics(store: Store) -> None:
    write(store, "/a.md", "The dogs were RUNNING to the Café")
    write(store, "/b.md", "the dog sat")
    assert paths(store.search("dog run")) == ["/a.md", "/b.md"]  # both words beat one
    assert paths(store.search("dog AND run")) == ["/a.md"]  # AND: both must match
    assert paths(store.search("cafe")) == ["/a.md"]
    assert sorted(paths(store.search("Dogs"))) == ["/a.md", "/b.md"]


def test_quoted_phrase_needs_adjacent_words(store: Store) -> None:
    write(store, "/a.md", "the red apple fell")
    write(store, "/b.md", "the apple is red")
    assert paths(store.search('"red apple"')) == ["/a.md"]
    assert sorted(paths(store.search("red apple"))) == ["/a.md", "/b.md"]
    assert paths(store.search('"red apple" fell')) == ["/a.md"]  # the phrase is required


def test_a_question_finds_the_memory_that_answers_it(store: Store) -> None:
    write(store, "/people/alice.md", "Alice: prefers tea, no sugar")
    write(store, "/people/bob.md", "Bob drinks coffee")
    write(store, "/notes/what.md", "what does this do? to be decided")
    hits = paths(store.search("What does Alice prefer to drink?"))
    assert hits[0] == "/people/alice.md"
    assert "/notes/what.md" not in hits  # only stop words in common


def test_prefix_terms(store: Store) -> None:
    write(store, "/a.md", "kubernetes cluster")
    write(store, "/b.md", "kubectl commands")
    assert sorted(paths(store.search("kube*"))) == ["/a.md", "/b.md"]
    assert paths(store.search('"kubernetes clu"*')) == ["/a.md"]
    assert store.search("kube") == []


@pytest.mark.parametrize(
    "query",
    [
        "-",
        "e-mail",
        "to:do",
        '"',
        'say "hi',
        "(",
        "a) OR (b",
        "*",
        "**",
        "*x",
        "x**y",
        "AND",
        "OR",
        "NEAR",
        "NEAR(a b)",
        "a AND",
        "NOT x",
        "^x",
        "+x",
        'col:"x"',
        "''",
        "{a b}",
        "\\",
        ";--",
        "",
        "alpha\x00",  # regression: NUL ended the FTS5 string early (sqlite3.OperationalError)
        "a\x01b\x7f",
    ],
)
def test_odd_characters_never_raise(store: Store, query: str) -> None:
    write(store, "/a.md", "send an e-mail to:do list about and or near things")
    assert isinstance(store.search(query), list)


def test_operators_are_plain_words_and_punctuation_splits(store: Store) -> None:
    write(store, "/a.md", "this AND that, or NEAR the e-mail")
    write(store, "/b.md", "this and that")
    assert paths(store.search("near")) == ["/a.md"]
    assert paths(store.search("OR NEAR")) == ["/a.md"]
    assert paths(store.search("e-mail")) == ["/a.md"]


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from('ab -:"()*^+{}AND OR NEAR\\.é,\x00\x1f'), max_size=30))
def test_escaped_queries_are_always_valid_fts5(query: str) -> None:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 remove_diacritics 2')")
    db.execute("INSERT INTO t VALUES('a b and or near')")
    expression = fts_query(query)
    if expression:
        db.execute("SELECT * FROM t WHERE t MATCH ?", (expression,)).fetchall()


def test_raw_passes_fts5_syntax_and_reports_errors(store: Store) -> None:
    write(store, "/a.md", "apples", description="fruit")
    write(store, "/b.md", "fruit salad")
    assert paths(store.search("description:fruit", raw=True)) == ["/a.md"]
    assert sorted(paths(store.search("apples OR salad", raw=True))) == ["/a.md", "/b.md"]
    with pytest.raises(InvalidInputError, match="invalid search query"):
        store.search("apples AND (", raw=True)


def test_bad_arguments_are_refused(store: Store) -> None:
    for kw in ({"limit": 0}, {"limit": 1001}, {"scope": "bad..scope"}, {"path_prefix": "/no-slash"}):
        with pytest.raises(InvalidInputError):
            store.search("x", **kw)  # type: ignore[arg-type]


def test_path_prefix_is_segment_aligned(store: Store) -> None:
    write(store, "/notes/a.md", "zebra")
    write(store, "/notes-archive/b.md", "zebra")
    write(store, "/notes/deep/c.md", "zebra")
    assert sorted(paths(store.search("zebra", path_prefix="/notes/"))) == ["/notes/a.md", "/notes/deep/c.md"]
    assert len(store.search("zebra", path_prefix="/")) == 3


def test_front_matter_is_not_body(store: Store) -> None:
    write(store, "/a.md", "---\ntags: [walrus]\n---\nplain body", description="sea life")
    assert store.search("walrus") == []
    [hit] = store.search("body")
    assert hit.description == "sea life" and "---" not in hit.snippet


# ---------------------------------------------------------------------- keeping up with git
def test_write_delete_and_rename_are_reflected(store: Store) -> None:
    write(store, "/a.md", "old words here")
    write(store, "/a.md", "new words here")
    assert store.search("old") == []
    assert paths(store.search("new")) == ["/a.md"]
    store.rename("/a.md", "/b.md", actor=ACTOR)
    [hit] = store.search("words")
    assert hit.path == "/b.md" and hit.version_id == store.read("/b.md").version_id
    store.delete("/b.md", actor=ACTOR)
    assert store.search("words") == []


def test_commit_behind_the_librarys_back_is_caught_up(store: Store) -> None:
    write(store, "/a.md", "before")
    store.search("before")  # index current
    plain_commit(store, {"a.md": b"after the plain commit", "b.md": b"brand new file"})
    assert store.search("before") == []
    assert paths(store.search("after")) == ["/a.md"]
    assert paths(store.search("brand")) == ["/b.md"]


def test_other_process_write_is_seen_by_an_open_store(store: Store, workspace: Path) -> None:
    write(store, "/a.md", "first")
    assert paths(store.search("first")) == ["/a.md"]
    with gitmem.open_store("notes", home=workspace) as other:
        other.write("/b.md", "second", actor=ACTOR)
    assert paths(store.search("second")) == ["/b.md"]


def test_real_git_commit_in_the_bare_store_is_found(store: Store) -> None:
    write(store, "/a.md", "gitmem wrote this")
    store.search("gitmem")

    def git(*args: str, stdin: str | None = None) -> str:
        return subprocess.run(
            ["git", *args], cwd=store.path, input=stdin, capture_output=True, text=True, check=True
        ).stdout.strip()

    blob = git("hash-object", "-w", "--stdin", stdin="typed with real git")
    tree = git("mktree", stdin=f"100644 blob {blob}\tgit.md\n")
    commit = git("commit-tree", tree, "-p", "main", "-m", "plain git")
    git("update-ref", "refs/heads/main", commit)
    assert paths(store.search("typed")) == ["/git.md"]
    assert store.search("gitmem") == []


def test_deleted_index_is_rebuilt(store: Store, workspace: Path) -> None:
    write(store, "/a.md", "persistent memory")
    store.close()
    for suffix in ("", "-wal", "-shm"):
        p = store.core.gitmem_dir / ("index.sqlite" + suffix)
        if p.exists():
            p.unlink()
    with gitmem.open_store("notes", home=workspace) as again:
        assert paths(again.search("persistent")) == ["/a.md"]


def test_index_of_an_older_schema_is_rebuilt(store: Store, workspace: Path) -> None:
    write(store, "/a.md", "schema change")
    store.close()
    db = sqlite3.connect(store.core.gitmem_dir / "index.sqlite")
    db.execute("DROP TABLE search_fts")
    db.execute("UPDATE meta SET value='1' WHERE key='schema'")
    db.commit()
    db.close()
    with gitmem.open_store("notes", home=workspace) as again:
        assert paths(again.search("schema")) == ["/a.md"]


def test_rebuild_gives_the_same_answers(store: Store) -> None:
    write(store, "/a.md", "one fish", description="two fish")
    write(store, "/b.md", "red fish blue fish")
    before = store.search("fish")
    store.core.index.rebuild()
    assert store.search("fish") == before


# ---------------------------------------------------------------------- no old text left behind
def test_purge_leaves_no_overwritten_text_in_the_file(store: Store) -> None:
    write(store, "/a.md", "password zqxsecretbody", description="zqxsecretdesc")
    for i in range(8):
        write(store, f"/filler{i}.md", f"filler text {i}")
    write(store, "/a.md", "nothing to see", description="clean")
    assert store.search("zqxsecretbody") == []
    assert store.core.index.purge_search()
    data = index_bytes(store)
    assert b"zqxsecret" not in data
    assert b"filler text 7" in data  # the scan does see live content


def test_history_rewrite_purges_the_index_on_catch_up(store: Store) -> None:
    write(store, "/a.md", "api key zqxleaked")
    write(store, "/a.md", "key rotated")
    store.search("key")
    # A redaction-like rewrite: a new root holding only the current tree replaces history.
    tip = store.core.tip("main")
    assert tip is not None
    sig = pygit2.Signature("gitmem", "gitmem")
    root = store.core.repo.create_commit(None, sig, sig, "squashed\n", store.core.commit(tip).tree.id, [])
    store.core.repo.references["refs/heads/main"].set_target(root)  # rewrite history behind the index
    assert paths(store.search("rotated")) == ["/a.md"]
    assert b"zqxleaked" not in index_bytes(store)


def test_dropping_a_scope_keeps_other_scopes_searchable(store: Store) -> None:
    write(store, "/a.md", "shared word", scope="one")
    write(store, "/a.md", "shared word", scope="two")
    store.search("shared", scope="one")
    store.core.repo.references.delete("refs/heads/one")
    store.core.index.ensure_all()
    assert store.search("shared", scope="one") == []
    assert paths(store.search("shared", scope="two")) == ["/a.md"]


def test_corrupt_index_is_rebuilt(store: Store, workspace: Path) -> None:
    write(store, "/a.md", "sturdy memory")
    store.close()
    (store.core.gitmem_dir / "index.sqlite").write_bytes(b"not a database at all" * 100)
    with gitmem.open_store("notes", home=workspace) as again:
        assert paths(again.search("sturdy")) == ["/a.md"]


def test_pushed_commit_is_found(store: Store, tmp_path: Path) -> None:
    write(store, "/a.md", "written by gitmem")
    store.search("gitmem")
    clone = tmp_path / "clone"

    def git(*args: str, cwd: Path = clone) -> None:
        subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)

    git("clone", "-q", str(store.path), str(clone), cwd=tmp_path)
    (clone / "pushed.md").write_text("arrived by git push\n")
    git("add", "pushed.md")
    git("-c", "user.name=Bob", "-c", "user.email=bob@example.com", "commit", "-q", "-m", "add pushed.md")
    git("push", "-q", "origin", "HEAD:main")
    [hit] = store.search("arrived")
    assert hit.path == "/pushed.md" and hit.version_id.startswith("memver_")


def test_redaction_leaves_no_redacted_text_in_the_index(store: Store) -> None:
    from gitmem.audit.redact import redact

    leaked = store.write("/a.md", "token zqxredactme", description="zqxdescsecret", actor=ACTOR)
    assert leaked is not None
    write(store, "/a.md", "token rotated", description="clean")
    assert store.search("zqxredactme") == []
    redact(store.core, leaked.id, reason="leaked token")
    assert paths(store.search("rotated")) == ["/a.md"]
    data = index_bytes(store)
    assert b"zqxredactme" not in data and b"zqxdescsecret" not in data
