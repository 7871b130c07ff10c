"""Three policies on the cluster clock: on-demand only,
checkpoint-restart on transient machines, and SCAR's partial recovery.

Each is ``policy(job, market, *, key, horizon_s, **options) -> ClusterRun`` and trains the
job for real (:class:`~scarjax.cluster.trainer.Trainer`); ``key`` draws the market (revocations,
start-up delays; the same meaning in every policy of :mod:`scarjax.cluster`), ``train_key``
(default 0) the training (initialisation, minibatches), so two policies on one ``train_key``
train the same job. A run ends at the first step whose loss is ``<= job.target_loss`` (then
every machine is stopped by the user), after ``job.max_steps`` *executed* iterations (redone
ones included; the same cap in every policy), at ``horizon_s`` (censored), or with a
``'give_up'`` event: the market will offer no machine again (``unavailable="wait"``), or
:data:`MAX_FUTILE_RESTARTS` revocations came in a row without a completed step. The clock
always advances: every pass of a planner either trains, or moves to a later event, or counts
towards one of these ends. ``ClusterRun.meta`` counts (``rework_steps``, ``recoveries``) are
measured to the run's end (the target when it is reached).

**The fleet.** ``job.workers`` machines, each a data-parallel worker and the parameter
server of a share of the blocks (a random assignment of the rows of every parameter,
:func:`scarjax.scar.partition.build`, ``num_servers = workers``; Litz/SCAR's co-located
servers). An iteration on ``m`` live machines takes ``job.step_time(m) / machine.speed``
seconds; a machine revoked during an iteration aborts it (the step is rerun). The training
itself is the algorithm's plain loop (the global batch does not shrink with the fleet, it
is spread over the live machines): the fleet changes the *time* of a step, the policies'
recoveries change the *state*.

**Buying machines** (``_Fleet.buy``): the cheapest option at that moment: a transient machine
at the spot price if the market offers one (:meth:`~scarjax.cluster.market.Market.available`:
a price-driven market's price ``<=`` bid, a replayed trace's nodes present and not already
held by the job; a draw of lifetime 0 is a machine not granted) and it is cheaper than
on-demand, else, per the policy's ``unavailable`` rule, an on-demand one (``"on_demand"``,
the default) or none until the market offers one again (``"wait"``); a machine the market
did not offer is never used (both tiers share the market's start-up delay, so the price
decides; a market with a per-tier delay would weigh it in). New machines run after the market's start-up delay
(sampled per machine; the job waits for the slowest) and are billed from then. A transient
machine's lifetime is drawn when it is requested (``market.revocations``): from its start
for parametric/empirical processes, from the request time for price-driven and replayed
ones (their revocations are absolute times on the market's clock).

1. :func:`on_demand` - ``workers`` reliable machines, never revoked.
2. :func:`checkpoint_restart` - transient machines, a full checkpoint every ``K`` steps,
   ``K`` the Young/Daly interval ``tau = sqrt(2 delta MTTF)`` (Young 1974; Daly 2006's first
   order; TierML Sec 4.5's and Flint's comparison scheme) in steps, with ``delta =
   job.checkpoint_s`` and MTTF the job's mean time to its first revocation
   (``market.mttf_s() / workers`` for independent machines, ``market.mttf_s()`` for a bulk
   process). A checkpoint blocks training for ``delta``; one interrupted by a revocation is
   lost. On a revocation the job stops, the revoked machines are replaced on the cheapest
   option (start-up delay), the state is read back (``job.restore_s``) and the steps since
   the last checkpoint are redone for real (:meth:`Trainer.restore` to the checkpoint's
   state and step: the redone steps draw the same minibatches). Warnings are not used.
3. :func:`scar` - SCAR (thesis Sec 5.4): a running checkpoint updated every ``round(r K)``
   steps with the fraction ``r`` of the blocks that changed most (``'priority'``,
   :func:`scarjax.scar.checkpoint.select`), each write costing ``r delta`` (the same data per
   ``K`` steps as the full checkpoints). A revocation loses the revoked machines' blocks:
   they are recovered from the running checkpoint (:func:`scarjax.scar.faults.recover`,
   ``'partial'``; reading them costs ``job.restore_s`` times the lost share) and training
   goes on, on the surviving machines, until the replacements join after their start-up
   delay. A bulk revocation loses every block: partial recovery of all of them (from blocks
   saved at different steps) while the job waits for the new machines.

**Monte-Carlo** (:func:`scarjax.cluster.clock.simulate_trials`, the ``run_trials``
attributes). The clock of both transient policies depends on the market draw only (never on
the losses: a run is cut at the target afterwards), so each trial first plans its clock on
the host: a NumPy event loop over revocations, start-ups and checkpoints, no training (this
needs host control flow: price lookups, the cheapest-option choice and variable numbers of
events per trial; it costs microseconds per event). Then:

* checkpoint-restart needs *no* per-trial training at all: a restore reloads the exact state
  of the last checkpoint and the redone steps draw the same minibatches, so every trial's
  loss at global step ``k`` is the reliable run's (bit for bit; tested against the host
  path). One real run to ``max_steps`` serves all trials; the plans map its steps to time.
* SCAR's trajectory depends on which blocks are lost when: all trials are one
  :func:`scarjax.run_trials` program whose write hook takes the priority checkpoints and
  recovers the blocks of the servers each trial's plan revokes at each step (``hook_args``:
  padded per-trial arrays of revocation steps and servers). Same semantics as the host path
  (checkpoint, then recovery, at a step's write point); the floats may differ from it by
  rounding (``vmap``), and minibatch draws differ (``run_trials``' per-trial keys come from
  ``train_key``); the discrete schedule is identical.

**The planning API** (public, for Monte-Carlo drivers such as :mod:`scarjax.cluster.draws`):
:func:`plan_checkpoint_restart` and :func:`plan_scar` return a :class:`Plan` (the clock of one
market draw: its operations, fleet, ledger and events, no training; ``K`` from
:func:`resolve_interval_steps`, SCAR's blocks and running checkpoint from
:func:`scar_setup`); :func:`execute_plan` runs a plan with a
:class:`~scarjax.cluster.trainer.Trainer` (what the policies do) or a :class:`LossReplay` of
precomputed losses (the shared reliable run; SCAR's batched curves, executing
:meth:`Plan.training_only`) and records the :class:`~scarjax.cluster.clock.ClusterRun`;
:func:`check_arguments` is the policies' common argument check. A plan executed with a
Trainer is the policy's run bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import core
from scarjax import trials as _trials
from scarjax.cluster import clock as ck
from scarjax.cluster.ledger import Ledger
from scarjax.cluster.trainer import Trainer
from scarjax.cluster import market as mk
from scarjax.hooks import Hook
from scarjax.scar import checkpoint as sck
from scarjax.scar import faults as sfl
from scarjax.scar import partition as spt

__all__ = ["on_demand", "checkpoint_restart", "scar", "young_daly_s", "checkpoint_interval_steps", "UNAVAILABLE",
           "MAX_FUTILE_RESTARTS", "futile_give_up", "Plan", "LossReplay", "check_arguments",
           "resolve_interval_steps", "plan_checkpoint_restart", "plan_scar", "scar_setup", "execute_plan",
           "TIME_TOL_S", "seconds_per_step", "COUNTED_META"]

_EPS = 1e-9
#: The planners' tolerance (seconds) in comparisons of elapsed times (an event at ``t + TIME_TOL_S``
#: counts as at ``t``); the same for every planner of :mod:`scarjax.cluster` that reproduces them.
TIME_TOL_S = _EPS
#: What a transient policy does while the market offers fewer machines than it needs.
UNAVAILABLE = ("on_demand", "wait")
#: The stated give-up: a run ends (a ``'give_up'`` event) after this many revocations in a row
#: with no completed step between them (machines that live shorter than a step, forever).
MAX_FUTILE_RESTARTS = 1000
_COUNTED = ("rework_steps", "recoveries")  # meta counts measured to the run's end (the target)
#: The ``meta`` counts :func:`execute_plan` measures to the run's end (the target when reached).
COUNTED_META = _COUNTED


def futile_give_up(futile: int) -> str | None:
    """The stated give-up of every policy of :mod:`scarjax.cluster` (the module docstring's
    termination rule): after ``futile`` revocations in a row with no completed step between
    them, the ``'give_up'`` event's text once there are more than :data:`MAX_FUTILE_RESTARTS`
    (read at the call: machines that live shorter than a step, forever), else ``None``."""
    if futile > MAX_FUTILE_RESTARTS:
        return f"{futile} revocations without a completed step"
    return None


def young_daly_s(checkpoint_s: float, mttf_s: float) -> float:
    """The Young/Daly checkpoint interval ``sqrt(2 delta MTTF)`` seconds (``inf`` when the
    MTTF is infinite or the checkpoint free)."""
    va.check_real("checkpoint_s", checkpoint_s, lo=0.0, scalar=True)
    va.check_real("mttf_s", mttf_s, lo=0.0, lo_open=True, scalar=True, allow_inf=True)
    if not math.isfinite(mttf_s):
        return math.inf
    return math.sqrt(2.0 * checkpoint_s * mttf_s)


def checkpoint_interval_steps(job: ck.Job, market: mk.Market) -> float:
    """``K``: the Young/Daly interval of the job on ``market`` in steps of the full fleet
    (at least 1; ``inf``: never revoked, or the transient market is unavailable at the start -
    a price-driven market priced above the bid, whose sampled lifetimes are all 0 - so the
    fleet starts on reliable machines, which are never revoked)."""
    mttf = market.mttf_s()
    if mttf <= 0.0:
        return math.inf
    if not market.bulk:
        mttf = mttf / job.workers
    tau = young_daly_s(job.checkpoint_s, mttf)
    if not math.isfinite(tau):
        return math.inf
    dt = _dt(job, market, job.workers)
    return float(max(1, round(tau / dt)))


# --------------------------------------------------------------------------------------
# The fleet (host)


class _Fleet:
    """Machine slots, their tiers, trace nodes and revocation times (elapsed seconds), the
    ledger; ``retry``: when empty slots are requested again (``unavailable="wait"``)."""

    def __init__(self, job, market, key, prefer_transient=True, unavailable="on_demand"):
        self.job, self.market, self.key = job, market, key
        self.M = job.workers
        self.ledger = Ledger()
        self.t0 = float(market.start_time_s)
        self.mid = [None] * self.M
        self.tier = [None] * self.M
        self.node = np.full(self.M, -1, np.int64)  # the trace node a replayed machine is
        self.death = np.full(self.M, np.inf)  # elapsed time of revocation (inf: never)
        self.ready = np.full(self.M, np.inf)  # elapsed time it runs (inf: not bought)
        self.billed_from = np.full(self.M, np.inf)  # market time its ledger entry starts
        self.buys = 0
        self.prefer_transient = prefer_transient
        self.unavailable = unavailable
        self.retry = math.inf
        self.events: list = []

    def _held(self):
        p = self.market.process
        if not isinstance(p, mk.Replay):
            return None
        held = np.zeros(int(p.add_s.shape[0]), bool)
        for s in range(self.M):
            if self.mid[s] is not None and self.node[s] >= 0:
                held[self.node[s]] = True
        return held

    def _want(self, T):
        """The tier to request at market time ``T``: on-demand unless transient is preferred
        and cheaper; transient while the market offers machines; else the policy's
        ``unavailable`` rule (``None``: wait)."""
        m = self.market
        if not self.prefer_transient or not m.price_at("transient", T) < m.machine.on_demand_price:
            return "reliable"
        if m.transient_available(T):
            return "transient"
        return "reliable" if self.unavailable == "on_demand" else None

    def buy(self, slots, t):
        """Request machines for ``slots`` at ``t``; returns when the last one bought runs.
        Transient machines the market does not grant (lifetime 0: none obtainable, on a
        replayed trace none present that is not already held) are bought on-demand
        (``unavailable="on_demand"``) or left empty until :attr:`retry` (``"wait"``)."""
        slots = list(slots)
        if not slots:
            return t
        m, T, k = self.market, self.t0 + t, len(slots)
        want = self._want(T)
        up, life, node = m.acquire(self.key, self.buys, self.M, T, held=self._held())
        up, life, node = up[:k], life[:k], node[:k]
        self.buys += 1
        if want == "transient":
            granted = life > 0.0
            absolute = isinstance(m.process, (mk.PriceDriven, mk.Replay))
            death = t + life if absolute else t + up + life
            death = np.maximum(death, t + up)
        else:
            granted, death = np.zeros(k, bool), np.full(k, np.inf)
        other = "reliable" if (want == "reliable" or self.unavailable == "on_demand") else None
        tiers = ["transient" if g else other for g in granted]
        last = t
        price = {tier: m.price(tier) for tier in set(tiers) if tier is not None}
        up, death, node = up.tolist(), death.tolist(), node.tolist()  # plain numbers: a loop over slots
        for i, s in enumerate(slots):
            tier = tiers[i]
            if tier is None:
                continue
            self.mid[s] = f"{tier[0]}{self.buys}.{s}"
            self.tier[s] = tier
            self.ready[s] = t + up[i]
            self.death[s] = death[i] if tier == "transient" else np.inf
            self.node[s] = node[i] if tier == "transient" else -1
            self.billed_from[s] = T + up[i]
            self.ledger.start(self.mid[s], self.billed_from[s], price=price[tier], tier=tier, billing=m.billing)
            last = max(last, float(t + up[i]))
        for tier in ("transient", "reliable"):
            n_t = tiers.count(tier)
            if n_t:
                self.events.append((t, "request", f"{n_t} {tier} at {m.price_at(tier, T):.4g} $/h"))
        waiting = tiers.count(None)
        if waiting:
            self.retry = self._retry(T) - self.t0
            self.events.append((t, "unavailable", f"{waiting} machines not obtainable: wait until "
                                f"{self.retry:.0f} s"))
        elif not self.empty():
            self.retry = math.inf
        return float(last)

    def _retry(self, T):
        """The next market time after ``T`` at which the market may offer another machine."""
        p = self.market.process
        if isinstance(p, mk.Replay):  # a node the fleet does not hold: the next one added
            add = _by_identity("add_s", None, p, lambda: np.asarray(p.add_s, np.float64))
            later = add[add > T + _EPS]
            return float(later.min()) if later.size else math.inf
        nxt = self.market.next_available(T)
        return nxt if nxt > T + _EPS else T + 1.0

    def empty(self):
        return [s for s in range(self.M) if self.mid[s] is None]

    def revoke(self, slot):
        d = float(self.death[slot])
        self.ledger.stop(self.mid[slot], self._stop_time(slot, d), revoked=True)
        self.events.append((d, "revocation", self.mid[slot]))
        self.death[slot] = np.inf
        self.ready[slot] = np.inf
        self.mid[slot] = None
        self.node[slot] = -1

    def live(self, t):
        ready = self.ready.tolist()  # plain floats: many calls
        return np.array([self.mid[s] is not None and ready[s] <= t + _EPS for s in range(self.M)])

    def next_death(self):
        owned = [d for d, m in zip(self.death.tolist(), self.mid) if m is not None]  # plain floats: many calls
        return float(min(owned)) if owned else math.inf

    def _stop_time(self, slot, t):
        """The market time a machine stops at elapsed ``t``: never before its billing start (a
        machine still starting is billed 0; ``t0 + (t + up)`` and ``(t0 + t) + up`` may differ
        by an ulp)."""
        return max(self.t0 + float(t), float(self.billed_from[slot]))

    def stop_all(self, t):
        for s in range(self.M):
            if self.mid[s] is not None:
                self.ledger.stop(self.mid[s], self._stop_time(s, t), revoked=False)
                self.mid[s] = None


@dataclasses.dataclass
class Plan:
    """A transient policy's clock for one market draw, planned before any training (module
    docstring, "Monte-Carlo"): what :func:`plan_checkpoint_restart` and :func:`plan_scar`
    return and :func:`execute_plan` runs.

    Attributes:
      ops: the operations in order, tuples: ``('train', t, dt, n)`` (``n`` steps back to back
        from elapsed time ``t``, ``dt`` seconds each), ``('save',)`` / ``('rollback',)``
        (checkpoint-restart: a full checkpoint of the state; back to it), ``('ckpt', step)``
        / ``('lose', servers)`` (SCAR, thesis Sec 5.4: a priority running-checkpoint write at
        the step boundary; the blocks of the revoked ``servers`` lost and recovered
        partially).
      fleet: the machines and the :class:`~scarjax.cluster.ledger.Ledger` of the draw, all
        stopped at ``end_s``, with the clock's events ``(t, kind, detail)``.
      end_s: the planned end (elapsed seconds; :func:`execute_plan` cuts it at the target).
      meta: the run's ``meta`` (``interval_steps``, counts, ``workers``, ``unavailable``).
      marks: ``(t, name, amount)``: the ``meta`` counts (``rework_steps``, ``recoveries``) as
        they accrue, counted to the run's end.
    """

    ops: list
    fleet: Any
    end_s: float
    meta: dict
    marks: list = dataclasses.field(default_factory=list)

    def furthest_step(self) -> int:
        """The furthest global step the plan trains to (a rollback goes back to the last
        ``'save'``): how far one shared reliable run must go to serve it."""
        step, best, saved = 0, 0, 0
        for op in self.ops:
            if op[0] == "train":
                step += op[3]
                best = max(best, step)
            elif op[0] == "save":
                saved = step
            elif op[0] == "rollback":
                step = saved
        return best

    def training_only(self) -> "Plan":
        """The plan without its state operations (SCAR's ``'ckpt'``/``'lose'`` when they are
        applied inside a batched training program instead)."""
        return Plan([op for op in self.ops if op[0] == "train"], self.fleet, self.end_s, self.meta, self.marks)


def _dt(job, market, m):
    """Seconds per step on ``m`` live machines (memoised: the same float for every draw)."""
    try:
        return _step_seconds(job.step_time, int(m), market.machine.speed)
    except TypeError:  # an unhashable step time or speed
        return job.step_time(m) / market.machine.speed


def seconds_per_step(job: ck.Job, market: mk.Market, m: int) -> float:
    """Seconds per iteration on ``m`` live machines: ``job.step_time(m) / market.machine.speed``
    (module docstring, "The fleet"); the value every planner of this module uses."""
    return _dt(job, market, m)


@functools.lru_cache(maxsize=512)
def _step_seconds(step_time, m, speed):
    return step_time(m) / speed


def _chunk(n_max, granularity):
    return int(min(n_max, granularity))


# --------------------------------------------------------------------------------------
# Executing a plan with real training, cut at the target


class LossReplay:
    """A trainer stand-in serving a precomputed loss curve (``curve[k]``: the loss after
    global step ``k + 1``) to :func:`execute_plan`: a restore moves back to the step, a
    redone step serves the same loss (checkpoint-restart restores states of the one reliable
    trajectory; SCAR's curves come from a batched program that applied the plan's
    operations)."""

    def __init__(self, curve: Any):
        self.curve, self.step = np.asarray(curve), 0

    def train(self, n: int) -> np.ndarray:
        """The losses of the next ``n`` steps."""
        out = self.curve[self.step:self.step + n]
        if out.size < n:
            raise ValueError(f"the curve has {self.curve.size} steps, the plan asks for step {self.step + n}")
        self.step += n
        return out

    def snapshot(self) -> None:
        return None

    def restore(self, state: Any, step: int) -> None:
        self.step = int(step)


def execute_plan(plan: Plan, trainer: Any, job: ck.Job, policy: str, *, scar_ctx: Any = None,
                 stop_at_target: bool = True, deferred: bool = False) -> ck.ClusterRun:
    """Run ``plan`` with ``trainer`` (a :class:`~scarjax.cluster.trainer.Trainer` or a
    :class:`LossReplay`) and record the :class:`~scarjax.cluster.clock.ClusterRun` of
    ``policy`` (its name): each ``'train'`` op trains its steps for real, ``'save'`` /
    ``'rollback'`` snapshot and restore the trainer, ``'ckpt'`` / ``'lose'`` call
    ``scar_ctx`` (SCAR's running checkpoint and partial recovery, thesis Sec 5.4). The run
    ends at the first step whose loss is ``<= job.target_loss`` (``stop_at_target``), else at
    the plan's end; the fleet's events and the ``meta`` counts are kept up to the end.
    ``deferred``: leave the bill to :func:`scarjax.cluster.clock.settle` (many runs at once; the
    :class:`~scarjax.cluster.clock.Recorder`'s ``deferred``)."""
    if not isinstance(plan, Plan):
        raise TypeError(f"plan must be a policies.Plan, got {type(plan).__name__}")
    if scar_ctx is None and any(op[0] in ("ckpt", "lose") for op in plan.ops):
        raise ValueError("scar_ctx is needed by a plan with SCAR operations (or pass plan.training_only())")
    fleet = plan.fleet
    rec = ck.Recorder(policy, fleet.ledger, fleet.t0, deferred=deferred)
    snap = (trainer.snapshot(), trainer.step)
    end = plan.end_s
    hit = False
    executed = 0  # iterations run to the end (redone ones included): the step cap's count
    for op in plan.ops:
        kind = op[0]
        if kind == "train":
            _, t, dt, n = op
            step0 = trainer.step
            losses = trainer.train(n)
            rec.interval(t, dt, losses, step0)
            below = np.nonzero(losses <= job.target_loss)[0]
            if stop_at_target and below.size:
                end, hit = t + (int(below[0]) + 1) * dt, True
                executed += int(below[0]) + 1
                break
            executed += int(n)
        elif kind == "save":
            snap = (trainer.snapshot(), trainer.step)
        elif kind == "rollback":
            trainer.restore(*snap)
        elif kind == "ckpt":
            scar_ctx.checkpoint(trainer, op[1])
        elif kind == "lose":
            scar_ctx.lose(trainer, op[1])
    for e in fleet.events:
        if e[0] <= end + _EPS:
            rec.event(*e)
    if hit:
        rec.event(end, "target", f"loss <= {job.target_loss:g}")
    meta = dict(plan.meta)
    for name in {nm for _, nm, _ in plan.marks} | {k for k in meta if k in _COUNTED}:
        meta[name] = int(sum(a for tm, nm, a in plan.marks if nm == name and tm <= end + _EPS))
    meta["executed_steps"] = executed
    run = rec.finish(end, **meta)
    # points after the end (the rest of a cut interval) are dropped
    keep = run.time_s <= end + _EPS
    for f in ("time_s", "dollars", "loss", "steps"):
        if getattr(run, f) is not None:  # a deferred run's dollars: billed at the kept points by settle
            setattr(run, f, getattr(run, f)[keep])
    return run


# --------------------------------------------------------------------------------------
# 1. On-demand


def on_demand(job: ck.Job, market: mk.Market, *, key: Any, horizon_s: float, train_key: Any = 0,
              granularity: int = 25, stop_at_target: bool = True) -> ck.ClusterRun:
    """Policy 1: ``job.workers`` on-demand (reliable) machines until the target, the step
    budget or the horizon. ``granularity``: steps per training call (the cut-off's
    resolution is one step whatever it is)."""
    check_arguments(job, market, horizon_s, granularity)
    fleet = _Fleet(job, market, core.as_key(key), prefer_transient=False)
    t = fleet.buy(range(job.workers), 0.0)
    dt = _dt(job, market, job.workers)
    ops, step = [], 0
    while step < job.max_steps and t + dt <= horizon_s + _EPS:
        n = _chunk(min(job.max_steps - step, math.floor((horizon_s - t) / dt + _EPS)), granularity)
        ops.append(("train", t, dt, n))
        t, step = t + n * dt, step + n
    fleet.stop_all(t)
    plan = Plan(ops, fleet, t, {"workers": job.workers})
    return execute_plan(plan, Trainer(job.algorithm, train_key), job, "on_demand", stop_at_target=stop_at_target)


def check_arguments(job: ck.Job, market: mk.Market, horizon_s: float, granularity: int,
                    unavailable: str = "on_demand") -> None:
    """Check the arguments every policy of this module shares (``TypeError`` / ``ValueError``
    naming the argument): ``job`` a :class:`~scarjax.cluster.clock.Job`, ``market`` a
    :class:`~scarjax.cluster.market.Market`, ``horizon_s > 0``, ``granularity >= 1``,
    ``unavailable`` one of :data:`UNAVAILABLE`."""
    if not isinstance(job, ck.Job):
        raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
    if not isinstance(market, mk.Market):
        raise TypeError(f"market must be a scarjax.cluster.market.Market, got {type(market).__name__}")
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    va.check_int("granularity", granularity, lo=1)
    va.check_choice("unavailable", unavailable, UNAVAILABLE)


# --------------------------------------------------------------------------------------
# 2. Checkpoint-restart


def plan_checkpoint_restart(job: ck.Job, market: mk.Market, key: Any, horizon_s: float, K: float,
                            granularity: int = 25, unavailable: str = "on_demand") -> Plan:
    """The clock of :func:`checkpoint_restart` for the market draw ``key`` (a PRNG key), no
    training (module docstring, policy 2): a full checkpoint every ``K`` steps (``inf``:
    never; :func:`resolve_interval_steps`), rollbacks to it on revocations, replacements,
    restores, the ledger. Run it with :func:`execute_plan`."""
    check_arguments(job, market, horizon_s, granularity, unavailable)
    fleet = _Fleet(job, market, key, unavailable=unavailable)
    M, delta = job.workers, float(job.checkpoint_s)
    t = fleet.buy(range(M), 0.0)
    dt = _dt(job, market, M)
    ops, marks, step, ck_step, rework, executed, futile = [], [], 0, 0, 0, 0, 0
    restore_due = False  # a restart waits for the full fleet before reading the checkpoint back
    while executed < job.max_steps and t < horizon_s:
        td = fleet.next_death()
        if td <= t + _EPS or (math.isfinite(K) and step == ck_step + K and t + delta > td):
            # a revocation (possibly during a checkpoint's write: the write is lost)
            t = max(t, td)
            for s in np.nonzero(fleet.death <= t + _EPS)[0]:
                fleet.revoke(int(s))
            if step > ck_step:
                fleet.events.append((t, "rework", f"{step - ck_step} steps back to {ck_step}"))
                marks.append((t, "rework_steps", step - ck_step))
                rework += step - ck_step
            ops.append(("rollback",))
            step = ck_step
            futile += 1
            why = futile_give_up(futile)
            if why:
                fleet.events.append((t, "give_up", why))
                break
            t = fleet.buy(fleet.empty(), t)
            restore_due = True
            if not fleet.empty():
                t += float(job.restore_s)
                restore_due = False
                fleet.events.append((t, "restart", f"from step {ck_step}"))
            continue
        empty = fleet.empty()
        if empty:  # unavailable="wait": the job waits for the market to offer the missing machines
            r = fleet.retry
            if not math.isfinite(min(r, td)):
                fleet.events.append((t, "give_up", "the market offers no more machines"))
                break
            if min(r, td) > horizon_s:
                t = float(horizon_s)  # waited out to the horizon
                break
            if td < r:
                t = max(t, td)
                continue
            t = fleet.buy(empty, max(t, r))
            if restore_due and not fleet.empty():
                t += float(job.restore_s)
                restore_due = False
                fleet.events.append((t, "restart", f"from step {ck_step}"))
            continue
        if math.isfinite(K) and step == ck_step + K:
            ops.append(("save",))
            t += delta
            ck_step = step
            fleet.events.append((t, "checkpoint", f"step {step}"))
            continue
        left = job.max_steps - executed
        if math.isfinite(K):
            left = min(left, ck_step + int(K) - step)
        fit = math.floor((min(td, horizon_s) - t) / dt + _EPS)
        n = _chunk(min(left, fit), granularity)
        if n < 1:
            if td <= horizon_s:
                t = td  # the step in progress is lost with the machine
                continue
            break
        ops.append(("train", t, dt, n))
        t, step, executed, futile = t + n * dt, step + n, executed + n, 0
    fleet.stop_all(t)
    return Plan(ops, fleet, t, {"interval_steps": K, "rework_steps": rework, "workers": M,
                                 "unavailable": unavailable}, marks)


def checkpoint_restart(job: ck.Job, market: mk.Market, *, key: Any, horizon_s: float, train_key: Any = 0,
                       interval_steps: float | None = None, granularity: int = 25,
                       unavailable: str = "on_demand", stop_at_target: bool = True) -> ck.ClusterRun:
    """Policy 2: checkpoint-restart on transient machines at the Young/Daly interval (see
    the module docstring). ``interval_steps``: override ``K`` (steps between full
    checkpoints; default :func:`checkpoint_interval_steps`). ``unavailable``: what the job
    does while the market offers fewer transient machines than it needs (module docstring,
    "Buying machines"): ``"on_demand"`` buys the missing ones on-demand, ``"wait"`` waits
    for the market (the run ends at the horizon, or with a ``'give_up'`` event when the
    market will offer none again)."""
    check_arguments(job, market, horizon_s, granularity, unavailable)
    K = resolve_interval_steps(job, market, interval_steps)
    plan = plan_checkpoint_restart(job, market, core.as_key(key), float(horizon_s), K, granularity, unavailable)
    return execute_plan(plan, Trainer(job.algorithm, train_key), job, "checkpoint_restart",
                        stop_at_target=stop_at_target)


def resolve_interval_steps(job: ck.Job, market: mk.Market, interval_steps: Any = None) -> float:
    """``K``, the steps between checkpoints: ``interval_steps`` (an int ``>= 1``) when given,
    else the Young/Daly interval :func:`checkpoint_interval_steps` (``inf``: never)."""
    if interval_steps is None:
        return checkpoint_interval_steps(job, market)
    return float(va.check_int("interval_steps", interval_steps, lo=1))


def _checkpoint_restart_trials(job, market, keys, *, horizon_s, train_key=0, interval_steps=None,
                               granularity=25, unavailable="on_demand", stop_at_target=True):
    """Trials of :func:`checkpoint_restart`: one real run shared by all (module docstring)."""
    check_arguments(job, market, horizon_s, granularity, unavailable)
    K = resolve_interval_steps(job, market, interval_steps)
    plans = [plan_checkpoint_restart(job, market, k, float(horizon_s), K, granularity, unavailable) for k in keys]
    need = max([p.furthest_step() for p in plans] + [1])
    curve = Trainer(job.algorithm, train_key).train(need)
    return [execute_plan(p, LossReplay(curve), job, "checkpoint_restart", stop_at_target=stop_at_target) for p in plans]


checkpoint_restart.run_trials = _checkpoint_restart_trials


# --------------------------------------------------------------------------------------
# 3. SCAR


def plan_scar(job: ck.Job, market: mk.Market, key: Any, horizon_s: float, K: float, fraction: float,
              granularity: int, spec: sck.Checkpoint, unavailable: str = "on_demand") -> Plan:
    """The clock of :func:`scar` for the market draw ``key`` (a PRNG key), no training (module
    docstring, policy 3; thesis Sec 5.4): a running-checkpoint write of the ``fraction`` of
    the blocks every ``spec``'s period (a ``'ckpt'`` op, costing ``fraction *
    job.checkpoint_s``), a ``'lose'`` op and a partial recovery per revocation, training on
    the live machines meanwhile. ``K`` and ``spec`` come from :func:`scar_setup`. Run it with
    :func:`execute_plan` (``scar_ctx``) or apply its operations in a batched program and
    execute :meth:`Plan.training_only`."""
    check_arguments(job, market, horizon_s, granularity, unavailable)
    fleet = _Fleet(job, market, key, unavailable=unavailable)
    M, delta = job.workers, float(job.checkpoint_s)
    I = math.inf if spec.period is None else _by_identity("every", None, spec, lambda: int(sck.interval(spec)))
    t = fleet.buy(range(M), 0.0)
    ops, marks, step, last_ck, losses_events, futile = [], [], 0, 0, 0, 0
    while step < job.max_steps and t < horizon_s:
        # checkpoint due at this step boundary (before any recovery at it: the hook's order)
        if math.isfinite(I) and step > 0 and step % I == 0 and last_ck != step:
            ops.append(("ckpt", step))
            t += fraction * delta
            last_ck = step
            fleet.events.append((t, "checkpoint", f"step {step}: {fraction:.3g} of the blocks"))
            continue
        td = fleet.next_death()
        if td <= t + _EPS:
            dead = [int(s) for s in np.nonzero(fleet.death <= t + _EPS)[0]]
            for s in dead:
                fleet.revoke(s)
            ops.append(("lose", tuple(dead)))
            losses_events += 1
            marks.append((t, "recoveries", 1))
            futile += 1
            why = futile_give_up(futile)
            if why:
                fleet.events.append((t, "give_up", why))
                break
            t += float(job.restore_s) * len(dead) / M
            fleet.events.append((t, "recovery", f"partial: blocks of servers {dead} at step {step}"))
            fleet.buy(dead, t)
            continue
        empty = fleet.empty()
        retry = fleet.retry if empty else math.inf
        if empty and retry <= t + _EPS:
            fleet.buy(empty, t)  # unavailable="wait": the market offers machines again
            continue
        live = fleet.live(t)
        m = int(live.sum())
        if m == 0:
            waiting = fleet.ready[[fleet.mid[s] is not None for s in range(M)]]
            t_next = min(float(waiting.min()) if waiting.size else math.inf, td, retry)
            if not math.isfinite(t_next):
                fleet.events.append((t, "give_up", "no machine, and the market offers no more"))
                break
            if t_next > horizon_s:
                t = float(horizon_s)  # waited out to the horizon
                break
            t = max(t, t_next)
            continue
        dt = _dt(job, market, m)
        ready = fleet.ready.tolist()
        arrivals = [ready[s] for s in range(M) if fleet.mid[s] is not None and ready[s] > t + _EPS]
        t_change = min([td, retry] + arrivals)
        left = job.max_steps - step
        if math.isfinite(I):
            left = min(left, I - step % I)
        fit = math.floor((min(t_change, horizon_s) - t) / dt + _EPS)
        n = _chunk(min(left, fit), granularity)
        if n < 1:
            if t_change <= horizon_s:
                t = t_change  # a death aborts the step in progress; an arrival joins at once
                continue
            break
        ops.append(("train", t, dt, n))
        t, step, futile = t + n * dt, step + n, 0
    fleet.stop_all(t)
    return Plan(ops, fleet, t, {"interval_steps": K, "checkpoint_every": I, "fraction": fraction,
                                 "recoveries": losses_events, "workers": M, "unavailable": unavailable}, marks)


_PROGRAMS: dict = {}  # id(partition), id(spec) -> (partition, spec, programs); both cached by _scar_spec


def _by_identity(kind, partition, spec, make):
    """``make()`` cached per ``kind`` and the identity of ``partition`` and ``spec`` (objects
    kept alive by the cache: an id is never reused while its entry stands)."""
    k = (kind, id(partition), id(spec))
    if k not in _PROGRAMS or _PROGRAMS[k][0] is not partition or _PROGRAMS[k][1] is not spec:
        _PROGRAMS[k] = (partition, spec, make())
    return _PROGRAMS[k][2]


def _scar_programs(partition, spec, norm):
    """Jitted checkpoint step and partial recovery for one (partition, spec): cached, so
    repeated policy calls on one job compile once."""
    def make():
        step = jax.jit(lambda c, st, k, kk: sck.step(spec, c, st, partition, k, kk, norm)[0])
        recover = jax.jit(lambda st, saved, failed: sfl.recover(
            "partial", st, saved, partition, spt.server_blocks(partition, failed)))
        return step, recover

    return _by_identity("host", partition, spec, make)


class _ScarHost:
    """Host-side running checkpoint and partial recovery (scarjax.scar.checkpoint / faults)."""

    def __init__(self, job, state, partition, spec, key):
        self.partition, self.key = partition, key
        self.ckpt = sck.init(state, partition, spec)
        self._step, self._recover = _scar_programs(partition, spec, job.algorithm.norm)

    def checkpoint(self, trainer, step):
        self.ckpt = self._step(self.ckpt, trainer.state, jnp.int32(step), jax.random.fold_in(self.key, step))

    def lose(self, trainer, servers):
        failed = np.zeros(self.partition.num_servers, bool)
        failed[list(servers)] = True
        trainer.restore(core.State(*self._recover(trainer.state, self.ckpt.saved, jnp.asarray(failed))))


def scar_setup(job: ck.Job, market: mk.Market, fraction: float, strategy: str = "priority",
               partition_key: int = 0, interval_steps: Any = None) -> tuple:
    """``(K, partition, spec)`` of :func:`scar`: ``K`` (:func:`resolve_interval_steps`), the
    blocks (rows of every parameter on ``job.workers`` servers, assigned from
    ``partition_key``; :func:`scarjax.scar.partition.build`) and the running checkpoint
    (:class:`scarjax.scar.checkpoint.Checkpoint`: ``strategy`` choosing the ``fraction`` of
    the blocks written every ``round(fraction K)`` steps, thesis Sec 5.4.2). The partition
    and spec are cached per setting (the same objects: compiled programs are reused)."""
    va.check_real("fraction", fraction, lo=0.0, hi=1.0, lo_open=True, scalar=True)
    va.check_choice("strategy", strategy, ("priority", "round_robin", "random"))
    K = resolve_interval_steps(job, market, interval_steps)
    partition, spec = _scar_spec(job.algorithm, job.workers, float(fraction), strategy, K, int(partition_key))
    return K, partition, spec


@functools.lru_cache(maxsize=64)
def _scar_spec(algorithm, workers, fraction, strategy, K, partition_key):
    """The partition (rows of every parameter on ``workers`` servers) and the checkpoint
    spec, cached per job setting (the same objects: the compiled programs are reused)."""
    st0 = jax.eval_shape(lambda: core.State(*algorithm.init(jax.random.key(0), algorithm.data)))
    partition = spt.build(st0, "row", num_servers=workers, key=partition_key)
    spec = sck.Checkpoint(strategy, fraction, int(K) if math.isfinite(K) else None)
    return partition, spec


def scar(job: ck.Job, market: mk.Market, *, key: Any, horizon_s: float, train_key: Any = 0,
         fraction: float = 0.25, strategy: str = "priority", granularity: int = 25, partition_key: int = 0,
         interval_steps: float | None = None, unavailable: str = "on_demand",
         stop_at_target: bool = True) -> ck.ClusterRun:
    """Policy 3: SCAR partial recovery with priority running checkpoints (module docstring):
    ``fraction`` ``r`` of the blocks saved every ``round(r K)`` steps (thesis Sec 5.4.2),
    ``strategy`` the selection (``'priority'``: Sec 5.4.2's heuristic), blocks = rows of the
    parameters on ``job.workers`` servers (random assignment from ``partition_key``).
    ``interval_steps``: override ``K`` (default :func:`checkpoint_interval_steps`, as
    :func:`checkpoint_restart`); ``unavailable``: as there (``"wait"``: SCAR trains on the
    machines it has and adds the missing ones when the market offers them)."""
    check_arguments(job, market, horizon_s, granularity, unavailable)
    K, partition, spec = scar_setup(job, market, fraction, strategy, partition_key, interval_steps)
    plan = plan_scar(job, market, core.as_key(key), float(horizon_s), K, float(fraction), granularity, spec,
                      unavailable)
    trainer = Trainer(job.algorithm, train_key)
    ctx = _ScarHost(job, trainer.state, partition, spec, jax.random.fold_in(core.as_key(train_key), 7))
    return execute_plan(plan, trainer, job, "scar", scar_ctx=ctx, stop_at_target=stop_at_target)


def _scar_hook(partition, spec):
    return _by_identity("hook", partition, spec, lambda: _make_scar_hook(partition, spec))


def _make_scar_hook(partition, spec):
    def factory(args):
        rev_step, rev_server = args["step"], args["server"]  # int32[E] each, -1 padding

        def init_fn(state, key):
            return sck.init(state, partition, spec)

        def apply(state, hstate, ctx):
            hstate, _ = sck.step(spec, hstate, state, partition, ctx.step, ctx.key, ctx.algorithm.norm)
            hit = (rev_step == ctx.step) & (rev_step >= 0)
            failed = jnp.zeros((partition.num_servers,), bool).at[jnp.where(hit, rev_server, 0)].max(hit)
            lost = spt.server_blocks(partition, failed)
            rec = sfl.recover("partial", state, hstate.saved, partition, lost)
            return rec, hstate

        return Hook(point="write", init=init_fn, apply=apply, name="scar_cluster")

    return factory


def _scar_trials(job, market, keys, *, horizon_s, train_key=0, fraction=0.25, strategy="priority",
                 granularity=25, partition_key=0, interval_steps=None, unavailable="on_demand",
                 stop_at_target=True):
    """Trials of :func:`scar` as one :func:`scarjax.run_trials` program (module docstring)."""
    check_arguments(job, market, horizon_s, granularity, unavailable)
    K, partition, spec = scar_setup(job, market, fraction, strategy, partition_key, interval_steps)
    plans = [plan_scar(job, market, k, float(horizon_s), K, float(fraction), granularity, spec, unavailable)
             for k in keys]
    n = len(plans)
    events = []
    for p in plans:
        step, ev = 0, []
        for op in p.ops:
            if op[0] == "train":
                step += op[3]
            elif op[0] == "lose":
                ev += [(step, s) for s in op[1]]
        events.append(ev)
    steps = job.max_steps  # one program per job (a plan never runs past max_steps)
    E = max([len(e) for e in events] + [1])
    rs = np.full((n, E), -1, np.int32)
    rv = np.zeros((n, E), np.int32)
    for i, ev in enumerate(events):
        for j, (s, srv) in enumerate(ev):
            rs[i, j], rv[i, j] = s, srv
    tk = core.as_key(train_key)
    init = Trainer(job.algorithm, tk).state
    tkeys = jnp.stack([jax.random.fold_in(tk, 1)] * n)
    _, trace = _trials.run_trials(job.algorithm, _scar_hook(partition, spec), steps, tkeys,
                                  hook_args={"step": jnp.asarray(rs), "server": jnp.asarray(rv)}, init_state=init)
    curves = np.asarray(trace.loss[:, 1:], np.float64)
    return [execute_plan(p.training_only(), LossReplay(curves[i]), job, "scar", stop_at_target=stop_at_target)
            for i, p in enumerate(plans)]


scar.run_trials = _scar_trials
