"""Reduced precision (thesis Example 5.2.1) and the B.1.1 error floor (formats and the floor
assertion from the property-testing kit, scarjax.testing)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scarjax
from scarjax import testing as sxt
from scarjax.models import quadratic
from scarjax.perturb import precision as P
from scarjax.perturb import staleness
from scarjax.testing import strategies as sst

_round = jax.jit(P.round_float, static_argnames=("stochastic",))

normal_floats = st.floats(min_value=2.0**-100, max_value=2.0**100, allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=30, deadline=None)
@given(
    mags=st.lists(normal_floats, min_size=16, max_size=16),
    signs=st.lists(st.booleans(), min_size=16, max_size=16),
    fmt=sst.precision_formats(kinds=("mantissa",), mantissa_bits=(0, 23), stochastic=st.just(False)),
    seed=st.integers(0, 2**31 - 1),
)
def test_rounding_respects_example_5_2_1(mags, signs, fmt, seed):
    # |δ| ≤ 2^{-(m+1)}|y| (nearest) and |δ| < 2^{-m}|y| = 2^{-(p-1)}|y| (stochastic), p = m + 1:
    # the per-entry bounds the kit checks runs against (PrecisionFormat.relative_bound).
    sto_fmt = fmt._replace(stochastic=True)
    y = np.where(signs, 1, -1) * np.asarray(mags, np.float32)
    yj = jnp.asarray(y)
    near = np.asarray(_round(yj, fmt.bits), np.float64)
    sto = np.asarray(_round(yj, fmt.bits, stochastic=True, key=jax.random.key(seed)), np.float64)
    y = y.astype(np.float64)
    assert np.all(np.abs(near - y) <= fmt.relative_bound() * np.abs(y))
    assert np.all(np.abs(sto - y) < sto_fmt.relative_bound() * np.abs(y))
    # The rounded values are representable: rounding again changes nothing.
    np.testing.assert_array_equal(_round(jnp.asarray(near, jnp.float32), fmt.bits), near.astype(np.float32))


def test_stochastic_rounding_is_unbiased():
    x = jnp.asarray([1.0 + 1 / 3, -2.7, 0.123, 1e-3 * 7.3, 5.5], jnp.float32)
    keys = jax.random.split(jax.random.key(0), 20000)
    for q in (P.mantissa(3, stochastic=True), P.fixed_point_quantizer(8, stochastic=True), P.qsgd(4)):
        samples = jax.jit(jax.vmap(lambda k: q(x, k)))(keys)
        mean, se = samples.mean(0), samples.std(0) / np.sqrt(len(keys)) + 1e-9
        assert np.all(np.abs(mean - x) < 5 * se), q.name


def test_named_formats_emulation_equals_casts():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(size=4000) * 10.0 ** rng.uniform(-9, 6, 4000), [0.0, 448.0, 470.0, 1e9, -1e38, 6e4, 7e4]])
    x = jnp.asarray(x, jnp.float32)
    for name in ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"):
        emu = P.float_format(name)(x, None)
        real = P.float_format(name, emulate=False)(x, None)
        np.testing.assert_array_equal(emu, real, err_msg=name)
        assert bool(jnp.all(jnp.isfinite(real))), name  # saturation, no NaN (e4m3fn has no inf)


def test_fixed_point_error_is_half_a_step():
    x = jnp.asarray(np.random.default_rng(1).normal(size=100), jnp.float32)
    for bits in (8, 16):
        y = P.fixed_point_quantizer(bits)(x, None)
        step = float(jnp.max(jnp.abs(x))) / (2 ** (bits - 1) - 1)
        assert float(jnp.max(jnp.abs(y - x))) <= step / 2 * (1 + 1e-5)
        assert len(np.unique(np.round(np.asarray(y) / step))) <= 2**bits - 1
    np.testing.assert_array_equal(P.fixed_point_quantizer(8)(jnp.zeros(3), None), jnp.zeros(3))


def test_write_point_floor_is_below_b2_and_composes_under_run_trials():
    # Reduced precision at every step on the QP (Example 5.3.4 / Appendix B.1.1): the
    # achieved error floor (the last 500 steps) sits at or below c/(1−c)·Δ with Δ the
    # measured ‖δ_k‖ over the last half (sxt.assert_precision_floor, Eq B.1 restarted
    # there). The bits are traced (one program for all), chained with stale reads under
    # run_trials. check_precision_floor draws formats itself: tests/testing/test_floors.py.
    qp = quadratic.fig53_problem()
    c = quadratic.contraction(qp)
    bits = jnp.array([4, 8, 12])
    hooks = lambda b: scarjax.chain(staleness.ssp(1, 0), P.precision(P.mantissa(b)))  # noqa: E731
    _, tr = scarjax.run_trials(qp, hooks, 3000, jax.random.split(jax.random.key(0), 3), hook_args=bits, workers=1)
    res = sxt.assert_precision_floor(tr, c, tail=0.5, window=1 / 6, name=qp.name)
    assert res.trials == 3 and res.floor_skipped == 0 and 0 < res.worst_floor <= 1
    # More bits, smaller floor.
    assert float(tr.distance[0, -1]) > float(tr.distance[2, -1])
    _, one = scarjax.run(qp, hooks(8), 3000, jax.random.split(jax.random.key(0), 3)[1], workers=1)
    np.testing.assert_allclose(one.distance, tr.distance[1], rtol=1e-5)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: P.mantissa(24), "bits"),
        (lambda: P.mantissa(-1), "bits"),
        (lambda: P.mantissa(2.5), "bits"),
        (lambda: P.fixed_point_quantizer(1), "bits"),
        (lambda: P.qsgd(0), "levels"),
        (lambda: P.float_format("float4"), "name"),
        (lambda: P.float_format("float16", stochastic=True, emulate=False), "emulate"),
        (lambda: P.round_float(jnp.ones(2), 3, stochastic=True), "key"),
    ],
)
def test_bad_inputs(make, match):
    with pytest.raises(ValueError, match=match):
        make()
    with pytest.raises(TypeError, match="quantizer"):
        P.precision(3)
