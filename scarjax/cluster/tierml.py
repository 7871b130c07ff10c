"""TierML / AgileML on the cluster clock: tiers of reliability for agile elasticity
(Harlap, Ganger, Gibbons 2016, "TierML", Secs 3.2–3.4).

**Stages (Sec 3.2, Figs 4–6, Sec 4.3 Figs 7–9).** With ``R >= 1`` reliable (on-demand) and
``T >= 0`` transient (spot) machines, the ratio ``r = T / R`` picks the functionality
partitioning (:func:`select_stage`, thresholds :class:`Thresholds`):

* stage 1 (``r <= stage1_max``, default 1: Fig 7's "32 ParamServ" of 64 has negligible
  slowdown): ParamServs on the reliable machines only, workers everywhere; no parameter
  state on transient machines;
* stage 2 (``stage1_max < r <= stage2_max``, default 15: Sec 4.3 Fig 8): ActivePSs on half
  of the transient machines (Sec 3.3 "best performance when running ActivePSs on half of the
  resources"), a BackupPS on every reliable machine, workers everywhere;
* stage 3 (``r > stage2_max``: "beyond 15:1", Fig 9): as stage 2 but no workers on the
  reliable machines (they would be stragglers).

:func:`roles` gives the counts; :func:`stage_slowdown` the modelled time-per-iteration factor
of each stage relative to the traditional parameter server on the same machines, a
piecewise-linear interpolation of the points the paper states for MF on Cluster-A (stage 1:
1.0 at 1:1, 7× at 15:1; stage 2: 1.0 at 7:1, 1.18 at 15:1, "almost 2×" = 1.95 at 63:1;
stage 3: matches the traditional architecture, whose loss of the reliable machines' workers
is in the step-time model's worker count).

**Elasticity and the market (Secs 3.3–3.4).** :func:`tierml` is the policy on the simulated
clock of :mod:`scarjax.cluster.clock`: it bids the on-demand price, buys ``transient`` spot
machines of the class (market) with the highest estimated MTTF (:func:`mttf_estimate`), and
falls back to on-demand machines while every class's spot price is above the bid. The
ActivePS state is pushed to the BackupPS in the background every ``push_every`` iterations
(or slower when the network cannot carry it, :func:`push_period`). On a warning (eviction)
the ActivePSs flush their end-of-life deltas to the BackupPS (modelled time
``param_bytes / (R · bandwidth)``, Fig 11's blip) and nothing is lost; a revocation without
warning (failure), or a warning shorter than the flush (effective failure), of machines holding
ActivePS blocks rolls those blocks of the real training state back to the BackupPS copy (the
state of the last push); the blocks of the surviving ActivePSs keep their values and the
iteration counter goes on. Proactive switching: every
``check_every_s`` the controller compares the current class's MTTF with the others' and, when
one is ``switch_factor`` times higher, buys that class; once it runs, the ActivePSs move to it
and the old machines keep running (stateless) workers until the end of their billing hour,
then are released — if the provider revokes them first, that partial hour is free (the
Ledger's AWS rule).

Training is real: every interval runs actual iterations of ``job.algorithm`` through the
clock's :class:`~scarjax.cluster.trainer.Trainer`; the interval's simulated duration is the
step-time model (``job.step_time`` of the number of machines running workers, times
:func:`stage_slowdown`) plus the modelled flush. Synchronous data-parallel iterations compute
the same update whatever the worker count, so the count enters the run through the step time
only (the Trainer runs the plain loop, one compiled program per chunk length).

**The parameter server's state transitions are :mod:`scarjax.ps`'s.** The controller keeps
the ActivePS as ``ps_blocks`` parameter blocks placed on the machines electing ActivePSs
(machine index = server index) and moves them with the parameter server's own plans: blocks
of machines that stop hosting are dealt to the hosts (:func:`scarjax.ps.failures.deal`, as
:func:`scarjax.ps.elastic.remove_servers`), new hosts take blocks from the most loaded
(:func:`scarjax.ps.elastic.rebalance`, as ``add_servers``), and a revocation is
:func:`scarjax.ps.tiers.plan_revoke` — the rule :func:`scarjax.ps.tiers.revoke` applies to
the sharded store: warned ActivePSs flush and migrate their blocks, the blocks of the others
are lost (tested to agree on a real parameter server). The blocks are the real training
state's (:func:`state_blocks`: rows of every parameter, optimizer moments with them), and when
some are lost the controller reloads exactly those from the BackupPS copy with
:func:`scarjax.ps.tiers.reload_lost`, the rule :func:`~scarjax.ps.tiers.revoke` applies to the
sharded store (tested: a partial loss keeps the surviving blocks' values; a bulk revocation of
every ActivePS gives ``revoke``'s state on a real parameter server). ``meta['lost_iterations']``
sums, over the rollbacks, the iterations since the last push whose updates the lost blocks
lost (they are not redone: the counter goes on).

**The policy contract.** :func:`tierml` is ``policy(job, market, *, key, horizon_s, ...) ->
ClusterRun`` (:mod:`scarjax.cluster.clock`): ``job.max_steps`` executed iterations (redone
ones included; ``meta['executed_steps']``), seconds, ``key`` the market's draws,
``train_key`` the training, one ledger entry per machine. Its extensions: the tier sizes
(``reliable``, ``transient``), the other spot classes (``alternatives``) and the controller's
settings. Every revocation is a ``'revocation'`` event, as in every policy, warned or not (the
detail ``'<w> warned, <f> without warning'``; :func:`warned_revocations` counts those whose
machines were all warned). :func:`scripted` (Fig 11) is a scenario, not a policy: its
iterations are given.
It ends as every policy does (:mod:`scarjax.cluster.policies`' termination rule): at the target,
the step cap, the horizon, or the stated give-up, :func:`scarjax.cluster.policies.futile_give_up`
over its warnings and revocations in a row without a completed iteration. Machines under
notice from their start (a lifetime within the warning) are replaced at the next check, not at
once (their successors would be too, at the same simulated time).

**A replayed trace.** On a :class:`~scarjax.cluster.market.Replay` class every spot machine is
one of the trace's nodes, drawn from the market when it starts
(:meth:`~scarjax.cluster.market.Replay.pick` at that market time, excluding the nodes the run
already holds: those of machines running, under notice, or requested and not yet started), and
it dies at that node's removal: never two machines on one node. A purchase the trace cannot
fill (no free node) is not retried at every check: the class waits until the market next
offers a node (a node added, or a held one released), a ``'wait'`` event; a wait past the
horizon ends the class's purchases. ``meta['trace_nodes']`` gives each such machine's ledger
id, class and node.

The policy is a host-side event loop (one Python loop per market scenario): its decisions
(which class to buy, when to switch, when to fall back) depend on the realised prices and
revocations, so it is not vectorised; :mod:`scarjax.cluster.sweep` holds the calibrated
vectorised model for long sweeps.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import core
from scarjax.cluster import clock as ck
from scarjax.cluster.ledger import Ledger
from scarjax.cluster.trainer import Trainer
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.ps import elastic as ps_elastic
from scarjax.ps import tiers as ps_tiers
from scarjax.ps.failures import deal
from scarjax.scar import partition as spt

__all__ = [
    "Thresholds",
    "Roles",
    "select_stage",
    "roles",
    "stage_slowdown",
    "step_seconds",
    "push_period",
    "flush_seconds",
    "mttf_estimate",
    "state_blocks",
    "pick_nodes",
    "warned_revocations",
    "tierml",
    "scripted",
    "Scripted",
]

_H = 3600.0


# --------------------------------------------------------------------------------------
# Stages (pure)


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """Transient:reliable ratio thresholds of the three stages (Sec 3.2, Sec 4.3).

    ``r <= stage1_max``: stage 1; ``stage1_max < r <= stage2_max``: stage 2; above: stage 3.
    Defaults: 1 (Fig 7: the 1:1 stage-1 configuration has negligible slowdown) and 15
    (Sec 3.2: "beyond 15:1 in our experiments" the workers on reliable machines straggle)."""

    stage1_max: float = 1.0
    stage2_max: float = 15.0

    def __post_init__(self):
        va.check_real("stage1_max", self.stage1_max, lo=0.0, scalar=True)
        va.check_real("stage2_max", self.stage2_max, lo=0.0, scalar=True)
        if not self.stage2_max >= self.stage1_max:
            raise ValueError(f"stage2_max must be >= stage1_max, got {self.stage2_max} < {self.stage1_max}")


class Roles(NamedTuple):
    """What runs where for ``transient`` and ``reliable`` machines (Table 1, Figs 4–6).

    ``param_servs``: ParamServ shards (reliable machines, stage 1); ``active_ps``: ActivePSs
    (transient machines, stages 2–3); ``backup_ps``: BackupPSs (reliable machines, stages
    2–3); ``workers``: machines running workers; ``workers_on_reliable``: of which reliable;
    ``state_on_transient``: whether transient machines hold parameter state."""

    stage: int
    param_servs: int
    active_ps: int
    backup_ps: int
    workers: int
    workers_on_reliable: int
    state_on_transient: bool


def _counts(transient, reliable):
    t = np.asarray(transient)
    r = np.asarray(reliable)
    for name, a, lo in (("transient", t, 0), ("reliable", r, 1)):
        if not (np.issubdtype(a.dtype, np.integer) or (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)))):
            raise TypeError(f"{name} must be integer machine counts, got {a!r}")
        if np.any(a < lo):
            raise ValueError(f"{name} must be >= {lo} (TierML keeps at least one reliable machine, Sec 3.4), got {a!r}")
    return t.astype(np.int64), r.astype(np.int64)


def select_stage(transient: Any, reliable: Any, thresholds: Thresholds = Thresholds()) -> np.ndarray:
    """``int`` stage (1, 2 or 3) for ``transient`` and ``reliable`` machine counts
    (broadcast arrays), by the ratio ``transient / reliable`` (Sec 3.2)."""
    if not isinstance(thresholds, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
    t, r = _counts(transient, reliable)
    ratio = t / r
    return np.where(ratio <= thresholds.stage1_max, 1, np.where(ratio <= thresholds.stage2_max, 2, 3)).astype(np.int64)


def roles(transient: int, reliable: int, thresholds: Thresholds = Thresholds()) -> Roles:
    """The :class:`Roles` of one configuration (Secs 3.2–3.3): ActivePSs on half of the
    transient machines (at least one) in stages 2–3, BackupPSs on every reliable one."""
    stage = int(select_stage(transient, reliable, thresholds))
    t, r = int(transient), int(reliable)
    if stage == 1:
        return Roles(1, r, 0, 0, t + r, r, False)
    active = max(1, t // 2)
    on_rel = r if stage == 2 else 0
    return Roles(stage, 0, active, r, t + on_rel, on_rel, True)


# (ratio, slowdown) points stated in Sec 4.3 for MF on Cluster-A (Figs 7-9).
_STAGE1_POINTS = ((1.0, 1.0), (15.0, 7.0))
_STAGE2_POINTS = ((7.0, 1.0), (15.0, 1.18), (63.0, 1.95))


def _interp(x, pts):
    xs = np.asarray([p[0] for p in pts])
    ys = np.asarray([p[1] for p in pts])
    y = np.interp(x, xs, ys)
    slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
    return np.where(x > xs[-1], ys[-1] + slope * (x - xs[-1]), y)


def stage_slowdown(stage: Any, ratio: Any) -> np.ndarray:
    """Modelled time per iteration of ``stage`` at transient:reliable ``ratio``, relative to the
    traditional parameter server (all machines run a ParamServ and workers) on the same
    worker machines: linear interpolation of Sec 4.3's points (see the module docstring),
    constant outside them on the left, extrapolated on the right. Stage 3 is 1."""
    s = np.asarray(stage)
    x = np.asarray(ratio, np.float64)
    if np.any((s < 1) | (s > 3)):
        raise ValueError(f"stage must be 1, 2 or 3, got {stage!r}")
    if np.any(~np.isfinite(x) | (x < 0)):
        raise ValueError(f"ratio must be finite and >= 0, got {ratio!r}")
    return np.where(s == 1, _interp(x, _STAGE1_POINTS), np.where(s == 2, _interp(x, _STAGE2_POINTS), 1.0))


def step_seconds(step_time, transient: int, reliable: int, thresholds: Thresholds = Thresholds()) -> float:
    """Seconds per iteration on ``transient`` + ``reliable`` machines under TierML: the
    step-time model of the machines running workers times :func:`stage_slowdown`."""
    ro = roles(transient, reliable, thresholds)
    base = float(np.asarray(step_time(ro.workers)))
    return base * float(stage_slowdown(ro.stage, transient / reliable))


def flush_seconds(param_bytes: float, reliable: int, bandwidth_bps: float) -> float:
    """End-of-life flush (Sec 3.3): the ActivePSs' pending state, ``param_bytes``, sent to the
    BackupPSs on ``reliable`` machines, each receiving at ``bandwidth_bps`` bits/s."""
    va.check_real("param_bytes", param_bytes, lo=0.0, scalar=True)
    va.check_real("bandwidth_bps", bandwidth_bps, lo=0.0, lo_open=True, scalar=True)
    reliable = va.check_int("reliable", reliable, lo=1)
    return 8.0 * float(param_bytes) / (reliable * float(bandwidth_bps))


def push_period(push_every: int, seconds_per_step: float, push_s: float) -> int:
    """Iterations between background pushes to the BackupPS: ``push_every``, or more when one
    push (``push_s`` seconds on the network) takes longer than that many iterations (Sec 1:
    "streamed ... at a rate that the network bandwidth accommodates")."""
    push_every = va.check_int("push_every", push_every, lo=1)
    if seconds_per_step <= 0:
        raise ValueError(f"seconds_per_step must be > 0, got {seconds_per_step}")
    return max(push_every, int(math.ceil(push_s / seconds_per_step - 1e-9)))


def mttf_estimate(times_s: Any, prices: Any, bid: float, t: float, window_s: float, *, gate: bool = True) -> float:
    """Estimated mean time to eviction (Sec 3.4's MTTF) of a spot class at time ``t`` from its
    price history in ``[t − window_s, t]`` only (no look-ahead): the time the price was at or
    below ``bid`` divided by one plus the number of times it rose above it (an add-one
    smoothed exposure/failures estimate; ``window_s`` when it never did). ``0`` when the
    current price is above the bid (the class would not be granted) unless ``gate=False``."""
    ts = np.asarray(times_s, np.float64)
    ps = np.asarray(prices, np.float64)
    if ts.ndim != 1 or ts.shape != ps.shape or ts.size == 0:
        raise ValueError("times_s and prices must be 1-D of one length >= 1")
    va.check_real("window_s", window_s, lo=0.0, lo_open=True, scalar=True)
    i_now = max(int(np.searchsorted(ts, t, side="right")) - 1, 0)
    if gate and ps[i_now] > bid:
        return 0.0
    lo = t - window_s
    i0 = max(int(np.searchsorted(ts, lo, side="right")) - 1, 0)
    seg_t = ts[i0:i_now + 1]
    seg_p = ps[i0:i_now + 1]
    ends = np.append(seg_t[1:], t)
    dur = np.clip(ends - np.maximum(seg_t, lo), 0.0, None)
    below = seg_p <= bid
    up = float(dur[below].sum())
    crossings = int(np.sum(below[:-1] & ~below[1:]))
    return up / (crossings + 1)


def state_blocks(state: Any, ps_blocks: int) -> spt.Partition:
    """The ActivePS's ``ps_blocks`` parameter blocks on a real training ``state`` (Sec 3.3: the
    parameter server's state is cut into blocks spread over the ActivePSs): the rows of every
    params leaf (:func:`scarjax.scar.partition.by_row`, optimizer moments co-located, other aux
    leaves never lost) numbered leaf by leaf, row ``g`` in block ``g mod ps_blocks`` (blocks past
    the row count are empty). One server: the controller places the blocks (``server_of``)."""
    ps_blocks = va.check_int("ps_blocks", ps_blocks, lo=1)
    rows = spt.by_row(state, num_servers=1, key=None)
    blocks = jax.tree.map(lambda ids: np.where(np.asarray(ids) < 0, spt.NEVER, np.asarray(ids) % ps_blocks)
                          .astype(np.int32), rows.blocks)
    return spt.Partition(blocks, np.zeros(ps_blocks, np.int32), ps_blocks, 1)


# --------------------------------------------------------------------------------------
# The controller (host side)


@dataclasses.dataclass
class _Group:
    """An allocation: ``n`` machines of one class bought together (times: elapsed seconds)."""

    kind: str  # 'reliable' (the core), 'spot', 'fallback' (on-demand standing in for spot)
    cls: int  # market index
    ids: list  # machine labels
    blocks: list  # ledger entries: (ledger id, member mask), one machine each
    ready_t: float
    warn_t: np.ndarray  # per machine (inf: never)
    life_t: np.ndarray
    alive: np.ndarray  # in the computation
    billed: np.ndarray  # ledger entry open
    ps: np.ndarray = None  # per machine: hosts an ActivePS
    release_t: float = math.inf  # planned user release (end of a billing hour)
    joined: bool = False
    switch: bool = False  # replaces the current transient machines (class switch, end of fallback)
    first: int = 0  # machine index of ids[0] (the server index of the ActivePS block placement)
    node: np.ndarray | None = None  # per machine: the replayed trace's node (-1: none); None: no trace
    offer_t: float = -math.inf  # refused on a replayed trace: the market's next offer (elapsed)


def _copied(state: dict) -> dict:
    """A controller state (:meth:`_Controller.save`) with its mutable parts copied: the groups
    and their arrays, the lists, the stage set, the block placement (the caches ``_memo`` hold
    pure functions' values and are shared)."""
    out = dict(state)
    for k in ("groups", "retired"):
        out[k] = [dataclasses.replace(g, ids=list(g.ids), blocks=list(g.blocks), warn_t=g.warn_t.copy(),
                                      life_t=g.life_t.copy(), alive=g.alive.copy(), billed=g.billed.copy(),
                                      ps=None if g.ps is None else g.ps.copy(),
                                      node=None if g.node is None else g.node.copy())
                  for g in state[k]]
    out["offer_t"], out["trace_nodes"], out["stages"] = list(state["offer_t"]), list(state["trace_nodes"]), set(
        state["stages"])
    if state.get("server_of") is not None:
        out["server_of"] = state["server_of"].copy()
    out["_derived"] = {}  # derived from the groups: recomputed from the copies (a resumed draw changes their times)
    return out


_PLACEMENTS: dict = {}  # _placement's results by input (many draws repeat the same moves)
_PLACEMENTS_MAX = 4096
_REPLAY_MTTF: dict = {}  # a replayed trace's MTTF by process (id; the entry keeps the process alive)


def _market_mttf(market) -> float:
    """:meth:`Market.mttf_s`; a replayed trace's (:meth:`Replay.mttf_s`: renewal over the
    trace, independent of the start and of any draw) computed once per trace, not once per
    run (many draws share one trace at different starts)."""
    p = market.process
    if not isinstance(p, mk.Replay):
        return market.mttf_s()
    hit = _REPLAY_MTTF.get(id(p))
    if hit is None or hit[0] is not p:
        if len(_REPLAY_MTTF) >= 64:
            _REPLAY_MTTF.clear()
        hit = _REPLAY_MTTF[id(p)] = (p, market.mttf_s())
    return hit[1]


def _placement(so: np.ndarray, moving: np.ndarray, host: np.ndarray, seed_deal: int | None,
               seed_rebalance: int) -> np.ndarray:
    """The ActivePS blocks' new servers (``int64[B]``): the ``moving`` blocks dealt to the
    ``host`` machines (:func:`scarjax.ps.failures.deal`, seeded ``seed_deal``; none moving:
    ``None``), then :func:`scarjax.ps.elastic.rebalance` (seeded ``seed_rebalance``). Pure:
    results are kept by input, so draws that repeat a placement compute it once."""
    key = (so.dtype.str, so.tobytes(), moving.tobytes(), host.tobytes(), seed_deal, seed_rebalance)
    hit = _PLACEMENTS.get(key)
    if hit is None:
        out = deal(so, moving, host, None, seed_deal) if seed_deal is not None else so
        hit = np.asarray(ps_elastic.rebalance(None, out, host, seed_rebalance), np.int64)
        if len(_PLACEMENTS) >= _PLACEMENTS_MAX:
            _PLACEMENTS.clear()
        _PLACEMENTS[key] = hit
    return hit.copy()


def _revoke_plan(so: np.ndarray, alive: np.ndarray, reliable: np.ndarray, servers: list, warning: bool,
                 seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`scarjax.ps.tiers.plan_revoke` (seeded ``seed``), its results kept by input as
    :func:`_placement`'s (pure; many draws repeat the same revocation of the same placement)."""
    so = np.asarray(so)
    plan = ps_tiers.plan_revoke  # in the key: a replaced rule (a test's spy or planted violation) is called
    key = (plan, so.dtype.str, so.tobytes(), alive.tobytes(), reliable.tobytes(), tuple(servers), bool(warning), seed)
    hit = _PLACEMENTS.get(key)
    if hit is None:
        hit = tuple(np.asarray(x) for x in plan(so, alive, reliable, servers, warning=warning, key=seed))
        if len(_PLACEMENTS) >= _PLACEMENTS_MAX:
            _PLACEMENTS.clear()
        _PLACEMENTS[key] = hit
    return tuple(x.copy() for x in hit)


@functools.partial(jax.jit, static_argnums=(2,))
def _replay_pick(process, key, n, t, held):
    node, rev = process.pick(key, n, t, held)
    return node, rev.lifetime, rev.warning


def pick_nodes(process: Any, key: jax.Array, n: int, t: float, held: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(node int64, lifetime float64, warning float64)`` ``[n]``: ``n`` machines bought at
    market time ``t`` on the replayed trace ``process`` (a :class:`~scarjax.cluster.market.Replay`),
    none on the ``held`` nodes (``bool[K]``): :meth:`~scarjax.cluster.market.Replay.pick` in one
    compiled program (float32 values as :meth:`~scarjax.cluster.market.Market.revocations`
    computes them; with nothing held, its draws with the same key). ``node = -1`` and lifetime
    0: not granted (no free node)."""
    if not isinstance(process, mk.Replay):
        raise TypeError(f"process must be a market.Replay, got {type(process).__name__}")
    n = va.check_int("n", n, lo=1)
    va.check_real("t", t, scalar=True)
    held = np.asarray(held, bool)
    if held.shape != tuple(process.add_s.shape):
        raise ValueError(f"held must be bool[{process.add_s.shape[0]}] (one per trace node), got shape {held.shape}")
    node, life, warn = _replay_pick(process, key, n, jnp.float32(t), jnp.asarray(held))
    return (np.asarray(node, np.int64), np.asarray(life, np.float32).astype(np.float64),
            np.asarray(warn, np.float32).astype(np.float64))


_REVOCATION_DETAIL = re.compile(r"^(\d+) warned, (\d+) without warning$")


def warned_revocations(run: ck.ClusterRun) -> int:
    """The ``'revocation'`` events of a TierML run whose machines were all warned (evictions,
    Sec 3.3: the ActivePSs can flush). Every revocation is a ``'revocation'`` event, as in every
    policy (:meth:`~scarjax.cluster.clock.ClusterRun.count`); TierML's detail states its counts,
    ``'<w> warned, <f> without warning'``, and this counts those with ``f = 0``."""
    if not isinstance(run, ck.ClusterRun):
        raise TypeError(f"run must be a scarjax.cluster.clock.ClusterRun, got {type(run).__name__}")
    n = 0
    for _, kind, detail in run.events:
        m = _REVOCATION_DETAIL.match(detail) if kind == "revocation" else None
        n += bool(m) and m.group(2) == "0"
    return n


@functools.lru_cache(maxsize=4096)
def _stage_of(transient: int, reliable: int, thresholds: Thresholds) -> int:
    """:func:`select_stage` of one configuration, kept for every controller (a pure function of
    its arguments, asked at every event of every run)."""
    return int(select_stage(transient, reliable, thresholds))


def _next_hour_end(start: float, t: float) -> float:
    k = max(1, math.ceil((t - start) / _H - 1e-9))
    return start + k * _H


class _Controller:
    """TierML's elasticity controller (Sec 3.2, "Elasticity Controller") on the simulated
    clock: machine groups, the :class:`~scarjax.cluster.ledger.Ledger`, the BackupPS copy of
    the real training state and the :class:`~scarjax.cluster.trainer.Trainer`."""

    def __init__(self, job, markets, *, key, thresholds, push_every, param_bytes, bandwidth_bps,
                 flush_on_warning, recorder, ledger, trainer, ps_blocks=256, market_draws=None):
        self.job, self.markets = job, markets
        self.t0 = float(markets[0].start_time_s)
        self.key = key
        self.replay = [isinstance(m.process, mk.Replay) for m in markets]
        if market_draws is not None and any(self.replay) and not hasattr(market_draws, "pick"):
            market_draws = None  # a stand-in that cannot exclude held nodes: the market's own draws (same chain)
        self.market_draws = market_draws
        self.offer_t = [-math.inf] * len(markets)  # a replayed class waits for the market's next offer until then
        self.trace_nodes: list = []  # (ledger id, class, node) of each machine that ran on a replayed trace
        self.th = thresholds
        self.push_every = push_every
        self.param_bytes = float(param_bytes)
        self.bw = float(bandwidth_bps)
        self.flush_on_warning = flush_on_warning
        self.rec, self.ledger, self.trainer = recorder, ledger, trainer
        self.groups: list[_Group] = []
        self.retired: list[_Group] = []  # out of the computation, still billed to their end
        self.next_id = 0
        self.backup = trainer.snapshot()  # the BackupPS (or the ParamServs' state in stage 1)
        self.pushed_at = trainer.step
        self.since_push = 0
        self.rollbacks = 0
        self.lost_iterations = 0
        self.flushes = 0
        self.trained = 0
        self.futile = 0  # warnings/revocations in a row without a completed iteration
        self.at_start = False  # the last interrupt's machines were all under notice from their start
        self.stages: set[int] = set()
        self._prices: dict = {}
        # The ActivePS: ps_blocks parameter blocks placed on the machines electing ActivePSs
        # (machine index = server index), moved and lost by scarjax.ps's own plans.
        self.ps_blocks = int(ps_blocks)
        self.server_of: np.ndarray | None = None
        self._hosts: tuple = ()
        self._seed = 0
        self._blocks: spt.Partition | None = None  # the real state's blocks (state_blocks), built at first use
        # the stage, time per iteration and flush time of each machine count, computed once (pure
        # functions of the counts; the controller asks at every event)
        self._memo: dict = {}
        self._elected = None  # what _elect read when it last ran (it is idempotent: same input, same placement)
        # what is derived from the machine groups alone (the live counts and slowest speed, the next
        # warning, the next boundary event, the time before which handle_boundary has nothing to do),
        # computed once per change of the groups: every change calls _touch (the controller asks at
        # every pass, and most passes change nothing)
        self._derived: dict = {}

    # ---- saved state (a run resumed from another run's state) ---------------------
    #: What a controller is built with (the run's own: markets, clock, draws, recorder, ledger,
    #: trainer, options), not its state between two passes of :func:`_run_loop`.
    _OWN = frozenset({"job", "markets", "t0", "key", "replay", "market_draws", "th", "push_every", "param_bytes",
                      "bw", "flush_on_warning", "rec", "ledger", "trainer", "ps_blocks"})

    def save(self) -> dict:
        """The controller's state between two passes of :func:`_run_loop` (machine groups,
        counters, BackupPS snapshot, ActivePS placement, caches), copied: :meth:`adopt` puts
        it into another controller, which then runs on as this one would from here (an
        attribute added to the controller is state unless named in :attr:`_OWN`; a mutable one
        needs its copy in :func:`_copied`)."""
        return _copied({k: v for k, v in self.__dict__.items() if k not in self._OWN})

    def adopt(self, state: dict) -> None:
        """Take a :meth:`save`'d state (a copy of it: one state serves many controllers)."""
        self.__dict__.update(_copied(state))

    def _touch(self) -> None:
        """Forget what was derived from the machine groups: called after every change to them
        (a machine joins, leaves, is released or revoked; a group is bought or pruned; the
        caller changed a group's times), before anything reads it again."""
        self._derived = {}

    # ---- machines ---------------------------------------------------------------
    def _draw(self):
        self.key, k = jax.random.split(self.key)
        return k

    def _startup(self, cls: int) -> float:
        """One new machine's start-up delay in market ``cls`` (the next key of the chain)."""
        if self.market_draws is not None:
            return self.market_draws.startup(cls)
        return float(self.markets[cls].startup_s(self._draw(), 1)[0])

    def _revocations(self, cls: int, n: int, t: float) -> tuple[np.ndarray, np.ndarray]:
        """``n`` spot machines' ``(lifetime, warning)`` bought at market time ``t`` (the next key)."""
        if self.market_draws is not None:
            return self.market_draws.revocations(cls, n, t)
        return self.markets[cls].revocations(self._draw(), n, t)

    def held(self, cls: int, t: float) -> np.ndarray:
        """``bool[K]``: the nodes of replayed class ``cls`` that the run's machines hold at
        elapsed ``t``: running or under notice (billed, not yet revoked or released), or
        requested and not yet started (their node is reserved from the request)."""
        held = np.zeros(int(self.markets[cls].process.add_s.shape[0]), bool)
        for g in self.groups + self.retired:
            if g.cls != cls or g.node is None:
                continue
            on = g.billed if g.joined else g.life_t > g.ready_t
            on = on & (g.node >= 0) & (np.minimum(g.life_t, g.release_t) > t)
            held[g.node[on]] = True
        return held

    def _pick(self, cls: int, n: int, t: float, held: np.ndarray):
        """``n`` machines of replayed class ``cls`` at market time ``t``, not on ``held`` nodes
        (the next key of the chain): ``(node, lifetime, warning)``."""
        if self.market_draws is not None:
            node, life, warn = self.market_draws.pick(cls, n, t, held)
        else:
            return pick_nodes(self.markets[cls].process, self._draw(), n, t, held)
        return (np.asarray(node, np.int64), np.asarray(life, np.float32).astype(np.float64),
                np.asarray(warn, np.float32).astype(np.float64))

    def next_offer(self, cls: int, t: float) -> float:
        """The first elapsed time after ``t`` at which replayed class ``cls`` can offer a
        machine that it cannot at ``t`` (all present nodes held): a node added, or a held node
        released by the run before its removal (``inf``: never)."""
        add = np.asarray(self.markets[cls].process.add_s, np.float64) - self.t0
        rem = np.asarray(self.markets[cls].process.remove_s, np.float64) - self.t0
        later = add[(add > t) & (rem > add)]
        best = float(later.min()) if later.size else math.inf
        for g in self.groups + self.retired:
            if g.cls == cls and g.node is not None and t < g.release_t < best and np.any(g.life_t > g.release_t):
                best = g.release_t
        return best

    def buy(self, kind: str, cls: int, n: int, t: float, *, delay: float | None = None,
            switch: bool = False) -> _Group:
        """Request ``n`` machines of ``kind`` from market ``cls`` at elapsed ``t``; they join
        after the market's start-up delay; spot machines get their revocations drawn from the
        market's process, bought when they start. ``switch``: on joining they take over from the
        current transient machines (which keep running workers to their billing hour's end)."""
        m = self.markets[cls]
        ready = t + (self._startup(cls) if delay is None else float(delay))
        ids = [f"{kind}{self.next_id + i}" for i in range(n)]
        gid = self.next_id
        self.next_id += n
        node, offer = None, -math.inf
        if kind == "spot" and self.replay[cls]:
            node, life, warn = self._pick(cls, n, self.t0 + ready, self.held(cls, ready))
            if not np.all(life > 0):  # refused: the class waits for the market's next offer
                self.offer_t[cls] = self.next_offer(cls, ready)
            offer = self.offer_t[cls]
            life, warn = ready + life, ready + warn
        elif kind == "spot":
            life, warn = self._revocations(cls, n, self.t0 + ready)
            life, warn = ready + life, ready + warn
        else:
            life = warn = np.full(n, math.inf)
        life = np.asarray(life, np.float64)
        # one ledger entry per machine (the ledger bills machines that start and end together once)
        blocks = [(f"{kind}{gid}.{j}", np.arange(n) == j) for j in range(n)]
        g = _Group(kind, cls, ids, blocks, ready, np.asarray(warn, np.float64), life, np.zeros(n, bool),
                   np.zeros(n, bool), ps=np.zeros(n, bool), switch=switch, first=gid, node=node,
                   offer_t=offer)
        self.groups.append(g)
        self._touch()
        self.rec.event(t, "request", f"{n} {kind} {m.machine.name} (ready at {ready:.0f} s)")
        return g

    def _join(self, g: _Group, t: float):
        m = self.markets[g.cls]
        tier = "transient" if g.kind == "spot" else "reliable"
        granted = g.life_t > g.ready_t
        for j in np.flatnonzero(granted).tolist():  # blocks[j]: machine j alone (buy)
            self.ledger.start(g.blocks[j][0], self.t0 + g.ready_t, price=self._price(g), tier=tier, billing=m.billing)
        g.billed[:] = granted
        g.alive[:] = granted
        g.joined = True
        self._touch()
        if g.node is not None:
            self.trace_nodes += [(bid, g.cls, int(nd)) for (bid, _), nd, ok in zip(g.blocks, g.node, granted) if ok]
        if g.node is not None and not granted.all():
            self.rec.event(t, "wait", f"{int((~granted).sum())} {g.kind} {m.machine.name}: no free trace node, "
                           f"waiting for the next offer at {g.offer_t:.0f} s")
        if not granted.any():
            if g.node is None:
                self.rec.event(t, "not_granted", f"{len(g.ids)} {g.kind} {m.machine.name}: spot above the bid")
            return
        self.rec.event(t, "scale", f"+{int(granted.sum())} {g.kind} {m.machine.name} join")
        if g.kind == "spot" and g.switch:
            # Sec 3.4: the ActivePSs move to the new machines (background migration, Sec 3.3);
            # older spot machines keep running stateless workers until their billing hour ends.
            for o in self.groups:
                if o is not g and o.kind in ("spot", "fallback") and o.alive.any() and o.release_t == math.inf:
                    o.ps[:] = False
                    o.release_t = _next_hour_end(o.ready_t, t)
                    self.rec.event(t, "switch", f"{o.kind} {self.markets[o.cls].machine.name} kept as workers "
                                   f"until {o.release_t:.0f} s (end of its billing hour)")
            self._touch()
        self._elect()

    def _price(self, g: _Group):
        """The price of one machine of the group (each machine is its own ledger entry)."""
        m = self.markets[g.cls]
        return m.spot if g.kind == "spot" else float(m.machine.on_demand_price)

    def _live(self) -> tuple[int, int, float]:
        """(transient, reliable) machines in the computation and the slowest one's speed
        (``inf``: none), derived once per change of the groups."""
        got = self._derived.get("live")
        if got is None:
            tr = re = 0
            speed = math.inf
            for g in self.groups:
                k = g.alive.tolist().count(True)
                if g.kind == "spot":
                    tr += k
                else:
                    re += k
                if k:
                    speed = min(speed, float(self.markets[g.cls].machine.speed))
            got = self._derived["live"] = (tr, re, speed)
        return got

    def counts(self) -> tuple[int, int]:
        """(transient, reliable) machines in the computation."""
        tr, re, _ = self._live()
        return tr, re

    def stage(self) -> int:
        tr, re = self.counts()
        return _stage_of(tr, re, self.th)

    def pending(self, kind: str) -> int:
        return sum(len(g.ids) for g in self.groups if g.kind == kind and not g.joined)

    def seconds_per_step(self) -> float:
        tr, re, speed = self._live()
        if not tr + re:
            raise ValueError("no machine in the computation")
        got = self._memo.get(("step", tr, re, speed))
        if got is None:
            got = self._memo[("step", tr, re, speed)] = step_seconds(self.job.step_time, tr, re, self.th) / speed
        return got

    def flush_s(self) -> float:
        re = max(1, self.counts()[1])
        got = self._memo.get(("flush", re))
        if got is None:
            got = self._memo[("flush", re)] = flush_seconds(self.param_bytes, re, self.bw)
        return got

    # ---- events -----------------------------------------------------------------
    def next_interrupt(self) -> float:
        """The next warning (or unwarned revocation) of a machine in the computation."""
        best = self._derived.get("interrupt")
        if best is not None:
            return best
        best = math.inf
        for g in self.groups:  # Python floats over the few machines of each group (the same minimum)
            for a, w in zip(g.alive.tolist(), g.warn_t.tolist()):
                if a and w < best:
                    best = w
        self._derived["interrupt"] = best
        return best

    def next_boundary_event(self) -> float:
        """Arrivals, planned releases and provider ends of billed machines (handled at
        iteration boundaries)."""
        best = self._derived.get("boundary")
        if best is not None:
            return best
        best = math.inf
        for g in self.groups + self.retired:
            if not g.joined:
                best = min(best, g.ready_t)
            elif g.release_t < math.inf and True in g.alive.tolist():
                best = min(best, g.release_t)
            for b, life in zip(g.billed.tolist(), g.life_t.tolist()):  # Python floats: the same minimum
                if b and life < best:
                    best = life
        self._derived["boundary"] = best
        return best

    def _quiet_until(self) -> float:
        """The time ``q`` such that :meth:`handle_boundary` at any ``t`` with ``t + 1e-9 < q``
        changes nothing while the groups stay as they are: the first of a pending group's
        arrival, a planned release of a group with machines in the computation or billed, and
        a billed machine's provider end (its tests' thresholds; :meth:`_elect` and
        :meth:`_prune`, which it also calls, are idempotent)."""
        best = math.inf
        for g in self.groups + self.retired:
            if not g.joined:
                best = min(best, g.ready_t)
                continue
            billed = g.billed.tolist()
            if g.release_t < best and (True in g.alive.tolist() or True in billed):
                best = g.release_t
            for b, life in zip(billed, g.life_t.tolist()):
                if b and life < best:
                    best = life
        return best

    def handle_boundary(self, t: float):
        quiet = self._derived.get("quiet")
        if quiet is not None and t + 1e-9 < quiet:
            return  # nothing due and the groups unchanged since it last ran: it would change nothing
        for g in self.groups + self.retired:
            if not g.joined and g.ready_t <= t + 1e-9:
                self._join(g, t)
            if g.joined and g.release_t <= t + 1e-9 and (True in g.alive.tolist() or True in g.billed.tolist()):
                for j in np.flatnonzero(g.billed & (g.life_t > g.release_t)).tolist():  # blocks[j]: machine j
                    self.ledger.stop(g.blocks[j][0], self.t0 + g.release_t, revoked=False)
                    g.billed[j] = False
                g.alive[:] = False
                g.ps[:] = False
                self._touch()
                self.rec.event(t, "release", f"{len(g.ids)} {g.kind} released at the end of their billing hour")
            billed = g.billed.tolist()
            if True in billed:
                for j, (b, life) in enumerate(zip(billed, g.life_t.tolist())):  # blocks[j]: machine j
                    if not (b and life <= t + 1e-9):
                        continue
                    self.ledger.stop(g.blocks[j][0], self.t0 + life, revoked=True)
                    g.billed[j] = False
                    g.alive[j] = False
                    g.ps[j] = False
                    self._touch()
        self._elect()
        self._prune()
        self._derived["quiet"] = self._quiet_until()

    def _prune(self):
        """Move the groups out of the computation (joined, none alive) to :attr:`retired` while
        still billed, and forget them once not: their ledger entries and events stay; the
        controller's passes then cost the groups in play, not every group bought so far
        (machines re-bought at every warning)."""
        live = [g for g in self.groups if not g.joined or True in g.alive.tolist()]
        out = [g for g in self.groups if g.joined and True not in g.alive.tolist()]
        self.groups = live
        self.retired = [g for g in self.retired + out if True in g.billed.tolist()]
        self._touch()

    def _elect(self):
        """Place the ActivePSs (stages 2-3) on half of the transient machines in the
        computation (Sec 3.3), keeping those already placed and preferring the machines that
        are not being retired, newest first; none in stage 1."""
        seen = self._election_input()
        if seen == self._elected:
            return  # nothing it reads changed since it ran: the placement stands
        self._elect_now()
        self._elected = self._election_input()

    def _election_input(self) -> tuple:
        """Everything :meth:`_elect` and :meth:`_place` read: the groups in the computation
        (kind, machine indices, times, who is alive and who hosts an ActivePS) and the blocks'
        servers."""
        so = None if self.server_of is None else self.server_of.tobytes()
        return so, self._hosts, tuple((g.kind, g.first, len(g.ids), g.ready_t, g.release_t, g.alive.tobytes(),
                                       g.ps.tobytes()) for g in self.groups)

    def _elect_now(self):
        spots = [g for g in self.groups if g.kind == "spot"]
        if self.stage() == 1:
            for g in spots:
                g.ps[:] = False
            return
        tr, _ = self.counts()
        need = max(1, tr // 2)
        have = 0
        for g in spots:
            g.ps &= g.alive
            have += g.ps.tolist().count(True)
        order = sorted(spots, key=lambda g: (g.release_t < math.inf, -g.ready_t))
        for g in reversed(order):  # drop extras from the least preferred
            while have > need and g.ps.any():
                g.ps[np.flatnonzero(g.ps)[-1]] = False
                have -= 1
        for g in order:
            if have >= need:
                break  # the rest take nothing
            free = np.flatnonzero(g.alive & ~g.ps)
            take = free[:max(0, need - have)]
            g.ps[take] = True
            have += take.size
        self._place()

    def _masks(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(alive, reliable, host)`` over machine indices: in the computation, on-demand
        (never revoked), electing an ActivePS."""
        alive, reliable, host = (np.zeros(self.next_id, bool) for _ in range(3))
        for g in self.groups:
            sl = slice(g.first, g.first + len(g.ids))
            alive[sl], host[sl], reliable[sl] = g.alive, g.ps, g.kind != "spot"
        return alive, reliable, host

    def _next_seed(self) -> int:
        self._seed += 1
        return self._seed

    def _place(self):
        """Keep the ActivePS blocks on the ActivePS machines, as the parameter server moves
        them: blocks off the hosts are dealt to them (:func:`scarjax.ps.failures.deal`, as
        :func:`scarjax.ps.elastic.remove_servers`), then new hosts take blocks from the most
        loaded ones (:func:`scarjax.ps.elastic.rebalance`, as ``add_servers``). None in stage 1
        (the ParamServs on the reliable machines hold the state)."""
        hosts = []  # the host machines' indices (the groups' index ranges are disjoint)
        for g in self.groups:
            if True in g.ps.tolist():
                hosts += (g.first + np.flatnonzero(g.ps)).tolist()
        hosts = tuple(sorted(hosts))
        if not hosts:
            self.server_of, self._hosts = None, ()
            return
        if hosts == self._hosts and self.server_of is not None:
            return
        _, _, host = self._masks()
        so = np.zeros(self.ps_blocks, np.int64) if self.server_of is None else self.server_of
        moving = np.ones(so.size, bool) if self.server_of is None else ~host[so]
        seed_deal = self._next_seed() if moving.any() else None
        self.server_of = _placement(so, moving, host, seed_deal, self._next_seed())
        self._hosts = hosts

    def current_class(self) -> int:
        """The spot class holding the ActivePSs (-1 if none)."""
        best = None
        for g in self.groups:
            if g.kind == "spot" and g.ps.any() and g.release_t == math.inf:
                best = g
        return -1 if best is None else best.cls

    def handle_interrupt(self, t: float) -> float:
        """Warnings and revocations due at ``t`` (Sec 3.3). Evictions (warned, with enough lead
        for the flush): the ActivePSs flush their end-of-life state to the BackupPSs and nothing
        is lost. Failures and effective failures of machines holding ActivePS state: their
        blocks of the real training state are rolled back to the BackupPS copy
        (:meth:`_reload`). Returns the seconds the flush takes (0 if none)."""
        self.futile += 1
        stage_before = self.stage()
        flush_s = self.flush_s()
        state_hit = False
        state_lost = None  # bool[ps_blocks]: the blocks lost (none: None)
        warned_n = failed_n = 0
        saved, failed, dues = [], [], []
        self.at_start = True
        for g in self.groups:
            due = g.alive & (g.warn_t <= t + 1e-9)
            if not due.any():
                continue
            dues.append((g, due))
            self.at_start &= bool(np.all(g.warn_t[due] <= g.ready_t + 1e-9))
            lead = g.life_t[due] - t
            warned = lead > 1e-9
            hosts = g.ps[due]
            if stage_before > 1 and hosts.any():
                ok = warned & (lead >= flush_s) if self.flush_on_warning else np.zeros_like(warned)
                idx = g.first + np.flatnonzero(due)
                saved += idx[hosts & ok].tolist()
                failed += idx[hosts & ~ok].tolist()
            warned_n += int(warned.sum())
            failed_n += int((~warned).sum())
        if (saved or failed) and self.server_of is not None:
            # the parameter server's rule (scarjax.ps.tiers.plan_revoke): warned ActivePSs flush
            # and migrate their blocks; the blocks of the others are lost
            state_hit = True
            alive, reliable, _ = self._masks()
            so = self.server_of
            if saved:
                so, alive, _ = _revoke_plan(so, alive, reliable, saved, True, self._next_seed())
            if failed:
                so, alive, lost = _revoke_plan(so, alive, reliable, failed, False, self._next_seed())
                state_lost = lost if lost.any() else None
            self.server_of = np.asarray(so, np.int64)
        for g, due in dues:
            g.alive[due] = False
            g.ps[due] = False
        self._touch()
        # every revocation is a 'revocation' event, as in every policy; the detail says how many were warned
        self.rec.event(t, "revocation", f"{warned_n} warned, {failed_n} without warning")
        extra = 0.0
        if state_lost is not None:
            lost = self.trainer.step - self.pushed_at
            self._reload(state_lost)
            self.rollbacks += 1
            self.lost_iterations += lost
            self.rec.event(t, "rollback", f"ActivePS state lost: {int(state_lost.sum())} of {state_lost.size} blocks "
                           f"back to the BackupPS state of iteration {self.pushed_at} ({lost} iterations of their "
                           "updates lost)")
        elif state_hit:
            self.backup = self.trainer.snapshot()  # end-of-life flush: nothing lost
            self.pushed_at = self.trainer.step
            self.flushes += 1
            extra = flush_s
            self.rec.event(t, "flush", f"end-of-life flush to the BackupPS(s): {flush_s:.2f} s")
        self.since_push = 0
        self._elect()
        return extra

    def _reload(self, lost: np.ndarray):
        """Roll the lost blocks (``bool[ps_blocks]``) of the real training state back to the
        BackupPS copy, :func:`scarjax.ps.tiers.reload_lost`: the blocks of the surviving
        ActivePSs keep their values and the iteration counter goes on (the workers' clock;
        ``ps.tiers.revoke`` likewise). A trainer stand-in whose snapshots are not states
        gives them through ``state_at``."""
        state_at = getattr(self.trainer, "state_at", None)
        cur, backup = self.trainer.snapshot(), self.backup
        if state_at is not None:
            cur, backup = state_at(cur), state_at(backup)
        if self._blocks is None:
            self._blocks = state_blocks(cur, self.ps_blocks)
        self.trainer.restore(ps_tiers.reload_lost(cur, backup, self._blocks, lost), self.trainer.step)

    # ---- training ---------------------------------------------------------------
    def train(self, n: int, t: float, st: float) -> tuple[float, float]:
        step0 = self.trainer.step
        self.stages.add(self.stage())
        losses = self.trainer.train(n)
        self.trained += n
        self.futile = 0
        self.since_push += n
        t_end = self.rec.interval(t, st, losses, step0)
        return t_end, float(losses[-1])

    def after_chunk(self, st: float):
        """Background push to the BackupPS (stages 2-3) at the rate the network allows; in
        stage 1 the ParamServs on reliable machines are the state itself."""
        if self.stage() == 1:
            self.backup = self.trainer.snapshot()
            self.pushed_at = self.trainer.step
            self.since_push = 0
            return
        flush = self.flush_s()
        every = self._memo.get(("push", st, flush))
        if every is None:
            every = self._memo[("push", st, flush)] = push_period(self.push_every, st, flush)
        if self.since_push >= every:
            self.backup = self.trainer.snapshot()
            self.pushed_at = self.trainer.step
            self.since_push = 0

    def stop_all(self, t: float):
        for g in self.groups + self.retired:
            for j in np.flatnonzero(g.billed).tolist():  # blocks[j]: machine j alone (buy)
                self.ledger.stop(g.blocks[j][0], self.t0 + t, revoked=False)
            g.billed[:] = False
            g.alive[:] = False
        self._touch()


def _due_by(t_event: float, horizon_s: float) -> float:
    """An event's time if it falls before the horizon, else ``inf``: the run's clock stops at
    its horizon, so a warning, revocation or flush due at or after it is never reached."""
    return t_event if t_event < horizon_s else math.inf


def _run_loop(ctl: _Controller, t: float, *, horizon_s: float, check=None, check_every_s: float = math.inf,
              target_loss: float = -math.inf, max_steps: int, chunk: int, resume: tuple | None = None,
              on_pass=None) -> float:
    """Advance real training and the events until the horizon, the target loss or
    ``max_steps`` executed iterations (redone ones included, as every policy counts them);
    returns the elapsed time at the end, never past ``horizon_s`` (an iteration that would end
    after it is not run, a flush under way at the horizon is cut off there).

    Arrivals, releases and the controller's checks take effect between iterations or, when
    one falls inside an iteration, at that time with the iteration's work done so far kept
    (the rest runs at the new configuration's pace: new workers take over data, Sec 3.3).
    A warning or revocation inside an iteration keeps its work too (the survivors take over the
    revoked workers' data), unless it rolls the state back.

    ``on_pass(t, frac, next_check)`` (optional) is called before each pass with the loop's
    state; ``resume=(frac, next_check)``: the loop goes on from a pass's state (the controller
    holding the state saved there, :meth:`_Controller.save`, and the points before it)."""
    if resume is None:
        next_check = t + check_every_s if check is not None else math.inf
        frac = 0.0  # fraction of the iteration in progress already done
        ctl.rec.point(t, ctl.trainer.loss(), ctl.trainer.step)
    else:
        frac, next_check = resume
    while t < horizon_s - 1e-9 and ctl.trained < max_steps:  # executed iterations (redone ones count)
        if on_pass is not None:
            on_pass(t, frac, next_check)
        ctl.handle_boundary(t)
        if t >= next_check - 1e-9:
            check(ctl, t)
            next_check = t + check_every_s
            ctl.handle_boundary(t)
        if ctl.counts()[1] == 0:
            raise RuntimeError("no reliable machine in the computation")
        st = ctl.seconds_per_step()
        first = (1.0 - frac) * st  # time to finish the iteration in progress
        t_int = _due_by(ctl.next_interrupt(), horizon_s)
        if t_int < t + first - 1e-9:
            # the survivors take over the revoked machines' data (Sec 3.3): the iteration in
            # progress goes on, unless the state is rolled back
            if t_int > t:
                frac += (t_int - t) / st
                t = t_int
            before = ctl.rollbacks
            extra = ctl.handle_interrupt(t)
            why = po.futile_give_up(ctl.futile)
            if why:  # the policies' stated give-up: machines that go before an iteration, forever
                ctl.rec.event(t, "give_up", why)
                break
            if ctl.rollbacks != before:
                frac = 0.0
            if extra or ctl.rollbacks != before:
                t = min(t + extra, horizon_s)  # a flush under way at the horizon is cut off there
                ctl.rec.point(t, ctl.trainer.loss(), ctl.trainer.step)
            if check is not None and not ctl.at_start:
                check(ctl, t)  # replace the lost machines at once (Sec 3.3)
            # machines under notice from their start (a lifetime within the warning) are replaced
            # at the next check: re-bought at once, their successors would be too, and the clock
            # would stand still
            continue
        t_bound = min(ctl.next_boundary_event(), next_check, horizon_s)
        if t_bound < t + first - 1e-9:
            frac += (t_bound - t) / st
            t = t_bound
            continue
        n = min(chunk, max_steps - ctl.trained)
        if t_int < math.inf:
            n = min(n, 1 + int(math.floor((t_int - t - first) / st + 1e-9)))
        if t_bound < math.inf:
            n = min(n, 1 + int(math.floor((t_bound - t - first) / st + 1e-9)))
        n = max(n, 1)
        while n > 0 and (t + first - st) + n * st > horizon_s:  # iterations end by the horizon (as recorded)
            n -= 1
        if n == 0:  # the iteration in progress would end after the horizon: the run ends there
            frac += (horizon_s - t) / st
            t = horizon_s
            continue
        t, last = ctl.train(n, t + first - st, st)
        frac = 0.0
        ctl.after_chunk(st)
        if last <= target_loss:
            break
    return t


# --------------------------------------------------------------------------------------
# The policy


def _class_bid(m) -> float:
    p = m.process
    return float(p.bid) if isinstance(p, mk.PriceDriven) else float(m.machine.on_demand_price)


def tierml(job, market, *, key, horizon_s: float, reliable: int = 1, transient: int = 63,
           alternatives: Sequence[Any] = (), thresholds: Thresholds = Thresholds(), push_every: int = 4,
           param_bytes: float | None = None, bandwidth_bps: float = 1e9, switch_factor: float = 2.0,
           mttf_window_s: float = 24 * _H, check_every_s: float = 300.0, proactive: bool = True,
           flush_on_warning: bool = True, chunk: int = 8, train_key: Any = 0, init_state=None,
           trainer: Any = None, ps_blocks: int = 256, market_draws: Any = None, deferred: bool = False):
    """TierML (Secs 3.2–3.4) on ``market`` and the other spot classes ``alternatives``: returns a
    :class:`~scarjax.cluster.clock.ClusterRun` (``meta``: rollbacks, lost and trained
    iterations, flushes, the stages used).

    Args:
      job: the :class:`~scarjax.cluster.clock.Job`: real training of ``job.algorithm`` until
        ``job.target_loss`` or ``job.max_steps``; ``job.step_time`` of the machines running
        workers gives the time per iteration (times :func:`stage_slowdown`).
      market: a :class:`~scarjax.cluster.market.Market`; the reliable machines are its
        on-demand machines. Its spot class is granted while the spot price is at most the
        bid: the on-demand price (Sec 3.4; a ``price_driven`` process carries its bid,
        build it with ``bid=on_demand``).
      key: PRNG key of the market draws (start-up delays, revocations); ``train_key`` (default
        0) that of the training, as in :mod:`scarjax.cluster.policies` (two policies on one
        ``train_key`` train the same job).
      horizon_s: simulated seconds at most.
      reliable, transient: machines of each tier (Fig 1: 1 + 63).
      alternatives: other spot classes (Markets with the same ``start_time_s``) for the choice
        of class and proactive switching (Sec 3.4, 4.6).
      thresholds: the stage thresholds.
      push_every: background push period in iterations (at least; :func:`push_period`).
      param_bytes: the parameter state's size on the wire (``None``: the real state's
        bytes); bandwidth_bps: what each reliable machine receives (1 Gbps, Sec 4.1).
      switch_factor: switch when another class's MTTF estimate is this many times higher;
        mttf_window_s: the estimate's trailing window; check_every_s: how often the controller
        looks; proactive: enable class switching.
      flush_on_warning: ``False`` ablates the end-of-life flush (a warned revocation of the
        ActivePSs then rolls back like a failure).
      chunk: iterations per training call at most.
      ps_blocks: parameter blocks of the ActivePS placed over the ActivePS machines (the
        placement and the loss rule are :mod:`scarjax.ps`'s; the module docstring); with at
        least as many blocks as ActivePSs every ActivePS holds state.
      trainer: a stand-in for the :class:`~scarjax.cluster.trainer.Trainer` (``step``, ``train``,
        ``snapshot``, ``restore``, ``loss``, and ``state_at(snapshot)`` -> the state when its
        snapshots are not states; ``None``: a real one from ``train_key`` and ``init_state``),
        e.g. :mod:`scarjax.cluster.draws`' shared trajectory of many draws.
      market_draws: a stand-in for the market draws of ``key`` (``startup(cls) -> float`` and
        ``revocations(cls, n, t) -> (lifetime, warning)``, each taking the next key of the chain
        ``key, k = split(key)`` as :meth:`~scarjax.cluster.market.Market.startup_s` and
        :meth:`~scarjax.cluster.market.Market.revocations` would; ``None``: those calls), e.g.
        :mod:`scarjax.cluster.draws`' tables drawn for many draws in one program. On a replayed
        trace it also needs ``pick(cls, n, t, held) -> (node, lifetime, warning)``
        (:meth:`~scarjax.cluster.market.Replay.pick` with the chain's next key, excluding the
        ``held`` nodes); a stand-in without it is not used there (the market's own draws, the
        same chain of keys: the same run).
      deferred: ``True``: the run is returned unbilled (``dollars``, ``cost_by_tier``,
        ``free_seconds`` ``None``) for :func:`scarjax.cluster.clock.settle` to bill many runs in
        one vectorised call (the same values).
    """
    return _tierml(job, market, key=key, horizon_s=horizon_s, reliable=reliable, transient=transient,
                   alternatives=alternatives, thresholds=thresholds, push_every=push_every, param_bytes=param_bytes,
                   bandwidth_bps=bandwidth_bps, switch_factor=switch_factor, mttf_window_s=mttf_window_s,
                   check_every_s=check_every_s, proactive=proactive, flush_on_warning=flush_on_warning, chunk=chunk,
                   train_key=train_key, init_state=init_state, trainer=trainer, ps_blocks=ps_blocks,
                   market_draws=market_draws, deferred=deferred)


def _tierml(job, market, *, key, horizon_s, reliable, transient, alternatives, thresholds, push_every, param_bytes,
            bandwidth_bps, switch_factor, mttf_window_s, check_every_s, proactive, flush_on_warning, chunk, train_key,
            init_state, trainer, ps_blocks, market_draws, deferred, on_pass=None, resume=None):
    """:func:`tierml` (the same arguments, all given) with two hooks for runs resumed from
    another run's state (:mod:`scarjax.cluster.draws`' draws resumed from a template run):
    ``on_pass(ctl, t, frac, next_check)`` before every pass of the main loop
    (:func:`_run_loop`; ``ctl.save()`` is the controller's state there), and ``resume(ctl) ->
    (t, frac, next_check)``: instead of the initial purchases, the controller is put into a
    saved state (``ctl.adopt``, the caller's own changes) and the loop goes on from there."""
    reliable = va.check_int("reliable", reliable, lo=1)
    transient = va.check_int("transient", transient, lo=0)
    push_every = va.check_int("push_every", push_every, lo=1)
    chunk = va.check_int("chunk", chunk, lo=1)
    ps_blocks = va.check_int("ps_blocks", ps_blocks, lo=1)
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("switch_factor", switch_factor, lo=1.0, scalar=True)
    va.check_real("check_every_s", check_every_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("mttf_window_s", mttf_window_s, lo=0.0, lo_open=True, scalar=True)
    if not isinstance(thresholds, Thresholds):
        raise TypeError(f"thresholds must be a Thresholds, got {type(thresholds).__name__}")
    markets = [market, *alternatives]
    for i, m in enumerate(markets):
        if not isinstance(m, mk.Market):
            raise TypeError(f"{'market' if i == 0 else f'alternatives[{i - 1}]'} must be a market.Market, "
                            f"got {type(m).__name__}")
        if m.start_time_s != market.start_time_s:
            raise ValueError(f"alternatives[{i - 1}].start_time_s={m.start_time_s} differs from the market's "
                             f"{market.start_time_s}: the classes share one clock")
    k_ctl = core.as_key(key)
    if trainer is None:
        trainer = Trainer(job.algorithm, train_key, init_state=init_state)
    if param_bytes is None:
        param_bytes = float(sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(trainer.state.params)))
    ledger = Ledger(deferred=bool(deferred))  # deferred: the charges too, computed with the bills
    rec = ck.Recorder("tierml", ledger, market.start_time_s, deferred=bool(deferred))
    ctl = _Controller(job, markets, key=k_ctl, thresholds=thresholds, push_every=push_every,
                      param_bytes=param_bytes, bandwidth_bps=bandwidth_bps, flush_on_warning=flush_on_warning,
                      recorder=rec, ledger=ledger, trainer=trainer, ps_blocks=ps_blocks, market_draws=market_draws)
    series = {}  # the market prices the controller watches (the process's series when price-driven)
    for i, m in enumerate(markets):
        sp = m.process.series if isinstance(m.process, mk.PriceDriven) else m.spot
        if isinstance(sp, mk.PriceSeries):
            series[i] = (np.asarray(sp.times_s, np.float64), np.asarray(sp.prices, np.float64))

    def price(i, t):
        m = markets[i]
        if i in series:
            ts, ps = series[i]
            return float(ps[max(int(np.searchsorted(ts, ctl.t0 + t, side="right")) - 1, 0)])
        return float(m.price_at("transient", ctl.t0 + t))

    fixed_mttf: dict = {}  # a class without a price series: its MTTF, the same at every check

    def mttf(i, t):
        if i in series:
            return mttf_estimate(*series[i], _class_bid(markets[i]), ctl.t0 + t, mttf_window_s)
        if i not in fixed_mttf:
            fixed_mttf[i] = min(_market_mttf(markets[i]), mttf_window_s)
        return fixed_mttf[i]

    def best_class(t):
        """``(class, MTTF)``: among the granted classes (price <= bid), the cheapest of those
        whose MTTF estimate is within ``switch_factor`` of the highest (Sec 3.4: the class with
        the highest MTTF, "often the cheapest option"; a class is only worth a switch when its
        MTTF is ``switch_factor`` times higher); ``(-1, 0)`` if none is granted."""
        ok = [i for i, m in enumerate(markets) if price(i, t) <= _class_bid(m)]
        if not ok:
            return -1, 0.0
        est = {i: mttf(i, t) for i in ok}
        top = max(est.values())
        near = [i for i in ok if est[i] * switch_factor >= top]
        best = min(near, key=lambda i: (price(i, t), -est[i]))
        return best, est[best]

    def acquire(t):
        """Top the transient tier up with the best spot class, else on-demand stand-ins
        (Sec 3.4: "transitions to using on-demand resources")."""
        keep = sum(int(g.alive.sum()) for g in ctl.groups if g.kind in ("spot", "fallback") and g.release_t == math.inf)
        n = transient - keep - ctl.pending("spot") - ctl.pending("fallback")
        if n <= 0:
            return
        cls, _ = best_class(t)
        if cls >= 0 and t < ctl.offer_t[cls]:
            return  # a replayed class refused the last purchase: wait for its next offer
        if cls >= 0:
            ctl.buy("spot", cls, n, t)
        else:
            ctl.rec.event(t, "fallback", "spot above the bid in every class: on-demand machines instead")
            ctl.buy("fallback", 0, n, t)

    def check(c, t):
        if ctl.pending("spot"):
            return
        fb = [g for g in ctl.groups if g.kind == "fallback" and g.alive.any() and g.release_t == math.inf]
        cls, there = best_class(t)
        if cls >= 0 and t < ctl.offer_t[cls]:
            return  # a replayed class refused the last purchase: wait for its next offer
        if fb and cls >= 0:
            ctl.rec.event(t, "spot_back", f"{markets[cls].machine.name} below the bid again")
            ctl.buy("spot", cls, transient, t, switch=True)
            return
        cur = ctl.current_class()
        if proactive and cur >= 0 and cls >= 0 and cls != cur:
            here = mttf(cur, t)
            if there > switch_factor * here:
                ctl.rec.event(t, "proactive", f"MTTF {markets[cls].machine.name} {there / _H:.1f} h > {switch_factor:g} x "
                              f"{markets[cur].machine.name} {here / _H:.1f} h")
                ctl.buy("spot", cls, transient, t, switch=True)
                return
        acquire(t)

    loop_state = None
    if resume is None:
        core_group = ctl.buy("reliable", 0, reliable, 0.0)
        if transient:
            acquire(0.0)  # the initial list holds reliable and transient machines (Sec 3.1)
        t = core_group.ready_t
        ctl.handle_boundary(t)
    else:
        t, *loop_state = resume(ctl)
    t = _run_loop(ctl, t, horizon_s=horizon_s, check=check if transient else None, check_every_s=check_every_s,
                  target_loss=float(job.target_loss), max_steps=int(job.max_steps), chunk=chunk,
                  resume=None if loop_state is None else tuple(loop_state),
                  on_pass=None if on_pass is None else functools.partial(on_pass, ctl))
    ctl.handle_boundary(t)
    ctl.stop_all(t)
    extra = {"trace_nodes": tuple(ctl.trace_nodes)} if any(ctl.replay) else {}
    return rec.finish(t, rollbacks=ctl.rollbacks, lost_iterations=ctl.lost_iterations, flushes=ctl.flushes,
                      trained_iterations=ctl.trained, param_bytes=float(param_bytes), stages=sorted(ctl.stages),
                      reliable=reliable, transient=transient, executed_steps=ctl.trained, **extra)


# --------------------------------------------------------------------------------------
# Scripted additions and removals (Fig 11)


class Scripted(NamedTuple):
    """Per-iteration record of :func:`scripted` (executed iteration ``i`` is index ``i - 1``):
    ``seconds`` (time of the iteration, flush included), ``stage``, ``workers`` (machines
    running workers), ``transient``, ``loss`` (real, after the iteration), and the
    :class:`~scarjax.cluster.clock.ClusterRun`."""

    seconds: np.ndarray
    stage: np.ndarray
    workers: np.ndarray
    transient: np.ndarray
    loss: np.ndarray
    run: Any


def scripted(job, *, key, iterations: int, reliable: int = 4, add: int = 60, add_at: int = 11,
             remove_at: int = 35, warned: bool = True, warning_s: float = mk.AWS_WARNING_S,
             thresholds: Thresholds = Thresholds(), param_bytes: float | None = None,
             bandwidth_bps: float = 1e9, on_demand_price: float = 1.0, spot_price: float = 0.1,
             train_key: Any = 0) -> Scripted:
    """TierML Fig 11's scenario on the real job: ``reliable`` machines; ``add`` transient
    machines, prepared in the background, join at the start of iteration ``add_at``
    (1-based) and are revoked during iteration ``remove_at`` (with a ``warning_s`` warning
    when ``warned``, at the iteration's start: end-of-life flush; else a failure half-way
    through it: its partial work is lost and the state rolls back to the BackupPS).

    The machines' time per iteration comes from ``job.step_time`` (machines running
    workers) times :func:`stage_slowdown`, plus the flush (:func:`flush_seconds`) in the
    iteration of the removal."""
    iterations = va.check_int("iterations", iterations, lo=1)
    reliable = va.check_int("reliable", reliable, lo=1)
    add = va.check_int("add", add, lo=0)
    add_at = va.check_int("add_at", add_at, lo=1)
    remove_at = va.check_int("remove_at", remove_at, lo=add_at + 1)
    machine = mk.MachineType("scripted", float(on_demand_price), float(spot_price))
    market = mk.Market(machine)
    k_ctl = core.as_key(key)
    trainer = Trainer(job.algorithm, train_key)
    if param_bytes is None:
        param_bytes = float(sum(np.asarray(x).nbytes for x in jax.tree_util.tree_leaves(trainer.state.params)))
    ledger = Ledger()
    rec = ck.Recorder("tierml-scripted", ledger, 0.0)
    ctl = _Controller(job, [market], key=k_ctl, thresholds=thresholds, push_every=1, param_bytes=param_bytes,
                      bandwidth_bps=bandwidth_bps, flush_on_warning=True, recorder=rec, ledger=ledger,
                      trainer=trainer)
    ctl.buy("reliable", 0, reliable, 0.0, delay=0.0)
    ctl.handle_boundary(0.0)
    rec.point(0.0, trainer.loss(), 0)
    t = 0.0
    spot = None
    out = {k: [] for k in ("seconds", "stage", "workers", "transient", "loss")}
    i = 1
    while i <= iterations:
        t_start = t
        if i == add_at and add:
            spot = ctl.buy("spot", 0, add, t, delay=0.0)
            ctl.handle_boundary(t)
        extra = 0.0
        if i == remove_at and spot is not None:
            spot.warn_t[:] = t if warned else t + 0.5 * ctl.seconds_per_step()
            spot.life_t[:] = spot.warn_t + (warning_s if warned else 0.0)
            ctl._touch()
            wasted = 0.0 if warned else 0.5 * ctl.seconds_per_step()  # a failure half-way through the iteration
            extra = ctl.handle_interrupt(t + wasted) + wasted
            ctl.handle_boundary(t + wasted + (warning_s if warned else 0.0))
        tr, re = ctl.counts()
        st = ctl.seconds_per_step()
        t, last = ctl.train(1, t + extra, st)
        ctl.after_chunk(st)
        out["seconds"].append(t - t_start)
        out["stage"].append(int(select_stage(tr, re, thresholds)))
        out["workers"].append(roles(tr, re, thresholds).workers)
        out["transient"].append(tr)
        out["loss"].append(last)
        i += 1
    ctl.stop_all(t)
    run = rec.finish(t, rollbacks=ctl.rollbacks, lost_iterations=ctl.lost_iterations, flushes=ctl.flushes)
    return Scripted(*(np.asarray(out[k]) for k in ("seconds", "stage", "workers", "transient", "loss")), run)
