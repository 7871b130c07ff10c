"""The Pollux cluster simulator (thesis Sec 3.5.3), following the OSDI'21 artifact's loop.

The loop is the artifact's ``simulator.py`` (``petuum/adaptdl``, branch ``osdi21-artifact``,
``simulator/``; ``Job.step``, ``Job.reallocate``, ``Job.update_local_bsz``, ``Cluster.step``),
with each interval's per-job arithmetic vectorised over the jobs with NumPy through
:class:`~scarjax.sched.apps.AppSet`:

1. **Advance every job by one interval** (``interval_s``, 60 s by default) under the current
   allocation. A job that was just (re)allocated first sits out the restart penalty
   (``restart_penalty_s``, 30 s; ``Job.rescale_time``) - it holds its GPUs, which count in its
   attained service, but makes no progress. Then it progresses at
   ``gain / T_iter * (1 - interference)`` per second, where ``gain = (M/M0) E(M)`` is the
   per-iteration progress at total batch ``M`` (Eq 3.3; the statistics of the current
   statistical epoch at ``M``) and ``T_iter`` the *measured* step time of its placement and
   per-GPU batch (``AppSet.measured_step_time``; ``step + s (step - sync)`` with ``s``
   accumulation steps). At each statistical-epoch boundary the time to reach it is rounded to
   whole seconds (as the artifact does), the epoch advances, and the job's batch size is
   re-chosen (adaptive jobs: Eq 3.10, :meth:`~scarjax.sched.apps.AppModel.optimize` at the
   current PGNS; others: the fixed user configuration split over the GPUs). The job is
   complete when its progress reaches the application's target (the end of its last epoch),
   at the second it does.
2. **Attained service** (GPU-seconds held) accumulates for every allocated job, restart
   penalty included (``Job.attained_service``).
3. **Interference** (``interference > 0``; the Fig 3.13 sweep): a *distributed* job (GPUs on
   more than one node) that shares a node with another distributed job runs
   ``(1 - interference)`` slower (``Cluster.step``).
4. **Decide**: the jobs submitted and not complete are shown to the policy as a
   :class:`JobsView`; it returns a GPUs-per-node matrix. Every job whose row changed is
   reallocated: a non-empty row restarts it (restart penalty, ``restarts += 1``; the first
   allocation is not counted as a restart) and re-chooses its batch size; an empty row
   suspends it.

Jobs are submitted at their workload ``time`` and first considered at the next interval
boundary. Before an adaptive job has run (the artifact's ``perf_params is None``) it uses
the default batch ``max(M0, min_local_bsz * K)``. Under an adaptive policy NCF keeps a fixed
batch of 32768 (``Cluster.__init__``: NCF is not adapted); non-adaptive policies run every
job at the workload's ``batch_size``.

Differences from the artifact, each deliberate:

* Adaptive jobs choose their batch size with the per-application fitted throughput model
  (:mod:`scarjax.sched.apps`: Eq 3.5-3.8 fitted to all the application's measurements) and
  the exact integer-grid optimum of Eq 3.10, where the artifact refits the model online to
  the configurations the job has run and samples 50 batch sizes (``goodput.py``).
* A placement is the per-node GPU counts in node order (an allocation is a matrix here, a
  list of node ids in the artifact, whose order can name a different rotation of the same
  counts); only the step-time lookup sees it.

The simulation is deterministic per ``key`` (same key, same result): ``key`` is a JAX PRNG key
or, for convenience, an int seed, and :func:`key_rng` turns it into the simulation's one
``numpy.random.Generator`` (:func:`scarjax.validate.as_rng`: an int seed ``s`` gives
``numpy.random.default_rng(s)``, the generator the former ``seed=s`` gave, so the committed
results are unchanged; a JAX key gives the generator seeded by its key data). The policy gets a
JAX key per decision: the ``k``-th decision's is ``jax.random.key(n_k)`` with ``n_k`` the
generator's ``k``-th ``integers(0, 2**31 - 1)`` draw (the draw PolluxPolicy made itself before).
"""

from __future__ import annotations

import math
import os
import sys
from dataclasses import dataclass
import time as _time
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax
import numpy as np

from scarjax import validate as va
from scarjax.data.pollux_sim import Workload, load_workload
from scarjax.sched.apps import AppSet, canonical_placement, load_apps

__all__ = [
    "ADAPTIVE_FIXED_BATCH",
    "Cluster",
    "JobRecord",
    "JobsView",
    "Policy",
    "SimResult",
    "oracle_remaining_iterations",
    "check_workload",
    "key_label",
    "key_rng",
    "placement_of",
    "simulate",
]

#: Applications whose batch size stays fixed under an adaptive policy, and that batch size
#: (the artifact's ``Cluster.__init__`` for PolluxPolicy: ``ncf`` -> 32768).
ADAPTIVE_FIXED_BATCH: dict[str, int] = {"ncf": 32768}

_MAX_MEASURED_GPUS_PER_NODE = 4  # the traces measure placements of at most 4 GPUs per node


@dataclass(frozen=True)
class Cluster:
    """The simulated cluster (the artifact's defaults: 16 nodes x 4 GPUs, 60 s interval, 30 s
    restart penalty, no interference).

    Attributes:
      nodes: number of nodes.
      gpus_per_node: GPUs per node, 1 to 4 (the measured placements have at most 4 GPUs per node).
      interval_s: seconds between scheduling decisions.
      restart_penalty_s: seconds a job makes no progress after each (re)allocation.
      interference: slowdown in ``[0, 1)`` of distributed jobs sharing a node with another
        distributed job (0: none).
    """

    nodes: int = 16
    gpus_per_node: int = 4
    interval_s: float = 60.0
    restart_penalty_s: float = 30.0
    interference: float = 0.0

    def __post_init__(self):
        va.check_int("nodes", self.nodes, lo=1)
        va.check_int("gpus_per_node", self.gpus_per_node, lo=1, hi=_MAX_MEASURED_GPUS_PER_NODE)
        va.check_real("interval_s", self.interval_s, lo=0.0, lo_open=True, scalar=True)
        va.check_real("restart_penalty_s", self.restart_penalty_s, lo=0.0, scalar=True)
        va.check_real("interference", self.interference, lo=0.0, hi=1.0, hi_open=True, scalar=True)

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def to_json(self) -> dict:
        return {"nodes": self.nodes, "gpus_per_node": self.gpus_per_node, "interval_s": float(self.interval_s),
                "restart_penalty_s": float(self.restart_penalty_s), "interference": float(self.interference)}


class JobsView(NamedTuple):
    """What a policy sees at a decision: one row per active (submitted, not complete) job,
    in submission (workload) order.

    Attributes:
      ids: ``int[J]`` row of each job in the workload.
      app_ids: ``int[J]`` application, an index into ``apps.names``.
      submit_time: ``float[J]`` submission time (s).
      age_s: ``float[J]`` seconds since submission.
      attained_gpu_s: ``float[J]`` attained service, GPU-seconds held so far.
      restarts: ``int[J]`` reallocations after the first allocation.
      progress: ``float[J]`` progress (iterations at ``M0``, :mod:`scarjax.sched.apps`).
      target_progress: ``float[J]`` progress at completion.
      batch_size: ``int[J]`` current total batch size (0 if not allocated).
      user_batch_size: ``int[J]`` the fixed batch size the job runs when not adaptive.
      user_gpus: ``int[J]`` the user's number of GPUs (workload ``num_replicas``).
      max_gpus_seen: ``int[J]`` the most GPUs the job has run on (the artifact's
        ``max_profiled_replicas``; PolluxSched caps a job at twice this).
      alloc: ``int[J, nodes]`` current GPUs per node.
      remaining_iters_oracle: ``float[J]`` iterations left to completion at ``oracle_batch_size``
        (:func:`oracle_remaining_iterations`; what Optimus+Oracle knows).
      adaptive: ``bool[J]`` whether the job tunes its batch size (Pollux, not NCF).
      apps: the :class:`~scarjax.sched.apps.AppSet`.
      epoch: ``int[J]`` completed statistical epochs.
      phi: ``float[J]`` current PGNS measured by the job (``nan`` before it has run).
      profiled: ``bool[J]`` whether the job has run (the artifact's ``perf_params is not None``;
        before, PolluxSched's speedup is linear, ``speedup(n, r) = r``).
      oracle_batch_size: ``int[J]`` the batch size of ``remaining_iters_oracle``.
    """

    ids: np.ndarray
    app_ids: np.ndarray
    submit_time: np.ndarray
    age_s: np.ndarray
    attained_gpu_s: np.ndarray
    restarts: np.ndarray
    progress: np.ndarray
    target_progress: np.ndarray
    batch_size: np.ndarray
    user_batch_size: np.ndarray
    user_gpus: np.ndarray
    max_gpus_seen: np.ndarray
    alloc: np.ndarray
    remaining_iters_oracle: np.ndarray
    adaptive: np.ndarray
    apps: AppSet
    epoch: np.ndarray | None = None
    phi: np.ndarray | None = None
    profiled: np.ndarray | None = None
    oracle_batch_size: np.ndarray | None = None

    @property
    def num_jobs(self) -> int:
        """The number of jobs (``len(view)`` is the number of fields, as for any NamedTuple)."""
        return int(self.ids.shape[0])


@runtime_checkable
class Policy(Protocol):
    """A scheduling policy.

    ``name``: its name; ``adaptive``: whether jobs choose their batch size (Pollux) or keep
    the user's. ``allocate(jobs, cluster, now, key)`` returns ``int[jobs.num_jobs, cluster.nodes]``,
    the GPUs of each job on each node (column sums at most ``cluster.gpus_per_node``); ``now``
    is the simulated time in seconds and ``key`` the decision's JAX PRNG key (module docstring).
    A
    policy with state (Tiresias' queues) also defines ``reset()``, called by :func:`simulate`
    before the first decision.
    """

    name: str
    adaptive: bool

    def allocate(self, jobs: JobsView, cluster: Cluster, now: float, key: jax.Array) -> np.ndarray:
        ...


@dataclass(frozen=True)
class JobRecord:
    """One job's outcome. ``completion_s``/``jct_s`` are ``None`` for a job unfinished at
    ``max_time_s``; ``start_s`` ``None`` if never allocated. ``num_gpus``: ``(t, gpus)`` at
    each decision that changed the job's number of GPUs."""

    name: str
    app: str
    submit_s: float
    start_s: float | None
    completion_s: float | None
    jct_s: float | None
    restarts: int
    gpu_s: float
    num_gpus: tuple[tuple[float, int], ...]

    def to_json(self) -> dict:
        return {"name": self.name, "app": self.app, "submit_s": self.submit_s, "start_s": self.start_s,
                "completion_s": self.completion_s, "jct_s": self.jct_s, "restarts": self.restarts,
                "gpu_s": self.gpu_s, "num_gpus": [list(p) for p in self.num_gpus]}


@dataclass
class SimResult:
    """A simulation's outcome.

    Attributes:
      jobs: one :class:`JobRecord` per workload row.
      avg_jct_s, p99_jct_s: mean and 99th percentile (linear) of the completed jobs' JCTs.
      makespan_s: last completion minus first submission.
      n_unfinished: jobs not complete at ``max_time_s`` (0 for a full run; then the JCT
        statistics cover the completed jobs only).
      timeline: ``{"times": float[T], "gpus": int[T, J], "used_gpus": int[T]}`` after each
        decision (empty arrays without ``record_timeline``).
      policy, cluster, key, workload: what was simulated (``key``: :func:`key_label` of the
        simulation's key).
    """

    jobs: list[JobRecord]
    avg_jct_s: float
    p99_jct_s: float
    makespan_s: float
    n_unfinished: int
    timeline: dict[str, np.ndarray]
    policy: str
    cluster: Cluster
    key: int | tuple[int, ...]
    workload: str = ""
    wall_s: float = float("nan")

    @property
    def jcts(self) -> np.ndarray:
        """``float[J]`` JCT per job (NaN where unfinished)."""
        return np.array([np.nan if j.jct_s is None else j.jct_s for j in self.jobs])

    def to_json(self, *, timeline: bool = False) -> dict:
        out = {"policy": self.policy, "workload": self.workload, "key": self.key, "cluster": self.cluster.to_json(),
               "avg_jct_s": self.avg_jct_s, "p99_jct_s": self.p99_jct_s, "makespan_s": self.makespan_s,
               "n_jobs": len(self.jobs), "n_unfinished": self.n_unfinished, "wall_s": self.wall_s,
               "completion_s": {j.name: j.completion_s for j in self.jobs},
               "jct_s": {j.name: j.jct_s for j in self.jobs},
               "jobs": [j.to_json() for j in self.jobs]}
        if timeline:
            out["timeline"] = {k: np.asarray(v).tolist() for k, v in self.timeline.items()}
        return out


# ---------------------------------------------------------------------------------------------
# helpers shared with the policies
# ---------------------------------------------------------------------------------------------


def placement_of(row) -> str:
    """The placement key of an allocation row (GPUs per node): the non-zero counts in node
    order, canonicalised (:func:`~scarjax.sched.apps.canonical_placement`)."""
    return canonical_placement([int(c) for c in row if c])


def packed_placement(replicas: int, gpus_per_node: int = 4) -> tuple[int, ...]:
    """``replicas`` GPUs packed onto as few nodes as possible (``optimus.py``
    ``predict_step_time``: ``(4, 4, ..., rest)``)."""
    full, rest = divmod(int(replicas), int(gpus_per_node))
    return (gpus_per_node,) * full + ((rest,) if rest else ())


def _iteration_table(apps: AppSet) -> np.ndarray:
    """``float[A, B, E]`` the validation curves' iteration counts, padded like AppSet's arrays."""
    a, b, e = len(apps), apps.batch_sizes.shape[1], apps.epoch_progress.shape[1]
    out = np.zeros((a, b, e))
    for i, m in enumerate(apps.models):
        out[i, : m.batch_sizes.size, : m.max_epochs] = m.iteration
    return out


def _interp_batch(apps: AppSet, table: np.ndarray, ids, batch_size, epoch) -> np.ndarray:
    """``table[app, ·, epoch]`` interpolated linearly in the batch size between the nearest
    validated batch sizes (``applications.py`` ``get_iteration``; clamped to the range)."""
    ids = np.asarray(ids, np.int64)
    m = np.asarray(batch_size, np.float64)
    e = np.clip(np.asarray(epoch, np.int64), 0, apps.max_epochs[ids] - 1)
    nb = apps.n_batch_sizes[ids]
    grid = apps.batch_sizes[ids]
    hi = np.take_along_axis(grid, (nb - 1)[:, None], 1)[:, 0]
    mc = np.clip(m, grid[:, 0], hi)
    i = np.clip((grid <= mc[:, None]).sum(1) - 1, 0, np.maximum(nb - 2, 0))
    j = np.minimum(i + 1, nb - 1)
    g_i, g_j = grid[np.arange(ids.size), i], grid[np.arange(ids.size), j]
    w = np.where(g_j > g_i, (mc - g_i) / np.where(g_j > g_i, g_j - g_i, 1.0), 0.0)
    return (1 - w) * table[ids, i, e] + w * table[ids, j, e]


def oracle_remaining_iterations(apps: AppSet, app_ids, batch_size, epoch, *, _table=None) -> np.ndarray:
    """Iterations left to completion at ``batch_size`` after ``epoch`` statistical epochs,
    from the validation curves (``optimus.py``: ``get_iteration(B, completion_epoch) -
    get_iteration(B, epoch)``, and 1 once ``epoch >= completion_epoch = max_epochs - 1``)."""
    ids = np.atleast_1d(np.asarray(app_ids, np.int64))
    b = np.broadcast_to(np.asarray(batch_size, np.float64), ids.shape)
    e = np.broadcast_to(np.asarray(epoch, np.int64), ids.shape)
    table = _iteration_table(apps) if _table is None else _table
    last = apps.max_epochs[ids] - 1
    rem = _interp_batch(apps, table, ids, b, last) - _interp_batch(apps, table, ids, b, e)
    return np.where(last <= e, 1.0, rem)


# ---------------------------------------------------------------------------------------------
# the simulation
# ---------------------------------------------------------------------------------------------


class _State:
    """Per-job arrays of one simulation (all workload rows)."""

    def __init__(self, workload: Workload, apps: AppSet, adaptive_policy: bool, nodes: int):
        n = len(workload)
        self.app = workload.app_ids(apps.names).astype(np.int64)
        self.submit = np.asarray(workload.time, np.float64)
        self.user_gpus = np.asarray(workload.num_replicas, np.int64)
        ubs = np.asarray(workload.batch_size, np.int64).copy()
        adaptive = np.full(n, bool(adaptive_policy))
        if adaptive_policy:
            for name, bsz in ADAPTIVE_FIXED_BATCH.items():
                if name in apps.names:
                    fixed = self.app == apps.names.index(name)
                    adaptive[fixed] = False
                    ubs[fixed] = bsz
        self.adaptive = adaptive
        self.user_bsz = ubs
        self.progress = np.zeros(n)
        self.epoch = np.zeros(n, np.int64)
        self.attained = np.zeros(n)
        self.restarts = np.full(n, -1, np.int64)  # -1: never allocated (the artifact's None)
        self.rescale = np.zeros(n)
        self.alloc = np.zeros((n, nodes), np.int64)
        self.atomic = np.zeros(n, np.int64)
        self.accum = np.zeros(n, np.int64)
        self.completion = np.full(n, np.nan)
        self.start = np.full(n, np.nan)
        self.profiled = np.zeros(n, bool)
        self.max_seen = np.zeros(n, np.int64)
        self.phi = np.full(n, np.nan)
        self.gpus_hist: list[list[tuple[float, int]]] = [[] for _ in range(n)]

    @property
    def replicas(self) -> np.ndarray:
        return self.alloc.sum(1)

    @property
    def done(self) -> np.ndarray:
        return ~np.isnan(self.completion)


class _Sim:
    def __init__(self, workload, apps, policy, cluster):
        self.apps, self.policy, self.cluster = apps, policy, cluster
        self.s = _State(workload, apps, bool(policy.adaptive), cluster.nodes)
        self.iter_table = _iteration_table(apps)
        self._step_cache: dict[tuple, float] = {}
        self._opt_cache: dict[tuple, tuple[int, int]] = {}

    # -- configuration of a job on its GPUs (Job.update_local_bsz) -------------------------------

    def update_local_bsz(self, idx: np.ndarray) -> None:
        s, apps = self.s, self.apps
        idx = idx[s.replicas[idx] > 0]
        if idx.size == 0:
            return
        k = s.replicas[idx]
        a = s.app[idx]
        m0 = apps.init_batch_size[a].astype(np.int64)
        bsz = np.where(s.adaptive[idx], np.maximum(m0, apps.min_local_bsz[a] * k), s.user_bsz[idx])
        atomic, accum = apps.split_batch_size(a, k, bsz)
        opt = np.flatnonzero(s.adaptive[idx] & s.profiled[idx])
        if opt.size:
            nodes = (s.alloc[idx[opt]] > 0).sum(1)
            cfg = self._optimize(a[opt], nodes, k[opt], s.phi[idx[opt]])
            atomic[opt], accum[opt] = cfg[:, 0], cfg[:, 1]
        count = k * (accum + 1)
        s.atomic[idx] = np.minimum(atomic, apps.max_batch_size[a] // count)
        s.accum[idx] = accum

    def _optimize(self, app, nodes, replicas, phi) -> np.ndarray:
        """``int64[J, 2]`` the goodput-optimal ``(atomic_bsz, accum_steps)`` of each job
        (:meth:`~scarjax.sched.apps.AppSet.optimize`: each application's
        :meth:`~scarjax.sched.apps.AppModel.optimize` to float rounding): the configurations not
        cached yet are optimised in one call (one compiled program for all applications)."""
        keys = list(zip(app.tolist(), nodes.tolist(), replicas.tolist(), phi.tolist()))
        miss = list(dict.fromkeys(key for key in keys if key not in self._opt_cache))
        if miss:
            m_app, m_nodes, m_reps, m_phi = (np.array(col) for col in zip(*miss))
            cfg = self.apps.optimize(m_app, m_nodes, m_reps, m_phi.astype(np.float64))
            bad = np.flatnonzero(cfg.local_bsz <= 0)
            if bad.size:
                b = int(bad[0])
                raise ValueError(f"{self.apps.names[m_app[b]]}: no feasible batch size on {m_reps[b]} GPUs of "
                                 f"{m_nodes[b]} nodes (phi={m_phi[b]:g})")
            if len(self._opt_cache) + len(miss) > 200_000:
                self._opt_cache.clear()
            self._opt_cache.update(zip(miss, zip(cfg.local_bsz.tolist(), cfg.accum_steps.tolist())))
        return np.array([self._opt_cache[key] for key in keys], np.int64).reshape(len(keys), 2)

    def step_times(self, idx: np.ndarray) -> np.ndarray:
        """Measured seconds per iteration of jobs ``idx`` in their current configuration."""
        s = self.s
        out = np.empty(idx.size)
        miss: dict[int, list[tuple[int, str, int, int]]] = {}
        for j, i in enumerate(idx.tolist()):
            key = (int(s.app[i]), placement_of(s.alloc[i]), int(s.atomic[i]), int(s.accum[i]))
            t = self._step_cache.get(key)
            if t is None:
                miss.setdefault(key[0], []).append((j, *key[1:]))
            else:
                out[j] = t
        for a, rows in miss.items():
            m = self.apps.models[a]
            t = m.measured_step_time([r[1] for r in rows], np.array([r[2] for r in rows], np.float64),
                                     np.array([r[3] for r in rows]))
            for (j, pl, at, ac), tj in zip(rows, np.atleast_1d(t).tolist()):
                self._step_cache[(a, pl, at, ac)] = tj
                out[j] = tj
        return out

    # -- one interval (Cluster.step's job loop, Job.step) ----------------------------------------

    def interference(self) -> np.ndarray:
        c = self.cluster
        s = self.s
        on = s.alloc > 0
        if c.interference <= 0:
            return np.zeros(on.shape[0])
        dist = on.sum(1) > 1
        shared = on[dist].sum(0) > 1
        hit = dist & (on & shared[None, :]).any(1)
        return np.where(hit, c.interference, 0.0)

    def advance(self, now: float, seconds: float) -> None:
        s, apps = self.s, self.apps
        interf = self.interference()
        k_all = s.replicas
        run = (k_all > 0) & ~s.done
        left = np.zeros(s.app.size)
        left[run] = seconds
        delay = np.minimum(s.rescale, left)
        s.attained += delay * k_all
        s.rescale = np.where(run, s.rescale - delay, s.rescale)
        left -= delay
        while True:
            idx = np.flatnonzero((left > 0) & ~s.done & run)
            if idx.size == 0:
                break
            a = s.app[idx]
            k = k_all[idx]
            bsz = k * s.atomic[idx] * (s.accum[idx] + 1)
            m0 = apps.init_batch_size[a]
            scale = bsz / m0
            t_iter = self.step_times(idx)
            sqr, var = apps.grad_stats(a, bsz, s.epoch[idx])
            with np.errstate(divide="ignore", invalid="ignore"):
                gain = (var + sqr) / (var / scale + sqr)
            if not np.all(np.isfinite(gain) & (gain > 0)):
                bad = int(idx[~(np.isfinite(gain) & (gain > 0))][0])
                raise ValueError(f"job {bad} ({apps.names[s.app[bad]]}): gradient statistics give no progress "
                                 f"at batch size {int(k_all[bad] * s.atomic[bad] * (s.accum[bad] + 1))}")
            # Job.update_params: the job now knows its statistics and has run this configuration.
            with np.errstate(divide="ignore", invalid="ignore"):
                s.phi[idx] = np.where(var <= 0, 0.0, np.where(sqr <= 0, np.inf, m0 * var / np.where(sqr > 0, sqr, 1)))
            s.profiled[idx] = True
            s.max_seen[idx] = np.maximum(s.max_seen[idx], k)
            rate = gain / t_iter * (1.0 - interf[idx])
            nxt = apps.epoch_progress[a, s.epoch[idx]]
            sec = left[idx]
            cross = s.progress[idx] + rate * sec >= nxt
            # whole interval without finishing an epoch
            nc = idx[~cross]
            s.progress[nc] += rate[~cross] * sec[~cross]
            s.attained[nc] += sec[~cross] * k[~cross]
            left[nc] = 0.0
            # an epoch boundary inside the interval
            c = idx[cross]
            if c.size:
                delta = np.minimum(np.round((nxt[cross] - s.progress[c]) / rate[cross]), sec[cross])
                s.epoch[c] += 1
                fin = s.epoch[c] > apps.max_epochs[s.app[c]] - 1
                t_now = now + (seconds - left[c])
                s.completion[c[fin]] = (t_now + delta)[fin]
                s.progress[c] = nxt[cross]
                s.attained[c] += delta * k[cross]
                left[c] -= delta
            self.update_local_bsz(idx)

    # -- a decision (Cluster.step's second half, Job.reallocate) ----------------------------------

    def view(self, now: float) -> tuple[np.ndarray, JobsView]:
        s, apps = self.s, self.apps
        act = np.flatnonzero((s.submit <= now) & ~s.done)
        a = s.app[act]
        bsz = s.replicas[act] * s.atomic[act] * (s.accum[act] + 1)
        ob = np.where(s.adaptive[act], np.where(bsz > 0, bsz, apps.init_batch_size[a].astype(np.int64)),
                      s.user_bsz[act])
        rem = oracle_remaining_iterations(apps, a, ob, s.epoch[act], _table=self.iter_table)
        ro = lambda x: _ro(x)  # noqa: E731
        return act, JobsView(
            ids=ro(act), app_ids=ro(a), submit_time=ro(s.submit[act]), age_s=ro(now - s.submit[act]),
            attained_gpu_s=ro(s.attained[act]), restarts=ro(np.maximum(s.restarts[act], 0)),
            progress=ro(s.progress[act]), target_progress=ro(apps.target_progress[a]), batch_size=ro(bsz),
            user_batch_size=ro(s.user_bsz[act]), user_gpus=ro(s.user_gpus[act]), max_gpus_seen=ro(s.max_seen[act]),
            alloc=ro(s.alloc[act]), remaining_iters_oracle=ro(rem), adaptive=ro(s.adaptive[act]), apps=apps,
            epoch=ro(s.epoch[act]), phi=ro(s.phi[act]), profiled=ro(s.profiled[act]), oracle_batch_size=ro(ob))

    def check_allocation(self, out, n_jobs: int) -> np.ndarray:
        c = self.cluster
        name = getattr(self.policy, "name", type(self.policy).__name__)
        arr = np.asarray(out)
        if arr.shape != (n_jobs, c.nodes):
            raise ValueError(f"policy {name!r} returned an allocation of shape {arr.shape}, expected "
                             f"({n_jobs}, {c.nodes}) (active jobs x nodes)")
        if arr.dtype.kind not in "iu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
            raise ValueError(f"policy {name!r} returned a non-integer allocation")
        arr = arr.astype(np.int64)
        if np.any(arr < 0):
            raise ValueError(f"policy {name!r} returned negative GPU counts")
        used = arr.sum(0)
        if np.any(used > c.gpus_per_node):
            node = int(np.argmax(used))
            raise ValueError(f"policy {name!r} allocated {int(used[node])} GPUs on node {node}, which has "
                             f"{c.gpus_per_node}")
        return arr

    def reallocate(self, act: np.ndarray, new: np.ndarray, now: float) -> None:
        s = self.s
        changed = np.flatnonzero(np.any(new != s.alloc[act], axis=1))
        if changed.size == 0:
            return
        idx = act[changed]
        rows = new[changed]
        s.alloc[idx] = rows
        on = rows.sum(1) > 0
        start = idx[on]
        s.rescale[start] = self.cluster.restart_penalty_s
        s.restarts[start] += 1
        s.start[start] = np.where(np.isnan(s.start[start]), now, s.start[start])
        stop = idx[~on]
        s.atomic[stop] = 0
        s.accum[stop] = 0
        self.update_local_bsz(start)
        for i, g in zip(idx.tolist(), rows.sum(1).tolist()):
            h = s.gpus_hist[i]
            if not h or h[-1][1] != g:
                h.append((float(now), int(g)))


def _ro(x: np.ndarray) -> np.ndarray:
    x = np.array(x)
    x.flags.writeable = False
    return x


def _progress_bar(jobs: int, policy: str, show: bool | None):
    """The ``tqdm`` bar of :func:`simulate` (jobs finished of ``jobs``), or None when it is
    not shown (``show`` False; ``None``: stderr not a terminal or ``SCARJAX_NO_PROGRESS`` set)."""
    if show is None:
        show = sys.stderr.isatty() and not os.environ.get("SCARJAX_NO_PROGRESS")
    if not show:
        return None
    from tqdm.auto import tqdm  # progress output only (tqdm: a dependency, imported when shown)

    return tqdm(total=jobs, desc=f"cluster-sim {policy}", unit="job", leave=False)


def check_workload(workload: Workload, apps: AppSet) -> None:
    """Refuse a workload that ``apps`` cannot run, naming the column, the row and the job:
    an application ``apps`` does not model, or a user's configuration (``num_replicas`` GPUs,
    total ``batch_size``) outside the measured range of its application: ``batch_size`` above
    the largest validated batch size (``max_batch_size``, the upper limit of Sec 3.3.1). A
    batch below ``min_local_bsz`` per GPU is allowed, as in the artifact (its "isolated"
    workloads ask for it; the goodput model extrapolates the per-GPU step time there).
    :func:`simulate` calls it before the first interval.

    Raises:
      ValueError: the first offending row, e.g. ``workload w.csv: batch_size 1000000000 of row 2
        (job 'bert-1') is above bert's largest validated batch size 384``.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, got {type(workload).__name__}")
    if not isinstance(apps, AppSet):
        raise TypeError(f"apps must be an AppSet, got {type(apps).__name__}")
    known = set(apps.names)
    for k, a in enumerate(workload.application.tolist()):
        if a not in known:
            raise ValueError(f"workload {workload.source}: application {a!r} of row {k + 1} (job "
                             f"{str(workload.name[k])!r}) is not one of the applications {list(apps.names)}")
    ids = workload.app_ids(apps.names)
    bsz = np.asarray(workload.batch_size, np.int64)
    hi = apps.max_batch_size[ids]
    bad = np.flatnonzero(bsz > hi)
    if bad.size:
        j = int(bad[0])
        raise ValueError(f"workload {workload.source}: batch_size {int(bsz[j])} of row {j + 1} (job "
                         f"{str(workload.name[j])!r}) is above {apps.names[ids[j]]}'s largest validated "
                         f"batch size {int(hi[j])}")


def key_rng(key: Any, name: str = "key") -> np.random.Generator:
    """The ``numpy.random.Generator`` of a scheduling key: the one rule by which every
    :mod:`scarjax.sched` entry point that draws on the host turns its ``key`` into NumPy draws.

    ``key``: a single JAX PRNG key (typed ``jax.random.key`` or raw ``uint32[2]``) or, for
    convenience, an int seed ``>= 0``. :func:`scarjax.validate.as_rng`: an int seed ``s`` gives
    ``numpy.random.default_rng(s)`` (what these functions' former ``seed=s`` gave, so results
    are kept per int seed); a key gives the generator seeded by its key data, so
    ``jax.random.key(s)`` and the int ``s`` are different streams. ``TypeError``/``ValueError``
    naming ``name`` otherwise (a batch of keys included).

    >>> int(key_rng(3).integers(100)) == int(np.random.default_rng(3).integers(100))
    True
    """
    if isinstance(key, bool) or not isinstance(key, (int, np.integer)):
        key = va.check_key(name, key)
    return va.as_rng(key, name)


def key_label(key: Any) -> int | tuple[int, ...]:
    """How a result records its ``key`` (JSON-ready): an int seed as itself, a JAX key as
    its key data words."""
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        return int(key)
    return tuple(int(v) for v in np.asarray(jax.random.key_data(va.check_key("key", key))).ravel())


def simulate(workload: Workload | str, policy: Policy, *, cluster: Cluster | None = None, apps: AppSet | None = None,
             key: Any = 0, max_time_s: float | None = None, record_timeline: bool = True,
             progress: bool | None = None) -> SimResult:
    """Simulate ``workload`` on ``cluster`` under ``policy`` (the artifact's ``simulator.py``
    loop; module docstring).

    Args:
      workload: a :class:`~scarjax.data.pollux_sim.Workload`, a workload name
        (``"workload-1"``) or a CSV path (:func:`~scarjax.data.load_workload`).
      policy: a :class:`Policy`.
      cluster: the :class:`Cluster` (default 16 x 4 GPUs, 60 s interval, 30 s penalty).
      apps: the applications (default: :func:`~scarjax.sched.apps.load_apps`, embedded traces).
      key: a JAX PRNG key or an int seed (:func:`key_rng`; deterministic per key): the
        policy's per-decision keys are drawn from it (module docstring).
      max_time_s: stop at this simulated time even if jobs remain (they are reported
        unfinished); ``None`` runs until every job completes.
      record_timeline: keep every decision's per-job GPU counts (intervals in which no
        submitted job is left to run are skipped: they have no entry).
      progress: show a ``tqdm`` bar on stderr, advanced at every scheduling decision: jobs
        finished out of the workload's, with the simulated hours and the number of active jobs.
        Default (``None``): when stderr is a terminal (so ``scarjax cluster-sim`` shows it)
        and ``SCARJAX_NO_PROGRESS`` is not set; ``True``/``False`` force it.

    Returns:
      :class:`SimResult`.
    """
    wall0 = _time.perf_counter()
    if isinstance(workload, (str,)) or hasattr(workload, "__fspath__"):
        workload = load_workload(workload)
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a Workload, a workload name or a path, got {type(workload).__name__}")
    if len(workload) == 0:
        raise ValueError("workload must have at least one job")
    if not isinstance(policy, Policy):
        raise TypeError(f"policy must implement the Policy protocol (name, adaptive, allocate), got "
                        f"{type(policy).__name__}")
    cluster = Cluster() if cluster is None else cluster
    if not isinstance(cluster, Cluster):
        raise TypeError(f"cluster must be a Cluster, got {type(cluster).__name__}")
    apps = load_apps() if apps is None else apps
    if not isinstance(apps, AppSet):
        raise TypeError(f"apps must be an AppSet, got {type(apps).__name__}")
    rng = key_rng(key)
    if progress is not None and not isinstance(progress, (bool, np.bool_)):
        raise TypeError(f"progress must be a bool or None, got {type(progress).__name__}")
    if max_time_s is not None:
        va.check_real("max_time_s", max_time_s, lo=0.0, lo_open=True, scalar=True)
    check_workload(workload, apps)
    if hasattr(policy, "reset"):
        policy.reset()
    sim = _Sim(workload, apps, policy, cluster)
    s = sim.s
    dt = float(cluster.interval_s)
    now = 0.0
    times, gpus, used = [], [], []
    n_steps = 0
    bar = _progress_bar(len(workload), getattr(policy, "name", type(policy).__name__), progress)
    try:
        while not s.done.all():
            if max_time_s is not None and now >= max_time_s:
                break
            sim.advance(now, dt)
            n_steps += 1
            now = n_steps * dt
            s.alloc[s.done] = 0  # finished jobs release their GPUs
            act, view = sim.view(now)
            if act.size:
                out = policy.allocate(view, cluster, now, jax.random.key(int(rng.integers(0, 2**31 - 1))))
                new = sim.check_allocation(out, act.size)
                sim.reallocate(act, new, now)
            elif not s.done.all():  # nothing submitted is left to run: skip to the next submission
                n_steps = max(n_steps, math.ceil(float(s.submit[~s.done].min()) / dt) - 1)
            if record_timeline:
                times.append(now)
                g = s.replicas.copy()
                g[s.done] = 0
                gpus.append(g)
                used.append(int(g.sum()))
            if bar is not None:
                bar.set_postfix_str(f"{now / 3600:.1f} h simulated, active: {act.size}", refresh=False)
                bar.update(int(s.done.sum()) - bar.n)  # redraws at most every tqdm mininterval
    finally:
        if bar is not None:
            bar.refresh()  # the final state is always shown once, however short the run
            bar.close()
    done = s.done
    jct = s.completion - s.submit
    jobs = [JobRecord(name=str(workload.name[i]), app=apps.names[s.app[i]], submit_s=float(s.submit[i]),
                      start_s=None if np.isnan(s.start[i]) else float(s.start[i]),
                      completion_s=float(s.completion[i]) if done[i] else None,
                      jct_s=float(jct[i]) if done[i] else None, restarts=int(max(s.restarts[i], 0)),
                      gpu_s=float(s.attained[i]), num_gpus=tuple(s.gpus_hist[i]))
            for i in range(len(workload))]
    jd = jct[done]
    timeline = {"times": np.asarray(times, np.float64),
                "gpus": np.asarray(gpus, np.int64).reshape(len(times), len(workload)),
                "used_gpus": np.asarray(used, np.int64)}
    return SimResult(
        jobs=jobs, avg_jct_s=float(jd.mean()) if jd.size else float("nan"),
        p99_jct_s=float(np.percentile(jd, 99)) if jd.size else float("nan"),
        makespan_s=float(s.completion[done].max() - s.submit.min()) if jd.size else float("nan"),
        n_unfinished=int((~done).sum()), timeline=timeline, policy=getattr(policy, "name", type(policy).__name__),
        cluster=cluster, key=key_label(key), workload=str(workload.source), wall_s=_time.perf_counter() - wall0)
