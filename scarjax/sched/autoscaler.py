"""Goodput-driven cluster autoscaling (thesis Sec 3.5.4, Fig 3.14).

Two rules, both from the Pollux sources:

* :class:`GoodputAutoscaler`, the thesis' rule for one job (Sec 3.5.4, "Auto-scaling
  ImageNet training"): with ``a`` the job's GPUs, scale up whenever
  ``max_{m,s} GOODPUT(a) / SUM(a) > U * max_{m,s} GOODPUT(1)`` (its *scaling efficiency*
  ``SPEEDUP(a) / SUM(a)`` exceeds ``U = 2/3``), to the number of nodes whose predicted
  efficiency is closest to ``L = 1/2``. Because the goodput includes the statistical
  efficiency (Eq 3.3), whose PGNS grows during training, the job starts small and grows as
  larger batches become useful. With ``use_efficiency=False`` the same rule sees only the
  system throughput (the PGNS taken infinite, so EFFICIENCY = 1 and the throughput-optimal
  batch size is chosen): the throughput-based autoscaler of Or et al. [164] that Fig 3.14
  compares with, which scales out at once and stays there.
* :class:`UtilityAutoscaler`, the cluster-wide rule of the artifact's simulator
  (``simulator.py`` ``Cluster.step``/``autoscale``/``get_utility``): the cluster utility
  (the jobs' speedups relative to one GPU summed over the cluster's GPUs,
  :func:`scarjax.sched.ga.cluster_utility`) is averaged over the last 15 intervals; when
  it leaves ``[low_util, high_util]`` the number of nodes is set by binary search to the one
  whose utility (of a fresh PolluxSched decision on that many nodes) is closest to the middle
  of the band (the last probe is a candidate too: the artifact compares only the bracket's
  ends, missing an exact hit inside it).

:func:`simulate_autoscaling` runs one job of an application under a :class:`GoodputAutoscaler`
(the setting of Fig 3.14): nodes, batch size, statistical efficiency over time, completion
time and cost in node-seconds (every time here is in seconds).

Settings the thesis leaves open, kept as options so their effect can be measured (the
experiment ``sched_autoscale`` reports it): the cluster's largest size (``max_nodes``), the
allocation the ideal goodput extrapolates from (``ideal_base``: one GPU, as the formula reads,
or one node), and the batch size at which the scaler measures the PGNS
(``simulate_autoscaling(stats_batch_size=...)``: by default the job's current one, as the
artifact's jobs do).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from scarjax import validate as va
from scarjax.sched.ga import speedup_tables

__all__ = ["IDEAL_BASES", "GoodputAutoscaler", "UtilityAutoscaler", "AutoscaleRun", "node_efficiencies",
           "simulate_autoscaling"]


#: The allocations the ideal (perfectly scaling) goodput of Sec 3.5.4 extrapolates from.
IDEAL_BASES = ("gpu", "node")


def _app_index(apps, app) -> int:
    """``app``'s index in ``apps.names`` (``app``: a name or an index)."""
    if isinstance(app, str):
        if app not in apps.names:
            raise ValueError(f"app must be one of {list(apps.names)} or an index, got {app!r}")
        return apps.names.index(app)
    return va.check_int("app", app, lo=0, hi=len(apps.names) - 1)


def node_efficiencies(apps, app: str | int, phi: float, *, max_nodes: int, gpus_per_node: int = 4,
                      base: str = "gpu") -> np.ndarray:
    """``float64[max_nodes + 1]``: the scaling efficiency of a job of ``app`` with PGNS ``phi``
    on ``k`` full nodes (``[0] = 0``), its goodput-optimal goodput over the ideal goodput:

    * ``base="gpu"`` (Sec 3.5.4 as written, ``GOODPUT(a) / SUM(a)`` against ``GOODPUT(1)``):
      ``SPEEDUP(k nodes) / (k * gpus_per_node)``, SPEEDUP relative to one GPU (Eq 3.12 with
      the one-GPU base, :func:`scarjax.sched.ga.speedup_tables`);
    * ``base="node"`` (the ideal extrapolated from one whole node instead, a reading of
      ``GOODPUT(1)`` with ``a`` counted in nodes): ``SPEEDUP(k nodes) / (k * SPEEDUP(1 node))``,
      so one node is always efficiency 1.
    """
    va.check_real("phi", phi, lo=0.0, allow_inf=True, scalar=True)
    if base not in IDEAL_BASES:
        raise ValueError(f"base must be one of {IDEAL_BASES}, got {base!r}")
    a = _app_index(apps, app)
    K = va.check_int("max_nodes", max_nodes, lo=1)
    g = va.check_int("gpus_per_node", gpus_per_node, lo=1)
    tab = speedup_tables(apps, [a], [phi], max_nodes=K, max_replicas=K * g)[0]
    k = np.arange(K + 1)
    out = np.zeros(K + 1)
    out[1:] = tab[k[1:], k[1:] * g] / (k[1:] * (g if base == "gpu" else tab[1, g]))
    return out


@dataclass(frozen=True)
class GoodputAutoscaler:
    """The thesis' goodput-based autoscaling rule (Sec 3.5.4; module docstring).

    Attributes:
      gpus_per_node: GPUs per node.
      min_nodes, max_nodes: the range of the cluster size.
      up: ``U``, scale up when the current scaling efficiency exceeds it (2/3).
      target: ``L``, the efficiency aimed at when scaling (1/2).
      down: scale down (to the efficiency closest to ``target``) when the efficiency falls
        below it; ``None`` (the thesis) never scales down.
      use_efficiency: ``True``: goodput (Pollux); ``False``: throughput only (Or et al.).
      ideal_base: ``"gpu"`` (the thesis' formula: the ideal goodput is ``SUM(a)`` times one
        GPU's) or ``"node"`` (one node's times the number of nodes); :func:`node_efficiencies`.
    """

    gpus_per_node: int = 4
    min_nodes: int = 1
    max_nodes: int = 16
    up: float = 2.0 / 3.0
    target: float = 0.5
    down: float | None = None
    use_efficiency: bool = True
    ideal_base: str = "gpu"

    def __post_init__(self):
        if self.ideal_base not in IDEAL_BASES:
            raise ValueError(f"ideal_base must be one of {IDEAL_BASES}, got {self.ideal_base!r}")
        va.check_int("gpus_per_node", self.gpus_per_node, lo=1)
        va.check_int("min_nodes", self.min_nodes, lo=1)
        va.check_int("max_nodes", self.max_nodes, lo=self.min_nodes)
        va.check_real("up", self.up, lo=0.0, hi=1.0, lo_open=True, scalar=True)
        va.check_real("target", self.target, lo=0.0, hi=1.0, lo_open=True, scalar=True)
        if self.target > self.up:
            raise ValueError(f"target must be <= up (scale up to a lower efficiency), got target={self.target}, "
                             f"up={self.up}")
        if self.down is not None:
            va.check_real("down", self.down, lo=0.0, hi=self.target, scalar=True)

    @property
    def name(self) -> str:
        return "goodput" if self.use_efficiency else "throughput"

    def decide(self, efficiencies, nodes: int) -> int:
        """The number of nodes to use next, given ``efficiencies[k]`` (the job's predicted
        scaling efficiency on ``k`` nodes, :func:`node_efficiencies`) and the current ``nodes``."""
        eff = np.asarray(efficiencies, np.float64)
        n = va.check_int("nodes", nodes, lo=self.min_nodes, hi=self.max_nodes)
        if eff.ndim != 1 or eff.size < self.max_nodes + 1:
            raise ValueError(f"efficiencies must have max_nodes + 1 = {self.max_nodes + 1} entries, got shape "
                             f"{eff.shape}")
        ks = np.arange(self.min_nodes, self.max_nodes + 1)
        if eff[n] > self.up:
            cand = ks[ks >= n]
        elif self.down is not None and eff[n] < self.down:
            cand = ks[ks <= n]
        else:
            return n
        # closest to L; ties to the larger cluster when scaling up, the smaller when down
        d = np.abs(eff[cand] - self.target)
        best = np.flatnonzero(d == d.min())
        return int(cand[best[-1]] if eff[n] > self.up else cand[best[0]])


@dataclass(frozen=True)
class UtilityAutoscaler:
    """The artifact's cluster autoscaler (``simulator.py``; module docstring).

    Attributes:
      min_nodes, max_nodes: the cluster-size range.
      low_util, high_util: the utility band (the artifact's policy keeps 0.35-0.65).
      window: intervals averaged before deciding (15).
    """

    min_nodes: int = 1
    max_nodes: int = 16
    low_util: float = 0.35
    high_util: float = 0.65
    window: int = 15

    def __post_init__(self):
        va.check_int("min_nodes", self.min_nodes, lo=1)
        va.check_int("max_nodes", self.max_nodes, lo=self.min_nodes)
        va.check_real("low_util", self.low_util, lo=0.0, scalar=True)
        va.check_real("high_util", self.high_util, lo=self.low_util, scalar=True)
        va.check_int("window", self.window, lo=1)

    def should_rescale(self, history, nodes: int) -> bool:
        """Whether the mean of the last ``window`` utilities (``history``, at least ``window + 1``
        of them as the artifact requires) left the band in a direction the size can move."""
        h = np.asarray(history, np.float64)
        if h.size <= self.window:
            return False
        u = float(h[-self.window:].mean())
        return (nodes > self.min_nodes and u < self.low_util) or (nodes < self.max_nodes and u > self.high_util)

    def target_nodes(self, utility_of: Callable[[int], float], nodes: int) -> int:
        """Binary search (``Cluster.autoscale``) for the cluster size whose utility is closest
        to the band's middle; ``utility_of(k)`` is the utility of a decision on ``k`` nodes
        (decreasing in ``k``)."""
        va.check_callable("utility_of", utility_of)
        target = (self.low_util + self.high_util) / 2
        lo, hi, n = self.min_nodes, self.max_nodes, va.check_int("nodes", nodes, lo=self.min_nodes,
                                                                 hi=self.max_nodes)
        while lo + 1 < hi:
            u = float(utility_of(n))
            if u < target:
                hi = n
            elif u > target:
                lo = n
            else:
                break
            n = (lo + hi) // 2
        # the closest of the bracket's ends and the last probe (the artifact compares only the
        # ends, so an exact hit inside the bracket was lost)
        cands = sorted({lo, n, hi})
        dist = [abs(target - float(utility_of(k))) for k in cands]
        return cands[int(np.argmin(dist))]


@dataclass
class AutoscaleRun:
    """One job under an autoscaler: per-interval ``time_s``, ``nodes``, ``batch_size``,
    ``efficiency`` (statistical, Eq 3.3), ``progress``; ``jct_s`` (``nan`` if unfinished) and
    ``node_s`` (the cost in node-seconds: nodes held x seconds; divide by 3600 for
    node-hours); ``rescales`` count."""

    policy: str
    app: str
    time_s: np.ndarray
    nodes: np.ndarray
    batch_size: np.ndarray
    efficiency: np.ndarray
    progress: np.ndarray
    jct_s: float
    node_s: float
    rescales: int

    def to_json(self) -> dict:
        return {"policy": self.policy, "app": self.app, "jct_s": self.jct_s, "node_s": self.node_s,
                "rescales": self.rescales, "time_s": self.time_s.tolist(), "nodes": self.nodes.tolist(),
                "batch_size": self.batch_size.tolist(), "efficiency": self.efficiency.tolist(),
                "progress": self.progress.tolist()}


def simulate_autoscaling(apps, app: str, scaler: GoodputAutoscaler, *, interval_s: float = 300.0,
                         restart_s: float = 30.0, start_nodes: int | None = None,
                         max_time_s: float = 30 * 86400.0, stats_batch_size: float | None = None) -> AutoscaleRun:
    """One job of ``app`` from progress 0 to its target under ``scaler`` (Fig 3.14's setting).

    Every ``interval_s`` the job's PGNS at its progress (at its current batch size; the
    application's curves, :meth:`AppSet.pgns`) gives the predicted efficiencies per cluster size
    (:func:`node_efficiencies`; with ``use_efficiency=False`` the PGNS is taken infinite), the
    scaler picks the number of nodes (each change costs ``restart_s`` without progress), and
    the job runs the batch size that is optimal for its allocation *under the scaler's model*
    (:meth:`AppModel.optimize`) while progressing at its true goodput (Eq 3.1 with the true
    PGNS). Deterministic (no random draws, so no ``key``). Cost: node-seconds held.

    ``stats_batch_size``: the batch size at which the scaler's PGNS is measured; ``None`` (the
    artifact's jobs) its current batch size. The artifact's curves give a larger PGNS at larger
    batch sizes, so the default under-predicts the efficiency of the larger batches a scale-up
    brings; a fixed large value (e.g. the application's largest) is the optimistic variant.
    The simulated truth always uses the statistics at the batch size actually run.
    """
    if not isinstance(scaler, GoodputAutoscaler):
        raise TypeError(f"scaler must be a GoodputAutoscaler, got {type(scaler).__name__}")
    a = _app_index(apps, app)
    model = apps[a]
    gpn = scaler.gpus_per_node
    dt = va.check_real("interval_s", interval_s, lo=0.0, lo_open=True, scalar=True) and float(interval_s)
    va.check_real("restart_s", restart_s, lo=0.0, scalar=True)
    va.check_real("max_time_s", max_time_s, lo=0.0, lo_open=True, scalar=True)
    nodes = scaler.min_nodes if start_nodes is None else va.check_int(
        "start_nodes", start_nodes, lo=scaler.min_nodes, hi=scaler.max_nodes)
    m0 = float(model.init_batch_size)
    target = model.target_progress
    t, prog, bsz, node_s, rescales, pause = 0.0, 0.0, m0, 0.0, 0, 0.0
    rec = {k: [] for k in ("time_s", "nodes", "batch_size", "efficiency", "progress")}
    jct = float("nan")
    first = True
    if stats_batch_size is not None:
        va.check_real("stats_batch_size", stats_batch_size, lo=0.0, lo_open=True, scalar=True)
    while t < max_time_s:
        phi = float(apps.pgns([a], [bsz if stats_batch_size is None else float(stats_batch_size)], [prog])[0])
        phi_model = phi if scaler.use_efficiency else np.inf
        eff = node_efficiencies(apps, a, phi_model, max_nodes=scaler.max_nodes, gpus_per_node=gpn,
                                base=scaler.ideal_base)
        new = scaler.decide(eff, nodes)
        if new != nodes or first:
            pause = float(restart_s)
            rescales += int(not first)
            first = False
        nodes = new
        k = nodes * gpn
        cfg = model.optimize(np.array([nodes]), np.array([k]), phi_model)
        atomic, accum = int(cfg.local_bsz[0]), int(cfg.accum_steps[0])
        bsz = float(k * atomic * (accum + 1))
        rate = float(model.progress_rate(nodes, k, atomic, accum, prog))  # the truth: stats at M itself
        stat_eff = float(model.efficiency(bsz, prog))
        for key, v in zip(rec, (t, nodes, bsz, stat_eff, prog)):
            rec[key].append(v)
        run = max(dt - pause, 0.0)
        pause = max(pause - dt, 0.0)
        if prog + rate * run >= target:
            used = dt - run + (target - prog) / rate
            jct, node_s = t + used, node_s + nodes * used
            prog = target
            break
        prog += rate * run
        node_s += nodes * dt
        t += dt
    r = {k: np.asarray(v) for k, v in rec.items()}
    return AutoscaleRun(policy=scaler.name, app=model.name, time_s=r["time_s"], nodes=r["nodes"].astype(np.int64),
                        batch_size=r["batch_size"], efficiency=r["efficiency"], progress=r["progress"], jct_s=jct,
                        node_s=node_s, rescales=rescales)
