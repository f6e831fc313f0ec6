#!/usr/bin/env bash
# `hvtrain predict` on a table against the Keras peer (pandas + Keras, bench/.venv): a synthetic
# CSV of ROWS new rows (COLS float features with 9 significant digits, an `id` column and the
# label), a 50-256-256-10 MLP trained for one epoch by hvtrain on 50,000 other rows; then,
# alternating, REPEAT times each:
#   hvtrain predict job.toml --weights w.h5 --input new.csv --output p.csv --keep id
#   python bench/peer_keras_predict_table.py w.h5 new.csv k.csv  (pandas.read_csv, the same MLP
#            with hvtrain's weights in Keras, model.predict, DataFrame.to_csv; its phases printed)
# wall seconds and peak RSS (GNU time), and the two tables compared (the same classes, the
# largest probability difference). The median and min-max go to OUT.md.
#
#   [ROWS=500000] [COLS=50] [REPEAT=3] bash bench/predict_table.sh [OUT.md]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-bench/results/predict-table-$(date +%F).md}
ROWS=${ROWS:-500000}
COLS=${COLS:-50}
REPEAT=${REPEAT:-3}
PEER=bench/.venv/bin/python
"$PEER" -c "import keras, pandas" 2>/dev/null || { echo "needs the Keras peer with pandas: bash bench/setup_peer.sh" >&2; exit 1; }
/usr/bin/python3 - "$work" "$ROWS" "$COLS" <<'PY'
import sys, numpy as np
w, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(3)
proj = rng.normal(size=(d, 10))
def write(path, m, seed):
    r = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("id," + ",".join(f"f{i}" for i in range(d)) + ",label\n")
        for a in range(0, m, 100000):
            k = min(100000, m - a)
            x = r.normal(size=(k, d)).astype(np.float32)
            y = (x @ proj).argmax(1)
            for i in range(k):
                f.write(f"s{a + i}," + ",".join(f"{v:.8g}" for v in x[i]) + f",{y[i]}\n")
write(f"{w}/train.csv", 50000, 1)
write(f"{w}/new.csv", n, 2)
PY
"$BIN" data import "$work/train.csv" "$work/train.h5" --y label --drop id > "$work/import.log" 2>&1
cat > "$work/job.toml" <<TOML
[data]
train = "$work/train.h5"
[model]
layers = [$COLS, 256, 256, 10]
activation = "relu"
[training]
epochs = 1
batch_size = 128
[output]
dir = "$work/run"
TOML
"$BIN" train "$work/job.toml" > "$work/train.log" 2>&1
size=$(stat -c %s "$work/new.csv")
echo "new.csv: $size bytes, $ROWS rows" >&2
for r in $(seq 1 "$REPEAT"); do
  rm -f "$work"/p.csv "$work"/k.csv
  measure hvtrain "$BIN" predict "$work/job.toml" --weights "$work/run/weights.h5" --input "$work/new.csv" \
    --output "$work/p.csv" --keep id
  measure keras "$PEER" bench/peer_keras_predict_table.py "$work/run/weights.h5" "$work/new.csv" "$work/k.csv"
  grep phases "$work/keras.log" >> "$work/phases"
  echo "run $r: hvtrain $(tail -1 "$work/hvtrain"), keras $(tail -1 "$work/keras")" >&2
done
same=$("$PEER" -c "
import pandas as pd, numpy as np
a, b = pd.read_csv('$work/p.csv'), pd.read_csv('$work/k.csv')
pa, pb = a.filter(like='p_').to_numpy(), b.filter(like='p_').to_numpy()
print(f'ids equal {bool((a.id == b.id).all())}, classes equal in {(a[\"class\"] == b[\"class\"]).mean():.6f} of the rows, '
      f'largest probability difference {np.abs(pa - pb).max():.2g}')")
tfv=$("$PEER" -c "import keras, tensorflow as tf, pandas as pd; print(f'Keras {keras.__version__}, TensorFlow {tf.__version__}, pandas {pd.__version__}')" 2>/dev/null)
/usr/bin/python3 - "$work" "$OUT" "$size" "$ROWS" "$COLS" "$same" "$(nproc)" "$(lscpu | sed -n 's/^Model name: *//p')" "$REPEAT" "$tfv" <<'PY'
import sys, statistics as st, datetime
w, out, size, rows, cols, same, cores, cpu, rep, tfv = sys.argv[1:]
def load(n):
    v = [tuple(map(float, l.split())) for l in open(f"{w}/{n}") if l.strip()]
    return [s for s, _ in v], [m / 1024 for _, m in v]
hs, hm = load("hvtrain"); ks, km = load("keras")
f = lambda v, fmt: f"{format(st.median(v), fmt)} ({format(min(v), fmt)}–{format(max(v), fmt)})"
phases = "\n".join(f"    {l.strip()}" for l in open(f"{w}/phases"))
md = f"""# `hvtrain predict` on a CSV against pandas + Keras: {int(rows):,} rows

{datetime.date.today()}, `ROWS={rows} bash bench/predict_table.sh` (REPEAT={rep}), {cpu}, {cores} cores; {tfv}.
Input: a {int(size)/1e6:.0f} MB CSV, {int(rows):,} rows × {cols} float columns (9 significant digits), an `id` and
the label; the model 50-256-256-10 (relu, softmax), trained one epoch by hvtrain, its weights loaded
into Keras. Output: `id`, `class` and 10 probabilities a row. Compared: {same}.

| tool | wall s, median (min–max) | peak RSS MiB, median (min–max) |
|---|---:|---:|
| `hvtrain predict … --input new.csv --output p.csv --keep id` | {f(hs, '.1f')} | {f(hm, '.0f')} |
| pandas `read_csv` + Keras `model.predict` + `to_csv` | {f(ks, '.1f')} | {f(km, '.0f')} |

The peer's phases (its wall time includes importing TensorFlow):

{phases}

hvtrain imports the CSV's model columns into a temporary HDF5 file beside the output (streamed,
65,536 rows at a time), predicts 512 rows at a time on the CPU and writes the table; it holds
the outputs and probabilities of every row ({int(rows) * 10 * 4 * 2 / 1e6:.0f} MB here) and the `--keep` column in memory.
"""
open(out, "w").write(md)
print(md)
PY
