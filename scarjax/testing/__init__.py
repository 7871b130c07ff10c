"""Property-test your own training algorithm against the theory (thesis Ch. 5, Ch. 3).

Import it in your own pytest files::

    from scarjax import testing as sxt
    from scarjax.testing import strategies as sst

Each ``check_*`` runs your :class:`~scarjax.Algorithm` (through :func:`scarjax.run` /
:func:`scarjax.run_trials`, one batch of trials per hypothesis example) and raises an
``AssertionError`` (:class:`CheckFailure`) whose message is a readable counterexample: the
drawn perturbation, the step, measured vs bound, and the seed to replay. Each has a cheap
default budget (:data:`DEFAULT_SETTINGS`) and a ``settings=`` knob for deeper runs. The
matching ``assert_*`` functions check one drawn case inside your own ``@given`` tests.
See ``docs/testing.md``.

Requires hypothesis (a dependency of scarjax; ``import scarjax`` does not import it).
"""

from scarjax.testing import strategies
from scarjax.testing._harness import DEFAULT_SETTINGS, CheckFailure, replay_keys

# [checks: linear convergence — _convergence]
from scarjax.testing._convergence import (LinearConvergence, assert_linear_convergence,  # noqa: I001
                                         check_linear_convergence, near_start)
# [checks: Thm 5.3.1 and variants — _rework_bound]
from scarjax.testing._rework_bound import ReworkBoundResult, assert_rework_bound, check_rework_bound  # noqa: I001
# [checks: Thm 5.4.1 / 5.4.2 — _recovery]
from scarjax.testing._recovery import (  # noqa: I001
    ExpectedPerturbationCase, ExpectedPerturbationResult, PartialRecoveryCase, PartialRecoveryResult, RecoveryCase,
    assert_expected_perturbation, assert_partial_recovery, check_expected_perturbation, check_partial_recovery,
    recovery_case,
)
# [checks: B.1 precision floor, staleness — _floors]
from scarjax.testing._floors import (PrecisionFloorResult, StalenessResult, assert_precision_floor,  # noqa: I001
                                     assert_staleness, check_precision_floor, check_staleness, norm_probes)
# [checks: PGNS — _pgns]
from scarjax.testing._pgns import PGNSResult, assert_pgns_unbiased, check_pgns_unbiased  # noqa: I001
# [checks: determinism — _determinism]
from scarjax.testing._determinism import (TRIAL_RTOL, DeterminismResult, Difference,  # noqa: I001
                                          assert_determinism, check_determinism, compare_runs)

__all__ = [
    "strategies",
    "DEFAULT_SETTINGS",
    "CheckFailure",
    "replay_keys",
    # [__all__: each check module adds its names on its own line below]
    "check_partial_recovery", "assert_partial_recovery", "check_expected_perturbation", "assert_expected_perturbation", "recovery_case", "RecoveryCase", "PartialRecoveryCase", "PartialRecoveryResult", "ExpectedPerturbationCase", "ExpectedPerturbationResult",  # _recovery
    "check_precision_floor", "assert_precision_floor", "PrecisionFloorResult",  # _floors
    "check_staleness", "assert_staleness", "StalenessResult", "norm_probes",  # _floors
    "check_pgns_unbiased", "assert_pgns_unbiased", "PGNSResult",  # _pgns
    "check_rework_bound", "assert_rework_bound", "ReworkBoundResult",  # _rework_bound
    "check_linear_convergence", "assert_linear_convergence", "LinearConvergence", "near_start",  # _convergence
    "check_determinism", "assert_determinism", "DeterminismResult",  # _determinism
    "compare_runs", "Difference", "TRIAL_RTOL",  # _determinism
]
