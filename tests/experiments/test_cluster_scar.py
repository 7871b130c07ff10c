"""experiments/cluster_scar: a tiny run end to end (JSON keys, PNG, report with the paper's
numbers, censoring-aware summaries)."""

import json

import numpy as np
import pytest

from experiments import cluster_scar as m


def check_report(text: str) -> None:
    for needed in ("78%-95%", "extra iterations", "hours to target", "dollars to target"):
        assert needed in text, f"the report lacks {needed!r}"


def check_censoring(summary: dict, per_trial: list) -> None:
    """A cell with a trial that missed the target is a lower bound, and its count says so."""
    missed = int(np.sum(~np.isfinite(np.asarray(per_trial, float))))
    assert summary["censored"] == missed, f"censored {summary['censored']} but {missed} trials missed the target"
    assert summary["mean_is_lower_bound"] == (missed > 0), "a censored mean must be marked as a lower bound"


def test_cluster_scar_tiny_end_to_end(tmp_path):
    cfg = m.Config(markets=("aws-exp",), trials=3, target_step=24, max_steps_factor=2.0)
    m.run(cfg, tmp_path)
    res = json.loads((tmp_path / "results" / "cluster_scar.json").read_text())
    mk = res["markets"]["aws-exp"]
    assert set(mk["policies"]) == set(m.POLICIES)
    assert set(mk["reduction"]) == {"extra_iterations", "hours", "dollars"}
    od = mk["policies"]["on_demand"]
    assert od["reached"] == 1 and od["extra_iterations"]["mean"] == 0.0
    for p in ("checkpoint_restart", "scar"):
        s = mk["policies"][p]
        assert s["hours"]["n"] == 3
        check_censoring(s["hours"], s["per_trial"]["hours"])
        # a transient run can never beat the failure-free on-demand run's iterations
        ex = np.asarray(s["per_trial"]["extra"], float)
        assert np.all(ex[np.isfinite(ex)] >= 0)
    assert (tmp_path / "paper_figs" / "cluster_scar.png").stat().st_size > 10_000
    text = m.report(res)
    check_report(text)
    with pytest.raises(AssertionError, match="lacks '78%-95%'"):
        check_report(text.replace("78%-95%", "?"))
    bad = dict(mk["policies"]["scar"]["hours"], censored=0, mean_is_lower_bound=False)
    with pytest.raises(AssertionError, match="missed the target"):
        check_censoring(bad, [1.0, float("inf")])
