"""Scenarios per second of the TierML Fig 12 sweep: vectorised (NumPy lock step,
``scarjax.cluster.sweep.run_vectorised``) vs the plain Python event loop
(``run_reference``), side by side in one run; and the time of the whole sweep.

The scenario set: every ``--stride``-th start minute (with ``s + 60 W`` inside the history) of the
embedded April 2015 month x 3 zones x 5 instance types x 3 job lengths (2, 8, 20 h) x 2 bids x 2
policies (TierML with proactive switching, checkpointing). The vectorised side runs the whole set
per round; the Python loop runs a uniform random sample of ``--loop-n`` scenarios of the same set
(same mix of types, bids, policies, lengths), each a separate ``run_reference`` call. Markets and
MTTF tables are built once, outside the timings (both sides use the same). Rounds are interleaved
(vectorised, loop, vectorised, ...); ``ratio_min`` = fastest vectorised rate / fastest loop rate,
``ratio_median`` = the median over rounds of the per-round ratio. The loop's sample is checked
against the vectorised results (``max_rel_diff``).

``whole_sweep``: ``sweep.sweep(stride=1)`` over the embedded month (every start minute, the three
policies of the experiment, TierML's no-switching ablation included), timed once; with
``--full-history`` also over the March-August 2015 files under ``$SCARJAX_SHARED_DATA/transient`` (default ``../shared/data/transient``).

Run: ``python benchmarks/bench_cluster_sweep.py [--quick] [--full-history]``; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

from scarjax.cluster import sweep as sw
from scarjax.data import transient as td

FULL = os.path.join(
    os.environ.get("SCARJAX_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")), "transient")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stride", type=int, default=10)
    ap.add_argument("--loop-n", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="stride 60, 200 loop scenarios, 3 rounds, no whole sweep")
    ap.add_argument("--full-history", action="store_true", help="also time the sweep over the full 2015 history")
    args = ap.parse_args(argv)
    if args.quick:
        args.stride, args.loop_n, args.rounds = 60, 200, 3
    model = sw.default_model()
    works = (2.0, 8.0, 20.0)
    pad = int(60 * (3 * max(works) + 4))
    markets = {it: sw.build_markets(it, pad_min=pad) for it in td.SPOT_INSTANCE_TYPES}
    mttf = {(it, b): sw.mttf_s(tm, b) for it, tm in markets.items() for b in sw.BIDS}
    combos, batches = [], []  # one vectorised call per (type, bid, policy), all job lengths at once
    for it, tm in markets.items():
        parts = []
        for w in works:
            st = np.arange(0, tm.minutes - int(60 * w), args.stride, dtype=np.int64)
            S_, H_ = np.meshgrid(st, np.arange(3), indexing="ij")
            parts.append((S_.ravel(), H_.ravel(), np.full(S_.size, 3600.0 * w)))  # job lengths in seconds
        batch = tuple(np.concatenate(x) for x in zip(*parts))
        for b in sw.BIDS:
            for pol in sw.POLICIES:
                combos.append((it, b, pol))
                batches.append(batch)
    sizes = np.array([s.size for s, _, _ in batches])
    total = int(sizes.sum())
    rng = np.random.default_rng(0)
    pick = np.sort(rng.choice(total, size=min(args.loop_n, total), replace=False))
    owner = np.searchsorted(np.cumsum(sizes), pick, side="right")
    local = pick - np.concatenate([[0], np.cumsum(sizes)])[owner]
    sample = [
        (combos[o], int(batches[o][0][i]), int(batches[o][1][i]), float(batches[o][2][i]), o, i)
        for o, i in zip(owner, local)
    ]

    def vectorised():
        return [
            sw.run_vectorised(markets[it], s, h, w, b, pol, model, mttf_s=mttf[(it, b)])
            for (it, b, pol), (s, h, w) in zip(combos, batches)
        ]

    def loop():
        return [
            sw.run_reference(markets[it], s, h, w, b, pol, model, mttf_s=mttf[(it, b)])
            for (it, b, pol), s, h, w, _, _ in sample
        ]

    vec_out = vectorised()  # warm-up, and the results the loop is checked against
    loop_out = loop()
    diff = 0.0
    for (_, _, _, _, o, i), ref in zip(sample, loop_out):
        for k in ("dollars", "minutes"):
            v = float(vec_out[o][k][i])
            diff = max(diff, abs(v - ref[k]) / max(abs(ref[k]), 1e-12))
        if vec_out[o]["revocations"][i] != ref["revocations"] or vec_out[o]["switches"][i] != ref["switches"]:
            raise AssertionError(f"vectorised and loop disagree on {combos[o]} start {batches[o][0][i]} job {batches[o][2][i]} s")
    rates = {"vectorised": [], "loop": []}
    load0 = _timing.loadavg()
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        vectorised()
        rates["vectorised"].append(total / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        loop()
        rates["loop"].append(len(sample) / (time.perf_counter() - t0))
    per_round = [v / p for v, p in zip(rates["vectorised"], rates["loop"])]
    out = {
        "benchmark": "cluster_sweep",
        "scenarios_vectorised_per_round": total,
        "scenarios_loop_per_round": len(sample),
        "stride": args.stride,
        "rounds": args.rounds,
        "scenarios_per_s": {
            k: {"max": max(v), "median": statistics.median(v), "min": min(v)} for k, v in rates.items()
        },
        "ratio_min": max(rates["vectorised"]) / max(rates["loop"]),  # fastest round over fastest round
        "ratio_median": statistics.median(per_round),
        "goal_ratio": 50,
        "max_rel_diff": diff,
        "loadavg": [load0, _timing.loadavg()],
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "cpus": os.cpu_count()},
    }
    if not args.quick:
        whole = {}
        t0 = time.perf_counter()
        r = sw.sweep(stride=1)
        whole["embedded_month"] = {"scenarios": r["scenarios"], "seconds": time.perf_counter() - t0}
        if args.full_history and os.path.isdir(os.path.join(FULL, "aws-spot-2015")):
            t0 = time.perf_counter()
            spot = td.load_spot_market(FULL)
            r = sw.sweep(spot, stride=1, source=FULL)
            whole["full_history"] = {
                "scenarios": r["scenarios"],
                "seconds": time.perf_counter() - t0,
                "minutes": r["minutes"],
            }
        whole["loadavg_end"] = _timing.loadavg()
        out["whole_sweep"] = whole
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
