"""Garbage in, a clear error out, for the ``scarjax`` command line: every bad option, file or
name exits with status 2 and one line on stderr, ``scarjax CMD: error: argument OPTION: ...``
(argparse's form, naming the option, and for a malformed file the file and line), never a
Python traceback and never after minutes of work.

End to end in a subprocess (what a user runs) for one case of each kind; in process, with
hypothesis drawing the bad values, for every numeric option.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scarjax import cli

FAST = settings(deadline=None, max_examples=20, suppress_health_check=[HealthCheck.function_scoped_fixture])

HEADER = "name,time,application,num_replicas,batch_size"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    (d / "ok.csv").write_text(f"{HEADER}\nncf-0,0,ncf,1,32768\nbert-1,20,bert,2,96\n")
    (d / "short_header.csv").write_text("name,time,application\nncf-0,0,ncf\n")
    (d / "bad_row.csv").write_text(f"{HEADER}\nncf-0,0,ncf,1,32768\nbert-1,soon,bert,2,96\n")
    (d / "huge_batch.csv").write_text(f"{HEADER}\nncf-0,0,ncf,1,32768\nbert-1,20,bert,2,1000000000\n")
    (d / "a_file").write_text("")
    (d / "empty_out").mkdir()
    return d


def run_cli(*argv, cwd=None):
    return subprocess.run([sys.executable, "-m", "scarjax.cli", *argv], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


# (argv with {d} for the files folder, the command, what the one line must contain)
CASES = [
    (["cluster-sim", "--workload", "{d}/missing.csv", "--policy", "tiresias", "--out", "{d}/x.json"],
     "cluster-sim", ["argument --workload:", "missing.csv does not exist", "workload-1"]),
    (["cluster-sim", "--workload", "{d}/short_header.csv", "--policy", "tiresias", "--out", "{d}/x.json"],
     "cluster-sim", ["argument --workload:", "short_header.csv, line 1:", "missing ['num_replicas', 'batch_size']"]),
    (["cluster-sim", "--workload", "{d}/bad_row.csv", "--policy", "tiresias", "--out", "{d}/x.json"],
     "cluster-sim", ["argument --workload:", "bad_row.csv, line 3:", "time"]),
    (["cluster-sim", "--workload", "{d}/huge_batch.csv", "--policy", "pollux", "--out", "{d}/x.json"],
     "cluster-sim", ["argument --workload:", "batch_size 1000000000 of row 2 (job 'bert-1')", "384"]),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--nodes", "0", "--out", "{d}/x.json"],
     "cluster-sim", ["argument --nodes: must be an integer >= 1, got '0'"]),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--out", "{d}/empty_out"],
     "cluster-sim", ["argument --out:", "is a directory"]),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--out", "{d}/a_file/x.json"],
     "cluster-sim", ["argument --out:", "is a file, not a directory"]),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--nodes", "1", "--out", "{d}/x.json"],
     "cluster-sim", ["argument --workload:", "num_replicas 32 of row 12 (job 'imagenet-11')", "--nodes 1"]),
    (["cluster-sim", "--workload", "workload-1", "--policy", "fifo", "--out", "{d}/x.json"],
     "cluster-sim", ["argument --policy: invalid choice: 'fifo'"]),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--traces", "{d}/missing",
      "--out", "{d}/x.json"], "cluster-sim", ["argument --traces:", "does not exist"]),
    (["plan", "--market", "moon:1"], "plan", ["argument --market: must be aws:ZONE:TYPE"]),
    (["plan", "--market", "aws:us-east-1z:c3.xlarge"], "plan", ["argument --market:", "zone", "us-east-1z"]),
    (["plan", "--market", "parametric:x:0.1:0.5"], "plan", ["argument --market: MTTF_H", "'x'"]),
    (["plan", "--objective", "cost_deadline", "--deadline-h", "-1"], "plan",
     ["argument --deadline-h: must be a finite number > 0 hours, got '-1'"]),
    (["plan", "--objective", "cost_deadline"], "plan", ["argument --deadline-h: is required with --objective cost_deadline"]),
    (["plan", "--max-machines", "0"], "plan", ["argument --max-machines: must be an integer >= 1, got '0'"]),
    (["plan", "--data", "{d}/missing"], "plan", ["argument --data:", "does not exist"]),
    (["plan", "--data", "{d}"], "plan", ["argument --data:", "us-east-1a-Linux-c3.xlarge.csv"]),
    (["plan", "--window-days", "0.0001"], "plan", ["argument --window-days:", "at least 2 minutes"]),
    (["reproduce", "no_such_figure", "--out", "{d}/o"], "reproduce", ["argument names: unknown experiment(s) no_such_figure"]),
    (["reproduce", "--out", "{d}/a_file"], "reproduce", ["argument --out:", "is a file"]),
    (["replot", "--out", "{d}/empty_out"], "replot", ["argument --out: no results in"]),
    (["replot", "staleness", "--results", "{d}/missing"], "replot", ["argument --results:", "does not exist"]),
    (["replot", "staleness", "--out", "{d}/empty_out"], "replot", ["argument --out: no results of staleness"]),
    (["list", "extra"], "", ["unrecognized arguments: extra"]),
]


@pytest.mark.parametrize("argv, command, needles", CASES, ids=[" ".join(c[0][:3]) for c in CASES])
def test_cli_bad_input_is_one_line_exit_2(files, argv, command, needles):
    argv = [a.format(d=files) for a in argv]
    r = run_cli(*argv, cwd=files)
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, err[-2000:])
    assert "Traceback" not in r.stderr and len(err.splitlines()) == 1, err
    assert err.startswith(f"scarjax {command}: error: " if command else "scarjax: error: "), err
    for n in needles:
        assert n.format(d=files) in err, (n, err)
    assert r.stdout == "" or command == "plan", r.stdout  # nothing ran before the error


# -- every numeric option, in process --------------------------------------------------------

NUMERIC = [  # (command prefix, option, bad values)
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--out", "x.json"], "--nodes", "int>=1"),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--out", "x.json"], "--gpus-per-node", "int1-4"),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--out", "x.json"], "--seed", "int>=0"),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--out", "x.json"], "--interval", "real>0"),
    (["cluster-sim", "--workload", "workload-1", "--policy", "tiresias", "--out", "x.json"], "--interference", "real0-1"),
    (["plan"], "--deadline-h", "real>0"),
    (["plan"], "--budget", "real>0"),
    (["plan"], "--max-machines", "int>=1"),
    (["plan"], "--window-days", "real>0"),
    (["plan"], "--seed", "int>=0"),
]
_not_number = st.sampled_from(["", "x", "1,5", "0x10", "1e", "one"])
BAD = {
    "int>=1": st.one_of(st.integers(max_value=0).map(str), st.floats(allow_nan=False).filter(
        lambda x: not x.is_integer()).map(repr), _not_number),
    "int>=0": st.one_of(st.integers(max_value=-1).map(str), st.just("1.5"), _not_number),
    "int1-4": st.one_of(st.integers().filter(lambda i: not 1 <= i <= 4).map(str), _not_number),
    "real>0": st.one_of(st.floats(max_value=0.0).map(repr), st.sampled_from(["nan", "inf", "-inf"]), _not_number),
    "real0-1": st.one_of(st.floats().filter(lambda x: not 0.0 <= x < 1.0).map(repr), st.just("nan"), _not_number),
}


@pytest.mark.parametrize("prefix, option, kind", NUMERIC, ids=[f"{p[0]} {o}" for p, o, _ in NUMERIC])
@FAST
@given(data=st.data())
def test_cli_numeric_options_refuse_bad_values(capsys, prefix, option, kind, data):
    value = data.draw(BAD[kind], label=option)
    with pytest.raises(SystemExit) as e:
        cli.main([*prefix, f"{option}={value}"])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and len(err.splitlines()) == 1, err
    assert f"error: argument {option}: must be " in err and repr(value) in err, err


def test_planted_violation_a_traceback_fails_the_check(files):
    """The subprocess check can fail: an uncaught exception is a traceback and exit status 1."""
    r = subprocess.run([sys.executable, "-c", "raise ValueError('x')"], capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" in r.stderr
