"""Statistical efficiency (Eq 3.3) and goodput (Eq 3.1).

* Eq 3.3  ``EFFICIENCY_t(M) = (phi_t + M0) / (phi_t + M)``: progress per example at
  total batch ``M`` relative to the initial batch ``M0`` (it takes ``1 + phi/M``
  iterations at batch ``M`` to make the progress of one noise-free step).
  For ``M >= M0``: ``0 < E <= 1``, ``E(M0) = 1`` and ``E`` is non-increasing in ``M``.
* Eq 3.1  ``GOODPUT_t(a, m, s) = THROUGHPUT(a, m, s) * EFFICIENCY_t(M(a, m, s))``.
* "Statistical epochs" (Fig 3.3): ``(1 / |X|) sum_t M_t EFFICIENCY_t(M_t)``, training
  progress in units of epochs at ``M0``.

Everything broadcasts and jits; concrete inputs are validated at the boundary.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.pollux._throughput import ThroughputParams, _t_iter, check_config, check_params, total_batch_size
from scarjax.pollux._estimators import GradStats, noise_scale


def _stat_efficiency(m, phi, m0):
    # (phi + M0) / (phi + M), kept <= 1 for M >= M0 under any rounding (a GPU may compute
    # a / b as a * (1 / b), which put the ratio at M = M0 at 1 + 1 ulp on an H100). Its limit
    # is 1 for phi = inf (noise-dominated gradient).
    m = jnp.asarray(m, jnp.result_type(float))
    inf = jnp.isinf(phi)
    phi_ = jnp.where(inf, 0.0, phi)
    ratio = (phi_ + m0) / (phi_ + m)
    return jnp.where(inf, 1.0, jnp.where(m >= m0, jnp.minimum(ratio, 1.0), ratio))


def _check_eff_args(batch_size, phi, base_batch_size, allow_below_base: bool):
    va.check_real("base_batch_size", base_batch_size, lo=0.0, lo_open=True)
    va.check_real("phi", phi, lo=0.0, allow_inf=True)
    va.check_real("batch_size", batch_size, lo=0.0, lo_open=True)
    if not allow_below_base:
        b = None if va.is_traced(batch_size) else va.check_numeric("batch_size", batch_size)
        m0 = None if va.is_traced(base_batch_size) else va.check_numeric("base_batch_size", base_batch_size)
        if (
            b is not None
            and m0 is not None
            and b.size
            and m0.size
            and np.any(
                np.broadcast_to(b, np.broadcast_shapes(b.shape, m0.shape))
                < np.broadcast_to(m0, np.broadcast_shapes(b.shape, m0.shape)) * (1 - 1e-6)
            )
        ):
            raise ValueError(
                f"batch_size must be >= base_batch_size (Pollux only considers M >= M0, Sec 3.3), "
                f"got batch_size={batch_size}, base_batch_size={base_batch_size}; pass "
                "allow_below_base=True to extrapolate (efficiency > 1)"
            )


def efficiency(batch_size, phi, base_batch_size, *, allow_below_base: bool = False) -> jax.Array:
    """Eq 3.3: statistical efficiency of total batch ``M`` relative to ``M0``.

    Args:
      batch_size: total batch size ``M`` (array-like, broadcasts).
      phi: PGNS ``phi_t`` (Eq 3.2) in ``[0, inf]``; ``inf`` gives efficiency 1.
      base_batch_size: the user's initial batch size ``M0 > 0``.
      allow_below_base: permit ``M < M0`` (efficiency then exceeds 1).

    Returns:
      ``(phi + M0) / (phi + M)``, in ``(0, 1]`` for ``M >= M0``.
    """
    _check_eff_args(batch_size, phi, base_batch_size, allow_below_base)
    return _stat_efficiency(batch_size, jnp.asarray(phi), jnp.asarray(base_batch_size))


def efficiency_from_stats(
    batch_size, stats: GradStats, base_batch_size, *, allow_below_base: bool = False
) -> jax.Array:
    """Eq 3.3 with ``phi = stats.var / stats.sqr`` (:func:`~scarjax.pollux.noise_scale`)."""
    return efficiency(batch_size, noise_scale(stats), base_batch_size, allow_below_base=allow_below_base)


def goodput(
    params: ThroughputParams, phi, base_batch_size, nodes, replicas, local_bsz, accum_steps=0
) -> jax.Array:
    """Eq 3.1: ``THROUGHPUT(a, m, s) * EFFICIENCY_t(M(a, m, s))`` (useful examples per second).

    Args:
      params: :class:`~scarjax.pollux.ThroughputParams` (Eq 3.9).
      phi: PGNS ``phi_t``; base_batch_size: ``M0``.
      nodes, replicas, local_bsz, accum_steps: the configuration ``(a, m, s)``
        as ``(N, K, m, s)``; all broadcast.
    """
    params = check_params(params)
    check_config(nodes, replicas, local_bsz, accum_steps)
    m_tot = total_batch_size(replicas, local_bsz, accum_steps)
    _check_eff_args(m_tot, phi, base_batch_size, allow_below_base=False)
    return _goodput(
        params,
        jnp.asarray(phi),
        jnp.asarray(base_batch_size),
        nodes,
        replicas,
        jnp.asarray(local_bsz),
        accum_steps,
    )


def _goodput(params, phi, m0, nodes, replicas, m, s):
    m_tot = total_batch_size(replicas, m, s)
    thr = m_tot / _t_iter(params, nodes, replicas, m, s)
    return thr * _stat_efficiency(m_tot, phi, m0)


def statistical_epochs(batch_sizes, efficiencies, dataset_size) -> jax.Array:
    """Cumulative training progress in "statistical epochs" (Fig 3.3 caption).

    ``(1 / |X|) * cumsum_t M_t * EFFICIENCY_t(M_t)`` over the steps taken, i.e. the
    number of epochs at batch ``M0`` that would make the same progress.
    """
    va.check_real("dataset_size", dataset_size, lo=0.0, lo_open=True)
    va.check_real("batch_sizes", batch_sizes, lo=0.0)
    va.check_real("efficiencies", efficiencies, lo=0.0)
    return jnp.cumsum(jnp.asarray(batch_sizes) * jnp.asarray(efficiencies), axis=-1) / dataset_size
