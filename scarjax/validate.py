"""Argument checks shared by the core API (raise a ``ValueError``/``TypeError`` naming the
argument, never let a bad value through to a silently wrong result).

Validation happens at the API boundary on *concrete* values only (docs/architecture.md
§10): a traced value (a hook parameter varied across vmapped trials through
``hook_args``) passes unchecked, and checks never force a device sync inside a trace.
Shape and tree-structure checks (:func:`check_tree_like`) work on tracers too, since
shapes are static.

The data loaders' checks live here too (:class:`DataFormatError` for a malformed file,
:func:`check_path`, :func:`check_scale`, :func:`as_rng`): one module validates every
argument of the library.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Any, Collection

import jax
import numpy as np
import jax.numpy as jnp

__all__ = [
    "is_traced",
    "is_concrete",
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
    "DataFormatError",
    "check_bool",
    "check_path",
    "check_scale",
    "as_rng",
]


def is_traced(x: Any) -> bool:
    """Whether ``x`` or any leaf of it is a JAX tracer (an abstract value in a trace)."""
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(x))


def is_concrete(x: Any, *, scalar: bool = False) -> bool:
    """Whether ``x`` is given (not ``None``) and concrete (not traced), and 0-d when
    ``scalar``: a value a check can inspect now.

    >>> is_concrete(3), is_concrete(None), is_concrete([1, 2], scalar=True)
    (True, False, False)
    """
    return x is not None and not is_traced(x) and (not scalar or np.ndim(x) == 0)


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
) -> Any:
    """A concrete real number or array (0-d if ``scalar``), not NaN, finite unless
    ``allow_inf``, every entry in the range (``(``/``)`` ends when ``lo_open``/``hi_open``);
    traced values pass. Returns ``value`` unchanged.

    >>> check_real("lr", 0.5, lo=0.0, lo_open=True, scalar=True)
    0.5
    >>> check_real("lr", 0.0, lo=0.0, lo_open=True)
    Traceback (most recent call last):
    ValueError: lr must lie in (0.0, inf], got 0.0
    """
    if type(value) in _PLAIN_REALS and _plainly_valid(value, lo, hi, lo_open, hi_open, allow_inf):
        return value  # a plain host number that passes: the common case in the event clocks' loops
    if is_traced(value):
        return value
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number, got {value!r}")
    a = _numeric(name, value)
    _check_scalar(name, a, scalar)
    if np.any(np.isnan(a)):
        raise ValueError(f"{name} must not be NaN, got {_show(value)}")
    if not allow_inf and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {_show(value)}")
    check_bounds(name, a, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, shown=value)
    return value


#: the exact types :func:`check_real` checks without NumPy (``bool`` is not one: it is refused)
_PLAIN_REALS = (float, int, np.float64)


def _plainly_valid(v: float, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool,
                   allow_inf: bool) -> bool:
    """Whether the plain number ``v`` passes every check of :func:`check_real`: the fast path.
    ``False`` sends it through the full checks, which raise the error naming the argument."""
    if v != v or (not allow_inf and (v == float("inf") or v == float("-inf"))):
        return False
    if lo is not None and not (v > lo if lo_open else v >= lo):
        return False
    return hi is None or (v < hi if hi_open else v <= hi)


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


def check_choice(name: str, value: Any, choices: Collection) -> Any:
    """``value`` if it is one of ``choices`` (a sequence, set or mapping's keys), else
    ``ValueError`` naming ``name`` and listing them.

    >>> check_choice("norm", "l3", ("l1", "l2"))
    Traceback (most recent call last):
    ValueError: norm must be one of ('l1', 'l2'), got 'l3'
    """
    try:
        ok = value in choices
    except TypeError:  # an unhashable value is in no set or mapping
        ok = False
    if not ok:
        shown = tuple(choices) if isinstance(choices, (list, tuple)) else tuple(sorted(choices))
        raise ValueError(f"{name} must be one of {shown}, got {value!r}")
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


# ---- data files and loader arguments -------------------------------------------------


class DataFormatError(ValueError):
    """A data file is malformed (a bad *file*, as opposed to a bad Python argument, which
    raises ``ValueError``/``TypeError`` naming the argument).

    The message names the file, the position and what is wrong, e.g.
    ``ratings.csv, line 7: movieId must be an integer, got '3.7'``.

    Attributes:
      path: the file (``str``; ``archive.zip:member`` for a file inside an archive).
      line: 1-based position of the problem, or ``None`` when it concerns the whole file.
      unit: what ``line`` counts: ``"line"`` (text files), ``"row"`` (spreadsheets),
        ``"byte"`` (binary files, 0-based offset) or ``"record"`` (0-based record index).
      reason: what is wrong, without the location.

    >>> str(DataFormatError("ratings.csv", "movieId must be an integer, got '3.7'", line=7))
    "ratings.csv, line 7: movieId must be an integer, got '3.7'"
    """

    def __init__(self, path, reason: str, line: int | None = None, unit: str = "line"):
        self.path = str(path)
        self.reason = reason
        self.line = None if line is None else int(line)
        self.unit = unit
        where = self.path if line is None else f"{self.path}, {unit} {self.line}"
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):  # keep the attributes through pickling (multiprocessing, xdist)
        return (type(self), (self.path, self.reason, self.line, self.unit))


def check_bool(name: str, value: Any) -> bool:
    """``value`` if it is a bool (or NumPy bool), else ``TypeError`` naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_path(name: str, value: Any) -> Path:
    """``value`` (a ``str``, ``bytes`` or ``os.PathLike``) as an expanded
    :class:`~pathlib.Path`; ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a file path (str or os.PathLike), got {type(value).__name__} {value!r}")
    if isinstance(value, str) and not value.strip():
        raise ValueError(f"{name} must be a file path, got an empty string")
    return Path(value).expanduser()


def check_scale(name: str, value: Any) -> tuple[float, float]:
    """``value`` as a rating scale ``(lo, hi)`` of finite numbers with ``lo < hi``.

    >>> check_scale("scale", (0.5, 5))
    (0.5, 5.0)
    """
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (lo, hi), got {value!r}") from None
    lo = float(check_real(f"{name}[0]", lo, scalar=True))
    hi = float(check_real(f"{name}[1]", hi, scalar=True))
    if not lo < hi:
        raise ValueError(f"{name} must have lo < hi, got ({lo}, {hi})")
    return lo, hi


def as_rng(key_or_seed: Any, name: str = "key_or_seed") -> np.random.Generator:
    """A NumPy generator from a non-negative int seed or a JAX PRNG key (for data
    generated on the host).

    A JAX key (typed ``jax.random.key`` or raw ``uint32[2]`` ``PRNGKey``) is turned into
    a seed from its key data, so the same key always gives the same data set.
    """
    if isinstance(key_or_seed, numbers.Integral) and not isinstance(key_or_seed, bool):
        return np.random.default_rng(check_int(name, key_or_seed, lo=0))
    try:
        arr = key_or_seed
        if jax.dtypes.issubdtype(getattr(arr, "dtype", None), jax.dtypes.prng_key):
            arr = jax.random.key_data(arr)
        data = np.asarray(arr)
    except Exception as e:  # noqa: BLE001 - report as a bad argument
        raise ValueError(f"{name} must be an int seed or a JAX PRNG key, got {key_or_seed!r}") from e
    if data.dtype != np.uint32 or data.size == 0:
        raise ValueError(f"{name} must be an int seed or a JAX PRNG key, got {key_or_seed!r}")
    return np.random.default_rng([int(v) for v in data.ravel()])
