"""The PGNS as optax gradient transformations (thesis Eq 3.2, Sec 3.3.1; private, public
names via :mod:`scarjax.pollux`).

:func:`track_pgns` (identity or user pre-conditioner, drops into any ``optax.chain``) and
:func:`with_pgns` (wraps any optax optimizer and takes ``P`` from that optimizer's own state,
:func:`~scarjax.pollux.preconditioner`) keep optax's contract: ``update(updates, state,
params, **extra_args)`` returns updates with the structure of ``updates``, an ordinary
gradient.  The micro-batch information the statistics need arrives as the extra argument
``microbatch_moments=`` (:class:`~scarjax.pollux.MicrobatchMoments`, the per-coordinate
``sum_k g_k`` and ``sum_k g_k^2`` of ``K`` micro-batch gradients, from
:func:`~scarjax.pollux.reduce_microbatches`)::

    grads, moments = px.reduce_microbatches(grads_k)          # grads_k: leaves [K, ...]
    updates, state = opt.update(grads, state, params, microbatch_moments=moments)

So they compose with optax's own wrappers: ``optax.apply_if_finite`` (a rejected step leaves
the statistics untouched), ``optax.MultiSteps`` (the inner optimizer, and so the statistics,
advance once per ``k`` mini-steps, from the moments of the mini-step that emits),
``optax.masked`` (the statistics of the parameters inside the mask: the moments are
restricted to the leaves the mask passes), and transforms chained before them (clipping
changes the gradient the optimizer applies, not the statistics, which come from the
moments).  Without ``microbatch_moments`` (one gradient per step, e.g. inside
:func:`scarjax.from_optax`) the biased differenced estimator over consecutive ``updates`` is
used (Sec 3.3.1), flagged in the state.

The statistics are smoothed by bias-corrected exponential moving averages
(:class:`PGNSState`); ``phi`` is the ratio of the averages (:func:`pgns_from_state`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

from scarjax import validate as va
from scarjax.pollux import _precond
from scarjax.pollux._estimators import (
    GradStats,
    MicrobatchMoments,
    Preconditioner,
    _moment_stats,
    differenced_stats,
    noise_scale,
)

PyTree = Any


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


_precond.LOOK_THROUGH[PGNSWrapperState] = "inner_state"
_precond.SKIP.append(PGNSState)


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


def _is_masked(x) -> bool:
    return isinstance(x, optax.MaskedNode)


def _aligned(moments, updates) -> MicrobatchMoments:
    """``moments`` restricted to the leaves ``updates`` holds.

    ``optax.masked`` hands its inner transform the updates with masked-out leaves replaced
    by ``optax.MaskedNode`` but passes extra arguments unchanged; the statistics are then
    those of the parameters inside the mask.  Every other leaf must match ``updates``.
    """
    if not isinstance(moments, MicrobatchMoments):
        raise TypeError(
            "microbatch_moments must be a MicrobatchMoments (from reduce_microbatches(grads_k)), "
            f"got {type(moments).__name__}"
        )
    if isinstance(moments.count, bool) or not isinstance(moments.count, int) or moments.count < 1:
        raise ValueError(f"microbatch_moments.count must be a Python int >= 1, got {moments.count!r}")

    def keep(u, m):
        if _is_masked(u):
            return u
        if jnp.shape(m) != jnp.shape(u):
            raise ValueError(
                f"microbatch_moments must have the leaf shapes of the gradients (updates): "
                f"got {jnp.shape(m)}, expected {jnp.shape(u)}"
            )
        return m

    try:
        total = jax.tree.map(keep, updates, moments.sum, is_leaf=_is_masked)
        squares = jax.tree.map(keep, updates, moments.sum_of_squares, is_leaf=_is_masked)
    except (ValueError, TypeError) as e:
        if "microbatch_moments" in str(e):
            raise
        raise ValueError(
            f"microbatch_moments must have the tree structure of the gradients (updates): "
            f"{jax.tree.structure(moments.sum)} vs {jax.tree.structure(updates)}"
        ) from e
    return MicrobatchMoments(total, squares, moments.count)


def _check_updates(updates, params) -> None:
    """``updates`` is one gradient (the leaf shapes of ``params``), not stacked micro-batch
    gradients: optax's contract, which the statistics' moments keep out of ``updates``."""
    if params is None:
        return
    try:
        va.check_tree_like("updates", updates, params, "params")
    except ValueError as e:
        raise ValueError(
            f"{e}. updates must be one gradient (e.g. the mean over the micro-batches); pass "
            "stacked micro-batch gradients through reduce_microbatches(grads_k) and give the "
            "moments as microbatch_moments="
        ) from None


def _update_pgns(
    updates,
    moments: MicrobatchMoments | None,
    state: PGNSState,
    microbatch_size,
    precond,
    decay: float,
    differenced: bool,
    warmup: int = 0,
) -> PGNSState:
    """Fold one step's statistics into the smoothed averages.

    With ``K >= 2`` micro-batches (``moments``) the unbiased two-batch statistics; otherwise
    the differenced ones from this step's gradient (the mean in ``moments`` if ``K = 1``,
    else ``updates``) and the previous step's.
    """
    if microbatch_size is None:
        raise ValueError("microbatch_size is required (at construction or as an update kwarg)")
    if moments is not None:
        moments = _aligned(moments, updates)
    b = jnp.asarray(microbatch_size, jnp.float32)
    unbiased = moments is not None and moments.count >= 2
    if unbiased:
        va.check_real("microbatch_size", microbatch_size, lo=0, lo_open=True)
        stats = _moment_stats(moments, b, precond)
        valid = jnp.asarray(True)
        biased = jnp.asarray(False)
        grad = None
    elif differenced:
        grad = updates if moments is None else moments.sum  # K = 1: the sum is the gradient
        stats = differenced_stats(state.prev_grad, grad, b, precond)
        valid = state.has_prev
        biased = jnp.asarray(True)
    else:
        raise ValueError(
            "a single gradient per step (no microbatch_moments, or K=1) needs differenced=True; "
            "or pass microbatch_moments= from reduce_microbatches(grads_k) with K >= 2"
        )
    stats = GradStats(jnp.asarray(stats.sqr, jnp.float32), jnp.asarray(stats.var, jnp.float32))
    finite = jnp.isfinite(stats.sqr) & jnp.isfinite(stats.var)
    # Unbiased estimates replace averages accumulated from biased ones (as AdaptDL does).
    reset = state.biased & ~biased
    sqr_ema = jnp.where(reset, 0.0, state.sqr_ema)
    var_ema = jnp.where(reset, 0.0, state.var_ema)
    weight = jnp.where(reset, 0.0, state.weight)
    use = valid & finite & (state.steps >= warmup)
    return PGNSState(
        count=state.count + use.astype(jnp.int32),
        sqr_ema=jnp.where(use, decay * sqr_ema + (1 - decay) * stats.sqr, state.sqr_ema),
        var_ema=jnp.where(use, decay * var_ema + (1 - decay) * stats.var, state.var_ema),
        weight=jnp.where(use, decay * weight + (1 - decay), state.weight),
        last=GradStats(jnp.where(finite, stats.sqr, jnp.nan), jnp.where(finite, stats.var, jnp.nan)),
        biased=jnp.where(use, biased, state.biased),
        nonfinite=state.nonfinite + (valid & ~finite).astype(jnp.int32),
        # The previous gradient is only read by the differenced estimator.  A step with
        # K >= 2 leaves it untouched (no pass over params) and marks it stale, so a later
        # single-gradient step starts the differenced pairs afresh.
        prev_grad=(
            jax.tree.map(lambda m, p: jnp.where(finite, m, p).astype(p.dtype), grad, state.prev_grad)
            if differenced and not unbiased
            else state.prev_grad
        ),
        has_prev=(state.has_prev | finite) if differenced and not unbiased else jnp.zeros([], bool),
        steps=state.steps + 1,
    )


def _check_decay(decay):
    va.check_real("decay", decay, lo=0.0, hi=1.0, hi_open=True)


def track_pgns(
    microbatch_size: float | None = None,
    *,
    preconditioner: Preconditioner | str = None,
    decay: float = 0.95,
    differenced: bool = True,
) -> optax.GradientTransformationExtraArgs:
    """Optax transform that estimates the PGNS (Eq 3.2) and passes the gradient on unchanged.

    ``update(updates, state, params, *, microbatch_moments=None, microbatch_size=None)``:
    ``updates`` is the gradient (the mean over the micro-batches), ``microbatch_moments``
    the :class:`~scarjax.pollux.MicrobatchMoments` of the ``K`` micro-batch gradients::

      opt = optax.chain(track_pgns(microbatch_size=32), optax.sgd(0.1))
      grads, moments = reduce_microbatches(microbatch_grads(loss, params, xb, yb))
      updates, state = opt.update(grads, state, params, microbatch_moments=moments)
      phi = pgns_from_state(state)

    With ``K >= 2`` the unbiased :func:`~scarjax.pollux.microbatch_stats` is used; with one
    gradient per step (no ``microbatch_moments``, or ``K = 1``) the biased
    :func:`~scarjax.pollux.differenced_stats` over consecutive steps (``state.biased`` is
    then True).  The statistics are smoothed by bias-corrected exponential moving averages
    with factor ``decay`` (``phi`` is the ratio of the averages, not the average of ratios).

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
      differenced: keep the previous gradient so a single gradient per step can use the
        differenced estimator (costs one copy of params in the state).
    """
    _check_decay(decay)
    if microbatch_size is not None:
        va.check_real("microbatch_size", microbatch_size, lo=0, lo_open=True)
    if isinstance(preconditioner, str) and preconditioner != "identity":
        raise ValueError(
            f"preconditioner must be None, 'identity', a pytree or a callable, "
            f"got {preconditioner!r}; use with_pgns(optimizer) for 'auto'"
        )

    def init_fn(params):
        return _init_pgns(params, differenced)

    def update_fn(
        updates, state, params=None, *, microbatch_moments=None, microbatch_size=microbatch_size, **extra
    ):
        del extra
        _check_updates(updates, params)
        if preconditioner is None or isinstance(preconditioner, str):
            p = None
        elif callable(preconditioner):
            p = preconditioner(params)
        else:
            p = preconditioner
        return updates, _update_pgns(updates, microbatch_moments, state, microbatch_size, p, decay, differenced)

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
) -> optax.GradientTransformationExtraArgs:
    """Wrap an optax optimizer so that each update also estimates its PGNS (Eq 3.2).

    ``P`` comes from the wrapped optimizer's own state *before* the update
    (:func:`~scarjax.pollux.preconditioner`), so the estimate does not use the gradient it
    is measuring.  ``update(updates, state, params, *, microbatch_moments=None,
    microbatch_size=None, **extra_args)`` folds the statistics of ``microbatch_moments``
    into the state (see :func:`track_pgns`) and applies ``inner`` to ``updates`` (with the
    other ``extra_args``); its updates are ``inner``'s::

      opt = with_pgns(optax.adam(1e-3), microbatch_size=32)
      state = opt.init(params)
      grads, moments = reduce_microbatches(microbatch_grads(loss, params, xb, yb))
      updates, state = opt.update(grads, state, params, microbatch_moments=moments)
      phi = pgns_from_state(state)

    Faster on XLA:CPU: stack each leaf on the axis :func:`~scarjax.pollux.microbatch_axes`
    picks (the last one for narrow weight matrices) and say so when reducing::

      axes = microbatch_axes(params)
      grads_k = microbatch_grads(loss, params, xb, yb, microbatch_axis=axes)
      grads, moments = reduce_microbatches(grads_k, microbatch_axis=axes)

    Cost (``benchmarks/bench_pollux.py``, XLA:CPU, 8 micro-batches of 32): the statistics
    are one pass over the stacked gradients (in :func:`~scarjax.pollux.reduce_microbatches`,
    which also yields the mean) and a few dot products; most of the overhead over a plain
    step is computing ``K`` per-micro-batch weight gradients (a batched matrix product with
    a 32-long contraction) instead of one, which data-parallel replicas do anyway.

    Args:
      inner: any optax optimizer.
      microbatch_size: examples per micro-batch (or pass ``microbatch_size=`` to update).
      preconditioner: ``'auto'`` (derive from ``inner``'s state with the hyper-parameters
        ``inner`` was built with, :func:`~scarjax.pollux.preconditioner`; raises ValueError
        at ``init`` if it cannot, naming what is missing), ``'identity'``, or a callable
        ``(inner_state, params) -> P``.
      decay, differenced: as in :func:`track_pgns`.
      eps, b2, hyperparams: explicit values of the hyper-parameters ``P`` depends on
        (``b2``, ``eps``, ``eps_root``, ``decay``, ``eps_in_sqrt``), for optimizers whose
        values cannot be read from ``inner``; they override what is read.
      warmup: number of initial updates whose statistics are discarded.  An
        adaptive optimizer's ``P`` built from its first few squared gradients is
        extreme (Adam's ``nu`` from one gradient gives ``P ~ 1/|g_i|``), and such
        steps would dominate the averages; 10 is enough for the problems tested.
        Coordinates whose second moment is still 0 after the warm-up (an input that has
        been 0 in every example drawn) get ``P_i = 0`` rather than ``1/eps``
        (:func:`~scarjax.pollux.preconditioner`), so a rare input drawn later cannot swamp
        the averages.

    With ``decay`` the running ``phi`` is a ratio of moving averages of single-step
    estimates whose relative error is about ``(phi / B) sqrt(2 / (K - 1))``; with Adam's
    ``P`` (which whitens every coordinate) ``phi`` is often several times ``B``, so use a
    long horizon (``decay`` close to 1) or :func:`~scarjax.pollux.estimate_pgns_at` at fixed
    parameters when an accurate value matters.
    """
    _check_decay(decay)
    warmup = va.check_int("warmup", warmup, lo=0)
    if microbatch_size is not None:
        va.check_real("microbatch_size", microbatch_size, lo=0, lo_open=True)
    if not (
        preconditioner in ("auto", "identity")
        if isinstance(preconditioner, str)
        else callable(preconditioner)
    ):
        raise ValueError(f"preconditioner must be 'auto', 'identity' or a callable, got {preconditioner!r}")
    explicit = _precond.check_explicit(hyperparams, eps, b2)
    read = _precond.optimizer_hyperparams(inner) if preconditioner == "auto" else []
    inner = optax.with_extra_args_support(inner)

    def get_p(inner_state, params):
        if preconditioner == "identity":
            return None
        if preconditioner == "auto":
            return _precond.derive(inner_state, explicit, read)
        return preconditioner(inner_state, params)

    def init_fn(params):
        inner_state = inner.init(params)
        jax.eval_shape(get_p, inner_state, params)  # fail early, outside jit, if P cannot be derived
        return PGNSWrapperState(inner_state, _init_pgns(params, differenced))

    def update_fn(
        updates, state, params=None, *, microbatch_moments=None, microbatch_size=microbatch_size, **extra
    ):
        _check_updates(updates, params)
        p = get_p(state.inner_state, params)
        pstate = _update_pgns(
            updates,
            microbatch_moments,
            state.pgns,
            microbatch_size,
            p,
            decay,
            differenced,
            warmup if p is not None else 0,
        )
        out, inner_state = inner.update(updates, state.inner_state, params, **extra)
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
