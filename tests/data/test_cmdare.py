"""The CM-DARE data (scarjax.data.cmdare): the embedded copy loads into typed read-only records with the
documented counts, equals what the files in ../shared give, and malformed files raise DataFormatError
naming the file and the line."""

import gzip
import shutil

import numpy as np
import pytest

from scarjax.data import (
    DataFormatError,
    load_cmdare_checkpoints,
    load_cmdare_cluster_speed,
    load_cmdare_speed,
    load_cmdare_step_logs,
    load_gce_training_runs,
)
from scarjax.data import cmdare as cm
from scarjax.data._parse import content_sha256, read_manifest

EMB = cm._EMBEDDED


# -- the embedded copy -------------------------------------------------------------------------


def test_embedded_cmdare_files_are_in_the_manifest():
    manifest = read_manifest(EMB / "README.md")
    ours = [p for p in manifest if p.startswith(("cmdare/speed", "cmdare/checkpoint", "gce-preemptible/training"))]
    assert len(ours) == 3 + 5 + 12 + 96 + 3
    assert not [p for p in ours if content_sha256(EMB / p) != manifest[p]]
    # the gzip copies are reproducible: no timestamp, no file name
    raw = (EMB / "cmdare/speed_and_cluster_size/k80/res15k80worker1/run_.-tag-global_step_sec.csv.gz").read_bytes()
    assert raw[4:8] == b"\0\0\0\0" and raw[3] & 0x08 == 0


def test_speed_table():
    s = load_cmdare_speed()
    assert len(s) == 208 and s is load_cmdare_speed()  # cached
    assert dict(zip(*np.unique(s.gpu, return_counts=True))) == {"k80": 104, "p100": 104}
    assert len(np.unique(s.model_flops)) == 4
    np.testing.assert_allclose(s.speed * s.step_time_s, 1.0, rtol=1e-6)
    assert (s.step_time_s > 0).all() and not s.speed.flags.writeable
    assert s.line[0] == 2 and s.source.endswith("speed_data_supertable.csv")


def test_speed_table_20_models():
    t = load_cmdare_speed(dataset="models20")
    assert len(t) == 520 and len(set(t.model.tolist())) == 20
    assert dict(zip(*np.unique(t.gpu, return_counts=True))) == {"k80": 260, "p100": 260}
    assert set(np.unique(t.model, return_counts=True)[1]) == {26}  # 13 per GPU
    # the paper's "average step time across different CNN models is 0.48 seconds" (K80)
    assert abs(t.step_time_s[t.gpu == "k80"].mean() - 0.48) < 0.02
    assert np.isnan(t.latency_ms).sum() == 52 and not np.isnan(t.step_time_s).any()
    with pytest.raises(ValueError, match="dataset must be"):
        load_cmdare_speed(dataset="models21")


def test_checkpoint_table():
    c = load_cmdare_checkpoints()
    assert len(c) == 100 and len(set(c.model.tolist())) == 20
    assert set(np.unique(c.model, return_counts=True)[1]) == {5}
    assert (c.duration_s > c.local_s).all() and (c.size_mb > 0).all()
    np.testing.assert_allclose(c.size_mb, c.meta_mb + c.weight_mb, rtol=0.01)  # S_c ~ meta + data here
    assert c.model[0] == "ResNet-15" and c.duration_s[0] == 3.71


def test_cluster_speed_runs():
    runs = load_cmdare_cluster_speed()
    assert len(runs) == 96
    keys = {(r.gpu, r.ps, r.model, r.workers) for r in runs}
    assert keys == {
        (g, ps, m, w) for g, ps in (("k80", 1), ("p100", 1), ("p100", 2)) for m in cm.CMDARE_MODELS for w in range(1, 9)
    }
    for r in runs:
        assert (np.diff(r.step) > 0).all() and (r.steps_per_s >= 0).all() and len(r) >= 37
    one = next(r for r in runs if (r.gpu, r.ps, r.model, r.workers) == ("k80", 1, "res15", 1))
    # a single K80 worker on ResNet-15: Table I's 9.46 +- 0.19 steps/s
    assert 9.0 < np.median(one.steps_per_s) < 10.0


def test_step_logs():
    logs = load_cmdare_step_logs()
    assert [(s.model, s.gpu) for s in logs] == [(m, g) for m in cm.CMDARE_MODELS for g in ("k80", "p100", "v100")]
    for s in logs:
        assert len(s) == 38 and s.step[0] == 201
        np.testing.assert_allclose(s.steps_per_s * s.step_time_s, 1.0, rtol=1e-6)
    res32k80 = next(s for s in logs if (s.model, s.gpu) == ("res32", "k80"))
    # Table I: ResNet-32 on K80 4.56 +- 0.08 steps/s
    assert abs(1 / res32k80.step_time_s.mean() - 4.56) < 0.05


def test_training_runs():
    runs = load_gce_training_runs()
    by = {}
    for r in runs:
        by.setdefault(r.setting, []).append(r)
    assert {k: len(v) for k, v in by.items()} == {"k80-4": 32, "k80-8": 32, "v100": 43}
    assert {len(r) for r in by["k80-4"]} == {4} and {len(r) for r in by["k80-8"]} == {8}
    assert sum(int(r.revoked.sum()) for r in runs) == 57
    # "Job Completed" (capital C, 8-worker file) is a completion, not a revocation
    assert any((r.status == "Job Completed").any() for r in runs)
    assert not any(r.revoked[r.status == "Job Completed"].any() for r in runs)
    r0 = runs[0]
    assert (r0.setting, r0.run, r0.zone, r0.role[0]) == ("k80-4", "us-east1-c-run1", "us-east1-c", "master")
    assert r0.master_uptime_s == pytest.approx(3812.312774)


# -- the same as ../shared ----------------------------------------------------------------------


def _same(a, b):
    for k, v in vars(a).items():
        if isinstance(v, np.ndarray):
            np.testing.assert_array_equal(v, getattr(b, k), err_msg=k)
        elif k != "source":
            assert v == getattr(b, k), k


def test_embedded_equals_shared(shared_data):
    root = shared_data("transient")
    _same(load_cmdare_speed(), load_cmdare_speed(root))
    _same(load_cmdare_speed(dataset="models20"), load_cmdare_speed(root, dataset="models20"))
    _same(load_cmdare_checkpoints(), load_cmdare_checkpoints(root / "cmdare" / "checkpoint"))
    for a, b in zip(load_cmdare_cluster_speed(), load_cmdare_cluster_speed(root), strict=True):
        _same(a, b)
    for a, b in zip(load_cmdare_step_logs(), load_cmdare_step_logs(root / "cmdare"), strict=True):
        _same(a, b)
    for a, b in zip(load_gce_training_runs(), load_gce_training_runs(root), strict=True):
        _same(a, b)


# -- malformed files ------------------------------------------------------------------------------


def _plant(tmp_path, rel, old: bytes, new: bytes):
    """A copy of embedded ``rel`` in ``tmp_path`` with ``old`` replaced by ``new`` once."""
    raw = (EMB / rel).read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    assert old in raw, old
    p = tmp_path / rel.rsplit("/", 1)[-1].removesuffix(".gz")
    p.write_bytes(raw.replace(old, new, 1))
    return p


def test_bad_speed_files(tmp_path):
    rel = "cmdare/speed_data/speed_data_supertable.csv"
    p = _plant(tmp_path, rel, b"0.357398987,2.797993381", b"0.357398987,2.9")
    with pytest.raises(DataFormatError, match=r"speed_data_supertable.csv, line 2: Step Time .* is not 1 / Speed"):
        load_cmdare_speed(p)
    p = _plant(tmp_path, rel, b"\n9.526,", b"\n7.5,")
    with pytest.raises(DataFormatError, match=r"line \d+: GPU TFLOPS 7.5 is none of the measured GPUs"):
        load_cmdare_speed(p)
    p = _plant(tmp_path, rel, b"4.113,183350654,30.3", b"4.113,abc,30.3")
    with pytest.raises(DataFormatError, match=r"line 2: .*Model FLOPs"):
        load_cmdare_speed(p)
    p = _plant(tmp_path, rel, b"GPU TFLOPS", b"GPU TF")
    with pytest.raises(DataFormatError, match=r"line 1: the header must hold the columns"):
        load_cmdare_speed(p)
    p = _plant(tmp_path, "cmdare/speed_data/0latency_p100_new2.csv", b"P100,Res15", b"P100,")
    with pytest.raises(DataFormatError, match=r"0latency_p100_new2.csv, line 2: Model \(temp\) must not be empty"):
        load_cmdare_speed(p)
    with pytest.raises(FileNotFoundError, match="path: no speed_data_supertable.csv"):
        load_cmdare_speed(tmp_path / "..")
    with pytest.raises(TypeError, match="path must be a file path"):
        load_cmdare_speed(3)


def test_bad_checkpoint_file(tmp_path):
    rel = "cmdare/checkpoint/whole_data.csv"
    p = _plant(tmp_path, rel, b"ResNet-15,0.23,4.13", b"ResNet-15,0.23")
    with pytest.raises(DataFormatError, match=r"whole_data.csv, line 3: expected 9 fields, got 8"):
        load_cmdare_checkpoints(p)
    p = _plant(tmp_path, rel, b"ResNet-15,0.24,3.71", b"ResNet-15,0.24,-3.71")
    with pytest.raises(DataFormatError, match=r"line 2: Duration must be"):
        load_cmdare_checkpoints(p)
    p = _plant(tmp_path, rel, b"ResNet-15,0.24,3.71", b",0.24,3.71")
    with pytest.raises(DataFormatError, match=r"line 2: Model must not be empty"):
        load_cmdare_checkpoints(p)


def _copy_tree(tmp_path, rel):
    dst = tmp_path / rel
    shutil.copytree(EMB / rel, dst)
    return dst


def test_bad_cluster_run(tmp_path):
    root = _copy_tree(tmp_path, "cmdare/speed_and_cluster_size")
    f = root / "p100" / "res32p100worker4" / "run_.-tag-global_step_sec.csv.gz"
    lines = gzip.decompress(f.read_bytes()).split(b"\n")
    lines[5], lines[6] = lines[6], lines[5]  # steps out of order
    f.unlink()
    (f.parent / "run_.-tag-global_step_sec.csv").write_bytes(b"\n".join(lines))
    with pytest.raises(DataFormatError, match=r"res32p100worker4/run_.-tag-global_step_sec.csv, line 7: Step must strictly"):
        load_cmdare_cluster_speed(tmp_path)
    shutil.rmtree(root / "p100" / "res32p100worker4")
    (root / "p100" / "res32k80worker4").mkdir()
    with pytest.raises(DataFormatError, match=r"res32k80worker4: the run's name does not match its folder 'p100'"):
        load_cmdare_cluster_speed(root)
    with pytest.raises(FileNotFoundError, match="root: no speed_and_cluster_size folder"):
        load_cmdare_cluster_speed(root / "k80")


def test_bad_step_log(tmp_path):
    root = _copy_tree(tmp_path, "cmdare/speed_data_base")
    f = root / "res32v100" / "data.csv"
    f.write_bytes(f.read_bytes().replace(b"1563842434,201,15.81122684,0.063246199", b"1563842434,201,15.8,-0.06", 1))
    with pytest.raises(DataFormatError, match=r"res32v100/data.csv, line 3: Step Time must be > 0"):
        load_cmdare_step_logs(tmp_path)


def test_bad_training_file(tmp_path):
    root = _copy_tree(tmp_path, "gce-preemptible/training")
    f = root / "k80_spot" / "8-spot" / "vm_data.csv"
    f.write_bytes(f.read_bytes().replace(b"1705.658318,Revoked", b"1705.658318,Preempted", 1))
    with pytest.raises(DataFormatError, match=r"8-spot/vm_data.csv, line \d+: Revoked must be one of .* got 'Preempted'"):
        load_gce_training_runs(tmp_path)
    f.write_bytes((EMB / "gce-preemptible/training/k80_spot/8-spot/vm_data.csv").read_bytes().replace(
        b"spot8-us-east1-c-run1-worker-0", b"spot8-us-east1-c-run1-chief", 1))
    with pytest.raises(DataFormatError, match=r"line 3: VM_name must be"):
        load_gce_training_runs(root)
    f.write_bytes((EMB / "gce-preemptible/training/k80_spot/8-spot/vm_data.csv").read_bytes().replace(
        b"2358.832417", b"-5", 1))
    with pytest.raises(DataFormatError, match=r"line 3: Uptime must be a finite number >= 0"):
        load_gce_training_runs(root.parent)
