"""Export and import: JSONL of memories, git bundles, and seeding a store from a directory tree.

Imports are batches (:func:`gitmem.engine.batch.apply_batch`): each scope's branch moves once, atomically.
A record or file the store refuses (bad path, too large, not UTF-8, ...) is reported in the result
with the reason, never silently dropped; the rest is imported.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from gitmem.engine.batch import BatchOp, apply_batch
from gitmem.engine.core import StoreCore
from gitmem.engine.memories import Memory, list_memories
from gitmem.errors import GitmemError, InvalidInputError, NotFoundError
from gitmem.model.frontmatter import parse_description
from gitmem.model.paths import validate_prefix, validate_scope
from gitmem.model.versions import Version

Progress = Callable[[int, int], None]
FIELDS = (
    "scope", "path", "content", "content_sha256", "size", "description", "memory_id", "version_id",
    "created_at", "updated_at",
)  # fmt: skip


@dataclass(frozen=True)
class ExportResult:
    memories: int
    scopes: list[str]


@dataclass(frozen=True)
class ImportRefusal:
    """A record or file that was not imported, and why (``exit_code`` of the error that refused it)."""

    scope: str
    path: str
    reason: str
    exit_code: int


@dataclass(frozen=True)
class ImportResult:
    versions: list[Version] = field(default_factory=list)
    unchanged: int = 0
    refused: list[ImportRefusal] = field(default_factory=list)


def _iso(value: Any) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def memory_record(memory: Memory) -> dict[str, Any]:
    """One memory as a JSON-able export record."""
    return {
        "scope": memory.scope, "path": memory.path, "content": memory.content,
        "content_sha256": memory.content_sha256, "size": memory.size, "description": memory.description,
        "memory_id": memory.memory_id, "version_id": memory.version_id,
        "created_at": _iso(memory.created_at), "updated_at": _iso(memory.updated_at),
    }  # fmt: skip


def export_jsonl(
    store: StoreCore,
    out: IO[bytes] | IO[str],
    scopes: Iterable[str] | None = None,
    progress: Progress | None = None,
    at: str | None = None,
) -> ExportResult:
    """Write one JSON object per memory (every scope by default) to ``out``, in scope then path order;
    with ``at``, the memories as each scope held them then (docs/point-in-time.md)."""
    wanted = list(scopes) if scopes is not None else store.scopes()
    known = set(store.scopes())
    for scope in wanted:
        validate_scope(scope)
        if scope not in known:
            raise NotFoundError(f"scope {scope!r} does not exist in store {store.name!r}")
    if at is not None:
        from gitmem.engine import past

        listed = [past.list_at(store, "/", scope=scope, at=at, with_content=True) for scope in wanted]
    else:
        listed = [list_memories(store, "/", scope=scope, with_content=True) for scope in wanted]
    listings = [[m for m in items if isinstance(m, Memory)] for items in listed]
    total = sum(len(x) for x in listings)
    write: Callable[[str], object]
    if isinstance(out, io.TextIOBase):
        write = cast("IO[str]", out).write
    else:
        binary = cast("IO[bytes]", out)

        def write(line: str) -> object:
            return binary.write(line.encode("utf-8"))

    done = 0
    for memories in listings:
        for memory in memories:
            line = json.dumps(memory_record(memory), ensure_ascii=False) + "\n"
            write(line)
            done += 1
            if progress is not None:
                progress(done, total)
    return ExportResult(done, wanted)


def export_bundle(store: StoreCore, dest_path: str | os.PathLike[str]) -> ExportResult:
    """Write a git bundle with every ref (scopes and ``refs/gitmem/*``), clonable with ``git clone``."""
    scopes = store.scopes()
    if not list(store.repo.references):
        raise NotFoundError(f"store {store.name!r} has no versions yet: there is nothing to bundle")
    # libgit2 cannot write bundles: this is one of the accepted uses of the git command.
    proc = subprocess.run(
        ["git", "bundle", "create", "--quiet", os.fspath(Path(dest_path).resolve()), "--all"],
        cwd=store.path, capture_output=True, text=True,
        env={**_git_env(), "GIT_DIR": str(store.path)},
    )  # fmt: skip
    if proc.returncode != 0:
        raise GitmemError(f"git bundle create failed: {proc.stderr.strip()}")
    count = sum(len(list_memories(store, "/", scope=s)) for s in scopes)
    return ExportResult(count, scopes)


def _git_env() -> dict[str, str]:
    from gitmem.config import env_snapshot

    return {
        k: v for k, v in env_snapshot().items() if k not in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE")
    }


def _join(prefix: str, path: str) -> str:
    """``path`` under ``prefix``; a path without its leading ``/`` is left for validation to refuse."""
    return prefix.rstrip("/") + path if path.startswith("/") else path


def parse_jsonl(src: IO[bytes] | IO[str], *, source: str = "input") -> list[dict[str, Any]]:
    """Every record of a JSONL stream, validated for shape; errors name the line."""
    records = []
    for n, raw in enumerate(src, 1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError as exc:  # refused, never replaced: the content would change
            raise InvalidInputError(f"{source} line {n}: not valid UTF-8 (byte {exc.start})") from None
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InvalidInputError(f"{source} line {n}: not valid JSON ({exc.msg})") from None
        if not isinstance(rec, dict):
            raise InvalidInputError(f"{source} line {n}: expected a JSON object")
        for key in ("path", "content"):
            if not isinstance(rec.get(key), str):
                raise InvalidInputError(f"{source} line {n}: '{key}' is missing or not a string")
        for key in ("scope", "description"):
            if rec.get(key) is not None and not isinstance(rec[key], str):
                raise InvalidInputError(f"{source} line {n}: '{key}' must be a string")
        records.append(rec)
    return records


def import_jsonl(
    store: StoreCore,
    src: IO[bytes] | IO[str],
    scope: str | None = None,
    *,
    prefix: str = "/",
    actor: str | None = None,
    session: str | None = None,
    progress: Progress | None = None,
) -> ImportResult:
    """Import memories from JSONL (as :func:`export_jsonl` writes it) with one batch per scope.

    ``scope`` overrides each record's scope (default ``main``); ``prefix`` is prepended to each path.
    The whole input is parsed before anything is written: a malformed line imports nothing.
    """
    validate_prefix(prefix)
    if scope is not None:
        validate_scope(scope)
    by_scope: dict[str, list[BatchOp]] = {}
    for rec in parse_jsonl(src, source=getattr(src, "name", "input")):
        content = rec["content"]
        description = rec.get("description")
        if description is not None and parse_description(content) == description:
            description = None  # already in the file's front matter: keep the bytes as they are
        target = scope or rec.get("scope") or "main"
        memory_id = rec.get("memory_id") if isinstance(rec.get("memory_id"), str) else None
        op = BatchOp(
            "write", _join(prefix, rec["path"]), content, description=description, memory_id=memory_id
        )
        by_scope.setdefault(target, []).append(op)
    return _apply(store, by_scope, actor, session, progress)


def _apply(
    store: StoreCore,
    by_scope: dict[str, list[BatchOp]],
    actor: str | None,
    session: str | None,
    progress: Progress | None,
    refused: list[ImportRefusal] | None = None,
) -> ImportResult:
    for name in by_scope:
        validate_scope(name)
    total = sum(len(ops) for ops in by_scope.values())
    versions: list[Version] = []
    out_refused = list(refused or [])
    unchanged = 0
    offset = 0
    for name, ops in by_scope.items():

        def step(done: int, _total: int, base: int = offset) -> None:
            if progress is not None:
                progress(base + done, total)

        result = apply_batch(
            store, ops, scope=name, actor=actor, session=session, skip_refused=True, progress=step
        )
        versions += result.versions
        out_refused += [
            ImportRefusal(name, r.op.path, r.error.message, r.error.exit_code) for r in result.refused
        ]
        unchanged += len(ops) - len(result.versions) - len(result.refused)
        offset += len(ops)
    if progress is not None:
        progress(total, total)
    return ImportResult(versions, unchanged, out_refused)


def import_tree(
    store: StoreCore,
    directory: str | os.PathLike[str],
    scope: str = "main",
    prefix: str = "/",
    *,
    actor: str | None = None,
    session: str | None = None,
    progress: Progress | None = None,
    exclude: Iterable[str] = (),
    include_hidden: bool = False,
) -> ImportResult:
    """Seed a scope from a directory of UTF-8 text files: ``dir/a/b.md`` becomes ``<prefix>a/b.md``.

    ``exclude`` takes gitignore-style patterns (``*.log``, ``build/``, ``/top-only.md``); files and
    directories whose name starts with ``.`` (``.env``) are skipped unless ``include_hidden``.

    ``.git`` directories are skipped; symlinks and other non-regular files are refused (memories are
    plain files), as are names and contents that break the store's rules.
    """
    validate_prefix(prefix)
    validate_scope(scope)
    root = Path(directory)
    if not root.is_dir():
        raise NotFoundError(f"{root} is not a directory")
    ops: list[BatchOp] = []
    refused: list[ImportRefusal] = []
    patterns = [p.strip() for p in exclude if p.strip() and not p.strip().startswith("#")]
    for dirpath, dirnames, filenames in os.walk(root):
        base = Path(dirpath)
        dirnames[:] = sorted(
            d
            for d in dirnames
            if d != ".git"
            and (include_hidden or not d.startswith("."))
            and not _excluded(patterns, (base / d).relative_to(root).as_posix(), True)
        )
        for d in list(dirnames):
            if (base / d).is_symlink():
                dirnames.remove(d)
                refused.append(_refusal(scope, prefix, root, base / d, "is a symbolic link"))
        for name in sorted(filenames):
            file = base / name
            if (not include_hidden and name.startswith(".")) or _excluded(
                patterns, file.relative_to(root).as_posix(), False
            ):
                continue
            if file.is_symlink() or not file.is_file():
                refused.append(_refusal(scope, prefix, root, file, "is not a regular file"))
                continue
            rel = file.relative_to(root).as_posix()
            ops.append(BatchOp("write", _join(prefix, "/" + rel), file.read_bytes()))
    return _apply(store, {scope: ops}, actor, session, progress, refused)


def _excluded(patterns: list[str], rel: str, is_dir: bool) -> bool:
    """gitignore-style: ``name`` or ``*.ext`` match at any depth, ``a/b`` or ``/a`` from the top,
    a trailing ``/`` matches directories only."""
    name = rel.rsplit("/", 1)[-1]
    for pattern in patterns:
        dir_only = pattern.endswith("/")
        pat = pattern.rstrip("/")
        if dir_only and not is_dir:
            continue
        if "/" in pat:
            if fnmatch.fnmatchcase(rel, pat.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pat):
            return True
    return False


def _refusal(scope: str, prefix: str, root: Path, file: Path, why: str) -> ImportRefusal:
    path = _join(prefix, "/" + file.relative_to(root).as_posix())
    return ImportRefusal(scope, path, f"{path}: {why}; memories are plain files", InvalidInputError.exit_code)
