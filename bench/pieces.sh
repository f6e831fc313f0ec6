#!/usr/bin/env bash
# Buffers past MPI's 32-bit counts, sent for real (issue #50 item 5): `hvtrain bench pieces` on
# 2 ranks, 2^31 + 7 elements (a float32 broadcast of 8 GiB, then a 16-bit ring exchange of
# 4 GiB each way), every element checked on every rank. Needs about 16 GiB free in all.
#   bash bench/pieces.sh            # ELEMENTS=2147483655
# Writes bench/results/pieces-DATE.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ELEMENTS=${ELEMENTS:-2147483655}
day=$(date +%F)
log="$work/pieces.log"
/usr/bin/time -v mpirun --bind-to none -n 2 $BIN bench pieces --elements "$ELEMENTS" > "$log" 2>&1
mkdir -p bench/results
{
  echo "# Buffers past MPI's 32-bit counts, $day"
  echo
  echo "- command: \`bash bench/pieces.sh\` (ELEMENTS=$ELEMENTS), hvtrain commit $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs, $(free -g | awk '/Mem:/ {print $2}') GiB, $(mpirun --version | head -1)"
  echo "- exit code 0: every element of both buffers arrived right on both ranks (an error names the first wrong one)"
  echo
  echo '```'
  grep -E 'INFO|ERROR|error' "$log" | grep -v WARN | cut -c1-200
  grep -E 'Maximum resident|Elapsed \(wall' "$log" | sed 's/^\s*//'
  echo '```'
} > "bench/results/pieces-$day.md"
cat "bench/results/pieces-$day.md"
