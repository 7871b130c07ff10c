"""Fig 5.6 (reset to init): tiny end-to-end run of both panels and the LDA panel's pieces."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from experiments import _scar
from experiments import fig5_6_reset as m
from scarjax import faults as F

TINY = m.Config(trials=6, steps=120, lda_trials=6, lda_steps=30, lda_perturb_at=5, lda_converge_at=12,
                lda_chains=2, lda_chain_steps=30)


@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    res = m.run(TINY, tmp_path)
    saved = json.loads((tmp_path / "results" / f"{m.NAME}.json").read_text())
    assert (tmp_path / "paper_figs" / f"{m.NAME}.png").stat().st_size > 0
    assert "reset" in saved and "lda" in saved
    lda = saved["lda"]
    assert lda["trials"] == 6 and 0 < lda["c"] < 1 and lda["d0"] >= lda["dT"] > 0
    for k in ("eq_5_6", "restarted", "mean_rework_by_fraction", "rework_per_unit_fraction"):
        assert k in lda
    text = m.report(saved)
    assert m.NAME in text and "(b) LDA" in text and "thesis" in text
    assert res["config"]["lda_trials"] == 6


def test_report_without_lda_panel():
    sub = {"share_under_bound": 1.0, "share_under_bound_plus_1": 1.0, "median_actual_over_bound": 0.5}
    results = {"config": dataclasses.asdict(dataclasses.replace(TINY, lda=False)),
               "reset": {"trials": 6, "c": 0.99, "restarted_bound": sub, **sub}, "rework_per_unit_fraction": 3.0}
    text = m.report(results)
    assert "(a) MLR" in text and "not run" in text


def test_lda_bad_schedule():
    with pytest.raises(ValueError, match="lda_perturb_at"):
        m.lda_panel(dataclasses.replace(TINY, lda_perturb_at=12))


def test_resetting_no_documents_is_the_unperturbed_run():
    """The identity lda_panel relies on to get its baselines from the same program."""
    spec, alg, part = _scar.setup("lda_synthetic")
    fail = F.Failure(fraction=0.5, at=3)

    def factory(f):
        return F.failure(part, fail.replace(fraction=f), recovery="partial",
                         after_recovery=spec.after_recovery, name="reset")

    keys = jax.random.split(jax.random.key(1), 2)
    _, a = scarjax.run_trials(alg, factory, 6, keys, hook_args=jnp.asarray([0.0, 0.5], jnp.float32))
    _, b = scarjax.run_trials(alg, None, 6, keys)
    np.testing.assert_array_equal(np.asarray(a.loss)[0], np.asarray(b.loss)[0])
    assert float(np.asarray(a.perturbation_norms())[0].max()) == 0.0
    assert float(np.asarray(a.perturbation_norms())[1, 3]) > 0.0
