import sys
import types
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.data import Ratings, load_jester, load_movielens_small, synthetic_ratings

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
    with pytest.raises(ValueError, match="header"):
        load_movielens_small(tmp_path / "a.csv")
    (tmp_path / "b.csv").write_text("\n".join([HEADER, ROWS[0], ROWS[0]]))
    with pytest.raises(ValueError, match="duplicate"):
        load_movielens_small(tmp_path / "b.csv")
    with pytest.raises(FileNotFoundError):
        load_movielens_small(tmp_path / "nope")


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
    with pytest.raises(ValueError, match=r"\[-10, 10\]"):
        load_jester(f)
    (tmp_path / "j.txt").write_text("")
    with pytest.raises(ValueError, match="path"):
        load_jester(tmp_path / "j.txt")
    with pytest.raises(ValueError, match="version"):
        load_jester(version="3")


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
