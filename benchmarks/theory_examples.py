"""The theory examples, run with JAX's default matmul precision (the device check).

1. The README's notebook example: gradient descent on the Fig 5.3 QP, one adversarial
   perturbation, ``calibrate_eps`` + ``check_rework``, then 1,000 Gaussian trials.
2. Ridge regression by gradient descent (n = 200, d = 20, condition number 50, step 1/L so
   the exact rate is c = 1 − μ/L = 0.98), written as a user would with ``from_optax``; 240
   Gaussian trials perturbed at step 100; ε calibrated on the baselines; rework checked
   three ways: ``check_rework``, ``rework_cost`` against ``bounds.trace_rework_bound``
   (``start='auto'``) + 1, and the theorem's own statement (Eq B.8–B.9) ``κ(y) ≤ s +
   log((d_s + Δ_s)/ε)/log(1/c) + 1``.

``--emulate-tf32`` computes the ridge's matrix products with inputs rounded to 10 mantissa
bits (:func:`scarjax.numerics.emulated_matmul`, a TF32 stand-in on CPU) and records TF32 in
the traces as a GPU run with JAX's defaults would; ``--planted-float32-floor`` then also
measures what happens when the floor is (wrongly) float32's. On a GPU run it without flags:
the precision in effect is detected, and the ridge runs a second time built with
``precision='highest'`` (:attr:`scarjax.Algorithm.precision`, the fix the refusal names).

Run: ``python benchmarks/theory_examples.py [--quick] [--emulate-tf32]``; prints JSON.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

import scarjax  # noqa: E402
from scarjax import bounds, hooks, numerics, perturb  # noqa: E402
from scarjax.models import quadratic  # noqa: E402


def readme_example(trials: int = 1000) -> dict:
    """The README's notebook block, as printed there (fewer trials with ``--quick``)."""
    qp = quadratic.fig53_problem()
    c = quadratic.contraction(qp)
    _, base = scarjax.run(qp, None, 2500, jax.random.key(0))
    _, pert = scarjax.run(qp, hooks.scheduled(perturb.adversarial(1.0), 500), 2500, jax.random.key(0))
    eps = scarjax.calibrate_eps(base, 1000)
    check = scarjax.check_rework(pert, base, c, eps=eps)
    keys = jax.random.split(jax.random.key(1), trials)
    sizes = jnp.logspace(-3, 0, trials)
    _, tr = scarjax.run_trials(qp, lambda s: hooks.scheduled(perturb.gaussian(s), 500), 2500, keys, hook_args=sizes)
    _, bases = scarjax.run_trials(qp, None, 2500, keys)
    many = scarjax.check_rework(tr, bases, c, eps=eps)
    return {"rework": float(check.rework), "bound": float(check.bound), "held": bool(check.held),
            "trials": trials, "trials_held": many.n_held, "summary": many.summary()}


def ridge_problem(mm=jnp.matmul, seed: int = 0, precision: str | None = None):
    """``(algorithm, c, ‖w*‖)``: ridge-free least squares ``½ mean((Xw − y)²)`` with
    condition number 50, gradient descent at step 1/L (``c = 1 − μ/L = 0.98``); ``mm`` is
    the matrix product the loss uses, ``precision`` the algorithm's
    (:attr:`scarjax.Algorithm.precision`)."""
    rng = np.random.default_rng(seed)
    n, d = 200, 20
    U, _ = np.linalg.qr(rng.normal(size=(n, d)))
    V, _ = np.linalg.qr(rng.normal(size=(d, d)))
    X = ((U * np.sqrt(np.geomspace(1.0, 1 / 50, d) * n)) @ V.T).astype(np.float32)
    y = (X @ (8.0 * rng.normal(size=d)) + 0.1 * rng.normal(size=n)).astype(np.float32)
    A = X.astype(np.float64).T @ X / n
    ev = np.linalg.eigvalsh(A)
    L, mu = float(ev.max()), float(ev.min())
    w_star = np.linalg.solve(A, X.astype(np.float64).T @ y / n).astype(np.float32)

    def loss_fn(w, batch):
        r = mm(batch["x"], w) - batch["y"]
        return 0.5 * jnp.mean(r**2)

    alg = scarjax.from_optax(loss_fn, optax.sgd(1.0 / L), jnp.zeros(d, jnp.float32),
                             {"x": jnp.asarray(X), "y": jnp.asarray(y)}, optimum=jnp.asarray(w_star), name="ridge",
                             precision=precision)
    return alg, 1.0 - mu / L, float(np.linalg.norm(w_star))


def _violations(trials, bases, c: float, eps) -> dict:
    """Rework against the bound, three ways (see the module docstring)."""
    out = {}
    try:
        ch = scarjax.check_rework(trials, bases, c, eps=eps, floor=0.0)
        out["check_rework_not_held"] = int(ch.n_trials - ch.n_held)
    except ValueError as e:
        out["check_rework_error"] = str(e)
    rw = scarjax.rework_cost(trials, bases, eps)
    tb = np.asarray(bounds.trace_rework_bound(trials, c), np.float64)
    out["rework_above_trace_rework_bound_plus_1"] = int(np.sum(~(rw <= tb + 1.0)))
    # Eq B.8–B.9 from the first perturbed iteration s: κ(y) ≤ s + log((d_s + Δ_s)/ε)/log(1/c).
    norms = np.asarray(trials.perturbation_norms(), np.float64)
    dist = np.asarray(trials.distance, np.float64)
    s = np.argmax(norms > 0, axis=-1)
    k = np.arange(norms.shape[-1])
    big_delta = np.sum(np.where(k >= s[:, None], norms * c ** (s[:, None] - k), 0.0), axis=-1)
    d_s = np.take_along_axis(dist, s[:, None], -1)[:, 0]
    kappa_y = scarjax.iterations_to(dist, eps)
    stated = s + np.log((d_s + big_delta) / np.asarray(eps)) / math.log(1.0 / c)
    out["theorem_statement_violated"] = int(np.sum(~(kappa_y <= stated + 1.0)))
    out["trials"] = int(dist.shape[0])
    return out


def ridge_example(trials: int = 240, steps: int = 600, converge_at: int = 300, emulate_bits: int | None = None,
                  precision: str | None = None) -> dict:
    """The ridge example; see the module docstring."""
    mm = jnp.matmul if emulate_bits is None else numerics.emulated_matmul(emulate_bits)
    alg, c, w_norm = ridge_problem(mm, precision=precision)
    keys = jax.random.split(jax.random.key(0), trials)
    sizes = jnp.logspace(-2, 1, trials)
    _, bases = scarjax.run_trials(alg, None, steps, keys)
    _, pert = scarjax.run_trials(alg, lambda s: hooks.scheduled(perturb.gaussian(s), 100), steps, keys, hook_args=sizes)
    prec = numerics.matmul_precision(setting=precision if precision is not None else "current")
    out = {"c": c, "optimum_norm": w_norm, "steps": steps, "converge_at": converge_at,
           "precision": prec.describe() if emulate_bits is None else f"emulated {emulate_bits}-bit mantissa products"}
    if emulate_bits is not None:
        bases, pert = record_precision(bases, emulate_bits), record_precision(pert, emulate_bits)
    out["recorded_matmul_eps"] = float(np.max(bases.matmul_eps))
    out["noise_floor_median"] = float(np.median(scarjax.rework.noise_floor(bases)))
    out["distance_at_end_median"] = float(np.median(np.asarray(bases.distance)[:, -1]))
    try:
        eps = scarjax.calibrate_eps(bases, converge_at)
        out["calibrate_eps_median"] = float(np.median(eps))
    except ValueError as e:
        out["calibrate_eps_refused"] = str(e)
        # What the refusal asks for: an earlier iteration that clears 10x the floor.
        floor = scarjax.rework.noise_floor(bases)
        dist = np.asarray(bases.distance, np.float64)
        ok = np.all(dist > 20 * floor[:, None], axis=0)
        n_ok = int(np.max(np.nonzero(ok)[0])) if ok.any() else None
        out["earliest_accepted_converge_at"] = n_ok
        if n_ok is None or n_ok < 101:
            return out
        eps = scarjax.calibrate_eps(bases, n_ok)
        out["calibrate_eps_median_at_earliest"] = float(np.median(eps))
    out.update(_violations(pert, bases, c, eps))
    try:
        scarjax.check_rework(pert, bases, c, eps=eps)
        out["check_rework_with_floor_check"] = "ok"
    except ValueError as e:
        out["check_rework_with_floor_check"] = str(e)
    return out


def record_precision(trace, bits: int):
    """``trace`` with the matmul eps ``2^−bits`` recorded, as a run made where products
    have ``bits`` mantissa bits records it (:func:`scarjax.numerics.matmul_precision`)."""
    return trace._replace(matmul_eps=np.full(np.shape(trace.loss)[:-1], 2.0 ** -bits, np.float32))


def ridge_planted(trials: int = 240, steps: int = 1000, short: int = 400, converge_at: int = 360) -> dict:
    """TF32-rounded ridge runs: ε per trial at ``converge_at`` (the geometric mean that
    :func:`scarjax.calibrate_eps` takes), its floor measured on the first ``short`` steps
    (the baseline has not stalled yet, so no plateau is measured) with the precision
    recorded as float32 (the planted bug: the floor before precision detection) and as
    TF32; and the violations that ε gives on the full ``steps``."""
    alg, c, w_norm = ridge_problem(numerics.emulated_matmul(10))
    keys = jax.random.split(jax.random.key(0), trials)
    sizes = jnp.logspace(-2, 1, trials)
    _, bases = scarjax.run_trials(alg, None, steps, keys)
    _, pert = scarjax.run_trials(alg, lambda s: hooks.scheduled(perturb.gaussian(s), 100), steps, keys, hook_args=sizes)
    d = np.asarray(bases.distance, np.float64)
    eps = np.sqrt(d[:, :converge_at].min(-1) * d[:, converge_at])
    out = {"steps": steps, "floor_measured_on_steps": short, "converge_at": converge_at,
           "eps_median": float(np.median(eps))}
    for name, bits in (("float32_floor", 23), ("tf32_floor", 10)):
        b = record_precision(bases, bits)
        head = b._replace(distance=b.distance[:, : short + 1], loss=b.loss[:, : short + 1])
        floor = scarjax.rework.noise_floor(head)
        ratio = float(np.min(eps / floor))
        out[name] = {"floor_median": float(np.median(floor)), "min_eps_over_floor": ratio,
                     "accepted (>= 10x)": ratio >= 10}
    out["violations_at_that_eps"] = _violations(pert, bases, c, eps)
    return out


def main(quick: bool = False, emulate_tf32: bool = False, planted: bool = False) -> dict:
    t0 = time.perf_counter()
    out: dict = {"jax": jax.__version__, "backend": jax.default_backend(),
                 "matmul_precision": numerics.matmul_precision().describe()}
    if not emulate_tf32:
        out["readme"] = readme_example(100 if quick else 1000)
    out["ridge"] = ridge_example(emulate_bits=10 if emulate_tf32 else None)
    if jax.default_backend() != "cpu":
        # The one-argument fix the refusal names: the same ridge with precision='highest'.
        out["ridge_precision_highest"] = ridge_example(precision="highest")
    if planted:
        out["ridge_planted"] = ridge_planted()
    out["seconds"] = time.perf_counter() - t0
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="100 README trials instead of 1,000")
    ap.add_argument("--emulate-tf32", action="store_true", help="TF32 stand-in on CPU (ridge only)")
    ap.add_argument("--planted-float32-floor", action="store_true",
                    help="also: the TF32-rounded ridge with a float32 floor (what the check must catch)")
    args = ap.parse_args()
    _timing.emit("theory_examples", main(args.quick, args.emulate_tf32, args.planted_float32_floor))
