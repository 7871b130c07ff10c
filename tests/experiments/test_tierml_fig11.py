"""experiments/tierml_fig11: the quick run end to end (JSON keys, PNG, report with the paper's 13%);
the summary's blip and pace come from the recorded per-iteration times; the warned eviction loses
no state, the failure rolls back."""

import json

import numpy as np
import pytest

from experiments import tierml_fig11 as m


def check_summary(res):
    cfg, s = res["config"], res["summary"]
    w = np.asarray(res["runs"]["warned"]["seconds"])
    after = w[cfg["remove_at"]:].mean()
    assert s["blip"] == pytest.approx(w[cfg["remove_at"] - 1] / after - 1.0), "the blip is not the recorded times'"
    assert s["t4_s"] == pytest.approx(w[: cfg["add_at"] - 1].mean()), "the 4-machine pace is not the recorded one"
    assert s["after_s"] == pytest.approx(s["t4_s"]), "after the eviction the pace is not the 4-machine pace"


def test_tierml_fig11_quick(tmp_path):
    m.run(m.Config.quick(), tmp_path)
    res = json.loads((tmp_path / "results" / "tierml_fig11.json").read_text())
    assert {"config", "runs", "summary", "paper", "reference_loss"} <= set(res)
    assert (tmp_path / "paper_figs" / "tierml_fig11.png").stat().st_size > 10_000
    check_summary(res)
    s = res["summary"]
    assert s["speedup"] > 1 and s["blip"] > 0 and s["stage_with_transient"] == 2
    warned, unwarned = res["runs"]["warned"], res["runs"]["unwarned"]
    assert warned["meta"]["rollbacks"] == 0 and warned["max_loss_diff_vs_uninterrupted"] <= 1e-6
    assert unwarned["meta"]["rollbacks"] == 1
    assert unwarned["seconds"][res["config"]["remove_at"] - 1] > warned["seconds"][-1]  # wasted half iteration
    text = m.report(res)
    assert "+13%" in text and "Fig 11" in text
    bad = json.loads(json.dumps(res))
    bad["summary"]["blip"] = 0.13
    with pytest.raises(AssertionError, match="the blip is not the recorded times'"):
        check_summary(bad)
    bad = json.loads(json.dumps(res))
    bad["runs"]["warned"]["seconds"][-1] *= 2
    with pytest.raises(AssertionError, match="not the 4-machine pace|not the recorded times'"):
        check_summary(bad)
