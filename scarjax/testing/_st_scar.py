"""SCAR's objects as hypothesis data (thesis Sec 5.4): failures, partitions, lost blocks,
checkpoints.

* :func:`failures` draws :class:`scarjax.scar.faults.Failure` specs (a uniformly random
  fraction ``p`` of the blocks, or the blocks of ``k`` failed servers, at the iterations
  of a schedule); shrinking goes to the smallest fraction, one server, the earliest step.
* :func:`partitions` draws :class:`PartitionSpec` — a layout (by row, by element, by
  layer, by shard, by column) and a number of servers with a random placement — for a
  given state; a spec is a callable ``state -> Partition``.
* :func:`lost_blocks` draws :class:`LostBlocks` of a built partition: ``round(p·B)``
  uniformly random blocks (Thm 5.4.2's setting), or every block of ``k`` of the ``S``
  servers (Sec 5.4.3).
* :func:`checkpoints` draws :class:`scarjax.scar.checkpoint.Checkpoint` specs (the
  strategy: full, priority, round-robin or random; the fraction ``r`` saved per
  checkpoint; a period ``C`` or the step of a single save).

Every drawn object has a ``describe()`` (words, for counterexamples) and a ``repr`` that is
code replaying it (``faults.Failure(fraction=0.25, when=schedules.at(12))``,
``sst.PartitionSpec('row', num_servers=4, seed=0)``): the drawn failures and checkpoints
are the library's own classes (subclasses adding only these two), so they go straight
into :func:`scarjax.scar.faults.scar`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import numpy as np
from hypothesis import strategies as st

from scarjax import validate as va
from scarjax import schedules
from scarjax.core import State
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults
from scarjax.scar import partition as pt

__all__ = [
    "DrawnFailure",
    "DrawnCheckpoint",
    "PartitionSpec",
    "LostBlocks",
    "failures",
    "partitions",
    "lost_blocks",
    "checkpoints",
    "FAILURE_SCHEDULES",
    "PARTITION_LAYOUTS",
]

#: The ``when`` schedules :func:`failures` can draw (shrinking prefers the first).
FAILURE_SCHEDULES = ("at", "every", "geometric")

#: The layouts :func:`partitions` can draw (shrinking prefers the first).
PARTITION_LAYOUTS = ("row", "element", "layer", "shard", "column")


def _pct(x: float) -> str:
    return f"{100.0 * float(x):.3g}%"


def _ids(ids: Any, limit: int = 12) -> str:
    ids = [int(i) for i in ids]
    if len(ids) <= limit:
        return "[" + ", ".join(map(str, ids)) + "]"
    return "[" + ", ".join(map(str, ids[:limit])) + f", … ({len(ids)} in all)]"


def _when_code(when: schedules.Schedule) -> str:
    # Schedule names of at/every/geometric are their constructor calls.
    return f"schedules.{when.name}"


# --------------------------------------------------------------------------------------
# Failures.


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class DrawnFailure(faults.Failure):
    """A :class:`scarjax.scar.faults.Failure` drawn by :func:`failures`: the same object,
    plus :meth:`~DrawnFailure.describe` and a replayable ``repr``."""

    def describe(self) -> str:
        if self.fraction is not None:
            what = (f"loses a uniformly random {_pct(self.fraction)} of the blocks "
                    f"(fraction {float(self.fraction):.6g})")
        else:
            k = int(self.servers)
            what = f"loses every block of {k} failed server{'s' if k != 1 else ''}"
        return f"{what}, when {self.when.name}"

    def __repr__(self) -> str:
        what = (f"fraction={float(self.fraction)!r}" if self.fraction is not None
                else f"servers={int(self.servers)}")
        return f"faults.Failure({what}, when={_when_code(self.when)})"


def _exact_fractions(denominator: int) -> Any:
    return st.integers(1, denominator).map(lambda j: j / denominator)


@st.composite
def failures(
    draw: Any,
    max_step: int,
    *,
    min_step: int = 0,
    fractions: Any = None,
    servers: int | None = None,
    kinds: Any = None,
    when: Any = ("at",),
) -> DrawnFailure:
    """Failure specs (:class:`scarjax.scar.faults.Failure`) firing in ``[min_step, max_step]``.

    Args:
      max_step, min_step: the window of failure steps (inclusive).
      fractions: a strategy for the lost fraction ``p`` (default: ``j/20`` for
        ``j = 1 … 20``, shrinking to ``0.05``: the smallest failing fraction on that grid).
        Give e.g. ``st.integers(1, B).map(lambda j: j / B)`` for exact block counts.
      servers: the number of servers ``S`` of the partition the failure will hit; when
        given, a failure may instead lose the blocks of ``k`` of them (``k`` in
        ``1 … S``, shrinking to one server). ``None``: fractions only.
      kinds: ``'fraction'`` and/or ``'servers'`` (default: both when ``servers`` is
        given, else ``'fraction'``); ``'servers'`` needs ``servers``.
      when: the schedules to draw, a subset of :data:`FAILURE_SCHEDULES` (default
        ``('at',)``: a single failure at one step, shrinking to ``min_step``). ``'every'``
        repeats from its first step; ``'geometric'`` draws the step per run (Sec 5.5.3)
        in ``[start, max_step]``.

    Shrinks to: a fraction failure (before a server failure), the smallest fraction or
    one server, an ``at`` schedule at the earliest step.
    """
    min_step = va.check_int("min_step", min_step, lo=0)
    max_step = va.check_int("max_step", max_step, lo=min_step)
    if servers is not None:
        servers = va.check_int("servers", servers, lo=1)
    if kinds is None:
        kinds = ("fraction",) if servers is None else ("fraction", "servers")
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if not kinds or any(k not in ("fraction", "servers") for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of ('fraction', 'servers'), got {kinds!r}")
    if "servers" in kinds and servers is None:
        raise ValueError("kinds: 'servers' failures need servers= (the number of servers S)")
    kinds = [k for k in ("fraction", "servers") if k in kinds]
    when = tuple(when) if not isinstance(when, str) else (when,)
    if not when or any(w not in FAILURE_SCHEDULES for w in when):
        raise ValueError(f"when must be a non-empty subset of {FAILURE_SCHEDULES}, got {when!r}")
    kind = draw(st.sampled_from(kinds))
    if kind == "fraction":
        p = float(draw(_exact_fractions(20) if fractions is None else fractions))
        va.check_real("fraction (drawn)", p, lo=0.0, hi=1.0)
        lose = {"fraction": p}
    else:
        lose = {"servers": draw(st.integers(1, servers))}
    sched = draw(st.sampled_from([w for w in FAILURE_SCHEDULES if w in when]))
    start = draw(st.integers(min_step, max_step))
    if sched == "at":
        w = schedules.at(start)
    elif sched == "every":
        k = draw(st.integers(1, max(1, max_step - min_step + 1)))
        w = schedules.every(k, start=start, stop=max_step + 1)
    else:
        rate = draw(st.sampled_from([0.5, 0.25, 0.1, 0.05]))
        w = schedules.geometric(rate, start=start, stop=max_step + 1)
    return DrawnFailure(when=w, **lose)


# --------------------------------------------------------------------------------------
# Partitions.


class PartitionSpec(NamedTuple):
    """How to partition a state: a layout for every params leaf, a number of servers and
    the seed of the random balanced placement of blocks on servers (Sec 5.4.3).

    Calling it builds the :class:`~scarjax.scar.partition.Partition` of a state:
    ``spec(state)`` = ``partition.build(state, layout, num_servers=…, key=seed)``
    (optimizer state shaped like the params is co-located with them). So a spec is what
    the checks' ``partition=`` argument takes (a callable ``state -> Partition``).

    Attributes:
      layout: ``'row'``, ``'element'``, ``'layer'``, ``'column'`` or ``'shard'``.
      num_servers: ``S``.
      seed: the placement seed (``None``: block ``b`` on server ``b mod S``).
      shards: blocks per leaf for ``'shard'`` (ignored otherwise).
    """

    layout: str = "row"
    num_servers: int = 4
    seed: int | None = 0
    shards: int = 2

    def __call__(self, state: Any) -> pt.Partition:
        lay = ("shard", int(self.shards)) if self.layout == "shard" else self.layout
        return pt.build(state, lay, num_servers=int(self.num_servers), key=self.seed)

    build = __call__

    def describe(self, state: Any = None) -> str:
        lay = {"row": "by row (a block per row of every params leaf)",
               "element": "by element (every scalar parameter is a block)",
               "layer": "by layer (every params leaf is a block)",
               "column": "by column (a block per column of every params leaf)",
               "shard": f"by shard ({self.shards} shards of the first axis per leaf)"}.get(
                   self.layout, repr(self.layout))
        place = ("blocks dealt in order" if self.seed is None
                 else f"random balanced placement, seed {self.seed}")
        out = f"{lay} on {self.num_servers} server{'s' if self.num_servers != 1 else ''} ({place})"
        if state is not None:
            out += f": {self(state).num_blocks} blocks"
        return out

    def __repr__(self) -> str:
        extra = f", shards={self.shards}" if self.layout == "shard" else ""
        return (f"sst.PartitionSpec({self.layout!r}, num_servers={self.num_servers}, "
                f"seed={self.seed!r}{extra})")


def _params_shapes(state: Any) -> list[tuple[int, ...]]:
    params = state.params if isinstance(state, State) else state
    return [tuple(np.shape(x)) for x in jax.tree.leaves(params)]


@st.composite
def partitions(
    draw: Any,
    state: Any = None,
    *,
    layouts: Any = ("row", "element", "layer", "shard"),
    num_servers: Any = None,
    seeds: Any = None,
) -> PartitionSpec:
    """Partitions (:class:`PartitionSpec`, a callable ``state -> Partition``) of ``state``.

    Args:
      state: the state (or params pytree, or ``jax.eval_shape`` of one) the specs are for:
        layouts it cannot take (``'column'`` of a leaf with fewer than 2 dims) are
        left out, and shard counts are drawn up to its largest first axis. ``None``:
        no check.
      layouts: a subset of :data:`PARTITION_LAYOUTS` (shrinks to the first).
      num_servers: a strategy for ``S`` (default ``integers(1, 8)``, shrinking to 1).
      seeds: a strategy for the placement seed (default ``integers(0, 2**16)``).

    Build the partition with ``spec(state)``; ``spec.describe(state)`` says it in words.
    """
    layouts = (layouts,) if isinstance(layouts, str) else tuple(layouts)
    if not layouts or any(l not in PARTITION_LAYOUTS for l in layouts):
        raise ValueError(f"layouts must be a non-empty subset of {PARTITION_LAYOUTS}, got {layouts!r}")
    max_rows = 8
    if state is not None:
        shapes = _params_shapes(state)
        if not shapes:
            raise ValueError("state has no params leaves to partition")
        if any(len(s) < 2 for s in shapes):
            layouts = tuple(l for l in layouts if l != "column")
            if not layouts:
                raise ValueError("layouts: 'column' needs every params leaf to have >= 2 dims")
        max_rows = max(max((s[0] for s in shapes if s), default=1), 1)
    layout = draw(st.sampled_from(layouts))
    shards = draw(st.integers(2, max(2, min(max_rows, 8)))) if layout == "shard" else 2
    S = draw(st.integers(1, 8) if num_servers is None else num_servers)
    S = va.check_int("num_servers (drawn)", S, lo=1)
    seed = draw(st.integers(0, 2**16) if seeds is None else seeds)
    return PartitionSpec(layout, S, seed, shards)


# --------------------------------------------------------------------------------------
# Lost blocks.


class LostBlocks(NamedTuple):
    """A set of lost blocks of a partition (what one failure loses).

    Attributes:
      mask: ``bool[num_blocks]`` (a NumPy array): the lost blocks, the ``lost`` argument of
        :func:`scarjax.scar.faults.recover`.
      servers: the failed servers when the blocks were lost with their servers, else ``None``.
      num_servers: ``S`` of the partition.
    """

    mask: np.ndarray
    servers: tuple[int, ...] | None
    num_servers: int

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(int(i) for i in np.flatnonzero(self.mask))

    @property
    def fraction(self) -> float:
        """The fraction of blocks lost: ``|lost| / B`` (``k/S`` in expectation for servers)."""
        return float(np.mean(self.mask))

    def describe(self) -> str:
        B = int(self.mask.size)
        head = f"{len(self.blocks)} of {B} blocks ({_pct(self.fraction)}): {_ids(self.blocks)}"
        if self.servers is None:
            return "uniformly random " + head
        k = len(self.servers)
        servers = f"server{'s' if k != 1 else ''} {_ids(self.servers)} of {self.num_servers}"
        return f"{servers} failed, losing " + head


@st.composite
def lost_blocks(
    draw: Any,
    partition: pt.Partition,
    *,
    kinds: Any = ("fraction", "servers"),
    min_blocks: int = 1,
) -> LostBlocks:
    """Lost-block sets of ``partition`` (a built :class:`~scarjax.scar.partition.Partition`).

    ``'fraction'``: ``j`` blocks (``min_blocks ≤ j ≤ B``) chosen uniformly at random (the
    failure of Thm 5.4.2 with ``p = j/B``); ``'servers'``: every block of ``k`` of the
    ``S`` servers (``1 ≤ k ≤ S``, Sec 5.4.3). Which blocks is drawn from a seed, so large
    partitions cost nothing to draw. Shrinks to: a fraction set (before servers), the
    fewest blocks or one server, the seed 0.
    """
    if not isinstance(partition, pt.Partition):
        raise TypeError(
            f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if not kinds or any(k not in ("fraction", "servers") for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of ('fraction', 'servers'), got {kinds!r}")
    B, S = partition.num_blocks, partition.num_servers
    min_blocks = va.check_int("min_blocks", min_blocks, lo=0, hi=B)
    kind = draw(st.sampled_from(kinds))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "fraction":
        j = draw(st.integers(min_blocks, B))
        mask = np.zeros(B, bool)
        mask[rng.choice(B, j, replace=False)] = True
        return LostBlocks(mask, None, S)
    k = draw(st.integers(1, S))
    failed = np.sort(rng.choice(S, k, replace=False))
    mask = np.isin(np.asarray(partition.server_of), failed)
    return LostBlocks(mask, tuple(int(s) for s in failed), S)


# --------------------------------------------------------------------------------------
# Checkpoints.


@dataclasses.dataclass(frozen=True, eq=False, repr=False)
class DrawnCheckpoint(ck.Checkpoint):
    """A :class:`scarjax.scar.checkpoint.Checkpoint` drawn by :func:`checkpoints`: the same
    object, plus :meth:`~DrawnCheckpoint.describe`, :meth:`~DrawnCheckpoint.save_steps` and a replayable ``repr``."""

    def describe(self) -> str:
        strategy = str(self.strategy).replace("_", "-")
        what = "full checkpoint" if self.strategy == "full" else (
            f"{strategy} checkpoint of {_pct(self.fraction)} of the blocks")
        if self.period is not None:
            n = int(ck.interval(self))
            every = "every iteration" if n == 1 else f"every {n} iterations"
            return f"{what} {every} (period C = {int(self.period)})"
        if self.when is not None:
            return f"{what} when {self.when.name}"
        return f"{what}: never saved (the checkpoint stays at w⁽⁰⁾)"

    def save_steps(self, before: int) -> tuple[int, ...]:
        """The steps ``k < before`` at which a checkpoint is taken (none at ``k = 0``:
        the running checkpoint starts as ``w⁽⁰⁾``). Random ``when`` schedules are
        evaluated with ``jax.random.key(0)``."""
        return save_steps(self, before)

    def __repr__(self) -> str:
        args = [repr(self.strategy), repr(float(self.fraction))]
        if self.period is not None:
            args.append(f"period={int(self.period)}")
        if self.when is not None:
            args.append(f"when={_when_code(self.when)}")
        return f"ck.Checkpoint({', '.join(args)})"


def save_steps(spec: ck.Checkpoint, before: int) -> tuple[int, ...]:
    """The steps ``1 ≤ k < before`` at which ``spec`` takes a checkpoint
    (:func:`scarjax.scar.checkpoint.due`; a ``when`` schedule is initialised and fired
    with ``jax.random.key(0)``)."""
    before = va.check_int("before", before, lo=0)
    if spec.period is None and spec.when is None:
        return ()
    if spec.period is not None and not va.is_traced((spec.fraction, spec.period)):
        # ck.interval on the host: max(1, round(r·C)) in float32.
        n = max(1, int(np.round(np.float32(spec.fraction) * np.float32(spec.period))))
        return tuple(range(n, before, n))
    if spec.when is not None and spec.when.name.startswith("at("):
        return tuple(k for k in sorted(set(spec.when.events)) if 1 <= k < before)
    key = jax.random.key(0)
    state = spec.when.init(key) if spec.when is not None else ()
    ks = np.arange(before, dtype=np.int32)
    fire = jax.vmap(lambda k: ck.due(spec, k, jax.random.fold_in(key, 1), state))(ks)
    return tuple(int(k) for k in ks[np.asarray(fire, bool)])


@st.composite
def checkpoints(
    draw: Any,
    max_step: int = 20,
    *,
    strategies: Any = ck.STRATEGIES,
    fractions: Any = None,
    periods: Any = None,
    forms: Any = ("period", "at"),
) -> DrawnCheckpoint:
    """Checkpoint specs (:class:`scarjax.scar.checkpoint.Checkpoint`, Sec 5.4.2).

    Args:
      max_step: the largest period ``C`` / save step drawn.
      strategies: a subset of :data:`scarjax.scar.checkpoint.STRATEGIES` (shrinks to the
        first: ``'full'``).
      fractions: a strategy for ``r`` (default ``j/8``, ``j = 1 … 8``; always 1 for
        ``'full'``), shrinking to the smallest.
      periods: a strategy for ``C`` (default ``integers(1, max_step)``).
      forms: ``'period'`` (a checkpoint of ``r`` of the blocks every ``max(1, round(rC))``
        iterations) and/or ``'at'`` (one checkpoint at a step ``s`` in ``1 … max_step``).
    """
    max_step = va.check_int("max_step", max_step, lo=1)
    strategies = (strategies,) if isinstance(strategies, str) else tuple(strategies)
    if not strategies or any(s not in ck.STRATEGIES for s in strategies):
        raise ValueError(f"strategies must be a non-empty subset of {ck.STRATEGIES}, got {strategies!r}")
    forms = (forms,) if isinstance(forms, str) else tuple(forms)
    if not forms or any(f not in ("period", "at") for f in forms):
        raise ValueError(f"forms must be a non-empty subset of ('period', 'at'), got {forms!r}")
    strategy = draw(st.sampled_from(strategies))
    r = 1.0 if strategy == "full" else float(draw(_exact_fractions(8) if fractions is None else fractions))
    form = draw(st.sampled_from(forms))
    if form == "period":
        C = draw(st.integers(1, max_step) if periods is None else periods)
        return DrawnCheckpoint(strategy, r, period=C)
    return DrawnCheckpoint(strategy, r, when=schedules.at(draw(st.integers(1, max_step))))
