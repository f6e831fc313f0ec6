#!/usr/bin/env bash
# Do two builds train to the same weights, bit for bit? For refactors that must not change
# behaviour: builds REV (default: the commit before HEAD) in a temporary worktree, then runs
# three Fashion-MNIST jobs with it and with this tree's target/release/hvtrain -- data
# parallel (2 ranks, 2 epochs, a checkpoint), tensor × pipeline (4 ranks, 2 × 2, 2
# micro-batches) and parameter servers (3 ranks, 1 server) -- and compares weights.h5 byte
# for byte. Needs `make data` and `cargo build --release` here first.
#   tools/same-weights.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-HEAD~1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d /tmp/hvtrain-same-weights.XXXXXX)
trap 'git worktree remove --force "$work/tree" >/dev/null 2>&1 || true' EXIT
git worktree add --detach "$work/tree" "$rev" >/dev/null
echo "building $rev ($(git rev-parse --short "$rev")) in $work/tree ..."
(cd "$work/tree" && cargo build --release --quiet --target-dir "$work/target")
mpi="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1"
run() { # BIN OUT
  local bin=$1 out=$2 job=jobs/fashion-mnist.toml
  $mpi -n 2 "$bin" train $job --set training.epochs=2 --set checkpoint.every_steps=300 \
    --set "output.dir=\"$out/dp\"" >"$out-dp.log" 2>&1
  $mpi -n 4 "$bin" train $job --set training.epochs=1 --set 'model.layers=[784,128,64,32,10]' \
    --set parallel.tensor=2 --set parallel.pipeline=2 --set parallel.micro_batches=2 \
    --set "output.dir=\"$out/mp\"" >"$out-mp.log" 2>&1
  $mpi -n 3 "$bin" train $job --set training.epochs=1 --set 'model.layers=[784,128,10]' \
    --set 'distribution.strategy="parameter_server"' --set checkpoint.every_steps=100 \
    --set "output.dir=\"$out/ps\"" >"$out-ps.log" 2>&1
}
run "$work/target/release/hvtrain" "$work/base"
run target/release/hvtrain "$work/head"
status=0
for m in dp mp ps; do
  if cmp -s "$work/base/$m/weights.h5" "$work/head/$m/weights.h5"; then
    echo "$m: weights.h5 identical"
  else
    echo "$m: weights.h5 DIFFERS (logs: $work/base-$m.log, $work/head-$m.log)"
    status=1
  fi
done
exit $status
