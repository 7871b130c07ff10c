# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Property-testing your own algorithm against the theory
#
# The theory of scarjax — linear convergence (Eq 5.3), the rework bound (Thm 5.3.1),
# partial recovery (Thms 5.4.1–5.4.2), the precision floor (Example 5.2.1, Eq B.1),
# bounded staleness (Example 5.2.2), the PGNS estimator (App. A.1) — is a set of
# statements about *an algorithm*. `scarjax.testing` checks them for **yours**, with
# [hypothesis](https://hypothesis.readthedocs.io) drawing perturbations, failures,
# formats and delays, and shrinking any counterexample to a minimal one.
#
# This notebook walks through the strategies, runs every check on a small problem, and
# ends with the 20-line test file a user writes for their own optax step and fixed-point
# iteration — run by pytest, one property passing and one failing. The guide is
# `docs/testing.md`.

# %%
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import hypothesis
import jax
import jax.numpy as jnp
import numpy as np
import optax
from hypothesis import strategies as st

import scarjax
from scarjax import testing as sxt
from scarjax.testing import strategies as sst

T0 = time.perf_counter()

# %% [markdown]
# ## Strategies: drawing scarjax's objects
#
# `sst` holds hypothesis strategies for the library's objects. A perturbation sequence
# is a list of write-point perturbations `δ_k` (Eq 5.2): a step, a size `‖δ‖`, a
# direction (random, or adversarial: straight away from `w*`, the worst case of Thm
# 5.3.1), a sparsity and a seed. Every drawn value says what it is in words.
# (`derandomize=True`: the same draws on every run.)

# %%
drawn = []


@hypothesis.settings(max_examples=30, derandomize=True, database=None)
@hypothesis.given(sst.perturbation_sequences(max_step=50, max_events=3))
def collect(seq):
    drawn.append(seq)


collect()
shown = list(dict.fromkeys(s.describe() for s in drawn))[-4:]  # the last four distinct draws
print("\n".join(shown))

# %% [markdown]
# A sequence replays as one hook (`seq.hook()`), and a batch of them as one compiled
# `run_trials` call (`sst.sequence_hook` with `sst.stack(seqs)` as `hook_args`).
# Other strategies draw schedules and hook chains, SCAR's failures, partitions,
# lost blocks and checkpoints, precision formats, staleness bounds and delay patterns,
# worker counts and revocation schedules, and quadratic test beds with a known rate:

# %%
examples = {}


@hypothesis.settings(max_examples=12, derandomize=True, database=None)
@hypothesis.given(
    fmt=sst.precision_formats(),
    fail=sst.failures(max_step=20, servers=4),
    delays=sst.delay_patterns(workers=2),
    bed=sst.quadratics(),
)
def collect_more(fmt, fail, delays, bed):
    examples.update(fmt=fmt, fail=fail, delays=delays, bed=bed)


collect_more()
print("precision format:", examples["fmt"].describe())
print("failure:         ", examples["fail"].describe())
print("delay pattern:   ", examples["delays"].describe())
print("test bed:        ", examples["bed"].description)

# %% [markdown]
# ### Shrinking
#
# When a property fails, hypothesis *shrinks* the failing example to a minimal one: the
# strategies shrink towards fewer perturbations, at the earliest step, dense, in a random
# direction, with the simplest size that still fails. Here the "property" fails for any
# sequence whose perturbations from step 10 on add up to more than 1.5; we record the
# first failing draw and let `hypothesis.find` shrink it:

# %%
failing = []


def too_big(seq):
    bad = sum(e.size for e in seq.events if e.step >= 10) > 1.5
    if bad and not failing:
        failing.append(seq)
    return bad


smallest = hypothesis.find(
    sst.perturbation_sequences(max_step=50, max_events=4),
    too_big,
    settings=hypothesis.settings(max_examples=200, derandomize=True, database=None),
)
print("first failing draw:", failing[0].describe())
print("shrunk to:         ", smallest.describe())

# %% [markdown]
# That is what makes a failing check's message readable: a single perturbation at one
# step where one suffices.
#
# ## The checks, on a small problem
#
# Our "own" algorithm: ridge regression trained by full-batch gradient descent written as
# an optax step (`scarjax.from_optax`), given its optimum `w*`. Its linear rate is known:
# `c = maxᵢ |1 − ηλᵢ(H)|`.

# %%
rng = np.random.default_rng(0)
X = rng.normal(size=(64, 4)).astype(np.float32)
y = X @ np.arange(1, 5, dtype=np.float32) + rng.normal(size=64).astype(np.float32)
H = X.T @ X / 64 + 0.1 * np.eye(4)
w_star = np.linalg.solve(H, X.T @ y / 64).astype(np.float32)
c = float(np.abs(1 - 0.5 * np.linalg.eigvalsh(H)).max())


def loss(w, batch):
    return 0.5 * jnp.mean((batch["x"] @ w - batch["y"]) ** 2) + 0.05 * w @ w


data = {"x": X, "y": y}
ridge = scarjax.from_optax(loss, optax.sgd(0.5), jnp.zeros(4), data, optimum=w_star, name="ridge")
print(f"exact rate c = {c:.6f}")

# %% [markdown]
# Every `check_*` runs your algorithm through `run_trials` — **one hypothesis example is
# one batch of trials**, compiled once — with a cheap default budget (10 examples,
# derandomized; `settings=` an int or a `hypothesis.settings` for deeper runs), returns
# what it measured with a `.summary()` when the property holds, and raises
# `sxt.CheckFailure` (an `AssertionError`) with the counterexample when it does not.
#
# ### Linear convergence (Eq 5.3)
#
# The premise of every rework bound. The check starts runs near `w*`, measures the
# largest one-step contraction, and either gives the rate with a confidence statement
# or says "not linearly convergent here". With `rate=` it checks a claimed rate.

# %%
conv = sxt.check_linear_convergence(ridge, 40, rate=c)
print(conv.summary())

# %% [markdown]
# A claimed rate that is too optimistic is caught at the first step that contradicts it:

# %%
try:
    sxt.check_linear_convergence(ridge, 40, rate=0.5, settings=2)
except sxt.CheckFailure as e:
    print(e)

# %% [markdown]
# ### Thm 5.3.1 under arbitrary perturbations
#
# Hypothesis draws a perturbation sequence per trial (up to 4 events, sizes up to 3×
# the initial distance, random or adversarial); the check compares each trial's
# measured rework (Eq 5.4) with the bound, in the form valid against a measured
# baseline (restarted at the first perturbation).

# %%
rework = sxt.check_rework_bound(ridge, c, 100)
print(rework.summary())

# %% [markdown]
# The theorem's assumption is that the algorithm contracts at `c` *wherever the
# perturbations take it*. Gradient descent on `Σ log cosh(w − 1)` contracts at rate
# about 0.5 near its optimum but much more slowly far from it (the gradient saturates):
# a perturbation large enough to push it out of that region breaks the bound. We draw
# one adversarial kick at step 0; the check finds one that breaks the bound, shrunk to a
# simple size, and its message shows the cause: the perturbed run's slowest one-step
# contraction is far above `c` — the perturbation was too large for the theorem's
# assumptions, not a counterexample to the theorem.

# %%
f = lambda w, d: w - 0.5 * jnp.tanh(w - 1.0)  # noqa: E731
logcosh = scarjax.fixed_point(
    f, jnp.full(2, 1.5), lambda w, d: jnp.sum(jnp.log(jnp.cosh(w - 1.0))), optimum=jnp.ones(2), name="GD on log cosh"
)
near = sxt.check_linear_convergence(logcosh, 30, near=0.5, settings=3)
print(near.summary())
one_kick = sst.perturbation_sequences(max_step=0, max_events=1, directions=("adversarial",))
try:
    sxt.check_rework_bound(logcosh, near.c, 60, perturbations=one_kick, trials=2, settings=10)
except sxt.CheckFailure as e:
    print(e)

# %% [markdown]
# ### Partial vs full recovery (Thms 5.4.1, 5.4.2)
#
# A failure loses blocks of the parameters (and the optimizer state co-located with
# them); partial recovery reloads only the lost blocks from the checkpoint. Thm 5.4.1:
# it never perturbs more than full recovery and leaves the other blocks exactly as they
# were; Thm 5.4.2: losing a random fraction `p` of the blocks, `E‖δ'‖² = p‖δ‖²`
# (a z-test with false-alarm rate 1e-6 per example).

# %%
print(sxt.check_partial_recovery(ridge, 20, settings=5).summary())
print(sxt.check_expected_perturbation(ridge, 20, settings=3).summary())

# %% [markdown]
# ### Precision and staleness (Examples 5.2.1, 5.2.2; Eq B.1, B.4)
#
# Storing the parameters in a drawn format perturbs every step by at most the format's
# relative precision (Example 5.2.1), and gradient descent then settles under the error
# floor `cΔ/(1 − c)` of Eq B.1. Stale reads within a declared bound `s` perturb by at most
# the last `s` updates (Example 5.2.2), and the run stays under Lemma B.2.1's envelope.

# %%
print(sxt.check_precision_floor(ridge, c, 60, settings=3).summary())
print(sxt.check_staleness(ridge, c, 40, workers=2, settings=3).summary())

# %% [markdown]
# ### PGNS (Eq 3.2, App. A.1) and determinism
#
# The noise-scale estimator's two statistics must be unbiased for the exact
# per-example values at fixed parameters — a Student-t test whose whole-check
# false-alarm rate is 1e-3. And a run must be a function of its key: bit-identical when
# compiled again, and trial `i` of `run_trials` equal to `run(keys[i])`.

# %%
pgns = sxt.check_pgns_unbiased(
    lambda w, x, y: loss(w, {"x": x, "y": y}), jnp.zeros(4), (X, y), microbatch_size=8, settings=3
)
print(pgns.summary())
print(sxt.check_determinism(ridge, 20, settings=2).summary())

# %% [markdown]
# ## Your own test file
#
# `docs/examples/test_my_algorithm.py` is the file a user writes: the ridge step above
# (an optax step) and a fixed-point iteration `w ← sin(w)`, with one property each. We
# copy it into an empty directory and run pytest on it, as a user would.

# %%
source = Path(scarjax.__file__).resolve().parents[1] / "docs" / "examples" / "test_my_algorithm.py"
if not source.exists():
    raise FileNotFoundError(f"{source}: run this notebook from a scarjax checkout (pip install -e .)")
text = source.read_text()
print(text)

# %%
with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / "test_my_algorithm.py").write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--color=no", "-p", "no:cacheprovider", "test_my_algorithm.py"],
        cwd=tmp, env=env, capture_output=True, text=True,
    )
out = proc.stdout + proc.stderr
start = out.find("_ test_sine_converges_linearly _")
print(out[start:] if start >= 0 else out)

# %% [markdown]
# One property holds: Thm 5.3.1 bounds the rework of the ridge step under every
# perturbation sequence hypothesis drew. The other fails with a readable
# counterexample: `w ← sin(w)` converges to 0, but `sin'(0) = 1`, so its contraction keeps
# slowing down — it is not linearly convergent, and no rate `c < 1` for the rework bounds
# exists. The message names the start, the trial and the seed, and the `replay with:`
# lines rerun exactly that trial.

# %%
summary = out.strip().splitlines()[-1]
print(summary)
assert "1 failed, 1 passed" in summary, out
print(f"notebook ran in {time.perf_counter() - T0:.0f} s")
