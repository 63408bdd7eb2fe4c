"""The package builds and installs offline with the standard library alone.

Its build backend (_build/harnessflow_build.py) needs no setuptools, no wheel
and no package index. The README's own recipe (a venv, then pip install) is
run as written by the Go test TestPythonInstallAsDocumented (sdk_test.go);
these tests check the backend's wheel and pip's build of it in this Python.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_backend():
    spec = importlib.util.spec_from_file_location("harnessflow_build", ROOT / "_build" / "harnessflow_build.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def missing(test: unittest.TestCase, why: str) -> None:
    """Skip for a missing part, or fail under CI=true (internal/testenv.Missing)."""
    if os.environ.get("CI") == "true":
        test.fail(why + " (CI=true: a missing part fails the test)")
    test.skipTest(why)


class TestBackend(unittest.TestCase):
    def test_wheel(self) -> None:
        """A py3-none-any wheel of the package with py.typed, METADATA from
        pyproject.toml, and a RECORD whose hashes and sizes are the files'."""
        backend = load_backend()
        import harnessflow

        with tempfile.TemporaryDirectory() as tmp:
            name = backend.build_wheel(tmp)
            self.assertEqual(name, f"harnessflow-{harnessflow.__version__}-py3-none-any.whl")
            with zipfile.ZipFile(os.path.join(tmp, name)) as whl:
                names = whl.namelist()
                info = f"harnessflow-{harnessflow.__version__}.dist-info"
                for want in ("harnessflow/__init__.py", "harnessflow/client.py", "harnessflow/events.py",
                             "harnessflow/py.typed", f"{info}/METADATA", f"{info}/WHEEL", f"{info}/RECORD"):
                    self.assertIn(want, names)
                self.assertFalse([n for n in names if "__pycache__" in n or n.startswith("tests/")], names)
                meta = whl.read(f"{info}/METADATA").decode()
                self.assertIn("Name: harnessflow\n", meta)
                self.assertIn(f"Version: {harnessflow.__version__}\n", meta)
                self.assertIn("Requires-Python: >=3.9\n", meta)
                rows = list(csv.reader(io.StringIO(whl.read(f"{info}/RECORD").decode())))
                self.assertEqual(sorted(r[0] for r in rows), sorted(names))
                for path, digest, size in rows:
                    if path.endswith("RECORD"):
                        self.assertEqual((digest, size), ("", ""))
                        continue
                    data = whl.read(path)
                    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                    self.assertEqual((digest, int(size)), (f"sha256={want}", len(data)), path)
            # The same sources build the same bytes.
            again = os.path.join(tmp, "again")
            os.mkdir(again)
            backend.build_wheel(again)
            self.assertEqual(Path(tmp, name).read_bytes(), Path(again, name).read_bytes())

    def test_project_table(self) -> None:
        """The backend's reading of pyproject.toml agrees with tomllib's."""
        try:
            import tomllib
        except ImportError:
            self.skipTest("tomllib is Python 3.11+")
        backend = load_backend()
        text = (ROOT / "pyproject.toml").read_text()
        want = tomllib.loads(text)["project"]
        got = backend._project_table(text)
        self.assertEqual(got, {k: v for k, v in want.items()})


class TestInstall(unittest.TestCase):
    def test_pip_install_offline(self) -> None:
        """pip installs the package with no index and its default build
        isolation: the build needs nothing but the standard library."""
        if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
            missing(self, f"{sys.executable} has no pip (Debian: python3-pip, or a venv: python3-venv)")
        with tempfile.TemporaryDirectory() as tmp:
            # A copy, so that nothing lands in the source folder.
            src = os.path.join(tmp, "src")
            os.mkdir(src)
            for name in ("pyproject.toml", "README.md"):
                shutil.copy(ROOT / name, src)
            for name in ("harnessflow", "_build"):
                shutil.copytree(ROOT / name, os.path.join(src, name), ignore=shutil.ignore_patterns("__pycache__"))
            target = os.path.join(tmp, "site")
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
            build = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--no-index", "--target", target, src],
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
