"""The running checkpoint and its save strategies (thesis Sec 5.4.2–5.4.3).

A *running checkpoint* keeps, for every parameter-server block, a saved copy and the
iteration it was saved at. It is initialised to the initial state ``w⁽⁰⁾`` and updated
each time a (partial) checkpoint is taken, so at any time it may mix blocks saved at
different iterations (Sec 5.4.2). Instead of saving every block every ``C`` iterations
(traditional, ``strategy='full'``), SCAR saves a fraction ``r`` of the blocks every
``rC`` iterations, so the data written per ``C`` iterations is the same, and chooses
*which* blocks:

* ``'priority'`` – the blocks that changed most since their last save, measured in the
  algorithm's norm (the heuristic of Sec 5.4.2; steps 1–3 of "Actions During a
  Checkpoint" in Sec 5.4.3 are exactly a top-k of per-block distances computed against
  the in-memory cache, which is what :func:`select` does);
* ``'round_robin'`` – blocks in a fixed cyclic order;
* ``'random'`` – a uniformly random subset;
* ``'full'`` – every block (``fraction`` must be 1).

This module is the pure, in-memory backend: :class:`CheckpointState` is a pytree that
lives in a hook's state, so whole experiments stay one ``vmap``-ped program, and the
spec's ``fraction`` and ``period`` may be traced (vary across trials). The same state is
the in-memory cache of the persistent backend (:mod:`scarjax.scar.persistent`), which writes
the blocks :func:`select` picks to disk asynchronously (Sec 5.4.3 step 4).

Order at a step ``k`` when both happen: a failure is handled first, then the checkpoint
(a failure "immediately before" a checkpoint is the worst case of traditional
checkpointing, Sec 5.5.5). Checkpoints fire at ``k = m · interval`` for ``m ≥ 1`` with
``interval = max(1, round(r · C))`` -- or, for a spec given ``when=`` (a
:class:`scarjax.schedules.Schedule`) instead of ``period``, at the steps ``k ≥ 1`` the
schedule fires (never at ``k = 0``, where the running checkpoint is ``w⁽⁰⁾`` already).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.choices import STRATEGIES
from scarjax import schedules as sch
from scarjax import tree as tu
from scarjax.hooks import Hook
from scarjax.scar import partition as pt

PyTree = Any

__all__ = [
    "STRATEGIES",
    "Checkpoint",
    "CheckpointState",
    "init",
    "interval",
    "due",
    "count",
    "select",
    "save",
    "step",
    "saver",
]



@dataclasses.dataclass(frozen=True, eq=False)
class Checkpoint:
    """How the running checkpoint is kept (Sec 5.4.2).

    Attributes:
      strategy: one of :data:`STRATEGIES`; or, inside a trace, an int32 index into it
        (so strategies can vary across vmapped trials; every strategy's selection is then
        computed and one is picked).
      fraction: ``r``, the fraction of blocks saved per checkpoint (``0 < r <= 1``; must
        be 1 for ``'full'``). May be traced.
      period: ``C``, the period of a full checkpoint in iterations (Thm 5.4.2's cost
        parameter): a checkpoint of ``r`` of the blocks is taken every
        ``max(1, round(r·C))`` iterations. May be traced.
      norm: the norm for ``'priority'`` distances: ``'auto'`` (the algorithm's norm),
        ``'l2'``, ``'l1'`` or a callable on a params pytree (see
        :func:`scarjax.scar.partition.block_distances`).
      when: the alternative to ``period``: a :class:`scarjax.schedules.Schedule` (or an
        int step, ``at(step)``) of the iterations at which a checkpoint of ``r`` of the
        blocks is taken (never at iteration 0). Give at most one of ``period`` and
        ``when``; neither: never save, the checkpoint stays at ``w⁽⁰⁾`` (then partial
        recovery is the reset-to-init perturbation of Fig 5.6).
    """

    strategy: str = "full"
    fraction: Any = 1.0
    period: Any = None
    norm: Any = "auto"
    when: Any = None

    def __post_init__(self):
        if isinstance(self.strategy, str) or not tu.is_traced(self.strategy):
            if not isinstance(self.strategy, str) or self.strategy not in STRATEGIES:
                raise ValueError(
                    f"strategy must be one of {STRATEGIES} (or a traced int index into it, e.g. "
                    f"from run_trials' hook_args={{'strategy': [...]}}), got {self.strategy!r}"
                )
        if self.fraction is None or not tu.is_traced(self.fraction):
            if self.fraction is None:
                raise TypeError("fraction must be a number in (0, 1], got None")
            va.check_real("fraction", self.fraction, lo=0.0, hi=1.0, lo_open=True)
            if np.ndim(self.fraction) != 0:
                raise ValueError(f"fraction must be a scalar, got shape {np.shape(self.fraction)}")
            if isinstance(self.strategy, str) and self.strategy == "full" and float(self.fraction) != 1.0:
                raise ValueError(
                    f"strategy 'full' saves every block: fraction must be 1, got {self.fraction!r}"
                )
        if self.period is not None and not tu.is_traced(self.period):
            va.check_integer_value("period", self.period, lo=1)
            if np.ndim(self.period) != 0:
                raise ValueError(f"period must be a scalar, got shape {np.shape(self.period)}")
        if not (isinstance(self.norm, str) and self.norm in ("auto", "l2", "l1") or callable(self.norm)):
            raise ValueError(f"norm must be 'auto', 'l2', 'l1' or a callable, got {self.norm!r}")
        if self.when is not None:
            if self.period is not None:
                raise ValueError(
                    f"give at most one of period (C) and when (a Schedule) for the checkpoint; got "
                    f"period={self.period!r}, when={self.when!r}"
                )
            object.__setattr__(self, "when", sch.as_schedule(self.when, "when"))

    def events(self) -> tuple[tuple[str, int], ...]:
        """The concrete steps of a ``when`` schedule, for :attr:`scarjax.hooks.Hook.events`."""
        return () if self.when is None else tuple(("checkpoint.when", k) for k in self.when.events)

    def replace(self, **changes: Any) -> "Checkpoint":
        return dataclasses.replace(self, **changes)


class CheckpointState(NamedTuple):
    """The running checkpoint (also the PS nodes' in-memory cache of it, Sec 5.4.3).

    Attributes:
      saved: a :class:`~scarjax.State`: the last saved copy of every block (and of the
        never-lost leaves, refreshed at every save).
      saved_at: ``int32[num_blocks]``: iteration of each block's saved copy (0 = ``w⁽⁰⁾``).
      cursor: ``int32``: the next block in round-robin order.
      saves: ``int32``: number of checkpoints taken.
      when: the state of the spec's ``when`` schedule (``init(key)``; ``()`` without one).
    """

    saved: Any
    saved_at: jax.Array
    cursor: jax.Array
    saves: jax.Array
    when: Any = ()


def init(state: Any, partition: pt.Partition, spec: Checkpoint | None = None,
         key: jax.Array | None = None) -> CheckpointState:
    """A running checkpoint initialised to ``state`` (``w⁽⁰⁾``, Sec 5.4.2). For a ``spec``
    with a ``when`` schedule, its state is drawn here from ``key`` (required then)."""
    pt.check_matches(partition, state)
    when = ()
    if spec is not None:
        if not isinstance(spec, Checkpoint):
            raise TypeError(f"spec must be a Checkpoint or None, got {type(spec).__name__}")
        if spec.when is not None:
            if key is None:
                raise ValueError("key is required to initialise a checkpoint with a when= schedule")
            when = spec.when.init(key)
    return CheckpointState(
        saved=state,
        saved_at=jnp.zeros((partition.num_blocks,), jnp.int32),
        cursor=jnp.zeros((), jnp.int32),
        saves=jnp.zeros((), jnp.int32),
        when=when,
    )


def interval(spec: Checkpoint) -> jax.Array:
    """Iterations between checkpoints, ``max(1, round(r·C))`` (Sec 5.4.2)."""
    if spec.period is None:
        raise ValueError("this checkpoint has no period (period=None): it saves at its when= schedule or never")
    r = jnp.asarray(spec.fraction, jnp.float32)
    return jnp.maximum(1, jnp.round(r * jnp.asarray(spec.period, jnp.float32))).astype(jnp.int32)


def due(spec: Checkpoint, step: jax.Array, key: jax.Array | None = None, when_state: Any = ()) -> jax.Array:
    """Whether a checkpoint is taken at ``step``: ``step = m·interval`` (``m >= 1``), or,
    for a spec with ``when``, ``step >= 1`` and ``spec.when.fires(step, key, when_state)``
    (``key``: the per-step key of the schedule; ``when_state``: ``CheckpointState.when``)."""
    step = jnp.asarray(step, jnp.int32)
    if spec.when is not None:
        if key is None:
            raise ValueError("key is required: this checkpoint saves at a when= schedule (give the per-step key)")
        return (step > 0) & spec.when.fires(step, key, when_state)
    if spec.period is None:
        return jnp.bool_(False)
    return (step > 0) & (step % interval(spec) == 0)


def count(spec: Checkpoint, num_blocks: int) -> jax.Array:
    """Blocks saved per checkpoint: ``max(1, round(r·B))`` (``B`` for ``'full'``)."""
    if isinstance(spec.strategy, str) and spec.strategy == "full":
        return jnp.asarray(num_blocks, jnp.int32)
    r = jnp.asarray(spec.fraction, jnp.float32)
    n = jnp.clip(jnp.round(r * num_blocks), 1, num_blocks).astype(jnp.int32)
    if isinstance(spec.strategy, str):
        return n
    return jnp.where(spec.strategy == 0, num_blocks, n)


def _norm_of(spec: Checkpoint, algorithm_norm: Callable | None) -> Any:
    if spec.norm != "auto":
        return spec.norm
    if algorithm_norm is None or algorithm_norm is tu.l2_norm:
        return "l2"
    return algorithm_norm


def select(
    spec: Checkpoint,
    ckpt: CheckpointState,
    state: Any,
    partition: pt.Partition,
    key: jax.Array,
    algorithm_norm: Callable | None = None,
) -> jax.Array:
    """``bool[num_blocks]``: the blocks the next checkpoint saves (Sec 5.4.3 steps 1–3).

    ``'priority'`` ranks blocks by ``‖w_blk − saved_blk‖`` (ties broken at random) and
    takes the top :func:`count`; ``'round_robin'`` takes the next ``count`` blocks
    cyclically from ``ckpt.cursor``; ``'random'`` a uniform subset; ``'full'`` all.
    """
    B = partition.num_blocks
    if not isinstance(spec.strategy, str):  # traced index: compute all, pick one
        masks = jnp.stack([
            select(spec.replace(strategy=name, fraction=1.0 if name == "full" else spec.fraction),
                   ckpt, state, partition, key, algorithm_norm)
            for name in STRATEGIES
        ])
        return masks[jnp.asarray(spec.strategy, jnp.int32)]
    n = count(spec, B)
    if spec.strategy == "full":
        return jnp.ones((B,), bool)
    if spec.strategy == "round_robin":
        offset = (jnp.arange(B, dtype=jnp.int32) - ckpt.cursor) % B
        return offset < n
    tiebreak = jax.random.uniform(key, (B,))
    if spec.strategy == "random":
        score = tiebreak
    else:
        dist = pt.block_distances(partition, state.params, ckpt.saved.params, _norm_of(spec, algorithm_norm))
        # Rank by distance, ties by the random key (lexsort: last key is primary).
        order = jnp.lexsort((tiebreak, -dist))
        rank = jnp.empty((B,), jnp.int32).at[order].set(jnp.arange(B, dtype=jnp.int32))
        return rank < n
    rank = jnp.argsort(jnp.argsort(score))
    return rank < n


def save(
    ckpt: CheckpointState,
    state: Any,
    partition: pt.Partition,
    block_mask: jax.Array,
    step: jax.Array,
    *,
    advance: jax.Array | int = 0,
) -> CheckpointState:
    """Write the selected blocks of ``state`` into the running checkpoint (and refresh
    the never-lost leaves); ``advance`` moves the round-robin cursor."""
    block_mask = pt._check_block_mask(block_mask, partition)
    saved = pt.restore(ckpt.saved, state, partition, block_mask)
    # Never-lost leaves (id -1) are global state (e.g. the Adam step count): refreshed at
    # every save so that a full recovery reloads a consistent copy.
    saved = jax.tree.map(
        lambda ids, s, x: jnp.where(ids < 0, x.astype(s.dtype), s), partition.blocks, saved, state
    )
    return ckpt._replace(
        saved=saved,
        saved_at=jnp.where(block_mask, jnp.asarray(step, jnp.int32), ckpt.saved_at),
        cursor=(ckpt.cursor + jnp.asarray(advance, jnp.int32)) % partition.num_blocks,
        saves=ckpt.saves + 1,
    )


def step(
    spec: Checkpoint,
    ckpt: CheckpointState,
    state: Any,
    partition: pt.Partition,
    k: jax.Array,
    key: jax.Array,
    algorithm_norm: Callable | None = None,
) -> tuple[CheckpointState, jax.Array]:
    """Take a checkpoint at iteration ``k`` if one is :func:`due`: returns the new
    running checkpoint and the mask of blocks saved (all ``False`` when none). ``key``
    breaks ties in the selection; a ``when`` schedule fires with ``fold_in(key, 1)``."""
    if not isinstance(spec, Checkpoint):
        raise TypeError(f"spec must be a Checkpoint, got {type(spec).__name__}")
    pt.check_matches(partition, state)
    va.check_tree_like("ckpt.saved", ckpt.saved, state, "state")
    B = partition.num_blocks
    if spec.period is None and spec.when is None:
        return ckpt, jnp.zeros((B,), bool)
    fire = due(spec, k, jax.random.fold_in(key, 1) if spec.when is not None else None, ckpt.when)

    def take(_):
        mask = select(spec, ckpt, state, partition, key, algorithm_norm)
        if isinstance(spec.strategy, str):
            adv = count(spec, B) if spec.strategy == "round_robin" else 0
        else:
            adv = jnp.where(spec.strategy == STRATEGIES.index("round_robin"), count(spec, B), 0)
        return save(ckpt, state, partition, mask, k, advance=adv), mask

    def skip(_):
        return ckpt, jnp.zeros((B,), bool)

    return jax.lax.cond(fire, take, skip, None)


def saver(partition: pt.Partition, spec: Checkpoint, *, name: str = "checkpoint") -> Hook:
    """A write-point hook that only keeps a running checkpoint (never changes the state;
    useful to measure checkpoint overhead). To combine it with failures use
    :func:`scarjax.scar.faults.scar`, which shares the checkpoint with the recovery."""
    if not isinstance(partition, pt.Partition):
        raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    if not isinstance(spec, Checkpoint):
        raise TypeError(f"spec must be a Checkpoint, got {type(spec).__name__}")
    va.check_str("name", name)

    def init_fn(state, key):
        return init(state, partition, spec, key)

    def apply(state, hstate, ctx):
        hstate, _ = step(spec, hstate, state, partition, ctx.step, ctx.key, ctx.algorithm.norm)
        return state, hstate

    return Hook(point="write", init=init_fn, apply=apply, name=name, events=spec.events())
