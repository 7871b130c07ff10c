"""Cluster scheduling with goodput (thesis Ch. 3, Sec 3.4.2 and 3.5, App. A.2): the Pollux
artifact's simulator, its applications and policies.

* :mod:`~scarjax.sched.apps` - the six applications as goodput models (AppModel, AppSet).
* :mod:`~scarjax.sched.simulator` - the simulated cluster (``Cluster``) and ``simulate(workload,
  policy) -> SimResult`` with per-job records; the ``Policy`` protocol.
* Policies: :mod:`~scarjax.sched.ga` (PolluxSched's genetic algorithm, jit + vmap over the
  population), :mod:`~scarjax.sched.tiresias`, :mod:`~scarjax.sched.optimus` (with oracle).
* :mod:`~scarjax.sched.autoscaler` - the goodput-driven cluster autoscaler (Fig 3.14).
* :mod:`~scarjax.sched.workload` - workloads sampled from the Philly trace as the artifact does.

Randomness and units as in the rest of the library: every entry point that draws takes
``key``, a JAX PRNG key or an int seed, and is deterministic per key (host-side NumPy draws
come from :func:`~scarjax.sched.simulator.key_rng`, the one rule; an int seed gives the
generator the former ``seed=`` argument gave); every time is in seconds, in parameters and
results.

Not imported by ``import scarjax``. The simulator's per-interval math is NumPy; JAX
programs are compiled only when a batch size is optimised or PolluxSched runs.
The command line: ``scarjax cluster-sim --workload PATH --policy {pollux,tiresias,optimus}``.
"""

from scarjax.sched import apps, autoscaler, ga, optimus, simulator, tiresias, workload
from scarjax.sched.apps import *  # noqa: F403 (the applications' public names, apps.__all__)
from scarjax.sched.autoscaler import GoodputAutoscaler, UtilityAutoscaler, simulate_autoscaling
from scarjax.sched.optimus import OptimusPolicy
from scarjax.sched.ga import GAConfig, PolluxPolicy, PolluxSched, power_mean
from scarjax.sched.simulator import Cluster, JobRecord, JobsView, Policy, SimResult, key_rng, simulate
from scarjax.sched.tiresias import TiresiasPolicy
from scarjax.sched.workload import sample_workload

__all__ = [
    "apps",
    "autoscaler",
    "optimus",
    "ga",
    "simulator",
    "tiresias",
    "workload",
    *apps.__all__,
    "GoodputAutoscaler",
    "UtilityAutoscaler",
    "simulate_autoscaling",
    "OptimusPolicy",
    "GAConfig",
    "PolluxPolicy",
    "PolluxSched",
    "power_mean",
    "Cluster",
    "JobRecord",
    "JobsView",
    "Policy",
    "SimResult",
    "key_rng",
    "simulate",
    "TiresiasPolicy",
    "sample_workload",
]
