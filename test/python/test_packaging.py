"""Packaging details users notice: the version, the license file, type information."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import mlir_autodiff as ad

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_version_is_the_metadata_version():
    assert ad.__version__ == PYPROJECT["project"]["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", ad.__version__)


def test_license_file_matches_the_metadata():
    project = PYPROJECT["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text


def test_typed_package_and_c_sources_are_package_data():
    data = PYPROJECT["tool"]["setuptools"]["package-data"]["mlir_autodiff"]
    assert "py.typed" in data and "csrc/*.c" in data
    pkg = Path(ad.__file__).parent
    assert (pkg / "py.typed").exists()
    assert {p.name for p in (pkg / "csrc").glob("*.c")} >= {"cuda_runtime.c", "cpu_support.c"}


def test_python_versions_are_stated_alike():
    classifiers = PYPROJECT["project"]["classifiers"]
    stated = sorted(c.rsplit(":: ", 1)[1] for c in classifiers if "Python :: 3." in c)
    assert stated == ["3.11", "3.12", "3.13"]
    assert PYPROJECT["project"]["requires-python"] == ">=3.11"
    assert "Python 3.11 to 3.13" in (ROOT / "README.md").read_text()
