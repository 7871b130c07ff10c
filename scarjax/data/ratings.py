"""Rating matrices for the matrix-factorisation (ALS) experiments of thesis Sec 5.5.1.

The thesis trains ALS on MovieLens (``movielens-small``, 20 factors) and Jester
(``Jester 2+``, 5 factors; users with no ratings removed and ratings rescaled from
``[-10, 10]`` to ``[0, 10]``). Every loader returns a dense :class:`Ratings`: a float32
``[users, items]`` matrix with zeros where unobserved plus a boolean mask, which keeps
shapes static for jit/vmap.
"""

from __future__ import annotations

import os
import zipfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from scarjax.validate import (
    DataFormatError,
    as_rng,
    check_choice,
    check_int,
    check_path,
    check_real,
    check_scale,
)

from ._cache import fetch
from ._parse import Column, check_columns, parse_table, read_bytes, text_lines

__all__ = [
    "Ratings",
    "load_jester",
    "load_movielens",
    "load_movielens_small",
    "ratings_from_triples",
    "synthetic_ratings",
]


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


def _dense(users: np.ndarray, items: np.ndarray, values: np.ndarray, on_duplicate) -> Ratings:
    """Dense :class:`Ratings` from validated (int64 user, int64 item, value) triples.

    ``on_duplicate(k, first)`` raises for the earliest triple ``k`` repeating the
    (user, item) pair of triple ``first``.
    """
    user_ids, u = np.unique(users, return_inverse=True)
    item_ids, i = np.unique(items, return_inverse=True)
    key = u.astype(np.int64) * item_ids.size + i
    order = np.argsort(key, kind="stable")
    sk = key[order]
    repeat = np.flatnonzero(sk[1:] == sk[:-1]) + 1
    if repeat.size:
        k = int(order[repeat].min())
        first = int(order[np.searchsorted(sk, key[k])])  # stable sort: the earliest occurrence
        on_duplicate(k, first)
    mask = np.zeros((user_ids.size, item_ids.size), dtype=bool)
    mask[u, i] = True
    dense = np.zeros(mask.shape, dtype=np.float32)
    dense[u, i] = values
    return Ratings(dense, mask, user_ids.astype(np.int64), item_ids.astype(np.int64))


def _check_vector(name: str, value, n: int | None = None) -> np.ndarray:
    """``value`` as a 1-D float64 array (length ``n`` if given), else an error naming ``name``."""
    try:
        arr = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - ragged or odd objects
        raise TypeError(f"{name}: expected a 1-D array of numbers ({e})") from None
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TypeError(f"{name}: expected a 1-D array of numbers, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D array, got shape {arr.shape}")
    if n is not None and arr.size != n:
        raise ValueError(f"{name}: expected length {n} (the length of users), got {arr.size}")
    return arr.astype(np.float64)


def _check_array_column(name: str, arr: np.ndarray, col: Column) -> None:
    bad = np.flatnonzero(col.bad(arr))
    if bad.size:
        k = int(bad[0])
        raise ValueError(f"{name}[{k}]: {col.problem(float(arr[k]))}, got {float(arr[k])!r}")


def ratings_from_triples(users, items, ratings, scale=None, step: float = 0.0) -> Ratings:
    """A dense :class:`Ratings` from ``(user id, item id, rating)`` triples given in Python.

    Args:
      users, items: 1-D arrays of non-negative integer ids (``3`` and ``3.0`` pass,
        ``3.7`` does not); rows/columns of the result are the sorted distinct ids.
      ratings: 1-D array of finite ratings, the same length.
      scale: optional ``(lo, hi)``; ratings outside it are rejected.
      step: ``> 0``: ratings must be ``lo + k * step`` (needs ``scale``).

    Raises ``ValueError``/``TypeError`` naming the argument and the first bad index
    (``users[3]: must be an integer, got 3.7``) or the duplicated (user, item) pair.
    """
    u = _check_vector("users", users)
    i = _check_vector("items", items, u.size)
    r = _check_vector("ratings", ratings, u.size)
    if u.size == 0:
        raise ValueError("users: no ratings given (empty arrays)")
    lo, hi = check_scale("scale", scale) if scale is not None else (-np.inf, np.inf)
    step = float(check_real("step", step, lo=0.0, scalar=True))
    if step > 0 and scale is None:
        raise ValueError("step: a rating grid needs scale=(lo, hi) for its origin")
    ids = Column("id", integer=True, low=0)
    _check_array_column("users", u, ids)
    _check_array_column("items", i, ids)
    _check_array_column("ratings", r, Column("rating", low=lo, high=hi, step=step,
                                             bounds_text=f"on the rating scale [{lo:g}, {hi:g}]"))

    def dup(k, first):
        raise ValueError(f"users/items: duplicate rating, entries {first} and {k} both rate item {int(i[k])} "
                         f"by user {int(u[k])}")

    return _dense(u.astype(np.int64), i.astype(np.int64), r, dup)


# --------------------------------------------------------------------------- MovieLens

_ML_ZIP = "ml-latest-small.zip"
_ML_URLS = ("https://files.grouplens.org/datasets/movielens/ml-latest-small.zip",)
_ML_SHA256 = "696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436"  # as TFDS pins it
_ML_NAMES = ("userId", "movieId", "rating", "timestamp")
_ML_HEADER = ",".join(_ML_NAMES)


@dataclass(frozen=True)
class _MLFormat:
    file: str  # the ratings file's name in the release
    delimiter: str
    header: bool  # first line is _ML_HEADER
    scale: tuple[float, float]  # documented rating scale
    step: float  # documented rating granularity


_CSV = _MLFormat("ratings.csv", ",", True, (0.5, 5.0), 0.5)
_ML_VERSIONS = {  # GroupLens README of each release
    "latest-small": _CSV,
    "latest": _CSV,
    "20m": _CSV,
    "25m": _CSV,
    "32m": _CSV,
    "10m": _MLFormat("ratings.dat", "::", False, (0.5, 5.0), 0.5),
    "1m": _MLFormat("ratings.dat", "::", False, (1.0, 5.0), 1.0),
    "100k": _MLFormat("u.data", "\t", False, (1.0, 5.0), 1.0),
}


def _ml_columns(scale, step) -> dict[str, Column]:
    lo, hi = scale
    return {
        "userId": Column("userId", integer=True, low=0),
        "movieId": Column("movieId", integer=True, low=0),
        "rating": Column("rating", low=lo, high=hi, step=step,
                         bounds_text=f"on the rating scale [{lo:g}, {hi:g}]"),
        "timestamp": Column("timestamp", integer=True, low=0),
    }


def _ml_header(line: str, source, lineno: int) -> list[str]:
    """The column order named by a ratings.csv header line (any order of the 4 names)."""
    names = [f.strip() for f in line.split(",")]
    if set(names) == set(_ML_NAMES) and len(names) == len(_ML_NAMES):
        return names
    if all(n.replace(".", "", 1).lstrip("+-").isdigit() for n in names if n):
        why = f"no header: expected {_ML_HEADER!r} as the first line, got a data row {line.strip()!r}"
    elif "\t" in line or "::" in line:
        why = (f"expected header {_ML_HEADER!r}, got {line.strip()!r} "
               "(a tab- or ::-separated file: version='100k', '1m' or '10m'?)")
    else:
        missing = [n for n in _ML_NAMES if n not in names]
        extra = [n for n in names if n not in _ML_NAMES]
        dups = sorted({n for n in names if names.count(n) > 1})
        parts = ([f"missing column(s) {missing}"] if missing else []) + (
            [f"unexpected column(s) {extra}"] if extra else []) + (
            [f"repeated column(s) {dups}"] if dups else [])
        why = f"bad header {line.strip()!r}: {'; '.join(parts)} (expected {_ML_HEADER!r})"
    raise DataFormatError(source, why, lineno)


def _parse_movielens(raw: bytes, source, fmt: _MLFormat, scale, step) -> Ratings:
    lines, linenos = text_lines(raw, source)
    columns = _ml_columns(scale, step)
    if fmt.header:
        names = _ml_header(lines[0], source, linenos[0])
        lines, linenos = lines[1:], linenos[1:]
        if not lines:
            raise DataFormatError(source, "no ratings after the header")
    else:
        names = list(_ML_NAMES)
    table = parse_table(lines, linenos, [columns[n] for n in names], source, fmt.delimiter)
    col = {n: table[:, j] for j, n in enumerate(names)}
    users, items = col["userId"].astype(np.int64), col["movieId"].astype(np.int64)

    def dup(k, first):
        raise DataFormatError(source, f"duplicate rating: userId {users[k]} rated movieId {items[k]} "
                                      f"already at line {linenos[first]}", linenos[k])

    return _dense(users, items, col["rating"], dup)


def load_movielens(path: str | os.PathLike | None = None, version: str = "latest-small",
                   scale=None, step: float | None = None) -> Ratings:
    """MovieLens ratings (Harper & Konstan 2015) in any release's format.

    Args:
      path: the ratings file, the release's directory holding it, or the release's zip
        archive (gzip-compressed files are read too); ``None`` downloads
        ``ml-latest-small`` from GroupLens into the cache (SHA-256 checked) and is only
        allowed for that version.
      version: the release, which fixes the file format and the documented scale:
        ``"latest-small"``, ``"latest"``, ``"20m"``, ``"25m"``, ``"32m"``
        (``ratings.csv``, header ``userId,movieId,rating,timestamp``, half stars in
        ``[0.5, 5]``); ``"10m"`` (``ratings.dat``, ``::``-separated, half stars in
        ``[0.5, 5]``); ``"1m"`` (``ratings.dat``, ``::``-separated, whole stars in
        ``[1, 5]``); ``"100k"`` (``u.data``, tab-separated, whole stars in ``[1, 5]``).
      scale: ``(lo, hi)``; ``None`` uses the version's documented scale.
      step: rating granularity (ratings must be ``lo + k * step``); ``None`` uses the
        version's (0.5 or 1), ``0`` turns the check off.

    Every line is checked: the field count, integer ids and timestamps (``3`` and ``3.0``
    pass, ``3.7`` does not), finite ratings inside ``scale`` and on the ``step`` grid,
    no (user, movie) pair twice. A violation raises :class:`DataFormatError` naming the
    file and the line. LF and CRLF line endings are both accepted; blank lines are
    skipped. Users and movies are mapped to dense 0-based indices.
    """
    check_choice("version", version, _ML_VERSIONS)
    fmt = _ML_VERSIONS[version]
    scale = fmt.scale if scale is None else check_scale("scale", scale)
    step = fmt.step if step is None else float(check_real("step", step, lo=0.0, scalar=True))
    if path is None:
        if version != "latest-small":
            raise ValueError(f"path: only 'latest-small' is downloaded automatically; pass the path of "
                             f"the {version!r} release's {fmt.file}")
        path = fetch(_ML_ZIP, _ML_URLS, _ML_SHA256, subdir="movielens")
    p = check_path("path", path)
    if p.is_dir():
        p = p / fmt.file
    if not p.is_file():
        raise FileNotFoundError(f"path: {p} does not exist (expected {fmt.file} or its release's zip)")
    if zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as zf:
            members = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] == fmt.file]
            if len(members) != 1:
                raise ValueError(f"path: {p} should hold one {fmt.file}, found {members}")
            try:
                raw = zf.read(members[0])
            except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:  # bad CRC, truncated
                raise DataFormatError(f"{p}:{members[0]}", f"cannot be read from the archive ({e})") from None
        return _parse_movielens(raw, f"{p}:{members[0]}", fmt, scale, step)
    return _parse_movielens(read_bytes(p), p, fmt, scale, step)


def load_movielens_small(path: str | os.PathLike | None = None, scale=(0.5, 5.0)) -> Ratings:
    """MovieLens ``ml-latest-small`` ratings (Harper & Konstan 2015).

    Args:
      path: ``ratings.csv``, the ``ml-latest-small`` directory holding it, or the
        ``ml-latest-small.zip`` archive; ``None`` downloads the archive from GroupLens
        into the cache (SHA-256 checked). LF and CRLF line endings are both accepted.
      scale: the rating scale every rating must lie in (documented: half stars in
        ``[0.5, 5]``).

    Returns a :class:`Ratings` with users and movies mapped to dense 0-based indices
    (2018 release: 610 users x 9,724 rated movies, 100,836 ratings in 0.5..5).
    The thesis used the older 671 x 9,125 release of the same data set (Sec 5.5.1).
    Malformed lines raise :class:`DataFormatError` (see :func:`load_movielens`).
    """
    return load_movielens(path, "latest-small", scale=scale)


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


def _jester_columns(n_fields: int, scale) -> list[Column]:
    lo, hi = scale
    joke = dict(low=lo, high=hi, sentinel=_NOT_RATED, blank=_NOT_RATED,
                bounds_text=f"on the rating scale [{lo:g}, {hi:g}] or 99 (not rated)")
    return [Column("count", integer=True, low=0, high=n_fields - 1,
                   bounds_text=f"a count of rated jokes in [0, {n_fields - 1}]")] + [
        Column(f"joke {j}", **joke) for j in range(1, n_fields)]


def _xls_table(source, scale, file_contents: bytes | None = None) -> np.ndarray:
    """The first sheet of a Jester ``.xls`` as float64, every cell checked (unit "row")."""
    try:
        # xlrd is optional (not a dependency): only the legacy .xls format needs it
        import xlrd
    except ImportError as e:
        raise ImportError(
            "reading Jester .xls files needs the 'xlrd' package (pip install xlrd); "
            "or pass the same table saved as .csv"
        ) from e
    try:
        if file_contents is None:
            book = xlrd.open_workbook(os.fspath(source))
        else:
            book = xlrd.open_workbook(file_contents=file_contents)
        sheet = book.sheet_by_index(0)
        rows = [sheet.row_values(r) for r in range(sheet.nrows)]
    except Exception as e:  # noqa: BLE001 - xlrd raises its own XLRDError, struct errors, ...
        raise DataFormatError(source, f"not a readable .xls workbook ({type(e).__name__}: {e})") from None
    if not rows:
        raise DataFormatError(source, "empty sheet")
    n = max(len(r) for r in rows)
    if n < 2:
        raise DataFormatError(source, f"expected a [users, 1 + jokes] table, got {n} column(s)", 1, "row")
    columns = _jester_columns(n, scale)
    table = np.full((len(rows), n), _NOT_RATED)
    for k, row in enumerate(rows):
        for j, c in enumerate(row):
            if c in ("", None):
                if j == 0:
                    raise DataFormatError(source, "count is empty", k + 1, "row")
            elif isinstance(c, bool) or not isinstance(c, (int, float)):
                raise DataFormatError(source, f"{columns[j].name} must be a number, got {c!r}", k + 1, "row")
            else:
                table[k, j] = c
    check_columns(table, columns, source, np.arange(1, len(rows) + 1),
                  lambda k, j: rows[k][j], unit="row")
    return table


def _jester_csv(raw: bytes, source, scale) -> np.ndarray:
    lines, linenos = text_lines(raw, source)
    # The table's width is the commonest field count (ties: the first line's), so a line
    # that lost or gained a field is the one reported, even when it is the first.
    n = Counter(ln.count(",") + 1 for ln in lines).most_common(1)[0][0]
    if n < 2:
        raise DataFormatError(source, "expected a comma-separated [users, 1 + jokes] table, got 1 field",
                              linenos[0])
    return parse_table(lines, linenos, _jester_columns(n, scale), source)


def _jester_from_table(table: np.ndarray, scale, source) -> Ratings:
    """Jester layout (checked by the readers): column 0 = number of jokes rated, then one
    column per joke, ratings in ``scale`` and 99 for "not rated"; rescaled to [0, 10]."""
    lo, hi = scale
    r = table[:, 1:]
    mask = r != _NOT_RATED
    keep = mask.any(axis=1)  # thesis Sec 5.5.1: remove users with no ratings
    if not keep.any():
        raise DataFormatError(source, "no ratings: every entry is 99 (not rated) or blank")
    mask = mask[keep]
    values = np.where(mask, (r[keep] - lo) * (10.0 / (hi - lo)), 0.0).astype(np.float32)
    return Ratings(values, mask, np.flatnonzero(keep).astype(np.int64),
                   np.arange(1, r.shape[1] + 1, dtype=np.int64))


def load_jester(path: str | os.PathLike | None = None, version: str = "2+", scale=(-10.0, 10.0)) -> Ratings:
    """Jester joke ratings (Goldberg et al. 2001), prepared as in thesis Sec 5.5.1.

    Args:
      path: a Jester table in the original format, as ``.xls`` (needs ``xlrd``) or the
        same table saved as ``.csv`` (comma-separated, no header; gzip-compressed is
        read too): column 0 is the number of jokes the user rated, the other columns
        the ratings, 99 or blank = not rated. ``None`` downloads ``version`` into the
        cache (SHA-256 checked).
      version: which archive to download when ``path`` is None: ``"2+"`` (the thesis's
        ``Jester 2+``, ``jesterfinal151cols.xls``, 150 jokes) or ``"1"``
        (``jester-data-1.xls``, 100 jokes).
      scale: the rating scale (documented: ``[-10, 10]``); must not contain 99.

    Every row is checked (same field count, an integer count in column 0, every rating
    a finite number inside ``scale`` or 99/blank); a violation raises
    :class:`DataFormatError` naming the file and the line (``row`` for ``.xls``).

    Returns a :class:`Ratings` with ratings rescaled to ``[0, 10]``
    (``10 (r - lo) / (hi - lo)``, i.e. ``(r + 10) / 2``) and users without any rating
    removed; ``user_ids`` are the kept rows' 0-based indices in the file, ``item_ids``
    the joke numbers ``1..n_jokes``.
    """
    check_choice("version", version, _JESTER)
    scale = check_scale("scale", scale)
    if scale[0] <= _NOT_RATED <= scale[1]:
        raise ValueError(f"scale: must not contain 99, Jester's 'not rated' code, got {scale}")
    if path is None:
        archive, sha, member = _JESTER[version]
        zpath = fetch(archive, [b + archive for b in _JESTER_BASES], sha, subdir="jester")
        with zipfile.ZipFile(zpath) as zf:
            source = f"{zpath}:{member}"
            return _jester_from_table(_xls_table(source, scale, zf.read(member)), scale, source)
    p = check_path("path", path)
    if not p.is_file():
        raise FileNotFoundError(f"path: {p} does not exist")
    suffixes = [s.lower() for s in p.suffixes[-2:]]
    if suffixes[-1:] == [".xls"]:
        table = _xls_table(p, scale)
    elif suffixes[-1:] == [".csv"] or suffixes == [".csv", ".gz"]:
        table = _jester_csv(read_bytes(p), p, scale)
    else:
        raise ValueError(f"path: expected a .xls or .csv Jester file, got {p.name!r}")
    return _jester_from_table(table, scale, p)


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
    n_users = check_int("n_users", n_users, lo=1)
    n_items = check_int("n_items", n_items, lo=1)
    rank = check_int("rank", rank, lo=1)
    density = float(check_real("density", density, lo=0.0, hi=1.0, lo_open=True, scalar=True))
    noise = float(check_real("noise", noise, lo=0.0, scalar=True))
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
