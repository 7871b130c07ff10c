"""Progress models calibrated from the cluster engine's own runs.

Three reproductions rest on a *stated* progress model that is independent of the cluster
engine (:mod:`scarjax.cluster.policies`, :mod:`scarjax.cluster.tierml`): the TierML Fig 12
sweep (:class:`scarjax.cluster.sweep.ProgressModel`: TierML's stage rates 63/64 and 1/64),
Proteus (:class:`scarjax.cluster.bidbrain.ScalingModel`: ``kappa = 0.05``) and the
Sync-on-the-fly clock (:class:`scarjax.cluster.syncfly.Fleet`: a 2 s barrier). This module
measures the same quantities on the engine instead:

* it trains the job of the engine's TierML Fig 1 reproduction for real (MLR on digits,
  :func:`scarjax.models.mlr.digits`) under the engine's on-demand policy
  (:func:`scarjax.cluster.policies.on_demand`, a revocation-free market) with ``M``
  workers, and reads the seconds per iteration off the run's clock
  (:func:`engine_seconds_per_step`);
* the engine times an iteration with the step-time model of that reproduction,
  ``step_time_linear(compute_s, sync_s)`` (:data:`ENGINE_STEP_TIME`): the job takes
  :data:`RUNTIME_64_H` hours for :data:`TARGET_STEP` iterations on 64 machines (TierML Fig 1)
  with :data:`SYNC_SHARE` of each iteration spent synchronising (TierML Fig 1's stated
  constants, repeated here: experiments do not import one another);
* :func:`progress_model` feeds those seconds to
  :meth:`scarjax.cluster.sweep.ProgressModel.from_step_time` (TierML's stage 3 and its
  reliable machine alone; the engine's TierML multiplies the step time by
  :func:`scarjax.cluster.tierml.stage_slowdown`, which is 1 in both cases, checked);
  :func:`scaling_model` fits Proteus's ``kappa`` to the engine's throughput
  ``1 / t(M)``; :func:`barrier_share` is the share of an iteration the engine spends in the
  barrier, which sets the Sync-on-the-fly barrier's cost relative to its compute.

What calibration removes is the second, separate set of rate constants; what it keeps is
the engine's own step-time model, whose constants are TierML Fig 1's (the paper's runtime,
a 10% synchronisation share). Results report both the stated and the calibrated model.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from scarjax.cluster import bidbrain as bb
from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster import sweep as sw
from scarjax.cluster import tierml as tm
from scarjax.cluster.steptime import step_time_linear
from scarjax.models import mlr

__all__ = [
    "ENGINE_STEP_TIME",
    "RUNTIME_64_H",
    "SYNC_SHARE",
    "TARGET_STEP",
    "barrier_share",
    "engine_seconds_per_step",
    "progress_model",
    "scaling_model",
    "summary",
]

#: TierML Fig 1: the MLR job takes 4 hours on 64 machines ...
RUNTIME_64_H = 4.0
#: ... for 300 iterations (the iteration at which the failure-free run sets the target) ...
TARGET_STEP = 300
#: ... 10% of each 64-machine iteration synchronising (a tree all-reduce, ``log2 M`` deep).
SYNC_SHARE = 0.1
_T64 = RUNTIME_64_H * 3600.0 / TARGET_STEP
#: The engine's step time of that job: ``t(M) = compute_s / M + sync_s log2 M``.
ENGINE_STEP_TIME = step_time_linear((1.0 - SYNC_SHARE) * _T64 * 64, SYNC_SHARE * _T64 / math.log2(64))


@functools.lru_cache(maxsize=None)
def _algorithm():
    return mlr.digits(lr=1.0, l2=1e-2)  # one Algorithm: its compiled steps are reused across worker counts


@functools.lru_cache(maxsize=None)
def _measure(workers: int, steps: int) -> float:
    job = ck.Job(_algorithm(), -1e30, ENGINE_STEP_TIME, workers=workers, max_steps=steps)
    market = mk.Market(mk.MachineType("reliable", 1.0), None, "per_second")
    run = po.on_demand(job, market, key=0, horizon_s=1e12, granularity=steps)
    if int(run.steps[-1]) != steps or not np.all(np.isfinite(run.loss)):
        raise RuntimeError(f"the engine's calibration run with {workers} workers did not train {steps} steps")
    return float(run.time_s[-1]) / steps


def engine_seconds_per_step(workers, *, steps: int = 4) -> dict[int, float]:
    """Seconds per iteration measured on the engine's clock for each worker count: real
    training of the MLR job (``steps`` iterations) under the on-demand policy."""
    out = {}
    for m in workers:
        m = int(m)
        if m < 1:
            raise ValueError(f"workers must be >= 1, got {m}")
        out[m] = _measure(m, int(steps))
    return out


def progress_model(*, machines: int = 64, reliable: int = 1, **kw) -> sw.ProgressModel:
    """The Fig 12 sweep's :class:`~scarjax.cluster.sweep.ProgressModel` with TierML's stage
    rates from the engine's measured seconds per iteration (``machines``, ``machines -
    reliable`` and ``reliable`` workers); other constants as given (``**kw``)."""
    n = machines - reliable
    secs = engine_seconds_per_step((machines, n, reliable))
    # The engine's TierML times stage 3 (n:reliable) and the reliable machines alone at the
    # workers' step time (stage_slowdown 1): the on-demand measurements are its rates.
    for tr, w in ((n, n), (0, reliable)):
        st = tm.step_seconds(ENGINE_STEP_TIME, tr, reliable)
        if not math.isclose(st, float(ENGINE_STEP_TIME(w)), rel_tol=1e-9):
            raise RuntimeError(f"the engine's TierML step at {tr}:{reliable} is not the on-demand one at {w} workers")
    return sw.ProgressModel.from_step_time(lambda m: secs[int(m)], machines=machines, reliable=reliable, **kw)


def scaling_model(base_cores: float, *, cores_per_machine: int = 4, max_machines: int = 32) -> bb.ScalingModel:
    """Proteus's :class:`~scarjax.cluster.bidbrain.ScalingModel` with ``kappa`` fitted (least
    squares, through the origin) to the engine's throughput: ``rate(C) / rate(c0) = t(M0) /
    t(M)`` for fleets of ``M = C / cores_per_machine`` machines, ``M0 = c0 /
    cores_per_machine`` up to ``max_machines`` (powers of two), against the model's
    ``(C / c0) / (1 + kappa log2(C / c0))``."""
    m0 = max(1, int(round(base_cores / cores_per_machine)))
    ms = [m0 * 2 ** k for k in range(1, 16) if m0 * 2 ** k <= max_machines]
    if not ms:
        raise ValueError(f"max_machines={max_machines} leaves no fleet larger than the base's {m0} machines")
    secs = engine_seconds_per_step((m0, *ms))
    x = np.log2(np.array(ms, float) / m0)
    y = (np.array(ms, float) / m0) * np.array([secs[m] for m in ms]) / secs[m0] - 1.0
    kappa = max(0.0, float(np.dot(x, y) / np.dot(x, x)))
    return bb.ScalingModel(kappa, float(base_cores))


def barrier_share(workers: int) -> float:
    """The share of one iteration on ``workers`` machines that the engine spends outside the
    divided compute: ``(t(M) - t(1) / M) / t(M)`` from measured seconds."""
    secs = engine_seconds_per_step((1, int(workers)))
    t1, tm_ = secs[1], secs[int(workers)]
    return float((tm_ - t1 / workers) / tm_)


def summary() -> dict:
    """The calibration's inputs, for a results file."""
    return {
        "source": "scarjax.cluster.policies.on_demand: real MLR-on-digits training, seconds per iteration "
                  "from the engine's step time of TierML Fig 1",
        "step_time": ENGINE_STEP_TIME.name,
        "runtime_64_h": RUNTIME_64_H, "target_step": TARGET_STEP, "sync_share": SYNC_SHARE,
    }
