"""experiments._problems: the stored MLR optimum (OPTIMUM_FILE) is used only for the problem
and JAX environment it was computed for and only while it is a minimiser, and it is what a
fresh solve gives in the environment of `scarjax reproduce`."""

import os
import subprocess
import sys

import jax
import numpy as np
import pytest

from experiments import _problems as P
from scarjax.models import mlr


@pytest.fixture(scope="module")
def digits_alg():
    return mlr.digits(lr=P.MLR_LR, l2=P.MLR_L2)


@pytest.fixture(scope="module")
def record(digits_alg):
    # the committed record, re-fingerprinted for this test process's environment (the tests
    # run with 8 host devices and "highest" matmul precision, under which it is not used)
    with np.load(P.OPTIMUM_FILE) as f:
        rec = {k: f[k] for k in f.files}
    return dict(rec, fingerprint=np.asarray(P.fingerprint(digits_alg, P.MLR_LR, P.MLR_L2)))


@pytest.fixture
def saved(tmp_path):
    def save(rec):
        np.savez(tmp_path / "opt.npz", **rec)
        return tmp_path / "opt.npz"
    return save


def test_a_stored_minimiser_of_the_problem_is_used(digits_alg, record, saved):
    got = P.stored_optimum(digits_alg, P.MLR_LR, P.MLR_L2, path=saved(record))
    assert got is not None
    np.testing.assert_array_equal(np.asarray(got["optimum"]["w"]), record["w"])
    assert got["local_c"] == float(record["local_c"])


@pytest.mark.parametrize("lr, l2", [(P.MLR_LR, 2 * P.MLR_L2), (0.5, P.MLR_L2)])
def test_another_problem_is_not_served_the_stored_optimum(record, saved, lr, l2):
    # planted: the same data with another ridge or step (another fingerprint)
    assert P.stored_optimum(mlr.digits(lr=lr, l2=l2), lr, l2, path=saved(record)) is None


def test_other_data_or_precision_is_not_served_the_stored_optimum(digits_alg, record, saved):
    path = saved(record)
    x = np.asarray(digits_alg.data["x"]).copy()
    x[0, 0] += 1.0 / 16.0  # planted: one pixel of the data changed
    other = mlr.mlr(x, np.asarray(digits_alg.data["y"]), num_classes=10, lr=P.MLR_LR, l2=P.MLR_L2)
    assert P.stored_optimum(other, P.MLR_LR, P.MLR_L2, path=path) is None
    with jax.default_matmul_precision("float32"):  # planted: the solve would round differently
        assert P.stored_optimum(digits_alg, P.MLR_LR, P.MLR_L2, path=path) is None


def test_a_stored_point_that_is_not_a_minimiser_is_refused(digits_alg, record, saved, tmp_path):
    bad = dict(record, w=record["w"] + np.float32(1e-3))  # planted: w* moved off the minimum
    assert P.stored_optimum(digits_alg, P.MLR_LR, P.MLR_L2, path=saved(bad)) is None
    assert P.stored_optimum(digits_alg, P.MLR_LR, P.MLR_L2, path=tmp_path / "missing.npz") is None


_CHECK = """
import numpy as np
from experiments import _problems as P
fresh = P.solved_record()
with np.load(P.OPTIMUM_FILE) as f:
    assert str(f["fingerprint"]) == fresh["fingerprint"], "fingerprint"
    assert np.array_equal(f["w"], fresh["w"]), "w"
    assert float(f["local_c"]) == fresh["local_c"], "local_c"
    assert np.array_equal(np.asarray(P.mlr_digits(None).optimum["w"]), f["w"]), "used"
    assert P.mlr_local_c(None) == float(f["local_c"]), "c used"
print("ok")
"""


@pytest.mark.slow
def test_the_stored_optimum_is_what_a_fresh_solve_gives():
    # In the environment of `scarjax reproduce` (no forced devices, default precision): the
    # L-BFGS solve and the op-by-op Jacobian, seconds, hence slow (the separate CI step).
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    out = subprocess.run([sys.executable, "-c", _CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
