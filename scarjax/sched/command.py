"""The command line of the scheduling simulator (``scarjax cluster-sim``): a policy by name
and one simulation written as JSON.

A module of its own so that :mod:`scarjax.sched.simulator` does not import the policies
(:mod:`~scarjax.sched.optimus` and :mod:`~scarjax.sched.ga` build on the simulator's
placements, so the simulator importing them back would be a cycle).
"""

from __future__ import annotations

import json
from pathlib import Path

from scarjax import validate as va
from scarjax.sched.apps import load_apps
from scarjax.sched.ga import PolluxPolicy
from scarjax.sched.optimus import OptimusPolicy
from scarjax.sched.simulator import Cluster, Policy, SimResult, simulate
from scarjax.sched.tiresias import TiresiasPolicy

__all__ = ["POLICIES", "cluster_sim", "make_policy"]

POLICIES = ("pollux", "tiresias", "optimus")


def make_policy(name: str, **options) -> Policy:
    """The policy named ``name`` (one of :data:`POLICIES`): :class:`~scarjax.sched.ga.PolluxPolicy`,
    :class:`~scarjax.sched.tiresias.TiresiasPolicy` or :class:`~scarjax.sched.optimus.OptimusPolicy`,
    built with ``options``."""
    va.check_choice("name", name, POLICIES)
    if name == "tiresias":
        return TiresiasPolicy(**options)
    if name == "optimus":
        return OptimusPolicy(**options)
    return PolluxPolicy(**options)


def cluster_sim(workload, policy: str, out, *, traces=None, interval_s: float = 60.0, key=0,
                nodes: int = 16, gpus_per_node: int = 4, interference: float = 0.0,
                timeline: bool = False) -> SimResult:
    """``scarjax cluster-sim``: simulate a workload file (the artifact's CSV format) under the
    named policy and write the result as JSON to ``out`` (average, p99 and makespan of the
    JCTs, per-job completion times and records; with ``timeline`` the GPUs per job after each
    decision).

    ``traces``: a folder of application traces in the artifact's layout (``<app>/placements.csv``
    ...; default: the embedded ones). ``key``: the simulation's JAX PRNG key or int seed
    (:func:`~scarjax.sched.simulator.simulate`); the command line's ``--seed N`` is the int
    seed ``N``. Times in seconds (``interval_s``).
    """
    out = va.check_path("out", out)
    apps = load_apps(traces) if traces is not None else load_apps()
    cluster = Cluster(nodes=nodes, gpus_per_node=gpus_per_node, interval_s=interval_s, interference=interference)
    res = simulate(workload, make_policy(policy), cluster=cluster, apps=apps, key=key, record_timeline=timeline)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(res.to_json(timeline=timeline), indent=1))
    return res
