"""`scarjax cluster-sim`: simulate a workload CSV, print the average JCT, write per-job JSON."""

from __future__ import annotations

import json

import pytest

from scarjax.cli import main
from scarjax.data.pollux_sim import embedded_dir

CSV = """name,time,application,num_replicas,batch_size
ncf-0,0,ncf,1,32768
bert-1,20,bert,2,96
ncf-2,45,ncf,1,32768
"""


@pytest.fixture
def wl(tmp_path):
    p = tmp_path / "tiny.csv"
    p.write_text(CSV)
    return p


@pytest.mark.parametrize("policy", ["tiresias", "optimus"])
def test_cluster_sim_writes_per_job_completion_times(wl, tmp_path, capsys, policy):
    out = tmp_path / "out" / "res.json"
    rc = main(["cluster-sim", "--workload", str(wl), "--policy", policy, "--nodes", "1", "--seed", "2",
               "--out", str(out)])
    assert rc == 0
    d = json.loads(out.read_text())
    assert d["policy"] == policy and d["key"] == 2 and d["n_jobs"] == 3 and d["n_unfinished"] == 0
    assert set(d["completion_s"]) == {"ncf-0", "bert-1", "ncf-2"}
    jcts = [d["jct_s"][k] for k in ("ncf-0", "bert-1", "ncf-2")]
    assert all(j > 0 for j in jcts) and d["avg_jct_s"] == pytest.approx(sum(jcts) / 3)
    for j in d["jobs"]:
        assert j["completion_s"] - j["submit_s"] == pytest.approx(j["jct_s"])
    printed = capsys.readouterr().out
    assert f"average JCT {d['avg_jct_s']:.0f} s" in printed and str(out) in printed


def test_cluster_sim_options_interval_traces_timeline(wl, tmp_path):
    a, b, c = (tmp_path / f"{n}.json" for n in "abc")
    main(["cluster-sim", "--workload", str(wl), "--policy", "tiresias", "--nodes", "1", "--out", str(a)])
    main(["cluster-sim", "--workload", str(wl), "--policy", "tiresias", "--nodes", "1", "--out", str(b),
          "--traces", str(embedded_dir() / "traces"), "--timeline"])
    main(["cluster-sim", "--workload", str(wl), "--policy", "tiresias", "--nodes", "1", "--out", str(c),
          "--interval", "120"])
    da, db, dc = (json.loads(p.read_text()) for p in (a, b, c))
    assert da["jct_s"] == db["jct_s"]  # the embedded traces given as a folder: the same simulation
    assert "timeline" in db and "timeline" not in da
    assert max(db["timeline"]["used_gpus"]) <= 4
    assert dc["cluster"]["interval_s"] == 120.0 and dc["jct_s"] != da["jct_s"]


def test_cluster_sim_rejects_an_unknown_policy(wl, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["cluster-sim", "--workload", str(wl), "--policy", "fifo", "--out", str(tmp_path / "x.json")])
    assert e.value.code == 2
