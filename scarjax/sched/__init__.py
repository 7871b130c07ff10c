"""Cluster scheduling with goodput (thesis Ch. 3, Sec 3.4.2 and 3.5): the Pollux simulator's
applications and their goodput models (:mod:`scarjax.sched.apps`).

Not imported by ``import scarjax``; ``import scarjax.sched`` loads NumPy-only code (JAX is
imported when a throughput model is fitted or a batch size optimised).
"""

from scarjax.sched.apps import (
    ARTIFACT_SETTINGS,
    FITTED_PARAMS,
    AppModel,
    AppSet,
    FitError,
    app_model,
    canonical_placement,
    fit_app_throughput,
    load_apps,
    throughput_fit_error,
)

__all__ = [
    "ARTIFACT_SETTINGS",
    "FITTED_PARAMS",
    "AppModel",
    "AppSet",
    "FitError",
    "app_model",
    "canonical_placement",
    "fit_app_throughput",
    "load_apps",
    "throughput_fit_error",
]
