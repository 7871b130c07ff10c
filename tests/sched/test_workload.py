"""scarjax.sched.workload: Philly-trace workloads sampled as the Pollux artifact does."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from scarjax.data.pollux_sim import PhillyTrace, load_philly, load_workload
from scarjax.sched.workload import (
    SIZE_CATEGORIES,
    app_configurations,
    job_load,
    sample_workload,
    size_category,
    subset,
    write_workload,
)

FIELDS = ("name", "time", "application", "num_replicas", "batch_size")

# Rows of the artifact's own samples at other loads (petuum/adaptdl osdi21-artifact,
# simulator/workloads-0.5/workload-1.csv and workloads-2.0/workload-3.csv): (index, row).
ARTIFACT_ROWS = {
    (0.5, 1): [(0, ("deepspeech2-0", 110, "deepspeech2", 6, 320)), (1, ("cifar10-1", 356, "cifar10", 16, 4096)),
               (21, ("yolov3-21", 11382, "yolov3", 4, 64)), (34, ("bert-34", 15172, "bert", 16, 384)),
               (79, ("imagenet-79", 26786, "imagenet", 32, 6400))],
    (2.0, 3): [(0, ("bert-0", 158, "bert", 12, 384)), (5, ("yolov3-5", 1075, "yolov3", 4, 64)),
               (145, ("imagenet-145", 16082, "imagenet", 48, 6400)), (319, ("cifar10-319", 28739, "cifar10", 6, 2048))],
}


def check_same_workload(ours, ref) -> None:
    """Every field of every job equal."""
    assert len(ours) == len(ref), f"{len(ours)} jobs, expected {len(ref)}"
    for f in FIELDS:
        a, b = getattr(ours, f), getattr(ref, f)
        bad = np.flatnonzero(a != b)
        assert bad.size == 0, f"{f} differs at job {bad[0]}: {a[bad[0]]!r} != {b[bad[0]]!r}"


def check_load(w, load, hours=8) -> None:
    """Jobs per hour = 20 * load, submissions inside the window, sorted, names indexed."""
    rate = len(w) / hours
    assert abs(rate - 20 * load) <= 0.5 / hours, f"{rate} jobs/h, expected {20 * load}"
    assert abs(job_load(w, hours * 3600) - load) <= 1 / 160, f"job_load {job_load(w, hours * 3600)} != {load}"
    assert np.all((w.time >= 0) & (w.time < hours * 3600)), "a submission outside the window"
    assert np.all(np.diff(w.time) >= 0), "submissions not sorted"
    want = [f"{a}-{i}" for i, a in enumerate(w.application.tolist())]
    assert w.name.tolist() == want, "names are not <application>-<index>"


def check_configs(w) -> None:
    """Every job runs a configuration the artifact's tuning allows for its application."""
    for i, (a, k, b) in enumerate(zip(w.application.tolist(), w.num_replicas.tolist(), w.batch_size.tolist())):
        allowed = {(c[0], c[1]) for c in app_configurations(a)}
        assert (k, b) in allowed, f"job {i} ({a}) has configuration {(k, b)} not in {sorted(allowed)}"


@pytest.mark.parametrize("k", range(1, 7))
def test_regenerates_the_artifact_workloads(k):
    check_same_workload(sample_workload(1.0, key=k), load_workload(f"workload-{k}"))


@pytest.mark.parametrize("load,seed", sorted(ARTIFACT_ROWS))
def test_regenerates_the_artifact_other_loads(load, seed):
    w = sample_workload(load, key=seed)
    check_load(w, load)
    for i, row in ARTIFACT_ROWS[(load, seed)]:
        got = (w.name[i], int(w.time[i]), w.application[i], int(w.num_replicas[i]), int(w.batch_size[i]))
        assert got == row


@settings(max_examples=6, deadline=None)
@given(load=st.sampled_from([0.5, 1.0, 1.5, 2.0]), seed=st.integers(0, 10_000))
def test_load_and_configurations(load, seed):
    w = sample_workload(load, key=seed)
    check_load(w, load)
    check_configs(w)
    check_same_workload(sample_workload(load, key=seed), w)  # deterministic per seed


def test_a_jax_key_is_deterministic_and_maps_to_an_artifact_seed():
    """A JAX key samples the artifact's workload of the seed its generator draws first
    (key_rng(key).integers(0, 2**31)); the same key, the same workload; int keys are the
    artifact's seeds themselves."""
    k = jax.random.key(1)
    a, b = sample_workload(0.5, key=k), sample_workload(0.5, key=jax.random.PRNGKey(1))
    check_same_workload(a, b)
    seed = int(np.random.default_rng([0, 1]).integers(0, 2**31))
    check_same_workload(a, sample_workload(0.5, key=seed))
    assert "key=(0, 1)" in a.source and "key=1," in sample_workload(0.5, key=1).source
    with pytest.raises(AssertionError, match="differs at job"):
        check_same_workload(a, sample_workload(0.5, key=jax.random.key(2)))


def test_the_window_in_seconds_is_the_artifacts_in_hours():
    """start_s/duration_s in whole hours select the artifact's hour window exactly; a window of
    any length in seconds keeps only submissions before it ends."""
    one_h = sample_workload(1.0, key=1, duration_s=3600)
    check_load(one_h, 1.0, hours=1)
    half_h = sample_workload(num_jobs=30, key=1, duration_s=1800, start_s=7200 + 1800)
    assert np.all(half_h.time < 1800)


def test_different_seeds_differ():
    a, b = sample_workload(1.0, key=11), sample_workload(1.0, key=12)
    with pytest.raises(AssertionError, match="differs at job"):
        check_same_workload(a, b)


def _synthetic(gpu_hours, n=400):
    """A trace of ``n`` jobs in the window (hours 2-9 of one day), all of the given GPU time."""
    t0 = np.datetime64("2017-10-03T02:00:00", "s")
    ts = t0 + (np.arange(n) * (8 * 3600 // n)).astype("timedelta64[s]")
    dur = np.full(n, 3600.0)
    g = np.full(n, gpu_hours * 3600.0)
    return PhillyTrace(timestamp=ts, duration=dur, num_gpus=np.ones(n, np.int64), gpu_time=g,
                       cluster=np.array(["x"] * n), source="synthetic")


@pytest.mark.parametrize("cat", range(4))
def test_size_category_sets_the_application(cat):
    hours = (0.5, 5.0, 50.0, 500.0)[cat]
    w = sample_workload(num_jobs=100, key=3, trace=_synthetic(hours))
    apps = set(w.application.tolist())
    assert apps <= set(SIZE_CATEGORIES[cat][2])
    if cat <= 1:  # a fair coin between the two applications
        assert apps == set(SIZE_CATEGORIES[cat][2])
    check_configs(w)


def test_category_mix_of_the_trace():
    """Shares of the categories in a big sample follow the eligible trace's GPU-time mix."""
    tr = load_philly()
    w = sample_workload(num_jobs=2000, key=0)
    keep = (tr.duration >= 60) & (tr.gpu_time < 1000 * 3600)
    hour = ((tr.timestamp - np.timedelta64(7200, "s")).astype("datetime64[h]").astype(np.int64)) % 24
    p = np.bincount(size_category(tr.gpu_time[keep & (hour < 8)]), minlength=4) / np.sum(keep & (hour < 8))
    cat_of = {a: c for c, (_, _, apps) in enumerate(SIZE_CATEGORIES) for a in apps}
    q = np.bincount([cat_of[a] for a in w.application.tolist()], minlength=4) / len(w)
    assert np.all(np.abs(p - q) <= 4 * np.sqrt(p * (1 - p) / len(w)) + 1e-3), (p, q)


def test_size_category_bounds():
    np.testing.assert_array_equal(size_category([0, 3599, 3600, 36000 - 1, 36000, 360000, 3.6e6]),
                                  [0, 0, 1, 1, 2, 3, 3])
    with pytest.raises(ValueError, match="gpu_time_s"):
        size_category([-1.0])


def test_configurations_of_the_artifact():
    # the configurations the embedded workloads use (applications.py get_configurations)
    assert [c[:2] for c in app_configurations("ncf")] == [(1, 32768)]
    assert [c[:2] for c in app_configurations("yolov3")] == [(4, 64)]
    assert [c[:2] for c in app_configurations("cifar10")] == [(6, 2048), (8, 2048), (12, 4096), (16, 4096)]
    for a in ("bert", "cifar10", "deepspeech2", "imagenet"):
        assert all(c[2] < 12 * 3600 for c in app_configurations(a))
    with pytest.raises(ValueError, match="lo_util"):
        app_configurations("ncf", 0.8, 0.5)
    with pytest.raises(ValueError, match="app must be one of"):
        app_configurations("mnist")


def test_planted_violations_are_caught():
    w = sample_workload(1.0, key=1)
    bad = subset(w, 159)
    with pytest.raises(AssertionError, match="159 jobs, expected 160"):
        check_same_workload(bad, w)
    with pytest.raises(AssertionError, match="jobs/h, expected 20"):
        check_load(bad, 1.0)
    odd = sample_workload(1.0, key=1)
    object.__setattr__(odd, "batch_size", np.where(np.arange(160) == 7, 999, odd.batch_size))
    with pytest.raises(AssertionError, match="batch_size differs at job 7"):
        check_same_workload(odd, w)
    with pytest.raises(AssertionError, match="job 7 .* not in"):
        check_configs(odd)
    late = sample_workload(1.0, key=1)
    object.__setattr__(late, "time", late.time + 8 * 3600)
    with pytest.raises(AssertionError, match="outside the window"):
        check_load(late, 1.0)


def test_write_read_round_trip(tmp_path):
    w = sample_workload(0.5, key=4)
    check_same_workload(load_workload(write_workload(w, tmp_path / "w.csv")), w)
    s = subset(w, 10)
    assert len(s) == 10 and s.time[-1] <= w.time[10]


def test_errors():
    with pytest.raises(ValueError, match="load"):
        sample_workload(0.0)
    with pytest.raises(ValueError, match="num_jobs"):
        sample_workload(num_jobs=10, trace=_synthetic(1.0, n=5))
    with pytest.raises(TypeError, match="trace"):
        sample_workload(trace=42)
    with pytest.raises(ValueError, match="key"):
        sample_workload(key=-1)
    with pytest.raises(TypeError, match="key"):
        sample_workload(key=1.0)
    with pytest.raises(ValueError, match="start_s"):
        sample_workload(start_s=86400)
    with pytest.raises(ValueError, match="duration_s"):
        sample_workload(duration_s=3600.5)
    with pytest.raises(ValueError, match="duration_s"):
        job_load(sample_workload(0.5, key=4), 0.0)
    with pytest.raises(ValueError, match="lacks the applications"):
        sample_workload(apps={})
