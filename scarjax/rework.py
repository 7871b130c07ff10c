"""Measuring rework: iterations to ε-optimality, perturbed vs unperturbed (thesis Eq 5.4).

The thesis defines the rework cost ``π(δ, ε) = κ(y, ε) − κ(w, ε)`` as the difference in
iterations to reach ε-optimality between the perturbed sequence ``y`` and the unperturbed
``w`` (Eq 5.4). Measured on traces, ``κ`` is the first iteration at which the criterion
(distance to ``w*`` or loss) drops below ε. The thesis sets ε "so that an unperturbed
trial converges in roughly N iterations" (Figs 5.3, 5.5): :func:`calibrate_eps` does that.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["iterations_to", "rework_cost", "calibrate_eps", "calibrate_near", "criterion"]

_METRICS = ("distance", "loss")


def criterion(trace: Any, metric: str = "distance") -> np.ndarray:
    """The per-iteration criterion of a trace: ``trace.distance`` or ``trace.loss`` (or a
    plain array, returned as is)."""
    if metric not in _METRICS:
        raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
    if not hasattr(trace, "loss"):
        return np.asarray(trace, dtype=np.float64)
    values = getattr(trace, metric)
    if values is None:
        raise ValueError(
            f"metric={metric!r} is not available: the algorithm has no known optimum; "
            "use metric='loss' or give the Algorithm an optimum"
        )
    return np.asarray(values, dtype=np.float64)


def iterations_to(values: Any, eps: Any) -> np.ndarray:
    """The iteration from which the criterion stays below ``eps``: the smallest ``k`` with
    ``values[..., m] < eps`` for every ``m >= k`` (``inf`` if the last value is not below).

    This is the measured counterpart of the thesis's ``κ(y, ε)`` ("m > κ implies
    E‖y⁽ᵐ⁾ − w*‖ < ε", Sec 5.3.1); for a monotone run it is the first hitting time, and a
    perturbation that strikes after a first hit correctly counts. Broadcasts over leading
    (trial) axes; ``eps`` may be a scalar or broadcast against the leading axes.
    """
    v = np.asarray(values, dtype=np.float64)
    if v.ndim == 0:
        raise ValueError("values must have an iteration axis")
    if np.any(np.isnan(v)):
        raise ValueError("values contain NaN: the run diverged; cannot measure iterations")
    e = np.asarray(eps, dtype=np.float64)
    if np.any(~np.isfinite(e)) or np.any(e <= 0):
        raise ValueError(f"eps must be finite and > 0, got {eps!r}")
    above = v >= e[..., None]
    L = v.shape[-1]
    last_above = L - 1 - np.argmax(above[..., ::-1], axis=-1)
    k = np.where(above.any(axis=-1), last_above + 1, 0).astype(np.float64)
    return np.where(above[..., -1], np.inf, k)


def rework_cost(trace: Any, baseline_trace: Any, eps: Any, *, metric: str = "distance") -> np.ndarray:
    """Measured rework cost (Eq 5.4): ``iterations_to(trace) − iterations_to(baseline)``.

    Args:
      trace: the perturbed run (a :class:`~scarjax.Trace`, possibly with a trial axis, or
        an array of criterion values).
      baseline_trace: the unperturbed run (same key, so minibatches match), with or
        without the same trial axis.
      eps: the ε of ε-optimality (see :func:`calibrate_eps`).
      metric: ``'distance'`` (‖y − w*‖, the theorem's criterion) or ``'loss'``.

    Returns:
      Rework in iterations (float; negative when the perturbation helped; ``inf`` when
      the perturbed run never reaches ε within its length).

    Raises:
      ValueError: if the baseline never reaches ε (ε mis-calibrated or run too short).
    """
    base = iterations_to(criterion(baseline_trace, metric), eps)
    if np.any(~np.isfinite(base)):
        raise ValueError(
            f"baseline_trace never reaches eps={eps!r}: calibrate eps on the baseline "
            "(calibrate_eps) or run longer"
        )
    return iterations_to(criterion(trace, metric), eps) - base


def calibrate_eps(baseline_trace: Any, iterations: int, *, metric: str = "distance") -> np.ndarray:
    """ε such that the unperturbed run reaches ε (for good) at exactly ``iterations``.

    ε is the geometric mean of the criterion at ``iterations − 1`` and ``iterations``
    (for a trial axis, per trial). Raises ``ValueError`` if the criterion is not below
    all earlier values there (the run is not converging at that point).
    """
    v = criterion(baseline_trace, metric)
    if isinstance(iterations, bool) or not isinstance(iterations, (int, np.integer)):
        raise TypeError(f"iterations must be an int, got {iterations!r}")
    if not 1 <= iterations < v.shape[-1]:
        raise ValueError(f"iterations must be in [1, {v.shape[-1] - 1}], got {iterations}")
    prev_min = v[..., :iterations].min(axis=-1)
    cur = v[..., iterations]
    if np.any(cur >= prev_min) or np.any(cur <= 0):
        raise ValueError(
            f"the baseline criterion at iteration {iterations} is not a new minimum (or is 0): "
            "choose an iteration where the run is still converging"
        )
    return np.sqrt(prev_min * cur)


def calibrate_near(loss: np.ndarray, iterations: int) -> np.ndarray:
    """Per-trial ε such that the baseline reaches ε for good (the κ of
    :func:`scarjax.rework.iterations_to`) at the first possible iteration ``>=
    iterations``. The thesis sets ε "so that an unperturbed trial converges in roughly N
    iterations"; with minibatch noise the loss need not drop below all later values at
    exactly ``N``, so we take the first ``k >= N`` where the suffix maximum
    ``S[k] = max(loss[k:])`` drops (``loss[k−1] > S[k]``) and ε = √(loss[k−1]·S[k]).
    ``loss``: ``[trials, steps + 1]``."""
    v = np.asarray(loss, np.float64)
    if np.any(~np.isfinite(v)):
        raise ValueError("the baseline loss is not finite (the run diverged): lower the step size")
    suffix_max = np.maximum.accumulate(v[..., ::-1], axis=-1)[..., ::-1]
    drop = np.zeros_like(v, bool)
    drop[..., 1:] = v[..., :-1] > suffix_max[..., 1:]
    drop[..., :iterations] = False
    if not np.all(drop.any(-1)):
        raise ValueError(
            f"the baseline loss does not settle below a new level at or after iteration "
            f"{iterations}: choose a smaller converge_at or run longer"
        )
    k = np.argmax(drop, axis=-1)
    hi = np.take_along_axis(v, (k - 1)[..., None], -1)[..., 0]
    lo = np.take_along_axis(suffix_max, k[..., None], -1)[..., 0]
    if np.any(lo <= 0):
        raise ValueError("the baseline loss reaches 0; cannot calibrate a positive eps")
    return np.sqrt(hi * lo)
