"""The cluster engine's contract: a :class:`Job`, the :class:`ClusterRun` every policy returns,
the :class:`Recorder` that builds it, and Monte-Carlo over market draws.

Every policy (:mod:`scarjax.cluster.policies` and the TierML, BidBrain, Sync-on-the-fly and
Litz modules) is a plain function ``policy(job, market, *, key, horizon_s, **options) ->
ClusterRun``. It advances simulated time interval by interval; each interval runs *actual*
iterations of the job (:class:`~scarjax.cluster.trainer.Trainer`, :func:`scarjax.run`
continued from the previous state), lasts as long as the step-time model
(:class:`~scarjax.cluster.steptime.StepTime`) and the checkpoint, restore and start-up costs
say, and is billed by a :class:`~scarjax.cluster.ledger.Ledger` under the market's rules
(:class:`scarjax.cluster.market.Market`, :func:`scarjax.cluster.market.bill`). A
:class:`Recorder` collects the loss-vs-time and loss-vs-dollars curves into a
:class:`ClusterRun`.

The pieces live one concept per module: :mod:`~scarjax.cluster.market` (the one
:class:`~scarjax.cluster.market.Market`: machines on offer, revocations, prices, bills),
:mod:`~scarjax.cluster.steptime`, :mod:`~scarjax.cluster.ledger`,
:mod:`~scarjax.cluster.trainer`, and this module.

Conventions:

1. ``Ledger`` times are on the market's clock (``market.start_time_s + elapsed``), since a
   price series is; ``ClusterRun.time_s`` is elapsed seconds since the job's start.
2. ``Recorder.interval`` records one point per *step* (not per interval), so
   ``ClusterRun.to_target`` resolves the time and the dollars at the step the target is
   reached, not at the end of the interval holding it.
3. ``key`` draws the market (revocations, start-up delays, which trace node); the training
   randomness is the job's own.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from scarjax import validate as va
from scarjax import core
from scarjax.cluster import market as mk
from scarjax.cluster.ledger import Ledger, bill_runs
from scarjax.cluster.steptime import StepTime

__all__ = [
    "Job",
    "Outcome",
    "ClusterRun",
    "Recorder",
    "settle",
    "simulate_trials",
    "outcomes",
]


# --------------------------------------------------------------------------------------
# Jobs, runs and outcomes


@dataclasses.dataclass(frozen=True)
class Job:
    """A training job.

    Attributes:
      algorithm: the :class:`scarjax.Algorithm` trained for real.
      target_loss: the loss that counts as done.
      step_time: a :class:`StepTime`.
      workers: machines the job runs on (data-parallel workers, each also a server shard).
      checkpoint_s: seconds to write a full checkpoint (a partial one: proportionally less).
      restore_s: seconds to read a full checkpoint back.
      max_steps: iteration budget, the same cap for every policy: *executed* iterations
        (redone ones included: checkpoint-restart's rework, TierML's rollbacks), so a policy
        stops after ``max_steps`` iterations of work even short of the target.
      batch_size: the global batch (informational; for :func:`step_time_pollux`).
    """

    algorithm: Any
    target_loss: float
    step_time: StepTime
    workers: int = 4
    checkpoint_s: float = 0.0
    restore_s: float = 0.0
    max_steps: int = 1000
    batch_size: int | None = None

    def __post_init__(self):
        if not isinstance(self.algorithm, core.Algorithm):
            raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(self.algorithm).__name__}")
        va.check_real("target_loss", self.target_loss, scalar=True)
        if not isinstance(self.step_time, StepTime):
            raise TypeError(f"step_time must be a StepTime, got {type(self.step_time).__name__}")
        va.check_int("workers", self.workers, lo=1)
        va.check_real("checkpoint_s", self.checkpoint_s, lo=0.0, scalar=True)
        va.check_real("restore_s", self.restore_s, lo=0.0, scalar=True)
        va.check_int("max_steps", self.max_steps, lo=1)
        if self.batch_size is not None:
            va.check_int("batch_size", self.batch_size, lo=1)


class Outcome(NamedTuple):
    """Time and dollars to a target loss; ``reached=False``: right-censored (the run ended
    first; the values are those at its end, lower bounds)."""

    reached: bool
    time_s: float
    dollars: float
    steps: int


@dataclasses.dataclass
class ClusterRun:
    """What every policy returns: one point per recorded step (``time_s`` elapsed since the
    job's start, ``dollars`` the job's cost had it ended there (:meth:`Ledger.cost`), ``loss``
    after it, global ``steps`` done), events ``(t, kind, detail)``, the cost by tier and the
    free machine-seconds at the end, and the :class:`Ledger` itself (not in JSON).

    ``dollars`` is "the bill if the user stopped every machine now": under hourly billing it
    may *drop* where the provider revokes a machine (its begun partial hour becomes free), so
    a loss-vs-dollars curve can step back there; it is monotone between revocations."""

    policy: str
    time_s: np.ndarray
    dollars: np.ndarray
    loss: np.ndarray
    steps: np.ndarray
    events: list
    cost_by_tier: dict
    free_seconds: float
    end_s: float = 0.0
    meta: dict = dataclasses.field(default_factory=dict)
    ledger: Any = dataclasses.field(default=None, repr=False, compare=False)

    def to_target(self, target_loss: float) -> Outcome:
        """The first point with ``loss <= target_loss``; if none, a censored outcome at the
        run's end (its total time and dollars)."""
        va.check_real("target_loss", target_loss, scalar=True)
        hit = np.nonzero(self.loss <= target_loss)[0]
        if hit.size:
            i = int(hit[0])
            return Outcome(True, float(self.time_s[i]), float(self.dollars[i]), int(self.steps[i]))
        total = sum(self.cost_by_tier.values())
        last = int(self.steps[-1]) if self.steps.size else 0
        return Outcome(False, float(self.end_s), float(total), last)

    def count(self, kind: str) -> int:
        """Events of ``kind``."""
        return sum(1 for e in self.events if e[1] == kind)

    def to_json(self, max_points: int = 400) -> dict:
        """A JSON-able dict (curves thinned to at most ``max_points``, the last kept)."""
        n = self.loss.size
        idx = np.unique(np.linspace(0, n - 1, min(n, max_points)).round().astype(int)) if n else np.zeros(0, int)
        return {
            "policy": self.policy,
            "time_s": self.time_s[idx].tolist(),
            "dollars": self.dollars[idx].tolist(),
            "loss": self.loss[idx].tolist(),
            "steps": self.steps[idx].astype(int).tolist(),
            "events": [[float(t), k, d] for t, k, d in self.events],
            "cost_by_tier": {k: float(v) for k, v in self.cost_by_tier.items()},
            "free_seconds": float(self.free_seconds),
            "end_s": float(self.end_s),
            "meta": self.meta,
        }


_STEPS: dict = {}  # np.arange(1, n + 1) by n, read-only (Recorder.interval asks at every chunk)


class Recorder:
    """Collects a policy's points and events into a :class:`ClusterRun`.

    Args:
      policy: the policy's name.
      ledger: the run's :class:`Ledger` (dollars at each point come from it).
      t0: the job's start on the market's clock (``market.start_time_s``).
      deferred: ``True``: :meth:`finish` leaves the bill out (``dollars``, ``cost_by_tier`` and
        ``free_seconds`` ``None``) for :func:`settle` to fill, for many runs in one vectorised
        call (:mod:`scarjax.cluster.draws`); a deferred run is not complete before.
    """

    def __init__(self, policy: str, ledger: Ledger, t0: float = 0.0, *, deferred: bool = False):
        self.policy, self.ledger, self.t0 = policy, ledger, float(t0)
        self.deferred = bool(deferred)
        self._t, self._loss, self._steps = [], [], []
        self.events: list = []

    def interval(self, t_start: float, step_s: float, losses: Any, step0: int) -> float:
        """Record ``len(losses)`` steps run back to back from elapsed time ``t_start``, each
        taking ``step_s``, the first being global step ``step0 + 1`` after it. Returns the
        elapsed time at the interval's end."""
        losses = np.asarray(losses, np.float64)
        k = _STEPS.get(losses.size)
        if k is None:
            k = _STEPS[losses.size] = np.arange(1, losses.size + 1)
            k.flags.writeable = False
        self._t.append(t_start + k * step_s)
        self._loss.append(losses)
        self._steps.append(step0 + k)
        return float(t_start + losses.size * step_s)

    def point(self, t: float, loss: float, steps: int) -> None:
        """One point at elapsed time ``t``."""
        self._t.append(np.array([t], np.float64))
        self._loss.append(np.array([loss], np.float64))
        self._steps.append(np.array([steps]))

    def event(self, t: float, kind: str, detail: str = "") -> None:
        self.events.append((float(t), str(kind), str(detail)))

    def finish(self, end_s: float, **meta: Any) -> ClusterRun:
        """The :class:`ClusterRun`; dollars at each point from the ledger (machines still
        running are billed as stopped by the user at that point), totals at ``end_s``."""
        cat = lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)  # noqa: E731
        t, loss, steps = cat(self._t, np.float64), cat(self._loss, np.float64), cat(self._steps, np.int64)
        if self.deferred:
            return ClusterRun(self.policy, t, None, loss, steps, list(self.events), None, None, float(end_s),
                              dict(meta), self.ledger)
        dollars = self.ledger.cost_curve(self.t0 + t)
        t_end = self.t0 + float(end_s)
        return ClusterRun(self.policy, t, dollars, loss, steps, list(self.events), self.ledger.by_tier(t_end),
                          self.ledger.free_seconds(t_end), float(end_s), dict(meta), self.ledger)


def settle(runs: Sequence[ClusterRun], t0: Sequence[float]) -> list[ClusterRun]:
    """Fill in the bills of runs a deferred :class:`Recorder` finished (``t0[i]``: run ``i``'s
    start on the market's clock): ``dollars`` at every point, ``cost_by_tier`` and
    ``free_seconds`` at the end, from each run's own ledger, all in one vectorised call
    (:func:`~scarjax.cluster.ledger.bill_runs`: the same values as :meth:`Recorder.finish`
    computes per run). Runs already billed are left as they are; returns ``runs``."""
    runs = list(runs)
    t0 = [float(x) for x in t0]
    if len(t0) != len(runs):
        raise ValueError(f"t0 must have one start per run ({len(runs)}), got {len(t0)}")
    todo = [i for i, r in enumerate(runs) if r.dollars is None]
    bills = bill_runs([runs[i].ledger for i in todo], [t0[i] + runs[i].time_s for i in todo],
                      [t0[i] + runs[i].end_s for i in todo])
    for i, (dollars, by_tier, free) in zip(todo, bills):
        runs[i].dollars, runs[i].cost_by_tier, runs[i].free_seconds = dollars, by_tier, free
    return runs


# --------------------------------------------------------------------------------------
# Monte-Carlo


def simulate_trials(policy: Callable, job: Job, market: mk.Market, n: int, key: Any, *, horizon_s: float,
                    **options: Any) -> list[ClusterRun]:
    """``n`` runs of ``policy`` on independent market draws (keys ``split(key, n)``).

    If the policy has a vectorised path (an attribute ``run_trials(job, market, keys, *,
    horizon_s, **options) -> list[ClusterRun]``; :func:`~scarjax.cluster.policies.
    checkpoint_restart` and :func:`~scarjax.cluster.policies.scar` do) it is used;
    otherwise a Python loop over the keys (a policy whose decisions depend on the
    training's state, or on prices in flight, needs the host between intervals)."""
    n = va.check_int("n", n, lo=1)
    if not callable(policy):
        raise TypeError(f"policy must be a callable policy(job, market, *, key, horizon_s, ...), got {policy!r}")
    keys = jax.random.split(core.as_key(key), n)
    fast = getattr(policy, "run_trials", None)
    if fast is not None:
        return fast(job, market, keys, horizon_s=horizon_s, **options)
    return [policy(job, market, key=k, horizon_s=horizon_s, **options) for k in keys]


def outcomes(runs: Sequence[ClusterRun], target_loss: float) -> dict[str, np.ndarray]:
    """``{'reached', 'time_s', 'dollars', 'steps'}`` arrays over runs (censored where not
    reached: feed ``experiments._stats.summary`` with ``inf`` where not reached and the
    run's end as the horizon)."""
    outs = [r.to_target(target_loss) for r in runs]
    return {
        "reached": np.array([o.reached for o in outs]),
        "time_s": np.array([o.time_s for o in outs]),
        "dollars": np.array([o.dollars for o in outs]),
        "steps": np.array([o.steps for o in outs]),
    }
