"""experiments/cmdare: quick mode end to end (JSON keys, PNG, report with the paper's numbers)."""

import json

import pytest

from experiments import cmdare as m

KEYS = {"config", "svr_grid", "table_ii", "table_iv", "paper_table_ii", "paper_table_iv", "table_v", "fig8", "mttr",
        "plateaus", "ps_gain", "eq4", "eq4_linear", "res32_predictions", "cost_k80_4", "fraction_reached_cap", "meta"}


def check_report(text: str) -> None:
    for needed in ("Table II", "Table IV", "Table V", "Fig 8", "10.6-19.8 h", "7.7 h", "0.8% error", "70.6%", "396"):
        assert needed in text, f"the report lacks {needed!r}"


def check_results(res: dict) -> None:
    missing = KEYS - set(res)
    assert not missing, f"results lack keys {sorted(missing)}"
    assert [r["name"] for r in res["table_ii"]] == list(res["paper_table_ii"]), "Table II rows out of the paper's order"
    for key, c in res["fig8"].items():
        f = c["F"]
        assert all(0 <= x <= 1 for x in f) and all(b >= a for a, b in zip(f, f[1:])), f"Fig 8 CDF {key} not a CDF"


def test_cmdare_quick_end_to_end(tmp_path):
    cfg = m.Config.quick()
    assert cfg.quick_grid
    m.run(cfg, tmp_path)
    res = json.loads((tmp_path / "results" / "cmdare.json").read_text())
    check_results(res)
    assert len(res["table_ii"]) == 8 and len(res["table_iv"]) == 4
    assert {r["setting"] for r in res["eq4"]["gce_runs"]} == {"k80-4", "k80-8", "v100"}
    assert (tmp_path / "paper_figs" / "cmdare.png").stat().st_size > 10_000
    text = m.report(res)
    check_report(text)
    with pytest.raises(AssertionError, match="lacks '0.8% error'"):
        check_report(text.replace("0.8% error", "?"))
    with pytest.raises(AssertionError, match="lack keys"):
        check_results({k: v for k, v in res.items() if k != "eq4"})
    bad = dict(res, fig8={"K80/x": {"t_h": [0, 1, 24], "F": [0, 0.6, 0.5]}})
    with pytest.raises(AssertionError, match="not a CDF"):
        check_results(bad)
