import sys
import types
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.data import (
    DataFormatError,
    Ratings,
    load_jester,
    load_movielens,
    load_movielens_small,
    ratings_from_triples,
    synthetic_ratings,
)

HEADER = "userId,movieId,rating,timestamp"
ROWS = ["1,10,4.0,964982703", "1,30,2.5,964982704", "7,10,5.0,964982705"]


def _check_small(r: Ratings):
    assert r.values.shape == r.mask.shape == (2, 2)
    assert r.values.dtype == np.float32 and r.mask.dtype == bool
    assert r.user_ids.tolist() == [1, 7] and r.item_ids.tolist() == [10, 30]
    np.testing.assert_array_equal(r.values, [[4.0, 2.5], [5.0, 0.0]])
    np.testing.assert_array_equal(r.mask, [[True, True], [True, False]])


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_movielens_line_endings(tmp_path, eol):
    (tmp_path / "ratings.csv").write_bytes((eol.join([HEADER, *ROWS]) + eol).encode())
    _check_small(load_movielens_small(tmp_path / "ratings.csv"))
    _check_small(load_movielens_small(tmp_path))


def test_movielens_zip(tmp_path):
    z = tmp_path / "ml-latest-small.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("ml-latest-small/ratings.csv", "\r\n".join([HEADER, *ROWS]) + "\r\n")
    _check_small(load_movielens_small(z))


def test_movielens_bad_input(tmp_path):
    (tmp_path / "a.csv").write_text("user,item,rating\n1,2,3\n")
    with pytest.raises(DataFormatError, match=r"a\.csv, line 1: bad header .*missing column\(s\) \['userId'"):
        load_movielens_small(tmp_path / "a.csv")
    (tmp_path / "b.csv").write_text("\n".join([HEADER, ROWS[0], ROWS[1], ROWS[0]]))
    with pytest.raises(DataFormatError, match=r"b\.csv, line 4: duplicate rating: userId 1 rated movieId 10 "
                                              r"already at line 2"):
        load_movielens_small(tmp_path / "b.csv")
    with pytest.raises(FileNotFoundError):
        load_movielens_small(tmp_path / "nope")


# Silent wrong results the loaders once gave (3.7 -> 3, out-of-scale and NaN ratings, numpy's
# message without a file): each is now refused, naming the file, the line and the field.
@pytest.mark.parametrize("row, match", [
    ("3.7,10,4.0,1", r"userId must be an integer, got '3.7'"),
    ("1,10.5,4.0,1", r"movieId must be an integer, got '10.5'"),
    ("-1,10,4.0,1", r"userId must be >= 0, got '-1'"),
    ("1,11,5.5,1", r"rating must be on the rating scale \[0.5, 5\], got '5.5'"),
    ("1,11,0,1", r"rating must be on the rating scale \[0.5, 5\], got '0'"),
    ("1,11,nan,1", r"rating must be a finite number, got 'nan'"),
    ("1,11,-inf,1", r"rating must be a finite number, got '-inf'"),
    ("1,11,3.7,1", r"rating must be a multiple of 0.5 on the rating scale \[0.5, 5\], got '3.7'"),
    ("1,11,,1", r"rating is empty"),
    ("1,11,four,1", r"rating must be a number, got 'four'"),
    ("1,11,4.0", r"expected 4 fields \(userId, movieId, rating, timestamp\), got 3"),
    ("1,11,4.0,1,7", r"expected 4 fields .* got 5: extra fields"),
    ("1,11,4.0,1.5", r"timestamp must be an integer, got '1.5'"),
])
def test_movielens_malformed_line(tmp_path, row, match):
    f = tmp_path / "ratings.csv"
    f.write_text("\r\n".join([HEADER, ROWS[0], ROWS[1], row, ROWS[2]]) + "\r\n")
    with pytest.raises(DataFormatError, match=r"ratings\.csv, line 4: " + match) as e:
        load_movielens_small(f)
    assert e.value.line == 4 and e.value.path == str(f)


def test_movielens_integral_ids_scale_and_empty(tmp_path):
    f = tmp_path / "ratings.csv"
    f.write_text("\n".join([HEADER, "1.0,10,4.0,964982703", "1,30.0,2.5,964982704", "7,10,5,964982705"]))
    _check_small(load_movielens_small(f))  # 3.0-style ids are integral: accepted
    f.write_text("\n".join([HEADER, "1,10,7,1", "2,10,10,1"]))
    r = load_movielens(f, scale=(1, 10), step=1)
    np.testing.assert_array_equal(r.values[r.mask], [7, 10])
    with pytest.raises(DataFormatError, match="line 2: rating must be on the rating scale"):
        load_movielens_small(f)
    f.write_text("")
    with pytest.raises(DataFormatError, match=r"ratings\.csv: empty file"):
        load_movielens_small(f)
    f.write_text(HEADER + "\n\n")
    with pytest.raises(DataFormatError, match=r"ratings\.csv: no ratings after the header"):
        load_movielens_small(f)
    f.write_text(ROWS[0] + "\n")
    with pytest.raises(DataFormatError, match=r"line 1: no header"):
        load_movielens_small(f)
    f.write_bytes(HEADER.encode() + b"\n1,10,4.0,9\xff\n")
    with pytest.raises(DataFormatError, match=r"line 2: byte 0xff at column 11 is not utf-8 text"):
        load_movielens_small(f)


@pytest.mark.parametrize("version, name, text", [
    ("100k", "u.data", "1\t10\t4\t964982703\n1\t30\t2\t964982704\n7\t10\t5\t964982705\n"),
    ("1m", "ratings.dat", "1::10::4::964982703\n1::30::2::964982704\n7::10::5::964982705\n"),
    ("10m", "ratings.dat", "1::10::4.0::964982703\n1::30::2.5::964982704\n7::10::5::964982705\n"),
    ("25m", "ratings.csv", "\n".join([HEADER, *ROWS])),
])
def test_movielens_versions(tmp_path, version, name, text):
    (tmp_path / name).write_text(text)
    r = load_movielens(tmp_path, version=version)
    assert r.user_ids.tolist() == [1, 7] and r.item_ids.tolist() == [10, 30]
    assert r.values[0, 0] == 4.0 and r.values[1, 0] == 5.0


def test_movielens_version_scales(tmp_path):
    (tmp_path / "u.data").write_text("1\t10\t4\t1\n1\t30\t2.5\t2\n")
    with pytest.raises(DataFormatError, match=r"u\.data, line 2: rating must be a multiple of 1 on the rating "
                                              r"scale \[1, 5\], got '2.5'"):
        load_movielens(tmp_path, version="100k")
    (tmp_path / "ratings.dat").write_text("1::10::0.5::1\n")
    with pytest.raises(DataFormatError, match=r"line 1: rating must be on the rating scale \[1, 5\]"):
        load_movielens(tmp_path, version="1m")
    assert load_movielens(tmp_path, version="10m").values[0, 0] == 0.5
    (tmp_path / "ratings.csv").write_text("1\t10\t4\t1\n")
    with pytest.raises(DataFormatError, match="version='100k'"):
        load_movielens(tmp_path / "ratings.csv")


@pytest.mark.parametrize("kwargs, exc, name", [
    ({"version": "2k"}, ValueError, "version"),
    ({"version": ["latest"]}, ValueError, "version"),
    ({"scale": (5, 1)}, ValueError, "scale"),
    ({"scale": (0, float("nan"))}, ValueError, r"scale\[1\]"),
    ({"scale": 5}, ValueError, "scale"),
    ({"step": -0.5}, ValueError, "step"),
    ({"path": 3}, TypeError, "path"),
    ({"path": None, "version": "100k"}, ValueError, "path"),
])
def test_movielens_bad_arguments(tmp_path, kwargs, exc, name):
    args = {"path": tmp_path} | kwargs
    with pytest.raises(exc, match=f"^{name}"):
        load_movielens(**args)


def test_ratings_from_triples():
    r = ratings_from_triples([7, 1, 1], [10.0, 10, 30], [5.0, 4.0, 2.5], scale=(0.5, 5), step=0.5)
    _check_small(r)
    for kwargs, exc, match in [
        (dict(users=[1, 2.5]), ValueError, r"users\[1\]: must be an integer, got 2.5"),
        (dict(items=[1, -2]), ValueError, r"items\[1\]: must be >= 0"),
        (dict(ratings=[3, np.nan]), ValueError, r"ratings\[1\]: must be a finite number"),
        (dict(ratings=[3, 6]), ValueError, r"ratings\[1\]: must be on the rating scale \[0.5, 5\], got 6.0"),
        (dict(ratings=[3, 3.7]), ValueError, r"ratings\[1\]: must be a multiple of 0.5"),
        (dict(items=[1]), ValueError, r"items: expected length 2"),
        (dict(users=[[1, 2]]), ValueError, r"users: expected a 1-D array"),
        (dict(users=["a", "b"]), TypeError, r"users: expected a 1-D array of numbers"),
        (dict(items=[5, 5], users=[1, 1]), ValueError, r"users/items: duplicate rating"),
        (dict(users=[], items=[], ratings=[]), ValueError, r"users: no ratings"),
        (dict(scale=(5, 0.5)), ValueError, r"scale must have lo < hi"),
    ]:
        args = dict(users=[1, 2], items=[1, 2], ratings=[3, 4], scale=(0.5, 5), step=0.5) | kwargs
        with pytest.raises(exc, match=match):
            ratings_from_triples(**args)


def test_movielens_real(shared_data):
    r = load_movielens_small(shared_data("movielens/ml-latest-small"))
    assert r.values.shape == (610, 9724)
    assert int(r.mask.sum()) == 100836
    obs = r.values[r.mask]
    assert obs.min() == 0.5 and obs.max() == 5.0
    assert np.all(obs * 2 == np.round(obs * 2))
    assert np.all(r.values[~r.mask] == 0)
    assert r.user_ids[0] == 1 and r.item_ids[-1] == 193609
    assert r.values[0, 0] == 4.0  # first row: 1,1,4.0
    assert r.mask.any(axis=0).all() and r.mask.any(axis=1).all()


# ---------------------------------------------------------------- Jester

JESTER = [
    [3, -9.5, 99, 10.0, 3.0],
    [0, 99, 99, 99, 99],  # no ratings: removed
    [1, 99, 0.0, 99, 99],
]


def _check_jester(r):
    assert r.values.shape == (2, 4)
    assert r.user_ids.tolist() == [0, 2] and r.item_ids.tolist() == [1, 2, 3, 4]
    np.testing.assert_array_equal(r.mask, [[1, 0, 1, 1], [0, 1, 0, 0]])
    np.testing.assert_allclose(r.values, [[0.25, 0, 10.0, 6.5], [0, 5.0, 0, 0]])


def test_jester_csv(tmp_path):
    f = tmp_path / "jester.csv"
    f.write_text("\n".join(",".join(str(v) for v in row) for row in JESTER) + "\n")
    _check_jester(load_jester(f))


def test_jester_csv_blank_is_unrated(tmp_path):
    f = tmp_path / "jester.csv"
    f.write_text("1,2.0,,\n")
    r = load_jester(f)
    assert r.mask.tolist() == [[True, False, False]] and r.values[0, 0] == 6.0


def test_jester_xls_with_fake_xlrd(tmp_path, monkeypatch):
    class Sheet:
        nrows = len(JESTER)

        def row_values(self, i):
            return ["" if v == 99 and i == 1 else v for v in JESTER[i]]  # blanks and 99s

    fake = types.SimpleNamespace(open_workbook=lambda *a, **k: types.SimpleNamespace(sheet_by_index=lambda i: Sheet()))
    monkeypatch.setitem(sys.modules, "xlrd", fake)
    f = tmp_path / "jester-data-1.xls"
    f.write_bytes(b"")
    _check_jester(load_jester(f))


def test_jester_xls_needs_xlrd(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "xlrd", None)
    f = tmp_path / "jester.xls"
    f.write_bytes(b"")
    with pytest.raises(ImportError, match="xlrd"):
        load_jester(f)


def test_jester_bad_input(tmp_path):
    f = tmp_path / "j.csv"
    f.write_text("1,11.0\n")
    with pytest.raises(DataFormatError, match=r"j\.csv, line 1: joke 1 must be on the rating scale \[-10, 10\]"):
        load_jester(f)
    (tmp_path / "j.txt").write_text("")
    with pytest.raises(ValueError, match="path"):
        load_jester(tmp_path / "j.txt")
    with pytest.raises(ValueError, match="version"):
        load_jester(version="3")


@pytest.mark.parametrize("line, match", [
    ("2,3.5,nan,99", r"joke 2 must be a finite number, got 'nan'"),
    ("2,3.5,-10.5,99", r"joke 2 must be on the rating scale \[-10, 10\] or 99 \(not rated\), got '-10.5'"),
    ("2.5,3.5,1,99", r"count must be an integer, got '2.5'"),
    ("7,3.5,1,99", r"count must be a count of rated jokes in \[0, 3\], got '7'"),
    ("2,3.5,1", r"expected 4 fields \(count, joke 1, joke 2, joke 3\), got 3"),
    (",3.5,1,99", r"count is empty"),
    ("2,3.5,x,99", r"joke 2 must be a number, got 'x'"),
])
def test_jester_malformed_line(tmp_path, line, match):
    f = tmp_path / "jester.csv"
    f.write_text("\n".join([line, "1,99,0.0,99", "3,1,2,3"]) + "\n")
    with pytest.raises(DataFormatError, match=r"jester\.csv, line 1: " + match):
        load_jester(f)


def test_jester_scale_and_empty(tmp_path):
    f = tmp_path / "j.csv"
    f.write_text("1,5\n1,-5\n")
    r = load_jester(f, scale=(-5, 5))
    np.testing.assert_allclose(r.values[:, 0], [10.0, 0.0])
    f.write_text("0,99,\n0,,99\n")
    with pytest.raises(DataFormatError, match=r"j\.csv: no ratings"):
        load_jester(f)
    for scale, name in [((0, 100), "scale: must not contain 99"), ((1, 1), "scale must have lo < hi")]:
        with pytest.raises(ValueError, match=name):
            load_jester(f, scale=scale)


def test_jester_xls_bad_cell(tmp_path, monkeypatch):
    rows = [[1, 2.0, 99], [1, "n/a", 99]]

    class Sheet:
        nrows = len(rows)

        def row_values(self, i):
            return rows[i]

    fake = types.SimpleNamespace(open_workbook=lambda *a, **k: types.SimpleNamespace(sheet_by_index=lambda i: Sheet()))
    monkeypatch.setitem(sys.modules, "xlrd", fake)
    f = tmp_path / "jester.xls"
    f.write_bytes(b"")
    with pytest.raises(DataFormatError, match=r"jester\.xls, row 2: joke 1 must be a number, got 'n/a'"):
        load_jester(f)
    rows[1][1] = 12.0
    with pytest.raises(DataFormatError, match=r"jester\.xls, row 2: joke 1 must be on the rating scale"):
        load_jester(f)


# ---------------------------------------------------------------- synthetic


def test_synthetic_defaults():
    r = synthetic_ratings(0)
    assert r.values.shape == (610, 1000) and r.values.dtype == np.float32
    assert abs(r.mask.mean() - 0.017) < 1e-4
    obs = r.values[r.mask]
    assert 3.0 < obs.mean() < 4.0 and 0.5 < obs.std() < 1.5


def test_synthetic_jax_key():
    import jax

    a = synthetic_ratings(jax.random.key(3), n_users=20, n_items=30)
    b = synthetic_ratings(jax.random.PRNGKey(3), n_users=20, n_items=30)
    np.testing.assert_array_equal(a.values, b.values)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**31),
    n_users=st.integers(1, 40),
    n_items=st.integers(1, 40),
    rank=st.integers(1, 6),
    density=st.floats(0.01, 1.0),
)
def test_synthetic_invariants(seed, n_users, n_items, rank, density):
    r = synthetic_ratings(seed, n_users=n_users, n_items=n_items, rank=rank, density=density)
    assert r.values.shape == r.mask.shape == (n_users, n_items)
    expected = max(round(density * n_users * n_items), n_users, n_items)
    assert int(r.mask.sum()) == expected
    assert r.mask.any(axis=0).all() and r.mask.any(axis=1).all()
    obs = r.values[r.mask]
    assert obs.min() >= 0.5 and obs.max() <= 5.0 and np.all(obs * 2 == np.round(obs * 2))
    assert np.all(r.values[~r.mask] == 0)
    again = synthetic_ratings(seed, n_users=n_users, n_items=n_items, rank=rank, density=density)
    np.testing.assert_array_equal(r.values, again.values)


@pytest.mark.parametrize(
    "kwargs, name",
    [({"n_users": 0}, "n_users"), ({"n_items": 2.5}, "n_items"), ({"rank": -1}, "rank"),
     ({"density": 0.0}, "density"), ({"density": 1.5}, "density"), ({"noise": -1.0}, "noise"),
     ({"key_or_seed": -3}, "key_or_seed"), ({"key_or_seed": "abc"}, "key_or_seed")],
)
def test_synthetic_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        synthetic_ratings(**kwargs)
