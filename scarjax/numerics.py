"""The arithmetic a run is computed in: the matrix-product precision in effect.

The theory path (:mod:`scarjax.rework`, :mod:`scarjax.bounds`) measures rework near a
*rounding floor*: the level below which the distance ``‖y − w*‖`` (or the loss) is decided
by rounding, not by the iteration (thesis Eq 5.4; Example 5.2.1 and App. B.1.1 for the
floor of a reduced-precision run). That floor is set by the coarsest arithmetic in the
loop, and on accelerators that is not float32: float32 matrix products default to
**TF32** on NVIDIA GPUs (10 stored mantissa bits, ``eps = 2⁻¹⁰``) and to one pass of
**bfloat16** on TPUs (7 bits, ``eps = 2⁻⁷``), unless JAX is told otherwise
(``jax.default_matmul_precision("highest")`` or ``JAX_DEFAULT_MATMUL_PRECISION=highest``).
XLA on CPU computes float32 products exactly (it ignores the setting).

:func:`matmul_precision` reports the precision in effect for a backend and the current
setting; :func:`scarjax.run` and :func:`scarjax.run_trials` record its machine epsilon in
the trace (``Trace.matmul_eps``, with ``‖w*‖`` in ``Trace.optimum_norm``), so that
:func:`scarjax.rework.noise_floor`, :func:`~scarjax.rework.calibrate_eps` and
:func:`~scarjax.rework.check_rework` use the floor of the run as it was made.
:func:`emulated_matmul` is a matrix product with its inputs rounded to fewer mantissa
bits (a TF32 or bf16 stand-in on CPU, for tests).

Only operations without an explicit ``precision=`` follow the setting; an algorithm that
passes ``precision=`` itself computes in that precision whatever is reported here. The
record uses the default backend (``jax.default_backend()``): trials run on a mesh of
another platform record that backend's default, not theirs.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from scarjax.perturb.precision import round_float

__all__ = [
    "MatmulPrecision",
    "matmul_precision",
    "check_setting",
    "emulated_matmul",
    "HIGHEST_ADVICE",
    "ENV_VAR",
]

#: The environment variable JAX reads for its default matmul precision.
ENV_VAR = "JAX_DEFAULT_MATMUL_PRECISION"

#: What to set for float32 matrix products on every backend (used in error messages).
HIGHEST_ADVICE = (
    "build the algorithm with precision='highest' (alg.replace(precision='highest'), or "
    "from_optax(..., precision='highest')), or run under jax.default_matmul_precision('highest') "
    "(a context manager around scarjax.run / run_trials), or set JAX_DEFAULT_MATMUL_PRECISION=highest"
)

# Stored mantissa bits of the operands of a float32 product, by format.
_BITS = {"float32": 23, "tensorfloat32": 10, "bfloat16": 7, "bfloat16_3x": 16, "tensorfloat32_3x": 21,
         "float16": 10, "float8": 3, "float64": 52}
_GPU = ("gpu", "cuda", "rocm")


class MatmulPrecision(NamedTuple):
    """The precision float32 matrix products are computed in.

    Attributes:
      name: the operand format: ``'float32'`` (exact float32 products),
        ``'tensorfloat32'``, ``'bfloat16'``, ``'bfloat16_3x'``, ``'tensorfloat32_3x'``,
        ``'float16'``, ``'float8'`` or ``'float64'``.
      mantissa_bits: stored mantissa bits of the rounded operands.
      eps: machine epsilon ``2^−mantissa_bits`` (the unit roundoff is ``eps / 2``).
      platform: the backend (``'cpu'``, ``'gpu'``, ``'tpu'``, …).
      setting: the value of ``jax_default_matmul_precision`` in effect (``None``: JAX's
        default).
    """

    name: str
    mantissa_bits: int
    eps: float
    platform: str
    setting: str | None

    @property
    def exact(self) -> bool:
        """Whether float32 products are computed in float32 (or better)."""
        return self.mantissa_bits >= 23

    def describe(self) -> str:
        """One phrase: ``'TF32 matrix products (eps 9.77e-04; gpu, jax_default_matmul_precision=None)'``."""
        label = {"float32": "float32", "tensorfloat32": "TF32", "bfloat16": "bfloat16 (one pass)",
                 "bfloat16_3x": "bfloat16 (three passes)", "tensorfloat32_3x": "TF32 (three passes)",
                 "float16": "float16", "float8": "float8", "float64": "float64"}[self.name]
        return (f"{label} matrix products (eps {self.eps:.3g}; {self.platform}, "
                f"jax_default_matmul_precision={self.setting!r})")


def _setting() -> str | None:
    """``jax_default_matmul_precision`` as in effect here (a ``jax.default_matmul_precision``
    context included)."""
    value = jax.config.jax_default_matmul_precision
    if value is None:
        return None
    return str(getattr(value, "name", value))


def _format(setting: str | None, platform: str) -> str:
    """The operand format of a float32 product for ``setting`` on ``platform``."""
    if platform == "cpu":
        return "float32"  # XLA:CPU computes float32 products exactly, whatever the setting
    s = None if setting is None else setting.strip().lower()
    gpu = platform in _GPU
    if s in (None, "", "default", "fastest"):
        return "tensorfloat32" if gpu else ("bfloat16" if platform == "tpu" else "float32")
    if s == "bfloat16":
        return "bfloat16"
    if s in ("high", "tensorfloat32", "bfloat16_3x"):
        return "tensorfloat32" if gpu else ("bfloat16_3x" if platform == "tpu" else "float32")
    if s in ("highest", "float32"):
        return "float32"
    # Dot algorithm presets (jax.lax.DotAlgorithmPreset names), e.g. 'BF16_BF16_F32_X3'.
    u = s.upper()
    if u.startswith("ANY_F8"):
        return "float8"
    if u.startswith("BF16"):
        return "float32" if u.endswith(("_X6", "_X9")) else ("bfloat16_3x" if u.endswith("_X3") else "bfloat16")
    if u.startswith("TF32"):
        return "tensorfloat32_3x" if u.endswith("_X3") else "tensorfloat32"
    if u.startswith("F16"):
        return "float16"
    if u.startswith("F64"):
        return "float64"
    if u.startswith("F32"):
        return "float32"
    # An unknown value: assume the backend's fastest format (the safe side for a floor).
    return "tensorfloat32" if gpu else ("bfloat16" if platform == "tpu" else "float32")


@functools.lru_cache(maxsize=64)
def _accepted(value: str) -> bool:
    # The names JAX accepts are the ones it canonicalises when a product is traced.
    try:
        with jax.default_matmul_precision(value):
            jax.make_jaxpr(lambda a: a @ a)(jnp.ones((1, 1), jnp.float32))
    except ValueError:
        return False
    return True


def check_setting(name: str, value: Any) -> str:
    """``value`` as a ``jax_default_matmul_precision`` setting (``'default'``, ``'high'``,
    ``'highest'``, ``'bfloat16'``, ``'tensorfloat32'``, ``'float32'``, a
    ``jax.lax.DotAlgorithmPreset`` name); a ``ValueError`` naming ``name`` otherwise.

    Example:
      >>> from scarjax import numerics
      >>> numerics.check_setting("precision", "highest")
      'highest'
    """
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a matmul precision name such as 'highest', got {value!r}")
    if not _accepted(value):
        raise ValueError(
            f"{name} must be None or a jax_default_matmul_precision value ('default', 'high', "
            f"'highest', 'bfloat16', 'tensorfloat32', 'float32' or a DotAlgorithmPreset name), got {value!r}"
        ) from None
    return value


def matmul_precision(platform: str | None = None, setting: Any = "current") -> MatmulPrecision:
    """The precision of float32 matrix products on ``platform`` under ``setting``.

    Args:
      platform: a backend name (``'cpu'``, ``'gpu'``, ``'cuda'``, ``'rocm'``, ``'tpu'``) or a
        ``jax.Device``; default ``jax.default_backend()``.
      setting: a ``jax_default_matmul_precision`` value (``None`` for JAX's default,
        ``'highest'``, ``'tensorfloat32'``, ``'bfloat16'``, a ``DotAlgorithmPreset`` name);
        default: the setting in effect here (``jax.config.jax_default_matmul_precision``,
        including a ``jax.default_matmul_precision(...)`` context, which is also what
        ``jax.jit`` traces under).

    Returns:
      a :class:`MatmulPrecision`. CPU: ``'float32'`` always (XLA:CPU ignores the setting).
      GPU: ``'tensorfloat32'`` by default (and for ``'high'``), ``'float32'`` for
      ``'highest'``. TPU: ``'bfloat16'`` (one pass) by default, ``'bfloat16_3x'`` for
      ``'high'``, ``'float32'`` for ``'highest'``.

    Example:
      >>> from scarjax import numerics
      >>> numerics.matmul_precision("gpu", None).name
      'tensorfloat32'
      >>> numerics.matmul_precision("gpu", "highest").name
      'float32'
    """
    if platform is None:
        platform = jax.default_backend()
    elif isinstance(platform, jax.Device):
        platform = platform.platform
    if not isinstance(platform, str) or not platform:
        raise TypeError(f"platform must be a backend name or a jax.Device, got {platform!r}")
    platform = platform.lower()
    if isinstance(setting, str) and setting == "current":
        setting = _setting()
    elif setting is not None:
        setting = str(getattr(setting, "name", setting))
    name = _format(setting, platform)
    bits = _BITS[name]
    return MatmulPrecision(name, bits, float(2.0 ** -bits), platform, setting)


def emulated_matmul(mantissa_bits: int = 10) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``a @ b`` with both operands rounded to ``mantissa_bits`` stored mantissa bits
    (round to nearest even; products accumulated in float32), forward and in the
    gradient's products: a stand-in on CPU for TF32 (10 bits, the default) or one-pass
    bfloat16 (7 bits) matrix products, as a GPU or TPU computes them by default.

    Thm 5.3.1 does not see this rounding (it is in ``f``, not in a hook), so a run built on
    it has the floor of the emulated format; pair it with
    ``jax.default_matmul_precision`` detection by recording the emulated eps in the trace
    (``trace._replace(matmul_eps=...)``) as a GPU run would.
    """
    if isinstance(mantissa_bits, bool) or not isinstance(mantissa_bits, int) or not 0 <= mantissa_bits <= 23:
        raise ValueError(f"mantissa_bits must be an int in [0, 23], got {mantissa_bits!r}")

    def q(x):
        return round_float(x, mantissa_bits)

    @jax.custom_vjp
    def mm(a, b):
        return jnp.matmul(q(a), q(b))

    def fwd(a, b):
        return mm(a, b), (a, b)

    def bwd(res, g):
        a, b = res
        a2 = a if a.ndim > 1 else a[None, :]
        b2 = b if b.ndim > 1 else b[:, None]
        g2 = g.reshape(a2.shape[:-1] + b2.shape[-1:])
        da = mm(g2, jnp.swapaxes(b2, -1, -2)).reshape(a.shape)
        db = mm(jnp.swapaxes(a2, -1, -2), g2).reshape(b.shape)
        return da, db

    mm.defvjp(fwd, bwd)
    return mm
