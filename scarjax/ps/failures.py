"""Server-shard failures and SCAR's recovery on the parameter server (thesis Sec 5.4.1,
Sec 5.4.3 "Actions During a Failure").

A failed server shard loses exactly the rows it stores: its parameter blocks *and* their
co-located optimizer state (:mod:`scarjax.ps.store` lays the moments out with their
parameters). Its rows are overwritten with NaN before recovery, so any value that
survived would show. The *recovery coordinator* (host-side control plane):

1. re-assigns the failed servers' blocks to the surviving servers (:func:`deal`:
   greedy least-loaded, random order; the assignment is data) and checks capacity;
2. migrates the surviving blocks to their (unchanged) owners and the lost ones to their
   new owners with an ``all_gather`` over ``'server'`` inside ``shard_map`` (the
   data-plane op :func:`relocate`);
3. reloads from the running checkpoint: ``'partial'`` reloads only the lost blocks
   (Sec 5.4.1), ``'full'`` rolls the whole state back (checkpoint-restart).

The recovery rule is :func:`scarjax.scar.faults.recover`'s (and the recovery names are
its :data:`~scarjax.scar.faults.RECOVERIES`), applied here to the rows of the sharded store
inside ``shard_map`` rather than to a logical state: the store's layout (rows, slots,
placement after earlier re-assignments) is not a :class:`~scarjax.scar.partition.Partition`
of a state, so the row-level code is kept here and checked against the hook below.

The failed servers' part of the checkpoint cache is read back from persistent storage in
SCAR (Sec 5.4.3; :mod:`scarjax.scar.persistent` writes it); here the cache rows are migrated
with the blocks, which holds the same values. The result is the same state, number for
number, as the single-device hook :func:`scarjax.scar.faults.scar` losing the same servers'
blocks at the same iteration (tested): the failure happens before the checkpoint of that
iteration, as in :mod:`scarjax.scar.checkpoint`.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from scarjax import validate as va
from scarjax.ps import mesh as mh
from scarjax.scar import faults
from scarjax.ps.store import Layout, Local, check_capacity, place

__all__ = ["RECOVERIES", "deal", "relocate", "fail", "run_with_failure"]

#: :data:`scarjax.scar.faults.RECOVERIES` and ``'none'`` (a plain migration, nothing lost).
RECOVERIES = (*faults.RECOVERIES, "none")


def deal(server_of: Any, moving: Any, targets: Any, layout: Layout | None = None, key: int = 0) -> np.ndarray:
    """Host-side: a new ``server_of`` where the ``moving`` blocks go to the ``targets``
    servers, each (in random order) to the target currently holding the fewest rows."""
    server_of = np.asarray(server_of).copy()
    moving = np.asarray(moving, bool)
    targets = np.flatnonzero(np.asarray(targets, bool))
    if targets.size == 0:
        raise ValueError("no target server to take the blocks")
    B = server_of.shape[0]
    weight = np.zeros(B, np.int64)
    if layout is not None:
        for rb in layout.row_block:
            np.add.at(weight, rb, 1)
    else:
        weight[:] = 1
    S = int(max(server_of.max(initial=0), targets.max())) + 1 if layout is None else layout.num_servers
    load = np.bincount(server_of[~moving], weights=weight[~moving], minlength=S)
    order = np.random.default_rng(key).permutation(np.flatnonzero(moving))
    for b in order:
        t = targets[np.argmin(load[targets])]
        server_of[b] = t
        load[t] += weight[b]
    return server_of.astype(np.int32)


def _relocate_impl(ps, recovery, st, server_of, alive, lost_servers, reload, reload_layout):
    lay = ps.layout
    specs = ps._store_specs()
    rspecs = None if reload is None else tuple(P(mh.SERVER) if lf.blocked else P() for lf in reload_layout.leaves)

    def body(store, saved, old_pl, server_of, alive, lost_servers, reload, reload_pl):
        new_pl = place(lay, server_of, alive, prev=old_pl)
        old = Local(lay, old_pl)
        new = Local(lay, new_pl)
        dead = lost_servers[old.s]
        lost_block = lost_servers[old_pl.server_of]
        src = None if reload is None else Local(reload_layout, reload_pl)

        def move(lf, x, poison):
            if not lf.blocked:
                return x
            if poison and jnp.issubdtype(x.dtype, jnp.floating):
                x = jnp.where(dead, jnp.full_like(x, jnp.nan), x)
            return new.scatter_local(lf, old.pull_rows(lf, x))

        moved = [move(lf, x, True) for lf, x in zip(lay.leaves, store)]
        saved_m = [move(lf, x, False) for lf, x in zip(lay.leaves, saved)]
        if recovery == "full":
            moved = saved_m
        elif recovery == "partial" or reload is not None:
            out = []
            for i, (lf, x, s) in enumerate(zip(lay.leaves, moved, saved_m)):
                if lf.blocked:
                    if reload is not None:
                        rl = reload_layout.leaves[i]
                        s = new.scatter_local(lf, src.pull_rows(rl, reload[i]))
                    ext = jnp.concatenate([lost_block, jnp.zeros((1,), bool)])
                    sel = ext[new.slot_blocks(lf.group)][:, None]
                    x = jnp.where(sel, s.astype(x.dtype), x)
                out.append(x)
            moved = out
        return tuple(moved), tuple(saved_m), new_pl

    rpl = None if reload is None else reload[1]
    rst = None if reload is None else reload[0]
    f = jax.shard_map(body, mesh=ps.mesh,
                      in_specs=(specs, specs, P(), P(), P(), P(), rspecs, P()),
                      out_specs=(specs, specs, P()), check_vma=False)
    store, saved, pl = f(st.store, st.saved, st.placement, server_of, alive, lost_servers, rst, rpl)
    return st._replace(store=store, saved=saved, placement=pl)


_relocate_jit = jax.jit(_relocate_impl, static_argnums=(0, 1, 7))


def relocate(ps, state, server_of: Any, *, alive: Any = None, lost_servers: Any = None,
             recovery: str = "none", reload: tuple | None = None, reload_layout: Layout | None = None):
    """Move every block to ``server_of`` (the data-plane op of re-assignment).

    Args:
      lost_servers: ``bool[S]`` servers whose rows are lost (poisoned with NaN before
        the move); their blocks are reloaded per ``recovery``.
      recovery: ``'partial'`` (lost blocks from the checkpoint cache), ``'full'`` (all
        from the checkpoint cache), ``'none'`` (nothing lost: plain migration).
      reload: ``(store, placement)`` in ``reload_layout`` to reload lost blocks from
        instead of the checkpoint (TierML's BackupPS).
    """
    if recovery not in RECOVERIES:
        raise ValueError(f"recovery must be one of {RECOVERIES}, got {recovery!r}")
    S = ps.num_servers
    server_of = np.asarray(server_of, np.int32)
    check_capacity(ps.layout, server_of)
    alive = np.asarray(state.placement.alive) if alive is None else np.asarray(alive, bool)
    if alive.shape != (S,):
        raise ValueError(f"alive must be bool[{S}], got shape {alive.shape}")
    if not alive[server_of].all():
        raise ValueError("server_of assigns blocks to servers that are not alive")
    lost = np.zeros(S, bool) if lost_servers is None else np.asarray(lost_servers, bool)
    if (reload is None) != (reload_layout is None):
        raise ValueError("give reload and reload_layout together")
    new = _relocate_jit(ps, recovery, state, jnp.asarray(server_of), jnp.asarray(alive), jnp.asarray(lost),
                        reload, reload_layout)
    if bool(new.placement.overflow):
        raise ValueError("placement overflow: a server has no free slot (increase headroom)")
    return new


def fail(ps, state, servers: Sequence[int], *, recovery: str = "partial", key: int = 0):
    """Fail the server shards ``servers`` and recover (see the module docstring).

    Returns ``(state, lost_blocks)``: the recovered :class:`~scarjax.ps.server.PSState`
    (the failed servers out of service) and ``bool[B]`` the blocks that were lost."""
    va.check_choice("recovery", recovery, faults.RECOVERIES)
    S = ps.num_servers
    failed = np.zeros(S, bool)
    for s in servers:
        if isinstance(s, bool) or not 0 <= int(s) < S:
            raise ValueError(f"servers must be server indices in [0, {S - 1}], got {list(servers)!r}")
        failed[int(s)] = True
    alive = np.asarray(state.placement.alive) & ~failed
    if not alive.any():
        raise ValueError("every server failed: nothing left to recover onto")
    server_of = np.asarray(state.placement.server_of)
    lost = failed[server_of]
    new_server_of = deal(server_of, lost, alive, ps.layout, key)
    new = relocate(ps, state, new_server_of, alive=alive, lost_servers=failed, recovery=recovery)
    return new, lost


def run_with_failure(ps, steps: int, key: Any, *, fail_at: int, servers: Sequence[int],
                     recovery: str = "partial", state=None):
    """Run ``steps`` iterations with the given servers failing at ``fail_at`` (before that
    iteration's checkpoint, as :func:`scarjax.scar.faults.scar`). Returns ``(state, loss[steps + 1],
    lost_blocks)``."""
    if not 0 < fail_at < steps:
        raise ValueError(f"fail_at must be in (0, {steps}), got {fail_at!r}")
    st = ps.init(key) if state is None else state
    st, t1 = ps.run(st, fail_at, key, start=0)
    st, lost = fail(ps, st, servers, recovery=recovery)
    st, t2 = ps.run(st, steps - fail_at, key, start=fail_at)
    loss = jnp.concatenate([t1.loss, t2.loss[1:]])
    return st, loss, lost
