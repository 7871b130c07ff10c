"""The diagonal pre-conditioner ``P`` of Eq 3.2, read from an optax optimizer.

Thesis footnote 3 / App. A.1: adaptive optimizers are SGD (with momentum) applied to
``P g``; for Adam ``P = E[g_mb^2]^(-1/2)``, which Adam estimates by its bias-corrected
second moment ``nu_hat`` (plus ``eps``).  This module turns an optax state into that
diagonal, with two rules that make it trustworthy for any optimizer setting and from the
first steps on:

**Hyper-parameters are read, never defaulted.**  ``P`` depends on hyper-parameters that
optax does not keep in its states (Adam's ``b2``, ``eps``, ``eps_root``; RMSProp's
``eps_in_sqrt``...).  They are taken, in this order, from explicit arguments, from an
``optax.inject_hyperparams`` state, or from the optimizer itself (the optax
transformation that made the state: the values its update function was built with).
If a value cannot be found, :func:`preconditioner` raises a ``ValueError`` that names it
(``optax.adamw(b2=0.9, eps=1e-2)`` read with optax's defaults would give a ``P`` about
10x off).

**Coordinates whose second moment is still exactly zero are excluded (``P_i = 0``).**
``nu_i == 0`` after ``t >= 1`` updates means that every gradient of coordinate ``i`` seen
so far was exactly 0 (a weight on an input feature that has been 0 in every example drawn,
e.g. an MNIST border pixel, or a unit that has always been inactive).  Then:

* if the coordinate's gradient is identically 0 (a dead input), it contributes 0 to both
  ``|Pg|^2`` and ``tr(P Sigma P^T)`` whatever finite ``P_i`` is, so ``P_i = 0`` changes
  nothing;
* if it is merely *rare* (non-zero in a few examples not drawn yet), Adam has no estimate of
  ``E[g_i^2]`` at all: the thesis's ``P_i = E[g_mb,i^2]^(-1/2)`` (App. A.1) is unknown,
  and the formula's ``1/(sqrt(0) + eps) = 1/eps`` (``1e8`` for optax's default) is not a
  pre-conditioner the optimizer ever applies to a non-zero gradient (its update divides by
  the second moment *including* the current gradient, so a first non-zero gradient is
  scaled by about ``sqrt((1 - b2^t)/(1 - b2)) / |g_i|``, not by ``1/eps``).  One micro-batch
  containing such an example would contribute ``(g_i/eps)^2`` to the statistics, ``1e16``
  times a typical coordinate, and dominate a moving average for hundreds of steps.
  Excluding the coordinate until its second moment is informed (the step after its first
  non-zero gradient, when Adam's ``nu_hat_i`` is a real estimate of ``E[g_i^2]``) gives the
  PGNS of the coordinates the optimizer actually pre-conditions.

optax's own AdaGrad uses the same rule (``rsqrt`` only where the accumulated sum is
positive, 0 elsewhere).  Bias correction of ``nu`` does not help here: it rescales all
coordinates by the same ``1/(1 - b2^t)``, and ``phi`` is invariant under ``P -> cP``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Mapping

import jax
import jax.numpy as jnp
import optax

PyTree = Any

# Wrapper states of other scarjax modules (``_transforms.with_pgns``): type -> field holding the
# wrapped optimizer's state; and scarjax states that hold no pre-conditioner.  Filled in
# by :mod:`scarjax.pollux._transforms` (which imports this module) to avoid a circular import.
LOOK_THROUGH: dict[type, str] = {}
SKIP: list[type] = []


#: State classes optax does not export under a public name, found as the type of the state
#: the public transformation builds (on an empty tree).
_UNEXPORTED = {
    "ScaleByRmsWithCountState": lambda: optax.scale_by_rms(bias_correction=True),
    "ScaleByRStdDevWithCountState": lambda: optax.scale_by_stddev(bias_correction=True),
}


def _optax_types(*names: str) -> tuple[type, ...]:
    out = []
    for n in names:
        t = getattr(optax, n, None)
        if t is None and n in _UNEXPORTED:
            try:
                # traced abstractly (eval_shape): importing scarjax must not start JAX's backend, or
                # jax.distributed.initialize fails in processes that import it first
                t = type(jax.eval_shape(_UNEXPORTED[n]().init, {}))
            except TypeError:  # pragma: no cover - an optax without the bias_correction option
                t = None
            t = t if t is not None and t.__name__ == n else None
        if isinstance(t, type):
            out.append(t)
    return tuple(out)


_IDENTITY_STATES = _optax_types(
    "EmptyState",
    "TraceState",
    "ScaleByScheduleState",
    "ScaleState",
    "AddDecayedWeightsState",
    "ClipState",
    "ClipByGlobalNormState",
    "AddNoiseState",
    "EmaState",
    "ZeroNansState",
    "NonNegativeParamsState",
    "MonitorState",
    "SnapshotState",
    "AdaptiveGradClipState",
)
_NOT_DERIVABLE = _optax_types(
    "ScaleByLionState",
    "FactoredState",
    "ScaleBySM3State",
    "ScaleByNovogradState",
    "ScaleByAdanState",
    "ScaleByTrustRatioState",
    "ScaleByRpropState",
    "ScaleByLBFGSState",
    "ScaleByAdaDeltaState",
    "ScaleByBacktrackingLinesearchState",
    "ScaleByZoomLinesearchState",
    "ScaleByDistanceOverGradientsState",
    "ScaleByOptimisticGradientState",
)
_PARTIAL = _optax_types("MaskedState", "MultiTransformState", "PartitionState")

_ADAM = _optax_types("ScaleByAdamState")
_AMSGRAD = _optax_types("ScaleByAmsgradState")
_BELIEF = _optax_types("ScaleByBeliefState")
_RSS = _optax_types("ScaleByRssState")
_RMS = _optax_types("ScaleByRmsState", "ScaleByRmsWithCountState")
_RSTD = _optax_types("ScaleByRStdDevState", "ScaleByRStdDevWithCountState")
_DIAG = _ADAM + _AMSGRAD + _BELIEF + _RSS + _RMS + _RSTD

# optax factory (whose ``update_fn`` closes over the hyper-parameters) -> its states.
_FACTORIES = {
    "scale_by_adam": _ADAM,
    "scale_by_amsgrad": _AMSGRAD,
    "scale_by_belief": _BELIEF,
    "scale_by_rss": _RSS,
    "scale_by_rms": _RMS,
    "scale_by_stddev": _RSTD,
}
HYPERPARAMS = ("b2", "eps", "eps_root", "decay", "eps_in_sqrt")


def _needed(state) -> tuple[str, ...]:
    """The hyper-parameters the ``P`` of this state depends on (optax 0.2 update rules)."""
    if isinstance(state, _ADAM):
        return ("b2", "eps", "eps_root")
    if isinstance(state, _AMSGRAD):  # nu_max is stored bias-corrected already
        return ("eps", "eps_root")
    if isinstance(state, _BELIEF):
        return ("b2", "eps", "eps_root")
    if isinstance(state, _RSS):
        return ("eps",)
    with_count = "count" in state._fields
    return ("eps", "eps_in_sqrt") + (("decay",) if with_count else ())


# ---------------------------------------------------------------- reading an optimizer


def _closure(fn) -> dict:
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
        try:
            out[name] = cell.cell_contents
        except ValueError:  # an empty cell
            pass
    return out


def _walk(obj, found: list, seen: set, depth: int = 0) -> None:
    """Collect ``(state types | None, {hyper-parameter: value})`` from an optax optimizer.

    Follows closures, tuples/dicts, ``functools.partial``, bound methods and optax objects
    (``MultiSteps``) down to the ``update_fn`` of the optax factories in ``_FACTORIES``.
    ``inject_hyperparams`` keeps its non-numeric arguments (``eps_in_sqrt``...) in a dict
    ``other_hps`` of its closure; they are recorded with state type ``None`` (any).
    """
    if depth > 24 or id(obj) in seen or obj is None or isinstance(obj, (str, bytes, int, float, bool)):
        return
    seen.add(id(obj))
    if isinstance(obj, (tuple, list)):
        for x in obj:
            _walk(x, found, seen, depth + 1)
    elif isinstance(obj, dict):
        for x in obj.values():
            _walk(x, found, seen, depth + 1)
    elif isinstance(obj, functools.partial):
        _walk((obj.func, obj.args, obj.keywords), found, seen, depth + 1)
    elif inspect.ismethod(obj):
        _walk((obj.__func__, obj.__self__), found, seen, depth + 1)
    elif inspect.isfunction(obj):
        cl = _closure(obj)
        owner = obj.__qualname__.split(".<locals>.")[0]
        if (
            obj.__module__.startswith("optax")
            and obj.__qualname__.endswith(".<locals>.update_fn")
            and owner in _FACTORIES
        ):
            found.append((_FACTORIES[owner], {k: cl[k] for k in HYPERPARAMS if k in cl}))
        if "inner_factory" in cl and isinstance(cl.get("other_hps"), dict):
            found.append((None, {k: v for k, v in cl["other_hps"].items() if k in HYPERPARAMS}))
        for x in cl.values():
            _walk(x, found, seen, depth + 1)
    elif type(obj).__module__.startswith("optax") and hasattr(obj, "__dict__"):
        _walk(vars(obj), found, seen, depth + 1)


def optimizer_hyperparams(optimizer) -> list[tuple[tuple[type, ...] | None, dict]]:
    """The pre-conditioning hyper-parameters an optax optimizer was built with.

    Returns one ``(state types, {name: value})`` per pre-conditioning component found
    (``state types`` is ``None`` for values that ``inject_hyperparams`` keeps outside its
    state).  Empty for optimizers without one (SGD) or that cannot be read.
    """
    if optimizer is None:
        return []
    if not callable(getattr(optimizer, "update", None)):
        raise TypeError(
            f"optimizer must be an optax GradientTransformation (the one that made opt_state), "
            f"got {type(optimizer).__name__}"
        )
    found: list = []
    _walk(optimizer, found, set())
    return found


def _same(a, b) -> bool:
    try:
        return bool(jnp.all(jnp.asarray(a) == jnp.asarray(b)))
    except Exception:  # noqa: BLE001  (traced values: cannot compare, treat as different)
        return a is b


def _resolve(state, path: str, injected: dict, explicit: dict, read: list) -> dict:
    """Hyper-parameters of one diagonal state: explicit > inject_hyperparams > optimizer."""
    out = {}
    missing = []
    for name in _needed(state):
        if name in explicit:
            out[name] = explicit[name]
        elif name in injected:
            out[name] = injected[name]
        else:
            cands = [hp[name] for types, hp in read if name in hp and (types is None or isinstance(state, types))]
            if not cands:
                missing.append(name)
                continue
            if any(not _same(c, cands[0]) for c in cands[1:]):
                raise ValueError(
                    f"optimizer holds {len(cands)} different values of {name} for "
                    f"{type(state).__name__} at opt_state{path}: {cands}; pass {name}= explicitly"
                )
            out[name] = cands[0]
    if missing:
        names = ", ".join(missing)
        raise ValueError(
            f"cannot read {names} of {type(state).__name__} at opt_state{path}: optax does not keep "
            f"them in the state, and P depends on them (Eq 3.2). Pass optimizer= (the optax "
            f"optimizer that made this state, e.g. optax.adamw(1e-3, b2=0.9, eps=1e-2)), or "
            f"hyperparams={{{', '.join(repr(m) + ': ...' for m in missing)}}}, or build the "
            "optimizer with optax.inject_hyperparams"
        )
    return out


# ----------------------------------------------------------------------- the diagonal


def _bias_corr(count, decay):
    """``1 - decay**count``, with 1 where ``count == 0`` (no update seen yet)."""
    c = jnp.asarray(count, jnp.float32)
    return jnp.where(c > 0, 1.0 - jnp.asarray(decay, jnp.float32) ** c, 1.0)


def _with_count(count, p_tree):
    """Before the first update the second moments are empty: use ``P = I``."""
    started = jnp.asarray(count) > 0
    return jax.tree.map(lambda p: jnp.where(started, p, jnp.ones_like(p)), p_tree)


def _informed(n, p):
    """``P`` where the second moment is informed (``> 0``), 0 where it is still exactly 0."""
    return jnp.where(n > 0, p, jnp.zeros_like(p))


def diag_from(state, hp: Mapping[str, Any]) -> PyTree:
    """The diagonal ``P`` of one optax state, mirroring optax 0.2's update rules.

    ``hp`` holds the hyper-parameters listed by ``_needed(state)``.  Coordinates whose
    second moment is still exactly 0 get ``P_i = 0`` (module docstring).
    """
    if isinstance(state, _ADAM):  # adam, adamw, nadam: m_hat / (sqrt(nu_hat + eps_root) + eps)
        bc = _bias_corr(state.count, hp["b2"])
        return _with_count(
            state.count,
            jax.tree.map(
                lambda n: _informed(n, 1.0 / (jnp.sqrt(n / bc + hp["eps_root"]) + hp["eps"])), state.nu
            ),
        )
    if isinstance(state, _AMSGRAD):
        return _with_count(
            state.count,
            jax.tree.map(
                lambda n: _informed(n, 1.0 / (jnp.sqrt(n + hp["eps_root"]) + hp["eps"])), state.nu_max
            ),
        )
    if isinstance(state, _BELIEF):  # adabelief: nu accumulates eps_root every step
        bc = _bias_corr(state.count, hp["b2"])
        # nu of a coordinate whose prediction error has always been 0 (sum of eps_root * b2^j);
        # such a coordinate is uninformed like nu == 0 for Adam.
        floor = jnp.asarray(hp["eps_root"], jnp.float32) * (bc / (1.0 - jnp.asarray(hp["b2"], jnp.float32)))
        return _with_count(
            state.count,
            jax.tree.map(
                lambda n: jnp.where(n > floor * (1 + 1e-3), 1.0 / (jnp.sqrt(n / bc) + hp["eps"]), 0.0),
                state.nu,
            ),
        )
    if isinstance(state, _RSS):  # adagrad (optax already uses 0 where the sum is 0)
        return jax.tree.map(lambda t: jnp.where(t > 0, jax.lax.rsqrt(t + hp["eps"]), 0.0), state.sum_of_squares)
    if isinstance(state, _RMS + _RSTD):  # rmsprop, centred rmsprop
        bc = _bias_corr(state.count, hp["decay"]) if "count" in state._fields else 1.0
        mu = state.mu if isinstance(state, _RSTD) else jax.tree.map(jnp.zeros_like, state.nu)

        def one(m, n):
            v = n / bc - jnp.square(m / bc)
            p = jax.lax.rsqrt(v + hp["eps"]) if hp["eps_in_sqrt"] else 1.0 / (jnp.sqrt(v) + hp["eps"])
            return _informed(n, p)

        p = jax.tree.map(one, mu, state.nu)
        if "count" in state._fields:
            return _with_count(state.count, p)
        # No step count: before the first non-zero gradient (all of nu still 0) use P = I.
        started = jnp.any(jnp.stack([jnp.any(n > 0) for n in jax.tree.leaves(state.nu)]))
        return _with_count(started.astype(jnp.int32), p)
    raise AssertionError(type(state))


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "_fields")


def collect(state, hyper: dict, found: list, path: str = "") -> None:
    """Find the diagonal pre-conditioning states: ``(path, state, injected hyper-params)``."""
    inj = _optax_types("InjectHyperparamsState", "InjectStatefulHyperparamsState")
    look = next((f for t, f in LOOK_THROUGH.items() if isinstance(state, t)), None)
    if look is not None:
        collect(getattr(state, look), hyper, found, f"{path}.{look}")
    elif SKIP and isinstance(state, tuple(SKIP)):
        return
    elif inj and isinstance(state, inj):
        hp = dict(hyper)
        hp.update(dict(state.hyperparams.items()))
        collect(state.inner_state, hp, found, path + ".inner_state")
    elif isinstance(state, _optax_types("MultiStepsState")):
        collect(state.inner_opt_state, hyper, found, path + ".inner_opt_state")
    elif isinstance(
        state, _optax_types("ApplyIfFiniteState", "ConditionallyTransformState", "ConditionallyMaskState")
    ):
        collect(state.inner_state, hyper, found, path + ".inner_state")
    elif isinstance(state, _optax_types("LookaheadState")):
        collect(state.fast_state, hyper, found, path + ".fast_state")
    elif isinstance(state, _DIAG):
        found.append((path, state, hyper))
    elif isinstance(state, _IDENTITY_STATES):
        return
    elif isinstance(state, _NOT_DERIVABLE):
        raise ValueError(
            f"cannot derive a diagonal pre-conditioner P from optimizer state {type(state).__name__} "
            f"at opt_state{path}: this optimizer is not pre-conditioned SGD (App. A.1). Pass "
            "preconditioner='identity' to use the plain gradient noise scale, or a callable "
            "(inner_state, params) -> P"
        )
    elif isinstance(state, _PARTIAL):
        inner: list = []
        collect(
            tuple(x for x in state if _is_namedtuple(x) or isinstance(x, (tuple, list, dict))),
            hyper,
            inner,
            path,
        )
        if not inner:
            return  # nothing pre-conditioned inside the mask/partition
        raise ValueError(
            f"cannot derive a pre-conditioner through {type(state).__name__} at opt_state{path} "
            "(it applies different transforms to different parameters); pass an explicit "
            "preconditioner callable"
        )
    elif _is_namedtuple(state):
        if any(hasattr(leaf, "shape") and getattr(leaf, "ndim", 0) > 0 for leaf in jax.tree.leaves(state)):
            raise ValueError(
                f"unknown optimizer state {type(state).__name__} at opt_state{path} holds per-parameter "
                "arrays, so its pre-conditioner cannot be derived; pass preconditioner='identity' or a "
                "callable (inner_state, params) -> P"
            )
    elif isinstance(state, (tuple, list)):
        for i, s in enumerate(state):
            collect(s, hyper, found, f"{path}[{i}]")
    elif isinstance(state, dict):
        for k, s in state.items():
            collect(s, hyper, found, f"{path}[{k!r}]")
    elif state is None:
        return
    else:
        raise TypeError(f"opt_state{path} is not an optax state (got {type(state).__name__})")


def check_explicit(hyperparams, eps, b2) -> dict:
    explicit = {}
    if hyperparams is not None:
        if not isinstance(hyperparams, Mapping):
            raise TypeError(f"hyperparams must be a mapping name -> value, got {type(hyperparams).__name__}")
        unknown = sorted(set(hyperparams) - set(HYPERPARAMS))
        if unknown:
            raise ValueError(f"hyperparams has unknown names {unknown}; known: {list(HYPERPARAMS)}")
        explicit.update(hyperparams)
    if eps is not None:
        explicit["eps"] = eps
    if b2 is not None:
        explicit["b2"] = b2
    return explicit


def preconditioner(
    opt_state,
    optimizer: optax.GradientTransformation | None = None,
    *,
    hyperparams: Mapping[str, Any] | None = None,
    eps: float | None = None,
    b2: float | None = None,
) -> PyTree | None:
    """The diagonal pre-conditioner ``P`` of Eq 3.2, read from an optax optimizer's state.

    Footnote 3 / App. A.1: adaptive optimizers are SGD (with momentum) applied to
    ``P g``.  Supported, mirroring optax's update rules:

    ==========================  ===================================================
    optimizer (optax state)     ``P``
    ==========================  ===================================================
    sgd, sgd+momentum (Trace)   ``None`` (identity: momentum does not precondition)
    adam / adamw / nadam        ``1 / (sqrt(nu / (1 - b2^t) + eps_root) + eps)``
    amsgrad                     ``1 / (sqrt(nu_max + eps_root) + eps)``
    adabelief                   ``1 / (sqrt(s / (1 - b2^t)) + eps)``
    adagrad (ScaleByRss)        ``rsqrt(sum g^2 + eps)``
    rmsprop (ScaleByRms)        ``rsqrt(nu + eps)``; centred: ``rsqrt(nu - mu^2 + eps)``
                                (``1/(sqrt(.) + eps)`` with ``eps_in_sqrt=False``)
    ==========================  ===================================================

    ``P_i = 0`` where the second moment is still exactly 0: every gradient of that
    coordinate so far was 0, so the optimizer has no estimate of ``E[g_i^2]`` (App. A.1's
    ``P = E[g_mb^2]^(-1/2)``) and ``1/eps`` would dominate the statistics the first time a
    rare input is drawn (see the module docstring of ``scarjax/pollux/_precond.py``).  Before the first update
    (``count == 0``) Adam-type states give ``P = I``.

    Hyper-parameters (``b2``, ``eps``, ``eps_root``; ``decay``, ``eps_in_sqrt`` for
    RMSProp) are taken from ``hyperparams``/``eps``/``b2`` if given, else from an
    ``optax.inject_hyperparams`` state, else read from ``optimizer``; never defaulted.

    Args:
      opt_state: an optax state (chains, ``inject_hyperparams``, ``MultiSteps``,
        ``apply_if_finite``, lookahead and :func:`~scarjax.pollux.with_pgns` are looked
        through).
      optimizer: the optax ``GradientTransformation`` that made ``opt_state`` (or a
        :func:`~scarjax.pollux.with_pgns` wrapping it); its hyper-parameters are read
        from it.
      hyperparams: explicit values, e.g. ``{"b2": 0.9, "eps": 1e-2, "eps_root": 0.0}``.
      eps, b2: shortcuts for ``hyperparams``.

    Returns:
      A pytree with the structure of params, or ``None`` (identity) if the state
      has no pre-conditioning component.

    Only *stateful* components can be seen: stateless per-layer rescalings (the
    trust ratio of LAMB/LARS, gradient clipping) are not part of ``P``.

    Raises:
      ValueError: when a hyper-parameter ``P`` depends on cannot be found (naming it);
        for optimizers whose update is not a fixed diagonal pre-conditioning of the
        gradient (lion, adafactor, SM3, novograd, LAMB/LARS trust ratios, L-BFGS, ...),
        for masked/partitioned optimizers, for unknown states holding per-parameter
        arrays, and when two pre-conditioners are found.
    """
    explicit = check_explicit(hyperparams, eps, b2)
    return derive(opt_state, explicit, optimizer_hyperparams(optimizer))


def derive(opt_state, explicit: dict, read: list) -> PyTree | None:
    """:func:`preconditioner` with the explicit values checked and the optimizer read
    (``read`` from :func:`optimizer_hyperparams`, once, outside ``jit``)."""
    found: list = []
    collect(opt_state, {}, found, "")
    if not found:
        return None
    if len(found) > 1:
        where = ", ".join(f"{type(s).__name__} at opt_state{p}" for p, s, _ in found)
        raise ValueError(
            f"ambiguous pre-conditioner: found {len(found)} ({where}); "
            "pass an explicit preconditioner callable"
        )
    path, state, injected = found[0]
    return diag_from(state, _resolve(state, path, injected, explicit, read))
