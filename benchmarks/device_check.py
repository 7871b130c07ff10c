"""The device check: one command that whoever has a GPU/TPU runs, in under 8 minutes.

1. The environment: JAX version, devices, the backend, the matmul precision in effect
   (:func:`scarjax.numerics.matmul_precision`: TF32 on a GPU by default).
2. The test suite on the device: ``pytest -m 'not slow'`` over the cores (xdist, without
   JAX's memory pre-allocation, so that the workers share the GPU), within a time budget
   (the tests that have not finished by then are reported as not run).
3. The benchmarks' quick modes (bench_loop, bench_pollux and bench_sched first), each with a
   60 s limit, within 200 s (those not started by then are reported as not run).
4. The theory examples with JAX's default precision (``benchmarks/theory_examples.py``:
   the README's notebook example and the ridge example).

Prints a summary and writes it as JSON to ``$OUT/device_check.json`` (or ``--out``).
Every part runs in its own process, so one that fails or runs out of time does not stop
the others.

Run on a device: ``python benchmarks/device_check.py`` (at most 180 + 200 + 70 s plus start-up:
under 8 minutes). ``--parts suite,benchmarks,theory`` and ``--benchmarks NAME,...`` run a
subset (a re-check after a fix). ``--cpu-dry-run`` runs the same
parts on CPU with a small test selection and only the cheapest benchmark, to show that the
script works end to end where no device is lent.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (name, argv) of every benchmark's quick mode, in the order they run; each must finish
#: within QUICK_LIMIT_S, and none starts once BENCH_BUDGET_S is spent (reported as not run).
BENCHMARKS = [
    ("bench_loop", ["benchmarks/bench_loop.py", "--quick"]),
    ("bench_pollux", ["benchmarks/bench_pollux.py", "--quick"]),
    ("bench_sched", ["benchmarks/bench_sched.py", "--quick"]),
    ("bench_trials", ["benchmarks/bench_trials.py", "--quick"]),
    ("trials_vs_run", ["benchmarks/trials_vs_run.py", "--quick"]),
    ("bench_precision", ["benchmarks/bench_precision.py", "--quick"]),
    ("bench_ssp", ["benchmarks/bench_ssp.py", "--quick"]),
    ("bench_testing_kit", ["benchmarks/bench_testing_kit.py", "--quick"]),
    ("bench_checkpoint", ["benchmarks/bench_checkpoint.py", "--quick"]),
    ("bench_ps", ["benchmarks/bench_ps.py", "--quick"]),
    ("bench_scar_suite", ["benchmarks/bench_scar_suite.py", "--quick"]),
    ("bench_plan", ["benchmarks/bench_plan.py", "--quick"]),
    ("bench_cluster_sweep", ["benchmarks/bench_cluster_sweep.py", "--quick"]),
    ("bench_draws", ["benchmarks/bench_draws.py", "--quick"]),
]
QUICK_LIMIT_S = 60
BENCH_BUDGET_S = 200
#: Seconds for the theory examples; with the suite's default budget the whole check is
#: under 8 minutes even when every part runs to its limit.
THEORY_LIMIT_S = 70


def _run(argv: list[str], limit: float, env: dict | None = None) -> dict:
    """Run ``argv`` from the repository root with a time limit; the exit status, the
    seconds and the last lines of its output. On time-out the whole process group is
    killed (pytest-xdist's workers too: left running, they would load the machine the
    next part is timed on)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        rc = "timeout"
    return {"rc": rc, "seconds": round(time.perf_counter() - t0, 1), "tail": (out or "")[-3000:], "_output": out or ""}


def environment() -> dict:
    """JAX version, devices, backend and the matmul precision in effect."""
    import jax

    from scarjax import numerics

    p = numerics.matmul_precision()
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": [str(d) for d in jax.devices()],
        "device_kind": jax.devices()[0].device_kind,
        "jax_default_matmul_precision": p.setting,
        "JAX_DEFAULT_MATMUL_PRECISION": os.environ.get(numerics.ENV_VAR),
        "matmul_precision": p.describe(),
        "cpu_count": os.cpu_count(),
    }


def suite(selection: list[str], budget: float, workers: int) -> dict:
    """``pytest -m 'not slow'`` (plus ``selection``) within ``budget`` seconds."""
    # -v: one line per finished test, so that a run cut off by the budget still names its
    # failures and counts what finished.
    argv = [sys.executable, "-m", "pytest", "-v", "-m", "not slow and not docs", "-n", str(workers),
            "-p", "no:cacheprovider", *selection]
    # One GPU shared by every worker: JAX must not pre-allocate 75% of its memory in each.
    env = {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    res = _run(argv, budget, env=env)
    out = res.pop("_output")
    summary = re.findall(r"(\d+) (passed|failed|skipped|error|errors|xfailed|deselected)", res["tail"][-400:])
    counts = {k: int(v) for v, k in summary}
    # One line per finished test: "[gw3] [ 41%] PASSED tests/x.py::t" with xdist,
    # "tests/x.py::t PASSED [ 41%]" without.
    finished = []
    for line in out.splitlines():
        test = re.search(r"((?:tests|scarjax)/\S+::\S+)", line)
        outcome = re.search(r"\b(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b", line)
        if test and outcome and not line.startswith(("FAILED ", "ERROR ")):
            finished.append((test.group(1), outcome.group(1)))
    if res["rc"] == "timeout" or not summary:  # cut off: count the tests that finished
        counts = {}
        for _, outcome in finished:
            key = {"XFAIL": "xfailed", "XPASS": "xpassed", "ERROR": "error"}.get(outcome, outcome.lower())
            counts[key] = counts.get(key, 0) + 1
    res["counts"] = counts
    res["failures"] = sorted({t for t, o in finished if o in ("FAILED", "ERROR")})[:50]
    done = re.findall(r"\[\s*(\d+)%\]", out)
    res["percent_done"] = int(done[-1]) if done else None
    res["tail"] = "\n".join(line for line in res["tail"].splitlines() if " PASSED " not in line)[-3000:]
    return res


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-dry-run", action="store_true",
                    help="on CPU: a small test selection, the cheapest benchmark, the theory examples")
    ap.add_argument("--suite-budget", type=float, default=180.0, help="seconds for the test suite (default 180)")
    ap.add_argument("--parts", default="suite,benchmarks,theory",
                    help="comma-separated parts to run (default all: suite,benchmarks,theory)")
    ap.add_argument("--benchmarks", default=None,
                    help="comma-separated benchmark names to run (default: every one, in order)")
    ap.add_argument("--workers", type=int, default=None, help="pytest-xdist workers (default: the cores, at most 14)")
    ap.add_argument("--scale", type=float, default=None,
                    help="multiply the benchmarks' and examples' time limits (default 1; 4 with --cpu-dry-run)")
    ap.add_argument("--out", default=None, help="JSON path (default $OUT/device_check.json if $OUT is set)")
    args = ap.parse_args(argv)
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    if not parts or set(parts) - {"suite", "benchmarks", "theory"}:
        ap.error(f"--parts must name some of suite, benchmarks, theory; got {args.parts!r}")
    known = [name for name, _ in BENCHMARKS]
    chosen = known if args.benchmarks is None else [x.strip() for x in args.benchmarks.split(",") if x.strip()]
    if not chosen or set(chosen) - set(known):
        ap.error(f"--benchmarks must name some of {', '.join(known)}; got {args.benchmarks!r}")
    if args.suite_budget <= 0:
        ap.error(f"--suite-budget must be positive, got {args.suite_budget}")
    if args.scale is None:
        args.scale = 4.0 if args.cpu_dry_run else 1.0
    t0 = time.perf_counter()
    summary: dict = {"environment": environment(), "dry_run": args.cpu_dry_run, "limit_scale": args.scale}
    print(json.dumps(summary["environment"], indent=1), flush=True)
    workers = args.workers or max(1, min(14, (os.cpu_count() or 2) - 2))
    if args.cpu_dry_run:
        selection = ["tests/test_matmul_precision.py", "-k", "table or emulated or loss_floor or bad_platform"]
        benches = [b for b in BENCHMARKS if b[0] in chosen][:1]
        workers = args.workers or 0
    else:
        selection, benches = [], [b for b in BENCHMARKS if b[0] in chosen]
    if "suite" in parts:
        summary["suite"] = suite(selection, args.suite_budget, workers)
        print(f"suite: {summary['suite']['counts']} in {summary['suite']['seconds']} s; "
              f"failures: {summary['suite']['failures']}", flush=True)
    if "benchmarks" in parts:
        summary["benchmarks"] = {}
        t_bench = time.perf_counter()
        for name, cmd in benches:
            left = BENCH_BUDGET_S * args.scale - (time.perf_counter() - t_bench)
            if left <= 0:
                summary["benchmarks"][name] = {"rc": "not run (budget spent)"}
                continue
            r = _run([sys.executable, *cmd], min(QUICK_LIMIT_S * args.scale, max(left, 1.0)))
            r.pop("_output")
            summary["benchmarks"][name] = r
            print(f"{name}: rc={r['rc']} in {r['seconds']} s", flush=True)
    if "theory" in parts:
        # JAX's default precision: the environment variable unset for the examples.
        env = {k: v for k, v in os.environ.items() if k != "JAX_DEFAULT_MATMUL_PRECISION"}
        ex = _run([sys.executable, "benchmarks/theory_examples.py", "--quick"], THEORY_LIMIT_S * args.scale, env=env)
        full = ex.pop("_output")
        try:
            ex["result"] = json.loads(full[full.index("{"):])
            ex["tail"] = ""
        except ValueError:
            pass
        summary["theory_examples"] = ex
        print(f"theory examples: rc={ex['rc']} in {ex['seconds']} s", flush=True)
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    out = args.out or (os.path.join(os.environ["OUT"], "device_check.json") if os.environ.get("OUT") else None)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(summary, indent=1))
        print(f"wrote {out}")
    print(f"device check: {summary['seconds']} s in all", flush=True)
    return summary


if __name__ == "__main__":
    main()
