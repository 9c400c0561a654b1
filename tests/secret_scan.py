"""Search everywhere for a secret: the redaction tests' proof that erased bytes are really gone.

:func:`find_secret` reports every place under the given roots where ``secret`` still is: in any file
as raw bytes (packed-refs, reflogs, commit-graph, multi-pack index, bitmaps, the index database and
its -wal/-shm, the deny-list, journal, pushes log, ledger objects, session mounts and state files),
inside any zlib stream of any file (loose objects, and every packed object and delta, whether or
not an index still lists its pack), and in every object plain git can read
(``git cat-file --batch-all-objects``, decompressed and with deltas resolved). Object ids given in
``ids`` (a redacted blob, retired commits) are searched as hex and raw 20 bytes in every file.
"""

from __future__ import annotations

import os
import subprocess
import zlib
from collections.abc import Iterable
from pathlib import Path

_ZLIB_HEADS = (b"\x78\x01", b"\x78\x5e", b"\x78\x9c", b"\x78\xda")


def _streams(data: bytes) -> Iterable[tuple[int, bytes]]:
    """Every zlib stream in ``data`` (tried at each plausible header), decompressed."""
    for head in _ZLIB_HEADS:
        pos = data.find(head)
        while pos != -1:
            d = zlib.decompressobj()
            try:
                out = d.decompress(data[pos:], 1 << 24)
            except zlib.error:
                out = b""
            if out:
                yield pos, out
            pos = data.find(head, pos + 1)


def _files(roots: Iterable[Path]) -> Iterable[Path]:
    for root in roots:
        if root.is_file():
            yield root
            continue
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                p = Path(dirpath) / n
                if p.is_file() and not p.is_symlink():
                    yield p


def _git_objects(git_dir: Path) -> Iterable[tuple[str, bytes]]:
    res = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "--batch-all-objects", "--batch", "--unordered"],
        capture_output=True,
        check=False,
    )
    out = res.stdout
    pos = 0
    while pos < len(out):
        nl = out.index(b"\n", pos)
        header = out[pos:nl].split()
        if len(header) < 3:
            break
        size = int(header[2])
        yield header[0].decode(), out[nl + 1 : nl + 1 + size]
        pos = nl + 1 + size + 1


def find_secret(
    roots: Iterable[Path | str],
    secret: bytes,
    *,
    git_dirs: Iterable[Path | str] = (),
    ids: Iterable[str] = (),
) -> list[str]:
    """Where ``secret`` (or one of ``ids``) still is under ``roots``; empty: nowhere."""
    needles = [secret] if secret else []
    id_needles = [n for i in ids for n in (i.encode(), bytes.fromhex(i))]
    found: list[str] = []
    paths = [Path(r) for r in roots]
    for path in _files(paths):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        for n in needles + id_needles:
            if n in data:
                found.append(f"{path}: raw {n[:12]!r}")
        for pos, plain in _streams(data):
            for n in needles:
                if n in plain:
                    found.append(f"{path}@{pos}: inside a zlib stream")
    for g in git_dirs:
        for oid, content in _git_objects(Path(g)):
            for n in needles:
                if n in content:
                    found.append(f"{g}: object {oid}")
    return sorted(set(found))


def scan_store(
    store_path: Path | str,
    secret: bytes,
    *,
    workspace: Path | str | None = None,
    clones: Iterable[Path | str] = (),
    ids: Iterable[str] = (),
    remembered_pattern: bool = False,
) -> list[str]:
    """:func:`find_secret` over a store's git directory (objects loose and packed, commit-graph,
    MIDX, bitmaps, packed-refs, reflogs, ``gitmem/``: index.sqlite + -wal/-shm, deny-list,
    deny-patterns, journal, pushes log), the workspace's session records and mounts, and clones.
    With ``remembered_pattern`` the deny-patterns file (0600, it holds the redacted regex by
    design, see docs/redaction.md) is the one place allowed to hold the secret."""
    store = Path(store_path)
    roots: list[Path] = [store]
    git_dirs: list[Path] = [store]
    if workspace is not None:
        ws = Path(workspace)
        for sub in ("sessions", "mounts"):
            if (ws / sub).exists():
                roots.append(ws / sub)
    for c in clones:
        cp = Path(c)
        roots.append(cp)
        git_dirs.append(cp / ".git" if (cp / ".git").is_dir() else cp)
    found = find_secret(roots, secret, git_dirs=git_dirs, ids=ids)
    if remembered_pattern:
        allowed = str(store / "gitmem" / "denypatterns")
        found = [f for f in found if not f.startswith(allowed + ":")]
    return found
