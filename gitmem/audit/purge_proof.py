"""The proof behind every "purge verified": a repository holds none of the given objects or texts.

:func:`prove_purged` reads every object plain git can find in a repository (``git cat-file
--batch-all-objects --batch``: loose objects, every pack, alternates; reachable or not) and every
file that names objects (``packed-refs``, ``refs/``, ``logs/``, ``FETCH_HEAD``, ``ORIG_HEAD``,
``shallow``), and reports each given object id and each given byte string it finds, and where.
Texts are also looked for in the records gitmem keeps beside history, which a redaction scrubs
(gitmem.audit.record_scrub): the proposals' (``$GIT_DIR/gitmem/proposals/``) and the dreams' (the
copies in ``$GIT_DIR/gitmem/dreams/`` and the workspace's records of dreams on the store).
It is the one check used for a clone's ``gitmem fetch --purge``, for replicas, and by the
lifecycle tests; it never trusts what a rewrite says it removed (docs/redaction.md, "What a purge
proves").
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gitmem import config
from gitmem.errors import GitmemError, IntegrityError

_HEX40 = re.compile(rb"[0-9a-f]{40}")
_REF_FILES = ("packed-refs", "FETCH_HEAD", "ORIG_HEAD", "shallow", "HEAD")
_REF_DIRS = ("refs", "logs")


@dataclass(frozen=True)
class PurgeProof:
    """What :func:`prove_purged` found. ``ok``: none of the ids and none of the texts."""

    repository: str
    objects: int  # how many objects were read
    found_ids: list[str] = field(default_factory=list)  # given ids git can still read
    named_ids: list[str] = field(default_factory=list)  # "<file>: <id>": given ids a ref file names
    found_secrets: list[str] = field(default_factory=list)  # "<text #n> in <kind> <id>"

    @property
    def ok(self) -> bool:
        return not (self.found_ids or self.named_ids or self.found_secrets)

    def reason(self) -> str:
        parts = []
        if self.found_ids:
            parts.append(f"{len(self.found_ids)} purged object(s) still readable ({self.found_ids[0]}, ...)")
        if self.named_ids:
            parts.append(
                f"{len(self.named_ids)} reference(s) still name purged objects ({self.named_ids[0]})"
            )
        if self.found_secrets:
            parts.append(f"redacted text (secret) still present: {self.found_secrets[0]}")
        return "; ".join(parts) or "nothing found"

    def require(self) -> PurgeProof:
        """Raise IntegrityError (exit 7) with the reason unless the proof holds."""
        if not self.ok:
            raise IntegrityError(f"the purge of {self.repository} is not proved: {self.reason()}")
        return self


def git_dir_of(path: str | os.PathLike[str]) -> Path:
    """A bare repository's path, or the ``.git`` directory of a work tree."""
    p = Path(path)
    return p / ".git" if (p / ".git").is_dir() else p


def prove_purged(
    repository: str | os.PathLike[str],
    *,
    object_ids: Iterable[str] = (),
    secrets: Iterable[bytes] = (),
) -> PurgeProof:
    """Check that ``repository`` holds none of ``object_ids`` and no object containing any of
    ``secrets``. Raises IntegrityError when git cannot read the repository (nothing is proved
    then)."""
    git_dir = git_dir_of(repository)
    wanted = {o.lower() for o in object_ids}
    texts = [s for s in secrets if s]
    env = {**config.plain_git_env(), "GIT_DIR": str(git_dir)}
    for k in ("GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES"):
        env.pop(k, None)
    fmt = "%(objecttype) %(objectname) %(objectsize)"
    args = ["git", "cat-file", "--batch-all-objects", "--unordered"]
    args.append(f"--batch={fmt}" if texts else f"--batch-check={fmt}")
    found_ids: list[str] = []
    found_secrets: list[str] = []
    count = 0
    try:
        proc = subprocess.Popen(args, cwd=git_dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        raise IntegrityError(f"cannot read {git_dir} with git: {exc}") from None
    with proc:
        assert proc.stdout is not None
        out = proc.stdout
        while True:
            header = out.readline()
            if not header:
                break
            kind, oid_b, size = header.split()
            oid = oid_b.decode()
            count += 1
            if oid in wanted:
                found_ids.append(oid)
            if texts:
                data = out.read(int(size) + 1)[:-1]
                for n, text in enumerate(texts, 1):
                    if text in data:
                        found_secrets.append(f"text #{n} in {kind.decode()} {oid}")
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode != 0:
        raise IntegrityError(f"git cat-file failed in {git_dir}, nothing is proved: {err.strip()}")
    for f in _record_files(git_dir) if texts else []:
        try:
            data = f.read_bytes()
        except OSError:
            continue
        for n, text in enumerate(texts, 1):
            if text in data:
                found_secrets.append(f"text #{n} in file {f}")
    return PurgeProof(str(git_dir), count, sorted(found_ids), _named(git_dir, wanted), found_secrets)


def _record_files(git_dir: Path) -> list[Path]:
    """The proposal and dream records of the store at ``git_dir`` (module docstring)."""
    from gitmem.engine import dream_records

    store_id = None
    for settings in (git_dir / config.SETTINGS_FILE, git_dir / "gitmem" / config.SETTINGS_FILE):
        if settings.is_file():
            with contextlib.suppress(GitmemError):
                store_id = config.load_settings(settings).id
            break
    proposals = git_dir / "gitmem" / "proposals"
    files = sorted(proposals.glob("*.json")) if proposals.is_dir() else []
    return files + dream_records.store_record_files(git_dir, store_id)


def _named(git_dir: Path, wanted: set[str]) -> list[str]:
    if not wanted:
        return []
    files = [git_dir / n for n in _REF_FILES]
    for d in _REF_DIRS:
        root = git_dir / d
        if root.is_dir():
            files.extend(p for p in root.rglob("*") if p.is_file())
    out = []
    for f in files:
        try:
            data = f.read_bytes()
        except OSError:
            continue
        for m in _HEX40.findall(data):
            if m.decode() in wanted:
                out.append(f"{f.relative_to(git_dir)}: {m.decode()}")
    return sorted(set(out))
