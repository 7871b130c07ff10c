"""experiments/sched_autoscale: the quick run end to end (Fig 3.14's comparison)."""

import json

import numpy as np
import pytest

from experiments import sched_autoscale as m


def check_comparison(runs: dict, cmp_: dict) -> None:
    g, t = runs["goodput"], runs["throughput"]
    assert cmp_["cost_change_vs_throughput"] == pytest.approx(g["node_hours"] / t["node_hours"] - 1), \
        "cost change is not goodput/throughput node-hours - 1"
    assert cmp_["jct_change_vs_throughput"] == pytest.approx(g["jct_s"] / t["jct_s"] - 1), \
        "JCT change is not goodput/throughput JCT - 1"


def check_shapes(runs: dict, max_nodes: int) -> None:
    """The throughput autoscaler holds the largest cluster throughout; the goodput one starts
    smaller and never scales down (the thesis' rule has no down-scaling)."""
    assert set(runs["throughput"]["nodes"]) == {max_nodes}, "throughput autoscaler did not stay at max nodes"
    n = np.asarray(runs["goodput"]["nodes"])
    assert n[0] < max_nodes, "goodput autoscaler started at the largest cluster"
    assert np.all(np.diff(n) >= 0), "goodput autoscaler scaled down"


def test_sched_autoscale_quick_end_to_end(tmp_path):
    cfg = m.Config.quick()
    m.run(cfg, tmp_path)
    saved = json.loads((tmp_path / "results" / "sched_autoscale.json").read_text())
    runs = saved["runs"]["imagenet"]
    assert set(runs) == {"goodput", "throughput", "fixed-4", "fixed-16"}
    for d in runs.values():
        assert np.isfinite(d["jct_s"]) and d["node_hours"] > 0
        assert d["cost"] == pytest.approx(d["node_hours"] * cfg.price_per_node_h)
    check_comparison(runs, saved["comparison"]["imagenet"])
    check_shapes(runs, cfg.max_nodes)
    # goodput autoscaling is cheaper than holding the whole cluster, and slower than it
    assert runs["goodput"]["node_hours"] < runs["fixed-16"]["node_hours"]
    assert runs["goodput"]["jct_s"] > runs["fixed-16"]["jct_s"]
    assert (tmp_path / "paper_figs" / "sched_autoscale.png").stat().st_size > 10_000
    text = m.report(saved)
    for needed in ("-25%", "+6%", "Fig 3.14"):
        assert needed in text, needed
    bad = json.loads(json.dumps(saved["comparison"]["imagenet"]))
    bad["cost_change_vs_throughput"] += 0.05
    with pytest.raises(AssertionError, match="cost change is not"):
        check_comparison(runs, bad)
    flipped = dict(runs, goodput=dict(runs["goodput"], nodes=runs["goodput"]["nodes"][::-1]))
    with pytest.raises(AssertionError, match="started at the largest cluster|scaled down"):
        check_shapes(flipped, cfg.max_nodes)


def check_lag(lag: dict, runs: dict, target: float) -> None:
    """The throughput autoscaler's time to the progress at which the goodput one first holds
    the whole cluster, interpolated in its own progress record."""
    t = runs["throughput"]
    tt = np.append(np.asarray(t["time_s"], float), t["jct_s"]) / 3600
    tp = np.append(np.asarray(t["progress"], float), target) / target
    assert lag["throughput_time_h"] == pytest.approx(np.interp(lag["progress"], tp, tt)), \
        "throughput time is not when it reached the goodput autoscaler's progress"


def test_lag_and_progress_hand_checked():
    # goodput: 2 nodes for 1 h (progress 0 -> 10), then 4 (-> 30 at 2 h), done at 3 h (target 50)
    runs = {"goodput": {"time_s": [0.0, 3600.0, 7200.0], "nodes": [2, 4, 4], "progress": [0.0, 10.0, 30.0],
                        "jct_s": 3 * 3600.0},
            "throughput": {"time_s": [0.0, 3600.0], "nodes": [4, 4], "progress": [0.0, 20.0], "jct_s": 2.5 * 3600.0}}
    lag = m._lag(runs, 4, 50.0)
    assert lag == {"goodput_time_h": 1.0, "progress": pytest.approx(0.2), "throughput_time_h": pytest.approx(0.5)}
    check_lag(lag, runs, 50.0)
    assert m._progress_at(runs["goodput"], [0.5, 2.0, 3.0, 4.0], 50.0) == pytest.approx([0.1, 0.6, 1.0, 1.0])
    assert m._lag(runs, 8, 50.0) is None  # never held 8 nodes
    with pytest.raises(AssertionError, match="throughput time is not when"):
        check_lag(dict(lag, throughput_time_h=1.0), runs, 50.0)


def test_sensitivity_variants_are_valid_settings():
    """Every SENSITIVITY variant names real GoodputAutoscaler fields / simulate_autoscaling
    keywords (a typo would only show up in the full run)."""
    import inspect

    from scarjax.sched.autoscaler import GoodputAutoscaler, simulate_autoscaling

    params = set(inspect.signature(simulate_autoscaling).parameters) | {"stats_batch"}
    for label, (fields, kw) in m.SENSITIVITY.items():
        GoodputAutoscaler(**fields)
        assert set(kw) <= params, label
    assert m.Config().sensitivity and not m.Config.quick().sensitivity
    assert m.Config().interval_s == 60.0
