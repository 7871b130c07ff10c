"""Is the user's algorithm linearly convergent near its optimum, and at what rate (thesis
Eq 5.3 / 5.5: ``‖f(w) − w*‖ ≤ c‖w − w*‖`` with ``0 < c < 1``, the assumption of every
rework bound of Sec 5.3)?

:func:`check_linear_convergence` starts the algorithm at random points near ``w*`` and
measures, per run, the largest one-step ratio ``d_{k+1}/d_k`` of the distances
``d_k = ‖y⁽ᵏ⁾ − w*‖`` above the rounding floor (:func:`scarjax.bounds.estimate_c`,
``'max_ratio'``: the smallest ``c`` for which Eq 5.3 held along the run). It gives

* a clear verdict "not linearly convergent here" (a run that diverged, grew, diverged
  after converging — back above the rounding floor later in the window — stalled or
  converged sublinearly: no meaningful ``c`` exists, so none is returned), or
* "INCONCLUSIVE" (:class:`~scarjax.testing.InconclusiveCheck`, not an ``AssertionError``)
  when no run could be measured: each fell at every step but reached the rounding floor
  within a few steps (a contraction too fast to measure from these starts) or fell by
  less than :data:`MIN_CONTRACTION` over the run (too slow); the message says how to
  measure it, or
* the rate ``ĉ`` (the largest such ratio over all runs) with a distribution-free
  confidence statement (:class:`LinearConvergence`), and
* with ``rate=c`` (a claimed rate), a counterexample wherever one step contracts by less
  than ``c`` beyond float32 rounding ("Eq 5.3: the claimed rate c = … is too small").

:func:`assert_linear_convergence` is the same verdict on runs you already have (a
:class:`~scarjax.Trace`, or distances).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from scarjax import bounds
from scarjax import hooks as hk
from scarjax import validate as va
from scarjax.core import Algorithm, State, run
from scarjax.testing._harness import fail, inconclusive, replay_keys, run_property
from scarjax.trials import run_trials

__all__ = ["LinearConvergence", "check_linear_convergence", "assert_linear_convergence", "near_start"]

#: A one-step ratio counts against a claimed rate ``c`` only when
#: ``d_{k+1} > c·d_k + ROUNDING_ULPS·ε·(S + d_k)`` (``ε`` the parameters' machine epsilon,
#: ``S`` the size of the iterates ``‖w*‖ + d₀``): float32 rounding of one step moves a
#: distance by a few ``ε·S`` (measured ≤ 3ε·S on the quadratic test beds).
ROUNDING_ULPS = 16.0
#: Distances below ``FLOOR_ULPS·ε·S`` are not used (besides estimate_c's own floor): there
#: rounding moves a one-step ratio by more than ~1e-3 of itself.
FLOOR_ULPS = 1e3
#: A run must contract by at least this factor above its floor to show a linear rate: over
#: a shorter stretch a sublinear run (``w ← w − 0.1w³`` near 0: ratio ``1 − 0.1d²``) looks
#: geometric with a rate near 1, a meaningless ``c``.
MIN_CONTRACTION = 100.0


class LinearConvergence(NamedTuple):
    """What a passing linear-convergence check measured (thesis Eq 5.3).

    Attributes:
      c: the rate: the largest one-step ratio ``d_{k+1}/d_k`` of any run above its
        rounding floor, i.e. the smallest ``c`` with which Eq 5.3 held at every observed
        step of every run (:func:`scarjax.bounds.estimate_c`, ``'max_ratio'``: the
        conservative choice, the one to put into Thm 5.3.1). Equal to ``high``.
      low: the smallest fitted mean rate of any run (``CEstimate.low``): ``[low, high]``
        is the range of rates the runs show (a fast transient pulls ``low`` down).
      high: ``c``.
      n_trials: the number of independent runs ``n``.
      confidence: the confidence level ``γ`` of :attr:`coverage`.
      coverage: ``β = (1 − γ)^{1/n}``: with confidence ``γ``, at least a fraction ``β`` of
        the starts (drawn as the check draws them) converge linearly with Eq 5.3 holding
        at ``ĉ`` at every step above the floor (see :meth:`summary`).
      rate: the claimed rate, or ``None``.
      local: ``‖∂f/∂w(w*)‖₂`` (:func:`scarjax.bounds.local_contraction`) when asked for
        (``jacobian=True``), else ``None``.
      radii: ``(smallest, largest)`` start distance ``‖w⁽⁰⁾ − w*‖`` of the runs.
      steps: iterations per run.
      name: the algorithm's name.
      rates: ``[n]`` the per-run largest one-step ratios.
      settled: how many runs reached a settled rate (estimate_c's settle test); the
        others were still in a transient that Eq 5.3 with ``ĉ`` covered.
      unmeasured: runs too fast (at the rounding floor within a few steps) or too slow to
        measure a rate on their own; their observed one-step ratios count in ``c``. (When
        no run could be measured the check raises
        :class:`~scarjax.testing.InconclusiveCheck` instead of returning.)
      verdict: ``'held'`` (a returned result; see :data:`scarjax.testing.VERDICTS`).
    """

    c: float
    low: float
    high: float
    n_trials: int
    confidence: float
    coverage: float
    rate: float | None
    local: float | None
    radii: tuple[float, float]
    steps: int
    name: str
    rates: np.ndarray
    settled: int
    unmeasured: int = 0
    verdict: str = "held"

    @property
    def prediction(self) -> float:
        """``n/(n + 1)``: the probability that one more independent start satisfies Eq 5.3
        with ``ĉ`` along its run (exchangeability of ``n + 1`` i.i.d. runs)."""
        return self.n_trials / (self.n_trials + 1)

    def summary(self) -> str:
        lo, hi = self.radii
        s = (
            f"{self.name}: linearly convergent near w*, c = {self.c:.6g} (largest one-step ratio "
            f"d_{{k+1}}/d_k of {self.n_trials} runs ({self.settled} settled) of {self.steps} steps from ‖w⁽⁰⁾ − w*‖ in "
            f"[{lo:.3g}, {hi:.3g}]; fitted rates from {self.low:.6g}). With confidence "
            f"{self.confidence:.3g}, at least {100 * self.coverage:.3g}% of such starts satisfy "
            f"Eq 5.3 with c = {self.c:.6g}; a new start does with probability >= "
            f"{self.prediction:.4g}."
        )
        if self.unmeasured:
            s += (f" {self.unmeasured} run{'s were' if self.unmeasured > 1 else ' was'} too fast or too slow "
                  "to measure on its own (its ratios are included).")
        if self.rate is not None:
            s += f" Claimed rate {self.rate:.6g}: holds (margin {self.rate - self.c:+.3g})."
        if self.local is not None:
            s += f" ‖∂f/∂w(w*)‖₂ = {self.local:.6g}."
        return s


# --------------------------------------------------------------------------------------
# Start points near w*.


def _start_params(algorithm: Algorithm, seed: jax.Array, radius: jax.Array) -> Any:
    """``w* + radius·u`` with ``u`` a standard Gaussian (per entry, from ``seed``)
    normalised to 1 in the algorithm's norm."""
    w = algorithm.optimum
    leaves, treedef = jax.tree.flatten(w)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    g = jax.tree.unflatten(treedef, [jax.random.normal(k, jnp.shape(x), jnp.float32) for k, x in zip(keys, leaves)])
    n = algorithm.norm(g)
    scale = radius / jnp.where(n > 0, n, 1.0)
    return jax.tree.map(lambda a, b: (a + scale * b).astype(jnp.result_type(a)), w, g)


@jax.jit
def _starts(algorithm: Algorithm, seeds: jax.Array, radii: jax.Array) -> tuple[Any, jax.Array]:
    starts = jax.vmap(lambda s, r: _start_params(algorithm, s, r))(seeds, radii)
    return starts, jax.vmap(algorithm.distance)(starts)


def near_start(algorithm: Algorithm, radius: float, seed: int, key: Any) -> State:
    """The initial state of trial ``key`` of :func:`check_linear_convergence`: parameters
    ``w* + radius·u`` (``u`` a random unit direction in the algorithm's norm, drawn from
    ``seed``) and the auxiliary state ``algorithm.init`` gives on that trial's key (the key
    :func:`scarjax.run` itself uses for ``init``). ``run(algorithm, None, steps, key,
    init_state=near_start(algorithm, r, s, key))`` replays a trial."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    if algorithm.optimum is None:
        raise ValueError(f"algorithm {algorithm.name!r} has no optimum: near_start needs w*")
    va.check_real("radius", radius, lo=0.0, scalar=True)
    seed = va.check_int("seed", seed, lo=0, hi=2**32 - 1)
    key = va.check_key("key", key)
    params = _start_params(algorithm, jnp.uint32(seed), jnp.float32(radius))
    aux = State(*algorithm.init(jax.random.split(key, 3)[0], algorithm.data)).aux
    return State(params, aux)


def _start_hook(args: dict) -> hk.Hook:
    """Write hook: at step 0 the stored parameters become ``args['start']`` (one trial's
    start point; the auxiliary state is ``algorithm.init``'s, as in :func:`near_start`)."""

    def apply(state, hstate, ctx):
        params = jax.tree.map(
            lambda s, p: jnp.where(ctx.step == 0, s.astype(p.dtype), p), args["start"], state.params
        )
        return state._replace(params=params), hstate

    return hk.Hook("write", lambda state, key: (), apply, name="start")


# --------------------------------------------------------------------------------------
# The verdict on distances.


def _eps(tree: Any) -> float:
    eps = [float(jnp.finfo(x.dtype).eps) for x in jax.tree.leaves(tree) if jnp.issubdtype(x.dtype, jnp.floating)]
    return max(eps) if eps else float(np.finfo(np.float32).eps)


class _Run(NamedTuple):
    """One run's measurement: its window above the floor, largest and fitted rates."""

    high: float
    low: float
    n_points: int
    floor: float
    settled: bool
    #: ``False`` for a run too fast (it reached the rounding floor within a few steps) or
    #: too slow (it never fell by :data:`MIN_CONTRACTION`) to measure a rate on its own.
    measured: bool = True
    #: for an unmeasured run: ``(title, details, replay)`` of its inconclusive verdict.
    report: Any = None


def _measure(row: np.ndarray, floor: float) -> tuple[_Run | None, str]:
    """:func:`scarjax.bounds.estimate_c` (``'max_ratio'``) on one run; a run whose
    contraction is still slowing (estimate_c's settle test) is measured anyway and marked
    unsettled; ``(None, reason)`` when it has no rate at all (too few points, grew)."""
    try:
        e = bounds.estimate_c(row, method="max_ratio", floor=floor, full_output=True)
        return _Run(e.high, e.low, e.n_points, e.floor, True), ""
    except bounds.NotLinearlyConvergentError as err:
        reason = str(err)
    # The window estimate_c uses: the leading stretch above the floor.
    below = np.flatnonzero(row <= floor)
    n = int(below[0]) if below.size else row.size
    if n < 3:
        return None, reason
    w = row[:n]
    ratios = w[1:] / w[:-1]
    high = float(ratios.max())
    if not high < 1:
        return None, reason
    low = float(np.exp(np.polyfit(np.arange(n, dtype=np.float64), np.log(w), 1)[0]))
    return _Run(high, low, n, floor, False), reason


def _contracted(w: np.ndarray) -> bool:
    return bool(w[0] >= MIN_CONTRACTION * w[-1] * (1 - 1e-9))


def _first_excess(w: np.ndarray, c: float, tol: np.ndarray) -> int | None:
    excess = w[1:] - c * w[:-1] - tol
    return int(np.argmax(excess > 0)) if np.any(excess > 0) else None


def _regrowth(row: np.ndarray, floor: float) -> tuple[int, int] | None:
    """``(j, k)``: the run first reached its rounding floor at step ``j`` and was back above
    it at step ``k > j`` (it diverged after converging); ``None`` if it never came back."""
    below = np.flatnonzero(row <= floor)
    if not below.size:
        return None
    j = int(below[0])
    up = np.flatnonzero(row[j:] > floor)
    return None if not up.size else (j, j + int(up[0]))


def _unmeasured(row: np.ndarray, floor: float) -> str | None:
    """``'fast'``: the distance fell at every step until it reached the rounding floor, but
    by less than :data:`MIN_CONTRACTION` above it (or with fewer than 3 iterations above
    it); ``'slow'``: it never reached the floor and fell by less than
    :data:`MIN_CONTRACTION` over the whole run, at every step; else ``None``."""
    below = np.flatnonzero(row <= floor)
    n = int(below[0]) if below.size else row.size
    w = row[: n + 1]
    if not np.all(w[1:] < w[:-1]):
        return None
    if below.size:
        return "fast" if n < 3 or not _contracted(row[:n]) else None
    return "slow" if not _contracted(row) else None


_ADVICE = {
    "fast": (
        "the contraction is too fast to measure from these starts: start farther from w* (near=R with a "
        "larger R puts more iterations above the floor), compute in float64 (jax.config.update("
        "'jax_enable_x64', True) and float64 parameters: the floor scales with the machine epsilon), or "
        "measure the rate exactly (jacobian=True, bounds.local_contraction)"
    ),
    "slow": (
        "the contraction is too slow to tell a linear rate from sublinear convergence within the run: run "
        "more steps (at least log(100)/log(1/c)), or start farther from w* (near=)"
    ),
}


def _assess(
    d: np.ndarray,
    *,
    rate: float | None,
    scale: np.ndarray,
    eps: float,
    extra_tol: float,
    describe: Callable[[int], dict],
    replay: Callable[[int], str | None],
) -> list[_Run]:
    """The verdict on a batch of runs (rows of ``d``); the first violating run fails.

    Per run: diverged (NaN/inf) → diverged after converging (back above the rounding
    floor after first reaching it: Eq 5.3 must hold along the whole window) → no rate
    (grew, too few points above the floor) → unsettled (its contraction still slowing,
    estimate_c's settle test) → contracted by less than :data:`MIN_CONTRACTION` above the
    floor → claimed rate.
    An unsettled run is a linearly convergent run still in a transient (its slow
    direction nearly absent from the start: the ratio creeps up towards ``c``) or a
    sublinear one (the ratio creeps towards 1); it is accepted when Eq 5.3 held along it
    (up to rounding) with the largest rate ``ĉ`` of the settled runs of the batch (that
    contracted enough), and is a counterexample when no run of the batch settled or it
    exceeds ``ĉ``.
    A run whose distance fell at every step but too fast (it reached the floor within a
    few steps) or too slowly (by less than :data:`MIN_CONTRACTION` over the run) to show a
    rate is *unmeasured* (``measured=False``, with its inconclusive report): it violates
    nothing, and only a claimed ``rate`` is checked along it. The caller decides: a check
    in which no run was measured is inconclusive (:class:`~scarjax.testing.InconclusiveCheck`)."""
    runs: list[_Run | None] = []
    reasons: list[str] = []
    floors: list[float] = []
    for i, row in enumerate(d):
        bad = np.flatnonzero(~np.isfinite(row))
        if bad.size:
            k = int(bad[0])
            fail(
                "not linearly convergent here: the run diverged "
                f"({'NaN' if np.isnan(row[k]) else 'inf'} distance at step {k})",
                {**describe(i), "distances": _head(row)},
                replay(i),
            )
        S = float(scale[i])
        floor = max(1e3 * eps * float(row[0]), FLOOR_ULPS * eps * S, 10.0 * float(bounds.plateau(row)))
        back = _regrowth(row, floor)
        if back is not None:
            j, k = back
            lo = int(np.argmin(row[:k]))
            top = k + int(np.argmax(row[k:]))
            what = (
                "the run diverged after converging (its distance fell below the rounding floor, then grew back "
                "above it and ended the run there"
                if row[-1] > floor
                else "the run grew back above its rounding floor after reaching it (its distance fell below the floor, "
                "then rose above it again"
            )
            fail(
                f"not linearly convergent here: {what}: Eq 5.3 fails for every c < 1)",
                {
                    **describe(i),
                    "converged": f"‖y⁽ᵏ⁾ − w*‖ fell below the floor {floor:.4g} at step {j} (down to {row[lo]:.4g} "
                    f"at step {lo})",
                    "diverged": f"it grew back to {row[k]:.4g} at step {k} (one-step ratio "
                    f"d_{k}/d_{k - 1} = {row[k] / row[k - 1]:.4g}) and to {row[top]:.4g} at step {top}",
                    "reason": "Eq 5.3 must hold at every step of the window, also after the run first reaches "
                    "its floor: a growing step size (a schedule leaving the stable range) or an unstable "
                    "update diverges from near w*",
                    "distances": _head(row),
                },
                replay(i),
            )
        run, reason = _measure(row, floor)
        runs.append(run)
        reasons.append(reason)
        floors.append(floor)
    settled = [
        r.high for r, row in zip(runs, d) if r is not None and r.settled and _contracted(row[: r.n_points])
    ]
    c_settled = max(settled) if settled else None
    out: list[_Run] = []
    for i, (row, run) in enumerate(zip(d, runs)):
        tol_of = lambda w: ROUNDING_ULPS * eps * (float(scale[i]) + w[:-1]) + extra_tol  # noqa: E731
        kind = _unmeasured(row, floors[i])
        if kind is not None and (
            run is None or (not _contracted(row[: run.n_points]) and (run.settled or kind == "fast"))
        ):
            out.append(_unmeasured_run(i, row, floors[i], kind, rate, tol_of, describe, replay))
            continue
        if run is None:
            fail(
                "not linearly convergent here (Eq 5.3 holds with no c < 1 along this run)",
                {**describe(i), "reason": reasons[i], "floor": floors[i], "distances": _head(row)},
                replay(i),
            )
        w = row[: run.n_points]
        if not run.settled:
            k = None if c_settled is None else _first_excess(w, c_settled, tol_of(w))
            if c_settled is None or k is not None:
                why = (
                    f"no run of this batch of {d.shape[0]} settled to a rate"
                    if c_settled is None
                    else f"at step {k} it contracts by {w[k + 1] / w[k]:.6g}, more slowly than "
                    f"every settled run of the batch (largest rate {c_settled:.6g})"
                )
                fail(
                    "not linearly convergent here: the contraction kept slowing down "
                    "(sublinear convergence, or no settled rate above the rounding floor)",
                    {**describe(i), "reason": reasons[i], "and": why, "floor": floors[i],
                     "distances": _head(row)},
                    replay(i),
                )
        if not _contracted(w):
            fail(
                "not linearly convergent here: no measurable convergence within the run",
                {
                    **describe(i),
                    "reason": f"the distance fell only by a factor {w[0] / w[-1]:.4g} over its {run.n_points} "
                    f"iterations above the floor (at least {MIN_CONTRACTION:g} is needed to tell a linear "
                    f"rate from sublinear convergence; largest ratio {run.high:.6g}), and not at every step: "
                    "run more steps, or start farther from w* (near=) if the rounding floor is close to the start",
                    "floor": floors[i],
                    "distances": _head(row),
                },
                replay(i),
            )
        if rate is not None:
            _check_claim(i, w, rate, tol_of(w), run.high, describe, replay)
        out.append(run)
    return out


def _check_claim(i, w, rate, tol, high, describe, replay) -> None:
    k = _first_excess(w, rate, tol)
    if k is not None:
        fail(
            f"Eq 5.3: the claimed rate c = {rate:.6g} is too small",
            {
                **describe(i),
                "step": f"k = {k}: d_k = {w[k]:.6g}, d_(k+1) = {w[k + 1]:.6g}",
                "measured ratio d_(k+1)/d_k": float(w[k + 1] / w[k]),
                "claimed c": rate,
                "rounding tolerance on d_(k+1)": float(tol[k]),
                "largest ratio of this run": high,
            },
            replay(i),
        )


def _unmeasured_run(i, row, floor, kind, rate, tol_of, describe, replay) -> _Run:
    """A run too fast or too slow to measure (see :func:`_unmeasured`): a claimed rate is
    checked along it; its largest one-step ratio above the floor still counts in ``ĉ``."""
    below = np.flatnonzero(row <= floor)
    n = int(below[0]) if below.size else row.size
    w = row[:n]
    ratios = w[1:] / w[:-1] if n >= 2 else np.empty(0)
    high = float(ratios.max()) if ratios.size else math.nan
    if rate is not None and n >= 2:
        _check_claim(i, w, rate, tol_of(w), high, describe, replay)
    if kind == "fast":
        what = (
            f"the distance fell at every step and reached the rounding floor {floor:.4g} at step {n}, with "
            f"{n} iteration{'s' if n != 1 else ''} above it (it fell there by a factor "
            f"{row[0] / row[max(n - 1, 0)]:.4g}; at least {MIN_CONTRACTION:g} with 3 iterations is needed to "
            "measure a rate)"
        )
    else:
        what = (
            f"the distance fell at every step but only by a factor {row[0] / row[-1]:.4g} over the "
            f"{row.size - 1} steps of the run (at least {MIN_CONTRACTION:g} is needed to tell a linear rate "
            "from sublinear convergence)"
        )
    details = {
        **describe(i),
        "measured": what + (f"; largest one-step ratio {high:.6g}" if ratios.size else ""),
        "not a violation": "Eq 5.3 held at every observed step"
        + (f" with c = {high:.6g}" if ratios.size else "")
        + (f" (and with the claimed c = {rate:.6g})" if rate is not None else ""),
        "to measure it": _ADVICE[kind],
        "floor": floor,
        "distances": _head(row),
    }
    title = (
        "INCONCLUSIVE (Eq 5.3 neither held nor violated): "
        + ("the contraction is too fast to measure: every run reached the rounding floor within a few steps"
           if kind == "fast" else "the contraction is too slow to measure within the run")
    )
    low = high
    return _Run(high, low, n, floor, False, False, (title, details, replay(i)))


def _decide(runs: list[_Run]) -> None:
    """No run measured a rate: the check is inconclusive (the first run's report)."""
    if runs and not any(r.measured for r in runs):
        title, details, replay = runs[0].report
        inconclusive(title, {**details, "runs": f"none of the {len(runs)} runs could be measured"}, replay)


def _head(row: np.ndarray, n: int = 6) -> str:
    vals = ", ".join(f"{v:.4g}" for v in row[:n])
    return f"[{vals}{', …' if row.size > n else ''}] ({row.size} values, last {row[-1]:.4g})"


def _coverage(confidence: float, n: int) -> float:
    return float((1.0 - confidence) ** (1.0 / n))


def _result(ests, *, n, confidence, rate, local, radii, steps, name) -> LinearConvergence:
    highs = np.asarray([e.high for e in ests], np.float64)
    c = float(np.nanmax(highs))
    lows = [e.low for e in ests if np.isfinite(e.low)]
    return LinearConvergence(
        c=c,
        low=float(min(lows)) if lows else c,
        high=c,
        n_trials=n,
        confidence=float(confidence),
        coverage=_coverage(confidence, n),
        rate=rate,
        local=local,
        radii=(float(radii[0]), float(radii[1])),
        steps=int(steps),
        name=name,
        rates=highs,
        settled=int(sum(e.settled for e in ests)),
        unmeasured=int(sum(not e.measured for e in ests)),
    )


def _check_rate(rate: Any) -> float | None:
    if rate is None:
        return None
    va.check_real("rate", rate, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
    return float(rate)


def _check_confidence(confidence: Any) -> float:
    va.check_real("confidence", confidence, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
    return float(confidence)


def assert_linear_convergence(
    trace_or_distances: Any,
    *,
    rate: float | None = None,
    scale: float | None = None,
    confidence: float = 0.95,
    eps: float | None = None,
) -> LinearConvergence:
    """Linear convergence (thesis Eq 5.3) of runs you already have, and a claimed rate.

    Args:
      trace_or_distances: a :class:`~scarjax.Trace` of an unperturbed run from ``w⁽⁰⁾``
        (its ``distance``; a leading trial axis for several runs), or distances
        ``‖y⁽ᵏ⁾ − w*‖``, ``[L]`` or ``[runs, L]``.
      rate: a claimed ``c``: every one-step ratio above the rounding floor must satisfy
        ``d_{k+1} ≤ c·d_k`` up to float rounding (:data:`ROUNDING_ULPS` ``·ε·(S + d_k)``).
      scale: ``S``, the size of the iterates (``‖w*‖ + d₀``) for the rounding tolerance and
        floor; default: the run's largest distance (give it when ``‖w*‖`` is much larger
        than the distances).
      confidence: the level of the returned coverage statement (meaningful when the runs
        are independent starts from one distribution).
      eps: the machine epsilon of the parameters (default float32's).

    Raises :class:`~scarjax.testing.CheckFailure` (an ``AssertionError``): "not linearly
    convergent here" (a run that diverged, grew, diverged after converging, stalled above
    the floor or converged sublinearly: :func:`scarjax.bounds.estimate_c` found no rate),
    or "Eq 5.3: the claimed rate c = … is too small" with the step and the measured
    ratio; :class:`~scarjax.testing.InconclusiveCheck` (a ``unittest.SkipTest``) when no
    run could be measured (too fast or too slow, see :func:`check_linear_convergence`).
    Returns a :class:`LinearConvergence` otherwise.
    """
    d = getattr(trace_or_distances, "distance", trace_or_distances)
    if d is None:
        raise ValueError("trace_or_distances: the trace has no distance (the algorithm has no optimum)")
    d = va.check_numeric("trace_or_distances", d)
    if d.ndim == 1:
        d = d[None]
    if d.ndim != 2 or d.shape[1] < 4:
        raise ValueError(f"trace_or_distances must be [L] or [runs, L] distances with L >= 4, got shape {d.shape}")
    if np.any(d < 0):
        raise ValueError("trace_or_distances: distances must be >= 0")
    rate = _check_rate(rate)
    confidence = _check_confidence(confidence)
    eps = float(np.finfo(np.float32).eps) if eps is None else float(va.check_real("eps", eps, lo=0.0, lo_open=True, scalar=True))
    if scale is None:
        # The iterates' size before a run's lowest point (a run that diverges later must not
        # lift its own rounding floor with the distances it diverged to).
        fin = np.where(np.isfinite(d), d, np.nan)
        lowest = np.argmin(np.where(np.isfinite(d), d, np.inf), axis=1)
        upto = np.arange(d.shape[1])[None, :] <= lowest[:, None]
        S = np.nanmax(np.where(upto, fin, np.nan), axis=1)
        S = np.where(np.isfinite(S), S, 0.0)
    else:
        va.check_real("scale", scale, lo=0.0, scalar=True)
        S = np.full(d.shape[0], float(scale))
    ests = _assess(
        d,
        rate=rate,
        scale=S,
        eps=eps,
        extra_tol=0.0,
        describe=lambda i: {"run": i} if d.shape[0] > 1 else {},
        replay=lambda i: None,
    )
    _decide(ests)
    return _result(
        ests, n=d.shape[0], confidence=confidence, rate=rate, local=None,
        radii=(float(d[:, 0].min()), float(d[:, 0].max())), steps=d.shape[1] - 1, name="runs",
    )


# --------------------------------------------------------------------------------------
# The check.


def _check_near(near: Any) -> tuple[float, float] | None:
    if near is None:
        return None
    if isinstance(near, (tuple, list)):
        if len(near) != 2:
            raise ValueError(f"near must be a radius or a pair (smallest, largest), got {near!r}")
        lo = float(va.check_real("near[0]", near[0], lo=0.0, lo_open=True, scalar=True))
        hi = float(va.check_real("near[1]", near[1], lo=0.0, lo_open=True, scalar=True))
        if lo > hi:
            raise ValueError(f"near must be (smallest, largest) radii with smallest <= largest, got {near!r}")
        return lo, hi
    hi = float(va.check_real("near", near, lo=0.0, lo_open=True, scalar=True))
    return hi / 10.0, hi


def _reference_optimum(algorithm: Algorithm, reference_steps: int, seed: int) -> tuple[Any, float]:
    """``w*`` := the final iterate of an unperturbed run, and how far its last step moved."""
    key = jax.random.key(seed)
    final, _ = run(algorithm, None, reference_steps, key)
    nxt, _ = run(algorithm, None, 1, key, init_state=final)
    moved = float(algorithm.norm(jax.tree.map(jnp.subtract, nxt.params, final.params)))
    return final.params, moved


def check_linear_convergence(
    algorithm: Algorithm,
    steps: int,
    *,
    rate: float | None = None,
    trials: int = 8,
    near: float | tuple[float, float] | None = None,
    confidence: float = 0.95,
    seed: int = 0,
    settings: Any = None,
    reference_steps: int | None = None,
    jacobian: bool = False,
) -> LinearConvergence:
    """Linear convergence near the optimum and its rate (thesis Eq 5.3 / 5.5), with a
    confidence statement; with ``rate=``, a claimed rate is checked at every step.

    **What is run.** Each hypothesis example draws a ``seed`` and runs one
    :func:`scarjax.run_trials` batch of ``trials`` unperturbed runs of ``steps``
    iterations; trial ``i`` runs on ``jax.random.fold_in(jax.random.key(seed), i)``
    (:func:`~scarjax.testing.replay_keys`) from ``w⁽⁰⁾ = w* + r·u``: ``u`` a standard
    Gaussian direction normalised in the algorithm's norm, ``r`` log-uniform in ``near``,
    both drawn with ``numpy.random.default_rng(seed)`` (the auxiliary state is
    ``algorithm.init``'s: :func:`near_start`). Per run, :func:`scarjax.bounds.estimate_c`
    (``'max_ratio'``) measures the largest one-step ratio ``d_{k+1}/d_k`` above the
    rounding floor (the larger of its own and :data:`FLOOR_ULPS` ``·ε·(‖w*‖ + r)``).

    **Verdicts** (the first failing run of an example; hypothesis then shrinks the seed):

    * "not linearly convergent here": a run diverged (NaN/inf); it diverged after
      converging (its distance fell below the rounding floor and grew back above it
      later in the window: Eq 5.3 holds at every step or not at all, so the check looks
      at the whole window, not only until a run first reaches its floor); its distance
      grew at some step (Eq 5.3 then fails for every ``c < 1`` in this norm); it had fewer
      than 3 iterations above the floor and did not fall at every step; its contraction kept slowing to the end (estimate_c's
      settle test: sublinear convergence, or a rate not reached within ``steps``) while
      no run of the batch settled or it contracted more slowly than the settled ones (a
      start whose slow direction is nearly absent is still in a transient when it
      reaches the floor: it is accepted when Eq 5.3 held along it with the settled runs'
      rate); or its distance fell by less than :data:`MIN_CONTRACTION` above the floor
      (too few steps to tell a linear rate from sublinear convergence: ``w ← w − 0.1w³``
      near 0 looks geometric with a rate near 1 over a short stretch) and not at every
      step. No ``c`` is returned: any number would be meaningless.
    * "INCONCLUSIVE" (:class:`~scarjax.testing.InconclusiveCheck`, a ``unittest.SkipTest``:
      pytest reports a skip, not a failure) when *no* run of the check could be measured:
      each fell at every step but reached the rounding floor with fewer than 3 iterations
      or less than :data:`MIN_CONTRACTION` above it (a contraction too fast to measure
      from these starts: start farther, ``near=``, or use float64), or never reached it
      and fell by less than :data:`MIN_CONTRACTION` (too slow: run longer). Such runs
      next to measured ones are covered: their ratios count in ``ĉ`` (``unmeasured``).
    * with ``rate=c``: "Eq 5.3: the claimed rate c = … is too small" at the first step
      with ``d_{k+1} > c·d_k`` beyond float rounding (:data:`ROUNDING_ULPS`).

    **Confidence statement** (returned :class:`LinearConvergence`). Let ``C`` be the
    largest one-step ratio of a run (``∞`` for a run without a linear rate) from a start
    drawn as above on a fresh key. The ``n`` runs of the examples with distinct seeds are
    i.i.d. draws of ``C`` (distinct seeds are treated as independent streams; repeated
    seeds are counted once), and ``ĉ = max Cᵢ``. Distribution-free order statistics
    (Wilks): ``P(F(ĉ) ≥ β) = 1 − βⁿ`` for ``F`` the distribution of ``C`` (``≥`` when ``F``
    has atoms), so with confidence ``γ = confidence`` at least a fraction
    ``β = (1 − γ)^{1/n}`` of the starts converge linearly with Eq 5.3 holding with ``ĉ`` at
    every step above the floor (``coverage``); and a new start exceeds ``ĉ`` with
    probability ``≤ 1/(n + 1)`` (``prediction``). With the defaults (10 examples × 8
    trials, ``γ = 0.95``): ``β ≈ 0.963``. It is a statement about runs of ``steps``
    iterations from these starts — the local rate of Eq 5.3 near ``w*``, not a global one.

    Args:
      algorithm: the :class:`~scarjax.Algorithm`; with its ``optimum`` (``w*``), or give
        ``reference_steps``.
      steps: iterations per run (>= 4); long enough for the slow directions to dominate
        and short enough to stay above the rounding floor (``log(floor/r)/log c`` steps).
      rate: a claimed rate ``c`` in (0, 1) to check, or ``None``.
      trials: runs per example (one ``run_trials`` batch).
      near: the start distances ``r``: a radius ``R`` (``r`` log-uniform in
        ``[R/10, R]``) or a pair ``(smallest, largest)``. Default: ``R = ‖w⁽⁰⁾ − w*‖`` of
        the algorithm's own initial point (``algorithm.init`` at ``key(seed)``).
      confidence: the confidence level ``γ`` of the coverage statement, in (0, 1).
      seed: the seed of the reference run and of the default ``near``.
      settings: ``None`` (the cheap default, :data:`~scarjax.testing.DEFAULT_SETTINGS`),
        an int (``max_examples``) or a ``hypothesis.settings``.
      reference_steps: only for an algorithm without an optimum: ``w*`` is then the final
        iterate of an unperturbed run of this many steps from the algorithm's own
        ``w⁽⁰⁾`` (key ``seed``), which must have settled (its next step moves it by at most
        ``1e-5`` of the smallest start distance; meaningful for deterministic
        iterations only). Its error ``e ≤ ‖f(ŵ) − ŵ‖/(1 − c)`` is added (``2e``) to the
        tolerance of a claimed rate. Without an optimum and without this, a
        ``ValueError`` (the check does not guess ``w*``).
      jacobian: also report ``‖∂f/∂w(w*)‖₂`` (:func:`scarjax.bounds.local_contraction`,
        dense Jacobian: small models; the ℓ2 rate of one step at ``w*``).

    Returns:
      :class:`LinearConvergence` (``.summary()`` states the rate and its confidence).

    Raises:
      CheckFailure (``AssertionError``): the counterexample (algorithm, start distance,
        direction seed, trial, seed, the step and the ratio, and a replay snippet).
      TypeError / ValueError naming a bad argument.
    """
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    steps = va.check_int("steps", steps, lo=4)
    rate = _check_rate(rate)
    trials = va.check_int("trials", trials, lo=1)
    radii = _check_near(near)
    confidence = _check_confidence(confidence)
    seed = va.check_int("seed", seed, lo=0, hi=2**31 - 1)
    jacobian = va.check_bool("jacobian", jacobian)
    ref_moved = None
    if algorithm.optimum is None:
        if reference_steps is None:
            raise ValueError(
                f"algorithm {algorithm.name!r} has no optimum: give it one "
                "(algorithm.replace(optimum=w_star)) or reference_steps=N to use the final "
                "iterate of an N-step unperturbed run as w* (deterministic iterations only)"
            )
        reference_steps = va.check_int("reference_steps", reference_steps, lo=1)
        w_star, ref_moved = _reference_optimum(algorithm, reference_steps, seed)
        algorithm = algorithm.replace(optimum=w_star)
    elif reference_steps is not None:
        raise ValueError("reference_steps is only for an algorithm without an optimum (this one has one)")

    if radii is None:
        w0 = State(*algorithm.init(jax.random.key(seed), algorithm.data)).params
        d0 = float(algorithm.distance(w0))
        if not (np.isfinite(d0) and d0 > 0):
            raise ValueError(
                f"near: the algorithm's own w⁽⁰⁾ is at distance {d0} from w*, so the default "
                "start radius is undefined; give near=R"
            )
        radii = (d0 / 10.0, d0)
    if ref_moved is not None and ref_moved > 1e-5 * radii[0]:
        raise ValueError(
            f"reference_steps={reference_steps}: the reference run has not settled (its next "
            f"step moves it by {ref_moved:.3g} > 1e-5 × the smallest start distance "
            f"{radii[0]:.3g}); run it longer or give the optimum"
        )
    extra_tol = 0.0 if ref_moved is None or rate is None else 2.0 * ref_moved / (1.0 - rate)
    eps = _eps(algorithm.optimum)
    w_norm = float(algorithm.norm(algorithm.optimum))
    local = None
    if jacobian:
        try:
            local = bounds.local_contraction(algorithm, jax.random.key(seed))
        except bounds.NotLinearlyConvergentError as e:
            fail(
                "not linearly convergent here: the update map is not a contraction at w*",
                {"algorithm": algorithm.name, "reason": str(e)},
            )

    ests: list[_Run] = []
    starts_seen: list[float] = []
    done: set[int] = set()
    lo, hi = radii

    def body(ex_seed: int) -> None:
        rng = np.random.default_rng(ex_seed)
        r = lo * (hi / lo) ** rng.uniform(size=trials) if hi > lo else np.full(trials, lo)
        dir_seeds = rng.integers(0, 2**31 - 1, size=trials)
        starts, d0 = _starts(algorithm, jnp.asarray(dir_seeds, jnp.uint32), jnp.asarray(r, jnp.float32))

        _, trace = run_trials(algorithm, _start_hook, steps, replay_keys(ex_seed, trials), hook_args={"start": starts})
        d = np.asarray(trace.distance, np.float64).copy()
        d[:, 0] = np.asarray(d0, np.float64)

        def describe(i: int) -> dict:
            return {
                "algorithm": algorithm.name,
                "start": f"‖w⁽⁰⁾ − w*‖ = {r[i]:.6g} along the random direction of seed {int(dir_seeds[i])}",
                "steps": steps,
                "trial": f"{i} of {trials}",
                "seed": ex_seed,
            }

        def replay(i: int) -> str:
            claim = "" if rate is None else f"rate={rate!r}, "
            ref = (
                ""
                if ref_moved is None
                else f"w_star = scarjax.run(algorithm, None, {reference_steps}, jax.random.key({seed}))[0].params\n"
                "algorithm = algorithm.replace(optimum=w_star)\n"
            )
            return (
                ref
                + f"key = jax.random.fold_in(jax.random.key({ex_seed}), {i})\n"
                + f"w0 = sxt.near_start(algorithm, {float(r[i])!r}, {int(dir_seeds[i])}, key)\n"
                + f"_, trace = scarjax.run(algorithm, None, {steps}, key, init_state=w0)\n"
                + f"sxt.assert_linear_convergence(trace, {claim}scale={w_norm + float(r[i])!r})"
            )

        batch = _assess(
            d,
            rate=rate,
            scale=w_norm + np.asarray(d0, np.float64),
            eps=eps,
            extra_tol=extra_tol,
            describe=describe,
            replay=replay,
        )
        if ex_seed not in done:
            done.add(ex_seed)
            ests.extend(batch)
            starts_seen.extend(np.asarray(d0, np.float64).tolist())

    run_property(st.integers(0, 2**31 - 1), body, settings)
    _decide(ests)
    return _result(
        ests, n=len(ests), confidence=confidence, rate=rate, local=local,
        radii=(min(starts_seen), max(starts_seen)), steps=steps, name=algorithm.name,
    )
