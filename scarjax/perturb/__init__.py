"""Perturbation sources: what makes the iterate differ from the ideal run (thesis Eq 5.2).

* :mod:`~scarjax.perturb.workers` – simulated data-parallel workers and the barrier merge;
* :mod:`~scarjax.perturb.staleness` – stale reads (SSP, asynchronous; Sec 4.2.1, Ex. 5.2.2);
* :mod:`~scarjax.perturb.precision` – reduced-precision storage, communication, gradients;
* :mod:`~scarjax.perturb.revocation` – workers revoked mid-iteration (Sync-on-the-fly).
"""

from scarjax.perturb import precision, revocation, staleness, workers

__all__ = ["workers", "staleness", "precision", "revocation"]
