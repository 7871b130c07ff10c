"""The precision-floor and staleness checks (scarjax.testing._floors): they pass where the
theory holds (a quadratic and a small MLR by gradient descent) and catch planted
violations with readable counterexamples: a quantizer claiming more bits than it keeps
(Example 5.2.1), a claimed rate that is too fast (Eq B.1, Lemma B.2.1), a stale-read hook
reading older versions than its declared bound and a Lipschitz constant that is too small
(Example 5.2.2)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import hypothesis
from hypothesis import Phase
from hypothesis import strategies as st

import scarjax
from scarjax import testing as sxt
from scarjax.models import mlr, quadratic
from scarjax.perturb import precision as P
from scarjax.perturb import staleness
from scarjax.testing import strategies as sst

FIG53_C, FIG53_LAMBDA = 0.995, 0.04  # η·λ_max(A) = 0.005 · 8
# Detecting a planted violation needs no shrinking (test_stale_hook_exceeding_... shrinks).
NO_SHRINK = hypothesis.settings(sxt.DEFAULT_SETTINGS, max_examples=3, phases=[Phase.explicit, Phase.generate])


@pytest.fixture(scope="module")
def qp():
    # d = 4, c = 0.9 exactly (Eq 5.3 for every w): the floor settles within 150 steps.
    alg = quadratic.random_problem(3, 4, 3.0, c=0.9)
    return alg, quadratic.contraction(alg)


@pytest.fixture(scope="module")
def fig53():
    return quadratic.fig53_problem()


@pytest.fixture(scope="module")
def small_mlr():
    """Full-batch MLR (48 points, 4 features + bias, 3 classes): gradient descent with
    step η on a μ = l2 strongly convex, L-smooth loss contracts at
    c = max(1 − ημ, ηL − 1) for every w (Eq 5.3); a worker's update is ηL_m-Lipschitz in
    what it reads (L_m: its shard's smoothness, ½λ_max(X_mᵀX_m/n_m) + l2). w* by the same
    gradient descent in float64 NumPy."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=(48, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=48)
    lr, l2 = 0.5, 0.2
    alg = mlr.mlr(x, y, num_classes=3, lr=lr, l2=l2)
    X = np.c_[x, np.ones(48)].astype(np.float64)
    smooth = lambda Z: 0.5 * np.linalg.eigvalsh(Z.T @ Z / len(Z)).max() + l2  # noqa: E731
    c = max(1 - lr * l2, lr * smooth(X) - 1)
    lam = lr * max(smooth(X), smooth(X[:24]), smooth(X[24:]))  # M = 1 and M = 2 shards
    W, Y = np.zeros((5, 3)), np.eye(3)[y]
    for _ in range(2000):
        Z = X @ W
        Pr = np.exp(Z - Z.max(1, keepdims=True))
        Pr /= Pr.sum(1, keepdims=True)
        W -= lr * (X.T @ (Pr - Y) / 48 + l2 * W)
    return alg.replace(optimum={"w": jnp.asarray(W, jnp.float32)}), c, lam


# --------------------------------------------------------------------------------------
# Example 5.2.1 and Appendix B.1.1.


def test_precision_floor_holds_on_a_quadratic(qp):
    alg, c = qp
    res = sxt.check_precision_floor(alg, c, 300)
    assert res.examples == 10 and res.trials == 40 and res.formats >= 10
    assert 0 < res.worst_rounding <= 1 and 0 < res.worst_floor <= 1
    assert res.summary().startswith("qp4: Example 5.2.1 and the B.1.1 floor held on 40 runs")


def test_precision_floor_holds_on_mlr(small_mlr):
    alg, c, _ = small_mlr
    res = sxt.check_precision_floor(alg, c, 300, settings=3)
    assert res.trials == 12 and res.worst_floor <= 1 and res.worst_rounding <= 1


def test_quantizer_claiming_more_bits_than_it_keeps_is_caught(qp):
    # Claims 8 stored mantissa bits (|δ| ≤ 2^-9|y|) but rounds to 3.
    alg, c = qp
    three = P.mantissa(3)
    fake = sst.PrecisionFormat.custom(three, 8, name="fake8")
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_precision_floor(alg, c, 300, formats=st.just(fake), seed=5, settings=2)
    msg = str(info.value)
    assert msg.startswith("Example 5.2.1: the rounding error exceeds the format's bound")
    assert "custom quantizer 'fake8' claiming 8 stored mantissa bits, round-to-nearest" in msg
    assert "step                 : 0" in msg and "2^-9 × ‖y⁽ᵏ⁾‖" in msg and "seed                 : 5" in msg
    assert "jax.random.fold_in(jax.random.key(5), 0)" in msg and ".hook(), 300, key)" in msg
    ratio = float(msg.split("ratio")[1].split(":")[1].split()[0])
    assert ratio > 4  # 2^-4 vs 2^-9 per entry: far beyond the claim
    # The same quantizer claiming what it keeps passes.
    honest = sst.PrecisionFormat.custom(three, 3, name="three")
    assert sxt.check_precision_floor(alg, c, 300, formats=st.just(honest), seed=5, settings=2).worst_rounding <= 1


def test_too_fast_claimed_rate_breaks_the_floor_and_the_replay_reproduces_it(qp):
    # With c = 0.3 claimed (true 0.9) the B.1 floor c/(1 − c)·Δ is too low.
    alg, c = qp
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_precision_floor(alg, 0.3, 300, formats=sst.precision_formats(kinds=("mantissa",)), seed=1,
                                  settings=NO_SHRINK)
    failure = info.value
    msg = str(failure)
    assert msg.startswith("Appendix B.1.1 (Eq B.1): the error floor exceeds c/(1 − c)·Δ")
    for field in ("‖y⁽ᵏ⁾ − w*‖ achieved", "F = c/(1 − c)·Δ", "stored mantissa bits", "restart s, d_s", "replay with"):
        assert field in msg, field
    # The replay runs that trial with the format's own hook and asserts the floor on it.
    ns = {"algorithm": alg, "scarjax": scarjax, "jax": jax, "sxt": sxt, "sst": sst}
    with pytest.raises(sxt.CheckFailure) as again:
        exec(failure.replay, ns)  # noqa: S102 - the counterexample's replay code
    assert again.value.title == failure.title
    np.testing.assert_allclose(again.value.details["‖y⁽ᵏ⁾ − w*‖ achieved"], failure.details["‖y⁽ᵏ⁾ − w*‖ achieved"],
                               rtol=1e-4)
    # assert_precision_floor on that run: it holds with the true rate; a NaN is a divergence.
    tr = ns["trace"]
    res = sxt.assert_precision_floor(tr, c)
    assert res.trials == 1 and 0 < res.worst_floor <= 1 and np.isnan(res.worst_rounding)
    bad = tr._replace(distance=tr.distance.at[200].set(jnp.nan))
    with pytest.raises(sxt.CheckFailure, match=r"diverged \(NaN or inf\)(.|\n)*step\s+: 200"):
        sxt.assert_precision_floor(bad, c)


# --------------------------------------------------------------------------------------
# Example 5.2.2 and Lemma B.2.1.


def test_staleness_holds_on_the_fig53_quadratic(fig53):
    res = sxt.check_staleness(fig53, FIG53_C, 120, workers=1, lipschitz=FIG53_LAMBDA)
    assert res.examples == 10 and res.trials == 40 and res.max_bound >= 2
    assert 0 < res.worst_view <= 1 and 0 < res.worst_effect <= 1 and 0 < res.worst_envelope <= 1
    assert "Example 5.2.2 and Lemma B.2.1 held on 40 runs" in res.summary()


def test_staleness_holds_on_mlr(small_mlr):
    alg, c, lam = small_mlr
    res = sxt.check_staleness(alg, c, 60, workers=2, lipschitz=lam, settings=3)
    assert res.trials == 12 and res.worst_view <= 1 and res.worst_effect <= 1 and res.worst_envelope <= 1


def test_stale_hook_exceeding_its_declared_bound_is_caught(fig53):
    # Declares bound s but every worker reads the version s + 2 old; shrinks to s = 0.
    over = lambda M, s, S: staleness.ssp(M, s + 2, delays="fixed", max_staleness=S + 2)  # noqa: E731
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_staleness(fig53, FIG53_C, 30, workers=1, hook=over, trials=2, seed=0, settings=3)
    msg = str(info.value)
    assert msg.startswith("Example 5.2.2: a worker read a version older than the staleness bound s allows")
    assert "1 worker, your hook declaring staleness bound s = 0" in msg
    assert "Σ_{j≤s} ‖Δ_{k−j}‖ (last s updates) : 0" in msg and "step" in msg
    assert "_, trace = scarjax.run(algorithm, [hook(1, jnp.int32(0), 4)" in msg  # the user's hook, as `hook`


def test_too_small_lipschitz_constant_is_caught(fig53):
    # Along fig53's slowest direction the update is only 0.005-Lipschitz: claim 0.001.
    with pytest.raises(sxt.CheckFailure, match=r"^Example 5.2.2: the read perturbation exceeds λ"):
        sxt.check_staleness(fig53, FIG53_C, 120, workers=1, lipschitz=0.001, seed=0, settings=NO_SHRINK)


def test_too_fast_claimed_rate_breaks_the_envelope_and_the_replay_reproduces_it(fig53):
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_staleness(fig53, 0.9, 120, workers=1, seed=0, settings=NO_SHRINK)
    failure = info.value
    assert failure.title.startswith("Lemma B.2.1 (Eq B.4): ‖y⁽ᵏ⁾ − w*‖ exceeds the envelope")
    assert "1 worker, staleness bound s = " in str(failure)
    # The replay snippet reruns that trial with the pattern's own hook and fails the same way.
    ns = {"algorithm": fig53, "scarjax": scarjax, "jax": jax, "jnp": jnp, "sxt": sxt, "sst": sst}
    with pytest.raises(sxt.CheckFailure) as again:
        exec(failure.replay, ns)  # noqa: S102 - the counterexample's replay code
    assert again.value.title == failure.title and again.value.details["step"] == failure.details["step"]
    # assert_staleness on that run: the probes change nothing; it needs the measurements.
    tr = ns["trace"]
    hook = eval(re.search(r"\[(sst\.DelayPattern\(.*?\)\.hook\(\))", failure.replay).group(1), ns)  # noqa: S307
    _, plain = scarjax.run(fig53, hook, 120, ns["key"], workers=1, measure_read_effect=True)
    np.testing.assert_array_equal(tr.distance, plain.distance)
    assert float(tr.point_delta["update"].max()) == 0.0
    assert sxt.assert_staleness(tr, FIG53_C, failure.details["staleness bound s"], lipschitz=FIG53_LAMBDA).worst_view <= 1
    with pytest.raises(ValueError, match="measure_read_effect"):
        sxt.assert_staleness(tr._replace(read_effect=None), FIG53_C, 1)
    with pytest.raises(ValueError, match="update_norms"):
        sxt.assert_staleness(plain, FIG53_C, 1)


def test_bad_inputs(qp, fig53):
    alg, c = qp
    cases = [
        (lambda: sxt.check_precision_floor("qp", c, 10), TypeError, "algorithm"),
        (lambda: sxt.check_precision_floor(alg.replace(optimum=None), c, 10), ValueError, "optimum"),
        (lambda: sxt.check_precision_floor(alg, 1.0, 10), ValueError, "c must"),
        (lambda: sxt.check_precision_floor(alg, c, 2), ValueError, "steps"),
        (lambda: sxt.check_precision_floor(alg, c, 10, trials=0), ValueError, "trials"),
        (lambda: sxt.check_precision_floor(alg, c, 10, formats=sst.PrecisionFormat.mantissa(3)), TypeError, "formats"),
        (lambda: sxt.check_precision_floor(alg, c, 10, tail=0.2, window=0.5), ValueError, "window"),
        (lambda: sxt.check_precision_floor(alg, c, 10, seed=-1), ValueError, "seed"),
        (lambda: sxt.check_staleness(alg.replace(grad=None, apply=None), c, 10), ValueError, "worker"),
        (lambda: sxt.check_staleness(fig53, c, 10, workers=0), ValueError, "workers"),
        (lambda: sxt.check_staleness(fig53, c, 10, kinds=("lazy",)), ValueError, "kinds"),
        (lambda: sxt.check_staleness(fig53, c, 10, lipschitz=-1.0), ValueError, "lipschitz"),
        (lambda: sxt.check_staleness(fig53, c, 10, max_bound=-1), ValueError, "max_bound"),
        (lambda: sxt.check_staleness(fig53, c, 10, hook=3), TypeError, "hook"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()
