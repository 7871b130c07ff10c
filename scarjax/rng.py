"""``jax.random`` draws, bit for bit, in a form XLA:CPU compiles in a fraction of the time.

A draw of a multi-dimensional shape, or of a short vector inside ``vmap`` (the trials of
:func:`scarjax.run_trials` make every per-trial draw of ``(n,)`` a ``[trials, n]`` draw),
hashes its counters over a small trailing dimension, and XLA:CPU spends seconds compiling
that hash (measured, 40 trials: a per-trial ``(10,)`` draw 1.7 CPU s against 0.5 for
``(16,)``; a ``(64, 10)`` normal inside a ``lax.cond`` 3.7 against 0.5 drawn flat). The
numbers do not depend on the shape: under JAX's default PRNG (``threefry2x32`` with
``jax_threefry_partitionable``, JAX's default setting) element ``i`` of a draw is the hash
of the key and ``i``, its flat (row-major) index. So a draw of shape ``s`` equals a flat
draw of at least ``prod(s)`` elements, cut to ``prod(s)`` and reshaped; the functions here
draw that way, ``MIN_FLAT`` elements at least (one or two elements: as given). With another
PRNG implementation or ``jax_threefry_partitionable`` off they call ``jax.random`` with the
shape as given.

``tests/test_flat_draws.py`` checks the premise and each function against ``jax.random``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["MIN_FLAT", "flat_ok", "uniform", "normal", "bernoulli"]

#: The fewest elements a flat draw takes (a shorter one is drawn this long and cut): below
#: 16, XLA:CPU compiles a per-trial draw under ``vmap`` seconds longer (measured for 5 and 10;
#: not for 1 and 2, which are drawn as given: padding a scalar costs ~0.1 s more).
MIN_FLAT = 16

_NORMAL_LO = np.nextafter(np.float32(-1.0), np.float32(0.0))


def flat_ok(key: jax.Array) -> bool:
    """Whether a draw with ``key`` counts elements by flat index alone (threefry2x32 with
    ``jax_threefry_partitionable``), so a flat draw cut and reshaped is the shaped draw."""
    if not jax.config.jax_threefry_partitionable:
        return False
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return str(jax.random.key_impl(key)) == "threefry2x32"
    return jax.config.jax_default_prng_impl == "threefry2x32"  # a raw uint32 key


def uniform(key: jax.Array, shape: tuple[int, ...] = (), minval: Any = 0.0, maxval: Any = 1.0) -> jax.Array:
    """``jax.random.uniform(key, shape, float32, minval, maxval)``, bit for bit, drawn flat
    (scalar ``minval``/``maxval``)."""
    shape = tuple(shape)
    n = math.prod(shape)
    if n <= 2 or not flat_ok(key):  # a scalar or a pair: as fast to compile as given (measured)
        return jax.random.uniform(key, shape, jnp.float32, minval, maxval)
    u = jax.random.uniform(key, (max(n, MIN_FLAT),), jnp.float32, minval, maxval)
    return u[:n].reshape(shape)


def normal(key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
    """``jax.random.normal(key, shape, float32)``, bit for bit: JAX draws ``u ~ U(nextafter(−1,
    0), 1)`` of ``shape`` and returns ``√2·erfinv(u)``; here ``u`` is drawn flat
    (:func:`uniform`) and ``√2·erfinv`` applied on ``shape`` as JAX does."""
    shape = tuple(shape)
    if not flat_ok(key):
        return jax.random.normal(key, shape, jnp.float32)
    u = uniform(key, shape, _NORMAL_LO, 1.0)
    return jax.lax.mul(np.float32(np.sqrt(2)), jax.lax.erf_inv(u))


def bernoulli(key: jax.Array, p: Any, shape: tuple[int, ...] = ()) -> jax.Array:
    """``jax.random.bernoulli(key, p, shape)`` for a float32 (or Python float) scalar ``p``,
    bit for bit: JAX compares a uniform draw of ``shape`` with ``p``; here that draw is flat
    (:func:`uniform`)."""
    p = jnp.asarray(p, jnp.float32)
    if p.ndim != 0:
        raise ValueError(f"p must be a scalar, got shape {p.shape}")
    shape = tuple(shape)
    if not flat_ok(key):
        return jax.random.bernoulli(key, p, shape)
    return uniform(key, shape) < p
