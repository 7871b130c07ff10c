"""scarjax: self-correcting ML training on unreliable resources, in JAX.

Core API (thesis Ch. 5, SCAR):

* :class:`Algorithm`, :class:`State` – an iterative-convergent procedure in parameter-server
  form (Eq 2.2–2.3); :func:`from_optax` and :func:`fixed_point` build one in a few lines.
* :mod:`scarjax.hooks` – perturbation hooks at the read / update / write injection points,
  composed with :func:`chain`.
* :mod:`scarjax.schedules` – when an event happens (a step, every k, probability p,
  geometric, steps from a trace).
* :func:`run`, :func:`run_trials` – the perturbed loop (Eq 5.2) as one compiled
  ``lax.scan``; Monte-Carlo trials vmapped and sharded over the devices
  (:mod:`scarjax.trials`).
* :func:`rework_cost`, :func:`calibrate_eps` – measured rework (Eq 5.4);
  :func:`check_rework` – rework and the Thm 5.3.1 bound that applies to it, together.
* :mod:`scarjax.bounds` – Thm 5.3.1 and its variants (Appendix B).
"""

from scarjax import bounds, hooks, models, perturb, ps, scar, schedules
from scarjax.algorithms import fixed_point, from_optax
from scarjax.core import Algorithm, State, Trace, run
from scarjax.trials import run_trials, split_trials
from scarjax.hooks import chain
from scarjax.rework import ReworkCheck, calibrate_eps, check_rework, iterations_to, rework_cost

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "State",
    "Trace",
    "run",
    "run_trials",
    "split_trials",
    "chain",
    "hooks",
    "bounds",
    "models",
    "ps",
    "scar",
    "perturb",
    "schedules",
    "from_optax",
    "fixed_point",
    "rework_cost",
    "calibrate_eps",
    "iterations_to",
    "check_rework",
    "ReworkCheck",
]
