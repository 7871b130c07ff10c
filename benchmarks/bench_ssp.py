"""Step time of stale-synchronous (SSP) reads with M = 8 workers vs synchronous data-parallel
training on MLR/digits, measured side by side in one process.

The ring buffer of past versions lives in the scan carry and is written with one
dynamic_update_slice per step; if it were copied every step, the step time would grow
with the buffer size s + 1. Printed: JSON with median per-step times (compile excluded,
median of repeats) and their ratios to synchronous, and the same for the fastest repeat.
``--quick`` (under a minute): ``QUICK_CASES``, 50 steps, 3 repeats.

    python benchmarks/bench_ssp.py [--quick] [--steps 300] [--repeats 5] [--batch 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import jax

import scarjax
from scarjax.perturb import staleness
from scarjax.models import mlr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import precompile, run_step_samples  # noqa: E402

#: The cases ``--quick`` times (``{M}``: the workers): synchronous, the smallest and largest
#: staleness bound and asynchronous (each case is an MLR program of several seconds of CPU
#: time to compile).
QUICK_CASES = ("sync M={M}", "ssp M={M} s=1", "ssp M={M} s=32", "async M={M} max_delay=128")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=None, help="default 300 (quick 50)")
    ap.add_argument("--repeats", type=int, default=None, help="default 5 (quick 3)")
    ap.add_argument("--quick", action="store_true", help="50 steps, 3 repeats, the QUICK_CASES (under a minute)")
    ap.add_argument("--batch", type=int, default=256, help="global minibatch (0: full batch)")
    ap.add_argument("--workers", type=int, default=8)
    args = ap.parse_args(argv)
    args.steps = args.steps or (50 if args.quick else 300)
    args.repeats = args.repeats or (3 if args.quick else 5)
    M = args.workers
    alg = mlr.digits(lr=0.5, batch_size=args.batch or None)
    cases = {  # (hooks, workers)
        "plain (no workers)": (None, None),
        f"sync M={M}": (None, M),
        f"ssp M={M} s=1": (staleness.ssp(M, 1), M),
        f"ssp M={M} s=8": (staleness.ssp(M, 8), M),
        f"ssp M={M} s=32": (staleness.ssp(M, 32), M),
        f"async M={M} max_delay=128": (staleness.asynchronous(M, 4.0, max_delay=128), M),
    }
    if args.quick:
        cases = {k: cases[k] for k in (c.format(M=M) for c in QUICK_CASES)}
    # Compile every case at once (one program a case; XLA compiles outside the GIL), then time
    # them one at a time on the cached programs.
    compile_s = precompile([lambda h=h, m=m: scarjax.run(alg, h, args.steps, 0, workers=m)[1].loss
                            for h, m in cases.values()])
    samples = {k: run_step_samples(alg, h, args.steps, args.repeats, workers=m) for k, (h, m) in cases.items()}
    t = {k: statistics.median(v) for k, v in samples.items()}
    t_min = {k: min(v) for k, v in samples.items()}
    sync = t[f"sync M={M}"]
    out = {
        "benchmark": "ssp_vs_sync_mlr_digits",
        "device": str(jax.devices()[0]),
        "quick": bool(args.quick),
        "steps": args.steps,
        "batch": args.batch,
        "compile_all_cases_s": round(compile_s, 2),
        "step_time_s": t,
        "ratio_to_sync": {k: v / sync for k, v in t.items()},
        "step_time_min_s": t_min,
        "ratio_min_to_sync": {k: v / t_min[f"sync M={M}"] for k, v in t_min.items()},
        "repeats": args.repeats,
        "ssp_s32_over_s1": t[f"ssp M={M} s=32"] / t[f"ssp M={M} s=1"],
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
