"""Perturbation sources: what makes the iterate differ from the ideal run (thesis Eq 5.2).

* :mod:`~scarjax.perturb.generic` – Gaussian, adversarial and reset-to-init δ (Sec 5.3);
* :mod:`~scarjax.perturb.workers` – simulated data-parallel workers and the barrier merge
  (worker mode: ``scarjax.run(..., workers=M)``);
* :mod:`~scarjax.perturb.staleness` – stale reads (SSP, asynchronous; Sec 4.2.1, Ex. 5.2.2);
* :mod:`~scarjax.perturb.precision` – reduced-precision storage, communication, gradients;
* :mod:`~scarjax.perturb.revocation` – workers revoked mid-iteration (Sync-on-the-fly).

Every source is a :class:`scarjax.hooks.Hook`; say when it acts with
:func:`scarjax.hooks.scheduled`.
"""

from scarjax.perturb import generic, precision, revocation, staleness, workers
from scarjax.perturb.generic import adversarial, gaussian, random_mask, reset

__all__ = [
    "generic",
    "workers",
    "staleness",
    "precision",
    "revocation",
    "gaussian",
    "adversarial",
    "reset",
    "random_mask",
]
