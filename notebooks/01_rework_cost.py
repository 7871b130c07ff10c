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
# in one compiled program, and on a run with a fast transient, where *which* form of the
# bound you compare with matters.

# %%
import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

import scarjax
from scarjax import bounds, hooks, perturb
from scarjax.models import quadratic

qp = quadratic.fig53_problem()  # 4-D QP, gradient descent, exact rate c
c = quadratic.contraction(qp)
print(f"c = {c:.4f}")

# %% [markdown]
# ## One unperturbed and one perturbed run
#
# `scarjax.run` compiles the whole run into one `lax.scan`. A hook says *what* is
# perturbed (`perturb.gaussian`, `perturb.adversarial`, `perturb.reset`, or your own) and
# *where* (the `write` point: the stored parameters); `hooks.scheduled(hook, when)` says
# *when* (`500`: at iteration 500, short for `schedules.at(500)`; or `schedules.every(k)`,
# `schedules.with_probability(p)`, `schedules.geometric(rate)`, ...).
#
# `scarjax.check_rework` measures the rework (Eq 5.4) and the bound together: Thm 5.3.1
# applied to the run restarted where the perturbation hits, `y[s] = w[s]` (the two runs
# are the same run until then), so it is compared with the real unperturbed run.

# %%
steps = 2500
_, base = scarjax.run(qp, None, steps, jax.random.key(0))
kick = hooks.scheduled(perturb.adversarial(1.0), 500)  # push 1.0 straight away from w*
_, pert = scarjax.run(qp, kick, steps, jax.random.key(0))

eps = scarjax.calibrate_eps(base, 1000)  # ε: the baseline converges in 1,000 iterations
check = scarjax.check_rework(pert, base, c, eps=eps)
print(f"measured rework {float(check.rework):.0f} iterations; Thm 5.3.1 bound {float(check.bound):.1f} "
      f"(from the perturbation at k={int(check.start)}); held: {bool(check.held)}")

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
# trial gets its own perturbation scale. A trial that never re-reaches ε counts as *not*
# under the bound.

# %%
n = 500
keys = jax.random.split(jax.random.key(1), n)
scales = jnp.exp(jnp.linspace(jnp.log(1e-3), jnp.log(2.0), n))
_, trials = scarjax.run_trials(qp, lambda s: hooks.scheduled(perturb.gaussian(s), 500), steps, keys, hook_args=scales)
_, bases = scarjax.run_trials(qp, None, steps, keys)

check = scarjax.check_rework(trials, bases, c, eps=eps)
print(check.summary())

dT = bounds.delta_T(trials, c)
xs = np.logspace(np.log10(dT.min()), np.log10(dT.max()), 100)
plt.scatter(dT, check.rework, s=4, label="trials")
plt.plot(xs, bounds.rework_bound(xs, float(base.initial_distance), c), "r", label="Thm 5.3.1")
plt.xscale("log"); plt.xlabel("Δ_T"); plt.ylabel("rework"); plt.legend();

# %% [markdown]
# ## A fast transient: which bound, and which c
#
# The QP above starts on its slowest eigendirection, so the baseline contracts at exactly
# c from w⁽⁰⁾ — the one case where the bound as printed, from w⁽⁰⁾
# (`trace_rework_bound(trace, c, start=0)`), bounds the measured rework. Start the same QP
# with its error mostly in the fast directions (as ridge regression or MLR from w⁽⁰⁾ = 0
# do) and the baseline first converges much faster than c: the bound from w⁽⁰⁾ is then
# too small, while the default (`start='auto'`: from the perturbation) still holds.
#
# When c is not known exactly, `bounds.estimate_c` estimates it from the baseline. Its
# default (`method='max_ratio'`, the largest one-step contraction ratio) is conservative;
# a least-squares fit (`method='fit'`, the `low` end of the reported range) is pulled down
# by the transient.

# %%
A = np.asarray(qp.data["A"], np.float64)
lam, Q = np.linalg.eigh(A)
w_star = np.asarray(qp.data["w_star"], np.float64)
w0 = w_star + 2.0 * (Q[:, 3] + Q[:, 2] + 0.05 * Q[:, 0])  # mostly fast directions
fast = quadratic.problem(A, w_star, float(qp.data["lr"]), w0)
_, fbase = scarjax.run(fast, None, steps, jax.random.key(0))
_, fpert = scarjax.run_trials(fast, lambda s: hooks.scheduled(perturb.adversarial(s), 300), steps, keys[:100], hook_args=scales[::5])

est = bounds.estimate_c(fbase, full_output=True)
print(f"estimate_c: {est.c:.5f} (range {est.low:.5f}–{est.high:.5f}); exact c = {c:.5f}")
feps = scarjax.calibrate_eps(fbase, 700)
fcheck = scarjax.check_rework(fpert, fbase, est.c, eps=feps)
w0_form = bounds.trace_rework_bound(fpert, est.c, start=0)
print(f"bound from w(0) held in {np.sum(fcheck.rework <= w0_form + 1)} of {fcheck.n_trials} trials; "
      f"from the perturbation: {fcheck.n_held} of {fcheck.n_trials}")
fit_check = scarjax.check_rework(fpert, fbase, est.low, eps=feps)  # c from a least-squares fit
print(f"with the fitted c = {est.low:.5f}: held in {fit_check.n_held} of {fit_check.n_trials}")

# %% [markdown]
# ## Perturbations at every step: the irreducible floor
#
# If every iteration is perturbed by at most Δ (e.g. reduced precision), the error can
# not go below `cΔ/(1 − c)` (Example 5.3.4, Appendix B.1.1). With an adversarial δ of
# fixed size every step, the floor is reached exactly.

# %%
Delta = 1e-3
_, noisy = scarjax.run(qp, perturb.adversarial(Delta), 4000, 0)
floor = bounds.error_floor(Delta, c)
print(f"final error {float(noisy.distance[-1]):.4f}; predicted floor cΔ/(1−c) = {float(floor):.4f}")
