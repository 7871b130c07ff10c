"""Thesis Fig 5.6: rework when a random fraction of parameters is reset to its initial
values (the perturbation partial recovery from an initial checkpoint causes, Sec 5.5.2),
(a) MLR and (b) LDA.

(a) MLR, same setting as Fig 5.5: one reset at iteration 50 per trial, ε so an
unperturbed run converges in ~100 iterations, c empirical, Thm 5.3.1 bound in red.

(b) LDA (``experiments._scar`` model ``lda_synthetic``: collapsed Gibbs on the embedded
8,000-token corpus). A uniformly random fraction of the *documents* is reset at sweep
``lda_perturb_at``: their ``n_dk`` rows and their tokens' assignments ``z`` go back to the
initial state and the counts are rebuilt from ``z`` (Sec 5.5.1's co-location; exactly a
partial recovery from the checkpoint ``w⁽⁰⁾``, :func:`scarjax.scar.faults.failure`). The
settings are Fig 5.5's scaled to the sampler's time scale: perturbation half-way to
convergence, ε per trial so the unperturbed run (same key) converges at
``lda_converge_at`` sweeps; rework on the loss (corpus NLL) criterion, the sampler
having no fixed point. For Thm 5.3.1 the distances are the length-scaled TV norm of the
model to ``w*`` = each chain's mean ``n_dk`` over its last sweeps (the posterior-mean
counts), measured on ``lda_chains`` independent unperturbed chains; c is the empirical
linear rate of their mean distance over ``[lda_perturb_at, lda_converge_at]`` (the
thesis: "the value of c is determined empirically"). ``Δ_T`` is the measured ‖δ_T‖ of
each reset (:func:`scarjax.bounds.delta_T`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from experiments import _scar
import scarjax
from experiments import _common, _plot, _problems, _rework, _stats
from scarjax import bounds, perturb
from scarjax.scar import faults as F
from scarjax.rework import calibrate_near, iterations_to

NAME = "fig5_6_reset"
DESCRIPTION = "Fig 5.6 (a,b): MLR and LDA rework after resetting a random fraction of parameters to init, vs the bound"


@dataclass
class Config:
    trials: int = 300
    steps: int = 300
    perturb_at: int = 50
    converge_at: int = 100
    batch_size: int | None = None
    seed: int = 1
    # Panel (b), LDA (model experiments._scar.MODELS["lda_synthetic"]).
    lda: bool = True
    lda_trials: int = 300
    lda_steps: int = 50
    lda_perturb_at: int = 7
    lda_converge_at: int = 15
    lda_chains: int = 32  # unperturbed chains measuring the TV distance to w* (for c)
    lda_chain_steps: int = 150  # their length; w* = mean n_dk over the last third
    chunk: int | None = None  # panel (a)'s trials per compiled program (None: experiments._common.trial_chunk)

    @classmethod
    def quick(cls) -> "Config":
        # Panel (a) in one chunk of 40, as fig5_5_mlr's quick panels (the same compiled programs).
        return cls(trials=40, chunk=40, lda_trials=16, lda_steps=40, lda_chains=4, lda_chain_steps=60)


def _tv_distance_curve(alg, n_chains: int, steps: int, seed: int) -> np.ndarray:
    """``[steps + 1]``: mean over ``n_chains`` unperturbed Gibbs chains of the
    length-scaled TV distance ``‖n_dk⁽ᵏ⁾ − w*‖`` (the model's norm, Sec 5.5.1) to each
    chain's own ``w*`` = its mean ``n_dk`` over the last third of the run."""

    def chain(key):
        k0, k = jax.random.split(key)
        s0 = alg.init(k0, alg.data)

        def body(s, kk):
            delta, s2 = alg.update(s.params, s, alg.data, kk)
            s2 = s2._replace(params=s.params + delta)
            return s2, s2.params

        _, ps = jax.lax.scan(body, s0, jax.random.split(k, steps))
        ps = jnp.concatenate([s0.params[None], ps])
        w_star = ps[-(steps // 3):].mean(0)
        return jax.vmap(lambda p: alg.norm(p - w_star))(ps)

    keys = jax.random.split(jax.random.key(seed + 7919), n_chains)
    return np.asarray(jax.jit(jax.vmap(chain))(keys)).mean(0)


def lda_panel(config: Config) -> dict:
    """Fig 5.6(b): ``lda_trials`` LDA runs, each resetting a uniformly random fraction of
    the documents (rows of ``n_dk`` with their tokens' ``z``) to ``w⁽⁰⁾`` at
    ``lda_perturb_at``; rework on the loss criterion against the same-key unperturbed run;
    the Thm 5.3.1 bound from ``w⁽⁰⁾`` (Eq 5.6) and restarted at ``T``. Returns arrays
    (``fraction``, ``rework``, ``delta_T``, ``size``, ``bound``, ``bound_restarted``) and
    scalars (``c``, ``d0``, ``dT``, ``eps``)."""
    spec, alg, part = _scar.setup("lda_synthetic")
    n, T, N = config.lda_trials, config.lda_perturb_at, config.lda_converge_at
    if not 0 < T < N < config.lda_steps:
        raise ValueError(f"need 0 < lda_perturb_at < lda_converge_at < lda_steps, got {T}, {N}, {config.lda_steps}")
    rng = np.random.default_rng(config.seed + 1)
    fractions = rng.uniform(0.0, 1.0, size=n).astype(np.float32)
    failure = F.Failure(fraction=0.5, when=T)

    def factory(f):
        return F.failure(part, failure.replace(fraction=f), recovery="partial",
                         after_recovery=spec.after_recovery, name="reset")

    keys = jax.random.split(jax.random.key(config.seed), n)
    # One program for the perturbed runs and their baselines: resetting a fraction 0 of
    # the documents changes nothing (the counts rebuilt from unchanged z are the same
    # whole numbers), so those runs are the unperturbed same-key runs.
    args = jnp.concatenate([jnp.asarray(fractions), jnp.zeros(n, jnp.float32)])
    _, both = scarjax.run_trials(alg, factory, config.lda_steps, jnp.concatenate([keys, keys]), hook_args=args)
    tr = jax.tree.map(lambda x: x[:n], both)
    loss, base_loss = np.asarray(tr.loss), np.asarray(both.loss)[n:]
    eps = calibrate_near(base_loss, N)
    rework = scarjax.rework_cost(loss, base_loss, eps, metric="loss")
    horizon = config.lda_steps - iterations_to(base_loss, eps)
    # c and the distances to w* (in the model's norm) from independent unperturbed chains
    # (the fitted rate, as the thesis determines c "empirically").
    dist = _tv_distance_curve(alg, config.lda_chains, config.lda_chain_steps, config.seed)
    c = bounds.estimate_c(dist, method="fit", start=T, stop=N + 1)
    norms = np.asarray(tr.perturbation_norms(), np.float64)
    with np.errstate(over="ignore"):
        dT = bounds.delta_T(norms, c)
    size = norms.sum(-1)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    corpus = {"documents": int(alg.data["doc_lengths"].shape[0]), "tokens": int(alg.data["tokens"].shape[0]),
              "words": int(s0.aux.n_wk.shape[0]), "topics": int(s0.params.shape[1])}
    return {
        "fraction": fractions, "rework": rework, "horizon": horizon, "delta_T": dT, "size": size, "corpus": corpus,
        "bound": bounds.rework_bound(dT, dist[0], c),
        "bound_restarted": bounds.rework_bound(size, dist[T], c),
        "c": float(c), "d0": float(dist[0]), "dT": float(dist[T]), "eps": float(np.mean(eps)),
        "distance_curve": dist,
    }


def _lda_summary(p: dict) -> dict:
    """Panel (b)'s numbers over the perturbed trials, none dropped (a trial that never
    re-reached ε counts at its horizon in means and as not under a bound)."""
    hit = p["size"] > 0
    r, h, f = p["rework"][hit], p["horizon"][hit], p["fraction"][hit]
    out = {"trials": int(p["rework"].size), "perturbed_trials": int(hit.sum()),
           "never_reconverged": int((~np.isfinite(r)).sum()),
           "eq_5_6": _rework.summarize(r, h, p["bound"][hit]),
           "restarted": _rework.summarize(r, h, p["bound_restarted"][hit]),
           "rework": _stats.summary(r, h) if r.size else None}
    v, cens = _stats.restricted(r, h) if r.size else (r, np.zeros(0, bool))
    over = ~(np.isfinite(r) & (r <= p["bound_restarted"][hit]))  # not shown under the restarted bound
    out["restarted"]["not_under"] = int(over.sum())
    out["restarted"]["not_under_with_fraction_over_3_4"] = int((over & (f > 0.75)).sum())
    out["share_negative_rework"] = out["eq_5_6"]["share_negative_rework"]
    # Slope of the restricted rework in the reset fraction (a lower bound when censored).
    out["rework_per_unit_fraction"] = float(np.polyfit(f, v, 1)[0]) if r.size > 2 else None
    out["rework_per_unit_fraction_censored"] = int(cens.sum())
    bins = [0.0, 0.25, 0.5, 0.75, 1.0]
    out["rework_by_fraction"] = {
        f"{lo:.2f}-{hi:.2f}": (_stats.summary(r[sel], h[sel]) if sel.any() else None)
        for lo, hi in itertools.pairwise(bins) for sel in [(f >= lo) & (f < hi)]}
    for k in ("c", "d0", "dT", "eps", "corpus"):
        out[k] = p[k]
    return out


@_common.recorded(NAME)
def run(config: Config, out_dir) -> dict:
    alg = _problems.mlr_digits(config.batch_size)
    rng = np.random.default_rng(config.seed)
    n = config.trials
    fractions = rng.uniform(0.0, 1.0, size=n).astype(np.float32)
    # The resets in the program of Fig 5.5's panels (one compilation for both figures).
    t = _rework.run_rework_panels(
        alg, {"reset": (perturb.reset, fractions)}, steps=config.steps, converge_at=config.converge_at,
        seed=config.seed, perturb_at=config.perturb_at, exact_c=_problems.mlr_local_c(config.batch_size),
        chunk=config.chunk,
    )["reset"]
    p = lda_panel(config) if config.lda else None
    s = t.summary()
    # Slope of the restricted rework (censored trials at their horizon: a lower bound then).
    v, cens = _stats.restricted(t.rework, t.horizon)
    slope = float(np.polyfit(fractions, v, 1)[0]) if n > 2 else None
    results = {"config": vars(config), "reset": s, "rework_per_unit_fraction": slope,
               "rework_per_unit_fraction_censored": int(cens.sum()),
               # Per-trial values, so that plot() draws the scatter from the results alone.
               "per_trial": {"reset": {"fraction": fractions, **t.per_trial("size", "delta_T", "rework", "horizon")}}}
    if p:
        results["lda"] = _lda_summary(p)
        results["per_trial"]["lda"] = {k: p[k] for k in ("fraction", "size", "delta_T", "rework", "horizon",
                                                         "bound_restarted")}
    return results


def plot(results: dict, out_dir) -> list:
    """Fig 5.6 from the results: (a) MLR rework vs Δ_T (Thm 5.3.1 bound in red) and vs the
    reset fraction; (b) the same for LDA, with the bound restarted at the reset (orange)."""
    if "per_trial" not in results:
        raise ValueError(f"results of {NAME} carry no per-trial values (written before they were saved); "
                         f"re-run `scarjax reproduce {NAME}`")
    cfg, s, lda = results["config"], results["reset"], results.get("lda")
    arr = lambda d: {f: np.asarray(v, np.float64) for f, v in d.items()}  # noqa: E731
    t = arr(results["per_trial"]["reset"])
    title = (f"Fig 5.6 — random reset to init: (a) MLR at k={cfg['perturb_at']}, {s['trials']} trials"
             + (f"; (b) LDA at sweep {cfg['lda_perturb_at']}, {lda['trials']} trials" if lda else ""))
    fig, axes = _plot.figure(1, 4 if lda else 2, title=title)
    axes = axes[0]
    xs = _plot.span(t["delta_T"])
    every = np.ones(t["rework"].shape, bool)
    _plot.rework_scatter(axes[0], t["delta_T"], t["rework"], t["horizon"], t["size"] > 0, xlabel="Δ_T",
                         title="(a) MLR: rework vs Δ_T", bound_x=xs, bound_y=bounds.rework_bound(xs, s["d0"], s["c"]))
    axes[0].legend(loc="upper left")
    _plot.rework_scatter(axes[1], t["fraction"], t["rework"], t["horizon"], every, logx=False,
                         xlabel="fraction of parameters reset", title="(a) MLR: rework vs reset fraction")
    if lda:
        p = arr(results["per_trial"]["lda"])
        hit = p["size"] > 0
        xl = _plot.span(p["delta_T"])
        _plot.rework_scatter(axes[2], p["delta_T"], p["rework"], p["horizon"], hit, xlabel="Δ_T (length-scaled TV)",
                             ylabel="rework (sweeps)", title="(b) LDA: rework vs Δ_T", bound_x=xl,
                             bound_y=bounds.rework_bound(xl, lda["d0"], lda["c"]), bound_label="Thm 5.3.1 bound (Eq 5.6)")
        axes[2].scatter(p["delta_T"][hit], p["bound_restarted"][hit], s=3, color=_plot.COLORS["restarted"], alpha=0.6,
                        label=f"bound restarted at k={cfg['lda_perturb_at']}")
        axes[2].legend(loc="upper left")
        _plot.rework_scatter(axes[3], p["fraction"], p["rework"], p["horizon"], hit, logx=False,
                             xlabel="fraction of documents reset", ylabel="rework (sweeps)",
                             title="(b) LDA: rework vs reset fraction")
    for ax in axes[1::2]:
        if ax.get_legend_handles_labels()[0][1:]:  # a censored-trials marker to explain
            ax.legend(loc="upper left")
    return [_plot.save(fig, out_dir, NAME)]


def _slope(x, censored: int) -> str:
    return _stats.fmt_g(x) if x is None or not censored else f"≥ {_stats.fmt_g(x)} ({censored} censored trials at their horizon)"


def report(results: dict) -> str:
    s = results["reset"]
    f, sh, lb = _stats.fmt_g, _stats.fmt_share, _stats.fmt_lb
    sr = s["restarted_bound"]
    k = results["config"]["perturb_at"]
    slope = results["rework_per_unit_fraction"]
    grows = "yes" if slope is not None and slope > 0 else "no"
    return f"""## Fig 5.6 — rework after resetting a random fraction to init (`{NAME}`)

![fig]({NAME}.png)

### (a) MLR

Setup as Fig 5.5 ({s['trials']} trials, reset fraction uniform in [0, 1] at iteration
{k}, c = {f(s['c'], 4)}). Shares over all perturbed trials; a trial that never re-reaches ε counts as not
under a bound ({s['never_reconverged']} such trials here).

| quantity | thesis | ours |
|---|---|---|
| trials at or under the bound restarted at k = {k} | under | {sh(sr)} (+1: {sh(sr, 'under_plus_1')}) |
| median actual/bound (restarted) | "closer to the scenario with adversarial perturbations, although not quite as costly" | {lb(sr, 'median_actual_over_bound')} |
| trials under the bound from w⁽⁰⁾ (Eq 5.6 as printed) | under | {sh(s)} (see Fig 5.5 for why the printed form can be exceeded after MLR's fast start) |
| mean rework (restricted) | – | {_stats.fmt_cell(s['rework'], ci=True)} |
| rework grows with the reset fraction | yes | {grows}: slope {_slope(slope, results.get('rework_per_unit_fraction_censored', 0))} iterations per unit fraction |
{_lda_report(results)}"""


def _lda_report(results: dict) -> str:
    lda = results.get("lda")
    if not lda:
        return "\nPanel (b) (LDA) was not run (`Config.lda = False`).\n"
    f, sh, lb = _stats.fmt_g, _stats.fmt_share, _stats.fmt_lb
    cfg = results["config"]
    e, r = lda["eq_5_6"], lda["restarted"]
    by = lda["rework_by_fraction"]
    bins = ", ".join(f"{k}: {'–' if v is None else _stats.fmt_cell(v, 2)}" for k, v in by.items())
    corpus = lda["corpus"]
    T, N = cfg["lda_perturb_at"], cfg["lda_converge_at"]
    # Findings, each only as far as the numbers show it.
    means = [v["mean"] for v in by.values() if v is not None]
    exact = all(not v["mean_is_lower_bound"] for v in by.values() if v is not None)
    steps = np.diff(means)
    find = [f"The reset stays under the Eq 5.6 bound in {_stats.fmt_count(e)} trials, with median actual/bound "
            f"{lb(e, 'median_actual_over_bound')}."]
    if r["not_under"]:
        frac = r["not_under_with_fraction_over_3_4"] / r["not_under"]
        find.append(f"The restarted bound (from y⁽ᵀ⁾, tighter) is not shown in {r['not_under']} of {r['n']} trials, "
                    f"{r['not_under_with_fraction_over_3_4']} of them resets of over 3/4 of the documents"
                    + (": a chain put (mostly) back to its random initial assignments first spends a few sweeps "
                       f"breaking the topics' symmetry, more slowly than the rate c measured after sweep {T}."
                       if frac > 0.5 else "."))
    if len(means) > 2 and np.all(steps > 0):
        shape = ("faster than linearly (each bin's increase larger than the last)" if np.all(np.diff(steps) > 0)
                 else "monotonically")
        find.append(f"The mean rework grows {shape} with the reset fraction across the bins"
                    + ("" if exact else " (lower bounds where trials did not re-converge)") + ".")
    elif means:
        find.append("The mean rework does not grow monotonically across the fraction bins.")
    return f"""
### (b) LDA

Collapsed Gibbs on the embedded synthetic corpus ({corpus['documents']} documents, {corpus['tokens']} tokens,
{corpus['words']} words, {corpus['topics']} topics, the thesis's symmetric α = β of `scarjax.models.lda`; the thesis:
20 Newsgroups). {lda['trials']} trials; at sweep {T} a uniformly random fraction of the documents loses its
`n_dk` row and its tokens' assignments to the initial state (counts rebuilt from `z`); ε per trial so the
unperturbed same-key run converges at sweep {N}; runs of {cfg['lda_steps']} sweeps; rework on the NLL. Thm
5.3.1 in the model's norm (length-scaled TV): ‖w⁽⁰⁾ − w*‖ = {f(lda['d0'], 4)}, ‖y⁽ᵀ⁾ − w*‖ = {f(lda['dT'], 4)}
(w* = each chain's posterior-mean counts), empirical c = {f(lda['c'], 3)} (mean-distance rate over sweeps
{T}–{N}). A trial that never re-reaches ε counts at its horizon in means and as not under a bound.

| quantity | thesis (Fig 5.6(b), 20 Newsgroups) | ours |
|---|---|---|
| trials at or under the bound (Eq 5.6, red) | under | {sh(e)} (+1 sweep: {sh(e, 'under_plus_1')}) |
| median actual/bound (Eq 5.6) | "closer to the scenario with adversarial perturbations, although not quite as costly" | {lb(e, 'median_actual_over_bound')} |
| trials under the bound restarted at T (orange) | – | {sh(r)} (+1 sweep: {sh(r, 'under_plus_1')}); median actual/bound {lb(r, 'median_actual_over_bound')} |
| rework grows with the reset fraction | yes | {_slope(lda['rework_per_unit_fraction'], lda.get('rework_per_unit_fraction_censored', 0))} sweeps per unit fraction; mean rework by fraction: {bins} |
| negative rework / never re-converged | – | {f(lda['share_negative_rework'])} / {lda['never_reconverged']} of {lda['perturbed_trials']} |

{' '.join(find)} We ran no random or adversarial LDA perturbations, so the thesis's comparison can only
be made against the MLR scenarios of Fig 5.5. Differences from the thesis: a small synthetic corpus
instead of 20 Newsgroups, a time scale of sweeps {T}/{N} instead of iterations 50/100, and a loss (NLL)
rework criterion with w* for the bound estimated from the chains, since a Gibbs sampler has no fixed point.
"""
