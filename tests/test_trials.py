"""Monte-Carlo trials on every device (scarjax.trials): the mesh, the padding of uneven
trial counts, the chunking to a memory budget and several processes never change a trial.

tests/conftest.py forces 8 host CPU devices, so the default mesh here has 8 devices.
"""

import os
import socket
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import mesh_utils

import scarjax
from scarjax import hooks, perturb, schedules, trials
from scarjax.models import quadratic
from scarjax.perturb import staleness

HERE = Path(__file__).resolve().parent
needs_8 = pytest.mark.skipif(len(jax.devices()) < 8, reason="needs 8 (forced host) devices")
N = 21  # uneven: 8 devices x a block of 4 hold 32, so 11 trials are padding
STEPS = 6
SEED = 7


@pytest.fixture(scope="module")
def qp():
    return quadratic.fig53_problem()


@pytest.fixture(scope="module")
def keys():
    return jax.random.split(jax.random.key(SEED), N)


@pytest.fixture(scope="module")
def one_device():
    return trials.trials_mesh(jax.devices()[:1])


def _noisy():
    """Randomness that enters the QP's batched product: noise at random steps."""
    return hooks.scheduled(perturb.gaussian(0.05), schedules.with_probability(0.3))


def _rel(a, b):
    worst = 0.0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        scale = np.max(np.abs(y)) if y.size else 0.0
        if scale > 0:
            worst = max(worst, float(np.max(np.abs(x - y)) / scale))
    return worst


@needs_8
def test_default_mesh_is_every_device_and_plan_pads_least():
    assert trials.trials_mesh().devices.size == len(jax.devices()) == 8
    assert trials._plan(13, 8, 100) == (16, 1)           # 3 padded trials
    assert trials._plan(13, 8, 1) == (8, 2)               # 2 chunks of 8
    assert trials._plan(13, 1, 100) == (13, 1)
    assert trials._plan(100_000, 8, 1000) == (7696, 13)  # 13 chunks, 48 padded (not 4000)
    assert trials._plan(13, 8, 1, 4) == (32, 1)           # blocks are multiples of vmap_size


@pytest.fixture(scope="module")
def noisy_results(qp, keys, one_device):
    """The noisy QP's 21 trials in four configurations, and run() for two of the keys."""
    h = _noisy()
    out = {
        # vmap_size fixed: 8 devices x a block of 4, one chunk, 11 padded trials ...
        "eight": trials.run_trials(qp, h, STEPS, keys, vmap_size=2),
        # ... one device in 6 chunks of 4 (3 padded) ...
        "chunked": trials.run_trials(qp, h, STEPS, keys, mesh=one_device, chunk_size=4, vmap_size=2),
        # default: every device vmaps its whole block.
        "default": trials.run_trials(qp, h, STEPS, keys),
    }
    count = {"calls": 0}
    inner = trials._sharded

    def counted(*a, **k):
        count["calls"] += 1
        return inner(*a, **k)

    trials._sharded = counted
    try:  # ... and 8 devices in 2 chunks of 16 (a memory budget of 2 trials per device).
        budget = 2 * trials.trial_bytes(qp, h, STEPS)
        out["budgeted"] = trials.run_trials(qp, h, STEPS, keys, memory_budget=budget, vmap_size=2)
    finally:
        trials._sharded = inner
    out["budget_chunks"] = count["calls"]
    out["run"] = {i: scarjax.run(qp, h, STEPS, keys[i]) for i in (0, N - 1)}
    return out


@needs_8
def test_fixed_vmap_size_bit_identical_across_meshes_chunks_and_padding(noisy_results):
    """With vmap_size fixed, every trial is the same bits on 8 devices (one chunk, 11
    padded), on one device in 6 chunks of 4, and on 8 devices in 2 chunks of 16."""
    r = noisy_results
    eight = r["eight"]
    assert r["budget_chunks"] == 2
    assert eight[1].loss.shape == (N, STEPS + 1)
    assert isinstance(r["chunked"][1].loss, np.ndarray)  # chunks are assembled on the host
    for other in (r["chunked"], r["budgeted"]):
        chex.assert_trees_all_equal(jax.tree.map(np.asarray, eight), jax.tree.map(np.asarray, other))
    fired = np.asarray(eight[1].delta["gaussian"]) > 0
    assert 0 < fired.mean() < 1 and not np.all(fired == fired[0])  # trials differ


@needs_8
def test_discrete_outcomes_identical_and_floats_to_rounding_in_every_configuration(noisy_results):
    """Whatever the vmap width, mesh or chunks, the random numbers, hence which steps
    fire, are those of run(keys[i]); floats agree to rounding (a batched product sums in
    an order that depends on the batch size)."""
    r = noisy_results
    for i, one in r["run"].items():  # the first trial and one in the last, padded chunk
        for name in ("eight", "chunked", "default"):
            got = scarjax.split_trials(r[name], i)
            np.testing.assert_array_equal(np.asarray(got[1].delta["gaussian"]) > 0,
                                          np.asarray(one[1].delta["gaussian"]) > 0)
            assert _rel(got, one) <= 1e-5


@needs_8
def test_without_batched_products_every_configuration_is_run_bit_for_bit(qp, keys, one_device):
    """The unperturbed QP (no trial-dependent product): 8 devices, one device, chunks
    of 5 and run(keys[i]) give the same bits."""
    eight = trials.run_trials(qp, None, STEPS, keys)
    chunked = trials.run_trials(qp, None, STEPS, keys, mesh=one_device, chunk_size=5)
    chex.assert_trees_all_equal(jax.tree.map(np.asarray, eight), jax.tree.map(np.asarray, chunked))
    chex.assert_trees_all_equal(jax.tree.map(np.asarray, scarjax.split_trials(eight, N - 1)),
                                jax.tree.map(np.asarray, scarjax.run(qp, None, STEPS, keys[N - 1])))


def test_factory_hook_args_are_split_padded_and_chunked_with_the_keys(qp):
    """hook_args travel with their trial through the split, the padding (copies of trial
    0, dropped) and the chunks: trial i's adversarial kick has size sizes[i]."""
    n = 13
    sizes = jnp.linspace(0.1, 1.3, n)
    kick = lambda s: hooks.scheduled(perturb.adversarial(s), 2)  # noqa: E731
    _, tr = trials.run_trials(qp, kick, 4, jax.random.split(jax.random.key(1), n), hook_args=sizes, chunk_size=8)
    assert tr.point_delta["write"].shape == (n, 4)
    np.testing.assert_allclose(tr.point_delta["write"][:, 2], sizes, rtol=1e-5)


@needs_8
def test_explicit_mesh_uses_all_its_axes(qp, keys):
    """A parameter-server mesh ('server', 'worker') splits the trials over all its devices."""
    from scarjax import ps

    mesh = ps.make_mesh(4, 2)
    st, tr = trials.run_trials(qp, None, STEPS, keys[:16], mesh=mesh)
    assert tr.loss.sharding.mesh.devices.size == 8 and len(tr.loss.addressable_shards) == 8
    chex.assert_trees_all_equal(np.asarray(tr.loss), np.asarray(trials.run_trials(qp, None, STEPS, keys[:16])[1].loss))


def test_inside_a_transformation_trials_are_one_vmap(qp, keys):
    traced = jax.jit(lambda k: trials.run_trials(qp, None, STEPS, k)[1].distance)(keys[:4])
    np.testing.assert_array_equal(traced, np.asarray(trials.run_trials(qp, None, STEPS, keys[:4])[1].distance))


def test_worker_mode_trials(qp, keys):
    """workers=M runs every trial in worker mode (here SSP over 4 workers), sharded."""
    h = staleness.ssp(4, 2)
    _, tr = trials.run_trials(qp, h, STEPS, keys[:9], workers=4)
    _, one = scarjax.run(qp, h, STEPS, keys[8], workers=4)
    assert tr.points.shape == (9, STEPS)
    assert _rel(scarjax.split_trials(tr, 8), one) <= 1e-5
    with pytest.raises(ValueError, match="workers"):
        trials.run_trials(qp, h, STEPS, keys[:9])


def test_progress_bar(qp, keys, capsys, one_device):
    trials.run_trials(qp, None, STEPS, keys[:6], mesh=one_device, chunk_size=3, progress=True)
    err = capsys.readouterr().err
    assert "trials" in err and "/6" in err


def test_trial_bytes_is_the_trace_plus_three_carries(qp):
    """The estimate is eval_shape's trace plus three copies of the state and hook states."""
    est = trials.trial_bytes(qp, None, 10)
    # trace: loss and distance [11], point_delta 3 x [10], initial distance, the matmul precision
    # and |w*| it records (two scalars); state: w[4].
    assert est == 4 * (11 + 11 + 30 + 1 + 2) + 3 * 4 * 4
    assert trials.trial_bytes(qp, _noisy(), 10) > est  # + the hook's delta trace and state


def test_bad_options_name_the_argument(qp):
    with pytest.raises(TypeError, match="mesh"):
        trials.run_trials(qp, None, 3, 2, mesh="all")
    with pytest.raises(ValueError, match="chunk_size or memory_budget"):
        trials.run_trials(qp, None, 3, 2, chunk_size=2, memory_budget=10**6)
    with pytest.raises(ValueError, match="chunk_size"):
        trials.run_trials(qp, None, 3, 2, chunk_size=0)
    with pytest.raises(ValueError, match="memory_budget"):
        trials.run_trials(qp, None, 3, 2, memory_budget=-1)
    with pytest.raises(ValueError, match="vmap_size"):
        trials.run_trials(qp, None, 3, 2, vmap_size=0)
    with pytest.raises(TypeError, match="progress"):
        trials.run_trials(qp, None, 3, 2, progress="yes")
    with pytest.raises(ValueError, match="devices"):
        trials.trials_mesh([])


@needs_8
def test_mesh_devices_from_create_device_mesh_keep_their_layout():
    """docs/multihost.md: make_mesh(devices=create_device_mesh(...)) keeps the given 2-D
    layout (it used to flatten the array's rows and fail), and a 1-D list keeps its order."""
    from scarjax import ps

    grid = mesh_utils.create_device_mesh((4, 2))
    mesh = ps.make_mesh(4, 2, devices=grid)
    assert mesh.axis_names == ("server", "worker")
    np.testing.assert_array_equal(mesh.devices, grid)
    swapped = ps.make_mesh(2, 4, devices=grid.T)  # server shards are the grid's columns
    np.testing.assert_array_equal(swapped.devices, grid.T)
    rev = ps.make_mesh(2, 2, devices=jax.devices()[::-1])
    assert [d.id for d in rev.devices.flat] == [7, 6, 5, 4]
    with pytest.raises(ValueError, match="needs 8 devices"):
        ps.make_mesh(4, 2, devices=grid[:2])


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@needs_8
def test_two_processes_by_four_devices_equal_one_process(noisy_results, tmp_path):
    """2 processes x 4 CPU devices (jax.distributed, gloo), in 2 chunks: every process gets
    all 21 trials, bit-identical to this process's 8 devices (vmap_size fixed)."""
    port, out = _free_port(), tmp_path / "trials"
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    procs = [subprocess.Popen([sys.executable, str(HERE / "_trials_mp_worker.py"), str(port), str(i), str(out)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    if any(p.returncode for p in procs):
        if any("gloo" in log.lower() and "not" in log.lower() and "support" in log.lower() for log in logs):
            pytest.skip("this jaxlib has no CPU gloo collectives")
        raise AssertionError("worker processes failed:\n" + "\n----\n".join(log[-3000:] for log in logs))
    import _trials_mp_worker as w

    assert (w.N, w.STEPS, w.SEED, w.VMAP) == (N, STEPS, SEED, 2)
    st, tr = noisy_results["eight"]
    for pid in (0, 1):
        got = np.load(f"{out}{pid}.npz")
        assert int(got["chunks"]) == 2
        np.testing.assert_array_equal(got["params"], np.asarray(st.params))
        np.testing.assert_array_equal(got["loss"], np.asarray(tr.loss))
        np.testing.assert_array_equal(got["gaussian"], np.asarray(tr.delta["gaussian"]))
