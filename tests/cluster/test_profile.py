"""scarjax.cluster.profile: features of a known matmul model against the closed form 2·m·n·k,
exact parameter counts and tensor sizes, measured times positive and finite (no timing
thresholds), leave-one-model-out with one entry per model, fitted StepTime and checkpoint
predictions, errors naming the bad argument, planted violations."""

import math

import jax.numpy as jnp
import numpy as np
import pytest

import scarjax
from scarjax.cluster.steptime import StepTime
from scarjax.cluster import profile as pf
from scarjax.models import mlr, quadratic

M, N, K = 64, 64, 16  # A [M, N] @ w [N, K]
COARSE = {"C": (10.0, 100.0), "epsilon": (0.01, 0.1)}


def matmul_model(m=M, n=N, k=K):
    """A fixed-point job whose iteration is one [m, n] @ [n, k] product (m == n)."""
    return scarjax.fixed_point(lambda w, d: d["A"] @ w, jnp.ones((n, k)), lambda w, d: jnp.sum(w),
                               {"A": jnp.full((m, n), 0.01)}, name="matmul")


def check_flops(feats: dict, m: int, n: int, k: int, rtol: float = 0.1) -> None:
    """XLA's FLOPs of the iteration match the matmul's 2·m·n·k within ``rtol`` (the rest of
    the step, Δ = f(w) − w, the add and the loss, is O(m·k))."""
    want = 2 * m * n * k
    got = feats["model_flops"]
    assert abs(got - want) <= rtol * want, f"model_flops {got:g} is not within {rtol:.0%} of 2*m*n*k = {want:g}"


def check_lomo(fitted: dict, models: list[str]) -> None:
    """Every fitted model has exactly one leave-one-model-out entry per model label."""
    for part in ("step", "checkpoint"):
        for name, e in (fitted[part] or {}).items():
            got = [d["model"] for d in e["lomo"]]
            want = models if part == "step" else sorted(set(e["groups"]), key=e["groups"].index)
            assert got == want, f"{part} model {name!r}: leave-one-model-out entries {got}, expected one per model {want}"


@pytest.fixture(scope="module")
def tflops():
    return pf.host_tflops(n=128, repeats=2)


def test_features_matmul_closed_form_and_exact_counts(tflops):
    f = pf.features(matmul_model(), tflops=tflops)
    check_flops(f, M, N, K)
    assert f["num_params"] == N * K and f["num_tensors"] == 1
    assert f["avg_tensor_mb"] == f["max_tensor_mb"] == N * K * 4 / 1e6
    assert f["gpu_tflops"] == tflops and math.isclose(f["c_norm"], f["model_flops"] / (tflops * 1e12))
    assert f["bytes_accessed"] > 0 and f["state_mb"] == N * K * 4 / 1e6
    with pytest.raises(AssertionError, match=r"not within 10% of 2\*m\*n\*k"):
        check_flops(f, M, N, 2 * K)  # planted: the wrong closed form


def test_features_mlr_counts_and_factory(tflops):
    x = np.random.default_rng(0).normal(size=(40, 7))
    y = np.arange(40) % 3
    make = lambda b: mlr.mlr(x, y, batch_size=b)  # noqa: E731
    f = pf.features(make, batch_size=8, tflops=tflops)
    assert f["num_params"] == (7 + 1) * 3 and f["batch_size"] == 8 and f["name"] == "mlr"
    # plain SGD keeps no moments: the state is the parameters
    assert f["max_tensor_mb"] == f["state_mb"] == 24 * 4 / 1e6
    with pytest.raises(TypeError, match="batch_size"):
        pf.features(make)
    with pytest.raises(TypeError, match="algorithm"):
        pf.features("mlr")
    with pytest.raises(ValueError, match="tflops"):
        pf.features(matmul_model(), tflops=0.0)


def test_cost_analysis_list_or_dict():
    assert pf.cost_analysis({"flops": 3.0, "bytes accessed": 2, "x": "s"}) == {"flops": 3.0, "bytes accessed": 2.0}
    assert pf.cost_analysis([{"flops": 3.0}, {"flops": 4.0, "bytes accessed": 1.0}]) == {"flops": 7.0, "bytes accessed": 1.0}
    assert pf.cost_analysis(None) == {}
    with pytest.raises(TypeError, match="cost_analysis"):
        pf.cost_analysis(3.0)


def test_measure_step_time_positive_finite_and_errors():
    qp = quadratic.random_problem(0, 32, 10.0)
    for loop in ("step", "scan"):
        s = pf.measure_step_time(qp, steps=3, repeats=2, loop=loop)
        assert math.isfinite(s) and s > 0
    with pytest.raises(ValueError, match="steps"):
        pf.measure_step_time(qp, steps=0)
    with pytest.raises(ValueError, match="loop"):
        pf.measure_step_time(qp, loop="eager")
    with pytest.raises(TypeError, match="algorithm"):
        pf.measure_step_time(None)


def test_measure_checkpoint_time(tmp_path):
    recs = pf.measure_checkpoint_time([0.05, 0.2], tmp_path / "ck", tensors=(1, 3), repeats=1)
    assert [(r["size_mb"], r["tensors"]) for r in recs] == [(0.05, 1), (0.05, 3), (0.2, 1), (0.2, 3)]
    for r in recs:
        assert math.isfinite(r["seconds"]) and r["seconds"] > 0 and len(r["seconds_all"]) == 1
        # random float32 barely compresses: the data files hold most of the state's bytes
        assert 0.7 * r["size_mb"] < r["data_mb"] <= r["total_mb"]
        assert r["total_mb"] == pytest.approx(r["data_mb"] + r["meta_mb"] + r["index_mb"])
        assert r["num_files"] > 0 and 0 < r["largest_file_mb"] <= r["total_mb"]
    assert list((tmp_path / "ck").iterdir()) == []  # stores deleted
    with pytest.raises(ValueError, match="sizes_mb"):
        pf.measure_checkpoint_time([], tmp_path)
    with pytest.raises(ValueError, match="sizes_mb"):
        pf.measure_checkpoint_time([-1.0], tmp_path)
    with pytest.raises(ValueError, match="tensors"):
        pf.measure_checkpoint_time([0.1], tmp_path, tensors=0)
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="directory"):
        pf.measure_checkpoint_time([0.1], tmp_path / "file")


FAMILIES = ["qp", "mlr", "mf", "lda"]


def synthetic_records():
    """Step records whose time is exactly linear in c_norm (2 ms per ms of ideal compute + 0.1
    ms), and checkpoint records linear in the total size (no measurement: deterministic)."""
    rng = np.random.default_rng(0)
    steps = []
    for i, fam in enumerate(FAMILIES):
        for j in range(3):
            c = 1e-5 * (1 + 3 * i + j)
            steps.append({"model": fam, "c_norm": c, "bytes_accessed": 1e5 * (1 + j + i),
                          "step_s": 2 * c + 1e-4})
    ckpt = []
    for s in (1.0, 2.0, 4.0):
        for t in (2, 8):
            meta, index = 0.002 + 1e-4 * t, 0.001 + 2e-4 * t
            ckpt.append({"size_mb": s, "tensors": t, "data_mb": s, "meta_mb": meta, "index_mb": index,
                         "total_mb": s + meta + index, "seconds": 0.05 + 0.02 * s + 0.001 * rng.random()})
    return steps, ckpt


@pytest.fixture(scope="module")
def fitted():
    steps, ckpt = synthetic_records()
    models = {"univariate": pf.STEP_MODELS["univariate"], "svr_rbf": pf.STEP_MODELS["svr_rbf"],
              "power_law": pf.STEP_MODELS["power_law"]}
    cmodels = {n: pf.CHECKPOINT_MODELS[n] for n in ("univariate", "pca2")}
    return pf.fit_local_models(steps, ckpt, step_models=models, checkpoint_models=cmodels, grid=COARSE)


def test_fit_local_models_leave_one_model_out(fitted):
    check_lomo(fitted, FAMILIES)
    uni = fitted["step"]["univariate"]
    assert uni["mape"] < 1e-6 and fitted["best_step"] == "univariate"  # the data are exactly linear
    assert len(uni["predicted"]) == 12 and all(p > 0 for p in uni["predicted"])
    assert set(fitted["checkpoint"]) == {"univariate", "pca2"}
    assert len(fitted["checkpoint"]["univariate"]["lomo"]) == 6  # one per (size, tensors) setting
    meta_a, meta_b = fitted["tensor_overhead"]["meta_mb"]
    assert meta_a == pytest.approx(0.002) and meta_b == pytest.approx(1e-4)
    planted = dict(fitted, step={"univariate": dict(uni, lomo=uni["lomo"][:-1])})
    with pytest.raises(AssertionError, match="expected one per model"):
        check_lomo(planted, FAMILIES)


def test_fit_is_deterministic(fitted):
    steps, ckpt = synthetic_records()
    again = pf.fit_local_models(steps, ckpt, step_models={"svr_rbf": pf.STEP_MODELS["svr_rbf"]},
                                checkpoint_models={"pca2": pf.CHECKPOINT_MODELS["pca2"]}, grid=COARSE)
    assert again["step"]["svr_rbf"]["predicted"] == fitted["step"]["svr_rbf"]["predicted"]
    assert again["checkpoint"]["pca2"]["predicted"] == fitted["checkpoint"]["pca2"]["predicted"]


def test_fit_errors():
    steps, ckpt = synthetic_records()
    with pytest.raises(ValueError, match="at least 3 models"):
        pf.fit_local_models([r for r in steps if r["model"] in ("qp", "mlr")], None, grid=COARSE)
    with pytest.raises(ValueError, match="step_s"):
        pf.fit_local_models([{k: v for k, v in r.items() if k != "step_s"} for r in steps], None)
    with pytest.raises(ValueError, match="c_norm"):
        pf.fit_local_models([{k: v for k, v in r.items() if k != "c_norm"} for r in steps], None)
    with pytest.raises(ValueError, match="step_records"):
        pf.fit_local_models([], None)
    with pytest.raises(ValueError, match="ckpt_records"):
        pf.fit_local_models(steps, [], grid=COARSE)
    with pytest.raises(ValueError, match="'pca2_linear' fit needs at least 5 records"):
        pf.fit_local_models(steps[:6] + steps[9:], ckpt[:4], step_models={"u": pf.STEP_MODELS["univariate"]},
                            checkpoint_models={"pca2": pf.CHECKPOINT_MODELS["pca2"]}, grid=COARSE)
    with pytest.raises(TypeError, match="step_models"):
        pf.fit_local_models(steps, None, step_models={"x": ("linear", "c_norm")})
    with pytest.raises(ValueError, match="unit"):
        pf.fit_local_models(steps, None, step_models={"x": ("linear", ("c_norm",), "hours")})


def test_step_time_model_and_checkpoint_time(fitted, tflops):
    alg = matmul_model()
    f = pf.features(alg, tflops=tflops)
    st = pf.step_time_model(fitted, alg, feats=f, model="univariate")
    assert isinstance(st, StepTime)
    t1 = st(1)
    assert t1 == pytest.approx(2 * f["c_norm"] + 1e-4, rel=1e-6)  # the exact linear law
    np.testing.assert_allclose(st(np.array([1, 2, 4])), t1 / np.array([1, 2, 4]))
    st2 = pf.step_time_model(fitted, alg, feats=f, sync_s=1e-3)
    assert st2(2) > st2(1) / 2
    secs = pf.checkpoint_time(fitted, alg)
    assert math.isfinite(secs) and secs > 0
    with pytest.raises(ValueError, match="model"):
        pf.step_time_model(fitted, alg, feats=f, model="nope")
    with pytest.raises(TypeError, match="fitted"):
        pf.step_time_model({"a": 1}, alg, feats=f)
    with pytest.raises(ValueError, match="sync_s"):
        pf.step_time_model(fitted, alg, feats=f, sync_s=-1.0)
    no_ckpt = dict(fitted, checkpoint=None, best_checkpoint=None)
    with pytest.raises(ValueError, match="no checkpoint models"):
        pf.checkpoint_time(no_ckpt, alg)
