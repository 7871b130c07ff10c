"""The bills of one simulated run: one :class:`Ledger` entry per machine (id, tier, price,
start, stop, revoked by the provider or not), times on the market's clock in seconds.

Fixed prices are billed by :func:`hourly_bill`, which applies the one billing rule of
:mod:`scarjax.cluster.market` in float64 (:func:`~scarjax.cluster.market.billed_hours`: whole
hours from the start, a duration within ``tol_s = 1`` s of a whole number of hours counts as
that number, the last partial hour charged when the user stops the machine and free when the
provider revokes it; :func:`~scarjax.cluster.market.charged_seconds`: per second);
:class:`~scarjax.cluster.market.PriceSeries` prices are billed by
:func:`~scarjax.cluster.market.bill`, which applies the same rule in JAX.

``Ledger.cost(t)`` is the bill *had the job ended at t*: machines stopped by ``t`` at their
charge, running ones as if the user stopped them at ``t``, later ones 0. So
``ClusterRun.dollars`` may drop where the provider revokes a machine (its begun partial hour
becomes free) and is a step function under hourly billing.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.cluster import market as mk

__all__ = ["Ledger", "hourly_bill", "bill_runs", "stopped_ledgers", "charge_pending"]

TIERS = mk.TIERS
BILLINGS = mk.BILLINGS
# The JAX billing rule compiled once per argument shape (op by op, every new shape or price
# series would compile each operation anew); the ledger checks its entries itself.
_series_bill = jax.jit(mk.bill, static_argnames=("scheme",))
_VIEWS: dict[int, tuple[mk.PriceSeries, mk.PriceSeries]] = {}  # id(series) -> (series, its billing view)


def _billing_view(series: mk.PriceSeries) -> mk.PriceSeries:
    """``series`` padded to a power of two (at least 64) change points and renamed (a name is
    static), so that one compiled bill serves every series of a size class (markets' series
    have many lengths): the padded changes come at ``+inf`` seconds with the last price and the
    last cumulative integral, so :meth:`~scarjax.cluster.market.PriceSeries.index` (and with it
    ``price_at``, ``integral`` and every bill) is unchanged at every finite time; ``maxtab`` is
    rebuilt over the padded prices. Memoised per series object."""
    hit = _VIEWS.get(id(series))
    if hit is not None and hit[0] is series:
        return hit[1]
    t = np.asarray(series.times_s, np.float32)
    p = np.asarray(series.prices, np.float32)
    T = p.size
    pad = max(64, 1 << (T - 1).bit_length()) - T
    t = np.concatenate([t, np.full(pad, np.inf, np.float32)])
    p = np.concatenate([p, np.full(pad, p[-1], np.float32)])
    tab = [p]
    for k in range(1, max(1, int(np.ceil(np.log2(p.size))) + 1)):  # as market.price_series builds it
        prev, half = tab[-1], 1 << (k - 1)
        tab.append(np.maximum(prev, np.concatenate([prev[half:], np.full(half, -np.inf, np.float32)])[: p.size]))
    edge = lambda a: np.concatenate([np.asarray(a, np.float32), np.full(pad, np.asarray(a)[-1], np.float32)])  # noqa: E731
    view = dataclasses.replace(series, times_s=jnp.asarray(t), prices=jnp.asarray(p), maxtab=jnp.asarray(np.stack(tab)),
                               cum_hi=jnp.asarray(edge(series.cum_hi)), cum_lo=jnp.asarray(edge(series.cum_lo)),
                               name="billing view", host=None)  # a name is static: one for every view
    if len(_VIEWS) >= 256:
        _VIEWS.pop(next(iter(_VIEWS)))
    _VIEWS[id(series)] = (series, view)
    return view


def _bill_series(start: float, ends: np.ndarray, series: mk.PriceSeries, revoked: bool, scheme: str) -> np.ndarray:
    """:func:`~scarjax.cluster.market.bill` of one machine started at ``start`` and ended at
    each of ``ends`` (``>= start``), float64: the ends padded with ``start`` to a power of two
    (at least 64) and the series to its billing view (:func:`_billing_view`), so that one
    compilation serves every series and run of a size class; the same values as an unpadded
    call (the rule is element-wise)."""
    ends = np.asarray(ends, np.float64).ravel()
    pad = np.full(max(64, 1 << max(ends.size - 1, 0).bit_length()), start)
    pad[: ends.size] = ends
    out = _series_bill(start, pad, _billing_view(series), revoked, scheme=scheme)
    return np.asarray(out, np.float64)[: ends.size]

# --------------------------------------------------------------------------------------
# Bills


def hourly_bill(start: Any, end: Any, price: Any, revoked: Any = False, scheme: str = "hourly",
                tol_s: float = 1.0) -> np.ndarray:
    """USD for machines used from ``start`` to ``end`` seconds at fixed ``price`` (USD/h),
    float64, vectorised: the one billing rule of :mod:`scarjax.cluster.market`
    (:func:`~scarjax.cluster.market.billed_hours` under ``"hourly"``,
    :func:`~scarjax.cluster.market.charged_seconds` under ``"per_second"``), unchecked (the
    :class:`Ledger` checks its entries). The checked public form is
    :func:`scarjax.cluster.market.bill_np`."""
    if type(start) is float and type(end) is float and type(price) is float and type(revoked) is bool:
        # one machine (the ledger's charges, many per run): the same rule without broadcasting
        dur = max(end - start, 0.0)
        if scheme == "per_second":
            return price * mk.charged_seconds(dur) / 3600.0
        return price * mk.billed_hours(dur, revoked, tol_s=tol_s)
    start, end, price, revoked = np.broadcast_arrays(
        np.asarray(start, np.float64), np.asarray(end, np.float64), np.asarray(price, np.float64),
        np.asarray(revoked, bool))
    dur = np.maximum(end - start, 0.0)
    if scheme == "per_second":
        return price * mk.charged_seconds(dur) / 3600.0
    return price * mk.billed_hours(dur, revoked, tol_s=tol_s)


def _free_seconds(start, end, revoked, scheme, tol_s=1.0) -> np.ndarray:
    dur = np.maximum(np.asarray(end, np.float64) - np.asarray(start, np.float64), 0.0)
    if scheme != "hourly":
        return np.zeros_like(dur)
    return mk.free_seconds(dur, revoked, tol_s=tol_s)


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

    Args:
      deferred: ``True``: :meth:`stop` leaves a fixed-price machine's charge to be computed
        with the others' (returns ``None``): every reader of the charges (:attr:`entries`, the
        costs) computes the pending ones first, and :func:`bill_runs` those of many ledgers in
        one vectorised :func:`hourly_bill` call (the same values as one by one).
    """

    def __init__(self, *, deferred: bool = False):
        self._entries: list[_Entry] = []
        self._open: dict[Any, _Entry] = {}
        self._memo: dict = {}
        self._deferred = bool(deferred)
        self._uncharged: list[_Entry] = []  # stopped, charge not yet computed (deferred)

    @property
    def entries(self) -> tuple:
        """Every machine's entry, in start order (read them; ``stop`` ends one): ``machine_id,
        tier, price, billing, start, stop`` (``None``: running), ``revoked``, ``charged``."""
        charge_pending([self])
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
        charge_pending([self])
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

    def start_checked(self, machine_id: Any, t: float, *, price: Any, tier: str, billing: str) -> None:
        """:meth:`start` of a machine whose tier, price and billing rule another ledger's
        :meth:`start` checked (e.g. a run resumed from another run's state re-starting its
        machines at its own times): only ``t`` (finite) and the machine id are checked."""
        if not (isinstance(t, float) and math.isfinite(t)):
            va.check_real("t", t, scalar=True)
        if machine_id in self._open:
            raise ValueError(f"machine_id {machine_id!r} is already running (stop it first)")
        e = _Entry(machine_id, tier, price, billing, float(t))
        self._entries.append(e)
        self._open[machine_id] = e

    def stop(self, machine_id: Any, t: float, *, revoked: bool = False) -> float | None:
        """Stop billing ``machine_id`` at ``t``; ``revoked=True``: the provider took it.
        Returns the machine's charge (``None`` on a deferred ledger for a fixed price: charged
        with the others by :func:`charge_pending`)."""
        if machine_id not in self._open:
            raise ValueError(f"machine_id {machine_id!r} is not running")
        e = self._open[machine_id]
        va.check_real("t", t, scalar=True)
        if t < e.start:
            raise ValueError(f"t={t} is before machine {machine_id!r} started at {e.start}")
        e.stop, e.revoked = float(t), bool(revoked)
        if self._deferred and not isinstance(e.price, mk.PriceSeries):
            self._uncharged.append(e)  # charged with the others (charge_pending)
        else:
            e.charged = self._charge_one(e, e.stop, e.revoked)
        del self._open[machine_id]
        return e.charged

    @classmethod
    def of_stopped(cls, machine_ids: Any, tiers: Any, prices: Any, start: Any, stop: Any, revoked: Any, *,
                   billing: str = "hourly") -> "Ledger":
        """A ledger of machines all started and stopped, in the given (start) order: the entries
        :meth:`start` then :meth:`stop` make one by one (machine ``i``: ``machine_ids[i]`` of
        ``tiers[i]`` at the fixed ``prices[i]`` USD/h, billed under ``billing`` from ``start[i]``
        to ``stop[i]``, ended by the provider where ``revoked[i]``), the charges computed by
        :func:`hourly_bill` over the arrays in one pass (the same values as :meth:`stop`'s). A
        machine id may recur (a reused id: a new entry after the previous stop).
        :func:`stopped_ledgers` builds many at once."""
        ids = list(machine_ids)
        return stopped_ledgers(1, np.zeros(len(ids), np.int64), ids, tiers, prices, start, stop, revoked,
                               billing=billing)[0]

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
                out[i] = float(_bill_series(e.start, [t1], e.price, r, e.billing)[0])
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
            if isinstance(e.price, mk.PriceSeries):  # padded to a power of two: one compilation per size class
                part = _bill_series(e.start, np.maximum(times.ravel(), e.start), e.price, False, e.billing)
                part = part.reshape(times.shape)
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
# Many ledgers at once


def stopped_ledgers(n: int, ledger: Any, machine_ids: Any, tiers: Any, prices: Any, start: Any, stop: Any,
                    revoked: Any, *, billing: str = "hourly") -> list[Ledger]:
    """``n`` ledgers of machines all started and stopped (:meth:`Ledger.of_stopped` of each),
    built from flat arrays in one pass: machine ``j`` (``machine_ids[j]`` of ``tiers[j]`` at the
    fixed ``prices[j]`` USD/h from ``start[j]`` to ``stop[j]``, ``revoked[j]``: ended by the
    provider) is an entry of ledger ``ledger[j]``, in the order given; every charge is
    :func:`hourly_bill` of the arrays at once (the same values as :meth:`Ledger.stop`'s). For
    many market draws' fleets planned over arrays (:mod:`scarjax.cluster.draws`)."""
    n = va.check_int("n", n, lo=0)
    va.check_choice("billing", billing, BILLINGS)
    ids = list(machine_ids)
    tiers = list(tiers)
    m = len(ids)
    row = np.asarray(ledger).reshape(-1)
    price = np.asarray(prices, np.float64).reshape(-1)
    t1 = np.asarray(start, np.float64).reshape(-1)
    t2 = np.asarray(stop, np.float64).reshape(-1)
    rev = np.asarray(revoked, bool).reshape(-1)
    for name, a in (("ledger", row), ("tiers", tiers), ("prices", price), ("start", t1), ("stop", t2),
                    ("revoked", rev)):
        if len(a) != m:
            raise ValueError(f"{name} must have one item per machine ({m}), got {len(a)}")
    if m and (not np.issubdtype(row.dtype, np.integer) or row.min() < 0 or row.max() >= n):
        raise ValueError(f"ledger must hold integer ledger numbers in [0, {n}), got {row!r}")
    for tier in set(tiers):
        va.check_choice("tiers", tier, TIERS)
    if not (np.all(np.isfinite(price)) and np.all(price >= 0.0)):
        raise ValueError("prices must be finite and >= 0 (USD/h)")
    if not (np.all(np.isfinite(t1)) and np.all(np.isfinite(t2))):
        raise ValueError("start and stop must be finite seconds")
    if np.any(t2 < t1):
        i = int(np.flatnonzero(t2 < t1)[0])
        raise ValueError(f"stop[{i}]={t2[i]} is before machine {ids[i]!r} started at {t1[i]}")
    charged = hourly_bill(t1, t2, price, rev, billing).tolist()
    out = [Ledger() for _ in range(n)]
    for r, e in zip(row.tolist(), map(_Entry, ids, tiers, price.tolist(), [billing] * m, t1.tolist(), t2.tolist(),
                                      rev.tolist(), charged)):
        out[r]._entries.append(e)
    return out


def charge_pending(ledgers: Any) -> None:
    """Compute the charges that deferred ledgers (``Ledger(deferred=True)``) left pending, of
    all ``ledgers`` at once: :func:`hourly_bill` over the arrays of their fixed-price stopped
    machines, one call per billing rule (the same values as :meth:`Ledger.stop` computes one
    by one: the one rule, elementwise)."""
    todo = [e for led in ledgers for e in led._uncharged]
    for led in ledgers:
        led._uncharged = []
    for scheme in sorted({e.billing for e in todo}):
        es = [e for e in todo if e.billing == scheme]
        charged = hourly_bill(np.array([e.start for e in es], np.float64), np.array([e.stop for e in es], np.float64),
                              np.array([e.price for e in es], np.float64), np.array([e.revoked for e in es], bool),
                              scheme).tolist()
        for e, c in zip(es, charged):
            e.charged = c


def _dense(rows, width, fill, dtype):
    out = np.full((len(rows), max(width, 1)), fill, dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def bill_runs(ledgers: Any, times: Any, ends: Any) -> list[tuple[np.ndarray, dict, float]]:
    """For every ledger ``i``: ``(ledgers[i].cost_curve(times[i]), ledgers[i].by_tier(ends[i]),
    ledgers[i].free_seconds(ends[i]))``, float64 bit for bit, all fixed-price ledgers in one
    vectorised NumPy pass (the runs' bills of :func:`scarjax.cluster.clock.settle`, one call
    for many market draws).

    The charges are :func:`hourly_bill` - the one billing rule of :mod:`~scarjax.cluster.market`
    - applied to arrays ``[ledgers, points]`` at once, one billing group (:meth:`Ledger.cost_curve`'s
    machines that bill alike) at a time in each ledger's own group order, and the sums are
    accumulated in that same order (a padded group adds an exact ``0.0``), so every value equals
    the per-ledger method's. A ledger with a :class:`~scarjax.cluster.market.PriceSeries` entry
    is billed by its own methods (the JAX rule, per ledger)."""
    ledgers = list(ledgers)
    times = [np.asarray(t, np.float64) for t in times]
    ends = [float(e) for e in ends]
    if not len(ledgers) == len(times) == len(ends):
        raise ValueError(f"ledgers, times and ends must have one item per run, got {len(ledgers)}, {len(times)}, "
                         f"{len(ends)}")
    for i, led in enumerate(ledgers):
        if not isinstance(led, Ledger):
            raise TypeError(f"ledgers[{i}] must be a Ledger, got {type(led).__name__}")
    out: list = [None] * len(ledgers)
    charge_pending(ledgers)  # deferred ledgers' charges, all in one call
    fixed = []
    for i, led in enumerate(ledgers):
        if any(isinstance(e.price, mk.PriceSeries) for e in led._entries):
            out[i] = (led.cost_curve(times[i]), led.by_tier(ends[i]), led.free_seconds(ends[i]))
        else:
            fixed.append(i)
    if not fixed:
        return out
    big = np.finfo(np.float64).max  # a padded group starts after every time: it adds exact zeros
    groups = [ledgers[i]._groups() for i in fixed]
    G = max(len(g) for g in groups)
    col = lambda f, fill, dt: _dense([[f(e, n) for e, n in g] for g in groups], G, fill, dt)  # noqa: E731
    start = col(lambda e, n: e.start, big, np.float64)
    stop = col(lambda e, n: np.inf if e.stop is None else e.stop, np.inf, np.float64)
    charged = col(lambda e, n: 0.0 if e.charged is None else e.charged, 0.0, np.float64)
    price = col(lambda e, n: e.price, 0.0, np.float64)
    count = col(lambda e, n: n, 0, np.int64)
    tier = col(lambda e, n: TIERS.index(e.tier), 0, np.int64)
    per_second = col(lambda e, n: e.billing == "per_second", False, bool)
    P = max(times[i].size for i in fixed)
    T = _dense([times[i].ravel() for i in fixed], P, -np.inf, np.float64)  # padded points: before every start
    t_end = np.array([ends[i] for i in fixed], np.float64)

    def rule(s, t1, p, ps):  # the rule (user-ended), hourly or per second per group
        hourly = hourly_bill(s, t1, p, False, "hourly")
        return np.where(ps, hourly_bill(s, t1, p, False, "per_second"), hourly) if ps.any() else hourly

    total = np.zeros_like(T)
    acc = np.zeros((len(fixed), len(TIERS)))
    for g in range(G):
        s, e, c, n = start[:, g:g + 1], stop[:, g:g + 1], charged[:, g:g + 1], count[:, g:g + 1]
        after = T > s
        done = after & (T >= e)
        mid = after & ~done
        total += n * np.where(done, c, 0.0)
        total += n * np.where(mid, rule(s, np.maximum(T, s), price[:, g:g + 1], per_second[:, g:g + 1]), 0.0)
        # by_tier at the end: 0 from a start at or after it, the charge if stopped by it, else billed to it
        s1, e1, c1, n1 = s[:, 0], e[:, 0], c[:, 0], n[:, 0]
        at = np.where(s1 >= t_end, 0.0, np.where(e1 <= t_end, c1, rule(s1, np.maximum(t_end, s1), price[:, g],
                                                                            per_second[:, g])))
        for k in range(len(TIERS)):
            acc[:, k] += np.where(tier[:, g] == k, n1 * at, 0.0)
    # free seconds: every entry (not group) stopped by the end, in entry order
    ents = [ledgers[i]._entries for i in fixed]
    E = max(len(x) for x in ents)
    ecol = lambda f, fill, dt: _dense([[f(e) for e in x] for x in ents], E, fill, dt)  # noqa: E731
    es = ecol(lambda e: e.start, 0.0, np.float64)
    ee = ecol(lambda e: np.inf if e.stop is None else e.stop, np.inf, np.float64)
    er = ecol(lambda e: e.revoked, False, bool)
    eh = ecol(lambda e: e.billing == "hourly", False, bool)
    fs = np.where(eh, mk.free_seconds(np.maximum(np.where(np.isfinite(ee), ee, es) - es, 0.0), er), 0.0)
    free = np.zeros(len(fixed))
    for j in range(E):
        free += np.where(ee[:, j] <= t_end, fs[:, j], 0.0)
    for r, i in enumerate(fixed):
        curve = total[r, : times[i].size].reshape(times[i].shape)
        out[i] = (curve, {k: float(acc[r, j]) for j, k in enumerate(TIERS)}, float(free[r]))
    return out
