#!/usr/bin/env bash
# The regression search of bench/sweep.sh (bench/sweep-surrogate.toml) drawn with several seeds:
# hvtrain sweep (its random sampler, mpirun -n 2) against Optuna + PyTorch (its RandomSampler,
# ASHA pruner), each seed's best val_rmse and wall time, and the medians: one seed's best trial
# is luck of the draw; the median over seeds compares the searches. hvtrain runs the 16 trials,
# and again with MORE (64) trials: what it finds in a fraction of Optuna's time.
#   bash bench/sweep_seeds.sh            # SEEDS="1 2 3 4 5"; writes bench/results/sweep-seeds-DATE.md
set -euo pipefail
source "$(dirname "$0")/lib.sh"
SEEDS=${SEEDS:-"1 2 3 4 5"}
MORE=${MORE:-64}
JOB=bench/sweep-surrogate.toml
bash bench/setup_torch.sh >&2
[ -f data/surrogate-train.h5 ] || { bench/.venv-torch/bin/python -c "import sklearn" 2>/dev/null || bench/.venv-torch/bin/pip install -q scikit-learn; bench/.venv-torch/bin/python bench/make_surrogate.py data; }
bench/.venv-torch/bin/python -c "import optuna" 2>/dev/null || bench/.venv-torch/bin/pip install -q optuna==4.6.0
out=bench/results/sweep-seeds-$(date -u +%Y-%m-%d)
: > "$work/rows"
for s in $SEEDS; do
  t0=$(date +%s.%N)
  mpirun -n 2 --oversubscribe --bind-to none "$BIN" sweep "$JOB" --set "sweep.seed=$s" --set "output.dir=\"$work/s$s\"" 2> "$work/s$s.log"
  t1=$(date +%s.%N)
  hv=$(python3 -c "import json; b = json.load(open('$work/s$s/best.json')); print(b['metric'])")
  t2=$(date +%s.%N)
  mpirun -n 2 --oversubscribe --bind-to none "$BIN" sweep "$JOB" --set "sweep.seed=$s" --set "sweep.trials=$MORE" --set "output.dir=\"$work/m$s\"" 2> "$work/m$s.log"
  t3=$(date +%s.%N)
  more=$(python3 -c "import json; b = json.load(open('$work/m$s/best.json')); print(b['metric'])")
  op=$(bench/.venv-torch/bin/python bench/sweep_optuna.py --task surrogate --max-epochs 27 --seed "$s" --threads 2 | sed -n 's/^PEER_RESULT //p')
  echo "$s $(python3 -c "print($t1 - $t0)") $hv $(python3 -c "print($t3 - $t2)") $more $op" >> "$work/rows"
  echo "seed $s: hvtrain $hv" >&2
done
python3 - "$work/rows" "$out.md" "$MORE" <<'PY'
import json, statistics, sys
rows = []
for l in open(sys.argv[1]):
    s, wall, hv, wall_m, hv_m, op = l.split(" ", 5)
    op = json.loads(op)
    rows.append((int(s), float(wall), float(hv), float(wall_m), float(hv_m), op["wall_s"], op["best_val_loss"]))
more = sys.argv[3]
with open(sys.argv[2], "w") as f:
    f.write("# The regression sweep over seeds: hvtrain sweep against Optuna + PyTorch\n\n")
    f.write("`bash bench/sweep_seeds.sh`: bench/sweep-surrogate.toml (16 trials, ASHA eta 3, at most 27 epochs, "
            "val_rmse in the targets' units), each tool drawing its own trials with the seed; hvtrain on "
            "`mpirun -n 2` (two trials at a time), Optuna one process on 2 threads.\n\n")
    f.write(f"| seed | hvtrain 16 trials: wall s | best val_rmse | hvtrain {more} trials: wall s | best val_rmse | Optuna 16 trials: wall s | best val_rmse |\n|---:|---:|---:|---:|---:|---:|---:|\n")
    for r in rows:
        f.write(f"| {r[0]} | {r[1]:.1f} | {r[2]:.4f} | {r[3]:.1f} | {r[4]:.4f} | {r[5]:.1f} | {r[6]:.4f} |\n")
    med = lambda i: statistics.median(r[i] for r in rows)
    f.write(f"| median | {med(1):.1f} | {med(2):.4f} | {med(3):.1f} | {med(4):.4f} | {med(5):.1f} | {med(6):.4f} |\n")
print(open(sys.argv[2]).read())
PY
