"""Reading data files so that malformed input raises :class:`DataFormatError` naming the
file, the line and what is wrong, instead of NumPy's message or a silently wrong array.

* :func:`read_bytes` - the whole file, gunzipped when it starts with the gzip magic
  (whatever its name), truncated or corrupt gzip streams reported as such;
* :func:`text_lines` - bytes -> text lines (with 1-based line numbers), rejecting bytes
  that are not text in the given encoding and control characters (binary data);
* :func:`parse_table` - delimited numeric rows -> an array, checking the field
  count of every line, that every field is a number, and each column's constraints
  (:class:`Column`: finite, integral ids, a rating scale, a grid step, a "missing"
  sentinel); the first offending line is reported.

The fast path is one :func:`numpy.loadtxt` call and per-column min/max checks; the slow
per-field parse and the element-wise masks run only to locate the offending field.
"""

from __future__ import annotations

import gzip
import re
import zlib
import hashlib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from scarjax.validate import DataFormatError

__all__ = ["Column", "check_columns", "decode", "parse_table", "read_bytes", "text_lines"]

GZIP_MAGIC = b"\x1f\x8b"
ZIP_MAGIC = b"PK\x03\x04"
# C0 control characters other than tab, LF, VT, FF, CR (and DEL) are never in a text file
# (_CONTROL_LUT below).
_NUMBER = re.compile(r"\s*[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)\s*", re.I)
_EXACT_INT = 2.0**53  # float64 holds every integer below this exactly


def read_bytes(path: Path, source=None) -> bytes:
    """The bytes of ``path``, decompressed if they start with the gzip magic number."""
    source = path if source is None else source
    raw = Path(path).read_bytes()
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except EOFError:
            raise DataFormatError(source, "the gzip stream is truncated (the file was cut off)") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as e:
            raise DataFormatError(source, f"corrupt gzip data ({e})") from None
    return raw


_CONTROL_LUT = np.zeros(256, dtype=bool)
_CONTROL_LUT[[*range(0x00, 0x09), *range(0x0E, 0x20), 0x7F]] = True
_NUL_LUT = np.zeros(256, dtype=bool)
_NUL_LUT[0] = True


def decode(raw: bytes, source, encodings: Sequence[str] = ("utf-8",), nul_only: bool = False) -> str:
    """``raw`` as text (the first encoding that works; line endings normalised to ``\\n``).

    Raises :class:`DataFormatError` naming the line of the first undecodable byte or
    control character (only NUL when ``nul_only``), which is how binary data
    given to a text loader shows up. ``encodings`` must be ASCII-compatible (UTF-8,
    Latin-1): control characters are then found on the raw bytes.
    """
    error = None
    for enc in encodings:
        try:
            text = raw.decode(enc)
            break
        except UnicodeDecodeError as e:
            error = error or e
    else:
        line = raw[:error.start].replace(b"\r\n", b"\n").replace(b"\r", b"\n").count(b"\n") + 1
        col = error.start - (max(raw.rfind(b"\n", 0, error.start), raw.rfind(b"\r", 0, error.start)) + 1) + 1
        raise DataFormatError(
            source, f"byte 0x{raw[error.start]:02x} at column {col} is not {encodings[0]} text (binary data?)", line)
    hits = (_NUL_LUT if nul_only else _CONTROL_LUT)[np.frombuffer(raw, dtype=np.uint8)]
    if hits.any():
        pos = int(hits.argmax())
        head = raw[:pos].replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        line = head.count(b"\n") + 1
        col = len(head[head.rfind(b"\n") + 1:].decode(enc)) + 1
        raise DataFormatError(source, f"control character {chr(raw[pos])!r} at column {col}: binary data, not text",
                              line)
    return text.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n")


def text_lines(raw: bytes, source, encodings: Sequence[str] = ("utf-8",)) -> tuple[list[str], np.ndarray]:
    """Non-blank lines of ``raw`` and their 1-based line numbers; empty files are errors."""
    if raw[:4] == ZIP_MAGIC:
        raise DataFormatError(source, "a zip archive, not a text file: extract it first")
    text = decode(raw, source, encodings)
    all_lines = text.split("\n")
    keep = [k for k, ln in enumerate(all_lines) if ln.strip()]
    if not keep:
        raise DataFormatError(source, "empty file" if not text else "the file holds only blank lines")
    return [all_lines[k] for k in keep], np.asarray(keep, dtype=np.int64) + 1


def _fmt(x: float) -> str:
    return f"{x:g}"


@dataclass(frozen=True)
class Column:
    """What a numeric column must hold.

    Attributes:
      name: the column's name in messages (``"rating"``, ``"userId"``).
      integer: values must be integral (ids, counts, labels); ``"3"`` and ``"3.0"`` pass,
        ``"3.7"`` does not.
      low, high: inclusive bounds.
      step: ``> 0``: values must be ``low + k * step`` (MovieLens half stars).
      sentinel: a value that means "missing" (Jester's 99); exempt from the checks.
      blank: an empty field reads as this value; ``None``: an empty field is an error.
      bounds_text: how the bounds read in messages (default ``"[low, high]"``).
    """

    name: str
    integer: bool = False
    low: float = -np.inf
    high: float = np.inf
    step: float = 0.0
    sentinel: float | None = None
    blank: float | None = None
    bounds_text: str | None = None

    def describe_bounds(self) -> str:
        if self.bounds_text:
            return self.bounds_text
        if np.isfinite(self.low) and np.isfinite(self.high):
            return f"in [{_fmt(self.low)}, {_fmt(self.high)}]"
        return f">= {_fmt(self.low)}" if np.isfinite(self.low) else f"<= {_fmt(self.high)}"

    def problem(self, x: float) -> str | None:
        """Why ``x`` is not allowed in this column (``None`` if it is)."""
        if self.sentinel is not None and x == self.sentinel:
            return None
        if not np.isfinite(x):
            return "must be a finite number"
        if self.integer and x != np.round(x):
            return "must be an integer"
        if self.integer and abs(x) >= _EXACT_INT:
            return "must be an integer below 2**53 (larger ones are not read exactly)"
        if x < self.low or x > self.high:
            return f"must be {self.describe_bounds()}"
        if self.step > 0:
            k = (x - self.low) / self.step
            if abs(k - np.round(k)) > 1e-6:
                return f"must be a multiple of {_fmt(self.step)} {self.describe_bounds()}"
        return None

    def bad(self, x: np.ndarray) -> np.ndarray:
        """Vectorised: True where :meth:`problem` would report something."""
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(x)
            if self.integer:
                bad |= (x != np.round(x)) | (np.abs(x) >= _EXACT_INT)
            bad |= (x < self.low) | (x > self.high)
            if self.step > 0:
                k = (x - self.low) / self.step
                bad |= np.abs(k - np.round(k)) > 1e-6
        if self.sentinel is not None:
            bad &= x != self.sentinel
        return bad


def _integral(table: np.ndarray, cols: list[int]) -> bool:
    """Whether ``table[:, cols]`` holds integers that float64 represents exactly."""
    t = table[:, cols] if len(cols) < table.shape[1] else table
    if t.dtype.kind in "iu":
        return bool(t.size == 0 or max(-int(t.min()), int(t.max())) < _EXACT_INT)
    return bool((np.abs(t).max(initial=0) < _EXACT_INT) and np.array_equal(t, np.round(t)))


def check_columns(table: np.ndarray, columns: Sequence[Column], source, linenos: np.ndarray,
                  raw: Callable[[int, int], str], unit: str = "line") -> None:
    """Raise :class:`DataFormatError` for the first row (then column) breaking a constraint.

    The checks of :meth:`Column.bad` run on the whole ``[rows, columns]`` table at once
    (CoverType: 32M values); ``raw(k, j)`` gives row ``k``'s field ``j`` as written.
    """
    low = np.array([c.low for c in columns])
    high = np.array([c.high for c in columns])
    if table.size and all(c.sentinel is None and not c.step for c in columns):
        # Fast path: per-column extremes (NaN propagates) in bounds, and integral columns
        # integral, decide for the whole table without building a mask.
        lo, hi = table.min(axis=0), table.max(axis=0)
        ints = [j for j, c in enumerate(columns) if c.integer]
        if (np.isfinite(lo).all() and np.isfinite(hi).all() and (lo >= low).all() and (hi <= high).all()
                and (not ints or _integral(table, ints))):
            return
    table = table.astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        bad = ~np.isfinite(table)
        bad |= (table < low) | (table > high)
        ints = np.array([c.integer for c in columns])
        if ints.any():
            t = table[:, ints]
            bad[:, ints] |= (t != np.round(t)) | (np.abs(t) >= _EXACT_INT)
        steps = np.array([c.step for c in columns])
        if (steps > 0).any():
            on = steps > 0
            k = (table[:, on] - low[on]) / steps[on]
            bad[:, on] |= np.abs(k - np.round(k)) > 1e-6
    sentinel = np.array([np.nan if c.sentinel is None else c.sentinel for c in columns])
    if not np.isnan(sentinel).all():
        on = ~np.isnan(sentinel)
        bad[:, on] &= table[:, on] != sentinel[on]
    rows = np.flatnonzero(bad.any(axis=1))
    if rows.size:
        k = int(rows[0])
        j = int(np.flatnonzero(bad[k])[0])
        why = columns[j].problem(float(table[k, j]))
        raise DataFormatError(source, f"{columns[j].name} {why}, got {raw(k, j)!r}", linenos[k], unit)


def _describe(columns: Sequence[Column]) -> str:
    names = [c.name for c in columns]
    return ", ".join(names) if len(names) <= 8 else f"{names[0]}, {names[1]}, ..., {names[-1]}"


def parse_table(lines: list[str], linenos: np.ndarray, columns: Sequence[Column], source,
                delimiter: str = ",", unit: str = "line") -> np.ndarray:
    """Parse delimited numeric ``lines`` into a ``[len(lines), len(columns)]`` array.

    The array is int64 when every column is integral and every field is written as an
    integer (the fast path for CoverType), float64 otherwise.

    Every line must have ``len(columns)`` fields, every field must be a number (or empty
    where the column allows a blank) and satisfy its :class:`Column`; otherwise
    :class:`DataFormatError` names ``source``, the line number and the problem.
    """
    n = len(columns)
    if delimiter != "," and len(delimiter) > 1:  # loadtxt wants one character
        lines = [ln.replace(delimiter, "\x1f") for ln in lines]  # \x1f cannot occur: decode() rejects it
        delimiter = "\x1f"
    if sum(ln.count(delimiter) for ln in lines) != len(lines) * (n - 1):  # cheap test first
        _check_field_counts(lines, linenos, columns, source, delimiter, unit)
    table = None
    # Integer parsing is ~3x faster than float parsing (CoverType: 32M integer fields);
    # "3.0" or "nan" make it fail and fall through to the float parse.
    for dtype in (np.int64, np.float64) if all(c.integer for c in columns) else (np.float64,):
        try:
            table = np.loadtxt(lines, delimiter=delimiter, dtype=dtype, comments=None,
                               quotechar=None, ndmin=2)
            break
        except (ValueError, OverflowError):
            pass
    if table is None:
        table = _parse_slowly(lines, linenos, columns, source, delimiter, unit)
    if table.shape != (len(lines), n):
        raise DataFormatError(source, f"expected a table of {n} columns, read shape {table.shape}")
    check_columns(table, columns, source, linenos,
                  lambda k, j: lines[k].split(delimiter)[j].strip(), unit)
    return table


def _check_field_counts(lines, linenos, columns, source, delimiter, unit) -> None:
    """Raise for the first line without ``len(columns)`` fields."""
    n = len(columns)
    counts = np.fromiter((ln.count(delimiter) for ln in lines), dtype=np.int64, count=len(lines)) + 1
    wrong = np.flatnonzero(counts != n)
    if wrong.size:
        k = wrong[0]
        hint = "a column is missing or the line is cut off" if counts[k] < n else "extra fields"
        raise DataFormatError(
            source, f"expected {n} fields ({_describe(columns)}), got {counts[k]}: {hint}", linenos[k], unit)


def _parse_slowly(lines, linenos, columns, source, delimiter, unit) -> np.ndarray:
    """Field-by-field parse; raises at the first line with a wrong field count or the
    first field that is not a number."""
    _check_field_counts(lines, linenos, columns, source, delimiter, unit)
    out = np.empty((len(lines), len(columns)), dtype=np.float64)
    for k, ln in enumerate(lines):
        for j, (field, col) in enumerate(zip(ln.split(delimiter), columns)):
            s = field.strip()
            if not s:
                if col.blank is None:
                    raise DataFormatError(source, f"{col.name} is empty", linenos[k], unit)
                out[k, j] = col.blank
            elif _NUMBER.fullmatch(s):
                out[k, j] = float(s)
            else:
                raise DataFormatError(source, f"{col.name} must be a number, got {s!r}", linenos[k], unit)
    return out


# --------------------------------------------------------------------------------------
# Embedded copies: read-only records and the sha256 manifest of a data folder's README.


def freeze(record) -> None:
    """Make every array field of a (dataclass) record read-only."""
    for f in fields(record):
        v = getattr(record, f.name)
        if isinstance(v, np.ndarray):
            v.flags.writeable = False


def read_manifest(readme: Path) -> dict[str, str]:
    """``path -> sha256`` (or its ≥ 16-hex-digit prefix) from the manifest table of an
    embedded data folder's README (rows ``| path | … | sha256 |``)."""
    out = {}
    for line in Path(readme).read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and re.fullmatch(r"[0-9a-f]{16,64}", cells[-1]):
            out[cells[0]] = cells[-1]
    return out


def content_sha256(path: Path) -> str:
    """The sha256 of a file's content (of the decompressed bytes for a ``.gz`` file: the
    manifest records the original file's hash)."""
    raw = Path(path).read_bytes()
    return hashlib.sha256(gzip.decompress(raw) if Path(path).suffix == ".gz" else raw).hexdigest()
