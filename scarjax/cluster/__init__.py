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
from scarjax.cluster.clock import *  # noqa: F403 (the clock's public names, clock.__all__)
from scarjax.cluster.market import *  # noqa: F403 (the markets' public names, market.__all__)
from scarjax.cluster.policies import checkpoint_restart, on_demand, young_daly_s

__all__ = [
    "bidbrain",
    "clock",
    "litz",
    "market",
    "policies",
    "sweep",
    "syncfly",
    "tierml",
    "checkpoint_restart",
    "on_demand",
    "young_daly_s",
    *clock.__all__,
    *market.__all__,
]
