"""partition.by_unit: blocks that span several leaves (a hidden unit of an MLP: a column of
W1, an entry of b1, a row of W2, with Adam's moments of those entries; thesis Sec 5.4,
5.5.1). Every entry is assigned to exactly one block, a unit's block is exactly its
entries (a property test, with a planted by-row partition that fails it), and
check_partial_recovery holds on it for a small MLP."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import scarjax
from scarjax import State
from scarjax import testing as sxt
from scarjax.scar import partition as P

UNITS = {"W1": 1, "b1": 0, "W2": 0}


def mlp_params(d, h, o):
    k1, k2 = jax.random.split(jax.random.key(0))
    return {
        "W1": 0.5 * jax.random.normal(k1, (d, h)), "b1": jnp.zeros(h),
        "W2": 0.5 * jax.random.normal(k2, (h, o)), "b2": jnp.zeros(o),
    }


def mlp_state(d, h, o):
    params = mlp_params(d, h, o)
    return State(params, optax.adam(1e-2).init(params))


def block_masks(part, state, b):
    """Full-shape boolean masks of block ``b`` over the whole state."""
    one = jnp.zeros(part.num_blocks, bool).at[b].set(True)
    return P.expand_mask(P.entry_masks(part, one), state)


def is_unit_partition(part, state, h):
    """Block u holds exactly column u of W1, entry u of b1 and row u of W2 — in the
    params and in Adam's mu and nu — and every params entry lies in some block."""
    expected = {
        "W1": lambda u, x: np.arange(x.shape[1])[None, :] == u,
        "b1": lambda u, x: np.arange(x.shape[0]) == u,
        "W2": lambda u, x: np.arange(x.shape[0])[:, None] == u,
        "b2": lambda u, x: np.zeros(x.shape, bool),
    }
    adam = state.aux[0]
    for u in range(h):
        m = block_masks(part, state, u)
        for tree, got in ((state.params, m.params), (adam.mu, m.aux[0].mu), (adam.nu, m.aux[0].nu)):
            for name, want in expected.items():
                shape = tree[name].shape
                if not np.array_equal(np.broadcast_to(np.asarray(got[name]), shape),
                                      np.broadcast_to(want(u, tree[name]), shape)):
                    return False
    return all(bool(np.all(np.asarray(x) >= 0)) for x in jax.tree.leaves(part.blocks.params))


@settings(max_examples=10, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate])
@given(d=st.integers(1, 4), h=st.integers(1, 6), o=st.integers(1, 3), servers=st.integers(1, 4),
       rest=st.sampled_from(["element", "layer", "row"]))
def test_a_unit_is_exactly_its_entries_and_every_entry_is_assigned(d, h, o, servers, rest):
    state = mlp_state(d, h, o)
    part = P.by_unit(state, UNITS, rest=rest, num_servers=servers)
    assert is_unit_partition(part, state, h)
    extra = {"element": o, "layer": 1, "row": o}[rest]
    assert part.num_blocks == h + extra and part.server_of.shape == (h + extra,)
    assert int(part.server_of.min()) >= 0 and int(part.server_of.max()) < servers


def test_the_property_fails_for_a_partition_by_rows():
    # Planted: rows of W1 are inputs, not hidden units.
    state = mlp_state(3, 5, 2)
    assert not is_unit_partition(P.by_row(state), state, 5)
    assert is_unit_partition(P.by_unit(state, UNITS), state, 5)


def test_rest_never_and_bare_params():
    params = mlp_params(2, 3, 2)
    part = P.by_unit(params, UNITS, rest="never")
    assert part.num_blocks == 3 and int(np.asarray(part.blocks.params["b2"]).max()) == P.NEVER
    # Nested params: the mapping follows the nesting.
    nested = {"hidden": {"w": params["W1"], "b": params["b1"]}, "out": {"w": params["W2"], "b": params["b2"]}}
    part = P.by_unit(nested, {"hidden": {"w": 1, "b": 0}, "out": {"w": 0}})
    assert part.num_blocks == 3 + 2
    assert np.asarray(part.blocks.params["out"]["w"]).ravel().tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    "axes, kwargs, error, match",
    [
        ({}, {}, TypeError, "axes must be a non-empty mapping"),
        ([1, 0], {}, TypeError, "axes must be a non-empty mapping"),
        ({"W1": 1, "b_1": 0}, {}, ValueError, r"axes\['b_1'\] names no params leaf"),
        ({"W1": 0, "b1": 0}, {}, ValueError, "same number of units"),
        ({"W1": 2}, {}, ValueError, "out of range"),
        ({"W1": "1"}, {}, TypeError, "must be an int axis"),
        (UNITS, {"rest": "diagonal"}, ValueError, "rest"),
        (UNITS, {"num_servers": 0}, ValueError, "num_servers"),
    ],
)
def test_bad_arguments_name_themselves(axes, kwargs, error, match):
    with pytest.raises(error, match=match):
        P.by_unit(mlp_state(3, 4, 2), axes, **kwargs)


def test_check_partial_recovery_on_a_small_mlp_by_hidden_unit():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 3)).astype(np.float32)
    y = np.tanh(x @ rng.normal(size=(3, 2))).astype(np.float32)

    def loss(p, batch):
        hidden = jnp.tanh(batch[0] @ p["W1"] + p["b1"])
        return jnp.mean((hidden @ p["W2"] + p["b2"] - batch[1]) ** 2)

    alg = scarjax.from_optax(loss, optax.adam(0.05), mlp_params(3, 6, 2), (x, y), batch_size=8, name="mlp")
    res = sxt.check_partial_recovery(alg, 10, partition=lambda s: P.by_unit(s, UNITS, num_servers=3), settings=4)
    assert res.examples == 4 and res.max_ratio <= 1 + 1e-5
