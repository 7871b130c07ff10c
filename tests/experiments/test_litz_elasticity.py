"""experiments/litz_elasticity: a tiny run end to end (JSON keys, PNG, report with the paper's numbers)."""

import json

import pytest

from experiments import litz_elasticity as m


def check_report(text: str) -> None:
    for needed in ("157", "107", "122", "121", "183", "101", "134", "127", "identical bit for bit"):
        assert needed in text, f"the report lacks {needed!r}"


def test_litz_elasticity_tiny_end_to_end(tmp_path):
    cfg = m.Config(mlr_executors=8, mlr_steps=16, lda_executors=24, lda_steps=6, lda_docs=30)
    m.run(cfg, tmp_path)
    saved = json.loads((tmp_path / "results" / "litz_elasticity.json").read_text())
    for app in ("MLR", "LDA"):
        a = saved["apps"][app]
        assert set(a["time_min"]) == {"static_pre", "static_post", "scale_out", "scale_in"}
        assert all(a["same_final_state"].values()) and a["same_losses"]
        t = a["time_min"]
        assert t["static_post"] < t["scale_out"] < t["static_pre"]
        assert a["ideal_min"] <= t["scale_out"] + 1e-9
    assert (tmp_path / "paper_figs" / "litz_elasticity.png").stat().st_size > 10_000
    text = m.report(saved)
    check_report(text)
    with pytest.raises(AssertionError, match="lacks 'identical bit for bit'"):
        check_report(text.replace("identical bit for bit", "DIFFER"))
