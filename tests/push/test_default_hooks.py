"""The push layer's hooks are registered by ``gitmem`` itself (gitmem.install_default_hooks), not as
the side effect of importing ``gitmem.store``: a bare ``StoreCore`` opened the lowest-level way, in a
process that never imports the facade or the push layer, records spooled pushes when it opens and
pushes a redaction to the store's read replicas."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from secret_scan import find_secret

from gitmem.push import spool
from gitmem.push.replica import add_replica, init_replica, last_pushes, push_replicas
from gitmem.store import Store

SECRET = "vault combination 5512-amber-heron-flute"
REPO = Path(__file__).resolve().parents[2]


def git(*args: str, cwd: Path | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("REMOTE_USER", "GL_USERNAME", "GITMEM_ACTOR")}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _bare(script: str, *args: str) -> str:
    """Run ``script`` in a fresh interpreter; it fails if the facade or the push layer was loaded
    before the script's own work starts."""
    prelude = textwrap.dedent(
        """
        import sys
        from gitmem.engine.opening import open_core
        from gitmem.audit import redact
        loaded = [m for m in sys.modules if m == "gitmem.store" or m.startswith("gitmem.push")]
        assert loaded == [], loaded
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-c", prelude + textwrap.dedent(script), *args],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_bare_core_has_the_default_hooks() -> None:
    out = _bare(
        """
        from gitmem import events
        print(sorted(h.__name__ for h in events.NEW_COMMIT), sorted(h.__name__ for h in events.AFTER_REWRITE))
        """
    )
    assert out.split() == ["['_record_spooled_pushes']", "['_push_rewrite_to_replicas']"]


def test_a_bare_core_records_spooled_pushes_and_pushes_a_redaction_to_replicas(
    store: Store, tmp_path: Path
) -> None:
    store.write("/a.md", "alpha", actor="user:alice")
    v = store.write("/s.md", SECRET, actor="user:alice")
    store.write("/s.md", "rotated", actor="user:alice")
    replica = init_replica(tmp_path / "replica.git")
    add_replica(store.core, str(replica))
    [first] = push_replicas(store.path)
    assert first.ok and find_secret([replica], SECRET.encode(), git_dirs=[replica])
    # A push the post-receive shim spools, for the next gitmem process to record.
    work = tmp_path / "work"
    git("clone", "-q", str(store.path), str(work))
    (work / "b.md").write_text("pushed\n")
    git("add", "-A", cwd=work)
    git("commit", "-q", "-m", "add b", cwd=work)
    git("push", "-q", "origin", "main", cwd=work)
    assert spool.pending(store.core) != []
    assert v is not None

    _bare(
        """
        core = open_core(sys.argv[1])  # records the spooled push
        from gitmem.push import spool
        assert spool.pending(core) == [], "the spooled push was not recorded on open"
        redact.redact(core, sys.argv[2], reason="leaked", actor="user:root")
        core.close()
        """,
        str(store.path),
        v.id,
    )
    last = last_pushes(store.path)["replica"]
    assert last.ok and last.purged is not None and last.purged > 0
    assert find_secret([replica], SECRET.encode(), git_dirs=[replica]) == []
