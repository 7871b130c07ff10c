"""Tests for scarjax.persistent: the running checkpoint on disk with orbax-checkpoint,
asynchronous writes, crash consistency (SIGKILL during a write), partial recovery from
disk, and clear errors for corrupted or missing files."""

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from scarjax import State
from scarjax import checkpoint as ck
from scarjax import faults as F
from scarjax import partition as P
from scarjax import persistent as PS


def _state(v, rows=12):
    params = {"w": jnp.full((rows, 3), float(v)), "b": jnp.full((3,), float(v))}
    opt = jax.tree.map(lambda x: x + v, optax.adam(1e-3).init(params))
    return State(params, opt)


def _flat(state):
    return [np.asarray(x) for x in jax.tree.leaves(state)]


def _assert_state_equal(a, b):
    for x, y in zip(_flat(a), _flat(b)):
        np.testing.assert_array_equal(x, y)


@pytest.fixture()
def store_dir(tmp_path):
    return tmp_path / "ckpt"


def test_running_checkpoint_roundtrip_and_gc(store_dir):
    s0 = _state(0)
    part = P.by_row(s0, num_servers=3, key=0)
    B = part.num_blocks  # 3 (b) + 12 (w)
    store = PS.PersistentCheckpoint(store_dir, part, s0)
    store.initialize(s0)
    cache = ck.init(s0, part)
    masks = {}
    for step in (2, 4, 6, 8):
        s = _state(step)
        mask = np.zeros(B, bool)
        mask[(step // 2 - 1) * 4:(step // 2) * 4] = True  # 4 disjoint blocks each time
        cache = ck.save(cache, s, part, jnp.asarray(mask), step)
        store.save(step, s, mask)  # asynchronous
        masks[step] = mask
    store.wait()
    assert store.latest_step() == 8
    # The on-disk running checkpoint equals the in-memory cache (mixed iterations).
    _assert_state_equal(store.load(s0), cache.saved)
    latest, loc, at = store.manifest()
    np.testing.assert_array_equal(at, cache.saved_at)
    # Blocks: b -> 0..2, w row i -> 3 + i. Every block was re-saved after step 0, so step
    # 0 is no longer referenced and was garbage-collected.
    assert set(store.steps()) == {2, 4, 6, 8}
    # Re-saving the blocks of steps 2 and 4 makes those steps garbage.
    store.save(10, _state(10), masks[2])
    store.save(12, _state(12), masks[4])
    store.wait()
    assert set(store.steps()) == {6, 8, 10, 12}
    assert store.verify() == 12
    # Partial recovery reads exactly the lost blocks back from disk.
    lost = np.zeros(B, bool)
    lost[[0, 5, 13]] = True  # b[0] (saved at 10), w row 2 (at 12), w row 10 (at 8)
    cur = _state(99)
    rec = store.restore(cur, lost)
    np.testing.assert_array_equal(rec.params["b"], [10, 99, 99])
    w = np.asarray(rec.params["w"])
    expect_w = np.full(12, 99.0)
    expect_w[2], expect_w[10] = 12, 8
    np.testing.assert_array_equal(w, expect_w[:, None] * np.ones((1, 3)))
    np.testing.assert_array_equal(rec.aux[0].mu["w"], w)  # moments come back with their rows
    np.testing.assert_array_equal(rec.aux[0].nu["b"], [10, 99, 99])
    assert int(rec.aux[0].count) == 99  # never-lost leaves untouched by partial recovery
    assert int(store.load(s0).aux[0].count) == 12  # ... and refreshed by every save
    store.close()
    # Reopening finds the same running checkpoint.
    again = PS.PersistentCheckpoint(store_dir, part, s0)
    _assert_state_equal(again.load(s0), store.load(s0))
    again.close()


def test_layout_mismatch_and_bad_inputs(store_dir):
    s0 = _state(0)
    part = P.by_row(s0, num_servers=3, key=0)
    with PS.PersistentCheckpoint(store_dir, part, s0) as store:
        store.initialize(s0)
        with pytest.raises(ValueError, match="step"):
            store.save(0, s0, np.ones(part.num_blocks, bool))
        with pytest.raises(ValueError, match="block_mask"):
            store.save(3, s0, np.ones(2, bool))
        with pytest.raises(ValueError, match="shape"):
            store.save(3, _state(0, rows=5), np.ones(part.num_blocks, bool))
    other = P.by_layer(s0)
    with pytest.raises(PS.CheckpointError, match="layout"):
        PS.PersistentCheckpoint(store_dir, other, s0)
    with pytest.raises(TypeError, match="partition"):
        PS.PersistentCheckpoint(store_dir, None, s0)


def _find_files(root: Path, pattern: str):
    return [p for p in root.rglob(pattern) if p.is_file()]


# orbax leaves an async callback behind when a restore fails on a damaged container; it
# reports "Event loop is closed" at garbage collection, harmlessly.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("damage", ["array_bytes", "tampered_values", "metadata", "missing_step", "missing_file"])
def test_corrupted_or_missing_files_raise(store_dir, damage):
    s0 = _state(0)
    part = P.by_row(s0, num_servers=3, key=0)
    store = PS.PersistentCheckpoint(store_dir, part, s0, async_write=False)
    store.initialize(s0)
    mask = np.zeros(part.num_blocks, bool)
    mask[:5] = True
    store.save(4, _state(4), mask)
    store.close()
    step4 = store_dir / "4"
    if damage == "array_bytes":
        # Flip bytes in every stored chunk of step 4: reading must fail or mismatch.
        files = [p for p in _find_files(step4 / "blocks", "*") if p.parent.name == "d"]
        assert files
        for f in files:
            data = bytearray(f.read_bytes())
            for i in range(len(data) // 2, len(data)):
                data[i] ^= 0xFF
            f.write_bytes(bytes(data))
    elif damage == "tampered_values":
        # Well-formed files with wrong numbers (what a bit flip inside a chunk that the
        # container does not notice would give): only the checksum can tell.
        import orbax.checkpoint as ocp

        ckptr = ocp.StandardCheckpointer()
        arrays = dict(ckptr.restore(step4 / "blocks"))
        arrays["leaf_3"] = np.asarray(arrays["leaf_3"]) + 1.0
        ckptr.save(tmp_blocks := store_dir.parent / "tampered", arrays)
        ckptr.wait_until_finished()
        ckptr.close()
        shutil.rmtree(step4 / "blocks")
        shutil.copytree(tmp_blocks, step4 / "blocks")
    elif damage == "metadata":
        meta_files = _find_files(step4 / "meta", "metadata")
        meta = json.loads(meta_files[0].read_text())
        meta["checksums"]["leaf_3"] = "0" * 64
        meta_files[0].write_text(json.dumps(meta))
    elif damage == "missing_step":
        shutil.rmtree(store_dir / "0")  # still referenced by the manifest of step 4
    else:
        for f in _find_files(step4 / "blocks", "*"):
            if f.parent.name == "d":
                f.unlink()
    reopened = None
    with pytest.raises(PS.CheckpointError, match=r"step (0|4)") as err:
        reopened = PS.PersistentCheckpoint(store_dir, part, s0)
        try:
            reopened.verify()
        finally:
            reopened.close()
    expected = {"array_bytes": "corrupted", "metadata": "checksum mismatch",
                "tampered_values": "checksum mismatch for array 'leaf_3'",
                "missing_step": "missing", "missing_file": "missing or corrupted"}[damage]
    assert expected in str(err.value)
    print(damage, "->", err.value)
    if damage == "missing_step":
        assert reopened is not None  # opening works; reading the lost step fails
        again = PS.PersistentCheckpoint(store_dir, part, s0)
        try:
            with pytest.raises(PS.CheckpointError, match="missing"):
                again.load(s0)
        finally:
            again.close()


# --------------------------------------------------------------------------------------
# Crash consistency: SIGKILL while an asynchronous write is in flight.

_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    import numpy as np, jax
    from orbax.checkpoint._src.path import atomicity
    from scarjax import checkpoint as ck, faults as F, partition as P, persistent as PS
    from scarjax.models import mlr

    directory, expect_dir, hang_at = sys.argv[1], sys.argv[2], int(sys.argv[3])

    # Slow storage: the commit (atomic rename) of the save at iteration `hang_at` stalls,
    # so that write is in flight, half-done, when the parent kills us.
    _orig = atomicity.AtomicRenameTemporaryPath.finalize
    async def _slow(self, *a, **kw):
        if self._final_path.name == str(hang_at):
            print("INFLIGHT", hang_at, flush=True)
            await asyncio.sleep(600)
        return await _orig(self, *a, **kw)
    atomicity.AtomicRenameTemporaryPath.finalize = _slow

    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 9)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(9, 4)), axis=1)
    alg = mlr.mlr(x, y, num_classes=4, lr=0.5, batch_size=32)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    part = P.by_row(s0, num_servers=4, key=0)

    def on_save(k, cache, mask):
        # What the running checkpoint must hold once save k is complete.
        np.savez(os.path.join(expect_dir, f"{k}.npz"),
                 *[np.asarray(l) for l in jax.tree.leaves(cache.saved)])
        print("SAVE", k, flush=True)

    PS.run(alg, part, ck.Checkpoint("priority", 0.25, 8), 40, 0, directory, on_save=on_save)
    print("DONE", flush=True)
    """
)


def test_sigkill_during_async_write_leaves_consistent_checkpoint(tmp_path):
    directory, expect_dir = tmp_path / "ckpt", tmp_path / "expect"
    expect_dir.mkdir()
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    hang_at = 10  # saves every round(0.25*8) = 2 iterations: 2, 4, ..., 10 hangs
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    proc = subprocess.Popen([sys.executable, str(script), str(directory), str(expect_dir), str(hang_at)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
            if line.startswith("INFLIGHT"):
                break
        assert lines and lines[-1].startswith("INFLIGHT"), (lines, proc.stderr.read() if proc.poll() is not None else "")
        # Evidence that the write is in flight: its uncommitted tmp directory exists.
        tmp_dirs = [p for p in directory.iterdir() if p.name.startswith(f"{hang_at}.") and "tmp" in p.name]
        assert tmp_dirs, sorted(p.name for p in directory.iterdir())
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert not (directory / str(hang_at)).exists()  # never committed

    # Restart: the checkpoint on disk is the last *completed* save, intact.
    from scarjax.models import mlr  # same model as the child

    rng = np.random.default_rng(0)
    x = rng.normal(size=(128, 9)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(9, 4)), axis=1)
    alg = mlr.mlr(x, y, num_classes=4, lr=0.5, batch_size=32)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    part = P.by_row(s0, num_servers=4, key=0)
    store = PS.PersistentCheckpoint(directory, part, s0)
    assert store.latest_step() == hang_at - 2
    assert store.verify() == hang_at - 2
    # The half-written step was cleaned up on open.
    assert not [p for p in directory.iterdir() if "tmp" in p.name]
    template = alg.init(jax.random.key(0), alg.data)
    on_disk = store.load(template)
    expected = np.load(expect_dir / f"{hang_at - 2}.npz")
    for i, leaf in enumerate(jax.tree.leaves(on_disk)):
        np.testing.assert_array_equal(np.asarray(leaf), expected[f"arr_{i}"])
    # ... and it differs from the save that was in flight (so we did not read it).
    inflight = np.load(expect_dir / f"{hang_at}.npz")
    assert not all(np.array_equal(np.asarray(l), inflight[f"arr_{i}"]) for i, l in enumerate(jax.tree.leaves(on_disk)))

    # Partial recovery of two simulated lost servers from the surviving checkpoint.
    current = jax.tree.map(lambda a: a + 5.0 if a.dtype == jnp.float32 else a, template)
    failed = jnp.zeros(4, bool).at[jnp.array([1, 3])].set(True)
    lost = np.asarray(P.server_blocks(part, failed))
    rec = store.restore(current, lost)
    masks = P.expand_mask(P.entry_masks(part, jnp.asarray(lost)), rec)
    for i, (m, r, c) in enumerate(zip(jax.tree.leaves(masks), jax.tree.leaves(rec), jax.tree.leaves(current))):
        m = np.asarray(m)
        np.testing.assert_array_equal(np.asarray(r)[m], expected[f"arr_{i}"][m])
        np.testing.assert_array_equal(np.asarray(r)[~m], np.asarray(c)[~m])
    store.close()


def test_driver_failure_and_recovery_from_disk(tmp_path):
    from scarjax.models import mlr

    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 5)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(5, 3)), axis=1)
    alg = mlr.mlr(x, y, num_classes=3, lr=0.5)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    part = P.by_row(s0, num_servers=3, key=0)
    res = {}
    for rec in ("partial", "full"):
        res[rec] = PS.run(alg, part, ck.Checkpoint("full", 1.0, 6), 16, 0, tmp_path / rec,
                          failure=F.Failure(servers=1, at=11), recovery=rec)
    p, f = res["partial"], res["full"]
    assert p.loss.shape == (17,) and np.all(np.isfinite(p.loss))
    np.testing.assert_array_equal(p.loss[:12], f.loss[:12])  # identical until the failure
    assert 0 < p.delta[11] <= f.delta[11]  # Thm 5.4.1, recovered from disk
    assert np.count_nonzero(f.delta) == 1
    kinds = [e["kind"] for e in p.events]
    assert kinds == ["checkpoint", "failure", "checkpoint"]
    assert all(e["select_s"] >= 0 and e["save_call_s"] >= 0 for e in p.events if e["kind"] == "checkpoint")
    with pytest.raises(ValueError, match="already holds"):
        PS.run(alg, part, ck.Checkpoint("full", 1.0, 6), 16, 0, tmp_path / "partial")
