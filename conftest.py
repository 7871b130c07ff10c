"""Repository-wide pytest setup: the doctests of the ``scarjax`` package are collected
next to ``tests/`` (``testpaths`` in pyproject.toml), and only there: helper scripts
under ``tests/`` (multi-process workers that set ``XLA_FLAGS`` when imported) are never
imported for doctests.

The environment is set here, before anything imports JAX, so the tests and the
doctests see the same 8 forced host CPU devices (``tests/conftest.py``).
"""

import os
from pathlib import Path

from _pytest.doctest import DoctestModule

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("SCARJAX_NO_PROGRESS", "1")

PACKAGE = Path(__file__).resolve().parent / "scarjax"


def pytest_collect_file(file_path: Path, parent):
    """Every module of ``scarjax/`` is a doctest module."""
    if file_path.suffix == ".py" and PACKAGE in file_path.parents:
        return DoctestModule.from_parent(parent, path=file_path)
    return None
