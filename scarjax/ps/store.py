"""Physical block storage of the sharded parameter server (thesis Sec 5.4.3, Litz Sec 4.4).

Every leaf of a :class:`~scarjax.State` whose entries belong to parameter blocks (the
params and the co-located optimizer state, :mod:`scarjax.scar.partition`) is viewed as a
matrix of *rows* ``[R, F]``: the axes along which its block ids vary are moved to the
front and flattened (a row of the MLR weight, a column of MF's ``R``, a whole layer as
one row, …), each row belonging to one block. Server shard ``s`` stores ``cap`` row
*slots* of that leaf; the global physical array is ``[S · cap, F]`` sharded over the
``'server'`` mesh axis, so a device holds only its server's rows. Leaves that are never
lost (block id ``-1``: the Adam step count, LDA's counts) are replicated.

Where a row lives is *data* (:class:`Placement`): ``row_pos[r]`` is its physical slot
and ``slot_row[p]`` the row in slot ``p`` (``R`` = empty). It is derived from the
partition's ``server_of`` by :func:`place`, which keeps rows that stay on their server
in their slot and fills free slots with the rows that move, so a re-assignment (failure
recovery, elasticity) moves only the re-assigned blocks. Leaves with the same block
rows share one placement table (a *group*): the optimizer moments of a parameter are
laid out exactly like it, so the server's update acts entry by entry on aligned rows.

Inside ``shard_map`` (:class:`Local`): *pull* is an ``all_gather`` over ``'server'``
followed by a local gather of the rows in logical order; *push* scatters rows into
physical order and ``psum_scatter``-s them over ``'server'`` (a reduce-scatter: each
server receives the sum of every worker's message for its own slots).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.core import State
from scarjax.scar import partition as pt
from scarjax.ps.mesh import SERVER, WORKER

PyTree = Any

__all__ = ["LeafLayout", "Layout", "Placement", "place", "Local", "check_capacity"]


@dataclasses.dataclass(frozen=True, eq=False)
class LeafLayout:
    """How one state leaf is stored (static)."""

    shape: tuple[int, ...]
    dtype: Any
    blocked: bool
    perm: tuple[int, ...] = ()
    rows: int = 0
    width: int = 0
    group: int = -1

    def to_rows(self, x: jax.Array) -> jax.Array:
        """Logical leaf -> ``[rows, width]``."""
        return jnp.transpose(x, self.perm).reshape(self.rows, self.width)

    def from_rows(self, r: jax.Array) -> jax.Array:
        """``[rows, width]`` -> logical leaf."""
        pshape = tuple(self.shape[a] for a in self.perm)
        inv = tuple(int(i) for i in np.argsort(self.perm))
        return jnp.transpose(r.reshape(pshape), inv)


@dataclasses.dataclass(frozen=True, eq=False)
class Layout:
    """Static storage layout of a state on ``num_servers`` server shards.

    Attributes:
      leaves: one :class:`LeafLayout` per leaf of the state (``jax.tree.leaves`` order).
      treedef: the state's tree structure.
      num_params: how many of the leading leaves are ``state.params``.
      row_block: per group, ``int32[R]`` block id of every row (host array).
      cap: per group, row slots per server (static capacity).
      num_servers, num_blocks: ``S`` and ``B``.
    """

    leaves: tuple[LeafLayout, ...]
    treedef: Any
    num_params: int
    row_block: tuple[np.ndarray, ...]
    cap: tuple[int, ...]
    num_servers: int
    num_blocks: int

    @classmethod
    def build(cls, state: Any, partition: pt.Partition, *, headroom: float = 2.0,
              capacity: Sequence[int] | None = None) -> "Layout":
        """Layout of ``state`` (shapes only) under ``partition``.

        ``capacity`` (per group) defaults to ``ceil(headroom · m)`` where ``m`` is the
        largest number of rows any server holds under ``partition.server_of``, capped at
        the number of rows: room for re-assigned blocks after failures or elasticity.
        """
        if not isinstance(partition, pt.Partition):
            raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
        if not isinstance(state, State):
            state = State(*state) if isinstance(state, tuple) else State(state, ())
        va.check_real("headroom", headroom, lo=1.0, scalar=True)
        pt.check_matches(partition, state)
        leaves, treedef = jax.tree.flatten(state)
        id_leaves = jax.tree.leaves(partition.blocks)
        if len(id_leaves) != len(leaves):
            raise ValueError(
                f"partition does not match the state: {len(id_leaves)} block maps for {len(leaves)} leaves"
            )
        S, B = partition.num_servers, partition.num_blocks
        server_of = np.asarray(partition.server_of)
        groups: dict[bytes, int] = {}
        row_block: list[np.ndarray] = []
        out = []
        for i, (x, ids) in enumerate(zip(leaves, id_leaves)):
            shape = tuple(int(d) for d in np.shape(x))
            ids = np.asarray(ids)
            if ids.ndim != len(shape):
                ids = ids.reshape((1,) * (len(shape) - ids.ndim) + ids.shape)
            if np.all(ids < 0):
                out.append(LeafLayout(shape, x.dtype, False))
                continue
            if np.any(ids < 0):
                raise ValueError(
                    f"state leaf {i} mixes never-lost (-1) and blocked entries; the parameter "
                    "server needs every leaf to be either fully blocked or never lost"
                )
            axes = [a for a in range(len(shape)) if ids.shape[a] > 1]
            rest = [a for a in range(len(shape)) if a not in axes]
            perm = tuple(axes + rest)
            rows = int(np.prod([shape[a] for a in axes])) if axes else 1
            width = int(np.prod(shape)) // rows if rows else 0
            rb = np.transpose(ids, perm).reshape(-1)[:rows].astype(np.int32) if axes else ids.reshape(-1)[:1].astype(np.int32)
            key = rb.tobytes()
            if key not in groups:
                groups[key] = len(row_block)
                row_block.append(rb)
            out.append(LeafLayout(shape, x.dtype, True, perm, rows, width, groups[key]))
        if capacity is None:
            cap = []
            for rb in row_block:
                m = int(np.bincount(server_of[rb], minlength=S).max()) if rb.size else 1
                cap.append(int(min(max(1, math.ceil(headroom * m)), rb.size)))
        else:
            cap = [int(c) for c in capacity]
            if len(cap) != len(row_block) or any(c < 1 for c in cap):
                raise ValueError(f"capacity must give a positive int per group ({len(row_block)}), got {capacity!r}")
        n_params = len(jax.tree.leaves(state.params))
        return cls(tuple(out), treedef, n_params, tuple(row_block), tuple(cap), S, B)

    @property
    def num_groups(self) -> int:
        return len(self.row_block)

    def physical_shape(self, leaf: LeafLayout) -> tuple[int, ...]:
        if not leaf.blocked:
            return leaf.shape
        return (self.num_servers * self.cap[leaf.group], leaf.width)

    def bytes_per_device(self) -> dict:
        """Bytes of the stored state on one device (blocked rows of one server shard plus
        the replicated leaves) and of the whole logical state."""
        per = total = 0
        for lf in self.leaves:
            item = np.dtype(lf.dtype).itemsize
            total += int(np.prod(lf.shape)) * item
            if lf.blocked:
                per += self.cap[lf.group] * lf.width * item
            else:
                per += int(np.prod(lf.shape)) * item
        return {"per_device": per, "logical": total}


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where every block and row lives (data; replicated on every device).

    Attributes:
      server_of: ``int32[B]`` server of each block.
      alive: ``bool[S]`` servers in service.
      row_pos: per group, ``int32[R]`` physical slot of each row.
      slot_row: per group, ``int32[S·cap]`` row in each slot (``R`` = empty).
      overflow: ``bool``: some row found no free slot (capacity too small).
    """

    server_of: jax.Array
    alive: jax.Array
    row_pos: tuple
    slot_row: tuple
    overflow: jax.Array


jax.tree_util.register_dataclass(
    Placement, data_fields=["server_of", "alive", "row_pos", "slot_row", "overflow"], meta_fields=[]
)


def place(layout: Layout, server_of: Any, alive: Any = None, prev: Placement | None = None) -> Placement:
    """The placement of rows for the block assignment ``server_of`` (traceable).

    Rows whose server is unchanged from ``prev`` keep their slot; the others take the
    lowest free slots of their new server in row order. ``overflow`` is set when a
    server needs more than its capacity (use :func:`check_capacity` on the host)."""
    S = layout.num_servers
    server_of = jnp.asarray(server_of, jnp.int32)
    alive = jnp.ones((S,), bool) if alive is None else jnp.asarray(alive, bool)
    row_pos, slot_row, overflow = [], [], jnp.zeros((), bool)
    for g, (rb, cap) in enumerate(zip(layout.row_block, layout.cap)):
        R = rb.shape[0]
        srv = server_of[jnp.asarray(rb)]
        if prev is None:
            keep = jnp.zeros((R,), bool)
            old = jnp.zeros((R,), jnp.int32)
        else:
            old = prev.row_pos[g]
            keep = (old // cap) == srv
        occupied = jnp.zeros((S * cap,), bool).at[jnp.where(keep, old, S * cap)].set(True, mode="drop")
        free = ~occupied.reshape(S, cap)
        order = jnp.argsort(~free, axis=1, stable=True).astype(jnp.int32)  # free slots first
        n_free = jnp.sum(free, axis=1)
        moving = ~keep
        onehot = (srv[:, None] == jnp.arange(S)[None, :]) & moving[:, None]
        rank = jnp.take_along_axis(jnp.cumsum(onehot, axis=0) - 1, srv[:, None], axis=1)[:, 0]
        overflow = overflow | jnp.any(moving & (rank >= n_free[srv]))
        new = srv * cap + order[srv, jnp.clip(rank, 0, cap - 1)]
        pos = jnp.where(keep, old, new).astype(jnp.int32)
        row_pos.append(pos)
        slot_row.append(jnp.full((S * cap,), R, jnp.int32).at[pos].set(jnp.arange(R, dtype=jnp.int32)))
    return Placement(server_of, alive, tuple(row_pos), tuple(slot_row), overflow)


def check_capacity(layout: Layout, server_of: Any) -> None:
    """Host-side check that ``server_of`` fits the layout's per-server capacity."""
    server_of = np.asarray(server_of)
    if server_of.shape != (layout.num_blocks,):
        raise ValueError(f"server_of must have shape ({layout.num_blocks},), got {server_of.shape}")
    if server_of.size and (server_of.min() < 0 or server_of.max() >= layout.num_servers):
        raise ValueError(f"server_of values must be in [0, {layout.num_servers - 1}]")
    for g, (rb, cap) in enumerate(zip(layout.row_block, layout.cap)):
        m = np.bincount(server_of[rb], minlength=layout.num_servers).max()
        if m > cap:
            raise ValueError(
                f"assignment puts {m} rows of group {g} on one server but the capacity is {cap}; "
                "build the ParameterServer with a larger headroom"
            )


class Local:
    """Collectives on the stored state inside ``shard_map`` (one server shard's view).

    ``placement`` is the replicated :class:`Placement`; ``s`` the server index.
    """

    def __init__(self, layout: Layout, placement: Placement):
        self.layout = layout
        self.pl = placement
        self.s = jax.lax.axis_index(SERVER)

    def my_slots(self, g: int) -> jax.Array:
        """Rows held in this server's slots of group ``g`` (``R`` = empty)."""
        cap = self.layout.cap[g]
        return jax.lax.dynamic_slice_in_dim(self.pl.slot_row[g], self.s * cap, cap)

    def occupied(self, g: int) -> jax.Array:
        return self.my_slots(g) < self.layout.row_block[g].shape[0]

    def slot_blocks(self, g: int) -> jax.Array:
        """Block id of each local slot (``B`` = empty)."""
        rb = jnp.concatenate([jnp.asarray(self.layout.row_block[g]), jnp.array([self.layout.num_blocks], jnp.int32)])
        return rb[self.my_slots(g)]

    def pull(self, lf: LeafLayout, local: jax.Array, placement: Placement | None = None) -> jax.Array:
        """All-gather a blocked leaf over the server axis and return it in logical shape."""
        if not lf.blocked:
            return local
        pl = self.pl if placement is None else placement
        full = jax.lax.all_gather(local, SERVER, axis=0, tiled=True)
        return lf.from_rows(full[pl.row_pos[lf.group]])

    def pull_rows(self, lf: LeafLayout, local: jax.Array) -> jax.Array:
        full = jax.lax.all_gather(local, SERVER, axis=0, tiled=True)
        return full[self.pl.row_pos[lf.group]]

    def scatter_local(self, lf: LeafLayout, rows: jax.Array, placement: Placement | None = None) -> jax.Array:
        """This server's slots of ``rows [R, F]`` (no communication: ``rows`` is
        already known on every device)."""
        pl = self.pl if placement is None else placement
        cap = self.layout.cap[lf.group]
        ext = jnp.concatenate([rows, jnp.zeros((1, lf.width), rows.dtype)])
        mine = jax.lax.dynamic_slice_in_dim(pl.slot_row[lf.group], self.s * cap, cap)
        return ext[mine]

    def push(self, lf: LeafLayout, x: jax.Array) -> jax.Array:
        """Sum a per-device logical leaf over every device and deliver each server its
        own slots: ``psum`` over ``'worker'`` then ``psum_scatter`` over ``'server'``."""
        if not lf.blocked:
            return jax.lax.psum(x, (SERVER, WORKER))
        rows = lf.to_rows(x)
        ext = jnp.concatenate([rows, jnp.zeros((1, lf.width), rows.dtype)])
        phys = ext[self.pl.slot_row[lf.group]]
        phys = jax.lax.psum(phys, WORKER)
        return jax.lax.psum_scatter(phys, SERVER, scatter_dimension=0, tiled=True)
