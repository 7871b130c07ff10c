"""One process of the 2-process parameter-server test (launched by test_distributed.py).

Usage, from the tests/ folder: python -m ps._mp_worker PORT PROCESS_ID OUT.npz
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import numpy as np  # noqa: E402


def main():
    port, pid, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    from scarjax.ps import distributed

    distributed.initialize(f"127.0.0.1:{port}", 2, pid)
    assert jax.process_count() == 2 and len(jax.devices()) == 8 and len(jax.local_devices()) == 4

    from scarjax import ps as sps

    from . import _problems as pb

    alg = pb.mlr_adam()
    ps = sps.ParameterServer(alg, pb.row_partition(alg), sps.make_mesh(4, 2), workers=8)
    key = jax.random.key(3)
    st, tr = ps.run(ps.init(key), 6, key)
    w = distributed.to_host(ps.logical(st).params["w"])
    loss = distributed.to_host(tr.loss)
    if pid == 0:
        np.savez(out, w=w, loss=loss)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
