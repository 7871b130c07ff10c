"""One plotting style for every experiment's figures.

Every figure is drawn by its experiment's ``plot(results, out_dir)`` from the results
JSON alone (``scarjax replot`` redraws them without re-running) through this module:

* :func:`pyplot` — matplotlib on the headless Agg backend with the shared style
  (:data:`RC`: font sizes, line widths, the default colour cycle);
* :func:`figure` — a grid of panels of one size (:data:`PANEL` inches each) with
  ``constrained_layout``, which places titles, labels and tick labels so that no label
  runs into a neighbouring panel (a fixed ``tight_layout``/``wspace`` cannot: the y-label
  of thesis-style panels with 4-digit ticks needs more room than the default gap);
* :data:`COLORS` — the colours with a meaning shared by every figure (measured trials,
  the Thm 5.3.1 bound, the bound restarted at the perturbation, censored trials);
* :func:`rework_scatter` — the thesis's rework-vs-x panel (Figs 5.3, 5.5, 5.6);
* :func:`readable_log` — tick labels a reader can read on a log axis whose data span less
  than a decade (or a few per cent: then the axis becomes linear);
* :func:`legend_all` — one legend naming every labelled line of several panels once;
* :func:`plural` — ``"1 plan"``, ``"40 plans"``;
* :func:`save` — writes ``out_dir/paper_figs/<name>.png`` and warns if any text of one
  panel overlaps another panel (:func:`overlaps`).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["RC", "PANEL", "DPI", "COLORS", "pyplot", "figure", "save", "overlaps", "rework_scatter", "span",
           "figure_path", "readable_log", "legend_all", "plural"]

DPI = 120
PANEL = (4.0, 3.3)  # (width, height) of one panel, inches
COLORS = {
    "trials": "tab:blue",  # measured rework, one point per trial
    "bound": "red",  # the Thm 5.3.1 bound (Eq 5.6 as printed, from w⁽⁰⁾)
    "restarted": "orange",  # the bound restarted at the perturbation
    "censored": "black",  # trials that never re-reached ε, drawn at their horizon
    "reference": "gray",  # ε, the float32 floor, a target loss: horizontal references
}
RC = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 7,
    "legend.framealpha": 0.8,
    "figure.titlesize": 10,
    "lines.linewidth": 1.4,
    "lines.markersize": 4,
    "errorbar.capsize": 3,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "figure.constrained_layout.use": True,
    "figure.constrained_layout.w_pad": 0.06,
    "figure.constrained_layout.h_pad": 0.06,
}


def pyplot():
    """matplotlib's pyplot on the non-interactive Agg backend with :data:`RC` applied
    (experiments run headless)."""
    # matplotlib is slow to import and needed only to draw
    import matplotlib

    matplotlib.use("Agg")
    # matplotlib is slow to import and needed only to draw
    import matplotlib.pyplot as plt

    matplotlib.rcParams.update(RC)
    return plt


def figure(nrows: int = 1, ncols: int = 1, *, panel: tuple[float, float] = PANEL, title: str | None = None,
           **kwargs: Any):
    """``(fig, axes)``: an ``nrows x ncols`` grid (``axes`` always 2-D) of panels of size
    ``panel`` inches, laid out by ``constrained_layout``; ``title``: the figure's suptitle."""
    if nrows < 1 or ncols < 1:
        raise ValueError(f"nrows and ncols must be >= 1, got nrows={nrows}, ncols={ncols}")
    plt = pyplot()
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows), squeeze=False,
                             layout="constrained", **kwargs)
    if title:
        fig.suptitle(title)
    return fig, axes


def figure_path(out_dir: str | os.PathLike, name: str) -> Path:
    """``out_dir/paper_figs/<name>.png`` (its folder created)."""
    path = Path(out_dir) / "paper_figs" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def save(fig: Any, out_dir: str | os.PathLike, name: str) -> Path:
    """Save ``fig`` to ``out_dir/paper_figs/<name>.png`` and close it; warns (``UserWarning``)
    naming the texts when a panel's labels overlap another panel (:func:`overlaps`)."""
    # matplotlib is slow to import and needed only to draw
    import matplotlib.pyplot as plt

    path = figure_path(out_dir, name)
    bad = overlaps(fig)
    if bad:
        warnings.warn(f"figure {name!r}: overlapping labels: {'; '.join(bad)}", UserWarning, stacklevel=2)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return path


def _boxes(ax, renderer) -> dict[str, Any]:
    """The text of one panel outside its plotting area: tick labels with the axis label
    (one box per axis) and the title."""
    out = {}
    for name, axis in (("x-axis", ax.xaxis), ("y-axis", ax.yaxis)):
        if axis.get_visible():
            box = axis.get_tightbbox(renderer)
            if box is not None and box.width > 0 and box.height > 0:
                out[name] = box
    if ax.get_title():
        out[f"title {ax.get_title()[:30]!r}"] = ax.title.get_window_extent(renderer)
    return out


def overlaps(fig: Any, tol: float = 1.0) -> list[str]:
    """Texts of one panel (tick labels, axis labels, title) that overlap another panel's
    plotting area or texts, or the figure's suptitle, by more than ``tol`` pixels: e.g.
    a y-label drawn over the tick labels of the panel to its left. Twin axes (same
    position) are one panel. Returns descriptions, empty when the layout is clean."""
    # matplotlib is slow to import and needed only to draw
    from matplotlib.transforms import Bbox

    # The layout and every text's extent without rasterising the figure (savefig draws it):
    # the same boxes as fig.canvas.draw(), at a fraction of its time.
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    axes = [a for a in fig.axes if a.get_visible()]
    pos = [tuple(np.round(a.get_position().bounds, 4)) for a in axes]
    boxes = [_boxes(a, renderer) for a in axes]

    def label(i):
        t = axes[i].get_title() or next((a.get_title() for a, p in zip(axes, pos) if p == pos[i] and a.get_title()), "")
        return f"panel {i}" + (f" ({t[:30]!r})" if t else "")

    def hit(a: Bbox, b: Bbox) -> bool:
        return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)

    out = []
    for i, j in ((i, j) for i in range(len(axes)) for j in range(len(axes)) if i != j and pos[i] != pos[j]):
        for what, box in boxes[i].items():
            if hit(box, axes[j].bbox):
                out.append(f"{label(i)} {what} over the plotting area of {label(j)}")
            if i < j:
                out += [f"{label(i)} {what} over {label(j)} {w2}" for w2, b2 in boxes[j].items() if hit(box, b2)]
    sup = getattr(fig, "_suptitle", None)
    if sup is not None and sup.get_text():
        sb = sup.get_window_extent(renderer)
        for i, bx in enumerate(boxes):
            out += [f"suptitle over {label(i)} {w}" for w, b in bx.items() if hit(sb, b)]
    return list(dict.fromkeys(out))


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """``"1 plan"``, ``"2 plans"`` (``nouns``: an irregular plural)."""
    return f"{n} {noun if n == 1 else (nouns or noun + 's')}"


def readable_log(ax, axis: str = "both", *, linear_below: float = 3.0) -> None:
    """Make the tick labels of the log-scaled (base 10) ``axis`` (``'x'``, ``'y'`` or
    ``'both'``) of ``ax`` readable, after its data are drawn: over less than a factor
    ``linear_below`` (e.g. a 2% range) the axis becomes linear (plain labels, no offset);
    with fewer than three powers of ten in view, majors at 1, 2, (3,) 5 times each power with
    plain ``%g`` labels (matplotlib would label one tick, or crowd ``2×10⁰``-style labels
    over a few per cent). Linear and base-2 axes are left alone."""
    # matplotlib is slow to import and needed only to draw
    from matplotlib import ticker  # matplotlib: imported when drawing (see pyplot)

    for name in ("x", "y") if axis == "both" else (axis,):
        ax_ = getattr(ax, f"{name}axis")
        if ax_.get_scale() != "log" or getattr(ax_.get_transform(), "base", 10) != 10:
            continue
        lo, hi = sorted(getattr(ax, f"get_{name}lim")())
        if not (lo > 0 and np.isfinite(hi)):
            continue
        if hi / lo < linear_below:
            getattr(ax, f"set_{name}scale")("linear")
            getattr(ax, f"set_{name}lim")(lo, hi)
            ax_.set_major_locator(ticker.MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]))  # 1.000 … 1.020
            ax_.set_major_formatter(ticker.ScalarFormatter(useOffset=False))
            continue
        decades = np.floor(np.log10(hi)) - np.ceil(np.log10(lo)) + 1  # powers of ten in view
        if decades < 3:
            subs = (1.0, 2.0, 3.0, 5.0) if decades < 2 else (1.0, 2.0, 5.0)
            ax_.set_major_locator(ticker.LogLocator(base=10, subs=subs))
            ax_.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax_.set_minor_formatter(ticker.NullFormatter())


def legend_all(axes, ax=None, *, below: bool = False, **kwargs: Any):
    """One legend naming every labelled artist of every panel in ``axes`` once (the first
    artist of each label): e.g. a marker that only a later panel draws still appears. In
    ``ax`` (default: the first of ``axes``), or with ``below`` under the whole figure (up to
    two entries per panel in a row; for a row of panels whose data leave no free corner). Returns the legend (None when
    nothing is labelled)."""
    axes = list(np.ravel(axes))
    handles: dict[str, Any] = {}
    for a in axes:
        for h, lab in zip(*a.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    if not handles:
        return None
    if below:
        kwargs = {"loc": "outside lower center", "ncols": min(len(handles), 2 * len(axes)), **kwargs}
        return axes[0].figure.legend(list(handles.values()), list(handles), **kwargs)
    return (ax if ax is not None else axes[0]).legend(list(handles.values()), list(handles), **kwargs)


def span(x: Any, n: int = 200) -> np.ndarray:
    """Log-spaced points covering the positive finite values of ``x`` (for bound curves)."""
    x = np.asarray(x, np.float64)
    x = x[np.isfinite(x) & (x > 0)]
    lo, hi = (x.min() / 2, x.max() * 2) if x.size else (1e-3, 1.0)
    return np.logspace(np.log10(lo), np.log10(hi), n)


def rework_scatter(ax, x, rework, horizon, hit, *, xlabel: str, title: str, bound_x=None, bound_y=None,
                   bound_label: str = "Thm 5.3.1 bound", ylabel: str = "rework (iterations)", logx: bool = True) -> None:
    """Rework against ``x`` for the trials selected by ``hit`` (the perturbed ones), the
    thesis's figure style: re-converged trials in blue, trials that never re-reached ε at
    their ``horizon`` (black triangles, a lower bound), the bound curve in red."""
    x, r, h = (np.asarray(a, np.float64) for a in (x, rework, horizon))
    hit = np.asarray(hit, bool)
    fin = np.isfinite(r) & hit
    ax.scatter(x[fin], r[fin], s=4, alpha=0.5, color=COLORS["trials"], label="trials")
    cens = ~np.isfinite(r) & hit
    if cens.any():
        ax.scatter(x[cens], h[cens], s=12, marker="^", color=COLORS["censored"],
                   label=f"not re-converged ({int(cens.sum())}; at the horizon)")
    if bound_x is not None:
        ax.plot(bound_x, bound_y, color=COLORS["bound"], lw=1.5, label=bound_label)
    if logx:
        ax.set_xscale("log")
        readable_log(ax, "x")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
