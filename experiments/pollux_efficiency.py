"""Pollux Figs 3.3/3.4: measured vs predicted statistical efficiency (Eq 3.3) for MLR and a CNN.

Part A (Fig 3.3 in spirit): train at ``M0`` with SGD while the PGNS is estimated from
``K`` micro-batches of every step (:func:`scarjax.pollux.with_pgns`); at checkpoints the
exact PGNS is computed from per-example gradients of the whole data set.  We plot
``phi`` (estimated vs exact) and the predicted ``EFFICIENCY_t(M)`` for two larger batch
sizes against training progress.

Part B (Fig 3.4 in spirit): at an early checkpoint, the *measured* efficiency of a batch
size ``M`` is ``E_M0 / E_M``, where ``E_M`` is the number of examples SGD needs from that
checkpoint to reach the loss that ``n0`` steps at ``M0`` reach (best learning rate from a
grid per ``M``, loss averaged over seeds).  It is compared with Eq 3.3 using the ``phi``
estimated at the median batch size of the range.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import optax

from experiments import _plot
from experiments._common import compiler_options, progress, recorded
from scarjax import pollux as px
from scarjax.pollux import examples

NAME = "pollux_efficiency"
DESCRIPTION = "Pollux Figs 3.3/3.4: PGNS estimate vs exact, measured vs predicted efficiency"


FROZEN_K, FROZEN_B = 8, 32  # micro-batches x their size of each frozen-parameter PGNS draw


@dataclasses.dataclass
class Config:
    problems: tuple[str, ...] = ("mlr", "cnn")
    base_batch_size: int = 32  # M0
    microbatches: int = 4  # K micro-batches of M0/K in every training step
    lr_mlr: float = 4.0  # SGD learning rates (near-optimal at M0)
    lr_cnn: float = 0.1
    train_steps: int = 1500
    checkpoints: int = 10
    pgns_decay: float = 0.95
    frozen_draws: int = 64  # fresh estimates at frozen checkpoint params (FROZEN_K x FROZEN_B)
    measure_problems: tuple[str, ...] = ("mlr", "cnn")  # Part B
    batch_multipliers: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    lr_grid: int = 8  # geometric LR grid eta0 * 2^(j-2), j = 0..lr_grid-1 (at most)
    n0: int = 60  # steps at M0 that define the target loss
    seeds: int = 6  # per (batch size, LR); 4 seeds: ~0.6x the run time, noisier curves
    early_fraction: float = 0.125  # Part B checkpoint: 1/8 of the way through training
    # Part B cost controls (the full run must finish in minutes on 2 CPU cores):
    eval_size: int = 192  # the steps-to-target loss is measured on a fixed random subset
    min_efficiency: float = 0.1  # run ceil(n0 M0 / (M min_eff)) <= n0 steps at M; below: censored
    # Compile every program at XLA's backend optimisation level 0 (~3x less compile time; the
    # same programs, float results may differ in the last bits). The quick run's programs
    # run for milliseconds and take seconds to compile; the full run keeps XLA's default.
    fast_compile: bool = False
    quick_mode: bool = False

    @classmethod
    def quick(cls) -> "Config":  # noqa: D102
        return cls(
            problems=("mlr",),  # the CNN (the costlier problem) is in the full run only
            train_steps=300,
            checkpoints=4,
            frozen_draws=16,
            measure_problems=("mlr",),
            # 1x, 4x and 16x M0: efficiency from 1 down to about 0.4 (every batch size is one
            # compilation of its curves, most of the quick run's time; 2x and 8x in the full run)
            batch_multipliers=(1, 4, 16),
            lr_grid=8,
            seeds=6,  # as the full run (vmapped: little time; 3 seeds left 4x M0 above 1)
            n0=40,
            fast_compile=True,
            quick_mode=True,
        )


def _jit(cfg: Config, f, **kw):
    """``jax.jit(f, **kw)``, at XLA's backend optimisation level 0 when ``cfg.fast_compile``."""
    return jax.jit(f, compiler_options=compiler_options(cfg.fast_compile), **kw)


def _problem(name):
    return examples.mlr() if name == "mlr" else examples.cnn()


def _lr(prob, cfg: Config) -> float:
    return cfg.lr_mlr if prob.name == "mlr" else cfg.lr_cnn


def _train_track(prob, cfg: Config, key):
    """SGD at M0 with the PGNS estimated from K micro-batches per step (Part A)."""
    k, b = cfg.microbatches, cfg.base_batch_size // cfg.microbatches
    opt = px.with_pgns(optax.sgd(_lr(prob, cfg)), microbatch_size=b, decay=cfg.pgns_decay)
    every = max(cfg.train_steps // cfg.checkpoints, 1)

    @functools.partial(_jit, cfg)
    def run_chunk(params, state, key):
        def body(carry, key):
            params, state = carry
            xb, yb = examples.sample_microbatches(key, prob.x, prob.y, k, b)
            g, moments = px.reduce_microbatches(jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb))
            u, state = opt.update(g, state, params, microbatch_moments=moments)
            return (optax.apply_updates(params, u), state), None

        (params, state), _ = jax.lax.scan(body, (params, state), jax.random.split(key, every))
        return params, state, px.pgns_from_state(state)

    @functools.partial(_jit, cfg)
    def exact(params):
        peg = px.per_example_grads(prob.example_loss, params, prob.x, prob.y)
        return px.noise_scale(px.exact_stats(peg)), prob.loss(params, prob.x, prob.y)

    @functools.partial(_jit, cfg)
    def frozen(params, key):  # estimator averaged over draws at fixed params (no lag)
        def one(key):
            xb, yb = examples.sample_microbatches(key, prob.x, prob.y, FROZEN_K, FROZEN_B)
            g = jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb)
            return px.microbatch_stats(g, FROZEN_B)

        st = jax.lax.map(one, jax.random.split(key, cfg.frozen_draws))
        return px.noise_scale(px.GradStats(st.sqr.mean(), st.var.mean()))

    params, state = prob.params, opt.init(prob.params)
    rows, snaps, phi_e = [], {}, float("nan")
    for c in range(cfg.checkpoints + 1):
        phi_x, loss = exact(params)
        key, fk = jax.random.split(key)
        rows.append(
            dict(
                step=c * every,
                epochs=c * every * cfg.base_batch_size / prob.x.shape[0],
                loss=float(loss),
                phi_exact=float(phi_x),
                phi_est=phi_e,
                phi_frozen=float(frozen(params, fk)),
            )
        )
        snaps[c * every] = params
        if c < cfg.checkpoints:
            key, sk = jax.random.split(key)
            params, state, phi_e = run_chunk(params, state, sk)
            phi_e = float(phi_e)
    return rows, snaps


def _measure_efficiency(prob, params, cfg: Config, key):
    """Empirical efficiency E_M0 / E_M from params (Part B) and phi at the median M."""
    m0 = cfg.base_batch_size
    key, ek = jax.random.split(key)
    n_eval = min(cfg.eval_size, prob.x.shape[0])

    @functools.partial(_jit, cfg)
    def eval_subset(ek):  # one program (integer draws and copies: as op by op)
        eval_idx = jax.random.choice(ek, prob.x.shape[0], (n_eval,), replace=False)
        return prob.x[eval_idx], prob.y[eval_idx]

    x_ev, y_ev = eval_subset(ek)

    def lr_grid(mult):
        # eta0 * 2^(j-2): eta0/4 ... eta0 * 2 * mult (the optimal SGD step grows at most
        # linearly in M, Eq A.5), capped at cfg.lr_grid values. float32 powers of two times
        # eta0, exact, in NumPy (no op-by-op compilations).
        n = min(cfg.lr_grid, 4 + int(np.ceil(np.log2(mult))))
        return np.float32(_lr(prob, cfg)) * np.float32(2.0) ** (np.arange(n, dtype=np.float32) - 2)

    def n_steps(mult):
        # Efficiency >= min_efficiency means reaching the target within n0 / (mult min_eff) steps.
        return int(min(cfg.n0, np.ceil(cfg.n0 / (mult * cfg.min_efficiency))))

    def curves(m, lr, key, n_max):
        def body(p, key):
            idx = jax.random.randint(key, (m,), 0, prob.x.shape[0])
            g = jax.grad(prob.loss)(p, prob.x[idx], prob.y[idx])
            p = jax.tree.map(lambda w, d: w - lr * d, p, g)
            return p, prob.loss(p, x_ev, y_ev)

        _, losses = jax.lax.scan(body, params, jax.random.split(key, n_max))
        return losses

    def mean_curves(m, lrs, n_max, key):
        keys = jax.random.split(key, cfg.seeds)
        if prob.name == "mlr":  # tiny ops: vectorise everything
            f = jax.vmap(jax.vmap(lambda lr, k: curves(m, lr, k, n_max), (None, 0)), (0, None))
            return jnp.mean(f(lrs, keys), axis=1)  # [lr, step]
        # CNN: vmapping over parameters turns convolutions into slow grouped ones on CPU
        li, si = (
            a.reshape(-1)
            for a in jnp.meshgrid(jnp.arange(lrs.shape[0]), jnp.arange(cfg.seeds), indexing="ij")
        )
        c = jax.lax.map(lambda ij: curves(m, lrs[ij[0]], keys[ij[1]], n_max), (li, si))
        return jnp.mean(c.reshape(lrs.shape[0], cfg.seeds, n_max), axis=1)

    # One jitted program per (batch size, steps, LR grid size): the M0 baseline and the 1x
    # batch size share theirs (the learning rates are an argument, not a constant).
    curves_of = _jit(cfg, lambda m, lrs, n_max, k: mean_curves(m, lrs, n_max, k), static_argnums=(0, 2))
    key, k0 = jax.random.split(key)
    lrs0 = lr_grid(1)
    base = np.asarray(curves_of(m0, lrs0, cfg.n0, k0))
    base = np.where(np.isfinite(base), base, np.inf)
    target = float(np.min(base[:, -1]))  # best learning rate at M0 after n0 steps
    n_base = cfg.n0
    res = []
    for mult in progress(cfg.batch_multipliers, desc=f"{prob.name} batch sizes"):
        m = m0 * mult
        lrs, n_max = lr_grid(mult), n_steps(mult)
        key, sk = jax.random.split(key)
        c = np.asarray(curves_of(m, lrs, n_max, sk))
        hit = np.where(np.isfinite(c), c, np.inf) <= target * (1 + 1e-6)
        steps = np.where(hit.any(1), hit.argmax(1) + 1, np.inf)
        best = int(np.argmin(steps))
        n_m = float(steps[best])
        if mult == 1:
            n_base = min(n_base, n_m)
        res.append(dict(batch_size=m, steps=n_m, lr=float(lrs[best]), max_steps=n_max, lr_grid=len(lrs)))
    for r in res:
        r["censored"] = not np.isfinite(r["steps"])  # target not reached: efficiency below the bound
        r["measured"] = (n_base * m0) / (
            (r["steps"] if not r["censored"] else r["max_steps"]) * r["batch_size"]
        )

    # phi estimated at the median batch size of the range (Fig 3.4 caption).
    m_med = int(np.median([r["batch_size"] for r in res]))
    k, b = 8, max(m_med // 8, 1)

    @functools.partial(_jit, cfg)
    def phi_median(key):  # phi from 64 draws at the median batch size
        def est(key):
            xb, yb = examples.sample_microbatches(key, prob.x, prob.y, k, b)
            g = jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb)
            return px.microbatch_stats(g, b)

        st = jax.lax.map(est, jax.random.split(key, 64))
        return px.noise_scale(px.GradStats(st.sqr.mean(), st.var.mean()))

    @functools.partial(_jit, cfg)
    def phi_of_all(params):  # the exact phi (a program of its own: as Part A's `exact`)
        return px.noise_scale(px.exact_stats(px.per_example_grads(prob.example_loss, params, prob.x, prob.y)))

    phi_med, phi_exact = float(phi_median(key)), float(phi_of_all(params))
    for r in res:
        r["predicted"] = float(px.efficiency(r["batch_size"], phi_med, m0))
        r["predicted_exact_phi"] = float(px.efficiency(r["batch_size"], phi_exact, m0))
    return dict(
        target_loss=target, phi_median_batch=phi_med, median_batch=m_med, phi_exact=phi_exact, rows=res
    )


@recorded(NAME)
def run(config: Config, out_dir) -> dict:
    t0 = time.perf_counter()
    key = jax.random.PRNGKey(0)
    out = {"config": dataclasses.asdict(config), "problems": {}, "frozen_microbatches": [FROZEN_K, FROZEN_B]}
    for name in config.problems:
        prob = _problem(name)
        key, k1, k2 = jax.random.split(key, 3)
        t_part = time.perf_counter()
        rows, snaps = _train_track(prob, config, k1)
        t_a = time.perf_counter() - t_part
        ratios = [r["phi_est"] / r["phi_exact"] for r in rows[1:]]
        frozen = [r["phi_frozen"] / r["phi_exact"] for r in rows]
        entry = {
            "track": rows,
            "phi_est_over_exact": ratios,
            "phi_frozen_over_exact": frozen,
            "median_abs_rel_error": float(np.median(np.abs(np.array(ratios) - 1))),
            "frozen_median_abs_rel_error": float(np.median(np.abs(np.array(frozen) - 1))),
        }
        if name in config.measure_problems:
            steps = sorted(snaps)
            early = min(steps, key=lambda s: abs(s - config.early_fraction * config.train_steps))
            early = max(early, steps[1])
            m = _measure_efficiency(prob, snaps[early], config, k2)
            m["checkpoint_step"] = early
            errs = [abs(r["predicted"] - r["measured"]) for r in m["rows"][1:] if not r["censored"]]
            m["mean_abs_error"] = float(np.mean(errs)) if errs else float("nan")
            m["seconds"] = time.perf_counter() - t_part - t_a
            m["censored"] = int(sum(r["censored"] for r in m["rows"]))
            entry["measure"] = m
        entry["track_seconds"] = t_a
        out["problems"][name] = entry
    out["seconds"] = time.perf_counter() - t0
    return out


def plot(out: dict, out_dir) -> list:
    """Figs 3.3/3.4 from the results: the PGNS (exact, estimated in training, at frozen
    parameters) with the predicted efficiency of two larger batches over training, and the
    measured against the predicted efficiency per batch size."""
    probs = out["problems"]
    m0 = out["config"]["base_batch_size"]
    fig, axes = _plot.figure(2, len(probs), panel=(5.6, 4.0))
    for j, (name, e) in enumerate(probs.items()):
        tr = e["track"]
        ep = [r["epochs"] for r in tr]
        ax = axes[0, j]
        ax.plot(ep, [r["phi_exact"] for r in tr], "k-o", ms=3, label="phi exact (per-example)")
        ax.plot(
            ep[1:], [r["phi_est"] for r in tr[1:]], "C1--s", ms=3, label="phi estimated in training (EMA)"
        )
        ax.plot(ep, [r["phi_frozen"] for r in tr], "C3x", ms=5, label="phi estimated, frozen params")
        ax2 = ax.twinx()
        for mult, c in ((4, "C0"), (16, "C2")):
            eff = [float(px.efficiency(m0 * mult, r["phi_exact"], m0)) for r in tr]
            ax2.plot(ep, eff, c + ":", label=f"EFFICIENCY_t({mult}xM0)")
            ax2.set_ylim(0, 1.05)
        ax2.set_ylabel("predicted efficiency (Eq 3.3)")
        ax2.legend(loc="lower right")
        ax.set_title(f"{name}: PGNS during training (Fig 3.3)")
        ax.set_xlabel("epochs at M0")
        ax.set_ylabel("phi")
        ax.legend(loc="upper left")
        ax = axes[1, j]
        if "measure" in e:
            rows = e["measure"]["rows"]
            bs = [r["batch_size"] for r in rows]
            unc = [r for r in rows if not r.get("censored")]
            cen = [r for r in rows if r.get("censored")]
            ax.semilogx(
                [r["batch_size"] for r in unc],
                [r["measured"] for r in unc],
                "ko",
                label="measured (examples to target)",
            )
            if cen:
                ax.semilogx(
                    [r["batch_size"] for r in cen],
                    [r["measured"] for r in cen],
                    "kv",
                    label="measured, upper bound (target not reached)",
                )
            ax.semilogx(
                bs,
                [r["predicted"] for r in rows],
                "C1-",
                label=f"predicted, phi at M={e['measure']['median_batch']}",
            )
            ax.semilogx(bs, [r["predicted_exact_phi"] for r in rows], "C0:", label="predicted, exact phi")
            ax.set_ylim(0, 1.1)
            _plot.readable_log(ax, "x")  # the quick run's batch sizes span less than a decade
            ax.set_title(
                f"{name}: efficiency vs batch size (Fig 3.4), step {e['measure']['checkpoint_step']}"
            )
            ax.set_xlabel("batch size M")
            ax.set_ylabel("EFFICIENCY")
            ax.legend()
        else:
            ax.axis("off")
    return [_plot.save(fig, out_dir, NAME)]


def _pct(x) -> str:
    """A relative error as a percentage; ``inf`` (stored as the string ``"inf"``) when the
    median estimate is infinite (the unbiased |g|^2 estimate was <= 0, so phi = inf)."""
    x = float(x)
    return f"{100 * x:.1f}%" if np.isfinite(x) else "inf (|g|² estimate ≤ 0 at most checkpoints)"


def report(res: dict) -> str:
    lines = ["## Pollux: statistical efficiency (Figs 3.3, 3.4)", ""]
    n = res["config"]["frozen_draws"]
    k, b = res.get("frozen_microbatches", (FROZEN_K, FROZEN_B))
    lines.append(
        f"| problem | phi rel. error, estimator at frozen params ({n} draws of {k}x{b}) | "
        "phi rel. error, in-training EMA | mean abs. error measured vs predicted "
        "efficiency |"
    )
    lines.append("|---|---|---|---|")
    for name, e in res["problems"].items():
        meas = e.get("measure", {}).get("mean_abs_error")
        lines.append(
            f"| {name} | {_pct(e['frozen_median_abs_rel_error'])} | "
            f"{_pct(e['median_abs_rel_error'])} | "
            f"{'-' if meas is None else f'{meas:.3f}'} |"
        )
    lines.append("")
    lines.append(
        "Thesis: Eq 3.3 with phi measured at the median batch size 'is able to accurately "
        "model observed values at a range of different batch sizes' (Fig 3.4, no number "
        "given). Ours: the table above; measured efficiency uses the best of a "
        "learning-rate grid per batch size, so it is a lower bound on the optimally-tuned "
        "efficiency the model assumes. The target loss is evaluated on a fixed random "
        f"subset of {res['config'].get('eval_size', 'all')} training examples (the same for "
        "every batch size); batch sizes whose efficiency is below "
        f"{res['config'].get('min_efficiency', 0)} are not run to the end (censored, shown as "
        "upper bounds and left out of the error"
        + "".join(f"; {e['measure'].get('censored', 0)} of {len(e['measure']['rows'])} batch sizes for {name}"
                  for name, e in res["problems"].items() if "measure" in e)
        + ")."
    )
    for name, e in res["problems"].items():
        if "measure" in e:
            rows = e["measure"]["rows"]
            lines.append("")
            lines.append(
                f"{name} (checkpoint step {e['measure']['checkpoint_step']}): "
                + ", ".join(
                    f"M={r['batch_size']}: measured {'<=' if r.get('censored') else ''}{r['measured']:.2f} "
                    f"vs predicted {r['predicted']:.2f}"
                    for r in rows
                )
            )
    if "seconds" in res:
        lines += ["", f"Wall time: {res['seconds']:.0f} s."]
    return "\n".join(lines)


if __name__ == "__main__":
    import sys

    cfg = Config.quick() if "--quick" in sys.argv else Config()
    r = run(cfg, sys.argv[sys.argv.index("--out") + 1] if "--out" in sys.argv else "/tmp/pollux_out")
    print(report(r))
    print(
        {
            k: (
                v.get("frozen_median_abs_rel_error"),
                v.get("median_abs_rel_error"),
                v.get("measure", {}).get("mean_abs_error"),
            )
            for k, v in r["problems"].items()
        },
        r["seconds"],
    )
