"""Perturbation sequences (thesis Eq 5.2: ``y⁽ᵏ⁺¹⁾ = f(y⁽ᵏ⁾) + δ_k``) as hypothesis data.

A :class:`PerturbationSequence` is a short list of :class:`Perturbation` events — a step,
a size ``‖δ_k‖`` in the algorithm's norm, a direction (``'random'`` or ``'adversarial'``,
away from ``w*``: the worst case of Thm 5.3.1), a sparsity (the fraction of parameter
entries it touches) and a seed for its random direction. It replays as one write-point
hook (:meth:`PerturbationSequence.hook`); a batch of them replays under one
:func:`scarjax.run_trials` call (:func:`stack` + :func:`sequence_hook`), so a
hypothesis example can be a batch of trials compiled once.

:func:`perturbation_sequences` draws them; shrinking removes events, moves them to step 0,
makes them dense, random and as small as allowed: a failing check reports a single
perturbation at one step where one suffices.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from scarjax import hooks
from scarjax import tree as tu
from scarjax.perturb.generic import random_mask

__all__ = ["Perturbation", "PerturbationSequence", "perturbation_sequences", "stack", "sequence_hook", "DIRECTIONS",
           "schedules", "hook_chains", "DrawnSchedule", "DrawnHook", "DrawnChain", "SCHEDULE_KINDS", "HOOK_KINDS"]

#: Direction kinds: a random unit direction (on a random subset of entries when sparse),
#: or ``(y − w*)/‖y − w*‖`` (the ascent direction of the loss without an optimum).
DIRECTIONS = ("random", "adversarial")


class Perturbation(NamedTuple):
    """One write-point perturbation ``δ_k`` of norm ``size`` added at iteration ``step``."""

    step: int
    size: float
    direction: str = "random"
    sparsity: float = 1.0
    seed: int = 0

    def describe(self) -> str:
        sparse = "dense" if self.sparsity >= 1.0 else f"{self.sparsity:.3g} of the entries"
        return f"step {self.step}: ‖δ‖ = {self.size:.6g}, {self.direction} direction ({sparse}, seed {self.seed})"


class PerturbationSequence(NamedTuple):
    """A sequence of :class:`Perturbation` events (several may share a step: they add)."""

    events: tuple[Perturbation, ...]

    @property
    def first_step(self) -> int:
        return min((e.step for e in self.events), default=-1)

    def describe(self) -> str:
        if not self.events:
            return "no perturbation"
        n = len(self.events)
        head = f"{n} perturbation{'s' if n > 1 else ''}"
        return head + ": " + "; ".join(e.describe() for e in sorted(self.events))

    def as_arrays(self, max_events: int | None = None) -> dict[str, np.ndarray]:
        """The events as arrays of length ``max_events`` (padding: step ``-1``, never
        fires): the ``hook_args`` of :func:`sequence_hook`."""
        k = len(self.events) if max_events is None else int(max_events)
        if len(self.events) > k:
            raise ValueError(f"max_events={k} but the sequence has {len(self.events)} events")
        pad = k - len(self.events)
        ev = list(self.events)
        return {
            "step": np.asarray([e.step for e in ev] + [-1] * pad, np.int32),
            "size": np.asarray([e.size for e in ev] + [0.0] * pad, np.float32),
            "adversarial": np.asarray([e.direction == "adversarial" for e in ev] + [False] * pad, bool),
            "sparsity": np.asarray([e.sparsity for e in ev] + [1.0] * pad, np.float32),
            "seed": np.asarray([e.seed for e in ev] + [0] * pad, np.uint32),
        }

    def hook(self) -> hooks.Hook:
        """This sequence as one write-point hook (``trace.delta['sequence']``)."""
        return sequence_hook(jax.tree.map(jnp.asarray, self.as_arrays()))


def stack(sequences: Any, max_events: int | None = None) -> dict[str, np.ndarray]:
    """A batch of sequences as ``hook_args`` for ``run_trials(alg, sequence_hook, …)``:
    arrays ``[trials, max_events]`` (default: the longest sequence)."""
    sequences = list(sequences)
    if not sequences:
        raise ValueError("sequences must not be empty")
    k = max_events if max_events is not None else max(1, max(len(s.events) for s in sequences))
    arrays = [s.as_arrays(k) for s in sequences]
    return {name: np.stack([a[name] for a in arrays]) for name in arrays[0]}


def _unit(alg: Any, tree: Any) -> Any:
    n = alg.norm(tree)
    return tu.tree_scale(jnp.where(n > 0, 1.0 / jnp.where(n > 0, n, 1.0), 0.0), tree)


def sequence_hook(args: dict[str, jax.Array], *, name: str = "sequence") -> hooks.Hook:
    """The write-point hook replaying one sequence's arrays (:meth:`PerturbationSequence.as_arrays`).

    At iteration ``k`` it adds ``Σ_j [step_j = k] size_j·u_j`` where ``u_j`` is a unit
    vector in the algorithm's norm: a Gaussian direction on a random ``sparsity_j``
    fraction of the entries (at least one), drawn from ``seed_j`` alone, or
    ``(y − w*)/‖y − w*‖`` (the loss's ascent direction when there is no optimum).
    Traced arrays are fine: one compiled program serves every sequence of the same length.
    """

    def delta_fn(params, hstate, ctx, key):
        alg = ctx.algorithm
        leaves = jax.tree.leaves(params)
        n = sum(x.size for x in leaves)
        if alg.optimum is not None:
            away = tu.tree_sub(params, alg.optimum)
        else:
            away = jax.grad(lambda p: alg.loss(ctx.state._replace(params=p), alg.data))(params)
        away = _unit(alg, jax.tree.map(lambda x: x.astype(jnp.float32), away))

        def one(step, size, adversarial, sparsity, seed):
            k = jax.random.key(seed)
            k_dir, k_mask = jax.random.split(k)
            ls, treedef = jax.tree.flatten(params)
            ks = jax.random.split(k_dir, len(ls))
            g = jax.tree.unflatten(treedef, [jax.random.normal(kk, x.shape, jnp.float32) for kk, x in zip(ks, ls)])
            mask = random_mask(k_mask, params, jnp.maximum(sparsity, 1.0 / n))
            rnd = _unit(alg, jax.tree.map(lambda a, m: jnp.where(m, a, 0.0), g, mask))
            u = tu.tree_where(adversarial, away, rnd)
            return tu.tree_scale(jnp.where(step == ctx.step, size, 0.0), u)

        deltas = jax.vmap(one)(args["step"], args["size"], args["adversarial"], args["sparsity"], args["seed"])
        return jax.tree.map(lambda d: d.sum(0), deltas)

    return hooks.perturbation(delta_fn, name=name)


@st.composite
def perturbation_sequences(
    draw: Any,
    max_step: int,
    *,
    min_step: int = 0,
    max_events: int = 4,
    min_events: int = 1,
    sizes: Any = None,
    directions: Any = DIRECTIONS,
    sparsity: Any = None,
) -> PerturbationSequence:
    """Perturbation sequences with events at steps in ``[min_step, max_step]``.

    Args:
      max_step, min_step: the window of steps (inclusive).
      max_events, min_events: how many events (``min_events=1``: a sequence always
        perturbs; shrinking goes to one event).
      sizes: a strategy for ``‖δ‖`` (default: floats in ``[1e-3, 3]``; shrinks to 1e-3).
      directions: a subset of :data:`DIRECTIONS` (shrinks to the first).
      sparsity: a strategy for the fraction of entries touched (default: ``1.0``,
        dense; e.g. ``st.floats(0.05, 1.0)``).
    """
    if max_step < min_step or min_step < 0:
        raise ValueError(f"need 0 <= min_step <= max_step, got min_step={min_step}, max_step={max_step}")
    if not 0 <= min_events <= max_events:
        raise ValueError(f"need 0 <= min_events <= max_events, got {min_events}, {max_events}")
    directions = tuple(directions)
    if not directions or any(d not in DIRECTIONS for d in directions):
        raise ValueError(f"directions must be a non-empty subset of {DIRECTIONS}, got {directions!r}")
    sizes = st.floats(1e-3, 3.0) if sizes is None else sizes
    sparsity = st.just(1.0) if sparsity is None else sparsity
    event = st.builds(
        Perturbation,
        step=st.integers(min_step, max_step),
        size=sizes,
        direction=st.sampled_from(directions),
        sparsity=sparsity,
        seed=st.integers(0, 2**31 - 1),
    )
    return PerturbationSequence(tuple(draw(st.lists(event, min_size=min_events, max_size=max_events))))


# --------------------------------------------------------------------------------------
# Schedules and hook chains (when perturbations act: scarjax.schedules, scarjax.hooks).

from scarjax import validate as va  # noqa: E402  (appended section)
from scarjax import schedules as _sch  # noqa: E402
from scarjax.perturb import generic as _generic  # noqa: E402

#: The kinds :func:`schedules` draws, in shrinking order (the first is the simplest).
SCHEDULE_KINDS = ("at", "every", "steps", "with_probability", "geometric", "always", "never")
#: The kinds of hook :func:`hook_chains` draws, in shrinking order.
HOOK_KINDS = ("gaussian", "adversarial", "reset", "sequence")


def _until(stop: int | None) -> str:
    return "" if stop is None else f" until step {stop} (exclusive)"


class DrawnSchedule(NamedTuple):
    """A drawn :class:`scarjax.schedules.Schedule` with what it means.

    Attributes:
      schedule: the :class:`~scarjax.schedules.Schedule` (pass it to
        :func:`scarjax.hooks.scheduled`, ``Failure(when=)``, ``Checkpoint(when=)``).
      kind: one of :data:`SCHEDULE_KINDS`.
      args: its constructor's arguments (``at``: the steps; ``every``: ``(k, start,
        stop)``; ``steps``: the array entries, ``-1`` padding; ``with_probability``:
        ``(p, start, stop)``; ``geometric``: ``(rate, start, stop)``).
      code: the expression that builds it (``schedules.every(3, start=2, stop=None)``).
      description: when it fires, in words.

    The repr is the code, so hypothesis prints a falsifying example readably.
    """

    schedule: Any
    kind: str
    args: tuple
    code: str
    description: str

    def __repr__(self) -> str:
        return f"DrawnSchedule({self.code})"

    def _window(self, n: int) -> range:
        if self.kind in ("with_probability", "geometric", "every"):
            start, stop = self.args[-2], self.args[-1]
            return range(start, n if stop is None else min(stop, n))
        return range(n)

    def fire_steps(self, n: int) -> tuple[int, ...] | None:
        """The steps in ``[0, n)`` at which it fires, where that does not depend on the
        run's key (``at``, ``every``, ``steps``, ``always``, ``never``, probability 0 or 1,
        geometric rate 1); ``None`` for a random schedule."""
        k = self.kind
        if k in ("at", "steps"):
            return tuple(sorted({s for s in self.args if 0 <= s < n}))
        if k == "every":
            return tuple(self._window(n))[:: self.args[0]]
        if k == "always":
            return tuple(range(n))
        if k == "never":
            return ()
        if k == "with_probability" and self.args[0] in (0.0, 1.0):
            return () if self.args[0] == 0.0 else tuple(self._window(n))
        if k == "geometric" and self.args[0] == 1.0:
            return (self.args[1],) if self.args[1] < n else ()
        return None

    def possible_steps(self, n: int) -> tuple[int, ...]:
        """The steps in ``[0, n)`` at which it may fire (its window; exact where
        :meth:`fire_steps` is not ``None``)."""
        exact = self.fire_steps(n)
        return exact if exact is not None else tuple(self._window(n))

    @property
    def fires_once(self) -> bool:
        """A geometric schedule fires at most once (exactly once within ``[start, stop)``
        when it has a ``stop``)."""
        return self.kind == "geometric"


def _drawn_schedule(kind: str, args: tuple) -> DrawnSchedule:
    if kind == "at":
        steps = ", ".join(map(str, args))
        return DrawnSchedule(_sch.at(*args), kind, args, f"schedules.at({steps})",
                             f"at step{'s' if len(args) > 1 else ''} {steps}")
    if kind == "every":
        k, start, stop = args
        return DrawnSchedule(
            _sch.every(k, start, stop), kind, args, f"schedules.every({k}, start={start}, stop={stop})",
            f"every {k} step{'s' if k > 1 else ''} from step {start}{_until(stop)}",
        )
    if kind == "steps":
        listed = ", ".join(str(s) for s in args if s >= 0)
        return DrawnSchedule(_sch.steps(np.asarray(args, np.int32)), kind, args,
                             f"schedules.steps(np.array({list(args)}))", f"at the listed steps {listed}")
    if kind == "with_probability":
        p, start, stop = args
        return DrawnSchedule(
            _sch.with_probability(p, start, stop), kind, args,
            f"schedules.with_probability({p!r}, start={start}, stop={stop})",
            f"independently with probability {p:.6g} at each step from step {start}{_until(stop)}",
        )
    if kind == "geometric":
        rate, start, stop = args
        where = f"in [{start}, {stop})" if stop is not None else f"from step {start} on (possibly after the run)"
        return DrawnSchedule(
            _sch.geometric(rate, start, stop), kind, args,
            f"schedules.geometric({rate!r}, start={start}, stop={stop})",
            f"once, at a geometric step (rate {rate:.6g}) {where}",
        )
    if kind == "always":
        return DrawnSchedule(_sch.always(), kind, (), "schedules.always()", "at every step")
    if kind == "never":
        return DrawnSchedule(_sch.never(), kind, (), "schedules.never()", "never")
    raise ValueError(f"kinds: unknown schedule kind {kind!r}; choose from {SCHEDULE_KINDS}")


def _check_kinds(name: str, kinds: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    if isinstance(kinds, str):
        kinds = (kinds,)
    kinds = tuple(kinds)
    if not kinds or any(k not in allowed for k in kinds):
        raise ValueError(f"{name} must be a non-empty subset of {allowed}, got {kinds!r}")
    return tuple(k for k in allowed if k in kinds)  # canonical (shrinking) order


@st.composite
def schedules(
    draw: Any,
    max_step: int,
    *,
    min_step: int = 0,
    kinds: Any = SCHEDULE_KINDS,
) -> DrawnSchedule:
    """:class:`~scarjax.schedules.Schedule` objects (as :class:`DrawnSchedule`: the
    schedule, its code and when it fires in words) whose concrete events lie in
    ``[min_step, max_step]`` (run at least ``max_step + 1`` steps).

    Args:
      max_step, min_step: the window of steps the events are drawn from (inclusive).
      kinds: a subset of :data:`SCHEDULE_KINDS` (``at``: 1–3 steps; ``every``: a period,
        a start and an optional stop; ``steps``: 1–4 listed steps with up to 2 entries of
        ``-1`` padding; ``with_probability``: ``p`` in [0, 1] and a window; ``geometric``:
        a rate in [1e-6, 1] and a window; ``always``; ``never``).

    Shrinks to the simplest schedule of the first kind: ``schedules.at(min_step)``.
    """
    max_step = va.check_int("max_step", max_step, lo=0)
    min_step = va.check_int("min_step", min_step, lo=0, hi=max_step)
    kinds = _check_kinds("kinds", kinds, SCHEDULE_KINDS)
    # Every kind makes the same draws (hypothesis orders examples shortlex by their
    # draws: with equal lengths the first kind with all-minimal values is the simplest).
    kind = draw(st.sampled_from(kinds))
    step = st.integers(min_step, max_step)
    listed = [draw(step) for _ in range(4)]
    n_listed = draw(st.integers(1, 4))
    k = draw(st.integers(1, max(1, max_step - min_step + 1)))
    start = listed[0]
    stop = start + draw(st.integers(1, max_step + 1 - start))
    if not draw(st.booleans()):
        stop = None
    p = draw(st.floats(0.0, 1.0))
    # Rates below float32's range would be 0 in the compiled draw (no firing time).
    rate = draw(st.floats(1e-6, 1.0))
    pad = draw(st.integers(0, 2))
    if kind == "at":
        args = tuple(sorted(set(listed[: min(n_listed, 3)])))
    elif kind == "every":
        args = (k, start, stop)
    elif kind == "steps":
        args = tuple(dict.fromkeys(listed[:n_listed])) + (-1,) * pad
    elif kind == "with_probability":
        args = (p, start, stop)
    elif kind == "geometric":
        args = (rate, start, stop)
    else:
        args = ()
    return _drawn_schedule(kind, args)


class DrawnHook(NamedTuple):
    """One drawn hook of a :class:`DrawnChain`.

    Attributes:
      hook: the :class:`~scarjax.hooks.Hook` (already ``scheduled``).
      kind: one of :data:`HOOK_KINDS`.
      name: its name (its key in ``trace.delta``).
      param: ``std`` (gaussian), ``size`` (adversarial), ``fraction`` (reset); ``None``
        for a sequence.
      schedule: its :class:`DrawnSchedule` (``None`` for a sequence, which fires at its
        own events' steps).
      sequence: the :class:`PerturbationSequence` of a ``'sequence'`` hook, else ``None``.
    """

    hook: hooks.Hook
    kind: str
    name: str
    param: float | None
    schedule: DrawnSchedule | None
    sequence: PerturbationSequence | None

    def describe(self) -> str:
        if self.kind == "sequence":
            return f"{self.name}: {self.sequence.describe()}"
        what = {
            "gaussian": f"Gaussian noise of std {self.param:.6g} per entry",
            "adversarial": f"an adversarial δ of norm {self.param:.6g} away from w*",
            "reset": f"reset {self.param:.6g} of the entries to w⁽⁰⁾",
        }[self.kind]
        return f"{self.name}: {what}, {self.schedule.description}"

    def __repr__(self) -> str:
        return f"DrawnHook({self.describe()})"

    def fire_steps(self, n: int) -> tuple[int, ...] | None:
        """The steps in ``[0, n)`` at which it acts, where they do not depend on the key."""
        if self.kind == "sequence":
            return tuple(sorted({e.step for e in self.sequence.events if e.step < n}))
        return self.schedule.fire_steps(n)

    def possible_steps(self, n: int) -> tuple[int, ...]:
        """The steps in ``[0, n)`` at which it may act."""
        if self.kind == "sequence":
            return self.fire_steps(n)
        return self.schedule.possible_steps(n)


class DrawnChain(NamedTuple):
    """A drawn :func:`scarjax.hooks.chain` of generic perturbations.

    Attributes:
      hook: the chain (a :class:`~scarjax.hooks.Hook`: pass it to :func:`scarjax.run`).
      parts: its :class:`DrawnHook` s, in order (their names are the keys of
        ``trace.delta``).
      description: the chain in words, one part per ``;``.
    """

    hook: hooks.Hook
    parts: tuple[DrawnHook, ...]
    description: str

    def __repr__(self) -> str:
        return f"DrawnChain({self.description})"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts)


@st.composite
def hook_chains(
    draw: Any,
    max_step: int,
    *,
    min_step: int = 0,
    max_hooks: int = 3,
    kinds: Any = HOOK_KINDS,
    schedule_kinds: Any = SCHEDULE_KINDS,
    sizes: Any = None,
    fractions: Any = None,
) -> DrawnChain:
    """Chains of generic perturbation hooks (:mod:`scarjax.perturb.generic`), each wrapped
    in :func:`scarjax.hooks.scheduled` with a drawn schedule (:func:`schedules`), as a
    :class:`DrawnChain` (the chain hook, its parts and a description).

    Kinds: ``'gaussian'`` (``generic.gaussian(std)``), ``'adversarial'``
    (``generic.adversarial(size)``), ``'reset'`` (``generic.reset(fraction)``), and
    ``'sequence'``: a :class:`PerturbationSequence` (:func:`perturbation_sequences`,
    up to 3 events) replayed by :func:`sequence_hook`, which acts at its own events'
    steps and is not wrapped in a schedule. Hook ``i`` is named ``f"{kind}_{i}"`` (its
    key in ``trace.delta``).

    Args:
      max_step, min_step: the window of the schedules' and sequences' events (inclusive).
      max_hooks: at most this many hooks (at least one).
      kinds: a subset of :data:`HOOK_KINDS`.
      schedule_kinds: the schedule kinds (see :func:`schedules`).
      sizes: a strategy for ``std`` / ``size`` / a sequence's ``‖δ‖`` (default floats in
        ``[1e-3, 1]``; hypothesis shrinks floats towards simple values such as 1).
      fractions: a strategy for a reset's fraction (default floats in ``[0.05, 1]``).

    Shrinks to one Gaussian hook at ``schedules.at(min_step)``.
    """
    max_step = va.check_int("max_step", max_step, lo=0)
    min_step = va.check_int("min_step", min_step, lo=0, hi=max_step)
    max_hooks = va.check_int("max_hooks", max_hooks, lo=1)
    kinds = _check_kinds("kinds", kinds, HOOK_KINDS)
    schedule_kinds = _check_kinds("schedule_kinds", schedule_kinds, SCHEDULE_KINDS)
    sizes = st.floats(1e-3, 1.0) if sizes is None else sizes
    fractions = st.floats(0.05, 1.0) if fractions is None else fractions
    n = draw(st.integers(1, max_hooks))
    parts = []
    for i in range(n):
        # Every kind makes the same draws, a sequence more (so the first kind is the
        # simplest: hypothesis orders examples shortlex by their draws; see schedules).
        kind = draw(st.sampled_from(kinds))
        size = float(draw(sizes))
        fraction = float(draw(fractions))
        sched = draw(schedules(max_step, min_step=min_step, kinds=schedule_kinds))
        name = f"{kind}_{i}"
        if kind == "sequence":
            seq = draw(perturbation_sequences(max_step, min_step=min_step, max_events=3, sizes=sizes))
            hook = sequence_hook(jax.tree.map(jnp.asarray, seq.as_arrays()), name=name)
            parts.append(DrawnHook(hook, kind, name, None, None, seq))
            continue
        param = fraction if kind == "reset" else size
        inner = {
            "gaussian": lambda: _generic.gaussian(param, name=name),
            "adversarial": lambda: _generic.adversarial(param, name=name),
            "reset": lambda: _generic.reset(param, name=name),
        }[kind]()
        parts.append(DrawnHook(hooks.scheduled(inner, sched.schedule), kind, name, param, sched, None))
    parts = tuple(parts)
    return DrawnChain(hooks.chain(*(p.hook for p in parts)), parts, "; ".join(p.describe() for p in parts))
