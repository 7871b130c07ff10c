"""Determinism and trial/run equivalence of :func:`scarjax.run` / :func:`scarjax.run_trials`.

A run is a function of its key (:func:`scarjax.run`: "the same key gives the same
result"), and trial ``i`` of :func:`scarjax.run_trials` is ``run(keys[i])`` (its
docstring: the same random numbers, so identical discrete outcomes, and floats equal up
to the rounding of ``vmap``-batched products and reductions, measured ≤ 2e-6 and asserted
≤ 1e-5 relative for the QP and MLR: :data:`TRIAL_RTOL`). For a user's algorithm and hooks
three properties are checked, in this order:

1. **Same key, same run, bit for bit**: two runs with the same key, traced and compiled
   *separately* (as a fresh process would), give bit-identical final states and traces.
   This catches trace-time side effects: a Python counter or ``np.random`` read while the
   update is traced bakes a different constant into each compiled program (a cached
   program would hide them within one process, not across processes), and run-time
   nondeterminism (host callbacks drawing their own random numbers). The second program
   is compiled once per process for each (algorithm, hooks, steps, workers).
2. **An int seed is its key**: ``run(…, seed) == run(…, jax.random.key(seed))`` bit for bit.
3. **Trial ``i`` equals ``run(keys[i])``**: every discrete outcome identical (integer and
   boolean leaves of the state and trace; the steps at which each hook changed the
   parameters, ``trace.delta[name] > 0``), and every floating leaf within
   ``max |trial − run| / max |run| <= rtol`` (per leaf; a leaf that is all 0 in the run
   must be all 0 in the trial).

A run that diverges (NaN/inf in its state or trace) is reported as a counterexample, never
compared silently.
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from scarjax import validate as va
from scarjax import core
from scarjax.trials import run_trials, split_trials
from scarjax.hooks import Hook, flatten_hooks
from scarjax.testing._harness import fail, replay_keys, resolve_settings, run_property
from scarjax.testing._st_perturbations import sequence_hook, stack

__all__ = ["TRIAL_RTOL", "ACCELERATOR_TRIAL_RTOL", "trial_rtol", "Difference", "DeterminismResult", "compare_runs", "assert_determinism", "check_determinism"]

#: The documented trial/run tolerance (:func:`scarjax.run_trials`): ``max |trial − run| /
#: max |run|`` per leaf, asserted for the QP and MLR (measured ≤ 2e-6; MF's rotations drift
#: further, ≤ 3e-4, along its flat directions).
TRIAL_RTOL = 1e-5

#: The same tolerance on GPUs and TPUs: there the batched and the single-trial programs are
#: fused and vectorised differently (reductions reordered, fast ``exp``/``log``), measured
#: 1.6e-5 for MLR's first loss on an H100 under full-precision products (float32 matrix
#: products default to TF32 there, about 1e-3: use ``jax.default_matmul_precision("highest")``
#: for these checks).
ACCELERATOR_TRIAL_RTOL = 1e-4


def trial_rtol(backend: str | None = None) -> float:
    """The documented trial/run tolerance on ``backend`` (default: JAX's default backend):
    :data:`TRIAL_RTOL` on CPU, :data:`ACCELERATOR_TRIAL_RTOL` elsewhere. What ``rtol=None``
    means in :func:`compare_runs` and :func:`check_determinism`."""
    backend = jax.default_backend() if backend is None else backend
    return TRIAL_RTOL if backend == "cpu" else ACCELERATOR_TRIAL_RTOL


class Difference(NamedTuple):
    """Where two runs differ most (:func:`compare_runs`).

    Attributes:
      leaf: the leaf, e.g. ``"state.params['w']"``, ``"trace.loss"``, ``"trace.delta['gaussian']"``.
      kind: ``'float'`` (a floating leaf, by ``max |a − b| / max |b|``), ``'bits'`` (a
        floating leaf that is not bit-identical), ``'discrete'`` (an integer, boolean or
        key leaf), ``'fires'`` (the steps a hook changed the parameters), ``'shape'``.
      step: the first iteration at which the leaf differs beyond the tolerance (its last
        axis for a trace leaf: ``loss``/``distance`` index ``k = 0 … steps``, the per-step
        records ``k = 0 … steps − 1``); ``None`` for the final state.
      rel_diff: ``max |a − b| / max |b|`` over the leaf (``inf`` when ``b`` is all 0 and
        ``a`` is not; 0 for an identical leaf).
      abs_diff: ``max |a − b|``.
      tolerance: the ``rtol`` it was compared with (0 for a bit-for-bit comparison).
      detail: a sentence for the counterexample.
    """

    leaf: str
    kind: str
    step: int | None
    rel_diff: float
    abs_diff: float
    tolerance: float
    detail: str

    @property
    def failed(self) -> bool:
        if self.kind in ("discrete", "fires", "shape", "bits"):
            return True
        return self.rel_diff > self.tolerance


def _named_leaves(result: Any) -> list[tuple[str, Any]]:
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], core.Trace):
        parts = (("state", result[0]), ("trace", result[1]))
    elif isinstance(result, core.Trace):
        parts = (("trace", result),)
    elif isinstance(result, core.State):
        parts = (("state", result),)
    else:
        parts = (("run", result),)
    out = []
    for prefix, tree in parts:
        flat, _ = jax.tree_util.tree_flatten_with_path(tree)
        out.extend((prefix + jax.tree_util.keystr(path), x) for path, x in flat)
    return out


def _host(x: Any) -> np.ndarray:
    if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(x))
    return np.asarray(x)


def _first_step(bad: np.ndarray, leaf: str) -> int | None:
    """The first index along the last (step) axis of a trace leaf where ``bad`` holds."""
    if not leaf.startswith("trace") or bad.ndim == 0 or not bad.any():
        return None
    per_step = bad.reshape(-1, bad.shape[-1]).any(0)
    return int(np.argmax(per_step))


def _is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.complexfloating)


def compare_runs(
    a: Any, b: Any, *, rtol: float | None = None, exact: bool = False, labels: tuple[str, str] = ("a", "b")
) -> Difference | None:
    """How run ``a`` differs from the reference run ``b`` (each ``(state, trace)``, or both
    a :class:`~scarjax.Trace`, e.g. ``a = split_trials(trials, i)``, ``b = run(…,
    keys[i])``), or ``None`` when they agree.

    Discrete outcomes are compared exactly: integer, boolean and key leaves, and the steps
    at which each hook changed the parameters (``trace.delta[name] > 0``); with
    ``exact=True`` floating leaves must be bit-identical too. Of those differences the one
    at the earliest step is returned. Otherwise floating leaves are compared by
    ``max |a − b| / max |b| <= rtol`` per leaf, and the leaf with the largest relative
    difference is returned if it exceeds ``rtol``. ``labels`` name ``a`` and ``b`` in the
    :attr:`Difference.detail` sentence.
    """
    rtol = trial_rtol() if rtol is None else rtol
    la, lb = _named_leaves(a), _named_leaves(b)
    if [n for n, _ in la] != [n for n, _ in lb]:
        only = sorted(set(n for n, _ in la) ^ set(n for n, _ in lb))
        return Difference("(structure)", "shape", None, math.inf, math.inf, rtol,
                          f"the two results have different leaves: {only or 'in another order'}")
    hard: list[Difference] = []
    worst: Difference | None = None
    for (name, x), (_, y) in zip(la, lb):
        x, y = _host(x), _host(y)
        if x.shape != y.shape or x.dtype != y.dtype:
            return Difference(name, "shape", None, math.inf, math.inf, rtol,
                              f"{name} is {x.dtype}{list(x.shape)} in {labels[0]} and "
                              f"{y.dtype}{list(y.shape)} in {labels[1]}")
        if not _is_float(x):
            if not np.array_equal(x, y):
                bad = x != y
                idx = np.unravel_index(int(np.argmax(bad)), bad.shape) if bad.ndim else ()
                hard.append(Difference(name, "discrete", _first_step(bad, name), math.inf, math.inf, 0.0,
                                       f"{name}{list(map(int, idx)) if idx else ''} is {x[idx]} in {labels[0]} "
                                       f"and {y[idx]} in {labels[1]}"))
            continue
        if name.startswith("trace.delta[") and x.ndim:
            fa, fb = x > 0, y > 0
            if not np.array_equal(fa, fb):
                k = _first_step(fa != fb, name)
                hook = name[len("trace.delta["):-1]
                said = lambda f: "fired" if f[..., k].any() else "did not fire"  # noqa: E731
                hard.append(Difference(name, "fires", k, math.inf, math.inf, 0.0,
                                       f"hook {hook} {said(fa)} at step {k} in {labels[0]} and {said(fb)} "
                                       f"in {labels[1]}"))
                continue
        xf, yf = x.astype(np.float64), y.astype(np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.abs(xf - yf)
        diff = np.where(np.isnan(xf) & np.isnan(yf), 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        absd = float(diff.max()) if diff.size else 0.0
        scale = float(np.max(np.abs(yf))) if yf.size else 0.0
        rel = absd / scale if scale > 0 else (math.inf if absd > 0 else 0.0)
        if exact:
            if x.tobytes() != y.tobytes():
                bad = (diff > 0) | (np.signbit(x) != np.signbit(y))
                hard.append(Difference(name, "bits", _first_step(bad, name), rel, absd, 0.0,
                                       f"{name} is not bit-identical between {labels[0]} and {labels[1]}: "
                                       f"max |a - b| = {absd:.3g} ({rel:.3g} of max |b| = {scale:.3g})"))
            continue
        if worst is None or rel > worst.rel_diff:
            bad = diff > rtol * scale
            worst = Difference(name, "float", _first_step(bad, name), rel, absd, rtol,
                               f"max |{labels[0]} - {labels[1]}| / max |{labels[1]}| = {absd:.3g} / {scale:.3g} "
                               f"= {rel:.3g} > rtol {rtol:.3g}")
    if hard:
        return min(hard, key=lambda d: math.inf if d.step is None else d.step)
    return worst if worst is not None and worst.failed else None


def _worst_float(a: Any, b: Any) -> tuple[float, str]:
    """``(max |a − b| / max |b|, leaf)`` over the floating leaves (``(0, '-')`` if equal)."""
    worst, where = 0.0, "-"
    for (name, x), (_, y) in zip(_named_leaves(a), _named_leaves(b)):
        x, y = _host(x), _host(y)
        if _is_float(x) and x.size:
            scale = float(np.max(np.abs(y.astype(np.float64))))
            diff = float(np.max(np.abs(x.astype(np.float64) - y)))
            rel = diff / scale if scale > 0 else (math.inf if diff > 0 else 0.0)
            if rel > worst:
                worst, where = rel, name
    return worst, where


def _nonfinite(result: Any) -> tuple[str, int | None] | None:
    """``(leaf, first step)`` of the earliest NaN/inf (trace leaves give the step), or ``None``."""
    found = []
    for name, x in _named_leaves(result):
        x = _host(x)
        if _is_float(x) and not np.all(np.isfinite(x)):
            found.append((name, _first_step(~np.isfinite(x), name)))
    if not found:
        return None
    return min(found, key=lambda f: math.inf if f[1] is None else f[1])


class DeterminismResult(NamedTuple):
    """What :func:`assert_determinism` / :func:`check_determinism` verified.

    Attributes:
      trials: trials per case (each compared with its own run).
      examples: cases (hypothesis examples) checked.
      max_rel_diff: the largest ``max |trial − run| / max |run|`` over every floating
        leaf, trial and case (0: bit-identical).
      worst_leaf: the leaf where it occurred.
      rtol: the tolerance.
      seed: the seed of the case with the largest difference.
    """

    trials: int
    examples: int
    max_rel_diff: float
    worst_leaf: str
    rtol: float
    seed: int

    def summary(self) -> str:
        return (
            f"deterministic over {self.examples} case(s) of {self.trials} trials: the same key gave "
            f"bit-identical runs (compiled twice), an int seed equals its key, and trial i of run_trials "
            f"equals run(keys[i]) with identical discrete outcomes and floats within "
            f"{self.max_rel_diff:.3g} <= rtol {self.rtol:.3g} (worst leaf {self.worst_leaf})"
        )


# ------------------------------------------------------------------------------ hooks


class _Hooks(NamedTuple):
    """A case's hooks: ``spec`` (hooks, or a factory), ``args`` (stacked over trials or
    ``None``), how to write them in a replay, and what they are in words."""

    spec: Any
    args: Any
    replay: str
    describe: str


def _is_sequence(v: Any) -> bool:
    return hasattr(v, "as_arrays") and hasattr(v, "describe") and hasattr(v, "events")


def _seq_code(v: Any) -> str:
    return re.sub(r"\b(PerturbationSequence|Perturbation)\(", r"sst.\1(", repr(v))


def _hook_names(h: Any) -> str:
    names = [x.name for x in flatten_hooks(h)]
    return ", ".join(names) if names else "no hooks"


def _slice(args: Any, i: int) -> Any:
    return None if args is None else jax.tree.map(lambda x: x[i], args)


def _fixed_hooks(hooks: Any, hook_args: Any, trials: int) -> _Hooks:
    """The ``hooks=`` / ``hook_args=`` arguments of the check (not a strategy)."""
    if hook_args is not None:
        if not callable(hooks) or isinstance(hooks, Hook):
            raise TypeError(
                "with hook_args, hooks must be a hook factory (a function hook_args -> hooks), "
                f"got {type(hooks).__name__}"
            )
        for leaf in jax.tree.leaves(hook_args):
            if np.shape(leaf)[:1] != (trials,):
                raise ValueError(
                    f"hook_args needs a leading axis of length trials={trials} (one entry per trial), "
                    f"got a leaf of shape {np.shape(leaf)}"
                )
        name = getattr(hooks, "__name__", "factory")
        return _Hooks(hooks, hook_args, "hooks, hook_args=hook_args", f"{name}(hook_args[i])")
    if callable(hooks) and not isinstance(hooks, Hook):
        raise TypeError("hooks is a function (a hook factory) but hook_args is None: pass hook_args=...")
    if _is_sequence(hooks):
        hooks = hooks.hook()
    flatten_hooks(hooks)  # TypeError naming hooks
    return _Hooks(hooks, None, "None" if hooks is None else "hooks", _hook_names(hooks))


def _drawn_hooks(value: Any, trials: int) -> _Hooks:
    """A value drawn from a hooks strategy: a list of ``trials`` perturbation sequences
    (stacked as one factory's arguments), ``(factory, args)`` (every trial), a hook, a
    sequence of hooks, ``None``, or an object whose ``.hook`` is a hook
    (:func:`~scarjax.testing.strategies.hook_chains`) or makes one."""
    if isinstance(value, list) and value and all(_is_sequence(v) for v in value):
        longest = max(1, max(len(v.events) for v in value))
        bucket = 4 if longest <= 4 else 1 << (longest - 1).bit_length()  # few shapes: few compilations
        args = stack(value, bucket)
        code = "[" + ", ".join(_seq_code(v) for v in value) + "]"
        desc = "; ".join(f"trial {i}: {v.describe()}" for i, v in enumerate(value))
        return _Hooks(sequence_hook, args, f"sst.sequence_hook, hook_args=sst.stack({code}, {bucket})", desc)
    if isinstance(value, tuple) and len(value) == 2 and callable(value[0]) and not isinstance(value[0], Hook):
        factory, one = value
        args = jax.tree.map(lambda x: np.broadcast_to(np.asarray(x), (trials,) + np.shape(x)), one)
        name = getattr(factory, "__name__", "factory")
        every = f"jax.tree.map(lambda x: np.repeat(np.asarray(x)[None], {trials}, 0), {one!r})"
        return _Hooks(factory, args, f"{name}, hook_args={every}", f"{name}({one!r})")
    hook = getattr(value, "hook", None)
    if not isinstance(value, Hook) and (isinstance(hook, Hook) or callable(hook)):
        # a drawn chain or hook (sst.hook_chains: ``.hook`` is the Hook), or ``.hook()``
        desc = value.describe() if callable(getattr(value, "describe", None)) else getattr(value, "description", None)
        return _Hooks(hook if isinstance(hook, Hook) else hook(), None, "hooks", desc or repr(value))
    flatten_hooks(value)
    return _Hooks(value, None, "None" if value is None else "hooks", _hook_names(value))


def _strategy(hooks: st.SearchStrategy, trials: int) -> st.SearchStrategy:
    @st.composite
    def draw_hooks(draw):
        first = draw(hooks)
        if _is_sequence(first):  # one sequence per trial, replayed by one compiled factory
            return [first] + [draw(hooks) for _ in range(trials - 1)]
        return first

    return draw_hooks()


# ------------------------------------------------------------------------------ the checks


def _run_again(algorithm, key, hook_args, init_state, spec, static):
    """:func:`scarjax.core.run_one`, as :func:`scarjax.run` runs it."""
    return core.run_one(algorithm, key, hook_args, init_state, spec, static)


#: A second ``jit`` of the run, separate from :func:`scarjax.run`'s: the first call for an
#: (algorithm, hooks, steps, workers) traces and compiles the run again, as a fresh process
#: would (later calls in this process reuse that second program).
_again = jax.jit(_run_again, static_argnums=(4, 5))


def _replay(
    steps: int, seed: int, trials: int, h: _Hooks, rtol: float, workers: int | None, trial: int, recompile=True
) -> str:
    extra = "" if rtol == trial_rtol() else f", rtol={rtol!r}"
    extra += "" if recompile else ", recompile=False"
    extra += "" if workers is None else f", workers={workers}"
    ha = "" if h.args is None else ", hook_args=hook_args"
    spec = h.replay.split(",")[0]
    lines = [
        f"sxt.assert_determinism(algorithm, {steps}, seed={seed}, trials={trials}, hooks={h.replay}{extra})",
        f"# i.e. keys = sxt.replay_keys({seed}, {trials}); "
        f"trials = scarjax.run_trials(algorithm, {spec}, {steps}, keys{ha}); "
        f"one = scarjax.run(algorithm, {spec}, {steps}, keys[{trial}]"
        + ("" if h.args is None else f", hook_args=jax.tree.map(lambda x: x[{trial}], hook_args)") + "); "
        f"compare trial {trial} of trials with one (sxt.compare_runs)",
    ]
    return "\n".join(lines)


def _one_case(algorithm, steps, seed, trials, h: _Hooks, rtol, workers, recompile) -> tuple[float, str]:
    keys = replay_keys(seed, trials)
    p = core.prepare(algorithm, h.spec, steps, None if h.args is None else _slice(h.args, 0), None, workers=workers)
    runs = [core.run(algorithm, h.spec, steps, keys[i], hook_args=_slice(h.args, i), workers=workers)
            for i in range(trials)]

    def details(i, d: Difference | None = None, **more) -> dict:
        out = {"algorithm": getattr(algorithm, "name", "algorithm"), "hooks": h.describe, "steps": steps}
        if d is not None:
            out["leaf"] = d.leaf
            out["step"] = "final state" if d.step is None else d.step
            out["difference"] = d.detail
            if d.kind == "float":
                doc = " (run_trials' documented tolerance)" if d.tolerance == trial_rtol() else ""
                out["tolerance"] = f"max |trial - run| / max |run| <= rtol = {d.tolerance:.3g}{doc}"
        out.update(more)
        out["trial"] = i
        out["seed"] = f"{seed} (trial i runs on jax.random.fold_in(jax.random.key({seed}), i))"
        return out

    for i, r in enumerate(runs):
        bad = _nonfinite(r)
        if bad is not None:
            leaf, step = bad
            fail("Determinism: run diverged (NaN/inf)" + ("" if step is None else f" at step {step}"),
                 details(i, leaf=leaf, step="final state" if step is None else step),
                 _replay(steps, seed, trials, h, rtol, workers, i, recompile))
    # 1. The same key, compiled again (or the same program run again): bit for bit.
    for i, r in enumerate(runs):
        if recompile:
            again = _again(p.algorithm, keys[i], _slice(h.args, i), None, p.spec, p.static)
        else:
            again = core.run(algorithm, h.spec, steps, keys[i], hook_args=_slice(h.args, i), workers=workers)
        label = "the run compiled again" if recompile else "the run repeated"
        d = compare_runs(again, r, exact=True, labels=(label, f"run(keys[{i}])"))
        if d is not None:
            how = ("the run traced and compiled twice, as in a fresh process: a trace-time side effect such as "
                   "a Python counter or np.random, or run-time randomness outside the key" if recompile else
                   "the same compiled program run twice: run-time randomness outside the key")
            fail(f"Determinism: the same key gave different runs ({how})",
                 details(i, d), _replay(steps, seed, trials, h, rtol, workers, i, recompile))
    # 2. An int seed is its key.
    a = core.run(algorithm, h.spec, steps, seed, hook_args=_slice(h.args, 0), workers=workers)
    b = core.run(algorithm, h.spec, steps, jax.random.key(seed), hook_args=_slice(h.args, 0), workers=workers)
    d = compare_runs(a, b, exact=True, labels=(f"run(..., {seed})", f"run(..., jax.random.key({seed}))"))
    if d is not None:
        fail(f"Determinism: run(..., {seed}) differs from run(..., jax.random.key({seed}))",
             details(0, d), f"scarjax.run(algorithm, hooks, {steps}, {seed}) vs "
             f"scarjax.run(algorithm, hooks, {steps}, jax.random.key({seed}))")
    # 3. Trial i of run_trials is run(keys[i]).
    out = run_trials(algorithm, h.spec, steps, keys, hook_args=h.args, workers=workers)
    worst, worst_leaf = 0.0, "-"
    for i, r in enumerate(runs):
        t_i = split_trials(out, i)
        bad = _nonfinite(t_i)
        if bad is not None:
            leaf, step = bad
            fail(f"run_trials: trial {i} diverged (NaN/inf)" + ("" if step is None else f" at step {step}")
                 + f" where run(keys[{i}]) did not",
                 details(i, leaf=leaf, step="final state" if step is None else step),
                 _replay(steps, seed, trials, h, rtol, workers, i, recompile))
        d = compare_runs(t_i, r, rtol=rtol, labels=(f"trial {i}", f"run(keys[{i}])"))
        if d is not None:
            what = ("a discrete outcome differs" if d.kind in ("discrete", "fires", "shape")
                    else "floats differ beyond the documented tolerance")
            fail(f"run_trials: trial {i} differs from run(keys[{i}]): {what}",
                 details(i, d), _replay(steps, seed, trials, h, rtol, workers, i, recompile))
        rel, where = _worst_float(t_i, r)
        if rel > worst:
            worst, worst_leaf = rel, where
    return worst, worst_leaf


def _check_args(algorithm, steps, trials, rtol, seed, workers):
    core.check_algorithm(algorithm)
    steps = va.check_int("steps", steps, lo=1)
    trials = va.check_int("trials", trials, lo=1)
    rtol = trial_rtol() if rtol is None else rtol
    va.check_real("rtol", rtol, lo=0.0, scalar=True)
    seed = va.check_int("seed", seed, lo=0)
    workers = None if workers is None else va.check_int("workers", workers, lo=1)
    return steps, trials, float(rtol), seed, workers


def assert_determinism(
    algorithm: Any,
    steps: int,
    *,
    seed: int = 0,
    hooks: Any = None,
    hook_args: Any = None,
    trials: int = 4,
    rtol: float | None = None,
    workers: int | None = None,
    recompile: bool = True,
) -> DeterminismResult:
    """One case of :func:`check_determinism`: the keys ``replay_keys(seed, trials)``, the
    given hooks (a hook, a chain, a sequence of hooks, ``None``, a perturbation sequence,
    or a factory with ``hook_args`` stacked over the trials), the three properties of the
    module docstring. Raises :class:`~scarjax.testing.CheckFailure` naming the property,
    the leaf, the step, the difference against the tolerance, the trial and the replay."""
    steps, trials, rtol, seed, workers = _check_args(algorithm, steps, trials, rtol, seed, workers)
    h = _fixed_hooks(hooks, hook_args, trials)
    worst, leaf = _one_case(algorithm, steps, seed, trials, h, rtol, workers, va.check_bool("recompile", recompile))
    return DeterminismResult(trials, 1, worst, leaf, rtol, seed)


def check_determinism(
    algorithm: Any,
    steps: int,
    *,
    hooks: Any = None,
    hook_args: Any = None,
    trials: int = 4,
    rtol: float | None = None,
    seed: int = 0,
    workers: int | None = None,
    recompile: bool = True,
    settings: Any = None,
) -> DeterminismResult:
    """Determinism and trial/run equivalence of ``algorithm`` under ``hooks`` (module
    docstring): the same key gives bit-identical runs even when compiled again, an int
    seed equals its key, and trial ``i`` of :func:`scarjax.run_trials` equals
    ``run(keys[i])`` (discrete outcomes identical, floats within ``rtol``, by default the
    documented tolerance :func:`trial_rtol`: :data:`TRIAL_RTOL` on CPU).

    Each hypothesis example is one batch of ``trials`` keys ``replay_keys(seed + s,
    trials)`` (``s`` drawn; shrinks to ``seed``) run as one :func:`scarjax.run_trials`
    call and compared trial by trial with :func:`scarjax.run`::

        sxt.check_determinism(alg, 30, hooks=hooks.scheduled(perturb.gaussian(0.1), 5))
        sxt.check_determinism(alg, 30, hooks=sst.perturbation_sequences(max_step=29))

    Args:
      algorithm, steps, workers: as for :func:`scarjax.run`.
      hooks: ``None``; a hook, chain or sequence of hooks; a hook factory with
        ``hook_args`` (leaves with a leading axis of length ``trials``: trial ``i`` gets
        slice ``i``); or a hypothesis strategy, drawn for every example, of hooks,
        ``(factory, args)`` pairs (the same args for every trial), drawn chains
        (:func:`~scarjax.testing.strategies.hook_chains`), or perturbation sequences
        (:func:`~scarjax.testing.strategies.perturbation_sequences`: one per trial,
        replayed by one compiled :func:`~scarjax.testing.strategies.sequence_hook`).
        Hooks are static: every drawn hook object compiles its own programs (a few
        seconds each), while drawn sequences and factory arguments reuse one.
      trials: trials per example.
      rtol: the float tolerance of trial vs run (``max |trial − run| / max |run|`` per leaf).
      seed: the base seed.
      recompile: compile the run a second time for property 1 (once per process for each
        algorithm, hooks, steps and workers: for a large model, seconds); ``False``: run
        the cached program twice, which catches run-time nondeterminism only.
      settings: ``None`` (:data:`~scarjax.testing.DEFAULT_SETTINGS`), an int
        (``max_examples``) or a ``hypothesis.settings``.

    Returns:
      :class:`DeterminismResult` (the largest trial/run difference seen).
    """
    steps, trials, rtol, seed, workers = _check_args(algorithm, steps, trials, rtol, seed, workers)
    recompile = va.check_bool("recompile", recompile)
    if isinstance(hooks, st.SearchStrategy):
        if hook_args is not None:
            raise TypeError("hook_args must be None when hooks is a strategy (draw (factory, args) pairs instead)")
        hook_st = _strategy(hooks, trials).map(lambda v: _drawn_hooks(v, trials))
    else:
        hook_st = st.just(_fixed_hooks(hooks, hook_args, trials))
    seen: list[tuple[float, str, int]] = []

    def body(example):
        s, h = example
        case_seed = (seed + s) % 2**31
        worst, leaf = _one_case(algorithm, steps, case_seed, trials, h, rtol, workers, recompile)
        seen.append((worst, leaf, case_seed))

    run_property(st.tuples(st.integers(0, 2**31 - 1), hook_st), body, resolve_settings(settings))
    worst, leaf, case_seed = max(seen, key=lambda x: x[0])
    return DeterminismResult(trials, len(seen), worst, leaf, rtol, case_seed)
