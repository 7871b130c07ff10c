"""Rating matrices for the matrix-factorisation (ALS) experiments of thesis Sec 5.5.1.

The thesis trains ALS on MovieLens (``movielens-small``, 20 factors) and Jester
(``Jester 2+``, 5 factors; users with no ratings removed and ratings rescaled from
``[-10, 10]`` to ``[0, 10]``). Every loader returns a dense :class:`Ratings`: a float32
``[users, items]`` matrix with zeros where unobserved plus a boolean mask, which keeps
shapes static for jit/vmap.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ._cache import fetch
from ._validate import as_rng, check_choice, check_float, check_int

__all__ = ["Ratings", "load_jester", "load_movielens_small", "synthetic_ratings"]


class Ratings(NamedTuple):
    """A partially observed rating matrix.

    Attributes:
      values: float32 ``[n_users, n_items]``; observed ratings, 0 elsewhere.
      mask: bool ``[n_users, n_items]``; True where a rating is observed.
      user_ids: int64 ``[n_users]``; the source's id of each row.
      item_ids: int64 ``[n_items]``; the source's id of each column.
    """

    values: np.ndarray
    mask: np.ndarray
    user_ids: np.ndarray
    item_ids: np.ndarray


def _from_triples(users, items, values) -> Ratings:
    """Dense :class:`Ratings` from (user id, item id, value) triples; ids -> 0-based."""
    user_ids, u = np.unique(users, return_inverse=True)
    item_ids, i = np.unique(items, return_inverse=True)
    mask = np.zeros((user_ids.size, item_ids.size), dtype=bool)
    mask[u, i] = True
    if mask.sum() != len(u):
        raise ValueError(f"ratings contain {len(u) - int(mask.sum())} duplicate (user, item) pairs")
    dense = np.zeros(mask.shape, dtype=np.float32)
    dense[u, i] = values
    return Ratings(dense, mask, user_ids.astype(np.int64), item_ids.astype(np.int64))


# --------------------------------------------------------------------------- MovieLens

_ML_ZIP = "ml-latest-small.zip"
_ML_URLS = ("https://files.grouplens.org/datasets/movielens/ml-latest-small.zip",)
_ML_SHA256 = "696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436"  # as TFDS pins it
_ML_HEADER = "userId,movieId,rating,timestamp"


def _parse_movielens(text: io.TextIOBase, source) -> Ratings:
    header = text.readline().strip().lstrip("\ufeff")
    if header != _ML_HEADER:
        raise ValueError(f"{source}: expected header {_ML_HEADER!r}, got {header!r}")
    table = np.loadtxt(text, delimiter=",", dtype=np.float64, ndmin=2)
    if table.shape[1] != 4:
        raise ValueError(f"{source}: expected 4 columns, got {table.shape[1]}")
    return _from_triples(table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 2])


def load_movielens_small(path: str | os.PathLike | None = None) -> Ratings:
    """MovieLens ``ml-latest-small`` ratings (Harper & Konstan 2015).

    Args:
      path: ``ratings.csv``, the ``ml-latest-small`` directory holding it, or the
        ``ml-latest-small.zip`` archive; ``None`` downloads the archive from GroupLens
        into the cache (SHA-256 checked). LF and CRLF line endings are both accepted.

    Returns a :class:`Ratings` with users and movies mapped to dense 0-based indices
    (2018 release: 610 users x 9,724 rated movies, 100,836 ratings in 0.5..5).
    The thesis used the older 671 x 9,125 release of the same data set (Sec 5.5.1).
    """
    if path is None:
        path = fetch(_ML_ZIP, _ML_URLS, _ML_SHA256, subdir="movielens")
    p = Path(path).expanduser()
    if p.is_dir():
        p = p / "ratings.csv"
    if not p.is_file():
        raise FileNotFoundError(f"path: {p} does not exist (expected ratings.csv or {_ML_ZIP})")
    if zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as zf:
            members = [n for n in zf.namelist() if n.endswith("ratings.csv")]
            if len(members) != 1:
                raise ValueError(f"path: {p} should hold one ratings.csv, found {members}")
            with zf.open(members[0]) as raw:
                return _parse_movielens(io.TextIOWrapper(raw, encoding="utf-8"), p)
    with open(p, encoding="utf-8") as text:  # universal newlines: LF or CRLF
        return _parse_movielens(text, p)


# --------------------------------------------------------------------------- Jester

_JESTER = {  # version -> (archive, sha256, member in the archive)
    "2+": ("jester_dataset_3.zip",
           "de360773d91253200a203afa99c38d3368bfcfcc02d28088f11d5ec1dacc9f6f",
           "jesterfinal151cols.xls"),
    "1": ("jester_dataset_1_1.zip",
          "cb7841756ded125b15f3d95c9f8241224065e96354c132a46ae4214deeab7615",
          "jester-data-1.xls"),
}
_JESTER_BASES = (
    "https://eigentaste.berkeley.edu/dataset/archive/",
    "https://web.archive.org/web/20250409222630/https://eigentaste.berkeley.edu/dataset/archive/",
)
_NOT_RATED = 99.0


def _xls_table(source, file_contents: bytes | None = None) -> np.ndarray:
    try:
        import xlrd
    except ImportError as e:
        raise ImportError(
            "reading Jester .xls files needs the 'xlrd' package (pip install xlrd); "
            "or pass the same table saved as .csv"
        ) from e
    if file_contents is None:
        book = xlrd.open_workbook(os.fspath(source))
    else:
        book = xlrd.open_workbook(file_contents=file_contents)
    sheet = book.sheet_by_index(0)
    rows = [[np.nan if c in ("", None) else c for c in sheet.row_values(r)] for r in range(sheet.nrows)]
    return np.asarray(rows, dtype=np.float64)


def _jester_from_table(table: np.ndarray, source) -> Ratings:
    """Jester layout: column 0 = number of jokes rated, then one column per joke with
    ratings in [-10, 10] and 99 (or blank) for "not rated"."""
    if table.ndim != 2 or table.shape[1] < 2:
        raise ValueError(f"{source}: expected a [users, 1 + jokes] table, got shape {table.shape}")
    r = table[:, 1:]
    mask = ~np.isnan(r) & (r != _NOT_RATED)
    if np.any(np.abs(r[mask]) > 10.0 + 1e-6):
        raise ValueError(f"{source}: ratings must lie in [-10, 10] (or be 99 = not rated)")
    keep = mask.any(axis=1)  # thesis Sec 5.5.1: remove users with no ratings
    mask = mask[keep]
    values = np.where(mask, (np.nan_to_num(r[keep]) + 10.0) / 2.0, 0.0).astype(np.float32)
    return Ratings(values, mask, np.flatnonzero(keep).astype(np.int64),
                   np.arange(1, r.shape[1] + 1, dtype=np.int64))


def load_jester(path: str | os.PathLike | None = None, version: str = "2+") -> Ratings:
    """Jester joke ratings (Goldberg et al. 2001), prepared as in thesis Sec 5.5.1.

    Args:
      path: a Jester table in the original format, as ``.xls`` (needs ``xlrd``) or the
        same table saved as ``.csv`` (comma-separated, no header): column 0 is the number
        of jokes the user rated, the other columns the ratings in ``[-10, 10]``, 99 or
        blank = not rated. ``None`` downloads ``version`` into the cache (SHA-256 checked).
      version: which archive to download when ``path`` is None: ``"2+"`` (the thesis's
        ``Jester 2+``, ``jesterfinal151cols.xls``, 150 jokes) or ``"1"``
        (``jester-data-1.xls``, 100 jokes).

    Returns a :class:`Ratings` with ratings rescaled to ``[0, 10]`` (``(r + 10) / 2``) and
    users without any rating removed; ``user_ids`` are the kept rows' 0-based indices in
    the file, ``item_ids`` the joke numbers ``1..n_jokes``.
    """
    check_choice("version", version, _JESTER)
    if path is None:
        archive, sha, member = _JESTER[version]
        zpath = fetch(archive, [b + archive for b in _JESTER_BASES], sha, subdir="jester")
        with zipfile.ZipFile(zpath) as zf:
            return _jester_from_table(_xls_table(member, zf.read(member)), f"{zpath}:{member}")
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"path: {p} does not exist")
    suffix = p.suffix.lower()
    if suffix == ".xls":
        table = _xls_table(p)
    elif suffix == ".csv":
        table = np.genfromtxt(p, delimiter=",", dtype=np.float64, ndmin=2)
    else:
        raise ValueError(f"path: expected a .xls or .csv Jester file, got {p.name!r}")
    return _jester_from_table(table, p)


# --------------------------------------------------------------------------- synthetic


def synthetic_ratings(
    key_or_seed=0,
    n_users: int = 610,
    n_items: int = 1000,
    rank: int = 10,
    density: float = 0.017,
    noise: float = 0.25,
) -> Ratings:
    """A MovieLens-like low-rank rating matrix (embedded default, no download).

    Ratings are ``clip(3.5 + U V^T + noise * eps, 0.5, 5)`` rounded to half stars, with
    ``U [n_users, rank]``, ``V [n_items, rank]`` Gaussian so that ``U V^T`` has unit
    variance. Exactly ``max(round(density * n_users * n_items), n_users, n_items)``
    entries are observed, every user and every item at least once (so every ALS row
    and column solve is well posed). The defaults match MovieLens-small's 610 users
    and 1.7 % density on 1,000 items, small enough for fast ALS on a laptop.

    Args:
      key_or_seed: int seed or JAX PRNG key; the same value gives the same matrix.
      n_users, n_items, rank: matrix shape and true rank (``rank >= 1``).
      density: target fraction of observed entries, in ``(0, 1]``.
      noise: standard deviation of the additive Gaussian noise (``>= 0``).
    """
    n_users = check_int("n_users", n_users)
    n_items = check_int("n_items", n_items)
    rank = check_int("rank", rank)
    density = check_float("density", density, 0.0, 1.0, open_low=True)
    noise = check_float("noise", noise, 0.0)
    rng = as_rng(key_or_seed)

    # Observed pattern: a covering set (each user and item once), topped up uniformly.
    n_obs = max(int(round(density * n_users * n_items)), n_users, n_items)
    k = np.arange(max(n_users, n_items))
    cover = rng.permutation(n_users)[k % n_users] * n_items + rng.permutation(n_items)[k % n_items]
    rest = np.setdiff1d(np.arange(n_users * n_items), cover, assume_unique=False)
    extra = rng.choice(rest, size=n_obs - cover.size, replace=False)
    mask = np.zeros(n_users * n_items, dtype=bool)
    mask[cover] = True
    mask[extra] = True
    mask = mask.reshape(n_users, n_items)

    scale = rank ** -0.25
    u = rng.normal(0.0, scale, (n_users, rank))
    v = rng.normal(0.0, scale, (n_items, rank))
    full = 3.5 + u @ v.T + noise * rng.normal(size=(n_users, n_items))
    full = np.round(np.clip(full, 0.5, 5.0) * 2.0) / 2.0
    values = np.where(mask, full, 0.0).astype(np.float32)
    return Ratings(values, mask, np.arange(n_users, dtype=np.int64), np.arange(n_items, dtype=np.int64))
