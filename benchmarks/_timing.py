"""Timing helpers for side-by-side benchmarks: warm up (compile), then median of repeats."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import jax


def loadavg() -> float | None:
    """The 1-minute load average (``None`` where the platform has none), recorded beside
    every timing so a reader can tell an idle machine from a busy one."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def block(x: Any) -> Any:
    return jax.block_until_ready(x)


def median_time(fn: Callable[[], Any], repeats: int = 5, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` (blocked until ready) over ``repeats`` runs after
    ``warmup`` untimed runs (which include compilation)."""
    for _ in range(warmup):
        block(fn())
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        block(fn())
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def precompile(calls: dict[str, Callable[[], Any]] | list[Callable[[], Any]], workers: int | None = None) -> float:
    """Call every zero-argument function once (blocked until ready) from a pool of
    ``workers`` threads (default: the cores, at most one per call); the seconds taken.

    A benchmark with many cases spends most of its quick mode compiling (one XLA program a
    case, several seconds each on CPU). XLA compiles outside the GIL, so compiling the
    cases at once uses every core; the timed runs that follow reuse the cached programs,
    one at a time, so the timings are the same as after a sequential warm-up."""
    fns = list(calls.values()) if isinstance(calls, dict) else list(calls)
    if not fns:
        return 0.0
    workers = workers or max(1, min(len(fns), os.cpu_count() or 1))
    t0 = time.perf_counter()
    if workers == 1:
        for fn in fns:
            block(fn())
    else:
        with ThreadPoolExecutor(workers) as pool:
            for fut in [pool.submit(lambda f=fn: block(f())) for fn in fns]:
                fut.result()  # re-raises a case's error
    return time.perf_counter() - t0


def interleaved_samples(fns: dict[str, Callable[[], Any]], rounds: int = 5, warmup: int = 1) -> dict[str, list[float]]:
    """Wall times of several functions measured in interleaved rounds (A B C A B C …), so
    that machine noise hits all of them alike; each is run ``warmup`` times first (compile).
    Returns every sample, so callers can form per-round ratios."""
    for fn in fns.values():
        for _ in range(warmup):
            block(fn())
    samples: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            block(fn())
            samples[k].append(time.perf_counter() - t0)
    return samples


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int = 5) -> dict[str, float]:
    """Median times of several functions measured in interleaved rounds (A B A B …), so
    that machine noise hits all of them alike; each is warmed up (compiled) first."""
    return {k: statistics.median(v) for k, v in interleaved_samples(fns, repeats).items()}


def ratios(samples: dict[str, list[float]], baseline: str) -> dict[str, dict[str, float]]:
    """Per variant: ``ratio_min`` (its fastest round over the baseline's fastest round) and
    ``ratio_median`` (the median over rounds of the ratio within the same round)."""
    base = samples[baseline]
    out = {}
    for k, v in samples.items():
        out[k] = {
            "ratio_min": min(v) / min(base),
            "ratio_median": statistics.median(a / b for a, b in zip(v, base)),
        }
    return out


def environment() -> dict:
    dev = jax.devices()[0]
    return {
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "device": getattr(dev, "device_kind", str(dev)),
        "devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
    }


def emit(name: str, results: dict) -> None:
    """Print the benchmark's JSON (one object) to stdout."""
    print(json.dumps({"benchmark": name, "environment": environment(), **results}, indent=1))


def run_step_samples(algorithm: Any, hooks: Any, steps: int, repeats: int, workers: int | None = None) -> list[float]:
    """Seconds per iteration of ``scarjax.run(algorithm, hooks, steps, seed,
    workers=workers)`` for each of ``repeats`` fresh seeds, after one compiling run."""
    import scarjax

    def go(seed):
        block(scarjax.run(algorithm, hooks, steps, seed, workers=workers))

    go(0)
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        go(r + 1)
        times.append((time.perf_counter() - t0) / steps)
    return times


def run_seconds_per_step(algorithm: Any, hooks: Any, steps: int, repeats: int, workers: int | None = None) -> float:
    """Median of :func:`run_step_samples`: seconds per iteration over ``repeats`` fresh seeds."""
    return statistics.median(run_step_samples(algorithm, hooks, steps, repeats, workers))
