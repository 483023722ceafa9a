"""scripts/setup-python.sh as two checkouts on one machine use it: each gets its own .venv that runs its
own code, and the second setup reuses the cached dependencies instead of installing them again."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from autotuner.util import paths

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _clone(dest: Path) -> Path:
    """A checkout's files as a clone has them: every file of this repository that git does not ignore."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


# As a user's shell has it: no PYTHONPATH pointing at this repository. The user cache is the one this
# environment's dependencies came from, so after the first setup nothing is installed.
ENV = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "AUTOTUNER_CACHE": str(paths.cache_dir())}


def _setup(checkout: Path) -> str:
    out = subprocess.run(["scripts/setup-python.sh"], cwd=checkout, env=ENV, capture_output=True, text=True,
                         timeout=900)
    assert out.returncode == 0, out.stderr
    return out.stderr


def _run(checkout: Path, code: str) -> str:
    return subprocess.run([str(checkout / ".venv" / "bin" / "python"), "-c", code], cwd="/", env=ENV,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_two_clones_each_run_their_own_code(tmp_path):
    first, second = _clone(tmp_path / "release"), _clone(tmp_path / "work")
    (second / "autotuner" / "__init__.py").write_text((second / "autotuner" / "__init__.py").read_text()
                                                      + '\nCHECKOUT = "work"\n')
    _setup(first)
    said = _setup(second)
    assert "installing the dependencies" not in said  # the second clone reuses the cache
    assert said.count("[setup]") == 1  # one line for the step, nothing of pip's
    code = "import autotuner; print(autotuner.__file__, getattr(autotuner, 'CHECKOUT', 'release'))"
    assert _run(first, code) == f"{first / 'autotuner' / '__init__.py'} release"
    assert _run(second, code) == f"{second / 'autotuner' / '__init__.py'} work"
    for checkout in (first, second):  # the command and the dependencies' commands, from this checkout's venv
        help_text = subprocess.run([str(checkout / ".venv" / "bin" / "autotuner"), "--help"], env=ENV,
                                   capture_output=True, text=True, check=True).stdout
        assert "make-model" in help_text
        assert (checkout / ".venv" / "bin" / "mlflow").read_text().startswith(f"#!{checkout}/.venv/bin/python\n")
    assert "Python environment ready" in _setup(first)  # idempotent: nothing rebuilt
    assert _run(first, code) == f"{first / 'autotuner' / '__init__.py'} release"
