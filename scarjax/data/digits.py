"""scikit-learn's 8x8 handwritten digits (embedded, no download).

The small stand-in for MNIST in the MLR experiments (thesis Sec 5.5.1): 1,797 images,
10 classes.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

__all__ = ["load_digits"]


def load_digits() -> tuple[np.ndarray, np.ndarray]:
    """Return ``(X, y)``: ``X`` float32 ``[1797, 64]`` pixel intensities in ``[0, 1]``
    (the 0..16 grey levels divided by 16), ``y`` int32 ``[1797]`` digits 0..9.

    >>> X, y = load_digits()
    >>> X.shape, y.shape, float(X.max())
    ((1797, 64), (1797,), 1.0)
    """
    path = _digits_file()
    if path is None:
        # scikit-learn is slow to import (about a CPU second): only without its data file
        from sklearn.datasets import load_digits as _sk_load_digits

        bunch = _sk_load_digits()
        data, target = bunch.data, bunch.target
    else:
        with gzip.open(path, mode="rt", encoding="utf-8") as f:
            table = np.loadtxt(f, delimiter=",")  # what scikit-learn's load_digits reads
        data, target = table[:, :-1], table[:, -1].astype(int)
    X = (np.asarray(data, dtype=np.float32) / np.float32(16.0))
    return X, np.asarray(target, dtype=np.int32)


def _digits_file() -> Path | None:
    """scikit-learn's ``datasets/data/digits.csv.gz`` (found without importing scikit-learn),
    or None when it is not there."""
    spec = importlib.util.find_spec("sklearn")
    for root in (spec.submodule_search_locations or []) if spec is not None else []:
        path = Path(root) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return path
    return None
