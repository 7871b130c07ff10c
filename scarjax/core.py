"""The algorithm abstraction and the perturbed training loop.

An :class:`Algorithm` is an iterative-convergent procedure in parameter-server form
(thesis Eq 2.2–2.3): the workers *read* the parameters, compute an update ``Δ`` from what
they read and their data, and the servers apply ``w ← w + Δ``. :func:`run` iterates it
under ``lax.scan`` while perturbation hooks (:mod:`scarjax.hooks`) corrupt what is read,
what is computed and what is stored. This is the perturbed scheme of thesis Eq 5.2,

    y⁽ᵏ⁺¹⁾ = f(y⁽ᵏ⁾ + δₖ),

and the :class:`Trace` records ‖δₖ‖ at every injection point so that the rework-cost
bounds of :mod:`scarjax.bounds` (Thm 5.3.1) can be evaluated on the very run they bound.

Order of one iteration ``k`` (the stored state entering it is ``y⁽ᵏ⁾``):

1. ``write`` hooks act on the stored state (faults, recovery, reduced-precision storage,
   generic δ); their change to the parameters is ``δₖ`` of Eq 5.2 (index ``k``).
2. ``read`` hooks produce the ``view`` the workers see (staleness, low-precision
   communication). The parameters themselves are untouched.
3. ``algorithm.update(view, state, data, key)`` computes ``Δ`` and the new auxiliary state.
4. ``update`` hooks act on ``Δ`` (quantised gradients, lost or partial contributions);
   their change lands on ``y⁽ᵏ⁺¹⁾`` (index ``k+1``).
5. ``y⁽ᵏ⁺¹⁾ = y⁽ᵏ⁾ + δₖ + Δ``; loss and distance to ``w*`` are recorded.

Worker mode (:mod:`scarjax.perturb.workers`), ``run(..., workers=M)``: the algorithm
provides the worker/server split (``grad``, ``apply``, ``shard``); step 2 produces one view
per worker (stacked ``[M, …]``; read hooks act on the stack), then the ``'progress'`` hooks
set the fraction of its points each worker finishes (``[M]``, ones unless revoked), step 3
``vmap``-s ``grad`` over the workers (each with its own view and data shard), merges the
messages weighted by the points each worker processed (Sync-on-the-fly Eq 5) and calls
``apply`` once (thesis Example 5.2.2). Hooks built for ``M`` workers (``hook.workers``:
stale reads, revocations) require this mode with the same ``M``; ``run(alg, None, T, key,
workers=M)`` is synchronous data-parallel training, their reference run. With
``workers=None`` (the default) the loop is exactly as above.

Layers: :func:`prepare` validates a call and :func:`run_one` is one un-jitted run;
:func:`run` jits ``run_one`` and :func:`scarjax.trials.run_trials` vmaps it over a device mesh.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.choices import RECOVERIES, STRATEGIES
from scarjax import numerics
from scarjax import tree as tu
from scarjax.perturb import workers as wk
from scarjax.hooks import PARAM_POINTS, POINTS, Context, Hook, flatten_hooks

PyTree = Any
Params = PyTree

__all__ = ["State", "Algorithm", "Trace", "Prepared", "prepare", "run_one", "run", "as_key", "check_algorithm",
           "check_initial", "precision_scope"]


class State(NamedTuple):
    """The state an algorithm keeps on the parameter servers.

    Attributes:
      params: the model parameters ``w`` (any pytree of arrays). Perturbations and
        distances are measured on these.
      aux: everything else that travels with the parameters: optimizer moments, topic
        assignments, counters. Fault hooks may corrupt it together with the parameters
        (optimizer state is co-located with its parameter, thesis Sec 5.5.1).
    """

    params: Params
    aux: PyTree = ()


@dataclasses.dataclass(frozen=True, eq=False)
class Algorithm:
    """An iterative-convergent algorithm in parameter-server form (thesis Eq 2.2–2.3).

    The callables are static (they define the program); ``data`` and ``optimum`` are
    pytrees of arrays that travel as arguments of the compiled program, so a large data
    set is never baked into it as a constant and one compilation serves many data sets
    of the same shape.

    Attributes:
      init: ``init(key, data) -> State``.
      update: ``update(view, state, data, key) -> (delta, aux_state)`` where ``view`` is
        the parameters the workers read, ``delta`` has the structure of ``state.params``
        and ``aux_state`` is a :class:`State` whose ``aux`` is kept (its ``params`` are
        ignored: the loop sets ``params ← params + delta``).
      loss: ``loss(state, data) -> scalar``, the convergence criterion.
      norm: the norm in which perturbations and distances are measured (ℓ2 by default;
        LDA uses a length-scaled total variation, thesis Sec 5.5.1).
      data: pytree of arrays passed to ``init``, ``update`` and ``loss``.
      optimum: ``w*`` when known (same structure as ``params``), else ``None``.
      name: a label for traces and figures.
      grad: optional worker part for data-parallel worker mode (``run(..., workers=M)``,
        :mod:`scarjax.perturb.workers`):
        ``grad(view, state, shard, key, progress) -> (message, count)``, the message one
        worker computes from its view and data shard having processed a fraction
        ``progress`` of its points, and the number of points it processed.
      apply: optional server part: ``apply(message, state, data, key) -> (delta,
        aux_state)`` applied to the merged message.
      shard: optional ``shard(data, M) -> shards`` (leaves with a leading axis ``M``);
        ``None`` gives every worker all of ``data``.
      precision: the precision of the algorithm's float32 matrix products in a run, a
        ``jax_default_matmul_precision`` value (``'highest'``: full float32 on every
        backend); ``None`` (default): the setting in effect where the run is made (TF32
        on a GPU, one-pass bfloat16 on a TPU, float32 on CPU). :func:`run` traces the
        algorithm under it and records it in :attr:`Trace.matmul_eps`, so the rounding
        floor that :mod:`scarjax.rework` measures is that precision's. The theory's
        reference problems (:mod:`scarjax.models.quadratic`) use ``'highest'``; for a
        rework measurement of your own model on a GPU or TPU,
        ``alg.replace(precision='highest')``.
    """

    init: Callable[[jax.Array, PyTree], State]
    update: Callable[[Params, State, PyTree, jax.Array], tuple[Params, State]]
    loss: Callable[[State, PyTree], jax.Array]
    norm: Callable[[PyTree], jax.Array] = tu.l2_norm
    data: PyTree = None
    optimum: Params | None = None
    name: str = "algorithm"
    grad: Callable[..., tuple[PyTree, jax.Array]] | None = None
    apply: Callable[[PyTree, State, PyTree, jax.Array], tuple[Params, State]] | None = None
    shard: Callable[[PyTree, int], PyTree] | None = None
    precision: str | None = None

    def __post_init__(self):
        # Only the static fields are checked here: ``data`` and ``optimum`` are leaves that
        # JAX replaces by tracers or placeholders when it unflattens the pytree. The
        # optimum is checked against the parameters when a run is traced (``run``).
        for nm in ("init", "update", "loss", "norm"):
            va.check_callable(nm, getattr(self, nm))
        for nm in ("grad", "apply", "shard"):
            if getattr(self, nm) is not None:
                va.check_callable(nm, getattr(self, nm))
        va.check_str("name", self.name)
        if self.precision is not None:
            numerics.check_setting("precision", self.precision)

    @property
    def has_workers(self) -> bool:
        """Whether the algorithm supports worker mode (has ``grad`` and ``apply``)."""
        return self.grad is not None and self.apply is not None

    def replace(self, **changes: Any) -> "Algorithm":
        """A copy with some fields changed (e.g. ``alg.replace(optimum=w_star)``)."""
        return dataclasses.replace(self, **changes)

    def distance(self, params: Params) -> jax.Array:
        """``‖params − w*‖`` in the algorithm's norm (requires ``optimum``)."""
        if self.optimum is None:
            raise ValueError(f"algorithm {self.name!r} has no known optimum")
        va.check_tree_like("optimum", self.optimum, params, "the parameters")
        return self.norm(tu.tree_sub(params, self.optimum))


jax.tree_util.register_dataclass(
    Algorithm,
    data_fields=["data", "optimum"],
    meta_fields=["init", "update", "loss", "norm", "name", "grad", "apply", "shard", "precision"],
)


class Trace(NamedTuple):
    """Per-iteration record of a run (a pytree; under :func:`run_trials` every leaf gains a
    leading trial axis).

    Attributes:
      loss: ``[steps + 1]``: ``loss(y⁽ᵏ⁾)`` for ``k = 0 … steps``.
      distance: ``[steps + 1]``: ``‖y⁽ᵏ⁾ − w*‖`` when the optimum is known, else ``None``.
      delta: ``{hook name: [steps]}``: the norm of the change each hook made to the
        parameters at step ``k`` (summed over its points; ``0`` for a ``'progress'`` hook).
      point_delta: ``{point: [steps]}``: the norm of the combined change at each injection
        point (``'read'``, ``'update'``, ``'write'``) at step ``k``.
      read_effect: ``[steps]``: ``‖Δ(view) − Δ(y⁽ᵏ⁾)‖``, the effective perturbation of the
        read hooks on ``y⁽ᵏ⁺¹⁾`` (thesis Example 5.2.2); only when requested, else ``None``.
      initial_distance: scalar ``‖w⁽⁰⁾ − w*‖`` (``None`` without an optimum).
      points: ``[steps]``: in worker mode, the number of points merged at each barrier
        (Sync-on-the-fly Eq 5); ``None`` otherwise.
      matmul_eps: scalar: machine epsilon of the float32 matrix products in effect when
        the run was traced (:func:`scarjax.numerics.matmul_precision`: ``2⁻²³`` on CPU or
        with ``'highest'``, ``2⁻¹⁰`` for a GPU's default TF32, ``2⁻⁷`` for a TPU's one-pass
        bfloat16); the rounding floor that :mod:`scarjax.rework` refuses to measure below
        is that precision's. ``None`` for a trace built by hand (float32 assumed).
      optimum_norm: scalar ``‖w*‖`` in the algorithm's norm (``None`` without an optimum):
        the scale of that floor (iterates cannot get closer to ``w*`` than
        ``~eps · ‖w*‖``).

    In worker mode ``point_delta['read']`` and the read hooks' ``delta`` are RMS over the
    workers' views, and ``read_effect`` is ``‖Δ − Δ_sync‖`` where ``Δ_sync`` is the
    synchronous update (fresh views, every worker finishing): the perturbation of Example
    5.2.2, including lost or partial contributions of revoked workers.
    """

    loss: jax.Array
    distance: jax.Array | None
    delta: dict[str, jax.Array]
    point_delta: dict[str, jax.Array]
    read_effect: jax.Array | None = None
    initial_distance: jax.Array | None = None
    points: jax.Array | None = None
    matmul_eps: jax.Array | None = None
    optimum_norm: jax.Array | None = None

    @property
    def steps(self) -> int:
        return self.loss.shape[-1] - 1

    def perturbation_norms(self) -> jax.Array:
        """``[..., steps + 1]``: ‖δ_ℓ‖ as the iterate sees it, indexed by ℓ of Eq 5.2.

        Write-point changes at step ``k`` perturb ``y⁽ᵏ⁾`` (index ``k``); update-point
        changes and the measured read effect perturb ``y⁽ᵏ⁺¹⁾`` (index ``k + 1``). Norms at
        one index are added (triangle inequality), so the result is an upper bound on the
        norm of the combined perturbation and is what :func:`scarjax.bounds.delta_T` sums.
        """
        w = self.point_delta["write"]
        u = self.point_delta["update"]
        if self.read_effect is not None:
            u = u + self.read_effect
        zero = jnp.zeros_like(w[..., :1])
        return jnp.concatenate([w, zero], -1) + jnp.concatenate([zero, u], -1)


# --------------------------------------------------------------------------------------
# The loop.


def _unique_names(hooks: Sequence[Hook]) -> tuple[str, ...]:
    names, seen = [], {}
    for h in hooks:
        n = seen.get(h.name, 0)
        seen[h.name] = n + 1
        names.append(h.name if n == 0 else f"{h.name}_{n}")
    return tuple(names)


def _run_impl(
    algorithm: Algorithm,
    key: jax.Array,
    init_state: State | None,
    hooks: tuple[Hook, ...],
    steps: int,
    measure_read_effect: bool,
    workers: int | None = None,
) -> tuple[State, Trace]:
    data = algorithm.data
    _check_events(hooks, steps)
    _check_worker_mode(algorithm, hooks, workers)
    k_init, k_hooks, k_loop = jax.random.split(key, 3)
    if init_state is None:
        state = State(*algorithm.init(k_init, data))
    else:
        state = State(*init_state)
        _check_init_state(state, jax.eval_shape(lambda k: State(*algorithm.init(k, data)), k_init))
    if algorithm.optimum is not None:
        va.check_tree_like("optimum", algorithm.optimum, state.params,
                           f"the parameters of algorithm {algorithm.name!r}")
    names = _unique_names(hooks)
    hook_states = tuple(
        h.init(state, k) for h, k in zip(hooks, jax.random.split(k_hooks, max(len(hooks), 1)))
    )
    initial_params = state.params
    norm = algorithm.norm
    has_opt = algorithm.optimum is not None
    by_point = {p: [i for i, h in enumerate(hooks) if p in h.points] for p in POINTS}
    M = workers
    # In worker mode the effect is always measured when asked (the reference is the
    # synchronous barrier); in plain mode only read hooks can make one.
    need_effect = measure_read_effect and (M is not None or bool(by_point["read"]))

    def apply_point(point, value, get_params, hstates, ctx_base, keys, deltas, pnorm=norm):
        # Hooks at ``point`` in order, each with its own per-step key; the change each
        # makes to the parameters is added to its delta (a multi-point hook: over points).
        before_point = get_params(value)
        hstates = list(hstates)
        for i in by_point[point]:
            before = get_params(value)
            ctx = ctx_base._replace(key=keys[i], point=point)
            value, hstates[i] = hooks[i].apply(value, hstates[i], ctx)
            if point in PARAM_POINTS:
                d = pnorm(tu.tree_sub(get_params(value), before))
                deltas[names[i]] = deltas[names[i]] + d if names[i] in deltas else d
        # No hook here: no norm; its column of zeros is made once, after the loop.
        total = pnorm(tu.tree_sub(get_params(value), before_point)) if by_point[point] else None
        return value, tuple(hstates), total

    def step(carry, k):
        state, hstates = carry
        step_key = jax.random.fold_in(k_loop, k)
        k_alg, k_h = jax.random.split(step_key)
        # One key per hook (none without hooks: the algorithm's key is the same either way).
        keys = jax.random.split(k_h, len(hooks)) if hooks else ()
        ctx = Context(
            step=k, key=k_alg, state=state, initial_params=initial_params, algorithm=algorithm
        )
        deltas: dict[str, jax.Array] = {}
        # 1. write point: the stored state between iterations.
        state, hstates, d_write = apply_point(
            "write", state, lambda s: s.params, hstates, ctx, keys, deltas
        )
        ctx = ctx._replace(state=state)
        outputs = {}
        if M is None:
            # 2. read point: what the workers see.
            view, hstates, d_read = apply_point(
                "read", state.params, lambda p: p, hstates, ctx, keys, deltas
            )
            # 3. the algorithm's own update.
            delta, new_state = algorithm.update(view, state, data, k_alg)
            if need_effect:
                fresh, _ = algorithm.update(state.params, state, data, k_alg)
                outputs["read_effect"] = norm(tu.tree_sub(delta, fresh))
        else:
            delta, new_state, hstates, d_read = worker_compute(state, hstates, ctx, keys, deltas, k_alg, outputs)
        # 4. update point: the computed Δ.
        delta, hstates, d_update = apply_point(
            "update", delta, lambda d: d, hstates, ctx, keys, deltas
        )
        # 5. apply.
        params = tu.tree_add(state.params, delta)
        new_state = State(params, State(*new_state).aux)
        outputs["loss"] = algorithm.loss(new_state, data)
        if has_opt:
            outputs["distance"] = algorithm.distance(params)
        # A hook that changed no parameters ('progress' hooks) records 0.
        outputs["delta"] = {n: deltas.get(n, jnp.zeros((), jnp.float32)) for n in names}
        outputs["point_delta"] = {
            p: d for p, d in (("read", d_read), ("update", d_update), ("write", d_write)) if d is not None
        }
        return (new_state, hstates), outputs

    if M is not None:
        shards = None if algorithm.shard is None else algorithm.shard(data, M)
        shard_axis = None if shards is None else 0
        if shards is None:
            shards = data
        vgrad = jax.vmap(algorithm.grad, in_axes=(0, None, shard_axis, 0, 0))

        def server(views, state, progress, k_alg):
            # Workers compute on their views and shards; the barrier merges (Eq 5); the
            # server applies. A step where no worker processed anything is skipped.
            # The optimization barrier keeps XLA from specialising the workers' computation
            # on how the views were produced (a broadcast of fresh parameters or a read from
            # the ring buffer), so staleness 0 equals synchronous training bit for bit.
            k_work, k_apply = jax.random.split(k_alg)
            views = jax.lax.optimization_barrier(views)
            messages, counts = vgrad(views, state, shards, jax.random.split(k_work, M), progress)
            message, total = wk.merge(messages, counts)
            delta, new_state = algorithm.apply(message, state, data, k_apply)
            new_state = State(*new_state)
            ok = total > 0
            delta = jax.tree.map(lambda d: jnp.where(ok, d, jnp.zeros_like(d)), delta)
            aux = jax.tree.map(lambda a, b: jnp.where(ok, a, b), new_state.aux, state.aux)
            return delta, State(new_state.params, aux), total

        def worker_compute(state, hstates, ctx, keys, deltas, k_alg, outputs):
            # 2. read point: one view per worker, stacked.
            fresh = wk.broadcast(state.params, M)
            views, hstates, d_read = apply_point(
                "read", fresh, lambda p: p, hstates, ctx, keys, deltas, wk.worker_norm(norm)
            )
            # Progress of each worker before the barrier ('progress' hooks: revocations).
            progress, hstates, _ = apply_point(
                "progress", jnp.ones((M,), jnp.float32), lambda p: p, hstates, ctx, keys, deltas
            )
            # 3. workers, barrier, server.
            delta, new_state, total = server(views, state, progress, k_alg)
            outputs["points"] = total
            if need_effect:
                ref, _, _ = server(fresh, state, jnp.ones((M,), jnp.float32), k_alg)
                outputs["read_effect"] = norm(tu.tree_sub(delta, ref))
            return delta, new_state, hstates, d_read

    (final, _), out = jax.lax.scan(step, (state, hook_states), jnp.arange(steps))
    point_delta = {p: out["point_delta"].get(p, jnp.zeros((steps,), jnp.float32)) for p in ("read", "update", "write")}
    loss0 = algorithm.loss(state, data)
    loss = jnp.concatenate([loss0[None], out["loss"]])
    distance = initial_distance = optimum_norm = None
    if has_opt:
        initial_distance = algorithm.distance(initial_params)
        distance = jnp.concatenate([initial_distance[None], out["distance"]])
        optimum_norm = norm(algorithm.optimum)
    # The precision in effect while this program is traced (a jit cache entry per setting).
    matmul_eps = jnp.asarray(numerics.matmul_precision().eps, jnp.float32)
    trace = Trace(
        loss=loss,
        distance=distance,
        delta=out["delta"],
        point_delta=point_delta,
        read_effect=out.get("read_effect"),
        initial_distance=initial_distance,
        points=out.get("points"),
        matmul_eps=matmul_eps,
        optimum_norm=optimum_norm,
    )
    return final, trace


def _check_worker_mode(algorithm: Algorithm, hooks: tuple[Hook, ...], workers: int | None) -> None:
    """Hooks built for ``M`` workers need ``run(..., workers=M)``; worker mode needs the
    algorithm's worker/server split; ``'progress'`` hooks act in worker mode only."""
    for h in hooks:
        if h.workers is not None and h.workers != workers:
            how = "without workers" if workers is None else f"with workers={workers}"
            raise ValueError(
                f"hook {h.name!r} is built for workers={h.workers} but the run is {how}: pass "
                f"workers={h.workers} to scarjax.run / run_trials (worker mode), or build the hook "
                f"for workers={workers}"
            )
        if workers is None and "progress" in h.points:
            raise ValueError(
                f"hook {h.name!r} acts at the 'progress' point, which exists in worker mode only: "
                "pass workers=M to scarjax.run / run_trials"
            )
    if workers is not None and not algorithm.has_workers:
        raise ValueError(
            f"workers={workers} (worker mode) needs a worker/server split, but algorithm "
            f"{algorithm.name!r} has no grad and apply; build it with scarjax.from_optax or give "
            "it grad/apply (see scarjax.perturb.workers)"
        )


# --------------------------------------------------------------------------------------
# Validation at the API boundary (concrete values; shapes also at trace time).


def _check_events(hooks: tuple[Hook, ...], steps: int) -> None:
    """Refuse events a hook is scheduled for at or after the last iteration: the loop runs
    iterations ``0 … steps − 1``, so they would silently never happen
    (``hooks.scheduled(h, k)``, ``schedules.at(k)``, ``Failure(when=k)``; see
    :attr:`scarjax.hooks.Hook.events`)."""
    for h in hooks:
        for arg, k in h.events:
            if k >= steps:
                raise ValueError(
                    f"{arg}={k} (hook {h.name!r}) is not before the last iteration: steps={steps} "
                    f"runs iterations 0 ... {steps - 1}, so the event would never happen; "
                    f"schedule it before step {steps} or run more steps"
                )


def _check_init_state(state: State, expected: State) -> None:
    for part in ("params", "aux"):
        va.check_tree_like(f"init_state.{part}", getattr(state, part), getattr(expected, part),
                           f"algorithm.init(...).{part}")
    for (path, x), e in zip(jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(expected)):
        dx = jax.dtypes.canonicalize_dtype(jnp.result_type(x))
        de = jax.dtypes.canonicalize_dtype(e.dtype)
        if dx != de:
            raise ValueError(
                f"init_state{jax.tree_util.keystr(path)} has dtype {dx}, but algorithm.init gives {de}"
            )


def check_algorithm(algorithm: Any) -> None:
    """``TypeError`` unless ``algorithm`` is an :class:`Algorithm`; ``ValueError`` if its
    ``optimum`` is given and not finite."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    if algorithm.optimum is not None:
        va.check_finite_tree("optimum", algorithm.optimum)


_INIT_CHECKED: "weakref.WeakKeyDictionary[Algorithm, bool]" = weakref.WeakKeyDictionary()


def check_initial(algorithm: Algorithm, init_state: Any) -> None:
    """A NaN/inf initial state would run to an all-NaN trace: refuse it. A given
    ``init_state`` is checked as given; otherwise ``algorithm.init`` is evaluated once per
    algorithm object (eagerly, at a fixed key, outside the compiled loop) and its
    parameters checked."""
    if init_state is not None:
        if not (isinstance(init_state, (State, tuple, list)) and len(init_state) == 2):
            raise TypeError(
                f"init_state must be a scarjax.State(params, aux), got {type(init_state).__name__}"
            )
        # Only the parameters: optimizer state may hold inf by design (e.g. a best-so-far
        # loss initialised to inf).
        va.check_finite_tree("init_state.params", init_state[0])
        return
    if _INIT_CHECKED.get(algorithm):
        return
    state = State(*algorithm.init(jax.random.key(0), algorithm.data))
    try:
        va.check_finite_tree("initial state params", state.params)
    except ValueError as e:
        raise ValueError(
            f"algorithm {algorithm.name!r}: {e} (algorithm.init gives a non-finite initial "
            "state, so every iteration would be NaN; check init_params / the init function)"
        ) from None
    _INIT_CHECKED[algorithm] = True


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def as_key(key: Any, name: str = "key") -> jax.Array:
    """A single PRNG key from a key or an int seed (``TypeError``/``ValueError`` naming
    ``name``)."""
    if isinstance(key, jax.Array) and jnp.ndim(key) >= 1 and (
        jnp.issubdtype(key.dtype, jax.dtypes.prng_key) or key.ndim >= 2
    ):
        raise ValueError(f"{name} must be a single PRNG key, got shape {key.shape}; use run_trials for many")
    return va.check_key(name, key)


def _is_factory(hooks: Any) -> bool:
    return callable(hooks) and not isinstance(hooks, Hook)


def _choice_vocabulary(path: tuple, names: list[str]) -> tuple[str, ...]:
    """The names a string hook argument indexes: ``faults.RECOVERIES`` under a key
    ``'recovery'``, ``checkpoint.STRATEGIES`` under ``'strategy'``; elsewhere the one of
    them that contains every name and is not ambiguous."""
    where = f"hook_args{jax.tree_util.keystr(path)}"
    keys = [getattr(p, "key", getattr(p, "name", None)) for p in path]
    last = keys[-1] if keys else None
    vocabs = {"recovery": RECOVERIES, "strategy": STRATEGIES}
    if last in vocabs:
        vocab = vocabs[last]
        bad = sorted(set(names) - set(vocab))
        if bad:
            raise ValueError(f"{where} values must be among {vocab}, got {bad}")
        return vocab
    fits = [v for v in (RECOVERIES, STRATEGIES) if set(names) <= set(v)]
    if len(fits) == 1:
        return fits[0]
    if not fits:
        raise ValueError(
            f"{where}: strings must be recovery names {RECOVERIES} or checkpoint strategies "
            f"{STRATEGIES}, got {sorted(set(names))}"
        )
    raise ValueError(
        f"{where}: {sorted(set(names))} could be recoveries or checkpoint strategies; put "
        "them under a key 'recovery' or 'strategy' (e.g. hook_args={'recovery': [...]})"
    )


def _is_strings(x: Any) -> bool:
    if isinstance(x, str):
        return True
    if isinstance(x, (list, tuple)) and x and all(isinstance(e, str) for e in x):
        return True
    return isinstance(x, np.ndarray) and x.dtype.kind in "US"


def _prepare_hook_args(hook_args: PyTree, n: int | None) -> PyTree:
    """Check ``hook_args`` (numeric, finite, a leading trial axis of length ``n`` when
    ``n`` is given) and map names to indices: strings (``'partial'``/``'full'``, checkpoint
    strategies) become int32 indices into ``faults.RECOVERIES`` / ``checkpoint.STRATEGIES``,
    which ``faults.scar(recovery=...)`` and ``Checkpoint(strategy=...)`` accept traced."""

    def one(path, x):
        where = f"hook_args{jax.tree_util.keystr(path)}"
        if _is_strings(x):
            names = [x] if isinstance(x, str) else [str(e) for e in np.asarray(x).ravel().tolist()]
            vocab = _choice_vocabulary(path, names)
            shape = () if isinstance(x, str) else np.shape(x)
            x = np.asarray([vocab.index(nm) for nm in names], np.int32).reshape(shape)
        elif va.is_traced(x):
            pass
        else:
            if x is None or isinstance(x, (bytes,)) or not (
                isinstance(x, (bool, int, float, np.generic, np.ndarray, jax.Array))
            ):
                raise TypeError(f"{where} must be a number or an array, got {type(x).__name__} {x!r}")
            a = np.asarray(x)
            if a.dtype.kind not in "biuf":
                raise TypeError(f"{where} must be numeric, got dtype {a.dtype}")
            if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
                raise ValueError(f"{where} must be finite, got {int(np.sum(~np.isfinite(a)))} NaN/inf entries")
        if n is not None and np.shape(x)[:1] != (n,):
            raise ValueError(
                f"{where} needs a leading axis of length {n} (one entry per key), got shape {np.shape(x)}"
            )
        return x

    return jax.tree_util.tree_map_with_path(one, hook_args, is_leaf=_is_strings)


def _hook_spec(hooks: Any, hook_args: Any, n: int | None) -> tuple[Any, Any]:
    """``(spec, hook_args)``: a tuple of hooks, or the factory with its checked args."""
    if hook_args is None:
        if _is_factory(hooks):
            raise TypeError(
                "hooks is a function (a hook factory) but hook_args is None: pass "
                "hook_args=... (the factory's argument) or the hooks themselves"
            )
        return flatten_hooks(hooks), None
    if not _is_factory(hooks):
        raise TypeError(
            "with hook_args, hooks must be a function hook_args -> hooks (a hook factory), "
            f"got {type(hooks).__name__}"
        )
    return hooks, _prepare_hook_args(hook_args, n)


def _validate(algorithm: Any, steps: Any) -> int:
    check_algorithm(algorithm)
    return va.check_int("steps", steps, lo=1)


def _check_workers_arg(workers: Any) -> int | None:
    if workers is None:
        return None
    return va.check_int("workers", workers, lo=1)


class Prepared(NamedTuple):
    """A validated call of :func:`run` / :func:`run_trials` (see :func:`prepare`).

    Attributes:
      algorithm: the :class:`Algorithm`.
      spec: a tuple of (leaf) hooks, or a factory ``hook_args -> hooks``.
      hook_args: the checked factory argument (strings mapped to indices), or ``None``.
      init_state: the given initial state, or ``None``.
      static: ``(steps, measure_read_effect, workers)``, hashable (a static argument of
        the compiled program).
    """

    algorithm: Algorithm
    spec: Any
    hook_args: PyTree
    init_state: State | None
    static: tuple[int, bool, int | None]


def prepare(
    algorithm: Algorithm,
    hooks: Any,
    steps: int,
    hook_args: PyTree | None = None,
    n: int | None = None,
    init_state: State | None = None,
    *,
    measure_read_effect: bool = False,
    workers: int | None = None,
) -> Prepared:
    """Validate a call of :func:`run` (``n=None``) or of ``n`` trials (``hook_args`` then
    needs a leading axis of length ``n``): the algorithm, ``steps``, the hooks or hook
    factory and ``hook_args``, the initial state, the flags, and (for concrete hooks)
    that hooks built for ``M`` workers run with ``workers=M``. Errors are
    ``TypeError``/``ValueError`` naming the argument. The result's fields are the
    arguments of :func:`run_one`."""
    steps = _validate(algorithm, steps)
    spec, hook_args = _hook_spec(hooks, hook_args, n)
    measure = _check_flag("measure_read_effect", measure_read_effect)
    workers = _check_workers_arg(workers)
    check_initial(algorithm, init_state)
    if isinstance(spec, tuple):
        _check_events(spec, steps)
        _check_worker_mode(algorithm, spec, workers)
    elif workers is not None and not algorithm.has_workers:
        _check_worker_mode(algorithm, (), workers)
    return Prepared(algorithm, spec, hook_args, init_state, (steps, measure, workers))


def precision_scope(algorithm: Algorithm) -> contextlib.AbstractContextManager:
    """The context every loop traces ``algorithm`` under: its :attr:`Algorithm.precision`
    as ``jax.default_matmul_precision``, or nothing (the setting in effect) when ``None``."""
    if algorithm.precision is None:
        return contextlib.nullcontext()
    return jax.default_matmul_precision(algorithm.precision)


def run_one(
    algorithm: Algorithm,
    key: jax.Array,
    hook_args: PyTree,
    init_state: State | None,
    spec: Any,
    static: tuple[int, bool, int | None],
) -> tuple[State, Trace]:
    """One un-jitted run from a :class:`Prepared` call (what :func:`run` jits and
    :func:`run_trials` vmaps): the hooks are ``spec`` itself or ``spec(hook_args)``."""
    steps, measure, workers = static
    with precision_scope(algorithm):
        hooks = spec if isinstance(spec, tuple) else flatten_hooks(spec(hook_args))
        return _run_impl(algorithm, key, init_state, hooks, steps, measure, workers)


_run_jit = jax.jit(run_one, static_argnums=(4, 5))


def run(
    algorithm: Algorithm,
    hooks: Hook | Sequence[Hook] | Callable[[Any], Any] | None,
    steps: int,
    key: jax.Array | int,
    *,
    hook_args: PyTree | None = None,
    init_state: State | None = None,
    measure_read_effect: bool = False,
    workers: int | None = None,
) -> tuple[State, Trace]:
    """Run ``steps`` iterations of ``algorithm`` under ``hooks`` (thesis Eq 5.2).

    The whole run is one jit-compiled ``lax.scan``; the compiled program is cached per
    (algorithm callables, hooks, steps, workers), so repeated calls with new keys or new
    data of the same shape do not recompile. To vary a hook *parameter* (a perturbation
    size, a failure iteration, the recovery) without recompiling, give the hooks as a
    factory and the parameter as ``hook_args``: the factory is traced once per (factory,
    steps) and ``hook_args`` is an argument of the compiled program.

    Args:
      algorithm: the :class:`Algorithm` to iterate.
      hooks: a :class:`~scarjax.hooks.Hook` (a :func:`~scarjax.hooks.chain` is one), a
        sequence of hooks, or ``None`` for an unperturbed run; or, with ``hook_args``, a
        function ``hook_args -> hooks`` (reuse the same function object to reuse the
        program).
      steps: number of iterations ``T`` (static): iterations ``0 … T − 1`` run, and a hook
        scheduled at a concrete step ``>= T`` (``hooks.scheduled(h, k)``,
        ``schedules.at(k)``, a failure's time) is refused (it would silently never happen).
      key: a PRNG key (or an int seed); it determines initialisation, minibatches and
        every random perturbation, so the same key gives the same result.
      hook_args: the factory's argument (any pytree of numbers/arrays; traced). Strings
        are names: recoveries (``'partial'``/``'full'``, under a key ``'recovery'``) and
        checkpoint strategies (under ``'strategy'``) become int32 indices into
        :data:`scarjax.scar.faults.RECOVERIES` / :data:`scarjax.scar.checkpoint.STRATEGIES`, which
        ``faults.scar(recovery=...)`` / ``Checkpoint(strategy=...)`` accept.
      init_state: start from this state instead of ``algorithm.init(key)`` (same structure,
        shapes and dtypes; finite).
      measure_read_effect: also compute the unperturbed update each step to record
        ``‖Δ(view) − Δ(y)‖`` (Example 5.2.2); costs a second update.
      workers: ``M`` simulated data-parallel workers (worker mode, see the module
        docstring and :mod:`scarjax.perturb.workers`); ``None`` (default): the plain loop.
        Hooks built for ``M`` workers (``ssp``, ``revocations``) require ``workers=M``.

    Returns:
      ``(final_state, trace)``.

    Raises:
      TypeError / ValueError naming the argument: a non-positive or non-int ``steps``, a bad
      key, events scheduled at or after ``steps``, an ``optimum`` or ``init_state`` whose
      structure or shapes differ from the parameters', a non-finite initial state, hooks
      built for another worker count than ``workers``.

    Example:
      >>> import jax, scarjax
      >>> from scarjax import hooks
      >>> from scarjax.perturb import gaussian
      >>> from scarjax.models import quadratic
      >>> qp = quadratic.fig53_problem()
      >>> _, base = scarjax.run(qp, None, 200, jax.random.key(0))
      >>> _, pert = scarjax.run(qp, hooks.scheduled(gaussian(1.0), 100), 200, jax.random.key(0))
      >>> bool(pert.point_delta["write"][100] > 0)
      True
      >>> kick = lambda size: hooks.scheduled(gaussian(size), 100)
      >>> _, pert = scarjax.run(qp, kick, 200, 0, hook_args=0.5)  # compiled once for any size
    """
    p = prepare(algorithm, hooks, steps, hook_args, None, init_state,
                measure_read_effect=measure_read_effect, workers=workers)
    key = as_key(key)
    return _run_jit(p.algorithm, key, p.hook_args, p.init_state, p.spec, p.static)
