"""Parameter-server failures and their recovery, as write-point hooks (thesis Sec 5.4).

A failure (at the iterations of its :mod:`scarjax.schedules` schedule, e.g. a fixed ``T``
or a geometric time, Sec 5.5.3) loses a set of blocks of a :class:`~scarjax.scar.partition.
Partition`: a uniformly random fraction ``p`` of the blocks (the setting of Thm 5.4.2),
or exactly the blocks held by ``k`` failed servers (Sec 5.4.3). Optimizer state and other
aux leaves co-located with a lost block are lost with it. Recovery reloads from the
running checkpoint (:mod:`scarjax.scar.checkpoint`):

* ``'full'``    – the whole state is reloaded (traditional checkpoint-restart);
* ``'partial'`` – only the lost blocks are reloaded (Sec 5.4.1).

Recovery is a perturbation of the stored iterate (Eq 5.2): the loop records its change
of the parameters as ``δ_T`` (``trace.delta[name]`` and ``trace.point_delta['write']``),
so Thm 5.3.1 can be evaluated on it, and Thm 5.4.1 (``‖δ'‖ ≤ ‖δ‖``) and Thm 5.4.2
(``E‖δ'‖² = p‖δ‖²``) hold for the partial-recovery δ' against the full-recovery δ
(property-tested in ``tests/test_faults.py``; notes in ``theory/``).

:func:`scar` composes the running checkpoint, the failure and the recovery in one hook
(they share the checkpoint). The drivers build on the same functions: the Monte-Carlo
experiment of Secs 5.5.3–5.5.4 (:func:`scarjax.scar.simulate.simulate_failures`) runs
this hook, and the persistent driver (:func:`scarjax.scar.persistent.run`) recovers with
:func:`lost_blocks`, :func:`recover` and :func:`apply_after_recovery` from the blocks it
reads back from disk.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.choices import RECOVERIES
from scarjax import schedules as sch
from scarjax import tree as tu
from scarjax.hooks import Hook
from scarjax.scar import checkpoint as ck
from scarjax.scar import partition as pt

PyTree = Any

__all__ = [
    "RECOVERIES",
    "Failure",
    "lost_blocks",
    "recover",
    "apply_after_recovery",
    "scar",
    "failure",
    "ScarState",
]



@dataclasses.dataclass(frozen=True, eq=False)
class Failure:
    """When failures happen and what each loses (Sec 5.4).

    Attributes:
      fraction: a uniformly random fraction ``p`` of the blocks is lost (Thm 5.4.2); or
      servers: exactly the blocks of ``k`` uniformly random failed servers (Sec 5.4.3).
        Exactly one of the two; either may be traced (varied across vmapped trials).
      when: a :class:`scarjax.schedules.Schedule` of the failure iterations, or an int
        step ``T`` (``schedules.at(T)``; may be traced): e.g. ``schedules.geometric(rate,
        start, stop)`` for the geometric failure time of Sec 5.5.3 (drawn per trial),
        ``schedules.every(k)`` for repeated failures.

    A failure may fire more than once: the first firing loses the blocks drawn when the
    hook is initialised, each later one draws a fresh set (see :func:`scar`).
    """

    fraction: Any = None
    servers: Any = None
    when: Any = None

    def __post_init__(self):
        if (self.fraction is None) == (self.servers is None):
            raise ValueError(
                f"give exactly one of fraction (of blocks) and servers (count); got "
                f"fraction={self.fraction!r}, servers={self.servers!r}"
            )
        if self.when is None:
            raise TypeError(
                "when must be a scarjax.schedules.Schedule or an int step (the failure iterations), got None"
            )
        object.__setattr__(self, "when", sch.as_schedule(self.when, "when"))
        for nm in ("fraction", "servers"):
            v = getattr(self, nm)
            if v is not None and not tu.is_traced(v):
                if nm == "fraction":
                    va.check_real("fraction", v, lo=0.0, hi=1.0)
                else:
                    va.check_integer_value(nm, v, lo=0)
                if np.ndim(v) != 0:
                    raise ValueError(f"{nm} must be a scalar, got shape {np.shape(v)}")

    def replace(self, **changes: Any) -> "Failure":
        return dataclasses.replace(self, **changes)

    def events(self) -> tuple[tuple[str, int], ...]:
        """The concrete steps of the ``when`` schedule (e.g. ``T`` of ``at(T)``, the earliest
        step of a geometric time) for :attr:`scarjax.hooks.Hook.events`."""
        return tuple(("failure.when", k) for k in self.when.events)

    def check(self, partition: pt.Partition) -> None:
        if not isinstance(partition, pt.Partition):
            raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
        if va.is_concrete(self.servers, scalar=True) and int(self.servers) > partition.num_servers:
            raise ValueError(
                f"servers must be <= num_servers={partition.num_servers}, got {self.servers!r}"
            )


def lost_blocks(failure_spec: Failure, partition: pt.Partition, key: jax.Array) -> jax.Array:
    """``bool[num_blocks]``: the blocks a failure loses."""
    if failure_spec.fraction is not None:
        return pt.random_blocks(key, partition.num_blocks, failure_spec.fraction)
    failed = pt.random_servers(key, partition.num_servers, failure_spec.servers)
    return pt.server_blocks(partition, failed)


def recover(
    recovery: str,
    state: Any,
    saved: Any,
    partition: pt.Partition,
    lost: jax.Array,
) -> Any:
    """The state after recovering from the checkpoint ``saved``: ``'partial'`` reloads
    the lost blocks only (Sec 5.4.1), ``'full'`` the whole state. Inside a trace
    ``recovery`` may be an int32 index into :data:`RECOVERIES`."""
    recovery = _recovery(recovery)
    if not isinstance(recovery, str):  # traced index into RECOVERIES
        full = recover("full", state, saved, partition, lost)
        part = recover("partial", state, saved, partition, lost)
        is_full = jnp.asarray(recovery, jnp.int32) == RECOVERIES.index("full")
        return jax.tree.map(lambda a, b: jnp.where(is_full, a, b), full, part)
    if recovery == "full":
        return jax.tree.map(lambda s, x: s.astype(x.dtype), saved, state)
    if recovery == "partial":
        return pt.restore(state, saved, partition, lost)
    raise ValueError(f"recovery must be one of {RECOVERIES}, got {recovery!r}")


def apply_after_recovery(
    after_recovery: Callable[[Any, Any], Any] | None, recovered: Any, state: Any, data: Any
) -> Any:
    """``after_recovery(recovered, data)`` checked to be a state like ``state`` (a plain
    2-tuple ``(params, aux)`` is accepted and rebuilt as ``type(state)``); ``recovered``
    itself when ``after_recovery`` is ``None``. E.g. LDA's ``rebuild_counts`` regenerates
    the word-topic counts from the recovered assignments (Sec 5.5.1). Traceable; used by
    the :func:`scar` hook and the persistent driver alike."""
    if after_recovery is None:
        return recovered
    rec = after_recovery(recovered, data)
    if isinstance(rec, tuple) and not isinstance(rec, type(state)) and len(rec) == 2:
        rec = type(state)(*rec)
    va.check_tree_like("after_recovery(state, data)", rec, state, "the state")
    return rec


def _recovery(recovery: Any) -> Any:
    """A recovery name, from a name or an int index into :data:`RECOVERIES` (concrete:
    checked and mapped to its name; traced, e.g. from ``run_trials``' ``hook_args``: kept)."""
    if isinstance(recovery, str):
        return va.check_choice("recovery", recovery, RECOVERIES)
    if tu.is_traced(recovery):
        if jnp.ndim(recovery) != 0 or not jnp.issubdtype(jnp.result_type(recovery), jnp.integer):
            raise ValueError(
                f"recovery traced must be an int scalar index into {RECOVERIES}, got "
                f"{jnp.result_type(recovery)} shape {jnp.shape(recovery)}"
            )
        return recovery
    if isinstance(recovery, (int, np.integer, np.ndarray, jax.Array)) and not isinstance(recovery, bool) \
            and np.ndim(recovery) == 0 and np.issubdtype(np.asarray(recovery).dtype, np.integer):
        i = int(recovery)
        if not 0 <= i < len(RECOVERIES):
            raise ValueError(f"recovery as an index must be in [0, {len(RECOVERIES) - 1}] ({RECOVERIES}), got {i}")
        return RECOVERIES[i]
    raise ValueError(f"recovery must be one of {RECOVERIES} (or an int index into it), got {recovery!r}")


class ScarState(NamedTuple):
    """Hook state of :func:`scar`.

    Attributes:
      checkpoint: the running checkpoint (:class:`~scarjax.scar.checkpoint.CheckpointState`).
      when: the failure schedule's state (``failure.when.init``; e.g. the geometric
        failure iteration ``T``), ``()`` without a failure.
      lost: ``bool[num_blocks]``: the blocks the first failure loses (drawn at ``init``),
        then those the latest failure lost.
      failures: ``int32``: failures so far.
      key: ``jax.random.key_data(k_lost)``: failure ``n ≥ 1`` draws its lost blocks from
        ``fold_in(k_lost, n)`` (raw key data, so the state holds plain arrays; rewrapped
        with the implementation of the loop's keys).
    """

    checkpoint: ck.CheckpointState
    when: Any
    lost: jax.Array
    failures: jax.Array
    key: jax.Array


def scar(
    partition: pt.Partition,
    *,
    checkpoint: ck.Checkpoint | None = None,
    failure: Failure | None = None,
    recovery: str = "partial",
    after_recovery: Callable[[Any, Any], Any] | None = None,
    name: str = "scar",
) -> Hook:
    """SCAR as one write-point hook: a running checkpoint, failures and their recovery
    (Sec 5.4, Fig 5.4).

    Args:
      partition: the :class:`~scarjax.scar.partition.Partition` of the algorithm's state.
      checkpoint: the :class:`~scarjax.scar.checkpoint.Checkpoint` spec; ``None`` keeps the
        checkpoint at ``w⁽⁰⁾`` forever (partial recovery is then the reset of Fig 5.6).
      failure: the :class:`Failure`; ``None`` for no failure (checkpointing only).
      recovery: ``'partial'`` or ``'full'``, or an int index into :data:`RECOVERIES`
        (traced in a hook factory: ``run_trials``/``run`` map names given in
        ``hook_args``, e.g. ``hook_args={'recovery': ['partial', 'full', ...]}``, to these
        indices before tracing).
      after_recovery: ``after_recovery(state, data) -> state``, applied right after a
        recovery (traceable), e.g. LDA's ``rebuild_counts`` to regenerate the word-topic
        counts from the recovered assignments (:func:`apply_after_recovery`).
      name: the hook's name in ``trace.delta``.

    Randomness: ``init(state, key)`` splits ``key`` into ``(k_when, k_lost)``: the failure
    schedule's state is ``failure.when.init(k_when)`` and the first failure loses
    ``lost_blocks(failure, partition, k_lost)``; failure ``n ≥ 1`` (counting from 0) loses
    ``lost_blocks(..., fold_in(k_lost, n))``. A ``when`` schedule of the checkpoint is
    initialised from ``fold_in(key, 2)``. At each step the failure schedule fires with
    ``fold_in(ctx.key, 2)``; the checkpoint selects with ``ctx.key``
    (:func:`scarjax.scar.checkpoint.step`).

    At a step where the failure fires, the state is recovered from the running checkpoint
    first, then the checkpoint is taken if due. The hook's change of the parameters at a
    failure is recorded by the loop as ``δ_T``.
    """
    if not isinstance(partition, pt.Partition):
        raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    spec = checkpoint if checkpoint is not None else ck.Checkpoint("full", 1.0, None)
    if not isinstance(spec, ck.Checkpoint):
        raise TypeError(f"checkpoint must be a scarjax.scar.checkpoint.Checkpoint or None, got {type(checkpoint).__name__}")
    if failure is not None:
        if not isinstance(failure, Failure):
            raise TypeError(f"failure must be a Failure or None, got {type(failure).__name__}")
        failure.check(partition)
    recovery = _recovery(recovery)
    if after_recovery is not None and not callable(after_recovery):
        raise TypeError("after_recovery must be a callable (state, data) -> state")
    va.check_str("name", name)
    B = partition.num_blocks

    def init_fn(state, key):
        k_when, k_lost = jax.random.split(key)
        ckpt = ck.init(state, partition, spec, jax.random.fold_in(key, 2))
        if failure is None:
            when, lost = (), jnp.zeros((B,), bool)
        else:
            when, lost = failure.when.init(k_when), lost_blocks(failure, partition, k_lost)
        return ScarState(ckpt, when, lost, jnp.zeros((), jnp.int32), jax.random.key_data(k_lost))

    def apply(state, hstate, ctx):
        if failure is not None:
            fire = jnp.asarray(failure.when.fires(ctx.step, jax.random.fold_in(ctx.key, 2), hstate.when), bool)
            n = hstate.failures
            k_lost = jax.random.wrap_key_data(hstate.key, impl=jax.random.key_impl(ctx.key))
            lost = jax.lax.cond(
                n == 0,
                lambda: hstate.lost,
                lambda: lost_blocks(failure, partition, jax.random.fold_in(k_lost, n)),
            )
            rec = recover(recovery, state, hstate.checkpoint.saved, partition, lost)
            rec = apply_after_recovery(after_recovery, rec, state, ctx.algorithm.data)
            state = jax.tree.map(lambda a, b: jnp.where(fire, a, b), rec, state)
            hstate = hstate._replace(lost=jnp.where(fire, lost, hstate.lost), failures=n + fire.astype(jnp.int32))
        ckpt, _ = ck.step(spec, hstate.checkpoint, state, partition, ctx.step, ctx.key, ctx.algorithm.norm)
        return state, hstate._replace(checkpoint=ckpt)

    events = (failure.events() if failure is not None else ()) + spec.events()
    return Hook(point="write", init=init_fn, apply=apply, name=name, events=events)


def failure(
    partition: pt.Partition,
    failure: Failure,
    *,
    recovery: str = "partial",
    after_recovery: Callable[[Any, Any], Any] | None = None,
    name: str = "failure",
) -> Hook:
    """Failures recovered from the initial state ``w⁽⁰⁾`` (no periodic checkpoints):
    ``scar(partition, checkpoint=None, failure=failure, ...)``."""
    return scar(partition, checkpoint=None, failure=failure, recovery=recovery,
                after_recovery=after_recovery, name=name)
