"""The kit's Thm 5.4.1 / 5.4.2 checks (scarjax.testing._recovery): they pass on the library's
partial recovery (MLR with Adam, whose moments are co-located with their rows, and a
quadratic with SCAR's running checkpoints), and each catches a planted violation with a
readable counterexample that replays."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import scarjax
from scarjax import State, schedules
from scarjax import testing as sxt
from scarjax.models import mlr, quadratic
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults
from scarjax.scar import partition as P
from scarjax.testing import strategies as sst


@pytest.fixture(scope="module")
def adam_mlr():
    """MLR (7 features + bias, 3 classes: 8 row blocks) trained by Adam: its moments mu/nu
    are params-shaped, so they are lost and recovered with their rows."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 7)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(7, 3)), axis=1)
    return mlr.mlr(x, y, num_classes=3, optimizer=optax.adam(0.05), batch_size=16)


STEPS = 12


def _partial(state, saved, part, lost):
    return faults.recover("partial", state, saved, part, lost)


def test_library_recovery_holds_on_mlr(adam_mlr):
    r = sxt.check_partial_recovery(adam_mlr, STEPS)
    assert r.examples == 10 and r.trials == 4
    assert 0 < r.max_ratio <= 1 + 1e-5 and 0 < r.mean_fraction <= 1
    assert r.summary().startswith("Thm 5.4.1 held on 10 examples × 4 trials")
    e = sxt.check_expected_perturbation(adam_mlr, STEPS, settings=5)
    assert e.examples == 5 and e.max_abs_z <= e.threshold
    assert "Thm 5.4.2 held" in e.summary() and "false-alarm rate 1e-06 per example" in e.summary()


def test_library_recovery_holds_on_a_quadratic_with_running_checkpoints():
    qp = quadratic.random_problem(3, 6, 4.0)
    kw = dict(partition=sst.PartitionSpec("element", num_servers=3, seed=1), checkpoints=sst.checkpoints(8))
    r = sxt.check_partial_recovery(qp, 10, settings=6, **kw)
    assert r.examples == 6 and r.max_ratio <= 1 + 1e-5
    e = sxt.check_expected_perturbation(qp, 10, settings=4, samples=1000, **kw)
    assert e.examples == 4 and e.max_abs_z <= e.threshold


def _corrupt_first_unlost(state, saved, part, lost):
    """Partial recovery that also nudges the first block that was not lost."""
    rec = _partial(state, saved, part, lost)
    first = jnp.zeros_like(lost).at[jnp.argmin(lost)].set(True) & ~lost
    masks = P.entry_masks(part, first)
    return jax.tree.map(lambda m, x: jnp.where(m, x + 1e-3, x), masks, rec)


def test_corrupting_an_unlost_block_is_caught_and_replays(adam_mlr):
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_partial_recovery(adam_mlr, STEPS, recover=_corrupt_first_unlost)
    e = info.value
    msg = str(e)
    assert e.title == "Thm 5.4.1 (Sec 5.4.1): the partial recovery changed a block that was not lost"
    for key in ("algorithm", "partition", "failure", "lost", "checkpoint", "‖δ'‖ (partial recovery)",
                "‖δ‖ (full recovery)", "offending block", "trial", "seed"):
        assert key in e.details, key
    assert "not lost" in e.details["offending block"] and "state.params['w']" in e.details["offending block"]
    assert "1 not lost but changed, 0 lost but not reloaded" in e.details["wrong blocks"]
    assert "replay with:" in msg and "sxt.recovery_case(algorithm, key, t=" in msg
    # The replay lines reproduce the counterexample (the same title) with the public API.
    ns = dict(jax=jax, sxt=sxt, sst=sst, faults=faults, schedules=schedules, ck=ck,
              algorithm=adam_mlr, recover=_corrupt_first_unlost)
    with pytest.raises(sxt.CheckFailure) as again:
        exec(e.replay, ns)
    assert again.value.title == e.title


def _forget_optimizer_state(state, saved, part, lost):
    """Reloads the lost rows of the parameters but not their Adam moments."""
    rec = _partial(state, saved, part, lost)
    return State(rec.params, state.aux)


def test_forgetting_the_colocated_optimizer_state_is_caught(adam_mlr):
    with pytest.raises(sxt.CheckFailure, match="did not reload a lost block") as info:
        sxt.check_partial_recovery(adam_mlr, STEPS, recover=_forget_optimizer_state, settings=3)
    off = info.value.details["offending block"]
    assert ", lost)" in off and "state.aux" in off  # an Adam moment of a lost row
    # Exempting aux (a recovery that rebuilds it) accepts the same recovery.
    sxt.check_partial_recovery(adam_mlr, STEPS, recover=_forget_optimizer_state, include_aux=False,
                               settings=3)


def _full_when_many_lost(state, saved, part, lost):
    """A recovery that falls back to a full reload when more than a third of the blocks
    are lost: wrong exactly from j = 3 of the 8 row blocks on."""
    full = faults.recover("full", state, saved, part, lost)
    many = 3 * jnp.sum(lost) > part.num_blocks
    return jax.tree.map(lambda a, b: jnp.where(many, a, b), full, _partial(state, saved, part, lost))


def test_shrinking_gives_the_smallest_failing_fraction(adam_mlr):
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_partial_recovery(adam_mlr, STEPS, recover=_full_when_many_lost, kinds="fraction",
                                   settings=20)
    d = info.value.details
    # 3 of 8 blocks is the smallest failing fraction; the earliest failure step, w⁽⁰⁾.
    assert d["failure"] == "loses a uniformly random 37.5% of the blocks (fraction 0.375), when at(1) (t = 1)"
    assert d["lost"].startswith("3 of 8 blocks")
    assert d["checkpoint"] == "w⁽⁰⁾ (no checkpoint saved before the failure)"


def _midpoint(state, saved, part, lost):
    """Restores the lost blocks from the wrong source: halfway between the checkpoint
    and the lost values (E‖δ'‖² = p‖δ‖²/4)."""
    mid = jax.tree.map(lambda a, b: 0.5 * (a + b.astype(a.dtype)), state, saved)
    return P.restore(state, mid, part, lost)


def test_biased_recovery_fails_thm_5_4_2(adam_mlr):
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_expected_perturbation(adam_mlr, STEPS, recover=_midpoint, settings=3)
    e = info.value
    assert e.title == "Thm 5.4.2: the mean ‖δ'‖² of partial recovery is not p‖δ‖²"
    d = e.details
    assert d[f"mean ‖δ'‖² over 2000 failures"] < 0.5 * d["p‖δ‖² (Thm 5.4.2)"]
    assert "standard errors" in d["difference"] and "false-alarm rate 2.5e-07 per trial" in d["difference"]
    assert "sxt.assert_expected_perturbation(state, saved, part, faults.Failure(" in e.replay


def _first_blocks(failure, part, key):
    """A failure model that is not uniform: it always loses the first blocks."""
    B = part.num_blocks
    if failure.fraction is not None:
        return jnp.arange(B) < jnp.round(failure.fraction * B)
    return part.server_of < failure.servers


def test_non_uniform_failures_pass_thm_5_4_1_but_fail_thm_5_4_2(adam_mlr):
    def two_servers(state):  # the user's own partition function
        return P.by_row(state, num_servers=2, key=5)

    sxt.check_partial_recovery(adam_mlr, STEPS, lost_blocks=_first_blocks, partition=two_servers, settings=3)
    with pytest.raises(sxt.CheckFailure, match="Thm 5.4.2") as info:
        sxt.check_expected_perturbation(adam_mlr, STEPS, lost_blocks=_first_blocks, partition=two_servers,
                                        settings=5)
    assert info.value.details["partition"] == "two_servers(state): 8 blocks on 2 servers"
    assert "lost_blocks=lost_blocks" in info.value.replay and "partition=partition" in info.value.replay


def test_assert_partial_recovery_on_given_states():
    params = {"w": jnp.arange(12.0).reshape(4, 3), "b": jnp.ones(2)}
    state = State(params, optax.adam(0.1).init(params))
    saved = jax.tree.map(lambda x: x + 10, state)
    part = P.by_row(state, num_servers=2, key=0)  # b: blocks 0-1, w: blocks 2-5
    lost = np.array([False, True, False, False, True, False])
    case = sxt.assert_partial_recovery(state, saved, part, lost)
    np.testing.assert_allclose(case.delta_partial, 10 * np.sqrt(1 + 3), rtol=1e-6)
    np.testing.assert_allclose(case.delta_full, 10 * np.sqrt(14), rtol=1e-6)
    np.testing.assert_array_equal(case.recovered.aux[0].mu["w"][:, 0], [0, 0, 10, 0])
    with pytest.raises(sxt.CheckFailure, match="block 3 \\(server [01], not lost\\)"):
        sxt.assert_partial_recovery(state, saved, part, lost, recover=lambda s, z, p, l: jax.tree.map(
            lambda a: a.at[1].add(1.0) if a.shape == (4, 3) else a, _partial(s, z, p, l)))
    with pytest.raises(sxt.CheckFailure, match="perturbs more than full recovery"):
        sxt.assert_partial_recovery(state, saved, part, lost, recover=lambda s, z, p, l: jax.tree.map(
            lambda a, b: 3 * b - 2 * a, s, z))
    with pytest.raises(ValueError, match="lost must be bool\\[6\\]"):
        sxt.assert_partial_recovery(state, saved, part, lost[:3])
    with pytest.raises(ValueError, match="recover\\(state, saved, partition, lost\\)"):
        sxt.assert_partial_recovery(state, saved, part, lost, recover=lambda s, z, p, l: s.params)


def test_a_diverged_state_is_a_counterexample():
    """A non-finite state at the failure is reported (never dropped), as is a norm that
    overflows float32."""
    part = P.by_element(State(jnp.ones(4), ()))
    lost = np.array([True, False, False, False])
    nan = State(jnp.array([1.0, jnp.nan, 2.0, 3.0]), ())
    with pytest.raises(sxt.CheckFailure, match="diverged"):
        sxt.assert_partial_recovery(nan, State(jnp.zeros(4), ()), part, lost)
    with pytest.raises(sxt.CheckFailure, match="overflow"):
        sxt.assert_partial_recovery(State(jnp.full(4, 1e20), ()), State(jnp.zeros(4), ()), part, lost)


def test_bad_arguments_are_named(adam_mlr):
    with pytest.raises(ValueError, match="steps"):
        sxt.check_partial_recovery(adam_mlr, 1)
    with pytest.raises(TypeError, match="algorithm"):
        sxt.check_partial_recovery("mlr", 10)
    with pytest.raises(TypeError, match="partition"):
        sxt.check_partial_recovery(adam_mlr, 10, partition="row")
    with pytest.raises(ValueError, match="partition"):
        sxt.check_partial_recovery(adam_mlr, 10, partition=P.by_row(State(jnp.ones((3, 2)), ())))
    with pytest.raises(TypeError, match="recover"):
        sxt.check_partial_recovery(adam_mlr, 10, recover=3)
    with pytest.raises(ValueError, match="kinds"):
        sxt.check_partial_recovery(adam_mlr, 10, kinds=("rows",))
    with pytest.raises(TypeError, match="checkpoints"):
        sxt.check_partial_recovery(adam_mlr, 10, checkpoints=ck.Checkpoint("full", 1.0, 4))
    with pytest.raises(ValueError, match="false_alarm"):
        sxt.check_expected_perturbation(adam_mlr, 10, false_alarm=0.0)
    with pytest.raises(ValueError, match="samples"):
        sxt.check_expected_perturbation(adam_mlr, 10, samples=1)
    with pytest.raises(ValueError, match="checkpoint"):
        sxt.recovery_case(adam_mlr, 0, t=3, checkpoint=3)


def test_recovery_case_captures_the_state_at_t_and_the_checkpoint():
    """y⁽ᵗ⁾ is the state after t iterations; a consistent checkpoint at s is y⁽ˢ⁾; SCAR's
    running checkpoint holds the last save before t (a failure comes before that step's
    checkpoint)."""
    qp = quadratic.random_problem(1, 4, 3.0)
    y = {k: scarjax.run(qp, None, k, 7)[0].params for k in (2, 4, 5)}
    case = sxt.recovery_case(qp, 7, t=5, checkpoint=2)
    np.testing.assert_allclose(case.state.params, y[5], rtol=1e-6)
    np.testing.assert_allclose(case.saved.params, y[2], rtol=1e-6)
    assert case.partition.num_blocks == 4 and case.partition.num_servers == 4  # the default: rows
    run = sxt.recovery_case(qp, 7, t=5, checkpoint=ck.Checkpoint("full", 1.0, period=2),
                            partition=sst.PartitionSpec("element", num_servers=2))
    np.testing.assert_allclose(run.saved.params, y[4], rtol=1e-6)  # saved at 2 and 4, not at 5
    w0 = sxt.recovery_case(qp, 7, t=3, checkpoint=0).saved.params
    np.testing.assert_array_equal(w0, qp.data["w0"])
