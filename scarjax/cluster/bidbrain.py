"""Proteus BidBrain: spot allocations renewed or dropped by expected cost per unit of work
(Harlap et al., "Proteus: agile ML elasticity through tiered
reliability in dynamic resource markets", EuroSys'17, Sec 4 "BidBrain"; TierML Sec 3.4).

**Markets.** Every function takes the one market representation: price-driven
:class:`~scarjax.cluster.market.Market` objects on one clock, one per instance type (and zone),
each with its machine's on-demand price and cores per instance
(:attr:`~scarjax.cluster.market.MachineType.cores`), its notice and its billing rule:
:func:`spot_markets` for the 2015 history, :func:`spot_market` or
:meth:`~scarjax.cluster.market.Market.from_prices` for a user's arrays (``provider="aws"``
states the 2015 rules). BidBrain reads them through a host view (the float64 prices as given).

**Allocations.** An allocation is ``n`` instances of one type bought at one time with one bid
(Proteus Sec 4: "a set of instances of the same type acquired at the same time and price").
It is billed by AWS's 2015 hourly rule (:func:`scarjax.cluster.market.bill`): each
instance-hour at the market price in effect at its beginning, the last partial hour charged in
full when the user ends the allocation and *free* when the provider revokes it. It is revoked
(price-driven, :func:`scarjax.cluster.market.price_driven`) two minutes after the first price
change above its bid.

**The decision** (:func:`fleet_cost_per_work`, :func:`renew_or_drop`, :func:`best_acquisition`).
Before the end of each allocation's billing hour BidBrain compares the fleet's *expected cost
per unit of work* over the next hour with and without the allocation, and keeps it only if it
lowers that ratio; every ``tick_s`` it also considers buying one new allocation (type x bid
delta x size) and buys the one that lowers the ratio most. For one allocation of ``n``
machines of ``c`` cores at price ``p`` whose probability of eviction within the hour is
``beta`` (mean eviction time ``tau`` when evicted), and ``s`` seconds of start-up left:

* expected cost      ``E[C] = (1 - beta) * n * p``          (an evicted hour is free);
* expected core-time ``E[S] = n c ((1 - beta)(H - s) + beta * max(tau - s, 0))``.

The fleet's expected work over the hour ``H`` is ``rate(sum E[S] / H) * (H - r * E[changes]) / 3600``
(:class:`ScalingModel`; ``r`` the whole-fleet reconfiguration pause of AgileML's elasticity
controller per join or eviction, ``E[changes] = sum beta + new allocations``) and its expected
cost ``sum E[C]`` plus the reliable machines' hour. ``beta`` and ``tau`` come from
:class:`EvictionTable`: the price history **before** the decision time only (every grid point
``g`` in the look-back window whose hour ``[g, g + H]`` has ended; no peeking at the future),
for a bid the same headroom above the price as the allocation's. Evictions that are likely but
late in the hour thus make an allocation cheap per unit of work: this is how BidBrain exploits
free partial hours, and dropped allocations run on until their paid hour ends (revoked within
it, that partial hour is free too: TierML Sec 3.4).

**Bids** are a delta above the market price: BidBrain picks the delta (a grid of fractions of
the on-demand price, :data:`HEADROOMS`) with the acquisition. ``fixed_headroom=`` forces one
delta: the aggressive variant bids one price tick (:data:`PRICE_TICK`) above the market
(Proteus: "bidding very close to market price ... 4x increase in runtime").

**The job and its work model.** A :class:`~scarjax.cluster.clock.Job` progresses by a
stated :class:`WorkModel`: ``W`` units of work (core-hours at perfect scaling; default
:meth:`WorkModel.from_job`, what ``job.workers`` on-demand machines do in the job's
failure-free runtime). A fleet of ``C`` working cores does ``rate(C) = C / (1 + kappa * log2(max(C / c0,
1)))`` units per hour (:class:`ScalingModel`: a synchronisation overhead growing with the log
of the fleet, ``kappa = 0.05`` by default; ``c0`` the reliable tier's cores). This is a stated
progress model, not calibrated from real training runs; no calibrated model
(``scarjax.cluster.sweep``) existed when this module was written. New machines start
``startup_s`` after they are bought (AWS: 300 s, :data:`scarjax.cluster.market.DEFAULT_STARTUP_S`)
and are billed from the purchase. AgileML (Proteus Sec 3) keeps the parameter state on
``reliable`` on-demand machines (BackupPSs) and flushes on the two-minute warning, so an
eviction loses no work beyond the reconfiguration pause.

**Baselines** (same job, market and clock): :func:`on_demand` (a fixed fleet of
``job.workers`` on-demand machines) and :func:`checkpoint_spot` (all machines spot at the
on-demand bid, full checkpoints of ``job.checkpoint_s`` every Young/Daly interval
``sqrt(2 delta MTTF)`` with the MTTF estimated from the history before the start, rollback to
the last checkpoint on eviction, restart on the cheapest option: on-demand while the spot
price is above the bid, back to spot at an on-demand hour's end; TierML Sec 4.5's comparison
scheme).

**The policy contract.** :func:`proteus` and the baselines are policies of the shared
contract ``policy(job, market, *, key, horizon_s, ...) ->``
:class:`~scarjax.cluster.clock.ClusterRun` (:mod:`scarjax.cluster.clock`), with one
documented extension: ``market`` is a sequence of price-driven markets (the types BidBrain
bids across; one is accepted) sharing one ``start_time_s``, the job's start (:func:`at`).
Times are seconds; ``key`` is checked but draws nothing (a price-driven market's revocations
follow from its prices and the bid). The run's :class:`~scarjax.cluster.ledger.Ledger` holds
one entry per machine (spot machines at their market's price series, on-demand ones at the
on-demand price), so its bill is the ledger's; ``ClusterRun.loss`` is the share of the work
still to do (``to_target(0.0)`` is completion) and ``meta`` holds the Proteus quantities:
``finished``, ``free_core_s``, ``compute_core_s``, ``free_fraction``, ``evictions`` and every
allocation with its bill (``usd``).

**Free computing.** ``meta["free_fraction"]`` is the share of all computing (core-seconds of
running machines, reliable included) that fell in provider-revoked partial hours and was
therefore not billed (Proteus: ~32%).

The simulation is a host event loop in NumPy (decisions depend on the fleet, the history and
the bids: data-dependent control flow, one greedy choice per tick); the hot parts (eviction
tables over the whole history, candidate evaluation) are vectorised, and the bills are the
ledger's (:func:`~scarjax.cluster.market.bill`'s rule).
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from scarjax import core
from scarjax import validate as va
from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk
from scarjax.cluster.ledger import Ledger
from scarjax.cluster.policies import young_daly_s
from scarjax.data import transient as td

__all__ = [
    "CORES",
    "HEADROOMS",
    "HOUR_S",
    "PRICE_TICK",
    "Allocation",
    "EvictionTable",
    "ScalingModel",
    "WorkModel",
    "at",
    "best_acquisition",
    "checkpoint_spot",
    "eviction_table",
    "expected_hour",
    "fleet_cost_per_work",
    "free_fraction",
    "mttf_before",
    "on_demand",
    "proteus",
    "renew_or_drop",
    "spot_market",
    "spot_markets",
]

HOUR_S = 3600.0
#: vCPUs per instance (AWS's 2015 instance table): the speed of a machine in the work model.
CORES = {"c3.xlarge": 4, "d2.8xlarge": 36, "g2.2xlarge": 8, "m3.medium": 1, "r3.large": 2}
#: Bid deltas above the market, as fractions of the on-demand price, that BidBrain chooses from.
HEADROOMS = (0.0005, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
#: AWS spot prices have four decimals: the smallest possible delta above the market (USD/h).
PRICE_TICK = 1e-4


# --------------------------------------------------------------------------------------
# The work model


@dataclasses.dataclass(frozen=True)
class ScalingModel:
    """Work units (core-hours at perfect scaling) per hour of a fleet of ``cores`` working
    cores: ``cores / (1 + kappa * log2(max(cores / base_cores, 1)))`` (a synchronisation cost
    growing with the log of the fleet; see the module docstring)."""

    kappa: float = 0.05
    base_cores: float = 4.0

    def __post_init__(self):
        va.check_real("kappa", self.kappa, lo=0.0, scalar=True)
        va.check_real("base_cores", self.base_cores, lo=0.0, lo_open=True, scalar=True)
        if not (np.isfinite(self.base_cores) and self.base_cores > 0):
            raise ValueError(f"base_cores must be finite and > 0, got {self.base_cores}")

    def rate(self, cores: Any) -> np.ndarray:
        """Units per hour, vectorised over ``cores`` (0 for no cores)."""
        c = np.maximum(np.asarray(cores, np.float64), 0.0)
        ratio = np.maximum(c / self.base_cores, 1.0)
        return c / (1.0 + self.kappa * np.log2(ratio))


@dataclasses.dataclass(frozen=True)
class WorkModel:
    """The stated progress model by which BidBrain runs a :class:`~scarjax.cluster.clock.Job`
    (Proteus Sec 3-4; no training inside): ``work`` units (core-hours at perfect scaling)
    done at :meth:`ScalingModel.rate` of the working cores.

    Attributes:
      work: the job's units of work (> 0).
      scaling: the :class:`ScalingModel`.
      startup_s: seconds from buying a machine to its working (AWS spot: 300 s,
        :data:`scarjax.cluster.market.DEFAULT_STARTUP_S`).
      reconfig_s: seconds of whole-fleet pause per allocation joining or leaving (AgileML's
        re-assignment of partitions, Proteus Sec 3).

    A full checkpoint's write and read time (the checkpointing baseline only) are the job's
    ``checkpoint_s`` and ``restore_s``.
    """

    work: float
    scaling: ScalingModel = ScalingModel()
    startup_s: float = mk.DEFAULT_STARTUP_S["aws"]
    reconfig_s: float = 30.0

    def __post_init__(self):
        for name in ("work", "startup_s", "reconfig_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.work <= 0:
            raise ValueError(f"work must be > 0, got {self.work}")
        if not isinstance(self.scaling, ScalingModel):
            raise TypeError(f"scaling must be a ScalingModel, got {type(self.scaling).__name__}")

    @classmethod
    def from_job(cls, job: ck.Job, cores_per_machine: int, *, scaling: ScalingModel = ScalingModel(),
                 **kw: Any) -> "WorkModel":
        """The work ``job.workers`` on-demand machines of ``cores_per_machine`` cores do in the
        job's failure-free runtime ``job.max_steps * job.step_time(job.workers)`` seconds:
        ``scaling.rate(workers * cores) * runtime_s / 3600`` units; ``**kw``: ``startup_s``,
        ``reconfig_s``."""
        if not isinstance(job, ck.Job):
            raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
        va.check_int("cores_per_machine", cores_per_machine, lo=1)
        if not isinstance(scaling, ScalingModel):
            raise TypeError(f"scaling must be a ScalingModel, got {type(scaling).__name__}")
        runtime_h = job.max_steps * float(job.step_time(job.workers)) / 3600.0
        return cls(float(scaling.rate(job.workers * cores_per_machine)) * runtime_h, scaling, **kw)


# --------------------------------------------------------------------------------------
# Markets and eviction statistics


@dataclasses.dataclass(frozen=True, eq=False)
class _PriceView:
    """The host-side view of one price-driven :class:`~scarjax.cluster.market.Market` that
    BidBrain's event loop reads (derived from the market, never given by a user): the price
    steps in float64 as given (:meth:`~scarjax.cluster.market.PriceSeries.host_arrays`), the
    machine's on-demand price and cores, the series' end, the notice and the billing rule."""

    name: str
    series: mk.PriceSeries
    times: np.ndarray
    prices: np.ndarray
    on_demand: float
    cores: int
    end_s: float
    warning_s: float
    billing: str
    maxtab: np.ndarray

    def index(self, t: Any) -> np.ndarray:
        """The change in effect at ``t`` (0 before the first)."""
        return np.maximum(np.searchsorted(self.times, np.asarray(t, np.float64), side="right") - 1, 0)

    def price_at(self, t: Any) -> np.ndarray:
        return self.prices[self.index(t)]

    def notice(self, t: Any, bid: Any) -> np.ndarray:
        """The first price change strictly after ``t`` with a price above ``bid`` (its time,
        ``inf`` if none): when an allocation bought at ``t`` with ``bid`` gets its termination
        notice (:meth:`~scarjax.cluster.market.PriceDriven.sample`'s rule; vectorised)."""
        t, bid = np.broadcast_arrays(np.asarray(t, np.float64), np.asarray(bid, np.float64))
        T = self.prices.size
        pos = self.index(t) + 1
        tab = self.maxtab
        for k in reversed(range(tab.shape[0])):
            step = 1 << k
            skip = (pos + step <= T) & (tab[k, np.clip(pos, 0, T - 1)] <= bid)
            pos = np.where(skip, pos + step, pos)
        return np.where(pos < T, self.times[np.minimum(pos, T - 1)], np.inf)


_VIEWS: dict[tuple, tuple[Any, _PriceView]] = {}


def _view(market: Any, what: str = "market") -> _PriceView:
    """The :class:`_PriceView` of a price-driven market (built once per revocation process and
    machine: the same market at another ``start_time_s`` shares it)."""
    if isinstance(market, _PriceView):
        return market
    if not isinstance(market, mk.Market):
        raise TypeError(f"{what} must be a scarjax.cluster.market.Market, got {type(market).__name__}")
    if not isinstance(market.process, mk.PriceDriven):
        raise ValueError(f"{what} must be a price-driven market (Market.from_prices / from_spot_prices), "
                         f"got process {type(market.process).__name__}")
    key = (id(market.process), market.machine.name, float(market.machine.on_demand_price),
           int(market.machine.cores), market.billing)
    hit = _VIEWS.get(key)
    if hit is not None and hit[0]() is market.process:
        return hit[1]
    series = market.process.series
    times, prices = series.host_arrays()
    v = _PriceView(market.machine.name, series, times, prices, float(market.machine.on_demand_price),
                   int(market.machine.cores), float(series.end_s), float(market.process.warning_s),
                   market.billing, np.asarray(series.maxtab, np.float64))
    if len(_VIEWS) > 256:
        _VIEWS.clear()
    _VIEWS[key] = (weakref.ref(market.process), v)
    return v


def _views(markets: Any) -> list[_PriceView]:
    if isinstance(markets, mk.Market) or not isinstance(markets, Sequence) or len(markets) == 0:
        raise TypeError("markets must be a non-empty sequence of scarjax.cluster.market.Market")
    return [_view(m, f"markets[{i}]") for i, m in enumerate(markets)]


def spot_market(
    times_s: Any, prices: Any, *, on_demand: float, cores: int = 4, end_s: float | None = None,
    name: str = "market",
) -> mk.Market:
    """A price-driven :class:`~scarjax.cluster.market.Market` under AWS's 2015 rules (two-minute
    notice, hourly billing) from a step function (``prices[i]`` from ``times_s[i]`` on), its
    machine ``name`` at ``on_demand`` USD/h with ``cores`` per instance, bid at the on-demand
    price (the checkpointing baseline's bid; BidBrain chooses its own): shorthand for
    :meth:`~scarjax.cluster.market.Market.from_prices` with ``provider="aws"``."""
    va.check_real("on_demand", on_demand, lo=0.0, lo_open=True, scalar=True)
    va.check_real("prices", prices, lo=0.0)
    va.check_real("times_s", times_s)
    if not (isinstance(cores, (int, np.integer)) and not isinstance(cores, bool) and cores >= 1):
        raise ValueError(f"cores must be an int >= 1, got {cores!r}")
    machine = mk.MachineType(name, float(on_demand), cores=int(cores))
    return mk.Market.from_prices(times_s, prices, bid=float(on_demand), machine=machine, provider="aws", end_s=end_s,
                                 name=name)


def spot_markets(
    zone: str = "us-east-1a", root: Any = None, *, types: Sequence[str] = td.SPOT_INSTANCE_TYPES
) -> tuple[mk.Market, ...]:
    """The spot markets of ``zone`` on one clock, as price-driven
    :class:`~scarjax.cluster.market.Market` objects (AWS 2015 rules, bid the on-demand price,
    :data:`CORES` per instance): seconds since the latest series start (the embedded April 2015
    extract by default, the full March-August history from ``root``), each series from the
    change in effect at that origin to the earliest series end."""
    spots = [td.load_spot_prices(t, zone, root) for t in types]
    origin = max(s.start for s in spots)
    end = min(s.end for s in spots)
    dur = float((end - origin).astype("timedelta64[s]").astype(np.int64))
    return tuple(
        mk.Market.from_spot_prices(s, bid=s.on_demand, provider="aws", cores=CORES[s.instance_type], origin=origin,
                                   end_s=dur)
        for s in spots
    )


@dataclasses.dataclass(frozen=True, eq=False)
class EvictionTable:
    """Eviction statistics of one market for bids ``headroom`` above the price, on a grid.

    For every grid time ``g`` (every ``grid_s``) and headroom ``h`` (USD/h): ``evicted[g, h]``
    is whether an allocation bought at ``g`` with bid ``price(g) + h`` is revoked within
    ``hour_s`` (notice + warning), ``tau[g, h]`` its lifetime when it is. :meth:`estimate` at a
    decision time ``t`` averages over the grid points of the look-back window whose hour has
    ended by ``t``: it uses the prices before ``t`` only.
    """

    market: mk.Market
    grid: np.ndarray
    headroom: np.ndarray
    cum_evicted: np.ndarray
    cum_tau: np.ndarray
    lookback_s: float
    hour_s: float
    prior_beta: float

    def estimate(self, t: float, headroom: float) -> tuple[float, float]:
        """``(beta, tau)`` at decision time ``t`` for a bid ``headroom`` above the price: the
        eviction probability within the hour and the mean lifetime of evicted allocations,
        from the history in ``[t - lookback_s, t]`` (the tabulated headroom at or below
        ``headroom``: the conservative side). No history: ``(prior_beta, hour_s / 2)``."""
        j = int(np.searchsorted(self.headroom, headroom + 1e-12, side="right") - 1)
        j = max(j, 0)
        hi = int(np.searchsorted(self.grid, t - self.hour_s, side="right"))
        lo = int(np.searchsorted(self.grid, t - self.lookback_s, side="left"))
        n = hi - lo
        if n <= 0:
            return self.prior_beta, self.hour_s / 2
        ev = self.cum_evicted[hi, j] - self.cum_evicted[lo, j]
        beta = ev / n
        tau = (self.cum_tau[hi, j] - self.cum_tau[lo, j]) / ev if ev > 0 else self.hour_s
        return float(beta), float(tau)


def eviction_table(
    market: mk.Market, *, headrooms: Sequence[float] | None = None, grid_s: float = 300.0,
    lookback_s: float = 7 * 86400.0, hour_s: float = HOUR_S, warning_s: float | None = None,
    prior_beta: float = 0.5,
) -> EvictionTable:
    """The :class:`EvictionTable` of the price-driven ``market``; ``headrooms`` in USD/h
    (default: one price tick and :data:`HEADROOMS` x the on-demand price); ``warning_s``:
    default the market's notice."""
    view = _view(market)
    warning_s = view.warning_s if warning_s is None else warning_s
    if headrooms is None:
        headrooms = [PRICE_TICK] + [h * view.on_demand for h in HEADROOMS]
    h = np.unique(np.round(np.asarray(headrooms, np.float64), 6))
    if h.size == 0 or np.any(h < 0) or not np.all(np.isfinite(h)):
        raise ValueError(f"headrooms must be finite and >= 0, got {headrooms}")
    va.check_real("grid_s", grid_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("lookback_s", lookback_s, lo=0.0, scalar=True)
    va.check_real("hour_s", hour_s, lo=0.0, lo_open=True, scalar=True)
    t0 = max(float(view.times[0]), 0.0)
    grid = np.arange(t0, view.end_s - hour_s + 1e-9, grid_s)
    bid = view.price_at(grid)[:, None] + h[None, :]
    life = view.notice(grid[:, None], bid) - grid[:, None] + warning_s
    evicted = life < hour_s
    tau = np.where(evicted, life, 0.0)
    zero = np.zeros((1, h.size))
    return EvictionTable(
        market, grid, h, np.concatenate([zero, np.cumsum(evicted, 0)]), np.concatenate([zero, np.cumsum(tau, 0)]),
        float(lookback_s), float(hour_s), float(prior_beta),
    )


# --------------------------------------------------------------------------------------
# The decision (pure functions of expectations)


def expected_hour(price, n, cores, beta, tau, startup_left=0.0, hour_s=HOUR_S) -> tuple[np.ndarray, np.ndarray]:
    """``(E[cost], E[core-seconds])`` of allocations over the next hour (vectorised; see the
    module docstring): an evicted hour is free, evicted machines work until ``tau``."""
    price, n, cores, beta, tau, s = np.broadcast_arrays(
        *(np.asarray(x, np.float64) for x in (price, n, cores, beta, tau, startup_left))
    )
    if np.any((beta < 0) | (beta > 1)):
        raise ValueError(f"beta must lie in [0, 1], got {beta}")
    cost = (1.0 - beta) * n * price
    work_s = (1.0 - beta) * np.maximum(hour_s - s, 0.0) + beta * np.maximum(np.minimum(tau, hour_s) - s, 0.0)
    return cost, n * cores * work_s


def fleet_cost_per_work(cost, core_s, changes, scaling: ScalingModel, reconfig_s: float, hour_s=HOUR_S):
    """Expected USD per unit of work of a fleet over the next hour: ``sum(cost)`` over
    ``rate(sum(core_s) / hour_s) * (hour_s - reconfig_s * changes) / 3600`` (``inf`` when no
    work is expected). The last axis runs over the fleet's members (reliable tier included);
    leading axes over alternatives."""
    cost = np.sum(np.asarray(cost, np.float64), -1)
    cores = np.sum(np.asarray(core_s, np.float64), -1) / hour_s
    useful = np.maximum(hour_s - reconfig_s * np.asarray(changes, np.float64), 0.0)
    work = scaling.rate(cores) * useful / 3600.0
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(work > 0, cost / np.where(work > 0, work, 1.0), np.inf)


def renew_or_drop(members_cost, members_core_s, members_beta, i, scaling, reconfig_s) -> bool:
    """Keep member ``i`` of the fleet for another hour? ``True`` iff the fleet's expected cost
    per work with it is at most the one without it (Proteus Sec 4)."""
    c = np.asarray(members_cost, np.float64)
    s = np.asarray(members_core_s, np.float64)
    b = np.asarray(members_beta, np.float64)
    keep = fleet_cost_per_work(c, s, b.sum(), scaling, reconfig_s)
    m = np.arange(c.size) != i
    drop = fleet_cost_per_work(c[m], s[m], b[m].sum(), scaling, reconfig_s)
    return bool(keep <= drop)


def best_acquisition(members_cost, members_core_s, members_beta, cand_cost, cand_core_s, cand_beta, scaling,
                     reconfig_s, *, min_gain: float = 0.0) -> int:
    """The candidate allocation that lowers the fleet's expected cost per work most, or
    ``-1`` if none lowers it by more than the fraction ``min_gain``. A candidate counts one
    change (its joining) plus its ``beta``."""
    c = np.asarray(members_cost, np.float64)
    s = np.asarray(members_core_s, np.float64)
    b = float(np.sum(members_beta))
    base = fleet_cost_per_work(c, s, b, scaling, reconfig_s)
    cc = np.asarray(cand_cost, np.float64)
    if cc.size == 0:
        return -1
    tot_c = np.concatenate([np.broadcast_to(c, (cc.size, c.size)), cc[:, None]], 1)
    tot_s = np.concatenate([np.broadcast_to(s, (cc.size, s.size)), np.asarray(cand_core_s, np.float64)[:, None]], 1)
    cpw = fleet_cost_per_work(tot_c, tot_s, b + 1.0 + np.asarray(cand_beta, np.float64), scaling, reconfig_s)
    k = int(np.argmin(cpw))
    return k if cpw[k] < base * (1.0 - min_gain) else -1


# --------------------------------------------------------------------------------------
# Runs and bills


@dataclasses.dataclass
class Allocation:
    """``n`` machines of ``market`` bought at ``start`` with ``bid``; working from ``ready``;
    ended at ``end`` by the provider (``revoked``) or by the user."""

    market: int
    n: int
    bid: float
    start: float
    ready: float
    end: float = math.inf
    revoked: bool = False
    revoke_at: float = math.inf
    dropping: bool = False
    tier: str = "transient"

    def last_hour_start(self) -> float:
        """The beginning of the free part of a provider-revoked allocation's last billing hour:
        its end less :func:`~scarjax.cluster.market.free_seconds` (the one hourly rule; the end
        itself when nothing of that hour is free)."""
        d = self.end - self.start
        return self.end - float(mk.free_seconds(d, True)) if d > 0 else self.start


def free_fraction(allocs: Sequence[Allocation], cores: Sequence[int]) -> tuple[float, float, float]:
    """``(free core-seconds, computing core-seconds, free fraction)`` of ended allocations:
    computing is ``n * cores * (end - ready)`` (while working), free the part of it within a
    provider-revoked partial hour (not billed by AWS's hourly rule,
    :func:`~scarjax.cluster.market.free_seconds`)."""
    free = comp = 0.0
    for a in allocs:
        if not np.isfinite(a.end):
            raise ValueError("allocations must be ended (finite end) to count free computing")
        c = a.n * cores[a.market]
        comp += c * max(a.end - a.ready, 0.0)
        if a.revoked:
            free += c * max(a.end - max(a.last_hour_start(), a.ready), 0.0)
    return free, comp, (free / comp if comp > 0 else 0.0)


def _result(policy, work, t0, finished, t_end, allocs, markets, points) -> ck.ClusterRun:
    """The :class:`~scarjax.cluster.clock.ClusterRun` of a run: every allocation's machines
    one :class:`~scarjax.cluster.ledger.Ledger` entry each (spot machines at their market's
    price series, on-demand ones at the on-demand price; times on the markets' clock), one
    point per decision (``loss``: the share of the work still to do), an ``'allocate'`` event
    per allocation and a ``'revocation'`` event per provider revocation, and the Proteus
    quantities in ``meta``."""
    for a in allocs:
        if not np.isfinite(a.end):
            a.end = max(t_end, a.start)
    ledger = Ledger()
    usd = []
    for i, a in enumerate(allocs):
        mkt = markets[a.market]
        price = mkt.series if a.tier == "transient" else mkt.on_demand
        for k in range(a.n):
            ledger.start((i, k), a.start, price=price, tier=a.tier, billing=mkt.billing)
        charged = [ledger.stop((i, k), a.end, revoked=bool(a.revoked)) for k in range(a.n)]
        usd.append(a.n * charged[0])  # the allocation's machines bill alike
    rec = ck.Recorder(policy, ledger, t0)
    for j, (t, w) in enumerate(points):
        rec.point(t - t0, float(np.clip(1.0 - w / work.work, 0.0, 1.0)), j)
    events = []
    for a in allocs:
        name = markets[a.market].name
        events.append((a.start - t0, "allocate", f"{a.n} x {name} ({a.tier}, bid {a.bid:g})"))
        if a.revoked:
            events.append((a.end - t0, "revocation", f"{a.n} x {name}"))
    for e in sorted(events, key=lambda e: e[0]):
        rec.event(*e)
    free, comp, frac = free_fraction(allocs, [m.cores for m in markets])
    return rec.finish(
        float(t_end - t0), start_s=float(t0), finished=bool(finished), work_units=float(work.work),
        free_core_s=free, compute_core_s=comp, free_fraction=frac, evictions=int(sum(a.revoked for a in allocs)),
        allocations=[dict(dataclasses.asdict(a), name=markets[a.market].name, usd=float(x))
                     for a, x in zip(allocs, usd)],
    )


def _integrate(allocs, cores, scaling, t, t_next, work, target):
    """Advance the work from ``t`` to ``t_next`` with the working machines (piecewise constant
    between readiness and end times); returns ``(work, t_done or None)``."""
    pts = sorted({t, t_next, *(x for a in allocs for x in (a.ready, a.end) if t < x < t_next)})
    for lo, hi in zip(pts[:-1], pts[1:]):
        mid = 0.5 * (lo + hi)
        c = sum(a.n * cores[a.market] for a in allocs if a.ready <= mid < a.end)
        r = float(scaling.rate(c)) / 3600.0
        if r > 0 and work + r * (hi - lo) >= target:
            return target, lo + (target - work) / r
        work += r * (hi - lo)
    return work, None


def at(markets: Any, start_s: float) -> tuple[mk.Market, ...]:
    """The same markets with the job starting at ``start_s`` on their clock
    (``Market.start_time_s``): where :func:`proteus` and the baselines start."""
    va.check_real("start_s", start_s, lo=0.0, scalar=True)
    markets = (markets,) if isinstance(markets, mk.Market) else markets
    _views(markets)
    return tuple(dataclasses.replace(m, start_time_s=float(start_s)) for m in markets)


def _contract(job, markets, key, horizon_s, work, cores_market=0, what="market"):
    """Checks of the shared policy signature; returns ``(views, start_s, work model)``: the
    markets' host views, their common ``start_time_s`` and the work model (default
    :meth:`WorkModel.from_job` on ``markets[cores_market]``'s machine)."""
    if not isinstance(job, ck.Job):
        raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
    core.as_key(key)
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    markets = (markets,) if isinstance(markets, mk.Market) else markets
    views = _views(markets)
    starts = {float(m.start_time_s) for m in markets}
    if len(starts) != 1:
        raise ValueError(f"markets must share one start_time_s (the job's start; see bidbrain.at), got {sorted(starts)}")
    va.check_int(what, cores_market, lo=0)
    if cores_market >= len(views):
        raise ValueError(f"{what} must be an index into markets ({len(views)} of them), got {cores_market}")
    if work is None:
        work = WorkModel.from_job(job, views[cores_market].cores)
    if not isinstance(work, WorkModel):
        raise TypeError(f"work must be a bidbrain.WorkModel or None, got {type(work).__name__}")
    return views, starts.pop(), work


def proteus(
    job: ck.Job,
    markets: Any,
    *,
    key: Any,
    horizon_s: float,
    work: WorkModel | None = None,
    reliable: int = 2,
    reliable_market: int = 0,
    max_cores: int = 128,
    sizes: Sequence[int] = (4, 8, 16),
    tick_s: float = 300.0,
    lead_s: float = 300.0,
    fixed_headroom: float | None = None,
    tables: Sequence[EvictionTable] | None = None,
    min_gain: float = 0.01,
    policy: str = "proteus",
) -> ck.ClusterRun:
    """Proteus: ``job`` under BidBrain (Proteus Sec 4) from the markets' ``start_time_s``, a
    policy of the shared contract ``policy(job, market, *, key, horizon_s, ...) ->
    ClusterRun`` (:mod:`scarjax.cluster.clock`).

    Args:
      job: the :class:`~scarjax.cluster.clock.Job`; its progress is the stated ``work`` model
        (BidBrain trains nothing).
      markets: the documented extension of the contract's ``market``: a sequence of
        price-driven :class:`~scarjax.cluster.market.Market` objects on one clock sharing one
        ``start_time_s`` (the types BidBrain buys from; :func:`at` sets the start), or one.
      key: the contract's market key: price-driven markets draw nothing (a revocation is the
        first price above the bid), so the run is the same for every key; checked only.
      horizon_s: give up (unfinished) after this long, or at the markets' end.
      work: the :class:`WorkModel` (default :meth:`WorkModel.from_job` on
        ``markets[reliable_market]``'s machine).
      reliable: on-demand machines of ``markets[reliable_market]``'s type (the BackupPS tier),
        always on and working.
      max_cores: a cap on the fleet's cores (reliable + spot).
      sizes: the allocation sizes (machines) BidBrain considers.
      tick_s: how often it considers buying; lead_s: how long before an allocation's billing
        hour ends it decides to renew or drop it (>= tick_s, so no hour end is missed).
      fixed_headroom: ``None``: the bid delta is chosen (:data:`HEADROOMS` x on-demand);
        a number: always bid that many USD/h above the market (aggressive: :data:`PRICE_TICK`).
      tables: the markets' :class:`EvictionTable` (built if ``None``; share them across runs).
      min_gain: buy only if the fleet's expected cost per work drops by this fraction.
      policy: the run's label.

    Returns:
      A :class:`~scarjax.cluster.clock.ClusterRun`: one :class:`~scarjax.cluster.ledger.Ledger`
      entry per machine, one point per decision tick (``loss`` the share of the work still to
      do, so ``to_target(0.0)`` is completion; ``steps`` the tick), ``'allocate'`` and
      ``'revocation'`` events, and in ``meta``: ``start_s``, ``finished``, ``work_units``,
      ``free_core_s``, ``compute_core_s``, ``free_fraction`` (:func:`free_fraction`),
      ``evictions`` (provider revocations) and ``allocations`` (each with its ``usd``).
    """
    va.check_real("tick_s", tick_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("lead_s", lead_s, lo=0.0, lo_open=True, scalar=True)
    if lead_s < tick_s:
        raise ValueError(f"lead_s ({lead_s}) must be >= tick_s ({tick_s}) so no hour end is missed")
    markets = (markets,) if isinstance(markets, mk.Market) else markets
    if isinstance(markets, Sequence) and not isinstance(markets, str) and len(markets) == 0:
        raise ValueError("markets must hold at least one Market, got an empty sequence")
    if not isinstance(markets, Sequence) or isinstance(markets, str) or not (0 <= reliable_market < len(markets)):
        raise ValueError(f"reliable_market must be an index into markets, got {reliable_market}")
    va.check_int("reliable", reliable, lo=0)
    if fixed_headroom is not None and not fixed_headroom >= 0:
        raise ValueError(f"fixed_headroom must be >= 0 or None, got {fixed_headroom}")
    views, start_s, work = _contract(job, markets, key, horizon_s, work, reliable_market, "reliable_market")
    tables = [eviction_table(m) for m in markets] if tables is None else list(tables)
    markets = views
    if len(tables) != len(markets):
        raise ValueError("tables must have one EvictionTable per market")
    cores = [m.cores for m in markets]
    sc, H = work.scaling, HOUR_S
    end_clock = min(start_s + horizon_s, min(m.end_s for m in markets))
    points = [(float(start_s), 0.0)]
    t = float(start_s)
    allocs: list[Allocation] = []
    if reliable:
        allocs.append(Allocation(reliable_market, reliable, math.inf, t, t + work.startup_s, tier="reliable"))
    rel_price = markets[reliable_market].on_demand
    done_w, done = 0.0, None
    while t < end_clock:
        live = [a for a in allocs if a.end > t]
        spot = [a for a in live if a.tier == "transient" and not a.dropping]
        rel = [a for a in live if a.tier == "reliable"]
        # expectations over the next hour for the fleet's members
        m_cost, m_core, m_beta = [], [], []
        for a in rel:
            m_cost.append(a.n * rel_price)
            m_core.append(a.n * cores[a.market] * max(H - max(a.ready - t, 0.0), 0.0))
            m_beta.append(0.0)
        for a in spot:
            mkt = markets[a.market]
            p = float(mkt.price_at(t))
            beta, tau = tables[a.market].estimate(t, a.bid - p)
            c, s = expected_hour(p, a.n, cores[a.market], beta, tau, max(a.ready - t, 0.0))
            m_cost.append(float(c)), m_core.append(float(s)), m_beta.append(beta)
        # renew or drop allocations whose billing hour ends before the next decision
        for j, a in enumerate(spot):
            hour_end = a.start + H * math.ceil((t - a.start) / H + 1e-9)
            if hour_end - t <= lead_s:
                i = len(rel) + j
                if not renew_or_drop(m_cost, m_core, m_beta, i, sc, work.reconfig_s):
                    a.dropping, a.end = True, min(hour_end, a.revoke_at)
                    a.revoked = a.revoke_at <= hour_end
                    m_cost[i], m_core[i], m_beta[i] = 0.0, 0.0, 0.0
        # consider buying one allocation
        used = sum(a.n * cores[a.market] for a in live if not a.dropping)
        cand = []
        for mi, mkt in enumerate(markets):
            p = float(mkt.price_at(t))
            hs = tables[mi].headroom if fixed_headroom is None else np.array([fixed_headroom])
            for h in hs:
                beta, tau = tables[mi].estimate(t, float(h))
                for n in sizes:
                    if used + n * cores[mi] <= max_cores:
                        cand.append((mi, float(h), n, p, beta, tau))
        if cand:
            arr = np.array([(c[3], c[2], cores[c[0]], c[4], c[5]) for c in cand])
            cc, cs = expected_hour(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], work.startup_s)
            k = best_acquisition(m_cost, m_core, m_beta, cc, cs, arr[:, 3], sc, work.reconfig_s, min_gain=min_gain)
            if k >= 0:
                mi, h, n, p, _, _ = cand[k]
                bid = p + h
                notice = float(markets[mi].notice(t, bid))
                a = Allocation(mi, n, bid, t, t + work.startup_s, revoke_at=notice + markets[mi].warning_s)
                allocs.append(a)
                done_w -= float(sc.rate(used)) * work.reconfig_s / 3600.0  # the join's pause
        # provider revocations during the next tick
        t_next = min(t + tick_s, end_clock)
        for a in allocs:
            if a.tier == "transient" and not a.dropping and a.end > t and a.revoke_at < t_next + 1e-9:
                a.end, a.revoked = max(a.revoke_at, a.start), True
        done_w, done = _integrate(allocs, cores, sc, t, t_next, done_w, work.work)
        # an eviction pauses the fleet too
        for a in allocs:
            if a.revoked and t <= a.end < t_next and a.end > a.ready:
                c = sum(b.n * cores[b.market] for b in allocs if b.ready <= a.end < b.end)
                done_w -= float(sc.rate(c)) * work.reconfig_s / 3600.0
        if done is not None:
            points.append((done, work.work))
            return _result(policy, work, start_s, True, done, _cut(allocs, done), markets, points)
        points.append((t_next, done_w))
        t = t_next
    return _result(policy, work, start_s, False, t, _cut(allocs, t), markets, points)


def _cut(allocs, t_end):
    """End every allocation still running at ``t_end`` (by the user); drop unused ones."""
    out = []
    for a in allocs:
        if a.start >= t_end:
            continue
        if a.end > t_end:
            a.end, a.revoked = t_end, False
        out.append(a)
    return out



# --------------------------------------------------------------------------------------
# Baselines


def on_demand(job: ck.Job, markets: Any, *, key: Any, horizon_s: float, work: WorkModel | None = None,
              machines: int | None = None, market: int = 0, policy: str = "on-demand") -> ck.ClusterRun:
    """A fixed fleet of ``machines`` (default ``job.workers``) on-demand instances of
    ``markets[market]``'s type from the markets' ``start_time_s``, working from start-up to the
    end of the ``work`` (or the horizon); arguments and result as :func:`proteus`."""
    views, start_s, work = _contract(job, markets, key, horizon_s, work, market)
    machines = job.workers if machines is None else va.check_int("machines", machines, lo=1)
    c = machines * views[market].cores
    rate = float(work.scaling.rate(c)) / 3600.0
    ready = start_s + work.startup_s
    t_done = ready + work.work / rate
    t_end = min(t_done, start_s + horizon_s)
    a = Allocation(market, machines, math.inf, float(start_s), ready, end=t_end, tier="reliable")
    points = [(start_s, 0.0), (max(min(ready, t_end), start_s), 0.0), (t_end, rate * max(t_end - ready, 0.0))]
    return _result(policy, work, start_s, t_done <= t_end, t_end, [a], views, points)


def mttf_before(market: mk.Market, t: float, bid: float, lookback_s: float = 7 * 86400.0) -> float:
    """Mean time between the price's crossings above ``bid`` in ``[t - lookback_s, t]`` (the
    history before ``t`` only): window length / number of upward crossings (the window's
    length if none)."""
    va.check_real("bid", bid, lo=0.0, lo_open=True, scalar=True)
    va.check_real("t", t, lo=0.0, scalar=True)
    va.check_real("lookback_s", lookback_s, lo=0.0, lo_open=True, scalar=True)
    market = _view(market)
    lo = max(t - lookback_s, float(market.times[0]))
    i0, i1 = int(market.index(lo)), int(market.index(t))
    above = market.prices[i0: i1 + 1] > bid
    ups = int(np.sum(above[1:] & ~above[:-1]))
    span = max(t - lo, 1.0)
    return span / ups if ups else span


def checkpoint_spot(job: ck.Job, markets: Any, *, key: Any, horizon_s: float, work: WorkModel | None = None,
                    machines: int | None = None, market: int = 0, bid: float | None = None,
                    lookback_s: float = 7 * 86400.0, policy: str = "checkpointing") -> ck.ClusterRun:
    """All ``machines`` (default ``job.workers``) spot (``bid``: the on-demand price) with full
    checkpoints of ``job.checkpoint_s`` every ``sqrt(2 * checkpoint_s * MTTF)`` (Young/Daly;
    MTTF from :func:`mttf_before`); an eviction rolls back to the last checkpoint and the job
    restarts (reading it back in ``job.restore_s``) on the cheapest option (on-demand while the
    spot price is above the bid, back to spot at the end of an on-demand hour). Arguments and
    result as :func:`proteus` (points at each allocation's end: the work committed)."""
    views, start_s, work = _contract(job, markets, key, horizon_s, work, market)
    machines = job.workers if machines is None else va.check_int("machines", machines, lo=1)
    markets = views
    mkt = markets[market]
    bid = mkt.on_demand if bid is None else float(bid)
    mttf = mttf_before(mkt, start_s, bid, lookback_s)
    period = young_daly_s(job.checkpoint_s, mttf)
    rate = float(work.scaling.rate(machines * mkt.cores)) / 3600.0
    end_clock = min(start_s + horizon_s, mkt.end_s)
    t, committed, allocs = float(start_s), 0.0, []
    points = [(t, 0.0)]
    while t < end_clock:
        spot_ok = float(mkt.price_at(t)) <= bid
        ready = t + work.startup_s + (job.restore_s if committed > 0 else 0.0)
        if spot_ok:
            stop = min(float(mkt.notice(t, bid)) + mkt.warning_s, end_clock)
            planned = False
        else:  # on-demand until the first hour end at which the spot price is back under the bid
            k = 1
            while t + k * HOUR_S < end_clock and float(mkt.price_at(t + k * HOUR_S - job.checkpoint_s)) > bid:
                k += 1
            stop, planned = min(t + k * HOUR_S, end_clock), True
        a = Allocation(market, machines, bid if spot_ok else math.inf, t, ready,
                       tier="transient" if spot_ok else "reliable")
        allocs.append(a)
        # cycles of `period` compute + one checkpoint, from `ready`
        need = (work.work - committed) / rate  # compute seconds still needed
        avail = max(stop - ready, 0.0)
        cyc = period + job.checkpoint_s
        full = math.floor(need / period) if period > 0 else 0
        t_done = ready + full * cyc + (need - full * period)
        if need - full * period <= 1e-9 and full > 0:
            t_done = ready + full * cyc - job.checkpoint_s
        if t_done <= stop:
            a.end = t_done
            points.append((t_done, work.work))
            return _result(policy, work, start_s, True, t_done, allocs, markets, points)
        if planned:  # a last checkpoint before leaving on-demand
            compute = max(avail - job.checkpoint_s, 0.0)
            n = math.floor(compute / cyc)
            committed += rate * (n * period + min(compute - n * cyc, period))
        else:
            n = math.floor(avail / cyc)
            committed += rate * n * period
        a.end, a.revoked = stop, (not planned) and stop < end_clock
        points.append((stop, committed))
        t = stop
    return _result(policy, work, start_s, False, t, allocs, markets, points)
