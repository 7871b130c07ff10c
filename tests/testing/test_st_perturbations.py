"""Strategies for perturbations: shrinking gives minimal counterexamples (one event at
step 0; ``schedules.at(0)``; one Gaussian hook at step 0), and the drawn schedules and
hook chains fire, under ``scarjax.run``, exactly where their descriptions say."""

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scarjax
from scarjax import hooks
from scarjax.models import quadratic
from scarjax.testing import strategies as sst

# No explain phase: it re-runs the search under a tracer to say which lines only failing
# examples ran (seconds per find).
FIND = settings(database=None, max_examples=200, phases=[hypothesis.Phase.generate, hypothesis.Phase.shrink])
T = 16  # run length; events are drawn in [0, T - 1]


def _find(strategy, predicate):
    return hypothesis.find(strategy, predicate, settings=FIND)


def test_perturbation_sequences_shrink_to_one_event_at_step_0():
    seq = _find(sst.perturbation_sequences(50), lambda s: any(e.size > 1 for e in s.events))
    assert len(seq.events) == 1
    (e,) = seq.events
    assert e.step == 0 and e.size > 1 and e.direction == "random" and e.sparsity == 1.0 and e.seed == 0
    # A failure that needs a late step shrinks to exactly that step.
    late = _find(sst.perturbation_sequences(50), lambda s: any(e.step >= 10 for e in s.events))
    assert [e.step for e in late.events] == [10]
    adv = _find(sst.perturbation_sequences(50), lambda s: any(e.direction == "adversarial" for e in s.events))
    assert len(adv.events) == 1 and adv.events[0].step == 0 and adv.events[0].direction == "adversarial"
    assert seq.describe().startswith("1 perturbation: step 0:")


def test_schedules_and_hook_chains_shrink_to_the_simplest():
    assert _find(sst.schedules(20), lambda s: True).code == "schedules.at(0)"
    assert _find(sst.schedules(20, min_step=3), lambda s: True).code == "schedules.at(3)"
    assert _find(sst.schedules(20), lambda s: s.kind != "at").code == "schedules.every(1, start=0, stop=None)"
    chain = _find(sst.hook_chains(20), lambda c: True)
    assert len(chain.parts) == 1
    (part,) = chain.parts
    assert part.kind == "gaussian" and part.schedule.code == "schedules.at(0)" and part.name == "gaussian_0"
    assert chain.description == f"gaussian_0: Gaussian noise of std {part.param:.6g} per entry, at step 0"
    two = _find(sst.hook_chains(20), lambda c: len(c.parts) > 1)
    assert len(two.parts) == 2 and two.names == ("gaussian_0", "gaussian_1")


@settings(max_examples=50, deadline=None, derandomize=True, database=None)
@given(sst.schedules(T - 1))
def test_schedules_fire_where_described_when_evaluated(drawn):
    s = drawn.schedule
    assert repr(drawn) == f"DrawnSchedule({drawn.code})" and drawn.description
    assert all(e <= T - 1 for e in s.events)
    steps = jnp.arange(T)
    for key_seed in range(2):
        key = jax.random.key(key_seed)
        state = s.init(key)
        fires = jax.vmap(lambda k: s(k, jax.random.fold_in(key, k), state))(steps)
        fired = tuple(int(k) for k in np.flatnonzero(np.asarray(fires)))
        exact = drawn.fire_steps(T)
        if exact is not None:
            assert fired == exact, drawn.description
        assert set(fired) <= set(drawn.possible_steps(T)), drawn.description
        if drawn.fires_once:
            stop = drawn.args[2]
            assert len(fired) <= 1 and (stop is None or len(fired) == 1)


# One problem and one marker hook: the marker adds ones to the parameters, so the steps
# at which a schedule fires are those with a nonzero trace.delta.
QP = quadratic.random_problem(0, 3, 4.0)


def _marker(params, hstate, ctx, key):
    return jax.tree.map(jnp.ones_like, params)


@settings(max_examples=5, deadline=None, derandomize=True, database=None)
@given(sst.schedules(T - 1))
def test_schedules_fire_where_described_under_run(drawn):
    hook = hooks.scheduled(hooks.perturbation(_marker, name="marker"), drawn.schedule)
    _, trace = scarjax.run(QP, hook, T, jax.random.key(0))
    fired = tuple(int(k) for k in np.flatnonzero(np.asarray(trace.delta["marker"]) > 0))
    exact = drawn.fire_steps(T)
    if exact is not None:
        assert fired == exact, drawn.description
    assert set(fired) <= set(drawn.possible_steps(T)), drawn.description


@settings(max_examples=5, deadline=None, derandomize=True, database=None)
@given(sst.hook_chains(T - 1, max_hooks=3))
def test_hook_chains_act_where_described_under_run(chain):
    assert isinstance(chain.hook, hooks.Hook) and chain.description == "; ".join(p.describe() for p in chain.parts)
    _, trace = scarjax.run(QP, chain.hook, T, jax.random.key(1))
    assert set(trace.delta) == set(chain.names)
    for part in chain.parts:
        acted = tuple(int(k) for k in np.flatnonzero(np.asarray(trace.delta[part.name]) > 0))
        assert set(acted) <= set(part.possible_steps(T)), part.describe()
        exact = part.fire_steps(T)
        # Gaussian noise, an adversarial step (away from w*, never reached) and a sequence's
        # events always change the parameters when they act; a reset may not (at step 0
        # the parameters are w⁽⁰⁾).
        if exact is not None and part.kind != "reset":
            assert acted == exact, part.describe()


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="kinds"):
        _find(sst.schedules(5, kinds=("sometimes",)), lambda s: True)
    with pytest.raises(ValueError, match="min_step"):
        _find(sst.schedules(5, min_step=6), lambda s: True)
    with pytest.raises(ValueError, match="kinds"):
        _find(sst.hook_chains(5, kinds=()), lambda s: True)
    with pytest.raises(ValueError, match="max_hooks"):
        _find(sst.hook_chains(5, max_hooks=0), lambda s: True)


def test_kinds_restrict_what_is_drawn():
    only = st.lists(sst.schedules(10, kinds=("every", "never")), min_size=3, max_size=3)
    drawn = _find(only, lambda xs: len({x.kind for x in xs}) == 2)
    assert {x.kind for x in drawn} == {"every", "never"}
    seqs = _find(sst.hook_chains(10, kinds=("sequence",)), lambda c: True)
    assert seqs.parts[0].kind == "sequence" and seqs.parts[0].schedule is None
    assert seqs.parts[0].fire_steps(T) == (0,)
