"""Garbage in, a clear error out, for the systems half of scarjax: the scheduling simulator
(:mod:`scarjax.sched`: ``simulate``, workloads and their sampling, the policies' settings,
the autoscalers), the transient-cluster modules (:mod:`scarjax.cluster`: ``planner``,
``cmdare``, ``lifetimes``, ``profile``, ``bidbrain``, ``syncfly``, ``sweep``) and the newer
loaders (:mod:`scarjax.data`: ``pollux_sim``, ``transient``, ``cmdare``).

The rule is :mod:`tests.test_garbage_in`'s: a malformed argument raises a ``ValueError`` /
``TypeError`` from scarjax's own validation whose message names the argument; never a
silent result, never an error from deep inside NumPy/JAX, never a hang (each case runs
under an alarm). Each row of a table draws malformed values of one argument from a
hypothesis strategy (wrong types, NaN/inf, negative, out of range, empty).
"""

from __future__ import annotations

import contextlib
import math
import signal
import traceback
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import scarjax
from scarjax.cluster import bidbrain, cmdare, lifetimes, planner, profile, sweep, syncfly
from scarjax.cluster import clock as ck
from scarjax.cluster.steptime import step_time_fixed
from scarjax.data import pollux_sim, transient
from scarjax.data import cmdare as cmdare_data
from scarjax.sched import autoscaler, workload as wl
from scarjax.sched.apps import load_apps
from scarjax.sched.ga import GAConfig, PolluxPolicy
from scarjax.sched.simulator import Cluster, check_workload, simulate
from scarjax.sched.tiresias import TiresiasPolicy

PKG = Path(scarjax.__file__).resolve().parent
APPS = load_apps()
FAST = settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.function_scoped_fixture])
TIMEOUT_S = 20


@contextlib.contextmanager
def alarm(seconds: int = TIMEOUT_S):
    """Fail (instead of hanging) when the block runs longer than ``seconds``."""

    def on_alarm(signum, frame):
        raise TimeoutError(f"no answer within {seconds} s: a hang on bad input")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def assert_names(call, name):
    """``call()`` raises a ValueError/TypeError from scarjax code whose message names ``name``
    (within :data:`TIMEOUT_S`); a path that does not exist may raise FileNotFoundError, also
    naming the argument."""
    with alarm(), pytest.raises((ValueError, TypeError, FileNotFoundError)) as info:
        call()
    msg = str(info.value)
    assert name in msg, f"{name!r} not named in: {msg}"
    origin = Path(traceback.extract_tb(info.value.__traceback__)[-1].filename).resolve()
    assert PKG in origin.parents, f"raised outside scarjax ({origin}): {msg}"


# --------------------------------------------------------------------------------------
# Strategies of malformed values.

junk = st.sampled_from([None, "x", b"1", {"a": 1}, object(), 1j, [1, 2]])
not_none = junk.filter(lambda j: j is not None)
scalar_junk = st.sampled_from([None, "x", b"1", {"a": 1}, object(), 1j])  # for arguments that take arrays
nonfinite = st.sampled_from([math.nan, math.inf, -math.inf])
below_zero = st.one_of(st.floats(max_value=-1e-9), st.just(math.nan), st.just(-math.inf))


def bad_real(ok, junk=junk) -> st.SearchStrategy:
    """Numbers failing ``ok`` (NaN and inf included) and junk."""
    return st.one_of(st.floats().filter(lambda x: not ok(x)), nonfinite.filter(lambda x: not ok(x)), junk)


def bad_array_real(ok) -> st.SearchStrategy:
    """For an argument that broadcasts over arrays: numbers failing ``ok`` and non-numbers."""
    return bad_real(ok, scalar_junk)


def bad_int(lo: int, hi: int | None = None) -> st.SearchStrategy:
    """Not an int in ``[lo, hi]``: smaller (larger) ints, non-integral floats, junk."""
    out = [st.integers(max_value=lo - 1), st.floats().filter(lambda x: not (math.isfinite(x) and x.is_integer())),
           junk]
    if hi is not None:
        out.append(st.integers(min_value=hi + 1))
    return st.one_of(*out)


bad_positive = bad_real(lambda x: 0.0 < x < math.inf)
bad_nonneg = bad_real(lambda x: 0.0 <= x < math.inf)
bad_unit = bad_real(lambda x: 0.0 <= x <= 1.0)
bad_text = st.one_of(st.integers(), st.none(), st.floats(), st.just(b"x"))


def bad_choice(choices) -> st.SearchStrategy:
    return st.one_of(st.text(max_size=8).filter(lambda s: s not in choices), st.integers(), st.none())


# --------------------------------------------------------------------------------------
# Fixtures built once.


def _workload(**cols) -> pollux_sim.Workload:
    base = dict(name=np.array(["ncf-0", "bert-1"]), time=np.array([0.0, 20.0]), application=np.array(["ncf", "bert"]),
                num_replicas=np.array([1, 2]), batch_size=np.array([32768, 96]), source="two jobs")
    base.update(cols)
    return pollux_sim.Workload(**base)


WL = _workload()
PRICES = bidbrain.spot_market([0.0, 3600.0], [0.1, 0.2], on_demand=0.5, end_s=7200.0)


def _job() -> ck.Job:
    """A job of the policy contract (BidBrain's work model trains nothing: any algorithm)."""
    return ck.Job(planner.preset_job("qp").algorithm, 0.0, step_time_fixed(1.0))


GRID = np.full((1, 600), 0.1)

# --------------------------------------------------------------------------------------
# The table: (call taking the bad value, the name its error must carry, bad values).

CASES = [
    # scarjax.sched: the simulator and its inputs
    (lambda v: simulate(v, TiresiasPolicy()), "workload", st.one_of(st.integers(), st.none(), st.floats())),
    (lambda v: simulate(WL, v), "policy", junk),
    (lambda v: simulate(WL, TiresiasPolicy(), cluster=v), "cluster", not_none),
    (lambda v: simulate(WL, TiresiasPolicy(), apps=v), "apps", not_none),
    (lambda v: simulate(WL, TiresiasPolicy(), key=v), "key", bad_int(0)),
    (lambda v: simulate(WL, TiresiasPolicy(), max_time_s=v), "max_time_s", bad_positive.filter(lambda v: v is not None)),
    (lambda v: Cluster(nodes=v), "nodes", bad_int(1)),
    (lambda v: Cluster(gpus_per_node=v), "gpus_per_node", bad_int(1, 4)),
    (lambda v: Cluster(interval_s=v), "interval_s", bad_positive),
    (lambda v: Cluster(restart_penalty_s=v), "restart_penalty_s", bad_nonneg),
    (lambda v: Cluster(interference=v), "interference", bad_real(lambda x: 0.0 <= x < 1.0)),
    (lambda v: _workload(time=np.array([0.0, v])), "time", st.one_of(nonfinite, st.floats(max_value=-1e-9))),
    (lambda v: _workload(num_replicas=np.array([1, v])), "num_replicas",
     st.one_of(st.integers(max_value=0), st.floats(0.01, 100).filter(lambda x: not x.is_integer()), nonfinite)),
    (lambda v: _workload(batch_size=np.array([32768, v])), "batch_size",
     st.one_of(st.integers(max_value=0), st.floats(0.01, 1e6).filter(lambda x: not x.is_integer()), nonfinite)),
    (lambda v: _workload(name=np.array(["ncf-0", v])), "name", st.sampled_from(["ncf-0", "", "  "])),
    (lambda v: _workload(application=np.array(["ncf", "bert", v])), "application", st.text(max_size=3)),
    (lambda v: check_workload(_workload(batch_size=np.array([32768, v])), APPS), "batch_size",
     st.integers(385, 10**12)),  # bert: at most 384 (a batch under the per-GPU minimum is allowed, as in the artifact)
    (lambda v: check_workload(_workload(application=np.array(["ncf", v])), APPS), "application",
     st.text(min_size=1, max_size=8).filter(lambda s: s.strip() and s not in APPS.names)),
    (lambda v: wl.sample_workload(v), "load", bad_positive),
    (lambda v: wl.sample_workload(key=v), "key", bad_int(0)),
    (lambda v: wl.sample_workload(num_jobs=v), "num_jobs", bad_int(1).filter(lambda v: v is not None)),
    (lambda v: wl.sample_workload(start_s=v), "start_s", bad_int(0, 86399)),
    (lambda v: wl.sample_workload(duration_s=v), "duration_s", bad_int(1, 86400)),
    (lambda v: wl.app_configurations(v), "app", bad_choice(APPS.names)),
    (lambda v: wl.app_configurations("bert", lo_util=v), "lo_util", bad_unit),
    (lambda v: wl.app_configurations("bert", max_jct_s=v), "max_jct_s", st.one_of(st.floats(max_value=0.0), st.just(math.nan), junk)),  # inf: no limit
    (lambda v: wl.job_load(WL, v), "duration_s", bad_positive),
    (lambda v: wl.subset(WL, v), "first", bad_int(1)),
    (lambda v: wl.size_category(v), "gpu_time_s", st.one_of(nonfinite, st.floats(max_value=-1e-9))),
    # the policies' settings
    (lambda v: TiresiasPolicy(queue_threshold_gpu_s=v), "queue_threshold_gpu_s", bad_nonneg),
    (lambda v: TiresiasPolicy(solve_starvation=v), "solve_starvation", bad_nonneg),
    (lambda v: GAConfig(pop_size=v), "pop_size", bad_int(2)),
    (lambda v: GAConfig(generations=v), "generations", bad_int(0)),
    (lambda v: GAConfig(p=v), "p", st.one_of(st.sampled_from([math.nan, math.inf]), junk)),  # any real p is a power mean; -inf: the min
    (lambda v: GAConfig(cap_factor=v), "cap_factor", bad_positive),
    (lambda v: GAConfig(reset_prob=v), "reset_prob", bad_unit),
    (lambda v: GAConfig(speedup_base=v), "speedup_base", bad_choice(("fair", "one_gpu"))),
    (lambda v: PolluxPolicy(pop_size=v), "pop_size", bad_int(2)),
    # the autoscalers
    (lambda v: autoscaler.GoodputAutoscaler(gpus_per_node=v), "gpus_per_node", bad_int(1)),
    (lambda v: autoscaler.GoodputAutoscaler(min_nodes=v), "min_nodes", bad_int(1)),
    (lambda v: autoscaler.GoodputAutoscaler(up=v), "up", bad_unit),
    (lambda v: autoscaler.GoodputAutoscaler(ideal_base=v), "ideal_base", bad_choice(("gpu", "node"))),
    (lambda v: autoscaler.UtilityAutoscaler(low_util=v), "low_util", st.one_of(below_zero, junk)),
    (lambda v: autoscaler.UtilityAutoscaler(window=v), "window", bad_int(1)),
    (lambda v: autoscaler.simulate_autoscaling(APPS, v, autoscaler.GoodputAutoscaler()), "app",
     st.one_of(st.text(max_size=8).filter(lambda s: s not in APPS.names), st.none(), st.integers(max_value=-1),
               st.integers(min_value=len(APPS.names)))),  # an int is an application index
    (lambda v: autoscaler.simulate_autoscaling(APPS, "cifar10", autoscaler.GoodputAutoscaler(), interval_s=v),
     "interval_s", bad_positive),
    (lambda v: autoscaler.simulate_autoscaling(APPS, "cifar10", autoscaler.GoodputAutoscaler(), max_time_s=v),
     "max_time_s", bad_positive),
    (lambda v: autoscaler.node_efficiencies(APPS, "cifar10", v, max_nodes=4), "phi", st.one_of(st.floats(max_value=-1e-9), st.just(math.nan), junk)),
    # the loaders' arguments
    (lambda v: pollux_sim.load_workload(v), "path_or_name", st.one_of(st.integers(), st.none(), st.just("workload-99"))),
    (lambda v: pollux_sim.load_workload("workload-1", applications=v), "applications", st.one_of(st.integers(), junk.filter(lambda j: j is not None and not isinstance(j, (list, dict, bytes))))),
    (lambda v: pollux_sim.load_app_traces(v), "app", bad_choice(pollux_sim.APPLICATIONS)),
    (lambda v: pollux_sim.load_philly(v), "path", st.sampled_from(["/nonexistent/philly", 3, object()])),
    (lambda v: transient.load_spot_prices(v), "instance_type", bad_text),
    (lambda v: transient.load_spot_prices("c3.xlarge", v), "zone", bad_text),
    (lambda v: transient.load_spot_prices(window=v), "window",
     st.one_of(st.just((10.0, 5.0)), st.just((math.nan, 1.0)), st.just((0.0,)), st.just("x"), st.integers())),
    (lambda v: transient.load_gce_lifetimes(v), "path", st.sampled_from(["/nonexistent/gce", 3, object()])),
    (lambda v: transient.load_startup_times(v), "root", st.sampled_from(["/nonexistent/startup", 3, object()])),
    (lambda v: transient.load_aws_p3_trace(v), "path", st.sampled_from(["/nonexistent/p3", 3, object()])),
    (lambda v: cmdare_data.load_cmdare_speed(dataset=v), "dataset", bad_text),
    (lambda v: cmdare_data.load_cmdare_checkpoints(v), "path", st.sampled_from(["/nonexistent/ckpt", 3, object()])),
    (lambda v: cmdare_data.load_cmdare_step_logs(v), "root", st.sampled_from(["/nonexistent/logs", 3, object()])),
    # scarjax.cluster.planner
    (lambda v: planner.Objective(v), "kind", bad_choice(planner.OBJECTIVES)),
    (lambda v: planner.Objective(deadline_h=v), "deadline_h", bad_positive.filter(lambda v: v is not None)),
    (lambda v: planner.Objective(budget=v), "budget", bad_positive.filter(lambda v: v is not None)),
    (lambda v: planner.Objective(max_machines=v), "max_machines", bad_int(1).filter(lambda v: v is not None)),
    (lambda v: planner.preset_job(v), "job", bad_choice(planner.JOB_PRESETS)),
    (lambda v: planner.market_from_spec(v), "market",
     st.one_of(st.integers(), st.sampled_from(["", "aws", "aws:x", "gce", "parametric:1:2", "parametric:a:b:c", "x:y"]))),
    (lambda v: planner.market_from_spec("parametric:2:0.05:0.2", window_days=v), "window_days",
     st.one_of(bad_positive, st.floats(1e-12, 1e-3))),
    (lambda v: planner.MarketModel.parametric(v, 0.1, 0.5), "mttf_h", st.one_of(st.floats(max_value=0.0), st.just(math.nan), junk)),
    (lambda v: planner.MarketModel.parametric(2.0, v, 0.5), "spot_price", bad_nonneg),
    (lambda v: planner.MarketModel.parametric(2.0, 0.1, v), "on_demand_price", bad_positive),
    (lambda v: planner.MarketModel.parametric(2.0, 0.1, 0.5, billing=v), "billing", bad_choice(("per_second", "hourly", "per_minute"))),
    # scarjax.cluster.lifetimes
    (lambda v: lifetimes.kaplan_meier(v, [True, False]), "durations_h",
     st.sampled_from([[1.0, math.nan], [-1.0, 2.0], [1.0], "x", [[1.0, 2.0]]])),
    (lambda v: lifetimes.kaplan_meier([1.0, 2.0], [True, False], cap_h=v), "cap_h", bad_positive),
    (lambda v: lifetimes.training_time(v, 10.0, ckpt_interval=100, ckpt_s=5.0), "n_steps",
     bad_array_real(lambda x: 0 <= x < math.inf)),
    (lambda v: lifetimes.training_time(1000, v, ckpt_interval=100, ckpt_s=5.0), "speed",
     bad_array_real(lambda x: 0 < x < math.inf)),
    (lambda v: lifetimes.training_time(1000, 10.0, ckpt_interval=v, ckpt_s=5.0), "ckpt_interval",
     bad_array_real(lambda x: x > 0)),  # inf: never checkpoint
    (lambda v: lifetimes.training_time(1000, 10.0, ckpt_interval=100, ckpt_s=v), "ckpt_s",
     bad_array_real(lambda x: 0 <= x < math.inf)),
    (lambda v: lifetimes.training_cost(v, workers=4, worker_price_h=0.5), "time_s",
     bad_array_real(lambda x: 0 <= x < math.inf)),
    (lambda v: lifetimes.training_cost(3600.0, workers=v, worker_price_h=0.5), "workers",
     bad_array_real(lambda x: 0 <= x < math.inf)),
    (lambda v: lifetimes.training_cost(3600.0, workers=4, worker_price_h=v), "worker_price_h",
     bad_array_real(lambda x: 0 <= x < math.inf)),
    (lambda v: lifetimes.gce_hourly_price(v), "gpu", st.text(min_size=1, max_size=5).filter(lambda s: s not in ("K80", "P100", "V100"))),
    (lambda v: lifetimes.revocation_probability(None, "K80", v), "duration_h", bad_array_real(lambda x: x >= 0)),
    (lambda v: lifetimes.lifetime_cdf(gpu=v), "gpu", bad_choice(("K80", "P100", "V100"))),
    # scarjax.cluster.cmdare
    (lambda v: cmdare.detect_plateau(v, [1.0, 2.0, 2.1]), "workers", st.sampled_from([[1, 2], [1, 2, math.nan], "x"])),
    (lambda v: cmdare.detect_plateau([1, 2, 4], [1.0, 2.0, 2.1], threshold=v), "threshold", bad_nonneg),
    (lambda v: cmdare.fit_regression(np.ones((6, 2)), np.ones(6), v), "kind", bad_choice(("linear", "svr_rbf", "svr_rbf_raw", "svr_poly", "rf"))),
    (lambda v: cmdare.fit_regression(np.ones((6, 2)), v, "linear"), "y",
     st.sampled_from([np.ones(5), np.array([1, 2, 3, 4, 5, math.nan]), "x"])),
    (lambda v: cmdare.fit_regression(np.ones((10, 2)), np.arange(1.0, 11.0), "linear", k=v), "k", bad_int(2, 8)),
    (lambda v: cmdare.fit_regression(np.ones((10, 2)), np.arange(1.0, 11.0), "linear", test_size=v), "test_size",
     bad_real(lambda x: 0.0 < x < 1.0)),
    (lambda v: cmdare.cluster_speed_summary(None, skip_steps=v), "skip_steps", bad_int(0)),
    # scarjax.cluster.profile
    (lambda v: profile.measure_checkpoint_time(v, "/tmp"), "sizes_mb", st.sampled_from([[], [-1.0], [math.nan], "x"])),
    (lambda v: profile.measure_step_time(planner.preset_job("qp").algorithm, steps=v), "steps", bad_int(1)),
    (lambda v: profile.measure_step_time(planner.preset_job("qp").algorithm, loop=v), "loop", bad_choice(("step", "scan"))),
    (lambda v: profile.host_tflops(n=v), "n", bad_int(1)),
    (lambda v: profile.fit_local_models(v), "step_records", st.sampled_from([[], None, "x", [{"a": 1}]])),
    # scarjax.cluster.bidbrain
    (lambda v: bidbrain.spot_market([0.0, 3600.0], [0.1, v], on_demand=0.5), "prices", bad_nonneg),
    (lambda v: bidbrain.spot_market([0.0, v], [0.1, 0.2], on_demand=0.5), "times_s",
     st.one_of(nonfinite, st.floats(max_value=0.0))),
    (lambda v: bidbrain.spot_market([0.0, 3600.0], [0.1, 0.2], on_demand=v), "on_demand", bad_positive),
    (lambda v: bidbrain.spot_market([0.0, 3600.0], [0.1, 0.2], on_demand=0.5, cores=v), "cores", bad_int(1)),
    (lambda v: bidbrain.WorkModel(v), "work", bad_positive),
    (lambda v: bidbrain.WorkModel(100.0, startup_s=v), "startup_s", bad_nonneg),
    (lambda v: bidbrain.ScalingModel(kappa=v), "kappa", bad_nonneg),
    (lambda v: bidbrain.eviction_table(PRICES, grid_s=v), "grid_s", bad_positive),
    (lambda v: bidbrain.at([PRICES], v), "start_s", bad_nonneg),
    (lambda v: bidbrain.on_demand(_job(), [PRICES], key=0, horizon_s=3600.0, machines=v), "machines",
     bad_int(1).filter(lambda v: v is not None)),  # None: job.workers
    (lambda v: bidbrain.checkpoint_spot(_job(), [PRICES], key=0, horizon_s=v), "horizon_s", bad_positive),
    (lambda v: bidbrain.mttf_before(PRICES, 3600.0, v), "bid", bad_positive),
    # scarjax.cluster.syncfly
    (lambda v: syncfly.Fleet(v), "speeds", st.sampled_from([(), (1.0, math.nan), (1.0, -2.0), (0.0,), "x"])),
    (lambda v: syncfly.Fleet((1.0,), report_points=v), "report_points", bad_int(1)),
    (lambda v: syncfly.Fleet((1.0,), sync_s=v), "sync_s", bad_nonneg),
    (lambda v: syncfly.mixed_fleet(v, 1.0), "workers", bad_int(1)),
    (lambda v: syncfly.mixed_fleet(4, 1.0, slow_ratio=v), "slow_ratio", bad_real(lambda x: 0.0 < x <= 1.0)),
    (lambda v: syncfly.synthetic_logistic(v), "n", bad_int(1)),
    (lambda v: syncfly.synthetic_logistic(10, v), "d", bad_int(1)),
    (lambda v: syncfly.young_daly_every(v, 1.0, 100.0, 4), "iteration_s", bad_positive),
    (lambda v: syncfly.young_daly_every(1.0, 1.0, v, 4), "mttf_s", bad_real(lambda x: x > 0)),
    (lambda v: syncfly.young_daly_every(1.0, 1.0, 100.0, v), "workers", bad_int(1)),
    (lambda v: syncfly.flexible_barrier(np.array([1.0, 2.0]), np.array([1.0, 2.0]), None, lam=v, warmup_reports=1),
     "lam", bad_real(lambda x: 0.0 < x <= 1.0)),
    # scarjax.cluster.sweep
    (lambda v: sweep.ProgressModel(machines=v), "machines", bad_int(1)),
    (lambda v: sweep.ProgressModel(reliable=v), "reliable", bad_int(0, 63)),
    (lambda v: sweep.ProgressModel(startup_s=v), "startup_s", bad_nonneg),
    (lambda v: sweep.ProgressModel(stage2_efficiency=v), "stage2_efficiency", bad_positive),
    (lambda v: sweep.aggressive_step(v), "on_demand", bad_positive),
    (lambda v: sweep.markets_from_grid(v, 0.5), "prices", st.sampled_from([np.full((1, 600), math.nan), np.full((1, 600), -1.0), np.zeros((0, 600)), "x"])),
    (lambda v: sweep.markets_from_grid(GRID, v), "on_demand", bad_positive),
    (lambda v: sweep.sweep(stride=v), "stride", bad_int(1)),
    (lambda v: sweep.sweep(work_s=v), "work_s", st.sampled_from([(), (-1.0,), (math.nan,), "x"])),
    (lambda v: sweep.build_markets(v), "instance_type", bad_text),
]


@pytest.mark.parametrize("make, name, values", CASES, ids=[f"{i}-{c[1]}" for i, c in enumerate(CASES)])
@FAST
@given(data=st.data())
def test_bad_argument_is_named(make, name, values, data):
    value = data.draw(values, label=name)
    assert_names(lambda: make(value), name)


# --------------------------------------------------------------------------------------
# Whole simulations: a bad row is found before the first interval, named by column and row.


@FAST
@given(col=st.sampled_from(["batch_size", "num_replicas", "time"]), row=st.integers(0, 1), data=st.data())
def test_simulate_names_the_workload_column_and_row(col, row, data):
    """What ``sched.simulate`` said for a batch size of 1e9 was ``atomic_bsz must lie in
    (0.0, inf]``, an internal name: now the column, the row and the job."""
    bad = {"batch_size": data.draw(st.sampled_from([10**9, 10**12, 0])),
           "num_replicas": data.draw(st.sampled_from([10**4, 10**6])),
           "time": data.draw(st.sampled_from([math.nan, math.inf, -5.0]))}[col]
    arr = np.array(getattr(WL, col), dtype=np.float64 if col == "time" else np.int64)
    arr[row] = bad
    job = str(WL.name[row])

    def run():
        simulate(_workload(**{col: arr}), TiresiasPolicy(), cluster=Cluster(nodes=1), record_timeline=False)

    name = col
    with alarm(), pytest.raises(ValueError) as info:
        run()
    msg = str(info.value)
    assert name in msg and f"row {row + 1}" in msg and (repr(job) in msg or f"job {row} " in msg), msg


def test_simulate_skips_idle_time_instead_of_looping_through_it():
    """A job submitted 1e12 s in (a finite time) used to loop through 1.7e10 empty intervals."""
    w = _workload(time=np.array([0.0, 1e12]))
    with alarm():
        res = simulate(w, TiresiasPolicy(), cluster=Cluster(nodes=1))
    assert res.n_unfinished == 0 and res.jobs[1].start_s >= 1e12
    assert len(res.timeline["times"]) < 10_000


def test_planted_violation_the_check_can_fail():
    """The harness itself: a silent result and an error that names something else both fail it."""
    with pytest.raises(pytest.fail.Exception):
        assert_names(lambda: 1.0, "x")
    with pytest.raises(AssertionError, match="not named"):
        assert_names(lambda: Cluster(nodes=0), "interval_s")
    with pytest.raises(AssertionError, match="raised outside scarjax"):
        assert_names(lambda: np.zeros(-1), "negative")
    with pytest.raises(TimeoutError):
        with alarm(1):
            while True:
                pass
