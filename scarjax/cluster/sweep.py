"""The TierML Fig 12 sweep: every start minute of a spot-price history (TierML Sec 4.7, Fig 12).

TierML Sec 4.7 prices a job of ``W`` compute-hours (the time it takes on ``N`` full-price
on-demand machines) started at *every minute* of a spot-price trace, under TierML (1 reliable
on-demand machine + ``N - 1`` spot machines, stage 3) and under a checkpointing scheme run
entirely on spot machines (Sec 2.3; Flint's MTTF-based checkpoint interval), for two bids:
**BidOnDemand** (bid = on-demand price, pay the market price) and **BidAggressive** (bid = the
current price rounded up to the next dime or nickel, and pay the bid: Sec 4.7 "charging users
what they bid"). Costs are relative to the same job on ``N`` on-demand machines.

This module is that sweep on the 2015 AWS spot history of :mod:`scarjax.data.transient`, as a
**calibrated progress model** (no training runs inside: months of start minutes x 180 settings
is tens of millions of scenarios; the issue's Sec 2 allows a progress model for long
horizons). Two implementations of exactly the same scenario semantics:

* :func:`run_vectorised` - NumPy, all scenarios of one instance type in lock step, one
  *segment* (an allocation's life: request, start-up, run, end) per iteration, with the active
  set compacted each iteration; price look-ups are O(1) gathers and ``O(log T)`` binary lifting
  over sparse max/min tables; hourly bills are O(1) differences of stride-60 suffix sums.
* :func:`run_reference` - a plain Python event loop over one scenario (linear scans of the
  price grid, a Python loop over billed hours), the specification the vectorised code is
  tested against (``tests/cluster/test_sweep.py``) and the benchmark's baseline.

**Clock and prices.** Parameters are in seconds (:class:`ProgressModel`, ``work_s``,
:func:`mttf_s`); inside, the sweep runs on a one-minute grid: the price of class ``c`` at minute
``m`` is the market price in effect at the minute's start (:func:`build_markets`). The grid is
extended past the history's end by holding its last price (``pad``), so every job finishes;
scenarios that ran past the real end are flagged (``overran``) and counted in the results.

**Classes.** For an instance type, the *classes* are its three zones' spot markets (equal
machines and on-demand price, independent markets - TierML Sec 3.4 switches between similar
classes, c4.xlarge and c4.2xlarge there). A scenario's zone is the *home* class: both policies
start there when the spot price is usable (so per-zone results differ, as in Fig 12); later
choices range over all classes (checkpointing's restart on the cheapest option, Sec 4.7; TierML's
proactive switching, Sec 3.4 / 4.6). A spot price ``p`` is *usable* when the charge is below the
on-demand price (BidOnDemand: ``p < od``; BidAggressive: ``ceil(p / step) * step < od``).

**Market rules.** An allocation requested at minute ``a`` of class ``c`` with bid ``b`` gets
its notice at the first minute ``m > a`` with ``p(c, m) > b`` and is revoked ``warning_s`` (120 s)
later (AWS's two-minute warning, :data:`~scarjax.data.transient.AWS_WARNING_S`); it starts
working ``startup_s`` (300 s: "the average queuing delay for a spot request on AWS EC2 is 5
minutes", Sec 3.3) after the request, and a request revoked before it runs costs nothing. AWS
2015 hourly billing (:func:`scarjax.cluster.market.bill`'s rule): whole instance-hours from the
machine's start, each at the price in effect at its beginning (BidOnDemand) or at the bid
(BidAggressive); the last partial hour is charged when the user ends the machine and free when
the provider revokes it.

**TierML** (Sec 3.2-3.4; see :class:`ProgressModel` for the rates). The reliable machine runs
throughout (billed at the on-demand price, ended by the user at completion). On a notice the
ActivePSs flush to the BackupPS during the warning (the fleet pauses ``flush_s``); a
revocation with less warning than the flush needs rolls back ``rollback_s`` of fleet work
(never with AWS's 2 minutes and the default 30 s flush). Between a revocation and the
next fleet's start-up only the reliable machine works (stage 1). When no class is usable,
TierML falls back to ``N - 1`` on-demand machines until a class is usable again (the on-demand
fleet runs until the new spot fleet is up, then is ended by the user). **Proactive switching**:
when the current class's price first exceeds ``switch_ratio * bid`` after it started, TierML
compares the classes' MTTF proxies (the relative headroom ``(bid - p) / bid``, Sec 3.4: "the
lower the spot price relative to the bid price, the longer the expected time to eviction") and,
if another usable class is best, requests it; the old fleet keeps working until the new one
is up and is kept to the end of the billing hour in which that happens (free if revoked
first). With ``switching=False`` TierML stays on its home class (the Sec 4.6 ablation).

**Checkpointing** (Sec 2.3 / 4.7): all ``N`` machines on spot (or on-demand when that is the
cheapest option - then to the end), full checkpoints of ``checkpoint_s`` every Young/Daly
interval ``tau = sqrt(2 * checkpoint_s * MTTF)`` of work, MTTF the class's mean spot lifetime
under the bid (:func:`mttf_s`, measured on the trace); a revocation loses the work since
the last completed checkpoint (the warning is not used: a full checkpoint does not fit in it),
and the restart takes the cheapest option at that minute.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping, NamedTuple

import numpy as np

from scarjax import validate as va
from scarjax.cluster import market as mk
from scarjax.data import transient as td

__all__ = [
    "BIDS",
    "POLICIES",
    "ProgressModel",
    "TypeMarkets",
    "aggressive_step",
    "build_markets",
    "default_model",
    "markets_from_grid",
    "mttf_s",
    "run_reference",
    "run_vectorised",
    "summarise",
    "sweep",
]

BIDS = ("on_demand", "aggressive")
POLICIES = ("tierml", "checkpoint")
_NONE = -1


@dataclasses.dataclass(frozen=True)
class ProgressModel:
    """The calibrated progress model: work rate of a fleet and the policies' overheads.

    Work is measured in *fleet-minutes*: a job of ``W`` compute-hours needs ``60 W`` minutes of
    the full on-demand fleet (``machines`` machines of the type, rate 1).

    Rates (fractions of the full fleet's rate; :meth:`fleet_rate`), from TierML's measured
    scaling (stated constants, not fitted here): **stage 1** (ParamServs and workers on the
    reliable machines, transient:reliable ratio ``<= stage2_ratio``) runs every machine's
    workers at ``stage1_efficiency``; **stage 2** (ActivePSs on half the transient machines,
    ratio ``<= stage3_ratio`` = 15, Sec 3.2) at ``stage2_efficiency``; **stage 3** (no workers on
    the reliable machines beyond 15:1) runs only the transient machines' workers, at
    ``stage3_efficiency`` ("near ideal performance", Sec 3.2 / Fig 9). With the defaults and
    ``N = 64``: TierML's full fleet works at 63/64, the reliable machine alone at 1/64.

    Overheads, in seconds: ``checkpoint_s`` the time of one full checkpoint (the checkpointing
    scheme; default 240 s: with the Young/Daly interval the overhead is ``sqrt(2 delta / MTTF)``,
    18% - TierML Sec 4.7's measured MF checkpoint overhead at BidOnDemand - at an MTTF of 4 h);
    ``flush_s`` the end-of-life flush of the ActivePSs (Sec 3.3; Fig 11's blip is 13% of one
    iteration: 30 s is generous); ``rollback_s`` the fleet work lost by a rollback to the
    BackupPS state (Sec 3.3, revocation without usable warning); ``startup_s`` (300 s, Sec 3.3)
    and ``warning_s`` (AWS, 120 s); ``switch_ratio`` the price/bid ratio at which
    TierML looks for a class with a higher MTTF (Sec 3.4's "approach the user bid price").
    """

    machines: int = 64
    reliable: int = 1
    startup_s: float = 300.0
    warning_s: float = td.AWS_WARNING_S
    checkpoint_s: float = 240.0
    flush_s: float = 30.0
    rollback_s: float = 600.0
    switch_ratio: float = 0.8
    stage2_ratio: float = 2.0
    stage3_ratio: float = 15.0
    stage1_efficiency: float = 1.0
    stage2_efficiency: float = 0.9
    stage3_efficiency: float = 1.0

    def __post_init__(self):
        for name in ("machines", "reliable"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise TypeError(f"{name} must be an int, got {type(v).__name__}")
        if self.machines < 2 or not 1 <= self.reliable < self.machines:
            raise ValueError(
                f"machines must be >= 2 and reliable in [1, machines), got machines={self.machines}, "
                f"reliable={self.reliable}"
            )
        for f in dataclasses.fields(self):
            if f.name in ("machines", "reliable"):
                continue
            v = getattr(self, f.name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{f.name} must be a finite number >= 0, got {v!r}")
        if self.checkpoint_s <= 0:
            raise ValueError(f"checkpoint_s must be > 0, got {self.checkpoint_s}")
        for name in ("stage1_efficiency", "stage2_efficiency", "stage3_efficiency"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0 (a stage's machines' speed is multiplied by it), got "
                                 f"{getattr(self, name)!r}")
        if not 0 < self.switch_ratio <= 1:
            raise ValueError(f"switch_ratio must be in (0, 1], got {self.switch_ratio}")
        if self.fleet_rate(self.machines - self.reliable, self.reliable) <= 0 or self.fleet_rate(0, self.reliable) <= 0:
            raise ValueError("stage efficiencies must make every fleet's rate > 0")

    @classmethod
    def from_step_time(cls, step_time, *, machines: int = 64, reliable: int = 1, **kw) -> "ProgressModel":
        """The stage rates from an iteration-time model ``step_time(M)`` (seconds per iteration
        of the same global work over ``M`` workers, e.g. :func:`scarjax.cluster.steptime.step_time_pollux`
        with throughput parameters fitted to real runs, Eq 3.5-3.8): the fleet of ``n`` workers
        works at ``t(machines) / t(n)`` of the full fleet, which sets ``stage3_efficiency`` (the
        ``machines - reliable`` transient workers) and ``stage1_efficiency`` (the reliable machines
        alone). Other constants as given (``**kw``)."""
        if not callable(step_time):
            raise TypeError(f"step_time must be callable (workers -> seconds), got {type(step_time).__name__}")
        base = cls(machines=machines, reliable=reliable, **kw)
        t = {m: float(step_time(m)) for m in (machines, machines - reliable, reliable)}
        if not all(math.isfinite(v) and v > 0 for v in t.values()):
            raise ValueError(f"step_time must give finite seconds > 0, got {t}")
        n = machines - reliable
        e3 = (t[machines] / t[n]) / (n / machines)
        e1 = (t[machines] / t[reliable]) / (reliable / machines)
        if base.stage(n, reliable) != 3:
            raise ValueError("from_step_time calibrates stage 3: machines - reliable must exceed stage3_ratio * reliable")
        return dataclasses.replace(base, stage3_efficiency=e3, stage1_efficiency=e1)

    @property
    def calibration(self) -> dict[str, str]:
        """Where each constant comes from: all are stated measurements (TierML, AWS, Marathe et
        al. via TierML); none is fitted to scarjax training runs in this sweep."""
        return {
            "stage3_efficiency": "TierML Sec 3.2 / Fig 9: stage 3 (no workers on reliable machines) 'near ideal' scaling",
            "stage2_efficiency": "TierML Sec 3.2: ActivePS configuration below ideal at high ratios (stated 0.9; unused at 63:1)",
            "stage1_efficiency": "TierML Sec 3.2: ParamServs on reliable machines, ideal at small ratios (1.0; used for the reliable machine alone)",
            "stage3_ratio": "TierML Sec 3.2: no workers on reliable machines beyond 15:1",
            "startup_s": "TierML Sec 3.3: average spot request queuing delay 5 minutes (Marathe et al.)",
            "warning_s": "AWS two-minute termination notice (TierML Sec 2.3)",
            "checkpoint_s": "stated: 4 min, Young/Daly overhead sqrt(2 delta / MTTF) = 18% (TierML Sec 4.7, MF) at MTTF 4 h",
            "flush_s": "TierML Fig 11: a 13% blip of one iteration at the end-of-life flush (30 s stated, generous)",
            "rollback_s": "stated: BackupPS lag lost without a usable warning (not reached with AWS's 2-minute notice)",
            "switch_ratio": "stated: look for a higher-MTTF class when the price passes 80% of the bid (TierML Sec 3.4)",
        }

    def stage(self, transient: int, reliable: int) -> int:
        """TierML's stage (Sec 3.2) for a transient:reliable ratio."""
        ratio = transient / reliable
        return 1 if ratio <= self.stage2_ratio else (2 if ratio <= self.stage3_ratio else 3)

    def fleet_rate(self, transient: int, reliable: int) -> float:
        """Work rate of ``transient`` + ``reliable`` machines, as a fraction of ``machines``
        on-demand machines (stage-dependent, see the class docstring)."""
        st = self.stage(transient, reliable)
        if st == 3:
            return self.stage3_efficiency * transient / self.machines
        eff = self.stage1_efficiency if st == 1 else self.stage2_efficiency
        return eff * (transient + reliable) / self.machines

    @property
    def tierml_rates(self) -> tuple[float, float]:
        """``(full, reliable_only)``: TierML's rate with its ``N - R`` transient (or fallback
        on-demand) machines, and with the reliable machines alone."""
        return (
            self.fleet_rate(self.machines - self.reliable, self.reliable),
            self.fleet_rate(0, self.reliable),
        )


class _Minutes(NamedTuple):
    """A :class:`ProgressModel`'s durations in the sweep's grid unit (minutes)."""

    startup: float
    warning: float
    checkpoint: float
    flush: float
    rollback: float


def _minutes(model: ProgressModel) -> _Minutes:
    return _Minutes(model.startup_s / 60.0, model.warning_s / 60.0, model.checkpoint_s / 60.0, model.flush_s / 60.0,
                    model.rollback_s / 60.0)


def default_model() -> ProgressModel:
    """The model of Fig 12 (64 machines as Cluster-A, 1 reliable as Fig 1)."""
    return ProgressModel()


def aggressive_step(on_demand: float) -> float:
    """Rounding step of the aggressive bid (Sec 4.7: a dime for Cluster-A's c4.2xlarge, $0.419/h
    on demand; a nickel for Cluster-B's c4.xlarge, $0.209/h): a dime from $0.30/h up."""
    va.check_real("on_demand", on_demand, lo=0.0, lo_open=True, scalar=True)
    return 0.1 if on_demand >= 0.3 else 0.05


# --------------------------------------------------------------------------------------
# Markets on a minute grid


@dataclasses.dataclass(frozen=True, eq=False)
class TypeMarkets:
    """One instance type's classes (its zones' spot markets) on a common minute grid: the
    sweep's acceleration structure, derived from the one market representation
    (:meth:`from_markets`: price-driven :class:`~scarjax.cluster.market.Market` objects, one
    per class; :func:`build_markets` builds those from the 2015 history), or from a grid of
    per-minute prices (:func:`markets_from_grid`, for controlled markets in tests).

    Attributes:
      instance_type, zones: the type and the classes' zones (class ``c`` = ``zones[c]``).
      on_demand: the published on-demand price (USD/h).
      prices: ``float64[C, Mx]`` price of each class at each minute (float32-representable
        values; minutes ``>= minutes`` hold the last price: the pad).
      minutes: ``M``, the length of the real history; ``Mx = M + pad``.
      maxtab, mintab: ``float32[C, L, Mx]`` sparse tables, ``tab[c, k, i] = max/min(prices[c,
        i : i + 2**k])``.
      hour_sums: ``float64[C, Mx + 60]``, ``sum_{j >= 0} prices[c, i + 60 j]`` (zero past the
        grid): hourly bills as differences.
      start: the grid's minute 0 (``datetime64[s]``), source: ``"embedded"`` or the root.
    """

    instance_type: str
    zones: tuple[str, ...]
    on_demand: float
    prices: np.ndarray
    minutes: int
    maxtab: np.ndarray
    mintab: np.ndarray
    hour_sums: np.ndarray
    start: Any
    source: str

    @property
    def padded(self) -> int:
        return int(self.prices.shape[1])

    @classmethod
    def from_markets(
        cls,
        markets: Any,
        *,
        start_s: float = 0.0,
        pad_min: int = 60 * 64,
        instance_type: str | None = None,
        zones: tuple[str, ...] | None = None,
        start: Any = None,
        source: str = "markets",
    ) -> "TypeMarkets":
        """The sweep's tables from one :class:`~scarjax.cluster.market.Market` per class.

        ``markets``: price-driven markets (:meth:`~scarjax.cluster.market.Market.from_prices`,
        :meth:`~scarjax.cluster.market.Market.from_spot_prices`) of one machine type (equal
        on-demand prices) on one clock, under the rules the sweep implements (AWS 2015: hourly
        billing, the two-minute notice; the markets' own bids are not used: the sweep bids
        BidOnDemand or BidAggressive). Minute ``m`` of the grid is the market time ``start_s +
        60 m``; its price is the one in effect then (the float64 prices the markets were given);
        the grid ends at the earliest series end, plus ``pad_min`` minutes holding each class's
        last price. ``zones`` name the classes (default: the machines' names); ``start``: the
        grid's minute 0 as a ``datetime64`` (a label).

        Raises ``ValueError`` naming ``markets`` for a market that is not price-driven, is
        billed per second or has another notice, for unequal on-demand prices, or for a grid
        start before a series' first price.
        """
        if isinstance(markets, mk.Market) or not isinstance(markets, (list, tuple)) or not markets:
            raise TypeError("markets must be a non-empty list or tuple of scarjax.cluster.market.Market (one per class)")
        va.check_real("start_s", start_s, lo=0.0, scalar=True)
        for i, m in enumerate(markets):
            if not isinstance(m, mk.Market):
                raise TypeError(f"markets[{i}] must be a scarjax.cluster.market.Market, got {type(m).__name__}")
            if not isinstance(m.process, mk.PriceDriven):
                raise ValueError(f"markets[{i}] must be price-driven (Market.from_prices / from_spot_prices), got "
                                 f"process {type(m.process).__name__}")
            if m.billing != "hourly" or float(m.process.warning_s) != td.AWS_WARNING_S:
                raise ValueError(f"markets[{i}]: the sweep implements AWS's 2015 rules (hourly billing, "
                                 f"{td.AWS_WARNING_S:g} s notice), got billing {m.billing!r}, notice "
                                 f"{float(m.process.warning_s):g} s")
        od = float(markets[0].machine.on_demand_price)
        if any(float(m.machine.on_demand_price) != od for m in markets):
            raise ValueError("markets must be classes of one machine type: their on-demand prices differ")
        end = min(m.end_s for m in markets)
        M = int(end - float(start_s)) // 60 if math.isfinite(end) else 0
        if M < 2:
            raise ValueError(f"markets share less than 2 minutes of prices after start_s={start_s}")
        grid = float(start_s) + 60.0 * np.arange(M, dtype=np.float64)
        rows = []
        for i, m in enumerate(markets):
            times, prices = m.process.series.host_arrays()
            idx = np.searchsorted(times, grid, side="right") - 1
            if idx[0] < 0:
                raise ValueError(f"markets[{i}]: the grid starts at {start_s} s, before the series' first price "
                                 f"({times[0]} s)")
            rows.append(prices[idx])
        zones = tuple(m.machine.name for m in markets) if zones is None else tuple(zones)
        return markets_from_grid(np.stack(rows), od, instance_type=instance_type or "markets", zones=zones,
                                 pad_min=pad_min, start=start, source=source)

    def thresholds(self, bid: str) -> float:
        """A price is usable under ``bid`` iff it is below this (the charge < on-demand)."""
        _check_bid(bid)
        if bid == "on_demand":
            return _r32(self.on_demand)
        step = aggressive_step(self.on_demand)
        top = np.float32((math.ceil(self.on_demand / step - 1e-9) - 1) * step)
        return float(np.nextafter(top, np.float32(np.inf)))  # p < thr  <=>  p <= top


def _check_bid(bid):
    if bid not in BIDS:
        raise ValueError(f"bid must be one of {BIDS}, got {bid!r}")


def _check_policy(policy):
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")


def build_markets(
    instance_type: str,
    spot: Mapping[tuple[str, str], Any] | None = None,
    *,
    zones: tuple[str, ...] = td.SPOT_ZONES,
    pad_min: int = 60 * 64,
    source: str = "embedded",
) -> TypeMarkets:
    """The classes of ``instance_type`` (its ``zones``' markets) on a common minute grid.

    ``spot``: ``{(zone, type): SpotPrices}`` (:func:`scarjax.data.transient.load_spot_market`;
    default: the embedded April 2015 extract) or ``{(zone, type): Market}`` (price-driven
    :class:`~scarjax.cluster.market.Market` objects on one clock). Parser records become
    markets (:meth:`~scarjax.cluster.market.Market.from_spot_prices`, AWS's 2015 rules, times
    since the latest series start) and the tables come from them
    (:meth:`TypeMarkets.from_markets`): the grid covers the window all the zones' series
    describe (the latest start to the earliest end), plus ``pad_min`` minutes holding each
    class's last price."""
    if instance_type not in td.SPOT_INSTANCE_TYPES:
        raise ValueError(f"instance_type must be one of {td.SPOT_INSTANCE_TYPES}, got {instance_type!r}")
    if isinstance(pad_min, bool) or not isinstance(pad_min, (int, np.integer)) or pad_min < 0:
        raise ValueError(f"pad_min must be an int >= 0, got {pad_min!r}")
    if spot is None:
        spot = {(z, instance_type): td.load_spot_prices(instance_type, z) for z in zones}
    series = []
    for z in zones:
        if (z, instance_type) not in spot:
            raise ValueError(f"spot has no market ({z!r}, {instance_type!r})")
        series.append(spot[(z, instance_type)])
    if all(isinstance(x, mk.Market) for x in series):
        return TypeMarkets.from_markets(list(series), pad_min=pad_min, instance_type=instance_type, zones=zones,
                                        source=source)
    start = max(s.start for s in series)
    end = min(s.end for s in series)
    if int((end - start).astype("timedelta64[s]").astype(np.int64)) // 60 < 2:
        raise ValueError(f"the {instance_type} markets share less than 2 minutes of history")
    markets = [mk.Market.from_spot_prices(x, bid=x.on_demand, provider="aws", origin=start) for x in series]
    return TypeMarkets.from_markets(markets, pad_min=pad_min, instance_type=instance_type, zones=zones, start=start,
                                    source=source)


def markets_from_grid(
    prices: Any,
    on_demand: float,
    *,
    instance_type: str = "synthetic",
    zones: tuple[str, ...] | None = None,
    pad_min: int = 60 * 64,
    start: Any = None,
    source: str = "grid",
) -> TypeMarkets:
    """A :class:`TypeMarkets` from a ``[C, M]`` array of per-minute prices (USD/h): the classes'
    markets on the grid (tests and controlled markets; :func:`build_markets` for the data)."""
    if isinstance(prices, (str, bytes)) or np.asarray(prices).dtype.kind not in "iuf":
        raise TypeError(f"prices must be a [classes, minutes] array of numbers, got {type(prices).__name__}")
    P = np.asarray(prices, np.float64)
    if P.ndim != 2 or P.shape[0] < 1 or P.shape[1] < 2:
        raise ValueError(f"prices must be [classes >= 1, minutes >= 2], got shape {P.shape}")
    if not np.all(np.isfinite(P)) or P.min() < 0:
        raise ValueError("prices must be finite and >= 0")
    if not (isinstance(on_demand, (int, float)) and math.isfinite(on_demand) and on_demand > 0):
        raise ValueError(f"on_demand must be a finite price > 0, got {on_demand!r}")
    if isinstance(pad_min, bool) or not isinstance(pad_min, (int, np.integer)) or pad_min < 0:
        raise ValueError(f"pad_min must be an int >= 0, got {pad_min!r}")
    zones = tuple(f"class{c}" for c in range(P.shape[0])) if zones is None else tuple(zones)
    if len(zones) != P.shape[0]:
        raise ValueError(f"zones must name the {P.shape[0]} classes, got {len(zones)}")
    M = P.shape[1]
    P = np.concatenate([P, np.repeat(P[:, -1:], pad_min, axis=1)], axis=1)
    P = P.astype(np.float32).astype(np.float64)  # the tables hold float32: the same values everywhere
    Mx = P.shape[1]
    L = max(1, int(math.ceil(math.log2(Mx))) + 1)
    maxtab = np.empty((P.shape[0], L, Mx), np.float32)
    mintab = np.empty((P.shape[0], L, Mx), np.float32)
    maxtab[:, 0] = P
    mintab[:, 0] = P
    for k in range(1, L):
        half = 1 << (k - 1)
        maxtab[:, k] = maxtab[:, k - 1]
        mintab[:, k] = mintab[:, k - 1]
        if half < Mx:
            np.maximum(maxtab[:, k, :-half], maxtab[:, k - 1, half:], out=maxtab[:, k, :-half])
            np.minimum(mintab[:, k, :-half], mintab[:, k - 1, half:], out=mintab[:, k, :-half])
    hs = np.zeros((P.shape[0], Mx + 60), np.float64)
    hs[:, :Mx] = P
    for i in range(Mx - 1, -1, -60):  # suffix sums with stride 60, 60 lanes at a time
        lo = max(i - 59, 0)
        hs[:, lo : i + 1] += hs[:, lo + 60 : i + 61]
    return TypeMarkets(instance_type, zones, float(on_demand), P, M, maxtab, mintab, hs, start, source)


def _lift(tab: np.ndarray, c, pos, thr, above: bool):
    """Binary lifting over a sparse table ``tab[c, k, i]`` (max or min of ``prices[c, i : i +
    2**k]``): skip every block that holds no minute on the wanted side of ``thr``."""
    C, L, Mx = tab.shape
    flat = tab.reshape(-1)
    pos = np.minimum(np.asarray(pos, np.int64), Mx)
    thr = np.asarray(thr, np.float64)  # not a weak Python float: compare in float64
    base = np.asarray(c, np.int64) * (L * Mx)
    for k in reversed(range(L)):
        step = 1 << k
        v = flat.take(base + k * Mx + np.minimum(pos, Mx - 1))
        ok = (pos + step <= Mx) & ((v <= thr) if above else (v >= thr))
        pos = pos + ok * step
    return pos


def _first_above(tm: TypeMarkets, c, pos, thr):
    """First minute ``m >= pos`` with ``prices[c, m] > thr`` (``Mx`` if none)."""
    return _lift(tm.maxtab, c, pos, thr, True)


def _first_below(tm: TypeMarkets, c, pos, thr):
    """First minute ``m >= pos`` with ``prices[c, m] < thr`` (``Mx`` if none)."""
    return _lift(tm.mintab, c, pos, thr, False)


def _r32(x):
    """``x`` rounded to float32 (as float64): prices, bids and thresholds are compared at the
    precision of the grid's float32 prices, so a price equal to a bid is never above it."""
    if np.ndim(x):
        return np.asarray(x, np.float64).astype(np.float32).astype(np.float64)
    return float(np.float32(x))


def _bid_of(price, bid: str, on_demand: float):
    if bid == "on_demand":
        return np.full_like(np.asarray(price, np.float64), _r32(on_demand)) if np.ndim(price) else _r32(on_demand)
    step = aggressive_step(on_demand)
    p = np.asarray(price, np.float64)
    return _r32(np.maximum(np.ceil(p / step - 1e-6) * step, p))


def mttf_s(tm: TypeMarkets, bid: str) -> np.ndarray:
    """``float64[C]``: each class's mean spot lifetime in seconds (notice + warning) over the
    minutes of the real history at which the class is usable under ``bid``, censored at the
    history's end: the MTTF of the checkpointing scheme's Young/Daly interval (Flint's
    MTTF-based frequency). A class never usable gets the whole history."""
    return 60.0 * _mttf_min(tm, bid)


def _mttf_min(tm: TypeMarkets, bid: str) -> np.ndarray:
    """:func:`mttf_s` in grid minutes (the sweep's internal unit)."""
    _check_bid(bid)
    M = tm.minutes
    thr = tm.thresholds(bid)
    warn = td.AWS_WARNING_S / 60.0
    out = np.empty(tm.prices.shape[0])
    m = np.arange(M, dtype=np.int64)
    for c in range(tm.prices.shape[0]):
        p = tm.prices[c, :M]
        ok = p < thr
        if not ok.any():
            out[c] = float(M)
            continue
        b = _bid_of(p[ok], bid, tm.on_demand)
        cc = np.full(int(ok.sum()), c)
        n = _first_above(tm, cc, m[ok] + 1, b)
        out[c] = float(np.mean(np.minimum(n, M) - m[ok] + warn))
    return out


# --------------------------------------------------------------------------------------
# The plain Python event loop (the specification)


def _scan_above(P, c, pos, thr):
    row = P[c]
    if pos >= row.shape[0]:
        return row.shape[0]
    hit = np.flatnonzero(row[pos:] > thr)
    return int(pos + hit[0]) if hit.size else row.shape[0]


def _scan_below(P, c, pos, thr):
    row = P[c]
    if pos >= row.shape[0]:
        return row.shape[0]
    hit = np.flatnonzero(row[pos:] < thr)
    return int(pos + hit[0]) if hit.size else row.shape[0]


def _check_in_grid(a, Mx):
    if a >= Mx - 1:
        raise RuntimeError(
            f"a scenario reached minute {int(a)} of the {Mx}-minute padded grid: give a longer pad_min"
        )


def _ceil(x: float) -> float:
    return float(math.ceil(x))


def run_reference(
    tm: TypeMarkets,
    start: int,
    home: int,
    work_s: float,
    bid: str,
    policy: str,
    model: ProgressModel,
    *,
    switching: bool = True,
    mttf_s: np.ndarray | None = None,
    max_segments: int = 100_000,
) -> dict:
    """One scenario as a plain Python event loop: the job of ``work_s`` seconds of the full
    on-demand fleet's work started at grid minute ``start`` in class ``home`` (see the module
    docstring for the rules); ``mttf_s``: the classes' MTTF in seconds for checkpointing
    (default :func:`mttf_s`).

    Returns ``{"cost": relative to N on-demand machines, "runtime": end / (startup +
    work_s), "minutes": the end in grid minutes, "dollars", "revocations", "switches",
    "overran"}``."""
    work_h = _work_hours(work_s, scalar=True)
    return _run_reference(tm, start, home, work_h, bid, policy, model, switching=switching,
                          mttf=None if mttf_s is None else _mttf_arg(mttf_s), max_segments=max_segments)


def _work_hours(work_s, scalar=False):
    if scalar:
        va.check_real("work_s", work_s, lo=0.0, lo_open=True, scalar=True)
        return float(work_s) / 3600.0
    w = np.asarray(work_s, np.float64)
    if w.size and not (np.all(np.isfinite(w)) and w.min() > 0):
        raise ValueError("work_s must be finite and > 0 (seconds)")
    return w / 3600.0


def _mttf_arg(mttf_s):
    va.check_real("mttf_s", mttf_s, lo=0.0, lo_open=True)
    return np.asarray(mttf_s, np.float64) / 60.0


def _run_reference(tm, start, home, work_h, bid, policy, model, *, switching=True, mttf=None, max_segments=100_000):
    """:func:`run_reference` in the grid's units (work in hours, MTTF in minutes)."""
    _check_bid(bid)
    _check_policy(policy)
    P = tm.prices
    C = P.shape[0]
    od = tm.on_demand
    thr = tm.thresholds(bid)
    N, Rn = model.machines, model.reliable
    mins = _minutes(model)
    S, wn = mins.startup, mins.warning
    s = int(start)
    if not 0 <= s < tm.minutes:
        raise ValueError(f"start must be a minute in [0, {tm.minutes}), got {start}")
    if not 0 <= home < C:
        raise ValueError(f"home must be a class in [0, {C}), got {home}")
    step = aggressive_step(od)

    def bid_at(c, m):
        if bid == "on_demand":
            return _r32(od)
        p = float(P[c, m])
        return _r32(max(math.ceil(p / step - 1e-6) * step, p))

    def spot_bill(c, i0, hours, b):
        if bid == "aggressive":
            return b * hours
        total = 0.0
        for k in range(int(hours)):
            total += float(P[c, i0 + 60 * k])
        return total

    R = work_h * 60.0
    t = 0.0
    dollars = 0.0
    nrev = nsw = 0
    first = True
    end = None
    if policy == "checkpoint":
        if mttf is None:
            mttf = _mttf_min(tm, bid)
        delta = mins.checkpoint
        for _ in range(max_segments):
            a = s + int(t)
            _check_in_grid(a, P.shape[1])
            pick = _NONE
            if first and float(P[home, a]) < thr:
                pick = home
            else:
                best = math.inf
                for c in range(C):
                    p = float(P[c, a])
                    if p < thr:
                        ch = p if bid == "on_demand" else bid_at(c, a)
                        if ch < best:
                            best, pick = ch, c
            first = False
            up = t + S
            if pick == _NONE:  # on demand to the end, no checkpoints
                dollars += N * od * _ceil(R / 60.0)
                end = up + R
                break
            b = bid_at(pick, a)
            n = _scan_above(P, pick, a + 1, b)
            rev = (n - s) + wn if n < P.shape[1] else math.inf
            if rev <= up:
                nrev += 1
                t = rev
                continue
            tau = math.sqrt(2.0 * delta * float(mttf[pick]))
            fin = up + R + delta * (_ceil(R / tau) - 1.0)
            if fin <= rev:
                dollars += N * spot_bill(pick, s + int(up), _ceil((fin - up) / 60.0), b)
                end = fin
                break
            e = rev - up
            R -= math.floor(e / (tau + delta)) * tau
            dollars += N * spot_bill(pick, s + int(up), math.floor(e / 60.0), b)
            nrev += 1
            t = rev
        else:
            raise RuntimeError(f"no end after {max_segments} segments")
    else:
        full, rel = model.tierml_rates
        # the previous fleet works at rho0 until u0, then the reliable machines alone; at the
        # start nothing runs until the reliable machines are up (S)
        rho0, u0 = 0.0, S

        def startup(R, t, e):
            """Progress over [t, e) while new machines start: (R left, finish time or None)."""
            cut = max(min(e, u0), t)
            if rho0 > 0 and R <= rho0 * (cut - t):
                return R, t + R / rho0
            R -= rho0 * (cut - t)
            if R <= rel * (e - cut):
                return R, cut + R / rel
            return R - rel * (e - cut), None

        for _ in range(max_segments):
            a = s + int(t)
            _check_in_grid(a, P.shape[1])
            heads = []
            for c in range(C):
                p = float(P[c, a])
                bc = bid_at(c, a)
                heads.append((bc - p) / bc if p < thr else -math.inf)
            pick = _NONE
            if first and heads[home] > -math.inf:
                pick = home
            elif switching:
                bh = -math.inf
                for c in range(C):
                    if heads[c] > bh:
                        bh, pick = heads[c], c
            elif heads[home] > -math.inf:
                pick = home
            first = False
            up = t + S
            if pick == _NONE:  # fall back to on-demand until a class is usable again
                R, fin0 = startup(R, t, up)
                if fin0 is not None:
                    end = fin0
                    break
                v = P.shape[1]
                for c in range(C) if switching else (home,):
                    v = min(v, _scan_below(P, c, s + int(up), thr))
                v = (v - s) if v < P.shape[1] else math.inf
                fin = up + R / full
                if fin <= v:
                    dollars += (N - Rn) * od * _ceil((fin - up) / 60.0)
                    end = fin
                    break
                dollars += (N - Rn) * od * _ceil((v + S - up) / 60.0)
                R -= full * (v - up)
                t, rho0, u0 = v, full, v + S
                continue
            b = bid_at(pick, a)
            n = _scan_above(P, pick, a + 1, b)
            rev = (n - s) + wn if n < P.shape[1] else math.inf
            R, fin0 = startup(R, t, min(up, rev))
            if fin0 is not None:  # done before the new machines run: the request is cancelled
                end = fin0
                break
            if rev <= up:  # revoked before running: costs nothing, the previous fleet goes on
                nrev += 1
                t = rev
                continue
            fin = up + R / full
            g = math.inf
            if switching:
                gm = _scan_above(P, pick, s + int(up), _r32(model.switch_ratio * b))
                g = (gm - s) if gm < P.shape[1] else math.inf
            n_rel = (n - s) if n < P.shape[1] else math.inf
            if g < n_rel and g < fin:
                gi = s + int(g)
                bh, best = -math.inf, _NONE
                for c in range(C):
                    p = float(P[c, gi])
                    if p < thr:
                        bc = bid_at(c, gi)
                        h = (bc - p) / bc
                        if h > bh:
                            bh, best = h, c
                if best != _NONE and best != pick:  # proactive switch to a higher-MTTF class
                    R -= full * (g - up)
                    k = _ceil((g + S - up) / 60.0)
                    hours = math.floor((rev - up) / 60.0) if rev < up + 60.0 * k else k
                    dollars += (N - Rn) * spot_bill(pick, s + int(up), hours, b)
                    nsw += 1
                    t, rho0, u0 = g, full, rev
                    continue
            if mins.flush <= wn:  # end-of-life flush during the warning
                done = fin <= rev - mins.flush
                lost_R = R - full * max(rev - mins.flush - up, 0.0)
            else:  # effective failure: roll back to the BackupPS state
                done = fin <= rev
                lost_R = R - full * max(rev - up - mins.rollback, 0.0)
            if done:
                dollars += (N - Rn) * spot_bill(pick, s + int(up), _ceil((fin - up) / 60.0), b)
                end = fin
                break
            R = lost_R
            dollars += (N - Rn) * spot_bill(pick, s + int(up), math.floor((rev - up) / 60.0), b)
            nrev += 1
            t, rho0, u0 = rev, 0.0, rev
        else:
            raise RuntimeError(f"no end after {max_segments} segments")
        dollars += Rn * od * _ceil((end - S) / 60.0)
    base = N * od * work_h
    return {
        "cost": dollars / base,
        "runtime": end / (S + 60.0 * work_h),
        "minutes": end,
        "dollars": dollars,
        "revocations": nrev,
        "switches": nsw,
        "overran": bool(s + end > tm.minutes),
    }


# --------------------------------------------------------------------------------------
# The vectorised sweep


def _bill_vec(tm, c, i0, hours, b, bid):
    """Spot bills of machines started at minute ``i0`` for ``hours`` whole hours (per machine)."""
    if bid == "aggressive":
        return b * hours
    h = hours.astype(np.int64)
    return tm.hour_sums[c, i0] - tm.hour_sums[c, i0 + 60 * h]


def run_vectorised(
    tm: TypeMarkets,
    starts: Any,
    homes: Any,
    work_s: Any,
    bid: str,
    policy: str,
    model: ProgressModel,
    *,
    switching: bool = True,
    mttf_s: np.ndarray | None = None,
    max_segments: int = 100_000,
) -> dict:
    """Many scenarios of one instance type, bid and policy at once (arrays ``starts``,
    ``homes``, ``work_s`` broadcast together; work in seconds, MTTF in seconds): the same
    semantics as :func:`run_reference`, each result an array (``cost``, ``runtime``,
    ``minutes``, ``dollars``, ``revocations``, ``switches``, ``overran``)."""
    return _run_vectorised(tm, starts, homes, _work_hours(work_s), bid, policy, model, switching=switching,
                           mttf=None if mttf_s is None else _mttf_arg(mttf_s), max_segments=max_segments)


def _run_vectorised(tm, starts, homes, work_h, bid, policy, model, *, switching=True, mttf=None,
                    max_segments=100_000):
    """:func:`run_vectorised` in the grid's units (work in hours, MTTF in minutes)."""
    _check_bid(bid)
    _check_policy(policy)
    s, home, W = np.broadcast_arrays(
        np.asarray(starts, np.int64), np.asarray(homes, np.int64), np.asarray(work_h, np.float64)
    )
    s, home, W = s.ravel().copy(), home.ravel().copy(), W.ravel().copy()
    n = s.size
    P = tm.prices
    C, Mx = P.shape
    if n and (s.min() < 0 or s.max() >= tm.minutes):
        raise ValueError(f"starts must be minutes in [0, {tm.minutes})")
    if n and (home.min() < 0 or home.max() >= C):
        raise ValueError(f"homes must be classes in [0, {C})")
    if n and not (np.all(np.isfinite(W)) and W.min() > 0):
        raise ValueError("work_h must be finite and > 0")
    od = tm.on_demand
    thr = tm.thresholds(bid)
    step = aggressive_step(od)
    N, Rn = model.machines, model.reliable
    mins = _minutes(model)
    S, wn = mins.startup, mins.warning
    full, rel = model.tierml_rates
    if policy == "checkpoint" and mttf is None:
        mttf = _mttf_min(tm, bid)
    delta = mins.checkpoint

    def bids_of(p):
        return _bid_of(p, bid, od) if bid == "aggressive" else np.full_like(p, _r32(od))

    R = W * 60.0
    t = np.zeros(n)
    dollars = np.zeros(n)
    nrev = np.zeros(n, np.int64)
    nsw = np.zeros(n, np.int64)
    end = np.full(n, np.nan)
    first = np.ones(n, bool)
    rho0 = np.zeros(n)
    u0 = np.full(n, S)
    act = np.arange(n)
    inf = math.inf
    for _ in range(max_segments):
        if act.size == 0:
            break
        sa, ha = s[act], home[act]
        ta, Ra, fa = t[act], R[act], first[act]
        a = sa + ta.astype(np.int64)
        _check_in_grid(a.max(), Mx)
        P3 = P[:, a].T
        usable = P3 < thr
        rows = np.arange(act.size)
        home_ok = usable[rows, ha]
        up = ta + S
        fin_now = np.full(act.size, np.nan)  # completion time in this segment (nan: not yet)
        add = np.zeros(act.size)
        next_t = np.full(act.size, np.nan)
        if policy == "checkpoint":
            charge = np.where(usable, P3 if bid == "on_demand" else bids_of(P3), inf)
            cheapest = np.argmin(charge, axis=1)
            pick = np.where(fa & home_ok, ha, np.where(usable.any(axis=1), cheapest, _NONE))
            first[act] = False
            ond = pick == _NONE
            # on demand to the end
            add = np.where(ond, N * od * np.ceil(Ra / 60.0), add)
            fin_now = np.where(ond, up + Ra, fin_now)
            sp = np.flatnonzero(~ond)
            if sp.size:
                c = pick[sp]
                ai = a[sp]
                b = bids_of(P[c, ai])
                nn = _first_above(tm, c, ai + 1, b)
                rev = np.where(nn < Mx, (nn - sa[sp]) + wn, inf)
                upi = up[sp]
                early = rev <= upi
                tau = np.sqrt(2.0 * delta * mttf[c])
                Rs = Ra[sp]
                fin = upi + Rs + delta * (np.ceil(Rs / tau) - 1.0)
                done = ~early & (fin <= rev)
                revd = ~early & ~done
                i0 = sa[sp] + upi.astype(np.int64)
                hours = np.where(done, np.ceil((fin - upi) / 60.0), np.floor((rev - upi) / 60.0))
                hours = np.where(early, 0.0, hours)
                bill = np.where(early, 0.0, N * _bill_vec(tm, c, i0, np.where(np.isfinite(hours), hours, 0.0), b, bid))
                add[sp] = bill
                fin_now[sp] = np.where(done, fin, np.nan)
                e = rev - upi
                Rnew = np.where(revd, Rs - np.floor(e / (tau + delta)) * tau, Rs)
                R[act[sp]] = Rnew
                next_t[sp] = np.where(done, np.nan, rev)
                nrev[act[sp]] += (early | revd).astype(np.int64)
        else:
            bids3 = bids_of(P3)
            heads = np.where(usable, (bids3 - P3) / bids3, -inf)
            best = np.argmax(heads, axis=1)
            if switching:
                other = np.where(usable.any(axis=1), best, _NONE)
            else:
                other = np.where(home_ok, ha, _NONE)
            pick = np.where(fa & home_ok, ha, other)
            first[act] = False
            r0, uu = rho0[act], u0[act]

            def startup(Rv, tv, ev, r0v, uv):
                cut = np.maximum(np.minimum(ev, uv), tv)
                p1 = r0v * (cut - tv)
                ca = (r0v > 0) & (Rv <= p1)
                with np.errstate(divide="ignore", invalid="ignore"):
                    fa_ = tv + Rv / r0v
                R1 = Rv - p1
                p2 = rel * (ev - cut)
                cb = ~ca & (R1 <= p2)
                fb = cut + R1 / rel
                fin0 = np.where(ca, fa_, np.where(cb, fb, np.nan))
                return np.where(ca | cb, Rv, R1 - p2), fin0

            fb_ = np.flatnonzero(pick == _NONE)
            if fb_.size:
                upi = up[fb_]
                R1, fin0 = startup(Ra[fb_], ta[fb_], upi, r0[fb_], uu[fb_])
                d0 = ~np.isnan(fin0)
                v = np.full(fb_.size, Mx, np.int64)
                ipos = sa[fb_] + upi.astype(np.int64)
                for c in range(C) if switching else (None,):
                    cc = np.full(fb_.size, c) if c is not None else ha[fb_]
                    v = np.minimum(v, _first_below(tm, cc, ipos, thr))
                v = np.where(v < Mx, (v - sa[fb_]).astype(np.float64), inf)
                fin = upi + R1 / full
                done = ~d0 & (fin <= v)
                cont = ~d0 & ~done
                with np.errstate(invalid="ignore"):
                    add[fb_] = np.where(
                        done,
                        (N - Rn) * od * np.ceil((fin - upi) / 60.0),
                        np.where(cont, (N - Rn) * od * np.ceil((v + S - upi) / 60.0), 0.0),
                    )
                fin_now[fb_] = np.where(d0, fin0, np.where(done, fin, np.nan))
                R[act[fb_]] = np.where(cont, R1 - full * (v - upi), R1)
                next_t[fb_] = np.where(cont, v, np.nan)
                rho0[act[fb_]] = np.where(cont, full, r0[fb_])
                u0[act[fb_]] = np.where(cont, v + S, uu[fb_])
            sp = np.flatnonzero(pick != _NONE)
            if sp.size:
                c = pick[sp]
                ai, si, upi, ti = a[sp], sa[sp], up[sp], ta[sp]
                b = bids_of(P[c, ai])
                nn = _first_above(tm, c, ai + 1, b)
                rev = np.where(nn < Mx, (nn - si) + wn, inf)
                R1, fin0 = startup(Ra[sp], ti, np.minimum(upi, rev), r0[sp], uu[sp])
                d0 = ~np.isnan(fin0)
                early = ~d0 & (rev <= upi)
                live = ~d0 & ~early
                fin = upi + R1 / full
                if switching:
                    gm = _first_above(tm, c, si + upi.astype(np.int64), _r32(model.switch_ratio * b))
                    g = np.where(gm < Mx, (gm - si).astype(np.float64), inf)
                else:
                    g = np.full(sp.size, inf)
                n_rel = np.where(nn < Mx, (nn - si).astype(np.float64), inf)
                trig = live & (g < n_rel) & (g < fin)
                sw = np.zeros(sp.size, bool)
                if trig.any():
                    tg = np.flatnonzero(trig)
                    gi = si[tg] + g[tg].astype(np.int64)
                    Pg = P[:, gi].T
                    ug = Pg < thr
                    bg = bids_of(Pg)
                    hg = np.where(ug, (bg - Pg) / bg, -inf)
                    bestg = np.where(ug.any(axis=1), np.argmax(hg, axis=1), _NONE)
                    sw[tg] = (bestg != _NONE) & (bestg != c[tg])
                if mins.flush <= wn:
                    done = live & ~sw & (fin <= rev - mins.flush)
                    with np.errstate(invalid="ignore"):
                        lost_R = R1 - full * np.maximum(rev - mins.flush - upi, 0.0)
                else:
                    done = live & ~sw & (fin <= rev)
                    with np.errstate(invalid="ignore"):
                        lost_R = R1 - full * np.maximum(rev - upi - mins.rollback, 0.0)
                revd = live & ~sw & ~done
                with np.errstate(invalid="ignore"):
                    k = np.ceil((g + S - upi) / 60.0)
                    hsw = np.where(rev < upi + 60.0 * k, np.floor((rev - upi) / 60.0), k)
                    hours = np.where(
                        sw, hsw, np.where(done, np.ceil((fin - upi) / 60.0), np.floor((rev - upi) / 60.0))
                    )
                billed = sw | done | revd
                hours = np.where(billed, hours, 0.0)
                i0 = si + upi.astype(np.int64)
                add[sp] = np.where(billed, (N - Rn) * _bill_vec(tm, c, i0, hours, b, bid), 0.0)
                fin_now[sp] = np.where(d0, fin0, np.where(done, fin, np.nan))
                with np.errstate(invalid="ignore"):
                    R[act[sp]] = np.where(sw, R1 - full * (g - upi), np.where(revd, lost_R, R1))
                next_t[sp] = np.where(sw, g, np.where(early | revd, rev, np.nan))
                rho0[act[sp]] = np.where(sw, full, np.where(revd, 0.0, r0[sp]))
                u0[act[sp]] = np.where(sw | revd, rev, uu[sp])
                nrev[act[sp]] += (early | revd).astype(np.int64)
                nsw[act[sp]] += sw.astype(np.int64)
        dollars[act] += add
        fin_mask = ~np.isnan(fin_now)
        end[act[fin_mask]] = fin_now[fin_mask]
        t[act[~fin_mask]] = next_t[~fin_mask]
        act = act[~fin_mask]
    else:
        raise RuntimeError(f"{act.size} scenarios did not end after {max_segments} segments")
    if policy == "tierml":
        dollars += Rn * od * np.ceil((end - S) / 60.0)
    base = N * od * W
    return {
        "cost": dollars / base,
        "runtime": end / (S + 60.0 * W),
        "minutes": end,
        "dollars": dollars,
        "revocations": nrev,
        "switches": nsw,
        "overran": s + end > tm.minutes,
    }


# --------------------------------------------------------------------------------------
# The Fig 12 sweep


#: Histogram bins of relative cost and runtime (width 0.001 up to 5; the last bin holds the rest)
#: kept per cell so that pooled 95th percentiles are exact to 0.001.
HIST_EDGES = np.append(np.arange(0.0, 5.0 + 1e-9, 0.001), np.inf)


def _stats(x: np.ndarray) -> dict:
    x = np.asarray(x, np.float64)
    return {
        "mean": float(x.mean()),
        "std": float(x.std()),
        "p95": float(np.percentile(x, 95)),
        "hist": np.histogram(x, HIST_EDGES)[0],
    }


def _hist_quantile(hist: np.ndarray, q: float) -> float:
    """The ``q`` quantile from a :data:`HIST_EDGES` histogram (the upper edge of its bin)."""
    cum = np.cumsum(hist)
    i = int(np.searchsorted(cum, q * cum[-1]))
    return float(HIST_EDGES[min(i + 1, len(HIST_EDGES) - 2)])


def sweep(
    spot: Mapping[tuple[str, str], Any] | None = None,
    *,
    stride: int = 1,
    work_s: tuple[float, ...] = (7200.0, 28800.0, 72000.0),
    instance_types: tuple[str, ...] = td.SPOT_INSTANCE_TYPES,
    zones: tuple[str, ...] = td.SPOT_ZONES,
    bids: tuple[str, ...] = BIDS,
    model: ProgressModel | None = None,
    source: str = "embedded",
    keep: bool = False,
) -> dict:
    """The Fig 12 sweep: every ``stride``-th start minute ``s`` with ``s + 60 W`` within the
    history x zones (home classes) x instance types x job lengths ``W`` x bids x policies
    (``"tierml"``, ``"checkpoint"`` and the ablation ``"tierml_noswitch"``), vectorised
    (:func:`run_vectorised`).

    ``work_s``: the job lengths in seconds of the full on-demand fleet's work (the paper's 2, 8
    and 20 compute-hours by default). ``spot``: see :func:`build_markets` (parser records or
    price-driven :class:`~scarjax.cluster.market.Market` objects).

    Returns ``{"cells": [{zone, instance_type, work_s, bid, policy, n, cost: {mean, std, p95},
    runtime: {...}, revocations, switches, overran}], "scenarios", "minutes": {type: M},
    "mttf_s": {type: {bid: [per zone]}}}`` (``keep``: also the per-scenario arrays under
    ``"raw"``, keyed like the cells)."""
    model = default_model() if model is None else model
    if isinstance(stride, bool) or not isinstance(stride, (int, np.integer)) or stride < 1:
        raise ValueError(f"stride must be an int >= 1, got {stride!r}")
    if isinstance(work_s, (str, bytes)) or not isinstance(work_s, (tuple, list)) or not work_s:
        raise ValueError(f"work_s must be a non-empty tuple of seconds, got {work_s!r}")
    for w in work_s:
        if isinstance(w, bool) or not (isinstance(w, (int, float)) and math.isfinite(w) and w > 0):
            raise ValueError(f"work_s must be finite and > 0 (seconds), got {w!r}")
    work_hours = tuple(float(w) / 3600.0 for w in work_s)
    pad = int(60 * (3 * max(work_hours) + 4))
    cells, raw, minutes, mttfs = [], {}, {}, {}
    total = 0
    for it in instance_types:
        tm = build_markets(it, spot, zones=zones, pad_min=pad, source=source)
        minutes[it] = tm.minutes
        mttfs[it] = {b: _mttf_min(tm, b) for b in bids}
        starts, homes, works = [], [], []
        for w in work_hours:
            last = tm.minutes - int(math.ceil(60 * w))
            if last <= 0:
                raise ValueError(f"the {it} history ({60 * tm.minutes} s) is shorter than a {3600 * w:g} s job")
            st = np.arange(0, last, stride, dtype=np.int64)
            S_, H_ = np.meshgrid(st, np.arange(len(zones)), indexing="ij")
            starts.append(S_.ravel())
            homes.append(H_.ravel())
            works.append(np.full(S_.size, float(w)))
        S_, H_, W_ = np.concatenate(starts), np.concatenate(homes), np.concatenate(works)
        for b in bids:
            mt = mttfs[it][b]
            for pol, polname, swi in (
                ("tierml", "tierml", True),
                ("tierml", "tierml_noswitch", False),
                ("checkpoint", "checkpoint", True),
            ):
                out = _run_vectorised(tm, S_, H_, W_, b, pol, model, switching=swi, mttf=mt)
                total += S_.size
                for w, ws in zip(work_hours, work_s):
                    for zi, z in enumerate(zones):
                        sel = (H_ == zi) & (W_ == float(w))
                        cell = {
                            "zone": z,
                            "instance_type": it,
                            "work_s": float(ws),
                            "bid": b,
                            "policy": polname,
                            "n": int(sel.sum()),
                            "cost": _stats(out["cost"][sel]),
                            "runtime": _stats(out["runtime"][sel]),
                            "revocations": float(out["revocations"][sel].mean()),
                            "switches": float(out["switches"][sel].mean()),
                            "overran": int(out["overran"][sel].sum()),
                        }
                        cells.append(cell)
                        if keep:
                            raw[(z, it, float(ws), b, polname)] = {k: v[sel] for k, v in out.items()}
    mttf_s_ = {it: {b: (60.0 * m).tolist() for b, m in v.items()} for it, v in mttfs.items()}
    res = {"cells": cells, "scenarios": total, "minutes": minutes, "mttf_s": mttf_s_, "stride": stride}
    if keep:
        res["raw"] = raw
    return res


def summarise(cells: list[dict], *, by: tuple[str, ...] = ("zone", "work_s", "bid", "policy")) -> list[dict]:
    """Pool cells over the keys not in ``by`` (weighted by ``n``): mean cost and runtime, the
    pooled standard deviation (``sqrt`` of the pooled second moment minus the mean squared) and
    the pooled 95th percentile (from the cells' histograms, to 0.001)."""
    groups: dict[tuple, list[dict]] = {}
    for c in cells:
        groups.setdefault(tuple(c[k] for k in by), []).append(c)
    out = []
    for key, cs in groups.items():
        n = np.array([c["n"] for c in cs], np.float64)
        row = dict(zip(by, key))
        row["n"] = int(n.sum())
        for what in ("cost", "runtime"):
            m = np.array([c[what]["mean"] for c in cs])
            sd = np.array([c[what]["std"] for c in cs])
            mean = float((n * m).sum() / n.sum())
            second = float((n * (sd**2 + m**2)).sum() / n.sum())
            hist = np.sum([c[what]["hist"] for c in cs], axis=0)
            row[what] = {
                "mean": mean,
                "std": math.sqrt(max(second - mean**2, 0.0)),
                "p95": _hist_quantile(hist, 0.95),
            }
        row["revocations"] = float((n * np.array([c["revocations"] for c in cs])).sum() / n.sum())
        row["switches"] = float((n * np.array([c["switches"] for c in cs])).sum() / n.sum())
        row["overran"] = int(sum(c["overran"] for c in cs))
        out.append(row)
    return out
