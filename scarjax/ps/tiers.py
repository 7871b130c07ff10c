"""TierML's tiers of reliability on the parameter server (Harlap et al. 2016, Sec 3.2–3.3;
the Proteus/AgileML design).

The server shards are split into *reliable* (on-demand) and *transient* (spot) devices.
The ActivePS — the serving copy that workers pull from and push to — is the parameter
server's store (:class:`~scarjax.ps.server.PSState`), on any servers including
transient ones. The BackupPS is a second copy of every block (parameters and their
co-located optimizer state) placed only on reliable servers (:func:`make`). The ActivePS
accumulates the updates since the last push; the *pending deltas* are pushed to the
BackupPS in the background every ``push_every`` iterations (:func:`run`); since only the
ActivePS applies updates, ``backup + pending = active``, and the push moves the rows from
the active layout to the backup layout with one ``all_gather`` over ``'server'``.

Bulk revocation (Sec 3.3): a set of transient servers is taken away at once.

* *With warning* (spot termination notice): the end-of-life pending deltas are flushed to
  the BackupPS and the revoked servers' blocks migrate to the surviving servers — no
  update is lost (the run equals the uninterrupted one; tested).
* *Without warning*: the revoked servers' rows are gone; their blocks are re-assigned to
  the survivors and reloaded from the BackupPS, i.e. rolled back to the state of the last
  push; blocks on surviving servers are untouched (tested).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from scarjax import validate as va
from scarjax.core import State
from scarjax.ps import mesh as mh
from scarjax.ps.failures import deal, relocate
from scarjax.ps.store import Layout, Local, place
from scarjax.scar import partition as spt

__all__ = ["Tiers", "TierState", "make", "init", "push", "plan_revoke", "revoke", "reload_lost", "run"]


@dataclasses.dataclass(frozen=True, eq=False)
class Tiers:
    """Static tier configuration: ``reliable`` (``bool[S]``), the BackupPS layout and its
    block assignment (reliable servers only)."""

    reliable: np.ndarray
    layout: Layout
    server_of: np.ndarray


class TierState(NamedTuple):
    """The BackupPS: ``backup`` (physical leaves in ``Tiers.layout``), its placement, and
    ``pushed_at`` (the iteration of the last push)."""

    backup: tuple
    placement: Any
    pushed_at: int


def make(ps, reliable: Any, *, key: int = 0) -> Tiers:
    """Tiers for ``ps`` with reliable servers ``reliable`` (``bool[S]``, at least one)."""
    S = ps.num_servers
    reliable = np.asarray(reliable, bool)
    if reliable.shape != (S,) or not reliable.any():
        raise ValueError(f"reliable must be bool[{S}] with at least one reliable server, got {reliable!r}")
    B = ps.layout.num_blocks
    server_of = deal(np.zeros(B, np.int32), np.ones(B, bool), reliable, ps.layout, key)
    shapes = jax.eval_shape(lambda k: State(*ps.algorithm.init(k, ps.algorithm.data)), jax.random.key(0))
    layout = Layout.build(shapes, ps.partition.reassign(server_of), headroom=1.0)
    return Tiers(reliable, layout, server_of)


def _push_impl(ps, tiers, store, placement, bplacement):
    specs = ps._store_specs()
    bspecs = tuple(P(mh.SERVER) if lf.blocked else P() for lf in tiers.layout.leaves)

    def body(store, pl, bpl):
        src = Local(ps.layout, pl)
        dst = Local(tiers.layout, bpl)
        out = []
        for lf, blf, x in zip(ps.layout.leaves, tiers.layout.leaves, store):
            out.append(dst.scatter_local(blf, src.pull_rows(lf, x)) if lf.blocked else x)
        return tuple(out)

    return jax.shard_map(body, mesh=ps.mesh, in_specs=(specs, P(), P()), out_specs=bspecs,
                         check_vma=False)(store, placement, bplacement)


_push_jit = jax.jit(_push_impl, static_argnums=(0, 1))


def push(ps, tiers: Tiers, state, tstate: TierState | None = None, step: int = 0) -> TierState:
    """Push the pending deltas of the ActivePS to the BackupPS (background push / flush)."""
    bpl = place(tiers.layout, jnp.asarray(tiers.server_of), jnp.asarray(tiers.reliable)) if tstate is None else tstate.placement
    backup = _push_jit(ps, tiers, state.store, state.placement, bpl)
    return TierState(backup, bpl, int(step))


def init(ps, tiers: Tiers, state) -> TierState:
    """The BackupPS initialised from the ActivePS (e.g. ``w⁽⁰⁾``)."""
    return push(ps, tiers, state, None, 0)


def plan_revoke(server_of: Any, alive: Any, reliable: Any, servers: Sequence[int], *, warning: bool,
                layout: Layout | None = None, key: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Host-side: what a bulk revocation of the transient ``servers`` does to the ActivePS
    (Sec 3.3), the rule :func:`revoke` applies to the store and the cluster policy
    (:func:`scarjax.cluster.tierml.tierml`) applies to its machines.

    ``server_of`` (``int[B]``): each block's server; ``alive``, ``reliable`` (``bool[S]``).
    Returns ``(new_server_of, alive, lost_blocks)``: the revoked servers' blocks dealt to the
    survivors (:func:`scarjax.ps.failures.deal`; ``layout``: blocks weigh their rows, ``None``:
    one each), the servers still in service, and the blocks rolled back to the BackupPS —
    those of the revoked servers without ``warning``, none with it (the end-of-life flush
    saves them). Raises ``ValueError`` for a reliable or out-of-range server, or when no
    server is left."""
    server_of = np.asarray(server_of)
    reliable = np.asarray(reliable, bool)
    S = reliable.shape[0]
    alive = np.asarray(alive, bool)
    if alive.shape != (S,):
        raise ValueError(f"alive must be bool[{S}] like reliable, got shape {alive.shape}")
    revoked = np.zeros(S, bool)
    for s in servers:
        if isinstance(s, bool) or not 0 <= int(s) < S:
            raise ValueError(f"servers must be indices in [0, {S - 1}], got {list(servers)!r}")
        revoked[int(s)] = True
    if (revoked & reliable).any():
        raise ValueError(f"only transient servers are revoked; {np.flatnonzero(revoked & reliable).tolist()} are reliable")
    alive = alive & ~revoked
    if not alive.any():
        raise ValueError("no server left after the revocation")
    affected = revoked[server_of]
    new_server_of = deal(server_of, affected, alive, layout, key) if affected.any() else server_of.astype(np.int32)
    lost = np.zeros_like(affected) if warning else affected
    return new_server_of, alive, lost


def revoke(ps, tiers: Tiers, state, tstate: TierState, servers: Sequence[int], *, warning: bool,
           step: int, key: int = 0):
    """Bulk revocation of the transient ``servers`` at iteration ``step`` (the plan:
    :func:`plan_revoke`).

    Returns ``(state, tier_state, lost_blocks)``; ``lost_blocks`` (``bool[B]``) are the
    blocks rolled back to the BackupPS (none with warning)."""
    new_server_of, alive, affected = plan_revoke(np.asarray(state.placement.server_of),
                                                 np.asarray(state.placement.alive), tiers.reliable, servers,
                                                 warning=False, layout=ps.layout, key=key)
    revoked = np.asarray(state.placement.alive) & ~alive
    if warning:
        tstate = push(ps, tiers, state, tstate, step)  # flush end-of-life deltas
        state = relocate(ps, state, new_server_of, alive=alive, recovery="none")
        return state, tstate, np.zeros_like(affected)
    state = relocate(ps, state, new_server_of, alive=alive, lost_servers=revoked, recovery="none",
                     reload=(tstate.backup, tstate.placement), reload_layout=tiers.layout)
    return state, tstate, affected


def reload_lost(state: Any, backup: Any, partition: spt.Partition, lost_blocks: Any) -> Any:
    """The logical state after an unwarned bulk revocation (Sec 3.3): the ``lost_blocks``
    (``bool[num_blocks]`` of ``partition``, e.g. :func:`plan_revoke`'s) reloaded from the
    BackupPS copy ``backup`` (the logical state of the last push), every other block — those
    of the surviving ActivePSs — and every never-lost entry (``-1`` ids) kept as in ``state``.

    The rule :func:`revoke` applies to the sharded store, on the logical
    :class:`~scarjax.State` (tested to agree: ``ps.logical`` of :func:`revoke`'s state); the
    cluster policy (:func:`scarjax.cluster.tierml.tierml`) applies it to its real training
    state. Raises ``ValueError`` when ``partition``, ``backup`` or ``lost_blocks`` do not fit
    ``state``."""
    if not isinstance(partition, spt.Partition):
        raise TypeError(f"partition must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    lost = np.asarray(lost_blocks)
    if lost.dtype != bool or lost.shape != (partition.num_blocks,):
        raise ValueError(f"lost_blocks must be bool[{partition.num_blocks}] (one flag per block), "
                         f"got {lost.dtype}{list(lost.shape)}")
    return State(*spt.restore(State(*state), State(*backup), partition, jnp.asarray(lost)))


def run(ps, tiers: Tiers, state, tstate: TierState, steps: int, key: Any, *, start: int = 0,
        push_every: int = 1):
    """Train ``steps`` iterations pushing the pending deltas every ``push_every``
    iterations. Returns ``(state, tier_state, loss[steps + 1])``."""
    push_every = va.check_int("push_every", push_every, lo=1)
    losses, k, end = [], start, start + steps
    while k < end:
        n = min(push_every, end - k)
        state, tr = ps.run(state, n, key, start=k)
        losses.append(tr.loss if not losses else tr.loss[1:])
        k += n
        if (k - start) % push_every == 0:
            tstate = push(ps, tiers, state, tstate, k)
    return state, tstate, jnp.concatenate(losses)
