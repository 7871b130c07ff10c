"""Test configuration: 8 forced host CPU devices stand in for a multi-device machine
(``XLA_FLAGS``, set in the repository's root ``conftest.py`` before JAX is imported);
hypothesis profiles; the shared data fixtures."""

import os
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=25, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# On GPUs, float32 matrix products default to TF32 (about 3 decimal digits), so a vmapped
# trial and the sequential run of the same key then agree only to ~1e-3 relative; the
# determinism tests claim float32 rounding (1e-5), which needs full-precision products.
# On CPU this is the default already (docs/architecture.md §3, "Trials on accelerators").
import jax  # noqa: E402

if jax.default_backend() != "cpu":
    jax.config.update("jax_default_matmul_precision", "highest")



def pytest_collection_modifyitems(config, items):
    """``@pytest.mark.cpu_exact``: a bit-level claim of the CPU backend, skipped on GPUs and
    TPUs (measured on an H100: the same programs fused otherwise, 1 ulp apart)."""
    if jax.default_backend() == "cpu":
        return
    skip = pytest.mark.skip(reason=f"bit-exact numbers of the CPU backend (running on {jax.default_backend()})")
    for item in items:
        if "cpu_exact" in item.keywords:
            item.add_marker(skip)


SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data():
    """``get(sub)``: the path ``../shared/data/<sub>`` (the real data files); a test
    using it skips cleanly when the folder or the sub-path is absent. The one way tests
    reach real data."""

    def get(sub: str) -> Path:
        path = SHARED_DATA / sub
        if not path.exists():
            pytest.skip(f"real data not available: {path}")
        return path

    return get


@pytest.fixture(scope="session")
def digits():
    """``(X float32[1797, 64], y int32[1797])``: scikit-learn's digits, loaded once per
    session (:func:`scarjax.data.load_digits`; what ``models.mlr.digits`` trains on)."""
    from scarjax.data import load_digits

    return load_digits()


@pytest.fixture(scope="session")
def mnist_test(shared_data):
    """``(X float32[10000, 784], y int32[10000])``: the real MNIST test split, parsed
    once per session (skips when ``../shared/data/mnist`` is absent)."""
    from scarjax.data import load_mnist

    return load_mnist(shared_data("mnist"), split="test")


@pytest.fixture(scope="module")
def sgd():
    """A small minibatch-SGD MLR (64 random points, 4 features, 3 classes, batch 16): the
    stochastic algorithm of the hook and staleness tests."""
    import numpy as np

    from scarjax.models import mlr

    rng = np.random.default_rng(1)
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = rng.integers(0, 3, size=64)
    return mlr.mlr(x, y, num_classes=3, lr=0.5, batch_size=16)
