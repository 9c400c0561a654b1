"""The purge of retired objects and its proof, robust to git maintenance (docs/redaction.md#git-maintenance).

Used by :mod:`gitmem.audit.journal` after a redaction or compaction: loose copies deleted, each
pack holding one copied without them, what maintenance left (multi-pack index, commit-graph,
packed-refs, server info, reflogs) rewritten, then plain git must not list any of them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

import pygit2

from gitmem.errors import IntegrityError
from gitmem.git import intent, tmpdirs
from gitmem.git.consolidate import SMALL_PACK_BYTES
from gitmem.git.packwriter import encode_pack, install_pack
from gitmem.git.reflocks import clear_stale_packed_refs
from gitmem.git.repo import Repo


def _git(store: Repo, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Plain git on exactly this store (no repository variables inherited)."""
    from gitmem import config

    env = config.plain_git_env()
    return subprocess.run(
        ["git", f"--git-dir={store.path}", *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def existing_objects(store: Repo) -> set[str]:
    """Every object plain git can read in the store (``git cat-file --batch-all-objects``: one
    pass over the pack indexes and loose objects, far faster than looking up 100k missing ids)."""
    out = _git(store, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)")
    if out.returncode != 0:
        raise IntegrityError(f"git cat-file failed in {store.path}: {out.stderr.strip()}")
    return set(out.stdout.split())


def missing_objects(store: Repo, oids: list[str]) -> set[str]:
    """Which of ``oids`` plain git cannot find."""
    if not oids:
        return set()
    return set(oids) - existing_objects(store)


def purge(store: Repo, oids: list[str]) -> None:
    """Make ``oids`` (unreachable now) unreadable, then prove it; IntegrityError when it cannot.

    Robust to git maintenance run before or during it (``git gc``, ``repack``,
    ``multi-pack-index write``, ``commit-graph write``): a loose-object directory or a pack that
    vanishes under it is skipped, the passes repeat until the proof holds, and what maintenance left
    behind that names a retired id (commit-graph, multi-pack index and its bitmap, packed-refs lines,
    reflogs) is rewritten without it (:func:`scrub_maintenance`)."""
    if not oids:
        return
    retired = set(oids)
    intent.forget(store)  # its lines name the retired commits and blobs
    tmpdirs.sweep(store.path, "")  # a killed process's leftovers (a bundle) can hold them too
    _git(store, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")
    left = retired
    for _attempt in range(4):
        _unlink_loose(store, retired)
        still = retired & existing_objects(store)
        if still:
            # Some are packed: each pack holding one is copied without the retired objects (git
            # pack-objects, reusing the stored deltas), then removed; every other pack stays as it
            # is. Geometric maintenance keeps recent objects loose or in small packs, so a recent
            # redaction copies little. Unlike ``git repack -a -d`` this drops nothing but the
            # retired objects: an unreachable object a concurrent writer is about to reference is
            # never lost.
            keep = set(packs_without(store, still))
            for idx in sorted((store.path / "objects" / "pack").glob("pack-*.idx")):
                if idx not in keep:
                    _copy_pack_without(store, idx, retired)
        scrub_maintenance(store, retired)
        left = retired & existing_objects(store)
        if not left:
            return
    raise IntegrityError(
        f"the purge failed: {len(left)} retired objects are still readable in {store.path} "
        "(are they reachable from another ref?); run gitmem verify"
    )


def scrub_maintenance(store: Repo, retired: set[str]) -> None:
    """Rewrite what git maintenance left that names retired objects or packs just removed: the
    multi-pack index (and its bitmap and reverse index), the commit-graph (single file or split
    chain), ``packed-refs`` lines shadowed by a rewritten loose ref, ``info/refs`` and
    ``objects/info/packs``, and reflogs."""
    pack_dir = store.path / "objects" / "pack"
    midx = pack_dir / "multi-pack-index"
    if midx.exists():
        had_bitmap = any(pack_dir.glob("multi-pack-index-*.bitmap"))
        for f in [midx, *pack_dir.glob("multi-pack-index-*")]:
            f.unlink(missing_ok=True)
        args = ["multi-pack-index", "write"] + (["--bitmap"] if had_bitmap else [])
        if _git(store, *args).returncode != 0 and had_bitmap:
            _git(store, "multi-pack-index", "write")
    info = store.path / "objects" / "info"
    graph, chain = info / "commit-graph", info / "commit-graphs"
    if graph.exists() or chain.exists():
        graph.unlink(missing_ok=True)
        if chain.is_dir():
            for f in chain.iterdir():
                f.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                chain.rmdir()
        # Written from the refs as they are now: no retired commit is reachable from them.
        _git(store, "commit-graph", "write", "--reachable")
    packed = store.path / "packed-refs"
    try:
        text = packed.read_text(encoding="utf-8", errors="surrogateescape")
    except FileNotFoundError:
        text = ""
    if any(line[:40] in retired or line[1:41] in retired for line in text.splitlines()):
        # Every ref's current value packed again: the stale (shadowed) lines are gone.
        clear_stale_packed_refs(store.path)  # a killed git's packed-refs.lock / .new: else it fails
        _git(store, "pack-refs", "--all")
    if (store.path / "info" / "refs").exists() or (info / "packs").exists():
        # Dumb-transport files (git gc and repack write them): refs and packs as they are now.
        _git(store, "update-server-info")
    _git(store, "reflog", "expire", "--expire=now", "--expire-unreachable=now", "--all")


def reachable_retired(store: Repo, retired: set[str], baseline: list[str]) -> dict[str, set[str]]:
    """Retired ids that a ref reaches now although nothing in ``baseline`` (the clean tips the
    rewrite published and every other ref as it was checked) does: what a concurrent push or write
    added. Only the new part of history is walked (``git rev-list --objects REF --not BASELINE``).
    Returns ``{ref: ids}``."""
    base = set(baseline)
    found: dict[str, set[str]] = {}
    refs = _git(store, "for-each-ref", "--format=%(objectname) %(refname)")
    for line in refs.stdout.splitlines():
        oid, _, name = line.partition(" ")
        if oid in base or name.startswith("refs/gitmem/"):
            continue
        if oid in retired:
            found.setdefault(name, set()).add(oid)
            continue
        stdin = "".join(f"^{b}\n" for b in sorted(base) if _exists(store, b))
        res = _git(store, "rev-list", "--objects", "--no-object-names", oid, "--stdin", stdin=stdin)
        if res.returncode != 0:
            # Retired history under this ref is already gone (a missing object): name it.
            found.setdefault(name, set()).add(oid)
            continue
        hit = retired.intersection(res.stdout.split())
        if hit:
            found.setdefault(name, set()).update(hit)
    return found


def _exists(store: Repo, oid: str) -> bool:
    try:
        return pygit2.Oid(hex=oid) in store.repo.odb
    except ValueError:
        return False


def _unlink_loose(store: Repo, retired: set[str]) -> None:
    objects = str(store.path / "objects")
    try:
        entries = list(os.scandir(objects))
    except FileNotFoundError:
        return
    for entry in entries:
        if len(entry.name) != 2:
            continue
        try:
            names = os.listdir(entry.path)  # a concurrent repack may remove the directory
        except (FileNotFoundError, NotADirectoryError):
            continue
        for name in names:
            if entry.name + name in retired:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(entry.path, name))


def _copy_pack_without(store: Repo, idx: Path, retired: set[str]) -> None:
    try:
        data = idx.read_bytes()
    except FileNotFoundError:
        return  # a concurrent repack removed it (its objects are in a newer pack: the next pass)
    if not idx.with_suffix(".pack").exists():
        return  # being installed (gitmem renames the .pack in last) or removed: the next pass
    count = int.from_bytes(data[8 + 4 * 255 : 8 + 1024], "big")
    base = 8 + 1024
    ids = [data[base + 20 * i : base + 20 * i + 20].hex() for i in range(count)]
    kept_ids = [o for o in ids if o not in retired]
    if len(kept_ids) == len(ids):
        return  # nothing of it was retired after all
    if not kept_ids or _small(idx):
        # A write's own small pack (gitmem.git.consolidate): copied in-process, a subprocess
        # costs more than the copy; one that held only retired objects is just removed.
        if kept_ids and not _copy_small_pack(store, kept_ids):
            return  # removed while it was read: the next pass sees the packs as they are
        _remove_pack(idx)
        return
    kept = "".join(f"{o}\n" for o in kept_ids)
    prefix = str(store.path / "objects" / "pack" / "pack")
    res = _git(store, "pack-objects", "-q", "--delta-base-offset", prefix, stdin=kept)
    if res.returncode != 0:
        if not idx.exists():
            return  # removed while it was read: the next pass sees the packs as they are
        raise IntegrityError(f"the purge failed: git pack-objects: {res.stderr.strip()}")
    if res.stdout.strip() == idx.stem[len("pack-") :]:
        return  # nothing of it was retired after all
    _remove_pack(idx)


def _remove_pack(idx: Path) -> None:
    for suffix in (".idx", ".bitmap", ".rev", ".mtimes", ".keep", ".pack"):  # idx first: as git does
        idx.with_suffix(suffix).unlink(missing_ok=True)


def _small(idx: Path) -> bool:
    try:
        return idx.with_suffix(".pack").stat().st_size <= SMALL_PACK_BYTES
    except FileNotFoundError:
        return False


def _copy_small_pack(store: Repo, kept_ids: list[str]) -> bool:
    """Write ``kept_ids`` (read from the store) as a pack of their own and flush it, as git
    pack-objects would; False when one of them could not be read (its pack went meanwhile)."""
    odb = pygit2.Odb(str(store.path / "objects"))
    objects: dict[pygit2.Oid, tuple[int, bytes]] = {}
    try:
        for o in kept_ids:
            kind, obj = odb.read(o)
            objects[pygit2.Oid(hex=o)] = (int(kind), obj)
    except (KeyError, ValueError, pygit2.GitError):
        return False
    pack, index, name = encode_pack(objects)
    pack_dir = str(store.path / "objects" / "pack")
    install_pack(pack_dir, name, pack, index)
    intent.syncfs(pack_dir)  # on disk before the pack it replaces is removed
    return True


def packs_without(store: Repo, oids: set[str]) -> list[Path]:
    """The ``.idx`` files of packs holding none of ``oids`` (read directly: version 2 indexes)."""
    wanted = {bytes.fromhex(o) for o in oids}
    out = []
    for idx in sorted((store.path / "objects" / "pack").glob("pack-*.idx")):
        try:
            data = idx.read_bytes()
        except FileNotFoundError:
            continue  # removed by a concurrent repack
        if data[:8] != b"\377tOc\x00\x00\x00\x02":
            continue  # unknown format: not kept, so it is repacked (safe)
        count = int.from_bytes(data[8 + 4 * 255 : 8 + 1024], "big")
        if len(wanted) * 32 < count:  # few ids: binary searches; else one set of the pack's ids
            holds = any(_idx_has(data, w) for w in wanted)
        else:
            base = 8 + 1024
            holds = not wanted.isdisjoint(data[base + 20 * i : base + 20 * i + 20] for i in range(count))
        if not holds:
            out.append(idx)
    return out


def _idx_has(data: bytes, oid: bytes) -> bool:
    fan = 8
    first = oid[0]
    lo = int.from_bytes(data[fan + 4 * (first - 1) : fan + 4 * first], "big") if first else 0
    hi = int.from_bytes(data[fan + 4 * first : fan + 4 * first + 4], "big")
    base = fan + 1024
    while lo < hi:
        mid = (lo + hi) // 2
        here = data[base + 20 * mid : base + 20 * mid + 20]
        if here == oid:
            return True
        if here < oid:
            lo = mid + 1
        else:
            hi = mid
    return False
