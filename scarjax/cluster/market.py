"""Markets for transient machines: revocation processes, start-up delays and bills.

**Revocation processes.** Each process says, for ``n`` machines bought at ``start_time``,
when each is taken away and when its warning comes. :func:`sample_lifetimes` (or
``process.sample``) returns :class:`Revocations` ``(lifetime, warning)`` in seconds from
``start_time``; it is a pure ``jax.numpy`` function of a PRNG key (the same key, the same
draws), traceable and vmappable over keys, start times and the processes' numeric fields
(processes are pytrees: vary a mean lifetime or a bid across trials with ``vmap`` or
``run_trials(..., hook_args=...)``).

* :func:`exponential`, :func:`weibull` - parametric lifetimes per machine, or one draw for the
  whole allocation (``bulk=True``: a correlated, bulk revocation, TierML Sec 2.4), optionally
  capped (GCE's 24 h).
* :func:`empirical`, :func:`gce_preemptible` - lifetimes resampled from data: by default the
  GCE preemptible lifetimes of CM-DARE (Li et al. ICDCS'20, Sec V-C) per GPU type and region,
  cut at the 24-hour limit, with GCE's 30-second warning (TierML Sec 2.3).
* :func:`price_driven` - an AWS spot allocation bought at ``start_time`` with bid ``b`` (TierML
  Sec 2.3, Proteus): the termination notice comes at the first price change after the start
  that puts the market price above ``b``, and the machines go two minutes later; a bid below
  the price in effect at the start is not granted (lifetime 0).
* :func:`replay` - node add/remove events of a real spot cluster (the AWS p3 trace) or an
  availability count (the GCP V100 trace), replayed: the machines are ``n`` of the nodes
  present at ``start_time`` (chosen by the key), taken away when the trace removes them.

Every process has ``warning_s`` (the notice's lead; ``warning = lifetime - warning_s``, at
least 0) and ``unwarned`` (the probability that a revocation comes without a usable warning,
``warning = lifetime``: TierML Sec 3.3's "failures" and "effective failures").

**On the training clock.** :func:`revocation_steps` maps times to iterations for a given
``seconds_per_step`` (``-1`` = never, the padding of :func:`scarjax.schedules.steps`);
:func:`revocation_schedule` is a :class:`~scarjax.schedules.Schedule` that draws the
revocations in its ``init(key)`` (once per run or trial) and fires at every step in which a
machine is revoked (or warned); :func:`progress_table` gives the ``[steps, n]`` fractions of
:func:`scarjax.perturb.revocation.revocations` (``progress=``).

**Bills.** :func:`bill` charges machines used from ``start`` to ``end`` at a fixed price or a
:class:`PriceSeries`, vectorised over machines, under AWS's 2015 hourly rule (each
instance-hour charged at the price in effect at its beginning; the last partial hour charged in
full when the user ends the machine, free when the provider revokes it: TierML Sec 3.4, Proteus
summary) or per-second billing (optionally with a minimum charge: GCE's one minute,
:data:`GCE_MINIMUM_CHARGE_S`). :func:`gce_preemptible_price` is the fixed 70%-off price.

**Start-up.** :func:`cmdare_startup` resamples CM-DARE's measured request-to-running times
(Sec V-B, Fig 6); :func:`fixed_startup` a stated delay (:data:`DEFAULT_STARTUP_S`).

Times are float32 seconds on the process's clock (price series: seconds since the series'
``start``), exact for whole seconds below ``2**24`` s (194 days; the 2015 history spans 174).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import schedules
from scarjax.data import transient as td
from scarjax.data.transient import AWS_WARNING_S, GCE_MAX_LIFETIME_S, GCE_PREEMPTIBLE_DISCOUNT, GCE_WARNING_S

__all__ = [
    "AWS_WARNING_S",
    "BILLINGS",
    "MachineType",
    "Market",
    "TIERS",
    "DEFAULT_STARTUP_S",
    "GCE_MAX_LIFETIME_S",
    "GCE_MINIMUM_CHARGE_S",
    "GCE_PREEMPTIBLE_DISCOUNT",
    "GCE_WARNING_S",
    "Empirical",
    "Exponential",
    "PriceDriven",
    "PriceSeries",
    "Replay",
    "PROVIDERS",
    "Provider",
    "Revocations",
    "StartupDelay",
    "Weibull",
    "aggressive_bid",
    "bill",
    "bill_np",
    "billed_hours",
    "charged_seconds",
    "cmdare_startup",
    "empirical",
    "exponential",
    "counts_to_intervals",
    "fixed_startup",
    "from_availability",
    "from_node_events",
    "free_seconds",
    "gce_preemptible",
    "gce_preemptible_price",
    "price_driven",
    "price_series",
    "progress_table",
    "replay",
    "revocation_schedule",
    "revocation_steps",
    "sample_lifetimes",
    "weibull",
]

#: GCE bills per second after a one-minute minimum (Google Cloud's pricing documentation; the
#: papers state no minimum, so :func:`bill` applies one only when asked: ``minimum_s=``).
GCE_MINIMUM_CHARGE_S = 60.0
#: Stated start-up delays, seconds from request to a running machine, where no measurement
#: applies: ``"aws"`` 300 s (TierML Sec 3.3: "the average queuing delay for a spot request on
#: AWS EC2 is 5 minutes", citing Marathe et al.), ``"gce"`` 87 s (the mean of CM-DARE's 45
#: preemptible K80/P100 measurements, Fig 6: "less than 100 seconds").
DEFAULT_STARTUP_S = {"aws": 300.0, "gce": 87.0}
_F32_EXACT = 2.0**24
_NEVER = -1


class Provider(NamedTuple):
    """A provider's stated rules, named so that a trace states whose rules it runs under.

    Attributes:
      name: the preset's key in :data:`PROVIDERS`.
      warning_s: the revocation notice's lead, seconds.
      billing: ``"hourly"`` or ``"per_second"`` (:func:`bill`'s ``scheme``; the clock's
        ``Market.billing``).
    """

    name: str
    warning_s: float
    billing: str


#: Named provider presets: ``"aws"`` - the 2015 spot rules of the papers (two-minute notice,
#: hourly billing with the free partial hour on a provider revocation: TierML Sec 2.3, 3.4);
#: ``"aws_per_second"`` - AWS spot since October 2017 (two-minute notice, per-second billing);
#: ``"gce"`` - GCE preemptible (30-second notice, per-second billing: TierML Sec 2.3, CM-DARE).
PROVIDERS = {
    "aws": Provider("aws", AWS_WARNING_S, "hourly"),
    "aws_per_second": Provider("aws_per_second", AWS_WARNING_S, "per_second"),
    "gce": Provider("gce", GCE_WARNING_S, "per_second"),
}


def _stated_warning(warning_s: Any, provider: str | None, what: str) -> Any:
    """The warning the caller stated, or the named provider's; never a silent default."""
    if provider is not None:
        va.check_choice("provider", provider, tuple(PROVIDERS))
        if warning_s is not None:
            raise ValueError("give warning_s or provider, not both")
        return PROVIDERS[provider].warning_s
    if warning_s is None:
        raise ValueError(
            f"warning_s: state the revocation notice of {what} (seconds; 0 = none) or name a provider "
            f"preset (provider= one of {sorted(PROVIDERS)}); it is never defaulted"
        )
    return warning_s


def _stated_rules(provider: str | None, warning_s: Any, billing: str | None, what: str) -> tuple[str, Any]:
    """``(billing, warning_s)`` as stated, the missing ones from the named provider preset;
    neither is ever defaulted (a ``ValueError`` names the one missing)."""
    if provider is not None:
        va.check_choice("provider", provider, tuple(PROVIDERS))
        billing = PROVIDERS[provider].billing if billing is None else billing
        warning_s = PROVIDERS[provider].warning_s if warning_s is None else warning_s
    if billing is None:
        raise ValueError(f"billing: state it ('hourly' or 'per_second') or name a provider preset "
                         f"(provider= one of {sorted(PROVIDERS)})")
    if warning_s is None:
        raise ValueError(f"warning_s: state the revocation notice of {what} (seconds; 0 = none) or name a "
                         f"provider preset (provider= one of {sorted(PROVIDERS)}); it is never defaulted")
    va.check_choice("billing", billing, ("hourly", "per_second"))
    return billing, warning_s


def _register(cls, data: tuple[str, ...], meta: tuple[str, ...], drop: tuple[str, ...] = ()):
    jax.tree_util.register_dataclass(cls, data_fields=list(data), meta_fields=list(meta), drop_fields=list(drop))
    return cls


def _f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


class Revocations(NamedTuple):
    """When machines are taken away, seconds from the allocation's start (a pytree).

    Attributes:
      lifetime: ``float32[n]`` until the provider takes the machine (``inf``: not within what
        the process knows, e.g. the price never exceeds the bid before the series ends; ``0``:
        never granted).
      warning: ``float32[n]`` until its notice arrives (``<= lifetime``; ``== lifetime``: no
        usable warning).
    """

    lifetime: jax.Array
    warning: jax.Array

    @property
    def revoked(self) -> jax.Array:
        """``bool[n]``: the provider takes the machine at a known time (finite lifetime)."""
        return jnp.isfinite(self.lifetime)


def _warn(key, lifetime, warning_s, unwarned, n, bulk) -> Revocations:
    """``Revocations`` with the warning ``warning_s`` before each lifetime (at least 0), or
    none with probability ``unwarned`` (one draw for the allocation when ``bulk``)."""
    no_warning = jax.random.bernoulli(key, unwarned, () if bulk else (n,))
    warning = jnp.where(no_warning, lifetime, jnp.maximum(lifetime - warning_s, 0.0))
    return Revocations(lifetime, jnp.broadcast_to(warning, (n,)).astype(jnp.float32))


def _cap(x, cap_s):
    return jnp.minimum(x, _f32(cap_s))


# --------------------------------------------------------------------------------------
# Parametric and empirical lifetimes


@dataclasses.dataclass(frozen=True)
class Exponential:
    """Exponential lifetimes with mean ``mean_s`` (see :func:`exponential`)."""

    mean_s: Any
    warning_s: Any = 0.0
    cap_s: Any = float("inf")
    unwarned: Any = 0.0
    bulk: bool = False

    def sample(self, key: jax.Array, n: int, start_time: Any = 0.0) -> Revocations:
        k_life, k_warn = jax.random.split(key)
        draw = jax.random.exponential(k_life, () if self.bulk else (n,), jnp.float32) * _f32(self.mean_s)
        life = jnp.broadcast_to(_cap(draw, self.cap_s), (n,))
        return _warn(k_warn, life, _f32(self.warning_s), self.unwarned, n, self.bulk)


@dataclasses.dataclass(frozen=True)
class Weibull:
    """Weibull lifetimes ``scale_s * W``, ``P(W > x) = exp(-x**shape)`` (see :func:`weibull`)."""

    shape: Any
    scale_s: Any
    warning_s: Any = 0.0
    cap_s: Any = float("inf")
    unwarned: Any = 0.0
    bulk: bool = False

    def sample(self, key: jax.Array, n: int, start_time: Any = 0.0) -> Revocations:
        k_life, k_warn = jax.random.split(key)
        u = jax.random.uniform(k_life, () if self.bulk else (n,), jnp.float32)
        # inverse CDF; -log1p(-u) is Exp(1), exact near u = 0
        draw = _f32(self.scale_s) * (-jnp.log1p(-u)) ** (1.0 / _f32(self.shape))
        life = jnp.broadcast_to(_cap(draw, self.cap_s), (n,))
        return _warn(k_warn, life, _f32(self.warning_s), self.unwarned, n, self.bulk)


@dataclasses.dataclass(frozen=True)
class Empirical:
    """Lifetimes drawn uniformly from ``lifetimes_s`` (already capped; see :func:`empirical`)."""

    lifetimes_s: Any
    warning_s: Any = 0.0
    unwarned: Any = 0.0
    bulk: bool = False
    name: str = "empirical"

    def sample(self, key: jax.Array, n: int, start_time: Any = 0.0) -> Revocations:
        k_life, k_warn = jax.random.split(key)
        data = _f32(self.lifetimes_s)
        idx = jax.random.randint(k_life, () if self.bulk else (n,), 0, data.shape[0])
        life = jnp.broadcast_to(data[idx], (n,))
        return _warn(k_warn, life, _f32(self.warning_s), self.unwarned, n, self.bulk)


_register(Exponential, ("mean_s", "warning_s", "cap_s", "unwarned"), ("bulk",))
_register(Weibull, ("shape", "scale_s", "warning_s", "cap_s", "unwarned"), ("bulk",))
_register(Empirical, ("lifetimes_s", "warning_s", "unwarned"), ("bulk", "name"))


def _check_common(warning_s, unwarned, bulk) -> None:
    va.check_real("warning_s", warning_s, lo=0.0, scalar=True)
    va.check_real("unwarned", unwarned, lo=0.0, hi=1.0, scalar=True)
    va.check_bool("bulk", bulk)


def _check_cap(cap_s) -> None:
    va.check_real("cap_s", cap_s, lo=0.0, lo_open=True, scalar=True, allow_inf=True)


def exponential(
    mean_s: Any, *, warning_s: Any = 0.0, cap_s: Any = float("inf"), unwarned: Any = 0.0, bulk: bool = False
) -> Exponential:
    """Exponential lifetimes (a constant revocation rate ``1 / mean_s``; the MTTF model of
    TierML's checkpointing comparison and of Sync-on-the-fly's simulated revocations, mean 10 or
    2 minutes).

    Args:
      mean_s: the mean lifetime in seconds (``> 0``; may be traced).
      warning_s: the notice's lead, seconds (AWS 120, GCE 30).
      cap_s: a hard limit on the lifetime (GCE: 86400); ``E[min(X, c)] = mean (1 - e^{-c/mean})``.
      unwarned: probability that a revocation comes without a warning.
      bulk: one lifetime for the whole allocation (all ``n`` machines revoked together).
    """
    va.check_real("mean_s", mean_s, lo=0.0, lo_open=True, scalar=True)
    _check_common(warning_s, unwarned, bulk)
    _check_cap(cap_s)
    return Exponential(mean_s, warning_s, cap_s, unwarned, bool(bulk))


def weibull(
    shape: Any,
    scale_s: Any,
    *,
    warning_s: Any = 0.0,
    cap_s: Any = float("inf"),
    unwarned: Any = 0.0,
    bulk: bool = False,
) -> Weibull:
    """Weibull lifetimes: ``P(L > t) = exp(-(t / scale_s) ** shape)``, mean
    ``scale_s * Gamma(1 + 1/shape)`` (``shape < 1``: revocations come early, the shape of the GCE
    CDFs of CM-DARE Fig 8; ``shape = 1`` is :func:`exponential`). Other arguments as there."""
    va.check_real("shape", shape, lo=0.0, lo_open=True, scalar=True)
    va.check_real("scale_s", scale_s, lo=0.0, lo_open=True, scalar=True)
    _check_common(warning_s, unwarned, bulk)
    _check_cap(cap_s)
    return Weibull(shape, scale_s, warning_s, cap_s, unwarned, bool(bulk))


def empirical(
    lifetimes_s: Any,
    *,
    warning_s: Any = 0.0,
    cap_s: Any = float("inf"),
    unwarned: Any = 0.0,
    bulk: bool = False,
    name: str = "empirical",
) -> Empirical:
    """Lifetimes resampled (uniformly, with replacement) from measured ones, cut at ``cap_s``:
    the sampled CDF is the data's empirical CDF."""
    arr = np.asarray(lifetimes_s, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"lifetimes_s must be a non-empty 1-D array of seconds, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or arr.min() < 0:
        raise ValueError("lifetimes_s must be finite and >= 0")
    if not np.any(arr > 0):
        raise ValueError(
            "lifetimes_s: every lifetime is 0, so no machine would ever run (a lifetime of 0 is a "
            "machine never granted); give at least one positive lifetime"
        )
    _check_common(warning_s, unwarned, bulk)
    _check_cap(cap_s)
    va.check_str("name", name)
    return Empirical(
        jnp.asarray(np.minimum(arr, float(cap_s)), jnp.float32), warning_s, unwarned, bool(bulk), name
    )


def gce_preemptible(
    gpu: str = "V100",
    region: str | None = None,
    *,
    campaign: str = "2019-02",
    stressed: bool | None = None,
    unwarned: Any = 0.0,
    bulk: bool = False,
    data=None,
) -> Empirical:
    """GCE preemptible lifetimes for one GPU type (and region), resampled from CM-DARE's
    measurements (:func:`scarjax.data.load_gce_lifetimes`), cut at 24 h, with the 30 s warning.

    Args:
      gpu: ``"K80"``, ``"P100"`` or ``"V100"``.
      region: e.g. ``"us-central1"`` (``None``: every region measured for ``gpu``).
      campaign: ``"2019-02"`` (the per-zone campaign, default), ``"2018"`` or ``None`` (both).
      stressed: only stressed (``True``) or idle (``False``) VMs; ``None``: both (CM-DARE found
        no difference, Sec V-C).
      data: a :class:`~scarjax.data.transient.GceLifetimes` (default: the embedded copy).
    """
    data = td.load_gce_lifetimes() if data is None else data
    sel = data.select(gpu=gpu, region=region, campaign=campaign, stressed=stressed)
    if len(sel) == 0:
        have = sorted({r for g, r in data.select(campaign=campaign).groups() if g == gpu})
        raise ValueError(
            f"no {gpu} lifetimes in region {region!r} (campaign {campaign!r}); measured regions: {have}"
        )
    return empirical(
        sel.capped_lifetime_s,
        warning_s=GCE_WARNING_S,
        cap_s=GCE_MAX_LIFETIME_S,
        unwarned=unwarned,
        bulk=bulk,
        name=f"gce:{gpu}:{region or 'all'}",
    )


# --------------------------------------------------------------------------------------
# Price-driven revocations


@dataclasses.dataclass(frozen=True)
class PriceSeries:
    """A market price as a step function on float32 seconds (see :func:`price_series`).

    Attributes:
      times_s: ``float32[T]`` increasing change times; ``prices``: ``float32[T]`` USD/h from
        each change on (``prices[0]`` also before ``times_s[0]``).
      end_s: the end of the period the series describes.
      maxtab: ``float32[L, T]``, ``maxtab[k, i] = max(prices[i : i + 2**k])`` (first exceedances
        in ``L`` steps).
      cum_hi, cum_lo: ``float32[T]`` ``integral of price dt`` from ``times_s[0]`` to each change,
        in USD-seconds / 3600, as an unevaluated float32 sum ``hi + lo`` (per-second bills keep
        float32 precision relative to the bill, not to the whole series).
      name: a label.
      host: ``(times_s, prices)`` float64 NumPy arrays exactly as given to :func:`price_series`,
        for host-side event loops (BidBrain, the Fig 12 sweep) that compare prices and bids in
        float64; not part of the pytree (``None`` on a series rebuilt by a JAX transformation:
        :meth:`host_arrays` then reads the float32 fields).
    """

    times_s: Any
    prices: Any
    end_s: Any
    maxtab: Any
    cum_hi: Any
    cum_lo: Any
    name: str = "prices"
    host: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __len__(self) -> int:
        return int(self.times_s.shape[0])

    def host_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """``(times_s, prices)`` as float64 NumPy arrays: :attr:`host` (the values given) when
        present, else the float32 fields."""
        if self.host is not None:
            return self.host
        return np.asarray(self.times_s, np.float64), np.asarray(self.prices, np.float64)

    def index(self, t: Any) -> jax.Array:
        """``int32``: the change in effect at ``t`` (0 before the first)."""
        return jnp.maximum(jnp.searchsorted(self.times_s, _f32(t), side="right") - 1, 0).astype(jnp.int32)

    def price_at(self, t: Any) -> jax.Array:
        """The price in effect at ``t`` (``prices[0]`` before the first change)."""
        return self.prices[self.index(t)]

    def first_above(self, i0: Any, bid: Any) -> jax.Array:
        """``int32``: the first change ``j >= i0`` with ``prices[j] > bid`` (``T`` if none):
        binary lifting over :attr:`maxtab`, ``O(log T)``, traceable and vmappable."""
        T = self.prices.shape[0]
        pos = jnp.asarray(i0, jnp.int32)
        bid = _f32(bid)
        for k in reversed(range(self.maxtab.shape[0])):
            step = 1 << k
            skip = (pos + step <= T) & (self.maxtab[k, jnp.clip(pos, 0, T - 1)] <= bid)
            pos = jnp.where(skip, pos + step, pos)
        return pos

    def integral(self, t: Any) -> tuple[jax.Array, jax.Array]:
        """``(hi, lo)``: ``integral of price dt / 3600`` from ``times_s[0]`` to ``t`` (USD per
        machine), as a float32 pair."""
        t = _f32(t)
        i = self.index(t)
        part = self.prices[i] * (jnp.maximum(t - self.times_s[i], 0.0) / 3600.0)
        return self.cum_hi[i], self.cum_lo[i] + part


_register(PriceSeries, ("times_s", "prices", "end_s", "maxtab", "cum_hi", "cum_lo"), ("name",), ("host",))


def price_series(
    prices_or_spot, times_s: Any = None, *, end_s: Any = None, name: str | None = None
) -> PriceSeries:
    """A :class:`PriceSeries` from a :class:`~scarjax.data.transient.SpotPrices` (times in
    seconds since its ``start``) or from arrays ``(prices, times_s)``.

    Raises ``ValueError`` for unsorted times, negative or non-finite prices, or a span of
    ``2**24`` s or more (float32 would no longer hold whole seconds: cut the series with a window).
    """
    spot = (
        prices_or_spot if hasattr(prices_or_spot, "time_s") and hasattr(prices_or_spot, "on_demand") else None
    )
    if spot is not None:
        t = np.asarray(spot.time_s, np.float64)
        p = np.asarray(spot.price, np.float64)
        end = spot.duration_s if end_s is None else float(end_s)
        name = name or f"{spot.zone}:{spot.instance_type}"
    else:
        if times_s is None:
            raise TypeError("price_series needs times_s with an array of prices (or a SpotPrices record)")
        p = np.asarray(prices_or_spot, np.float64)
        t = np.asarray(times_s, np.float64)
        end = float(t[-1]) if end_s is None and t.size else float(end_s if end_s is not None else 0.0)
        name = name or "prices"
    if p.ndim != 1 or t.shape != p.shape or p.size == 0:
        raise ValueError(f"prices and times_s must be 1-D of one length >= 1, got {p.shape} and {t.shape}")
    if not np.all(np.isfinite(p)) or p.min() < 0:
        raise ValueError(f"prices must be finite and >= 0 (USD/h), got {p[~(np.isfinite(p) & (p >= 0))][0]!r}")
    if not np.all(np.isfinite(t)):  # negative times are allowed: the price in effect before a window
        raise ValueError(f"times_s must be finite (seconds), got {t[~np.isfinite(t)][0]!r}")
    if np.any(np.diff(t) <= 0):
        raise ValueError("times_s must increase strictly")
    if max(abs(t[0]), abs(t[-1]), abs(end)) >= _F32_EXACT:
        raise ValueError(
            f"the series spans {max(abs(t[0]), abs(t[-1]), abs(end)):.0f} s >= 2**24 s: float32 times "
            "would not hold whole seconds; cut it (load_spot_prices(..., window=...))"
        )
    T = p.size
    levels = max(1, math.ceil(math.log2(T)) + 1)
    tab = [p]
    for k in range(1, levels):
        prev, half = tab[-1], 1 << (k - 1)
        shifted = np.concatenate([prev[half:], np.full(half, -np.inf)])[:T]
        tab.append(np.maximum(prev, shifted))
    seg = np.diff(t) * p[:-1] / 3600.0
    cum = np.concatenate([[0.0], np.cumsum(seg)])
    hi = cum.astype(np.float32)
    lo = (cum - hi.astype(np.float64)).astype(np.float32)
    return PriceSeries(
        jnp.asarray(t, jnp.float32),
        jnp.asarray(p, jnp.float32),
        jnp.float32(end),
        jnp.asarray(np.stack(tab), jnp.float32),
        jnp.asarray(hi),
        jnp.asarray(lo),
        name,
        _frozen_host(t, p),
    )


def _frozen_host(t: np.ndarray, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = (np.array(t, np.float64), np.array(p, np.float64))
    for a in out:
        a.flags.writeable = False
    return out


@dataclasses.dataclass(frozen=True)
class PriceDriven:
    """Spot revocations driven by a price series (see :func:`price_driven`)."""

    series: PriceSeries
    bid: Any
    warning_s: Any = AWS_WARNING_S
    unwarned: Any = 0.0

    def sample(self, key: jax.Array, n: int, start_time: Any = 0.0) -> Revocations:
        s = self.series
        t0 = _f32(start_time)
        i0 = s.index(t0)
        granted = s.prices[i0] <= _f32(self.bid)
        j = s.first_above(i0 + 1, self.bid)
        T = s.prices.shape[0]
        notice = jnp.where(j < T, s.times_s[jnp.minimum(j, T - 1)] - t0, jnp.inf)
        no_warning = jax.random.bernoulli(key, self.unwarned, (n,))
        life = jnp.where(no_warning, notice, notice + _f32(self.warning_s))
        life = jnp.where(granted, life, 0.0)
        warning = jnp.where(granted, notice, 0.0)
        return Revocations(
            jnp.broadcast_to(life, (n,)).astype(jnp.float32),
            jnp.broadcast_to(warning, (n,)).astype(jnp.float32),
        )


    def mttf_s(self, window: Any = None) -> float:
        """Mean time to revocation by renewal over the price series (as :meth:`Replay.mttf_s`
        over a node trace): an allocation held through every period the price is at or below
        the bid (granted) lives the period plus the warning (``warning_s``, ``0`` with
        probability ``unwarned``); the MTTF is the total granted time plus the expected
        warnings over the revocations (the periods ended by a price change above the bid
        within ``window``). A period still granted at the window's end is censored there
        (its time counts, no revocation). ``window``: ``(start_s, end_s)`` on the series'
        clock (default: from the first change to ``series.end_s``). ``inf``: never revoked
        within the window; ``0``: never granted in it. Exact on the step function (float64,
        the series' given values), independent of any draw and of a start time."""
        ts, ps = self.series.host_arrays()
        hi_all = float(self.series.end_s)
        lo, hi = (float(ts[0]), hi_all) if window is None else (float(window[0]), float(window[1]))
        if not (math.isfinite(lo) and math.isfinite(hi) and hi > lo):
            raise ValueError(f"window must be (start_s, end_s) with start_s < end_s finite, got {window!r}")
        bid = float(np.float32(self.bid))  # the simulator compares float32 prices with a float32 bid
        edges = np.unique(np.concatenate([[lo], ts[(ts > lo) & (ts < hi)], [hi]]))
        seg_p = np.asarray(ps, np.float32)[np.maximum(np.searchsorted(ts, edges[:-1], side="right") - 1, 0)]
        ok = seg_p <= bid
        granted = float(np.sum(np.diff(edges)[ok]))
        if granted <= 0.0:
            return 0.0
        # a revocation: a granted segment followed by one above the bid (within the window)
        revocations = int(np.sum(ok[:-1] & ~ok[1:]))
        if revocations == 0:
            return math.inf
        warn = (1.0 - float(self.unwarned)) * float(self.warning_s)
        return (granted + revocations * warn) / revocations


_register(PriceDriven, ("series", "bid", "warning_s", "unwarned"), ())


def price_driven(
    series, bid: Any = None, *, warning_s: Any = AWS_WARNING_S, unwarned: Any = 0.0
) -> PriceDriven:
    """Revocation of a spot allocation by its market (AWS, 2015 rules; TierML Sec 2.3).

    Machines bought at ``start_time`` (seconds on the series' clock) with bid ``bid`` are granted
    if the price in effect then is ``<= bid`` (else lifetime 0). The termination notice comes at
    the first later price change above ``bid`` and the machines go ``warning_s`` after it (AWS:
    two minutes; with probability ``unwarned`` at once). If the price never exceeds ``bid``
    before the series ends, the lifetime is ``inf``: keep horizons within ``series.end_s``.

    Args:
      series: a :class:`PriceSeries` or a :class:`~scarjax.data.transient.SpotPrices`.
      bid: USD/h (may be traced; ``dataclasses.replace(p, bid=b)`` varies it); default: the
        on-demand price of a ``SpotPrices`` (TierML and Flint bid the on-demand price).
    """
    on_demand = getattr(series, "on_demand", None)
    if not isinstance(series, PriceSeries):
        series = price_series(series)
    if bid is None:
        if on_demand is None or not np.isfinite(on_demand):
            raise ValueError(
                "bid: give a bid (USD/h); only a SpotPrices with a published on-demand price supplies "
                "the default"
            )
        bid = float(on_demand)
    va.check_real("bid", bid, lo=0.0, scalar=True)
    _check_common(warning_s, unwarned, False)
    return PriceDriven(series, bid, warning_s, unwarned)


def aggressive_bid(price: Any, step: Any = 0.1) -> jax.Array:
    """TierML Sec 4.5's aggressive bid: the current price rounded up to the next multiple of
    ``step`` (a dime for Cluster-A machines, a nickel for Cluster-B): ``0.23 -> 0.3``."""
    p = _f32(price)
    return jnp.ceil(p / step - 1e-4) * step


# --------------------------------------------------------------------------------------
# Trace replay


@dataclasses.dataclass(frozen=True)
class Replay:
    """Node intervals ``[add_s, remove_s)`` replayed (see :func:`replay`,
    :func:`from_availability`, :func:`from_node_events`).

    The trace says, at every time, how many machines can be obtained (:meth:`available`: the
    nodes present and not already held) and when each one goes (its removal). ``end_s`` is the
    end of the observation (``inf``: the last finite time of the trace): nodes still present
    then are censored there by :meth:`mttf_s`.
    """

    add_s: Any
    remove_s: Any
    warning_s: Any = AWS_WARNING_S
    unwarned: Any = 0.0
    end_s: Any = float("inf")
    name: str = "replay"

    def alive(self, t: Any) -> jax.Array:
        """``bool[K]``: which nodes are present at ``t``."""
        t = _f32(t)
        return (self.add_s <= t) & (t < self.remove_s)

    def count_at(self, t: Any) -> jax.Array:
        """``int32``: nodes present at ``t`` (vectorised over ``t``)."""
        t = _f32(t)
        return jnp.sum((self.add_s <= t[..., None]) & (t[..., None] < self.remove_s), axis=-1).astype(
            jnp.int32
        )

    def pick(self, key: jax.Array, n: int, start_time: Any = 0.0, exclude: Any = None):
        """``(node int32[n], Revocations)``: ``n`` machines bought at ``start_time``, each one of
        the nodes present then and not in ``exclude`` (``bool[K]``: nodes already held), a random
        choice per key; beyond those available, ``node = -1`` and lifetime 0 (not granted).
        Traceable."""
        k_pick, k_warn = jax.random.split(key)
        t0 = _f32(start_time)
        free = self.alive(t0)
        if exclude is not None:
            free = free & ~jnp.asarray(exclude, bool)
        prio = jnp.where(free, jax.random.uniform(k_pick, free.shape), -1.0)
        order = jnp.argsort(-prio)
        K = free.shape[0]
        pick = order[jnp.arange(n) % K]
        ok = free[pick] & (jnp.arange(n) < K)
        life = jnp.where(ok, self.remove_s[pick] - t0, 0.0).astype(jnp.float32)
        node = jnp.where(ok, pick, -1).astype(jnp.int32)
        return node, _warn(k_warn, life, _f32(self.warning_s), self.unwarned, n, False)

    def sample(self, key: jax.Array, n: int, start_time: Any = 0.0) -> Revocations:
        return self.pick(key, n, start_time)[1]

    # host-side questions about the trace (NumPy, float64) ---------------------------------
    def _arrays(self):
        return np.asarray(self.add_s, np.float64), np.asarray(self.remove_s, np.float64)

    def available(self, t: float) -> int:
        """Machines that can be obtained at ``t``: the nodes present (host, float64)."""
        add, rem = self._arrays()
        return int(np.sum((add <= t) & (t < rem)))

    def next_available(self, t: float) -> float:
        """The first time ``>= t`` at which a node is present (``inf``: never again)."""
        add, rem = self._arrays()
        if np.any((add <= t) & (t < rem)):
            return float(t)
        later = add[(add > t) & (rem > add)]
        return float(later.min()) if later.size else math.inf

    def horizon(self) -> float:
        """The end of the observation: ``end_s``, else the trace's last finite time."""
        if math.isfinite(float(self.end_s)):
            return float(self.end_s)
        add, rem = self._arrays()
        times = np.concatenate([add, rem[np.isfinite(rem)]])
        return float(times.max())

    def mttf_s(self) -> float:
        """Mean time to revocation by renewal over the trace: the nodes' total time present
        (each stay cut at :meth:`horizon`: a node still present then is censored) divided by
        the removals within it (``inf``: none). Independent of any draw."""
        add, rem = self._arrays()
        end = self.horizon()
        up = np.clip(np.minimum(rem, end) - add, 0.0, None).sum()
        removals = int(np.sum(np.isfinite(rem) & (rem <= end) & (rem > add)))
        return float(up / removals) if removals else math.inf


_register(Replay, ("add_s", "remove_s", "warning_s", "unwarned", "end_s"), ("name",))


def _check_times(name: str, t: np.ndarray, *, allow_inf: bool = False) -> None:
    if np.any(np.isnan(t)):
        raise ValueError(f"{name} must not be NaN (at index {int(np.flatnonzero(np.isnan(t))[0])})")
    if not allow_inf and not np.all(np.isfinite(t)):
        raise ValueError(f"{name} must be finite (at index {int(np.flatnonzero(~np.isfinite(t))[0])})")
    if np.any(t < 0):
        raise ValueError(f"{name} must be >= 0 seconds (at index {int(np.flatnonzero(t < 0)[0])}: {t[t < 0][0]!r})")
    if np.any(np.isfinite(t) & (t >= _F32_EXACT)):
        raise ValueError(f"{name} must be below 2**24 s (float32 whole seconds); shift the trace's origin")


def _make_replay(add, rem, warning_s, unwarned, end_s, name) -> Replay:
    if add.ndim != 1 or add.shape != rem.shape or add.size == 0:
        raise ValueError(
            f"add_s and remove_s must be 1-D of one length >= 1, got {add.shape} and {rem.shape}"
        )
    _check_times("add_s", add)
    _check_times("remove_s", rem, allow_inf=True)
    if np.any(rem < add):
        i = int(np.flatnonzero(rem < add)[0])
        raise ValueError(f"remove_s must be >= add_s for every node (node {i}: added {add[i]}, removed {rem[i]})")
    _check_common(warning_s, unwarned, False)
    end = math.inf if end_s is None else float(va.check_real("end_s", end_s, lo=0.0, scalar=True))
    return Replay(jnp.asarray(add, jnp.float32), jnp.asarray(rem, jnp.float32), warning_s, unwarned, end, name)


def replay(trace, *, warning_s: Any = None, provider: str | None = None, unwarned: Any = 0.0) -> Replay:
    """Replay a trace's node events.

    ``trace``: a :class:`~scarjax.data.transient.NodeTrace` (the AWS p3 trace: each node's stay
    ``[add, remove)``, never removed: ``inf``), an
    :class:`~scarjax.data.transient.AvailabilityTrace` (the GCP V100 counts, as
    :func:`from_availability`) or a pair ``(add_s, remove_s)`` of arrays (node intervals).
    :meth:`Replay.sample` takes ``n`` of the nodes present at ``start_time`` (a random choice
    per key; missing ones get lifetime 0: not granted).

    The warning comes from the caller (``warning_s``) or a named preset (``provider``, a key of
    :data:`PROVIDERS`); only the package's own records carry their provider's: ``"aws"`` (120 s)
    for the AWS ``NodeTrace``, ``"gce"`` (30 s) for the GCP ``AvailabilityTrace``. Arrays have no
    provider: one of the two must be given (``ValueError`` otherwise).
    """
    if hasattr(trace, "intervals"):
        _, add, rem = trace.intervals()
        name, own = "replay:nodes", "aws"
        end = float(np.max(np.asarray(trace.time_s, np.float64))) if len(trace) else None
    elif hasattr(trace, "count") and hasattr(trace, "time_s"):
        if warning_s is None and provider is None:
            provider = "gce"
        return from_availability(trace.time_s, trace.count, warning_s=warning_s, provider=provider,
                                 unwarned=unwarned, name="replay:counts")
    else:
        try:
            add, rem = (np.asarray(a, np.float64) for a in trace)
        except (TypeError, ValueError):
            raise TypeError(
                "trace must be a NodeTrace, an AvailabilityTrace or a pair (add_s, remove_s), got "
                f"{type(trace).__name__}"
            ) from None
        name, own, end = "replay", None, None
    if warning_s is None and provider is None and own is not None:
        provider = own
    warning_s = _stated_warning(warning_s, provider, "the trace")
    return _make_replay(add, rem, warning_s, unwarned, end, name)


def from_availability(
    times_s: Any,
    counts: Any,
    *,
    warning_s: Any = None,
    provider: str | None = None,
    unwarned: Any = 0.0,
    end_s: Any = None,
    name: str = "availability",
) -> Replay:
    """A market from availability counts: ``counts[i]`` machines can be obtained from
    ``times_s[i]`` until the next tick (the last count holds on; ``end_s``: where the
    observation stops, for :meth:`Replay.mttf_s`'s censoring, default the last tick). Ticks may
    have any gaps and counts any size, including 0 (nothing obtainable: policies wait or fall
    back to on-demand). A rise adds nodes; a fall removes the most recently added ones (last
    in, first out), with the notice ``warning_s`` before (state it, or name a ``provider`` of
    :data:`PROVIDERS`: never defaulted).

    Before ``times_s[0]`` nothing is obtainable. The usual call, for a trace of a new user::

        market = mk.Market(mk.MachineType("p3.2xlarge", 3.06, spot=0.92),
                           mk.from_availability(times_s, counts, provider="aws_per_second"),
                           billing=mk.PROVIDERS["aws_per_second"].billing)

    or in one call :meth:`Market.from_availability`.

    Raises ``ValueError`` naming the argument for NaN, negative or unsorted ``times_s``, and for
    negative, NaN or fractional ``counts``.
    """
    t = np.asarray(times_s, np.float64)
    c = np.asarray(counts, np.float64)
    if t.ndim != 1 or t.size == 0:
        raise ValueError(f"times_s must be a non-empty 1-D array of seconds, got shape {t.shape}")
    if c.shape != t.shape:
        raise ValueError(f"counts must have the shape of times_s {t.shape}, got {c.shape}")
    _check_times("times_s", t)
    if np.any(np.diff(t) <= 0):
        i = int(np.flatnonzero(np.diff(t) <= 0)[0])
        raise ValueError(f"times_s must increase strictly (index {i + 1}: {t[i + 1]} after {t[i]})")
    if np.any(np.isnan(c)) or np.any(c < 0) or np.any(c != np.round(c)) or not np.all(np.isfinite(c)):
        raise ValueError("counts must be whole numbers >= 0 (machines obtainable from each tick)")
    va.check_str("name", name)
    warning_s = _stated_warning(warning_s, provider, "the availability trace")
    add, rem = counts_to_intervals(t, c.astype(np.int64))
    if add.size == 0:
        raise ValueError("counts: every count is 0, so no machine is ever obtainable; use no transient market")
    end = float(t[-1]) if end_s is None else end_s
    if float(end) < float(t[-1]):
        raise ValueError(f"end_s must be >= the last tick {t[-1]}, got {end}")
    return _make_replay(add, rem, warning_s, unwarned, end, name)


def from_node_events(
    times_s: Any,
    added: Any,
    nodes: Any,
    *,
    warning_s: Any = None,
    provider: str | None = None,
    unwarned: Any = 0.0,
    end_s: Any = None,
    name: str = "node_events",
) -> Replay:
    """A market from node add/remove events in time order: at ``times_s[i]`` node ``nodes[i]``
    joins (``added[i]`` true) or is taken away (false); a node may come back later (a new
    stay). Warning as :func:`from_availability` (``warning_s`` or ``provider``, never
    defaulted). Raises ``ValueError`` naming the argument for NaN, negative or decreasing
    ``times_s``, a removal of a node not present, or an addition of one already present."""
    t = np.asarray(times_s, np.float64)
    a = np.asarray(added)
    nd = np.asarray(nodes)
    if t.ndim != 1 or t.size == 0 or a.shape != t.shape or nd.shape != t.shape:
        raise ValueError(
            f"times_s, added and nodes must be 1-D of one length >= 1, got {t.shape}, {a.shape}, {nd.shape}"
        )
    if a.dtype != bool:
        raise TypeError(f"added must be a bool array (True: the node joins), got dtype {a.dtype}")
    _check_times("times_s", t)
    if np.any(np.diff(t) < 0):
        i = int(np.flatnonzero(np.diff(t) < 0)[0])
        raise ValueError(f"times_s must be non-decreasing (index {i + 1}: {t[i + 1]} after {t[i]})")
    warning_s = _stated_warning(warning_s, provider, "the node events")
    adds, rems, open_at = [], [], {}
    for i, (ti, ai, ni) in enumerate(zip(t.tolist(), a.tolist(), nd.tolist())):
        if ai:
            if ni in open_at:
                raise ValueError(f"nodes: node {ni!r} added at {ti} s (event {i}) is already present")
            open_at[ni] = len(adds)
            adds.append(ti)
            rems.append(np.inf)
        else:
            if ni not in open_at:
                raise ValueError(f"nodes: node {ni!r} removed at {ti} s (event {i}) is not present")
            rems[open_at.pop(ni)] = ti
    if not adds:
        raise ValueError("added: no node is ever added, so no machine is ever obtainable")
    end = float(t[-1]) if end_s is None else end_s
    return _make_replay(np.array(adds), np.array(rems), warning_s, unwarned, end, name)


def counts_to_intervals(times_s: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(add_s, remove_s)`` node intervals of an availability series (a rise adds nodes, a
    fall removes the most recently added: last in, first out; never removed: ``inf``). No
    validation: :func:`from_availability` is the checked entry point."""
    add, rem, stack = [], [], []
    for ti, c in zip(np.asarray(times_s, np.float64).tolist(), np.asarray(counts, np.int64).tolist()):
        while len(stack) < c:
            stack.append(len(add))
            add.append(ti)
            rem.append(np.inf)
        while len(stack) > c:
            rem[stack.pop()] = ti
    return np.array(add, np.float64), np.array(rem, np.float64)


# --------------------------------------------------------------------------------------
# The common interface and the training clock


def sample_lifetimes(process, key: jax.Array, n: int, start_time: Any = 0.0) -> Revocations:
    """``n`` machines' revocations under ``process``, bought at ``start_time`` (seconds on the
    process's clock): :class:`Revocations` ``(lifetime, warning)``, seconds from ``start_time``.

    Pure and deterministic in ``key``; traceable and vmappable over ``key``, ``start_time`` and
    the process's numeric fields (``n`` is static)."""
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"n must be an int >= 1 (static), got {n!r}")
    if not hasattr(process, "sample"):
        raise TypeError(
            f"process must be a revocation process (exponential, weibull, empirical, gce_preemptible, "
            f"price_driven, replay), got {type(process).__name__}"
        )
    return process.sample(key, int(n), start_time)


def revocation_steps(times_s: Any, seconds_per_step: Any, *, start_step: Any = 0) -> jax.Array:
    """``int32``: the iteration during which each event at ``times_s`` (seconds from the run's
    start) happens, ``start_step + floor(t / seconds_per_step)``; ``-1`` for ``inf`` (never; the
    padding of :func:`scarjax.schedules.steps`). Traceable; concrete ``times_s`` that are NaN
    or negative raise ``ValueError``."""
    va.check_real("seconds_per_step", seconds_per_step, lo=0.0, lo_open=True, scalar=True)
    va.check_real("times_s", times_s, lo=0.0, allow_inf=True)  # NaN is no time (not "never")
    t = _f32(times_s)
    k = jnp.floor(t / _f32(seconds_per_step))
    ok = jnp.isfinite(k) & (k < 2.0**30)
    return jnp.where(ok, jnp.clip(k, 0, 2**30).astype(jnp.int32) + jnp.asarray(start_step, jnp.int32), _NEVER)


def revocation_schedule(
    process,
    n: int,
    seconds_per_step: Any,
    *,
    start_time: Any = 0.0,
    event: str = "revocation",
    machine: int | None = None,
) -> schedules.Schedule:
    """A :class:`~scarjax.schedules.Schedule` firing at each step in which one of ``n``
    machines (or only ``machine``) is revoked (``event="revocation"``) or warned
    (``event="warning"``). The revocations are drawn in ``init(key)`` (once per run; per trial
    under :func:`scarjax.run_trials`, a different draw each), by :func:`sample_lifetimes`."""
    if event not in ("revocation", "warning"):
        raise ValueError(f"event must be 'revocation' or 'warning', got {event!r}")
    if machine is not None and (
        isinstance(machine, bool) or not isinstance(machine, (int, np.integer)) or not 0 <= machine < n
    ):
        raise ValueError(f"machine must be an int in [0, n={n}), got {machine!r}")
    va.check_real("seconds_per_step", seconds_per_step, lo=0.0, lo_open=True, scalar=True)

    def init(key):
        rev = sample_lifetimes(process, key, n, start_time)
        times = rev.lifetime if event == "revocation" else rev.warning
        steps = revocation_steps(times, seconds_per_step)
        return steps if machine is None else steps[machine : machine + 1]

    def fires(step, key, state):
        return jnp.any((state == step) & (state >= 0))

    return schedules.Schedule(
        init, fires, name=f"{event}s({getattr(process, 'name', type(process).__name__)}, n={n})"
    )


def progress_table(
    rev: Revocations, seconds_per_step: Any, steps: int, *, restart_s: Any = None
) -> jax.Array:
    """``float32[steps, n]``: the fraction of its points each machine finishes at each step, for
    :func:`scarjax.perturb.revocation.revocations` (``progress=``, as a NumPy array): ``1``
    before the revocation step, the finished fraction ``(lifetime mod seconds_per_step) /
    seconds_per_step`` in it, ``0`` after; with ``restart_s`` a replacement takes over
    ``restart_s`` seconds after the revocation (its first full step) and runs to the end."""
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an int >= 1 (static), got {steps!r}")
    va.check_real("seconds_per_step", seconds_per_step, lo=0.0, lo_open=True, scalar=True)
    sps = _f32(seconds_per_step)
    life = _f32(rev.lifetime)
    k = jnp.arange(steps, dtype=jnp.float32)[:, None]
    begin = k * sps
    frac = jnp.clip((life - begin) / sps, 0.0, 1.0)  # 1 before, the fraction in, 0 after
    if restart_s is not None:
        va.check_real("restart_s", restart_s, lo=0.0, scalar=True)
        back = life + _f32(restart_s)
        frac = jnp.where(begin >= back, 1.0, frac)
    return frac.astype(jnp.float32)


# --------------------------------------------------------------------------------------
# Bills


def gce_preemptible_price(on_demand: Any) -> jax.Array:
    """GCE's fixed preemptible price: 70% below on-demand (TierML Sec 2.3)."""
    return _f32(on_demand) * (1.0 - GCE_PREEMPTIBLE_DISCOUNT)


def billed_hours(duration_s: Any, revoked: Any = False, *, tol_s: Any = 1.0, xp: Any = np) -> Any:
    """THE hourly billing rule (AWS 2015; TierML Sec 3.4's "AWS partial hour rule", Proteus's
    free computing): the instance-hours charged for a machine used ``duration_s`` seconds.

    Whole hours from the machine's start are charged; the last partial hour is charged in full
    when the user ends the machine and is free when the provider revokes it (``revoked``). A
    duration within ``tol_s`` of a whole number of hours counts as that number (no partial hour
    is begun or lost by rounding of float32 times). Elementwise over broadcast arrays; ``xp`` is
    the array module (``numpy``, the default, for host-side ledgers and sweeps; ``jax.numpy``
    inside :func:`bill`), so the rule is written once. No validation (callers check their
    inputs; :func:`bill_np` is the checked NumPy entry point)::

        mk.billed_hours(np.array([3600.0, 5400.0, 5400.0]), np.array([False, False, True]))
        # -> [1., 2., 1.]
    """
    dur = xp.asarray(duration_s)
    whole = xp.floor((dur + tol_s) / 3600.0)
    partial = dur - whole * 3600.0 > tol_s
    return xp.where(partial & ~xp.asarray(revoked, bool), whole + 1.0, whole)


def charged_seconds(duration_s: Any, *, minimum_s: Any = 0.0, xp: Any = np) -> Any:
    """The per-second billing rule (GCE; AWS since 2017): the seconds charged for a machine
    used ``duration_s`` seconds, at least ``minimum_s`` (GCE: :data:`GCE_MINIMUM_CHARGE_S`),
    whoever ends it. ``xp`` as in :func:`billed_hours`."""
    return xp.maximum(xp.asarray(duration_s), minimum_s)


def free_seconds(duration_s: Any, revoked: Any, *, tol_s: Any = 1.0, xp: Any = np) -> Any:
    """Seconds of free computing under the hourly rule (:func:`billed_hours`): the used part of
    the last partial hour of a machine the provider revoked (0 otherwise)."""
    dur = xp.asarray(duration_s)
    used = dur - xp.floor((dur + tol_s) / 3600.0) * 3600.0
    return xp.where(xp.asarray(revoked, bool) & (used > tol_s), used, 0.0)


def bill_np(
    start: Any,
    end: Any,
    price: Any,
    revoked_by_provider: Any = False,
    scheme: str = "hourly",
    *,
    minimum_s: float = 0.0,
    tol_s: float = 1.0,
) -> np.ndarray:
    """:func:`bill` for fixed prices on the host: float64 NumPy, vectorised over machines, the
    same rule (:func:`billed_hours`, :func:`charged_seconds`). USD for machines used from
    ``start`` to ``end`` seconds at ``price`` USD/h (scalar or per machine)::

        mk.bill_np(0.0, [5400.0, 5400.0], 0.5, [False, True])   # -> [1.0, 0.5]

    Raises ``ValueError`` naming the argument for NaN, negative or infinite times or prices, an
    ``end`` before its ``start``, or an unknown ``scheme``."""
    va.check_choice("scheme", scheme, BILLINGS)
    va.check_real("minimum_s", minimum_s, lo=0.0, scalar=True)
    va.check_real("tol_s", tol_s, lo=0.0, hi=60.0, scalar=True)
    va.check_real("start", start, lo=0.0)
    va.check_real("end", end, lo=0.0)
    va.check_real("price", price, lo=0.0)
    start, end, price, revoked = np.broadcast_arrays(
        np.asarray(start, np.float64), np.asarray(end, np.float64), np.asarray(price, np.float64),
        np.asarray(revoked_by_provider, bool))
    if np.any(end < start):
        raise ValueError("end must be >= start for every machine")
    dur = end - start
    if scheme == "hourly":
        return price * billed_hours(dur, revoked, tol_s=float(tol_s))
    return price * charged_seconds(dur, minimum_s=float(minimum_s)) / 3600.0


@jax.jit
def _hourly_series(series: PriceSeries, start, hours):
    """``sum_{k < hours} price(start + 3600 k)`` elementwise (a loop over max(hours) hours;
    compiled once per shape: an eager loop would be traced and compiled again on every call)."""

    def cond(c):
        k, _ = c
        return jnp.any(k < hours)

    def body(c):
        k, acc = c
        p = series.price_at(start + 3600.0 * k.astype(jnp.float32))
        return k + 1, acc + jnp.where(k < hours, p, 0.0)

    _, acc = jax.lax.while_loop(cond, body, (jnp.int32(0), jnp.zeros(jnp.shape(start), jnp.float32)))
    return acc


def bill(
    start: Any,
    end: Any,
    price: Any,
    revoked_by_provider: Any = False,
    scheme: str = "hourly",
    *,
    minimum_s: Any = 0.0,
    tol_s: Any = 1.0,
) -> jax.Array:
    """USD charged for machines used from ``start`` to ``end`` (seconds; arrays broadcast over
    machines; traceable).

    Args:
      start, end: seconds on the price's clock (``0 <= start <= end``, finite; NaN, negative
        or infinite concrete values raise ``ValueError`` naming the argument).
      price: a fixed price in USD/h (scalar or per machine) or a :class:`PriceSeries`.
      revoked_by_provider: ``bool`` (per machine): the provider ended the machine at ``end``.
      scheme: ``"hourly"`` - AWS 2015: whole instance-hours from ``start``, each charged at the
        price in effect at its beginning; the last partial hour is charged in full when the user
        ends the machine and is free when the provider revokes it (TierML Sec 3.4's "AWS partial
        hour rule"; Proteus's free computing). ``"per_second"`` - the price integrated over
        ``[start, end]``, at least ``minimum_s`` seconds (GCE: :data:`GCE_MINIMUM_CHARGE_S`),
        whoever ends the machine.
      minimum_s: the minimum charged duration under ``"per_second"``.
      tol_s: under ``"hourly"``, a duration within ``tol_s`` of a whole number of hours counts
        as that number (no partial hour is begun or lost by float32 rounding of the times:
        their resolution is up to 1 s below ``2**24`` s).
    """
    if scheme not in ("hourly", "per_second"):
        raise ValueError(f"scheme must be 'hourly' or 'per_second', got {scheme!r}")
    va.check_real("minimum_s", minimum_s, lo=0.0, scalar=True)
    va.check_real("tol_s", tol_s, lo=0.0, hi=60.0, scalar=True)
    va.check_real("start", start, lo=0.0)
    va.check_real("end", end, lo=0.0)
    start, end = _f32(start), _f32(end)
    if not (va.is_traced(start) or va.is_traced(end)) and bool(jnp.any(end < start)):
        raise ValueError("end must be >= start for every machine")
    revoked = jnp.asarray(revoked_by_provider, bool)
    start, end, revoked = jnp.broadcast_arrays(start, end, revoked)
    dur = jnp.maximum(end - start, 0.0)
    series = price if isinstance(price, PriceSeries) else None
    if series is None and not va.is_traced(price):
        va.check_real("price", price, lo=0.0)
    if scheme == "hourly":
        hours = billed_hours(dur, revoked, tol_s=_f32(tol_s), xp=jnp).astype(jnp.int32)
        if series is None:
            return (_f32(price) * hours).astype(jnp.float32)
        return _hourly_series(series, start, hours)
    charged = charged_seconds(dur, minimum_s=_f32(minimum_s), xp=jnp)
    if series is None:
        return (_f32(price) * charged / 3600.0).astype(jnp.float32)
    e = start + charged
    hi_e, lo_e = series.integral(e)
    hi_s, lo_s = series.integral(start)
    return ((hi_e - hi_s) + (lo_e - lo_s)).astype(jnp.float32)


# --------------------------------------------------------------------------------------
# Start-up delays


@dataclasses.dataclass(frozen=True)
class StartupDelay:
    """Seconds from requesting a machine to its running, resampled from ``samples_s``."""

    samples_s: Any
    name: str = "startup"

    def sample(self, key: jax.Array, n: int) -> jax.Array:
        """``float32[n]`` delays (uniform resampling of :attr:`samples_s`)."""
        data = _f32(self.samples_s)
        return data[jax.random.randint(key, (int(n),), 0, data.shape[0])]

    @property
    def mean_s(self) -> jax.Array:
        return jnp.mean(_f32(self.samples_s))


_register(StartupDelay, ("samples_s",), ("name",))


def fixed_startup(seconds: Any) -> StartupDelay:
    """A stated delay (e.g. :data:`DEFAULT_STARTUP_S` ``["aws"]``)."""
    va.check_real("seconds", seconds, lo=0.0, scalar=True)
    return StartupDelay(jnp.reshape(_f32(seconds), (1,)), f"fixed:{seconds}")


def cmdare_startup(
    kind: str = "preemptible", gpu: str | None = None, region: str | None = None, data=None
) -> StartupDelay:
    """CM-DARE's measured start-up times (provisioning + staging + booting; Sec V-B, Fig 6),
    for ``kind`` ``"preemptible"``/``"on_demand"``, ``gpu`` ``"K80"``/``"P100"``, ``region``
    ``"us-east1"``/``"us-west1"`` (``None``: all). ``data``: a
    :class:`~scarjax.data.transient.StartupTimes` (default: the embedded copy)."""
    data = td.load_startup_times() if data is None else data
    sel = data.select(kind=kind, gpu=gpu, region=region)
    if len(sel) == 0:
        raise ValueError(f"no start-up measurements for kind={kind!r}, gpu={gpu!r}, region={region!r}")
    return StartupDelay(
        jnp.asarray(sel.total, jnp.float32), f"cmdare:{kind}:{gpu or 'all'}:{region or 'all'}"
    )


#: The two tiers of machines a policy buys: ``"reliable"`` (on-demand) and ``"transient"``.
TIERS = ("reliable", "transient")
#: The billing rules of :func:`bill`: ``"hourly"`` (AWS 2015) and ``"per_second"`` (GCE).
BILLINGS = ("hourly", "per_second")


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
      cores: cores (vCPUs) per instance, for work models that count cores (Proteus's
        BidBrain: a fleet of ``C`` cores works at ``rate(C)``, :mod:`scarjax.cluster.bidbrain`;
        e.g. c3.xlarge 4, :data:`scarjax.cluster.bidbrain.CORES`). Default 1: one machine is
        one unit of the work model.
    """

    name: str
    on_demand_price: float
    spot: Any = None
    speed: float = 1.0
    cores: int = 1

    def __post_init__(self):
        va.check_str("name", self.name)
        va.check_real("on_demand_price", self.on_demand_price, lo=0.0, scalar=True)
        va.check_real("speed", self.speed, lo=0.0, lo_open=True, scalar=True)
        va.check_int("cores", self.cores, lo=1)
        if self.spot is not None and not isinstance(self.spot, PriceSeries):
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
        if self.startup is not None and not isinstance(self.startup, StartupDelay):
            raise TypeError(f"startup must be a scarjax.cluster.market.StartupDelay or None, got {type(self.startup).__name__}")
        va.check_real("start_time_s", self.start_time_s, lo=0.0, scalar=True)

    # prices --------------------------------------------------------------------------
    @property
    def spot(self) -> Any:
        """The transient price: ``machine.spot``; else a price-driven process's series; else
        GCE's fixed preemptible price (70% below on-demand)."""
        if self.machine.spot is not None:
            return self.machine.spot
        if isinstance(self.process, PriceDriven):
            return self.process.series
        return float(gce_preemptible_price(self.machine.on_demand_price))

    def price(self, tier: str) -> Any:
        """The price of a machine of ``tier`` (``'reliable'``: on-demand; ``'transient'``:
        :attr:`spot`), a float or a PriceSeries."""
        va.check_choice("tier", tier, TIERS)
        return float(self.machine.on_demand_price) if tier == "reliable" else self.spot

    def price_at(self, tier: str, t: float) -> float:
        """USD/h in effect at market time ``t`` for ``tier``."""
        p = self.price(tier)
        return float(p.price_at(t)) if isinstance(p, PriceSeries) else float(p)

    def available(self, t: float) -> float:
        """How many transient machines can be obtained at market time ``t`` (``inf``: no
        limit): a replayed trace's nodes present then (:meth:`~scarjax.cluster.market.Replay.
        available`; the policies subtract the ones they hold), a price-driven market's ``inf``
        while the price in effect is ``<=`` the bid and 0 above it, ``inf`` for parametric and
        empirical processes (and without a process)."""
        p = self.process
        if isinstance(p, PriceDriven):
            return math.inf if float(p.series.price_at(t)) <= float(p.bid) else 0.0
        if isinstance(p, Replay):
            return float(p.available(float(t)))
        return math.inf

    def next_available(self, t: float) -> float:
        """The first market time ``>= t`` at which :meth:`available` is positive (``inf``:
        never again within what the market knows)."""
        p = self.process
        if isinstance(p, Replay):
            return p.next_available(float(t))
        if isinstance(p, PriceDriven):
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
        if not isinstance(self.process, Replay):
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

            market = mk.Market.from_availability(times_s, counts, provider="aws_per_second",
                                                 machine=mk.MachineType("p3.2xlarge", 3.06, spot=0.92))
        """
        if billing is None:
            if provider is None:
                raise ValueError("billing: state it ('hourly' or 'per_second') or name a provider preset "
                                 f"(provider= one of {sorted(PROVIDERS)})")
            va.check_choice("provider", provider, tuple(PROVIDERS))
            billing = PROVIDERS[provider].billing
        if provider is not None and warning_s is not None:
            provider = None  # the stated warning wins; the preset gave the billing
        process = from_availability(times_s, counts, warning_s=warning_s, provider=provider, unwarned=unwarned,
                                       end_s=end_s)
        return cls(machine, process, billing=billing, startup=startup, start_time_s=start_time_s)

    @classmethod
    def from_prices(cls, times_s: Any, prices: Any, *, bid: Any, machine: MachineType, provider: str | None = None,
                    warning_s: Any = None, billing: str | None = None, end_s: Any = None, startup: Any = None,
                    start_time_s: float = 0.0, unwarned: Any = 0.0, name: str | None = None) -> "Market":
        """A price-driven spot market in one call from plain arrays: ``prices[i]`` USD/h from
        ``times_s[i]`` on (:func:`price_series`), machines bought with ``bid`` revoked
        ``warning_s`` after the first price change above it (:func:`price_driven`; TierML Sec
        2.3, Proteus). The notice and the billing are stated or come from a ``provider`` preset
        (``"aws"``: the 2015 rules, two minutes and hourly), never defaulted; ``machine`` gives
        the on-demand price, the cores per instance and no fixed ``spot`` price (the series is
        the transient price)::

            market = mk.Market.from_prices([0.0, 3600.0], [0.03, 0.5], bid=0.21, provider="aws",
                                           machine=mk.MachineType("c3.xlarge", 0.21, cores=4))

        Raises ``ValueError`` naming the argument for unsorted, NaN or negative inputs.
        """
        if not isinstance(machine, MachineType):
            raise TypeError(f"machine must be a MachineType, got {type(machine).__name__}")
        if machine.spot is not None:
            raise ValueError("machine.spot must be None for a price-driven market: the price series is the spot price")
        billing, warning_s = _stated_rules(provider, warning_s, billing, "the price series")
        series = price_series(prices, times_s, end_s=end_s, name=name or machine.name)
        return cls(machine, price_driven(series, bid, warning_s=warning_s, unwarned=unwarned), billing=billing,
                   startup=startup, start_time_s=start_time_s)

    @classmethod
    def from_spot_prices(cls, prices: Any, *, bid: Any, provider: str | None = None, warning_s: Any = None,
                         billing: str | None = None, cores: int = 1, origin: Any = None, end_s: Any = None,
                         startup: Any = None, start_time_s: float = 0.0, unwarned: Any = 0.0) -> "Market":
        """A price-driven spot market from the parser's record, a
        :class:`~scarjax.data.transient.SpotPrices` (:func:`scarjax.data.load_spot_prices`), in
        one call: the machine is ``"{zone}:{instance_type}"`` at the record's on-demand price
        with ``cores`` per instance; times are seconds since ``origin`` (``datetime64``;
        default the record's ``start``; give several markets one origin to put them on one
        clock; changes before the one in effect at the origin are dropped); the series ends at
        ``end_s`` (default: the record's ``end``). ``bid`` (USD/h), the notice and the
        billing are stated (``provider="aws"`` for the 2015 history: two-minute notice, hourly
        billing), never defaulted; :meth:`from_prices` otherwise::

            spot = scarjax.data.load_spot_prices("c3.xlarge", "us-east-1a")
            market = mk.Market.from_spot_prices(spot, bid=spot.on_demand, provider="aws", cores=4)
        """
        if not (hasattr(prices, "time") and hasattr(prices, "price") and hasattr(prices, "on_demand")):
            raise TypeError(f"prices must be a scarjax.data.transient.SpotPrices, got {type(prices).__name__}")
        if not np.isfinite(prices.on_demand):
            raise ValueError(f"prices: {prices.instance_type} has no published on-demand price; use from_prices "
                             "with a MachineType")
        origin = prices.start if origin is None else np.datetime64(origin, "s")
        t = (prices.time - origin).astype("timedelta64[s]").astype(np.float64)
        end = float((prices.end - origin).astype("timedelta64[s]").astype(np.int64)) if end_s is None else end_s
        keep = max(int(np.searchsorted(t, 0.0, side="right")) - 1, 0)  # the change in effect at the origin on
        machine = MachineType(f"{prices.zone}:{prices.instance_type}", float(prices.on_demand), cores=cores)
        return cls.from_prices(t[keep:], np.asarray(prices.price, np.float64)[keep:], bid=bid, machine=machine, provider=provider,
                               warning_s=warning_s, billing=billing, end_s=end, startup=startup,
                               start_time_s=start_time_s, unwarned=unwarned)

    @property
    def end_s(self) -> float:
        """The end of what the market knows, on its clock: a price-driven market's series end
        (:attr:`PriceSeries.end_s`), a replayed trace's observation end
        (:meth:`Replay.horizon`); ``inf`` for parametric and empirical processes (and without a
        process). Keep horizons within it."""
        p = self.process
        if isinstance(p, PriceDriven):
            return float(p.series.end_s)
        if isinstance(p, Replay):
            return p.horizon()
        return math.inf

    @property
    def bulk(self) -> bool:
        """Whether one draw revokes the whole allocation (``bulk`` processes, price-driven)."""
        return bool(getattr(self.process, "bulk", False)) or isinstance(self.process, PriceDriven)

    def mttf_s(self) -> float:
        """Mean time to a transient machine's revocation, needed by Young/Daly: exact for
        exponential (capped), Weibull (uncapped) and empirical processes; a replayed trace's by
        renewal over the trace (the nodes' total time present, censored at the observation's end,
        over the removals: :meth:`Replay.mttf_s`, never draws of machines not granted); a
        price-driven market's by renewal over its price series (:meth:`PriceDriven.mttf_s`: the
        granted time over the revocations, the same at every start), except that it is ``0``
        when the price is above the bid at :attr:`start_time_s` (machines bought then are not
        granted: the policies start on on-demand machines and take no checkpoints); otherwise
        the mean of 2048 draws at the market's start time (key 0) with ``inf`` (never revoked)
        lifetimes counted as ``inf``."""
        p = self.process
        if p is None:
            return math.inf
        if isinstance(p, PriceDriven):
            ts, ps = p.series.host_arrays()
            at = float(np.float32(ps[max(int(np.searchsorted(ts, float(np.float32(self.start_time_s)), side="right")) - 1, 0)]))
            return p.mttf_s() if at <= float(np.float32(p.bid)) else 0.0
        if isinstance(p, Exponential):
            m, c = float(p.mean_s), float(p.cap_s)
            return m * (1.0 - math.exp(-c / m)) if math.isfinite(c) else m
        if isinstance(p, Weibull) and not math.isfinite(float(p.cap_s)):
            return float(p.scale_s) * math.gamma(1.0 + 1.0 / float(p.shape))
        if isinstance(p, Empirical):
            return float(np.mean(np.asarray(p.lifetimes_s, np.float64)))
        if isinstance(p, Replay):
            return p.mttf_s()
        life, _ = self.revocations(jax.random.key(0), 2048, self.start_time_s)
        return float(np.mean(life))


@functools.partial(jax.jit, static_argnums=(2,))
def _sample_revocations(process, key, n, t):
    rev = sample_lifetimes(process, key, n, t)
    return rev.lifetime, rev.warning


@functools.partial(jax.jit, static_argnums=(2,))
def _sample_startup(startup, key, n):
    return startup.sample(key, n)


@functools.partial(jax.jit, static_argnums=(4,))
def _sample_purchase(process, startup, key, counter, n, t):
    k_up, k_life = jax.random.split(jax.random.fold_in(key, counter))
    up = jnp.zeros((n,), jnp.float32) if startup is None else startup.sample(k_up, n)
    life = jnp.full((n,), jnp.inf, jnp.float32) if process is None else sample_lifetimes(process, k_life, n, t).lifetime
    return up, life


@functools.partial(jax.jit, static_argnums=(4,))
def _sample_replay_purchase(process, startup, key, counter, n, t, held):
    k_up, k_life = jax.random.split(jax.random.fold_in(key, counter))
    up = jnp.zeros((n,), jnp.float32) if startup is None else startup.sample(k_up, n)
    node, rev = process.pick(k_life, n, t, held)
    return up, rev.lifetime, node
