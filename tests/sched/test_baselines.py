"""Tiresias and Optimus+Oracle (scarjax.sched.tiresias / optimus) on small hand-checked cases."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax.data.pollux_sim import Workload
from scarjax.sched.apps import load_apps
from scarjax.sched.optimus import OptimusPolicy, optimus_max_replicas, predict_step_time
from scarjax.sched.simulator import Cluster, JobsView, simulate
from scarjax.sched.tiresias import TiresiasPolicy, greedy_place

APPS = load_apps()


def view(apps_, gpus=None, bsz=None, alloc=None, remaining=None, nodes=1):
    n = len(apps_)
    ids = np.arange(n)
    a = np.array([APPS.names.index(x) for x in apps_])
    z = np.zeros(n)
    return JobsView(
        ids=ids, app_ids=a, submit_time=z, age_s=z, attained_gpu_s=z, restarts=z.astype(int), progress=z,
        target_progress=APPS.target_progress[a], batch_size=z.astype(int),
        user_batch_size=np.array(bsz if bsz is not None else APPS.init_batch_size[a], np.int64),
        user_gpus=np.array(gpus if gpus is not None else [1] * n, np.int64), max_gpus_seen=z.astype(int),
        alloc=np.zeros((n, nodes), np.int64) if alloc is None else np.array(alloc, np.int64),
        remaining_iters_oracle=np.array(remaining if remaining is not None else [1000.0] * n), adaptive=z.astype(bool),
        apps=APPS)


def assert_feasible(out, cluster):
    out = np.asarray(out)
    assert np.all(out >= 0), "negative GPU counts"
    used = out.sum(0)
    assert np.all(used <= cluster.gpus_per_node), f"node over-allocated: {used.tolist()} > {cluster.gpus_per_node}"


def test_feasibility_check_catches_a_planted_violation():
    with pytest.raises(AssertionError, match=r"node over-allocated: \[5\] > 4"):
        assert_feasible([[3], [2]], Cluster(nodes=1))


# -- Tiresias ---------------------------------------------------------------------------------


def test_tiresias_runs_queue_order_and_demotes_at_the_threshold():
    cl = Cluster(nodes=1)
    pol = TiresiasPolicy(queue_threshold_gpu_s=4 * 60)
    v = view(["bert", "bert", "bert"], gpus=[4, 2, 2])
    out = pol.allocate(v, cl, 60.0)
    np.testing.assert_array_equal(out, [[4], [0], [0]])  # A first in Q0 takes the node
    assert pol.queue_0 == [0, 1, 2] and pol.queue_1 == []
    # 60 s later A has 4 GPU x 60 s = the threshold: demoted, B and C run, A is preempted
    out = pol.allocate(v._replace(alloc=out), cl, 120.0)
    np.testing.assert_array_equal(out, [[0], [2], [2]])
    assert pol.queue_0 == [1, 2] and pol.queue_1 == [0]
    # B and C keep running (pending A does not accrue service)
    out2 = pol.allocate(v._replace(alloc=out), cl, 180.0)
    np.testing.assert_array_equal(out2, out)
    assert pol.executed[0] == 60 and pol.executed[1] == 60


def test_tiresias_skips_a_job_that_does_not_fit_and_places_on_the_freest_node():
    cl = Cluster(nodes=2)
    pol = TiresiasPolicy()
    v = view(["bert", "bert", "bert", "bert"], gpus=[3, 6, 1, 4], nodes=2)
    out = pol.allocate(v, cl, 60.0)
    # admission in Q0 order on 8 GPUs: A(3) (5 left), B(6) skipped, C(1) (4 left), D(4) (0 left).
    # placement: A on node 0 (tie: first), C on node 1 (4 free vs 1), D takes node 1's 3 then node 0's 1
    np.testing.assert_array_equal(out, [[3, 0], [0, 0], [0, 1], [1, 3]])
    assert_feasible(out, cl)


def test_tiresias_keeps_running_jobs_where_they_are():
    cl = Cluster(nodes=2)
    pol = TiresiasPolicy()
    v = view(["bert", "bert"], gpus=[2, 2], nodes=2)
    out = pol.allocate(v._replace(ids=np.array([0]), app_ids=v.app_ids[:1], user_gpus=v.user_gpus[:1],
                                  alloc=np.array([[0, 2]])), cl, 60.0)
    np.testing.assert_array_equal(out, [[0, 2]])
    out = pol.allocate(v._replace(alloc=np.array([[0, 2], [0, 0]])), cl, 120.0)
    np.testing.assert_array_equal(out, [[0, 2], [2, 0]])


def test_tiresias_refuses_a_job_larger_than_the_cluster():
    with pytest.raises(ValueError, match="asks for 8 GPUs; the cluster has 4"):
        TiresiasPolicy().allocate(view(["bert"], gpus=[8]), Cluster(nodes=1), 60.0)


def test_greedy_place_takes_the_freest_node_first():
    free = np.array([2, 4, 3])
    np.testing.assert_array_equal(greedy_place(free, 6), [0, 4, 2])
    np.testing.assert_array_equal(free, [2, 0, 1])
    with pytest.raises(ValueError, match="exceeds the 3 free GPUs"):
        greedy_place(free, 4)


# -- Optimus ----------------------------------------------------------------------------------


def test_optimus_one_gpu_each_in_submission_order_first():
    cl = Cluster(nodes=1, gpus_per_node=2)
    out = OptimusPolicy().allocate(view(["cifar10"] * 3, bsz=[1024] * 3), cl)
    np.testing.assert_array_equal(out.sum(1), [1, 1, 0])


def test_optimus_gives_extra_gpus_by_marginal_gain_with_oracle_iterations():
    cl = Cluster(nodes=1)
    b = 1024
    out = OptimusPolicy().allocate(view(["cifar10", "cifar10"], bsz=[b, b], remaining=[1.0, 1e6]), cl)
    np.testing.assert_array_equal(out.sum(1), [1, 3])  # the job with far more iterations left takes the rest
    # the same by hand: greedy on (T(k) - T(k+1)) * remaining
    t = {k: predict_step_time(APPS, APPS.names.index("cifar10"), b, k) for k in range(1, 5)}
    k, rem, left = [1, 1], [1.0, 1e6], 2
    while left:
        g = [(t[k[j]] - t[k[j] + 1]) * rem[j] if k[j] < 4 else 0 for j in range(2)]
        k[int(np.argmax(g))] += 1
        left -= 1
    assert k == [1, 3] and t[1] > t[2] > t[3]
    assert_feasible(out, cl)


def test_optimus_caps_at_batch_over_min_local_bsz_and_ncf_at_one():
    cl = Cluster(nodes=2)
    m = APPS["cifar10"]
    v = view(["ncf", "cifar10"], bsz=[32768, 2 * m.min_local_bsz], remaining=[1e9, 1e9], nodes=2)
    np.testing.assert_array_equal(optimus_max_replicas(v), [1, 2])
    out = OptimusPolicy().allocate(v, cl)
    np.testing.assert_array_equal(out.sum(1), [1, 2])  # GPUs left idle rather than past the caps


def test_optimus_keeps_allocations_whose_size_is_unchanged():
    cl = Cluster(nodes=2)
    v = view(["ncf", "ncf"], bsz=[32768, 32768], alloc=[[0, 1], [0, 0]], nodes=2)
    out = OptimusPolicy().allocate(v, cl)
    np.testing.assert_array_equal(out, [[0, 1], [1, 0]])


@settings(max_examples=15, deadline=None)
@given(data=st.data(), nodes=st.integers(1, 3), gpn=st.integers(1, 4))
def test_baselines_allocate_within_cluster_and_caps(data, nodes, gpn):
    cl = Cluster(nodes=nodes, gpus_per_node=gpn)
    n = data.draw(st.integers(1, 6))
    apps_ = data.draw(st.lists(st.sampled_from(["ncf", "bert", "cifar10"]), min_size=n, max_size=n))
    bsz = [32768 if a == "ncf" else int(APPS[a].batch_sizes[data.draw(st.integers(0, 1))]) for a in apps_]
    gpus = data.draw(st.lists(st.integers(1, cl.total_gpus), min_size=n, max_size=n))
    rem = data.draw(st.lists(st.floats(1.0, 1e6), min_size=n, max_size=n))
    v = view(apps_, gpus=gpus, bsz=bsz, remaining=rem, nodes=nodes)
    out = OptimusPolicy().allocate(v, cl)
    assert_feasible(out, cl)
    k = out.sum(1)
    assert np.all(k <= optimus_max_replicas(v))
    assert np.all(k[: min(n, cl.total_gpus)] >= 1)  # one each, in submission order, while GPUs remain
    t_out = TiresiasPolicy().allocate(v, cl, 60.0)
    assert_feasible(t_out, cl)
    assert np.all((t_out.sum(1) == 0) | (t_out.sum(1) == np.asarray(gpus)))  # all or nothing


# -- whole simulations ------------------------------------------------------------------------


def _workload(rows):
    return Workload(name=np.array([f"{r[0]}-{i}" for i, r in enumerate(rows)]),
                    time=np.array([r[1] for r in rows], float), application=np.array([r[0] for r in rows]),
                    num_replicas=np.array([r[2] for r in rows], np.int64),
                    batch_size=np.array([r[3] for r in rows], np.int64), source="test")


ROWS = [("ncf", 0.0, 1, 32768), ("bert", 20.0, 3, 96), ("ncf", 40.0, 1, 32768), ("bert", 60.0, 2, 96),
        ("ncf", 70.0, 1, 32768)]


@pytest.mark.parametrize("policy", [TiresiasPolicy, OptimusPolicy])
def test_baselines_simulate_deterministically_within_the_cluster(policy):
    cl = Cluster(nodes=1)
    a = simulate(_workload(ROWS), policy(), cluster=cl, key=0, max_time_s=2400)
    b = simulate(_workload(ROWS), policy(), cluster=cl, key=jax.random.key(1), max_time_s=2400)
    assert [j.to_json() for j in a.jobs] == [j.to_json() for j in b.jobs]  # no randomness used
    assert np.all(a.timeline["used_gpus"] <= cl.total_gpus)
    assert a.jobs[0].completion_s is not None  # the first NCF job finishes


@pytest.mark.slow
@pytest.mark.parametrize("policy, ref", [(TiresiasPolicy, 2474.0), (OptimusPolicy, 4087.0)])
def test_workload_1_matches_the_artifacts_average_jct(policy, ref):
    res = simulate("workload-1", policy(), record_timeline=False)
    assert res.n_unfinished == 0
    assert abs(res.avg_jct_s / ref - 1) < 0.01, res.avg_jct_s
