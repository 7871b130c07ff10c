"""CM-DARE's processed measurements (Li, Walls, Guo, ICDCS'20), as typed read-only
NumPy records: the inputs of the paper's step-time regressions (Sec III-B, Table II), its
checkpoint-time regressions (Sec IV, Table IV), the cluster-size runs behind Table III, Fig 4 and
the parameter-server bottleneck of Fig 12 (Sec III-D, VI-B), the single-worker step-time logs
(Table I) and the GCE preemptible training runs the training-time model (Eq 4-5, Sec VI-A) is
checked against.

* :func:`load_cmdare_speed` - ``speed_data/speed_data_supertable.csv``: GPU TFLOPS, model FLOPs,
  latency, tensor sizes, parameter count -> speed and step time (208 rows: the four
  Tensor2Tensor models x K80/P100 x 0.3/30.3 ms network latency, 13 measurements each); with
  ``dataset="models20"`` the twenty CNNs of Table II (``0latency_k80_new.csv``,
  ``0latency_p100_new2.csv``: 520 rows at 0.3 ms).
* :func:`load_cmdare_checkpoints` - ``checkpoint/whole_data.csv``: checkpoint duration and the
  checkpoint/meta/weight/index/graph file sizes of twenty CNNs, five checkpoints each (100 rows).
* :func:`load_cmdare_cluster_speed` - ``speed_and_cluster_size/``: the TensorBoard
  ``global_step/sec`` export of every (GPU, parameter servers, model, workers 1..8) run (96 runs:
  K80 and P100 with one parameter server, P100 with two).
* :func:`load_cmdare_step_logs` - ``speed_data_base/``: the step-time log of one worker and one
  parameter server per (model, GPU), K80/P100/V100 (12 logs, Table I).
* :func:`load_gce_training_runs` - ``gce-preemptible/training/``: every VM of the real distributed
  training runs on preemptible K80 (4 and 8 workers) and V100 servers (uptime, how it ended).

Without a path every loader reads the embedded copy in ``scarjax/data/transient_data/`` (the
files byte for byte; the cluster-size runs gzip-compressed, ``mtime=0``; provenance, Apache-2.0
licence and sha256 manifest in its ``README.md``); ``path=``/``root=`` read the files of
``../shared/data/transient`` (plain or gzip). Embedded loads are cached; arrays are read-only.

A malformed file raises :class:`~scarjax.data.DataFormatError` naming the file, the line and the
problem (a wrong header or field count, a field that is not a positive number, a step time that
is not the inverse of the speed, steps that do not increase, a GPU TFLOPS value that is none of
the three GPUs', an unknown ending of a VM, ...).
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from scarjax.validate import DataFormatError, check_path

from ._parse import Column, freeze, parse_table, read_bytes, text_lines
from .transient import _locate as _locate_file

__all__ = [
    "CMDARE_GPU_TFLOPS",
    "SPEED_20_FILES",
    "CMDARE_MODELS",
    "CheckpointTable",
    "ClusterSpeedRun",
    "SpeedTable",
    "StepLog",
    "TrainingRun",
    "load_cmdare_checkpoints",
    "load_cmdare_cluster_speed",
    "load_cmdare_speed",
    "load_cmdare_step_logs",
    "load_gce_training_runs",
]

_EMBEDDED = Path(__file__).resolve().with_name("transient_data")

#: Peak TFLOPS of the three GPUs as the paper states them (Sec III-A: 4.11, 9.53, 14.13) and as the
#: supertable writes them (4.113, 9.526); a supertable value within 0.02 of one names the GPU.
CMDARE_GPU_TFLOPS = {"k80": 4.113, "p100": 9.526, "v100": 14.13}
_TFLOPS_TOL = 0.02
#: The four Tensor2Tensor models of the cluster-size runs and step-time logs (Table I).
CMDARE_MODELS = ("res15", "res32", "shakesmall", "shakebig")

_SPEED_HEADER = [
    "GPU TFLOPS",
    "Model FLOPs",
    "Latency (ms)",
    "Average Tensor Size (MB)",
    "Max Tensor Size (MB)",
    "Number of Parameters",
    "Speed (steps/sec)",
    "Step Time (s)",
]
_CKPT_HEADER = [
    "Model",
    "Local duration",
    "Duration",
    "Diff",
    "Checkpoint Size (MB)",
    "Meta File Size",
    "Weight File Size",
    "Index File Size",
    "Graph File Size",
]
_MODEL_COL = "Model (temp)"
#: The 20-model step-time files (Table II's data: 20 CNNs, 13 measurements each, 0.3 ms latency).
SPEED_20_FILES = ("0latency_k80_new.csv", "0latency_p100_new2.csv")
_TB_HEADER = ["Wall time", "Step", "Value"]
_LOG_HEADER = ["Wall time", "Step", "Value", "Step Time"]
_VM_HEADER = ["VM_name", "Uptime", "Revoked"]
# The speed x step-time product must be 1 within this (the file's values agree to 1e-8).
_INVERSE_TOL = 1e-3

# speed_and_cluster_size/<folder>/<model><gpu>worker<N>: the folder gives (gpu, ps); the run's name
# repeats them, with the source's spellings ("shakebig80", "shakesmall100", "shakesbigp100ps2").
_CLUSTER_FOLDERS = {"k80": ("k80", 1), "p100": ("p100", 1), "p100ps2": ("p100", 2)}
_CLUSTER_RUN = re.compile(r"(res15|res32|shakesmall|shakes?big)(k?80|p?100)(ps2)?worker(\d+)")
_TB_FILE = "run_.-tag-global_step_sec.csv"
_LOG_DIR = re.compile(r"(res15|res32|shakesmall|shakebig)(k80|p100|v100)")
_TRAINING_SETTINGS = {
    "k80-4": "k80_spot/4-spot",
    "k80-8": "k80_spot/8-spot",
    "v100": "p100_v100_spot/v100",
}
_VM_NAME = re.compile(r"(?:spot8-|v100-spot-)?([a-z]+-[a-z]+\d+-[a-z])-(run\d+)-(master|worker-\d+)")
_VM_STATUSES = ("job completed", "revoked", "manually stopped due to revoked master")


def _gpu_of_tflops(t: np.ndarray, source, linenos) -> np.ndarray:
    names = np.array(list(CMDARE_GPU_TFLOPS))
    ref = np.array(list(CMDARE_GPU_TFLOPS.values()))
    dist = np.abs(t[:, None] - ref[None, :])
    bad = dist.min(axis=1) > _TFLOPS_TOL
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        known = ", ".join(f"{g} {v}" for g, v in CMDARE_GPU_TFLOPS.items())
        raise DataFormatError(
            source, f"GPU TFLOPS {t[k]:g} is none of the measured GPUs' ({known}; within {_TFLOPS_TOL})", linenos[k]
        )
    return names[dist.argmin(axis=1)]


# ---------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SpeedTable:
    """CM-DARE's step-time supertable (Sec III-B, Fig 3, Table II), one entry per measurement.

    Attributes:
      gpu_tflops: ``float64[N]`` the GPU's peak TFLOPS (C_gpu; 4.113 K80, 9.526 P100).
      model_flops: ``float64[N]`` the model's FLOPs per image (C_m; Sec III-A's profiler).
      latency_ms, avg_tensor_mb, max_tensor_mb: ``float64[N]`` as written.
      num_params: ``float64[N]`` the model's parameter count.
      speed: ``float64[N]`` steps per second; step_time_s: ``float64[N]`` its inverse (checked).
      gpu: ``str[N]`` ``"k80"``, ``"p100"`` or ``"v100"`` from ``gpu_tflops``
        (:data:`CMDARE_GPU_TFLOPS`).
      line: ``int64[N]`` the row's line in the file; source: the file read.
      model: ``str[N]`` the CNN (``"Res15"``, ``"custom7"``, ``"shake mid 32d"``) where the file
        names it (the 20-model files), ``""`` otherwise (the supertable). ``latency_ms``,
        ``avg_tensor_mb``, ``max_tensor_mb`` are NaN where the file leaves them blank (20-model
        data: the latency of 52 K80 rows - the P100 file writes 0.3 ms for the same models - and
        the tensor sizes of the 16 custom/variant models); the other columns are never blank.
    """

    gpu_tflops: np.ndarray
    model_flops: np.ndarray
    latency_ms: np.ndarray
    avg_tensor_mb: np.ndarray
    max_tensor_mb: np.ndarray
    num_params: np.ndarray
    speed: np.ndarray
    step_time_s: np.ndarray
    gpu: np.ndarray
    line: np.ndarray
    source: str
    model: np.ndarray = None  # type: ignore[assignment]

    def __post_init__(self):
        if self.model is None:
            object.__setattr__(self, "model", np.full(self.speed.shape[0], "", dtype=str))
        freeze(self)

    def __len__(self) -> int:
        return int(self.speed.shape[0])

    @staticmethod
    def concat(tables: "list[SpeedTable]") -> "SpeedTable":
        """The rows of ``tables`` one after the other (``source``: their sources joined by ``;``)."""
        if not tables:
            raise ValueError("tables must not be empty")
        arrays = {
            name: np.concatenate([getattr(t, name) for t in tables])
            for name in ("gpu_tflops", "model_flops", "latency_ms", "avg_tensor_mb", "max_tensor_mb", "num_params",
                         "speed", "step_time_s", "gpu", "line", "model")
        }
        return SpeedTable(source=";".join(t.source for t in tables), **arrays)


@dataclass(frozen=True, eq=False)
class CheckpointTable:
    """Checkpoint durations and file sizes (Sec IV, Fig 5, Table IV), one entry per checkpoint.

    Attributes:
      model: ``str[N]`` the CNN (``"ResNet-32"``, ``"Custom ResNet 4"``, ``"Shake small"``).
      local_s: ``float64[N]`` time to write the checkpoint locally; duration_s: ``float64[N]``
        the measured checkpoint time to remote storage (T_c); diff_s: their difference.
      size_mb: ``float64[N]`` checkpoint size S_c (in these files meta + weight within 0.4%); meta_mb (S_m),
        weight_mb (the data file, S_d), index_mb (S_i), graph_mb: ``float64[N]`` file sizes, MB.
      line: ``int64[N]``; source: the file read.
    """

    model: np.ndarray
    local_s: np.ndarray
    duration_s: np.ndarray
    diff_s: np.ndarray
    size_mb: np.ndarray
    meta_mb: np.ndarray
    weight_mb: np.ndarray
    index_mb: np.ndarray
    graph_mb: np.ndarray
    line: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.duration_s.shape[0])


@dataclass(frozen=True, eq=False)
class ClusterSpeedRun:
    """One cluster-size run (Sec III-C/D, Table III, Fig 4, Fig 12): asynchronous training with
    ``ps`` parameter servers and ``workers`` homogeneous ``gpu`` workers; TensorBoard's
    ``global_step/sec`` every ~100 steps. The global step is shared, so ``steps_per_s`` is the
    *cluster's* speed (1 worker: Table I's single-worker speed).

    Attributes:
      gpu: ``"k80"`` or ``"p100"``; ps: 1 or 2; model: one of :data:`CMDARE_MODELS`; workers: 1..8.
      wall_s: ``float64[T]`` Unix time of each point; step: ``int64[T]`` the global step (strictly
        increasing); steps_per_s: ``float64[T]`` the cluster's steps per second since the last point.
      line: ``int64[T]``; source: the file read.
    """

    gpu: str
    ps: int
    model: str
    workers: int
    wall_s: np.ndarray
    step: np.ndarray
    steps_per_s: np.ndarray
    line: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.step.shape[0])


@dataclass(frozen=True, eq=False)
class StepLog:
    """One worker's step-time log (one GPU worker, one parameter server; Table I, Fig 2).

    Attributes:
      model: one of :data:`CMDARE_MODELS`; gpu: ``"k80"``, ``"p100"`` or ``"v100"``.
      step_time_s: ``float64[T]`` seconds per step, averaged over each ~100 steps; the rows the
        source leaves without a step time (the first 100 steps, which the paper discards, Sec
        III-B) are not included.
      step: ``int64[T]``; steps_per_s: ``float64[T]`` the ``Value`` column (1 / step time);
      wall_s: ``float64[T]``; line: ``int64[T]``; source: the file read.
    """

    model: str
    gpu: str
    step_time_s: np.ndarray
    step: np.ndarray
    steps_per_s: np.ndarray
    wall_s: np.ndarray
    line: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.step_time_s.shape[0])


@dataclass(frozen=True, eq=False)
class TrainingRun:
    """One distributed training run on GCE preemptible GPU servers (the VMs of one ``runN`` in one
    zone; CM-DARE authors' ``transient-deep-learning`` data).

    Attributes:
      setting: ``"k80-4"`` (K80, 4 workers), ``"k80-8"`` (K80, 8 workers) or ``"v100"``.
      run: ``"<zone>-run<N>"`` (``"us-east1-c-run1"``); zone: ``"us-east1-c"``.
      vm: ``str[V]`` the VM names as written; role: ``str[V]`` ``"master"`` or ``"worker"``.
      uptime_s: ``float64[V]`` seconds each VM was up.
      status: ``str[V]`` the ``Revoked`` field as written (``"Job completed"``, ``"Revoked"``,
        ``"Manually stopped due to revoked master"``; the 8-worker file also writes
        ``"Job Completed"``).
      revoked: ``bool[V]`` ``status`` is not "job completed" (compared case-insensitively): the VM
        was preempted, or stopped because its master was.
      line: ``int64[V]``; source: the file read.
    """

    setting: str
    run: str
    zone: str
    vm: np.ndarray
    role: np.ndarray
    uptime_s: np.ndarray
    status: np.ndarray
    revoked: np.ndarray
    line: np.ndarray
    source: str

    def __post_init__(self):
        freeze(self)

    def __len__(self) -> int:
        return int(self.vm.shape[0])

    @property
    def master_uptime_s(self) -> float:
        """The master's uptime (the run's duration when it completed)."""
        m = self.role == "master"
        if not m.any():
            raise ValueError(f"run {self.run} ({self.setting}) has no master VM")
        return float(self.uptime_s[m][0])


# ---------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------


def _lines(path: Path):
    return text_lines(read_bytes(path), path)


def _header(lines, nos, want: list[str], source) -> None:
    got = [h.strip() for h in lines[0].split(",")]
    if got != want:
        raise DataFormatError(source, f"the header must be {','.join(want)!r}, got {lines[0].strip()!r}", nos[0])
    if len(lines) < 2:
        raise DataFormatError(source, "no rows after the header")


def _split(line: str, n: int, source, lineno) -> list[str]:
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != n:
        hint = "a field is missing or the line is cut off" if len(parts) < n else "extra fields"
        raise DataFormatError(source, f"expected {n} fields, got {len(parts)}: {hint}", lineno)
    return parts


def read_cmdare_speed(path: Path) -> SpeedTable:
    """Parse ``speed_data_supertable.csv`` or a 20-model ``0latency_*.csv`` (see
    :func:`load_cmdare_speed`): the columns are found by name in the header; the 0latency files'
    ``Model (temp)`` column gives :attr:`SpeedTable.model`, their other columns are ignored."""
    lines, nos = _lines(path)
    header = [h.strip() for h in lines[0].split(",")]
    missing = [h for h in _SPEED_HEADER if h not in header]
    if missing or len(set(header)) != len(header):
        raise DataFormatError(
            path, f"the header must hold the columns {','.join(_SPEED_HEADER)!r} once each, got {lines[0].strip()!r}",
            nos[0],
        )
    if len(lines) < 2:
        raise DataFormatError(path, "no rows after the header")
    take = [header.index(h) for h in _SPEED_HEADER]
    model_col = header.index(_MODEL_COL) if _MODEL_COL in header else None
    picked, models = [], []
    for ln, no in zip(lines[1:], nos[1:].tolist()):
        parts = _split(ln, len(header), path, no)
        picked.append(",".join(parts[j] for j in take))
        if model_col is not None:
            if not parts[model_col]:
                raise DataFormatError(path, f"{_MODEL_COL} must not be empty", no)
            models.append(parts[model_col])
    cols = [Column(name, low=0.0) for name in _SPEED_HEADER]
    for c in (0, 1, 5, 6, 7):  # TFLOPS, FLOPs, parameters, speed, step time must be > 0
        cols[c] = Column(_SPEED_HEADER[c], low=np.nextafter(0.0, 1.0), bounds_text="> 0")
    for c in (2, 3, 4):  # latency, tensor sizes: blank = not recorded (NaN)
        cols[c] = Column(_SPEED_HEADER[c], low=0.0, blank=-1.0, sentinel=-1.0)
    t = parse_table(picked, nos[1:], cols, path).astype(np.float64)
    t[:, 2:5] = np.where(t[:, 2:5] == -1.0, np.nan, t[:, 2:5])
    prod = t[:, 6] * t[:, 7]
    bad = np.abs(prod - 1.0) > _INVERSE_TOL
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise DataFormatError(
            path, f"Step Time (s) {t[k, 7]:g} is not 1 / Speed (steps/sec) = {1 / t[k, 6]:g}", nos[1:][k]
        )
    return SpeedTable(
        gpu_tflops=t[:, 0].copy(),
        model_flops=t[:, 1].copy(),
        latency_ms=t[:, 2].copy(),
        avg_tensor_mb=t[:, 3].copy(),
        max_tensor_mb=t[:, 4].copy(),
        num_params=t[:, 5].copy(),
        speed=t[:, 6].copy(),
        step_time_s=t[:, 7].copy(),
        gpu=_gpu_of_tflops(t[:, 0], path, nos[1:]).astype(str),
        line=nos[1:].astype(np.int64),
        source=str(path),
        model=np.array(models if models else [""] * t.shape[0], dtype=str),
    )


def read_cmdare_checkpoints(path: Path) -> CheckpointTable:
    """Parse ``whole_data.csv`` (or ``unaggregated_{training,test}.csv``, same columns)."""
    lines, nos = _lines(path)
    _header(lines, nos, _CKPT_HEADER, path)
    models, rest = [], []
    for ln, no in zip(lines[1:], nos[1:].tolist()):
        parts = _split(ln, len(_CKPT_HEADER), path, no)
        if not parts[0]:
            raise DataFormatError(path, "Model must not be empty", no)
        models.append(parts[0])
        rest.append(",".join(parts[1:]))
    cols = [Column(name, low=0.0) for name in _CKPT_HEADER[1:]]
    cols[2] = Column("Diff", low=-np.inf)  # duration - local: may be anything finite
    t = parse_table(rest, nos[1:], cols, path).astype(np.float64)
    for j, name in ((1, "Duration"), (3, "Checkpoint Size (MB)")):
        bad = t[:, j] <= 0
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise DataFormatError(path, f"{name} must be > 0, got {t[k, j]:g}", nos[1:][k])
    return CheckpointTable(
        model=np.array(models, dtype=str),
        local_s=t[:, 0].copy(),
        duration_s=t[:, 1].copy(),
        diff_s=t[:, 2].copy(),
        size_mb=t[:, 3].copy(),
        meta_mb=t[:, 4].copy(),
        weight_mb=t[:, 5].copy(),
        index_mb=t[:, 6].copy(),
        graph_mb=t[:, 7].copy(),
        line=nos[1:].astype(np.int64),
        source=str(path),
    )


def _check_increasing(values: np.ndarray, name: str, source, nos, strict: bool) -> None:
    d = np.diff(values)
    bad = d <= 0 if strict else d < 0
    if bad.any():
        k = int(np.flatnonzero(bad)[0]) + 1
        what = "increase" if strict else "go backwards"
        raise DataFormatError(
            source,
            f"{name} must {'strictly increase' if strict else 'not ' + what}: {values[k]:g} after {values[k - 1]:g}",
            nos[k],
        )


def read_cluster_speed_run(path: Path, gpu: str, ps: int, model: str, workers: int) -> ClusterSpeedRun:
    """Parse one ``run_.-tag-global_step_sec.csv`` TensorBoard export."""
    lines, nos = _lines(path)
    _header(lines, nos, _TB_HEADER, path)
    cols = [Column("Wall time", low=0.0), Column("Step", integer=True, low=0), Column("Value", low=0.0)]
    t = parse_table(lines[1:], nos[1:], cols, path).astype(np.float64)
    _check_increasing(t[:, 1], "Step", path, nos[1:], strict=True)
    _check_increasing(t[:, 0], "Wall time", path, nos[1:], strict=False)
    return ClusterSpeedRun(
        gpu=gpu,
        ps=ps,
        model=model,
        workers=workers,
        wall_s=t[:, 0].copy(),
        step=t[:, 1].astype(np.int64),
        steps_per_s=t[:, 2].copy(),
        line=nos[1:].astype(np.int64),
        source=str(path),
    )


def read_cmdare_cluster_speed(folder: Path) -> list[ClusterSpeedRun]:
    """Parse a ``speed_and_cluster_size`` folder (see :func:`load_cmdare_cluster_speed`)."""
    folder = Path(folder)
    runs = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir() and p.name in _CLUSTER_FOLDERS):
        gpu, ps = _CLUSTER_FOLDERS[sub.name]
        for run_dir in sorted(p for p in sub.iterdir() if p.is_dir()):
            m = _CLUSTER_RUN.fullmatch(run_dir.name)
            if not m:
                raise DataFormatError(
                    run_dir, "not a run folder name '<model><gpu>[ps2]worker<N>' (model res15|res32|shakesmall|shakebig)"
                )
            model = "shakebig" if m.group(1) in ("shakebig", "shakesbig") else m.group(1)
            if m.group(2).lstrip("kp") != gpu.lstrip("kp") or (m.group(3) is not None) != (ps == 2):
                raise DataFormatError(run_dir, f"the run's name does not match its folder {sub.name!r} (gpu {gpu}, ps {ps})")
            workers = int(m.group(4))
            if not 1 <= workers <= 64:
                raise DataFormatError(run_dir, f"the number of workers must be in [1, 64], got {workers}")
            f = run_dir / _TB_FILE
            if not f.is_file():
                f = run_dir / (_TB_FILE + ".gz")
            if not f.is_file():
                raise FileNotFoundError(f"{run_dir}: no {_TB_FILE}[.gz]")
            runs.append(read_cluster_speed_run(f, gpu, ps, model, workers))
    if not runs:
        raise FileNotFoundError(f"{folder}: no {{k80,p100,p100ps2}}/<model><gpu>worker<N>/{_TB_FILE} runs")
    runs.sort(key=lambda r: (r.gpu, r.ps, CMDARE_MODELS.index(r.model), r.workers))
    keys = [(r.gpu, r.ps, r.model, r.workers) for r in runs]
    dup = [k for k in set(keys) if keys.count(k) > 1]
    if dup:
        raise DataFormatError(folder, f"two runs for the same (gpu, ps, model, workers): {sorted(dup)}")
    return runs


def read_cmdare_step_log(path: Path, model: str, gpu: str) -> StepLog:
    """Parse one ``speed_data_base/<model><gpu>/data.csv``: ``Wall time,Step,Value,Step Time`` rows,
    a step-time-less first row or two (warm-up) and two summary rows (blank wall time and step)."""
    lines, nos = _lines(path)
    _header(lines, nos, _LOG_HEADER, path)
    keep, keep_nos = [], []
    for ln, no in zip(lines[1:], nos[1:].tolist()):
        parts = _split(ln, 4, path, no)
        if not parts[0] and not parts[1]:
            continue  # the source's summary rows (mean, std)
        if not parts[3]:
            continue  # warm-up rows without a step time (the first 100 steps)
        keep.append(",".join(parts))
        keep_nos.append(no)
    if not keep:
        raise DataFormatError(path, "no rows with a step time")
    keep_nos = np.asarray(keep_nos, dtype=np.int64)
    cols = [
        Column("Wall time", low=0.0),
        Column("Step", integer=True, low=0),
        Column("Value", low=np.nextafter(0.0, 1.0), bounds_text="> 0"),
        Column("Step Time", low=np.nextafter(0.0, 1.0), bounds_text="> 0"),
    ]
    t = parse_table(keep, keep_nos, cols, path).astype(np.float64)
    _check_increasing(t[:, 1], "Step", path, keep_nos, strict=True)
    return StepLog(
        model=model,
        gpu=gpu,
        step_time_s=t[:, 3].copy(),
        step=t[:, 1].astype(np.int64),
        steps_per_s=t[:, 2].copy(),
        wall_s=t[:, 0].copy(),
        line=keep_nos,
        source=str(path),
    )


def read_cmdare_step_logs(folder: Path) -> list[StepLog]:
    """Parse a ``speed_data_base`` folder (see :func:`load_cmdare_step_logs`)."""
    folder = Path(folder)
    logs = []
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        m = _LOG_DIR.fullmatch(sub.name)
        if not m:
            continue
        f = sub / "data.csv"
        if not f.is_file():
            f = sub / "data.csv.gz"
        if not f.is_file():
            raise FileNotFoundError(f"{sub}: no data.csv[.gz]")
        logs.append(read_cmdare_step_log(f, m.group(1), m.group(2)))
    if not logs:
        raise FileNotFoundError(f"{folder}: no <model><gpu>/data.csv step logs")
    logs.sort(key=lambda s: (CMDARE_MODELS.index(s.model), list(CMDARE_GPU_TFLOPS).index(s.gpu)))
    return logs


def read_gce_training_vms(path: Path, setting: str) -> list[TrainingRun]:
    """Parse one ``vm_data.csv`` into its runs (file order of each run's first VM)."""
    lines, nos = _lines(path)
    _header(lines, nos, _VM_HEADER, path)
    groups: dict[tuple[str, str], list] = {}
    for ln, no in zip(lines[1:], nos[1:].tolist()):
        name, up, status = _split(ln, 3, path, no)
        m = _VM_NAME.fullmatch(name)
        if not m:
            raise DataFormatError(
                path, f"VM_name must be '[prefix-]<zone>-run<N>-master|worker-<K>', got {name!r}", no
            )
        try:
            u = float(up)
        except ValueError:
            raise DataFormatError(path, f"Uptime must be a number of seconds, got {up!r}", no) from None
        if not (np.isfinite(u) and u >= 0):
            raise DataFormatError(path, f"Uptime must be a finite number >= 0, got {up!r}", no)
        if status.lower() not in _VM_STATUSES:
            raise DataFormatError(
                path, f"Revoked must be one of {['Job completed', 'Revoked', 'Manually stopped due to revoked master']}"
                f" (any case), got {status!r}", no,
            )
        zone, run, role = m.group(1), m.group(2), m.group(3)
        groups.setdefault((zone, run), []).append((name, "master" if role == "master" else "worker", u, status, no))
    out = []
    for (zone, run), rows in groups.items():
        names = [r[0] for r in rows]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise DataFormatError(path, f"VM {dup!r} is listed twice", rows[[r[0] for r in rows].index(dup)][4])
        status = np.array([r[3] for r in rows], dtype=str)
        out.append(
            TrainingRun(
                setting=setting,
                run=f"{zone}-{run}",
                zone=zone,
                vm=np.array(names, dtype=str),
                role=np.array([r[1] for r in rows], dtype=str),
                uptime_s=np.array([r[2] for r in rows], dtype=np.float64),
                status=status,
                revoked=np.char.lower(status) != "job completed",
                line=np.array([r[4] for r in rows], dtype=np.int64),
                source=str(path),
            )
        )
    return out


# ---------------------------------------------------------------------------
# Public loaders
# ---------------------------------------------------------------------------


def _locate_dir(root, name: str, ok, what: str, base: str = "cmdare") -> Path:
    """The first of ``root``, ``root/name``, ``root/<base>/name``, ``root/transient/<base>/name``
    that is a folder for which ``ok(folder)`` holds."""
    r = check_path("root", root)
    if not r.exists():
        raise FileNotFoundError(f"root: {r} does not exist")
    for folder in (r, r / name, r / base / name, r / "transient" / base / name):
        if folder.is_dir() and ok(folder):
            return folder
    raise FileNotFoundError(f"root: no {what} in or below {r}")


@functools.lru_cache(maxsize=2)
def _embedded_speed(dataset: str) -> SpeedTable:
    folder = _EMBEDDED / "cmdare" / "speed_data"
    if dataset == "supertable":
        return read_cmdare_speed(folder / "speed_data_supertable.csv")
    return SpeedTable.concat([read_cmdare_speed(folder / f) for f in SPEED_20_FILES])


def load_cmdare_speed(path: str | os.PathLike | None = None, *, dataset: str = "supertable") -> SpeedTable:
    """CM-DARE's step-time measurements (Sec III-B, Fig 3, Table II).

    Args:
      path: ``None`` for the embedded copy; else a file (plain or gzip) in either format, or a
        folder holding the ``dataset``'s files (directly, in ``speed_data/``,
        ``cmdare/speed_data/`` or ``transient/cmdare/speed_data/``).
      dataset: ``"supertable"`` - ``speed_data_supertable.csv``, 208 rows: the four
        Tensor2Tensor models (ResNet-15/32, Shake Shake small/big; 4.9 to 183 MFLOPs as the file
        writes them) on K80 and P100, each at 0.3 ms and at 30.3 ms of network latency, 13
        measurements per (model, GPU, latency). (``../shared``'s README says 207 rows; the file
        holds 208 data lines.) ``"models20"`` - :data:`SPEED_20_FILES`, 520 rows: the twenty CNNs of
        Sec III-A (the 4 models and 16 custom variants; 0.63 to 22.9 GFLOPs as written) on K80 and P100 at 0.3
        ms, 13 measurements each: the data of Table II (K80 mean step time 0.498 s; the paper's
        "average step time ... is 0.48 seconds").

    Raises:
      DataFormatError: a malformed file (names the file and line); FileNotFoundError;
      ValueError: an unknown ``dataset``.
    """
    if dataset not in ("supertable", "models20"):
        raise ValueError(f"dataset must be 'supertable' or 'models20', got {dataset!r}")
    if path is None:
        return _embedded_speed(dataset)
    p = check_path("path", path)
    if p.is_file():
        return read_cmdare_speed(p)
    names = ("speed_data_supertable.csv",) if dataset == "supertable" else SPEED_20_FILES
    found = []
    for name in names:
        found.append(_locate_file(p, (name, f"speed_data/{name}", f"cmdare/speed_data/{name}",
                                      f"transient/cmdare/speed_data/{name}"), name))
    tables = [read_cmdare_speed(f) for f in found]
    return tables[0] if len(tables) == 1 else SpeedTable.concat(tables)


@functools.lru_cache(maxsize=1)
def _embedded_checkpoints() -> CheckpointTable:
    return read_cmdare_checkpoints(_EMBEDDED / "cmdare" / "checkpoint" / "whole_data.csv")


def load_cmdare_checkpoints(path: str | os.PathLike | None = None) -> CheckpointTable:
    """CM-DARE's checkpoint measurements (Sec IV-B/C, Fig 5, Table IV): ``whole_data.csv``, 100
    checkpoints (20 CNNs x 5) of a K80 chief worker to same-region storage.

    Args:
      path: ``None`` for the embedded copy; else a file with ``whole_data.csv``'s columns (also
        ``unaggregated_training.csv``/``unaggregated_test.csv``, the authors' 80/20 split) or a
        folder holding ``whole_data.csv`` (directly, in ``checkpoint/``, ``cmdare/checkpoint/`` or
        ``transient/cmdare/checkpoint/``).

    Raises:
      DataFormatError: a malformed file (names the file and line); FileNotFoundError.
    """
    if path is None:
        return _embedded_checkpoints()
    name = "whole_data.csv"
    return read_cmdare_checkpoints(
        _locate_file(path, (name, f"checkpoint/{name}", f"cmdare/checkpoint/{name}",
                            f"transient/cmdare/checkpoint/{name}"), name)
    )


@functools.lru_cache(maxsize=1)
def _embedded_cluster_speed() -> tuple[ClusterSpeedRun, ...]:
    return tuple(read_cmdare_cluster_speed(_EMBEDDED / "cmdare" / "speed_and_cluster_size"))


def load_cmdare_cluster_speed(root: str | os.PathLike | None = None) -> list[ClusterSpeedRun]:
    """CM-DARE's cluster-size runs (Sec III-C/D, Table III, Fig 4; Sec VI-B, Fig 12).

    Args:
      root: ``None`` for the embedded copy; else the ``speed_and_cluster_size`` folder or a folder
        above it (``cmdare/``, ``transient/``).

    Returns:
      ``list[ClusterSpeedRun]``, sorted by (gpu, ps, model in :data:`CMDARE_MODELS` order, workers):
      96 runs = {K80 1 PS, P100 1 PS, P100 2 PS} x 4 models x 1..8 workers, 37-141 points each.

    Raises:
      DataFormatError: a malformed file or run folder name; FileNotFoundError.
    """
    if root is None:
        return list(_embedded_cluster_speed())
    folder = _locate_dir(
        root, "speed_and_cluster_size",
        lambda d: any(p.is_dir() and p.name in _CLUSTER_FOLDERS for p in d.iterdir()),
        "speed_and_cluster_size folder ({k80,p100,p100ps2}/)",
    )
    return read_cmdare_cluster_speed(folder)


@functools.lru_cache(maxsize=1)
def _embedded_step_logs() -> tuple[StepLog, ...]:
    return tuple(read_cmdare_step_logs(_EMBEDDED / "cmdare" / "speed_data_base"))


def load_cmdare_step_logs(root: str | os.PathLike | None = None) -> list[StepLog]:
    """CM-DARE's single-worker step-time logs (Table I, Fig 2): 12 :class:`StepLog` (4 models x
    K80/P100/V100), sorted by model then GPU; 38 points of 100 steps each after the warm-up (steps 201-3901).

    ``root``: ``None`` for the embedded copy; else the ``speed_data_base`` folder or a folder above
    it (``cmdare/``, ``transient/``).

    Raises:
      DataFormatError: a malformed file; FileNotFoundError.
    """
    if root is None:
        return list(_embedded_step_logs())
    folder = _locate_dir(
        root, "speed_data_base",
        lambda d: any(p.is_dir() and _LOG_DIR.fullmatch(p.name) for p in d.iterdir()),
        "speed_data_base folder (<model><gpu>/data.csv)",
    )
    return read_cmdare_step_logs(folder)


def _read_training(folder: Path) -> list[TrainingRun]:
    out = []
    for setting, sub in _TRAINING_SETTINGS.items():
        f = folder / sub / "vm_data.csv"
        if not f.is_file():
            f = folder / sub / "vm_data.csv.gz"
        if f.is_file():
            out.extend(read_gce_training_vms(f, setting))
    if not out:
        raise FileNotFoundError(f"{folder}: no {{k80_spot/4-spot,k80_spot/8-spot,p100_v100_spot/v100}}/vm_data.csv")
    return out


@functools.lru_cache(maxsize=1)
def _embedded_training() -> tuple[TrainingRun, ...]:
    return tuple(_read_training(_EMBEDDED / "gce-preemptible" / "training"))


def load_gce_training_runs(root: str | os.PathLike | None = None) -> list[TrainingRun]:
    """Real distributed training runs on GCE preemptible GPU servers (``cake-lab/
    transient-deep-learning``, ``data/training/``): the VMs of each run, their uptimes and whether
    each was revoked - the measured runs Eq 4-5 (Sec VI-A) are checked against.

    Args:
      root: ``None`` for the embedded copy; else the ``training`` folder or a folder above it
        (``gce-preemptible/``, ``transient/``).

    Returns:
      ``list[TrainingRun]``, in file order: ``"k80-4"`` (32 runs of 4 VMs: a master and 3
      workers), ``"k80-8"`` (32 runs of 8 VMs), ``"v100"`` (43 runs, the master VM only); 57 of
      the 420 VMs are not "job completed".

    Raises:
      DataFormatError: a malformed file (names the file and line); FileNotFoundError.
    """
    if root is None:
        return list(_embedded_training())
    folder = _locate_dir(
        root, "training", lambda d: any((d / s).is_dir() for s in ("k80_spot", "p100_v100_spot")),
        "training folder (k80_spot/, p100_v100_spot/)", base="gce-preemptible",
    )
    return _read_training(folder)
