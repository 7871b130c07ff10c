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

**The job and its scaling model.** A job is ``W`` units of work (core-hours at perfect
scaling). A fleet of ``C`` working cores does ``rate(C) = C / (1 + kappa * log2(max(C / c0,
1)))`` units per hour (:class:`ScalingModel`: a synchronisation overhead growing with the log
of the fleet, ``kappa = 0.05`` by default; ``c0`` the reliable tier's cores). This is a stated
progress model, not calibrated from real training runs; no calibrated model
(``scarjax.cluster.sweep``) existed when this module was written. New machines start
``startup_s`` after they are bought (AWS: 300 s, :data:`scarjax.cluster.market.DEFAULT_STARTUP_S`)
and are billed from the purchase. AgileML (Proteus Sec 3) keeps the parameter state on
``reliable`` on-demand machines (BackupPSs) and flushes on the two-minute warning, so an
eviction loses no work beyond the reconfiguration pause.

**Baselines** (same job, market and clock): :func:`on_demand` (a fixed fleet of on-demand
machines) and :func:`checkpoint_spot` (all machines spot at the on-demand bid, full
checkpoints every Young/Daly interval ``sqrt(2 delta MTTF)`` with the MTTF estimated from
the history before the start, rollback to the last checkpoint on eviction, restart on the
cheapest option: on-demand while the spot price is above the bid, back to spot at an
on-demand hour's end; TierML Sec 4.5's comparison scheme).

**Free computing.** :attr:`ProteusRun.free_fraction` is the share of all computing
(core-seconds of running machines, reliable included) that fell in provider-revoked partial
hours and was therefore not billed (Proteus: ~32%).

The simulation is a host event loop in NumPy (decisions depend on the fleet, the history and
the bids: data-dependent control flow, one greedy choice per tick); the hot parts (eviction
tables over the whole history, candidate evaluation) are vectorised, and the bills are one
:func:`~scarjax.cluster.market.bill` call per market.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from scarjax import validate as va
from scarjax.cluster import market as mk
from scarjax.cluster.policies import young_daly_s
from scarjax.data import transient as td

__all__ = [
    "CORES",
    "HEADROOMS",
    "HOUR_S",
    "PRICE_TICK",
    "Allocation",
    "BaselineRun",
    "EvictionTable",
    "Job",
    "ProteusRun",
    "ScalingModel",
    "best_acquisition",
    "bidbrain",
    "checkpoint_spot",
    "eviction_table",
    "expected_hour",
    "fleet_cost_per_work",
    "free_fraction",
    "mttf_before",
    "on_demand",
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
class Job:
    """``work`` units (core-hours at perfect scaling) with a :class:`ScalingModel`.

    Attributes:
      startup_s: seconds from buying a machine to its working (AWS spot: 300 s).
      reconfig_s: seconds of whole-fleet pause per allocation joining or leaving (AgileML's
        re-assignment of partitions, Proteus Sec 3).
      checkpoint_s, restore_s: a full checkpoint's write and read time (the checkpointing
        baseline only).
    """

    work: float
    scaling: ScalingModel = ScalingModel()
    startup_s: float = mk.DEFAULT_STARTUP_S["aws"]
    reconfig_s: float = 30.0
    checkpoint_s: float = 60.0
    restore_s: float = 60.0

    def __post_init__(self):
        for name in ("work", "startup_s", "reconfig_s", "checkpoint_s", "restore_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.work <= 0:
            raise ValueError(f"work must be > 0, got {self.work}")
        if not isinstance(self.scaling, ScalingModel):
            raise TypeError(f"scaling must be a ScalingModel, got {type(self.scaling).__name__}")


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


_VIEWS: dict[int, tuple[Any, _PriceView]] = {}


def _view(market: Any, what: str = "market") -> _PriceView:
    """The :class:`_PriceView` of a price-driven market (built once per market object)."""
    if isinstance(market, _PriceView):
        return market
    if not isinstance(market, mk.Market):
        raise TypeError(f"{what} must be a scarjax.cluster.market.Market, got {type(market).__name__}")
    if not isinstance(market.process, mk.PriceDriven):
        raise ValueError(f"{what} must be a price-driven market (Market.from_prices / from_spot_prices), "
                         f"got process {type(market.process).__name__}")
    hit = _VIEWS.get(id(market))
    if hit is not None and hit[0]() is market:
        return hit[1]
    series = market.process.series
    times, prices = series.host_arrays()
    v = _PriceView(market.machine.name, series, times, prices, float(market.machine.on_demand_price),
                   int(market.machine.cores), float(series.end_s), float(market.process.warning_s),
                   market.billing, np.asarray(series.maxtab, np.float64))
    if len(_VIEWS) > 256:
        _VIEWS.clear()
    _VIEWS[id(market)] = (weakref.ref(market), v)
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


@functools.lru_cache(maxsize=None)
def _bill_fn():
    return jax.jit(mk.bill, static_argnames=("scheme",))


def _bills(allocs: Sequence[Allocation], markets: Sequence[_PriceView]) -> np.ndarray:
    """USD per allocation (``n`` x :func:`~scarjax.cluster.market.bill`): spot allocations at
    their market's price series, on-demand ones at the on-demand price; one call per market,
    padded to a power of two (few compilations)."""
    markets = [_view(m) for m in markets]
    out = np.zeros(len(allocs))
    groups: dict[tuple[int, str], list[int]] = {}
    for i, a in enumerate(allocs):
        groups.setdefault((a.market, a.tier), []).append(i)
    for (m, tier), idx in groups.items():
        size = 1 << max(3, math.ceil(math.log2(len(idx))))
        start = np.zeros(size, np.float32)
        end = np.zeros(size, np.float32)
        rev = np.zeros(size, bool)
        for k, i in enumerate(idx):
            start[k], end[k], rev[k] = allocs[i].start, allocs[i].end, allocs[i].revoked
        price = markets[m].series if tier == "transient" else np.float32(markets[m].on_demand)
        per = np.asarray(_bill_fn()(start, end, price, rev, scheme=markets[m].billing))
        out[idx] = per[: len(idx)] * np.array([allocs[i].n for i in idx])
    return out


@dataclasses.dataclass
class ProteusRun:
    """What :func:`bidbrain` and the baselines return.

    Attributes:
      policy: a label.
      finished: the job's work was done before ``horizon``.
      runtime_s: from the start to completion (or to the horizon).
      cost: USD, everything billed.
      cost_reliable, cost_transient: the split by tier.
      free_core_s, compute_core_s, free_fraction: see :func:`free_fraction` (all tiers).
      evictions: provider revocations.
      allocations: every allocation with its bill (``as dicts``).
    """

    policy: str
    start_s: float
    finished: bool
    runtime_s: float
    cost: float
    cost_reliable: float
    cost_transient: float
    free_core_s: float
    compute_core_s: float
    free_fraction: float
    evictions: int
    allocations: list

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


BaselineRun = ProteusRun


def _finish(policy, t0, finished, t_end, allocs, markets) -> ProteusRun:
    for a in allocs:
        if not np.isfinite(a.end):
            a.end = max(t_end, a.start)
    b = _bills(allocs, markets)
    free, comp, frac = free_fraction(allocs, [m.cores for m in markets])
    rel = float(sum(x for x, a in zip(b, allocs) if a.tier == "reliable"))
    return ProteusRun(
        policy, float(t0), bool(finished), float(t_end - t0), float(b.sum()), rel, float(b.sum() - rel), free, comp,
        frac, sum(a.revoked for a in allocs),
        [dict(dataclasses.asdict(a), name=markets[a.market].name, usd=float(x)) for a, x in zip(allocs, b)],
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


def bidbrain(
    job: Job,
    markets: Sequence[mk.Market],
    start_s: float,
    *,
    reliable: int = 2,
    reliable_market: int = 0,
    max_cores: int = 128,
    sizes: Sequence[int] = (4, 8, 16),
    tick_s: float = 300.0,
    lead_s: float = 300.0,
    fixed_headroom: float | None = None,
    tables: Sequence[EvictionTable] | None = None,
    min_gain: float = 0.01,
    horizon_s: float = 7 * 86400.0,
    policy: str = "proteus",
) -> ProteusRun:
    """Run ``job`` under BidBrain from ``start_s`` (seconds on the markets' clock).

    Args:
      markets: price-driven :class:`~scarjax.cluster.market.Market` objects on one clock (the
        types BidBrain buys from; see the module docstring).
      reliable: on-demand machines of ``markets[reliable_market]``'s type (the BackupPS tier),
        always on and working; their cores are the scaling model's ``base_cores`` in spirit
        (the model is the job's).
      max_cores: a cap on the fleet's cores (reliable + spot).
      sizes: the allocation sizes (machines) BidBrain considers.
      tick_s: how often it considers buying; lead_s: how long before an allocation's billing
        hour ends it decides to renew or drop it (>= tick_s, so no hour end is missed).
      fixed_headroom: ``None``: the bid delta is chosen (:data:`HEADROOMS` x on-demand);
        a number: always bid that many USD/h above the market (aggressive: :data:`PRICE_TICK`).
      tables: the markets' :class:`EvictionTable` (built if ``None``; share them across runs).
      min_gain: buy only if the fleet's expected cost per work drops by this fraction.
      horizon_s: give up (unfinished) after this long, or at the markets' end.
    """
    if lead_s < tick_s:
        raise ValueError(f"lead_s ({lead_s}) must be >= tick_s ({tick_s}) so no hour end is missed")
    if reliable < 0 or not (0 <= reliable_market < len(markets)):
        raise ValueError(f"reliable must be >= 0 and reliable_market an index into markets, got {reliable}, "
                         f"{reliable_market}")
    if fixed_headroom is not None and not fixed_headroom >= 0:
        raise ValueError(f"fixed_headroom must be >= 0 or None, got {fixed_headroom}")
    views = _views(markets)
    tables = [eviction_table(m) for m in markets] if tables is None else list(tables)
    markets = views
    if len(tables) != len(markets):
        raise ValueError("tables must have one EvictionTable per market")
    cores = [m.cores for m in markets]
    sc, H = job.scaling, HOUR_S
    end_clock = min(start_s + horizon_s, min(m.end_s for m in markets))
    t = float(start_s)
    allocs: list[Allocation] = []
    if reliable:
        allocs.append(Allocation(reliable_market, reliable, math.inf, t, t + job.startup_s, tier="reliable"))
    rel_price = markets[reliable_market].on_demand
    work, done = 0.0, None
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
                if not renew_or_drop(m_cost, m_core, m_beta, i, sc, job.reconfig_s):
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
            cc, cs = expected_hour(arr[:, 0], arr[:, 1], arr[:, 2], arr[:, 3], arr[:, 4], job.startup_s)
            k = best_acquisition(m_cost, m_core, m_beta, cc, cs, arr[:, 3], sc, job.reconfig_s, min_gain=min_gain)
            if k >= 0:
                mi, h, n, p, _, _ = cand[k]
                bid = p + h
                notice = float(markets[mi].notice(t, bid))
                a = Allocation(mi, n, bid, t, t + job.startup_s, revoke_at=notice + markets[mi].warning_s)
                allocs.append(a)
                work -= float(sc.rate(used)) * job.reconfig_s / 3600.0  # the join's pause
        # provider revocations during the next tick
        t_next = min(t + tick_s, end_clock)
        for a in allocs:
            if a.tier == "transient" and not a.dropping and a.end > t and a.revoke_at < t_next + 1e-9:
                a.end, a.revoked = max(a.revoke_at, a.start), True
        work, done = _integrate(allocs, cores, sc, t, t_next, work, job.work)
        # an eviction pauses the fleet too
        for a in allocs:
            if a.revoked and t <= a.end < t_next and a.end > a.ready:
                c = sum(b.n * cores[b.market] for b in allocs if b.ready <= a.end < b.end)
                work -= float(sc.rate(c)) * job.reconfig_s / 3600.0
        if done is not None:
            return _finish(policy, start_s, True, done, _cut(allocs, done), markets)
        t = t_next
    return _finish(policy, start_s, False, t, _cut(allocs, t), markets)


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


def on_demand(job: Job, markets: Sequence[mk.Market], start_s: float, *, machines: int = 16,
              market: int = 0) -> ProteusRun:
    """A fixed fleet of ``machines`` on-demand instances of ``markets[market]``'s type."""
    markets = _views(markets)
    va.check_int("machines", machines, lo=1)
    va.check_real("start_s", start_s, lo=0.0, scalar=True)
    c = machines * markets[market].cores
    rate = float(job.scaling.rate(c)) / 3600.0
    t_end = start_s + job.startup_s + job.work / rate
    a = Allocation(market, machines, math.inf, float(start_s), start_s + job.startup_s, end=t_end, tier="reliable")
    return _finish("on-demand", start_s, True, t_end, [a], markets)


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


def checkpoint_spot(job: Job, markets: Sequence[mk.Market], start_s: float, *, machines: int = 16,
                    market: int = 0, bid: float | None = None, horizon_s: float = 7 * 86400.0,
                    lookback_s: float = 7 * 86400.0) -> ProteusRun:
    """All machines spot (``bid``: the on-demand price) with full checkpoints every
    ``sqrt(2 * checkpoint_s * MTTF)`` (Young/Daly; MTTF from :func:`mttf_before`); an eviction
    rolls back to the last checkpoint and the job restarts on the cheapest option (on-demand
    while the spot price is above the bid, back to spot at the end of an on-demand hour)."""
    va.check_real("start_s", start_s, lo=0.0, scalar=True)
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    va.check_int("machines", machines, lo=1)
    markets = _views(markets)
    mkt = markets[market]
    bid = mkt.on_demand if bid is None else float(bid)
    mttf = mttf_before(mkt, start_s, bid, lookback_s)
    period = young_daly_s(job.checkpoint_s, mttf)
    rate = float(job.scaling.rate(machines * mkt.cores)) / 3600.0
    end_clock = min(start_s + horizon_s, mkt.end_s)
    t, committed, allocs = float(start_s), 0.0, []
    while t < end_clock:
        spot_ok = float(mkt.price_at(t)) <= bid
        ready = t + job.startup_s + (job.restore_s if committed > 0 else 0.0)
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
        need = (job.work - committed) / rate  # compute seconds still needed
        avail = max(stop - ready, 0.0)
        cyc = period + job.checkpoint_s
        full = math.floor(need / period) if period > 0 else 0
        t_done = ready + full * cyc + (need - full * period)
        if need - full * period <= 1e-9 and full > 0:
            t_done = ready + full * cyc - job.checkpoint_s
        if t_done <= stop:
            a.end = t_done
            return _finish("checkpointing", start_s, True, t_done, allocs, markets)
        if planned:  # a last checkpoint before leaving on-demand
            compute = max(avail - job.checkpoint_s, 0.0)
            n = math.floor(compute / cyc)
            committed += rate * (n * period + min(compute - n * cyc, period))
        else:
            n = math.floor(avail / cyc)
            committed += rate * n * period
        a.end, a.revoked = stop, (not planned) and stop < end_clock
        t = stop
    return _finish("checkpointing", start_s, False, t, allocs, markets)
