"""Rework against Thm 5.3.1 on a problem nobody tuned: ridge regression by gradient descent.

Ridge regression from ``w⁽⁰⁾ = 0`` with the textbook step ``η = 1/λ_max`` contracts at
exactly ``c = max|1 − ηλ(H)|`` asymptotically (H the Hessian), but first much faster: its
initial error lies mostly in fast eigendirections. That fast transient is what makes the
thesis's bound from ``w⁽⁰⁾`` (Eq 5.6 as printed) too small for measured rework, and what
makes a least-squares fit of ``c`` too small. These tests pin down the safe defaults:
``trace_rework_bound(start='auto')``, :func:`scarjax.check_rework`, the conservative
``estimate_c`` and the noise-floor guard of ``calibrate_eps``.
"""

import functools
import logging
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, strategies as st

import scarjax
from scarjax import bounds, hooks, perturb, rework
from scarjax import testing as sxt
from scarjax.testing import strategies as sst

STEPS = 400
CONVERGE_AT = 150  # ε: the baseline converges at this iteration
TRIALS = 64
KIT_EXAMPLES = 25  # batches of up to TRIALS perturbations (~21 on average) per kind, sxt.check_rework_bound
EPS32 = float(np.finfo(np.float32).eps)


@functools.cache
def ridge():
    """``½ mean((Xw − y)²) + ½λ‖w‖²`` on random data, gradient descent with ``η = 1/λ_max``."""
    rng = np.random.default_rng(0)
    n, d, lam = 64, 8, 0.1
    X = rng.normal(size=(n, d)) * np.linspace(0.3, 1.5, d)
    y = X @ rng.normal(size=d) + 0.1 * rng.normal(size=n)
    H = X.T @ X / n + lam * np.eye(d)
    w_star = np.linalg.solve(H, X.T @ y / n)
    eig, vecs = np.linalg.eigh(H)
    lr = 1.0 / eig.max()

    def loss(w, b):
        return 0.5 * jnp.mean((b["x"] @ w - b["y"]) ** 2) + 0.5 * lam * jnp.sum(w**2)

    data = {"x": jnp.asarray(X, jnp.float32), "y": jnp.asarray(y, jnp.float32)}
    alg = scarjax.from_optax(loss, optax.sgd(lr), jnp.zeros(d), data, optimum=jnp.asarray(w_star, jnp.float32))
    c_true = float(np.max(np.abs(1.0 - lr * eig)))
    _, base = scarjax.run(alg, None, STEPS, 0)
    # The end of the transient: the baseline error (exactly (I − ηH)ᵏ(w⁽⁰⁾ − w*)) is 99 %
    # in the slowest eigendirection from this iteration on.
    a0 = vecs.T @ (0.0 - w_star)
    k = np.arange(STEPS + 1)[:, None]
    comp = np.abs(a0) * np.abs(1.0 - lr * eig) ** k
    slow = comp[:, np.argmin(eig)] / np.linalg.norm(comp, axis=1)
    transient = int(np.argmax(slow >= 0.99))
    return alg, base, c_true, w_star, transient


def _trials(kind, seed, lo, hi):
    """TRIALS runs (key 0 each, so they pair with the baseline), each perturbed once at a
    random step in [lo, hi) by a random size in [1e-3, 3] (log-uniform), adversarially
    (away from w*) or in a random direction: the kit's perturbation sequences, replayed by
    the same compiled program as sxt.check_rework_bound's on this problem."""
    alg = ridge()[0]
    rng = np.random.default_rng(seed)
    at = rng.integers(lo, hi, TRIALS)
    size = np.exp(rng.uniform(math.log(1e-3), math.log(3.0), TRIALS))
    seeds = rng.integers(0, 2**31 - 1, TRIALS)
    seqs = [sst.PerturbationSequence((sst.Perturbation(int(k), float(z), kind, 1.0, int(r)),))
            for k, z, r in zip(at, size, seeds)]
    keys = jnp.stack([jax.random.key(0)] * TRIALS)
    return scarjax.run_trials(alg, sst.sequence_hook, STEPS, keys, hook_args=sst.stack(seqs, 4))[1], at


def test_ridge_has_a_fast_transient():
    """The premise: the problem is not one where (5.3) is tight from w⁽⁰⁾."""
    _, base, c_true, _, transient = ridge()
    d = np.asarray(base.distance, np.float64)
    assert d[20] < 0.5 * c_true**20 * d[0]  # much faster than c at first
    assert 20 < transient < CONVERGE_AT


@pytest.mark.parametrize("kind", ["adversarial", "random"])
def test_check_rework_bound_holds_in_every_trial(kind):
    """On the property-testing kit: check_rework's bound (Thm 5.3.1 restarted at the
    perturbation, plus the measured slack of the baseline) holds in every trial, for
    perturbations of any size in [1e-3, 3] at any step before the baseline converges,
    the fast transient included (batches of up to TRIALS drawn perturbations)."""
    alg, _, c_true, _, _ = ridge()
    seqs = sst.perturbation_sequences(CONVERGE_AT - 1, max_events=1, sizes=st.floats(1e-3, 3.0), directions=(kind,))
    res = sxt.check_rework_bound(alg, c_true, STEPS, converge_at=CONVERGE_AT, perturbations=seqs, trials=TRIALS,
                                 settings=KIT_EXAMPLES)
    assert res.inconclusive == 0 and res.trials_checked >= KIT_EXAMPLES and res.worst_margin >= 0


def test_check_rework_is_the_restarted_bound_plus_the_baseline_slack():
    """What check_rework pairs: each trial's first perturbed step, the restarted form
    (trace_rework_bound's default) as thm_bound; for adversarial perturbations (along
    y⁽ˢ⁾ − w*, they only rescale the error of a linear contraction) the restarted Eq 5.6
    alone holds at every step, transient or not."""
    _, base, c_true, _, _ = ridge()
    tr, at = _trials("adversarial", 7, 0, CONVERGE_AT)
    chk = scarjax.check_rework(tr, base, c_true, converge_at=CONVERGE_AT)
    np.testing.assert_array_equal(chk.start, at)
    assert chk.n_censored == 0 and chk.metric == "distance" and chk.held.all()
    np.testing.assert_allclose(chk.thm_bound, bounds.trace_rework_bound(tr, c_true))  # start='auto'
    np.testing.assert_allclose(chk.bound, chk.thm_bound + chk.baseline_slack)
    assert np.all(chk.rework <= chk.thm_bound + 1)


@given(seed=st.integers(0, 10_000))
def test_restarted_bound_holds_for_random_perturbations_after_the_transient(seed):
    """Once the slowest direction dominates the baseline error, trace_rework_bound's
    default (start='auto') bounds the measured rework of random perturbations."""
    _, base, c_true, _, transient = ridge()
    tr, _ = _trials("random", seed, transient, CONVERGE_AT)
    eps = scarjax.calibrate_eps(base, CONVERGE_AT)
    rw = scarjax.rework_cost(tr, base, eps)
    assert np.all(np.isfinite(rw))
    assert np.all(rw <= bounds.trace_rework_bound(tr, c_true) + 1)


def test_w0_form_is_exceeded_after_a_fast_transient():
    """The bound from w⁽⁰⁾ (start=0) is too small here: most adversarial perturbations
    exceed it, by several times; the default start='auto' holds in every trial."""
    _, base, c_true, _, _ = ridge()
    tr, at = _trials("adversarial", 1, 20, CONVERGE_AT)
    eps = scarjax.calibrate_eps(base, CONVERGE_AT)
    rw = scarjax.rework_cost(tr, base, eps)
    w0 = bounds.trace_rework_bound(tr, c_true, start=0)
    auto = bounds.trace_rework_bound(tr, c_true)
    over = rw > w0 + 1
    assert over.mean() > 0.5
    assert np.max(rw[over] / (w0[over] + 1)) > 3
    assert np.all(rw <= auto + 1)
    # The int form restarts where asked: at each trial's own step it equals 'auto'.
    i = int(np.argmax(over))
    one = scarjax.split_trials(tr, i)
    assert float(bounds.trace_rework_bound(one, c_true, start=int(at[i]))) == pytest.approx(float(auto[i]))


def test_estimate_c_default_is_conservative_and_its_bounds_hold():
    _, base, c_true, _, _ = ridge()
    est = bounds.estimate_c(base, full_output=True)
    assert est.method == "max_ratio" and est.c == bounds.estimate_c(base)
    assert est.c >= c_true - 1e-6  # at or above the asymptotic rate max|1 − ηλ(H)|
    assert est.low <= c_true <= est.high + 1e-6 and est.n_points >= 3 and 0.95 <= est.r2 <= 1
    # The fit (still available) under-estimates c: 1 − c more than 10 % too large ...
    fit = bounds.estimate_c(base, method="fit")
    assert fit == est.low and (1 - fit) / (1 - c_true) > 1.1
    tr, _ = _trials("adversarial", 2, 0, CONVERGE_AT)
    # ... which turns into bound violations; the default's bounds hold.
    assert not scarjax.check_rework(tr, base, fit, converge_at=CONVERGE_AT).held.all()
    assert scarjax.check_rework(tr, base, est.c, converge_at=CONVERGE_AT).held.all()


# --------------------------------------------------------------------------------------
# The noise floor of the criterion.


def test_distance_noise_floor_is_the_float32_floor():
    _, base, _, w_star, _ = ridge()
    floor = float(rework.noise_floor(base))
    scale = float(np.linalg.norm(w_star))
    assert 0.5 * EPS32 * scale <= floor <= 4 * EPS32 * scale
    # The baseline really cannot go below it, and the floor is not met before the end.
    assert float(np.min(base.distance)) >= 0.5 * floor
    assert float(rework.noise_floor(np.asarray(base.distance)[:CONVERGE_AT])) == 0.0
    assert float(rework.noise_floor(base, scale=1e3)) == pytest.approx(EPS32 * 1e3)


def _eps_ratio(base, n):
    d = np.asarray(base.distance, np.float64)
    return math.sqrt(d[n - 1] * d[n]) / float(rework.noise_floor(base))


def test_calibrate_eps_refuses_and_warns_near_the_noise_floor():
    _, base, _, _, _ = ridge()
    ratios = {n: _eps_ratio(base, n) for n in range(CONVERGE_AT, STEPS)}
    refuse = next(n for n, r in ratios.items() if r < 10)
    warn = next(n for n, r in ratios.items() if r < 100)
    assert warn < refuse
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scarjax.calibrate_eps(base, warn - 1)
    with pytest.warns(rework.NoiseFloorWarning, match=r"noise floor .*\d\.\d\de-07"):
        scarjax.calibrate_eps(base, warn)
    with pytest.raises(ValueError, match=r"calibrate_eps: eps=.* float32 noise floor .*\d\.\d\de-07"):
        scarjax.calibrate_eps(base, refuse)
    assert float(scarjax.calibrate_eps(base, refuse, floor=0)) > 0  # explicit override
    tr, _ = _trials("adversarial", 3, 0, CONVERGE_AT)
    eps = float(scarjax.calibrate_eps(base, refuse, floor=0))
    with pytest.raises(ValueError, match="check_rework: .*noise floor"):
        scarjax.check_rework(tr, base, 0.99, eps=eps)
    with pytest.raises(ValueError, match="noise floor"):
        scarjax.check_rework(tr, base, 0.99, converge_at=refuse)


def test_loss_noise_floor_is_the_float32_resolution_of_the_loss():
    """A float32 loss ``L* + a cᵏ`` stops resolving its decrease when the gap is a few
    ulps of L*: an ε there is refused, a few tens of ulps warned, far above accepted."""
    k = np.arange(300)
    v = (1.0 + 0.5 * 0.9**k).astype(np.float32)  # reaches 1.0 exactly in float32
    w = v.astype(np.float64)
    ratio = (np.sqrt(w[:-1] * w[1:]) - 1.0) / EPS32  # ε at n = i + 1, in ulps of the loss
    new_min = w[1:] < w[:-1]
    first = lambda lim: int(np.argmax(new_min & (ratio < lim))) + 1  # noqa: E731
    with pytest.raises(ValueError, match=r"only .* above the baseline's lowest loss .*eps32 × \|loss\|"):
        scarjax.calibrate_eps(v, first(10), metric="loss")
    with pytest.warns(rework.NoiseFloorWarning, match="lowest loss"):
        scarjax.calibrate_eps(v, first(60), metric="loss")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scarjax.calibrate_eps(v, first(1e4), metric="loss")
        assert first(1e4) < first(60) < first(10)
    # calibrate_near (loss, per trial) has the same guard.
    with pytest.raises(ValueError, match="calibrate_near: .*lowest loss"):
        rework.calibrate_near(np.stack([v, v]), first(10))
    with pytest.warns(rework.NoiseFloorWarning, match="calibrate_near"):
        rework.calibrate_near(np.stack([v, v]), first(60))
    assert np.all(rework.calibrate_near(np.stack([v, v]), first(10), floor=0) > 1)
    with pytest.raises(ValueError, match="floor"):
        rework.calibrate_near(np.stack([v, v]), 5, floor=-1.0)


# --------------------------------------------------------------------------------------
# Metric auto, vectorisation, bad input.


@functools.cache
def _no_optimum():
    x = jnp.linspace(-1, 1, 32)[:, None]
    data = {"x": x, "y": 3 * x[:, 0] + 1.0}
    loss = lambda w, b: jnp.mean((b["x"] @ w - b["y"]) ** 2)  # noqa: E731
    alg = scarjax.from_optax(loss, optax.sgd(0.3), jnp.zeros(1), data)
    _, base = scarjax.run(alg, None, 200, 0)
    _, pert = scarjax.run(alg, hooks.scheduled(perturb.gaussian(0.5), 10), 200, 0)
    return base, pert


def test_metric_auto_uses_distance_with_an_optimum_and_loss_without(caplog):
    _, base, _, _, _ = ridge()
    np.testing.assert_array_equal(rework.criterion(base), np.asarray(base.distance, np.float64))
    assert scarjax.calibrate_eps(base, 100) == scarjax.calibrate_eps(base, 100, metric="distance")
    nb, npert = _no_optimum()
    with caplog.at_level(logging.DEBUG, logger="scarjax.rework"):
        eps = scarjax.calibrate_eps(nb, 8)
    assert "metric=None -> 'loss'" in caplog.text
    assert eps == scarjax.calibrate_eps(nb, 8, metric="loss")
    np.testing.assert_array_equal(scarjax.rework_cost(npert, nb, eps), scarjax.rework_cost(npert, nb, eps, metric="loss"))
    with pytest.raises(ValueError, match="metric='distance' is not available"):
        scarjax.calibrate_eps(nb, 8, metric="distance")
    with pytest.raises(ValueError, match="trace has no distances"):
        scarjax.check_rework(npert, nb, 0.9, converge_at=8)


def test_check_rework_is_exact_and_vectorised_on_100k_synthetic_runs():
    """Geometric runs at rate c, each knocked away from w* by δ at step s (the worst case
    of the theorem): measured rework is within one iteration of the bound, in one pass."""
    n, L, c = 100_000, 50, 0.8
    rng = np.random.default_rng(0)
    s = rng.integers(0, 15, n)
    size = rng.uniform(0.01, 2.0, n) * c ** s
    k = np.arange(L + 1)
    base = c**k
    dist = np.where(k <= s[:, None], base, (c ** s[:, None] + size[:, None]) * c ** (k - s[:, None]))
    write = np.zeros((n, L))
    write[np.arange(n), s] = size
    zeros = np.zeros((n, L))
    tr = scarjax.Trace(loss=dist, distance=dist, delta={}, point_delta={"read": zeros, "update": zeros, "write": write}, initial_distance=np.ones(n))
    chk = scarjax.check_rework(tr, base, c, converge_at=40)
    assert chk.held.all() and chk.n_censored == 0
    assert np.all(np.abs(chk.rework - chk.thm_bound) < 1 + 1e-6)
    np.testing.assert_allclose(chk.baseline_slack, 0.0, atol=1e-4)
    np.testing.assert_array_equal(chk.start, s)
    # An unperturbed trial gets bound 0; a trial that never re-converges is not held.
    tr2 = tr._replace(point_delta={**tr.point_delta, "write": np.where(np.arange(n)[:, None] == 0, 0.0, write)})
    dist2 = dist.copy()
    dist2[0] = base
    dist2[1, -1] = 10.0  # trial 1 ends above ε
    dist2[2, s[2] + 1 :] = np.nan  # trial 2 diverges after its perturbation
    write2 = np.array(tr2.point_delta["write"])
    write2[2, -1] = np.nan
    tr2 = tr2._replace(distance=dist2, loss=dist2, point_delta={**tr2.point_delta, "write": write2})
    chk2 = scarjax.check_rework(tr2, base, c, converge_at=40)
    assert chk2.rework[2] == np.inf and chk2.bound[2] == np.inf and not chk2.held[2]
    assert chk2.start[0] == -1 and chk2.bound[0] == 0 and chk2.rework[0] == 0 and chk2.held[0]
    assert chk2.rework[1] == np.inf and not chk2.held[1] and chk2.n_censored == 2
    assert chk2.n_held == n - 2 and "in 99998 of 100000 trials (2 did not re-converge" in chk2.summary()


def test_trace_rework_bound_start_forms():
    n = np.array([[0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]])
    dist = np.array([[4.0, 2.0, 1.0, 3.0, 1.0], [4.0, 2.0, 1.0, 0.5, 0.25], [4.0, 3.0, 2.0, 1.0, 0.5]])

    class T:  # a minimal trace-like object: norms ‖δ_ℓ‖ and distances
        distance = dist
        initial_distance = dist[:, 0]

        def perturbation_norms(self):
            return n

    auto = bounds.trace_rework_bound(T(), 0.5)
    # trial 0: s = 2, d_s = 1, Δ = 1 → log2/log2 = 1; trial 1: none → 0; trial 2: s = 0.
    np.testing.assert_allclose(auto, [1.0, 0.0, math.log(1.5) / math.log(2)])
    w0 = bounds.trace_rework_bound(T(), 0.5, start=0)
    np.testing.assert_allclose(w0, [math.log(1 + 4 / 4) / math.log(2), 0.0, math.log(1.5) / math.log(2)])
    np.testing.assert_allclose(bounds.trace_rework_bound(T(), 0.5, start=1), [math.log(1 + 2 / 2) / math.log(2), 0.0, 0.0])
    # expectation: mean norms [2/3, 0, 1/3, 0] → s = 0, d = mean d₀ = 4
    e = bounds.trace_rework_bound(T(), 0.5, expectation=True)
    assert e == pytest.approx(math.log(1 + (2 / 3 + 4 / 3) / 4) / math.log(2))
    assert bounds.trace_rework_bound(T(), 0.5, T=1)[0] == 0.0  # trial 0's δ is after T


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9), ValueError, "exactly one of eps and converge_at"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, eps=1e-3, converge_at=100), ValueError, "exactly one"),
        (lambda tr, b: scarjax.check_rework(tr, b, 1.2, converge_at=100), ValueError, "c must"),
        (lambda tr, b: scarjax.check_rework(tr, b, [0.9, 0.95], converge_at=100), ValueError, "c must be a scalar"),
        (lambda tr, b: bounds.trace_rework_bound(tr, "fast"), TypeError, "c must be a number"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, converge_at=100.0), TypeError, "converge_at must be an int"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, converge_at=STEPS + 5), ValueError, "converge_at must be in"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, eps=-1.0), ValueError, "eps must be finite and > 0"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, eps=np.ones(3)), ValueError, "eps must be a scalar or one per trial"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, eps="x"), TypeError, "eps must be a number"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, converge_at=100, metric="loss"), ValueError, "metric='loss'"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, converge_at=100, metric="acc"), ValueError, "metric must be"),
        (lambda tr, b: scarjax.check_rework(np.asarray(tr.distance), b, 0.9, converge_at=100), TypeError, "trace must be a scarjax Trace"),
        (lambda tr, b: scarjax.check_rework(tr, np.asarray(b.distance)[:50], 0.9, converge_at=10), ValueError, "baseline_trace has shape"),
        (lambda tr, b: scarjax.check_rework(tr, np.asarray(b.distance) * 1.5, 0.9, converge_at=100, floor=0), ValueError, "paired runs"),
        (lambda tr, b: scarjax.check_rework(tr, b, 0.9, converge_at=100, floor=-1), ValueError, "floor must be"),
        (lambda tr, b: bounds.trace_rework_bound(tr, 0.9, start="first"), ValueError, "start must be 'auto' or an int"),
        (lambda tr, b: bounds.trace_rework_bound(tr, 0.9, start=-1), ValueError, "start must be"),
        (lambda tr, b: bounds.trace_rework_bound(tr, 0.9, T=10**6), ValueError, "T must be"),
        (lambda tr, b: bounds.trace_rework_bound(tr, 0.9, initial_distance=1.0), ValueError, "initial_distance is the d₀ of the w⁽⁰⁾ form"),
        (lambda tr, b: bounds.trace_rework_bound(np.array([[0.0, 1.0, 0.0]]), 0.9), ValueError, "needs d_s"),
        (lambda tr, b: bounds.trace_rework_bound(np.ones((2, 5)), 0.9), ValueError, "initial_distance is required"),
        (lambda tr, b: bounds.trace_rework_bound(tr, 0.9, expectation="yes"), TypeError, "expectation must be a bool"),
        (lambda tr, b: bounds.estimate_c(b, full_output=1), TypeError, "full_output must be a bool"),
        (lambda tr, b: bounds.estimate_c(b, min_r2=2.0), ValueError, "min_r2"),
        (lambda tr, b: bounds.estimate_c(b, start=1.5), TypeError, "start must be an int"),
        (lambda tr, b: bounds.estimate_c(b, start=10**6), ValueError, "start must be in"),
        (lambda tr, b: bounds.estimate_c(b, floor=-1.0), ValueError, "floor must be"),
        (lambda tr, b: scarjax.calibrate_eps(b, 100, metric="acc"), ValueError, "metric must be"),
        (lambda tr, b: scarjax.calibrate_eps(b, 100, floor=np.nan), ValueError, "floor must be"),
        (lambda tr, b: scarjax.calibrate_eps(["a", "b"], 1), TypeError, "baseline_trace must be"),
        (lambda tr, b: scarjax.rework_cost(tr, {"x": 1}, 1e-3), TypeError, "baseline_trace must be"),
        (lambda tr, b: rework.noise_floor(b, scale=-1.0), ValueError, "scale must be"),
    ],
)
def test_bad_inputs_name_the_argument(call, exc, match):
    tr, _ = _trials("adversarial", 4, 0, CONVERGE_AT)
    with pytest.raises(exc, match=match):
        call(tr, ridge()[1])


_READ_SCALE = hooks.param_hook(lambda p, s, ctx, key: p * 1.01, point="read", name="read_scale")


def test_read_point_perturbations_without_read_effect_are_refused():
    alg = ridge()[0]
    stale = _READ_SCALE
    _, tr = scarjax.run(alg, stale, 50, 0)
    with pytest.raises(ValueError, match="measure_read_effect=True"):
        bounds.trace_rework_bound(tr, 0.9)
    _, tr = scarjax.run(alg, stale, 50, 0, measure_read_effect=True)
    assert float(bounds.trace_rework_bound(tr, 0.9)) > 0
