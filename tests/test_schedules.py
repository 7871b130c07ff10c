"""Schedules (scarjax.schedules): when an event happens."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

from scarjax import schedules as S


def _fires(schedule, n_steps, seed=0):
    """Whether ``schedule`` fires at each of ``0 … n_steps − 1`` (state from ``init``)."""
    key = jax.random.key(seed)
    state = schedule.init(jax.random.fold_in(key, -1 % 2**31))
    ks = jnp.arange(n_steps, dtype=jnp.int32)
    keys = jax.vmap(lambda k: jax.random.fold_in(key, k))(ks)
    return np.asarray(jax.vmap(lambda k, kk: schedule.fires(k, kk, state))(ks, keys))


@given(k=st.integers(1, 9), start=st.integers(0, 20), length=st.one_of(st.none(), st.integers(1, 40)))
def test_every_fires_iff_multiple_of_k_in_window(k, start, length):
    stop = None if length is None else start + length
    got = _fires(S.every(k, start=start, stop=stop), 80)
    steps = np.arange(80)
    want = (steps >= start) & ((steps - start) % k == 0)
    if stop is not None:
        want &= steps < stop
    np.testing.assert_array_equal(got, want)


_steps_traced = jax.jit(jax.vmap(lambda a, k: S.steps(a).fires(k, jax.random.key(0), ()), (None, 0)))


@given(listed=st.lists(st.integers(0, 59), max_size=8), pad_first=st.booleans())
def test_steps_fires_exactly_at_listed_steps(listed, pad_first):
    pad = [-1] * (8 - len(listed))  # padded to one length, as trials' tables are stacked
    arr = np.asarray(pad + listed if pad_first else listed + pad, np.int32)
    got = np.flatnonzero(_fires(S.steps(arr), 60))
    np.testing.assert_array_equal(got, sorted(set(listed)))
    # traced: the same array as an argument of the compiled program
    np.testing.assert_array_equal(np.flatnonzero(_steps_traced(jnp.asarray(arr), jnp.arange(60))), sorted(set(listed)))


def test_at_and_constants():
    np.testing.assert_array_equal(np.flatnonzero(_fires(S.at(3, 7), 20)), [3, 7])
    assert _fires(S.always(), 10).all() and not _fires(S.never(), 10).any()
    assert S.at(3, 7).events == (3, 7)
    assert S.every(4, start=2).events == (2,)
    assert S.steps([9, -1, 4]).events == (4,)
    assert S.with_probability(0.1).events == () and S.with_probability(0.1, start=3).events == (3,)
    assert S.with_probability(0.1, stop=9).events == (0,) and S.always().events == ()
    # a traced step (hook_args): fires at that step only, no concrete event
    f = jax.jit(lambda T, k: S.at(T)(k, jax.random.key(0)))
    assert [k for k in range(10) if f(jnp.int32(6), k)] == [6]


def test_with_probability_is_the_bernoulli_of_the_step_key():
    s = S.with_probability(0.3, start=5, stop=50)
    key = jax.random.key(11)
    ks = jnp.arange(60)
    kk = jax.vmap(lambda k: jax.random.fold_in(key, k))(ks)
    want = (ks >= 5) & (ks < 50) & jax.vmap(lambda k: jax.random.bernoulli(k, 0.3))(kk)
    np.testing.assert_array_equal(jax.vmap(s.fires, (0, 0, None))(ks, kk, ()), want)
    freq = _fires(S.with_probability(0.25), 4000).mean()
    assert 0.22 < freq < 0.28


def _geometric_cdf(q, start, stop, t):
    """``P(T <= t)`` of ``start + Geometric(q)`` truncated to ``[start, stop)``."""
    j = np.clip(t - start + 1, 0, None)
    cdf = 1.0 - (1.0 - q) ** j
    if stop is not None:
        cdf = np.where(t >= stop - 1, 1.0, cdf / (1.0 - (1.0 - q) ** (stop - start)))
    return cdf


@given(q=st.floats(0.01, 0.6), start=st.integers(0, 10), length=st.one_of(st.none(), st.integers(2, 60)))
def test_geometric_first_fire_matches_truncated_geometric(q, start, length):
    stop = None if length is None else start + length
    g = S.geometric(q, start=start, stop=stop)
    n = 20000
    T = np.asarray(g.sample(jax.random.key(1), (n,)))
    assert T.min() >= start and (stop is None or T.max() < stop)
    # Dvoretzky–Kiefer–Wolfowitz: P(sup |F_n − F| > 0.02) <= 2 exp(-2 n 0.02²) ≈ 2e-7.
    ts = np.arange(start, T.max() + 1)
    emp = np.searchsorted(np.sort(T), ts, side="right") / n
    assert np.max(np.abs(emp - _geometric_cdf(q, start, stop, ts))) < 0.02


def test_geometric_fires_once_at_its_init_draw():
    g = S.geometric(0.05, start=3, stop=80)
    for seed in range(5):
        key = jax.random.key(seed)
        T = int(g.init(key))
        assert T == int(g.sample(key))
        fired = np.flatnonzero(np.asarray(jax.vmap(lambda k: g.fires(k, key, jnp.int32(T)))(jnp.arange(100))))
        np.testing.assert_array_equal(fired, [T])


def test_geometric_numbers_unchanged():
    """The draws of the former ``faults.Geometric.sample`` (recorded before the move)."""
    cases = {
        (0.01, 1, None): ([8, 277, 105, 370, 33, 88], 112),
        (0.01, 1, 300): ([8, 222, 96, 261, 31, 81], 102),
        (0.3, 5, 40): ([5, 12, 7, 15, 5, 7], 8),
        (1.0, 2, 10): ([2] * 6, 2),
        (0.001, 0, 5000): ([76, 2684, 1033, 3474, 323, 864], 1106),
    }
    for (rate, start, stop), (many, one) in cases.items():
        g = S.geometric(rate, start, stop)
        assert np.asarray(g.sample(jax.random.key(3), (6,))).tolist() == many
        assert int(g.init(jax.random.key(7))) == one
    # a traced rate (varied across trials)
    rates = jnp.asarray([0.01, 0.3])
    T = jax.vmap(lambda r: S.geometric(r, 1, 300).init(jax.random.key(7)))(rates)
    assert int(T[0]) == 102


def test_as_schedule():
    s = S.every(3)
    assert S.as_schedule(s) is s
    assert S.as_schedule(5).events == (5,)
    assert S.as_schedule(np.int64(4)).events == (4,)
    assert S.as_schedule(jnp.int32(2)).events == (2,)
    f = jax.jit(lambda T, k: S.as_schedule(T)(k, jax.random.key(0)))
    assert bool(f(jnp.int32(4), 4)) and not bool(f(jnp.int32(4), 5))
    for bad in (1.5, True, "3", None, [1, 2], lambda step, key: True):
        with pytest.raises(TypeError, match="when"):
            S.as_schedule(bad)
    with pytest.raises(ValueError, match="when"):
        S.as_schedule(-2)


@pytest.mark.parametrize(
    "make, arg",
    [
        (lambda: S.at(), "steps"),
        (lambda: S.at(-1), "steps"),
        (lambda: S.at(1.5), "steps"),
        (lambda: S.at(np.arange(3)), "steps"),
        (lambda: S.every(0), "k"),
        (lambda: S.every(2, start=-1), "start"),
        (lambda: S.every(2, start=5, stop=5), "stop"),
        (lambda: S.with_probability(1.5), "p"),
        (lambda: S.with_probability(float("nan")), "p"),
        (lambda: S.with_probability(0.1, stop=0), "stop"),
        (lambda: S.geometric(0.0), "rate"),
        (lambda: S.geometric(None), "rate"),
        (lambda: S.geometric(0.1, start=-1), "start"),
        (lambda: S.geometric(0.1, start=3, stop=3), "stop"),
        (lambda: S.steps([[1, 2]]), "array"),
        (lambda: S.steps([1.5]), "array"),
        (lambda: S.steps([3, -2]), "array"),
        (lambda: S.Schedule(None, lambda s, k, st: True), "init"),
        (lambda: S.Schedule(lambda k: (), lambda s, k, st: True, events=(1.5,)), "events"),
    ],
)
def test_bad_arguments_name_the_argument(make, arg):
    with pytest.raises((ValueError, TypeError), match=arg):
        make()


def test_geometric_rate_below_float32_resolution_stays_in_its_window():
    """A rate that rounds to 0 in float32 draws uniformly in a truncated window (never
    outside it) and, untruncated, far after the run (an int32 step, no event)."""
    keys = jax.random.split(jax.random.key(0), 200)
    T = jax.vmap(lambda k: S.geometric(1e-300, start=1, stop=5).init(k))(keys)
    assert set(np.unique(np.asarray(T)).tolist()) <= {1, 2, 3, 4}
    T = S.geometric(1e-300, start=3).init(jax.random.key(1))
    assert int(T) >= 2**29
