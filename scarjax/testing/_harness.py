"""The machinery every check shares: the default budget, running a property under
hypothesis, and failing with a readable counterexample.

A check (``check_*``) draws examples from a strategy and, for each, runs a batch of trials
of the user's algorithm (one :func:`scarjax.run_trials` call) and calls the matching
single-case assertion (``assert_*``). When an example fails, hypothesis shrinks it to a
minimal one and re-raises the assertion's :class:`CheckFailure`, whose message is the
counterexample: what was drawn, the step, measured vs bound and how to replay it.

The ``assert_*`` functions are the same checks for one drawn case, for use inside a
user's own ``@given`` test (hypothesis does not nest ``@given``).
"""

from __future__ import annotations

import math
import unittest
from typing import Any, Callable

import hypothesis
import jax
import numpy as np
from hypothesis import HealthCheck, Phase

__all__ = [
    "DEFAULT_SETTINGS", "CheckFailure", "InconclusiveCheck", "VERDICTS", "REPLAY_IMPORTS", "fail", "inconclusive",
    "run_property", "resolve_settings", "replay_keys",
]

#: The verdicts of a check: the statement ``'held'`` (a result is returned), was
#: ``'violated'`` (:class:`CheckFailure`, an ``AssertionError``), or the runs could not
#: decide it: ``'inconclusive'`` (:class:`InconclusiveCheck`, a ``unittest.SkipTest``).
#: A check that *cannot test* what it was given (a bad argument, an algorithm without an
#: optimum, a baseline that never gets anywhere) refuses with a ``ValueError`` /
#: ``TypeError`` naming the argument: that is not a verdict.
VERDICTS = ("held", "violated", "inconclusive")

#: The lines every replay snippet starts with: a pasted snippet needs only the user's own
#: objects, bound under the check's argument names (``algorithm``; and, where the check
#: was given them, ``partition``, ``recover``, ``lost_blocks``, ``hook``, ``loss``,
#: ``params``, ``data``, ``optimizer``, ``opt_state``, ``estimator``, ``hooks``,
#: ``hook_args``; a custom precision format's quantizer as ``quantizer``; a hook factory
#: drawn by a strategy of ``check_determinism`` under its own function name).
REPLAY_IMPORTS = (
    "import jax\n"
    "import jax.numpy as jnp\n"
    "import numpy as np\n"
    "import scarjax\n"
    "from scarjax import schedules\n"
    "from scarjax import testing as sxt\n"
    "from scarjax.scar import checkpoint as ck\n"
    "from scarjax.scar import faults\n"
    "from scarjax.testing import strategies as sst\n"
)

#: The cheap default budget of every check: 10 examples, no deadline (a JAX compile can
#: take seconds), derandomized (the same examples on every run, so a passing suite stays
#: passing) and no example database. Pass ``settings=hypothesis.settings(max_examples=…)``
#: to a check for a deeper run (a fresh ``settings`` object is random unless it says
#: ``derandomize=True``). Hypothesis's *explain* phase is off: after a failure it would
#: re-run ~100 examples under a tracer, and the counterexample message already says
#: what failed.
DEFAULT_SETTINGS = hypothesis.settings(
    max_examples=10,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    report_multiple_bugs=False,  # one CheckFailure (an AssertionError), never an ExceptionGroup
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)


def resolve_settings(settings: hypothesis.settings | int | None) -> hypothesis.settings:
    """``None`` → :data:`DEFAULT_SETTINGS`; an int ``n`` → the defaults with
    ``max_examples=n``; a :class:`hypothesis.settings` is used as given, with its
    deadline removed (JAX compiles inside an example), the slow-data health checks
    suppressed, the explain phase skipped (it would re-run ~100 batches after a failure) and
    one failure reported (an ``AssertionError``, not an ExceptionGroup)."""
    if settings is None:
        return DEFAULT_SETTINGS
    if isinstance(settings, (int, np.integer)) and not isinstance(settings, bool):
        if settings < 1:
            raise ValueError(f"settings: max_examples must be >= 1, got {settings}")
        return hypothesis.settings(DEFAULT_SETTINGS, max_examples=int(settings))
    if not isinstance(settings, hypothesis.settings):
        raise TypeError(f"settings must be None, an int (max_examples) or a hypothesis.settings, got {settings!r}")
    suppressed = set(settings.suppress_health_check) | set(DEFAULT_SETTINGS.suppress_health_check)
    phases = [p for p in settings.phases if p != Phase.explain]
    return hypothesis.settings(settings, deadline=None, report_multiple_bugs=False, phases=phases,
                               suppress_health_check=list(suppressed))


def _with_imports(replay: str | None) -> str | None:
    """``replay`` preceded by :data:`REPLAY_IMPORTS` (once): a snippet runs when pasted."""
    if not replay:
        return replay
    return replay if replay.startswith(REPLAY_IMPORTS) else REPLAY_IMPORTS + replay


class CheckFailure(AssertionError):
    """A property of the theory failed for the user's algorithm: the verdict
    ``'violated'`` (an ``AssertionError``, so ``pytest`` reports a failed test).

    Attributes:
      title: what failed, e.g. ``"Thm 5.3.1: rework exceeds the bound"``.
      details: ``{label: value}``: the counterexample (drawn perturbation, step,
        measured, bound, …), printed one per line.
      replay: code that reproduces the failing run (the seed is in it), or ``None``. It
        starts with its imports (:data:`REPLAY_IMPORTS`) and runs when pasted after
        binding your objects under the check's argument names (``algorithm = …``).
      verdict: ``'violated'``.
    """

    verdict = "violated"

    def __init__(self, title: str, details: dict[str, Any] | None = None, replay: str | None = None):
        self.title = title
        self.details = dict(details or {})
        self.replay = _with_imports(replay)
        super().__init__(self._message())

    def _message(self) -> str:
        return _message(self.title, self.details, self.replay)


class InconclusiveCheck(unittest.SkipTest):
    """The runs could not decide the statement either way: the verdict ``'inconclusive'``
    (e.g. a contraction so fast that every run reaches the rounding floor within a few
    steps, where no rate of Eq 5.3 can be measured). Not a failure of the theory, and not
    an ``AssertionError``: it is a :class:`unittest.SkipTest`, so ``pytest`` reports the
    test as *skipped* with this message (``pytest -rs`` lists it); catch it to handle it
    otherwise. The message says how to make the check decisive (start farther from ``w*``,
    float64, more steps, …).

    Attributes:
      title, details, replay: as for :class:`CheckFailure`.
      verdict: ``'inconclusive'``.
    """

    verdict = "inconclusive"

    def __init__(self, title: str, details: dict[str, Any] | None = None, replay: str | None = None):
        self.title = title
        self.details = dict(details or {})
        self.replay = _with_imports(replay)
        super().__init__(_message(self.title, self.details, self.replay))


def _message(title: str, details: dict[str, Any], replay: str | None) -> str:
    lines = [title]
    width = max((len(k) for k in details), default=0)
    for k, v in details.items():
        lines.append(f"  {k.ljust(width)} : {_show(v)}")
    if replay:
        lines.append("  replay with:")
        lines.extend("    " + r for r in replay.splitlines())
    return "\n".join(lines)


def _show(v: Any) -> str:
    if isinstance(v, (float, np.floating)):
        v = float(v)
        return "inf" if math.isinf(v) else f"{v:.6g}"
    if isinstance(v, np.ndarray) and v.ndim == 0:
        return _show(v.item())
    return str(v)


def fail(title: str, details: dict[str, Any] | None = None, replay: str | None = None) -> None:
    """Raise :class:`CheckFailure` (an ``AssertionError``) with a readable counterexample."""
    raise CheckFailure(title, details, replay)


def inconclusive(title: str, details: dict[str, Any] | None = None, replay: str | None = None) -> None:
    """Raise :class:`InconclusiveCheck` (a ``unittest.SkipTest``): the runs cannot decide."""
    raise InconclusiveCheck(title, details, replay)


def run_property(strategy: Any, body: Callable[[Any], None], settings: Any = None) -> None:
    """Run ``body(example)`` on examples drawn from ``strategy`` under hypothesis.

    ``body`` raises :class:`CheckFailure` for a counterexample; hypothesis then shrinks it
    (to a single perturbation at one step, the smallest failing fraction, …) and this
    re-raises the failure of the minimal example. Must not be called inside another
    ``@given`` test: use the ``assert_*`` functions there.
    """

    @resolve_settings(settings)
    @hypothesis.given(strategy)
    def _property(example):
        body(example)

    _property()


def replay_keys(seed: int, n: int):
    """The keys of a batch of ``n`` trials for a drawn ``seed``: trial ``i`` runs on
    ``jax.random.fold_in(jax.random.key(seed), i)`` (what a counterexample's replay line
    says)."""
    base = jax.random.key(int(seed))
    return jax.vmap(lambda i: jax.random.fold_in(base, i))(np.arange(n, dtype=np.uint32))
