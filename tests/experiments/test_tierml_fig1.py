"""experiments/tierml_fig1: the quick run end to end (JSON keys, PNG, report with the paper's
numbers); the ratios are computed from the per-trial outcomes."""

import json

import numpy as np
import pytest

from experiments import tierml_fig1 as m


def check_ratios(res):
    for scn, d in res["scenarios"].items():
        mean = {c: np.mean([o["dollars"] for o in d["trials"][c]]) for c in m.CONFIGS}
        hours = {c: np.mean([o["time_h"] for o in d["trials"][c]]) for c in m.CONFIGS}
        r = d["ratios"]
        assert r["cost_vs_od64"] == pytest.approx(mean["tierml"] / mean["od64"] - 1), f"{scn}: cost vs on-demand"
        assert r["cost_vs_ckpt"] == pytest.approx(mean["tierml"] / mean["ckpt64"] - 1), f"{scn}: cost vs checkpointing"
        assert r["time_vs_ckpt"] == pytest.approx(hours["tierml"] / hours["ckpt64"] - 1), f"{scn}: time vs checkpointing"


def test_tierml_fig1_quick(tmp_path):
    cfg = m.Config.quick()
    m.run(cfg, tmp_path)
    res = json.loads((tmp_path / "results" / "tierml_fig1.json").read_text())
    assert {"config", "scenarios", "paper", "curves", "target_loss", "compute_s", "sync_s"} <= set(res)
    assert set(res["scenarios"]) == set(cfg.scenarios)
    assert (tmp_path / "paper_figs" / "tierml_fig1.png").stat().st_size > 10_000
    check_ratios(res)
    for d in res["scenarios"].values():
        assert all(o["reached"] for c in m.CONFIGS for o in d["trials"][c])
        # 16 on-demand machines are slower than 64; TierML is cheaper than 64 on-demand
        assert d["summary"]["od16"]["time_h_mean"] > d["summary"]["od64"]["time_h_mean"]
        assert d["summary"]["tierml"]["cost_mean"] < d["summary"]["od64"]["cost_mean"]
    text = m.report(res)
    for needed in ("-76%", "-48%", "Fig 1", "checkpointing"):
        assert needed in text, f"the report lacks {needed!r}"
    bad = json.loads(json.dumps(res))
    scn = cfg.scenarios[0]
    bad["scenarios"][scn]["trials"]["tierml"][0]["dollars"] *= 2
    with pytest.raises(AssertionError, match=f"{scn}: cost vs on-demand"):
        check_ratios(bad)
