"""Two processes x 4 CPU devices (gloo collectives) equal one process x 8 devices."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from scarjax import ps as sps

from . import _problems as pb

HERE = Path(__file__).resolve().parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_processes_equal_single_process(mesh42, tmp_path):
    port = _free_port()
    out = tmp_path / "mp.npz"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [subprocess.Popen([sys.executable, "-m", "ps._mp_worker", str(port), str(i), str(out)],
                              cwd=HERE.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=120)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if any(p.returncode for p in procs):
        if any("gloo" in l.lower() and "not" in l.lower() and "support" in l.lower() for l in logs):
            pytest.skip("this jaxlib has no CPU gloo collectives")
        raise AssertionError("worker processes failed:\n" + "\n----\n".join(l[-3000:] for l in logs))
    got = np.load(out)
    alg = pb.mlr_adam()
    ps = sps.ParameterServer(alg, pb.row_partition(alg), mesh42, workers=8)
    key = jax.random.key(3)
    st, tr = ps.run(ps.init(key), 6, key)
    np.testing.assert_allclose(got["w"], np.asarray(ps.logical(st).params["w"]), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got["loss"], np.asarray(tr.loss), rtol=1e-6)
