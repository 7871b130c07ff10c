"""Multi-process execution of the parameter server (``jax.distributed``).

Each process owns some devices; after :func:`initialize`, ``jax.devices()`` lists the
devices of every process, :func:`scarjax.ps.make_mesh` builds a mesh over all of them and
the same :class:`~scarjax.ps.ParameterServer` program runs SPMD in every process (each
process must run the same calls in the same order). The collectives (all-gather,
reduce-scatter, psum) cross process boundaries: over NCCL/ICI on GPUs/TPUs and, on CPU,
over the implementation set by ``jax_cpu_collectives_implementation`` (``'gloo'``).

See ``docs/multihost.md`` for a real multi-host GPU/TPU cluster.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.experimental import multihost_utils
import numpy as np

from scarjax import validate as va

__all__ = ["initialize", "to_host", "is_initialized"]


def initialize(coordinator_address: str | None = None, num_processes: int | None = None,
               process_id: int | None = None, *, cpu_collectives: str | None = "gloo",
               **kwargs: Any) -> None:
    """Join a multi-process JAX job (``jax.distributed.initialize``).

    Args:
      coordinator_address: ``host:port`` of process 0's coordinator (e.g.
        ``'127.0.0.1:12345'`` on one machine). ``None`` lets JAX auto-detect (SLURM,
        Cloud TPU, Kubernetes/MPI environments).
      num_processes, process_id: the job size and this process's rank.
      cpu_collectives: CPU collectives implementation for cross-process collectives on
        CPU devices (``'gloo'``; ``None`` leaves the setting alone). Must be set before
        the backend starts, i.e. before any computation.
      kwargs: passed to ``jax.distributed.initialize`` (``local_device_ids``, …).
    """
    if num_processes is not None:
        num_processes = va.check_int("num_processes", num_processes, lo=1)
    if process_id is not None:
        hi = None if num_processes is None else num_processes - 1
        process_id = va.check_int("process_id", process_id, lo=0, hi=hi)
    if cpu_collectives is not None:
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(coordinator_address=coordinator_address, num_processes=num_processes,
                               process_id=process_id, **kwargs)


def is_initialized() -> bool:
    return jax.process_count() > 1


def to_host(x: Any) -> Any:
    """Host copy of a pytree of (fully replicated) global arrays, in any process."""

    def one(a):
        if isinstance(a, jax.Array) and not a.is_fully_addressable:
            if not a.is_fully_replicated:
                return np.asarray(multihost_utils.process_allgather(a, tiled=True))
            return np.asarray(a.addressable_data(0))
        return np.asarray(a)

    return jax.tree.map(one, x)
