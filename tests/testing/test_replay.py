"""A counterexample's replay snippet runs when pasted: for a real failure of each check, the
snippet is executed in a fresh namespace holding only the user's own objects, bound under
the check's argument names (``algorithm``; ``quantizer``, ``hook``, ``recover``, ``loss``,
``params``, ``data``, ``estimator`` where the check was given them: docs/testing.md), and
it reproduces the failure (the same title). No placeholders, no undefined names."""

import re

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import Phase
from hypothesis import strategies as st

from scarjax import pollux as px
from scarjax import testing as sxt
from scarjax.models import mlr, quadratic
from scarjax.perturb import precision as P
from scarjax.perturb import staleness
from scarjax.pollux import examples
from scarjax.scar import faults
from scarjax.scar import partition as part_
from scarjax.testing import strategies as sst

NO_SHRINK = hypothesis.settings(sxt.DEFAULT_SETTINGS, max_examples=3, phases=[Phase.explicit, Phase.generate])


@pytest.fixture(scope="module")
def qp():
    alg = quadratic.random_problem(3, 4, 3.0, c=0.9)  # Eq 5.3 with c = 0.9 for every w
    return alg, quadratic.contraction(alg)


def _replays(failure: sxt.CheckFailure, **objects) -> sxt.CheckFailure:
    """Run ``failure.replay`` in a namespace of the user's objects only; return what it raised."""
    code = failure.replay
    assert code and code.startswith(sxt.REPLAY_IMPORTS)
    assert "..." not in code and not re.search(r"<[A-Za-z]", code), code  # no placeholders
    with pytest.raises(sxt.CheckFailure) as again:
        exec(code, dict(objects))  # noqa: S102 - the counterexample's replay code
    assert again.value.title == failure.title
    return again.value


def test_linear_convergence_replays(qp):
    alg, _ = qp
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_linear_convergence(alg, 100, rate=0.5, settings=NO_SHRINK)
    _replays(e.value, algorithm=alg)


@pytest.mark.parametrize("variant", ["5.3.1", "B.2", "B.1.2"])
def test_rework_bound_replays(qp, variant):
    alg, _ = qp
    kw = {"5.3.1": {"c": 0.5}, "B.2": {"c": 0.5, "trials": 4},
          "B.1.2": {"c": None, "alphas": np.full(100, 0.5), "G": 0.0, "trials": 4}}[variant]
    c = kw.pop("c")
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_rework_bound(alg, c, 100, variant=variant, settings=NO_SHRINK, **kw)
    _replays(e.value, algorithm=alg)


def test_precision_floor_replays_with_the_users_quantizer(qp):
    alg, c = qp
    quantizer = P.mantissa(3)  # claims 8 stored mantissa bits, keeps 3
    fake = sst.PrecisionFormat.custom(quantizer, 8, name="fake8")
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_precision_floor(alg, c, 100, formats=st.just(fake), seed=5, settings=2)
    _replays(e.value, algorithm=alg, quantizer=quantizer)


def test_staleness_replays_with_the_users_hook():
    alg = quadratic.fig53_problem()

    def hook(M, s, S):  # declares bound s, reads s + 2 old
        return staleness.ssp(M, s + 2, delays="fixed", max_staleness=S + 2)

    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_staleness(alg, 0.995, 30, workers=1, hook=hook, trials=2, seed=0, settings=NO_SHRINK)
    _replays(e.value, algorithm=alg, hook=hook)


def test_partial_recovery_replays_with_the_users_recovery():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 7)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(7, 3)), axis=1)
    alg = mlr.mlr(x, y, num_classes=3, optimizer=optax.adam(0.05), batch_size=16)

    def recover(state, saved, partition, lost):  # partial recovery that also nudges an unlost block
        rec = faults.recover("partial", state, saved, partition, lost)
        first = jnp.zeros_like(lost).at[jnp.argmin(lost)].set(True) & ~lost
        return jax.tree.map(lambda m, v: jnp.where(m, v + 1e-3, v), part_.entry_masks(partition, first), rec)

    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_partial_recovery(alg, 12, recover=recover, settings=NO_SHRINK)
    _replays(e.value, algorithm=alg, recover=recover)


def test_pgns_replays_with_the_users_estimator():
    prob = examples.mlr()
    loss, params, data = prob.loss, prob.params, (prob.x, prob.y)

    def estimator(grads, b, p):  # omits the micro-batch-size factor of tr(P Sigma P^T)
        s = px.microbatch_stats(grads, b, p)
        return px.GradStats(s.sqr, s.var / b)

    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_pgns_unbiased(loss, params, data, microbatch_size=16, estimator=estimator, seed=3, settings=2)
    _replays(e.value, loss=loss, params=params, data=data, estimator=estimator)


def test_determinism_replays(qp):
    alg, _ = qp
    traced = [0]

    def update(view, state, data, key):  # a Python counter read while tracing
        traced[0] += 1
        return -0.1 * view + 1e-3 * traced[0], state

    counter = alg.replace(update=update, name="counter")
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_determinism(counter, 12, settings=2)
    _replays(e.value, algorithm=counter)
