"""pip installs the package from this folder offline (no index, no build isolation)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def can_build_wheels() -> bool:
    """setuptools with bdist_wheel: built in since 70.1, or the wheel package."""
    probe = (
        "import setuptools, importlib.util, sys\n"
        "v = tuple(int(x) for x in setuptools.__version__.split('.')[:2])\n"
        "sys.exit(0 if v >= (70, 1) or importlib.util.find_spec('wheel') else 1)\n"
    )
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


class TestInstall(unittest.TestCase):
    def test_pip_install_offline(self) -> None:
        if not can_build_wheels():
            self.skipTest(f"{sys.executable} has no setuptools that builds wheels (setuptools >= 70.1, or setuptools and wheel)")
        with tempfile.TemporaryDirectory() as tmp:
            # A copy, so that setuptools' build/ and *.egg-info land there.
            src = os.path.join(tmp, "src")
            os.mkdir(src)
            for name in ("pyproject.toml", "README.md"):
                shutil.copy(ROOT / name, src)
            shutil.copytree(ROOT / "harnessflow", os.path.join(src, "harnessflow"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            target = os.path.join(tmp, "site")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            build = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                 "--target", target, src],
                capture_output=True, text=True, env=env, cwd=tmp,
            )
            self.assertEqual(build.returncode, 0, build.stdout + build.stderr)
            check = subprocess.run(
                [sys.executable, "-c", "import harnessflow, sys; print(harnessflow.__file__); "
                 "print(harnessflow.events.TYPES[0]); sys.exit(0 if harnessflow.Client else 1)"],
                capture_output=True, text=True, cwd=tmp, env=dict(os.environ, PYTHONPATH=target),
            )
            self.assertEqual(check.returncode, 0, check.stderr)
            self.assertTrue(check.stdout.startswith(target), check.stdout)
            self.assertTrue((Path(target) / "harnessflow" / "py.typed").exists())


if __name__ == "__main__":
    unittest.main()
