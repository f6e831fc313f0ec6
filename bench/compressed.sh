#!/usr/bin/env bash
# Training throughput on compressed copies of Fashion-MNIST (#33 item 4): the training file
# rewritten by h5py (Debian's python3-h5py) uncompressed, gzip (level 4, shuffle), LZF, and
# Blosc with zstd (level 5, byte shuffle), all chunked 1024 rows x 784; then the Fashion-MNIST
# job on 2 ranks for 2 epochs with data.cache_mb = 0, so every epoch reads (and decompresses)
# the file: the last epoch's samples/s beside each file's size. Runs alternate between the
# files, REPEAT times each (median reported, min-max beside it).
#
#   [REPEAT=3] bash bench/compressed.sh [OUT.md]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-bench/results/compressed-$(date +%F).md}
REPEAT=${REPEAT:-3}
/usr/bin/python3 - "$work" <<'PY'
import sys, h5py
src, out = "data/fashion-mnist-train.h5", sys.argv[1]
with h5py.File(src) as f:
    x, y = f["x"][:], f["y"][:]
specs = {"none": {}, "gzip": dict(compression="gzip", compression_opts=4, shuffle=True), "lzf": dict(compression="lzf"),
         "blosc-zstd": dict(compression=32001, compression_opts=(2, 2, 4, 0, 5, 1, 5))}
for name, s in specs.items():
    with h5py.File(f"{out}/{name}.h5", "w") as g:
        g.create_dataset("x", data=x, chunks=(1024, x.shape[1]), **s)
        g.create_dataset("y", data=y, chunks=(1024,), **s)
PY
declare -A rates
for r in $(seq 1 "$REPEAT"); do
  for name in none gzip lzf blosc-zstd; do
    o="$work/out-$name-$r"
    mpirun -n 2 "$BIN" train jobs/fashion-mnist.toml --set "data.train=\"$work/$name.h5\"" --set data.cache_mb=0 \
      --set training.epochs=2 --set "output.dir=\"$o\"" >/dev/null 2>&1
    rates[$name]+="$(python3 -c "import json,sys; print(round([json.loads(l) for l in open(sys.argv[1])][-1]['samples_per_sec']))" "$o/metrics.jsonl") "
  done
done
{
  echo "# Training on compressed HDF5, Fashion-MNIST ($(date +%F))"
  echo
  echo "Machine: $(hostname), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs."
  echo "Command: \`REPEAT=$REPEAT bash bench/compressed.sh\`: jobs/fashion-mnist.toml (784-512-512-10, batch 128 per rank), 2 ranks, 2 epochs,"
  echo "data.cache_mb = 0 (every epoch reads the file), the second epoch's samples/s; $REPEAT runs per file, interleaved."
  echo
  echo "| file (h5py, chunks 1024 x 784) | size (MB) | samples/s, median | min-max |"
  echo "|---|---:|---:|---|"
  for name in none gzip lzf blosc-zstd; do
    read -r med lo hi < <(echo "${rates[$name]}" | tr ' ' '\n' | grep . | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)], a[1], a[NR]}')
    echo "| $name | $(du -m "$work/$name.h5" | cut -f1) | $med | $lo-$hi |"
  done
} > "$OUT"
cat "$OUT"
