"""Mount directories: materialise a scope's tree as plain files, scan them back, refresh them.

Each mount holds a marker, ``<mount>/.gitmem/mount.json`` (``/.gitmem/`` is reserved, so the marker
can never collide with a memory): store, scope, access, the base commit the files were last synced
against, and the git blob id of every file at that base. Blob ids are content addresses (equal ids
<=> equal bytes), so they serve as the per-file base hashes of the 3-way sync and are compared with
the git blob ids of the local files (``gitmem.store.blob_id``) without reading the store.

Read-only mounts get 0444 files and 0555 directories; the marker directory stays writable by its
owner so the marker can be updated without unlocking the mount.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gitmem.errors import IntegrityError
from gitmem.model.reserved import SHORTTERM_PREFIXES
from gitmem.sessions.state import Mount, write_json_atomic
from gitmem.store import Store, blob_id

MARKER_DIR = ".gitmem"
MARKER_FILE = "mount.json"
FILE_RO, DIR_RO = 0o444, 0o555
FILE_RW, DIR_RW = 0o644, 0o755
_counter = itertools.count()


@dataclass
class Marker:
    store: str
    store_path: str
    scope: str
    access: str
    session: str
    base: str | None
    files: dict[str, str] = field(default_factory=dict)  # api path -> blob id (hex) at ``base``
    at: str | None = None  # a past state's mount: the moment it shows (``base`` is that state)
    shows: str | None = None  # ... and that state's version time

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": 1,
            "store": self.store,
            "store_path": self.store_path,
            "scope": self.scope,
            "access": self.access,
            "session": self.session,
            "base": self.base,
            "files": self.files,
            **({"at": self.at, "shows": self.shows} if self.at is not None else {}),
        }


def check_root(mount: Mount) -> None:
    """Refuse a mount whose directory (or the session root holding it) is no longer a real
    directory: a symlink put in its place would have sync and end read, write, chmod and remove
    files outside the session (issue 26)."""
    from gitmem.errors import ForbiddenError

    root = Path(mount.path)
    for p in (root, root.parent):
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise ForbiddenError(
                f"the mount {root} is not the session's directory any more ({p} is {kind}): it is "
                "not synced and nothing is written there; restore the directory, or end the session "
                "with --force (which removes only the link)"
            )


def marker_path(mount: Mount) -> Path:
    return Path(mount.path) / MARKER_DIR / MARKER_FILE


def read_marker(mount: Mount) -> Marker:
    path = marker_path(mount)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IntegrityError(f"{path} is missing: the mount of {mount.store!r} cannot be synced") from None
    except (ValueError, UnicodeDecodeError):
        raise IntegrityError(f"{path} is not a valid mount marker: the mount cannot be synced") from None
    return Marker(
        data["store"],
        data["store_path"],
        data["scope"],
        data["access"],
        data["session"],
        data.get("base"),
        dict(data.get("files", {})),
        data.get("at"),
        data.get("shows"),
    )


def write_marker(mount: Mount, marker: Marker) -> None:
    path = marker_path(mount)
    path.parent.mkdir(mode=DIR_RW, exist_ok=True)
    write_json_atomic(path, marker.to_dict())


# ---------------------------------------------------------------------- store side
def tree_files(store: Store, tip: str | None) -> dict[str, str]:
    """Every file of the tree at ``tip`` as api path -> blob id, but conversations and
    checkpoints: they are not mounted (docs/conversations.md)."""
    return {path: blob for path, blob in store.files(tip).items() if not path.startswith(SHORTTERM_PREFIXES)}


def remote_blob(files: dict[str, str] | None, path: str) -> str | None:
    """The blob id at ``path`` of a commit's ``files`` (:meth:`Store.files`; None: no file there)."""
    return files.get(path) if files is not None else None


def pinned_tip(store: Store, mount: Mount) -> tuple[str | None, str]:
    """The state a past state's mount shows, resolved anew (a redaction rewrites the commit that
    state was, never its time) and its version time: ``--at`` (docs/point-in-time.md)."""
    commit, time = store.state_at(mount.at, scope=mount.scope)
    return (commit or None), time or ""


def materialise(store: Store, mount: Mount, session_id: str) -> Marker:
    """Write the scope's files (or, for a mount with ``at``, those of that past state: read-only)
    into the (new, empty) mount directory and its marker."""
    root = Path(mount.path)
    shows = ""
    if mount.at:
        tip, shows = pinned_tip(store, mount)
    else:
        tip = store.tip(mount.scope)
    root.mkdir(parents=True, exist_ok=False)
    files = tree_files(store, tip)
    made: set[Path] = {root}
    for path, blob in files.items():  # a new directory: plain writes, no temp files needed
        full = root / path[1:]
        if full.parent not in made:
            full.parent.mkdir(parents=True, exist_ok=True)
            made.add(full.parent)
        with open(full, "wb") as fh:
            fh.write(store.blob(blob))
    marker = Marker(
        mount.store,
        mount.store_path,
        mount.scope,
        mount.access,
        session_id,
        tip,
        files,
        mount.at or None,
        shows if mount.at else None,
    )
    write_marker(mount, marker)
    if mount.access == "ro":
        lock_tree(root)
    return marker


# ---------------------------------------------------------------------- local side
@dataclass
class Scan:
    """The files found in a mount: blob ids, plus entries that cannot be memories."""

    files: dict[str, str] = field(default_factory=dict)  # api path -> blob id of the local bytes
    data: dict[str, bytes] = field(default_factory=dict)  # bytes of files that differ from the base
    unusable: dict[str, str] = field(default_factory=dict)  # api path -> why it is not a memory


def scan(root: Path, base: dict[str, str]) -> Scan:
    """Hash every regular file under ``root`` (the marker directory excluded)."""
    out = Scan()
    for path, full in _entries(root, out):
        try:
            with open(full, "rb") as fh:
                data = fh.read()
        except OSError as exc:
            out.unusable[path] = f"cannot be read: {exc.strerror}"
            continue
        blob = blob_id(data)
        out.files[path] = blob
        if base.get(path) != blob:
            out.data[path] = data
    return out


def _entries(root: Path, out: Scan) -> Iterator[tuple[str, str]]:
    top = str(root)
    for dirpath, dirnames, filenames in os.walk(top):
        rel = os.path.relpath(dirpath, top)
        prefix = "" if rel == "." else "/" + rel.replace(os.sep, "/")
        if prefix == "":
            if MARKER_DIR in dirnames:
                _reserved(os.path.join(top, MARKER_DIR), out, f"/{MARKER_DIR}")
            for d in dirnames:
                if f"/{d}/" in SHORTTERM_PREFIXES:
                    why = f"/{d}/ is reserved for conversations and checkpoints: not synced"
                    _reserved(os.path.join(top, d), out, f"/{d}", why)
            dirnames[:] = [d for d in dirnames if d != MARKER_DIR and f"/{d}/" not in SHORTTERM_PREFIXES]
        for d in list(dirnames):
            if os.path.islink(os.path.join(dirpath, d)):
                out.unusable[f"{prefix}/{d}"] = "a symbolic link is not a memory"
                dirnames.remove(d)
        for name in filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            mode = st.st_mode
            if stat.S_ISLNK(mode):
                out.unusable[f"{prefix}/{name}"] = "a symbolic link is not a memory"
            elif stat.S_ISREG(mode) and st.st_nlink > 1:
                out.unusable[f"{prefix}/{name}"] = (
                    f"a hard link ({st.st_nlink} names for one file) is not a memory: copy the file instead"
                )
            elif not stat.S_ISREG(mode):
                out.unusable[f"{prefix}/{name}"] = "not a regular file"
            else:
                yield f"{prefix}/{name}", full


def _reserved(
    marker_dir: str, out: Scan, top: str, why: str = "/.gitmem/ is reserved for gitmem's marker: not synced"
) -> None:
    """Files an agent put under ``/.gitmem/`` (reserved for the marker), or under the short-term
    prefixes (``/conversations/``, ``/checkpoints/``): reported, never synced."""
    for dirpath, _dirnames, filenames in os.walk(marker_dir):
        rel = os.path.relpath(dirpath, marker_dir)
        base = top + ("" if rel == "." else "/" + rel.replace(os.sep, "/"))
        for name in filenames:
            if (
                top == f"/{MARKER_DIR}"
                and rel == "."
                and (name == MARKER_FILE or name.startswith(("put-", f".{MARKER_FILE}.tmp")))
            ):
                continue
            out.unusable[f"{base}/{name}"] = why


def snapshot(root: Path) -> frozenset[tuple[str, int, int]]:
    """(path, mtime_ns, size) of every file: cheap change detection for ``--watch``."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(str(root)):
        if dirpath == str(root):
            dirnames[:] = [d for d in dirnames if d != MARKER_DIR]
        for name in filenames:
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            out.add((full, st.st_mtime_ns, st.st_size))
    return frozenset(out)


# ---------------------------------------------------------------------- file operations
def put_file(root: Path, path: str, data: bytes, *, readonly: bool = False) -> None:
    """Write ``data`` at the api ``path`` under ``root`` atomically, creating directories.

    Never removes anything in the way (a directory at ``path``, a file where a directory is
    needed, a symbolic link among the parents): it raises OSError instead, and the caller leaves
    that path alone. The temp file lives in the marker directory, so a crash leaves no stray file
    that a later sync would take for a memory.
    """
    full = root / path[1:]
    parent = full.parent
    while parent != root:
        if parent.is_symlink():
            raise NotADirectoryError(f"{parent} is a symbolic link")
        parent = parent.parent
    full.parent.mkdir(parents=True, exist_ok=True)
    if full.is_symlink() or full.is_dir():
        raise IsADirectoryError(f"{full} is in the way")
    (root / MARKER_DIR).mkdir(mode=DIR_RW, exist_ok=True)
    tmp = root / MARKER_DIR / f"put-{os.getpid()}-{next(_counter)}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.chmod(tmp, FILE_RO if readonly else FILE_RW)
    os.replace(tmp, full)


def remove_file(root: Path, path: str) -> None:
    """Remove the file at ``path`` and any directories it leaves empty (never ``root``)."""
    full = root / path[1:]
    try:
        full.unlink()
    except FileNotFoundError:
        return  # IsADirectoryError and the like reach the caller
    parent = full.parent
    while parent != root and parent.is_dir():
        try:
            parent.rmdir()
        except OSError:
            break
        parent = parent.parent


def unlock_tree(root: Path) -> None:
    """Make a read-only mount writable by its owner (for a refresh or removal)."""
    for dirpath, _dirs, _files in os.walk(str(root)):
        os.chmod(dirpath, DIR_RW)


def lock_tree(root: Path) -> None:
    """Files 0444 and directories 0555, except the marker directory."""
    top = str(root)
    for dirpath, _dirnames, filenames in os.walk(top, topdown=False):
        if os.path.relpath(dirpath, top).split(os.sep)[0] == MARKER_DIR:
            continue
        for name in filenames:
            full = os.path.join(dirpath, name)
            if not os.path.islink(full):
                os.chmod(full, FILE_RO)
        os.chmod(dirpath, DIR_RO)


def remove_tree(root: Path) -> None:
    if root.exists():
        unlock_tree(root)
        shutil.rmtree(root)
