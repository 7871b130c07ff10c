"""The applications' goodput models (scarjax.sched.apps) against their traces and the artifact's
definitions: the fitted throughput model within the thesis's "average error at most 10%" of the
measured step times, progress/completion and gradient statistics as the artifact defines them,
efficiency in (0, 1] and non-increasing in the batch size, goodput positive and finite,
optimize_batch_size's choice optimal, everything deterministic."""

import dataclasses

import numpy as np
import pytest

from scarjax.data import load_app_traces
from scarjax.data import pollux_sim as ps
from scarjax.pollux import ThroughputParams, efficiency
from scarjax.sched import apps as ap
from scarjax.sched import (
    ARTIFACT_SETTINGS,
    FITTED_PARAMS,
    AppSet,
    canonical_placement,
    fit_app_throughput,
    load_apps,
    throughput_fit_error,
)

# the thesis (Sec 3.4.1): "Across all DL tasks, the average error of the fitted model was at most 10%"
MEAN_REL_ERROR = 0.10
RMSLE = 0.15


@pytest.fixture(scope="module")
def apps() -> AppSet:
    return load_apps()


# -- throughput model -------------------------------------------------------------------------


@pytest.mark.parametrize("app", ps.APPLICATIONS)
def test_throughput_fit_within_the_thesis_error(apps, app):
    m = apps[app]
    fe = m.fit_error
    tr = m.traces
    assert fe.n_records == len(tr.placements) + len(tr.scalability)
    assert fe.mean_rel_error <= MEAN_REL_ERROR, fe
    assert fe.rmsle <= RMSLE, fe
    assert fe.mean_rel_error_placements <= MEAN_REL_ERROR + 0.02 and fe.mean_rel_error_scalability <= 0.12, fe
    # the model's step times, recomputed independently of the FitError bookkeeping
    p, s = tr.placements, tr.scalability
    pred = m.model_step_time(np.r_[p.num_nodes, s.num_nodes], np.r_[p.num_replicas, s.num_replicas],
                             np.r_[p.local_bsz, s.local_bsz])
    obs = np.r_[p.step_time, s.step_time]
    assert np.mean(np.abs(pred - obs) / obs) == pytest.approx(fe.mean_rel_error, rel=1e-9)


def test_fit_error_check_can_fail(apps):
    """A wrong model (compute twice as slow) is far outside the bound."""
    m = apps["cifar10"]
    bad = m.params._replace(beta_grad=2 * m.params.beta_grad, alpha_grad=2 * m.params.alpha_grad)
    assert throughput_fit_error(bad, m.traces).mean_rel_error > 2 * MEAN_REL_ERROR
    with pytest.raises(TypeError, match="traces must be an AppTraces"):
        throughput_fit_error(m.params, "cifar10")


def test_model_step_time_is_scarjax_pollux_t_iter(apps):
    from scarjax.pollux import t_iter

    m = apps["deepspeech2"]
    n, k, b, s = np.array([1, 1, 2, 4, 16]), np.array([1, 4, 5, 16, 64]), np.array([10, 20, 33, 80, 57]), 2
    np.testing.assert_allclose(m.model_step_time(n, k, b, s), np.asarray(t_iter(m.params, n, k, b, s)), rtol=1e-5)


def test_stored_params_are_a_refit():
    """FITTED_PARAMS is what fit_app_throughput gives on the embedded traces (one app here;
    all six in the slow test): predicted step times agree to 1e-3, or, where the refit finds
    another local optimum, the stored parameters fit no worse."""
    _check_refit("yolov3")


@pytest.mark.slow
@pytest.mark.parametrize("app", ps.APPLICATIONS)
def test_stored_params_are_a_refit_all(app):
    _check_refit(app)


def _check_refit(app):
    tr = load_app_traces(app)
    fit = fit_app_throughput(tr)
    p, s = tr.placements, tr.scalability
    n, k, b = (np.r_[getattr(p, f), getattr(s, f)] for f in ("num_nodes", "num_replicas", "local_bsz"))
    stored = ap._t_iter(FITTED_PARAMS[app], n, k, b, 0)
    refit = ap._t_iter(fit.params, n, k, b, 0)
    stored_error = ap.app_model(app).fit_error.mean_rel_error
    if np.allclose(stored, refit, rtol=1e-3):
        assert fit.mean_rel_error == pytest.approx(stored_error, rel=1e-3)
    else:
        # The multi-start L-BFGS-B fit can land on another local optimum under another
        # SciPy/XLA build (ImageNet with SciPy 1.17: mean error 0.0717 against the stored
        # 0.0715): the stored parameters must then fit the measurements no worse.
        assert stored_error <= fit.mean_rel_error * (1 + 1e-3), (stored_error, fit.mean_rel_error)


def test_stored_params_only_for_the_embedded_measurements(tmp_path):
    src = ps.embedded_dir() / "traces" / "ncf"
    dst = tmp_path / "ncf"
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    assert ap._is_embedded(load_app_traces("ncf", root=tmp_path))
    text = (dst / "placements.csv").read_text().replace("\n1,32,", "\n1,32,1", 1)  # one step time changed
    (dst / "placements.csv").write_text(text)
    assert not ap._is_embedded(load_app_traces("ncf", root=tmp_path))


# -- progress, completion, gradient statistics --------------------------------------------------


@pytest.mark.parametrize("app", ps.APPLICATIONS)
def test_progress_and_completion_as_the_artifact_defines_them(apps, app):
    m = apps[app]
    tr = load_app_traces(app)
    e = ARTIFACT_SETTINGS[app]["max_epochs"]
    assert m.max_epochs == e and m.init_batch_size == min(tr.batch_sizes) and m.max_batch_size == max(tr.batch_sizes)
    assert m.min_local_bsz == tr.placements.local_bsz.min()
    assert m.max_local_bsz == ARTIFACT_SETTINGS[app].get("max_local_bsz", tr.placements.local_bsz.max())
    # get_progress(epoch) = min over the validated runs of progress[epoch - 1]
    for j in (0, e // 2, e - 1):
        assert m.epoch_progress[j] == min(c.progress[j] for c in tr.validation.values())
    assert m.target_progress == m.epoch_progress[-1] == min(c.progress[e - 1] for c in tr.validation.values())
    b = m.epoch_progress
    assert m.epoch(0.0) == 0 and m.epoch(b[0]) == 1 and m.epoch(np.nextafter(b[0], 0)) == 0
    assert m.epoch(m.target_progress) == e and m.epoch(np.nextafter(m.target_progress, 0)) == e - 1
    np.testing.assert_array_equal(apps.epoch(apps.names.index(app), b), m.epoch(b))


@pytest.mark.parametrize("app", ps.APPLICATIONS)
def test_grad_stats_interpolate_linearly_in_the_batch_size(apps, app):
    m = apps[app]
    tr = load_app_traces(app)
    bs = tr.batch_sizes
    e = m.max_epochs - 1
    for b in bs:  # exactly the file's rows at validated batch sizes
        sqr, var = m.grad_stats(b, e)
        assert (sqr, var) == (tr.validation[b].grad_sqr[e], tr.validation[b].grad_var[e])
    mid = (bs[0] + bs[1]) / 2
    sqr, var = m.grad_stats(mid, 0)
    assert sqr == pytest.approx((tr.validation[bs[0]].grad_sqr[0] + tr.validation[bs[1]].grad_sqr[0]) / 2, rel=1e-12)
    assert var == pytest.approx((tr.validation[bs[0]].grad_var[0] + tr.validation[bs[1]].grad_var[0]) / 2, rel=1e-12)
    assert m.grad_stats(bs[-1] * 4, 0) == m.grad_stats(bs[-1], 0)  # clamped
    assert m.grad_stats(bs[0], 10**6) == m.grad_stats(bs[0], m.max_epochs - 1)
    # PGNS as goodput.py scales it: M0 * grad_var / grad_sqr
    s0, v0 = m.grad_stats(bs[0], 0)
    assert m.pgns(bs[0], 0.0) == pytest.approx(m.init_batch_size * v0 / s0, rel=1e-12)


def test_app_set_agrees_with_each_model(apps):
    rng = np.random.default_rng(0)
    ids = rng.integers(0, len(apps), 200)
    m0, mmax = apps.init_batch_size[ids], apps.max_batch_size[ids]
    bsz = np.exp(rng.uniform(np.log(m0 / 2), np.log(mmax * 2)))
    prog = rng.uniform(0, 1.05) * apps.target_progress[ids]
    sqr, var = apps.grad_stats(ids, bsz, apps.epoch(ids, prog))
    eff = apps.efficiency(ids, bsz, prog)
    for i in range(ids.size):
        m = apps[int(ids[i])]
        assert (sqr[i], var[i]) == pytest.approx(m.grad_stats(bsz[i], m.epoch(prog[i])), rel=1e-12)
        assert eff[i] == pytest.approx(m.efficiency(bsz[i], prog[i]), rel=1e-12)
    k = rng.integers(1, 9, ids.size)
    n = np.maximum(np.minimum(k, rng.integers(1, 3, ids.size)), -(-k // 4))  # <= 4 GPUs per node
    atomic = apps.min_local_bsz[ids]
    rate = apps.progress_rate(ids, n, k, atomic, 1, prog)
    for i in range(0, ids.size, 17):
        m = apps[int(ids[i])]
        assert rate[i] == pytest.approx(m.progress_rate(n[i], k[i], atomic[i], 1, prog[i]), rel=1e-12)
    pl = [tuple(np.diff(np.linspace(0, k[i], n[i] + 1).round()).astype(int)) for i in range(ids.size)]
    assert all(len(p) == n[i] and sum(p) == k[i] and max(p) <= 4 for i, p in enumerate(pl))
    t = apps.measured_step_time(ids, pl, atomic, 1)
    for i in range(0, ids.size, 17):
        assert t[i] == apps[int(ids[i])].measured_step_time(pl[i], atomic[i], 1)
    with pytest.raises(ValueError, match="one placement per job"):
        apps.measured_step_time(ids, pl[:-1], atomic)


# -- efficiency and goodput ---------------------------------------------------------------------


@pytest.mark.parametrize("app", ps.APPLICATIONS)
def test_efficiency_in_0_1_and_non_increasing(apps, app):
    m = apps[app]
    bsz = np.geomspace(m.init_batch_size, m.max_batch_size, 64)
    for prog in np.r_[0.0, m.epoch_progress[:-1]][:: max(1, m.max_epochs // 8)]:
        true = m.efficiency(bsz, prog)  # statistics measured at each batch size (simulated truth)
        assert np.all(true > 0) and np.all(true <= 1) and true[0] == 1.0
        phi = m.pgns(m.init_batch_size, prog)
        fixed = m.efficiency(bsz, phi=phi)  # the scheduler's prediction from the current statistics
        assert np.all(fixed > 0) and np.all(fixed <= 1) and np.all(np.diff(fixed) <= 0)
        np.testing.assert_allclose(fixed, np.asarray(efficiency(bsz, phi, m.init_batch_size)), rtol=1e-5)
        np.testing.assert_allclose(m.efficiency(bsz, prog, stats_batch_size=m.init_batch_size), fixed, rtol=1e-12)
        gain = m.gain(bsz, phi=phi)  # progress per iteration grows with the batch size
        assert np.all(np.diff(gain) >= 0) and gain[0] == 1.0


def test_efficiency_limits():
    assert ap._efficiency(np.array(256.0), ap._phi(0.0, 5.0, 128), 128) == 1.0  # grad_sqr = 0: phi = inf
    assert ap._efficiency(np.array(256.0), ap._phi(3.0, 0.0, 128), 128) == 0.5  # grad_var = 0: phi = 0
    assert ap._phi(0.0, 0.0, 128) == 0.0


def test_monotonicity_check_can_fail(apps):
    """The true efficiency (PGNS measured at each batch size) is not monotone in M: the
    check used above for the fixed-phi prediction would catch it."""
    m = apps["cifar10"]
    bsz = np.geomspace(m.init_batch_size, m.max_batch_size, 64)
    rises = [e for e in range(m.max_epochs) if np.any(np.diff(m.efficiency(bsz, m.epoch_progress[e])) > 0)]
    assert len(rises) > 10, rises


@pytest.mark.parametrize("app", ps.APPLICATIONS)
def test_goodput_positive_and_finite(apps, app):
    m = apps[app]
    rng = np.random.default_rng(1)
    k = rng.integers(1, 65, 300)
    n = np.minimum(k, rng.integers(1, 17, 300))
    atomic = rng.integers(m.min_local_bsz, m.max_local_bsz + 1, 300)
    s = rng.integers(0, 4, 300)
    prog = rng.uniform(0, m.target_progress, 300)
    g = m.goodput(n, k, atomic, s, prog)
    assert g.shape == (300,) and np.all(np.isfinite(g)) and np.all(g > 0)
    rate = m.progress_rate(n, k, atomic, s, prog)
    np.testing.assert_allclose(rate, g / m.init_batch_size, rtol=1e-12)
    # measured (simulated) times on placements of up to 4 nodes x 4 GPUs
    pl = ["1", "4", "22", "13", "44", "444", "1112", "4444"]
    nodes = np.array([len(p) for p in pl])
    reps = np.array([sum(map(int, p)) for p in pl])
    b = np.full(len(pl), m.min_local_bsz)
    gm = m.goodput(nodes, reps, b, 0, m.epoch_progress[0], measured_placement=pl)
    assert np.all(np.isfinite(gm)) and np.all(gm > 0)


# -- measured throughput ----------------------------------------------------------------------


def test_measured_times_are_the_measurements(apps):
    m = apps["imagenet"]
    p = m.traces.placements
    step, sync = m.measured_times(list(p.placement), p.local_bsz)
    np.testing.assert_array_equal(step, p.step_time)
    np.testing.assert_array_equal(sync, p.sync_time)
    # rotations of a placement are the same placement; per-node tuples work too
    assert m.measured_times("211", 40) == m.measured_times((1, 1, 2), 40) == m.measured_times([0, 1, 0, 2, 1], 40)
    # between two measured batch sizes: linear
    i = np.flatnonzero(p.placement == "22")[:2]
    b = (p.local_bsz[i[0]] + p.local_bsz[i[1]]) / 2
    assert m.measured_times("22", b)[0] == pytest.approx(p.step_time[i].mean(), rel=1e-12)
    # beyond 4 nodes: the 3-D interpolation reproduces the scalability measurements
    sc = m.traces.scalability
    j = np.flatnonzero((sc.num_nodes == 8) & (sc.num_replicas == 8))[0]
    assert m.measured_times((1,) * 8, sc.local_bsz[j])[0] == pytest.approx(sc.step_time[j], rel=1e-9)
    step, sync = m.measured_times([(2,) * 6, (4,) * 16, (1,) * 5], [40, 40, 40])
    assert np.all(np.isfinite(step)) and np.all(sync < step)
    np.testing.assert_allclose(m.measured_step_time("22", 40, 2), step22 := m.measured_times("22", 40)[0]
                               + 2 * np.subtract(*m.measured_times("22", 40)))
    assert step22 > 0
    with pytest.raises(ValueError, match="outside the measured range"):
        m.measured_times("1", m.max_local_bsz + 1)
    with pytest.raises(ValueError, match="convex hull"):
        m.measured_times((4,) * 20, 20)  # 80 GPUs: beyond every measurement


def test_canonical_placement():
    assert canonical_placement("211") == "112" and canonical_placement(22) == "22"
    assert canonical_placement((3, 1, 2)) == "123" and canonical_placement([2, 0, 3, 1]) == "123"
    assert canonical_placement((4,) * 5) == "44444"
    for bad, err in (("", ValueError), ("2a", ValueError), ((0, 0), ValueError), ((-1, 2), ValueError),
                     (None, TypeError)):
        with pytest.raises(err, match="placement"):
            canonical_placement(bad)


# -- batch size ---------------------------------------------------------------------------------


def test_optimize_batch_size_is_the_best_configuration(apps):
    m = apps["cifar10"]
    phi = float(m.pgns(m.init_batch_size, m.epoch_progress[m.max_epochs // 2]))
    alloc = [(1, 1), (1, 4), (2, 8), (4, 16)]
    n, k = (np.array(v) for v in zip(*alloc))
    cfg = m.optimize(n, k, phi)
    s_max = -(-m.max_batch_size // m.max_local_bsz)
    for i, (ni, ki) in enumerate(alloc):
        mg, sg = np.meshgrid(np.arange(m.min_local_bsz, m.max_local_bsz + 1), np.arange(s_max + 1), indexing="ij")
        tot = ki * mg * (sg + 1)
        ok = (tot >= m.init_batch_size) & (tot <= m.max_batch_size) & ~((ki == 1) & (sg == 0) & (tot > m.init_batch_size))
        g = m.goodput(ni, ki, mg[ok], sg[ok], phi=phi)
        assert cfg.goodput[i] == pytest.approx(g.max(), rel=1e-4), (ni, ki)
        got = m.goodput(ni, ki, cfg.local_bsz[i], cfg.accum_steps[i], phi=phi)
        assert got == pytest.approx(g.max(), rel=1e-4)
    sp = m.speedup(np.array([0, 1, 2, 4]), np.array([0, 4, 8, 16]), phi)  # one compilation with the above
    assert sp[0] == 0.0 and np.all(sp[1:] > 1)
    np.testing.assert_allclose(sp[1:], cfg.goodput[1:] / cfg.goodput[0], rtol=1e-6)


def test_split_batch_size_follows_the_artifact():
    m = load_apps()["cifar10"]  # M0 128, max 4096, m in [32, 1024]
    # (replicas, batch) -> (atomic, accum)
    cases = {(1, 128): (128, 0), (1, 256): (128, 1), (1, 2048): (1024, 1), (1, 4096): (1024, 3),
             (6, 2048): (342, 0), (3, 4096): (682, 1), (2, 4096): (1024, 1), (5, 4096): (819, 0)}
    for (k, b), want in cases.items():
        assert tuple(int(v) for v in m.split_batch_size(k, b)) == want, (k, b)
    apps = load_apps()
    ids = np.array([apps.names.index("cifar10")] * len(cases))
    ks, bs = (np.array(v) for v in zip(*cases))
    atomic, accum = apps.split_batch_size(ids, ks, bs)
    assert list(zip(atomic.tolist(), accum.tolist())) == list(cases.values())


# -- determinism and arguments ------------------------------------------------------------------


def test_deterministic():
    a = ap.app_model("bert")
    b = ap.app_model("bert")
    assert a is not b
    for f in ("grad_sqr", "grad_var", "epoch_progress", "batch_sizes"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    assert tuple(a.params) == tuple(b.params) and a.fit_error == b.fit_error
    rng = np.random.default_rng(3)
    k = rng.integers(1, 17, 50)
    args = (np.minimum(k, 4), k, rng.integers(4, 13, 50), 1, rng.uniform(0, a.target_progress, 50))
    np.testing.assert_array_equal(a.goodput(*args), b.goodput(*args))
    np.testing.assert_array_equal(a.measured_times("1112", [4, 5, 11]), b.measured_times("1112", [4, 5, 11]))
    assert load_apps() is not load_apps() and load_apps()["bert"] is load_apps()["bert"]  # models cached


def test_bad_arguments(apps):
    m = apps["ncf"]
    with pytest.raises(ValueError, match="nodes must be <= replicas"):
        m.goodput(2, 1, 64, 0, 0.0)
    with pytest.raises(ValueError, match="accum_steps"):
        m.model_step_time(1, 1, 64, -1)
    with pytest.raises(ValueError, match="progress"):
        m.efficiency(512, -1.0)
    with pytest.raises(ValueError, match="give phi or progress"):
        m.efficiency(512, 0.0, phi=3.0)
    with pytest.raises(ValueError, match="app_ids must be < 6"):
        apps.epoch(6, 0.0)
    with pytest.raises(ValueError, match="max_epochs"):
        ap.app_model("bert", max_epochs=3)
    with pytest.raises(TypeError, match="models must be a non-empty sequence"):
        AppSet([])
    with pytest.raises(ValueError, match="distinct names"):
        AppSet([m, m])
    m2 = dataclasses.replace(m, name="ncf2")
    assert AppSet([m, m2]).names == ("ncf", "ncf2")
    assert isinstance(m.params, ThroughputParams)
