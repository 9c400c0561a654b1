"""The raw-tree differ of long walks (``TreeDiffer``) gives exactly the deltas of ``tree_deltas``, in
the same order, on random histories with every kind of entry; and refuses malformed tree objects."""

from __future__ import annotations

import random
from pathlib import Path

import pygit2
import pytest

from gitmem.git.treediff import TreeDiffer, diff_trees, tree_deltas

BLOB, EXEC, LINK, TREE, GITLINK = 0o100644, 0o100755, 0o120000, 0o040000, 0o160000


def _raw_tree(repo: pygit2.Repository, entries: dict[bytes, tuple[bytes, pygit2.Oid]]) -> pygit2.Oid:
    """A tree object written byte by byte (so non-canonical modes such as 100664 are possible)."""

    def key(name: bytes) -> bytes:  # git's order: a tree sorts as if its name ended in '/'
        return name + (b"/" if entries[name][0] == b"40000" else b"")

    data = b"".join(entries[n][0] + b" " + n + b"\0" + entries[n][1].raw for n in sorted(entries, key=key))
    return repo.odb.write(pygit2.enums.ObjectType.TREE, data)


def _build(repo: pygit2.Repository, files: dict[tuple[bytes, ...], tuple[bytes, pygit2.Oid]]) -> pygit2.Oid:
    children: dict[bytes, dict[tuple[bytes, ...], tuple[bytes, pygit2.Oid]]] = {}
    entries: dict[bytes, tuple[bytes, pygit2.Oid]] = {}
    for path, entry in files.items():
        if len(path) == 1:
            entries[path[0]] = entry
        else:
            children.setdefault(path[0], {})[path[1:]] = entry
    for name, sub in children.items():
        if name not in entries:
            entries[name] = (b"40000", _build(repo, sub))
    return _raw_tree(repo, entries)


def test_raw_differ_matches_tree_deltas_on_random_histories(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    rng = random.Random(11)
    blobs = [repo.create_blob(f"content {i}\n".encode()) for i in range(40)]
    sub = repo.create_commit(
        None, pygit2.Signature("a", "a@x"), pygit2.Signature("a", "a@x"), "s", repo.TreeBuilder().write(), []
    )
    names = [b"a", b"a.md", b"b", b"caf\xc3\xa9.md", b"bad\xff", b"n-1", b"n-2", b"x"]
    modes = [b"100644"] * 6 + [b"100755", b"100664", b"120000"]
    files: dict[tuple[bytes, ...], tuple[bytes, pygit2.Oid]] = {}
    trees = [_build(repo, files)]
    for _step in range(400):
        for _ in range(rng.choice([1, 1, 1, 2, 5])):
            path = tuple(rng.choice(names) for _ in range(rng.randint(1, 3)))
            op = rng.random()
            if op < 0.15 and files:
                files.pop(rng.choice(sorted(files)))
            else:
                # a path may not be both a file and a directory: drop what is in the way
                for other in list(files):
                    if other[: len(path)] == path or path[: len(other)] == other:
                        files.pop(other)
                if op > 0.97:
                    files[path] = (b"160000", sub)
                else:
                    files[path] = (rng.choice(modes), rng.choice(blobs))
        trees.append(_build(repo, files))
    differ = TreeDiffer(repo, keep=16)  # small: generations retire often
    for old, new in zip(trees, trees[1:], strict=False):
        want = tree_deltas(repo[old], repo[new])  # type: ignore[arg-type]
        assert differ.deltas(old, new) == want
        assert differ.changes(old, new) == diff_trees(repo, repo[old], repo[new])  # type: ignore[arg-type]
    # backwards and skipping: trees the cache no longer has, or never had in that role
    for _ in range(200):
        a, b = rng.choice(trees), rng.choice(trees)
        assert differ.deltas(a, b) == tree_deltas(repo[a], repo[b])  # type: ignore[arg-type]
    assert differ.deltas(None, trees[-1]) == tree_deltas(None, repo[trees[-1]])  # type: ignore[arg-type]
    assert differ.deltas(trees[-1], None) == tree_deltas(repo[trees[-1]], None)  # type: ignore[arg-type]


def test_raw_differ_single_entry_edits_of_a_big_directory(tmp_path: Path) -> None:
    """Directories past the Python/libgit2 threshold: the one-entry fast path must not bypass it."""
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    blobs = [repo.create_blob(f"v{i}\n".encode()) for i in range(3)]
    files: dict[tuple[bytes, ...], tuple[bytes, pygit2.Oid]] = {
        (b"d", f"m{i:04d}".encode()): (b"100644", blobs[0]) for i in range(600)
    }
    t0 = _build(repo, files)
    files[(b"d", b"m0300")] = (b"100644", blobs[1])
    t1 = _build(repo, files)
    files[(b"d", b"m0300")] = (b"100755", blobs[1])  # a mode change only
    t2 = _build(repo, files)
    differ = TreeDiffer(repo)
    for old, new in [(t0, t1), (t1, t2), (t0, t2)]:
        assert differ.deltas(old, new) == tree_deltas(repo[old], repo[new])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        b"100644 a\0" + b"\x01" * 19,  # an id cut short
        b"100644 a\0" + b"\x01" * 20 + b"garbage",  # trailing bytes
        b"100644 a\0" + b"\x01" * 20 + b"100644 a\0" + b"\x02" * 20,  # a name twice
    ],
)
def test_raw_differ_refuses_malformed_trees(tmp_path: Path, data: bytes) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    bad = repo.odb.write(pygit2.enums.ObjectType.TREE, data)
    with pytest.raises(pygit2.GitError):
        TreeDiffer(repo).deltas(None, bad)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_raw_differ_matches_tree_deltas_in_big_directories(tmp_path: Path, seed: int) -> None:
    """One directory past the Python/libgit2 threshold (and one just under it), with
    subdirectories, names that share prefixes and sort differently as files and as trees: single
    edits, creates, deletes (of files and of whole subdirectories), mode changes, renames and
    several changes at once; every step, and random pairs, equal ``tree_deltas``."""
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    rng = random.Random(seed)
    blobs = [repo.create_blob(f"content {i}\n".encode()) for i in range(50)]
    files: dict[tuple[bytes, ...], tuple[bytes, pygit2.Oid]] = {}
    for i in range(600):
        files[(b"bulk", f"memory-{i:04d}.md".encode())] = (b"100644", rng.choice(blobs))
    for i in range(250):
        files[(b"half", f"m{i:03d}".encode())] = (b"100644", rng.choice(blobs))
    for name in (b"a", b"a-b", b"a.md", b"a0"):
        files[(b"bulk", name)] = (b"100644", rng.choice(blobs))
    files[(b"bulk", b"sub", b"x.md")] = (b"100644", blobs[0])
    files[(b"bulk", b"sub", b"y", b"z.md")] = (b"100644", blobs[1])
    names = [*(f"memory-{i:04d}.md".encode() for i in range(620)), b"a", b"a-b", b"a.md", b"sub", b"n"]
    trees = [_build(repo, files)]

    def clear(path: tuple[bytes, ...]) -> None:  # a path may not be both a file and a directory
        for other in list(files):
            if other[: len(path)] == path or path[: len(other)] == other:
                files.pop(other)

    for _step in range(300):
        for _ in range(rng.choice([1, 1, 1, 1, 2, 3])):
            top = rng.choice([b"bulk", b"bulk", b"bulk", b"half"])
            name = rng.choice(names)
            op = rng.random()
            here = sorted(p for p in files if p[0] == top)
            if op < 0.2 and here:  # delete a file
                files.pop(rng.choice(here))
            elif op < 0.3:  # a subdirectory appears, or is edited inside
                path = (top, name, rng.choice([b"x.md", b"a", b"a.md"]))
                clear(path)
                files[path] = (b"100644", rng.choice(blobs))
            elif op < 0.33:  # a subdirectory appears whole (its files order differently in git)
                clear((top, name))
                for rest in [(b"a.md",), (b"a", b"x"), (b"a-b",)]:
                    files[(top, name, *rest)] = (b"100644", rng.choice(blobs))
            elif op < 0.36:  # a whole subdirectory goes
                subs = sorted({p[:2] for p in here if len(p) > 2})
                for p in [p for p in list(files) if subs and p[:2] == subs[0]]:
                    files.pop(p)
            elif op < 0.4 and here:  # a rename
                src = rng.choice(here)
                entry = files.pop(src)
                clear((top, name))
                files[(top, name)] = entry
            elif op < 0.45 and here:  # a mode change
                p = rng.choice(here)
                files[p] = (rng.choice([b"100755", b"120000", b"100644"]), files[p][1])
            else:  # an edit or a create
                path = (top, name)
                clear(path)
                files[path] = (b"100644", rng.choice(blobs))
        trees.append(_build(repo, files))
    differ = TreeDiffer(repo, keep=32, keep_bytes=200_000)  # small: generations retire often
    for old, new in zip(trees, trees[1:], strict=False):
        assert differ.deltas(old, new) == tree_deltas(repo[old], repo[new])  # type: ignore[arg-type]
    for _ in range(60):
        a, b = rng.choice(trees), rng.choice(trees)
        assert differ.deltas(a, b) == tree_deltas(repo[a], repo[b])  # type: ignore[arg-type]


def test_raw_differ_refuses_a_repeated_name_spliced_into_a_big_directory(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    a, b = repo.create_blob(b"a\n"), repo.create_blob(b"b\n")
    body = b"".join(b"100644 m%04d\0" % i + a.raw for i in range(700))
    old = repo.odb.write(pygit2.enums.ObjectType.TREE, body)
    bad = repo.odb.write(pygit2.enums.ObjectType.TREE, body + b"100644 m0003\0" + b.raw)
    differ = TreeDiffer(repo)
    assert differ.deltas(None, old)
    with pytest.raises(pygit2.GitError):
        differ.deltas(old, bad)
