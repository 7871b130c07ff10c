"""Schedules: one type for *when* an event happens (a hook fires, a failure strikes, a
checkpoint is saved).

A :class:`Schedule` is an optax-like pure pair:

* ``init(key) -> schedule_state`` – drawn once per run (per trial under
  :func:`scarjax.run_trials`), e.g. the failure iteration ``T`` of :func:`geometric`;
* ``fires(step, key, schedule_state) -> bool`` – whether the event happens at iteration
  ``step``; ``key`` is a PRNG key private to this step (for :func:`with_probability`).

Both are traceable, so schedules run inside the compiled ``lax.scan`` of
:func:`scarjax.run` and vmap over trials; their parameters (a step, a probability, a
rate) may be traced, i.e. varied across trials through ``hook_args``.

Constructors: :func:`at` (exactly these steps), :func:`every` (every ``k`` steps),
:func:`with_probability` (independently each step, thesis Fig 5.3c), :func:`geometric`
(once, at a truncated-geometric time, thesis Sec 5.5.3), :func:`steps` (every step listed
in an array, e.g. revocation or failure times read from a trace), :func:`always`,
:func:`never`. :func:`as_schedule` turns an int step into ``at(step)``: the one place an
int is accepted as shorthand for a schedule.

``Schedule.events`` lists the concrete steps a schedule needs to reach (every step of
:func:`at`; the first step of the window of :func:`every`, :func:`geometric`,
:func:`steps`, and of :func:`with_probability` unless it has no window: ``start=0``,
no ``stop``, the one step-independent random schedule): :func:`scarjax.run` refuses a run whose last iteration
comes before them (the event would silently never happen).

Example:
  >>> import jax
  >>> from scarjax import schedules
  >>> s = schedules.every(10, start=5)
  >>> [int(k) for k in range(40) if s(k, jax.random.key(0))]
  [5, 15, 25, 35]
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import rng
from scarjax import validate as va

PyTree = Any

__all__ = [
    "Schedule",
    "Geometric",
    "at",
    "every",
    "with_probability",
    "geometric",
    "steps",
    "always",
    "never",
    "as_schedule",
]


def _no_state(key: jax.Array) -> PyTree:
    return ()


@dataclasses.dataclass(frozen=True, eq=False)
class Schedule:
    """When an event happens (see the module docstring).

    Attributes:
      init: ``init(key) -> schedule_state``, drawn once per run or trial.
      fires: ``fires(step, key, schedule_state) -> bool`` scalar (traceable; ``key`` is
        the per-step key).
      events: concrete steps the schedule needs to reach; :func:`scarjax.run` refuses any
        ``>= steps``.
      name: a label (for messages and reprs).

    Schedules compare and hash by identity (like hooks), so a compiled program is cached
    per schedule object.
    """

    init: Callable[[jax.Array], PyTree]
    fires: Callable[[jax.Array, jax.Array, PyTree], jax.Array]
    events: tuple[int, ...] = ()
    name: str = "schedule"

    def __post_init__(self):
        va.check_callable("init", self.init)
        va.check_callable("fires", self.fires)
        va.check_str("name", self.name)
        if not isinstance(self.events, tuple) or not all(
            isinstance(e, (int, np.integer)) and not isinstance(e, bool) for e in self.events
        ):
            raise TypeError(f"events must be a tuple of int steps, got {self.events!r}")
        object.__setattr__(self, "events", tuple(int(e) for e in self.events))

    def __call__(self, step: Any, key: jax.Array, state: PyTree = ()) -> jax.Array:
        """``fires(step, key, state)`` (stateless schedules need no ``state``)."""
        return self.fires(step, key, state)

    def __repr__(self) -> str:
        return f"Schedule({self.name})"


# --------------------------------------------------------------------------------------
# Argument checks (concrete values only; traced values pass, docs/architecture.md §10).


def _check_step(name: str, value: Any, minimum: int = 0) -> None:
    """A single integer ``>= minimum`` (concrete) or a traced integer scalar."""
    if va.is_traced(value):
        if jnp.ndim(value) != 0:
            raise ValueError(f"{name} must be a single integer, got shape {jnp.shape(value)}")
        if not jnp.issubdtype(jnp.result_type(value), jnp.integer):
            raise TypeError(f"{name} must be an integer, got dtype {jnp.result_type(value)}")
        return
    if value is None:
        raise TypeError(f"{name} must be an integer, got None")
    if isinstance(value, (jax.Array, np.ndarray)) and np.ndim(value) == 0 and not jnp.issubdtype(
        value.dtype, jnp.integer
    ):
        raise TypeError(f"{name} must be an integer, got dtype {value.dtype}")
    va.check_integer_value(name, value, lo=minimum)
    if np.ndim(value) != 0:
        raise ValueError(f"{name} must be a single integer, got shape {np.shape(value)}")
    if isinstance(value, float):
        raise TypeError(f"{name} must be an int, got float {value!r}")


def _concrete(x: Any) -> bool:
    return x is not None and not va.is_traced(x)


def _check_window(start: Any, stop: Any) -> None:
    _check_step("start", start)
    if stop is not None:
        _check_step("stop", stop)
        if _concrete(start) and _concrete(stop) and int(stop) <= int(start):
            raise ValueError(f"stop must be > start={int(start)} (the window [start, stop) is empty), got {stop!r}")


def _window(step: jax.Array, start: Any, stop: Any) -> jax.Array:
    ok = step >= start
    return ok if stop is None else ok & (step < stop)


def _start_event(start: Any) -> tuple[int, ...]:
    return (int(start),) if _concrete(start) else ()


def _show(x: Any) -> str:
    return "<traced>" if va.is_traced(x) else repr(int(x) if np.ndim(x) == 0 else x)


# --------------------------------------------------------------------------------------
# Constructors.


def always() -> Schedule:
    """Fire at every step."""
    return Schedule(_no_state, lambda step, key, state: jnp.bool_(True), name="always()")


def never() -> Schedule:
    """Never fire (a control)."""
    return Schedule(_no_state, lambda step, key, state: jnp.bool_(False), name="never()")


def at(*steps: Any) -> Schedule:
    """Fire at exactly the given step(s). A step may be a traced integer scalar (a step
    varied across trials through ``hook_args``)."""
    if not steps:
        raise ValueError("at() needs at least one step (steps is empty)")
    for s in steps:
        _check_step("steps", s)
    arr = jnp.stack([jnp.asarray(s, jnp.int32) for s in steps]) if any(map(va.is_traced, steps)) else (
        jnp.asarray([int(s) for s in steps], jnp.int32)
    )
    events = tuple(int(s) for s in steps if not va.is_traced(s))
    return Schedule(
        _no_state,
        lambda step, key, state: jnp.any(step == arr),
        events=events,
        name=f"at({', '.join(_show(s) for s in steps)})",
    )


def every(k: Any, start: Any = 0, stop: Any = None) -> Schedule:
    """Fire at ``start, start + k, start + 2k, …`` (before ``stop`` if given); ``k >= 1``."""
    _check_step("k", k, 1)
    _check_window(start, stop)
    return Schedule(
        _no_state,
        lambda step, key, state: _window(step, start, stop) & ((step - start) % k == 0),
        events=_start_event(start),
        name=f"every({_show(k)}, start={_show(start)}, stop={None if stop is None else _show(stop)})",
    )


def with_probability(p: Any, start: Any = 0, stop: Any = None) -> Schedule:
    """Fire independently with probability ``p`` at each step in ``[start, stop)`` (thesis
    Fig 5.3c: ``p = 0.001`` per iteration); the draw is ``jax.random.bernoulli(key, p)``
    with the per-step key."""
    va.check_real("p", p, lo=0.0, hi=1.0, scalar=True)
    _check_window(start, stop)
    return Schedule(
        _no_state,
        lambda step, key, state: _window(step, start, stop) & jax.random.bernoulli(key, p),
        # Step-independent when it has no window (no event to reach).
        events=() if (_concrete(start) and int(start) == 0 and stop is None) else _start_event(start),
        name=f"with_probability({'<traced>' if va.is_traced(p) else p})",
    )


@dataclasses.dataclass(frozen=True, eq=False)
class Geometric(Schedule):
    """The schedule of :func:`geometric`: fires once, at ``T`` drawn by :meth:`sample` in
    ``init``. ``rate``, ``start`` and ``stop`` are kept for drivers that draw ``T`` on the
    host (:meth:`sample` with a shape)."""

    rate: Any = None
    start: int = 1
    stop: int | None = None

    def sample(self, key: jax.Array, shape: tuple[int, ...] = ()) -> jax.Array:
        """Draw ``T`` (int32, ``shape``) by inverting the (truncated) geometric CDF (usable
        on the host, e.g. ``n`` failure times for ``hook_args``)."""
        return _sample_geometric(self.rate, self.start, self.stop, key, shape)


def _sample_geometric(rate: Any, start: int, stop: int | None, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """``T = start + j`` with ``P(j ≤ i) = (1 − (1−q)^{i+1}) / (1 − (1−q)^n)``, ``n = stop −
    start`` (untruncated: denominator 1), by inverting the CDF at ``u ~ U(0, 1)``."""
    # A rate below float32's smallest normal number would round to 0 (0/0 below): use
    # that smallest number instead, which draws uniformly over a truncated window.
    q = jnp.maximum(jnp.asarray(rate, jnp.float32), jnp.finfo(jnp.float32).tiny)
    u = rng.uniform(key, shape, 0.0, 1.0)  # jax.random.uniform's numbers (scarjax.rng: drawn flat)
    log1mq = jnp.log1p(-jnp.minimum(q, 1.0 - 1e-7))
    if stop is not None:
        n = stop - start
        scale = -jnp.expm1(n * log1mq)
        j = jnp.floor(jnp.log1p(-u * scale) / log1mq)
        j = jnp.clip(j, 0, n - 1)
    else:
        j = jnp.floor(jnp.log1p(-u) / log1mq)
    j = jnp.where(q >= 1.0, 0.0, j)
    # Untruncated, a tiny rate draws T far past any run: keep it an int32 (no event).
    return (start + jnp.minimum(j, 2.0**30)).astype(jnp.int32)


def geometric(rate: Any, start: int = 1, stop: int | None = None) -> Geometric:
    """Fire once, at ``T ~ start + Geometric(rate)`` truncated to ``[start, stop)`` (thesis
    Sec 5.5.3 samples the failure iteration from a geometric distribution): each
    iteration from ``start`` on would fire with probability ``rate``, conditioned on a
    firing before ``stop``. ``stop=None`` leaves it untruncated (``T`` may then fall after
    the run: no event). ``T`` is drawn in ``init(key)`` (once per run or trial) by the
    formula :meth:`Geometric.sample` uses, from the same uniform. The two agree draw for draw
    up to float32 rounding at a step boundary: inside a compiled loop XLA may fuse the
    ``log1p`` ratio differently than :meth:`~Geometric.sample` run op by op, and ``floor`` then
    moves ``T`` by one step in a few draws per million (4 of 3.3 million measured on CPU).
    Drivers that need the loop's own ``T`` on the host read it from the run, not from a
    second draw.

    ``rate`` in ``(0, 1]`` may be traced; ``start >= 0`` and ``stop > start`` are static
    ints.
    """
    if rate is None:
        raise TypeError("rate must be a number in (0, 1], got None")
    va.check_real("rate", rate, lo=0.0, hi=1.0, lo_open=True, scalar=True)
    if isinstance(start, bool) or not isinstance(start, (int, np.integer)) or start < 0:
        raise ValueError(f"start must be an int >= 0 (static), got {start!r}")
    if stop is not None and (isinstance(stop, bool) or not isinstance(stop, (int, np.integer)) or stop <= start):
        raise ValueError(f"stop must be an int > start={start} (static), got {stop!r}")
    start = int(start)
    stop = None if stop is None else int(stop)
    return Geometric(
        init=lambda key: _sample_geometric(rate, start, stop, key, ()),
        fires=lambda step, key, T: step == T,
        events=(start,),
        name=f"geometric({'<traced>' if va.is_traced(rate) else rate}, start={start}, stop={stop})",
        rate=rate,
        start=start,
        stop=stop,
    )


def steps(array: Any) -> Schedule:
    """Fire at every step listed in the int array ``array`` (e.g. revocation or failure
    times read from a trace). Entries ``-1`` are padding (never fire), so tables of
    different lengths stack across trials; ``array`` may be traced. ``events`` holds the
    earliest listed step (concrete arrays)."""
    if va.is_traced(array):
        if not jnp.issubdtype(jnp.result_type(array), jnp.integer):
            raise TypeError(f"array must hold integers, got dtype {jnp.result_type(array)}")
        arr = jnp.asarray(array, jnp.int32).reshape(-1)
        events: tuple[int, ...] = ()
    else:
        if array is None or isinstance(array, (str, bytes)):
            raise TypeError(f"array must be an int array of steps, got {type(array).__name__}")
        a = np.asarray(array)
        if a.dtype == bool or not (np.issubdtype(a.dtype, np.integer) or a.size == 0):
            raise TypeError(f"array must hold integer steps, got dtype {a.dtype}")
        if a.ndim != 1:
            raise ValueError(f"array must be 1-D (a list of steps), got shape {a.shape}")
        if a.size and a.min() < -1:
            raise ValueError(f"array entries must be steps >= 0 (or -1 for padding), got min {int(a.min())}")
        arr = jnp.asarray(a, jnp.int32)
        listed = a[a >= 0]
        events = (int(listed.min()),) if listed.size else ()
    return Schedule(
        _no_state,
        lambda step, key, state: jnp.any((step == arr) & (arr >= 0)),
        events=events,
        name=f"steps(<{arr.shape[0]} entries>)",
    )


def as_schedule(x: Any, name: str = "when") -> Schedule:
    """``x`` as a :class:`Schedule`: a schedule is returned as is; an int (or a 0-d integer
    array, possibly traced) ``k`` becomes ``at(k)``. Anything else is a ``TypeError``
    naming ``name``."""
    if isinstance(x, Schedule):
        return x
    if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
        if x < 0:
            raise ValueError(f"{name} must be a step >= 0, got {x!r}")
        return at(int(x))
    if isinstance(x, (jax.Array, np.ndarray)) and np.ndim(x) == 0 and jnp.issubdtype(x.dtype, jnp.integer):
        if not va.is_traced(x) and int(x) < 0:
            raise ValueError(f"{name} must be a step >= 0, got {int(x)}")
        return at(x if va.is_traced(x) else int(x))
    raise TypeError(
        f"{name} must be a scarjax.schedules.Schedule (at, every, with_probability, geometric, "
        f"steps, always, never) or an int step, got {type(x).__name__} {x!r}"
    )
