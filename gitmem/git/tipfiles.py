"""A commit's files read by git in a subprocess (``git ls-tree -r``), for work that runs in a
thread beside a walk: the search rows of a rebuild's heads (:mod:`gitmem.engine.search_ahead`).
Reading through git leaves the GIL free while it reads (libgit2's reads hold it) and needs no
pygit2 repository of the thread's own.
"""

from __future__ import annotations

import subprocess

from gitmem import config

_GITLINK = b"160000"


def _git(git_dir: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["git", "--no-replace-objects", f"--git-dir={git_dir}", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=config.plain_git_env(),
    )


def tip_files(git_dir: str, commit_hex: str) -> dict[str, str] | None:
    """``/path`` -> blob id of every file of ``commit_hex``'s tree as
    :func:`gitmem.git.treedelta.changes_of` lists a root commit's files (gitlinks and paths that
    are not UTF-8 left out); None when git failed."""
    proc = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit_hex)
    out, _ = proc.communicate()
    if proc.returncode != 0:
        return None
    files: dict[str, str] = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        head, sep, raw_path = entry.partition(b"\t")
        fields = head.split(b" ")
        if not sep or len(fields) != 3:
            return None
        if fields[0] == _GITLINK or fields[1] != b"blob":
            continue
        try:
            files["/" + raw_path.decode("utf-8")] = fields[2].decode()
        except UnicodeDecodeError:
            continue
    return files
