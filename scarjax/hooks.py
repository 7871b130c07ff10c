"""Perturbation hooks: optax-style ``(init, apply)`` pairs acting at one injection point.

A hook corrupts one of three things in an iteration of the perturbed scheme (thesis
Eq 5.2, ``y⁽ᵏ⁺¹⁾ = f(y⁽ᵏ⁾ + δₖ)``):

* ``'write'`` – the stored :class:`~scarjax.State` between iterations (faults and their
  recovery, reduced-precision storage, generic δ such as Gaussian, adversarial or
  reset-to-init);
* ``'read'``  – the parameters the workers read (staleness, low-precision communication);
* ``'update'`` – the computed update Δ (quantised gradients, lost contributions).

``hook.init(state, key) -> hook_state`` is called once with the initial algorithm state;
``hook.apply(value, hook_state, ctx) -> (value, hook_state)`` is called every iteration
with the value at its point and a :class:`Context`. Both are pure and traceable, so
hooks run inside the compiled ``lax.scan`` of :func:`scarjax.run` and vmap over trials.

Hooks compose with :func:`chain`; within a point they apply in the order given. The loop
measures the change each hook makes (``trace.delta[name]``), so per-source perturbation
budgets Δ_T can be read off one run.

Schedules (:func:`at`, :func:`every`, :func:`with_probability`, :func:`always`) decide
*when* a hook fires; every generic hook takes ``when=`` (an int step is short for
``at(step)``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import _validate as va
from scarjax import tree as tu

PyTree = Any
POINTS = ("write", "read", "update")

__all__ = [
    "Context",
    "Hook",
    "HookChain",
    "chain",
    "Schedule",
    "always",
    "never",
    "at",
    "every",
    "with_probability",
    "param_hook",
    "perturbation",
    "random_mask",
    "gaussian",
    "adversarial",
    "reset",
    "flatten_hooks",
    "scheduled_steps",
]


class Context(NamedTuple):
    """What a hook may look at while it acts (built inside the compiled loop).

    Attributes:
      step: the iteration ``k`` (int32 scalar).
      key: a PRNG key private to this hook and step.
      state: the stored :class:`~scarjax.State` (after the write point).
      initial_params: ``w⁽⁰⁾``.
      algorithm: the :class:`~scarjax.Algorithm` (for its optimum, loss and norm).
    """

    step: jax.Array
    key: jax.Array
    state: Any
    initial_params: PyTree
    algorithm: Any


@dataclasses.dataclass(frozen=True, eq=False)
class Hook:
    """A perturbation at one injection point (see the module docstring).

    Hooks compare and hash by identity, which lets the compiled loop be cached per hook
    object: reuse a hook object to reuse its compiled program.
    """

    point: str
    init: Callable[[Any, jax.Array], PyTree]
    apply: Callable[[Any, PyTree, Context], tuple[Any, PyTree]]
    name: str = "hook"
    events: tuple[tuple[str, int], ...] = ()
    """``(argument, step)`` pairs: concrete iterations at which the hook is scheduled to
    act (``when=k``, ``at(k, …)``, the start of ``every``/``with_probability``, a
    failure's ``at``). :func:`scarjax.run` refuses a step ``>= steps`` (the loop runs
    iterations ``0 … steps − 1``, so the event would silently never happen)."""

    def __post_init__(self):
        if not isinstance(self.point, str) or self.point not in POINTS:
            raise ValueError(f"point must be one of {POINTS}, got {self.point!r}")
        va.check_callable("init", self.init)
        va.check_callable("apply", self.apply)
        va.check_str("name", self.name)
        if not isinstance(self.events, tuple) or not all(
            isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], int)
            for e in self.events
        ):
            raise TypeError(f"events must be a tuple of (argument name, int step) pairs, got {self.events!r}")


@dataclasses.dataclass(frozen=True, eq=False)
class HookChain:
    """Several hooks applied in order (see :func:`chain`)."""

    hooks: tuple[Hook, ...]


def flatten_hooks(hooks: Any) -> tuple[Hook, ...]:
    """Normalise ``None`` / a hook / a chain / a (nested) sequence into a tuple of hooks."""
    if hooks is None:
        return ()
    if isinstance(hooks, Hook):
        return (hooks,)
    if isinstance(hooks, HookChain):
        return hooks.hooks
    if isinstance(hooks, (list, tuple)):
        return tuple(h for x in hooks for h in flatten_hooks(x))
    raise TypeError(
        f"hooks must be a scarjax Hook, chain(...), a sequence of hooks or None; got "
        f"{type(hooks).__name__}"
    )


def chain(*hooks: Hook | HookChain | Sequence[Hook]) -> HookChain:
    """Compose hooks (like ``optax.chain``). Within an injection point, hooks act in the
    order given; hooks at different points act at their own point of the iteration."""
    return HookChain(flatten_hooks(list(hooks)))


# --------------------------------------------------------------------------------------
# Schedules.

Schedule = Callable[[jax.Array, jax.Array], jax.Array]
"""``schedule(step, key) -> bool scalar``: whether a hook fires at ``step``."""


def _check_step(name: str, value: Any, minimum: int = 0) -> None:
    va.check_integer_value(name, value, lo=minimum)
    if not tu.is_traced(value) and np.ndim(value) != 0:
        raise ValueError(f"{name} must be a single integer, got shape {np.shape(value)}")


def _scheduled(schedule: Schedule, *steps: Any) -> Schedule:
    """Record on ``schedule`` the concrete steps it needs (read by :func:`scheduled_steps`)."""
    schedule._scarjax_steps = tuple(int(s) for s in steps if not tu.is_traced(s))
    return schedule


def scheduled_steps(schedule: Any) -> tuple[int, ...]:
    """The concrete steps a schedule is known to need: every step of :func:`at`, the
    ``start`` of :func:`every` and :func:`with_probability`; ``()`` for other callables."""
    return getattr(schedule, "_scarjax_steps", ())


def always() -> Schedule:
    """Fire at every step."""
    return lambda step, key: jnp.bool_(True)


def never() -> Schedule:
    """Never fire (useful as a control)."""
    return lambda step, key: jnp.bool_(False)


def at(*steps: int) -> Schedule:
    """Fire at exactly the given step(s)."""
    if not steps:
        raise ValueError("at() needs at least one step")
    for s in steps:
        _check_step("step", s)
    arr = jnp.asarray(steps, jnp.int32)
    return _scheduled(lambda step, key: jnp.any(step == arr), *steps)


def _check_stop(start: Any, stop: Any) -> None:
    if not tu.is_traced(start) and not tu.is_traced(stop) and stop <= start:
        raise ValueError(f"stop must be > start={start} (the window [start, stop) is empty), got {stop!r}")


def _window(step: jax.Array, start: int, stop: int | None) -> jax.Array:
    ok = step >= start
    return ok if stop is None else ok & (step < stop)


def every(k: int, start: int = 0, stop: int | None = None) -> Schedule:
    """Fire at ``start, start + k, start + 2k, …`` (before ``stop`` if given)."""
    _check_step("k", k, 1)
    _check_step("start", start)
    if stop is not None:
        _check_step("stop", stop)
        _check_stop(start, stop)
    return _scheduled(lambda step, key: _window(step, start, stop) & ((step - start) % k == 0), start)


def with_probability(p: float, start: int = 0, stop: int | None = None) -> Schedule:
    """Fire independently with probability ``p`` at each step in ``[start, stop)``
    (thesis Fig 5.3c: ``p = 0.001`` per iteration)."""
    va.check_real("p", p, lo=0.0, hi=1.0, scalar=True)
    _check_step("start", start)
    if stop is not None:
        _check_step("stop", stop)
        _check_stop(start, stop)
    return _scheduled(lambda step, key: _window(step, start, stop) & jax.random.bernoulli(key, p), start)


def _as_schedule(when: Any) -> Schedule:
    if when is None:
        return always()
    if isinstance(when, (int, np.integer)) and not isinstance(when, bool):
        va.check_int("when", when, lo=0)
        return at(int(when))
    if isinstance(when, (jax.Array, np.ndarray)) and when.ndim == 0 and jnp.issubdtype(when.dtype, jnp.integer):
        if tu.is_traced(when):  # a step varied across trials (hook_args)
            return lambda step, key: step == when
        va.check_int("when", int(when), lo=0)
        return at(int(when))
    if callable(when):
        return when
    raise TypeError(f"when must be a step (int) or a schedule, got {type(when).__name__} {when!r}")


def _events(schedule: Schedule) -> tuple[tuple[str, int], ...]:
    return tuple(("when", s) for s in scheduled_steps(schedule))


# --------------------------------------------------------------------------------------
# Generic perturbations of the parameters.

DeltaFn = Callable[[PyTree, PyTree, Context, jax.Array], PyTree]
"""``delta_fn(params, hook_state, ctx, key) -> δ`` with the structure of ``params``."""


def param_hook(
    transform: Callable[[PyTree, PyTree, Context, jax.Array], PyTree],
    *,
    when: Any = None,
    point: str = "write",
    name: str = "param_hook",
    init: Callable[[Any, jax.Array], PyTree] | None = None,
) -> Hook:
    """Build a hook that replaces the parameters by ``transform(params, hook_state, ctx,
    key)`` when ``when`` fires (at ``'write'``: the stored parameters; at ``'read'``: the
    view; at ``'update'``: the update Δ). ``init(state, key)`` builds the (constant) hook
    state; default none."""
    va.check_callable("transform", transform)
    if init is not None:
        va.check_callable("init", init)
    schedule = _as_schedule(when)
    init = init or (lambda state, key: ())

    def apply(value, hstate, ctx):
        k_when, k_t = jax.random.split(ctx.key)
        fire = schedule(ctx.step, k_when)
        params = value.params if point == "write" else value
        new = jax.tree.map(
            lambda p, q: jnp.where(fire, q.astype(p.dtype), p),
            params,
            transform(params, hstate, ctx, k_t),
        )
        if point == "write":
            return value._replace(params=new), hstate
        return new, hstate

    return Hook(point=point, init=init, apply=apply, name=name, events=_events(schedule))


def perturbation(
    delta_fn: DeltaFn,
    *,
    when: Any = None,
    point: str = "write",
    name: str = "perturbation",
    init: Callable[[Any, jax.Array], PyTree] | None = None,
) -> Hook:
    """Build a hook that adds ``δ = delta_fn(params, hook_state, ctx, key)`` when
    ``when`` fires: the easiest way to write your own perturbation.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from scarjax import hooks
      >>> shift = hooks.perturbation(
      ...     lambda p, s, ctx, key: jax.tree.map(jnp.ones_like, p), when=hooks.every(10))
    """

    va.check_callable("delta_fn", delta_fn)

    def transform(params, hstate, ctx, key):
        delta = delta_fn(params, hstate, ctx, key)
        return jax.tree.map(lambda p, d: p + d.astype(p.dtype), params, delta)

    return param_hook(transform, when=when, point=point, name=name, init=init)


def _check_nonneg(name: str, x: Any) -> None:
    va.check_real(name, x, lo=0.0)
    if not tu.is_traced(x) and np.ndim(x) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {np.shape(x)}")


def gaussian(std: float, *, when: Any = None, point: str = "write", name: str = "gaussian") -> Hook:
    """Add i.i.d. ``N(0, std²)`` noise to every parameter entry (thesis Figs 5.3, 5.5a).

    ``E‖δ‖ ≈ std·√d`` for ``d`` parameters. ``std`` may be a traced value, so it can vary
    across trials inside :func:`scarjax.run_trials` (``hook_args``).
    """
    _check_nonneg("std", std)

    def delta_fn(params, hstate, ctx, key):
        leaves, treedef = jax.tree.flatten(params)
        keys = jax.random.split(key, len(leaves))
        noise = [std * jax.random.normal(k, x.shape, jnp.float32) for k, x in zip(keys, leaves)]
        return jax.tree.unflatten(treedef, noise)

    return perturbation(delta_fn, when=when, point=point, name=name)


def adversarial(size: float, *, when: Any = None, point: str = "write", name: str = "adversarial") -> Hook:
    """A perturbation of norm ``size`` pointing away from the optimum (Fig 5.5b).

    The direction is ``(y − w*)/‖y − w*‖`` when the algorithm's optimum is known (the
    worst case of Thm 5.3.1 for an isotropic contraction), otherwise the normalised
    ascent direction ``∇ loss(y)``. Norms are ℓ2 on the flattened parameters.
    """
    _check_nonneg("size", size)

    def delta_fn(params, hstate, ctx, key):
        alg = ctx.algorithm
        if alg.optimum is not None:
            direction = tu.tree_sub(params, alg.optimum)
        else:
            direction = jax.grad(lambda p: alg.loss(ctx.state._replace(params=p), alg.data))(params)
        n = tu.l2_norm(direction)
        scale = jnp.where(n > 0, size / jnp.where(n > 0, n, 1.0), 0.0)
        return tu.tree_scale(scale, direction)

    return perturbation(delta_fn, when=when, point=point, name=name)


def random_mask(key: jax.Array, tree: PyTree, fraction: jax.Array | float) -> PyTree:
    """Boolean masks over the entries of ``tree`` selecting exactly ``round(fraction·n)``
    of its ``n`` entries uniformly at random (``fraction`` may be traced)."""
    va.check_real("fraction", fraction, lo=0.0, hi=1.0, scalar=True)
    leaves, treedef = jax.tree.flatten(tree)
    n = sum(x.size for x in leaves)
    u = jax.random.uniform(key, (n,))
    count = jnp.round(jnp.asarray(fraction, jnp.float32) * n).astype(jnp.int32)
    threshold = jnp.where(count >= n, jnp.inf, jnp.sort(u)[jnp.clip(count, 0, n - 1)])
    flat = u < threshold
    out, i = [], 0
    for x in leaves:
        out.append(flat[i : i + x.size].reshape(x.shape))
        i += x.size
    return jax.tree.unflatten(treedef, out)


def reset(fraction: float, *, when: Any = None, name: str = "reset") -> Hook:
    """Reset a uniformly random ``fraction`` of the parameter entries to their initial
    values ``w⁽⁰⁾`` (thesis Fig 5.6: the perturbation partial recovery from an initial
    checkpoint causes). A write-point hook; ``fraction`` may be traced."""
    _check_nonneg("fraction", fraction)
    va.check_real("fraction", fraction, lo=0.0, hi=1.0, scalar=True)

    def transform(params, hstate, ctx, key):
        mask = random_mask(key, params, fraction)
        return jax.tree.map(jnp.where, mask, ctx.initial_params, params)

    return param_hook(transform, when=when, point="write", name=name)
