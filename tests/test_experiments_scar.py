"""End-to-end tests of the SCAR fault-tolerance experiments (Figs 5.7-5.11) with tiny configs,
each asserting what its figure exists to show (marked slow: each compiles its own vmapped
programs)."""

import json

import pytest

from experiments import _scar
from experiments import fig5_7_partial_recovery as f57
from experiments import fig5_9_priority_checkpoint as f59
from experiments import fig5_11_large_scale as f511

pytestmark = pytest.mark.slow


def test_model_registry():
    assert "mlr_digits" in _scar.available()
    with pytest.raises(ValueError, match="unknown model"):
        _scar.available(["nope"])


def _no_infinite_cells(text: str) -> None:
    assert "∞" not in text


def test_fig5_7_partial_beats_full_recovery(tmp_path):
    """Figs 5.7/5.8's point: recovering only the lost blocks costs less rework than reloading
    the whole checkpoint when a quarter of the blocks fail; at fraction 1 they coincide."""
    cfg = f57.Config(models=("mlr_digits",), fractions=(0.25, 1.0), trials=4)
    res = f57.run(cfg, tmp_path)
    r = res["models"]["mlr_digits"]
    p, full = r["partial"]["cells"], r["full"]["cells"]
    assert p[0]["n"] == full[0]["n"] == 4
    assert p[0]["mean"] < full[0]["mean"]
    assert p[0]["censored"] == full[0]["censored"] == 0
    red = r["reduction"]["0.25"]
    assert red["pct"] > 20 and red["relation"] == "="
    # Censored counts reach the JSON and the report.
    saved = json.loads((tmp_path / "results" / f"{f57.NAME}.json").read_text())
    assert saved["models"]["mlr_digits"]["partial"]["censored"] == [c["censored"] for c in p]
    assert saved["meta"]["mode"] == "custom"
    text = f57.report(saved)
    assert f57.NAME in text and "did not re-converge" in text
    _no_infinite_cells(text)


def test_fig5_9_priority_beats_traditional(tmp_path):
    """Figs 5.9/5.10's point: partial recovery from 1/8 priority checkpoints at 8x frequency
    reworks less than traditional checkpoint-restart."""
    cfg = f59.Config(models=("mlr_digits",), frequencies=(1, 8), trials=4)
    res = f59.run(cfg, tmp_path)
    r = res["models"]["mlr_digits"]
    assert r["priority"]["cells"][1]["mean"] < r["traditional"]["cell"]["mean"]
    assert r["reduction_priority8_vs_traditional"]["pct"] > 20
    text = f59.report(json.loads((tmp_path / "results" / f"{f59.NAME}.json").read_text()))
    assert f59.NAME in text and "thesis" in text
    _no_infinite_cells(text)


def test_fig5_11_scar_beats_traditional(tmp_path):
    """Fig 5.11's point: with the persistent running checkpoint SCAR loses a fraction of an
    epoch where traditional checkpointing (failure before its first checkpoint) loses all."""
    cfg = f511.Config(models=("mlr_digits",), epochs=12, fail_epoch=3, converge_epoch=8, seeds=1)
    res = f511.run(cfg, tmp_path)
    r = res["models"]["mlr_digits"]
    assert r["scar"]["rework"]["censored"] == 0 and r["traditional"]["rework"]["censored"] == 0
    assert r["scar"]["rework_epochs_mean"] < r["traditional"]["rework_epochs_mean"]
    assert r["traditional"]["rework_epochs_mean"] > 1.0
    text = f511.report(json.loads((tmp_path / "results" / f"{f511.NAME}.json").read_text()))
    assert f511.NAME in text and "thesis" in text
    _no_infinite_cells(text)
