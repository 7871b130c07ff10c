"""Checks shared by the loaders.

Two kinds of bad input, two kinds of error, both ``ValueError`` (or ``TypeError`` for a
wrong type):

* a bad **argument** given in Python raises ``ValueError``/``TypeError`` whose message
  starts with the argument's name (``"density: expected ..."``);
* a bad **file** raises :class:`DataFormatError` (a ``ValueError``) whose message names
  the file, the line (1-based; ``row`` for spreadsheets, ``byte`` for binary files) and
  what is wrong, e.g. ``ratings.csv, line 7: movieId must be an integer, got '3.7'``.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

import numpy as np

__all__ = [
    "DataFormatError",
    "as_rng",
    "check_choice",
    "check_float",
    "check_int",
    "check_path",
    "check_scale",
]


class DataFormatError(ValueError):
    """A data file is malformed.

    Attributes:
      path: the file (``str``; ``archive.zip:member`` for a file inside an archive).
      line: 1-based position of the problem, or ``None`` when it concerns the whole file.
      unit: what ``line`` counts: ``"line"`` (text files), ``"row"`` (spreadsheets),
        ``"byte"`` (binary files, 0-based offset) or ``"record"`` (0-based record index).
      reason: what is wrong, without the location.
    """

    def __init__(self, path, reason: str, line: int | None = None, unit: str = "line"):
        self.path = str(path)
        self.reason = reason
        self.line = None if line is None else int(line)
        self.unit = unit
        where = self.path if line is None else f"{self.path}, {unit} {self.line}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):  # keep the attributes through pickling (multiprocessing, xdist)
        return (type(self), (self.path, self.reason, self.line, self.unit))


def check_int(name: str, value, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        hi = "inf" if high is None else high
        raise ValueError(f"{name}: expected an integer in [{low}, {hi}], got {value}")
    return int(value)


def check_float(name: str, value, low: float, high: float = np.inf, *, open_low=False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` if ``open_low``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if value < low or value > high or (open_low and value == low):
        lb = "(" if open_low else "["
        raise ValueError(f"{name}: expected a number in {lb}{low}, {high}], got {value}")
    return float(value)


def check_choice(name: str, value, choices) -> str:
    """``value`` if it is one of ``choices``, else ``ValueError`` naming ``name``."""
    try:
        ok = value in choices
    except TypeError:  # unhashable value
        ok = False
    if not ok:
        raise ValueError(f"{name}: expected one of {sorted(choices)}, got {value!r}")
    return value


def check_bool(name: str, value) -> bool:
    """``value`` if it is a bool (or NumPy bool), else ``TypeError`` naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name}: expected True or False, got {value!r}")
    return bool(value)


def check_path(name: str, value) -> Path:
    """``value`` (a ``str`` or ``os.PathLike``) as an expanded :class:`~pathlib.Path`."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name}: expected a file path (str or os.PathLike), got {type(value).__name__} {value!r}")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{name}: expected a file path, got an empty string")
    return Path(value).expanduser()


def check_scale(name: str, value) -> tuple[float, float]:
    """``value`` as a rating scale ``(lo, hi)`` of finite numbers with ``lo < hi``."""
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected a pair (lo, hi), got {value!r}") from None
    lo = check_float(f"{name}[0]", lo, -np.inf)
    hi = check_float(f"{name}[1]", hi, -np.inf)
    if not lo < hi:
        raise ValueError(f"{name}: expected lo < hi, got ({lo}, {hi})")
    return lo, hi


def as_rng(key_or_seed) -> np.random.Generator:
    """A NumPy generator from a non-negative int seed or a JAX PRNG key.

    A JAX key (typed ``jax.random.key`` or raw ``uint32[2]`` ``PRNGKey``) is turned into
    a seed from its key data, so the same key always gives the same data set.
    """
    if isinstance(key_or_seed, numbers.Integral) and not isinstance(key_or_seed, bool):
        if key_or_seed < 0:
            raise ValueError(f"key_or_seed: expected a non-negative seed, got {key_or_seed}")
        return np.random.default_rng(int(key_or_seed))
    try:
        import jax

        arr = key_or_seed
        if jax.dtypes.issubdtype(getattr(arr, "dtype", None), jax.dtypes.prng_key):
            arr = jax.random.key_data(arr)
        data = np.asarray(arr)
    except Exception as e:  # noqa: BLE001 - report as a bad argument
        raise ValueError(f"key_or_seed: expected an int seed or a JAX PRNG key, got {key_or_seed!r}") from e
    if data.dtype != np.uint32 or data.size == 0:
        raise ValueError(f"key_or_seed: expected an int seed or a JAX PRNG key, got {key_or_seed!r}")
    return np.random.default_rng([int(v) for v in data.ravel()])
