"""Small shared problems for the parameter-server tests (also imported by the
multi-process worker script, so no pytest here)."""

import numpy as np
import optax

from scarjax.scar import partition as pt
from scarjax.models import mf, mlr

STEPS = 12


def mlr_data(seed=0, n=128, d=10, k=4):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d)).astype(np.float32)
    x[:, 3] = 0.0  # a dead feature: its weight row never moves (ties in priority selection)
    y = rng.integers(0, k, n)
    return x, y


def mlr_adam():
    x, y = mlr_data()
    return mlr.mlr(x, y, num_classes=4, batch_size=32, optimizer=optax.adam(0.05), name="mlr_adam")


def mlr_full_batch():
    x, y = mlr_data()
    return mlr.mlr(x, y, num_classes=4, batch_size=None, lr=0.5, name="mlr_gd")


def mf_small():
    return mf.synthetic(0, n_users=16, n_items=12, rank=2, density=0.5, factors=2, lam=1.0)


def row_partition(alg, servers=4, key=1):
    import jax

    st = alg.init(jax.random.key(0), alg.data)
    return pt.by_row(st, num_servers=servers, key=key)


def mf_partition(alg, servers=4, key=1):
    import jax

    st = alg.init(jax.random.key(0), alg.data)
    return pt.by_axis(st, {"L": 0, "R": 1}, num_servers=servers, key=key)
