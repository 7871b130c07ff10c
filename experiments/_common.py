"""Shared plumbing for experiments: results I/O, figures, confidence intervals, progress."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterable

import numpy as np

__all__ = ["pyplot", "save_results", "load_results", "figure_path", "save_figure", "mean_ci", "progress", "to_jsonable"]


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


def mean_ci(x: Any, axis: int = -1, level: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Mean and half-width of the Student-t confidence interval (thesis: 95% CIs over 100
    trials). Infinite entries are excluded (and should be reported separately)."""
    from scipy import stats

    a = np.asarray(x, dtype=np.float64)
    a = np.where(np.isfinite(a), a, np.nan)
    n = np.sum(~np.isnan(a), axis=axis)
    mean = np.nanmean(a, axis=axis)
    sd = np.nanstd(a, axis=axis, ddof=1) if np.all(n > 1) else np.zeros_like(mean)
    t = stats.t.ppf(0.5 + level / 2, np.maximum(n - 1, 1))
    return mean, t * sd / np.sqrt(np.maximum(n, 1))


def progress(iterable: Iterable, desc: str, total: int | None = None) -> Iterable:
    """A tqdm progress bar on stderr (disabled when ``SCARJAX_NO_PROGRESS`` is set)."""
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=False, disable=bool(os.environ.get("SCARJAX_NO_PROGRESS")))
