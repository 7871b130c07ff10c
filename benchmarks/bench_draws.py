"""Many market draws as one call (:mod:`scarjax.cluster.draws`) against the per-draw loop, in
one run: ``--draws`` draws (start offsets uniform over the embedded AWS p3 node trace, one
market key each) of checkpoint-restart, SCAR and TierML on the trace, each side timed after a
warm-up (compilation: the vectorised side on all the draws, its programs being compiled per
number of draws; the loop on four) ``--repeats`` times alternately (min and median of each
side, the ratio of the medians and of the minima, the load average before and after each
policy), and the per-draw summaries (time and dollars to the target, steps, reached, end,
bill, revocations, rework / recovery / rollback counts) asserted equal (``==``, float64 bit
for bit; :func:`scarjax.cluster.draws.mismatches`).

The job: multinomial logistic regression on a fixed synthetic set (256 x 16, 4 classes,
minibatches of 32), 8 workers, a 60 s checkpoint, a 30 s restore, 120 s start-up, at most
``--steps`` iterations, the target the reliable run's loss at 3/4 of them plus 1e-3 (far from
float32 rounding). A small model on purpose: the benchmark measures the engine (clocks,
draws, dispatch), which is what the per-draw loop repeats per draw.

Run: ``python benchmarks/bench_draws.py [--quick] [--repeats N]``; prints one JSON object
(``--quick``: 40 draws, 60 steps, 3 repeats, about a minute of CPU).
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
from scarjax.models import mlr

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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--horizon-h", type=float, default=6.0)
    ap.add_argument("--policies", default="checkpoint_restart,scar,tierml")
    ap.add_argument("--repeats", type=int, default=None, help="timed runs of each side (default 1; --quick: 3)")
    ap.add_argument("--quick", action="store_true", help="40 draws, 60 steps, 3 repeats")
    args = ap.parse_args(argv)
    if args.quick:
        args.draws, args.steps = 40, 60
    repeats = args.repeats if args.repeats is not None else (3 if args.quick else 1)
    for flag, value in (("--repeats", repeats), ("--draws", args.draws), ("--steps", args.steps)):
        if value < 1:
            ap.error(f"{flag} must be >= 1, got {value}")
    job, market, end = setup(args.steps)
    horizon = 3600.0 * args.horizon_h
    if not 0.0 < horizon < end:
        ap.error(f"--horizon-h must lie in (0, {end / 3600.0:.2f}): the starts are drawn so that a run's "
                 f"whole horizon fits in the embedded trace ({end / 3600.0:.2f} h), got {args.horizon_h}")
    keys = jax.random.split(jax.random.key(2021), args.draws)
    # whole seconds: with fractional starts one draw of the 1,000 (start 389.70 s, key 486) makes
    # the per-draw policies' fleet stop a machine a float64 rounding before its ledger start
    # (t0 + max(t, ready) vs (t0 + t_buy) + startup) and raise; both sides alike
    starts = np.round(np.random.default_rng(1).uniform(0.0, end - horizon, args.draws))
    out = {"draws": args.draws, "steps": args.steps, "horizon_s": horizon, "target_loss": job.target_loss,
           "market": "aws p3 node trace (embedded), 8 workers", "policies": {}}
    total_vec = total_loop = 0.0
    for policy in args.policies.split(","):
        opts = OPTIONS[policy]
        # compile both sides: the vectorised programs are compiled per number of draws (a warm-up on
        # all of them), the per-draw ones once (a warm-up on a few)
        dr.run(policy, job, market, keys, horizon_s=horizon, start_s=starts, **opts)
        warm = min(4, args.draws)
        dr.per_draw(policy, job, market, keys[:warm], horizon_s=horizon, start_s=starts[:warm], **opts)
        list(keys)  # the loop iterates over the keys: compile their unstacking for this number too
        load0, vec_s, loop_s = _timing.loadavg(), [], []
        for _ in range(repeats):  # alternately, so both sides see the same load
            t0 = time.perf_counter()
            vec = dr.run(policy, job, market, keys, horizon_s=horizon, start_s=starts, **opts)
            vec_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            loop = dr.per_draw(policy, job, market, keys, horizon_s=horizon, start_s=starts, **opts)
            loop_s.append(time.perf_counter() - t0)
            a, b = dr.summary(vec, job.target_loss), dr.summary(loop, job.target_loss)
            bad = dr.mismatches(a, b)
            assert not bad, f"{policy}: {len(bad)} mismatches, first {bad[:3]}"
        t_vec, t_loop = statistics.median(vec_s), statistics.median(loop_s)
        total_vec, total_loop = total_vec + t_vec, total_loop + t_loop
        out["policies"][policy] = {
            "vectorised_s": round(t_vec, 3), "per_draw_loop_s": round(t_loop, 3), "ratio": round(t_loop / t_vec, 2),
            "repeats": repeats, "vectorised_min_s": round(min(vec_s), 3), "per_draw_loop_min_s": round(min(loop_s), 3),
            "ratio_of_minima": round(min(loop_s) / min(vec_s), 2), "loadavg_before_after": [load0, _timing.loadavg()],
            "identical_fields": sorted(a), "reached": int(a["reached"].sum()),
            "mean_time_to_target_s": float(np.mean(a["time_s"])), "mean_dollars": float(np.mean(a["dollars"])),
            "draws_revoked": int(np.sum(a["revocations"] > 0)),
        }
    out["total"] = {"vectorised_median_s": round(total_vec, 3), "per_draw_loop_median_s": round(total_loop, 3),
                    "ratio": round(total_loop / total_vec, 2)}
    out["host"] = {"platform": platform.platform(), "jax": jax.__version__, "backend": jax.default_backend(),
                   "loadavg": _timing.loadavg()}
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
