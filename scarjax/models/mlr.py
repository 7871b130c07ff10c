"""Multinomial logistic regression trained by minibatch SGD (thesis Sec 5.5.1).

The parameters are a ``[features, classes]`` weight matrix ``w`` (the thesis's ``M × N``
matrix; a bias is a constant feature, see ``add_bias``); when distributed, the rows of
``w`` are the parameter blocks. The loss is the mean cross-entropy plus ``(l2/2)‖w‖²``: the small ridge term makes the problem strongly
convex, so full-batch gradient descent converges linearly (Eq 5.3) and Thm 5.3.1
applies; with minibatches it is the SGD setting of Appendix B.1.2.

The embedded default data is scikit-learn's 8×8 digits (1,797 images, no download).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scarjax import validate as va
from scarjax import algorithms
from scarjax.data import load_digits
from scarjax.core import Algorithm

__all__ = ["mlr", "digits", "cross_entropy", "solve_optimum"]


def cross_entropy(params: dict, batch: dict, l2: float = 0.0) -> jax.Array:
    """Mean softmax cross-entropy of ``batch`` plus ``(l2/2)‖w‖²``."""
    logits = batch["x"] @ params["w"]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["y"]).mean()
    return ce + 0.5 * l2 * jnp.sum(jnp.square(params["w"]))


def mlr(
    x: Any,
    y: Any,
    *,
    num_classes: int | None = None,
    lr: float = 1.0,
    batch_size: int | None = None,
    l2: float = 1e-2,
    optimizer: optax.GradientTransformation | None = None,
    init_scale: float = 0.0,
    add_bias: bool = True,
    name: str = "mlr",
) -> Algorithm:
    """MLR on features ``x [n, d]`` and integer labels ``y [n]``.

    Args:
      lr: SGD step size (ignored when ``optimizer`` is given).
      batch_size: minibatch size (``None`` = full-batch gradient descent).
      l2: ridge coefficient (> 0 for strong convexity).
      optimizer: any optax optimizer (default ``optax.sgd(lr)``, as in the thesis).
      init_scale: ``w⁽⁰⁾ ~ N(0, init_scale²)`` (0: start from zeros, deterministic).
      add_bias: append a constant-1 feature (its row of ``w`` is the bias; regularised
        like the others, so the loss is strongly convex in every direction).
    """
    va.check_real("x", x)
    va.check_integer_value("y", y, lo=0)
    if not isinstance(add_bias, (bool, np.bool_)):
        raise TypeError(f"add_bias must be a bool, got {add_bias!r}")
    va.check_real("lr", lr, lo=0.0, lo_open=True, scalar=True)
    va.check_real("l2", l2, lo=0.0, scalar=True)
    va.check_real("init_scale", init_scale, lo=0.0, scalar=True)
    x = jnp.asarray(x, jnp.float32)
    if x.ndim != 2:
        raise ValueError(f"x must be [n, d], got shape {x.shape}")
    if x.shape[0] == 0:
        raise ValueError("x has no examples (n = 0)")
    if add_bias:
        x = jnp.concatenate([x, jnp.ones((x.shape[0], 1), x.dtype)], axis=1)
    y_np = np.asarray(y)
    if y_np.shape != (x.shape[0],):
        raise ValueError(f"y must be [n] with n = {x.shape[0]}, got shape {y_np.shape}")
    y = jnp.asarray(y_np, jnp.int32)
    if num_classes is not None:
        k = va.check_int("num_classes", num_classes, lo=2)
        if int(y_np.max()) >= k:
            raise ValueError(f"y must hold labels in [0, num_classes={k}), got max {int(y_np.max())}")
    else:
        k = int(y_np.max()) + 1
        if k < 2:
            raise ValueError(f"num_classes must be >= 2, got {k} (from the labels y)")
    d = x.shape[1]

    def init_params(key):
        if init_scale == 0:
            # No draw: 0 × N(0, 1) is zeros but XLA may not fold it (NaN semantics), and
            # the draw's random-bit loops cost a GPU more launches than a short run itself.
            return {"w": jnp.zeros((d, k), jnp.float32)}
        return {"w": init_scale * jax.random.normal(key, (d, k), jnp.float32)}

    return algorithms.from_optax(
        lambda p, batch: cross_entropy(p, batch, l2),
        optimizer if optimizer is not None else optax.sgd(lr),
        init_params,
        {"x": x, "y": y},
        batch_size=batch_size,
        name=name,
    )


def digits(**kwargs: Any) -> Algorithm:
    """MLR on scikit-learn's digits (:func:`scarjax.data.load_digits`: features scaled
    to [0, 1]); keyword arguments go to :func:`mlr`."""
    x, y = load_digits()
    kwargs.setdefault("name", "mlr_digits")
    return mlr(x, y, num_classes=10, **kwargs)


def solve_optimum(algorithm: Algorithm, *, steps: int = 20_000, lr: float | None = None, tol: float = 1e-7) -> Algorithm:
    """Return ``algorithm`` with its ``optimum`` set to the minimiser of the full-data loss.

    Runs full-batch L-BFGS (``optax.lbfgs``) on ``algorithm.loss`` from the initial
    parameters until the gradient norm is below ``tol`` or ``steps`` iterations; raises
    ``ValueError`` if it does not converge.
    """
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    steps = va.check_int("steps", steps, lo=1)
    va.check_real("tol", tol, lo=0.0, lo_open=True, scalar=True)
    state = algorithm.init(jax.random.key(0), algorithm.data)
    f = lambda p: algorithm.loss(state._replace(params=p), algorithm.data)  # noqa: E731
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(f)

    @jax.jit
    def solve(params):
        def body(carry):
            params, opt_state, i = carry
            value, grad = value_and_grad(params, state=opt_state)
            updates, opt_state = opt.update(grad, opt_state, params, value=value, grad=grad, value_fn=f)
            return optax.apply_updates(params, updates), opt_state, i + 1

        def cond(carry):
            params, opt_state, i = carry
            g = optax.tree.get(opt_state, "grad")
            return (i == 0) | ((i < steps) & (optax.tree.norm(g) >= tol))

        params, opt_state, i = jax.lax.while_loop(cond, body, (params, opt.init(params), 0))
        return params, optax.tree.norm(jax.grad(f)(params)), i

    params, gnorm, iters = solve(state.params)
    if not np.isfinite(float(gnorm)) or float(gnorm) > 1e3 * tol:
        raise ValueError(f"solve_optimum did not converge: gradient norm {float(gnorm):.3g} after {int(iters)} steps")
    return algorithm.replace(optimum=params)
