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
from scarjax import bounds


@dataclass
class ReworkTrials:
    rework: np.ndarray  # [n] measured rework in iterations (inf: never re-converged)
    rework_loss: np.ndarray  # [n] the same on the loss criterion
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
    c_fit = bounds.estimate_c(mean_base[: converge_at + 1])
    c_tail = bounds.estimate_c(mean_base, start=converge_at, stop=3 * converge_at + 1)
    c = exact_c if exact_c is not None else c_tail
    eps = float(scarjax.calibrate_eps(mean_base, converge_at))
    rework = scarjax.rework_cost(tr.distance, base_d, eps)
    try:
        eps_loss = float(scarjax.calibrate_eps(base_l.mean(axis=0), converge_at))
        rework_loss = scarjax.rework_cost(tr.loss, base_l, eps_loss)
    except ValueError:  # loss not strictly decreasing there (SGD noise): not measurable
        rework_loss = np.full(n, np.nan)
    norms = tr.perturbation_norms()
    bound = bounds.trace_rework_bound(tr, c)
    bound_restarted = bounds.trace_rework_bound(tr, c, start=restart_at) if restart_at else bound
    with np.errstate(over="ignore"):
        dT = bounds.delta_T(norms, c)
    return ReworkTrials(
        rework=rework,
        rework_loss=rework_loss,
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


def summarize(t: ReworkTrials) -> dict:
    """The numbers REPRODUCTION.md quotes for a rework-vs-bound panel."""
    finite = np.isfinite(t.rework)
    hit = t.size > 0
    r, b = t.rework[hit & finite], t.bound[hit & finite]
    big = b >= 1.0
    ok_l = hit & np.isfinite(t.rework_loss)
    rl, bl = t.rework_loss[ok_l], t.bound[ok_l]
    bigl = bl >= 1.0
    br = t.bound_restarted[hit & finite]
    return {
        "restarted_bound": {
            "share_under_bound": float(np.mean(r <= br)) if r.size else None,
            "share_under_bound_plus_1": float(np.mean(r <= br + 1)) if r.size else None,
            "median_actual_over_bound": float(np.median(r[br >= 1] / br[br >= 1])) if (br >= 1).any() else None,
        },
        "loss_criterion": {
            "share_under_bound": float(np.mean(rl <= bl)) if rl.size else None,
            "median_actual_over_bound": float(np.median(rl[bigl] / bl[bigl])) if bigl.any() else None,
            "share_negative_rework": float(np.mean(rl < 0)) if rl.size else None,
            "never_reconverged": int((~np.isfinite(t.rework_loss)).sum()),
        },
        "trials": int(t.rework.size),
        "perturbed_trials": int(hit.sum()),
        "never_reconverged": int((~finite).sum()),
        "share_under_bound": float(np.mean(r <= b)) if r.size else None,
        "share_under_bound_plus_1": float(np.mean(r <= b + 1)) if r.size else None,
        "share_negative_rework": float(np.mean(r < 0)) if r.size else None,
        "median_actual_over_bound": float(np.median(r[big] / b[big])) if big.any() else None,
        "max_actual_minus_bound": float(np.max(r - b)) if r.size else None,
        "c": t.c,
        "c_fit": t.c_fit,
        "c_tail": t.c_tail,
        "eps": t.eps,
        "d0": t.d0,
    }


def span(x: np.ndarray, n: int = 200) -> np.ndarray:
    """Log-spaced points covering the positive finite values of ``x`` (for bound curves)."""
    x = np.asarray(x)
    x = x[np.isfinite(x) & (x > 0)]
    lo, hi = (x.min() / 2, x.max() * 2) if x.size else (1e-3, 1.0)
    return np.logspace(np.log10(lo), np.log10(hi), n)


def scatter_panel(ax, x, t: ReworkTrials, xlabel: str, bound_x: np.ndarray, bound_y: np.ndarray, title: str) -> None:
    """Rework vs x with the Thm 5.3.1 bound in red (the thesis's figure style)."""
    finite = np.isfinite(t.rework) & (t.size > 0)
    ax.scatter(x[finite], t.rework[finite], s=4, alpha=0.5, color="tab:blue", label="trials")
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
