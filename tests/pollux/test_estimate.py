"""estimate_pgns_at: phi at fixed parameters over many draws vs the exact per-example phi."""

import functools

import jax
import numpy as np
import optax
import pytest

from scarjax import pollux as px
from scarjax import testing as sxt
from scarjax.pollux import examples


@functools.lru_cache(maxsize=None)
def _mlr_params():
    prob = examples.mlr()

    def step(params, key):  # plain SGD, learning rate 0.1
        xb, yb = examples.sample_microbatches(key, prob.x, prob.y, 1, 32)
        return jax.tree.map(lambda w, g: w - 0.1 * g, params, jax.grad(prob.loss)(params, xb[0], yb[0])), None

    params, _ = jax.lax.scan(jax.jit(step), prob.params, jax.random.split(jax.random.PRNGKey(0), 40))
    return prob, params


def test_estimate_matches_exact_within_standard_errors():
    """Identity P and Adam's P (non-default b2/eps, read from the optimizer): the kit's check
    (``scarjax.testing.check_pgns_unbiased``: the averaged sqr and var of estimate_pgns_at's
    draws match the exact |Pg|^2 and tr(P Sigma P^T), false-alarm rate 1e-3) passes; its phi,
    standard error and exact phi are estimate_pgns_at's for the same key; the exact value
    equals exact_stats on all per-example gradients, and the standard error is a few percent."""
    prob, params = _mlr_params()
    data = (prob.x, prob.y)

    @jax.jit
    def exact_phi(p):  # the reference: exact_stats on all per-example gradients at once
        peg = px.per_example_grads(prob.example_loss, params, prob.x, prob.y)
        return px.noise_scale(px.exact_stats(peg, p))

    adam = optax.adamw(1e-3, b2=0.9, eps=1e-2)
    xb, yb = examples.sample_microbatches(jax.random.PRNGKey(10), prob.x, prob.y, 5, 32)
    st = jax.lax.scan(
        lambda s, b: (adam.update(jax.grad(prob.loss)(params, *b), s, params)[1], None), adam.init(params), (xb, yb)
    )[0]
    exact = {}
    for name, opt, state in (("identity", None, None), ("adam", adam, st)):
        res = sxt.check_pgns_unbiased(prob.loss, params, data, microbatch_size=32, optimizer=opt, opt_state=state,
                                      settings=3)
        est = px.estimate_pgns_at(
            prob.loss, params, data, microbatch_size=32, key=jax.random.split(jax.random.key(res.seed))[1],
            draws=res.draws, opt_state=state, optimizer=opt,
        )
        assert (est.phi, est.exact_phi) == pytest.approx((res.phi, res.exact_phi), rel=1e-6)
        assert est.stderr == pytest.approx(res.stderr, rel=1e-4)
        exact[name] = float(exact_phi(None if state is None else px.preconditioner(st, adam)))
        assert res.exact_phi == pytest.approx(exact[name], rel=1e-4)
        assert 0 < res.stderr < 0.05 * res.phi, res
    assert abs(exact["adam"] / exact["identity"] - 1) > 0.1  # P matters here: the two checks are different


def test_estimate_bad_inputs_name_the_argument():
    prob, params = _mlr_params()
    data = (prob.x, prob.y)
    key = jax.random.PRNGKey(0)
    call = functools.partial(px.estimate_pgns_at, prob.loss, params)
    with pytest.raises(ValueError, match="microbatches"):
        call(data, microbatch_size=8, key=key, microbatches=1)
    with pytest.raises(ValueError, match="microbatch_size"):  # scarjax.validate.check_int
        call(data, microbatch_size=8.5, key=key)
    with pytest.raises(ValueError, match="draws"):
        call(data, microbatch_size=8, key=key, draws=1)
    with pytest.raises(ValueError, match="leading"):
        call((prob.x, prob.y[:10]), microbatch_size=8, key=key)
    with pytest.raises(ValueError, match="either preconditioner= or opt_state="):
        call(data, microbatch_size=8, key=key, preconditioner=params, opt_state=optax.sgd(0.1).init(params))
    with pytest.raises(ValueError, match="structure of params"):
        call(data, microbatch_size=8, key=key, preconditioner={"w": params["w"]})
    with pytest.raises(TypeError, match="key"):
        call(data, microbatch_size=8, key="seed")
    est = call(data, microbatch_size=8, key=key, draws=2, exact=False)
    assert np.isnan(est.exact_phi) and est.exact is None and est.draws == 2


def test_example_mlr_weights_are_the_2d_normal_draw():
    """examples.mlr draws its initial weights flat and reshapes them (faster to compile): the
    numbers of ``jax.random.normal(key, (64, 10))``. Planted violation: the flat draw laid out
    column-major is another matrix."""
    key = jax.random.PRNGKey(3)
    w = np.asarray(examples.mlr(key, scale=0.5).params["w"])
    np.testing.assert_array_equal(w, 0.5 * np.asarray(jax.random.normal(key, (64, 10))))
    flat = np.asarray(jax.random.normal(key, (640,)))
    assert not np.array_equal(w, 0.5 * flat.reshape(10, 64).T)
