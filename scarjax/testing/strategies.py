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
    HOOK_KINDS,
    SCHEDULE_KINDS,
    DrawnChain,
    DrawnHook,
    DrawnSchedule,
    Perturbation,
    PerturbationSequence,
    hook_chains,
    perturbation_sequences,
    schedules,
    sequence_hook,
    stack,
)
from scarjax.testing._st_problems import TestBed, quadratics
from scarjax.testing._st_scar import (
    FAILURE_SCHEDULES,
    PARTITION_LAYOUTS,
    DrawnCheckpoint,
    DrawnFailure,
    LostBlocks,
    PartitionSpec,
    checkpoints,
    failures,
    lost_blocks,
    partitions,
)
from scarjax.testing._st_systems import (
    DELAY_KINDS,
    NAMED_FORMATS,
    PRECISION_KINDS,
    DelayPattern,
    PrecisionFormat,
    Revocation,
    RevocationSchedule,
    delay_patterns,
    precision_formats,
    precision_hook,
    revocation_schedules,
    stale_read_hook,
    staleness_bounds,
    worker_counts,
)

__all__ = [
    # perturbations, schedules, hook chains
    "perturbation_sequences", "Perturbation", "PerturbationSequence", "DIRECTIONS", "sequence_hook", "stack",
    "schedules", "DrawnSchedule", "SCHEDULE_KINDS", "hook_chains", "DrawnChain", "DrawnHook", "HOOK_KINDS",
    # test beds
    "quadratics", "TestBed",
    # SCAR: failures, partitions, lost blocks, checkpoints
    "failures", "DrawnFailure", "FAILURE_SCHEDULES", "partitions", "PartitionSpec", "PARTITION_LAYOUTS",
    "lost_blocks", "LostBlocks", "checkpoints", "DrawnCheckpoint",
    # systems: precision, staleness, workers, revocations
    "precision_formats", "PrecisionFormat", "precision_hook", "PRECISION_KINDS", "NAMED_FORMATS",
    "staleness_bounds", "delay_patterns", "DelayPattern", "stale_read_hook", "DELAY_KINDS",
    "worker_counts", "revocation_schedules", "Revocation", "RevocationSchedule",
]
