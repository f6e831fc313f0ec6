#!/usr/bin/env python3
"""Optuna + PyTorch peer of `hvtrain sweep` (bench/sweep.sh): the search of
bench/sweep-fashion.toml (--task fashion: val_loss) or bench/sweep-surrogate.toml (--task
surrogate: features and targets standardized from the training rows, MSE, ranked by the
validation RMSE in the targets' units) as an Optuna user writes it. One process (torch on --threads
threads), a study of --trials trials with the RandomSampler and ASHA
(SuccessiveHalvingPruner: min_resource 1, reduction_factor eta), each trial an MLP of `depth`
hidden Linear+ReLU layers of `width` units trained with Adam at `lr` and `batch_size`, the
validation loss reported after every epoch. Validation rows: the last 10 % of the training file,
as hvtrain's data.validation_split = 0.1.

Prints PEER_RESULT {json}: wall_s (study start to end), time_to_best_s (when the trial that ends
best reported its last value), best val_loss (the last value of each trial, the lowest), the
best trial's values and test accuracy, epochs trained in all, trials pruned.
"""
import argparse
import json
import os
import time

import h5py
import numpy as np
import optuna
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
ap.add_argument("--task", choices=["fashion", "surrogate"], default="fashion")
ap.add_argument("--trials", type=int, default=16)
ap.add_argument("--max-epochs", type=int, default=9)
ap.add_argument("--eta", type=int, default=3)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--enqueue", help="a sweep.jsonl: run exactly those trials' values, in trial order (study.enqueue_trial)")
args = ap.parse_args()
torch.set_num_threads(args.threads)
optuna.logging.set_verbosity(optuna.logging.WARNING)

TASK = {
    # (files, space: width range, batch choices; the metric's name)
    "fashion": ("fashion-mnist", (32, 256), [64, 128, 256], "val_loss"),
    "surrogate": ("surrogate", (16, 256), [32, 64, 128], "val_rmse"),
}[args.task]
with h5py.File(os.path.join(args.data_dir, f"{TASK[0]}-train.h5")) as f:
    x, y = f["x"][:], f["y"][:]
with h5py.File(os.path.join(args.data_dir, f"{TASK[0]}-test.h5")) as f:
    xt, yt = f["x"][:], f["y"][:]
n_val = int(round(len(x) * 0.1))
regression = args.task == "surrogate"
if regression:
    # Statistics of the training rows (the validation rows left out), as hvtrain's normalize.
    mx, sx = x[:-n_val].astype(np.float64).mean(0), x[:-n_val].astype(np.float64).std(0)
    my, sy = float(y[:-n_val].mean()), float(y[:-n_val].std())
    x, xt = ((x - mx) / sx).astype(np.float32), ((xt - mx) / sx).astype(np.float32)
    y, yt = ((y - my) / sy).astype(np.float32), ((yt - my) / sy).astype(np.float32)
    outputs, loss_fn = 1, torch.nn.functional.mse_loss
else:
    y, yt = y.astype(np.int64), yt.astype(np.int64)
    outputs, loss_fn = 10, torch.nn.functional.cross_entropy
x, y, xt, yt = map(torch.from_numpy, (x, y, xt, yt))
xtr, ytr, xv, yv = x[:-n_val], y[:-n_val], x[-n_val:], y[-n_val:]

t0 = time.time()
log = []  # (time, trial, epoch, val_loss)
results = {}


def evaluate(model, xs, ys):
    """(the metric: val_loss, or RMSE in the targets' units; test accuracy, or RMSE)."""
    with torch.no_grad():
        out = model(xs)
        if regression:
            rmse = ((out - ys) ** 2).mean().sqrt().item() * sy
            return rmse, rmse
        return loss_fn(out, ys).item(), (out.argmax(1) == ys).float().mean().item()


def objective(trial):
    width = trial.suggest_int("model.width", *TASK[1], log=True)
    depth = trial.suggest_int("model.depth", 1, 3)
    lr = trial.suggest_float("optimizer.lr", 1e-4, 1e-2, log=True)
    batch = trial.suggest_categorical("training.batch_size", TASK[2])
    torch.manual_seed(42 + trial.number)
    layers, d = [], x.shape[1]
    for _ in range(depth):
        layers += [torch.nn.Linear(d, width), torch.nn.ReLU()]
        d = width
    model = torch.nn.Sequential(*layers, torch.nn.Linear(d, outputs))
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(trial.number)
    for epoch in range(1, args.max_epochs + 1):
        model.train()
        perm = torch.randperm(len(xtr), generator=g)
        for i in range(0, len(xtr), batch):
            idx = perm[i : i + batch]
            opt.zero_grad()
            loss_fn(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
        model.eval()
        val, _ = evaluate(model, xv, yv)
        log.append((time.time() - t0, trial.number, epoch, val))
        results[trial.number] = {"val_loss": val, "epochs": epoch, "test_accuracy": evaluate(model, xt, yt)[1], "params": dict(trial.params)}
        trial.report(val, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return val


study = optuna.create_study(
    direction="minimize",
    sampler=optuna.samplers.RandomSampler(seed=args.seed),
    pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=args.eta),
)
if args.enqueue:
    for line in open(args.enqueue):
        r = json.loads(line)
        study.enqueue_trial({k: r["params"][k] for k in ["model.width", "model.depth", "optimizer.lr", "training.batch_size"]})
study.optimize(objective, n_trials=args.trials)
wall = time.time() - t0
best_n = min(results, key=lambda k: results[k]["val_loss"])
best = results[best_n]
t_best = max(t for t, n, e, v in log if n == best_n)
pruned = sum(1 for t in study.trials if t.state == optuna.trial.TrialState.PRUNED)
print("PEER_RESULT " + json.dumps({
    "tool": f"optuna {optuna.__version__} + torch {torch.__version__} (ASHA pruner, " + ("hvtrain's 16 trials enqueued" if args.enqueue else "random sampler") + ")",
    "wall_s": wall, "time_to_best_s": t_best, "best_val_loss": best["val_loss"], "best_epochs": best["epochs"],
    "metric": TASK[3], ("best_test_rmse" if regression else "best_test_accuracy"): best["test_accuracy"], "best_params": best["params"], "trials": len(study.trials),
    "pruned": pruned, "epochs_trained": len(log),
}))
