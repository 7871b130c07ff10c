"""Planning time of ``scarjax.cluster.planner``: the whole grid of candidate plans predicted by
one jitted, vmapped program vs a Python loop over the candidates calling the same scalar
formula (``planner.predict_one``: the jitted ``_predict_one`` on one candidate), side by side
in one run; and the end-to-end time of a plan as a user sees it.

Setup (outside the timings): the job profile (``JobProfile.from_job`` on the ``--job`` preset:
real training once), the market (``--market`` spec, default the embedded April 2015
us-east-1a c3.xlarge spot history, its first 14 days, five bids) and the candidate grid (every
worker count 1-64 x policies x bids x periods / fractions / priority rules: 7,665 candidates for
the default). Timed:

* ``cold``: the first ``plan()`` in the process (the compilation of the vmapped program
  included), and the setup times (``from_job_s``, ``market_s``) — what ``scarjax plan`` costs;
* ``vectorised``: ``predict`` on the whole grid (warm), ``--repeats`` rounds;
* ``loop``: a Python loop over every candidate calling ``predict_one`` (warm: the scalar
  program is compiled before timing), interleaved with the vectorised rounds.

``ratio_min`` = fastest loop / fastest vectorised time; ``ratio_median`` = median over rounds of
the per-round ratio. ``max_rel_diff``: the largest relative difference between the loop's and
the vectorised predictions (time, cost, their spreads, revocations, rework; feasible candidates).

Run: ``python benchmarks/bench_plan.py [--quick] [--job mlr] [--market SPEC] [--repeats N]``; prints
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default="mlr", choices=("mlr", "qp"))
    ap.add_argument("--market", default="aws:us-east-1a:c3.xlarge")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="2 rounds, the loop over a 250-candidate sample (under a minute)")
    args = ap.parse_args(argv)
    load0 = _timing.loadavg()
    t_import = time.perf_counter()
    from scarjax.cluster import planner as pl
    from scarjax.cluster.jobprofile import JobProfile

    t0 = time.perf_counter()
    job = pl.preset_job(args.job)
    prof = JobProfile.from_job(job, 0)
    from_job_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    market = pl.market_from_spec(args.market)
    market_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = pl.plan(prof, market, pl.Objective("cost"))
    cold_plan_s = time.perf_counter() - t0
    setup_s = time.perf_counter() - t_import  # import + profile + market + first plan
    cands = plan.candidates
    N = len(cands)
    idx = np.arange(N)
    if args.quick:
        idx = np.random.default_rng(0).choice(N, size=min(N, 250), replace=False)
    repeats = 2 if args.quick else max(1, args.repeats)
    tables = pl.prediction_tables(prof, market)
    pl.predict_one(prof, market, cands, 0, tables=tables)  # compile the scalar program

    def vectorised():
        return pl.predict(prof, market, cands)

    def loop():
        return [pl.predict_one(prof, market, cands, int(i), tables=tables) for i in idx]

    vec = vectorised()
    vt, lt = [], []
    lo = None
    for _ in range(repeats):
        t0 = time.perf_counter()
        vec = vectorised()
        jax.block_until_ready(vec.time_s)
        vt.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        lo = loop()
        lt.append((time.perf_counter() - t0) * N / idx.size)  # per whole grid
    # agreement
    fields = ("time_s", "time_std_s", "cost", "cost_std", "revocations", "rework")
    L = np.asarray([r[:6] for r in lo], np.float64)
    ok = np.asarray([r[7] for r in lo], bool) & np.isfinite(vec.time_s[idx])
    rel = 0.0
    for k, f in enumerate(fields):
        v = np.asarray(getattr(vec, f), np.float64)[idx][ok]
        w = L[ok, k]
        d = np.abs(v - w) / np.maximum(np.abs(v), 1e-12)
        d = np.where((np.abs(v) < 1e-9) & (np.abs(w) < 1e-9), 0.0, d)
        rel = max(rel, float(d.max()) if d.size else 0.0)
    ratios = [a / b for a, b in zip(lt, vt)]
    out = {
        "benchmark": "planner: vectorised (jit + vmap) vs Python loop over candidates",
        "job": args.job,
        "market": args.market,
        "n_candidates": int(N),
        "n_loop_sample": int(idx.size),
        "repeats": repeats,
        "cold": {"import_to_first_plan_s": round(setup_s, 3), "from_job_s": round(from_job_s, 3),
                 "market_s": round(market_s, 3), "first_plan_s": round(cold_plan_s, 3),
                 "plan_total_s": round(from_job_s + market_s + cold_plan_s, 3)},
        "vectorised_s": {"min": min(vt), "median": statistics.median(vt)},
        "loop_s_per_grid": {"min": min(lt), "median": statistics.median(lt)},
        "candidates_per_s": {"vectorised_max": N / min(vt), "loop_max": N / min(lt)},
        "ratio_min": min(lt) / min(vt),
        "ratio_median": statistics.median(ratios),
        "max_rel_diff": rel,
        "best": {k: plan.best[k] for k in ("policy", "workers", "bid_fraction", "cost", "time_s")},
        "platform": {"machine": platform.machine(), "python": platform.python_version(), "jax": jax.__version__,
                     "backend": jax.default_backend(), "cpus": os.cpu_count(), "loadavg_start": load0,
                     "loadavg_end": _timing.loadavg()},
    }
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
