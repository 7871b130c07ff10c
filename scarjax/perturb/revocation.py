"""Revoked and partial workers at the barrier (Sync-on-the-fly; thesis Sec 5.2).

On transient resources a worker can be revoked in the middle of an iteration. Under a
fixed (BSP) barrier its contribution is lost; Sync-on-the-fly (Zhao et al.) instead lets
the barrier average over whatever partial gradients the live and revoked workers have
flushed, Eq 5::

    θ(w) = (1/|B|) Σ_{xᵢ ∈ B} g(w, xᵢ),   B = the points actually processed.

:func:`revocations` is a ``'progress'``-point hook for ``M`` data-parallel workers (worker
mode of the loop, ``scarjax.run(..., workers=M)``, see :mod:`scarjax.perturb.workers`): at
every step it multiplies each worker's *progress*, the fraction of its points it finished
before the barrier, by a draw (``1`` when not revoked) or by a row of a given table
(``progress=``). A revoked worker contributes the partial gradient over the points it finished (``partial=True``, flushing)
or nothing (``partial=False``); the merge weights each contribution by its point count,
so the merged gradient is the mean over all processed points whichever worker processed
them. The resulting perturbation of the update, ``Δ − Δ_sync``, is measured with
``run(..., measure_read_effect=True)`` (``trace.read_effect``); ``trace.points`` records
the points merged at each barrier.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import rng
from scarjax import validate as va
from scarjax import tree as tu
from scarjax.hooks import Hook
from scarjax.perturb.workers import check_workers

__all__ = ["revocations"]


def revocations(
    workers: int,
    rate: float | None = None,
    *,
    progress: Any = None,
    partial: bool = True,
    downtime: int = 0,
    name: str = "revocations",
) -> Hook:
    """Revoke workers mid-iteration, at a rate or from a table of progress fractions
    (Sync-on-the-fly). Requires ``run(..., workers=workers)``.

    Args:
      workers: ``M`` data-parallel workers (static).
      rate: probability that a given worker is revoked during a given iteration
        (independently per worker and step); the revoked worker had finished a fraction
        ``U(0, 1)`` of its points. In ``[0, 1]``; may be traced (vary it across trials with
        ``run_trials(..., hook_args=...)``).
      progress: instead of ``rate``: an array ``[T, M]`` of progress fractions in
        ``[0, 1]`` (``1`` = finished, ``0`` = revoked before its first point); row ``k``
        applies to iteration ``k``; iterations ``k >= T`` run unrevoked.
      partial: ``True`` – a revoked worker flushes its partial gradient (Sync-on-the-fly
        Eq 5); ``False`` – its whole contribution is lost. May be a traced bool in rate
        mode (flushing and dropping compared in one program).
      downtime: iterations a revoked worker stays away after the one it was revoked in
        (contributing nothing) before a replacement takes over its shard (static int >= 0;
        rate mode only).

    Raises ``ValueError`` naming the argument for bad values (exactly one of ``rate`` and
    ``progress`` must be given).
    """
    check_workers(workers)
    if (rate is None) == (progress is None):
        raise ValueError(f"give exactly one of rate and progress, got rate={rate!r} and progress="
                         f"{'None' if progress is None else 'an array'}")
    if isinstance(downtime, bool) or not isinstance(downtime, (int, np.integer)) or downtime < 0:
        raise ValueError(f"downtime must be an int >= 0, got {downtime!r}")
    if not tu.is_traced(partial) and not isinstance(partial, (bool, np.bool_)):
        raise TypeError(f"partial must be a bool, got {type(partial).__name__} {partial!r}")
    if progress is not None:
        va.check_real("progress", progress, lo=0.0, hi=1.0)
        arr = np.asarray(progress, np.float32)
        if arr.ndim != 2 or arr.shape[1] != workers:
            raise ValueError(f"progress must have shape [T, {workers}], got {arr.shape}")
        if not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1:
            raise ValueError("progress entries must be fractions in [0, 1]")
        if downtime:
            raise ValueError("downtime applies to rate mode only; encode it in the progress table")
        if tu.is_traced(partial):
            raise ValueError("partial must be a concrete bool when a progress table is given")
        table = jnp.asarray(arr)
        T = arr.shape[0]

        def fractions(hstate, ctx):
            row = jax.lax.dynamic_index_in_dim(table, jnp.clip(ctx.step, 0, T - 1), 0, keepdims=False)
            p = jnp.where(ctx.step < T, row, 1.0)
            if not partial:
                p = jnp.where(p < 1.0, 0.0, 1.0)
            return p, hstate

        init = lambda state, key: ()  # noqa: E731
    else:
        va.check_real("rate", rate, lo=0.0, hi=1.0)
        if not tu.is_traced(rate) and np.ndim(rate) != 0:
            raise ValueError(f"rate must be a scalar probability, got shape {np.shape(rate)}")

        def fractions(hstate, ctx):
            k_rev, k_frac = jax.random.split(jax.random.fold_in(ctx.key, 7))
            # jax.random's bernoulli and uniform numbers (scarjax.rng: drawn flat).
            revoked = rng.bernoulli(k_rev, rate, (workers,))
            done = jnp.where(partial, rng.uniform(k_frac, (workers,)), 0.0)
            down = hstate > 0
            p = jnp.where(down, 0.0, jnp.where(revoked, done, 1.0))
            new = jnp.where(down, hstate - 1, jnp.where(revoked, downtime, 0))
            return p, new.astype(jnp.int32)

        init = lambda state, key: jnp.zeros((workers,), jnp.int32)  # noqa: E731

    def apply(value, hstate, ctx):
        p, hstate = fractions(hstate, ctx)
        return value * jnp.asarray(p, jnp.float32), hstate

    return Hook(point="progress", init=init, apply=apply, name=name, workers=workers)
