"""Real scarjax training advanced interval by interval on the cluster clock.

**Keys.** The shared design had each ``train`` call run ``scarjax.run(algorithm, hooks,
steps, fold_in(key, self.step), init_state=self.state)``. Then the random numbers (the
minibatches) of a step depend on where the intervals were cut, so a policy that cuts the run
differently (at checkpoints, revocations) could never equal the reliable run bit for bit.
Without hooks, :meth:`Trainer.train` therefore runs units of ``unit`` steps (default 1), unit
``u`` keyed by ``fold_in(key, u * unit)`` (the global step), each one
``scarjax.core.run_one`` of ``unit`` steps from the current state inside one jitted
``lax.scan``: the result depends on the global step only, not on the cutting, and a redone
step (rework after a restore with ``restore(state, step)``) draws the same minibatch.
``steps`` must be a multiple of ``unit``. One program per (algorithm, unit, workers) is
compiled: a scan over 32 units, those past the requested count masked off (``lax.cond``),
called once per 32 units. With ``hooks`` given, ``train`` is exactly the design's call (one
``scarjax.run``, hook state alive for that call only, keys depending on the cut).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import core

__all__ = ["Trainer"]


@jax.jit
def _init_state(algorithm, key):
    return core.State(*algorithm.init(jax.random.split(key, 3)[0], algorithm.data))


# --------------------------------------------------------------------------------------
# Real training, interval by interval

_BLOCK = 32  # units per call of the one cached program (fewer are masked off inside it)


@functools.partial(jax.jit, static_argnums=(5,))
def _train_units(algorithm, key, state, start, n_units, static):
    unit, workers = static

    def body(st, i):
        def go(s):
            k = jax.random.fold_in(key, start + i * unit)
            new, tr = core.run_one(algorithm, k, None, s, (), (unit, False, workers))
            return core.State(*new), tr.loss[1:]

        def skip(s):
            return s, jnp.zeros((unit,), jnp.float32)

        return jax.lax.cond(i < n_units, go, skip, st)

    st, losses = jax.lax.scan(body, core.State(*state), jnp.arange(_BLOCK, dtype=jnp.int32))
    return st, losses.reshape(-1)


@jax.jit
def _loss(algorithm, state):
    return algorithm.loss(state, algorithm.data)


class Trainer:
    """Real scarjax training advanced interval by interval (see the module notes on keys).

    Args:
      algorithm: the :class:`scarjax.Algorithm`.
      key: PRNG key (or int seed): the initial state is ``algorithm.init(split(key, 3)[0])``
        (as :func:`scarjax.run`'s), unit ``u`` runs with ``fold_in(key, u * unit)``.
      init_state: start from this state instead.
      unit: steps per keyed unit (a cut between ``train`` calls must fall on a multiple).
      workers: default worker count for worker mode (``None``: the plain loop).

    Attributes:
      state: the current :class:`scarjax.State`; step: iterations done (global step).
    """

    def __init__(self, algorithm: core.Algorithm, key: Any, *, init_state: core.State | None = None,
                 unit: int = 1, workers: int | None = None):
        if not isinstance(algorithm, core.Algorithm):
            raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
        self.algorithm = algorithm
        self.key = core.as_key(key)
        self.unit = va.check_int("unit", unit, lo=1)
        self.workers = None if workers is None else va.check_int("workers", workers, lo=1)
        if init_state is None:
            init_state = _init_state(algorithm, self.key)
        else:
            core.check_initial(algorithm, init_state)
            init_state = core.State(*init_state)
        self.state = init_state
        self.step = 0

    def train(self, steps: int, *, workers: int | None = None, hooks: Any = None) -> np.ndarray:
        """Run ``steps`` more iterations; returns the ``float64[steps]`` loss after each."""
        steps = va.check_int("steps", steps, lo=0)
        workers = self.workers if workers is None else va.check_int("workers", workers, lo=1)
        if steps == 0:
            return np.zeros(0)
        if hooks is not None:
            st, tr = core.run(self.algorithm, hooks, steps, jax.random.fold_in(self.key, self.step),
                              init_state=self.state, workers=workers)
            self.state, self.step = core.State(*st), self.step + steps
            return np.asarray(tr.loss[1:], np.float64)
        if steps % self.unit or self.step % self.unit:
            raise ValueError(f"steps must be a multiple of unit={self.unit} (and the trainer at a multiple), "
                             f"got steps={steps} at step {self.step}")
        n = steps // self.unit
        out = []
        while n > 0:
            m = min(n, _BLOCK)
            st, losses = _train_units(self.algorithm, self.key, self.state, jnp.int32(self.step), jnp.int32(m),
                                      (self.unit, workers))
            self.state, self.step, n = st, self.step + m * self.unit, n - m
            out.append(np.asarray(losses, np.float64)[: m * self.unit])
        res = np.concatenate(out)
        if not np.all(np.isfinite(res)):
            raise FloatingPointError(f"training diverged: non-finite loss at step {self.step - steps + int(np.argmin(np.isfinite(res)))}")
        return res

    def snapshot(self) -> core.State:
        """The current state (a full checkpoint; JAX arrays are immutable)."""
        return self.state

    def restore(self, state: core.State, step: int | None = None) -> None:
        """Continue from ``state`` (and the global ``step`` it was taken at: redone steps then
        draw the same minibatches)."""
        va.check_tree_like("state", state, self.state, "the trainer's state")
        self.state = core.State(*state)
        if step is not None:
            self.step = va.check_int("step", step, lo=0)

    def loss(self) -> float:
        """The loss of the current state."""
        return float(_loss(self.algorithm, self.state))
