"""Trials per second of ``scarjax.run_trials``: one device vs sharded over 8 devices vs
chunked, for 10,000 QP and 10,000 MLR trials, measured side by side in one run; and the
peak memory of 100,000 QP trials. ``--quick`` (under a minute): 200 QP trials only (each MLR
program takes about 10 s of CPU time to compile), and two memory runs of 10,000 trials.

Configurations (same keys, same hooks, same compiled loop; only the mesh and chunks differ):

* ``one_device``: a 1-device mesh, all trials in one program;
* ``sharded``: the default mesh (8 forced host CPU devices here, or the accelerators),
  all trials in one program;
* ``chunked``: the default mesh in chunks of ``--chunk`` trials, each copied to the host.

Rounds are interleaved (one_device, sharded, chunked, one_device, …) so that machine noise
hits all alike (``_timing.interleaved_samples``); ratios are per round against
``one_device``. Forced host devices share the machine's cores: on a 2-core machine 8
devices cannot run 8 times as fast.

``memory``: 100,000 QP trials (``--memory-steps`` steps) on one device, in a fresh process
each: one program vs the default memory budget vs chunks of 10,000; peak resident set size
(``VmHWM``) before and after the run, and the size of the returned results.

Run: ``python benchmarks/bench_trials.py [--quick]``; prints one JSON object.
"""

from __future__ import annotations

import os
import sys

if "--no-force" not in sys.argv:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
from pathlib import Path  # noqa: E402

import jax  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _timing  # noqa: E402

from scarjax import hooks, perturb, trials  # noqa: E402
from scarjax.models import mlr, quadratic  # noqa: E402


def problems(quick: bool) -> dict:
    """(algorithm, hooks, steps): the Fig 5.3 QP with a Gaussian kick half-way, and MLR on
    digits (minibatches of 64) with a Gaussian kick half-way (``quick``: the QP alone)."""
    qp_steps, mlr_steps = (20, 2) if quick else (100, 2)
    out = {"qp": (quadratic.fig53_problem(), hooks.scheduled(perturb.gaussian(1.0), qp_steps // 2), qp_steps)}
    if not quick:
        out["mlr"] = (mlr.digits(batch_size=64), hooks.scheduled(perturb.gaussian(0.1), mlr_steps // 2), mlr_steps)
    return out


def throughput(n: int, chunk: int, rounds: int, quick: bool) -> dict:
    out = {}
    one = trials.trials_mesh(jax.devices()[:1])
    keys = jax.random.split(jax.random.key(0), n)
    for name, (alg, h, steps) in problems(quick).items():
        fns = {
            "one_device": lambda: trials.run_trials(alg, h, steps, keys, mesh=one, chunk_size=n),
            "sharded": lambda: trials.run_trials(alg, h, steps, keys, chunk_size=n),
            "chunked": lambda: trials.run_trials(alg, h, steps, keys, chunk_size=chunk),
        }
        if quick:  # compile the three programs at once (XLA compiles outside the GIL); timed one at a time
            _timing.precompile(fns)
        samples = _timing.interleaved_samples(fns, rounds=rounds)
        ratios = _timing.ratios(samples, "one_device")
        out[name] = {
            "trials": n,
            "steps": steps,
            "devices": len(jax.devices()),
            "chunk_size": chunk,
            "trial_bytes": trials.trial_bytes(alg, h, steps),
            **{
                k: {
                    "seconds_median": round(statistics.median(v), 4),
                    "trials_per_second": round(n / statistics.median(v), 1),
                    "speedup_vs_one_device_median": round(1 / ratios[k]["ratio_median"], 3),
                    "speedup_vs_one_device_best": round(1 / ratios[k]["ratio_min"], 3),
                }
                for k, v in samples.items()
            },
        }
    return out


def _peak_rss_mb() -> float | None:
    """This process's peak resident set size (``VmHWM``; unlike ``ru_maxrss`` it is not
    inherited from the parent across ``exec``), or ``None`` off Linux."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def _memory_child(n: int, steps: int, how: str) -> None:
    """In a fresh process: run ``n`` QP trials on one device and print peak RSS (JSON)."""
    import time

    import numpy as np

    qp = quadratic.fig53_problem()
    h = hooks.scheduled(perturb.gaussian(1.0), steps // 2)
    keys = jax.random.split(jax.random.key(0), n)
    named = {"one_program": dict(chunk_size=n), "default_budget": {}}
    kw = named[how] if how in named else dict(chunk_size=int(how.split("_")[-1]))  # "chunks_of_<k>"
    calls = []
    inner = trials._sharded
    trials._sharded = lambda *a, **k: calls.append(1) or inner(*a, **k)  # count the chunks
    base = _peak_rss_mb()
    t0 = time.perf_counter()
    st, tr = trials.run_trials(qp, h, steps, keys, mesh=trials.trials_mesh(jax.devices()[:1]), **kw)
    tr = jax.block_until_ready(tr)
    secs = time.perf_counter() - t0
    result_mb = sum(np.asarray(x).nbytes for x in jax.tree.leaves((st, tr))) / 2**20
    peak = _peak_rss_mb()
    print(json.dumps({"how": how, "trials": n, "steps": steps, "chunks": len(calls), "seconds": round(secs, 2),
                      "peak_rss_mb": peak, "peak_rss_before_run_mb": base,
                      "results_mb": round(result_mb, 1)}))


def memory(n: int, steps: int, concurrent: bool = False,
           hows: tuple = ("one_program", "default_budget", "chunks_of_10000")) -> list:
    """Peak RSS of the ways ``hows`` in fresh processes, one after another (``concurrent``: all
    at once, as ``--quick`` does with one program vs chunks of a quarter: each peak is still its
    own process's, but the seconds include sharing the cores)."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}

    def start(how):
        return subprocess.Popen([sys.executable, __file__, "--no-force", "--memory-child", how, str(n), str(steps)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    out = []
    procs = [start(how) for how in hows] if concurrent else []
    for i, how in enumerate(hows):
        p = procs[i] if concurrent else start(how)
        stdout, stderr = p.communicate()
        if p.returncode != 0:
            raise subprocess.CalledProcessError(p.returncode, p.args, stdout, stderr)
        out.append(json.loads(stdout.strip().splitlines()[-1]))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="the QP alone: 200 trials in chunks of 50, 20 steps, 3 rounds, the three programs "
                             "compiled at once; 10,000 memory trials of 50 steps in one program vs chunks of 2,500, "
                             "the two processes at once (under a minute)")
    parser.add_argument("--trials", type=int, default=10_000)
    parser.add_argument("--chunk", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--memory-trials", type=int, default=100_000)
    parser.add_argument("--memory-steps", type=int, default=200)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--no-force", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--memory-child", nargs=3, help=argparse.SUPPRESS)
    a = parser.parse_args(argv)
    if a.memory_child:
        how, n, steps = a.memory_child
        return _memory_child(int(n), int(steps), how)
    if a.quick:
        a.trials, a.chunk, a.rounds, a.memory_trials, a.memory_steps = 200, 50, 3, 10_000, 50
    results = {"throughput": throughput(a.trials, a.chunk, a.rounds, a.quick), "load_average": _timing.loadavg()}
    if not a.no_memory:
        hows = ("one_program", f"chunks_of_{a.memory_trials // 4}") if a.quick else ("one_program", "default_budget", "chunks_of_10000")
        results["memory"] = memory(a.memory_trials, a.memory_steps, concurrent=a.quick, hows=hows)
    _timing.emit("bench_trials", results)


if __name__ == "__main__":
    main()
