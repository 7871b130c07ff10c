"""A simulated cluster clock driving real training: the shared API of the
transient-cluster policies.

Every policy (:mod:`scarjax.cluster.policies` and the TierML, BidBrain, Sync-on-the-fly and
Litz modules) is a plain function ``policy(job, market, *, key, horizon_s, **options) ->
ClusterRun``. It advances simulated time interval by interval; each interval runs *actual*
iterations of the job (:class:`Trainer`, :func:`scarjax.run` continued from the previous
state), lasts as long as the step-time model (:class:`StepTime`) and the checkpoint, restore
and start-up costs say, and is billed by a :class:`Ledger` under the market's rules
(:func:`scarjax.cluster.market.bill`). A :class:`Recorder` collects the loss-vs-time and
loss-vs-dollars curves into a :class:`ClusterRun`.

Pieces:

* :class:`StepTime` - seconds per iteration for ``M`` workers, vectorised over ``M``:
  :func:`step_time_fixed`, :func:`step_time_linear` (``t(M) = compute_s / M + sync_s *
  log2(M)``: perfectly divided compute plus a tree all-reduce whose depth grows as
  ``log2 M``; ``t(1) = compute_s``) and :func:`step_time_pollux` (thesis Eq 3.5-3.8 for a
  global batch ``batch_size`` split over ``M`` GPUs, ``gpus_per_node`` per node, local batch
  ``ceil(batch_size / M)``, no gradient accumulation).
* :class:`MachineType` and :class:`Market` (machine type, revocation process, billing rule,
  start-up delay, start time on the process's clock).
* :class:`Ledger` - the bills of one simulated run: one entry per machine (id, tier, price,
  start, stop, revoked by the provider or not). Fixed prices are billed by a NumPy mirror of
  :func:`~scarjax.cluster.market.bill` (same rule: whole hours from the start, a duration
  within ``tol_s = 1`` s of a whole number of hours counts as that number, the last partial
  hour charged when the user stops the machine and free when the provider revokes it;
  per-second: the integral), tested equal to it; :class:`~scarjax.cluster.market.PriceSeries`
  prices are billed by ``bill`` itself.
* :class:`Trainer` - real scarjax training advanced interval by interval.
* :class:`Job`, :class:`Recorder`, :class:`ClusterRun`, :class:`Outcome`,
  :func:`simulate_trials`.

**Deviations from the shared design (docs for the other policy authors).**

1. ``Trainer`` keys. The design has each ``train`` call run ``scarjax.run(algorithm, hooks,
   steps, fold_in(key, self.step), init_state=self.state)``. Then the random numbers (the
   minibatches) of a step depend on where the intervals were cut, so a policy that cuts
   the run differently (at checkpoints, revocations) could never equal the reliable run bit
   for bit. Without hooks, :meth:`Trainer.train` therefore runs units of ``unit`` steps
   (default 1), unit ``u`` keyed by ``fold_in(key, u * unit)`` (the global step), each one
   ``scarjax.core.run_one`` of ``unit`` steps from the current state inside one jitted
   ``lax.scan``: the result depends on the global step only, not on the cutting, and a
   redone step (rework after a restore with ``restore(state, step)``) draws the same
   minibatch. ``steps`` must be a multiple of ``unit``. One program per (algorithm, unit,
   workers) is compiled: a scan over 32 units, those past the requested count masked off
   (``lax.cond``), called once per 32 units. With
   ``hooks`` given, ``train`` is exactly the design's call (one ``scarjax.run``, hook state
   alive for that call only, keys depending on the cut).
2. ``Ledger`` times are on the market's clock (``market.start_time_s + elapsed``), since a
   price series is; ``ClusterRun.time_s`` is elapsed seconds since the job's start.
3. ``Recorder.interval`` records one point per *step* (not per interval), so
   ``ClusterRun.to_target`` resolves the time and the dollars at the step the target is
   reached, not at the end of the interval holding it.
4. ``Market.mttf_s`` (needed by Young/Daly): exact for exponential (capped), Weibull
   (uncapped) and empirical processes; a replayed trace's by renewal over the trace (the
   nodes' total time present, censored at the observation's end, over the removals:
   :meth:`~scarjax.cluster.market.Replay.mttf_s`, never draws of machines not granted);
   otherwise the mean of 2048 draws at the market's start time (key 0) with ``inf`` (never
   revoked) lifetimes counted as ``inf``.
5. Added: ``Market.purchase(key, counter, n, t)`` draws the start-up delays and lifetimes of
   the ``counter``-th purchase in one jitted program (eager JAX draws compile a program per
   op: too slow inside a host event loop); ``Market.revocations``/``startup_s`` are jitted too.
6. ``Ledger.cost(t)`` is the bill *had the job ended at t*: machines stopped by ``t`` at their
   charge, running ones as if the user stopped them at ``t``, later ones 0. So
   ``ClusterRun.dollars`` may drop where the provider revokes a machine (its begun partial
   hour becomes free) and is a step function under hourly billing.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import core, pollux
from scarjax.cluster import market as mk

__all__ = [
    "StepTime",
    "step_time_fixed",
    "step_time_linear",
    "step_time_pollux",
    "MachineType",
    "Market",
    "Ledger",
    "Trainer",
    "Job",
    "Outcome",
    "ClusterRun",
    "Recorder",
    "simulate_trials",
    "outcomes",
    "hourly_bill",
]

TIERS = ("reliable", "transient")
BILLINGS = ("hourly", "per_second")


# --------------------------------------------------------------------------------------
# Step-time models


def _check_workers(workers: Any) -> np.ndarray:
    w = np.asarray(workers)
    if w.dtype == bool or not np.issubdtype(w.dtype, np.integer):
        if not (np.issubdtype(w.dtype, np.floating) and np.all(np.isfinite(w)) and np.all(w == np.round(w))):
            raise TypeError(f"workers must be an int or an int array, got {workers!r}")
    if np.any(w < 1):
        raise ValueError(f"workers must be >= 1, got {workers!r}")
    return w.astype(np.int64)


@dataclasses.dataclass(frozen=True)
class StepTime:
    """Seconds per training iteration for ``M`` workers: ``step_time(M)`` (vectorised over
    an int array; a float for a scalar). Build with :func:`step_time_fixed`,
    :func:`step_time_linear` or :func:`step_time_pollux`.

    Attributes:
      fn: ``fn(M: int64 array) -> float64 array`` of seconds (> 0).
      name: a label (in JSON results).
    """

    fn: Callable[[np.ndarray], np.ndarray]
    name: str = "step_time"

    def __call__(self, workers: Any) -> np.ndarray | float:
        w = _check_workers(workers)
        t = np.asarray(self.fn(w), np.float64)
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"step time {self.name} gave non-positive or non-finite seconds {t!r} for workers={workers!r}")
        return float(t) if t.ndim == 0 else t


def step_time_fixed(seconds: float) -> StepTime:
    """The same ``seconds`` per iteration whatever the number of workers."""
    va.check_real("seconds", seconds, lo=0.0, lo_open=True, scalar=True)
    s = float(seconds)
    return StepTime(lambda w: np.full(np.shape(w), s), f"fixed({s:g})")


def step_time_linear(compute_s: float, sync_s: float = 0.0) -> StepTime:
    """``t(M) = compute_s / M + sync_s * log2(M)``: the work of one iteration divided over
    ``M`` data-parallel workers plus a tree all-reduce of depth ``log2 M`` (``t(1) =
    compute_s``)."""
    va.check_real("compute_s", compute_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("sync_s", sync_s, lo=0.0, scalar=True)
    c, s = float(compute_s), float(sync_s)
    return StepTime(lambda w: c / w + s * np.log2(w), f"linear({c:g},{s:g})")


def step_time_pollux(params: Any, batch_size: int, gpus_per_node: int = 1) -> StepTime:
    """Pollux's iteration time (thesis Eq 3.5-3.8, :func:`scarjax.pollux.t_iter`) for a global
    batch of ``batch_size`` examples over ``M`` GPUs on ``ceil(M / gpus_per_node)`` nodes,
    local batch ``ceil(batch_size / M)``, no gradient accumulation.

    Args:
      params: a :class:`scarjax.pollux.ThroughputParams` (fitted, e.g. by
        :func:`scarjax.pollux.fit_throughput`, or given).
    """
    params = pollux.check_throughput_params(params)
    bs = va.check_int("batch_size", batch_size, lo=1)
    g = va.check_int("gpus_per_node", gpus_per_node, lo=1)

    def fn(w):
        w = np.asarray(w, np.int64)
        nodes = -(-w // g)
        local = -(-bs // w)
        return np.asarray(pollux.t_iter(params, nodes, w, local, 0), np.float64)

    return StepTime(fn, f"pollux(bs={bs},gpn={g})")


# --------------------------------------------------------------------------------------
# Machines and markets


@dataclasses.dataclass(frozen=True)
class MachineType:
    """A machine type on offer.

    Attributes:
      name: e.g. ``"m4.large"``, ``"n1+V100"``.
      on_demand_price: USD/h of a reliable (on-demand) machine.
      spot: the transient price: a fixed USD/h (GCE preemptible: 70% off), a
        :class:`~scarjax.cluster.market.PriceSeries` (AWS spot), or ``None`` (the market
        derives it: a price-driven process's series, else the GCE preemptible price).
      speed: relative speed (a step takes ``step_time(M) / speed`` seconds).
    """

    name: str
    on_demand_price: float
    spot: Any = None
    speed: float = 1.0

    def __post_init__(self):
        va.check_str("name", self.name)
        va.check_real("on_demand_price", self.on_demand_price, lo=0.0, scalar=True)
        va.check_real("speed", self.speed, lo=0.0, lo_open=True, scalar=True)
        if self.spot is not None and not isinstance(self.spot, mk.PriceSeries):
            va.check_real("spot", self.spot, lo=0.0, scalar=True)


@dataclasses.dataclass(frozen=True)
class Market:
    """Where a job runs: a machine type, the revocation process of its transient machines,
    the billing rule, the start-up delay of new machines and the start time.

    Attributes:
      machine: the :class:`MachineType`.
      process: a revocation process of :mod:`scarjax.cluster.market` (``exponential``,
        ``weibull``, ``gce_preemptible``, ``price_driven``, ``replay``) or ``None`` (transient
        machines are never revoked).
      billing: ``"hourly"`` (AWS 2015, free partial hour on a provider revocation) or
        ``"per_second"`` (GCE).
      startup: a :class:`~scarjax.cluster.market.StartupDelay` (default: none, 0 s).
      start_time_s: the job's start on the process's / price series' clock.
    """

    machine: MachineType
    process: Any = None
    billing: str = "hourly"
    startup: Any = None
    start_time_s: float = 0.0

    def __post_init__(self):
        if not isinstance(self.machine, MachineType):
            raise TypeError(f"machine must be a MachineType, got {type(self.machine).__name__}")
        if self.process is not None and not hasattr(self.process, "sample"):
            raise TypeError(f"process must be a revocation process of scarjax.cluster.market or None, got {type(self.process).__name__}")
        va.check_choice("billing", self.billing, BILLINGS)
        if self.startup is not None and not isinstance(self.startup, mk.StartupDelay):
            raise TypeError(f"startup must be a scarjax.cluster.market.StartupDelay or None, got {type(self.startup).__name__}")
        va.check_real("start_time_s", self.start_time_s, lo=0.0, scalar=True)

    # prices --------------------------------------------------------------------------
    @property
    def spot(self) -> Any:
        """The transient price: ``machine.spot``; else a price-driven process's series; else
        GCE's fixed preemptible price (70% below on-demand)."""
        if self.machine.spot is not None:
            return self.machine.spot
        if isinstance(self.process, mk.PriceDriven):
            return self.process.series
        return float(mk.gce_preemptible_price(self.machine.on_demand_price))

    def price(self, tier: str) -> Any:
        """The price of a machine of ``tier`` (``'reliable'``: on-demand; ``'transient'``:
        :attr:`spot`), a float or a PriceSeries."""
        va.check_choice("tier", tier, TIERS)
        return float(self.machine.on_demand_price) if tier == "reliable" else self.spot

    def price_at(self, tier: str, t: float) -> float:
        """USD/h in effect at market time ``t`` for ``tier``."""
        p = self.price(tier)
        return float(p.price_at(t)) if isinstance(p, mk.PriceSeries) else float(p)

    def available(self, t: float) -> float:
        """How many transient machines can be obtained at market time ``t`` (``inf``: no
        limit): a replayed trace's nodes present then (:meth:`~scarjax.cluster.market.Replay.
        available`; the policies subtract the ones they hold), a price-driven market's ``inf``
        while the price in effect is ``<=`` the bid and 0 above it, ``inf`` for parametric and
        empirical processes (and without a process)."""
        p = self.process
        if isinstance(p, mk.PriceDriven):
            return math.inf if float(p.series.price_at(t)) <= float(p.bid) else 0.0
        if isinstance(p, mk.Replay):
            return float(p.available(float(t)))
        return math.inf

    def next_available(self, t: float) -> float:
        """The first market time ``>= t`` at which :meth:`available` is positive (``inf``:
        never again within what the market knows)."""
        p = self.process
        if isinstance(p, mk.Replay):
            return p.next_available(float(t))
        if isinstance(p, mk.PriceDriven):
            s = p.series
            times, prices = np.asarray(s.times_s, np.float64), np.asarray(s.prices, np.float64)
            i = max(int(np.searchsorted(times, t, side="right")) - 1, 0)
            if prices[i] <= float(p.bid):
                return float(t)
            ok = np.flatnonzero(prices[i + 1:] <= float(p.bid))
            return float(times[i + 1 + ok[0]]) if ok.size else math.inf
        return float(t)

    def transient_available(self, t: float) -> bool:
        """Whether a transient machine bought at market time ``t`` is granted: :meth:`available`
        ``>= 1`` (a price-driven market: the price in effect is ``<=`` the bid; a replayed
        trace: a node is present)."""
        return self.available(t) >= 1

    # revocations and start-up ---------------------------------------------------------
    def revocations(self, key: jax.Array, n: int, t: float) -> tuple[np.ndarray, np.ndarray]:
        """``(lifetime, warning)`` float64 ``[n]`` seconds from market time ``t`` for ``n``
        transient machines bought then (``inf``: never revoked; no process: all ``inf``).
        One jitted program per (process structure, n)."""
        n = va.check_int("n", n, lo=1)
        if self.process is None:
            return np.full(n, np.inf), np.full(n, np.inf)
        life, warn = _sample_revocations(self.process, key, n, jnp.float32(t))
        return np.asarray(life, np.float64), np.asarray(warn, np.float64)

    def startup_s(self, key: jax.Array, n: int) -> np.ndarray:
        """``float64[n]`` start-up delays of ``n`` new machines (0 without a ``startup``)."""
        n = va.check_int("n", n, lo=1)
        if self.startup is None:
            return np.zeros(n)
        return np.asarray(_sample_startup(self.startup, key, n), np.float64)

    def purchase(self, key: jax.Array, counter: int, n: int, t: float) -> tuple[np.ndarray, np.ndarray]:
        """``(startup_s, lifetime_s)`` float64 ``[n]`` for the ``counter``-th purchase of ``n``
        machines at market time ``t``: one jitted program draws both from ``fold_in(key,
        counter)`` (start-up from its first half, lifetimes from its second)."""
        n = va.check_int("n", n, lo=1)
        up, life = _sample_purchase(self.process, self.startup, key, jnp.int32(counter), n, jnp.float32(t))
        return np.asarray(up, np.float64), np.asarray(life, np.float64)

    def acquire(self, key: jax.Array, counter: int, n: int, t: float, *, held: Any = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(startup_s, lifetime_s, node)`` float64/float64/int64 ``[n]`` for the
        ``counter``-th purchase of ``n`` machines at market time ``t``: :meth:`purchase`, and
        on a replayed trace the trace node each machine is (``-1``: none; ``held``: ``bool[K]``
        nodes already held, which are not offered again). Lifetime 0: not granted."""
        n = va.check_int("n", n, lo=1)
        if not isinstance(self.process, mk.Replay):
            up, life = self.purchase(key, counter, n, t)
            return up, life, np.full(n, -1, np.int64)
        K = int(self.process.add_s.shape[0])
        held = np.zeros(K, bool) if held is None else np.asarray(held, bool)
        up, life, node = _sample_replay_purchase(self.process, self.startup, key, jnp.int32(counter), n,
                                                 jnp.float32(t), jnp.asarray(held))
        return np.asarray(up, np.float64), np.asarray(life, np.float64), np.asarray(node, np.int64)

    @classmethod
    def from_availability(cls, times_s: Any, counts: Any, *, machine: MachineType, provider: str | None = None,
                          warning_s: Any = None, billing: str | None = None, startup: Any = None,
                          start_time_s: float = 0.0, unwarned: Any = 0.0, end_s: Any = None) -> "Market":
        """A user's availability trace as a market in one call: ``counts[i]`` transient
        machines of ``machine`` obtainable from ``times_s[i]`` (any ticks, any counts, 0 =
        none; :func:`scarjax.cluster.market.from_availability`). The notice and the billing
        are stated (``warning_s``, ``billing``) or come from a named ``provider`` preset of
        :data:`~scarjax.cluster.market.PROVIDERS` (``"aws"``, ``"aws_per_second"``,
        ``"gce"``); never defaulted::

            market = ck.Market.from_availability(times_s, counts, provider="aws_per_second",
                                                 machine=ck.MachineType("p3.2xlarge", 3.06, spot=0.92))
        """
        if billing is None:
            if provider is None:
                raise ValueError("billing: state it ('hourly' or 'per_second') or name a provider preset "
                                 f"(provider= one of {sorted(mk.PROVIDERS)})")
            va.check_choice("provider", provider, tuple(mk.PROVIDERS))
            billing = mk.PROVIDERS[provider].billing
        if provider is not None and warning_s is not None:
            provider = None  # the stated warning wins; the preset gave the billing
        process = mk.from_availability(times_s, counts, warning_s=warning_s, provider=provider, unwarned=unwarned,
                                       end_s=end_s)
        return cls(machine, process, billing=billing, startup=startup, start_time_s=start_time_s)

    @property
    def bulk(self) -> bool:
        """Whether one draw revokes the whole allocation (``bulk`` processes, price-driven)."""
        return bool(getattr(self.process, "bulk", False)) or isinstance(self.process, mk.PriceDriven)

    def mttf_s(self) -> float:
        """Mean time to a transient machine's revocation (see the module notes, item 4)."""
        p = self.process
        if p is None:
            return math.inf
        if isinstance(p, mk.Exponential):
            m, c = float(p.mean_s), float(p.cap_s)
            return m * (1.0 - math.exp(-c / m)) if math.isfinite(c) else m
        if isinstance(p, mk.Weibull) and not math.isfinite(float(p.cap_s)):
            return float(p.scale_s) * math.gamma(1.0 + 1.0 / float(p.shape))
        if isinstance(p, mk.Empirical):
            return float(np.mean(np.asarray(p.lifetimes_s, np.float64)))
        if isinstance(p, mk.Replay):
            return p.mttf_s()
        life, _ = self.revocations(jax.random.key(0), 2048, self.start_time_s)
        return float(np.mean(life))


@functools.partial(jax.jit, static_argnums=(2,))
def _sample_revocations(process, key, n, t):
    rev = mk.sample_lifetimes(process, key, n, t)
    return rev.lifetime, rev.warning


@functools.partial(jax.jit, static_argnums=(2,))
def _sample_startup(startup, key, n):
    return startup.sample(key, n)


@functools.partial(jax.jit, static_argnums=(4,))
def _sample_purchase(process, startup, key, counter, n, t):
    k_up, k_life = jax.random.split(jax.random.fold_in(key, counter))
    up = jnp.zeros((n,), jnp.float32) if startup is None else startup.sample(k_up, n)
    life = jnp.full((n,), jnp.inf, jnp.float32) if process is None else mk.sample_lifetimes(process, k_life, n, t).lifetime
    return up, life


@functools.partial(jax.jit, static_argnums=(4,))
def _sample_replay_purchase(process, startup, key, counter, n, t, held):
    k_up, k_life = jax.random.split(jax.random.fold_in(key, counter))
    up = jnp.zeros((n,), jnp.float32) if startup is None else startup.sample(k_up, n)
    node, rev = process.pick(k_life, n, t, held)
    return up, rev.lifetime, node


@jax.jit
def _init_state(algorithm, key):
    return core.State(*algorithm.init(jax.random.split(key, 3)[0], algorithm.data))


# --------------------------------------------------------------------------------------
# Bills


def hourly_bill(start: Any, end: Any, price: Any, revoked: Any = False, scheme: str = "hourly",
                tol_s: float = 1.0) -> np.ndarray:
    """NumPy mirror of :func:`scarjax.cluster.market.bill` for fixed prices (float64,
    vectorised): USD for machines used from ``start`` to ``end`` seconds."""
    start, end, price, revoked = np.broadcast_arrays(
        np.asarray(start, np.float64), np.asarray(end, np.float64), np.asarray(price, np.float64),
        np.asarray(revoked, bool))
    dur = np.maximum(end - start, 0.0)
    if scheme == "per_second":
        return price * dur / 3600.0
    whole = np.floor((dur + tol_s) / 3600.0)
    partial = dur - whole * 3600.0 > tol_s
    hours = np.where(partial & ~revoked, whole + 1.0, whole)
    return price * hours


def _free_seconds(start, end, revoked, scheme, tol_s=1.0) -> np.ndarray:
    dur = np.maximum(np.asarray(end, np.float64) - np.asarray(start, np.float64), 0.0)
    if scheme != "hourly":
        return np.zeros_like(dur)
    whole = np.floor((dur + tol_s) / 3600.0)
    rest = dur - whole * 3600.0
    return np.where(np.asarray(revoked, bool) & (rest > tol_s), rest, 0.0)


@dataclasses.dataclass
class _Entry:
    machine_id: Any
    tier: str
    price: Any
    billing: str
    start: float
    stop: float | None = None
    revoked: bool = False
    charged: float | None = None


class Ledger:
    """Host-side bills of one simulated run (times on the market's clock, seconds).

    A machine is billed from :meth:`start` to :meth:`stop` under its ``billing`` rule
    (:func:`scarjax.cluster.market.bill`): ``"hourly"`` charges every begun hour at the price
    in effect at its beginning, except the last partial hour of a machine the provider
    revoked (``stop(..., revoked=True)``): that one is free (TierML Sec 3.4, Proteus's free
    computing); ``"per_second"`` integrates the price. A machine id may be reused after its
    stop (a new entry).
    """

    def __init__(self):
        self._entries: list[_Entry] = []
        self._open: dict[Any, _Entry] = {}
        self._memo: dict = {}

    @property
    def entries(self) -> tuple:
        """Every machine's entry, in start order (read them; ``stop`` ends one): ``machine_id,
        tier, price, billing, start, stop`` (``None``: running), ``revoked``, ``charged``."""
        return tuple(self._entries)

    def charge(self, entry: Any, end: float, revoked: bool = False) -> float:
        """USD of ``entry`` (one of :attr:`entries`) had it run from its start to ``end``,
        ended by the provider (``revoked``) or the user: the market's rule
        (:func:`scarjax.cluster.market.bill`)."""
        return self._charge_one(entry, float(end), bool(revoked))

    def _charge_one(self, e: "_Entry", t1: float, r: bool) -> float:
        """One machine's charge, memoised (machines bought and ended together cost the same)."""
        k = (id(e.price) if isinstance(e.price, mk.PriceSeries) else e.price, e.billing, e.start, t1, r)
        if k not in self._memo:
            self._memo[k] = float(self._charge([e], [t1], [r])[0])
        return self._memo[k]

    def _groups(self):
        """Entries that bill alike (tier, price, rule, start, stop, who ended them), with counts."""
        out: dict = {}
        for e in self._entries:
            k = (e.tier, id(e.price) if isinstance(e.price, mk.PriceSeries) else e.price, e.billing, e.start,
                 e.stop, e.revoked)
            if k in out:
                out[k][1] += 1
            else:
                out[k] = [e, 1]
        return list(out.values())

    def start(self, machine_id: Any, t: float, *, price: Any, tier: str = "transient",
              billing: str = "hourly") -> None:
        """Machine ``machine_id`` starts being billed at ``t`` at ``price`` (USD/h, float, or a
        PriceSeries)."""
        va.check_choice("tier", tier, TIERS)
        va.check_choice("billing", billing, BILLINGS)
        va.check_real("t", t, scalar=True)
        if not isinstance(price, mk.PriceSeries):
            va.check_real("price", price, lo=0.0, scalar=True)
            price = float(price)
        if machine_id in self._open:
            raise ValueError(f"machine_id {machine_id!r} is already running (stop it first)")
        e = _Entry(machine_id, tier, price, billing, float(t))
        self._entries.append(e)
        self._open[machine_id] = e

    def stop(self, machine_id: Any, t: float, *, revoked: bool = False) -> float:
        """Stop billing ``machine_id`` at ``t``; ``revoked=True``: the provider took it.
        Returns the machine's charge."""
        if machine_id not in self._open:
            raise ValueError(f"machine_id {machine_id!r} is not running")
        e = self._open[machine_id]
        va.check_real("t", t, scalar=True)
        if t < e.start:
            raise ValueError(f"t={t} is before machine {machine_id!r} started at {e.start}")
        e.stop, e.revoked = float(t), bool(revoked)
        e.charged = self._charge_one(e, e.stop, e.revoked)
        del self._open[machine_id]
        return e.charged

    @property
    def running(self) -> list:
        """Ids of the machines being billed now."""
        return list(self._open)

    def tier_of(self, machine_id: Any) -> str:
        return self._open[machine_id].tier

    @staticmethod
    def _charge(entries, ends, revoked) -> np.ndarray:
        out = np.zeros(len(entries))
        for i, (e, t1, r) in enumerate(zip(entries, ends, revoked)):
            if isinstance(e.price, mk.PriceSeries):
                out[i] = float(mk.bill(e.start, t1, e.price, r, e.billing))
            else:
                out[i] = float(hourly_bill(e.start, t1, e.price, r, e.billing))
        return out

    def _charge_at(self, e: _Entry, t: float) -> float:
        """The entry's charge as of ``t``: 0 if it starts at or after ``t``; its charge if it
        stopped by ``t``; else billed as stopped by the user at ``t``."""
        if e.start >= t:
            return 0.0
        if e.stop is not None and e.stop <= t:
            return e.charged
        return self._charge_one(e, float(t), False)

    def cost(self, t: float) -> float:
        """USD of everything up to ``t`` (the job's cost had it ended at ``t``): machines
        stopped by then at their charge, machines running at ``t`` billed as if the user
        stopped them at ``t`` (a begun hour is charged in full), later ones not at all."""
        return float(sum(n * self._charge_at(e, float(t)) for e, n in self._groups()))

    def cost_curve(self, times: Any) -> np.ndarray:
        """:meth:`cost` at each of ``times`` (vectorised over times for fixed prices)."""
        times = np.asarray(times, np.float64)
        total = np.zeros_like(times)
        for e, n in self._groups():  # machines that bill alike are billed once, times their number
            after = times > e.start
            done = after & (times >= (e.stop if e.stop is not None else np.inf))
            mid = after & ~done
            total += n * np.where(done, e.charged if e.charged is not None else 0.0, 0.0)
            if not mid.any():
                continue
            if isinstance(e.price, mk.PriceSeries):
                part = np.asarray(mk.bill(e.start, np.maximum(times, e.start), e.price, False, e.billing), np.float64)
            else:
                part = hourly_bill(e.start, np.maximum(times, e.start), e.price, False, e.billing)
            total += n * np.where(mid, part, 0.0)
        return total

    def free_seconds(self, t: float) -> float:
        """Machine-seconds of free computing up to ``t``: the used part of the last partial
        hour of each machine the provider revoked by ``t``, under hourly billing."""
        return float(sum(
            _free_seconds(e.start, e.stop, e.revoked, e.billing) for e in self._entries
            if e.stop is not None and e.stop <= t
        ))

    def machine_seconds(self, t: float) -> dict[str, float]:
        """Machine-seconds used up to ``t``, by tier."""
        out = {k: 0.0 for k in TIERS}
        for e in self._entries:
            end = min(e.stop if e.stop is not None else np.inf, float(t))
            out[e.tier] += max(end - e.start, 0.0)
        return out

    def by_tier(self, t: float) -> dict[str, float]:
        """:meth:`cost` split by tier (``'reliable'``, ``'transient'``)."""
        out = {k: 0.0 for k in TIERS}
        for e, n in self._groups():
            out[e.tier] += n * self._charge_at(e, float(t))
        return out


# --------------------------------------------------------------------------------------
# Real training, interval by interval

_BLOCK = 32  # units per call of the one cached program (fewer are masked off inside it)


@functools.partial(jax.jit, static_argnums=(5,))
def _train_units(algorithm, key, state, start, n_units, static):
    unit, workers = static

    def body(st, i):
        def go(s):
            k = jax.random.fold_in(key, start + i * unit)
            new, tr = core.run_one(algorithm, k, None, s, (), (unit, False, workers))
            return core.State(*new), tr.loss[1:]

        def skip(s):
            return s, jnp.zeros((unit,), jnp.float32)

        return jax.lax.cond(i < n_units, go, skip, st)

    st, losses = jax.lax.scan(body, core.State(*state), jnp.arange(_BLOCK, dtype=jnp.int32))
    return st, losses.reshape(-1)


@jax.jit
def _loss(algorithm, state):
    return algorithm.loss(state, algorithm.data)


class Trainer:
    """Real scarjax training advanced interval by interval (see the module notes, item 1).

    Args:
      algorithm: the :class:`scarjax.Algorithm`.
      key: PRNG key (or int seed): the initial state is ``algorithm.init(split(key, 3)[0])``
        (as :func:`scarjax.run`'s), unit ``u`` runs with ``fold_in(key, u * unit)``.
      init_state: start from this state instead.
      unit: steps per keyed unit (a cut between ``train`` calls must fall on a multiple).
      workers: default worker count for worker mode (``None``: the plain loop).

    Attributes:
      state: the current :class:`scarjax.State`; step: iterations done (global step).
    """

    def __init__(self, algorithm: core.Algorithm, key: Any, *, init_state: core.State | None = None,
                 unit: int = 1, workers: int | None = None):
        if not isinstance(algorithm, core.Algorithm):
            raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
        self.algorithm = algorithm
        self.key = core.as_key(key)
        self.unit = va.check_int("unit", unit, lo=1)
        self.workers = None if workers is None else va.check_int("workers", workers, lo=1)
        if init_state is None:
            init_state = _init_state(algorithm, self.key)
        else:
            core.check_initial(algorithm, init_state)
            init_state = core.State(*init_state)
        self.state = init_state
        self.step = 0

    def train(self, steps: int, *, workers: int | None = None, hooks: Any = None) -> np.ndarray:
        """Run ``steps`` more iterations; returns the ``float64[steps]`` loss after each."""
        steps = va.check_int("steps", steps, lo=0)
        workers = self.workers if workers is None else va.check_int("workers", workers, lo=1)
        if steps == 0:
            return np.zeros(0)
        if hooks is not None:
            st, tr = core.run(self.algorithm, hooks, steps, jax.random.fold_in(self.key, self.step),
                              init_state=self.state, workers=workers)
            self.state, self.step = core.State(*st), self.step + steps
            return np.asarray(tr.loss[1:], np.float64)
        if steps % self.unit or self.step % self.unit:
            raise ValueError(f"steps must be a multiple of unit={self.unit} (and the trainer at a multiple), "
                             f"got steps={steps} at step {self.step}")
        n = steps // self.unit
        out = []
        while n > 0:
            m = min(n, _BLOCK)
            st, losses = _train_units(self.algorithm, self.key, self.state, jnp.int32(self.step), jnp.int32(m),
                                      (self.unit, workers))
            self.state, self.step, n = st, self.step + m * self.unit, n - m
            out.append(np.asarray(losses, np.float64)[: m * self.unit])
        res = np.concatenate(out)
        if not np.all(np.isfinite(res)):
            raise FloatingPointError(f"training diverged: non-finite loss at step {self.step - steps + int(np.argmin(np.isfinite(res)))}")
        return res

    def snapshot(self) -> core.State:
        """The current state (a full checkpoint; JAX arrays are immutable)."""
        return self.state

    def restore(self, state: core.State, step: int | None = None) -> None:
        """Continue from ``state`` (and the global ``step`` it was taken at: redone steps then
        draw the same minibatches)."""
        va.check_tree_like("state", state, self.state, "the trainer's state")
        self.state = core.State(*state)
        if step is not None:
            self.step = va.check_int("step", step, lo=0)

    def loss(self) -> float:
        """The loss of the current state."""
        return float(_loss(self.algorithm, self.state))


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


class Recorder:
    """Collects a policy's points and events into a :class:`ClusterRun`.

    Args:
      policy: the policy's name.
      ledger: the run's :class:`Ledger` (dollars at each point come from it).
      t0: the job's start on the market's clock (``market.start_time_s``).
    """

    def __init__(self, policy: str, ledger: Ledger, t0: float = 0.0):
        self.policy, self.ledger, self.t0 = policy, ledger, float(t0)
        self._t, self._loss, self._steps = [], [], []
        self.events: list = []

    def interval(self, t_start: float, step_s: float, losses: Any, step0: int) -> float:
        """Record ``len(losses)`` steps run back to back from elapsed time ``t_start``, each
        taking ``step_s``, the first being global step ``step0 + 1`` after it. Returns the
        elapsed time at the interval's end."""
        losses = np.asarray(losses, np.float64)
        k = np.arange(1, losses.size + 1)
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
        dollars = self.ledger.cost_curve(self.t0 + t)
        t_end = self.t0 + float(end_s)
        return ClusterRun(self.policy, t, dollars, loss, steps, list(self.events), self.ledger.by_tier(t_end),
                          self.ledger.free_seconds(t_end), float(end_s), dict(meta), self.ledger)


# --------------------------------------------------------------------------------------
# Monte-Carlo


def simulate_trials(policy: Callable, job: Job, market: Market, n: int, key: Any, *, horizon_s: float,
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
