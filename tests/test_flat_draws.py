"""The premise of the flat draws of scarjax.perturb.precision (stochastic rounding) and of
scarjax.models.mf's initial factors:
``jax.random`` draws of shape ``(n,)`` reshaped to ``s`` are the numbers of a draw of shape
``s`` (both count elements by their flat index), so drawing flat, which XLA:CPU compiles
seconds faster, changes no result."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.models import mf

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
