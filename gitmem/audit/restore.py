"""Restoring a store from ``gitmem export --format bundle`` (docs/operations.md#restore-from-a-bundle).

A bundle carries every scope (``refs/heads/*``) and the audit ledger (``refs/gitmem/ledger``); the
private files (``gitmem.yaml``, ``gitmem/secret``, ``gitmem/denylist``, ``gitmem/ledger_head``) come
from a backup directory when there is one. These functions work on a new repository that is not yet
in the workspace; :func:`gitmem.store.restore_store` puts it in place only when all went well.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gitmem import config
from gitmem.audit.verify import VerifyReport, verify
from gitmem.config import StoreSettings
from gitmem.engine import checkpoints, ledger
from gitmem.engine.core import StoreCore
from gitmem.errors import GitmemError, InvalidInputError
from gitmem.model.paths import validate_scope
from gitmem.model.tlog import note

HEADS = "refs/heads/"
_LINE = re.compile(r"^([0-9a-f]{40}) (\S+)$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_ANCHOR = re.compile(r"^\d+ [0-9a-f]{64}$")
LOG_KEY = checkpoints.KEY_FILE  # the transparency log's key: restored into gitmem/tlog/ (0600)
PRIVATE_FILES = (ledger.SECRET_FILE, ledger.DENYLIST_FILE, ledger.ANCHOR_FILE, LOG_KEY)
MAX_PRIVATE_BYTES = 64 * 1024 * 1024  # a deny-list of a million ids is 41 MB


@dataclass(frozen=True)
class Restored:
    """What a restore brought back, and the verification of the restored store."""

    settings: StoreSettings
    bundle_sha256: str
    scopes: list[str]
    ledger_entries: int  # entries that came in the bundle (the restore adds one more)
    private_files: list[str]  # the backup files installed (gitmem.yaml, secret, ...)
    verify: VerifyReport = field(default_factory=lambda: VerifyReport(""))


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in config.env_snapshot().items() if k not in ("GIT_DIR", "GIT_WORK_TREE")}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def bundle_refs(bundle: Path) -> dict[str, str]:
    """The refs a bundle holds (scopes and the ledger); refuses anything gitmem export never writes."""
    if not bundle.is_file():
        raise InvalidInputError(f"{bundle}: no such bundle file")
    proc = _git(["bundle", "list-heads", str(bundle.resolve())])
    if proc.returncode != 0:
        raise InvalidInputError(f"{bundle} is not a git bundle: {proc.stderr.strip() or 'unreadable'}")
    refs: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            raise InvalidInputError(f"{bundle}: unexpected line in the bundle's ref list: {line!r}")
        oid, ref = m.groups()
        if ref == "HEAD":
            continue
        if ref.startswith(HEADS):
            try:
                validate_scope(ref[len(HEADS) :])
            except InvalidInputError as exc:
                raise InvalidInputError(f"{bundle}: {ref} is not a scope: {exc.message}") from None
        elif ref not in (ledger.LEDGER_REF, checkpoints.CHECKPOINTS_REF):
            raise InvalidInputError(
                f"{bundle}: holds {ref}, which no gitmem store has (a store bundle holds refs/heads/* "
                f"and {ledger.LEDGER_REF})"
            )
        refs[ref] = oid
    if not any(r.startswith(HEADS) for r in refs):
        raise InvalidInputError(f"{bundle}: holds no scope (refs/heads/*): there is nothing to restore")
    return refs


def fetch_bundle(git_dir: Path, bundle: Path, refs: dict[str, str]) -> None:
    """Bring the bundle's objects and refs into the new bare repository ``git_dir``."""
    path = str(bundle.resolve())
    proc = _git(["--git-dir", str(git_dir), "bundle", "verify", "--quiet", path])
    if proc.returncode != 0:  # an incremental bundle names commits the new store lacks
        raise InvalidInputError(f"{bundle} cannot be restored on its own: {proc.stderr.strip()}")
    specs = [f"+{ref}:{ref}" for ref in refs]
    proc = _git(
        ["--git-dir", str(git_dir), "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", path, *specs]
    )
    if proc.returncode != 0:
        raise GitmemError(f"git fetch from {bundle} failed: {proc.stderr.strip()}")
    for ref, oid in refs.items():
        got = _git(["--git-dir", str(git_dir), "rev-parse", "--verify", "--quiet", ref]).stdout.strip()
        if got != oid:
            raise GitmemError(f"restoring {ref} from {bundle} failed: it is at {got or 'nothing'}, not {oid}")


def read_private(backup: Path | None) -> tuple[dict[str, bytes], StoreSettings | None]:
    """The backup's private files, checked (nothing is installed yet), and its settings if any."""
    if backup is None:
        return {}, None
    if not backup.is_dir():
        raise InvalidInputError(
            f"{backup}: not a directory (the backup of gitmem.yaml, secret, denylist, ...)"
        )
    files: dict[str, bytes] = {}
    for name in PRIVATE_FILES:
        path = backup / name
        if not path.is_file():
            continue
        if path.stat().st_size > MAX_PRIVATE_BYTES:
            raise InvalidInputError(f"{path}: too large for a gitmem {name} file")
        data = path.read_bytes()
        try:
            lines = data.decode("ascii").splitlines()
        except UnicodeDecodeError:
            raise InvalidInputError(f"{path}: not a gitmem {name} file (not ASCII)") from None
        _check_private(path, name, lines)
        files[name] = data
    settings = None
    yaml_path = backup / config.SETTINGS_FILE
    if yaml_path.is_file():
        settings = config.load_settings(yaml_path)
        files[config.SETTINGS_FILE] = yaml_path.read_bytes()
    return files, settings


def _check_private(path: Path, name: str, lines: list[str]) -> None:
    if name == ledger.SECRET_FILE:
        ok = len(lines) == 1 and bool(_HEX64.match(lines[0].strip()))
    elif name == ledger.ANCHOR_FILE:
        ok = len(lines) == 1 and bool(_ANCHOR.match(lines[0].strip()))
    elif name == LOG_KEY:
        try:
            ok = len(lines) == 1 and bool(note.ed25519_signer(lines[0]))
        except InvalidInputError:
            ok = False
    else:
        ok = all(ln.startswith("#") or _HEX40.match(ln.strip()) or not ln.strip() for ln in lines)
    if not ok:
        raise InvalidInputError(f"{path}: not a gitmem {name} file")


def install_private(git_dir: Path, files: dict[str, bytes]) -> None:
    """Write the checked private files into the new store (the secret with mode 0600)."""
    gdir = git_dir / "gitmem"
    gdir.mkdir(exist_ok=True)
    if LOG_KEY not in files:  # without the log's key the restored store starts a new log identity
        _git(["--git-dir", str(git_dir), "update-ref", "-d", checkpoints.CHECKPOINTS_REF])
    for name, data in files.items():
        if name == config.SETTINGS_FILE:
            continue  # the caller writes the settings (with the store's name checked)
        path = gdir / name
        if name == LOG_KEY:
            path = gdir / checkpoints.TLOG_DIR / name
            path.parent.mkdir(exist_ok=True, mode=0o700)
        fd = os.open(
            path,
            os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
            0o600 if name in (ledger.SECRET_FILE, LOG_KEY) else 0o644,
        )
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def ledger_store_id(core: StoreCore) -> str | None:
    """The store id the bundle's ledger recorded at creation (kept by a restore without gitmem.yaml)."""
    for entry in ledger.entries(core, kind="store_created"):
        value = entry.data.get("id")
        if isinstance(value, str) and value.startswith("memstore_"):
            return value
    return None


def record_and_verify(
    core: StoreCore, bundle: Path, digest: str, refs: dict[str, str], files: list[str], actor: str | None
) -> tuple[int, VerifyReport]:
    """Append the restore to the ledger (refused when ``ledger_head`` is not in the bundle's
    ledger), then run every ``verify`` check. Returns the bundle's entry count and the report."""
    before = len(ledger.entries(core))
    data = {
        "id": core.settings.id,
        "name": core.settings.name,
        "restored_from": {"bundle": bundle.name, "sha256": digest, "refs": dict(sorted(refs.items()))},
        "private_files": sorted(files),
    }
    ledger.append(core, "store_created", data, actor=actor)
    ledger.remember_settings(core)
    return before, verify(core, raise_on_failure=False)


def forget_caches(git_dir: Path) -> None:
    """The ledger keeps each store's secret in memory by path: a temporary path must not keep one."""
    ledger._secrets.pop(git_dir, None)
