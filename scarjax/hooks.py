"""The hook protocol: optax-style ``(init, apply)`` pairs acting at injection points.

A hook perturbs what flows through one iteration of the perturbed scheme (thesis Eq 5.2,
``y⁽ᵏ⁺¹⁾ = f(y⁽ᵏ⁾ + δₖ)``) at one or more of its injection points (:data:`POINTS`):

* ``'write'`` – the stored :class:`~scarjax.State` between iterations (faults and their
  recovery, reduced-precision storage, generic δ such as Gaussian, adversarial or
  reset-to-init: :mod:`scarjax.perturb.generic`);
* ``'read'``  – the parameters the workers read (staleness, low-precision communication);
  in worker mode a stack ``[M, …]`` of one view per worker;
* ``'progress'`` – in worker mode only: the ``[M]`` float32 fraction of its points each
  worker finishes before the barrier (starts at ones; revocations multiply it);
* ``'update'`` – the computed update Δ (quantised gradients, lost contributions).

``hook.init(state, key) -> hook_state`` is called once with the initial algorithm state;
``hook.apply(value, hook_state, ctx) -> (value, hook_state)`` is called every iteration at
each of the hook's points with the value there and a :class:`Context` (``ctx.point`` says
which point). Both are pure and traceable, so hooks run inside the compiled ``lax.scan``
of :func:`scarjax.run` and vmap over trials.

Composition (like optax): :func:`chain` returns a :class:`Hook` (usable wherever a hook
is: in :func:`scarjax.run`, in another chain, in :func:`scheduled`); within a point hooks
act in the order given. :func:`scheduled` is the one way to say *when* a hook acts: it
wraps any hook with a :class:`~scarjax.schedules.Schedule` (an int step is short for
``schedules.at(step)``); an unscheduled hook acts at every step. The loop measures the
change each hook makes (``trace.delta[name]``), so per-source perturbation budgets Δ_T
can be read off one run.

Example:
  >>> import jax, scarjax
  >>> from scarjax import hooks, schedules
  >>> from scarjax.perturb import generic
  >>> kick = hooks.scheduled(generic.gaussian(1.0), schedules.every(50, start=10))
  >>> both = hooks.chain(kick, generic.reset(0.1))   # itself a Hook
  >>> isinstance(both, hooks.Hook), both.points
  (True, ('write',))
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.schedules import Schedule, as_schedule

PyTree = Any
POINTS = ("write", "read", "progress", "update")
PARAM_POINTS = ("write", "read", "update")
"""The points whose value holds parameters (``'progress'`` holds worker fractions)."""

__all__ = [
    "POINTS",
    "Context",
    "Hook",
    "chain",
    "scheduled",
    "flatten_hooks",
    "param_hook",
    "perturbation",
]


class Context(NamedTuple):
    """What a hook may look at while it acts (built inside the compiled loop).

    Attributes:
      step: the iteration ``k`` (int32 scalar).
      key: a PRNG key private to this hook and step (the same at each of its points).
      state: the stored :class:`~scarjax.State` (after the write point).
      initial_params: ``w⁽⁰⁾``.
      algorithm: the :class:`~scarjax.Algorithm` (for its optimum, loss and norm).
      point: the injection point being applied (one of :data:`POINTS`).
    """

    step: jax.Array
    key: jax.Array
    state: Any
    initial_params: PyTree
    algorithm: Any
    point: str | None = None


def _check_events(events: Any) -> tuple[tuple[str, int], ...]:
    out = []
    if not isinstance(events, tuple):
        raise TypeError(f"events must be a tuple of int steps or (argument name, int step) pairs, got {events!r}")
    for e in events:
        if isinstance(e, (int, np.integer)) and not isinstance(e, bool):
            out.append(("when", int(e)))
        elif (
            isinstance(e, tuple) and len(e) == 2 and isinstance(e[0], str)
            and isinstance(e[1], (int, np.integer)) and not isinstance(e[1], bool)
        ):
            out.append((e[0], int(e[1])))
        else:
            raise TypeError(f"events must be a tuple of int steps or (argument name, int step) pairs, got {events!r}")
    return tuple(out)


@dataclasses.dataclass(frozen=True, eq=False)
class Hook:
    """A perturbation acting at one or more injection points (see the module docstring).

    Attributes:
      point: one of :data:`POINTS`, or a tuple of them (a multi-point hook: ``apply`` is
        called at each, with ``ctx.point`` telling which; ``()``: a hook that never acts).
      init: ``init(state, key) -> hook_state``.
      apply: ``apply(value, hook_state, ctx) -> (value, hook_state)``.
      name: the trace label (``trace.delta[name]``).
      events: ``(argument, step)`` pairs (an int ``k`` stands for ``('when', k)``):
        concrete iterations the hook is scheduled to act at (``scheduled(h, k)``,
        ``schedules.at(k)``, the start of ``every``/``with_probability``, a failure's
        time). :func:`scarjax.run` refuses a step ``>= steps`` (the loop runs iterations
        ``0 … steps − 1``, so the event would silently never happen).
      workers: the worker count ``M`` a per-worker hook is built for (stale reads,
        revocations; ``None`` otherwise). It requires ``run(..., workers=M)``.
      children: for a :func:`chain`, the (flat) hooks it composes; the loop runs those
        one by one (a delta and a key per child), so a chain gives the same run as the
        list of its hooks.

    Hooks compare and hash by identity, which lets the compiled loop be cached per hook
    object: reuse a hook object to reuse its compiled program.
    """

    point: str | tuple[str, ...]
    init: Callable[[Any, jax.Array], PyTree]
    apply: Callable[[Any, PyTree, Context], tuple[Any, PyTree]]
    name: str = "hook"
    events: tuple = ()
    workers: int | None = None
    children: tuple["Hook", ...] = ()

    def __post_init__(self):
        pts = (self.point,) if isinstance(self.point, str) else self.point
        if not isinstance(pts, tuple) or not all(isinstance(p, str) and p in POINTS for p in pts) or len(
            set(pts)
        ) != len(pts):
            raise ValueError(f"point must be one of {POINTS} or a tuple of distinct ones, got {self.point!r}")
        va.check_callable("init", self.init)
        va.check_callable("apply", self.apply)
        va.check_str("name", self.name)
        object.__setattr__(self, "events", _check_events(self.events))
        if self.workers is not None:
            object.__setattr__(self, "workers", va.check_int("workers", self.workers, lo=1))
        if not isinstance(self.children, tuple) or not all(isinstance(c, Hook) for c in self.children):
            raise TypeError(f"children must be a tuple of Hooks, got {self.children!r}")

    @property
    def points(self) -> tuple[str, ...]:
        """The injection points this hook acts at, as a tuple."""
        return (self.point,) if isinstance(self.point, str) else self.point


def flatten_hooks(hooks: Any) -> tuple[Hook, ...]:
    """``None`` / a hook / a chain / a (nested) sequence as a flat tuple of leaf hooks
    (chains are replaced by their children; hooks acting at no point are dropped)."""
    if hooks is None:
        return ()
    if isinstance(hooks, Hook):
        if hooks.children:
            return hooks.children
        return (hooks,) if hooks.points else ()
    if isinstance(hooks, (list, tuple)):
        return tuple(h for x in hooks for h in flatten_hooks(x))
    raise TypeError(
        f"hooks must be a scarjax Hook (or chain(...)), a sequence of hooks or None; got {type(hooks).__name__}"
    )


def _common_workers(hooks: Sequence[Hook], what: str = "hooks") -> int | None:
    counts = sorted({h.workers for h in hooks if h.workers is not None})
    if len(counts) > 1:
        names = [f"{h.name}: {h.workers}" for h in hooks if h.workers is not None]
        raise ValueError(f"{what} are built for different worker counts ({', '.join(names)}); use one M")
    return counts[0] if counts else None


def _point_of(hook: Hook, ctx: Context) -> str:
    if ctx.point is not None:
        return ctx.point
    if len(hook.points) == 1:
        return hook.points[0]
    raise ValueError(f"ctx.point must name the injection point for multi-point hook {hook.name!r} {hook.points}")


def chain(*hooks: Hook | Sequence[Hook], name: str = "chain") -> Hook:
    """Compose hooks into one :class:`Hook` (like ``optax.chain``).

    Within an injection point the hooks act in the order given; hooks at different points
    act at their own point of the iteration. The result is a hook: its ``init`` gives the
    tuple of the children's states (keys split from its key) and its ``apply`` at point
    ``p`` applies the children acting at ``p`` in order, child ``j`` with key
    ``fold_in(ctx.key, j)``; it acts at the union of its children's points. The loop of
    :func:`scarjax.run` runs a chain's children as separate hooks (so ``trace.delta`` has
    one entry per child and a chain gives bit for bit the run of the list of its hooks);
    its own ``init``/``apply`` serve where it is used as one hook (inside
    :func:`scheduled`).
    """
    va.check_str("name", name)
    flat = flatten_hooks(list(hooks))
    points = tuple(p for p in POINTS if any(p in h.points for h in flat))
    workers = _common_workers(flat, "chained hooks")

    def init(state, key):
        keys = jax.random.split(key, max(len(flat), 1))
        return tuple(h.init(state, k) for h, k in zip(flat, keys))

    def apply(value, hstates, ctx):
        if len(points) > 1 and ctx.point is None:
            raise ValueError(f"ctx.point must name the injection point for chain {name!r} acting at {points}")
        point = ctx.point if ctx.point is not None else (points[0] if points else None)
        hstates = list(hstates)
        for j, h in enumerate(flat):
            if point in h.points:
                value, hstates[j] = h.apply(
                    value, hstates[j], ctx._replace(key=jax.random.fold_in(ctx.key, j), point=point)
                )
        return value, tuple(hstates)

    return Hook(
        point=points,
        init=init,
        apply=apply,
        name=name,
        events=tuple(e for h in flat for e in h.events),
        workers=workers,
        children=flat,
    )


def _select(fire: jax.Array, new: PyTree, old: PyTree) -> PyTree:
    """``new`` where ``fire`` else ``old``, leafwise, in ``old``'s dtypes (PRNG keys too)."""

    def one(a, b):
        a, b = jnp.asarray(a), jnp.asarray(b)
        return jnp.where(fire, a if a.dtype == b.dtype else a.astype(b.dtype), b)

    return jax.tree.map(one, new, old)


def scheduled(hook: Hook, when: Schedule | int, *, name: str | None = None) -> Hook:
    """``hook`` acting only at the steps where ``when`` fires (the one scheduling wrapper).

    ``when`` is a :class:`~scarjax.schedules.Schedule` (``at``, ``every``,
    ``with_probability``, ``geometric``, ``steps``, …) or an int step (short for
    ``schedules.at(step)``; a traced int varies the step across trials). At each step the
    hook's key is split into ``(k_when, k_inner)``: the schedule decides with ``k_when``
    (and its state, drawn once by ``when.init``), the hook computes with ``k_inner``, and
    where the schedule does not fire the value and the hook's state are left as they
    were. A multi-point hook (a chain) fires at all its points or none (one decision per
    step). The result keeps the hook's name, points and workers; its events add the
    schedule's (``('when', step)``).

    Example:
      >>> from scarjax import hooks, schedules
      >>> from scarjax.perturb import generic
      >>> h = hooks.scheduled(generic.gaussian(1.0), schedules.with_probability(0.001))
      >>> h100 = hooks.scheduled(generic.gaussian(1.0), 100)   # at step 100
    """
    if not isinstance(hook, Hook):
        raise TypeError(f"hook must be a scarjax Hook (or chain(...)), got {type(hook).__name__}")
    when = as_schedule(when, "when")
    if name is not None:
        va.check_str("name", name)

    def init(state, key):
        k_s, k_h = jax.random.split(key)
        return (when.init(k_s), hook.init(state, k_h))

    def apply(value, hstate, ctx):
        s_state, h_state = hstate
        k_when, k_inner = jax.random.split(ctx.key)
        fire = when.fires(ctx.step, k_when, s_state)
        new, h_new = hook.apply(value, h_state, ctx._replace(key=k_inner, point=_point_of(hook, ctx)))
        return _select(fire, new, value), (s_state, _select(fire, h_new, h_state))

    return Hook(
        point=hook.point,
        init=init,
        apply=apply,
        name=name or hook.name,
        events=hook.events + tuple(("when", s) for s in when.events),
        workers=hook.workers,
    )


# --------------------------------------------------------------------------------------
# Hooks on the parameters (the building blocks of scarjax.perturb.generic).

DeltaFn = Callable[[PyTree, PyTree, Context, jax.Array], PyTree]
"""``delta_fn(params, hook_state, ctx, key) -> δ`` with the structure of ``params``."""


def _check_param_point(point: Any) -> str:
    if not isinstance(point, str) or point not in PARAM_POINTS:
        raise ValueError(f"point must be one of {PARAM_POINTS} (the points holding parameters), got {point!r}")
    return point


def param_hook(
    transform: Callable[[PyTree, PyTree, Context, jax.Array], PyTree],
    *,
    point: str = "write",
    name: str = "param_hook",
    init: Callable[[Any, jax.Array], PyTree] | None = None,
) -> Hook:
    """A hook that replaces the parameters by ``transform(params, hook_state, ctx, key)``
    at every step (at ``'write'``: the stored parameters; at ``'read'``: the view; at
    ``'update'``: the update Δ); ``key`` is the hook's per-step key ``ctx.key``. Leaves
    keep their dtype. ``init(state, key)`` builds the (constant) hook state; default none.
    Wrap it in :func:`scheduled` to act at chosen steps only."""
    va.check_callable("transform", transform)
    if init is not None:
        va.check_callable("init", init)
    _check_param_point(point)
    va.check_str("name", name)
    init = init or (lambda state, key: ())

    def apply(value, hstate, ctx):
        params = value.params if point == "write" else value
        new = jax.tree.map(lambda p, q: q.astype(p.dtype), params, transform(params, hstate, ctx, ctx.key))
        if point == "write":
            return value._replace(params=new), hstate
        return new, hstate

    return Hook(point=point, init=init, apply=apply, name=name)


def perturbation(
    delta_fn: DeltaFn,
    *,
    point: str = "write",
    name: str = "perturbation",
    init: Callable[[Any, jax.Array], PyTree] | None = None,
) -> Hook:
    """A hook that adds ``δ = delta_fn(params, hook_state, ctx, key)`` to the parameters at
    ``point``: the easiest way to write your own perturbation.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from scarjax import hooks, schedules
      >>> shift = hooks.scheduled(
      ...     hooks.perturbation(lambda p, s, ctx, key: jax.tree.map(jnp.ones_like, p)),
      ...     schedules.every(10))
    """

    va.check_callable("delta_fn", delta_fn)

    def transform(params, hstate, ctx, key):
        delta = delta_fn(params, hstate, ctx, key)
        return jax.tree.map(lambda p, d: p + d.astype(p.dtype), params, delta)

    return param_hook(transform, point=point, name=name, init=init)
