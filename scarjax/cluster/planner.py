"""The planner: the cheapest (or fastest) way to train a job on transient
machines, chosen by *predicting* every candidate plan instead of simulating it.

Given a job (:class:`JobProfile`: fault-free iterations to the target ``K0``, linear rate
``c``, step time, checkpoint and restore times, optionally a Pollux goodput profile), a market
(:class:`MarketModel`: on-demand and spot prices, revocation lifetimes per machine type and
bid, start-up delay, billing) and an :class:`Objective` (expected cost, expected time, or cost
under a deadline; budget and machine limits), :func:`plan` scores a grid of candidates
(:func:`candidates`, thousands by default) with :func:`predict` (one ``jax.jit`` + ``vmap``
program) and returns the best feasible one with its runners-up (:class:`Plan`).

Candidates: the policy (``on_demand``, ``checkpoint_restart``, ``scar``, ``tierml``,
``sync_on_the_fly``: the cluster policies), the machine type, the bid, the number of machines
(and for TierML the transient:reliable split), the checkpoint period (a multiple of the
Young/Daly interval), SCAR's fraction ``r`` and priority rule, and the batch size (when the
profile has a Pollux goodput profile). :func:`to_simulation` turns any candidate into the
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
    (:meth:`JobProfile.from_job`: the largest ``‖w_ℓ − w_{ℓ−a}‖ / d_{ℓ−a}`` over the run, per
    age) or, unmeasured, the triangle inequality ``1 + c^a``. Later perturbations start from
    the perturbed iterate (Lemma B.2.1: ``d_ℓ ≤ c^ℓ (d₀ + Δ_{ℓ−1})``), so after ``N`` events
    ``1 + Δ_T/d₀ ≤ (1 + g)^N`` and Thm 5.3.1 gives ``π ≤ N log(1 + g) / log(1/c)``; the
    expected rework is ``E[N] log(1 + g) / log(1/c)``. The age ``A``: uniform on ``[0, K]``
    for ``round_robin`` (each block saved every ``K`` steps) and ``priority`` (stated
    assumption: the priority rule's perturbation is at most round-robin's, as Thm 5.4.2's
    experiments Fig 5.8 show, not proven); geometric ``I·G``, ``G ~ Geom(r)``, for ``random``;
    never older than the run (``A ≤ K0``: the running checkpoint starts at ``w⁽⁰⁾``).
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
    revocation time ``E[τ | τ < T]`` with a free partial spot hour. TierML pays the on-demand
    price for the share of time the class is unavailable. SCAR's checkpoint period is the
    simulator's own (Young/Daly from ``market.mttf_s()``), which on a price-driven market is
    measured at the start time: the prediction uses the window's MTTF instead.
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
from jax.flatten_util import ravel_pytree

from scarjax import bounds, pollux
from scarjax import validate as va
from scarjax.cluster import clock as ck
from scarjax.cluster.steptime import StepTime, step_time_linear, step_time_pollux
from scarjax.cluster.trainer import Trainer
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster import syncfly as sf
from scarjax.cluster import tierml as tm
from scarjax.cluster.lifetimes import gce_hourly_price
from scarjax.data import transient as td
from scarjax.models import mlr, quadratic

__all__ = [
    "POLICIES",
    "PRIORITIES",
    "OBJECTIVES",
    "JobProfile",
    "MarketModel",
    "Objective",
    "Candidates",
    "Prediction",
    "Plan",
    "Simulation",
    "candidates",
    "predict",
    "predict_one",
    "plan",
    "to_simulation",
    "NoFeasiblePlanError",
]

POLICIES = ("on_demand", "checkpoint_restart", "scar", "tierml", "sync_on_the_fly")
PRIORITIES = ("priority", "round_robin", "random")
OBJECTIVES = ("cost", "time", "cost_deadline")

_H = 3600.0
HORIZON_S = 30 * 24 * _H  # planning horizon: a plan slower than this is infeasible
SYNC_RESTART_S = 180.0  # Sync-on-the-fly's replacement delay (Zhao et al. Sec IV: 3 minutes)
TIERML_PUSH_EVERY = 4  # TierML's background push period (iterations), tierml.tierml's default
TIERML_BANDWIDTH_BPS = 1e9
_AGES = 16  # points of the age average (A3)
_GEOM_TERMS = 48  # terms of the geometric age series (random rule)
_FIXED_POINT = 40
#: Relative error of a transient plan's predicted run time (A4'): the hourly bill of a run
#: predicted just under a whole hour is the expectation of the rounding over this error. The
#: planner_validation experiment measured a median |time error| of 1.1% and a p90 of 4.9% for
#: the chosen plans on held-out windows; 2% is stated, not fitted.
TIME_REL_ERROR = 0.02


class NoFeasiblePlanError(ValueError):
    """No candidate meets the objective's deadline, budget and machine limits."""


# --------------------------------------------------------------------------------------
# The job


@dataclasses.dataclass(frozen=True)
class JobProfile:
    """What the planner needs to know of a job (module docstring, A3 and A5).

    Attributes:
      name: a label.
      iterations: ``K0``, fault-free iterations to the target (at ``batch_sizes[0]`` if given).
      c: the linear rate of Eq 5.3 (thesis Thm 5.3.1), in (0, 1).
      step_time: a :class:`~scarjax.cluster.steptime.StepTime` (seconds per iteration on ``M``
        machines of speed 1).
      checkpoint_s: seconds of a full checkpoint (a fraction ``r`` costs ``r * checkpoint_s``).
      restore_s: seconds to read a full checkpoint back.
      max_workers: machines the job can use at most.
      initial_distance: ``d₀ = ‖w⁽⁰⁾ − w*‖`` (informational: the bound uses ``Δ_T / d₀``).
      eps: the distance at the target (informational).
      drift_ages, drift: the measured drift ``D(a)`` (A3) at ages ``drift_ages`` (increasing
        ints); empty: the triangle bound ``1 + c^a``.
      batch_sizes, iteration_scale, batch_step_times: a Pollux goodput profile (A5): the batch
        sizes, ``K(b) / K0`` and the step time at each (empty: one batch size, the job's).
      param_bytes: the parameter state's bytes (TierML's flush), default 4 MB.
      job: the :class:`~scarjax.cluster.clock.Job` it was measured on (for
        :func:`to_simulation`), or ``None``.
      sync_problem: a :class:`scarjax.cluster.syncfly.Problem` wrapping ``job.algorithm``
        (Sync-on-the-fly candidates are simulated with it); ``None`` with a ``job``:
        Sync-on-the-fly is not a candidate.
    """

    name: str
    iterations: float
    c: float
    step_time: StepTime
    checkpoint_s: float = 0.0
    restore_s: float = 0.0
    max_workers: int = 64
    initial_distance: float = 1.0
    eps: float | None = None
    drift_ages: tuple = ()
    drift: tuple = ()
    batch_sizes: tuple = ()
    iteration_scale: tuple = ()
    batch_step_times: tuple = ()
    param_bytes: float = 4e6
    job: Any = dataclasses.field(default=None, compare=False, repr=False)
    sync_problem: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self):
        va.check_str("name", self.name)
        va.check_real("iterations", self.iterations, lo=0.0, lo_open=True, scalar=True)
        va.check_real("c", self.c, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
        if not isinstance(self.step_time, StepTime):
            raise TypeError(f"step_time must be a clock.StepTime, got {type(self.step_time).__name__}")
        va.check_real("checkpoint_s", self.checkpoint_s, lo=0.0, scalar=True)
        va.check_real("restore_s", self.restore_s, lo=0.0, scalar=True)
        va.check_int("max_workers", self.max_workers, lo=1)
        va.check_real("initial_distance", self.initial_distance, lo=0.0, lo_open=True, scalar=True)
        va.check_real("param_bytes", self.param_bytes, lo=0.0, scalar=True)
        if len(self.drift_ages) != len(self.drift):
            raise ValueError(f"drift_ages and drift must have one length, got {len(self.drift_ages)} and {len(self.drift)}")
        if self.drift:
            a = np.asarray(self.drift_ages, np.float64)
            d = np.asarray(self.drift, np.float64)
            if np.any(np.diff(a) <= 0) or a[0] < 0:
                raise ValueError(f"drift_ages must be increasing and >= 0, got {self.drift_ages!r}")
            if not np.all(np.isfinite(d)) or np.any(d < 0):
                raise ValueError(f"drift must be finite and >= 0, got {self.drift!r}")
        nb = len(self.batch_sizes)
        if nb:
            if len(self.iteration_scale) != nb or len(self.batch_step_times) != nb:
                raise ValueError("batch_sizes, iteration_scale and batch_step_times must have one length")
            s = np.asarray(self.iteration_scale, np.float64)
            if not np.all(np.isfinite(s)) or np.any(s <= 0):
                raise ValueError(f"iteration_scale must be finite and > 0, got {self.iteration_scale!r}")
            for t in self.batch_step_times:
                if not isinstance(t, StepTime):
                    raise TypeError(f"batch_step_times must be clock.StepTime objects, got {type(t).__name__}")
        elif self.iteration_scale or self.batch_step_times:
            raise ValueError("iteration_scale / batch_step_times given without batch_sizes")

    @classmethod
    def from_job(cls, job: ck.Job, key: Any = 0, *, name: str | None = None, c: float | None = None,
                 max_workers: int = 64, snapshots: int = 128, sync_problem: Any = None,
                 param_bytes: float | None = None) -> "JobProfile":
        """Measure the job once, unperturbed (real training, :class:`~scarjax.cluster.clock.
        Trainer` keyed like the policies' ``train_key``): ``K0`` = the first step whose loss is
        ``<= job.target_loss`` (``ValueError`` if none within ``job.max_steps``), the distances
        ``d_k = ‖w_k − w*‖`` (``w*``: ``algorithm.optimum``, else the last iterate, stated) at
        ``snapshots`` evenly spaced steps, ``c`` by :func:`scarjax.bounds.estimate_c`
        (``'max_ratio'``, per snapshot stride ``s``: ``c = c_s^{1/s}``) unless given, and the
        drift ``D(a) = max_ℓ ‖w_ℓ − w_{ℓ−a}‖ / d_{ℓ−a}`` at the snapshot ages (A3)."""
        if not isinstance(job, ck.Job):
            raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
        snapshots = va.check_int("snapshots", snapshots, lo=8)
        trainer = Trainer(job.algorithm, key)
        losses = trainer.train(job.max_steps)
        hit = np.nonzero(losses <= job.target_loss)[0]
        if hit.size == 0:
            raise ValueError(f"job: the loss never reaches target_loss={job.target_loss:g} within max_steps="
                             f"{job.max_steps} (lowest {losses.min():.4g}); raise max_steps or the target")
        K0 = int(hit[0]) + 1
        # snapshots: every `stride` steps up to past K0 (a second pass, from the start)
        horizon = min(job.max_steps, max(K0 + K0 // 4, K0 + 2))
        stride = max(1, horizon // snapshots)
        tr = Trainer(job.algorithm, key)
        flat = [np.asarray(ravel_pytree(tr.state.params)[0], np.float64)]
        steps = [0]
        while tr.step + stride <= horizon:
            tr.train(stride)
            flat.append(np.asarray(ravel_pytree(tr.state.params)[0], np.float64))
            steps.append(tr.step)
        W = np.stack(flat)
        opt = getattr(job.algorithm, "optimum", None)
        w_star = np.asarray(ravel_pytree(opt)[0], np.float64) if opt is not None else \
            np.asarray(ravel_pytree(trainer.state.params)[0], np.float64)
        d = np.linalg.norm(W - w_star, axis=1)
        d0 = float(d[0])
        if not d0 > 0:
            raise ValueError("job: the initial iterate is the optimum (d₀ = 0): nothing to plan")
        upto = int(np.searchsorted(steps, K0, side="right"))
        if c is None:
            try:
                cs = bounds.estimate_c(d[: max(upto, 4)], method="max_ratio")
            except bounds.NotLinearlyConvergentError:
                # the settle check failed (the rate still slowing at the target): the largest
                # one-step ratio over the whole measured window, past the target (conservative)
                ratios = d[1:] / np.maximum(d[:-1], 1e-300)
                ratios = ratios[d[:-1] > 1e3 * np.finfo(np.float32).eps * d0]
                cs = float(np.max(ratios)) if ratios.size else 1.0
                if not 0 < cs < 1:
                    raise ValueError(f"job: the run does not converge linearly (largest ratio {cs:.4g} per "
                                     f"{stride} steps); pass c= (thesis Eq 5.3)") from None
            c = float(cs ** (1.0 / stride))
        ages, drift = [], []
        for j in range(1, min(len(steps), upto + 1)):
            a = j * stride
            num = np.linalg.norm(W[j:upto + 1] - W[:upto + 1 - j], axis=1) if upto + 1 - j > 0 else np.zeros(0)
            den = d[: upto + 1 - j]
            ok = den > 1e-12 * d0
            if num.size and ok.any():
                ages.append(a)
                drift.append(float(np.max(num[ok[: num.size]] / den[: num.size][ok[: num.size]])))
        if param_bytes is None:
            param_bytes = float(W.shape[1] * 4)
        eps = float(d[min(upto, len(d) - 1)])
        return cls(name or getattr(job.algorithm, "name", "job"), float(K0), float(c), job.step_time,
                   job.checkpoint_s, job.restore_s, max_workers, d0, eps if eps > 0 else None,
                   tuple(int(a) for a in [0] + ages), tuple([0.0] + drift), param_bytes=float(param_bytes),
                   job=job, sync_problem=sync_problem)

    @classmethod
    def from_pollux(cls, name: str, params: Any, phi: float, base_batch_size: int, iterations: float, c: float,
                    batch_sizes: Sequence[int], *, gpus_per_node: int = 1, **kwargs: Any) -> "JobProfile":
        """A profile with a Pollux goodput profile (A5): ``iterations`` at ``base_batch_size``
        ``b0``; at each of ``batch_sizes`` the step time is :func:`~scarjax.cluster.clock.
        step_time_pollux` (thesis Eq 3.5-3.8 with ``params``) and the iterations ``b0 / (b ·
        EFFICIENCY(b))`` times ``iterations`` (Eq 3.3, PGNS ``phi``)."""
        bs = tuple(va.check_int("batch_sizes", b, lo=1) for b in batch_sizes)
        if not bs:
            raise ValueError("batch_sizes must not be empty")
        b0 = va.check_int("base_batch_size", base_batch_size, lo=1)
        if min(bs) < b0:
            raise ValueError(f"batch_sizes must be >= base_batch_size={b0}, got {min(bs)}")
        eff = np.asarray(pollux.efficiency(np.asarray(bs, np.float32), float(phi), b0), np.float64)
        scale = tuple(float(b0 / (b * e)) for b, e in zip(bs, eff))
        times = tuple(step_time_pollux(params, b, gpus_per_node) for b in bs)
        return cls(name, float(iterations), float(c), times[0], batch_sizes=bs, iteration_scale=scale,
                   batch_step_times=times, **kwargs)

    # derived -------------------------------------------------------------------------------
    def batches(self) -> tuple[tuple, tuple, tuple]:
        if self.batch_sizes:
            return self.batch_sizes, self.iteration_scale, self.batch_step_times
        bs = self.job.batch_size if self.job is not None and self.job.batch_size is not None else 0
        return (bs,), (1.0,), (self.step_time,)

    def drift_table(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ages, log D)`` on 129 uniform points from 0 to ``max(iterations) `` (A3): the
        measured drift (interpolated, held beyond its last age) or the triangle bound
        ``1 + c^a``."""
        top = max(2.0, self.iterations * max(self.iteration_scale or (1.0,)))
        ages = np.linspace(0.0, top, 129)
        if self.drift:
            D = np.interp(ages, np.asarray(self.drift_ages, np.float64), np.asarray(self.drift, np.float64))
            D = np.maximum(D, 1e-12)
        else:
            D = 1.0 + self.c ** ages
        return ages, np.log(D)


# --------------------------------------------------------------------------------------
# The market


def _window_text(window) -> str:
    """A price window ``(start_s, end_s)`` in days (``None``: the whole history)."""
    if window is None:
        return "(whole history)"
    lo, hi = (float(w) / 86400.0 for w in window)
    return f"days {lo:.4g} to {hi:.4g}"


def _renewal(grid_s: np.ndarray, cdf: np.ndarray) -> np.ndarray:
    """Renewal function ``m(t) = F(t) + ∫ m(t − u) dF(u)`` on a uniform grid (A1)."""
    G = grid_s.size
    f = np.diff(cdf, prepend=0.0)
    m = np.zeros(G)
    for k in range(G):
        m[k] = cdf[k] + (np.dot(f[1:k + 1], m[k - 1::-1][:k]) if k else 0.0)
    return m


def _tables(lifetimes_s: Any, weights: Any, grid_s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(cdf, renewal, survival integral, mttf_s)`` on ``grid_s`` of a lifetime sample
    (``inf`` = never revoked)."""
    life = np.asarray(lifetimes_s, np.float64)
    w = np.ones_like(life) if weights is None else np.asarray(weights, np.float64)
    w = w / w.sum()
    order = np.argsort(life)
    life, w = life[order], w[order]
    cum = np.cumsum(w)
    idx = np.searchsorted(life, grid_s, side="right")
    cdf = np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0)
    ren = _renewal(grid_s, cdf)
    surv = 1.0 - cdf
    sint = np.concatenate([[0.0], np.cumsum(0.5 * (surv[1:] + surv[:-1]) * np.diff(grid_s))])
    fin = np.isfinite(life)
    mttf = float(np.sum(w * np.where(fin, life, 0.0)) / max(np.sum(w[fin]), 1e-300)) if fin.all() else math.inf
    if not fin.all() and fin.any():
        # censored: exposure / events (the add-free estimator of a constant hazard)
        mttf = float(np.sum(w * np.minimum(life, grid_s[-1])) / max(np.sum(w[fin & (life <= grid_s[-1])]), 1e-300))
    return cdf, ren, sint, mttf


@dataclasses.dataclass(frozen=True, eq=False)
class MarketModel:
    """Prices and revocations per machine type ``j`` and bid ``b`` (module docstring, A1, A4).

    Attributes:
      names, on_demand, speed: ``[J]`` machine types, their on-demand USD/h and speeds.
      bids: ``[B]`` bids as fractions of on-demand (``(1.0,)`` where there is no bidding).
      spot: ``[J, B]`` mean USD/h paid for a granted transient machine.
      avail: ``[J, B]`` fraction of the time a transient machine is granted.
      mttf_h: ``[J, B]`` mean time to revocation of one machine (bulk: of the allocation).
      grid_h: ``[G]`` uniform time grid; cdf, renewal, surv_int: ``[J, B, G]`` the lifetime CDF,
        the renewal function and ``∫ (1 − F)`` (hours) on it.
      bulk: one revocation takes the whole allocation; fallback: replacements after a
        revocation are on-demand (A1).
      unwarned: share of revocations without a usable warning; warning_s: the warning.
      startup_s: mean start-up delay of a new machine; billing: ``'hourly'`` or ``'per_second'``.
      source: where it came from; build: ``build(j, bid_fraction) -> market.Market`` (for
        :func:`to_simulation`) or ``None``.
    """

    names: tuple
    on_demand: np.ndarray
    speed: np.ndarray
    bids: tuple
    spot: np.ndarray
    avail: np.ndarray
    mttf_h: np.ndarray
    grid_h: np.ndarray
    cdf: np.ndarray
    renewal: np.ndarray
    surv_int: np.ndarray
    bulk: bool = False
    fallback: bool = False
    unwarned: float = 0.0
    warning_s: float = 0.0
    startup_s: float = 0.0
    billing: str = "per_second"
    source: str = ""
    build: Callable | None = dataclasses.field(default=None, repr=False)

    def __post_init__(self):
        J, B = len(self.names), len(self.bids)
        if J < 1 or B < 1:
            raise ValueError("a market needs at least one machine type and one bid")
        for f in ("on_demand", "speed"):
            a = np.asarray(getattr(self, f), np.float64)
            if a.shape != (J,) or not np.all(np.isfinite(a)) or np.any(a <= 0):
                raise ValueError(f"{f} must be [{J}] finite and > 0, got {getattr(self, f)!r}")
        for f in ("spot", "avail"):
            a = np.asarray(getattr(self, f), np.float64)
            if a.shape != (J, B) or not np.all(np.isfinite(a)) or np.any(a < 0):
                raise ValueError(f"{f} must be [{J}, {B}] finite and >= 0, got {getattr(self, f)!r}")
        m = np.asarray(self.mttf_h, np.float64)
        if m.shape != (J, B) or np.any(np.isnan(m)) or np.any(m <= 0):
            raise ValueError(f"mttf_h must be [{J}, {B}] > 0 (inf: never revoked), got {self.mttf_h!r}")
        g = np.asarray(self.grid_h, np.float64)
        if g.ndim != 1 or g.size < 2 or g[0] != 0 or not np.allclose(np.diff(g), g[-1] / (g.size - 1)):
            raise ValueError("grid_h must be a uniform grid from 0 (np.linspace(0, top, G))")
        for f in ("cdf", "renewal", "surv_int"):
            a = np.asarray(getattr(self, f), np.float64)
            if a.shape != (J, B, g.size) or not np.all(np.isfinite(a)):
                raise ValueError(f"{f} must be [{J}, {B}, {g.size}] and finite")
        va.check_choice("billing", self.billing, mk.BILLINGS)
        va.check_real("startup_s", self.startup_s, lo=0.0, scalar=True)
        va.check_real("unwarned", self.unwarned, lo=0.0, hi=1.0, scalar=True)

    # constructors ---------------------------------------------------------------------
    @classmethod
    def parametric(cls, mttf_h: float, spot_price: float, on_demand_price: float, *, startup_s: float = 0.0,
                   billing: str = "per_second", bulk: bool = False, unwarned: float = 0.0,
                   warning_s: float = 0.0, name: str = "parametric") -> "MarketModel":
        """One machine type, exponential lifetimes of mean ``mttf_h`` (``inf``: never revoked)
        at a fixed ``spot_price`` (:func:`scarjax.cluster.market.exponential`)."""
        va.check_real("mttf_h", mttf_h, lo=0.0, lo_open=True, scalar=True, allow_inf=True)
        va.check_real("spot_price", spot_price, lo=0.0, scalar=True)
        va.check_real("on_demand_price", on_demand_price, lo=0.0, lo_open=True, scalar=True)
        grid = np.linspace(0.0, max(48.0, 4.0 * mttf_h if math.isfinite(mttf_h) else 48.0), 257)
        if math.isfinite(mttf_h):
            cdf = -np.expm1(-grid / mttf_h)
            ren = grid / mttf_h
            sint = mttf_h * cdf
        else:
            cdf, ren, sint = np.zeros_like(grid), np.zeros_like(grid), grid.copy()
        od, sp, mt = float(on_demand_price), float(spot_price), float(mttf_h)

        def build(j, bid):
            proc = mk.exponential(mt * _H, warning_s=warning_s, unwarned=unwarned, bulk=bulk) if math.isfinite(mt) else None
            return mk.Market(mk.MachineType(name, od, spot=sp), proc, billing=billing,
                             startup=mk.fixed_startup(startup_s) if startup_s > 0 else None)

        return cls((name,), np.array([od]), np.array([1.0]), (1.0,), np.array([[sp]]), np.array([[1.0]]),
                   np.array([[mt]]), grid, cdf[None, None], ren[None, None], sint[None, None], bulk=bulk,
                   unwarned=unwarned, warning_s=warning_s, startup_s=startup_s, billing=billing,
                   source=f"parametric(mttf={mt:g} h, spot={sp:g}, on-demand={od:g})", build=build)

    @classmethod
    def from_lifetimes(cls, gpus: Sequence[str] = ("K80", "P100", "V100"), region: str | None = None, *,
                       on_demand: Sequence[float] | None = None, data: Any = None, startup_s: float | None = None,
                       campaign: str = "2019-02", speed: Sequence[float] | None = None) -> "MarketModel":
        """GCE preemptible GPU machines (CM-DARE Sec V): lifetimes from the measured GCE
        campaign (:func:`scarjax.cluster.market.gce_preemptible`, capped at 24 h: the cap
        counts as a revocation, as the simulator's process does), the fixed preemptible price
        (70% off on-demand), per-second billing, the mean start-up delay of CM-DARE
        (87 s, :data:`scarjax.cluster.market.DEFAULT_STARTUP_S`). ``on_demand``: USD/h per GPU
        machine (default, stated — not in the data or the paper: 2019 us-central1 list prices of
        an n1-standard-8 plus the GPU, :func:`scarjax.cluster.lifetimes.gce_hourly_price`: K80
        0.83, P100 1.84, V100 2.86); ``speed``: relative speed (default 1, 2.1, 3.2 from CM-DARE Table I's
        TFLOPS ratios 4.37 / 9.3 / 14)."""
        gpus = tuple(gpus)
        if not gpus:
            raise ValueError("gpus must name at least one GPU type")

        default_od = {g: gce_hourly_price(g, preemptible=False, vm="n1-standard-8") for g in ("K80", "P100", "V100")}
        default_speed = {"K80": 1.0, "P100": 9.3 / 4.37, "V100": 14.0 / 4.37}
        for g in gpus:
            if g not in default_od:
                raise ValueError(f"gpus: unknown GPU {g!r}; known: {tuple(default_od)}")
        od = np.asarray([default_od[g] for g in gpus] if on_demand is None else on_demand, np.float64)
        sp_ = np.asarray([default_speed[g] for g in gpus] if speed is None else speed, np.float64)
        if od.shape != (len(gpus),) or sp_.shape != (len(gpus),):
            raise ValueError(f"on_demand and speed must have one value per GPU ({len(gpus)})")
        st = float(mk.DEFAULT_STARTUP_S["gce"] if startup_s is None else startup_s)
        procs = [mk.gce_preemptible(g, region, campaign=campaign, data=data) for g in gpus]
        grid = np.linspace(0.0, 48.0, 257)
        cdfs, rens, sints, mttfs = [], [], [], []
        for p in procs:
            cdf, ren, sint, mttf = _tables(np.asarray(p.lifetimes_s, np.float64) / _H, None, grid)
            cdfs.append(cdf[None])
            rens.append(ren[None])
            sints.append(sint[None])
            mttfs.append([mttf])
        spot = np.asarray(mk.gce_preemptible_price(od), np.float64)[:, None]

        def build(j, bid):
            return mk.Market(mk.MachineType(gpus[j], float(od[j]), speed=float(sp_[j])), procs[j], billing="per_second",
                             startup=mk.fixed_startup(st) if st > 0 else None)

        return cls(gpus, od, sp_, (1.0,), spot, np.ones((len(gpus), 1)), np.asarray(mttfs), grid,
                   np.stack(cdfs), np.stack(rens), np.stack(sints), warning_s=float(mk.GCE_WARNING_S)
                   if hasattr(mk, "GCE_WARNING_S") else 30.0, startup_s=st, billing="per_second",
                   source=f"gce-preemptible {campaign} {','.join(gpus)} region={region or 'all'}", build=build)

    @classmethod
    def from_prices(cls, series: Any, on_demand: Any, *, window: tuple[float, float] | None = None,
                    bids: Sequence[float] = (0.2, 0.35, 0.5, 0.75, 1.0), names: Sequence[str] | None = None,
                    speed: Sequence[float] | None = None, startup_s: float = mk.DEFAULT_STARTUP_S["aws"],
                    warning_s: float = mk.AWS_WARNING_S) -> "MarketModel":
        """AWS 2015 spot markets (TierML Sec 2.3; the simulator's ``price_driven`` process): per
        machine type a :class:`~scarjax.cluster.market.PriceSeries` (or ``SpotPrices``) and its
        on-demand price; per bid (fractions of on-demand; 1.0 is always added: TierML bids it)
        measured on the minute grid of ``window = (t0, t1)`` (seconds on the series' clock;
        default its whole span), like :func:`scarjax.cluster.sweep.mttf_minutes`: the lifetime
        of an allocation requested at each minute the price is at or below the bid is the time
        to the next price above the bid plus the warning (censored at the window's end: never
        revoked within it), the availability is the share of such minutes, the spot price the
        mean price over them. Bulk (the allocation goes at once), fallback (A1), hourly
        billing, 5-minute start-up (TierML Sec 3.3)."""
        multi = isinstance(series, (list, tuple))
        ss = list(series) if multi else [series]
        ods = np.atleast_1d(np.asarray(on_demand, np.float64))
        if ods.size != len(ss):
            raise ValueError(f"on_demand must give one price per series ({len(ss)}), got {on_demand!r}")
        ss = [s if isinstance(s, mk.PriceSeries) else mk.price_series(s) for s in ss]
        names = tuple(names) if names is not None else tuple(s.name for s in ss)
        if len(names) != len(ss):
            raise ValueError(f"names must give one name per series ({len(ss)})")
        sp_ = np.ones(len(ss)) if speed is None else np.asarray(speed, np.float64)
        bids = tuple(sorted(set(float(b) for b in bids) | {1.0}))
        for b in bids:
            if not (0 < b <= 10):
                raise ValueError(f"bids are fractions of on-demand in (0, 10], got {b!r}")
        grid = np.linspace(0.0, 48.0, 257)
        B, J = len(bids), len(ss)
        spot, avail, mttf = np.zeros((J, B)), np.zeros((J, B)), np.zeros((J, B))
        cdf, ren, sint = np.zeros((J, B, 257)), np.zeros((J, B, 257)), np.zeros((J, B, 257))
        t0s = []
        for j, s in enumerate(ss):
            t_ch = np.asarray(s.times_s, np.float64)
            p_ch = np.asarray(s.prices, np.float64)
            lo, hi = (float(t_ch[0]), float(s.end_s)) if window is None else (float(window[0]), float(window[1]))
            if not hi - lo >= 120.0:
                raise ValueError(f"window must span at least 2 minutes, got {window!r}")
            t0s.append(lo)
            mins = lo + 60.0 * np.arange(int((hi - lo) // 60))
            p = p_ch[np.maximum(np.searchsorted(t_ch, mins, side="right") - 1, 0)]
            M = p.size
            for b, frac in enumerate(bids):
                bid = float(np.float32(frac * ods[j]))
                ok = p <= bid
                avail[j, b] = ok.mean()
                if not ok.any():
                    spot[j, b] = ods[j]
                    mttf[j, b] = 1e-3
                    cdf[j, b] = 1.0
                    ren[j, b] = grid / 1e-3
                    continue
                spot[j, b] = float(p[ok].mean())
                above = np.where(p > bid, np.arange(M), M)
                nxt = np.minimum.accumulate(above[::-1])[::-1]  # first minute >= m above the bid
                nxt = np.concatenate([nxt[1:], [M]])  # strictly after m
                life = np.where(nxt < M, (nxt - np.arange(M)) * 60.0 + warning_s, np.inf)[ok] / _H
                c_, r_, s_, m_ = _tables(life, None, grid)
                cdf[j, b], ren[j, b], sint[j, b] = c_, r_, s_
                mttf[j, b] = m_ if math.isfinite(m_) else 1e9

        def build(j, frac):
            bid = float(frac) * float(ods[j])
            return mk.Market(mk.MachineType(names[j], float(ods[j]), speed=float(sp_[j])),
                             mk.price_driven(ss[j], bid), billing="hourly",
                             startup=mk.fixed_startup(startup_s) if startup_s > 0 else None, start_time_s=t0s[j])

        return cls(names, ods, sp_, bids, spot, avail, mttf, grid, cdf, ren, sint, bulk=True, fallback=True,
                   warning_s=warning_s, startup_s=float(startup_s), billing="hourly",
                   source=f"spot prices {','.join(names)} {_window_text(window)}", build=build)

    def bid_index(self, frac: float = 1.0) -> int:
        return int(np.argmin(np.abs(np.asarray(self.bids) - frac)))


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
           "batch", "step_s", "step_s_less", "iters0", "bid_fraction", "yd_steps")


class Candidates(NamedTuple):
    """A struct of ``[N]`` arrays, one candidate plan per index.

    ``policy`` (index into :data:`POLICIES`), ``machine`` (type index), ``bid`` (bid index),
    ``workers`` (machines in all), ``reliable``/``transient`` (of which), ``fraction`` (SCAR's
    ``r``), ``period`` (checkpoint period, multiple of Young/Daly), ``priority`` (index into
    :data:`PRIORITIES`), ``batch`` (batch-size index), and the derived ``step_s`` (seconds per
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
        return d


def candidates(profile: JobProfile, market: MarketModel, objective: Objective | None = None, *,
           policies: Sequence[str] | None = None, workers: Sequence[int] | None = None,
           fractions: Sequence[float] = (1 / 32, 1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0),
           periods: Sequence[float] = (0.25, 0.5, 1.0, 2.0, 4.0), priorities: Sequence[str] = PRIORITIES,
           reliable: Sequence[int] = (1, 2, 4, 8)) -> Candidates:
    """The grid of candidate plans (every machine type, bid and batch size of the market and
    profile): ``on_demand`` × workers; ``checkpoint_restart`` × workers × bids × ``periods``;
    ``scar`` × workers × bids × ``fractions`` × ``priorities`` (period: Young/Daly, as the
    simulator); ``tierml`` × ``reliable`` × transient (workers − reliable ≥ 1), bid =
    on-demand; ``sync_on_the_fly`` × workers × bids (only when the profile can be simulated
    with it — a ``sync_problem``, or no job — and not on a price-driven market: the
    Sync-on-the-fly simulator draws every generation's lifetime at the series' start). ``workers`` default: every count 1 … ``profile.max_workers``
    (capped by ``objective.max_machines`` if given). With the defaults and 64 workers, one
    machine type and one bid this is 1,500+ candidates."""
    if not isinstance(profile, JobProfile):
        raise TypeError(f"profile must be a JobProfile, got {type(profile).__name__}")
    if not isinstance(market, MarketModel):
        raise TypeError(f"market must be a MarketModel, got {type(market).__name__}")
    if objective is not None and not isinstance(objective, Objective):
        raise TypeError(f"objective must be an Objective, got {type(objective).__name__}")

    if policies is None:
        policies = [p for p in POLICIES if p != "sync_on_the_fly"
                    or ((profile.job is None or profile.sync_problem is not None) and not market.fallback)]
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
    rows = []
    for j in range(J):
        for bi in range(len(bsizes)):
            for pol in policies:
                pc = POLICIES.index(pol)
                if pol == "on_demand":
                    rows += [(pc, j, b_od, w, w, 0, 1.0, 1.0, 0, bi) for w in ws]
                elif pol == "checkpoint_restart":
                    rows += [(pc, j, b, w, 0, w, 1.0, per, 0, bi) for w in ws for b in range(B) for per in periods]
                elif pol == "scar":
                    rows += [(pc, j, b, w, 0, w, f, 1.0, PRIORITIES.index(pr), bi) for w in ws for b in range(B)
                             for f in fractions for pr in priorities]
                elif pol == "tierml":
                    rows += [(pc, j, b_od, w, r, w - r, 1.0, 1.0, 0, bi) for r in reliable for w in ws if w - r >= 1]
                else:
                    rows += [(pc, j, b, w, 0, w, 1.0, 1.0, 0, bi) for w in ws for b in range(B)]
    if not rows:
        raise ValueError("candidates: the grid is empty (check policies and workers)")
    a = np.asarray(rows, np.float64)
    pol, mach, bid, wk, rel, trn = (a[:, k].astype(np.int64) for k in range(6))
    frac, per, pri, bat = a[:, 6], a[:, 7], a[:, 8].astype(np.int64), a[:, 9].astype(np.int64)
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
    return Candidates(pol, mach, bid, wk, rel, trn, frac, per, pri, bat, step, less, iters, bid_frac, yd)


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
    stops (AWS 2015 hourly: every begun hour, 1 s of tolerance), with the run time uncertain
    by :data:`TIME_REL_ERROR` (A4')."""
    return _expected_ceil(run_s / _H - 1.0 / _H, TIME_REL_ERROR * run_s / _H)


def _free_partial_hour(mttf_s):
    """``E[X mod h]`` for ``X ~ Exp(mttf_s)`` (A4): a revoked machine's free partial hour."""
    m = jnp.maximum(mttf_s, 1.0)
    q = jnp.exp(-_H / m)
    return jnp.where(jnp.isfinite(mttf_s), m - _H * q / jnp.maximum(-jnp.expm1(-_H / m), 1e-30), _H / 2)


def _scar_g_log(c, K, r, I, prio, p, K0, ages_top, log_drift):
    """``log g`` of A3: ``g = sqrt(p) E[D(A) c^{-A}]`` (log space)."""
    lc = -jnp.log(c)  # log(1/c) > 0

    def logterm(a):
        a = jnp.minimum(a, K0)
        return _uinterp(a, ages_top, log_drift) + a * lc

    # uniform age on [0, K] (round-robin, priority): midpoint rule on _AGES points
    u = (jnp.arange(_AGES) + 0.5) / _AGES
    lu = jax.scipy.special.logsumexp(logterm(u * jnp.minimum(K, K0))) - jnp.log(_AGES)
    # geometric age I*G, G ~ Geom(r) (random rule), truncated (the tail mass at age K0)
    g = jnp.arange(1, _GEOM_TERMS + 1)
    logw = jnp.log(r) + (g - 1) * jnp.log1p(-jnp.minimum(r, 1 - 1e-7))
    tail = jnp.log1p(-jnp.minimum(r, 1 - 1e-7)) * _GEOM_TERMS
    lg = jnp.logaddexp(jax.scipy.special.logsumexp(logw + logterm(g * I)), tail + logterm(K0))
    lmix = jnp.where(prio == PRIORITIES.index("random"), lg, lu)
    return 0.5 * jnp.log(p) + lmix


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

    def m_slot(T):  # expected revocations of one slot in T seconds (A1)
        return jnp.maximum(_interp_ext(T, top, ren, rate), 0.0)

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

    def rounded_h(x):  # billed hours of one machine run x seconds, stopped by the user
        return jnp.where(hourly, _billed_hours(x), x / _H)

    def fb_cost(run):  # A1/A4 on a fallback market: (mean, var) of the bill of a run of `run` s
        p = F(run)  # the allocation is revoked before the end (at most once)
        tau = jnp.clip((S(run) - run * (1 - p)) / jnp.maximum(p, 1e-9), 0.0, run)  # E[life | < run]
        c_no = n * sp * rounded_h(run)
        c_rev = n * (jnp.where(hourly, 0.0, sp * tau / _H)
                     + od * (jnp.maximum(run - tau, 0.0) / _H + jnp.where(hourly, 0.5, 0.0)))
        return (1 - p) * c_no + p * c_rev, p * (1 - p) * (c_rev - c_no) ** 2

    # --- on-demand
    def od_bill(run_s):  # n machines on demand for run_s seconds (the transient plans' fallback)
        return n * od * jnp.where(hourly, _billed_hours(run_s), run_s / _H)

    od_T = s0 + base
    od_hours = jnp.where(hourly, jnp.ceil(base / _H - 1.0 / _H), base / _H)
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
    Rr = s0 + rest
    seg = jnp.where(x > 1e-6, (1.0 / jnp.maximum(lam, 1e-30) + Rr) * em1, L + Rr * x)
    nseg = K0 / Kc_eff
    lost = jnp.where(x > 1e-6, 1.0 / jnp.maximum(lam, 1e-30) - L / jnp.maximum(em1, 1e-30), L / 2)
    cr_N_nf = nseg * em1
    cr_T_nf = s0 + nseg * seg
    p1 = F(T0)
    cr_T_fb = s0 + T0 + p1 * (Rr + L / 2)
    cr_N = jnp.where(fb, p1, cr_N_nf)
    cr_T = jnp.where(fb, cr_T_fb, cr_T_nf)
    cr_lost = jnp.where(fb, L / 2, lost)
    cr_var = jnp.where(fb, p1 * (1 - p1), cr_N) * (Rr + cr_lost) ** 2
    cr_rework = cr_N * jnp.minimum(cr_lost, Kc_eff * dt) / dt
    ms_nf = n * (cr_T - s0) - cr_N * k_lost_n * s0
    cr_c_nf, cr_cv = billed(ms_nf, sp, cr_N * k_lost_n, n, cr_T - s0)
    cr_c_fb, cr_fbv = fb_cost(cr_T - s0)
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
    lg = _scar_g_log(c, Ks_f, r, I_f, c_["priority"], p_lost, K0, t["ages_top"], t["log_drift"])
    rho = jax.nn.softplus(lg) / jnp.log(1.0 / c)  # iterations per event, log(1 + g) / log(1/c)
    slow = jnp.where(bulk | (n <= 1), 1.0, 1.0 - dt / jnp.maximum(c_["step_s_less"], dt))
    B_ev = rest * jnp.where(bulk, 1.0, 1.0 / jnp.maximum(n, 1.0)) + s0 * slow + rho * dts
    A_s = s0 + K0 * dts

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
        ev = jnp.where(fb_fp, F(T - off), jnp.where(bulk, 1.0, n) * m_slot(T - off))
        return jnp.minimum(A_fp + ev * B_fp, 10 * HORIZON_S)

    T_fp = jax.lax.fori_loop(0, _FIXED_POINT, fp_body, A_fp)
    sc_T = T_fp
    sc_N = events(sc_T - s0, n)
    sc_var = jnp.where(fb, sc_N * (1 - sc_N), sc_N) * B_ev ** 2
    sc_rework = sc_N * rho
    ms = n * (sc_T - s0) - sc_N * k_lost_n * s0 * jnp.where(bulk, 1.0, slow)
    sc_c_nf, sc_cv = billed(ms, sp, sc_N * k_lost_n, n, sc_T - s0)
    sc_c_fb, sc_fbv = fb_cost(sc_T - s0)
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


_CAND_INT = ("policy", "machine", "bid", "workers", "reliable", "transient", "priority", "batch")


def _tables_of(profile: JobProfile, market: MarketModel) -> dict:
    ages, log_drift = profile.drift_table()
    f32 = lambda x: jnp.asarray(np.asarray(x, np.float64), jnp.float32)  # noqa: E731
    mttf_s = np.asarray(market.mttf_h, np.float64) * _H
    return {
        "startup_s": f32(market.startup_s), "checkpoint_s": f32(profile.checkpoint_s), "restore_s": f32(profile.restore_s),
        "on_demand": f32(market.on_demand), "spot": f32(market.spot), "avail": f32(market.avail),
        "mttf_s": f32(np.where(np.isfinite(mttf_s), mttf_s, np.inf)), "grid_top_s": f32(float(np.asarray(market.grid_h)[-1]) * _H),
        "renewal": f32(market.renewal), "cdf": f32(market.cdf), "surv_int": f32(np.asarray(market.surv_int) * _H),
        "bulk": jnp.asarray(bool(market.bulk)), "fallback": jnp.asarray(bool(market.fallback)),
        "hourly": jnp.asarray(market.billing == "hourly"), "c": f32(profile.c), "ages_top": f32(ages[-1]),
        "log_drift": f32(log_drift), "param_bytes": f32(profile.param_bytes), "unwarned": f32(market.unwarned),
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
    out = _predict_all(_cand_arrays(cands), _tables_of(profile, market))
    pred = _finish(tuple(np.asarray(x)[: len(cands)] for x in out), objective)
    if objective is not None and objective.max_machines is not None:
        pred = pred._replace(feasible=pred.feasible & (np.asarray(cands.workers) <= objective.max_machines))
    pred = pred._replace(feasible=pred.feasible & (np.asarray(cands.workers) <= profile.max_workers))
    return pred


def predict_one(profile: JobProfile, market: MarketModel, cands: Candidates, i: int, *, tables: dict | None = None) -> tuple:
    """Candidate ``i`` alone through the same formula (jitted scalar): ``(time_s, time_std_s,
    cost, cost_std, revocations, rework, interval_steps, ok)`` floats (the benchmark's loop)."""
    tables = _tables_of(profile, market) if tables is None else tables
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
    (``yd_steps × period``, the planner's MTTF), SCAR the fraction and priority rule (its
    period is the simulator's Young/Daly), TierML the reliable/transient split. The job is
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
        return Simulation(po.checkpoint_restart, kw, mkt, job)
    if pol == "scar":
        return Simulation(po.scar, {"fraction": float(d["fraction"]), "strategy": d["priority"]}, mkt, job)
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
    step-time model ``step_s / M + sync_s log2 M`` (:func:`~scarjax.cluster.clock.
    step_time_linear`), a 60 s checkpoint and a 30 s restore."""
    va.check_choice("job", name, JOB_PRESETS)
    st = step_time_linear(step_s, sync_s)
    if name == "mlr":
        alg = mlr.digits(lr=1.0, l2=1e-2)  # w*: the iterate at max_steps (JobProfile.from_job)
        return ck.Job(alg, 0.745, st, workers=4, checkpoint_s=60.0, restore_s=30.0, max_steps=400)

    alg = quadratic.random_problem(0, 64, 10.0, c=0.99)
    return ck.Job(alg, 1e-4, st, workers=4, checkpoint_s=60.0, restore_s=30.0, max_steps=1500)


def market_from_spec(spec: str, *, data: str | None = None, window_days: float = 14.0) -> MarketModel:
    """``aws:ZONE:TYPE`` (the 2015 spot history: embedded April 2015, or ``data`` — a folder
    with the full history — planning on its first ``window_days``), ``gce:GPU[:REGION]``
    (GCE preemptible lifetimes, embedded or from ``data``), or
    ``parametric:MTTF_H:SPOT:OD`` (exponential lifetimes, fixed prices, hourly billing)."""
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
    raise ValueError(f"market must start with aws:, gce: or parametric:, got {spec!r}")


def plan_command(job: str = "mlr", market: str = "aws:us-east-1a:c3.xlarge", objective: str = "cost", *,
                 deadline_h: float | None = None, budget: float | None = None, max_machines: int | None = None,
                 data: str | None = None, window_days: float = 14.0, seed: int = 0) -> Plan:
    """What ``scarjax plan`` does: measure the preset job once (:meth:`JobProfile.from_job`),
    build the market (:func:`market_from_spec`) and :func:`plan`."""
    obj = Objective(objective, deadline_h=deadline_h, budget=budget, max_machines=max_machines)
    prof = JobProfile.from_job(preset_job(job), seed)
    return plan(prof, market_from_spec(market, data=data, window_days=window_days), obj)
