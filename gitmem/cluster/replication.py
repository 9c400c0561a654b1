"""Replicas carry a store whole: its refs and objects, and the server-side state that only the
repository's private directory holds (docs/cluster.md#replication-and-failover).

The home sends each replica what changed since the replica's own refs: a ``git bundle`` of every
ref (``--all``) minus the commits the replica already has, and the state files below. The replica
fetches the bundle into its copy with every ref forced (a redaction's rewrite included), prunes
refs the home no longer has, writes the state files atomically, and fences its copy shut: it takes
no write until a failover makes it the home. Both requests are signed with the cluster's secret
(:func:`sign`), so nothing but a node of the cluster can write a replica.

git bundles are made and read with the git command (libgit2 has no bundles).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gitmem import config
from gitmem.cluster import leftovers
from gitmem.errors import ForbiddenError, IntegrityError, InvalidInputError

# What a promoted replica needs besides git: the settings, the ledger's key and anchor, the
# deny-list and deny-patterns (a redaction must stay redacted), the push receipts (they fix the ids
# and actors of pushed commits) and the push log.
STATE_FILES = (
    "gitmem.yaml",
    "gitmem/secret",
    "gitmem/ledger_head",
    "gitmem/tlog/log.key",  # the transparency log signs with it (docs/transparency.md)
    "gitmem/denylist",
    "gitmem/denypatterns",
    "gitmem/receipts.jsonl",
    "gitmem/pushes.jsonl",
)
# Directories whose every file is replicated the same way (a file the home no longer has is removed
# from the replica): the review proposals' records (a dream's proposal among them), whose versions
# are in refs the bundle carries, and the records of the store's dreams and its memory pipeline,
# which the home copies there from its workspace (cluster/dream_copies.py).
STATE_DIRS = ("gitmem/proposals", "gitmem/dreams")  # dreams: cluster/dream_copies.py
_STATE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}\Z")
MAX_SKEW_SECONDS = 300  # a signed request older than this is refused (replays)


def sign(secret: bytes, node: str, method: str, path: str, body_sha256: str, at: int | None = None) -> str:
    at = int(time.time()) if at is None else at
    message = "\n".join((node, method, path, body_sha256, str(at))).encode()
    return f"{node}:{at}:{hmac.new(secret, message, hashlib.sha256).hexdigest()}"


def verify_signature(
    secret: bytes, header: str | None, method: str, path: str, body: bytes, body_sha256: str | None = None
) -> str:
    """The signing node's name; ForbiddenError unless ``header`` signs exactly this request
    (``body_sha256``: the body's digest, when it was hashed as it streamed in)."""
    if not header or header.count(":") < 2:
        raise ForbiddenError("a replication request must be signed by a cluster node")
    node, at, mac = header.rsplit(":", 2)
    try:
        when = int(at)
    except ValueError:
        raise ForbiddenError("a replication request must be signed by a cluster node") from None
    digest = body_sha256 if body_sha256 is not None else hashlib.sha256(body).hexdigest()
    expected = sign(secret, node, method, path, digest, when)
    if not hmac.compare_digest(header, expected) or abs(time.time() - when) > MAX_SKEW_SECONDS:
        raise ForbiddenError("a replication request must be signed by a cluster node")
    return node


def _git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(
        ["git", f"--git-dir={git_dir}", *args],
        input=stdin,
        capture_output=True,
        env=config.plain_git_env(),
        check=False,
        timeout=600,
    )
    if proc.returncode != 0:
        raise IntegrityError(
            f"git {args[0]} in {git_dir} failed: {proc.stderr.decode(errors='replace')[-500:]}"
        )
    return proc.stdout


def refs_of(git_dir: Path) -> dict[str, str]:
    """Every ref of a repository (``refs/...`` -> commit id); empty for a missing one."""
    if not git_dir.exists():
        return {}
    out = _git(git_dir, "for-each-ref", "--format=%(refname) %(objectname)")
    refs: dict[str, str] = {}
    for line in out.decode().splitlines():
        name, _, oid = line.partition(" ")
        if name and oid:
            refs[name] = oid
    return refs


def state_of(git_dir: Path) -> dict[str, str | None]:
    """The state files, base64 (None: absent on the home, so removed on the replica)."""
    files: dict[str, str | None] = {}
    for rel in STATE_FILES:
        path = git_dir / rel
        files[rel] = base64.b64encode(path.read_bytes()).decode() if path.exists() else None
    for d in STATE_DIRS:
        files[d + "/"] = ""  # the directory's listing is whole: a file not named is removed
        for name in _dir_files(git_dir / d):
            with contextlib.suppress(FileNotFoundError):  # removed since it was listed
                files[f"{d}/{name}"] = base64.b64encode((git_dir / d / name).read_bytes()).decode()
    return files


def _dir_files(path: Path) -> list[str]:
    try:
        return sorted(e.name for e in os.scandir(path) if e.is_file() and _STATE_NAME.match(e.name))
    except FileNotFoundError:
        return []


def _state_rel(rel: str) -> bool:
    """A path :func:`apply` may write: a state file, a state directory's marker, or one plain file
    in a state directory (no subdirectory, no ``..``, no hidden file)."""
    if rel in STATE_FILES or rel in {d + "/" for d in STATE_DIRS}:
        return True
    head, _, name = rel.rpartition("/")
    return head in STATE_DIRS and bool(_STATE_NAME.match(name))


def make_bundle(git_dir: Path, have: dict[str, str]) -> bytes | None:
    """A bundle of every ref, minus what the replica ``have``s (only ids this repository knows);
    None when the replica is level (same refs)."""
    mine = refs_of(git_dir)
    if mine == have:
        return None
    if not mine:
        return b""
    known = [oid for oid in set(have.values()) if _has(git_dir, oid)]
    with leftovers.bundle_dir(git_dir) as tmp:  # in the store, flocked while used (cluster/leftovers.py)
        out = tmp / "b.bundle"
        # the exclusions on stdin, so a replica with many refs needs no long argv
        spec = "".join(f"^{oid}\n" for oid in known)
        proc = subprocess.run(
            ["git", f"--git-dir={git_dir}", "bundle", "create", str(out), "--all", "--stdin"],
            input=spec.encode(), capture_output=True, env=config.plain_git_env(), check=False, timeout=600,
        )  # fmt: skip
        if proc.returncode != 0:
            if b"empty bundle" in proc.stderr or b"Refusing to create empty bundle" in proc.stderr:
                return b""  # only ref deletions or moves to commits the replica has
            raise IntegrityError(
                f"git bundle create in {git_dir} failed: {proc.stderr.decode(errors='replace')[-500:]}"
            )
        config.fault("cluster.bundle-made")
        return out.read_bytes()


def _has(git_dir: Path, oid: str) -> bool:
    proc = subprocess.run(
        ["git", f"--git-dir={git_dir}", "cat-file", "-e", f"{oid}^{{commit}}"],
        capture_output=True, env=config.plain_git_env(), check=False,
    )  # fmt: skip
    return proc.returncode == 0


def apply(
    git_dir: Path,
    bundle: bytes,
    refs: dict[str, str],
    state: dict[str, str | None],
    before_refs: Callable[[dict[str, str]], None] | None = None,
) -> None:
    """Make the replica's copy at ``git_dir`` level with the home: objects from ``bundle``, refs
    exactly ``refs`` (forced: rewrites included; refs the home lacks deleted), state files as sent.
    Everything sent is checked (and decoded) before anything is written. ``before_refs(old refs)``
    runs once the bundle's objects are in and before any ref moves."""
    for name, oid in refs.items():
        if (
            not isinstance(name, str)
            or not isinstance(oid, str)
            or not name.startswith("refs/")
            or name.startswith("refs/gitmem-incoming/")
            or any(c.isspace() or c == "\0" for c in name)  # one update-ref --stdin line each
            or not (len(oid) in (40, 64) and all(c in "0123456789abcdef" for c in oid))
        ):
            raise InvalidInputError(f"a replicated ref must be under refs/: {name!r}")
    files: dict[str, bytes | None] = {}
    for rel, data in state.items():
        if not _state_rel(rel):
            raise InvalidInputError(f"not a replicated state file: {rel!r}")
        if data is not None and not isinstance(data, str):
            raise InvalidInputError(f"a malformed replicated state file: {rel!r}")
        try:
            files[rel] = None if data is None else base64.b64decode(data, validate=True)
        except ValueError:
            raise InvalidInputError(f"a malformed replicated state file: {rel!r}") from None
    if not git_dir.exists():
        git_dir.mkdir(parents=True)
        _git(git_dir, "init", "--bare", "-q")
    before = refs_of(git_dir)
    # a git killed in this copy (a SIGKILLed home's, or this replica's own last fetch) left its locks
    clear_stale_locks(git_dir)
    if not bundle:  # (bundle_dir sweeps them first when there is one)
        leftovers.sweep_bundles(git_dir)  # and its bundles (a node killed mid-replication)
    if bundle:
        with leftovers.bundle_dir(git_dir) as tmp:  # in the store, flocked while used
            received = tmp / "b.bundle"
            received.write_bytes(bundle)
            config.fault("cluster.bundle-received")
            _git(git_dir, "bundle", "verify", "-q", str(received))
            _git(
                git_dir,
                "fetch",
                "-q",
                "--no-write-fetch-head",
                str(received),
                "+refs/*:refs/gitmem-incoming/*",
            )
    if before_refs is not None:
        before_refs(before)
    current = refs_of(git_dir)
    lines = []
    for name, oid in refs.items():
        lines.append(f"update {name} {oid}")
    for name in current:
        if name not in refs:
            lines.append(f"delete {name}")
    if lines:
        clear_stale_locks(git_dir)
        _git(git_dir, "update-ref", "--stdin", stdin=("\n".join(lines) + "\n").encode())
    for d in STATE_DIRS:
        if d + "/" not in files:
            continue  # an older home's replication: the directory is left as it is
        sent = {rel.rpartition("/")[2] for rel in files if rel.startswith(d + "/") and rel != d + "/"}
        for name in _dir_files(git_dir / d):
            if name not in sent:
                (git_dir / d / name).unlink(missing_ok=True)
    for rel, content in files.items():
        if rel.endswith("/"):
            continue
        path = git_dir / rel
        if content is None:
            path.unlink(missing_ok=True)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.replica-tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)


def clear_stale_locks(git_dir: Path) -> list[str]:
    """Remove the lock and temporary files a killed git left in this copy (``<ref>.lock`` under
    ``refs/``, ``HEAD.lock``, ``packed-refs.lock`` and ``.new``, ``config.lock``, ``shallow.lock``),
    once stale by the ref moves' rule (:func:`gitmem.cluster.leftovers.clear_stale_locks`); the
    ones removed. A home SIGKILLed mid-write leaves the lock of the ref it was moving, a replica
    killed mid-fetch those of ``refs/gitmem-incoming/``, and git then refuses every later update
    of that ref (or of packed-refs): the copy could never be brought level."""
    return leftovers.clear_stale_locks(git_dir)


def envelope(refs: dict[str, str], state: dict[str, str | None], seq: int = 0) -> bytes:
    """What one replication carries besides the bundle; ``seq`` orders replications cluster-wide."""
    return json.dumps({"refs": refs, "state": state, "seq": seq}, sort_keys=True).encode()


def parse_envelope(body: bytes) -> tuple[dict[str, str], dict[str, str | None], int]:
    try:
        data: Any = json.loads(body)
        refs, state, seq = data["refs"], data["state"], data["seq"]
        assert isinstance(refs, dict) and isinstance(state, dict) and isinstance(seq, int)
    except (ValueError, KeyError, AssertionError):
        raise InvalidInputError("a malformed replication request") from None
    return refs, state, seq


SEQ_FILE = "gitmem/replica_seq"


def check_and_record_seq(git_dir: Path, seq: int) -> None:
    """Refuse a replication older than (or as old as) the last one applied to this copy: a signed
    request replayed later must not roll a replica back."""
    path = git_dir / SEQ_FILE
    try:
        last = int(path.read_text().strip() or 0)
    except (FileNotFoundError, ValueError):
        last = 0
    if seq <= last:
        raise ForbiddenError(f"a replication older than the one applied (#{seq} <= #{last}): refused")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(".replica_seq.tmp")
    tmp.write_text(str(seq))
    os.replace(tmp, path)


def frame(env: bytes, bundle: bytes) -> bytes:
    """One request body: the envelope's length (decimal, one line), the envelope, the bundle."""
    return str(len(env)).encode() + b"\n" + env + bundle


def unframe(body: bytes) -> tuple[bytes, bytes]:
    head, sep, rest = body.partition(b"\n")
    if not sep or not head.isdigit() or int(head) > len(rest):
        raise InvalidInputError("a malformed replication request")
    n = int(head)
    return rest[:n], rest[n:]
