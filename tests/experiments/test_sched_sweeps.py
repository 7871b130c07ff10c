"""experiments/sched_sweeps: finish-time fairness helpers and a tiny run end to end."""

import dataclasses
import json

import numpy as np
import pytest

from experiments import sched_sweeps as m


def test_mean_active_jobs_hand_checked():
    # job 0 alone on [0, 10), then with job 1 on [10, 20); job 1 alone on [20, 40)
    n = m.mean_active_jobs([0.0, 10.0], [20.0, 40.0])
    np.testing.assert_allclose(n, [1.5, (2 * 10 + 1 * 20) / 30])


def check_rho(rho: dict) -> None:
    r = np.asarray(rho["rho"], float)
    assert np.all(np.diff(r) >= 0), "rho is not sorted"
    assert rho["max"] == pytest.approx(r.max()), "max rho is not the largest rho"
    assert rho["share_below_2"] == pytest.approx(np.mean(r < 2)), "share_below_2 does not count rho < 2"


def _check_run(tmp_path, cfg, labels):
    m.run(cfg, tmp_path)
    saved = json.loads((tmp_path / "results" / "sched_sweeps.json").read_text())
    assert set(saved["load"]) == set(cfg.policies) and set(saved["load"][cfg.policies[0]]) == {"0.5"}
    n = len(m._workload(0.5, 1, cfg))  # 20 jobs/h x 0.5 x 1 h, ImageNet dropped
    assert 5 <= n <= 10 and saved["load"][cfg.policies[0]]["0.5"]["per_workload"][0]["n_jobs"] == n
    assert set(saved["fairness"]) == set(labels)
    for d in saved["fairness"].values():
        check_rho(d)
        assert len(d["rho"]) == len(m._workload(1.0, 1, cfg)) and min(d["rho"]) > 0
    assert (tmp_path / "paper_figs" / "sched_sweeps.png").stat().st_size > 10_000
    text = m.report(saved)
    for needed in ("2091", "10040", "3354", "3903", "99% of jobs rho < 2", "Quick mode"):
        assert needed in text, needed
    bad = dict(next(iter(saved["fairness"].values())), max=0.0)
    with pytest.raises(AssertionError, match="max rho is not the largest"):
        check_rho(bad)
    return saved


def test_sched_sweeps_baselines_end_to_end(tmp_path):
    cfg = dataclasses.replace(m.Config.quick(), loads=(0.5,), policies=("tiresias", "optimus"), intervals_s=(),
                              interference=(), fairness_p=())
    saved = _check_run(tmp_path, cfg, ["tiresias", "optimus"])
    assert saved["interval"] == {} and saved["interference"] == {}
    assert saved["simulations"] == 4  # 2 policies x (load 0.5, the fairness workload at load 1)


@pytest.mark.slow
def test_sched_sweeps_quick_with_pollux(tmp_path):
    cfg = dataclasses.replace(m.Config.quick(), loads=(0.5,), intervals_s=(240.0,), interference=(("off", 0.5),),
                              fairness_p=(-1.0,), population=10, generations=4)
    saved = _check_run(tmp_path, cfg, ["pollux p=-1", "tiresias"])
    assert set(saved["interval"]) == {"240.0"} and set(saved["interference"]) == {"off/0.5"}
    # Pollux at load 1, the base interval, p = -1 is one run shared by the interval and fairness sweeps
    assert saved["simulations"] == 5
    assert saved["interval"]["240.0"]["avg_jct_s"] == pytest.approx(saved["fairness"]["pollux p=-1"]["avg_jct_s"])


def test_a_job_alone_is_treated_exactly_fairly():
    """Alone on the cluster with its user configuration, a job's shared and isolated runs are
    the same run: rho = 1 (the isolated run waits for the first decision as the job did)."""
    from scarjax.data.pollux_sim import Workload
    from scarjax.sched.apps import load_apps
    from scarjax.sched.simulator import Cluster, simulate
    from scarjax.sched.tiresias import TiresiasPolicy

    w = Workload(name=np.array(["cifar10-0"]), time=np.array([107.0]), application=np.array(["cifar10"]),
                 num_replicas=np.array([6]), batch_size=np.array([2048]), source="one job")
    apps, cl = load_apps(), Cluster()
    res = simulate(w, TiresiasPolicy(), cluster=cl, apps=apps)
    cache = {}
    rho = m.finish_time_fairness(res, w, False, cl, apps, cache)
    np.testing.assert_allclose(rho, [1.0])
    # the check can fail: without the wait for the first decision rho would differ from 1
    (iso,) = cache.values()
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(res.jcts / iso, [1.0])


def test_full_and_artifact_configs():
    """The committed full mode keeps the paper's settings on fewer workloads; artifact() is the
    artifact's 8-workload design; quick() stays small."""
    full, art = m.Config(), m.Config.artifact()
    assert (full.population, full.generations, full.duration_hours, full.interval_s) == (100, 100, 8, 60.0)
    assert full.seeds == (1, 2) and full.sweep_seeds == (1,)
    assert art.seeds == art.sweep_seeds == tuple(range(1, 9))
    assert dataclasses.replace(art, seeds=full.seeds, sweep_seeds=full.sweep_seeds) == full


def _fake_results(comparable=True) -> dict:
    cfg = dataclasses.asdict(m.Config())
    per = lambda v: {"per_workload": [{"avg_jct_s": v}], "avg_jct_s": v, "makespan_s": 3 * v}  # noqa: E731
    rho = {"share_below_2": 1.0, "share_above_4": 0.0, "median": 1.0, "p99": 1.5, "max": 1.5, "rho": [1.0, 1.5],
           "avg_jct_s": 2000.0, "p99_jct_s": 9000.0, "makespan_s": 30000.0}
    return {"config": cfg, "comparable": comparable, "simulations": 3, "seconds": 10.0, "reference": m.reference(),
            "load": {"pollux": {"1.0": per(2000.0), "2.0": per(4000.0)}, "tiresias": {"1.0": per(3000.0), "2.0": per(7000.0)}},
            "interval": {"60.0": per(2000.0), "30.0": per(1900.0)},
            "interference": {"on/0.0": dict(per(2000.0), avoidance="on", slowdown=0.0),
                             "on/0.5": dict(per(2000.0), avoidance="on", slowdown=0.5),
                             "off/0.5": dict(per(2600.0), avoidance="off", slowdown=0.5)},
            "fairness": {"pollux p=-1": rho}}


def check_ratios(res: dict, rat: dict) -> None:
    """Every ratio is the sweep's value over its baseline's, ours and the artifact's."""
    ref = res["reference"]
    for p, d in rat["load"].items():
        for L, r in d.items():
            assert r["ours"] == pytest.approx(res["load"][p][L]["avg_jct_s"] / res["load"]["pollux"]["1.0"]["avg_jct_s"]), \
                f"load ratio of {p} at {L} is not over Pollux at load 1"
            assert r["artifact"] == pytest.approx(ref["load"][p][L] / ref["load"]["pollux"]["1.0"]), \
                f"artifact load ratio of {p} at {L} is not over its Pollux at load 1"
    for k, r in rat["interference"].items():
        assert r["ours"] == pytest.approx(res["interference"][k]["avg_jct_s"] / res["interference"]["on/0.0"]["avg_jct_s"]), \
            f"interference ratio {k} is not over avoidance on/0%"


def test_ratios_to_each_sweeps_baseline_hand_checked():
    res = _fake_results()
    rat = m.ratios(res)
    assert rat["load"]["tiresias"]["1.0"]["ours"] == pytest.approx(1.5)
    assert rat["load"]["pollux"]["2.0"]["artifact"] == pytest.approx(5289.199609375 / 2751.13359375)
    assert rat["interval"]["30.0"] == {"ours": pytest.approx(0.95), "artifact": pytest.approx(2729.1203125 / 2751.13359375)}
    assert rat["interference"]["off/0.5"]["ours"] == pytest.approx(1.3)
    assert rat["interference"]["off/0.5"]["artifact"] == pytest.approx(3903.0570312500004 / 2751.13359375)
    check_ratios(res, rat)
    bad = json.loads(json.dumps(rat))
    bad["load"]["pollux"]["2.0"]["ours"] = 2.0 * 1.05
    with pytest.raises(AssertionError, match="load ratio of pollux at 2.0"):
        check_ratios(res, bad)
    # a sweep without its baseline point has no ratios (never a silent NaN)
    res_nobase = dict(res, interval={"30.0": res["interval"]["30.0"]})
    assert m.ratios(res_nobase)["interval"]["30.0"]["ours"] is None
    text = m.report(res)
    for needed in ("**Full mode**", "ratios", "Config.artifact()", "| pollux | 2x | 4000 | 2.00 | 5289 | 1.92 |",
                   "workload-1, 2", "pollux ours 2000 vs artifact 2706 s (-26%)", "came out identical"):
        assert needed in text, needed
    assert "came out identical" not in m.report(dict(res, interference={
        **res["interference"], "on/0.5": dict(res["interference"]["on/0.5"], avg_jct_s=2100.0)}))
