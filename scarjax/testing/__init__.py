"""Property-test your own training algorithm against the theory (thesis Ch. 5, Ch. 3).

Import it in your own pytest files::

    from scarjax import testing as sxt
    from scarjax.testing import strategies as sst

Each ``check_*`` runs your :class:`~scarjax.Algorithm` (through :func:`scarjax.run` /
:func:`scarjax.run_trials`, one batch of trials per hypothesis example) and gives one of
three verdicts (:data:`VERDICTS`): the statement *held* (a result with ``.verdict ==
'held'`` is returned), was *violated* (an ``AssertionError``, :class:`CheckFailure`, whose
message is a readable counterexample: the drawn perturbation, the step, measured vs
bound, and code to replay it), or the runs could not decide it (*inconclusive*:
:class:`InconclusiveCheck`, a ``unittest.SkipTest`` that says how to make the check
decisive). A check that cannot test what it was given refuses with a ``ValueError`` /
``TypeError`` naming the argument. Each has a cheap
default budget (:data:`DEFAULT_SETTINGS`) and a ``settings=`` knob for deeper runs. The
matching ``assert_*`` functions check one drawn case inside your own ``@given`` tests.
See ``docs/testing.md``.

The checks (each with its ``assert_*`` twin):

* :func:`check_linear_convergence` – Eq 5.3 near the optimum, the rate with a
  distribution-free confidence statement, or "not linearly convergent here";
* :func:`check_rework_bound` – Thm 5.3.1 under drawn perturbation sequences, in the form
  valid for the measured baseline; ``variant='B.2'`` (Lemma B.2.1 in expectation) and
  ``'B.1.2'`` (SGD, Eq B.3) as t-tests with a stated false-alarm rate;
* :func:`check_partial_recovery` (Thm 5.4.1) and :func:`check_expected_perturbation`
  (Thm 5.4.2) on your partition and recovery;
* :func:`check_precision_floor` (Example 5.2.1, Appendix B.1.1) and
  :func:`check_staleness` (Example 5.2.2, Lemma B.2.1);
* :func:`check_pgns_unbiased` – the PGNS statistics against the exact per-example values
  for your loss and optimizer (App. A.1);
* :func:`check_determinism` – same key, same run; trial ``i`` equals run ``i``.

Requires hypothesis (a dependency of scarjax; ``import scarjax`` does not import it).
"""

from scarjax.testing import strategies
from scarjax.testing._convergence import (
    LinearConvergence,
    assert_linear_convergence,
    check_linear_convergence,
    near_start,
)
from scarjax.testing._determinism import (
    TRIAL_RTOL,
    ACCELERATOR_TRIAL_RTOL,
    trial_rtol,
    DeterminismResult,
    Difference,
    assert_determinism,
    check_determinism,
    compare_runs,
)
from scarjax.testing._floors import (
    PrecisionFloorResult,
    StalenessResult,
    assert_precision_floor,
    assert_staleness,
    check_precision_floor,
    check_staleness,
    norm_probes,
)
from scarjax.testing._harness import (
    DEFAULT_SETTINGS,
    REPLAY_IMPORTS,
    VERDICTS,
    CheckFailure,
    InconclusiveCheck,
    replay_keys,
)
from scarjax.testing._pgns import PGNSResult, assert_pgns_unbiased, check_pgns_unbiased
from scarjax.testing._recovery import (
    ExpectedPerturbationCase,
    ExpectedPerturbationResult,
    PartialRecoveryCase,
    PartialRecoveryResult,
    RecoveryCase,
    assert_expected_perturbation,
    assert_partial_recovery,
    check_expected_perturbation,
    check_partial_recovery,
    recovery_case,
)
from scarjax.testing._rework_bound import ReworkBoundResult, assert_rework_bound, check_rework_bound

__all__ = [
    "strategies",
    # the harness
    "DEFAULT_SETTINGS", "CheckFailure", "InconclusiveCheck", "VERDICTS", "REPLAY_IMPORTS", "replay_keys",
    # Eq 5.3: linear convergence and its rate
    "check_linear_convergence", "assert_linear_convergence", "LinearConvergence", "near_start",
    # Thm 5.3.1 and its Appendix B variants
    "check_rework_bound", "assert_rework_bound", "ReworkBoundResult",
    # Thms 5.4.1 / 5.4.2: partial recovery
    "check_partial_recovery", "assert_partial_recovery", "check_expected_perturbation",
    "assert_expected_perturbation", "recovery_case", "RecoveryCase", "PartialRecoveryCase",
    "PartialRecoveryResult", "ExpectedPerturbationCase", "ExpectedPerturbationResult",
    # Example 5.2.1 / B.1.1 precision floor, Example 5.2.2 staleness
    "check_precision_floor", "assert_precision_floor", "PrecisionFloorResult",
    "check_staleness", "assert_staleness", "StalenessResult", "norm_probes",
    # PGNS (Eq 3.2, App. A.1)
    "check_pgns_unbiased", "assert_pgns_unbiased", "PGNSResult",
    # determinism
    "check_determinism", "assert_determinism", "DeterminismResult", "compare_runs", "Difference", "TRIAL_RTOL", "ACCELERATOR_TRIAL_RTOL", "trial_rtol",
]
