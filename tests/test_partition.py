"""Tests for scarjax.scar.partition: block maps of any pytree state, server assignment, masks."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given
from hypothesis import strategies as st

from scarjax import State
from scarjax.scar import partition as P


def _adam_state():
    params = {"w": jnp.arange(15.0).reshape(5, 3), "b": jnp.ones(3)}
    return State(params, optax.adam(1e-3).init(params))


def test_by_row_blocks_and_adam_colocation():
    s = _adam_state()
    part = P.by_row(s, num_servers=2, key=0)
    # leaves flatten as b (3 rows) then w (5 rows)
    assert part.num_blocks == 8
    np.testing.assert_array_equal(part.blocks.params["b"], [0, 1, 2])
    np.testing.assert_array_equal(part.blocks.params["w"][:, 0], [3, 4, 5, 6, 7])
    assert part.blocks.params["w"].shape == (5, 1)
    adam = part.blocks.aux[0]
    # Adam moments have the params' structure: co-located with their parameters.
    for moment in (adam.mu, adam.nu):
        chex.assert_trees_all_equal(moment, part.blocks.params)
    assert int(adam.count) == P.NEVER  # the step count is never lost


def test_layouts_shard_layer_element_axis():
    s = State({"a": jnp.zeros((10, 3)), "c": jnp.zeros((2, 4))})
    sh = P.by_shard(s, shards=4, num_servers=3)
    # np.array_split sizes along the first dim: 3, 2, 3, 2 for a; c has only 2 rows.
    assert sh.num_blocks == 4 + 2
    np.testing.assert_array_equal(np.bincount(np.asarray(sh.blocks.params["a"]).ravel()), [3, 2, 3, 2])
    assert P.by_layer(s).num_blocks == 2
    assert P.by_element(s).num_blocks == 30 + 8
    mf = P.by_axis(s, {"a": 0, "c": 1})  # rows of L, columns of R (Sec 5.5.1)
    assert mf.num_blocks == 10 + 4
    assert mf.blocks.params["c"].shape == (1, 4)
    mixed = P.build(s, {"a": "never", "c": "row"})
    assert mixed.num_blocks == 2
    assert int(np.asarray(mixed.blocks.params["a"]).max()) == P.NEVER


def test_bare_params_and_scalar_leaf():
    part = P.by_row({"x": jnp.zeros(()), "y": jnp.zeros((4, 2))})
    assert part.num_blocks == 1 + 4
    assert part.blocks.aux == ()


def test_aux_blocks_follow_documents():
    # LDA-like: doc-topic rows are blocks; token assignments z follow their document;
    # the word-topic counts are never lost (regenerated from z).
    D, K, V = 4, 3, 6
    doc_of_token = jnp.array([0, 0, 1, 2, 2, 2, 3])
    s = State({"doc_topic": jnp.zeros((D, K)), "word_topic": jnp.zeros((V, K))},
              {"z": jnp.zeros(7, jnp.int32), "nwk": jnp.zeros((V, K))})
    part = P.build(
        s, {"doc_topic": "row", "word_topic": "never"},
        aux_blocks=lambda aux, pb: {"z": pb["doc_topic"][:, 0][doc_of_token], "nwk": None},
    )
    assert part.num_blocks == D
    np.testing.assert_array_equal(part.blocks.aux["z"], doc_of_token)
    lost = jnp.array([False, False, True, False])
    masks = P.entry_masks(part, lost)
    np.testing.assert_array_equal(masks.aux["z"], doc_of_token == 2)
    assert not bool(jnp.any(masks.aux["nwk"]))
    assert not bool(jnp.any(masks.params["word_topic"]))


def test_server_assignment_balanced_and_deterministic():
    s = State({"w": jnp.zeros((37, 2))})
    a = P.by_row(s, num_servers=8, key=3)
    b = P.by_row(s, num_servers=8, key=3)
    c = P.by_row(s, num_servers=8, key=4)
    np.testing.assert_array_equal(a.server_of, b.server_of)
    assert not np.array_equal(a.server_of, c.server_of)
    counts = np.bincount(np.asarray(a.server_of), minlength=8)
    assert counts.min() >= 37 // 8 and counts.max() <= -(-37 // 8)
    ordered = P.by_row(s, num_servers=8, key=None)
    np.testing.assert_array_equal(ordered.server_of, np.arange(37) % 8)
    failed = jnp.zeros(8, bool).at[jnp.array([1, 5])].set(True)
    lost = P.server_blocks(a, failed)
    np.testing.assert_array_equal(lost, np.isin(np.asarray(a.server_of), [1, 5]))


@given(seed=st.integers(0, 2**31 - 1), k=st.integers(0, 23))
def test_random_blocks_exact_count(seed, k):
    m = _random_blocks_jit(jax.random.key(seed), k / 23)
    assert int(m.sum()) == k


_random_blocks_jit = jax.jit(lambda key, p: P.random_blocks(key, 23, p))


@given(seed=st.integers(0, 2**31 - 1), k=st.integers(0, 6))
def test_random_servers_exact_count(seed, k):
    assert int(_random_servers_jit(jax.random.key(seed), k).sum()) == k


_random_servers_jit = jax.jit(lambda key, k: P.random_servers(key, 6, k))


def test_restore_and_block_distances():
    s = _adam_state()
    part = P.by_row(s)
    zeros = jax.tree.map(jnp.zeros_like, s)
    lost = jnp.zeros(part.num_blocks, bool).at[jnp.array([0, 4])].set(True)  # b[0], w row 1
    r = P.restore(s, zeros, part, lost)
    assert float(r.params["b"][0]) == 0 and float(r.params["b"][1]) == 1
    np.testing.assert_array_equal(r.params["w"][1], 0)
    np.testing.assert_array_equal(r.params["w"][0], s.params["w"][0])
    d = P.block_distances(part, s.params, r.params)
    expect = np.zeros(8)
    expect[0] = 1.0
    expect[4] = np.linalg.norm(np.asarray(s.params["w"][1]))
    np.testing.assert_allclose(d, expect, rtol=1e-6)
    generic = P.block_distances(part, s.params, r.params, norm=lambda t: jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree.leaves(t))))
    np.testing.assert_allclose(generic, expect, rtol=1e-6)
    l1 = P.block_distances(part, s.params, r.params, norm="l1")
    np.testing.assert_allclose(l1[4], np.abs(np.asarray(s.params["w"][1])).sum(), rtol=1e-6)
    sizes = P.block_sizes(part, s)
    np.testing.assert_array_equal(sizes, [3, 3, 3] + [9] * 5)  # param + mu + nu entries


def test_partition_is_data_jit_and_vmap():
    s = State({"w": jnp.ones((6, 2))})
    parts = [P.by_row(s, num_servers=3, key=k) for k in range(4)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *parts)
    failed = jnp.array([True, False, False])
    lost = jax.jit(jax.vmap(P.server_blocks, in_axes=(0, None)))(stacked, failed)
    for i, p in enumerate(parts):
        np.testing.assert_array_equal(lost[i], P.server_blocks(p, failed))
    re = parts[0].reassign(jnp.zeros(6, jnp.int32))
    assert bool(jnp.all(P.server_blocks(re, failed)))


def test_bad_inputs():
    s = State({"w": jnp.zeros((3, 2))})
    with pytest.raises(ValueError, match="num_servers"):
        P.by_row(s, num_servers=0)
    with pytest.raises(ValueError, match="layout"):
        P.build(s, "diagonal")
    with pytest.raises(ValueError, match="shards"):
        P.build(s, ("shard", 0))
    with pytest.raises(ValueError, match="column"):
        P.build(State({"v": jnp.zeros(3)}), "column")
    with pytest.raises(ValueError, match="block ids"):
        P.build(State(s.params, {"z": jnp.zeros(4)}), aux_blocks=lambda aux, pb: {"z": jnp.array([0, 1, 2, 9])})
    with pytest.raises(ValueError, match="structure"):
        P.build(State(s.params, {"z": jnp.zeros(4)}), aux_blocks=lambda aux, pb: [None, None])
    with pytest.raises(ValueError, match="no blocks"):
        P.build(s, "never")
    with pytest.raises(ValueError, match="fraction"):
        P.random_blocks(jax.random.key(0), 4, 1.5)
    with pytest.raises(ValueError, match="count"):
        P.random_servers(jax.random.key(0), 4, 5)
    with pytest.raises(ValueError, match="server_of"):
        P.by_row(s).reassign(jnp.zeros(2, jnp.int32))


def test_partition_of_another_model_is_refused():
    """check_matches (used by restore, block_distances, checkpoint.init and scar's
    init) names the partition when tree structure or leaf shapes differ, instead of failing
    inside JAX (or broadcasting silently)."""
    s = _adam_state()
    part = P.by_row(s)
    P.check_matches(part, s)  # its own state: fine
    P.check_matches(part, s.params)  # the params part alone: fine
    other_shape = State({"w": jnp.zeros((7, 3)), "b": jnp.ones(3)}, ())
    other_tree = State({"w": jnp.zeros((5, 3))}, ())
    for state in (other_shape, other_tree):
        with pytest.raises(ValueError, match="partition was built for"):
            P.check_matches(part, state)
        with pytest.raises(ValueError, match="partition"):
            P.restore(state, state, part, jnp.ones(part.num_blocks, bool))
    with pytest.raises(ValueError, match="block ids at .*'w'.* shape \\(5, 1\\)"):
        P.block_distances(part, {"b": jnp.ones(3), "w": jnp.zeros((6, 3))}, {"b": jnp.ones(3), "w": jnp.zeros((6, 3))})
    with pytest.raises(ValueError, match="block_mask"):
        P.restore(s, s, part, jnp.ones(part.num_blocks + 1, bool))
    with pytest.raises(ValueError, match="server_of must be an integer in"):
        part.reassign(np.full(part.num_blocks, part.num_servers))  # no such server
    with pytest.raises(ValueError, match="axis must be an int or a pytree prefix"):
        P.by_axis(s, {"nope": 0})
    with pytest.raises(TypeError, match="axis"):
        P.by_axis(s, "rows")
    with pytest.raises(TypeError, match="key"):
        P.by_row(s, key="abc")
