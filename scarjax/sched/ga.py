"""PolluxSched: the genetic search over allocation matrices (thesis Sec 3.4.2, App. A.2).

The cluster-wide half of Pollux. Every scheduling interval PolluxSched picks an allocation
matrix ``A`` (``A[j, n]`` = GPUs of node ``n`` given to job ``j``) that maximises

* **FITNESS_p(A)** = ``((1/J) sum_j SPEEDUP_j(A_j)^p)^(1/p)`` (Eq 3.11), the power mean of
  the jobs' speedups; ``p = 1`` the arithmetic mean (throughput), ``p = -1`` the harmonic
  mean (the default, "fairness knob", Sec 3.4.2), ``p -> -inf`` the minimum, ``p = 0`` the
  geometric mean.
* **SPEEDUP_j(A_j)** = ``max_{m,s} GOODPUT_j(A_j) / max_{m,s} GOODPUT_j(a_f)`` (Eq 3.12):
  the goodput-optimal goodput of the job's allocation ``(nodes, replicas)`` relative to a
  fair share ``a_f`` of the cluster. As in the artifact (``petuum/adaptdl`` branch
  ``osdi21-artifact``, ``simulator/pollux.py`` ``Problem.__init__``), ``a_f`` is
  ``ceil(G / J)`` GPUs on ``ceil(N / G)`` node(s) (``G`` GPUs on ``N`` nodes) and speedups
  are then scaled by ``N / G`` (a dominant share of one node has speedup 1); with
  ``speedup_base="one_gpu"`` the base is one GPU (``scarjax.sched.AppModel.speedup``). A job
  that has never run has the optimistic prior ``SPEEDUP = replicas`` (the artifact's
  ``Job.get_speedup_fn`` without fitted parameters).
* **Re-allocation penalty**: a job whose row differs from its current allocation has its
  speedup multiplied by ``REALLOC_FACTOR_j(delta) = max(T_j - R_j delta, 0) / (T_j + delta)``
  (Sec 3.4.2; ``T_j`` the job's age, ``R_j`` its re-allocations so far, ``delta`` 30 s).
* **Constraints** (enforced by the repair operator): node capacities; at most one
  distributed job per node (interference avoidance, Sec 3.4.2; can be switched off for
  Fig 3.13c); per-job caps: at most ``max(2 * most GPUs the job has used, 1)`` GPUs (Sec 3.4.1,
  "at most twice the maximum number of GPUs the job has been allocated in its lifetime"),
  at most 64 GPUs and ``max_batch_size // min_local_bsz`` GPUs, at most 16 nodes, and one
  GPU for the artifact's fixed-batch NCF jobs (``simulator.py`` ``get_pollux_job_info``).

The genetic algorithm (Fig 3.8; App. A.2; operators as in the artifact's ``Problem``):

* **mutation** (``Problem._mutation``): each job row is reset to its current allocation
  with probability 0.1; each row is, with probability 0.1, selected to have each of its
  elements zeroed with probability 0.1; then every element ``A[j, n]`` of a node with a free
  GPU is raised to a uniform integer in ``[A[j, n], capacity_n]`` with probability
  ``p1 + p2 - p1 p2``, ``p1 = 1/J`` (all jobs fit a free GPU) and ``p2 = 1/#(jobs on n)``
  for jobs already on ``n``;
* **crossover** (``Problem._crossover``): single-point over jobs, two offspring per pair of
  parents picked by binary tournament (pymoo's NSGA-II selection);
* **repair** (``Problem._repair``): (1) with jobs in priority order (least attained service,
  then earliest submission), every node keeps only the first distributed job on it;
  (2) with the nodes in a random order, each job keeps its first ``cap_j`` GPUs and its first
  16 nodes; (3) with jobs in priority order, each node's GPUs go to the first jobs asking
  for them (cumulative sum capped at the capacity).
* **initial population**: the current allocation, a greedy allocation (:func:`greedy_seed`, not
  in the artifact) and mutated copies of the current allocation (or the warm start);
* **survival**: parents and offspring together, duplicates removed, the ``pop_size`` best by
  fitness survive (the thesis' description of the generation, Sec 3.4.2; the artifact's
  NSGA-II also ranks a second objective, the cluster utility, which only its autoscaler
  uses and its simulator then ignores: it applies the solution of best fitness).
* **warm start**: the final population is kept and, mapped to the next interval's jobs
  (rows by job id, new jobs empty), seeds the next search; the current allocation is always
  in the initial population, so the chosen fitness is never below that of keeping it.

Everything the search touches is a fixed-shape JAX array: the speedup of each job at every
``(nodes, replicas)`` is precomputed into a table (:func:`speedup_tables`, vectorised over
jobs and allocations and 50 geometrically spaced batch sizes as the artifact's
``GoodputFunction.optimize`` samples), the population is ``int32[P, J, N]``, every operator
is ``vmap``-ed over the population (the repair, by default, works on the
whole population at once, :func:`_repair_population`, gathering only the few rows and columns
that break a constraint, 2-3x faster) and one generation is four jitted calls (a host loop
over generations: inside ``lax.fori_loop`` or in unrolled chunks XLA's CPU backend was no
faster): the parents' selection and crossover, the mutation, the repair with the fitness, and
the survival; the first step (the initial population) calls the same compiled mutation and
repair, so a search compiles them once (a quick run's search compiles in about 2/3 of the CPU
time of a fused start and generation, with bit-identical results). Per-element random bits come from a counter hash salted by the ``jax.random`` key
(:func:`_element_bits`; threefry dominated a generation). Jobs are padded to a multiple of 32
(one compilation serves many intervals). Deterministic per key. ``benchmarks/bench_sched.py`` times one decision
(``P = 100``, 100 generations; 160 jobs on 16 x 4 GPUs and 80 jobs on 8 x 4) against pymoo's NSGA-II with the
artifact's operators.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax.sched.apps import AppSet

__all__ = [
    "GAConfig",
    "GAResult",
    "AllocationProblem",
    "PolluxPolicy",
    "PolluxSched",
    "Decision",
    "assert_feasible",
    "build_problem",
    "cluster_utility",
    "crossover",
    "fitness",
    "greedy_seed",
    "job_caps",
    "mutate",
    "power_mean",
    "realloc_factor",
    "repair",
    "solve",
    "speedup_tables",
]

_N_CANDIDATES = 50  # goodput.py optimize: np.geomspace(min_batch_size, max_batch_size) (50 points)
_JOB_PAD = 32


@dataclass(frozen=True)
class GAConfig:
    """Settings of the genetic search (defaults: the artifact's).

    Attributes:
      pop_size: population size (artifact: 100).
      generations: generations per decision (artifact: 100).
      p: the power-mean exponent of Eq 3.11 (``-inf`` for the minimum, 0 geometric).
      interference_avoidance: at most one distributed job per node (Sec 3.4.2).
      restart_delay_s: ``delta`` of ``REALLOC_FACTOR`` (artifact: 30 s).
      max_job_nodes: most nodes one job may span (artifact: 16).
      max_job_gpus: most GPUs one job may use (artifact: 64, "simulator can't handle more").
      cap_factor: a job may use at most ``cap_factor`` times the most GPUs it has used (2).
      speedup_base: ``'fair'`` (Eq 3.12, the artifact) or ``'one_gpu'``.
      reset_prob, zero_row_prob, zero_elem_prob: the mutation's probabilities (0.1 each).
      fixed_replicas: per-application GPU caps (the artifact fixes NCF to one GPU).
      sparse_repair: repair the population with :func:`_repair_population` (default; 2-3x
        faster decisions) instead of ``vmap`` of the per-matrix repair. The repaired matrices
        are bit-identical, but the fitness XLA computes inside the fused generation can differ
        by one float32 rounding (a different fusion), which can change which members survive,
        so a simulation's trajectory can differ slightly between the two (workload-1: a job's
        JCT 2812 s vs 2818 s). ``False`` reproduces results computed with the dense repair
        (``sched_main``'s and ``sched_sweeps``' committed results pin it).
    """

    pop_size: int = 100
    generations: int = 100
    p: float = -1.0
    interference_avoidance: bool = True
    restart_delay_s: float = 30.0
    max_job_nodes: int = 16
    max_job_gpus: int = 64
    cap_factor: float = 2.0
    speedup_base: str = "fair"
    reset_prob: float = 0.1
    zero_row_prob: float = 0.1
    zero_elem_prob: float = 0.1
    fixed_replicas: dict = field(default_factory=lambda: {"ncf": 1})
    sparse_repair: bool = True

    def __post_init__(self):
        va.check_int("pop_size", self.pop_size, lo=2)
        if self.pop_size % 2:
            raise ValueError(f"pop_size must be even (offspring come in pairs), got {self.pop_size}")
        va.check_int("generations", self.generations, lo=0)
        if isinstance(self.p, (bool, np.bool_)) or not isinstance(self.p, (int, float, np.integer, np.floating)):
            raise TypeError(f"p must be a real number or -inf, got {self.p!r}")
        p = float(self.p)
        if math.isnan(p) or p == math.inf:
            raise ValueError(f"p must be a real number or -inf, got {self.p!r}")
        va.check_real("restart_delay_s", self.restart_delay_s, lo=0.0, scalar=True)
        va.check_int("max_job_nodes", self.max_job_nodes, lo=1)
        va.check_int("max_job_gpus", self.max_job_gpus, lo=1)
        va.check_real("cap_factor", self.cap_factor, lo=1.0, scalar=True)
        va.check_choice("speedup_base", self.speedup_base, ("fair", "one_gpu"))
        for name in ("reset_prob", "zero_row_prob", "zero_elem_prob"):
            va.check_real(name, getattr(self, name), lo=0.0, hi=1.0, scalar=True)


class AllocationProblem(NamedTuple):
    """One scheduling decision as fixed-shape arrays (jobs padded; see :func:`build_problem`).

    Attributes:
      speedup: ``float32[J, N1, R1]``: the (scaled) speedup of job ``j`` on ``n`` nodes with
        ``r`` GPUs; ``[:, 0, 0] = 0``; entries beyond a job's caps are never read.
      base: ``int32[J, N]`` the current allocation.
      cap: ``int32[J]`` most GPUs per job (0 for padding rows).
      capacity: ``int32[N]`` GPUs per node.
      factor: ``float32[J]`` ``REALLOC_FACTOR`` per job.
      valid: ``bool[J]`` real jobs (rows in priority order).
      max_nodes: ``int32[]`` most nodes per job.
    """

    speedup: Any
    base: Any
    cap: Any
    capacity: Any
    factor: Any
    valid: Any
    max_nodes: Any


class GAResult(NamedTuple):
    """``alloc`` ``int[J, N]`` the best allocation (rows as given), ``fitness`` its Eq 3.11
    value, ``population`` ``int[P, J, N]`` and ``pop_fitness`` ``[P]`` the final population,
    ``base_fitness`` the value of keeping the current allocation."""

    alloc: np.ndarray
    fitness: float
    population: np.ndarray
    pop_fitness: np.ndarray
    base_fitness: float


# ---------------------------------------------------------------------------------------
# Fitness (Eq 3.11)
# ---------------------------------------------------------------------------------------


def power_mean(x, p: float, *, where=None, axis: int = -1, eps: float = 0.0):
    """The generalised mean ``((1/J) sum x^p)^(1/p)`` of Eq 3.11 over ``axis``.

    ``p = 0`` is the geometric mean and ``p = -inf`` the minimum (its limits); ``where``
    masks entries out (the mean is over the kept ones). ``eps`` is added to ``x`` before
    the power (the artifact adds ``1e-3`` so that a zero speedup with ``p < 0`` gives a
    finite, tiny fitness instead of 0 through ``inf``; for ``p = 0`` it floors ``x`` at ``eps``).
    """
    p = float(p)
    if math.isnan(p) or p == math.inf:
        raise ValueError(f"p must be a real number or -inf, got {p!r}")
    x = jnp.asarray(x, jnp.float32)
    w = jnp.ones(x.shape, bool) if where is None else jnp.broadcast_to(jnp.asarray(where, bool), x.shape)
    cnt = jnp.maximum(w.sum(axis), 1)
    if p == -math.inf:
        return jnp.min(jnp.where(w, x, jnp.inf), axis=axis)
    if p == 0.0:
        lx = jnp.log(jnp.maximum(x, eps) if eps > 0 else x)
        return jnp.exp(jnp.sum(jnp.where(w, lx, 0.0), axis) / cnt)
    xp = jnp.where(w, (x + eps) ** p, 0.0)
    return (jnp.sum(xp, axis) / cnt) ** (1.0 / p)


def realloc_factor(age_s, restarts, delay_s: float = 30.0) -> np.ndarray:
    """``REALLOC_FACTOR(delta) = max(T - R delta, 0) / (T + delta)`` (Sec 3.4.2)."""
    age = np.asarray(age_s, np.float64)
    r = np.asarray(restarts, np.float64)
    va.check_real("age_s", age, lo=0.0)
    va.check_real("restarts", r, lo=0.0)
    va.check_real("delay_s", delay_s, lo=0.0, scalar=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.maximum(age - r * delay_s, 0.0) / (age + delay_s)
    return np.where(age + delay_s > 0, out, 1.0)


def _speedups(states, prob: AllocationProblem):
    """``[..., J]`` speedups of ``states`` ``[..., J, N]`` by one gather in the table."""
    nodes = jnp.minimum((states > 0).sum(-1), prob.speedup.shape[1] - 1)
    reps = jnp.minimum(states.sum(-1), prob.speedup.shape[2] - 1)
    j = jnp.arange(states.shape[-2])
    return prob.speedup[j, nodes, reps]


def fitness(states, prob: AllocationProblem, p: float = -1.0, *, eps: float = 1e-3):
    """Eq 3.11 of each allocation matrix in ``states`` (``[..., J, N]``): the power mean
    over the real jobs of the speedups, each multiplied by its ``REALLOC_FACTOR`` where the
    row differs from the current allocation (the artifact's ``Problem._evaluate``)."""
    s = _speedups(states, prob)
    moved = jnp.any(states != prob.base, axis=-1)
    s = s * jnp.where(moved, prob.factor, 1.0)
    return power_mean(s, p, where=prob.valid, eps=eps)


# ---------------------------------------------------------------------------------------
# Genetic operators (one allocation matrix each; vmapped over the population)
# ---------------------------------------------------------------------------------------


def _murmur_bits(ctr, salt):
    """The murmur3 finaliser of the ``uint32`` counters ``ctr`` salted by ``salt[..., 0]`` and
    ``salt[..., 1]`` (broadcast against ``ctr``)."""
    x = ctr * jnp.uint32(0x9E3779B9) + salt[..., 0]
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x85EBCA6B)
    x = x ^ (x >> 13)
    x = x * jnp.uint32(0xC2B2AE35)
    x = x ^ (x >> 16)
    return x ^ salt[..., 1]


def _element_bits(key, shape):
    """``uint32`` bits, one per element: the murmur3 finaliser of a counter salted by two
    threefry draws from ``key``. Statistically enough for a genetic search and ~10x cheaper
    than threefry on a CPU, where the per-element draws otherwise dominate a generation.
    Element ``i`` (row-major) is ``_murmur_bits(i, salt)``, so any subset of the elements can
    be drawn alone (:func:`_repair_population` draws only the rows it changes)."""
    salt = jax.random.bits(key, (2,))
    n = int(np.prod(shape))
    return _murmur_bits(jax.lax.iota(jnp.uint32, n).reshape(shape), salt)


def mutate(key, state, prob: AllocationProblem, *, reset_prob=0.1, zero_row_prob=0.1, zero_elem_prob=0.1):
    """The artifact's mutation (``Problem._mutation``) of one ``int32[J, N]`` matrix."""
    k1, k2 = jax.random.split(key)
    J, N = state.shape
    # drawn flat: the numbers of shape (2, J, 1) (jax.random counts elements by their flat
    # index), in a smaller program
    rows = jax.random.uniform(k1, (2 * J,)).reshape(2, J, 1)
    # one 32-bit draw per element, cut into an 8-bit (zeroing), a 16-bit (raising, whose
    # probability can be 1/J) and an 8-bit (raised value) uniform: random bits dominate the cost
    bits = _element_bits(k2, (J, N))
    f32 = jnp.float32
    u = ((bits >> 24).astype(f32) * (1.0 / 256.0), (bits & 0xFFFF).astype(f32) * (1.0 / 65536.0),
         ((bits >> 16) & 0xFF).astype(f32) * (1.0 / 256.0))
    state = jnp.where(rows[0] < reset_prob, prob.base, state)
    row_p = jnp.where(rows[1] < zero_row_prob, zero_elem_prob, 0.0)
    state = jnp.where(u[0] < row_p, 0, state)
    free = prob.capacity - state.sum(0)  # [N]
    fits = jnp.broadcast_to(free >= 1, (J, N))
    n_real = jnp.maximum(prob.valid.sum(), 1)
    p1 = jnp.where(fits, 1.0 / n_real, 0.0)
    on = (state > 0) & fits
    p2 = on / jnp.maximum(on.sum(0, keepdims=True), 1)
    hit = u[1] < p1 + p2 - p1 * p2
    # uniform integer in [state, capacity]
    span = jnp.maximum(prob.capacity - state, 0) + 1
    raised = state + jnp.floor(u[2] * span).astype(state.dtype)
    raised = jnp.minimum(raised, jnp.maximum(prob.capacity, state))
    return jnp.where(hit, raised, state)


def crossover(key, a, b):
    """Single-point crossover over jobs (``Problem._crossover``): the first ``c`` rows swap
    between the parents, ``c`` uniform in ``[0, J)``; returns the two offspring."""
    J = a.shape[0]
    c = jax.random.randint(key, (), 0, J)
    m = (jnp.arange(J) < c)[:, None]
    return jnp.where(m, b, a), jnp.where(m, a, b)


def greedy_seed(prob: AllocationProblem, gpus_per_node=None) -> np.ndarray:
    """A feasible allocation built greedily on the host: jobs in priority order each get their
    best ``(nodes, replicas)`` alone (the table's maximum within the job's caps), packed onto the
    nodes with most free GPUs (distributed jobs only on nodes without another distributed
    job), or nothing when it does not fit.

    Not one of the artifact's operators: one extra member of the initial population (the
    artifact starts from the current allocation alone). With it, a job alone on the cluster
    gets its goodput-optimal allocation whatever the search budget (the artifact's mutation
    raises every node of a lone job at once, so a one-node optimum takes many generations).
    """
    tab = np.asarray(prob.speedup, np.float64)
    cap = np.asarray(prob.cap)
    capacity = np.asarray(prob.capacity).astype(np.int64)
    valid = np.asarray(prob.valid)
    J, N = np.asarray(prob.base).shape
    N1, R1 = tab.shape[1:]
    gpn = int(capacity.max(initial=0)) if gpus_per_node is None else int(gpus_per_node)
    nn, rr = np.meshgrid(np.arange(N1), np.arange(R1), indexing="ij")
    max_nodes = min(int(prob.max_nodes), N, N1 - 1)
    shape_ok = (nn >= 1) & (nn <= rr) & (nn <= max_nodes) & (rr <= nn * gpn)
    free = capacity.copy()
    dist_on = np.zeros(N, bool)
    out = np.zeros((J, N), np.int64)
    for j in np.flatnonzero(valid & (cap > 0)).tolist():
        ok = shape_ok & (rr <= cap[j])
        if not ok.any():
            continue
        flat = np.where(ok, tab[j], -np.inf).reshape(-1)
        n, r = divmod(int(np.argmax(flat)), R1)
        if flat[n * R1 + r] <= 0:
            continue
        usable = (free > 0) & (~dist_on if n > 1 else True)
        cand = np.flatnonzero(usable)
        if cand.size < n:
            continue
        sel = cand[np.argsort(-free[cand], kind="stable")[:n]]
        if free[sel].sum() < r:
            continue
        give = np.ones(n, np.int64)
        left = r - n
        for i in range(n):
            add = min(int(free[sel[i]]) - 1, left)
            give[i] += add
            left -= add
        out[j, sel] = give
        free[sel] -= give
        if n > 1:
            dist_on[sel] = True
    return out


def _cumsum0(x):
    """Cumulative sum over axis 0 by a parallel prefix scan (``O(J log J)``; XLA's CPU
    cumsum is a reduce-window, quadratic in ``J``)."""
    return jax.lax.associative_scan(jnp.add, x, axis=0)


def _avoiding(drop, interference_avoidance):
    """``drop`` where interference avoidance is on: a Python ``True`` leaves ``drop`` as it is
    (the program of a static setting), a traced boolean scalar masks it (one compiled search
    serves both settings, :func:`solve`)."""
    return drop if interference_avoidance is True else drop & interference_avoidance


def repair(key, state, prob: AllocationProblem, *, interference_avoidance=True):
    """The artifact's repair (``Problem._repair``) of one ``int32[J, N]`` matrix: rows are in
    priority order. Always returns a feasible matrix: column sums within ``capacity``, row
    sums within ``cap``, at most ``max_nodes`` nodes per job, and (with
    ``interference_avoidance``, a bool or a traced boolean scalar) at most one job spanning
    several nodes on every node."""
    J, N = state.shape
    state = jnp.maximum(state, 0)
    if interference_avoidance is not False:
        distributed = (state > 0).sum(1, keepdims=True) > 1
        mask = (state > 0) & distributed
        # the first distributed job on each node keeps it
        first = jnp.min(jnp.where(mask, jnp.arange(J)[:, None], J), axis=0)
        drop = mask & (jnp.arange(J)[:, None] != first[None, :])
        state = jnp.where(_avoiding(drop, interference_avoidance), 0, state)
    # per-job caps in a random node order: "cumulative sum in the shuffled order" computed as
    # the sum over the nodes ranked before each node (an N x N comparison, no sort)
    rank = (_element_bits(key, (J, N)) >> 16).astype(jnp.uint16)  # 16-bit ranks, ties broken by node index
    idx = jnp.arange(N)
    before = (rank[:, None, :] < rank[:, :, None]) | (
        (rank[:, None, :] == rank[:, :, None]) & (idx[None, :] < idx[:, None]))  # [J, n, m]: m before n
    prefix = jnp.sum(jnp.where(before, state[:, None, :], 0), axis=-1)
    state = jnp.clip(prob.cap[:, None] - prefix, 0, state)
    nz_before = jnp.sum((state > 0)[:, None, :] & before, axis=-1)
    state = jnp.where(nz_before < prob.max_nodes, state, 0)
    # node capacities, jobs in priority order
    cs = jnp.minimum(_cumsum0(state), prob.capacity[None, :])
    return jnp.diff(cs, axis=0, prepend=0)


def _true_indices(mask, size: int):
    """The first ``size`` indices where the 1-D ``mask`` holds, padded with ``mask.size``
    (``jnp.nonzero(mask, size=size, fill_value=mask.size)``; a binary search in the running
    count, about twice as fast on a CPU)."""
    count = jax.lax.associative_scan(jnp.add, mask.astype(jnp.int32))
    return jnp.searchsorted(count, jnp.arange(1, size + 1, dtype=jnp.int32), side="left", method="scan")


def _cap_rows(rows, order_key, cap, max_nodes):
    """Step (2) of :func:`repair` on ``rows`` ``[K, N]``: in the node order of ``order_key``
    (``[K, N]``, distinct within a row), each row keeps its first ``cap`` GPUs and its first
    ``max_nodes`` nodes (an ``N x N`` comparison per row, no sort)."""
    before = order_key[:, None, :] < order_key[:, :, None]  # [K, n, m]: m before n
    prefix = jnp.sum(jnp.where(before, rows[:, None, :], 0), axis=-1)
    rows = jnp.clip(cap[:, None] - prefix, 0, rows)
    nz_before = jnp.sum((rows > 0)[:, None, :] & before, axis=-1)
    return jnp.where(nz_before < max_nodes, rows, 0)


def _repair_population(keys, states, prob: AllocationProblem, *, interference_avoidance=True,
                       row_budget: int | None = None, col_budget: int | None = None):
    """:func:`repair` of a whole population ``int32[P, J, N]`` (member ``i`` with ``keys[i]``),
    bit-identical to ``vmap(repair)`` and the one the search runs.

    Steps (2) and (3) of the repair change only the rows over their cap or ``max_nodes`` and
    the node columns over capacity, a few per cent of them in a search: those are gathered
    (at most ``row_budget`` rows and ``col_budget`` columns; more take the dense path, so the
    result never depends on the budgets), processed, and scattered back. A row's shuffled node
    order uses the same bits as :func:`repair` (``_murmur_bits`` of the row's counters)."""
    P, J, N = states.shape
    states = jnp.maximum(states, 0)
    jj = jnp.arange(J)[:, None]
    if interference_avoidance is not False:
        distributed = (states > 0).sum(2, keepdims=True) > 1
        mask = (states > 0) & distributed
        first = jnp.min(jnp.where(mask, jj, J), axis=1, keepdims=True)
        states = jnp.where(_avoiding(mask & (jj != first), interference_avoidance), 0, states)
    # (2) caps in a random node order, on the rows that break one (the others are unchanged:
    # with a row sum <= cap every prefix leaves each element whole)
    bad = (states.sum(2) > prob.cap) | ((states > 0).sum(2) > prob.max_nodes)  # [P, J]
    salts = jax.vmap(lambda k: jax.random.bits(k, (2,)))(keys)  # [P, 2] as in _element_bits
    node = jnp.arange(N, dtype=jnp.uint32)
    K = min(P * J, max(64, P * J // 32)) if row_budget is None else max(1, min(int(row_budget), P * J))

    def order_key(rows_j, salt):  # 16-bit ranks of repair(), ties broken by the node index
        return (_murmur_bits(rows_j.astype(jnp.uint32)[..., None] * jnp.uint32(N) + node, salt) >> 16) \
            * jnp.uint32(N) + node

    def rows_dense(states):
        ok = order_key(jnp.broadcast_to(jnp.arange(J), (P, J)), salts[:, None, None, :])
        out = _cap_rows(states.reshape(P * J, N), ok.reshape(P * J, N),
                        jnp.broadcast_to(prob.cap, (P, J)).reshape(-1), prob.max_nodes)
        return out.reshape(P, J, N)

    def rows_sparse(states):
        flat = states.reshape(P * J, N)
        sel = _true_indices(bad.reshape(-1), K)
        p, j = jnp.minimum(sel // J, P - 1), sel % J
        rows = _cap_rows(flat[jnp.minimum(sel, P * J - 1)], order_key(j, salts[p][:, None, :]), prob.cap[j],
                         prob.max_nodes)
        return flat.at[sel].set(rows, mode="drop").reshape(P, J, N)

    states = jax.lax.cond(bad.sum() > K, rows_dense, rows_sparse, states)
    # (3) node capacities, jobs in priority order, on the columns over capacity
    over = states.sum(1) > prob.capacity  # [P, N]
    KC = min(P * N, max(16, P * N // 4)) if col_budget is None else max(1, min(int(col_budget), P * N))

    def cols_dense(states):
        cs = jnp.minimum(jax.lax.associative_scan(jnp.add, states, axis=1), prob.capacity)
        return jnp.diff(cs, axis=1, prepend=0)

    def cols_sparse(states):
        sel = _true_indices(over.reshape(-1), KC)
        p, n = sel // N, sel % N
        cols = states[jnp.minimum(p, P - 1), :, n]  # [KC, J]
        cs = jnp.minimum(jax.lax.associative_scan(jnp.add, cols, axis=1), prob.capacity[n][:, None])
        return states.at[p, :, n].set(jnp.diff(cs, axis=1, prepend=0), mode="drop")

    return jax.lax.cond(over.sum() > KC, cols_dense, cols_sparse, states)


def _dedup_penalty(states, f):
    """``f`` with ``-inf`` for every matrix equal to an earlier one (pymoo's duplicate
    elimination), by a random-weight hash then an exact comparison with its sort neighbour."""
    P = states.shape[0]
    flat = states.reshape(P, -1).astype(jnp.float32)
    w = jnp.sin(jnp.arange(flat.shape[1], dtype=jnp.float32) * 12.9898 + 1.0) * 43.758
    h = flat @ w
    order = jnp.lexsort((jnp.arange(P), h))
    srt = flat[order]
    same = jnp.concatenate([jnp.zeros((1,), bool), jnp.all(srt[1:] == srt[:-1], axis=1)])
    dup = jnp.zeros((P,), bool).at[order].set(same)
    return jnp.where(dup, -jnp.inf, f)


def _make_search(pop_size: int, generations: int, p: float, reset_prob: float, zero_row_prob: float,
                 zero_elem_prob: float, sparse_repair: bool = False):
    # interference avoidance is a traced boolean argument ``avoid`` of the programs (one
    # compilation serves both settings; the repaired matrices are the same integers)
    mut = jax.vmap(lambda k, s, pr: mutate(k, s, pr, reset_prob=reset_prob, zero_row_prob=zero_row_prob,
                                           zero_elem_prob=zero_elem_prob), in_axes=(0, 0, None))
    if sparse_repair:
        def rep(keys, states, prob, avoid):
            return _repair_population(keys, states, prob, interference_avoidance=avoid)
    else:
        rep = jax.vmap(lambda k, s, pr, avoid: repair(k, s, pr, interference_avoidance=avoid),
                       in_axes=(0, 0, None, None))

    cross = jax.vmap(crossover)
    half = pop_size // 2

    def fit(states, prob):
        return fitness(states, prob, p)

    # The search is a few jitted programs that the first step (``start``) and every generation
    # share: the population's mutation and its repair with the fitness are compiled once and
    # called by both (as two fused programs, start and generation, they held two compiled copies
    # of the mutation and repair; compiling those copies was most of a short search's time).
    # The random keys are the same draws as in one program, so the results are too.

    @jax.jit
    def mutate_pop(keys, states, prob):
        return mut(keys, states, prob)

    @jax.jit
    def repair_fit(keys, states, prob, avoid):
        states = rep(keys, states, prob, avoid)
        return states, fit(states, prob)

    @jax.jit
    def offspring(pop, f, kg, g):
        ks, kc, km, kr = jax.random.split(jax.random.fold_in(kg, g), 4)
        # binary tournament for 2 * half parents (drawn flat: the numbers of shape (2, pop_size),
        # jax.random counts elements by their flat index, and a smaller program)
        cand = jax.random.randint(ks, (2 * pop_size,), 0, pop_size).reshape(2, pop_size)
        par = jnp.where(f[cand[0]] >= f[cand[1]], cand[0], cand[1])
        a, b = pop[par[:half]], pop[par[half:]]
        o1, o2 = cross(jax.random.split(kc, half), a, b)
        return jnp.concatenate([o1, o2]), jax.random.split(km, pop_size), jax.random.split(kr, pop_size)

    @jax.jit
    def survive(pop, f, off, f_off):
        allp = jnp.concatenate([pop, off])
        allf = _dedup_penalty(allp, jnp.concatenate([f, f_off]))
        _, idx = jax.lax.top_k(allf, pop_size)
        return allp[idx], allf[idx]

    def generation(pop, f, kg, g, prob, avoid):
        off, k_mut, k_rep = offspring(pop, f, kg, g)
        off, f_off = repair_fit(k_rep, mutate_pop(k_mut, off, prob), prob, avoid)
        return survive(pop, f, off, f_off)

    @jax.jit
    def start_keys(key):
        k0, k1, kg = jax.random.split(key, 3)
        return jax.random.split(k1, pop_size), jax.random.split(k0, pop_size), kg

    @jax.jit
    def seeded(init, base, seed):
        # keeping the current allocation is always a candidate (repair leaves a feasible one as it is)
        init = init.at[0].set(base)
        return init if seed is None else init.at[1 % pop_size].set(seed)

    dedup = jax.jit(_dedup_penalty)

    def start(key, init, prob, seed, mutate_init, avoid):
        k_mut, k_rep, kg = start_keys(key)
        if mutate_init:
            init = mutate_pop(k_mut, init, prob)
        init, f = repair_fit(k_rep, seeded(init, prob.base, seed), prob, avoid)
        return init, dedup(init, f), kg

    @jax.jit
    def finish(pop, prob):
        f_true = fit(pop, prob)
        best = jnp.argmax(f_true)
        return pop[best], f_true[best], pop, f_true, fit(prob.base[None], prob)[0]

    def search(key, init, prob, seed, mutate_init, avoid):
        # A host loop over jitted programs: XLA's CPU backend runs the same body 2-3x slower
        # inside a lax.scan/while loop (measured), and a dispatch is ~0.1 ms.
        pop, f, kg = start(key, init, prob, seed, mutate_init, avoid)
        for g in range(generations):
            pop, f = generation(pop, f, kg, g, prob, avoid)
        return finish(pop, prob)

    return search


_SEARCH_CACHE: dict = {}


def solve(prob: AllocationProblem, key, *, config: GAConfig = GAConfig(), init=None,
          mutate_init: bool = False, seed_greedy: bool = True) -> GAResult:
    """Run the genetic search on one :class:`AllocationProblem` (one jitted call).

    Args:
      prob: the problem (:func:`build_problem`); ``prob.base`` must already be feasible or is
        repaired like any other member.
      key: a ``jax.random`` key or an int seed.
      config: :class:`GAConfig`.
      init: ``int[P, J, N]`` initial population (warm start; repaired first); default
        ``P`` copies of the current allocation, mutated.
      mutate_init: mutate a given ``init`` too (as the default one is).
      seed_greedy: put :func:`greedy_seed` in the initial population (member 1).
    """
    if not isinstance(prob, AllocationProblem):
        raise TypeError(f"prob must be an AllocationProblem (build_problem), got {type(prob).__name__}")
    if not isinstance(config, GAConfig):
        raise TypeError(f"config must be a GAConfig, got {type(config).__name__}")
    key = va.check_key("key", key)
    P = config.pop_size
    J, N = prob.base.shape
    # interference_avoidance is not in the key: it is traced (one program serves both settings)
    cfg_key = (P, config.generations, float(config.p), config.reset_prob, config.zero_row_prob,
               config.zero_elem_prob, bool(config.sparse_repair))
    if cfg_key not in _SEARCH_CACHE:
        _SEARCH_CACHE[cfg_key] = _make_search(*cfg_key)
    search = _SEARCH_CACHE[cfg_key]
    base = jnp.asarray(prob.base, jnp.int32)
    mutate_init = bool(init is None or mutate_init)
    if init is None:
        init = jnp.broadcast_to(base, (P, J, N))
    else:
        init = np.asarray(init)
        if init.ndim != 3 or init.shape[1:] != (J, N):
            raise ValueError(f"init must have shape (P, {J}, {N}), got {init.shape}")
        if init.shape[0] < P:
            init = np.concatenate([init, np.broadcast_to(np.asarray(prob.base), (P - init.shape[0], J, N))])
        init = jnp.asarray(init[:P], jnp.int32)
    seed = jnp.asarray(greedy_seed(prob), jnp.int32) if seed_greedy else None
    avoid = np.asarray(bool(config.interference_avoidance))  # traced in start and generation
    alloc, f, pop, pf, f_base = search(key, init, prob, seed, mutate_init, avoid)
    return GAResult(np.asarray(alloc), float(f), np.asarray(pop), np.asarray(pf), float(f_base))


# ---------------------------------------------------------------------------------------
# Speedup tables (Eq 3.12) and the problem of one decision
# ---------------------------------------------------------------------------------------


def _goodput_opt_fn():
    def t_iter(prm, n, k, m, s):  # Eq 3.8, apps._t_iter's formula
        a_g, b_g, a_l, b_l, a_n, b_n, gamma = (prm[..., i] for i in range(7))
        t_grad = a_g + b_g * m
        retro = jnp.maximum(k - 2, 0)
        t_sync = jnp.where(k <= 1, 0.0, jnp.where(n <= 1, a_l + b_l * retro, a_n + b_n * retro))
        hi, lo = jnp.maximum(t_grad, t_sync), jnp.minimum(t_grad, t_sync)
        r = jnp.where(hi > 0, lo / jnp.where(hi > 0, hi, 1.0), 0.0)
        rp = jnp.where(r > 0, jnp.where(r > 0, r, 1.0) ** gamma, 0.0)
        return s * t_grad + hi * (1.0 + rp) ** (1.0 / gamma)

    @jax.jit
    def goodput_opt(prm, phi, m0, mmax, mlo, mhi, fixed, n, k):
        """Max goodput over 50 geometric total batch sizes (goodput.py optimize), per job
        row and allocation column: prm [J, 7], per-job scalars [J], n, k [J, K]."""
        eps = 1e-4  # float32: candidate batch sizes carry relative errors ~1e-7
        col = lambda v: v[:, None, None]  # noqa: E731
        n, k = n[..., None].astype(jnp.float32), k[..., None].astype(jnp.float32)
        lo = jnp.maximum(col(m0), col(mlo) * k)
        t = jnp.linspace(0.0, 1.0, _N_CANDIDATES)
        hi = jnp.maximum(col(mmax), 1.0)
        geo = jnp.exp(jnp.log(lo) + (jnp.log(hi) - jnp.log(lo)) * t)  # np.geomspace
        geo = jnp.where(t == 0, lo, jnp.where(t == 1, hi, geo))  # exact endpoints
        isfixed = col(fixed) > 0
        M = jnp.where(isfixed, col(fixed), geo)
        local = M / k
        s = jnp.ceil(local / col(mhi) - eps) - 1
        s = jnp.where((k == 1) & (local > col(m0) + eps), jnp.maximum(s, 1), s)
        s = jnp.maximum(s, 0)
        atomic = jnp.ceil(local / (s + 1) - eps)
        atomic = jnp.where(isfixed, jnp.minimum(atomic, jnp.floor(col(mmax) / (k * (s + 1)))), atomic)
        ok = jnp.where(isfixed, atomic >= 1, (col(mlo) <= atomic) & (atomic <= col(mhi)))
        atomic = jnp.maximum(atomic, 1.0)
        tot = k * atomic * (s + 1)
        p = phi[:, None, None]
        inf = jnp.isinf(p)
        pf = jnp.where(inf, 0.0, p)
        eff = jnp.where(inf, 1.0, (pf + col(m0)) / (pf + tot))  # Eq 3.3
        eff = jnp.where(isfixed, 1.0, eff)  # non-adaptive jobs: EFFICIENCY fixed to 1 (Sec 3.4.2)
        g = tot / t_iter(prm[:, None, None, :], n, k, atomic, s) * eff
        return jnp.max(jnp.where(ok, g, 0.0), axis=-1)

    return goodput_opt


_GOODPUT_OPT = []


def _bucket(n: int) -> int:
    """The padded size of a dimension of ``n``: the next power of two, at least 8."""
    return max(8, 1 << (max(n, 1) - 1).bit_length())


def _goodput_opt(prm, phi, m0, mmax, mlo, mhi, fixed, n, k):
    # Pads the jobs J and the allocation columns K to power-of-two buckets so that one
    # compilation serves the decisions of a run with different job counts and caps. Every
    # output entry depends only on its own row's inputs and (n, k) column (the reduction is
    # over the batch-size candidates), so padding with copies of row 0 / column 0 and
    # slicing them off leaves the result unchanged.
    if not _GOODPUT_OPT:
        _GOODPUT_OPT.append(_goodput_opt_fn())
    J, K = n.shape
    if J == 0 or K == 0:
        return np.asarray(_GOODPUT_OPT[0](prm, phi, m0, mmax, mlo, mhi, fixed, n, k))
    Jp, Kp = _bucket(J), _bucket(K)
    rows = np.concatenate([np.arange(J), np.zeros(Jp - J, np.int64)])
    cols = np.concatenate([np.arange(K), np.zeros(Kp - K, np.int64)])
    per_job = [np.asarray(a)[rows] for a in (prm, phi, m0, mmax, mlo, mhi, fixed)]
    n, k = np.asarray(n)[rows][:, cols], np.asarray(k)[rows][:, cols]
    return np.asarray(_GOODPUT_OPT[0](*per_job, n, k))[:J, :K]


def speedup_tables(apps, app_ids, phi, *, max_nodes: int, max_replicas: int, base_nodes=1, base_replicas=1,
                   fixed_batch_size=None, prior=None) -> np.ndarray:
    """``float64[J, max_nodes + 1, max_replicas + 1]``: each job's goodput-optimal goodput on
    ``(n, r)`` relative to its goodput on ``(base_nodes, base_replicas)`` (Eq 3.12).

    Goodput (Eq 3.1) uses the application's fitted throughput model (Eq 3.8, ``AppSet.params``)
    and the job's PGNS ``phi`` (Eq 3.3); its maximum over the batch size is taken, as in the
    artifact's ``GoodputFunction.optimize``, over 50 total batch sizes spaced geometrically
    in ``[max(M0, min_local_bsz * r), max_batch_size]``, each split into per-GPU batch and
    accumulation steps within the per-GPU limits (so it is within a few per cent of
    ``AppModel.speedup``'s exact optimum). Jobs with ``fixed_batch_size > 0`` keep that total
    batch size (split like ``AppSet.split_batch_size``) and have EFFICIENCY 1 (Sec 3.4.2,
    "supporting non-adaptive jobs"). Jobs with ``prior`` true have never run: their speedup
    is the optimistic ``r / base_replicas`` (the artifact's speedup before any fit).
    Entries with ``n > r`` or ``n = 0 < r`` are 0 (no allocation reads them).
    """
    if not isinstance(apps, AppSet):
        raise TypeError(f"apps must be an AppSet, got {type(apps).__name__}")
    ids = apps._ids(app_ids).reshape(-1)
    J = ids.size
    phi = np.broadcast_to(np.asarray(phi, np.float64), (J,))
    va.check_real("phi", phi, lo=0.0, allow_inf=True)
    N1 = va.check_int("max_nodes", max_nodes, lo=1) + 1
    R1 = va.check_int("max_replicas", max_replicas, lo=1) + 1
    bn = np.broadcast_to(np.asarray(base_nodes, np.int64), (J,))
    br = np.broadcast_to(np.asarray(base_replicas, np.int64), (J,))
    if np.any(bn < 1) or np.any(br < bn):
        raise ValueError(f"base_nodes and base_replicas must satisfy 1 <= base_nodes <= base_replicas, got "
                         f"{base_nodes}, {base_replicas}")
    fixed = np.zeros(J) if fixed_batch_size is None else np.broadcast_to(
        np.asarray(fixed_batch_size, np.float64), (J,))
    va.check_real("fixed_batch_size", fixed, lo=0.0)
    prior = np.zeros(J, bool) if prior is None else np.broadcast_to(np.asarray(prior, bool), (J,))
    nn, rr = np.meshgrid(np.arange(N1), np.arange(R1), indexing="ij")
    ok = (nn >= 1) & (nn <= rr)
    grid_n = np.concatenate([np.where(ok, nn, 1).reshape(-1)[None, :].repeat(J, 0), bn[:, None]], 1)
    grid_r = np.concatenate([np.where(ok, rr, 1).reshape(-1)[None, :].repeat(J, 0), br[:, None]], 1)
    f32 = np.float32
    g = np.asarray(_goodput_opt(
        apps.params[ids].astype(f32), phi.astype(f32), apps.init_batch_size[ids].astype(f32),
        apps.max_batch_size[ids].astype(f32), apps.min_local_bsz[ids].astype(f32),
        apps.max_local_bsz[ids].astype(f32), fixed.astype(f32), grid_n.astype(np.int32),
        grid_r.astype(np.int32)), np.float64)
    base = g[:, -1:]
    with np.errstate(divide="ignore", invalid="ignore"):
        tab = np.where(base > 0, g[:, :-1] / np.where(base > 0, base, 1.0), 0.0)
    tab = tab.reshape(J, N1, R1)
    tab = np.where(prior[:, None, None], rr[None] / br[:, None, None].astype(np.float64), tab)
    tab = np.where(ok[None], tab, 0.0)
    if not np.all(np.isfinite(tab)):
        raise ValueError("speedup table is not finite (check phi and the applications' parameters)")
    return tab


def job_caps(apps, app_ids, max_gpus_seen, *, total_gpus: int, config: GAConfig = GAConfig()) -> np.ndarray:
    """Most GPUs each job may get (the artifact's ``max_replicas``): ``min(max(2 * most GPUs
    seen, 1), 64, max_batch_size // min_local_bsz, total GPUs)``, or the application's fixed
    count (:attr:`GAConfig.fixed_replicas`, NCF: 1)."""
    ids = apps._ids(app_ids).reshape(-1)
    seen = np.asarray(max_gpus_seen, np.float64).reshape(-1)
    va.check_real("max_gpus_seen", seen, lo=0.0)
    cap = np.minimum.reduce([
        np.maximum(np.floor(config.cap_factor * seen), 1),
        np.full(ids.size, config.max_job_gpus),
        apps.max_batch_size[ids] // apps.min_local_bsz[ids],
        np.full(ids.size, total_gpus)]).astype(np.int64)
    for name, c in config.fixed_replicas.items():
        if name in apps.names:
            cap = np.where(ids == apps.names.index(name), min(int(c), total_gpus), cap)
    return cap


def build_problem(speedup, base, cap, capacity, factor, *, max_job_nodes: int = 16,
                  pad_to: int = _JOB_PAD) -> AllocationProblem:
    """Stack one decision's arrays into an :class:`AllocationProblem`, padding the jobs to a
    multiple of ``pad_to`` with empty rows (cap 0) so that one compilation serves intervals
    with different numbers of jobs. Rows must already be in priority order."""
    speedup = np.asarray(speedup, np.float64)
    base = np.asarray(base)
    if speedup.ndim != 3:
        raise ValueError(f"speedup must be [J, nodes+1, replicas+1], got shape {speedup.shape}")
    J = speedup.shape[0]
    if base.ndim != 2 or base.shape[0] != J:
        raise ValueError(f"base must be int[{J}, N], got shape {base.shape}")
    va.check_integer_value("base", base, lo=0)
    cap = np.broadcast_to(np.asarray(cap), (J,))
    va.check_integer_value("cap", cap, lo=0)
    capacity = np.broadcast_to(np.asarray(capacity), (base.shape[1],))
    va.check_integer_value("capacity", capacity, lo=0)
    factor = np.broadcast_to(np.asarray(factor, np.float64), (J,))
    va.check_real("factor", factor, lo=0.0)
    if np.any(cap > speedup.shape[2] - 1):
        raise ValueError(f"cap must be <= {speedup.shape[2] - 1} (the table's replicas), got max {cap.max()}")
    Jp = max(pad_to, -(-J // pad_to) * pad_to)
    pad = Jp - J
    sp = np.concatenate([speedup, np.zeros((pad,) + speedup.shape[1:])])
    return AllocationProblem(
        speedup=jnp.asarray(sp, jnp.float32),
        base=jnp.asarray(np.concatenate([base, np.zeros((pad, base.shape[1]), base.dtype)]), jnp.int32),
        cap=jnp.asarray(np.concatenate([cap, np.zeros(pad, np.int64)]), jnp.int32),
        capacity=jnp.asarray(capacity, jnp.int32),
        factor=jnp.asarray(np.concatenate([factor, np.ones(pad)]), jnp.float32),
        valid=jnp.asarray(np.arange(Jp) < J),
        max_nodes=jnp.asarray(va.check_int("max_job_nodes", max_job_nodes, lo=1), jnp.int32),
    )


def cluster_utility(speedup_one_gpu, alloc, total_gpus) -> float:
    """The artifact's cluster utility (``simulator.py`` ``Cluster.get_utility``): the sum
    of the jobs' speedups relative to one GPU divided by the cluster's GPUs (1 = every GPU
    as useful as a job's single GPU)."""
    tab = np.asarray(speedup_one_gpu)
    alloc = np.asarray(alloc)
    n = np.minimum((alloc > 0).sum(-1), tab.shape[1] - 1)
    r = np.minimum(alloc.sum(-1), tab.shape[2] - 1)
    return float(tab[np.arange(tab.shape[0]), n, r].sum() / va.check_int("total_gpus", total_gpus, lo=1))


# ---------------------------------------------------------------------------------------
# The scheduler with its warm start, and the simulator's Policy
# ---------------------------------------------------------------------------------------


class Decision(NamedTuple):
    """What :meth:`PolluxSched.decide` found (rows in the jobs' given order).

    ``alloc`` ``int[J, N]``; ``fitness`` Eq 3.11 of it; ``base_fitness`` that of keeping the
    current allocation; ``utility`` :func:`cluster_utility` of ``alloc``; ``speedup_one_gpu``
    the jobs' ``[J, N1, R1]`` speedups relative to one GPU; ``caps`` ``int[J]``."""

    alloc: np.ndarray
    fitness: float
    base_fitness: float
    utility: float
    speedup_one_gpu: np.ndarray
    caps: np.ndarray


def _job_inputs(jobs, total_gpus: int, max_nodes: int, config: GAConfig):
    """Speedup tables (relative to one GPU and scaled Eq 3.12 fitness speedups), caps and
    REALLOC_FACTORs of the jobs of a :class:`~scarjax.sched.simulator.JobsView`."""
    apps = jobs.apps
    ids = apps._ids(jobs.app_ids).reshape(-1)
    J = ids.size
    adaptive = np.asarray(jobs.adaptive, bool).reshape(J)
    profiled = (np.asarray(jobs.max_gpus_seen).reshape(J) > 0) if getattr(jobs, "profiled", None) is None \
        else np.asarray(jobs.profiled, bool).reshape(J)
    m0 = apps.init_batch_size[ids]
    bsz = np.maximum(np.asarray(jobs.batch_size, np.float64).reshape(J), m0)
    phi_seen = getattr(jobs, "phi", None)
    phi = apps.pgns(ids, bsz, np.asarray(jobs.progress, np.float64).reshape(J))
    if phi_seen is not None:
        ps = np.asarray(phi_seen, np.float64).reshape(J)
        phi = np.where(np.isnan(ps), phi, ps)
    phi = np.where(np.isnan(phi), np.inf, phi)
    fixed = np.where(adaptive, 0.0, np.asarray(jobs.user_batch_size, np.float64).reshape(J))
    caps = job_caps(apps, ids, jobs.max_gpus_seen, total_gpus=total_gpus, config=config)
    fair_r = int(math.ceil(total_gpus / max(J, 1)))
    r_max = max(min(config.max_job_gpus, total_gpus), fair_r, int(caps.max(initial=1)))
    n_max = min(config.max_job_nodes, max_nodes)
    one = speedup_tables(apps, ids, phi, max_nodes=n_max, max_replicas=r_max, fixed_batch_size=fixed,
                         prior=~profiled)
    if config.speedup_base == "fair":
        # a_f = ceil(G / J) GPUs on ceil(N * (1/G)) = 1 node, scaled by N/G (pollux.py Problem.__init__)
        base = one[:, 1, fair_r]
        with np.errstate(divide="ignore", invalid="ignore"):
            fit_tab = np.where(base[:, None, None] > 0, one / np.where(base > 0, base, 1.0)[:, None, None], 0.0)
        fit_tab = fit_tab * (max_nodes / total_gpus)
    else:
        fit_tab = one
    factor = realloc_factor(jobs.age_s, jobs.restarts, config.restart_delay_s).reshape(J)
    return one, fit_tab, caps, factor


class PolluxSched:
    """PolluxSched with its state between intervals (the previous population, for the warm
    start). :meth:`decide` runs one decision; see the module docstring.

    Args:
      config: :class:`GAConfig`.
    """

    def __init__(self, config: GAConfig = GAConfig()):
        if not isinstance(config, GAConfig):
            raise TypeError(f"config must be a GAConfig, got {type(config).__name__}")
        self.config = config
        self.reset()

    def reset(self) -> None:
        """Forget the saved population (a new simulation)."""
        self._prev_pop = None
        self._prev_ids = None

    def _warm_start(self, ids_sorted: np.ndarray, Jp: int, N: int):
        if self._prev_pop is None:
            return None
        prev, prev_ids = self._prev_pop, self._prev_ids
        P = prev.shape[0]
        out = np.zeros((P, Jp, N), np.int32)
        where = {int(k): i for i, k in enumerate(prev_ids.tolist())}
        src = np.array([where.get(int(k), -1) for k in ids_sorted.tolist()], np.int64)
        dst = np.flatnonzero(src >= 0)
        n = min(N, prev.shape[2])
        out[:, dst, :n] = prev[:, src[dst], :n]
        return out

    def decide(self, jobs, cluster, key) -> Decision:
        """One scheduling decision for the jobs of a ``JobsView`` on ``cluster`` (nodes,
        gpus_per_node); ``key``: a ``jax.random`` key or int seed. Returns :class:`Decision`."""
        cfg = self.config
        N, gpn = va.check_int("cluster.nodes", cluster.nodes, lo=1), va.check_int(
            "cluster.gpus_per_node", cluster.gpus_per_node, lo=1)
        G = N * gpn
        J = len(jobs.ids)
        if J == 0:
            return Decision(np.zeros((0, N), np.int64), float("nan"), float("nan"), 0.0,
                            np.zeros((0, 1, 1)), np.zeros(0, np.int64))
        alloc = np.asarray(jobs.alloc, np.int64)
        if alloc.shape != (J, N):
            raise ValueError(f"jobs.alloc must be int[{J}, {N}] (jobs x cluster.nodes), got shape {alloc.shape}")
        one, fit_tab, caps, factor = _job_inputs(jobs, G, N, cfg)
        order = np.lexsort((np.asarray(jobs.submit_time, np.float64), np.asarray(jobs.attained_gpu_s, np.float64)))
        prob = build_problem(fit_tab[order], alloc[order], caps[order], np.full(N, gpn), factor[order],
                             max_job_nodes=cfg.max_job_nodes)
        Jp = prob.base.shape[0]
        ids_sorted = np.asarray(jobs.ids)[order]
        init = self._warm_start(ids_sorted, Jp, N)
        res = solve(prob, key, config=cfg, init=init)
        self._prev_pop, self._prev_ids = res.population, ids_sorted
        out = np.zeros((J, N), np.int64)
        out[order] = res.alloc[:J]
        return Decision(out, res.fitness, res.base_fitness, cluster_utility(one, out, G), one, caps)


class PolluxPolicy:
    """The :class:`~scarjax.sched.simulator.Policy` running :class:`PolluxSched` every
    interval (adaptive: jobs pick their goodput-optimal batch size for their allocation).

    Args:
      config: :class:`GAConfig` (``p``, interference avoidance, population, generations, ...).
      **overrides: fields of :class:`GAConfig` (e.g. ``p=-10``).
    """

    name = "pollux"
    adaptive = True

    def __init__(self, config: GAConfig | None = None, **overrides):
        config = GAConfig() if config is None else config
        if not isinstance(config, GAConfig):
            raise TypeError(f"config must be a GAConfig, got {type(config).__name__}")
        self.config = replace(config, **overrides) if overrides else config
        self.sched = PolluxSched(self.config)
        self.last: Decision | None = None

    def reset(self) -> None:
        self.sched.reset()
        self.last = None

    def allocate(self, jobs, cluster, now: float, key) -> np.ndarray:
        """``int[len(jobs), cluster.nodes]``: the fittest allocation found (Eq 3.11) by the
        search under ``key`` (the decision's JAX PRNG key, or an int seed; ``now``: seconds,
        unused)."""
        self.last = self.sched.decide(jobs, cluster, key)
        return self.last.alloc


def assert_feasible(alloc, *, capacity, cap=None, max_job_nodes=None, interference_avoidance=False) -> None:
    """Raise ``AssertionError`` naming the first violated constraint of ``alloc`` (``int[J, N]``
    or ``int[P, J, N]``): negative entries, a node over ``capacity``, a job over its ``cap``
    or spanning more than ``max_job_nodes`` nodes, two distributed jobs on one node."""
    a = np.asarray(alloc)
    a = a[None] if a.ndim == 2 else a
    if a.ndim != 3:
        raise ValueError(f"alloc must be int[J, N] or int[P, J, N], got shape {np.shape(alloc)}")
    if np.any(a < 0):
        p, j, n = np.argwhere(a < 0)[0]
        raise AssertionError(f"negative allocation: member {p}, job {j}, node {n}: {a[p, j, n]}")
    capacity = np.broadcast_to(np.asarray(capacity), a.shape[2:])
    used = a.sum(1)
    if np.any(used > capacity):
        p, n = np.argwhere(used > capacity)[0]
        raise AssertionError(f"node {n} over capacity in member {p}: {used[p, n]} GPUs > {capacity[n]}")
    if cap is not None:
        cap = np.broadcast_to(np.asarray(cap), a.shape[1:2])
        tot = a.sum(2)
        if np.any(tot > cap):
            p, j = np.argwhere(tot > cap)[0]
            raise AssertionError(f"job {j} over its cap in member {p}: {tot[p, j]} GPUs > cap {cap[j]}")
    nodes = (a > 0).sum(2)
    if max_job_nodes is not None and np.any(nodes > max_job_nodes):
        p, j = np.argwhere(nodes > max_job_nodes)[0]
        raise AssertionError(f"job {j} spans {nodes[p, j]} nodes > max_job_nodes {max_job_nodes} in member {p}")
    if interference_avoidance:
        dist = ((a > 0) & (nodes[..., None] > 1)).sum(1)
        if np.any(dist > 1):
            p, n = np.argwhere(dist > 1)[0]
            raise AssertionError(f"node {n} holds {dist[p, n]} distributed jobs in member {p} "
                                 "(interference avoidance allows one)")
