"""The floor of the precision in effect: matmul precision detection, its record in the
trace, the floors and the pairing check of :mod:`scarjax.rework` under TF32 (emulated on
CPU by rounding the products' inputs to 10 mantissa bits), with planted violations."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import scarjax
from scarjax import hooks, numerics, perturb
from scarjax.perturb.precision import round_float

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import theory_examples as te  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::scarjax.rework.NoiseFloorWarning")

TF32 = 2.0**-10
EPS32 = float(np.finfo(np.float32).eps)


# --------------------------------------------------------------------------------------
# Detection.


@pytest.mark.parametrize(
    "platform, setting, name",
    [
        ("cpu", None, "float32"), ("cpu", "bfloat16", "float32"), ("cpu", "tensorfloat32", "float32"),
        ("gpu", None, "tensorfloat32"), ("cuda", "default", "tensorfloat32"), ("gpu", "high", "tensorfloat32"),
        ("gpu", "highest", "float32"), ("gpu", "float32", "float32"), ("gpu", "bfloat16", "bfloat16"),
        ("rocm", None, "tensorfloat32"), ("tpu", None, "bfloat16"), ("tpu", "high", "bfloat16_3x"),
        ("tpu", "highest", "float32"), ("gpu", "BF16_BF16_F32", "bfloat16"), ("gpu", "BF16_BF16_F32_X6", "float32"),
        ("gpu", "TF32_TF32_F32", "tensorfloat32"), ("gpu", "F32_F32_F32", "float32"), ("gpu", "ANY_F8_ANY_F8_F32", "float8"),
    ],
)
def test_matmul_precision_table(platform, setting, name):
    p = numerics.matmul_precision(platform, setting)
    assert p.name == name
    assert p.eps == 2.0 ** -p.mantissa_bits
    assert p.exact == (p.mantissa_bits >= 23)


@pytest.fixture
def jax_default_precision():
    """JAX's own default setting (None) for one test: on a GPU/TPU ``tests/conftest.py``
    sets ``'highest'`` for the whole suite, and these tests are about the default."""
    with jax.default_matmul_precision(None):
        yield


def test_matmul_precision_follows_the_setting_in_effect(jax_default_precision):
    assert numerics.matmul_precision("gpu").name == "tensorfloat32"
    with jax.default_matmul_precision("highest"):
        assert numerics.matmul_precision("gpu").name == "float32"
        assert numerics.matmul_precision("gpu").setting == "highest"
    assert numerics.matmul_precision().platform == jax.default_backend()
    assert numerics.matmul_precision(jax.devices()[0]).platform == jax.devices()[0].platform


def test_matmul_precision_refuses_a_bad_platform():
    with pytest.raises(TypeError, match="platform"):
        numerics.matmul_precision(3)


def test_xla_cpu_computes_float32_products_exactly_whatever_the_setting():
    # The table's CPU row: the setting does not change a CPU product.
    x = np.random.default_rng(0).normal(size=(32, 32)).astype(np.float32)
    exact = jax.jit(lambda a: a @ a)(x)
    with jax.default_matmul_precision("bfloat16"):
        low = jax.jit(lambda a: a @ a + 0.0)(x)
    if jax.default_backend() == "cpu":
        np.testing.assert_array_equal(np.asarray(exact), np.asarray(low))


# --------------------------------------------------------------------------------------
# The emulated product.


def test_emulated_matmul_rounds_the_inputs_forward_and_backward():
    rng = np.random.default_rng(1)
    a = jnp.asarray(rng.normal(size=(6, 5)), jnp.float32)
    b = jnp.asarray(rng.normal(size=5), jnp.float32)
    mm = numerics.emulated_matmul(10)
    q = lambda x: round_float(x, 10)  # noqa: E731
    np.testing.assert_array_equal(np.asarray(mm(a, b)), np.asarray(q(a) @ q(b)))
    g = jax.grad(lambda w: jnp.sum(mm(a, w) ** 2))(b)
    r = mm(a, b)
    np.testing.assert_allclose(np.asarray(g), np.asarray(q(a).T @ q(2 * r)), rtol=1e-6)
    assert not np.array_equal(np.asarray(mm(a, b)), np.asarray(a @ b))  # it does round
    with pytest.raises(ValueError, match="mantissa_bits"):
        numerics.emulated_matmul(24)


# --------------------------------------------------------------------------------------
# The record in the trace.


def _as_gpu(monkeypatch):
    """The detection as on a GPU with JAX's defaults (TF32)."""
    real = numerics.matmul_precision
    monkeypatch.setattr(numerics, "matmul_precision", lambda platform=None, setting="current": real("gpu", setting))


def test_run_and_run_trials_record_the_precision_in_effect(monkeypatch, jax_default_precision):
    alg, _, w_norm = te.ridge_problem()
    _, tr = scarjax.run(alg, None, 5, 0)
    assert float(tr.matmul_eps) == numerics.matmul_precision().eps
    assert float(tr.optimum_norm) == pytest.approx(w_norm, rel=1e-6)
    _as_gpu(monkeypatch)
    alg, _, _ = te.ridge_problem()  # a new program (the record is made when it is traced)
    _, tr = scarjax.run_trials(alg, None, 5, jax.random.split(jax.random.key(0), 3))
    np.testing.assert_array_equal(np.asarray(tr.matmul_eps), np.full(3, TF32, np.float32))
    with jax.default_matmul_precision("highest"):
        _, tr = scarjax.run(alg, None, 5, 0)
    assert float(tr.matmul_eps) == EPS32


# --------------------------------------------------------------------------------------
# The ridge example (n = 200, d = 20, condition 50, c = 0.98), TF32 emulated.

TRIALS, STEPS = 48, 600


@pytest.fixture(scope="module")
def ridge():
    """Exact float32 and TF32-emulated runs of the ridge example, recorded as made."""
    keys = jax.random.split(jax.random.key(0), TRIALS)
    sizes = jnp.logspace(-2, 1, TRIALS)
    kick = lambda s: hooks.scheduled(perturb.gaussian(s), 100)  # noqa: E731
    out = {}
    for name, mm in (("f32", jnp.matmul), ("tf32", numerics.emulated_matmul(10))):
        alg, c, w_norm = te.ridge_problem(mm)
        _, base = scarjax.run_trials(alg, None, STEPS, keys)
        _, pert = scarjax.run_trials(alg, kick, STEPS, keys, hook_args=sizes)
        if name == "tf32":  # what a GPU run with JAX's defaults records
            base, pert = te.record_precision(base, 10), te.record_precision(pert, 10)
        out[name] = (base, pert, c, w_norm)
    return out


def test_ridge_float32_passes_check_rework(ridge):
    base, pert, c, _ = ridge["f32"]
    eps = scarjax.calibrate_eps(base, 300)
    check = scarjax.check_rework(pert, base, c, eps=eps)
    assert check.n_held == TRIALS, check.summary()


def test_ridge_tf32_calibrate_eps_refuses_below_the_tf32_floor_naming_the_setting(ridge):
    base, _, _, w_norm = ridge["tf32"]
    floor = scarjax.rework.noise_floor(base)
    assert np.all(floor >= TF32 * w_norm * (1 - 1e-6))  # eps × ‖w*‖ of TF32, not float32's
    with pytest.raises(ValueError, match=r"TF32 noise floor") as e:
        scarjax.calibrate_eps(base, 300)
    msg = str(e.value)
    assert "jax.default_matmul_precision('highest')" in msg and "JAX_DEFAULT_MATMUL_PRECISION=highest" in msg


def test_ridge_tf32_passes_check_rework_above_its_floor(ridge):
    base, pert, c, _ = ridge["tf32"]
    eps = scarjax.calibrate_eps(base, 140)  # earlier: 10× above the TF32 floor
    check = scarjax.check_rework(pert, base, c, eps=eps)
    assert check.n_held == TRIALS, check.summary()


def test_planted_float32_floor_on_a_tf32_run_is_what_fails(ridge):
    # The planted bug: a TF32-rounded run whose floor is computed for float32 (as before
    # precision detection), calibrated on a baseline too short to show its plateau.
    base, pert, c, _ = ridge["tf32"]
    wrong = te.record_precision(base, 23)
    head = wrong._replace(distance=wrong.distance[:, :401], loss=wrong.loss[:, :401])
    d = np.asarray(base.distance, np.float64)
    eps = np.sqrt(d[:, :360].min(-1) * d[:, 360])
    assert np.min(eps / scarjax.rework.noise_floor(head)) > 100  # float32's floor accepts it ...
    check = scarjax.check_rework(te.record_precision(pert, 23), wrong, c, eps=eps, floor=0.0)
    assert check.n_held < TRIALS  # ... and rework then exceeds the bound
    right = head._replace(matmul_eps=base.matmul_eps)
    assert np.max(eps / scarjax.rework.noise_floor(right)) < 10  # TF32's refuses it


# --------------------------------------------------------------------------------------
# Pairing: two compilations of a TF32 run differ by its rounding, not more.


@pytest.fixture(scope="module")
def fused_differently():
    mm = numerics.emulated_matmul(10)

    def mm_split(a, b):  # another accumulation order, as another fusion of the program
        h = a.shape[-1] // 2
        return mm(a[..., :h], b[:h]) + mm(a[..., h:], b[h:])

    keys = jax.random.split(jax.random.key(0), 8)
    alg, c, _ = te.ridge_problem(mm)
    alg2, _, _ = te.ridge_problem(mm_split)
    _, base = scarjax.run_trials(alg, None, STEPS, keys)
    _, pert = scarjax.run_trials(alg2, lambda s: hooks.scheduled(perturb.gaussian(s), 450), STEPS, keys,
                                 hook_args=jnp.full(8, 0.5))
    return te.record_precision(base, 10), te.record_precision(pert, 10), c


def test_pairing_allows_the_tf32_rounding_between_compilations(fused_differently):
    base, pert, c = fused_differently
    d, b = np.asarray(pert.distance), np.asarray(base.distance)
    assert np.max(np.abs(d[:, :450] - b[:, :450]) / np.maximum(d, b)[:, :450]) > 1e-3  # float32's rule fails
    check = scarjax.check_rework(pert, base, c, eps=0.5)
    assert check.n_trials == 8


def test_pairing_planted_float32_record_is_refused(fused_differently):
    base, pert, c = fused_differently
    with pytest.raises(ValueError, match="differ at iteration"):
        scarjax.check_rework(te.record_precision(pert, 23), te.record_precision(base, 23), c, eps=0.5)


def test_pairing_refuses_more_than_the_tf32_rounding(fused_differently):
    base, pert, c = fused_differently
    w = float(np.max(base.optimum_norm))
    d = np.asarray(base.distance, np.float64)
    shifted = base._replace(distance=(d + 2.0 * TF32 * (w + d)).astype(np.float32))
    with pytest.raises(ValueError, match="beyond|by more than the rounding of the TF32"):
        scarjax.check_rework(pert, shifted, c, eps=0.5)


def test_mixed_precisions_are_refused(fused_differently):
    base, pert, c = fused_differently
    with pytest.raises(ValueError, match=r"paired runs need the same precision.*highest"):
        scarjax.check_rework(pert, te.record_precision(base, 23), c, eps=0.5)


def test_loss_floor_is_the_precision_in_effect():
    loss = np.linspace(2.0, 1.0, 50).astype(np.float32)
    tr = scarjax.Trace(loss=loss, distance=None, delta={}, point_delta={}, matmul_eps=np.float32(TF32))
    assert float(scarjax.rework.noise_floor(tr, "loss")) == pytest.approx(TF32 * 1.0)
    assert float(scarjax.rework.noise_floor(tr._replace(matmul_eps=None), "loss")) == pytest.approx(EPS32)


# --------------------------------------------------------------------------------------
# Algorithm.precision: the precision a run traces the algorithm under.


def _recording_algorithm(precision=None):
    """A 2-D least squares whose loss records the matmul setting it is traced under."""
    seen = []

    def loss_fn(w, batch):
        seen.append(jax.config.jax_default_matmul_precision)
        return 0.5 * jnp.mean((batch["x"] @ w - batch["y"]) ** 2)

    x = jnp.asarray([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    alg = scarjax.from_optax(loss_fn, optax.sgd(0.1), jnp.zeros(2), {"x": x, "y": jnp.ones(3)},
                             precision=precision, name=f"rec_{precision}")
    return alg, seen


def test_algorithm_precision_is_the_setting_its_run_is_traced_under():
    alg, seen = _recording_algorithm("highest")
    scarjax.run(alg, None, 3, 0)
    assert seen and all(str(s) == "highest" for s in seen)
    # replace() sets it on any algorithm; the run records the precision it was traced under
    plain, seen_plain = _recording_algorithm(None)
    with jax.default_matmul_precision("bfloat16"):
        _, tr = scarjax.run(plain, None, 3, 1)
        _, tr_hi = scarjax.run(plain.replace(precision="highest"), None, 3, 1)
    assert str(seen_plain[0]) == "bfloat16" and str(seen_plain[-1]) == "highest"
    assert float(tr_hi.matmul_eps) == numerics.matmul_precision(setting="highest").eps
    assert float(tr.matmul_eps) == numerics.matmul_precision(setting="bfloat16").eps


def test_algorithm_precision_planted_violation_is_seen():
    # The check above can fail: without the field the loss is traced under the outer setting.
    alg, seen = _recording_algorithm(None)
    with jax.default_matmul_precision("bfloat16"):
        scarjax.run(alg, None, 3, 0)
    assert not any(str(s) == "highest" for s in seen)


def test_quadratic_reference_problems_compute_in_full_float32():
    from scarjax.models import quadratic

    assert quadratic.fig53_problem().precision == "highest"
    assert quadratic.random_problem(0, 4, 10.0).precision == "highest"


@pytest.mark.parametrize("bad, err", [("bogus", ValueError), (3, TypeError), ("", ValueError)])
def test_algorithm_precision_refuses_unknown_settings_naming_the_argument(bad, err):
    with pytest.raises(err, match="precision"):
        _recording_algorithm(bad)
    with pytest.raises(err, match="precision"):
        _recording_algorithm(None)[0].replace(precision=bad)


def test_precision_advice_names_the_algorithm_field():
    assert "precision='highest'" in numerics.HIGHEST_ADVICE
