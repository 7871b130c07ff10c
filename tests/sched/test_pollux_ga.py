"""PolluxSched's genetic search (thesis Sec 3.4.2, App. A.2): feasibility, caps, optimality for a
single job, the power-mean fitness (Eq 3.11) against closed forms, determinism per seed."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.sched import load_apps
from scarjax.sched import ga as P
from scarjax.sched.simulator import Cluster, JobsView

SMALL = P.GAConfig(pop_size=16, generations=30)  # one compilation shared by the tests (N = 4)


@pytest.fixture(scope="module")
def apps():
    return load_apps()


def _jobs(apps, J, N, *, seed=0, seen=None, app_names=None, age=3600.0):
    rng = np.random.default_rng(seed)
    a = (rng.integers(0, len(apps), J) if app_names is None
         else np.array([apps.names.index(n) for n in app_names]))
    seen = rng.choice([0, 1, 2, 4, 8], J) if seen is None else np.broadcast_to(np.asarray(seen), (J,))
    adaptive = np.array([apps.names[i] != "ncf" for i in a])
    m0 = apps.init_batch_size[a].astype(np.int64)
    return JobsView(
        ids=np.arange(J) + 100, app_ids=a, submit_time=rng.uniform(0, 100, J), age_s=np.full(J, age),
        attained_gpu_s=rng.uniform(0, 1e4, J), restarts=rng.integers(0, 3, J),
        progress=rng.uniform(0, 0.5, J) * apps.target_progress[a], target_progress=apps.target_progress[a],
        batch_size=m0, user_batch_size=np.where(adaptive, m0, 32768), user_gpus=np.ones(J, np.int64),
        max_gpus_seen=seen, alloc=np.zeros((J, N), np.int64), remaining_iters_oracle=np.ones(J),
        adaptive=adaptive, apps=apps, phi=np.full(J, np.nan), profiled=seen > 0)


# -- Eq 3.11: the power mean --------------------------------------------------------------------


@pytest.mark.parametrize("p,closed", [
    (1.0, lambda x: x.mean()),
    (-1.0, lambda x: len(x) / np.sum(1.0 / x)),
    (0.0, lambda x: np.exp(np.log(x).mean())),
    (-math.inf, lambda x: x.min()),
    (2.0, lambda x: np.sqrt(np.mean(x ** 2))),
])
def test_power_mean_closed_forms(p, closed):
    x = np.array([0.5, 1.0, 2.0, 4.0, 3.0])
    assert float(P.power_mean(x, p)) == pytest.approx(closed(x), rel=1e-5)
    # masked entries are left out of the mean
    xm = np.concatenate([x, [100.0, 1e-6]])
    w = np.arange(7) < 5
    assert float(P.power_mean(xm, p, where=w)) == pytest.approx(closed(x), rel=1e-5)


def test_power_mean_planted_violation_caught():
    x = np.array([0.5, 1.0, 2.0])
    with pytest.raises(AssertionError, match="comparison failed"):  # the arithmetic mean is not the harmonic one
        assert float(P.power_mean(x, -1.0)) == pytest.approx(x.mean(), rel=1e-5)
    with pytest.raises(ValueError, match="p must be"):
        P.power_mean(x, math.nan)


def test_fitness_is_eq_3_11_with_realloc_factor():
    # two jobs, two nodes of 4 GPUs; speedup table s(n, r) = r * (1 + n) / 2
    tab = np.zeros((2, 3, 9))
    for n in range(1, 3):
        for r in range(n, 9):
            tab[:, n, r] = r * (1 + n) / 2
    base = np.array([[1, 0], [0, 0]])
    factor = P.realloc_factor([100.0, 60.0], [1, 0], 30.0)
    assert factor == pytest.approx([70 / 130, 60 / 90])
    prob = P.build_problem(tab, base, [8, 8], [4, 4], factor)
    a = np.zeros((prob.base.shape[0], 2), np.int32)
    a[0] = [1, 0]   # unchanged: speedup 1 * 2 / 2 = 1
    a[1] = [2, 1]   # moved: speedup 3 * 3 / 2 = 4.5, times 60/90
    s = np.array([1.0, 4.5 * 60 / 90])
    got = float(P.fitness(jnp.asarray(a)[None], prob, -1.0, eps=0.0)[0])
    assert got == pytest.approx(2 / np.sum(1 / s), rel=1e-5)
    got1 = float(P.fitness(jnp.asarray(a)[None], prob, 1.0, eps=0.0)[0])
    assert got1 == pytest.approx(s.mean(), rel=1e-5)


# -- repair always yields a feasible allocation -------------------------------------------------


_REPAIR = {avoid: jax.jit(lambda k, x, prob, avoid=avoid: P.repair(k, x, prob, interference_avoidance=avoid))
           for avoid in (False, True)}


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 7), st.integers(1, 5), st.integers(0, 2**31 - 1), st.booleans())
def test_repair_always_feasible(J, N, seed, avoid):
    rng = np.random.default_rng(seed)
    capacity = np.zeros(5, np.int64)
    capacity[:N] = rng.integers(0, 5, N)
    cap = rng.integers(0, 12, J)
    max_nodes = int(rng.integers(1, N + 1))
    raw = rng.integers(-2, 9, (J, 5))
    prob = P.build_problem(np.ones((J, 6, 13)), np.zeros((J, 5), np.int64), cap, capacity, np.ones(J),
                           max_job_nodes=max_nodes, pad_to=8)
    x = np.zeros(prob.base.shape, np.int32)
    x[:J] = raw
    out = np.asarray(_REPAIR[avoid](jax.random.PRNGKey(seed % 1000), jnp.asarray(x), prob))
    P.assert_feasible(out, capacity=capacity, cap=np.asarray(prob.cap), max_job_nodes=max_nodes,
                      interference_avoidance=avoid)
    assert np.all(out <= np.maximum(x, 0))  # repair only removes GPUs
    # a feasible matrix is left as it is
    again = np.asarray(_REPAIR[avoid](jax.random.PRNGKey(seed % 997), jnp.asarray(out), prob))
    np.testing.assert_array_equal(again, out)


def test_assert_feasible_catches_planted_violations():
    ok = np.array([[2, 0], [0, 4]])
    P.assert_feasible(ok, capacity=4, cap=[2, 4], max_job_nodes=1, interference_avoidance=True)
    with pytest.raises(AssertionError, match="node 0 over capacity"):
        P.assert_feasible(np.array([[3, 0], [2, 0]]), capacity=4)
    with pytest.raises(AssertionError, match="job 1 over its cap"):
        P.assert_feasible(ok, capacity=4, cap=[2, 3])
    with pytest.raises(AssertionError, match="spans 2 nodes"):
        P.assert_feasible(np.array([[1, 1]]), capacity=4, max_job_nodes=1)
    with pytest.raises(AssertionError, match="distributed jobs"):
        P.assert_feasible(np.array([[1, 1], [1, 1]]), capacity=4, interference_avoidance=True)
    with pytest.raises(AssertionError, match="negative"):
        P.assert_feasible(np.array([[-1, 1]]), capacity=4)


# -- decisions within the cluster and the caps; determinism -------------------------------------


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_policy_allocations_within_cluster_and_caps(apps):
    cluster = Cluster(nodes=4, gpus_per_node=4)
    jobs = _jobs(apps, 10, 4, seed=1)
    pol = P.PolluxPolicy(SMALL)
    for k in jax.random.split(jax.random.key(0), 3):
        a = pol.allocate(jobs, cluster, 0.0, k)
        caps = P.job_caps(apps, jobs.app_ids, jobs.max_gpus_seen, total_gpus=16)
        assert a.shape == (10, 4)
        P.assert_feasible(a, capacity=4, cap=caps, max_job_nodes=16, interference_avoidance=True)
        # the cap: at most max(2 x most GPUs seen, 1); NCF: 1
        assert np.all(a.sum(1) <= np.maximum(2 * jobs.max_gpus_seen, 1))
        assert np.all(a.sum(1)[np.asarray(apps.names)[jobs.app_ids] == "ncf"] <= 1)
        assert pol.last.fitness >= pol.last.base_fitness - 1e-6  # keeping the allocation is a candidate
        jobs = JobsView(**{**jobs._asdict(), "alloc": a, "max_gpus_seen": np.maximum(jobs.max_gpus_seen,
                                                                                      a.sum(1))})
    with pytest.raises(AssertionError, match="over its cap"):  # planted: caps halved
        P.assert_feasible(a, capacity=4, cap=a.sum(1) // 2)


def test_determinism_per_key(apps):
    cluster = Cluster(nodes=4, gpus_per_node=4)
    jobs = _jobs(apps, 10, 4, seed=2)
    for key in (5, jax.random.key(5), jax.random.PRNGKey(5)):  # an int seed is the key jax.random.key(seed)
        outs = [P.PolluxPolicy(SMALL).allocate(jobs, cluster, 0.0, key) for _ in range(2)]
        np.testing.assert_array_equal(outs[0], outs[1])
        if isinstance(key, int):
            first = outs[0]
        np.testing.assert_array_equal(outs[0], first)
    with pytest.raises(TypeError, match="key"):
        P.PolluxPolicy(SMALL).allocate(jobs, cluster, 0.0, np.random.default_rng(5))
    s1, s2 = P.PolluxSched(SMALL), P.PolluxSched(SMALL)
    d1, d2 = s1.decide(jobs, cluster, 7), s2.decide(jobs, cluster, 7)
    np.testing.assert_array_equal(s1._prev_pop, s2._prev_pop)  # the whole final population
    assert d1.fitness == d2.fitness


# -- a single job alone gets its goodput-optimal allocation -------------------------------------


def _best_by_brute_force(one, cap, nodes, gpn, max_nodes=16):
    best, arg = -1.0, None
    for n in range(1, min(nodes, max_nodes) + 1):
        for r in range(n, min(cap, n * gpn) + 1):
            if one[n, r] > best:
                best, arg = one[n, r], (n, r)
    return best, arg


@pytest.mark.parametrize("app,seen", [("imagenet", 8), ("cifar10", 4), ("bert", 2)])
def test_single_job_gets_goodput_optimal_allocation(apps, app, seen):
    cluster = Cluster(nodes=4, gpus_per_node=4)
    jobs = _jobs(apps, 1, 4, seen=seen, app_names=[app])
    d = P.PolluxSched(SMALL).decide(jobs, cluster, 0)
    one = d.speedup_one_gpu[0]
    best, arg = _best_by_brute_force(one, int(d.caps[0]), 4, 4)
    got = d.alloc[0]
    n, r = int((got > 0).sum()), int(got.sum())
    assert one[n, r] == pytest.approx(best, rel=1e-6), (n, r, arg)
    # the table's sampled optimum agrees with AppModel.speedup's exact one (Eq 3.10) within 1%
    phi = apps.pgns(jobs.app_ids, jobs.batch_size, jobs.progress)[0]
    exact = apps[app].speedup(np.array([n, 1]), np.array([r, 2]), phi)
    assert one[n, r] == pytest.approx(exact[0], rel=0.01)
    assert one[1, 2] == pytest.approx(exact[1], rel=0.01)
    # planted: a worse allocation is caught by the same comparison
    worse = min(((nn, rr) for nn in range(1, 5) for rr in range(nn, 4 * nn + 1) if rr <= d.caps[0]),
                key=lambda t: one[t])
    with pytest.raises(AssertionError):
        assert one[worse] == pytest.approx(best, rel=1e-6)


def test_speedup_tables_prior_and_errors(apps):
    tab = P.speedup_tables(apps, [0, 1], [np.inf, 10.0], max_nodes=2, max_replicas=4, prior=[True, False])
    np.testing.assert_allclose(tab[0, 1, 1:], [1, 2, 3, 4])  # never ran: speedup = replicas
    assert tab[1, 1, 1] == pytest.approx(1.0)
    assert tab[1, 2, 1] == 0.0 and tab[1, 0, 3] == 0.0  # impossible (nodes, replicas)
    with pytest.raises(ValueError, match="phi"):
        P.speedup_tables(apps, [0], [-1.0], max_nodes=1, max_replicas=1)
    with pytest.raises(ValueError, match="pop_size"):
        P.GAConfig(pop_size=15)
    with pytest.raises(ValueError, match="speedup_base"):
        P.GAConfig(speedup_base="x")
    with pytest.raises(ValueError, match="jobs.alloc"):
        jobs = _jobs(apps, 2, 3)
        P.PolluxSched(SMALL).decide(jobs, Cluster(nodes=4), 0)


def test_warm_start_follows_jobs_by_id(apps):
    cluster = Cluster(nodes=4, gpus_per_node=4)
    sched = P.PolluxSched(SMALL)
    jobs = _jobs(apps, 6, 4, seed=3)
    sched.decide(jobs, cluster, 0)
    prev = sched._prev_pop.copy()
    prev_ids = sched._prev_ids.copy()
    keep = np.array([0, 2, 3, 5])
    fewer = JobsView(**{k: (v[keep] if isinstance(v, np.ndarray) and v.shape[:1] == (6,) else v)
                        for k, v in jobs._asdict().items()})
    order = np.lexsort((fewer.submit_time, fewer.attained_gpu_s))
    init = sched._warm_start(np.asarray(fewer.ids)[order], prev.shape[1], 4)
    for row, jid in enumerate(np.asarray(fewer.ids)[order]):
        np.testing.assert_array_equal(init[:, row], prev[:, list(prev_ids).index(jid)])
    assert np.all(init[:, 4:] == 0)
