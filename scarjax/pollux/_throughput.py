"""System-throughput model of data-parallel training and its fit (thesis Eq 3.4-3.9, Sec 3.4.1).

A configuration is ``(a, m, s)``: an allocation vector ``a`` (``a_n`` devices on
node ``n``), a per-device batch size ``m`` and ``s`` gradient-accumulation
steps.  The model only depends on ``a`` through ``K = sum(a)`` (replicas) and
``N`` (nodes holding at least one replica), so every function takes
``(nodes, replicas)``; :func:`placement` converts allocation vectors.

* Eq 3.5  ``T_grad(m) = alpha_grad + beta_grad * m``
* Eq 3.6  ``T_sync = 0`` if ``K = 1``; ``alpha_local + beta_local (K - 2)`` if ``N = 1``;
  ``alpha_node + beta_node (K - 2)`` otherwise
* Eq 3.7/3.8  ``T_iter = s T_grad + (T_grad^gamma + T_sync^gamma)^(1/gamma)``
* Eq 3.4  ``THROUGHPUT = M / T_iter`` with ``M = K m (s + 1)``

All functions broadcast over their array arguments (vectorised over
configurations) and are jittable.  :func:`fit_throughput` fits the 7-tuple of
Eq 3.9 to observed ``(N, K, m, s, T_iter)`` records by minimising the RMSLE
with L-BFGS-B (gradients from ``jax.grad``), with the priors of Sec 3.4.1.
"""

from __future__ import annotations

import time
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import scipy.optimize

from scarjax import validate as va

GAMMA_RANGE = (1.0, 10.0)


class ThroughputParams(NamedTuple):
    """``theta_sys`` of Eq 3.9 (times in seconds)."""

    alpha_grad: float | jax.Array
    beta_grad: float | jax.Array
    alpha_sync_local: float | jax.Array
    beta_sync_local: float | jax.Array
    alpha_sync_node: float | jax.Array
    beta_sync_node: float | jax.Array
    gamma: float | jax.Array


def check_params(params: ThroughputParams, name: str = "params") -> ThroughputParams:
    """Validate Eq 3.9 parameters: every alpha, beta >= 0 and gamma in [1, 10]."""
    if not isinstance(params, ThroughputParams):
        if isinstance(params, (tuple, list)) and len(params) == 7:
            params = ThroughputParams(*params)
        else:
            raise TypeError(f"{name} must be a ThroughputParams (7 values, Eq 3.9), got {params!r}")
    for field, v in zip(params._fields[:-1], params[:-1]):
        va.check_real(f"{name}.{field}", v, lo=0.0)
    va.check_real(f"{name}.gamma", params.gamma, lo=GAMMA_RANGE[0], hi=GAMMA_RANGE[1])
    return params


def check_config(nodes, replicas, local_bsz=None, accum_steps=None) -> None:
    """Validate a configuration: ``1 <= nodes <= replicas`` integers, ``m > 0``, ``s >= 0`` integer."""
    va.check_integer_value("nodes", nodes, lo=1)
    va.check_integer_value("replicas", replicas, lo=1)
    n = None if va.is_traced(nodes) else va.check_numeric("nodes", nodes)
    k = None if va.is_traced(replicas) else va.check_numeric("replicas", replicas)
    if (
        n is not None
        and k is not None
        and np.any(
            np.broadcast_to(n, np.broadcast_shapes(n.shape, k.shape))
            > np.broadcast_to(k, np.broadcast_shapes(n.shape, k.shape))
        )
    ):
        raise ValueError(
            f"nodes must be <= replicas (every node holds a replica), got nodes={nodes}, replicas={replicas}"
        )
    if local_bsz is not None:
        va.check_real("local_bsz", local_bsz, lo=0.0, lo_open=True)
    if accum_steps is not None:
        va.check_integer_value("accum_steps", accum_steps, lo=0)


def placement(allocation) -> tuple[jax.Array, jax.Array]:
    """``(N, K)`` from allocation vectors ``a`` (last axis = nodes): ``N = #{a_n > 0}``, ``K = sum a``."""
    a = jnp.asarray(allocation)
    va.check_integer_value("allocation", allocation, lo=0)
    return jnp.sum(a > 0, axis=-1), jnp.sum(a, axis=-1)


def total_batch_size(replicas, local_bsz, accum_steps=0) -> jax.Array:
    """``M(a, m, s) = SUM(a) * m * (s + 1)`` (Sec 3.3)."""
    return jnp.asarray(replicas) * jnp.asarray(local_bsz) * (jnp.asarray(accum_steps) + 1)


def _t_grad(p, m):
    return p[0] + p[1] * m


def _t_sync(p, nodes, replicas):
    k = jnp.asarray(replicas)
    retro = jnp.maximum(k - 2, 0)
    local = p[2] + p[3] * retro
    node = p[4] + p[5] * retro
    return jnp.where(k <= 1, 0.0, jnp.where(jnp.asarray(nodes) <= 1, local, node))


def _overlap(a, b, gamma):
    """``(a^gamma + b^gamma)^(1/gamma)`` for ``a, b >= 0``, stable and NaN-free in value and grad."""
    hi = jnp.maximum(a, b)
    lo = jnp.minimum(a, b)
    pos_hi = hi > 0
    r = lo / jnp.where(pos_hi, hi, 1.0)
    pos_r = r > 0
    rg = jnp.where(pos_r, jnp.where(pos_r, r, 1.0) ** gamma, 0.0)
    return hi * (1.0 + rg) ** (1.0 / gamma)


def _t_iter(p, nodes, replicas, m, s):
    tg = _t_grad(p, m)
    return jnp.asarray(s) * tg + _overlap(tg, _t_sync(p, nodes, replicas), p[6])


def t_grad(params: ThroughputParams, local_bsz) -> jax.Array:
    """Eq 3.5: time of one forward-backward pass at per-device batch ``m``."""
    params = check_params(params)
    va.check_real("local_bsz", local_bsz, lo=0.0, lo_open=True)
    return _t_grad(params, jnp.asarray(local_bsz))


def t_sync(params: ThroughputParams, nodes, replicas) -> jax.Array:
    """Eq 3.6: synchronisation time by placement (0 for one replica)."""
    params = check_params(params)
    check_config(nodes, replicas)
    return _t_sync(params, nodes, replicas)


def t_iter(params: ThroughputParams, nodes, replicas, local_bsz, accum_steps=0) -> jax.Array:
    """Eq 3.8 (Eq 3.7 when ``s = 0``): time of one iteration of ``s`` accumulation + 1 sync pass."""
    params = check_params(params)
    check_config(nodes, replicas, local_bsz, accum_steps)
    return _t_iter(params, nodes, replicas, jnp.asarray(local_bsz), accum_steps)


def throughput(params: ThroughputParams, nodes, replicas, local_bsz, accum_steps=0) -> jax.Array:
    """Eq 3.4: examples per second, ``M(a, m, s) / T_iter(a, m, s)``."""
    params = check_params(params)
    check_config(nodes, replicas, local_bsz, accum_steps)
    m = jnp.asarray(local_bsz)
    return total_batch_size(replicas, m, accum_steps) / _t_iter(params, nodes, replicas, m, accum_steps)


# ---------------------------------------------------------------------------
# Fitting (Sec 3.4.1 "Online model fitting", "Prior-driven exploration")
# ---------------------------------------------------------------------------


class FitResult(NamedTuple):
    """Outcome of :func:`fit_throughput`.

    Attributes:
      params: fitted :class:`ThroughputParams` (seconds).
      rmsle: root mean squared log error of ``T_iter`` on the records.
      mean_rel_error: mean ``|pred - obs| / obs`` (the thesis's "average error").
      max_rel_error: largest ``|pred - obs| / obs``.
      pinned: names of parameters fixed by the priors of Sec 3.4.1.
      success, message, nit: from the best L-BFGS-B run.
      seconds: wall time of the fit (compile time included on the first call).
    """

    params: ThroughputParams
    rmsle: float
    mean_rel_error: float
    max_rel_error: float
    pinned: tuple[str, ...]
    success: bool
    message: str
    nit: int
    seconds: float


def rmsle(pred, obs) -> jax.Array:
    """Root mean squared logarithmic error, the objective of Sec 3.4.1."""
    return jnp.sqrt(jnp.mean(jnp.square(jnp.log(pred) - jnp.log(obs))))


def _expand(free, init, mask, tie_m):
    """Full 7-vector: free entries where ``mask``, else the pinned ``init``; optional tie.

    ``tie_m > 0`` ties ``alpha_grad = beta_grad * tie_m`` (only one ``m`` observed).
    """
    p = jnp.where(mask, free, init)
    return p.at[0].set(jnp.where(tie_m > 0, p[1] * tie_m, p[0]))


def _msle(free, init, mask, tie_m, nodes, replicas, m, s, log_t, w):
    p = _expand(free, init, mask, tie_m)
    pred = _t_iter(p, nodes, replicas, m, s)
    return jnp.sum(w * jnp.square(jnp.log(pred) - log_t)) / jnp.sum(w)


_msle_vg = jax.jit(jax.value_and_grad(_msle))


# One program instead of a compilation of each of its ops (the same numbers: no arithmetic to fuse).
_expand_jit = jax.jit(_expand)


def _predict_padded(p, nodes, replicas, m, s) -> np.ndarray:
    """Eq 3.8 of each record, op by op (as a compiled :func:`_t_iter` fuses its ops, which
    moves some predictions in their last bits), on the records padded to a multiple of 64 (a
    one-replica configuration), so every fit of up to 64 records compiles the ops once."""
    size = len(nodes)
    pad = -size % 64
    cols = [np.concatenate([a, np.full(pad, v)]) for a, v in ((nodes, 1.0), (replicas, 1.0), (m, 1.0), (s, 0.0))]
    return np.asarray(_t_iter(p, *cols))[:size]


def priors(nodes, replicas, local_bsz) -> dict[str, float]:
    """Parameters pinned by the priors of Sec 3.4.1 given the configurations seen so far.

    Each job is first assumed to scale perfectly to more devices, until
    configurations that make a parameter observable have been explored:

    * never more than one replica: every sync parameter is 0 (and gamma is 1);
    * never more than one node: ``alpha_node = beta_node = 0``;
    * never two or more replicas on one node: ``alpha_local = beta_local = 0``
      (the same logic for the local pair; AdaptDL does likewise);
    * never more than two replicas: ``beta_local = beta_node = 0``.

    Returns a dict ``name -> pinned value``.  (Identifiability of the compute
    split when a single ``m`` was seen is handled by :func:`fit_throughput`.)
    """
    n = np.asarray(nodes)
    k = np.asarray(replicas)
    pinned: dict[str, float] = {}
    if not np.any(k > 1):
        pinned.update(
            alpha_sync_local=0.0, beta_sync_local=0.0, alpha_sync_node=0.0, beta_sync_node=0.0, gamma=1.0
        )
    if not np.any(n > 1):
        pinned.update(alpha_sync_node=0.0, beta_sync_node=0.0)
    if not np.any((n == 1) & (k > 1)):
        pinned.update(alpha_sync_local=0.0, beta_sync_local=0.0)
    if not np.any(k > 2):
        pinned.update(beta_sync_local=0.0, beta_sync_node=0.0)
    del local_bsz
    return pinned


def fit_throughput(
    nodes,
    replicas,
    local_bsz,
    accum_steps,
    t_iter_obs,
    *,
    use_priors: bool = True,
    gamma_starts: Sequence[float] = (1.0,),
    maxiter: int = 500,
) -> FitResult:
    """Fit ``theta_sys`` (Eq 3.9) to observed step times (Sec 3.4.1).

    Minimises the RMSLE between Eq 3.8 and the records with ``scipy``'s L-BFGS-B
    (gradients by ``jax.grad`` in float64), under the bounds alpha, beta >= 0 and
    gamma in [1, 10].  Times are normalised by their median for conditioning.
    Eq 3.7 is not convex in gamma: pass several ``gamma_starts`` to keep the best
    of several runs (the default single start at gamma = 1 recovers the
    parameters of noise-free synthetic data to <0.1%).  With ``use_priors`` the parameters not yet observable are pinned as in
    :func:`priors`; if only one per-device batch size ``m`` has been observed,
    ``alpha_grad = beta_grad * m`` is tied (half the compute time is taken as the
    fixed cost, as AdaptDL does) since the two cannot be told apart.

    Args:
      nodes, replicas, local_bsz, accum_steps, t_iter_obs: 1-D arrays of equal
        length, one record ``(N, K, m, s, T_iter)`` per observed configuration
        (repeat or average measurements as you like).

    Returns:
      :class:`FitResult`.
    """
    t0 = time.perf_counter()
    arrs = [
        np.asarray(x, dtype=np.float64).reshape(-1)
        for x in (nodes, replicas, local_bsz, accum_steps, t_iter_obs)
    ]
    names = ("nodes", "replicas", "local_bsz", "accum_steps", "t_iter_obs")
    size = arrs[0].size
    for nm, a in zip(names, arrs):
        if a.size != size:
            raise ValueError(f"{nm} has {a.size} records but nodes has {size}; all must match")
    if size < 1:
        raise ValueError("fit_throughput needs at least one record, got 0")
    n, k, m, s, t = arrs
    check_config(n, k, m, s)
    va.check_real("t_iter_obs", t, lo=0.0, lo_open=True)
    if not gamma_starts:
        raise ValueError("gamma_starts must name at least one starting gamma")
    va.check_real("gamma_starts", np.asarray(gamma_starts), lo=1.0, hi=10.0)
    va.check_int("maxiter", maxiter, lo=1)

    scale = float(np.median(t))
    ts = t / scale
    pinned = priors(n, k, m) if use_priors else {}
    fields = ThroughputParams._fields
    mask = np.array([f not in pinned for f in fields])
    tie_m = float(m[0]) if (use_priors and np.unique(m).size == 1) else 0.0
    if tie_m:
        mask[0] = False  # alpha_grad follows beta_grad
    lo_b = 1e-8
    t_min_grad = float(np.min(ts / (s + 1)))
    x_init = np.array([0.5 * t_min_grad, 0.5 * t_min_grad / float(np.median(m)), 0.2, 0.02, 0.3, 0.03, 1.0])
    base = np.array([pinned.get(f, 0.0) for f in fields])
    base[6] = pinned.get("gamma", 1.0)
    bounds = [(lo_b, None)] * 6 + [GAMMA_RANGE]

    best = None
    # Records are padded to a power-of-two bucket (weight 0) so refits reuse the compilation.
    # (One bucket for all counts would compile once, but XLA:CPU's sums associate by their
    # length: the fits would move in their last bits.)
    bucket = max(8, 1 << (size - 1).bit_length())
    pad = bucket - size
    padded = [
        np.concatenate([a, np.full(pad, v)])
        for a, v in ((n, 1.0), (k, 1.0), (m, 1.0), (s, 0.0), (np.log(ts), 0.0), (np.ones(size), 0.0))
    ]
    with jax.enable_x64(True):
        args = tuple(jnp.asarray(a, jnp.float64) for a in (base, mask, tie_m, *padded))

        def fun(x):
            v, g = _msle_vg(jnp.asarray(x, jnp.float64), *args)
            return float(v), np.asarray(g, np.float64)

        starts = list(gamma_starts) if mask[6] else [base[6]]
        for g0 in starts:
            x0 = np.where(mask, x_init, base)
            x0[6] = g0 if mask[6] else base[6]
            x0 = np.clip(x0, [b[0] for b in bounds], [b[1] if b[1] else np.inf for b in bounds])
            x0 = np.where(mask, x0, base)
            b_use = [bd if mk else (v, v) for bd, mk, v in zip(bounds, mask, x0)]
            res = scipy.optimize.minimize(
                fun,
                x0,
                jac=True,
                method="L-BFGS-B",
                bounds=b_use,
                options=dict(maxiter=maxiter, ftol=1e-12, gtol=1e-9),
            )
            if best is None or res.fun < best.fun:
                best = res
        p_full = np.asarray(_expand_jit(jnp.asarray(best.x, jnp.float64), *args[:3]))
        pred = _predict_padded(p_full, n, k, m, s)
    p_full = p_full.copy()
    p_full[:6] *= scale
    pred = pred * scale
    rel = np.abs(pred - t) / t
    params = ThroughputParams(*[float(v) for v in p_full])
    pinned_names = tuple(f for f, mk in zip(fields, mask) if not mk and not (f == "alpha_grad" and tie_m))
    if tie_m:
        pinned_names = pinned_names + ("alpha_grad=beta_grad*m",)
    return FitResult(
        params=params,
        rmsle=float(np.sqrt(np.mean(np.square(np.log(pred / t))))),
        mean_rel_error=float(np.mean(rel)),
        max_rel_error=float(np.max(rel)),
        pinned=pinned_names,
        success=bool(best.success),
        message=str(best.message),
        nit=int(best.nit),
        seconds=time.perf_counter() - t0,
    )
