"""Shared parameter-server fixtures: the 4 x 2 mesh and a small MLR problem."""

import jax
import pytest

from scarjax import ps as sps
from scarjax.scar import checkpoint as ck

from . import _problems as pb


@pytest.fixture(scope="session")
def mesh42():
    if len(jax.devices()) < 8:
        pytest.skip("needs 8 (forced host) devices")
    return sps.make_mesh(4, 2)


@pytest.fixture(scope="session")
def mlr_alg():
    return pb.mlr_adam()


@pytest.fixture(scope="session")
def mlr_part(mlr_alg):
    return pb.row_partition(mlr_alg)


@pytest.fixture(scope="session")
def ckpt_spec():
    return ck.Checkpoint("priority", 0.25, period=8)


@pytest.fixture(scope="session")
def mlr_ps(mlr_alg, mlr_part, mesh42, ckpt_spec):
    """MLR (Adam) on 4 servers x 2 workers, 8 workers, priority running checkpoint."""
    return sps.ParameterServer(mlr_alg, mlr_part, mesh42, workers=8, checkpoint=ckpt_spec)
