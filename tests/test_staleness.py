"""Stale reads (SSP / asynchronous) as read-point perturbations (thesis Example 5.2.2); the
bound checks are the property-testing kit's (scarjax.testing)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from scarjax import testing as sxt
from scarjax.perturb import staleness, workers
from scarjax.models import quadratic


@pytest.fixture(scope="module")
def qp():
    return quadratic.fig53_problem()


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_zero_staleness_equals_synchronous_bit_for_bit(qp, sgd):
    # "Synchronous" = the same M-worker data sharding with fresh views (worker mode, no hooks).
    for alg, hooks in (
        (qp, (staleness.ssp(4, 0),)),
        (sgd, (staleness.ssp(4, 0, delays="fixed", max_staleness=3), staleness.asynchronous(4, 0.0, max_delay=2))),
    ):
        _, sync = scarjax.run(alg, None, 40, jax.random.key(3), workers=4)
        for hook in hooks:
            _, tr = scarjax.run(alg, hook, 40, jax.random.key(3), workers=4)
            np.testing.assert_array_equal(tr.loss, sync.loss)
    # Under run_trials too (one compiled program per hook, trials vmapped).
    keys = jax.random.split(jax.random.key(4), 3)
    _, sync = scarjax.run_trials(sgd, None, 40, keys, workers=4)
    _, tr = scarjax.run_trials(sgd, staleness.ssp(4, 0), 40, keys, workers=4)
    np.testing.assert_array_equal(tr.loss, sync.loss)


def test_fixed_delay_is_delayed_gradient_descent(qp):
    # One worker always reading the version s = 2 old: y_{k+1} = y_k − η A (y_{k−2} − w*),
    # with y_{j} = y_0 for j < 0; the read effect is ‖η A (y_k − y_{k−2})‖ (Example 5.2.2).
    s, T = 2, 30
    _, tr = scarjax.run(qp, staleness.ssp(1, s, delays="fixed"), T, 0, measure_read_effect=True, workers=1)
    A = np.asarray(qp.data["A"], np.float64)
    ws = np.asarray(qp.data["w_star"], np.float64)
    lr = float(qp.data["lr"])
    ys = [np.asarray(qp.data["w0"], np.float64)]
    effect = []
    for k in range(T):
        old = ys[max(k - s, 0)]
        effect.append(np.linalg.norm(lr * A @ (ys[k] - old)))
        ys.append(ys[k] - lr * A @ (old - ws))
    dist = [np.linalg.norm(y - ws) for y in ys]
    np.testing.assert_allclose(tr.distance, dist, rtol=1e-5)
    np.testing.assert_allclose(tr.read_effect, effect, rtol=1e-3, atol=1e-7)


def test_per_step_delays_bounded_and_traced_staleness_under_run_trials(qp):
    # Staleness varies across trials inside one program. Every trial stays within
    # Example 5.2.2's bound for its s (views at most s updates old, the read perturbation
    # ≤ ηλ_max(A)·Σ of the last s updates) and under Lemma B.2.1's envelope
    # (sxt.assert_staleness, with the kit's norm probes recording ‖Δ_k‖; check_staleness
    # draws patterns itself: tests/testing/test_floors.py). The trial with s = 0 equals
    # sync; trial i equals run with key i and the same s (the probes change nothing).
    s_values = jnp.array([0, 3, 8])
    keys = jax.random.split(jax.random.key(5), 3)
    factory = lambda s: [staleness.ssp(3, s, max_staleness=8), *sxt.norm_probes()]  # noqa: E731
    _, trials = scarjax.run_trials(qp, factory, 60, keys, hook_args=s_values, measure_read_effect=True, workers=3)
    lam = float(qp.data["lr"]) * float(np.linalg.eigvalsh(np.asarray(qp.data["A"])).max())
    res = sxt.assert_staleness(trials, quadratic.contraction(qp), np.asarray(s_values), lipschitz=lam, name=qp.name)
    assert res.worst_view <= 1 and 0 < res.worst_effect <= 1 and res.worst_envelope <= 1
    _, sync = scarjax.run(qp, None, 60, keys[0], workers=3)
    # Same values up to the compiler's float contraction in the vmapped program.
    np.testing.assert_allclose(trials.distance[0], sync.distance, rtol=1e-6)
    assert float(trials.read_effect[0].max()) < 1e-8
    assert float(trials.read_effect[2].sum()) > float(trials.read_effect[1].sum()) > 0
    _, one = scarjax.run(qp, staleness.ssp(3, 3), 60, keys[1], workers=3)
    np.testing.assert_allclose(trials.distance[1], one.distance, rtol=1e-6)


def test_truncated_geometric_distribution():
    draw = jax.jit(staleness.truncated_geometric, static_argnums=(1, 3))
    d = draw(jax.random.key(0), (40000,), 0.4, 5)
    assert int(d.min()) == 0 and int(d.max()) == 5
    q = 0.6 ** np.arange(6)
    pmf = q / q.sum()
    emp = np.bincount(np.asarray(d), minlength=6) / d.size
    np.testing.assert_allclose(emp, pmf, atol=0.01)
    assert int(draw(jax.random.key(1), (10,), 1.0, 5).max()) == 0


def test_ring_buffer_lives_in_the_carry(qp):
    hook = staleness.ssp(2, 4)
    state = qp.init(jax.random.key(0), qp.data)
    hstate = hook.init(state, jax.random.key(0))
    assert hstate["buffer"].shape == (5, 4)
    # Writing one version is a dynamic_update_slice, not a rebuilt buffer.
    ctx = scarjax.hooks.Context(jnp.int32(7), jax.random.key(0), state, state.params, qp)
    jaxpr = jax.make_jaxpr(lambda v, h: hook.apply(v, h, ctx))(workers.broadcast(state.params, 2), hstate)
    assert "dynamic_update_slice" in str(jaxpr)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"workers": 0, "staleness": 1}, "workers"),
        ({"workers": 2, "staleness": -1}, "staleness"),
        ({"workers": 2, "staleness": 1.5}, "staleness"),
        ({"workers": 2, "staleness": 4, "max_staleness": 2}, "max_staleness"),
        ({"workers": 2, "staleness": 2, "delays": "random"}, "delays"),
        ({"workers": 2, "staleness": 2, "delays": np.array([0, 3])}, "delays"),
        ({"workers": 2, "staleness": 2, "delays": np.array([0, 1, 1])}, "delays"),
    ],
)
def test_ssp_bad_inputs(kwargs, match):
    with pytest.raises(ValueError, match=match):
        staleness.ssp(**kwargs)


def test_async_bad_inputs():
    with pytest.raises(ValueError, match="mean_delay"):
        staleness.asynchronous(2, -1.0, max_delay=4)
    with pytest.raises(ValueError, match="max_delay"):
        staleness.asynchronous(2, 1.0, max_delay=-4)
    with pytest.raises(ValueError, match="buffer_size"):
        staleness.stale_reads(2, 0, lambda k, key, s: jnp.zeros(2, jnp.int32))
