"""UCI Forest CoverType (Blackard & Dean 1999), used by the MLR experiments of thesis
Sec 5.5.1 (multinomial logistic regression, batch size 1,000).

581,012 rows of 54 cartographic features (10 quantitative, 4 wilderness-area and 40
soil-type indicators) and a cover type 1..7, from ``covtype.data.gz``.
"""

from __future__ import annotations

import gzip
import os

import numpy as np

from ._cache import resolve

__all__ = ["load_covertype"]

_NAME = "covtype.data.gz"
# The checksum scikit-learn pins for this file (sklearn.datasets.fetch_covtype).
_SHA256 = "614360d0257557dd1792834a85a1cdebfadc3c4f30b011d56afee7ffb5b15771"
_URLS = (
    "https://ndownloader.figshare.com/files/5976039",
    "https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz",
)
N_FEATURES, N_CLASSES = 54, 7


def load_covertype(path: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Load CoverType.

    Args:
      path: ``covtype.data.gz`` (or the uncompressed ``covtype.data``) or the directory
        holding it; ``None`` downloads it into the cache (checked against SHA-256).

    Returns ``(X, y)``: ``X`` float32 ``[n, 54]`` raw (unscaled) features, ``y`` int32
    ``[n]`` in ``0..6`` (the file's cover types 1..7 minus one).
    """
    file = resolve(path, _NAME, _URLS, _SHA256, subdir="covertype")
    opener = gzip.open if str(file).endswith(".gz") else open
    with opener(file, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    if table.shape[1] != N_FEATURES + 1:
        raise ValueError(f"{file}: expected {N_FEATURES + 1} columns, got {table.shape[1]}")
    y = table[:, -1]
    if y.size and (y.min() < 1 or y.max() > N_CLASSES):
        raise ValueError(f"{file}: cover types must be in 1..{N_CLASSES}, got {y.min()}..{y.max()}")
    return table[:, :-1].astype(np.float32), (y - 1).astype(np.int32)
