"""PGNS estimators: thesis Eq 3.2 and Appendix A.1 (private; public names via :mod:`scarjax.pollux`).

The PGNS of pre-conditioned SGD ``w <- w - eps * P g_mb`` is (Eq 3.2 = Eq A.6)

    phi_t = tr(P Sigma P^T) / |P g|^2,

with ``g`` the true gradient, ``Sigma`` the covariance of *per-example*
gradients and ``P`` the (diagonal) pre-conditioner of the optimizer.  It is
the batch size at which the optimal step (Eq A.3-A.5) is half of its
noise-free value, and it drives the statistical efficiency of Eq 3.3.

Estimators (all return :class:`GradStats` ``(sqr, var)`` with
``sqr ~ |P g|^2`` and ``var ~ tr(P Sigma P^T)``, so ``phi = var / sqr``):

* :func:`microbatch_stats` - the unbiased two-batch estimator (McCandlish et
  al. 2018, App. A.1, applied to ``P g`` as Sec 3.3.1 prescribes) from ``K >= 2``
  micro-batch (or replica) gradients taken at the *same* parameters.  With
  ``b`` examples per micro-batch, ``B = K b``,
  ``S = mean_k |P g_k|^2`` and ``G = |P mean_k g_k|^2``::

      E[S] = |Pg|^2 + tr(P Sigma P^T) / b,     E[G] = |Pg|^2 + tr(P Sigma P^T) / B
      sqr  = (B G - b S) / (B - b)             (unbiased for |Pg|^2)
      var  = (S - G) / (1/b - 1/B)             (unbiased for tr(P Sigma P^T))

  The identities hold exactly when micro-batch examples are drawn i.i.d.
  (uniformly with replacement) from the data set, for a fixed ``P``.  For a diagonal
  ``P`` both ``S`` and ``G`` are weighted sums of two per-coordinate moments,
  ``sum_k g_k`` and ``sum_k g_k^2`` (:class:`MicrobatchMoments`, from
  :func:`reduce_microbatches`): that is all the optax transforms need.
* :func:`differenced_stats` - the same formula applied to two *consecutive*
  gradients of a single replica without accumulation (Sec 3.3.1, "differenced
  variance estimator").  It is **biased**: the two gradients are taken at
  different parameters, so the drift of ``g`` between steps counts as noise.
* :func:`exact_stats` - the exact reference from per-example gradients of the
  whole data set (``vmap(grad)``): ``g = mean_i g_i`` and
  ``tr(P Sigma P^T) = mean_i |P (g_i - g)|^2`` (population covariance).

Note that ``phi`` is invariant under ``P -> c P`` for any scalar ``c``: the
learning rate, Adam's bias correction of ``nu`` and any global scale factor
cancel, so only the *shape* of the diagonal matters.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va

PyTree = Any
Preconditioner = PyTree | None  # a diagonal with the structure of params, or None = I


class GradStats(NamedTuple):
    """Gradient statistics of Eq 3.2: ``sqr ~ |P g|^2``, ``var ~ tr(P Sigma P^T)``.

    ``var`` is per *example* (the covariance of single-example gradients), so
    the variance of a batch-``M`` gradient is ``var / M`` and ``phi = var / sqr``.
    """

    sqr: jax.Array
    var: jax.Array


# ---------------------------------------------------------------------------
# Estimators
# ---------------------------------------------------------------------------


def _sq_norm(tree: PyTree, precond: Preconditioner = None) -> jax.Array:
    """``|P x|^2`` summed over all leaves (``P`` diagonal or identity)."""
    leaves = jax.tree.leaves(tree)
    if precond is None:
        return sum(jnp.sum(jnp.square(x)) for x in leaves)
    pleaves = jax.tree.leaves(precond)
    if len(pleaves) != len(leaves):
        raise ValueError(
            f"preconditioner has {len(pleaves)} leaves but the gradient has {len(leaves)}; "
            "it must be a diagonal with the structure of params"
        )
    return sum(jnp.sum(jnp.square(p * x)) for p, x in zip(pleaves, leaves))


def _stacked_sq_norms(grads: PyTree, precond: Preconditioner) -> jax.Array:
    """``|P g_k|^2`` for every slice ``k`` of the leading axis (shape ``[K]``)."""
    return jax.vmap(lambda g: _sq_norm(g, precond))(grads)


Axis = Any  # 0, -1, or a pytree of them (a prefix of the gradients' structure), per leaf


def _leaf_axes(grads: PyTree, axis: Axis) -> list[int]:
    """The stacking axis of every leaf of ``grads`` (``axis`` an int or a prefix pytree)."""
    if isinstance(axis, (int, np.integer)):
        return [int(axis)] * len(jax.tree.leaves(grads))
    try:
        per_leaf = jax.tree.map(lambda a, sub: jax.tree.map(lambda _: a, sub), axis, grads)
    except ValueError as e:
        raise ValueError(
            f"microbatch_axis must be 0, -1 or a pytree of them that is a prefix of the gradients' "
            f"structure: {jax.tree.structure(axis)} vs {jax.tree.structure(grads)}"
        ) from e
    return [int(a) for a in jax.tree.leaves(per_leaf)]


def _stack_size(grads: PyTree, name: str, axis: Axis = 0) -> int:
    """The common size ``K`` of the stacking axis of every leaf (``axis`` per leaf)."""
    leaves = jax.tree.leaves(grads)
    if not leaves:
        raise ValueError(f"{name} is an empty pytree")
    axes = _leaf_axes(grads, axis)
    sizes = {jnp.shape(x)[a] if -jnp.ndim(x) <= a < jnp.ndim(x) else None for x, a in zip(leaves, axes)}
    if None in sizes or len(sizes) != 1:
        where = (
            "leading axis" if set(axes) == {0} else f"axis {axes[0]}" if len(set(axes)) == 1 else "stacking axis"
        )
        raise ValueError(
            f"{name} must be stacked per micro-batch: every leaf needs the same {where} K, "
            f"got sizes {sorted(s for s in sizes if s is not None)} "
            f"{'(and leaves without that axis)' if None in sizes else ''}"
        )
    return int(sizes.pop())


def _check_axis(axis) -> Axis:
    """``microbatch_axis``: 0 (``vmap``'s default ``out_axes``), -1 (stacked last), or a
    pytree of 0/-1 per leaf (e.g. :func:`microbatch_axes`), as ``vmap``'s ``out_axes``."""

    def one(a):
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)) or a not in (0, -1):
            raise ValueError(
                f"microbatch_axis must be 0 or -1 (vmap's out_axes), or a pytree of them per leaf; got {axis!r}"
            )
        return int(a)

    if isinstance(axis, (dict, list, tuple)):
        if not jax.tree.leaves(axis):
            raise ValueError(f"microbatch_axis must be 0 or -1 (vmap's out_axes), or a pytree of them; got {axis!r}")
        return jax.tree.map(one, axis)
    return one(axis)


def microbatch_axes(params: PyTree) -> PyTree:
    """The faster micro-batch stacking axis of every leaf on XLA:CPU: ``-1`` for a weight
    matrix whose last dimension is narrow (at most 1/8 of the one before, e.g. a classifier's
    ``[784, 10]`` kernel), ``0`` otherwise.

    Use the same tree for ``jax.vmap(..., out_axes=axes)`` and ``microbatch_axis=axes``.  The
    per-micro-batch weight gradients of a dense layer ``[in, out]`` are a batched product
    ``X_k^T D_k``; stacked last, XLA computes the transposed product ``D_k^T X_k``, which is
    faster when ``out`` is narrow and slower when it is not.  Measured on 2 cores
    (``benchmarks/bench_pollux.py --quick``, PGNS step over the plain step, min of rounds):
    MNIST MLR 1.17x with the axis first, 0.85x last, 0.82x with these axes; MLP 784-256-256-10
    1.45x first, 1.81x last, 1.36x with these axes.  The statistics are the same for every
    choice.
    """
    return jax.tree.map(
        lambda x: -1 if jnp.ndim(x) >= 2 and 8 * jnp.shape(x)[-1] <= jnp.shape(x)[-2] else 0, params
    )


def two_batch_stats(small_sq: jax.Array, big_sq: jax.Array, small_batch, big_batch) -> GradStats:
    """The two-batch identities of App. A.1 ([150] McCandlish et al., App. A.1).

    Given ``small_sq`` an unbiased estimate of ``E|P g_b|^2`` at batch size ``b``
    and ``big_sq`` of ``E|P g_B|^2`` at ``B > b``, returns unbiased estimates of
    ``|Pg|^2`` and ``tr(P Sigma P^T)`` (Eq 3.2 numerator and denominator).
    """
    b = jnp.asarray(small_batch, jnp.result_type(small_sq, float))
    big = jnp.asarray(big_batch, b.dtype)
    sqr = (big * big_sq - b * small_sq) / (big - b)
    var = (small_sq - big_sq) / (1.0 / b - 1.0 / big)
    return GradStats(sqr, var)


def microbatch_stats(
    grads: PyTree, microbatch_size, precond: Preconditioner = None, *, microbatch_axis: Axis = 0
) -> GradStats:
    """Unbiased PGNS statistics from ``K >= 2`` micro-batch gradients (Eq 3.2, App. A.1).

    Args:
      grads: pytree whose leaves are stacked along a leading axis ``K >= 2``, the
        gradient of each micro-batch (or replica), all taken at the same params,
        e.g. ``jax.vmap(jax.grad(loss), (None, 0))(params, microbatches)``.
      microbatch_size: ``b``, examples per micro-batch (scalar, may be traced).
      precond: diagonal pre-conditioner ``P`` with the structure of params
        (e.g. from :func:`preconditioner`), or ``None`` for ``P = I`` (plain GNS).
      microbatch_axis: the stacking axis: ``0`` (``vmap``'s default), ``-1``
        (``jax.vmap(..., out_axes=-1)``), or a pytree of them per leaf, the same tree as
        ``vmap``'s ``out_axes`` (e.g. :func:`microbatch_axes`, the faster layout on XLA:CPU).

    Returns:
      :class:`GradStats` with ``sqr`` unbiased for ``|Pg|^2`` and ``var`` unbiased for
      ``tr(P Sigma P^T)``; either may be negative for a single sample.
    """
    axis = _check_axis(microbatch_axis)
    k = _stack_size(grads, "grads", axis)
    if k < 2:
        raise ValueError(
            f"microbatch_stats needs K >= 2 micro-batch gradients, got K={k}; "
            "use differenced_stats for a single replica"
        )
    va.check_real("microbatch_size", microbatch_size, lo=0, lo_open=True)
    return _microbatch_mean_stats(grads, k, microbatch_size, precond, axis)[1]


def _sum_pair(a: jax.Array, b: jax.Array, dims: tuple[int, ...]) -> tuple[jax.Array, jax.Array]:
    """``(sum(a), sum(b))`` over ``dims`` as one variadic reduction: one loop over the data.

    XLA:CPU lowers two separate sums of the same stacked gradients to two kernels, each
    dispatched to its thread pool; on small models the dispatch, not the arithmetic, is
    the cost of the statistics.
    """
    zero = jnp.zeros((), jnp.promote_types(jnp.result_type(a, b), jnp.float32))
    return jax.lax.reduce(
        (a.astype(zero.dtype), b.astype(zero.dtype)),
        (zero, zero),
        lambda x, y: (x[0] + y[0], x[1] + y[1]),
        dims,
    )


@dataclasses.dataclass(frozen=True)
class MicrobatchMoments:
    """Per-coordinate moments of ``K`` micro-batch gradients: what the PGNS needs of them.

    For a diagonal ``P``, the two-batch statistics of App. A.1 (:func:`microbatch_stats`)
    depend on the ``K`` gradients only through ``sum_k g_k`` and ``sum_k g_k^2``
    (``K |P mean_k g_k|^2`` and ``sum_k |P g_k|^2`` are their ``P^2``-weighted sums), so the
    optax transforms (:func:`~scarjax.pollux.with_pgns`, :func:`~scarjax.pollux.track_pgns`)
    take these moments as the extra argument ``microbatch_moments=`` while ``updates`` stays
    an ordinary gradient (optax's contract).  Build them with :func:`reduce_microbatches`
    from stacked micro-batch gradients; with data-parallel replicas, ``sum`` and
    ``sum_of_squares`` are a ``psum`` of each replica's ``g`` and ``g * g``.

    A pytree: ``sum`` and ``sum_of_squares`` are children (with the structure of the
    gradients, accumulated in at least float32); ``count`` is static (part of the tree
    definition), so ``jit``, ``cond`` and ``scan`` keep it a Python int.

    Attributes:
      sum: ``sum_k g_k`` per coordinate.
      sum_of_squares: ``sum_k g_k^2`` per coordinate.
      count: ``K``, the number of micro-batch gradients (a Python int >= 1).
    """

    sum: PyTree
    sum_of_squares: PyTree
    count: int = dataclasses.field(metadata=dict(static=True))


jax.tree_util.register_dataclass(MicrobatchMoments)


def _moments(grads: PyTree, k: int, axis: Axis = 0) -> tuple[PyTree, MicrobatchMoments]:
    """Mean gradient (in the gradients' dtype) and :class:`MicrobatchMoments` in one pass.

    Per leaf, one variadic reduction over the micro-batch axis gives ``sum_k g_k`` and
    ``sum_k g_k^2`` together (the only pass over the ``K``-times larger stacked gradients).
    On XLA:CPU a plain ``sum`` over the micro-batch axis is handed to a reduction kernel
    that is 20-30x slower than the variadic reduction (``benchmarks/bench_pollux.py``,
    breakdown).  bf16/fp16 gradients are accumulated in float32.
    """
    leaves, treedef = jax.tree.flatten(grads)
    sums, squares, means = [], [], []
    for g, a in zip(leaves, _leaf_axes(grads, axis)):
        gf = g.astype(jnp.promote_types(g.dtype, jnp.float32))
        total, total_sq = _sum_pair(gf, jnp.square(gf), (a % g.ndim,))
        sums.append(total)
        squares.append(total_sq)
        means.append((total / k).astype(g.dtype))
    unflat = lambda xs: jax.tree.unflatten(treedef, xs)  # noqa: E731
    return unflat(means), MicrobatchMoments(unflat(sums), unflat(squares), k)


def _moment_stats(moments: MicrobatchMoments, microbatch_size, precond: Preconditioner) -> GradStats:
    """:func:`microbatch_stats` from the moments: ``mean_k |P g_k|^2 = sum_i P_i^2 (sum_k
    g_ki^2) / K`` and ``|P mean_k g_k|^2 = sum_i P_i^2 (sum_k g_ki / K)^2``, two dot
    products per leaf (about twice as fast as reductions to a scalar on XLA:CPU)."""
    k = moments.count
    sums = jax.tree.leaves(moments.sum)
    squares = jax.tree.leaves(moments.sum_of_squares)
    if precond is None:
        pleaves = [None] * len(sums)
    else:
        pleaves = jax.tree.leaves(precond)
        if len(pleaves) != len(sums):
            raise ValueError(
                f"preconditioner has {len(pleaves)} leaves but the gradient has {len(sums)}; "
                "it must be a diagonal with the structure of params"
            )
    small, big = 0.0, 0.0
    for total, total_sq, p in zip(sums, squares, pleaves):
        mean = total / k
        if p is None:
            small = small + jnp.vdot(total_sq, jnp.ones_like(total_sq)) / k
            big = big + jnp.vdot(mean, mean)
        else:
            w = jnp.broadcast_to(jnp.square(p).astype(mean.dtype), mean.shape)
            small = small + jnp.vdot(w, total_sq) / k
            big = big + jnp.vdot(w * mean, mean)
    small = jnp.asarray(small, jnp.result_type(float))
    b = jnp.asarray(microbatch_size, small.dtype)
    return two_batch_stats(small, big, b, k * b)


def _microbatch_mean_stats(grads: PyTree, k: int, microbatch_size, precond: Preconditioner, axis: Axis = 0):
    """Mean gradient and :func:`microbatch_stats` in one pass over the stacked gradients."""
    mean, moments = _moments(grads, k, axis)
    return mean, _moment_stats(moments, microbatch_size, precond)


def reduce_microbatches(grads: PyTree, *, microbatch_axis: Axis = 0) -> tuple[PyTree, MicrobatchMoments]:
    """The mean of stacked micro-batch gradients and their :class:`MicrobatchMoments`.

    One pass over the stacked gradients gives both: the mean (the gradient of the whole
    batch, in the gradients' dtype) to pass as optax's ``updates``, and the moments to pass
    as ``microbatch_moments=`` to an optimizer built with :func:`~scarjax.pollux.with_pgns`
    or :func:`~scarjax.pollux.track_pgns`::

      grads_k = px.microbatch_grads(loss, params, xb, yb)     # leaves [K, ...]
      grads, moments = px.reduce_microbatches(grads_k)
      updates, state = opt.update(grads, state, params, microbatch_moments=moments)

    Args:
      grads: pytree whose leaves are stacked over ``K >= 1`` micro-batches (``K = 1``: one
        gradient; the transforms then use the differenced estimator).
      microbatch_axis: the stacking axis: ``0`` (``vmap``'s default), ``-1``, or a pytree
        of them per leaf (:func:`microbatch_axes`), the same tree as ``vmap``'s ``out_axes``.

    The stacked gradients pass through ``lax.optimization_barrier`` first: it keeps
    XLA:CPU from fusing their producer (the per-micro-batch backward pass) into the
    reduction and recomputing it (``benchmarks/bench_pollux.py``: MLR 1.12-1.15x of the
    plain step without it, 1.07-1.09x with it).
    """
    axis = _check_axis(microbatch_axis)
    k = _stack_size(grads, "grads", axis)
    return _moments(jax.lax.optimization_barrier(grads), k, axis)


def differenced_stats(
    prev_grad: PyTree, grad: PyTree, batch_size, precond: Preconditioner = None
) -> GradStats:
    """Differenced (biased) PGNS statistics from two consecutive gradients (Sec 3.3.1).

    For a single replica without accumulation only one gradient per step exists;
    the two-batch identities are applied to ``g^(t-1)`` and ``g^(t)`` as if they
    were two micro-batches of size ``batch_size``.  **Biased**: the change in the
    true gradient between the two parameter values inflates ``var`` (and deflates
    ``sqr``), so ``phi`` is over-estimated when the learning rate is large.
    """
    va.check_real("batch_size", batch_size, lo=0, lo_open=True)
    s1, s2 = _sq_norm(prev_grad, precond), _sq_norm(grad, precond)
    big = _sq_norm(jax.tree.map(lambda a, b: 0.5 * (a + b), prev_grad, grad), precond)
    b = jnp.asarray(batch_size, s1.dtype)
    return two_batch_stats(0.5 * (s1 + s2), big, b, 2 * b)


def exact_stats(per_example_grads: PyTree, precond: Preconditioner = None) -> GradStats:
    """Exact ``|Pg|^2`` and ``tr(P Sigma P^T)`` from per-example gradients (reference).

    ``per_example_grads`` is stacked over *all* ``N`` examples of the data set
    (e.g. ``jax.vmap(jax.grad(loss_one), (None, 0))(params, data)``); the true
    gradient is their mean and ``Sigma`` their population covariance, the
    covariance of one uniformly drawn example.  Defines the ground truth of Eq 3.2.
    """
    n = _stack_size(per_example_grads, "per_example_grads")
    if n < 2:
        raise ValueError(f"exact_stats needs at least 2 per-example gradients, got {n}")
    g = jax.tree.map(lambda x: jnp.mean(x, axis=0), per_example_grads)
    sqr = _sq_norm(g, precond)
    centred = jax.tree.map(lambda x, m: x - m, per_example_grads, g)
    var = jnp.mean(_stacked_sq_norms(centred, precond))
    return GradStats(sqr, var)


def noise_scale(stats: GradStats) -> jax.Array:
    """``phi = tr(P Sigma P^T) / |P g|^2`` (Eq 3.2 / Eq A.6).

    Estimates are clipped so the result is always in ``[0, inf]``: a negative
    ``var`` counts as 0, and ``sqr <= 0`` (noise swamps the signal, e.g. at an
    optimum) gives ``phi = inf``, for which Eq 3.3 gives efficiency 1 at every
    batch size.  Never NaN for finite inputs.
    """
    sqr = jnp.asarray(stats.sqr)
    var = jnp.maximum(jnp.asarray(stats.var), 0.0)
    safe = jnp.where(sqr > 0, sqr, 1.0)
    return jnp.where(sqr > 0, var / safe, jnp.inf)


def per_example_grads(loss_fn: Callable[..., jax.Array], params: PyTree, *batch) -> PyTree:
    """``vmap(grad)`` helper: gradients of ``loss_fn(params, *example)`` for every example.

    ``loss_fn`` must take unbatched examples (one row of each array in ``batch``).
    """
    return jax.vmap(jax.grad(loss_fn), in_axes=(None,) + (0,) * len(batch))(params, *batch)


def microbatch_grads(
    loss_fn: Callable[..., jax.Array], params: PyTree, *microbatches, microbatch_axis: Axis = 0, method: str = "vmap"
) -> PyTree:
    """Gradients of ``loss_fn(params, *microbatch)`` for each of ``K`` micro-batches, stacked
    on ``microbatch_axis`` (per leaf: 0, -1 or a pytree such as :func:`microbatch_axes`), as
    :func:`reduce_microbatches` takes them.

    ``microbatches`` are arrays with leading axes ``[K, b, ...]``.  ``method='vmap'``:
    ``jax.vmap(jax.grad(loss_fn))``, every layer's forward and backward pass over all ``K b``
    examples at once, the per-micro-batch weight gradients as one batched product;
    ``method='scan'``: one micro-batch at a time (``lax.fori_loop``, the memory of gradient
    accumulation), each gradient written into the stacked result.  On XLA:CPU (2 cores,
    ``benchmarks/bench_pollux.py``) ``vmap`` is faster for dense layers (MLP: ~1.4x the
    plain step against ~2x for ``scan``) and the two are within noise on the CNN.
    """
    axis = _check_axis(microbatch_axis)
    if method not in ("vmap", "scan"):
        raise ValueError(f"method must be 'vmap' or 'scan', got {method!r}")
    if not microbatches:
        raise ValueError("microbatch_grads needs at least one array of micro-batches [K, b, ...]")
    k = {jnp.shape(m)[0] if jnp.ndim(m) else None for m in microbatches}
    if None in k or len(k) != 1:
        raise ValueError(f"microbatches must share the leading axis K, got shapes {[jnp.shape(m) for m in microbatches]}")
    grad = jax.grad(loss_fn)
    n_in = len(microbatches)
    if method == "vmap":
        return jax.vmap(grad, (None,) + (0,) * n_in, axis)(params, *microbatches)
    axes = _leaf_axes(params, axis)
    leaves, treedef = jax.tree.flatten(params)
    k = k.pop()
    out = [jnp.zeros(x.shape + (k,) if a == -1 else (k,) + x.shape, x.dtype) for x, a in zip(leaves, axes)]

    def body(i, out):
        g = jax.tree.leaves(grad(params, *(m[i] for m in microbatches)))
        return [
            jax.lax.dynamic_update_index_in_dim(o, gl.astype(o.dtype), i, a % o.ndim) for o, gl, a in zip(out, g, axes)
        ]

    return jax.tree.unflatten(treedef, jax.lax.fori_loop(0, k, body, out))


