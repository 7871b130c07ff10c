"""The planner: the cheapest (or fastest) way to train a job on transient
machines, chosen by *predicting* every candidate plan instead of simulating it.

Given a job (:class:`~scarjax.cluster.jobprofile.JobProfile`: fault-free iterations to the
target ``K0``, linear rate ``c``, step time, checkpoint and restore times, optionally a Pollux
goodput profile), a market (:class:`~scarjax.cluster.marketmodel.MarketModel`: on-demand and
spot prices, revocation lifetimes and availability per machine type and bid, start-up delay,
billing; :meth:`~scarjax.cluster.marketmodel.MarketModel.from_market` reads it from the
simulator's own :class:`~scarjax.cluster.market.Market`) and an :class:`Objective` (expected cost, expected time, or cost
under a deadline; budget and machine limits), :func:`plan` scores a grid of candidates
(:func:`candidates`, thousands by default) with :func:`predict` (one ``jax.jit`` + ``vmap``
program) and returns the best feasible one with its runners-up (:class:`Plan`).

Candidates: the policy (``on_demand``, ``checkpoint_restart``, ``scar``, ``tierml``,
``sync_on_the_fly``: the cluster policies), the machine type, the bid, the number of machines
(and for TierML the transient:reliable split), the checkpoint period (a multiple of the
Young/Daly interval), SCAR's fraction ``r`` and priority rule, the batch size (when the
profile has a Pollux goodput profile) and, on a market sometimes short of machines, what the
plan does then (:data:`UNAVAILABLE`: fall back to on-demand machines, or wait). :func:`to_simulation` turns any candidate into the
policy call of the cluster simulator, so every prediction can be checked against it.

**The model** (every assumption is stated here; ``n`` transient machines, ``dt`` seconds per
iteration, ``K0`` iterations, ``s0`` start-up, ``δ`` a full checkpoint, ``ρ`` restore):

:A1: *Revocations.* Each transient machine slot is a renewal process with the market's lifetime
    distribution (:class:`MarketModel`: its CDF ``F`` and renewal function ``m(t) = E[N(t)]``
    on a grid, linear extrapolation at the rate ``1/MTTF`` beyond it; CM-DARE Eq 5's
    ``Pr(R_i) = F(duration)`` is the first term of ``m``). Independent machines: ``n m(T)``
    events over a run of length ``T``, each losing one machine; a *bulk* market (AWS 2015 spot,
    price-driven) revokes the whole allocation at once: ``m(T)`` events, each losing all.
    The count is treated as Poisson (its variance equals its mean) for the uncertainty. A
    *fallback* market (price-driven: the price is above the bid when the revocation happens,
    so the simulator's replacements are on-demand machines for good) has at most one event,
    with probability ``F(T)``, after which the fleet is on-demand.
:A2: *Time of a run* (CM-DARE Eq 4: ``T = start-up + K0 dt + checkpoints + revocations ×
    (recovery + lost work)``), solved as a fixed point ``T = A + μ(T) B`` (40 iterations, the
    events ``μ`` depending on ``T``):

    * on-demand: ``T = s0 + K0 dt``, no uncertainty;
    * checkpoint-restart: full checkpoints every ``K`` steps (``period ×`` the Young/Daly
      interval ``sqrt(2 δ MTTF_fleet)``, :func:`~scarjax.cluster.policies.young_daly_s`),
      exponential failures at the fleet rate ``λ = μ(T0)/T0``: the classic renewal result
      ``E[T] = s0 + (K0/K) (1/λ + R)(exp(λ L) − 1)`` with segment ``L = K dt + δ`` and restart
      ``R = s0 + ρ``; lost work per failure ``1/λ − L/(exp(λL) − 1)``;
    * SCAR: a fraction ``r`` of the blocks every ``round(r K)`` steps (each write ``r δ``: the
      same overhead as full checkpoints, thesis Sec 5.4.2), ``K`` the Young/Daly interval (the
      simulator fixes it); per event: reading the lost blocks (``ρ`` × the lost share), the
      replacement's start-up run on the survivors (``s0 (1 − dt(M)/dt(M−k))``; all lost: the
      job waits ``s0``) and the rework below;
    * TierML (Harlap et al. Secs 3.2–3.4): ``R`` reliable + ``n`` transient machines, the stage
      slowdown of :func:`~scarjax.cluster.tierml.stage_slowdown`, bid = on-demand; per event a
      flush of the parameters to the BackupPSs (``8 bytes / (R · 1 Gbps)``) when warned, a
      rollback of ``push_every / 2`` iterations when not, and the lost workers' share of
      ``s0``; while the price is above the bid TierML runs on-demand stand-ins (priced at the
      on-demand price for the fraction of time the spot class is unavailable);
    * Sync-on-the-fly (Zhao et al. Sec III): no rework (revoked workers flush their partial
      gradients), a barrier takes ``dt`` (stated: the step-time model stands for the barrier
      time), a revoked worker's share of the capacity is missing for ``restart_s`` (180 s).

:A3: *Rework of SCAR* (thesis **Thm 5.3.1**, Eq 5.6, with **Thm 5.4.2**): a revocation at step
    ``ℓ`` that loses a share ``p`` of uniformly assigned blocks (``p = k/M``) recovered from a
    running checkpoint of age ``a`` perturbs the iterate by ``δ'`` with ``E‖δ'‖ ≤ sqrt(p) ‖δ‖``
    (Thm 5.4.2, ``E‖δ'‖² = p‖δ‖²``, and Jensen), ``δ = w_{ℓ−a} − w_ℓ`` the full-recovery
    perturbation. Along a linearly convergent run ``‖w_{ℓ−a} − w_ℓ‖ ≤ D(a) d_{ℓ−a}`` with
    ``d_j ≤ c^j d₀`` (Eq 5.3), so ``c^{−ℓ} E‖δ'‖ ≤ g d₀`` with ``g = sqrt(p) E[D(A) c^{−A}]``
    — independent of ``ℓ``. ``D`` is the *measured drift* of the unperturbed run
    (:meth:`JobProfile.from_job`, per age): for the prediction the mean of
    ``‖w_ℓ − w_{ℓ−a}‖ / d_{ℓ−a}`` over the run (``drift_mean``: a revocation comes anywhere in
    it, so the expected rework takes the drift there on average), for the bound the largest
    (``drift``; a profile without ``drift_mean`` predicts the bound); unmeasured, the triangle
    inequality ``1 + c^a``. (The largest is set by the first iterations' fast transients, and
    predicting with it over-predicted SCAR's rework, most where every block is lost at once: the
    bulk revocations of price-driven markets; ``tests/cluster/test_planner_rework.py``.) Later
    perturbations start from
    the perturbed iterate (Lemma B.2.1: ``d_ℓ ≤ c^ℓ (d₀ + Δ_{ℓ−1})``), so after ``N`` events
    ``1 + Δ_T/d₀ ≤ (1 + g)^N`` and Thm 5.3.1 gives ``π ≤ N log(1 + g) / log(1/c)``; the
    expected rework is ``E[N] log(1 + g) / log(1/c)``. The age ``A``: uniform on ``[0, K]``
    for ``round_robin`` (each block saved every ``K`` steps) and ``priority`` (stated
    assumption: the priority rule's perturbation is at most round-robin's, as Thm 5.4.2's
    experiments Fig 5.8 show, not proven); geometric ``I·G``, ``G ~ Geom(r)``, for ``random``;
    never older than the revocation's step ``ℓ`` (``A_ℓ = min(A, ℓ)``: the running checkpoint
    starts at ``w⁽⁰⁾``, so a block not yet written at ``ℓ`` has age ``ℓ``), and the per-event
    rework ``log(1 + g(ℓ)) / log(1/c)`` is averaged over ``ℓ`` uniform on ``[0, K0]`` (A1's
    events fall anywhere in the run; capping at ``K0`` instead over-predicted SCAR's rework
    where the interval ``K`` is a sizeable share of the run, e.g. price-driven markets). On a
    fallback market (A5b) it is averaged over the step of the one revocation instead,
    ``ℓ = (τ − s0)⁺ / dt``, ``τ`` a lifetime given ``τ < R`` (``R = s0 + K0 dt``, lifetimes
    counted from the request; ``_AGES`` midpoint quantiles of ``F`` below ``F(R)``; a
    revocation during the start-up loses nothing): its time is known, and its lifetimes can
    be short beside the run (the uniform steps over-predicted SCAR's rework by about 30% where
    every start is revoked 20 minutes in, ``tests/cluster/test_planner_rework.py``).
    Checkpoint-restart's rework is the lost work itself (a consistent restart, Sec 5.4).
:A4: *Cost.* Machines are billed from the moment they run: the on-demand price, the spot price
    (mean over the planning window of the prices at or below the bid: AWS 2015 charges the
    market price), or GCE's preemptible price; per-second billing charges machine-seconds,
    hourly billing (AWS 2015) rounds a user-stopped machine's last hour up (deterministic
    for on-demand; ``+h/2`` in expectation for a transient fleet, variance ``h²/12`` per
    machine) and leaves a provider-revoked machine's partial hour free (``E[life mod h]``
    for an exponential life of the market's MTTF).
:A5: *Iterations.* ``K0`` (and ``c``) are measured once on the unperturbed job
    (:meth:`JobProfile.from_job`); with a Pollux goodput profile, the iterations at batch
    size ``b`` are ``K0 · b0 / (b · EFFICIENCY(b))`` (thesis Eq 3.3: the same number of
    useful examples) and the step time is the Pollux model at ``b``.
:A5b: *Price-driven (AWS 2015) markets.* The transient start is granted with probability
    ``avail`` (the share of the window's minutes at or below the bid), else the simulator's
    checkpoint-restart and SCAR buy on-demand machines for good (a mixture of the two paths);
    after a revocation the replacements are on-demand (A1's fallback), billed from the expected
    revocation time ``E[τ | τ < T]`` (``T`` the run without a revocation) to the end of the
    revoked run, which is longer by the revocation's cost (checkpoint-restart: the restart and
    the work lost since the last checkpoint at the revocation's time ``τ`` given ``τ < R``,
    ``E[(τ − s0)⁺ mod L]`` on the quantile intervals of ``F``: the whole progress when the
    interval is as long as the run, none during the start-up; half a segment, the uniform
    phase, is wrong there, ``tests/cluster/test_planner_rework.py``; SCAR: its per-event
    time, A3), hourly: half an hour of rounding
    per machine and at least one hour; the spot machines' whole hours before ``τ`` are billed
    (``max(τ/h − 1/2, 0)`` of them, hourly), the partial one free; per-second, the warning
    before the revocation at the price that revokes them (``MarketModel.revoked_price``). TierML pays the on-demand
    price for the share of time the class is unavailable. The Young/Daly interval of
    checkpoint-restart and SCAR comes from the window's MTTF by renewal over the price series
    (:meth:`scarjax.cluster.market.PriceDriven.mttf_s`, as the simulator's ``Market.mttf_s``)
    and is passed to the simulator (:func:`to_simulation`). Stated: ``avail`` and the lifetimes
    are those of the planning window; a market whose availability at the bid shifts between
    the planning and the evaluated window is mispredicted by the shift (planner_validation
    reports the error of a model fitted on the evaluated window itself beside it).
:A6: *Feasibility.* A candidate is feasible when its expected time is finite, within the
    deadline and the planning horizon (30 days), its expected cost within the budget, its
    machines within ``max_machines`` (and the profile's ``max_workers``), and — for a plan on
    transient machines — the spot price is strictly below on-demand (the simulator buys
    on-demand otherwise: with equal prices and possible revocations the plan is reliable-only).

:A4': *Rounding under a time error.* A transient plan's run time is uncertain beyond the
    revocation count (the market and step-time models are not exact): its hourly bill is the
    expectation of the whole-hour rounding over a normal relative time error
    :data:`TIME_REL_ERROR` (2%, stated; planner_validation measured 1.1% median, 4.9% p90), so
    a plan predicted just under a whole hour is charged the chance of crossing it. (The
    on-demand plan's time is exact in the simulator and is rounded exactly.)

:A7: *Availability* (a :attr:`~scarjax.cluster.marketmodel.MarketModel.limited` market: a
    replayed trace whose count of obtainable machines is sometimes below the plan's ``n``,
    measured by :class:`~scarjax.cluster.marketmodel.Availability` over the window). The
    lifetimes of A1 are the residual stays of the trace's nodes. *Wait* (the policies'
    ``unavailable="wait"``): the run starts after the mean wait ``W_s(n)`` from a random start
    until ``n`` can be obtained; each revocation adds the mean wait ``W_r(n)`` until a
    replacement can (checkpoint-restart: to the restart ``R``; SCAR: at the survivors' slower
    pace, ``W_r (1 − dt(M)/dt(M − 1))``, and its start waits only ``W_s(1)`` then trains on what
    it has); the machines held while waiting are billed (the share ``held_share`` of ``n`` at
    the start). *On-demand fallback* (``"on_demand"``): a slot starts on spot with probability
    ``q0`` (the time-mean of ``min(count, n)/n``), and after each revocation is replaced on spot
    with probability ``q`` (``regrant``), else on-demand for good: its time on spot within ``T``
    is ``q0 (1 − e^{−kT})/k``, ``k = (1 − q)/MTTF``, the revocations A1's renewal count over
    that time, and the rest of its machine-time is billed on-demand (hourly: half an hour of
    rounding per on-demand machine). An infinite wait (never obtainable in the window) makes
    the plan infeasible. Stated: waits are means over uniformly random starts and over the
    window's revocations, not conditioned on the run's own start; a gap still open at the
    window's end counts its observed part; TierML and Sync-on-the-fly do not model availability
    and are not candidates on a limited market by default.

Uncertainty: the standard deviations come from the revocation count (A1) and the billing
rounding (A4) only; the step-time and market models are taken as exact.
"""

from __future__ import annotations

import dataclasses
import math
import time as _time
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster import syncfly as sf
from scarjax.cluster import tierml as tm
from scarjax.cluster.jobprofile import JobProfile
from scarjax.cluster.lifetimes import gce_hourly_price
from scarjax.cluster.marketmodel import MarketModel
from scarjax.cluster.steptime import step_time_linear
from scarjax.data import transient as td
from scarjax.models import mlr, quadratic

__all__ = [
    "POLICIES",
    "PRIORITIES",
    "OBJECTIVES",
    "UNAVAILABLE",
    "Objective",
    "Candidates",
    "Prediction",
    "Plan",
    "Simulation",
    "candidates",
    "predict",
    "predict_one",
    "prediction_tables",
    "plan",
    "to_simulation",
    "trace_market",
    "market_from_spec",
    "preset_job",
    "plan_command",
    "NoFeasiblePlanError",
]

POLICIES = ("on_demand", "checkpoint_restart", "scar", "tierml", "sync_on_the_fly")
PRIORITIES = ("priority", "round_robin", "random")
OBJECTIVES = ("cost", "time", "cost_deadline")
#: What a transient plan does while the market offers fewer machines than it needs (the
#: policies' ``unavailable`` rule, :data:`scarjax.cluster.policies.UNAVAILABLE`): fall back to
#: on-demand machines (kept to the end of the run) or wait for the market.
UNAVAILABLE = po.UNAVAILABLE

_H = 3600.0
HORIZON_S = 30 * 24 * _H  # planning horizon: a plan slower than this is infeasible
SYNC_RESTART_S = 180.0  # Sync-on-the-fly's replacement delay (Zhao et al. Sec IV: 3 minutes)
TIERML_PUSH_EVERY = 4  # TierML's background push period (iterations), tierml.tierml's default
TIERML_BANDWIDTH_BPS = 1e9
_AGES = 16  # points of the age average (A3)
_GEOM_TERMS = 48  # terms of the geometric age series (random rule)
_FIXED_POINT = 40
_NEVER_S = 1e12  # a wait that never ends (A7), finite so that the arithmetic stays finite
#: Relative error of a transient plan's predicted run time (A4'): the hourly bill of a run
#: predicted just under a whole hour is the expectation of the rounding over this error. The
#: planner_validation experiment measured a median |time error| of 1.1% and a p90 of 4.9% for
#: the chosen plans on held-out windows; 2% is stated, not fitted.
TIME_REL_ERROR = 0.02


class NoFeasiblePlanError(ValueError):
    """No candidate meets the objective's deadline, budget and machine limits."""


# --------------------------------------------------------------------------------------
# The objective


@dataclasses.dataclass(frozen=True)
class Objective:
    """``kind``: minimise expected ``'cost'``, expected ``'time'``, or ``'cost_deadline'``
    (cost with ``deadline_h`` required); ``deadline_h``, ``budget`` (USD) and ``max_machines``
    are constraints on the expected time, the expected cost and the machines of any kind."""

    kind: str = "cost"
    deadline_h: float | None = None
    budget: float | None = None
    max_machines: int | None = None

    def __post_init__(self):
        va.check_choice("kind", self.kind, OBJECTIVES)
        if self.deadline_h is not None:
            va.check_real("deadline_h", self.deadline_h, lo=0.0, lo_open=True, scalar=True)
        if self.budget is not None:
            va.check_real("budget", self.budget, lo=0.0, lo_open=True, scalar=True)
        if self.max_machines is not None:
            va.check_int("max_machines", self.max_machines, lo=1)
        if self.kind == "cost_deadline" and self.deadline_h is None:
            raise ValueError("kind='cost_deadline' needs deadline_h")


# --------------------------------------------------------------------------------------
# Candidates


_FIELDS = ("policy", "machine", "bid", "workers", "reliable", "transient", "fraction", "period", "priority",
           "batch", "unavailable", "step_s", "step_s_less", "iters0", "bid_fraction", "yd_steps")


class Candidates(NamedTuple):
    """A struct of ``[N]`` arrays, one candidate plan per index.

    ``policy`` (index into :data:`POLICIES`), ``machine`` (type index), ``bid`` (bid index),
    ``workers`` (machines in all), ``reliable``/``transient`` (of which), ``fraction`` (SCAR's
    ``r``), ``period`` (checkpoint period, multiple of Young/Daly), ``priority`` (index into
    :data:`PRIORITIES`), ``batch`` (batch-size index), ``unavailable`` (index into
    :data:`UNAVAILABLE`: on-demand fallback or wait, A7), and the derived ``step_s`` (seconds per
    iteration on all the machines, speed and TierML stage included), ``step_s_less`` (on one
    machine fewer; ``inf`` for one machine), ``iters0`` (``K0`` at the batch size),
    ``bid_fraction`` (the bid as a fraction of on-demand) and ``yd_steps`` (the Young/Daly
    interval ``sqrt(2 δ MTTF_fleet)`` in iterations, as
    :func:`~scarjax.cluster.policies.checkpoint_interval_steps` computes it, with the market
    model's MTTF; ``inf``: never revoked)."""

    policy: np.ndarray
    machine: np.ndarray
    bid: np.ndarray
    workers: np.ndarray
    reliable: np.ndarray
    transient: np.ndarray
    fraction: np.ndarray
    period: np.ndarray
    priority: np.ndarray
    batch: np.ndarray
    unavailable: np.ndarray
    step_s: np.ndarray
    step_s_less: np.ndarray
    iters0: np.ndarray
    bid_fraction: np.ndarray
    yd_steps: np.ndarray

    def __len__(self) -> int:
        return int(self.policy.shape[0])

    def row(self, i: int) -> dict:
        """Candidate ``i`` as a dict (policy and priority by name)."""
        i = va.check_int("i", i, lo=0, hi=len(self) - 1)
        d = {f: getattr(self, f)[i].item() for f in _FIELDS}
        d["policy"] = POLICIES[int(d["policy"])]
        d["priority"] = PRIORITIES[int(d["priority"])]
        d["unavailable"] = UNAVAILABLE[int(d["unavailable"])]
        return d


def candidates(profile: JobProfile, market: MarketModel, objective: Objective | None = None, *,
           policies: Sequence[str] | None = None, workers: Sequence[int] | None = None,
           fractions: Sequence[float] = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0),
           periods: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0), priorities: Sequence[str] = PRIORITIES,
           reliable: Sequence[int] = (1, 2, 4, 8), unavailable: Sequence[str] = UNAVAILABLE,
           bids: Sequence[float] | None = None) -> Candidates:
    """The grid of candidate plans (every machine type, bid and batch size of the market and
    profile): ``on_demand`` × workers; ``checkpoint_restart`` × workers × bids × ``periods``;
    ``scar`` × workers × bids × ``fractions`` × ``priorities`` (period: Young/Daly, as the
    simulator); ``tierml`` × ``reliable`` × transient (workers − reliable ≥ 1), bid =
    on-demand; ``sync_on_the_fly`` × workers × bids (only when the profile can be simulated
    with it — a ``sync_problem``, or no job — and not on a price-driven market: the
    Sync-on-the-fly simulator draws every generation's lifetime at the series' start). ``workers`` default: every count 1 … ``profile.max_workers``
    (capped by ``objective.max_machines`` if given); ``bids``: the bids (fractions of on-demand,
    among the market's) transient plans may use (default: every bid of the market). On a :attr:`~scarjax.cluster.marketmodel.
    MarketModel.limited` market (a replayed trace that is sometimes short of machines)
    checkpoint-restart and SCAR come with each rule of ``unavailable`` (A7), and TierML and
    Sync-on-the-fly are not candidates by default (their predictions do not model
    availability). With the defaults and 64 workers, one machine type and one bid this is
    1,500+ candidates."""
    if not isinstance(profile, JobProfile):
        raise TypeError(f"profile must be a JobProfile, got {type(profile).__name__}")
    if not isinstance(market, MarketModel):
        raise TypeError(f"market must be a MarketModel, got {type(market).__name__}")
    if objective is not None and not isinstance(objective, Objective):
        raise TypeError(f"objective must be an Objective, got {type(objective).__name__}")

    if policies is None:
        policies = [p for p in POLICIES if p != "sync_on_the_fly"
                    or ((profile.job is None or profile.sync_problem is not None) and not market.fallback)]
        if market.limited:
            policies = [p for p in policies if p not in ("tierml", "sync_on_the_fly")]
    for u in unavailable:
        va.check_choice("unavailable", u, UNAVAILABLE)
    if not unavailable:
        raise ValueError("unavailable must name at least one rule")
    us = [UNAVAILABLE.index(u) for u in unavailable] if market.limited else [UNAVAILABLE.index("on_demand")]
    for p in policies:
        va.check_choice("policies", p, POLICIES)
    for p in priorities:
        va.check_choice("priorities", p, PRIORITIES)
    for f in fractions:
        va.check_real("fractions", f, lo=0.0, hi=1.0, lo_open=True, scalar=True)
    for f in periods:
        va.check_real("periods", f, lo=0.0, lo_open=True, scalar=True)
    top = profile.max_workers
    if objective is not None and objective.max_machines is not None:
        top = min(top, objective.max_machines)
    ws = list(range(1, top + 1)) if workers is None else sorted({va.check_int("workers", w, lo=1) for w in workers})
    bsizes, scales, times = profile.batches()
    J, B = len(market.names), len(market.bids)
    b_od = market.bid_index(1.0)
    if bids is None:
        bset = list(range(B))
    else:
        bset = sorted({market.bid_index(va.check_real("bids", f, lo=0.0, lo_open=True, scalar=True)) for f in bids})
        for f in bids:
            if abs(float(market.bids[market.bid_index(f)]) - float(f)) > 1e-9:
                raise ValueError(f"bids: {f!r} is not a bid of the market {tuple(market.bids)}")
    rows = []
    for j in range(J):
        for bi in range(len(bsizes)):
            for pol in policies:
                pc = POLICIES.index(pol)
                if pol == "on_demand":
                    rows += [(pc, j, b_od, w, w, 0, 1.0, 1.0, 0, bi, 0) for w in ws]
                elif pol == "checkpoint_restart":
                    rows += [(pc, j, b, w, 0, w, 1.0, per, 0, bi, u) for u in us for w in ws for b in bset
                             for per in periods]
                elif pol == "scar":
                    rows += [(pc, j, b, w, 0, w, f, 1.0, PRIORITIES.index(pr), bi, u) for u in us for w in ws
                             for b in bset for f in fractions for pr in priorities]
                elif pol == "tierml":
                    rows += [(pc, j, b_od, w, r, w - r, 1.0, 1.0, 0, bi, 0) for r in reliable for w in ws if w - r >= 1]
                else:
                    rows += [(pc, j, b, w, 0, w, 1.0, 1.0, 0, bi, 0) for w in ws for b in bset]
    if not rows:
        raise ValueError("candidates: the grid is empty (check policies and workers)")
    a = np.asarray(rows, np.float64)
    pol, mach, bid, wk, rel, trn = (a[:, k].astype(np.int64) for k in range(6))
    frac, per, pri, bat = a[:, 6], a[:, 7], a[:, 8].astype(np.int64), a[:, 9].astype(np.int64)
    una = a[:, 10].astype(np.int64)
    speed = np.asarray(market.speed, np.float64)[mach]
    step = np.empty(len(rows))
    less = np.full(len(rows), np.inf)
    tier = pol == POLICIES.index("tierml")
    wmax = int(max(wk.max(), 1))
    for bi in range(len(bsizes)):  # one step-time evaluation per batch size, then lookups
        tab = np.asarray(times[bi](np.arange(1, wmax + 1)), np.float64).reshape(-1)
        sel = bat == bi
        step[sel] = tab[wk[sel] - 1]
        s2 = sel & (wk > 1)
        less[s2] = tab[wk[s2] - 2]
        st = sel & tier
        if st.any():
            stage = tm.select_stage(trn[st], rel[st])
            ratio = trn[st] / rel[st]
            nw = np.where(stage == 3, trn[st], trn[st] + rel[st])
            step[st] = tab[nw - 1] * tm.stage_slowdown(stage, ratio)
    step = step / speed
    less = less / speed
    iters = profile.iterations * np.asarray(scales, np.float64)[bat]
    bid_frac = np.asarray(market.bids, np.float64)[bid]
    mttf = np.asarray(market.mttf_h, np.float64)[mach, bid] * _H
    fleet = mttf if market.bulk else mttf / np.maximum(trn, 1)
    delta = float(profile.checkpoint_s)
    with np.errstate(invalid="ignore", over="ignore"):
        yd = np.where(np.isfinite(fleet), np.maximum(1.0, np.round(np.sqrt(2 * delta * fleet) / step)), np.inf)
    if delta <= 0:
        yd = np.where(np.isfinite(fleet), 1.0, np.inf)
    return Candidates(pol, mach, bid, wk, rel, trn, frac, per, pri, bat, una, step, less, iters, bid_frac, yd)


# --------------------------------------------------------------------------------------
# Prediction


class Prediction(NamedTuple):
    """``[N]`` arrays: expected time (s) and cost (USD) with standard deviations, expected
    revocation events, expected rework iterations (A3; checkpoint-restart: lost steps), the
    checkpoint interval ``K`` (steps; ``inf``: none) and the ``feasible`` mask (A6; all True
    when predicted without an objective)."""

    time_s: np.ndarray
    time_std_s: np.ndarray
    cost: np.ndarray
    cost_std: np.ndarray
    revocations: np.ndarray
    rework: np.ndarray
    interval_steps: np.ndarray
    feasible: np.ndarray


def _uinterp(x, top, fp):
    """Linear interpolation of ``fp`` given on the uniform grid ``linspace(0, top, len(fp))``
    (clamped at both ends): one gather, no search (compiles small under ``vmap``)."""
    G = fp.shape[0]
    u = jnp.clip(x / top * (G - 1), 0.0, G - 1.0)
    i = jnp.minimum(jnp.floor(u), G - 2.0)
    w = u - i
    i = i.astype(jnp.int32)
    return fp[i] * (1 - w) + fp[i + 1] * w


def _interp_ext(x, top, fp, slope):
    """:func:`_uinterp` with linear extrapolation at ``slope`` beyond ``top``."""
    return jnp.where(x > top, fp[-1] + (x - top) * slope, _uinterp(x, top, fp))


def _expected_ceil(mu, sd):
    """``E[ceil(Y)]`` for ``Y ~ Normal(mu, sd)`` (A4'): the exact ceiling at ``sd = 0``, the sum
    over the 17 integers around ``mu`` for ``sd <= 1`` (beyond ±8 sd the mass is < 1e-15) and
    ``mu + 1/2`` for ``sd > 1`` (the fractional part is then uniform to within 1e-8)."""
    sd_ = jnp.maximum(sd, 1e-9)
    k = jnp.floor(mu)[..., None] + jnp.arange(-8.0, 10.0)  # 18 edges: 17 unit cells
    cdf = jax.scipy.stats.norm.cdf((k - mu[..., None]) / sd_[..., None])
    near = jnp.sum(k[..., 1:] * jnp.diff(cdf, axis=-1), axis=-1) + k[..., 0] * cdf[..., 0] \
        + (k[..., -1] + 1.0) * (1.0 - cdf[..., -1])
    return jnp.where(sd <= 1e-9, jnp.ceil(mu), jnp.where(sd > 1.0, mu + 0.5, near))


def _billed_hours(run_s):
    """Expected billed hours of a machine a transient plan runs ``run_s`` seconds and the user
    stops: the expectation of the one hourly rule :func:`scarjax.cluster.market.billed_hours`
    (every begun hour, 1 s of tolerance: ``ceil((run_s − 1 s) / h)``) over the run time's
    relative error :data:`TIME_REL_ERROR` (A4'); equal to the rule without the error (tested)."""
    return _expected_ceil(run_s / _H - 1.0 / _H, TIME_REL_ERROR * run_s / _H)


def _free_partial_hour(mttf_s):
    """``E[X mod h]`` for ``X ~ Exp(mttf_s)`` (A4): a revoked machine's free partial hour."""
    m = jnp.maximum(mttf_s, 1.0)
    q = jnp.exp(-_H / m)
    return jnp.where(jnp.isfinite(mttf_s), m - _H * q / jnp.maximum(-jnp.expm1(-_H / m), 1e-30), _H / 2)


def _run_steps(K0):
    """``_AGES`` revocation steps ``ℓ`` uniform over the run ``[0, K0]`` (midpoint rule): A1's
    renewal events fall anywhere in it (A3)."""
    return (jnp.arange(_AGES) + 0.5) / _AGES * K0


def _conditional_quantiles(p, top, cdf, edges=False):
    """Quantiles of a lifetime ``τ`` given ``τ < R``, ``p = F(R)``: the ``_AGES`` midpoints
    ``F⁻¹((k + 1/2) p / _AGES)``, ``k = 0 … _AGES − 1`` (``edges``: the ``_AGES + 1`` edges
    ``F⁻¹(k p / _AGES)``, ``k = 0 … _AGES``, of ``_AGES`` equally likely intervals), of the
    piecewise-linear CDF ``F`` given on the uniform grid ``linspace(0, top, len(cdf))`` (the CDF
    :func:`_predict_one` evaluates everywhere else; ``p = 0``: all 0). Seconds when ``top`` is
    (A5b)."""
    G = cdf.shape[0]
    u = (jnp.arange(_AGES + 1) / _AGES if edges else (jnp.arange(_AGES) + 0.5) / _AGES) * p
    i = jnp.clip(jnp.searchsorted(cdf, u, side="left", method="scan"), 1, G - 1)  # the first grid point with F >= u
    lo, hi = cdf[i - 1], cdf[i]
    w = jnp.clip((u - lo) / jnp.maximum(hi - lo, 1e-12), 0.0, 1.0)
    return (i - 1 + w) * top / (G - 1)


def _lost_since_checkpoint(tau_edges, s0, L):
    """``E[(τ − s0)⁺ mod L]``, ``τ`` uniform within each of the equally likely intervals between
    ``tau_edges`` (:func:`_conditional_quantiles` with ``edges``): the training time a
    checkpoint-restart run loses to a revocation at ``τ`` (counted from the request; its
    segments of ``L`` seconds, training and the write, begin after the start-up ``s0``; a
    revocation during the start-up loses nothing), exact on each interval through
    ``G(x) = ∫0^x (y mod L) dy = ⌊x/L⌋ L²/2 + (x mod L)²/2`` (A5b)."""
    def G(x):
        return jnp.floor(x / L) * L * L / 2 + jnp.mod(x, L) ** 2 / 2

    x = jnp.maximum(tau_edges - s0, 0.0)
    a, b = x[:-1], x[1:]
    width = tau_edges[1:] - tau_edges[:-1]
    mid = jnp.mod(jnp.maximum(0.5 * (tau_edges[1:] + tau_edges[:-1]) - s0, 0.0), L)
    return jnp.mean(jnp.where(width > 1e-3, (G(b) - G(a)) / jnp.maximum(width, 1e-3), mid))


def _scar_rework(c, K, r, I, prio, p, K0, ell, ages_top, log_drift):
    """Iterations of rework per revocation event of A3: ``E_ℓ[log(1 + g(ℓ))] / log(1/c)``,
    ``g(ℓ) = sqrt(p) E[D(A_ℓ) c^{-A_ℓ}]`` with the block age capped by the revocation's step,
    ``A_ℓ = min(A, ℓ)`` (the running checkpoint starts at ``w⁽⁰⁾``: a block not yet written
    when the revocation comes at step ``ℓ`` has age ``ℓ``), the mean over the ``_AGES``
    equally likely revocation steps ``ell`` (:func:`_run_steps`: uniform over the run, A1's
    renewal events; on a fallback market the steps of its one revocation's time, A5b)."""
    lc = -jnp.log(c)  # log(1/c) > 0

    def logterm(a):  # a [..., 1] -> [..., _AGES]: log(D(A_ℓ) c^{-A_ℓ}) per ℓ
        a = jnp.minimum(a, ell)
        return _uinterp(a, ages_top, log_drift) + a * lc

    # uniform age on [0, K] (round-robin, priority): midpoint rule on _AGES points
    u = (jnp.arange(_AGES) + 0.5) / _AGES
    lu = jax.scipy.special.logsumexp(logterm((u * jnp.minimum(K, K0))[:, None]), axis=0) - jnp.log(_AGES)
    # geometric age I*G, G ~ Geom(r) (random rule), truncated (the tail mass at the oldest age)
    g = jnp.arange(1, _GEOM_TERMS + 1)
    logw = jnp.log(r) + (g - 1) * jnp.log1p(-jnp.minimum(r, 1 - 1e-7))
    tail = jnp.log1p(-jnp.minimum(r, 1 - 1e-7)) * _GEOM_TERMS
    lg = jnp.logaddexp(jax.scipy.special.logsumexp(logw[:, None] + logterm((g * I)[:, None]), axis=0),
                       tail + logterm(jnp.reshape(K0, (1,)))[0])
    lmix = jnp.where(prio == PRIORITIES.index("random"), lg, lu)
    return jnp.mean(jax.nn.softplus(0.5 * jnp.log(p) + lmix)) / lc


def _predict_one(c_, t):
    """One candidate's prediction (the module docstring's model); ``c_`` a dict of scalars,
    ``t`` the market/profile tables. Pure jnp: vmapped by :func:`predict`, called per
    candidate by the benchmark's loop."""
    pol = c_["policy"]
    j, b = c_["machine"], c_["bid"]
    M = c_["workers"].astype(jnp.float32)
    n = c_["transient"].astype(jnp.float32)
    R = c_["reliable"].astype(jnp.float32)
    dt = c_["step_s"]
    K0 = c_["iters0"]
    s0, delta, rest = t["startup_s"], t["checkpoint_s"], t["restore_s"]
    od = t["on_demand"][j]
    sp = jnp.minimum(t["spot"][j, b], od)
    avail = t["avail"][j, b]
    mttf = t["mttf_s"][j, b]
    ren, cdf, sint = t["renewal"][j, b], t["cdf"][j, b], t["surv_int"][j, b]
    bulk, fb, hourly = t["bulk"], t["fallback"], t["hourly"]
    c = t["c"]
    rate = jnp.where(jnp.isfinite(mttf), 1.0 / mttf, 0.0)

    top = t["grid_top_s"]

    def m_slot0(T):  # expected revocations of one slot in T seconds (A1)
        return jnp.maximum(_interp_ext(T, top, ren, rate), 0.0)

    # A7: availability of the n transient machines (limited markets only)
    ni = jnp.clip(c_["transient"], 1, t["avail_n"].shape[-1]) - 1
    lim = t["limited"]
    wait = lim & (c_["unavailable"] == 1)
    odfb = lim & (c_["unavailable"] == 0)
    W_start = jnp.where(wait, t["wait_start_s"][j, b, ni], 0.0)
    W_start1 = jnp.where(wait, t["wait_start_s"][j, b, 0], 0.0)
    W_rev = jnp.where(wait, t["wait_revoked_s"][j, b, ni], 0.0)
    q_re = t["regrant"][j, b, ni]
    q0 = jnp.where(odfb, t["start_share"][j, b, ni], 1.0)
    held = t["held_share"][j, b, ni]
    k_out = jnp.where(odfb, (1.0 - q_re) * rate, 0.0)  # rate at which a slot leaves spot for good

    def phase(T):  # expected time within T a slot that starts on spot stays there (A7)
        kT = k_out * T
        return jnp.where(kT > 1e-6, -jnp.expm1(-kT) / jnp.maximum(k_out, 1e-30), T)

    def m_slot(T):  # expected revocations of one slot in T seconds: A1, on spot only (A7)
        return q0 * m_slot0(phase(T))

    def spot_share(T):  # share of a slot's time on spot (the rest: on-demand, A7)
        return jnp.where(odfb, q0 * phase(T) / jnp.maximum(T, 1e-9), 1.0)

    def F(T):
        return _uinterp(T, top, cdf)

    def S(T):  # ∫0^T (1 − F) dt, seconds
        return _interp_ext(T, top, sint, 1.0 - cdf[-1])

    def events(T, nm):  # expected revocation events of nm machines over T (A1)
        return jnp.where(fb, F(T), jnp.where(bulk, m_slot(T), nm * m_slot(T)))

    k_lost_n = jnp.where(bulk, n, 1.0)  # machines lost per event
    free_h = _free_partial_hour(mttf)
    base = K0 * dt

    def billed(machine_s, price, n_rev_machines, nmach, run_s):  # A4, returns (mean, var)
        mean = price * machine_s / _H
        # hourly: a revoked machine's used partial hour is free (at most half the run on
        # average); the machine in a slot at the end is billed up to its next whole hour: the
        # run's own rounding if the slot was never revoked, else a random age's
        free = jnp.minimum(free_h, run_s / 2)
        f_rev = jnp.minimum(1.0, m_slot(run_s))
        final = (1 - f_rev) * (_billed_hours(run_s) * _H - run_s) \
            + f_rev * jnp.where(run_s < _H, _H - run_s / 2, _H / 2)
        adj = jnp.where(hourly, price * (nmach * final - n_rev_machines * free) / _H, 0.0)
        var = jnp.where(hourly, f_rev * nmach * (price ** 2) / 12.0, 0.0)
        return mean + adj, var

    def billed_mixed(machine_s, n_rev_machines, run_s):  # A4 + A7: the spot share and the on-demand rest
        sh = spot_share(run_s)
        mean, var = billed(machine_s * sh, sp, n_rev_machines, n * sh, run_s)
        od_ms = machine_s * (1.0 - sh)
        od_mean = od * od_ms / _H + jnp.where(hourly, od * n * (1.0 - sh) * 0.5, 0.0)
        return mean + od_mean, var

    def rounded_h(x):  # billed hours of one machine run x seconds, stopped by the user
        return jnp.where(hourly, _billed_hours(x), x / _H)

    def fb_cost(run, extra, tau_q):  # A5b: (mean, var) of the bill on a fallback market
        # `run`: the run's seconds without a revocation; `extra`: the seconds a revocation adds
        # (restart and lost work), spent on the on-demand replacements
        # lifetimes count from the request, the machines are billed after their start-up s0
        R = s0 + run
        p = F(R)  # the allocation is revoked before the end (at most once)
        tau = jnp.clip((S(R) - R * (1 - p)) / jnp.maximum(p, 1e-9), 0.0, R)  # E[life | < R]
        c_no = n * sp * rounded_h(run)
        # the spot machines' whole hours before the revocation are billed, the partial one free
        sp_h = jnp.maximum(tau - s0, 0.0) / _H
        od_h = jnp.maximum(run + extra - tau, 0.0) / _H  # the replacements, each at least an hour (hourly)
        # per-second: the warning before the revocation is billed at the price above the bid
        # (its part after the start-up; over the quantiles of τ < R)
        held_warn = jnp.mean(jnp.minimum(t["warning_s"], jnp.maximum(tau_q - s0, 0.0)))
        warn = jnp.where(hourly, 0.0, (t["revoked_price"][j, b] - sp) * held_warn / _H)
        c_rev = n * (sp * jnp.where(hourly, jnp.maximum(sp_h - 0.5, 0.0), sp_h) + warn
                     + od * jnp.where(hourly, jnp.maximum(od_h + 0.5, 1.0), od_h))
        return (1 - p) * c_no + p * c_rev, p * (1 - p) * (c_rev - c_no) ** 2

    # --- on-demand
    def od_bill(run_s):  # n machines on demand for run_s seconds (the transient plans' fallback)
        return n * od * jnp.where(hourly, _billed_hours(run_s), run_s / _H)

    od_T = s0 + base
    od_hours = jnp.where(hourly, mk.billed_hours(base, False, xp=jnp), base / _H)
    od_cost = M * od * od_hours
    # --- checkpoint-restart
    K_yd = c_["yd_steps"]  # Young/Daly in steps (host, Candidates.yd_steps)
    Kc = jnp.maximum(1.0, jnp.round(K_yd * c_["period"]))
    Kc = jnp.where(jnp.isfinite(K_yd), Kc, jnp.inf)
    has_ck = jnp.isfinite(Kc)
    Kc_eff = jnp.where(has_ck, jnp.minimum(Kc, K0), K0)
    L = Kc_eff * dt + jnp.where(has_ck & (Kc < K0), delta, 0.0)
    T0 = base * jnp.where(has_ck, 1.0 + delta / (Kc_eff * dt), 1.0)
    lam = events(T0, n) / jnp.maximum(T0, 1e-9)
    x = lam * L
    em1 = jnp.expm1(x)
    Rr = s0 + rest + W_rev  # A7: waiting for a replacement (wait rule)
    seg = jnp.where(x > 1e-6, (1.0 / jnp.maximum(lam, 1e-30) + Rr) * em1, L + Rr * x)
    nseg = K0 / Kc_eff
    lost = jnp.where(x > 1e-6, 1.0 / jnp.maximum(lam, 1e-30) - L / jnp.maximum(em1, 1e-30), L / 2)
    cr_N_nf = nseg * em1
    cr_T_nf = s0 + W_start + nseg * seg
    p1 = jnp.where(fb, F(s0 + T0), 0.0)  # A5b: a lifetime counts from the request
    # A5b: the one revocation's loss, the time since the last checkpoint at its time τ < s0 + T0
    tau_e = _conditional_quantiles(p1, top, cdf, edges=True)
    lost_fb = _lost_since_checkpoint(tau_e, s0, L)
    cr_T_fb = s0 + T0 + p1 * (Rr + lost_fb)
    cr_N = jnp.where(fb, p1, cr_N_nf)
    cr_T = jnp.where(fb, cr_T_fb, cr_T_nf)
    cr_lost = jnp.where(fb, lost_fb, lost)
    cr_var = jnp.where(fb, p1 * (1 - p1), cr_N) * (Rr + cr_lost) ** 2
    cr_rework = cr_N * jnp.minimum(cr_lost, Kc_eff * dt) / dt
    ms_nf = n * (cr_T - s0) - cr_N * k_lost_n * s0 - n * (1.0 - held) * W_start
    cr_c_nf, cr_cv = billed_mixed(ms_nf, cr_N * k_lost_n, cr_T - s0)
    cr_c_fb, cr_fbv = fb_cost(T0, Rr + lost_fb, 0.5 * (tau_e[1:] + tau_e[:-1]))
    cr_cost = jnp.where(fb, cr_c_fb, cr_c_nf)
    cr_cost_var = jnp.where(fb, cr_fbv, cr_cv + (n * sp / _H) ** 2 * cr_var)
    # a fallback market may not grant the start (price above the bid): on-demand throughout
    cr_T, cr_var, cr_cost, cr_cost_var, cr_N, cr_rework = _start_mix(
        fb, avail, (cr_T, cr_var, cr_cost, cr_cost_var, cr_N, cr_rework), s0 + T0, od_bill(T0))
    # --- SCAR (period: Young/Daly, the simulator's)
    r = c_["fraction"]
    Ks = K_yd
    I = jnp.where(jnp.isfinite(Ks), jnp.maximum(1.0, jnp.round(r * Ks)), jnp.inf)
    dts = dt + jnp.where(jnp.isfinite(I), r * delta / I, 0.0)
    p_lost = jnp.where(bulk, 1.0, 1.0 / jnp.maximum(n, 1.0))
    Ks_f = jnp.where(jnp.isfinite(Ks), Ks, K0)
    I_f = jnp.where(jnp.isfinite(I), I, K0)
    # A3/A5b: the revocation's step. A fallback market revokes at most once, at a lifetime
    # τ < R given that it comes before the end (R = s0 + K0 dts, counted from the request):
    # at step (τ − s0)⁺ / dts, none lost when it comes during the start-up
    tau_q = _conditional_quantiles(F(s0 + K0 * dts), top, cdf)
    ell = jnp.where(fb, jnp.clip((tau_q - s0) / dts, 0.0, K0), _run_steps(K0))
    rho = _scar_rework(c, Ks_f, r, I_f, c_["priority"], p_lost, K0, ell, t["ages_top"], t["log_drift"])  # per event
    slow = jnp.where(bulk | (n <= 1), 1.0, 1.0 - dt / jnp.maximum(c_["step_s_less"], dt))
    B_ev = rest * jnp.where(bulk, 1.0, 1.0 / jnp.maximum(n, 1.0)) + s0 * slow + rho * dts \
        + W_rev * jnp.where(bulk | (n <= 1), 1.0, slow)  # A7: trains on the survivors while it waits
    A_s = s0 + K0 * dts + W_start1 + (W_start - W_start1) * jnp.where(n <= 1, 1.0, 1.0 - held)

    # --- one fixed point T = A + events(T − offset) B for the policy at hand (A2)
    flush = 8.0 * t["param_bytes"] / (jnp.maximum(R, 1.0) * TIERML_BANDWIDTH_BPS)
    wrk = jnp.where(n / jnp.maximum(R, 1.0) > 15.0, n, n + R)
    per_ev = (1 - t["unwarned"]) * flush + t["unwarned"] * (TIERML_PUSH_EVERY / 2) * dt \
        + s0 * jnp.minimum(1.0, k_lost_n / jnp.maximum(wrk, 1.0))
    tm_A = s0 + base
    sy_loss = SYNC_RESTART_S * jnp.where(bulk, 1.0, 1.0 / jnp.maximum(n, 1.0))
    is_tm, is_sy = pol == 3, pol == 4
    A_fp = jnp.where(is_tm, tm_A, jnp.where(is_sy, base, A_s))
    B_fp = jnp.where(is_tm, per_ev, jnp.where(is_sy, sy_loss, B_ev))
    off = jnp.where(is_sy, 0.0, s0)
    fb_fp = fb & ~is_tm

    def fp_body(_, T):
        ev = jnp.where(fb_fp, F(A_fp), jnp.where(bulk, 1.0, n) * m_slot(T - off))  # A5b: at most one, by the end
        return jnp.minimum(A_fp + ev * B_fp, 10 * HORIZON_S)

    T_fp = jax.lax.fori_loop(0, _FIXED_POINT, fp_body, A_fp)
    sc_T = T_fp
    sc_N = jnp.where(fb, F(A_s), events(sc_T - s0, n))
    sc_var = jnp.where(fb, sc_N * (1 - sc_N), sc_N) * B_ev ** 2
    sc_rework = sc_N * rho
    ms = n * (sc_T - s0) - sc_N * k_lost_n * s0 * jnp.where(bulk, 1.0, slow) - n * (1.0 - held) * W_start \
        - sc_N * k_lost_n * W_rev
    sc_c_nf, sc_cv = billed_mixed(ms, sc_N * k_lost_n, sc_T - s0)
    sc_c_fb, sc_fbv = fb_cost(A_s - s0, B_ev, tau_q)  # A_s = s0 + K0 dts here (no waits)
    sc_cost = jnp.where(fb, sc_c_fb, sc_c_nf)
    sc_cost_var = jnp.where(fb, sc_fbv, sc_cv + (n * sp / _H) ** 2 * sc_var)
    sc_T, sc_var, sc_cost, sc_cost_var, sc_N, sc_rework = _start_mix(
        fb, avail, (sc_T, sc_var, sc_cost, sc_cost_var, sc_N, sc_rework), A_s, od_bill(A_s - s0))
    # --- TierML (bid = on-demand; no fallback cap: TierML returns to spot, A2)
    tm_T = T_fp

    def tm_events(T):
        return jnp.where(bulk, m_slot(T), n * m_slot(T))

    tm_N = tm_events(tm_T - s0)
    tm_var = tm_N * per_ev ** 2
    price_mix = avail * sp + (1 - avail) * od
    run_s = tm_T - s0
    rel_hours = jnp.where(hourly, _billed_hours(run_s), run_s / _H)
    tm_c_t, tm_cv = billed(n * run_s - tm_N * k_lost_n * s0, price_mix, tm_N * k_lost_n, n, run_s)
    tm_cost = R * od * rel_hours + tm_c_t
    tm_cost_var = tm_cv + (n * price_mix / _H) ** 2 * tm_var
    tm_rework = tm_N * t["unwarned"] * TIERML_PUSH_EVERY / 2
    # --- Sync-on-the-fly (no start-up in its simulator; per-second alive billing)
    sy_T = T_fp
    sy_N = events(sy_T, n)
    sy_var = jnp.where(fb, sy_N * (1 - sy_N), sy_N) * sy_loss ** 2
    alive = n * sy_T - sy_N * k_lost_n * SYNC_RESTART_S
    sy_cost = sp * alive / _H
    sy_cost_var = (n * sp / _H) ** 2 * sy_var

    idx = pol
    T = jnp.select([idx == 0, idx == 1, idx == 2, idx == 3], [od_T, cr_T, sc_T, tm_T], sy_T)
    Tv = jnp.select([idx == 0, idx == 1, idx == 2, idx == 3], [0.0, cr_var, sc_var, tm_var], sy_var)
    C = jnp.select([idx == 0, idx == 1, idx == 2, idx == 3], [od_cost, cr_cost, sc_cost, tm_cost], sy_cost)
    Cv = jnp.select([idx == 0, idx == 1, idx == 2, idx == 3], [0.0, cr_cost_var, sc_cost_var, tm_cost_var],
                    sy_cost_var)
    N = jnp.select([idx == 0, idx == 1, idx == 2, idx == 3], [0.0, cr_N, sc_N, tm_N], sy_N)
    RW = jnp.select([idx == 0, idx == 1, idx == 2, idx == 3], [0.0, cr_rework, sc_rework, tm_rework], 0.0)
    KK = jnp.select([idx == 0, idx == 1, idx == 2], [jnp.inf, Kc, Ks], jnp.inf)
    ok = jnp.isfinite(T) & (T < HORIZON_S) & jnp.isfinite(C) & (C > 0) & jnp.isfinite(Tv) & jnp.isfinite(Cv)
    ok = ok & ((idx == 0) | (t["spot"][j, b] < od))  # A6: transient only when cheaper
    return T, jnp.sqrt(jnp.maximum(Tv, 0.0)), C, jnp.sqrt(jnp.maximum(Cv, 0.0)), N, RW, KK, ok


def _start_mix(fb, avail, spot_path, od_T, od_cost):
    """A fallback market grants the transient start with probability ``avail`` (the share of
    the window the price is at or below the bid, A1); otherwise the simulator buys on-demand
    machines, never revoked: the mixture's mean and variance."""
    T, Tv, C, Cv, N, RW = spot_path
    a = jnp.where(fb, avail, 1.0)
    mT = a * T + (1 - a) * od_T
    mC = a * C + (1 - a) * od_cost
    vT = a * Tv + a * (1 - a) * (T - od_T) ** 2
    vC = a * Cv + a * (1 - a) * (C - od_cost) ** 2
    return mT, vT, mC, vC, a * N, a * RW


_CAND_INT = ("policy", "machine", "bid", "workers", "reliable", "transient", "priority", "batch", "unavailable")


def prediction_tables(profile: JobProfile, market: MarketModel) -> dict:
    """The arrays :func:`predict` reads (float32 JAX arrays by name: the market model's prices,
    lifetime and availability tables, the profile's times, rate and drift), built once per
    (profile, market); :func:`predict_one` takes them as ``tables=``."""
    ages, log_drift = profile.drift_table()
    f32 = lambda x: jnp.asarray(np.asarray(x, np.float64), jnp.float32)  # noqa: E731
    mttf_s = np.asarray(market.mttf_h, np.float64) * _H
    return {
        "startup_s": f32(market.startup_s), "checkpoint_s": f32(profile.checkpoint_s), "restore_s": f32(profile.restore_s),
        "on_demand": f32(market.on_demand), "spot": f32(market.spot), "avail": f32(market.avail),
        "revoked_price": f32(market.revoked_price), "warning_s": f32(market.warning_s),
        "mttf_s": f32(np.where(np.isfinite(mttf_s), mttf_s, np.inf)), "grid_top_s": f32(float(np.asarray(market.grid_h)[-1]) * _H),
        "renewal": f32(market.renewal), "cdf": f32(market.cdf), "surv_int": f32(np.asarray(market.surv_int) * _H),
        "bulk": jnp.asarray(bool(market.bulk)), "fallback": jnp.asarray(bool(market.fallback)),
        "hourly": jnp.asarray(market.billing == "hourly"), "c": f32(profile.c), "ages_top": f32(ages[-1]),
        "log_drift": f32(log_drift), "param_bytes": f32(profile.param_bytes), "unwarned": f32(market.unwarned),
        "limited": jnp.asarray(market.limited),
        # A7: availability of n machines (index n - 1); an infinite wait becomes _NEVER_S (the
        # plan then runs past the horizon: infeasible) so that no inf * 0 appears
        "avail_n": f32(market.avail_n), "regrant": f32(market.regrant), "start_share": f32(market.start_share),
        "held_share": f32(market.held_share),
        "wait_start_s": f32(np.minimum(np.asarray(market.wait_start_s, np.float64), _NEVER_S)),
        "wait_revoked_s": f32(np.minimum(np.asarray(market.wait_revoked_s, np.float64), _NEVER_S)),
    }


def _bucket(n: int) -> int:
    """Candidates are padded to a power of two (at least 1024): one compiled program serves
    every grid of a size class."""
    return max(1024, 1 << int(math.ceil(math.log2(max(n, 1)))))


def _cand_arrays(cands: Candidates, pad: bool = True) -> dict:
    n = len(cands)
    size = _bucket(n) if pad else n
    out = {}
    for f in _FIELDS:
        a = np.asarray(getattr(cands, f))
        if size > n:
            a = np.concatenate([a, np.repeat(a[:1], size - n)])
        out[f] = jnp.asarray(a, jnp.int32 if f in _CAND_INT else jnp.float32)
    return out


@jax.jit
def _predict_all(cand, tables):
    return jax.vmap(_predict_one, in_axes=(0, None))(cand, tables)


_predict_scalar = jax.jit(_predict_one)


def _check_pm(profile, market, cands):
    if not isinstance(profile, JobProfile):
        raise TypeError(f"profile must be a JobProfile, got {type(profile).__name__}")
    if not isinstance(market, MarketModel):
        raise TypeError(f"market must be a MarketModel, got {type(market).__name__}")
    if not isinstance(cands, Candidates):
        raise TypeError(f"cands must be Candidates (from planner.candidates), got {type(cands).__name__}")
    if len(cands) == 0:
        raise ValueError("cands is empty")
    if int(np.max(cands.machine)) >= len(market.names) or int(np.max(cands.bid)) >= len(market.bids):
        raise ValueError("cands: machine or bid index outside the market (built for another market?)")


def _finish(out, objective):
    T, Ts, C, Cs, N, RW, KK, ok = (np.asarray(x, np.float64) for x in out)
    ok = ok.astype(bool)
    for name, a in (("time", T), ("cost", C), ("time std", Ts), ("cost std", Cs)):
        bad = ok & ~np.isfinite(a)
        if bad.any():
            raise FloatingPointError(f"predict: non-finite {name} for feasible candidate {int(np.flatnonzero(bad)[0])}")
    T = np.where(ok, T, np.inf)
    C = np.where(ok, C, np.inf)
    feas = ok.copy()
    if objective is not None:
        if objective.deadline_h is not None:
            feas &= T <= objective.deadline_h * _H
        if objective.budget is not None:
            feas &= C <= objective.budget
    return Prediction(T, np.where(ok, Ts, np.inf), C, np.where(ok, Cs, np.inf), N, RW, KK, feas)


def predict(profile: JobProfile, market: MarketModel, cands: Candidates, objective: Objective | None = None) -> Prediction:
    """Predict every candidate (one jitted, vmapped program; module docstring A1–A6).
    Candidates the model cannot run (a run longer than the 30-day horizon, a transient plan
    whose spot price is not below on-demand) get ``inf`` time and cost and ``feasible=False``;
    with an ``objective`` its deadline, budget and machine limit are applied too."""
    _check_pm(profile, market, cands)
    out = _predict_all(_cand_arrays(cands), prediction_tables(profile, market))
    pred = _finish(tuple(np.asarray(x)[: len(cands)] for x in out), objective)
    if objective is not None and objective.max_machines is not None:
        pred = pred._replace(feasible=pred.feasible & (np.asarray(cands.workers) <= objective.max_machines))
    pred = pred._replace(feasible=pred.feasible & (np.asarray(cands.workers) <= profile.max_workers))
    return pred


def predict_one(profile: JobProfile, market: MarketModel, cands: Candidates, i: int, *, tables: dict | None = None) -> tuple:
    """Candidate ``i`` alone through the same formula (jitted scalar): ``(time_s, time_std_s,
    cost, cost_std, revocations, rework, interval_steps, ok)`` floats (the benchmark's loop)."""
    tables = prediction_tables(profile, market) if tables is None else tables
    row = {f: jnp.asarray(np.asarray(getattr(cands, f))[i], jnp.int32 if f in _CAND_INT else jnp.float32) for f in _FIELDS}
    return tuple(float(x) for x in _predict_scalar(row, tables))


# --------------------------------------------------------------------------------------
# The plan


@dataclasses.dataclass(frozen=True)
class Plan:
    """The chosen candidate (``best``: its settings and prediction as a dict), the runners-up
    (the best feasible candidate of each other policy, then the next best overall; dicts), the
    objective, counts and the planning wall time."""

    best: dict
    runners_up: tuple
    objective: Objective
    n_candidates: int
    n_feasible: int
    index: int
    candidates: Candidates = dataclasses.field(repr=False)
    prediction: Prediction = dataclasses.field(repr=False)
    seconds: float = 0.0
    market: str = ""
    job: str = ""

    def table(self) -> str:
        """The plan as a text table: policy, settings, predicted cost ± std, time ± std."""
        head = (f"plan for {self.job} on {self.market}: objective {self.objective.kind}"
                + (f", deadline {self.objective.deadline_h:g} h" if self.objective.deadline_h else "")
                + (f", budget ${self.objective.budget:g}" if self.objective.budget else "")
                + (f", max {self.objective.max_machines} machines" if self.objective.max_machines else "")
                + f"; {self.n_feasible}/{self.n_candidates} candidates feasible, planned in {self.seconds:.2f} s")
        cols = ("", "policy", "settings", "cost $", "time h", "revocations", "rework it")
        rows = [("*",) + _fmt(self.best)] + [(str(k + 1),) + _fmt(r) for k, r in enumerate(self.runners_up)]
        w = [max(len(cols[i]), *(len(r[i]) for r in rows)) for i in range(len(cols))]
        line = lambda r: "  ".join(s.ljust(w[i]) for i, s in enumerate(r)).rstrip()  # noqa: E731
        return "\n".join([head, line(cols), line(tuple("-" * x for x in w))] + [line(r) for r in rows])


def _fmt(d: dict) -> tuple:
    pol = d["policy"]
    s = [f"{d['machine_name']}", f"{d['workers']} machines"]
    if pol == "tierml":
        s[-1] = f"{d['reliable']} reliable + {d['transient']} transient"
    if pol != "on_demand":
        s.append(f"bid {d['bid_fraction']:g}x")
    if pol == "checkpoint_restart":
        s.append(f"ckpt every {d['interval_steps']:.0f} it ({d['period']:g}x YD)")
    if pol in ("checkpoint_restart", "scar") and d.get("unavailable") == "wait":
        s.append("waits for spot")
    if pol == "scar":
        s.append(f"r={d['fraction']:g} {d['priority']} every {max(1, round(d['fraction'] * d['interval_steps'])) if math.isfinite(d['interval_steps']) else 'never'} it")
    if d.get("batch_size"):
        s.append(f"batch {d['batch_size']}")
    return (pol, ", ".join(s), f"{d['cost']:.2f} ± {d['cost_std']:.2f}",
            f"{d['time_s'] / _H:.2f} ± {d['time_std_s'] / _H:.2f}", f"{d['revocations']:.2f}", f"{d['rework']:.1f}")


def _describe(i: int, cands: Candidates, pred: Prediction, profile: JobProfile, market: MarketModel) -> dict:
    d = cands.row(i)
    d["index"] = int(i)
    d["machine_name"] = market.names[d["machine"]]
    d["bid_fraction"] = float(market.bids[d["bid"]])
    bsizes = profile.batches()[0]
    d["batch_size"] = int(bsizes[d["batch"]]) if bsizes[d["batch"]] else None
    for f in ("time_s", "time_std_s", "cost", "cost_std", "revocations", "rework", "interval_steps"):
        d[f] = float(getattr(pred, f)[i])
    return d


def plan(profile: JobProfile, market: MarketModel, objective: Objective = Objective(), *, grid: dict | None = None,
         runners_up: int = 6) -> Plan:
    """Score the candidate grid (:func:`candidates` with ``grid`` as keyword arguments) by
    :func:`predict` and return the best feasible candidate: the least expected cost
    (``'cost'``, ``'cost_deadline'``) or time (``'time'``), ties to the earlier candidate
    (on-demand first), then cost. Raises :class:`NoFeasiblePlanError` (naming the binding
    constraint) when none is feasible: an infeasible plan is never returned."""
    if not isinstance(objective, Objective):
        raise TypeError(f"objective must be an Objective, got {type(objective).__name__}")
    t0 = _time.perf_counter()
    cands = candidates(profile, market, objective, **(grid or {}))
    pred = predict(profile, market, cands, objective)
    feas = pred.feasible
    if not feas.any():
        fin = np.isfinite(pred.time_s)
        why = []
        if objective.deadline_h is not None and fin.any():
            why.append(f"deadline_h={objective.deadline_h:g} (fastest prediction {np.min(pred.time_s[fin]) / _H:.3g} h)")
        if objective.budget is not None and fin.any():
            why.append(f"budget={objective.budget:g} (cheapest prediction ${np.min(pred.cost[fin]):.4g})")
        if not fin.any():
            why.append("no candidate finishes within the 30-day horizon")
        raise NoFeasiblePlanError(f"no feasible plan among {len(cands)} candidates: " + "; ".join(why or ["limits"]))
    key = pred.time_s if objective.kind == "time" else pred.cost
    second = pred.cost if objective.kind == "time" else pred.time_s
    order = np.lexsort((np.arange(len(cands)), second, key))
    order = order[feas[order]]
    best = int(order[0])
    assert feas[best]
    runners, seen = [], {int(cands.policy[best])}
    for i in order[1:]:  # the best of each other policy first
        p = int(cands.policy[i])
        if p not in seen:
            seen.add(p)
            runners.append(int(i))
    for i in order[1:]:
        if len(runners) >= runners_up:
            break
        if int(i) not in runners:
            runners.append(int(i))
    runners = sorted(runners[:runners_up], key=lambda i: (key[i], i))
    desc = lambda i: _describe(i, cands, pred, profile, market)  # noqa: E731
    return Plan(desc(best), tuple(desc(i) for i in runners), objective, len(cands), int(feas.sum()), best, cands,
                pred, _time.perf_counter() - t0, market.source, profile.name)


# --------------------------------------------------------------------------------------
# To the simulator


class Simulation(NamedTuple):
    """What runs candidate ``i`` in the cluster simulator:
    ``policy(job, market, key=..., horizon_s=..., **kwargs)`` (or
    :func:`scarjax.cluster.clock.simulate_trials`)."""

    policy: Callable
    kwargs: dict
    market: mk.Market
    job: ck.Job


def to_simulation(i: int, cands: Candidates, profile: JobProfile, market: Any, *,
                  model: "MarketModel | None" = None) -> Simulation:
    """Candidate ``i`` as a simulator call. ``market``: the :class:`MarketModel` the plan was
    made on (its ``build`` gives the :class:`~scarjax.cluster.market.Market` of the machine type
    and bid), or a :class:`~scarjax.cluster.market.Market` to evaluate on (e.g. the next window
    of a price history; a price-driven process gets the candidate's bid, ``bid_fraction``
    times the market's on-demand price). Checkpoint-restart gets the candidate's interval
    (``yd_steps × period``, the planner's MTTF), SCAR the fraction, the priority rule and the
    planner's Young/Daly interval ``yd_steps``, both the candidate's ``unavailable`` rule (A7),
    TierML the reliable/transient split. The job is
    ``profile.job`` with ``workers`` (and the batch size's step time) set. ``model``: the
    MarketModel the candidates were built on, if ``market`` is not (checked for the machine
    and bid indices only)."""
    if not isinstance(cands, Candidates):
        raise TypeError(f"cands must be Candidates, got {type(cands).__name__}")
    if not isinstance(profile, JobProfile):
        raise TypeError(f"profile must be a JobProfile, got {type(profile).__name__}")
    if profile.job is None:
        raise ValueError("profile has no job (build it with JobProfile.from_job): nothing to simulate")
    if model is not None:
        if not isinstance(model, MarketModel):
            raise TypeError(f"model must be a MarketModel or None, got {type(model).__name__}")
        if int(np.max(cands.machine)) >= len(model.names) or int(np.max(cands.bid)) >= len(model.bids):
            raise ValueError("model: the candidates' machine or bid indices are outside it")
    d = cands.row(i)
    if isinstance(market, MarketModel):
        if market.build is None:
            raise ValueError("market has no simulator builder; pass a market.Market")
        model = market
        mkt = market.build(d["machine"], float(market.bids[d["bid"]]))
    elif isinstance(market, mk.Market):
        mkt = market
        if isinstance(mkt.process, mk.PriceDriven):
            bid = float(d["bid_fraction"]) * float(mkt.machine.on_demand_price)
            mkt = dataclasses.replace(mkt, process=dataclasses.replace(mkt.process, bid=bid))
    else:
        raise TypeError(f"market must be a MarketModel or a market.Market, got {type(market).__name__}")
    job = dataclasses.replace(profile.job, workers=int(d["workers"]))
    bsizes, _, times = profile.batches()
    if bsizes[d["batch"]]:
        job = dataclasses.replace(job, batch_size=int(bsizes[d["batch"]]), step_time=times[d["batch"]])
    pol = d["policy"]
    if pol == "on_demand":
        return Simulation(po.on_demand, {}, mkt, job)
    if pol == "checkpoint_restart":
        K = float(d["yd_steps"])
        K = max(1.0, round(K * float(d["period"]))) if math.isfinite(K) else math.inf
        kw = {"interval_steps": int(K)} if math.isfinite(K) else {}
        return Simulation(po.checkpoint_restart, {**kw, "unavailable": d["unavailable"]}, mkt, job)
    if pol == "scar":
        K = float(d["yd_steps"])
        kw = {"interval_steps": int(K)} if math.isfinite(K) else {}
        return Simulation(po.scar, {"fraction": float(d["fraction"]), "strategy": d["priority"], **kw,
                                    "unavailable": d["unavailable"]}, mkt, job)
    if pol == "tierml":
        return Simulation(tm.tierml, {"reliable": int(d["reliable"]), "transient": int(d["transient"]),
                                      "param_bytes": float(profile.param_bytes)}, mkt, job)
    if profile.sync_problem is None:
        raise ValueError("profile.sync_problem is None: a Sync-on-the-fly candidate needs a syncfly.Problem")
    per = profile.sync_problem.n / d["workers"]
    speed = per / max(float(d["step_s"]) - 1e-3, 1e-6)
    fleet = sf.Fleet(tuple([speed] * int(d["workers"])), sync_s=1e-3)
    return Simulation(sf.sync_on_the_fly_policy, {"problem": profile.sync_problem, "fleet": fleet}, mkt, job)


# --------------------------------------------------------------------------------------
# The `scarjax plan` command


JOB_PRESETS = ("mlr", "qp")


def preset_job(name: str, *, step_s: float = 120.0, sync_s: float = 1.0) -> ck.Job:
    """A job for ``scarjax plan --job``: ``'mlr'`` (multinomial logistic regression on the
    embedded digits, full batch, ``lr = 1``, ``l2 = 1e-2``, target loss 0.745: 87 iterations)
    or ``'qp'`` (a 64-D quadratic, condition 10, rate 0.99, target loss 1e-4), with the stated
    step-time model ``step_s / M + sync_s log2 M``
    (:func:`~scarjax.cluster.steptime.step_time_linear`), a 60 s checkpoint and a 30 s restore."""
    va.check_choice("job", name, JOB_PRESETS)
    st = step_time_linear(step_s, sync_s)
    if name == "mlr":
        alg = mlr.digits(lr=1.0, l2=1e-2)  # w*: the iterate at max_steps (JobProfile.from_job)
        return ck.Job(alg, 0.745, st, workers=4, checkpoint_s=60.0, restore_s=30.0, max_steps=400)

    alg = quadratic.random_problem(0, 64, 10.0, c=0.99)
    return ck.Job(alg, 1e-4, st, workers=4, checkpoint_s=60.0, restore_s=30.0, max_steps=1500)


#: The node traces ``scarjax plan --market trace:NAME`` replays, with their stated prices
#: (USD/h, on-demand and spot) and billing: the AWS p3 node trace (p3.2xlarge list price and a
#: typical spot price, per-second billing, AWS's 120 s warning) and the GCP V100 availability
#: trace (n1-standard-8 + V100 list price, the preemptible price 70% off, GCE's 30 s warning).
TRACE_MARKETS = ("p3", "gcp-v100")


def trace_market(name: str, *, data: str | None = None) -> mk.Market:
    """The :class:`~scarjax.cluster.market.Market` of a node trace of :data:`TRACE_MARKETS`
    (embedded, or read from ``data``), replayed with its provider's warning and a stated
    120 s start-up."""
    va.check_choice("market", name, TRACE_MARKETS)
    startup = mk.fixed_startup(120.0)
    if name == "p3":
        proc = mk.replay(td.load_aws_p3_trace(data))
        return mk.Market(mk.MachineType("p3.2xlarge", 3.06, spot=0.92), proc, billing="per_second", startup=startup)
    proc = mk.replay(td.load_gcp_v100_trace(data))
    od = float(gce_hourly_price("V100", preemptible=False, vm="n1-standard-8"))
    return mk.Market(mk.MachineType("n1+V100", od, spot=float(mk.gce_preemptible_price(od))), proc,
                     billing="per_second", startup=startup)


def market_from_spec(spec: str, *, data: str | None = None, window_days: float = 14.0) -> MarketModel:
    """``aws:ZONE:TYPE`` (the 2015 spot history: embedded April 2015, or ``data`` — a folder
    with the full history — planning on its first ``window_days``), ``gce:GPU[:REGION]``
    (GCE preemptible lifetimes, embedded or from ``data``),
    ``parametric:MTTF_H:SPOT:OD`` (exponential lifetimes, fixed prices, hourly billing) or
    ``trace:NAME`` (a node trace of :data:`TRACE_MARKETS`, :func:`trace_market`, through
    :meth:`MarketModel.from_market`: its waits and gaps included)."""
    va.check_str("market", spec)
    va.check_real("window_days", window_days, lo=0.0, lo_open=True, scalar=True)
    if window_days * 86400.0 < 120.0:
        raise ValueError(f"window_days must span at least 2 minutes ({120 / 86400:.2g} days), got {window_days!r}")
    parts = spec.split(":")
    kind = parts[0]
    if kind == "aws":
        if len(parts) != 3:
            raise ValueError(f"market: expected aws:ZONE:TYPE, got {spec!r}")
        sp = td.load_spot_prices(parts[2], parts[1], data)
        end = min(float(sp.duration_s), window_days * 86400.0)
        return MarketModel.from_prices(mk.price_series(sp), sp.on_demand, window=(0.0, end), names=(f"{parts[1]}:{parts[2]}",))
    if kind == "gce":
        if len(parts) not in (2, 3):
            raise ValueError(f"market: expected gce:GPU[:REGION], got {spec!r}")
        lt = None if data is None else td.load_gce_lifetimes(data)
        return MarketModel.from_lifetimes((parts[1],), parts[2] if len(parts) == 3 else None, data=lt)
    if kind == "parametric":
        if len(parts) != 4:
            raise ValueError(f"market: expected parametric:MTTF_H:SPOT:OD, got {spec!r}")
        try:
            mttf, spot, od = (float(x) for x in parts[1:])
        except ValueError as e:
            raise ValueError(f"market: parametric:MTTF_H:SPOT:OD needs numbers, got {spec!r}") from e
        return MarketModel.parametric(mttf, spot, od, startup_s=mk.DEFAULT_STARTUP_S["aws"], billing="hourly")
    if kind == "trace":
        if len(parts) != 2:
            raise ValueError(f"market: expected trace:NAME (NAME one of {TRACE_MARKETS}), got {spec!r}")
        return MarketModel.from_market(trace_market(parts[1], data=data))
    raise ValueError(f"market must start with aws:, gce:, parametric: or trace:, got {spec!r}")


def plan_command(job: str = "mlr", market: str = "aws:us-east-1a:c3.xlarge", objective: str = "cost", *,
                 deadline_h: float | None = None, budget: float | None = None, max_machines: int | None = None,
                 data: str | None = None, window_days: float = 14.0, seed: int = 0) -> Plan:
    """What ``scarjax plan`` does: measure the preset job once (:meth:`JobProfile.from_job`),
    build the market (:func:`market_from_spec`) and :func:`plan`."""
    obj = Objective(objective, deadline_h=deadline_h, budget=budget, max_machines=max_machines)
    prof = JobProfile.from_job(preset_job(job), seed)
    return plan(prof, market_from_spec(market, data=data, window_days=window_days), obj)
