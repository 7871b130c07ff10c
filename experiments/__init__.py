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

``REGISTRY`` lists the experiment modules in the order ``scarjax reproduce`` runs them.
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
    "experiments.proteus",  # C2 (issue 14)
    "experiments.tierml_fig12",  # C1 (issue 14)
    "experiments.sched_main", "experiments.sched_sweeps", "experiments.sched_autoscale",  # S3 (issue 15)
    "experiments.sync_on_the_fly",  # D (issue 14)
    "experiments.litz_elasticity",  # D (issue 14)
    "experiments.cluster_scar",  # A (issue 14)
    "experiments.tierml_fig1", "experiments.tierml_fig11",  # B (issue 14)
    "experiments.cmdare",  # H4 (issue 16)
    "experiments.perf_models_local",  # H5 (issue 16)
    "experiments.planner_validation",  # H7 (issue 16)
)
