"""The systems strategies (scarjax.testing._st_systems): precision formats, delay patterns,
worker counts and revocation schedules — what they build, that the traced hooks replay
the drawn values bit for bit, and that shrinking gives the smallest perturbation."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import find
from hypothesis import strategies as st

import scarjax
from scarjax import testing as sxt
from scarjax.models import quadratic
from scarjax.perturb import precision as P
from scarjax.testing import strategies as sst


@pytest.fixture(scope="module")
def qp():
    return quadratic.fig53_problem()


FORMATS = [
    sst.PrecisionFormat.mantissa(5),
    sst.PrecisionFormat.mantissa(9, stochastic=True),
    sst.PrecisionFormat.named("float16"),
    sst.PrecisionFormat.named("bfloat16", stochastic=True),
    sst.PrecisionFormat.named("float8_e4m3fn"),
    sst.PrecisionFormat.named("float8_e5m2", stochastic=True),
    sst.PrecisionFormat.fixed(8),
    sst.PrecisionFormat.fixed(6, stochastic=True),
    sst.PrecisionFormat.qsgd(16),
    sst.PrecisionFormat.custom(P.mantissa(3), 3, name="three"),
]
CUSTOMS = (FORMATS[-1].quantizer,)


def test_traced_precision_hook_quantises_as_each_format():
    # The batched hook's quantiser (one program for every format) equals each format's own
    # quantiser: same rounding, same random draws (saturation and subnormals included).
    rng = np.random.default_rng(0)
    x = jnp.asarray(np.r_[rng.normal(size=60) * 10.0 ** rng.uniform(-9, 5, 60), 1e-3, 470.0, -7e4], jnp.float32)
    key = jax.random.key(4)

    @jax.jit
    def traced(args):
        hook = sst.precision_hook(args, customs=CUSTOMS)
        return hook.apply(scarjax.State(x), (), _ctx(key))[0].params

    for fmt in FORMATS:
        own = P.quantize_tree(fmt.make_quantizer(), x, key)
        np.testing.assert_allclose(traced(fmt.as_arrays(CUSTOMS)), own, rtol=2e-7, atol=0, err_msg=fmt.describe())


def _ctx(key, step=0, state=None, alg=None):
    return scarjax.hooks.Context(jnp.int32(step), key, state, None, alg, "write")


def test_traced_precision_hook_replays_a_batch(qp):
    # One compiled program for a batch of formats; trial i is the run of its format's own
    # hook (the counterexample's replay line), up to float32 rounding of a vmapped trial.
    args = [f.as_arrays(CUSTOMS) for f in FORMATS]
    hook_args = {k: np.stack([a[k] for a in args]) for k in args[0]}
    keys = sxt.replay_keys(7, len(FORMATS))
    _, trials = scarjax.run_trials(qp, lambda a: sst.precision_hook(a, customs=CUSTOMS), 30, keys, hook_args=hook_args)
    i = 1  # stochastic rounding: the same random draws
    _, one = scarjax.run(qp, FORMATS[i].hook(), 30, keys[i])
    np.testing.assert_allclose(trials.delta["precision_write"][i], one.delta["precision_write"], rtol=1e-4)
    np.testing.assert_allclose(trials.distance[i], one.distance, rtol=1e-5)
    assert np.all(np.asarray(trials.delta["precision_write"][:, 0]) > 0)


def test_precision_format_bounds_and_descriptions():
    f = sst.PrecisionFormat.mantissa(8)
    assert f.relative_bound() == float(P.relative_bound(8)) == 2.0**-9
    assert sst.PrecisionFormat.mantissa(8, stochastic=True).relative_bound() == 2.0**-8
    assert sst.PrecisionFormat.named("float8_e5m2").bits == 2
    assert sst.PrecisionFormat.named("float16").absolute_bound() == 2.0 ** (-14 - 10) / 2
    assert sst.PrecisionFormat.fixed(8).relative_bound() is None and sst.PrecisionFormat.qsgd(4).relative_bound() is None
    assert f.describe() == "8 stored mantissa bits (float32 exponent range), round-to-nearest"
    assert "claiming 3 stored mantissa bits" in FORMATS[-1].describe()
    assert eval(f.replay(), {"sst": sst}) == f  # noqa: S307 - the replay line is code
    for bad, match in (
        (lambda: sst.PrecisionFormat.mantissa(24), "bits"),
        (lambda: sst.PrecisionFormat.named("float4"), "name"),
        (lambda: sst.PrecisionFormat.fixed(1), "bits"),
        (lambda: sst.PrecisionFormat.qsgd(0), "levels"),
        (lambda: _draw(sst.precision_formats(kinds=("float64",))), "kinds"),
        (lambda: _draw(sst.precision_formats(mantissa_bits=(4, 30))), "mantissa_bits"),
    ):
        with pytest.raises(ValueError, match=match):
            bad()
    with pytest.raises(TypeError, match="quantizer"):
        sst.PrecisionFormat.custom(3, 8)


def test_precision_formats_shrink_to_the_least_perturbation():
    # Simplest: the most precise mantissa format with round-to-nearest; within a kind,
    # the most bits / levels, the most precise named format.
    assert find(sst.precision_formats(), lambda f: True) == sst.PrecisionFormat.mantissa(16)
    assert find(sst.precision_formats(), lambda f: f.stochastic) == sst.PrecisionFormat.mantissa(16, True)
    assert find(sst.precision_formats(), lambda f: f.kind == "float") == sst.PrecisionFormat.named("float16")
    assert find(sst.precision_formats(), lambda f: f.kind == "fixed") == sst.PrecisionFormat.fixed(16)
    assert find(sst.precision_formats(), lambda f: f.kind == "qsgd") == sst.PrecisionFormat.qsgd(256)
    # A property failing below 8 bits shrinks to the boundary case, 7 bits.
    assert find(sst.precision_formats(kinds=("mantissa",)), lambda f: f.bits < 8) == sst.PrecisionFormat.mantissa(7)


PATTERNS = [
    sst.DelayPattern(3, 2),
    sst.DelayPattern(3, 3, "fixed", (0, 3, 1)),
    sst.DelayPattern(3, 3, "per_step"),
    sst.DelayPattern(3, 2, "uniform"),
    sst.DelayPattern(3, 4, "geometric", mean=1.5),
]


def test_traced_stale_read_hook_reads_as_each_pattern(qp):
    # The batched hook reads the same versions as each pattern's own hook (same delays,
    # same random draws), step by step.
    state = qp.init(jax.random.key(0), qp.data)
    for p in PATTERNS:
        hooks = [sst.stale_read_hook(jax.tree.map(jnp.asarray, p.as_arrays()), workers=3, max_bound=4), p.hook()]
        hstates = [h.init(state, jax.random.key(1)) for h in hooks]
        for k in range(8):
            state = state._replace(params=state.params + 0.25)  # a new version every step
            ctx = scarjax.hooks.Context(jnp.int32(k), jax.random.key(10 + k), state, None, qp, "read")
            fresh = jnp.broadcast_to(state.params, (3,) + state.params.shape)
            out = [h.apply(fresh, hs, ctx) for h, hs in zip(hooks, hstates)]
            hstates = [o[1] for o in out]
            np.testing.assert_array_equal(out[0][0], out[1][0], err_msg=f"{p.describe()}, step {k}")
        state = qp.init(jax.random.key(0), qp.data)


def test_traced_stale_read_hook_replays_a_batch(qp):
    # One program for every pattern with M = 3, s <= 4; trial i is the run of its pattern's
    # own hook (the replay line), up to float32 rounding of a vmapped trial.
    keys = sxt.replay_keys(3, len(PATTERNS))
    args = {k: np.stack([p.as_arrays()[k] for p in PATTERNS]) for k in PATTERNS[0].as_arrays()}
    factory = lambda a: sst.stale_read_hook(a, workers=3, max_bound=4)  # noqa: E731
    _, trials = scarjax.run_trials(qp, factory, 25, keys, hook_args=args, workers=3, measure_read_effect=True)
    i = 4  # truncated geometric delays: random draws at every step
    _, one = scarjax.run(qp, PATTERNS[i].hook(), 25, keys[i], workers=3, measure_read_effect=True)
    np.testing.assert_allclose(trials.distance[i], one.distance, rtol=1e-6)
    np.testing.assert_allclose(trials.read_effect[i], one.read_effect, rtol=1e-4, atol=1e-9)
    assert np.all(np.asarray(trials.read_effect[:, 5:]).max(1) > 0)


def test_delay_patterns_and_descriptions():
    p = sst.DelayPattern(2, 3)
    assert p.describe() == "2 workers, staleness bound s = 3: every worker always reads the version 3 iterations old"
    assert "per-worker delays [0, 3]" in sst.DelayPattern(2, 3, "fixed", (0, 3)).describe()
    assert "truncated geometric" in sst.DelayPattern(2, 3, "geometric", mean=1.0).describe()
    assert eval(p.replay(), {"sst": sst}) == p  # noqa: S307
    with pytest.raises(ValueError, match="kinds"):
        _draw(sst.delay_patterns(2, kinds=("lazy",)))
    with pytest.raises(ValueError, match="workers"):
        _draw(sst.delay_patterns(0))


def test_systems_strategies_shrink_to_the_simplest():
    # Staleness 0 with one worker reading fresh parameters; then the smallest failing bound,
    # every worker at it.
    assert find(sst.delay_patterns(sst.worker_counts(4)), lambda p: True) == sst.DelayPattern(1, 0)
    assert find(sst.delay_patterns(3), lambda p: p.bound >= 2) == sst.DelayPattern(3, 2)
    assert find(sst.delay_patterns(2), lambda p: p.kind == "geometric") == sst.DelayPattern(2, 0, "geometric")
    assert find(sst.staleness_bounds(8), lambda s: s > 3) == 4
    assert find(sst.worker_counts(8), lambda m: True) == 1
    assert find(sst.worker_counts(8), lambda m: m > 2) == 3
    assert find(sst.worker_counts(8, divisors_of=12), lambda m: m > 2) == 3
    assert find(sst.worker_counts(8, divisors_of=10), lambda m: m > 2) == 5
    # One revocation of worker 0 at the first step, revoked before its first point.
    sched = find(sst.revocation_schedules(sst.worker_counts(4), 50, min_step=10), lambda r: True)
    assert sched.workers == 1 and sched.events == (sst.Revocation(10, 0, 0.0),)
    late = find(sst.revocation_schedules(4, 50), lambda r: any(e.worker == 3 for e in r.events))
    assert late.events == (sst.Revocation(0, 3, 0.0),)


def test_revocation_schedule_replays_as_a_progress_table(qp):
    sched = sst.RevocationSchedule(4, (sst.Revocation(1, 2, 0.5), sst.Revocation(3, 0, 0.0)), partial=True)
    table = sched.progress_table(5)
    assert table.shape == (5, 4) and table[1, 2] == 0.5 and table[3, 0] == 0.0 and table.sum() == 18.5
    _, tr = scarjax.run(qp, sched.hook(5), 5, 0, workers=4)  # the QP's workers weigh by progress
    np.testing.assert_array_equal(tr.points, [4.0, 3.5, 4.0, 3.0, 4.0])
    assert "worker 2 revoked after 0.5 of its points" in sched.describe()
    with pytest.raises(ValueError, match="steps"):
        sched.progress_table(3)
    with pytest.raises(ValueError, match="min_step"):
        _draw(sst.revocation_schedules(2, 3, min_step=5))
    with pytest.raises(ValueError, match="max_workers"):
        sst.worker_counts(0)
    with pytest.raises(ValueError, match="divisors_of"):
        sst.worker_counts(3, min_workers=2, divisors_of=7)


def test_strategies_draw_valid_values():
    @hypothesis_given(st.data())
    def draw_many(data):
        f = data.draw(sst.precision_formats())
        assert f.make_quantizer() is not None and f.describe()
        p = data.draw(sst.delay_patterns(sst.worker_counts(4), max_bound=5))
        assert 0 <= p.bound <= 5 and all(0 <= d <= p.bound for d in p.fixed_delays())
        assert len(p.fixed_delays()) == p.workers
        r = data.draw(sst.revocation_schedules(3, 9))
        assert r.progress_table(10).min() >= 0.0

    draw_many()


def _draw(strategy):
    return find(strategy, lambda x: True)


def hypothesis_given(strategy):
    from hypothesis import given, settings

    return lambda f: settings(max_examples=30, deadline=None, derandomize=True)(given(strategy)(f))
