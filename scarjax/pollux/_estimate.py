"""The PGNS at fixed parameters: many estimator draws and the exact value (Eq 3.2).

How a user validates the estimator (and measures ``phi`` at a checkpoint) without
touching optimizer state: draw ``K`` micro-batches of ``b`` examples uniformly with
replacement, apply the unbiased two-batch estimator (App. A.1, ``microbatch_stats``) with
a fixed ``P``, repeat ``draws`` times, and compare the ratio of the averaged statistics
with the exact per-example value (``exact_stats``).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, Mapping, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.pollux import _precond
from scarjax.pollux._estimators import GradStats, _microbatch_mean_stats

PyTree = Any


class PGNSEstimate(NamedTuple):
    """Result of :func:`estimate_pgns_at`.

    Attributes:
      phi: ``mean(var) / mean(sqr)`` over the draws (``noise_scale`` of the averaged
        statistics: the ratio of averages, as the moving averages of ``with_pgns`` use).
      stderr: its standard error (delta method over the independent draws); ``nan``
        when ``phi`` is ``inf``.
      exact_phi: the exact ``phi`` from per-example gradients of the whole data set with
        the same ``P``, or ``nan`` when not computed.
      stats: the averaged :class:`GradStats` (unbiased for ``|Pg|^2``, ``tr(P Sigma P^T)``).
      exact: the exact :class:`GradStats`, or ``None``.
      draws: the number of draws averaged.
    """

    phi: float
    stderr: float
    exact_phi: float
    stats: GradStats
    exact: GradStats | None
    draws: int


def pgns_data(data) -> tuple:
    """``data`` (an array or a tuple/list of arrays, examples on the leading axis) as a tuple
    of JAX arrays, checked: at least one array, a shared leading axis, at least 2 examples."""
    arrays = tuple(data) if isinstance(data, (tuple, list)) else (data,)
    if not arrays:
        raise ValueError("data must hold at least one array (examples on the leading axis)")
    arrays = tuple(jnp.asarray(a) for a in arrays)
    sizes = {a.shape[0] if a.ndim else None for a in arrays}
    if None in sizes or len(sizes) != 1:
        raise ValueError(
            f"data arrays must share their leading (example) axis, got shapes {[a.shape for a in arrays]}"
        )
    n = sizes.pop()
    if n < 2:
        raise ValueError(f"data must hold at least 2 examples, got {n}")
    return arrays


@functools.partial(jax.jit, static_argnames=("loss_fn", "k", "b", "draws"))
def pgns_draws(loss_fn, params, p, data, key, *, k: int, b: int, draws: int):
    """``(sqr, var)`` of ``draws`` independent estimates, each from ``k`` micro-batches."""
    n = data[0].shape[0]
    grad_k = jax.vmap(jax.grad(loss_fn), (None,) + (0,) * len(data))

    def one(_, key):
        idx = jax.random.randint(key, (k, b), 0, n)
        g = grad_k(params, *(a[idx] for a in data))
        _, st = _microbatch_mean_stats(g, k, b, p)
        return None, jnp.stack([st.sqr, st.var])

    return jax.lax.scan(one, None, jax.random.split(key, draws))[1]


@functools.partial(jax.jit, static_argnames=("loss_fn", "chunk"))
def pgns_exact(loss_fn, params, p, data, *, chunk: int):
    """Exact ``GradStats`` in chunks of per-example gradients (two passes: mean, then the
    centred second moment, so that float32 does not cancel ``E|Pg_i|^2 - |Pg|^2``)."""
    n = data[0].shape[0]
    pad = (-n) % chunk
    idx = jnp.concatenate([jnp.arange(n), jnp.zeros(pad, jnp.int32)]).reshape(-1, chunk)
    weight = jnp.concatenate([jnp.ones(n), jnp.zeros(pad)]).reshape(-1, chunk)

    def example_loss(prm, *ex):
        return loss_fn(prm, *(a[None] for a in ex))

    pex = jax.vmap(jax.grad(example_loss), (None,) + (0,) * len(data))
    pleaves = [None] * len(jax.tree.leaves(params)) if p is None else jax.tree.leaves(p)

    def mean_pass(acc, iw):
        i, w = iw
        g = pex(params, *(a[i] for a in data))
        return jax.tree.map(lambda s, x: s + jnp.tensordot(w, x, 1), acc, g), None

    zero = jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), params)
    total, _ = jax.lax.scan(mean_pass, zero, (idx, weight))
    mean = jax.tree.map(lambda s: s / n, total)

    def var_pass(acc, iw):
        i, w = iw
        g = pex(params, *(a[i] for a in data))
        sq = 0.0
        for x, m, pl in zip(jax.tree.leaves(g), jax.tree.leaves(mean), pleaves):
            d = x - m
            d = d if pl is None else d * pl
            sq = sq + jnp.tensordot(w, jnp.sum(jnp.square(d).reshape(d.shape[0], -1), axis=1), 1)
        return acc + sq, None

    var, _ = jax.lax.scan(var_pass, jnp.zeros((), jnp.float32), (idx, weight))
    sqr = sum(
        jnp.sum(jnp.square(m if pl is None else m * pl)) for m, pl in zip(jax.tree.leaves(mean), pleaves)
    )
    return GradStats(sqr, var / n)


def estimate_pgns_at(
    loss_fn: Callable[..., jax.Array],
    params: PyTree,
    data,
    *,
    microbatch_size: int,
    key: jax.Array,
    microbatches: int = 8,
    draws: int = 100,
    preconditioner: PyTree | None = None,
    opt_state=None,
    optimizer=None,
    hyperparams: Mapping[str, Any] | None = None,
    exact: bool | None = None,
    chunk: int = 256,
) -> PGNSEstimate:
    """Estimate the PGNS ``phi`` (Eq 3.2) at fixed ``params`` from many independent draws.

    Each draw takes ``microbatches`` (``K``) micro-batches of ``microbatch_size`` (``b``)
    examples, uniformly *with replacement* from ``data`` (the sampling under which the
    two-batch estimator of App. A.1 is exactly unbiased), computes their gradients with
    ``jax.vmap(jax.grad(loss_fn))`` and the unbiased statistics
    (:func:`~scarjax.pollux.microbatch_stats`) with a fixed ``P``.  ``phi`` is the ratio of
    the statistics averaged over the draws; its standard error comes from the spread of
    the draws (delta method).  Nothing is trained and no optimizer state is changed::

      est = px.estimate_pgns_at(loss, params, (x, y), microbatch_size=32,
                                key=jax.random.PRNGKey(0), opt_state=state, optimizer=opt)
      print(est.phi, "+-", est.stderr, "exact", est.exact_phi)

    Args:
      loss_fn: ``loss_fn(params, *batch) -> scalar``, the *mean* loss over a batch
        (the function training differentiates); one example is a batch of 1.
      params: the parameters at which ``phi`` is measured.
      data: an array or a tuple of arrays sharing a leading example axis ``N``.
      microbatch_size: ``b``, examples per micro-batch (a Python int).
      key: a ``jax.random`` key for the draws (or an int seed).
      microbatches: ``K >= 2`` micro-batches per draw.
      draws: number of independent draws (``>= 2``).
      preconditioner: a diagonal ``P`` with the structure of params, or ``None`` for
        ``P = I`` (the plain GNS).  Exclusive with ``opt_state``.
      opt_state, optimizer, hyperparams: derive ``P`` from an optimizer state instead
        (:func:`~scarjax.pollux.preconditioner`; ``optimizer`` is the optax optimizer that
        made the state, whose hyper-parameters ``P`` depends on).
      exact: compute the exact ``phi`` from per-example gradients of all ``N`` examples
        (two passes of ``N`` per-example gradients, ``chunk`` at a time).  ``None`` (default):
        only when it costs no more examples than the draws, ``N <= draws * K * b``.
      chunk: per-example gradients computed at a time for ``exact``.

    Returns:
      :class:`PGNSEstimate` ``(phi, stderr, exact_phi, stats, exact, draws)``.
    """
    va.check_callable("loss_fn", loss_fn)
    b = va.check_int("microbatch_size", microbatch_size, lo=1)
    k = va.check_int("microbatches", microbatches, lo=2)
    draws = va.check_int("draws", draws, lo=2)
    chunk = va.check_int("chunk", chunk, lo=1)
    if exact is not None and not isinstance(exact, bool):
        raise TypeError(f"exact must be None, True or False, got {exact!r}")
    arrays = pgns_data(data)
    n = arrays[0].shape[0]
    if opt_state is not None:
        if preconditioner is not None:
            raise ValueError("pass either preconditioner= or opt_state=, not both")
        explicit = _precond.check_explicit(hyperparams, None, None)
        read = _precond.optimizer_hyperparams(optimizer)
        p = jax.jit(lambda s: _precond.derive(s, explicit, read))(opt_state)
    else:
        if optimizer is not None or hyperparams is not None:
            raise ValueError("optimizer= and hyperparams= need opt_state= (the state to read P from)")
        p = preconditioner
    if p is not None:
        pl, gl = jax.tree.structure(p), jax.tree.structure(params)
        if pl != gl:
            raise ValueError(f"preconditioner must have the structure of params: {pl} vs {gl}")
    typed = va.check_key("key", key)
    if not isinstance(key, jax.Array):  # an int seed: its typed key
        key = typed

    est = np.asarray(pgns_draws(loss_fn, params, p, arrays, key, k=k, b=b, draws=draws), np.float64)
    sqr, var = est[:, 0], est[:, 1]
    stats = GradStats(float(sqr.mean()), float(var.mean()))
    phi = stats.var / stats.sqr if stats.sqr > 0 else math.inf  # noise_scale, in NumPy
    phi = max(phi, 0.0)
    if math.isfinite(phi) and stats.sqr > 0:
        resid = var - phi * sqr  # linearised ratio estimator
        stderr = float(np.std(resid, ddof=1) / math.sqrt(draws) / stats.sqr)
    else:
        stderr = float("nan")

    if exact is None:
        exact = n <= draws * k * b
    ex = None
    exact_phi = float("nan")
    if exact:
        e = pgns_exact(loss_fn, params, p, arrays, chunk=min(chunk, n))
        ex = GradStats(float(e.sqr), float(e.var))
        exact_phi = max(ex.var, 0.0) / ex.sqr if ex.sqr > 0 else math.inf
    return PGNSEstimate(phi, stderr, exact_phi, stats, ex, draws)
