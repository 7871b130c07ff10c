"""Hooks of every family compose through ``chain`` under ``run`` and ``run_trials``:
stale reads + reduced-precision storage + a SCAR failure with partial recovery."""

import chex
import jax
import numpy as np

import scarjax
from scarjax import testing as sxt
from scarjax.scar import checkpoint, faults, partition
from scarjax.perturb import precision, staleness
from scarjax.models import mlr


def _hooks(alg):
    state = alg.init(jax.random.key(0), alg.data)
    part = partition.by_row(state, num_servers=4)
    return scarjax.chain(
        staleness.ssp(4, 2),
        precision.precision(precision.mantissa(10), point="write"),
        faults.scar(
            part,
            checkpoint=checkpoint.Checkpoint("priority", 0.25, 4),
            failure=faults.Failure(fraction=0.5, when=9),
            recovery="partial",
        ),
    )


def test_stale_precision_and_faults_compose_under_run_and_run_trials():
    alg = mlr.digits(batch_size=64)
    hooks = _hooks(alg)
    keys = jax.random.split(jax.random.key(7), 3)
    _, traces = scarjax.run_trials(alg, hooks, 14, keys, workers=4)
    assert set(traces.delta) >= {"scar"}
    # The failure at step 9 perturbs the parameters; precision perturbs every step.
    assert np.all(np.asarray(traces.delta["scar"])[:, 9] > 0)
    for i in range(3):
        _, t_i = scarjax.run(alg, hooks, 14, keys[i], workers=4)
        chex.assert_trees_all_close(scarjax.split_trials(traces, i), t_i, rtol=sxt.trial_rtol(), atol=1e-6)
