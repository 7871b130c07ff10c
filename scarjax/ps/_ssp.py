"""Stale-synchronous workers on the parameter server (thesis Sec 4.2.1 / Ch. 4's SSP
consistency, Ho et al. 2013; Example 5.2.2 for the perturbation it causes).

Every worker ``m`` keeps a *parameter cache* and two clocks: ``clock[m]``, the number of
clocks (iterations of its own work) it has completed, and ``cache_clock[m]``, its clock
when it last pulled. At each server tick:

* worker ``m`` is *active* with probability ``speeds[m]`` (heterogeneous, transiently
  slow workers);
* the SSP rule: it may complete clock ``clock[m] + 1`` only if ``clock[m] ≤ min_m'
  clock[m'] + s`` — at most ``s`` clocks ahead of the slowest (it waits otherwise);
* the read rule: before computing clock ``c + 1`` its cache must hold every update of
  clocks up to ``c − s``; if ``cache_clock[m] < clock[m] − s`` it pulls the fresh
  parameters (so its cache is at most ``s`` clocks old), otherwise it computes from its
  cache;
* the workers that complete a clock push their messages; the server merges them weighted
  by their points (Sync-on-the-fly Eq 5; waiting workers contribute 0) and applies.

With ``s = 0`` and every worker active (``speeds = 1``) every worker pulls every clock
and the run equals synchronous data-parallel training (tested). The trace records every
worker's clock and the age of the cache it computed from (``-1`` when it waited), so the invariants ``max clock − min
clock ≤ s + 1`` and ``age ≤ s`` are checked on the run itself.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va

__all__ = ["SSP", "SSPState", "init_state", "views"]


@dataclasses.dataclass(frozen=True, eq=False)
class SSP:
    """Stale-synchronous parallel workers.

    Attributes:
      staleness: the bound ``s >= 0`` (static).
      speeds: ``None`` (every worker active every tick) or ``M`` probabilities in
        ``(0, 1]`` that a worker is active at a tick.
    """

    staleness: int = 0
    speeds: Any = None

    def __post_init__(self):
        va.check_int("staleness", self.staleness, lo=0)
        if self.speeds is not None:
            va.check_real("speeds", self.speeds, lo=0.0, lo_open=True, hi=1.0)
            if np.ndim(self.speeds) != 1:
                raise ValueError(f"speeds must be a 1-D array of probabilities in (0, 1], got {self.speeds!r}")

    def check(self, workers: int) -> None:
        if self.speeds is not None and len(np.asarray(self.speeds)) != workers:
            raise ValueError(f"speeds must have one entry per worker ({workers}), got {len(np.asarray(self.speeds))}")


class SSPState(NamedTuple):
    """``caches``: params pytree with a leading worker axis ``[M, …]`` (sharded with the
    workers); ``clocks``/``cache_clock``: ``int32[M]`` (replicated)."""

    caches: Any
    clocks: jax.Array
    cache_clock: jax.Array


def init_state(ps, state) -> SSPState:
    """Every worker's cache starts at ``w⁽⁰⁾`` (logical state ``state``)."""
    M = ps.workers
    caches = jax.tree.map(lambda p: jnp.broadcast_to(p, (M,) + p.shape), state.params)
    z = jnp.zeros((M,), jnp.int32)
    return SSPState(caches, z, z)


def views(spec: SSP, st: SSPState, fresh, key, d, m_local: int):
    """Inside the server's ``shard_map``: the views of this device's ``m_local`` workers,
    their progress (1 = completes a clock this tick, 0 = waits), the new SSP state and a
    record ``{'clocks', 'staleness'}``. ``fresh``: ``[m_local, …]`` pulled params."""
    M = st.clocks.shape[0]
    s = spec.staleness
    if spec.speeds is None:
        active = jnp.ones((M,), bool)
    else:
        u = jax.random.uniform(jax.random.fold_in(key, 0x55), (M,))
        active = u < jnp.asarray(spec.speeds, jnp.float32)
    runnable = st.clocks <= jnp.min(st.clocks) + s
    complete = active & runnable
    refresh = complete & (st.cache_clock < st.clocks - s)
    cache_clock = jnp.where(refresh, st.clocks, st.cache_clock)
    age = jnp.where(complete, st.clocks - cache_clock, -1)  # -1: waited this tick
    mine = lambda v: jax.lax.dynamic_slice_in_dim(v, d * m_local, m_local)  # noqa: E731
    r_loc = mine(refresh)
    caches = jax.tree.map(
        lambda f, c: jnp.where(r_loc.reshape((m_local,) + (1,) * (f.ndim - 1)), f.astype(c.dtype), c),
        fresh, st.caches)
    progress = mine(complete).astype(jnp.float32)
    new = SSPState(caches, st.clocks + complete.astype(jnp.int32), cache_clock)
    return caches, progress, new, {"clocks": new.clocks, "staleness": age}
