#!/usr/bin/env bash
# How far the bf16 wire over NCCL moves Fashion-MNIST's test accuracy, against its seed noise:
# one rank on the GPU, gpu_allreduce = "host" (no compression) and "nccl" + compression = "bf16",
# seeds 1..3, EPOCHS epochs (8). Run from an unpacked bundle: bash tools/gpu_wire_seeds.sh OUTDIR
set -uo pipefail
B=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd); OUTD=${1:?usage: gpu_wire_seeds.sh OUTDIR}; cd "$B"
. "$B/env.sh"; HVLD=$LD_LIBRARY_PATH; unset LD_LIBRARY_PATH
for s in train t10k; do n=$([ $s = train ] && echo train || echo test)
  [ -s data/fashion-mnist-$n.h5 ] || LD_LIBRARY_PATH=$HVLD bin/hvtrain data import-idx data/$s-images-idx3-ubyte.gz data/$s-labels-idx1-ubyte.gz data/fashion-mnist-$n.h5 >/dev/null
done
for seed in 1 2 3; do for path in host nccl-bf16; do
  out="$OUTD/runs/$path-$seed"; rm -rf "$out"
  LD_LIBRARY_PATH=$HVLD HVTRAIN_CUDA_GRAPHS=0 timeout 120 mpirun -n 1 --bind-to none -x LD_LIBRARY_PATH -x HVTRAIN_CUDA_GRAPHS bin/hvtrain \
    train jobs/fashion-mnist.toml --set 'training.device="cuda"' --set "training.seed=$seed" \
    --set "distribution.gpu_allreduce=\"${path%-bf16}\"" --set "output.dir=\"$out\"" \
    --set "distribution.compression=\"$([ $path = nccl-bf16 ] && echo bf16 || echo none)\"" \
    --set "training.epochs=${EPOCHS:-8}" > "$OUTD/$path-$seed.log" 2>&1
  echo "seed $seed $path: exit $? $(grep -ho 'done: test accuracy [0-9.]*' "$OUTD/$path-$seed.log")"
done; done
