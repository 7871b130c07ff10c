"""Step time with reduced-precision hooks vs none on MLR/digits, side by side in one process.

Cases: write-point rounding to 10 mantissa bits (nearest and stochastic), bfloat16 and
float8 e4m3 storage (emulated and real casts), read-point bfloat16 communication,
update-point QSGD (4 levels), and all three points at once. Printed: JSON with median
per-step times (compile excluded) and ratios to the unhooked run, and the same for the
fastest repeat. ``--quick`` (under a minute): ``QUICK_CASES``, one case per point and a real
cast (each case is an MLR program of several seconds of CPU time to compile).

    python benchmarks/bench_precision.py [--quick] [--steps 300] [--repeats 5] [--batch 256]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import jax

import scarjax
from scarjax.perturb import precision as P
from scarjax.models import mlr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import precompile, run_step_samples  # noqa: E402

#: The cases ``--quick`` times: the unhooked run, write-point rounding (emulated) and a real
#: bfloat16 cast, a read-point and an update-point hook.
QUICK_CASES = ("none", "write mantissa10 nearest", "write bfloat16 (cast)", "read bfloat16", "update qsgd4")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=None, help="default 300 (quick 50)")
    ap.add_argument("--repeats", type=int, default=None, help="default 5 (quick 3)")
    ap.add_argument("--quick", action="store_true", help="50 steps, 3 repeats, the QUICK_CASES (under a minute)")
    ap.add_argument("--batch", type=int, default=256, help="minibatch (0: full batch)")
    args = ap.parse_args(argv)
    args.steps = args.steps or (50 if args.quick else 300)
    args.repeats = args.repeats or (3 if args.quick else 5)
    alg = mlr.digits(lr=0.5, batch_size=args.batch or None)
    cases = {
        "none": None,
        "write mantissa10 nearest": P.precision(P.mantissa(10)),
        "write mantissa10 stochastic": P.precision(P.mantissa(10, stochastic=True)),
        "write bfloat16 (emulated)": P.precision(P.float_format("bfloat16")),
        "write bfloat16 (cast)": P.precision(P.float_format("bfloat16", emulate=False)),
        "write float8_e4m3fn (cast)": P.precision(P.float_format("float8_e4m3fn", emulate=False)),
        "read bfloat16": P.precision("bfloat16", point="read"),
        "update qsgd4": P.precision(P.qsgd(4), point="update"),
        "write+read+update": scarjax.chain(
            P.precision(P.mantissa(10)), P.precision("bfloat16", point="read"), P.precision(P.qsgd(4), point="update")
        ),
    }
    if args.quick:
        cases = {k: cases[k] for k in QUICK_CASES}
    # Compile every case at once (one program a case; XLA compiles outside the GIL), then time
    # them one at a time on the cached programs.
    compile_s = precompile([lambda h=h: scarjax.run(alg, h, args.steps, 0)[1].loss for h in cases.values()])
    samples = {k: run_step_samples(alg, h, args.steps, args.repeats) for k, h in cases.items()}
    t = {k: statistics.median(v) for k, v in samples.items()}
    t_min = {k: min(v) for k, v in samples.items()}
    out = {
        "benchmark": "precision_hooks_vs_none_mlr_digits",
        "device": str(jax.devices()[0]),
        "quick": bool(args.quick),
        "steps": args.steps,
        "batch": args.batch,
        "compile_all_cases_s": round(compile_s, 2),
        "step_time_s": t,
        "ratio_to_none": {k: v / t["none"] for k, v in t.items()},
        "step_time_min_s": t_min,
        "ratio_min_to_none": {k: v / t_min["none"] for k, v in t_min.items()},
        "repeats": args.repeats,
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
