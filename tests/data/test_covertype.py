import gzip

import numpy as np
import pytest

from scarjax.data import DataFormatError, load_covertype


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


R1 = [2596, 51, 3, 258, 0, 510, 221, 232, 148, 6279] + [1, 0, 0, 0] + [0] * 28 + [1] + [0] * 11 + [5]


@pytest.mark.parametrize("col, value, match", [
    (54, 8, r"Cover_Type must be a cover type 1\.\.7, got '8'"),
    (54, 0, r"Cover_Type must be a cover type 1\.\.7, got '0'"),
    (0, 2596.5, r"Elevation must be an integer, got '2596.5'"),
    (1, 361, r"Aspect must be in \[0, 360\], got '361'"),
    (7, "nan", r"Hillshade_Noon must be a finite number, got 'nan'"),
    (12, 2, r"Wilderness_Area3 must be 0 or 1, got '2'"),
    (20, "x", r"Soil_Type7 must be a number, got 'x'"),
    (3, "", r"Horizontal_Distance_To_Hydrology is empty"),
])
def test_bad_value_names_file_line_column(tmp_path, col, value, match):
    bad = list(R1)
    bad[col] = value
    _write(tmp_path / "a.gz", [R1, R1, bad, R1])
    with pytest.raises(DataFormatError, match=r"a\.gz, line 3: " + match):
        load_covertype(tmp_path / "a.gz")


def test_bad_columns_and_empty(tmp_path):
    _write(tmp_path / "b.gz", [R1, [0] * 10 + [1]])
    with pytest.raises(DataFormatError, match=r"b\.gz, line 2: expected 55 fields .* got 11"):
        load_covertype(tmp_path / "b.gz")
    (tmp_path / "covtype.data").write_text("")
    with pytest.raises(DataFormatError, match="covtype.data: empty file"):
        load_covertype(tmp_path / "covtype.data")


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="covtype.data.gz"):
        load_covertype(tmp_path)
