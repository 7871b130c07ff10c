"""End-to-end smoke tests of the SCAR fault-tolerance experiments (Figs 5.7-5.11) with tiny
configs (marked slow: each compiles its own vmapped programs)."""

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


@pytest.mark.parametrize("mod, cfg", [
    (f57, f57.Config(models=("mlr_digits",), fractions=(0.25, 1.0), trials=4)),
    (f59, f59.Config(models=("mlr_digits",), frequencies=(1, 8), trials=4)),
    (f511, f511.Config(models=("mlr_digits",), epochs=12, fail_epoch=3, converge_epoch=8, seeds=1)),
])
def test_experiment_tiny(mod, cfg, tmp_path):
    res = mod.run(cfg, tmp_path)
    assert (tmp_path / "results" / f"{mod.NAME}.json").exists()
    assert (tmp_path / "paper_figs" / f"{mod.NAME}.png").exists()
    json.loads((tmp_path / "results" / f"{mod.NAME}.json").read_text())
    text = mod.report(json.loads((tmp_path / "results" / f"{mod.NAME}.json").read_text()))
    assert mod.NAME in text and "thesis" in text
    assert "mlr_digits" in res["models"]
