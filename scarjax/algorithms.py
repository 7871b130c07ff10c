"""Constructors that wrap common training procedures as :class:`~scarjax.Algorithm`.

* :func:`from_optax` – any differentiable loss and any optax optimizer, with minibatches
  drawn from ``data`` (the parameter-server form of SGD, thesis Eq 2.2–2.3);
* :func:`fixed_point` – a plain fixed-point iteration ``w ← f(w)`` (thesis Eq 5.1).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scarjax import validate as va
from scarjax import tree as tu
from scarjax.perturb import workers as wk
from scarjax.core import Algorithm, State

PyTree = Any

__all__ = ["from_optax", "fixed_point", "sample_batch", "num_examples"]


def num_examples(data: PyTree) -> int:
    """Number of examples (the common leading axis of every leaf of ``data``)."""
    leaves = jax.tree.leaves(data)
    if not leaves:
        raise ValueError("data must hold at least one array (examples along the leading axis), got none")
    for path, x in jax.tree_util.tree_leaves_with_path(data):
        if np.ndim(x) < 1:
            raise ValueError(
                f"data{jax.tree_util.keystr(path)} must be an array with a leading example axis, "
                f"got {type(x).__name__} of shape {np.shape(x)}"
            )
    sizes = {np.shape(x)[0] for x in leaves}
    if len(sizes) != 1:
        raise ValueError(f"data leaves must share their leading (example) axis, got sizes {sizes}")
    n = sizes.pop()
    if n == 0:
        raise ValueError("data has no examples (leading axis of length 0)")
    return n


def sample_batch(data: PyTree, key: jax.Array, batch_size: int | None) -> PyTree:
    """A minibatch of ``batch_size`` examples drawn uniformly with replacement (all of
    ``data`` when ``batch_size`` is ``None``).

    With replacement keeps sampling O(batch) per step: ``jax.random.choice(...,
    replace=False)`` sorts the whole index range each step, ~40x slower on 2 CPU cores
    for vmapped trials (measured), for no statistical benefit at these batch fractions.
    """
    if batch_size is None:
        return data
    n = num_examples(data)
    idx = jax.random.randint(key, (batch_size,), 0, n)
    # jnp.asarray: a NumPy leaf cannot be indexed by a traced index.
    return jax.tree.map(lambda x: jnp.asarray(x)[idx], data)


def _init_fn(init_params: PyTree | Callable[[jax.Array], PyTree]) -> Callable[[jax.Array], PyTree]:
    if callable(init_params):
        return init_params
    if not jax.tree.leaves(init_params):
        raise ValueError(f"init_params must be a pytree of arrays (or a function key -> params), got {init_params!r}")
    va.check_finite_tree("init_params", init_params)
    return lambda key: jax.tree.map(jnp.asarray, init_params)


def _check_common(loss_name: str, loss: Any, init_params: Any, optimum: Any, norm: Any, name: Any) -> None:
    """Checks shared by :func:`from_optax` and :func:`fixed_point`: callables, a name, and
    an optimum with the parameters' structure and shapes (when the parameters are given
    as values; otherwise :func:`scarjax.run` checks it against ``init``'s output)."""
    va.check_callable(loss_name, loss)
    va.check_callable("norm", norm)
    va.check_str("name", name)
    if optimum is not None:
        if not jax.tree.leaves(optimum):
            raise ValueError(f"optimum must be a pytree of arrays like the parameters, or None; got {optimum!r}")
        va.check_finite_tree("optimum", optimum)
        if not callable(init_params):
            va.check_tree_like("optimum", optimum, init_params, "init_params")


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
    precision: str | None = None,
) -> Algorithm:
    """Wrap ``loss_fn(params, batch)`` and an optax optimizer as an :class:`Algorithm`.

    Each iteration draws a minibatch (``batch_size`` examples with replacement, or the
    full ``data``), takes the gradient at the parameters the workers *read* and returns
    the optimizer's update as Δ; the optimizer state lives in ``state.aux`` (co-located
    with the parameters, so fault hooks can lose it too). The loss recorded in traces is
    ``loss_fn`` over the full ``data``.

    Worker mode (:mod:`scarjax.perturb.workers`, thesis Example 5.2.2): the example axis of
    ``data`` is split into ``M`` contiguous shards (:func:`scarjax.perturb.workers.shard_examples`);
    each worker draws ``ceil(batch_size / M)`` examples without replacement from its shard
    (its whole shard when ``batch_size`` is ``None``), processes the first fraction
    ``progress`` of them and sends the mean gradient over the points it processed with
    their count; the server merges (Sync-on-the-fly Eq 5) and takes the optimizer step at
    the stored parameters. This needs ``loss_fn`` to be a mean of per-example losses
    (plus terms that do not depend on the batch, such as a ridge penalty): a worker's
    gradient is that of the weighted mean of ``loss_fn`` on one-example batches.

    ``precision`` (:attr:`Algorithm.precision`): the precision of the float32 matrix
    products in a run; ``'highest'`` for a rework measurement on a GPU or TPU, whose
    default (TF32 / bfloat16) puts the rounding floor ~1,000× higher than float32's.

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
    _check_common("loss_fn", loss_fn, init_params, optimum, norm, name)
    n = num_examples(data)
    if batch_size is not None:
        batch_size = va.check_int("batch_size", batch_size, lo=1, hi=n)
    # NumPy arrays (or lists) as data become JAX arrays here, once: the minibatch of a
    # traced step indexes them with a traced index, which a NumPy array refuses
    # (TracerArrayConversionError), and every run / run_trials then sees the same arrays.
    data = jax.tree.map(jnp.asarray, data)
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

    def weighted_loss(params, batch, weights):
        one = lambda ex: loss_fn(params, jax.tree.map(lambda x: x[None], ex))  # noqa: E731
        per_example = jax.vmap(one)(batch)
        total = jnp.sum(weights)
        return jnp.sum(weights * per_example) / jnp.where(total > 0, total, 1.0)

    def shard(data, workers):
        shards, valid = wk.shard_examples(data, workers)
        per = valid.shape[1]
        b = per if batch_size is None else min(-(-batch_size // workers), per)
        # ``slots`` carries the per-worker minibatch size in its (static) shape.
        slots = jnp.broadcast_to(jnp.arange(b, dtype=jnp.int32), (workers, b))
        return {"data": shards, "valid": valid, "slots": slots}

    def grad(view, state, shard, key, progress):
        shard_data, valid = shard["data"], shard["valid"]
        if batch_size is not None:
            per, b = valid.shape[0], shard["slots"].shape[0]
            u = jnp.where(valid, jax.random.uniform(key, (per,)), 2.0)
            idx = jnp.argsort(u)[:b]
            shard_data = jax.tree.map(lambda x: x[idx], shard_data)
            valid = valid[idx]
        weights = wk.example_weights(valid, progress)
        return jax.grad(weighted_loss)(view, shard_data, weights), jnp.sum(weights)

    def apply(message, state, data, key):
        updates, opt_state = optimizer.update(message, state.aux, state.params)
        return updates, State(state.params, opt_state)

    return Algorithm(
        init=init,
        update=update,
        loss=loss,
        norm=norm,
        data=data,
        optimum=optimum,
        name=name,
        precision=precision,
        grad=grad,
        apply=apply,
        shard=shard,
    )


def fixed_point(
    f: Callable[[PyTree, PyTree], PyTree],
    init_params: PyTree | Callable[[jax.Array], PyTree],
    loss: Callable[[PyTree, PyTree], jax.Array],
    data: PyTree = None,
    *,
    optimum: PyTree | None = None,
    norm: Callable[[PyTree], jax.Array] = tu.l2_norm,
    name: str = "fixed_point",
    precision: str | None = None,
) -> Algorithm:
    """Wrap a deterministic iteration ``w ← f(w, data)`` (thesis Eq 5.1) as an
    :class:`Algorithm`: the workers compute ``Δ = f(view) − view`` from what they read.

    With write-point perturbations only, the loop reproduces Eq 5.2 exactly:
    ``y⁽ᵏ⁺¹⁾ = f(y⁽ᵏ⁾ + δₖ)``.
    """
    va.check_callable("f", f)
    _check_common("loss", loss, init_params, optimum, norm, name)
    make_params = _init_fn(init_params)

    def init(key, data):
        return State(make_params(key), ())

    def update(view, state, data, key):
        return tu.tree_sub(f(view, data), view), state

    def grad(view, state, data, key, progress):
        # Every worker proposes Δ = f(view) − view from its (possibly stale) view; a
        # worker that finished a fraction ``progress`` of its work carries that weight.
        return tu.tree_sub(f(view, data), view), jnp.clip(progress, 0.0, 1.0)

    def apply(message, state, data, key):
        return message, state

    return Algorithm(
        init=init,
        update=update,
        grad=grad,
        apply=apply,
        loss=lambda state, data: loss(state.params, data),
        norm=norm,
        data=data,
        optimum=optimum,
        name=name,
        precision=precision,
    )
