"""Constructors that wrap common training procedures as :class:`~scarjax.Algorithm`.

* :func:`from_optax` – any differentiable loss and any optax optimizer, with minibatches
  drawn from ``data`` (the parameter-server form of SGD, thesis Eq 2.2–2.3);
* :func:`fixed_point` – a plain fixed-point iteration ``w ← f(w)`` (thesis Eq 5.1).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import optax

from scarjax import tree as tu
from scarjax.core import Algorithm, State

PyTree = Any

__all__ = ["from_optax", "fixed_point", "sample_batch", "num_examples"]


def num_examples(data: PyTree) -> int:
    """Number of examples (the common leading axis of every leaf of ``data``)."""
    sizes = {x.shape[0] for x in jax.tree.leaves(data)}
    if len(sizes) != 1:
        raise ValueError(f"data leaves must share their leading (example) axis, got sizes {sizes}")
    return sizes.pop()


def sample_batch(data: PyTree, key: jax.Array, batch_size: int | None) -> PyTree:
    """A minibatch of ``batch_size`` examples drawn without replacement (all of ``data``
    when ``batch_size`` is ``None``)."""
    if batch_size is None:
        return data
    n = num_examples(data)
    idx = jax.random.choice(key, n, (batch_size,), replace=False)
    return jax.tree.map(lambda x: x[idx], data)


def _init_fn(init_params: PyTree | Callable[[jax.Array], PyTree]) -> Callable[[jax.Array], PyTree]:
    if callable(init_params):
        return init_params
    return lambda key: jax.tree.map(jnp.asarray, init_params)


def from_optax(
    loss_fn: Callable[[PyTree, PyTree], jax.Array],
    optimizer: optax.GradientTransformation,
    init_params: PyTree | Callable[[jax.Array], PyTree],
    data: PyTree,
    *,
    batch_size: int | None = None,
    optimum: PyTree | None = None,
    norm: Callable[[PyTree], jax.Array] = tu.l2_norm,
    name: str = "optax",
) -> Algorithm:
    """Wrap ``loss_fn(params, batch)`` and an optax optimizer as an :class:`Algorithm`.

    Each iteration draws a minibatch (``batch_size`` examples without replacement, or the
    full ``data``), takes the gradient at the parameters the workers *read* and returns
    the optimizer's update as Δ; the optimizer state lives in ``state.aux`` (co-located
    with the parameters, so fault hooks can lose it too). The loss recorded in traces is
    ``loss_fn`` over the full ``data``.

    Example:
      >>> import jax, jax.numpy as jnp, optax, scarjax
      >>> x = jnp.linspace(-1, 1, 32)[:, None]; y = 3 * x[:, 0]
      >>> alg = scarjax.from_optax(
      ...     lambda w, b: jnp.mean((b["x"] @ w - b["y"]) ** 2), optax.sgd(0.5),
      ...     jnp.zeros(1), {"x": x, "y": y})
      >>> state, trace = scarjax.run(alg, None, 50, jax.random.key(0))
      >>> round(float(state.params[0]), 3)
      3.0
    """
    if not isinstance(optimizer, optax.GradientTransformation):
        raise TypeError(f"optimizer must be an optax.GradientTransformation, got {type(optimizer).__name__}")
    n = num_examples(data)
    if batch_size is not None and (isinstance(batch_size, bool) or not 1 <= int(batch_size) <= n):
        raise ValueError(f"batch_size must be in [1, {n}] or None, got {batch_size!r}")
    make_params = _init_fn(init_params)
    grad_fn = jax.grad(loss_fn)

    def init(key, data):
        params = make_params(key)
        return State(params, optimizer.init(params))

    def update(view, state, data, key):
        grads = grad_fn(view, sample_batch(data, key, batch_size))
        updates, opt_state = optimizer.update(grads, state.aux, view)
        return updates, State(state.params, opt_state)

    def loss(state, data):
        return loss_fn(state.params, data)

    return Algorithm(init=init, update=update, loss=loss, norm=norm, data=data, optimum=optimum, name=name)


def fixed_point(
    f: Callable[[PyTree, PyTree], PyTree],
    init_params: PyTree | Callable[[jax.Array], PyTree],
    loss: Callable[[PyTree, PyTree], jax.Array],
    data: PyTree = None,
    *,
    optimum: PyTree | None = None,
    norm: Callable[[PyTree], jax.Array] = tu.l2_norm,
    name: str = "fixed_point",
) -> Algorithm:
    """Wrap a deterministic iteration ``w ← f(w, data)`` (thesis Eq 5.1) as an
    :class:`Algorithm`: the workers compute ``Δ = f(view) − view`` from what they read.

    With write-point perturbations only, the loop reproduces Eq 5.2 exactly:
    ``y⁽ᵏ⁺¹⁾ = f(y⁽ᵏ⁾ + δₖ)``.
    """
    make_params = _init_fn(init_params)

    def init(key, data):
        return State(make_params(key), ())

    def update(view, state, data, key):
        return tu.tree_sub(f(view, data), view), state

    return Algorithm(
        init=init,
        update=update,
        loss=lambda state, data: loss(state.params, data),
        norm=norm,
        data=data,
        optimum=optimum,
        name=name,
    )
