"""Transient clusters on a simulated clock (issue 14).

Built so far (Sec 1 of the issue): :mod:`scarjax.cluster.market` - revocation processes
(parametric, empirical from GCE lifetimes, price-driven from the AWS spot history, trace
replay), their conversion to schedules and progress tables on the training clock, bills (AWS
hourly with the free partial hour, per-second, GCE's fixed preemptible price) and start-up
delays (CM-DARE). The data come from :mod:`scarjax.data.transient`.

Not imported by ``import scarjax``: ``from scarjax import cluster`` or
``from scarjax.cluster import market``.
"""

from scarjax.cluster.market import (
    AWS_WARNING_S,
    DEFAULT_STARTUP_S,
    GCE_MAX_LIFETIME_S,
    GCE_MINIMUM_CHARGE_S,
    GCE_PREEMPTIBLE_DISCOUNT,
    GCE_WARNING_S,
    Empirical,
    Exponential,
    PriceDriven,
    PriceSeries,
    Replay,
    Revocations,
    StartupDelay,
    Weibull,
    aggressive_bid,
    bill,
    cmdare_startup,
    empirical,
    exponential,
    fixed_startup,
    gce_preemptible,
    gce_preemptible_price,
    price_driven,
    price_series,
    progress_table,
    replay,
    revocation_schedule,
    revocation_steps,
    sample_lifetimes,
    weibull,
)

__all__ = [
    "AWS_WARNING_S",
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
    "Revocations",
    "StartupDelay",
    "Weibull",
    "aggressive_bid",
    "bill",
    "cmdare_startup",
    "empirical",
    "exponential",
    "fixed_startup",
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
