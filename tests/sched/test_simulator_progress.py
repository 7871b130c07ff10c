"""scarjax.sched.simulator.simulate(progress=): a tqdm bar per scheduling decision that does
not change the simulation, and a clear error for a non-bool."""

from __future__ import annotations

import numpy as np
import pytest

from scarjax.data.pollux_sim import Workload
from scarjax.sched.simulator import Cluster, simulate
from scarjax.sched.tiresias import TiresiasPolicy

ROWS = [("cifar10", 0.0, 1, 256), ("ncf", 30.0, 2, 32768), ("cifar10", 200.0, 4, 256)]


def _workload() -> Workload:
    return Workload(name=np.array([f"{r[0]}-{i}" for i, r in enumerate(ROWS)]),
                    time=np.array([r[1] for r in ROWS], float), application=np.array([r[0] for r in ROWS]),
                    num_replicas=np.array([r[2] for r in ROWS], np.int64),
                    batch_size=np.array([r[3] for r in ROWS], np.int64), source="test")


def test_progress_bar_counts_finished_jobs_and_leaves_the_result_unchanged(capsys, monkeypatch):
    monkeypatch.delenv("SCARJAX_NO_PROGRESS", raising=False)
    cl = Cluster(nodes=2)
    quiet = simulate(_workload(), TiresiasPolicy(), cluster=cl, max_time_s=1800, progress=False)
    assert capsys.readouterr().err == ""
    shown = simulate(_workload(), TiresiasPolicy(), cluster=cl, max_time_s=1800, progress=True)
    err = capsys.readouterr().err
    assert "cluster-sim tiresias" in err and "h simulated" in err
    finished = len(ROWS) - shown.n_unfinished
    assert f"{finished}/{len(ROWS)}" in err  # the bar counts finished jobs of the workload's
    assert [j.completion_s for j in shown.jobs] == [j.completion_s for j in quiet.jobs]


def test_no_progress_environment_hides_the_default_bar(capsys, monkeypatch):
    monkeypatch.setenv("SCARJAX_NO_PROGRESS", "1")
    simulate(_workload(), TiresiasPolicy(), cluster=Cluster(nodes=2), max_time_s=600)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("bad", ["yes", 1, 0.5])
def test_progress_must_be_a_bool(bad):
    with pytest.raises(TypeError, match="progress"):
        simulate(_workload(), TiresiasPolicy(), cluster=Cluster(nodes=2), max_time_s=600, progress=bad)
