"""Install the pre-receive/post-receive shims into a store, and the receive settings they rely on.

Installing is idempotent: gitmem's own shim (recognised by its marker) is rewritten in place; a
foreign hook is kept as ``<name>.legacy`` (the shim still runs it). The interpreter that runs
``gitmem.push.hook`` is recorded in the shim at install time.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pygit2

from gitmem.errors import ConflictError, ForbiddenError, NotFoundError
from gitmem.git.configwrite import set_config

HOOK_NAMES = ("pre-receive", "post-receive")
MARKER = "gitmem-hook-shim"
TEMPLATES = Path(__file__).parent / "hooks"
_PYTHON_LINE = re.compile(r"^GITMEM_PYTHON=.*# gitmem:python$", re.MULTILINE)
RECEIVE_CONFIG = {
    "receive.fsckObjects": True,
    "receive.denyNonFastForwards": True,
    "receive.denyDeletes": True,
    "receive.advertisePushOptions": True,
    # Group commits, batches and pushes publish small packs, which gitmem merges itself
    # (gitmem.git.consolidate): git's default of 50 packs would start the ``git gc --auto``
    # receive-pack runs after a push, detached and without the store lock, beside a redaction's
    # purge. Here so that ``gitmem hooks install --all`` brings stores made before up to date.
    "gc.autoPackLimit": 0,
}


@dataclass(frozen=True)
class InstalledHook:
    """One hook written into a store; ``action`` is installed, updated or unchanged."""

    store: str
    hook: Path
    action: str
    legacy: Path | None = None


def template(name: str) -> str:
    """The shim as shipped (``hooks/<name>`` in the repository, package data in the wheel)."""
    if name not in HOOK_NAMES:
        raise NotFoundError(f"unknown hook {name!r}; gitmem installs {', '.join(HOOK_NAMES)}")
    return (TEMPLATES / name).read_text(encoding="utf-8")


def render(name: str, python: str) -> str:
    """The shim with ``python`` recorded as its interpreter."""
    line = f"GITMEM_PYTHON={shlex.quote(python)} # gitmem:python"
    return _PYTHON_LINE.sub(lambda _m: line, template(name), count=1)


def is_gitmem_hook(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return MARKER.encode() in fh.read(4096)
    except OSError:
        return False


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o755)
    os.replace(tmp, path)


def install_hooks(
    git_dir: Path, python: str | None = None, *, label: str | None = None
) -> list[InstalledHook]:
    """Install both shims into ``git_dir/hooks`` and set the receive options.

    Raises:
        ConflictError: a foreign hook is there and ``<name>.legacy`` is taken too.
    """
    python = python or sys.executable
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    out = []
    for name in HOOK_NAMES:
        path = hooks / name
        text = render(name, python)
        legacy: Path | None = None
        if path.exists() or path.is_symlink():
            if is_gitmem_hook(path) and not path.is_symlink():
                action = "unchanged" if path.read_text(encoding="utf-8") == text else "updated"
            else:
                legacy = hooks / f"{name}.legacy"
                if legacy.exists() or legacy.is_symlink():
                    raise ConflictError(
                        f"{path} is not gitmem's hook and {legacy} exists too; merge them by hand, "
                        f"remove {path}, then install again"
                    )
                os.rename(path, legacy)
                action = "installed"
        else:
            action = "installed"
        if action != "unchanged":
            _write(path, text)
        if legacy is None and (hooks / f"{name}.legacy").exists():
            legacy = hooks / f"{name}.legacy"
        out.append(InstalledHook(label or str(git_dir), path, action, legacy))
    repo = pygit2.Repository(str(git_dir))
    try:
        set_config(repo, RECEIVE_CONFIG)  # past a config.lock a killed git left
    finally:
        repo.free()
    return out


def install(
    target: str | None, *, all_stores: bool = False, home: str | os.PathLike[str] | None = None
) -> list[InstalledHook]:
    """``gitmem hooks install STORE|--all``: install into one store (name or path) or every store."""
    from gitmem.audit.journal import open_recovered as open_store
    from gitmem.engine.resolve import all_refs

    if all_stores == (target is not None):
        from gitmem.errors import InvalidInputError

        raise InvalidInputError("give either a STORE or --all")
    if all_stores:
        out: list[InstalledHook] = []
        for ref in all_refs(home):
            out += install_hooks(ref.path, label=ref.name)
        return out
    assert target is not None
    with open_store(target, home) as store:
        if store.is_clone:
            raise ForbiddenError(
                f"{store.path} is a clone: hooks guard the store itself; install them there instead"
            )
        return install_hooks(store.path, label=store.name)
