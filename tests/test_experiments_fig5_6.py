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
from scarjax.scar import faults as F

TINY = m.Config(trials=6, steps=250, lda_trials=6, lda_steps=30, lda_perturb_at=5, lda_converge_at=12,
                lda_chains=2, lda_chain_steps=30)


@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    res = m.run(TINY, tmp_path)
    saved = json.loads((tmp_path / "results" / f"{m.NAME}.json").read_text())
    assert (tmp_path / "paper_figs" / f"{m.NAME}.png").stat().st_size > 0
    # Fig 5.6's point: a reset to init stays under Thm 5.3.1 (MLR: restarted at the reset; LDA:
    # Eq 5.6 as printed), and (LDA) its rework grows with the reset fraction. (With 6 trials
    # the MLR slope is noise: the quick run's 40 trials give a positive one.)
    reset = saved["reset"]
    assert reset["never_reconverged"] == 0
    assert reset["restarted_bound"]["under_plus_1"]["held"] == reset["perturbed_trials"] == 6
    lda = saved["lda"]
    assert lda["eq_5_6"]["under_plus_1"]["held"] == lda["perturbed_trials"] > 0
    assert lda["rework_per_unit_fraction"] > 0
    assert lda["trials"] == 6 and 0 < lda["c"] < 1 and lda["d0"] >= lda["dT"] > 0
    # Every trial is counted: shares are over all perturbed trials, censored ones included.
    assert lda["eq_5_6"]["under"]["n"] == lda["perturbed_trials"]
    assert lda["eq_5_6"]["rework"]["censored"] == lda["never_reconverged"]
    text = m.report(saved)
    assert m.NAME in text and "(b) LDA" in text and "thesis" in text and "∞" not in text
    assert res["config"]["lda_trials"] == 6 and saved["meta"]["mode"] == "custom"


def test_report_without_lda_panel():
    from experiments import _rework, _stats

    r, h, b = np.array([1.0, 2.0, np.inf]), np.full(3, 50.0), np.array([3.0, 3.0, 3.0])
    sub = _rework.summarize(r, h, b)
    reset = {**sub, "restarted_bound": sub, "loss_criterion": None, "trials": 3, "perturbed_trials": 3,
             "never_reconverged": 1, "c": 0.99, "c_fit": 0.98, "c_tail": 0.99, "eps": 0.1, "d0": 1.0}
    results = {"config": dataclasses.asdict(dataclasses.replace(TINY, lda=False)), "reset": reset,
               "rework_per_unit_fraction": 3.0, "rework_per_unit_fraction_censored": 1}
    text = m.report(results)
    assert "(a) MLR" in text and "not run" in text
    # The censored trial is not under the bound and the mean is a lower bound.
    assert "0.667 (2 of 3; 1 never re-converged, counted as not under)" in text
    assert "≥ 17.7" in text and "∞" not in text
    assert sub["rework"]["mean"] == pytest.approx((1 + 2 + 50) / 3)
    assert _stats.fmt_cell(sub["rework"]).endswith("(1 of 3 not re-converged)")


def test_lda_bad_schedule():
    with pytest.raises(ValueError, match="lda_perturb_at"):
        m.lda_panel(dataclasses.replace(TINY, lda_perturb_at=12))


def test_resetting_no_documents_is_the_unperturbed_run():
    """The identity lda_panel relies on to get its baselines from the same program."""
    spec, alg, part = _scar.setup("lda_synthetic")
    fail = F.Failure(fraction=0.5, when=3)

    def factory(f):
        return F.failure(part, fail.replace(fraction=f), recovery="partial",
                         after_recovery=spec.after_recovery, name="reset")

    keys = jax.random.split(jax.random.key(1), 2)
    _, a = scarjax.run_trials(alg, factory, 6, keys, hook_args=jnp.asarray([0.0, 0.5], jnp.float32))
    _, b = scarjax.run_trials(alg, None, 6, keys)
    np.testing.assert_array_equal(np.asarray(a.loss)[0], np.asarray(b.loss)[0])
    assert float(np.asarray(a.perturbation_norms())[0].max()) == 0.0
    assert float(np.asarray(a.perturbation_norms())[1, 3]) > 0.0
