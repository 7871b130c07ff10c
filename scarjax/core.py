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

Worker mode (:mod:`scarjax.workers`): when a hook declares ``M`` data-parallel workers
and the algorithm provides the worker/server split (``grad``, ``apply``, ``shard``), step 2
produces one view per worker (stacked ``[M, …]``; read hooks act on the stack), step 3
``vmap``-s ``grad`` over the workers (each with its own view and data shard), merges the
messages weighted by the points each worker processed (Sync-on-the-fly Eq 5) and calls
``apply`` once (thesis Example 5.2.2). Without worker hooks the loop is exactly as above.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp

from scarjax import tree as tu
from scarjax import workers as wk
from scarjax.hooks import Context, Hook, HookChain, POINTS, flatten_hooks

PyTree = Any
Params = PyTree

__all__ = ["State", "Algorithm", "Trace", "run", "run_trials", "split_trials"]


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
      grad: optional worker part for data-parallel worker mode (:mod:`scarjax.workers`):
        ``grad(view, state, shard, key, progress) -> (message, count)``, the message one
        worker computes from its view and data shard having processed a fraction
        ``progress`` of its points, and the number of points it processed.
      apply: optional server part: ``apply(message, state, data, key) -> (delta,
        aux_state)`` applied to the merged message.
      shard: optional ``shard(data, M) -> shards`` (leaves with a leading axis ``M``);
        ``None`` gives every worker all of ``data``.
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
        return self.norm(tu.tree_sub(params, self.optimum))


jax.tree_util.register_dataclass(
    Algorithm,
    data_fields=["data", "optimum"],
    meta_fields=["init", "update", "loss", "norm", "name", "grad", "apply", "shard"],
)


class Trace(NamedTuple):
    """Per-iteration record of a run (a pytree; under :func:`run_trials` every leaf gains a
    leading trial axis).

    Attributes:
      loss: ``[steps + 1]``: ``loss(y⁽ᵏ⁾)`` for ``k = 0 … steps``.
      distance: ``[steps + 1]``: ``‖y⁽ᵏ⁾ − w*‖`` when the optimum is known, else ``None``.
      delta: ``{hook name: [steps]}``: the norm of the change each hook made at step ``k``.
      point_delta: ``{point: [steps]}``: the norm of the combined change at each injection
        point (``'read'``, ``'update'``, ``'write'``) at step ``k``.
      read_effect: ``[steps]``: ``‖Δ(view) − Δ(y⁽ᵏ⁾)‖``, the effective perturbation of the
        read hooks on ``y⁽ᵏ⁺¹⁾`` (thesis Example 5.2.2); only when requested, else ``None``.
      initial_distance: scalar ``‖w⁽⁰⁾ − w*‖`` (``None`` without an optimum).
      points: ``[steps]``: in worker mode, the number of points merged at each barrier
        (Sync-on-the-fly Eq 5); ``None`` otherwise.

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
) -> tuple[State, Trace]:
    data = algorithm.data
    k_init, k_hooks, k_loop = jax.random.split(key, 3)
    state = algorithm.init(k_init, data) if init_state is None else init_state
    state = State(*state)
    names = _unique_names(hooks)
    hook_states = tuple(
        h.init(state, k) for h, k in zip(hooks, jax.random.split(k_hooks, max(len(hooks), 1)))
    )
    initial_params = state.params
    norm = algorithm.norm
    has_opt = algorithm.optimum is not None
    by_point = {p: [i for i, h in enumerate(hooks) if h.point == p] for p in POINTS}
    M = wk.num_workers(hooks)
    progress_hooks = [
        i for i, h in enumerate(hooks) if isinstance(h, wk.WorkerHook) and h.progress is not None
    ]
    need_effect = measure_read_effect and bool(by_point["read"] or progress_hooks)

    if M is not None and not algorithm.has_workers:
        raise ValueError(
            f"hooks declare {M} data-parallel workers but algorithm {algorithm.name!r} has no "
            "worker/server split (grad and apply); build it with scarjax.from_optax or give "
            "it grad/apply (see scarjax.workers)"
        )

    def apply_point(point, value, get_params, hstates, ctx_base, keys, deltas, pnorm=norm):
        before_point = get_params(value)
        hstates = list(hstates)
        for i in by_point[point]:
            before = get_params(value)
            ctx = ctx_base._replace(key=keys[i])
            value, hstates[i] = hooks[i].apply(value, hstates[i], ctx)
            deltas[names[i]] = pnorm(tu.tree_sub(get_params(value), before))
        total = pnorm(tu.tree_sub(get_params(value), before_point)) if by_point[point] else jnp.zeros(())
        return value, tuple(hstates), total

    def step(carry, k):
        state, hstates = carry
        step_key = jax.random.fold_in(k_loop, k)
        k_alg, k_h = jax.random.split(step_key)
        keys = jax.random.split(k_h, max(len(hooks), 1))
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
        outputs["delta"] = deltas
        outputs["point_delta"] = {"read": d_read, "update": d_update, "write": d_write}
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
            # Progress of each worker before the barrier (revocations).
            progress = jnp.ones((M,), jnp.float32)
            hstates = list(hstates)
            for i in progress_hooks:
                p_i, hstates[i] = hooks[i].progress(hstates[i], ctx._replace(key=keys[i]))
                progress = progress * jnp.asarray(p_i, jnp.float32)
            hstates = tuple(hstates)
            # 3. workers, barrier, server.
            delta, new_state, total = server(views, state, progress, k_alg)
            outputs["points"] = total
            if need_effect:
                ref, _, _ = server(fresh, state, jnp.ones((M,), jnp.float32), k_alg)
                outputs["read_effect"] = norm(tu.tree_sub(delta, ref))
            return delta, new_state, hstates, d_read

    (final, _), out = jax.lax.scan(step, (state, hook_states), jnp.arange(steps))
    loss0 = algorithm.loss(state, data)
    loss = jnp.concatenate([loss0[None], out["loss"]])
    distance = initial_distance = None
    if has_opt:
        initial_distance = algorithm.distance(initial_params)
        distance = jnp.concatenate([initial_distance[None], out["distance"]])
    trace = Trace(
        loss=loss,
        distance=distance,
        delta=out["delta"],
        point_delta=out["point_delta"],
        read_effect=out.get("read_effect"),
        initial_distance=initial_distance,
        points=out.get("points"),
    )
    return final, trace


_run_jit = jax.jit(_run_impl, static_argnums=(3, 4, 5))


def _validate(algorithm: Algorithm, steps: int) -> None:
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a positive int, got {steps!r}")


def _as_key(key: Any, name: str = "key") -> jax.Array:
    if isinstance(key, int):
        return jax.random.key(key)
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    if key.dtype == jnp.uint32 and key.shape[-1:] == (2,):
        return jax.random.wrap_key_data(key)
    raise TypeError(
        f"{name} must be a PRNG key (jax.random.key(seed)) or an int seed, "
        f"got dtype {key.dtype} shape {key.shape}"
    )


def run(
    algorithm: Algorithm,
    hooks: Hook | HookChain | Sequence[Hook] | None,
    steps: int,
    key: jax.Array | int,
    *,
    init_state: State | None = None,
    measure_read_effect: bool = False,
) -> tuple[State, Trace]:
    """Run ``steps`` iterations of ``algorithm`` under ``hooks`` (thesis Eq 5.2).

    The whole run is one jit-compiled ``lax.scan``; the compiled program is cached per
    (algorithm callables, hooks, steps), so repeated calls with new keys or new data of
    the same shape do not recompile.

    Args:
      algorithm: the :class:`Algorithm` to iterate.
      hooks: a :class:`~scarjax.hooks.Hook`, a :func:`~scarjax.hooks.chain`, a sequence
        of hooks, or ``None`` for an unperturbed run.
      steps: number of iterations ``T`` (static).
      key: a PRNG key (or an int seed); it determines initialisation, minibatches and
        every random perturbation, so the same key gives the same result.
      init_state: start from this state instead of ``algorithm.init(key)``.
      measure_read_effect: also compute the unperturbed update each step to record
        ``‖Δ(view) − Δ(y)‖`` (Example 5.2.2); costs a second update.

    Returns:
      ``(final_state, trace)``.

    Example:
      >>> import jax, scarjax
      >>> from scarjax.models import quadratic
      >>> qp = quadratic.fig53_problem()
      >>> _, base = scarjax.run(qp, None, 200, jax.random.key(0))
      >>> _, pert = scarjax.run(qp, scarjax.hooks.gaussian(1.0, when=100), 200, jax.random.key(0))
      >>> bool(pert.point_delta["write"][100] > 0)
      True
    """
    _validate(algorithm, steps)
    key = _as_key(key)
    if key.shape != ():
        raise ValueError(f"key must be a single PRNG key, got shape {key.shape}; use run_trials")
    return _run_jit(
        algorithm, key, init_state, flatten_hooks(hooks), steps, bool(measure_read_effect)
    )


def run_trials(
    algorithm: Algorithm,
    hooks: Hook | HookChain | Sequence[Hook] | Callable[[Any], Any] | None,
    steps: int,
    keys: jax.Array | int,
    *,
    hook_args: PyTree | None = None,
    init_state: State | None = None,
    measure_read_effect: bool = False,
) -> tuple[State, Trace]:
    """Monte-Carlo trials of :func:`run` as one ``vmap``-ped, jit-compiled program.

    Trial ``i`` equals ``run(algorithm, hooks, steps, keys[i])`` (tested).

    Args:
      keys: ``[n]`` PRNG keys (e.g. ``jax.random.split(key, n)``), or an int ``n`` for
        ``split(key(0), n)``.
      hooks: as for :func:`run`; or, when ``hook_args`` is given, a function mapping one
        trial's slice of ``hook_args`` to hooks, so hook parameters (perturbation sizes,
        failure fractions) vary across trials inside the same program, e.g.
        ``run_trials(alg, lambda s: gaussian(s, when=500), 1000, keys, hook_args=sizes)``.
      hook_args: pytree whose leaves have a leading axis of length ``n``.

    Returns:
      ``(final_states, trace)`` with a leading trial axis on every leaf.
    """
    _validate(algorithm, steps)
    if isinstance(keys, int):
        if keys < 1:
            raise ValueError(f"keys as a trial count must be >= 1, got {keys}")
        keys = jax.random.split(jax.random.key(0), keys)
    keys = _as_key(keys, "keys")
    if keys.ndim != 1:
        raise ValueError(f"keys must be a 1-D array of PRNG keys, got shape {keys.shape}")
    n = keys.shape[0]
    if hook_args is not None:
        if not callable(hooks) or isinstance(hooks, (Hook, HookChain)):
            raise TypeError("with hook_args, hooks must be a function hook_args[i] -> hooks")
        for leaf in jax.tree.leaves(hook_args):
            if jnp.shape(leaf)[:1] != (n,):
                raise ValueError(
                    f"hook_args leaves need a leading axis of length {n} (one per key), "
                    f"got shape {jnp.shape(leaf)}"
                )
        spec = hooks
    else:
        spec = flatten_hooks(hooks)
    return _trials_jit(
        algorithm, keys, hook_args, init_state, spec, steps, bool(measure_read_effect)
    )


def _trials_core(algorithm, keys, hook_args, init_state, spec, steps, measure):
    # ``spec`` is either a tuple of hooks or a factory ``hook_args[i] -> hooks``.
    def one(key, args):
        hooks = spec if isinstance(spec, tuple) else flatten_hooks(spec(args))
        return _run_impl(algorithm, key, init_state, hooks, steps, measure)

    return jax.vmap(one)(keys, hook_args)


_trials_jit = jax.jit(_trials_core, static_argnums=(4, 5, 6))


def split_trials(tree: PyTree, i: int) -> PyTree:
    """Trial ``i`` of a vmapped result (``jax.tree.map(lambda x: x[i], tree)``)."""
    return jax.tree.map(lambda x: x[i], tree)
