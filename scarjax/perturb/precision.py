"""Reduced precision as a perturbation (thesis Example 5.2.1).

Storing the parameters in a format with a ``p``-bit significand (``p − 1`` stored
mantissa bits plus the implicit leading bit) replaces ``y⁽ᵏ⁾`` by ``ỹ⁽ᵏ⁾`` and perturbs the
iterate by ``δₖ = ỹ⁽ᵏ⁾ − y⁽ᵏ⁾`` with ``|δₖ| < 2^{−(p−1)} |y⁽ᵏ⁾|`` elementwise (Higham [89];
round-to-nearest even halves it: ``|δₖ| ≤ 2^{−p}|y⁽ᵏ⁾|``). Here a format's precision is
given by its number of *stored* mantissa bits ``m`` (float32: 23, bfloat16: 7,
float16: 10, float8 e4m3: 3, e5m2: 2), so ``p = m + 1`` and the bound reads
``|δ| < 2^{−m}|y|`` (tested by property tests for normal-range values; values in a
format's subnormal range have an absolute error below half (nearest) or one (stochastic)
subnormal quantum instead).

Quantizers (pure functions ``q(x, key) -> x̃`` on float32 arrays, applied leafwise by
:func:`quantize_tree`):

* :func:`mantissa` – round to ``m`` stored mantissa bits with float32's exponent range,
  round-to-nearest-even or stochastic (unbiased: ``E x̃ = x``); ``m`` may be traced, so one
  compiled program sweeps every precision across trials;
* :func:`float_format` – a named low-precision float format: ``'bfloat16'``, ``'float16'``,
  ``'float8_e4m3fn'``, ``'float8_e5m2'`` (exponent range, subnormals and saturation
  included); ``emulate=False`` casts through the real JAX dtype instead (bit-identical:
  tested);
* :func:`fixed_point_quantizer` – ``int8``/``int16``-style fixed point with a per-tensor scale
  ``max|x| / (2^{b−1} − 1)``;
* :func:`qsgd` – stochastic quantisation to ``s`` levels of ``|xᵢ|/‖x‖`` (QSGD, unbiased).

:func:`precision` turns a quantizer into a hook at the ``'write'`` point (stored
parameters, Example 5.2.1), the ``'read'`` point (communicated parameters) or the
``'update'`` point (the update Δ, i.e. the scaled gradient). Formats saturate at their
largest finite value instead of overflowing (float8 e4m3fn has no infinity and would
give NaN).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import tree as tu
from scarjax.hooks import Hook, param_hook

PyTree = Any

__all__ = [
    "FORMATS",
    "check_bits",
    "format_max",
    "Quantizer",
    "round_float",
    "mantissa",
    "float_format",
    "cast",
    "fixed_point_quantizer",
    "qsgd",
    "quantize_tree",
    "precision",
    "relative_bound",
]

# name -> (stored mantissa bits, min normal exponent, jnp dtype name)
FORMATS: dict[str, tuple[int, int, str]] = {
    "float32": (23, -126, "float32"),
    "bfloat16": (7, -126, "bfloat16"),
    "float16": (10, -14, "float16"),
    "float8_e4m3fn": (3, -6, "float8_e4m3fn"),
    "float8_e5m2": (2, -14, "float8_e5m2"),
}
_F32_MAX_EXP = 127


def _uniform_like(key, x):
    """``jax.random.uniform(key, x.shape)``, drawn flat and reshaped: the same numbers (the
    counters are the flat indices either way), while a multi-dimensional draw's counters
    take XLA:CPU seconds longer to compile."""
    return jax.random.uniform(key, (x.size,)).reshape(x.shape)


def relative_bound(mantissa_bits: Any, *, stochastic: bool = False) -> Any:
    """Example 5.2.1's per-entry bound ``|δ|/|y|``: ``2^{−m}`` (``= 2^{−(p−1)}`` with the
    significand precision ``p = m + 1``) for stochastic rounding and truncation,
    ``2^{−(m+1)}`` for round-to-nearest."""
    m = np.asarray(mantissa_bits, np.float64)
    return 2.0 ** (-m) if stochastic else 2.0 ** (-(m + 1))


def check_bits(name: str, bits: Any, lo: int, hi: int) -> None:
    """``ValueError`` naming ``name`` unless ``bits`` is a scalar integer in ``[lo, hi]``
    (a traced value passes unchecked)."""
    if tu.is_traced(bits):
        return
    if isinstance(bits, bool):
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {bits!r}")
    va.check_integer_value(name, bits, lo=lo, hi=hi)
    if np.ndim(bits) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {np.shape(bits)}")


def round_float(
    x: jax.Array,
    mantissa_bits: Any,
    *,
    min_exponent: Any = -126,
    max_value: Any | None = None,
    stochastic: bool = False,
    key: jax.Array | None = None,
) -> jax.Array:
    """Round float32 ``x`` to a float format with ``mantissa_bits`` stored mantissa bits,
    smallest normal exponent ``min_exponent`` (subnormals below it: a fixed quantum
    ``2^{min_exponent − m}``) and saturation at ``max_value`` (default: the format's largest
    finite value with float32's exponent range).

    Round-to-nearest-even, or stochastic rounding (rounds up with probability equal to the
    fractional part, so ``E[round(x)] = x``). All arithmetic is exact (power-of-two scaling
    by ``ldexp`` and integer-valued floats); ``mantissa_bits`` and ``min_exponent`` may be
    traced. Non-finite entries are returned unchanged.
    """
    check_bits("mantissa_bits", mantissa_bits, 0, 23)
    if max_value is not None:
        va.check_real("max_value", max_value, lo=0.0, lo_open=True, scalar=True)
    x = jnp.asarray(x, jnp.float32)
    m = jnp.asarray(mantissa_bits, jnp.int32)
    _, ex = jnp.frexp(x)  # x = f · 2^ex, f ∈ [0.5, 1)
    e = jnp.maximum(ex - 1, jnp.asarray(min_exponent, jnp.int32))  # exponent of the quantum's binade
    scaled = jnp.ldexp(x, m - e)  # x / quantum, exact
    if stochastic:
        if key is None:
            raise ValueError("stochastic rounding needs a PRNG key")
        lo = jnp.floor(scaled)
        frac = scaled - lo  # exact
        n = lo + (_uniform_like(key, x) < frac).astype(jnp.float32)
    else:
        n = jnp.round(scaled)  # half to even
    r = jnp.ldexp(n, e - m)
    if max_value is None:
        max_value = jnp.ldexp(2.0 - jnp.ldexp(jnp.float32(1.0), -m), _F32_MAX_EXP)
    r = jnp.clip(r, -max_value, max_value)
    return jnp.where(jnp.isfinite(x), r, x)


Quantizer = Callable[[jax.Array, jax.Array], jax.Array]
"""``q(x, key) -> x̃``: a float32 array to its quantised float32 value."""


@dataclasses.dataclass(frozen=True, eq=False)
class _Q:
    fn: Callable[[jax.Array, jax.Array], jax.Array]
    name: str
    stochastic: bool = False

    def __call__(self, x: jax.Array, key: jax.Array) -> jax.Array:
        return self.fn(x, key)


def mantissa(bits: Any, *, stochastic: bool = False) -> Quantizer:
    """Round to ``bits`` stored mantissa bits (``p = bits + 1``), float32 exponent range.

    ``bits`` in ``[0, 23]`` (23: float32 itself, the identity); may be traced."""
    check_bits("bits", bits, 0, 23)
    return _Q(
        lambda x, key: round_float(x, bits, stochastic=stochastic, key=key),
        f"mantissa{bits if not tu.is_traced(bits) else ''}",
        stochastic,
    )


def format_max(name: str) -> float:
    """The largest finite value of the float format ``name`` (a key of :data:`FORMATS`;
    ``'float8_e4m3fn'``: 448)."""
    return float(jnp.finfo(getattr(jnp, FORMATS[name][2])).max)


def float_format(name: str, *, stochastic: bool = False, emulate: bool = True) -> Quantizer:
    """A named float format: ``'bfloat16'``, ``'float16'``, ``'float8_e4m3fn'``,
    ``'float8_e5m2'`` (or ``'float32'``, the identity).

    With ``emulate=True`` (default) the rounding is computed in float32 by
    :func:`round_float` with the format's mantissa bits, exponent range and largest value
    (allowing stochastic rounding); ``emulate=False`` casts through the JAX dtype
    (round-to-nearest-even, saturating first). Both give identical results (tested)."""
    if not isinstance(name, str) or name not in FORMATS:
        raise ValueError(f"name must be one of {tuple(FORMATS)}, got {name!r}")
    m, emin, dtype = FORMATS[name]
    vmax = format_max(name)
    if not emulate:
        if stochastic:
            raise ValueError("stochastic rounding needs emulate=True")
        return _Q(lambda x, key: cast(x, dtype), name)
    return _Q(
        lambda x, key: round_float(x, m, min_exponent=emin, max_value=vmax, stochastic=stochastic, key=key),
        name,
        stochastic,
    )


def cast(x: jax.Array, dtype: Any) -> jax.Array:
    """Cast float32 ``x`` through ``dtype`` and back, saturating at the dtype's largest
    finite value (non-finite entries unchanged)."""
    dtype = jnp.dtype(dtype)
    x = jnp.asarray(x, jnp.float32)
    vmax = float(jnp.finfo(dtype).max)
    y = jnp.clip(x, -vmax, vmax).astype(dtype).astype(jnp.float32)
    return jnp.where(jnp.isfinite(x), y, x)


def fixed_point_quantizer(bits: Any, *, stochastic: bool = False) -> Quantizer:
    """Symmetric fixed point with ``bits`` bits (8: int8, 16: int16) and a per-tensor scale
    ``σ = max|x| / (2^{bits−1} − 1)``: ``x̃ = σ · round(x/σ)`` (``|δ| ≤ σ/2``; stochastic
    rounding: ``|δ| < σ``, unbiased). ``bits`` in ``[2, 24]``; may be traced."""
    check_bits("bits", bits, 2, 24)

    def fn(x, key):
        x = jnp.asarray(x, jnp.float32)
        levels = jnp.ldexp(jnp.float32(1.0), jnp.asarray(bits, jnp.int32) - 1) - 1.0
        amax = jnp.max(jnp.abs(x)) if x.size else jnp.float32(0)
        scale = jnp.where(amax > 0, amax / levels, 1.0)
        y = x / scale
        if stochastic:
            lo = jnp.floor(y)
            y = lo + (_uniform_like(key, x) < (y - lo)).astype(jnp.float32)
        else:
            y = jnp.round(y)
        return jnp.clip(y, -levels, levels) * scale

    return _Q(fn, f"fixed{bits if not tu.is_traced(bits) else ''}", stochastic)


def qsgd(levels: Any) -> Quantizer:
    """Stochastic quantisation with ``s = levels`` levels (QSGD, Alistarh et al. 2017):
    ``x̃ᵢ = ‖x‖ sign(xᵢ) ξᵢ`` with ``ξᵢ ∈ {l/s, (l+1)/s}`` chosen so that ``E ξᵢ = |xᵢ|/‖x‖``
    (unbiased; per tensor). ``levels >= 1``; may be traced."""
    if not tu.is_traced(levels):
        if isinstance(levels, bool):
            raise ValueError(f"levels must be an integer >= 1, got {levels!r}")
        va.check_integer_value("levels", levels, lo=1, scalar=True)

    def fn(x, key):
        x = jnp.asarray(x, jnp.float32)
        nrm = jnp.sqrt(jnp.sum(jnp.square(x)))
        s = jnp.asarray(levels, jnp.float32)
        r = jnp.abs(x) / jnp.where(nrm > 0, nrm, 1.0) * s
        lo = jnp.floor(r)
        xi = (lo + (_uniform_like(key, x) < (r - lo)).astype(jnp.float32)) / s
        return jnp.sign(x) * nrm * xi

    return _Q(fn, f"qsgd{levels if not tu.is_traced(levels) else ''}", True)


def quantize_tree(quantizer: Quantizer, tree: PyTree, key: jax.Array) -> PyTree:
    """Apply ``quantizer`` to every leaf of ``tree`` (independent keys per leaf); leaves
    keep their dtype."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(key, max(len(leaves), 1))
    out = [quantizer(x.astype(jnp.float32), k).astype(x.dtype) for x, k in zip(leaves, keys)]
    return jax.tree.unflatten(treedef, out)


def precision(
    quantizer: Quantizer | str,
    *,
    point: str = "write",
    name: str | None = None,
) -> Hook:
    """A hook that quantises the parameters at ``point`` at every step (thesis Example
    5.2.1); wrap it in :func:`scarjax.hooks.scheduled` to quantise at chosen steps only.

    Args:
      quantizer: a :data:`Quantizer` (:func:`mantissa`, :func:`float_format`,
        :func:`fixed_point_quantizer`, :func:`qsgd`, or your own ``q(x, key)``), or a format name
        (``'bfloat16'``, ``'float16'``, ``'float8_e4m3fn'``, ``'float8_e5m2'``).
      point: ``'write'`` – the stored parameters (the δₖ of Example 5.2.1, index ``k``);
        ``'read'`` – the parameters the workers read (low-precision communication);
        ``'update'`` – the update Δ (gradient quantisation).
      name: the trace label (default ``'precision_<point>'``).

    Example:
      >>> import jax, scarjax
      >>> from scarjax.perturb import precision as P
      >>> from scarjax.models import quadratic
      >>> qp = quadratic.fig53_problem()
      >>> _, tr = scarjax.run(qp, P.precision(P.mantissa(7)), 10, jax.random.key(0))
      >>> bool(tr.delta["precision_write"].max() < 2.0 ** -7 * 4)
      True
    """
    if isinstance(quantizer, str):
        quantizer = float_format(quantizer)
    if name is not None:
        va.check_str("name", name)
    if not callable(quantizer):
        raise TypeError(f"quantizer must be callable or a format name, got {type(quantizer).__name__}")
    return param_hook(
        lambda params, hstate, ctx, key: quantize_tree(quantizer, params, key),
        point=point,
        name=name or f"precision_{point}",
    )
