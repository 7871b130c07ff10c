"""Goodput-optimal batch size (Eq 3.10) and plug-in learning-rate scaling (Sec 3.3).

* :func:`optimize_batch_size` solves Eq 3.10,
  ``(m*, s*) = argmax_{m, s} GOODPUT(a, m, s)``, *exactly* over the integer grid
  ``m in [min_local_bsz, max_local_bsz]`` (the memory cap), ``s in [0, S]``,
  subject to ``M0 <= K m (s+1) <= max_batch_size`` (the upper batch-size limit
  of Sec 3.3.1), vectorised over allocations.  (AdaptDL samples 50 total batch
  sizes on a geometric grid instead.)
* ``SCALE_LR(M0, M) -> lambda`` rules (Sec 3.2.2, 3.3 "Plug-in Learning Rate
  Scaling"): linear, square-root, AdaScale gain, LEGW; :func:`lr_scale` is the
  pure function and :func:`scale_by_lr_rule` the optax transform that multiplies
  the updates by ``lambda`` (equivalently the learning rate).
  :func:`set_learning_rate` sets it in an ``optax.inject_hyperparams`` state instead.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scarjax import validate as va
from scarjax.pollux._efficiency import _goodput, _stat_efficiency
from scarjax.pollux._throughput import GAMMA_RANGE, ThroughputParams, _t_iter, check_config, check_params


class BatchConfig(NamedTuple):
    """Solution of Eq 3.10 for each allocation (arrays with the allocations' shape).

    ``local_bsz = 0`` and ``goodput = 0`` mark an allocation with no feasible configuration.
    """

    local_bsz: jax.Array
    accum_steps: jax.Array
    total_batch_size: jax.Array
    goodput: jax.Array
    throughput: jax.Array
    efficiency: jax.Array


def _finish(p, phi, m0, n, k, m_best, s_best, gp_best, feasible):
    tot_best = k * m_best * (s_best + 1)
    t = _t_iter(p, n, k, jnp.where(feasible, m_best, 1.0), s_best)  # pylint: disable=protected-access
    thr = jnp.where(feasible, tot_best / t, 0.0)
    eff = jnp.where(feasible, _stat_efficiency(tot_best, phi, m0), 0.0)
    return (
        m_best.astype(jnp.int32),
        s_best.astype(jnp.int32),
        tot_best.astype(jnp.int32),
        jnp.where(feasible, gp_best, 0.0),
        thr,
        eff,
    )


@partial(jax.jit, static_argnames=("m_lo", "m_hi", "m_step", "s_max", "two_grads"))
def _optimize_exhaustive(packed, nk, *, m_lo, m_hi, m_step, s_max, two_grads):
    """Reference: every ``(m, s)`` of the grid (``O(|m grid| (S+1))`` per allocation)."""
    p, phi, m0, max_bsz = packed[:7], packed[7], packed[8], packed[9]
    first = -(-m_lo // m_step) * m_step  # smallest multiple of m_step >= m_lo
    ms = jnp.arange(first, m_hi + 1, m_step, dtype=jnp.float32)
    ss = jnp.arange(0, s_max + 1, dtype=jnp.float32)
    mg, sg = jnp.meshgrid(ms, ss, indexing="ij")
    mg, sg = mg.reshape(-1), sg.reshape(-1)

    def one(n, k):
        tot = k * mg * (sg + 1)
        ok = (tot >= m0) & (tot <= max_bsz)
        if two_grads:  # K = 1 and s = 0 would leave only the biased differenced estimator
            ok &= ~((k == 1) & (sg == 0) & (tot > m0))
        gp = _goodput(p, phi, m0, n, k, mg, sg)
        gp = jnp.where(ok, gp, -1.0)
        i = jnp.argmax(gp)
        feasible = gp[i] >= 0
        m_best = jnp.where(feasible, mg[i], 0.0)
        s_best = jnp.where(feasible, sg[i], 0.0)
        return _finish(p, phi, m0, n, k, m_best, s_best, gp[i], feasible)

    return jax.vmap(one)(nk[0], nk[1])


def _grid_interval(m_of, c, m0, upper, first, m_step, n_grid):
    """The feasible interval ``[j_lo, j_hi]`` (``int32``; empty when ``j_lo > j_hi``) of grid
    indices ``j`` (``m_j = m_of(j) = first + j m_step``, ``0 <= j < n_grid``) with
    ``M0 <= c m_j <= upper``: a float estimate, then an exact fix-up by one grid step each way.
    The one rule of :func:`_optimize_search` and :func:`_optimize_search_many`."""
    j_lo = jnp.clip(jnp.ceil((jnp.ceil(m0 / c) - first) / m_step), 0, n_grid)
    j_lo = j_lo - ((j_lo >= 1) & (c * m_of(j_lo - 1) >= m0))
    j_lo = j_lo + (c * m_of(j_lo) < m0)
    j_hi = jnp.clip(jnp.floor((jnp.floor(upper / c) - first) / m_step), -1, n_grid - 1)
    j_hi = j_hi + ((j_hi + 1 <= n_grid - 1) & (c * m_of(j_hi + 1) <= upper))
    j_hi = j_hi - ((j_hi >= 0) & (c * m_of(j_hi) > upper))
    return j_lo.astype(jnp.int32), j_hi.astype(jnp.int32)


@partial(jax.jit, static_argnames=("m_lo", "m_hi", "m_step", "s_max", "two_grads"))
def _optimize_search(packed, nk, *, m_lo, m_hi, m_step, s_max, two_grads):
    """Exact search: per ``(allocation, s)`` a binary search on the sign of ``G(m+1) - G(m)``.

    ``-log GOODPUT`` is convex in ``u = log m`` for fixed ``(N, K, s)`` (theory/pollux_tuning.md),
    so the forward differences over the ``m`` grid change sign at most once (``-, 0, +``
    for ``-log G``); the smallest grid index ``j`` with ``G(j+1) <= G(j)`` (or the last
    feasible one) is the smallest maximiser on the feasible interval ``[j_lo, j_hi]``.
    ``ceil(log2 J)`` steps, ``O((S+1) log J)`` goodput evaluations per allocation.
    """
    p, phi, m0, max_bsz = packed[:7], packed[7], packed[8], packed[9]
    first = -(-m_lo // m_step) * m_step
    n_grid = (m_hi - first) // m_step + 1  # J grid points m_j = first + j * m_step
    n = nk[0][:, None]
    k = nk[1][:, None]
    s = jnp.arange(0, s_max + 1, dtype=jnp.float32)[None, :]
    c = k * (s + 1)  # M = c * m
    upper = max_bsz
    if two_grads:  # K = 1, s = 0: only M <= M0 (i.e. M = M0) keeps an unbiased PGNS estimate
        upper = jnp.where((k == 1) & (s == 0), jnp.minimum(max_bsz, m0), max_bsz)

    def m_of(j):
        return first + m_step * j.astype(jnp.float32)

    j_lo, j_hi = _grid_interval(m_of, c, m0, upper, first, m_step, n_grid)
    feasible = j_lo <= j_hi

    def gp(j):
        return _goodput(p, phi, m0, n, k, m_of(j), s)

    lo, hi = j_lo, jnp.maximum(j_hi, j_lo)
    for _ in range(max(int(n_grid - 1).bit_length(), 0)):  # static: ceil(log2 J) halvings
        mid = (lo + hi) // 2
        down = gp(mid + 1) <= gp(mid)  # -log G non-decreasing from mid on: optimum <= mid
        active = lo < hi
        hi = jnp.where(active & down, mid, hi)
        lo = jnp.where(active & ~down, mid + 1, lo)
    g = jnp.where(feasible, gp(lo), -1.0)
    i = jnp.argmax(g, axis=1)  # smallest s among equal goodputs
    g_best = jnp.take_along_axis(g, i[:, None], axis=1)[:, 0]
    ok = g_best >= 0
    m_best = jnp.where(ok, m_of(jnp.take_along_axis(lo, i[:, None], axis=1)[:, 0]), 0.0)
    s_best = jnp.where(ok, i.astype(jnp.float32), 0.0)
    return _finish(p, phi, m0, nk[0], nk[1], m_best, s_best, g_best, ok)


_PY_NUM = (int, float, np.integer, np.floating)


def _fast_scalar(x, lo, hi=None, lo_open=False, allow_inf=False) -> bool:
    """True if ``x`` is a Python/NumPy scalar in range; False means "use the generic check"
    (which also produces the precise error message)."""
    if not isinstance(x, _PY_NUM) or isinstance(x, bool):
        return False
    v = float(x)
    if math.isnan(v) or (not allow_inf and math.isinf(v)):
        return False
    return not ((v <= lo if lo_open else v < lo) or (hi is not None and v > hi))


def _alloc_array(x):
    """Concrete integer-like allocation input as a NumPy array, else ``None``."""
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        return np.asarray(x)
    if isinstance(x, (np.ndarray, list, tuple)):
        return np.asarray(x)
    if isinstance(x, jax.Array) and not va.is_traced(x):
        return np.asarray(x)
    return None


def optimize_batch_size(
    params: ThroughputParams,
    phi,
    base_batch_size,
    nodes,
    replicas,
    *,
    max_batch_size: int,
    max_local_bsz: int,
    min_local_bsz: int = 1,
    max_accum_steps: int | None = None,
    local_bsz_step: int = 1,
    require_two_gradients: bool = False,
    method: str = "search",
) -> BatchConfig:
    """Eq 3.10: goodput-optimal per-device batch ``m*`` and accumulation steps ``s*``.

    Exact over the ``m`` grid and ``s in {0..S}``, keeping configurations with
    ``M0 <= K m (s+1) <= max_batch_size``; jitted and vectorised over allocations.

    Args:
      params: fitted :class:`~scarjax.pollux.ThroughputParams`.
      phi: current PGNS ``phi_t``; base_batch_size: ``M0``.
      nodes, replicas: the allocation(s) ``(N, K)``, broadcast together.
      max_batch_size: upper limit on the total batch ``M`` (Sec 3.3.1).
      max_local_bsz: memory cap on the per-device batch ``m``.
      min_local_bsz, local_bsz_step: the ``m`` grid is the multiples of ``local_bsz_step``
        in ``[min_local_bsz, max_local_bsz]`` (a step > 1 limits recompilation of
        shape-specialised training steps).
      max_accum_steps: ``S``; default ``ceil(max_batch_size / max_local_bsz)``, enough
        to reach ``max_batch_size`` on one device at the memory cap.
      require_two_gradients: forbid ``K = 1, s = 0`` above ``M0`` so that the PGNS can
        always be estimated without bias (AdaptDL forces ``s >= 1`` likewise).
      method: ``'search'`` (default): for each ``s`` a binary search over the ``m`` grid,
        exact because goodput is unimodal in ``m`` (``-log G`` convex in ``log m``, proof in
        ``theory/pollux_tuning.md``), ``O((S+1) log J)`` evaluations per allocation;
        ``'exhaustive'``: every grid point, ``O((S+1) J)`` (the reference).

    Returns:
      :class:`BatchConfig`, with ``local_bsz = 0`` where nothing is feasible.
    """
    if method not in ("search", "exhaustive"):
        raise ValueError(f"method must be 'search' or 'exhaustive', got {method!r}")
    # Fast path for concrete Python/NumPy inputs; anything else gets the generic checks.
    if not (
        isinstance(params, ThroughputParams)
        and all(_fast_scalar(v, 0.0) for v in params[:-1])
        and _fast_scalar(params.gamma, GAMMA_RANGE[0], GAMMA_RANGE[1])
    ):
        params = check_params(params)
    if not _fast_scalar(phi, 0.0, allow_inf=True):
        va.check_real("phi", phi, lo=0.0, allow_inf=True)
    if not _fast_scalar(base_batch_size, 0.0, lo_open=True):
        va.check_real("base_batch_size", base_batch_size, lo=0.0, lo_open=True)
    n_np, k_np = _alloc_array(nodes), _alloc_array(replicas)
    if (
        n_np is None
        or k_np is None
        or n_np.dtype.kind not in "iu"
        or k_np.dtype.kind not in "iu"
        or (n_np.size and (n_np.min() < 1 or k_np.min() < 1))
        or (n_np.size and k_np.size and np.any(n_np > k_np))
    ):
        check_config(nodes, replicas)
    max_local_bsz = va.check_int("max_local_bsz", max_local_bsz, lo=1)
    min_local_bsz = va.check_int("min_local_bsz", min_local_bsz, lo=1, hi=max_local_bsz)
    local_bsz_step = va.check_int("local_bsz_step", local_bsz_step, lo=1)
    if -(-min_local_bsz // local_bsz_step) * local_bsz_step > max_local_bsz:
        raise ValueError(
            f"no multiple of local_bsz_step={local_bsz_step} lies in [min_local_bsz, "
            f"max_local_bsz] = [{min_local_bsz}, {max_local_bsz}]"
        )
    max_batch_size = va.check_int("max_batch_size", max_batch_size, lo=1)
    if isinstance(base_batch_size, _PY_NUM):
        if base_batch_size > max_batch_size:
            raise ValueError(
                f"max_batch_size must be >= base_batch_size, got max_batch_size="
                f"{max_batch_size}, base_batch_size={base_batch_size}"
            )
    else:
        m0 = None if va.is_traced(base_batch_size) else va.check_numeric("base_batch_size", base_batch_size)
        if m0 is not None and np.any(m0 > max_batch_size):
            raise ValueError(
                f"max_batch_size must be >= base_batch_size, got max_batch_size="
                f"{max_batch_size}, base_batch_size={base_batch_size}"
            )
    if max_accum_steps is None:
        max_accum_steps = max(math.ceil(max_batch_size / max_local_bsz), 0)
    max_accum_steps = va.check_int("max_accum_steps", max_accum_steps, lo=0)

    if n_np is not None and k_np is not None:  # one host array -> one transfer
        shape = np.broadcast_shapes(n_np.shape, k_np.shape)
        nk = np.empty((2,) + shape, np.float32)
        nk[0], nk[1] = n_np, k_np
        nk = nk.reshape(2, -1)
    else:
        shape = jnp.broadcast_shapes(jnp.shape(nodes), jnp.shape(replicas))
        nk = jnp.stack(
            [jnp.broadcast_to(jnp.asarray(v, jnp.float32), shape).reshape(-1) for v in (nodes, replicas)]
        )
    scalars = (*params, phi, base_batch_size, max_batch_size)
    if all(isinstance(v, _PY_NUM) for v in scalars):
        packed = np.asarray(scalars, np.float32)
    else:
        packed = jnp.stack([jnp.asarray(v, jnp.float32).reshape(()) for v in scalars])
    fn = _optimize_search if method == "search" else _optimize_exhaustive
    out = fn(
        packed,
        nk,
        m_lo=min_local_bsz,
        m_hi=max_local_bsz,
        m_step=local_bsz_step,
        s_max=max_accum_steps,
        two_grads=bool(require_two_gradients),
    )
    if shape == (nk.shape[1],):
        return BatchConfig(*out)
    return BatchConfig(*[o.reshape(shape) for o in out])


@partial(jax.jit, static_argnames=("s_dim", "halvings", "two_grads"))
def _optimize_search_many(packed, *, s_dim, halvings, two_grads):
    """:func:`_optimize_search` for ``B`` problems with their own parameters and limits at once.

    ``packed``: ``float32[15, B]``, rows ``params (7), phi, M0, max_batch_size, first m, J (the
    number of m grid points), S, N, K``. Every problem uses ``s_dim >= S + 1`` accumulation
    columns (those above its ``S`` infeasible) and ``halvings >= ceil(log2 J)`` halvings (the
    extra ones leave ``lo == hi`` unchanged), so one compilation serves every problem; each
    ``(problem, s)`` cell computes what :func:`_optimize_search` computes for it, operation for
    operation, with ``m_step = 1`` (equal to float rounding: :func:`optimize_batch_sizes`).
    """
    p = packed[:7, :, None]
    phi, m0, max_bsz = packed[7][:, None], packed[8][:, None], packed[9][:, None]
    first, n_grid, s_max = packed[10][:, None], packed[11][:, None], packed[12][:, None]
    n, k = packed[13][:, None], packed[14][:, None]
    m_step = 1
    s = jnp.arange(0, s_dim, dtype=jnp.float32)[None, :]
    c = k * (s + 1)
    upper = max_bsz
    if two_grads:
        upper = jnp.where((k == 1) & (s == 0), jnp.minimum(max_bsz, m0), max_bsz)

    def m_of(j):
        return first + m_step * j.astype(jnp.float32)

    j_lo, j_hi = _grid_interval(m_of, c, m0, upper, first, m_step, n_grid)
    feasible = (j_lo <= j_hi) & (s <= s_max)

    def gp(j):
        return _goodput(p, phi, m0, n, k, m_of(j), s)

    def halve(_, lo_hi):
        lo, hi = lo_hi
        mid = (lo + hi) // 2
        down = gp(mid + 1) <= gp(mid)
        active = lo < hi
        return jnp.where(active & ~down, mid + 1, lo), jnp.where(active & down, mid, hi)

    def searching(state):
        t, lo, hi = state
        return (t < halvings) & jnp.any(lo < hi)

    def step(state):
        t, lo, hi = state
        return (t + 1, *halve(t, (lo, hi)))

    # a loop (one compiled body) where _optimize_search unrolls, stopped once every search has
    # converged (the remaining halvings would leave every cell unchanged): the same steps; the
    # infeasible cells (their result is masked) do not search
    hi0 = jnp.where(feasible, jnp.maximum(j_hi, j_lo), j_lo)
    _, lo, _ = jax.lax.while_loop(searching, step, (jnp.int32(0), j_lo, hi0))
    g = jnp.where(feasible, gp(lo), -1.0)
    i = jnp.argmax(g, axis=1)
    g_best = jnp.take_along_axis(g, i[:, None], axis=1)[:, 0]
    ok = g_best >= 0
    m_best = jnp.where(ok, m_of(jnp.take_along_axis(lo, i[:, None], axis=1))[:, 0], 0.0)
    s_best = jnp.where(ok, i.astype(jnp.float32), 0.0)
    return _finish(p[:, :, 0], phi[:, 0], m0[:, 0], n[:, 0], k[:, 0], m_best, s_best, g_best, ok)


def _fast_arrays(params, phi, m0, nodes, replicas, max_bsz, m_hi, m_lo, s_max) -> bool:
    """True if :func:`optimize_batch_sizes`' arguments are NumPy arrays in range (its usual
    caller's); False means "use the generic checks" (which also produce the precise error)."""
    ints = [nodes, replicas, max_bsz, m_hi, m_lo] + ([] if s_max is None else [s_max])
    if not all(isinstance(x, np.ndarray) for x in [params, phi, m0, *ints]):
        return False
    if params.dtype != np.float64 or params.ndim != 2 or params.shape[1] != 7 or not params.size:
        return False
    if phi.dtype.kind != "f" or m0.dtype.kind != "f" or any(x.dtype.kind not in "iu" for x in ints):
        return False
    with np.errstate(invalid="ignore"):
        return bool(np.isfinite(params).all() and params[:, :6].min() >= 0
                    and params[:, 6].min() >= GAMMA_RANGE[0] and params[:, 6].max() <= GAMMA_RANGE[1]
                    and phi.size and phi.min() >= 0 and m0.size and np.isfinite(m0).all() and m0.min() > 0
                    and min(x.min() if x.size else 0 for x in ints[:5]) >= 1
                    and (s_max is None or not s_max.size or s_max.min() >= 0)
                    and np.all(np.asarray(nodes) <= np.asarray(replicas)))


def optimize_batch_sizes(
    params,
    phi,
    base_batch_size,
    nodes,
    replicas,
    *,
    max_batch_size,
    max_local_bsz,
    min_local_bsz=1,
    max_accum_steps=None,
    require_two_gradients: bool = False,
    accum_bound: int | None = None,
    grid_bound: int | None = None,
    block: int = 64,
) -> BatchConfig:
    """Eq 3.10 for ``B`` independent problems, each with its own model, PGNS and limits, in one
    compiled program (a cluster scheduler's jobs of different applications, Sec 3.5).

    Problem ``b`` gets what
    ``optimize_batch_size(params[b], phi[b], base_batch_size[b], nodes[b], replicas[b],
    max_batch_size=max_batch_size[b], max_local_bsz=max_local_bsz[b], min_local_bsz=min_local_bsz[b],
    max_accum_steps=max_accum_steps[b], require_two_gradients=require_two_gradients)`` gives
    (``method='search'``, ``local_bsz_step=1``): the same float32 operations and binary searches,
    on a grid of accumulation steps padded to ``accum_bound + 1`` columns (those above a
    problem's own ``max_accum_steps`` are infeasible), halving until every search has converged
    (at most ``ceil(log2 grid_bound)`` times; a converged search is left unchanged). The problems
    are run in blocks of ``block`` (the last one padded), so calls with the same
    ``accum_bound``, ``grid_bound`` and ``block`` share one compilation whatever their number of
    problems.

    Equal to float rounding, usually bit for bit: XLA:CPU may round a transcendental (the
    ``pow`` of Eq 3.7) differently by one ulp depending on the array's shape, so a goodput can
    differ in its last bit, and where the goodput is flat to that rounding (tied
    configurations) the search may pick another of the tied configurations.

    Args:
      params: ``float[B, 7]`` Eq 3.9 parameters per problem (or a
        :class:`~scarjax.pollux.ThroughputParams` of ``[B]`` arrays).
      phi, base_batch_size, nodes, replicas, max_batch_size, max_local_bsz, min_local_bsz, max_accum_steps: per
        problem (``[B]``, or scalars broadcast), as in
        :func:`optimize_batch_size`; ``max_accum_steps`` defaults to
        ``ceil(max_batch_size / max_local_bsz)`` per problem.
      require_two_gradients: as in :func:`optimize_batch_size`, for every problem.
      accum_bound: static bound on ``max_accum_steps`` (default: their maximum); give it
        (and ``grid_bound``) to compile once for problems of several families.
      grid_bound: static bound on the number of per-device batch sizes
        ``max_local_bsz - min_local_bsz + 1`` (default: their maximum).
      block: problems per compiled call.

    Returns:
      :class:`BatchConfig` of ``[B]`` NumPy arrays, ``local_bsz = 0`` where nothing is feasible.
    """
    if isinstance(params, ThroughputParams):
        params = np.stack([np.asarray(v, np.float64).reshape(-1) for v in params], axis=-1)
    fast = _fast_arrays(params, phi, base_batch_size, nodes, replicas, max_batch_size, max_local_bsz,
                        min_local_bsz, max_accum_steps)
    params = np.asarray(params if fast else va.check_numeric("params", params), np.float64)
    if params.ndim != 2 or params.shape[1] != 7:
        raise ValueError(f"params must have shape [B, 7] (Eq 3.9 per problem), got {params.shape}")
    if not fast:
        check_params(ThroughputParams(*params.T))
    b = params.shape[0]
    block = va.check_int("block", block, lo=1)

    def per(name, x, dtype):
        arr = np.asarray(x if fast else va.check_numeric(name, x))
        if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != b):
            raise ValueError(f"{name} must be a scalar or have shape [{b}] (one per problem), got {arr.shape}")
        return np.broadcast_to(arr, (b,)).astype(dtype)

    if not fast:
        va.check_real("phi", phi, lo=0.0, allow_inf=True)
        va.check_real("base_batch_size", base_batch_size, lo=0.0, lo_open=True)
        check_config(nodes, replicas)
        for name, x in (("max_batch_size", max_batch_size), ("max_local_bsz", max_local_bsz),
                        ("min_local_bsz", min_local_bsz)):
            va.check_integer_value(name, x, lo=1)
        if max_accum_steps is not None:
            va.check_integer_value("max_accum_steps", max_accum_steps, lo=0)
    phi, m0 = per("phi", phi, np.float64), per("base_batch_size", base_batch_size, np.float64)
    n, k = per("nodes", nodes, np.int64), per("replicas", replicas, np.int64)
    max_bsz = per("max_batch_size", max_batch_size, np.int64)
    m_hi = per("max_local_bsz", max_local_bsz, np.int64)
    m_lo = per("min_local_bsz", min_local_bsz, np.int64)
    if np.any(m_lo > m_hi):
        j = int(np.flatnonzero(m_lo > m_hi)[0])
        raise ValueError(f"min_local_bsz must be <= max_local_bsz, got {m_lo[j]} > {m_hi[j]} for problem {j}")
    if np.any(m0 > max_bsz):
        j = int(np.flatnonzero(m0 > max_bsz)[0])
        raise ValueError(f"max_batch_size must be >= base_batch_size, got max_batch_size={max_bsz[j]}, "
                         f"base_batch_size={m0[j]} for problem {j}")
    if max_accum_steps is None:
        s_max = np.maximum(-(-max_bsz // m_hi), 0)
    else:
        s_max = per("max_accum_steps", max_accum_steps, np.int64)
    n_grid = m_hi - m_lo + 1
    if b == 0:
        empty = np.zeros(0, np.int32)
        return BatchConfig(empty, empty, empty, *(np.zeros(0, np.float32),) * 3)
    accum_bound = int(s_max.max()) if accum_bound is None else va.check_int("accum_bound", accum_bound, lo=0)
    grid_bound = int(n_grid.max()) if grid_bound is None else va.check_int("grid_bound", grid_bound, lo=1)
    if s_max.max() > accum_bound:
        raise ValueError(f"accum_bound must be >= every max_accum_steps ({int(s_max.max())}), got {accum_bound}")
    if n_grid.max() > grid_bound:
        raise ValueError(f"grid_bound must be >= every max_local_bsz - min_local_bsz + 1 ({int(n_grid.max())}), "
                         f"got {grid_bound}")
    rows = np.concatenate([params.T, np.stack([phi, m0, max_bsz, m_lo, n_grid, s_max, n, k])]).astype(np.float32)
    pad = -b % block
    rows = np.concatenate([rows, np.repeat(rows[:, :1], pad, axis=1)], axis=1)  # padding: copies of problem 0
    outs = [
        _optimize_search_many(
            rows[:, i : i + block],
            s_dim=accum_bound + 1,
            halvings=max(int(grid_bound - 1).bit_length(), 0),
            two_grads=bool(require_two_gradients),
        )
        for i in range(0, rows.shape[1], block)
    ]
    return BatchConfig(*[np.concatenate([np.asarray(o[f]) for o in outs])[:b] for f in range(6)])


# ---------------------------------------------------------------------------
# Learning-rate scaling rules
# ---------------------------------------------------------------------------

LR_RULES = ("linear", "sqrt", "adascale", "legw", "none")


def lr_scale(
    rule: str, batch_size, base_batch_size, *, phi=None, progress=None, warmup_examples=None
) -> jax.Array:
    """``SCALE_LR(M0, M) -> lambda`` (Sec 3.3), the factor applied to the base learning rate.

    * ``'linear'`` (Goyal et al. [76]): ``M / M0``.
    * ``'sqrt'`` ([120, 222], usual with Adam): ``sqrt(M / M0)``.
    * ``'adascale'`` (Johnson et al. [105]): the gain ``r = (sigma^2 + mu^2) /
      (sigma^2 / S + mu^2)`` with ``S = M / M0``; with the PGNS this is
      ``r = S * EFFICIENCY(M) = (M / M0) (phi + M0) / (phi + M)`` (needs ``phi``).
    * ``'legw'`` (You et al. [222]): ``sqrt(M / M0)`` times a linear warm-up over the
      first ``warmup_examples`` examples of progress (a fixed number of *epochs*, so
      the warm-up in steps grows linearly with ``M``); needs ``progress`` (examples
      processed, e.g. statistical epochs times ``|X|``) and ``warmup_examples``.
    * ``'none'``: 1.
    """
    if rule not in LR_RULES:
        raise ValueError(f"rule must be one of {LR_RULES}, got {rule!r}")
    va.check_real("batch_size", batch_size, lo=0.0, lo_open=True)
    va.check_real("base_batch_size", base_batch_size, lo=0.0, lo_open=True)
    s = jnp.asarray(batch_size, jnp.float32) / jnp.asarray(base_batch_size, jnp.float32)
    if rule == "none":
        return jnp.ones_like(s)
    if rule == "linear":
        return s
    if rule == "sqrt":
        return jnp.sqrt(s)
    if rule == "adascale":
        if phi is None:
            raise ValueError("rule 'adascale' needs phi (the PGNS, Eq 3.2)")
        va.check_real("phi", phi, lo=0.0, allow_inf=True)
        return s * _stat_efficiency(batch_size, jnp.asarray(phi), jnp.asarray(base_batch_size))
    if progress is None or warmup_examples is None:
        raise ValueError("rule 'legw' needs progress and warmup_examples")
    va.check_real("progress", progress, lo=0.0)
    va.check_real("warmup_examples", warmup_examples, lo=0.0, lo_open=True)
    warm = jnp.clip(jnp.asarray(progress, jnp.float32) / warmup_examples, 0.0, 1.0)
    return jnp.sqrt(s) * warm


class LRScaleState(NamedTuple):
    """State of :func:`scale_by_lr_rule`: the last factor applied (for logging)."""

    scale: jax.Array


def scale_by_lr_rule(
    rule: str, base_batch_size: float, *, warmup_examples: float | None = None
) -> optax.GradientTransformationExtraArgs:
    """Optax transform multiplying updates by ``lr_scale(rule, M, M0, ...)`` (Sec 3.3).

    Put it last in a chain (after the optimizer's learning rate).  ``update`` takes
    the current total batch size as the extra argument ``batch_size=`` (default
    ``M0``, i.e. factor 1) and, for ``'adascale'``, ``phi=``; for ``'legw'``,
    ``progress=`` (examples of progress)::

      opt = optax.chain(with_pgns(optax.sgd(lr0), microbatch_size=m),
                        scale_by_lr_rule("adascale", base_batch_size=M0))
      updates, state = opt.update(grads_k, state, params, batch_size=M, phi=phi)
    """
    if rule not in LR_RULES:
        raise ValueError(f"rule must be one of {LR_RULES}, got {rule!r}")
    va.check_real("base_batch_size", base_batch_size, lo=0.0, lo_open=True)
    if rule == "legw" and warmup_examples is None:
        raise ValueError("rule 'legw' needs warmup_examples")

    def init_fn(params):
        del params
        return LRScaleState(jnp.ones([], jnp.float32))

    def update_fn(updates, state, params=None, *, batch_size=None, phi=None, progress=None, **extra):
        del params, extra, state
        m = base_batch_size if batch_size is None else batch_size
        if rule == "adascale" and phi is None:
            raise ValueError("scale_by_lr_rule('adascale') needs the extra argument phi=")
        if rule == "legw" and progress is None:
            raise ValueError("scale_by_lr_rule('legw') needs the extra argument progress=")
        lam = lr_scale(rule, m, base_batch_size, phi=phi, progress=progress, warmup_examples=warmup_examples)
        lam = jnp.asarray(lam, jnp.float32)
        return jax.tree.map(lambda u: (u * lam).astype(u.dtype), updates), LRScaleState(lam)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)


def set_learning_rate(opt_state: Any, learning_rate) -> Any:
    """Return ``opt_state`` with ``hyperparams['learning_rate']`` replaced (pure).

    For optimizers built with ``optax.inject_hyperparams``; the agent's alternative to
    :func:`scale_by_lr_rule`: ``set_learning_rate(state, lr0 * lr_scale(...))``.
    """
    va.check_real("learning_rate", learning_rate, lo=0.0)
    inj = tuple(
        t
        for t in (
            getattr(optax, "InjectHyperparamsState", None),
            getattr(optax, "InjectStatefulHyperparamsState", None),
        )
        if t
    )
    done = []

    def visit(x):
        if inj and isinstance(x, inj) and "learning_rate" in x.hyperparams:
            hp = dict(x.hyperparams)
            hp["learning_rate"] = jnp.asarray(learning_rate, jnp.asarray(hp["learning_rate"]).dtype)
            done.append(1)
            return x._replace(hyperparams=hp)
        if isinstance(x, tuple) and hasattr(x, "_fields"):
            return type(x)(*[visit(y) for y in x])
        if isinstance(x, tuple):
            return tuple(visit(y) for y in x)
        if isinstance(x, list):
            return [visit(y) for y in x]
        return x

    out = visit(opt_state)
    if not done:
        raise ValueError(
            "no inject_hyperparams state with a 'learning_rate' found in opt_state; "
            "build the optimizer with optax.inject_hyperparams(...)"
        )
    return out
