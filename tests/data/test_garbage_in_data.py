"""Garbage in, a clear error out: property-based tests of the data loaders.

Each test draws a small valid file and checks that it loads back to exactly what was
written (round trip); the corruption tests then damage it in one place - a field replaced
by a non-integral id, NaN/inf, an out-of-scale or off-grid rating, an empty or non-numeric
value; a field dropped or added; a line cut short; binary garbage; a duplicated pair; a
renamed header column; a truncated or corrupt binary/gzip stream - and check that the
loader raises :class:`scarjax.data.DataFormatError` whose message starts with the file and
the exact line (or byte) of the damage, and says what is wrong. Files are written
plain or gzip-compressed, with LF or CRLF line endings and stray blank lines, so that line
numbers are checked against everything that shifts them. Python arguments are covered
the same way: a bad value of any argument raises an error whose message starts with
that argument's name.
"""

import gzip
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scarjax.data import (
    DataFormatError,
    load_covertype,
    load_jester,
    load_lee,
    load_movielens,
    load_reuters,
    load_text,
    ratings_from_triples,
    read_idx,
    synthetic_lda_corpus,
    synthetic_ratings,
)

FAST = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# control bytes and bytes that are never UTF-8: whatever surrounds them, the line is not data
BAD_BYTES = [b"\x00", b"\x01", b"\x07", b"\x1b", b"\x7f", b"\xff", b"\xfe"]
# bytes for the random part of a garbage line (no line breaks: the garbage stays on its line)
GARBAGE = st.binary(min_size=0, max_size=12).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")).filter(
    lambda b: not b.startswith((b"\x1f", b"PK")))  # not a gzip or zip magic number
NOT_NUMBERS = ["four", "3..5", "1e", "--1", "#", "0x1f", "1/2", "4,5".replace(",", "_"), "N/A", "."]


def _write(dirpath, name, data: bytes, gz: bool):
    path = dirpath / name
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def _assert_names(err: DataFormatError, path, line, reason_regex, unit="line"):
    """The error names the file, the line (or byte) and what is wrong, in that order."""
    assert err.path == str(path)
    assert err.line == line and err.unit == unit, str(err)
    prefix = f"{path}: " if line is None else f"{path}, {unit} {line}: "
    assert str(err).startswith(prefix), str(err)
    assert re.search(reason_regex, err.reason), (reason_regex, str(err))
    assert isinstance(err, ValueError)


@st.composite
def _layout(draw, n_rows: int, header: bool):
    """Line endings, a trailing newline or not, and blank lines before some data rows."""
    return dict(
        eol=draw(st.sampled_from(["\n", "\r\n"])),
        trailing=draw(st.booleans()),
        blanks=draw(st.sets(st.integers(0, n_rows - 1), max_size=2)),
        gz=draw(st.booleans()),
        header=header,
    )


def _render(header_line, rows, layout):
    """(file bytes, 1-based line number of each data row); rows are lists of str/bytes fields."""
    eol = layout["eol"].encode()
    lines, numbers = [], []
    if header_line is not None:
        lines.append(header_line.encode())
    for j, row in enumerate(rows):
        if j in layout["blanks"]:
            lines.append(b"  ")
        lines.append(row if isinstance(row, bytes) else row.encode())
        numbers.append(len(lines))
    return eol.join(lines) + (eol if layout["trailing"] else b""), numbers


# =========================================================================== MovieLens

ML = {  # version -> (file name, separator, header, lo, hi, step)
    "latest-small": ("ratings.csv", ",", "userId,movieId,rating,timestamp", 0.5, 5.0, 0.5),
    "100k": ("u.data", "\t", None, 1.0, 5.0, 1.0),
    "1m": ("ratings.dat", "::", None, 1.0, 5.0, 1.0),
}
ML_NAMES = ["userId", "movieId", "rating", "timestamp"]


@st.composite
def movielens_files(draw, min_rows=1):
    version = draw(st.sampled_from(sorted(ML)))
    name, sep, header, lo, hi, step = ML[version]
    n = draw(st.integers(min_rows, 8))
    pairs = draw(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 300)), min_size=n, max_size=n, unique=True))
    k_max = int(round((hi - lo) / step))
    ratings = [lo + step * draw(st.integers(0, k_max)) for _ in range(n)]
    stamps = draw(st.lists(st.integers(0, 2**31 - 1), min_size=n, max_size=n))
    id_fmt = draw(st.sampled_from(["{}", "{}.0"]))  # 3.0 is an integral id: accepted
    r_fmt = draw(st.sampled_from(["{}", "{:.1f}", "{:g}"]))
    rows = [[id_fmt.format(u), id_fmt.format(i), r_fmt.format(r), str(t)]
            for (u, i), r, t in zip(pairs, ratings, stamps)]
    return dict(version=version, name=name, sep=sep, header=header, lo=lo, hi=hi, step=step,
                rows=rows, triples=[(u, i, r) for (u, i), r in zip(pairs, ratings)],
                layout=draw(_layout(n, header is not None)))


def _ml_render(f, rows=None, header=None):
    rows = f["rows"] if rows is None else rows
    joined = [r if isinstance(r, bytes) else f["sep"].join(r) for r in rows]
    return _render(f["header"] if header is None else header, joined, f["layout"])


@FAST
@given(f=movielens_files())
def test_movielens_valid_files_round_trip(tmp_path_factory, f):
    data, _ = _ml_render(f)
    path = _write(tmp_path_factory.mktemp("ml"), f["name"], data, f["layout"]["gz"])
    r = load_movielens(path, version=f["version"])
    users = sorted({u for u, _, _ in f["triples"]})
    items = sorted({i for _, i, _ in f["triples"]})
    assert r.user_ids.tolist() == users and r.item_ids.tolist() == items
    want = np.zeros((len(users), len(items)), np.float32)
    for u, i, v in f["triples"]:
        want[users.index(u), items.index(i)] = v
    np.testing.assert_array_equal(r.values, want)
    assert int(r.mask.sum()) == len(f["triples"])


def _corrupt_field(draw, f, j):
    """Replace one field of row j; returns (new row, reason regex)."""
    row = list(f["rows"][j])
    lo, hi, step = f["lo"], f["hi"], f["step"]
    kind = draw(st.sampled_from(["non_integer_id", "negative_id", "nonfinite_rating", "out_of_scale",
                                 "off_grid", "non_integer_timestamp", "empty", "not_a_number"]))
    col = draw(st.integers(0, 1))  # which id column
    if kind == "non_integer_id":
        row[col] = f"{draw(st.integers(0, 999))}.{draw(st.integers(1, 9))}"
        return row, rf"^{ML_NAMES[col]} must be an integer, got '{re.escape(row[col])}'"
    if kind == "negative_id":
        row[col] = str(-draw(st.integers(1, 999)))
        return row, rf"^{ML_NAMES[col]} must be >= 0, got '{row[col]}'"
    if kind == "nonfinite_rating":
        row[2] = draw(st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity"]))
        return row, rf"^rating must be a finite number, got '{row[2]}'"
    if kind == "out_of_scale":
        k = draw(st.integers(1, 40))
        row[2] = f"{(hi + k * step) if draw(st.booleans()) else (lo - k * step):g}"
        return row, rf"^rating must be on the rating scale \[{lo:g}, {hi:g}\], got '{re.escape(row[2])}'"
    if kind == "off_grid":
        k = draw(st.integers(0, int(round((hi - lo) / step)) - 1))
        row[2] = f"{lo + step * (k + draw(st.sampled_from([0.1, 0.25, 0.3, 0.7, 0.9]))):.3f}"
        return row, rf"^rating must be a multiple of {step:g} on the rating scale \[{lo:g}, {hi:g}\], got '{row[2]}'"
    if kind == "non_integer_timestamp":
        row[3] = f"{row[3]}.5"
        return row, r"^timestamp must be an integer"
    c = draw(st.integers(0, 3))
    if kind == "empty":
        row[c] = draw(st.sampled_from(["", " "]))
        return row, rf"^{ML_NAMES[c]} is empty"
    row[c] = draw(st.sampled_from(NOT_NUMBERS))
    return row, rf"^{ML_NAMES[c]} must be a number, got '{re.escape(row[c].strip())}'"


@FAST
@given(f=movielens_files(), data=st.data())
def test_movielens_corrupt_line_names_file_and_line(tmp_path_factory, f, data):
    draw = data.draw
    rows = [list(r) for r in f["rows"]]
    j = draw(st.integers(0, len(rows) - 1), label="row")
    kind = draw(st.sampled_from(["field", "field", "drop", "extra", "truncate", "garbage", "duplicate"]))
    sep = f["sep"]
    if kind == "duplicate" and len(rows) < 2:
        kind = "drop"
    if kind == "field":
        rows[j], why = _corrupt_field(draw, f, j)
    elif kind == "drop":
        del rows[j][draw(st.integers(0, 3))]
        why = r"^expected 4 fields \(userId, movieId, rating, timestamp\), got 3: a column is missing"
    elif kind == "extra":
        rows[j].insert(draw(st.integers(0, 4)), str(draw(st.integers(0, 9))))
        why = r"^expected 4 fields .* got 5: extra fields"
    elif kind == "truncate":  # the line is cut before its last separator
        line = sep.join(rows[j])
        rows[j] = line[: draw(st.integers(1, line.rindex(sep)))].encode()
        why = r"^expected 4 fields .* got [123]"
    elif kind == "garbage":
        junk = draw(GARBAGE)
        at = draw(st.integers(0, len(junk)))
        rows[j] = junk[:at] + draw(st.sampled_from(BAD_BYTES)) + junk[at:]
        why = r"control character .* binary data|is not utf-8 text"
    else:  # duplicate: row j repeats the (user, movie) pair of an earlier row a
        j = max(j, 1)
        a = draw(st.integers(0, j - 1))
        rows[j][:2] = rows[a][:2]
        why = r"^duplicate rating: userId \d+ rated movieId \d+ already at line (\d+)"
    data_bytes, numbers = _ml_render(f, rows)
    path = _write(tmp_path_factory.mktemp("ml"), f["name"], data_bytes, f["layout"]["gz"])
    with pytest.raises(DataFormatError) as info:
        load_movielens(path, version=f["version"])
    _assert_names(info.value, path, numbers[j], why)
    if kind == "duplicate":
        assert re.search(why, info.value.reason).group(1) == str(numbers[a])


@FAST
@given(f=movielens_files(), data=st.data())
def test_movielens_bad_header_names_line_one(tmp_path_factory, f, data):
    if f["header"] is None:  # the headerless formats: a header line is a non-numeric row 1
        header, why = "userId" + f["sep"] + "movieId" + f["sep"] + "rating" + f["sep"] + "timestamp", \
            r"^userId must be a number, got 'userId'"
        data_bytes, numbers = _ml_render(f, [header.split(f["sep"])] + f["rows"])
        line = numbers[0]
    else:
        names = list(ML_NAMES)
        c = data.draw(st.integers(0, 3))
        if data.draw(st.booleans()):
            gone = names.pop(c)
            why = rf"^bad header .*missing column\(s\) \['{gone}'\]"
            rows = [r[:c] + r[c + 1:] for r in f["rows"]]
        else:
            gone, names[c] = names[c], names[c].lower() + "_x"
            why = rf"missing column\(s\) \['{gone}'\]; unexpected column\(s\) \['{names[c]}'\]"
            rows = f["rows"]
        data_bytes, _ = _ml_render(f, rows, header=",".join(names))
        line = 1
    path = _write(tmp_path_factory.mktemp("ml"), f["name"], data_bytes, f["layout"]["gz"])
    with pytest.raises(DataFormatError) as info:
        load_movielens(path, version=f["version"])
    _assert_names(info.value, path, line, why)


@FAST
@given(version=st.sampled_from(sorted(ML)), content=st.sampled_from([b"", b"\n\n", b"  \r\n"]),
       gz=st.booleans())
def test_movielens_empty_file(tmp_path_factory, version, content, gz):
    path = _write(tmp_path_factory.mktemp("ml"), ML[version][0], content, gz)
    with pytest.raises(DataFormatError) as info:
        load_movielens(path, version=version)
    _assert_names(info.value, path, None, r"^empty file|^the file holds only blank lines")


# =========================================================================== Jester


@st.composite
def jester_files(draw):
    n_users, n_jokes = draw(st.integers(3, 6)), draw(st.integers(1, 5))
    cells = []
    for u in range(n_users):
        row = []
        for j in range(n_jokes):
            kind = draw(st.sampled_from(["rating", "rating", "99", "blank"]))
            if u == 0 and j == 0:
                kind = "rating"  # at least one rating in the file
            row.append(f"{draw(st.integers(-1000, 1000)) / 100:g}" if kind == "rating" else
                       "99" if kind == "99" else "")
        cells.append(row)
    rows = [[str(sum(c not in ("", "99") for c in row))] + row for row in cells]
    return dict(rows=rows, layout=draw(_layout(n_users, False)))


def _jester_expected(rows):
    r = np.array([[99.0 if c in ("", "99") else float(c) for c in row[1:]] for row in rows])
    mask = r != 99.0
    keep = mask.any(axis=1)
    return np.where(mask, (r + 10) / 2, 0)[keep], mask[keep], np.flatnonzero(keep)


@FAST
@given(f=jester_files())
def test_jester_valid_files_round_trip(tmp_path_factory, f):
    data, _ = _render(None, [",".join(r) for r in f["rows"]], f["layout"])
    path = _write(tmp_path_factory.mktemp("j"), "jester.csv", data, False)
    r = load_jester(path)
    values, mask, users = _jester_expected(f["rows"])
    np.testing.assert_allclose(r.values, values, rtol=1e-6)
    np.testing.assert_array_equal(r.mask, mask)
    assert r.user_ids.tolist() == users.tolist()


@FAST
@given(f=jester_files(), data=st.data())
def test_jester_corrupt_line_names_file_and_line(tmp_path_factory, f, data):
    draw = data.draw
    rows = [list(r) for r in f["rows"]]
    n = len(rows[0])
    j = draw(st.integers(0, len(rows) - 1))
    kind = draw(st.sampled_from(["scale", "nonfinite", "count", "not_a_number", "drop", "extra", "garbage"]))
    c = draw(st.integers(1, n - 1))  # a joke column
    if kind == "scale":
        v = draw(st.integers(1001, 9000).filter(lambda k: k != 9900)) / 100 * draw(st.sampled_from([1, -1]))
        rows[j][c] = f"{v:g}"
        why = rf"^joke {c} must be on the rating scale \[-10, 10\] or 99 \(not rated\), got '{rows[j][c]}'"
    elif kind == "nonfinite":
        rows[j][c] = draw(st.sampled_from(["nan", "inf", "-inf"]))
        why = rf"^joke {c} must be a finite number"
    elif kind == "count":
        rows[j][0], why = draw(st.sampled_from([
            ("2.5", r"^count must be an integer, got '2.5'"),
            ("-1", r"^count must be a count of rated jokes in \[0, \d+\], got '-1'"),
            (str(n + 3), r"^count must be a count of rated jokes in"),
            ("", r"^count is empty"),
        ]))
    elif kind == "not_a_number":
        rows[j][c] = draw(st.sampled_from(NOT_NUMBERS))
        why = rf"^joke {c} must be a number"
    elif kind == "drop":
        del rows[j][draw(st.integers(0, n - 1))]
        why = rf"^expected {n} fields .* got {n - 1}"
        if not ",".join(rows[j]).strip():  # a line of blanks only carries nothing: add a field instead
            rows[j] = f["rows"][j] + ["0"]
            why = rf"^expected {n} fields .* got {n + 1}"
    elif kind == "extra":
        rows[j].append("0")
        why = rf"^expected {n} fields .* got {n + 1}"
    rendered = [",".join(r) for r in rows]
    if kind == "garbage":
        junk = draw(GARBAGE)
        rendered[j] = (junk + draw(st.sampled_from(BAD_BYTES))).decode("latin-1")
        why = r"control character .* binary data|is not utf-8 text"
    data_bytes, numbers = _render(None, [r.encode("latin-1") for r in rendered], f["layout"])
    path = _write(tmp_path_factory.mktemp("j"), "jester.csv", data_bytes, False)
    with pytest.raises(DataFormatError) as info:
        load_jester(path)
    _assert_names(info.value, path, numbers[j], why)


# =========================================================================== CoverType


@st.composite
def covertype_rows(draw):
    rows = []
    for _ in range(draw(st.integers(1, 4))):
        q = [draw(st.integers(0, 4000)), draw(st.integers(0, 360)), draw(st.integers(0, 66)),
             draw(st.integers(0, 1400)), draw(st.integers(-170, 600)), draw(st.integers(0, 7000)),
             draw(st.integers(0, 255)), draw(st.integers(0, 255)), draw(st.integers(0, 255)),
             draw(st.integers(0, 7200))]
        wild, soil = [0] * 4, [0] * 40
        wild[draw(st.integers(0, 3))] = 1
        soil[draw(st.integers(0, 39))] = 1
        rows.append([str(v) for v in q + wild + soil + [draw(st.integers(1, 7))]])
    return rows


@FAST
@given(rows=covertype_rows(), data=st.data())
def test_covertype_round_trip_and_corrupt_line(tmp_path_factory, rows, data):
    draw = data.draw
    layout = draw(_layout(len(rows), False))
    folder = tmp_path_factory.mktemp("cov")
    good, _ = _render(None, [",".join(r) for r in rows], layout)
    X, y = load_covertype(_write(folder, "covtype.data.gz", good, layout["gz"]))
    np.testing.assert_array_equal(X, np.array(rows, dtype=np.float32)[:, :-1])
    assert y.tolist() == [int(r[-1]) - 1 for r in rows]

    j = draw(st.integers(0, len(rows) - 1))
    bad = [list(r) for r in rows]
    col, value, why = draw(st.sampled_from([
        (54, "8", r"^Cover_Type must be a cover type 1\.\.7, got '8'"),
        (54, "0", r"^Cover_Type must be a cover type 1\.\.7"),
        (0, "2596.5", r"^Elevation must be an integer, got '2596.5'"),
        (1, "361", r"^Aspect must be in \[0, 360\]"),
        (8, "-1", r"^Hillshade_3pm must be in \[0, 255\]"),
        (11, "2", r"^Wilderness_Area2 must be 0 or 1"),
        (53, "0.5", r"^Soil_Type40 must be an integer"),
        (4, "nan", r"^Vertical_Distance_To_Hydrology must be a finite number"),
        (5, "x", r"^Horizontal_Distance_To_Roadways must be a number, got 'x'"),
        (None, None, r"^expected 55 fields \(Elevation, Aspect, \.\.\., Cover_Type\), got 54"),
    ]))
    if col is None:
        del bad[j][draw(st.integers(0, 54))]
    else:
        bad[j][col] = value
    data_bytes, numbers = _render(None, [",".join(r) for r in bad], layout)
    path = _write(folder, "covtype.data", data_bytes, layout["gz"])
    with pytest.raises(DataFormatError) as info:
        load_covertype(path)
    _assert_names(info.value, path, numbers[j], why)


# =========================================================================== MNIST IDX

IDX_KIND = {2051: ("image", 3), 2049: ("label", 1)}


@st.composite
def idx_files(draw):
    magic = draw(st.sampled_from(sorted(IDX_KIND)))
    shape = (draw(st.integers(1, 5)),) + ((draw(st.integers(1, 4)), draw(st.integers(1, 4)))
                                          if magic == 2051 else ())
    arr = np.random.default_rng(draw(st.integers(0, 2**16))).integers(0, 256, shape, dtype=np.uint8)
    raw = b"".join(int(v).to_bytes(4, "big") for v in (magic, *shape)) + arr.tobytes()
    return magic, arr, raw


@FAST
@given(f=idx_files(), gz=st.booleans(), data=st.data())
def test_idx_round_trip_and_corruption(tmp_path_factory, f, gz, data):
    magic, arr, raw = f
    kind, ndim = IDX_KIND[magic]
    header = 4 + 4 * ndim
    folder = tmp_path_factory.mktemp("idx")
    np.testing.assert_array_equal(read_idx(_write(folder, "good-ubyte.gz", raw, gz), magic), arr)

    corruption = data.draw(st.sampled_from(["truncate", "extra", "magic", "gzip_cut"]))
    path = folder / "bad-ubyte.gz"
    if corruption == "truncate":
        k = data.draw(st.integers(0, len(raw) - 1))
        _write(folder, path.name, raw[:k], gz)
        record = arr[0].size
        line, unit, why = (
            (None, "line", r"^empty file") if k == 0 else
            (None, "line", rf"^truncated: {k} byte\(s\)") if k < 4 else
            (None, "line", rf"^truncated IDX header: {k} bytes") if k < header else
            (k, "byte", rf"^truncated: .* only {k - header} follow; {kind} {(k - header) // record} of {arr.shape[0]}"))
    elif corruption == "extra":
        extra = data.draw(st.binary(min_size=1, max_size=9))
        _write(folder, path.name, raw + extra, gz)
        line, unit, why = len(raw), "byte", rf"^{len(extra)} unexpected byte\(s\) after the last"
    elif corruption == "magic":
        other = data.draw(st.integers(0, 2**32 - 1).filter(lambda m: m != magic and m >> 16 != 0x1F8B))
        _write(folder, path.name, other.to_bytes(4, "big") + raw[4:], gz)
        line, unit, why = 0, "byte", rf"^not an MNIST {kind}s IDX file \(magic {other}, expected {magic}\)"
    else:  # cut the compressed stream itself
        packed = gzip.compress(raw)
        path.write_bytes(packed[: data.draw(st.integers(2, len(packed) - 1))])
        line, unit, why = None, "line", r"^the gzip stream is truncated"
    with pytest.raises(DataFormatError) as info:
        read_idx(path, magic)
    _assert_names(info.value, path, line, why, unit)


# =========================================================================== text corpora

WORDS = ["apple", "banana", "cherry", "delta", "echo", "falcon", "gamma", "harbor", "island", "jungle"]
SEPS = [" ", ", ", ". ", "; ", " - ", "  "]


@st.composite
def documents(draw):
    docs = []
    for _ in range(draw(st.integers(1, 6))):
        words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=7))
        text = words[0]
        for w in words[1:]:
            text += draw(st.sampled_from(SEPS)) + (w.capitalize() if draw(st.booleans()) else w)
        docs.append((words, text + draw(st.sampled_from(["", ".", "!"]))))
    return docs


@FAST
@given(docs=documents(), data=st.data())
def test_text_round_trip_and_garbage_line(tmp_path_factory, docs, data):
    layout = data.draw(_layout(len(docs), False))
    folder = tmp_path_factory.mktemp("txt")
    good, numbers = _render(None, [t for _, t in docs], layout)
    c = load_text(_write(folder, "docs.txt", good, layout["gz"]))
    assert c.vocab == sorted({w for ws, _ in docs for w in ws})
    assert c.doc_lengths.tolist() == [len(ws) for ws, _ in docs]
    assert [c.vocab[t] for t in c.tokens] == [w for ws, _ in docs for w in ws]

    j = data.draw(st.integers(0, len(docs) - 1))
    lines = [t.encode() for _, t in docs]
    at = data.draw(st.integers(0, len(lines[j])))
    lines[j] = lines[j][:at] + data.draw(st.sampled_from(BAD_BYTES[:5])) + lines[j][at:]
    bad, numbers = _render(None, lines, layout)
    path = _write(folder, "lee_background.cor", bad, layout["gz"])
    for load in (load_text, load_lee):
        with pytest.raises(DataFormatError) as info:
            load(path)
        _assert_names(info.value, path, numbers[j], rf"^control character .* at column {at + 1}: binary data")


@FAST
@given(f=movielens_files(min_rows=2), data=st.data())
def test_text_loaders_refuse_tables_and_binary(tmp_path_factory, f, data):
    """A ratings file (any MovieLens format), a numeric table or binary junk given to the
    text loaders is refused, naming the file and the line that shows it."""
    kind = data.draw(st.sampled_from(["ratings", "binary", "empty"]))
    if kind == "ratings":
        content, numbers = _ml_render(f)
        line = 1 if f["header"] else numbers[0]
        why = (r"^'userId,movieId,rating,timestamp' is a table header \(4 ','-separated columns\)"
               if f["header"] else r"is a row of numbers, as are \d+ of the \d+ lines read: a numeric table")
    elif kind == "binary":
        junk = data.draw(GARBAGE)
        content, line = junk + b"\x00" + data.draw(st.binary(max_size=40)), 1
        why = r"^control character"
    else:
        content, line, why = data.draw(st.sampled_from([b"", b"\n \n"])), None, r"^empty file|only blank lines"
    path = _write(tmp_path_factory.mktemp("txt"), "corpus.txt", content, f["layout"]["gz"])
    for load in (load_text, load_lee):
        with pytest.raises(DataFormatError) as info:
            load(path)
        _assert_names(info.value, path, line, why)


@FAST
@given(docs=documents(), data=st.data())
def test_reuters_round_trip_and_truncation(tmp_path_factory, docs, data):
    parts, opens = ['<!DOCTYPE lewis SYSTEM "lewis.dtd">'], []
    for k, (_, text) in enumerate(docs):
        opens.append(len("\n".join(parts)) + 1)  # offset of this article's '<REUTERS'
        parts.append(f'<REUTERS TOPICS="NO" NEWID="{k + 1}">\n<TEXT>&#2;\n<TITLE>T</TITLE>\n'
                     f'<BODY>{text}\n &#3;</BODY></TEXT>\n</REUTERS>')
    sgm = "\n".join(parts) + "\n"
    folder = tmp_path_factory.mktemp("reut")
    (folder / "reut2-000.sgm").write_text(sgm, encoding="latin-1")
    c = load_reuters(folder, min_count=1)
    assert c.doc_lengths.tolist() == [len(ws) for ws, _ in docs]

    last = opens[-1]
    cut = data.draw(st.integers(sgm.index(">", last) + 1, sgm.rindex("</REUTERS>") + len("</REUTERS>") - 1))
    (folder / "reut2-000.sgm").write_text(sgm[:cut], encoding="latin-1")
    with pytest.raises(DataFormatError) as info:
        load_reuters(folder, min_count=1)
    _assert_names(info.value, folder / "reut2-000.sgm", sgm.count("\n", 0, last) + 1,
                  r"^<REUTERS> article is never closed")


# =========================================================================== Python arguments

INT_BAD = [0, -3, 2.5, "3", None, True, float("nan")]
POS_BAD = [0.0, -1.0, float("nan"), float("inf"), "1", None, True]
ARGS = [  # (function, argument, bad values)
    (synthetic_ratings, "n_users", INT_BAD),
    (synthetic_ratings, "n_items", INT_BAD),
    (synthetic_ratings, "rank", INT_BAD),
    (synthetic_ratings, "density", POS_BAD + [1.5]),
    (synthetic_ratings, "noise", [-0.1, float("nan"), float("inf"), "0.1", None]),
    (synthetic_ratings, "key_or_seed", [-1, 2.5, "abc", None, [1, 2]]),
    (synthetic_lda_corpus, "n_docs", INT_BAD),
    (synthetic_lda_corpus, "n_words", INT_BAD),
    (synthetic_lda_corpus, "n_topics", INT_BAD),
    (synthetic_lda_corpus, "doc_length", INT_BAD),
    (synthetic_lda_corpus, "alpha", POS_BAD),
    (synthetic_lda_corpus, "beta", POS_BAD),
    (synthetic_lda_corpus, "return_truth", ["yes", 1, None]),
    (synthetic_lda_corpus, "key_or_seed", [-1, 2.5, "abc", None]),
    (load_movielens, "version", ["2k", None, ["latest"]]),
    (load_movielens, "scale", [(5, 1), (0, float("inf")), 5, (1, 2, 3), "0.5-5"]),
    (load_movielens, "step", [-0.5, float("nan"), "0.5"]),
    (load_jester, "scale", [(0, 100), (1, 1), None, (-10, float("nan"))]),
    (load_jester, "version", ["3", None]),
    (load_text, "path", [3, None, b"", ""]),
    (load_text, "min_count", [0, 1.5, "2"]),
]


@FAST
@given(case=st.sampled_from(ARGS), data=st.data())
def test_bad_python_arguments_are_named(tmp_path_factory, case, data):
    fn, name, bad_values = case
    bad = data.draw(st.sampled_from(bad_values))
    kwargs = {name: bad}
    if fn in (load_movielens, load_jester) and name != "path":
        kwargs.setdefault("path", tmp_path_factory.mktemp("x") / "never-read.csv")
    if fn is load_text and name != "path":
        kwargs["path"] = tmp_path_factory.mktemp("x") / "doc.txt"
        kwargs["path"].write_text("apple banana\n")
    with pytest.raises((ValueError, TypeError)) as info:
        fn(**kwargs)
    assert not isinstance(info.value, DataFormatError)
    assert re.match(rf"{name}\b", str(info.value)), str(info.value)


@FAST
@given(n=st.integers(1, 6), which=st.sampled_from(["users", "items", "ratings"]), data=st.data())
def test_ratings_from_triples_names_the_bad_entry(n, which, data):
    users, items = list(range(n)), list(range(10, 10 + n))
    ratings = [data.draw(st.integers(1, 10)) / 2 for _ in range(n)]
    r = ratings_from_triples(users, items, ratings, scale=(0.5, 5), step=0.5)
    assert int(r.mask.sum()) == n and sorted(r.values[r.mask].tolist()) == sorted(ratings)
    k = data.draw(st.integers(0, n - 1))
    arrays = {"users": users, "items": items, "ratings": ratings}
    if which == "ratings":
        arrays[which][k], why = data.draw(st.sampled_from([
            (float("nan"), "must be a finite number"), (float("inf"), "must be a finite number"),
            (5.5, r"must be on the rating scale \[0.5, 5\]"), (0.0, "must be on the rating scale"),
            (3.7, "must be a multiple of 0.5")]))
    else:
        arrays[which][k], why = data.draw(st.sampled_from([
            (3.7, "must be an integer"), (-2, "must be >= 0"), (float("nan"), "must be a finite number")]))
    with pytest.raises(ValueError, match=rf"^{which}\[{k}\]: {why}"):
        ratings_from_triples(**arrays, scale=(0.5, 5), step=0.5)
