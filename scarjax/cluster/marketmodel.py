"""The planner's view of a market: :class:`MarketModel`, what
:func:`scarjax.cluster.planner.predict` needs of prices, revocations, availability and billing,
per machine type and bid, as tables.

Every model is computed from a market as it is: :meth:`MarketModel.from_market` takes the
simulator's own :class:`scarjax.cluster.market.Market` (the one market every policy runs on:
parametric, empirical, GCE preemptible, a price history with a bid, a replayed node trace or
availability series, including periods in which nothing is obtainable); :meth:`MarketModel.
parametric`, :meth:`MarketModel.from_lifetimes` and :meth:`MarketModel.from_prices` are the
shortcuts for the package's own data. All tables are public attributes and every helper that
builds them is public (:func:`lifetime_tables`, :func:`availability`, :func:`count_series`).

**What is measured** (the planner's assumptions A1, A4, A7 in :mod:`scarjax.cluster.planner`):

* *Lifetimes* of a machine bought at a random time of the window: their CDF ``F``, the renewal
  function ``m(t)`` of a slot whose machines are replaced as they go, ``∫(1 − F)`` and their
  mean (the MTTF the Young/Daly interval uses). On a replayed trace a machine bought at ``t`` is
  one of the nodes present then and lives until that node's removal (the simulator's
  :meth:`~scarjax.cluster.market.Market.acquire`): the *residual* stays of the nodes present at
  evenly spaced times of the window, a stay still open at the window's end censored there
  (Kaplan–Meier), the MTTF the exposure over the removals (renewal over the trace, as
  :meth:`scarjax.cluster.market.Replay.mttf_s`).
* *Availability* for every number ``n`` of machines a plan needs (:class:`Availability`): the
  share of the window in which at least ``n`` can be obtained, the mean wait until they can be
  from a uniformly random start, the chance that a revoked machine can be replaced at once and
  the mean wait until it can, and the share of the ``n`` machines obtainable at a random time
  (what an on-demand fallback leaves on spot).
* *Prices*: on-demand, the mean spot price paid; the billing rule and the start-up delay of the
  market.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import numpy as np

from scarjax import validate as va
from scarjax.cluster import market as mk
from scarjax.cluster.lifetimes import gce_hourly_price

__all__ = ["MarketModel", "Availability", "lifetime_tables", "availability", "count_series"]

_H = 3600.0
_AVAIL_FIELDS = ("avail_n", "wait_start_s", "regrant", "wait_revoked_s", "start_share", "held_share")
#: Residual lifetimes of a replayed trace are sampled at this many evenly spaced times.
RESIDUAL_SAMPLES = 512


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


def lifetime_tables(lifetimes: Any, weights: Any, grid: np.ndarray, *, censored: Any = None
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """``(cdf, renewal, survival integral, mttf)`` on the uniform ``grid`` (from 0) of a
    lifetime sample, all in the sample's unit (the planner's tables use hours): the empirical
    CDF ``F`` (``inf`` = never revoked), the renewal function ``m(t) = E[N(t)]`` of a slot whose
    successive machines live independently by ``F`` (A1 of :mod:`scarjax.cluster.planner`),
    ``∫0^t (1 − F)`` and the mean lifetime (with never-revoked or censored lives: the total
    exposure over the revocations, the estimator of a constant hazard). ``censored``: ``bool``
    per life, a life observed to at least its value but not to its end (the Kaplan–Meier
    estimate of ``F`` then); ``weights``: per-life weights (default equal)."""
    if censored is not None:
        return _censored_tables(lifetimes, censored, grid)
    grid_s = np.asarray(grid, np.float64)
    life = np.asarray(lifetimes, np.float64)
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


def _censored_tables(lifetimes, censored, grid):
    """:func:`lifetime_tables` of a right-censored sample: Kaplan–Meier ``F`` on the grid, the
    renewal function and survival integral of it, MTTF = exposure / revocations."""
    grid_s = np.asarray(grid, np.float64)
    life = np.asarray(lifetimes, np.float64)
    cen = np.asarray(censored, bool) | ~np.isfinite(life)
    if life.shape != cen.shape or life.ndim != 1 or life.size == 0:
        raise ValueError("lifetimes and censored must be 1-D of one length >= 1")
    if np.any(np.isnan(life)) or np.any(life < 0):
        raise ValueError("lifetimes must be >= 0 and not NaN")
    order = np.lexsort((cen, life))  # at a tie, events before censorings (KM convention)
    life, cen = life[order], cen[order]
    at_risk = life.size - np.arange(life.size)
    surv_steps = np.cumprod(np.where(cen, 1.0, 1.0 - 1.0 / at_risk))
    idx = np.searchsorted(life, grid_s, side="right")
    surv = np.where(idx > 0, surv_steps[np.maximum(idx - 1, 0)], 1.0)
    cdf = 1.0 - surv
    ren = _renewal(grid_s, cdf)
    sint = np.concatenate([[0.0], np.cumsum(0.5 * (surv[1:] + surv[:-1]) * np.diff(grid_s))])
    events = int(np.sum(~cen))
    exposure = float(np.sum(np.where(np.isfinite(life), life, 0.0)))
    mttf = exposure / events if events else math.inf
    return cdf, ren, sint, mttf


def count_series(process: Any, window: tuple[float, float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(times_s, counts)``: how many machines a replayed trace (a
    :class:`~scarjax.cluster.market.Replay`) offers, as a step function: ``counts[i]`` from
    ``times_s[i]`` to the next time (the last holds on); the first time is the window's start
    (default: the first node's arrival), the times at which a node joins or leaves within it
    follow."""
    if not isinstance(process, mk.Replay):
        raise TypeError(f"process must be a scarjax.cluster.market.Replay, got {type(process).__name__}")
    add = np.asarray(process.add_s, np.float64)
    rem = np.asarray(process.remove_s, np.float64)
    lo, hi = _replay_window(process, window)
    ev = np.concatenate([add, rem[np.isfinite(rem)]])
    ts = np.unique(np.concatenate([[lo], ev[(ev > lo) & (ev < hi)]]))
    counts = np.sum((add[None, :] <= ts[:, None]) & (ts[:, None] < rem[None, :]), axis=1)
    return ts, counts.astype(np.float64)


def _replay_window(process, window):
    if window is None:
        lo, hi = float(np.min(np.asarray(process.add_s, np.float64))), float(process.horizon())
    else:
        lo, hi = (float(w) for w in window)
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo and lo >= 0):
        raise ValueError(f"window must be (start_s, end_s) with 0 <= start_s < end_s finite, got {window!r}")
    return lo, hi


class Availability(NamedTuple):
    """Availability of ``n = 1 … N`` machines over a window (``[N]`` arrays, index ``n − 1``):

    ``avail``: share of the time at least ``n`` can be obtained; ``wait_start_s``: the mean wait
    from a uniformly random start until at least ``n`` can be (``inf``: never within the window;
    a gap still open at the window's end counts its observed part, stated); ``regrant``: of the
    revocations a fleet of ``n`` suffers (a fall in the count, each removed node one of the
    fleet's with probability ``removed / present``), the share after which ``n`` can still be
    obtained; ``wait_revoked_s``: the mean wait until they can after such a revocation (0 when
    regranted); ``start_share``: the time-mean of ``min(count, n) / n`` (what a fleet that falls
    back to on-demand machines gets on spot); ``held_share``: the same over the times fewer than
    ``n`` can be obtained (what a waiting fleet holds and pays for)."""

    avail: np.ndarray
    wait_start_s: np.ndarray
    regrant: np.ndarray
    wait_revoked_s: np.ndarray
    start_share: np.ndarray
    held_share: np.ndarray


def availability(times_s: Any, counts: Any, n_max: int, *, window: tuple[float, float] | None = None) -> Availability:
    """The :class:`Availability` of ``1 … n_max`` machines of a step function of obtainable
    machines (``counts[i]`` from ``times_s[i]``, the last holding on, none before the first;
    ``inf``: no limit) over ``window`` (default from the first time to the last). Exact on the
    step function: no sampling."""
    t = np.asarray(times_s, np.float64)
    c = np.asarray(counts, np.float64)
    if t.ndim != 1 or t.size == 0 or c.shape != t.shape:
        raise ValueError(f"times_s and counts must be 1-D of one length >= 1, got {t.shape} and {c.shape}")
    if np.any(~np.isfinite(t)) or np.any(np.diff(t) <= 0):
        raise ValueError("times_s must be finite and increase strictly")
    if np.any(np.isnan(c)) or np.any(c < 0):
        raise ValueError("counts must be >= 0 and not NaN")
    n_max = va.check_int("n_max", n_max, lo=1)
    lo, hi = (float(t[0]), float(t[-1])) if window is None else (float(window[0]), float(window[1]))
    if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
        raise ValueError(f"window must be (start_s, end_s) with start_s < end_s finite, got {window!r}")
    edges = np.unique(np.concatenate([[lo], t[(t > lo) & (t < hi)], [hi]]))
    i = np.searchsorted(t, edges[:-1], side="right") - 1
    seg = np.where(i >= 0, c[np.maximum(i, 0)], 0.0)
    ln = np.diff(edges)
    W = hi - lo
    prev = np.concatenate([[seg[0]], seg[:-1]])
    out = {k: np.zeros(n_max) for k in Availability._fields}
    for n in range(1, n_max + 1):
        ok = seg >= n
        out["avail"][n - 1] = ln[ok].sum() / W
        share = np.minimum(seg, n) / n
        out["start_share"][n - 1] = float(np.sum(ln * share) / W)
        out["held_share"][n - 1] = float(np.sum((ln * share)[~ok]) / ln[~ok].sum()) if (~ok).any() else 0.0
        if not ok.any():
            out["wait_start_s"][n - 1] = math.inf
            out["wait_revoked_s"][n - 1] = math.inf
            out["regrant"][n - 1] = 0.0
            continue
        # gaps: maximal runs of segments below n; each start within one waits for its rest
        gap_id = np.cumsum(ok)  # segments of one gap share the count of ok segments before them
        below = ~ok
        gap_len = np.bincount(gap_id[below], weights=ln[below], minlength=gap_id.max() + 2)
        out["wait_start_s"][n - 1] = float(np.sum(gap_len ** 2) / 2.0 / W)
        # revocations of a fleet of n: falls from >= n; weight: the chance a removed node is the fleet's
        fall = (prev >= n) & (seg < prev) & (np.arange(seg.size) > 0)
        w = np.where(fall, (prev - seg) / np.maximum(prev, 1.0), 0.0)
        w = np.where(np.isfinite(w), w, 1.0)
        if w.sum() <= 0:
            out["regrant"][n - 1] = 1.0
            continue
        wait = np.where(seg >= n, 0.0, gap_len[gap_id])
        out["regrant"][n - 1] = float(np.sum(w * (seg >= n)) / w.sum())
        out["wait_revoked_s"][n - 1] = float(np.sum(w * wait) / w.sum())
    return Availability(**out)


@dataclasses.dataclass(frozen=True, eq=False)
class MarketModel:
    """Prices, revocations and availability per machine type ``j`` and bid ``b`` (assumptions A1, A4
    and A7 of :mod:`scarjax.cluster.planner`).

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
        :func:`scarjax.cluster.planner.to_simulation`) or ``None``.
      avail_n, wait_start_s, regrant, wait_revoked_s, start_share, held_share: ``[J, B, N]``
        the :class:`Availability` of ``n = 1 … N`` machines (index ``n − 1``; a plan of more
        machines reads ``N``'s). Default (``None``): always obtainable (``N = 1``: ``avail_n``
        = ``avail``, no waits, every revoked machine replaced at once).
      revoked_price: ``[J, B]`` mean USD/h of a revoked transient machine during its warning
        (a price history: the first price above the bid after a granted minute; default
        ``spot``): per-second billing charges the warning at it (A5b of
        :mod:`scarjax.cluster.planner`).
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
    avail_n: Any = None
    wait_start_s: Any = None
    regrant: Any = None
    wait_revoked_s: Any = None
    start_share: Any = None
    held_share: Any = None
    revoked_price: Any = None

    def __post_init__(self):
        J, B = len(self.names), len(self.bids)
        if J < 1 or B < 1:
            raise ValueError("a market needs at least one machine type and one bid")
        if self.avail_n is None:  # always obtainable
            a = np.asarray(self.avail, np.float64).reshape(J, B, 1)
            for f, v in (("avail_n", a), ("wait_start_s", np.zeros_like(a)), ("regrant", np.ones_like(a)),
                         ("wait_revoked_s", np.zeros_like(a)), ("start_share", np.ones_like(a)),
                         ("held_share", np.zeros_like(a))):
                if getattr(self, f) is None:
                    object.__setattr__(self, f, v)
        N = np.asarray(self.avail_n).shape[-1] if np.ndim(self.avail_n) == 3 else 0
        for f in _AVAIL_FIELDS:
            v = getattr(self, f)
            a = None if v is None else np.asarray(v, np.float64)
            if a is None or N < 1 or a.shape != (J, B, N) or np.any(np.isnan(a)) or np.any(a < 0):
                raise ValueError(f"{f} must be [{J}, {B}, N] with one N >= 1 for all six availability tables, "
                                 f">= 0 and not NaN")
            if f not in ("wait_start_s", "wait_revoked_s") and not np.all(np.isfinite(a)):
                raise ValueError(f"{f} must be finite (only the waits may be inf: never obtainable)")
            if f in ("avail_n", "regrant", "start_share", "held_share") and np.any(a > 1 + 1e-9):
                raise ValueError(f"{f} must be a share in [0, 1]")
        for f in ("on_demand", "speed"):
            a = np.asarray(getattr(self, f), np.float64)
            if a.shape != (J,) or not np.all(np.isfinite(a)) or np.any(a <= 0):
                raise ValueError(f"{f} must be [{J}] finite and > 0, got {getattr(self, f)!r}")
        if self.revoked_price is None:
            object.__setattr__(self, "revoked_price", np.array(self.spot, np.float64, copy=True))
        for f in ("spot", "avail", "revoked_price"):
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
            cdf, ren, sint, mttf = lifetime_tables(np.asarray(p.lifetimes_s, np.float64) / _H, None, grid)
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
        default its whole span): the lifetime of an allocation requested at each minute the
        price is at or below the bid is the time to the next price above the bid plus the
        warning (censored at the window's end: never revoked within it; its CDF, on a grid to
        the longest finite lifetime, 4 to 48 hours, gives the chance that a run is revoked), the availability is the share of such minutes, the spot
        price the mean price over them (and ``revoked_price`` the mean of the first price above
        the bid that revokes them: the warning's); the MTTF (Young/Daly) is the renewal over the window,
        :meth:`scarjax.cluster.market.PriceDriven.mttf_s` (the granted time over the
        revocations, as the simulator's ``Market.mttf_s``; ``1e9`` h: never revoked). Bulk (the allocation goes at once), fallback (A1), hourly
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
        B, J = len(bids), len(ss)
        spot, avail, mttf = np.zeros((J, B)), np.zeros((J, B)), np.zeros((J, B))
        rev_price = np.zeros((J, B))
        cdf, ren, sint = np.zeros((J, B, 257)), np.zeros((J, B, 257)), np.zeros((J, B, 257))
        lives = {}  # (j, b) -> lifetimes (h) of the granted minutes
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
                    spot[j, b] = rev_price[j, b] = ods[j]
                    mttf[j, b] = 1e-3
                    continue
                spot[j, b] = float(p[ok].mean())
                above = np.where(p > bid, np.arange(M), M)
                nxt = np.minimum.accumulate(above[::-1])[::-1]  # first minute >= m above the bid
                nxt = np.concatenate([nxt[1:], [M]])  # strictly after m
                hit = nxt[ok][nxt[ok] < M]  # the rise that revokes each granted minute's allocation
                rev_price[j, b] = float(p[hit].mean()) if hit.size else spot[j, b]  # its warning's price
                lives[j, b] = np.where(nxt < M, (nxt - np.arange(M)) * 60.0 + warning_s, np.inf)[ok] / _H
                # the MTTF (Young/Daly) by renewal over the window, as the simulator's market.mttf_s
                m_ = mk.price_driven(s, bid, warning_s=warning_s).mttf_s((lo, hi)) / _H
                mttf[j, b] = m_ if math.isfinite(m_) and m_ > 0 else 1e9
        # the grid: to the longest finite lifetime (the CDF is flat beyond it), 4 to 48 hours
        longest = max([float(np.max(v[np.isfinite(v)])) for v in lives.values() if np.isfinite(v).any()] + [0.0])
        grid = np.linspace(0.0, min(48.0, max(4.0, longest)), 257)
        for j in range(J):
            for b in range(B):
                if (j, b) in lives:
                    cdf[j, b], ren[j, b], sint[j, b], _ = lifetime_tables(lives[j, b], None, grid)
                else:  # never granted
                    cdf[j, b], ren[j, b] = 1.0, grid / 1e-3

        def build(j, frac):
            bid = float(frac) * float(ods[j])
            return mk.Market(mk.MachineType(names[j], float(ods[j]), speed=float(sp_[j])),
                             mk.price_driven(ss[j], bid), billing="hourly",
                             startup=mk.fixed_startup(startup_s) if startup_s > 0 else None, start_time_s=t0s[j])

        return cls(names, ods, sp_, bids, spot, avail, mttf, grid, cdf, ren, sint, bulk=True, fallback=True,
                   revoked_price=rev_price,
                   warning_s=warning_s, startup_s=float(startup_s), billing="hourly",
                   source=f"spot prices {','.join(names)} {_window_text(window)}", build=build)

    def bid_index(self, frac: float = 1.0) -> int:
        """The index of the bid nearest ``frac`` (a fraction of on-demand)."""
        return int(np.argmin(np.abs(np.asarray(self.bids) - frac)))

    @property
    def limited(self) -> bool:
        """Whether the number of obtainable transient machines is ever short of a plan's
        (a replayed trace with gaps or fewer nodes than wanted): the planner then offers both
        of the policies' ``unavailable`` rules (wait, or fall back to on-demand machines). A
        price-driven (``fallback``) market has its own model (A5b) and is not ``limited``."""
        return (not self.fallback) and bool(np.any(np.asarray(self.avail_n) < 1.0))

    @classmethod
    def from_market(cls, market: mk.Market, *, window: tuple[float, float] | None = None, n_max: int = 64,
                    bids: Sequence[float] | None = None, samples: int = 4096, key: Any = 0) -> "MarketModel":
        """The planner's model of the simulator's own ``market`` (one machine type), measured
        from the market as it is over ``window = (start_s, end_s)`` (market seconds; default:
        the trace's span, a price history's whole span, else irrelevant):

        * a replayed trace (:func:`~scarjax.cluster.market.replay`,
          :func:`~scarjax.cluster.market.from_availability`,
          :func:`~scarjax.cluster.market.from_node_events`): the residual lifetimes of the nodes
          present at :data:`RESIDUAL_SAMPLES` evenly spaced times (censored at the window's
          end), their renewal tables and MTTF, and the :class:`Availability` of ``1 …
          n_max`` machines (:func:`availability` of :func:`count_series`): the time with
          nothing obtainable enters the predictions as waits or on-demand machines (A7);
        * a price-driven process: :meth:`from_prices` on its series at its bid (``bids``:
          fractions of on-demand to plan over instead);
        * a parametric or empirical process (or none): ``samples`` lifetimes drawn with ``key``
          at the market's start time, its exact MTTF (:meth:`~scarjax.cluster.market.Market.
          mttf_s`), always obtainable.

        The spot price is the market's (``machine.spot``, a fixed price or the mean of its price
        series over the window; a GCE market's preemptible price), the billing rule, the mean
        start-up delay, the warning and the unwarned share are the market's; ``build`` returns
        ``market`` itself (at the plan's bid for a price-driven one), so
        :func:`scarjax.cluster.planner.to_simulation` simulates the very market planned on."""
        if not isinstance(market, mk.Market):
            raise TypeError(f"market must be a scarjax.cluster.market.Market, got {type(market).__name__}")
        n_max = va.check_int("n_max", n_max, lo=1)
        samples = va.check_int("samples", samples, lo=16)
        p, mach = market.process, market.machine
        od = float(mach.on_demand_price)
        if not od > 0:
            raise ValueError("market: the machine's on_demand_price must be > 0 to plan (prices are compared with it)")
        startup = float(market.startup.mean_s) if market.startup is not None else 0.0
        if isinstance(p, mk.PriceDriven):
            fracs = (float(p.bid) / od,) if bids is None else tuple(bids)
            model = cls.from_prices(p.series, od, window=window, bids=fracs, names=(mach.name,), speed=(mach.speed,),
                                    startup_s=startup, warning_s=float(p.warning_s))

            def build_pd(j, frac):
                return dataclasses.replace(market, process=dataclasses.replace(p, bid=float(frac) * od))

            return dataclasses.replace(model, build=build_pd, billing=market.billing,
                                       source=f"{mach.name}: {model.source}")
        if bids is not None:
            raise ValueError("bids: only a price-driven market has bids")
        spot = market.spot
        if isinstance(spot, mk.PriceSeries):
            lo, hi = (float(spot.times_s[0]), float(spot.end_s)) if window is None else window
            grid_t = np.linspace(float(lo), float(hi), 2048, endpoint=False)
            spot_price = float(np.mean([market.price_at("transient", x) for x in grid_t[::16]]))
        else:
            spot_price = float(spot)
        warning = float(getattr(p, "warning_s", 0.0)) if p is not None else 0.0
        unwarned = float(getattr(p, "unwarned", 0.0)) if p is not None else 0.0
        avail_kw = {}
        if isinstance(p, mk.Replay):
            lo, hi = _replay_window(p, window)
            add = np.asarray(p.add_s, np.float64)
            rem = np.asarray(p.remove_s, np.float64)
            at = lo + (np.arange(RESIDUAL_SAMPLES) + 0.5) * (hi - lo) / RESIDUAL_SAMPLES
            present = (add[None, :] <= at[:, None]) & (at[:, None] < rem[None, :])
            ti, ki = np.nonzero(present)
            if ti.size == 0:
                raise ValueError(f"window: no machine is ever obtainable in {window!r}; plan on a window with some")
            end = np.minimum(rem[ki], hi)
            life_h = (end - at[ti]) / _H
            censored = rem[ki] > hi
            mttf_h = float(max(_censored_tables(life_h, censored, np.linspace(0, 1, 3))[3], 1e-9))
            top = min(48.0, max(4.0, 8.0 * mttf_h)) if math.isfinite(mttf_h) else 48.0
            grid = np.linspace(0.0, top, 257)
            cdf, ren, sint, mttf_h = lifetime_tables(life_h, None, grid, censored=censored)
            ts, counts = count_series(p, (lo, hi))
            av = availability(ts, counts, n_max, window=(lo, hi))
            avail_kw = {"avail_n": av.avail[None, None], "wait_start_s": av.wait_start_s[None, None],
                        "regrant": av.regrant[None, None], "wait_revoked_s": av.wait_revoked_s[None, None],
                        "start_share": av.start_share[None, None], "held_share": av.held_share[None, None]}
            avail0 = float(av.avail[0])
            source = f"{mach.name}: {p.name} trace, hours {lo / _H:.4g} to {hi / _H:.4g}"
        else:
            mttf_h = float(market.mttf_s()) / _H
            top = max(48.0, 4.0 * mttf_h) if math.isfinite(mttf_h) else 48.0
            grid = np.linspace(0.0, top, 257)
            if p is None or not math.isfinite(mttf_h):
                cdf, ren, sint = np.zeros_like(grid), np.zeros_like(grid), grid.copy()
                mttf_h = math.inf
            else:
                life, _ = market.revocations(jax.random.key(key) if isinstance(key, int) else key, samples,
                                             market.start_time_s)
                cdf, ren, sint, _ = lifetime_tables(life / _H, None, grid)
            avail0 = 1.0
            source = f"{mach.name}: {type(p).__name__ if p is not None else 'never revoked'}, MTTF {mttf_h:.4g} h"

        def build(j, frac):
            return market

        return cls((mach.name,), np.array([od]), np.array([float(mach.speed)]), (1.0,), np.array([[spot_price]]),
                   np.array([[avail0]]), np.array([[mttf_h]]), grid, cdf[None, None], ren[None, None],
                   sint[None, None], bulk=market.bulk, unwarned=unwarned, warning_s=warning, startup_s=startup,
                   billing=market.billing, source=source, build=build, **avail_kw)

