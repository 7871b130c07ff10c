"""PGNS estimators (Eq 3.2, App. A.1), pre-conditioners from optax states, transforms."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from scarjax import pollux as px
from scarjax.pollux import _estimators, examples


# ---------------------------------------------------------------- synthetic ground truth


def _gaussian_case(key, dim=6):
    k1, k2, k3 = jax.random.split(key, 3)
    mu = jax.random.normal(k1, (dim,))
    a = jax.random.normal(k2, (dim, dim))
    sigma = a @ a.T / dim + 0.5 * jnp.eye(dim)
    p = jnp.exp(0.5 * jax.random.normal(k3, (dim,)))  # a diagonal pre-conditioner
    return mu, sigma, p


@pytest.mark.parametrize("k,b", [(2, 4), (8, 16)])
def test_microbatch_estimator_is_unbiased(k, b):
    """E[sqr] = |P mu|^2 and E[var] = tr(P Sigma P^T) for micro-batch means ~ N(mu, Sigma/b)."""
    mu, sigma, p = _gaussian_case(jax.random.PRNGKey(k))
    chol = jnp.linalg.cholesky(sigma / b)
    draws = 40_000

    def one(key):
        g = mu + jax.random.normal(key, (k, mu.size)) @ chol.T
        st = px.microbatch_stats({"w": g}, b, {"w": p})
        return jnp.stack([st.sqr, st.var])

    est = jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(1), draws))
    mean, se = est.mean(0), est.std(0) / np.sqrt(draws)
    truth = jnp.array([jnp.sum((p * mu) ** 2), jnp.trace(jnp.diag(p) @ sigma @ jnp.diag(p))])
    assert np.all(np.abs(mean - truth) < 5 * se + 1e-4), (mean, truth, se)


def test_exact_stats_and_identity_reduction():
    """P = I gives the simple GNS tr(Sigma)/|g|^2 [150]; a scalar P leaves phi unchanged."""
    g = jax.random.normal(jax.random.PRNGKey(0), (500, 7)) + 0.3
    ex = px.exact_stats({"w": g})
    assert float(ex.sqr) == pytest.approx(float(jnp.sum(g.mean(0) ** 2)), rel=1e-5)
    assert float(ex.var) == pytest.approx(float(jnp.trace(jnp.cov(g.T, bias=True))), rel=1e-4)
    scaled = px.exact_stats({"w": g}, {"w": 3.0 * jnp.ones(7)})
    assert float(px.noise_scale(scaled)) == pytest.approx(float(px.noise_scale(ex)), rel=1e-5)


def test_microbatch_stats_matches_per_microbatch_norms_and_accumulates_low_precision_in_f32():
    """The one-pass (variadic-reduction) statistics equal the textbook form built from
    per-micro-batch norms, for a multi-leaf tree with a scalar leaf and a diagonal P; bf16
    gradients are accumulated in float32."""
    keys = jax.random.split(jax.random.PRNGKey(3), 6)
    g = {"w": jax.random.normal(keys[0], (6, 5, 4)) + 0.2, "b": jax.random.normal(keys[1], (6,))}
    p = {"w": jax.random.uniform(keys[2], (5, 4), minval=0.5, maxval=2.0), "b": jnp.asarray(1.5)}
    b = 16
    small = jnp.mean(jax.vmap(lambda gk: _estimators._sq_norm(gk, p))(g))
    big = _estimators._sq_norm(jax.tree.map(lambda x: x.mean(0), g), p)
    want = px.two_batch_stats(small, big, b, 6 * b)
    got = px.microbatch_stats(g, b, p)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    g16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), g)
    got16 = px.microbatch_stats(g16, b, p)
    want16 = px.microbatch_stats(jax.tree.map(lambda x: x.astype(jnp.float32), g16), b, p)
    assert got16.sqr.dtype == jnp.float32
    np.testing.assert_allclose(got16, want16, rtol=1e-5)


def test_noise_scale_never_nan():
    assert float(px.noise_scale(px.GradStats(jnp.float32(-1.0), jnp.float32(2.0)))) == np.inf
    assert float(px.noise_scale(px.GradStats(jnp.float32(1.0), jnp.float32(-2.0)))) == 0.0
    assert float(px.noise_scale(px.GradStats(jnp.float32(0.0), jnp.float32(0.0)))) == np.inf


# ------------------------------------------------------- estimator vs exact on MLR and CNN

K, B = 8, 32  # micro-batches per step, examples per micro-batch


@functools.lru_cache(maxsize=None)
def _trained(name):
    prob = examples.mlr() if name == "mlr" else examples.cnn()
    opt = optax.sgd(0.1)
    params, st = prob.params, opt.init(prob.params)

    @jax.jit
    def step(carry, key):
        params, st = carry
        xb, yb = examples.sample_microbatches(key, prob.x, prob.y, 1, 32)
        g = jax.grad(prob.loss)(params, xb[0], yb[0])
        u, st = opt.update(g, st, params)
        return (optax.apply_updates(params, u), st), None

    (params, _), _ = jax.lax.scan(step, (params, st), jax.random.split(jax.random.PRNGKey(0), 60))
    return prob, params


@pytest.mark.parametrize("name,steps", [("mlr", 100), pytest.param("cnn", 400, marks=pytest.mark.slow)])  # cnn: long, CI's `-m slow` step
def test_estimator_within_10pct_of_exact(name, steps):
    """Averaging `steps` estimates (K=8 micro-batches of 32, drawn with replacement) at fixed
    params gives phi within 10% of the exact per-example value (Eq 3.2)."""
    prob, params = _trained(name)
    peg = jax.jit(lambda p: px.per_example_grads(prob.example_loss, p, prob.x, prob.y))(params)
    phi_exact = float(px.noise_scale(px.exact_stats(peg)))

    opt = px.track_pgns(microbatch_size=B, decay=1.0 - 1.0 / steps)

    def body(state, key):
        xb, yb = examples.sample_microbatches(key, prob.x, prob.y, K, B)
        g, m = px.reduce_microbatches(jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb))
        _, state = opt.update(g, state, params, microbatch_moments=m)
        return state, None

    state, _ = jax.jit(lambda s, ks: jax.lax.scan(body, s, ks))(
        opt.init(params), jax.random.split(jax.random.PRNGKey(7), steps)
    )
    phi = float(px.pgns_from_state(state))
    assert int(state.count) == steps and not bool(state.biased)
    assert abs(phi / phi_exact - 1) < 0.10, (phi, phi_exact)


def test_adam_preconditioned_estimator_matches_exact():
    """With P from Adam's state, the estimator tracks the exact PGNS with the same P."""
    prob, params = _trained("mlr")
    inner = optax.adam(1e-3)
    opt = px.with_pgns(inner, microbatch_size=B, decay=0.99)
    state = opt.init(params)

    # Warm Adam's second moments up with a few steps at (nearly) the same params.
    def body(state, key):
        xb, yb = examples.sample_microbatches(key, prob.x, prob.y, K, B)
        g, m = px.reduce_microbatches(jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb))
        _, state = opt.update(g, state, params, microbatch_moments=m)
        return state, None

    state, _ = jax.jit(lambda s, ks: jax.lax.scan(body, s, ks))(
        state, jax.random.split(jax.random.PRNGKey(3), 300)
    )
    p = px.preconditioner(state, inner)
    peg = px.per_example_grads(prob.example_loss, params, prob.x, prob.y)
    phi_exact_p = float(px.noise_scale(px.exact_stats(peg, p)))
    phi_exact_i = float(px.noise_scale(px.exact_stats(peg)))
    phi = float(px.pgns_from_state(state))
    assert abs(phi / phi_exact_p - 1) < 0.2, (phi, phi_exact_p)
    assert abs(phi_exact_p / phi_exact_i - 1) > 0.05  # P actually matters here


def test_differenced_estimator_flagged_biased():
    """One gradient per step (no microbatch_moments, as inside scarjax.from_optax, or K = 1
    moments): the differenced estimator over consecutive steps, flagged biased."""
    prob, params = _trained("mlr")
    opt = px.track_pgns(microbatch_size=B)
    update = jax.jit(opt.update)
    state = opt.init(params)
    xb, yb = examples.sample_microbatches(jax.random.PRNGKey(0), prob.x, prob.y, 3, B)
    state_k1 = state
    for i in range(2):  # single replica, no accumulation
        g = jax.grad(prob.loss)(params, xb[i], yb[i])
        _, state = update(g, state, params)
        _, m1 = px.reduce_microbatches(jax.tree.map(lambda x: x[None], g))
        _, state_k1 = update(g, state_k1, params, microbatch_moments=m1)
    assert bool(state.biased) and int(state.count) == 1  # first step only stores g
    np.testing.assert_array_equal(state_k1.last, state.last)  # K = 1 moments: the same pair
    direct = px.differenced_stats(
        jax.grad(prob.loss)(params, xb[0], yb[0]), jax.grad(prob.loss)(params, xb[1], yb[1]), B
    )
    np.testing.assert_allclose(state.last, direct, rtol=1e-4)
    # Switching to K >= 2 discards the biased averages.
    g, m = px.reduce_microbatches(jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb))
    _, state = update(g, state, params, microbatch_moments=m)
    assert not bool(state.biased)
    assert float(px.smoothed_stats(state).sqr) == pytest.approx(float(state.last.sqr), rel=1e-5)
    # ... and marks the stored gradient stale: back at K = 1, the first step only stores g
    # again instead of differencing against the gradient of two steps ago.
    assert not bool(state.has_prev)
    count = int(state.count)
    g2 = jax.grad(prob.loss)(params, xb[2], yb[2])
    _, state = update(g2, state, params)
    assert int(state.count) == count and bool(state.has_prev)


def test_nonfinite_gradients_skipped_and_counted():
    opt = px.track_pgns(microbatch_size=4)
    params = {"w": jnp.zeros(3)}
    state = opt.init(params)
    for value in (1.0, jnp.nan):
        g, m = px.reduce_microbatches({"w": jnp.full((2, 3), value)})
        _, state = opt.update(g, state, params, microbatch_moments=m)
    assert int(state.count) == 1 and int(state.nonfinite) == 1
    assert np.isfinite(float(px.pgns_from_state(state)))


# --------------------------------------------------------------- pre-conditioners (optax)

PARAMS = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}


def _stepped(opt, n=2):
    st = opt.init(PARAMS)
    for i in range(n):
        g = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(i), x.shape) + 0.5, PARAMS)
        _, st = opt.update(g, st, PARAMS)
    return st


def _nu_of(st):
    return jax.tree.leaves(st)[0]


@pytest.mark.parametrize(
    "opt", [optax.sgd(0.1), optax.sgd(0.1, momentum=0.9), optax.sgd(0.1, momentum=0.9, nesterov=True)]
)
def test_identity_for_sgd(opt):
    assert px.preconditioner(_stepped(opt)) is None


def test_adam_and_adamw_preconditioner():
    for opt in (optax.adam(1e-3), optax.adamw(1e-3, weight_decay=1e-2)):
        st = _stepped(opt)
        adam = st[0]
        p = px.preconditioner(st, opt)
        expect = jax.tree.map(lambda n: 1 / (jnp.sqrt(n / (1 - 0.999**2)) + 1e-8), adam.nu)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), p, expect)
    # Before any update: identity-like (all ones).
    p0 = px.preconditioner(optax.adam(1e-3).init(PARAMS), optax.adam(1e-3))
    assert all(np.all(np.asarray(x) == 1) for x in jax.tree.leaves(p0))


def test_adagrad_and_rmsprop_preconditioner():
    opt = optax.adagrad(0.1)
    st = _stepped(opt)
    p = px.preconditioner(st, opt)
    jax.tree.map(
        lambda a, s: np.testing.assert_allclose(a, 1 / np.sqrt(s + 1e-7), rtol=1e-5), p, st[0].sum_of_squares
    )
    opt = optax.rmsprop(0.1)
    st = _stepped(opt)
    p = px.preconditioner(st, opt)
    jax.tree.map(lambda a, n: np.testing.assert_allclose(a, 1 / np.sqrt(n + 1e-8), rtol=1e-5), p, st[0].nu)
    opt = optax.rmsprop(0.1, centered=True)
    st = _stepped(opt)
    p = px.preconditioner(st, opt)
    jax.tree.map(
        lambda a, m, n: np.testing.assert_allclose(a, 1 / np.sqrt(n - m * m + 1e-8), rtol=1e-4),
        p,
        st[0].mu,
        st[0].nu,
    )


def test_preconditioner_reads_injected_hyperparams_and_wrappers():
    opt = optax.inject_hyperparams(optax.adam)(learning_rate=1e-3, b2=0.9, eps=1e-3)
    st = _stepped(opt)
    p = px.preconditioner(st)  # every value P needs is in the injected state
    nu = st.inner_state[0].nu
    jax.tree.map(
        lambda a, n: np.testing.assert_allclose(a, 1 / (np.sqrt(n / (1 - 0.81)) + 1e-3), rtol=1e-5), p, nu
    )
    multi = optax.MultiSteps(optax.adam(1e-3), 2)
    assert px.preconditioner(_stepped(multi), multi) is not None
    chained = optax.chain(optax.clip_by_global_norm(1.0), optax.adam(1e-3))
    assert px.preconditioner(_stepped(chained), chained) is not None


@pytest.mark.parametrize("opt", [optax.lion(1e-3), optax.adafactor(1e-3), optax.novograd(1e-3)])
def test_clear_error_when_not_derivable(opt):
    with pytest.raises(ValueError, match="cannot derive"):
        px.preconditioner(opt.init(PARAMS))
    with pytest.raises(ValueError, match="cannot derive"):
        px.with_pgns(opt).init(PARAMS)
    px.with_pgns(opt, preconditioner="identity").init(PARAMS)  # the documented escape hatch


def test_error_for_unknown_state_and_ambiguity():
    class MyState(tuple):
        pass

    from typing import NamedTuple

    class Custom(NamedTuple):
        acc: jax.Array

    with pytest.raises(ValueError, match="unknown optimizer state Custom"):
        px.preconditioner((Custom(jnp.ones(3)),))
    with pytest.raises(ValueError, match="ambiguous"):
        px.preconditioner(optax.chain(optax.adam(1e-3), optax.adagrad(1e-3)).init(PARAMS))
    with pytest.raises(TypeError, match="not an optax state"):
        px.preconditioner(object())


# ------------------------------------------------------------------- optax integration


def _stacked(seed, k=4, shift=0.0):
    """K stacked micro-batch gradients with the structure of PARAMS."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 2)
    return {
        "w": jax.random.normal(keys[0], (k, 4, 3)) + 0.3 + shift,
        "b": jax.random.normal(keys[1], (k, 3)) - 0.2,
    }


def test_with_pgns_keeps_optax_contract_in_chain_jit_and_matches_plain_optimizer():
    """with_pgns(adam)'s updates are adam's updates of the gradient passed in (structure and
    values), the statistics are those of the moments, and it chains under jit."""
    grads, moments = px.reduce_microbatches(_stacked(0))
    np.testing.assert_allclose(grads["w"], _stacked(0)["w"].mean(0), rtol=1e-6)
    wrapped = optax.chain(
        px.with_pgns(optax.adam(1e-2), microbatch_size=8, warmup=0), px.scale_by_lr_rule("none", 8)
    )
    u_ref, _ = optax.adam(1e-2).update(grads, optax.adam(1e-2).init(PARAMS), PARAMS)
    st = wrapped.init(PARAMS)
    u, st = jax.jit(wrapped.update)(grads, st, PARAMS, microbatch_moments=moments)
    assert jax.tree.structure(u) == jax.tree.structure(grads)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), u, u_ref)
    pst = px.find_pgns_state(st)
    assert int(pst.count) == 1 and not bool(pst.biased)
    np.testing.assert_allclose(pst.last, px.microbatch_stats(_stacked(0), 8), rtol=1e-6)


def _run(opt, steps, params=PARAMS, extra=None):
    """Apply `opt` (jitted) to the given (grads, moments) steps; return the final state."""
    update = jax.jit(opt.update)
    state = opt.init(params)
    for g, m in steps:
        _, state = update(g, state, params, microbatch_moments=m, **(extra or {}))
    return state


def _steps(n=4):
    return [px.reduce_microbatches(_stacked(i, shift=0.1 * i)) for i in range(n)]


def _pgns(state):
    s = px.find_pgns_state(state)
    return np.asarray([*px.smoothed_stats(state), *s.last, s.count, s.steps], np.float64)


def test_apply_if_finite_composes_and_a_rejected_step_leaves_the_statistics():
    """optax.apply_if_finite(with_pgns(...)) (a lax.cond on the updates, which failed with a
    shape error when with_pgns took stacked gradients): on finite steps the statistics of the
    bare transform; a non-finite step is rejected whole, statistics included."""
    bare = px.with_pgns(optax.adam(1e-2), 8, warmup=0)
    safe = optax.apply_if_finite(px.with_pgns(optax.adam(1e-2), 8, warmup=0), max_consecutive_errors=3)
    steps = _steps()
    np.testing.assert_allclose(_pgns(_run(safe, steps)), _pgns(_run(bare, steps)), rtol=1e-6)
    nan = px.reduce_microbatches(jax.tree.map(lambda x: x.at[0].set(jnp.nan), _stacked(9)))
    with_nan = _run(safe, steps[:2] + [nan] + steps[2:])
    assert int(with_nan.total_notfinite) == 1
    np.testing.assert_allclose(_pgns(with_nan), _pgns(_run(bare, steps)), rtol=1e-6)


def test_multisteps_composes_statistics_of_the_emitting_mini_steps():
    """optax.MultiSteps(with_pgns(adam), 2): the inner optimizer (and so the statistics)
    advances once per 2 mini-steps, on the accumulated mean gradient, with the moments of
    the mini-step that emits: the bare transform fed those."""
    multi = optax.MultiSteps(px.with_pgns(optax.adam(1e-2), 8, warmup=0), every_k_schedule=2)
    steps = _steps(4)
    st = _run(multi, steps)
    acc = [jax.tree.map(lambda a, b: (a + b) / 2, steps[i][0], steps[i + 1][0]) for i in (0, 2)]
    bare = _run(px.with_pgns(optax.adam(1e-2), 8, warmup=0), [(acc[0], steps[1][1]), (acc[1], steps[3][1])])
    assert int(px.find_pgns_state(st).steps) == 2
    np.testing.assert_allclose(_pgns(st), _pgns(bare), rtol=1e-5)


def test_masked_composes_statistics_of_the_parameters_inside_the_mask():
    """optax.masked(with_pgns(adam), mask): masked-out leaves pass through unchanged and the
    statistics are the bare transform's on the masked-in parameters alone (the moments are
    restricted to the leaves the mask passes)."""
    mask = {"w": True, "b": False}
    masked = optax.masked(px.with_pgns(optax.adam(1e-2), 8, warmup=0), mask)
    steps = _steps()
    st = _run(masked, steps)
    only_w = [
        ({"w": g["w"]}, px.MicrobatchMoments({"w": m.sum["w"]}, {"w": m.sum_of_squares["w"]}, m.count))
        for g, m in steps
    ]
    bare = _run(px.with_pgns(optax.adam(1e-2), 8, warmup=0), only_w, params={"w": PARAMS["w"]})
    np.testing.assert_allclose(_pgns(st), _pgns(bare), rtol=1e-6)
    u, _ = jax.jit(masked.update)(steps[0][0], masked.init(PARAMS), PARAMS, microbatch_moments=steps[0][1])
    np.testing.assert_array_equal(u["b"], steps[0][0]["b"])  # passed through


def test_transforms_chained_before_change_the_update_not_the_statistics():
    """optax.chain(clip, track_pgns/with_pgns): clipping changes the gradient the optimizer
    applies, not the statistics (they come from the moments).  With P = I they equal the bare
    transform's; with_pgns(adam)'s P follows the clipped gradients Adam sees, so it equals
    the bare transform fed the clipped gradients and the same moments."""
    clip = optax.clip_by_global_norm(0.05)
    steps = _steps()
    tracked = _run(optax.chain(clip, px.track_pgns(8)), steps)
    np.testing.assert_array_equal(_pgns(tracked), _pgns(_run(px.track_pgns(8), steps)))
    chained = _run(optax.chain(clip, px.with_pgns(optax.adam(1e-2), 8, warmup=0)), steps)
    clipped = [(clip.update(g, clip.init(PARAMS))[0], m) for g, m in steps]
    bare = _run(px.with_pgns(optax.adam(1e-2), 8, warmup=0), clipped)
    np.testing.assert_allclose(_pgns(chained), _pgns(bare), rtol=1e-5)  # clipping fused under jit
    unclipped = _run(px.with_pgns(optax.adam(1e-2), 8, warmup=0), steps)
    assert not np.allclose(_pgns(chained)[:2], _pgns(unclipped)[:2], rtol=1e-3)  # P differs


def test_from_optax_runs_with_pgns_on_one_gradient_per_step():
    """Inside scarjax.from_optax (one minibatch gradient per step, no moments) with_pgns
    uses the differenced estimator over consecutive steps."""
    import scarjax

    prob = examples.mlr()
    alg = scarjax.from_optax(
        lambda p, bt: prob.loss(p, bt["x"], bt["y"]),
        px.with_pgns(optax.sgd(0.5), microbatch_size=32),
        prob.params,
        {"x": prob.x, "y": prob.y},
        batch_size=32,
    )
    state, _ = scarjax.run(alg, None, 20, jax.random.key(0))
    pst = px.find_pgns_state(state.aux)
    assert bool(pst.biased) and int(pst.count) == 19 and int(pst.steps) == 20
    assert 0 < float(px.pgns_from_state(state.aux)) < np.inf


def test_trailing_microbatch_axis_equals_leading():
    """microbatch_axis=-1 (vmap out_axes=-1) gives the same mean, moments, statistics and
    updates as 0, for K >= 2 and K = 1."""
    prob, params = _trained("mlr")
    xb, yb = examples.sample_microbatches(jax.random.PRNGKey(5), prob.x, prob.y, 4, B)
    g0 = jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb)
    g1 = jax.vmap(jax.grad(prob.loss), (None, 0, 0), -1)(params, xb, yb)
    np.testing.assert_allclose(
        px.microbatch_stats(g1, B, microbatch_axis=-1), px.microbatch_stats(g0, B), rtol=1e-5
    )
    for k in (4, 1):
        opt = px.with_pgns(optax.adam(1e-2), microbatch_size=B, warmup=0)
        sa, sc = opt.init(params), opt.init(params)
        for step in range(3):
            ga, ma = px.reduce_microbatches(jax.tree.map(lambda x: x[:k] + 0.01 * step, g0))
            gc, mc = px.reduce_microbatches(jax.tree.map(lambda x: x[..., :k] + 0.01 * step, g1), microbatch_axis=-1)
            assert mc.count == k
            jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-9), ga, gc)
            ua, sa = jax.jit(opt.update)(ga, sa, params, microbatch_moments=ma)
            uc, sc = jax.jit(opt.update)(gc, sc, params, microbatch_moments=mc)
            jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-9), ua, uc)
        np.testing.assert_allclose(px.find_pgns_state(sa).last, px.find_pgns_state(sc).last, rtol=1e-4)
        assert bool(px.find_pgns_state(sc).biased) == (k == 1)
    for bad in (1.5, 1, True):
        with pytest.raises(ValueError, match="microbatch_axis must be 0 or -1"):
            px.reduce_microbatches(g0, microbatch_axis=bad)
    with pytest.raises(ValueError, match="microbatch_axis must be 0 or -1"):
        px.microbatch_stats({"w": jnp.ones((4, 3))}, 4, microbatch_axis=2)
    with pytest.raises(ValueError, match="axis -1 K"):  # leaves disagree on the last axis
        px.microbatch_stats({"w": jnp.ones((4, 3)), "b": jnp.ones((4,))}, 4, microbatch_axis=-1)


def test_track_pgns_microbatch_size_as_extra_arg():
    opt = optax.chain(px.track_pgns(), optax.sgd(0.1))
    st = opt.init(PARAMS)
    stacked = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(0), (3,) + x.shape), PARAMS)
    g, m = px.reduce_microbatches(stacked)
    _, st = opt.update(g, st, PARAMS, microbatch_moments=m, microbatch_size=16)
    np.testing.assert_allclose(px.find_pgns_state(st).last, px.microbatch_stats(stacked, 16), rtol=1e-5)
    with pytest.raises(ValueError, match="microbatch_size is required"):
        opt.update(g, opt.init(PARAMS), PARAMS, microbatch_moments=m)


def test_estimator_bad_inputs():
    g = {"w": jnp.ones((4, 3))}
    with pytest.raises(ValueError, match="K >= 2"):
        px.microbatch_stats({"w": jnp.ones((1, 3))}, 4)
    with pytest.raises(ValueError, match="microbatch_size"):
        px.microbatch_stats(g, 0)
    with pytest.raises(ValueError, match="leading axis"):
        px.microbatch_stats({"w": jnp.ones((4, 3)), "b": jnp.ones((2,))}, 4)
    with pytest.raises(ValueError, match="decay"):
        px.track_pgns(4, decay=1.0)
    with pytest.raises(ValueError, match="preconditioner"):
        px.with_pgns(optax.sgd(0.1), preconditioner="adam")
    with pytest.raises(ValueError, match="no PGNS statistics"):
        px.pgns_from_state(optax.sgd(0.1).init(PARAMS))
    plain = px.track_pgns(4, differenced=False)
    with pytest.raises(ValueError, match="differenced=True"):
        plain.update({"w": jnp.ones(3)}, plain.init({"w": jnp.ones(3)}))
    # The old calling convention (stacked gradients as updates) is refused, naming the fix.
    opt = px.with_pgns(optax.sgd(0.1), 4)
    with pytest.raises(ValueError, match="reduce_microbatches"):
        opt.update(_stacked(0), opt.init(PARAMS), PARAMS)
    grads, moments = px.reduce_microbatches(_stacked(0))
    with pytest.raises(TypeError, match="microbatch_moments must be a MicrobatchMoments"):
        opt.update(grads, opt.init(PARAMS), PARAMS, microbatch_moments=_stacked(0))
    with pytest.raises(ValueError, match="microbatch_moments must have the tree structure"):
        opt.update(grads, opt.init(PARAMS), PARAMS, microbatch_moments=px.reduce_microbatches({"w": _stacked(0)["w"]})[1])
    with pytest.raises(ValueError, match="microbatch_moments must have the leaf shapes"):
        bad = px.MicrobatchMoments(moments.sum, {"w": jnp.ones((4,)), "b": moments.sum_of_squares["b"]}, 4)
        opt.update(grads, opt.init(PARAMS), PARAMS, microbatch_moments=bad)


def test_per_leaf_microbatch_axes_and_scan_gradients_equal_the_leading_axis():
    """microbatch_axes puts narrow weight matrices' micro-batch axis last; stacking per leaf
    (vmap out_axes = that tree) and computing the gradients one micro-batch at a time
    (method='scan') give the statistics and updates of the leading-axis stacking."""
    prob, params = _trained("mlr")
    assert px.microbatch_axes(params) == {"w": 0, "b": 0}  # w is [64, 10]: not narrow (8 * 10 > 64)
    wide = {"k": jnp.ones((784, 256)), "n": jnp.ones((784, 10)), "v": jnp.ones(3)}
    assert px.microbatch_axes(wide) == {"k": 0, "n": -1, "v": 0}
    axes = {"w": -1, "b": 0}  # a per-leaf tree
    xb, yb = examples.sample_microbatches(jax.random.PRNGKey(5), prob.x, prob.y, 4, B)
    g0 = px.microbatch_grads(prob.loss, params, xb, yb)
    want = px.microbatch_stats(g0, B)
    for axis in (axes, 0, -1):
        for method in ("vmap", "scan"):
            g = jax.jit(lambda p, m=method, a=axis: px.microbatch_grads(prob.loss, p, xb, yb, microbatch_axis=a, method=m))(
                params
            )
            if axis is axes:
                assert g["w"].shape == (64, 10, 4) and g["b"].shape == (4, 10)
            np.testing.assert_allclose(px.microbatch_stats(g, B, microbatch_axis=axis), want, rtol=1e-4)
    opt = px.with_pgns(optax.adam(1e-2), B, warmup=0)
    ga, ma = px.reduce_microbatches(px.microbatch_grads(prob.loss, params, xb, yb, microbatch_axis=axes), microbatch_axis=axes)
    g0m, m0 = px.reduce_microbatches(g0)
    ua, sa = opt.update(ga, opt.init(params), params, microbatch_moments=ma)
    u0, s0 = opt.update(g0m, opt.init(params), params, microbatch_moments=m0)
    jax.tree.map(lambda u, v: np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-9), ua, u0)
    np.testing.assert_allclose(px.find_pgns_state(sa).last, px.find_pgns_state(s0).last, rtol=1e-4)
    with pytest.raises(ValueError, match="microbatch_axis must be 0 or -1"):
        px.reduce_microbatches(g0, microbatch_axis={"w": 1, "b": 0})
    with pytest.raises(ValueError, match="method must be"):
        px.microbatch_grads(prob.loss, params, xb, yb, method="loop")
    with pytest.raises(ValueError, match="share the leading axis K"):
        px.microbatch_grads(prob.loss, params, xb, yb[:2])
