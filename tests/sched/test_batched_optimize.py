"""Eq 3.10 for many jobs in one program (scarjax.pollux.optimize_batch_sizes, AppSet.optimize)
gives what the per-job optimisation (optimize_batch_size, AppModel.optimize) gives; the cluster
simulator chooses its jobs' batch sizes with it.

The two run the same float32 operations, but XLA:CPU's transcendental functions (the ``pow`` of
Eq 3.7) can round differently by one ulp depending on the array's shape (``px.goodput`` on a
scalar and the same value inside a larger array can differ in the last bit), so the comparison
is to float rounding: the same feasibility, goodputs equal to ``rtol = 1e-6``, and the same
configuration unless the goodput is tied to that rounding (a flat goodput, e.g. ``T_grad``
proportional to ``m`` with ``phi = inf``)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax import pollux as px
from scarjax.sched.apps import load_apps

# (max_local_bsz, min_local_bsz, max_accum_steps, require_two_gradients): a few families, so
# that the per-problem reference compiles a few programs only (one each); the batched call mixes
# them in one program.
_FAMILIES = [(12, 4, 6, True), (64, 16, 4, False), (40, 1, 1, True)]
_ACCUM_BOUND = max(f[2] for f in _FAMILIES)
_GRID_BOUND = max(f[0] - f[1] + 1 for f in _FAMILIES)
_pos = st.floats(1e-5, 1.0)
_RTOL = 1e-6


def _assert_same(batched, refs, probs=None):
    """Problem ``b`` of ``batched`` is ``refs[b]`` to float rounding (module docstring); where
    the configurations differ, ``probs[b]``'s goodput at both must tie (``probs=None``: they
    must not differ)."""
    for b, ref in enumerate(refs):
        got = [np.asarray(f)[b] for f in batched]
        want = [np.asarray(f).reshape(()) for f in ref]
        assert [g.dtype for g in got] == [w.dtype for w in want], b
        assert (got[0] > 0) == (want[0] > 0), (b, "feasibility", got, want)
        np.testing.assert_allclose(got[3:], want[3:], rtol=_RTOL, err_msg=f"problem {b}")
        if got[:3] != want[:3]:
            assert probs is not None, (b, "configuration", got[:3], want[:3])
            q = probs[b]
            at = [float(px.goodput(px.ThroughputParams(*q["params"]), q["phi"], q["m0"], q["n"], q["k"], int(c[0]),
                                   int(c[1]))) for c in (got, want)]
            np.testing.assert_allclose(at[0], at[1], rtol=_RTOL, err_msg=f"problem {b}: not a tie")


def _problem(draw_p, zeros, phi, m0_frac, extra, n, k, fam):
    p = [0.0 if z and i != 1 else v for i, (v, z) in enumerate(zip(draw_p[:6], zeros))] + [draw_p[6]]
    m_hi, m_lo, s_max, two = _FAMILIES[fam]
    m0 = max(1.0, m0_frac * m_hi)
    return dict(params=p, phi=phi, m0=m0, n=min(n, k), k=k, max_bsz=int(np.ceil(m0)) + extra, m_hi=m_hi,
                m_lo=m_lo, s_max=s_max, two=two)


_problems = st.builds(
    _problem,
    st.tuples(_pos, _pos, _pos, _pos, _pos, _pos, st.floats(1.0, 10.0)),
    st.lists(st.booleans(), min_size=6, max_size=6),
    st.one_of(st.floats(0.0, 1e5), st.just(float("inf")), st.just(0.0)),
    st.floats(0.0, 1.0),
    st.integers(0, 3000),
    st.integers(1, 4),
    st.integers(1, 20),
    st.integers(0, len(_FAMILIES) - 1),
)


def _batched(probs):
    """One call per value of require_two_gradients (it is one flag for all the problems of a call)."""
    out = [None] * len(probs)
    for two in (False, True):
        sel = [i for i, q in enumerate(probs) if q["two"] == two]
        if not sel:
            continue
        col = lambda key: np.array([probs[i][key] for i in sel])  # noqa: E731, B023
        cfg = px.optimize_batch_sizes(
            col("params"), col("phi"), col("m0"), col("n"), col("k"), max_batch_size=col("max_bsz"),
            max_local_bsz=col("m_hi"), min_local_bsz=col("m_lo"), max_accum_steps=col("s_max"),
            require_two_gradients=two, accum_bound=_ACCUM_BOUND, grid_bound=_GRID_BOUND, block=4)
        for j, i in enumerate(sel):  # block=4: several blocks and a padded last one
            out[i] = [np.asarray(f)[j] for f in cfg]
    return px.BatchConfig(*[np.array([o[f] for o in out]) for f in range(6)])


def _per_problem(probs):
    return [px.optimize_batch_size(px.ThroughputParams(*q["params"]), q["phi"], q["m0"], q["n"], q["k"],
                                   max_batch_size=q["max_bsz"], max_local_bsz=q["m_hi"], min_local_bsz=q["m_lo"],
                                   max_accum_steps=q["s_max"], require_two_gradients=q["two"]) for q in probs]


@settings(max_examples=10, deadline=None)
@given(probs=st.lists(_problems, min_size=1, max_size=11))
def test_batched_equals_per_problem(probs):
    _assert_same(_batched(probs), _per_problem(probs), probs)


def test_comparison_can_fail():
    probs = [_problem((0.01, 1e-3, 0.02, 2e-3, 0.05, 5e-3, 2.0), [False] * 6, 300.0, 0.5, 500, 2, 8, f)
             for f in range(3)]
    out = _batched(probs)
    refs = _per_problem(probs)
    _assert_same(out, refs, probs)
    planted = out._replace(goodput=out.goodput * np.float32(1 + 1e-5))  # above float rounding
    with pytest.raises(AssertionError):
        _assert_same(planted, refs, probs)
    planted = out._replace(local_bsz=out.local_bsz - 1)  # another configuration, not a tie
    with pytest.raises(AssertionError):
        _assert_same(planted, refs, probs)
    with pytest.raises(AssertionError):  # a different problem (another PGNS)
        _assert_same(out, _per_problem([{**probs[0], "phi": 30.0}] + probs[1:]), probs)


@pytest.fixture(scope="module")
def apps():
    return load_apps()


def test_app_set_optimize_is_each_model_optimize(apps):
    """The simulator's batched call against AppModel.optimize (the per-job call it replaces),
    on jobs of two applications (each reference compiles its own program) with random PGNS and
    allocations, infinite and zero PGNS included."""
    rng = np.random.default_rng(0)
    ids = np.array([apps.names.index(a) for a in ("bert", "yolov3")] * 6)
    k = rng.integers(1, 40, ids.size)
    n = np.minimum(rng.integers(1, 11, ids.size), k)
    phi = np.exp(rng.uniform(-3.0, 12.0, ids.size))
    phi[:2], phi[2:4] = np.inf, 0.0
    out = apps.optimize(ids, n, k, phi)
    # the same configurations (no ties here), goodputs to float rounding (they came out
    # bit for bit equal when this test was written)
    _assert_same(out, [apps.models[a].optimize(nj, kj, pj) for a, nj, kj, pj in zip(ids, n, k, phi)])
    assert np.all(out.local_bsz > 0)


def test_bad_arguments(apps):
    p = np.array([[0.01, 1e-3, 0.02, 2e-3, 0.05, 5e-3, 2.0]])
    kw = dict(max_batch_size=64, max_local_bsz=16, min_local_bsz=1)
    with pytest.raises(ValueError, match="params"):
        px.optimize_batch_sizes(p[:, :6], 1.0, 8, 1, 1, **kw)
    with pytest.raises(ValueError, match="phi"):
        px.optimize_batch_sizes(p, -1.0, 8, 1, 1, **kw)
    with pytest.raises(ValueError, match="nodes"):
        px.optimize_batch_sizes(p, 1.0, 8, 2, 1, **kw)
    with pytest.raises(ValueError, match="phi"):
        px.optimize_batch_sizes(p, [1.0, 2.0], 8, 1, 1, **kw)
    with pytest.raises(ValueError, match="accum_bound"):
        px.optimize_batch_sizes(p, 1.0, 8, 1, 1, accum_bound=1, **kw)
    with pytest.raises(ValueError, match="grid_bound"):
        px.optimize_batch_sizes(p, 1.0, 8, 1, 1, grid_bound=3, **kw)
    with pytest.raises(ValueError, match="max_batch_size"):
        px.optimize_batch_sizes(p, 1.0, 100, 1, 1, **kw)
    with pytest.raises(ValueError, match="min_local_bsz"):
        px.optimize_batch_sizes(p, 1.0, 8, 1, 1, max_batch_size=64, max_local_bsz=4, min_local_bsz=5)
    with pytest.raises(ValueError, match="app_ids"):
        apps.optimize([len(apps)], 1, 1, 1.0)
    with pytest.raises(ValueError, match="phi"):
        apps.optimize([0], 1, 1, float("nan"))
    assert px.optimize_batch_sizes(np.zeros((0, 7)) + 1.0, [], [], np.zeros(0, int), np.zeros(0, int),
                                   max_batch_size=np.zeros(0, int), max_local_bsz=np.zeros(0, int),
                                   min_local_bsz=np.zeros(0, int)).local_bsz.shape == (0,)
