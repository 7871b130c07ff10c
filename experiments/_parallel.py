"""Run experiments concurrently, each in a worker process: ``scarjax reproduce --jobs N``.

Most of a quick reproduction is XLA compilation, which runs on one core; ``N`` worker
processes (``spawn`` start method: fresh interpreters with the parent's environment, so
``XLA_FLAGS``, ``JAX_PLATFORMS`` and the ``SCARJAX_*`` variables an experiment reads are the
same as in the parent; experiments that launch their own JAX processes build those
environments from it, see :mod:`experiments._launch`) keep every core busy. A worker is
reused for the next experiment, so memoised problems and compiled functions (e.g. the MLR
optimum of :mod:`experiments._problems`) are shared by the experiments that land in it.

Order: longest first by :data:`experiments.COST` (a static table of measured wall times;
unknown names count as longest), so that the last experiments to finish are short ones.
The experiments named in :data:`experiments.ALONE` time this machine's own speed and run
last, one at a time with no other experiment of this run beside them, as they would in the
sequential command. Each experiment writes its results JSON and figure exactly as in-process
(:func:`experiments._common.recorded`); workers run with ``SCARJAX_NO_PROGRESS`` set (no
per-experiment bars) and the parent shows one bar over the experiments.

A failure (an exception in the experiment, or a worker that dies) stops new experiments from
starting; those already running finish, and :class:`ExperimentError` names the failed
experiment(s) with the tail of each worker's traceback.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

from tqdm.auto import tqdm

__all__ = ["ExperimentError", "run_parallel", "schedule"]

_TAIL = 3000  # characters of a worker's traceback kept in the error


class ExperimentError(RuntimeError):
    """Experiments that failed in their worker processes: ``failures`` is
    ``[(NAME, traceback tail), ...]`` in the order they failed."""

    def __init__(self, failures: list[tuple[str, str]]):
        self.failures = failures
        names = ", ".join(n for n, _ in failures)
        body = "\n".join(f"--- {n} ---\n{tb.rstrip()}" for n, tb in failures)
        super().__init__(f"experiment(s) {names} failed in a worker process:\n{body}")


def schedule(names: Iterable[str], quick: bool, cost: Mapping[str, tuple[float, float]],
             alone: Iterable[str] = ()) -> list[str]:
    """``names`` in the order :func:`run_parallel` starts them: longest first by ``cost``
    (``{NAME: (quick seconds, full seconds)}``; a name missing from it counts as longest;
    ties keep the given order), then the ``alone`` experiments in the same order."""
    names, alone = list(names), set(alone)

    def key(n: str) -> float:
        return -cost[n][0 if quick else 1] if n in cost else -float("inf")

    return sorted((n for n in names if n not in alone), key=key) + sorted((n for n in names if n in alone), key=key)


def _worker_init() -> None:
    os.environ["SCARJAX_NO_PROGRESS"] = "1"  # the parent draws the one progress bar


def _run_one(module: str, quick: bool, out_dir: str) -> dict:
    """In a worker: run experiment ``module`` as ``scarjax reproduce`` does in-process;
    ``{"wall_s": seconds or None}``, or ``{"error": traceback}``."""
    try:
        mod = importlib.import_module(module)
        results = mod.run(mod.Config.quick() if quick else mod.Config(), Path(out_dir))
        meta = results.get("meta") if isinstance(results, dict) else None
        return {"wall_s": meta.get("wall_s") if isinstance(meta, dict) else None}
    except Exception:  # reported by the parent with the experiment's name
        return {"error": traceback.format_exc()}


def run_parallel(modules: Mapping[str, str], quick: bool, out_dir: str | os.PathLike, jobs: int, *,
                 cost: Mapping[str, tuple[float, float]], alone: Iterable[str] = (),
                 done_line: Callable[[str, float | None], str] = lambda n, s: f"{n}: done") -> list[str]:
    """Run the experiments ``modules`` (``{NAME: module path}``) in ``jobs`` worker
    processes, in :func:`schedule`'s order, writing into ``out_dir``; prints
    ``done_line(NAME, wall seconds)`` as each finishes and returns the names in the order
    they finished.

    Raises:
      ValueError: ``jobs`` below 1.
      ExperimentError: an experiment failed (after the running ones have finished).
    """
    if int(jobs) < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs!r}")
    alone = set(alone)
    queue = schedule(modules, quick, cost, alone)
    running: dict[Future, str] = {}
    finished: list[str] = []
    failures: list[tuple[str, str]] = []
    bar = tqdm(total=len(queue), desc="reproduce", unit="exp", file=sys.stderr, leave=False,
               disable=bool(os.environ.get("SCARJAX_NO_PROGRESS")))
    ctx = multiprocessing.get_context("spawn")
    try:
        with ProcessPoolExecutor(max_workers=int(jobs), mp_context=ctx, initializer=_worker_init) as pool:
            while queue or running:
                # start what may start: up to `jobs` at once, an `alone` experiment by itself
                while queue and not failures and not any(n in alone for n in running.values()):
                    if (queue[0] in alone and running) or len(running) >= jobs:
                        break
                    name = queue.pop(0)
                    running[pool.submit(_run_one, modules[name], quick, str(out_dir))] = name
                bar.set_postfix_str(", ".join(running.values()), refresh=True)
                done, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for fut in done:
                    name = running.pop(fut)
                    try:
                        r = fut.result()
                    except Exception as e:  # noqa: BLE001 - a dead worker (BrokenProcessPool) or unpicklable result
                        r = {"error": "".join(traceback.format_exception(e))
                             + "\n(the worker process running it ended abnormally: killed, or out of memory?)"}
                    if "error" in r:
                        failures.append((name, r["error"][-_TAIL:]))
                        queue.clear()
                        if running:
                            bar.write(f"[scarjax] {name}: FAILED; waiting for {', '.join(running.values())} to finish",
                                      file=sys.stdout)
                        continue
                    finished.append(name)
                    bar.update(1)
                    bar.write(done_line(name, r.get("wall_s")), file=sys.stdout)
                    sys.stdout.flush()
    finally:
        bar.close()
    if failures:
        raise ExperimentError(failures)
    return finished
