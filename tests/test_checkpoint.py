"""Tests for scarjax.scar.checkpoint: the in-memory running checkpoint and its strategies."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from scarjax import State
from scarjax import schedules
from scarjax.scar import checkpoint as ck
from scarjax.scar import partition as P

B = 16


def _state(value=0.0):
    params = {"w": jnp.full((B, 2), value)}
    return State(params, optax.adam(1e-3).init(params))


PART = P.by_row(_state(), num_servers=4, key=0)


@functools.partial(jax.jit, static_argnums=0)
def _step(spec, ckpt, state, k, key):
    return ck.step(spec, ckpt, state, PART, k, key)


def test_spec_validation():
    with pytest.raises(ValueError, match="strategy"):
        ck.Checkpoint("smart")
    with pytest.raises(ValueError, match="fraction"):
        ck.Checkpoint("priority", 0.0, 8)
    with pytest.raises(ValueError, match="fraction must be 1"):
        ck.Checkpoint("full", 0.5, 8)
    with pytest.raises(ValueError, match="period"):
        ck.Checkpoint("priority", 0.5, 0)
    with pytest.raises(ValueError, match="period"):
        ck.Checkpoint("priority", 0.5, 2.5)
    with pytest.raises(ValueError, match="norm"):
        ck.Checkpoint("priority", 0.5, 8, norm="linf")
    with pytest.raises(TypeError, match="partition"):
        ck.saver("not a partition", ck.Checkpoint())


def test_interval_due_count():
    spec = ck.Checkpoint("priority", 0.25, 16)
    assert int(ck.interval(spec)) == 4
    assert [bool(ck.due(spec, k)) for k in range(9)] == [False, False, False, False, True, False, False, False, True]
    assert int(ck.count(spec, B)) == 4
    assert int(ck.count(ck.Checkpoint("random", 1 / 64, 64), B)) == 1  # at least one block
    assert not bool(ck.due(ck.Checkpoint(), 5))  # period None: never saves


def test_when_schedule_instead_of_period():
    """Checkpoint(when=...) saves where the schedule fires (never at step 0); exactly one
    of period/when; the saver and scar hooks carry its events."""
    with pytest.raises(ValueError, match="at most one of period"):
        ck.Checkpoint("priority", 0.5, 8, when=schedules.every(4))
    with pytest.raises(TypeError, match="when"):
        ck.Checkpoint("priority", 0.5, when="often")
    spec = ck.Checkpoint("round_robin", 0.25, when=schedules.at(0, 3, 7))
    assert ck.Checkpoint("priority", 0.5, when=5).events() == (("checkpoint.when", 5),)
    with pytest.raises(ValueError, match="key is required"):
        ck.due(spec, 3)
    with pytest.raises(ValueError, match="key is required"):
        ck.init(_state(), PART, spec)
    h = ck.saver(PART, spec)
    assert h.events == (("checkpoint.when", 0), ("checkpoint.when", 3), ("checkpoint.when", 7))
    from scarjax.hooks import Context

    alg = type("A", (), {"norm": None})()
    apply = jax.jit(lambda s, hs, k: h.apply(s, hs, Context(step=k, key=jax.random.key(1), state=s,
                                                           initial_params=s.params, algorithm=alg)))
    hs = h.init(_state(), jax.random.key(0))
    for k in range(9):
        _, hs = apply(_state(float(k)), hs, jnp.int32(k))
    assert int(hs.saves) == 2 and int(hs.cursor) == 8  # saved at 3 and 7 (4 blocks each), not at 0
    np.testing.assert_array_equal(np.unique(np.asarray(hs.saved_at)), [0, 3, 7])
    # A stateful schedule is drawn at init from the key and fires with fold_in(key, 1).
    g = ck.Checkpoint("full", 1.0, when=schedules.geometric(0.3, start=1, stop=9))
    c = ck.init(_state(), PART, g, jax.random.key(4))
    T = int(c.when)
    assert T == int(schedules.geometric(0.3, start=1, stop=9).sample(jax.random.key(4)))
    fired = [k for k in range(9) if bool(ck.due(g, k, jax.random.key(k), c.when))]
    assert fired == [T]


def test_priority_selects_largest_changes():
    s0 = _state()
    ckpt = ck.init(s0, PART)
    change = jnp.arange(B, dtype=jnp.float32)[:, None] * jnp.ones((1, 2))
    s = s0._replace(params={"w": s0.params["w"] + change})
    spec = ck.Checkpoint("priority", 0.25, 16)
    new, mask = _step(spec, ckpt, s, jnp.int32(4), jax.random.key(0))
    np.testing.assert_array_equal(np.nonzero(np.asarray(mask))[0], [12, 13, 14, 15])
    # Saved blocks hold the new values and their save iteration; others keep w(0).
    np.testing.assert_array_equal(new.saved.params["w"][12:], s.params["w"][12:])
    np.testing.assert_array_equal(new.saved.params["w"][:12], 0)
    np.testing.assert_array_equal(new.saved_at, np.where(np.arange(B) >= 12, 4, 0))
    # Adam moments were saved with their rows; the never-lost count is refreshed.
    s2 = s._replace(aux=jax.tree.map(lambda x: x + 1, s.aux))
    new2, mask2 = _step(spec, new, s2, jnp.int32(8), jax.random.key(1))
    np.testing.assert_array_equal(np.nonzero(np.asarray(mask2))[0], [8, 9, 10, 11])
    mu = new2.saved.aux[0].mu["w"]
    np.testing.assert_array_equal(mu[8:12], 1)
    np.testing.assert_array_equal(mu[:8], 0)
    assert int(new2.saved.aux[0].count) == 1
    # Not due: nothing saved.
    same, none = _step(spec, new2, s2, jnp.int32(9), jax.random.key(2))
    assert not bool(none.any())
    np.testing.assert_array_equal(same.saved_at, new2.saved_at)


@pytest.mark.parametrize("strategy", ["round_robin", "random", "priority"])
@pytest.mark.parametrize("r", [1.0, 0.5, 0.25, 0.125])
def test_constant_data_per_full_period(strategy, r):
    """Saving r of the blocks every rC iterations writes B blocks per C iterations (Sec
    5.4.2); round robin covers every block exactly once per C."""
    C = 16
    spec = ck.Checkpoint(strategy, r, C)
    s = _state()
    ckpt = ck.init(s, PART)
    saved = np.zeros(B, int)
    for k in range(1, C + 1):
        s = s._replace(params={"w": s.params["w"] + jax.random.normal(jax.random.key(k), (B, 2))})
        ckpt, mask = _step(spec, ckpt, s, jnp.int32(k), jax.random.key(100 + k))
        saved += np.asarray(mask)
    assert saved.sum() == B
    if strategy == "round_robin":
        np.testing.assert_array_equal(saved, 1)


def test_full_strategy_saves_everything():
    s = _state(3.0)
    ckpt, mask = _step(ck.Checkpoint("full", 1.0, 5), ck.init(_state(), PART), s, jnp.int32(5), jax.random.key(0))
    assert bool(mask.all())
    np.testing.assert_array_equal(ckpt.saved.params["w"], 3.0)


def test_traced_fraction_and_period_vmap():
    s0 = _state()
    s = s0._replace(params={"w": s0.params["w"] + jnp.arange(B, dtype=jnp.float32)[:, None]})
    rs = jnp.array([1.0, 0.5, 0.25])
    periods = jnp.array([4, 8, 16])

    def one(r, c):
        spec = ck.Checkpoint("priority", r, c)
        return ck.step(spec, ck.init(s0, PART), s, PART, jnp.int32(4), jax.random.key(0))[1]

    masks = jax.jit(jax.vmap(one))(rs, periods)
    # r*C = 4 for all three; the count is r*B.
    np.testing.assert_array_equal(masks.sum(-1), [16, 8, 4])


def test_saver_hook_keeps_state():
    h = ck.saver(PART, ck.Checkpoint("round_robin", 0.5, 4))
    s = _state(1.0)
    hs = h.init(s, jax.random.key(0))
    from scarjax.hooks import Context

    ctx = Context(step=jnp.int32(2), key=jax.random.key(1), state=s, initial_params=s.params,
                  algorithm=type("A", (), {"norm": None})())
    out, hs2 = h.apply(s, hs, ctx)
    assert out is s
    assert int(hs2.saves) == 1 and int(hs2.cursor) == 8


def test_traced_strategy_matches_static():
    s0 = _state()
    s = s0._replace(params={"w": s0.params["w"] + jnp.arange(B, dtype=jnp.float32)[::-1, None]})
    ckpt = ck.init(s0, PART)._replace(cursor=jnp.int32(5))
    key = jax.random.key(3)

    def traced(i):
        return ck.step(ck.Checkpoint(i, 0.25, 8), ckpt, s, PART, jnp.int32(2), key)

    out = jax.jit(jax.vmap(traced))(jnp.arange(len(ck.STRATEGIES)))
    for i, name in enumerate(ck.STRATEGIES):
        spec = ck.Checkpoint(name, 1.0 if name == "full" else 0.25, 8 if name != "full" else 2)
        ref = ck.step(spec, ckpt, s, PART, jnp.int32(2), key)
        np.testing.assert_array_equal(out[1][i], ref[1], err_msg=name)
        np.testing.assert_array_equal(out[0].cursor[i], ref[0].cursor, err_msg=name)


def test_checkpoint_of_another_model_is_refused():
    small = State({"w": jnp.zeros((B - 1, 2))}, ())
    with pytest.raises(ValueError, match="partition"):
        ck.init(small, PART)
    ckpt = ck.init(_state(), PART)
    with pytest.raises(ValueError, match="partition"):
        ck.step(ck.Checkpoint("priority", 0.5, 4), ckpt, small, PART, 4, jax.random.key(0))
    with pytest.raises(ValueError, match="block_mask"):
        ck.save(ckpt, _state(), PART, jnp.ones(B + 1, bool), 3)
    with pytest.raises(TypeError, match="fraction"):
        ck.Checkpoint("priority", "half", 8)
    with pytest.raises(TypeError, match="period"):
        ck.Checkpoint("priority", 0.5, "8")
    with pytest.raises(ValueError, match="fraction must be a scalar"):
        ck.Checkpoint("priority", [0.5, 0.5], 8)
