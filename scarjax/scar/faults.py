"""Parameter-server failures and their recovery, as write-point hooks (thesis Sec 5.4).

A failure at iteration ``T`` loses a set of blocks of a :class:`~scarjax.scar.partition.
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

from scarjax import _validate as va
from scarjax.scar import checkpoint as ck
from scarjax.scar import partition as pt
from scarjax import tree as tu
from scarjax.hooks import Hook

PyTree = Any

__all__ = [
    "RECOVERIES",
    "Geometric",
    "Failure",
    "lost_blocks",
    "recover",
    "apply_after_recovery",
    "scar",
    "failure",
    "ScarState",
    "geometric_times",
]

RECOVERIES = ("partial", "full")


def _concrete(x: Any) -> bool:
    return x is not None and not tu.is_traced(x) and np.ndim(x) == 0


@dataclasses.dataclass(frozen=True)
class Geometric:
    """A failure time ``T ~ start + Geometric(rate)`` truncated to ``[start, stop)``
    (Sec 5.5.3 samples the failure iteration from a geometric distribution): each
    iteration from ``start`` on fails with probability ``rate``, conditioned on a failure
    before ``stop``. ``stop=None`` leaves it untruncated (then ``T`` may exceed the run,
    i.e. no failure)."""

    rate: float
    start: int = 1
    stop: int | None = None

    def __post_init__(self):
        if self.rate is None or not tu.is_traced(self.rate):
            if self.rate is None:
                raise TypeError("rate must be a number in (0, 1], got None")
            va.check_real("rate", self.rate, lo=0.0, hi=1.0, lo_open=True)
            if np.ndim(self.rate) != 0:
                raise ValueError(f"rate must be a scalar, got shape {np.shape(self.rate)}")
        if isinstance(self.start, bool) or not isinstance(self.start, (int, np.integer)) or self.start < 0:
            raise ValueError(f"start must be an int >= 0, got {self.start!r}")
        if self.stop is not None and (
            isinstance(self.stop, bool) or not isinstance(self.stop, (int, np.integer)) or self.stop <= self.start
        ):
            raise ValueError(f"stop must be an int > start={self.start}, got {self.stop!r}")

    def sample(self, key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
        """Draw ``T`` (int32) by inverting the (truncated) geometric CDF."""
        q = jnp.asarray(self.rate, jnp.float32)
        u = jax.random.uniform(key, shape, minval=0.0, maxval=1.0)
        log1mq = jnp.log1p(-jnp.minimum(q, 1.0 - 1e-7))
        if self.stop is not None:
            n = self.stop - self.start
            # P(T - start <= j) = (1 - (1-q)^(j+1)) / (1 - (1-q)^n)
            scale = -jnp.expm1(n * log1mq)
            j = jnp.floor(jnp.log1p(-u * scale) / log1mq)
            j = jnp.clip(j, 0, n - 1)
        else:
            j = jnp.floor(jnp.log1p(-u) / log1mq)
        j = jnp.where(q >= 1.0, 0.0, j)
        return (self.start + j).astype(jnp.int32)


def geometric_times(dist: Geometric, key: jax.Array | int, n: int) -> np.ndarray:
    """``n`` failure times from ``dist`` (host array), e.g. for ``hook_args``."""
    if not isinstance(dist, Geometric):
        raise TypeError(f"dist must be a Geometric, got {type(dist).__name__}")
    n = va.check_int("n", n, lo=1)
    key = va.check_key("key", key)
    return np.asarray(dist.sample(key, (n,)))


@dataclasses.dataclass(frozen=True)
class Failure:
    """When a failure happens and what it loses.

    Exactly one of ``fraction`` (a uniformly random fraction ``p`` of the blocks is lost,
    Thm 5.4.2) and ``servers`` (exactly the blocks of ``k`` uniformly random failed
    servers); exactly one of ``at`` (a fixed iteration ``T``) and ``geometric`` (a
    :class:`Geometric` failure time, drawn per trial). ``fraction``, ``servers`` and
    ``at`` may be traced (varied across vmapped trials).
    """

    fraction: Any = None
    servers: Any = None
    at: Any = None
    geometric: Geometric | None = None

    def __post_init__(self):
        if (self.fraction is None) == (self.servers is None):
            raise ValueError(
                f"give exactly one of fraction (of blocks) and servers (count); got "
                f"fraction={self.fraction!r}, servers={self.servers!r}"
            )
        if (self.at is None) == (self.geometric is None):
            raise ValueError(
                f"give exactly one of at (iteration) and geometric (Geometric); got "
                f"at={self.at!r}, geometric={self.geometric!r}"
            )
        for nm in ("fraction", "servers", "at"):
            v = getattr(self, nm)
            if v is not None and not tu.is_traced(v):
                if nm == "fraction":
                    va.check_real("fraction", v, lo=0.0, hi=1.0)
                else:
                    va.check_integer_value(nm, v, lo=0)
                if np.ndim(v) != 0:
                    raise ValueError(f"{nm} must be a scalar, got shape {np.shape(v)}")
        if self.geometric is not None and not isinstance(self.geometric, Geometric):
            raise TypeError(f"geometric must be a Geometric, got {type(self.geometric).__name__}")

    def replace(self, **changes: Any) -> "Failure":
        return dataclasses.replace(self, **changes)

    def time(self, key: jax.Array) -> jax.Array:
        """The failure iteration ``T`` (int32)."""
        if self.at is not None:
            return jnp.asarray(self.at, jnp.int32)
        return self.geometric.sample(key)

    def events(self) -> tuple[tuple[str, int], ...]:
        """The concrete iteration of the failure (``failure.at``, or the earliest a
        :class:`Geometric` time can take) for :attr:`scarjax.hooks.Hook.events`."""
        if _concrete(self.at):
            return (("failure.at", int(self.at)),)
        if self.geometric is not None:
            return (("failure.geometric.start", int(self.geometric.start)),)
        return ()

    def check(self, partition: pt.Partition) -> None:
        if not isinstance(partition, pt.Partition):
            raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
        if _concrete(self.servers) and int(self.servers) > partition.num_servers:
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
    """Hook state of :func:`scar`: the running checkpoint, the failure iteration and the
    blocks that failure loses (drawn at ``init``)."""

    checkpoint: ck.CheckpointState
    fail_at: jax.Array
    lost: jax.Array


def scar(
    partition: pt.Partition,
    *,
    checkpoint: ck.Checkpoint | None = None,
    failure: Failure | None = None,
    recovery: str = "partial",
    after_recovery: Callable[[Any, Any], Any] | None = None,
    name: str = "scar",
) -> Hook:
    """SCAR as one write-point hook: a running checkpoint, a failure and its recovery
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
        counts from the recovered assignments.
      name: the hook's name in ``trace.delta``.

    The hook's change of the parameters at ``T`` is recorded by the loop as ``δ_T``.
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
        k_t, k_lost = jax.random.split(key)
        if failure is None:
            fail_at, lost = jnp.asarray(-1, jnp.int32), jnp.zeros((B,), bool)
        else:
            fail_at, lost = failure.time(k_t), lost_blocks(failure, partition, k_lost)
        return ScarState(ck.init(state, partition), fail_at, lost)

    def apply(state, hstate, ctx):
        if failure is not None:
            fire = ctx.step == hstate.fail_at
            rec = recover(recovery, state, hstate.checkpoint.saved, partition, hstate.lost)
            rec = apply_after_recovery(after_recovery, rec, state, ctx.algorithm.data)
            state = jax.tree.map(lambda a, b: jnp.where(fire, a, b), rec, state)
        ckpt, _ = ck.step(spec, hstate.checkpoint, state, partition, ctx.step, ctx.key, ctx.algorithm.norm)
        return state, hstate._replace(checkpoint=ckpt)

    events = failure.events() if failure is not None else ()
    return Hook(point="write", init=init_fn, apply=apply, name=name, events=events)


def failure(
    partition: pt.Partition,
    failure: Failure,
    *,
    recovery: str = "partial",
    after_recovery: Callable[[Any, Any], Any] | None = None,
    name: str = "failure",
) -> Hook:
    """A failure recovered from the initial state ``w⁽⁰⁾`` (no periodic checkpoints):
    ``scar(partition, checkpoint=None, failure=failure, ...)``."""
    return scar(partition, checkpoint=None, failure=failure, recovery=recovery,
                after_recovery=after_recovery, name=name)
