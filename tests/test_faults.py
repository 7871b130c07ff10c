"""Tests for scarjax.scar.faults: failures, partial/full recovery, Thms 5.4.1 and 5.4.2, and the
Monte-Carlo failure experiment on MLR."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import scarjax
from scarjax import State
from scarjax import schedules
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults as F
from scarjax.scar import partition as P
from scarjax.scar import simulate as S
from scarjax import tree as tu
from scarjax.hooks import Context
from scarjax.models import mlr
from scarjax.rework import calibrate_near
from scarjax import testing as sxt
from scarjax.testing import strategies as sst

# A hand-made pytree state with optimizer-like aux (any pytree must work).
_SHAPES = {"a": (6, 3), "b": (4,), "c": {"d": (5, 2)}}


def _tree(seed, scale=1.0):
    rng = np.random.default_rng(seed)
    return jax.tree.map(lambda s: jnp.asarray(scale * rng.normal(size=s), jnp.float32), _SHAPES,
                        is_leaf=lambda x: isinstance(x, tuple))


_PARAMS0 = _tree(0)
_PARTS = {
    "row": P.by_row(State(_PARAMS0, {"m": _PARAMS0, "n": jnp.zeros(())}), num_servers=4),
    "element": P.by_element(State(_PARAMS0, {"m": _PARAMS0, "n": jnp.zeros(())}), num_servers=4),
}


def _states(seed, scale=1.0, seed_saved=None):
    """A state and a checkpoint of the hand-made pytree; aux ``m`` is params-shaped (an
    optimizer moment, co-located with its blocks), ``n`` a scalar that is never lost."""
    w = _tree(seed, scale)
    z = _tree(seed + 1 if seed_saved is None else seed_saved, scale)
    return State(w, {"m": w, "n": jnp.float32(3)}), State(z, {"m": z, "n": jnp.float32(1)})


@given(seed=st.integers(0, 10**6), scale=st.floats(1e-3, 1e3), data=st.data())
def test_thm_5_4_1_partial_never_larger(seed, scale, data):
    """Thm 5.4.1 with the kit's check (``sxt.assert_partial_recovery``): for any state,
    checkpoint and lost set (a uniformly random fraction of the blocks, from none to all,
    or the blocks of k of the 4 servers; ``sst.lost_blocks``), on a by-row and a
    by-element partition, ‖δ'‖ ≤ ‖δ‖, and the library's partial recovery reloads exactly
    the lost blocks, the co-located optimizer moment with them."""
    state, saved = _states(seed, scale)
    for part in _PARTS.values():
        lost = data.draw(sst.lost_blocks(part, min_blocks=0))
        case = sxt.assert_partial_recovery(state, saved, part, lost.mask)
        assert float(case.recovered.aux["n"]) == 3.0  # never lost


@settings(max_examples=8)
@given(seed=st.integers(0, 10**6), k=st.integers(1, 16), servers=st.integers(1, 4))
def test_thm_5_4_2_expected_perturbation(seed, k, servers):
    """Thm 5.4.2 with the kit's z-test (``sxt.assert_expected_perturbation``, 2,000 failures,
    false-alarm rate 1e-6 per call): losing a uniformly random fraction p of the blocks,
    E‖δ'‖² = p‖δ‖² (the kit takes p = round(pB)/B, what is lost exactly) for row blocks and
    single entries; the same for k of S failed servers (p = k/S) under a random placement."""
    state, saved = _states(seed, seed_saved=seed + 7)
    p = (k % 15 + 1) / 15  # j of the 15 row blocks
    key = jax.random.key(seed)
    for part, failure in ((_PARTS["row"], F.Failure(fraction=p, when=0)),
                          (_PARTS["element"], F.Failure(fraction=p, when=0)),
                          (_PARTS["row"], F.Failure(servers=servers, when=0))):
        case = sxt.assert_expected_perturbation(state, saved, part, failure, key)
        assert case.p == (servers / 4 if failure.servers else round(p * part.num_blocks) / part.num_blocks)


# --------------------------------------------------------------------------------------
# The SCAR hook on its own (no compiled loop).


class _Alg:
    norm = staticmethod(tu.l2_norm)
    data = {"scale": jnp.float32(2.0)}


def _ctx(step, state):
    return Context(step=jnp.int32(step), key=jax.random.key(step), state=state,
                   initial_params=state.params, algorithm=_Alg())


def _adam_state(v):
    params = {"w": jnp.full((8, 2), float(v))}
    opt = optax.adam(1e-3).init(params)
    opt = jax.tree.map(lambda x: x + v, opt)
    return State(params, opt)


@pytest.mark.parametrize("recovery", ["partial", "full"])
def test_scar_hook_recovers_colocated_optimizer_state(recovery):
    s0 = _adam_state(0)
    part = P.by_row(s0, num_servers=4, key=1)
    calls = []

    def after(state, data):
        calls.append(1)
        return state._replace(params={"w": state.params["w"] * 1.0})

    h = F.scar(part, checkpoint=ck.Checkpoint("full", 1.0, 4),
               failure=F.Failure(servers=1, when=6), recovery=recovery, after_recovery=after)
    hs = h.init(s0, jax.random.key(0))
    apply = jax.jit(lambda s, hs, k: h.apply(s, hs, _ctx(k, s)))
    lost = np.asarray(hs.lost)
    np.testing.assert_array_equal(lost, np.asarray(part.server_of) == np.asarray(part.server_of)[lost][0])
    s4 = _adam_state(4)
    _, hs = apply(s4, hs, jnp.int32(4))  # checkpoint at 4
    s6 = _adam_state(6)
    s6b, hs = apply(s6, hs, jnp.int32(6))  # failure at 6
    assert calls  # the after_recovery callback was traced in
    w, mu, count = s6b.params["w"][:, 0], s6b.aux[0].mu["w"][:, 0], s6b.aux[0].count
    if recovery == "partial":
        np.testing.assert_array_equal(w, np.where(lost, 4, 6))
        np.testing.assert_array_equal(mu, np.where(lost, 4, 6))  # moments lost with params
        assert int(count) == 6  # never lost
    else:
        np.testing.assert_array_equal(w, 4)
        np.testing.assert_array_equal(mu, 4)
        assert int(count) == 4
    s7 = _adam_state(7)
    s7b, _ = apply(s7, hs, jnp.int32(7))  # no further failure
    np.testing.assert_array_equal(s7b.params["w"], 7)


def test_failure_spec_validation():
    with pytest.raises(ValueError, match="exactly one of fraction"):
        F.Failure(when=3)
    with pytest.raises(ValueError, match="exactly one of fraction"):
        F.Failure(fraction=0.5, servers=2, when=3)
    with pytest.raises(TypeError, match="when must be"):
        F.Failure(fraction=0.5)
    with pytest.raises(TypeError, match="when must be"):
        F.Failure(fraction=0.5, when=2.5)
    with pytest.raises(ValueError, match="fraction"):
        F.Failure(fraction=1.5, when=3)
    with pytest.raises(ValueError, match="servers"):
        F.Failure(servers=-1, when=3)
    with pytest.raises(ValueError, match="when"):
        F.Failure(fraction=0.5, when=-2)
    assert isinstance(F.Failure(fraction=0.5, when=3).when, schedules.Schedule)  # at(3)
    assert F.Failure(fraction=0.5, when=3).events() == (("failure.when", 3),)
    part = _PARTS["row"]
    with pytest.raises(ValueError, match="num_servers"):
        F.scar(part, failure=F.Failure(servers=9, when=3))
    with pytest.raises(ValueError, match="recovery"):
        F.scar(part, recovery="magic")
    with pytest.raises(TypeError, match="partition"):
        F.scar(None)


def test_geometric_failure_times():
    t = np.asarray(schedules.geometric(0.1, start=3, stop=20).sample(jax.random.key(0), (20000,)))
    assert t.min() >= 3 and t.max() < 20
    # Truncated geometric: P(T = 3) = q / (1 - (1-q)^17).
    q = 0.1
    np.testing.assert_allclose((t == 3).mean(), q / (1 - (1 - q) ** 17), atol=0.01)
    u = np.asarray(schedules.geometric(0.25, start=0).sample(jax.random.key(1), (20000,)))
    np.testing.assert_allclose(u.mean(), (1 - 0.25) / 0.25, rtol=0.05)


def test_repeated_failures_recover_each_time():
    """A failure every 3 steps (checkpoint every 2): each firing reloads its lost blocks
    from the latest save; the first loses the blocks drawn at init, failure n the blocks
    drawn from fold_in(k_lost, n)."""
    s0 = State({"w": jnp.zeros((12, 2))}, ())
    part = P.by_row(s0, num_servers=4, key=0)
    fail = F.Failure(fraction=0.5, when=schedules.every(3, start=3))
    h = F.scar(part, checkpoint=ck.Checkpoint("full", 1.0, 2), failure=fail)
    assert h.events == (("failure.when", 3),)
    key = jax.random.key(5)
    hs = h.init(s0, key)
    k_lost = jax.random.split(key)[1]
    expect_lost = {3: np.asarray(hs.lost)}
    for n, k in ((1, 6), (2, 9)):
        expect_lost[k] = np.asarray(F.lost_blocks(fail, part, jax.random.fold_in(k_lost, n)))
    assert not np.array_equal(expect_lost[3], expect_lost[6])
    last_save = {3: 2, 6: 4, 9: 8}
    apply = jax.jit(lambda sk, hs, k: h.apply(sk, hs, _ctx(k, sk)))
    for k in range(11):
        sk = State({"w": jnp.full((12, 2), float(k))}, ())
        out, hs = apply(sk, hs, jnp.int32(k))
        w = np.asarray(out.params["w"][:, 0])
        if k in expect_lost:
            np.testing.assert_array_equal(w, np.where(expect_lost[k], last_save[k], k))
            np.testing.assert_array_equal(hs.lost, expect_lost[k])
        else:
            np.testing.assert_array_equal(w, k)
    assert int(hs.failures) == 3
    # In the compiled loop: a recovery (δ > 0) at every firing and nowhere else.
    alg = scarjax.fixed_point(lambda w, d: 0.9 * w + 0.1, jnp.linspace(-2.0, 2.0, 24).reshape(12, 2),
                              lambda w, d: jnp.sum((w - 1.0) ** 2))
    part = P.by_row(State(jnp.zeros((12, 2)), ()), num_servers=4, key=0)
    _, tr = scarjax.run(alg, F.scar(part, checkpoint=ck.Checkpoint("full", 1.0, 2), failure=fail), 13, 0)
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(tr.delta["scar"])), [3, 6, 9, 12])


# Recorded before failure times became schedules, with faults.Geometric(0.05, start=5,
# stop=40).sample / Geometric(0.2, start=1).sample and with the hook
# scar(part, failure=Failure(fraction=0.5, geometric=Geometric(0.05, start=5, stop=40)))
# initialised from key(i) (its fail_at and lost); schedules.geometric must draw the same.
_GEOM_SAMPLES = {(0.05, 5, 40, 3): [6, 34, 20, 37, 10, 17, 6, 12, 8, 7],
                 (0.2, 1, None, 7): [6, 17, 2, 3, 6, 5, 3, 3, 1, 1]}
_GEOM_HOOK_T = [28, 22, 19, 5, 16, 20]
_GEOM_HOOK_LOST = [[1, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 0], [1, 0, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0],
                   [0, 1, 1, 0, 1, 0, 0, 1, 0, 1, 1, 0], [1, 0, 0, 0, 1, 1, 1, 1, 0, 0, 1, 0],
                   [0, 0, 0, 0, 1, 0, 1, 1, 1, 1, 0, 1], [1, 0, 1, 0, 1, 0, 0, 0, 1, 1, 1, 0]]
# scarjax.run(alg below, scar(part, checkpoint=Checkpoint("priority", 0.5, 4),
#   failure=Failure(fraction=0.5, geometric=Geometric(0.1, start=2, stop=12))), 16, seed):
# the failure step, its ‖δ‖ and the loss after it.
_GEOM_RUNS = {0: (6, 0.3952517509460449, [0.3730485737323761, 0.43534255027770996, 0.007842430844902992]),
              1: (4, 0.5538883209228516, [0.9107632040977478, 1.3564447164535522, 0.010008788667619228]),
              2: (4, 0.4295465052127838, [0.9107632040977478, 1.0369386672973633, 0.007651251275092363])}


@pytest.mark.cpu_exact
def test_geometric_schedule_reproduces_the_former_geometric_failure_times():
    for (rate, start, stop, seed), want in _GEOM_SAMPLES.items():
        got = schedules.geometric(rate, start=start, stop=stop).sample(jax.random.key(seed), (10,))
        np.testing.assert_array_equal(got, want)
    st = State(jnp.arange(12.0), ())
    part = P.by_element(st, num_servers=4)
    h = F.scar(part, failure=F.Failure(fraction=0.5, when=schedules.geometric(0.05, start=5, stop=40)))
    hs = jax.jit(jax.vmap(lambda k: h.init(st, k)))(jnp.stack([jax.random.key(i) for i in range(6)]))
    np.testing.assert_array_equal(hs.when, _GEOM_HOOK_T)
    np.testing.assert_array_equal(hs.lost, np.asarray(_GEOM_HOOK_LOST, bool))
    alg = scarjax.fixed_point(lambda w, d: 0.8 * w + 0.1, jnp.linspace(-1.0, 1.0, 8),
                              lambda w, d: jnp.sum((w - 0.5) ** 2))
    part = P.by_element(State(jnp.ones(8), ()), num_servers=4)
    h = F.scar(part, checkpoint=ck.Checkpoint("priority", 0.5, 4),
               failure=F.Failure(fraction=0.5, when=schedules.geometric(0.1, start=2, stop=12)))
    for seed, (T, d_T, losses) in _GEOM_RUNS.items():
        _, tr = scarjax.run(alg, h, 16, seed)  # one compilation: the same hook, another key
        d = np.asarray(tr.delta["scar"])
        assert np.flatnonzero(d).tolist() == [T]
        np.testing.assert_allclose(d[T], d_T, rtol=1e-6)
        np.testing.assert_allclose(np.asarray(tr.loss)[[T, T + 1, 16]], losses, rtol=1e-6)


# --------------------------------------------------------------------------------------
# In the compiled loop and the Monte-Carlo experiment (MLR).


@pytest.fixture(scope="module")
def small_mlr():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(160, 7)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(7, 3)), axis=1)
    alg = mlr.mlr(x, y, num_classes=3, lr=0.5, batch_size=64)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    return alg, P.by_row(s0, num_servers=4, key=0)


_FAIL = F.Failure(fraction=0.5, when=schedules.geometric(0.05, start=5, stop=40))
_CKPT = ck.Checkpoint("priority", 1.0, 8)


_GRID = {"recovery": ["partial", "full"], "fraction": [0.25, 0.5, 1.0]}


@pytest.fixture(scope="module")
def sims(small_mlr):
    alg, part = small_mlr
    res = S.simulate_failures(alg, part, trials=12, steps=80, converge_at=40, failure=_FAIL,
                              checkpoint=_CKPT, grid=_GRID, key=3)
    return res


def test_simulate_failures_partial_vs_full(sims):
    assert sims.rework.shape == (2, 3, 12) and sims.loss.shape == (2, 3, 12, 81)
    assert list(sims.grid["recovery"]) == ["partial", "full"]
    p = jax.tree.map(lambda x: x[0], sims._replace(fail_at=None, eps=None, grid=None, baseline_loss=None))
    f = jax.tree.map(lambda x: x[1], sims._replace(fail_at=None, eps=None, grid=None, baseline_loss=None))
    assert np.all(np.isfinite(p.rework)) and np.all(np.isfinite(f.rework))
    # Thm 5.4.1 inside the loop: same key, same T, same checkpoint -> ‖δ'‖ ≤ ‖δ‖.
    assert np.all(p.delta <= f.delta * (1 + 1e-5) + 1e-6)
    # Full recovery does not depend on how much was lost; losing everything makes the
    # partial recovery a full one.
    np.testing.assert_allclose(f.delta[0], f.delta[2], rtol=1e-6)
    np.testing.assert_allclose(p.delta[2], f.delta[2], rtol=1e-6)
    np.testing.assert_array_equal(p.rework[2], f.rework[2])
    # Less lost -> smaller perturbation and (on average) less rework.
    assert p.delta[0].mean() < p.delta[1].mean() < p.delta[2].mean()
    assert p.rework[0].mean() <= f.rework[0].mean()


def test_simulate_failures_deterministic_and_matches_single_run(small_mlr, sims):
    alg, part = small_mlr
    again = S.simulate_failures(alg, part, trials=12, steps=80, converge_at=40, failure=_FAIL,
                                checkpoint=_CKPT, grid=_GRID, key=3)  # reuses the compiled program
    np.testing.assert_array_equal(again.rework, sims.rework)
    np.testing.assert_array_equal(again.loss, sims.loss)
    # Trial 0 at fraction 0.5 equals a single run with that trial's key and failure time.
    key0 = jax.random.split(jax.random.split(jax.random.key(3))[0], 12)[0]
    h = F.scar(part, checkpoint=_CKPT,
               failure=F.Failure(fraction=0.5, when=int(sims.fail_at[0])))
    _, tr = scarjax.run(alg, h, 80, key0)
    np.testing.assert_allclose(tr.loss, sims.loss[0, 1, 0], rtol=1e-6)
    # The recovery is recorded as δ at T only.
    d = np.asarray(tr.delta["scar"])
    T = int(sims.fail_at[0])
    assert np.count_nonzero(d) == 1 and d[T] > 0
    np.testing.assert_allclose(d[T], sims.delta[0, 1, 0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(tr.point_delta["write"]), d)


_COMPILES: list = []
jax.monitoring.register_event_duration_secs_listener(
    lambda name, secs, **kw: _COMPILES.append(name) if name == "/jax/core/compile/backend_compile_duration" else None)


def test_simulate_failures_compiles_once_for_the_same_specs():
    """Repeated calls with the same spec objects reuse the compiled programs (the hook
    factory compares its specs by identity): no XLA compilation after the first call."""
    alg = scarjax.fixed_point(lambda w, d: 0.5 * w + 0.01, jnp.linspace(1.0, 2.0, 6),
                              lambda w, d: jnp.sum((w - 0.02) ** 2))
    part = P.by_element(State(jnp.ones(6), ()), num_servers=3)
    fail = F.Failure(fraction=0.5, when=schedules.geometric(0.3, start=1, stop=6))
    kw = dict(trials=3, steps=12, converge_at=6, failure=fail)
    first = S.simulate_failures(alg, part, key=0, **kw)
    assert np.all(first.delta > 0)
    n = len(_COMPILES)
    again = S.simulate_failures(alg, part, key=0, **kw)
    other_key = S.simulate_failures(alg, part, key=1, **kw)
    assert len(_COMPILES) == n  # neither call compiled anything
    np.testing.assert_array_equal(again.loss, first.loss)
    assert not np.array_equal(other_key.fail_at, first.fail_at)
    # The factory (run_trials' static argument) is equal for the same objects only, so
    # another spec object, even with the same values, gets its own program.
    same_values = F.Failure(fraction=0.5, when=fail.when)
    f = S._Factory(part, fail, None, "partial", None)
    assert f == S._Factory(part, fail, None, "partial", None)
    assert hash(f) == hash(S._Factory(part, fail, None, "partial", None))
    assert f != S._Factory(part, same_values, None, "partial", None)
    assert f != S._Factory(part, fail, None, "full", None)


def test_simulate_failures_bad_inputs(small_mlr):
    alg, part = small_mlr
    kw = dict(trials=2, steps=20, converge_at=10, failure=_FAIL, checkpoint=_CKPT)
    with pytest.raises(ValueError, match="converge_at"):
        S.simulate_failures(alg, part, **{**kw, "converge_at": 20})
    with pytest.raises(ValueError, match="grid keys"):
        S.simulate_failures(alg, part, **kw, grid={"bogus": [1]})
    with pytest.raises(ValueError, match="fraction"):
        S.simulate_failures(alg, part, **kw, grid={"fraction": [0.5, 2.0]})
    with pytest.raises(ValueError, match="failure times"):
        S.simulate_failures(alg, part, **{**kw, "failure": F.Failure(fraction=0.5, when=15)})
    with pytest.raises(ValueError, match="fire once"):
        S.simulate_failures(alg, part, **{**kw, "failure": F.Failure(fraction=0.5, when=schedules.every(3))})
    with pytest.raises(TypeError, match="algorithm"):
        S.simulate_failures("mlr", part, **kw)
    with pytest.raises(ValueError, match="strategy"):
        S.simulate_failures(alg, part, **kw, grid={"strategy": ["priority", "best"]})
    with pytest.raises(ValueError, match="recovery"):
        S.simulate_failures(alg, part, **kw, grid={"recovery": ["none"]})


def test_calibrate_near_matches_rework_kappa():
    rng = np.random.default_rng(0)
    v = np.exp(-np.arange(100) / 20)[None] + 0.02 * rng.random((5, 100))
    eps = calibrate_near(v, 40)
    k = scarjax.iterations_to(v, eps)
    assert np.all(k >= 40) and np.all(k <= 45)
    with pytest.raises(ValueError, match="settle"):
        calibrate_near(np.ones((2, 50)), 10)
    with pytest.raises(ValueError, match="finite"):
        calibrate_near(np.full((1, 5), np.nan), 2)


def test_lda_documents_recover_with_their_assignments():
    lda = pytest.importorskip("scarjax.models.lda")
    alg = lda.lda((np.array([0, 1, 2, 1, 0, 3, 2, 2]), np.array([0, 0, 0, 1, 1, 2, 2, 3])), n_topics=3)
    dot = np.asarray(lda.doc_of_token(alg))
    s0 = alg.init(jax.random.key(0), alg.data)
    part = P.build(s0, "row", num_servers=2, key=0,
                   aux_blocks=lambda aux, pb: type(aux)(np.asarray(pb)[:, 0][dot], "never", "never"))
    assert part.num_blocks == 4
    np.testing.assert_array_equal(part.blocks.aux.z, dot)
    h = F.scar(part, failure=F.Failure(servers=1, when=3), recovery="partial",
               after_recovery=lda.rebuild_counts)
    hs = h.init(s0, jax.random.key(1))  # the checkpoint is the initial state
    lost_docs = np.asarray(hs.lost)
    z_now = (s0.aux.z + 1) % 3
    cur = lda.rebuild_counts(State(s0.params, s0.aux._replace(z=z_now)), alg.data)
    ctx = Context(step=jnp.int32(3), key=jax.random.key(2), state=cur, initial_params=s0.params,
                  algorithm=alg)
    rec, _ = h.apply(cur, hs, ctx)
    lost_tok = lost_docs[dot]
    np.testing.assert_array_equal(rec.aux.z, np.where(lost_tok, s0.aux.z, z_now))
    # Counts regenerated from the recovered assignments.
    chk = lda.rebuild_counts(rec, alg.data)
    for a, b in zip(jax.tree.leaves(rec), jax.tree.leaves(chk)):
        np.testing.assert_array_equal(a, b)


def test_mf_rows_of_L_and_columns_of_R():
    mf = pytest.importorskip("scarjax.models.mf")
    alg = mf.synthetic(n_users=12, n_items=9, rank=2, factors=2)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    part = P.by_axis(s0, {"L": 0, "R": 1}, num_servers=3)
    assert part.num_blocks == 12 + 9
    assert part.blocks.params["L"].shape == (12, 1) and part.blocks.params["R"].shape == (1, 9)


def test_recovery_as_name_or_index_and_bad_partitions():
    """recovery may be a concrete index into RECOVERIES (what hook_args names map to);
    a partition of another model is refused when the run is traced, naming it."""
    alg = scarjax.fixed_point(lambda w, d: 0.5 * w, jnp.ones(6), lambda w, d: jnp.sum(w ** 2))
    part = P.by_element(State(jnp.ones(6), ()))
    fail = F.Failure(fraction=0.5, when=2)
    by_name = scarjax.run(alg, F.scar(part, failure=fail, recovery="full"), 4, 0)
    by_index = scarjax.run(alg, F.scar(part, failure=fail, recovery=F.RECOVERIES.index("full")), 4, 0)
    np.testing.assert_array_equal(by_name[1].loss, by_index[1].loss)
    with pytest.raises(ValueError, match="recovery as an index"):
        F.scar(part, recovery=2)
    with pytest.raises(ValueError, match="recovery"):
        F.scar(part, recovery=None)
    other = P.by_element(State(jnp.ones(5), ()))
    with pytest.raises(ValueError, match="partition was built for another model"):
        scarjax.run(alg, F.scar(other, failure=fail), 4, 0)
    with pytest.raises(ValueError, match="partition"):
        S.simulate_failures(alg, other, trials=2, steps=6, converge_at=4, failure=fail)
    bad_after = F.scar(part, failure=fail, after_recovery=lambda s, d: State(s.params[:3], s.aux))
    with pytest.raises(ValueError, match="after_recovery"):
        scarjax.run(alg, bad_after, 4, 0)
