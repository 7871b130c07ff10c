"""Property-test my own algorithms against the theory (docs/testing.md): one property holds, one fails."""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import scarjax
from scarjax import testing as sxt

# On a GPU, float32 matrix products default to TF32 (about 1e-3 relative), which lifts the
# rounding floor the rework check calibrates against; ask for full float32 (CPU: no change).
jax.config.update("jax_default_matmul_precision", "highest")

# My optax training step: ridge regression by full-batch gradient descent, step 0.5.
rng = np.random.default_rng(0)
X = rng.normal(size=(64, 4)).astype(np.float32)
y = X @ np.arange(1, 5, dtype=np.float32) + rng.normal(size=64).astype(np.float32)
H = X.T @ X / 64 + 0.1 * np.eye(4)  # the loss's Hessian
w_star = np.linalg.solve(H, X.T @ y / 64).astype(np.float32)
c = float(np.abs(1 - 0.5 * np.linalg.eigvalsh(H)).max())  # gradient descent's linear rate


def loss(w, batch):
    return 0.5 * jnp.mean((batch["x"] @ w - batch["y"]) ** 2) + 0.05 * w @ w


ridge = scarjax.from_optax(loss, optax.sgd(0.5), jnp.zeros(4), {"x": X, "y": y}, optimum=w_star, name="ridge")

# My fixed-point algorithm: w <- sin(w), which does converge to w* = 0 ...
sine = scarjax.fixed_point(lambda w, d: jnp.sin(w), jnp.ones(3), lambda w, d: 0.5 * w @ w, optimum=jnp.zeros(3), name="sin")


def test_ridge_rework_within_thm_5_3_1():
    # Thm 5.3.1 under any perturbation sequence hypothesis draws (8 trials per example).
    sxt.check_rework_bound(ridge, c, steps=100)


def test_sine_converges_linearly():
    # ... but not linearly (sin'(0) = 1): no rate c < 1 exists, and the check says so.
    sxt.check_linear_convergence(sine, steps=200)
