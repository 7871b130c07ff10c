"""What users get wrong, written as a user would write it (docs/testing.md): a step-size
schedule with a typo that converges and then diverges inside the window (the checks
must fail, and say so), a Jacobi iteration whose contraction is too fast to measure
(inconclusive, never "not linearly convergent"), and NumPy arrays as data with
``batch_size=`` (accepted)."""

import unittest

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import scarjax
from scarjax import testing as sxt

# Ridge regression by gradient descent, as the README writes it.
_rng = np.random.default_rng(0)
X = _rng.normal(size=(64, 4)).astype(np.float32)
Y = X @ np.arange(1, 5, dtype=np.float32) + _rng.normal(size=64).astype(np.float32)
H = X.T @ X / 64 + 0.1 * np.eye(4)
W_STAR = np.linalg.solve(H, X.T @ Y / 64).astype(np.float32)
ETA0 = 1.0 / float(np.linalg.eigvalsh(H).max())
C_GD = float(np.abs(1 - ETA0 * np.linalg.eigvalsh(H)).max())  # the rate of the intended constant step


def ridge_loss(w, batch):
    return 0.5 * jnp.mean((batch["x"] @ w - batch["y"]) ** 2) + 0.05 * w @ w


def ridge(schedule, name):
    data = {"x": jnp.asarray(X), "y": jnp.asarray(Y)}
    return scarjax.from_optax(ridge_loss, optax.sgd(schedule), jnp.zeros(4), data, optimum=jnp.asarray(W_STAR), name=name)


# The typo: η₀(1 + (k/50)²) where η₀/(1 + (k/50)²) was meant. The step passes 2/L near k = 50.
TYPO = ridge(lambda k: ETA0 * (1 + (k / 50) ** 2), "ridge, typo schedule")
MEANT = ridge(lambda k: ETA0 / (1 + (k / 50) ** 2), "ridge, decaying schedule")
STEPS = 100


def test_the_typo_schedule_converges_then_diverges_inside_the_window():
    # The planted bug, measured: the distance falls far below the float32 floor, then grows.
    _, trace = scarjax.run(TYPO, None, STEPS, jax.random.key(0))
    d = np.asarray(trace.distance)
    k = int(np.argmin(d))
    assert d[k] < 1e-4 * d[0] and 0 < k < STEPS and d[-1] > 1e3 * d[0]


@pytest.mark.parametrize("settings", [None, 50], ids=["default", "settings=50"])
def test_linear_convergence_fails_on_divergence_after_convergence(settings):
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_linear_convergence(TYPO, STEPS, settings=settings)
    err = e.value
    assert err.verdict == "violated" and isinstance(err, AssertionError)
    assert err.title.startswith("not linearly convergent here: the run diverged after converging")
    assert "fell below the floor" in err.details["converged"] and "grew back to" in err.details["diverged"]


def test_assert_linear_convergence_fails_on_the_users_own_trace():
    _, trace = scarjax.run(TYPO, None, STEPS, jax.random.key(0))
    with pytest.raises(sxt.CheckFailure, match="the run diverged after converging") as e:
        sxt.assert_linear_convergence(trace)
    # The rounding floor comes from the iterates before the run diverged, not from 1e5.
    assert float(e.value.details["converged"].split("floor ")[1].split(" ")[0]) < 1e-2


def test_rework_bound_says_the_baseline_diverges_after_reaching_eps():
    with pytest.raises(sxt.CheckFailure) as e:
        sxt.check_rework_bound(TYPO, C_GD, STEPS)
    err = e.value
    assert err.title.startswith("Thm 5.3.1: the unperturbed run diverges after reaching ε")
    assert "never reaches" not in str(err) and "run longer" not in str(err)
    assert "< ε at step" in err.details["reached ε"] and "≥ ε at step" in err.details["then diverged"]
    # Its replay fails the same way, on the user's trace.
    with pytest.raises(sxt.CheckFailure) as again:
        exec(err.replay, {"algorithm": TYPO})  # noqa: S102 - the counterexample's replay code
    assert again.value.title == err.title


def test_rework_cost_says_the_baseline_diverges_after_reaching_eps():
    _, trace = scarjax.run(TYPO, None, STEPS, jax.random.key(0))
    with pytest.raises(ValueError, match="reaches eps=0.001 and then grows back above it"):
        scarjax.rework_cost(trace, trace, 1e-3)
    with pytest.raises(ValueError, match="never reaches eps"):
        scarjax.rework_cost(trace, trace, 1e-9)


def test_the_meant_schedule_passes_both_checks():
    # The same code without the typo: the checks hold (the failures above are the typo's).
    res = sxt.check_linear_convergence(MEANT, STEPS, settings=3)
    assert res.verdict == "held" and res.c < 1
    assert sxt.check_rework_bound(MEANT, res.c, STEPS, settings=3).trials_checked > 0


# --------------------------------------------------------------------------------------
# Jacobi iteration in the ℓ∞ norm: c = ‖M‖∞ = 0.52, spectral radius ≈ 0.09.

_N = 40
_r = np.random.default_rng(0)
_M = _r.normal(size=(_N, _N))
np.fill_diagonal(_M, 0.0)
_M *= 0.52 / np.abs(_M).sum(1).max()
_A = (_r.uniform(1, 3, size=_N)[:, None] * (np.eye(_N) - _M)).astype(np.float32)
_B = _r.normal(size=_N).astype(np.float32)
_D = np.diag(_A).copy()
_R = _A - np.diag(_D)
X_STAR = np.linalg.solve(_A.astype(np.float64), _B).astype(np.float32)
C_INF = float(np.abs(_R / _D[:, None]).sum(1).max())  # ‖M‖∞ of Jacobi's iteration matrix


def linf(w):
    return jnp.max(jnp.abs(w))


def jacobi(init):
    data = {"A": jnp.asarray(_A), "b": jnp.asarray(_B), "R": jnp.asarray(_R), "D": jnp.asarray(_D)}
    return scarjax.fixed_point(
        lambda x, d: (d["b"] - d["R"] @ x) / d["D"], init, lambda x, d: jnp.sum((d["A"] @ x - d["b"]) ** 2),
        data, optimum=jnp.asarray(X_STAR), norm=linf, name="jacobi",
    )


JACOBI = jacobi(jnp.zeros(_N))
# A warm start 1% of ‖x*‖∞ away: every run reaches the rounding floor within two steps.
WARM = jacobi(jnp.asarray(X_STAR) + 0.01 * float(np.abs(X_STAR).max()))


def test_jacobi_setup():
    assert C_INF == pytest.approx(0.52, abs=1e-3)
    assert np.abs(np.linalg.eigvals(-_R / _D[:, None])).max() < 0.11


def test_jacobi_from_the_default_start_holds_with_its_linf_rate():
    res = sxt.check_linear_convergence(JACOBI, STEPS, rate=C_INF)
    assert res.verdict == "held" and res.c <= C_INF


def test_a_contraction_too_fast_to_measure_is_inconclusive_not_a_violation():
    with pytest.raises(sxt.InconclusiveCheck) as e:
        sxt.check_linear_convergence(WARM, STEPS, rate=C_INF)
    err = e.value
    # Not an AssertionError (not a failed theorem): a skip, with the advice.
    assert not isinstance(err, AssertionError) and isinstance(err, unittest.SkipTest)
    assert err.verdict == "inconclusive"
    assert err.title.startswith("INCONCLUSIVE (Eq 5.3 neither held nor violated): the contraction is too fast")
    assert "not linearly convergent" not in str(err)
    assert "start farther from w*" in err.details["to measure it"] and "float64" in err.details["to measure it"]
    # The advice works: started farther away, the same iteration is measured.
    far = float(np.abs(X_STAR).max())
    assert sxt.check_linear_convergence(WARM, STEPS, rate=C_INF, near=far).verdict == "held"
    # Its replay is inconclusive too.
    with pytest.raises(sxt.InconclusiveCheck):
        exec(err.replay, {"algorithm": WARM})  # noqa: S102 - the counterexample's replay code


def test_assert_linear_convergence_verdicts_on_given_distances():
    k = np.arange(60)
    fast = np.maximum(0.005**k, 1e-9)  # below the floor (1.2e-4 for scale 1) after 2 steps
    with pytest.raises(sxt.InconclusiveCheck, match="too fast to measure"):
        sxt.assert_linear_convergence(fast, scale=1.0)
    slow = 0.99**k  # linear, but falls by only 1.8× in the window
    with pytest.raises(sxt.InconclusiveCheck, match="too slow to measure"):
        sxt.assert_linear_convergence(slow)
    # A claimed rate is still checked along a run too fast to measure: a violation.
    with pytest.raises(sxt.CheckFailure, match="claimed rate c = 0.001 is too small"):
        sxt.assert_linear_convergence(fast, rate=0.001, scale=1.0)
    # Next to a measured run, a fast one is covered (its ratios count in ĉ).
    res = sxt.assert_linear_convergence(np.stack([0.5**k, fast]), scale=1.0)
    assert res.verdict == "held" and res.unmeasured == 1 and res.c == pytest.approx(0.5)
    # Divergence after convergence fails, also when it starts from below the floor.
    back = np.r_[0.5 ** np.arange(40), 1e-12 * 3.0 ** np.arange(1, 30)]
    with pytest.raises(sxt.CheckFailure, match="diverged after converging"):
        sxt.assert_linear_convergence(back)


# --------------------------------------------------------------------------------------
# NumPy data with batch_size=.


def test_numpy_data_with_batch_size_is_accepted_by_the_checks():
    alg = scarjax.from_optax(ridge_loss, optax.sgd(0.1), jnp.zeros(4), {"x": X, "y": Y}, batch_size=16,
                             optimum=W_STAR, name="ridge, NumPy data")
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(alg.data))
    _, trace = scarjax.run_trials(alg, None, 20, sxt.replay_keys(0, 4))
    assert np.isfinite(np.asarray(trace.distance)).all()
    assert sxt.check_determinism(alg, 10, settings=2).trials == 4
    # The same minibatches as with JAX arrays given directly.
    same = scarjax.from_optax(ridge_loss, optax.sgd(0.1), jnp.zeros(4), {"x": jnp.asarray(X), "y": jnp.asarray(Y)},
                              batch_size=16, optimum=W_STAR)
    a = scarjax.run(alg, None, 20, jax.random.key(3))[1].distance
    b = scarjax.run(same, None, 20, jax.random.key(3))[1].distance
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))



def test_a_baseline_that_leaves_eps_briefly_and_settles_is_not_called_divergent():
    # A contracting rotation in the l-inf norm: the distance rises at some steps (an
    # oscillating transient) but settles. With ε between d_j and d_(j+1) at such a rise,
    # the baseline is below ε, above it again, then below for good: measured as before
    # (Eq 5.4's hitting time is the step from which it stays below), never "divergent".
    t = 0.7
    rot = 0.9 * jnp.array([[np.cos(t), -np.sin(t)], [np.sin(t), np.cos(t)]], jnp.float32)
    spin = scarjax.fixed_point(lambda w, d: rot @ w, jnp.ones(2), lambda w, d: w @ w, optimum=jnp.zeros(2),
                               norm=linf, name="spin")
    _, base = scarjax.run(spin, None, 60, jax.random.key(0))
    d = np.asarray(base.distance, np.float64)
    j = next(k for k in range(1, 40) if d[k + 1] > d[k])
    eps = 0.5 * (d[j] + d[j + 1])
    assert d[j] < eps < d[j + 1] and d[-1] < eps
    res = sxt.assert_rework_bound(base, base, 0.99, eps=eps)
    assert res.trials_checked == 1 and res.worst_margin >= 0
