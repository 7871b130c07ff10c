"""The perturbed loop: semantics of Eq 5.2, determinism, vmapped trials == sequential runs."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import scarjax
from scarjax import hooks
from scarjax.models import mlr, quadratic


@pytest.fixture(scope="module")
def qp():
    return quadratic.fig53_problem()


@pytest.fixture(scope="module")
def small_mlr():
    return mlr.digits(batch_size=64)


def test_unperturbed_qp_matches_closed_form(qp):
    """Without hooks, y(k) − w* = (I − ηA)^k (w0 − w*)."""
    steps = 50
    _, trace = scarjax.run(qp, None, steps, jax.random.key(0))
    A = np.asarray(qp.data["A"], np.float64)
    M = np.eye(4) - float(qp.data["lr"]) * A
    e = np.asarray(qp.data["w0"] - qp.data["w_star"], np.float64)
    expected = [np.linalg.norm(np.linalg.matrix_power(M, k) @ e) for k in range(steps + 1)]
    np.testing.assert_allclose(np.asarray(trace.distance), expected, rtol=1e-4)
    assert trace.loss.shape == (steps + 1,)
    for point in ("read", "update", "write"):
        np.testing.assert_array_equal(trace.point_delta[point], 0.0)


def test_write_perturbation_follows_eq_5_2(qp):
    """A write-point δ at step T gives y(T+1) = f(y(T) + δ)."""
    T, delta = 7, jnp.array([0.3, -0.2, 0.1, 0.5])
    h = hooks.perturbation(lambda p, s, ctx, k: delta, when=T)
    _, base = scarjax.run(qp, None, T, jax.random.key(0))
    _, pert = scarjax.run(qp, h, T + 1, jax.random.key(0))
    # Reconstruct y(T) from the baseline and apply f by hand.
    A, w_star, lr = (np.asarray(qp.data[k], np.float64) for k in ("A", "w_star", "lr"))
    M = np.eye(4) - lr * A
    yT = w_star + np.linalg.matrix_power(M, T) @ np.asarray(qp.data["w0"] - qp.data["w_star"], np.float64)
    y_next = w_star + M @ (yT + np.asarray(delta) - w_star)
    np.testing.assert_allclose(float(pert.distance[T + 1]), np.linalg.norm(y_next - w_star), rtol=1e-5)
    np.testing.assert_allclose(float(pert.point_delta["write"][T]), np.linalg.norm(delta), rtol=1e-6)
    assert float(pert.delta["perturbation"][T - 1]) == 0.0
    np.testing.assert_allclose(pert.perturbation_norms()[T], np.linalg.norm(delta), rtol=1e-6)


def test_same_key_same_result(small_mlr):
    h = hooks.chain(hooks.gaussian(0.01, when=hooks.with_probability(0.3)), hooks.reset(0.2, when=5))
    s1, t1 = scarjax.run(small_mlr, h, 20, jax.random.key(3))
    s2, t2 = scarjax.run(small_mlr, h, 20, jax.random.key(3))
    chex.assert_trees_all_equal((s1, t1), (s2, t2))
    _, t3 = scarjax.run(small_mlr, h, 20, jax.random.key(4))
    assert not np.array_equal(t1.loss, t3.loss)


def test_int_seed_equals_key(qp):
    h = hooks.gaussian(0.1, when=3)
    a = scarjax.run(qp, h, 10, 5)
    b = scarjax.run(qp, h, 10, jax.random.key(5))
    chex.assert_trees_all_equal(a, b)


@pytest.mark.parametrize("model", ["qp", "mlr"])
def test_vmapped_trial_i_equals_run_i(model, qp, small_mlr):
    alg = qp if model == "qp" else small_mlr
    h = hooks.chain(hooks.gaussian(0.05, when=hooks.every(4)), hooks.adversarial(0.1, when=6))
    keys = jax.random.split(jax.random.key(11), 4)
    states, traces = scarjax.run_trials(alg, h, 12, keys)
    for i in range(4):
        s_i, t_i = scarjax.run(alg, h, 12, keys[i])
        chex.assert_trees_all_close(scarjax.split_trials((states, traces), i), (s_i, t_i), rtol=1e-5, atol=1e-6)


def test_hook_args_vary_across_trials(qp):
    sizes = jnp.array([0.0, 0.5, 1.0])
    _, tr = scarjax.run_trials(qp, lambda s: hooks.adversarial(s, when=2), 5, jax.random.split(jax.random.key(0), 3), hook_args=sizes)
    np.testing.assert_allclose(tr.point_delta["write"][:, 2], sizes, rtol=1e-5)
    _, one = scarjax.run(qp, hooks.adversarial(0.5, when=2), 5, jax.random.split(jax.random.key(0), 3)[1])
    np.testing.assert_allclose(tr.distance[1], one.distance, rtol=1e-6)


def test_from_optax_adam_keeps_optimizer_state():
    x = jnp.linspace(-1, 1, 64)[:, None]
    data = {"x": x, "y": 2 * x[:, 0] + 1}
    loss = lambda w, b: jnp.mean((b["x"][:, 0] * w["a"] + w["c"] - b["y"]) ** 2)  # noqa: E731
    alg = scarjax.from_optax(loss, optax.adam(0.1), {"a": jnp.zeros(()), "c": jnp.zeros(())}, data, batch_size=16)
    state, trace = scarjax.run(alg, None, 300, jax.random.key(0))
    assert float(trace.loss[-1]) < 1e-3
    assert int(state.aux[0].count) == 300


def test_fixed_point_iteration():
    alg = scarjax.fixed_point(lambda w, d: 0.5 * w + 1.0, jnp.zeros(3), lambda w, d: jnp.sum((w - 2.0) ** 2), optimum=2.0 * jnp.ones(3))
    _, trace = scarjax.run(alg, None, 30, 0)
    np.testing.assert_allclose(trace.distance, np.sqrt(12) * 0.5 ** np.arange(31), rtol=1e-5, atol=1e-6)


def test_read_effect_measures_example_5_2_2(qp):
    """A read perturbation δ changes Δ by −ηAδ for the QP: recorded as read_effect."""
    d = jnp.array([0.1, 0.0, 0.0, 0.0])
    h = hooks.perturbation(lambda p, s, ctx, k: d, when=0, point="read")
    _, tr = scarjax.run(qp, h, 3, 0, measure_read_effect=True)
    expected = np.linalg.norm(float(qp.data["lr"]) * np.asarray(qp.data["A"]) @ np.asarray(d))
    np.testing.assert_allclose(float(tr.read_effect[0]), expected, rtol=1e-5)
    assert float(tr.read_effect[1]) < 1e-8
    np.testing.assert_allclose(tr.perturbation_norms()[1], expected, rtol=1e-5)


def test_update_point_hook(qp):
    h = hooks.perturbation(lambda p, s, ctx, k: jnp.ones(4), when=1, point="update")
    _, tr = scarjax.run(qp, h, 4, 0)
    assert float(tr.point_delta["update"][1]) == pytest.approx(2.0)
    assert float(tr.perturbation_norms()[2]) == pytest.approx(2.0)


def test_duplicate_hook_names_are_made_unique(qp):
    _, tr = scarjax.run(qp, [hooks.gaussian(0.1, when=1), hooks.gaussian(0.2, when=2)], 4, 0)
    assert set(tr.delta) == {"gaussian", "gaussian_1"}


@pytest.mark.parametrize(
    "kwargs, err",
    [
        (dict(steps=0), ValueError),
        (dict(steps=2.5), ValueError),
        (dict(key="abc"), TypeError),
        (dict(hooks=42), TypeError),
        (dict(algorithm=object()), TypeError),
    ],
)
def test_run_bad_inputs(qp, kwargs, err):
    args = dict(algorithm=qp, hooks=None, steps=5, key=0) | kwargs
    with pytest.raises(err):
        scarjax.run(args["algorithm"], args["hooks"], args["steps"], args["key"])


def test_run_trials_bad_inputs(qp):
    keys = jax.random.split(jax.random.key(0), 3)
    with pytest.raises(ValueError, match="hook_args"):
        scarjax.run_trials(qp, lambda s: hooks.gaussian(s), 3, keys, hook_args=jnp.ones(2))
    with pytest.raises(TypeError):
        scarjax.run_trials(qp, hooks.gaussian(0.1), 3, keys, hook_args=jnp.ones(3))
    with pytest.raises(ValueError):
        scarjax.run_trials(qp, None, 3, jax.random.key(0))
