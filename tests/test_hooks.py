"""The hook protocol (Hook, chain, scheduled) and the generic perturbations."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import scarjax
from scarjax import hooks, schedules
from scarjax.models import quadratic
from scarjax.perturb import generic, precision as P, revocation, staleness


@pytest.fixture(scope="module")
def qp():
    return quadratic.random_problem(0, 50, 4.0, c=0.9)


@pytest.mark.parametrize(
    "bad, arg",
    [
        (lambda: generic.gaussian(-1.0), "std"),
        (lambda: generic.reset(2.0), "fraction"),
        (lambda: generic.adversarial(float("nan")), "size"),
        (lambda: generic.gaussian(0.1, point="nowhere"), "point"),
        (lambda: generic.gaussian(0.1, point="progress"), "point"),
        (lambda: hooks.scheduled(generic.gaussian(0.1), "often"), "when"),
        (lambda: hooks.scheduled(generic.gaussian(0.1), -3), "when"),
        (lambda: hooks.scheduled("gaussian", 3), "hook"),
        (lambda: hooks.Hook(point=("write", "write"), init=lambda s, k: (), apply=lambda v, s, c: (v, s)), "point"),
        (lambda: hooks.Hook(point="write", init=lambda s, k: (), apply=lambda v, s, c: (v, s), workers=0), "workers"),
        (lambda: hooks.Hook(point="write", init=lambda s, k: (), apply=lambda v, s, c: (v, s), children=(1,)), "children"),
        (lambda: hooks.chain(staleness.ssp(2, 1), staleness.ssp(3, 1)), "worker counts"),
    ],
)
def test_bad_arguments_name_the_argument(bad, arg):
    with pytest.raises((ValueError, TypeError), match=arg):
        bad()


def test_factories_lost_when():
    with pytest.raises(TypeError, match="when"):
        generic.gaussian(0.1, when=3)


def test_gaussian_size(qp):
    _, tr = scarjax.run(qp, hooks.scheduled(generic.gaussian(0.1), 5), 10, 0)
    d = tr.point_delta["write"]
    assert float(d[5]) == pytest.approx(0.1 * np.sqrt(50), rel=0.3)
    assert np.count_nonzero(np.asarray(d)) == 1
    # unscheduled: every step
    _, tr = scarjax.run(qp, generic.gaussian(0.1), 10, 0)
    assert np.all(np.asarray(tr.point_delta["write"]) > 0)


def test_adversarial_moves_away_from_optimum(qp):
    _, base = scarjax.run(qp, None, 10, 0)
    _, tr = scarjax.run(qp, hooks.scheduled(generic.adversarial(0.5), 4), 10, 0)
    # Exactly along y − w*: the distance grows by the full size before the step.
    assert float(tr.point_delta["write"][4]) == pytest.approx(0.5, rel=1e-5)
    assert float(tr.distance[5]) > float(base.distance[5])


def test_adversarial_without_optimum_uses_ascent_direction(qp):
    no_opt = qp.replace(optimum=None)
    _, tr = scarjax.run(no_opt, hooks.scheduled(generic.adversarial(0.5), 2), 4, 0)
    _, base = scarjax.run(no_opt, None, 4, 0)
    assert tr.distance is None
    assert float(tr.loss[3]) > float(base.loss[3])


@given(fraction=st.floats(0.0, 1.0), seed=st.integers(0, 1000))
def test_random_mask_selects_exact_count(fraction, seed):
    tree = {"a": jnp.zeros((7, 3)), "b": jnp.zeros(5)}
    mask = generic.random_mask(jax.random.key(seed), tree, fraction)
    count = sum(int(m.sum()) for m in jax.tree.leaves(mask))
    assert count == round(fraction * 26) or abs(count - fraction * 26) <= 0.5 + 1e-9


def test_reset_restores_exact_initial_values(qp):
    state, tr = scarjax.run(qp, hooks.scheduled(generic.reset(1.0), 9), 10, 0)
    # After a full reset at step 9 and one more step, y(10) = f(w0).
    _, one = scarjax.run(qp, None, 1, 0)
    np.testing.assert_allclose(float(tr.distance[10]), float(one.distance[1]), rtol=1e-6)
    _, tr_half = scarjax.run(qp, hooks.scheduled(generic.reset(0.5), 9), 10, 0)
    assert 0 < float(tr_half.point_delta["write"][9]) < float(tr.point_delta["write"][9])


def test_chain_order_within_a_point(qp):
    """Hooks at one point act in order: reset after a shift undoes part of the shift."""
    shift = hooks.scheduled(hooks.perturbation(lambda p, s, ctx, k: jnp.ones_like(p), name="shift"), 3)
    chained = hooks.chain(shift, hooks.scheduled(generic.reset(1.0), 3))
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


# --------------------------------------------------------------------------------------
# chain is a Hook; scheduled wraps any hook.


def _assert_same(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert jax.tree.structure(a) == jax.tree.structure(b)


def test_chain_is_a_hook_and_equals_the_flat_list_bit_for_bit(sgd):
    g = hooks.scheduled(generic.gaussian(0.05), schedules.every(3))
    r = hooks.scheduled(generic.reset(0.3), schedules.with_probability(0.2))
    s = staleness.ssp(4, 2)
    v = revocation.revocations(4, 0.3)
    q = P.precision(P.mantissa(6), point="update")
    nested = hooks.chain(g, hooks.chain(s, hooks.chain(v)), q, hooks.chain(r))
    assert isinstance(nested, hooks.Hook)
    assert nested.children == (g, s, v, q, r) and nested.workers == 4
    assert nested.points == ("write", "read", "progress", "update")
    flat = scarjax.run(sgd, [g, s, v, q, r], 25, 3, workers=4, measure_read_effect=True)
    chained = scarjax.run(sgd, nested, 25, 3, workers=4, measure_read_effect=True)
    _assert_same(flat, chained)
    assert set(chained[1].delta) == {"gaussian", "ssp", "revocations", "precision_update", "reset"}
    # an empty chain is no hook at all
    assert hooks.flatten_hooks(hooks.chain()) == ()
    _assert_same(scarjax.run(sgd, hooks.chain(), 5, 0), scarjax.run(sgd, None, 5, 0))


def test_scheduled_chain_fires_all_its_points_together(qp):
    """``scheduled(chain(a, b), w)`` equals ``chain(scheduled(a, w), scheduled(b, w))``
    for hooks that use no randomness (one decision per step for both points)."""
    a = generic.adversarial(0.3)
    b = P.precision(P.mantissa(4), point="update")
    when = schedules.every(4, start=1)
    together = hooks.scheduled(hooks.chain(a, b), when, name="both")
    assert together.points == ("write", "update") and together.events == (("when", 1),)
    _, tr = scarjax.run(qp, together, 20, 0)
    _, ref = scarjax.run(qp, [hooks.scheduled(a, when), hooks.scheduled(b, when)], 20, 0)
    np.testing.assert_array_equal(tr.distance, ref.distance)
    np.testing.assert_array_equal(tr.point_delta["update"], ref.point_delta["update"])
    d = np.asarray(tr.delta["both"])  # summed over the hook's two points
    np.testing.assert_allclose(d, np.asarray(ref.delta["adversarial"]) + np.asarray(ref.delta["precision_update"]))
    fired = np.flatnonzero(d)
    np.testing.assert_array_equal(fired, np.arange(1, 20, 4))


def test_scheduled_geometric_fires_once_at_its_draw(qp):
    when = schedules.geometric(0.2, start=2, stop=15)
    h = hooks.scheduled(generic.gaussian(1.0), when)
    for seed in range(3):
        _, tr = scarjax.run(qp, h, 20, seed)
        assert np.count_nonzero(np.asarray(tr.delta["gaussian"])) == 1


def test_scheduled_int_and_traced_step(qp):
    """An int step is ``at(step)``; a traced step varies across trials (hook_args)."""
    keys = jax.random.split(jax.random.key(0), 3)
    T = jnp.array([2, 5, 7])
    _, tr = scarjax.run_trials(qp, lambda t: hooks.scheduled(generic.gaussian(1.0), t), 10, keys, hook_args=T)
    np.testing.assert_array_equal([int(np.flatnonzero(np.asarray(d))[0]) for d in tr.delta["gaussian"]], T)


def test_scheduled_keys_are_the_former_when_keys(qp):
    """Bit-identity with the former ``gaussian(std, when=w)`` (which split the hook key
    into (k_when, k_transform)): an equivalent formulation by hand."""
    when = schedules.with_probability(0.3)

    def by_hand(params, hstate, ctx, key):
        k_when, k_t = jax.random.split(ctx.key)
        fire = jax.random.bernoulli(k_when, 0.3)
        noise = 0.1 * jax.random.normal(jax.random.split(k_t, 1)[0], params.shape, jnp.float32)
        return jnp.where(fire, params + noise, params)

    _, tr = scarjax.run(qp, hooks.scheduled(generic.gaussian(0.1), when), 30, 4)
    _, ref = scarjax.run(qp, hooks.param_hook(by_hand, name="gaussian"), 30, 4)
    np.testing.assert_array_equal(tr.distance, ref.distance)
    assert 0 < np.count_nonzero(np.asarray(tr.delta["gaussian"])) < 30


@pytest.mark.cpu_exact
def test_stored_numbers_unchanged():
    """Distances recorded with the API before its names were made unambiguous (``hooks.gaussian(1.0,
    when=hooks.with_probability(0.05, stop=150))`` and ``hooks.reset(0.3, when=50)`` on
    the Fig 5.3 QP, key 5)."""
    qp = quadratic.fig53_problem()
    _, tr = scarjax.run(qp, hooks.scheduled(generic.gaussian(1.0), schedules.with_probability(0.05, stop=150)), 200,
                        jax.random.key(5))
    np.testing.assert_array_equal(np.asarray(tr.distance)[[0, 50, 120, 200]], np.float32(STORED["gauss_wp"]))
    _, tr = scarjax.run(qp, hooks.scheduled(generic.reset(0.3), 50), 200, jax.random.key(5))
    np.testing.assert_array_equal(np.asarray(tr.distance)[[0, 50, 51, 200]], np.float32(STORED["reset_at"]))


STORED = {
    "gauss_wp": [2.0, 1.5566251277923584, 2.915166139602661, 2.0382747650146484],
    "reset_at": [2.0, 1.5566251277923584, 1.5964552164077759, 0.7541242837905884],
}
