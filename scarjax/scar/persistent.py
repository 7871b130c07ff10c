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
iteration it was saved at), so every committed step describes a consistent running
checkpoint: the one of that save. A crash during a write leaves at most an uncommitted
``*.orbax-checkpoint-tmp*`` directory, which is never read (and is cleaned up on the next
open).

**Surviving corruption.** The store keeps the running checkpoints of the last ``keep``
(default 2) intact saves: after each commit it deletes only the steps that none of the
last ``keep`` manifests references (with the ``full`` strategy: all but the last ``keep``
steps; with ``priority``/``round_robin``/``random``, a block's latest copy may live in
an older step, which is then kept). Every step is verified before it is used, at two
levels: each file the write produced is recorded (size and SHA-256, in ``files.json``,
written into the step before orbax's atomic rename, so it commits with the step) and
checked before orbax reads it — so a missing, truncated or altered file is named
precisely and orbax never parses damaged data — and every saved array carries a SHA-256
checksum in the step's metadata, checked after reading. A step that fails either check
is *skipped*, never partly used: opening the store (or a recovery) falls back to the
newest running checkpoint all of whose steps verify, with a :class:`CheckpointWarning`
naming the damaged step and what was wrong; if none is left, :class:`CheckpointError`
names the directory. The metadata also records the layout (leaf shapes and dtypes, the
partition's block map fingerprint), so a checkpoint is never read back into a
differently shaped or partitioned state (that raises at once: it is a mismatch, not
damage).

:func:`run` is the driver: it runs the compiled loop (:func:`scarjax.run`) in segments
between checkpoints and failures, updates the in-memory cache with the same pure code
as the in-memory backend (:func:`scarjax.scar.checkpoint.step`: priority selection and cache
update, the only checkpoint work on the training path), hands the selected blocks to
:meth:`PersistentCheckpoint.save`, and on a failure recovers the lost blocks (or the
whole state) by reading them back from disk.

On-disk layout (``directory/<step>/``, ``step`` = the training iteration of the save):

* ``blocks/`` (orbax ``StandardSave``): ``ids`` (the saved block ids), ``leaf_i`` (the
  entries of state leaf ``i`` belonging to the saved blocks or never lost, C order),
  ``location`` and ``saved_at`` (the manifest, one entry per block);
* ``meta/`` (orbax ``JsonSave``): format version, step, layout, array checksums;
* ``files.json``: ``{relative path: [size, sha256]}`` of every file under ``blocks/``
  and ``meta/``.

Stores are closed deterministically: :meth:`PersistentCheckpoint.close` (or the ``with``
statement) waits for the write in flight; a store still open when the interpreter exits
is closed before Python shuts its thread pools down (otherwise orbax's background
commit fails with "cannot schedule new futures after interpreter shutdown" and the last
save is lost).
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (registers its exit hook before ours, see _register_exit)
import dataclasses
import hashlib
import json
import os
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import schedules as sch
from scarjax import tree as tu
from scarjax.core import Algorithm, State
from scarjax.core import run as run_loop
from scarjax.hooks import flatten_hooks
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults
from scarjax.scar import partition as pt

PyTree = Any

__all__ = [
    "CheckpointError",
    "CheckpointWarning",
    "PersistentCheckpoint",
    "PersistentRun",
    "run",
    "FORMAT_VERSION",
]

# 2: every step carries files.json (format 1 steps had none and are not read).
FORMAT_VERSION = 2
_RECORD = "files.json"
_ITEMS = ("blocks", "meta")


class CheckpointError(RuntimeError):
    """A persistent checkpoint is missing, incomplete, corrupted or does not match the
    state/partition it is read into."""


class CheckpointWarning(UserWarning):
    """A damaged step was skipped; the running checkpoint of an older step is used."""


class _Damaged(CheckpointError):
    """Step ``step`` cannot be used: ``reason`` (missing/truncated/altered file,
    checksum mismatch, unreadable)."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"step {step}: {reason}")
        self.step, self.reason = int(step), reason


def _sha(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    h = hashlib.sha256()
    h.update(str(a.dtype).encode())
    h.update(str(a.shape).encode())
    h.update(a.tobytes())
    return h.hexdigest()


def _file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _record_files(step_dir: Path) -> None:
    """Write ``step_dir/files.json``: size and SHA-256 of every file under the items'
    directories (atomically: a temporary file renamed into place)."""
    files = {}
    for item in _ITEMS:
        for p in sorted((step_dir / item).rglob("*")):
            if p.is_file():
                files[p.relative_to(step_dir).as_posix()] = [p.stat().st_size, _file_sha(p)]
    tmp = step_dir / (_RECORD + ".tmp")
    tmp.write_text(json.dumps({"format": FORMAT_VERSION, "files": files}))
    os.replace(tmp, step_dir / _RECORD)


def _check_files(step: int, step_dir: Path) -> None:
    """Compare the files of a committed step with its ``files.json``; raise
    :class:`_Damaged` naming the first missing, truncated or altered file."""
    rec_path = step_dir / _RECORD
    if not rec_path.is_file():
        raise _Damaged(step, f"missing file {_RECORD} (the step's file record)")
    try:
        files = json.loads(rec_path.read_text())["files"]
        files = {str(k): (int(v[0]), str(v[1])) for k, v in files.items()}
    except (ValueError, KeyError, TypeError, IndexError, OSError) as e:
        raise _Damaged(step, f"unreadable file {_RECORD} ({type(e).__name__}: {e})") from None
    for name, (size, digest) in sorted(files.items()):
        p = step_dir / name
        if not p.is_file():
            raise _Damaged(step, f"missing file {name}")
        actual = p.stat().st_size
        if actual < size:
            raise _Damaged(step, f"truncated file {name} ({actual} of {size} bytes)")
        if actual != size:
            raise _Damaged(step, f"file {name} has {actual} bytes, {size} were written")
        if _file_sha(p) != digest:
            raise _Damaged(
                step, f"checksum mismatch in file {name} (its SHA-256 differs from the one recorded at commit)"
            )


def _pad(a: np.ndarray) -> np.ndarray:
    return np.concatenate([np.zeros((1,), a.dtype), a.ravel()])


_PADDED = ("ids", "leaf_")


def _ocp():
    # orbax is slow to import and needed only for checkpoints on disk
    import orbax.checkpoint as ocp

    return ocp


def _check_directory(directory: Any) -> Path:
    """The absolute directory of a store, created if missing; ``ValueError`` naming
    ``directory`` and the reason when it cannot hold a checkpoint."""
    if isinstance(directory, bytes) or not isinstance(directory, (str, os.PathLike)):
        raise TypeError(f"directory must be a str or os.PathLike, got {type(directory).__name__}")
    path = Path(directory).expanduser().absolute()
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"directory {str(path)!r} exists and is not a directory (a regular file or other non-directory)"
        )
    if not path.exists():
        parent = path.parent
        while not parent.exists():
            parent = parent.parent
        if not parent.is_dir():
            raise ValueError(f"directory {str(path)!r} cannot be created: {str(parent)!r} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise ValueError(
                f"directory {str(path)!r} cannot be created: {str(parent)!r} is not writable (permission denied)"
            )
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ValueError(f"directory {str(path)!r} cannot be created: {e.strerror or e}") from None
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise ValueError(
            f"directory {str(path)!r} is not writable (permission denied): a checkpoint needs write access"
        )
    return path


def _check_keep(keep: Any) -> None:
    if isinstance(keep, bool) or not isinstance(keep, (int, np.integer)) or keep < 1:
        raise ValueError(f"keep must be an int >= 1 (running checkpoints kept on disk), got {keep!r}")


# Stores not yet closed. At interpreter exit they are closed *before* Python shuts its
# thread pools down (threading's exit hooks run last-registered first, and
# concurrent.futures.thread registered its hook when it was imported above); a plain
# atexit hook would run after, when orbax's commit can no longer schedule work.
_OPEN: dict[int, "PersistentCheckpoint"] = {}
_EXIT_LOCK = threading.Lock()
_EXIT_REGISTERED = False


def _close_open_stores() -> None:
    for store in list(_OPEN.values()):
        try:
            store.close()
        except Exception as e:  # report, never a traceback at exit
            warnings.warn(
                f"closing the checkpoint in {store.directory} at exit failed: {e}", CheckpointWarning, stacklevel=1
            )


def _register_exit() -> None:
    global _EXIT_REGISTERED
    with _EXIT_LOCK:
        if _EXIT_REGISTERED:
            return
        register = getattr(threading, "_register_atexit", None)
        try:
            if register is not None:
                register(_close_open_stores)
            else:  # pragma: no cover - CPython has had threading._register_atexit since 3.9

                atexit.register(_close_open_stores)
        except RuntimeError:  # already shutting down
            return
        _EXIT_REGISTERED = True


class PersistentCheckpoint:
    """SCAR's running checkpoint in ``directory`` (see the module docstring).

    Args:
      directory: where the checkpoint lives; created (with its parents) if missing. A
        ``ValueError`` naming it is raised here when it is an existing file, cannot be
        created or is not writable.
      partition: the :class:`~scarjax.scar.partition.Partition` of the state.
      template: a state with the structure, shapes and dtypes of the checkpointed state
        (values unused; ``jax.eval_shape`` output works).
      async_write: write in the background (default; Sec 5.4.3 step 4). ``False`` makes
        :meth:`save` block until the step is committed.
      keep: how many of the newest intact running checkpoints stay on disk (default 2,
        so a damaged newest step can be skipped; ``1`` keeps only the newest, as the
        in-memory backend does, and cannot survive its corruption). With partial
        strategies the steps their manifests reference stay as well.

    Opening a directory that already holds a checkpoint verifies it (every committed
    step is read and checksummed once) and resumes from the newest intact running
    checkpoint, warning (:class:`CheckpointWarning`) about each damaged step.

    Example::

      with PersistentCheckpoint(path, part, state0) as store:
          store.initialize(state0)           # the running checkpoint starts at w(0)
          store.save(8, state, mask)         # returns at once; written asynchronously
          state = store.restore(state, lost) # partial recovery of lost blocks from disk
          full = store.load(state)           # full recovery (the whole running checkpoint)
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        partition: pt.Partition,
        template: Any,
        *,
        async_write: bool = True,
        keep: int = 2,
    ):
        if not isinstance(partition, pt.Partition):
            raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
        _check_keep(keep)
        if not isinstance(template, State):
            template = State(*template) if isinstance(template, tuple) else State(template, ())
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
        self.directory = _check_directory(directory)
        self.partition = partition
        self.keep = int(keep)
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
        self.bytes_written = 0
        self.restored_from: int | None = None  # the step whose running checkpoint the last read used
        B = partition.num_blocks
        # Known manifests of committed steps: step -> (location[B], saved_at[B]); steps
        # found damaged: step -> reason. The base is the running checkpoint reads use and
        # the next save builds on: the newest manifest whose steps are all undamaged.
        self._manifests: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._damaged: dict[int, str] = {}
        self._base: int | None = None
        self._location = np.full((B,), -1, np.int64)
        self._saved_at = np.zeros((B,), np.int32)
        self._pending: tuple[int, np.ndarray, np.ndarray] | None = None  # write in flight
        self._seal_error: BaseException | None = None
        self._wrote = False  # only a store that saved collects garbage
        self._closed = False
        ocp = _ocp()
        try:
            # Always orbax's asynchronous checkpointer (its post-finalization callback
            # records the files before the commit); async_write=False waits per save.
            self._mgr = ocp.CheckpointManager(
                self.directory,
                options=ocp.CheckpointManagerOptions(
                    enable_async_checkpointing=True,
                    create=True,
                    cleanup_tmp_directories=True,
                    async_options=ocp.AsyncOptions(post_finalization_callback=self._seal_in_flight),
                ),
            )
        except OSError as e:
            raise ValueError(f"directory {str(self.directory)!r} cannot hold a checkpoint: {e}") from None
        _register_exit()
        _OPEN[id(self)] = self
        try:
            self._open()
        except BaseException:
            self._close(raise_errors=False)
            raise

    # ---------------------------------------------------------------- bookkeeping

    def _committed(self, reload: bool = True) -> list[int]:
        """Committed steps; ``reload=False`` trusts orbax's own bookkeeping (cheap: used
        on the save path, where nothing is in flight and only this store writes)."""
        if reload:
            self._mgr.reload()
        return sorted(int(s) for s in self._mgr.all_steps())

    def _refs(self, step: int) -> set[int]:
        return set(int(s) for s in np.unique(self._manifests[step][0])) | {step}

    def _usable(self, step: int, committed: set[int]) -> bool:
        return step in self._manifests and all(
            r in committed and r not in self._damaged for r in self._refs(step)
        )

    def _rebase(self, committed: set[int] | None = None) -> None:
        """Make the newest usable manifest the base."""
        committed = set(self._committed()) if committed is None else committed
        usable = [s for s in self._manifests if self._usable(s, committed)]
        B = self.partition.num_blocks
        if usable:
            self._base = max(usable)
            loc, at = self._manifests[self._base]
            self._location, self._saved_at = loc.copy(), at.copy()
        else:
            self._base = None
            self._location = np.full((B,), -1, np.int64)
            self._saved_at = np.zeros((B,), np.int32)

    def _warn_damaged(self, step: int, reason: str) -> None:
        using = (
            f"using the running checkpoint of step {self._base} instead"
            if self._base is not None
            else "no intact running checkpoint is left"
        )
        warnings.warn(
            f"checkpoint step {step} in {self.directory} is damaged and was skipped: {reason}; {using}",
            CheckpointWarning,
            stacklevel=5,
        )

    def _mark_damaged(self, step: int, reason: str) -> None:
        self._damaged[step] = reason
        self._rebase()
        self._warn_damaged(step, reason)

    def _no_intact(self) -> CheckpointError:
        bad = "; ".join(f"step {s}: {r}" for s, r in sorted(self._damaged.items()))
        return CheckpointError(
            f"no intact running checkpoint in {self.directory}" + (f" (damaged: {bad})" if bad else "")
        )

    def _open(self) -> None:
        """Read and verify every committed step (newest first), then pick the base."""
        committed = self._committed()
        for s in reversed(committed):
            try:
                self._manifests[s] = self._manifest_of(s, self._load_step(s)[0])
            except _Damaged as d:
                self._damaged[d.step] = d.reason
        present = set(committed)
        self._rebase(present)
        # Newer saves than the base that were skipped because a step they reference is
        # gone (older manifests legitimately reference steps collected since).
        for m in sorted(self._manifests, reverse=True):
            if self._base is not None and m <= self._base:
                break
            for r in sorted(self._refs(m) - present):
                self._damaged.setdefault(r, f"the step is missing (the manifest of step {m} references it)")
        for s, reason in sorted(self._damaged.items()):
            self._warn_damaged(s, reason)
        if committed and self._base is None:
            raise self._no_intact()

    def steps(self) -> list[int]:
        """Committed steps on disk (including any found damaged)."""
        return self._committed()

    def latest_step(self) -> int | None:
        """The step of the running checkpoint reads use: the newest save whose steps all
        verified (``None`` before :meth:`initialize`). A write in flight counts once it
        is committed."""
        if self._pending is not None and not self._mgr.is_saving_in_progress():
            self._finish()
        return self._base

    def damaged_steps(self) -> dict[int, str]:
        """``{step: reason}`` of the steps found damaged (and skipped) so far."""
        return dict(self._damaged)

    def _seal_in_flight(self) -> None:
        """orbax's post-finalization callback (its background thread, after every file
        is written and before the atomic rename): record the step's files."""
        try:
            if jax.process_index() != 0 or self._pending is None:
                return
            step = self._pending[0]
            tmp = sorted(self.directory.glob(f"{step}.orbax-checkpoint-tmp*"), key=lambda p: p.stat().st_mtime)
            target = tmp[-1] if tmp else self.directory / str(step)  # (committed already: rename-free storage)
            _record_files(target)
        except BaseException as e:  # reported by _finish in the caller's thread
            self._seal_error = e

    def _finish(self) -> None:
        """Wait for the write in flight; on success its manifest becomes the base."""
        try:
            self._mgr.wait_until_finished()
        except Exception as e:
            pending, self._pending = self._pending, None
            self._rebase()  # the next save builds on the last committed manifest
            step = pending[0] if pending is not None else "?"
            raise CheckpointError(
                f"writing checkpoint step {step} to {self.directory} failed: {type(e).__name__}: {e}"
            ) from e
        pending, self._pending = self._pending, None
        if self._seal_error is not None:
            err, self._seal_error = self._seal_error, None
            self._rebase()
            raise CheckpointError(
                f"recording the files of checkpoint step {pending[0] if pending else '?'} in "
                f"{self.directory} failed: {type(err).__name__}: {err}"
            ) from err
        if pending is not None:
            step, loc, at = pending
            self._manifests[step] = (loc, at)
            self._damaged.pop(step, None)
            self._wrote = True
            self._rebase(set(self._committed(reload=False)))

    def wait(self) -> None:
        """Block until the in-flight write (if any) is committed, then delete the steps
        the last ``keep`` intact manifests no longer reference."""
        self._finish()
        self._gc()

    def close(self) -> None:
        """Wait for the write in flight, collect garbage and release orbax's resources
        (idempotent)."""
        self._close(raise_errors=True)

    def _close(self, raise_errors: bool) -> None:
        if self._closed:
            return
        try:
            self._finish()
            self._gc()
        except Exception:
            if raise_errors:
                raise
        finally:
            self._closed = True
            _OPEN.pop(id(self), None)
            try:
                self._mgr.close()
            except Exception:
                if raise_errors:
                    raise

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        self._close(raise_errors=exc_type is None)

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
        if self.latest_step() is not None or self._committed():
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
        if self._closed:
            raise CheckpointError(f"the checkpoint in {self.directory} is closed")
        B = self.partition.num_blocks
        if block_mask.shape != (B,):
            raise ValueError(f"block_mask must have shape ({B},), got {block_mask.shape}")
        leaves = self._check_state(state)
        # One write in flight: the previous one must be committed before the next
        # manifest (which may reference it) is written, and before garbage collection.
        self._finish()
        committed = self._committed(reload=False)
        if committed and step <= committed[-1]:
            raise ValueError(f"step {step} must be after the latest saved step {committed[-1]}")
        if committed and self._base is None:
            raise self._no_intact()
        self._gc(committed)
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
        self._pending = (step, location, saved_at)
        try:
            self._mgr.save(
                step,
                args=ocp.args.Composite(blocks=ocp.args.StandardSave(arrays), meta=ocp.args.JsonSave(meta)),
                force=True,
            )
        except Exception as e:
            self._pending = None
            raise CheckpointError(
                f"writing checkpoint step {step} to {self.directory} failed: {type(e).__name__}: {e}"
            ) from e
        self._location, self._saved_at = location, saved_at
        self.bytes_written += int(sum(v.nbytes for v in arrays.values()))
        if sync:
            self._finish()
            self._gc()

    def _gc(self, committed: list[int] | None = None) -> None:
        """Delete the committed steps that none of the last ``keep`` usable manifests
        references (and that are older than the newest of them: a damaged step newer
        than every intact one stays until a newer save commits). Only once this store
        has saved: opening a checkpoint to read it never deletes anything."""
        if not self._wrote:
            return
        committed = self._committed() if committed is None else committed
        present = set(committed)
        usable = sorted(s for s in self._manifests if self._usable(s, present))
        kept = usable[-self.keep:]
        if not kept:
            return
        needed = set().union(*(self._refs(m) for m in kept))
        for s in committed:
            if s not in needed and s < kept[-1]:
                self._mgr.delete(s)
                self._manifests.pop(s, None)
                self._damaged.pop(s, None)

    # ---------------------------------------------------------------- reading

    def _check_state(self, state: Any) -> list:
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
        """Every array of committed step ``step``, verified: its files against
        ``files.json`` (before orbax reads them), the layout, and each array's checksum.
        Raises :class:`_Damaged` (damage) or :class:`CheckpointError` (layout)."""
        ocp = _ocp()
        path = self.directory / str(step)
        if not path.is_dir():
            raise _Damaged(step, "the step directory is missing")
        _check_files(step, path)
        try:
            out = self._mgr.restore(
                step, args=ocp.args.Composite(blocks=ocp.args.StandardRestore(), meta=ocp.args.JsonRestore())
            )
        except Exception as e:  # files verified; this is damage orbax found (or a format error)
            raise _Damaged(step, f"unreadable by orbax ({type(e).__name__}: {e})") from e
        arrays, meta = dict(out["blocks"]), out["meta"]
        if not isinstance(meta, dict) or "checksums" not in meta:
            raise _Damaged(step, "no valid metadata")
        for k in ("format", "num_blocks", "shapes", "dtypes", "partition_sha256"):
            if meta.get(k) != self._layout[k]:
                raise CheckpointError(
                    f"checkpoint step {step} in {self.directory} was written for a different "
                    f"layout ({k}: {meta.get(k)!r} != {self._layout[k]!r})"
                )
        sums = meta["checksums"]
        if set(sums) != set(arrays):
            raise _Damaged(step, f"arrays {sorted(arrays)} do not match the metadata {sorted(sums)}")
        for k, v in arrays.items():
            v = np.asarray(v)
            if _sha(v) != sums[k]:
                raise _Damaged(step, f"checksum mismatch for array {k!r} (corrupted data)")
            arrays[k] = v[1:] if k.startswith(_PADDED) else v
        return arrays, meta

    def _manifest_of(self, step: int, arrays: dict) -> tuple[np.ndarray, np.ndarray]:
        loc, at = arrays["location"], arrays["saved_at"]
        B = self.partition.num_blocks
        if loc.shape != (B,) or at.shape != (B,) or np.any(loc < 0) or np.any(loc > step):
            raise _Damaged(step, "invalid manifest")
        if not np.all(loc[arrays["ids"]] == step):
            raise _Damaged(step, "invalid manifest (blocks saved in the step are located elsewhere)")
        return loc.astype(np.int64), at.astype(np.int32)

    def manifest(self) -> tuple[int, np.ndarray, np.ndarray]:
        """``(step, location[B], saved_at[B])`` of the running checkpoint reads use (the
        last completed save whose steps are intact)."""
        self._finish()
        if self._base is None:
            if not self._committed():
                raise CheckpointError(f"no committed checkpoint in {self.directory}")
            raise self._no_intact()
        return self._base, self._location.copy(), self._saved_at.copy()

    def _read(self, want: np.ndarray, include_never: bool) -> tuple[int, np.ndarray, dict[int, dict]]:
        """The arrays of every step the base's manifest needs for blocks ``want`` (and
        the never-lost leaves), all verified; a damaged step is skipped with a warning
        and the next usable manifest tried."""
        self._finish()
        while True:
            if self._base is None:
                if not self._committed():
                    raise CheckpointError(f"no committed checkpoint in {self.directory}")
                raise self._no_intact()
            base, loc = self._base, self._location.copy()
            need = set(int(s) for s in np.unique(loc[want])) if want.any() else set()
            if include_never:
                need.add(base)
            try:
                arrays = {}
                for s in sorted(need):
                    arrays[s] = self._load_step(s)[0]
                    if not np.all(np.isin(np.nonzero(want & (loc == s))[0], arrays[s]["ids"])):
                        raise _Damaged(s, f"lacks blocks the manifest of step {base} assigns to it")
            except _Damaged as d:
                if d.step in self._damaged:  # cannot happen for a usable base; never loop
                    raise CheckpointError(f"checkpoint step {d.step} in {self.directory}: {d.reason}") from d
                self._mark_damaged(d.step, d.reason)
                continue
            self.restored_from = base
            return base, loc, arrays

    def verify(self) -> int:
        """Read and checksum every step the running checkpoint references, skipping
        damaged ones (with a :class:`CheckpointWarning`) as a recovery would; returns the
        step of the running checkpoint that verified. Raises :class:`CheckpointError`
        if none does."""
        return self._read(np.ones((self.partition.num_blocks,), bool), include_never=True)[0]

    def restore(self, state: Any, block_mask: Any | None = None, *, include_never: bool | None = None) -> Any:
        """``state`` with the blocks in ``block_mask`` read back from the newest intact
        running checkpoint (partial recovery, Sec 5.4.1). ``block_mask=None`` reads every
        block and the never-lost leaves (full recovery / :meth:`load`). Waits for an
        in-flight write first. A damaged step is skipped (:class:`CheckpointWarning`)
        and an older running checkpoint used; ``restored_from`` tells which."""
        B = self.partition.num_blocks
        full = block_mask is None
        want = np.ones((B,), bool) if full else np.asarray(block_mask, bool)
        if want.shape != (B,):
            raise ValueError(f"block_mask must have shape ({B},), got {want.shape}")
        include_never = full if include_never is None else bool(include_never)
        leaves = [np.array(x, copy=True) for x in self._check_state(state)]
        base, loc, by_step = self._read(want, include_never)
        for s, arrays in sorted(by_step.items()):
            saved_mask = np.zeros((B,), bool)
            saved_mask[arrays["ids"]] = True
            stored = self._full_masks(saved_mask, include_never=True)
            take_blocks = want & (loc == s)
            wanted = self._full_masks(take_blocks, include_never=include_never and s == base)
            for i, (x, m_st, m_w) in enumerate(zip(leaves, stored, wanted)):
                vals = arrays[f"leaf_{i}"]
                if vals.shape != (int(m_st.sum()),):
                    raise CheckpointError(
                        f"checkpoint step {s}: leaf {i} has {vals.shape} values, expected {int(m_st.sum())}"
                    )
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
        A failure event also has ``restored_from``: the step whose running checkpoint
        the recovery read (older than the last save when that save was found damaged).
      train_s: wall time spent in the compiled training segments (includes compilation
        the first time a segment length is seen).
      fail_at: the first failure iteration: for a :func:`scarjax.schedules.geometric`
        ``failure.when`` its draw, which may fall at or after ``steps`` (then no failure
        happened in this run); otherwise the first step the schedule fired at in the
        run. ``None`` without a failure (or when the schedule never fired).
    """

    state: Any
    loss: np.ndarray
    delta: np.ndarray
    events: list
    checkpoint: ck.CheckpointState
    train_s: float = 0.0
    fail_at: int | None = None


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
    keep: int = 2,
) -> PersistentRun:
    """Train with SCAR's running checkpoint on disk (Sec 5.4.3) and optional failures.

    The compiled loop :func:`scarjax.run` runs in segments between events; segment
    starting at iteration ``k0`` uses key ``fold_in(key, k0)`` (so minibatches differ
    from one unsegmented ``scarjax.run`` with ``key``), and any ``hooks`` are
    re-initialised per segment. At each checkpoint iteration (see
    :func:`scarjax.scar.checkpoint.due`) the in-memory cache is updated by
    :func:`scarjax.scar.checkpoint.step` and the selected blocks are handed to
    :meth:`PersistentCheckpoint.save` (asynchronous); at each failure iteration (where
    ``failure.when`` fires) the lost blocks are read back from disk (``'partial'``) or the
    whole checkpoint is (``'full'``), and the state is recovered with the same functions
    as the in-memory hook :func:`scarjax.scar.faults.scar`
    (:func:`~scarjax.scar.faults.lost_blocks`, :func:`~scarjax.scar.faults.recover`,
    :func:`~scarjax.scar.faults.apply_after_recovery`). A failure is handled before a
    checkpoint at the same iteration.

    Randomness: ``key`` splits into ``(k_init, k_fail, k_lost, k_ck)``. The failure
    schedule's state is ``failure.when.init(k_fail)`` (a geometric time: that draw) and it
    is evaluated at step ``k`` with ``fold_in(k_fail, k)``; failure ``n`` (from 0) loses
    ``lost_blocks(failure, partition, k_lost)`` for ``n = 0`` and ``fold_in(k_lost, n)``
    after, as in the hook. The checkpoint at step ``k`` selects with ``fold_in(k_ck, k)``;
    a checkpoint ``when`` schedule is initialised from ``fold_in(key, 4)``. Both schedules
    are evaluated on the host for every step before the run, to cut it into segments. ``on_save(step, cache, block_mask)`` is called before each
    write is handed off (used by the crash test to record what each save must contain).
    ``segment``: also cut the loop every ``segment`` iterations; runs whose events all
    fall on multiples of ``segment`` then see identical keys (minibatches), which makes
    runs with different checkpoint schedules directly comparable. ``keep``: intact
    running checkpoints kept on disk (:class:`PersistentCheckpoint`); when the newest
    save is found damaged at recovery, the previous one is used (with a
    :class:`CheckpointWarning`) and the in-memory cache is reset to what is on disk.

    Hooks scheduled for given steps (``scheduled(hook, k)``, :func:`~scarjax.schedules.at`,
    :func:`~scarjax.schedules.every`, ``with_probability`` with a start: any
    :attr:`scarjax.hooks.Hook.events`) are refused, naming ``hooks``:
    the segments restart their hooks, so such a hook would fire once per segment at a
    segment-relative step instead of once at ``k``. Step-independent hooks (``always``,
    an unstarted ``with_probability``) are accepted.

    Events must fall inside the run: a failure or checkpoint schedule whose first event
    (``Schedule.events``) is at or after ``steps``, or a checkpoint interval
    ``round(fraction·period) >= steps``, raises ``ValueError`` (it would never happen). A
    geometric failure time drawn at or after ``steps`` means no failure in this run
    (recorded in :attr:`PersistentRun.fail_at`).

    Returns:
      :class:`PersistentRun`.
    """
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
        raise TypeError(f"failure must be a scarjax.scar.faults.Failure or None, got {type(failure).__name__}")
    if recovery not in faults.RECOVERIES:
        raise ValueError(f"recovery must be one of {faults.RECOVERIES}, got {recovery!r}")
    if segment is not None:
        if isinstance(segment, bool) or not isinstance(segment, (int, np.integer)) or segment < 1:
            raise ValueError(f"segment must be an int >= 1 or None, got {segment!r}")
    _check_keep(keep)
    scheduled = [(h.name, arg, k) for h in flatten_hooks(hooks) for arg, k in h.events]
    if scheduled:
        name, arg, k = scheduled[0]
        raise ValueError(
            f"hooks: hook {name!r} is scheduled for a given step ({arg}={k}); the persistent driver "
            "restarts hooks in every segment, so it would fire at a segment-relative step, not once "
            "at that step. Use step-independent hooks here (always, an unstarted with_probability)"
        )
    # Event iterations: every scheduled event must fall inside the run.
    if checkpoint.period is not None:
        iv = int(ck.interval(checkpoint))
        if iv >= steps:
            raise ValueError(
                f"checkpoint saves every round(fraction * period) = {iv} iterations, which must be "
                f"< steps ({steps}): no checkpoint would be taken in this run"
            )
    for what, spec_events in (("failure", failure.events() if failure is not None else ()),
                              ("checkpoint", checkpoint.events())):
        late = [k for _, k in spec_events if k >= steps]
        if late:
            raise ValueError(
                f"{what}.when fires first at step {late[0]}, which must be < steps ({steps}): it would "
                "never happen in this run"
            )
    if failure is not None:
        failure.check(partition)
    key = va.check_key("key", key)
    k_init, k_fail, k_lost, k_ck = jax.random.split(key, 4)
    state = State(*init_state) if init_state is not None else algorithm.init(k_init, algorithm.data)
    state = State(*state)
    cache = ck.init(state, partition, checkpoint, jax.random.fold_in(key, 4))
    save_at = _firing_steps(lambda k: ck.due(checkpoint, k, jax.random.fold_in(jax.random.fold_in(k_ck, k), 1),
                                             cache.when), steps)
    fail_drawn, fail_steps = None, []
    if failure is not None:
        when_state = failure.when.init(k_fail)
        fail_steps = _firing_steps(lambda k: failure.when.fires(k, jax.random.fold_in(k_fail, k), when_state), steps)
        if isinstance(failure.when, sch.Geometric):
            fail_drawn = int(when_state)  # the draw, which may fall past the run (no failure)
        elif fail_steps:
            fail_drawn = fail_steps[0]
    events_at = set(save_at) | set(fail_steps)
    if segment is not None:
        events_at |= set(range(int(segment), steps, int(segment)))
    events_at = sorted(events_at)
    path = _check_directory(directory)
    held = sorted(int(p.name) for p in path.iterdir() if p.name.isdigit() and p.is_dir())
    if held:
        raise ValueError(
            f"directory {str(directory)!r} already holds a running checkpoint (steps {held}); "
            "run() starts a new one: give an empty directory"
        )
    store = PersistentCheckpoint(path, partition, state, async_write=async_write, keep=keep)
    try:
        store.initialize(state)
        out = _drive(algorithm, partition, checkpoint, steps, key, store, state, cache, hooks, failure, recovery,
                     after_recovery, on_save, save_at, fail_steps, events_at, k_lost, k_ck)
    except BaseException:
        store._close(raise_errors=False)
        raise
    store.close()
    out.fail_at = fail_drawn
    return out


def _firing_steps(fires: Callable[[jax.Array], jax.Array], steps: int) -> list[int]:
    """The iterations in ``[0, steps)`` at which ``fires(step)`` is true (evaluated on the
    host, vmapped over the steps)."""
    fired = np.asarray(jax.jit(jax.vmap(lambda k: jnp.asarray(fires(k), bool)))(jnp.arange(steps, dtype=jnp.int32)))
    return [int(k) for k in np.flatnonzero(fired)]


def _drive(algorithm, partition, checkpoint, steps, key, store, state, cache, hooks, failure, recovery,
           after_recovery, on_save, save_at, fail_steps, events_at, k_lost, k_ck) -> PersistentRun:
    """The event loop of :func:`run` (the store is opened and closed by the caller)."""
    last_save = 0
    failures = 0
    norm = algorithm.norm
    # the initial loss as one compiled program, not op by op (jax.jit caches it per loss function)
    losses = [np.asarray(jax.jit(algorithm.loss)(state, algorithm.data))[None]]
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
        if k in fail_steps:
            # The same draws as the scar hook: the first failure from k_lost, failure n
            # from fold_in(k_lost, n).
            k_n = k_lost if failures == 0 else jax.random.fold_in(k_lost, failures)
            lost = np.asarray(faults.lost_blocks(failure, partition, k_n))
            failures += 1
            t0 = time.perf_counter()
            # Read back what the recovery needs (the lost blocks, or the whole running
            # checkpoint), then recover exactly as the in-memory hook does.
            saved = store.restore(state, lost) if recovery == "partial" else store.load(state)
            rec = faults.recover(recovery, state, saved, partition, lost)
            used = store.restored_from
            if used != last_save:
                # The newest save was damaged: the running checkpoint on disk is an older
                # one, so the in-memory cache (what priority selection compares with and
                # what saves build on) must be that one too.
                _, _, on_disk_at = store.manifest()
                cache = cache._replace(saved=store.load(state), saved_at=jnp.asarray(on_disk_at, jnp.int32))
            rec = faults.apply_after_recovery(after_recovery, rec, state, algorithm.data)
            d = float(norm(tu.tree_sub(rec.params, state.params)))
            delta[k] = d
            state = rec
            events.append({"step": k, "kind": "failure", "blocks": int(lost.sum()), "delta": d,
                           "restored_from": used, "recover_s": time.perf_counter() - t0})
        if k in save_at:
            t0 = time.perf_counter()
            cache, mask = _ckpt_step_jit(checkpoint, cache, state, partition, jnp.asarray(k, jnp.int32),
                                         jax.random.fold_in(k_ck, k), algorithm.norm)
            mask = np.asarray(jax.block_until_ready(mask))
            t_sel = time.perf_counter() - t0
            if on_save is not None:
                on_save(k, cache, mask)
            t_call = store.save(k, state, mask)
            last_save = k
            events.append({"step": k, "kind": "checkpoint", "blocks": int(mask.sum()),
                           "select_s": t_sel, "save_call_s": t_call})
    loss = np.concatenate(losses)
    return PersistentRun(state=state, loss=loss, delta=delta, events=events, checkpoint=cache, train_s=train_s)
