"""Performance models of *this machine* for scarjax jobs: CM-DARE's step-time and
checkpoint-time regressions (Li et al., ICDCS'20, Sec III-B Table II and Sec IV-C Table IV)
fitted to scarjax's own models, so that any scarjax job gets a predicted step time
(:class:`scarjax.cluster.steptime.StepTime`) and checkpoint time for the planner.

CM-DARE measured twenty CNN models on three cloud GPUs and regressed the step time on the
model complexity ``C_m`` (FLOPs of one step), the GPU capacity ``C_gpu`` (TFLOPS) and their
ratio ``C_norm = C_m / C_gpu`` (Table II), and the checkpoint time on the checkpoint's file
sizes: total ``S_c``, data ``S_d``, meta ``S_m`` and index ``S_i`` (Table IV). Here:

* :func:`features` computes the supertable's columns for a scarjax
  :class:`~scarjax.Algorithm`: ``model_flops`` (``C_m``, XLA's cost analysis of the compiled
  iteration: update, apply and the recorded loss), ``bytes_accessed`` (the same analysis'
  memory traffic, an extra feature the paper does not have), ``num_params``, the average and
  largest parameter tensor in MB (10⁶ bytes), and ``gpu_tflops`` (``C_gpu``): the host's
  measured float32 matmul throughput (:func:`host_tflops`: the median over ``repeats`` timed
  ``n × n`` matmuls, ``2 n³`` FLOPs each, after one warm-up), so ``c_norm = C_m / C_gpu`` is
  the seconds an ideal step would take on this host.
* :func:`measure_step_time`: median wall seconds per iteration (update, apply, recorded loss,
  as in :func:`scarjax.run` without hooks) after compilation, from the same compiled program
  :func:`features` analyses (or a ``lax.scan`` of it).
* :func:`measure_checkpoint_time`: full writes of states of growing size through scarjax's
  persistent running checkpoint (:class:`scarjax.scar.persistent.PersistentCheckpoint`,
  orbax), with the file sizes of the written step split like TensorFlow's (data / meta /
  index analogues) and the seconds each blocking save took.
* :func:`fit_local_models`: Table II's single-GPU models (univariate, SVR polynomial, SVR RBF
  on ``C_norm``; ours in addition: a multivariate linear model on ``(C_norm, bytes accessed)``
  and a power law, linear in ``log10 C_norm``, see :data:`STEP_MODELS`) and Table IV's
  four models, fitted with :func:`scarjax.cluster.cmdare.fit_regression`, with
  leave-one-model-out MAE and MAPE (every record of the held-out model predicted by a model
  fitted on the others only).
* :func:`step_time_model` and :func:`checkpoint_time` turn a fit into predictions for any job.

All timings are wall-clock on whatever machine runs them (2 shared CPU cores in this
project's CI: noisy; medians throughout). The numbers are therefore machine-dependent and
every result should record the platform (experiments do, in their ``meta`` block).
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import statistics
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from scarjax import validate as va
from scarjax import tree as tu
from scarjax.cluster.steptime import StepTime, step_time_linear
from scarjax.cluster import cmdare
from scarjax.core import Algorithm, State
from scarjax.scar import partition as pt
from scarjax.scar import persistent as ps

__all__ = [
    "MB",
    "STEP_MODELS",
    "CHECKPOINT_MODELS",
    "host_tflops",
    "cost_analysis",
    "step_program",
    "features",
    "measure_step_time",
    "measure_checkpoint_time",
    "fit_local_models",
    "step_time_model",
    "checkpoint_time",
]

MB = 1e6  # bytes per MB (CM-DARE reports file sizes in MB)

# name -> (fit_regression kind, feature columns, target unit). Table II's single-GPU
# models with the host as the GPU (C_gpu is one constant, so C_norm is C_m up to a
# factor), plus two models the paper does not have: a multivariate linear model on C_norm
# and XLA's memory traffic, and a power law (linear in log10 C_norm -> log10 step time),
# since scarjax's step times span three decades where the paper's CNNs span one. A
# feature ``"log10:col"`` is ``log10(col)``. Target units: the step time is regressed in
# milliseconds (SVR's epsilon grid 0.01-0.1, Sec III-B, is in target units: in seconds it
# would exceed every sub-millisecond step), ``"log10_ns"`` in log10 nanoseconds, and the
# checkpoint time in seconds as in the paper.
STEP_MODELS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "univariate": ("linear", ("c_norm",), "ms"),
    "svr_poly": ("svr_poly", ("c_norm",), "ms"),
    "svr_rbf": ("svr_rbf", ("c_norm",), "ms"),
    "multivariate": ("linear", ("c_norm", "bytes_accessed"), "ms"),
    "power_law": ("linear", ("log10:c_norm",), "log10_ns"),
}
# Table IV's four models: (i) S_c, (ii) S_d, S_m, (iii) PCA(S_d, S_m, S_i), (iv) SVR RBF on S_c.
CHECKPOINT_MODELS: dict[str, tuple[str, tuple[str, ...], str]] = {
    "univariate": ("linear", ("total_mb",), "s"),
    "multivariate": ("linear", ("data_mb", "meta_mb"), "s"),
    "pca2": ("pca2_linear", ("data_mb", "meta_mb", "index_mb"), "s"),
    "svr_rbf": ("svr_rbf", ("total_mb",), "s"),
}
_UNITS = ("s", "ms", "log10_ns")
_FLOOR_S = 1e-6  # predictions are clipped here: a step or a checkpoint never takes <= 0 s


# --------------------------------------------------------------------------------------
# Features


@functools.lru_cache(maxsize=8)
def _host_tflops_cached(n: int, repeats: int) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32)
    mm = jax.jit(jnp.matmul)
    mm(a, b).block_until_ready()  # compile and warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        mm(a, b).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 2.0 * n**3 / statistics.median(times) / 1e12


def host_tflops(*, n: int = 1024, repeats: int = 5, refresh: bool = False) -> float:
    """The host's measured float32 matmul throughput in TFLOPS (CM-DARE's ``C_gpu``, which
    the paper takes from the GPU's datasheet): ``2 n³`` FLOPs over the median of ``repeats``
    timed jitted ``n × n`` matmuls on the default JAX device, after one warm-up call.
    Cached per ``(n, repeats)`` for the process (``refresh=True`` measures again)."""
    n = va.check_int("n", n, lo=8)
    repeats = va.check_int("repeats", repeats, lo=1)
    va.check_bool("refresh", refresh)
    if refresh:
        _host_tflops_cached.cache_clear()
    return _host_tflops_cached(n, repeats)


def cost_analysis(compiled: Any) -> dict:
    """XLA's cost analysis of a compiled JAX program as one dict (``{'flops': ...,
    'bytes accessed': ...}``): JAX returns a dict in recent versions and a list of one dict
    per program in older ones (summed here); ``None`` or an empty result gives ``{}``.
    ``compiled`` is a ``jax.stages.Compiled`` or already the analysis."""
    ca = compiled.cost_analysis() if hasattr(compiled, "cost_analysis") else compiled
    if ca is None:
        return {}
    if isinstance(ca, dict):
        return {str(k): float(v) for k, v in ca.items() if isinstance(v, (int, float, np.number))}
    if isinstance(ca, (list, tuple)):
        out: dict[str, float] = {}
        for part in ca:
            for k, v in cost_analysis(part).items():
                out[k] = out.get(k, 0.0) + v
        return out
    raise TypeError(f"compiled.cost_analysis() returned {type(ca).__name__}, expected a dict or a list of dicts")


def _one_step(algorithm: Algorithm, state: State, key: jax.Array) -> tuple[State, jax.Array]:
    """One plain iteration of :func:`scarjax.run` without hooks: update at the stored
    parameters, apply, and the recorded loss."""
    delta, new = algorithm.update(state.params, state, algorithm.data, key)
    new_state = State(tu.tree_add(state.params, delta), State(*new).aux)
    return new_state, algorithm.loss(new_state, algorithm.data)


def _resolve(algorithm: Any, batch_size: Any) -> tuple[Algorithm, int | None]:
    """An :class:`Algorithm` from ``algorithm`` (an Algorithm, or a factory
    ``batch_size -> Algorithm`` when ``batch_size`` is given)."""
    if batch_size is not None:
        batch_size = va.check_int("batch_size", batch_size, lo=1)
    if isinstance(algorithm, Algorithm):
        return algorithm, batch_size
    if callable(algorithm):
        if batch_size is None:
            raise TypeError(
                "algorithm is a function (a factory batch_size -> Algorithm) but batch_size is None: "
                "pass batch_size=... or a scarjax.Algorithm"
            )
        alg = algorithm(batch_size)
        if not isinstance(alg, Algorithm):
            raise TypeError(f"algorithm(batch_size={batch_size}) must return a scarjax.Algorithm, got {type(alg).__name__}")
        return alg, batch_size
    raise TypeError(f"algorithm must be a scarjax.Algorithm or a factory batch_size -> Algorithm, got {type(algorithm).__name__}")


def step_program(algorithm: Algorithm, key: Any = 0) -> tuple[Callable, tuple]:
    """``(jitted_step, args)``: one iteration of ``algorithm`` (update, apply, loss) as a
    jitted function of ``(algorithm, state, key)`` with its arguments (the state from
    ``algorithm.init``); the data travels as an argument, as in :func:`scarjax.run`."""
    if not isinstance(algorithm, Algorithm):
        raise TypeError(f"algorithm must be a scarjax.Algorithm, got {type(algorithm).__name__}")
    k = va.check_key("key", key)
    k_init, k_step = jax.random.split(k)
    # one compiled program for the initial state (eager, every op of init compiles its own)
    state = _init(k_init, algorithm)
    return jax.jit(_one_step), (algorithm, state, k_step)


@jax.jit
def _init(key: jax.Array, algorithm: Algorithm) -> State:
    return State(*algorithm.init(key, algorithm.data))


# One compilation per (algorithm object, key): features() reads its cost analysis and
# measure_step_time(loop="step") runs it, so profiling a job compiles it once.
_COMPILED: "weakref.WeakKeyDictionary[Algorithm, dict]" = weakref.WeakKeyDictionary()


def _compiled_step(algorithm: Algorithm, key: Any) -> tuple[Any, tuple]:
    k = va.check_key("key", key)
    tag = tuple(np.asarray(jax.random.key_data(k)).ravel().tolist())
    per = _COMPILED.setdefault(algorithm, {})
    if tag not in per:
        fn, args = step_program(algorithm, k)
        per[tag] = (fn.lower(*args).compile(), args)
    return per[tag]


def features(
    algorithm: Any,
    *,
    batch_size: int | None = None,
    key: Any = 0,
    tflops: float | None = None,
) -> dict:
    """CM-DARE's supertable columns (Sec III-B) for a scarjax job on this host.

    Args:
      algorithm: a :class:`scarjax.Algorithm`, or a factory ``batch_size -> Algorithm``
        (then ``batch_size`` is required and builds the job).
      batch_size: the job's batch size (recorded; builds the job from a factory).
      key: the key (or int seed) of ``algorithm.init`` and of the step.
      tflops: the host's throughput ``C_gpu`` in TFLOPS (default: :func:`host_tflops`,
        measured once per process).

    Returns a dict: ``name``, ``batch_size``, ``model_flops`` (``C_m``: FLOPs of one
    iteration, update + apply + recorded loss, from XLA's cost analysis of the compiled
    step), ``bytes_accessed`` (the same analysis' memory traffic), ``gpu_tflops``,
    ``c_norm = model_flops / (gpu_tflops · 10¹²)`` (seconds of ideal compute),
    ``num_params`` (entries of ``state.params``, exact), ``num_tensors`` (parameter leaves),
    ``avg_tensor_mb`` / ``max_tensor_mb`` (parameter leaves, 10⁶ bytes) and ``state_mb``
    (parameters plus auxiliary state: what a full checkpoint holds).

    Raises ``TypeError``/``ValueError`` naming the argument.
    """
    alg, batch_size = _resolve(algorithm, batch_size)
    if tflops is None:
        tflops = host_tflops()
    else:
        va.check_real("tflops", tflops, lo=0.0, lo_open=True, scalar=True)
    compiled, args = _compiled_step(alg, key)
    ca = cost_analysis(compiled)
    if "flops" not in ca:
        raise ValueError(f"XLA's cost analysis of {alg.name!r} gave no 'flops' (got keys {sorted(ca)})")
    flops = max(float(ca["flops"]), 0.0)
    state = args[1]
    p_leaves = jax.tree.leaves(state.params)
    sizes = [int(np.size(x)) * np.dtype(x.dtype).itemsize / MB for x in p_leaves]
    all_bytes = sum(int(np.size(x)) * np.dtype(x.dtype).itemsize for x in jax.tree.leaves(state))
    return {
        "name": alg.name,
        "batch_size": batch_size,
        "model_flops": flops,
        "bytes_accessed": max(float(ca.get("bytes accessed", 0.0)), 0.0),
        "gpu_tflops": float(tflops),
        "c_norm": flops / (float(tflops) * 1e12),
        "num_params": int(sum(int(np.size(x)) for x in p_leaves)),
        "num_tensors": len(p_leaves),
        "avg_tensor_mb": float(np.mean(sizes)) if sizes else 0.0,
        "max_tensor_mb": float(np.max(sizes)) if sizes else 0.0,
        "state_mb": all_bytes / MB,
    }


# --------------------------------------------------------------------------------------
# Measurements


def _block(x: Any) -> None:
    jax.tree.map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready") else a, x)


@functools.partial(jax.jit, static_argnums=3)
def _loop(algorithm: Algorithm, state: State, key: jax.Array, steps: int) -> tuple[State, jax.Array]:
    """``steps`` plain iterations under ``lax.scan`` (step ``k`` keyed by ``fold_in(key,
    k)``), as in :func:`scarjax.run` without hooks."""

    def body(st, k):
        return _one_step(algorithm, st, jax.random.fold_in(key, k))

    return jax.lax.scan(body, state, jnp.arange(steps))


_LOOPS = ("step", "scan")


def measure_step_time(algorithm: Any, *, steps: int = 20, repeats: int = 5, key: Any = 0,
                      batch_size: int | None = None, loop: str = "step") -> float:
    """Median wall seconds per iteration of ``algorithm`` on this host: ``steps`` plain
    iterations (update, apply, recorded loss: the iteration of :func:`scarjax.run` without
    hooks), run once untimed after compilation, then timed ``repeats`` times; each timed
    run's seconds divided by ``steps``, the median returned.

    ``loop='step'`` (default): the jitted one-iteration program that :func:`features`
    analyses (compiled once for both), called ``steps`` times from the host with the state
    fed back (calls are dispatched asynchronously; one wait at the end), so its time
    includes a per-call dispatch cost of some microseconds. ``loop='scan'``: the
    ``steps`` iterations in one jitted ``lax.scan`` as :func:`scarjax.run` runs them (no
    dispatch per step; one more compilation). ``algorithm`` as in :func:`features`. The
    result is finite and positive (``ValueError`` otherwise)."""
    alg, _ = _resolve(algorithm, batch_size)
    steps = va.check_int("steps", steps, lo=1)
    repeats = va.check_int("repeats", repeats, lo=1)
    va.check_choice("loop", loop, _LOOPS)
    if loop == "scan":
        _, (alg, state, k) = step_program(alg, key)
        go = lambda: _loop(alg, state, k, steps)  # noqa: E731
    else:
        compiled, (a, state0, k) = _compiled_step(alg, key)
        keys = [jax.random.fold_in(k, i) for i in range(steps)]

        def go():
            st, out = state0, None
            for kk in keys:
                st, out = compiled(a, st, kk)
            return st, out

    _block(go())
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _block(go())
        per.append((time.perf_counter() - t0) / steps)
    s = float(statistics.median(per))
    if not (math.isfinite(s) and s > 0):
        raise ValueError(f"measured step time of {alg.name!r} is {s!r} s (not positive and finite)")
    return s


def _file_groups(step_dir: Path) -> dict:
    """File sizes of one committed checkpoint step, split like TensorFlow's three files
    (CM-DARE Sec IV-A): *data* = the array chunks (files under a ``d/`` folder of the
    ``blocks`` item), *index* = the rest of ``blocks`` (orbax/OCDBT manifests and the array
    metadata: they grow with the number of tensors), *meta* = everything else (the
    ``meta`` item with layout and checksums, ``files.json``, orbax's step metadata and
    commit markers)."""
    data = index = meta = 0
    largest = 0
    count = 0
    for path in step_dir.rglob("*"):
        if not path.is_file():
            continue
        size = path.stat().st_size
        rel = path.relative_to(step_dir).parts
        count += 1
        largest = max(largest, size)
        if rel[0] == "blocks" and "d" in rel[1:-1]:
            data += size
        elif rel[0] == "blocks":
            index += size
        else:
            meta += size
    return {"data_mb": data / MB, "index_mb": index / MB, "meta_mb": meta / MB,
            "total_mb": (data + index + meta) / MB, "largest_file_mb": largest / MB, "num_files": count}


def _split_sizes(total: int, parts: int) -> list[int]:
    """``parts`` positive element counts summing to ``total``: geometric (each leaf half the
    previous), so the largest tensor differs from the average as in real models."""
    w = 0.5 ** np.arange(parts)
    n = np.maximum(1, np.floor(total * w / w.sum()).astype(np.int64))
    n[0] += total - int(n.sum())
    return [int(v) for v in n]


def measure_checkpoint_time(
    sizes_mb: Sequence[float],
    directory: str | os.PathLike,
    *,
    tensors: int | Sequence[int] = (4,),
    repeats: int = 3,
    seed: int = 0,
    keep_files: bool = False,
) -> list[dict]:
    """Checkpoint time against checkpoint size on this host (CM-DARE Sec IV, Fig 5), through
    scarjax's persistent running checkpoint (:class:`~scarjax.scar.persistent.PersistentCheckpoint`,
    orbax, blocking writes: ``async_write=False``).

    For every size ``s`` in ``sizes_mb`` and tensor count ``t`` in ``tensors``: a state of
    ``t`` float32 leaves (geometric sizes, normal random values, so compression cannot
    shrink them) totalling ``s`` MB (10⁶ bytes), one block per leaf; one untimed full save,
    then ``repeats`` timed full saves (each ``save`` call, which returns once the step is
    committed: host copy, checksums, orbax write and commit, garbage collection of the
    previous step).

    Returns one dict per ``(size, tensors)``: ``size_mb`` (requested), ``tensors``,
    ``seconds`` (median of the repeats), ``seconds_all``, and the file sizes of the last
    step (:func:`_file_groups`): ``total_mb`` (``S_c``), ``data_mb`` (``S_d``),
    ``meta_mb`` (``S_m``), ``index_mb`` (``S_i``), ``largest_file_mb``, ``num_files``.
    The stores are written under ``directory`` (created) and deleted afterwards unless
    ``keep_files``.
    """
    if isinstance(sizes_mb, (str, bytes)) or not hasattr(sizes_mb, "__len__") or len(sizes_mb) == 0:
        raise ValueError(f"sizes_mb must be a non-empty sequence of sizes in MB, got {sizes_mb!r}")
    sizes = [float(va.check_real("sizes_mb", s, lo=0.0, lo_open=True, scalar=True)) for s in sizes_mb]
    tens = [tensors] if isinstance(tensors, (int, np.integer)) else list(tensors)
    if not tens:
        raise ValueError("tensors must be an int or a non-empty sequence of ints")
    tens = [va.check_int("tensors", t, lo=1) for t in tens]
    repeats = va.check_int("repeats", repeats, lo=1)
    seed = va.check_int("seed", seed, lo=0)
    va.check_bool("keep_files", keep_files)
    root = Path(directory)
    if root.exists() and not root.is_dir():
        raise ValueError(f"directory {str(root)!r} is a file, not a directory")
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for s in sizes:
        for t in tens:
            total = max(int(round(s * MB / 4)), t)
            leaves = {f"t{i:03d}": jnp.asarray(rng.standard_normal(n, dtype=np.float32))
                      for i, n in enumerate(_split_sizes(total, t))}
            state = State(leaves, ())
            part = pt.by_layer(state)
            mask = np.ones(part.num_blocks, bool)
            where = root / f"ckpt_{s:g}mb_{t}t"
            if where.exists():
                shutil.rmtree(where)
            secs = []
            with ps.PersistentCheckpoint(where, part, state, async_write=False, keep=1) as store:
                store.save(1, state, mask)  # warm-up (first write of this layout)
                for r in range(repeats):
                    t0 = time.perf_counter()
                    store.save(2 + r, state, mask)
                    secs.append(time.perf_counter() - t0)
                last = store.latest_step()
            files = _file_groups(where / str(last))
            if not keep_files:
                shutil.rmtree(where, ignore_errors=True)
            out.append({"size_mb": s, "tensors": t, "seconds": float(statistics.median(secs)),
                        "seconds_all": [float(x) for x in secs], **files})
    return out


# --------------------------------------------------------------------------------------
# Fits


def _value(r: dict, col: str) -> float:
    if col.startswith("log10:"):
        v = float(r[col[6:]])
        if not v > 0:
            raise ValueError(f"feature {col!r} needs {col[6:]!r} > 0, got {v!r}")
        return math.log10(v)
    return float(r[col])


def _matrix(records: Sequence[dict], cols: Sequence[str], where: str) -> np.ndarray:
    try:
        X = np.asarray([[_value(r, c) for c in cols] for r in records], np.float64)
    except KeyError as e:
        raise ValueError(f"{where}: a record lacks the feature {e.args[0]!r} (needs {tuple(cols)})") from None
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    if not np.all(np.isfinite(X)):
        raise ValueError(f"{where}: non-finite feature values in {tuple(cols)}")
    return X


def _to_unit(y_s: np.ndarray, unit: str) -> np.ndarray:
    return {"s": lambda v: v, "ms": lambda v: v * 1e3, "log10_ns": lambda v: np.log10(v * 1e9)}[unit](y_s)


def _from_unit(v: np.ndarray, unit: str) -> np.ndarray:
    return {"s": lambda u: u, "ms": lambda u: u / 1e3, "log10_ns": lambda u: 10.0 ** u / 1e9}[unit](v)


def _check_specs(specs: Any, name: str) -> dict:
    if not isinstance(specs, dict) or not specs:
        raise TypeError(f"{name} must be a non-empty dict name -> (kind, feature columns, target unit)")
    out = {}
    for key, spec in specs.items():
        if not (isinstance(spec, tuple) and len(spec) == 3 and isinstance(spec[0], str)
                and isinstance(spec[1], tuple) and spec[1] and all(isinstance(c, str) for c in spec[1])):
            raise TypeError(f"{name}[{key!r}] must be (kind, (feature, ...), unit), got {spec!r}")
        va.check_choice(f"{name}[{key!r}] unit", spec[2], _UNITS)
        out[str(key)] = spec
    return out


def _targets(records: Sequence[dict], key: str, where: str) -> np.ndarray:
    try:
        y = np.asarray([float(r[key]) for r in records], np.float64)
    except KeyError:
        raise ValueError(f"{where}: a record lacks {key!r}") from None
    if not np.all(np.isfinite(y)) or np.any(y <= 0):
        raise ValueError(f"{where}: {key!r} must be positive and finite in every record")
    return y


def _fit(X: np.ndarray, y_s: np.ndarray, kind: str, cols: tuple, unit: str, seed: int, k: int, grid: dict | None):
    """A fitted regressor ``X -> seconds`` trained on all of ``(X, y_s)``:
    :func:`scarjax.cluster.cmdare.fit_regression` (on the target in ``unit``) chooses the
    hyperparameters (MinMax scaling, SVR grid search, Sec III-B) on its own 4:1 split,
    then its pipeline is re-fitted with those hyperparameters on every given record.
    Returns ``(predict, result)``; ``predict`` gives seconds clipped at a floor of 10⁻⁶ s."""
    # scikit-learn is slow to import and needed only here
    from sklearn.base import clone


    y = _to_unit(y_s, unit)
    res = cmdare.fit_regression(X, y, kind, features=cols, seed=seed, k=k, grid=grid)
    est = clone(res.estimator).fit(X, y)

    def predict(Z):
        out = _from_unit(np.asarray(est.predict(np.asarray(Z, np.float64)), np.float64), unit)
        return np.maximum(np.nan_to_num(out, nan=_FLOOR_S, posinf=np.finfo(np.float64).max), _FLOOR_S)

    return predict, res


def _groups(records: Sequence[dict], key: str, where: str) -> list[str]:
    try:
        return [str(r[key]) for r in records]
    except KeyError:
        raise ValueError(f"{where}: a record lacks its model label {key!r}") from None


def _folds(n: int, k: int, kind: str, where: str) -> int:
    """Folds for ``fit_regression`` on ``n`` records: ``k`` lowered so that every fold keeps
    at least 2 rows of its 4:1 training part where possible (at least 2 folds). A fit needs
    3 records (2 training rows for 2 folds); ``pca2_linear`` needs 5 (two components need
    two rows in every cross-validation fit)."""
    n_train = n - int(math.ceil(0.2 * n))
    need = 4 if kind == "pca2_linear" else 2
    if n_train < need:
        raise ValueError(
            f"{where}: a {kind!r} fit needs at least {3 if need == 2 else 5} records "
            f"(fit_regression's 4:1 split and 2 folds), got {n}"
        )
    return max(2, min(k, n_train // 2))


def _lomo(records, specs, target, group_key, seed, k, grid, where) -> dict:
    groups = _groups(records, group_key, where)
    names = list(dict.fromkeys(groups))
    if len(names) < 3:
        raise ValueError(f"{where}: leave-one-model-out needs records of at least 3 models ({group_key!r}), got {names}")
    y = _targets(records, target, where)
    g = np.asarray(groups)
    out = {}
    for mname, (kind, cols, unit) in specs.items():
        X = _matrix(records, cols, where)
        per = []
        pred_all = np.empty_like(y)
        for held in names:
            test = g == held
            train = ~test
            kk = _folds(int(train.sum()), k, kind, f"{where} without model {held!r}")
            predict, _ = _fit(X[train], y[train], kind, cols, unit, seed, kk, grid)
            p = predict(X[test])
            pred_all[test] = p
            err = np.abs(p - y[test])
            per.append({"model": held, "n": int(test.sum()), "mae": float(err.mean()),
                        "mape": float(np.mean(err / y[test])), "measured": y[test].tolist(), "predicted": p.tolist()})
        err = np.abs(pred_all - y)
        final_predict, final_res = _fit(X, y, kind, cols, unit, seed, _folds(len(y), k, kind, where), grid)
        out[mname] = {
            "kind": kind, "features": list(cols), "unit": unit, "lomo": per,
            "mae": float(err.mean()), "mape": float(np.mean(err / y)),
            "predicted": pred_all.tolist(), "measured": y.tolist(), "groups": groups,
            "fit": {"kfold_mae": float(final_res.kfold_mae), "kfold_mae_std": float(final_res.kfold_mae_std),
                    "test_mae": float(final_res.test_mae), "test_mape": float(final_res.test_mape),
                    "params": dict(final_res.params or {})},
            "predict": final_predict,
        }
    return out


def fit_local_models(
    step_records: Sequence[dict],
    ckpt_records: Sequence[dict] | None = None,
    *,
    seed: int = 0,
    k: int = 5,
    step_models: dict | None = None,
    checkpoint_models: dict | None = None,
    group: str = "model",
    grid: dict | None = None,
) -> dict:
    """Fit CM-DARE's step-time (Table II) and checkpoint-time (Table IV) models to this
    host's measurements, with leave-one-model-out error.

    Args:
      step_records: dicts with the :func:`features` columns, ``step_s`` (measured seconds
        per step) and the model label ``record[group]`` (e.g. ``'mlr'``: every size and
        batch size of a model shares it).
      ckpt_records: :func:`measure_checkpoint_time` records (their label: ``'size_mb'`` and
        ``'tensors'`` unless they carry ``group``); ``None`` skips the checkpoint models.
      seed, k: :func:`scarjax.cluster.cmdare.fit_regression`'s seed and folds (``k`` is
        lowered to fit small training sets).
      step_models, checkpoint_models: ``name -> (kind, feature columns, target unit)``
        (defaults :data:`STEP_MODELS`, :data:`CHECKPOINT_MODELS`; a column ``"log10:c"``
        is ``log10`` of column ``c``; units ``'s'``, ``'ms'``, ``'log10_ns'``).
      group: the record key naming the model.
      grid: the SVR grid for ``fit_regression`` (``None``: the paper's 10 x 10 grid over C in
        10..100 and epsilon in 0.01..0.1; a coarser one makes quick runs faster).

    Leave-one-model-out: for each model label, the regression is fitted (hyperparameters
    chosen by ``fit_regression``, then refitted on every remaining record) on the records
    of the *other* models and predicts all records of the held-out one; MAE (seconds) and
    MAPE (a fraction) per held-out model and over all records. The final models are
    fitted on every record.

    Returns ``{"step": {name: {...}}, "checkpoint": {name: {...}} or None, "best_step",
    "best_checkpoint", "tensor_overhead"}``: per model name its ``kind``, ``features``,
    ``lomo`` (one entry per held-out model), ``mae``, ``mape``, ``fit`` (the final fit's
    k-fold/test errors, in the target ``unit``, and chosen hyperparameters), ``predict`` (the final model: feature
    matrix -> seconds, clipped at 10⁻⁶ s; not JSON). ``best_*`` is the name with the
    smallest leave-one-model-out MAPE. ``tensor_overhead``: least-squares
    ``meta_mb, index_mb ≈ a + b · tensors`` from the checkpoint records (used by
    :func:`checkpoint_time` to predict a state's file sizes before it is written).
    """
    seed = va.check_int("seed", seed, lo=0)
    k = va.check_int("k", k, lo=2)
    va.check_str("group", group)
    if (isinstance(step_records, (dict, str, bytes)) or not isinstance(step_records, Sequence) or not step_records
            or not all(isinstance(r, dict) for r in step_records)):
        raise ValueError("step_records must be a non-empty sequence of dicts (features + 'step_s' + the model label)")
    step_models = _check_specs(STEP_MODELS if step_models is None else step_models, "step_models")
    checkpoint_models = _check_specs(CHECKPOINT_MODELS if checkpoint_models is None else checkpoint_models,
                                     "checkpoint_models")
    step = _lomo(step_records, step_models, "step_s", group, seed, k, grid, "step_records")
    out = {"step": step, "best_step": min(step, key=lambda n: step[n]["mape"]), "checkpoint": None,
           "best_checkpoint": None, "tensor_overhead": None}
    if ckpt_records is not None:
        if isinstance(ckpt_records, dict) or not isinstance(ckpt_records, Sequence) or not ckpt_records:
            raise ValueError("ckpt_records must be a non-empty sequence of measure_checkpoint_time records, or None")
        recs = [dict(r) for r in ckpt_records]
        for r in recs:
            if group not in r:
                r[group] = f"{r.get('size_mb', '?'):g}MB/{r.get('tensors', '?')}t" if "size_mb" in r else "?"
        ck = _lomo(recs, checkpoint_models, "seconds", group, seed, k, grid, "ckpt_records")
        out["checkpoint"] = ck
        out["best_checkpoint"] = min(ck, key=lambda n: ck[n]["mape"])
        t = _matrix(recs, ("tensors",), "ckpt_records")[:, 0]
        A = np.stack([np.ones_like(t), t], 1)
        over = {}
        for col in ("meta_mb", "index_mb"):
            coef, *_ = np.linalg.lstsq(A, _matrix(recs, (col,), "ckpt_records")[:, 0], rcond=None)
            over[col] = [float(coef[0]), float(coef[1])]
        out["tensor_overhead"] = over
    return out


def _pick(fitted: Any, part: str, model: str | None) -> dict:
    if not isinstance(fitted, dict) or part not in fitted or "best_" + part not in fitted:
        raise TypeError(f"fitted must be the dict fit_local_models returns, got {type(fitted).__name__}")
    table = fitted[part]
    if table is None:
        raise ValueError(f"fitted has no {part} models (fit_local_models was given no records for them)")
    name = fitted["best_" + part] if model is None else model
    if name not in table:
        raise ValueError(f"model must be one of {sorted(table)}, got {name!r}")
    if not callable(table[name].get("predict")):
        raise ValueError(f"fitted[{part!r}][{name!r}] has no fitted predictor (was it loaded from JSON?)")
    return table[name]


def step_time_model(
    fitted: dict,
    algorithm: Any,
    *,
    batch_size: int | None = None,
    model: str | None = None,
    sync_s: float = 0.0,
    feats: dict | None = None,
):
    """A :class:`scarjax.cluster.steptime.StepTime` for ``algorithm`` from a
    :func:`fit_local_models` fit: the predicted single-worker step time ``t₁`` (from the
    job's :func:`features` and the fitted step model ``model``, default the one with the
    smallest leave-one-model-out MAPE) as ``step_time_linear(t₁, sync_s)``:
    ``t(M) = t₁ / M + sync_s · log₂ M`` (the step's work divided over ``M`` data-parallel
    workers plus an all-reduce; ``sync_s = 0``: perfect scaling).

    ``algorithm``/``batch_size`` as in :func:`features` (``feats``: precomputed features of
    it, skipping the compilation)."""
    entry = _pick(fitted, "step", model)
    va.check_real("sync_s", sync_s, lo=0.0, scalar=True)
    f = features(algorithm, batch_size=batch_size) if feats is None else feats
    X = _matrix([f], entry["features"], "feats")
    t1 = float(entry["predict"](X)[0])
    st = step_time_linear(t1, float(sync_s))
    name = f"fitted_{model or fitted['best_step']}({f.get('name', 'job')}: {t1:.3g}s)"
    return StepTime(st.fn, name)


def checkpoint_time(fitted: dict, state: Any, *, model: str | None = None) -> float:
    """Predicted seconds to write a full persistent checkpoint of ``state`` (a
    :class:`scarjax.Algorithm`, whose initial state is used, or any pytree of arrays) on this
    host, from a :func:`fit_local_models` fit (``model``: a Table IV model name, default the
    best by leave-one-model-out MAPE). The file sizes are predicted before writing: data =
    the state's bytes, meta and index from ``fitted['tensor_overhead']`` (linear in the
    number of leaves)."""
    entry = _pick(fitted, "checkpoint", model)
    if isinstance(state, Algorithm):
        state = state.init(jax.random.key(0), state.data)
    leaves = jax.tree.leaves(state)
    if not leaves:
        raise ValueError("state must hold at least one array")
    data = sum(int(np.size(x)) * np.dtype(getattr(x, "dtype", None) or np.asarray(x).dtype).itemsize
               for x in leaves) / MB
    over = fitted["tensor_overhead"]
    n = len(leaves)
    meta = max(over["meta_mb"][0] + over["meta_mb"][1] * n, 0.0)
    index = max(over["index_mb"][0] + over["index_mb"][1] * n, 0.0)
    row = {"data_mb": data, "meta_mb": meta, "index_mb": index, "total_mb": data + meta + index, "tensors": n}
    return float(entry["predict"](_matrix([row], entry["features"], "state"))[0])
