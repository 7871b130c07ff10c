"""UCI Forest CoverType (Blackard & Dean 1999), used by the MLR experiments of thesis
Sec 5.5.1 (multinomial logistic regression, batch size 1,000).

581,012 rows of 54 cartographic features (10 quantitative, 4 wilderness-area and 40
soil-type indicators) and a cover type 1..7, from ``covtype.data.gz``.
"""

from __future__ import annotations

import os

import numpy as np

from ._cache import resolve
from ._parse import Column, parse_table, read_bytes, text_lines

__all__ = ["load_covertype"]

_NAME = "covtype.data.gz"
# The checksum scikit-learn pins for this file (sklearn.datasets.fetch_covtype).
_SHA256 = "614360d0257557dd1792834a85a1cdebfadc3c4f30b011d56afee7ffb5b15771"
_URLS = (
    "https://ndownloader.figshare.com/files/5976039",
    "https://archive.ics.uci.edu/ml/machine-learning-databases/covtype/covtype.data.gz",
)
N_FEATURES, N_CLASSES = 54, 7
# UCI covtype.info: 10 quantitative integer columns (units and ranges as documented there),
# 4 wilderness-area and 40 soil-type 0/1 indicators, then the cover type 1..7.
_COLUMNS = (
    Column("Elevation", integer=True, low=0),
    Column("Aspect", integer=True, low=0, high=360),
    Column("Slope", integer=True, low=0, high=90),
    Column("Horizontal_Distance_To_Hydrology", integer=True, low=0),
    Column("Vertical_Distance_To_Hydrology", integer=True),
    Column("Horizontal_Distance_To_Roadways", integer=True, low=0),
    Column("Hillshade_9am", integer=True, low=0, high=255),
    Column("Hillshade_Noon", integer=True, low=0, high=255),
    Column("Hillshade_3pm", integer=True, low=0, high=255),
    Column("Horizontal_Distance_To_Fire_Points", integer=True, low=0),
    *(Column(f"Wilderness_Area{i}", integer=True, low=0, high=1, bounds_text="0 or 1") for i in range(1, 5)),
    *(Column(f"Soil_Type{i}", integer=True, low=0, high=1, bounds_text="0 or 1") for i in range(1, 41)),
    Column("Cover_Type", integer=True, low=1, high=N_CLASSES, bounds_text=f"a cover type 1..{N_CLASSES}"),
)


def load_covertype(path: str | os.PathLike | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Load CoverType.

    Args:
      path: ``covtype.data.gz`` (or the uncompressed ``covtype.data``) or the directory
        holding it; ``None`` downloads it into the cache (checked against SHA-256).

    Returns ``(X, y)``: ``X`` float32 ``[n, 54]`` raw (unscaled) features, ``y`` int32
    ``[n]`` in ``0..6`` (the file's cover types 1..7 minus one).

    Every line is checked: 55 comma-separated integers, the documented ranges (aspect
    0..360, slope 0..90, hillshades 0..255, non-negative elevation and horizontal
    distances), 0/1 indicators and a cover type 1..7; a violation, an empty file or a
    truncated gzip stream raises :class:`~scarjax.data.DataFormatError` naming the file
    and the line.
    """
    file = resolve(path, _NAME, _URLS, _SHA256, subdir="covertype")
    lines, linenos = text_lines(read_bytes(file), file)
    table = parse_table(lines, linenos, _COLUMNS, file)
    return table[:, :-1].astype(np.float32), (table[:, -1] - 1).astype(np.int32)
