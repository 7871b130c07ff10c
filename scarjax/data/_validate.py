"""Argument checks shared by the loaders (raise ``ValueError`` naming the argument)."""

from __future__ import annotations

import numbers

import numpy as np


def check_int(name: str, value, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int in ``[low, high]``, else ``ValueError`` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name}: expected an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        hi = "inf" if high is None else high
        raise ValueError(f"{name}: expected an integer in [{low}, {hi}], got {value}")
    return int(value)


def check_float(name: str, value, low: float, high: float = np.inf, *, open_low=False) -> float:
    """``value`` as a finite float in ``[low, high]`` (``(low, high]`` if ``open_low``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not np.isfinite(value):
        raise ValueError(f"{name}: expected a finite number, got {value!r}")
    if value < low or value > high or (open_low and value == low):
        lb = "(" if open_low else "["
        raise ValueError(f"{name}: expected a number in {lb}{low}, {high}], got {value}")
    return float(value)


def check_choice(name: str, value, choices) -> str:
    """``value`` if it is one of ``choices``, else ``ValueError`` naming ``name``."""
    if value not in choices:
        raise ValueError(f"{name}: expected one of {sorted(choices)}, got {value!r}")
    return value


def as_rng(key_or_seed) -> np.random.Generator:
    """A NumPy generator from a non-negative int seed or a JAX PRNG key.

    A JAX key (typed ``jax.random.key`` or raw ``uint32[2]`` ``PRNGKey``) is turned into
    a seed from its key data, so the same key always gives the same data set.
    """
    if isinstance(key_or_seed, numbers.Integral) and not isinstance(key_or_seed, bool):
        if key_or_seed < 0:
            raise ValueError(f"key_or_seed: expected a non-negative seed, got {key_or_seed}")
        return np.random.default_rng(int(key_or_seed))
    try:
        import jax

        arr = key_or_seed
        if jax.dtypes.issubdtype(getattr(arr, "dtype", None), jax.dtypes.prng_key):
            arr = jax.random.key_data(arr)
        data = np.asarray(arr)
    except Exception as e:  # noqa: BLE001 - report as a bad argument
        raise ValueError(f"key_or_seed: expected an int seed or a JAX PRNG key, got {key_or_seed!r}") from e
    if data.dtype != np.uint32 or data.size == 0:
        raise ValueError(f"key_or_seed: expected an int seed or a JAX PRNG key, got {key_or_seed!r}")
    return np.random.default_rng([int(v) for v in data.ravel()])
