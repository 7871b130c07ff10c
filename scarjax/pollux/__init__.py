"""Pollux goodput toolkit (thesis Ch. 3): PGNS, statistical efficiency, throughput model,
goodput-optimal batch size and the job-level adaptive agent.

The public API is this package's namespace (``scarjax.pollux.<name>``); the modules that
implement it are private::

  _estimators  Eq 3.2 / App. A.1 estimators: GradStats, microbatch/two-batch/differenced/
               exact statistics, noise_scale, micro-batch gradients and their moments
  _precond     the pre-conditioner P from an optax state (hyper-parameters read, never defaulted)
  _transforms  the optax transforms track_pgns / with_pgns and their states
  _estimate    estimate_pgns_at: phi at fixed parameters over many draws, with the exact value
  _efficiency  Eq 3.3 efficiency, Eq 3.1 goodput, statistical epochs
  _throughput  Eq 3.4-3.9 throughput model and its RMSLE fit (Sec 3.4.1)
  _tuning      Eq 3.10 batch-size optimisation and LR scaling rules
  _agent       the job-level PolluxAgent loop (Sec 3.4.1)

:mod:`scarjax.pollux.examples` (public) holds the small example problems (MLR, MLP, CNNs on
8x8 digits and MNIST-5k) that the experiments, notebooks, benchmarks and tests use.
"""

from scarjax.pollux._agent import AgentConfig, PolluxAgent, train_adaptive
from scarjax.pollux._efficiency import efficiency, efficiency_from_stats, goodput, statistical_epochs
from scarjax.pollux._estimate import PGNSEstimate, estimate_pgns_at, pgns_data, pgns_draws, pgns_exact
from scarjax.pollux._estimators import (
    GradStats,
    MicrobatchMoments,
    differenced_stats,
    exact_stats,
    microbatch_axes,
    microbatch_grads,
    microbatch_stats,
    noise_scale,
    per_example_grads,
    reduce_microbatches,
    two_batch_stats,
)
from scarjax.pollux._precond import collect as collect_preconditioners
from scarjax.pollux._precond import preconditioner
from scarjax.pollux._throughput import check_params as check_throughput_params
from scarjax.pollux._throughput import (
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
from scarjax.pollux._transforms import (
    PGNSState,
    PGNSWrapperState,
    find_pgns_state,
    pgns_from_state,
    smoothed_stats,
    track_pgns,
    with_pgns,
)
from scarjax.pollux._tuning import (
    BatchConfig,
    LRScaleState,
    lr_scale,
    optimize_batch_size,
    optimize_batch_sizes,
    scale_by_lr_rule,
    set_learning_rate,
)
__all__ = [
    "AgentConfig",
    "BatchConfig",
    "FitResult",
    "GradStats",
    "LRScaleState",
    "MicrobatchMoments",
    "PGNSEstimate",
    "PGNSState",
    "PGNSWrapperState",
    "PolluxAgent",
    "ThroughputParams",
    "check_throughput_params",
    "collect_preconditioners",
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
    "optimize_batch_sizes",
    "per_example_grads",
    "pgns_data",
    "pgns_draws",
    "pgns_exact",
    "pgns_from_state",
    "placement",
    "preconditioner",
    "priors",
    "reduce_microbatches",
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
    "train_adaptive",
    "two_batch_stats",
    "with_pgns",
]
