"""Step-time models: seconds per training iteration for ``M`` workers, vectorised over ``M``.

* :func:`step_time_fixed` - the same seconds whatever the worker count.
* :func:`step_time_linear` - ``t(M) = compute_s / M + sync_s * log2(M)``: perfectly divided
  compute plus a tree all-reduce whose depth grows as ``log2 M`` (``t(1) = compute_s``).
* :func:`step_time_pollux` - thesis Eq 3.5-3.8 for a global batch ``batch_size`` split over
  ``M`` GPUs, ``gpus_per_node`` per node, local batch ``ceil(batch_size / M)``, no gradient
  accumulation.

A :class:`StepTime` is what a :class:`scarjax.cluster.clock.Job` runs at; the planner and the
progress models (:mod:`scarjax.cluster.sweep`) read the same object.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from scarjax import validate as va
from scarjax import pollux

__all__ = ["StepTime", "step_time_fixed", "step_time_linear", "step_time_pollux"]


# --------------------------------------------------------------------------------------
# Step-time models


def _check_workers(workers: Any) -> np.ndarray:
    w = np.asarray(workers)
    if w.dtype == bool or not np.issubdtype(w.dtype, np.integer):
        if not (np.issubdtype(w.dtype, np.floating) and np.all(np.isfinite(w)) and np.all(w == np.round(w))):
            raise TypeError(f"workers must be an int or an int array, got {workers!r}")
    if np.any(w < 1):
        raise ValueError(f"workers must be >= 1, got {workers!r}")
    return w.astype(np.int64)


@dataclasses.dataclass(frozen=True)
class StepTime:
    """Seconds per training iteration for ``M`` workers: ``step_time(M)`` (vectorised over
    an int array; a float for a scalar). Build with :func:`step_time_fixed`,
    :func:`step_time_linear` or :func:`step_time_pollux`.

    Attributes:
      fn: ``fn(M: int64 array) -> float64 array`` of seconds (> 0).
      name: a label (in JSON results).
    """

    fn: Callable[[np.ndarray], np.ndarray]
    name: str = "step_time"

    def __call__(self, workers: Any) -> np.ndarray | float:
        w = _check_workers(workers)
        t = np.asarray(self.fn(w), np.float64)
        if not np.all(np.isfinite(t)) or np.any(t <= 0):
            raise ValueError(f"step time {self.name} gave non-positive or non-finite seconds {t!r} for workers={workers!r}")
        return float(t) if t.ndim == 0 else t


def step_time_fixed(seconds: float) -> StepTime:
    """The same ``seconds`` per iteration whatever the number of workers."""
    va.check_real("seconds", seconds, lo=0.0, lo_open=True, scalar=True)
    s = float(seconds)
    return StepTime(lambda w: np.full(np.shape(w), s), f"fixed({s:g})")


def step_time_linear(compute_s: float, sync_s: float = 0.0) -> StepTime:
    """``t(M) = compute_s / M + sync_s * log2(M)``: the work of one iteration divided over
    ``M`` data-parallel workers plus a tree all-reduce of depth ``log2 M`` (``t(1) =
    compute_s``)."""
    va.check_real("compute_s", compute_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("sync_s", sync_s, lo=0.0, scalar=True)
    c, s = float(compute_s), float(sync_s)
    return StepTime(lambda w: c / w + s * np.log2(w), f"linear({c:g},{s:g})")


def step_time_pollux(params: Any, batch_size: int, gpus_per_node: int = 1) -> StepTime:
    """Pollux's iteration time (thesis Eq 3.5-3.8, :func:`scarjax.pollux.t_iter`) for a global
    batch of ``batch_size`` examples over ``M`` GPUs on ``ceil(M / gpus_per_node)`` nodes,
    local batch ``ceil(batch_size / M)``, no gradient accumulation.

    Args:
      params: a :class:`scarjax.pollux.ThroughputParams` (fitted, e.g. by
        :func:`scarjax.pollux.fit_throughput`, or given).
    """
    params = pollux.check_throughput_params(params)
    bs = va.check_int("batch_size", batch_size, lo=1)
    g = va.check_int("gpus_per_node", gpus_per_node, lo=1)

    def fn(w):
        w = np.asarray(w, np.int64)
        nodes = -(-w // g)
        local = -(-bs // w)
        return np.asarray(pollux.t_iter(params, nodes, w, local, 0), np.float64)

    return StepTime(fn, f"pollux(bs={bs},gpn={g})")
