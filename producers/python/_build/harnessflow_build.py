"""The build backend of the harnessflow package: the standard library alone.

pip builds a package through the backend its pyproject.toml names (PEP 517).
This one lives in the package's own folder (``backend-path``) and needs
nothing installed: no setuptools, no wheel, no package index. So

    python3 -m venv .venv && .venv/bin/pip install ./producers/python

works offline, in a fresh venv, with pip's default build isolation (the
isolated build environment has nothing to install: ``requires = []``).

It writes a pure-Python wheel (``py3-none-any``: the ``harnessflow`` folder,
its ``py.typed``, and the ``.dist-info`` metadata with a RECORD of sha256
hashes), an editable wheel (PEP 660: a ``.pth`` file naming this folder) and
an sdist. The metadata comes from pyproject.toml's ``[project]`` table, read
by ``_project_table`` (tomllib is not in Python 3.9 and 3.10).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import os
import re
import tarfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "harnessflow"
TAG = "py3-none-any"
# Wheel entries get this time (zip needs one >= 1980): the same sources
# build the same bytes.
FIXED_TIME = (1980, 1, 1, 0, 0, 0)
FIXED_MTIME = 315532800  # the same, in seconds since the epoch (UTC), for the sdist

Value = Union[str, List[str]]


def _project_table(text: str) -> Dict[str, Value]:
    """The [project] table of pyproject.toml, for the forms it uses: key =
    "string" and key = ["string", ...] (one line or several)."""
    table: Dict[str, Value] = {}
    section = ""
    lines = iter(text.splitlines())
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
            continue
        if section != "project" or "=" not in line:
            continue
        key, _, value = (part.strip() for part in line.partition("="))
        if value.startswith("["):
            while not value.rstrip().endswith("]"):
                value += " " + next(lines).strip()
            table[key] = re.findall(r'"((?:[^"\\]|\\.)*)"', value)
        elif value.startswith('"'):
            table[key] = value[1:value.rindex('"')]
    return table


def _metadata() -> Dict[str, Value]:
    project = _project_table((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for key in ("name", "version", "description", "requires-python"):
        if not isinstance(project.get(key), str):
            raise ValueError(f"pyproject.toml: [project] {key} must be a string")
    return project


def _dist_name(meta: Dict[str, Value]) -> str:
    """name-version as wheel file and .dist-info names spell it."""
    return re.sub(r"[-_.]+", "_", str(meta["name"])) + "-" + str(meta["version"])


def _metadata_file(meta: Dict[str, Value]) -> str:
    out = [
        "Metadata-Version: 2.1",
        f"Name: {meta['name']}",
        f"Version: {meta['version']}",
        f"Summary: {meta['description']}",
        f"Requires-Python: {meta['requires-python']}",
    ]
    out += [f"Classifier: {c}" for c in meta.get("classifiers", [])]
    readme = meta.get("readme")
    if isinstance(readme, str):
        out.append("Description-Content-Type: text/markdown")
        out += ["", (ROOT / readme).read_text(encoding="utf-8")]
    return "\n".join(out) + "\n"


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: harnessflow_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _package_files() -> List[Tuple[str, bytes]]:
    """The package's files, as (archive name, bytes), in a fixed order."""
    files = []
    for path in sorted((ROOT / PACKAGE).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed"):
            files.append((path.relative_to(ROOT).as_posix(), path.read_bytes()))
    return files


def _write_wheel(directory: str, entries: List[Tuple[str, bytes]]) -> str:
    meta = _metadata()
    dist = _dist_name(meta)
    info = f"{dist}.dist-info"
    entries = entries + [
        (f"{info}/METADATA", _metadata_file(meta).encode("utf-8")),
        (f"{info}/WHEEL", _wheel_file().encode("utf-8")),
    ]
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    for name, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
        writer.writerow([name, f"sha256={digest}", len(data)])
    writer.writerow([f"{info}/RECORD", "", ""])
    entries.append((f"{info}/RECORD", record.getvalue().encode("utf-8")))
    filename = f"{dist}-{TAG}.whl"
    with zipfile.ZipFile(os.path.join(directory, filename), "w", zipfile.ZIP_DEFLATED) as whl:
        for name, data in entries:
            zi = zipfile.ZipInfo(name, FIXED_TIME)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            whl.writestr(zi, data)
    return filename


# PEP 517 hooks.


def get_requires_for_build_wheel(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_sdist(config_settings: Optional[dict] = None) -> List[str]:
    return []


def get_requires_for_build_editable(config_settings: Optional[dict] = None) -> List[str]:
    return []


def build_wheel(wheel_directory: str, config_settings: Optional[dict] = None,
                metadata_directory: Optional[str] = None) -> str:
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory: str, config_settings: Optional[dict] = None,
                   metadata_directory: Optional[str] = None) -> str:
    """PEP 660: a wheel whose .pth file puts this folder on sys.path."""
    return _write_wheel(wheel_directory, [(f"_{PACKAGE}_editable.pth", (str(ROOT) + "\n").encode("utf-8"))])


def build_sdist(sdist_directory: str, config_settings: Optional[dict] = None) -> str:
    meta = _metadata()
    base = f"{meta['name']}-{meta['version']}"
    names = ["pyproject.toml", "README.md", "_build/harnessflow_build.py"] + [n for n, _ in _package_files()]
    filename = f"{base}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz", format=tarfile.PAX_FORMAT) as tar:
        members = [(f"{base}/PKG-INFO", _metadata_file(meta).encode("utf-8"))]
        members += [(f"{base}/{n}", (ROOT / n).read_bytes()) for n in names]
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode, ti.mtime = len(data), 0o644, FIXED_MTIME
            tar.addfile(ti, io.BytesIO(data))
    return filename
