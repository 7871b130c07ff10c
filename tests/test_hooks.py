"""Generic perturbation hooks and schedules."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import scarjax
from scarjax import hooks
from scarjax.models import quadratic


@pytest.fixture(scope="module")
def qp():
    return quadratic.random_problem(0, 50, 4.0, c=0.9)


def _fires(schedule, steps=40, seed=0):
    key = jax.random.key(seed)
    return np.array([bool(schedule(jnp.int32(k), jax.random.fold_in(key, k))) for k in range(steps)])


def test_schedules():
    np.testing.assert_array_equal(np.flatnonzero(_fires(hooks.at(3, 7))), [3, 7])
    np.testing.assert_array_equal(np.flatnonzero(_fires(hooks.every(10, start=5))), [5, 15, 25, 35])
    assert _fires(hooks.always()).all() and not _fires(hooks.never()).any()
    freq = np.mean([_fires(hooks.with_probability(0.25), 200, s).mean() for s in range(5)])
    assert 0.18 < freq < 0.32


@pytest.mark.parametrize("bad", [lambda: hooks.at(-1), lambda: hooks.at(), lambda: hooks.every(0), lambda: hooks.at(1.5), lambda: hooks.with_probability(1.5), lambda: hooks.gaussian(-1.0), lambda: hooks.reset(2.0), lambda: hooks.adversarial(float("nan"))])
def test_schedule_and_hook_bad_inputs(bad):
    with pytest.raises(ValueError):
        bad()


def test_bad_point_and_when():
    with pytest.raises(ValueError, match="point"):
        hooks.gaussian(0.1, point="nowhere")
    with pytest.raises(TypeError, match="when"):
        hooks.gaussian(0.1, when="often")


def test_gaussian_size(qp):
    _, tr = scarjax.run(qp, hooks.gaussian(0.1, when=5), 10, 0)
    d = tr.point_delta["write"]
    assert float(d[5]) == pytest.approx(0.1 * np.sqrt(50), rel=0.3)
    assert np.count_nonzero(np.asarray(d)) == 1


def test_adversarial_moves_away_from_optimum(qp):
    _, base = scarjax.run(qp, None, 10, 0)
    _, tr = scarjax.run(qp, hooks.adversarial(0.5, when=4), 10, 0)
    # Exactly along y − w*: the distance grows by the full size before the step.
    assert float(tr.point_delta["write"][4]) == pytest.approx(0.5, rel=1e-5)
    assert float(tr.distance[5]) > float(base.distance[5])


def test_adversarial_without_optimum_uses_ascent_direction(qp):
    no_opt = qp.replace(optimum=None)
    _, tr = scarjax.run(no_opt, hooks.adversarial(0.5, when=2), 4, 0)
    _, base = scarjax.run(no_opt, None, 4, 0)
    assert tr.distance is None
    assert float(tr.loss[3]) > float(base.loss[3])


@given(fraction=st.floats(0.0, 1.0), seed=st.integers(0, 1000))
def test_random_mask_selects_exact_count(fraction, seed):
    tree = {"a": jnp.zeros((7, 3)), "b": jnp.zeros(5)}
    mask = hooks.random_mask(jax.random.key(seed), tree, fraction)
    count = sum(int(m.sum()) for m in jax.tree.leaves(mask))
    assert count == round(fraction * 26) or abs(count - fraction * 26) <= 0.5 + 1e-9


def test_reset_restores_exact_initial_values(qp):
    state, tr = scarjax.run(qp, hooks.reset(1.0, when=9), 10, 0)
    # After a full reset at step 9 and one more step, y(10) = f(w0).
    _, one = scarjax.run(qp, None, 1, 0)
    np.testing.assert_allclose(float(tr.distance[10]), float(one.distance[1]), rtol=1e-6)
    _, tr_half = scarjax.run(qp, hooks.reset(0.5, when=9), 10, 0)
    assert 0 < float(tr_half.point_delta["write"][9]) < float(tr.point_delta["write"][9])


def test_chain_order_within_a_point(qp):
    """Hooks at one point act in order: reset after a shift undoes part of the shift."""
    shift = hooks.perturbation(lambda p, s, ctx, k: jnp.ones_like(p), when=3, name="shift")
    chained = hooks.chain(shift, hooks.reset(1.0, when=3))
    _, tr = scarjax.run(qp, chained, 5, 0)
    assert float(tr.delta["shift"][3]) == pytest.approx(np.sqrt(50), rel=1e-5)
    assert set(tr.delta) == {"shift", "reset"}


def test_custom_hook_with_state(qp):
    """A user hook with its own state: count how often it fired."""

    def init(state, key):
        return jnp.int32(0)

    def apply(view, count, ctx):
        return view, count + 1

    counter = hooks.Hook(point="read", init=init, apply=apply, name="counter")
    _, tr = scarjax.run(qp, counter, 7, 0)
    np.testing.assert_array_equal(tr.delta["counter"], 0.0)
