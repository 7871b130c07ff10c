"""The persistent running checkpoint on real storage, written with orbax-checkpoint
(thesis Sec 5.4.2–5.4.3).

:class:`PersistentCheckpoint` keeps SCAR's running checkpoint in a directory. Every save
writes *only the selected blocks* (plus the small never-lost leaves and a manifest) as one
orbax checkpoint step, asynchronously: :meth:`PersistentCheckpoint.save` returns once the
values are on the host and the write continues in the background while training goes on
(Sec 5.4.3, "Actions During a Checkpoint", step 4). A step's directory only appears
under its final name once every file of it is written (orbax's atomic
tmp-directory-and-rename commit), and each step carries the *manifest* of the whole
running checkpoint (for every block, the step that holds its latest copy and the
iteration it was saved at), so the last committed step always describes a consistent
running checkpoint: the one of the last completed save. A crash during a write leaves
at most an uncommitted ``*.orbax-checkpoint-tmp*`` directory, which is ignored (and
cleaned up on the next open). Steps no longer referenced by the latest manifest are
deleted after each commit.

Every saved array carries a SHA-256 checksum in the step's metadata; reading checks it,
and a missing, truncated or corrupted step raises :class:`CheckpointError` naming the
step and file (never silently wrong parameters). The metadata also records the layout
(leaf shapes and dtypes, the partition's block map fingerprint) so that a checkpoint is
never read back into a differently shaped or partitioned state.

:func:`run` is the driver: it runs the compiled loop (:func:`scarjax.run`) in segments
between checkpoints and failures, updates the in-memory cache with the same pure code
as the in-memory backend (:func:`scarjax.checkpoint.step`: priority selection and cache
update, the only checkpoint work on the training path), hands the selected blocks to
:meth:`PersistentCheckpoint.save`, and on a failure recovers the lost blocks (or the
whole state) by reading them back from disk.

On-disk layout (``directory/<step>/``, ``step`` = the training iteration of the save):

* ``blocks/`` (orbax ``StandardSave``): ``ids`` (the saved block ids), ``leaf_i`` (the
  entries of state leaf ``i`` belonging to the saved blocks or never lost, C order),
  ``location`` and ``saved_at`` (the manifest, one entry per block);
* ``meta/`` (orbax ``JsonSave``): format version, step, layout, checksums.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import checkpoint as ck
from scarjax import partition as pt
from scarjax import tree as tu

PyTree = Any

__all__ = ["CheckpointError", "PersistentCheckpoint", "PersistentRun", "run", "FORMAT_VERSION"]

FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A persistent checkpoint is missing, incomplete, corrupted or does not match the
    state/partition it is read into."""


def _sha(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha256()
    h.update(str(a.dtype).encode())
    h.update(str(a.shape).encode())
    h.update(a.tobytes())
    return h.hexdigest()


def _pad(a: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((1,), a.dtype), a.ravel()])


_PADDED = ("ids", "leaf_")


def _ocp():
    import orbax.checkpoint as ocp

    return ocp


class PersistentCheckpoint:
    """SCAR's running checkpoint in ``directory`` (see the module docstring).

    Args:
      directory: where the checkpoint lives (created if needed).
      partition: the :class:`~scarjax.partition.Partition` of the state.
      template: a state with the structure, shapes and dtypes of the checkpointed state
        (values unused; ``jax.eval_shape`` output works).
      async_write: write in the background (default; Sec 5.4.3 step 4). ``False`` makes
        :meth:`save` block until the step is committed.

    Example::

      store = PersistentCheckpoint(path, part, state0)
      store.initialize(state0)           # the running checkpoint starts at w(0)
      store.save(8, state, mask)         # returns at once; written asynchronously
      state = store.restore(state, lost) # partial recovery of lost blocks from disk
      full = store.load(state)           # full recovery (the whole running checkpoint)
    """

    def __init__(self, directory: str | os.PathLike, partition: pt.Partition, template: Any, *, async_write: bool = True):
        if not isinstance(partition, pt.Partition):
            raise TypeError(f"partition must be a scarjax.partition.Partition, got {type(partition).__name__}")
        from scarjax.core import State

        if not isinstance(template, State):
            template = State(*template) if isinstance(template, tuple) else State(template, ())
        self.directory = Path(directory).absolute()
        self.partition = partition
        self._leaves, self._treedef = jax.tree.flatten(template)
        self._shapes = [tuple(int(d) for d in np.shape(x)) for x in self._leaves]
        self._dtypes = [str(np.dtype(x.dtype)) for x in self._leaves]
        ids_leaves = jax.tree.leaves(partition.blocks)
        if len(ids_leaves) != len(self._leaves):
            raise ValueError(
                f"partition does not match template: {len(ids_leaves)} block maps for "
                f"{len(self._leaves)} state leaves"
            )
        self._ids = [np.asarray(i) for i in ids_leaves]
        for i, (ids, shp) in enumerate(zip(self._ids, self._shapes)):
            try:
                np.broadcast_shapes(ids.shape, shp)
            except ValueError:
                raise ValueError(f"partition block map {i} {ids.shape} does not fit state leaf {shp}") from None
        h = hashlib.sha256()
        for ids in self._ids:
            h.update(_sha(ids).encode())
        self._layout = {
            "format": FORMAT_VERSION,
            "num_blocks": int(partition.num_blocks),
            "shapes": [list(s) for s in self._shapes],
            "dtypes": self._dtypes,
            "partition_sha256": h.hexdigest(),
        }
        self.async_write = bool(async_write)
        ocp = _ocp()
        self._mgr = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                enable_async_checkpointing=self.async_write,
                create=True,
                cleanup_tmp_directories=True,
            ),
        )
        B = partition.num_blocks
        # Manifest of the last save *handed to the writer* (the on-disk one is that of
        # the latest committed step; they agree once wait() returns).
        self._location = np.full((B,), -1, np.int64)
        self._saved_at = np.zeros((B,), np.int32)
        latest = self._mgr.latest_step()
        if latest is not None:
            try:
                loc, at, _ = self._read_manifest(latest)
            except BaseException:
                self._mgr.close()
                raise
            self._location, self._saved_at = loc.copy(), at.copy()
        self.bytes_written = 0

    # ---------------------------------------------------------------- bookkeeping

    def steps(self) -> list[int]:
        """Committed steps on disk."""
        self._mgr.reload()
        return sorted(self._mgr.all_steps())

    def latest_step(self) -> int | None:
        """The last committed save (``None`` before :meth:`initialize`)."""
        self._mgr.reload()
        return self._mgr.latest_step()

    def wait(self) -> None:
        """Block until the in-flight write (if any) is committed, then delete the steps
        the new manifest no longer references."""
        self._mgr.wait_until_finished()
        self._gc()

    def close(self) -> None:
        self._mgr.wait_until_finished()
        self._gc()
        self._mgr.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---------------------------------------------------------------- writing

    def _full_masks(self, block_mask: np.ndarray, include_never: bool) -> list[np.ndarray]:
        ext = np.concatenate([block_mask.astype(bool), [include_never]])
        out = []
        for ids, shp in zip(self._ids, self._shapes):
            m = ext[np.where(ids < 0, len(block_mask), ids)]
            out.append(np.broadcast_to(m, shp))
        return out

    def initialize(self, state: Any) -> None:
        """Start the running checkpoint at ``state`` (``w⁽⁰⁾``, Sec 5.4.2) as step 0,
        written synchronously. A no-op when a committed checkpoint already exists (a
        restart resumes from it)."""
        if self.latest_step() is not None:
            return
        self._write(0, state, np.ones((self.partition.num_blocks,), bool), sync=True)

    def save(self, step: int, state: Any, block_mask: Any) -> float:
        """Write the selected blocks of ``state`` (and the never-lost leaves) as step
        ``step`` of the running checkpoint, asynchronously. Returns the seconds this call
        blocked (host transfer and hand-off; the disk write itself runs in the
        background). Waits first for the previous write to finish (one write in flight)."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)) or step < 1:
            raise ValueError(f"step must be an int >= 1, got {step!r}")
        t0 = time.perf_counter()
        self._write(int(step), state, np.asarray(block_mask, bool), sync=not self.async_write)
        return time.perf_counter() - t0

    def _write(self, step: int, state: Any, block_mask: np.ndarray, sync: bool) -> None:
        B = self.partition.num_blocks
        if block_mask.shape != (B,):
            raise ValueError(f"block_mask must have shape ({B},), got {block_mask.shape}")
        leaves = self._check_state(state)
        # One write in flight: the previous one must be committed before the next
        # manifest (which may reference it) is written, and before garbage collection.
        self._mgr.wait_until_finished()
        latest = self._mgr.latest_step()
        if latest is not None and step <= latest:
            raise ValueError(f"step {step} must be after the latest saved step {latest}")
        self._gc()
        masks = self._full_masks(block_mask, include_never=True)
        # orbax cannot store zero-size arrays: variable-length arrays carry one leading
        # pad element, dropped on read.
        arrays = {"ids": _pad(np.nonzero(block_mask)[0].astype(np.int32))}
        for i, (x, m) in enumerate(zip(leaves, masks)):
            arrays[f"leaf_{i}"] = _pad(np.asarray(x)[m])
        location = np.where(block_mask, step, self._location).astype(np.int64)
        saved_at = np.where(block_mask, step, self._saved_at).astype(np.int32)
        arrays["location"] = location
        arrays["saved_at"] = saved_at
        meta = dict(self._layout)
        meta["step"] = step
        meta["checksums"] = {k: _sha(v) for k, v in arrays.items()}
        ocp = _ocp()
        self._mgr.save(
            step,
            args=ocp.args.Composite(blocks=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)),
            force=True,
        )
        self._location, self._saved_at = location, saved_at
        self.bytes_written += int(sum(v.nbytes for v in arrays.values()))
        if sync:
            self._mgr.wait_until_finished()

    def _gc(self) -> None:
        """Delete committed steps the latest committed manifest no longer references."""
        latest = self._mgr.latest_step()
        if latest is None:
            return
        loc, _, _ = self._read_manifest(latest)
        keep = set(int(s) for s in np.unique(loc)) | {latest}
        for s in self._mgr.all_steps():
            if s not in keep:
                self._mgr.delete(s)

    # ---------------------------------------------------------------- reading

    def _check_state(self, state: Any) -> list:
        from scarjax.core import State

        if not isinstance(state, State):
            state = State(*state)
        leaves, treedef = jax.tree.flatten(state)
        if treedef != self._treedef:
            raise ValueError(f"state structure {treedef} does not match the checkpoint's {self._treedef}")
        for i, (x, s) in enumerate(zip(leaves, self._shapes)):
            if tuple(np.shape(x)) != s:
                raise ValueError(f"state leaf {i} has shape {np.shape(x)}, the checkpoint expects {s}")
        return leaves

    def _load_step(self, step: int) -> tuple[dict, dict]:
        ocp = _ocp()
        path = self.directory / str(step)
        if not path.is_dir():
            raise CheckpointError(
                f"checkpoint step {step} is missing from {self.directory} (the manifest "
                "references it); the running checkpoint is incomplete"
            )
        try:
            out = self._mgr.restore(
                step, args=ocp.args.Composite(blocks=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore())
            )
        except Exception as e:  # orbax/tensorstore raise many types for damaged files
            raise CheckpointError(
                f"checkpoint step {step} in {self.directory} is unreadable (missing or "
                f"corrupted files): {type(e).__name__}: {e}"
            ) from e
        arrays, meta = dict(out["blocks"]), out["meta"]
        if not isinstance(meta, dict) or "checksums" not in meta:
            raise CheckpointError(f"checkpoint step {step} in {self.directory} has no valid metadata")
        for k in ("format", "num_blocks", "shapes", "dtypes", "partition_sha256"):
            if meta.get(k) != self._layout[k]:
                raise CheckpointError(
                    f"checkpoint step {step} in {self.directory} was written for a different "
                    f"layout ({k}: {meta.get(k)!r} != {self._layout[k]!r})"
                )
        sums = meta["checksums"]
        if set(sums) != set(arrays):
            raise CheckpointError(
                f"checkpoint step {step} in {self.directory}: arrays {sorted(arrays)} do not "
                f"match the metadata {sorted(sums)}"
            )
        for k, v in arrays.items():
            v = np.asarray(v)
            if _sha(v) != sums[k]:
                raise CheckpointError(
                    f"checkpoint step {step} in {self.directory}: checksum mismatch for array "
                    f"{k!r} (corrupted data)"
                )
            arrays[k] = v[1:] if k.startswith(_PADDED) else v
        return arrays, meta

    def _read_manifest(self, step: int) -> tuple[np.ndarray, np.ndarray, dict]:
        arrays, meta = self._load_step(step)
        loc, at = arrays["location"], arrays["saved_at"]
        B = self.partition.num_blocks
        if loc.shape != (B,) or at.shape != (B,) or np.any(loc < 0) or np.any(loc > step):
            raise CheckpointError(f"checkpoint step {step} in {self.directory} has an invalid manifest")
        return loc, at, arrays

    def manifest(self) -> tuple[int, np.ndarray, np.ndarray]:
        """``(latest_step, location[B], saved_at[B])`` of the last committed save."""
        latest = self.latest_step()
        if latest is None:
            raise CheckpointError(f"no committed checkpoint in {self.directory}")
        loc, at, _ = self._read_manifest(latest)
        return latest, loc, at

    def verify(self) -> int:
        """Read and checksum every step the latest manifest references; returns the
        latest step. Raises :class:`CheckpointError` on any problem."""
        latest, loc, _ = self.manifest()
        for s in np.unique(loc):
            arrays, _ = self._load_step(int(s))
            saved = arrays["ids"]
            if not np.all(np.isin(np.nonzero(loc == s)[0], saved)):
                raise CheckpointError(f"checkpoint step {int(s)} lacks blocks its manifest assigns to it")
        return latest

    def restore(self, state: Any, block_mask: Any | None = None, *, include_never: bool | None = None) -> Any:
        """``state`` with the blocks in ``block_mask`` read back from the last committed
        running checkpoint (partial recovery, Sec 5.4.1). ``block_mask=None`` reads every
        block and the never-lost leaves (full recovery / :meth:`load`). Waits for an
        in-flight write first."""
        from scarjax.core import State

        self._mgr.wait_until_finished()
        B = self.partition.num_blocks
        full = block_mask is None
        want = np.ones((B,), bool) if full else np.asarray(block_mask, bool)
        if want.shape != (B,):
            raise ValueError(f"block_mask must have shape ({B},), got {want.shape}")
        include_never = full if include_never is None else bool(include_never)
        leaves = [np.array(x, copy=True) for x in self._check_state(state)]
        latest, loc, _ = self.manifest()
        steps = set(int(s) for s in np.unique(loc[want])) if want.any() else set()
        if include_never:
            steps.add(latest)
        for s in sorted(steps):
            arrays = self._read_manifest(s)[2] if s == latest else self._load_step(s)[0]
            saved_mask = np.zeros((B,), bool)
            saved_mask[arrays["ids"]] = True
            stored = self._full_masks(saved_mask, include_never=True)
            take_blocks = want & (loc == s)
            wanted = self._full_masks(take_blocks, include_never=include_never and s == latest)
            for i, (x, m_st, m_w) in enumerate(zip(leaves, stored, wanted)):
                vals = arrays[f"leaf_{i}"]
                if vals.shape != (int(m_st.sum()),):
                    raise CheckpointError(f"checkpoint step {s}: leaf {i} has {vals.shape} values, expected {int(m_st.sum())}")
                if not m_w.any():
                    continue
                sel = m_w[m_st]
                x[m_w] = vals[sel].astype(x.dtype)
        out = [jnp.asarray(x) for x in leaves]
        return State(*jax.tree.unflatten(self._treedef, out))

    def load(self, template: Any) -> Any:
        """The whole running checkpoint (every block plus the never-lost leaves) in the
        structure of ``template``."""
        return self.restore(template, None)


# --------------------------------------------------------------------------------------
# The driver.


@dataclasses.dataclass
class PersistentRun:
    """Result of :func:`run`.

    Attributes:
      state: the final state.
      loss: ``[steps + 1]`` full-data loss per iteration (as ``Trace.loss``).
      delta: ``[steps]`` ‖δ_k‖ of the recovery (0 except at the failure).
      events: one dict per checkpoint / failure: ``step``, ``kind``, ``blocks``,
        ``select_s`` (priority selection + cache update, device time), ``save_call_s``
        (time the training loop blocked handing the write off), ``delta`` (failure).
      checkpoint: the final in-memory running checkpoint (the PS cache).
      train_s: wall time spent in the compiled training segments (includes compilation
        the first time a segment length is seen).
    """

    state: Any
    loss: np.ndarray
    delta: np.ndarray
    events: list
    checkpoint: ck.CheckpointState
    train_s: float = 0.0


# Checkpoint specs hash by identity and norms are functions: reusing the same spec object
# across runs reuses the compiled selection + cache update.
_ckpt_step_jit = jax.jit(ck.step, static_argnums=(0, 6))


def run(
    algorithm: Any,
    partition: pt.Partition,
    checkpoint: ck.Checkpoint,
    steps: int,
    key: jax.Array | int,
    directory: str | os.PathLike,
    *,
    failure: Any = None,
    recovery: str = "partial",
    after_recovery: Callable[[Any, Any], Any] | None = None,
    hooks: Any = None,
    async_write: bool = True,
    on_save: Callable[[int, Any, np.ndarray], None] | None = None,
    init_state: Any = None,
    segment: int | None = None,
) -> PersistentRun:
    """Train with SCAR's running checkpoint on disk (Sec 5.4.3) and optional failures.

    The compiled loop :func:`scarjax.run` runs in segments between events; segment
    starting at iteration ``k0`` uses key ``fold_in(key, k0)`` (so minibatches differ
    from one unsegmented ``scarjax.run`` with ``key``), and any ``hooks`` are
    re-initialised per segment. At each checkpoint iteration (see
    :func:`scarjax.checkpoint.due`) the in-memory cache is updated by
    :func:`scarjax.checkpoint.step` and the selected blocks are handed to
    :meth:`PersistentCheckpoint.save` (asynchronous); at the failure iteration
    (``failure.at`` or drawn from ``failure.geometric`` with ``key``) the lost blocks are
    read back from disk (``'partial'``) or the whole checkpoint is (``'full'``), then
    ``after_recovery(state, data)`` is applied. A failure is handled before a checkpoint
    at the same iteration. ``on_save(step, cache, block_mask)`` is called before each
    write is handed off (used by the crash test to record what each save must contain).
    ``segment``: also cut the loop every ``segment`` iterations; runs whose events all
    fall on multiples of ``segment`` then see identical keys (minibatches), which makes
    runs with different checkpoint schedules directly comparable.

    Returns:
      :class:`PersistentRun`.
    """
    from scarjax import faults
    from scarjax import run as run_loop
    from scarjax.core import Algorithm, State, _as_key

    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    if not isinstance(checkpoint, ck.Checkpoint):
        raise TypeError(f"checkpoint must be a Checkpoint, got {type(checkpoint).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, (int, np.integer)) or steps < 1:
        raise ValueError(f"steps must be an int >= 1, got {steps!r}")
    for nm in ("fraction", "period"):
        v = getattr(checkpoint, nm)
        if v is not None and (tu.is_traced(v) or np.ndim(v) != 0):
            raise ValueError(f"the persistent driver needs a concrete checkpoint {nm}, got {v!r}")
    if failure is not None and not isinstance(failure, faults.Failure):
        raise TypeError(f"failure must be a scarjax.faults.Failure or None, got {type(failure).__name__}")
    if recovery not in faults.RECOVERIES:
        raise ValueError(f"recovery must be one of {faults.RECOVERIES}, got {recovery!r}")
    key = _as_key(key)
    k_init, k_fail, k_lost, k_ck = jax.random.split(key, 4)
    state = State(*init_state) if init_state is not None else algorithm.init(k_init, algorithm.data)
    state = State(*state)
    # Event iterations.
    save_at = []
    if checkpoint.period is not None:
        iv = int(ck.interval(checkpoint))
        save_at = list(range(iv, steps, iv))
    fail_at = None
    if failure is not None:
        failure.check(partition)
        fail_at = int(failure.time(k_fail))
        if not 0 <= fail_at < steps:
            fail_at = None
    events_at = set(save_at) | ({fail_at} if fail_at is not None else set())
    if segment is not None:
        if isinstance(segment, bool) or not isinstance(segment, (int, np.integer)) or segment < 1:
            raise ValueError(f"segment must be an int >= 1 or None, got {segment!r}")
        events_at |= set(range(int(segment), steps, int(segment)))
    events_at = sorted(events_at)
    store = PersistentCheckpoint(directory, partition, state, async_write=async_write)
    if store.latest_step() is not None:
        raise ValueError(
            f"directory {str(directory)!r} already holds a running checkpoint (step "
            f"{store.latest_step()}); run() starts a new one: give an empty directory"
        )
    store.initialize(state)
    cache = ck.init(state, partition)
    norm = algorithm.norm
    losses = [np.asarray(algorithm.loss(state, algorithm.data))[None]]
    delta = np.zeros((steps,), np.float32)
    events: list[dict] = []
    train_s = 0.0
    k = 0
    for stop in events_at + [steps]:
        if stop > k:
            t0 = time.perf_counter()
            state, trace = run_loop(algorithm, hooks, stop - k, jax.random.fold_in(key, k), init_state=state)
            losses.append(np.asarray(trace.loss[1:]))
            train_s += time.perf_counter() - t0
            k = stop
        if k >= steps:
            break
        if k == fail_at:
            lost = np.asarray(faults.lost_blocks(failure, partition, k_lost))
            t0 = time.perf_counter()
            rec = store.restore(state, lost) if recovery == "partial" else store.load(state)
            if after_recovery is not None:
                rec = State(*after_recovery(rec, algorithm.data))
            d = float(norm(tu.tree_sub(rec.params, state.params)))
            delta[k] = d
            state = rec
            events.append({"step": k, "kind": "failure", "blocks": int(lost.sum()), "delta": d,
                           "recover_s": time.perf_counter() - t0})
        if k in save_at:
            t0 = time.perf_counter()
            cache, mask = _ckpt_step_jit(checkpoint, cache, state, partition, jnp.asarray(k, jnp.int32),
                                         jax.random.fold_in(k_ck, k), algorithm.norm)
            mask = np.asarray(jax.block_until_ready(mask))
            t_sel = time.perf_counter() - t0
            if on_save is not None:
                on_save(k, cache, mask)
            t_call = store.save(k, state, mask)
            events.append({"step": k, "kind": "checkpoint", "blocks": int(mask.sum()),
                           "select_s": t_sel, "save_call_s": t_call})
    store.close()
    loss = np.concatenate(losses)
    return PersistentRun(state=state, loss=loss, delta=delta, events=events, checkpoint=cache, train_s=train_s)
