"""Does the user's algorithm respect the rework bound of Thm 5.3.1 (and its Appendix B
variants) under arbitrary perturbation sequences?

:func:`check_rework_bound` draws :class:`~scarjax.testing.strategies.PerturbationSequence`
s with hypothesis, replays each batch under one :func:`scarjax.run_trials` call and checks
the statement of the chosen ``variant``; hypothesis shrinks a counterexample to a single
perturbation at one step where one suffices. :func:`assert_rework_bound` is the same check
on runs you already have (inside your own ``@given`` test).

Variants (thesis Sec 5.3 and Appendix B):

``"5.3.1"`` (default) — Thm 5.3.1, Eq 5.6, per trial, in the form that is valid for a
  *measured* baseline (:func:`scarjax.check_rework`): the theorem applied to the run
  restarted at the first perturbation ``s`` (``y⁽ˢ⁾ = w⁽ˢ⁾``: the perturbed and the
  unperturbed run share keys), plus the iterations by which the measured baseline beat
  the theorem's own ``κ(w)`` from ``w⁽ˢ⁾`` (``baseline_slack``, 0 when the baseline is
  tight). A trial fails when its measured rework (Eq 5.4) exceeds ``bound + 1`` (the +1:
  hitting times are integers), when it diverged (a NaN or infinite distance), or when it
  never re-reached ε although the bound says it must have within the run. A trial that never re-reached ε
  and whose bound lies beyond the end of the run cannot be decided: it is counted as
  *inconclusive* (reported, never silently dropped). Pathwise: for deterministic
  algorithms, or stochastic ones for which Eq 5.3/5.5 hold along every path. Each example
  is a batch of 1 to ``trials`` drawn sequences (the batch's other trials run unperturbed,
  so one program serves every batch), each run on its own key and checked against the
  unperturbed run on the same key.

``"B.2"`` — Lemma B.2.1 (Eq B.4, the heart of Appendix B.2's proof of Thm 5.3.1) *in
  expectation*, for stochastic algorithms (Eq 5.5 is a statement about ``E‖·‖``): for
  every ``k ≥ s``, ``E‖y⁽ᵏ⁾ − w*‖ ≤ c^{k−s}(E‖y⁽ˢ⁾ − w*‖ + Σ_{s≤ℓ<k} c^{−(ℓ−s)}‖δ_ℓ‖)``
  (:func:`scarjax.bounds.envelope`, restarted at each trial's first perturbation). By
  Eq B.8–B.9 it implies Thm 5.3.1 for ``E‖y⁽ᵏ⁾ − w*‖ < ε`` at *every* ε, so no ε is
  needed. Each example draws ONE sequence and runs it under ``trials`` keys; the check is
  a statistical test (below).

``"B.1.2"`` — Appendix B.1.2, SGD with a decaying step: the recursion (Eq B.3)
  ``E‖w⁽ᵏ⁺¹⁾ − w*‖² ≤ (1 − α_k) E‖w⁽ᵏ⁾ − w*‖² + α_k² G²``, assumed (as in the
  literature it cites) conditionally on the current iterate, carried through the
  perturbations: with ``U_s = ‖y⁽ˢ⁾ − w*‖²``,

      U_{k+1} = (1 − α_k) (√U_k + ‖δ_k‖)² + α_k² G²,     E‖y⁽ᵏ⁾ − w*‖² ≤ E U_k

  (Minkowski's inequality for ``‖y⁽ᵏ⁾ + δ_k − w*‖``, then B.3; ``U`` is increasing in
  ``U_k``, so the induction goes through). This is what B.3 implies; the thesis's printed
  closed form (:func:`scarjax.bounds.sgd_bound`) adds ``E‖δ‖`` to ``α²G²`` and ``d₀``
  (a distance to squared distances) and drops the gradient noise after the last
  perturbation, and is not a valid bound on ``E‖y⁽ᵏ⁾ − w*‖`` for SGD with gradient
  noise (unperturbed, it claims ``E‖w⁽ᵏ⁾ − w*‖ ≤ a_k d₀``, while noisy SGD with
  ``α_k ∝ 1/k`` only reaches ``O(1/√k)``); it is not what this variant checks. Give
  ``alphas`` (``α_k`` for ``k = 0 … steps − 1``, or a function of ``k``) and ``G``
  (the constant of B.3); ``c`` is not used. Statistical test as for ``"B.2"``.

**The statistical test** (``"B.2"``, ``"B.1.2"``). Per trial ``i`` and iteration ``k``
let ``X_{ik} = D_{ik} − B_{ik}`` (``D = ‖y⁽ᵏ⁾ − w*‖`` and ``B`` the restarted envelope for
``"B.2"``; ``D = ‖y⁽ᵏ⁾ − w*‖²`` and ``B = U_k`` for ``"B.1.2"``). Under the variant's
assumptions ``E X_{ik} ≤ 0`` for every ``k``. The check fails at ``k`` when the one-sided
t-statistic of the ``n`` trials' mean of ``X_{·k}`` minus a float32 tolerance exceeds the
``1 − α/K`` quantile of Student's t with ``n − 1`` degrees of freedom (Bonferroni over the
``K`` iterations checked): the false-alarm rate is at most ``α = false_alarm`` per drawn
sequence (asymptotically, by the central limit theorem; exactly 0 for a deterministic
algorithm, whose trials agree: then any excess beyond the tolerance fails), hence at most
``α·max_examples`` per :func:`check_rework_bound` call. The default budget is
derandomized (the same sequences and keys every run), so a passing suite stays passing.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, NamedTuple, Sequence

import hypothesis
import jax
import numpy as np
from hypothesis import Phase
from hypothesis import strategies as st

from scarjax import validate as va
from scarjax import bounds
from scarjax import rework as rw
from scarjax.core import Algorithm
from scarjax.testing._harness import fail, replay_keys, resolve_settings, run_property
from scarjax.testing._st_perturbations import (
    PerturbationSequence,
    perturbation_sequences,
    sequence_hook,
    stack,
)
from scarjax.trials import run_trials

__all__ = ["VARIANTS", "ReworkBoundResult", "check_rework_bound", "assert_rework_bound"]

#: The statements :func:`check_rework_bound` can check (see the module doc).
VARIANTS = ("5.3.1", "B.2", "B.1.2")

#: Events per sequence the default strategy draws (and the padded length of the hook's
#: arrays, so one program is compiled for every example).
MAX_EVENTS = 4

#: Default trials per example: 5.3.1 checks each trial on its own; the expectation
#: variants average over trials, so they need more.
DEFAULT_TRIALS = {"5.3.1": 8, "B.2": 32, "B.1.2": 32}

_EPS32 = float(np.finfo(np.float32).eps)
_TITLES = {
    "5.3.1": "Thm 5.3.1 (Eq 5.6)",
    "B.2": "Lemma B.2.1 (Eq B.4; Thm 5.3.1 in expectation)",
    "B.1.2": "Appendix B.1.2 (Eq B.3 with perturbations; SGD)",
}


class ReworkBoundResult(NamedTuple):
    """What a passing rework-bound check measured.

    Attributes:
      variant: ``'5.3.1'``, ``'B.2'`` or ``'B.1.2'``.
      trials_checked: trials whose statement was decided (5.3.1: not inconclusive);
        for the expectation variants, every trial of every sequence.
      examples: hypothesis examples (batches) checked.
      worst_margin: 5.3.1: the smallest ``bound + 1 − rework`` over the decided trials
        (iterations; ``>= 0`` when the check passed). B.2 / B.1.2: the smallest relative
        slack of the sample mean, ``(mean bound − mean D)/mean bound`` over the checked
        iterations (negative means the sample mean exceeded the bound there, by less than
        the test can tell from noise).
      margin_unit: ``'iterations'`` or ``'relative'``.
      inconclusive: 5.3.1 trials that never re-reached ε while their bound lies beyond
        the end of the run (run longer, or draw smaller/earlier perturbations).
      c: the rate checked (``None`` for B.1.2).
      false_alarm: the false-alarm rate per sequence of the statistical test (``None``
        for 5.3.1, which has none).
      worst: where the worst margin was (the sequence, the trial).
    """

    variant: str
    trials_checked: int
    examples: int
    worst_margin: float
    margin_unit: str
    inconclusive: int
    c: float | None
    false_alarm: float | None
    worst: str

    def summary(self) -> str:
        """One line: what held, in how many trials, and the worst margin."""
        title = _TITLES[self.variant]
        rate = "" if self.c is None else f"; c = {self.c:.6g}"
        if self.variant == "5.3.1":
            return (
                f"{title}: rework <= bound + 1 in {self.trials_checked} of {self.trials_checked} decided trials "
                f"over {self.examples} examples ({self.inconclusive} inconclusive: never re-converged, bound beyond "
                f"the run){rate}; worst margin {self.worst_margin:.4g} iterations at {self.worst}"
            )
        return (
            f"{title}: held for {self.examples} sequences × {self.trials_checked // max(self.examples, 1)} trials "
            f"(one-sided t-test, false-alarm rate <= {self.false_alarm:g} per sequence){rate}; worst relative "
            f"margin of the sample mean {self.worst_margin:.4g} at {self.worst}"
        )


# --------------------------------------------------------------------------------------
# Argument checks.


def _check_variant(variant: Any) -> str:
    return va.check_choice("variant", variant, VARIANTS)


def _check_c(c: Any, variant: str) -> float | None:
    if variant == "B.1.2":
        if c is not None:
            raise ValueError("c is not used by variant='B.1.2' (its rate is the sequence alphas): pass c=None")
        return None
    if c is None:
        raise ValueError(f"variant={variant!r} needs the linear rate c (Eq 5.3/5.5), in (0, 1)")
    va.check_real("c", c, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
    return float(c)


def _check_alphas(alphas: Any, G: Any, variant: str, steps: int) -> tuple[np.ndarray | None, float | None]:
    if variant != "B.1.2":
        if alphas is not None or G is not None:
            raise ValueError(f"alphas and G belong to variant='B.1.2', not variant={variant!r}")
        return None, None
    if alphas is None or G is None:
        raise ValueError(
            "variant='B.1.2' needs alphas (α_k of Eq B.3, k = 0 … steps − 1) and G (its noise constant)"
        )
    if callable(alphas):
        a = np.asarray(alphas(np.arange(steps)), np.float64)
    else:
        try:
            a = np.asarray(alphas, np.float64)
        except (TypeError, ValueError) as e:
            raise TypeError(f"alphas must be an array of numbers or a function of k, got {alphas!r}") from e
    if a.ndim != 1 or a.shape[0] < steps:
        raise ValueError(
            f"alphas must give α_k for k = 0 … {steps - 1} (at least {steps} values), got shape {a.shape}"
        )
    a = a[:steps]
    if np.any(~np.isfinite(a)) or np.any(a < 0) or np.any(a >= 1):
        raise ValueError("alphas must lie in [0, 1)")
    va.check_real("G", G, lo=0.0, scalar=True)
    return a, float(G)


def _check_false_alarm(false_alarm: Any) -> float:
    va.check_real("false_alarm", false_alarm, lo=0.0, hi=0.5, lo_open=True, hi_open=True, scalar=True)
    return float(false_alarm)


def _on_host(trace: Any) -> Any:
    """A Trace's arrays as NumPy arrays: one transfer, then every measurement is host
    arithmetic (not one dispatch per operation on arrays split over devices)."""
    if hasattr(trace, "distance") and hasattr(trace, "perturbation_norms"):
        return jax.tree.map(np.asarray, trace)
    return trace


def _distances(trace: Any, name: str) -> np.ndarray:
    if not (hasattr(trace, "distance") and hasattr(trace, "perturbation_norms")):
        raise TypeError(f"{name} must be a scarjax Trace (from run or run_trials), got {type(trace).__name__}")
    if trace.distance is None:
        raise ValueError(
            f"{name} has no distances: the rework bounds are statements about ‖y − w*‖; "
            "give the Algorithm its optimum"
        )
    d = np.asarray(trace.distance, np.float64)
    return d


# --------------------------------------------------------------------------------------
# Counterexample text.


def _seq_code(seq: PerturbationSequence) -> str:
    events = "".join(f"sst.{e!r}, " for e in seq.events)
    return f"sst.PerturbationSequence(({events.rstrip(', ')}{',' if len(seq.events) == 1 else ''}))"


def _describe(seq: PerturbationSequence | None, norms: np.ndarray) -> str:
    if seq is not None:
        return seq.describe()
    hit = np.flatnonzero(norms > 0)
    if hit.size == 0:
        return "no perturbation"
    shown = ", ".join(f"step {k}: ‖δ‖ = {norms[k]:.4g}" for k in hit[:6])
    return f"{hit.size} perturbed iterations (from the trace): {shown}{' …' if hit.size > 6 else ''}"


def _largest_ratio(d: np.ndarray, n: np.ndarray, lo: int, hi: int, floor: float) -> tuple[float, int]:
    """The largest one-step ratio ``d_{k+1}/d_k`` over unperturbed steps ``lo <= k < hi``
    with ``d_k`` above ``floor`` (the contraction Eq 5.3/5.5 assume to be ``<= c``), and
    its step (``-1``: none)."""
    best, at = -math.inf, -1
    for k in range(max(lo, 0), min(hi, d.shape[0] - 1)):
        if n[k] == 0 and d[k] > floor and np.isfinite(d[k + 1]) and d[k + 1] / d[k] > best:
            best, at = float(d[k + 1] / d[k]), k
    return best, at


# --------------------------------------------------------------------------------------
# Thm 5.3.1, per trial.


def _baseline_stays(B: np.ndarray, eps: Any, c: float, name: str | None, seed: int | None) -> None:
    """An unperturbed run that reaches ε and ends the run above it again diverged after
    converging: Eq 5.3/5.5 fail along it (a one-step ratio above 1) and Thm 5.3.1 has no
    premise. That is a verdict (:class:`~scarjax.testing.CheckFailure`), not "ε never
    reached, run longer". (A baseline that leaves ε briefly and settles below it again —
    an oscillating transient — is measured as before: its hitting time is the step from
    which it stays below ε.)"""
    B = np.atleast_2d(np.asarray(B, np.float64))
    e = np.broadcast_to(np.asarray(eps, np.float64), (B.shape[0],))
    for i in range(B.shape[0]):
        row = B[i]
        hit = np.flatnonzero(row < e[i])
        if not hit.size:
            continue
        j = int(hit[0])
        back = np.flatnonzero(~(row[j:] < e[i]))  # at or above ε again (or non-finite)
        if not back.size or row[-1] < e[i]:
            continue
        k = j + int(back[0])
        fin = np.where(np.isfinite(row), row, np.inf)
        top = k + int(np.argmax(fin[k:]))
        replay = None
        if seed is not None:
            replay = (
                f"key = jax.random.fold_in(jax.random.key({int(seed)}), {i})\n"
                f"_, base = scarjax.run(algorithm, None, {row.size - 1}, key)\n"
                f"sxt.assert_rework_bound(base, base, {c!r}, eps={float(e[i])!r})"
            )
        fail(
            "Thm 5.3.1: the unperturbed run diverges after reaching ε (Eq 5.3/5.5 fail along it: no rework "
            "bound applies)",
            {
                "algorithm": name or "(not given)",
                "ε": float(e[i]),
                "reached ε": f"‖w⁽ᵏ⁾ − w*‖ = {row[j]:.4g} < ε at step {j} (lowest {np.nanmin(row):.4g} at step "
                f"{int(np.nanargmin(row))})",
                "then diverged": f"back to {row[k]:.4g} ≥ ε at step {k} (one-step ratio {row[k] / row[k - 1]:.4g}; Eq 5.3/5.5 "
                f"assume <= c = {c:.6g}), {fin[top]:.4g} at step {top}",
                "trial": i,
                "seed": seed if seed is not None else "(not given)",
                "verdict": "the unperturbed algorithm is not linearly convergent with this c over the run (e.g. "
                "a step-size schedule that leaves the stable range): check_linear_convergence(algorithm, "
                f"{row.size - 1}) shows where",
            },
            replay,
        )


def _assert_531(trace, baseline_trace, c, eps, converge_at, sequences, seed, name, floor):
    dist = _distances(trace, "trace")
    single = dist.ndim == 1
    if single and sequences is not None and len(sequences) != 1:
        raise ValueError(f"sequences: one run was given, but {len(sequences)} sequences")
    if eps is not None:
        _baseline_stays(getattr(baseline_trace, "distance", baseline_trace), eps, c, name, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rw.NoiseFloorWarning)  # a check warns once, up front
        chk = rw.check_rework(trace, baseline_trace, c, eps=eps, converge_at=converge_at, floor=floor)
    rework = np.atleast_1d(chk.rework)
    bound = np.atleast_1d(chk.bound)
    start = np.atleast_1d(chk.start)
    held = np.atleast_1d(chk.held)
    D = np.atleast_2d(dist)
    N = np.atleast_2d(np.asarray(trace.perturbation_norms(), np.float64))
    B = np.atleast_2d(np.asarray(getattr(baseline_trace, "distance", baseline_trace), np.float64))
    B = np.broadcast_to(B, D.shape)
    n = D.shape[0]
    if sequences is not None and len(sequences) != n:
        raise ValueError(f"sequences: {len(sequences)} given for {n} trials")
    steps = D.shape[1] - 1
    e = np.broadcast_to(np.asarray(chk.eps, np.float64), (n,))
    kappa_w = rw.iterations_to(B, e)
    blown = ~np.isfinite(D) | ~np.isfinite(N)
    diverged = blown.any(axis=1)
    censored = ~np.isfinite(rework) & ~diverged
    # A censored trial contradicts the theorem only if it had to re-converge within the run.
    decided_censored = censored & (kappa_w + bound < steps)
    inconclusive = censored & ~decided_censored
    bad = ~held & ~inconclusive
    with np.errstate(invalid="ignore"):
        margin = np.where(np.isfinite(rework), bound + 1.0 - rework, np.nan)
    if bad.any():
        i = int(np.argmax(bad))
        seq = None if sequences is None else sequences[i]
        s = int(start[i])
        details = {"algorithm": name or "(not given)", "perturbation": _describe(seq, N[i])}
        thm, slack = float(np.atleast_1d(chk.thm_bound)[i]), float(np.atleast_1d(chk.baseline_slack)[i])
        if diverged[i]:
            k = int(np.argmax(blown[i]))
            # The bound from the perturbations before the blow-up (the hook's later norms are NaN).
            delta = bounds.delta_T(N[i, s:k], c) if k > s else 0.0
            thm = float(bounds.rework_bound(delta, D[i, s], c)) if D[i, s] > 0 else math.inf
            title = (
                f"Thm 5.3.1: the perturbed run diverged (non-finite at step {k}); the bound says it re-converges "
                f"within {thm + slack:.4g} + 1 iterations"
            )
        elif censored[i]:
            title = "Thm 5.3.1: the perturbed run never re-converged, though the bound says it must within the run"
        else:
            title = "Thm 5.3.1: rework exceeds the bound"
        details["first perturbation at step"] = s
        details["measured rework (Eq 5.4)"] = (
            f"{rework[i]:.6g} iterations (the perturbed run is ε-optimal from step "
            f"{rework[i] + kappa_w[i]:.6g}, the unperturbed one from step {kappa_w[i]:.6g})"
            if np.isfinite(rework[i]) else f"inf (still above ε at step {steps}, the end of the run)"
        )
        details["bound"] = (
            f"{thm + slack:.6g} iterations (+1 for integer hitting times) = Thm 5.3.1 restarted at step {s}: "
            f"{thm:.6g} + baseline slack {slack:.6g}"
        )
        details["c"] = c
        details["ε"] = float(e[i])
        if not diverged[i]:
            fl = 1e-2 * float(e[i])
            hi = steps if not np.isfinite(rework[i]) else int(rework[i] + kappa_w[i])
            r_y, k_y = _largest_ratio(D[i], N[i], s, hi, fl)
            r_w, k_w = _largest_ratio(B[i], np.zeros_like(B[i]), 0, int(kappa_w[i]), fl)
            if k_y >= 0:
                details["perturbed run's slowest step"] = (
                    f"‖y⁽ᵏ⁺¹⁾ − w*‖/‖y⁽ᵏ⁾ − w*‖ = {r_y:.6g} at step {k_y} (Eq 5.3/5.5 assume <= c)"
                )
            if k_w >= 0:
                details["baseline's slowest step"] = f"{r_w:.6g} at step {k_w}"
        details["trial"] = i
        details["seed"] = seed if seed is not None else "(not given)"
        details["verdict"] = (
            "Eq 5.3/5.5 do not hold with this c for this run: c is too small, or the perturbation took "
            "the run where the algorithm contracts slower than c (a perturbation too large for the "
            "theorem's assumptions)"
        )
        replay = None
        if seq is not None and seed is not None:
            replay = (
                f"key = jax.random.fold_in(jax.random.key({int(seed)}), {i})\n"
                f"_, trace = scarjax.run(algorithm, {_seq_code(seq)}.hook(), {steps}, key)\n"
                f"_, base = scarjax.run(algorithm, None, {steps}, key)\n"
                f"sxt.assert_rework_bound(trace, base, {c!r}, eps={float(e[i])!r})"
            )
        fail(title, details, replay)
    decided = ~inconclusive  # every decided trial held (else we failed above): finite margins
    if decided.any():
        j = int(np.argmin(np.where(decided, margin, np.inf)))
        seq = None if sequences is None else sequences[j]
        worst, wm = f"trial {j} ({_describe(seq, N[j])})", float(margin[j])
    else:
        worst, wm = "no decided trial", float("inf")
    return ReworkBoundResult("5.3.1", int(decided.sum()), 1, wm, "iterations", int(inconclusive.sum()), c, None, worst)


# --------------------------------------------------------------------------------------
# B.2 and B.1.2: statements about expectations, tested over trials.


def _b2_bound(D: np.ndarray, N: np.ndarray, c: float) -> np.ndarray:
    """Lemma B.2.1 restarted at each trial's first perturbation: ``bounds.envelope``
    of the norms from ``s`` on, from ``d_s``."""
    n, L = D.shape
    s = np.argmax(N[:, : L - 1] > 0, axis=1)
    shifted = np.zeros((n, L - 1))
    for i in range(n):
        shifted[i, : L - 1 - s[i]] = N[i, s[i] : L - 1]
    d_s = D[np.arange(n), s]
    env = bounds.envelope(shifted, np.maximum(d_s, np.finfo(np.float64).tiny), c)
    out = D.copy()
    for i in range(n):
        out[i, s[i] :] = env[i, : L - s[i]]
    return out


def _b12_bound(D2: np.ndarray, N: np.ndarray, alphas: np.ndarray, G: float) -> np.ndarray:
    """Per trial, ``U_{k+1} = (1 − α_k)(√U_k + ‖δ_k‖)² + α_k² G²`` from ``U_s = ‖y⁽ˢ⁾ − w*‖²``
    at its first perturbation ``s`` (``U_k = D2_k`` before it; ``s = 0`` when unperturbed)."""
    n, L = D2.shape
    s = np.argmax(N[:, : L - 1] > 0, axis=1)
    out = D2.copy()
    U = D2[np.arange(n), s]
    for k in range(int(s.min()), L - 1):
        live = k >= s
        U = np.where(k == s, D2[:, k], U)
        U = np.where(live, (1.0 - alphas[k]) * (np.sqrt(U) + N[:, k]) ** 2 + alphas[k] ** 2 * G**2, U)
        out[live, k + 1] = U[live]
    return out


def _t_quantile(p: float, dof: int) -> float:
    # scipy's submodules are slow to import and needed only here
    from scipy.stats import t as student_t

    return float(student_t.ppf(p, dof))


def _assert_expectation(trace, variant, c, alphas, G, sequences, seed, name, false_alarm, atol, baseline_trace):
    dist = _distances(trace, "trace")
    if dist.ndim != 2 or dist.shape[0] < 2:
        raise ValueError(
            f"variant={variant!r} is a statement about expectations: trace must hold >= 2 trials "
            f"(a leading trial axis, from run_trials), got distances of shape {dist.shape}"
        )
    n, L = dist.shape
    steps = L - 1
    if sequences is not None and len(sequences) != n:
        raise ValueError(f"sequences: {len(sequences)} given for {n} trials")
    N = np.asarray(trace.perturbation_norms(), np.float64)
    blown = ~np.isfinite(dist) | ~np.isfinite(N)
    if blown.any():
        i = int(np.argmax(blown.any(axis=1)))
        k = int(np.argmax(blown[i]))
        seq = None if sequences is None else sequences[i]
        fail(
            f"{_TITLES[variant]}: a perturbed run diverged (non-finite at step {k}): its expectation is not bounded",
            {"algorithm": name or "(not given)", "perturbation": _describe(seq, N[i]), "trial": i,
             "seed": seed if seed is not None else "(not given)"},
            _replay_expectation(variant, sequences, seed, n, steps, c, G, alphas),
        )
    if atol is None:
        ref = dist if baseline_trace is None else np.atleast_2d(_distances(baseline_trace, "baseline_trace"))
        atol = max(10.0 * float(np.max(bounds.plateau(ref))), 1e3 * _EPS32 * float(np.max(dist[:, 0])))
    else:
        va.check_real("atol", atol, lo=0.0, scalar=True)
        atol = float(atol)
    if variant == "B.2":
        D, Bnd = dist, _b2_bound(dist, N, c)
        tol = 1e-4 * Bnd + atol
    else:
        D = dist**2
        if alphas.shape[0] < steps:
            raise ValueError(f"alphas must give α_k for k = 0 … {steps - 1}, got {alphas.shape[0]} values")
        Bnd = _b12_bound(D, N, alphas, G)
        tol = 1e-4 * Bnd + 2.0 * atol * np.sqrt(Bnd) + atol**2
    X = D - Bnd
    s = np.argmax(N[:, : L - 1] > 0, axis=1)
    first = int(s.min()) + 1
    ks = np.arange(first, L)
    K = max(ks.size, 1)
    mean = X.mean(axis=0)
    se = X.std(axis=0, ddof=1) / math.sqrt(n)
    q = _t_quantile(1.0 - false_alarm / K, n - 1)
    excess = mean - tol.mean(axis=0)
    reject = (excess > q * se) & (np.arange(L) >= first)
    mean_b = Bnd.mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(mean_b > 0, (mean_b - D.mean(axis=0)) / mean_b, np.inf)
    if reject.any():
        k = int(np.argmax(reject))
        i0 = 0
        seq = None if sequences is None else sequences[i0]
        what = "E‖y⁽ᵏ⁾ − w*‖" if variant == "B.2" else "E‖y⁽ᵏ⁾ − w*‖²"
        if variant == "B.2":
            formula = "c^{k−s}(E‖y⁽ˢ⁾ − w*‖ + Σ_{s≤ℓ<k} c^{−(ℓ−s)}‖δ_ℓ‖)"
        else:
            formula = "E U_k, U_{k+1} = (1 − α_k)(√U_k + ‖δ_k‖)² + α_k²G², U_s = ‖y⁽ˢ⁾ − w*‖²"
        t = excess[k] / se[k] if se[k] > 0 else float("inf")
        details = {
            "algorithm": name or "(not given)",
            "perturbation": _describe(seq, N[i0])
            + ("" if sequences is None or all(x == seq for x in sequences) else " (trial 0's; they differ)"),
            "first perturbation at step": int(s.min()),
            "at step": k,
            f"measured {what}": (
                f"{D[:, k].mean():.6g} ± {D[:, k].std(ddof=1) / math.sqrt(n):.3g} (mean ± s.e. over {n} trials)"
            ),
            "bound": f"{mean_b[k]:.6g} = {formula}" + (f" with c = {c:.6g}" if c is not None else f", G = {G:.6g}"),
            "t-statistic": (
                f"{t:.4g} > {q:.4g} (one-sided, false-alarm rate {false_alarm:g} per sequence, Bonferroni over {K} "
                f"steps; float32 tolerance {tol[:, k].mean():.3g})"
                if np.isfinite(t)
                else f"inf (the trials agree: a deterministic excess of {excess[k]:.3g} beyond the float32 tolerance)"
            ),
            "trials": n,
            "seed": seed if seed is not None else "(not given)",
            "verdict": (
                "Eq 5.5 does not hold in expectation with this c for these runs (c too small, or the perturbation "
                "took the runs where they contract slower than c)"
                if variant == "B.2" else
                "Eq B.3 does not hold with these alphas and G for these runs (alphas too large, G too small, or the "
                "perturbation took the runs where they contract slower)"
            ),
        }
        fail(f"{_TITLES[variant]}: {what} exceeds the bound", details,
             _replay_expectation(variant, sequences, seed, n, steps, c, G, alphas))
    # The margin where the bound is resolved (10× above the float32 tolerance).
    ks = ks[mean_b[ks] > 10.0 * tol.mean(axis=0)[ks]]
    seq = None if sequences is None else sequences[0]
    if ks.size:
        j = int(ks[np.argmin(rel[ks])])
        worst, wm = f"step {j} ({_describe(seq, N[0])})", float(rel[j])
    else:
        worst, wm = f"no step above the float32 tolerance ({_describe(seq, N[0])})", float("inf")
    return ReworkBoundResult(variant, n, 1, wm, "relative", 0, c, false_alarm, worst)


@st.composite
def _batches(draw: Any, sequences: Any, n: int) -> list:
    """Between 1 and ``n`` sequences (the rest of a batch's ``n`` trials run unperturbed,
    bound 0: one program for every batch). Each further sequence is drawn with probability
    ~31/32 (``st.lists`` would average ~6), and hypothesis shrinks a failing batch by
    deleting sequences (each is its own span of choices) down to the failing one alone,
    then that sequence to one event — where a fixed-size batch shrinks poorly."""
    out = [draw(sequences)]
    while len(out) < n and draw(st.integers(0, 31)) != 0:
        out.append(draw(sequences))
    return out


def _merged(seq: PerturbationSequence) -> PerturbationSequence:
    """The same perturbation with fewer events: events at one step along the same unit
    vector add (their sizes sum) — every adversarial event of a step (``y − w*`` does not
    depend on the seed), and random events with the same seed and sparsity. A drawn pair
    ``(step 0, 1.8, seed 0)`` twice is reported as the one event ``(step 0, 3.6, seed 0)``
    it is, where hypothesis cannot shrink one away without enlarging the other."""
    out: dict = {}
    for e in seq.events:
        k = (e.step, "adversarial") if e.direction == "adversarial" else (e.step, "random", e.sparsity, e.seed)
        out[k] = out[k]._replace(size=out[k].size + e.size) if k in out else e
    return seq if len(out) == len(seq.events) else PerturbationSequence(tuple(out.values()))


def _padded(m: int) -> int:
    """The hook's padded event count for sequences of up to ``m`` events: MAX_EVENTS, or
    the next power of two (few distinct programs)."""
    return MAX_EVENTS if m <= MAX_EVENTS else 1 << (m - 1).bit_length()


def _replay_expectation(variant, sequences, seed, n, steps, c, G=None, alphas=None):
    if sequences is None or seed is None or any(x != sequences[0] for x in sequences):
        return None
    extra = f"{c!r}" if variant == "B.2" else f"None, alphas=alphas, G={G!r}"
    return (
        ("" if variant != "B.1.2" else f"alphas = np.array({np.asarray(alphas, np.float64).tolist()!r})\n")
        + f"seq = {_seq_code(sequences[0])}\n"
        f"_, trace = scarjax.run_trials(algorithm, sst.sequence_hook, {steps}, sxt.replay_keys({int(seed)}, {n}),\n"
        f"                              hook_args=sst.stack([seq] * {n}, {_padded(len(sequences[0].events))}))\n"
        f"sxt.assert_rework_bound(trace, None, {extra}, variant={variant!r}, sequences=[seq] * {n}, seed={int(seed)})"
    )


# --------------------------------------------------------------------------------------
# The public API.


def _settings(settings: Any) -> hypothesis.settings:
    """:func:`resolve_settings` without hypothesis's explain phase: it re-runs a failing
    example ~150 times (here each a batch of runs) only to annotate which drawn values
    matter, which the counterexample message already says."""
    s = resolve_settings(settings)
    return hypothesis.settings(s, phases=[p for p in s.phases if p is not Phase.explain])


def assert_rework_bound(
    trace: Any,
    baseline_trace: Any,
    c: float | None,
    *,
    eps: Any = None,
    converge_at: int | None = None,
    variant: str = "5.3.1",
    sequences: Sequence[PerturbationSequence] | None = None,
    seed: int | None = None,
    alphas: Any = None,
    G: float | None = None,
    false_alarm: float = 1e-3,
    atol: float | None = None,
    floor: Any = None,
    name: str | None = None,
) -> ReworkBoundResult:
    """Check Thm 5.3.1 (or a variant, see the module doc) on runs you already have.

    Args:
      trace: the perturbed run(s): a :class:`~scarjax.Trace` with distances (the
        algorithm has an optimum), with a leading trial axis from
        :func:`scarjax.run_trials` (required for ``'B.2'``/``'B.1.2'``: ``>= 2`` trials).
      baseline_trace: ``'5.3.1'``: the unperturbed run with the same key(s) (one run, or
        one per trial). ``'B.2'``/``'B.1.2'``: not needed (``None``); if given, its
        stalling level sets the float32 tolerance.
      c: the linear rate of Eq 5.3/5.5 (``None`` for ``'B.1.2'``).
      eps, converge_at: ``'5.3.1'`` only: ε, or the iteration at which the baseline
        should reach it (:func:`scarjax.calibrate_eps`); exactly one.
      variant: ``'5.3.1'`` (default), ``'B.2'`` or ``'B.1.2'``.
      sequences: the :class:`~scarjax.testing.strategies.PerturbationSequence` of each
        trial (for the counterexample's words and its replay line).
      seed: the seed of the trials' keys (``replay_keys(seed, n)``), for the replay line.
      alphas, G: ``'B.1.2'`` only: ``α_k`` (``k = 0 … steps − 1``, an array or a function
        of ``k``) and ``G`` of Eq B.3.
      false_alarm: ``'B.2'``/``'B.1.2'``: the false-alarm rate of the test (default 1e-3).
      atol: ``'B.2'``/``'B.1.2'``: absolute float32 tolerance on distances (default: 10×
        the level at which the runs stall, at least ``1e3·eps32·d₀``).
      floor: ``'5.3.1'``: the noise floor for ε (:func:`scarjax.check_rework`).
      name: the algorithm's name, for the message.

    Returns:
      a :class:`ReworkBoundResult` (``examples=1``).

    Raises:
      CheckFailure: (an ``AssertionError``) with the counterexample: the first failing
        trial (5.3.1) or the first significantly violated step (B.2, B.1.2).
      ValueError / TypeError: naming a bad argument.
    """
    variant = _check_variant(variant)
    c = _check_c(c, variant)
    trace, baseline_trace = _on_host(trace), _on_host(baseline_trace)
    if sequences is not None:
        sequences = list(sequences)
        for x in sequences:
            if not isinstance(x, PerturbationSequence):
                raise TypeError(f"sequences must hold PerturbationSequence objects, got {type(x).__name__}")
    if seed is not None:
        seed = va.check_int("seed", seed, lo=0)
    if name is not None:
        va.check_str("name", name)
    if variant == "5.3.1":
        if alphas is not None or G is not None:
            raise ValueError("alphas and G belong to variant='B.1.2', not variant='5.3.1'")
        if baseline_trace is None:
            raise ValueError("variant='5.3.1' needs baseline_trace: the unperturbed run(s) with the same key(s)")
        return _assert_531(trace, baseline_trace, c, eps, converge_at, sequences, seed, name, floor)
    if eps is not None or converge_at is not None:
        raise ValueError(
            f"variant={variant!r} checks the bound at every step (hence for every ε): eps and converge_at are not used"
        )
    steps = _distances(trace, "trace").shape[-1] - 1
    a, G = _check_alphas(alphas, G, variant, steps)
    false_alarm = _check_false_alarm(false_alarm)
    return _assert_expectation(trace, variant, c, a, G, sequences, seed, name, false_alarm, atol, baseline_trace)


def _default_converge_at(base: np.ndarray, steps: int) -> int:
    """The iteration where the baseline has gained a factor 1e3 (well above the float32
    floor), at most a third of the run (room to re-converge after a late perturbation)."""
    m = base.mean(axis=0)
    below = np.flatnonzero(m <= 1e-3 * m[0])
    k = int(below[0]) if below.size else steps
    return max(1, min(k, steps // 3))


def check_rework_bound(
    algorithm: Algorithm,
    c: float | None,
    steps: int,
    *,
    converge_at: int | None = None,
    eps: float | None = None,
    perturbations: Any = None,
    variant: str = "5.3.1",
    trials: int | None = None,
    seed: int = 0,
    settings: Any = None,
    alphas: Any = None,
    G: float | None = None,
    false_alarm: float = 1e-3,
) -> ReworkBoundResult:
    """Property-test Thm 5.3.1 (or its B.2 / B.1.2 variant) for ``algorithm`` under
    perturbation sequences drawn by hypothesis.

    Each hypothesis example is ONE :func:`scarjax.run_trials` call of ``steps``
    iterations over ``trials`` keys ``replay_keys(seed, trials)`` (trial ``i``:
    ``jax.random.fold_in(jax.random.key(seed), i)``), each trial replaying a
    :class:`~scarjax.testing.strategies.PerturbationSequence` through
    :func:`~scarjax.testing.strategies.sequence_hook` (padded to a fixed number of events,
    so the program compiles once). ``'5.3.1'``: a batch of ``trials`` sequences, each
    checked against the unperturbed run with the same key (computed once: the keys are
    fixed). ``'B.2'``/``'B.1.2'``: one sequence under ``trials`` keys, tested in
    expectation. See the module doc for the statements and the test.

    Args:
      algorithm: the :class:`~scarjax.Algorithm`; it needs its ``optimum`` (the bounds
        are about ``‖y − w*‖``).
      c: its linear rate (Eq 5.3/5.5; ``None`` for ``'B.1.2'``).
      steps: iterations per run: long enough for a perturbed run to re-converge.
      converge_at: the iteration by which the baseline reaches ε (5.3.1; ε is calibrated
        per trial, :func:`scarjax.calibrate_eps`), and the last step the default strategy
        perturbs. Default: where the baseline has gained a factor 1e3, at most
        ``steps // 3``.
      eps: ε instead of ``converge_at`` (5.3.1 only).
      perturbations: a hypothesis strategy of ``PerturbationSequence``. Default:
        ``sst.perturbation_sequences(max_step=converge_at, max_events=4)`` with sizes
        ``‖δ‖ ∈ [1e-3, 3]·d₀`` (``d₀`` the baseline's initial distance), random or
        adversarial (away from ``w*``), dense.
      variant: ``'5.3.1'`` (default), ``'B.2'`` or ``'B.1.2'``.
      trials: trials per example (default 8 for 5.3.1, 32 for the expectation variants).
      seed: the keys' seed (in every counterexample's replay line).
      settings: ``None`` (:data:`~scarjax.testing.DEFAULT_SETTINGS`: 10 examples,
        derandomized), an int (max_examples) or a ``hypothesis.settings``.
      alphas, G: ``'B.1.2'``: ``α_k`` and ``G`` of Eq B.3 (see the module doc).
      false_alarm: ``'B.2'``/``'B.1.2'``: false-alarm rate per drawn sequence.

    Returns:
      a :class:`ReworkBoundResult` (worst margin, trials checked, ``.summary()``).

    Raises:
      CheckFailure: (an ``AssertionError``) the minimal counterexample found: the
        perturbation sequence in words, its first step, measured rework (or mean
        distance) vs the bound, c, ε, the trial and seed, and a replay snippet.
      ValueError / TypeError: naming a bad argument (also: ε cannot be calibrated at
        ``converge_at``, or no trial could be decided because ``steps`` is too short).
    """
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    if algorithm.optimum is None:
        raise ValueError(
            f"algorithm {algorithm.name!r} has no optimum: the rework bounds are statements about ‖y − w*‖; "
            "give it one (Algorithm.replace(optimum=w_star))"
        )
    variant = _check_variant(variant)
    c = _check_c(c, variant)
    steps = va.check_int("steps", steps, lo=2)
    n = DEFAULT_TRIALS[variant] if trials is None else va.check_int("trials", trials, lo=1 if variant == "5.3.1" else 2)
    seed = va.check_int("seed", seed, lo=0)
    a, G = _check_alphas(alphas, G, variant, steps)
    false_alarm = _check_false_alarm(false_alarm)
    budget = _settings(settings)  # a bad settings is refused before anything runs
    if perturbations is not None and not isinstance(perturbations, st.SearchStrategy):
        raise TypeError(
            f"perturbations must be a hypothesis strategy of PerturbationSequence, got {type(perturbations).__name__}"
        )
    if converge_at is not None:
        converge_at = va.check_int("converge_at", converge_at, lo=1, hi=steps - 1)
    if eps is not None:
        if variant != "5.3.1":
            raise ValueError(f"eps is not used by variant={variant!r} (it checks every step, hence every ε)")
        if converge_at is not None:
            raise ValueError("give at most one of eps and converge_at")
        va.check_real("eps", eps, lo=0.0, lo_open=True, scalar=True)

    keys = replay_keys(seed, n)
    empty = stack([PerturbationSequence(())] * n, MAX_EVENTS)

    def run(args):
        return _on_host(run_trials(algorithm, sequence_hook, steps, keys, hook_args=args, chunk_size=n)[1])

    base = run(empty)
    bd = np.atleast_2d(_distances(base, "the baseline run"))
    if not np.isfinite(bd).all():
        raise ValueError(
            f"the unperturbed runs of {algorithm.name!r} diverge (non-finite distances): lower the step size"
        )
    d0 = float(bd[:, 0].mean())
    if not d0 > 0:
        raise ValueError(f"the algorithm starts at its optimum (‖w⁽⁰⁾ − w*‖ = {d0}): nothing to re-converge to")
    eps_arr = None
    if variant == "5.3.1":
        if eps is None:
            ca = converge_at if converge_at is not None else _default_converge_at(bd, steps)
            try:
                eps_arr = rw.calibrate_eps(bd, ca, metric="distance")
            except ValueError as e:
                raise ValueError(f"check_rework_bound: cannot calibrate ε at converge_at={ca}: {e}") from None
            window = ca
            _baseline_stays(bd, eps_arr, c, algorithm.name, seed)
        else:
            eps_arr = float(eps)
            _baseline_stays(bd, eps_arr, c, algorithm.name, seed)
            kw = rw.iterations_to(bd, eps_arr)
            if not np.all(np.isfinite(kw)):
                raise ValueError(f"eps={eps!r}: the unperturbed runs never reach it within steps={steps}")
            window = int(max(1, kw.max()))
            rw.check_rework(base, base, c, eps=eps_arr)  # ε vs the noise floor: refused or warned once, here
    else:
        window = converge_at if converge_at is not None else _default_converge_at(bd, steps)
    if perturbations is None:
        perturbations = perturbation_sequences(
            max_step=window, max_events=MAX_EVENTS, sizes=st.floats(1e-3, 3.0).map(lambda x: x * d0)
        )
    scale = float(np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in jax.tree.leaves(algorithm.optimum))))
    atol = max(10.0 * float(np.max(bounds.plateau(bd))), 1e3 * _EPS32 * max(d0, scale))

    def drawn(seqs):
        for x in seqs:
            if not isinstance(x, PerturbationSequence):
                raise TypeError(f"perturbations must draw PerturbationSequence objects, got {type(x).__name__}")
        return [_merged(x) for x in seqs]

    def events(seqs):
        return _padded(max(len(x.events) for x in seqs))

    results: list[ReworkBoundResult] = []

    if variant == "5.3.1":
        strategy = _batches(perturbations, n)
        none = PerturbationSequence(())

        def body(seqs):
            batch = drawn(seqs) + [none] * (n - len(seqs))
            tr = run(stack(batch, events(batch)))
            r = _assert_531(tr, base, c, eps_arr, None, batch, seed, algorithm.name, None)
            results.append(r._replace(trials_checked=r.trials_checked - (n - len(seqs))))
    else:
        strategy = perturbations

        def body(seq):
            (seq,) = drawn([seq])
            tr = run(stack([seq] * n, events([seq])))
            results.append(
                _assert_expectation(tr, variant, c, a, G, [seq] * n, seed, algorithm.name, false_alarm, atol, base)
            )

    run_property(strategy, body, budget)
    decided = sum(r.trials_checked for r in results)
    if decided == 0:
        raise ValueError(
            f"check_rework_bound: no trial could be decided: every perturbed run was still above ε at step {steps} "
            "while its bound lies beyond the run; increase steps or use smaller/earlier perturbations"
        )
    worst = min(results, key=lambda r: r.worst_margin)
    return ReworkBoundResult(
        variant,
        decided,
        len(results),
        worst.worst_margin,
        worst.margin_unit,
        sum(r.inconclusive for r in results),
        c,
        None if variant == "5.3.1" else false_alarm,
        worst.worst,
    )
