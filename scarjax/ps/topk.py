"""Distributed priority selection for running checkpoints (thesis Sec 5.4.2, Sec 5.4.3
"Actions During a Checkpoint", steps 1–3).

Step 1: every server computes, for each block it holds, the distance of the block from
its cached (last saved) copy — locally, from its own rows. Step 2: each server selects
its local top ``n`` (the largest distances; ties broken by a shared random tie-break,
exactly as :func:`scarjax.scar.checkpoint.select`). Step 3: the candidates ``(distance,
tie-break, block id)`` of all servers are all-gathered over ``'server'`` and merged: the
global top ``n`` of the union of the local top-``n`` lists is the global top ``n``
(any block in the global top ``n`` is in its own server's top ``n``), so the selection
equals the centralised one (tested). Each server then updates its cache with its
selected blocks (:func:`scarjax.ps.server.checkpoint_step`); step 4 (persisting them
asynchronously) is :mod:`scarjax.scar.persistent`'s job on the host.

Communication: ``S · min(n, K)`` candidates (``K`` = blocks a server can hold), not the
``O(|params|)`` of gathering the model; the ``O(|params|)`` distance work is split over
the servers.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from scarjax import validate as va
from scarjax.ps import mesh as mh
from scarjax.ps.store import Local
from scarjax.scar import checkpoint as ck

__all__ = ["block_count", "local_distances", "merge_top_k", "select_local", "select"]


def block_count(spec: ck.Checkpoint, num_blocks: int) -> int:
    """Blocks per checkpoint, ``max(1, round(r·B))`` (all ``B`` for ``'full'``), as a
    Python int: :func:`scarjax.scar.checkpoint.count` for a concrete fraction (the
    static ``n`` of the top-``n`` selection)."""
    if spec.strategy == "full":
        return num_blocks
    return int(np.clip(np.round(np.float32(spec.fraction) * num_blocks), 1, num_blocks))


def local_distances(ps, loc: Local, store, saved, norm: str = "l2") -> jax.Array:
    """``float32[B]``: this server's block distances ``‖w_blk − saved_blk‖`` (zero for
    blocks it does not hold), from its own rows of the params leaves only."""
    B = ps.layout.num_blocks
    total = jnp.zeros((B + 1,), jnp.float32)
    for lf, x, s in list(zip(ps.layout.leaves, store, saved))[: ps.layout.num_params]:
        if not lf.blocked:
            continue
        d = (x - s).astype(jnp.float32)
        v = jnp.sum(jnp.abs(d) if norm == "l1" else jnp.square(d), axis=1)
        total = total + jax.ops.segment_sum(v, loc.slot_blocks(lf.group), num_segments=B + 1)
    total = total[:B]
    return total if norm == "l1" else jnp.sqrt(total)


def _top(dist, tiebreak, ids, n):
    """The first ``n`` of ``ids`` ordered by (−dist, tiebreak) (``lexsort``: the last key
    is primary), as :func:`scarjax.scar.checkpoint.select` ranks."""
    order = jnp.lexsort((tiebreak, -dist))[:n]
    return dist[order], tiebreak[order], ids[order]


def merge_top_k(dist: jax.Array, owned: jax.Array, tiebreak: jax.Array, n: int, kcap: int) -> jax.Array:
    """Inside ``shard_map``: local top ``n`` of the owned blocks, all-gather over
    ``'server'``, global top ``n``. Returns the replicated ``bool[B]`` selection."""
    B = dist.shape[0]
    kcap = max(1, min(kcap, B))
    cand = jnp.nonzero(owned, size=kcap, fill_value=B)[0]
    ext_d = jnp.concatenate([dist, jnp.array([-1.0], dist.dtype)])
    ext_t = jnp.concatenate([tiebreak, jnp.array([2.0], tiebreak.dtype)])
    m = min(n, kcap)
    d, t, i = _top(ext_d[cand], ext_t[cand], cand, m)
    d, t, i = (jax.lax.all_gather(a, mh.SERVER, axis=0, tiled=True) for a in (d, t, i))
    _, _, top = _top(d, t, i, n)
    return jnp.zeros((B,), bool).at[top].set(True, mode="drop")


def select_local(ps, loc: Local, store, saved, key, n: int, norm: str = "l2") -> jax.Array:
    """Priority selection of ``n`` blocks inside the parameter server's ``shard_map``."""
    B = ps.layout.num_blocks
    tiebreak = jax.random.uniform(key, (B,))
    dist = local_distances(ps, loc, store, saved, norm)
    owned = loc.pl.server_of == loc.s
    kcap = sum(ps.layout.cap[lf.group] for lf in ps.layout.leaves[: ps.layout.num_params] if lf.blocked)
    return merge_top_k(dist, owned, tiebreak, n, kcap)


def select(ps, state, key: Any, fraction: float, norm: str = "l2") -> jax.Array:
    """Standalone distributed priority selection of ``round(fraction · B)`` blocks of a
    :class:`~scarjax.ps.server.PSState` against its checkpoint cache (for tests and
    benchmarks; equals ``scarjax.scar.checkpoint.select(Checkpoint('priority', fraction),
    ...)`` on the logical state with the same key)."""
    va.check_real("fraction", fraction, lo=0.0, lo_open=True, hi=1.0, scalar=True)
    va.check_choice("norm", norm, ("l1", "l2"))
    key = va.check_key("key", key)
    n = block_count(ck.Checkpoint("priority", float(fraction)), ps.layout.num_blocks)
    return _select_jit(ps, n, norm, state.store, state.saved, state.placement, key)


def _select_impl(ps, n, norm, store, saved, placement, key):
    specs = ps._store_specs()

    def body(store, saved, placement, key):
        loc = Local(ps.layout, placement)
        return select_local(ps, loc, store, saved, key, n, norm)

    return jax.shard_map(body, mesh=ps.mesh, in_specs=(specs, specs, P(), P()), out_specs=P(),
                         check_vma=False)(store, saved, placement, key)


_select_jit = jax.jit(_select_impl, static_argnums=(0, 1, 2))
