"""Monte-Carlo trials of :func:`scarjax.run` on every device and host.

The thesis' rework-cost figures (Ch. 5: Fig 5.3–5.11) are expectations over random
failures, perturbations and minibatches, estimated from many independent runs. Trials
are independent, so the trial axis is *data parallel*: :func:`run_trials` splits it over
a device mesh (``jax.shard_map``; every device ``vmap``-s its block of trials through the
same compiled ``lax.scan`` as :func:`scarjax.run`), pads a trial count that does not divide
evenly (the padded trials are computed and dropped), and runs the trials in chunks sized
to a memory budget, copying each chunk's results to host memory, so the number of trials
is bounded by host memory for the results, not by device memory for the computation.

* One process, many devices (8 GPUs, a TPU host, forced host CPU devices): the default
  mesh is every device of ``jax.devices()``.
* Several processes under ``jax.distributed`` (:func:`scarjax.ps.distributed.initialize`):
  ``jax.devices()`` is global, so the same call splits the trials over every host's
  devices; every process must make the same call with the same arguments (SPMD) and every
  process gets all trials back (NumPy arrays). See ``docs/multihost.md``.

The per-trial guarantee does not depend on the mesh, the padding or the chunking: trial
``i`` is a function of ``keys[i]`` (and ``hook_args[i]``) only. See :func:`run_trials`.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any, Callable, Sequence

import jax
from jax.experimental import multihost_utils
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from scarjax import validate as va
from scarjax import core
from scarjax.core import Algorithm, State, Trace
from scarjax.hooks import Hook, flatten_hooks

PyTree = Any

__all__ = ["TRIALS", "trials_mesh", "trial_bytes", "run_trials", "split_trials"]

#: The axis name of the default trial mesh.
TRIALS = "trials"

#: Upper bound of the default per-device memory budget (bytes) of one chunk of trials.
DEFAULT_BUDGET_CAP = 512 * 2**20


# --------------------------------------------------------------------------------------
# Mesh and memory.


def trials_mesh(devices: Sequence[jax.Device] | np.ndarray | None = None) -> Mesh:
    """A 1-D mesh with axis ``'trials'`` over ``devices`` (default ``jax.devices()``: every
    device of every process under ``jax.distributed``). A multi-dimensional device array
    (e.g. from ``mesh_utils.create_device_mesh``) is flattened in row-major order."""
    devs = np.asarray(jax.devices() if devices is None else devices, dtype=object).reshape(-1)
    if devs.size == 0:
        raise ValueError("devices is empty: a trial mesh needs at least one device")
    for d in devs:
        if not isinstance(d, jax.Device):
            raise TypeError(f"devices must hold jax.Device objects, got {type(d).__name__}")
    return Mesh(devs, (TRIALS,), axis_types=(jax.sharding.AxisType.Auto,))


def _nbytes(tree: PyTree) -> int:
    return sum(int(np.prod(x.shape, dtype=np.int64)) * np.dtype(x.dtype).itemsize
               for x in jax.tree.leaves(tree))


def trial_bytes(
    algorithm: Algorithm,
    hooks: Any,
    steps: int,
    *,
    hook_args: PyTree | None = None,
    init_state: State | None = None,
    measure_read_effect: bool = False,
    workers: int | None = None,
) -> int:
    """Estimated device memory of one trial of :func:`run_trials`, in bytes.

    From ``jax.eval_shape`` (nothing is computed): the trace (``steps + 1`` losses and
    distances, one norm per hook and per point per step) plus three copies of the scan
    carry, i.e. of the algorithm's state and the hooks' states (the carry entering a step,
    the carry leaving it, and the update's temporaries of the same size). The algorithm's
    own per-step temporaries (a minibatch's activations) are not visible to ``eval_shape``;
    the budget of :func:`run_trials` leaves room for them (see ``memory_budget``).
    ``hook_args`` is one trial's arguments (as for :func:`~scarjax.run`).
    """
    p = core.prepare(algorithm, hooks, steps, hook_args, None, init_state,
                     measure_read_effect=measure_read_effect, workers=workers)
    return _trial_bytes(p, p.hook_args)


def _trial_bytes(p: core.Prepared, args_one: PyTree) -> int:
    key = jax.random.key(0)
    algorithm, spec, init_state = p.algorithm, p.spec, p.init_state

    def carry(k, a):
        hooks = spec if isinstance(spec, tuple) else flatten_hooks(spec(a))
        state = State(*algorithm.init(k, algorithm.data)) if init_state is None else State(*init_state)
        return state, tuple(h.init(state, k) for h in hooks)

    _, trace = jax.eval_shape(lambda k, a: core.run_one(algorithm, k, a, init_state, spec, p.static), key, args_one)
    return _nbytes(trace) + 3 * _nbytes(jax.eval_shape(carry, key, args_one))


def _default_budget(mesh: Mesh) -> int:
    """Per-device bytes for one chunk: half the smallest device memory pool of this
    process's devices in the mesh (accelerators), else a quarter of physical memory shared
    by the local devices (host CPU devices), capped at :data:`DEFAULT_BUDGET_CAP`."""
    local = [d for d in mesh.devices.flat if d.process_index == jax.process_index()] or list(mesh.devices.flat)
    limits = []
    for d in local:
        try:
            stats = d.memory_stats()
        except Exception:  # noqa: BLE001 - backends without memory statistics
            stats = None
        if stats and stats.get("bytes_limit"):
            limits.append(int(stats["bytes_limit"]) // 2)
    if limits:
        budget = min(limits)
    else:
        try:
            ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        except (ValueError, OSError, AttributeError):
            ram = 8 * 2**30
        budget = ram // 4 // len(local)
    return max(1, min(budget, DEFAULT_BUDGET_CAP))


def _plan(n: int, devices: int, per_device: int, width: int = 1) -> tuple[int, int]:
    """``(size, chunks)``: ``chunks`` programs of ``size`` trials (``size = devices ·
    per-device block``, the block a multiple of ``width`` and at most ``per_device``
    rounded up to ``width``) covering ``n`` trials with the fewest chunks, then the least
    padding (``size · chunks − n``)."""
    cap = -(-max(1, per_device) // width) * width
    chunks = -(-n // (devices * cap))
    block = -(-n // (devices * chunks * width)) * width
    return devices * block, chunks


# --------------------------------------------------------------------------------------
# The compiled programs.


def _vmapped(algorithm, keys, hook_args, init_state, spec, static, vmap_size=None):
    """The trials of ``keys`` (each :func:`scarjax.core.run_one`): one ``vmap``, or with
    ``vmap_size`` a ``lax.map`` over groups of ``vmap_size`` trials ``vmap``-ped together
    (``len(keys)`` is a multiple of it)."""
    one = lambda k, a: core.run_one(algorithm, k, a, init_state, spec, static)  # noqa: E731
    if vmap_size is None:
        return jax.vmap(one)(keys, hook_args)
    return jax.lax.map(lambda ka: one(*ka), (keys, hook_args), batch_size=vmap_size)


_trials_jit = jax.jit(_vmapped, static_argnums=(4, 5))


@functools.partial(jax.jit, static_argnames=("spec", "static", "mesh", "impl", "vmap_size"))
def _sharded(algorithm, key_data, hook_args, init_state, *, spec, static, mesh, impl, vmap_size):
    """Every device of ``mesh`` runs its block of the trial axis (``_vmapped``)."""
    split = P(tuple(mesh.axis_names))

    def block(alg, kd, args, init):
        keys = jax.random.wrap_key_data(kd, impl=impl)
        return _vmapped(alg, keys, args, init, spec, static, vmap_size)

    return jax.shard_map(block, mesh=mesh, in_specs=(P(), split, split, P()), out_specs=split,
                         check_vma=False)(algorithm, key_data, hook_args, init_state)


def _put(x: Any, sharding: NamedSharding) -> jax.Array:
    """A global array with ``sharding`` from a host value that every process holds."""
    if isinstance(x, jax.Array) and x.sharding.is_equivalent_to(sharding, x.ndim):
        return x
    if jax.process_count() == 1:
        return jax.device_put(x, sharding)
    host = np.asarray(x)
    host = host.astype(jax.dtypes.canonicalize_dtype(host.dtype), copy=False)  # float64 -> float32 without x64
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def _to_host(x: jax.Array) -> np.ndarray:
    """All of a (possibly multi-process) global array, in this process's memory."""
    if x.is_fully_addressable:
        return np.asarray(x)

    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


# --------------------------------------------------------------------------------------
# The API.


def _check_options(mesh, chunk_size, memory_budget, progress):
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(
            f"mesh must be a jax.sharding.Mesh (e.g. scarjax.trials.trials_mesh()), got {type(mesh).__name__}")
    if chunk_size is not None and memory_budget is not None:
        raise ValueError("give chunk_size or memory_budget, not both "
                         f"(got chunk_size={chunk_size!r}, memory_budget={memory_budget!r})")
    if chunk_size is not None:
        chunk_size = va.check_int("chunk_size", chunk_size, lo=1)
    if memory_budget is not None:
        memory_budget = va.check_int("memory_budget (bytes per device)", memory_budget, lo=1)
    if progress is not None:
        progress = core._check_flag("progress", progress)
    return chunk_size, memory_budget, progress


def _show_progress(progress: bool | None, chunks: int) -> bool:
    if jax.process_index() != 0:
        return False
    if progress is not None:
        return progress
    return chunks > 1 and sys.stderr.isatty() and not os.environ.get("SCARJAX_NO_PROGRESS")


def run_trials(
    algorithm: Algorithm,
    hooks: Hook | Sequence[Hook] | Callable[[Any], Any] | None,
    steps: int,
    keys: jax.Array | int,
    *,
    hook_args: PyTree | None = None,
    init_state: State | None = None,
    measure_read_effect: bool = False,
    workers: int | None = None,
    mesh: Mesh | None = None,
    chunk_size: int | None = None,
    memory_budget: int | None = None,
    vmap_size: int | None = None,
    progress: bool | None = None,
) -> tuple[State, Trace]:
    """Monte-Carlo trials of :func:`~scarjax.run`, split over devices, hosts and chunks.

    What trial ``i`` equals: ``run(algorithm, hooks, steps, keys[i])`` (or, with a
    factory, ``run(algorithm, hooks, steps, keys[i], hook_args=<slice i of hook_args>)``)
    runs the same iteration on the same random numbers: initialisation, minibatches,
    failure times, lost and saved blocks and every other random draw are bit-identical,
    so every discrete outcome (the steps a hook fires at, the blocks a failure loses) is
    the same. The floating-point results are not bit-identical in general: under
    ``vmap`` XLA batches each trial's matrix products and reductions (norms, losses),
    which may sum in another order, so a step may differ by float32 rounding, and that
    difference is carried forward like any perturbation of the iterate (Eq 5.2): it stays
    at rounding level where the iteration contracts and drifts along flat directions
    (MF's rotations ``L Q``, ``Qᵀ R``, ``Q`` orthogonal, leave its ridge loss unchanged).
    They are bit-identical when no batched reduction enters the iteration: the
    unperturbed QP, element-wise fixed-point maps under element-wise hooks (tested).
    Measured over 3 keys × 30 steps (``benchmarks/trials_vs_run.py``), as
    ``max |trial − run| / max |run|`` per leaf: QP (4-d and 50-d) and MLR under Gaussian,
    adversarial, reset, SCAR-failure and SSP hooks ≤ 2e-7 for the parameters and ≤ 2e-6
    for the trace (up to ~750 ulp on entries near 0); MF (ALS) ≤ 3e-4 for the factors,
    ≤ 3e-6 for the loss. ``tests/test_core.py`` asserts identical discrete outcomes and
    ≤ 1e-5 for the QP and MLR.

    The mesh, the padding and the chunking never change a trial's random numbers or its
    discrete outcomes: each device ``vmap``-s its block of trials, with no communication
    between trials. Its floats depend on one thing more, the number of trials ``vmap``-ped
    together (XLA's kernel for a batched matrix product sums in an order that depends on
    the batch size; measured: the QP's batched ``A @ w`` differs in the last bit between
    batches of 2, 3, 8, 13 …), so by default, where each device ``vmap``-s its whole block,
    moving between meshes or chunk sizes moves floats by rounding (as between
    :func:`~scarjax.run` and a trial above). Give ``vmap_size`` to fix that number: then
    every trial is bit-identical on one device, on 8, across 2 processes × 4 devices, in
    any chunk and padded or not (``tests/test_trials.py``). Without batched products (the
    unperturbed QP, element-wise maps) every configuration is bit-identical anyway.

    Args:
      algorithm, steps, init_state, measure_read_effect, workers: as for
        :func:`~scarjax.run` (``workers=M``: worker mode with ``M`` simulated workers).
      hooks: as for :func:`~scarjax.run`; or, when ``hook_args`` is given, a function
        mapping one trial's slice of ``hook_args`` to hooks, so hook parameters
        (perturbation sizes, failure fractions, recoveries) vary across trials inside the
        same program, e.g. ``run_trials(alg, lambda s: scheduled(gaussian(s), 500), 1000,
        keys, hook_args=sizes)``.
      keys: ``[n]`` PRNG keys (e.g. ``jax.random.split(key, n)``, ``n >= 1``), or an int
        ``n`` for ``split(key(0), n)``.
      hook_args: pytree whose leaves have a leading axis of length ``n``. Strings are
        names, mapped to int32 indices before tracing (see :func:`~scarjax.run`): e.g.
        ``hook_args={'recovery': ['partial', 'full', ...]}`` with a factory
        ``lambda a: faults.scar(part, failure=f, recovery=a['recovery'])``.
      mesh: the devices to split the trials over: a ``jax.sharding.Mesh`` whose devices
        all share the trial axis (every axis of the mesh is used, e.g. a parameter-server
        mesh ``('server', 'worker')`` gives each of its devices a block of trials).
        Default: :func:`trials_mesh`, every device of ``jax.devices()`` (all processes').
      chunk_size: trials per compiled program (over all devices together; rounded up to
        a multiple of the mesh size). Default: from ``memory_budget``.
      memory_budget: bytes per device for one chunk; the chunk holds
        ``memory_budget // trial_bytes(...)`` trials per device (:func:`trial_bytes`: the
        trace plus three copies of the carry). Default: half of the smallest accelerator
        memory pool, or a quarter of physical memory shared by the local CPU devices,
        capped at 512 MiB per device (large enough to keep a device busy).
      vmap_size: trials ``vmap``-ped together on a device (the rest of its block runs as
        a ``lax.map`` over such groups, ``lax.map(..., batch_size=vmap_size)``); each
        device's block is padded to a multiple of it. Fixing it makes the results
        bit-identical across meshes, processes and chunk sizes (see above). Default: the
        device's whole block at once (least padding, most vectorisation).
      progress: show a ``tqdm`` bar over the trials (on process 0). Default (``None``): only
        with more than one chunk, when stderr is a terminal and ``SCARJAX_NO_PROGRESS``
        is not set.

    Returns:
      ``(final_states, trace)`` with a leading trial axis of length ``n`` on every leaf.
      When the trials ran as one chunk in one process, the leaves are ``jax.Array``-s split
      over the mesh's devices (on its first device when ``n`` was padded: a split must be
      even); otherwise (several chunks, or several processes) they are
      NumPy arrays in host memory, and under ``jax.distributed`` every process receives
      all ``n`` trials. Inside a JAX transformation (traced ``keys``, ``hook_args``,
      ``init_state`` or algorithm data), the trials are one ``vmap`` on the current
      device, with no mesh and no chunks.

    Raises:
      TypeError / ValueError naming the argument: as :func:`~scarjax.run`, plus empty
      ``keys``, ``hook_args`` without a leading axis of length ``n``, a ``mesh`` that is not
      a ``Mesh``, both ``chunk_size`` and ``memory_budget``, non-positive sizes.
    """
    core._validate(algorithm, steps)
    if isinstance(keys, bool) or (isinstance(keys, (int, np.integer))):
        n = va.check_int("keys (a trial count)", keys, lo=1)
        keys = jax.random.split(jax.random.key(0), n)
    keys = va.check_key("keys", keys, batched=True)
    n = keys.shape[0]
    if n == 0:
        raise ValueError("keys is empty: run_trials needs at least one key (one per trial)")
    p = core.prepare(algorithm, hooks, steps, hook_args, n, init_state,
                     measure_read_effect=measure_read_effect, workers=workers)
    algorithm, spec, hook_args, init_state = p.algorithm, p.spec, p.hook_args, p.init_state
    chunk_size, memory_budget, progress = _check_options(mesh, chunk_size, memory_budget, progress)
    if vmap_size is not None:
        vmap_size = va.check_int("vmap_size", vmap_size, lo=1)
    if va.is_traced((keys, hook_args, init_state, algorithm)):
        return _trials_jit(algorithm, keys, hook_args, init_state, spec, p.static)

    mesh = trials_mesh() if mesh is None else mesh
    devices = int(mesh.devices.size)
    width = 1 if vmap_size is None else vmap_size  # a device's block is a multiple of it
    if chunk_size is not None:
        per_device = -(-chunk_size // devices)
    else:
        budget = _default_budget(mesh) if memory_budget is None else memory_budget
        args_one = None if hook_args is None else jax.tree.map(
            lambda x: jax.ShapeDtypeStruct(np.shape(x)[1:], jax.dtypes.canonicalize_dtype(
                x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)), hook_args)
        one_trial = _trial_bytes(p, args_one)
        per_device = max(1, budget // max(1, one_trial))
    size, chunks = _plan(n, devices, per_device, width)
    padded = size * chunks

    # Host copies, padded with copies of trial 0 (computed and dropped).
    impl = jax.random.key_impl(keys)
    key_data = np.asarray(jax.random.key_data(keys))
    pad = lambda x: x if padded == n else np.concatenate([x, np.repeat(x[:1], padded - n, 0)])  # noqa: E731
    key_data = pad(key_data)
    host_args = None if hook_args is None else jax.tree.map(lambda x: pad(np.asarray(x)), hook_args)

    split = NamedSharding(mesh, P(tuple(mesh.axis_names)))
    whole = NamedSharding(mesh, P())
    alg_g = jax.tree.map(lambda x: _put(x, whole), algorithm)
    init_g = None if init_state is None else jax.tree.map(lambda x: _put(x, whole), State(*init_state))
    program = functools.partial(_sharded, spec=spec, static=p.static, mesh=mesh, impl=impl,
                                vmap_size=vmap_size)

    def run_chunk(c):
        s = slice(c * size, (c + 1) * size)
        args = None if host_args is None else jax.tree.map(lambda x: _put(x[s], split), host_args)
        return program(alg_g, _put(key_data[s], split), args, init_g)

    if chunks == 1 and jax.process_count() == 1:
        out = run_chunk(0)
        if padded == n:
            return out
        first = mesh.devices.flat[0]
        return jax.tree.map(lambda x: jax.device_put(x, first)[:n], out)

    # tqdm (progress bars) is optional output, imported only when shown
    from tqdm.auto import tqdm

    bar = tqdm(total=n, desc="trials", unit="trial", leave=False, disable=not _show_progress(progress, chunks))
    result, leaves = None, None
    try:
        for c in range(chunks):
            out = run_chunk(c)
            flat, treedef = jax.tree.flatten(out)
            if leaves is None:
                leaves = [np.empty((n,) + x.shape[1:], x.dtype) for x in flat]
                result = treedef
            lo, hi = c * size, min((c + 1) * size, n)
            for buf, x in zip(leaves, flat):
                buf[lo:hi] = _to_host(x)[: hi - lo]
            del out, flat
            bar.update(hi - lo)
    finally:
        bar.close()
    return jax.tree.unflatten(result, leaves)


def split_trials(tree: PyTree, i: int) -> PyTree:
    """Trial ``i`` of a vmapped result (``jax.tree.map(lambda x: x[i], tree)``); ``i`` must
    index the trial axis (JAX would silently clamp an out-of-range index)."""
    leaves = [x for x in jax.tree.leaves(tree) if np.ndim(x) >= 1]
    if not leaves:
        raise ValueError("tree has no array leaves with a trial axis")
    n = np.shape(leaves[0])[0]
    i = va.check_int("i", i, lo=-n, hi=n - 1)
    return jax.tree.map(lambda x: x[i], tree)
