"""Systems settings as hypothesis data: precision formats (thesis Example 5.2.1), staleness
bounds and delay patterns (Example 5.2.2, SSP / asynchronous reads), data-parallel worker
counts and revocation schedules (Sync-on-the-fly).

Each drawn value is a small NamedTuple with a ``describe()`` line (for counterexamples),
a ``hook()`` that builds the matching :mod:`scarjax.perturb` hook (for replaying a
counterexample with :func:`scarjax.run`) and, where a batch of them runs as one compiled
program, ``as_arrays()`` (the ``hook_args`` of one trial; :func:`precision_hook` and
:func:`stale_read_hook` are the traced hooks that replay them bit for bit).

Shrinking goes to the smallest perturbation of each kind: the most precise format
(most mantissa bits, round-to-nearest before stochastic rounding), staleness bound 0 and
fixed delays, one worker, a single revocation of worker 0 at step 0.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from scarjax import validate as va
from scarjax import hooks as hk
from scarjax.perturb import precision as P
from scarjax.perturb import revocation as R
from scarjax.perturb import staleness as S
from scarjax.perturb.workers import check_workers

__all__ = [
    "PRECISION_KINDS",
    "NAMED_FORMATS",
    "PrecisionFormat",
    "precision_formats",
    "precision_hook",
    "DELAY_KINDS",
    "DelayPattern",
    "staleness_bounds",
    "delay_patterns",
    "stale_read_hook",
    "worker_counts",
    "Revocation",
    "RevocationSchedule",
    "revocation_schedules",
]

# --------------------------------------------------------------------------------------
# Precision formats (Example 5.2.1).

#: Kinds of :class:`PrecisionFormat`: ``'mantissa'`` (``bits`` stored mantissa bits,
#: float32's exponent range), ``'float'`` (a named format of :data:`NAMED_FORMATS`),
#: ``'fixed'`` (``bits``-bit fixed point, per-tensor scale), ``'qsgd'`` (``bits`` levels),
#: ``'custom'`` (your own quantizer with the mantissa bits it claims).
PRECISION_KINDS = ("mantissa", "float", "fixed", "qsgd", "custom")
#: Named float formats, most precise first (the order they shrink in).
NAMED_FORMATS = ("float16", "bfloat16", "float8_e4m3fn", "float8_e5m2")
_KIND_INDEX = {k: i for i, k in enumerate(PRECISION_KINDS[:4])}
_F32_MIN_EXP = -126


class PrecisionFormat(NamedTuple):
    """A number format the parameters are stored in at every step (Example 5.2.1).

    Build one with :meth:`mantissa`, :meth:`named`, :meth:`fixed`, :meth:`qsgd` or
    :meth:`custom`, or draw them with :func:`precision_formats`.

    Attributes:
      kind: one of :data:`PRECISION_KINDS`.
      bits: stored mantissa bits ``m`` (``'mantissa'``, ``'float'``; for ``'custom'``
        the bits the quantizer *claims*), fixed-point bits (``'fixed'``) or levels
        (``'qsgd'``).
      stochastic: stochastic rounding (unbiased) instead of round-to-nearest-even.
      name: the named format (``'float'``) or a label (``'custom'``).
      quantizer: ``q(x, key) -> x̃`` (``'custom'`` only).
    """

    kind: str
    bits: int
    stochastic: bool = False
    name: str = ""
    quantizer: Callable[[jax.Array, jax.Array], jax.Array] | None = None

    # -- constructors -----------------------------------------------------------------
    @classmethod
    def mantissa(cls, bits: int, stochastic: bool = False) -> "PrecisionFormat":
        """``bits`` stored mantissa bits with float32's exponent range (:func:`~scarjax.perturb.precision.mantissa`)."""
        P.check_bits("bits", bits, 0, 23)
        return cls("mantissa", int(bits), bool(stochastic))

    @classmethod
    def named(cls, name: str, stochastic: bool = False) -> "PrecisionFormat":
        """A named float format (:func:`~scarjax.perturb.precision.float_format`)."""
        if name not in P.FORMATS:
            raise ValueError(f"name must be one of {tuple(P.FORMATS)}, got {name!r}")
        return cls("float", P.FORMATS[name][0], bool(stochastic), name)

    @classmethod
    def fixed(cls, bits: int, stochastic: bool = False) -> "PrecisionFormat":
        """``bits``-bit fixed point (:func:`~scarjax.perturb.precision.fixed_point_quantizer`)."""
        P.check_bits("bits", bits, 2, 24)
        return cls("fixed", int(bits), bool(stochastic))

    @classmethod
    def qsgd(cls, levels: int) -> "PrecisionFormat":
        """QSGD with ``levels`` levels (:func:`~scarjax.perturb.precision.qsgd`; stochastic)."""
        P.check_bits("levels", levels, 1, 2**20)
        return cls("qsgd", int(levels), True)

    @classmethod
    def custom(cls, quantizer: Callable, bits: int, *, stochastic: bool = False, name: str = "custom") -> "PrecisionFormat":
        """Your own quantizer ``q(x, key) -> x̃``, claiming ``bits`` stored mantissa bits
        (so Example 5.2.1's bound ``2^{−(bits+1)}|y|``, or ``2^{−bits}|y|`` if
        ``stochastic``, is what it is checked against)."""
        if not callable(quantizer):
            raise TypeError(f"quantizer must be callable q(x, key) -> x̃, got {type(quantizer).__name__}")
        P.check_bits("bits", bits, 0, 23)
        if not isinstance(name, str):
            raise TypeError(f"name must be a str, got {type(name).__name__}")
        return cls("custom", int(bits), bool(stochastic), name, quantizer)

    # -- what the theory says ------------------------------------------------------------
    @property
    def min_exponent(self) -> int:
        """The smallest normal exponent (below it: subnormals with a fixed quantum)."""
        return P.FORMATS[self.name][1] if self.kind == "float" else _F32_MIN_EXP

    def relative_bound(self) -> float | None:
        """Example 5.2.1's per-entry bound on ``|δ|/|y|`` for a floating-point format:
        ``2^{−(m+1)}`` (nearest) or ``2^{−m}`` (stochastic); ``None`` for fixed point and
        QSGD (their error is relative to the tensor's largest entry or norm, not to each
        entry)."""
        if self.kind in ("fixed", "qsgd"):
            return None
        return float(P.relative_bound(self.bits, stochastic=self.stochastic))

    def absolute_bound(self) -> float | None:
        """The per-entry error allowed below the smallest normal number (subnormal
        range): half a subnormal quantum ``2^{emin − m}`` (nearest), one quantum
        (stochastic). ``None`` where :meth:`relative_bound` is."""
        if self.kind in ("fixed", "qsgd"):
            return None
        q = 2.0 ** (self.min_exponent - self.bits)
        return q if self.stochastic else q / 2

    # -- running it ----------------------------------------------------------------------
    def make_quantizer(self) -> P.Quantizer:
        """The :data:`~scarjax.perturb.precision.Quantizer` of this format."""
        if self.kind == "mantissa":
            return P.mantissa(self.bits, stochastic=self.stochastic)
        if self.kind == "float":
            return P.float_format(self.name, stochastic=self.stochastic)
        if self.kind == "fixed":
            return P.fixed_point_quantizer(self.bits, stochastic=self.stochastic)
        if self.kind == "qsgd":
            return P.qsgd(self.bits)
        return self.quantizer

    def hook(self, point: str = "write") -> hk.Hook:
        """The precision hook storing the parameters in this format at every step
        (:func:`scarjax.perturb.precision.precision`, trace label ``'precision_<point>'``)."""
        return P.precision(self.make_quantizer(), point=point)

    def as_arrays(self, customs: tuple = ()) -> dict[str, np.ndarray]:
        """One trial's ``hook_args`` for :func:`precision_hook` (``customs``: the custom
        quantizers of the batch, in order)."""
        if self.kind == "custom":
            kind = len(_KIND_INDEX) + customs.index(self.quantizer)
        else:
            kind = _KIND_INDEX[self.kind]
        m = self.bits if self.kind in ("mantissa", "float", "custom") else 23
        vmax = P.format_max(self.name) if self.kind == "float" else float(np.ldexp(2.0 - 2.0**-m, 127))
        return {
            "kind": np.int32(kind),
            "bits": np.int32(self.bits),
            "min_exponent": np.int32(self.min_exponent),
            "max_value": np.float32(vmax),
            "stochastic": np.bool_(self.stochastic),
        }

    def describe(self) -> str:
        rnd = "stochastic rounding" if self.stochastic else "round-to-nearest"
        if self.kind == "mantissa":
            return f"{self.bits} stored mantissa bits (float32 exponent range), {rnd}"
        if self.kind == "float":
            return f"{self.name} ({self.bits} stored mantissa bits), {rnd}"
        if self.kind == "fixed":
            return f"{self.bits}-bit fixed point (per-tensor scale), {rnd}"
        if self.kind == "qsgd":
            return f"QSGD with {self.bits} levels (stochastic, unbiased)"
        return f"custom quantizer {self.name!r} claiming {self.bits} stored mantissa bits, {rnd}"

    def replay(self) -> str:
        """Python code building this format (for a counterexample's replay line)."""
        if self.kind == "mantissa":
            return f"sst.PrecisionFormat.mantissa({self.bits}, stochastic={self.stochastic})"
        if self.kind == "float":
            return f"sst.PrecisionFormat.named({self.name!r}, stochastic={self.stochastic})"
        if self.kind == "fixed":
            return f"sst.PrecisionFormat.fixed({self.bits}, stochastic={self.stochastic})"
        if self.kind == "qsgd":
            return f"sst.PrecisionFormat.qsgd({self.bits})"
        return f"sst.PrecisionFormat.custom(quantizer, {self.bits}, stochastic={self.stochastic}, name={self.name!r})"


def _more_bits(lo: int, hi: int) -> Any:
    """Integers in ``[lo, hi]`` shrinking to ``hi`` (the least perturbation)."""
    return st.integers(0, hi - lo).map(lambda i: hi - i)


@st.composite
def precision_formats(
    draw: Any,
    *,
    kinds: Any = ("mantissa", "float", "fixed", "qsgd"),
    mantissa_bits: tuple[int, int] = (2, 16),
    names: Any = NAMED_FORMATS,
    fixed_bits: tuple[int, int] = (4, 16),
    qsgd_levels: tuple[int, int] = (1, 256),
    stochastic: Any = None,
) -> PrecisionFormat:
    """Precision formats (thesis Example 5.2.1).

    Args:
      kinds: which of ``'mantissa'``, ``'float'``, ``'fixed'``, ``'qsgd'`` (shrinks in that
        order).
      mantissa_bits: ``(lo, hi)`` stored mantissa bits of ``'mantissa'`` formats (in
        ``[0, 23]``; shrinks to ``hi``, the most precise). The default stops at 16: past
        it the rounding error approaches float32's own arithmetic error, which Eq 5.2
        does not model.
      names: named float formats for ``'float'`` (shrinks to the first).
      fixed_bits: ``(lo, hi)`` bits of ``'fixed'`` formats (in ``[2, 24]``; shrinks to ``hi``).
      qsgd_levels: ``(lo, hi)`` levels of ``'qsgd'`` (shrinks to ``hi``).
      stochastic: a strategy for stochastic rounding (default ``booleans()``: shrinks to
        round-to-nearest); ``st.just(False)`` for nearest only.
    """
    kinds = tuple(kinds)
    if not kinds or any(k not in PRECISION_KINDS[:4] for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of {PRECISION_KINDS[:4]}, got {kinds!r}")
    names = tuple(names)
    if not names or any(n not in P.FORMATS for n in names):
        raise ValueError(f"names must be a non-empty subset of {tuple(P.FORMATS)}, got {names!r}")
    for arg, (lo, hi), (a, b) in (
        ("mantissa_bits", mantissa_bits, (0, 23)),
        ("fixed_bits", fixed_bits, (2, 24)),
        ("qsgd_levels", qsgd_levels, (1, 2**20)),
    ):
        if not (isinstance(lo, int) and isinstance(hi, int) and a <= lo <= hi <= b):
            raise ValueError(f"{arg} must be (lo, hi) ints with {a} <= lo <= hi <= {b}, got {(lo, hi)!r}")
    stochastic = st.booleans() if stochastic is None else stochastic
    # Every kind draws the same choices (kind, size, rounding), so shrinking orders formats
    # by kind first (hypothesis prefers shorter choice sequences).
    kind = draw(st.sampled_from(kinds))
    if kind == "float":
        size = draw(st.sampled_from(names))
    else:
        size = draw(_more_bits(*{"mantissa": mantissa_bits, "fixed": fixed_bits, "qsgd": qsgd_levels}[kind]))
    sto = bool(draw(stochastic))
    if kind == "mantissa":
        return PrecisionFormat.mantissa(size, sto)
    if kind == "float":
        return PrecisionFormat.named(size, sto)
    if kind == "fixed":
        return PrecisionFormat.fixed(size, sto)
    return PrecisionFormat.qsgd(size)  # always stochastic


def _round_any(x: jax.Array, key: jax.Array, a: dict[str, jax.Array]) -> jax.Array:
    """:func:`~scarjax.perturb.precision.round_float` with traced bits, exponent range,
    largest value and rounding mode (both roundings computed, one kept)."""
    kw = dict(min_exponent=a["min_exponent"], max_value=a["max_value"])
    near = P.round_float(x, a["bits"], **kw)
    sto = P.round_float(x, a["bits"], stochastic=True, key=key, **kw)
    return jnp.where(a["stochastic"], sto, near)


def _fixed_any(x: jax.Array, key: jax.Array, a: dict[str, jax.Array]) -> jax.Array:
    bits = jnp.maximum(a["bits"], 2)  # valid in the branch not taken too
    near = P.fixed_point_quantizer(bits)(x, key)
    sto = P.fixed_point_quantizer(bits, stochastic=True)(x, key)
    return jnp.where(a["stochastic"], sto, near)


def _precision_factory(customs: tuple) -> Callable[[dict], hk.Hook]:
    """The hook factory of a batch (one object per set of custom quantizers, so the
    compiled program is reused; an unhashable quantizer gets a new one each time)."""
    try:
        return _cached_precision_factory(customs)
    except TypeError:
        return functools.partial(precision_hook, customs=customs)


@functools.lru_cache(maxsize=64)
def _cached_precision_factory(customs: tuple) -> Callable[[dict], hk.Hook]:
    return functools.partial(precision_hook, customs=customs)


def precision_hook(args: dict[str, Any], *, customs: tuple = (), point: str = "write") -> hk.Hook:
    """The precision hook of one :meth:`PrecisionFormat.as_arrays` (traced arrays are
    fine: one compiled program serves every format of a batch, under
    ``run_trials(..., hook_args=stacked)``). It stores exactly what
    ``PrecisionFormat.hook()`` stores (same rounding, same random draws)."""
    branches = [
        _round_any,  # mantissa
        _round_any,  # named float
        _fixed_any,
        lambda x, key, a: P.qsgd(jnp.maximum(a["bits"], 1))(x, key),
        *[(lambda q: lambda x, key, a: q(x, key).astype(jnp.float32))(q) for q in customs],
    ]

    def q(x, key):
        return jax.lax.switch(args["kind"], [functools.partial(b, a=args) for b in branches], x, key)

    return P.precision(q, point=point)


# --------------------------------------------------------------------------------------
# Staleness (Example 5.2.2).

#: Delay patterns of :class:`DelayPattern`, simplest first: ``'fixed'`` (every worker
#: always reads a version exactly ``delays[m]`` old; the worst case ``s`` by default),
#: ``'per_step'`` (SSP: uniform in ``[0, s]`` at every step), ``'uniform'`` (uniform in
#: ``[0, s]`` once per worker), ``'geometric'`` (asynchronous: truncated geometric with
#: mean ``mean``, truncated at ``s``).
DELAY_KINDS = ("fixed", "per_step", "uniform", "geometric")


class DelayPattern(NamedTuple):
    """Stale reads of ``M`` data-parallel workers with a declared staleness bound ``s``.

    Attributes:
      workers: ``M``.
      bound: the declared bound ``s``: no worker reads a version more than ``s``
        iterations old (for ``'geometric'``: the truncation of the delays).
      kind: one of :data:`DELAY_KINDS`.
      delays: ``'fixed'``: each worker's delay (``()``: every worker ``s``).
      mean: ``'geometric'``: the mean delay before truncation.
    """

    workers: int
    bound: int
    kind: str = "fixed"
    delays: tuple[int, ...] = ()
    mean: float = 0.0

    def fixed_delays(self) -> tuple[int, ...]:
        return self.delays if self.delays else (self.bound,) * self.workers

    def hook(self) -> hk.Hook:
        """The :mod:`scarjax.perturb.staleness` hook of this pattern (run it with
        ``scarjax.run(..., workers=M)``)."""
        M, s = self.workers, self.bound
        if self.kind == "fixed":
            d = self.fixed_delays()
            if all(x == s for x in d):
                return S.ssp(M, s, delays="fixed")
            return S.ssp(M, s, delays=np.asarray(d, np.int32))
        if self.kind == "per_step":
            return S.ssp(M, s)
        if self.kind == "uniform":
            return S.ssp(M, s, delays="uniform")
        return S.asynchronous(M, self.mean, max_delay=s)

    def as_arrays(self) -> dict[str, np.ndarray]:
        """One trial's ``hook_args`` for :func:`stale_read_hook`."""
        return {
            "kind": np.int32(DELAY_KINDS.index(self.kind)),
            "bound": np.int32(self.bound),
            "delays": np.asarray(self.fixed_delays(), np.int32),
            "mean": np.float32(self.mean),
        }

    def describe(self) -> str:
        M, s = self.workers, self.bound
        head = f"{M} worker{'s' if M > 1 else ''}, staleness bound s = {s}: "
        if self.kind == "fixed":
            d = self.fixed_delays()
            if all(x == s for x in d):
                return head + f"every worker always reads the version {s} iterations old"
            return head + f"fixed per-worker delays {list(d)}"
        if self.kind == "per_step":
            return head + f"SSP, each worker's delay uniform in [0, {s}] at every step"
        if self.kind == "uniform":
            return head + f"each worker's delay drawn uniformly in [0, {s}] once"
        return head + f"asynchronous, truncated geometric delays (mean {self.mean:.4g}, at most {s})"

    def replay(self) -> str:
        return f"sst.{self!r}"


def staleness_bounds(max_bound: int = 8, *, min_bound: int = 0) -> Any:
    """SSP staleness bounds ``s`` in ``[min_bound, max_bound]`` (shrinks to ``min_bound``;
    ``s = 0`` is synchronous)."""
    va.check_int("max_bound", max_bound, lo=0)
    va.check_int("min_bound", min_bound, lo=0)
    if min_bound > max_bound:
        raise ValueError(f"need 0 <= min_bound <= max_bound, got min_bound={min_bound}, max_bound={max_bound}")
    return st.integers(min_bound, max_bound)


@st.composite
def delay_patterns(
    draw: Any,
    workers: Any = 1,
    *,
    max_bound: int = 4,
    bounds: Any = None,
    kinds: Any = DELAY_KINDS,
    means: Any = None,
) -> DelayPattern:
    """Delay patterns of stale reads (thesis Example 5.2.2).

    Args:
      workers: ``M`` (an int, or a strategy such as :func:`worker_counts`).
      max_bound: the largest staleness bound drawn (default bounds: ``[0, max_bound]``,
        shrinking to 0).
      bounds: a strategy for ``s`` instead (values in ``[0, max_bound]``).
      kinds: a subset of :data:`DELAY_KINDS` (shrinks to the first).
      means: a strategy for the mean delay of ``'geometric'`` (default ``floats(0, 2s)``,
        shrinking to 0).
    """
    kinds = tuple(kinds)
    if not kinds or any(k not in DELAY_KINDS for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of {DELAY_KINDS}, got {kinds!r}")
    M = check_workers(draw(workers) if isinstance(workers, st.SearchStrategy) else workers)
    s = draw(staleness_bounds(max_bound) if bounds is None else bounds)
    if not 0 <= s <= max_bound:
        raise ValueError(f"bounds drew s = {s}, outside [0, max_bound={max_bound}]")
    # Every kind draws the same choices (kind, heterogeneity, mean), so shrinking orders
    # patterns by kind first (hypothesis prefers shorter choice sequences).
    kind = draw(st.sampled_from(kinds))
    hetero = draw(st.booleans())
    mean = float(draw(st.floats(0.0, 2.0 * s) if means is None else means))
    if kind == "fixed":
        delays = tuple(draw(st.lists(st.integers(0, s).map(lambda i: s - i), min_size=M, max_size=M))) if hetero else ()
        return DelayPattern(M, s, "fixed", delays if any(d != s for d in delays) else ())
    if kind == "geometric":
        return DelayPattern(M, s, "geometric", (), mean)
    return DelayPattern(M, s, kind)


@functools.lru_cache(maxsize=64)
def _stale_factory(workers: int, max_bound: int, hook: Callable | None) -> Callable[[dict], Any]:
    def factory(args: dict) -> Any:
        if hook is None:
            return stale_read_hook(args, workers=workers, max_bound=max_bound)
        return hook(workers, args["bound"], max_bound)

    return factory


def stale_read_hook(args: dict[str, Any], *, workers: int, max_bound: int, name: str = "stale_reads") -> hk.Hook:
    """The stale-read hook of one :meth:`DelayPattern.as_arrays` (traced arrays are
    fine: one compiled program serves every pattern with ``M = workers`` and
    ``s <= max_bound``). It reads exactly what ``DelayPattern.hook()`` reads (same
    delays, same random draws)."""
    M = check_workers(workers)
    s = jnp.asarray(args["bound"], jnp.int32)
    p = 1.0 / (1.0 + jnp.asarray(args["mean"], jnp.float32))

    def init_delays(key):
        return jax.random.randint(key, (M,), 0, s + 1)

    def delays(step, key, uniform):
        options = jnp.stack([
            jnp.asarray(args["delays"], jnp.int32),
            jax.random.randint(key, (M,), 0, s + 1),
            uniform,
            S.truncated_geometric(key, (M,), p, s),
        ])
        return options[args["kind"]]

    return S.stale_reads(M, int(max_bound) + 1, delays, init_delays=init_delays, name=name)


# --------------------------------------------------------------------------------------
# Workers and revocations.


def worker_counts(max_workers: int = 8, *, min_workers: int = 1, divisors_of: int | None = None) -> Any:
    """Data-parallel worker counts ``M`` in ``[min_workers, max_workers]``, shrinking to
    the smallest (one worker: synchronous training on one machine). With ``divisors_of=n``
    only counts dividing ``n`` (every shard the same size)."""
    check_workers(max_workers, "max_workers")
    check_workers(min_workers, "min_workers")
    if min_workers > max_workers:
        raise ValueError(f"need min_workers <= max_workers, got {min_workers} > {max_workers}")
    counts = list(range(min_workers, max_workers + 1))
    if divisors_of is not None:
        n = check_workers(divisors_of, "divisors_of")
        counts = [m for m in counts if n % m == 0]
        if not counts:
            raise ValueError(f"no worker count in [{min_workers}, {max_workers}] divides divisors_of={n}")
    return st.sampled_from(counts)


class Revocation(NamedTuple):
    """Worker ``worker`` revoked during iteration ``step`` having finished a fraction
    ``progress`` of its points (``0``: before its first point)."""

    step: int
    worker: int
    progress: float = 0.0

    def describe(self) -> str:
        if self.progress <= 0.0:
            return f"step {self.step}: worker {self.worker} revoked before its first point"
        return f"step {self.step}: worker {self.worker} revoked after {self.progress:.3g} of its points"


class RevocationSchedule(NamedTuple):
    """Revocations of ``M`` workers at chosen steps (Sync-on-the-fly): replays as
    :func:`scarjax.perturb.revocation.revocations` with a progress table."""

    workers: int
    events: tuple[Revocation, ...]
    partial: bool = True

    @property
    def last_step(self) -> int:
        return max((e.step for e in self.events), default=-1)

    def progress_table(self, steps: int | None = None) -> np.ndarray:
        """``[T, M]`` progress fractions (``T = steps``, default the last event + 1); a
        worker revoked twice in one step keeps the smaller fraction."""
        T = self.last_step + 1 if steps is None else int(steps)
        if T <= self.last_step:
            raise ValueError(f"steps={T} does not cover the last revocation at step {self.last_step}")
        table = np.ones((max(T, 1), self.workers), np.float32)
        for e in self.events:
            table[e.step, e.worker] = min(table[e.step, e.worker], e.progress)
        return table

    def hook(self, steps: int | None = None) -> hk.Hook:
        """The ``'progress'`` hook (``revocations(M, progress=table, partial=...)``);
        requires ``scarjax.run(..., workers=M)``."""
        return R.revocations(self.workers, progress=self.progress_table(steps), partial=self.partial)

    def describe(self) -> str:
        if not self.events:
            return f"{self.workers} workers, no revocation"
        mode = "partial gradients flushed" if self.partial else "revoked contributions dropped"
        n = len(self.events)
        return f"{self.workers} workers, {n} revocation{'s' if n > 1 else ''} ({mode}): " + "; ".join(
            e.describe() for e in sorted(self.events)
        )


@st.composite
def revocation_schedules(
    draw: Any,
    workers: Any,
    max_step: int,
    *,
    min_step: int = 0,
    max_events: int = 4,
    min_events: int = 1,
    progress: Any = None,
    partial: Any = None,
) -> RevocationSchedule:
    """Revocation schedules: which workers, when, and how far they got.

    Args:
      workers: ``M`` (an int or a strategy, e.g. :func:`worker_counts`).
      max_step, min_step: the window of steps (inclusive); shrinks to ``min_step``.
      max_events, min_events: how many revocations (shrinks to ``min_events``).
      progress: a strategy for the fraction a revoked worker finished (default
        ``floats(0, 1)``, shrinking to 0: revoked before its first point).
      partial: a strategy for flushing partial gradients (default ``booleans()``).
    """
    if max_step < min_step or min_step < 0:
        raise ValueError(f"need 0 <= min_step <= max_step, got min_step={min_step}, max_step={max_step}")
    if not 0 <= min_events <= max_events:
        raise ValueError(f"need 0 <= min_events <= max_events, got {min_events}, {max_events}")
    M = check_workers(draw(workers) if isinstance(workers, st.SearchStrategy) else workers)
    progress = st.floats(0.0, 1.0) if progress is None else progress
    event = st.builds(Revocation, step=st.integers(min_step, max_step), worker=st.integers(0, M - 1), progress=progress)
    events = tuple(draw(st.lists(event, min_size=min_events, max_size=max_events)))
    flush = draw(st.booleans() if partial is None else partial)
    return RevocationSchedule(M, events, bool(flush))
