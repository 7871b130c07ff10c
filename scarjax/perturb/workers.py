"""Simulated data-parallel workers: sharding, per-worker progress and the barrier merge.

An :class:`~scarjax.Algorithm` that provides the optional worker/server split

* ``grad(view, state, shard, key, progress) -> (message, count)`` – what one worker
  computes from the parameters it read (``view``) and its own data shard: a message (for
  SGD the mean gradient over the points it processed) and the number of points it
  processed before the barrier (a float; ``0`` = it contributed nothing);
* ``apply(message, state, data, key) -> (delta, State)`` – what the server does with the merged
  message (for SGD: the optimizer step);
* ``shard(data, workers) -> shards`` – how ``data`` is split among ``workers`` workers
  (a pytree whose leaves have a leading axis ``workers``); ``None`` replicates ``data``
  (every worker sees all of it, e.g. the deterministic QP);

runs in *worker mode* with ``scarjax.run(algorithm, hooks, steps, key, workers=M)`` (and
``run_trials(..., workers=M)``). Per-worker hooks (:func:`scarjax.perturb.staleness.ssp`,
:func:`scarjax.perturb.revocation.revocations`) are built for a worker count
(``hook.workers``) and require that mode with the same ``M``. The loop then (thesis
Example 5.2.2, Sync-on-the-fly Eq 5):

1. gives every worker a view (``[M, …]``, stacked; fresh copies of the stored parameters
   unless a read hook such as a stale-read hook replaces them);
2. passes each worker's ``progress ∈ [0, 1]`` (the fraction of its points finished
   before the barrier; ones to start with) through the ``'progress'``-point hooks
   (revocations);
3. ``vmap``-s ``grad`` over workers, merges the messages weighted by the points processed
   (:func:`merge`: the barrier averages over the points actually processed, Sync-on-the-fly
   Eq 5, so the merge does not depend on how the points were split among workers), and
   calls ``apply`` once. If no worker processed any point, the step is skipped (Δ = 0).

*Synchronous* training with ``M`` workers is this path with fresh views and full progress:
``scarjax.run(algorithm, None, steps, key, workers=M)``, the reference run for staleness,
revocations and the Δ of Example 5.2.2; a stale-read hook with staleness 0 reproduces it
bit for bit.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import tree as tu

PyTree = Any

__all__ = [
    "shard_examples",
    "merge",
    "check_workers",
    "example_weights",
]


def check_workers(workers: Any, name: str = "workers") -> int:
    """Validate a worker count (a concrete int >= 1)."""
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
        raise ValueError(f"{name} must be an int >= 1 (static), got {workers!r}")
    return int(workers)


def shard_examples(data: PyTree, workers: int) -> tuple[PyTree, jax.Array]:
    """Split the example axis of ``data`` into ``workers`` contiguous shards.

    Every shard has ``ceil(n / workers)`` slots; the last shards are padded with copies of
    the first examples (finite values) whose validity is ``False``.

    Returns:
      ``(shards, valid)``: ``shards`` has leaves ``[workers, ceil(n/workers), …]`` and
      ``valid`` is ``[workers, ceil(n/workers)]`` bool.
    """
    check_workers(workers)
    leaves = jax.tree.leaves(data)
    sizes = {x.shape[0] for x in leaves}
    if len(sizes) != 1:
        raise ValueError(f"data leaves must share their leading (example) axis, got sizes {sizes}")
    n = sizes.pop()
    if workers > n:
        raise ValueError(f"workers must be <= the number of examples {n}, got {workers}")
    per = math.ceil(n / workers)
    pad = per * workers - n

    def split(x):
        x = jnp.concatenate([x, x[:pad]], axis=0) if pad else x
        return x.reshape((workers, per) + x.shape[1:])

    valid = (jnp.arange(per * workers) < n).reshape(workers, per)
    return jax.tree.map(split, data), valid


def example_weights(valid: jax.Array, progress: jax.Array) -> jax.Array:
    """Per-example weights of one worker that processes its (ordered) valid examples and
    is stopped after a fraction ``progress`` of them: ``1`` for the first
    ``floor(progress · n_valid)`` valid examples, ``0`` otherwise (Sync-on-the-fly Eq 5:
    only the points actually processed count)."""
    valid = valid.astype(jnp.float32)
    n_valid = jnp.sum(valid)
    done = jnp.floor(jnp.clip(progress, 0.0, 1.0) * n_valid)
    rank = jnp.cumsum(valid) - 1.0  # position among valid examples
    return jnp.where((valid > 0) & (rank < done), 1.0, 0.0)


def merge(messages: PyTree, counts: jax.Array) -> tuple[PyTree, jax.Array]:
    """The barrier (Sync-on-the-fly Eq 5): ``Σ_m count_m · message_m / Σ_m count_m``.

    With ``message_m`` the mean per-point gradient over the ``count_m`` points worker
    ``m`` processed, this is the mean gradient over every processed point, whichever
    worker processed it. Returns ``(merged, total_count)``; the merged message is zero
    when ``total_count == 0`` (no NaN).
    """
    counts = jnp.asarray(counts, jnp.float32)
    total = jnp.sum(counts)
    safe = jnp.where(total > 0, total, 1.0)
    w = counts / safe

    def combine(x):
        wx = w.reshape(w.shape + (1,) * (x.ndim - 1)).astype(x.dtype)
        return jnp.sum(wx * x, axis=0)

    return jax.tree.map(combine, messages), total


def worker_norm(norm: Callable[[PyTree], jax.Array]) -> Callable[[PyTree], jax.Array]:
    """RMS over workers of ``norm`` applied to each worker's slice of a stacked tree."""

    def f(stacked):
        per = jax.vmap(norm)(stacked)
        return jnp.sqrt(jnp.mean(jnp.square(per)))

    return f


def broadcast(tree: PyTree, workers: int) -> PyTree:
    """Stack ``workers`` copies of ``tree`` along a new leading axis."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (workers,) + jnp.shape(x)), tree)


def zero_like_message(messages: PyTree) -> PyTree:
    return tu.tree_zeros_like(jax.tree.map(lambda x: x[0], messages))
