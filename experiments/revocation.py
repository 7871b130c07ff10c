"""Rework vs revocation rate, with and without partial-gradient flushing (Sync-on-the-fly
Eq 5; thesis Sec 5.2 perturbation view).

M = 8 data-parallel workers train MLR on digits (full-batch shards, sorted by label so the
shards are non-IID). Each worker is revoked mid-iteration with probability ``rate`` per
step, having finished a uniformly random fraction of its points; with flushing its partial
gradient joins the barrier (Eq 5: the mean over the points actually processed), without it
the worker contributes nothing. The perturbation δ_{k+1} = Δ − Δ_sync is measured every
step and summed into Δ_T for the Thm 5.3.1 bound. One compiled program sweeps both
barriers and every rate (traced).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

import scarjax
from experiments import _common
from experiments._perturbed import revive, CAVEAT, bound_checks, problem, summarise
from scarjax import revocation, rework

NAME = "revocation"
DESCRIPTION = "Rework vs worker revocation rate, with and without Sync-on-the-fly partial-gradient flushing (MLR, M=8)"


@dataclasses.dataclass(frozen=True)
class Config:
    rates: tuple[float, ...] = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7)
    workers: int = 8
    trials: int = 8
    steps: int = 700
    eps_iters: int = 100
    seed: int = 0

    @classmethod
    def quick(cls) -> "Config":
        return cls(rates=(0.0, 0.1, 0.3, 0.7), trials=2, steps=300, eps_iters=80)


def run(config: Config, out_dir) -> dict:
    cfg = config
    if 0.0 not in cfg.rates:
        raise ValueError(f"rates must include 0 (the synchronous reference), got {cfg.rates}")
    alg, c = problem("mlr_noniid")
    n = len(cfg.rates) * cfg.trials
    rates = jnp.tile(jnp.repeat(jnp.asarray(cfg.rates, jnp.float32), cfg.trials), 2)
    flush = jnp.repeat(jnp.asarray([True, False]), n)
    keys = jnp.tile(jax.random.split(jax.random.key(cfg.seed), cfg.trials), 2 * len(cfg.rates))
    # One program: flushing and dropping (traced) × every rate (traced) × trials.
    factory = lambda a: revocation.revocations(cfg.workers, a[0], partial=a[1])  # noqa: E731
    _, tr = scarjax.run_trials(alg, factory, cfg.steps, keys, hook_args=(rates, flush), measure_read_effect=True)
    d0 = float(tr.initial_distance[0])
    i0 = cfg.rates.index(0.0) * cfg.trials
    eps = float(rework.calibrate_eps(np.asarray(tr.distance[i0]), cfg.eps_iters))
    summ = summarise(tr, eps, float(cfg.eps_iters), c, d0)
    points = np.asarray(tr.points, np.float64).mean(-1)
    results = {"config": dataclasses.asdict(cfg), "c": c, "modes": {}}
    for b, mode_name in enumerate(("flush", "drop")):
        mode = {"eps": eps, "d0": d0, "by_rate": {}}
        for j, r in enumerate(cfg.rates):
            sl = slice(b * n + j * cfg.trials, b * n + (j + 1) * cfg.trials)
            mode["by_rate"][str(r)] = {**{k: v[sl] for k, v in summ.items()}, "points": points[sl].tolist()}
        results["modes"][mode_name] = mode
    _common.save_results(out_dir, NAME, results)
    _figure(results, out_dir)
    return results


def _mean(d, r, key):
    v = np.asarray(d["by_rate"][str(r)][key], np.float64)
    fin = v[np.isfinite(v)]
    return (float(fin.mean()) if fin.size else np.inf), int((~np.isfinite(v)).sum())


def _figure(results, out_dir):
    import matplotlib.pyplot as plt

    rates = results["config"]["rates"]
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for mode, col in (("flush", "C0"), ("drop", "C3")):
        d = results["modes"][mode]
        label = "partial gradients flushed (Eq 5)" if mode == "flush" else "revoked contribution lost"
        axes[0].plot(rates, [_mean(d, r, "rework")[0] for r in rates], "o-", color=col, label=label)
        axes[0].plot(rates, [_mean(d, r, "bound")[0] for r in rates], "--", color=col, label="Thm 5.3.1 bound")
        axes[1].semilogy(rates, [_mean(d, r, "final_error")[0] for r in rates], "o-", color=col, label=label)
        axes[2].plot(rates, [_mean(d, r, "points")[0] for r in rates], "o-", color=col, label=label)
    axes[0].set_title("rework to ε vs revocation rate")
    axes[1].set_title("final ‖w − w*‖")
    axes[2].set_title("points merged per barrier (of 1797)")
    for ax in axes:
        ax.set_xlabel("revocation rate per worker per iteration")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("iterations")
    fig.tight_layout()
    _common.save_figure(fig, out_dir, NAME)


def _g(x):
    return "∞" if not np.isfinite(x) else f"{x:.3g}"


def report(results: dict) -> str:
    results = revive(results)
    cfg = results["config"]
    rates = cfg["rates"]
    lines = [
        "## Revoked workers and partial-gradient barriers (Sync-on-the-fly Eq 5)",
        "",
        "**Claim.** Sync-on-the-fly: the barrier may average over whatever partial gradients the workers have "
        "(Eq 5, θ = mean over the processed points), so revocations cost little convergence; the paper reports "
        "up to 5× speed-up over Spark's checkpoint-recompute and finishing with 30–50% more time than without "
        "revocations. In SCAR's terms a lost or partial contribution is a perturbation δ_{k+1} = Δ − Δ_sync, "
        "bounded by Thm 5.3.1.",
        "",
        f"**Measured** (MLR/digits full batch, c = {results['c']:.4f}, M = {cfg['workers']} workers on label-sorted "
        f"(non-IID) shards, {cfg['trials']} trials; rework to the ε the synchronous run reaches at {cfg['eps_iters']} "
        "iterations; cells: mean rework ≤ mean Thm 5.3.1 bound (final error; mean points merged per barrier):",
        "",
        "| barrier | " + " | ".join(f"rate {r:g}" for r in rates) + " |",
        "|---|" + "---|" * len(rates),
    ]
    for mode in ("flush", "drop"):
        d = results["modes"][mode]
        cells = []
        for r in rates:
            rw, n_inf = _mean(d, r, "rework")
            cells.append(
                f"{_g(rw)} ≤ {_g(_mean(d, r, 'bound')[0])} (err {_mean(d, r, 'final_error')[0]:.1e}; "
                f"{_mean(d, r, 'points')[0]:.0f} pts)" + (f" [{n_inf} never]" if n_inf else "")
            )
        lines.append(f"| {'flush partial (Eq 5)' if mode == 'flush' else 'drop revoked'} | " + " | ".join(cells) + " |")
    finite_rates = [r for r in rates if np.isfinite(_mean(results["modes"]["flush"], r, "rework")[0])]
    rmax = finite_rates[-1] if finite_rates else rates[-1]
    f_rw, _ = _mean(results["modes"]["flush"], rmax, "rework")
    d_rw, _ = _mean(results["modes"]["drop"], rmax, "rework")
    ok_r, ok_i, n = bound_checks([results["modes"][m]["by_rate"][str(r)] for m in ("flush", "drop") for r in rates])
    lines += [
        "",
        f"Over the {n} trials that reached ε, the iteration bound held in {ok_i} and the rework bound in {ok_r}. " + CAVEAT,
        "",
        f"At rate {rmax:g}, flushing partial gradients costs {_g(f_rw)} extra iterations against {_g(d_rw)} when the "
        "revoked workers' contributions are dropped. Rate 0 is synchronous training exactly (tests/test_revocation.py). "
        "We do not reproduce the paper's wall-clock results (Spark, EC2 spot market); the claim checked is the "
        "convergence side: with Eq 5 barriers, revocations are small, self-correcting perturbations.",
    ]
    lines += ["", f"![{NAME}]({NAME}.png)"]
    return "\n".join(lines)
