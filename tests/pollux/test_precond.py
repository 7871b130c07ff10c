"""The pre-conditioner P (App. A.1) read from optax: hyper-parameters read from the optimizer
(never defaulted), coordinates with no second-moment information excluded, and the running
PGNS on a model with dead and rare inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from scarjax import pollux as px

PARAMS = {"w": jnp.ones((4, 3)), "b": jnp.zeros(3)}


def _stepped(opt, n=2, params=PARAMS):
    st = opt.init(params)
    update = jax.jit(opt.update)
    for i in range(n):
        g = jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(i), x.shape) + 0.5, params)
        _, st = update(g, st, params)
    return st


# ------------------------------------------------------------- hyper-parameters, never defaulted


def test_non_default_b2_eps_are_read_from_the_optimizer():
    """optax.adamw(b2=0.9, eps=1e-2): P equals the hand-computed 1/(sqrt(nu/(1-b2^t)) + eps)
    (optax's defaults would give 1/(sqrt(nu/(1-0.999^t)) + 1e-8), ~10x off here)."""
    opt = optax.adamw(1e-3, b2=0.9, eps=1e-2, weight_decay=1e-4)
    st = _stepped(opt, n=3)
    nu = st[0].nu
    want = jax.tree.map(lambda n: 1 / (np.sqrt(np.asarray(n) / (1 - 0.9**3)) + 1e-2), nu)
    for got in (px.preconditioner(st, opt), px.preconditioner(st, hyperparams={"b2": 0.9, "eps": 1e-2, "eps_root": 0.0})):
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), got, want)
    defaults = jax.tree.map(lambda n: 1 / (np.sqrt(np.asarray(n) / (1 - 0.999**3)) + 1e-8), nu)
    ratio = np.median(np.asarray(defaults["w"]) / np.asarray(want["w"]))
    assert not 0.2 < ratio < 5  # silently defaulting gave a P ~10x off
    # with_pgns reads them from the optimizer it wraps: its P is the same.
    wrapped = px.with_pgns(opt, microbatch_size=4)
    wst = wrapped.init(PARAMS)
    update = jax.jit(wrapped.update)
    for i in range(3):
        g, m = px.reduce_microbatches(
            jax.tree.map(lambda x: jax.random.normal(jax.random.PRNGKey(i), (2,) + x.shape) + 0.5, PARAMS)
        )
        _, wst = update(g, wst, PARAMS, microbatch_moments=m)
    mine = px.preconditioner(wst, opt)
    manual = jax.tree.map(lambda n: 1 / (np.sqrt(np.asarray(n) / (1 - 0.9**3)) + 1e-2), wst.inner_state[0].nu)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5), mine, manual)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), px.preconditioner(wst, wrapped), mine)


@pytest.mark.parametrize(
    "opt,names",
    [
        (optax.adamw(1e-3, b2=0.9, eps=1e-2), "b2, eps, eps_root"),
        (optax.rmsprop(0.1, eps_in_sqrt=False), "eps, eps_in_sqrt"),
        (optax.adagrad(0.1, eps=1e-3), "eps"),
    ],
)
def test_missing_hyperparameters_are_refused_by_name(opt, names):
    st = _stepped(opt)
    with pytest.raises(ValueError, match=f"cannot read {names} of"):
        px.preconditioner(st)
    with pytest.raises(ValueError, match="hyperparams has unknown names"):
        px.preconditioner(st, hyperparams={"beta2": 0.9})
    with pytest.raises(TypeError, match="optimizer must be an optax GradientTransformation"):
        px.preconditioner(st, "adam")


def test_rmsprop_eps_outside_sqrt_and_injected_static_hyperparameters():
    """eps_in_sqrt=False gives 1/(sqrt(nu)+eps); inject_hyperparams keeps eps in its state and
    eps_in_sqrt in its closure, and both are found."""
    want = lambda n: 1 / (np.sqrt(np.asarray(n)) + 1e-3)  # noqa: E731
    for opt in (
        optax.rmsprop(0.1, eps=1e-3, eps_in_sqrt=False),
        optax.inject_hyperparams(optax.rmsprop)(learning_rate=0.1, eps=1e-3, eps_in_sqrt=False),
    ):
        st = _stepped(opt)
        nu = jax.tree.leaves(st)[-2:]  # nu of {b, w} (sorted keys)
        got = jax.tree.leaves(px.preconditioner(st, opt))
        for a, n in zip(got, nu):
            np.testing.assert_allclose(a, want(n), rtol=1e-5)


# ------------------------------------------------------- coordinates not informed yet: P = 0


def test_zero_second_moment_gets_zero_preconditioner():
    """A coordinate whose gradient has always been 0 has nu == 0: P = 0 there (not 1/eps),
    elsewhere Adam's formula; optax's AdaGrad rule is the same."""
    opt = optax.adam(1e-3)
    st = opt.init(PARAMS)
    g = {"w": jnp.ones((4, 3)).at[0].set(0.0), "b": jnp.ones(3)}
    _, st = opt.update(g, st, PARAMS)
    p = px.preconditioner(st, opt)
    assert np.all(np.asarray(p["w"][0]) == 0)
    np.testing.assert_allclose(p["w"][1:], 1 / (1 + 1e-8), rtol=1e-4)  # nu_hat = g^2 = 1
    assert np.all(np.asarray(p["b"]) > 0)
    # phi is unchanged for gradients that are 0 on those coordinates (dead inputs) ...
    gk = {"w": jax.random.normal(jax.random.PRNGKey(0), (6, 4, 3)).at[:, 0].set(0.0), "b": jnp.ones((6, 3))}
    raw = {"w": jnp.where(st[0].nu["w"] > 0, p["w"], 1e8), "b": p["b"]}
    np.testing.assert_allclose(px.microbatch_stats(gk, 8, p), px.microbatch_stats(gk, 8, raw), rtol=1e-6)
    # ... and is not swamped when a rare input finally appears: 1/eps would multiply it by 1e16.
    gk = {"w": gk["w"].at[2, 0, 0].set(0.1), "b": gk["b"]}
    ok, bad = px.microbatch_stats(gk, 8, p), px.microbatch_stats(gk, 8, raw)
    assert abs(float(ok.var)) < 1e3 and abs(float(bad.var)) > 1e12


def _dead_rare_problem(seed=0, n=2048, dead=8, rare=16, live=8, hidden=16, classes=2):
    """Inputs: `dead` features 0 in every example, `rare` features non-zero in one example each
    (MNIST's border pixels), `live` Gaussian features that determine the label."""
    rng = np.random.default_rng(seed)
    d = dead + rare + live
    x = np.zeros((n, d), np.float32)
    x[:, dead + rare :] = rng.standard_normal((n, live))
    rows = rng.choice(n, rare, replace=False)
    x[rows, dead + np.arange(rare)] = rng.choice([-2.0, 2.0], rare)
    y = np.argmax(x[:, dead + rare :] @ rng.standard_normal((live, classes)), 1).astype(np.int32)
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    params = {
        "w1": jax.random.normal(k1, (d, hidden)) / np.sqrt(d),
        "b1": jnp.zeros(hidden),
        "w2": jax.random.normal(k2, (hidden, classes)) / np.sqrt(hidden),
        "b2": jnp.zeros(classes),
    }

    def loss(p, xb, yb):
        z = jax.nn.relu(xb @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), yb[..., None], -1))

    return params, loss, jnp.asarray(x), jnp.asarray(y)


def _running_vs_exact(opts, get_p, params, loss, x, y, steps=30, k=8, b=32):
    """Train with `opts[0]` (with_pgns optimizers that differ only in their P, so every one
    sees the same micro-batch gradients and the same parameters); return each one's running
    phi and the exact per-example phi with the P of `opts[0]` (`get_p(state)`)."""

    def step(c, key):
        p, states = c
        idx = jax.random.randint(key, (k, b), 0, x.shape[0])
        g, m = px.reduce_microbatches(jax.vmap(jax.grad(loss), (None, 0, 0))(p, x[idx], y[idx]))
        outs = [o.update(g, s, p, microbatch_moments=m) for o, s in zip(opts, states)]
        states = [st for _, st in outs]
        p = optax.apply_updates(p, outs[0][0])
        peg = px.per_example_grads(lambda q, xi, yi: loss(q, xi[None], yi[None]), p, x, y)
        exact = px.noise_scale(px.exact_stats(peg, get_p(states[0])))
        return (p, states), ([px.pgns_from_state(st) for st in states], exact)

    keys = jax.random.split(jax.random.PRNGKey(1), steps)
    init = (params, [o.init(params) for o in opts])
    _, (runs, ex) = jax.jit(lambda c: jax.lax.scan(step, c, keys))(init)
    return [np.asarray(r) for r in runs], np.asarray(ex)


def test_running_pgns_with_dead_and_rare_inputs_tracks_exact_from_the_first_steps():
    """AdamW on an MLP with dead and rare inputs, K=8 micro-batches of 32, 10 warm-up steps.
    With P = 0 where nu == 0 the running phi stays within 2x of the exact per-example phi
    (same P) at every step from the first estimate (step 11) on.  With the formula's 1/eps
    there (what P used to be), a rare input drawn after warm-up makes the running phi
    millions of times too large."""
    params, loss, x, y = _dead_rare_problem()
    adam = optax.adamw(3e-3, weight_decay=1e-4)

    def one_over_eps(inner_state, params=None):  # Adam's formula without the mask
        s = inner_state[0]
        return jax.tree.map(lambda n: 1 / (jnp.sqrt(n / (1 - 0.999**s.count)) + 1e-8), s.nu)

    opts = [px.with_pgns(adam, 32), px.with_pgns(adam, 32, preconditioner=one_over_eps)]
    (run, run_old), ex = _running_vs_exact(opts, lambda s: px.preconditioner(s, adam), params, loss, x, y)
    ratio = run[10:] / ex[10:]
    assert np.all((ratio > 0.5) & (ratio < 2.0)), np.round(ratio, 2)
    assert np.max(run_old[10:] / ex[10:]) > 1e4
