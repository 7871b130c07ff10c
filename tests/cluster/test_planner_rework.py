"""The planner's SCAR rework per revocation (A3, thesis Thm 5.3.1 with Thm 5.4.2): the block
age is capped by the revocation's own step (the running checkpoint starts at w⁽⁰⁾: a block not
yet written when the revocation comes at step ℓ has age ℓ), averaged over revocations anywhere
in the run. Checked against an independent NumPy quadrature of the documented formula; the
planted violation is the age capped by the whole run (K0), which over-predicted SCAR's rework
when the checkpoint interval is a sizeable share of the run (price-driven markets)."""

from __future__ import annotations

import numpy as np
import pytest

from scarjax.cluster import planner as pl
from scarjax.cluster.jobprofile import JobProfile
from scarjax.cluster.marketmodel import MarketModel
from scarjax.cluster.steptime import step_time_fixed

C, K0 = 0.97, 40.0


def _rework_per_event(c, K, K0, p, cap_at_step=True, n=4000):
    """``E_ℓ[log(1 + sqrt(p) E_A[D(A_ℓ) c^{-A_ℓ}])] / log(1/c)``, ``A ~ U[0, K]``, ``ℓ ~ U[0, K0]``,
    ``A_ℓ = min(A, ℓ)`` (planted: ``min(A, K0)``), the triangle drift ``D(a) = 1 + c^a`` (no
    measured drift), by a fine midpoint rule."""
    A = (np.arange(n) + 0.5) / n * min(K, K0)
    ell = (np.arange(n) + 0.5) / n * K0
    if not cap_at_step:
        a = np.minimum(A, K0)
        return np.log1p(np.sqrt(p) * np.mean((1 + c ** a) * c ** -a)) / -np.log(c)
    a = np.minimum(A[:, None], ell[None, :])
    g = np.sqrt(p) * np.mean((1 + c ** a) * c ** -a, axis=0)
    return np.mean(np.log1p(g)) / -np.log(c)


def check_rework(per_event, want, rtol=0.02):
    assert abs(per_event - want) <= rtol * want, \
        f"SCAR rework per event {per_event:.4g} iterations, the A3 formula gives {want:.4g}"


@pytest.mark.parametrize("mttf_h", [10.0, 40.0])
def test_scar_rework_caps_the_age_at_the_revocation_step(mttf_h):
    prof = JobProfile("qp", K0, C, step_time_fixed(30.0), checkpoint_s=60.0, restore_s=10.0)
    m = MarketModel.parametric(mttf_h, 0.05, 0.2, startup_s=60.0, billing="per_second")
    cands = pl.candidates(prof, m, workers=[4], policies=["scar"], fractions=[0.5], priorities=["round_robin"])
    pred = pl.predict(prof, m, cands)
    K = float(cands.yd_steps[0])
    per_event = float(pred.rework[0] / pred.revocations[0])
    want = _rework_per_event(C, K, K0, 1 / 4)
    check_rework(per_event, want)
    old = _rework_per_event(C, K, K0, 1 / 4, cap_at_step=False)
    assert old > 1.05 * want, f"the planted violation does not differ here (K = {K:g}, K0 = {K0:g}): a vacuous case"
    with pytest.raises(AssertionError, match="the A3 formula gives"):
        check_rework(old, want)  # planted: the age capped by the whole run
