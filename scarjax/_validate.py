"""Argument checks shared by the core API (raise a ``ValueError``/``TypeError`` naming the
argument, never let a bad value through to a silently wrong result).

Validation happens at the API boundary on *concrete* values only (docs/architecture.md
§10): a traced value (a hook parameter varied across vmapped trials through
``hook_args``) passes unchecked, and checks never force a device sync inside a trace.
Shape and tree-structure checks (:func:`check_tree_like`) work on tracers too, since
shapes are static.

``scarjax/pollux/_checks.py`` and ``scarjax/data/_validate.py`` hold the same kind of
helpers for their packages (to be merged into this module).
"""

from __future__ import annotations

import numbers
from typing import Any, Sequence

import jax
import numpy as np

__all__ = [
    "is_traced",
    "check_numeric",
    "check_int",
    "check_integer_value",
    "check_real",
    "check_bounds",
    "check_finite_tree",
    "check_callable",
    "check_str",
    "check_choice",
    "check_tree_like",
    "check_key",
]


def is_traced(x: Any) -> bool:
    """Whether ``x`` or any leaf of it is a JAX tracer (an abstract value in a trace)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))


def _show(x: Any) -> str:
    a = np.asarray(x)
    if a.ndim == 0:
        return repr(x)
    flat = a.reshape(-1)
    return f"array of shape {a.shape} (e.g. {flat[:4].tolist()})"


def _numeric(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 array, or ``TypeError`` naming ``name`` if it is not numeric."""
    if isinstance(value, (str, bytes)) or value is None:
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    try:
        a = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - report as a bad argument
        raise TypeError(f"{name} must be a number or an array of numbers, got {type(value).__name__}") from e
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.number)):
        raise TypeError(f"{name} must be a number (not {a.dtype}), got {_show(value)}")
    if np.issubdtype(a.dtype, np.complexfloating):
        raise TypeError(f"{name} must be real, got {a.dtype}")
    return a.astype(np.float64)


def check_numeric(name: str, value: Any) -> np.ndarray:
    """``value`` as a float64 NumPy array (``TypeError`` naming ``name`` unless it is a
    real number or an array of them; NaN/inf allowed)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    return _numeric(name, value)


def check_int(name: str, value: Any, *, lo: int | None = None, hi: int | None = None) -> int:
    """A static Python ``int`` (shape-determining: a step count, a worker count): ``int``
    or a NumPy integer, not ``bool``, within ``[lo, hi]``. ``TypeError`` for non-numbers,
    ``ValueError`` for non-integers and values out of range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            raise ValueError(f"{name} must be an int, got {value!r}")
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    value = int(value)
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise ValueError(f"{name} must be an int in [{lo}, {'inf' if hi is None else hi}], got {value}")
    return value


def _check_scalar(name: str, a: np.ndarray, scalar: bool) -> None:
    if scalar and a.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got an array of shape {a.shape}")


def check_integer_value(
    name: str, value: Any, *, lo: int | None = None, hi: int | None = None, scalar: bool = False
) -> None:
    """A concrete integer-valued number or array (``3`` or ``3.0``; ``bool`` refused)
    within ``[lo, hi]`` (a 0-d value if ``scalar``); traced values pass. For hook
    parameters that may be traced."""
    if is_traced(value):
        return
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    a = _numeric(name, value)
    _check_scalar(name, a, scalar)
    if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
        raise ValueError(f"{name} must be an integer, got {_show(value)}")
    if (lo is not None and np.any(a < lo)) or (hi is not None and np.any(a > hi)):
        raise ValueError(f"{name} must be an integer in [{lo}, {'inf' if hi is None else hi}], got {_show(value)}")


def check_real(
    name: str,
    value: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    allow_inf: bool = False,
    scalar: bool = False,
) -> None:
    """A concrete real number or array (0-d if ``scalar``), not NaN, finite unless
    ``allow_inf``, every entry in the range (``(``/``)`` ends when ``lo_open``/``hi_open``);
    traced values pass."""
    if is_traced(value):
        return
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    a = _numeric(name, value)
    _check_scalar(name, a, scalar)
    if np.any(np.isnan(a)):
        raise ValueError(f"{name} must not be NaN, got {_show(value)}")
    if not allow_inf and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {_show(value)}")
    check_bounds(name, a, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, shown=value)


def check_bounds(
    name: str,
    a: np.ndarray,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    shown: Any = None,
    show: Any = None,
) -> None:
    """``ValueError`` naming ``name`` unless every entry of the concrete array ``a`` lies in
    ``[lo, hi]`` (``(``/``)`` ends when ``lo_open``/``hi_open``; ``None``: unbounded). The
    message shows ``shown`` (default: the offending entries) through ``show``."""
    ok = np.ones(a.shape, bool)
    if lo is not None:
        ok &= (a > lo) if lo_open else (a >= lo)
    if hi is not None:
        ok &= (a < hi) if hi_open else (a <= hi)
    if not np.all(ok):
        rng = f"{'(' if lo_open else '['}{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}{')' if hi_open else ']'}"
        got = (show or _show)(a[~ok] if shown is None else shown)
        raise ValueError(f"{name} must lie in {rng}, got {got}")


def check_finite_tree(name: str, tree: Any) -> None:
    """Every floating leaf of the concrete pytree ``tree`` is finite (no NaN/inf); traced
    leaves pass. One host transfer per leaf: use on parameters, not on data sets."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if is_traced(leaf) or leaf is None:
            continue
        try:
            a = np.asarray(leaf)
        except Exception:  # noqa: BLE001 - non-array leaves are checked elsewhere
            continue
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.complexfloating)):
            if a.dtype.kind in "biu":
                continue
            if a.dtype == object or a.dtype.kind in "SU":
                where = jax.tree_util.keystr(path)
                raise TypeError(f"{name}{where} must be an array of numbers, got {type(leaf).__name__} {leaf!r}")
            continue
        if not np.all(np.isfinite(a)):
            bad = int(np.size(a) - np.count_nonzero(np.isfinite(a)))
            where = jax.tree_util.keystr(path)
            raise ValueError(
                f"{name}{where} must be finite: {bad} of {a.size} entries are NaN or inf"
            )


def check_callable(name: str, value: Any) -> None:
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r}")


def check_str(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    return value


def check_choice(name: str, value: Any, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def _shapes(tree: Any) -> tuple[Any, list]:
    leaves, treedef = jax.tree.flatten(tree)
    return treedef, [tuple(np.shape(x)) for x in leaves]


def check_tree_like(name: str, tree: Any, like: Any, like_name: str) -> None:
    """``tree`` has the tree structure and leaf shapes of ``like`` (works on tracers:
    shapes are static). ``ValueError`` naming ``name`` and describing the difference."""
    t_def, t_shapes = _shapes(tree)
    l_def, l_shapes = _shapes(like)
    if t_def != l_def:
        raise ValueError(
            f"{name} must have the tree structure of {like_name}: got {t_def}, expected {l_def}"
        )
    for i, (a, b) in enumerate(zip(t_shapes, l_shapes)):
        if a != b:
            paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_leaves_with_path(like)]
            where = f"leaf {paths[i]}" if paths[i] else ("its leaf" if len(paths) == 1 else f"leaf {i}")
            raise ValueError(
                f"{name} must have the leaf shapes of {like_name}: {where} has shape {a}, expected {b}"
            )


def check_key(name: str, key: Any, *, batched: bool = False) -> jax.Array:
    """A PRNG key (typed ``jax.random.key`` or raw ``uint32[2]``) or, for a single key, an
    int seed. ``batched``: a 1-D array of keys. Returns a typed key array."""
    import jax.numpy as jnp

    if isinstance(key, bool):
        raise TypeError(f"{name} must be a PRNG key or an int seed, got {key!r}")
    if isinstance(key, numbers.Integral) and not batched:
        if not -(2**63) <= int(key) < 2**64:
            raise ValueError(f"{name} as an int seed must fit in 64 bits, got {key!r}")
        return jax.random.key(int(key))
    if isinstance(key, (str, bytes, float)) or key is None or isinstance(key, numbers.Number):
        raise TypeError(
            f"{name} must be a PRNG key (jax.random.key(seed)) or an int seed, got "
            f"{type(key).__name__} {key!r}"
        )
    if not isinstance(key, jax.Array):
        try:
            key = jnp.asarray(key)
        except Exception as e:  # noqa: BLE001 - report as a bad argument
            raise TypeError(f"{name} must be a PRNG key, got {type(key).__name__}") from e
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        out = key
    elif key.dtype == jnp.uint32 and key.shape[-1:] == (2,):
        out = jax.random.wrap_key_data(key)
    else:
        raise TypeError(
            f"{name} must be a PRNG key (jax.random.key(seed)) or an int seed, "
            f"got dtype {key.dtype} shape {key.shape}"
        )
    want = 1 if batched else 0
    if out.ndim != want:
        what = "a 1-D array of PRNG keys" if batched else "a single PRNG key"
        raise ValueError(f"{name} must be {what}, got key shape {out.shape}")
    return out
