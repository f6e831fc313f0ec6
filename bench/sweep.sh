#!/usr/bin/env bash
# hvtrain sweep against the ways a user runs the same search today, on this machine, one after
# the other: the search of bench/sweep-fashion.toml (16 trials of Fashion-MNIST MLPs: width
# 32-256 log, depth 1-3, Adam lr 1e-4-1e-2 log, batch 64/128/256; validation_loss on the last
# 10 % of the training rows; at most 9 epochs, ASHA with eta 3: rungs 1, 3, 9).
#
#   1. hvtrain sweep, mpirun -n 2 (two trials at a time, one rank and one core each);
#   2. a loop of one `mpirun -n 2 hvtrain train` per trial (the same 16 trials' values and
#      global batches, every epoch: what a user without a sweep tool does);
#   3. Optuna (SuccessiveHalvingPruner = ASHA) + PyTorch, one process on 2 threads: once with
#      hvtrain's 16 trials enqueued (the same values), once with its RandomSampler's own;
#   4. KerasTuner Hyperband (max_epochs 9, factor 3: its own trial count) + Keras, 2 threads.
#
#   bash bench/sweep.sh            # writes bench/results/sweep-DATE.{md,json}
#   PEERS="optuna" bash bench/sweep.sh   # a subset of: loop optuna kerastuner (default all)
#   TASK=surrogate bash bench/sweep.sh   # the regression search (bench/sweep-surrogate.toml,
#                                        # val_rmse; loop and Optuna: sweep-surrogate-DATE.*)
# The peers' venvs: bench/setup_torch.sh + optuna, bench/setup_peer.sh + keras-tuner (done here).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
TASK=${TASK:-fashion}
case $TASK in
  fashion) JOB=bench/sweep-fashion.toml; METRIC=val_loss; EPOCHS=9; PEERS=${PEERS:-"loop optuna kerastuner"}; tag=sweep ;;
  surrogate) JOB=bench/sweep-surrogate.toml; METRIC=val_rmse; EPOCHS=27; PEERS=${PEERS:-"loop optuna"}; tag=sweep-surrogate
    [ -f data/surrogate-train.h5 ] || { bash bench/setup_torch.sh >&2; bench/.venv-torch/bin/python -c "import sklearn" 2>/dev/null || bench/.venv-torch/bin/pip install -q scikit-learn; bench/.venv-torch/bin/python bench/make_surrogate.py data; } ;;
  *) echo "TASK must be fashion or surrogate" >&2; exit 2 ;;
esac
export METRIC
date=$(date -u +%Y-%m-%d)
out=${OUT:-bench/results/$tag-$date}
mpi=(mpirun -n 2 --oversubscribe --bind-to none)

results=()
add() { results+=("$1"); echo "$1" >&2; }

# 1. hvtrain sweep.
rm -rf "$work/sweep"
t0=$(date +%s.%N)
"${mpi[@]}" "$BIN" sweep "$JOB" --set "output.dir=\"$work/sweep\"" 2> "$work/sweep.log"
t1=$(date +%s.%N)
add "$(python3 - "$work/sweep" "$work/sweep.log" "$t0" "$t1" <<'PY'
import json, sys, re, datetime
d, logf, t0, t1 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
recs = [json.loads(l) for l in open(d + "/sweep.jsonl")]
best = json.load(open(d + "/best.json"))
# When the best trial reported its last value: the log line's time, from the launch.
t_best = None
for l in open(logf):
    m = re.match(r"\[(\S+)Z INFO rank 0\] sweep: trial (\d+) (paused|completed) ", l)
    if m and int(m.group(2)) == best["trial"]:
        t_best = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp() - t0
last = [json.loads(l) for l in open(best["dir"] + "/metrics.jsonl")][-1]
print(json.dumps({"tool": "hvtrain sweep (mpirun -n 2, ASHA)", "wall_s": t1 - t0, "time_to_best_s": t_best,
    "best_val_loss": best["metric"], "best_epochs": best["epochs"], "best_test_accuracy": last.get("test_accuracy", last.get("test_rmse")),
    "best_params": best["params"], "trials": len(recs), "epochs_trained": sum(r["epochs"] for r in recs)}))
PY
)"

# 2. One mpirun per trial, every epoch, the same trials' values.
if [[ " $PEERS " == *" loop "* ]]; then
  t0=$(date +%s.%N)
  python3 -c "
import json
ends = {'fashion': (784, 10), 'surrogate': (10, 1)}['$TASK']
for l in open('$work/sweep/sweep.jsonl'):
    r = json.loads(l); p = r['params']
    layers = [ends[0]] + [p['model.width']] * p['model.depth'] + [ends[1]]
    # Two ranks of half the batch each: the trial's global batch, so the same training as its sweep trial.
    print(r['trial'], 'optimizer.lr=%r' % p['optimizer.lr'], 'training.batch_size=%d' % (p['training.batch_size'] // 2), 'model.layers=%s' % layers.__repr__().replace(' ', ''))
" > "$work/loop.txt"
  while read -r n lr batch layers; do
    "${mpi[@]}" "$BIN" train "$JOB" --set "$lr" --set "$batch" --set "$layers" --set "output.dir=\"$work/loop/$n\"" 2> "$work/loop-$n.log" < /dev/null
  done < "$work/loop.txt"
  t1=$(date +%s.%N)
  add "$(python3 - "$work/loop" "$t0" "$t1" <<'PY'
import json, os, sys
d, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
metric = os.environ["METRIC"]
runs = {n: [json.loads(l) for l in open(f"{d}/{n}/metrics.jsonl")] for n in os.listdir(d)}
best = min(runs, key=lambda n: runs[n][-1][metric])
# Runs one after the other: the best is known when the last run ends.
print(json.dumps({"tool": "one mpirun -n 2 hvtrain train per trial (every epoch)", "wall_s": t1 - t0, "time_to_best_s": t1 - t0,
    "best_val_loss": runs[best][-1][metric], "best_epochs": len(runs[best]), "best_test_accuracy": runs[best][-1].get("test_accuracy", runs[best][-1].get("test_rmse")),
    "best_params": {"trial": int(best)}, "trials": len(runs), "epochs_trained": sum(len(r) for r in runs.values())}))
PY
)"
fi

# 3. Optuna + PyTorch.
if [[ " $PEERS " == *" optuna "* ]]; then
  bash bench/setup_torch.sh >&2
  bench/.venv-torch/bin/python -c "import optuna" 2>/dev/null || bench/.venv-torch/bin/pip install -q optuna==4.6.0
  # The same 16 trials as hvtrain's (the frameworks compared), then Optuna's own draws.
  add "$(bench/.venv-torch/bin/python bench/sweep_optuna.py --task "$TASK" --max-epochs $EPOCHS --threads 2 --enqueue "$work/sweep/sweep.jsonl" | sed -n 's/^PEER_RESULT //p')"
  add "$(bench/.venv-torch/bin/python bench/sweep_optuna.py --task "$TASK" --max-epochs $EPOCHS --threads 2 | sed -n 's/^PEER_RESULT //p')"
fi

# 4. KerasTuner Hyperband.
if [[ " $PEERS " == *" kerastuner "* ]]; then
  bash bench/setup_peer.sh >&2
  bench/.venv/bin/python -c "import keras_tuner, tensorboard" 2>/dev/null || bench/.venv/bin/pip install -q keras-tuner==1.4.7 tensorboard
  add "$(bench/.venv/bin/python bench/sweep_kerastuner.py --threads 2 | sed -n 's/^PEER_RESULT //p')"
fi

printf '%s\n' "${results[@]}" > "$out.json"
python3 - "$out.json" "$out.md" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$JOB" <<'PY'
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
hv = rows[0]
metric, job = os.environ["METRIC"], sys.argv[5]
test = "test accuracy" if metric == "val_loss" else "test RMSE"
with open(sys.argv[2], "w") as f:
    f.write(f"# hvtrain sweep against the peers ({job})\n\n")
    f.write(f"`TASK={os.environ.get('TASK', 'fashion')} bash bench/sweep.sh` on {sys.argv[3]} cores ({sys.argv[4]}); the search: {job} "
            f"(16 trials, ASHA eta 3, ranked by {metric} on the last 10 % of the training rows). One run each, one after the other.\n\n")
    f.write(f"| tool | wall s | time to best s | best {metric} | its epochs | its {test} | trials | epochs trained | its wall / hvtrain's |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    for r in rows:
        acc = r.get("best_test_accuracy", r.get("best_test_rmse"))
        f.write(f"| {r['tool']} | {r['wall_s']:.1f} | {r['time_to_best_s']:.1f} | {r['best_val_loss']:.4f} | {r.get('best_epochs', '-')} | "
                f"{acc:.4f} | {r['trials']} | {r['epochs_trained']} | {r['wall_s'] / hv['wall_s']:.2f} |\n" if acc is not None else
                f"| {r['tool']} | {r['wall_s']:.1f} | {r['time_to_best_s']:.1f} | {r['best_val_loss']:.4f} | {r.get('best_epochs', '-')} | - | {r['trials']} | {r['epochs_trained']} | {r['wall_s'] / hv['wall_s']:.2f} |\n")
    f.write("\n`time to best`: when the trial that ends best reported its last value (hvtrain: its rung line in the log; "
            f"the loop: its end, as the runs go one after the other). `best {metric}`: the lowest of the trials' last values "
            "(KerasTuner: its own score, the best epoch's; RMSE in the targets' units). hvtrain's trials train on one rank each, two at a time; the loop "
            "runs each trial on both ranks with half the batch per rank (the same global batch).\n")
    f.write("\nBest values per tool:\n\n")
    for r in rows:
        f.write(f"- {r['tool']}: {json.dumps(r['best_params'])}\n")
print(open(sys.argv[2]).read())
PY
