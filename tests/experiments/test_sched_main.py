"""experiments/sched_main: a tiny run end to end (JSON keys, PNG, report beside the artifact's numbers)."""

import dataclasses
import json

import numpy as np
import pytest

from experiments import sched_main as m


def check_report(text: str) -> None:
    for needed in ("2089", "2474", "4087", "-32%", "-52%", "Table 3.2"):
        assert needed in text, f"the report lacks the reference {needed!r}"


def check_summary(s: dict) -> None:
    jct = np.asarray(s["jobs"]["jct_s"], float)
    assert np.isfinite(jct).all() and s["n_unfinished"] == 0, "unfinished jobs"
    assert s["avg_jct_s"] == pytest.approx(jct.mean()), "avg_jct_s is not the mean JCT"
    assert s["p99_jct_s"] == pytest.approx(np.percentile(jct, 99)), "p99_jct_s is not the 99th percentile"
    end = np.asarray(s["jobs"]["submit_s"], float) + jct
    assert s["makespan_s"] == pytest.approx(end.max()), "makespan_s is not the last completion"


def _check_run(tmp_path, cfg):
    m.run(cfg, tmp_path)
    saved = json.loads((tmp_path / "results" / "sched_main.json").read_text())
    assert set(saved["runs"]) == {"workload-1"} and set(saved["runs"]["workload-1"]) == set(cfg.policies)
    for s in saved["runs"]["workload-1"].values():
        assert s["n_jobs"] == cfg.first_jobs
        check_summary(s)
    assert saved["comparable"] is False
    assert (tmp_path / "paper_figs" / "sched_main.png").stat().st_size > 10_000
    text = m.report(saved)
    check_report(text)
    assert "Quick subset" in text
    with pytest.raises(AssertionError, match="lacks the reference '2474'"):
        check_report(text.replace("2474", "?"))
    bad = json.loads(json.dumps(saved["runs"]["workload-1"][cfg.policies[-1]]))
    bad["makespan_s"] += 60.0
    with pytest.raises(AssertionError, match="makespan_s is not the last completion"):
        check_summary(bad)
    return saved


def test_sched_main_baselines_end_to_end(tmp_path):
    cfg = dataclasses.replace(m.Config.quick(), policies=("tiresias", "optimus"), first_jobs=12)
    _check_run(tmp_path, cfg)


@pytest.mark.slow
def test_sched_main_quick_with_pollux(tmp_path):
    cfg = dataclasses.replace(m.Config.quick(), first_jobs=8, nodes=4, population=10, generations=4)
    _check_run(tmp_path, cfg)


def test_reference_numbers_match_the_data_readme():
    ref = m.REFERENCE_AVG_JCT
    assert [round(ref[p]["workload-1"]) for p in m.POLICIES] == [2089, 2474, 4087]
    mean8 = {p: np.mean(list(ref[p].values())) for p in m.POLICIES}
    for p in m.POLICIES:
        assert mean8[p] == pytest.approx(m.REFERENCE_MEAN_8[p])
    assert round(100 * (1 - mean8["pollux"] / mean8["tiresias"])) == 32
    assert round(100 * (1 - mean8["pollux"] / mean8["optimus"])) == 52


def test_config_and_policy_errors():
    with pytest.raises(ValueError, match="policy must be one of"):
        m.make_policy("fifo", m.Config())
    w = m.load("workload-1", m.Config.quick())
    assert len(w) == 24 and "imagenet" not in set(w.application.tolist())
