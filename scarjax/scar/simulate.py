"""The Monte-Carlo failure experiment of thesis Secs 5.5.3–5.5.4, as one vmapped program.

:func:`simulate_failures` is a *driver* on top of the concepts of
:mod:`scarjax.scar.faults` (failures and their recovery, the :func:`~scarjax.scar.faults.scar`
hook) and :mod:`scarjax.scar.checkpoint`: for ``trials`` keys it trains with the SCAR hook,
fails at ``T``, recovers from the running checkpoint and continues, and measures the
rework (Eq 5.4) against the no-failure run with the same key. A ``grid`` of failure and
checkpoint parameters (what is lost, ``r``, ``C``, the strategy, the recovery) is swept in
the same program through :func:`scarjax.run_trials`' ``hook_args``: one compilation
serves the whole grid, and repeated calls with the same spec objects reuse it.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import schedules as sch
from scarjax.core import Algorithm
from scarjax.rework import calibrate_near, rework_cost
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults as F
from scarjax.scar import partition as pt
from scarjax.trials import run_trials

__all__ = ["FailureResult", "simulate_failures", "GRID_KEYS"]


class FailureResult(NamedTuple):
    """Result of :func:`simulate_failures`.

    Attributes:
      rework: ``[*grid_shape, trials]`` rework in iterations (Eq 5.4, loss criterion;
        ``inf`` if a run never reaches ε).
      delta: ``[*grid_shape, trials]`` ‖δ_T‖ of the recovery (algorithm's norm).
      fail_at: ``[trials]`` failure iterations (shared across grid points: common random
        numbers).
      eps: ``[trials]`` ε per trial (the baseline reaches it for good at ``converge_at``
        or the first iteration after where that is possible, :func:`scarjax.rework.calibrate_near`).
      grid: ``{name: values}`` of the grid axes, in order.
      baseline_loss: ``[trials, steps + 1]``.
      loss: ``[*grid_shape, trials, steps + 1]``.
    """

    rework: np.ndarray
    delta: np.ndarray
    fail_at: np.ndarray
    eps: np.ndarray
    grid: dict
    baseline_loss: np.ndarray
    loss: np.ndarray


#: The parameters :func:`simulate_failures` can sweep (its ``grid`` keys).
GRID_KEYS = ("fraction", "servers", "ckpt_fraction", "ckpt_period", "strategy", "recovery")


@dataclasses.dataclass(frozen=True, eq=False)
class _Factory:
    """The per-trial hook factory of :func:`simulate_failures`: one trial's ``hook_args``
    (its failure time ``'at'`` and its grid values) -> the :func:`~scarjax.scar.faults.scar`
    hook.

    ``run_trials`` compiles once per factory (a static argument: hashed and compared), so
    two factories are equal when they hold the *same* spec objects (compared with ``is``;
    the callback likewise) and the same default recovery: repeated calls with the same
    specs reuse the compiled program. The specs are held strongly, so while a factory (or
    the compiled program keyed on it) is alive their identities cannot be reused by other
    objects.
    """

    partition: pt.Partition
    failure: F.Failure
    checkpoint: ck.Checkpoint | None
    recovery: str
    after_recovery: Callable[[Any, Any], Any] | None

    def _identity(self) -> tuple:
        return (id(self.partition), id(self.failure), id(self.checkpoint), self.recovery,
                id(self.after_recovery))

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, _Factory):
            return NotImplemented
        return (self.partition is other.partition and self.failure is other.failure
                and self.checkpoint is other.checkpoint and self.recovery == other.recovery
                and self.after_recovery is other.after_recovery)

    def __hash__(self) -> int:
        return hash(self._identity())

    def __call__(self, a: dict) -> Any:
        f = self.failure.replace(when=sch.at(a["at"]))
        if "fraction" in a:
            f = f.replace(fraction=a["fraction"])
        if "servers" in a:
            f = f.replace(servers=a["servers"])
        c = self.checkpoint
        if "ckpt_fraction" in a:
            c = c.replace(fraction=a["ckpt_fraction"])
        if "ckpt_period" in a:
            c = c.replace(period=a["ckpt_period"])
        if "strategy" in a:
            c = c.replace(strategy=a["strategy"])
        return F.scar(self.partition, checkpoint=c, failure=f, recovery=a.get("recovery", self.recovery),
                      after_recovery=self.after_recovery, name="scar")


def simulate_failures(
    algorithm: Any,
    partition: pt.Partition,
    *,
    trials: int,
    steps: int,
    converge_at: int,
    failure: F.Failure,
    checkpoint: ck.Checkpoint | None = None,
    recovery: str = "partial",
    grid: dict[str, Sequence] | None = None,
    key: jax.Array | int = 0,
    after_recovery: Callable[[Any, Any], Any] | None = None,
    baseline: Any = None,
    chunk_size: int | None = None,
    progress: bool | None = None,
) -> FailureResult:
    """Train to ``T``, fail, recover from a running checkpoint, continue; measure rework.

    For ``trials`` keys (trial ``i`` uses the same key, hence the same initialisation and
    minibatches, at every grid point and in the baseline), the failure time ``T`` is
    drawn on the host, one per trial, from ``failure.when`` (a
    :func:`scarjax.schedules.geometric` schedule: ``when.sample(k_time, (trials,))`` with
    ``k_time = split(key)[1]``), or is the one fixed step of ``failure.when`` (an int
    ``T``, ``schedules.at(T)``); trial ``i`` runs ``scar(partition, checkpoint,
    failure.replace(when=at(T_i)), recovery)`` (``T_i`` passed in ``hook_args``, so one
    program serves every trial) and is compared with a no-failure run:
    ε is calibrated per trial so that the baseline's full-data loss reaches it for good at
    iteration ``converge_at`` (or the first iteration after where that is possible,
    :func:`scarjax.rework.calibrate_near`), and the rework is the
    difference in iterations to reach ε (:func:`scarjax.rework_cost`).

    Args:
      grid: optional ``{name: values}`` swept inside the same vmapped program, the
        product of the axes times ``trials`` being one ``vmap``: ``'fraction'`` or
        ``'servers'`` (what the failure loses), ``'ckpt_fraction'`` (``r``),
        ``'ckpt_period'`` (``C``), ``'strategy'`` (names from
        :data:`scarjax.scar.checkpoint.STRATEGIES`; the spec's own strategy is then ignored)
        and ``'recovery'`` (``'partial'``/``'full'``, overriding ``recovery``). One
        compilation serves the whole grid.
      baseline: the no-failure runs to reuse: ``(final_state, trace)`` of
        ``run_trials(algorithm, None, steps, keys)`` or their loss ``[trials, steps + 1]``
        (e.g. ``FailureResult.baseline_loss`` of an earlier call with the same key).
      chunk_size: trials per compiled program, over the whole grid (``grid points x
        trials`` runs; passed to :func:`scarjax.run_trials`, which pads the last chunk so
        that one compilation serves all): with several chunks a long sweep shows its
        progress chunk by chunk. Default: ``run_trials``' memory-budget chunks (usually one).
      progress: ``run_trials``' ``tqdm`` bar over the runs (default: with several chunks,
        on a terminal, unless ``SCARJAX_NO_PROGRESS`` is set).

    Returns:
      :class:`FailureResult`.
    """
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    if not isinstance(failure, F.Failure):
        raise TypeError(f"failure must be a Failure, got {type(failure).__name__}")
    for nm, v, lo in (("trials", trials, 1), ("steps", steps, 2), ("converge_at", converge_at, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{nm} must be an int >= {lo}, got {v!r}")
    if converge_at >= steps:
        raise ValueError(f"converge_at must be < steps={steps}, got {converge_at}")
    va.check_choice("recovery", recovery, F.RECOVERIES)
    if not isinstance(partition, pt.Partition):
        raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    if checkpoint is not None and not isinstance(checkpoint, ck.Checkpoint):
        raise TypeError(f"checkpoint must be a Checkpoint or None, got {type(checkpoint).__name__}")
    if grid is not None and not isinstance(grid, dict):
        raise TypeError(f"grid must be a dict {{name: values}} or None, got {type(grid).__name__}")
    grid = dict(grid or {})
    for g in grid:
        if g not in GRID_KEYS:
            raise ValueError(f"grid keys must be among {GRID_KEYS}, got {g!r}")
    if "fraction" in grid and failure.fraction is None:
        raise ValueError("grid 'fraction' needs a Failure with fraction=... (not servers=)")
    if "servers" in grid and failure.servers is None:
        raise ValueError("grid 'servers' needs a Failure with servers=... (not fraction=)")
    if ("ckpt_fraction" in grid or "ckpt_period" in grid) and checkpoint is None:
        raise ValueError("grid 'ckpt_fraction'/'ckpt_period' needs a checkpoint spec")
    if "strategy" in grid and checkpoint is None:
        raise ValueError("grid 'strategy' needs a checkpoint spec")
    axes = {k: np.asarray(v) for k, v in grid.items()}
    labels = {}
    for k, choices in (("strategy", ck.STRATEGIES), ("recovery", F.RECOVERIES)):
        if k in axes:
            bad = [x for x in axes[k].tolist() if x not in choices]
            if bad:
                raise ValueError(f"grid[{k!r}] values must be among {choices}, got {bad}")
            labels[k] = axes[k]
            axes[k] = np.asarray([choices.index(x) for x in axes[k].tolist()], np.int32)
    for k, v in axes.items():
        if v.ndim != 1 or v.size == 0:
            raise ValueError(f"grid[{k!r}] must be a non-empty 1-D sequence, got shape {v.shape}")
        # Validate every concrete grid value through the specs' own checks.
        for x in v.tolist():
            if k == "fraction":
                failure.replace(fraction=x)
            elif k == "servers":
                failure.replace(servers=int(x)).check(partition)
            elif k == "ckpt_fraction":
                checkpoint.replace(fraction=x)
            elif k == "ckpt_period":
                checkpoint.replace(period=int(x))
    key = va.check_key("key", key)
    k_trials, k_time = jax.random.split(key)
    keys = jax.random.split(k_trials, trials)
    fail_at = _failure_times(failure.when, k_time, trials, steps)
    if np.any(fail_at >= converge_at):
        raise ValueError(
            f"failure times must be < converge_at={converge_at} (got max {int(fail_at.max())}); "
            "use failure when=schedules.geometric(..., stop=converge_at)"
        )
    if baseline is None:
        base_loss = np.asarray(run_trials(algorithm, None, steps, keys, chunk_size=chunk_size,
                                          progress=progress)[1].loss)
    elif isinstance(baseline, tuple):
        base_loss = np.asarray(baseline[1].loss)
    else:
        base_loss = np.asarray(baseline)
    if base_loss.shape != (trials, steps + 1):
        raise ValueError(f"baseline loss must have shape {(trials, steps + 1)}, got {base_loss.shape}")
    eps = calibrate_near(base_loss, converge_at)

    names = list(axes)
    shape = tuple(len(axes[n]) for n in names)
    combos = list(itertools.product(*[range(s) for s in shape])) or [()]
    G = len(combos)
    args = {n: np.repeat(np.asarray([axes[n][c[i]] for c in combos]), trials) for i, n in enumerate(names)}
    args["at"] = np.tile(fail_at, G)
    all_keys = jnp.concatenate([keys] * G)

    factory = _Factory(partition, failure, checkpoint, recovery, after_recovery)
    hook_args = {k: jnp.asarray(v) for k, v in args.items()}
    _, trace = run_trials(algorithm, factory, steps, all_keys, hook_args=hook_args, chunk_size=chunk_size,
                          progress=progress)
    loss = np.asarray(trace.loss).reshape(shape + (trials, steps + 1))
    delta = np.asarray(trace.delta["scar"]).max(axis=-1).reshape(shape + (trials,))
    rework = rework_cost(loss, base_loss, eps, metric="loss")
    return FailureResult(
        rework=rework,
        delta=delta,
        fail_at=fail_at,
        eps=np.asarray(eps),
        grid={n: labels.get(n, axes[n]) for n in names},
        baseline_loss=base_loss,
        loss=loss,
    )


def _failure_times(when: sch.Schedule, key: jax.Array, trials: int, steps: int) -> np.ndarray:
    """``int32[trials]``: one failure iteration per trial, drawn on the host.

    A :func:`~scarjax.schedules.geometric` schedule draws ``when.sample(key, (trials,))``
    (exactly the draws of its ``init``, so a trial's ``T`` is what the schedule would
    draw from that key). Any other schedule must fire exactly once in ``[0, steps)`` at a
    step that does not depend on the key (an int ``T``, ``schedules.at(T)``): the
    experiment measures the rework of one failure per trial."""
    if isinstance(when, sch.Geometric):
        return np.asarray(when.sample(key, (trials,)), np.int32)
    ks = jnp.arange(steps, dtype=jnp.int32)

    def fired(k):
        state = when.init(k)
        return np.asarray(jax.vmap(lambda s: jnp.asarray(when.fires(s, jax.random.fold_in(k, s), state), bool))(ks))

    a, b = (fired(k) for k in jax.random.split(key))
    at = np.flatnonzero(a)
    if at.size != 1 or not np.array_equal(a, b):
        raise ValueError(
            f"failure.when must be schedules.geometric(...) (a failure time drawn per trial) or fire once, "
            f"at a fixed step, in the run (an int T or schedules.at(T)); got {when!r}, which fires at "
            f"{at.tolist()[:8]} in [0, {steps})"
        )
    return np.full((trials,), int(at[0]), np.int32)
