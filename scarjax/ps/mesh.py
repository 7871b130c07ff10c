"""The device mesh of the sharded parameter server (thesis Sec 2.1, 4.3; Sec 5.4.3).

A 2-D :func:`jax.make_mesh` mesh with axes ``('server', 'worker')``: parameter blocks are
sharded along ``'server'`` (server shard ``s`` is the row of devices ``(s, ·)``; its
blocks are replicated along ``'worker'``) and data shards along *both* axes, so every
device is a worker and every device row is one parameter-server shard — the co-located
worker/server deployment of Litz (Sec 4.3) and of SCAR's PS nodes (Sec 5.4.3).

The same code runs on forced host CPU devices
(``XLA_FLAGS=--xla_force_host_platform_device_count=8``), on one accelerator (a 1×1
mesh), on many accelerators, and across processes after
:func:`scarjax.ps.distributed.initialize` (``jax.devices()`` is then global).
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

__all__ = ["SERVER", "WORKER", "AXES", "make_mesh", "server_spec", "data_spec", "replicated", "mesh_shape"]

SERVER = "server"
WORKER = "worker"
AXES = (SERVER, WORKER)


def make_mesh(servers: int, workers: int = 1, *, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """A ``servers × workers`` mesh with axes ``('server', 'worker')``.

    Args:
      servers: number of parameter-server shards ``S`` (>= 1).
      workers: devices per server shard along the ``'worker'`` axis (>= 1); the
        mesh uses ``S · workers`` devices.
      devices: the devices to use, in the order you want: a sequence, or an array of any
        shape (e.g. ``jax.experimental.mesh_utils.create_device_mesh((S, W))``), read in
        row-major order, so an ``S × W`` array is the mesh's layout as given (server shard
        ``s`` is its row ``s``); the first ``S · workers`` are used. Default:
        ``jax.make_mesh``'s topology-aware order of ``jax.devices()``.

    Raises:
      ValueError: on non-positive sizes or too few devices; TypeError when ``devices``
        holds something other than ``jax.Device``-s.
    """
    for name, v in (("servers", servers), ("workers", workers)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be an int >= 1, got {v!r}")
    n = servers * workers
    # Auto axes: the collectives are explicit inside shard_map; outside it (host views,
    # re-layout) XLA may insert what it needs.
    auto = (jax.sharding.AxisType.Auto,) * 2
    devs = np.asarray(jax.devices() if devices is None else devices, dtype=object).reshape(-1)
    if devs.size < n:
        raise ValueError(
            f"a {servers}x{workers} mesh needs {n} devices, only {devs.size} available "
            "(on CPU set XLA_FLAGS=--xla_force_host_platform_device_count=N before importing jax)"
        )
    if devices is None:
        return jax.make_mesh((servers, workers), AXES, axis_types=auto, devices=list(devs[:n]))
    for d in devs[:n]:
        if not isinstance(d, jax.Device):
            raise TypeError(f"devices must hold jax.Device objects, got {type(d).__name__}")
    return Mesh(devs[:n].reshape(servers, workers), AXES, axis_types=auto)


def mesh_shape(mesh: Mesh) -> tuple[int, int]:
    """``(S, W)`` of a parameter-server mesh."""
    if tuple(mesh.axis_names) != AXES:
        raise ValueError(f"mesh axes must be {AXES}, got {mesh.axis_names}")
    return int(mesh.shape[SERVER]), int(mesh.shape[WORKER])


def server_spec() -> P:
    """Physical block stores: leading (slot) axis split over the server shards."""
    return P(SERVER)


def data_spec() -> P:
    """Per-worker data shards: leading (worker) axis split over every device."""
    return P(AXES)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())
