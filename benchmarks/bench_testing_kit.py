"""The property-testing kit's default budget: wall time of each ``scarjax.testing`` check
with its defaults, first call (tracing + compilation + 10 hypothesis examples) beside the
same call again (compiled programs cached; median and min over ``--repeats`` calls), in
one process. Printed: JSON with the times, their ratios and the check's summary line.

Problems: the ridge-regression optax step of ``docs/examples/test_my_algorithm.py``, a
4-d QP with c = 0.9 (``quadratic.random_problem``) and the PGNS MLR example.

    python benchmarks/bench_testing_kit.py [--quick] [--repeats 3]

``--quick`` (under a minute): every check but ``QUICK_LEAVES_OUT`` (the two 300-step QP checks,
the slowest first calls: 115 of the 243 s of first calls measured on 2 busy cores), one cached
call after the first (median and min are then that call).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from scarjax import testing as sxt
from scarjax.models import quadratic
from scarjax.pollux import examples

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "examples"))
import test_my_algorithm as user  # noqa: E402  (the user's ridge step and its rate)


def _cases():
    qp = quadratic.random_problem(0, 4, 5.0, c=0.9)
    c = quadratic.contraction(qp)
    mlr = examples.mlr()
    return {
        "check_linear_convergence(ridge, 200)": lambda: sxt.check_linear_convergence(user.ridge, 200),
        "check_rework_bound(ridge, c, 100)": lambda: sxt.check_rework_bound(user.ridge, user.c, 100),
        "check_partial_recovery(qp, 40)": lambda: sxt.check_partial_recovery(qp, 40),
        "check_expected_perturbation(qp, 40)": lambda: sxt.check_expected_perturbation(qp, 40),
        "check_precision_floor(qp, c, 300)": lambda: sxt.check_precision_floor(qp, c, 300),
        "check_staleness(qp, c, 300)": lambda: sxt.check_staleness(qp, c, 300),
        "check_determinism(ridge, 50)": lambda: sxt.check_determinism(user.ridge, 50),
        "check_pgns_unbiased(mlr, b=32)": lambda: sxt.check_pgns_unbiased(
            mlr.loss, mlr.params, (mlr.x, mlr.y), microbatch_size=32),
    }


#: The checks ``--quick`` leaves out (the slowest to compile and run).
QUICK_LEAVES_OUT = ("check_precision_floor(qp, c, 300)", "check_staleness(qp, c, 300)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=None, help="timed calls after the first (default 5, quick 1)")
    ap.add_argument("--quick", action="store_true", help="every check but QUICK_LEAVES_OUT, one timed call after the first")
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 5)
    out = {}
    cases = _cases()
    if args.quick:
        cases = {k: v for k, v in cases.items() if k not in QUICK_LEAVES_OUT}
    for name, call in cases.items():
        t0 = time.perf_counter()
        result = call()
        first = time.perf_counter() - t0
        again = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            call()
            again.append(time.perf_counter() - t0)
        med, best = statistics.median(again), min(again)
        out[name] = {"first_call_s": round(first, 3), "cached_call_s_median": round(med, 3),
                     "cached_call_s_min": round(best, 3), "first_over_cached_median": round(first / med, 1),
                     "first_over_cached_min": round(first / best, 1), "summary": result.summary()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
