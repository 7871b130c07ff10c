"""The REPRODUCTION.md headline table is built from the SCAR figures' results only, with
censoring-aware means: no trial dropped, censored counts reported, one-sided reductions
marked."""

import numpy as np

from experiments import _headline, _stats

FR = [0.25, 0.5, 0.75]


def _fig7_model(label, partial, full, horizon=50.0):
    """A fig5_7 model entry from per-fraction trial reworks (lists over FR)."""
    p = [_stats.summary(r, horizon) for r in partial]
    f = [_stats.summary(r, horizon) for r in full]
    return {"label": label, "partial": {"cells": p}, "full": {"cells": f},
            "reduction": {str(fr): _stats.reduction(a, b) for fr, a, b in zip(FR, p, f)}}


def _fig9_model(label, p8, trad, horizon=50.0):
    cells = [_stats.summary([9.0, 9.0], horizon), _stats.summary(p8, horizon)]
    t = _stats.summary(trad, horizon)
    return {"label": label, "priority": {"cells": cells}, "traditional": {"cell": t},
            "reduction_priority8_vs_traditional": _stats.reduction(cells[1], t)}


def _results():
    full = [[10.0, 10.0]] * 3
    fig7 = {"config": {"trials": 2, "fractions": FR}, "models": {
        "mlr": _fig7_model("MLR", [[4.0, 4.0], [6.0, 6.0], [8.0, 8.0]], full),
        # 3/4 failed: one partial trial never re-converged -> the reduction is at most 20%.
        "mf": _fig7_model("MF", [[4.0, 4.0], [6.0, 6.0], [6.0, np.inf]], full),
    }}
    fig9 = {"config": {"trials": 2, "frequencies": [1, 8]}, "models": {
        "mlr": _fig9_model("MLR", [2.0, 2.0], [10.0, 10.0]),
        # The baseline has a censored trial: the reduction is at least the printed value.
        "cnn": _fig9_model("CNN", [1.0, 1.0], [10.0, np.inf], horizon=30.0),
    }}
    return {"fig5_7_partial_recovery": fig7, "fig5_9_priority_checkpoint": fig9}


def test_headline_rows_cells_and_censored_counts():
    md = _headline.table(_results())
    assert "| MLR | 20% | 40% | 60% | 80% | 0 of 16 |" in md
    # MF at 3/4: restricted mean (6 + 50)/2 = 28 > full 10: reduction ≤ −180%, one trial censored.
    assert "| MF | ≤ -180% | 40% | 60% | – | 1 of 12 |" in md
    # CNN: traditional mean (10 + 30)/2 = 20 is a lower bound: reduction ≥ 95%.
    assert "| CNN | – | – | – | ≥ 95% | 1 of 4 |" in md
    assert "12–42% | 31–62% | 59–89% | 78–95%" in md
    assert "Fig 5.7: 2" in md and "Fig 5.9: 2" in md
    assert "never re-converged" in md and "∞" not in md


def test_survivor_only_mean_would_have_hidden_the_failure():
    """The MF cell's survivors-only mean (6) would claim a 40% reduction; the table must not."""
    md = _headline.table(_results())
    mf = next(line for line in md.splitlines() if line.startswith("| MF |"))
    assert "| 40% | 40% |" not in mf and mf.split("|")[2].strip().startswith("≤")


def test_headline_absent_without_scar_results():
    assert _headline.table({"fig5_3_qp": {"x": 1}}) is None
    assert _headline.table({}) is None
