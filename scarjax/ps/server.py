"""The sharded parameter server: the scarjax loop on a ``('server', 'worker')`` mesh
(thesis Sec 2.1 Eq 2.2–2.3, Sec 4.3 Litz, Sec 5.4.3 SCAR's PS architecture).

:class:`ParameterServer` runs any :class:`~scarjax.Algorithm` with its parameter blocks
(and their co-located optimizer state) stored on server shards per a
:class:`~scarjax.scar.partition.Partition` (:mod:`scarjax.ps.store`), and data-parallel
workers on every device. One iteration ``k`` (the order of :func:`scarjax.run`):

1. *write point* – the running checkpoint (Sec 5.4.2) is taken if due: for
   ``'priority'`` each server ranks its own blocks by their distance from its cached
   copy and a distributed top-k merges the servers' candidates (:mod:`scarjax.ps.topk`,
   Sec 5.4.3 steps 1–3); each server copies its selected rows into its cache.
2. *pull* – every device all-gathers the parameters over ``'server'`` (the workers'
   read; with :class:`scarjax.ps.SSP` workers may keep a bounded-stale cache instead).
3. *workers* – each device runs ``algorithm.grad`` for its ``M / devices`` workers on
   their data shards (``algorithm.shard(data, M)``).
4. *push* – the messages, weighted by the points processed (Sync-on-the-fly Eq 5, as
   :func:`scarjax.perturb.workers.merge`), are summed with ``psum`` over ``'worker'`` and
   reduce-scattered with ``psum_scatter`` over ``'server'``: each server receives the
   merged message for its own blocks only.
5. *server* – each server runs ``algorithm.apply`` on its own rows (the optimizer step
   acts entry by entry on the parameter and its co-located moments) and adds ``Δ``.

With the same key this is ``scarjax.run(algorithm, None, …, workers=M)`` (worker mode)
computed with real placement and collectives; the results agree to floating-point
tolerance (tested for MLR and MF). Algorithms without the worker/server split, or
whose ``apply`` is not entry-wise (e.g. a global-norm clip), run in ``mode='replicated'``:
every device pulls the whole state, runs ``algorithm.update`` and keeps its own rows,
which equals ``scarjax.run(algorithm, None, …)``.

Everything between two control-plane events (failure, re-assignment, revocation) is one
jit-compiled ``lax.scan`` inside ``jax.shard_map``; the control plane (the recovery
coordinator, the elastic controller) runs between segments (:mod:`scarjax.ps.failures`,
:mod:`scarjax.ps.elastic`) and continues with the global step index, so a segmented run
equals an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from scarjax import validate as va
from scarjax.scar import checkpoint as ck
from scarjax.scar import partition as pt
from scarjax.core import Algorithm, State, precision_scope
from scarjax.ps import mesh as mh
from scarjax.ps import _ssp as sp
from scarjax.ps import topk
from scarjax.ps.store import Layout, Local, Placement, place

PyTree = Any

__all__ = ["ParameterServer", "PSState", "PSTrace", "MODES"]

MODES = ("auto", "workers", "replicated")


class PSState(NamedTuple):
    """The distributed state.

    Attributes:
      store: physical leaves of the state (blocked: ``[S·cap, F]`` sharded over
        ``'server'``; never-lost: replicated).
      placement: the :class:`~scarjax.ps.store.Placement` (replicated data).
      saved: the running checkpoint's in-memory cache, laid out like ``store`` (each
        server caches its own blocks, Sec 5.4.3).
      saved_at: ``int32[B]`` iteration of each block's saved copy.
      cursor, saves: round-robin cursor and number of checkpoints taken.
      ssp: per-worker caches and clocks (:class:`scarjax.ps.SSPState`) or ``None``.
    """

    store: tuple
    placement: Placement
    saved: tuple
    saved_at: jax.Array
    cursor: jax.Array
    saves: jax.Array
    ssp: Any = None


class PSTrace(NamedTuple):
    """Per-segment record: ``loss [steps + 1]`` (at the segment start and after each
    step), ``points [steps]`` merged at each barrier, ``saved [steps]`` blocks saved,
    and with SSP ``clocks [steps, M]`` and ``staleness [steps, M]`` (clock of each
    worker and age of the cache it computed from, -1 where it waited)."""

    loss: jax.Array
    points: jax.Array
    saved: jax.Array
    clocks: jax.Array | None = None
    staleness: jax.Array | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class ParameterServer:
    """A sharded parameter server for ``algorithm`` on ``mesh``.

    Args:
      algorithm: any :class:`~scarjax.Algorithm`.
      partition: its :class:`~scarjax.scar.partition.Partition` with ``num_servers`` equal to
        the mesh's ``'server'`` size (the initial block assignment; it may change).
      mesh: a :func:`scarjax.ps.mesh.make_mesh` mesh.
      workers: data-parallel workers ``M`` (a multiple of the device count; default
        one per device).
      checkpoint: the running-checkpoint spec (:class:`scarjax.scar.checkpoint.Checkpoint`,
        concrete ``fraction``/``period``; ``None`` keeps the cache at ``w⁽⁰⁾``, which
        failure recovery then reloads).
      ssp: a :class:`scarjax.ps.SSP` spec for stale-synchronous workers, or ``None``.
      mode: ``'workers'`` (data-parallel workers, sharded server update), ``'replicated'``
        (every device runs ``update`` on the pulled state) or ``'auto'`` (``'workers'``
        when the algorithm has ``grad``/``apply``).
      alive: ``bool[S]`` servers in service initially (default all).
      headroom: per-server row capacity relative to the initial assignment's maximum
        (room for re-assigned blocks, :class:`scarjax.ps.store.Layout`).
      hook_slot: ``(i, n)``: the checkpoint draws its tie-break key as hook ``i`` of
        ``n`` would in :func:`scarjax.run` (default ``(0, 1)``: a single ``scar`` hook,
        ``scarjax.run(algorithm, scar_hook, T, key, workers=M)``), so runs can be paired
        with single-device references.
    """

    algorithm: Algorithm
    partition: pt.Partition
    mesh: Any
    workers: int | None = None
    checkpoint: ck.Checkpoint | None = None
    ssp: Any = None
    mode: str = "auto"
    alive: Any = None
    headroom: float = 2.0
    hook_slot: tuple[int, int] = (0, 1)
    layout: Layout = dataclasses.field(init=False)

    def __post_init__(self):
        if not isinstance(self.algorithm, Algorithm):
            raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(self.algorithm).__name__}")
        if not isinstance(self.partition, pt.Partition):
            raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(self.partition).__name__}")
        S, W = mh.mesh_shape(self.mesh)
        if self.partition.num_servers != S:
            raise ValueError(
                f"partition.num_servers={self.partition.num_servers} must equal the mesh's server axis {S}"
            )
        D = S * W
        M = D if self.workers is None else va.check_int("workers", self.workers, lo=1)
        if M % D:
            raise ValueError(f"workers must be a multiple of the device count {D}, got {M}")
        object.__setattr__(self, "workers", M)
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        mode = self.mode
        if mode == "auto":
            mode = "workers" if self.algorithm.has_workers else "replicated"
        if mode == "workers" and not self.algorithm.has_workers:
            raise ValueError(f"mode 'workers' needs an algorithm with grad/apply; {self.algorithm.name!r} has none")
        object.__setattr__(self, "mode", mode)
        if self.checkpoint is not None:
            if not isinstance(self.checkpoint, ck.Checkpoint):
                raise TypeError(f"checkpoint must be a scarjax.scar.checkpoint.Checkpoint, got {type(self.checkpoint).__name__}")
            if not isinstance(self.checkpoint.strategy, str):
                raise ValueError("the parameter server needs a concrete checkpoint strategy name")
            if self.checkpoint.norm not in ("auto", "l2", "l1"):
                raise ValueError("distributed priority checkpoints support norm 'auto' (l2), 'l2' or 'l1'")
            if self.checkpoint.norm == "auto" and self.algorithm.norm is not None and self.algorithm.norm.__name__ != "l2_norm":
                raise ValueError("distributed priority checkpoints need an l2 algorithm norm or norm='l1'/'l2'")
        if self.ssp is not None:
            if not isinstance(self.ssp, sp.SSP):
                raise TypeError(f"ssp must be a scarjax.ps.SSP, got {type(self.ssp).__name__}")
            if mode != "workers":
                raise ValueError("SSP needs mode 'workers'")
            self.ssp.check(M)
        alive = np.ones(S, bool) if self.alive is None else np.asarray(self.alive, bool)
        if alive.shape != (S,) or not alive.any():
            raise ValueError(f"alive must be bool[{S}] with at least one server alive, got {self.alive!r}")
        server_of = np.asarray(self.partition.server_of)
        if not alive[server_of].all():
            raise ValueError("partition assigns blocks to servers that are not alive")
        object.__setattr__(self, "alive", alive)
        shapes = jax.eval_shape(lambda k: State(*self.algorithm.init(k, self.algorithm.data)), jax.random.key(0))
        object.__setattr__(self, "layout", Layout.build(shapes, self.partition, headroom=self.headroom))
        if self.hook_slot[0] >= self.hook_slot[1] or self.hook_slot[0] < 0:
            raise ValueError(f"hook_slot must be (i, n) with 0 <= i < n, got {self.hook_slot!r}")

    # ---- shardings ---------------------------------------------------------------

    @property
    def num_servers(self) -> int:
        return mh.mesh_shape(self.mesh)[0]

    @property
    def num_devices(self) -> int:
        S, W = mh.mesh_shape(self.mesh)
        return S * W

    def _store_specs(self):
        return tuple(P(mh.SERVER) if lf.blocked else P() for lf in self.layout.leaves)

    def state_specs(self, with_ssp: bool | None = None) -> PSState:
        st = self._store_specs()
        ssp_spec = None
        if (self.ssp is not None) if with_ssp is None else with_ssp:
            ssp_spec = sp.SSPState(caches=P(mh.AXES), clocks=P(), cache_clock=P())
        return PSState(st, P(), st, P(), P(), P(), ssp_spec)

    def state_shardings(self) -> PSState:
        return jax.tree.map(lambda s: NamedSharding(self.mesh, s), self.state_specs(),
                            is_leaf=lambda x: isinstance(x, P))

    # ---- conversion between logical and distributed state --------------------------

    def initial_placement(self) -> Placement:
        return place(self.layout, self.partition.server_of, self.alive)

    def _to_store_global(self, state: State, placement: Placement) -> tuple:
        out = []
        for lf, x in zip(self.layout.leaves, jax.tree.leaves(state)):
            if not lf.blocked:
                out.append(jnp.asarray(x, lf.dtype))
                continue
            rows = lf.to_rows(jnp.asarray(x, lf.dtype))
            ext = jnp.concatenate([rows, jnp.zeros((1, lf.width), rows.dtype)])
            out.append(ext[placement.slot_row[lf.group]])
        return tuple(out)

    def _from_store_global(self, store: tuple, placement: Placement) -> State:
        leaves = []
        for lf, x in zip(self.layout.leaves, store):
            leaves.append(lf.from_rows(x[placement.row_pos[lf.group]]) if lf.blocked else x)
        return jax.tree.unflatten(self.layout.treedef, leaves)

    def from_logical(self, state: State, placement: Placement | None = None, saved: State | None = None,
                     ssp_state: Any = None) -> PSState:
        """Distribute a logical :class:`~scarjax.State` (the running checkpoint starts at
        ``saved``, default ``state``: ``w⁽⁰⁾``, Sec 5.4.2)."""
        placement = self.initial_placement() if placement is None else placement
        return _from_logical_jit(self, State(*state), placement, None if saved is None else State(*saved), ssp_state)

    def init(self, key: jax.Array | int) -> PSState:
        """``algorithm.init`` with the key schedule of :func:`scarjax.run`, distributed."""
        key = va.check_key("key", key)
        k_init = jax.random.split(key, 3)[0]
        state = _init_jit(self.algorithm, k_init)
        ssp_state = sp.init_state(self, state) if self.ssp is not None else None
        return self.from_logical(state, ssp_state=ssp_state)

    def logical(self, ps_state: PSState) -> State:
        """The logical state (replicated on every device; a debugging/host view)."""
        return _logical_jit(self, ps_state.store, ps_state.placement)

    def logical_saved(self, ps_state: PSState) -> State:
        return _logical_jit(self, ps_state.saved, ps_state.placement)

    # ---- training ----------------------------------------------------------------

    def run(self, state: PSState, steps: int, key: jax.Array | int, *, start: int = 0) -> tuple[PSState, PSTrace]:
        """Iterations ``start … start + steps − 1`` (global indices: the same keys as the
        corresponding iterations of an uninterrupted run)."""
        va.check_int("steps", steps, lo=1)
        start = va.check_int("start", start, lo=0)
        if not isinstance(state, PSState):
            raise TypeError(f"state must be a PSState (from ParameterServer.init), got {type(state).__name__}")
        if (state.ssp is None) != (self.ssp is None):
            raise ValueError("state.ssp must be present exactly when the server has an SSP spec")
        key = va.check_key("key", key)
        shards = _shards_jit(self, self.algorithm) if self.mode == "workers" else None
        return _run_jit(self, steps, state, self.algorithm, shards, key, jnp.asarray(start, jnp.int32))

    def bytes_per_device(self) -> dict:
        """Bytes of the stored state, the checkpoint cache and the data on one device,
        computed from the layout and shardings (nothing allocated)."""
        b = self.layout.bytes_per_device()
        return {"state": b["per_device"], "checkpoint_cache": b["per_device"], "logical_state": b["logical"]}


@jax.jit
def _init_jit(algorithm, key):
    return State(*algorithm.init(key, algorithm.data))


def _shards_impl(ps, algorithm):
    data = algorithm.data
    if algorithm.shard is None:
        return None
    return algorithm.shard(data, ps.workers)


def _shards_jit(ps, algorithm):
    out = jax.eval_shape(lambda a: _shards_impl(ps, a), algorithm)
    shard = jax.tree.map(lambda _: NamedSharding(ps.mesh, mh.data_spec()), out)
    return jax.jit(_shards_impl, static_argnums=0, out_shardings=shard)(ps, algorithm)


def _from_logical_impl(ps, state, placement, saved, ssp_state):
    store = ps._to_store_global(state, placement)
    saved_store = store if saved is None else ps._to_store_global(saved, placement)
    B = ps.layout.num_blocks
    z = jnp.zeros((), jnp.int32)
    return PSState(store, placement, saved_store, jnp.zeros((B,), jnp.int32), z, z, ssp_state)


def _from_logical_jit(ps, state, placement, saved, ssp_state):
    sh = ps.state_shardings()
    if ssp_state is None:
        sh = sh._replace(ssp=None)
    return jax.jit(_from_logical_impl, static_argnums=0, out_shardings=sh)(ps, state, placement, saved, ssp_state)


def _logical_jit(ps, store, placement):
    rep = NamedSharding(ps.mesh, P())
    return jax.jit(lambda s, p: ps._from_store_global(s, p), out_shardings=rep)(store, placement)


# --------------------------------------------------------------------------------------
# The step.


def _unflatten(ps, leaves):
    return jax.tree.unflatten(ps.layout.treedef, list(leaves))


def pull_state(ps, loc: Local, store) -> State:
    """The full logical state on every device (all-gathers; XLA prunes unused ones)."""
    return _unflatten(ps, [loc.pull(lf, x) for lf, x in zip(ps.layout.leaves, store)])


def checkpoint_step(ps, loc: Local, st: PSState, k, key):
    """Sec 5.4.2–5.4.3 on the servers: select (distributed for 'priority'), then each
    server copies its selected rows into its cache; never-lost leaves are refreshed."""
    spec = ps.checkpoint
    B = ps.layout.num_blocks
    if spec is None or spec.period is None:
        return st, jnp.zeros((), jnp.int32)

    def take(st):
        n = topk.block_count(spec, B)
        if spec.strategy == "priority":
            mask = topk.select_local(ps, loc, st.store, st.saved, key, n,
                                     "l1" if spec.norm == "l1" else "l2")
        else:
            ckpt = ck.CheckpointState(None, st.saved_at, st.cursor, st.saves)
            mask = ck.select(spec, ckpt, None, ps.partition, key)
        saved = []
        for lf, x, s in zip(ps.layout.leaves, st.store, st.saved):
            if lf.blocked:
                ext = jnp.concatenate([mask, jnp.zeros((1,), bool)])
                sel = ext[loc.slot_blocks(lf.group)][:, None]
                saved.append(jnp.where(sel, x, s))
            else:
                saved.append(x)
        adv = n if spec.strategy == "round_robin" else 0
        return st._replace(
            saved=tuple(saved),
            saved_at=jnp.where(mask, k, st.saved_at),
            cursor=(st.cursor + adv) % B,
            saves=st.saves + 1,
        ), jnp.sum(mask).astype(jnp.int32)

    def skip(st):
        return st, jnp.zeros((), jnp.int32)

    return jax.lax.cond(ck.due(spec, k), take, skip, st)


def _step(ps, algorithm, shards, k_loop, st: PSState, k):
    lay = ps.layout
    S, W = mh.mesh_shape(ps.mesh)
    M = ps.workers
    Mloc = M // (S * W)
    data = algorithm.data
    loc = Local(lay, st.placement)
    step_key = jax.random.fold_in(k_loop, k)
    k_alg, k_h = jax.random.split(step_key)
    i, n = ps.hook_slot
    k_ck = jax.random.split(k_h, n)[i]
    # 1. write point: the running checkpoint.
    st, n_saved = checkpoint_step(ps, loc, st, k, k_ck)
    full = pull_state(ps, loc, st.store)
    out = {"saved": n_saved}
    if ps.mode == "replicated":
        # Every device runs the algorithm's own update on the pulled state; each server
        # keeps its rows (equals scarjax.run(algorithm, None, ...)).
        delta, new_state = algorithm.update(full.params, full, data, k_alg)
        new_full = State(jax.tree.map(lambda p, d: p + d, full.params, delta), State(*new_state).aux)
        store = []
        for lf, x in zip(lay.leaves, jax.tree.leaves(new_full)):
            store.append(loc.scatter_local(lf, lf.to_rows(x.astype(lf.dtype))) if lf.blocked else x.astype(lf.dtype))
        out["points"] = jnp.zeros((), jnp.float32)
    else:
        d = jax.lax.axis_index(mh.SERVER) * W + jax.lax.axis_index(mh.WORKER)
        k_work, k_apply = jax.random.split(k_alg)
        wkeys = jax.lax.dynamic_slice_in_dim(jax.random.split(k_work, M), d * Mloc, Mloc)
        fresh = jax.tree.map(lambda x: jnp.broadcast_to(x, (Mloc,) + x.shape), full.params)
        progress = jnp.ones((Mloc,), jnp.float32)
        if ps.ssp is not None:
            fresh, progress, new_ssp, rec = sp.views(ps.ssp, st.ssp, fresh, k_h, d, Mloc)
            st = st._replace(ssp=new_ssp)
            out.update(rec)
        views = jax.lax.optimization_barrier(fresh)
        shard_axis = None if shards is None else 0
        local_data = data if shards is None else shards
        msgs, counts = jax.vmap(algorithm.grad, in_axes=(0, None, shard_axis, 0, 0))(
            views, full, local_data, wkeys, progress)
        counts = jnp.asarray(counts, jnp.float32)
        total = jax.lax.psum(jnp.sum(counts), mh.AXES)
        w = counts / jnp.where(total > 0, total, 1.0)
        partial = jax.tree.map(
            lambda x: jnp.sum(w.reshape((Mloc,) + (1,) * (x.ndim - 1)).astype(x.dtype) * x, 0), msgs)
        p_leaves = lay.leaves[: lay.num_params]
        msg_local = [loc.push(lf, x) for lf, x in zip(p_leaves, jax.tree.leaves(partial))]
        local_state = _unflatten(ps, st.store)
        msg_tree = jax.tree.unflatten(jax.tree.structure(local_state.params), msg_local)
        delta, new_state = algorithm.apply(msg_tree, local_state, data, k_apply)
        new_state = State(*new_state)
        ok = total > 0
        new_leaves = jax.tree.leaves(State(
            jax.tree.map(lambda p, dd: p + jnp.where(ok, dd, jnp.zeros_like(dd)).astype(p.dtype),
                         local_state.params, delta),
            jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_state.aux, local_state.aux)))
        store = []
        for lf, new, old in zip(lay.leaves, new_leaves, st.store):
            if lf.blocked:
                store.append(jnp.where(loc.occupied(lf.group)[:, None], new.astype(old.dtype), old))
            else:
                store.append(new.astype(old.dtype))
        out["points"] = total
    st = st._replace(store=tuple(store))
    out["loss"] = algorithm.loss(pull_state(ps, loc, st.store), data)
    return st, out


def _run_impl(ps, steps, st, algorithm, shards, key, start):
    k_loop = jax.random.split(key, 3)[2]
    specs = ps.state_specs(st.ssp is not None)
    if st.ssp is None:
        specs = specs._replace(ssp=None)
    shard_spec = None if shards is None else jax.tree.map(lambda _: mh.data_spec(), shards)

    def body(st, algorithm, shards, k_loop, start):
        loc = Local(ps.layout, st.placement)
        loss0 = algorithm.loss(pull_state(ps, loc, st.store), algorithm.data)
        st, out = jax.lax.scan(lambda c, k: _step(ps, algorithm, shards, k_loop, c, k), st,
                               start + jnp.arange(steps, dtype=jnp.int32))
        out["loss"] = jnp.concatenate([loss0[None], out["loss"]])
        return st, out

    out_rec = {"loss": P(), "points": P(), "saved": P()}
    if ps.ssp is not None:
        out_rec.update({"clocks": P(), "staleness": P()})
    f = jax.shard_map(
        body, mesh=ps.mesh,
        in_specs=(specs, P(), shard_spec, P(), P()),
        out_specs=(specs, out_rec),
        check_vma=False,
    )
    with precision_scope(algorithm):
        st, out = f(st, algorithm, shards, k_loop, start)
    return st, PSTrace(out["loss"], out["points"], out["saved"], out.get("clocks"), out.get("staleness"))


_run_jit = jax.jit(_run_impl, static_argnums=(0, 1))
