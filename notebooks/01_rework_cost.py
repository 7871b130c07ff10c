# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Perturbing a training run and reading the rework bound
#
# Iterative training *self-corrects* errors, at the cost of extra iterations: **rework**.
# SCAR (thesis Ch. 5) models any fault, staleness or rounding as a perturbation δ of the
# iterate, `y[k+1] = f(y[k] + δ[k])` (Eq 5.2), and bounds the rework of perturbations up to
# iteration T by Theorem 5.3.1:
#
# $$\pi \le \frac{\log\left(1 + \Delta_T / \lVert w_0 - w^*\rVert\right)}{\log(1/c)}, \qquad \Delta_T = \sum_{\ell \le T} c^{-\ell}\, \mathbb{E}\lVert\delta_\ell\rVert .$$
#
# This notebook perturbs gradient descent on a small quadratic program, measures the
# rework, and compares it with the bound — then does the same for 500 Monte-Carlo trials
# in one compiled program.

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import scarjax
from scarjax import bounds, hooks
from scarjax.models import quadratic

qp = quadratic.fig53_problem()  # 4-D QP, gradient descent, exact rate c
c = quadratic.contraction(qp)
print(f"c = {c:.4f}")

# %% [markdown]
# ## One unperturbed and one perturbed run
#
# `scarjax.run` compiles the whole run into one `lax.scan`. A hook says *what* is
# perturbed (`gaussian`, `adversarial`, `reset`, or your own), *where* (the `write` point:
# the stored parameters), and *when* (`when=500`: at iteration 500).

# %%
steps = 2500
_, base = scarjax.run(qp, None, steps, jax.random.key(0))
kick = hooks.adversarial(1.0, when=500)  # push 1.0 straight away from w*
_, pert = scarjax.run(qp, kick, steps, jax.random.key(0))

eps = scarjax.calibrate_eps(base, 1000)  # ε: the baseline converges in 1,000 iterations
rework = scarjax.rework_cost(pert, base, eps)
bound = bounds.trace_rework_bound(pert, c)  # Δ_T from the trace's measured ‖δ‖
print(f"measured rework {float(rework):.0f} iterations; Thm 5.3.1 bound {float(bound):.1f}")

plt.semilogy(base.distance, label="unperturbed")
plt.semilogy(pert.distance, label="adversarial δ at k=500")
plt.axhline(float(eps), color="k", ls=":", label="ε")
plt.xlabel("iteration"); plt.ylabel("‖y − w*‖"); plt.legend();

# %% [markdown]
# An adversarial δ along the slowest direction is the theorem's worst case: the measured
# rework sits right at the bound (within the rounding of integer iterations).

# %% [markdown]
# ## 500 trials as one program
#
# `run_trials` vmaps over keys — and over hook parameters through `hook_args`: here each
# trial gets its own perturbation scale. Trial *i* equals `run` with key *i*.

# %%
n = 500
keys = jax.random.split(jax.random.key(1), n)
scales = jnp.exp(jnp.linspace(jnp.log(1e-3), jnp.log(2.0), n))
_, trials = scarjax.run_trials(qp, lambda s: hooks.gaussian(s, when=500), steps, keys, hook_args=scales)
_, bases = scarjax.run_trials(qp, None, steps, keys)

rework = scarjax.rework_cost(trials, bases, eps)
bound = bounds.trace_rework_bound(trials, c)
dT = bounds.delta_T(trials, c)
print(f"share of trials at or under the bound: {np.mean(rework <= bound + 1):.3f}")

xs = np.logspace(np.log10(dT.min()), np.log10(dT.max()), 100)
plt.scatter(dT, rework, s=4, label="trials")
plt.plot(xs, bounds.rework_bound(xs, float(base.initial_distance), c), "r", label="Thm 5.3.1")
plt.xscale("log"); plt.xlabel("Δ_T"); plt.ylabel("rework"); plt.legend();

# %% [markdown]
# ## Perturbations at every step: the irreducible floor
#
# If every iteration is perturbed by at most Δ (e.g. reduced precision), the error can
# not go below `cΔ/(1 − c)` (Example 5.3.4, Appendix B.1.1). With an adversarial δ of
# fixed size every step, the floor is reached exactly.

# %%
Delta = 1e-3
_, noisy = scarjax.run(qp, hooks.adversarial(Delta), 4000, 0)
floor = bounds.error_floor(Delta, c)
print(f"final error {float(noisy.distance[-1]):.4f}; predicted floor cΔ/(1−c) = {float(floor):.4f}")
