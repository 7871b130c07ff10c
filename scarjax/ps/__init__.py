"""The sharded parameter server on a JAX device mesh (thesis Sec 2.1, 4.3–4.4, 5.4.3;
TierML Sec 3.2–3.3).

* :mod:`~scarjax.ps.mesh` – the ``('server', 'worker')`` mesh;
* :mod:`~scarjax.ps.store` – physical block storage, placement as data, pull/push;
* :mod:`~scarjax.ps.server` – :class:`ParameterServer`: any Algorithm, real collectives;
* :mod:`~scarjax.ps.failures` – server-shard failures and SCAR recovery;
* :mod:`~scarjax.ps.topk` – distributed priority selection;
* :class:`SSP` – stale-synchronous workers with caches and clocks (``ps/_ssp.py``);
* :mod:`~scarjax.ps.elastic` – adding/removing servers and workers (Litz);
* :mod:`~scarjax.ps.tiers` – TierML's ActivePS/BackupPS tiers and bulk revocations;
* :mod:`~scarjax.ps.distributed` – multi-process execution.
"""

from scarjax.ps import distributed, elastic, failures, mesh, store, tiers, topk
from scarjax.ps.mesh import make_mesh
from scarjax.ps.server import MODES, ParameterServer, PSState, PSTrace
from scarjax.ps._ssp import SSP, SSPState

__all__ = [
    "ParameterServer", "PSState", "PSTrace", "MODES", "SSP", "SSPState", "make_mesh",
    "mesh", "store", "failures", "topk", "elastic", "tiers", "distributed",
]
