"""scarjax.testing.check_rework_bound / assert_rework_bound: Thm 5.3.1 (Eq 5.6) and its
Appendix B variants (Lemma B.2.1 in expectation, B.1.2 for SGD) under hypothesis-drawn
perturbation sequences — they pass where the theory holds, and catch planted violations
(a claimed c that is too small, a perturbation too large for the theorem's assumptions,
a diverged run, a B.3 noise constant that is too small) with a readable counterexample
shrunk to a single perturbation."""

import functools

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import strategies as st

import scarjax
from scarjax import testing as sxt
from scarjax.testing import strategies as sst


def _bed(d, c, slowest, seed):
    """One :func:`sst.quadratics` test bed, chosen (not drawn)."""
    return hypothesis.find(
        sst.quadratics(d=st.just(d), c=st.just(c), slowest=st.just(slowest), seed=st.just(seed)), lambda _: True
    )


def _one_event(err):
    return err.details["perturbation"].startswith("1 perturbation: ")


# --------------------------------------------------------------------------------------
# Algorithms whose assumptions hold only somewhere, or only in expectation.

W_STAR = jnp.array([1.0, -2.0])


def _basin_map(w, data):
    """A fixed-point map with three regimes of ``r = ‖w − w*‖``: within the unit ball the
    gradient step of ½r² (``e ← (1 − η)e``: rate exactly c = 1 − η = 0.8); up to r = 4 a
    constant step η towards w* (the Huber loss's gradient step: sublinear); beyond, w* is
    out of reach and the iterate is thrown away (``e ← r·e``: overflow within steps)."""
    e = w - data["w_star"]
    r = jnp.linalg.norm(e)
    inner = (1.0 - data["lr"]) * e
    middle = e - data["lr"] * e / jnp.maximum(r, 1.0)
    return data["w_star"] + jnp.where(r <= 1.0, inner, jnp.where(r <= 4.0, middle, r * e))


def _basin_loss(w, data):
    r = jnp.linalg.norm(w - data["w_star"])
    return jnp.where(r <= 1.0, 0.5 * r**2, r - 0.5)


@functools.cache
def basin():
    """Starts at distance 0.9 from w*, where it contracts at c = 0.8."""
    data = {"w_star": W_STAR, "lr": jnp.float32(0.2)}
    alg = scarjax.fixed_point(_basin_map, W_STAR + jnp.array([0.9, 0.0]), _basin_loss, data, optimum=W_STAR,
                              name="basin")
    return alg, 0.8


BASIN_STEPS = 200


@functools.cache
def sgd_least_squares():
    """SGD (one example per step) on a consistent least-squares problem: the noise vanishes
    at w*, so Eq 5.5 holds in expectation with the exact c = √λ_max(E[(I − η x xᵀ)²]), but
    no single step is guaranteed to contract (not pathwise: variant 'B.2')."""
    rng = np.random.default_rng(0)
    n, d, lr = 16, 3, 0.3
    X = rng.normal(size=(n, d)) / np.sqrt(d)
    w_star = rng.normal(size=d)
    M = sum((np.eye(d) - lr * np.outer(x, x)) @ (np.eye(d) - lr * np.outer(x, x)) for x in X) / n
    c = float(np.sqrt(np.linalg.eigvalsh(M).max()))
    loss = lambda w, b: 0.5 * jnp.mean((b["x"] @ w - b["y"]) ** 2)  # noqa: E731
    data = {"x": jnp.asarray(X, jnp.float32), "y": jnp.asarray(X @ w_star, jnp.float32)}
    w0 = jnp.asarray(w_star + rng.normal(size=d) / np.sqrt(d), jnp.float32)
    alg = scarjax.from_optax(loss, optax.sgd(lr), w0, data, batch_size=1,
                             optimum=jnp.asarray(w_star, jnp.float32), name="sgd-least-squares")
    return alg, c


def _noisy_init(key, data):
    return scarjax.State(data["w0"], jnp.zeros((), jnp.float32))


def _noisy_update(view, state, data, key):
    k = state.aux  # the step counter
    lr = data["lr0"] / (1.0 + k / data["k0"])
    g = data["A"] @ (view - data["w_star"]) + data["sigma"] * jax.random.normal(key, view.shape)
    return -lr * g, scarjax.State(state.params, k + 1.0)


def _noisy_loss(state, data):
    r = state.params - data["w_star"]
    return 0.5 * r @ (data["A"] @ r)


@functools.cache
def noisy_sgd(steps=200, d=2, sigma=0.05, lr0=0.5, k0=20.0):
    """SGD with step η_k = η₀/(1 + k/k₀) on a quadratic with additive gradient noise of
    variance σ² per coordinate: E[‖w⁽ᵏ⁺¹⁾ − w*‖² | w⁽ᵏ⁾] ≤ ρ_k²‖w⁽ᵏ⁾ − w*‖² + η_k²σ²d with
    ρ_k = max|1 − η_kλ(A)|, i.e. Eq B.3 exactly with α_k = 1 − ρ_k², G = max η_kσ√d/α_k."""
    lam = np.linspace(0.5, 1.0, d)
    rng = np.random.default_rng(1)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    A = (Q * lam) @ Q.T
    w_star = rng.normal(size=d)
    data = {"A": jnp.asarray(A, jnp.float32), "w_star": jnp.asarray(w_star, jnp.float32),
            "w0": jnp.asarray(w_star + Q[:, 0], jnp.float32), "lr0": jnp.float32(lr0), "k0": jnp.float32(k0),
            "sigma": jnp.float32(sigma)}
    alg = scarjax.Algorithm(init=_noisy_init, update=_noisy_update, loss=_noisy_loss, data=data,
                            optimum=data["w_star"], name="noisy-sgd")
    lr = lr0 / (1 + np.arange(steps) / k0)
    alphas = 1 - np.max(np.abs(1 - lr[:, None] * lam[None]), axis=1) ** 2
    return alg, alphas, float(np.max(lr * sigma * np.sqrt(d) / alphas))


# --------------------------------------------------------------------------------------
# Thm 5.3.1 (variant '5.3.1').


# Tests share compiled programs (the same algorithm, steps and trials): a program of the
# sequence hook compiles in ~1.5 s, a check runs in a fraction of a second.
STEPS = 300


def test_holds_on_a_quadratic_test_bed_with_the_exact_c():
    """(tests/test_bounds.py runs the same check on drawn test beds, inside @given.)"""
    bed = _bed(4, 0.9, False, 3)
    res = sxt.check_rework_bound(bed.algorithm, bed.c, STEPS, settings=5)
    assert isinstance(res, sxt.ReworkBoundResult) and res.variant == "5.3.1" and res.examples == 5
    assert res.trials_checked >= 5 and res.worst_margin >= 0 and res.margin_unit == "iterations"
    assert res.false_alarm is None and res.c == bed.c
    assert "rework <= bound + 1 in" in res.summary() and "worst margin" in res.summary()


def test_claimed_c_too_small_is_caught_and_replays():
    bed = _bed(4, 0.9, False, 3)
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_rework_bound(bed.algorithm, 0.8, STEPS)
    err = info.value
    msg = str(err)
    assert isinstance(err, AssertionError)
    assert msg.startswith("Thm 5.3.1: rework exceeds the bound")
    for part in ("algorithm", "qp4", "first perturbation at step", "measured rework (Eq 5.4)", "bound",
                 "baseline slack", "c                            : 0.8", "ε", "trial", "seed", "replay with:"):
        assert part in msg, part
    assert _one_event(err)  # shrunk to a single perturbation
    # The baseline itself contracts slower than the claimed c: the message says so.
    assert float(err.details["baseline's slowest step"].split()[0]) > 0.8
    # The replay line reproduces the failure on its own.
    with pytest.raises(sxt.CheckFailure, match="Thm 5.3.1: rework exceeds the bound"):
        exec(err.replay, {"algorithm": bed.algorithm})


def test_perturbation_too_large_for_the_assumptions_is_caught():
    """The basin map contracts at c = 0.8 within distance 1 of w* only: the theorem holds
    for perturbations that stay there, and a perturbation that leaves the ball (minimal:
    one event, ‖δ‖ just large enough) breaks it."""
    alg, c = basin()
    small = sst.perturbation_sequences(30, sizes=st.floats(1e-3, 0.05))
    assert sxt.check_rework_bound(alg, c, BASIN_STEPS, perturbations=small, settings=5).worst_margin >= 0
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_rework_bound(alg, c, BASIN_STEPS)
    err = info.value
    assert err.title == "Thm 5.3.1: rework exceeds the bound" and _one_event(err)
    assert err.details["algorithm"] == "basin"
    size = float(err.details["perturbation"].split("‖δ‖ = ")[1].split(",")[0])
    assert size > 0.1  # it left the unit ball
    # The perturbed run contracted slower than c, the baseline did not.
    assert float(err.details["perturbed run's slowest step"].split("= ")[1].split()[0]) > c + 0.01
    assert "a perturbation too large for the theorem's assumptions" in str(err)


def _run(alg, seqs, steps, seed=0):
    """The kit's batch: ``seqs`` as trials on keys ``replay_keys(seed, 8)`` (the rest
    unperturbed), and the paired unperturbed runs."""
    keys = sxt.replay_keys(seed, 8)
    none = sst.PerturbationSequence(())
    seqs = list(seqs) + [none] * (8 - len(seqs))
    _, tr = scarjax.run_trials(alg, sst.sequence_hook, steps, keys, hook_args=sst.stack(seqs, 4), chunk_size=8)
    _, base = scarjax.run_trials(alg, sst.sequence_hook, steps, keys, hook_args=sst.stack([none] * 8, 4),
                                 chunk_size=8)
    return tr, base


def test_a_diverged_run_is_a_counterexample():
    """Thrown beyond distance 4 the basin map overflows: a diverged trial is reported,
    never dropped."""
    alg, c = basin()
    ok = sst.PerturbationSequence((sst.Perturbation(5, 0.01),))
    far = sst.PerturbationSequence((sst.Perturbation(5, 8.0, "adversarial"),))
    tr, base = _run(alg, [ok, far], BASIN_STEPS)  # the program of the basin checks above
    assert not np.isfinite(np.asarray(tr.distance[1])).all()
    diverged = r"Thm 5.3.1: the perturbed run diverged \(non-finite at step \d+\); the bound says it re-converges within"
    with pytest.raises(sxt.CheckFailure, match=diverged) as info:
        sxt.assert_rework_bound(tr, base, c, converge_at=20, sequences=[ok, far] + [sst.PerturbationSequence(())] * 6,
                                seed=0, name="basin")
    assert info.value.details["trial"] == 1 and "‖δ‖ = 8" in info.value.details["perturbation"]
    assert np.isfinite(float(info.value.details["bound"].split()[0]))  # from the perturbation before the blow-up
    assert "scarjax.run(algorithm, sst.PerturbationSequence((sst.Perturbation(step=5, size=8.0" in info.value.replay


def _synthetic(dist, write, base):
    zeros = np.zeros_like(write)
    tr = scarjax.Trace(loss=dist, distance=dist, delta={}, point_delta={"read": zeros, "update": zeros, "write": write},
                       initial_distance=dist[..., 0])
    return tr, base


def test_censored_trial_fails_only_when_the_bound_lies_within_the_run():
    """Geometric runs at rate c = 0.8; trial 0 is knocked away and never re-converges
    although its bound says it must (a counterexample); trial 1 is knocked so far, so late,
    that its bound lies beyond the end of the run (inconclusive, counted, not failed)."""
    c, L = 0.8, 60
    k = np.arange(L + 1)
    base = c**k
    write = np.zeros((2, L))
    write[0, 5], write[1, 40] = 0.1, 1e6
    dist = np.stack([base, base])
    dist[0, 6:] = 0.5  # stuck
    dist[1, 41:] = (c**40 + 1e6) * c ** (k[41:] - 40)  # exact contraction, but needs > 60 steps
    tr, b = _synthetic(dist, write, base)
    with pytest.raises(sxt.CheckFailure, match="never re-converged, though the bound says it must") as info:
        sxt.assert_rework_bound(tr, b, c, converge_at=20)
    assert info.value.details["trial"] == 0 and info.value.details["first perturbation at step"] == 5
    res = sxt.assert_rework_bound(tr._replace(distance=dist[1:], loss=dist[1:],
                                              point_delta={p: v[1:] for p, v in tr.point_delta.items()}),
                                  b, c, converge_at=20)
    assert res.inconclusive == 1 and res.trials_checked == 0 and "1 inconclusive" in res.summary()


# --------------------------------------------------------------------------------------
# Lemma B.2.1 in expectation (variant 'B.2') and SGD (variant 'B.1.2').


def test_b2_holds_for_deterministic_and_stochastic_algorithms():
    bed = _bed(4, 0.9, False, 3)  # deterministic: the trials agree, any excess fails
    res = sxt.check_rework_bound(bed.algorithm, bed.c, STEPS, variant="B.2", trials=8, settings=4)
    assert res.variant == "B.2" and res.false_alarm == 1e-3 and res.margin_unit == "relative"
    alg, c = sgd_least_squares()
    # Not pathwise: single SGD steps need not contract by c, so no per-trial statement.
    res = sxt.check_rework_bound(alg, c, 150, variant="B.2", trials=16, settings=5)
    assert res.trials_checked == 5 * 16 and "false-alarm rate <= 0.001 per sequence" in res.summary()


def test_b2_claimed_c_too_small_is_caught():
    alg, c = sgd_least_squares()
    with pytest.raises(sxt.CheckFailure) as info:
        sxt.check_rework_bound(alg, c - 0.1, 150, variant="B.2", trials=16, settings=5)
    err = info.value
    assert err.title == "Lemma B.2.1 (Eq B.4; Thm 5.3.1 in expectation): E‖y⁽ᵏ⁾ − w*‖ exceeds the bound"
    assert _one_event(err) and "t-statistic" in err.details and "mean ± s.e. over 16 trials" in str(err)
    with pytest.raises(sxt.CheckFailure, match="Lemma B.2.1"):
        exec(err.replay, {"algorithm": alg})


def test_b12_holds_with_the_exact_constants_and_catches_a_small_G():
    alg, alphas, G = noisy_sgd()
    res = sxt.check_rework_bound(alg, None, 200, variant="B.1.2", alphas=alphas, G=G, trials=16, settings=5)
    assert res.variant == "B.1.2" and res.c is None
    with pytest.raises(sxt.CheckFailure) as info:  # the gradient noise ignored
        sxt.check_rework_bound(alg, None, 200, variant="B.1.2", alphas=alphas, G=0.0, trials=16, settings=5)
    err = info.value
    assert err.title.startswith("Appendix B.1.2") and "E‖y⁽ᵏ⁾ − w*‖² exceeds the bound" in err.title
    assert _one_event(err) and "G = 0" in err.details["bound"]


def test_b12_printed_closed_form_is_not_a_bound_for_noisy_sgd():
    """Why variant 'B.1.2' checks the recursion B.3 and not the printed formula: unperturbed,
    the printed form claims E‖w⁽ᵏ⁾ − w*‖ ≤ a_k d₀ (a_k = Π_{i≤k}(1 − α_i)), but gradient
    noise keeps noisy SGD far above that once a_k d₀ has decayed."""
    alg, alphas, _ = noisy_sgd()
    none = sst.stack([sst.PerturbationSequence(())] * 16, 4)  # the program of the B.1.2 check
    _, base = scarjax.run_trials(alg, sst.sequence_hook, 200, sxt.replay_keys(0, 16), hook_args=none, chunk_size=16)
    d = np.asarray(base.distance, np.float64)[:, -1]
    a = np.prod(1 - alphas[1:])
    assert d.mean() - 4 * d.std(ddof=1) / np.sqrt(d.size) > 3 * a * float(base.distance[0, 0])


# --------------------------------------------------------------------------------------
# Arguments.


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        (dict(variant="5.4"), ValueError, "variant must be one of"),
        (dict(c=1.5), ValueError, "c must lie in"),
        (dict(c=None), ValueError, "needs the linear rate c"),
        (dict(alphas=[0.1]), ValueError, "alphas and G belong to variant='B.1.2'"),
        (dict(variant="B.1.2"), ValueError, "c is not used by variant='B.1.2'"),
        (dict(variant="B.1.2", c=None), ValueError, "needs alphas"),
        (dict(variant="B.1.2", c=None, alphas=[0.5] * 3, G=1.0), ValueError, "alphas must give"),
        (dict(variant="B.1.2", c=None, alphas=[1.5] * 50, G=1.0), ValueError, "alphas must lie in"),
        (dict(variant="B.2", eps=1e-3), ValueError, "eps is not used"),
        (dict(variant="B.2", trials=1), ValueError, "trials must be an int in"),
        (dict(eps=1e-3, converge_at=10), ValueError, "at most one of eps and converge_at"),
        (dict(steps=1), ValueError, "steps must be an int in"),
        (dict(converge_at=80), ValueError, "converge_at must be an int in"),
        (dict(perturbations=[1, 2]), TypeError, "perturbations must be a hypothesis strategy"),
        (dict(false_alarm=0.9), ValueError, "false_alarm must lie in"),
        (dict(seed=-1), ValueError, "seed must be an int in"),
        (dict(settings="deep"), TypeError, "settings must be None, an int"),
        (dict(algorithm="qp"), TypeError, "algorithm must be a scarjax.Algorithm"),
        (dict(no_optimum=True), ValueError, "has no optimum"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, exc, match):
    bed = _bed(1, 0.8, True, 0)
    args = dict(algorithm=bed.algorithm, c=bed.c, steps=50)
    if kwargs.pop("no_optimum", False):
        args["algorithm"] = bed.algorithm.replace(optimum=None)
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        sxt.check_rework_bound(args.pop("algorithm"), args.pop("c"), args.pop("steps"), **args)


def test_assert_rework_bound_bad_arguments():
    tr, base = _run(basin()[0], [sst.PerturbationSequence((sst.Perturbation(5, 0.01),))], BASIN_STEPS)
    with pytest.raises(ValueError, match="needs baseline_trace"):
        sxt.assert_rework_bound(tr, None, 0.5, converge_at=10)
    with pytest.raises(ValueError, match="eps and converge_at are not used"):
        sxt.assert_rework_bound(tr, None, 0.5, variant="B.2", converge_at=10)
    with pytest.raises(ValueError, match="sequences: 1 given for 8 trials"):
        sxt.assert_rework_bound(tr, base, 0.5, converge_at=10, sequences=[sst.PerturbationSequence(())])
    with pytest.raises(TypeError, match="sequences must hold PerturbationSequence"):
        sxt.assert_rework_bound(tr, base, 0.5, converge_at=10, sequences=["x"] * 8)
    with pytest.raises(TypeError, match="trace must be a scarjax Trace"):
        sxt.assert_rework_bound(np.ones((2, 61)), None, 0.5, variant="B.2")
    with pytest.raises(ValueError, match=">= 2 trials"):
        sxt.assert_rework_bound(scarjax.split_trials(tr, 0), None, 0.5, variant="B.2")
