#!/usr/bin/env bash
# `hvtrain data import` of a large CSV against pandas (#33 item 4): a synthetic CSV of about
# SIZE_GB GB (float columns written with 9 significant digits, and one integer label), then,
# alternating, REPEAT times each:
#   hvtrain data import big.csv out.h5 --y label
#   python3: pandas.read_csv(big.csv) then h5py writing x float32 and y int32 (the usual
#            two-liner; Debian's python3-pandas and python3-h5py)
# wall seconds and peak resident memory (GNU time's maximum RSS) of each, and the two files'
# contents compared (equal x and y). The median and min-max go to OUT.md.
#
# FORMAT=parquet: the same rows written by pyarrow (float32 columns, int64 label, snappy, its
# default row groups) and pandas.read_parquet instead of read_csv; pyarrow and pandas from the
# test venv (`make onnx-venv`, target/onnx-venv).
#
#   [FORMAT=csv|parquet] [SIZE_GB=1] [COLS=50] [REPEAT=3] bash bench/import.sh [OUT.md]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FORMAT=${FORMAT:-csv}
case $FORMAT in
  csv) PY=/usr/bin/python3; SUFFIX=""; READ="pd.read_csv(sys.argv[1])" ;;
  parquet) PY=$PWD/target/onnx-venv/bin/python; SUFFIX="-parquet"; READ="pd.read_parquet(sys.argv[1])"
    "$PY" -c "import pyarrow, pandas" || { echo "FORMAT=parquet needs pyarrow and pandas: make onnx-venv" >&2; exit 1; } ;;
  *) echo "FORMAT must be csv or parquet" >&2; exit 1 ;;
esac
OUT=${1:-bench/results/import$SUFFIX-$(date +%F).md}
SIZE_GB=${SIZE_GB:-1}
COLS=${COLS:-50}
REPEAT=${REPEAT:-3}
# About 11 bytes a value ("-0.12345678,"): rows for SIZE_GB.
ROWS=$(python3 -c "print(int($SIZE_GB * 1e9 / (11.3 * $COLS)))")
/usr/bin/python3 - "$work/big.csv" "$ROWS" "$COLS" <<'PY'
import sys, numpy as np
path, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(1)
with open(path, "w") as f:
    f.write(",".join(f"f{i}" for i in range(d)) + ",label\n")
    for a in range(0, n, 100000):
        m = min(100000, n - a)
        x = rng.normal(size=(m, d)).astype(np.float32)
        y = rng.integers(0, 10, m)
        np.savetxt(f, np.column_stack([x, y]), fmt=["%.8g"] * d + ["%d"], delimiter=",")
PY
INPUT=$work/big.csv
if [ "$FORMAT" = parquet ]; then  # the CSV's rows, as pyarrow writes them
  INPUT=$work/big.parquet
  "$PY" -c "
import sys, pyarrow as pa, pyarrow.csv as pc, pyarrow.parquet as pq
t = pc.read_csv(sys.argv[1], convert_options=pc.ConvertOptions(
    column_types={f'f{i}': pa.float32() for i in range($COLS)}))
pq.write_table(t, sys.argv[2])" "$work/big.csv" "$INPUT"
fi
size=$(stat -c %s "$INPUT")
echo "$FORMAT: $size bytes, $ROWS rows x $COLS features + label" >&2
cat > "$work/pandas_import.py" <<'PY'
import sys, numpy as np, pandas as pd, h5py
df = READ
y = df.pop("label").to_numpy(np.int32)
x = df.to_numpy(np.float32)
with h5py.File(sys.argv[2], "w") as f:
    f.create_dataset("x", data=x)
    f.create_dataset("y", data=y)
PY
sed -i "s|READ|$READ|" "$work/pandas_import.py"
for r in $(seq 1 "$REPEAT"); do
  rm -f "$work"/hv.h5 "$work"/pd.h5
  measure hvtrain "$BIN" data import "$INPUT" "$work/hv.h5" --y label
  measure pandas "$PY" "$work/pandas_import.py" "$INPUT" "$work/pd.h5"
  echo "run $r: hvtrain $(tail -1 "$work/hvtrain"), pandas $(tail -1 "$work/pandas")" >&2
done
same=$(/usr/bin/python3 -c "
import h5py, numpy as np
a, b = h5py.File('$work/hv.h5'), h5py.File('$work/pd.h5')
print(np.array_equal(a['x'][...], b['x'][...]) and np.array_equal(a['y'][...], b['y'][...]))")
/usr/bin/python3 - "$work" "$OUT" "$size" "$ROWS" "$COLS" "$same" "$(nproc)" "$(lscpu | sed -n 's/^Model name: *//p')" "$REPEAT" "$FORMAT" <<'PY'
import sys, statistics as st, datetime
w, out, size, rows, cols, same, cores, cpu, rep, fmt = sys.argv[1:]
name, read = ("CSV", "read_csv") if fmt == "csv" else ("Parquet file (pyarrow, snappy)", "read_parquet")
def load(n):
    v = [tuple(map(float, l.split())) for l in open(f"{w}/{n}") if l.strip()]
    return [s for s, _ in v], [m / 1024 for _, m in v]
hs, hm = load("hvtrain"); ps, pm = load("pandas")
f = lambda v, fmt: f"{format(st.median(v), fmt)} ({format(min(v), fmt)}–{format(max(v), fmt)})"
md = f"""# `hvtrain data import` against pandas + h5py: a {int(size)/1e9:.2f} GB {name}

{datetime.date.today()}, `FORMAT={fmt} bash bench/import.sh` (REPEAT={rep}), {cpu}, {cores} cores.
Input: {int(rows):,} rows × {cols} float columns (9 significant digits) + an integer label.
The two outputs hold the same x and y: **{same}**.

| tool | wall s, median (min–max) | peak RSS MiB, median (min–max) |
|---|---:|---:|
| `hvtrain data import big.{fmt} out.h5 --y label` | {f(hs, '.1f')} | {f(hm, '.0f')} |
| pandas `{read}` + h5py `create_dataset` | {f(ps, '.1f')} | {f(pm, '.0f')} |

hvtrain streams 65,536 rows at a time (one thread); pandas reads the whole file into a
DataFrame, then copies it to float32 before writing.
"""
open(out, "w").write(md)
print(md)
PY
