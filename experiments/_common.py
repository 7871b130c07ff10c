"""Shared plumbing for experiments: results I/O with run metadata, figures, progress.

Statistics over trials live in :mod:`experiments._stats` (censoring-aware: a trial that
never re-converged is never dropped from a mean or a bound check)."""

from __future__ import annotations

import datetime as _dt
import functools
import json
import math
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

__all__ = ["pyplot", "save_results", "load_results", "figure_path", "save_figure", "progress", "to_jsonable",
           "recorded", "run_meta", "machine"]


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


def load_results(out_dir: str | os.PathLike, name: str) -> dict | None:
    path = Path(out_dir) / "results" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def figure_path(out_dir: str | os.PathLike, name: str) -> Path:
    path = Path(out_dir) / "paper_figs" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend (experiments run headless)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: Any, out_dir: str | os.PathLike, name: str) -> Path:
    """Save a matplotlib figure to ``out_dir/paper_figs/<name>.png`` and close it."""
    import matplotlib.pyplot as plt

    path = figure_path(out_dir, name)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def progress(iterable: Iterable, desc: str, total: int | None = None) -> Iterable:
    """A tqdm progress bar on stderr (disabled when ``SCARJAX_NO_PROGRESS`` is set)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, disable=bool(os.environ.get("SCARJAX_NO_PROGRESS")))


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
    import jax

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
    carry their metadata however ``run`` is called."""

    def deco(run: Callable) -> Callable:
        @functools.wraps(run)
        def wrapper(config, out_dir, *args, **kwargs):
            started, load0, t0 = _utc(), _loadavg(), time.perf_counter()
            results = run(config, out_dir, *args, **kwargs)
            results["meta"] = run_meta(config, started, time.perf_counter() - t0, load0)
            save_results(out_dir, name, results)
            return results

        return wrapper

    return deco
