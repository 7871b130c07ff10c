"""Stale reads: bounded staleness (SSP) and asynchronous execution as read-point hooks.

Under the stale-synchronous-parallel consistency model (thesis Sec 2.2 and 4.2.1, Ho et
al. 2013 [91]) each of ``M`` data-parallel workers computes its contribution to iteration
``k`` from a cached parameter version up to ``s`` iterations old,
``w̃ₘ⁽ᵏ⁾ = w⁽ᵏ⁻ᵈᵐ⁾`` with ``0 ≤ dₘ ≤ s``; asynchronous execution has no bound (here: a
truncated geometric delay). Thesis Example 5.2.2 casts this as a perturbation of the
iterate: at iteration ``k + 1``

    δ_{k+1} = (1/M) Σₘ ∇(w̃ₘ⁽ᵏ⁾, Dₘ) − ∇(w⁽ᵏ⁾, D),

which the loop measures when ``run(..., measure_read_effect=True)`` (``trace.read_effect``,
at the cost of a second, synchronous gradient).

The past versions live in a ring buffer of ``S = s + 1`` slots inside the hook state (so
inside the ``lax.scan`` carry; it jits and vmaps). At iteration ``k`` the stored
parameters are written into slot ``k mod S`` with one ``dynamic_update_slice`` (no copy of
the whole buffer) and worker ``m`` reads slot ``(k − dₘ) mod S``. Before the buffer has
filled, those slots still hold ``w⁽⁰⁾``, so early delays read the initial version, as a
worker that has not yet received any update would. With ``s = 0`` every worker reads
the fresh parameters and the run equals synchronous data-parallel training
(``scarjax.run(algorithm, None, steps, key, workers=M)``) bit for bit (tested).

The hooks are built for ``workers = M`` and require worker mode with the same count:
``scarjax.run(algorithm, ssp(M, s), steps, key, workers=M)``.

**Writing your own stale-read hook** (e.g. for
:func:`scarjax.testing.check_staleness`'s ``hook=``): use the ring-buffer helpers
:func:`ring_slots`, :func:`ring_init`, :func:`ring_push` and :func:`ring_read`, which are
what :func:`stale_reads` does. A bound ``s`` needs ``ring_slots(s) = s + 1`` slots: the
current version plus ``s`` past ones, *pushed before it is read* at each step (a hook that
reads first would need the current version from elsewhere). Reading ``d = s`` old from a
smaller buffer silently returns a *newer* version (the slot was overwritten), which is
why :func:`ring_read` clips delays to ``[0, slots − 1]``. (The planted hook of the tests,
``ssp(M, s + 2, max_staleness=S + 2)``, reads ``s + 2`` old *on purpose*, to violate the
bound ``s`` it declares: it is not a template.) Simplest, with your own delay rule::

    hook = lambda M, s, S: stale_reads(M, ring_slots(S), lambda k, key, _: my_delays(k, key, s))

and from scratch, as a read-point :class:`~scarjax.hooks.Hook`::

    def my_stale_reads(M, s, S):
        def init(state, key):
            return ring_init(state.params, ring_slots(S))
        def apply(views, buf, ctx):
            buf = ring_push(buf, ctx.state.params, ctx.step)      # first the current version
            d = jnp.full((M,), s, jnp.int32)                       # then each worker's delay
            return ring_read(buf, ctx.step, d, views), buf
        return Hook("read", init, apply, name="my_stale_reads", workers=M)

Put stale-read hooks first among the read hooks: they replace the views (later read hooks,
such as low-precision communication, act on the stale views).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import rng
from scarjax import validate as va
from scarjax import tree as tu
from scarjax.hooks import Hook
from scarjax.perturb.workers import check_workers

PyTree = Any

__all__ = [
    "stale_reads", "ssp", "asynchronous", "truncated_geometric", "DELAY_MODES",
    "ring_slots", "ring_init", "ring_push", "ring_read",
]

DELAY_MODES = ("per_step", "uniform", "fixed")

DelayFn = Callable[[jax.Array, jax.Array, PyTree], jax.Array]
"""``delays(step, key, delay_state) -> [M] int32`` delays, each in ``[0, buffer_size)``."""


def ring_slots(max_staleness: int) -> int:
    """Ring-buffer slots for views at most ``max_staleness`` updates old: ``s + 1`` (the
    current version, pushed first, and ``s`` past ones). Not ``s + 2``: see the module
    doc."""
    s = va.check_int("max_staleness", max_staleness, lo=0)
    return s + 1


def ring_init(params: PyTree, slots: int) -> PyTree:
    """A ring buffer of ``slots`` versions of ``params`` (a leading axis of length
    ``slots`` on every leaf), every slot holding ``params`` (``w⁽⁰⁾``: before the buffer
    has filled, a stale read returns the initial version, as a worker that has not yet
    received any update would). Lives in a hook's state (the ``lax.scan`` carry)."""
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)) or slots < 1:
        raise ValueError(f"slots must be an int >= 1 (static; ring_slots(s) for a bound s), got {slots!r}")
    return jax.tree.map(lambda p: jnp.broadcast_to(p, (int(slots),) + jnp.shape(p)).copy(), params)


def ring_push(buffer: PyTree, params: PyTree, step: Any) -> PyTree:
    """``buffer`` with ``params`` (the version of iteration ``step``) written into slot
    ``step mod slots`` (one ``dynamic_update_slice`` per leaf, no copy of the buffer).
    Push the current version *before* :func:`ring_read` at the same step."""
    slots = jax.tree.leaves(buffer)[0].shape[0]
    slot = jnp.mod(step, slots)
    return jax.tree.map(
        lambda b, p: jax.lax.dynamic_update_index_in_dim(b, jnp.asarray(p).astype(b.dtype), slot, 0), buffer, params
    )


def ring_read(buffer: PyTree, step: Any, delays: Any, like: PyTree) -> PyTree:
    """The views of workers with ``delays`` (``[M]`` ints, clipped to
    ``[0, slots − 1]``): worker ``m`` reads the version of iteration ``step − delays[m]``,
    slot ``(step − delays[m]) mod slots``, as a leading worker axis on every leaf, in the
    dtypes of ``like`` (the views the read hook was given)."""
    slots = jax.tree.leaves(buffer)[0].shape[0]
    d = jnp.clip(jnp.asarray(delays, jnp.int32), 0, slots - 1)
    idx = jnp.mod(step - d, slots)
    return jax.tree.map(lambda b, v: jnp.take(b, idx, axis=0).astype(v.dtype), buffer, like)


def stale_reads(
    workers: int,
    buffer_size: int,
    delays: DelayFn,
    *,
    init_delays: Callable[[jax.Array], PyTree] | None = None,
    name: str = "stale_reads",
) -> Hook:
    """The generic stale-read hook: ``M`` workers, a ring buffer of ``buffer_size`` past
    versions, and a delay rule.

    Args:
      workers: ``M`` (static).
      buffer_size: ring-buffer slots ``S`` (static); delays must be ``< S``: for views at
        most ``s`` updates old, ``ring_slots(s) = s + 1``.
      delays: ``delays(step, key, delay_state) -> [M]`` int delays (clipped to ``[0, S)``).
      init_delays: ``init_delays(key) -> delay_state`` (e.g. per-worker fixed delays drawn
        once); default none.
    """
    check_workers(workers)
    va.check_callable("delays", delays)
    if init_delays is not None:
        va.check_callable("init_delays", init_delays)
    va.check_str("name", name)
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, (int, np.integer)) or buffer_size < 1:
        raise ValueError(f"buffer_size must be an int >= 1 (static), got {buffer_size!r}")
    S = int(buffer_size)
    init_delays = init_delays or (lambda key: ())

    def init(state, key):
        return {"buffer": ring_init(state.params, S), "delays": init_delays(key)}

    def apply(views, hstate, ctx):
        k = ctx.step
        buf = ring_push(hstate["buffer"], ctx.state.params, k)
        new_views = ring_read(buf, k, delays(k, ctx.key, hstate["delays"]), views)
        return new_views, {"buffer": buf, "delays": hstate["delays"]}

    return Hook(point="read", init=init, apply=apply, name=name, workers=workers)


def _check_staleness(s: Any, name: str = "staleness") -> None:
    if tu.is_traced(s):
        return
    if isinstance(s, bool):
        raise ValueError(f"{name} must be an integer >= 0, got {s!r}")
    va.check_integer_value(name, s, lo=0)
    if np.ndim(s) != 0:
        raise ValueError(f"{name} must be a scalar, got shape {np.shape(s)}")


def ssp(
    workers: int,
    staleness: int,
    *,
    delays: str | Any = "per_step",
    max_staleness: int | None = None,
    name: str = "ssp",
) -> Hook:
    """Bounded staleness (SSP, thesis Sec 4.2.1 and Example 5.2.2): each worker reads a
    version at most ``staleness`` iterations old.

    Args:
      workers: ``M`` data-parallel workers (static).
      staleness: the bound ``s >= 0``; may be traced (vary it across trials with
        ``run_trials(..., hook_args=...)``) when ``max_staleness`` is given.
      delays: ``'per_step'`` – each worker's delay drawn uniformly in ``[0, s]`` at every
        step (SSP's worst-case-free average behaviour); ``'uniform'`` – each worker's
        delay drawn uniformly in ``[0, s]`` once and kept (heterogeneous workers);
        ``'fixed'`` – every worker always reads the version exactly ``s`` old (the worst
        case the bound allows); or an int array ``[M]`` of fixed per-worker delays in
        ``[0, s]``.
      max_staleness: the ring-buffer bound (static; default ``staleness``, which must then
        be concrete).

    Raises ``ValueError`` naming the argument for a bad worker count, a negative or
    non-integer staleness, an unknown delay mode, or delays outside ``[0, s]``.
    """
    check_workers(workers)
    _check_staleness(staleness)
    if max_staleness is None:
        if tu.is_traced(staleness):
            raise ValueError("max_staleness (static) is required when staleness is traced")
        max_staleness = int(staleness)
    _check_staleness(max_staleness, "max_staleness")
    max_staleness = int(max_staleness)
    if not tu.is_traced(staleness) and staleness > max_staleness:
        raise ValueError(f"staleness must be <= max_staleness={max_staleness}, got {staleness!r}")
    s = jnp.asarray(staleness, jnp.int32) if not tu.is_traced(staleness) else staleness.astype(jnp.int32)
    init_delays = None
    if isinstance(delays, str):
        if delays not in DELAY_MODES:
            raise ValueError(f"delays must be one of {DELAY_MODES} or an int array [M], got {delays!r}")
        if delays == "per_step":
            fn = lambda step, key, st: jax.random.randint(key, (workers,), 0, s + 1)  # noqa: E731
        elif delays == "fixed":
            fn = lambda step, key, st: jnp.full((workers,), s, jnp.int32)  # noqa: E731
        else:
            init_delays = lambda key: jax.random.randint(key, (workers,), 0, s + 1)  # noqa: E731
            fn = lambda step, key, st: st  # noqa: E731
    else:
        if callable(delays) or delays is None:
            raise TypeError(f"delays must be one of {DELAY_MODES} or an int array [M], got {delays!r}")
        arr = np.asarray(delays)
        if arr.shape != (workers,) or not np.issubdtype(arr.dtype, np.integer):
            raise ValueError(f"delays as an array must be ints of shape ({workers},), got {arr.dtype} {arr.shape}")
        if not tu.is_traced(staleness) and (arr.min() < 0 or arr.max() > int(staleness)):
            raise ValueError(f"delays must lie in [0, staleness={staleness}], got {arr.tolist()}")
        fixed = jnp.asarray(arr, jnp.int32)
        fn = lambda step, key, st: fixed  # noqa: E731
    return stale_reads(workers, max_staleness + 1, fn, init_delays=init_delays, name=name)


def truncated_geometric(key: jax.Array, shape: tuple[int, ...], p: jax.Array | float, max_value: int) -> jax.Array:
    """Draws from ``P(d) ∝ p (1 − p)^d`` on ``d = 0 … max_value`` (inverse CDF, exact).

    ``p`` in ``(0, 1]``; ``p = 1`` gives ``0`` always."""
    p = jnp.asarray(p, jnp.float32)
    u = rng.uniform(key, shape)  # jax.random.uniform's numbers (scarjax.rng: drawn flat)
    q = 1.0 - p
    # CDF(d) = (1 − q^{d+1}) / (1 − q^{D+1});  d = ceil(log(1 − u (1 − q^{D+1})) / log q) − 1.
    log_q = jnp.log(jnp.where(q > 0, q, 1.0))
    mass = -jnp.expm1((max_value + 1) * log_q)
    d = jnp.ceil(jnp.log1p(-u * mass) / jnp.where(log_q < 0, log_q, -1.0)) - 1.0
    d = jnp.where(q > 0, d, 0.0)
    return jnp.clip(d, 0, max_value).astype(jnp.int32)


def asynchronous(
    workers: int,
    mean_delay: float,
    *,
    max_delay: int,
    name: str = "async",
) -> Hook:
    """Asynchronous execution (thesis Sec 2.2: no staleness bound): each worker's delay is
    drawn at every step from a geometric distribution with mean ``mean_delay``
    (``p = 1/(1 + mean_delay)``), truncated to ``[0, max_delay]`` so that the ring buffer
    is finite (the truncated mean is slightly below ``mean_delay``).

    ``mean_delay >= 0`` may be traced; ``max_delay`` is static."""
    check_workers(workers)
    va.check_real("mean_delay", mean_delay, lo=0.0, scalar=True)
    _check_staleness(max_delay, "max_delay")
    max_delay = int(max_delay)
    p = 1.0 / (1.0 + jnp.asarray(mean_delay, jnp.float32))
    fn = lambda step, key, st: truncated_geometric(key, (workers,), p, max_delay)  # noqa: E731
    return stale_reads(workers, max_delay + 1, fn, name=name)
