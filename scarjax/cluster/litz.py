"""Litz elasticity on the cluster clock: scale out and in mid-run without restarting (thesis
Ch 4, Sec 4.3-4.5.1).

Litz over-partitions a job into ``E`` *executors* (micro-tasks over data and worker state) and
its parameters into ``P`` *PShards*; nodes run worker threads that execute the executors and
server threads that hold the PShards. Elasticity moves executors and PShards between nodes
(Sec 4.4): the computation itself (which executors exist, what each computes from which
parameters, in which order) does not depend on the number of nodes. Here:

* **Training** is real and independent of the node count: :class:`scarjax.cluster.trainer.Trainer`
  over the ``E`` executors (worker mode with ``E`` workers when the algorithm has one; else the
  plain loop), advanced in intervals between scaling events. The trainer is cut-invariant
  (each iteration's keys come from its global index), so an elastic run reaches exactly the
  state of a static run after the same iterations: nothing is restarted, redone or lost (the
  tests compare the parameters bit for bit). This mirrors :mod:`scarjax.ps.elastic`'s
  guarantee for server and worker changes ("a segmented run with these events equals the
  uninterrupted run").
* **Time** per iteration on ``N`` nodes comes from the job's
  :class:`~scarjax.cluster.steptime.StepTime` (e.g. :func:`litz_step_time`: executors divided over
  the nodes' worker threads, Fig 4.2's over-partitioning overhead, plus a fixed per-iteration
  part), and a scaling event costs a *migration* pause: the executors and PShards that change
  node (a minimal-move rebalance, :func:`rebalance`, which *is* the parameter server's plan:
  leaving nodes' units go to the least loaded remaining ones by
  :func:`scarjax.ps.failures.deal`, joining nodes take units from the most loaded by
  :func:`scarjax.ps.elastic.rebalance`, the functions :func:`scarjax.ps.elastic.remove_servers` /
  ``add_servers`` move blocks with; tested to agree on a real parameter server) are
  serialised and sent at ``bandwidth`` bytes/s, node pairs in parallel (Sec 4.5.1: 2.0 Gbps;
  LDA's stateful executors ≈ 4.6 GiB per node, MLR's stateless workers only move PShards).
* **Ideal scale-out** (Sec 4.5.1, after Pundir et al.): the time at which the scale-out was
  triggered plus the time a static run on the new node count takes for the remaining
  iterations (:func:`ideal_time`).

**The policy contract.** :func:`elastic` is ``policy(job, market, *, key, horizon_s, ...) ->
ClusterRun`` like every policy (:mod:`scarjax.cluster.clock`): ``job.workers`` the starting
nodes, ``job.max_steps`` the cap on executed iterations, seconds everywhere, ``key`` the
market's draws (a scripted schedule draws none), ``train_key`` the training, one ledger entry
per node. Its extensions: ``spec`` (a :class:`LitzSpec`, default ``job.workers`` executors and
PShards), ``schedule`` (a :class:`Schedule`: node counts requested at elapsed seconds) and
``tier`` (which of the market's prices the nodes pay, and which of its offers bounds them:
:func:`offer`; on transient nodes Litz runs on at most what the market offers at each time,
:func:`elastic`); ``meta['executed_steps']`` counts the iterations run, as in every policy.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import numpy as np

from scarjax import validate as va
from scarjax.cluster import clock
from scarjax.cluster import market as mk
from scarjax.cluster.ledger import Ledger
from scarjax.cluster.steptime import StepTime
from scarjax.cluster.trainer import Trainer
from scarjax.ps import elastic as ps_elastic
from scarjax.ps.failures import deal

__all__ = [
    "LitzSpec",
    "litz_step_time",
    "placement",
    "rebalance",
    "Schedule",
    "migration_s",
    "elastic",
    "ideal_time",
    "offer",
]


@dataclasses.dataclass(frozen=True)
class LitzSpec:
    """How a Litz job is partitioned and what moving it costs.

    Attributes:
      executors: ``E`` executors (micro-task partitions; fixed for the whole run).
      pshards: ``P`` parameter shards.
      param_bytes: bytes of all parameters (split evenly over the PShards).
      executor_bytes: bytes of all executors' state (0 for stateless workers: MLR; LDA's
        token-topic assignments are large), split evenly over the executors.
      bandwidth: bytes/s between a pair of nodes (Sec 4.5.1: 2.0 Gbps = 2.5e8 B/s).
      latency_s: fixed cost of a scaling event (coordination, process start).
    """

    executors: int
    pshards: int
    param_bytes: float = 0.0
    executor_bytes: float = 0.0
    bandwidth: float = 2.5e8
    latency_s: float = 1.0

    def __post_init__(self):
        va.check_int("executors", self.executors, lo=1)
        va.check_int("pshards", self.pshards, lo=1)
        va.check_real("param_bytes", self.param_bytes, lo=0.0, scalar=True)
        va.check_real("executor_bytes", self.executor_bytes, lo=0.0, scalar=True)
        va.check_real("bandwidth", self.bandwidth, lo=0.0, lo_open=True, scalar=True)
        va.check_real("latency_s", self.latency_s, lo=0.0, scalar=True)


def litz_step_time(compute_s: float, fixed_s: float, executors: int, *, threads_per_node: int = 1,
                   overhead_per_executor: float = 0.0) -> StepTime:
    """Seconds per iteration on ``N`` nodes: ``compute_s · ceil(E / (N · threads)) / (E / threads)
    · (1 + overhead) + fixed_s``: the executors' work divided over the nodes' worker threads in
    whole executors (an over-partitioned job balances to within one executor), the
    over-partitioning overhead ``overhead_per_executor · (E / (N · threads) − 1)`` (Fig 4.2: MLR
    ×1.11 at 16 executors per thread), and a per-iteration part ``fixed_s`` that does not shrink
    with the nodes (synchronisation, parameter traffic). ``t(1 node) = compute_s + fixed_s``."""
    va.check_real("compute_s", compute_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("fixed_s", fixed_s, lo=0.0, scalar=True)
    E = va.check_int("executors", executors, lo=1)
    th = va.check_int("threads_per_node", threads_per_node, lo=1)
    va.check_real("overhead_per_executor", overhead_per_executor, lo=0.0, scalar=True)
    c, f, o = float(compute_s), float(fixed_s), float(overhead_per_executor)

    def fn(nodes):
        slots = np.asarray(nodes, np.int64) * th
        per = np.ceil(E / slots)
        return c * per / (E / th) * (1.0 + o * np.maximum(E / slots - 1.0, 0.0)) + f

    return StepTime(fn, f"litz(E={E},c={c:g},f={f:g})")


def placement(units: int, nodes: int) -> np.ndarray:
    """A balanced assignment of ``units`` (executors or PShards) to ``nodes``: unit ``i`` on node
    ``i mod nodes``."""
    units, nodes = va.check_int("units", units, lo=1), va.check_int("nodes", nodes, lo=1)
    return np.arange(units) % nodes


def rebalance(assign: Any, nodes: int, *, key: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Minimal-move rebalance of ``assign`` (node of each unit, nodes ``0..N-1``) onto nodes
    ``0..nodes-1``, by the parameter server's own elasticity plans (one implementation):
    units on removed nodes (``>= nodes``) go, in random order, each to the least loaded
    remaining node (:func:`scarjax.ps.failures.deal`, as :func:`scarjax.ps.elastic.remove_servers`
    moves the blocks of leaving servers); when nodes join, units leave the most loaded nodes
    for the least loaded until every node holds ``floor`` or ``ceil`` of the mean
    (:func:`scarjax.ps.elastic.rebalance`, as :func:`~scarjax.ps.elastic.add_servers`), with
    every unit weighing the same. ``key`` seeds which units move (not how many per node).
    Returns ``(new_assign, moved)`` (a bool mask of the units that changed node). Nothing is
    dropped: every unit keeps exactly one node."""
    a = np.asarray(assign)
    nodes = va.check_int("nodes", nodes, lo=1)
    if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer) or np.any(a < 0):
        raise ValueError(f"assign must be a non-empty 1-D array of node indices >= 0, got {assign!r}")
    a = a.astype(np.int64)
    alive = np.arange(max(int(a.max()) + 1, nodes)) < nodes
    if np.any(a >= nodes):  # scale-in: the leaving nodes' units migrate
        new = deal(a, a >= nodes, alive, None, key)
    else:  # scale-out (or a rebalance on the same nodes)
        new = ps_elastic.rebalance(None, a, alive, key)
    new = np.asarray(new, np.int64)
    return new, new != a


def migration_s(spec: LitzSpec, old_nodes: int, new_nodes: int) -> float:
    """Seconds a scaling event from ``old_nodes`` to ``new_nodes`` pauses the job: the moved
    executors' and PShards' bytes, sent at ``bandwidth`` with node pairs in parallel (the
    busiest node's traffic), plus ``latency_s``."""
    if not isinstance(spec, LitzSpec):
        raise TypeError(f"spec must be a LitzSpec, got {type(spec).__name__}")
    old_nodes, new_nodes = va.check_int("old_nodes", old_nodes, lo=1), va.check_int("new_nodes", new_nodes, lo=1)
    if old_nodes == new_nodes:
        return 0.0
    busiest = 0.0
    traffic = np.zeros(max(old_nodes, new_nodes))
    for units, total in ((spec.executors, spec.executor_bytes), (spec.pshards, spec.param_bytes)):
        a0 = placement(units, old_nodes)
        a1, moved = rebalance(a0, new_nodes)
        per = total / units
        np.add.at(traffic, a0[moved], per)  # sent
        np.add.at(traffic, a1[moved], per)  # received
    busiest = float(traffic.max()) if traffic.size else 0.0
    return spec.latency_s + busiest / spec.bandwidth


@dataclasses.dataclass(frozen=True)
class Schedule:
    """Scaling requests on the job's clock: at ``times_s[i]`` seconds after the job's start, run
    on ``nodes[i]`` nodes (times non-decreasing; the last request at one time wins). The
    policy's extension of the shared contract (:func:`elastic`'s ``schedule``); build one from
    ``(time_s, nodes)`` pairs with :meth:`of`."""

    times_s: tuple = ()
    nodes: tuple = ()

    def __post_init__(self):
        t = np.asarray(self.times_s, np.float64).reshape(-1) if len(self.times_s) else np.zeros(0)
        if len(self.nodes) != t.size:
            raise ValueError(f"nodes must have one entry per time in times_s ({t.size}), got {len(self.nodes)}")
        if t.size:
            va.check_real("times_s", t, lo=0.0)
            if np.any(np.diff(t) < 0):
                raise ValueError(f"times_s must be non-decreasing, got {list(self.times_s)!r}")
        nodes = tuple(va.check_int("nodes", n, lo=1) for n in self.nodes)
        object.__setattr__(self, "times_s", tuple(float(x) for x in t))
        object.__setattr__(self, "nodes", nodes)

    @classmethod
    def of(cls, pairs: Sequence[tuple[float, int]]) -> "Schedule":
        """A :class:`Schedule` from ``(time_s, nodes)`` pairs."""
        if isinstance(pairs, Schedule):
            return pairs
        items = list(pairs)
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise ValueError(f"schedule entries must be (time_s, nodes), got {item!r}")
        return cls(tuple(i[0] for i in items), tuple(i[1] for i in items))

    def pairs(self) -> list[tuple[float, int]]:
        """The requests as ``(time_s, nodes)`` pairs."""
        return list(zip(self.times_s, self.nodes))


def offer(market: mk.Market, tier: str) -> tuple[np.ndarray, np.ndarray]:
    """What ``market`` offers Litz's nodes of ``tier``, as a step function on the market's
    clock: ``(times_s, counts)`` float64, ``counts[i]`` nodes obtainable from ``times_s[i]``
    until ``times_s[i + 1]`` (``times_s[0] = -inf``; a count ``inf``: no limit).

    On-demand nodes (``tier='reliable'``) are always offered. Transient nodes are offered as
    :meth:`scarjax.cluster.market.Market.available` says: a replayed trace's nodes present
    (changing at its add and remove times), a price-driven market's unlimited nodes while the
    price in effect is at most the bid and none above it (changing at the series' price
    changes), no limit for parametric and empirical processes (their revocations are not
    availability; :func:`elastic` does not draw them)."""
    if not isinstance(market, mk.Market):
        raise TypeError(f"market must be a scarjax.cluster.market.Market, got {type(market).__name__}")
    va.check_choice("tier", tier, mk.TIERS)
    p = market.process
    if tier == "reliable" or not isinstance(p, (mk.Replay, mk.PriceDriven)):
        return np.array([-math.inf]), np.array([math.inf])
    if isinstance(p, mk.Replay):
        add, rem = np.asarray(p.add_s, np.float64), np.asarray(p.remove_s, np.float64)
        change = np.unique(np.concatenate([add, rem[np.isfinite(rem)]]))
    else:
        change = np.unique(np.asarray(p.series.times_s, np.float64))
    before = market.available(float(change[0]) - 1.0)
    counts = [before] + [market.available(float(c)) for c in change]
    return np.concatenate([[-math.inf], change]), np.asarray(counts, np.float64)


def _move_s(spec: LitzSpec, old: int, new: int, started: bool) -> float:
    """The pause of a change from ``old`` to ``new`` nodes: :func:`migration_s` between held
    nodes; 0 for the job's first start; a resume from no nodes (``old = 0`` after the job ran)
    reloads the state: every new node receives its share of the executors and PShards (the
    busiest node's bytes at ``bandwidth``) plus ``latency_s``."""
    if old == new or (old == 0 and not started):
        return 0.0
    if old >= 1:
        return migration_s(spec, old, new)
    share = (math.ceil(spec.executors / new) / spec.executors * spec.executor_bytes
             + math.ceil(spec.pshards / new) / spec.pshards * spec.param_bytes)
    return spec.latency_s + share / spec.bandwidth


def elastic(job: clock.Job, market: mk.Market | None = None, *, key: Any, horizon_s: float,
            spec: LitzSpec | None = None, schedule: Schedule | Sequence[tuple[float, int]] = (),
            tier: str = "reliable", policy: str = "litz", train_key: Any = 0) -> clock.ClusterRun:
    """Run ``job`` on ``job.workers`` nodes, changing to ``schedule.nodes[i]`` at each
    ``schedule.times_s[i]`` (a :class:`Schedule`, or ``(time_s, nodes)`` pairs) without
    restarting (module docstring), until ``job.target_loss``, ``job.max_steps`` executed
    iterations or ``horizon_s``. ``spec`` (default: ``job.workers`` executors and PShards,
    nothing to move but ``latency_s``) says how the job is partitioned.

    A scaling event requested at ``t`` takes effect at the end of the iteration in progress,
    then pauses the job for :func:`migration_s`; nodes are billed (``market``, ``tier``; default
    on-demand m4.4xlarge-like $0.8/h per node, per second) from when they join to when they
    leave, on the market's clock (from ``market.start_time_s``, like every policy's ledger).

    **Only what the market offers** (:func:`offer`; on-demand nodes are always offered, transient
    ones as :meth:`~scarjax.cluster.market.Market.available` says). Litz moves executors and
    PShards between nodes without a restart (Sec 4.4), which this model applies at iteration
    boundaries (as for the schedule), so the rule, a stated choice where the thesis is silent
    (it evaluates scheduled scale-out and scale-in, Sec 4.5.1), is: at every iteration boundary the
    job runs on ``n = min(requested, offered now)`` nodes, lowered further until the move to
    ``n`` and one iteration on ``n`` nodes end before the offer next falls below ``n``; a batch
    of iterations ends at the last boundary before such a fall (the scale-in happens ahead of
    it) and, while fewer nodes than requested run, at the end of the iteration in progress when
    the offer rises (the scale-out). Nodes leaving in a scale-in are billed through the
    migration, but not past the time the offer falls below them (the market takes them then:
    a provider stop). When no node can run an iteration, the job releases every node and waits,
    holding and billing none, until the offer next changes (a ``'wait'`` event; past the horizon
    the run ends there); it then resumes on the offered nodes after reloading its state
    (``latency_s`` plus each new node's share of the executors' and PShards' bytes at
    ``bandwidth``; the save at the release is not modelled). A move whose first iteration would
    end after the horizon is not made (the run ends). With an unlimited offer (on-demand nodes,
    the default) the run is the scheduled one.

    ``key`` has the meaning it has for every policy: the market's draws (a scripted schedule
    and the market's availability draw none, so it does not change the run); ``train_key``
    (default 0) the training (initialisation, minibatches), as in
    :mod:`scarjax.cluster.policies`. Returns a :class:`~scarjax.cluster.clock.ClusterRun` (one
    point per iteration, ``'scale'``, ``'wait'`` and ``'resume'`` events; ``meta['nodes']`` per
    point) with ``final_state`` (the trained state) attached.
    """
    if not isinstance(job, clock.Job):
        raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
    if spec is None:
        spec = LitzSpec(int(job.workers), int(job.workers))
    if not isinstance(spec, LitzSpec):
        raise TypeError(f"spec must be a LitzSpec, got {type(spec).__name__}")
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    sched = Schedule.of(schedule).pairs()
    if market is None:
        market = mk.Market(mk.MachineType("m4.4xlarge", 0.8), None, billing="per_second")
    if not isinstance(market, mk.Market):
        raise TypeError(f"market must be a scarjax.cluster.market.Market or None, got {type(market).__name__}")
    t0 = float(market.start_time_s)  # the ledger is on the market's clock; t is the job's clock
    off_t, off_n = offer(market, tier)
    off_t = off_t - t0  # the offer's changes on the job's clock (one subtraction: exact comparisons)

    def offered(x: float) -> float:
        return float(off_n[int(np.searchsorted(off_t, x, side="right")) - 1])

    def next_change(x: float, pred) -> float:
        """The first job time after ``x`` at which the offer changes to a count ``pred`` accepts."""
        i = int(np.searchsorted(off_t, x, side="right"))
        j = np.flatnonzero(pred(off_n[i:]))
        return float(off_t[i + j[0]]) if j.size else math.inf

    workers = spec.executors if job.algorithm.has_workers else None
    trainer = Trainer(job.algorithm, train_key, workers=workers)
    ledger = Ledger()
    price = market.price(tier)
    rec = clock.Recorder(policy, ledger, market.start_time_s)
    rec.point(0.0, trainer.loss(), 0)
    node_hist: list = []
    req, cur, started, waiting = int(job.workers), 0, False, False
    t, loss = 0.0, math.inf
    pending = list(sched)
    while trainer.step < job.max_steps and t < horizon_s:
        while pending and pending[0][0] <= t + 1e-9:
            req = pending.pop(0)[1]
        n = int(min(req, offered(t)))
        while n >= 1:  # the move to n and one iteration on n nodes end before the offer falls below n
            fall = next_change(t, lambda c, n=n: c < n)
            if t + _move_s(spec, cur, n, started) + float(job.step_time(n)) <= fall + 1e-6:
                break
            n = int(min(n - 1, offered(fall)))
        if not node_hist:
            node_hist.append(n)
        if n < 1:  # nothing can run an iteration: release every node and wait for the offer to change
            for i in range(cur):
                ledger.stop(i, t0 + t)
            nxt = next_change(t, lambda c: np.ones(c.shape, bool))
            if not waiting:  # entering the wait (not each change of the offer within it)
                rec.event(t, "wait", f"{cur} -> 0 nodes at step {trainer.step}: the market offers "
                                     f"{offered(t):g} nodes, the next change at {nxt:.0f} s")
            waiting = True
            cur, started = 0, started or cur > 0
            t = min(nxt, horizon_s)
            continue
        waiting = False
        if t + _move_s(spec, cur, n, started) + float(job.step_time(n)) > horizon_s:
            break  # no iteration on n nodes ends before the horizon: the run ends here, without the move
        if n != cur:
            pause = _move_s(spec, cur, n, started)
            for i in range(n, cur):  # leaving nodes stop after the migration, or when the market takes them
                gone = next_change(t, lambda c, k=i + 1: c < k)
                ledger.stop(i, t0 + min(t + pause, gone), revoked=bool(gone < t + pause))
            for i in range(cur, n):  # joining nodes are billed from the start of the migration
                ledger.start(i, t0 + t, price=price, tier=tier, billing=market.billing)
            if cur >= 1:
                rec.event(t, "scale", f"{cur} -> {n} nodes at step {trainer.step}, migration {pause:.1f} s")
            elif started:
                rec.event(t, "resume", f"0 -> {n} nodes at step {trainer.step}, state reloaded in {pause:.1f} s")
            t += pause
            cur, started = n, True
        # iterations until the next requested event (it takes effect at an iteration's end)
        dt = float(job.step_time(cur))
        n_it = job.max_steps - trainer.step
        if pending:
            n_it = min(n_it, max(1, int(math.ceil((pending[0][0] - t) / dt - 1e-9))))
        if cur < req:  # the offer rises: scale out at the end of the iteration in progress
            rise = next_change(t, lambda c: c > cur)
            if math.isfinite(rise):
                n_it = min(n_it, max(1, int(math.ceil((rise - t) / dt - 1e-9))))
        fall = next_change(t, lambda c: c < cur)
        if math.isfinite(fall):  # the last boundary before the offer falls below the nodes held
            n_it = min(n_it, max(1, int(math.floor((fall - t + 1e-6) / dt))))
        fit = int(math.floor((horizon_s - t) / dt + 1e-9))  # whole iterations before the horizon
        if fit < 1:
            break
        n_it = min(n_it, fit)
        losses = trainer.train(n_it)
        hit = np.flatnonzero(losses <= job.target_loss)
        if hit.size:  # stop at the target (the rest of the interval is not needed)
            losses = losses[: hit[0] + 1]
        step0 = trainer.step - n_it
        t = rec.interval(t, dt, losses, step0)
        node_hist += [cur] * losses.size
        loss = float(losses[-1])
        if hit.size:
            break
    for i in ledger.running:  # the user stops the nodes at the run's end
        ledger.stop(i, t0 + t)
    run = rec.finish(t, nodes=node_hist or [0], final_loss=loss, executed_steps=int(trainer.step))
    run.final_state = trainer.state
    return run


def ideal_time(static_new: clock.ClusterRun, trigger_s: float, trigger_step: int, target_loss: float) -> float:
    """Sec 4.5.1's ideal scale-out time: ``trigger_s`` plus the time the static run on the new
    node count takes from step ``trigger_step`` to the target (``inf`` if it never gets there)."""
    o = static_new.to_target(target_loss)
    if not o.reached:
        return math.inf
    steps = np.asarray(static_new.steps)
    i = int(np.searchsorted(steps, trigger_step))
    t_at = float(static_new.time_s[min(i, steps.size - 1)]) if trigger_step > 0 else 0.0
    return float(trigger_s + o.time_s - t_at)
