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
The experiments of one group of :data:`experiments.TOGETHER` share memoised problems and
compiled programs (e.g. the MLR optimum, the genetic search's programs): they run one after
another in the same worker, as one unit of the schedule (ordered by their summed cost), so
that each shared program compiles once per run rather than once per worker. The
experiments named in :data:`experiments.ALONE` time this machine's own speed and run
last, one at a time with no other experiment of this run beside them, as they would in the
sequential command; those also in :data:`experiments.EARLY_SET_UP` start as soon as only
``alone`` experiments are left to start, each in a worker of its own (the pool has one more
worker per such experiment than ``N``: they mostly wait), set up (start processes, compile)
beside the last others, and wait in :func:`experiments._common.wait_alone` (a flag file whose
path the worker finds in ``SCARJAX_ALONE_FLAG``; it marks its waiting with a second file) before
they time anything. The first started of them is let on once no other experiment runs
beside it but early ones that wait there, the next once that one has finished, and so on:
whatever times, times alone (the others blocked, using no CPU). Each
experiment writes its results JSON and figure exactly as in-process
(:func:`experiments._common.recorded`); workers run with ``SCARJAX_NO_PROGRESS`` set (no
per-experiment bars) and the parent shows one bar over the experiments. Their BLAS and OpenMP
thread pools have one thread each (``OPENBLAS_NUM_THREADS`` etc., unless set already): the
workers share the cores, and a multi-threaded BLAS call beside a busy core spins (on the shared
2-core machine an OpenBLAS QR of a 512 x 512 matrix took 3.3 CPU s with 2 threads, 0.04 s with 1).

A failure (an exception in the experiment, or a worker that dies) stops new experiments from
starting; those already running finish, and :class:`ExperimentError` names the failed
experiment(s) with the tail of each worker's traceback.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

from tqdm.auto import tqdm

from experiments._common import ALONE_FLAG_ENV, ALONE_WAITING_SUFFIX

__all__ = ["ExperimentError", "run_parallel", "schedule"]

_TAIL = 3000  # characters of a worker's traceback kept in the error
_ONE_THREAD = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")  # "1" in the workers
_POLL_S = 0.05  # how often the parent looks for early experiments waiting in wait_alone


class ExperimentError(RuntimeError):
    """Experiments that failed in their worker processes: ``failures`` is
    ``[(NAME, traceback tail), ...]`` in the order they failed."""

    def __init__(self, failures: list[tuple[str, str]]):
        self.failures = failures
        names = ", ".join(n for n, _ in failures)
        body = "\n".join(f"--- {n} ---\n{tb.rstrip()}" for n, tb in failures)
        super().__init__(f"experiment(s) {names} failed in a worker process:\n{body}")


def _units(names: Iterable[str], together: Iterable[Iterable[str]] = ()) -> list[tuple[str, ...]]:
    """``names`` as the units a worker runs: each group of ``together`` (its members among
    ``names``, in the group's order) at the place of its first member, every other name alone.

    Raises:
      ValueError: a name in two groups.
    """
    names = list(names)
    group_of: dict[str, tuple[str, ...]] = {}
    for group in together:
        group = tuple(group)
        for n in group:
            if n in group_of:
                raise ValueError(f"together: {n!r} is in two groups, {group_of[n]} and {group}")
            group_of[n] = group
    units, seen = [], set()
    for n in names:
        if n in seen:
            continue
        unit = tuple(m for m in group_of.get(n, (n,)) if m in names) if n in group_of else (n,)
        seen.update(unit)
        units.append(unit)
    return units


def schedule(names: Iterable[str], quick: bool, cost: Mapping[str, tuple[float, float]],
             alone: Iterable[str] = (), together: Iterable[Iterable[str]] = ()) -> list[str]:
    """``names`` in the order :func:`run_parallel` starts them: longest first by ``cost``
    (``{NAME: (quick seconds, full seconds)}``; a name missing from it counts as longest;
    ties keep the given order), then the ``alone`` experiments in the same order. A group of
    ``together`` is one unit, placed by its members' summed cost, its members consecutive in
    the group's order (a group must not mix ``alone`` and other experiments)."""
    return [n for unit in _schedule_units(names, quick, cost, alone, together) for n in unit]


def _schedule_units(names, quick, cost, alone=(), together=()) -> list[tuple[str, ...]]:
    """:func:`schedule`'s order as units (tuples of names that run in one worker)."""
    alone = set(alone)
    units = _units(names, together)
    for unit in units:
        if len(unit) > 1 and alone & set(unit):
            raise ValueError(f"together: group {unit} mixes experiments of `alone` with others")

    def key(unit: tuple[str, ...]) -> float:
        return -sum(cost[n][0 if quick else 1] if n in cost else float("inf") for n in unit)

    return sorted((u for u in units if u[0] not in alone), key=key) + sorted((u for u in units if u[0] in alone),
                                                                         key=key)


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


def _run_unit(modules: list[str], quick: bool, out_dir: str, alone_flag: str | None = None) -> list[dict]:
    """In a worker: :func:`_run_one` for each of ``modules`` in turn (one unit of
    :func:`schedule`), stopping after the first that fails; one result per module run.
    ``alone_flag``: the file whose existence tells :func:`experiments._common.wait_alone` that
    the unit runs alone (an experiment started early), in ``SCARJAX_ALONE_FLAG`` meanwhile."""
    out = []
    if alone_flag:
        os.environ[ALONE_FLAG_ENV] = alone_flag
    try:
        for module in modules:
            out.append(_run_one(module, quick, out_dir))
            if "error" in out[-1]:
                break
    finally:
        os.environ.pop(ALONE_FLAG_ENV, None)
    return out


def run_parallel(modules: Mapping[str, str], quick: bool, out_dir: str | os.PathLike, jobs: int, *,
                 cost: Mapping[str, tuple[float, float]], alone: Iterable[str] = (),
                 together: Iterable[Iterable[str]] = (), early: Iterable[str] = (),
                 done_line: Callable[[str, float | None], str] = lambda n, s: f"{n}: done") -> list[str]:
    """Run the experiments ``modules`` (``{NAME: module path}``) in ``jobs`` worker
    processes, in :func:`schedule`'s order (each group of ``together`` in one worker, one
    after another), writing into ``out_dir``; prints ``done_line(NAME, wall seconds)`` as
    each finishes (a group's members when the group has finished) and returns the names in
    the order they finished. An ``alone`` experiment also in ``early`` starts beside the last
    others, in a worker of its own, and waits in :func:`experiments._common.wait_alone` until
    they have finished and every other early one running beside it waits there too; the
    early ones are let on one at a time, in the order they started.

    Raises:
      ValueError: ``jobs`` below 1; a name in two groups of ``together``, or a group mixing
        ``alone`` experiments with others.
      ExperimentError: an experiment failed (after the running ones have finished).
    """
    if int(jobs) < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs!r}")
    alone, early = set(alone), set(early)
    queue = _schedule_units(modules, quick, cost, alone, together)
    n_early = sum(u[0] in alone and u[0] in early for u in queue)
    running: dict[Future, tuple[str, ...]] = {}
    flags: dict[Future, str] = {}  # alone_flag of each early experiment running, in the order they started
    timing: Future | None = None  # the early experiment let on (its flag written), until it ends
    flag_dir = tempfile.TemporaryDirectory(prefix="scarjax_alone_")
    finished: list[str] = []
    failures: list[tuple[str, str]] = []
    bar = tqdm(total=sum(map(len, queue)), desc="reproduce", unit="exp", file=sys.stderr, leave=False,
               disable=bool(os.environ.get("SCARJAX_NO_PROGRESS")))
    ctx = multiprocessing.get_context("spawn")
    one_thread = [v for v in _ONE_THREAD if v not in os.environ]  # spawned workers inherit os.environ
    os.environ.update({v: "1" for v in one_thread})
    shown = lambda: ", ".join(n for unit in running.values() for n in unit)  # noqa: E731
    postfix = None
    try:
        workers = int(jobs) + n_early  # the early ones' own workers
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init) as pool:
            while queue or running:
                # start what may start: up to `jobs` others at once; the early `alone` ones as soon
                # as only `alone` ones are left to start (beside the others, early ones only);
                # any other `alone` one by itself
                while queue and not failures:
                    head = queue[0][0]
                    if head in alone and head in early:
                        if any(u[0] in alone and u[0] not in early for u in running.values()):
                            break
                    elif head in alone:
                        if running:
                            break
                    elif len(running) >= jobs:
                        break
                    unit = queue.pop(0)
                    flag = os.path.join(flag_dir.name, f"{head}.alone") if head in alone else None
                    fut = pool.submit(_run_unit, [modules[n] for n in unit], quick, str(out_dir), flag)
                    running[fut] = unit
                    if flag and head in early:
                        flags[fut] = flag
                    elif flag:  # nothing runs beside it
                        open(flag, "w").close()
                # the first early experiment may time once everything else running waits in wait_alone
                if timing is None and flags and all(fut in flags for fut in running):
                    first = next(iter(flags))
                    if all(os.path.exists(flags[f] + ALONE_WAITING_SUFFIX) for f in flags if f is not first):
                        open(flags.pop(first), "w").close()
                        timing = first
                if postfix != (now := shown()):  # (redrawn when it changes, not at every look)
                    bar.set_postfix_str(postfix := now, refresh=True)
                # (while only early ones run, none let on: look again for their waiting marks)
                poll = _POLL_S if timing is None and flags and all(fut in flags for fut in running) else None
                done, _ = wait(list(running), timeout=poll, return_when=FIRST_COMPLETED)
                for fut in done:
                    unit = running.pop(fut)
                    flags.pop(fut, None)
                    if fut is timing:
                        timing = None
                    try:
                        rs = fut.result()
                    except Exception as e:  # noqa: BLE001 - a dead worker (BrokenProcessPool) or unpicklable result
                        rs = [{"error": "".join(traceback.format_exception(e))
                               + "\n(the worker process running it ended abnormally: killed, or out of memory?)"}]
                        unit = (" or ".join(unit),) if len(unit) > 1 else unit  # which one ran is unknown
                    for name, r in zip(unit, rs):
                        if "error" in r:
                            failures.append((name, r["error"][-_TAIL:]))
                            queue.clear()
                            if running:
                                bar.write(f"[scarjax] {name}: FAILED; waiting for {shown()} to finish",
                                          file=sys.stdout)
                            continue
                        finished.append(name)
                        bar.update(1)
                        bar.write(done_line(name, r.get("wall_s")), file=sys.stdout)
                        sys.stdout.flush()
    finally:
        bar.close()
        flag_dir.cleanup()
        for v in one_thread:
            os.environ.pop(v, None)
    if failures:
        raise ExperimentError(failures)
    return finished
