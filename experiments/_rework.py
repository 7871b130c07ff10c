"""Shared machinery of the rework-bound experiments (thesis Figs 5.3, 5.5, 5.6).

Each trial perturbs one run; its rework is measured against the unperturbed run with the
same key (same minibatches), on the distance criterion ‖y − w*‖ of Thm 5.3.1; ε is set so
the unperturbed run converges in ``converge_at`` iterations, and c is estimated from the
unperturbed run (as the thesis does: "the value of c is determined empirically").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import jax
import numpy as np

import scarjax
from experiments import _stats
from scarjax import bounds
from scarjax.rework import iterations_to


@dataclass
class ReworkTrials:
    rework: np.ndarray  # [n] measured rework in iterations (inf: never re-converged)
    horizon: np.ndarray  # [n] censoring time: steps − κ(w, ε) of the trial's baseline
    rework_loss: np.ndarray  # [n] the same on the loss criterion (NaN: not measurable)
    horizon_loss: np.ndarray  # [n]
    bound: np.ndarray  # [n] Thm 5.3.1 bound from each trial's measured Δ_T
    bound_restarted: np.ndarray  # [n] the same applied from y(T) (see trace_rework_bound)
    delta_T: np.ndarray  # [n]
    size: np.ndarray  # [n] ‖δ‖ summed over the trial's perturbations
    c: float
    c_fit: float
    c_tail: float
    eps: float
    d0: float


def run_rework_trials(
    algorithm: scarjax.Algorithm,
    hook_factory: Callable[[Any], Any],
    hook_args: Any,
    *,
    steps: int,
    converge_at: int,
    seed: int,
    exact_c: float | None = None,
    restart_at: int | None = None,
    chunk: int = 250,
) -> ReworkTrials:
    """Run ``len(hook_args)`` perturbed trials (in vmapped chunks) and their paired baselines."""
    n = len(jax.tree.leaves(hook_args)[0])
    keys = jax.random.split(jax.random.key(seed), n)
    from experiments._common import progress

    traces = []
    for lo in progress(range(0, n, chunk), desc="trials", total=-(-n // chunk)):
        k = keys[lo : lo + chunk]
        args = jax.tree.map(lambda a: a[lo : lo + chunk], hook_args)
        _, tr = scarjax.run_trials(algorithm, hook_factory, steps, k, hook_args=args)
        traces.append(jax.device_get(tr))
    tr = jax.tree.map(lambda *x: np.concatenate(x), *traces)
    base_d, base_l = baseline_distances(algorithm, steps, seed, n, chunk)
    mean_base = base_d.mean(axis=0)
    # c: the slowest (asymptotic) contraction of the unperturbed run, estimated on its
    # tail — (5.5) must hold wherever a perturbation can put the iterate, and the early
    # transient from w0 contracts faster than the worst case. c_fit: the average rate
    # over the calibration window, for reference.
    c_fit = bounds.estimate_c(mean_base[: converge_at + 1], method="fit")
    c_tail = bounds.estimate_c(mean_base, method="fit", start=converge_at, stop=3 * converge_at + 1)
    c = exact_c if exact_c is not None else c_tail
    eps = float(scarjax.calibrate_eps(mean_base, converge_at, metric="distance"))
    rework = scarjax.rework_cost(tr.distance, base_d, eps, metric="distance")
    horizon = steps - iterations_to(base_d, eps)
    try:
        eps_loss = float(scarjax.calibrate_eps(base_l.mean(axis=0), converge_at, metric="loss"))
        rework_loss = scarjax.rework_cost(tr.loss, base_l, eps_loss, metric="loss")
        horizon_loss = steps - iterations_to(base_l, eps_loss)
    except ValueError:  # loss not strictly decreasing there (SGD noise): not measurable
        rework_loss, horizon_loss = np.full(n, np.nan), np.full(n, np.nan)
    norms = tr.perturbation_norms()
    # The bound from w⁽⁰⁾ (Eq 5.6 as printed, the thesis's figures) and restarted at the
    # perturbation (start=restart_at); both explicit, whatever the library's default.
    bound = bounds.trace_rework_bound(tr, c, start=0)
    bound_restarted = bounds.trace_rework_bound(tr, c, start=restart_at) if restart_at else bound
    with np.errstate(over="ignore"):
        dT = bounds.delta_T(norms, c)
    return ReworkTrials(
        rework=rework,
        horizon=np.asarray(horizon, np.float64),
        rework_loss=rework_loss,
        horizon_loss=np.asarray(horizon_loss, np.float64),
        bound=bound,
        bound_restarted=bound_restarted,
        delta_T=dT,
        size=norms.sum(axis=-1),
        c=float(c),
        c_fit=float(c_fit),
        c_tail=float(c_tail),
        eps=eps,
        d0=float(np.mean(tr.initial_distance)),
    )


def fired_at(make_hook: Callable[..., Any]) -> Callable[[Any], Any]:
    """A ``hook_args -> hook`` factory for :func:`scarjax.run_trials`: ``(size, T)`` per trial
    gives ``make_hook(size, when=<step == T>)``, so both vary across trials in one program."""

    def factory(args):
        size, T = args
        return make_hook(size, when=lambda step, key: step == T)

    return factory


_BASELINES: dict = {}


def baseline_distances(algorithm: scarjax.Algorithm, steps: int, seed: int, n: int, chunk: int = 250) -> np.ndarray:
    """``[n, steps + 1]`` distances and losses of the unperturbed runs with the trials' keys
    (memoised: several panels share one set of baselines)."""
    memo_key = (id(algorithm), steps, seed, n)
    if memo_key not in _BASELINES:
        keys = jax.random.split(jax.random.key(seed), n)
        parts = [jax.device_get(scarjax.run_trials(algorithm, None, steps, keys[lo : lo + chunk])[1]) for lo in range(0, n, chunk)]
        _BASELINES.clear()
        dist = np.concatenate([np.asarray(p.distance) for p in parts])
        loss = np.concatenate([np.asarray(p.loss) for p in parts])
        _BASELINES[memo_key] = (algorithm, dist, loss)
    return _BASELINES[memo_key][1:]


def checks(rework: np.ndarray, horizon: np.ndarray, bound: np.ndarray) -> dict:
    """Trial-by-trial comparison of measured rework with a bound, no trial dropped.

    ``share_under_bound`` (``_plus_1``: with one iteration of slack for integer hitting
    times) is over *all* the given trials, a trial that never re-reached ε counting as not
    under (``under``/``under_plus_1``: the :func:`experiments._stats.bound_check` counts);
    ``median_actual_over_bound`` is over trials with a bound ≥ 1 iteration, censored
    trials at their horizon (``…_is_lower_bound`` when that decides it); likewise
    ``max_actual_minus_bound``; ``share_negative_rework`` counts censored trials as not
    negative; ``rework``: the :func:`experiments._stats.summary`."""
    r = np.asarray(rework, np.float64)
    b = np.asarray(bound, np.float64)
    if r.size == 0:
        return {"n": 0, "rework": None, "under": None, "under_plus_1": None, "share_under_bound": None,
                "share_under_bound_plus_1": None, "median_actual_over_bound": None,
                "median_actual_over_bound_is_lower_bound": False, "max_actual_minus_bound": None,
                "max_actual_minus_bound_is_lower_bound": False, "share_negative_rework": None}
    v, cens = _stats.restricted(r, horizon)
    under, under1 = _stats.bound_check(r, b), _stats.bound_check(r, b, slack=1.0)
    big = b >= 1.0
    med, med_lb = _stats.censored_median(v[big] / b[big], cens[big]) if big.any() else (None, False)
    gap = v - b
    return {
        "n": int(r.size),
        "rework": _stats.summary(r, horizon),
        "under": under,
        "under_plus_1": under1,
        "share_under_bound": under["held"] / r.size,
        "share_under_bound_plus_1": under1["held"] / r.size,
        "median_actual_over_bound": med,
        "median_actual_over_bound_is_lower_bound": med_lb,
        "max_actual_minus_bound": float(np.max(gap)),
        "max_actual_minus_bound_is_lower_bound": bool(cens.any()),
        "share_negative_rework": float(np.mean(~cens & (r < 0))),
    }


def summarize(t: ReworkTrials) -> dict:
    """The numbers REPRODUCTION.md quotes for a rework-vs-bound panel, over the perturbed
    trials (``size > 0``), none dropped: the bound from w⁽⁰⁾ (top level), restarted at the
    perturbation (``restarted_bound``) and on the loss criterion (``loss_criterion``,
    ``None`` where the loss is not measurable); each from :func:`checks`."""
    hit = t.size > 0
    out = checks(t.rework[hit], t.horizon[hit], t.bound[hit])
    out["restarted_bound"] = checks(t.rework[hit], t.horizon[hit], t.bound_restarted[hit])
    ok_l = hit & ~np.isnan(t.rework_loss)
    out["loss_criterion"] = (checks(t.rework_loss[ok_l], t.horizon_loss[ok_l], t.bound[ok_l])
                             if ok_l.any() else None)
    out.update({
        "trials": int(t.rework.size),
        "perturbed_trials": int(hit.sum()),
        "never_reconverged": int((~np.isfinite(t.rework[hit])).sum()),
        "c": t.c,
        "c_fit": t.c_fit,
        "c_tail": t.c_tail,
        "eps": t.eps,
        "d0": t.d0,
    })
    return out


def span(x: np.ndarray, n: int = 200) -> np.ndarray:
    """Log-spaced points covering the positive finite values of ``x`` (for bound curves)."""
    x = np.asarray(x)
    x = x[np.isfinite(x) & (x > 0)]
    lo, hi = (x.min() / 2, x.max() * 2) if x.size else (1e-3, 1.0)
    return np.logspace(np.log10(lo), np.log10(hi), n)


def scatter_panel(ax, x, t: ReworkTrials, xlabel: str, bound_x: np.ndarray, bound_y: np.ndarray, title: str) -> None:
    """Rework vs x with the Thm 5.3.1 bound in red (the thesis's figure style)."""
    hit = t.size > 0
    finite = np.isfinite(t.rework) & hit
    ax.scatter(x[finite], t.rework[finite], s=4, alpha=0.5, color="tab:blue", label="trials")
    cens = ~np.isfinite(t.rework) & hit
    if cens.any():  # never re-converged: drawn at their horizon (a lower bound)
        ax.scatter(x[cens], t.horizon[cens], s=12, marker="^", color="black",
                   label=f"not re-converged ({int(cens.sum())}; at the horizon)")
    ax.plot(bound_x, bound_y, color="red", lw=1.5, label="Thm 5.3.1 bound")
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("rework (iterations)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, loc="upper left")


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return str(x)


def fmt_share(c: dict | None, key: str = "under") -> str:
    """``"0.99 (297 of 300)"`` from a :func:`checks` result, with the trials that never
    re-converged (counted as not under) named."""
    if not c or c.get(key) is None:
        return "–"
    k = c[key]
    out = f"{k['held'] / k['n']:.3g} ({k['held']} of {k['n']}"
    return out + (f"; {k['censored']} never re-converged, counted as not under)" if k["censored"] else ")")


def fmt_count(c: dict | None, key: str = "under") -> str:
    """``"297 of 300"`` (+ the never re-converged, counted as not under) from :func:`checks`."""
    if not c or c.get(key) is None:
        return "–"
    k = c[key]
    return f"{k['held']} of {k['n']}" + (f" ({k['censored']} never re-converged)" if k["censored"] else "")


def fmt_lb(c: dict | None, key: str, digits: int = 3) -> str:
    """``c[key]`` with ``≥`` when ``c[key + '_is_lower_bound']``."""
    if not c or c.get(key) is None:
        return "–"
    return ("≥ " if c.get(key + "_is_lower_bound") else "") + fmt(float(c[key]), digits)
