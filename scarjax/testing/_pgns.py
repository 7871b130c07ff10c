"""PGNS: is the noise-scale estimator unbiased for this loss and optimizer? (thesis Eq 3.2, App. A.1)

**What is unbiased.** The PGNS ``φ = tr(PΣPᵀ)/|Pg|²`` (Eq 3.2 = Eq A.6) is a ratio, and a
ratio of unbiased estimates is not unbiased: at a finite number of draws its mean is off
by ``O(1/draws)``, so comparing ``E[φ̂]`` with ``φ`` would test a claim nobody makes. What
App. A.1 (after McCandlish et al. [150]) claims, and what scarjax's estimator
(:func:`scarjax.pollux.microbatch_stats`, behind :func:`~scarjax.pollux.estimate_pgns_at`,
:func:`~scarjax.pollux.with_pgns` and :func:`~scarjax.pollux.track_pgns`) implements, is
that its two statistics are *separately* unbiased: for ``K`` micro-batch gradients of
``b`` examples drawn i.i.d. (uniformly with replacement) at fixed parameters and a fixed
pre-conditioner ``P``,

    E[sqr] = |Pg|²          E[var] = tr(PΣPᵀ)

and ``φ`` is estimated as the ratio of their averages (consistent, not unbiased). This
check tests exactly those two means against the exact values from the per-example
gradients of the whole data set (``exact_stats`` with the same ``P``), and reports ``φ``.

**The test.** One case (:func:`assert_pgns_unbiased`) takes ``draws`` independent draws
``(sqr_d, var_d)`` at one parameter point; for each statistic ``X``

    t_X = (mean_d X_d − X_exact) / (sd_d X_d / √draws)

and the case fails when ``|mean_d X_d − X_exact| > t*·sd_d X_d/√draws + ρ·scale_X`` for
either statistic, with ``t* = t_{draws−1}(1 − α/4)`` (Student t; two statistics, two-sided,
so the case's false-alarm rate is at most ``α`` by Bonferroni) and a float32 rounding
allowance ``ρ = 1e-5`` of the statistic's scale (``E|Pg_b|²`` for ``sqr``, ``b`` times it for
``var``), far below any bias worth detecting. The mean of ``draws`` i.i.d. draws is close
to normal (CLT), so ``t`` is close to Student's t under the null hypothesis; use
``draws >= 100`` (default 200) when single draws are heavy-tailed (Adam's ``P`` with rare
coordinates). :func:`check_pgns_unbiased` runs ``max_examples`` cases drawn by hypothesis
(the seed of the draws, a parameter point along a short run of the optimizer, and the
micro-batch shape when given as strategies) at ``α = false_alarm / max_examples`` each,
so the probability that the whole check fails for an unbiased estimator is at most
``false_alarm`` (Bonferroni over the cases).
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from hypothesis import strategies as st
from scipy import stats as sps

from scarjax import validate as va
from scarjax import pollux as px
from scarjax.pollux import collect_preconditioners, pgns_data, pgns_draws, pgns_exact
from scarjax.testing._harness import fail, resolve_settings, run_property

__all__ = ["PGNSResult", "StatisticTest", "assert_pgns_unbiased", "check_pgns_unbiased", "ROUNDING"]

#: The float32 rounding allowance of the comparison, relative to a statistic's scale.
ROUNDING = 1e-5


class StatisticTest(NamedTuple):
    """The test of one statistic's mean against its exact value.

    Attributes:
      name: ``'sqr'`` (``|Pg|²``) or ``'var'`` (``tr(PΣPᵀ)``).
      mean: the mean over the draws.
      stderr: its standard error ``sd/√draws``.
      exact: the exact value from per-example gradients.
      t: ``(mean − exact)/stderr`` (``±inf`` when ``stderr`` is 0 and they differ).
      allowed: the largest ``|mean − exact|`` that passes (``t*·stderr`` + rounding).
    """

    name: str
    mean: float
    stderr: float
    exact: float
    t: float
    allowed: float

    @property
    def passed(self) -> bool:
        return abs(self.mean - self.exact) <= self.allowed

    @property
    def margin(self) -> float:
        """``|mean − exact| / allowed`` (``> 1``: failed)."""
        d = abs(self.mean - self.exact)
        return d / self.allowed if self.allowed > 0 else (0.0 if d == 0 else math.inf)


class PGNSResult(NamedTuple):
    """What :func:`assert_pgns_unbiased` / :func:`check_pgns_unbiased` measured (for a
    check: the case closest to failing).

    Attributes:
      phi, stderr: ``mean(var)/mean(sqr)`` over the draws and its delta-method standard
        error (as :func:`~scarjax.pollux.estimate_pgns_at` reports them).
      exact_phi: the exact ``φ`` (Eq 3.2) with the same ``P``.
      sqr, var: the :class:`StatisticTest` of each statistic.
      threshold: the critical ``|t|`` of one statistic.
      false_alarm: the stated false-alarm rate (of the case, or of the whole check).
      draws, microbatch_size, microbatches, steps, seed: the case.
      examples: the number of cases tested (1 for an assert).
    """

    phi: float
    stderr: float
    exact_phi: float
    sqr: StatisticTest
    var: StatisticTest
    threshold: float
    false_alarm: float
    draws: int
    microbatch_size: int
    microbatches: int
    steps: int
    seed: int
    examples: int = 1

    def summary(self) -> str:
        worst = max(abs(self.sqr.t), abs(self.var.t))
        where = f"{self.examples} cases" if self.examples > 1 else "1 case"
        return (
            f"PGNS statistics unbiased (App. A.1) over {where} of {self.draws} draws of K={self.microbatches} "
            f"micro-batches of b={self.microbatch_size}: worst |t| = {worst:.3g} <= {self.threshold:.3g} "
            f"(false-alarm rate {self.false_alarm:.3g}); phi = {self.phi:.6g} +- {self.stderr:.3g}, "
            f"exact {self.exact_phi:.6g}"
        )


# ------------------------------------------------------------------------------ sampling


@functools.partial(jax.jit, static_argnames=("loss_fn", "estimator", "k", "b", "draws"))
def _custom_draws(loss_fn, estimator, params, p, data, key, *, k: int, b: int, draws: int):
    """``(sqr, var)`` of ``draws`` draws of a user's estimator: the sampling of
    ``estimate_pgns_at`` (``K`` micro-batches of ``b`` with replacement per draw, the same
    keys), the statistics from ``estimator(grads [K, ...], b, P)``."""
    n = data[0].shape[0]
    grad_k = jax.vmap(jax.grad(loss_fn), (None,) + (0,) * len(data))

    def one(_, key):
        idx = jax.random.randint(key, (k, b), 0, n)
        g = grad_k(params, *(a[idx] for a in data))
        s = estimator(g, b, p)
        return None, jnp.stack([jnp.asarray(s[0], jnp.float32), jnp.asarray(s[1], jnp.float32)])

    return jax.lax.scan(one, None, jax.random.split(key, draws))[1]


@functools.partial(jax.jit, static_argnames=("loss_fn", "optimizer", "batch"))
def _walk(loss_fn, optimizer, params, opt_state, data, key, steps, *, batch: int):
    """``steps`` (traced) updates of ``optimizer`` on batches of ``batch`` examples drawn
    with replacement (one compiled program for every number of steps), then ``P``."""
    n = data[0].shape[0]

    def body(i, carry):
        prm, state = carry
        idx = jax.random.randint(jax.random.fold_in(key, i), (batch,), 0, n)
        g = jax.grad(loss_fn)(prm, *(a[idx] for a in data))
        upd, state = optimizer.update(g, state, prm)
        return optax.apply_updates(prm, upd), state

    prm, state = jax.lax.fori_loop(0, steps, body, (params, opt_state))
    return prm, state, px.preconditioner(state, optimizer)


@functools.partial(jax.jit, static_argnames=("optimizer",))
def _precond_of(opt_state, optimizer):
    return px.preconditioner(opt_state, optimizer)


def _describe_p(opt_state, optimizer, p) -> str:
    if opt_state is None and optimizer is None:
        return "identity P (the plain gradient noise scale)"
    if p is not None and all(np.all(np.asarray(x) == 1) for x in jax.tree.leaves(p)):
        return f"{_describe_p(opt_state, None, None)}, all ones here (P = I before the optimizer's first update)"
    try:
        found: list = []
        collect_preconditioners(opt_state, {}, found, "")
    except (TypeError, ValueError):
        found = []
    if not found:
        return "identity P (the optimizer state has no pre-conditioner, e.g. SGD)"
    path, state, _ = found[0]
    return f"diagonal P of the optimizer's {type(state).__name__} at opt_state{path}"


def _name(f: Any) -> str:
    if f is None:
        return "scarjax.pollux.microbatch_stats (the library's estimator)"
    return getattr(f, "__qualname__", None) or repr(f)


@functools.lru_cache(maxsize=64)
def _t_threshold(alpha: float, draws: int) -> float:
    """The two-sided critical ``|t|`` of one of the two statistics at case rate ``alpha``."""
    return float(sps.t.ppf(1.0 - alpha / 4.0, draws - 1))


def _test(name: str, x: np.ndarray, exact: float, thr: float, scale: float) -> StatisticTest:
    mean = float(np.mean(x))
    se = float(np.std(x, ddof=1) / math.sqrt(len(x)))
    diff = mean - exact
    t = diff / se if se > 0 else (0.0 if diff == 0 else math.copysign(math.inf, diff))
    return StatisticTest(name, mean, se, exact, t, thr * se + ROUNDING * abs(scale))


def _check_estimator(estimator, grads_shape, b, p):
    out = jax.eval_shape(lambda g: estimator(g, b, p), grads_shape)
    try:
        ok = len(out) == 2 and all(np.shape(x) == () for x in out)
    except TypeError:
        ok = False
    if not ok:
        raise TypeError(
            "estimator must be a function (grads, microbatch_size, precond) -> (sqr, var) of two scalars "
            "(e.g. scarjax.pollux.GradStats; grads stacked [K, ...] per micro-batch, like "
            f"scarjax.pollux.microbatch_stats), got output {out!r}"
        )


# ------------------------------------------------------------------------------ the checks


def _validate_common(loss, draws, false_alarm, estimator, optimizer):
    va.check_callable("loss", loss)
    draws = va.check_int("draws", draws, lo=10)
    va.check_real("false_alarm", false_alarm, lo=0.0, hi=1.0, lo_open=True, hi_open=True, scalar=True)
    if estimator is not None:
        va.check_callable("estimator", estimator)
    if optimizer is not None and not callable(getattr(optimizer, "update", None)):
        raise TypeError(
            f"optimizer must be an optax GradientTransformation (the one that made opt_state), "
            f"got {type(optimizer).__name__}"
        )
    return draws, float(false_alarm)


def _case(
    loss, params, arrays, *, b, k, optimizer, opt_state, estimator, steps, draws, alpha, seed, cache, replay_args
) -> PGNSResult:
    """One case: the point after ``steps`` optimizer steps, ``draws`` draws, the two tests."""
    n = arrays[0].shape[0]
    key = jax.random.key(seed)
    k_walk, k_draws = jax.random.split(key)
    point = cache.get("point") if steps == 0 else None  # the given point: computed once per check
    if point is None:
        if steps > 0:
            state = optimizer.init(params) if opt_state is None else opt_state
            prm, _, p = _walk(loss, optimizer, params, state, arrays, k_walk, steps, batch=k * b)
        elif opt_state is not None:
            prm, p = params, _precond_of(opt_state, optimizer)
        elif optimizer is not None:
            prm, p = params, _precond_of(optimizer.init(params), optimizer)
        else:
            prm, p = params, None
        ex = pgns_exact(loss, prm, p, arrays, chunk=min(256, n))
        ex = px.GradStats(float(ex.sqr), float(ex.var))
        point = (prm, p, ex)
        if steps == 0:
            cache["point"] = point
    prm, p, ex = point
    if not (math.isfinite(ex.sqr) and math.isfinite(ex.var)):
        fail(
            "PGNS (Eq 3.2): the exact statistics are not finite at this parameter point",
            {"exact |Pg|^2": ex.sqr, "exact tr(P Sigma P^T)": ex.var, "steps before measuring": steps, "seed": seed},
            replay_args,
        )
    if estimator is None:
        est = pgns_draws(loss, prm, p, arrays, k_draws, k=k, b=b, draws=draws)
    else:
        if ("estimator", b, k) not in cache:  # its output checked once per shape
            grads = jax.eval_shape(
                lambda: jax.vmap(jax.grad(loss), (None,) + (0,) * len(arrays))(
                    prm, *(jnp.zeros((k, b) + a.shape[1:], a.dtype) for a in arrays)
                )
            )
            _check_estimator(estimator, grads, b, p)
            cache["estimator", b, k] = True
        est = _custom_draws(loss, estimator, prm, p, arrays, k_draws, k=k, b=b, draws=draws)
    est = np.asarray(est, np.float64)
    sqr, var = est[:, 0], est[:, 1]
    bad = np.flatnonzero(~np.all(np.isfinite(est), axis=1))
    thr = _t_threshold(alpha, draws)
    small = ex.sqr + ex.var / b  # E|P g_b|^2, the scale both statistics are computed from
    t_sqr = _test("sqr", sqr, ex.sqr, thr, small)
    t_var = _test("var", var, ex.var, thr, b * small)
    phi = t_var.mean / t_sqr.mean if t_sqr.mean > 0 else math.inf
    phi = max(phi, 0.0)
    if math.isfinite(phi) and t_sqr.mean > 0 and not bad.size:
        stderr = float(np.std(var - phi * sqr, ddof=1) / math.sqrt(draws) / t_sqr.mean)
    else:
        stderr = math.nan
    exact_phi = max(ex.var, 0.0) / ex.sqr if ex.sqr > 0 else math.inf
    result = PGNSResult(phi, stderr, exact_phi, t_sqr, t_var, thr, alpha, draws, b, k, steps, seed)
    if bad.size or not (t_sqr.passed and t_var.passed):
        what = {("sqr",): "|Pg|^2", ("var",): "tr(P Sigma P^T)", ("sqr", "var"): "|Pg|^2 and tr(P Sigma P^T)"}
        failed = tuple(t.name for t in (t_sqr, t_var) if not t.passed)
        title = (
            f"PGNS (Eq 3.2, App. A.1): the estimator returned a non-finite statistic at draw {int(bad[0])}"
            if bad.size
            else f"PGNS (Eq 3.2, App. A.1): the estimator is biased for {what[failed]}"
        )
        details = {
            "estimator": _name(estimator),
            "loss": _name(loss),
            "optimizer": _describe_p(
                opt_state if opt_state is not None or optimizer is None else optimizer.init(params), optimizer, p
            ),
            "parameter point": "the given params" if steps == 0 else f"the given params after {steps} optimizer steps",
            "micro-batches": f"K = {k} of b = {b} examples (with replacement), {draws} draws, N = {n}",
            "exact phi": exact_phi,
            "estimated phi": f"{phi:.6g} +- {stderr:.3g} (ratio of the averaged statistics)",
        }
        for t in (t_sqr, t_var):
            label = "|Pg|^2 (sqr)" if t.name == "sqr" else "tr(P Sigma P^T) (var)"
            details[label] = (
                f"mean {t.mean:.6g} +- {t.stderr:.3g} vs exact {t.exact:.6g}: t = {t.t:.3g}"
                + ("" if t.passed else "  <-- biased")
            )
        details["threshold"] = (
            f"|t| <= {thr:.3g} (Student t, {draws - 1} dof, two-sided, per statistic at {alpha / 2:.3g}; "
            f"false-alarm rate {alpha:.3g} for this case)"
        )
        details["seed"] = seed
        fail(title, details, replay_args)
    return result


def _replay(loss, b, k, optimizer, opt_state, estimator, steps, draws, alpha, seed) -> str:
    args = [f"microbatch_size={b}", f"microbatches={k}"]
    if optimizer is not None:
        args.append("optimizer=optimizer")
    if opt_state is not None:
        args.append("opt_state=opt_state")
    if estimator is not None:
        args.append("estimator=estimator")
    if steps:
        args.append(f"steps={steps}")
    args += [f"draws={draws}", f"false_alarm={alpha:.6g}", f"seed={seed}"]
    return "sxt.assert_pgns_unbiased(loss, params, data, " + ", ".join(args) + ")"


def assert_pgns_unbiased(
    loss: Callable[..., jax.Array],
    params: Any,
    data: Any,
    *,
    microbatch_size: int,
    microbatches: int = 8,
    optimizer: optax.GradientTransformation | None = None,
    opt_state: Any = None,
    estimator: Callable[..., Any] | None = None,
    steps: int = 0,
    draws: int = 200,
    false_alarm: float = 1e-3,
    seed: int = 0,
) -> PGNSResult:
    """One case: the estimator's statistics are unbiased for ``|Pg|²`` and ``tr(PΣPᵀ)``
    (App. A.1) at one parameter point, at false-alarm rate ``false_alarm`` (module docstring).

    Args:
      loss: ``loss(params, *batch) -> scalar``, the *mean* loss over a batch (what training
        differentiates; one example is a batch of 1), as for
        :func:`~scarjax.pollux.estimate_pgns_at`.
      params: the parameters (the starting point when ``steps > 0``).
      data: an array or a tuple of arrays sharing the leading example axis ``N``.
      microbatch_size, microbatches: ``b`` and ``K >= 2``.
      optimizer, opt_state: the optax optimizer and its state; ``P`` is read from them
        (:func:`~scarjax.pollux.preconditioner`: ``P = I`` for SGD, Adam's
        ``1/(√ν̂ + ε)``, …). Neither: ``P = I``. ``optimizer`` without ``opt_state``: its
        ``init(params)`` (Adam's ``P`` is ``I`` before its first update: take ``steps``).
      estimator: ``estimator(grads, microbatch_size, precond) -> (sqr, var)``, from the
        ``K`` micro-batch gradients stacked on a leading axis (each the mean gradient of
        ``b`` examples), ``b`` and the diagonal ``P`` (``None`` for ``I``), e.g. your own
        version of :func:`scarjax.pollux.microbatch_stats` (the default; the draws are then
        exactly those of :func:`~scarjax.pollux.estimate_pgns_at`).
      steps: take this many ``optimizer`` updates (batches of ``K·b`` drawn with
        replacement) from ``(params, opt_state)`` first, and measure there.
      draws: independent draws of ``K`` micro-batches (``>= 10``; see the module docstring).
      false_alarm: the probability that an unbiased estimator fails this case.
      seed: the seed: ``k_steps, k_draws = jax.random.split(jax.random.key(seed))``;
        with the default estimator the draws are exactly those of
        ``estimate_pgns_at(loss, <the point>, data, microbatch_size=b, microbatches=K,
        key=k_draws, draws=draws, …)`` with the same ``P``.

    Returns:
      :class:`PGNSResult`. Raises :class:`~scarjax.testing.CheckFailure` (an
      ``AssertionError``) naming the biased statistic, the exact and estimated values,
      ``t`` against its threshold, the seed and how to replay.
    """
    draws, false_alarm = _validate_common(loss, draws, false_alarm, estimator, optimizer)
    b = va.check_int("microbatch_size", microbatch_size, lo=1)
    k = va.check_int("microbatches", microbatches, lo=2)
    steps = va.check_int("steps", steps, lo=0)
    seed = va.check_int("seed", seed, lo=0)
    if steps and optimizer is None:
        raise ValueError(f"steps={steps} needs optimizer= (the optax optimizer to take the steps with)")
    arrays = pgns_data(data)
    replay = _replay(loss, b, k, optimizer, opt_state, estimator, steps, draws, false_alarm, seed)
    return _case(
        loss, params, arrays, b=b, k=k, optimizer=optimizer, opt_state=opt_state, estimator=estimator,
        steps=steps, draws=draws, alpha=false_alarm, seed=seed, cache={}, replay_args=replay,
    )


def _as_strategy(name: str, value: Any, lo: int):
    if isinstance(value, st.SearchStrategy):
        return value
    return st.just(va.check_int(name, value, lo=lo))


def check_pgns_unbiased(
    loss: Callable[..., jax.Array],
    params: Any,
    data: Any,
    *,
    microbatch_size: Any,
    microbatches: Any = 8,
    optimizer: optax.GradientTransformation | None = None,
    opt_state: Any = None,
    estimator: Callable[..., Any] | None = None,
    max_steps: int = 0,
    draws: int = 200,
    false_alarm: float = 1e-3,
    seed: int = 0,
    settings: Any = None,
) -> PGNSResult:
    """PGNS (Eq 3.2, App. A.1): the estimator's statistics are unbiased for the exact
    per-example ``|Pg|²`` and ``tr(PΣPᵀ)``, for your loss and optimizer, with the whole
    check's false-alarm rate at most ``false_alarm``.

    Hypothesis draws each case: the seed of the draws (from ``seed``), a parameter point
    after ``0 … max_steps`` updates of ``optimizer`` from ``(params, opt_state)``, and
    ``microbatch_size`` / ``microbatches`` when they are strategies (e.g.
    ``st.sampled_from([8, 32])``; each value compiles once). Every case is
    :func:`assert_pgns_unbiased` at ``false_alarm / max_examples`` (module docstring), so
    an unbiased estimator fails the check with probability at most ``false_alarm``; a
    failing case is shrunk (fewest steps, smallest seed and shapes) and reported::

        sxt.check_pgns_unbiased(loss, params, (x, y), microbatch_size=32,
                                optimizer=opt, opt_state=state, max_steps=5)

    Args: as :func:`assert_pgns_unbiased`, plus ``max_steps`` (the parameter points) and
      ``settings`` (``None``: :data:`~scarjax.testing.DEFAULT_SETTINGS`, 10 cases; an
      int: that many cases; a ``hypothesis.settings``).

    Returns:
      :class:`PGNSResult` of the case closest to failing, with ``examples`` the number of
      cases and ``false_alarm`` the whole check's rate.
    """
    draws, false_alarm = _validate_common(loss, draws, false_alarm, estimator, optimizer)
    b_st = _as_strategy("microbatch_size", microbatch_size, 1)
    k_st = _as_strategy("microbatches", microbatches, 2)
    max_steps = va.check_int("max_steps", max_steps, lo=0)
    seed = va.check_int("seed", seed, lo=0)
    if max_steps and optimizer is None:
        raise ValueError(f"max_steps={max_steps} needs optimizer= (the optax optimizer to take the steps with)")
    arrays = pgns_data(data)
    hs = resolve_settings(settings)
    alpha = false_alarm / hs.max_examples
    seeds = st.integers(0, 2**31 - 1).map(lambda s: (seed + s) % 2**31)  # shrinks to `seed`
    strategy = st.tuples(seeds, st.integers(0, max_steps), b_st, k_st)
    cache: dict = {}
    results: list[PGNSResult] = []

    def body(example):
        s, t, b, k = example
        b = va.check_int("microbatch_size (drawn)", b, lo=1)
        k = va.check_int("microbatches (drawn)", k, lo=2)
        replay = _replay(loss, b, k, optimizer, opt_state, estimator, t, draws, alpha, s)
        results.append(
            _case(
                loss, params, arrays, b=b, k=k, optimizer=optimizer, opt_state=opt_state, estimator=estimator,
                steps=t, draws=draws, alpha=alpha, seed=s, cache=cache, replay_args=replay,
            )
        )

    run_property(strategy, body, hs)
    worst = max(results, key=lambda r: max(r.sqr.margin, r.var.margin))
    return worst._replace(examples=len(results), false_alarm=false_alarm)
