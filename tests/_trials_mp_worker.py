"""One process of the 2-process run_trials test (launched by tests/test_trials.py).

Usage: python _trials_mp_worker.py PORT PROCESS_ID OUT_PREFIX  (writes OUT_PREFIX{PROCESS_ID}.npz)
"""

import os
import sys

N, STEPS, SEED, VMAP = 21, 6, 7, 2  # as tests/test_trials.py


def hook():
    from scarjax import hooks, perturb, schedules

    return hooks.scheduled(perturb.gaussian(0.05), schedules.with_probability(0.3))


def main():
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import numpy as np

    from scarjax import trials
    from scarjax.models import quadratic
    from scarjax.ps import distributed

    port, pid, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    distributed.initialize(f"127.0.0.1:{port}", 2, pid)
    assert jax.process_count() == 2 and len(jax.devices()) == 8 and len(jax.local_devices()) == 4

    qp = quadratic.fig53_problem()
    keys = jax.random.split(jax.random.key(SEED), N)
    calls = []
    inner = trials._sharded

    def counted(*a, **k):
        calls.append(1)
        return inner(*a, **k)

    trials._sharded = counted
    st, tr = trials.run_trials(qp, hook(), STEPS, keys, vmap_size=VMAP, chunk_size=16)  # 2 chunks of 16
    res = dict(params=st.params, loss=tr.loss, gaussian=tr.delta["gaussian"])
    assert all(isinstance(v, np.ndarray) and v.shape[0] == N for v in res.values())
    np.savez(f"{out}{pid}.npz", chunks=len(calls), **res)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
