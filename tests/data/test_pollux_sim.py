"""The Pollux simulator inputs (scarjax.data.pollux_sim): the embedded copy is the artifact's
files (sha256 manifest), loads into typed records of the documented shapes, equals what the
full files in ../shared give, and malformed files raise DataFormatError naming file and line."""

import gzip
import re

import numpy as np
import pytest

from scarjax.data._parse import content_sha256, read_manifest
from scarjax.data import DataFormatError, load_app_traces, load_philly, load_workload
from scarjax.data import pollux_sim as ps

EMBEDDED = ps.embedded_dir()
# rows (lines - 1) of each application's files, from the artifact's manifest
ROWS = {"bert": (540, 180), "cifar10": (1183, 329), "deepspeech2": (754, 198), "imagenet": (864, 288),
        "ncf": (1661, 458), "yolov3": (540, 108)}
EPOCHS = {"bert": 2, "cifar10": 100, "deepspeech2": 80, "imagenet": 90, "ncf": 10, "yolov3": 50}
BATCH_SIZES = {"bert": (12, 24, 48, 96, 192, 384), "cifar10": (128, 256, 512, 1024, 2048, 4096),
               "deepspeech2": (20, 40, 80, 160, 320, 640),
               "imagenet": (200, 400, 800, 1600, 3200, 6400, 12800),
               "ncf": (256, 512, 1024, 2048, 4096, 8192, 16384, 32768), "yolov3": (8, 16, 32, 64, 128, 256, 512)}


# -- the embedded copy -------------------------------------------------------------------------


def test_embedded_files_match_theread_manifest():
    manifest = read_manifest(EMBEDDED / "README.md")
    files = {str(p.relative_to(EMBEDDED)) for p in EMBEDDED.rglob("*") if p.is_file()} - {"README.md", "LICENSE"}
    assert files == set(manifest), (sorted(files ^ set(manifest)))
    assert len(manifest) == 6 + 1 + 6 * 2 + 40  # workloads, philly, placements+scalability, validation curves
    bad = [p for p, h in manifest.items() if content_sha256(EMBEDDED / p) != h]
    assert not bad, bad
    text = (EMBEDDED / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0" in text
    assert "Apache" in (EMBEDDED / "README.md").read_text() and "petuum/adaptdl" in (EMBEDDED / "README.md").read_text()


def test_manifest_check_catches_a_changed_file(tmp_path):
    """The hash comparison above fails on a one-byte change (the check can fail)."""
    manifest = read_manifest(EMBEDDED / "README.md")
    p = tmp_path / "w.csv"
    p.write_bytes((EMBEDDED / "workloads" / "workload-1.csv").read_bytes().replace(b"cifar10-0,107", b"cifar10-0,108"))
    assert content_sha256(p) != manifest["workloads/workload-1.csv"]


def test_embedded_agrees_with_the_shared_readme(shared_data):
    ours = read_manifest(EMBEDDED / "README.md")
    theirs = {k.removeprefix("pollux-sim/"): v for k, v in read_manifest(shared_data("pollux-sim") / "README.md").items()}
    assert theirs, "no manifest rows parsed from the shared README"
    for path, prefix in theirs.items():
        key = path + ".gz" if path == "traces/philly.csv" else path
        assert ours[key].startswith(prefix), path


# -- records ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ps.WORKLOADS)
def test_embedded_workloads(name):
    w = load_workload(name)
    assert len(w) == 160 and w.source.endswith(f"{name}.csv")
    assert w.name.dtype.kind == "U" and w.application.dtype.kind == "U"
    assert w.time.dtype == np.float64 and w.num_replicas.dtype == np.int64 and w.batch_size.dtype == np.int64
    assert len(set(w.name.tolist())) == 160 and np.all(np.diff(w.time) >= 0) and w.time.max() < 8 * 3600
    assert set(w.application.tolist()) <= set(ps.APPLICATIONS)
    ids = w.app_ids()
    assert ids.dtype == np.int32 and [ps.APPLICATIONS[i] for i in ids] == w.application.tolist()
    assert np.all(w.num_replicas >= 1) and np.all(w.batch_size >= 1)
    with pytest.raises(ValueError, match="read-only"):
        w.time[0] = 0.0
    assert load_workload(name) is w  # cached


def test_workload_1_first_rows():
    w = load_workload()
    assert w.name[:2].tolist() == ["cifar10-0", "deepspeech2-1"]
    assert w.time[:2].tolist() == [107.0, 110.0]
    assert w.num_replicas[:4].tolist() == [6, 6, 1, 12] and w.batch_size[:4].tolist() == [2048, 320, 32768, 640]


def test_embedded_philly():
    t = load_philly()
    assert len(t) == 82247
    assert t.timestamp.dtype == np.dtype("datetime64[s]") and t.num_gpus.dtype == np.int64
    assert t.timestamp[0] == np.datetime64("2017-10-09T07:01:55") and t.duration[0] == 66.0
    assert t.cluster[:2].tolist() == ["11cb48", "6214e9"]
    np.testing.assert_allclose(t.gpu_time, t.duration * t.num_gpus)


@pytest.mark.parametrize("app", ps.APPLICATIONS)
def test_embedded_app_traces(app):
    tr = load_app_traces(app)
    n_pl, n_sc = ROWS[app]
    p, s = tr.placements, tr.scalability
    assert tr.name == app and len(p) == n_pl and len(s) == n_sc
    assert p.gpus_per_node.shape == (n_pl, 4) and p.gpus_per_node.dtype == np.int64
    np.testing.assert_array_equal(p.num_replicas, p.gpus_per_node.sum(1))
    np.testing.assert_array_equal(p.num_nodes, [len(x) for x in p.placement.tolist()])
    assert len(np.unique(p.placement)) == 108  # every placement of <= 4 nodes x <= 4 GPUs, up to rotation
    assert np.all(p.sync_time < p.step_time) and np.all(s.sync_time < s.step_time)
    assert np.all(s.num_nodes <= s.num_replicas) and s.num_replicas.max() == 64 and s.num_nodes.max() == 16
    assert tr.batch_sizes == BATCH_SIZES[app]
    for bsz, c in tr.validation.items():
        assert c.batch_size == bsz and len(c) == EPOCHS[app] and c.iteration.dtype == np.int64
        assert np.all(np.diff(c.progress) >= 0) and np.all(c.grad_sqr >= 0) and np.all(c.grad_var >= 0)
    pl = p.placement.tolist().index("1112")
    assert p.gpus_per_node[pl].tolist() == [1, 1, 1, 2] and p.num_nodes[pl] == 4 and p.num_replicas[pl] == 5


def test_bert_placements_first_row():
    p = load_app_traces("bert").placements
    assert (p.placement[0], p.local_bsz[0]) == ("1", 4)
    assert p.step_time[0] == 0.45532354712486267 and p.sync_time[0] == 0.013738612174987792


# -- the full files in ../shared give the same records ----------------------------------------


def _same(a, b, skip=("source",)):
    for f in a.__dataclass_fields__:
        if f in skip:
            continue
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f)
        else:
            assert x == y, f


def test_shared_copy_loads_the_same(shared_data):
    root = shared_data("pollux-sim")
    for name in ps.WORKLOADS:
        _same(load_workload(name), load_workload(root / "workloads" / f"{name}.csv"))
    for app in ps.APPLICATIONS:
        a, b = load_app_traces(app), load_app_traces(app, root=root)
        assert b.source == str(root / "traces" / app)
        _same(a.placements, b.placements)
        _same(a.scalability, b.scalability)
        assert list(a.validation) == list(b.validation)
        for k in a.validation:
            _same(a.validation[k], b.validation[k])
    _same(load_philly(), load_philly(root / "traces" / "philly.csv"))


def test_root_may_be_the_traces_folder_or_above(tmp_path):
    src = EMBEDDED / "traces" / "yolov3"
    for root in (tmp_path / "a", tmp_path / "b" / "traces"):
        (root / "yolov3").mkdir(parents=True)
        for f in src.iterdir():
            (root / "yolov3" / f.name).write_bytes(gzip.compress(f.read_bytes()) if f.name.startswith("val") else
                                                   f.read_bytes())
    for root in (tmp_path / "a", tmp_path / "b"):
        tr = load_app_traces("yolov3", root=root)
        _same(tr.placements, load_app_traces("yolov3").placements)
        assert tr.batch_sizes == BATCH_SIZES["yolov3"]


# -- malformed files name the file and the line -----------------------------------------------

WL = "name,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,6,2048\nncf-1,135,ncf,1,32768\n"
PL = "placement,local_bsz,step_time,sync_time\n1,32,0.04,0.0005\n22,32,0.14,0.09\n"
SC = "num_nodes,num_replicas,local_bsz,step_time,sync_time\n6,6,32,0.14,0.09\n8,16,32,0.2,0.1\n"
VA = "progress,iteration,metric,grad_sqr,grad_var\n391.0,390,0.44,8.9,5.0\n782.0,781,0.60,1.8,1.5\n"
PH = ("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
      "2017-10-09 06:13:03,2951.0,2,5902.0,6214e9\n")


def _raises(path, line, pattern, fn, *args):
    with pytest.raises(DataFormatError) as e:
        fn(path, *args)
    err = e.value
    assert err.path == str(path), str(err)
    assert err.line == line, str(err)
    prefix = f"{path}: " if line is None else f"{path}, line {line}: "
    assert str(err).startswith(prefix), str(err)
    assert re.search(pattern, err.reason), (pattern, str(err))


def _file(tmp_path, name, text, gz=False):
    p = tmp_path / name
    p.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return p


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("old, new, line, pattern", [
    ("ncf-1,135,ncf,1,32768", "ncf-1,135,ncf,1.5,32768", 3, "num_replicas must be an integer, got '1.5'"),
    ("ncf-1,135,ncf,1,32768", "ncf-1,135,ncf,0,32768", 3, "num_replicas must be >= 1"),
    ("ncf-1,135,ncf,1,32768", "ncf-1,soon,ncf,1,32768", 3, "time must be a number, got 'soon'"),
    ("ncf-1,135,ncf,1,32768", "ncf-1,-5,ncf,1,32768", 3, "time must be >= 0"),
    ("ncf-1,135,ncf,1,32768", "ncf-1,135,resnet,1,32768", 3, r"application must be one of .*got 'resnet'"),
    ("ncf-1,135,ncf,1,32768", "cifar10-0,135,ncf,1,32768", 3, r"duplicate job name \('cifar10-0',\) \(first on line 2"),
    ("ncf-1,135,ncf,1,32768", "ncf-1,135,ncf,1", 3, "expected 5 fields"),
    ("ncf-1,135,ncf,1,32768", ",135,ncf,1,32768", 3, "name is empty"),
    ("num_replicas,batch_size", "replicas,batch_size", 1, r"header must name .*missing \['num_replicas'\]"),
])
def test_malformed_workload(tmp_path, gz, old, new, line, pattern):
    assert old in WL
    p = _file(tmp_path, "w.csv", WL.replace(old, new), gz)
    _raises(p, line, pattern, load_workload)


def test_workload_columns_in_any_order_and_blank_lines(tmp_path):
    text = "batch_size,num_replicas,application,time,name\r\n\r\n2048,6,cifar10,107,a\r\n32768,1,ncf,135,b\r\n"
    w = load_workload(_file(tmp_path, "w.csv", text))
    assert w.name.tolist() == ["a", "b"] and w.batch_size.tolist() == [2048, 32768] and w.time.tolist() == [107, 135]
    p = _file(tmp_path, "w2.csv", text.replace("32768,1,ncf", "32768,1.5,ncf"))
    _raises(p, 4, "num_replicas must be an integer", load_workload)  # the blank line counts
    w = load_workload(_file(tmp_path, "w3.csv", WL.replace("ncf,1", "resnet,1")), applications=None)
    assert w.application.tolist() == ["cifar10", "resnet"]


@pytest.mark.parametrize("text, line, pattern", [
    ("", None, "empty file"),
    ("name,time,application,num_replicas,batch_size\n", None, "no data rows"),
    ("name,time,time,num_replicas,batch_size\n", 1, r"header names \['time'\] twice"),
    ("\x00\x01binary", 1, "control character"),
])
def test_workload_whole_file_problems(tmp_path, text, line, pattern):
    _raises(_file(tmp_path, "w.csv", text), line, pattern, load_workload)


@pytest.mark.parametrize("old, new, line, pattern", [
    ("22,32,0.14", "2a,32,0.14", 3, r"placement must be a string of per-node GPU counts .*got '2a'"),
    ("22,32,0.14", "202,32,0.14", 3, "placement must be a string of per-node GPU counts"),
    ("22,32,0.14,0.09", "22,32,0.09,0.14", 3, "sync_time must be < step_time"),
    ("22,32,0.14", "22,32,0", 3, "sync_time must be < step_time|step_time must be > 0"),
    ("22,32,0.14", "22,0,0.14", 3, "local_bsz must be >= 1"),
    ("22,32,0.14", "1,32,0.14", 3, r"duplicate \(placement, local_bsz\) \('1', 32\) \(first on line 2\)"),
    ("22,32,0.14,0.09", "22,32,nan,0.09", 3, "step_time must be a finite number"),
])
def test_malformed_placements(tmp_path, old, new, line, pattern):
    assert old in PL
    _raises(_file(tmp_path, "placements.csv", PL.replace(old, new)), line, pattern, ps.read_placements)


@pytest.mark.parametrize("old, new, line, pattern", [
    ("8,16,32", "17,16,32", 3, "num_nodes must be <= num_replicas"),
    ("8,16,32,0.2,0.1", "8,16,32,0.1,0.2", 3, "sync_time must be < step_time"),
    ("8,16,32", "6,6,32", 3, r"duplicate \(num_nodes, num_replicas, local_bsz\)"),
    ("8,16,32,0.2,0.1", "8,16,32,0.2", 3, "expected 5 fields"),
])
def test_malformed_scalability(tmp_path, old, new, line, pattern):
    assert old in SC
    _raises(_file(tmp_path, "scalability.csv", SC.replace(old, new)), line, pattern, ps.read_scalability)


@pytest.mark.parametrize("old, new, line, pattern", [
    ("782.0,781", "300.0,781", 3, "progress must not decrease .* got 300.0 after 391.0"),
    ("782.0,781", "782.0,100", 3, "iteration must not decrease"),
    ("1.8,1.5", "-1.8,1.5", 3, "grad_sqr must be >= 0"),
    ("1.8,1.5", "1.8,inf", 3, "grad_var must be a finite number"),
])
def test_malformed_validation(tmp_path, old, new, line, pattern):
    assert old in VA
    _raises(_file(tmp_path, "validation-128.csv", VA.replace(old, new)), line, pattern, ps.read_validation, 128)


def test_malformed_file_inside_an_app_folder(tmp_path):
    app = tmp_path / "traces" / "toy"
    app.mkdir(parents=True)
    _file(app, "placements.csv", PL)
    _file(app, "scalability.csv", SC)
    with pytest.raises(DataFormatError, match="no validation-<batch size>.csv"):
        load_app_traces("toy", root=tmp_path)
    _file(app, "validation-128.csv", VA)
    _file(app, "validation-256.csv.gz", VA, gz=True)
    tr = load_app_traces("toy", root=tmp_path)
    assert tr.batch_sizes == (128, 256) and tr.placements.gpus_per_node.tolist() == [[1, 0], [2, 2]]
    bad = _file(app, "validation-512.csv", VA.replace("782.0,781", "782.0,781.5"))
    _raises(bad, 3, "iteration must be an integer", lambda p: load_app_traces("toy", root=tmp_path))
    bad.unlink()
    _file(app, "validation-128.csv.gz", VA, gz=True)
    _raises(app / "validation-128.csv.gz", None, "a second training curve for batch size 128",
            lambda p: load_app_traces("toy", root=tmp_path))


@pytest.mark.parametrize("old, new, line, pattern", [
    ("2017-10-09 06:13:03", "2017-10-09T06:13", 3, "timestamp must be a date and time"),
    ("2017-10-09 06:13:03", "2017-13-40 06:13:03", 3, "timestamp must be a date and time"),
    ("2951.0,2,", "2951.0,0,", 3, "num_gpus must be >= 1"),
    ("6214e9", "", 3, "cluster is empty"),
])
def test_malformed_philly(tmp_path, old, new, line, pattern):
    assert old in PH
    _raises(_file(tmp_path, "philly.csv", PH.replace(old, new), gz=True), line, pattern, load_philly)


def test_philly_from_a_folder(tmp_path):
    (tmp_path / "traces").mkdir()
    _file(tmp_path / "traces", "philly.csv", PH)
    t = load_philly(tmp_path)
    assert len(t) == 2 and t.num_gpus.tolist() == [1, 2] and t.source == str(tmp_path / "traces" / "philly.csv")


# -- bad arguments ----------------------------------------------------------------------------


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match=r"path_or_name: no embedded workload 'workload-9'"):
        load_workload("workload-9")
    with pytest.raises(FileNotFoundError, match="path_or_name: .*nope.csv does not exist"):
        load_workload(tmp_path / "nope.csv")
    with pytest.raises(TypeError, match="path_or_name must be a file path"):
        load_workload(3)
    with pytest.raises(ValueError, match=r"app must be one of \['bert'"):
        load_app_traces("resnet")
    with pytest.raises(TypeError, match="app must be an application name"):
        load_app_traces(None)
    with pytest.raises(FileNotFoundError, match="root: no folder 'bert'"):
        load_app_traces("bert", root=tmp_path)
    with pytest.raises(ValueError, match="app must be a folder name"):
        load_app_traces("../bert", root=tmp_path)
    with pytest.raises(FileNotFoundError, match="path: no philly.csv"):
        load_philly(tmp_path)
    with pytest.raises(ValueError, match=r"applications does not list \['ncf'\]"):
        load_workload().app_ids(["cifar10", "bert", "deepspeech2", "imagenet", "yolov3"])
