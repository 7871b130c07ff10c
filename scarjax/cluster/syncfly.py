"""Sync-on-the-fly on a simulated clock (Zhao, Gao & Irwin).

Gradient descent in which the *coordinator* decides when to synchronise, from the progress
the workers report, instead of a fixed (BSP) barrier (paper Sec II-A, III-B):

* **Workers** go through the points of their data shard round-robin (Sec II-C
  ``scheduleUpdate``), accumulating a local gradient at the model of the last barrier, and
  send a *progress report* to the coordinator after every ``r`` points (``report_points``).
  A report's progress is ``progress(x_i)`` summed over its points (Sec II-C): here the
  decrease of the point's objective ``Q_i`` (Eq 1) made by the last global update,
  ``Q_i(w⁽ᵗ⁻¹⁾) − Q_i(w⁽ᵗ⁾)`` ("the progress quantifies the contributions to the
  convergence of the objective function between two synchronizations", Sec III-A).
* **Flexible barrier** (Sec III-B): the coordinator accumulates the reports since the last
  barrier into ``p⁽ᵗ⁾`` and initiates a barrier as soon as ``p⁽ᵗ⁾ > λ p⁽ᵗ⁻¹⁾`` (default
  ``λ = 0.8``), ``p⁽ᵗ⁻¹⁾`` being the progress accumulated before the previous barrier.
  ``p⁽⁰⁾`` "is computed based on the first r reports": the first two barriers come after
  ``r`` reports each (the first has no previous model to measure a decrease against; the
  second measures ``p⁽⁰⁾``). Stated choices where the paper is silent: when ``p⁽ᵗ⁻¹⁾ <= 0``
  (the last update did not decrease the objective) the next barrier again comes after ``r``
  reports; a barrier is also forced when every participating worker has made one full pass
  of its shard since the last barrier (a point contributes at most once to a gradient), or
  when every participating worker has been revoked (the coordinator synchronises the
  flushed gradients without waiting for recoveries, Sec III-A).
* **Barrier** (Eq 5): the global gradient is the mean over the points actually processed,
  whichever worker processed them (:func:`scarjax.perturb.workers.merge`), then the update
  Eq 3 (any optax optimizer; ``optax.sgd(η)`` is Eq 3 itself). Each barrier costs
  ``sync_s`` seconds (gather + broadcast).
* **Revocation** (Sec III-C): a revoked worker *flushes* the local gradient of the points it
  finished (``flush=True``) and archives its cursor; ``flush=False`` drops them (and
  its cursor does not advance: those points are processed again later). Later barriers
  exclude it until a replacement is found ``restart_s`` later (paper: 3 minutes; ``None``:
  never replaced), which resumes the shard at the archived cursor with the current model.

The **Spark-like baseline** (:func:`checkpoint_recompute`, paper Sec IV-B): BSP full-batch
gradient descent (MLlib's ``miniBatchFraction = 1``): every iteration all workers process
their whole shard, the barrier waits for the slowest (the t2.micro stragglers) and the
model is checkpointed every ``checkpoint_every`` iterations (``checkpoint_s`` each); when a
worker is revoked the iteration in progress is lost, the job waits for the replacement,
reloads the last checkpoint (``restore_s``) and recomputes from there. Without
replacements it cannot finish (censored), as the paper observes.

Both run *real* scarjax training (the algorithm's ``grad``/``apply`` worker split, as in
``scarjax.run(..., workers=M)``) and take their durations from the worker speeds
(points/s) of a :class:`Fleet`. Their revocations come from a
:mod:`scarjax.cluster.market` process (:func:`down_intervals`), so the two are compared
on the same revocation draws. Both are host loops over barriers (the barrier times depend
on the progress the real training reports, so there is nothing to vectorise over trials).

**The policy contract.** :func:`sync_on_the_fly_policy` and :func:`checkpoint_recompute_policy`
are ``policy(job, market, *, key, horizon_s, ...) -> ClusterRun`` like every policy
(:mod:`scarjax.cluster.clock`): a :class:`~scarjax.cluster.clock.Job` (the
:class:`Problem` is built from it, :meth:`Problem.from_job`), ``job.max_steps`` executed
updates (barriers; completed BSP iterations, recomputed ones included), seconds, ``key`` the
market's revocation draws and ``train_key`` the training, one ledger entry per machine run
(billed by the market's one rule). Their extensions: ``fleet`` (worker speeds, ``r``,
``sync_s``; default :meth:`Fleet.from_job`), ``point_loss`` and the options of
:func:`sync_on_the_fly` / :func:`checkpoint_recompute`, which remain the lower-level form
(a :class:`Problem` and a :class:`Fleet`; ``key`` also trains unless ``train_key`` is given).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from scarjax import validate as va
from scarjax import tree as tu
from scarjax import core
from scarjax import rng
from scarjax.algorithms import from_optax, num_examples
from scarjax.cluster import clock
from scarjax.cluster.ledger import Ledger
from scarjax.cluster import market as mk
from scarjax.cluster.policies import young_daly_s
from scarjax.core import Algorithm, State
from scarjax.perturb import workers as wk

__all__ = [
    "Problem",
    "Fleet",
    "m4_large_market",
    "logistic_regression",
    "nmf",
    "synthetic_logistic",
    "synthetic_nmf",
    "mixed_fleet",
    "down_intervals",
    "alive_seconds",
    "flexible_barrier",
    "sync_on_the_fly",
    "checkpoint_recompute",
    "young_daly_every",
    "sync_on_the_fly_policy",
    "checkpoint_recompute_policy",
    "M4_LARGE_ON_DEMAND",
    "M4_LARGE_SPOT",
]

#: m4.large on-demand price during the paper's runs, USD/h (Sec IV-B.3).
M4_LARGE_ON_DEMAND = 0.10
#: The range of the average hourly m4.large spot price in the US-east zones (Sec IV-B.3).
M4_LARGE_SPOT = (0.0189, 0.0244)


# --------------------------------------------------------------------------------------
# Problems: an Algorithm in worker mode plus the per-point objective Q_i (Eq 1)


class Problem(NamedTuple):
    """A gradient-descent problem: ``algorithm`` (built with :func:`scarjax.from_optax`, so it
    has the worker split), ``point_loss(params) -> [n]`` the per-point objective ``Q_i``
    (Eq 1; used for the progress reports) and ``n`` points.

    The policy-contract form (:func:`sync_on_the_fly_policy`) builds it from a
    :class:`~scarjax.cluster.clock.Job` (:meth:`from_job`): a Problem is ``job.algorithm``
    plus its per-point objective, nothing else."""

    algorithm: Algorithm
    point_loss: Callable[[Any], jax.Array]
    n: int

    @classmethod
    def from_job(cls, job: clock.Job, point_loss: Callable[[Any], jax.Array] | None = None) -> "Problem":
        """The :class:`Problem` of ``job.algorithm``: ``point_loss`` as given, or (``None``)
        the algorithm's own loss on one-example batches (``Q_i = loss(w, {x_i})``, the
        objective of Eq 1 for a loss that is a mean over examples plus batch-free terms, as
        :func:`scarjax.from_optax` requires for its worker split)."""
        if not isinstance(job, clock.Job):
            raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
        alg = job.algorithm
        if not alg.has_workers:
            raise ValueError(f"job.algorithm must have the worker split (grad/apply/shard); {alg.name!r} has none")
        n = num_examples(alg.data)
        if point_loss is None:
            aux = alg.init(jax.random.key(0), alg.data).aux

            def one(params, example):
                return alg.loss(State(params, aux), jax.tree.map(lambda x: x[None], example))

            point_loss = jax.jit(lambda params: jax.vmap(one, in_axes=(None, 0))(params, alg.data))
        elif not callable(point_loss):
            raise TypeError(f"point_loss must be a callable point_loss(params) -> [n], got {point_loss!r}")
        return cls(alg, point_loss, int(n))


def _nonneg() -> optax.GradientTransformation:
    """Projection onto ``w >= 0`` as an optax transformation: ``u ← max(u, −w)``, so
    ``w + u = max(w + u_raw, 0)`` (projected gradient descent for NMF)."""

    def update(updates, state, params=None):
        if params is None:
            raise ValueError("the non-negativity projection needs params")
        return jax.tree.map(lambda u, p: jnp.maximum(u, -p), updates, params), state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def logistic_regression(x: Any, y: Any, *, lr: float = 0.5, l2: float = 1e-4, name: str = "logreg") -> Problem:
    """Binary logistic regression (paper Sec II-B: ``Q_i = −y log P(x_i) − (1−y) log(1 − P(x_i))``,
    ``P = σ(x_iᵀ w)``), plus a small ridge ``(l2/2)‖w‖²``; full-batch loss = the mean of ``Q_i``.
    A constant feature is appended (bias). Trained by Eq 3 (``optax.sgd(lr)``)."""
    va.check_real("x", x)
    va.check_real("lr", lr, lo=0.0, lo_open=True, scalar=True)
    va.check_real("l2", l2, lo=0.0, scalar=True)
    x = np.asarray(x, np.float32)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"x must be [n, d] with n >= 1, got shape {x.shape}")
    y = np.asarray(y, np.float32)
    if y.shape != (x.shape[0],) or not np.all((y == 0) | (y == 1)):
        raise ValueError(f"y must be [n] labels in {{0, 1}} with n = {x.shape[0]}")
    x = np.concatenate([x, np.ones((x.shape[0], 1), np.float32)], axis=1)
    data = {"x": jnp.asarray(x), "y": jnp.asarray(y)}

    def per_point(w, xb, yb):
        z = xb @ w
        return jnp.logaddexp(0.0, z) - yb * z  # −y log σ(z) − (1−y) log(1−σ(z))

    def loss_fn(w, batch):
        return jnp.mean(per_point(w, batch["x"], batch["y"])) + 0.5 * l2 * jnp.sum(w * w)

    alg = from_optax(loss_fn, optax.sgd(lr), jnp.zeros(x.shape[1], jnp.float32), data, name=name)
    point_loss = jax.jit(lambda w: per_point(w, data["x"], data["y"]) + 0.5 * l2 * jnp.sum(w * w))
    return Problem(alg, point_loss, int(x.shape[0]))


def nmf(rows: Any, cols: Any, vals: Any, shape: tuple[int, int], *, rank: int = 8, lr: float = 0.05,
        init_scale: float = 0.5, seed: int = 0, name: str = "nmf") -> Problem:
    """Non-negative matrix factorisation ``A ≈ W H`` over the observed entries (paper Sec II-B:
    ``L = Σ (A_IJ − W_I H_J)²``; here its mean), by projected gradient descent on ``W`` and ``H``
    jointly (the paper alternates W and H; stated difference). ``W, H`` start uniform in
    ``[0, init_scale]`` (seeded)."""
    rows, cols = np.asarray(rows), np.asarray(cols)
    vals = np.asarray(vals, np.float32)
    m, n = (va.check_int("shape[0]", shape[0], lo=1), va.check_int("shape[1]", shape[1], lo=1))
    rank = va.check_int("rank", rank, lo=1)
    va.check_real("lr", lr, lo=0.0, lo_open=True, scalar=True)
    if not (rows.shape == cols.shape == vals.shape and rows.ndim == 1 and rows.size > 0):
        raise ValueError("rows, cols and vals must be 1-D arrays of the same length >= 1")
    if rows.min() < 0 or rows.max() >= m or cols.min() < 0 or cols.max() >= n:
        raise ValueError(f"rows/cols out of range for shape {shape}")
    if np.any(vals < 0):
        raise ValueError("vals must be non-negative (NMF)")
    data = {"i": jnp.asarray(rows, jnp.int32), "j": jnp.asarray(cols, jnp.int32), "a": jnp.asarray(vals)}
    rng = np.random.default_rng(seed)
    init = {"W": jnp.asarray(rng.uniform(0, init_scale, (m, rank)), jnp.float32),
            "H": jnp.asarray(rng.uniform(0, init_scale, (rank, n)), jnp.float32)}

    def per_point(p, b):
        pred = jnp.sum(p["W"][b["i"]] * p["H"][:, b["j"]].T, axis=-1)
        return jnp.square(b["a"] - pred)

    def loss_fn(p, batch):
        return jnp.mean(per_point(p, batch))

    alg = from_optax(loss_fn, optax.chain(optax.sgd(lr), _nonneg()), init, data, name=name)
    point_loss = jax.jit(lambda p: per_point(p, data))
    return Problem(alg, point_loss, int(rows.size))


def synthetic_logistic(n: int, d: int = 20, *, seed: int = 0, noise: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` points, ``d`` Gaussian features, labels from a random linear model with
    logistic noise (stands in for YearPredictionMSD, binarised; stated difference)."""
    n, d = va.check_int("n", n, lo=1), va.check_int("d", d, lo=1)
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d) / math.sqrt(d) * 3.0
    x = rng.normal(size=(n, d)).astype(np.float32)
    y = (x @ w + noise * rng.logistic(size=n) > 0).astype(np.float32)
    return x, y


def synthetic_nmf(m: int, n: int, *, rank: int = 5, density: float = 0.2, seed: int = 0, noise: float = 0.05):
    """A random non-negative rank-``rank`` ``m × n`` matrix, observed at a ``density`` fraction
    of the entries (shuffled), plus noise (stands in for the Netflix matrix; stated difference).
    Returns ``(rows, cols, vals, (m, n))``."""
    rng = np.random.default_rng(seed)
    W, H = rng.uniform(0, 1, (m, rank)), rng.uniform(0, 1, (rank, n))
    k = max(1, int(round(density * m * n)))
    flat = rng.choice(m * n, size=k, replace=False)
    r, c = flat // n, flat % n
    v = np.maximum((W @ H)[r, c] / rank + noise * rng.normal(size=k), 0.0)
    return r.astype(np.int32), c.astype(np.int32), v.astype(np.float32), (m, n)


# --------------------------------------------------------------------------------------
# Fleet and revocations


@dataclasses.dataclass(frozen=True)
class Fleet:
    """Worker speeds (points/s of gradient computation, one per worker), the progress-report
    unit ``report_points`` (``r``) and the barrier cost ``sync_s`` (gather + broadcast)."""

    speeds: tuple[float, ...]
    report_points: int = 50
    sync_s: float = 2.0

    def __post_init__(self):
        if isinstance(self.speeds, (str, bytes)) or not np.asarray(self.speeds).dtype.kind in "iuf":
            raise TypeError(f"speeds must be a non-empty sequence of positive floats, got {self.speeds!r}")
        s = np.asarray(self.speeds, float)
        if s.ndim != 1 or s.size < 1 or not np.all(np.isfinite(s)) or np.any(s <= 0):
            raise ValueError(f"speeds must be a non-empty sequence of positive floats, got {self.speeds!r}")
        va.check_int("report_points", self.report_points, lo=1)
        va.check_real("sync_s", self.sync_s, lo=0.0, scalar=True)

    @property
    def workers(self) -> int:
        return len(self.speeds)

    @classmethod
    def from_job(cls, job: clock.Job, n: int, *, report_points: int = 50, sync_s: float = 0.0) -> "Fleet":
        """``job.workers`` identical workers whose full pass over ``n`` points (one BSP
        iteration, ``n / workers`` points each) takes ``job.step_time(job.workers)`` seconds;
        ``report_points`` at most the points of a shard."""
        if not isinstance(job, clock.Job):
            raise TypeError(f"job must be a scarjax.cluster.clock.Job, got {type(job).__name__}")
        n = va.check_int("n", n, lo=1)
        w = int(job.workers)
        per = n / w
        t = float(np.asarray(job.step_time(w)))
        return cls((per / t,) * w, report_points=max(1, min(int(report_points), int(per))), sync_s=sync_s)


def mixed_fleet(workers: int, fast: float, *, slow_ratio: float = 0.5, **kwargs: Any) -> Fleet:
    """The paper's cluster (Sec IV-A): half m4.large (``fast`` points/s), half t2.micro
    stragglers (``slow_ratio × fast``)."""
    workers = va.check_int("workers", workers, lo=1)
    va.check_real("fast", fast, lo=0.0, lo_open=True, scalar=True)
    va.check_real("slow_ratio", slow_ratio, lo=0.0, lo_open=True, hi=1.0, scalar=True)
    speeds = tuple(float(fast) if m % 2 == 0 else float(fast * slow_ratio) for m in range(workers))
    return Fleet(speeds, **kwargs)


_CHUNK = 32


@jax.jit(static_argnums=(3,))
def _draw_generations_jit(process, key, g0, workers):
    def one(i):
        return mk.sample_lifetimes(process, jax.random.fold_in(key, i), workers).lifetime

    return jax.vmap(one)(g0 + jnp.arange(_CHUNK))


def _draw_width(workers: int, key: jax.Array) -> int:
    """The worker count a generation is drawn for: a power of two, at least 32, where a draw
    with ``key`` counts elements by flat index alone (:func:`scarjax.rng.flat_ok`: then the first
    ``workers`` lifetimes of a wider draw are exactly the ``workers``-wide draw's and one
    compiled program serves every fleet of a size class); ``workers`` itself otherwise."""
    if not rng.flat_ok(key):
        return workers
    return max(32, 1 << (int(workers) - 1).bit_length())


def _draw_generations(process, key, g0, workers):
    """Lifetimes ``[_CHUNK, workers]`` of generations ``g0 ...`` (one compiled program per
    process type and :func:`_draw_width`; the process's numbers are traced)."""
    return _draw_generations_jit(process, key, g0, _draw_width(workers, key))[:, :workers]


#: Processes whose lifetimes do not depend on when a machine is bought (stationary: the same
#: distribution at every start time); every other process is drawn at each purchase's time.
_STATIONARY = (mk.Exponential, mk.Weibull, mk.Empirical)


def down_intervals(process: Any, key: jax.Array, workers: int, horizon_s: float,
                   restart_s: float | None = 180.0) -> list[np.ndarray]:
    """When each worker slot is away: per worker an array ``[k, 2]`` of ``(revoked_at, back_at)``
    seconds on the job's clock (rows sorted, disjoint), covering ``[0, horizon_s]``.

    ``process``: a :class:`~scarjax.cluster.market.Market` (its transient machines' process, on
    its clock from ``market.start_time_s``), a revocation process (on its own clock from 0) or
    ``None`` (no revocations). A revoked machine's replacement is bought ``restart_s`` later
    (paper: 3 min to find and deploy a new one; ``None`` = never replaced, ``back_at = inf``).

    * Stationary processes (exponential, Weibull, empirical: the lifetime does not depend on
      when the machine is bought): machine generation ``g`` of every slot draws its lifetime
      from ``market.sample_lifetimes(process, fold_in(key, g), workers)`` (so the draws do not
      depend on the policy).
    * Every other process (a price path, a replayed trace) is drawn from the market as it is at
      each purchase's time: the purchases are made in time order, the ``c``-th by
      :meth:`~scarjax.cluster.market.Market.acquire` ``(key, c, 1, t)`` at market time ``t``
      (a price-driven machine lives until the first price change above the bid after ``t``
      plus the notice; a replayed machine is one of the trace's nodes present at ``t`` and not
      held by another slot, and dies at that node's removal). A purchase the market does not
      grant then (the price above the bid, no free node) waits, the slot away, until the market
      next offers a machine (the price back at or below the bid, a node added), and is made
      then; a slot the market never serves again stays away (``back_at = inf``)."""
    workers = va.check_int("workers", workers, lo=1)
    va.check_real("horizon_s", horizon_s, lo=0.0, scalar=True)
    if restart_s is not None:
        va.check_real("restart_s", restart_s, lo=0.0, scalar=True)
    market = process
    if process is not None and not isinstance(process, mk.Market):
        market = mk.Market(mk.MachineType("worker", 0.0), process)
    if market is None or market.process is None:
        return [np.zeros((0, 2)) for _ in range(workers)]
    if isinstance(market.process, _STATIONARY):
        return _stationary_intervals(market.process, key, workers, horizon_s, restart_s)
    return _purchase_intervals(market, key, workers, horizon_s, restart_s)


def _stationary_intervals(process, key, workers, horizon_s, restart_s):
    out: list[list[tuple[float, float]]] = [[] for _ in range(workers)]
    start = np.zeros(workers)
    g = 0
    chunk = np.zeros((0, workers))
    while np.any(start <= horizon_s):
        if g % _CHUNK == 0:  # _CHUNK generations per call: one compilation, same draws as one by one
            chunk = np.asarray(_draw_generations(process, key, g, workers), float)
        life = chunk[g % _CHUNK]
        for m in range(workers):
            if start[m] > horizon_s:
                continue
            rev = start[m] + life[m]
            if rev > horizon_s:
                start[m] = np.inf
                continue
            back = np.inf if restart_s is None else rev + restart_s
            out[m].append((rev, back))
            start[m] = back
        g += 1
        if g > 100_000:  # pragma: no cover - a process with ~zero lifetimes
            raise ValueError("the revocation process revokes machines faster than they start")
    return [np.asarray(o, float).reshape(-1, 2) for o in out]


def _next_offer(market: mk.Market, t: float) -> float:
    """The first market time after ``t`` at which a purchase refused at ``t`` can be granted: a
    replayed trace's next node addition (the nodes present at ``t`` are all held), else the
    market's :meth:`~scarjax.cluster.market.Market.next_available` (``inf``: never)."""
    p = market.process
    if isinstance(p, mk.Replay):
        add, rem = np.asarray(p.add_s, np.float64), np.asarray(p.remove_s, np.float64)
        later = add[(add > t) & (rem > add)]
        return float(later.min()) if later.size else math.inf
    nxt = market.next_available(t)
    return nxt if nxt > t else math.inf


def _purchase_intervals(market, key, workers, horizon_s, restart_s):
    t0 = float(market.start_time_s)
    replay = isinstance(market.process, mk.Replay)
    K = int(market.process.add_s.shape[0]) if replay else 0
    out: list[list[list[float]]] = [[] for _ in range(workers)]
    request = np.zeros(workers)  # job time of each slot's next purchase (inf: none)
    node = np.full(workers, -1, np.int64)  # the trace node each slot holds
    death = np.zeros(workers)  # job time its machine dies
    count = 0
    while np.min(request) <= horizon_s:
        m = int(np.argmin(request))  # purchases in time order (ties: the lower slot first)
        s = float(request[m])
        held = np.zeros(K, bool)
        for o in range(workers):
            if o != m and node[o] >= 0 and death[o] > s:
                held[node[o]] = True
        _, life, got = market.acquire(key, count, 1, t0 + s, held=held if replay else None)
        count += 1
        if count > 100_000:  # pragma: no cover - a market that revokes machines faster than they start
            raise ValueError("the revocation process revokes machines faster than they start")
        if not life[0] > 0:  # not granted now: away until the market next offers a machine
            back = _next_offer(market, t0 + s) - t0
            if out[m] and out[m][-1][1] == s:
                out[m][-1][1] = back
            else:
                out[m].append([s, back])
            request[m] = back
            continue
        node[m], death[m] = got[0], s + float(life[0])
        if death[m] > horizon_s:
            request[m] = np.inf
            continue
        back = np.inf if restart_s is None else death[m] + restart_s
        out[m].append([death[m], back])
        request[m] = back
    return [np.asarray(o, float).reshape(-1, 2) for o in out]


def _is_down(iv: np.ndarray, t: float) -> tuple[bool, float]:
    """(down at ``t``, the time it is back (``t`` when up))."""
    hit = (iv[:, 0] <= t) & (t < iv[:, 1])
    if hit.any():
        return True, float(iv[hit, 1].max())
    return False, t


def _next_revocation(iv: np.ndarray, t: float) -> float:
    after = iv[iv[:, 0] >= t, 0]
    return float(after.min()) if after.size else np.inf


def alive_seconds(intervals: list[np.ndarray], t: float) -> np.ndarray:
    """Per worker slot: seconds with a machine running in ``[0, t]`` (what per-second billing
    charges; a replacement is billed from the moment it runs)."""
    out = np.full(len(intervals), float(t))
    for m, iv in enumerate(intervals):
        for a, b in iv:
            if a < t:
                out[m] -= min(b, t) - a
    return out


# --------------------------------------------------------------------------------------
# The barrier (real training) and the progress reports


class _Engine:
    """Compiled pieces of one problem on ``M`` workers: the Eq 5 barrier over the points each
    worker processed from its cursor (its shard rotated so that round-robin order starts at the
    cursor), the full loss and the per-point objective laid out as shards."""

    def __init__(self, problem: Problem, workers: int):
        alg = problem.algorithm
        if not alg.has_workers:
            raise ValueError(f"problem.algorithm must have the worker split (grad/apply/shard); {alg.name!r} has none")
        self.problem, self.M = problem, workers
        shards = alg.shard(alg.data, workers)
        self.shards = shards
        valid = np.asarray(shards["valid"])
        self.per = valid.sum(axis=1).astype(np.int64)  # valid points per worker (contiguous first)
        self.slots = valid.shape[1]
        if np.any(self.per < 1):
            raise ValueError(f"every worker needs at least one point: {problem.n} points over {workers} workers")

        def barrier(state, cursors, counts, key):
            def one(shard_m, c, cnt, k):
                per_m = jnp.sum(shard_m["valid"])
                # rotate the valid prefix so that processing starts at the cursor
                idx = (jnp.arange(shard_m["valid"].shape[0]) + c) % jnp.maximum(per_m, 1)
                idx = jnp.where(jnp.arange(shard_m["valid"].shape[0]) < per_m, idx, jnp.arange(shard_m["valid"].shape[0]))
                sh = jax.tree.map(lambda x: x[idx], shard_m)
                frac = cnt / jnp.maximum(per_m, 1).astype(jnp.float32)
                return alg.grad(state.params, state, sh, k, frac)

            keys = jax.random.split(key, workers)
            msgs, cnts = jax.vmap(one)(shards, cursors, counts, keys)
            merged, total = wk.merge(msgs, cnts)
            delta, aux_state = alg.apply(merged, state, alg.data, key)
            new = State(tu.tree_add(state.params, delta), aux_state.aux)
            skip = total <= 0
            new = tu.tree_where(skip, state, new)
            return new, alg.loss(new, alg.data), total

        self.barrier = jax.jit(barrier)
        self.loss = jax.jit(lambda st: alg.loss(st, alg.data))
        n = problem.n
        # index of slot j of worker m in the example axis (shard_examples: contiguous shards)
        self.index = np.minimum(np.arange(workers)[:, None] * self.slots + np.arange(self.slots)[None, :], n - 1)

    def point_loss(self, state) -> np.ndarray:
        return np.asarray(self.problem.point_loss(state.params), np.float64)

    def shard_values(self, per_point: np.ndarray) -> list[np.ndarray]:
        return [per_point[self.index[m, : self.per[m]]] for m in range(self.M)]


def flexible_barrier(report_times: np.ndarray, report_progress: np.ndarray, prev_progress: float | None, *,
                     lam: float = 0.8, warmup_reports: int) -> int | None:
    """Index (into the time-sorted reports) of the report after which the coordinator initiates
    a barrier (Sec III-B): the first ``i`` with ``Σ_{j<=i} progress_j > λ · prev_progress``;
    when ``prev_progress`` is ``None`` (warm-up: no reference yet) or ``<= 0``, the
    ``warmup_reports``-th report. ``None`` when the reports never get there (the barrier then
    comes from the full-pass or all-revoked rule). Reports must be sorted by time."""
    report_times = np.asarray(report_times, float)
    report_progress = np.asarray(report_progress, float)
    if report_times.shape != report_progress.shape or report_times.ndim != 1:
        raise ValueError("report_times and report_progress must be 1-D of the same length")
    if np.any(np.diff(report_times) < 0):
        raise ValueError("report_times must be sorted")
    if not np.all(np.isfinite(report_progress)):
        raise ValueError("report_progress must be finite")
    va.check_real("lam", lam, lo=0.0, lo_open=True, hi=1.0, scalar=True)
    warmup_reports = va.check_int("warmup_reports", warmup_reports, lo=1)
    if prev_progress is None or not prev_progress > 0:
        return warmup_reports - 1 if report_times.size >= warmup_reports else None
    cum = np.cumsum(report_progress)
    hit = np.flatnonzero(cum > lam * prev_progress)
    return int(hit[0]) if hit.size else None


# --------------------------------------------------------------------------------------
# Results


def m4_large_market(process: Any = None, *, spot: float = float(np.mean(M4_LARGE_SPOT))) -> mk.Market:
    """The paper's market (Sec IV-B.3): m4.large at $0.10/h on demand, spot at the mean of the
    observed $0.0189-0.0244/h, billed per second (the paper compares runtime x price), with
    revocation ``process`` (e.g. ``market.exponential(600)``; ``None``: none)."""
    return mk.Market(mk.MachineType("m4.large", M4_LARGE_ON_DEMAND, spot=spot), process, billing="per_second")


class _Rec:
    """Collects points in a :class:`~scarjax.cluster.clock.Recorder` and, at the run's end, replays
    the fleet's machine runs into its :class:`~scarjax.cluster.ledger.Ledger` on the market's
    clock: one machine per up-period of each worker slot, a revocation a provider stop, the
    machines running at the end stopped there by the user, none after it."""

    def __init__(self, policy, intervals, market, tier):
        self.policy, self.iv = policy, intervals
        self.price, self.tier, self.billing = market.price(tier), tier, market.billing
        self.t0 = float(market.start_time_s)
        self.ledger = Ledger()
        self.rec = clock.Recorder(policy, self.ledger, self.t0)
        self.last_loss = math.inf
        self.end = 0.0

    def point(self, t, loss, steps):
        if not np.isfinite(loss):
            raise FloatingPointError(f"{self.policy}: the loss became {loss} at t = {t:.1f} s (lower the learning rate)")
        self.rec.point(t, loss, steps)
        self.last_loss, self.end = loss, t

    def event(self, t, kind, detail=""):
        self.rec.event(t, kind, detail)

    def _bill(self, end):
        t0, led = self.t0, self.ledger
        for m, iv in enumerate(self.iv):
            s = 0.0
            for g, (a, b) in enumerate(iv):
                if s < end and a > s:  # a machine ran from s to a (none while the market offered none)
                    led.start((m, g), t0 + s, price=self.price, tier=self.tier, billing=self.billing)
                    led.stop((m, g), t0 + min(a, end), revoked=bool(a <= end))
                s = b
            if s < end:
                led.start((m, len(iv)), t0 + s, price=self.price, tier=self.tier, billing=self.billing)
                led.stop((m, len(iv)), t0 + end, revoked=False)

    def done(self, end_s, state, **meta) -> clock.ClusterRun:
        end = max(end_s, self.end)
        self._bill(end)
        run = self.rec.finish(end, **meta)
        run.final_state = state  # the trained State (not part of to_json)
        return run


def _keys(key, train_key):
    """``(market key, training key)``: ``train_key=None`` trains on ``key`` (the functions'
    historical meaning); the policy-contract forms pass a separate ``train_key``."""
    key = core.as_key(key)
    return key, key if train_key is None else core.as_key(train_key, "train_key")


def _setup(problem, fleet, market, key, horizon_s, restart_s, intervals, tier):
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a syncfly.Problem, got {type(problem).__name__}")
    if not isinstance(fleet, Fleet):
        raise TypeError(f"fleet must be a syncfly.Fleet, got {type(fleet).__name__}")
    va.check_real("horizon_s", horizon_s, lo=0.0, lo_open=True, scalar=True)
    if market is None:
        market = m4_large_market(None)
    if not isinstance(market, mk.Market):
        raise TypeError(f"market must be a scarjax.cluster.market.Market or None, got {type(market).__name__}")
    if tier not in ("transient", "reliable"):
        raise ValueError(f"tier must be 'transient' or 'reliable', got {tier!r}")
    if intervals is None:
        intervals = down_intervals(market if tier == "transient" else None, jax.random.fold_in(key, 1),
                                   fleet.workers, horizon_s, restart_s)
    if len(intervals) != fleet.workers:
        raise ValueError(f"intervals must have one array per worker ({fleet.workers}), got {len(intervals)}")
    return market, [np.asarray(iv, float).reshape(-1, 2) for iv in intervals]


def _epoch_cap(seg_s, seg_e, speeds, active, points: int) -> float:
    """The forced barrier: the time at which the active workers have processed ``points``
    points together (one pass over their data), or the last revocation among them if they
    are all revoked before that."""
    s, e, v = seg_s[active], seg_e[active], speeds[active]

    def done(tau):
        return float(np.sum(np.clip((np.minimum(tau, e) - s), 0.0, None) * v))

    last = float(np.max(e))
    if np.isfinite(last) and done(last) < points:
        return last
    lo, hi = float(np.min(s)), float(np.min(s)) + points / float(np.sum(v)) + float(np.max(s) - np.min(s))
    while done(hi) < points:
        hi = lo + 2 * (hi - lo)
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if done(mid) < points else (lo, mid)
        if hi - lo < 1e-9 * max(1.0, hi):
            break
    return hi


_ENGINES: dict = {}


def _engine(problem: Problem, workers: int) -> _Engine:
    k = (id(problem.algorithm), workers)
    if k not in _ENGINES or _ENGINES[k][0] is not problem.algorithm:
        _ENGINES[k] = (problem.algorithm, _Engine(problem, workers))
    return _ENGINES[k][1]


# --------------------------------------------------------------------------------------
# Policy 6: Sync-on-the-fly


def _start(problem, fleet, key, policy, intervals, market, tier):
    """What both policies start from: the engine, the initial state (training key
    ``fold_in(key, 0)``), the recorder with the initial loss at t = 0, and the list of
    recorded times."""
    eng = _engine(problem, fleet.workers)
    alg = problem.algorithm
    state = alg.init(jax.random.fold_in(key, 0), alg.data)
    rec = _Rec(policy, intervals, market, tier)
    rec.point(0.0, float(eng.loss(state)), 0)
    return eng, alg, state, rec, [0.0]


def sync_on_the_fly(problem: Problem, fleet: Fleet, market: mk.Market | None = None, *, key: jax.Array,
                    horizon_s: float, target_loss: float = -math.inf, lam: float = 0.8, flush: bool = True,
                    restart_s: float | None = 180.0, intervals: list[np.ndarray] | None = None,
                    tier: str = "transient", max_barriers: int = 100_000,
                    policy: str = "sync-on-the-fly", train_key: Any = None) -> clock.ClusterRun:
    """Run Sync-on-the-fly (module docstring) until ``loss <= target_loss`` or ``horizon_s``.

    Args:
      problem: a :class:`Problem`; fleet: a :class:`Fleet` (speeds, ``r``, ``sync_s``).
      market: a :class:`~scarjax.cluster.market.Market` (price, billing and the revocation
        process of the transient machines; default :func:`m4_large_market` without
        revocations).
      key: PRNG key (or int seed) of the revocation draws (``fold_in(key, 1)``,
        :func:`down_intervals`: the same for every policy given the same key) and, unless
        ``train_key`` is given, of the training (the initial state ``fold_in(key, 0)`` and
        the barrier keys ``fold_in(key, k)``).
      train_key: the training's key (``None``: ``key``, as above; the policy-contract form
        :func:`sync_on_the_fly_policy` passes its own ``train_key``, default 0).
      lam: λ of the flexible barrier (paper default 0.8).
      flush: revoked workers flush their partial gradients (``False``: dropped).
      restart_s: seconds until a revoked worker's replacement runs (``None``: never replaced).
      intervals: per worker ``(revoked_at, back_at)`` rows, instead of drawing them.
      tier: ``'transient'`` (spot, revoked) or ``'reliable'`` (on-demand: no revocations).

    Returns a :class:`~scarjax.cluster.clock.ClusterRun` with one point per barrier (``steps``
    = barriers), events ``'sync'``, ``'revocation'``, ``'stall'``; ``meta['points']`` the points
    merged at each barrier.
    """
    key, tkey = _keys(key, train_key)
    max_barriers = va.check_int("max_barriers", max_barriers, lo=1)
    market, intervals = _setup(problem, fleet, market, key, horizon_s, restart_s, intervals, tier)
    va.check_real("lam", lam, lo=0.0, lo_open=True, scalar=True)
    if not isinstance(flush, (bool, np.bool_)):
        raise TypeError(f"flush must be a bool, got {flush!r}")
    eng, alg, state, rec, pts = _start(problem, fleet, tkey, policy, intervals, market, tier)
    M, r, speeds = fleet.workers, fleet.report_points, np.asarray(fleet.speeds, float)
    cursors = np.zeros(M, np.int64)
    q_now = eng.point_loss(state)
    dec = None  # per-point decrease made by the last update (None before the first one)
    prev_p: float | None = None
    t, k = 0.0, 0
    seen_rev: set = set()
    while t < horizon_s and k < max_barriers and rec.last_loss > target_loss:
        # one segment per worker: from when it is up (now, or its replacement) to its revocation
        seg_s, seg_e = np.full(M, np.inf), np.full(M, np.inf)
        for m in range(M):
            _, s = _is_down(intervals[m], t)
            if s >= horizon_s:
                continue
            seg_s[m], seg_e[m] = s, _next_revocation(intervals[m], s)
        active = np.isfinite(seg_s)
        if not active.any():
            rec.event(*(t, "stall", "no worker before the horizon"))
            break
        cap = _epoch_cap(seg_s, seg_e, speeds, active, int(np.sum(eng.per[active])))
        # progress reports within the segments, up to the cap
        times, prog = [], []
        vals = eng.shard_values(dec) if dec is not None else None
        for m in np.flatnonzero(active):
            end = min(seg_e[m], cap)
            nrep = int(math.floor(max(end - seg_s[m], 0.0) * speeds[m] + 1e-9)) // r
            if nrep == 0:
                continue
            j = np.arange(1, nrep + 1)
            times.append(seg_s[m] + j * r / speeds[m])
            if vals is None:
                prog.append(np.zeros(nrep))
            else:  # round-robin from the cursor, wrapping around the shard
                order = np.resize(np.roll(vals[m], -int(cursors[m])), nrep * r)
                prog.append(order.reshape(nrep, r).sum(axis=1))
        if times:
            times_a, prog_a = np.concatenate(times), np.concatenate(prog)
            o = np.argsort(times_a, kind="stable")
            times_a, prog_a = times_a[o], prog_a[o]
        else:
            times_a, prog_a = np.zeros(0), np.zeros(0)
        ref = None if (k < 2 or prev_p is None) else prev_p
        i = flexible_barrier(times_a, prog_a, ref, lam=lam, warmup_reports=r)
        T = min(float(times_a[i]), cap) if i is not None else cap
        if T + fleet.sync_s > horizon_s:  # the barrier would end after the horizon: censored there
            break
        # points processed by T (atomic points), flushed or dropped for the revoked
        raw = np.zeros(M, np.int64)
        for m in np.flatnonzero(active & (seg_s < T)):
            raw[m] = int(math.floor((min(T, seg_e[m]) - seg_s[m]) * speeds[m] + 1e-9))
            if seg_e[m] <= T:
                if (m, seg_e[m]) not in seen_rev:
                    seen_rev.add((m, seg_e[m]))
                    rec.event(*(float(seg_e[m]), "revocation",
                                       f"worker {m}: {'flushed' if flush else 'dropped'} {raw[m]} points"))
                if not flush:
                    raw[m] = 0
        # a point processed twice before one barrier counts once (same model, same gradient)
        counts = np.minimum(raw, eng.per)
        rep_p = float(np.sum(prog_a[times_a <= T])) if times_a.size else 0.0
        old_q = q_now
        state, loss, total = eng.barrier(state, jnp.asarray(cursors, jnp.int32), jnp.asarray(counts, jnp.float32),
                                         jax.random.fold_in(tkey, k + 1))
        cursors = (cursors + raw) % eng.per
        q_now = eng.point_loss(state)
        dec = old_q - q_now
        if k >= 1:
            prev_p = rep_p  # p⁽ᵗ⁾ of the barrier just taken (the first barrier has no decrease to report)
        k += 1
        t = T + fleet.sync_s
        rec.point(t, float(loss), k)
        pts.append(float(total))
        rec.event(*(t, "sync", f"barrier {k}: {int(total)} points, progress {rep_p:.4g}"))
    return rec.done(min(t, horizon_s), state, points=pts, executed_steps=k)


# --------------------------------------------------------------------------------------
# The Spark-like baseline: BSP, checkpoint, reload and recompute


def young_daly_every(iteration_s: float, checkpoint_s: float, mttf_s: float, workers: int) -> int:
    """Iterations between checkpoints at the Young/Daly interval ``sqrt(2 δ MTTF)`` (δ =
    ``checkpoint_s``), the MTTF being the cluster's (one machine's over ``workers``: any
    revocation interrupts BSP); at least 1. ``mttf_s = inf``: never (a huge count)."""
    va.check_real("iteration_s", iteration_s, lo=0.0, lo_open=True, scalar=True)
    va.check_real("checkpoint_s", checkpoint_s, lo=0.0, scalar=True)
    va.check_real("mttf_s", mttf_s, lo=0.0, lo_open=True, allow_inf=True, scalar=True)
    va.check_int("workers", workers, lo=1)
    if not math.isfinite(mttf_s):
        return 10**9
    return max(1, int(round(young_daly_s(checkpoint_s, mttf_s / workers) / iteration_s)))


def checkpoint_recompute(problem: Problem, fleet: Fleet, market: mk.Market | None = None, *, key: jax.Array,
                         horizon_s: float, target_loss: float = -math.inf, checkpoint_every: int | None = None,
                         checkpoint_s: float = 10.0, restore_s: float = 10.0, restart_s: float | None = 180.0,
                         intervals: list[np.ndarray] | None = None, tier: str = "transient",
                         max_iterations: int = 100_000, policy: str = "checkpoint-recompute",
                         train_key: Any = None) -> clock.ClusterRun:
    """The Spark-like baseline (module docstring): BSP full passes, a checkpoint every
    ``checkpoint_every`` iterations (``checkpoint_s``; ``None``: :func:`young_daly_every`), and on any revocation: the iteration
    (or checkpoint write) in progress is lost, all wait until every worker is back, reload the
    last checkpoint (``restore_s``) and recompute. Censored (stops) when a worker never comes
    back, or after ``max_iterations`` *completed* iterations (recomputed ones included, the
    cap of every policy). Arguments as :func:`sync_on_the_fly` (same key: same revocation
    draws)."""
    key, tkey = _keys(key, train_key)
    max_iterations = va.check_int("max_iterations", max_iterations, lo=1)
    market, intervals = _setup(problem, fleet, market, key, horizon_s, restart_s, intervals, tier)
    va.check_real("checkpoint_s", checkpoint_s, lo=0.0, scalar=True)
    va.check_real("restore_s", restore_s, lo=0.0, scalar=True)
    eng, alg, state, rec, pts = _start(problem, fleet, tkey, policy, intervals, market, tier)
    M, speeds = fleet.workers, np.asarray(fleet.speeds, float)
    iter_s = float(np.max(eng.per / speeds)) + fleet.sync_s
    if checkpoint_every is None:
        mttf = market.mttf_s() if tier == "transient" else math.inf
        # a market whose machines never live (MTTF 0): checkpoint after every iteration
        checkpoint_every = young_daly_every(iter_s, checkpoint_s, mttf, M) if mttf > 0 else 1
    checkpoint_every = va.check_int("checkpoint_every", checkpoint_every, lo=1)
    full = jnp.asarray(eng.per, jnp.float32)
    zero = jnp.zeros(M, jnp.int32)
    ckpt, ckpt_k = state, 0
    t, k, done = 0.0, 0, 0  # k: the global iteration (back at a reload); done: iterations completed
    all_rev = np.sort(np.concatenate([iv[:, 0] for iv in intervals])) if M else np.zeros(0)

    def first_revocation(a, b):
        hit = all_rev[(all_rev >= a) & (all_rev < b)]
        return float(hit[0]) if hit.size else None

    def all_back(t0):
        while True:
            backs = [_is_down(iv, t0)[1] for iv in intervals]
            tb = max(backs)
            if tb == t0 or not np.isfinite(tb):
                return tb
            t0 = tb

    if any(_is_down(iv, 0.0)[0] for iv in intervals):  # BSP starts when every worker has a machine
        t = all_back(0.0)
        rec.event(*(0.0, "wait", f"the market offers no machine to every worker until {t:.0f} s"))
        if t >= horizon_s:  # waited out to the horizon: censored there
            rec.event(*(0.0, "stall", "no full cluster before the horizon"))
            t = horizon_s
    while t < horizon_s and done < max_iterations and rec.last_loss > target_loss:
        writes = (k + 1) % checkpoint_every == 0
        dur = iter_s + (checkpoint_s if writes else 0.0)
        rv = first_revocation(t, t + dur)
        if rv is None and t + dur > horizon_s:  # the iteration would end after the horizon: censored there
            break
        if rv is None:
            state, loss, total = eng.barrier(state, zero, full, jax.random.fold_in(tkey, k + 1))
            k += 1
            done += 1
            t += dur
            if writes:
                ckpt, ckpt_k = state, k
                rec.event(*(t, "checkpoint", f"iteration {k}"))
            rec.point(t, float(loss), k)
            pts.append(float(total))
            continue
        # revocation: lose the work in progress, wait for every replacement, reload, recompute
        rec.event(*(rv, "revocation", f"iteration {k + 1} lost; reload checkpoint of iteration {ckpt_k}"))
        tb = all_back(rv)
        if not np.isfinite(tb) or tb >= horizon_s:
            rec.event(*(rv, "stall", "a revoked worker is never replaced: cannot recompute its data"))
            break
        t = tb
        while True:  # the reload itself may be interrupted
            rv2 = first_revocation(t, t + restore_s)
            if rv2 is None:
                break
            t = all_back(rv2)
            if not np.isfinite(t):
                break
        if not np.isfinite(t) or t + restore_s > horizon_s:
            rec.event(*(min(t, horizon_s), "stall", "no full cluster before the horizon"))
            break
        t += restore_s
        state, k = ckpt, ckpt_k
        rec.point(t, float(eng.loss(state)), k)
        pts.append(0.0)
        rec.event(*(t, "restart", f"reloaded iteration {ckpt_k}"))
    return rec.done(min(t, horizon_s), state, points=pts, executed_steps=done)


# --------------------------------------------------------------------------------------
# The shared policy signature: policy(job, market, *, key, horizon_s, **options)


def _contract(job, market, fleet, point_loss):
    problem = Problem.from_job(job, point_loss)
    if fleet is None:
        fleet = Fleet.from_job(job, problem.n)
    if not isinstance(fleet, Fleet):
        raise TypeError(f"fleet must be a syncfly.Fleet or None, got {type(fleet).__name__}")
    if fleet.workers != job.workers:
        raise ValueError(f"fleet has {fleet.workers} workers, job.workers is {job.workers}")
    if market is not None and not isinstance(market, mk.Market):
        raise TypeError(f"market must be a scarjax.cluster.market.Market or None, got {type(market).__name__}")
    return problem, fleet


def sync_on_the_fly_policy(job: clock.Job, market: mk.Market | None, *, key: Any, horizon_s: float,
                           fleet: Fleet | None = None, point_loss: Callable | None = None, train_key: Any = 0,
                           **options: Any) -> clock.ClusterRun:
    """:func:`sync_on_the_fly` as a policy of the shared contract (:mod:`scarjax.cluster.clock`):
    ``job.algorithm`` trained on ``job.workers`` workers until ``job.target_loss``,
    ``job.max_steps`` barriers (every barrier is one executed update; nothing is redone) or
    ``horizon_s`` seconds; ``key`` draws the market's revocations, ``train_key`` (default 0)
    the training.

    Extensions: ``fleet`` (the workers' speeds, ``r`` and ``sync_s``; default
    :meth:`Fleet.from_job`: identical workers whose full pass takes ``job.step_time``),
    ``point_loss`` (the per-point objective of the progress reports; default the
    algorithm's loss on one-example batches, :meth:`Problem.from_job`), and the other
    options of :func:`sync_on_the_fly` (``lam``, ``flush``, ``restart_s``, ``tier``, ...)."""
    problem, fleet = _contract(job, market, fleet, point_loss)
    return sync_on_the_fly(problem, fleet, market, key=key, horizon_s=horizon_s, target_loss=job.target_loss,
                           max_barriers=job.max_steps, train_key=train_key, **options)


def checkpoint_recompute_policy(job: clock.Job, market: mk.Market | None, *, key: Any, horizon_s: float,
                                fleet: Fleet | None = None, point_loss: Callable | None = None,
                                train_key: Any = 0, **options: Any) -> clock.ClusterRun:
    """:func:`checkpoint_recompute` as a policy of the shared contract: ``job.checkpoint_s``,
    ``job.restore_s``, ``job.target_loss``, ``job.max_steps`` completed iterations
    (recomputed ones included); ``key``, ``train_key``, ``fleet`` and ``point_loss`` as in
    :func:`sync_on_the_fly_policy`."""
    problem, fleet = _contract(job, market, fleet, point_loss)
    return checkpoint_recompute(problem, fleet, market, key=key, horizon_s=horizon_s, target_loss=job.target_loss,
                                checkpoint_s=job.checkpoint_s, restore_s=job.restore_s,
                                max_iterations=job.max_steps, train_key=train_key, **options)
