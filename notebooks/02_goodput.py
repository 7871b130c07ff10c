# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 02 - Goodput with `scarjax.pollux`
#
# Pollux (thesis Ch. 3) picks the batch size that maximises **goodput** = throughput x
# statistical efficiency (Eq 3.1). This notebook walks through the toolkit:
#
# 1. the pre-conditioned gradient noise scale (PGNS, Eq 3.2) from micro-batch gradients,
#    for any optax optimizer, checked against the exact per-example value;
# 2. statistical efficiency (Eq 3.3) and goodput;
# 3. the throughput model (Eq 3.4-3.8) and its RMSLE fit (Sec 3.4.1);
# 4. the goodput-optimal batch size (Eq 3.10), LR scaling, and the adaptive agent loop.

# %%
import jax
import jax.numpy as jnp
import numpy as np
import optax

from scarjax import pollux as px
from scarjax.pollux import examples

prob = examples.mlr()  # multinomial logistic regression on sklearn's 8x8 digits
print(prob.x.shape, jax.tree.map(jnp.shape, prob.params))

# %% [markdown]
# ## 1. PGNS from micro-batch gradients
#
# `with_pgns` wraps any optax optimizer and keeps optax's contract: `update` takes the
# gradient (the mean over K micro-batches) and, as the extra argument `microbatch_moments`,
# the per-coordinate sums of the K micro-batch gradients and of their squares
# (`reduce_microbatches` computes both from the stacked `vmap(grad)` in one pass). It
# updates bias-corrected moving averages of `|Pg|^2` and `tr(P Sigma P^T)` and applies the
# wrapped optimizer to the gradient; `P` is read from the optimizer's own state (identity
# for SGD, `1/(sqrt(nu)+eps)` for Adam...). So it composes with optax's wrappers
# (`apply_if_finite`, `MultiSteps`, `masked`, clipping chained before it).

# %%
K, B = 8, 32
adam = optax.adam(1e-2)
opt = px.with_pgns(adam, microbatch_size=B)
params, state = prob.params, opt.init(prob.params)


@jax.jit
def step(params, state, key):
    xb, yb = examples.sample_microbatches(key, prob.x, prob.y, K, B)
    grads_k = jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb)  # [K, ...]
    grads, moments = px.reduce_microbatches(grads_k)  # the mean, and sum_k g_k, sum_k g_k^2
    updates, state = opt.update(grads, state, params, microbatch_moments=moments)
    return optax.apply_updates(params, updates), state


for i in range(200):
    params, state = step(params, state, jax.random.PRNGKey(i))
phi = float(px.pgns_from_state(state))

# Exact reference from per-example gradients over the whole data set, same P. P depends on
# Adam's b2/eps/eps_root, which optax does not keep in the state: pass the optimizer.
P = px.preconditioner(state, adam)
peg = px.per_example_grads(prob.example_loss, params, prob.x, prob.y)
phi_exact = float(px.noise_scale(px.exact_stats(peg, P)))
print(f"PGNS: running estimate {phi:.1f}, exact (per-example, same P) {phi_exact:.1f}")

# %% [markdown]
# `P` is never built from silently assumed hyper-parameters: without the optimizer (or an
# `optax.inject_hyperparams` state, or explicit `hyperparams=`) it is refused, naming what is
# missing. Coordinates whose second moment is still exactly 0 (an input that has been 0 in
# every example so far, like MNIST's border pixels) get `P = 0` instead of Adam's `1/eps`,
# which would swamp the statistics the first time a rare input is drawn.

# %%
try:
    px.preconditioner(state)
except ValueError as e:
    print("ValueError:", str(e)[:100], "...")
adamw = optax.adamw(1e-3, b2=0.9, eps=1e-2)
w = {"w": jnp.ones(3)}
_, st = adamw.update({"w": jnp.array([0.0, 1.0, 2.0])}, adamw.init(w), w)  # first input dead so far
print(px.preconditioner(st, adamw))  # [0, 1/(1+eps), 1/(2+eps)]

# %% [markdown]
# To measure `phi` at fixed parameters (e.g. to validate the estimator, or at a checkpoint)
# without touching the optimizer state, `estimate_pgns_at` averages many independent draws
# of K micro-batches and reports a standard error, and the exact value when it is cheap:

# %%
est = px.estimate_pgns_at(
    prob.loss, params, (prob.x, prob.y), microbatch_size=B, key=jax.random.PRNGKey(0),
    draws=200, opt_state=state, optimizer=adam,
)
print(f"phi = {est.phi:.1f} +- {est.stderr:.1f} (exact {est.exact_phi:.1f})")

# %% [markdown]
# On CPU, the stacking axis of each leaf matters for speed (a narrow weight matrix's
# per-micro-batch gradients are much faster with the micro-batch axis last);
# `microbatch_axes` picks it per leaf, and the same tree goes to `vmap` and to
# `reduce_microbatches`. Same statistics:

# %%
axes = px.microbatch_axes(params)
xb, yb = examples.sample_microbatches(jax.random.PRNGKey(0), prob.x, prob.y, K, B)
g_first = jax.vmap(jax.grad(prob.loss), (None, 0, 0))(params, xb, yb)  # [K, ...]
g_last = jax.vmap(jax.grad(prob.loss), (None, 0, 0), out_axes=-1)(params, xb, yb)  # [..., K]
print(px.microbatch_stats(g_first, B, P), px.microbatch_stats(g_last, B, P, microbatch_axis=-1))
g_axes, m_axes = px.reduce_microbatches(
    px.microbatch_grads(prob.loss, params, xb, yb, microbatch_axis=axes), microbatch_axis=axes
)
_ = opt.update(g_axes, opt.init(params), params, microbatch_moments=m_axes)

# %% [markdown]
# Optimizers whose update is not a diagonal pre-conditioning of the gradient are refused
# with a clear error (and `preconditioner="identity"` falls back to the plain GNS):

# %%
try:
    px.with_pgns(optax.lion(1e-3)).init(prob.params)
except ValueError as e:
    print("ValueError:", str(e)[:110], "...")

# %% [markdown]
# ## 2. Efficiency and goodput
# `EFFICIENCY(M) = (phi + M0) / (phi + M)` (Eq 3.3): the fraction of each example's
# progress kept when the batch grows from `M0` to `M`.

# %%
M0 = 32
Ms = jnp.array([32, 64, 128, 256, 512, 1024])
print(np.round(np.asarray(px.efficiency(Ms, phi, M0)), 3))

# %% [markdown]
# ## 3. Throughput model and its fit
# Eq 3.8: `T_iter = s T_grad(m) + (T_grad^g + T_sync^g)^(1/g)`. We generate noisy step
# times from known parameters over a few placements and re-fit them (L-BFGS-B on the
# RMSLE with `jax.grad`, bounds alpha, beta >= 0, gamma in [1, 10]).

# %%
true = examples.CPU_THROUGHPUT  # the example CPU-like device (scarjax.pollux.examples)
cfg = [
    (n, k, m, s) for n, k in [(1, 1), (1, 2), (1, 4), (2, 4), (2, 8)] for m in (16, 64, 256) for s in (0, 1)
]
n, k, m, s = (np.array(c, float) for c in zip(*cfg))
rng = np.random.default_rng(0)
t_obs = np.asarray(px.t_iter(true, n, k, m, s)) * np.exp(0.03 * rng.standard_normal(n.size))
fit = px.fit_throughput(n, k, m, s, t_obs)
print(f"RMSLE {fit.rmsle:.3f}, mean rel. error {100 * fit.mean_rel_error:.1f}%")
print({f: round(v, 5) for f, v in fit.params._asdict().items()})

# %% [markdown]
# Priors of Sec 3.4.1: parameters that the data cannot reveal yet are pinned so that the
# model is optimistic about scaling out (here only single-device data):

# %%
one = px.fit_throughput(
    np.ones(3),
    np.ones(3),
    [16, 64, 256],
    np.zeros(3),
    np.asarray(px.t_iter(true, 1, 1, jnp.array([16, 64, 256]), 0)),
)
print("pinned:", one.pinned)

# %% [markdown]
# ## 4. Goodput-optimal batch size (Eq 3.10), LR scaling and the agent
# Exact search over per-device batch `m` (memory cap 128) and accumulation steps `s`,
# vectorised over allocations: for each `s` a binary search over `m`, exact because goodput
# is unimodal in `m` (`-log GOODPUT` is convex in `log m`; theory/pollux_tuning.md):

# %%
best = px.optimize_batch_size(
    fit.params,
    phi,
    M0,
    nodes=jnp.array([1, 1, 2]),
    replicas=jnp.array([1, 4, 8]),
    max_batch_size=2048,
    max_local_bsz=128,
)
for i in range(3):
    print(
        f"K={[1, 4, 8][i]}: m*={int(best.local_bsz[i])}, s*={int(best.accum_steps[i])}, "
        f"M={int(best.total_batch_size[i])}, efficiency={float(best.efficiency[i]):.2f}"
    )
print("AdaScale gain at M=256:", float(px.lr_scale("adascale", 256, M0, phi=phi)))

# %% [markdown]
# The job-level agent (Sec 3.4.1) measures (here: simulates with `true`) step times,
# re-fits, re-tunes every 40 steps, and reports progress in statistical epochs.

# %%
agent_cfg = px.AgentConfig(
    base_batch_size=M0, max_batch_size=1024, max_local_bsz=128, replicas=4, retune_every=40, local_bsz_step=16
)
res = {}
for label, retune in (("fixed", 0), ("adaptive", 40)):
    agent_cfg.retune_every = retune
    opt = optax.chain(px.with_pgns(optax.sgd(4.0)), px.scale_by_lr_rule("adascale", M0))
    h = px.train_adaptive(
        prob.loss,
        prob.params,
        opt,
        (prob.x, prob.y),
        agent_cfg,
        jax.random.PRNGKey(0),
        time_budget=1.0,
        clock=true,
    )
    res[label] = h
    print(
        f"{label:8s}: loss {h['eval'][-1]:.3f} after 1 s, "
        f"{h['stat_epochs'][-1]:.1f} statistical epochs, final M={h['batch_size'][-1]}"
    )
