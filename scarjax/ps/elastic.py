"""Elasticity: adding and removing servers and workers during training (thesis Sec 4.4,
Litz: elastic parameter servers over micro-tasks).

All operations happen between two compiled segments of
:meth:`~scarjax.ps.server.ParameterServer.run` and lose no update: the blocks of a
leaving server are *migrated* (not reloaded) to the remaining ones, a joining server
takes blocks from the most loaded ones, and both move with an ``all_gather`` over
``'server'`` inside ``shard_map`` (:func:`scarjax.ps.failures.relocate`); the block
assignment and the set of servers in service are data (:class:`~scarjax.ps.store.Placement`),
so the compiled training step is reused. Changing the number of *workers* re-assigns
the data shards (``algorithm.shard(data, M)``, Litz's micro-tasks re-distributed over
the remaining executors) and keeps the stored state as is; changing the *mesh*
(:func:`resize`) re-lays the state out on the new devices.

A segmented run with these events equals the uninterrupted run (to float tolerance;
tested): the global iteration index keeps the minibatch keys aligned.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import jax.numpy as jnp
import numpy as np

from scarjax.ps import _ssp
from scarjax.ps.distributed import to_host
from scarjax.ps.failures import deal, relocate

__all__ = ["reassign", "remove_servers", "add_servers", "with_workers", "resize", "rebalance"]


def _mask(servers: Sequence[int], S: int, name: str = "servers") -> np.ndarray:
    m = np.zeros(S, bool)
    for s in servers:
        if isinstance(s, bool) or not 0 <= int(s) < S:
            raise ValueError(f"{name} must be server indices in [0, {S - 1}], got {list(servers)!r}")
        m[int(s)] = True
    return m


def reassign(ps, state, server_of: Any, *, alive: Any = None):
    """Move blocks to a new assignment ``server_of`` (int[B]); nothing is lost."""
    return relocate(ps, state, server_of, alive=alive, recovery="none")


def remove_servers(ps, state, servers: Sequence[int], *, key: int = 0):
    """Take ``servers`` out of service; their blocks migrate to the least-loaded remaining
    servers (Litz Sec 4.4 scale-in)."""
    S = ps.num_servers
    leaving = _mask(servers, S)
    alive = np.asarray(state.placement.alive) & ~leaving
    if not alive.any():
        raise ValueError("cannot remove every server")
    server_of = np.asarray(state.placement.server_of)
    new = deal(server_of, leaving[server_of], alive, ps.layout, key)
    return relocate(ps, state, new, alive=alive, recovery="none")


def rebalance(layout, server_of: Any, alive: Any, key: int = 0) -> np.ndarray:
    """Host-side minimal-move rebalance: while moving one block from the most loaded alive
    server to the least loaded one lowers the larger of the two loads (``load[dst] + w <
    load[src]``), move one (picked at random among those that do, seeded by ``key``). Each
    move lowers the sum of squared loads, so it ends; with blocks of equal weight every
    alive server ends with the floor or the ceiling of the mean (a joining server is never
    left empty while others hold two blocks more), and only that many blocks move.

    ``layout``: the store's :class:`~scarjax.ps.store.Layout` (a block weighs its rows), or
    ``None``: every block weighs 1 and there are ``len(alive)`` servers (units of equal size,
    e.g. Litz's executors and PShards, :func:`scarjax.cluster.litz.rebalance`). Blocks on
    servers that are not alive stay where they are (:func:`remove_servers` moves those)."""
    server_of = np.asarray(server_of).copy()
    alive = np.asarray(alive, bool)
    B = server_of.shape[0]
    if layout is None:
        S = alive.shape[0]
        weight = np.ones(B, np.int64)
    else:
        S = layout.num_servers
        weight = np.zeros(B, np.int64)
        for rb in layout.row_block:
            np.add.at(weight, rb, 1)
    load = np.bincount(server_of, weights=weight, minlength=S).astype(np.int64)
    targets = np.flatnonzero(alive)
    if targets.size == 0:
        raise ValueError("alive must mark at least one server")
    rng = np.random.default_rng(key)
    while True:
        src = targets[np.argmax(load[targets])]
        dst = targets[np.argmin(load[targets])]
        movable = np.flatnonzero((server_of == src) & (load[dst] + weight < load[src]))
        if movable.size == 0:
            break
        b = movable[rng.integers(movable.size)]
        server_of[b] = dst
        load[src] -= weight[b]
        load[dst] += weight[b]
    return server_of.astype(np.int32)


def add_servers(ps, state, servers: Sequence[int], *, key: int = 0):
    """Bring ``servers`` (out of service until now) into service and move blocks to them
    from the most loaded servers (Litz Sec 4.4 scale-out)."""
    S = ps.num_servers
    joining = _mask(servers, S)
    alive = np.asarray(state.placement.alive) | joining
    new = rebalance(ps.layout, np.asarray(state.placement.server_of), alive, key)
    return relocate(ps, state, new, alive=alive, recovery="none")


def with_workers(ps, workers: int):
    """The same parameter server with ``workers`` data-parallel workers (data shards
    re-assigned); its states are interchangeable with ``ps``'s (same layout)."""
    new = dataclasses.replace(ps, workers=workers)
    if new.layout.cap != ps.layout.cap:  # pragma: no cover - same partition, same caps
        raise ValueError("layouts differ")
    return new


def resize(ps, state, new_ps):
    """Re-lay ``state`` out on ``new_ps`` (another mesh or server count): blocks go to
    ``new_ps.partition``'s assignment, the checkpoint cache and its bookkeeping move
    with them."""
    # Through the host: the two meshes may hold different devices.
    logical = to_host(ps.logical(state))
    saved = to_host(ps.logical_saved(state))
    ssp_state = None
    if new_ps.ssp is not None:
        ssp_state = _ssp.init_state(new_ps, logical)
    out = new_ps.from_logical(logical, saved=saved, ssp_state=ssp_state)
    return out._replace(saved_at=jnp.asarray(to_host(state.saved_at)), cursor=jnp.asarray(to_host(state.cursor)),
                        saves=jnp.asarray(to_host(state.saves)))
