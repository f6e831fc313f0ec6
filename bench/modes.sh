#!/usr/bin/env bash
# Is this machine's speed steady? N short runs in a row of the same thing, each a new process:
# `hvtrain train` (the Fashion-MNIST job, 1 rank × 2 threads, batch 256, CPU, EPOCHS epochs:
# every epoch's samples/s), `hvtrain bench step` (the same step without the loader and MPI) and
# `hvtrain bench gemm` (the step's products alone), and the PyTorch peer when PEER=1. On a
# shared VM the rate of one process can sit at one of two levels for its whole run, or switch
# mid-run; a comparison of two systems is only as good as the number of runs that saw both
# levels. Prints a markdown report and saves it as bench/results/modes-DATE.md.
#   N=8 EPOCHS=4 bash bench/modes.sh
#   PEER=1 bash bench/modes.sh        # also bench/torch_cpu_peer.py (set up by bench/setup_torch.sh)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
N=${N:-8}
EPOCHS=${EPOCHS:-4}
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
out=$work/report.md
{
  echo "# Run-to-run speed levels on this machine, $(date -u +%Y-%m-%d)"
  echo
  echo "- command: \`N=$N EPOCHS=$EPOCHS PEER=${PEER:-0} bash bench/modes.sh\`, hvtrain commit $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs, $(uname -r); load average before: $LOAD"
  echo "- each row one process, in the order run (start time UTC); train: samples/s of every epoch (the first"
  echo "  includes the first read of the HDF5 file); bench step: \`--batch 256 --threads 2 --steps 600\`;"
  echo "  bench gemm: \`--batch 256 --threads 2 --seconds 1\` (GFLOP/s of the step's products)"
  echo
  echo "| # | start | train, 1 rank × 2 threads (samples/s per epoch) | bench step (samples/s) | bench gemm (GFLOP/s) |$([ "${PEER:-0}" = 1 ] && echo " PyTorch (samples/s per epoch) |")"
  echo "|---|---|---|---|---|$([ "${PEER:-0}" = 1 ] && echo "---|")"
} > "$out"
for i in $(seq 1 "$N"); do
  t=$(date -u +%H:%M:%S)
  rm -rf "$work/out"
  $BIN train jobs/fashion-mnist.toml --set training.epochs="$EPOCHS" --set training.batch_size=256 \
    --set training.threads=2 --set training.device=\"cpu\" --set checkpoint.every_minutes=0 \
    --set output.dir="\"$work/out\"" 2> "$work/train.log"
  tr=$(python3 -c "import json,sys; print(' / '.join(f\"{json.loads(l)['samples_per_sec']:,.0f}\" for l in open(sys.argv[1])))" "$work/out/metrics.jsonl")
  st=$($BIN bench step --device cpu --batch 256 --threads 2 --steps 600 --warmup 20 2> /dev/null |
    python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['samples_per_s']:,.0f}\")")
  gm=$($BIN bench gemm --batch 256 --threads 2 --seconds 1 2> /dev/null |
    python3 -c "import json,sys; print(f\"{json.load(sys.stdin)['gflops']:.0f}\")")
  pt=
  if [ "${PEER:-0}" = 1 ]; then
    [ -x bench/.venv-torch/bin/python ] || bash bench/setup_torch.sh
    pt=$(bench/.venv-torch/bin/python bench/torch_cpu_peer.py --layers 784,512,512,10 --epochs "$EPOCHS" --threads 2 \
      --precision fp32 2>&1 | sed -n 's/^PEER_RESULT //p' |
      python3 -c "import json,sys; print(' / '.join(f'{x:,.0f}' for x in json.load(sys.stdin)['epoch_rates']))")
    pt=" $pt |"
  fi
  echo "| $i | $t | $tr | $st | $gm |$pt" >> "$out"
done
cat "$out"
mkdir -p bench/results
dest=bench/results/modes-$(date -u +%Y-%m-%d).md
cp "$out" "$dest"
echo "saved $dest"
