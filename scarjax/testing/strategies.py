"""Hypothesis strategies for scarjax's objects (``from scarjax.testing import strategies as sst``).

Every strategy shrinks towards the simplest counterexample: one perturbation at one step,
the smallest failing fraction, one worker, the lowest dimension.

* perturbations: :func:`perturbation_sequences` (:class:`PerturbationSequence` of
  :class:`Perturbation`; replay with ``.hook()``), hook chains and schedules;
* problems: :func:`quadratics` (:class:`TestBed`: an algorithm with its exact rate);
* SCAR: failure specs, partitions of a given state, checkpoint strategies;
* systems: staleness bounds and delay patterns, precision formats, worker counts and
  revocation schedules.
"""

from scarjax.testing._st_perturbations import (
    DIRECTIONS,
    Perturbation,
    PerturbationSequence,
    perturbation_sequences,
    sequence_hook,
    stack,
)
from scarjax.testing._st_problems import TestBed, quadratics

# [strategies: hook chains and schedules — _st_perturbations]
from scarjax.testing._st_perturbations import (  # noqa: I001
    HOOK_KINDS, SCHEDULE_KINDS, DrawnChain, DrawnHook, DrawnSchedule, hook_chains, schedules,
)
# [strategies: SCAR — _st_scar]
from scarjax.testing._st_scar import (  # noqa: I001
    FAILURE_SCHEDULES, PARTITION_LAYOUTS, DrawnCheckpoint, DrawnFailure, LostBlocks, PartitionSpec, checkpoints,
    failures, lost_blocks, partitions,
)
# [strategies: systems — _st_systems]
from scarjax.testing import _st_systems
from scarjax.testing._st_systems import (  # noqa: I001
    DELAY_KINDS, NAMED_FORMATS, PRECISION_KINDS, DelayPattern, PrecisionFormat, Revocation, RevocationSchedule,
    delay_patterns, precision_formats, precision_hook, revocation_schedules, stale_read_hook, staleness_bounds,
    worker_counts,
)

__all__ = [
    "DIRECTIONS",
    "Perturbation",
    "PerturbationSequence",
    "perturbation_sequences",
    "sequence_hook",
    "stack",
    "TestBed",
    "quadratics",
    "failures", "partitions", "lost_blocks", "checkpoints", "DrawnFailure", "DrawnCheckpoint", "PartitionSpec", "LostBlocks", "FAILURE_SCHEDULES", "PARTITION_LAYOUTS",  # SCAR
    *_st_systems.__all__,  # systems
    "schedules", "hook_chains", "DrawnSchedule", "DrawnHook", "DrawnChain", "SCHEDULE_KINDS", "HOOK_KINDS",  # hook chains, schedules
]
