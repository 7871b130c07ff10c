"""Eq 3.10 batch-size optimisation and the LR scaling rules."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings, strategies as st

from scarjax import pollux as px

TRUE = px.ThroughputParams(0.01, 1e-3, 0.02, 2e-3, 0.05, 5e-3, 2.0)


def _brute(params, phi, m0, n, k, max_bsz, max_m, s_max):
    ms, ss = np.meshgrid(np.arange(1, max_m + 1), np.arange(s_max + 1), indexing="ij")
    tot = k * ms * (ss + 1)
    ok = (tot >= m0) & (tot <= max_bsz)
    gp = np.asarray(_GOODPUT(params, phi, m0, n, k, ms, ss))  # one compilation for all examples
    gp = np.where(ok, gp, -1.0)
    i = np.unravel_index(int(np.argmax(gp)), gp.shape)
    return float(gp[i]), (int(ms[i]), int(ss[i]))


_GOODPUT = jax.jit(lambda p, phi, m0, n, k, m, s: px.goodput(p, phi, m0, n, k, m, s))


@given(
    phi=st.floats(1.0, 5000.0),
    nk=st.sampled_from([(1, 1), (1, 2), (1, 4), (2, 4), (2, 8)]),
    m0=st.sampled_from([8, 16, 32]),
)
def test_optimum_matches_brute_force(phi, nk, m0):
    n, k = nk
    cfg = px.optimize_batch_size(
        TRUE, phi, m0, jnp.asarray(n), jnp.asarray(k), max_batch_size=256, max_local_bsz=24, max_accum_steps=4
    )
    gp_best, (m, s) = _brute(TRUE, phi, m0, n, k, 256, 24, 4)
    assert float(cfg.goodput) == pytest.approx(gp_best, rel=1e-4)
    assert float(cfg.goodput) == pytest.approx(
        float(px.goodput(TRUE, phi, m0, n, k, int(cfg.local_bsz), int(cfg.accum_steps))), rel=1e-5
    )


def test_constraints_respected_and_vectorised():
    n = jnp.array([1, 1, 1, 2, 4])
    k = jnp.array([1, 2, 4, 8, 16])
    cfg = px.optimize_batch_size(TRUE, 2000.0, 32, n, k, max_batch_size=2048, max_local_bsz=64)
    assert cfg.local_bsz.shape == (5,)
    assert np.all(cfg.local_bsz <= 64) and np.all(cfg.local_bsz >= 1)
    tot = k * cfg.local_bsz * (cfg.accum_steps + 1)
    np.testing.assert_array_equal(tot, cfg.total_batch_size)
    assert np.all(tot <= 2048) and np.all(tot >= 32)
    np.testing.assert_allclose(cfg.goodput, cfg.throughput * cfg.efficiency, rtol=1e-5)


def test_memory_cap_forces_accumulation_for_large_phi():
    # Large inter-node sync time: accumulating amortises it once m hits the memory cap.
    cfg = px.optimize_batch_size(
        TRUE._replace(alpha_sync_node=1.0), 1e6, 32, 2, 4, max_batch_size=4096, max_local_bsz=64
    )
    assert int(cfg.local_bsz) == 64 and int(cfg.accum_steps) >= 1


def test_small_phi_keeps_base_batch():
    cfg = px.optimize_batch_size(TRUE, 0.0, 32, 1, 1, max_batch_size=1024, max_local_bsz=128)
    assert int(cfg.total_batch_size) == 32


def test_require_two_gradients_and_step():
    cfg = px.optimize_batch_size(
        TRUE,
        1e4,
        32,
        1,
        1,
        max_batch_size=1024,
        max_local_bsz=128,
        require_two_gradients=True,
        local_bsz_step=16,
    )
    assert int(cfg.accum_steps) >= 1 or int(cfg.total_batch_size) == 32
    assert int(cfg.local_bsz) % 16 == 0


def test_infeasible_allocation_marked():
    cfg = px.optimize_batch_size(
        TRUE,
        10.0,
        32,
        jnp.array([1, 4]),
        jnp.array([1, 64]),
        max_batch_size=48,
        max_local_bsz=8,
        min_local_bsz=1,
    )
    assert int(cfg.local_bsz[1]) == 0 and float(cfg.goodput[1]) == 0.0
    assert int(cfg.local_bsz[0]) > 0


def test_optimize_bad_inputs():
    with pytest.raises(ValueError, match="max_batch_size"):
        px.optimize_batch_size(TRUE, 1.0, 64, 1, 1, max_batch_size=32, max_local_bsz=8)
    with pytest.raises(ValueError, match="max_local_bsz"):  # scarjax.validate.check_int
        px.optimize_batch_size(TRUE, 1.0, 8, 1, 1, max_batch_size=32, max_local_bsz=8.5)
    with pytest.raises(ValueError, match="phi"):
        px.optimize_batch_size(TRUE, -1.0, 8, 1, 1, max_batch_size=32, max_local_bsz=8)
    with pytest.raises(ValueError, match="local_bsz_step"):
        px.optimize_batch_size(TRUE, 1.0, 8, 1, 1, max_batch_size=32, max_local_bsz=8, local_bsz_step=16)


# ------------------------------------------------------------------------- LR scaling


@given(phi=st.floats(0.0, 1e6), r=st.floats(1.0, 100.0))
def test_lr_rules(phi, r):
    m0 = 32.0
    m = m0 * r
    assert float(px.lr_scale("linear", m, m0)) == pytest.approx(r, rel=1e-5)
    assert float(px.lr_scale("sqrt", m, m0)) == pytest.approx(np.sqrt(r), rel=1e-5)
    gain = float(px.lr_scale("adascale", m, m0, phi=phi))
    # AdaScale gain r = (sigma^2 + mu^2) / (sigma^2/S + mu^2) with sigma^2 = tr(Sigma)/M0.
    mu2, var = 1.0, phi  # any |g|^2 > 0 with tr(Sigma) = phi |g|^2
    expect = (var / m0 + mu2) / (var / m + mu2)
    assert gain == pytest.approx(expect, rel=1e-4)
    assert 1.0 - 1e-5 <= gain <= r * (1 + 1e-5)


def test_legw_warmup():
    assert float(px.lr_scale("legw", 128, 32, progress=0.0, warmup_examples=1000)) == 0.0
    assert float(px.lr_scale("legw", 128, 32, progress=500.0, warmup_examples=1000)) == pytest.approx(1.0)
    assert float(px.lr_scale("legw", 128, 32, progress=5e3, warmup_examples=1000)) == pytest.approx(2.0)


def test_scale_by_lr_rule_transform():
    params = {"w": jnp.ones(3)}
    opt = optax.chain(optax.sgd(0.1), px.scale_by_lr_rule("linear", 32))
    st_ = opt.init(params)
    u, st_ = opt.update({"w": jnp.ones(3)}, st_, params, batch_size=128)
    np.testing.assert_allclose(u["w"], -0.1 * 4 * np.ones(3), rtol=1e-6)
    opt = px.scale_by_lr_rule("adascale", 32)
    with pytest.raises(ValueError, match="phi"):
        opt.update({"w": jnp.ones(3)}, opt.init(params), batch_size=64)
    u, s = jax.jit(lambda g, s: opt.update(g, s, batch_size=64.0, phi=32.0))(
        {"w": jnp.ones(3)}, opt.init(params)
    )
    assert float(s.scale) == pytest.approx(2 * 64 / 96)


def test_set_learning_rate_inject_hyperparams():
    params = {"w": jnp.ones(3)}
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=0.1)
    st_ = px.set_learning_rate(opt.init(params), 0.4)
    u, _ = opt.update({"w": jnp.ones(3)}, st_, params)
    np.testing.assert_allclose(u["w"], -0.4 * np.ones(3), rtol=1e-6)
    with pytest.raises(ValueError, match="inject_hyperparams"):
        px.set_learning_rate(optax.sgd(0.1).init(params), 0.4)


def test_lr_bad_inputs():
    with pytest.raises(ValueError, match="rule"):
        px.lr_scale("cubic", 64, 32)
    with pytest.raises(ValueError, match="phi"):
        px.lr_scale("adascale", 64, 32)
    with pytest.raises(ValueError, match="legw"):
        px.lr_scale("legw", 64, 32)


# ------------------------------------------------- exact search == exhaustive reference

_STATICS = [  # (max_local_bsz, min_local_bsz, local_bsz_step, max_accum_steps, require_two_gradients)
    (64, 1, 1, 6, False),
    (64, 1, 1, 6, True),
    (50, 4, 3, 3, True),
    (7, 1, 1, 0, False),
]
_pos = st.floats(1e-5, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    p=st.tuples(_pos, _pos, _pos, _pos, _pos, _pos, st.floats(1.0, 10.0)),
    zeros=st.lists(st.booleans(), min_size=6, max_size=6),
    phi=st.one_of(st.floats(0.0, 1e5), st.just(float("inf")), st.just(0.0)),
    m0=st.one_of(st.sampled_from([1, 8, 32]), st.floats(1.0, 100.0)),
    max_bsz_extra=st.integers(0, 2000),
    statics=st.sampled_from(_STATICS),
    seed=st.integers(0, 2**16),
)
def test_search_equals_exhaustive(p, zeros, phi, m0, max_bsz_extra, statics, seed):
    # Some alpha/beta exactly 0 (but T_grad > 0 so goodput stays finite).
    p = [0.0 if z and i != 1 else v for i, (v, z) in enumerate(zip(p[:6], zeros))] + [p[6]]
    params = px.ThroughputParams(*p)
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 20, size=6)
    k[0] = 1
    n = np.minimum(rng.integers(1, 5, size=6), k)
    m_hi, m_lo, step, s_max, two = statics
    kw = dict(
        max_batch_size=int(np.ceil(m0)) + max_bsz_extra,
        max_local_bsz=m_hi,
        min_local_bsz=m_lo,
        local_bsz_step=step,
        max_accum_steps=s_max,
        require_two_gradients=two,
    )
    fast = px.optimize_batch_size(params, phi, m0, n, k, **kw)
    ref = px.optimize_batch_size(params, phi, m0, n, k, method="exhaustive", **kw)
    np.testing.assert_array_equal(np.asarray(fast.local_bsz) > 0, np.asarray(ref.local_bsz) > 0)
    np.testing.assert_allclose(fast.goodput, ref.goodput, rtol=2e-5)
    tot = np.asarray(fast.total_batch_size)
    ok = np.asarray(fast.local_bsz) > 0
    m0_32 = np.float32(m0)  # the optimiser works in float32
    assert np.all((tot[ok] >= m0_32) & (tot[ok] <= kw["max_batch_size"]))
    assert np.all(np.asarray(fast.local_bsz)[ok] % step == 0)
    assert np.all(np.asarray(fast.accum_steps) <= s_max)
