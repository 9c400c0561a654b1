"""A witness killed while it made its key (``witness.key``): before, the key file was created empty
(``O_EXCL``) and written after, so a SIGKILL in between left an empty key and every later start of
that witness failed on it for good. Now the key is written whole to a temporary file and linked
into place: a kill at any step leaves no key (the next start makes one) or the whole key."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gitmem.audit.witness import KEY_FILE, Witness

CHILD = r"""
import os, signal, sys
from gitmem.audit import witness
step = sys.argv[2]
def die(*a, **k):
    os.kill(os.getpid(), signal.SIGKILL)
if step == "link":  # the temporary key written and flushed, not linked into place yet
    witness.os.link = die
elif step == "fsync":  # the temporary key written, not flushed
    witness.os.fsync = die
witness.Witness(sys.argv[1], "witness.test/crash")
"""


@pytest.mark.parametrize("step", ["fsync", "link"])
def test_a_witness_killed_making_its_key_starts_again(tmp_path: Path, step: str) -> None:
    d = tmp_path / "w"
    res = subprocess.run([sys.executable, "-c", CHILD, str(d), step], capture_output=True, check=False)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert not (d / KEY_FILE).exists()
    w = Witness(d, "witness.test/crash")
    assert w.vkey.startswith("witness.test/crash+")
    assert Witness(d).vkey == w.vkey  # the key made now is the one read back


def test_an_empty_key_left_by_an_older_version_is_made_again(tmp_path: Path) -> None:
    d = tmp_path / "w"
    d.mkdir()
    (d / KEY_FILE).write_text("")  # what the O_EXCL create left when killed before its write
    w = Witness(d, "witness.test/crash")
    assert (d / KEY_FILE).read_text().strip()
    assert Witness(d).vkey == w.vkey


def test_a_whole_key_is_kept(tmp_path: Path) -> None:
    first = Witness(tmp_path / "w", "witness.test/crash")
    assert Witness(tmp_path / "w", "witness.test/other").vkey == first.vkey
