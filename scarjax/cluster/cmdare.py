"""CM-DARE's performance models (Li, Walls, Guo, ICDCS'20), fitted to its own measurements with
scikit-learn.

* :func:`fit_regression` - the paper's recipe for every regression (Sec III-B): min-max scaling of
  the inputs (footnote 2), a random 4:1 train/test split, k-fold cross-validated MAE on the
  training part, and for SVR a grid search over the penalty C in 10..100 (step 10) and epsilon in
  0.01..0.1 (step 0.01) that picks the pair with the best k-fold MAE; MAE and MAPE on the held-out
  test part. The generic entry point (also for this machine's models, ``scarjax.cluster.profile``).
* :func:`step_time_models` - Table II's eight step-time models on the supertable
  (:func:`scarjax.data.load_cmdare_speed`); :data:`TABLE_II` - the paper's numbers.
* :func:`checkpoint_models` - Table IV's four checkpoint-time models (Sec IV-C) on
  ``whole_data.csv`` (:func:`scarjax.data.load_cmdare_checkpoints`); :data:`TABLE_IV`.
* Cluster size and the parameter-server bottleneck (Sec III-C/D, Table III, Fig 4; Sec VI-B,
  Fig 12): :func:`cluster_speed_summary` (speed per (GPU, parameter servers, model, workers)),
  :func:`detect_plateau` (where adding a worker stops paying), :func:`detect_bottleneck` (Sec
  VI-B's rule: measured vs the sum of single-worker speeds, 6.7% threshold) and :func:`ps_gain`
  (the second parameter server's gain; paper: up to +70.6%).

Everything is deterministic per ``seed`` (the split and the folds; SVR and least squares are
deterministic).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from scarjax.data.cmdare import load_cmdare_checkpoints
from scarjax.data.cmdare import load_cmdare_speed
from scarjax.validate import check_choice, check_int

__all__ = [
    "KINDS",
    "PAPER_GRID",
    "PAPER_MAPE",
    "PAPER_PLATEAU",
    "PAPER_PS_GAIN",
    "QUICK_GRID",
    "TABLE_II",
    "TABLE_IV",
    "RegressionResult",
    "checkpoint_models",
    "cluster_speed_summary",
    "detect_bottleneck",
    "detect_plateau",
    "fit_regression",
    "ps_gain",
    "step_time_models",
]

#: The regressions :func:`fit_regression` fits: least squares (Eq 1; Table IV (i), (ii)), SVR with
#: the degree-2 polynomial kernel (Eq 2) or the RBF kernel (Eq 3), the RBF kernel on unscaled
#: inputs with gamma = 1 / n_features (``svr_rbf_raw``: Table IV (iv)), and least squares on the
#: first two principal components (Table IV (iii)).
KINDS = ("linear", "svr_poly", "svr_rbf", "svr_rbf_raw", "pca2_linear")

#: The SVR hyper-parameter grid of Sec III-B: "the range for p [the penalty C] to be [10, 100]
#: with a step increment of 10, and epsilon to be [0.01, 0.1] with a step increment of 0.01".
PAPER_GRID = {
    "C": tuple(float(c) for c in range(10, 101, 10)),
    "epsilon": tuple(round(0.01 * i, 2) for i in range(1, 11)),
}

#: A 2 x 2 corner of :data:`PAPER_GRID` for quick runs: Table II's eight models in ~0.6 s of CPU
#: instead of ~9.5 s, with the same k-fold MAEs to 0.002 s on the CM-DARE data.
QUICK_GRID = {"C": (10.0, 100.0), "epsilon": (0.01, 0.1)}

#: Table II (seconds): model -> (k-fold MAE, its std, test MAE), in the table's order.
TABLE_II = {
    "Univariate, GPU-agnostic": (0.072, 0.015, 0.068),
    "Multivariate, GPU-agnostic": (0.103, 0.026, 0.093),
    "Univariate, K80": (0.065, 0.013, 0.068),
    "SVR Polynomial Kernel, K80": (0.035, 0.014, 0.041),
    "SVR RBF Kernel, K80": (0.026, 0.012, 0.031),
    "Univariate, P100": (0.029, 0.008, 0.031),
    "SVR Polynomial Kernel, P100": (0.019, 0.007, 0.020),
    "SVR RBF Kernel, P100": (0.012, 0.008, 0.016),
}

#: Table IV (seconds): model -> (k-fold MAE, its std, test MAE).
TABLE_IV = {
    "Univariate": (0.345, 0.099, 0.356),
    "Multivariate": (0.291, 0.139, 0.353),
    "Multivariate, Two Components PCA": (0.286, 0.142, 0.354),
    "SVR RBF kernel": (0.198, 0.135, 0.245),
}

#: Test-set MAPEs the paper states: Sec III-B (K80 SVR RBF 9.02%, P100 SVR polynomial 13.79%) and
#: Sec IV-C (checkpoint SVR RBF 5.38%).
PAPER_MAPE = {"SVR RBF Kernel, K80": 0.0902, "SVR Polynomial Kernel, P100": 0.1379, "SVR RBF kernel": 0.0538}

#: Sec III-C (Table III): per-worker step time jumps (the parameter-server bottleneck) at 8 P100
#: and at 4 V100 workers; K80 workers never reach it (within 1% up to 8). Sec III-D (Fig 4): for
#: P100 ResNet-32 and Shake Shake small the cluster speed "starts to plateau after more than
#: four GPU servers"; Shake Shake big does not gain at all; ResNet-15 keeps rising.
PAPER_PLATEAU = {"p100": 8, "v100": 4, "k80": None, "fig4_p100": {"res32": 4, "shakesmall": 4}}
#: Sec VI-B, Fig 12: a second parameter server "improved the training speed of all clusters by
#: up to 70.6%".
PAPER_PS_GAIN = 0.706

_TABLE_II_SPECS = (
    # (name, kind, gpu or None, features)
    ("Univariate, GPU-agnostic", "linear", None, ("C_norm",)),
    ("Multivariate, GPU-agnostic", "linear", None, ("C_m", "C_gpu")),
    ("Univariate, K80", "linear", "k80", ("C_m",)),
    ("SVR Polynomial Kernel, K80", "svr_poly", "k80", ("C_m",)),
    ("SVR RBF Kernel, K80", "svr_rbf", "k80", ("C_m",)),
    ("Univariate, P100", "linear", "p100", ("C_m",)),
    ("SVR Polynomial Kernel, P100", "svr_poly", "p100", ("C_m",)),
    ("SVR RBF Kernel, P100", "svr_rbf", "p100", ("C_m",)),
)
_TABLE_IV_SPECS = (
    ("Univariate", "linear", ("S_c",)),
    ("Multivariate", "linear", ("S_d", "S_m")),
    ("Multivariate, Two Components PCA", "pca2_linear", ("S_d", "S_m", "S_i")),
    ("SVR RBF kernel", "svr_rbf_raw", ("S_c",)),
)
#: Predictions are clipped below at this fraction of the smallest training target (a step or
#: checkpoint time is never <= 0; a linear model extrapolated far below the data could say so).
PREDICTION_FLOOR_FRACTION = 0.01


@dataclass(frozen=True, eq=False)
class RegressionResult:
    """A fitted CM-DARE regression and its errors (Table II / IV columns).

    Attributes:
      name: the model's name (Table II/IV row label for the paper's models).
      features: the input columns' names, in order.
      kfold_mae, kfold_mae_std: mean and std over the k folds of the MAE on the training part
        (for SVR: of the grid point with the best mean), in the target's unit.
      test_mae, test_mape: MAE and mean absolute percentage error (a fraction) on the test part.
      n_train, n_test: the split's sizes.
      estimator: the fitted scikit-learn ``Pipeline`` (scaler [, PCA], regressor), refitted on the
        whole training part.
      params: the chosen SVR ``{"C", "epsilon"}`` (``{}`` for least squares).
      floor: predictions are clipped below at this value (:data:`PREDICTION_FLOOR_FRACTION` x the
        smallest training target).
      kind: one of :data:`KINDS`; seed, k: the split/fold seed and the number of folds.
    """

    name: str
    features: tuple[str, ...]
    kfold_mae: float
    kfold_mae_std: float
    test_mae: float
    test_mape: float
    n_train: int
    n_test: int
    estimator: Any
    params: dict
    floor: float = 0.0
    kind: str = "linear"
    seed: int = 0
    k: int = 5

    def predict(self, X) -> np.ndarray:
        """Predicted targets for ``X`` (``[n, len(features)]``, or ``[n]`` for one feature):
        finite, clipped below at :attr:`floor` (> 0)."""
        X = _as_matrix("X", X, len(self.features))
        out = np.asarray(self.estimator.predict(X), dtype=np.float64)
        if not np.isfinite(out).all():
            raise ValueError(f"{self.name}: the model predicts a non-finite value for some rows of X")
        return np.maximum(out, self.floor)

    def row(self) -> dict:
        """The Table II/IV columns as a dict (for JSON)."""
        return {
            "name": self.name,
            "features": list(self.features),
            "kind": self.kind,
            "kfold_mae": self.kfold_mae,
            "kfold_mae_std": self.kfold_mae_std,
            "test_mae": self.test_mae,
            "test_mape": self.test_mape,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "params": dict(self.params),
        }


def _as_matrix(name: str, X, n_features: int | None = None) -> np.ndarray:
    try:
        X = np.asarray(X, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be an array of real numbers") from None
    if X.ndim == 1:
        X = X[:, None]
    if X.ndim != 2 or X.shape[0] == 0 or X.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty [n] or [n, d] array, got shape {np.shape(X)}")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} must be finite (row {int(np.flatnonzero(~np.isfinite(X).all(axis=1))[0])} is not)")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{name} must have {n_features} columns (the model's features), got {X.shape[1]}")
    return X


def _check_grid(grid) -> dict:
    if grid is None:
        return {k: list(v) for k, v in PAPER_GRID.items()}
    if not isinstance(grid, dict) or set(grid) != {"C", "epsilon"}:
        raise ValueError(f"grid must be a dict with keys 'C' and 'epsilon', got {grid!r}")
    out = {}
    for key, vals in grid.items():
        v = np.asarray(vals, dtype=np.float64).ravel()
        bad = v.size == 0 or not np.isfinite(v).all() or bool((v <= 0).any() if key == "C" else (v < 0).any())
        if bad:
            raise ValueError(f"grid[{key!r}] must be a non-empty list of finite numbers ({'> 0' if key == 'C' else '>= 0'}), got {vals!r}")
        out[key] = [float(x) for x in v]
    return out


def _pipeline(kind: str):
    # scikit-learn is slow to import and needed only here
    from sklearn.decomposition import PCA
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import MinMaxScaler
    from sklearn.svm import SVR

    if kind == "linear":
        return Pipeline([("scale", MinMaxScaler()), ("reg", LinearRegression())])
    if kind == "pca2_linear":
        return Pipeline([("scale", MinMaxScaler()), ("pca", PCA(n_components=2)), ("reg", LinearRegression())])
    if kind == "svr_poly":
        # Eq 2's two-degree polynomial kernel, as (x_i . x + 1)^2 on the scaled inputs: the
        # homogeneous (x_i . x)^2 has no linear term (a x^2 + b; MAE 0.15 s on K80 against the
        # paper's 0.035), and gamma=1 instead of scikit-learn's 'scale' (1 / var = 15 here) keeps
        # the kernel in [1, 4]: the same fit, ~20x fewer SMO iterations.
        return Pipeline([("scale", MinMaxScaler()), ("reg", SVR(kernel="poly", degree=2, gamma=1.0, coef0=1.0))])
    if kind == "svr_rbf_raw":
        # Table IV (iv): the RBF kernel on the raw sizes (MB, no scaling: footnote 2 is about the
        # step-time inputs) with gamma = 1 / n_features, scikit-learn's default before 0.22
        # ('auto'), which a 2019 fit would have used. Min-max scaled with today's 'scale' the test
        # MAE is 0.331 s; this way 0.25 s (paper 0.245 s).
        return Pipeline([("reg", SVR(kernel="rbf", gamma="auto"))])
    return Pipeline([("scale", MinMaxScaler()), ("reg", SVR(kernel="rbf"))])  # Eq 3


def fit_regression(
    X,
    y,
    kind: str,
    *,
    features: Sequence[str] | None = None,
    seed: int = 0,
    k: int = 5,
    test_size: float = 0.2,
    grid: dict | None = None,
    name: str | None = None,
) -> RegressionResult:
    """Fit one CM-DARE regression the paper's way (Sec III-B, Sec IV-C).

    Min-max scaling of ``X`` inside the pipeline (footnote 2; not for ``svr_rbf_raw``); a random split of the rows into
    training and test parts (``test_size=0.2``: the paper's 4:1); ``k``-fold cross-validation
    on the training part (shuffled folds) giving the k-fold MAE and its std; for ``svr_*`` a
    grid search (``GridSearchCV``, MAE) over ``grid`` (default :data:`PAPER_GRID`, 10 x 10 = 100
    pairs) whose best pair's fold MAEs are reported; the chosen pipeline refitted on the whole
    training part gives the test MAE and MAPE.

    Args:
      X: ``[n]`` or ``[n, d]`` finite inputs; y: ``[n]`` finite targets (> 0: times).
      kind: one of :data:`KINDS`; ``pca2_linear`` needs ``d >= 2``.
      features: names of the ``d`` columns (default ``("x0", ...)``).
      seed: seeds the split and the folds (the fit is deterministic per seed).
      k: folds (>= 2, at most the training part's size).
      test_size: the test fraction, in (0, 1).
      grid: ``{"C": [...], "epsilon": [...]}`` for SVR; ``None``: the paper's grid. The full grid
        costs 100 x k SVR fits per model (Table II's eight models: ~9.5 s of CPU);
        :data:`QUICK_GRID` makes quick runs ~15x faster.
      name: the result's name (default ``kind``).

    Returns:
      :class:`RegressionResult`.

    Raises:
      ValueError/TypeError naming the bad argument.
    """
    check_choice("kind", kind, KINDS)
    X = _as_matrix("X", X)
    try:
        y = np.asarray(y, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError("y must be an array of real numbers") from None
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        raise ValueError(f"y must be a [n] array with n = {X.shape[0]} (the rows of X), got shape {y.shape}")
    if not np.isfinite(y).all():
        raise ValueError(f"y must be finite (entry {int(np.flatnonzero(~np.isfinite(y))[0])} is not)")
    if (y <= 0).any():
        raise ValueError(f"y must be > 0 (times; MAPE divides by it), got {y.min():g}")
    if features is None:
        features = tuple(f"x{j}" for j in range(X.shape[1]))
    features = tuple(str(f) for f in features)
    if len(features) != X.shape[1]:
        raise ValueError(f"features must name the {X.shape[1]} columns of X, got {len(features)}: {features}")
    if kind == "pca2_linear" and X.shape[1] < 2:
        raise ValueError(f"kind='pca2_linear' needs X with >= 2 columns, got {X.shape[1]}")
    seed = check_int("seed", seed, lo=0)
    k = check_int("k", k, lo=2)
    try:
        test_size = float(test_size)
    except (TypeError, ValueError):
        raise TypeError(f"test_size must be a number in (0, 1), got {test_size!r}") from None
    if not 0.0 < test_size < 1.0:
        raise ValueError(f"test_size must be in (0, 1), got {test_size}")
    n = X.shape[0]
    n_test = int(np.ceil(test_size * n))
    n_train = n - n_test
    if n_test < 1 or n_train < k:
        raise ValueError(f"k={k} folds need at least {k} training rows; X has {n} rows ({n_train} for training)")
    grid = _check_grid(grid) if kind.startswith("svr") else None

    # scikit-learn is slow to import and needed only here
    from sklearn.model_selection import GridSearchCV, KFold, cross_validate, train_test_split

    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=n_test, random_state=seed, shuffle=True)
    folds = KFold(n_splits=k, shuffle=True, random_state=seed)
    pipe = _pipeline(kind)
    params: dict = {}
    if grid is not None:
        search = GridSearchCV(
            pipe,
            {"reg__C": grid["C"], "reg__epsilon": grid["epsilon"]},
            scoring="neg_mean_absolute_error",
            cv=folds,
            n_jobs=None,
            refit=True,
        )
        search.fit(X_tr, y_tr)
        b = search.best_index_
        kfold_mae = float(-search.cv_results_["mean_test_score"][b])
        kfold_std = float(search.cv_results_["std_test_score"][b])
        est = search.best_estimator_
        params = {"C": float(search.best_params_["reg__C"]), "epsilon": float(search.best_params_["reg__epsilon"])}
    else:
        cv = cross_validate(pipe, X_tr, y_tr, cv=folds, scoring="neg_mean_absolute_error")
        scores = -cv["test_score"]
        kfold_mae, kfold_std = float(scores.mean()), float(scores.std())
        est = pipe.fit(X_tr, y_tr)
    floor = PREDICTION_FLOOR_FRACTION * float(y_tr.min())
    pred = np.maximum(np.asarray(est.predict(X_te), dtype=np.float64), floor)
    err = np.abs(pred - y_te)
    return RegressionResult(
        name=kind if name is None else str(name),
        features=features,
        kfold_mae=kfold_mae,
        kfold_mae_std=kfold_std,
        test_mae=float(err.mean()),
        test_mape=float((err / np.abs(y_te)).mean()),
        n_train=int(n_train),
        n_test=int(n_test),
        estimator=est,
        params=params,
        floor=floor,
        kind=kind,
        seed=seed,
        k=k,
    )


def step_time_models(table=None, *, seed: int = 0, k: int = 5, grid: dict | None = None) -> list[RegressionResult]:
    """Table II's eight step-time models (Sec III-B), in the table's order.

    Features (min-max scaled in each pipeline): ``C_norm`` = model FLOPs / GPU TFLOPS (the
    computation ratio), ``C_m`` = model FLOPs (model complexity), ``C_gpu`` = GPU TFLOPS. The
    GPU-agnostic models use all rows (``S = a C_norm + b``; ``S = a C_m + b C_gpu + c``); the
    GPU-specific ones (Eq 1-3: least squares, SVR polynomial, SVR RBF on ``C_m``) the rows of one
    GPU (K80, P100). Target: step time in seconds.

    Args:
      table: a :class:`scarjax.data.cmdare.SpeedTable` (default: the twenty CNNs of Sec III-A,
        ``load_cmdare_speed(dataset="models20")``, the data Table II was fitted on; the
        supertable, ``load_cmdare_speed()``, holds only 4 models at two network latencies,
        which the models here do not take as an input).
      seed, k, grid: as :func:`fit_regression` (``grid=None``: the paper's 10 x 10 grid).

    Returns:
      ``list[RegressionResult]`` named as :data:`TABLE_II`'s keys.
    """
    if table is None:
        table = load_cmdare_speed(dataset="models20")
    cols = {
        "C_norm": np.asarray(table.model_flops, np.float64) / np.asarray(table.gpu_tflops, np.float64),
        "C_m": np.asarray(table.model_flops, np.float64),
        "C_gpu": np.asarray(table.gpu_tflops, np.float64),
    }
    y = np.asarray(table.step_time_s, np.float64)
    gpu = np.asarray(table.gpu)
    out = []
    for name, kind, g, feats in _TABLE_II_SPECS:
        rows = np.ones(y.shape, bool) if g is None else gpu == g
        if not rows.any():
            raise ValueError(f"table has no {g} rows (needed for {name!r})")
        X = np.stack([cols[f][rows] for f in feats], axis=1)
        out.append(fit_regression(X, y[rows], kind, features=feats, seed=seed, k=k, grid=grid, name=name))
    return out


def checkpoint_models(table=None, *, seed: int = 0, k: int = 5, grid: dict | None = None) -> list[RegressionResult]:
    """Table IV's four checkpoint-time models (Sec IV-C), in the table's order: (i) ``T_c = a S_c +
    b``; (ii) ``T_c = a S_d + b S_m + c``; (iii) least squares on the first two principal
    components of (S_d, S_m, S_i) (PCA after min-max scaling); (iv) SVR RBF on ``S_c``. ``S_c``:
    checkpoint size, ``S_d`` the data (weight) file, ``S_m`` the meta file, ``S_i`` the index
    file, MB; target: the measured checkpoint duration ``T_c`` in seconds.

    Args:
      table: a :class:`scarjax.data.cmdare.CheckpointTable` (default: embedded ``whole_data.csv``).
      seed, k, grid: as :func:`fit_regression`.

    Returns:
      ``list[RegressionResult]`` named as :data:`TABLE_IV`'s keys.
    """
    if table is None:
        table = load_cmdare_checkpoints()
    cols = {
        "S_c": np.asarray(table.size_mb, np.float64),
        "S_d": np.asarray(table.weight_mb, np.float64),
        "S_m": np.asarray(table.meta_mb, np.float64),
        "S_i": np.asarray(table.index_mb, np.float64),
    }
    y = np.asarray(table.duration_s, np.float64)
    return [
        fit_regression(np.stack([cols[f] for f in feats], axis=1), y, kind, features=feats, seed=seed, k=k,
                       grid=grid, name=name)
        for name, kind, feats in _TABLE_IV_SPECS
    ]


# ---------------------------------------------------------------------------
# Cluster size, the parameter-server bottleneck
# ---------------------------------------------------------------------------


def cluster_speed_summary(runs, *, skip_steps: int = 100) -> list[dict]:
    """Speed of every cluster-size run (Sec III-C/D, Table III, Fig 4, Fig 12).

    Each TensorBoard point is the cluster's steps per second since the previous point; points
    whose window begins before ``skip_steps`` are dropped (the paper discards the first 100
    steps, Sec III-B).

    Args:
      runs: ``ClusterSpeedRun`` records (:func:`scarjax.data.load_cmdare_cluster_speed`).
      skip_steps: warm-up steps to drop (>= 0).

    Returns:
      one dict per run, in the runs' order: ``gpu, ps, model, workers, n_points``,
      ``cluster_steps_per_s`` (mean) and ``cluster_std``, ``per_worker_steps_per_s`` (= cluster /
      workers: asynchronous workers of one type run at the same speed) and ``per_worker_std``,
      ``per_worker_step_ms`` (Table III's quantity: 1000 x workers / cluster speed).

    Raises:
      ValueError: a run with no point left after ``skip_steps``.
    """
    skip_steps = check_int("skip_steps", skip_steps, lo=0)
    out = []
    for i, r in enumerate(runs):
        for attr in ("gpu", "ps", "model", "workers", "step", "steps_per_s"):
            if not hasattr(r, attr):
                raise TypeError(f"runs[{i}] must be a ClusterSpeedRun (no {attr!r}), got {type(r).__name__}")
        step = np.asarray(r.step, np.float64)
        prev = np.concatenate([[0.0], step[:-1]])
        v = np.asarray(r.steps_per_s, np.float64)[prev >= skip_steps]
        if v.size == 0:
            raise ValueError(f"runs[{i}] ({r.gpu}, ps={r.ps}, {r.model}, {r.workers} workers) has no point after "
                             f"skip_steps={skip_steps}")
        w = int(r.workers)
        mean, std = float(v.mean()), float(v.std())
        out.append(
            {
                "gpu": r.gpu,
                "ps": int(r.ps),
                "model": r.model,
                "workers": w,
                "n_points": int(v.size),
                "cluster_steps_per_s": mean,
                "cluster_std": std,
                "per_worker_steps_per_s": mean / w,
                "per_worker_std": std / w,
                "per_worker_step_ms": 1000.0 * w / mean if mean > 0 else float("inf"),
            }
        )
    return out


def _sizes_speeds(workers, cluster_speed) -> tuple[np.ndarray, np.ndarray]:
    w = np.asarray(workers)
    s = np.asarray(cluster_speed, dtype=np.float64)
    if w.ndim != 1 or s.shape != w.shape or w.size < 2:
        raise ValueError(f"workers and cluster_speed must be [n] arrays of one length n >= 2, got {w.shape} and {s.shape}")
    if not np.issubdtype(w.dtype, np.integer) or (w < 1).any():
        raise ValueError(f"workers must be integers >= 1, got {w.tolist()}")
    if len(np.unique(w)) != w.size:
        raise ValueError(f"workers must not repeat, got {w.tolist()}")
    if not np.isfinite(s).all() or (s <= 0).any():
        raise ValueError("cluster_speed must be finite and > 0")
    o = np.argsort(w)
    return w[o].astype(np.int64), s[o]


def _check_threshold(threshold) -> float:
    if isinstance(threshold, (bool, np.bool_)) or not isinstance(threshold, (int, float, np.integer, np.floating)):
        raise TypeError(f"threshold must be a number in (0, 1), got {threshold!r}")
    t = float(threshold)
    if not 0.0 < t < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
    return t


def detect_plateau(workers, cluster_speed, *, threshold: float = 0.067) -> int | None:
    """The cluster size at which the cluster speed plateaus (Sec III-D, Fig 4): the smallest
    measured size ``n`` such that no larger measured size ``n'`` is faster than ``speed(n)`` by
    ``threshold`` or more of the linear prediction ``speed(n) * n' / n`` (as if each added worker
    added ``speed(n) / n``). Comparing against every larger size, not only the next, keeps one
    noisy dip from hiding a later gain. ``threshold`` defaults to the 6.7% of CM-DARE's bottleneck
    flag (Sec VI-B).

    Args:
      workers: ``[n]`` distinct cluster sizes >= 1 (any order); cluster_speed: ``[n]`` steps/s (> 0).
      threshold: in (0, 1).

    Returns:
      the plateau size (the largest measured size counts only if nothing before it plateaus:
      ``None`` then, since nothing after it was measured), or ``None``.
    """
    t = _check_threshold(threshold)
    w, s = _sizes_speeds(workers, cluster_speed)
    # gain[i, j] = s_j - s_i for j > i must stay below t * s_i * w_j / w_i
    gain = s[None, :] - s[:, None]
    allowed = t * s[:, None] * w[None, :] / w[:, None]
    later = np.triu(np.ones((w.size, w.size), bool), k=1)
    ok = np.where(later, gain < allowed, True).all(axis=1)[:-1]
    idx = np.flatnonzero(ok)
    return int(w[idx[0]]) if idx.size else None


def detect_bottleneck(workers, cluster_speed, *, threshold: float = 0.067) -> int | None:
    """CM-DARE's bottleneck flag (Sec VI-B): the smallest cluster size whose measured speed falls
    short of the predicted speed, the sum of its workers' single-worker speeds (Sec VI-A:
    ``sp = sum_i sp_i`` = ``n * speed(1)`` for a homogeneous cluster), by more than ``threshold``
    (6.7% in the paper). Needs ``1`` among ``workers``; ``None`` if no size is flagged."""
    t = _check_threshold(threshold)
    w, s = _sizes_speeds(workers, cluster_speed)
    if w[0] != 1:
        raise ValueError(f"workers must include 1 (the single-worker speed the prediction sums), got {w.tolist()}")
    short = (w * s[0] - s) > t * w * s[0]
    idx = np.flatnonzero(short)
    return int(w[idx[0]]) if idx.size else None


def ps_gain(summary) -> dict:
    """The second parameter server's gain (Sec VI-B, Fig 12; paper: up to +70.6%).

    Args:
      summary: :func:`cluster_speed_summary` rows; pairs of rows with the same (gpu, model,
        workers) and ``ps`` 1 and 2 are compared.

    Returns:
      ``{model: {"gpu", "max_gain", "workers" (the size of the max), "gain": {workers: gain}}}``
      with gain = cluster speed with 2 PS / with 1 PS - 1; and ``"overall"``: the max over
      models (``{"model", "workers", "max_gain"}``).

    Raises:
      ValueError: no (gpu, model, workers) measured with both 1 and 2 parameter servers.
    """
    speeds = {}
    for i, row in enumerate(summary):
        try:
            speeds[(row["gpu"], int(row["ps"]), row["model"], int(row["workers"]))] = float(row["cluster_steps_per_s"])
        except (KeyError, TypeError):
            raise TypeError(f"summary[{i}] must be a cluster_speed_summary row (gpu, ps, model, workers, "
                            f"cluster_steps_per_s)") from None
    out: dict = {}
    for (g, ps, m, w), s1 in sorted(speeds.items(), key=lambda kv: (kv[0][0], kv[0][2], kv[0][3])):
        if ps != 1 or (g, 2, m, w) not in speeds:
            continue
        gain = speeds[(g, 2, m, w)] / s1 - 1.0
        d = out.setdefault(m, {"gpu": g, "gain": {}})
        d["gain"][w] = gain
    if not out:
        raise ValueError("summary has no (gpu, model, workers) measured with both 1 and 2 parameter servers")
    for m, d in out.items():
        wbest = max(d["gain"], key=d["gain"].get)
        d["max_gain"], d["workers"] = d["gain"][wbest], wbest
    best = max(out, key=lambda m: out[m]["max_gain"])
    out["overall"] = {"model": best, "workers": out[best]["workers"], "max_gain": out[best]["max_gain"]}
    return out
