"""Garbage in, a clear error out: malformed arguments to the public
(non-data) API raise a ``ValueError``/``TypeError`` raised by scarjax's own validation
whose message names the argument, never a silently wrong result or an error from deep
inside NumPy/JAX.

Property-based: each test draws malformed values of one argument (wrong types, NaN/inf,
negative, out of range, wrong shapes, empty) from a strategy. Everything here fails
before compilation (shape checks fail while the loop is being traced), so the module
runs in seconds.
"""

from __future__ import annotations

import math
import traceback
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, strategies as st

import scarjax
from scarjax import hooks, perturb, schedules
from scarjax.scar import checkpoint, faults, partition
from scarjax.perturb import precision, revocation, staleness
from scarjax.models import mlr, quadratic

PKG = Path(scarjax.__file__).resolve().parent
QP = quadratic.fig53_problem()
STATE = scarjax.State(jnp.zeros(4), ())
PART = partition.by_element(STATE)
DATA = {"x": jnp.linspace(-1.0, 1.0, 8)[:, None], "y": jnp.linspace(0.0, 1.0, 8)}


def _loss(w, batch):
    return jnp.mean((batch["x"][:, 0] * w - batch["y"]) ** 2)


def assert_names(call, name):
    """``call()`` raises a ValueError/TypeError from scarjax code whose message names ``name``."""
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    msg = str(info.value)
    assert name in msg, f"{name!r} not named in: {msg}"
    origin = Path(traceback.extract_tb(info.value.__traceback__)[-1].filename).resolve()
    assert PKG in origin.parents, f"raised outside scarjax ({origin}): {msg}"


# --------------------------------------------------------------------------------------
# Strategies of malformed values.

junk = st.sampled_from([None, "x", "3", b"1", {"a": 1}, object(), 1j])
nonfinite = st.sampled_from([math.nan, math.inf, -math.inf])
non_integral = st.floats().filter(lambda x: not (math.isfinite(x) and float(x).is_integer()))


def bad_count(lo: int) -> st.SearchStrategy:
    """Not a static int >= lo: smaller ints, any float, bools, junk, lists."""
    return st.one_of(st.integers(max_value=lo - 1), st.floats(), st.booleans(), junk, st.just([1, 2]))


def bad_step(lo: int = 0) -> st.SearchStrategy:
    """Not an integer-valued number >= lo (3.0 would be valid)."""
    return st.one_of(st.integers(max_value=lo - 1), non_integral, junk, st.just([1, 2]))


def bad_real(ok) -> st.SearchStrategy:
    """Numbers failing ``ok`` (NaN and inf included), junk, and non-scalars."""
    return st.one_of(st.floats().filter(lambda x: not ok(x)), nonfinite, junk, st.just([0.5, 0.5]))


bad_unit = bad_real(lambda x: 0.0 <= x <= 1.0)
bad_open_unit = bad_real(lambda x: 0.0 < x <= 1.0)
bad_nonneg = bad_real(lambda x: 0.0 <= x < math.inf)
bad_positive = bad_real(lambda x: 0.0 < x < math.inf)
bad_name = st.one_of(st.text(max_size=6), st.integers(), st.none())


# --------------------------------------------------------------------------------------
# run / run_trials.


@given(steps=bad_count(1))
def test_run_steps(steps):
    assert_names(lambda: scarjax.run(QP, None, steps, 0), "steps")
    assert_names(lambda: scarjax.run_trials(QP, None, steps, 2), "steps")


@given(key=st.one_of(st.floats(), junk, st.sampled_from([
    jnp.ones(2), jnp.zeros((3, 2), jnp.uint32), jax.random.split(jax.random.key(0), 2), jnp.zeros((), jnp.int32)])))
def test_run_key(key):
    assert_names(lambda: scarjax.run(QP, None, 3, key), "key")


@given(keys=st.one_of(st.integers(max_value=0), st.floats(), junk, st.sampled_from([
    jnp.zeros((0, 2), jnp.uint32), jax.random.split(jax.random.key(0), 0), jax.random.key(0),
    jax.random.split(jax.random.key(0), (2, 2)), jnp.ones((3, 2))])))
def test_run_trials_keys(keys):
    assert_names(lambda: scarjax.run_trials(QP, None, 3, keys), "keys")


@given(h=st.one_of(st.integers(), st.floats(), st.text(min_size=1), st.just(object()), st.just([schedules.always()])))
def test_run_hooks(h):
    assert_names(lambda: scarjax.run(QP, h, 3, 0), "hooks")


@given(flag=st.one_of(st.integers(), st.text(), st.none()))
def test_run_measure_read_effect(flag):
    assert_names(lambda: scarjax.run(QP, None, 3, 0, measure_read_effect=flag), "measure_read_effect")


@given(bad=nonfinite, at=st.integers(0, 3), shape=st.lists(st.integers(0, 5), max_size=2).filter(lambda s: s != [4]))
def test_run_init_state(bad, at, shape):
    """Non-finite initial parameters (would run to an all-NaN trace) and wrong shapes."""
    params = np.zeros(4, np.float32)
    params[at] = bad
    assert_names(lambda: scarjax.run(QP, None, 3, 0, init_state=scarjax.State(params, ())), "init_state")
    assert_names(lambda: scarjax.run_trials(QP, None, 3, 2, init_state=scarjax.State(params, ())), "init_state")
    assert_names(lambda: scarjax.run(QP, None, 3, 0, init_state=scarjax.State(np.zeros(shape, np.float32), ())), "init_state")


@given(shape=st.lists(st.integers(0, 5), max_size=2).filter(lambda s: s != [4]), bad=nonfinite)
def test_optimum(shape, bad):
    """An optimum unlike the parameters (a scalar was broadcast silently) or non-finite."""
    assert_names(lambda: scarjax.run(QP.replace(optimum=np.ones(shape, np.float32)), None, 3, 0), "optimum")
    assert_names(lambda: scarjax.run(QP.replace(optimum={"w": np.ones(4, np.float32)}), None, 3, 0), "optimum")
    assert_names(lambda: scarjax.run(QP.replace(optimum=np.array([bad, 1, 1, 1], np.float32)), None, 3, 0), "optimum")
    assert_names(lambda: scarjax.from_optax(_loss, optax.sgd(0.1), np.zeros(()), DATA, optimum=np.ones(shape or [2])),
                 "optimum")


@given(args=st.one_of(nonfinite, st.text(min_size=1).filter(lambda s: s not in faults.RECOVERIES + checkpoint.STRATEGIES),
                      st.sampled_from([object(), None])))
def test_run_hook_args(args):
    assert_names(lambda: scarjax.run(QP, lambda s: hooks.scheduled(perturb.gaussian(s), 1), 3, 0, hook_args=args), "hook_args")


KEYS = jax.random.split(jax.random.key(0), 3)


@given(extra=st.integers(-3, 3).filter(lambda e: e != 0),
       names=st.lists(st.sampled_from(["partial", "full", "half", "", "priority"]), min_size=3, max_size=3))
def test_run_trials_hook_args(extra, names):
    """Leading axis not one per key; recovery names outside faults.RECOVERIES."""
    factory = lambda a: faults.scar(PART, failure=faults.Failure(fraction=0.5, when=1), recovery=a)  # noqa: E731
    assert_names(lambda: scarjax.run_trials(QP, factory, 3, KEYS, hook_args=np.zeros(3 + extra, np.int32)), "hook_args")
    if not set(names) <= {"partial", "full"}:
        assert_names(lambda: scarjax.run_trials(QP, factory, 3, KEYS, hook_args={"recovery": names}), "hook_args")
    assert_names(lambda: scarjax.run_trials(QP, perturb.gaussian(0.1), 3, KEYS, hook_args=np.zeros(3)), "hook_args")


@given(steps=st.integers(1, 30), late=st.integers(0, 10**6))
def test_events_after_the_last_step(steps, late):
    k = steps + late
    assert_names(lambda: scarjax.run(QP, hooks.scheduled(perturb.gaussian(0.1), k), steps, 0), "when")
    assert_names(lambda: scarjax.run(QP, hooks.scheduled(perturb.reset(0.5), schedules.at(0, k)), steps, 0), "when")
    assert_names(lambda: scarjax.run_trials(QP, faults.scar(PART, failure=faults.Failure(fraction=0.5, when=k)), steps, KEYS),
                 "failure.when")


@given(size=st.integers(2, 9).filter(lambda d: d != 4), layout=st.sampled_from(["row", "element", "layer"]))
def test_partition_of_another_model(size, layout):
    """A partition built for one model and used on another fails naming it, not in JAX."""
    other = partition.build(scarjax.State(jnp.zeros((size, 1) if layout == "layer" else size), ()), layout)
    hook = faults.scar(other, checkpoint=checkpoint.Checkpoint("priority", 0.5, 2), failure=faults.Failure(fraction=0.5, when=1))
    assert_names(lambda: scarjax.run(QP, hook, 3, 0), "partition")
    assert_names(lambda: partition.restore(STATE, STATE, other, np.ones(other.num_blocks, bool)), "partition")
    assert_names(lambda: checkpoint.init(STATE, other), "partition")
    assert_names(lambda: partition.block_distances(other, STATE.params, STATE.params), "partition")


@given(i=st.one_of(st.integers().filter(lambda i: not -3 <= i < 3), st.floats(), junk))
def test_split_trials(i):
    assert_names(lambda: scarjax.split_trials({"loss": jnp.zeros((3, 5))}, i), "i")


# --------------------------------------------------------------------------------------
# Algorithm constructors.


@given(batch=st.one_of(bad_count(1), st.integers(min_value=9)).filter(lambda b: b is not None))
def test_from_optax_batch_size(batch):
    assert_names(lambda: scarjax.from_optax(_loss, optax.sgd(0.1), jnp.zeros(()), DATA, batch_size=batch), "batch_size")


@given(bad=nonfinite, fn=st.one_of(junk, st.integers()))
def test_from_optax_and_fixed_point(bad, fn):
    assert_names(lambda: scarjax.from_optax(_loss, optax.sgd(0.1), jnp.array(bad), DATA), "init_params")
    assert_names(lambda: scarjax.from_optax(fn, optax.sgd(0.1), jnp.zeros(()), DATA), "loss_fn")
    assert_names(lambda: scarjax.from_optax(_loss, fn, jnp.zeros(()), DATA), "optimizer")
    assert_names(lambda: scarjax.from_optax(_loss, optax.sgd(0.1), jnp.zeros(()), {"x": jnp.zeros((0, 1))}), "data")
    assert_names(lambda: scarjax.fixed_point(fn, jnp.zeros(3), lambda w, d: jnp.sum(w)), "f")
    assert_names(lambda: scarjax.fixed_point(lambda w, d: w, jnp.full(3, bad), lambda w, d: jnp.sum(w)), "init_params")
    assert_names(lambda: scarjax.Algorithm(init=fn, update=lambda *a: a, loss=lambda *a: 0.0), "init")


@given(lr=bad_positive, d=bad_count(1), labels=st.lists(non_integral.filter(math.isfinite), min_size=1, max_size=3))
def test_models(lr, d, labels):
    assert_names(lambda: quadratic.problem(np.eye(2), np.zeros(2), lr, np.zeros(2)), "lr")
    assert_names(lambda: quadratic.random_problem(0, d, 4.0), "d")
    x, y = np.zeros((4, 2)), np.array([0, 1, 0, 1])
    assert_names(lambda: mlr.mlr(x, y, lr=lr), "lr")
    assert_names(lambda: mlr.mlr(x, np.array(labels + [0, 1, 0])[:4]), "y")


# --------------------------------------------------------------------------------------
# Hooks, schedules and their parameters (concrete values; traced ones are the caller's).

HOOK_ARGS = [
    (lambda v: perturb.gaussian(v), "std", bad_nonneg),
    (lambda v: perturb.adversarial(v), "size", bad_nonneg),
    (lambda v: perturb.reset(v), "fraction", bad_unit),
    (lambda v: schedules.at(v), "step", bad_step()),
    (lambda v: schedules.every(v), "k", bad_step(1)),
    (lambda v: schedules.every(2, start=v), "start", bad_step()),
    (lambda v: schedules.with_probability(v), "p", bad_unit),
    (lambda v: hooks.scheduled(perturb.gaussian(0.1), v), "when", st.one_of(st.integers(max_value=-1), st.floats(), st.text(), st.just([1]))),
    (lambda v: hooks.param_hook(v), "transform", st.one_of(junk, st.integers())),
    (lambda v: hooks.perturbation(v), "delta_fn", st.one_of(junk, st.integers())),
    (lambda v: perturb.gaussian(0.1, name=v), "name", st.one_of(st.integers(), st.none(), st.just(b"g"))),
    (lambda v: perturb.gaussian(0.1, point=v), "point", bad_name.filter(lambda s: s not in hooks.POINTS)),
    (lambda v: faults.Failure(fraction=v, when=1), "fraction", bad_unit),
    (lambda v: faults.Failure(servers=v, when=1), "servers", bad_step()),
    (lambda v: faults.Failure(fraction=0.5, when=v), "when", bad_step()),
    (lambda v: schedules.geometric(v), "rate", bad_open_unit),
    (lambda v: faults.scar(PART, recovery=v), "recovery",
     st.one_of(st.text().filter(lambda s: s not in faults.RECOVERIES), st.none(), st.floats(),
               st.integers().filter(lambda i: not 0 <= i < len(faults.RECOVERIES)))),
    (lambda v: faults.scar(v), "partition", st.one_of(junk, st.integers())),
    (lambda v: faults.scar(PART, failure=faults.Failure(servers=v, when=1)), "servers", st.integers(min_value=PART.num_servers + 1)),
    (lambda v: checkpoint.Checkpoint("priority", v, 10), "fraction", bad_open_unit),
    (lambda v: checkpoint.Checkpoint("priority", 0.5, v), "period", bad_step(1).filter(lambda v: v is not None)),
    (lambda v: checkpoint.Checkpoint(v, 0.5, 10), "strategy", bad_name.filter(lambda s: s not in checkpoint.STRATEGIES)),
    (lambda v: checkpoint.Checkpoint("priority", 0.5, 10, norm=v), "norm", st.one_of(st.text().filter(lambda s: s not in ("auto", "l1", "l2")), st.integers())),
    (lambda v: staleness.ssp(v, 1), "workers", bad_count(1)),
    (lambda v: staleness.ssp(2, v), "staleness", bad_step()),
    (lambda v: staleness.asynchronous(2, v, max_delay=3), "mean_delay", bad_nonneg),
    (lambda v: staleness.asynchronous(2, 1.0, max_delay=v), "max_delay", bad_step()),
    (lambda v: precision.mantissa(v), "bits", st.one_of(bad_step(), st.integers(min_value=24))),
    (lambda v: precision.fixed_point_quantizer(v), "bits", st.one_of(bad_step(2), st.integers(min_value=25))),
    (lambda v: precision.qsgd(v), "levels", bad_step(1)),
    (lambda v: precision.float_format(v), "name", bad_name.filter(lambda s: s not in precision.FORMATS)),
    (lambda v: scarjax.run(QP, None, 3, 0, workers=v), "workers", bad_count(1).filter(lambda v: v is not None)),
    (lambda v: revocation.revocations(2, v), "rate", bad_unit),
    (lambda v: revocation.revocations(2, 0.1, downtime=v), "downtime", bad_count(0)),
    (lambda v: revocation.revocations(2, progress=np.full((3, 2), v)), "progress", bad_unit.filter(lambda v: isinstance(v, float))),
]


@pytest.mark.parametrize("make, name, values", HOOK_ARGS, ids=[f"{i}-{a[1]}" for i, a in enumerate(HOOK_ARGS)])
@given(data=st.data())
def test_hook_and_spec_arguments(make, name, values, data):
    value = data.draw(values, label=name)
    assert_names(lambda: make(value), name)


PARTITION_ARGS = [
    (lambda v: partition.by_row(STATE, num_servers=v), "num_servers", bad_count(1)),
    (lambda v: partition.by_shard(STATE, shards=v), "shards", bad_count(1)),
    (lambda v: partition.by_axis(STATE, v), "axis", st.one_of(st.integers().filter(lambda a: not -1 <= a < 1), junk, st.floats())),
    (lambda v: partition.build(STATE, v), "layout", st.text().filter(lambda s: s not in partition.LAYOUTS)),
    (lambda v: partition.build(STATE, key=v), "key", st.one_of(st.floats(), st.text(), st.just(object()), st.integers(max_value=-1))),
    (lambda v: PART.reassign(np.full(PART.num_blocks, v)), "server_of", st.integers(-2**62, 2**62).filter(lambda s: not 0 <= s < PART.num_servers)),
    (lambda v: partition.restore(STATE, STATE, PART, np.ones(v, bool)), "block_mask", st.integers(0, 9).filter(lambda n: n != 4)),
    (lambda v: partition.random_blocks(jax.random.key(0), 4, v), "fraction", bad_unit),
    (lambda v: partition.random_servers(jax.random.key(0), 4, v), "count", st.one_of(bad_step(), st.integers(min_value=5))),
]


@pytest.mark.parametrize("make, name, values", PARTITION_ARGS, ids=[a[1] for a in PARTITION_ARGS])
@given(data=st.data())
def test_partition_arguments(make, name, values, data):
    value = data.draw(values, label=name)
    assert_names(lambda: make(value), name)
