"""The reproduction pipeline: experiments at tiny sizes, the CLI, REPRODUCTION.md."""

import dataclasses
import json

import pytest

from experiments._common import to_jsonable

from scarjax import cli


def test_registry_modules_follow_the_protocol():
    for name, mod in cli.experiments().items():
        assert mod.NAME == name and isinstance(mod.DESCRIPTION, str)
        assert callable(mod.run) and callable(mod.report)
        quick, full = mod.Config.quick(), mod.Config()
        assert type(quick) is type(full)
        # Full and quick configs must be plain data (results embed them as JSON).
        for cfg in (quick, full):
            json.dumps(to_jsonable(dataclasses.asdict(cfg)))


def test_cli_list(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    assert "fig5_3_qp" in out and "fig5_5_mlr" in out


def test_cli_unknown_experiment(capsys, tmp_path):
    assert cli.main(["reproduce", "nope", "--out", str(tmp_path)]) == 2


def test_fig5_3_tiny_end_to_end(tmp_path):
    from experiments import fig5_3_qp as m

    cfg = m.Config(trials=16, steps=2000)
    res = m.run(cfg, tmp_path)
    assert res["single"]["share_under_bound_plus_1"] == 1.0
    assert (tmp_path / "paper_figs" / "fig5_3_qp.png").stat().st_size > 0
    saved = json.loads((tmp_path / "results" / "fig5_3_qp.json").read_text())
    assert saved["single"]["trials"] == 16
    path = cli.write_reproduction(tmp_path, " --quick")
    text = path.read_text()
    assert "Fig 5.3" in text and "fig5_3_qp.png" in text


def test_fig5_5_tiny_end_to_end(tmp_path):
    from experiments import fig5_5_mlr as m

    res = m.run(m.Config(trials=4, steps=250), tmp_path)
    assert res["adversarial"]["restarted_bound"]["share_under_bound_plus_1"] == 1.0
    assert "Fig 5.5" in m.report(json.loads((tmp_path / "results" / "fig5_5_mlr.json").read_text()))


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
    )
    res = m.run(cfg, tmp_path)
    recs = res["records"]
    assert {r["backend"] for r in recs} == {"processes", "forced_host"}
    assert len(recs) == 2 * 2 * 2 * 2
    assert all(r["t_iter"] > 0 and r["t_iter"] <= r["t_iter_median"] for r in recs)
    assert all(r["t_accum"] > 0 for r in recs if r["accum_steps"] == 0)
    assert res["fit"]["replicas"] == [1, 2] and res["fit"]["mean_rel_error"] >= 0
    assert res["backends"]["processes"]["parallel"]["ratio"] > 0
    assert (tmp_path / "paper_figs" / "pollux_throughput.png").stat().st_size > 0
    assert "process per core" in m.report(
        json.loads((tmp_path / "results" / "pollux_throughput.json").read_text())
    )


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
    assert "mlr" in res["problems"]
    assert (tmp_path / "paper_figs" / "pollux_efficiency.png").stat().st_size > 0
    assert "Figs 3.3, 3.4" in m.report(
        json.loads((tmp_path / "results" / "pollux_efficiency.json").read_text())
    )


def test_pollux_adaptive_tiny_end_to_end(tmp_path):
    """Without pollux_throughput results in the output folder the simulated clock uses defaults."""
    from experiments import pollux_adaptive as m

    res = m.run(m.Config(problems=("mlr",), time_budget=0.3, local_bsz_step=16, retune_every=10), tmp_path)
    assert res["sim_source"] == "CPU-like defaults"
    runs = res["problems"]["mlr"]["runs"]
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
