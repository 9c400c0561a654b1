"""A store's own temporary directories (gitmem/git/tmpdirs.py): a killed process's leftovers are
swept, a live one's never, and a purge sweeps them (a leftover bundle can hold a redacted blob)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from gitmem.git import tmpdirs
from gitmem.store import Store
from tests.helpers import git

ROOT = Path(__file__).resolve().parents[2]
HOLD = (
    "import sys; from pathlib import Path; from gitmem.git import tmpdirs\n"
    "with tmpdirs.held_dir(Path(sys.argv[1]), 'bundle-') as d:\n"
    "    (d / 'b.bundle').write_bytes(b'held'); print(d, flush=True); sys.stdin.readline()\n"
)


def _old(path: Path) -> None:
    then = time.time() - 3600
    os.utime(path, (then, then))


def test_only_unheld_directories_are_swept(tmp_path: Path) -> None:
    base = tmp_path / tmpdirs.TMP_DIR
    killed, fresh, stale = base / "bundle-killed", base / "new-bundle-fresh", base / "new-bundle-stale"
    for d in (killed, fresh, stale):
        d.mkdir(parents=True)
    _old(stale)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdin is not None
        held = Path(holder.stdout.readline().strip())
        assert held.parent == base and held.name.startswith("bundle-")
        _old(held)
        assert sorted(tmpdirs.sweep(tmp_path, "bundle-")) == ["bundle-killed", "new-bundle-stale"]
        assert held.is_dir() and fresh.is_dir()  # a live holder's, and one an instant before its flock
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=120) == 0
        assert not held.exists()  # its holder removed it
    finally:
        holder.kill()
        holder.wait()


def test_a_redaction_sweeps_a_killed_process_bundle_holding_the_redacted_blob(store: Store) -> None:
    secret = "the launch code is 0000-1111\n"
    v = store.write("/a.md", secret)
    store.write("/a.md", "rotated\n")
    left = store.path / tmpdirs.TMP_DIR / "bundle-killed"
    left.mkdir(parents=True)
    bundle = left / "b.bundle"
    git(store.path, "bundle", "create", str(bundle), "--all")  # every object, the secret among them
    store.redact(v.id, reason="leaked")
    assert not left.exists()
