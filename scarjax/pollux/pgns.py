"""Pre-conditioned gradient noise scale (PGNS), thesis Eq 3.2 and Appendix A.1.

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
  (uniformly with replacement) from the data set, for a fixed ``P``.
* :func:`differenced_stats` - the same formula applied to two *consecutive*
  gradients of a single replica without accumulation (Sec 3.3.1, "differenced
  variance estimator").  It is **biased**: the two gradients are taken at
  different parameters, so the drift of ``g`` between steps counts as noise.
* :func:`exact_stats` - the exact reference from per-example gradients of the
  whole data set (``vmap(grad)``): ``g = mean_i g_i`` and
  ``tr(P Sigma P^T) = mean_i |P (g_i - g)|^2`` (population covariance).

The smoothed, stateful version is an optax gradient transformation:
:func:`track_pgns` (identity or user pre-conditioner, drops into any
``optax.chain``) and :func:`with_pgns` (wraps any optax optimizer and takes
``P`` from that optimizer's own state, :func:`preconditioner`).  Both take the
*stacked* micro-batch gradients (leading axis ``K``) as ``updates``, average
them, update the statistics with bias-corrected exponential moving averages
and pass the averaged gradient on.

Note that ``phi`` is invariant under ``P -> c P`` for any scalar ``c``: the
learning rate, Adam's bias correction of ``nu`` and any global scale factor
cancel, so only the *shape* of the diagonal matters.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scarjax.pollux import _checks, precond
from scarjax.pollux.precond import preconditioner

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
    _checks.check_range("microbatch_size", microbatch_size, lo=0, lo_open=True)
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


def _microbatch_mean_stats(grads: PyTree, k: int, microbatch_size, precond: Preconditioner, axis: Axis = 0):
    """Mean gradient and :func:`microbatch_stats` in one pass over the stacked gradients.

    ``mean_k |P g_k|^2 = sum_i P_i^2 mean_k g_ki^2`` and ``|P mean_k g_k|^2 = sum_i P_i^2
    (mean_k g_ki)^2``: per leaf, one variadic reduction over the micro-batch axis gives
    ``sum_k g_k`` and ``sum_k g_k^2`` together (the only pass over the ``K``-times larger
    stacked gradients), then two dot products over the parameter axes give both weighted
    sums.  On XLA:CPU a plain ``sum`` over the micro-batch axis is handed to a reduction
    kernel that is 20-30x slower than the variadic reduction, and dot products are about
    twice as fast as reductions to a scalar (``benchmarks/bench_pollux.py``, breakdown).
    """
    leaves, treedef = jax.tree.flatten(grads)
    axes = _leaf_axes(grads, axis)
    if precond is None:
        pleaves = [None] * len(leaves)
    else:
        pleaves = jax.tree.leaves(precond)
        if len(pleaves) != len(leaves):
            raise ValueError(
                f"preconditioner has {len(pleaves)} leaves but the gradient has {len(leaves)}; "
                "it must be a diagonal with the structure of params"
            )
    means, small, big = [], 0.0, 0.0
    for g, p, a in zip(leaves, pleaves, axes):
        gf = g.astype(jnp.promote_types(g.dtype, jnp.float32))  # accumulate bf16/fp16 in f32
        total, total_sq = _sum_pair(gf, jnp.square(gf), (a % g.ndim,))
        mean = total / k
        means.append(mean.astype(g.dtype))
        if p is None:
            small = small + jnp.vdot(total_sq, jnp.ones_like(total_sq)) / k
            big = big + jnp.vdot(mean, mean)
        else:
            w = jnp.broadcast_to(jnp.square(p).astype(mean.dtype), mean.shape)
            small = small + jnp.vdot(w, total_sq) / k
            big = big + jnp.vdot(w * mean, mean)
    small = jnp.asarray(small, jnp.result_type(float))
    b = jnp.asarray(microbatch_size, small.dtype)
    return jax.tree.unflatten(treedef, means), two_batch_stats(small, big, b, k * b)


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
    _checks.check_range("batch_size", batch_size, lo=0, lo_open=True)
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
    :func:`with_pgns`/:func:`track_pgns` take them.

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


_derive = precond.derive  # with_pgns's argument ``preconditioner`` shadows the function


# ---------------------------------------------------------------------------
# Smoothed statistics as an optax gradient transformation
# ---------------------------------------------------------------------------


class PGNSState(NamedTuple):
    """State of :func:`track_pgns`: bias-corrected moving averages of :class:`GradStats`.

    Attributes:
      count: number of estimates folded into the averages.
      sqr_ema, var_ema: un-normalised exponential moving averages of ``sqr``, ``var``.
      weight: the matching average of ones (``1 - decay^count``), the bias correction.
      last: the raw (unsmoothed) statistics of the latest step.
      biased: whether the averages come from the differenced (biased) estimator.
      nonfinite: number of steps skipped because the gradient was not finite.
      prev_grad: previous averaged gradient (differenced estimator), or ``()``.
      has_prev: whether ``prev_grad`` holds a gradient.
      steps: number of updates seen (folded in or not).
    """

    count: jax.Array
    sqr_ema: jax.Array
    var_ema: jax.Array
    weight: jax.Array
    last: GradStats
    biased: jax.Array
    nonfinite: jax.Array
    prev_grad: PyTree
    has_prev: jax.Array
    steps: jax.Array


class PGNSWrapperState(NamedTuple):
    """State of :func:`with_pgns`: the wrapped optimizer's state and the PGNS statistics."""

    inner_state: Any
    pgns: PGNSState


precond.LOOK_THROUGH[PGNSWrapperState] = "inner_state"
precond.SKIP.append(PGNSState)


def _init_pgns(params, differenced: bool) -> PGNSState:
    z = jnp.zeros([], jnp.float32)
    prev = jax.tree.map(jnp.zeros_like, params) if differenced else ()
    return PGNSState(
        count=jnp.zeros([], jnp.int32),
        sqr_ema=z,
        var_ema=z,
        weight=z,
        last=GradStats(z, z),
        biased=jnp.zeros([], bool),
        nonfinite=jnp.zeros([], jnp.int32),
        prev_grad=prev,
        has_prev=jnp.zeros([], bool),
        steps=jnp.zeros([], jnp.int32),
    )


def _update_pgns(
    grads,
    state: PGNSState,
    microbatch_size,
    precond,
    decay: float,
    differenced: bool,
    warmup: int = 0,
    axis: Axis = 0,
):
    """Fold one step's micro-batch gradients into the smoothed statistics."""
    k = _stack_size(grads, "updates (stacked micro-batch gradients)", axis)
    # Keep XLA:CPU from fusing the micro-batch gradients' producer into its consumers and
    # recomputing it (with separate mean and statistics reductions this took the overhead
    # on MLR from 1.12-1.15x to 1.07-1.09x; benchmarks/bench_pollux.py).
    grads = jax.lax.optimization_barrier(grads)
    b = jnp.asarray(microbatch_size, jnp.float32)
    if k >= 2:
        _checks.check_range("microbatch_size", microbatch_size, lo=0, lo_open=True)
        mean, stats = _microbatch_mean_stats(grads, k, b, precond, axis)
        valid = jnp.asarray(True)
        biased = jnp.asarray(False)
    elif differenced:
        treedef = jax.tree.structure(grads)
        mean = jax.tree.unflatten(
            treedef, [jnp.mean(g, axis=a) for g, a in zip(jax.tree.leaves(grads), _leaf_axes(grads, axis))]
        )
        stats = differenced_stats(state.prev_grad, mean, b, precond)
        valid = state.has_prev
        biased = jnp.asarray(True)
    else:
        raise ValueError(
            "a single micro-batch gradient (K=1) needs differenced=True, "
            "or pass K >= 2 stacked micro-batch gradients"
        )
    stats = GradStats(jnp.asarray(stats.sqr, jnp.float32), jnp.asarray(stats.var, jnp.float32))
    finite = jnp.isfinite(stats.sqr) & jnp.isfinite(stats.var)
    # Unbiased estimates replace averages accumulated from biased ones (as AdaptDL does).
    reset = state.biased & ~biased
    sqr_ema = jnp.where(reset, 0.0, state.sqr_ema)
    var_ema = jnp.where(reset, 0.0, state.var_ema)
    weight = jnp.where(reset, 0.0, state.weight)
    use = valid & finite & (state.steps >= warmup)
    new = PGNSState(
        count=state.count + use.astype(jnp.int32),
        sqr_ema=jnp.where(use, decay * sqr_ema + (1 - decay) * stats.sqr, state.sqr_ema),
        var_ema=jnp.where(use, decay * var_ema + (1 - decay) * stats.var, state.var_ema),
        weight=jnp.where(use, decay * weight + (1 - decay), state.weight),
        last=GradStats(jnp.where(finite, stats.sqr, jnp.nan), jnp.where(finite, stats.var, jnp.nan)),
        biased=jnp.where(use, biased, state.biased),
        nonfinite=state.nonfinite + (valid & ~finite).astype(jnp.int32),
        # The previous gradient is only read by the differenced estimator (K = 1).  A step
        # with K >= 2 leaves it untouched (no pass over params) and marks it stale, so a
        # later K = 1 step starts the differenced pairs afresh.
        prev_grad=(
            jax.tree.map(lambda m, p: jnp.where(finite, m, p).astype(p.dtype), mean, state.prev_grad)
            if differenced and k < 2
            else state.prev_grad
        ),
        has_prev=(state.has_prev | finite) if differenced and k < 2 else jnp.zeros([], bool),
        steps=state.steps + 1,
    )
    return mean, new


def _check_decay(decay):
    _checks.check_range("decay", decay, lo=0.0, hi=1.0, hi_open=True)


def track_pgns(
    microbatch_size: float | None = None,
    *,
    preconditioner: Preconditioner | str = None,
    decay: float = 0.95,
    differenced: bool = True,
    microbatch_axis: Axis = 0,
) -> optax.GradientTransformationExtraArgs:
    """Optax transform that estimates the PGNS (Eq 3.2) and averages micro-batch gradients.

    Place it first in an ``optax.chain``; ``update`` takes the *stacked* micro-batch
    gradients (leading axis ``K``) and returns their mean, so everything after it
    sees an ordinary gradient::

      opt = optax.chain(track_pgns(microbatch_size=32), optax.sgd(0.1))
      grads_k = jax.vmap(jax.grad(loss), (None, 0))(params, microbatches)  # [K, ...]
      updates, state = opt.update(grads_k, state, params)
      phi = pgns_from_state(state)

    With ``K >= 2`` the unbiased :func:`microbatch_stats` is used; with ``K = 1``
    (one replica, no accumulation) the biased :func:`differenced_stats` over
    consecutive steps (``state.biased`` is then True).  The statistics are
    smoothed by bias-corrected exponential moving averages with factor ``decay``
    (``phi`` is the ratio of the averages, not the average of ratios).

    Args:
      microbatch_size: examples per micro-batch ``b``; may instead be passed to
        ``update`` as the extra argument ``microbatch_size=`` (e.g. when an
        adaptive loop changes it).
      preconditioner: ``None``/``'identity'`` for ``P = I``, a diagonal pytree, or
        a callable ``params -> P``.  To take ``P`` from an optimizer use :func:`with_pgns`.
      decay: moving-average factor in ``[0, 1)``.  The per-step relative error of
        ``sqr`` is about ``(phi / B) * sqrt(2 / (K - 1))`` for ``K`` micro-batches of
        total ``B`` examples, so when ``phi >> B`` the horizon ``1 / (1 - decay)``
        must span many steps (AdaptDL uses ``0.999`` per ``M0`` examples); a short
        horizon tracks a changing ``phi`` faster but is noisier.
      differenced: keep the previous gradient so ``K = 1`` can use the
        differenced estimator (costs one copy of params in the state).
      microbatch_axis: the stacking axis of the gradients' leaves, ``0``, ``-1``
        (``jax.vmap(jax.grad(loss), (None, 0), out_axes=-1)``) or a pytree of them per leaf
        (:func:`microbatch_axes`; see :func:`microbatch_stats`).
    """
    _check_decay(decay)
    axis = _check_axis(microbatch_axis)
    if microbatch_size is not None:
        _checks.check_range("microbatch_size", microbatch_size, lo=0, lo_open=True)
    if isinstance(preconditioner, str) and preconditioner != "identity":
        raise ValueError(
            f"preconditioner must be None, 'identity', a pytree or a callable, "
            f"got {preconditioner!r}; use with_pgns(optimizer) for 'auto'"
        )

    def init_fn(params):
        return _init_pgns(params, differenced)

    def update_fn(updates, state, params=None, *, microbatch_size=microbatch_size, **extra):
        del extra
        if microbatch_size is None:
            raise ValueError("microbatch_size is required (at construction or as an update kwarg)")
        if preconditioner is None or isinstance(preconditioner, str):
            p = None
        elif callable(preconditioner):
            p = preconditioner(params)
        else:
            p = preconditioner
        return _update_pgns(updates, state, microbatch_size, p, decay, differenced, axis=axis)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def with_pgns(
    inner: optax.GradientTransformation,
    microbatch_size: float | None = None,
    *,
    preconditioner: str | Callable | PyTree = "auto",
    decay: float = 0.95,
    differenced: bool = True,
    eps: float | None = None,
    b2: float | None = None,
    hyperparams: dict | None = None,
    warmup: int = 10,
    microbatch_axis: Axis = 0,
) -> optax.GradientTransformationExtraArgs:
    """Wrap an optax optimizer so that each update also estimates its PGNS (Eq 3.2).

    ``P`` comes from the wrapped optimizer's own state *before* the update
    (:func:`preconditioner`), so the estimate does not use the gradient it is
    measuring.  ``update`` takes the stacked micro-batch gradients (leading axis
    ``K``), averages them, updates the statistics (see :func:`track_pgns`) and
    applies ``inner`` to the average::

      opt = with_pgns(optax.adam(1e-3), microbatch_size=32)
      state = opt.init(params)
      updates, state = opt.update(grads_k, state, params)
      phi = pgns_from_state(state)

    Faster on XLA:CPU: stack each leaf on the axis :func:`microbatch_axes` picks (the last
    one for narrow weight matrices) and say so::

      axes = microbatch_axes(params)
      opt = with_pgns(optax.adam(1e-3), microbatch_size=32, microbatch_axis=axes)
      grads_k = jax.vmap(jax.grad(loss), (None, 0), out_axes=axes)(params, microbatches)

    Cost (``benchmarks/bench_pollux.py``, XLA:CPU, 8 micro-batches of 32): the statistics
    are one pass over the stacked gradients; most of the overhead over a plain step is
    computing ``K`` per-micro-batch weight gradients (a batched matrix product with a
    32-long contraction) instead of one, which data-parallel replicas do anyway.

    Args:
      inner: any optax optimizer.
      microbatch_size: examples per micro-batch (or pass ``microbatch_size=`` to update).
      preconditioner: ``'auto'`` (derive from ``inner``'s state with the hyper-parameters
        ``inner`` was built with, :func:`preconditioner`; raises ValueError at ``init``
        if it cannot, naming what is missing), ``'identity'``, or a callable
        ``(inner_state, params) -> P``.
      decay, differenced, microbatch_axis: as in :func:`track_pgns`.
      eps, b2, hyperparams: explicit values of the hyper-parameters ``P`` depends on
        (``b2``, ``eps``, ``eps_root``, ``decay``, ``eps_in_sqrt``), for optimizers whose
        values cannot be read from ``inner``; they override what is read.
      warmup: number of initial updates whose statistics are discarded.  An
        adaptive optimizer's ``P`` built from its first few squared gradients is
        extreme (Adam's ``nu`` from one gradient gives ``P ~ 1/|g_i|``), and such
        steps would dominate the averages; 10 is enough for the problems tested.
        Coordinates whose second moment is still 0 after the warm-up (an input that has
        been 0 in every example drawn) get ``P_i = 0`` rather than ``1/eps``
        (:func:`preconditioner`), so a rare input drawn later cannot swamp the averages.

    With ``decay`` the running ``phi`` is a ratio of moving averages of single-step
    estimates whose relative error is about ``(phi / B) sqrt(2 / (K - 1))``; with Adam's
    ``P`` (which whitens every coordinate) ``phi`` is often several times ``B``, so use a
    long horizon (``decay`` close to 1) or :func:`~scarjax.pollux.estimate_pgns_at` at fixed
    parameters when an accurate value matters.
    """
    _check_decay(decay)
    axis = _check_axis(microbatch_axis)
    warmup = _checks.check_static_int("warmup", warmup, lo=0)
    if microbatch_size is not None:
        _checks.check_range("microbatch_size", microbatch_size, lo=0, lo_open=True)
    if not (
        preconditioner in ("auto", "identity")
        if isinstance(preconditioner, str)
        else callable(preconditioner)
    ):
        raise ValueError(f"preconditioner must be 'auto', 'identity' or a callable, got {preconditioner!r}")
    explicit = precond.check_explicit(hyperparams, eps, b2)
    read = precond.optimizer_hyperparams(inner) if preconditioner == "auto" else []
    inner = optax.with_extra_args_support(inner)

    def get_p(inner_state, params):
        if preconditioner == "identity":
            return None
        if preconditioner == "auto":
            return _derive(inner_state, explicit, read)
        return preconditioner(inner_state, params)

    def init_fn(params):
        inner_state = inner.init(params)
        jax.eval_shape(get_p, inner_state, params)  # fail early, outside jit, if P cannot be derived
        return PGNSWrapperState(inner_state, _init_pgns(params, differenced))

    def update_fn(updates, state, params=None, *, microbatch_size=microbatch_size, **extra):
        if microbatch_size is None:
            raise ValueError("microbatch_size is required (at construction or as an update kwarg)")
        p = get_p(state.inner_state, params)
        mean, pstate = _update_pgns(
            updates, state.pgns, microbatch_size, p, decay, differenced, warmup if p is not None else 0, axis
        )
        out, inner_state = inner.update(mean, state.inner_state, params, **extra)
        return out, PGNSWrapperState(inner_state, pstate)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def find_pgns_state(opt_state) -> PGNSState:
    """The (first) :class:`PGNSState` inside an optimizer state (chains, wrappers)."""
    found = []

    def visit(x):
        if isinstance(x, PGNSState):
            found.append(x)
            return
        if isinstance(x, PGNSWrapperState):
            found.append(x.pgns)
            return
        if isinstance(x, (tuple, list)):
            for y in x:
                visit(y)
        elif isinstance(x, dict):
            for y in x.values():
                visit(y)

    visit(opt_state)
    if not found:
        raise ValueError(
            "no PGNS statistics in this optimizer state; build the optimizer with "
            "track_pgns(...) or with_pgns(...)"
        )
    return found[0]


def smoothed_stats(opt_state) -> GradStats:
    """Bias-corrected averages of :class:`GradStats` held in an optimizer state.

    Before any estimate has been folded in (``count == 0``) both are 0, so
    :func:`noise_scale` reports ``inf`` (efficiency 1 at every batch size).
    """
    s = find_pgns_state(opt_state)
    w = jnp.where(s.weight > 0, s.weight, 1.0)
    return GradStats(s.sqr_ema / w, s.var_ema / w)


def pgns_from_state(opt_state) -> jax.Array:
    """Smoothed PGNS ``phi`` (Eq 3.2) from an optimizer state built with track/with_pgns."""
    return noise_scale(smoothed_stats(opt_state))
