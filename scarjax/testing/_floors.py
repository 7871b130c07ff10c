"""Reduced precision and stale reads against the theory: the per-step bound of thesis
Example 5.2.1 and the error floor of Appendix B.1.1 (Eq B.1), the staleness bound of
Example 5.2.2 and the convergence it leaves (Lemma B.2.1, Eq B.4).

:func:`check_precision_floor` stores the parameters of the user's algorithm in a drawn
number format at every step (the write point: ``ỹ⁽ᵏ⁾ = round(y⁽ᵏ⁾)``, ``δ_k = ỹ⁽ᵏ⁾ − y⁽ᵏ⁾``)
and checks

* **Example 5.2.1** (floating-point formats, your own quantizer with the bits it
  claims): ``‖δ_k‖ ≤ 2^{−(m+1)}‖y⁽ᵏ⁾‖`` (round-to-nearest) or ``< 2^{−m}‖y⁽ᵏ⁾‖``
  (stochastic) at every step, plus half (one) subnormal quantum per entry below the
  format's smallest normal number;
* **Appendix B.1.1, Eq B.1**: with ``Δ = sup_{k ≥ s} ‖δ_k‖`` measured over the tail of the
  run (from ``s``), the run restarted at ``s`` satisfies
  ``‖y⁽ᵏ⁾ − w*‖ ≤ F + c^{k−s}(‖y⁽ˢ⁾ − w*‖ − F)⁺`` with ``F = cΔ/(1 − c)``
  (:func:`scarjax.bounds.error_floor`): the achieved error floor is at most ``F``.

:func:`check_staleness` runs the algorithm in worker mode under drawn stale-read delay
patterns with a declared bound ``s`` (:func:`scarjax.perturb.staleness.ssp`,
``asynchronous``) and checks

* **Example 5.2.2** (the staleness bound): every worker's view is at most ``s`` updates
  old, ``‖w̃ₘ⁽ᵏ⁾ − y⁽ᵏ⁾‖ ≤ Σ_{j=1}^{s} ‖Δ_{k−j}‖`` (the norms of the last ``s`` applied
  updates); with ``lipschitz=λ`` (the Lipschitz constant of a worker's update in the
  parameters it reads, ``ηL`` for SGD), the perturbation of the iterate,
  ``‖δ_{k+1}‖ = ‖Δ(w̃) − Δ(y⁽ᵏ⁾)‖`` (``trace.read_effect``), is at most
  ``λ Σ_{j=1}^{s} ‖Δ_{k−j}‖``;
* **Lemma B.2.1 (Eq B.4)** with the measured ``‖δ_ℓ‖``: ``‖y⁽ᵏ⁾ − w*‖`` stays under the
  envelope ``cᵏd₀ + Σ_ℓ c^{k−ℓ}‖δ_ℓ‖`` (:func:`scarjax.bounds.envelope`), which is the
  rework of Thm 5.3.1 and, for a perturbation ``≤ Δ`` at every step, the floor of B.1.

Both need Eq 5.3 to hold with ``c`` along the run for the unperturbed (synchronous)
update ``f`` — deterministic iterations such as gradient descent, where it holds
pathwise. Float32 arithmetic is itself a small unmodelled perturbation; the checks allow
for it (see :data:`ARITHMETIC_ULPS`), and skip the floor where the drawn format changes
nothing (``Δ = 0``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from scarjax import validate as va
from scarjax import bounds
from scarjax import hooks as hk
from scarjax.core import Algorithm, State
from scarjax.testing._harness import fail, replay_keys, run_property
from scarjax.testing._st_systems import (
    DELAY_KINDS,
    DelayPattern,
    PrecisionFormat,
    _precision_factory,
    _stale_factory,
    delay_patterns,
    precision_formats,
    worker_counts,
)
from scarjax.trials import run_trials

__all__ = [
    "PrecisionFloorResult",
    "check_precision_floor",
    "assert_precision_floor",
    "StalenessResult",
    "check_staleness",
    "assert_staleness",
    "norm_probes",
    "ARITHMETIC_ULPS",
]

#: Float32 arithmetic of the update is a perturbation Eq 5.2 does not model: each step
#: may move the iterate by a few units in the last place of ``‖y‖``, which accumulate to
#: ``ARITHMETIC_ULPS·2^{−24}·max‖y‖/(1 − c)`` in the floor and the envelope. Norms are
#: float32 reductions too: every comparison allows a relative ``RTOL``.
ARITHMETIC_ULPS = 8.0
RTOL = 1e-5
_EPS32 = 2.0**-24

_PRECISION_HOOK = "precision_write"
_PROBE = "norm_probe"


# --------------------------------------------------------------------------------------
# Measuring ‖y⁽ᵏ⁾‖ and ‖Δ_k‖ without changing the run.


@dataclasses.dataclass(frozen=True)
class _NormLoss:
    """``loss(state, data) = norm(state.params)``: with it ``trace.loss[k] = ‖y⁽ᵏ⁾‖``, the
    parameters before step ``k``'s write hooks (``loss`` is only recorded, never used by
    the update). Compares by ``norm``, so the compiled program is reused."""

    norm: Callable[[Any], jax.Array]

    def __call__(self, state: State, data: Any) -> jax.Array:
        return self.norm(state.params)


def _scale(factor: float) -> Callable:
    def apply(value, hstate, ctx):
        return jax.tree.map(lambda x: x * jnp.asarray(factor, x.dtype), value), hstate

    return apply


def _no_state(state, key):
    return ()


_PROBES = (
    hk.Hook(point="update", init=_no_state, apply=_scale(2.0), name=_PROBE),
    hk.Hook(point="update", init=_no_state, apply=_scale(0.5), name=_PROBE + "_undo"),
)


def norm_probes() -> tuple[hk.Hook, hk.Hook]:
    """Two update-point hooks that make ``trace.delta['norm_probe'][k] = ‖Δ_k‖``, the norm
    of the update applied at step ``k``, without changing the run: the first doubles Δ,
    the second halves it back (both exact in binary floating point), so the first one's
    measured change is ``‖2Δ − Δ‖ = ‖Δ‖`` and the update point's net change is 0. Put them
    after your own hooks (hook ``i`` draws its random numbers from the ``i``-th key of a
    split that does not depend on the number of hooks, so the run is unchanged bit for
    bit). :func:`assert_staleness` reads them."""
    return _PROBES


@functools.lru_cache(maxsize=64)
def _with_probes(factory: Callable) -> Callable:
    def probed(args):
        return [factory(args), *_PROBES]

    return probed


# --------------------------------------------------------------------------------------
# Validation and small helpers.


def _check_algorithm(algorithm: Any, *, workers: bool = False) -> Algorithm:
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    if algorithm.optimum is None:
        raise ValueError(
            f"algorithm {algorithm.name!r} has no optimum: the floor and the envelope bound "
            "‖y⁽ᵏ⁾ − w*‖, so give it one (algorithm.replace(optimum=w_star))"
        )
    if workers and not algorithm.has_workers:
        raise ValueError(
            f"algorithm {algorithm.name!r} has no worker/server split (grad and apply): stale "
            "reads need worker mode (build it with scarjax.from_optax, see scarjax.perturb.workers)"
        )
    return algorithm


def _check_c(c: Any) -> float:
    va.check_real("c", c, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
    return float(c)


def _check_seed(seed: Any) -> Any:
    if seed is None:
        return st.integers(0, 2**31 - 1)
    return st.just(va.check_int("seed", seed, lo=0))


def _check_strategy(name: str, value: Any) -> Any:
    if not isinstance(value, st.SearchStrategy):
        raise TypeError(f"{name} must be a hypothesis strategy, got {type(value).__name__}")
    return value


def _batched(x: Any) -> np.ndarray | None:
    if x is None:
        return None
    a = np.asarray(x, np.float64)
    return a[None] if a.ndim == 1 else a


def _first_bad(*rows: np.ndarray | None) -> int | None:
    """The first index where any of the rows is not finite (they are aligned by step)."""
    bad = [int(np.argmax(~np.isfinite(r))) for r in rows if r is not None and not np.all(np.isfinite(r))]
    return min(bad) if bad else None


def _window(steps: int, tail: Any, window: Any) -> tuple[int, int]:
    va.check_real("tail", tail, lo=0.0, hi=1.0, lo_open=True, scalar=True)
    va.check_real("window", window, lo=0.0, hi=1.0, lo_open=True, scalar=True)
    if window > tail:
        raise ValueError(f"window must be <= tail (the window lies inside the tail), got window={window}, tail={tail}")
    s = steps - int(round(tail * steps))
    w0 = steps - max(1, int(round(window * steps)))
    return max(s, 0), max(w0, s)


def _ratio(measured: np.ndarray, allowed: np.ndarray) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(allowed > 0, measured / allowed, np.where(measured > 0, np.inf, 0.0))
    return float(np.max(r)) if r.size else 0.0


# --------------------------------------------------------------------------------------
# Example 5.2.1 and Appendix B.1.1.


class PrecisionFloorResult(NamedTuple):
    """What a passing precision check measured.

    Attributes:
      name: the algorithm's name.
      examples: hypothesis examples run (each a batch of ``trials`` formats).
      trials: runs checked in all.
      formats: distinct formats among them.
      worst_rounding: the largest ``‖δ_k‖ / bound`` of Example 5.2.1 over every checked
        step (≤ 1; ``nan`` if no drawn format has a per-step bound).
      worst_floor: the largest ``‖y⁽ᵏ⁾ − w*‖ / bound`` of Eq B.1 over the window (≤ 1;
        the achieved floor as a fraction of the bound).
      floor_skipped: runs whose format changed nothing (``Δ = 0``: no floor to check).
    """

    name: str
    examples: int
    trials: int
    formats: int
    worst_rounding: float
    worst_floor: float
    floor_skipped: int

    def summary(self) -> str:
        rnd = "no per-step bound checked" if math.isnan(self.worst_rounding) else (
            f"worst ‖δ_k‖ = {self.worst_rounding:.3g} × the Example 5.2.1 bound")
        return (
            f"{self.name}: Example 5.2.1 and the B.1.1 floor held on {self.trials} runs "
            f"({self.examples} examples, {self.formats} formats): {rnd}; worst achieved error = "
            f"{self.worst_floor:.3g} × the Eq B.1 bound"
            + (f" ({self.floor_skipped} runs without perturbation skipped)" if self.floor_skipped else "")
        )


def _range_note(fmt: PrecisionFormat) -> dict:
    if fmt.kind != "float":
        return {}
    vmax = float(np.asarray(jnp.finfo(getattr(jnp, fmt.name)).max))
    return {"note": f"{fmt.name} saturates at ±{vmax:.6g}: Example 5.2.1 assumes every |y| within range"}


def _as_formats(formats: Any, n: int) -> list[PrecisionFormat] | None:
    if formats is None:
        return None
    if isinstance(formats, PrecisionFormat):
        return [formats] * n
    formats = list(formats)
    if len(formats) != n or not all(isinstance(f, PrecisionFormat) for f in formats):
        raise ValueError(f"formats must be a PrecisionFormat or a sequence of {n} of them (one per trial)")
    return formats


def assert_precision_floor(
    trace: Any,
    c: float,
    formats: PrecisionFormat | Sequence[PrecisionFormat] | None = None,
    *,
    param_norms: Any = None,
    ones_norm: float | None = None,
    tail: float = 0.5,
    window: float = 0.25,
    scale: float | None = None,
    hook: str = _PRECISION_HOOK,
    name: str = "algorithm",
    seed: int | None = None,
    describe: Callable[[int], dict] | None = None,
    replay: Callable[[int], str | None] | None = None,
) -> PrecisionFloorResult:
    """Example 5.2.1 and Appendix B.1.1 on runs you already have (one run or a batch).

    Args:
      trace: a :class:`~scarjax.Trace` (with a leading trial axis or not) of a run with
        a perturbation at every step, e.g. ``run(alg, fmt.hook(), steps, key)``; it must
        have distances (an algorithm with an optimum).
      c: the rate of Eq 5.3 for the unperturbed update.
      formats: the format of each run, for Example 5.2.1's per-step bound (with
        ``param_norms``); ``None`` checks the floor only.
      param_norms: ``[..., steps + 1]`` ``‖y⁽ᵏ⁾‖`` before each step's rounding (what
        :func:`check_precision_floor` records); also sets the float32 allowance.
      ones_norm: the algorithm's norm of a tree of ones shaped like the parameters (the
        subnormal allowance of the per-step bound); required with ``param_norms``.
      tail: Δ is the largest ``‖δ_ℓ‖`` over the last ``tail`` fraction of the run
        (``ℓ ≥ s``), where the run is restarted for Eq B.1.
      window: the achieved floor is the error over the last ``window`` fraction.
      scale: ``max‖y⁽ᵏ⁾‖`` for the float32 allowance (default: from ``param_norms``,
        else none).
      hook: the trace label of the rounding (``trace.delta[hook]``; default the
        precision hook's ``'precision_write'``, else the write point's total).
      name, seed, describe, replay: what a counterexample reports (``describe(i)``: extra
        details of trial ``i``; ``replay(i)``: code replaying it).

    Raises :class:`~scarjax.testing.CheckFailure` for the first failing trial.
    """
    c = _check_c(c)
    dist = _batched(trace.distance)
    if dist is None:
        raise ValueError("trace has no distances: run an algorithm with an optimum (algorithm.replace(optimum=w_star))")
    n, L = dist.shape[0], dist.shape[1] - 1
    norms = _batched(trace.perturbation_norms())
    write = _batched(trace.point_delta["write"])
    rounding = _batched(trace.delta[hook]) if hook in trace.delta else write
    ys = _batched(param_norms)
    if ys is not None and ys.shape != dist.shape:
        raise ValueError(f"param_norms must have the shape of trace.distance {dist.shape}, got {ys.shape}")
    fmts = _as_formats(formats, n)
    if fmts is not None and ys is not None:
        if ones_norm is None:
            raise ValueError("ones_norm is required with param_norms: the algorithm's norm of a tree of ones")
        va.check_real("ones_norm", ones_norm, lo=0.0, scalar=True)
    s, w0 = _window(L, tail, window)
    describe = describe or (lambda i: {})
    replay = replay or (lambda i: None)
    worst_rounding, worst_floor, skipped = float("nan"), 0.0, 0
    tag = lambda i: {"algorithm": name, "trial": f"{i} of {n}", **describe(i), "seed": seed}  # noqa: E731
    for i in range(n):
        k = _first_bad(dist[i], norms[i], None if ys is None else ys[i])
        if k is not None:
            fail(
                "B.1.1: the run diverged (NaN or inf) under reduced precision",
                {**tag(i), "step": k, "‖y⁽ᵏ⁾ − w*‖": dist[i, min(k, L)]},
                replay(i),
            )
        ymax = float(np.max(ys[i])) if ys is not None else (0.0 if scale is None else float(scale))
        # Example 5.2.1, every step.
        fmt = None if fmts is None else fmts[i]
        if fmt is not None and ys is not None and fmt.relative_bound() is not None:
            r, a = fmt.relative_bound(), fmt.absolute_bound()
            allowed = (r * ys[i, :L] + a * float(ones_norm)) * (1 + RTOL)
            measured = rounding[i]
            ratio = _ratio(measured, allowed)
            worst_rounding = ratio if math.isnan(worst_rounding) else max(worst_rounding, ratio)
            bad = np.nonzero(measured > allowed)[0]
            if bad.size:
                k = int(bad[0])
                fail(
                    "Example 5.2.1: the rounding error exceeds the format's bound",
                    {
                        **tag(i),
                        "format": fmt.describe(),
                        "step": k,
                        "‖δ_k‖ measured": measured[k],
                        "bound": f"{allowed[k]:.6g} = {'2^-' + str(fmt.bits) if fmt.stochastic else '2^-' + str(fmt.bits + 1)}"
                        f" × ‖y⁽ᵏ⁾‖ (+ subnormal allowance {a * float(ones_norm):.3g})",
                        "‖y⁽ᵏ⁾‖": ys[i, k],
                        "ratio": measured[k] / allowed[k],
                        "steps over the bound": f"{bad.size} of {L}",
                        **_range_note(fmt),
                    },
                    replay(i),
                )
        # Appendix B.1.1, Eq B.1 restarted at s: ‖y⁽ᵏ⁾ − w*‖ ≤ F + c^{k−s}(d_s − F)⁺.
        delta = float(np.max(norms[i, s:]))
        if delta == 0.0:
            skipped += 1
            continue
        F = float(bounds.error_floor(delta, c))
        d_s = float(dist[i, s])
        ks = np.arange(w0, L + 1)
        upd = norms[i, ks] - np.concatenate([write[i], [0.0]])[ks]  # update-point part of ‖δ_k‖ (in d_k)
        bound = F + c ** (ks - s) * max(d_s - F, 0.0) + np.maximum(upd, 0.0)
        allowed = bound * (1 + RTOL) + ARITHMETIC_ULPS * _EPS32 * ymax / (1 - c)
        achieved = dist[i, ks]
        worst_floor = max(worst_floor, _ratio(achieved, allowed))
        bad = np.nonzero(achieved > allowed)[0]
        if bad.size:
            j = int(np.argmax(achieved / allowed))
            fail(
                "Appendix B.1.1 (Eq B.1): the error floor exceeds c/(1 − c)·Δ",
                {
                    **tag(i),
                    **({"format": fmt.describe()} if fmt is not None else {}),
                    "step": int(ks[j]),
                    "‖y⁽ᵏ⁾ − w*‖ achieved": achieved[j],
                    "bound F + c^(k−s)·(d_s − F)⁺": bound[j],
                    "F = c/(1 − c)·Δ": F,
                    "Δ = max ‖δ_ℓ‖, ℓ ≥ s": delta,
                    "restart s, d_s": f"s = {s}, d_s = {d_s:.6g}",
                    "c": c,
                    "hint": "is Eq 5.3 true with this c for every iterate (deterministic update)?",
                },
                replay(i),
            )
    return PrecisionFloorResult(name, 1, n, len({f for f in fmts}) if fmts else 0, worst_rounding, worst_floor, skipped)


def check_precision_floor(
    algorithm: Algorithm,
    c: float,
    steps: int,
    *,
    formats: Any = None,
    trials: int = 4,
    seed: int | None = None,
    settings: Any = None,
    tail: float = 0.5,
    window: float = 0.25,
) -> PrecisionFloorResult:
    """Store the parameters in drawn formats at every step: Example 5.2.1 per step and the
    error floor of Appendix B.1.1 (Eq B.1).

    Each hypothesis example runs ``trials`` formats (one per trial, one
    :func:`scarjax.run_trials` call compiled once for every drawn format) with keys
    :func:`~scarjax.testing.replay_keys` ``(seed, trials)`` and checks, per trial:

    * Example 5.2.1 (floating-point and custom formats): ``‖δ_k‖ ≤ 2^{−(m+1)}‖y⁽ᵏ⁾‖``
      (nearest) / ``2^{−m}‖y⁽ᵏ⁾‖`` (stochastic) at every step, plus the subnormal
      allowance;
    * Eq B.1 restarted at ``s`` (the start of the last ``tail`` of the run) with
      ``Δ = max_{ℓ ≥ s}‖δ_ℓ‖``: over the last ``window`` of the run
      ``‖y⁽ᵏ⁾ − w*‖ ≤ F + c^{k−s}(d_s − F)⁺``, ``F = c/(1 − c)·Δ``
      (:func:`scarjax.bounds.error_floor`): the achieved floor is below ``F``.

    Args:
      algorithm: your :class:`~scarjax.Algorithm`, with its optimum ``w*``; its update
        must satisfy Eq 5.3 with rate ``c`` for every iterate (deterministic: gradient
        descent, a fixed-point map).
      c: that rate.
      steps: iterations per run (long enough that ``c^{steps·(tail − window)}`` is small:
        the transient from the restart has decayed in the window).
      formats: a strategy of :class:`~scarjax.testing.strategies.PrecisionFormat`
        (default :func:`~scarjax.testing.strategies.precision_formats`); your own
        quantizer: ``st.just(sst.PrecisionFormat.custom(q, bits=m))``.
      trials: formats per example.
      seed: the keys' seed (default: drawn per example).
        (Inside the check ``trace.loss`` records ``‖y⁽ᵏ⁾‖``: the algorithm's ``loss`` is
        replaced by its norm of the parameters, which changes nothing else in the run.)
      settings: ``None`` (:data:`~scarjax.testing.DEFAULT_SETTINGS`), an int
        (max_examples) or a ``hypothesis.settings``.
      tail, window: as in :func:`assert_precision_floor`.

    Returns a :class:`PrecisionFloorResult`; raises
    :class:`~scarjax.testing.CheckFailure` (an ``AssertionError``) with the format, the
    step, measured vs bound, the trial, the seed and a replay snippet.
    """
    algorithm = _check_algorithm(algorithm)
    c = _check_c(c)
    steps = va.check_int("steps", steps, lo=4)
    trials = va.check_int("trials", trials, lo=1)
    seeds = _check_seed(seed)
    formats = precision_formats() if formats is None else _check_strategy("formats", formats)
    _window(steps, tail, window)

    measured = algorithm.replace(loss=_NormLoss(algorithm.norm))
    params0 = State(*algorithm.init(jax.random.key(0), algorithm.data)).params
    ones_norm = float(algorithm.norm(jax.tree.map(jnp.ones_like, params0)))
    seen: dict[Any, PrecisionFloorResult] = {}
    fmts_seen: set[PrecisionFormat] = set()

    def body(example: tuple[list[PrecisionFormat], int]) -> None:
        fmts, ex_seed = example
        for f in fmts:
            if not isinstance(f, PrecisionFormat):
                raise TypeError(f"formats must draw sst.PrecisionFormat values, got {type(f).__name__} {f!r}")
        customs = tuple(dict.fromkeys(f.quantizer for f in fmts if f.kind == "custom"))
        args = [f.as_arrays(customs) for f in fmts]
        hook_args = {k: np.stack([a[k] for a in args]) for k in args[0]}
        _, trace = run_trials(measured, _precision_factory(customs), steps, replay_keys(ex_seed, trials),
                              hook_args=hook_args)

        def replay(i: int) -> str:
            return (
                f"key = jax.random.fold_in(jax.random.key({ex_seed}), {i})\n"
                f"fmt = {fmts[i].replay()}\n"
                "# the trace's loss records ‖y⁽ᵏ⁾‖ (Example 5.2.1's bound is relative to it)\n"
                "measured = algorithm.replace(loss=lambda state, data: algorithm.norm(state.params))\n"
                f"_, trace = scarjax.run(measured, fmt.hook(), {steps}, key)\n"
                f"# ‖δ_k‖ = trace.delta['precision_write'][k], ‖y⁽ᵏ⁾ − w*‖ = trace.distance[k]\n"
                f"sxt.assert_precision_floor(trace, {c!r}, fmt, param_norms=trace.loss, ones_norm={ones_norm!r}, "
                f"tail={tail!r}, window={window!r})"
            )

        res = assert_precision_floor(
            trace, c, fmts, param_norms=trace.loss, ones_norm=ones_norm, tail=tail, window=window,
            name=algorithm.name, seed=ex_seed, describe=lambda i: {"steps": steps}, replay=replay,
        )
        seen[(tuple(fmts), ex_seed)] = res
        fmts_seen.update(fmts)

    run_property(st.tuples(st.lists(formats, min_size=trials, max_size=trials), seeds), body, settings)
    runs = list(seen.values())
    rounding = [r.worst_rounding for r in runs if not math.isnan(r.worst_rounding)]
    return PrecisionFloorResult(
        algorithm.name,
        len(runs),
        sum(r.trials for r in runs),
        len(fmts_seen),
        max(rounding) if rounding else float("nan"),
        max((r.worst_floor for r in runs), default=0.0),
        sum(r.floor_skipped for r in runs),
    )


# --------------------------------------------------------------------------------------
# Example 5.2.2.


class StalenessResult(NamedTuple):
    """What a passing staleness check measured.

    Attributes:
      name: the algorithm's name.
      examples: hypothesis examples run (each a batch of ``trials`` delay patterns).
      trials: runs checked in all.
      max_bound: the largest staleness bound drawn.
      worst_view: the largest ``‖w̃ − y⁽ᵏ⁾‖ / Σ_{j≤s}‖Δ_{k−j}‖`` (≤ 1).
      worst_effect: the largest ``‖δ_{k+1}‖ / (λ Σ_{j≤s}‖Δ_{k−j}‖)`` (≤ 1; ``nan``
        without ``lipschitz``).
      worst_envelope: the largest ``‖y⁽ᵏ⁾ − w*‖ / envelope`` of Lemma B.2.1 (≤ 1).
    """

    name: str
    examples: int
    trials: int
    max_bound: int
    worst_view: float
    worst_effect: float
    worst_envelope: float

    def summary(self) -> str:
        eff = "" if math.isnan(self.worst_effect) else (
            f", read perturbation ≤ {self.worst_effect:.3g} × λ·Σ‖Δ‖")
        return (
            f"{self.name}: Example 5.2.2 and Lemma B.2.1 held on {self.trials} runs ({self.examples} examples, "
            f"staleness ≤ {self.max_bound}): stale views ≤ {self.worst_view:.3g} × the last s updates{eff}; "
            f"error ≤ {self.worst_envelope:.3g} × the envelope"
        )


def assert_staleness(
    trace: Any,
    c: float,
    bound: Any,
    *,
    lipschitz: float | None = None,
    update_norms: Any = None,
    scale: float | None = None,
    name: str = "algorithm",
    seed: int | None = None,
    describe: Callable[[int], dict] | None = None,
    replay: Callable[[int], str | None] | None = None,
) -> StalenessResult:
    """Example 5.2.2 and Lemma B.2.1 on worker-mode runs you already have.

    Args:
      trace: a :class:`~scarjax.Trace` (one run or a batch) of
        ``run(alg, [stale_hook, *sxt.norm_probes()], steps, key, workers=M,
        measure_read_effect=True)`` on an algorithm with an optimum.
      c: the rate of Eq 5.3 for the synchronous update.
      bound: the declared staleness bound ``s`` (an int, or one per trial).
      lipschitz: ``λ`` with ``‖Δₘ(v) − Δₘ(v')‖ ≤ λ‖v − v'‖`` for every worker's part of
        the update (``η·L`` for SGD with an L-smooth loss per shard); checks the read
        perturbation when given.
      update_norms: ``[..., steps]`` ``‖Δ_k‖`` (default: ``trace.delta['norm_probe']``,
        recorded by :func:`norm_probes`).
      scale: ``max‖y⁽ᵏ⁾‖`` for the float32 allowance (one, or one per trial; default: the
        largest distance ``‖y⁽ᵏ⁾ − w*‖``; give ``‖w*‖ + d₀`` when ``w*`` is far from 0).
      name, seed, describe, replay: what a counterexample reports.

    Raises :class:`~scarjax.testing.CheckFailure` for the first failing trial: a view
    older than ``s`` updates, a read perturbation above ``λΣ‖Δ‖``, an error above the
    envelope, or a run that diverged.
    """
    c = _check_c(c)
    dist = _batched(trace.distance)
    if dist is None:
        raise ValueError("trace has no distances: run an algorithm with an optimum (algorithm.replace(optimum=w_star))")
    if trace.read_effect is None:
        raise ValueError("trace has no read_effect: run with measure_read_effect=True (thesis Example 5.2.2)")
    n, L = dist.shape[0], dist.shape[1] - 1
    if update_norms is None:
        if _PROBE not in trace.delta:
            raise ValueError(
                "update_norms: the trace has no 'norm_probe' entry; run with the probes after "
                "your hooks ([hook, *sxt.norm_probes()]) or give the ‖Δ_k‖"
            )
        update_norms = trace.delta[_PROBE]
    u = _batched(update_norms)
    if u.shape != (n, L):
        raise ValueError(f"update_norms must have shape {(n, L)}, got {u.shape}")
    s_all = np.broadcast_to(np.asarray(bound), (n,))
    for s in s_all:
        va.check_integer_value("bound", s, lo=0)
    if lipschitz is not None:
        va.check_real("lipschitz", lipschitz, lo=0.0, scalar=True)
    view = _batched(trace.point_delta["read"])
    eff = _batched(trace.read_effect)
    norms = _batched(trace.perturbation_norms())
    describe = describe or (lambda i: {})
    replay = replay or (lambda i: None)
    tag = lambda i: {"algorithm": name, "trial": f"{i} of {n}", **describe(i), "seed": seed}  # noqa: E731
    worst_view, worst_effect, worst_env = 0.0, float("nan") if lipschitz is None else 0.0, 0.0
    k = np.arange(L)
    for i in range(n):
        s = int(s_all[i])
        bad = _first_bad(dist[i, 1:], u[i], view[i], eff[i])
        if bad is not None:
            fail(
                "Example 5.2.2: the run diverged (NaN or inf) under stale reads",
                {**tag(i), "step": bad, "staleness bound s": s, "‖y⁽ᵏ⁾ − w*‖": dist[i, bad + 1]},
                replay(i),
            )
        ymax = float(np.max(dist[i])) if scale is None else float(np.broadcast_to(scale, (n,))[i])
        # The last s applied updates: Σ_{j=1}^{min(s,k)} ‖Δ_{k−j}‖.
        cs = np.concatenate([[0.0], np.cumsum(u[i])])
        recent = cs[k] - cs[np.maximum(k - s, 0)]
        slack = ARITHMETIC_ULPS * _EPS32 * ymax * np.minimum(k, s)  # y⁽ʲ⁺¹⁾ − y⁽ʲ⁾ vs Δ_j: one rounding each
        allowed = recent * (1 + RTOL) + slack
        worst_view = max(worst_view, _ratio(view[i], allowed))
        over = np.nonzero(view[i] > allowed)[0]
        if over.size:
            j = int(over[0])
            fail(
                "Example 5.2.2: a worker read a version older than the staleness bound s allows",
                {
                    **tag(i),
                    "step": j,
                    "staleness bound s": s,
                    "‖w̃ − y⁽ᵏ⁾‖ (RMS over workers)": view[i, j],
                    "Σ_{j≤s} ‖Δ_{k−j}‖ (last s updates)": recent[j],
                    "steps over the bound": f"{over.size} of {L}",
                },
                replay(i),
            )
        if lipschitz is not None:
            lam = float(lipschitz)
            allowed_e = lam * allowed + ARITHMETIC_ULPS * _EPS32 * (lam * ymax + u[i])
            worst_effect = max(worst_effect, _ratio(eff[i], allowed_e))
            over = np.nonzero(eff[i] > allowed_e)[0]
            if over.size:
                j = int(over[0])
                fail(
                    "Example 5.2.2: the read perturbation exceeds λ·Σ_{j≤s}‖Δ_{k−j}‖",
                    {
                        **tag(i),
                        "step": j,
                        "staleness bound s": s,
                        "‖δ_{k+1}‖ = ‖Δ(w̃) − Δ(y⁽ᵏ⁾)‖": eff[i, j],
                        "λ·Σ_{j≤s}‖Δ_{k−j}‖": lam * recent[j],
                        "λ (lipschitz)": lam,
                        "hint": "is lipschitz a Lipschitz constant of every worker's update in what it reads?",
                    },
                    replay(i),
                )
        # Lemma B.2.1 with the measured ‖δ_ℓ‖ (read effects perturb y⁽ᵏ⁺¹⁾, index k + 1):
        # ‖y⁽ᵏ⁾ − w*‖ ≤ B_k = c·B_{k−1} + ‖δ_k‖, B_0 = d₀, i.e. envelope_k + ‖δ_k‖.
        d0 = max(float(dist[i, 0]), np.finfo(np.float64).tiny)
        env = bounds.envelope(norms[i], d0, c)[: L + 1] + norms[i]
        allowed_d = env * (1 + RTOL) + ARITHMETIC_ULPS * _EPS32 * ymax / (1 - c)
        worst_env = max(worst_env, _ratio(dist[i, 1:], allowed_d[1:]))  # k = 0: d₀ = B₀
        over = np.nonzero(dist[i] > allowed_d)[0]
        if over.size:
            j = int(over[0])
            fail(
                "Lemma B.2.1 (Eq B.4): ‖y⁽ᵏ⁾ − w*‖ exceeds the envelope of the measured stale-read perturbations",
                {
                    **tag(i),
                    "step": j,
                    "staleness bound s": s,
                    "‖y⁽ᵏ⁾ − w*‖": dist[i, j],
                    "envelope cᵏd₀ + Σ c^(k−ℓ)‖δ_ℓ‖": env[j],
                    "c": c,
                    "hint": "is Eq 5.3 true with this c for the synchronous update at every iterate?",
                },
                replay(i),
            )
    return StalenessResult(name, 1, n, int(s_all.max()) if n else 0, worst_view, worst_effect, worst_env)


def check_staleness(
    algorithm: Algorithm,
    c: float,
    steps: int,
    *,
    workers: Any = None,
    max_bound: int = 4,
    kinds: Sequence[str] = DELAY_KINDS,
    lipschitz: float | None = None,
    hook: Callable[[int, jax.Array, int], hk.Hook] | None = None,
    trials: int = 4,
    seed: int | None = None,
    settings: Any = None,
) -> StalenessResult:
    """Stale reads within the bound the theory gives (thesis Example 5.2.2) and the
    convergence they leave (Lemma B.2.1).

    Each hypothesis example draws a worker count ``M`` and ``trials`` delay patterns
    (:func:`~scarjax.testing.strategies.delay_patterns`: a declared bound
    ``s ≤ max_bound`` and fixed, SSP per-step, per-worker uniform or truncated geometric
    delays), runs them as one :func:`scarjax.run_trials` call in worker mode with
    ``measure_read_effect=True`` (compiled once per ``M``) and checks, per trial and step
    ``k`` (:func:`assert_staleness`):

    * every worker's view is at most ``s`` updates old:
      ``‖w̃⁽ᵏ⁾ − y⁽ᵏ⁾‖ ≤ Σ_{j=1}^{s}‖Δ_{k−j}‖``;
    * with ``lipschitz=λ``: the perturbation of Example 5.2.2,
      ``‖δ_{k+1}‖ = ‖Δ(w̃⁽ᵏ⁾) − Δ(y⁽ᵏ⁾)‖ ≤ λ Σ_{j=1}^{s}‖Δ_{k−j}‖``;
    * Lemma B.2.1 with the measured ``‖δ_ℓ‖``: ``‖y⁽ᵏ⁾ − w*‖`` under the envelope (so the
      rework of Thm 5.3.1, and B.1's floor for a perturbation at every step).

    Args:
      algorithm: your :class:`~scarjax.Algorithm` with a worker/server split (worker
        mode) and its optimum; its synchronous update must satisfy Eq 5.3 with ``c``
        (deterministic, e.g. full-batch gradients).
      c: that rate.
      steps: iterations per run.
      workers: ``M``: an int or a strategy (default
        :func:`~scarjax.testing.strategies.worker_counts` ``(2)``: one or two workers;
        each ``M`` compiles its own program).
      max_bound: the largest staleness bound drawn (the ring buffer's size).
      kinds: delay patterns to draw (a subset of
        :data:`~scarjax.testing.strategies.DELAY_KINDS`).
      lipschitz: ``λ`` for the read-perturbation bound (``None``: not checked).
      hook: your own stale-read implementation instead, ``hook(M, s, max_bound) -> Hook``
        with ``s`` a traced int32 (the bound it declares; e.g.
        ``lambda M, s, S: my_ssp(M, s, max_staleness=S)``); ``kinds`` is then unused.
      trials, seed, settings: as in :func:`check_precision_floor`.
    """
    algorithm = _check_algorithm(algorithm, workers=True)
    c = _check_c(c)
    steps = va.check_int("steps", steps, lo=1)
    trials = va.check_int("trials", trials, lo=1)
    max_bound = va.check_int("max_bound", max_bound, lo=0)
    seeds = _check_seed(seed)
    if workers is None:
        workers = worker_counts(2)
    elif not isinstance(workers, st.SearchStrategy):
        workers = st.just(va.check_int("workers", workers, lo=1))
    kinds = tuple(kinds)
    if not kinds or any(k not in DELAY_KINDS for k in kinds):
        raise ValueError(f"kinds must be a non-empty subset of {DELAY_KINDS}, got {kinds!r}")
    if lipschitz is not None:
        va.check_real("lipschitz", lipschitz, lo=0.0, scalar=True)
    if hook is not None:
        va.check_callable("hook", hook)

    w_norm = float(algorithm.norm(algorithm.optimum))

    def scales(trace: Any) -> np.ndarray:
        # ‖y⁽ᵏ⁾‖ ≤ ‖w*‖ + ‖y⁽ᵏ⁾ − w*‖ (finite entries; a diverged run fails anyway)
        d = np.asarray(trace.distance, np.float64)
        return w_norm + np.max(np.where(np.isfinite(d), d, 0.0), axis=-1)

    def batches(M: int) -> Any:
        if hook is None:
            pattern = delay_patterns(M, max_bound=max_bound, kinds=kinds)
        else:
            pattern = st.integers(0, max_bound).map(lambda s: DelayPattern(M, s))
        return st.tuples(st.just(M), st.lists(pattern, min_size=trials, max_size=trials))

    seen: dict[Any, StalenessResult] = {}

    def body(example: tuple[tuple[int, list[DelayPattern]], int]) -> None:
        (M, patterns), ex_seed = example
        args = [p.as_arrays() for p in patterns]
        hook_args = {k: np.stack([a[k] for a in args]) for k in args[0]}
        factory = _with_probes(_stale_factory(M, max_bound, hook))
        _, trace = run_trials(algorithm, factory, steps, replay_keys(ex_seed, trials), hook_args=hook_args,
                              measure_read_effect=True, workers=M)

        def describe(i: int) -> dict:
            p = patterns[i]
            what = p.describe() if hook is None else (
                f"{M} worker{'s' if M > 1 else ''}, your hook declaring staleness bound s = {p.bound}")
            return {"stale reads": what, "steps": steps}

        def replay(i: int) -> str:
            p = patterns[i]
            h = f"{p.replay()}.hook()" if hook is None else f"hook({M}, jnp.int32({p.bound}), {max_bound})"
            lam = "" if lipschitz is None else f", lipschitz={lipschitz!r}"
            return (
                f"key = jax.random.fold_in(jax.random.key({ex_seed}), {i})\n"
                f"_, trace = scarjax.run(algorithm, [{h}, *sxt.norm_probes()], {steps}, key, workers={M}, "
                f"measure_read_effect=True)\n"
                f"sxt.assert_staleness(trace, {c!r}, {p.bound}{lam}, scale={float(scales(trace)[i])!r})"
            )

        seen[(M, tuple(patterns), ex_seed)] = assert_staleness(
            trace, c, [p.bound for p in patterns], lipschitz=lipschitz, scale=scales(trace),
            name=algorithm.name, seed=ex_seed, describe=describe, replay=replay,
        )

    run_property(st.tuples(workers.flatmap(batches), seeds), body, settings)
    runs = list(seen.values())
    effects = [r.worst_effect for r in runs if not math.isnan(r.worst_effect)]
    return StalenessResult(
        algorithm.name,
        len(runs),
        sum(r.trials for r in runs),
        max((r.max_bound for r in runs), default=0),
        max((r.worst_view for r in runs), default=0.0),
        max(effects) if effects else float("nan"),
        max((r.worst_envelope for r in runs), default=0.0),
    )
