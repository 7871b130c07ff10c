"""Tiresias (Gu et al., NSDI'19) as the Pollux artifact simulates it (thesis Sec 3.5.1 baseline).

The two-queue discretised least-attained-service scheduler of the artifact's ``tiresias.py``
(``petuum/adaptdl``, branch ``osdi21-artifact``, ``simulator/``), with the users' fixed
configurations (the workload's ``num_replicas`` GPUs and ``batch_size``):

* A new job enters the high-priority queue ``Q0``, at the back.
* At each decision a job that was *running* adds the wall time since the last decision to
  its executed time; once ``executed time x its GPUs`` reaches the threshold (16 GPU-hours,
  ``queue_threshold_gpu_s = 57600``) it is demoted to the back of ``Q1``.
* Jobs are admitted in queue order, ``Q0`` first, each while its whole request fits in the
  GPUs not yet promised this round; a job that does not fit is skipped (later, smaller ones
  may still run) and, if it was running, preempted.
* Admitted jobs keep their GPUs; newly admitted ones get theirs node by node, each time
  from the node with the most free GPUs (lowest index first on ties; the artifact's
  ``Counter.most_common``).
* Starvation avoidance (promote a ``Q1`` job back to ``Q0`` once it has waited
  ``solve_starvation`` times its executed time) is off, as in the artifact
  (``_solve_starvation = 0``); a positive value turns it on.

Times are whole seconds (``int(now)``) as in the artifact.
"""

from __future__ import annotations

import collections

import numpy as np

from scarjax import validate as va

__all__ = ["TiresiasPolicy", "greedy_place"]


def greedy_place(free: np.ndarray, replicas: int) -> np.ndarray:
    """GPUs per node for a job of ``replicas`` GPUs taken node by node from the node with the
    most free GPUs (first such node on ties); decrements ``free`` in place (``tiresias.py``,
    ``optimus.py``: ``free_gpus.most_common(1)``)."""
    row = np.zeros(free.shape[0], np.int64)
    need = int(replicas)
    if need > int(free.sum()):
        raise ValueError(f"replicas={need} exceeds the {int(free.sum())} free GPUs")
    while need > 0:
        node = int(np.argmax(free))
        take = min(int(free[node]), need)
        row[node] += take
        free[node] -= take
        need -= take
    return row


class TiresiasPolicy:
    """Tiresias' two-queue discretised LAS (module docstring). Stateful: :func:`~scarjax.sched.simulate`
    calls :meth:`reset` first.

    Args:
      queue_threshold_gpu_s: demotion threshold in GPU-seconds (16 GPU-hours).
      solve_starvation: promotion factor (0: off, the artifact's setting).
    """

    name = "tiresias"
    adaptive = False

    def __init__(self, queue_threshold_gpu_s: float = 3600 * 16, solve_starvation: float = 0.0):
        va.check_real("queue_threshold_gpu_s", queue_threshold_gpu_s, lo=0.0, scalar=True)
        va.check_real("solve_starvation", solve_starvation, lo=0.0, scalar=True)
        self.queue_threshold = queue_threshold_gpu_s
        self.solve_starvation = solve_starvation
        self.reset()

    def reset(self) -> None:
        self.queue_0: list[int] = []
        self.queue_1: list[int] = []
        self.status: dict[int, str] = {}
        self.last_check = collections.Counter()
        self.total_executed = collections.Counter()
        self.executed = collections.Counter()
        self.last_pending = collections.Counter()
        self.pending = collections.Counter()

    def allocate(self, jobs, cluster, now, key=None) -> np.ndarray:
        ids = [int(i) for i in jobs.ids]
        pos = {j: n for n, j in enumerate(ids)}
        want = {j: int(g) for j, g in zip(ids, jobs.user_gpus)}
        total = cluster.nodes * cluster.gpus_per_node
        too_big = [j for j in ids if want[j] > total or want[j] < 1]
        if too_big:
            j = too_big[0]
            raise ValueError(f"num_replicas: job {j} (workload row {j + 1}) asks for {want[j]} GPUs; the cluster "
                             f"has {total} (Tiresias runs a job on exactly its user's GPUs)")
        t = int(now)
        self.queue_0 = [j for j in self.queue_0 if j in pos]
        self.queue_1 = [j for j in self.queue_1 if j in pos]
        self.status = {j: v for j, v in self.status.items() if j in pos}
        alloc = {j: jobs.alloc[pos[j]].astype(np.int64) for j in ids if jobs.alloc[pos[j]].sum() > 0}
        for j in ids:
            if j not in self.status:
                self.status[j] = "PENDING"
                self.queue_0.append(j)
        for j in ids:
            dt = int(t - self.last_check[j])
            self.last_check[j] = t
            if self.status[j] == "RUNNING":
                self.total_executed[j] += dt
                self.executed[j] += dt
                if j in self.queue_0 and self.executed[j] * want[j] >= self.queue_threshold:
                    self.queue_0.remove(j)
                    self.queue_1.append(j)
            else:
                self.pending[j] += dt
                if self.executed[j] > 0:
                    self.last_pending[j] += dt
                if (self.solve_starvation > 0 and j not in self.queue_0 and self.total_executed[j] > 0
                        and self.executed[j] > 0
                        and self.last_pending[j] >= int(self.executed[j] * self.solve_starvation)):
                    self.executed[j] = 0
                    self.last_pending[j] = 0
                    self.queue_0.append(j)
                    self.queue_1.remove(j)
        left = total
        for queue in (self.queue_0, self.queue_1):
            for j in queue:
                if want[j] <= left:
                    self.status[j] = "RUNNING"
                    left -= want[j]
                else:
                    self.status[j] = "PENDING"
                    alloc.pop(j, None)
        free = np.full(cluster.nodes, cluster.gpus_per_node, np.int64)
        for row in alloc.values():
            free -= row
        for queue in (self.queue_0, self.queue_1):
            for j in queue:
                if self.status[j] == "RUNNING" and j not in alloc:
                    alloc[j] = greedy_place(free, want[j])
        out = np.zeros((len(ids), cluster.nodes), np.int64)
        for j, row in alloc.items():
            out[pos[j]] = row
        return out
