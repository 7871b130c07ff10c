"""The linear-convergence check (thesis Eq 5.3): it measures the exact rate of the
quadratic test beds, accepts their exact rate as a claim, and catches planted violations
(a claimed rate that is too small, a sublinear iteration, a non-contraction, a run that
diverges) with a readable, replayable counterexample."""

import re

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies as st

import scarjax
from scarjax import testing as sxt
from scarjax.testing import strategies as sst

# Failing checks: skip hypothesis's explain phase (it re-runs ~100 examples under a tracer
# to say which lines only failing examples ran; nothing to learn from an integer seed).
FAST_FAIL = hypothesis.settings(
    sxt.DEFAULT_SETTINGS,
    phases=[hypothesis.Phase.explicit, hypothesis.Phase.reuse, hypothesis.Phase.generate, hypothesis.Phase.shrink],
)


def _bed(d, c, slowest, seed):
    """One quadratic test bed of ``sst.quadratics`` with these parameters."""
    strategy = sst.quadratics(d=st.just(d), c=st.just(c), slowest=st.just(slowest), seed=st.just(seed))
    return hypothesis.find(strategy, lambda _: True, settings=hypothesis.settings(database=None))


# One compiled program per dimension and step count: the 4-d beds share theirs.
STEPS = 300


@pytest.mark.parametrize("d, c, slowest, seed", [(1, 0.9, False, 0), (4, 0.8, True, 5), (8, 0.97, False, 3)])
def test_measures_the_exact_rate_of_quadratics_and_accepts_it_as_a_claim(d, c, slowest, seed):
    bed = _bed(d, c, slowest, seed)
    res = sxt.check_linear_convergence(bed.algorithm, STEPS, rate=bed.c, jacobian=d == 4)
    # Eq 5.3 holds with the exact rate at every step (float32 rounding: < 1e-3 of c), and
    # the runs reach it: the largest one-step ratio is the exact rate.
    assert bed.c * (1 - 1e-2) <= res.c <= bed.c * (1 + 1e-3)
    assert res.c == res.high and res.low <= res.c
    assert res.rate == bed.c and res.settled >= 1
    assert 8 * 5 <= res.n_trials <= 80 and res.n_trials % 8 == 0
    assert res.coverage == pytest.approx(0.05 ** (1 / res.n_trials))
    assert res.prediction == pytest.approx(res.n_trials / (res.n_trials + 1))
    assert 0.1 <= res.radii[0] <= res.radii[1] <= 1.0 + 1e-6  # default near: ‖w⁽⁰⁾ − w*‖ = 1
    if d == 4:
        assert res.local == pytest.approx(bed.c, rel=1e-4)
    s = res.summary()
    assert "linearly convergent near w*" in s and "With confidence 0.95" in s and "Claimed rate" in s


def test_claimed_rate_too_small_is_a_counterexample_that_replays():
    bed = _bed(4, 0.9, False, 1)
    with pytest.raises(AssertionError) as e:
        sxt.check_linear_convergence(bed.algorithm, STEPS, rate=0.5, settings=FAST_FAIL)
    msg = str(e.value)
    assert msg.startswith("Eq 5.3: the claimed rate c = 0.5 is too small")
    for part in ("measured ratio d_(k+1)/d_k", "claimed c", "start", "trial", "seed", "replay with:"):
        assert part in msg
    err = e.value
    assert isinstance(err, sxt.CheckFailure) and err.details["measured ratio d_(k+1)/d_k"] > 0.5
    # The replay snippet reproduces the failing trial.
    with pytest.raises(sxt.CheckFailure) as again:
        exec(err.replay, {"jax": jax, "scarjax": scarjax, "sxt": sxt, "algorithm": bed.algorithm})
    assert again.value.title == err.title
    # A claim barely below the exact rate is caught too (beyond rounding).
    with pytest.raises(AssertionError, match=r"claimed rate c = 0\.89 is too small"):
        sxt.check_linear_convergence(bed.algorithm, STEPS, rate=0.89, settings=FAST_FAIL)


def _fixed_point(f, name):
    return scarjax.fixed_point(f, jnp.ones(2), lambda w, d: jnp.sum(w**2), optimum=jnp.zeros(2), name=name)


@pytest.mark.parametrize(
    "f, expected",
    [
        (lambda w, d: w - 0.1 * w**3, "slowing down|no measurable convergence"),  # sublinear: d_k ~ k^(-1/2)
        (lambda w, d: 1.05 * w, r"is not in \(0, 1\)"),  # not a contraction: the distance grows
        (lambda w, d: 1e3 * w, r"the run diverged \(inf distance at step"),
    ],
    ids=["sublinear", "expansion", "diverges"],
)
def test_not_linearly_convergent_here(f, expected):
    with pytest.raises(AssertionError) as e:
        sxt.check_linear_convergence(_fixed_point(f, "planted"), 100, rate=0.9, settings=FAST_FAIL)
    msg = str(e.value)
    assert msg.startswith("not linearly convergent here")
    assert re.search(expected, msg) and "replay with:" in msg and "planted" in msg


def test_assert_on_given_distances():
    k = np.arange(60)
    res = sxt.assert_linear_convergence(2.0 * 0.9**k, rate=0.9)
    assert res.c == pytest.approx(0.9, rel=1e-9) and res.n_trials == 1
    two = sxt.assert_linear_convergence(np.stack([0.9**k, 0.5 * 0.8**k]))
    assert two.n_trials == 2 and two.c == pytest.approx(0.9)
    with pytest.raises(AssertionError, match=r"claimed rate c = 0\.8 is too small"):
        sxt.assert_linear_convergence(0.9**k, rate=0.8)
    with pytest.raises(AssertionError, match="not linearly convergent here: the contraction kept slowing"):
        sxt.assert_linear_convergence(1.0 / (1.0 + k))  # a power law
    with pytest.raises(AssertionError, match=r"diverged \(NaN distance at step 3\)"):
        sxt.assert_linear_convergence(np.r_[1.0, 0.5, 0.25, np.nan, 0.1])


def test_a_transient_run_is_covered_by_the_settled_ones():
    # Ratios creeping up towards 0.8 (a start whose slow direction is nearly absent): alone
    # it has no settled rate; next to a settled run of rate 0.8 it is covered by Eq 5.3.
    k = np.arange(60)
    transient = 0.5**k + 1e-2 * 0.8**k
    with pytest.raises(AssertionError, match="no run of this batch of 1 settled"):
        sxt.assert_linear_convergence(transient)
    res = sxt.assert_linear_convergence(np.stack([transient, 0.8**k]))
    assert res.settled == 1 and res.c == pytest.approx(0.8)


def test_without_an_optimum_uses_a_reference_run_or_refuses():
    affine = scarjax.fixed_point(lambda w, d: 0.5 * w + 1.0, jnp.zeros(3), lambda w, d: jnp.sum((w - 2) ** 2), name="affine")
    res = sxt.check_linear_convergence(affine, 40, rate=0.5, reference_steps=200, settings=3)
    assert res.c == pytest.approx(0.5, rel=1e-3)
    with pytest.raises(ValueError, match="has no optimum: give it one"):
        sxt.check_linear_convergence(affine, 40)
    with pytest.raises(ValueError, match="reference run has not settled"):
        sxt.check_linear_convergence(affine, 40, reference_steps=3)


def test_near_start_is_the_trial_start():
    bed = _bed(4, 0.9, False, 2)
    key = jax.random.fold_in(jax.random.key(7), 3)
    w0 = sxt.near_start(bed.algorithm, 0.25, 12, key)
    assert float(bed.algorithm.distance(w0.params)) == pytest.approx(0.25, rel=1e-5)
    _, trace = scarjax.run(bed.algorithm, None, 100, key, init_state=w0)
    scale = float(bed.algorithm.norm(bed.algorithm.optimum)) + 0.25  # ‖w*‖ + d₀: the rounding scale
    assert sxt.assert_linear_convergence(trace, rate=bed.c, scale=scale).c <= bed.c * (1 + 1e-3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"rate": 1.5}, ValueError, "rate"),
        ({"trials": 0}, ValueError, "trials"),
        ({"near": -1.0}, ValueError, "near"),
        ({"near": (0.5, 0.1)}, ValueError, "near"),
        ({"confidence": 1.0}, ValueError, "confidence"),
        ({"jacobian": 1}, TypeError, "jacobian"),
        ({"reference_steps": 10}, ValueError, "reference_steps"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, error, match):
    bed = _bed(1, 0.9, False, 0)
    with pytest.raises(error, match=match):
        sxt.check_linear_convergence(bed.algorithm, 50, **kwargs)
    with pytest.raises(TypeError, match="algorithm"):
        sxt.check_linear_convergence(object(), 50)
    with pytest.raises(ValueError, match="steps"):
        sxt.check_linear_convergence(bed.algorithm, 2)
