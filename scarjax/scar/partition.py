"""Parameter-server partitions: every leaf of a :class:`~scarjax.State` mapped to blocks,
and blocks mapped to servers (thesis Sec 5.4, 5.4.3, 5.5.1).

SCAR stores the model on parameter-server (PS) nodes: the parameters are cut into
*blocks* (a row of the MLR weight matrix, a row of ``L`` or a column of ``R`` in MF, a
document's topic distribution in LDA, a layer or a shard of a layer in a CNN) and the
blocks are assigned to servers, at random by default (Sec 5.4.3; Thm 5.4.2 assumes it).
A failure loses blocks; recovery and checkpoints act on blocks.

A :class:`Partition` is *data*: for every leaf of the state an int32 array of block ids
whose shape broadcasts against the leaf (``[d, 1]`` for the rows of a ``[d, k]`` matrix,
``[1, n]`` for its columns, all ones for a whole layer, the leaf's own shape for single
entries), plus ``server_of[num_blocks]``. Id ``-1`` marks entries that are never lost
(e.g. the Adam step count, or LDA's word-topic counts that can be regenerated). Because
it is data, a partition passes through ``jit``/``vmap`` and can be changed at run time
(re-partitioning when servers leave or join), with only ``num_blocks`` and
``num_servers`` static.

Optimizer state is co-located with its parameter (Sec 5.5.1, CNN): any sub-tree of
``state.aux`` with the tree structure and shapes of ``state.params`` (optax's ``mu`` and
``nu`` of Adam, momentum traces, …) gets the parameters' block map, so it is lost and
recovered together with them. Other aux leaves follow a user-given block map (LDA: a
document's token-topic assignments ``z`` follow its document, see ``aux_blocks``) or are
never lost.

Constructors: :func:`by_row` (alias of :func:`by_axis` with axis 0; MF uses
``by_axis(state, {"L": 0, "R": 1})``), :func:`by_layer`, :func:`by_shard`,
:func:`by_element`, :func:`by_unit` (a block that spans several leaves: a hidden unit's
column of ``W1``, entry of ``b1`` and row of ``W2``), and the general :func:`build` with a
layout per leaf.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from scarjax import State
  >>> from scarjax.scar import partition
  >>> s = State({"w": jnp.zeros((5, 3)), "b": jnp.zeros(3)})
  >>> part = partition.by_row(s, num_servers=2, key=jax.random.key(0))
  >>> part.num_blocks   # leaves flatten as b (3 entries), then w (5 rows)
  8
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import tree as tu
from scarjax.core import State

PyTree = Any

__all__ = [
    "Partition",
    "build",
    "by_axis",
    "by_row",
    "by_layer",
    "by_shard",
    "by_element",
    "by_unit",
    "NEVER",
    "LAYOUTS",
    "random_servers_assignment",
    "entry_masks",
    "expand_mask",
    "block_sizes",
    "random_blocks",
    "random_servers",
    "server_blocks",
    "restore",
    "block_distances",
    "leaf_block_ids",
    "check_matches",
]

NEVER = -1
"""Block id of entries that are never lost (and never need a checkpoint)."""

LAYOUTS = ("row", "column", "layer", "shard", "element", "never")
"""Per-leaf layouts understood by :func:`build` (see there)."""


# --------------------------------------------------------------------------------------
# The partition.


@dataclasses.dataclass(frozen=True)
class Partition:
    """Blocks of a state and the servers that hold them.

    Attributes:
      blocks: a pytree with the structure of the :class:`~scarjax.State` it was built
        for; each leaf is an int32 array of block ids broadcastable to that leaf (same
        ndim, size-1 axes where a block spans the axis), ``-1`` = never lost.
      server_of: ``int32[num_blocks]``, the server holding each block.
      num_blocks: number of blocks ``B`` (static).
      num_servers: number of servers ``S`` (static).
    """

    blocks: PyTree
    server_of: jax.Array
    num_blocks: int
    num_servers: int

    def replace(self, **changes: Any) -> "Partition":
        return dataclasses.replace(self, **changes)

    def reassign(self, server_of: Any) -> "Partition":
        """The same blocks on other servers (re-partitioning, Sec 5.4.3 'Actions During
        a Failure' step 1). ``server_of`` may be traced."""
        if not va.is_traced(server_of):
            va.check_integer_value("server_of", server_of, lo=0, hi=self.num_servers - 1)
        server_of = jnp.asarray(server_of, jnp.int32)
        if server_of.shape != (self.num_blocks,):
            raise ValueError(
                f"server_of must have shape ({self.num_blocks},), got {server_of.shape}"
            )
        return self.replace(server_of=server_of)


def check_matches(partition: Any, state: Any, name: str = "partition") -> None:
    """Raise ``ValueError`` naming ``name`` unless ``partition`` was built for a state like
    ``state`` (a :class:`~scarjax.State`, or a bare params pytree checked against the
    params part): same tree structure, and every leaf's block ids broadcastable to the
    leaf (same ndim; each axis 1 or the leaf's size). Works on tracers (shapes only), so
    a partition of one model used on another fails here, not inside JAX."""
    if not isinstance(partition, Partition):
        raise TypeError(f"{name} must be a scarjax.scar.partition.Partition, got {type(partition).__name__}")
    blocks = partition.blocks
    b_def, s_def = jax.tree.structure(blocks), jax.tree.structure(state)
    if b_def != s_def:
        params = getattr(blocks, "params", None)
        if params is not None and jax.tree.structure(params) == s_def:
            blocks = params
        else:
            raise ValueError(
                f"{name} was built for a state of another structure: the partition has "
                f"{b_def}, the state is {s_def} (build the partition from this model's state)"
            )
    for (path, ids), x in zip(jax.tree_util.tree_leaves_with_path(blocks), jax.tree.leaves(state)):
        i_shape, x_shape = tuple(np.shape(ids)), tuple(np.shape(x))
        if len(i_shape) != len(x_shape) or any(a not in (1, b) for a, b in zip(i_shape, x_shape)):
            raise ValueError(
                f"{name} was built for another model: its block ids at "
                f"{jax.tree_util.keystr(path) or 'the leaf'} have shape {i_shape}, which does not "
                f"fit a leaf of shape {x_shape} (build the partition from this model's state)"
            )


def _check_block_mask(block_mask: Any, partition: Partition, name: str = "block_mask") -> jax.Array:
    shape = tuple(np.shape(block_mask))
    if shape != (partition.num_blocks,):
        raise ValueError(f"{name} must have shape ({partition.num_blocks},) (one entry per block), got {shape}")
    return jnp.asarray(block_mask, bool)


jax.tree_util.register_dataclass(
    Partition, data_fields=["blocks", "server_of"], meta_fields=["num_blocks", "num_servers"]
)


# --------------------------------------------------------------------------------------
# Construction (host side, concrete shapes).


def _leaf_ids(shape: tuple[int, ...], layout: Any, offset: int) -> tuple[np.ndarray, int]:
    """Block ids (broadcastable to ``shape``) for one leaf laid out as ``layout``,
    numbered from ``offset``; returns ``(ids, number_of_blocks)``."""
    ndim = len(shape)
    ones = (1,) * ndim
    kind, arg = (layout if isinstance(layout, tuple) else (layout, None))
    if kind == "never":
        return np.full(ones, NEVER, np.int32), 0
    if kind == "layer" or ndim == 0:
        return np.full(ones, offset, np.int32), 1
    if kind == "element":
        n = int(np.prod(shape))
        return (offset + np.arange(n, dtype=np.int64)).reshape(shape).astype(np.int32), n
    if kind in ("row", "column", "axis"):
        axis = 0 if kind == "row" else (1 if kind == "column" else arg)
        if kind == "column" and ndim < 2:
            raise ValueError(f"layout 'column' needs a leaf with >= 2 dims, got shape {shape}")
        axis = int(axis) % ndim if -ndim <= int(axis) < ndim else None
        if axis is None:
            raise ValueError(f"axis {arg!r} out of range for a leaf of shape {shape}")
        n = shape[axis]
        sh = [1] * ndim
        sh[axis] = n
        return (offset + np.arange(n, dtype=np.int64)).reshape(sh).astype(np.int32), n
    if kind == "shard":
        n_dim = shape[0]
        shards = max(1, min(int(arg), n_dim))
        # np.array_split semantics: shard of row i is floor(i * shards / n).
        ids = (np.arange(n_dim, dtype=np.int64) * shards) // max(n_dim, 1)
        sh = [1] * ndim
        sh[0] = n_dim
        return (offset + ids).reshape(sh).astype(np.int32), shards
    raise ValueError(f"unknown layout {layout!r}; valid: {LAYOUTS} or ('axis', i) or ('shard', n)")


def _check_layout(layout: Any, where: str) -> None:
    if isinstance(layout, tuple):
        if len(layout) != 2 or layout[0] not in ("axis", "shard"):
            raise ValueError(f"{where}: layout tuple must be ('axis', i) or ('shard', n), got {layout!r}")
        if layout[0] == "shard" and (isinstance(layout[1], bool) or not isinstance(layout[1], (int, np.integer)) or layout[1] < 1):
            raise ValueError(f"{where}: shards must be an int >= 1, got {layout[1]!r}")
        return
    if layout not in LAYOUTS:
        raise ValueError(f"{where}: unknown layout {layout!r}; valid: {LAYOUTS}, ('axis', i), ('shard', n)")


def random_servers_assignment(key: jax.Array | int | None, num_blocks: int, num_servers: int) -> np.ndarray:
    """A balanced random assignment of blocks to servers: a random permutation of the
    blocks dealt round-robin to the servers (every server holds ``⌊B/S⌋`` or ``⌈B/S⌉``
    blocks; each block is on a given server with probability ``1/S``). ``key=None``
    deals the blocks in order (block ``b`` on server ``b mod S``)."""
    num_blocks = va.check_int("num_blocks", num_blocks, lo=1)
    num_servers = va.check_int("num_servers", num_servers, lo=1)
    if key is None:
        return (np.arange(num_blocks) % num_servers).astype(np.int32)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        if key < 0:
            raise ValueError(f"key as a seed must be >= 0, got {key!r}")
        seed = int(key)
    else:
        if va.is_traced(key):
            raise ValueError("key must be concrete (partitions are built on the host)")
        key = va.check_key("key", key)
        seed = [int(v) for v in np.asarray(jax.random.key_data(key)).ravel()]
    # Host-side (numpy) so that building a partition compiles nothing.
    perm = np.random.default_rng(seed).permutation(num_blocks)
    server = np.empty(num_blocks, np.int32)
    server[perm] = np.arange(num_blocks) % num_servers
    return server


def _is_params_like(x: Any, ptree: Any, pshapes: list) -> bool:
    try:
        if jax.tree.structure(x) != ptree:
            return False
    except Exception:  # pragma: no cover - exotic leaves
        return False
    leaves = jax.tree.leaves(x)
    return len(leaves) == len(pshapes) and all(
        hasattr(l, "shape") and tuple(l.shape) == s for l, s in zip(leaves, pshapes)
    )


def _aux_ids(aux: PyTree, params: PyTree, param_ids: PyTree, aux_blocks: Any, num_blocks: int) -> PyTree:
    """Block-id pytree for ``aux``: params-shaped sub-trees get ``param_ids``; leaves
    named by ``aux_blocks`` get the given ids; everything else is never lost."""
    ptree = jax.tree.structure(params)
    pshapes = [tuple(np.shape(l)) for l in jax.tree.leaves(params)]
    is_pl = lambda x: _is_params_like(x, ptree, pshapes)  # noqa: E731

    def auto(x):
        if is_pl(x):
            return param_ids
        return jax.tree.map(lambda l: np.full((1,) * np.ndim(l), NEVER, np.int32), x)

    auto_ids = jax.tree.map(auto, aux, is_leaf=is_pl)
    if aux_blocks is None:
        return auto_ids
    given = aux_blocks(aux, param_ids) if callable(aux_blocks) else aux_blocks
    aux_leaves, aux_def = jax.tree.flatten(aux)
    given_leaves, given_def = jax.tree.flatten(given, is_leaf=lambda x: x is None or isinstance(x, str))
    if len(given_leaves) != len(aux_leaves):
        raise ValueError(
            "aux_blocks must return a pytree with the structure of state.aux (one entry per "
            f"aux leaf: an int array of block ids or None for automatic); got {given_def} "
            f"for aux {aux_def}"
        )
    auto_leaves = aux_def.flatten_up_to(auto_ids)
    out = []
    for i, (leaf, g, a) in enumerate(zip(aux_leaves, given_leaves, auto_leaves)):
        if g is None or (isinstance(g, str) and g == "auto"):
            out.append(a)
            continue
        if isinstance(g, str):
            if g != "never":
                raise ValueError(f"aux_blocks entry {i} must be block ids, None, 'auto' or 'never', got {g!r}")
            out.append(np.full((1,) * np.ndim(leaf), NEVER, np.int32))
            continue
        g = np.asarray(g)
        if not np.issubdtype(g.dtype, np.integer):
            raise TypeError(f"aux_blocks entry {i} must hold integer block ids, got dtype {g.dtype}")
        shape = tuple(np.shape(leaf))
        if g.ndim < len(shape):
            g = g.reshape(g.shape + (1,) * (len(shape) - g.ndim))
        try:
            np.broadcast_shapes(g.shape, shape)
        except ValueError:
            raise ValueError(
                f"aux_blocks entry {i}: block ids of shape {g.shape} do not broadcast to the "
                f"aux leaf of shape {shape}"
            ) from None
        if g.ndim != len(shape):
            raise ValueError(f"aux_blocks entry {i}: ids have more dims ({g.ndim}) than the leaf {shape}")
        if g.size and (g.min() < NEVER or g.max() >= num_blocks):
            raise ValueError(
                f"aux_blocks entry {i}: block ids must be in [-1, {num_blocks - 1}], got range "
                f"[{g.min()}, {g.max()}]"
            )
        out.append(g.astype(np.int32))
    return jax.tree.unflatten(aux_def, out)


def build(
    state: Any,
    layout: Any = "row",
    *,
    num_servers: int = 8,
    key: jax.Array | int | None = 0,
    aux_blocks: Any = None,
) -> Partition:
    """Build a :class:`Partition` of ``state`` (a :class:`~scarjax.State`, or a bare
    params pytree, which is treated as ``State(params, ())``).

    Args:
      state: the state to partition (only shapes matter; ``jax.eval_shape`` output works).
      layout: a layout for every params leaf, or a pytree (prefix of ``state.params``)
        of layouts: ``'row'`` (one block per index of axis 0), ``'column'`` (axis 1),
        ``('axis', i)``, ``'layer'`` (the whole leaf is one block), ``('shard', n)``
        (``n`` even shards along axis 0, Sec 5.5.1 by-shard), ``'element'`` (every entry
        its own block), ``'never'`` (never lost). Blocks are numbered leaf by leaf in
        ``jax.tree.leaves`` order.
      num_servers: number of PS servers ``S`` (``1 <= S``).
      key: random assignment of blocks to servers (default; Thm 5.4.2 assumes random
        partitioning); ``None`` assigns block ``b`` to server ``b mod S``.
      aux_blocks: how ``state.aux`` leaves are placed. ``None``: sub-trees shaped like
        the params (optimizer moments) follow their parameters, other aux leaves are
        never lost. Or a callable ``aux_blocks(aux, param_blocks) -> pytree`` with the
        structure of ``aux`` whose entries are int arrays of block ids (broadcastable to
        the leaf; ``-1`` never lost), ``'never'``, or ``None``/``'auto'`` (automatic),
        where ``param_blocks`` is the params' block-id pytree, e.g. for LDA (params
        ``n_dk [D, K]``, aux ``(z, n_wk, n_k)``), assignments that follow their documents:
        ``lambda aux, pb: type(aux)(pb[:, 0][doc_of_token], "never", "never")``.
        Automatic detection matches sub-trees by tree structure and shapes; when the
        params are a single bare array, any aux array of the same shape matches, so
        name such leaves ``'never'`` explicitly if they are not optimizer moments.

    Raises:
      ValueError / TypeError on unknown layouts, bad ``num_servers`` or bad aux ids.
    """
    if not isinstance(state, State):
        state = State(state, ())
    if isinstance(num_servers, bool) or not isinstance(num_servers, (int, np.integer)) or num_servers < 1:
        raise ValueError(f"num_servers must be an int >= 1, got {num_servers!r}")
    params = state.params
    p_leaves, p_def = jax.tree.flatten(params)
    if not p_leaves:
        raise ValueError("state.params has no array leaves to partition")
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        if not hasattr(leaf, "shape") and not isinstance(leaf, (int, float, np.number)):
            raise TypeError(
                f"state{jax.tree_util.keystr(path)} must be an array (or a jax.eval_shape "
                f"result), got {type(leaf).__name__} {leaf!r}"
            )
    # Broadcast the layout prefix over the params leaves.
    is_layout = lambda x: isinstance(x, (str, tuple)) and not (isinstance(x, tuple) and len(x) and not isinstance(x[0], str))  # noqa: E731
    if is_layout(layout):
        layouts = [layout] * len(p_leaves)
    else:
        try:
            full = jax.tree.map(
                lambda lay, sub: jax.tree.map(lambda _: lay, sub), layout, params, is_leaf=is_layout
            )
            layouts = jax.tree.leaves(full, is_leaf=is_layout)
        except Exception as e:
            raise ValueError(
                f"layout must be a layout or a pytree prefix of state.params of layouts; "
                f"got {layout!r} for params structure {p_def}"
            ) from e
        if len(layouts) != len(p_leaves):
            raise ValueError(f"layout pytree does not match state.params ({p_def}): {layout!r}")
    ids, offset = [], 0
    for i, (leaf, lay) in enumerate(zip(p_leaves, layouts)):
        _check_layout(lay, f"layout of params leaf {i}")
        a, n = _leaf_ids(tuple(np.shape(leaf)), lay, offset)
        ids.append(a)
        offset += n
    num_blocks = offset
    if num_blocks == 0:
        raise ValueError("the partition has no blocks (every params leaf is 'never')")
    param_ids = jax.tree.unflatten(p_def, ids)
    aux_ids = _aux_ids(state.aux, params, param_ids, aux_blocks, num_blocks)
    server_of = random_servers_assignment(key, num_blocks, int(num_servers))
    blocks = State(
        jax.tree.map(jnp.asarray, param_ids),
        jax.tree.map(jnp.asarray, aux_ids),
    )
    return Partition(blocks, jnp.asarray(server_of), int(num_blocks), int(num_servers))


def by_axis(state: Any, axis: Any = 0, **kwargs: Any) -> Partition:
    """One block per index of ``axis`` of every params leaf (``axis`` may be a pytree
    prefix of the params, e.g. MF's ``{"L": 0, "R": 1}``: rows of L, columns of R,
    Sec 5.5.1). Keyword arguments go to :func:`build`."""
    def one(a):
        return ("axis", va.check_int("axis", a))

    if isinstance(axis, (int, np.integer)) and not isinstance(axis, bool):
        return build(state, one(axis), **kwargs)
    if axis is None:
        raise TypeError("axis must be an int or a pytree (prefix of state.params) of ints, got None")
    layout = jax.tree.map(one, axis)
    params = getattr(state, "params", state)
    is_axis = lambda x: isinstance(x, tuple) and len(x) == 2 and x[0] == "axis"  # noqa: E731
    try:
        jax.tree.map(lambda lay, sub: None, layout, params, is_leaf=is_axis)
    except (ValueError, TypeError):
        raise ValueError(
            f"axis must be an int or a pytree prefix of state.params ({jax.tree.structure(params)}) of ints, "
            f"got {axis!r}"
        ) from None
    return build(state, layout, **kwargs)


def by_row(state: Any, **kwargs: Any) -> Partition:
    """Rows (axis 0) of every params leaf are blocks (MLR weight rows, Sec 5.5.1)."""
    return build(state, "row", **kwargs)


def by_layer(state: Any, **kwargs: Any) -> Partition:
    """Every params leaf (a layer's weight, its bias, …) is one block (CNN by-layer,
    Sec 5.5.1: weight and bias are partitioned separately)."""
    return build(state, "layer", **kwargs)


def by_shard(state: Any, shards: int = 8, **kwargs: Any) -> Partition:
    """Every params leaf split evenly along its first dimension into ``shards`` blocks
    (fewer if the dimension is smaller) (CNN by-shard, Sec 5.5.1)."""
    return build(state, ("shard", va.check_int("shards", shards, lo=1)), **kwargs)


def by_element(state: Any, **kwargs: Any) -> Partition:
    """Every scalar parameter is its own block (the setting of Thm 5.4.2)."""
    return build(state, "element", **kwargs)


def _axis_at(axes: Any, path: tuple) -> Any:
    """The entry of the nested mapping/sequence ``axes`` at a leaf's key path (``None``
    where ``axes`` does not name the leaf)."""
    node = axes
    for k in path:
        key = getattr(k, "key", getattr(k, "idx", getattr(k, "name", None)))
        if isinstance(node, Mapping):
            if key not in node:
                return None
            node = node[key]
        elif isinstance(node, (list, tuple)) and isinstance(key, int):
            if key >= len(node):
                return None
            node = node[key]
        else:
            return node if not isinstance(node, (Mapping, list, tuple)) else None
        if node is None or isinstance(node, (int, np.integer)):
            return node
    return node


def _unknown_keys(axes: Any, params: Any, where: str = "axes") -> None:
    """Refuse an ``axes`` entry that names no params leaf (a typo would silently leave the
    leaf out of the units)."""
    if isinstance(axes, Mapping):
        if not isinstance(params, Mapping):
            raise ValueError(f"{where} is a mapping but the params at that level are a {type(params).__name__}")
        for k, v in axes.items():
            if k not in params:
                raise ValueError(f"{where}[{k!r}] names no params leaf; the params have {sorted(map(str, params))}")
            _unknown_keys(v, params[k], f"{where}[{k!r}]")


def by_unit(
    state: Any,
    axes: Mapping,
    *,
    rest: Any = "element",
    num_servers: int = 8,
    key: jax.Array | int | None = 0,
    aux_blocks: Any = None,
) -> Partition:
    """Blocks that span several leaves: block ``u`` is index ``u`` along a chosen axis of
    every listed leaf, e.g. a hidden unit of an MLP — column ``u`` of ``W1``, entry ``u``
    of ``b1`` and row ``u`` of ``W2`` — with the optimizer's moments of those entries
    (co-located, Sec 5.5.1). Partial recovery (thesis Sec 5.4, Thms 5.4.1–5.4.2) then
    loses and reloads whole units, the natural block of a model served by neurons
    (docs/testing.md shows it with ``check_partial_recovery``).

    Args:
      state: a :class:`~scarjax.State` (or a bare params pytree); only shapes matter.
      axes: a nested mapping (a prefix of the params' dicts, or lists for list params)
        from the listed leaves to the axis that carries the unit index, e.g.
        ``{"W1": 1, "b1": 0, "W2": 0}``. Every listed axis must have the same length
        ``U`` (the number of units); blocks ``0 … U − 1`` are the units. A key that names
        no params leaf is refused.
      rest: the layout (see :func:`build`) of the leaves ``axes`` does not list
        (``'element'`` by default, ``'layer'``, ``'row'``, ``'never'``, …); their blocks
        are numbered after the units.
      num_servers, key, aux_blocks: as in :func:`build` (``aux_blocks=None``: sub-trees
        of ``state.aux`` shaped like the params — Adam's ``mu``/``nu`` — get the same
        block ids, so a unit is lost and recovered with its moments).

    Returns:
      a :class:`Partition` with ``U`` unit blocks plus the blocks of the other leaves.

    Raises:
      ValueError / TypeError naming a bad argument: an empty ``axes``, an axis out of
      range, listed axes of different lengths, a key that names no leaf.

    Example:
      >>> import jax.numpy as jnp, optax
      >>> from scarjax import State
      >>> from scarjax.scar import partition
      >>> params = {"W1": jnp.zeros((3, 5)), "b1": jnp.zeros(5), "W2": jnp.zeros((5, 2)), "b2": jnp.zeros(2)}
      >>> state = State(params, optax.adam(1e-3).init(params))
      >>> part = partition.by_unit(state, {"W1": 1, "b1": 0, "W2": 0})
      >>> part.num_blocks   # 5 hidden units, then b2's 2 entries
      7
      >>> int(part.blocks.params["W1"][0, 4]), int(part.blocks.params["b1"][4]), int(part.blocks.params["W2"][4, 0])
      (4, 4, 4)
      >>> int(part.blocks.aux[0].mu["W2"][4, 0])   # Adam's first moment follows its unit
      4
    """
    if not isinstance(state, State):
        state = State(state, ())
    if not isinstance(axes, Mapping) or not axes:
        raise TypeError(
            "axes must be a non-empty mapping from params leaves to the axis of the unit index, "
            f"e.g. {{'W1': 1, 'b1': 0, 'W2': 0}}; got {axes!r}"
        )
    _check_layout(rest, "rest")
    if isinstance(num_servers, bool) or not isinstance(num_servers, (int, np.integer)) or num_servers < 1:
        raise ValueError(f"num_servers must be an int >= 1, got {num_servers!r}")
    params = state.params
    _unknown_keys(axes, params)
    leaves = jax.tree_util.tree_leaves_with_path(params)
    p_def = jax.tree.structure(params)
    listed = []
    for path, leaf in leaves:
        a = _axis_at(axes, path)
        if a is None:
            continue
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"axes{jax.tree_util.keystr(path)} must be an int axis, got {a!r}")
        shape = tuple(np.shape(leaf))
        if not -len(shape) <= int(a) < len(shape):
            raise ValueError(f"axes{jax.tree_util.keystr(path)} = {a} is out of range for a leaf of shape {shape}")
        listed.append((jax.tree_util.keystr(path), int(a) % len(shape), shape))
    if not listed:
        raise ValueError(f"axes {axes!r} lists no params leaf")
    sizes = {name: shape[a] for name, a, shape in listed}
    if len(set(sizes.values())) != 1:
        raise ValueError(
            f"axes: every listed leaf must have the same number of units along its axis, got {sizes}"
        )
    units = next(iter(sizes.values()))
    ids, offset = [], units
    for path, leaf in leaves:
        shape = tuple(np.shape(leaf))
        a = _axis_at(axes, path)
        if a is None:
            arr, n = _leaf_ids(shape, rest, offset)
            offset += n
        else:
            sh = [1] * len(shape)
            sh[int(a) % len(shape)] = units
            arr = np.arange(units, dtype=np.int32).reshape(sh)
        ids.append(arr)
    param_ids = jax.tree.unflatten(p_def, ids)
    aux_ids = _aux_ids(state.aux, params, param_ids, aux_blocks, offset)
    server_of = random_servers_assignment(key, offset, int(num_servers))
    blocks = State(jax.tree.map(jnp.asarray, param_ids), jax.tree.map(jnp.asarray, aux_ids))
    return Partition(blocks, jnp.asarray(server_of), int(offset), int(num_servers))


# --------------------------------------------------------------------------------------
# Pure, traceable operations.


def _lookup(block_mask: jax.Array, ids: jax.Array) -> jax.Array:
    """``block_mask[ids]`` with ``-1`` (never lost) mapped to ``False``."""
    ext = jnp.concatenate([block_mask.astype(bool), jnp.zeros((1,), bool)])
    return ext[jnp.where(ids < 0, block_mask.shape[0], ids)]


def entry_masks(partition: Partition, block_mask: jax.Array) -> PyTree:
    """Per-leaf boolean masks (broadcastable to each leaf of the state) of the entries
    that belong to the selected blocks ``block_mask[num_blocks]``."""
    return jax.tree.map(lambda ids: _lookup(block_mask, ids), partition.blocks)


def expand_mask(masks: PyTree, like: PyTree) -> PyTree:
    """Broadcast :func:`entry_masks` to the full leaf shapes of ``like``."""
    return jax.tree.map(lambda m, x: jnp.broadcast_to(m, jnp.shape(x)), masks, like)


def restore(state: Any, saved: Any, partition: Partition, block_mask: jax.Array) -> Any:
    """``state`` with the entries of the selected blocks replaced by ``saved``'s: partial
    recovery of lost blocks from a checkpoint (Sec 5.4.1), or the save of selected
    blocks into a running checkpoint (Sec 5.4.2) with the roles swapped."""
    check_matches(partition, state)
    va.check_tree_like("saved", saved, state, "state")
    block_mask = _check_block_mask(block_mask, partition)
    masks = entry_masks(partition, block_mask)
    return jax.tree.map(lambda m, s, x: jnp.where(m, s.astype(x.dtype), x), masks, saved, state)


def leaf_block_ids(partition: Partition, like: Any) -> PyTree:
    """Block ids broadcast to the full shapes of ``like`` (a state)."""
    check_matches(partition, like)
    return jax.tree.map(lambda ids, x: jnp.broadcast_to(ids, jnp.shape(x)), partition.blocks, like)


def block_sizes(partition: Partition, like: Any) -> jax.Array:
    """``int32[num_blocks]``: number of state entries (params and co-located aux) in each
    block."""
    check_matches(partition, like)
    total = jnp.zeros((partition.num_blocks,), jnp.int32)
    for ids, x in zip(jax.tree.leaves(partition.blocks), jax.tree.leaves(like)):
        full = jnp.broadcast_to(ids, jnp.shape(x)).ravel()
        total = total + jax.ops.segment_sum(
            jnp.ones_like(full), jnp.where(full < 0, partition.num_blocks, full),
            num_segments=partition.num_blocks,
        )
    return total


def random_blocks(key: jax.Array, num_blocks: int, fraction: jax.Array | float) -> jax.Array:
    """``bool[num_blocks]`` with exactly ``round(fraction · B)`` blocks chosen uniformly
    at random (``fraction`` may be traced): a failure losing a uniformly random fraction
    of the blocks (Thm 5.4.2)."""
    va.check_real("fraction", fraction, lo=0.0, hi=1.0, scalar=True)
    u = jax.random.uniform(key, (num_blocks,))
    count = jnp.round(jnp.asarray(fraction, jnp.float32) * num_blocks).astype(jnp.int32)
    rank = jnp.argsort(jnp.argsort(u))
    return rank < count


def random_servers(key: jax.Array, num_servers: int, count: jax.Array | int) -> jax.Array:
    """``bool[num_servers]`` with exactly ``count`` servers failed, chosen uniformly at
    random (``count`` may be traced)."""
    va.check_integer_value("count", count, lo=0, hi=num_servers, scalar=True)
    u = jax.random.uniform(key, (num_servers,))
    rank = jnp.argsort(jnp.argsort(u))
    return rank < jnp.asarray(count, jnp.int32)


def server_blocks(partition: Partition, failed_servers: jax.Array) -> jax.Array:
    """``bool[num_blocks]``: the blocks held by the failed servers."""
    if tuple(np.shape(failed_servers)) != (partition.num_servers,):
        raise ValueError(
            f"failed_servers must have shape ({partition.num_servers},) (one flag per server), "
            f"got {tuple(np.shape(failed_servers))}"
        )
    failed_servers = jnp.asarray(failed_servers, bool)
    return failed_servers[partition.server_of]


def block_distances(
    partition: Partition,
    a: PyTree,
    b: PyTree,
    norm: Callable[[PyTree], jax.Array] | str = "l2",
) -> jax.Array:
    """``float32[num_blocks]``: per-block distance ``‖a_blk − b_blk‖`` between two params
    pytrees, in the algorithm's norm (the priority of Sec 5.4.2: "save the parameters
    which have changed the most since they were previously saved").

    ``norm='l2'`` (or ``scarjax.tree.l2_norm``) uses a segment sum of squared differences
    (``O(|params|)``); ``'l1'`` a segment sum of absolute differences; any other callable
    is applied to the difference masked to each block in turn (exact for any norm, cost
    ``O(B · |params|)``).
    """
    check_matches(partition, a)
    va.check_tree_like("b", b, a, "a")
    p_ids = partition.blocks.params
    B = partition.num_blocks
    diff = tu.tree_sub(a, b)
    if norm is tu.l2_norm or norm in ("l2", "l1"):
        power = "l1" if norm == "l1" else "l2"
        total = jnp.zeros((B,), jnp.float32)
        for ids, d in zip(jax.tree.leaves(p_ids), jax.tree.leaves(diff)):
            v = jnp.abs(d.astype(jnp.float32)) if power == "l1" else jnp.square(d.astype(jnp.float32))
            axes = tuple(i for i, s in enumerate(ids.shape) if s == 1 and d.shape[i] != 1)
            if axes:
                v = jnp.sum(v, axis=axes, keepdims=True)
            full = jnp.broadcast_to(ids, v.shape).ravel()
            total = total + jax.ops.segment_sum(
                v.ravel(), jnp.where(full < 0, B, full), num_segments=B
            )
        return total if power == "l1" else jnp.sqrt(total)
    if not callable(norm):
        raise TypeError(f"norm must be 'l2', 'l1' or a callable, got {norm!r}")

    def one(bidx):
        masked = jax.tree.map(lambda ids, d: jnp.where(ids == bidx, d, jnp.zeros_like(d)), p_ids, diff)
        return norm(masked)

    return jax.lax.map(one, jnp.arange(B, dtype=jnp.int32))
