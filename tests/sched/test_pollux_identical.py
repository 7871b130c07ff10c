"""PolluxSched's fast search is the same search: :func:`scarjax.sched.ga.solve` (by default, and with
``GAConfig(sparse_repair=True)``: population-level sparse repair, ``_repair_population``) gives bit-identical allocations, fitness and final populations
to the plain search it replaced (every operator ``vmap``-ed one matrix at a time, the per-matrix
:func:`~scarjax.sched.ga.repair` of the artifact's ``Problem._repair``), kept here as the reference.
Simulations already run with the old search (e.g. the sched_sweeps experiment) stay reproducible."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scarjax.sched import ga as P

CFG = P.GAConfig(pop_size=16, generations=30)  # test_pollux_ga.SMALL: one compilation for both files


_REF_CACHE: dict = {}


def _reference_programs(config):
    """The jitted start/generation/finish of the search before the sparse repair (scarjax commit
    baa339e): every operator ``vmap``-ed over one matrix at a time."""
    key = (config.pop_size, float(config.p), config.interference_avoidance)
    if key in _REF_CACHE:
        return _REF_CACHE[key]
    Pn, half, p = config.pop_size, config.pop_size // 2, config.p
    mut = jax.vmap(lambda k, s, pr: P.mutate(k, s, pr, reset_prob=config.reset_prob,
                                             zero_row_prob=config.zero_row_prob,
                                             zero_elem_prob=config.zero_elem_prob), in_axes=(0, 0, None))
    rep = jax.vmap(lambda k, s, pr: P.repair(k, s, pr, interference_avoidance=config.interference_avoidance),
                   in_axes=(0, 0, None))

    @jax.jit
    def generation(pop, f, kg, g, prob):
        ks, kc, km, kr = jax.random.split(jax.random.fold_in(kg, g), 4)
        cand = jax.random.randint(ks, (2, Pn), 0, Pn)
        par = jnp.where(f[cand[0]] >= f[cand[1]], cand[0], cand[1])
        o1, o2 = jax.vmap(P.crossover)(jax.random.split(kc, half), pop[par[:half]], pop[par[half:]])
        off = rep(jax.random.split(kr, Pn), mut(jax.random.split(km, Pn), jnp.concatenate([o1, o2]), prob), prob)
        allp = jnp.concatenate([pop, off])
        allf = P._dedup_penalty(allp, jnp.concatenate([f, P.fitness(off, prob, p)]))
        _, idx = jax.lax.top_k(allf, Pn)
        return allp[idx], allf[idx]

    @jax.jit
    def start(key, init, prob, seed, mutate_init):
        k0, k1, kg = jax.random.split(key, 3)
        init = jnp.where(mutate_init, mut(jax.random.split(k1, Pn), init, prob), init)
        init = init.at[0].set(prob.base).at[1].set(seed)
        init = rep(jax.random.split(k0, Pn), init, prob)
        return init, P._dedup_penalty(init, P.fitness(init, prob, p)), kg

    @jax.jit
    def finish(pop, prob):
        f_true = P.fitness(pop, prob, p)
        best = jnp.argmax(f_true)
        return pop[best], f_true[best], pop, f_true

    _REF_CACHE[key] = (start, generation, finish)
    return _REF_CACHE[key]


def _reference_search(prob, key, config, init=None):
    start, generation, finish = _reference_programs(config)
    J, N = prob.base.shape
    mutate_init = init is None
    init = jnp.broadcast_to(prob.base, (config.pop_size, J, N)) if init is None else jnp.asarray(init, jnp.int32)
    pop, f, kg = start(jax.random.PRNGKey(key), init, prob, jnp.asarray(P.greedy_seed(prob), jnp.int32),
                       mutate_init)
    for g in range(config.generations):
        pop, f = generation(pop, f, kg, g, prob)
    return tuple(np.asarray(x) if np.ndim(x) else float(x) for x in finish(pop, prob))


def _assert_same(res: P.GAResult, ref) -> None:
    alloc, f, pop, pf = ref
    if not np.array_equal(res.alloc, alloc):
        raise AssertionError(f"solve's allocation differs from the reference search's in "
                             f"{int((res.alloc != alloc).sum())} entries")
    if res.fitness != f:
        raise AssertionError(f"solve's fitness {res.fitness!r} != the reference's {f!r}")
    if not np.array_equal(res.population, pop) or not np.array_equal(res.pop_fitness, pf):
        raise AssertionError("solve's final population differs from the reference search's")


_REPAIR_ONE = jax.jit(P.repair)


def _problem(J=20, N=4, gpn=4, seed=0):
    """A random decision: monotone speedup tables, caps in {1..8}, a feasible current allocation."""
    rng = np.random.default_rng(seed)
    R1, N1 = 17, N + 1
    nn, rr = np.meshgrid(np.arange(N1), np.arange(R1), indexing="ij")
    gain = rng.uniform(0.3, 1.0, (J, 1, 1))
    tab = np.where((nn >= 1) & (nn <= rr), (rr ** gain) * 0.95 ** (nn - 1), 0.0)
    tab *= rng.uniform(0.5, 1.5, (J, 1, 1))
    cap = rng.choice([1, 2, 4, 8], J)
    factor = rng.uniform(0.3, 1.0, J)
    raw = P.build_problem(tab, np.zeros((J, N), np.int64), cap, np.full(N, gpn), factor, max_job_nodes=3)
    x = rng.integers(0, 3, (J, N)) * (rng.random((J, N)) < 0.3)
    base = np.asarray(_REPAIR_ONE(jax.random.PRNGKey(seed), jnp.asarray(
        np.concatenate([x, np.zeros((raw.base.shape[0] - J, N), np.int64)]), jnp.int32), raw))[:J]
    return P.build_problem(tab, base, cap, np.full(N, gpn), factor, max_job_nodes=3)


@pytest.mark.cpu_exact
@pytest.mark.parametrize("seed,avoid,p,warm,sparse", [(0, True, -1.0, False, True), (2, True, -1.0, True, False)])
def test_solve_bit_identical_to_reference_search(seed, avoid, p, warm, sparse):
    from dataclasses import replace

    cfg = replace(CFG, interference_avoidance=avoid, p=p, sparse_repair=sparse)
    prob = _problem(seed=seed)
    init = None
    if warm:  # a warm start: a previous population
        init = P.solve(prob, 99, config=cfg).population
    res = P.solve(prob, seed, config=cfg, init=init)
    _assert_same(res, _reference_search(prob, seed, cfg, init=init))
    P.assert_feasible(res.population, capacity=np.asarray(prob.capacity), cap=np.asarray(prob.cap),
                      max_job_nodes=3, interference_avoidance=avoid)


def test_assert_same_catches_planted_differences():
    prob = _problem(seed=3)
    res = P.solve(prob, 3, config=CFG)
    ref = _reference_search(prob, 3, CFG)
    _assert_same(res, ref)
    with pytest.raises(AssertionError, match="allocation differs from the reference"):
        alloc = ref[0].copy()
        alloc[0, 0] += 1
        _assert_same(res, (alloc,) + ref[1:])
    with pytest.raises(AssertionError, match="fitness .* != the reference"):
        _assert_same(res, (ref[0], np.nextafter(ref[1], 2.0)) + ref[2:])
    with pytest.raises(AssertionError, match="final population differs"):
        pop = ref[2].copy()
        pop[-1, 0, 0] += 1
        _assert_same(res, ref[:2] + (pop, ref[3]))


# Pinned outputs of the search before the sparse repair (scarjax commit baa339e) on _problem(seed=4).
_PINNED_ALLOC_SHA = "454f25c18c28f07540ce4ff1b5cd4f4b91b16769c09fd2c497dd30f2b6838ccb"
_PINNED_FITNESS_HEX = "0x1.75e5800000000p-9"


def _digest(res):
    return hashlib.sha256(np.ascontiguousarray(res.alloc, np.int64).tobytes()
                          + np.ascontiguousarray(res.population, np.int64).tobytes()).hexdigest()


@pytest.mark.cpu_exact
def test_solve_matches_outputs_pinned_before_the_speedup():
    res = P.solve(_problem(seed=4), 4, config=CFG)
    assert _digest(res) == _PINNED_ALLOC_SHA, "allocation/population changed from the pinned search"
    assert float(res.fitness).hex() == _PINNED_FITNESS_HEX, f"fitness {res.fitness!r} changed"


_REP = {}


def _rep_pair(avoid, row_budget, col_budget):
    k = (avoid, row_budget, col_budget)
    if k not in _REP:
        _REP[k] = (jax.jit(jax.vmap(lambda kk, s, pr: P.repair(kk, s, pr, interference_avoidance=avoid),
                                    in_axes=(0, 0, None))),
                   jax.jit(lambda kk, s, pr: P._repair_population(kk, s, pr, interference_avoidance=avoid,
                                                                  row_budget=row_budget, col_budget=col_budget)))
    return _REP[k]


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**20), avoid=st.booleans(), budget=st.sampled_from([(1, 1), (None, None)]),
       hi=st.sampled_from([2, 5]))
def test_population_repair_equals_per_matrix_repair(seed, avoid, budget, hi):
    """Sparse (few violated rows/columns), dense fallback (budget 1) and mixed: always vmap(repair)."""
    prob = _problem(seed=seed % 7)
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.integers(-1, hi, (6,) + prob.base.shape) * (rng.random((6,) + prob.base.shape) < 0.4),
                    jnp.int32)
    keys = jax.random.split(jax.random.PRNGKey(seed), 6)
    old, new = _rep_pair(avoid, *budget)
    np.testing.assert_array_equal(np.asarray(new(keys, x, prob)), np.asarray(old(keys, x, prob)))


def test_true_indices_is_nonzero():
    # compiled as the repair compiles it (eager, its scan's ops compile one by one: ~6x the CPU time)
    true_indices = jax.jit(P._true_indices, static_argnums=1)
    m = jnp.asarray(np.random.default_rng(0).random(300) < 0.05)
    for size in (40,):
        np.testing.assert_array_equal(np.asarray(true_indices(m, size)),
                                      np.asarray(jnp.nonzero(m, size=size, fill_value=m.size)[0]))


_REP_TRACED = (jax.jit(jax.vmap(lambda kk, s, pr, a: P.repair(kk, s, pr, interference_avoidance=a),
                                in_axes=(0, 0, None, None))),
               jax.jit(lambda kk, s, pr, a: P._repair_population(kk, s, pr, interference_avoidance=a)))


def test_traced_avoidance_repairs_as_the_static_setting():
    """solve traces interference_avoidance (one program for both settings): the traced flag
    repairs exactly as the static one, per matrix and per population, and the wrong flag
    (a planted violation) shows the comparison can fail; both settings share one search."""
    prob = _problem(seed=5)
    rng = np.random.default_rng(5)
    x = jnp.asarray(rng.integers(0, 4, (6,) + prob.base.shape) * (rng.random((6,) + prob.base.shape) < 0.5),
                    jnp.int32)
    keys = jax.random.split(jax.random.PRNGKey(5), 6)
    out = {}
    for avoid in (True, False):
        static_one, static_pop = _rep_pair(avoid, None, None)
        want = np.asarray(static_one(keys, x, prob))
        np.testing.assert_array_equal(np.asarray(static_pop(keys, x, prob)), want)
        for traced in _REP_TRACED:
            np.testing.assert_array_equal(np.asarray(traced(keys, x, prob, np.asarray(avoid))), want)
        out[avoid] = want
    assert not np.array_equal(out[True], out[False]), "the planted wrong flag must change the repair"
    before = len(P._SEARCH_CACHE)
    P.solve(prob, 0, config=replace(CFG, interference_avoidance=True))
    P.solve(prob, 0, config=replace(CFG, interference_avoidance=False))
    assert len(P._SEARCH_CACHE) - before <= 1, "both avoidance settings must share one compiled search"


def test_flat_draws_are_the_shaped_draws():
    """The search draws its uniforms (mutate's rows, per member under vmap) and the tournament's
    integers flat and reshapes them (a smaller program): jax.random counts elements by their flat
    index, so they are the numbers of the shaped draws; a flat draw reshaped in the other order
    (a planted violation) differs."""
    J = 32
    keys = jax.random.split(jax.random.PRNGKey(3), 5)
    shaped = jax.vmap(lambda k: jax.random.uniform(k, (2, J, 1)))(keys)
    flat = jax.vmap(lambda k: jax.random.uniform(k, (2 * J,)).reshape(2, J, 1))(keys)
    np.testing.assert_array_equal(np.asarray(flat), np.asarray(shaped))
    planted = jax.vmap(lambda k: jax.random.uniform(k, (2 * J,)).reshape(J, 2).T[..., None])(keys)
    assert not np.array_equal(np.asarray(planted), np.asarray(shaped)), "the planted reordering must differ"
    k = keys[0]
    np.testing.assert_array_equal(np.asarray(jax.random.randint(k, (2 * J,), 0, J).reshape(2, J)),
                                  np.asarray(jax.random.randint(k, (2, J), 0, J)))
