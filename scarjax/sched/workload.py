"""Workloads sampled from the Microsoft Philly trace at a given job load (thesis Sec 3.5.3).

The Pollux artifact (``petuum/adaptdl``, branch ``osdi21-artifact``, ``simulator/workload.py``,
cited as ``workload.py``; configurations from ``applications.py`` ``get_configurations``)
builds each of its workloads from the Philly trace (Jeon et al., ATC'19) as follows, and
:func:`sample_workload` does the same, draw for draw:

1. Keep the trace's jobs that ran at least 60 s and used less than 1000 GPU-hours; shift
   every submission time back by ``start_s`` seconds (the artifact's ``start_hour`` 2, so
   7200 s) and keep the jobs submitted in the first ``duration_s`` seconds of *any* day (the
   time of day of the shifted time; the artifact's 8 hours, 28800 s).
2. Draw ``num_jobs`` of them without replacement (``pandas.DataFrame.sample`` with a
   ``numpy.random.RandomState`` seeded by ``random.Random(seed).randint(0, 2**32)``); a job's
   submission time in the workload is its shifted time of day (seconds, ``< duration_s``).
3. Its **application by size category** (GPU time in the trace): ``< 1`` GPU-hour:
   CIFAR-10 or NCF (a fair coin of ``random.Random(seed)``), ``1-10`` GPU-hours: DeepSpeech2
   (half of them, by a second generator ``random.Random(seed + 3)``, turned into BERT),
   ``10-100``: YOLOv3, ``>= 100``: ImageNet.
4. The user's **configuration** (GPUs and total batch size; used by the non-adaptive
   baselines Tiresias and Optimus, Sec 3.5.1 "+TunedJobs") is drawn uniformly from
   :func:`app_configurations`: the GPU counts (1, 2, 4, ..., 48, packed 4 per node) whose best
   validated batch size reaches 50-80% of linear scaling over one GPU and completes within
   12 hours, each with that best batch size.
5. Sort by submission time and name the jobs ``<application>-<index>``.

The artifact's job load 1.0 is 160 jobs in 8 hours (20 jobs/h, its ``workloads/``); load
``L`` is ``round(160 L)`` jobs in the same 8 hours (``workloads-0.5`` ... ``workloads-2.0``
hold 80, 240, 320 jobs; Fig 3.13 left). With the same trace the sample is the artifact's
exactly (``tests/sched/test_workload.py`` regenerates the embedded workloads); everything is
deterministic per ``key``. ``seed`` above is the artifact's ``--seed``: an int ``key`` is that
seed itself (``key=1`` at load 1 is the artifact's ``workload-1``); a JAX PRNG key maps to the
seed ``key_rng(key).integers(0, 2**31)`` (:func:`scarjax.sched.simulator.key_rng`, the one rule
from a key to NumPy draws).
"""

from __future__ import annotations

import math
import os
import random
from pathlib import Path
from typing import Sequence

import numpy as np

from scarjax import validate as va
from scarjax.data.pollux_sim import APPLICATIONS, PhillyTrace, Workload, load_philly
from scarjax.sched.apps import AppModel, AppSet, _embedded_model, app_model
from scarjax.sched.simulator import key_label, key_rng

__all__ = [
    "BASE_JOBS",
    "BASE_DURATION_S",
    "SIZE_CATEGORIES",
    "app_configurations",
    "job_load",
    "size_category",
    "sample_workload",
    "subset",
    "write_workload",
]

#: Jobs of the artifact's load-1.0 workloads and the seconds they span (8 hours: 20 jobs per hour).
BASE_JOBS = 160
BASE_DURATION_S = 8 * 3600

#: Size categories of ``workload.py`` by the trace job's GPU time (GPU-hours, upper bound
#: exclusive) and the applications they map to.
SIZE_CATEGORIES = (
    ("small", 1.0, ("cifar10", "ncf")),
    ("medium", 10.0, ("deepspeech2", "bert")),
    ("large", 100.0, ("yolov3",)),
    ("xlarge", 1000.0, ("imagenet",)),
)

_REPLICAS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48)


def size_category(gpu_time_s) -> np.ndarray:
    """Index into :data:`SIZE_CATEGORIES` of each GPU time (seconds): 0 below 1 GPU-hour,
    1 below 10, 2 below 100, 3 otherwise (``workload.py``)."""
    g = np.asarray(gpu_time_s, dtype=np.float64)
    if not np.all(np.isfinite(g)) or np.any(g < 0):
        raise ValueError("gpu_time_s must be finite and >= 0")
    return np.searchsorted(np.array([1.0, 10.0, 100.0]) * 3600.0, g, side="right").astype(np.int64)


def app_configurations(app, lo_util: float = 0.5, hi_util: float = 0.8, *, max_jct_s: float = 12 * 3600.0,
                       gpus_per_node: int = 4) -> list[tuple[int, int, float]]:
    """The "tuned" user configurations of an application (``applications.py``
    ``get_configurations``; thesis Sec 3.5.1, Tiresias/Optimus "+TunedJobs").

    For each GPU count ``K`` in (1, 2, 4, 6, 8, 12, 16, 24, 32, 48) (stopping once
    ``K * min_local_bsz`` exceeds the largest batch size), packed ``gpus_per_node`` per node,
    take the validated total batch size with the shortest completion time (iterations to the
    last epoch of that batch size's training curve times the measured step time, with
    gradient accumulation above the per-GPU cap). Keep ``K`` when that time is under
    ``max_jct_s`` and the scaling efficiency ``T_1 / (K T_K)`` lies strictly between
    ``lo_util`` and ``hi_util``; if none qualifies, the single-GPU configuration.

    Args:
      app: a :class:`~scarjax.sched.apps.AppModel` or an application name (embedded traces).

    Returns:
      ``[(num_replicas, batch_size, jct_s), ...]`` in increasing ``num_replicas``.
    """
    if isinstance(app, str):
        if app not in APPLICATIONS:
            raise ValueError(f"app must be one of {APPLICATIONS}, got {app!r}")
        app = _embedded_model(app)
    if not isinstance(app, AppModel):
        raise TypeError(f"app must be an AppModel or an application name, got {type(app).__name__}")
    lo = float(va.check_real("lo_util", lo_util, lo=0.0, scalar=True))
    hi = float(va.check_real("hi_util", hi_util, lo=0.0, scalar=True))
    va.check_real("max_jct_s", max_jct_s, lo=0.0, lo_open=True, allow_inf=True, scalar=True)
    if not lo < hi:
        raise ValueError(f"lo_util must be < hi_util, got {lo} and {hi}")
    gpn = va.check_int("gpus_per_node", gpus_per_node, lo=1)
    key = ("configs", lo, hi, float(max_jct_s), gpn)
    if key in app._cache:
        return list(app._cache[key])
    epoch = app.max_epochs - 1
    out: list[tuple[int, int, float]] = []
    base_jct = base_bsz = None
    for k in _REPLICAS:
        if k * app.min_local_bsz > app.max_batch_size:
            break
        placement = [gpn] * (k // gpn) + ([k % gpn] if k % gpn else [])
        best_jct = best_bsz = None
        for b, bsz in enumerate(app.batch_sizes.tolist()):
            local = math.ceil(bsz / k - 1e-8)
            if local < app.min_local_bsz:
                continue
            accum = math.ceil(local / app.max_local_bsz - 1e-8) - 1
            atomic = math.ceil(local / (accum + 1) - 1e-8)
            step, sync = app.measured_times(placement, atomic)
            step = float(step) + accum * (float(step) - float(sync))
            jct = float(app.iteration[b, epoch]) * step
            if best_jct is None or jct < best_jct:
                best_jct, best_bsz = jct, int(bsz)
        if k == 1:
            base_jct, base_bsz = best_jct, best_bsz
        elif best_jct is not None and best_jct < max_jct_s and lo < base_jct / best_jct / k < hi:
            out.append((k, best_bsz, best_jct))
    if not out:
        out.append((1, base_bsz, base_jct))
    app._cache[key] = tuple(out)
    return list(out)


def _eligible(trace: PhillyTrace, start_s: int, duration_s: int):
    """Rows of ``trace`` the artifact samples from (step 1) and their shifted time of day
    (whole seconds, so ``tod < duration_s`` is the artifact's ``tod // 3600 < duration_hours``
    for a whole number of hours)."""
    keep = (trace.duration >= 60) & (trace.gpu_time < 1000 * 3600)
    shifted = trace.timestamp - np.timedelta64(int(start_s), "s")
    tod = (shifted - shifted.astype("datetime64[D]")).astype("timedelta64[s]").astype(np.int64)
    keep &= tod < duration_s
    idx = np.flatnonzero(keep)
    return idx, tod[idx]


def sample_workload(load: float = 1.0, *, key=0, num_jobs: int | None = None, start_s: int = 2 * 3600,
                    duration_s: int = BASE_DURATION_S, trace: PhillyTrace | str | os.PathLike | None = None,
                    apps=None) -> Workload:
    """A workload sampled from the Philly trace the way the artifact does (module docstring).

    Args:
      load: relative job load: ``round(160 * load * duration_s / 28800)`` jobs
        (``20 * load`` jobs per hour; Fig 3.13 uses 0.5, 1, 1.5, 2). Ignored when
        ``num_jobs`` is given.
      key: an int seed ``>= 0``, the artifact's ``--seed``, or a JAX PRNG key (module
        docstring; deterministic per key).
      num_jobs: the number of jobs instead of ``load``.
      start_s, duration_s: the window of the day in whole seconds (``start_s`` in
        ``[0, 86399]``, ``duration_s`` in ``[1, 86400]``; the artifact's 2 h and 8 h: 7200 and
        28800).
      trace: a :class:`~scarjax.data.pollux_sim.PhillyTrace`, or a path to one (``None``:
        the embedded trace).
      apps: ``{name: AppModel}`` or an :class:`~scarjax.sched.apps.AppSet` for the
        configurations (default: the embedded applications).

    Returns:
      A :class:`~scarjax.data.pollux_sim.Workload` sorted by submission time.
    """
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        seed = va.check_int("key", key, lo=0)
    else:
        seed = int(key_rng(key).integers(0, 2**31))
    dur = va.check_int("duration_s", duration_s, lo=1, hi=86400)
    start = va.check_int("start_s", start_s, lo=0, hi=86399)
    if num_jobs is None:
        load = float(va.check_real("load", load, lo=0.0, lo_open=True, scalar=True))
        n = int(round(BASE_JOBS * load * dur / BASE_DURATION_S))
        if n < 1:
            raise ValueError(f"load {load} gives no jobs in {dur} s")
    else:
        n = va.check_int("num_jobs", num_jobs, lo=1)
    if trace is None or isinstance(trace, (str, os.PathLike)):
        trace = load_philly(trace)
    elif not isinstance(trace, PhillyTrace):
        raise TypeError(f"trace must be a PhillyTrace, a path or None, got {type(trace).__name__}")
    models = _models(apps)
    idx, tod = _eligible(trace, start, dur)
    if n > idx.size:
        raise ValueError(f"num_jobs {n} exceeds the {idx.size} eligible jobs of the trace")
    rng, rng2 = random.Random(seed), random.Random(seed + 3)
    state = rng.randint(0, 1 << 32)
    if state >= 1 << 32:  # numpy (and pandas) reject it; the artifact fails on this seed too
        raise ValueError(f"key: seed {seed} draws the out-of-range sampling state 2**32 (as the artifact)")
    pick = np.random.RandomState(state).permutation(idx.size)[:n]  # RandomState.choice(replace=False)
    records = []
    for p in pick.tolist():
        row = idx[p]
        gpu_time = float(trace.gpu_time[row])
        cat = int(size_category(gpu_time))
        app = rng.choice(["cifar10", "ncf"]) if cat == 0 else SIZE_CATEGORIES[cat][2][0]
        replicas, bsz, _ = rng.choice(app_configurations(models[app]))
        if app == "deepspeech2" and rng2.randint(0, 1):
            app = "bert"
            replicas, bsz, _ = rng2.choice(app_configurations(models[app]))
        records.append((int(tod[p]), app, int(replicas), int(bsz)))
    records.sort(key=lambda r: r[0])  # stable, as Python's sort in the artifact
    names = [f"{r[1]}-{i}" for i, r in enumerate(records)]
    src = f"sample_workload(load={load if num_jobs is None else None}, key={key_label(key)}, num_jobs={n}, " \
          f"start_s={start}, duration_s={dur}) of {trace.source}"
    return Workload(name=np.array(names, dtype=str), time=np.array([r[0] for r in records], np.float64),
                    application=np.array([r[1] for r in records], dtype=str),
                    num_replicas=np.array([r[2] for r in records], np.int64),
                    batch_size=np.array([r[3] for r in records], np.int64), source=src)


def _models(apps) -> dict:
    if apps is None:
        return {a: _embedded_model(a) for a in APPLICATIONS}
    if isinstance(apps, AppSet):
        models = {m.name: m for m in apps.models}
    elif isinstance(apps, dict):
        models = dict(apps)
    else:
        raise TypeError(f"apps must be an AppSet, a dict of AppModel or None, got {type(apps).__name__}")
    missing = sorted({"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"} - set(models))
    if missing:
        raise ValueError(f"apps lacks the applications {missing} that the sampler assigns")
    return models


def job_load(workload: Workload, duration_s: float = BASE_DURATION_S) -> float:
    """Relative job load of ``workload``: its jobs per second over ``duration_s`` divided by
    the artifact's load-1.0 rate (160 jobs in 28800 s, 20 jobs per hour)."""
    d = float(va.check_real("duration_s", duration_s, lo=0.0, lo_open=True, scalar=True))
    return len(workload) / d / (BASE_JOBS / BASE_DURATION_S)


def subset(workload: Workload, first: int) -> Workload:
    """The ``first`` jobs of ``workload`` in submission order (quick experiments)."""
    k = va.check_int("first", first, lo=1)
    order = np.argsort(workload.time, kind="stable")[:k]
    return Workload(name=workload.name[order], time=workload.time[order],
                    application=workload.application[order], num_replicas=workload.num_replicas[order],
                    batch_size=workload.batch_size[order], source=f"first {k} jobs of {workload.source}")


def write_workload(workload: Workload, path: str | os.PathLike) -> Path:
    """Write ``workload`` in the artifact's CSV format (``name,time,application,num_replicas,
    batch_size``; readable by :func:`scarjax.data.load_workload` and ``scarjax cluster-sim``)."""
    path = Path(path)
    lines = ["name,time,application,num_replicas,batch_size"]
    for n, t, a, k, b in zip(workload.name.tolist(), workload.time.tolist(), workload.application.tolist(),
                             workload.num_replicas.tolist(), workload.batch_size.tolist()):
        lines.append(f"{n},{int(t) if float(t).is_integer() else t},{a},{k},{b}")
    path.write_text("\n".join(lines) + "\n")
    return path
