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

``REGISTRY`` lists the experiment modules in the order ``scarjax reproduce`` runs them;
:func:`load_results`, :func:`plot_results` and :func:`headline_table` are what the command
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

# The package's public API for the command line (``scarjax reproduce``/``replot``): results
# I/O and the headline table; everything else is private to the experiments.
from experiments._common import load_results, plot_results  # noqa: E402
from experiments._headline import table as headline_table  # noqa: E402

__all__ = ["REGISTRY", "headline_table", "load_results", "plot_results"]
