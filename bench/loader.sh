#!/usr/bin/env bash
# The loader's throughput by the stored type of `x` (float32, uint8, uint8 with
# data.x_scale = 1/255, float32 scaled, float64): what converting to float32 as rows are read
# costs. One process, no MPI: the real Shard + Loader thread path (src/data/loader_bench.rs,
# an ignored test), on synthetic Fashion-MNIST-sized files in the page cache.
#   bash bench/loader.sh            # 60000 rows x 784 features, 3 rounds
# HVTRAIN_LOADER_BENCH_ROWS / _FEATURES / _ROUNDS / _EPOCHS / _DIR change the sizes and where
# the files go; HVTRAIN_LOADER_BENCH_RANKS=M times rank 0 of M (its part of each global batch). Prints a markdown report and saves it under bench/results/loader-DATE.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cargo test --release --bin hvtrain --no-run 2>/dev/null
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
table=$(cargo test --release --bin hvtrain loader_throughput -- --ignored --nocapture --test-threads 1 2>/dev/null |
  sed -n 's/.*\(rows [0-9].*\)/\1/p; /^|/p')
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
DATE=$(date +%Y-%m-%d)
out=bench/results/loader-$DATE${HVTRAIN_LOADER_BENCH_RANKS:+-ranks$HVTRAIN_LOADER_BENCH_RANKS}.md
{
  echo "# Loader throughput by stored type of x, $DATE"
  echo
  echo "- command: \`bash bench/loader.sh\`, run from commit $(git rev-parse --short HEAD)"
  echo "- machine: $CPU, $(nproc) CPUs; load average before: $LOAD, after: $LOAD_AFTER"
  echo "- what: one process, \`Shard::open\` + the \`Loader\` thread (block-shuffled windows, batches of 128 handed to a consumer that only gives them back); seconds per epoch; the files are read from the page cache, so this is HDF5 + conversion cost, not disk"
  echo
  echo "$table" | sed '1s/^/- setup: /; 1a\\
'
} | tee "$out"
echo "saved $out"
