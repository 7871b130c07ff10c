"""Small pytree utilities: arithmetic and norms.

Everything here is a pure function over pytrees of arrays and is safe under ``jit`` and
``vmap``. Norms return ``float32`` scalars.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp

# ``is_traced`` lives with the other argument checks; re-exported here for the modules
# that still import it from ``scarjax.tree`` (one implementation).
from scarjax.validate import is_traced

PyTree = Any
Norm = Callable[[PyTree], jax.Array]

__all__ = [
    "tree_add",
    "tree_sub",
    "tree_scale",
    "tree_zeros_like",
    "tree_where",
    "l2_norm",
    "tree_size",
    "tree_dot",
    "is_traced",
]


def tree_add(a: PyTree, b: PyTree) -> PyTree:
    """Leafwise ``a + b``."""
    return jax.tree.map(jnp.add, a, b)


def tree_sub(a: PyTree, b: PyTree) -> PyTree:
    """Leafwise ``a - b``."""
    return jax.tree.map(jnp.subtract, a, b)


def tree_scale(s: jax.Array | float, a: PyTree) -> PyTree:
    """Leafwise ``s * a`` (``s`` a scalar)."""
    return jax.tree.map(lambda x: (s * x).astype(x.dtype), a)


def tree_zeros_like(a: PyTree) -> PyTree:
    return jax.tree.map(jnp.zeros_like, a)


def tree_where(cond: jax.Array, a: PyTree, b: PyTree) -> PyTree:
    """Select ``a`` where the scalar ``cond`` holds, else ``b`` (leafwise)."""
    return jax.tree.map(lambda x, y: jnp.where(cond, x, y), a, b)


def tree_dot(a: PyTree, b: PyTree) -> jax.Array:
    """Euclidean inner product of two pytrees with the same structure."""
    leaves = jax.tree.leaves(jax.tree.map(lambda x, y: jnp.vdot(x, y).real, a, b))
    return sum(leaves, jnp.zeros((), jnp.float32))


def l2_norm(a: PyTree) -> jax.Array:
    """Euclidean norm of all leaves of ``a`` taken together (the default norm)."""
    leaves = jax.tree.leaves(a)
    if not leaves:
        return jnp.zeros((), jnp.float32)
    sq = sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves)
    return jnp.sqrt(sq)


def tree_size(a: PyTree) -> int:
    """Total number of scalar entries in ``a`` (a Python int; shapes are static)."""
    return int(sum(x.size for x in jax.tree.leaves(a)))
