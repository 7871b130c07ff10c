"""The six applications of the Pollux cluster simulator: goodput models built from their traces.

Each application (BERT, CIFAR-10, DeepSpeech2, ImageNet, NCF, YOLOv3; thesis Table 3.1) has
measured step/sync times per GPU placement and per-GPU batch size, and training curves at
several total batch sizes with gradient statistics (:func:`scarjax.data.load_app_traces`).
This module turns them into what a simulator and a scheduler need, following the Pollux
artifact (``petuum/adaptdl``, branch ``osdi21-artifact``, ``simulator/``; cited below as
``applications.py``, ``goodput.py``, ``speedup.py``, ``simulator.py``):

* **Progress and completion** (``applications.py`` ``get_progress``/``get_completion_epoch``,
  ``simulator.py`` ``Job.step``). A job's progress counts iterations at the application's
  initial batch size ``M0`` (the smallest validated batch size): an iteration at total batch
  ``M`` adds ``gain = (M / M0) * EFFICIENCY(M)`` (Eq 3.3). Statistical epoch ``e`` ends at
  ``epoch_progress[e] = min_b progress_b[e]`` (the least progress any validated run had
  after ``e + 1`` epochs); the job is complete when its progress reaches
  ``target_progress = epoch_progress[max_epochs - 1]``, ``max_epochs`` being the artifact's
  per-application setting (BERT 2, CIFAR-10 100, DeepSpeech2 80, ImageNet 90, NCF 10,
  YOLOv3 50; no application has a target metric).
* **Statistical efficiency** (``goodput.py`` ``GoodputFunction.efficiency``, ``simulator.py``
  ``Job.step``): the gradient statistics of epoch ``e`` at batch ``M`` are ``grad_sqr`` and
  ``grad_var`` interpolated *separately and linearly in the batch size* between the two
  nearest validated batch sizes (``applications.py`` ``get_grad_stats``); the PGNS is
  ``phi = M0 * grad_var / grad_sqr`` and ``EFFICIENCY(M) = (phi + M0) / (phi + M)``
  (Eq 3.3, :func:`scarjax.pollux.efficiency`). ``grad_sqr = 0`` gives ``phi = inf``
  (efficiency 1), ``grad_var = 0`` gives ``phi = 0``.
* **Throughput, measured** (``applications.py`` ``get_throughput``; thesis Sec 3.5.3
  "Simulator construction"): the simulated (true) step and sync times of a placement and
  per-GPU batch size ``m``: the placement's own measurements interpolated linearly in ``m``
  when the placement was measured, else a 3-D linear interpolation over ``(nodes, replicas,
  m)`` of the per-``(nodes, replicas, m)`` means of the placements plus the scalability
  measurements (nodes capped at 16). With ``s`` accumulation steps an iteration takes
  ``step + s * (step - sync)`` (Eq 3.8 with ``T_grad = step - sync``).
* **Throughput, modelled**: Eq 3.5-3.8 fitted per application with
  :func:`scarjax.pollux.fit_throughput` to all its measured step times (placements and
  scalability). The artifact's simulated jobs fit the model online to what they have run
  (``simulator.py`` ``Job.update_params``); the per-application fit here is the model with
  all measurements known. Its fit error per application is :attr:`AppModel.fit_error`
  (mean relative error 6-10%, as the thesis reports, Sec 3.4.1: "at most 10%").
* **Goodput and batch size**: ``GOODPUT = THROUGHPUT * EFFICIENCY`` (Eq 3.1); the
  goodput-optimal per-GPU batch size and accumulation steps per allocation come from
  :func:`scarjax.pollux.optimize_batch_size` (Eq 3.10, exact on the integer grid; the
  artifact samples 50 total batch sizes, ``goodput.py`` ``optimize``) with the artifact's
  limits: ``M0 <= M <= max_batch_size`` (the largest validated batch size), ``m`` between the
  smallest and largest measured per-GPU batch size (YOLOv3: at most 8), and at least one
  accumulation step on a single GPU above ``M0``; :meth:`AppModel.speedup` is the artifact's
  ``SpeedupFunction`` (``speedup.py``): optimal goodput relative to one GPU.

Everything is NumPy float64, vectorised over array arguments (jobs or configurations), and
deterministic. :class:`AppSet` stacks the applications so that per-job quantities of jobs of
different applications are one gather (``app_ids``).

The fitted parameters of the embedded traces are stored (:data:`FITTED_PARAMS`, a fit takes
seconds); they are used when the traces' placements and scalability files are the embedded
ones (by sha256) and refitted otherwise or with ``refit=True``. ``tests/sched/test_apps.py``
refits and compares.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from scarjax import validate as va
from scarjax.data import read_bytes
from scarjax.data.pollux_sim import APPLICATIONS, AppTraces, embedded_dir, load_app_traces
from scarjax.pollux import ThroughputParams, fit_throughput, optimize_batch_size, optimize_batch_sizes

__all__ = [
    "ARTIFACT_SETTINGS",
    "FITTED_PARAMS",
    "AppModel",
    "AppSet",
    "FitError",
    "app_model",
    "canonical_placement",
    "fit_app_throughput",
    "load_apps",
    "throughput_fit_error",
]

#: Per-application settings of the artifact (``applications.py``, ``APPLICATIONS``): the
#: number of statistical epochs to completion and the per-GPU batch-size cap where it
#: differs from the largest measured one.
ARTIFACT_SETTINGS: dict[str, dict[str, int]] = {
    "bert": {"max_epochs": 2},
    "cifar10": {"max_epochs": 100},
    "deepspeech2": {"max_epochs": 80},
    "imagenet": {"max_epochs": 90},
    "ncf": {"max_epochs": 10},
    "yolov3": {"max_epochs": 50, "max_local_bsz": 8},
}

#: Eq 3.9 parameters fitted by :func:`fit_app_throughput` to the embedded traces
#: (``alpha_grad, beta_grad, alpha_sync_local, beta_sync_local, alpha_sync_node,
#: beta_sync_node, gamma``; seconds). Regenerate with
#: ``{a: tuple(fit_app_throughput(load_app_traces(a)).params) for a in APPLICATIONS}``.
FITTED_PARAMS: dict[str, tuple[float, ...]] = {}  # filled below

_MAX_SIM_NODES = 16  # applications.py get_throughput: num_nodes = min(num_nodes, 16)


class FitError(NamedTuple):
    """How well the fitted Eq 3.8 reproduces an application's measured step times.

    Relative errors are ``|T_pred - T_obs| / T_obs`` over all ``n_records`` measurements
    (placements and scalability, ``s = 0``); ``rmsle`` is the fit's objective.
    """

    rmsle: float
    mean_rel_error: float
    p90_rel_error: float
    max_rel_error: float
    mean_rel_error_placements: float
    mean_rel_error_scalability: float
    n_records: int


def _records(traces: AppTraces):
    p, s = traces.placements, traces.scalability
    n = np.concatenate([p.num_nodes, s.num_nodes]).astype(np.float64)
    k = np.concatenate([p.num_replicas, s.num_replicas]).astype(np.float64)
    m = np.concatenate([p.local_bsz, s.local_bsz]).astype(np.float64)
    t = np.concatenate([p.step_time, s.step_time])
    return n, k, m, t, len(p)


def fit_app_throughput(traces: AppTraces, *, gamma_starts: Sequence[float] = (1.0,)):
    """Fit Eq 3.5-3.8 to all of an application's measured step times.

    One record per measurement of ``placements.csv`` and ``scalability.csv``: ``(N, K, m,
    s = 0, T_iter = step_time)``, fitted by :func:`scarjax.pollux.fit_throughput` (RMSLE,
    L-BFGS-B, Sec 3.4.1).

    Returns:
      :class:`scarjax.pollux.FitResult`.
    """
    if not isinstance(traces, AppTraces):
        raise TypeError("traces must be an AppTraces (scarjax.data.load_app_traces), got "
                        f"{type(traces).__name__}")
    n, k, m, t, _ = _records(traces)
    return fit_throughput(n, k, m, np.zeros_like(m), t, gamma_starts=gamma_starts)


def _t_iter(params, nodes, replicas, m, s) -> np.ndarray:
    """Eq 3.8 in float64 NumPy (:func:`scarjax.pollux.t_iter`'s formula; parameters broadcast)."""
    a_g, b_g, a_l, b_l, a_n, b_n, gamma = (np.asarray(p, np.float64) for p in params)
    nodes, replicas = np.asarray(nodes), np.asarray(replicas)
    t_grad = a_g + b_g * np.asarray(m, np.float64)
    retro = np.maximum(replicas - 2, 0)
    t_sync = np.where(replicas <= 1, 0.0, np.where(nodes <= 1, a_l + b_l * retro, a_n + b_n * retro))
    hi, lo = np.maximum(t_grad, t_sync), np.minimum(t_grad, t_sync)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(hi > 0, lo / np.where(hi > 0, hi, 1.0), 0.0)
        overlap = hi * (1.0 + np.where(r > 0, r, 0.0) ** gamma) ** (1.0 / gamma)
    return np.asarray(s, np.float64) * t_grad + overlap


def throughput_fit_error(params, traces: AppTraces) -> FitError:
    """:class:`FitError` of Eq 3.8 with ``params`` against all of ``traces``' measured step times."""
    if not isinstance(traces, AppTraces):
        raise TypeError("traces must be an AppTraces (scarjax.data.load_app_traces), got "
                        f"{type(traces).__name__}")
    if len(params) != 7:
        raise ValueError(f"params must be the 7 values of Eq 3.9, got {params!r}")
    n, k, m, t, n_pl = _records(traces)
    pred = _t_iter(params, n, k, m, 0)
    rel = np.abs(pred - t) / t
    return FitError(
        rmsle=float(np.sqrt(np.mean(np.square(np.log(pred / t))))),
        mean_rel_error=float(rel.mean()),
        p90_rel_error=float(np.quantile(rel, 0.9)),
        max_rel_error=float(rel.max()),
        mean_rel_error_placements=float(rel[:n_pl].mean()),
        mean_rel_error_scalability=float(rel[n_pl:].mean()) if rel.size > n_pl else float("nan"),
        n_records=int(t.size),
    )


def canonical_placement(placement) -> str:
    """A placement as the artifact's key: per-node GPU counts without empty nodes, rotated to
    the lexicographically smallest rotation (``applications.py`` ``get_throughput``).

    ``placement``: a string of digits (``"22"``), an int (``22``) or a sequence of per-node
    counts (``(2, 0, 1)`` -> ``"12"``).

    >>> canonical_placement((2, 1)), canonical_placement("211"), canonical_placement([0, 4, 0, 4])
    ('12', '112', '44')
    """
    if isinstance(placement, (int, np.integer)) and not isinstance(placement, bool):
        placement = str(int(placement))
    if isinstance(placement, str):
        if not placement.isdigit():
            raise ValueError(f"placement must be a string of per-node GPU counts, got {placement!r}")
        counts = tuple(int(c) for c in placement)
    else:
        try:
            counts = tuple(int(c) for c in placement)
        except (TypeError, ValueError):
            raise TypeError(f"placement must be a digit string, an int or a sequence of per-node GPU counts, "
                            f"got {placement!r}") from None
        if any(c < 0 for c in counts):
            raise ValueError(f"placement must not have negative GPU counts, got {placement!r}")
    counts = tuple(c for c in counts if c)
    if not counts:
        raise ValueError(f"placement must use at least one GPU, got {placement!r}")
    best = min(counts[i:] + counts[:i] for i in range(len(counts)))
    if any(c > 9 for c in best):
        return ",".join(map(str, best))  # cannot be a measured placement (those are digit strings)
    return "".join(map(str, best))


@dataclass(frozen=True, eq=False)
class AppModel:
    """One application's goodput model (see the module docstring for every definition).

    Attributes:
      name: the application.
      traces: the :class:`~scarjax.data.pollux_sim.AppTraces` it was built from.
      init_batch_size: ``M0``, the smallest validated total batch size.
      max_batch_size: the largest validated total batch size (the upper limit of Sec 3.3.1).
      min_local_bsz, max_local_bsz: the per-GPU batch-size range.
      max_epochs: statistical epochs to completion.
      batch_sizes: ``int64[B]`` validated batch sizes.
      grad_sqr, grad_var, progress, iteration, metric: ``float64[B, max_epochs]`` the
        validation curves, rows by batch size.
      epoch_progress: ``float64[max_epochs]``: progress at the end of each statistical epoch.
      target_progress: progress at completion (``epoch_progress[-1]``).
      params: fitted :class:`scarjax.pollux.ThroughputParams`.
      fit_error: :class:`FitError` of ``params`` against the measured step times.
    """

    name: str
    traces: AppTraces
    init_batch_size: int
    max_batch_size: int
    min_local_bsz: int
    max_local_bsz: int
    max_epochs: int
    batch_sizes: np.ndarray
    grad_sqr: np.ndarray
    grad_var: np.ndarray
    progress: np.ndarray
    iteration: np.ndarray
    metric: np.ndarray
    epoch_progress: np.ndarray
    target_progress: float
    params: Any
    fit_error: FitError
    _cache: dict = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self):
        for v in (self.batch_sizes, self.grad_sqr, self.grad_var, self.progress, self.iteration, self.metric,
                  self.epoch_progress):
            v.flags.writeable = False

    # -- progress and statistical efficiency -------------------------------------------------

    def epoch(self, progress) -> np.ndarray:
        """Completed statistical epochs at ``progress`` (``simulator.py`` ``Job.epoch``):
        ``#{e : epoch_progress[e] <= progress}``; ``max_epochs`` means complete."""
        p = _real("progress", progress, lo=0.0)
        return np.searchsorted(self.epoch_progress, p, side="right").astype(np.int64)

    def grad_stats(self, batch_size, epoch) -> tuple[np.ndarray, np.ndarray]:
        """``(grad_sqr, grad_var)`` during ``epoch`` at total ``batch_size``: each interpolated
        linearly in the batch size between the nearest validated ones (``applications.py``
        ``get_grad_stats``). Batch sizes outside the validated range are clamped to it (the
        artifact asserts they are inside) and epochs to ``[0, max_epochs - 1]``."""
        m = _real("batch_size", batch_size, lo=0.0, lo_open=True)
        e = np.clip(np.asarray(epoch), 0, self.max_epochs - 1).astype(np.int64)
        m, e = np.broadcast_arrays(m, e)
        i, w = _bracket(self.batch_sizes, m)
        sqr = (1 - w) * self.grad_sqr[i, e] + w * self.grad_sqr[i + (w > 0), e]
        var = (1 - w) * self.grad_var[i, e] + w * self.grad_var[i + (w > 0), e]
        return sqr, var

    def pgns(self, batch_size, progress) -> np.ndarray:
        """The PGNS ``phi = M0 * grad_var / grad_sqr`` (``goodput.py``) of a job at ``progress``
        running at ``batch_size`` (its statistics come from the curves at that batch size)."""
        sqr, var = self.grad_stats(batch_size, self.epoch(progress))
        return _phi(sqr, var, self.init_batch_size)

    def efficiency(self, batch_size, progress=None, *, stats_batch_size=None, phi=None) -> np.ndarray:
        """Eq 3.3, ``(phi + M0) / (phi + M)`` at total ``batch_size`` ``M``.

        ``phi`` is given, or the PGNS at ``progress`` measured at ``stats_batch_size``
        (default: ``M`` itself, the simulated truth of ``simulator.py`` ``Job.step``; a
        scheduler predicting other batch sizes from a job's current statistics passes its
        current batch size or ``phi``, and then the efficiency is non-increasing in ``M``).
        Below ``M0`` it exceeds 1.
        """
        m = _real("batch_size", batch_size, lo=0.0, lo_open=True)
        phi = self._phi_arg(m, progress, stats_batch_size, phi)
        return _efficiency(m, phi, self.init_batch_size)

    def _phi_arg(self, m, progress, stats_batch_size, phi):
        if phi is not None:
            if progress is not None or stats_batch_size is not None:
                raise ValueError("give phi or progress (with stats_batch_size), not both")
            return _real("phi", phi, lo=0.0, allow_inf=True)
        if progress is None:
            raise ValueError("progress is needed (or phi)")
        return self.pgns(m if stats_batch_size is None else stats_batch_size, progress)

    def gain(self, batch_size, progress=None, *, stats_batch_size=None, phi=None) -> np.ndarray:
        """Progress per iteration at total ``batch_size``: ``(M / M0) * EFFICIENCY(M)``."""
        m = _real("batch_size", batch_size, lo=0.0, lo_open=True)
        eff = self.efficiency(m, progress, stats_batch_size=stats_batch_size, phi=phi)
        return m / self.init_batch_size * eff

    def split_batch_size(self, replicas, batch_size) -> tuple[np.ndarray, np.ndarray]:
        """``(atomic_bsz, accum_steps)`` running a fixed total ``batch_size`` on ``replicas``
        GPUs, as the artifact's non-adaptive jobs do (``simulator.py``
        ``Job.update_local_bsz``): ``local = ceil(M / K)``, ``s = ceil(local / max_local_bsz) - 1``
        (at least 1 on one GPU above ``M0``), ``atomic = ceil(local / (s + 1))``, then capped
        at ``floor(max_batch_size / (K (s + 1)))``."""
        k = _int("replicas", replicas, lo=1).astype(np.int64)
        m = _int("batch_size", batch_size, lo=1).astype(np.int64)
        return _split(k, m, self.init_batch_size, self.max_local_bsz, self.max_batch_size)

    # -- throughput -------------------------------------------------------------------------

    def model_step_time(self, nodes, replicas, atomic_bsz, accum_steps=0) -> np.ndarray:
        """Eq 3.8 with the fitted parameters: seconds per iteration of ``accum_steps``
        accumulation passes and one synchronised pass at per-GPU batch ``atomic_bsz``."""
        n, k = _alloc(nodes, replicas)
        m = _real("atomic_bsz", atomic_bsz, lo=0.0, lo_open=True)
        s = _int("accum_steps", accum_steps, lo=0)
        return _t_iter(self.params, n, k, m, s)

    def measured_times(self, placement, atomic_bsz) -> tuple[np.ndarray, np.ndarray]:
        """The simulated ``(step_time, sync_time)`` of ``placement`` at per-GPU batch
        ``atomic_bsz`` (``applications.py`` ``get_throughput``; module docstring).

        Args:
          placement: one placement (``"22"``, ``(2, 2)``) or a list of them.
          atomic_bsz: per-GPU batch size(s), broadcast against the placements.

        Raises:
          ValueError: a batch size outside the measured range of a measured placement, or a
            configuration outside the interpolation's convex hull (the artifact fails there too).
        """
        single = isinstance(placement, (str, int, np.integer)) or (
            len(placement) > 0 and not isinstance(placement[0], (str, Sequence, np.ndarray)))
        keys = [canonical_placement(placement)] if single else [canonical_placement(p) for p in placement]
        m = _real("atomic_bsz", atomic_bsz, lo=0.0, lo_open=True)
        keys_arr = np.array(keys, dtype=object).reshape(() if single else (len(keys),))
        keys_b, m_b = np.broadcast_arrays(keys_arr, m)
        flat_k, flat_m = keys_b.reshape(-1), m_b.reshape(-1).astype(np.float64)
        step = np.empty(flat_m.shape)
        sync = np.empty(flat_m.shape)
        table = self._placement_table()
        other = np.zeros(flat_m.shape, bool)
        for key in set(flat_k.tolist()):
            idx = np.flatnonzero(flat_k == key)
            if key in table:
                bsz, st, sy = table[key]
                q = flat_m[idx]
                bad = (q < bsz[0]) | (q > bsz[-1])
                if bad.any():
                    raise ValueError(f"atomic_bsz {q[bad][0]:g} is outside the measured range [{bsz[0]:g}, "
                                     f"{bsz[-1]:g}] of {self.name}'s placement {key!r}")
                step[idx] = np.interp(q, bsz, st)
                sync[idx] = np.interp(q, bsz, sy)
            else:
                other[idx] = True
        if other.any():
            counts = [tuple(int(c) for c in k.split(",")) if "," in k else tuple(int(c) for c in k)
                      for k in flat_k[other].tolist()]
            pts = np.stack([np.minimum([len(c) for c in counts], _MAX_SIM_NODES),
                            [sum(c) for c in counts], flat_m[other]], axis=1).astype(np.float64)
            vals = self._nd_interpolator()(pts)
            bad = ~np.isfinite(vals).all(axis=1)
            if bad.any():
                j = int(np.flatnonzero(bad)[0])
                raise ValueError(f"{self.name}: no measurements around nodes={pts[j, 0]:g}, "
                                 f"replicas={pts[j, 1]:g}, atomic_bsz={pts[j, 2]:g} (outside the convex hull "
                                 "of the traces)")
            step[other], sync[other] = vals[:, 0], vals[:, 1]
        return step.reshape(m_b.shape), sync.reshape(m_b.shape)

    def measured_step_time(self, placement, atomic_bsz, accum_steps=0) -> np.ndarray:
        """Simulated seconds per iteration: ``step + s * (step - sync)`` (``simulator.py``)."""
        step, sync = self.measured_times(placement, atomic_bsz)
        return step + _int("accum_steps", accum_steps, lo=0) * (step - sync)

    def _placement_table(self) -> dict:
        if "table" not in self._cache:
            pl = self.traces.placements
            table = {}
            for key in np.unique(pl.placement).tolist():
                idx = np.flatnonzero(pl.placement == key)
                idx = idx[np.argsort(pl.local_bsz[idx], kind="stable")]
                table[key] = (pl.local_bsz[idx].astype(np.float64), pl.step_time[idx], pl.sync_time[idx])
            self._cache["table"] = table
        return self._cache["table"]

    def _nd_interpolator(self):
        if "nd" not in self._cache:
            # scipy's submodules are slow to import and needed only here
            from scipy.interpolate import LinearNDInterpolator

            pl, sc = self.traces.placements, self.traces.scalability
            keys = np.stack([pl.num_nodes, pl.num_replicas, pl.local_bsz], axis=1)
            uniq, inv = np.unique(keys, axis=0, return_inverse=True)
            inv = inv.reshape(-1)
            cnt = np.bincount(inv, minlength=len(uniq)).astype(np.float64)
            step = np.bincount(inv, weights=pl.step_time, minlength=len(uniq)) / cnt
            sync = np.bincount(inv, weights=pl.sync_time, minlength=len(uniq)) / cnt
            pts = np.concatenate([uniq, np.stack([sc.num_nodes, sc.num_replicas, sc.local_bsz], axis=1)])
            vals = np.concatenate([np.stack([step, sync], 1), np.stack([sc.step_time, sc.sync_time], 1)])
            self._cache["nd"] = LinearNDInterpolator(pts.astype(np.float64), vals)
        return self._cache["nd"]

    # -- goodput ----------------------------------------------------------------------------

    def goodput(self, nodes, replicas, atomic_bsz, accum_steps, progress=None, *, stats_batch_size=None,
                phi=None, measured_placement=None) -> np.ndarray:
        """Eq 3.1, useful examples per second: ``M / T_iter * EFFICIENCY(M)`` with
        ``M = replicas * atomic_bsz * (accum_steps + 1)`` (efficiency as in :meth:`efficiency`);
        ``T_iter`` from the fitted model, or measured when ``measured_placement`` gives the
        placement(s) (then ``nodes`` and ``replicas`` must match it)."""
        n, k = _alloc(nodes, replicas)
        m = _real("atomic_bsz", atomic_bsz, lo=0.0, lo_open=True)
        s = _int("accum_steps", accum_steps, lo=0)
        tot = k * m * (s + 1)
        if measured_placement is None:
            t = _t_iter(self.params, n, k, m, s)
        else:
            t = self.measured_step_time(measured_placement, m, s)
        return tot / t * self.efficiency(tot, progress, stats_batch_size=stats_batch_size, phi=phi)

    def progress_rate(self, nodes, replicas, atomic_bsz, accum_steps, progress=None, *, stats_batch_size=None,
                      phi=None, measured_placement=None) -> np.ndarray:
        """Progress per second, ``goodput / M0`` = ``gain / T_iter`` (``simulator.py``
        ``Job.step``, before interference); a job needs ``target_progress`` in all."""
        g = self.goodput(nodes, replicas, atomic_bsz, accum_steps, progress,
                         stats_batch_size=stats_batch_size, phi=phi, measured_placement=measured_placement)
        return g / self.init_batch_size

    def optimize(self, nodes, replicas, phi, *, method: str = "search"):
        """Goodput-optimal ``(atomic_bsz, accum_steps)`` per allocation (Eq 3.10) with the
        artifact's limits, by :func:`scarjax.pollux.optimize_batch_size`; ``phi`` is the job's
        current PGNS (:meth:`pgns`). Returns its :class:`~scarjax.pollux.BatchConfig`
        (NumPy arrays; ``goodput`` in examples per second)."""
        n, k = _alloc(nodes, replicas)
        phi = float(_real("phi", phi, lo=0.0, allow_inf=True, scalar=True))
        out = optimize_batch_size(
            self.params, phi, float(self.init_batch_size), n, k,
            max_batch_size=self.max_batch_size, max_local_bsz=self.max_local_bsz,
            min_local_bsz=self.min_local_bsz, require_two_gradients=True, method=method)
        return type(out)(*[np.asarray(o) for o in out])

    def speedup(self, nodes, replicas, phi) -> np.ndarray:
        """Optimal goodput of each allocation relative to one GPU's (``speedup.py``
        ``SpeedupFunction``); 0 for ``replicas == 0``."""
        n = np.asarray(nodes)
        k = np.asarray(replicas)
        n, k = np.broadcast_arrays(n, k)
        if np.any((n == 0) != (k == 0)):
            raise ValueError("nodes and replicas must be 0 together (no allocation) or both >= 1")
        on = k > 0
        # one call, the base allocation (1, 1) first: one compilation per number of allocations
        q_n = np.concatenate([[1], n[on].reshape(-1)]).astype(np.int64)
        q_k = np.concatenate([[1], k[on].reshape(-1)]).astype(np.int64)
        g = self.optimize(q_n, q_k, phi).goodput.astype(np.float64)
        out = np.zeros(n.shape, np.float64)
        out[on] = g[1:] / g[0]
        return out


def _real(name, x, lo=None, lo_open=False, allow_inf=False, scalar=False) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64) if not isinstance(x, np.ndarray) or x.dtype != np.float64 else x
    va.check_real(name, a, lo=lo, lo_open=lo_open, allow_inf=allow_inf, scalar=scalar)
    return a


def _int(name, x, lo=0) -> np.ndarray:
    va.check_integer_value(name, x, lo=lo)
    return np.asarray(x)


def _alloc(nodes, replicas):
    n, k = _int("nodes", nodes, lo=1), _int("replicas", replicas, lo=1)
    if np.any(n > k):
        raise ValueError(f"nodes must be <= replicas (every node holds a GPU), got nodes={nodes}, "
                         f"replicas={replicas}")
    return n, k


def _bracket(grid: np.ndarray, m: np.ndarray):
    """``(i, w)``: ``m`` clamped to ``grid``'s range lies at ``(1 - w) grid[i] + w grid[i+1]``
    (``w = 0`` on a grid point, also the last)."""
    g = grid.astype(np.float64)
    mc = np.clip(m, g[0], g[-1])
    if g.size == 1:
        return np.zeros(mc.shape, np.int64), np.zeros(mc.shape)
    i = np.clip(np.searchsorted(g, mc, side="right") - 1, 0, g.size - 2)
    w = (mc - g[i]) / (g[i + 1] - g[i])
    at_end = w >= 1.0
    i = np.where(at_end, i + 1, i)
    w = np.where(at_end, 0.0, w)
    return i, w


def _split(k, m, m0, max_local, max_batch):
    eps = 1e-8
    local = np.ceil(m / k - eps).astype(np.int64)
    s = np.ceil(local / max_local - eps).astype(np.int64) - 1
    s = np.where((k == 1) & (m > m0), np.maximum(s, 1), s)
    atomic = np.ceil(local / (s + 1) - eps).astype(np.int64)
    return np.minimum(atomic, max_batch // (k * (s + 1))), s


def _phi(sqr, var, m0) -> np.ndarray:
    """``M0 * var / sqr``: ``inf`` where ``sqr == 0 < var``, ``0`` where ``var == 0``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(var <= 0, 0.0, np.where(sqr <= 0, np.inf, m0 * var / np.where(sqr > 0, sqr, 1.0)))


def _efficiency(m, phi, m0) -> np.ndarray:
    """Eq 3.3 (``scarjax.pollux.efficiency``'s formula, float64): 1 where ``phi = inf``."""
    inf = np.isinf(phi)
    p = np.where(inf, 0.0, phi)
    return np.where(inf, 1.0, (p + m0) / (p + m))


def _sha256(path: os.PathLike) -> str:
    return hashlib.sha256(read_bytes(path)).hexdigest()


@functools.lru_cache(maxsize=1)
def _embedded_hashes() -> dict[str, str]:
    out = {}
    for line in (embedded_dir() / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and len(cells[2]) == 64:
            out[cells[0]] = cells[2]
    return out


def _is_embedded(traces: AppTraces) -> bool:
    """Whether the throughput measurements are byte-for-byte the embedded ones."""
    hashes = _embedded_hashes()
    for rec in (traces.placements, traces.scalability):
        p = Path(rec.source)
        key = f"traces/{traces.name}/{p.name.removesuffix('.gz')}"
        if key not in hashes or _sha256(p) != hashes[key]:
            return False
    return True


def app_model(app: str | AppTraces, root: str | os.PathLike | None = None, *, refit: bool = False,
              max_epochs: int | None = None, max_local_bsz: int | None = None,
              init_batch_size: int | None = None, max_batch_size: int | None = None) -> AppModel:
    """Build one application's :class:`AppModel`.

    Args:
      app: an application name (traces from :func:`scarjax.data.load_app_traces` with
        ``root``) or loaded :class:`~scarjax.data.pollux_sim.AppTraces`.
      root: where the traces are (``None``: the embedded copy).
      refit: fit the throughput model even when the stored :data:`FITTED_PARAMS` apply.
      max_epochs, max_local_bsz, init_batch_size, max_batch_size: override the artifact's
        settings (:data:`ARTIFACT_SETTINGS`; default ``M0`` and the largest batch size are
        the smallest and largest validated ones, the per-GPU range the measured one).
    """
    traces = app if isinstance(app, AppTraces) else load_app_traces(app, root)
    name = traces.name
    settings = ARTIFACT_SETTINGS.get(name, {})
    bsz = np.array(traces.batch_sizes, dtype=np.int64)
    n_rows = min(len(c) for c in traces.validation.values())
    if max_epochs is None:
        max_epochs = settings.get("max_epochs", n_rows)
    e_max = va.check_int("max_epochs", max_epochs, lo=1, hi=n_rows)
    pl_bsz = traces.placements.local_bsz
    m_lo = int(pl_bsz.min())
    m_hi = va.check_int("max_local_bsz", max_local_bsz if max_local_bsz is not None
                        else settings.get("max_local_bsz", int(pl_bsz.max())), lo=m_lo)
    m0 = va.check_int("init_batch_size", int(bsz[0]) if init_batch_size is None else init_batch_size, lo=1)
    m_max = va.check_int("max_batch_size", int(bsz[-1]) if max_batch_size is None else max_batch_size, lo=m0)
    curves = [traces.validation[int(b)] for b in bsz]

    def stack(attr):
        return np.stack([np.asarray(getattr(c, attr)[:e_max], np.float64) for c in curves])

    progress = stack("progress")
    epoch_progress = progress.min(axis=0)
    if name in FITTED_PARAMS and not refit and _is_embedded(traces):
        params = ThroughputParams(*FITTED_PARAMS[name])
    else:
        params = fit_app_throughput(traces).params
    return AppModel(
        name=name, traces=traces, init_batch_size=m0, max_batch_size=m_max, min_local_bsz=m_lo,
        max_local_bsz=m_hi, max_epochs=e_max, batch_sizes=bsz, grad_sqr=stack("grad_sqr"),
        grad_var=stack("grad_var"), progress=progress, iteration=stack("iteration"), metric=stack("metric"),
        epoch_progress=epoch_progress, target_progress=float(epoch_progress[-1]), params=params,
        fit_error=throughput_fit_error(params, traces))


@functools.lru_cache(maxsize=None)
def _embedded_model(app: str) -> AppModel:
    return app_model(app)


class AppSet:
    """Several :class:`AppModel` s stacked so that per-job quantities are one gather.

    ``app_ids`` index ``names`` (``Workload.app_ids(app_set.names)``). Arrays are padded
    to the largest number of validated batch sizes and epochs.
    """

    def __init__(self, models: Sequence[AppModel]):
        models = tuple(models)
        if not models or not all(isinstance(m, AppModel) for m in models):
            raise TypeError("models must be a non-empty sequence of AppModel")
        self.models = models
        self.names = tuple(m.name for m in models)
        if len(set(self.names)) != len(self.names):
            raise ValueError(f"models must have distinct names, got {self.names}")
        a = len(models)
        b = max(m.batch_sizes.size for m in models)
        e = max(m.max_epochs for m in models)
        self.init_batch_size = np.array([m.init_batch_size for m in models], np.float64)
        self.max_batch_size = np.array([m.max_batch_size for m in models], np.int64)
        self.min_local_bsz = np.array([m.min_local_bsz for m in models], np.int64)
        self.max_local_bsz = np.array([m.max_local_bsz for m in models], np.int64)
        self.max_epochs = np.array([m.max_epochs for m in models], np.int64)
        self.target_progress = np.array([m.target_progress for m in models], np.float64)
        self.params = np.array([tuple(m.params) for m in models], np.float64)  # [A, 7]
        self.n_batch_sizes = np.array([m.batch_sizes.size for m in models], np.int64)
        self.batch_sizes = np.full((a, b), np.inf)
        self.epoch_progress = np.full((a, e), np.inf)
        self.grad_sqr = np.zeros((a, b, e))
        self.grad_var = np.zeros((a, b, e))
        for j, m in enumerate(models):
            nb, ne = m.batch_sizes.size, m.max_epochs
            self.batch_sizes[j, :nb] = m.batch_sizes
            self.epoch_progress[j, :ne] = m.epoch_progress
            self.grad_sqr[j, :nb, :ne] = m.grad_sqr
            self.grad_var[j, :nb, :ne] = m.grad_var
        # static bounds of AppSet.optimize's one compiled program: the most accumulation steps
        # (optimize_batch_size's default ceil(max_batch_size / max_local_bsz)) and per-GPU batch sizes
        self.accum_bound = int(np.max(-(-self.max_batch_size // self.max_local_bsz)))
        self.grid_bound = int(np.max(self.max_local_bsz - self.min_local_bsz + 1))
        for v in vars(self).values():
            if isinstance(v, np.ndarray):
                v.flags.writeable = False

    def __len__(self) -> int:
        return len(self.models)

    def __getitem__(self, key: int | str) -> AppModel:
        return self.models[self.names.index(key) if isinstance(key, str) else key]

    def _ids(self, app_ids) -> np.ndarray:
        ids = _int("app_ids", app_ids, lo=0)
        if np.any(ids >= len(self.models)):
            raise ValueError(f"app_ids must be < {len(self.models)} (the number of applications), "
                             f"got {app_ids}")
        return ids.astype(np.int64)

    def epoch(self, app_ids, progress) -> np.ndarray:
        """Completed statistical epochs of each job (:meth:`AppModel.epoch`)."""
        ids = self._ids(app_ids)
        p = _real("progress", progress, lo=0.0)
        ids, p = np.broadcast_arrays(ids, p)
        return (self.epoch_progress[ids] <= p[..., None]).sum(axis=-1).astype(np.int64)

    def grad_stats(self, app_ids, batch_size, epoch) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`AppModel.grad_stats` per job."""
        ids = self._ids(app_ids)
        m = _real("batch_size", batch_size, lo=0.0, lo_open=True)
        ids, m, e = np.broadcast_arrays(ids, m, np.asarray(epoch))
        e = np.clip(e, 0, self.max_epochs[ids] - 1)
        nb = self.n_batch_sizes[ids]
        grid = self.batch_sizes[ids]  # [..., B], +inf padded
        lo, hi = grid[..., 0], np.take_along_axis(grid, (nb - 1)[..., None], -1)[..., 0]
        mc = np.clip(m, lo, hi)
        i = np.clip((grid <= mc[..., None]).sum(-1) - 1, 0, np.maximum(nb - 2, 0))
        g_i = np.take_along_axis(grid, i[..., None], -1)[..., 0]
        g_j = np.take_along_axis(grid, np.minimum(i + 1, nb - 1)[..., None], -1)[..., 0]
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(g_j > g_i, (mc - g_i) / np.where(g_j > g_i, g_j - g_i, 1.0), 0.0)
        j = np.minimum(i + 1, nb - 1)
        sqr = (1 - w) * self.grad_sqr[ids, i, e] + w * self.grad_sqr[ids, j, e]
        var = (1 - w) * self.grad_var[ids, i, e] + w * self.grad_var[ids, j, e]
        return sqr, var

    def pgns(self, app_ids, batch_size, progress) -> np.ndarray:
        """:meth:`AppModel.pgns` per job."""
        ids = self._ids(app_ids)
        sqr, var = self.grad_stats(ids, batch_size, self.epoch(ids, progress))
        return _phi(sqr, var, self.init_batch_size[ids])

    def efficiency(self, app_ids, batch_size, progress, *, stats_batch_size=None) -> np.ndarray:
        """:meth:`AppModel.efficiency` per job."""
        ids = self._ids(app_ids)
        m = _real("batch_size", batch_size, lo=0.0, lo_open=True)
        phi = self.pgns(ids, m if stats_batch_size is None else stats_batch_size, progress)
        return _efficiency(m, phi, self.init_batch_size[ids])

    def split_batch_size(self, app_ids, replicas, batch_size) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`AppModel.split_batch_size` per job."""
        ids = self._ids(app_ids)
        k = _int("replicas", replicas, lo=1).astype(np.int64)
        m = _int("batch_size", batch_size, lo=1).astype(np.int64)
        return _split(k, m, self.init_batch_size[ids], self.max_local_bsz[ids], self.max_batch_size[ids])

    def optimize(self, app_ids, nodes, replicas, phi):
        """:meth:`AppModel.optimize` per job (Eq 3.10 with the artifact's limits of each job's
        application), all jobs in one compiled program (:func:`scarjax.pollux.optimize_batch_sizes`,
        one compilation per AppSet's bounds whatever the jobs, applications and their number,
        run one job at a time): for every job
        ``j``, ``self[app_ids[j]].optimize(nodes[j], replicas[j], phi[j])`` to float rounding
        (:func:`~scarjax.pollux.optimize_batch_sizes`; bit for bit in the checks so far).
        Returns the :class:`~scarjax.pollux.BatchConfig` of ``[J]`` NumPy arrays."""
        ids = self._ids(app_ids).reshape(-1)
        n, k = _alloc(nodes, replicas)
        phi = _real("phi", phi, lo=0.0, allow_inf=True)
        n, k, phi = (np.broadcast_to(x, ids.shape) for x in (n.reshape(-1), k.reshape(-1), phi.reshape(-1)))
        return optimize_batch_sizes(
            self.params[ids], phi, self.init_batch_size[ids], n, k, max_batch_size=self.max_batch_size[ids],
            max_local_bsz=self.max_local_bsz[ids], min_local_bsz=self.min_local_bsz[ids],
            # block=1: a simulator's calls mostly have one job not seen before (measured: 2316
            # jobs in 2081 calls in sched_sweeps' quick run), and a larger block costs more per call
            require_two_gradients=True, accum_bound=self.accum_bound, grid_bound=self.grid_bound, block=1)

    def measured_step_time(self, app_ids, placements, atomic_bsz, accum_steps=0) -> np.ndarray:
        """:meth:`AppModel.measured_step_time` per job (``placements``: one per job)."""
        ids = self._ids(app_ids).reshape(-1)
        if len(placements) != ids.size:
            raise ValueError(f"placements must give one placement per job ({ids.size}), got {len(placements)}")
        m = np.broadcast_to(_real("atomic_bsz", atomic_bsz, lo=0.0, lo_open=True), ids.shape)
        s = np.broadcast_to(_int("accum_steps", accum_steps, lo=0), ids.shape)
        out = np.empty(ids.shape, np.float64)
        for a in np.unique(ids).tolist():
            j = np.flatnonzero(ids == a)
            out[j] = self.models[a].measured_step_time([placements[i] for i in j.tolist()], m[j], s[j])
        return out

    def model_step_time(self, app_ids, nodes, replicas, atomic_bsz, accum_steps=0) -> np.ndarray:
        """:meth:`AppModel.model_step_time` per job."""
        ids = self._ids(app_ids)
        n, k = _alloc(nodes, replicas)
        m = _real("atomic_bsz", atomic_bsz, lo=0.0, lo_open=True)
        s = _int("accum_steps", accum_steps, lo=0)
        p = self.params[ids]
        return _t_iter([p[..., i] for i in range(7)], n, k, m, s)

    def goodput(self, app_ids, nodes, replicas, atomic_bsz, accum_steps, progress, *,
                stats_batch_size=None) -> np.ndarray:
        """:meth:`AppModel.goodput` (fitted model) per job."""
        ids = self._ids(app_ids)
        n, k = _alloc(nodes, replicas)
        m = _real("atomic_bsz", atomic_bsz, lo=0.0, lo_open=True)
        s = _int("accum_steps", accum_steps, lo=0)
        tot = k * m * (s + 1)
        eff = self.efficiency(ids, tot, progress, stats_batch_size=stats_batch_size)
        return tot / self.model_step_time(ids, n, k, m, s) * eff

    def progress_rate(self, app_ids, nodes, replicas, atomic_bsz, accum_steps, progress, *,
                      stats_batch_size=None) -> np.ndarray:
        """:meth:`AppModel.progress_rate` (fitted model) per job."""
        ids = self._ids(app_ids)
        return self.goodput(ids, nodes, replicas, atomic_bsz, accum_steps, progress,
                            stats_batch_size=stats_batch_size) / self.init_batch_size[ids]


def load_apps(root: str | os.PathLike | None = None, *, names: Sequence[str] = APPLICATIONS,
              refit: bool = False) -> AppSet:
    """:class:`AppSet` of the artifact's applications (embedded traces by default; cached)."""
    if root is None and not refit:
        return AppSet([_embedded_model(a) for a in names])
    return AppSet([app_model(a, root, refit=refit) for a in names])


FITTED_PARAMS.update({
    "bert": (
        0.2248576296837358,
        0.05801237076984723,
        0.15120257692897998,
        0.06620240158457502,
        1.4028922875747647,
        0.009483145969697765,
        2.1002966730571346,
    ),
    "cifar10": (
        0.010247546649286426,
        0.0007799860802865674,
        0.0408065498861615,
        0.004748068262309609,
        0.13062883902427486,
        0.0026483667437072695,
        2.844972666783168,
    ),
    "deepspeech2": (
        0.017865926676876177,
        0.033083240131161505,
        0.4732053854033446,
        0.08483218684044498,
        0.8904371578491893,
        0.009182933580286592,
        3.125385529627301,
    ),
    "imagenet": (
        0.05704248569754105,
        0.004548995917869948,
        0.08512843696503035,
        0.013634631004019012,
        0.3098947848842308,
        0.006622043892370718,
        2.682230175601659,
    ),
    "ncf": (
        0.006919962137588925,
        8.387576819758096e-07,
        0.002861944432755601,
        0.0011960896982855355,
        0.014389203981414703,
        0.0005484778525370688,
        1.0,
    ),
    "yolov3": (
        0.20561434655168323,
        0.02474500386548224,
        0.04263518251792627,
        0.07989466863797201,
        0.7208201044726518,
        0.01068424840593712,
        1.0813356924303232,
    ),
})
