"""Read replicas of a store: plain bare mirrors kept current by ``git push --mirror`` (docs/git-servers.md).

A replica is a bare repository with one shell hook (``hooks/replica-post-receive``, installed by
:func:`init_replica`; it needs git and sh, not gitmem). The primary store names it as a git remote
with ``mirror = true`` (:func:`add_replica`). Three things push to it, one at a time (the lock
``$GIT_DIR/gitmem/replica.lock`` of the primary, which ``flock(1)`` in the shim and
:func:`push_replicas` share):

- the primary's post-receive shim, after every push (sh and git, no Python);
- every history rewrite (redaction, compaction), once the primary's purge is proved
  (:func:`after_rewrite`, registered in :data:`gitmem.events.AFTER_REWRITE` by ``gitmem.install_default_hooks``);
- :func:`push_replicas` (``gitmem replica push``), for writes that did not come by push (the library,
  the server) and to catch up a replica that was unreachable.

A mirror push force-updates every ref and deletes the ones the primary no longer has. When a ref
went anywhere but forward (a redaction rewrote that scope), the replica's hook expires its reflogs
and runs ``git gc --prune=now``: the objects only the old history reached, the redacted bytes among
them, are gone from the replica when the push returns. A replica that missed the redaction (it was
unreachable) gets the same rewrite, and purges, at the next mirror push that reaches it.

A rewrite leaves a *purge pending* mark for each replica (``$GIT_DIR/gitmem/replica-pending/<name>``)
until a mirror push to it reports the purge. A replica whose refs already have the rewrite but whose
purge failed or was cut short would otherwise never purge (a later mirror push has nothing to send,
so its hook never runs): while the mark is there, each mirror push first sends a throwaway ref
(:data:`PURGE_REF`), which the mirror push then deletes, and a deleted ref makes the hook purge.

Every git process here (and in the shim) is bounded by ``gitmem.replicaTimeout`` (git config of
the store, seconds; default :data:`TIMEOUT`): a replica that hangs costs a push that long, then
the whole process group is killed and the push is reported as failed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from gitmem import config
from gitmem.errors import ConflictError, InvalidInputError, NotFoundError
from gitmem.git.configwrite import before_git_config, set_config
from gitmem.git.locks import file_lock

if TYPE_CHECKING:
    from gitmem.engine.core import StoreCore

LOCK_FILE = "replica.lock"
STATUS_FILE = "replicas.json"  # $GIT_DIR/gitmem/replicas.json: the last push to each replica
HOOK_TEMPLATE = Path(__file__).parent / "hooks" / "replica-post-receive"
HOOK_MARKER = "gitmem-replica-hook"
PURGED_LINE = re.compile(r"gitmem-replica: purged (\d+) object")
TIMEOUT = 600
PENDING_DIR = "replica-pending"
PURGE_REF = "refs/gitmem-replica/purge"
PURGE_FAILED = "gitmem-replica: error:"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
_USERINFO = re.compile(r"(\w+://)[^/@\s]*@")


@dataclass(frozen=True)
class Replica:
    """One replica of a store: its remote name and URL (user and password shown as ``***``)."""

    name: str
    url: str


@dataclass(frozen=True)
class ReplicaPush:
    """The result of one mirror push: ``ok`` (the replica has the primary's refs), ``purged`` (the
    replica's hook dropped this many objects of rewritten history; None: nothing was rewritten or
    the replica has no gitmem replica hook), ``message`` (git's last error line when not ok)."""

    name: str
    url: str
    ok: bool
    purged: int | None
    message: str
    at: int
    purge_pending: bool = False  # a rewrite is not known to be purged on this replica yet


def _env() -> dict[str, str]:
    env = config.plain_git_env()
    env.setdefault("GIT_TERMINAL_PROMPT", "0")
    return env


def timeout_of(git_dir: Path) -> int:
    """``gitmem.replicaTimeout`` of the store (seconds, at least 1), else :data:`TIMEOUT`."""
    try:
        repo = pygit2.Repository(str(git_dir))
    except pygit2.GitError:
        return TIMEOUT
    try:
        value = repo.config.get_int("gitmem.replicaTimeout")
    except (KeyError, ValueError, pygit2.GitError):
        return TIMEOUT
    finally:
        repo.free()
    return max(1, value)


def _git(
    args: list[str], *, git_dir: Path | None = None, timeout: int = TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """Run git in its own process group: on a timeout the whole group goes (a transport helper or
    a local ``receive-pack`` and its hooks would otherwise keep our pipes open, and wait forever)."""
    cmd = ["git", *([f"--git-dir={git_dir}"] if git_dir is not None else []), *args]
    try:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=_env(),
            start_new_session=True,
        )
    except OSError as exc:
        return subprocess.CompletedProcess(cmd, 127, "", f"cannot run git: {exc}")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return subprocess.CompletedProcess(cmd, 124, "", f"git {args[0]} timed out after {timeout} s")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _pending(git_dir: Path, name: str) -> Path:
    return git_dir / "gitmem" / PENDING_DIR / name


def mark_purge_pending(git_dir: Path, names: list[str]) -> None:
    """Note that each named replica has a rewrite to purge (cleared by a push that reports it)."""
    d = git_dir / "gitmem" / PENDING_DIR
    d.mkdir(parents=True, exist_ok=True)
    for name in names:
        _pending(git_dir, name).touch()


def redact_url(url: str) -> str:
    return _USERINFO.sub(r"\1***@", url)


def init_replica(path: str | os.PathLike[str]) -> Path:
    """Make ``path`` a replica: a bare repository (created when missing, or an existing bare one)
    with gitmem's replica hook as ``hooks/post-receive``. Idempotent.

    Raises:
        ConflictError: ``path`` is a non-empty directory that is not a bare repository, or its
            ``hooks/post-receive`` is someone else's.
    """
    target = Path(path).expanduser().resolve()
    if target.exists() and any(target.iterdir()):
        try:
            repo = pygit2.Repository(str(target))
        except pygit2.GitError:
            raise ConflictError(f"{target} exists and is not a git repository") from None
        try:
            if not repo.is_bare:
                raise ConflictError(f"{target} is not a bare repository; a replica is one")
        finally:
            repo.free()
    else:
        pygit2.init_repository(str(target), bare=True).free()
    hook = target / "hooks" / "post-receive"
    hook.parent.mkdir(exist_ok=True)
    text = HOOK_TEMPLATE.read_text(encoding="utf-8")
    if hook.exists() or hook.is_symlink():
        try:
            theirs = hook.read_text(encoding="utf-8", errors="replace")
        except OSError:
            theirs = ""
        if HOOK_MARKER not in theirs[:4096]:
            raise ConflictError(f"{hook} is not gitmem's replica hook; move it away, then run this again")
    tmp = hook.with_name(f".post-receive.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, hook)
    repo = pygit2.Repository(str(target))
    try:
        repo.set_head("refs/heads/main")  # a clone of the replica checks out scope main, as of the store
        # The primary's mirror pushes rewrite and delete refs; no reflog may keep old history.
        set_config(
            repo,
            {
                "receive.denyNonFastForwards": False,
                "receive.denyDeletes": False,
                "core.logAllRefUpdates": False,
            },
        )
    finally:
        repo.free()
    return target


def replicas(git_dir: Path) -> list[Replica]:
    """The store's replicas: its git remotes with ``mirror = true``, by name. A remote whose name
    ``replica add`` would refuse is left out (the shim skips it too): read from the config, since
    pygit2 refuses to list the remotes at all when one has a name git would not create."""
    repo = pygit2.Repository(str(git_dir))
    try:
        names = set()
        for entry in repo.config:
            key = entry.name
            if key.startswith("remote.") and key.endswith(".mirror"):
                names.add(key[len("remote.") : -len(".mirror")])
        out = []
        for name in names:
            if not _NAME.match(name) or repo.config.get_bool(f"remote.{name}.mirror") is not True:
                continue
            key = f"remote.{name}.url"
            url = str(repo.config[key]) if key in repo.config else ""  # noqa: SIM401 (no .get)
            if url:
                out.append(Replica(name, redact_url(url)))
        return sorted(out, key=lambda r: r.name)
    except (KeyError, ValueError, pygit2.GitError):
        return []
    finally:
        repo.free()


def add_replica(store: StoreCore, url: str, name: str = "replica") -> Replica:
    """Name ``url`` as a replica of ``store`` (``git remote add --mirror=push NAME URL``).

    Raises:
        InvalidInputError: a bad name or an empty URL, or a clone (replicas belong to the store).
        ConflictError: a remote of that name exists.
    """
    if store.is_clone:
        raise InvalidInputError(f"{store.path} is a clone; add the replica to the store it came from")
    if not _NAME.match(name):
        raise InvalidInputError(f"invalid replica name {name!r}: use letters, digits, '.', '_' and '-'")
    if not url.strip() or url.startswith("-") or any(c in url for c in "\n\r\0"):
        raise InvalidInputError(f"invalid replica URL {redact_url(url)!r}")
    prefix = f"remote.{name}."  # the config, not repo.remotes: that refuses to list odd names
    if any(e.name.startswith(prefix) for e in store.repo.config):
        raise ConflictError(f"{store.path} already has a remote named {name!r}; pick another --name")
    before_git_config(store.path)  # a config.lock a killed git left
    res = _git(["remote", "add", "--mirror=push", name, url], git_dir=store.path)
    if res.returncode != 0:
        raise InvalidInputError(f"cannot add replica {name!r}: {res.stderr.strip()}")
    return Replica(name, redact_url(url))


def push_replicas(git_dir: Path, names: list[str] | None = None) -> list[ReplicaPush]:
    """``git push --mirror`` to every replica (or those in ``names``), one at a time; never raises
    for a replica that cannot be reached (its result says so). Records each result in
    ``$GIT_DIR/gitmem/replicas.json``.

    Raises:
        NotFoundError: a name in ``names`` is not a replica of the store.
    """
    known = replicas(git_dir)
    if names is not None:
        unknown = sorted(set(names) - {r.name for r in known})
        if unknown:
            raise NotFoundError(f"{git_dir} has no replica named {unknown[0]!r}")
        known = [r for r in known if r.name in names]
    out: list[ReplicaPush] = []
    if not known:
        return out
    timeout = timeout_of(git_dir)
    with file_lock(git_dir / "gitmem" / LOCK_FILE):
        for r in known:
            pending = _pending(git_dir, r.name)
            was_pending = pending.exists()
            if was_pending:  # the mirror push deletes this ref again: the replica's hook purges
                tip = _any_commit(git_dir)
                if tip is not None:
                    _git(
                        [
                            "-c",
                            f"remote.{r.name}.mirror=false",
                            "push",
                            "--quiet",
                            "--force",
                            r.name,
                            f"{tip}:{PURGE_REF}",
                        ],
                        git_dir=git_dir,
                        timeout=timeout,
                    )
            res = _git(["push", "--mirror", r.name], git_dir=git_dir, timeout=timeout)
            found = PURGED_LINE.findall(res.stderr)
            purged = sum(int(n) for n in found) if found else None
            lines = [ln.strip() for ln in res.stderr.strip().splitlines() if ln.strip()]
            failed = [ln for ln in lines if PURGE_FAILED in ln]
            ok = res.returncode == 0 and not failed
            if failed:
                message = redact_url(failed[-1])
            elif not ok:
                message = redact_url(lines[-1] if lines else f"exit {res.returncode}")
            else:
                message = ""
            if ok and (was_pending or purged is not None):
                unproved = prove_replica(git_dir, r.url)
                if unproved:
                    ok, message = False, unproved
            if ok and (purged is not None or not was_pending):
                pending.unlink(missing_ok=True)
            out.append(
                ReplicaPush(
                    r.name, r.url, ok, purged, message, int(time.time()), purge_pending=pending.exists()
                )
            )
        _record(git_dir, out)
    return out


def prove_replica(git_dir: Path, url: str) -> str:
    """After a purge push: a replica on this machine (a path) holds none of the primary's
    deny-listed ids (:func:`gitmem.audit.purge_proof.prove_purged`); the reason when it does
    ("" when proved, or when the replica is remote and its own hook's report is all there is).
    A redacted blob that a branch of another scope holds there is excused only while no branch of
    a scope its redaction rewrote reaches it on the replica (:func:`gitmem.engine.denylist.excused`,
    the same test ``gitmem verify`` and a copy's purge make)."""
    from gitmem.audit.purge_proof import prove_purged
    from gitmem.engine.denylist import excused, read_denylist, read_scoped
    from gitmem.errors import IntegrityError

    path = Path(url[len("file://") :] if url.startswith("file://") else url)
    if "://" in url[:12] and not url.startswith("file://") or not path.is_absolute() or not path.is_dir():
        return ""
    try:
        denied = read_denylist(git_dir)  # less a redacted blob only scopes it did not rewrite reach
        proof = prove_purged(path, object_ids=denied - excused(path, read_scoped(git_dir), denied))
    except IntegrityError as exc:
        return f"the purge of the replica is not proved: {exc.message}"
    return "" if proof.ok else f"the purge of the replica is not proved: {proof.reason()}"


def _any_commit(git_dir: Path) -> str | None:
    """A commit of the store (the throwaway ref needs one; the replica has it already)."""
    res = _git(["for-each-ref", "--count=1", "--format=%(objectname)", "refs/heads"], git_dir=git_dir)
    tip = res.stdout.strip()
    return tip or None


def _record(git_dir: Path, results: list[ReplicaPush]) -> None:
    path = git_dir / "gitmem" / STATUS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    for r in results:
        data[r.name] = asdict(r)
    tmp = path.with_name(f".{STATUS_FILE}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def last_pushes(git_dir: Path) -> dict[str, ReplicaPush]:
    """The last recorded push to each replica (from ``gitmem/replicas.json``; none yet: empty)."""
    try:
        data = json.loads((git_dir / "gitmem" / STATUS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for name, rec in data.items() if isinstance(data, dict) else ():
        try:
            out[name] = ReplicaPush(**rec)
        except TypeError:
            continue
    return out


def after_rewrite(store: StoreCore) -> None:
    """After a redaction or compaction (the primary's purge proved, its store lock released): push
    the rewrite to every replica, whose hook purges the old history there."""
    if store.is_clone:
        return
    known = replicas(store.path)
    if not known:
        return
    mark_purge_pending(store.path, [r.name for r in known])
    push_replicas(store.path)
