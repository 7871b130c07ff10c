"""The kit's SCAR strategies (scarjax.testing._st_scar): drawn failures, partitions, lost
blocks and checkpoints are valid library objects, describe themselves, replay from their
repr, and shrink to the minimal counterexample."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from scarjax import State, schedules
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults
from scarjax.scar import partition as P
from scarjax.testing import strategies as sst

def _draw(strategy):
    """One example (errors in drawing it propagate)."""
    return find(strategy, lambda _: True)


_NS = {"faults": faults, "schedules": schedules, "ck": ck, "sst": sst}
_PARAMS = {"w": jnp.zeros((6, 3)), "b": jnp.zeros(3)}
_STATE = State(_PARAMS, optax.adam(0.1).init(_PARAMS))


@settings(max_examples=30)
@given(sst.failures(20, min_step=2, servers=4, when=sst.FAILURE_SCHEDULES))
def test_failures_are_failures_that_replay(f):
    assert isinstance(f, faults.Failure)
    assert (f.fraction is None) != (f.servers is None)
    assert all(2 <= k <= 20 for k in f.when.events)
    if f.fraction is not None:
        assert 0 < f.fraction <= 1 and "of the blocks" in f.describe()
    else:
        assert 1 <= f.servers <= 4 and "failed server" in f.describe()
    again = eval(repr(f), _NS)  # the repr is code
    assert (again.fraction, again.servers, again.when.name) == (f.fraction, f.servers, f.when.name)
    faults.scar(P.by_row(_STATE, num_servers=4), failure=f)  # accepted by the library


def test_failures_shrink_to_the_smallest_fraction_one_server_earliest_step():
    strat = sst.failures(30, min_step=3, servers=5)
    assert repr(find(strat, lambda f: True)) == "faults.Failure(fraction=0.05, when=schedules.at(3))"
    one_server = find(strat, lambda f: f.servers is not None)
    assert repr(one_server) == "faults.Failure(servers=1, when=schedules.at(3))"
    smallest = find(strat, lambda f: f.fraction is not None and f.fraction >= 0.32 and f.when.events[0] >= 11)
    assert repr(smallest) == "faults.Failure(fraction=0.35, when=schedules.at(11))"
    exact = sst.failures(10, fractions=st.integers(1, 8).map(lambda j: j / 8))
    assert find(exact, lambda f: f.fraction > 0.3).fraction == 0.375


def test_failures_bad_arguments():
    with pytest.raises(ValueError, match="max_step"):
        _draw(sst.failures(2, min_step=5))
    with pytest.raises(ValueError, match="servers="):
        _draw(sst.failures(5, kinds="servers"))
    with pytest.raises(ValueError, match="when"):
        _draw(sst.failures(5, when=("sometimes",)))


@settings(max_examples=25)
@given(sst.partitions(_STATE, layouts=sst.PARTITION_LAYOUTS))
def test_partitions_build_on_the_state_with_colocated_optimizer_state(spec):
    assert spec.layout != "column"  # b is 1-D: no columns
    part = spec(_STATE)
    assert part.num_servers == spec.num_servers and 1 <= spec.num_servers <= 8
    adam = part.blocks.aux[0]
    for moment in (adam.mu, adam.nu):  # Adam's moments follow their parameters
        for a, b in zip(jax.tree.leaves(moment), jax.tree.leaves(part.blocks.params)):
            np.testing.assert_array_equal(a, b)
    assert int(adam.count) == P.NEVER
    assert f"{part.num_blocks} blocks" in spec.describe(_STATE)
    assert eval(repr(spec), _NS) == spec


def test_partitions_shrink_and_layouts():
    spec = find(sst.partitions(_STATE), lambda s: True)
    assert spec == sst.PartitionSpec("row", num_servers=1, seed=0)
    assert spec(_STATE).num_blocks == 3 + 6
    cols = find(sst.partitions(State({"m": jnp.zeros((2, 5))}), layouts=("column",)), lambda s: True)
    assert cols(State({"m": jnp.zeros((2, 5))})).num_blocks == 5
    shard = find(sst.partitions(_STATE, layouts="shard"), lambda s: s.shards == 3)
    assert shard(_STATE).num_blocks == 3 + 3  # b's 3 rows, w's 6 rows in 3 shards
    with pytest.raises(ValueError, match="layouts"):
        _draw(sst.partitions(layouts=("diagonal",)))
    with pytest.raises(ValueError, match="column"):
        _draw(sst.partitions(_STATE, layouts="column"))


_PART = P.by_row(_STATE, num_servers=4, key=0)


@settings(max_examples=25)
@given(sst.lost_blocks(_PART))
def test_lost_blocks(lost):
    assert lost.mask.shape == (_PART.num_blocks,) and lost.mask.dtype == bool
    assert lost.mask.sum() >= 1
    if lost.servers is None:
        assert "uniformly random" in lost.describe()
    else:
        np.testing.assert_array_equal(lost.mask, np.isin(np.asarray(_PART.server_of), lost.servers))
        assert f"of {_PART.num_servers} failed" in lost.describe()
    assert lost.fraction == lost.mask.mean()
    faults.recover("partial", _STATE, _STATE, _PART, lost.mask)  # usable as is


def test_lost_blocks_shrink_to_one_block_or_one_server():
    one = find(sst.lost_blocks(_PART), lambda l: True)
    assert one.servers is None and one.blocks == (int(np.flatnonzero(one.mask)[0]),) and len(one.blocks) == 1
    server = find(sst.lost_blocks(_PART, kinds="servers"), lambda l: True)
    assert len(server.servers) == 1
    big = find(sst.lost_blocks(_PART, kinds="fraction"), lambda l: l.fraction > 0.5)
    assert len(big.blocks) == 5  # the fewest blocks above half of 9
    with pytest.raises(TypeError, match="partition"):
        _draw(sst.lost_blocks(_STATE))


def _due(spec, n=30):
    """The steps < n at which the library takes the checkpoint (checkpoint.due)."""
    key = jax.random.key(0)
    state = spec.when.init(key) if spec.when is not None else ()
    fire = jax.vmap(lambda k: ck.due(spec, k, jax.random.fold_in(key, 1), state))(jnp.arange(n))
    return tuple(int(k) for k in np.flatnonzero(np.asarray(fire)))


@settings(max_examples=15)
@given(sst.checkpoints(12))
def test_checkpoints_are_checkpoints_that_replay(spec):
    assert isinstance(spec, ck.Checkpoint)
    assert spec.strategy in ck.STRATEGIES and (spec.fraction == 1.0 or spec.strategy != "full")
    saves = spec.save_steps(30)
    assert saves == _due(spec) and all(k >= 1 for k in saves)
    again = eval(repr(spec), _NS)  # the repr is code
    assert (again.strategy, again.fraction, again.period, _due(again)) == (
        spec.strategy, spec.fraction, spec.period, saves)
    ck.saver(_PART, spec)  # accepted by the library


def test_checkpoints_shrink_and_describe():
    simplest = find(sst.checkpoints(12), lambda c: True)
    assert repr(simplest) == "ck.Checkpoint('full', 1.0, period=1)"
    assert simplest.describe() == "full checkpoint every iteration (period C = 1)"
    prio = find(sst.checkpoints(12, strategies=("priority",)),
                lambda c: c.period is not None and c.period >= 8)
    assert repr(prio) == "ck.Checkpoint('priority', 0.125, period=8)"
    assert prio.save_steps(10) == (1, 2, 3, 4, 5, 6, 7, 8, 9)  # r·C = 1
    at = find(sst.checkpoints(12, forms="at"), lambda c: True)
    assert at.describe() == "full checkpoint when at(1)" and at.save_steps(5) == (1,)
    with pytest.raises(ValueError, match="strategies"):
        _draw(sst.checkpoints(strategies=("best",)))
