"""Runs inside the separate AdaptDL virtualenv (old NumPy): times AdaptDL's
fit_perf_params and GoodputFunction.optimize on data given as JSON on stdin, and
optionally its PyTorch PGNS path on CPU.  Prints one JSON object."""

import json
import sys
import time
import traceback

import numpy as np


def main():
    req = json.load(sys.stdin)
    from adaptdl import goodput

    out = {"numpy": np.__version__}
    d = req["fit_data"]
    args = [np.asarray(d[k]) for k in ("nodes", "replicas", "local_bsz", "t_accum", "t_optim")]
    times = []
    for _ in range(req.get("repeats", 5)):
        t0 = time.perf_counter()
        params = goodput.fit_perf_params(*args)
        times.append(time.perf_counter() - t0)
    out["fit_seconds"] = times
    out["fit_params"] = list(map(float, params))
    q = req["predict"]
    gf = goodput.GoodputFunction(params, (1.0, 0.0), 1)
    thr = gf.throughput(
        np.asarray(q["nodes"]),
        np.asarray(q["replicas"]),
        np.asarray(q["local_bsz"]),
        np.asarray(q["accum_steps"]),
    )
    tot = np.asarray(q["replicas"]) * np.asarray(q["local_bsz"]) * (np.asarray(q["accum_steps"]) + 1)
    out["pred_t_iter"] = (tot / thr).tolist()

    o = req["optimize"]
    gf = goodput.GoodputFunction(o["perf_params"], (o["sqr"], o["var"]), o["init_batch_size"])

    def timed_optimize(nodes, reps, repeats):
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            res = gf.optimize(
                np.asarray(nodes),
                np.asarray(reps),
                max_batch_size=o["max_batch_size"],
                atomic_bsz_range=(1, o["max_local_bsz"]),
                accumulation=True,
            )
            times.append(time.perf_counter() - t0)
        return times, res

    out["optimize_seconds"], res = timed_optimize(o["nodes"], o["replicas"], o.get("repeats", req.get("repeats", 5)))
    out["optimize"] = {
        "goodput": np.asarray(res[0]).tolist(),
        "local_bsz": np.asarray(res[1]).tolist(),
        "accum_steps": np.asarray(res[2]).tolist(),
    }
    if "large_nodes" in o:  # the scale at which a cluster scheduler calls it
        out["optimize_large_seconds"], res = timed_optimize(
            o["large_nodes"], o["large_replicas"], o.get("large_repeats", 5)
        )
        out["optimize_large"] = {
            "local_bsz": np.asarray(res[1]).tolist(),
            "accum_steps": np.asarray(res[2]).tolist(),
        }
    if req.get("torch_pgns"):
        try:
            out["torch_pgns"] = torch_pgns(req["torch_pgns"])
        except Exception as e:  # noqa: BLE001 - report exactly why it could not run
            out["torch_pgns_error"] = f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"
    print("@@" + json.dumps(out))


def torch_pgns(cfg):
    """AdaptDL's GradientNoiseScale on one CPU process: per-step overhead vs plain torch."""
    import os
    import torch

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    os.environ.setdefault("ADAPTDL_NUM_REPLICAS", "1")
    os.environ.setdefault("ADAPTDL_REPLICA_RANK", "0")
    os.environ.setdefault("ADAPTDL_NUM_NODES", "1")
    import adaptdl.torch as adl

    torch.set_num_threads(cfg.get("threads", 1))
    adl.init_process_group("gloo")
    n = cfg["batch"] * (cfg["steps"] + 5)
    data = torch.utils.data.TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))

    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 10)
        return model, torch.optim.SGD(model.parameters(), lr=0.1)

    def time_epoch(model, opt, loader):
        ts = []
        t0 = time.perf_counter()
        for xb, yb in loader:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            t1 = time.perf_counter()
            ts.append(t1 - t0)
            t0 = t1
        return float(np.median(ts[5:])), len(ts)

    model, opt = make()
    plain, n_plain = time_epoch(
        model, opt, torch.utils.data.DataLoader(data, batch_size=cfg["batch"], drop_last=True)
    )
    model, opt = make()
    adp = adl.AdaptiveDataParallel(model, opt)
    loader = adl.AdaptiveDataLoader(data, batch_size=cfg["batch"], drop_last=True)
    with_gns, n_adl = time_epoch(adp, opt, loader)
    return {
        "plain_s": plain,
        "adaptdl_s": with_gns,
        "ratio": with_gns / plain,
        "steps": [n_plain, n_adl],
        "threads": torch.get_num_threads(),
        "gns_sqr": float(adp.gns.sqr_avg()),
        "gns_var": float(adp.gns.var_avg()),
    }


if __name__ == "__main__":
    main()
