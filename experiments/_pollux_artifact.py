"""Reference numbers of the Pollux artifact's own simulator runs (petuum/adaptdl
``osdi21-artifact``, ``simulator/results-jobload/<policy>-1.0/summary.json``), shared by the
scheduling experiments (``sched_main``, ``sched_sweeps``) so that neither imports the other."""

#: Mean JCT (s) of the artifact's simulator at load 1.0 (``simulator/results-jobload/<policy>-1.0/
#: summary.json``, key ``avgs``; petuum/adaptdl osdi21-artifact), workloads 1-8.
REFERENCE_AVG_JCT = {
    "pollux": {"workload-1": 2088.76875, "workload-2": 3322.94375, "workload-3": 2188.49375,
               "workload-4": 2720.98125, "workload-5": 2673.7, "workload-6": 2446.13125,
               "workload-7": 3616.14375, "workload-8": 2951.90625},
    "tiresias": {"workload-1": 2473.65, "workload-2": 5144.9625, "workload-3": 3876.25625,
                 "workload-4": 3280.2625, "workload-5": 3501.0125, "workload-6": 3469.69375,
                 "workload-7": 5479.9125, "workload-8": 5079.70625},
    "optimus": {"workload-1": 4087.0625, "workload-2": 6913.875, "workload-3": 3944.00625,
                "workload-4": 5967.75, "workload-5": 5656.25, "workload-6": 5301.875,
                "workload-7": 7290.85625, "workload-8": 6293.79375},
}
#: Their means over all eight workloads (the ``mean`` key): Pollux -32% vs Tiresias, -52% vs Optimus.
REFERENCE_MEAN_8 = {"pollux": 2751.13359375, "tiresias": 4038.18203125, "optimus": 5681.93359375}
