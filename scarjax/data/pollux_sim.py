"""Inputs of the Pollux cluster simulator (thesis Sec 3.5.3; the OSDI'21 artifact's
``petuum/adaptdl`` branch ``osdi21-artifact``, folder ``simulator/``), as typed NumPy records.

* :func:`load_workload` - a workload file (``name,time,application,num_replicas,batch_size``:
  one job per row, its submission time in seconds and the user's fixed configuration);
  ``"workload-1"`` ... ``"workload-6"`` name the artifact's load-1.0 workloads (embedded).
* :func:`load_philly` - the Microsoft Philly trace the workloads are sampled from
  (``timestamp,duration,num_gpus,gpu_time,cluster``; 82,247 jobs).
* :func:`load_app_traces` - one application's measurements: ``placements.csv`` (step and
  sync time per GPU placement and per-GPU batch size), ``scalability.csv`` (the same at up
  to 16 nodes / 64 GPUs) and ``validation-<batch size>.csv`` (the training curve at that
  total batch size with the gradient statistics, one row per statistical epoch).

Without a path these read the embedded copy in ``scarjax/data/pollux_sim_data/`` (the six
workloads, the Philly trace gzip-compressed and the six applications' traces, unchanged;
Apache-2.0, ``LICENSE`` and a sha256 manifest in its ``README.md``), so they work on a fresh
clone; ``root=``/``path=`` read the same format from elsewhere (``../shared/data/pollux-sim``),
plain or gzip-compressed. Embedded loads are cached; every returned array is read-only.

Columns are found by the header's names (any order, as ``pandas.read_csv`` in the artifact).
A malformed file raises :class:`~scarjax.data.DataFormatError` naming the file, the line and
the problem (a missing column, a non-number, a placement that is not a string of per-node
GPU counts, ``sync_time >= step_time``, a duplicated configuration, a training curve whose
progress goes backwards, an unknown application, ...). The ``read_*`` functions parse one
file (or one application's folder) of a given path.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Mapping, Sequence

import numpy as np

from scarjax.validate import DataFormatError, check_path

from ._parse import Column, freeze, _check_field_counts, parse_table, read_bytes, text_lines

__all__ = [
    "APPLICATIONS",
    "WORKLOADS",
    "AppTraces",
    "PhillyTrace",
    "Placements",
    "Scalability",
    "ValidationCurve",
    "Workload",
    "embedded_dir",
    "load_app_traces",
    "load_philly",
    "load_workload",
    "read_app_traces",
    "read_philly",
    "read_placements",
    "read_scalability",
    "read_validation",
    "read_workload",
]

#: The artifact's six applications (thesis Table 3.1), in a fixed order (application ids).
APPLICATIONS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3")
#: The embedded workloads (the artifact's ``simulator/workloads/``, job load 1.0).
WORKLOADS = tuple(f"workload-{i}" for i in range(1, 7))

_EMBEDDED = Path(__file__).resolve().with_name("pollux_sim_data")
_WORKLOAD_NAME = re.compile(r"workload-\d+")
_PLACEMENT = re.compile(r"[1-9]+")
_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")
_VALIDATION = re.compile(r"validation-(\d+)\.csv(\.gz)?")

WORKLOAD_COLUMNS = ("name", "time", "application", "num_replicas", "batch_size")
PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
PLACEMENT_COLUMNS = ("placement", "local_bsz", "step_time", "sync_time")
SCALABILITY_COLUMNS = ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time")
VALIDATION_COLUMNS = ("progress", "iteration", "metric", "grad_sqr", "grad_var")


def embedded_dir() -> Path:
    """The folder of the embedded copy (``README.md`` there: provenance and sha256 manifest)."""
    return _EMBEDDED


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Workload:
    """A workload: one entry per job (row order of the file).

    Attributes:
      name: ``str[J]`` job names (unique).
      time: ``float64[J]`` submission times, seconds from the start of the simulation.
      application: ``str[J]`` application of each job (one of :data:`APPLICATIONS` by default).
      num_replicas: ``int64[J]`` the user's number of GPUs (used by Tiresias).
      batch_size: ``int64[J]`` the user's total batch size (used by Tiresias and Optimus).
      source: the file read.

    Raises:
      ValueError/TypeError: the columns differ in length or are not one-dimensional, a name
        is repeated or empty, a submission time is not finite and ``>= 0``, or a GPU count or
        batch size is not an integer ``>= 1`` (the message names the column, the row and
        the job, as a file's :class:`DataFormatError` names the line).
    """

    name: np.ndarray
    time: np.ndarray
    application: np.ndarray
    num_replicas: np.ndarray
    batch_size: np.ndarray
    source: str

    def __post_init__(self):
        if not isinstance(self.source, str):
            raise TypeError(f"source must be a str, got {type(self.source).__name__}")
        cols = {}
        for col in WORKLOAD_COLUMNS:
            a = np.asarray(getattr(self, col))
            if a.ndim != 1:
                raise ValueError(f"workload {self.source}: column {col} must be one-dimensional, got shape {a.shape}")
            cols[col] = a
        n = cols["name"].shape[0]
        for col, a in cols.items():
            if a.shape[0] != n:
                raise ValueError(f"workload {self.source}: column {col} has {a.shape[0]} rows, name has {n}")
        for col in ("name", "application"):
            a = cols[col]
            if a.dtype.kind not in "US":
                raise TypeError(f"workload {self.source}: column {col} must hold strings, got dtype {a.dtype}")
            cols[col] = a = a.astype(str)
            k = _first_bad(np.char.str_len(np.char.strip(a)) == 0)
            if k is not None:
                raise ValueError(f"workload {self.source}: column {col} is empty in row {k + 1}")
        seen: dict[str, int] = {}
        for k, nm in enumerate(cols["name"].tolist()):
            if nm in seen:
                raise ValueError(f"workload {self.source}: column name repeats job {nm!r} in row {k + 1} "
                                 f"(first in row {seen[nm] + 1})")
            seen[nm] = k

        def where(k: int) -> str:
            return f"row {k + 1} (job {str(cols['name'][k])!r})"

        t = cols["time"]
        if t.dtype.kind not in "iuf" or t.dtype == bool:
            raise TypeError(f"workload {self.source}: column time must be numeric, got dtype {t.dtype}")
        t = t.astype(np.float64)
        k = _first_bad(~(np.isfinite(t) & (t >= 0)))
        if k is not None:
            raise ValueError(f"workload {self.source}: time must be a finite number of seconds >= 0, got "
                             f"{t[k].item()!r} in {where(k)}")
        cols["time"] = t
        for col in ("num_replicas", "batch_size"):
            a = cols[col]
            if a.dtype.kind not in "iuf" or a.dtype == bool:
                raise TypeError(f"workload {self.source}: column {col} must be numeric, got dtype {a.dtype}")
            f = a.astype(np.float64)
            with np.errstate(invalid="ignore"):
                k = _first_bad(~(np.isfinite(f) & (f >= 1) & (f == np.round(f)) & (f < 2.0**62)))
            if k is not None:
                raise ValueError(f"workload {self.source}: {col} must be an integer >= 1, got {a[k].item()!r} in {where(k)}")
            cols[col] = a.astype(np.int64)
        for col, a in cols.items():
            object.__setattr__(self, col, a)
        freeze(self)

    def __len__(self) -> int:
        return int(self.name.shape[0])

    def app_ids(self, applications: Sequence[str] = APPLICATIONS) -> np.ndarray:
        """``int32[J]``: each job's application as an index into ``applications``."""
        index = {a: i for i, a in enumerate(applications)}
        missing = sorted(set(self.application.tolist()) - set(index))
        if missing:
            raise ValueError(f"applications does not list {missing} (used by {self.source})")
        return np.array([index[a] for a in self.application.tolist()], dtype=np.int32)


@dataclass(frozen=True, eq=False)
class PhillyTrace:
    """The Philly cluster trace (Jeon et al., ATC'19) as the artifact ships it.

    Attributes:
      timestamp: ``datetime64[s][R]`` submission times.
      duration: ``float64[R]`` run time, seconds.
      num_gpus: ``int64[R]`` GPUs used.
      gpu_time: ``float64[R]`` GPU-seconds (``duration * num_gpus``).
      cluster: ``str[R]`` virtual-cluster id.
      source: the file read.
    """

    timestamp: np.ndarray
    duration: np.ndarray
    num_gpus: np.ndarray
    gpu_time: np.ndarray
    cluster: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.duration.shape[0])


@dataclass(frozen=True, eq=False)
class Placements:
    """``placements.csv``: measured times per GPU placement and per-GPU batch size.

    A placement string lists the GPUs used on each node: ``"22"`` is 2 nodes with 2 GPUs
    each, ``"1112"`` is 4 nodes holding 1, 1, 1 and 2 GPUs (the artifact stores each
    placement as its lexicographically smallest rotation).

    Attributes:
      placement: ``str[R]`` as written.
      gpus_per_node: ``int64[R, L]`` the digits of each placement, zero-padded to the longest.
      num_nodes: ``int64[R]`` nodes used (the string's length).
      num_replicas: ``int64[R]`` GPUs used (the sum of its digits).
      local_bsz: ``int64[R]`` per-GPU batch size.
      step_time: ``float64[R]`` seconds per iteration (compute and synchronisation).
      sync_time: ``float64[R]`` seconds of it spent synchronising (``< step_time``).
      source: the file read.
    """

    placement: np.ndarray
    gpus_per_node: np.ndarray
    num_nodes: np.ndarray
    num_replicas: np.ndarray
    local_bsz: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.local_bsz.shape[0])


@dataclass(frozen=True, eq=False)
class Scalability:
    """``scalability.csv``: measured times at larger scales (6 to 16 nodes, up to 64 GPUs).

    Attributes: ``num_nodes``, ``num_replicas``, ``local_bsz`` (``int64[R]``), ``step_time``,
    ``sync_time`` (``float64[R]``, seconds; ``sync_time < step_time``), ``source``.
    """

    num_nodes: np.ndarray
    num_replicas: np.ndarray
    local_bsz: np.ndarray
    step_time: np.ndarray
    sync_time: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.local_bsz.shape[0])


@dataclass(frozen=True, eq=False)
class ValidationCurve:
    """``validation-<batch_size>.csv``: a training run at a fixed total batch size.

    One row per statistical epoch: row ``e`` is the state after ``e + 1`` epochs of
    *progress*, measured in iterations at the application's smallest validated batch size
    (its ``init_batch_size``, ``M0``), i.e. progress grows by ``(M / M0) * EFFICIENCY(M)``
    per iteration at batch ``M`` (Eq 3.3).

    Attributes:
      batch_size: the run's total batch size (from the file name).
      progress: ``float64[E]`` cumulative progress (non-decreasing).
      iteration: ``int64[E]`` iterations taken to reach it (non-decreasing).
      metric: ``float64[E]`` the validation metric then.
      grad_sqr, grad_var: ``float64[E]`` (pre-conditioned) gradient statistics during the
        epoch; the artifact's PGNS is ``grad_var / grad_sqr * M0`` (``goodput.py``).
      source: the file read.
    """

    batch_size: int
    progress: np.ndarray
    iteration: np.ndarray
    metric: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.progress.shape[0])


@dataclass(frozen=True, eq=False)
class AppTraces:
    """One application's traces.

    Attributes:
      name: the application (its folder's name).
      placements: :class:`Placements`; scalability: :class:`Scalability`.
      validation: ``{batch_size: ValidationCurve}`` in increasing batch size.
      source: the folder read.
    """

    name: str
    placements: Placements
    scalability: Scalability
    validation: Mapping[int, ValidationCurve]
    source: str

    @property
    def batch_sizes(self) -> tuple[int, ...]:
        """The validated total batch sizes, increasing."""
        return tuple(self.validation)


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def _read_table(path: Path, columns: Sequence[Column | str], source=None):
    """``{name: array}`` for a CSV file whose header names ``columns`` (any order); string
    columns (given as ``str``) come back as ``str`` arrays, numeric ones parsed and checked
    by :func:`~scarjax.data._parse.parse_table`. Also returns the data lines' numbers."""
    source = path if source is None else source
    lines, linenos = text_lines(read_bytes(path, source), source)
    header = [h.strip() for h in lines[0].split(",")]
    names = [c if isinstance(c, str) else c.name for c in columns]
    want = ",".join(names)
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise DataFormatError(source, f"the header names {dup} twice (expected the columns {want})",
                              linenos[0])
    missing = [n for n in names if n not in header]
    extra = [h for h in header if h not in names]
    if missing or extra:
        why = "; ".join(w for w in (f"missing {missing}" if missing else "",
                                     f"unexpected {extra}" if extra else "") if w)
        raise DataFormatError(source, f"the header must name the columns {want}, got {lines[0].strip()!r} "
                              f"({why})", linenos[0])
    body, nos = lines[1:], linenos[1:]
    if not body:
        raise DataFormatError(source, "no data rows after the header")
    spec = {(c if isinstance(c, str) else c.name): c for c in columns}
    in_file = [spec[h] for h in header]
    as_col = [Column(c) if isinstance(c, str) else c for c in in_file]
    if any(ln.count(",") != len(header) - 1 for ln in body):
        _check_field_counts(body, nos, as_col, source, ",", "line")
    out: dict[str, np.ndarray] = {}
    str_pos = [j for j, c in enumerate(in_file) if isinstance(c, str)]
    num_pos = [j for j, c in enumerate(in_file) if not isinstance(c, str)]
    if str_pos:
        split = [ln.split(",") for ln in body]
        for j in str_pos:
            vals = [f[j].strip() for f in split]
            empty = [k for k, v in enumerate(vals) if not v]
            if empty:
                raise DataFormatError(source, f"{header[j]} is empty", nos[empty[0]])
            out[header[j]] = np.array(vals, dtype=str)
        num_lines = [",".join(f[j] for j in num_pos) for f in split]
    else:
        num_lines = body
    if num_pos:
        table = parse_table(num_lines, nos, [in_file[j] for j in num_pos], source)
        for i, j in enumerate(num_pos):
            col = in_file[j]
            out[header[j]] = table[:, i].astype(np.int64) if col.integer else table[:, i].astype(np.float64)
    return out, nos


def _first_bad(mask: np.ndarray) -> int | None:
    bad = np.flatnonzero(mask)
    return int(bad[0]) if bad.size else None


def _check_times(t: dict, nos: np.ndarray, source) -> None:
    k = _first_bad(t["sync_time"] >= t["step_time"])
    if k is not None:
        sync, step = t["sync_time"][k].item(), t["step_time"][k].item()
        raise DataFormatError(source, "sync_time must be < step_time (a step includes its synchronisation), "
                              f"got sync_time={sync!r}, step_time={step!r}", nos[k])


def _check_unique(keys: list[tuple], nos: np.ndarray, what: str, source) -> None:
    seen: dict[tuple, int] = {}
    for k, key in enumerate(keys):
        if key in seen:
            raise DataFormatError(source, f"duplicate {what} {key} (first on line {seen[key]})", nos[k])
        seen[key] = int(nos[k])


def _check_monotone(values: np.ndarray, name: str, nos: np.ndarray, source) -> None:
    k = _first_bad(np.diff(values) < 0)
    if k is not None:
        raise DataFormatError(source, f"{name} must not decrease along the training curve, got "
                              f"{values[k + 1].item()!r} after {values[k].item()!r}", nos[k + 1])


def _find(folder: Path, name: str) -> Path:
    for cand in (folder / name, folder / (name + ".gz")):
        if cand.is_file():
            return cand
    raise FileNotFoundError(f"{folder / name} does not exist (nor {name}.gz)")


def read_workload(path: Path, applications: Collection[str] | None = APPLICATIONS) -> Workload:
    """Parse a workload file (see :func:`load_workload`)."""
    t, nos = _read_table(path, [
        "name",
        Column("time", low=0.0),
        "application",
        Column("num_replicas", integer=True, low=1),
        Column("batch_size", integer=True, low=1),
    ])
    _check_unique([(n,) for n in t["name"].tolist()], nos, "job name", path)
    if applications is not None:
        if isinstance(applications, (str, bytes)) or not isinstance(applications, Collection) or not all(
                isinstance(a, str) for a in applications):
            raise TypeError(f"applications must be a collection of application names or None, got {applications!r}")
        known = set(applications)
        k = _first_bad(~np.isin(t["application"], list(known)))
        if k is not None:
            got = t["application"][k].item()
            raise DataFormatError(path, f"application must be one of {sorted(known)}, got {got!r}", nos[k])
    return Workload(name=t["name"], time=t["time"], application=t["application"],
                    num_replicas=t["num_replicas"], batch_size=t["batch_size"], source=str(path))


def _valid_stamp(s: str) -> bool:
    try:
        np.datetime64(s, "s")
    except ValueError:
        return False
    return True


def read_philly(path: Path) -> PhillyTrace:
    """Parse a Philly trace file (see :func:`load_philly`)."""
    t, nos = _read_table(path, [
        "timestamp",
        Column("duration", low=0.0),
        Column("num_gpus", integer=True, low=1),
        Column("gpu_time", low=0.0),
        "cluster",
    ])
    ts = t["timestamp"]
    ok = np.fromiter((_TIMESTAMP.fullmatch(s) is not None for s in ts.tolist()), bool, count=ts.size)
    k = _first_bad(~ok)
    stamps = None
    if k is None:
        try:
            stamps = ts.astype("datetime64[s]")
        except ValueError:  # well-formed but impossible (2017-13-40): find the first such line
            k = next(k for k, s in enumerate(ts.tolist()) if not _valid_stamp(s))
    if k is not None:
        raise DataFormatError(path, "timestamp must be a date and time 'YYYY-MM-DD hh:mm:ss', got "
                              f"{ts[k].item()!r}", nos[k])
    return PhillyTrace(timestamp=stamps, duration=t["duration"], num_gpus=t["num_gpus"],
                       gpu_time=t["gpu_time"], cluster=t["cluster"], source=str(path))


def read_placements(path: Path) -> Placements:
    """Parse a ``placements.csv`` file (see :func:`load_app_traces`)."""
    t, nos = _read_table(path, [
        "placement",
        Column("local_bsz", integer=True, low=1),
        Column("step_time", low=0.0),
        Column("sync_time", low=0.0),
    ])
    pl = t["placement"]
    ok = np.fromiter((_PLACEMENT.fullmatch(s) is not None for s in pl.tolist()), bool, count=pl.size)
    k = _first_bad(~ok)
    if k is not None:
        raise DataFormatError(path, "placement must be a string of per-node GPU counts 1-9 ('22' = 2 nodes "
                              f"with 2 GPUs each), got {pl[k].item()!r}", nos[k])
    k = _first_bad(t["step_time"] <= 0)
    if k is not None:
        raise DataFormatError(path, f"step_time must be > 0, got {t['step_time'][k].item()!r}", nos[k])
    _check_times(t, nos, path)
    _check_unique(list(zip(pl.tolist(), t["local_bsz"].tolist())), nos, "(placement, local_bsz)", path)
    width = max(len(s) for s in pl.tolist())
    gpn = np.zeros((pl.size, width), dtype=np.int64)
    for r, s in enumerate(pl.tolist()):
        gpn[r, :len(s)] = [int(c) for c in s]
    return Placements(placement=pl, gpus_per_node=gpn, num_nodes=(gpn > 0).sum(axis=1).astype(np.int64),
                      num_replicas=gpn.sum(axis=1), local_bsz=t["local_bsz"], step_time=t["step_time"],
                      sync_time=t["sync_time"], source=str(path))


def read_scalability(path: Path) -> Scalability:
    """Parse a ``scalability.csv`` file (see :func:`load_app_traces`)."""
    t, nos = _read_table(path, [
        Column("num_nodes", integer=True, low=1),
        Column("num_replicas", integer=True, low=1),
        Column("local_bsz", integer=True, low=1),
        Column("step_time", low=0.0),
        Column("sync_time", low=0.0),
    ])
    k = _first_bad(t["num_nodes"] > t["num_replicas"])
    if k is not None:
        n, r = t["num_nodes"][k].item(), t["num_replicas"][k].item()
        raise DataFormatError(path, f"num_nodes must be <= num_replicas (every node holds a GPU), got "
                              f"num_nodes={n}, num_replicas={r}", nos[k])
    k = _first_bad(t["step_time"] <= 0)
    if k is not None:
        raise DataFormatError(path, f"step_time must be > 0, got {t['step_time'][k].item()!r}", nos[k])
    _check_times(t, nos, path)
    keys = list(zip(t["num_nodes"].tolist(), t["num_replicas"].tolist(), t["local_bsz"].tolist()))
    _check_unique(keys, nos, "(num_nodes, num_replicas, local_bsz)", path)
    return Scalability(source=str(path), **{c: t[c] for c in SCALABILITY_COLUMNS})


def read_validation(path: Path, batch_size: int) -> ValidationCurve:
    """Parse a ``validation-<batch_size>.csv`` file (see :func:`load_app_traces`)."""
    t, nos = _read_table(path, [
        Column("progress", low=0.0),
        Column("iteration", integer=True, low=0),
        Column("metric"),
        Column("grad_sqr", low=0.0),
        Column("grad_var", low=0.0),
    ])
    _check_monotone(t["progress"], "progress", nos, path)
    _check_monotone(t["iteration"], "iteration", nos, path)
    return ValidationCurve(batch_size=int(batch_size), source=str(path),
                           **{c: t[c] for c in VALIDATION_COLUMNS})


def read_app_traces(folder: Path, name: str | None = None) -> AppTraces:
    """Parse one application's folder (see :func:`load_app_traces`)."""
    folder = Path(folder)
    curves: dict[int, ValidationCurve] = {}
    seen: dict[int, Path] = {}
    for p in sorted(folder.iterdir()):
        m = _VALIDATION.fullmatch(p.name)
        if not m or not p.is_file():
            continue
        bsz = int(m.group(1))
        if bsz < 1:
            raise DataFormatError(p, "the batch size in the file name must be >= 1")
        if bsz in seen:
            raise DataFormatError(p, f"a second training curve for batch size {bsz} (also {seen[bsz].name})")
        seen[bsz] = p
        curves[bsz] = read_validation(p, bsz)
    if not curves:
        raise DataFormatError(folder, "no validation-<batch size>.csv training curves in this folder")
    return AppTraces(
        name=name or folder.name,
        placements=read_placements(_find(folder, "placements.csv")),
        scalability=read_scalability(_find(folder, "scalability.csv")),
        validation=dict(sorted(curves.items())),
        source=str(folder),
    )


# ---------------------------------------------------------------------------
# Public loaders
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _embedded_workload(name: str) -> Workload:
    return read_workload(_EMBEDDED / "workloads" / f"{name}.csv")


@functools.lru_cache(maxsize=1)
def _embedded_philly() -> PhillyTrace:
    return read_philly(_EMBEDDED / "traces" / "philly.csv.gz")


@functools.lru_cache(maxsize=None)
def _embedded_app(app: str) -> AppTraces:
    return read_app_traces(_EMBEDDED / "traces" / app)


def load_workload(path_or_name: str | os.PathLike = "workload-1", *,
                  applications: Collection[str] | None = APPLICATIONS) -> Workload:
    """A workload in the artifact's CSV format (``name,time,application,num_replicas,batch_size``).

    Args:
      path_or_name: ``"workload-1"`` ... ``"workload-6"`` (the embedded copies of the
        artifact's ``simulator/workloads/``), or the path of any file in that format (plain
        or gzip-compressed). A name that is also an existing file reads the file.
      applications: the application names allowed (``None``: any).

    Raises:
      DataFormatError: the file is malformed (names the file and line).
      FileNotFoundError: no such file; ValueError/TypeError: a bad argument.
    """
    if applications is not None and (isinstance(applications, (str, bytes)) or not isinstance(
            applications, Collection) or not all(isinstance(a, str) for a in applications)):
        raise TypeError(f"applications must be a collection of application names or None, got {applications!r}")
    is_name = isinstance(path_or_name, str) and _WORKLOAD_NAME.fullmatch(path_or_name)
    if is_name and not Path(path_or_name).exists():
        if path_or_name not in WORKLOADS:
            raise ValueError(f"path_or_name: no embedded workload {path_or_name!r}; the embedded ones are "
                             f"{list(WORKLOADS)} (or pass a file path)")
        if applications is None or set(APPLICATIONS) <= set(applications):
            return _embedded_workload(path_or_name)
        return read_workload(_EMBEDDED / "workloads" / f"{path_or_name}.csv", applications)
    p = check_path("path_or_name", path_or_name)
    if not p.is_file():
        raise FileNotFoundError(f"path_or_name: {p} does not exist (the embedded workloads are "
                                f"{list(WORKLOADS)})")
    return read_workload(p, applications)


def load_philly(path: str | os.PathLike | None = None) -> PhillyTrace:
    """The Philly trace (``timestamp,duration,num_gpus,gpu_time,cluster``): the embedded copy
    (82,247 jobs, the artifact's ``simulator/traces/philly.csv``) or the file at ``path``
    (plain or gzip-compressed; a folder: its ``philly.csv[.gz]`` or ``traces/philly.csv[.gz]``)."""
    if path is None:
        return _embedded_philly()
    p = check_path("path", path)
    if p.is_dir():
        for folder in (p, p / "traces"):
            for name in ("philly.csv", "philly.csv.gz"):
                if (folder / name).is_file():
                    return read_philly(folder / name)
        raise FileNotFoundError(f"path: no philly.csv[.gz] in {p} or {p / 'traces'}")
    if not p.is_file():
        raise FileNotFoundError(f"path: {p} does not exist")
    return read_philly(p)


def load_app_traces(app: str, root: str | os.PathLike | None = None) -> AppTraces:
    """One application's measured step/sync times and training curves.

    Args:
      app: the application, one of :data:`APPLICATIONS` for the embedded copy (with
        ``root``, any folder name there).
      root: ``None`` for the embedded copy; else the artifact's ``traces`` folder (holding
        ``<app>/``) or the folder above it (``../shared/data/pollux-sim``).

    Returns:
      :class:`AppTraces` with ``placements``, ``scalability`` and ``validation``
      (``{batch_size: ValidationCurve}``, increasing).

    Raises:
      DataFormatError: a malformed file (names the file and line).
      FileNotFoundError: the folder or one of its files is missing.
    """
    if not isinstance(app, str):
        raise TypeError(f"app must be an application name (str), got {type(app).__name__} {app!r}")
    if root is None:
        if app not in APPLICATIONS:
            raise ValueError(f"app must be one of {list(APPLICATIONS)} (the embedded traces), got {app!r}")
        return _embedded_app(app)
    r = check_path("root", root)
    if not app or "/" in app or "\\" in app or app in (".", ".."):
        raise ValueError(f"app must be a folder name, got {app!r}")
    for folder in (r / app, r / "traces" / app):
        if folder.is_dir():
            return read_app_traces(folder, app)
    raise FileNotFoundError(f"root: no folder {app!r} in {r} or {r / 'traces'}")
