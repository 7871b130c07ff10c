"""Optimus + Oracle (Peng et al., EuroSys'18) as the Pollux artifact simulates it (thesis Sec 3.5.1).

The artifact's ``optimus.py`` (``petuum/adaptdl``, branch ``osdi21-artifact``, ``simulator/``):
each job keeps its user's batch size and Optimus chooses only its number of GPUs, greedily
by marginal gain, with *oracle* knowledge of the iterations each job has left
(:func:`~scarjax.sched.simulator.oracle_remaining_iterations`, from the validation curves at
the job's batch size):

1. Every active job, in submission order, gets one GPU while GPUs remain (the rest get none).
2. A job's marginal gain of one more GPU is ``(T(k) - T(k+1)) * remaining``, the wall time
   saved on its remaining iterations, ``T(k)`` the *measured* seconds per iteration on ``k``
   GPUs packed onto as few nodes as possible at the user's batch split over them
   (``predict_step_time``; at least one accumulation step on one GPU). The gain is 0 at the
   job's cap ``batch_size // min_local_bsz`` GPUs (NCF: 1), or when no GPU would remain.
3. While GPUs remain and some gain is positive, the job with the largest gain (the first in
   submission order on ties) gets one more GPU.
4. Jobs whose number of GPUs is unchanged keep their GPUs; the others, fewest GPUs first,
   are placed node by node from the node with the most free GPUs
   (:func:`~scarjax.sched.tiresias.greedy_place`).
"""

from __future__ import annotations

import math

import numpy as np

from scarjax.sched.simulator import packed_placement
from scarjax.sched.tiresias import greedy_place

__all__ = ["OptimusPolicy", "optimus_max_replicas", "predict_step_time"]


def predict_step_time(apps, app_id: int, batch_size: int, replicas: int, gpus_per_node: int = 4) -> float:
    """Measured seconds per iteration of a job of application ``app_id`` at total
    ``batch_size`` on ``replicas`` GPUs packed onto full nodes (``optimus.py``
    ``predict_step_time``)."""
    m = apps.models[int(app_id)]
    k = int(replicas)
    local = math.ceil(batch_size / k - 1e-8)
    accum = math.ceil(local / m.max_local_bsz - 1e-8) - 1
    if k == 1:
        accum = max(1, accum)
    atomic = math.ceil(local / (accum + 1) - 1e-8)
    atomic = min(atomic, m.max_batch_size // (k * (accum + 1)))
    placement = packed_placement(k, gpus_per_node)
    return float(m.measured_step_time(placement, atomic, accum))


def optimus_max_replicas(jobs) -> np.ndarray:
    """``int[J]`` Optimus' cap per job: ``batch_size // min_local_bsz`` (at least 1; NCF: 1;
    the artifact's ``get_optimus_job_info``)."""
    apps = jobs.apps
    cap = np.maximum(np.asarray(jobs.user_batch_size) // apps.min_local_bsz[jobs.app_ids], 1)
    if "ncf" in apps.names:
        cap = np.where(np.asarray(jobs.app_ids) == apps.names.index("ncf"), 1, cap)
    return cap.astype(np.int64)


class OptimusPolicy:
    """Optimus + Oracle: greedy marginal gain in GPUs with oracle remaining iterations
    (module docstring). Step times are cached per ``(application, batch size, GPUs)``."""

    name = "optimus"
    adaptive = False

    def __init__(self):
        self._cache: dict[tuple, float] = {}

    def reset(self) -> None:
        self._cache = {}

    def _t(self, apps, a: int, b: int, k: int, gpn: int) -> float:
        key = (id(apps), a, b, k, gpn)
        v = self._cache.get(key)
        if v is None:
            v = self._cache[key] = predict_step_time(apps, a, b, k, gpn)
        return v

    def allocate(self, jobs, cluster, now=None, key=None) -> np.ndarray:
        apps = jobs.apps
        n = len(jobs.ids)
        gpn = cluster.gpus_per_node
        app = [int(a) for a in jobs.app_ids]
        bsz = [int(b) for b in jobs.user_batch_size]
        rem = [float(r) for r in jobs.remaining_iters_oracle]
        cap = optimus_max_replicas(jobs).tolist()
        left = cluster.nodes * gpn
        k = [0] * n
        gain = [0.0] * n

        def marginal(j):
            return (self._t(apps, app[j], bsz[j], k[j], gpn) - self._t(apps, app[j], bsz[j], k[j] + 1, gpn)) * rem[j]

        for j in range(n):
            if left < 1:
                continue
            k[j] = 1
            left -= 1
            gain[j] = 0.0 if (k[j] + 1 > cap[j] or left < 1) else marginal(j)
        while left > 0 and n and max(gain) > 0:
            j = int(np.argmax(gain))
            k[j] += 1
            gain[j] = 0.0 if (k[j] + 1 > cap[j] or left < 1) else marginal(j)
            left -= 1
        prev = np.asarray(jobs.alloc, np.int64)
        out = np.zeros((n, cluster.nodes), np.int64)
        keep = [j for j in range(n) if prev[j].sum() > 0 and prev[j].sum() == k[j]]
        free = np.full(cluster.nodes, gpn, np.int64)
        for j in keep:
            out[j] = prev[j]
            free -= prev[j]
        kept = set(keep)
        for j in sorted(range(n), key=lambda j: k[j]):
            if k[j] > 0 and j not in kept:
                out[j] = greedy_place(free, k[j])
        return out
