import gzip

import numpy as np
import pytest

from scarjax.data import load_covertype


def _write(path, rows):
    with gzip.open(path, "wt") as f:
        f.write("\n".join(",".join(str(v) for v in r) for r in rows) + "\n")


def test_parse_real_format(tmp_path):
    # Two rows in the UCI format: 10 quantitative, 4 wilderness and 40 soil one-hots, label.
    r1 = [2596, 51, 3, 258, 0, 510, 221, 232, 148, 6279] + [1, 0, 0, 0] + [0] * 28 + [1] + [0] * 11 + [5]
    r2 = [2590, 56, 2, 212, -6, 390, 220, 235, 151, 6225] + [0, 0, 0, 1] + [0] * 39 + [1] + [7]
    _write(tmp_path / "covtype.data.gz", [r1, r2])
    X, y = load_covertype(tmp_path)  # directory form
    assert X.shape == (2, 54) and X.dtype == np.float32
    assert y.dtype == np.int32 and y.tolist() == [4, 6]
    np.testing.assert_array_equal(X[1, :10], r2[:10])
    X2, _ = load_covertype(tmp_path / "covtype.data.gz")  # file form
    np.testing.assert_array_equal(X, X2)


def test_bad_label_and_columns(tmp_path):
    _write(tmp_path / "a.gz", [[0] * 54 + [8]])
    with pytest.raises(ValueError, match="1..7"):
        load_covertype(tmp_path / "a.gz")
    _write(tmp_path / "b.gz", [[0] * 10 + [1]])
    with pytest.raises(ValueError, match="55 columns"):
        load_covertype(tmp_path / "b.gz")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="covtype.data.gz"):
        load_covertype(tmp_path)
