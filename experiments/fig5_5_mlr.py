"""Thesis Fig 5.5: rework of MLR for (a) random Gaussian and (b) adversarial perturbations.

MLR trained by full-batch gradient descent on scikit-learn's 1,797 digits (the thesis uses
minibatches of 10,000 of MNIST's 60,000; ``Config.batch_size`` switches to minibatch SGD).
One perturbation at iteration 50 per trial; ε is set so that an unperturbed trial
converges in ~100 iterations; c is the local linear rate at w* (also fitted empirically).
Red: the Thm 5.3.1 bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from experiments import _common, _rework
from scarjax import bounds, hooks
from scarjax.models import mlr

NAME = "fig5_5_mlr"
DESCRIPTION = "Fig 5.5 (a,b): MLR rework for random and adversarial perturbations vs the Thm 5.3.1 bound"


@dataclass
class Config:
    trials: int = 300
    steps: int = 300
    perturb_at: int = 50
    converge_at: int = 100
    batch_size: int | None = None
    std_range: tuple[float, float] = (1e-3, 0.3)
    size_range: tuple[float, float] = (1e-2, 10.0)
    seed: int = 0

    @classmethod
    def quick(cls) -> "Config":
        return cls(trials=40)


def model(batch_size: int):
    """MLR on digits with its optimum (the full-data minimiser) attached."""
    full = mlr.solve_optimum(mlr.digits())
    return mlr.digits(batch_size=batch_size).replace(optimum=full.optimum)


def run(config: Config, out_dir) -> dict:
    plt = _common.pyplot()
    alg = model(config.batch_size)
    rng = np.random.default_rng(config.seed)
    n = config.trials
    T = jnp.full(n, config.perturb_at)
    stds = jnp.asarray(np.exp(rng.uniform(*np.log(config.std_range), size=n)), jnp.float32)
    sizes = jnp.asarray(np.exp(rng.uniform(*np.log(config.size_range), size=n)), jnp.float32)
    kw = dict(steps=config.steps, converge_at=config.converge_at, seed=config.seed, restart_at=config.perturb_at, exact_c=bounds.local_contraction(alg))
    rand = _rework.run_rework_trials(alg, _rework.fired_at(hooks.gaussian), (stds, T), **kw)
    adv = _rework.run_rework_trials(alg, _rework.fired_at(hooks.adversarial), (sizes, T), **kw)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for ax, t, title in ((axes[0], rand, "(a) random Gaussian"), (axes[1], adv, "(b) adversarial (away from w*)")):
        xs = _rework.span(t.delta_T)
        _rework.scatter_panel(ax, t.delta_T, t, "Δ_T", xs, bounds.rework_bound(xs, t.d0, t.c), title)
        ok = np.isfinite(t.rework)
        ax.scatter(t.delta_T[ok], t.bound_restarted[ok], s=3, color="orange", alpha=0.6, label="bound restarted at k=50")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"Fig 5.5 — MLR (digits, batch {config.batch_size or 'full'}), perturbation at k={config.perturb_at}, {n} trials", fontsize=10)
    _common.save_figure(fig, out_dir, NAME)
    results = {"config": vars(config), "random": _rework.summarize(rand), "adversarial": _rework.summarize(adv)}
    _common.save_results(out_dir, NAME, results)
    return results


def report(results: dict) -> str:
    r, a = results["random"], results["adversarial"]
    f = _rework.fmt
    rr, ar = r["restarted_bound"], a["restarted_bound"]
    return f"""## Fig 5.5 — MLR rework for random and adversarial perturbations (`{NAME}`)

![fig]({NAME}.png)

Setup: MLR by full-batch gradient descent on scikit-learn digits (lr 1, ridge 0.01, w⁽⁰⁾ = 0),
one perturbation at iteration {results['config']['perturb_at']}, ε set so an unperturbed run converges in
{results['config']['converge_at']} iterations (ε = {f(r['eps'])} in ‖y − w*‖), {r['trials']} trials per panel.
c = {f(r['c'], 4)} is the local rate of the update map at w* (`bounds.local_contraction`, i.e.
max|1 − ηλ(∇²L(w*))|); the empirical fits of the unperturbed run give {f(r['c_fit'], 4)} (first
{results['config']['converge_at']} iterations) and {f(r['c_tail'], 4)} (its tail).

| panel | thesis | ours: bound from w⁽⁰⁾ (Eq 5.6 as printed) | ours: bound restarted at k = 50 |
|---|---|---|---|
| (a) random: trials at or under the bound | "a loose upper bound" | {f(r['share_under_bound'])} | {f(rr['share_under_bound'])} |
| (a) random: median actual/bound | small (loose) | {f(r['median_actual_over_bound'])} | {f(rr['median_actual_over_bound'])} |
| (a) random: negative rework | "we do not observe any" | {f(r['share_negative_rework'])} of trials | |
| (b) adversarial: trials at or under the bound | under, "much closer" | {f(a['share_under_bound'])} | {f(ar['share_under_bound'])} (+1: {f(ar['share_under_bound_plus_1'])}) |
| (b) adversarial: median actual/bound | close to 1 | {f(a['median_actual_over_bound'])} | {f(ar['median_actual_over_bound'])} |

**Where we differ, and why.** Eq 5.6 compares iteration *bounds* κ(y) − κ(w). From w⁽⁰⁾ = 0, MLR
first contracts much faster than its worst-case rate c (the early iterations fit
{f(r['c_fit'], 4)}), so the unperturbed run reaches ε long before κ(w) predicts, and measured
rework (against the actual unperturbed run) can exceed the printed bound. Applying the
same theorem from the perturbed iterate's predecessor y⁽⁵⁰⁾ (`trace_rework_bound(..., start=50)`,
valid because Thm 5.3.1 holds from any start) removes that slack: adversarial and reset
perturbations then sit under the bound and close to it, as the thesis reports. Large
random perturbations can still exceed it: with lr = 1, (5.5) holds near w* but not far
from it (the cross-entropy curvature there exceeds 2/η), which the thesis's assumption
rules out. On the loss criterion (the thesis's MLR criterion), shares under the printed
bound are {f(r['loss_criterion']['share_under_bound'])} (random) and {f(a['loss_criterion']['share_under_bound'])} (adversarial).
Digits replace MNIST (embedded, offline) and full-batch GD replaces the thesis's
1/6-of-the-data minibatches, so that the linear-convergence premise and c are well defined.
"""
