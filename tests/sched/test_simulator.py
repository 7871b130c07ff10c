"""scarjax.sched.simulator: the Pollux artifact's simulation loop on small hand-checked cases."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax.data.pollux_sim import Workload
from scarjax.sched.apps import load_apps
from scarjax.sched.simulator import (
    Cluster,
    JobsView,
    Policy,
    SimResult,
    key_rng,
    oracle_remaining_iterations,
    placement_of,
    simulate,
)
from scarjax.sched.tiresias import TiresiasPolicy, greedy_place

APPS = load_apps()


def workload(rows) -> Workload:
    """rows: (app, submit_s, user_gpus, user_batch_size)."""
    return Workload(name=np.array([f"{r[0]}-{i}" for i, r in enumerate(rows)]),
                    time=np.array([r[1] for r in rows], float), application=np.array([r[0] for r in rows]),
                    num_replicas=np.array([r[2] for r in rows], np.int64),
                    batch_size=np.array([r[3] for r in rows], np.int64), source="test")


class Fixed:
    """Every active job gets ``gpus`` GPUs (its user's if None) packed greedily, in submission order."""

    name = "fixed"

    def __init__(self, gpus=None, adaptive=False):
        self.gpus, self.adaptive, self.views = gpus, adaptive, []

    def allocate(self, jobs, cluster, now, key):
        self.views.append((now, jobs))
        out = np.array(jobs.alloc, np.int64)
        free = cluster.gpus_per_node - out.sum(0)
        for j in range(len(jobs.ids)):
            k = int(jobs.user_gpus[j]) if self.gpus is None else self.gpus
            if out[j].sum() == 0 and k <= free.sum():
                out[j] = greedy_place(free, k)
        return out


class RandomPolicy:
    """Random feasible allocations drawn from the decision's key (for determinism)."""

    name, adaptive = "random", False

    def allocate(self, jobs, cluster, now, key):
        rng = key_rng(key)
        free = np.full(cluster.nodes, cluster.gpus_per_node)
        out = np.zeros((len(jobs.ids), cluster.nodes), np.int64)
        for j in rng.permutation(len(jobs.ids)):
            k = int(rng.integers(0, 3))
            if 0 < k <= free.sum():
                out[j] = greedy_place(free, k)
        return out


def assert_within_cluster(timeline, cluster):
    used = np.asarray(timeline["used_gpus"])
    assert np.all(used <= cluster.total_gpus), f"allocation exceeds the cluster: {used.max()} > {cluster.total_gpus}"


def expected_completion(app, k, bsz, start, cluster):
    """Hand computation: after the restart penalty, epoch e takes (progress of e) / rate_e with
    rate_e = (M/M0) E_e(M) / T_iter on ``k`` GPUs of one node; each epoch rounded to seconds."""
    m = APPS[app]
    atomic, accum = m.split_batch_size(k, bsz)
    total = k * int(atomic) * (int(accum) + 1)
    t_iter = float(m.measured_step_time(str(k), atomic, accum))
    edges = np.concatenate([[0.0], m.epoch_progress])
    t = start + cluster.restart_penalty_s
    for e in range(m.max_epochs):
        sqr, var = m.grad_stats(total, e)
        eff = (m.init_batch_size * var / sqr + m.init_batch_size) / (m.init_batch_size * var / sqr + total)
        rate = total / m.init_batch_size * eff / t_iter
        t += (edges[e + 1] - edges[e]) / rate
    return t, m.max_epochs


def test_single_job_alone_finishes_at_the_hand_computed_time():
    cl = Cluster(nodes=1)
    res = simulate(workload([("ncf", 10.0, 1, 32768)]), TiresiasPolicy(), cluster=cl)
    job = res.jobs[0]
    assert res.n_unfinished == 0 and job.start_s == 60.0  # first decision after submission
    want, n_epochs = expected_completion("ncf", 1, 32768, 60.0, cl)
    assert abs(job.completion_s - want) <= 0.5 * n_epochs + 1e-9, (job.completion_s, want)
    assert job.jct_s == job.completion_s - 10.0 and res.avg_jct_s == job.jct_s
    # attained service: 1 GPU held from the start to the completion, penalty included
    assert job.gpu_s == pytest.approx(job.completion_s - job.start_s)
    assert job.restarts == 0 and job.num_gpus == ((60.0, 1),)


def test_restart_penalty_every_interval_means_no_progress():
    class Flip:
        name, adaptive = "flip", False

        def allocate(self, jobs, cluster, now, key):
            out = np.zeros((len(jobs.ids), cluster.nodes), np.int64)
            out[:, int(now // cluster.interval_s) % 2] = 1  # move to the other node each time
            return out

    cl = Cluster(nodes=2, interval_s=60.0, restart_penalty_s=60.0)
    res = simulate(workload([("ncf", 0.0, 1, 32768)]), Flip(), cluster=cl, max_time_s=600)
    job = res.jobs[0]
    assert res.n_unfinished == 1 and job.completion_s is None and job.jct_s is None
    assert job.restarts == 9  # decisions at 60 ... 600 s: allocated at 60 s, moved at each later one
    assert job.gpu_s == pytest.approx(540.0)  # held from 60 s to 600 s, all of it restart penalty


def test_restart_penalty_delays_completion_by_its_length():
    rows = [("ncf", 0.0, 1, 32768)]
    a = simulate(workload(rows), TiresiasPolicy(), cluster=Cluster(nodes=1, restart_penalty_s=0.0))
    b = simulate(workload(rows), TiresiasPolicy(), cluster=Cluster(nodes=1, restart_penalty_s=30.0))
    assert b.jobs[0].completion_s - a.jobs[0].completion_s == pytest.approx(30.0, abs=10 * 0.5)


def test_interference_slows_only_distributed_jobs_sharing_a_node():
    class Split:
        name, adaptive = "split", False

        def __init__(self, rows):
            self.rows = np.array(rows)

        def allocate(self, jobs, cluster, now, key):
            return self.rows[jobs.ids]

    rows = [("bert", 0.0, 4, 96), ("bert", 0.0, 4, 96)]
    share = [[2, 2, 0], [0, 2, 2]]  # both distributed, sharing node 1
    apart = [[2, 2, 0, 0], [0, 0, 2, 2]]
    kw = dict(max_time_s=1200)
    s0 = simulate(workload(rows), Split(share), cluster=Cluster(nodes=3), **kw)
    s5 = simulate(workload(rows), Split(share), cluster=Cluster(nodes=3, interference=0.5), **kw)
    a5 = simulate(workload(rows), Split(apart), cluster=Cluster(nodes=4, interference=0.5), **kw)
    a0 = simulate(workload(rows), Split(apart), cluster=Cluster(nodes=4), **kw)
    assert s0.n_unfinished == 2  # still running at 1200 s: compare progress via a second run below

    class Progress(Split):
        def allocate(self, jobs, cluster, now, key):
            self.last = jobs.progress.copy()
            return super().allocate(jobs, cluster, now, key)

    def progress(rows_alloc, cl):
        p = Progress(rows_alloc)
        simulate(workload(rows), p, cluster=cl, max_time_s=1200)
        return p.last

    p0 = progress(share, Cluster(nodes=3))
    p5 = progress(share, Cluster(nodes=3, interference=0.5))
    q5 = progress(apart, Cluster(nodes=4, interference=0.5))
    # progress over the same epochs: half the rate while sharing (epoch rounding aside)
    np.testing.assert_allclose(p5, 0.5 * p0, rtol=0.02)
    np.testing.assert_allclose(q5, p0, rtol=1e-12)
    assert a5.jobs[0].gpu_s == a0.jobs[0].gpu_s == s5.jobs[0].gpu_s


def test_adaptive_jobs_choose_the_goodput_optimal_batch_size():
    pol = Fixed(gpus=4, adaptive=True)
    res = simulate(workload([("cifar10", 0.0, 1, 256)]), pol, cluster=Cluster(nodes=1), max_time_s=300)
    assert res.n_unfinished == 1
    # first allocation: the default batch (not yet profiled), later the Eq 3.10 optimum
    (_, v1), (_, v2) = pol.views[0], pol.views[1]
    assert not v1.profiled[0] and v1.batch_size[0] == 0
    m = APPS["cifar10"]
    assert v2.profiled[0]
    cfg = m.optimize(1, 4, float(v2.phi[0]))
    assert v2.batch_size[0] == min(int(cfg.local_bsz), m.max_batch_size // (4 * (int(cfg.accum_steps) + 1))) * 4 * (
        int(cfg.accum_steps) + 1)
    assert v2.batch_size[0] != m.init_batch_size  # it adapted
    assert v2.max_gpus_seen[0] == 4 and v2.adaptive[0]


def test_ncf_is_not_adapted_under_an_adaptive_policy():
    pol = Fixed(gpus=1, adaptive=True)
    simulate(workload([("ncf", 0.0, 1, 1024)]), pol, cluster=Cluster(nodes=1), max_time_s=180)
    v = pol.views[-1][1]
    assert not v.adaptive[0] and v.user_batch_size[0] == 32768


def test_oracle_remaining_iterations_reads_the_validation_curve():
    m = APPS["cifar10"]
    a = APPS.names.index("cifar10")
    b = int(m.batch_sizes[1])
    got = oracle_remaining_iterations(APPS, [a, a, a], b, [0, 5, m.max_epochs - 1])
    want = [m.iteration[1, -1] - m.iteration[1, 0], m.iteration[1, -1] - m.iteration[1, 5], 1.0]
    np.testing.assert_allclose(got, want)
    mid = (m.batch_sizes[0] + m.batch_sizes[1]) / 2
    half = oracle_remaining_iterations(APPS, [a], mid, [3])[0]
    ends = oracle_remaining_iterations(APPS, [a, a], m.batch_sizes[:2], [3, 3])
    assert half == pytest.approx(ends.mean())


ROWS = [("ncf", 0.0, 1, 32768), ("bert", 30.0, 2, 96), ("ncf", 100.0, 1, 32768), ("cifar10", 150.0, 2, 256),
        ("ncf", 200.0, 1, 32768), ("yolov3", 250.0, 2, 64)]


def same_run(a: SimResult, b: SimResult) -> bool:
    """Two simulations made the same decisions and reached the same records."""
    return ([j.to_json() for j in a.jobs] == [j.to_json() for j in b.jobs]
            and np.array_equal(a.timeline["gpus"], b.timeline["gpus"]))


@pytest.mark.parametrize("key_a,key_b", [(3, 4), (jax.random.key(3), jax.random.key(4)),
                                         (jax.random.PRNGKey(7), jax.random.fold_in(jax.random.key(7), 1))])
def test_deterministic_per_key_and_key_matters(key_a, key_b):
    cl = Cluster(nodes=2)
    kw = dict(cluster=cl, max_time_s=1800)
    a = simulate(workload(ROWS), RandomPolicy(), key=key_a, **kw)
    b = simulate(workload(ROWS), RandomPolicy(), key=key_a, **kw)
    c = simulate(workload(ROWS), RandomPolicy(), key=key_b, **kw)
    assert same_run(a, b), "same key, different run"
    assert not same_run(a, c), "the key does not reach the policy"
    assert_within_cluster(a.timeline, cl)
    assert a.key == b.key != c.key and a.to_json()["key"] == a.key


def test_same_run_catches_a_planted_difference():
    cl = Cluster(nodes=2)
    a = simulate(workload(ROWS), RandomPolicy(), key=3, cluster=cl, max_time_s=1800)
    b = simulate(workload(ROWS), RandomPolicy(), key=3, cluster=cl, max_time_s=1800)
    b.timeline["gpus"][-1, 0] += 1
    assert not same_run(a, b)


def test_the_policy_gets_one_key_per_decision_from_the_int_seeds_generator():
    """The ``k``-th decision's key is ``jax.random.key(n_k)``, ``n_k`` the ``k``-th
    ``integers(0, 2**31 - 1)`` draw of ``numpy.random.default_rng(seed)`` (an int key) or of
    the generator of the key's data (a JAX key): the draw PolluxPolicy made itself when the
    simulator handed policies that generator, so results per int seed are unchanged."""
    class Keys(RandomPolicy):
        def __init__(self):
            self.keys = []

        def allocate(self, jobs, cluster, now, key):
            self.keys.append(np.asarray(jax.random.key_data(key)).tolist())
            return super().allocate(jobs, cluster, now, key)

    for key, rng in [(5, np.random.default_rng(5)),
                     (jax.random.key(5), np.random.default_rng([0, 5])),
                     (jax.random.PRNGKey(5), np.random.default_rng([0, 5]))]:
        pol = Keys()
        simulate(workload(ROWS), pol, key=key, cluster=Cluster(nodes=2), max_time_s=900)
        want = [np.asarray(jax.random.key_data(jax.random.key(int(rng.integers(0, 2**31 - 1))))).tolist()
                for _ in pol.keys]
        assert len(pol.keys) > 5 and pol.keys == want


def test_key_rng_is_validate_as_rng():
    draws = key_rng(9).integers(0, 1 << 30, 4).tolist()
    assert draws == np.random.default_rng(9).integers(0, 1 << 30, 4).tolist()
    k = jax.random.key(9)
    want = np.random.default_rng([0, 9]).random()
    assert key_rng(k).random() == key_rng(jax.random.key_data(k)).random() == want
    with pytest.raises(ValueError, match="key"):
        key_rng(-1)
    with pytest.raises((TypeError, ValueError), match="key"):
        key_rng(jax.random.split(k, 2))
    with pytest.raises(TypeError, match="key"):
        key_rng(1.5)


@settings(max_examples=5, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), nodes=st.integers(1, 3), gpn=st.integers(1, 4))
def test_allocations_never_exceed_the_cluster(seed, nodes, gpn):
    cl = Cluster(nodes=nodes, gpus_per_node=gpn)
    res = simulate(workload(ROWS[:4]), RandomPolicy(), key=seed, cluster=cl, max_time_s=600)
    assert_within_cluster(res.timeline, cl)
    assert res.timeline["gpus"].shape == (len(res.timeline["times"]), 4)


def test_within_cluster_check_catches_a_planted_violation():
    cl = Cluster(nodes=1)
    with pytest.raises(AssertionError, match="allocation exceeds the cluster: 5 > 4"):
        assert_within_cluster({"used_gpus": np.array([3, 5])}, cl)


def test_simulator_rejects_an_over_allocating_policy():
    class Greedy:
        name, adaptive = "greedy", False

        def allocate(self, jobs, cluster, now, key):
            return np.full((len(jobs.ids), cluster.nodes), cluster.gpus_per_node + 1)

    with pytest.raises(ValueError, match="policy 'greedy' allocated 5 GPUs on node 0, which has 4"):
        simulate(workload(ROWS[:1]), Greedy(), cluster=Cluster(nodes=1))

    class Shape:
        name, adaptive = "shape", False

        def allocate(self, jobs, cluster, now, key):
            return np.zeros((len(jobs.ids), cluster.nodes + 1), np.int64)

    with pytest.raises(ValueError, match=r"expected \(1, 1\)"):
        simulate(workload(ROWS[:1]), Shape(), cluster=Cluster(nodes=1))


def test_bad_arguments_name_themselves():
    with pytest.raises(TypeError, match="policy must implement the Policy protocol"):
        simulate(workload(ROWS[:1]), object())
    with pytest.raises(ValueError, match="gpus_per_node"):
        Cluster(gpus_per_node=8)
    with pytest.raises(ValueError, match="interference"):
        Cluster(interference=1.0)
    with pytest.raises(ValueError, match="interval_s"):
        Cluster(interval_s=0.0)
    with pytest.raises(ValueError, match="key"):
        simulate(workload(ROWS[:1]), TiresiasPolicy(), key=-1)
    with pytest.raises(TypeError, match="key"):
        simulate(workload(ROWS[:1]), TiresiasPolicy(), key="0")


def test_result_records_and_json():
    res = simulate(workload(ROWS[:3]), TiresiasPolicy(), cluster=Cluster(nodes=1))
    assert isinstance(res, SimResult) and isinstance(TiresiasPolicy(), Policy)
    assert res.n_unfinished == 0
    jct = res.jcts
    assert res.avg_jct_s == pytest.approx(jct.mean()) and res.p99_jct_s == pytest.approx(np.percentile(jct, 99))
    assert res.makespan_s == max(j.completion_s for j in res.jobs)
    d = res.to_json(timeline=True)
    assert set(d["completion_s"]) == {j.name for j in res.jobs}
    assert len(d["timeline"]["times"]) == len(res.timeline["times"])
    assert placement_of([0, 2, 0, 1]) == "12"
    assert isinstance(JobsView._fields, tuple) and "remaining_iters_oracle" in JobsView._fields
