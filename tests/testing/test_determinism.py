"""scarjax.testing.check_determinism: same key -> bit-identical runs (compiled twice), an
int seed is its key, trial i of run_trials equals run(keys[i]); each planted violation
is caught with a readable counterexample."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import strategies as st

import scarjax
from scarjax import core, hooks, perturb, schedules
from scarjax import testing as sxt
from scarjax.models import quadratic
from scarjax.testing import strategies as sst
from scarjax.testing._determinism import Difference, compare_runs

STEPS = 12


@pytest.fixture(scope="module")
def qp():
    return quadratic.fig53_problem()


# One hook object for every test: scarjax.run and run_trials compile once per hook object.
NOISY = hooks.chain(hooks.scheduled(perturb.gaussian(0.05), schedules.with_probability(0.3)),
                    hooks.scheduled(perturb.adversarial(0.1), 6))


def test_perturbation_sequences_drawn_per_trial_pass_and_compile_once(qp):
    """One sequence per trial, replayed by one compiled factory; the result says what was
    checked; a batch given as a factory with stacked hook_args is the same program."""
    res = sxt.check_determinism(qp, STEPS, hooks=sst.perturbation_sequences(STEPS - 1, max_events=3), settings=4)
    assert res.examples == 4 and res.trials == 4 and res.rtol == sxt.trial_rtol() and sxt.trial_rtol("cpu") == sxt.TRIAL_RTOL == 1e-5 and sxt.trial_rtol("gpu") == sxt.ACCELERATOR_TRIAL_RTOL
    assert 0 <= res.max_rel_diff <= 1e-5
    assert "bit-identical" in res.summary() and "4 case(s)" in res.summary()
    seqs = [sst.PerturbationSequence((sst.Perturbation(i + 2, 0.5, "adversarial"),)) for i in range(4)]
    res = sxt.assert_determinism(qp, STEPS, hooks=sst.sequence_hook, hook_args=sst.stack(seqs, 4), seed=5)
    assert res.examples == 1 and res.seed == 5


def test_strategies_of_hooks_and_of_factory_arguments(qp):
    """A strategy of hooks and of drawn chains (one per example), and of ``(factory, args)``
    pairs (the same args for every trial; the factory and shapes of the test above: no new
    program)."""
    res = sxt.check_determinism(qp, STEPS, hooks=st.just(NOISY), trials=2, settings=2)
    assert res.examples >= 1
    res = sxt.check_determinism(qp, STEPS, hooks=sst.hook_chains(STEPS - 1), trials=2, settings=1)
    assert res.examples == 1
    pairs = st.tuples(st.just(sst.sequence_hook), sst.perturbation_sequences(STEPS - 1).map(lambda q: q.as_arrays(4)))
    res = sxt.check_determinism(qp, STEPS, hooks=pairs, settings=3)
    assert res.examples == 3


def test_trace_time_counter_is_caught(qp):
    """A Python counter read while the update is traced: every compilation bakes in
    another constant (a cached program would hide it within one process)."""
    traced = [0]

    def update(view, state, data, key):
        traced[0] += 1
        return -0.1 * view + 1e-3 * traced[0], state

    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_determinism(qp.replace(update=update, name="counter"), STEPS)
    msg = str(e.value)
    assert msg.startswith("Determinism: the same key gave different runs")
    for part in ("algorithm  : counter", "leaf       : trace.loss", "step       : 1", "not bit-identical",
                 "trial      : 0", "seed       : 0", "sxt.assert_determinism(algorithm, 12, seed=0, trials=4"):
        assert part in msg, msg


def test_np_random_at_trace_time_is_caught(qp):
    rng = np.random.default_rng()

    def update(view, state, data, key):
        return -0.1 * view + jnp.asarray(rng.normal(size=view.shape), jnp.float32) * 1e-2, state

    with pytest.raises(sxt.CheckFailure, match="the same key gave different runs"):
        sxt.assert_determinism(qp.replace(update=update), STEPS)


def test_run_time_randomness_outside_the_key_is_caught_without_recompiling(qp):
    """A host callback drawing its own random numbers: the same compiled program, run
    twice with the same key, differs (recompile=False never compiles twice)."""
    rng = np.random.default_rng(0)

    def noise(shape):
        return jax.pure_callback(lambda: rng.normal(size=shape).astype(np.float32),
                                 jax.ShapeDtypeStruct(shape, jnp.float32))

    def update(view, state, data, key):
        return -0.1 * view + 1e-2 * noise(view.shape), state

    with pytest.raises(sxt.CheckFailure) as e:
        sxt.assert_determinism(qp.replace(update=update), STEPS, recompile=False)
    msg = str(e.value)
    assert "the same compiled program run twice: run-time randomness outside the key" in msg
    assert "recompile=False" in msg and "step       : 1" in msg, msg


def _wrong_vmap_rule(batched_factor):
    """``x -> x`` whose custom_vmap rule multiplies by ``batched_factor``: a batching rule
    inconsistent with the function (what run_trials' vmap uses, for a value that varies
    across trials, and run does not)."""

    @jax.custom_batching.custom_vmap
    def ident(x):
        return x

    @ident.def_vmap
    def rule(axis_size, in_batched, x):
        return x * batched_factor, in_batched[0]

    return ident


def test_wrong_batching_rule_floats_are_caught(qp):
    scale = _wrong_vmap_rule(1.001)
    base_update = qp.update

    def update(view, state, data, key):
        delta, aux = base_update(view, state, data, key)
        return scale(delta), aux

    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_determinism(qp.replace(update=update, name="bad-vmap"), STEPS, hooks=NOISY, trials=2,
                              recompile=False)  # (spares a compilation: the trials are what fails)
    msg = str(e.value)
    assert msg.startswith("run_trials: trial 0 differs from run(keys[0]): floats differ beyond the documented tolerance")
    assert f"> rtol {sxt.trial_rtol():.3g}" in msg and "(run_trials' documented tolerance)" in msg and "hooks      : gaussian, adversarial" in msg, msg


def test_hook_firing_differently_in_a_trial_is_caught(qp):
    """A discrete outcome: the hook fires at other steps in run_trials than in run."""
    odd = _wrong_vmap_rule(0)  # 1 unbatched, 0 batched

    def delta_fn(params, hstate, ctx, key):
        fire = (ctx.step == 4) * odd(1.0 + 0.0 * jax.random.uniform(key))  # varies across trials: batched
        return fire * jnp.ones_like(params)

    kick = hooks.perturbation(delta_fn, name="kick")
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.assert_determinism(qp, STEPS, hooks=kick, trials=2, recompile=False)
    msg = str(e.value)
    assert "run_trials: trial 0 differs from run(keys[0]): a discrete outcome differs" in msg
    assert "hook 'kick' did not fire at step 4 in trial 0 and fired in run(keys[0])" in msg, msg


def test_int_seed_not_its_key_is_caught(qp, monkeypatch):
    real = core.as_key
    monkeypatch.setattr(core, "as_key", lambda key, name="key": real(key + 1 if isinstance(key, int) else key))
    with pytest.raises(sxt.CheckFailure, match=r"run\(\.\.\., 0\) differs from run\(\.\.\., jax\.random\.key\(0\)\)"):
        sxt.assert_determinism(qp, STEPS, hooks=NOISY, recompile=False)


def test_divergence_is_a_counterexample(qp):
    blowup = qp.replace(update=lambda view, state, data, key: (1e30 * view + 1e30, state), name="blowup")
    with pytest.raises(sxt.CheckFailure, match=r"Determinism: run diverged \(NaN/inf\) at step 1"):
        sxt.assert_determinism(blowup, STEPS, trials=1)


def test_compare_runs_names_the_leaf_the_step_and_the_tolerance(qp):
    one = scarjax.run(qp, NOISY, STEPS, 3)
    assert compare_runs(one, one, exact=True) is None
    state, trace = one
    moved = (state, trace._replace(loss=trace.loss.at[7].multiply(1 + 1e-2)))
    d = compare_runs(moved, one)
    assert isinstance(d, Difference) and d.failed
    assert (d.leaf, d.kind, d.step) == ("trace.loss", "float", 7) and d.rel_diff > 1e-3 and d.tolerance == sxt.trial_rtol()
    assert compare_runs(moved, one, rtol=1e-1) is None
    fired = dict(trace.delta)
    fired["gaussian"] = fired["gaussian"].at[2].set(0.0 if fired["gaussian"][2] > 0 else 1.0)
    d = compare_runs((state, trace._replace(delta=fired)), one, labels=("x", "y"))
    assert (d.kind, d.step) == ("fires", 2) and "at step 2 in x" in d.detail
    counted = (state._replace(aux=jnp.int32(3)), trace)
    d = compare_runs(counted, (state._replace(aux=jnp.int32(4)), trace))
    assert (d.kind, d.leaf) == ("discrete", "state.aux")


def test_bad_arguments_name_the_argument(qp):
    with pytest.raises(ValueError, match="steps"):
        sxt.assert_determinism(qp, 0)
    with pytest.raises(ValueError, match="trials"):
        sxt.check_determinism(qp, STEPS, trials=0)
    with pytest.raises(ValueError, match="rtol"):
        sxt.assert_determinism(qp, STEPS, rtol=-1.0)
    with pytest.raises(TypeError, match="hook factory"):
        sxt.assert_determinism(qp, STEPS, hooks=NOISY, hook_args=np.zeros(4))
    with pytest.raises(ValueError, match="leading axis of length trials=4"):
        sxt.assert_determinism(qp, STEPS, hooks=lambda s: hooks.scheduled(perturb.gaussian(s), 3),
                               hook_args=np.zeros(3))
    with pytest.raises(TypeError, match="hooks"):
        sxt.assert_determinism(qp, STEPS, hooks="gaussian")
    with pytest.raises(TypeError, match="recompile"):
        sxt.check_determinism(qp, STEPS, recompile="no")
