"""Pollux goodput toolkit (thesis Ch. 3): PGNS, statistical efficiency, throughput model,
goodput-optimal batch size and the job-level adaptive agent.

Modules:
  pgns        Eq 3.2 / App. A.1 estimators and the optax transforms (track_pgns, with_pgns)
  precond     the pre-conditioner P from an optax state (hyper-parameters read, never defaulted)
  estimate    estimate_pgns_at: phi at fixed parameters over many draws, with the exact value
  efficiency  Eq 3.3 efficiency, Eq 3.1 goodput, statistical epochs
  throughput  Eq 3.4-3.9 throughput model and its RMSLE fit (Sec 3.4.1)
  tuning      Eq 3.10 batch-size optimisation and LR scaling rules
  agent       the job-level PolluxAgent loop (Sec 3.4.1)
"""

from scarjax.pollux.efficiency import efficiency, efficiency_from_stats, goodput, statistical_epochs
from scarjax.pollux.estimate import PGNSEstimate, estimate_pgns_at
from scarjax.pollux.pgns import (
    GradStats,
    PGNSState,
    PGNSWrapperState,
    differenced_stats,
    exact_stats,
    find_pgns_state,
    microbatch_axes,
    microbatch_grads,
    microbatch_stats,
    noise_scale,
    per_example_grads,
    pgns_from_state,
    preconditioner,
    smoothed_stats,
    track_pgns,
    two_batch_stats,
    with_pgns,
)
from scarjax.pollux.throughput import (
    FitResult,
    ThroughputParams,
    fit_throughput,
    placement,
    priors,
    rmsle,
    t_grad,
    t_iter,
    t_sync,
    throughput,
    total_batch_size,
)
from scarjax.pollux.tuning import (
    BatchConfig,
    LRScaleState,
    lr_scale,
    optimize_batch_size,
    scale_by_lr_rule,
    set_learning_rate,
)

__all__ = [
    "BatchConfig",
    "FitResult",
    "GradStats",
    "LRScaleState",
    "PGNSEstimate",
    "PGNSState",
    "PGNSWrapperState",
    "ThroughputParams",
    "differenced_stats",
    "efficiency",
    "efficiency_from_stats",
    "estimate_pgns_at",
    "exact_stats",
    "find_pgns_state",
    "fit_throughput",
    "goodput",
    "lr_scale",
    "microbatch_axes",
    "microbatch_grads",
    "microbatch_stats",
    "noise_scale",
    "optimize_batch_size",
    "per_example_grads",
    "pgns_from_state",
    "placement",
    "preconditioner",
    "priors",
    "rmsle",
    "scale_by_lr_rule",
    "set_learning_rate",
    "smoothed_stats",
    "statistical_epochs",
    "t_grad",
    "t_iter",
    "t_sync",
    "throughput",
    "total_batch_size",
    "track_pgns",
    "two_batch_stats",
    "with_pgns",
]

from scarjax.pollux.agent import AgentConfig, PolluxAgent, train_adaptive  # noqa: E402

__all__ += ["AgentConfig", "PolluxAgent", "train_adaptive"]
