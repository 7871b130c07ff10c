"""Transient clusters on a simulated clock: markets, bills, real training interval by
interval, and the seed systems' policies side by side (TierML, Proteus, Sync-on-the-fly,
Litz, SCAR).

* :mod:`~scarjax.cluster.market` - revocation processes (parametric, empirical from the GCE
  lifetimes, price-driven from the AWS 2015 spot history, trace replay), bills (AWS hourly
  with the free provider-revoked partial hour, per second, GCE's fixed preemptible price),
  start-up delays (CM-DARE).
* :mod:`~scarjax.cluster.market` also holds the one :class:`~scarjax.cluster.market.Market`
  (machines on offer, revocations, prices, billing) every policy and the planner read.
* :mod:`~scarjax.cluster.steptime` (seconds per iteration for ``M`` workers),
  :mod:`~scarjax.cluster.ledger` (a run's bills, one entry per machine),
  :mod:`~scarjax.cluster.trainer` (real scarjax training advanced interval by interval) and
  :mod:`~scarjax.cluster.clock` (the :class:`~scarjax.cluster.clock.Job`, the
  :class:`~scarjax.cluster.clock.ClusterRun` every policy returns, Monte-Carlo over draws).
* Policies, each ``policy(job, market, *, key, horizon_s, ...) -> ClusterRun`` or its own
  driver: :mod:`~scarjax.cluster.policies` (on-demand, checkpoint-restart at the Young/Daly
  interval, SCAR), :mod:`~scarjax.cluster.tierml` (TierML/AgileML stages),
  :mod:`~scarjax.cluster.bidbrain` (Proteus BidBrain), :mod:`~scarjax.cluster.syncfly`
  (Sync-on-the-fly and a checkpoint-recompute baseline), :mod:`~scarjax.cluster.litz` (Litz
  elasticity); :mod:`~scarjax.cluster.sweep` - the vectorised TierML Fig 12 sweep over every
  start minute of a price history with its calibrated progress model.
* Performance models and planning: :mod:`~scarjax.cluster.cmdare` (CM-DARE's
  step-time and checkpoint-time regressions, Tables II-IV, and the parameter-server plateau),
  :mod:`~scarjax.cluster.lifetimes` (GCE revocations: Table V, Fig 8's lifetime CDFs with the
  24 h cap, Eq 4-5's training time and cost), :mod:`~scarjax.cluster.profile` (the same models
  fitted to scarjax's own jobs on this machine), :mod:`~scarjax.cluster.planner` (the cheapest
  way to train: policy, checkpointing, mix, bid, workers and batch size, predicted from the
  SCAR bound, the fitted models and the market) with :mod:`~scarjax.cluster.jobprofile` (what
  it knows of the job) and :mod:`~scarjax.cluster.marketmodel` (its view of a
  :class:`~scarjax.cluster.market.Market`, availability included).

Not imported by ``import scarjax``: ``from scarjax import cluster``.
"""

from scarjax.cluster import (bidbrain, clock, cmdare, jobprofile, ledger, lifetimes, litz, market, marketmodel,
                             planner, policies, profile, steptime, sweep, syncfly, tierml, trainer)
from scarjax.cluster.clock import *  # noqa: F403 (the run contract's public names, clock.__all__)
from scarjax.cluster.ledger import *  # noqa: F403 (ledger.__all__)
from scarjax.cluster.market import *  # noqa: F403 (the market's public names, market.__all__)
from scarjax.cluster.steptime import *  # noqa: F403 (steptime.__all__)
from scarjax.cluster.trainer import *  # noqa: F403 (trainer.__all__)
from scarjax.cluster.policies import checkpoint_restart, on_demand, young_daly_s

__all__ = [
    "bidbrain",
    "clock",
    "cmdare",
    "jobprofile",
    "ledger",
    "lifetimes",
    "litz",
    "market",
    "marketmodel",
    "planner",
    "policies",
    "profile",
    "steptime",
    "sweep",
    "syncfly",
    "tierml",
    "trainer",
    "checkpoint_restart",
    "on_demand",
    "young_daly_s",
    *clock.__all__,
    *ledger.__all__,
    *market.__all__,
    *steptime.__all__,
    *trainer.__all__,
]
