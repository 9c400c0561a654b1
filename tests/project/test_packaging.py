"""The wheel and sdist build, carry LICENSE and metadata, and the wheel installs and runs in a fresh venv.

The install runs docker/build.sh, the same steps as the Dockerfile, without network: the fresh venv
reuses this environment's dependencies through a .pth file and pip gets --no-deps --no-index.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import venv
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# ".venv*": a virtualenv (or a link to one) in the checkout is not source: copied, it was most of the run
IGNORE = shutil.ignore_patterns(
    ".venv*", ".git", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)


def source_copy(tmp_path: Path) -> Path:
    """The checkout copied: a build writes build/ and *.egg-info next to the sources."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    return src


def test_build_makes_wheel_and_sdist_with_license_and_metadata(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source_copy(tmp_path))],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    [wheel] = out.glob("gitmem_store-*.whl")
    [sdist] = out.glob("gitmem_store-*.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "gitmem/push/hooks/pre-receive" in names or any("push/hooks/" in n for n in names)
    for line in ("License-Expression: Apache-2.0", "Project-URL: Source, ", "Classifier: Typing :: Typed"):
        assert line in meta, line
    assert "Keywords: ai,agents,memory,git" in meta
    with tarfile.open(sdist) as tf:
        assert any(m.name.endswith("/LICENSE") for m in tf.getmembers())


def test_wheel_installs_into_a_fresh_venv_and_works(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # this environment's packages (pip, setuptools, pygit2, typer, ...) come after the venv's own
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {
        # the wheel alone: a PYTHONPATH (a checkout's tests run from a worktree) would shadow it
        **{k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        "PYTHON": str(py),
        "PIP_ARGS": "--no-deps --no-index",
        "EXTRAS": "",
        "GITMEM_HOME": str(tmp_path / "ws"),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    proc = subprocess.run(
        ["sh", str(ROOT / "docker" / "build.sh"), str(source_copy(tmp_path))],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().endswith("gitmem 0.1.0")
    gitmem = env_dir / "bin" / "gitmem"
    where = subprocess.run(
        [str(py), "-c", "import gitmem; print(gitmem.__file__)"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert where.stdout.startswith(str(site)), where.stdout + where.stderr  # the wheel, not the checkout
    run = lambda *a: subprocess.run(  # noqa: E731
        [str(gitmem), *a], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert run("--version").stdout == "gitmem 0.1.0\n"
    assert run("store", "create", "notes").returncode == 0
    assert run("write", "notes", "/hello.md", "from the wheel").returncode == 0
    r = run("read", "notes", "/hello.md")
    assert (r.returncode, r.stdout) == (0, "from the wheel")
    (store_dir,) = (tmp_path / "ws" / "stores").glob("memstore_*.git")  # the directory follows the id
    hook = store_dir / "hooks" / "pre-receive"
    assert str(py) in hook.read_text() or "python" in hook.read_text()
