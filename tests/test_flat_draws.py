"""The premise of the flat draws of scarjax.perturb.precision (stochastic rounding) and of
scarjax.models.mf's initial factors:
``jax.random`` draws of shape ``(n,)`` reshaped to ``s`` are the numbers of a draw of shape
``s`` (both count elements by their flat index), so drawing flat, which XLA:CPU compiles
seconds faster, changes no result; and scarjax.rng, which draws that way (padded to
``rng.MIN_FLAT`` elements), is ``jax.random`` bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scarjax
from scarjax import hooks, rng
from scarjax.models import mf, quadratic
from scarjax.perturb import gaussian

shapes = st.lists(st.integers(1, 6), min_size=1, max_size=3).map(tuple)
draws = {
    "normal": lambda k, s: jax.random.normal(k, s, jnp.float32),
    "uniform": lambda k, s: jax.random.uniform(k, s),
}


@settings(max_examples=3, deadline=None)  # each shaped draw compiles for seconds
@given(shape=shapes, seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(sorted(draws)))
def test_a_flat_draw_reshaped_is_the_shaped_draw(shape, seed, kind):
    key = jax.random.key(seed)
    n = int(np.prod(shape))
    np.testing.assert_array_equal(np.asarray(draws[kind](key, (n,)).reshape(shape)),
                                  np.asarray(draws[kind](key, shape)))


def test_the_check_catches_another_element_order():
    # planted: the flat draw laid out column-major is not the shaped draw
    key = jax.random.key(0)
    flat = np.asarray(jax.random.normal(key, (12,)))
    assert not np.array_equal(flat.reshape((3, 4), order="F"), np.asarray(jax.random.normal(key, (3, 4))))


def test_mf_init_is_the_two_dimensional_uniform_draw():
    # scarjax.models.mf draws its factors flat (thesis Sec 5.5.1: uniform in [0, 1)); they must
    # be the numbers of the 2-D draws they replace, so no result moves
    m, n, p = 7, 5, 3
    alg = mf.mf(np.ones((m, n)), np.ones((m, n), bool), factors=p, lam=1.0)
    key = jax.random.key(3)
    got = alg.init(key, alg.data).params
    kl, kr = jax.random.split(key)
    np.testing.assert_array_equal(np.asarray(got["L"]), np.asarray(jax.random.uniform(kl, (m, p), jnp.float32)))
    np.testing.assert_array_equal(np.asarray(got["R"]), np.asarray(jax.random.uniform(kr, (p, n), jnp.float32)))
    # planted: the draws swapped between the factors are not what the 2-D draws give
    assert not np.array_equal(np.asarray(got["L"]), np.asarray(jax.random.uniform(kr, (m, p), jnp.float32)))


# scarjax.rng: jax.random's numbers drawn flat (at least rng.MIN_FLAT elements, cut and reshaped).

rng_draws = {
    "uniform": (lambda k, s: rng.uniform(k, s, -0.5, 2.0), lambda k, s: jax.random.uniform(k, s, jnp.float32, -0.5, 2.0)),
    "normal": (rng.normal, lambda k, s: jax.random.normal(k, s, jnp.float32)),
    "bernoulli": (lambda k, s: rng.bernoulli(k, 0.3, s), lambda k, s: jax.random.bernoulli(k, 0.3, s)),
}
small_shapes = st.lists(st.integers(1, 5), min_size=0, max_size=2).map(tuple)


def _bits(x):
    x = np.asarray(x)
    return x.view(np.uint32) if x.dtype == np.float32 else x


@settings(max_examples=3, deadline=None)  # each example compiles its draws
@given(shape=small_shapes, seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(sorted(rng_draws)))
def test_rng_draws_are_jax_randoms_bit_for_bit(shape, seed, kind):
    ours, theirs = rng_draws[kind]
    key = jax.random.key(seed)
    np.testing.assert_array_equal(_bits(ours(key, shape)), _bits(theirs(key, shape)))
    # and per trial under jit + vmap, as in scarjax.run_trials
    keys = jax.random.split(key, 3)
    np.testing.assert_array_equal(_bits(jax.jit(jax.vmap(lambda k: ours(k, shape)))(keys)),
                                  _bits(jax.jit(jax.vmap(lambda k: theirs(k, shape)))(keys)))


def test_a_longer_flat_draw_begins_with_the_shorter_one():
    # the premise of the cut: element i of a draw is the hash of the key and i, whatever the length
    key = jax.random.key(5)
    long = np.asarray(jax.random.uniform(key, (rng.MIN_FLAT,)))
    np.testing.assert_array_equal(long[:3], np.asarray(jax.random.uniform(key, (3,))))
    # planted: the draw's tail is not its head
    assert not np.array_equal(long[1:4], np.asarray(jax.random.uniform(key, (3,))))


def test_rng_falls_back_to_jax_random_for_another_prng():
    key = jax.random.key(2, impl="rbg")
    assert not rng.flat_ok(key)
    np.testing.assert_array_equal(np.asarray(rng.uniform(key, (3, 2))), np.asarray(jax.random.uniform(key, (3, 2))))
    assert rng.flat_ok(jax.random.key(2)) and rng.flat_ok(jax.random.PRNGKey(2))


def test_rng_bernoulli_refuses_a_vector_p():
    with pytest.raises(ValueError, match="p must be a scalar"):
        rng.bernoulli(jax.random.key(0), jnp.ones(3) * 0.5, (3,))


def test_gaussian_hook_adds_jax_random_normal_noise():
    # perturb.gaussian draws with rng.normal: a run under it is the run under the same hook
    # written with jax.random.normal, bit for bit
    qp = quadratic.fig53_problem()

    def reference(std):
        def delta_fn(params, hstate, ctx, key):
            leaves, treedef = jax.tree.flatten(params)
            ks = jax.random.split(key, len(leaves))
            return jax.tree.unflatten(treedef, [std * jax.random.normal(k, x.shape, jnp.float32)
                                                for k, x in zip(ks, leaves)])
        return hooks.perturbation(delta_fn, name="gaussian")

    # factories of the std: one compilation for both reference runs
    factories = {make: (lambda a, make=make: hooks.scheduled(make(a), 2)) for make in (gaussian, reference)}
    run = lambda make, std: scarjax.run(qp, factories[make], 4, jax.random.key(1),  # noqa: E731
                                        hook_args=np.float32(std))
    (s1, t1), (s2, t2) = run(gaussian, 0.7), run(reference, 0.7)
    np.testing.assert_array_equal(_bits(t1.distance), _bits(t2.distance))
    np.testing.assert_array_equal(_bits(jax.tree.leaves(s1.params)[0]), _bits(jax.tree.leaves(s2.params)[0]))
    # planted: another std is another run
    _, t3 = run(reference, 0.70001)
    assert not np.array_equal(np.asarray(t1.distance), np.asarray(t3.distance))
