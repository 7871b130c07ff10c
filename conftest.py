"""Repository-wide pytest setup: the doctests of the ``scarjax`` package are collected
next to ``tests/`` (``testpaths`` in pyproject.toml), and only there: helper scripts
under ``tests/`` (multi-process workers that set ``XLA_FLAGS`` when imported) are never
imported for doctests.

The environment is set here, before anything imports JAX, so the tests and the
doctests see the same 8 forced host CPU devices (``tests/conftest.py``).
"""

import os
import shutil
import tempfile
from pathlib import Path

from _pytest.doctest import DoctestModule

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
os.environ.setdefault("SCARJAX_NO_PROGRESS", "1")

# One run, one persistent compilation cache: the process that starts the run (pytest itself,
# or xdist's controller, which imports this file before it starts its workers) makes a fresh
# directory and names it in JAX_COMPILATION_CACHE_DIR; the workers, and the subprocesses the
# tests start, inherit it, so a program compiled by one of them is read back by the others
# (JAX keys an entry on the program, the compile options, the XLA flags and the backend).
# Every entry is kept (JAX's default keeps only compilations over 1 s). Nothing is kept
# between runs: the directory is removed when the run ends (a killed run leaves it in the
# system's temporary folder). A JAX_COMPILATION_CACHE_DIR set
# by the user is used as it is and left in place; SCARJAX_TEST_COMPILATION_CACHE=0 turns
# the cache off. No test depends on it: a cache hit returns the program XLA compiled for
# the same input.
_OWN_CACHE_DIR = None
if os.environ.get("SCARJAX_TEST_COMPILATION_CACHE", "1") != "0" and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE_DIR = tempfile.mkdtemp(prefix="scarjax-test-xla-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE_DIR
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

PACKAGE = Path(__file__).resolve().parent / "scarjax"


def pytest_collect_file(file_path: Path, parent):
    """Every module of ``scarjax/`` is a doctest module."""
    if file_path.suffix == ".py" and PACKAGE in file_path.parents:
        return DoctestModule.from_parent(parent, path=file_path)
    return None


def pytest_unconfigure(config):
    """The run's compilation cache goes with the process that made it (the controller
    outlives its workers)."""
    if _OWN_CACHE_DIR is not None:
        shutil.rmtree(_OWN_CACHE_DIR, ignore_errors=True)
