#!/usr/bin/env python3
"""Large-batch accuracy table (#30 item 3): Fashion-MNIST test accuracy after the same epochs at
global batch 256, 1024, 4096 and 16384, for SGD (momentum, linearly scaled learning rate),
Adam, LARS and LAMB (and Adasum's sum-and-average replacement when hvtrain has it).

Each (optimizer, batch) cell trains with four learning rates (0.25x, 0.5x, 1x, 2x the
optimizer's scaling rule), picks the one with the best validation accuracy (the last 10 % of the training
rows, Keras' validation_split) and reports that run's test accuracy: no cell is tuned on the
test set. Every run: the fashion-mnist job's model (784-512-512-10), 2 ranks (mpirun), linear
warm-up over the first 2 epochs' steps, then polynomial decay (power 2) to 0, the same for every
optimizer. Training is deterministic (fixed seed, rank-count-independent data order), so the
figures do not depend on the machine's load; the seconds column does.

Usage: python3 bench/batch_table.py [--epochs 10] [--out bench/results/batch-table-DATE]
       [--batches 256,1024] [--optimizers sgd,lamb] [--factors 0.5,1,2]
Writes OUT.md (table, commands, machine), OUT.csv (every run) and OUT.svg (best test accuracy
against global batch, one line per optimizer). Standard library only.
"""
import argparse
import csv
import datetime
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("HVTRAIN_BIN", os.path.join(ROOT, "target/release/hvtrain"))
RANKS = 2
# A copy of the job file taken at start-up (main), so editing the repository meanwhile changes
# nothing in a running table.
JOB = os.path.join(ROOT, "jobs/fashion-mnist.toml")

# Learning rate at global batch B, the scaling rule of each optimizer's large-batch practice.
RULES = {
    # Goyal et al. 2017: linear scaling with warm-up, momentum 0.9.
    "sgd": (lambda b: 0.05 * b / 256, ["optimizer.kind=\"sgd\"", "optimizer.momentum=0.9"]),
    # Square-root scaling, the usual rule for adaptive optimizers.
    "adam": (lambda b: 1e-3 * math.sqrt(b / 256), ["optimizer.kind=\"adam\""]),
    # You et al. 2017 (TensorFlow's LARSOptimizer form): trust 0.001, momentum 0.9, wd 5e-4.
    "lars": (
        lambda b: 2.5 * math.sqrt(b / 256),
        ["optimizer.kind=\"lars\"", "optimizer.momentum=0.9", "optimizer.weight_decay=0.0005"],
    ),
    # You et al. 2019: square-root scaling, weight decay 0.01.
    "lamb": (lambda b: 2e-3 * math.sqrt(b / 256), ["optimizer.kind=\"lamb\"", "optimizer.weight_decay=0.01"]),
    # Adasum (Horovod) in place of the average, on Adam.
    "adam+adasum": (
        lambda b: 1e-3 * math.sqrt(b / 256),
        ["optimizer.kind=\"adam\"", "distribution.reduction=\"adasum\""],
    ),
}


def run(opt, batch, factor, epochs, work):
    rule, sets = RULES[opt]
    lr = rule(batch) * factor
    steps = math.ceil(54000 / batch)
    out = os.path.join(work, f"{opt}-{batch}-{factor}")
    sets = sets + [
        f"optimizer.lr={lr!r}",
        f"training.batch_size={batch // RANKS}",
        f"training.epochs={epochs}",
        f"optimizer.warmup_steps={2 * steps}",
        "optimizer.schedule=\"polynomial\"",
        "optimizer.power=2.0",
        "data.validation_split=0.1",
        f"output.dir=\"{out}\"",
    ]
    cmd = ["mpirun", "-n", str(RANKS), BIN, "train", JOB]
    for s in sets:
        cmd += ["--set", s]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    secs = time.time() - t0
    diverged = p.returncode != 0 and "became NaN" in p.stderr + p.stdout
    if p.returncode != 0 and not diverged:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        raise SystemExit(f"run failed ({p.returncode}): {' '.join(cmd)}")
    if diverged:
        # hvtrain stops a run whose loss becomes NaN (exit 1): recorded, never picked.
        last = {"val_accuracy": float("nan"), "test_accuracy": float("nan"), "train_loss": float("nan")}
    else:
        last = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl")) if l.strip()][-1]
    return {
        "optimizer": opt,
        "batch": batch,
        "factor": factor,
        "lr": lr,
        "val_accuracy": last.get("val_accuracy", float("nan")),
        "test_accuracy": last["test_accuracy"],
        "train_loss": last["train_loss"],
        "seconds": round(secs, 1),
        "command": " ".join(cmd[:4]) + " train jobs/fashion-mnist.toml " + " ".join(f"--set '{s}'" for s in sets if "output.dir" not in s),
    }


def svg(best, batches, opts, path):
    w, h, l, r, t, b = 640, 400, 60, 150, 20, 50
    ok = lambda o, bt: (o, bt) in best and not math.isnan(best[(o, bt)]["test_accuracy"])
    accs = [best[(o, bt)]["test_accuracy"] for o in opts for bt in batches if ok(o, bt)]
    lo, hi = math.floor(min(accs) * 100 - 1) / 100, math.ceil(max(accs) * 100 + 0.5) / 100
    x = lambda i: l + (w - l - r) * (i / max(1, len(batches) - 1))
    y = lambda a: t + (h - t - b) * (1 - (a - lo) / (hi - lo))
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{l}" y1="{h-b}" x2="{w-r}" y2="{h-b}" stroke="black"/>',
           f'<line x1="{l}" y1="{t}" x2="{l}" y2="{h-b}" stroke="black"/>',
           f'<text x="{(l+w-r)/2}" y="{h-12}" text-anchor="middle">global batch (Fashion-MNIST, equal epochs)</text>',
           f'<text x="14" y="{(t+h-b)/2}" transform="rotate(-90 14 {(t+h-b)/2})" text-anchor="middle">test accuracy</text>']
    for i, bt in enumerate(batches):
        out.append(f'<text x="{x(i)}" y="{h-b+16}" text-anchor="middle">{bt}</text>')
    steps = 5
    for k in range(steps + 1):
        a = lo + (hi - lo) * k / steps
        out.append(f'<text x="{l-6}" y="{y(a)+4}" text-anchor="end">{a:.3f}</text>')
        out.append(f'<line x1="{l}" y1="{y(a)}" x2="{w-r}" y2="{y(a)}" stroke="#ddd"/>')
    for j, o in enumerate(opts):
        pts = [(x(i), y(best[(o, bt)]["test_accuracy"])) for i, bt in enumerate(batches) if ok(o, bt)]
        c = colors[j % len(colors)]
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{" ".join(f"{px:.1f},{py:.1f}" for px, py in pts)}"/>')
        for px, py in pts:
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{c}"/>')
        out.append(f'<text x="{w-r+10}" y="{t+16+18*j}" fill="{c}">{o}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batches", default="256,1024,4096,16384")
    ap.add_argument("--optimizers", default="sgd,adam,lars,lamb,adam+adasum")
    ap.add_argument("--factors", default="0.25,0.5,1,2")
    ap.add_argument("--out", default=os.path.join(ROOT, f"bench/results/batch-table-{datetime.date.today()}"))
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    opts = a.optimizers.split(",")
    factors = [float(f) for f in a.factors.split(",")]
    rows, best = [], {}
    # Rows already in OUT.csv (an interrupted table) are kept, not rerun: training is
    # deterministic, so a rerun would give the same figures.
    done = {}
    if os.path.exists(a.out + ".csv"):
        for r in csv.DictReader(open(a.out + ".csv")):
            for k in ("batch",):
                r[k] = int(r[k])
            for k in ("factor", "lr", "val_accuracy", "test_accuracy", "train_loss", "seconds"):
                r[k] = float(r[k])
            done[(r["optimizer"], r["batch"], r["factor"])] = r
    with tempfile.TemporaryDirectory() as work:
        global JOB
        JOB = os.path.join(work, "job.toml")
        with open(os.path.join(ROOT, "jobs/fashion-mnist.toml")) as src, open(JOB, "w") as dst:
            dst.write(src.read())
        for o in opts:
            for bt in batches:
                for f in factors:
                    row = done.get((o, bt, f)) or run(o, bt, f, a.epochs, work)
                    rows.append(row)
                    done[(o, bt, f)] = row
                    with open(a.out + ".csv", "w", newline="") as fh:
                        wr = csv.DictWriter(fh, fieldnames=list(row.keys()))
                        wr.writeheader()
                        wr.writerows(done.values())
                    print(f"{o:12} batch {bt:6} lr {row['lr']:.5g}: val {row['val_accuracy']:.4f} "
                          f"test {row['test_accuracy']:.4f} ({row['seconds']} s)", flush=True)
                    k = (o, bt)
                    if k not in best or not row["val_accuracy"] <= best[k]["val_accuracy"] and not math.isnan(row["val_accuracy"]):
                        best[k] = row
    svg(best, batches, opts, a.out + ".svg")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    md = [f"# Large-batch accuracy, Fashion-MNIST, {a.epochs} epochs ({datetime.date.today()})", "",
          f"Machine: {platform.node()}, {cpu}, {os.cpu_count()} CPUs; {RANKS} ranks (Open MPI), CPU backend.",
          f"Command: `python3 bench/batch_table.py --epochs {a.epochs} --batches {a.batches} --optimizers {a.optimizers} --factors {a.factors}`",
          "", f"Test accuracy of the learning rate (of {a.factors} x the rule) with the best validation accuracy "
          "(last 10 % of the training rows); the lr picked in brackets. Training is deterministic: rerunning gives the same figures.",
          "", "| optimizer | " + " | ".join(f"batch {b}" for b in batches) + " |",
          "|---|" + "---:|" * len(batches)]
    for o in opts:
        md.append(f"| {o} | " + " | ".join(
            f"{best[(o, b)]['test_accuracy']:.4f} ({best[(o, b)]['lr']:.3g})" for b in batches) + " |")
    acc = lambda r: -1.0 if math.isnan(r["test_accuracy"]) else r["test_accuracy"]
    ref = max(acc(best[(o, batches[0])]) for o in opts)
    md += ["", f"Best at batch {batches[0]}: {ref:.4f}."]
    for b in batches[1:]:
        o = max(opts, key=lambda o: acc(best[(o, b)]))
        md.append(f"Best at batch {b}: {o} {best[(o, b)]['test_accuracy']:.4f} "
                  f"({(best[(o, b)]['test_accuracy'] - ref) * 100:+.2f} points against batch {batches[0]}'s best).")
    nan = sum(1 for r in rows if math.isnan(r["val_accuracy"]))
    md.append(f"{nan} of {len(rows)} runs diverged (the loss became NaN; hvtrain stopped them): nan in the .csv.")
    md += ["", "Every run (val, test accuracy, seconds) is in the .csv beside this file; the plot is the .svg.",
           "", "Settings of each run: " + "; ".join(f"{o}: lr rule {RULES[o][0](256):.3g} at 256, "
                                                    + ", ".join(RULES[o][1]) for o in opts)]
    open(a.out + ".md", "w").write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
