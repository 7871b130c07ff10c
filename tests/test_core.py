"""The perturbed loop: semantics of Eq 5.2, determinism, vmapped trials == sequential runs."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import scarjax
from scarjax import core, hooks, perturb, schedules
from scarjax import testing as sxt
from scarjax.scar import checkpoint, faults, partition
from scarjax.models import mlr, quadratic


@pytest.fixture(scope="module")
def qp():
    return quadratic.fig53_problem()


@pytest.fixture(scope="module")
def small_mlr():
    return mlr.digits(batch_size=64)


def test_unperturbed_qp_matches_closed_form(qp):
    """Without hooks, y(k) − w* = (I − ηA)^k (w0 − w*)."""
    steps = 50
    _, trace = scarjax.run(qp, None, steps, jax.random.key(0))
    A = np.asarray(qp.data["A"], np.float64)
    M = np.eye(4) - float(qp.data["lr"]) * A
    e = np.asarray(qp.data["w0"] - qp.data["w_star"], np.float64)
    expected = [np.linalg.norm(np.linalg.matrix_power(M, k) @ e) for k in range(steps + 1)]
    np.testing.assert_allclose(np.asarray(trace.distance), expected, rtol=1e-4)
    assert trace.loss.shape == (steps + 1,)
    for point in ("read", "update", "write"):
        np.testing.assert_array_equal(trace.point_delta[point], 0.0)


def test_write_perturbation_follows_eq_5_2(qp):
    """A write-point δ at step T gives y(T+1) = f(y(T) + δ)."""
    T, delta = 7, jnp.array([0.3, -0.2, 0.1, 0.5])
    h = hooks.scheduled(hooks.perturbation(lambda p, s, ctx, k: delta), T)
    _, base = scarjax.run(qp, None, T, jax.random.key(0))
    _, pert = scarjax.run(qp, h, T + 1, jax.random.key(0))
    # Reconstruct y(T) from the baseline and apply f by hand.
    A, w_star, lr = (np.asarray(qp.data[k], np.float64) for k in ("A", "w_star", "lr"))
    M = np.eye(4) - lr * A
    yT = w_star + np.linalg.matrix_power(M, T) @ np.asarray(qp.data["w0"] - qp.data["w_star"], np.float64)
    y_next = w_star + M @ (yT + np.asarray(delta) - w_star)
    np.testing.assert_allclose(float(pert.distance[T + 1]), np.linalg.norm(y_next - w_star), rtol=1e-5)
    np.testing.assert_allclose(float(pert.point_delta["write"][T]), np.linalg.norm(delta), rtol=1e-6)
    assert float(pert.delta["perturbation"][T - 1]) == 0.0
    np.testing.assert_allclose(pert.perturbation_norms()[T], np.linalg.norm(delta), rtol=1e-6)


@pytest.mark.parametrize("model", ["qp", pytest.param("mlr", marks=pytest.mark.slow)])  # mlr: long, CI's `-m slow` step
def test_same_key_same_result_int_seed_and_trial_i_equals_run_i(model, qp, small_mlr):
    """The kit's determinism check (scarjax.testing.check_determinism) under hooks whose
    norms and the model's products are batched (noise at random steps, a reset, an
    adversarial kick, a SCAR failure with checkpoints): the same key gives bit-identical
    runs (for the QP also when the run is compiled again); an int seed equals its key; trial i of
    run_trials equals run(keys[i]) with identical discrete outcomes (the steps every hook
    fires, which blocks fail) and floats within run_trials' documented tolerance,
    max |trial − run| / max |run| <= 1e-5 per leaf (measured <= 2e-6; tens of ulp on
    near-zero entries). A different key gives a different run."""
    alg = qp if model == "qp" else small_mlr
    part = partition.by_row(jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data)))
    h = hooks.chain(hooks.scheduled(perturb.gaussian(0.05), schedules.with_probability(0.3)),
                    hooks.scheduled(perturb.reset(0.2), 5), hooks.scheduled(perturb.adversarial(0.1), 6),
                    faults.scar(part, checkpoint=checkpoint.Checkpoint("priority", 0.5, 4),
                                failure=faults.Failure(fraction=0.5, when=9)))
    # The QP's run is also compiled a second time (trace-time side effects); the MLR's
    # cached program runs twice (run-time randomness), sparing a second MLR compilation.
    res = sxt.check_determinism(alg, 12, hooks=h, trials=3, seed=11, settings=2, recompile=model == "qp")
    assert res.examples == 2 and res.max_rel_diff <= sxt.trial_rtol() and sxt.trial_rtol("cpu") == sxt.TRIAL_RTOL == 1e-5
    _, t3 = scarjax.run(alg, h, 12, jax.random.key(3))
    _, t4 = scarjax.run(alg, h, 12, jax.random.key(4))
    assert not np.array_equal(t3.loss, t4.loss)


def _fixed_point_alg():
    return scarjax.fixed_point(lambda w, d: 0.5 * w + 1.0, jnp.zeros(3), lambda w, d: jnp.sum((w - 2.0) ** 2),
                               optimum=2.0 * jnp.ones(3))


@pytest.mark.cpu_exact
@pytest.mark.parametrize("model", ["qp", "fixed_point"])
def test_trial_i_equals_run_i_bit_for_bit_without_batched_reductions(model, qp):
    """The documented exact case of run_trials' guarantee: no batched reduction enters the
    iteration (the unperturbed QP; an element-wise fixed-point map under element-wise hooks)."""
    alg, h = (qp, None) if model == "qp" else (
        _fixed_point_alg(), hooks.chain(hooks.scheduled(perturb.gaussian(0.05), schedules.every(3)), hooks.scheduled(perturb.reset(0.5), 4)))
    keys = jax.random.split(jax.random.key(11), 3)
    trials = scarjax.run_trials(alg, h, 12, keys)
    for i in range(3):
        assert sxt.compare_runs(scarjax.split_trials(trials, i), scarjax.run(alg, h, 12, keys[i]), exact=True) is None


def test_run_hook_args_compiles_once_and_matches_trial_i(qp):
    """run(..., hook_args=a) traces the factory once per (factory, steps): a new value
    reuses the program; and it equals trial i of run_trials with hook_args[i]."""
    traced = []

    def kick(size):
        traced.append(size)
        return hooks.chain(hooks.scheduled(perturb.gaussian(size), 3), hooks.scheduled(perturb.adversarial(2 * size), 5))

    _, a = scarjax.run(qp, kick, 8, 0, hook_args=0.1)
    cache = core._run_jit._cache_size()
    _, b = scarjax.run(qp, kick, 8, 0, hook_args=0.7)
    assert len(traced) == 1 and core._run_jit._cache_size() == cache
    # Same key: the same noise, scaled by the traced size.
    np.testing.assert_allclose(b.delta["gaussian"][3], 7 * a.delta["gaussian"][3], rtol=1e-5)
    np.testing.assert_allclose(b.delta["adversarial"][5], 1.4, rtol=1e-5)
    sizes = jnp.array([0.1, 0.3, 0.7])
    keys = jax.random.split(jax.random.key(2), 3)
    trials = scarjax.run_trials(qp, kick, 8, keys, hook_args=sizes)
    for i in range(3):
        one = scarjax.run(qp, kick, 8, keys[i], hook_args=sizes[i])
        assert sxt.compare_runs(scarjax.split_trials(trials, i), one) is None


def test_recovery_and_strategy_names_in_hook_args(qp):
    """hook_args may name recoveries ('partial'/'full') and checkpoint strategies: they
    are mapped to indices into faults.RECOVERIES / checkpoint.STRATEGIES before tracing,
    equal to the int path; partial recovery's δ never exceeds full's (Thm 5.4.1)."""
    part = partition.by_element(scarjax.State(jnp.zeros(4), ()))

    def factory(a):
        return faults.scar(part, checkpoint=checkpoint.Checkpoint(a["strategy"], 0.5, 4),
                           failure=faults.Failure(fraction=0.5, when=6), recovery=a["recovery"])

    keys = jnp.stack([jax.random.key(5)] * 4)
    names = {"recovery": ["partial", "full", "partial", "full"],
             "strategy": np.array(["priority", "priority", "round_robin", "round_robin"])}
    _, by_name = scarjax.run_trials(qp, factory, 9, keys, hook_args=names)
    ints = {"recovery": jnp.array([0, 1, 0, 1]), "strategy": jnp.array([1, 1, 2, 2])}
    _, by_index = scarjax.run_trials(qp, factory, 9, keys, hook_args=ints)
    chex.assert_trees_all_equal(by_name, by_index)
    d = np.asarray(by_name.delta["scar"][:, 6])
    assert 0 < d[0] < d[1] and 0 < d[2] < d[3]
    # Trial 1 is the run with the concrete names, and run() accepts the names too.
    concrete = faults.scar(part, checkpoint=checkpoint.Checkpoint("priority", 0.5, 4),
                           failure=faults.Failure(fraction=0.5, when=6), recovery="full")
    ref = scarjax.run(qp, concrete, 9, keys[1])
    assert sxt.compare_runs(scarjax.split_trials(by_name, 1), ref[1]) is None
    one = scarjax.run(qp, factory, 9, keys[1], hook_args={"recovery": "full", "strategy": "priority"})
    assert sxt.compare_runs(one, ref) is None
    # A bare list of recovery names works; names that fit no list, or both, are refused.
    _, bare = scarjax.run_trials(qp, lambda r: faults.scar(part, failure=faults.Failure(fraction=0.5, when=6), recovery=r),
                                 9, keys[:2], hook_args=["partial", "full"])
    assert float(bare.delta["scar"][0, 6]) < float(bare.delta["scar"][1, 6])
    with pytest.raises(ValueError, match="hook_args.*'recovery' or 'strategy'"):
        scarjax.run_trials(qp, lambda r: faults.scar(part, recovery=r), 9, keys[:2], hook_args=["full", "full"])
    with pytest.raises(ValueError, match=r"hook_args\['recovery'\] values must be among"):
        scarjax.run_trials(qp, factory, 9, keys[:2], hook_args={"recovery": ["partial", "half"], "strategy": [1, 1]})


def test_hook_args_vary_across_trials(qp):
    sizes = jnp.array([0.0, 0.5, 1.0])
    _, tr = scarjax.run_trials(qp, lambda s: hooks.scheduled(perturb.adversarial(s), 2), 5, jax.random.split(jax.random.key(0), 3), hook_args=sizes)
    np.testing.assert_allclose(tr.point_delta["write"][:, 2], sizes, rtol=1e-5)
    _, one = scarjax.run(qp, hooks.scheduled(perturb.adversarial(0.5), 2), 5, jax.random.split(jax.random.key(0), 3)[1])
    np.testing.assert_allclose(tr.distance[1], one.distance, rtol=1e-6)


def test_from_optax_adam_keeps_optimizer_state():
    x = jnp.linspace(-1, 1, 64)[:, None]
    data = {"x": x, "y": 2 * x[:, 0] + 1}
    loss = lambda w, b: jnp.mean((b["x"][:, 0] * w["a"] + w["c"] - b["y"]) ** 2)  # noqa: E731
    alg = scarjax.from_optax(loss, optax.adam(0.1), {"a": jnp.zeros(()), "c": jnp.zeros(())}, data, batch_size=16)
    state, trace = scarjax.run(alg, None, 300, jax.random.key(0))
    assert float(trace.loss[-1]) < 1e-3
    assert int(state.aux[0].count) == 300


def test_fixed_point_iteration():
    alg = scarjax.fixed_point(lambda w, d: 0.5 * w + 1.0, jnp.zeros(3), lambda w, d: jnp.sum((w - 2.0) ** 2), optimum=2.0 * jnp.ones(3))
    _, trace = scarjax.run(alg, None, 30, 0)
    np.testing.assert_allclose(trace.distance, np.sqrt(12) * 0.5 ** np.arange(31), rtol=1e-5, atol=1e-6)


def test_read_effect_measures_example_5_2_2(qp):
    """A read perturbation δ changes Δ by −ηAδ for the QP: recorded as read_effect."""
    d = jnp.array([0.1, 0.0, 0.0, 0.0])
    h = hooks.scheduled(hooks.perturbation(lambda p, s, ctx, k: d, point="read"), 0)
    _, tr = scarjax.run(qp, h, 3, 0, measure_read_effect=True)
    expected = np.linalg.norm(float(qp.data["lr"]) * np.asarray(qp.data["A"]) @ np.asarray(d))
    np.testing.assert_allclose(float(tr.read_effect[0]), expected, rtol=1e-5)
    assert float(tr.read_effect[1]) < 1e-8
    np.testing.assert_allclose(tr.perturbation_norms()[1], expected, rtol=1e-5)


def test_update_point_hook(qp):
    h = hooks.scheduled(hooks.perturbation(lambda p, s, ctx, k: jnp.ones(4), point="update"), 1)
    _, tr = scarjax.run(qp, h, 4, 0)
    assert float(tr.point_delta["update"][1]) == pytest.approx(2.0)
    assert float(tr.perturbation_norms()[2]) == pytest.approx(2.0)


def test_duplicate_hook_names_are_made_unique(qp):
    _, tr = scarjax.run(qp, [hooks.scheduled(perturb.gaussian(0.1), 1), hooks.scheduled(perturb.gaussian(0.2), 2)], 4, 0)
    assert set(tr.delta) == {"gaussian", "gaussian_1"}


@pytest.mark.parametrize(
    "kwargs, err",
    [
        (dict(steps=0), ValueError),
        (dict(steps=2.5), ValueError),
        (dict(key="abc"), TypeError),
        (dict(hooks=42), TypeError),
        (dict(algorithm=object()), TypeError),
    ],
)
def test_run_bad_inputs(qp, kwargs, err):
    args = dict(algorithm=qp, hooks=None, steps=5, key=0) | kwargs
    with pytest.raises(err):
        scarjax.run(args["algorithm"], args["hooks"], args["steps"], args["key"])


def test_events_after_the_last_step_are_refused(qp):
    """A hook scheduled at or after ``steps`` would silently never act: refused, naming
    the argument and the step against ``steps`` (concrete schedules; traced ones pass)."""
    part = partition.by_element(scarjax.State(jnp.zeros(4), ()))
    late = [
        (hooks.scheduled(perturb.gaussian(0.1), 10), "when=10"),
        (hooks.scheduled(perturb.reset(0.5), schedules.at(2, 12)), "when=12"),
        (hooks.scheduled(perturb.gaussian(0.1), schedules.every(3, start=10)), "when=10"),
        (faults.scar(part, failure=faults.Failure(fraction=0.5, when=10)), "failure.when=10"),
        (faults.scar(part, failure=faults.Failure(fraction=0.5, when=schedules.geometric(0.1, start=11))),
         "failure.when=11"),
    ]
    for h, text in late:
        with pytest.raises(ValueError, match=f"{text}.*steps=10"):
            scarjax.run(qp, h, 10, 0)
        with pytest.raises(ValueError, match=text):
            scarjax.run_trials(qp, h, 10, 2)
    # Inside a factory a concrete step is still checked at trace time.
    with pytest.raises(ValueError, match="when=10"):
        scarjax.run_trials(qp, lambda s: hooks.scheduled(perturb.gaussian(s), 10), 10, 2, hook_args=jnp.ones(2))
    _, tr = scarjax.run(qp, hooks.scheduled(perturb.gaussian(0.1), 9), 10, 0)  # the last iteration is fine
    assert float(tr.point_delta["write"][9]) > 0


def test_optimum_init_state_and_keys_are_checked(qp):
    with pytest.raises(ValueError, match="optimum must have the leaf shapes"):
        scarjax.run(qp.replace(optimum=jnp.float32(1.0)), None, 3, 0)  # was broadcast silently
    with pytest.raises(ValueError, match="optimum must have the tree structure"):
        scarjax.run(qp.replace(optimum={"w": jnp.zeros(4)}), None, 3, 0)
    with pytest.raises(ValueError, match="optimum must be finite"):
        scarjax.run_trials(qp.replace(optimum=jnp.full(4, jnp.nan)), None, 3, 2)
    with pytest.raises(ValueError, match="optimum"):
        scarjax.from_optax(lambda w, b: jnp.sum(w), optax.sgd(0.1), jnp.zeros(3), {"x": jnp.zeros((4, 1))},
                           optimum=jnp.zeros(2))
    with pytest.raises(ValueError, match="init_state.params must be finite"):
        scarjax.run(qp, None, 3, 0, init_state=scarjax.State(jnp.array([1.0, jnp.nan, 0.0, 0.0]), ()))
    with pytest.raises(ValueError, match="init_state.params must have the leaf shapes"):
        scarjax.run(qp, None, 3, 0, init_state=scarjax.State(jnp.zeros(5), ()))
    nan_init = scarjax.fixed_point(lambda w, d: 0.5 * w, lambda key: jnp.log(-jnp.ones(3)), lambda w, d: jnp.sum(w))
    with pytest.raises(ValueError, match="initial state params must be finite"):
        scarjax.run(nan_init, None, 3, 0)
    with pytest.raises(ValueError, match="init_params must be finite"):
        scarjax.fixed_point(lambda w, d: w, jnp.full(3, jnp.inf), lambda w, d: jnp.sum(w))
    with pytest.raises(ValueError, match="keys is empty"):  # was a 0-trial result averaging to NaN
        scarjax.run_trials(qp, None, 3, jax.random.split(jax.random.key(0), 0))
    with pytest.raises(ValueError, match="keys"):
        scarjax.run_trials(qp, None, 3, 0)
    with pytest.raises(ValueError, match="key must be a single PRNG key"):
        scarjax.run(qp, None, 3, jax.random.split(jax.random.key(0), 2))
    with pytest.raises(ValueError, match="i must be"):
        scarjax.split_trials({"loss": jnp.zeros((3, 4))}, 3)  # JAX would clamp to trial 2


def test_run_trials_bad_inputs(qp):
    keys = jax.random.split(jax.random.key(0), 3)
    with pytest.raises(ValueError, match="hook_args"):
        scarjax.run_trials(qp, lambda s: perturb.gaussian(s), 3, keys, hook_args=jnp.ones(2))
    with pytest.raises(TypeError):
        scarjax.run_trials(qp, perturb.gaussian(0.1), 3, keys, hook_args=jnp.ones(3))
    with pytest.raises(ValueError):
        scarjax.run_trials(qp, None, 3, jax.random.key(0))
