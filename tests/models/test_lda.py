"""Tests for scarjax.models.lda (parallel collapsed Gibbs LDA, thesis Sec 5.5.1)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import scarjax
from scarjax.core import State
from scarjax.models import lda


@pytest.fixture(scope="module")
def alg():
    return lda.synthetic(n_docs=12, n_words=30, doc_length=15, true_topics=3, n_topics=5)


def _check_consistent(state, data, n_words, exact=True):
    z, n_wk, n_k = state.aux
    lengths = np.asarray(data["doc_lengths"])
    np.testing.assert_allclose(np.asarray(state.params).sum(1), lengths, atol=0 if exact else 1e-3)  # = L_d
    np.testing.assert_array_equal(np.asarray(n_wk).sum(1), np.bincount(data["tokens"], minlength=n_words))
    np.testing.assert_array_equal(np.asarray(n_wk).sum(0), n_k)
    ref_dk, ref_wk, _ = lda.counts(z, data, state.params.shape[0], n_words, state.params.shape[1])
    np.testing.assert_allclose(state.params, ref_dk, atol=0 if exact else 1e-4)
    np.testing.assert_array_equal(n_wk, ref_wk)


def test_shapes_and_init(alg):
    s = alg.init(jax.random.key(0), alg.data)
    assert s.params.shape == (12, 5) and s.params.dtype == jnp.float32
    assert s.aux.z.shape == (12 * 15,) and s.aux.z.dtype == jnp.int32
    assert s.aux.n_wk.shape == (30, 5)
    _check_consistent(s, alg.data, 30)
    np.testing.assert_array_equal(lda.doc_of_token(alg), alg.data["doc_ids"])


def test_counts_consistent_after_sweeps_and_loss_decreases(alg):
    s, tr = scarjax.run(alg, None, 40, jax.random.key(1))
    _check_consistent(s, alg.data, 30)
    loss = np.asarray(tr.loss)
    assert np.isfinite(loss).all()
    assert loss[-5:].mean() < loss[0]


def test_determinism(alg):
    _, t1 = scarjax.run(alg, None, 5, jax.random.key(2))
    _, t2 = scarjax.run(alg, None, 5, jax.random.key(2))
    _, t3 = scarjax.run(alg, None, 5, jax.random.key(3))
    np.testing.assert_array_equal(t1.loss, t2.loss)
    assert not np.array_equal(t1.loss, t3.loss)


def test_rebuild_counts_after_restoring_z(alg):
    s = alg.init(jax.random.key(0), alg.data)
    z2 = jnp.where(alg.data["doc_ids"] < 4, (s.aux.z + 1) % 5, s.aux.z)  # "restored" docs 0-3
    broken = State(s.params * 0.0 + 3.0, s.aux._replace(z=z2))
    fixed = jax.jit(lda.rebuild_counts)(broken, alg.data)
    _check_consistent(fixed, alg.data, 30)
    np.testing.assert_array_equal(fixed.aux.z, z2)


def test_update_robust_to_perturbed_params(alg):
    s = alg.init(jax.random.key(0), alg.data)
    bad = s.params + 5.0 * jax.random.normal(jax.random.key(9), s.params.shape)  # negative, fractional
    delta, new = jax.jit(alg.update)(bad, s._replace(params=bad), alg.data, jax.random.key(1))
    stored = State(bad + delta, new.aux)
    _check_consistent(stored, alg.data, 30, exact=False)  # servers back in sync with z (up to rounding)
    assert np.isfinite(float(alg.loss(s._replace(params=bad), alg.data)))


def test_loss_is_corpus_nll(alg):
    s = alg.init(jax.random.key(0), alg.data)
    nd, nwk = np.asarray(s.params, np.float64), np.asarray(s.aux.n_wk, np.float64)
    theta = (nd + 1) / (nd.sum(1, keepdims=True) + 5)
    phi = (nwk + 1) / (nwk.sum(0) + 30)
    d, w = np.asarray(alg.data["doc_ids"]), np.asarray(alg.data["tokens"])
    ref = -np.log((theta[d] * phi[w]).sum(1)).sum()
    np.testing.assert_allclose(alg.loss(s, alg.data), ref, rtol=1e-5)


tables = arrays(np.float32, (4, 3), elements=st.floats(-50, 50, width=32))


@settings(max_examples=25, deadline=None)
@given(a=tables, b=tables, c=st.floats(-10, 10))
def test_scaled_tv_is_a_norm(a, b, c):
    n = lambda x: float(lda.scaled_tv_norm(jnp.asarray(x)))  # noqa: E731
    assert n(a + b) <= n(a) + n(b) + 1e-3
    np.testing.assert_allclose(n(np.float32(c) * a), abs(c) * n(a), rtol=1e-4, atol=1e-3)
    assert (n(a) == 0) == (not np.any(a))


@settings(max_examples=25, deadline=None)
@given(
    counts=arrays(np.int64, (2, 5, 4), elements=st.integers(0, 9)),
)
def test_scaled_tv_equals_length_weighted_tv(counts):
    n1, n2 = counts[0].astype(np.float64), counts[1].astype(np.float64)
    # equal document lengths, as for two count tables of the same corpus
    n2 = n2 + (n1.sum(1) - n2.sum(1)).clip(0)[:, None] * np.eye(4)[0]
    n1 = n1 + (n2.sum(1) - n1.sum(1)).clip(0)[:, None] * np.eye(4)[1]
    lengths = n1.sum(1)
    keep = lengths > 0
    th1, th2 = n1[keep] / lengths[keep, None], n2[keep] / lengths[keep, None]
    ref = (lengths[keep] * 0.5 * np.abs(th1 - th2).sum(1)).sum()
    np.testing.assert_allclose(float(lda.scaled_tv_norm(jnp.asarray(n1 - n2, jnp.float32))), ref, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(corpus=(np.array([0, 1]), np.array([0]))), "same shape"),
        (dict(corpus=(np.array([0, -1]), np.array([0, 0]))), ">= 0"),
        (dict(corpus=(np.array([0, 1]), np.array([0, 2]))), "densely"),
        (dict(corpus=(np.array([0, 1]), np.array([0, 0])), n_topics=0), "n_topics"),
        (dict(corpus=(np.array([0, 1]), np.array([0, 0])), alpha=0.0), "alpha"),
        (dict(corpus=(np.array([0, 5]), np.array([0, 0])), n_words=3), "n_words"),
        (dict(corpus=(np.array([0.5]), np.array([0]))), "integer"),
        (dict(corpus=(np.array([0, 1]), np.array([0, 0])), reduction="max"), "reduction"),
    ],
)
def test_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        lda.lda(**kwargs)


def test_bad_corpus_type():
    with pytest.raises(TypeError, match="corpus"):
        lda.lda("not a corpus")


def test_lee_smoke(shared_data):
    path = shared_data("text/lee_background.cor")
    alg = lda.lee(path)
    s, tr = scarjax.run(alg, None, 8, jax.random.key(0))
    assert s.params.shape == (300, 20)
    loss = np.asarray(tr.loss)
    assert np.isfinite(loss).all() and loss[-1] < loss[0]
    np.testing.assert_array_equal(np.asarray(s.params).sum(1), alg.data["doc_lengths"])


def test_update_is_the_unfused_sweep_plus_counts(alg):
    """The materialised sweep (a one-trip loop, for speed) gives exactly gibbs_sweep +
    counts, alone and under vmap."""
    keys = jax.random.split(jax.random.key(4), 3)
    s = jax.vmap(lambda k: alg.init(k, alg.data))(keys)
    D, K = s.params.shape[1:]
    W = s.aux.n_wk.shape[1]

    def ref(st, k):
        z = lda.gibbs_sweep(st.params, st.aux.z, st.aux.n_wk, st.aux.n_k, alg.data, k, 1.0, 1.0)
        n_dk, n_wk, n_k = lda.counts(z, alg.data, D, W, K)
        return n_dk - st.params, z, n_wk, n_k

    def new(st, k):
        delta, out = alg.update(st.params, st, alg.data, k)
        return delta, out.aux.z, out.aux.n_wk, out.aux.n_k

    got = jax.jit(jax.vmap(new))(s, keys)
    want = jax.jit(jax.vmap(ref))(s, keys)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    one = jax.jit(new)(jax.tree.map(lambda x: x[1], s), keys[1])
    for g, w in zip(one, want):
        np.testing.assert_array_equal(g, w[1])


def test_vmapped_trial_equals_single_run(alg):
    keys = jax.random.split(jax.random.key(5), 3)
    _, tr = scarjax.run_trials(alg, None, 6, keys)
    _, t1 = scarjax.run(alg, None, 6, keys[2])
    np.testing.assert_allclose(tr.loss[2], t1.loss, rtol=1e-6)
