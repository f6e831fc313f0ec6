#!/usr/bin/env bash
# hvtrain's ROC AUC and average precision against Keras' AUC metrics and scikit-learn's exact
# figures, on Fashion-MNIST's 10,000 test rows (10 classes, one vs rest, macro): the job's
# model trained by hvtrain for EPOCHS epochs on 2 ranks; then
#   mpirun -n 2 hvtrain eval jobs/fashion-mnist.toml --weights W --curves c.csv  (REPEAT times)
#   hvtrain predict ... --output p.h5                         (probabilities for scikit-learn)
#   python bench/peer_keras_auc.py W test.h5 p.h5   (Keras evaluate with AUC() and AUC(curve="PR"),
#            200 thresholds; scikit-learn's roc_auc_score / average_precision_score)
# and writes the figures side by side, with eval's wall seconds, to OUT.md.
#
#   [EPOCHS=2] [REPEAT=3] bash bench/auc.sh [OUT.md]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-bench/results/auc-$(date +%F).md}
EPOCHS=${EPOCHS:-2}
REPEAT=${REPEAT:-3}
PEER=bench/.venv/bin/python
"$PEER" -c "import keras, sklearn" 2>/dev/null || { echo "needs the Keras peer with scikit-learn: bash bench/setup_peer.sh" >&2; exit 1; }
JOB=jobs/fashion-mnist.toml
mpirun -n 2 "$BIN" train "$JOB" --set training.epochs="$EPOCHS" --set output.dir="\"$work/run\"" > "$work/train.log" 2>&1
W=$work/run/weights.h5
for _ in $(seq "$REPEAT"); do
  measure eval mpirun -n 2 "$BIN" eval "$JOB" --weights "$W" --curves "$work/c.csv"
done
"$BIN" predict "$JOB" --weights "$W" --input data/fashion-mnist-test.h5 --output "$work/p.h5" > "$work/predict.log" 2>&1
"$PEER" bench/peer_keras_auc.py "$W" data/fashion-mnist-test.h5 "$work/p.h5" 2>/dev/null | tail -1 > "$work/peer.json"
/usr/bin/python3 - "$work" "$OUT" "$EPOCHS" "$REPEAT" "$(nproc)" "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
  "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
w, out, epochs, repeat, cores, cpu, commit = sys.argv[1:8]
j = json.loads(open(f"{w}/eval.log").read().strip().splitlines()[-1])
peer = json.loads(open(f"{w}/peer.json").read())
secs = [float(l.split()[0]) for l in open(f"{w}/eval")]
points = sum(1 for _ in open(f"{w}/c.csv")) - 1
ha, hp = j["test_auc"], j["test_average_precision"]
sa, sp = peer["sklearn_auc"], peer["sklearn_ap"]
ka, kp = peer["keras_auc"], peer["keras_pr_auc"]
rows = [
    ("hvtrain eval (16,384 log-odds bins, summed over 2 ranks)", ha, hp),
    ("Keras AUC() / AUC(curve=\"PR\") (200 thresholds), same weights", ka, kp),
    ("scikit-learn, exact, on hvtrain predict's probabilities", sa, sp),
    ("scikit-learn, exact, on Keras' probabilities", peer["sklearn_auc_keras_probs"], peer["sklearn_ap_keras_probs"]),
]
with open(out, "w") as f:
    f.write(f"""# ROC AUC and average precision: hvtrain against Keras' AUC metrics and scikit-learn

- command: `EPOCHS={epochs} REPEAT={repeat} bash bench/auc.sh`
- machine: {cpu}, {cores} cores; hvtrain commit {commit}; {peer["versions"]}
- data: Fashion-MNIST's 10,000 test rows, the job's 784-512-512-10 model after {epochs} epoch(s) of
  hvtrain on 2 ranks (test_accuracy {j["test_accuracy"]:.4}); 10 classes, each against the rest,
  the mean over the classes (scikit-learn's `multi_class="ovr"`, `average="macro"`; Keras'
  `multi_label=True` on one-hot labels)

| | ROC AUC | average precision (PR AUC) |
|---|---:|---:|
""")
    for name, a, p in rows:
        f.write(f"| {name} | {a:.7f} | {p:.7f} |\n")
    f.write(f"""
Off scikit-learn's exact figure: hvtrain {ha - sa:+.1e} (ROC AUC) and {hp - sp:+.1e} (average
precision); Keras' default `AUC()` {ka - sa:+.1e} and `AUC(curve="PR")` {kp - sp:+.1e}
(Keras interpolates between its 200 thresholds; its PR AUC is not scikit-learn's step sum).
Keras' and hvtrain's probabilities differ by at most {peer["max_prob_diff"]:.1e}.

Time: `mpirun -n 2 hvtrain eval --curves` (the whole command: start, read, evaluate, all-reduce,
{points} curve rows written) {statistics.median(secs):.2f} s, min-max {min(secs):.2f}-{max(secs):.2f}
over {repeat} runs; Keras `evaluate` alone (TensorFlow imported and traced before)
{peer["evaluate_seconds_auc"]:.2f} s with the two AUC metrics, {peer["evaluate_seconds_plain"]:.2f} s without.
""")
print(open(out).read())
PY
