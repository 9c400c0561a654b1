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
PROPOSALS = "refs/gitmem/proposals/"
PROPOSALS_DIR = "proposals"  # the backup's copy of $GIT_DIR/gitmem/proposals/ (the proposals' records)
_PROPOSAL_FILE = re.compile(r"^prop_[0-9A-Z]{26}\.json$")
MAX_PROPOSAL_BYTES = 16 * 1024 * 1024
RECEIPTS = "receipts.jsonl"  # who pushed each plain-git commit (gitmem.engine.receipts)
PATTERNS = "denypatterns"  # remembered pattern redactions (gitmem.engine.denylist.PATTERNS)
_LINE = re.compile(r"^([0-9a-f]{40}) (\S+)$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_ANCHOR = re.compile(r"^\d+ [0-9a-f]{64}$")
LOG_KEY = checkpoints.KEY_FILE  # the transparency log's key: restored into gitmem/tlog/ (0600)
PRIVATE_FILES = (
    ledger.SECRET_FILE,
    ledger.DENYLIST_FILE,
    ledger.ANCHOR_FILE,
    LOG_KEY,
)  # and receipts, proposals
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
        elif ref.startswith(PROPOSALS):
            _check_proposal_ref(bundle, ref)
        elif ref not in (ledger.LEDGER_REF, checkpoints.CHECKPOINTS_REF):
            raise InvalidInputError(
                f"{bundle}: holds {ref}, which no gitmem store has (a store bundle holds refs/heads/*, "
                f"{ledger.LEDGER_REF} and {PROPOSALS}<scope>/<proposal>)"
            )
        refs[ref] = oid
    if not any(r.startswith(HEADS) for r in refs):
        raise InvalidInputError(f"{bundle}: holds no scope (refs/heads/*): there is nothing to restore")
    return refs


def _check_proposal_ref(bundle: Path, ref: str) -> None:
    """``refs/gitmem/proposals/<scope>/<prop_id>``: a review-gated write's chain (docs/review.md)."""
    from gitmem.ids import is_id

    scope, _, pid = ref[len(PROPOSALS) :].rpartition("/")
    try:
        validate_scope(scope)
    except InvalidInputError as exc:
        raise InvalidInputError(f"{bundle}: {ref} is not a proposal of a scope: {exc.message}") from None
    if not is_id(pid, "prop"):
        raise InvalidInputError(f"{bundle}: {ref} does not end in a proposal id (prop_...)")


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
    ppath = backup / PATTERNS
    if ppath.is_file():
        if ppath.stat().st_size > MAX_PRIVATE_BYTES:
            raise InvalidInputError(f"{ppath}: too large for a gitmem {PATTERNS} file")
        data = ppath.read_bytes()
        _check_patterns(ppath, data)
        files[PATTERNS] = data
    rpath = backup / RECEIPTS
    if rpath.is_file():
        if rpath.stat().st_size > MAX_PRIVATE_BYTES:
            raise InvalidInputError(f"{rpath}: too large for a gitmem {RECEIPTS} file")
        data = rpath.read_bytes()
        _check_receipts(rpath, data)
        files[RECEIPTS] = data
    pdir = backup / PROPOSALS_DIR
    if pdir.is_dir():
        for path in sorted(pdir.iterdir()):
            if path.name.startswith(".") or not path.is_file():
                continue
            if not _PROPOSAL_FILE.match(path.name) or path.stat().st_size > MAX_PROPOSAL_BYTES:
                raise InvalidInputError(f"{path}: not a gitmem proposal record (proposals/prop_<id>.json)")
            data = path.read_bytes()
            _check_proposal_record(path, data)
            files[f"{PROPOSALS_DIR}/{path.name}"] = data
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


def _check_patterns(path: Path, data: bytes) -> None:
    """Every line a remembered pattern redaction: ``{"id": "redact_...", "pattern": REGEX}``."""
    import json

    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InvalidInputError(f"{path}: not a gitmem {PATTERNS} file (not UTF-8)") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            re.compile(str(entry["pattern"]))
            ok = isinstance(entry, dict) and str(entry.get("id", "")).startswith("redact_")
        except (ValueError, KeyError, TypeError, re.error):
            ok = False
        if not ok:
            raise InvalidInputError(f"{path}: line {n} is not a remembered pattern redaction")


def _check_receipts(path: Path, data: bytes) -> None:
    """Every line a push receipt (docs/identity.md); the last may be torn, as after a crash."""
    from gitmem.engine.receipts import _parse

    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InvalidInputError(f"{path}: not a gitmem {RECEIPTS} file (not UTF-8)") from None
    for n, line in enumerate(lines[:-1], 1):
        if line.strip() and _parse(line) is None:
            raise InvalidInputError(f"{path}: line {n} is not a push receipt")


def _check_proposal_record(path: Path, data: bytes) -> None:
    import json

    from gitmem.engine.proposals import Proposal

    try:
        record = Proposal.from_dict(json.loads(data.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"{path}: not a gitmem proposal record: {exc}") from None
    if f"{record.id}.json" != path.name:
        raise InvalidInputError(f"{path}: holds proposal {record.id!r}, not the one its name says")


def install_private(git_dir: Path, files: dict[str, bytes]) -> None:
    """Write the checked private files into the new store (the secret with mode 0600)."""
    gdir = git_dir / "gitmem"
    gdir.mkdir(exist_ok=True)
    if LOG_KEY not in files:  # without the log's key the restored store starts a new log identity
        _git(["--git-dir", str(git_dir), "update-ref", "-d", checkpoints.CHECKPOINTS_REF])
    for name, data in files.items():
        if name == config.SETTINGS_FILE:
            continue  # the caller writes the settings (with the store's name checked)
        if name.startswith(PROPOSALS_DIR + "/"):
            (gdir / PROPOSALS_DIR).mkdir(exist_ok=True)
        path = gdir / name
        if name == LOG_KEY:
            path = gdir / checkpoints.TLOG_DIR / name
            path.parent.mkdir(exist_ok=True, mode=0o700)
        # as their originals: short redacted values could be brute-forced from the deny-list's ids,
        # and a remembered pattern is the redacted text itself
        private = name in (ledger.SECRET_FILE, ledger.DENYLIST_FILE, PATTERNS, LOG_KEY)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)


def ledger_store_id(core: StoreCore) -> str | None:
    """The store id the bundle's ledger recorded at creation, or at its last restore (kept by a
    restore without gitmem.yaml when no store has it, docs/stores.md)."""
    found = None
    for entry in ledger.entries(core, kind="store_created"):
        value = entry.data.get("id")
        if isinstance(value, str) and value.startswith("memstore_"):
            found = value
    return found


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
