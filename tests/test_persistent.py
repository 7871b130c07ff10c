"""Tests for scarjax.scar.persistent: the running checkpoint on disk with orbax-checkpoint,
asynchronous writes, crash consistency (SIGKILL during a write), partial recovery from
disk, and clear errors for corrupted or missing files."""

import json
import os
import re
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
from scarjax import schedules as S
from scarjax.scar import checkpoint as ck
from scarjax.scar import faults as F
from scarjax.scar import partition as P
from scarjax.scar import persistent as PS


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
    # Blocks: b -> 0..2, w row i -> 3 + i. The last keep=2 manifests (steps 6 and 8) are
    # kept with every step they reference: manifest 6 still takes w rows 9..11 from step
    # 0; manifest 8 no longer does.
    assert set(store.steps()) == {0, 2, 4, 6, 8}
    # Re-saving the blocks of steps 2 and 4: manifests 10 and 12 reference 4..12, so
    # steps 0 and 2 are garbage.
    store.save(10, _state(10), masks[2])
    store.save(12, _state(12), masks[4])
    store.wait()
    assert set(store.steps()) == {4, 6, 8, 10, 12}
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


def _all(part):
    return np.ones(part.num_blocks, bool)


def _full_saves(store_dir, steps=(2, 4), **kw):
    """A store with full saves (every block) at ``steps``; returns (s0, partition)."""
    s0 = _state(0)
    part = P.by_row(s0, num_servers=3, key=0)
    with PS.PersistentCheckpoint(store_dir, part, s0, async_write=False, **kw) as store:
        store.initialize(s0)
        for step in steps:
            store.save(step, _state(step), _all(part))
    return s0, part


def _damage(step_dir: Path, how: str) -> str:
    """Damage committed step ``step_dir`` as ``how``; returns the reason the store must give."""
    data = [p for p in _find_files(step_dir / "blocks", "*") if p.parent.name == "d"]
    f = max(data, key=lambda p: p.stat().st_size)  # the array values (OCDBT data file)
    name, raw = f.relative_to(step_dir).as_posix(), f.read_bytes()
    if how == "flipped":
        f.write_bytes(raw[: len(raw) // 2] + bytes(b ^ 0xFF for b in raw[len(raw) // 2:]))
        return f"checksum mismatch in file {name}"
    if how == "truncated":
        f.write_bytes(raw[: len(raw) // 2])
        return f"truncated file {name} ({len(raw) // 2} of {len(raw)} bytes)"
    if how == "deleted":
        f.unlink()
        return f"missing file {name}"
    if how == "tampered_values":
        # Well-formed files with wrong numbers whose file record agrees (what a bit flip in
        # memory before the write would give): only the array checksum can tell.
        import orbax.checkpoint as ocp

        ckptr = ocp.StandardCheckpointer()
        arrays = dict(ckptr.restore(step_dir / "blocks"))
        arrays["leaf_3"] = np.asarray(arrays["leaf_3"]) + 1.0
        tmp_blocks = step_dir.parent.parent / "tampered"
        ckptr.save(tmp_blocks, arrays)
        ckptr.wait_until_finished()
        ckptr.close()
        shutil.rmtree(step_dir / "blocks")
        shutil.copytree(tmp_blocks, step_dir / "blocks")
        PS._record_files(step_dir)
        return "checksum mismatch for array 'leaf_3'"
    if how == "metadata":
        meta_file = step_dir / "meta" / "metadata"
        meta = json.loads(meta_file.read_text())
        meta["checksums"]["leaf_3"] = "0" * 64
        meta_file.write_text(json.dumps(meta))
        return "checksum mismatch in file meta/metadata"
    assert how == "record_deleted"
    (step_dir / "files.json").unlink()
    return "missing file files.json"


DAMAGE = ["flipped", "truncated", "deleted", "tampered_values", "metadata", "record_deleted"]


# Any "Event loop is closed" from orbax's reader would surface as this warning: fail on it.
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("how", DAMAGE)
def test_damaged_newest_step_is_skipped_on_open(store_dir, how):
    s0, part = _full_saves(store_dir)
    with PS.PersistentCheckpoint(store_dir, part, s0) as store:
        assert store.steps() == [2, 4]  # keep=2: the last two full saves
    reason = _damage(store_dir / "4", how)
    with pytest.warns(PS.CheckpointWarning, match=rf"step 4 in .* is damaged and was skipped: "
                                                   rf"{re.escape(reason)}.*; using the running checkpoint of step 2"):
        store = PS.PersistentCheckpoint(store_dir, part, s0)
    with store:
        assert store.latest_step() == 2
        assert list(store.damaged_steps()) == [4] and store.damaged_steps()[4].startswith(reason)
        _assert_state_equal(store.load(s0), _state(2))  # the newest intact save, whole
        assert store.restored_from == 2 and store.verify() == 2
        # Training goes on from step 2's running checkpoint; once a newer save commits, the
        # damaged step is garbage.
        store.save(6, _state(6), _all(part))
        store.wait()
        assert store.steps() == [2, 6] and store.latest_step() == 6
        _assert_state_equal(store.load(s0), _state(6))


def test_damage_found_at_recovery_with_partial_saves(store_dir):
    """Priority-style saves (a block's latest copy lives in an older step): the newest step
    is damaged after it was written; a partial recovery reads the lost blocks from the
    previous manifest, and later saves build on that manifest."""
    s0 = _state(0)
    part = P.by_row(s0, num_servers=3, key=0)  # blocks: b -> 0..2, w row i -> 3 + i
    B = part.num_blocks
    store = PS.PersistentCheckpoint(store_dir, part, s0, async_write=False)
    store.initialize(s0)
    for step, blocks in ((2, [0, 5]), (4, [5, 13]), (6, [0, 13])):
        mask = np.zeros(B, bool)
        mask[blocks] = True
        store.save(step, _state(step), mask)
    # Manifests: 4 -> {0: 2, 5: 4, 13: 4, rest: 0}; 6 -> {0: 6, 5: 4, 13: 6, rest: 0}.
    assert store.steps() == [0, 2, 4, 6]
    reason = _damage(store_dir / "6", "truncated")
    lost = np.zeros(B, bool)
    lost[[0, 5, 13, 14]] = True
    with pytest.warns(PS.CheckpointWarning, match=rf"step 6 .*{re.escape(reason)}; using the running checkpoint of step 4"):
        rec = store.restore(_state(99), lost)
    assert store.restored_from == 4
    np.testing.assert_array_equal(rec.params["b"], [2, 99, 99])
    np.testing.assert_array_equal(np.asarray(rec.params["w"])[:, 0], [99, 99, 4, 99, 99, 99, 99, 99, 99, 99, 4, 0])
    # The next save builds on manifest 4 (never referencing the damaged step 6) ...
    mask = np.zeros(B, bool)
    mask[3] = True
    store.save(8, _state(8), mask)
    _, loc, at = store.manifest()
    assert 6 not in loc and loc[3] == 8 and loc[0] == 2 and loc[13] == 4
    # ... and the damaged step is collected once that save commits.
    assert store.steps() == [0, 2, 4, 8]
    store.close()
    again = PS.PersistentCheckpoint(store_dir, part, s0)  # no warning: everything kept is intact
    assert again.latest_step() == 8 and again.damaged_steps() == {}
    again.close()


def test_no_intact_step_left_raises_naming_the_path(store_dir):
    s0, part = _full_saves(store_dir)
    _damage(store_dir / "4", "flipped")
    _damage(store_dir / "2", "deleted")
    with pytest.warns(PS.CheckpointWarning, match="no intact running checkpoint is left"):
        with pytest.raises(PS.CheckpointError, match=rf"no intact running checkpoint in {re.escape(str(store_dir))} "
                                                     r"\(damaged: step 2: missing file .*; step 4: checksum mismatch"):
            PS.PersistentCheckpoint(store_dir, part, s0)
    # A step the only manifest references is gone (partial saves): nothing intact either.
    other = store_dir.parent / "other"
    with PS.PersistentCheckpoint(other, part, s0) as store:
        store.initialize(s0)
        mask = np.zeros(part.num_blocks, bool)
        mask[:5] = True
        store.save(4, _state(4), mask)
    shutil.rmtree(other / "0")
    with pytest.warns(PS.CheckpointWarning, match=r"step 0 .*the step is missing \(the manifest of step 4 references it\)"):
        with pytest.raises(PS.CheckpointError, match=re.escape(str(other))):
            PS.PersistentCheckpoint(other, part, s0)


def test_half_written_steps_are_never_restored(store_dir, tmp_path):
    s0, part = _full_saves(tmp_path / "source", steps=(2, 4))
    _full_saves(store_dir, steps=(2,))
    # A complete copy of a newer save under orbax's uncommitted name (a crash before the
    # commit's atomic rename) ...
    shutil.copytree(tmp_path / "source" / "4", store_dir / "4.orbax-checkpoint-tmp")
    # ... and a final-named step missing files (storage without atomic rename, died mid-write).
    shutil.copytree(tmp_path / "source" / "4", store_dir / "6")
    (store_dir / "6" / "blocks" / "manifest.ocdbt").unlink()
    with pytest.warns(PS.CheckpointWarning, match=r"step 6 .*missing file blocks/manifest.ocdbt"):
        store = PS.PersistentCheckpoint(store_dir, part, s0)
    with store:
        assert store.latest_step() == 2
        assert not (store_dir / "4.orbax-checkpoint-tmp").exists()  # cleaned up, never read
        _assert_state_equal(store.load(s0), _state(2))
        assert store.restored_from == 2


def test_keep_retains_the_last_k_full_saves(store_dir):
    s0, part = _full_saves(store_dir, steps=(2, 4, 6, 8), keep=3)
    with PS.PersistentCheckpoint(store_dir, part, s0, keep=3) as store:
        assert store.steps() == [4, 6, 8]
    with PS.PersistentCheckpoint(store_dir, part, s0, keep=1) as store:
        store.save(10, _state(10), _all(part))
        store.wait()
        assert store.steps() == [10]
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="keep must be an int >= 1"):
            PS.PersistentCheckpoint(store_dir, part, s0, keep=bad)


def test_bad_directory_raises_naming_it(tmp_path, monkeypatch):
    s0 = _state(0)
    part = P.by_row(s0, num_servers=3, key=0)
    a_file = tmp_path / "a_file"
    a_file.write_text("not a directory")
    with pytest.raises(ValueError, match=rf"directory '{re.escape(str(a_file))}' exists and is not a directory"):
        PS.PersistentCheckpoint(a_file, part, s0)
    with pytest.raises(ValueError, match=rf"directory .* cannot be created: '{re.escape(str(a_file))}' is not a directory"):
        PS.PersistentCheckpoint(a_file / "sub", part, s0)
    with pytest.raises(TypeError, match="directory must be a str or os.PathLike"):
        PS.PersistentCheckpoint(None, part, s0)
    # A missing parent is created.
    deep = tmp_path / "new" / "deeper" / "ckpt"
    with PS.PersistentCheckpoint(deep, part, s0) as store:
        store.initialize(s0)
        assert store.steps() == [0]
    # Read-only: a real chmod where permissions bind (not root); as root, the access check
    # is simulated (root bypasses file modes).
    ro = tmp_path / "read_only"
    ro.mkdir()
    if os.geteuid() != 0:
        ro.chmod(0o555)
    else:
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, *a, **k: False if Path(p) == ro and mode & os.W_OK
                            else real_access(p, mode, *a, **k))
    try:
        with pytest.raises(ValueError, match=rf"directory '{re.escape(str(ro))}' is not writable \(permission denied\)"):
            PS.PersistentCheckpoint(ro, part, s0)
        with pytest.raises(ValueError, match=rf"directory .* cannot be created: '{re.escape(str(ro))}' is not writable"):
            PS.PersistentCheckpoint(ro / "sub", part, s0)
    finally:
        ro.chmod(0o755)
    # Any OS error while creating it is reported the same way, never raw.
    def refuse(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(ValueError, match=r"directory .*'.*elsewhere' cannot be created: Permission denied"):
        PS.PersistentCheckpoint(tmp_path / "elsewhere", part, s0)


# A child process: damaged stores opened and read (falling back), one with nothing intact,
# and a store left open with a write in flight at exit. Before the fix, the first part
# printed a dozen "RuntimeError: Event loop is closed" tracebacks (orbax closed its event
# loop while reads of the other arrays were still in flight after the damaged one failed)
# and the last "cannot schedule new futures after interpreter shutdown" (the save lost).
_EXIT_CHILD = textwrap.dedent(
    """
    import shutil, sys, warnings
    from pathlib import Path
    import numpy as np, jax, optax
    sys.path.insert(0, sys.argv[2])
    from scarjax import State
    from scarjax.scar import partition as P, persistent as PS
    import test_persistent as T

    root = Path(sys.argv[1])
    params = {f"w{i}": jax.random.normal(jax.random.key(i), (64, 100)) for i in range(8)}
    s0 = State(params, optax.adam(1e-3).init(params))
    part = P.by_row(s0, num_servers=3, key=0)
    warnings.simplefilter("ignore", PS.CheckpointWarning)
    for how in ("flipped", "truncated", "deleted"):
        d = root / how
        with PS.PersistentCheckpoint(d, part, s0, async_write=False) as st:
            st.initialize(s0)
            st.save(4, s0, np.ones(part.num_blocks, bool))
        T._damage(d / "4", how)
        with PS.PersistentCheckpoint(d, part, s0) as st:
            st.load(s0)
            print(how, "restored_from", st.restored_from, flush=True)
        T._damage(d / "0", "deleted")
        try:
            PS.PersistentCheckpoint(d, part, s0)
        except PS.CheckpointError:
            print(how, "nothing intact", flush=True)
    left_open = PS.PersistentCheckpoint(root / "open", part, s0)
    left_open.initialize(s0)
    left_open.save(4, s0, np.ones(part.num_blocks, bool))  # in flight; never closed
    print("exiting", flush=True)
    """
)


def test_no_event_loop_tracebacks_after_failed_reads_or_at_exit(tmp_path):
    script = tmp_path / "child.py"
    script.write_text(_EXIT_CHILD)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    proc = subprocess.run([sys.executable, str(script), str(tmp_path), str(Path(__file__).parent)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for how in ("flipped", "truncated", "deleted"):
        assert f"{how} restored_from 0" in proc.stdout, proc.stdout
        assert f"{how} nothing intact" in proc.stdout
    for bad in ("Event loop is closed", "Traceback", "Exception ignored", "cannot schedule new futures"):
        assert bad not in proc.stderr, proc.stderr[-3000:]
    # The store left open was closed before shutdown: its last save committed, intact.
    assert (tmp_path / "open" / "4" / "files.json").is_file()
    assert not [p for p in (tmp_path / "open").iterdir() if "tmp" in p.name]


# --------------------------------------------------------------------------------------
# Crash consistency: SIGKILL while an asynchronous write is in flight.

_CHILD = textwrap.dedent(
    """
    import asyncio, os, sys
    import numpy as np, jax
    from orbax.checkpoint._src.path import atomicity
    from scarjax.scar import checkpoint as ck, faults as F, partition as P, persistent as PS
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
                          failure=F.Failure(servers=1, when=11), recovery=rec)
    p, f = res["partial"], res["full"]
    assert p.loss.shape == (17,) and np.all(np.isfinite(p.loss))
    np.testing.assert_array_equal(p.loss[:12], f.loss[:12])  # identical until the failure
    assert 0 < p.delta[11] <= f.delta[11]  # Thm 5.4.1, recovered from disk
    assert np.count_nonzero(f.delta) == 1
    kinds = [e["kind"] for e in p.events]
    assert kinds == ["checkpoint", "failure", "checkpoint"]
    # Saves at every period C = 6 (full strategy: every block), the failure at T = 11.
    assert [e["step"] for e in p.events] == [6, 11, 12]
    assert all(e["blocks"] == part.num_blocks for e in p.events if e["kind"] == "checkpoint")
    with pytest.raises(ValueError, match="already holds"):
        PS.run(alg, part, ck.Checkpoint("full", 1.0, 6), 16, 0, tmp_path / "partial")


def test_driver_repeated_failures_and_scheduled_saves(tmp_path):
    """Failure(when=every(4, start=4)) recovers from disk at every firing, with the lost
    blocks the scar hook would draw (the first from k_lost, failure n from
    fold_in(k_lost, n)); Checkpoint(when=at(2, 6, 10)) saves exactly there."""
    from scarjax.models import quadratic

    qp = quadratic.fig53_problem()
    s0 = qp.init(jax.random.key(0), qp.data)
    part = P.by_element(s0, num_servers=2, key=0)
    fail = F.Failure(fraction=0.5, when=S.every(4, start=4))
    spec = ck.Checkpoint("full", 1.0, when=S.at(2, 6, 10))  # segments of 2 steps: one compilation
    res = PS.run(qp, part, spec, 12, 0, tmp_path / "r", failure=fail, recovery="partial", async_write=False)
    assert [(e["kind"], e["step"]) for e in res.events] == [
        ("checkpoint", 2), ("failure", 4), ("checkpoint", 6), ("failure", 8), ("checkpoint", 10)]
    assert res.fail_at == 4
    k_lost = jax.random.split(jax.random.key(0), 4)[2]
    lost = [F.lost_blocks(fail, part, k_lost), F.lost_blocks(fail, part, jax.random.fold_in(k_lost, 1))]
    assert [e["blocks"] for e in res.events if e["kind"] == "failure"] == [int(m.sum()) for m in lost]
    assert np.flatnonzero(res.delta).tolist() == [4, 8]
    np.testing.assert_array_equal(res.checkpoint.saved_at, 10)
    with pytest.raises(ValueError, match="at most one of period"):
        ck.Checkpoint("full", 1.0, 4, when=S.at(4))


# --------------------------------------------------------------------------------------
# The driver when the newest save is damaged by the time a failure needs it.


@pytest.fixture(scope="module")
def mlr_problem():
    from scarjax.models import mlr

    rng = np.random.default_rng(1)
    x = rng.normal(size=(96, 5)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(5, 3)), axis=1)
    alg = mlr.mlr(x, y, num_classes=3, lr=2.0)
    s0 = jax.eval_shape(lambda: alg.init(jax.random.key(0), alg.data))
    part = P.by_row(s0, num_servers=3, key=0)  # 6 blocks (rows of W), 2 per server
    specs = {"full": ck.Checkpoint("full", 1.0, 4), "priority": ck.Checkpoint("priority", 0.5, 8)}  # every 4
    return alg, part, specs, F.Failure(servers=1, when=12)


@pytest.fixture(scope="module")
def clean_runs(mlr_problem, tmp_path_factory):
    alg, part, specs, failure = mlr_problem
    d = tmp_path_factory.mktemp("clean")
    no_failure = PS.run(alg, part, specs["full"], 40, 0, d / "none", segment=4)
    failed = PS.run(alg, part, specs["full"], 40, 0, d / "failed", failure=failure, segment=4)
    return no_failure, failed


@pytest.mark.parametrize("strategy, how", [("full", "flipped"), ("full", "truncated"), ("full", "deleted"),
                                           ("priority", "deleted")])
def test_driver_recovers_from_previous_save_when_newest_is_damaged(mlr_problem, clean_runs, tmp_path,
                                                                   monkeypatch, strategy, how):
    from scarjax.rework import iterations_to

    alg, part, specs, failure = mlr_problem
    no_failure, clean = clean_runs
    damaged = {}
    restore = PS.PersistentCheckpoint.restore

    def damage_then_restore(self, state, block_mask=None, **kw):
        if not damaged:  # the storage fails between the last save and the recovery
            self.wait()
            newest = self.steps()[-1]
            damaged[newest] = _damage(self.directory / str(newest), how)
        return restore(self, state, block_mask, **kw)

    monkeypatch.setattr(PS.PersistentCheckpoint, "restore", damage_then_restore)
    cache_after_recovery = {}
    res = None
    with pytest.warns(PS.CheckpointWarning, match=r"step 8 .* is damaged and was skipped: .*; using the running checkpoint of step 4"):
        res = PS.run(alg, part, specs[strategy], 40, 0, tmp_path / "ckpt", failure=failure, segment=4,
                     on_save=lambda k, cache, mask: cache_after_recovery.setdefault(k, np.asarray(cache.saved_at)))
    assert list(damaged) == [8] and res.fail_at == 12
    [ev_clean] = [e for e in clean.events if e["kind"] == "failure"]
    [ev] = [e for e in res.events if e["kind"] == "failure"]
    assert (ev_clean["restored_from"], ev["restored_from"]) == (8, 4)
    # The in-memory cache was reset to the running checkpoint on disk (step 4's): the save
    # right after the recovery sees no block as saved at the damaged step.
    assert 8 not in cache_after_recovery[12]
    np.testing.assert_array_equal(res.loss[:13], no_failure.loss[:13])  # identical until the failure
    if strategy == "full":
        assert res.delta[12] > ev_clean["delta"] > 0  # an older checkpoint: a larger perturbation
    # The run still converges: it reaches the clean runs' epsilon (no-failure loss at 30)
    # and ends at the same loss.
    eps = float(no_failure.loss[30])
    assert iterations_to(res.loss, eps) <= 40 and iterations_to(clean.loss, eps) <= iterations_to(res.loss, eps)
    np.testing.assert_allclose(res.loss[-1], no_failure.loss[-1], rtol=5e-3)
    np.testing.assert_allclose(res.loss[-1], clean.loss[-1], rtol=5e-3)
    # What the run left on disk is its final in-memory running checkpoint.
    template = alg.init(jax.random.key(0), alg.data)
    with PS.PersistentCheckpoint(tmp_path / "ckpt", part, template) as store:
        np.testing.assert_array_equal(store.manifest()[2], np.asarray(res.checkpoint.saved_at))
        _assert_state_equal(store.load(template), res.checkpoint.saved)


def test_driver_refuses_events_after_the_last_step(mlr_problem, tmp_path):
    alg, part, specs, _ = mlr_problem
    d = tmp_path / "never_created"
    with pytest.raises(ValueError, match=r"failure\.when fires first at step 16, which must be < steps \(16\)"):
        PS.run(alg, part, specs["full"], 16, 0, d, failure=F.Failure(servers=1, when=16))
    with pytest.raises(ValueError, match=r"failure\.when fires first at step 40, which must be < steps \(16\)"):
        PS.run(alg, part, specs["full"], 16, 0, d, failure=F.Failure(fraction=0.5, when=40))
    with pytest.raises(ValueError, match=r"checkpoint\.when fires first at step 20, which must be < steps \(16\)"):
        PS.run(alg, part, ck.Checkpoint("priority", 0.5, when=S.every(4, start=20)), 16, 0, d)
    with pytest.raises(ValueError, match=r"checkpoint saves every round\(fraction \* period\) = 20 iterations, "
                                         r"which must be < steps \(16\)"):
        PS.run(alg, part, ck.Checkpoint("priority", 0.5, 40), 16, 0, d)
    with pytest.raises(ValueError, match="keep must be an int >= 1"):
        PS.run(alg, part, specs["full"], 16, 0, d, keep=0)
    assert not d.exists()  # refused before anything was written
    with pytest.raises(ValueError, match=r"directory '.*' exists and is not a directory"):
        (tmp_path / "file").write_text("x")
        PS.run(alg, part, specs["full"], 16, 0, tmp_path / "file")


def test_run_refuses_step_scheduled_hooks(tmp_path):
    """A hook scheduled for step k would fire once per segment (hooks restart there), so the
    driver refuses it, naming ``hooks``; nothing is written."""
    from scarjax import hooks as H
    from scarjax.models import quadratic

    qp = quadratic.fig53_problem()
    s0 = jax.eval_shape(lambda: qp.init(jax.random.key(0), qp.data))
    part = P.by_element(s0, num_servers=2, key=0)
    with pytest.raises(ValueError, match="hooks: hook .* scheduled"):
        PS.run(qp, part, ck.Checkpoint("full", 1.0, 4), 12, 0, tmp_path / "s",
               hooks=H.Hook("write", lambda s, k: (), lambda s, hs, ctx: (s, hs), name="at9", events=(("when", 9),)))
    assert not (tmp_path / "s").exists()
