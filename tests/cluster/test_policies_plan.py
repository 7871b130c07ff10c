"""scarjax.cluster.policies' public planning API (``plan_checkpoint_restart``, ``plan_scar``,
``execute_plan``, ``Plan``, ``LossReplay``, ``scar_setup``, ``resolve_interval_steps``,
``check_arguments``): a plan executed with a real Trainer is the policy's run bit for bit; a
checkpoint-restart plan replayed on the one reliable curve is the same run (thesis Ch. 5's
comparison scheme: a restore reloads a state of the reliable trajectory); a planted curve
perturbation is caught; bad input names the argument."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

from scarjax.cluster import clock as ck
from scarjax.cluster import market as mk
from scarjax.cluster import policies as po
from scarjax.cluster.steptime import step_time_linear
from scarjax.cluster.trainer import Trainer
from scarjax.models import mlr

HORIZON = 3 * 3600.0


@functools.lru_cache(maxsize=None)
def _job():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 5)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int32)
    alg = mlr.mlr(x, y, num_classes=2, lr=0.5, batch_size=16)
    target = float(np.min(Trainer(alg, 0).train(40)[:30])) + 1e-3
    return ck.Job(alg, target, step_time_linear(40.0, 0.5), workers=3, checkpoint_s=60.0, restore_s=30.0,
                  max_steps=40)


def _market():
    return mk.Market(mk.MachineType("m4", 0.2, spot=0.05), mk.exponential(600.0), startup=mk.fixed_startup(60.0))


def check_same_run(a, b):
    """Every recorded field of two runs equal (float64 ``==``), events and meta too."""
    for f in ("time_s", "dollars", "loss", "steps"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f"{f} differs"
    assert a.events == b.events and a.meta == b.meta and a.end_s == b.end_s and a.cost_by_tier == b.cost_by_tier


def _cr_plan(job, market, seed):
    K = po.resolve_interval_steps(job, market)
    return po.plan_checkpoint_restart(job, market, jax.random.key(seed), HORIZON, K, 25, "on_demand")


@pytest.mark.parametrize("seed", [1, 2])
def test_plan_then_execute_is_the_policy_and_replays_the_reliable_curve(seed):
    job, market = _job(), _market()
    ref = po.checkpoint_restart(job, market, key=jax.random.key(seed), horizon_s=HORIZON)
    plan = _cr_plan(job, market, seed)
    assert any(op[0] == "rollback" for op in plan.ops), "no revocation: a vacuous test"
    check_same_run(po.execute_plan(plan, Trainer(job.algorithm, 0), job, "checkpoint_restart"), ref)
    curve = Trainer(job.algorithm, 0).train(_cr_plan(job, market, seed).furthest_step())
    check_same_run(po.execute_plan(_cr_plan(job, market, seed), po.LossReplay(curve), job, "checkpoint_restart"), ref)
    assert ref.steps.max() <= plan.furthest_step()


def test_planted_violation_a_perturbed_curve_is_caught():
    job, market = _job(), _market()
    ref = po.checkpoint_restart(job, market, key=jax.random.key(1), horizon_s=HORIZON)
    curve = Trainer(job.algorithm, 0).train(_cr_plan(job, market, 1).furthest_step())
    curve[2] = np.nextafter(curve[2], np.inf)
    run = po.execute_plan(_cr_plan(job, market, 1), po.LossReplay(curve), job, "checkpoint_restart")
    with pytest.raises(AssertionError, match="loss differs"):
        check_same_run(run, ref)


def test_scar_plan_operations_and_training_only():
    job, market = _job(), _market()
    K, partition, spec = po.scar_setup(job, market, 0.25)
    assert po.scar_setup(job, market, 0.25)[1:] == (partition, spec)  # cached: the same objects
    plan = po.plan_scar(job, market, jax.random.key(3), HORIZON, K, 0.25, 25, spec)
    kinds = {op[0] for op in plan.ops}
    assert {"train", "ckpt", "lose"} <= kinds, f"a vacuous plan: {kinds}"
    only = plan.training_only()
    assert [op for op in plan.ops if op[0] == "train"] == only.ops and only.fleet is plan.fleet
    with pytest.raises(ValueError, match="scar_ctx"):
        po.execute_plan(plan, Trainer(job.algorithm, 0), job, "scar")
    run = po.execute_plan(only, Trainer(job.algorithm, 0), job, "scar", stop_at_target=False)
    assert run.meta["recoveries"] == plan.meta["recoveries"] > 0


def test_bad_input_names_the_argument():
    job, market = _job(), _market()
    with pytest.raises(ValueError, match="horizon_s"):
        po.plan_checkpoint_restart(job, market, jax.random.key(0), 0.0, 5.0)
    with pytest.raises(ValueError, match="granularity"):
        po.plan_checkpoint_restart(job, market, jax.random.key(0), HORIZON, 5.0, granularity=0)
    with pytest.raises(ValueError, match="unavailable"):
        po.check_arguments(job, market, HORIZON, 25, "never")
    with pytest.raises(TypeError, match="market"):
        po.check_arguments(job, "aws", HORIZON, 25)
    with pytest.raises(ValueError, match="interval_steps"):
        po.resolve_interval_steps(job, market, 0)
    with pytest.raises(TypeError, match="plan"):
        po.execute_plan([("train", 0.0, 1.0, 3)], po.LossReplay(np.ones(3)), job, "checkpoint_restart")
    with pytest.raises(ValueError, match="curve"):
        po.LossReplay(np.ones(3)).train(4)
