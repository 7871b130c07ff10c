"""Shared plumbing for experiments: results I/O (:func:`to_jsonable` and its inverse
:func:`revive`, :func:`save_results`, :func:`load_results`), run metadata
(:func:`recorded`), progress bars.

Statistics over trials live in :mod:`experiments._stats` (censoring-aware: a trial that
never re-converged is never dropped from a mean or a bound check), the rework layer in
:mod:`experiments._rework`, the figures' style in :mod:`experiments._plot`."""

from __future__ import annotations

import datetime as _dt
import functools
import importlib
import json
import math
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import jax
import numpy as np

__all__ = ["to_jsonable", "revive", "save_results", "load_results", "plot_results", "progress", "trial_chunk",
           "recorded", "run_meta", "machine", "shared_data_root", "shown_path", "compiler_options"]


def to_jsonable(x: Any) -> Any:
    """Convert numpy/jax values (recursively) to JSON-serialisable Python values;
    non-finite floats become the strings ``"inf"``, ``"-inf"``, ``"nan"``."""
    if isinstance(x, dict):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_jsonable(v) for v in x]
    if hasattr(x, "tolist") and not isinstance(x, (str, bytes)):
        return to_jsonable(x.tolist())
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return to_jsonable(float(x))
    return x


def save_results(out_dir: str | os.PathLike, name: str, results: dict) -> Path:
    """Write ``out_dir/results/<name>.json``."""
    path = Path(out_dir) / "results" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_jsonable(results), indent=1) + "\n")
    return path


_NONFINITE = {"inf": np.inf, "-inf": -np.inf, "nan": np.nan}


def revive(obj: Any) -> Any:
    """Undo :func:`to_jsonable`'s strings for non-finite floats (results loaded back from
    JSON): ``"inf"``, ``"-inf"``, ``"nan"`` become floats again, recursively."""
    if isinstance(obj, dict):
        return {k: revive(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [revive(v) for v in obj]
    if isinstance(obj, str) and obj in _NONFINITE:
        return _NONFINITE[obj]
    return obj


def load_results(out_dir: str | os.PathLike, name: str, *, revived: bool = False) -> dict | None:
    """``out_dir/results/<name>.json`` as written (``revived``: through :func:`revive`), or
    None when there is none."""
    path = Path(out_dir) / "results" / f"{name}.json"
    if not path.exists():
        return None
    results = json.loads(path.read_text())
    return revive(results) if revived else results


def plot_results(module: Any, out_dir: str | os.PathLike, results_dir: str | os.PathLike | None = None) -> list:
    """Draw ``module``'s figure(s) into ``out_dir/paper_figs`` from its saved results alone
    (``results_dir/results/NAME.json``, default ``out_dir``) with its ``plot(results,
    out_dir)``; returns the paths written. ``FileNotFoundError`` when there are no results."""
    results = load_results(results_dir if results_dir is not None else out_dir, module.NAME, revived=True)
    if results is None:
        raise FileNotFoundError(f"no results/{module.NAME}.json in {results_dir if results_dir is not None else out_dir}")
    paths = module.plot(results, out_dir)
    return list(paths) if isinstance(paths, (list, tuple)) else [paths]


def trial_chunk(n: int, chunks: int = 8, most: int = 250) -> int:
    """Trials per compiled program for ``n`` trials (``chunk_size=`` of
    :func:`scarjax.run_trials` / ``simulate_failures``): about ``chunks`` equal chunks of at
    most ``most`` trials, so that a long run shows its progress chunk by chunk (``run_trials``
    pads the last chunk: one compilation serves them all)."""
    return max(1, min(int(most), -(-int(n) // int(chunks))))


def shared_data_root() -> Path:
    """The shared data folder: ``$SCARJAX_SHARED_DATA``, else ``shared/data`` beside the
    checkout (the full spot-price history and other data too large to embed)."""
    return Path(os.environ.get("SCARJAX_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as a report prints it, never a machine's absolute path: under the shared data
    root as ``$SCARJAX_SHARED_DATA/...``, otherwise its file name."""
    p = Path(path).resolve()
    try:
        return "$SCARJAX_SHARED_DATA/" + p.relative_to(shared_data_root().resolve()).as_posix()
    except ValueError:
        return p.name


def progress(iterable: Iterable, desc: str, total: int | None = None) -> Iterable:
    """A tqdm progress bar on stderr (disabled when ``SCARJAX_NO_PROGRESS`` is set, and over
    a single item: a 1/1 bar that stands still for minutes tells nothing; the work inside
    shows its own, e.g. ``run_trials``' bar over trial chunks, see :func:`trial_chunk`)."""
    # tqdm (progress bars) is optional output, imported only when shown
    from tqdm.auto import tqdm

    n = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)
    quiet = bool(os.environ.get("SCARJAX_NO_PROGRESS")) or n == 1
    return tqdm(iterable, desc=desc, total=total, leave=False, disable=quiet)


ALONE_FLAG_ENV = "SCARJAX_ALONE_FLAG"  # set by experiments._parallel for an experiment started early
ALONE_WAITING_SUFFIX = ".waiting"  # the flag's path + this: written by wait_alone while it waits


def wait_alone(poll: float = 0.05) -> None:
    """Block until no other experiment of this ``scarjax reproduce`` runs beside this one.

    An experiment of :data:`experiments.EARLY_SET_UP` is started by
    :func:`experiments.run_parallel` while the last other experiments still run; it sets up
    (starts processes, compiles) beside them and calls this before it times anything. While it
    waits here it marks so (a file beside the flag), which lets another early experiment time
    meanwhile: it runs no code here until let on. Returns at once outside such a run (one
    experiment, ``--jobs 1``, or a direct ``run`` call)."""
    flag = os.environ.get(ALONE_FLAG_ENV)
    if not flag or os.path.exists(flag):
        return
    open(flag + ALONE_WAITING_SUFFIX, "w").close()
    while not os.path.exists(flag):
        time.sleep(poll)


# ----------------------------------------------------------------------------- run metadata

_REPO = Path(__file__).resolve().parents[1]


def _git() -> dict | None:
    """``{"commit", "dirty"}`` of the source tree the experiments run from (None outside git)."""
    try:
        commit = subprocess.run(["git", "-C", str(_REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        status = subprocess.run(["git", "-C", str(_REPO), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(status.strip())} if commit else None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def _utc() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def machine() -> dict:
    """The machine an experiment runs on: platform, Python, JAX and its devices, CPUs."""
    devices = jax.devices()
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "cpu_count": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "jax_backend": jax.default_backend(),
        "jax_devices": len(devices),
        "jax_device_kinds": sorted({d.device_kind for d in devices}),
    }


def _mode(config: Any) -> str:
    """``'quick'`` (``Config.quick()``), ``'full'`` (``Config()``) or ``'custom'``."""
    cls = type(config)
    try:
        if hasattr(cls, "quick") and config == cls.quick():
            return "quick"
        if config == cls():
            return "full"
    except TypeError:
        pass
    return "custom"


def run_meta(config: Any, started: str, wall_s: float, load_start: list | None) -> dict:
    """The ``meta`` block every result carries (see :func:`recorded`)."""
    return {
        "started_utc": started,
        "finished_utc": _utc(),
        "wall_s": float(wall_s),
        "mode": _mode(config),
        "loadavg_start": load_start,
        "loadavg_end": _loadavg(),
        "git": _git(),
        **machine(),
    }


def recorded(name: str) -> Callable:
    """Decorator for an experiment's ``run(config, out_dir)``: times the call and writes
    its results, with a ``meta`` block (:func:`run_meta`: start/end UTC, wall time, quick
    or full, platform, Python, JAX and devices, CPUs, load average at start and end, git
    commit), to ``out_dir/results/<name>.json`` — the one place results are saved, so they
    carry their metadata however ``run`` is called — then draws the figure with the
    experiment module's ``plot`` from that file (:func:`plot_results`), so every figure
    can be redrawn from the results alone (``scarjax replot``)."""

    def deco(run: Callable) -> Callable:
        @functools.wraps(run)
        def wrapper(config, out_dir, *args, **kwargs):
            started, load0, t0 = _utc(), _loadavg(), time.perf_counter()
            results = run(config, out_dir, *args, **kwargs)
            if isinstance(results.get("config"), dict):  # paths in the inputs as reports print them
                results["config"] = {k: shown_path(v) if isinstance(v, str) and os.path.isabs(v) else v
                                     for k, v in results["config"].items()}
            results["meta"] = run_meta(config, started, time.perf_counter() - t0, load0)
            save_results(out_dir, name, results)
            module = importlib.import_module(run.__module__)
            if hasattr(module, "plot"):
                plot_results(module, out_dir)
            return results

        return wrapper

    return deco


def compiler_options(fast_compile: bool) -> dict | None:
    """``jax.jit``'s ``compiler_options`` of a quick run: XLA's backend optimisation level 0
    when ``fast_compile`` (programs compile faster and run slower; the numbers may move in
    their last bits), else ``None`` (XLA's defaults, the full runs)."""
    return {"xla_backend_optimization_level": 0} if fast_compile else None
