"""Partial vs full recovery on the user's algorithm and partition (thesis Sec 5.4.1,
Thms 5.4.1 and 5.4.2).

At a failure at iteration ``t`` the stored state is ``w = y⁽ᵗ⁾`` and the running checkpoint
holds ``z`` (saved at some ``s < t``, or SCAR's running checkpoint whose blocks were saved
at different iterations). Full recovery reloads everything, ``δ = z − w``; partial recovery
reloads the lost blocks ``S`` only, ``δ' = (z − w)·1_S``.

* :func:`check_partial_recovery` — Thm 5.4.1: ``‖δ'‖ ≤ ‖δ‖``, and the recovery leaves every
  block that was not lost exactly as it was (parameters and co-located optimizer state)
  and sets every lost one to its saved value;
* :func:`check_expected_perturbation` — Thm 5.4.2: losing a uniformly random fraction
  ``p`` of the blocks (or the blocks of ``k`` of ``S`` servers, ``p = k/S``),
  ``E‖δ'‖² = p‖δ‖²`` — a z-test with a stated false-alarm rate.

Each draws, per hypothesis example, the failure step ``t``, the checkpoint (a consistent
copy saved at ``s < t`` by default, or a running checkpoint from a strategy of
:func:`~scarjax.testing.strategies.checkpoints`), and what is lost (a fraction ``j/B`` of the
``B`` blocks, or ``k`` of the ``S`` servers); runs a batch of trials of the user's
algorithm in one :func:`scarjax.run_trials` call to get ``w`` and ``z`` of every trial;
recovers with the user's ``recover`` (default: the library's partial recovery,
:func:`scarjax.scar.faults.recover`) on the user's partition; and asserts. The
single-case assertions :func:`assert_partial_recovery` / :func:`assert_expected_perturbation`
take states directly (for a user's own ``@given`` test, and for the replay line of a
counterexample, with :func:`recovery_case`).

A counterexample's replay lines name your objects by the checks' argument names
(``algorithm``, ``partition``, ``recover``, ``lost_blocks``) and the usual imports::

    import jax
    from scarjax import schedules, testing as sxt
    from scarjax.scar import checkpoint as ck, faults
    from scarjax.testing import strategies as sst
"""

from __future__ import annotations

import dataclasses
import functools
import math
import statistics
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from scarjax import validate as va
from scarjax import schedules
from scarjax import tree as tu
from scarjax.core import Algorithm, State, run
from scarjax.hooks import Hook
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults
from scarjax.scar import partition as pt
from scarjax.testing import _harness
from scarjax.testing._st_scar import DrawnCheckpoint, DrawnFailure, PartitionSpec, failures, save_steps
from scarjax.trials import run_trials
from scarjax.trials import trials_mesh

__all__ = [
    "RecoveryCase",
    "recovery_case",
    "PartialRecoveryCase",
    "assert_partial_recovery",
    "PartialRecoveryResult",
    "check_partial_recovery",
    "ExpectedPerturbationCase",
    "assert_expected_perturbation",
    "ExpectedPerturbationResult",
    "check_expected_perturbation",
    "DEFAULT_PARTITION",
]

#: The partition the checks use when none is given: rows of every params leaf on 4
#: servers with a random balanced placement (seed 0), optimizer state co-located.
DEFAULT_PARTITION = PartitionSpec("row", num_servers=4, seed=0)

_LOST_SALT = 1  # trial i loses the blocks drawn from fold_in(key_i, 1)
_MC_SALT = 2  # and the Thm 5.4.2 failures from fold_in(key_i, 2)
_NORM_RTOL = 1e-5  # float32 rounding of ‖δ'‖ vs ‖δ‖ (the same squares summed in another order)
_MEAN_RTOL = 1e-4  # float32 rounding of the Monte-Carlo mean of ‖δ'‖² vs p‖δ‖²


# --------------------------------------------------------------------------------------
# Capturing y⁽ᵗ⁾ and the checkpoint inside the compiled loop.


class _Snap(NamedTuple):
    saved: State  # the checkpoint z at the failure step
    state: State  # y⁽ᵗ⁾


@functools.lru_cache(maxsize=64)
def _capture_callables(init: Callable, update: Callable, loss: Callable) -> tuple[Callable, ...]:
    # Cached per user callables, so the wrapped algorithm (a static argument of the
    # compiled loop) is the same object across check calls and reuses the program.
    def c_init(key, data):
        s = State(*init(key, data))
        return State(s.params, (s.aux, _Snap(s, s)))

    def c_update(view, state, data, key):
        delta, new = update(view, State(state.params, state.aux[0]), data, key)
        return delta, State(State(*new).params, (State(*new).aux, state.aux[1]))

    def c_loss(state, data):
        return loss(State(state.params, state.aux[0]), data)

    return c_init, c_update, c_loss


def _capturing(algorithm: Algorithm) -> Algorithm:
    """The same algorithm whose state also carries a :class:`_Snap` (in ``aux``), written
    by the capture hooks: the same iterates, keys and minibatches."""
    i, u, l = _capture_callables(algorithm.init, algorithm.update, algorithm.loss)
    return algorithm.replace(init=i, update=u, loss=l, grad=None, apply=None, shard=None)


def _inner(state: State) -> State:
    return State(state.params, state.aux[0])


def _snapshot_hooks(a: dict) -> Hook:
    """Capture ``y⁽ˢ⁾`` (a consistent checkpoint of the whole state, ``s = 0``: ``w⁽⁰⁾``)
    and ``y⁽ᵗ⁾`` (``a = {'s', 't'}``, traced). Module-level: one program per algorithm."""

    def apply(state, hstate, ctx):
        aux, snap = state.aux
        inner = State(state.params, aux)
        snap = _Snap(tu.tree_where(ctx.step == a["s"], inner, snap.saved),
                     tu.tree_where(ctx.step == a["t"], inner, snap.state))
        return State(state.params, (aux, snap)), hstate

    return Hook(point="write", init=lambda state, key: (), apply=apply, name="capture")


def _partition_key(partition: pt.Partition) -> tuple:
    leaves, treedef = jax.tree.flatten(partition.blocks)
    arrays = [np.asarray(x) for x in leaves] + [np.asarray(partition.server_of)]
    return (treedef, partition.num_blocks, partition.num_servers,
            tuple((a.shape, a.dtype.str, a.tobytes()) for a in arrays))


@dataclasses.dataclass(frozen=True, eq=False)
class _RunningHooks:
    """Keep SCAR's running checkpoint (``a = {'t', 'strategy', 'fraction', 'saves'}``,
    traced: the strategy index, ``r`` and the save steps padded with ``-1``) and capture
    it with ``y⁽ᵗ⁾`` at the failure step, before that step's checkpoint (Sec 5.4.2: a
    failure is handled first)."""

    partition: pt.Partition

    # Equal for equal partitions (by content): the compiled loop (keyed on this static
    # factory) is reused by every check call on the same algorithm and partition.
    @functools.cached_property
    def _key(self) -> tuple:
        return _partition_key(self.partition)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _RunningHooks) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __call__(self, a: dict) -> Hook:
        part = self.partition
        spec = ck.Checkpoint(a["strategy"], a["fraction"], when=schedules.steps(a["saves"]))

        def init(state, key):
            return ck.init(_inner(state), part, spec, key)

        def apply(state, ckpt, ctx):
            aux, snap = state.aux
            inner = State(state.params, aux)
            at_t = ctx.step == a["t"]
            snap = _Snap(tu.tree_where(at_t, ckpt.saved, snap.saved), tu.tree_where(at_t, inner, snap.state))
            ckpt, _ = ck.step(spec, ckpt, inner, part, ctx.step, ctx.key, ctx.algorithm.norm)
            return State(state.params, (aux, snap)), ckpt

        return Hook(point="write", init=init, apply=apply, name="capture")


def _check_algorithm(algorithm: Any) -> Algorithm:
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    return algorithm


def _init_state(algorithm: Algorithm) -> State:
    return State(*algorithm.init(jax.random.key(0), algorithm.data))


def _resolve_partition(partition: Any, state: State) -> tuple[pt.Partition, str, str]:
    """``(Partition, words, code)`` for the checks' ``partition=`` argument."""
    if partition is None:
        partition = DEFAULT_PARTITION
    if isinstance(partition, pt.Partition):
        pt.check_matches(partition, state, "partition")
        part, words, code = partition, "the given partition", "partition"
    elif isinstance(partition, PartitionSpec):
        part, words, code = partition(state), partition.describe(), repr(partition)
    elif callable(partition):
        part = partition(state)
        if not isinstance(part, pt.Partition):
            raise TypeError(
                f"partition(state) must return a scarjax.scar.partition.Partition, got {type(part).__name__}")
        pt.check_matches(part, state, "partition(state)")
        name = getattr(partition, "__name__", type(partition).__name__)
        words, code = f"{name}(state)", "partition"
    else:
        raise TypeError(
            "partition must be None, a scarjax.scar.partition.Partition, a sst.PartitionSpec or a "
            f"callable state -> Partition, got {type(partition).__name__}")
    if isinstance(partition, PartitionSpec):
        return part, f"{words}: {part.num_blocks} blocks", code
    return part, f"{words}: {part.num_blocks} blocks on {part.num_servers} servers", code


def _checkpoint_args(checkpoint: Any, t: int, length: int) -> tuple[dict, str]:
    """Hook args and words for a checkpoint: an int ``s`` (a consistent copy at ``s``) or
    a :class:`~scarjax.scar.checkpoint.Checkpoint` (SCAR's running checkpoint)."""
    if isinstance(checkpoint, ck.Checkpoint):
        saves = [k for k in save_steps(checkpoint, t)]
        if not isinstance(checkpoint.strategy, str):
            raise ValueError("checkpoint.strategy must be a name (concrete), got a traced value")
        arr = np.full((max(length, 1),), -1, np.int32)
        arr[: len(saves)] = saves
        words = checkpoint.describe() if isinstance(checkpoint, DrawnCheckpoint) else repr(checkpoint)
        shown = ", ".join(map(str, saves)) if saves else "none (the checkpoint is w⁽⁰⁾)"
        return ({"t": np.int32(t), "strategy": np.int32(ck.STRATEGIES.index(checkpoint.strategy)),
                 "fraction": np.float32(checkpoint.fraction), "saves": arr},
                f"{words}; saves before the failure at steps: {shown}")
    s = va.check_int("checkpoint (the step s of a consistent checkpoint)", checkpoint, lo=0)
    if s >= t:
        raise ValueError(f"checkpoint: the step s of the checkpoint must be < t={t}, got {s}")
    words = ("w⁽⁰⁾ (no checkpoint saved before the failure)" if s == 0
             else f"a consistent copy of the whole state saved at step {s}")
    return {"s": np.int32(s), "t": np.int32(t)}, words


def _checkpoint_code(checkpoint: Any) -> str:
    return repr(checkpoint) if isinstance(checkpoint, ck.Checkpoint) else str(int(checkpoint))


class RecoveryCase(NamedTuple):
    """What a failure at ``t`` meets: the state ``y⁽ᵗ⁾``, the checkpoint's saved copy and
    the partition (:func:`recovery_case`)."""

    state: State
    saved: State
    partition: pt.Partition


def recovery_case(
    algorithm: Algorithm,
    key: Any,
    *,
    t: int,
    checkpoint: Any = 0,
    partition: Any = None,
) -> RecoveryCase:
    """Run ``algorithm`` (``scarjax.run`` with ``key``) to the failure step ``t`` and return
    the state ``y⁽ᵗ⁾`` there, the checkpoint and the partition: what the checks recover
    from (their replay lines call it with the failing trial's key).

    Args:
      t: the failure step (``>= 1``).
      checkpoint: an int ``s < t``: a consistent copy of the whole state saved at step
        ``s`` (``0``: ``w⁽⁰⁾``); or a :class:`scarjax.scar.checkpoint.Checkpoint`: SCAR's
        running checkpoint kept with it on the partition until ``t`` (Sec 5.4.2).
      partition: a :class:`~scarjax.scar.partition.Partition`, a
        :class:`~scarjax.testing.strategies.PartitionSpec` or a callable ``state ->
        Partition`` (called on ``algorithm.init(jax.random.key(0), data)``); ``None``:
        :data:`DEFAULT_PARTITION`.
    """
    algorithm = _check_algorithm(algorithm)
    t = va.check_int("t", t, lo=1)
    part, _, _ = _resolve_partition(partition, _init_state(algorithm))
    args, _ = _checkpoint_args(checkpoint, t, t + 1)
    hooks = _RunningHooks(part) if "saves" in args else _snapshot_hooks
    final, _ = run(_capturing(algorithm), hooks, t + 1, key, hook_args=args)
    snap = final.aux[1]
    return RecoveryCase(snap.state, snap.saved, part)


# --------------------------------------------------------------------------------------
# Thm 5.4.1: one case.


def _default_recover(state, saved, partition, lost):
    return faults.recover("partial", state, saved, partition, lost)


def _as_state(x: Any, like: State, name: str) -> State:
    if isinstance(x, tuple) and not isinstance(x, State) and len(x) == 2:
        x = State(*x)
    va.check_tree_like(name, x, like, "the state")
    return x


def _entry_ok_np(rec: np.ndarray, expected: np.ndarray, tol: float) -> np.ndarray:
    rec64, exp64 = rec.astype(np.float64), expected.astype(np.float64)
    same = (rec == expected.astype(rec.dtype)) | (np.isnan(rec64) & np.isnan(exp64))
    if tol > 0:
        same = same | (np.abs(rec64 - exp64) <= tol)
    return same


@functools.lru_cache(maxsize=32)
def _jit_recover(recover: Callable) -> Callable:
    """The recovery under test, compiled once (the only program per recovery)."""

    def fn(state, saved, partition, lost):
        rec = recover(state, saved, partition, lost)
        return _as_state(rec, state, "recover(state, saved, partition, lost)")

    return jax.jit(fn)


@functools.lru_cache(maxsize=32)
def _jit_norms(norm: Callable) -> Callable:
    """``(‖δ‖, ‖δ'‖)``: full recovery ``δ = saved − state`` and the recovery's ``δ'``, in ``norm``."""

    def fn(state, saved, rec):
        full = jax.tree.map(lambda z, w: z.astype(w.dtype), saved.params, state.params)
        return norm(tu.tree_sub(full, state.params)), norm(tu.tree_sub(rec.params, state.params))

    return jax.jit(fn)


def _finite(tree: Any) -> bool:
    return all(bool(np.all(np.isfinite(x))) for x in jax.tree.leaves(tree)
               if np.issubdtype(np.asarray(x).dtype, np.inexact))


def _host_case(state, saved, rec, partition, lost, norm, include_aux, tol) -> dict:
    """Everything Thm 5.4.1's check needs about one recovery (NumPy, on the host): the
    norms, and per block whether a lost block was not reloaded or an unlost one changed."""
    B = partition.num_blocks
    lost = np.asarray(lost, bool)
    state, saved, rec = (jax.tree.map(np.asarray, t) for t in (state, saved, rec))
    d, dp = (float(np.asarray(x)) for x in _jit_norms(norm)(state, saved, rec))
    bad = np.zeros(B + 1, bool)
    for (path, x), z, r, i in zip(jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(saved),
                                  jax.tree.leaves(rec), jax.tree.leaves(partition.blocks)):
        if not include_aux and jax.tree_util.keystr(path).startswith(".aux"):
            continue
        i = np.broadcast_to(np.asarray(i), x.shape)
        lost_e = np.where(i >= 0, lost[np.clip(i, 0, None)], False)
        wrong = ~_entry_ok_np(r, np.where(lost_e, z.astype(x.dtype), x), tol)
        if wrong.any():
            bad[np.unique(np.where(i[wrong] < 0, B, i[wrong]))] = True
    return {
        "d": d, "dp": dp, "lost": lost,
        "unlost_bad": bad[:B] & ~lost, "lost_bad": bad[:B] & lost, "never_bad": bool(bad[B]),
        "finite_in": _finite(state.params) and _finite(saved.params), "finite_out": _finite(rec.params),
    }


def _verdict(stats: dict) -> str | None:
    """The failure of one case (host, unbatched stats), or ``None``."""
    d, dp = float(stats["d"]), float(stats["dp"])
    if not bool(stats["finite_in"]):
        return "diverged"
    if not bool(stats["finite_out"]):
        return "nonfinite"
    if not (math.isfinite(dp) and math.isfinite(d)):
        return "overflow"
    if dp > d * (1 + _NORM_RTOL) + 1e-12:
        return "norm"
    if bool(np.any(stats["unlost_bad"])) or bool(stats["never_bad"]):
        return "unlost"
    if bool(np.any(stats["lost_bad"])):
        return "lost"
    return None


_TITLES = {
    "diverged": "Thm 5.4.1: the algorithm diverged (non-finite state or checkpoint before the failure)",
    "nonfinite": "Thm 5.4.1: the partial recovery produced a non-finite state (NaN/inf)",
    "overflow": "Thm 5.4.1: ‖δ‖ or ‖δ'‖ is not finite (overflow) although the states are finite",
    "norm": "Thm 5.4.1: partial recovery perturbs more than full recovery (‖δ'‖ > ‖δ‖)",
    "unlost": "Thm 5.4.1 (Sec 5.4.1): the partial recovery changed a block that was not lost",
    "lost": "Thm 5.4.1 (Sec 5.4.1): the partial recovery did not reload a lost block from the checkpoint",
}


def _fmt(x: Any) -> str:
    x = np.asarray(x)
    if x.dtype == bool or np.issubdtype(x.dtype, np.integer):
        return str(x.item())
    return f"{float(x):.6g}"


def _offending(state, saved, rec, partition, lost, include_aux, tol, prefer: str) -> str | None:
    """Words for the first wrong entry (host, NumPy): its block, server, path and values;
    an entry of a ``prefer`` block (``'lost'`` or ``'unlost'``) first."""
    lost = np.asarray(lost, bool)
    server_of = np.asarray(partition.server_of)
    rec = State(*rec) if not isinstance(rec, State) else rec
    found = []
    for (path, x), z, r, i in zip(jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(saved),
                                  jax.tree.leaves(rec), jax.tree.leaves(partition.blocks)):
        where = jax.tree_util.keystr(path)
        if not include_aux and where.startswith(".aux"):
            continue
        x, z, r = np.asarray(x), np.asarray(z), np.asarray(r)
        i = np.broadcast_to(np.asarray(i), x.shape)
        lost_e = np.where(i >= 0, lost[np.clip(i, 0, None)], False)
        exp = np.where(lost_e, z.astype(x.dtype), x)
        bad = ~_entry_ok_np(r, exp, tol)
        for want in (lost_e if prefer == "lost" else ~lost_e, np.ones_like(bad)):
            hits = np.argwhere(bad & want)
            if hits.size:
                idx = tuple(int(v) for v in hits[0])
                b = int(i[idx])
                kind = "unlost" if (b < 0 or not lost[b]) else "lost"
                found.append((kind != prefer, where, idx, b, x[idx], z[idx], r[idx], exp[idx]))
                break
    if not found:
        return None
    _, where, idx, b, x, z, r, e = min(found, key=lambda f: f[0])
    entry = f"state{where}" + (f"[{', '.join(map(str, idx))}]" if idx else "")
    if b < 0:
        block = "an entry that is never lost (block id -1)"
    else:
        block = f"block {b} (server {int(server_of[b])}, {'lost' if lost[b] else 'not lost'})"
    return (f"{block}: {entry} was {_fmt(x)} at the failure, the checkpoint holds {_fmt(z)}, "
            f"the recovery made it {_fmt(r)} (expected {_fmt(e)})")


def _lost_words(lost: np.ndarray, partition: pt.Partition, failure: Any = None) -> str:
    lost = np.asarray(lost, bool)
    ids = np.flatnonzero(lost)
    shown = ", ".join(map(str, ids[:16])) + (f", … ({ids.size} in all)" if ids.size > 16 else "")
    out = f"{ids.size} of {lost.size} blocks: [{shown}]"
    if failure is not None and failure.servers is not None:
        servers = np.unique(np.asarray(partition.server_of)[ids])
        out += f" (on servers {servers.tolist()} of {partition.num_servers})"
    return out


class PartialRecoveryCase(NamedTuple):
    """One checked recovery (:func:`assert_partial_recovery`): ``‖δ‖`` (full) and ``‖δ'‖``
    (partial) in the norm used, and the recovered state."""

    delta_full: float
    delta_partial: float
    recovered: State


def _check_recover(recover: Any) -> Callable:
    if recover is None:
        return _default_recover
    va.check_callable("recover", recover)
    return recover


def _check_tol(tol: Any) -> float:
    return float(va.check_real("tol", tol, lo=0.0, scalar=True))


def assert_partial_recovery(
    state: Any,
    saved: Any,
    partition: pt.Partition,
    lost: Any,
    *,
    recover: Callable | None = None,
    norm: Callable | None = None,
    include_aux: bool = True,
    tol: float = 0.0,
    details: dict | None = None,
    replay: str | None = None,
) -> PartialRecoveryCase:
    """Thm 5.4.1 for one failure: recover ``state`` from the checkpoint ``saved`` after
    losing the blocks ``lost`` (``bool[num_blocks]``) of ``partition``, and check that

    1. ``‖δ'‖ ≤ ‖δ‖`` (Thm 5.4.1; ``δ'`` = the change ``recover`` makes to the parameters,
       ``δ = saved.params − state.params`` the change of a full recovery), up to float32
       rounding (relative ``1e-5``);
    2. every entry of a block that was not lost (and every never-lost entry, block id
       ``-1``) is exactly as it was (Sec 5.4.1: ``w_{Sᶜ}`` survives the failure), for the
       parameters and, with ``include_aux``, the co-located optimizer state;
    3. every entry of a lost block is its saved value.

    ``recover(state, saved, partition, lost) -> state`` is the recovery under test
    (default: the library's, :func:`scarjax.scar.faults.recover` ``'partial'``); ``norm`` the
    norm of ``δ`` (default ℓ2); ``tol`` an absolute tolerance for 2–3 (default exact);
    ``include_aux=False`` when the recovery legitimately rebuilds aux from the recovered
    parameters (e.g. LDA's counts). ``details``/``replay`` are added to the message.

    Raises:
      CheckFailure (an ``AssertionError``) naming the offending block, entry and values.
    """
    if not isinstance(partition, pt.Partition):
        raise TypeError(
            f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    state, saved = State(*state), State(*saved)
    pt.check_matches(partition, state, "partition")
    va.check_tree_like("saved", saved, state, "state")
    lost = np.asarray(lost)
    if lost.shape != (partition.num_blocks,) or lost.dtype != bool:
        raise ValueError(
            f"lost must be bool[{partition.num_blocks}] (one flag per block), got {lost.dtype} {lost.shape}")
    recover = _check_recover(recover)
    norm = tu.l2_norm if norm is None else norm
    va.check_callable("norm", norm)
    include_aux = va.check_bool("include_aux", include_aux)
    tol = _check_tol(tol)
    rec = jax.tree.map(np.asarray, _jit_recover(recover)(state, saved, partition, jnp.asarray(lost)))
    stats = _host_case(state, saved, rec, partition, lost, norm, include_aux, tol)
    verdict = _verdict(stats)
    if verdict is not None:
        _fail_case(verdict, stats, state, saved, rec, partition, lost, include_aux, tol, dict(details or {}),
                   None, replay)
    return PartialRecoveryCase(float(stats["d"]), float(stats["dp"]), State(*rec))


def _fail_case(verdict, stats, state, saved, rec, partition, lost, include_aux, tol, details, lost_words,
               replay):
    details = dict(details)
    out = {k: details.pop(k) for k in ("algorithm", "partition", "failure") if k in details}
    out["lost"] = lost_words or _lost_words(lost, partition)
    if "checkpoint" in details:
        out["checkpoint"] = details.pop("checkpoint")
    out["‖δ'‖ (partial recovery)"] = float(stats["dp"])
    out["‖δ‖ (full recovery)"] = float(stats["d"])
    if verdict != "diverged":
        prefer = "lost" if verdict == "lost" else "unlost"
        off = _offending(state, saved, rec, partition, lost, include_aux, tol, prefer)
        if off is not None:
            out["offending block"] = off
        n_un = int(np.sum(stats["unlost_bad"])) + int(bool(stats["never_bad"]))
        n_lo = int(np.sum(stats["lost_bad"]))
        if n_un or n_lo:
            out["wrong blocks"] = f"{n_un} not lost but changed, {n_lo} lost but not reloaded"
    out.update(details)
    _harness.fail(_TITLES[verdict], out, replay)


# --------------------------------------------------------------------------------------
# The drawn examples of both checks.


class _Example(NamedTuple):
    failure: DrawnFailure  # what is lost, at t = failure.when's step
    checkpoint: Any  # int s (a consistent copy at s) or a Checkpoint
    seed: int

    @property
    def t(self) -> int:
        return int(self.failure.when.events[0])


@st.composite
def _examples(draw, steps: int, partition: pt.Partition, kinds: tuple, checkpoints: Any) -> _Example:
    B, S = partition.num_blocks, partition.num_servers
    f = draw(failures(steps - 1, min_step=1, fractions=st.integers(1, B).map(lambda j: j / B),
                      servers=S, kinds=kinds))
    t = int(f.when.events[0])
    c = draw(st.integers(0, t - 1)) if checkpoints is None else draw(checkpoints)
    if checkpoints is not None and not isinstance(c, ck.Checkpoint):
        raise TypeError(
            f"checkpoints must draw scarjax.scar.checkpoint.Checkpoint specs, got {type(c).__name__}")
    return _Example(f, c, draw(st.integers(0, 2**20)))


def _check_kinds(kinds: Any) -> tuple[str, ...]:
    kinds = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    if not kinds or any(k not in ("fraction", "servers") for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of ('fraction', 'servers'), got {kinds!r}")
    return kinds


def _check_checkpoints(checkpoints: Any) -> Any:
    if checkpoints is not None and not isinstance(checkpoints, st.SearchStrategy):
        raise TypeError(
            "checkpoints must be None (a consistent checkpoint at a drawn step s < t) or a hypothesis "
            f"strategy of Checkpoint specs (e.g. sst.checkpoints()), got {type(checkpoints).__name__}")
    return checkpoints


class _Setup(NamedTuple):
    algorithm: Algorithm
    captured: Algorithm
    steps: int
    partition: pt.Partition
    partition_words: str
    partition_code: str
    lose: Callable
    running: Any  # the running-checkpoint hook factory (built on demand)


def _setup(algorithm, steps, partition, lost_blocks) -> _Setup:
    algorithm = _check_algorithm(algorithm)
    steps = va.check_int("steps", steps, lo=2)
    part, words, code = _resolve_partition(partition, _init_state(algorithm))
    if lost_blocks is None:
        lost_blocks = faults.lost_blocks
    va.check_callable("lost_blocks", lost_blocks)
    return _Setup(algorithm, _capturing(algorithm), steps, part, words, code, lost_blocks,
                  _RunningHooks(part))


def _run_example(setup: _Setup, ex: _Example, trials: int) -> tuple[State, State, jax.Array, str]:
    """One ``run_trials`` call: ``(y⁽ᵗ⁾, z, keys, checkpoint words)`` for every trial."""
    args, words = _checkpoint_args(ex.checkpoint, ex.t, setup.steps)
    hooks = setup.running if "saves" in args else _snapshot_hooks
    keys = _harness.replay_keys(ex.seed, trials)
    batched = {k: np.repeat(np.asarray(v)[None], trials, 0) for k, v in args.items()}
    # A handful of trials: one device, one chunk (no padding, no memory estimate).
    final, _ = run_trials(setup.captured, hooks, setup.steps, keys, hook_args=batched, chunk_size=trials,
                          mesh=_one_device())
    snap = final.aux[1]
    return snap.state, snap.saved, keys, words


@functools.lru_cache(maxsize=1)
def _one_device() -> Any:
    return trials_mesh(jax.devices()[:1])


def _trial(tree: Any, i: int) -> Any:
    """Trial ``i`` of a batched pytree, as NumPy arrays (no device work)."""
    return jax.tree.map(lambda x: np.asarray(x)[i], tree)


def _failure_args(f: faults.Failure) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(fraction, servers, use_servers)``: both kinds of failure as traced arguments of
    one program (the unused one carries a dummy value and is not read)."""
    if f.fraction is not None:
        return np.float32(f.fraction), np.int32(1), np.bool_(False)
    return np.float32(0.5), np.int32(f.servers), np.bool_(True)


def _lose(lose: Callable, partition: pt.Partition, key: jax.Array, fraction: Any, servers: Any,
          use_servers: Any) -> jax.Array:
    by_fraction = jnp.asarray(lose(faults.Failure(fraction=fraction, when=0), partition, key), bool)
    by_servers = jnp.asarray(lose(faults.Failure(servers=servers, when=0), partition, key), bool)
    return jnp.where(use_servers, by_servers, by_fraction)


@functools.lru_cache(maxsize=32)
def _jit_lost(lose: Callable) -> Callable:
    """The lost blocks of a batch of trials (``fold_in(key_i, 1)``), one program per
    failure model and partition shape."""

    def one(key, fraction, servers, use_servers, partition):
        return _lose(lose, partition, jax.random.fold_in(key, _LOST_SALT), fraction, servers, use_servers)

    return jax.jit(jax.vmap(one, in_axes=(0, None, None, None, None)))


def _replay_head(setup: _Setup, ex: _Example, trial: int) -> str:
    return (f"key = jax.random.fold_in(jax.random.key({ex.seed}), {trial})\n"
            f"state, saved, part = sxt.recovery_case(algorithm, key, t={ex.t}, "
            f"checkpoint={_checkpoint_code(ex.checkpoint)}, partition={setup.partition_code})\n")


# --------------------------------------------------------------------------------------
# Thm 5.4.1: the check.


class PartialRecoveryResult(NamedTuple):
    """What :func:`check_partial_recovery` checked.

    Attributes:
      examples: hypothesis examples run.
      trials: trials per example (one failure each).
      max_ratio: the largest ``‖δ'‖/‖δ‖`` met (``≤ 1`` by Thm 5.4.1; ``nan`` if every
        ``‖δ‖`` was 0).
      mean_ratio: the mean of ``‖δ'‖/‖δ‖``.
      mean_fraction: the mean fraction of blocks lost.
    """

    examples: int
    trials: int
    max_ratio: float
    mean_ratio: float
    mean_fraction: float

    def summary(self) -> str:
        return (f"Thm 5.4.1 held on {self.examples} examples × {self.trials} trials "
                f"({self.examples * self.trials} failures, {100 * self.mean_fraction:.3g}% of the blocks "
                f"lost on average): ‖δ'‖ ≤ ‖δ‖ (largest ratio ‖δ'‖/‖δ‖ = {self.max_ratio:.4g}, "
                f"mean {self.mean_ratio:.4g}); "
                f"no block that was not lost changed; every lost block was reloaded from the checkpoint")


def check_partial_recovery(
    algorithm: Algorithm,
    steps: int,
    *,
    partition: Any = None,
    recover: Callable | None = None,
    lost_blocks: Callable | None = None,
    checkpoints: Any = None,
    kinds: Any = ("fraction", "servers"),
    include_aux: bool = True,
    tol: float = 0.0,
    trials: int = 4,
    seed: int = 0,
    settings: Any = None,
) -> PartialRecoveryResult:
    """Thm 5.4.1 (thesis Sec 5.4.1, proof in App. B.2.2) on your algorithm and partition:
    partial recovery never perturbs more than full recovery, ``‖δ'‖ ≤ ‖δ‖``, and it leaves
    every block that was not lost exactly as it was and reloads every lost one.

    Each hypothesis example draws a failure step ``t`` in ``1 … steps − 1``, a checkpoint
    (default: a consistent copy of the whole state saved at ``s`` in ``0 … t − 1``,
    ``s = 0`` being ``w⁽⁰⁾``; or a running checkpoint from ``checkpoints``), and what the
    failure loses (``'fraction'``: ``j`` of the ``B`` blocks, ``p = j/B``; ``'servers'``:
    the blocks of ``k`` of the ``S`` servers), then runs ``trials`` trials of
    ``algorithm`` in one :func:`scarjax.run_trials` call (trial ``i`` on
    ``fold_in(key(seed'), i)``, ``seed'`` drawn), draws each trial's lost blocks with
    ``lost_blocks(failure, partition, fold_in(key_i, 1))``, recovers and checks with
    :func:`assert_partial_recovery`. The first failing trial is reported; hypothesis
    shrinks to the smallest failing fraction (or one server), the earliest ``t`` and ``s``.

    Args:
      algorithm: your :class:`~scarjax.Algorithm`.
      steps: iterations per trial (``>= 2``; failures happen before the last).
      partition: a :class:`~scarjax.scar.partition.Partition`, a
        :class:`~scarjax.testing.strategies.PartitionSpec` or a callable ``state ->
        Partition`` (called on ``algorithm.init(key(0), data)``); default
        :data:`DEFAULT_PARTITION` (by row, 4 servers).
      recover: ``recover(state, saved, partition, lost) -> state``, the recovery under
        test (traceable; default the library's partial recovery).
      lost_blocks: ``(failure, partition, key) -> bool[num_blocks]``, your failure model
        (default :func:`scarjax.scar.faults.lost_blocks`).
      checkpoints: ``None`` or a strategy of :class:`~scarjax.scar.checkpoint.Checkpoint`
        (e.g. ``sst.checkpoints(max_step=steps)``): SCAR's running checkpoint, kept on the
        partition until ``t``.
      kinds: what failures lose: ``'fraction'`` and/or ``'servers'``.
      include_aux, tol: as :func:`assert_partial_recovery`.
      trials, seed, settings: trials per example; the base of the drawn seeds; the
        budget (``None``: :data:`~scarjax.testing.DEFAULT_SETTINGS`, an int: max examples,
        or a ``hypothesis.settings``).

    Returns:
      :class:`PartialRecoveryResult` (``.summary()``).

    Raises:
      CheckFailure (an ``AssertionError``): the counterexample — the partition, what was
      lost, ``s`` and ``t``, ``‖δ'‖`` vs ``‖δ‖``, the offending block and entry, the trial,
      the seed and a replay snippet.
    """
    setup = _setup(algorithm, steps, partition, lost_blocks)
    recover = _check_recover(recover)
    kinds = _check_kinds(kinds)
    checkpoints = _check_checkpoints(checkpoints)
    include_aux = va.check_bool("include_aux", include_aux)
    tol = _check_tol(tol)
    trials = va.check_int("trials", trials, lo=1)
    seed = va.check_int("seed", seed, lo=0)
    part, norm = setup.partition, setup.algorithm.norm
    ratios, fractions = [], []

    def body(ex: _Example) -> None:
        ex = ex._replace(seed=seed + ex.seed)
        w, z, keys, ck_words = _run_example(setup, ex, trials)
        lost = np.asarray(_jit_lost(setup.lose)(keys, *_failure_args(ex.failure), part))
        w, z = jax.tree.map(np.asarray, (w, z))
        for i in range(trials):
            w_i, z_i = _trial((w, z), i)
            rec = jax.tree.map(np.asarray, _jit_recover(recover)(w_i, z_i, part, lost[i]))
            s_i = _host_case(w_i, z_i, rec, part, lost[i], norm, include_aux, tol)
            verdict = _verdict(s_i)
            if verdict is not None:
                details = {
                    "algorithm": setup.algorithm.name,
                    "partition": setup.partition_words,
                    "failure": f"{ex.failure.describe()} (t = {ex.t})",
                    "checkpoint": ck_words,
                    "trial": f"{i} of {trials}",
                    "seed": ex.seed,
                }
                replay = (_replay_head(setup, ex, i)
                          + f"lost = {'lost_blocks' if lost_blocks is not None else 'faults.lost_blocks'}"
                          f"({ex.failure!r}, part, jax.random.fold_in(key, {_LOST_SALT}))\n"
                          f"sxt.assert_partial_recovery(state, saved, part, lost"
                          f"{', recover=recover' if recover is not _default_recover else ''}"
                          f"{'' if include_aux else ', include_aux=False'}{f', tol={tol!r}' if tol else ''})")
                _fail_case(verdict, s_i, w_i, z_i, rec, part, lost[i], include_aux, tol, details,
                           _lost_words(lost[i], part, ex.failure), replay)
            if s_i["d"] > 0:
                ratios.append(s_i["dp"] / s_i["d"])
            fractions.append(float(lost[i].mean()))

    _harness.run_property(_examples(setup.steps, part, kinds, checkpoints), body, settings)
    n = len(fractions) // trials
    r = np.asarray(ratios) if ratios else np.asarray([np.nan])
    return PartialRecoveryResult(n, trials, float(np.max(r)), float(np.mean(r)), float(np.mean(fractions)))


# --------------------------------------------------------------------------------------
# Thm 5.4.2.


def _z_threshold(false_alarm: float) -> float:
    """The two-sided normal quantile ``Φ⁻¹(1 − α/2)`` (``α = 1e-6``: 4.89)."""
    return statistics.NormalDist().inv_cdf(1.0 - false_alarm / 2.0)


def _loss_probability(failure: faults.Failure, partition: pt.Partition) -> float:
    """``p``: the probability that a given block is lost (``round(fB)/B`` for a fraction
    ``f``, as :func:`scarjax.scar.partition.random_blocks` loses exactly that many; ``k/S``
    for ``k`` of ``S`` servers)."""
    if failure.fraction is not None:
        B = partition.num_blocks
        return float(np.round(np.float32(failure.fraction) * np.float32(B))) / B
    return int(failure.servers) / partition.num_servers


def _null_variance(v: np.ndarray, n: int, k: int) -> float:
    """Variance of ``Σ_b v_b·1[b ∈ S]`` for ``S`` = ``k`` of ``n`` items drawn uniformly
    without replacement."""
    if n <= 0:
        return 0.0
    pi = k / n
    pi2 = k * (k - 1) / (n * (n - 1)) if n > 1 else 0.0
    V1, V2 = float(np.sum(v)), float(np.sum(v * v))
    return max(V2 * pi * (1 - pi) + (V1 * V1 - V2) * (pi2 - pi * pi), 0.0)


@functools.lru_cache(maxsize=32)
def _jit_mc(recover: Callable, lose: Callable, samples: int, kind: str) -> Callable:
    """``samples`` failures (keys ``split(key, samples)``, one ``vmap``): each one's
    ``‖δ'‖²``, and the per-block ``‖(z − w)_b‖²``. One program per recovery, failure model
    and partition shape, both kinds of failure in it (their values traced)."""

    def fn(state, saved, keys, value, partition):
        failure = faults.Failure(when=0, **{kind: value})

        def one(k):
            lost = jnp.asarray(lose(failure, partition, k), bool)
            rec = _as_state(recover(state, saved, partition, lost), state,
                            "recover(state, saved, partition, lost)")
            return jnp.square(tu.l2_norm(tu.tree_sub(rec.params, state.params)))

        return jax.vmap(one)(keys)

    return jax.jit(fn)


@functools.lru_cache(maxsize=8)
def _jit_split(samples: int) -> Callable:
    # Shared by every Monte-Carlo program (the split is compiled once per sample count).
    return jax.jit(lambda key: jax.random.split(key, samples))


def _block_squares(state: State, saved: State, partition: pt.Partition) -> np.ndarray:
    """``float64[num_blocks]``: ``‖(z − w)_b‖²`` over each block's parameters (host)."""
    B = partition.num_blocks
    v = np.zeros(B, np.float64)
    for ids, w, z in zip(jax.tree.leaves(partition.blocks.params), jax.tree.leaves(state.params),
                         jax.tree.leaves(saved.params)):
        w = np.asarray(w)
        d = np.square(np.asarray(z).astype(w.dtype).astype(np.float64) - w.astype(np.float64))
        ids = np.broadcast_to(np.asarray(ids), d.shape)
        keep = ids >= 0
        v += np.bincount(ids[keep], weights=d[keep], minlength=B)
    return v


def _mc_samples(state, saved, key, failure, partition, recover, lose, samples):
    """``(‖δ'‖² of each of the samples failures, ‖(z − w)_b‖² per block)``."""
    keys = _jit_split(samples)(key)
    kind, value = (("fraction", np.float32(failure.fraction)) if failure.fraction is not None
                   else ("servers", np.int32(failure.servers)))
    dp2 = _jit_mc(recover, lose, samples, kind)(state, saved, keys, value, partition)
    return dp2, _block_squares(state, saved, partition)


class ExpectedPerturbationCase(NamedTuple):
    """One Thm 5.4.2 test (:func:`assert_expected_perturbation`).

    Attributes:
      p: the probability that a block is lost.
      mean: the Monte-Carlo mean of ``‖δ'‖²`` over ``samples`` failures.
      target: ``p‖δ‖²`` (``δ`` over the parameters that can be lost).
      se: the standard error used (the larger of the sample one and the exact one under
        the theorem's sampling).
      z: ``(mean − target)/se``, less the float32 rounding allowance ``1e-4·target``.
      threshold: the ``|z|`` beyond which it fails.
      samples: the number of failures drawn.
    """

    p: float
    mean: float
    target: float
    se: float
    z: float
    threshold: float
    samples: int


def _check_false_alarm(false_alarm: Any) -> float:
    return float(va.check_real("false_alarm", false_alarm, lo=0.0, hi=0.5, lo_open=True, scalar=True))


def _mc_case(dp2: np.ndarray, v: np.ndarray, failure: faults.Failure, partition: pt.Partition,
             false_alarm: float) -> tuple[ExpectedPerturbationCase, bool]:
    x = np.asarray(dp2, np.float64)
    v = np.asarray(v, np.float64)
    n = x.size
    p = _loss_probability(failure, partition)
    target = p * float(np.sum(v))
    if failure.fraction is not None:
        B = partition.num_blocks
        null = _null_variance(v, B, int(round(p * B)))
    else:
        u = np.bincount(np.asarray(partition.server_of), weights=v, minlength=partition.num_servers)
        null = _null_variance(u, partition.num_servers, int(failure.servers))
    mean = float(np.mean(x)) if n else float("nan")
    sample_se = float(np.std(x, ddof=1) / math.sqrt(n)) if n > 1 else 0.0
    se = max(sample_se, math.sqrt(null / n))
    thr = _z_threshold(false_alarm)
    diff = mean - target
    slack = _MEAN_RTOL * abs(target) + 1e-30
    excess = max(abs(diff) - slack, 0.0)  # beyond the float32 rounding allowance
    z = math.copysign(excess / se if se > 0 else (0.0 if excess == 0 else math.inf), diff)
    ok = math.isfinite(mean) and excess <= thr * se
    return ExpectedPerturbationCase(p, mean, target, se, z, thr, n), ok


def _fail_mc(case: ExpectedPerturbationCase, failure: faults.Failure, full2: float, details: dict,
             replay: str | None, false_alarm: float, per: str) -> None:
    details = dict(details)
    out = {k: details.pop(k) for k in ("algorithm", "partition", "failure", "checkpoint") if k in details}
    out["p (probability a block is lost)"] = case.p
    out[f"mean ‖δ'‖² over {case.samples} failures"] = case.mean
    out["p‖δ‖² (Thm 5.4.2)"] = case.target
    out["‖δ‖² (full recovery)"] = full2
    if math.isfinite(case.mean):
        out["difference"] = (f"{case.mean - case.target:.6g}: {case.z:.3g} standard errors "
                             f"(SE {case.se:.3g}, "
                             f"beyond a {_MEAN_RTOL:g}·p‖δ‖² rounding allowance); "
                             f"allowed {case.threshold:.3g} SE: false-alarm rate {false_alarm:.3g} {per}, "
                             "two-sided z-test, normal approximation")
    out.update(details)
    title = ("Thm 5.4.2: the mean ‖δ'‖² of partial recovery is not p‖δ‖²" if math.isfinite(case.mean)
             else "Thm 5.4.2: the partial recovery produced a non-finite ‖δ'‖ (NaN/inf)")
    _harness.fail(title, out, replay)


def assert_expected_perturbation(
    state: Any,
    saved: Any,
    partition: pt.Partition,
    failure: faults.Failure,
    key: Any,
    *,
    recover: Callable | None = None,
    lost_blocks: Callable | None = None,
    samples: int = 2000,
    false_alarm: float = 1e-6,
    details: dict | None = None,
    replay: str | None = None,
) -> ExpectedPerturbationCase:
    """Thm 5.4.2 for one state and checkpoint: over ``samples`` failures drawn by
    ``lost_blocks(failure, partition, k)`` (keys ``split(key, samples)``, one ``vmap``),
    the mean of ``‖δ'‖²`` (ℓ2 of the change ``recover`` makes to the parameters) equals
    ``p‖δ‖²``, where ``p`` is the probability that a block is lost (``round(fB)/B`` for a
    fraction ``f``, ``k/S`` for ``k`` of ``S`` servers) and ``‖δ‖²`` the squared change of a
    full recovery over the parameters that can be lost (block id ``≥ 0``).

    The test: ``|mean − p‖δ‖²| ≤ z·SE + 1e-4·p‖δ‖²`` with ``z = Φ⁻¹(1 − false_alarm/2)``
    (two-sided; ``false_alarm = 1e-6``: ``z ≈ 4.89``), SE the larger of the sample
    standard error and the exact one under the theorem's sampling (blocks or servers
    drawn uniformly without replacement), and ``1e-4`` relative for float32 rounding. By
    the normal approximation of the mean, a correct recovery fails with probability about
    ``false_alarm``.

    Raises:
      CheckFailure (an ``AssertionError``) with the mean, the target, the difference in
      standard errors and the threshold.
    """
    if not isinstance(partition, pt.Partition):
        raise TypeError(
            f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    if not isinstance(failure, faults.Failure):
        raise TypeError(f"failure must be a scarjax.scar.faults.Failure, got {type(failure).__name__}")
    failure.check(partition)
    state, saved = State(*state), State(*saved)
    pt.check_matches(partition, state, "partition")
    va.check_tree_like("saved", saved, state, "state")
    key = va.check_key("key", key)
    recover = _check_recover(recover)
    lose = faults.lost_blocks if lost_blocks is None else lost_blocks
    va.check_callable("lost_blocks", lose)
    samples = va.check_int("samples", samples, lo=2)
    false_alarm = _check_false_alarm(false_alarm)
    dp2, v = _mc_samples(state, saved, key, failure, partition, recover, lose, samples)
    case, ok = _mc_case(np.asarray(dp2), np.asarray(v), failure, partition, false_alarm)
    if not ok:
        full2 = float(np.square(np.asarray(tu.l2_norm(tu.tree_sub(saved.params, state.params)))))
        _fail_mc(case, failure, full2, dict(details or {}), replay, false_alarm, "per call")
    return case


class ExpectedPerturbationResult(NamedTuple):
    """What :func:`check_expected_perturbation` checked.

    Attributes:
      examples, trials, samples: examples run, trials (states) per example, failures
        drawn per trial.
      max_abs_z: the largest ``|mean − p‖δ‖²| / SE`` met.
      threshold: the ``|z|`` allowed per trial.
      false_alarm: the false-alarm rate per example.
    """

    examples: int
    trials: int
    samples: int
    max_abs_z: float
    threshold: float
    false_alarm: float

    def summary(self) -> str:
        return (f"Thm 5.4.2 held on {self.examples} examples × {self.trials} trials × {self.samples} "
                f"failures: "
                f"mean ‖δ'‖² within {self.threshold:.3g} standard errors of p‖δ‖² (largest |z| = "
                f"{self.max_abs_z:.3g}; false-alarm rate {self.false_alarm:.3g} per example)")


def check_expected_perturbation(
    algorithm: Algorithm,
    steps: int,
    *,
    partition: Any = None,
    recover: Callable | None = None,
    lost_blocks: Callable | None = None,
    checkpoints: Any = None,
    kinds: Any = ("fraction", "servers"),
    samples: int = 2000,
    false_alarm: float = 1e-6,
    trials: int = 4,
    seed: int = 0,
    settings: Any = None,
) -> ExpectedPerturbationResult:
    """Thm 5.4.2 (thesis Sec 5.4.1, proof in App. B.2.3) on your algorithm and partition:
    losing a uniformly random fraction ``p`` of the blocks (``'fraction'``: ``j`` of ``B``,
    ``p = j/B``) or the blocks of ``k`` of ``S`` servers (``'servers'``, ``p = k/S``),
    partial recovery's perturbation satisfies ``E‖δ'‖² = p‖δ‖²`` (ℓ2 norm).

    Each hypothesis example draws ``t``, the checkpoint and the failure as
    :func:`check_partial_recovery` does, runs ``trials`` trials in one
    :func:`scarjax.run_trials` call, and for each trial's ``(y⁽ᵗ⁾, z)`` draws ``samples``
    failures in one ``vmap`` (keys ``split(fold_in(key_i, 2), samples)``) and applies
    :func:`assert_expected_perturbation`.

    Statistics: a two-sided z-test of the Monte-Carlo mean at ``z = Φ⁻¹(1 −
    false_alarm/(2·trials))`` standard errors (``false_alarm = 1e-6``, 4 trials: ``z ≈
    5.17``), so a correct recovery fails an example with probability about
    ``false_alarm`` (normal approximation; Bonferroni over the trials), and a check call
    of ``n`` examples with probability at most ``n·false_alarm``.

    Args:
      recover, lost_blocks, partition, checkpoints, kinds, trials, seed, settings: as
        :func:`check_partial_recovery` (``lost_blocks`` is the failure model whose
        uniformity the theorem assumes).
      samples: failures per trial (the test's power grows with ``√samples``).
      false_alarm: the false-alarm rate per example.

    Returns:
      :class:`ExpectedPerturbationResult` (``.summary()``).

    Raises:
      CheckFailure (an ``AssertionError``): the failing trial's mean ``‖δ'‖²``, ``p‖δ‖²``,
      the difference in standard errors, the threshold and false-alarm rate, what was
      lost, ``s``, ``t``, the seed and a replay snippet.
    """
    setup = _setup(algorithm, steps, partition, lost_blocks)
    recover = _check_recover(recover)
    kinds = _check_kinds(kinds)
    checkpoints = _check_checkpoints(checkpoints)
    samples = va.check_int("samples", samples, lo=2)
    false_alarm = _check_false_alarm(false_alarm)
    trials = va.check_int("trials", trials, lo=1)
    seed = va.check_int("seed", seed, lo=0)
    part = setup.partition
    per_trial = false_alarm / trials
    zs: list[float] = []

    def body(ex: _Example) -> None:
        ex = ex._replace(seed=seed + ex.seed)
        w, z, keys, ck_words = _run_example(setup, ex, trials)
        for i in range(trials):
            w_i, z_i = _trial((w, z), i)
            dp2, v = _mc_samples(w_i, z_i, jax.random.fold_in(keys[i], _MC_SALT), ex.failure,
                                 part, recover, setup.lose, samples)
            case, ok = _mc_case(np.asarray(dp2), np.asarray(v), ex.failure, part, per_trial)
            if not ok:
                full2 = float(np.square(np.asarray(tu.l2_norm(tu.tree_sub(z_i.params, w_i.params)))))
                details = {
                    "algorithm": setup.algorithm.name,
                    "partition": setup.partition_words,
                    "failure": f"{ex.failure.describe()} (t = {ex.t})",
                    "checkpoint": ck_words,
                    "trial": f"{i} of {trials}",
                    "seed": ex.seed,
                }
                replay = (_replay_head(setup, ex, i)
                          + f"sxt.assert_expected_perturbation(state, saved, part, {ex.failure!r}, "
                          f"jax.random.fold_in(key, {_MC_SALT}), samples={samples}, false_alarm={per_trial!r}"
                          f"{', recover=recover' if recover is not _default_recover else ''}"
                          f"{', lost_blocks=lost_blocks' if lost_blocks is not None else ''})")
                _fail_mc(case, ex.failure, full2, details, replay, per_trial, "per trial")
            zs.append(abs(case.z))

    _harness.run_property(_examples(setup.steps, part, kinds, checkpoints), body, settings)
    return ExpectedPerturbationResult(len(zs) // trials, trials, samples, float(max(zs, default=0.0)),
                                      _z_threshold(per_trial), false_alarm)
