"""The REPRODUCTION.md headline table is built from the SCAR figures' results only."""

from experiments import _headline


def _results():
    fig7 = {"config": {"trials": 100}, "models": {
        "mlr": {"label": "MLR", "reduction_pct": {"0.75": 20.0, "0.5": 40.0, "0.25": 60.0}},
        "lda": {"label": "LDA", "reduction_pct": {"0.75": 150.0, "0.5": None, "0.25": 70.0}},
    }}
    fig9 = {"config": {"trials": 50}, "models": {
        "mlr": {"label": "MLR", "reduction_priority8_vs_traditional_pct": 81.5},
        "cnn": {"label": "CNN", "reduction_priority8_vs_traditional_pct": 90.0},
    }}
    return {"fig5_7_partial_recovery": fig7, "fig5_9_priority_checkpoint": fig9}


def test_headline_rows_and_cells():
    md = _headline.table(_results())
    assert "| MLR | 20% | 40% | 60% | 82% |" in md
    assert "| LDA | 150%* | – | 70% | – |" in md  # > 100%: negative partial rework, flagged
    assert "| CNN | – | – | – | 90% |" in md
    assert "12–42% | 31–62% | 59–89% | 78–95%" in md
    assert "Fig 5.7: 100" in md and "Fig 5.9: 50" in md


def test_headline_absent_without_scar_results():
    assert _headline.table({"fig5_3_qp": {"x": 1}}) is None
    assert _headline.table({}) is None
