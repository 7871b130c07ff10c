"""PolluxSched benchmark: one scheduling decision, our jitted GA vs pymoo NSGA-II; prints JSON.

Two problems (the same arrays for both solvers): ``160_jobs_64_gpus``, the one the GA was
tuned on, and ``80_jobs_32_gpus`` (another random draw on 8 x 4 GPUs, not tuned on). Each: jobs
of the six Pollux applications (random application, progress, most GPUs seen in
{0, 1, 2, 4, 8, 16}, age and restarts) on the cluster, their speedup tables (Eq 3.12,
:func:`scarjax.sched.ga.speedup_tables`), the re-allocation factors and caps, and the
current allocation found by a first decision (so the decision timed is a warm interval, as in a
simulation). Both solvers start from the same
initial population (the current allocation, the greedy seed and mutated copies) and run
population 100 for 100 generations (the artifact's settings).

* ``ours``: :func:`scarjax.sched.ga.solve` (a host loop over one jitted generation, operators
  on the whole population); timed after one compiling call (``compile_s`` reported apart).
* ``pymoo_nsga2``: the artifact's ``simulator/pollux.py`` ``Problem`` (its ``_mutation``,
  ``_crossover``, ``_repair`` and ``_evaluate``: two objectives, -fitness and -cluster
  utility) ported to pymoo >= 0.6's API and given the same speedup table (a NumPy gather
  instead of the artifact's per-job Python calls, which only helps it); its answer is the
  member of best fitness, as the artifact's simulator picks. pymoo is not a dependency of
  scarjax: ``pip install pymoo`` into the venv to run that row; without it the row is skipped
  with a message.

Reported per problem, the two solvers run in alternation (ours, pymoo, ours, ...): min and
median wall seconds over repeats (different seeds), the fitness (Eq 3.11,
p = -1) each reached (median and worst over the repeats), the speed ratio (pymoo / ours,
min over min and median of same-seed ratios) and whether ours reached equal or better
fitness. Also the fitness of keeping the current allocation. ``simulation``: simulated
cluster-hours per wall-clock second of a whole workload (``scarjax.sched.simulate`` with
``PolluxPolicy``). ``--quick`` (under a minute): the 160-job decision once after its compile,
no simulation unless ``--sim-max-hours`` is given (then that many simulated hours), on JAX's CPU
device (``jax_device`` in the JSON says which device ran).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _timing import emit, loadavg  # noqa: E402


def make_problem(J=160, nodes=16, gpn=4, seed=0):
    from scarjax.sched import load_apps
    from scarjax.sched import ga as P
    from scarjax.sched.simulator import Cluster, JobsView

    apps = load_apps()
    rng = np.random.default_rng(seed)
    a = rng.integers(0, len(apps), J)
    seen = rng.choice([0, 1, 2, 4, 8, 16], J)
    adaptive = np.array([apps.names[i] != "ncf" for i in a])
    m0 = apps.init_batch_size[a].astype(np.int64)
    jobs = JobsView(
        ids=np.arange(J), app_ids=a, submit_time=rng.uniform(0, 3600, J), age_s=rng.uniform(60, 20000, J),
        attained_gpu_s=rng.uniform(0, 1e5, J), restarts=rng.integers(0, 5, J),
        progress=rng.uniform(0, 0.9, J) * apps.target_progress[a], target_progress=apps.target_progress[a],
        batch_size=m0, user_batch_size=np.where(adaptive, m0, 32768), user_gpus=np.ones(J, np.int64),
        max_gpus_seen=seen, alloc=np.zeros((J, nodes), np.int64), remaining_iters_oracle=np.ones(J),
        adaptive=adaptive, apps=apps, phi=np.full(J, np.nan), profiled=seen > 0)
    cluster = Cluster(nodes=nodes, gpus_per_node=gpn)
    cfg = P.GAConfig()
    first = P.PolluxSched(cfg).decide(jobs, cluster, 123).alloc  # the current allocation
    jobs = JobsView(**{**jobs._asdict(), "alloc": first})
    one, fit_tab, caps, factor = P._job_inputs(jobs, nodes * gpn, nodes, cfg)
    order = np.lexsort((jobs.submit_time, jobs.attained_gpu_s))
    prob = P.build_problem(fit_tab[order], first[order], caps[order], np.full(nodes, gpn), factor[order])
    return prob, one[order], cfg


def initial_population(prob, cfg, seed):
    """The initial population our search starts from (base, greedy seed, mutated copies), repaired."""
    import jax
    import jax.numpy as jnp

    from scarjax.sched import ga as P

    greedy = jnp.asarray(P.greedy_seed(prob), jnp.int32)
    return np.asarray(_population_fn(cfg.pop_size)(jax.random.PRNGKey(seed), prob, greedy))


@functools.lru_cache(maxsize=None)
def _population_fn(pop_size: int):
    """``(key, prob, greedy) -> int32[pop_size, J, N]``: ``pop_size`` mutated copies of
    ``prob.base`` (member 0 the base itself, member 1 ``greedy``), repaired; one jitted program
    (run op by op, the vmapped operators cost seconds of small compilations)."""
    import jax
    import jax.numpy as jnp

    from scarjax.sched import ga as P

    @jax.jit
    def population(key, prob, greedy):
        J, N = prob.base.shape
        k1, k2 = jax.random.split(key)
        init = jax.vmap(lambda k, s: P.mutate(k, s, prob))(jax.random.split(k1, pop_size),
                                                          jnp.broadcast_to(prob.base, (pop_size, J, N)))
        init = init.at[0].set(prob.base).at[1].set(greedy)
        return jax.vmap(lambda k, s: P.repair(k, s, prob))(jax.random.split(k2, pop_size), init)

    return population


def pymoo_solver(prob, one, cfg):
    """The artifact's Problem/operators on pymoo >= 0.6; returns ``solve(init, seed) -> (alloc, fitness)``."""
    from pymoo.algorithms.moo.nsga2 import NSGA2
    from pymoo.core.crossover import Crossover
    from pymoo.core.mutation import Mutation
    from pymoo.core.problem import Problem
    from pymoo.core.repair import Repair
    from pymoo.optimize import minimize

    tab = np.asarray(prob.speedup, np.float64)
    base = np.asarray(prob.base).astype(np.int64)
    cap = np.asarray(prob.cap).astype(np.int64)
    capacity = np.asarray(prob.capacity).astype(np.int64)
    factor = np.asarray(prob.factor, np.float64)
    valid = np.asarray(prob.valid)
    Jr = int(valid.sum())
    J, N = base.shape
    max_nodes = int(prob.max_nodes)
    p = cfg.p
    one_p = np.zeros_like(tab)
    one_p[:one.shape[0], :, :one.shape[2]] = one[:, :, :tab.shape[2]]

    def speedups(states, table):
        n = np.minimum((states > 0).sum(-1), table.shape[1] - 1)
        r = np.minimum(states.sum(-1), table.shape[2] - 1)
        return table[np.arange(J), n, r]

    class Prob(Problem):
        def __init__(self):
            super().__init__(n_var=J * N, n_obj=2, xl=0, xu=int(capacity.max()), vtype=int)

        def _evaluate(self, x, out, *args, **kwargs):
            s = x.reshape(x.shape[0], J, N).astype(np.int64)
            sp = speedups(s, tab)
            sp = sp * np.where(np.any(s != base, axis=2), factor, 1.0)
            sp = sp[:, valid]
            mean = (np.sum((sp + 1e-3) ** p, axis=1) / Jr) ** (1.0 / p)
            util = speedups(s, one_p)[:, valid].sum(1) / capacity.sum()
            out["F"] = np.column_stack([-mean, -util])

    class Cross(Crossover):
        def __init__(self):
            super().__init__(2, 2)

        def _do(self, problem, x, **kwargs):
            x = x.reshape(*x.shape[:2], J, N)
            _, n_mat = x.shape[:2]
            pts = np.random.randint(J, size=(n_mat, 1))
            m = (np.arange(J) < pts)[:, :, None]
            o = x.copy()
            o[0] = np.where(m, x[1], x[0])
            o[1] = np.where(m, x[0], x[1])
            return o.reshape(2, n_mat, -1)

    class Mut(Mutation):
        def _do(self, problem, x, **kwargs):
            s = x.reshape(x.shape[0], J, N).astype(np.int64)
            mask = np.random.random(s.shape[:2]) < 0.1
            s = np.where(mask[:, :, None], base, s)
            pr = np.where(np.random.random(s.shape[:2]) < 0.1, 0.1, 0.0)
            s[np.random.random(s.shape) < pr[:, :, None]] = 0
            free = capacity - s.sum(1)
            m1 = np.broadcast_to((free >= 1)[:, None, :], s.shape)
            p1 = m1 / np.maximum(Jr, 1)
            m2 = (s > 0) & m1
            p2 = m2 / np.maximum(m2.sum(1, keepdims=True), 1)
            hit = np.random.random(s.shape) < p1 + p2 - p1 * p2
            r = np.random.randint(np.minimum(s, capacity), capacity + 1)
            s[hit] = r[hit]
            return s.reshape(s.shape[0], -1)

    class Rep(Repair):
        def _do(self, problem, x, **kwargs):
            s = x.reshape(x.shape[0], J, N).astype(np.int64)
            dist = np.count_nonzero(s, axis=2) > 1
            mask = (s * dist[:, :, None] > 0).cumsum(axis=1) > 1
            s[mask] = 0
            sh = np.argsort(np.random.random(s.shape), axis=2)
            s = np.take_along_axis(s, sh, axis=2)
            s = np.minimum(np.cumsum(s, axis=2), cap[:, None])
            s = np.diff(s, axis=2, prepend=0)
            keep = np.diff(np.minimum(np.cumsum(s > 0, axis=2), max_nodes), axis=2, prepend=0)
            s[np.logical_not(keep)] = 0
            s = np.take_along_axis(s, np.argsort(sh, axis=2), axis=2)
            s = np.minimum(np.cumsum(s, axis=1), capacity)
            s = np.diff(s, axis=1, prepend=0)
            return s.reshape(s.shape[0], -1)

    problem = Prob()

    def solve(init, seed):
        np.random.seed(seed)
        alg = NSGA2(pop_size=cfg.pop_size, sampling=init.reshape(init.shape[0], -1).astype(np.int64),
                    crossover=Cross(), mutation=Mut(), repair=Rep())
        res = minimize(problem, alg, ("n_gen", cfg.generations), seed=seed, verbose=False)
        X = np.atleast_2d(res.pop.get("X"))
        F = np.atleast_2d(res.pop.get("F"))
        best = int(np.argmin(F[:, 0]))
        return X[best].reshape(J, N), float(-F[best, 0])

    return solve


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="under a minute: the 160-job decision once after its compile, no simulation "
                         "(unless --sim-max-hours is given)")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--workload", default="workload-1", help="workload simulated for cluster-hours per second")
    ap.add_argument("--sim-max-hours", type=float, default=None,
                    help="stop the simulation after this many simulated hours (default: the whole workload; "
                         "with --quick it turns the simulation on)")
    ap.add_argument("--no-sim", action="store_true", help="skip the whole-workload simulation")
    ap.add_argument("--dense-repair", action="store_true",
                    help="time the dense repair (GAConfig(sparse_repair=False): vmap of the per-matrix repair) instead of the default sparse one")
    ap.add_argument("--one-problem", action="store_true", help="only the 160-job decision")
    args = ap.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 5)
    problems = [("160_jobs_64_gpus", dict(J=160, nodes=16, gpn=4, seed=0)),
                ("80_jobs_32_gpus", dict(J=80, nodes=8, gpn=4, seed=7))][:1 if args.one_problem or args.quick else 2]
    if args.quick and args.sim_max_hours is None:
        args.no_sim = True
    # --quick runs its decisions on the CPU device (jax.default_device; a no-op on a CPU-only
    # machine): a decision is ~100 small programs (a host loop over 100 generations, each ~ms on a CPU),
    # and measured on a CPU the quick run's time is mostly compiling the search's two programs
    # (start and generation, ~17 s of ~31 s CPU); on a GPU (H200) the quick run did not
    # finish within 60 s. Pinned, a GPU machine's quick run is the CPU run (not measured on a
    # GPU since; the full mode still runs on the default device).
    device = jax.devices("cpu")[0] if args.quick else None
    out = {"repeats": repeats, "load_avg_1min_start": loadavg(), "problems": {},
           "jax_device": str(device if device is not None else jax.devices()[0])}
    with jax.default_device(device):
        for name, kw in problems:
            out["problems"][name] = decision_row(kw, repeats, sparse_repair=not args.dense_repair)
    rows = [r for r in out["problems"].values() if "speedup_pymoo_over_ours" in r]
    if rows:
        out["goal_10x_met"] = bool(all(r["speedup_pymoo_over_ours"]["ratio_median"] >= 10
                                       and r["ours_fitness_equal_or_better"] for r in rows))
    if not args.no_sim:
        out["simulation"] = simulate_row(args.workload, args.sim_max_hours)
    out["load_avg_1min_end"] = loadavg()
    emit("sched", out)


def _progress(msg: str) -> None:
    """A phase's time on stderr as it ends (a run cut off by a time limit still shows where
    its time went; the JSON on stdout comes at the end)."""
    print(f"[bench_sched] {msg}", file=sys.stderr, flush=True)


def decision_row(kw, repeats, sparse_repair=True):
    """One decision (problem ``make_problem(**kw)``): ours and pymoo's NSGA-II in alternation, the
    same initial population and seed per repeat."""
    import jax

    from scarjax.sched import ga as P

    t0 = time.perf_counter()
    prob, one, cfg = make_problem(**kw)
    cfg = replace(cfg, sparse_repair=sparse_repair)
    setup_s = time.perf_counter() - t0
    _progress(f"{kw}: problem set up in {setup_s:.1f} s")
    base_fit = float(P.fitness(prob.base[None], prob, cfg.p)[0])
    inits = [initial_population(prob, cfg, 1000 + r) for r in range(repeats)]
    t0 = time.perf_counter()
    jax.block_until_ready(P.solve(prob, 0, config=cfg, init=inits[0]).alloc)
    compile_s = time.perf_counter() - t0
    _progress(f"first decision (compiles) in {compile_s:.1f} s")
    try:
        import pymoo
        solve_ref = pymoo_solver(prob, one, cfg)
    except ImportError:
        pymoo = solve_ref = None
    feas = dict(capacity=np.asarray(prob.capacity), cap=np.asarray(prob.cap), max_job_nodes=cfg.max_job_nodes,
                interference_avoidance=True)
    ours_t, ours_f, ref_t, ref_f = [], [], [], []
    for r in range(repeats):  # alternating, so that machine noise hits both alike
        t0 = time.perf_counter()
        res = P.solve(prob, r, config=cfg, init=inits[r])
        ours_t.append(time.perf_counter() - t0)
        ours_f.append(res.fitness)
        _progress(f"repeat {r + 1}/{repeats}: ours {ours_t[-1]:.2f} s")
        P.assert_feasible(res.alloc, **feas)
        if solve_ref is not None:
            t0 = time.perf_counter()
            alloc, f = solve_ref(inits[r], r)
            ref_t.append(time.perf_counter() - t0)
            ref_f.append(f)
            P.assert_feasible(alloc, **feas)
    row = {
        "problem": {"jobs": int(np.asarray(prob.valid).sum()), "nodes": int(prob.base.shape[1]),
                    "gpus": int(np.asarray(prob.capacity).sum()), "make_problem": kw, "pop_size": cfg.pop_size,
                    "generations": cfg.generations, "p": cfg.p, "sparse_repair": sparse_repair, "setup_s": round(setup_s, 3),
                    "fitness_keep_current": base_fit},
        "ours": {"compile_s": round(compile_s, 3), "time_s_min": min(ours_t),
                 "time_s_median": statistics.median(ours_t), "fitness_median": statistics.median(ours_f),
                 "fitness_min": min(ours_f), "fitness": ours_f, "times_s": ours_t},
    }
    if solve_ref is None:
        row["pymoo_nsga2"] = {"skipped": "pymoo is not installed (pip install pymoo into the venv to run this row; "
                                         "it is not a scarjax dependency)"}
        return row
    row["pymoo_nsga2"] = {"version": pymoo.__version__, "time_s_min": min(ref_t),
                          "time_s_median": statistics.median(ref_t), "fitness_median": statistics.median(ref_f),
                          "fitness_min": min(ref_f), "fitness": ref_f, "times_s": ref_t}
    row["speedup_pymoo_over_ours"] = {
        "ratio_min": min(ref_t) / min(ours_t),
        "ratio_median": statistics.median(a / b for a, b in zip(ref_t, ours_t))}
    row["ours_fitness_equal_or_better"] = bool(statistics.median(ours_f) >= statistics.median(ref_f) * (1 - 1e-6))
    row["ours_fitness_equal_or_better_same_seed"] = int(sum(a >= b * (1 - 1e-6) for a, b in zip(ours_f, ref_f)))
    return row


def simulate_row(workload: str, max_hours):
    """Simulated cluster-hours per wall-clock second of ``scarjax.sched.simulate`` with
    :class:`~scarjax.sched.ga.PolluxPolicy` (default settings) on ``workload``."""
    from scarjax.sched.ga import PolluxPolicy
    from scarjax.sched.simulator import simulate

    t0 = time.perf_counter()
    res = simulate(workload, PolluxPolicy(), key=0, max_time_s=None if max_hours is None else max_hours * 3600.0,
                   record_timeline=False)
    wall = time.perf_counter() - t0
    done = [j.completion_s for j in res.jobs if j.completion_s is not None]
    sim_s = float(max(done, default=0.0)) if max_hours is None else max_hours * 3600.0
    return {"workload": workload, "simulated_hours": sim_s / 3600.0, "wall_s": wall,
            "cluster_hours_per_wall_s": sim_s / 3600.0 / wall, "decisions": int(sim_s // 60),
            "avg_jct_s": float(res.avg_jct_s), "unfinished": int(res.n_unfinished),
            "note": "wall time includes JIT compilation and every interval's speedup tables"}


if __name__ == "__main__":
    main()
