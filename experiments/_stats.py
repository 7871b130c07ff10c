"""Censoring-aware statistics of rework: no trial is ever dropped.

A trial that never re-reaches ε within its run has rework ``inf`` (Eq 5.4 measured on a
finite trace, :func:`scarjax.rework_cost`): it is *right-censored* — all we know is that
its rework exceeds the iterations the run had left after the baseline converged, its
*horizon* ``h = steps − κ(w, ε)``. Averaging the re-converged trials only would report
the easy cases as if they were all of them. Every experiment therefore summarises a cell
(one setting's trials) with :func:`summary`:

* ``n`` trials and ``censored`` (never re-converged), always reported;
* the **restricted mean** ``mean(min(rework, h))``: censored trials count at their
  horizon. It is the exact mean of the re-convergence costs truncated at the horizon,
  and a *lower bound* on the mean rework whenever a trial is censored
  (``mean_is_lower_bound``; printed ``≥ x``);
* a 95% **Student-t** confidence interval (half-width ``ci``) on the restricted values —
  the interval of the restricted mean, so with censoring it too describes a lower bound;
* the **median** of the restricted values, ``≥`` (``median_is_lower_bound``) unless it is
  the same whatever the censored trials' true reworks are (e.g. fewer than half censored,
  all at horizons above the median).

:func:`bound_check` counts a Thm 5.3.1-style check "rework ≤ bound" over *all* trials: a
censored trial is never shown under a bound (``held`` excludes it, ``n`` includes it).

Both take ``horizon`` explicitly (a scalar or one value per trial): the censoring time is a
property of each experiment's run length, never guessed from the data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["restricted", "summary", "summaries", "censored_median", "bound_check", "fmt_value", "fmt_mean",
           "fmt_cell", "fmt_check", "fmt_g", "fmt_share", "fmt_count", "fmt_lb", "reduction", "fmt_reduction", "LEVEL"]

LEVEL = 0.95  # confidence level of every interval (the thesis: 95% CIs)


def restricted(rework: Any, horizon: Any) -> tuple[np.ndarray, np.ndarray]:
    """``(values, censored)``: ``rework`` with every ``+inf`` (never re-converged) replaced
    by its ``horizon``, and the boolean mask of those trials.

    Args:
      rework: measured rework per trial (iterations or any time unit; ``+inf``: never
        re-reached ε). Must be non-empty and contain neither NaN nor ``-inf``.
      horizon: the censoring time (the rework a trial would have if it re-converged at the
        last iteration of the run: ``steps − κ(w, ε)``), a scalar or an array broadcastable
        to ``rework``; finite, ``>= 0`` and at least every finite rework of its trial.

    Raises:
      ValueError: naming ``rework`` or ``horizon``.
    """
    r = np.asarray(rework, dtype=np.float64)
    if r.size == 0:
        raise ValueError("rework must hold at least one trial, got an empty array")
    if np.any(np.isnan(r)):
        raise ValueError(f"rework contains NaN ({int(np.isnan(r).sum())} of {r.size}): a diverged or unmeasured "
                         "trial must be inf (never re-converged), not NaN")
    if np.any(r == -np.inf):
        raise ValueError("rework contains -inf: the baseline never converged (recalibrate eps)")
    try:
        h = np.broadcast_to(np.asarray(horizon, dtype=np.float64), r.shape)
    except (ValueError, TypeError) as e:
        raise ValueError(f"horizon must be a number or broadcast to rework's shape {r.shape}, "
                         f"got {np.shape(horizon)}") from e
    if np.any(~np.isfinite(h)) or np.any(h < 0):
        bad = h[~np.isfinite(h) | (h < 0)].ravel()[0]
        raise ValueError(f"horizon must be finite and >= 0 (run length minus the baseline's iterations to eps), "
                         f"got {bad!r}")
    cens = np.isinf(r)
    over = ~cens & (r > h)
    if np.any(over):
        i = np.flatnonzero(over.ravel())[0]
        raise ValueError(f"horizon {h.ravel()[i]:.6g} is below a finite rework {r.ravel()[i]:.6g}: a trial that "
                         "re-converged shows the run had at least that much left; pass the run's real horizon")
    return np.where(cens, h, r), cens


def censored_median(values: Any, censored: Any) -> tuple[float, bool]:
    """``(median, is_lower_bound)`` of ``values`` where the ``censored`` entries are lower
    bounds (true value ≥ the entry): the median with censored entries at their values,
    flagged as a lower bound unless it equals the median with them at ``+inf``."""
    v = np.asarray(values, dtype=np.float64).ravel()
    c = np.broadcast_to(np.asarray(censored, bool), np.shape(values)).ravel()
    lo = float(np.median(v))
    if not c.any():
        return lo, False
    hi = float(np.median(np.where(c, np.inf, v)))
    return lo, bool(hi != lo)


def summary(rework: Any, horizon: Any, level: float = LEVEL) -> dict:
    """Censoring-aware summary of one cell's trials (see the module docstring).

    Returns a JSON-ready dict: ``n``, ``censored``, ``mean`` (restricted mean),
    ``mean_is_lower_bound``, ``ci`` (Student-t half-width at ``level`` on the restricted
    values; ``inf`` with a single trial), ``median``, ``median_is_lower_bound``,
    ``horizon`` (the smallest horizon of the cell), ``level``.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    v, cens = restricted(rework, horizon)
    v, cens = v.ravel(), cens.ravel()
    n = v.size
    mean = float(v.mean())
    if n > 1:
        # scipy's submodules are slow to import and needed only here
        from scipy import stats

        sd = float(v.std(ddof=1))
        ci = float(stats.t.ppf(0.5 + level / 2, n - 1) * sd / math.sqrt(n))
    else:
        ci = math.inf
    med, med_lb = censored_median(v, cens)
    h = np.broadcast_to(np.asarray(horizon, np.float64), np.shape(rework)).ravel()
    return {
        "n": int(n),
        "censored": int(cens.sum()),
        "mean": mean,
        "mean_is_lower_bound": bool(cens.any()),
        "ci": ci,
        "median": med,
        "median_is_lower_bound": med_lb,
        "horizon": float(h.min()),
        "level": float(level),
    }


def summaries(rework: Any, horizon: Any, level: float = LEVEL) -> list:
    """:func:`summary` of every cell of ``rework[..., trials]`` (the last axis holds the
    trials; ``horizon`` broadcasts against ``rework``), as nested lists over the leading
    axes."""
    r = np.asarray(rework, dtype=np.float64)
    if r.ndim == 0:
        raise ValueError("rework must have a trial axis (the last), got a scalar")
    h = np.broadcast_to(np.asarray(horizon, np.float64), r.shape) if np.ndim(horizon) else horizon
    if r.ndim == 1:
        return summary(r, h, level)
    return [summaries(r[i], h[i] if np.ndim(h) else h, level) for i in range(r.shape[0])]


def bound_check(rework: Any, bound: Any, *, slack: float = 0.0) -> dict:
    """How many trials are *shown* under their bound: ``rework ≤ bound + slack`` with a
    finite rework. A censored trial (``rework = inf``) is counted in ``n`` and never in
    ``held``, whatever its bound; a NaN bound holds nothing.

    Returns ``{"held", "n", "censored", "slack"}``.
    """
    r = np.asarray(rework, dtype=np.float64).ravel()
    b = np.broadcast_to(np.asarray(bound, dtype=np.float64), np.shape(rework)).ravel()
    if np.any(np.isnan(r)):
        raise ValueError("rework contains NaN: a trial that never re-converged must be inf")
    if not math.isfinite(slack) or slack < 0:
        raise ValueError(f"slack must be finite and >= 0, got {slack!r}")
    fin = np.isfinite(r)
    with np.errstate(invalid="ignore"):
        held = fin & (r <= b + slack)
    return {"held": int(held.sum()), "n": int(r.size), "censored": int((~fin).sum()), "slack": float(slack)}


# ----------------------------------------------------------------------------- formatting


def fmt_value(x: Any, digits: int = 3) -> str:
    """A number for a Markdown table (``–`` for None/NaN, ``∞`` for inf)."""
    if x is None:
        return "–"
    x = float(x)
    if math.isnan(x):
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    return f"{x:.{digits}g}" if abs(x) < 10**digits else f"{x:.{max(digits - 1, 1)}e}"


def fmt_mean(s: dict, digits: int = 3, ci: bool = False) -> str:
    """``"x"`` or ``"≥ x"`` (restricted mean, a lower bound when a trial is censored),
    with ``± ci`` when asked."""
    out = ("≥ " if s["mean_is_lower_bound"] else "") + fmt_value(s["mean"], digits)
    if ci and s["n"] > 1:
        out += f" ± {fmt_value(s['ci'], 2)}"
    return out


def fmt_cell(s: dict, digits: int = 3, ci: bool = False) -> str:
    """The restricted mean with the censored count when there is one:
    ``"12.5"`` or ``"≥ 340 (3 of 8 not re-converged)"``."""
    out = fmt_mean(s, digits, ci)
    if s["censored"]:
        out += f" ({s['censored']} of {s['n']} not re-converged)"
    return out


def fmt_check(c: dict, what: str = "held") -> str:
    """``"held in 91 of 112 (21 never re-converged, counted as not held)"``."""
    out = f"{what} in {c['held']} of {c['n']}"
    if c["censored"]:
        out += f" ({c['censored']} never re-converged, counted as not shown under the bound)"
    return out


def fmt_g(x: Any, digits: int = 3) -> str:
    """``x`` with ``digits`` significant digits (``%g``) when a float, ``–`` for None, else ``str(x)``."""
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def fmt_share(c: dict | None, key: str = "under") -> str:
    """``"0.99 (297 of 300)"`` from a ``_rework.summarize`` result's :func:`bound_check`
    ``c[key]``, with the trials that never re-converged (counted as not under) named."""
    if not c or c.get(key) is None:
        return "–"
    k = c[key]
    out = f"{k['held'] / k['n']:.3g} ({k['held']} of {k['n']}"
    return out + (f"; {k['censored']} never re-converged, counted as not under)" if k["censored"] else ")")


def fmt_count(c: dict | None, key: str = "under") -> str:
    """``"297 of 300"`` (+ the never re-converged, counted as not under) from ``c[key]``."""
    if not c or c.get(key) is None:
        return "–"
    k = c[key]
    return f"{k['held']} of {k['n']}" + (f" ({k['censored']} never re-converged)" if k["censored"] else "")


def fmt_lb(c: dict | None, key: str, digits: int = 3) -> str:
    """``c[key]`` with ``≥`` when ``c[key + '_is_lower_bound']``."""
    if not c or c.get(key) is None:
        return "–"
    return ("≥ " if c.get(key + "_is_lower_bound") else "") + fmt_g(float(c[key]), digits)


def reduction(ours: dict, base: dict) -> dict:
    """Rework reduction ``100·(1 − ours/base)`` (%) of two :func:`summary` cells, and how
    the censoring qualifies it: ``relation`` is ``'='`` (no trial censored), ``'≤'`` or
    ``'≥'`` (the true reduction lies on that side of ``pct``), or ``'?'`` (both cells
    censored: no direction); ``pct`` is None when ``base``'s mean is not positive."""
    p, f = float(ours["mean"]), float(base["mean"])
    if not f > 0:
        return {"pct": None, "relation": "?", "censored": ours["censored"], "base_censored": base["censored"]}
    pct = 100.0 * (1.0 - p / f)
    lp, lf = ours["mean_is_lower_bound"], base["mean_is_lower_bound"]
    if lp and lf:
        rel = "?"
    elif lp:  # ours is larger than measured: the reduction is smaller
        rel = "≤"
    elif lf:  # base is larger than measured: 1 − p/f grows with f when p > 0, shrinks when p < 0
        rel = "≥" if p > 0 else ("=" if p == 0 else "≤")
    else:
        rel = "="
    return {"pct": pct, "relation": rel, "censored": int(ours["censored"]), "base_censored": int(base["censored"])}


def fmt_reduction(r: dict | None) -> str:
    """``"42%"``, ``"≤ 42%"``, ``"≥ 42%"`` or ``"42%?"`` (both cells censored: no direction);
    ``–`` when undefined; a trailing ``*`` marks a reduction above 100% (negative mean rework
    of ours, inside the model's noise)."""
    if r is None or r.get("pct") is None:
        return "–"
    v = f"{r['pct']:.0f}%" + ("*" if r["pct"] > 100 else "")  # > 100%: our mean rework is negative
    return {"=": v, "≤": f"≤ {v}", "≥": f"≥ {v}"}.get(r["relation"], f"{v}?")
