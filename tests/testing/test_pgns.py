"""scarjax.testing.check_pgns_unbiased: the library's PGNS statistics are unbiased for the
exact per-example |Pg|^2 and tr(P Sigma P^T) (App. A.1) at the stated false-alarm rate;
planted biased estimators are caught with a readable counterexample."""

import functools

import jax
import jax.numpy as jnp
import optax
import pytest
from hypothesis import strategies as st
from scipy import stats as sps

from scarjax import pollux as px
from scarjax import testing as sxt
from scarjax.pollux import examples


@functools.lru_cache(maxsize=None)
def _mlr():
    prob = examples.mlr()  # zero weights: phi ~ 25
    return prob, (prob.x, prob.y)


def _k(grads):
    return jax.tree.leaves(grads)[0].shape[0]


def no_bessel(grads, b, p):
    """The spread of the K micro-batch means without the K/(K-1) correction: var x (K-1)/K."""
    s = px.microbatch_stats(grads, b, p)
    return px.GradStats(s.sqr, s.var * (_k(grads) - 1) / _k(grads))


def per_microbatch_variance(grads, b, p):
    """Omits the micro-batch-size factor: the variance of a micro-batch mean, tr(P Sigma P^T)/b."""
    s = px.microbatch_stats(grads, b, p)
    return px.GradStats(s.sqr, s.var / b)


def uncorrected_norm(grads, b, p):
    """|P mean_k g_k|^2 for |Pg|^2: biased up by tr(P Sigma P^T)/B."""
    g = jax.tree.map(lambda x: x.mean(0), grads)
    pg = g if p is None else jax.tree.map(lambda q, x: q * x, p, g)
    return px.GradStats(sum(jnp.sum(x**2) for x in jax.tree.leaves(pg)), px.microbatch_stats(grads, b, p).var)


def test_library_estimator_passes_with_adam_along_a_short_run():
    """Adam's P (non-default b2/eps read from the optimizer) at points after 0-3 updates;
    the whole check's false-alarm rate is 1e-3 (Bonferroni over the cases)."""
    prob, data = _mlr()
    adam = optax.adamw(1e-2, b2=0.9, eps=1e-2)
    res = sxt.check_pgns_unbiased(prob.loss, prob.params, data, microbatch_size=32, optimizer=adam, max_steps=3,
                                  settings=6)
    assert res.examples == 6 and res.false_alarm == 1e-3 and res.draws == 200
    assert res.threshold == pytest.approx(sps.t.ppf(1 - 1e-3 / 6 / 4, 199))
    assert abs(res.sqr.t) <= res.threshold and abs(res.var.t) <= res.threshold
    assert "PGNS statistics unbiased" in res.summary() and "6 cases" in res.summary()


@pytest.mark.parametrize(
    "estimator, biased, sizes",
    [
        (no_bessel, "tr(P Sigma P^T)", st.sampled_from([16, 32])),
        (per_microbatch_variance, "tr(P Sigma P^T)", 16),
        (uncorrected_norm, "|Pg|^2", 16),
    ],
)
def test_planted_biased_estimators_are_caught(estimator, biased, sizes):
    """Caught and shrunk: to the check's seed and the smallest micro-batch size drawn."""
    prob, data = _mlr()
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_pgns_unbiased(prob.loss, prob.params, data, microbatch_size=sizes, estimator=estimator, seed=3)
    msg = str(e.value)
    assert msg.startswith(f"PGNS (Eq 3.2, App. A.1): the estimator is biased for {biased}\n"), msg
    for part in (f"estimator             : {estimator.__name__}", "optimizer             : identity P",
                 "micro-batches         : K = 8 of b = 16", "exact phi             : 24.9", "<-- biased",
                 "Student t, 199 dof", "seed                  : 3",
                 f"sxt.assert_pgns_unbiased(loss, params, data, microbatch_size=16, microbatches=8, "
                 "estimator=estimator, draws=200, false_alarm=0.0001, seed=3)"):
        assert part in msg, msg


def test_one_case_and_the_estimator_contract():
    """assert_pgns_unbiased is one case; the library's estimator given explicitly gives the
    same draws; an estimator must return two scalars."""
    prob, data = _mlr()
    one = sxt.assert_pgns_unbiased(prob.loss, prob.params, data, microbatch_size=16, seed=7)
    same = sxt.assert_pgns_unbiased(prob.loss, prob.params, data, microbatch_size=16, seed=7,
                                    estimator=px.microbatch_stats)
    assert one.examples == 1 and one.phi == pytest.approx(same.phi, rel=1e-6)
    assert one.threshold == pytest.approx(sps.t.ppf(1 - 1e-3 / 4, 199))
    with pytest.raises(TypeError, match="estimator must be a function"):
        sxt.assert_pgns_unbiased(prob.loss, prob.params, data, microbatch_size=16,
                                 estimator=lambda g, b, p: px.microbatch_stats(g, b, p).var)


def test_bad_arguments_name_the_argument():
    prob, data = _mlr()
    call = functools.partial(sxt.check_pgns_unbiased, prob.loss, prob.params, data)
    with pytest.raises(ValueError, match="draws"):
        call(microbatch_size=8, draws=5)
    with pytest.raises(ValueError, match="false_alarm"):
        call(microbatch_size=8, false_alarm=0.0)
    with pytest.raises(ValueError, match="max_steps=2 needs optimizer="):
        call(microbatch_size=8, max_steps=2)
    with pytest.raises(ValueError, match="microbatches"):
        call(microbatch_size=8, microbatches=1)
    with pytest.raises(ValueError, match="microbatch_size"):
        sxt.assert_pgns_unbiased(prob.loss, prob.params, data, microbatch_size=0)
    with pytest.raises(TypeError, match="loss"):
        sxt.assert_pgns_unbiased("loss", prob.params, data, microbatch_size=8)
