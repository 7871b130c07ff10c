"""Property-test your own training algorithm against the theory (thesis Ch. 5, Ch. 3).

Import it in your own pytest files::

    from scarjax import testing as sxt
    from scarjax.testing import strategies
from scarjax.testing._convergence import (
    LinearConvergence,
    assert_linear_convergence,
    check_linear_convergence,
    near_start,
)
from scarjax.testing._determinism import (
    TRIAL_RTOL,
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
from scarjax.testing._harness import DEFAULT_SETTINGS, CheckFailure, replay_keys
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
    "DEFAULT_SETTINGS", "CheckFailure", "replay_keys",
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
    "check_determinism", "assert_determinism", "DeterminismResult", "compare_runs", "Difference", "TRIAL_RTOL",
]
