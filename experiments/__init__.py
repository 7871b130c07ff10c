"""Experiments that reproduce the papers' figures, one module each.

Every experiment module defines

* ``NAME`` (the CLI name, also the stem of ``results/NAME.json`` and ``paper_figs/NAME.png``)
  and ``DESCRIPTION`` (one line, shown by ``scarjax list``);
* ``Config``: a dataclass of the experiment's settings, whose defaults are the full
  (thesis) settings and whose ``Config.quick()`` gives the cut-down ``--quick`` settings;
* ``run(config, out_dir) -> dict``: runs it and returns the results; decorated with
  ``@_common.recorded(NAME)``, which adds the run's ``meta`` block (UTC start/end, wall
  time, quick/full, machine, JAX and devices, load average, git commit), writes
  ``out_dir/results/NAME.json`` and then draws the figure from that file with ``plot`` —
  however ``run`` is called;
* ``plot(results, out_dir) -> list[Path]``: draws ``out_dir/paper_figs/NAME*.png`` from the
  results JSON alone (non-finite floats revived), in the one style of
  :mod:`experiments._plot`; ``scarjax replot [NAME ...]`` redraws figures this way without
  re-running;
* ``report(results) -> str``: the Markdown section of ``REPRODUCTION.md`` that sets our
  numbers beside the paper's claims; every number in it is computed from ``results``.

Shared layers: :mod:`experiments._common` (results I/O, metadata, progress),
:mod:`experiments._rework` (per-trial rework and Thm 5.3.1 bounds, one summary),
:mod:`experiments._stats` (censoring-aware statistics and their formatting),
:mod:`experiments._problems` and :mod:`experiments._scar` (the models),
:mod:`experiments._plot` (figure style), :mod:`experiments._launch` (fresh JAX processes).
No experiment imports another.

Rework statistics go through :mod:`experiments._stats`: a trial that never re-reaches ε
is censored at its run's horizon (restricted means printed "≥", censored counts in every
table and JSON, bound checks over all trials), never dropped.

``REGISTRY`` lists the experiment modules in the order ``scarjax reproduce --jobs 1`` runs
them (and REPRODUCTION.md reports them); with ``--jobs N`` :func:`run_parallel`
(:mod:`experiments._parallel`) runs them in ``N`` worker processes, longest first by
:data:`COST`, each group of :data:`TOGETHER` in one worker, the :data:`ALONE` ones last and by
themselves (those of :data:`EARLY_SET_UP` set up beside the last others). :func:`load_results`,
:func:`plot_results`, :func:`headline_table` and :func:`run_parallel` are what the command
line uses (``scarjax reproduce``, ``replot``).
"""

REGISTRY: tuple[str, ...] = (
    "experiments.fig5_3_qp",
    "experiments.fig5_5_mlr",
    "experiments.fig5_6_reset",
    "experiments.fig5_7_partial_recovery",
    "experiments.fig5_9_priority_checkpoint",
    "experiments.fig5_11_large_scale",
    "experiments.staleness",
    "experiments.precision",
    "experiments.revocation",
    "experiments.combined",
    "experiments.pollux_efficiency",
    "experiments.pollux_throughput",
    "experiments.pollux_adaptive",
    "experiments.proteus",  # transient clusters: Proteus' BidBrain
    "experiments.tierml_fig12",  # transient clusters: TierML's cost sweep
    "experiments.sched_main", "experiments.sched_sweeps", "experiments.sched_autoscale",  # cluster scheduling
    "experiments.sync_on_the_fly",  # transient clusters: Sync-on-the-fly
    "experiments.litz_elasticity",  # transient clusters: Litz
    "experiments.cluster_scar",  # transient clusters: SCAR on the cluster clock
    "experiments.tierml_fig1", "experiments.tierml_fig11",  # transient clusters: TierML
    "experiments.cmdare",  # performance models: CM-DARE's
    "experiments.perf_models_local",  # performance models: fitted on this machine
    "experiments.planner_validation",  # the planner against the simulator
)

# Expected cost of each experiment, ``{NAME: (quick seconds, full seconds)}``: wall times
# (results' ``meta.wall_s``) of one ``scarjax reproduce --quick`` (``--jobs 2``, on an idle
# 2-core machine) and of one sequential full run on the project's shared 2-core machine.
# ``scarjax reproduce --jobs N`` starts the longest first
# (:func:`experiments._parallel.schedule`); a missing or stale entry only costs time, never
# changes results.
COST: dict[str, tuple[float, float]] = {
    "fig5_3_qp": (7, 29), "fig5_5_mlr": (21, 172), "fig5_6_reset": (19, 145),
    "fig5_7_partial_recovery": (8, 356), "fig5_9_priority_checkpoint": (21, 676),
    "fig5_11_large_scale": (13, 62), "staleness": (20, 55), "precision": (11, 31), "revocation": (9, 40),
    "combined": (11, 24), "pollux_efficiency": (13, 521), "pollux_throughput": (27, 193),
    "pollux_adaptive": (14, 115), "proteus": (5, 19), "tierml_fig12": (2, 518), "sched_main": (8, 825),
    "sched_sweeps": (29, 3959), "sched_autoscale": (7, 49), "sync_on_the_fly": (15, 20),
    "litz_elasticity": (7, 6), "cluster_scar": (5, 37), "tierml_fig1": (4, 414), "tierml_fig11": (4, 13),
    "cmdare": (7, 10), "perf_models_local": (7, 204), "planner_validation": (18, 518),
}

# Experiments that share memoised problems or compiled programs: with ``--jobs N`` each group
# runs in one worker process, one after another (:func:`experiments._parallel.schedule`), so
# that what the first builds serves the others instead of being built again in another
# worker: Figs 5.5/5.6(a) share experiments._problems' MLR optimum, its local contraction and
# (same trial count, steps and algorithm) the compiled baseline runs; the perturbation-source
# experiments share experiments._problems.problem's QP and solved MLR; sched_main's quick run
# uses sched_sweeps' cluster and genetic search (its compiled programs).
TOGETHER: tuple[tuple[str, ...], ...] = (
    ("fig5_5_mlr", "fig5_6_reset"),
    ("staleness", "precision", "revocation", "combined"),
    ("sched_sweeps", "sched_main"),
)

# Experiments that time this machine (step times, throughput of processes pinned to cores):
# with ``--jobs N`` they run last, one at a time, with no other experiment beside them.
ALONE: tuple[str, ...] = ("pollux_throughput", "perf_models_local")

# Experiments of ALONE whose set-up (starting measuring processes, compiling what they time)
# may run beside the last other experiments: with ``--jobs N`` each starts, in a worker of its
# own, as soon as only ALONE experiments are left to start, and waits in
# :func:`experiments._common.wait_alone` before it times anything until it runs alone (the
# others that run then only wait there too).
EARLY_SET_UP: tuple[str, ...] = ("pollux_throughput", "perf_models_local")

# The package's public API for the command line (``scarjax reproduce``/``replot``): results
# I/O, the headline table and the concurrent runner; everything else is private to the
# experiments.
from experiments._common import load_results, plot_results  # noqa: E402
from experiments._headline import table as headline_table  # noqa: E402
from experiments._parallel import ExperimentError, run_parallel  # noqa: E402

__all__ = ["ALONE", "COST", "EARLY_SET_UP", "REGISTRY", "TOGETHER", "ExperimentError", "headline_table",
           "load_results", "plot_results", "run_parallel"]
