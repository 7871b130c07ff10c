"""Many market draws as one call (:mod:`scarjax.cluster.draws`) against the per-draw loop, in
one run: ``--draws`` draws (start offsets uniform over the embedded AWS p3 node trace, one
market key each) of checkpoint-restart, SCAR and TierML on the trace, each side timed after a
warm-up (compilation: the vectorised side on all the draws, its programs being compiled per
number of draws; the loop on four) ``--repeats`` times alternately (min and median of each
side, the ratio of the medians and of the minima, the load average before and after each
policy), and the per-draw summaries (time and dollars to the target, steps, reached, end,
bill, revocations, rework / recovery / rollback counts) asserted equal (``==``, float64 bit
for bit; :func:`scarjax.cluster.draws.mismatches`).

The job (``--job mlr``, the default): multinomial logistic regression on a fixed synthetic set
(256 x 16, 4 classes, minibatches of 32), 8 workers, a 60 s checkpoint, a 30 s restore, 120 s
start-up, at most ``--steps`` iterations, the target the reliable run's loss at 3/4 of them plus
1e-3 (far from float32 rounding), on the embedded AWS p3 node trace. A small model on purpose:
the benchmark measures the engine (clocks, draws, dispatch), which is what the per-draw loop
repeats per draw. ``--job quadratic``: a second job and market, not the one the vectorised
path was tuned on: gradient descent on a 16-D strongly convex quadratic (thesis Fig 5.3's kind
of problem, :func:`scarjax.models.quadratic.problem`), the target the geometric mean of two
consecutive reliable losses at 3/4 of the steps, on a trace built from arrays
(:func:`scarjax.cluster.market.from_availability`: 0-10 machines at 5-minute ticks over 12 h,
a random walk with periods of none; AWS's 120 s warning, hourly billing).

Each side is timed in wall seconds and in CPU seconds of the process (``time.process_time``:
user + sys of all its threads, the measure that a shared, loaded machine disturbs least); the
ratios are given for both.

Run: ``python benchmarks/bench_draws.py [--quick] [--repeats N] [--job mlr|quadratic]``; prints
one JSON object (``--quick``: 40 draws, 60 steps, 3 repeats, about a minute of CPU).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import platform
import statistics
import sys
import time

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

from scarjax.cluster import clock as ck
from scarjax.cluster import draws as dr
from scarjax.cluster import market as mk
from scarjax.cluster.steptime import step_time_linear
from scarjax.cluster.trainer import Trainer
from scarjax.data import transient as td
from scarjax.models import mlr, quadratic

OPTIONS = {"checkpoint_restart": {}, "scar": {}, "tierml": {"reliable": 1, "transient": 7}}


def setup(steps: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 16)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] + x[:, 2] > 0.5) + (x[:, 3] > 1.0)
    alg = mlr.mlr(x, y, num_classes=4, lr=0.5, batch_size=32)
    curve = Trainer(alg, 0).train(steps)
    target = float(np.min(curve[: steps * 3 // 4])) + 1e-3
    job = ck.Job(alg, target, step_time_linear(40.0, 0.5), workers=8, checkpoint_s=60.0, restore_s=30.0,
                 max_steps=steps)
    trace = td.load_aws_p3_trace()
    market = mk.Market(mk.MachineType("p3.2xlarge", 3.06, spot=0.92), mk.replay(trace),
                       startup=mk.fixed_startup(120.0))
    return job, market, float(np.max(trace.time_s))


def setup_quadratic(steps: int):
    """The second job: a 16-D quadratic on an availability trace built from arrays."""
    rng = np.random.default_rng(16)
    q, _ = np.linalg.qr(rng.normal(size=(16, 16)))
    A = q @ np.diag(np.linspace(0.5, 2.0, 16)) @ q.T
    A = (A + A.T) / 2.0
    alg = quadratic.problem(A, rng.normal(size=16), 0.02, np.zeros(16))
    curve = Trainer(alg, 0).train(steps)
    k = max(1, steps * 3 // 4)
    target = float(np.sqrt(curve[k - 1] * curve[k]))  # between two consecutive losses (far from rounding)
    job = ck.Job(alg, target, step_time_linear(40.0, 0.5), workers=8, checkpoint_s=60.0, restore_s=30.0,
                 max_steps=steps)
    ticks = np.arange(0.0, 12 * 3600.0 + 1.0, 300.0)
    walk = np.clip(np.cumsum(rng.integers(-2, 3, ticks.size)) + 6, 0, 10)
    walk[(ticks > 4 * 3600.0) & (ticks < 4.5 * 3600.0)] = 0  # half an hour with nothing obtainable
    market = mk.Market(mk.MachineType("p3.2xlarge", 3.06, spot=0.92),
                       mk.from_availability(ticks, walk, provider="aws"), startup=mk.fixed_startup(120.0))
    return job, market, float(ticks[-1])


JOBS = {"mlr": setup, "quadratic": setup_quadratic}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--horizon-h", type=float, default=6.0)
    ap.add_argument("--policies", default="checkpoint_restart,scar,tierml")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each side (default 1; --quick: 3)")
    ap.add_argument("--quick", action="store_true", help="40 draws, 60 steps, 3 repeats")
    ap.add_argument("--job", choices=sorted(JOBS), default="mlr",
                    help="mlr: MLR on the embedded p3 node trace; quadratic: a 16-D quadratic on a trace from arrays")
    args = ap.parse_args(argv)
    if args.quick:
        args.draws, args.steps = 40, 60
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 1)
    for flag, value in (("--repeats", repeats), ("--draws", args.draws), ("--steps", args.steps)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    job, market, end = JOBS[args.job](args.steps)
    horizon = 3600.0 * args.horizon_h
    if not 0.0 < horizon < end:
        ap.error(f"--horizon-h must lie in (0, {end / 3600.0:.2f}): the starts are drawn so that a run's "
                 f"whole horizon fits in the trace ({end / 3600.0:.2f} h), got {args.horizon_h}")
    keys = jax.random.split(jax.random.key(2021), args.draws)
    # whole seconds: with fractional starts one draw of the 1,000 (start 389.70 s, key 486) makes
    # the per-draw policies' fleet stop a machine a float64 rounding before its ledger start
    # (t0 + max(t, ready) vs (t0 + t_buy) + startup) and raise; both sides alike
    starts = np.round(np.random.default_rng(1).uniform(0.0, end - horizon, args.draws))
    out = {"draws": args.draws, "steps": args.steps, "horizon_s": horizon, "target_loss": job.target_loss,
           "job": args.job, "policies": {},
           "market": ("aws p3 node trace (embedded), 8 workers" if args.job == "mlr" else
                      "availability counts built from arrays (0-10 machines, 5-min ticks), 8 workers")}
    total_vec = total_loop = cpu_vec = cpu_loop = 0.0
    for policy in args.policies.split(","):
        opts = OPTIONS[policy]
        # compile both sides: the vectorised programs are compiled per number of draws (a warm-up on
        # all of them), the per-draw ones once (a warm-up on a few)
        dr.run(policy, job, market, keys, horizon_s=horizon, start_s=starts, **opts)
        warm = min(4, args.draws)
        dr.per_draw(policy, job, market, keys[:warm], horizon_s=horizon, start_s=starts[:warm], **opts)
        list(keys)  # the loop iterates over the keys: compile their unstacking for this number too
        load0, vec_s, loop_s, vec_cpu, loop_cpu = _timing.loadavg(), [], [], [], []
        for _ in range(repeats):  # alternately, so both sides see the same load
            t0, c0 = time.perf_counter(), time.process_time()
            vec = dr.run(policy, job, market, keys, horizon_s=horizon, start_s=starts, **opts)
            vec_s.append(time.perf_counter() - t0)
            vec_cpu.append(time.process_time() - c0)
            t0, c0 = time.perf_counter(), time.process_time()
            loop = dr.per_draw(policy, job, market, keys, horizon_s=horizon, start_s=starts, **opts)
            loop_s.append(time.perf_counter() - t0)
            loop_cpu.append(time.process_time() - c0)
            a, b = dr.summary(vec, job.target_loss), dr.summary(loop, job.target_loss)
            bad = dr.mismatches(a, b)
            assert not bad, f"{policy}: {len(bad)} mismatches, first {bad[:3]}"
        t_vec, t_loop = statistics.median(vec_s), statistics.median(loop_s)
        total_vec, total_loop = total_vec + t_vec, total_loop + t_loop
        cpu_vec, cpu_loop = cpu_vec + statistics.median(vec_cpu), cpu_loop + statistics.median(loop_cpu)
        out["policies"][policy] = {
            "vectorised_s": round(t_vec, 3), "per_draw_loop_s": round(t_loop, 3), "ratio": round(t_loop / t_vec, 2),
            "repeats": repeats, "vectorised_min_s": round(min(vec_s), 3), "per_draw_loop_min_s": round(min(loop_s), 3),
            "ratio_of_minima": round(min(loop_s) / min(vec_s), 2),
            "cpu_vectorised_s": round(statistics.median(vec_cpu), 3), "cpu_per_draw_loop_s": round(statistics.median(loop_cpu), 3),
            "cpu_ratio": round(statistics.median(loop_cpu) / statistics.median(vec_cpu), 2),
            "cpu_ratio_of_minima": round(min(loop_cpu) / min(vec_cpu), 2),
            "loadavg_before_after": [load0, _timing.loadavg()],
            "identical_fields": sorted(a), "reached": int(a["reached"].sum()),
            "mean_time_to_target_s": float(np.mean(a["time_s"])), "mean_dollars": float(np.mean(a["dollars"])),
            "draws_revoked": int(np.sum(a["revocations"] > 0)),
        }
    out["total"] = {"vectorised_median_s": round(total_vec, 3), "per_draw_loop_median_s": round(total_loop, 3),
                    "ratio": round(total_loop / total_vec, 2), "cpu_vectorised_median_s": round(cpu_vec, 3),
                    "cpu_per_draw_loop_median_s": round(cpu_loop, 3), "cpu_ratio": round(cpu_loop / cpu_vec, 2)}
    out["host"] = {"platform": platform.platform(), "jax": jax.__version__, "backend": jax.default_backend(),
                   "loadavg": _timing.loadavg()}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
