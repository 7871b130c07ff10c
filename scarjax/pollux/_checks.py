"""Input validation at the API boundary (outside ``jit``).

Every public function of :mod:`scarjax.pollux` validates its concrete inputs with
these helpers before calling the jitted core.  Traced values (inside a user's
``jit``/``vmap``) are passed through unchecked: validation never forces a
host sync and never breaks tracing.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scarjax._validate import check_bounds, is_traced


def concrete(x: Any) -> np.ndarray | None:
    """``x`` as a float64 NumPy array, or ``None`` if it is traced."""
    if is_traced(x):
        return None
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as e:
        raise TypeError(f"expected a number or array, got {type(x).__name__}: {x!r}") from e


def _show(a: np.ndarray) -> str:
    if a.size == 1:
        return repr(float(a.reshape(())))
    bad = a.reshape(-1)
    return f"array of shape {a.shape} (e.g. {bad[:4].tolist()})"


def check_finite(name: str, x: Any) -> None:
    a = concrete(x)
    if a is not None and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {_show(a[~np.isfinite(a)])}")


def check_range(
    name: str,
    x: Any,
    *,
    lo: float | None = None,
    hi: float | None = None,
    lo_open: bool = False,
    hi_open: bool = False,
    allow_inf: bool = False,
) -> None:
    """Raise ``ValueError`` naming ``name`` unless every element lies in the range."""
    a = concrete(x)
    if a is None:
        return
    if np.any(np.isnan(a)):
        raise ValueError(f"{name} must not be NaN, got {_show(a)}")
    if not allow_inf and not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite, got {_show(a[~np.isfinite(a)])}")
    check_bounds(name, a, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, show=_show)


def check_integer(name: str, x: Any, *, lo: int | None = None, hi: int | None = None) -> None:
    a = concrete(x)
    if a is None:
        return
    if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
        raise ValueError(f"{name} must be integer-valued, got {_show(a)}")
    check_range(name, a, lo=lo, hi=hi)


def check_static_int(name: str, x: Any, *, lo: int | None = None, hi: int | None = None) -> int:
    """A Python ``int`` used as a static (shape-determining) argument."""
    if isinstance(x, bool) or not isinstance(x, (int, np.integer)):
        raise TypeError(f"{name} must be a Python int, got {type(x).__name__}: {x!r}")
    x = int(x)
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        raise ValueError(f"{name} must lie in [{lo}, {'inf' if hi is None else hi}], got {x}")
    return x
