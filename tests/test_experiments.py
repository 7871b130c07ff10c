"""The reproduction pipeline: experiments at tiny sizes, the CLI, REPRODUCTION.md."""

import dataclasses
import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from experiments._common import to_jsonable

from scarjax import cli


def test_registry_modules_follow_the_protocol():
    for name, mod in cli.experiments().items():
        assert mod.NAME == name and isinstance(mod.DESCRIPTION, str)
        assert callable(mod.run) and callable(mod.report) and callable(mod.plot)
        quick, full = mod.Config.quick(), mod.Config()
        assert type(quick) is type(full)
        # Full and quick configs must be plain data (results embed them as JSON).
        for cfg in (quick, full):
            json.dumps(to_jsonable(dataclasses.asdict(cfg)))


def test_cli_list(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fig5_3_qp" in out and "fig5_5_mlr" in out


def _exits_2(argv, capsys) -> str:
    """``scarjax ARGV`` exits as argparse does (status 2, one line on stderr); the line."""
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    err = capsys.readouterr().err
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_cli_unknown_experiment(capsys, tmp_path):
    assert "reproduce: error: argument names: unknown experiment(s) nope" in _exits_2(
        ["reproduce", "nope", "--out", str(tmp_path)], capsys)
    assert "replot: error: argument names: unknown experiment(s) nope" in _exits_2(
        ["replot", "nope", "--out", str(tmp_path)], capsys)


def test_replot_needs_results(capsys, tmp_path):
    assert f"argument --out: no results of staleness in {tmp_path / 'results'}" in _exits_2(
        ["replot", "staleness", "--out", str(tmp_path)], capsys)
    assert "argument --out: no results in" in _exits_2(["replot", "--out", str(tmp_path)], capsys)  # nothing to redraw


REPO = Path(__file__).resolve().parents[1]
# Committed results whose figures are cheap to draw (no per-trial scatter): one per kind of plot.
REPLOT = ("fig5_7_partial_recovery", "staleness", "precision", "pollux_efficiency", "pollux_throughput")


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
@pytest.mark.filterwarnings("error::UserWarning")  # _plot.save warns on overlapping labels
def test_replot_from_committed_results_without_overlapping_labels(tmp_path):
    """``scarjax replot`` redraws figures from results/*.json alone (nothing is re-run), and
    no panel's labels run into another panel (e.g. a y-label over its neighbour's ticks)."""
    assert cli.main(["replot", *REPLOT, "--out", str(tmp_path), "--results", str(REPO)]) == 0
    for name in REPLOT:
        assert (tmp_path / "paper_figs" / f"{name}.png").stat().st_size > 10_000
    assert not (tmp_path / "results").exists()  # only figures were written


def test_overlap_check_catches_a_y_label_over_the_neighbouring_panel():
    from experiments import _plot

    plt = _plot.pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(8, 3.6), layout="none")  # the old fixed layout
    for ax in axes:
        ax.plot([1e-3, 1e3], [-250, 1250])
        ax.set_xscale("log")
        ax.set_ylabel("rework (iterations)")
    found = _plot.overlaps(fig)
    assert any("panel 1" in f and "y-axis over the plotting area of panel 0" in f for f in found)
    with pytest.warns(UserWarning, match="overlapping labels"):
        _plot.save(fig, Path(tempfile.mkdtemp()), "bad")
    fig, axes = _plot.figure(1, 3)  # the shared style: constrained layout
    for ax in axes[0]:
        ax.plot([1e-3, 1e3], [-250, 1250])
        ax.set_xscale("log")
        ax.set_ylabel("rework (iterations)")
    assert _plot.overlaps(fig) == []
    plt.close(fig)


def test_launcher_runs_a_function_in_a_subprocess():
    from experiments import _launch

    assert _launch.call("json:dumps", [1, 2]) == "[1, 2]"
    with pytest.raises(RuntimeError, match="json:loads failed"):
        _launch.call("json:loads", "not json")
    with pytest.raises(ValueError, match="target"):
        _launch.call("json.loads")
    assert "--xla_force_host_platform_device_count=4" in _launch.env(4)["XLA_FLAGS"]
    with pytest.raises(ValueError, match="force_devices"):
        _launch.env(0)


def test_gated_launch_waits_at_its_gate_until_go():
    """start(..., gated=True): the process reports at experiments._launch.gate and goes on only
    after Launched.go; without go it fails (stdin closed) instead of hanging; one that fails
    before its gate fails ready()."""
    from experiments import _launch

    launched = _launch.start("experiments._launch:gate", gated=True)
    try:
        launched.ready(timeout=300)
        launched.go()
        assert launched.result(timeout=300) is None
    finally:
        launched.kill()
    launched = _launch.start("experiments._launch:gate", gated=True)
    try:
        launched.ready(timeout=300)
        with pytest.raises(RuntimeError, match="closed stdin"):  # planted: no go
            launched.result(timeout=300)
    finally:
        launched.kill()
    launched = _launch.start("json:loads", "not json", gated=True)
    try:
        with pytest.raises(RuntimeError, match="json:loads failed"):
            launched.ready(timeout=300)
    finally:
        launched.kill()


def test_revive_undoes_to_jsonable():
    from experiments._common import revive

    x = {"a": [1.0, float("inf"), float("-inf")], "b": {"c": float("nan")}, "d": "text"}
    back = revive(json.loads(json.dumps(to_jsonable(x))))
    assert back["a"] == [1.0, float("inf"), float("-inf")] and np.isnan(back["b"]["c"]) and back["d"] == "text"


def test_fig5_3_tiny_end_to_end(tmp_path):
    from experiments import fig5_3_qp as m

    cfg = m.Config(trials=16, steps=2000)
    res = m.run(cfg, tmp_path)
    # What Fig 5.3 exists to show: the QP's rework stays under Thm 5.3.1, trial by trial.
    assert res["single"]["share_under_bound_plus_1"] == 1.0
    assert res["single"]["under_plus_1"] == {"held": 16, "n": 16, "censored": 0, "slack": 1.0}
    assert (tmp_path / "paper_figs" / "fig5_3_qp.png").stat().st_size > 0
    saved = json.loads((tmp_path / "results" / "fig5_3_qp.json").read_text())
    assert saved["single"]["trials"] == 16 and saved["single"]["rework"]["n"] == 16
    meta = saved["meta"]
    assert meta["mode"] == "custom" and meta["wall_s"] > 0 and meta["cpu_count"] >= 1
    assert meta["started_utc"] <= meta["finished_utc"] and meta["jax"] and meta["python"]
    path = cli.write_reproduction(tmp_path, " --quick")
    text = path.read_text()
    assert "Fig 5.3" in text and "fig5_3_qp.png" in text
    # The run settings are generated from the metadata, not written by hand.
    assert "**Run settings** (from each result's `meta`)" in text
    assert f"| fig5_3_qp | custom | {meta['started_utc'].replace('T', ' ').replace('+00:00', '')} |" in text


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_fig5_5_tiny_end_to_end(tmp_path):
    from experiments import fig5_5_mlr as m

    res = m.run(m.Config(trials=4, steps=250), tmp_path)
    # Fig 5.5's finding: adversarial rework sits under the bound restarted at the perturbation.
    assert res["adversarial"]["restarted_bound"]["share_under_bound_plus_1"] == 1.0
    assert "Fig 5.5" in m.report(json.loads((tmp_path / "results" / "fig5_5_mlr.json").read_text()))


def test_run_records_metadata_even_when_called_directly(tmp_path):
    from experiments import _common

    @_common.recorded("probe")
    def run(config, out_dir):
        return {"x": 1}

    res = run(None, tmp_path)
    saved = json.loads((tmp_path / "results" / "probe.json").read_text())
    assert saved["x"] == 1 and saved["meta"] == json.loads(json.dumps(to_jsonable(res["meta"])))
    assert set(saved["meta"]) >= {"started_utc", "finished_utc", "wall_s", "mode", "platform", "python", "jax",
                                  "cpu_count", "jax_devices", "loadavg_start", "loadavg_end", "git"}


def test_reproduction_marks_results_without_metadata(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "staleness.json").write_text(json.dumps({"config": {}, "problems": {}}))
    text = cli.write_reproduction(tmp_path).read_text()
    assert "predates the current results format" in text and "No result carries run metadata" in text


def _record(rework, bound, horizon=100.0):
    from experiments import _rework

    n = len(rework)
    rec = {"rework": list(rework), "horizon": [horizon] * n, "bound": list(bound),
           "iters": [r + 50 for r in rework], "iters_bound": [b + 50 for b in bound],
           "final_error": [1e-3] * n, "max_delta": [0.0] * n}
    return _rework.record_checks(rec)


def test_staleness_report_counts_censored_trials_everywhere():
    """A cell where trials never re-converged prints a lower-bound mean and the count (never
    "∞ ≤ bound"), and the bound check counts those trials as not under the bound."""
    from experiments import staleness as m

    cfg = dataclasses.asdict(m.Config(s_values=(0, 8), trials=2))
    zero = _record([0.0, 0.0], [0.0, 0.0])
    mode = lambda rec8: {"c": 0.99, "by_s": {"0": zero, "8": rec8}}  # noqa: E731
    results = {"config": cfg, "problems": {
        "qp": {"ssp": mode(_record([-3.0, -2.0], [5.0, 5.0])), "async": mode(_record([-3.0, -2.0], [5.0, 5.0]))},
        "mlr": {"ssp": mode(_record([float("inf"), 20.0], [30.0, 30.0])),
                "async": mode(_record([1.0, 2.0], [5.0, 5.0]))}}}
    text = m.report(to_jsonable(results))
    assert "∞ ≤" not in text
    assert "≥ 60; bound 30; held 1/2" in text and "1 of 2 not re-converged" in text
    assert "Over all 16 trials; 1 of them never re-reached ε" in text
    assert "the rework bound in 15 of 16" in text


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_pollux_throughput_tiny_end_to_end(tmp_path):
    """Both device kinds measured for real (gloo processes and forced host devices)."""
    from experiments import pollux_throughput as m

    cfg = m.Config(
        devices=(1, 2),
        process_devices=(1, 2),
        local_bsz=(16, 64),
        accum_steps=(0, 1),
        hidden=64,
        reps=3,
        rounds=1,
        forced_reps=2,  # the forced host devices' own repeat count (quick mode's cut)
    )
    res = m.run(cfg, tmp_path)
    recs = res["records"]
    assert {r["backend"] for r in recs} == {"processes", "forced_host"}
    assert len(recs) == 2 * 2 * 2 * 2
    assert all(r["t_iter"] > 0 and r["t_iter"] <= r["t_iter_median"] for r in recs)
    assert all(r["t_accum"] > 0 for r in recs if r["accum_steps"] == 0)
    assert res["fit"]["replicas"] == [1, 2]
    # A fit is made and reported per backend. How well Eq 3.8 explains these timings is not
    # asserted: 3 timings per configuration on a shared CI machine are noise (a run on CI once
    # gave an RMSLE above the spread of the log step times). Whether the fit recovers the model
    # is checked on exact and noisy synthetic data in tests/pollux/test_throughput.py.
    for backend in ("processes", "forced_host"):
        rmsle = res["backends"][backend]["fit"]["rmsle"]
        assert np.isfinite(rmsle) and rmsle >= 0.0
    assert np.isfinite(res["fit"]["mean_rel_error"])
    assert (tmp_path / "paper_figs" / "pollux_throughput.png").stat().st_size > 0
    text = m.report(json.loads((tmp_path / "results" / "pollux_throughput.json").read_text()))
    assert "process per core" in text and "K = 1, 2, timed 1 x 2 times;" in text


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_pollux_efficiency_tiny_end_to_end(tmp_path):
    from experiments import pollux_efficiency as m

    cfg = m.Config(
        problems=("mlr",),
        train_steps=60,
        checkpoints=2,
        frozen_draws=4,
        measure_problems=("mlr",),
        batch_multipliers=(1, 2),
        lr_grid=2,
        n0=10,
        seeds=1,
        eval_size=64,
    )
    res = m.run(cfg, tmp_path)
    mlr = res["problems"]["mlr"]
    # The estimator at frozen parameters tracks the exact per-example phi, and Eq 3.3 predicts
    # the measured efficiency at 2x the batch (both deterministic: no timings involved).
    assert mlr["frozen_median_abs_rel_error"] < 0.25
    rows = mlr["measure"]["rows"]
    assert rows[1]["measured"] < 1.0 and rows[1]["predicted"] < 1.0
    assert mlr["measure"]["mean_abs_error"] < 0.4
    assert (tmp_path / "paper_figs" / "pollux_efficiency.png").stat().st_size > 0
    assert "Figs 3.3, 3.4" in m.report(
        json.loads((tmp_path / "results" / "pollux_efficiency.json").read_text())
    )


@pytest.mark.slow  # long on 2 CPU cores: CI runs it in its separate `-m slow` step
def test_pollux_adaptive_tiny_end_to_end(tmp_path):
    """Without pollux_throughput results in the output folder the simulated clock uses defaults."""
    from experiments import pollux_adaptive as m

    res = m.run(m.Config(problems=("mlr",), time_budget=0.3, local_bsz_step=16, retune_every=10), tmp_path)
    assert res["sim_source"] == "CPU-like defaults"
    runs = res["problems"]["mlr"]["runs"]
    # The job-level agent's point: adaptive batch sizes reach the target loss sooner (simulated
    # clock, so deterministic) and process more statistical epochs per second.
    assert res["problems"]["mlr"]["speedup"] > 1.0
    assert runs["adaptive"]["stat_epochs_per_s"] > runs["fixed"]["stat_epochs_per_s"]
    assert runs["adaptive"]["steps"] >= len(runs["adaptive"]["time"]) > 1
    assert runs["adaptive"]["step"][-1] == runs["adaptive"]["steps"] - 1
    assert (tmp_path / "paper_figs" / "pollux_adaptive.png").stat().st_size > 0
    assert "adaptive vs fixed" in m.report(
        json.loads((tmp_path / "results" / "pollux_adaptive.json").read_text())
    )
    # With a good measured fit on disk the simulator runs on it.
    fit = {"params": dict(m.DEFAULT_SIM), "mean_rel_error": 0.05}
    (tmp_path / "results" / "pollux_throughput.json").write_text(json.dumps({"fit": fit}))
    cfg = m.Config(problems=("mlr",), time_budget=0.2, local_bsz_step=16, retune_every=10)
    assert m.run(cfg, tmp_path)["sim_source"] == "pollux_throughput fit"
