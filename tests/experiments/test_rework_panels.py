"""experiments._rework.run_rework_panels: several perturbation panels in one compiled program
(Figs 5.5 and 5.6(a)) give exactly the trials of separate programs."""

import jax.numpy as jnp
import numpy as np
import pytest

from experiments import _rework
from scarjax import perturb
from scarjax.models import quadratic

pytestmark = pytest.mark.slow  # five small compilations: CI runs it in its separate `-m slow` step

# A 3-D QP contracting at c = 0.9: ε is reached in 20 of 60 iterations.
ALG = quadratic.problem(np.diag([1.0, 2.0, 1.5]), np.array([1.0, -1.0, 0.5]), 0.1, np.zeros(3))
KW = dict(steps=60, converge_at=20, seed=3, chunk=2)  # 3 trials in chunks of 2: padding included
SIZES = {"gaussian": (perturb.gaussian, np.array([0.01, 0.3, 1.0], np.float32)),
         "adversarial": (perturb.adversarial, np.array([0.5, 2.0, 0.0], np.float32)),
         "reset": (perturb.reset, np.array([0.2, 1.0, 0.6], np.float32))}
FIELDS = ("rework", "horizon", "rework_loss", "bound", "bound_restarted", "delta_T", "size", "eps", "d0", "c_fit")


@pytest.fixture(scope="module")
def panels():
    return _rework.run_rework_panels(ALG, SIZES, perturb_at=10, **KW)


@pytest.mark.parametrize("name", list(SIZES))
def test_panel_equals_its_own_program(panels, name):
    make, sizes = SIZES[name]
    alone = _rework.run_rework_trials(ALG, _rework.fired_at(make), (jnp.asarray(sizes), jnp.full(3, 10)),
                                      restart_at=10, **KW)
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(panels[name], f), getattr(alone, f), err_msg=f)
    assert panels[name].size[sizes == 0].sum() == 0 and (panels[name].size[sizes > 0] > 0).all()


def test_the_kind_selects_the_perturbation(panels):
    # Planted violation: the Gaussian sizes run as adversarial perturbations must not match
    # the Gaussian panel (the comparison above can fail).
    swapped = _rework.run_rework_panels(ALG, {"gaussian": (perturb.adversarial, SIZES["gaussian"][1])},
                                        perturb_at=10, **KW)["gaussian"]
    assert not np.array_equal(swapped.delta_T, panels["gaussian"].delta_T)
    # The baselines are shared: ε and d0 agree across panels.
    assert swapped.eps == panels["gaussian"].eps and swapped.d0 == panels["gaussian"].d0


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="make_hook"):
        _rework.run_rework_panels(ALG, {"x": (perturb.random_mask, np.ones(3, np.float32))}, perturb_at=10, **KW)
