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

__all__ = ["Perturbation", "PerturbationSequence", "perturbation_sequences", "stack", "sequence_hook", "DIRECTIONS"]

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
