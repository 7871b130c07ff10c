"""Transient clusters on a simulated clock: markets, bills, real training interval by
interval, and the seed systems' policies side by side (TierML, Proteus, Sync-on-the-fly,
Litz, SCAR).

* :mod:`~scarjax.cluster.market` - revocation processes (parametric, empirical from the GCE
  lifetimes, price-driven from the AWS 2015 spot history, trace replay), bills (AWS hourly
  with the free provider-revoked partial hour, per second, GCE's fixed preemptible price),
  start-up delays (CM-DARE).
* :mod:`~scarjax.cluster.clock` - the clock: step-time models, markets, the ``Ledger`` of a
  run's bills, the ``Trainer`` that advances real scarjax training interval by interval, and
  the ``ClusterRun`` every policy returns (loss vs hours and vs dollars).
* Policies, each ``policy(job, market, *, key, horizon_s, ...) -> ClusterRun`` or its own
  driver: :mod:`~scarjax.cluster.policies` (on-demand, checkpoint-restart at the Young/Daly
  interval, SCAR), :mod:`~scarjax.cluster.tierml` (TierML/AgileML stages),
  :mod:`~scarjax.cluster.bidbrain` (Proteus BidBrain), :mod:`~scarjax.cluster.syncfly`
  (Sync-on-the-fly and a checkpoint-recompute baseline), :mod:`~scarjax.cluster.litz` (Litz
  elasticity); :mod:`~scarjax.cluster.sweep` - the vectorised TierML Fig 12 sweep over every
  start minute of a price history with its calibrated progress model.

Not imported by ``import scarjax``: ``from scarjax import cluster``.
"""

from scarjax.cluster import bidbrain, clock, litz, market, policies, sweep, syncfly, tierml
from scarjax.cluster.clock import (
    ClusterRun,
    Job,
    Ledger,
    MachineType,
    Market,
    Outcome,
    Recorder,
    StepTime,
    Trainer,
    outcomes,
    simulate_trials,
    step_time_fixed,
    step_time_linear,
    step_time_pollux,
)
from scarjax.cluster.policies import checkpoint_restart, on_demand, young_daly_s

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
    "bidbrain",
    "clock",
    "litz",
    "market",
    "policies",
    "sweep",
    "syncfly",
    "tierml",
    "ClusterRun",
    "Job",
    "Ledger",
    "MachineType",
    "Market",
    "Outcome",
    "Recorder",
    "StepTime",
    "Trainer",
    "outcomes",
    "simulate_trials",
    "step_time_fixed",
    "step_time_linear",
    "step_time_pollux",
    "checkpoint_restart",
    "on_demand",
    "young_daly_s",
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
