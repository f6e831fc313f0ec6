#!/usr/bin/env bash
# Data-parallel scaling over the GPUs of one node, NCCL against the host path (issue: many GPUs
# at full speed). For n = 1, 2, 4, … up to every GPU nvidia-smi lists, both models (small:
# 784-512-512-10, 128 rows a rank; large: 784-4096-4096-4096-10, 1024 rows a rank, TF32), and
# distribution.gpu_allreduce = "nccl" and "host": one training run of EPOCHS epochs on
# Fashion-MNIST, its samples/s (the last epoch's) and exposed communication per step from the
# epoch line; the weights of the two paths compared (sum orders differ: within 1e-4). Writes
# OUT/gpu-scaling.md and OUT/gpu-scaling.json. With 2 GPUs or more, also the large model with
# parallel.tensor = 2 on 2 GPUs ("tensor2"): its tensor-parallel sums through NCCL (the log's
# "tensor-parallel sums: GPU to GPU by NCCL") against the host path, weights within 1e-4; and
# with parallel.pipeline = 2 and 4 micro-batches on 2 GPUs ("pipe2"): the stages' messages by
# NCCL send/recv (the log's "pipeline messages ...: GPU to GPU by NCCL send/recv") against the
# host path, weights within 1e-4.
#   bash bench/gpu_scaling.sh OUT          (from the GPU bundle's root, env.sh sourced, or a
#                                           checkout with target/release/hvtrain and data/)
# Environment: HV (the binary), EPOCHS (2), MAX_GPUS (all), CAP (seconds per run, 150),
# MPI_EXTRA (more mpirun options), DEADLINE (epoch seconds to stop starting runs at).
set -uo pipefail
OUT=${1:?usage: bench/gpu_scaling.sh OUT}
HV=${HV:-target/release/hvtrain}
EPOCHS=${EPOCHS:-2}
CAP=${CAP:-150}
mkdir -p "$OUT/scaling"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
gpus=${MAX_GPUS:-$gpus}
[ "${gpus:-0}" -ge 1 ] || { echo "gpu_scaling: no GPU listed by nvidia-smi"; exit 2; }
counts=()
for n in 1 2 4 8 16 32; do [ "$n" -le "$gpus" ] && counts+=("$n"); done
[[ " ${counts[*]} " == *" $gpus "* ]] || counts+=("$gpus")
run() {  # run N MODEL PATH
  local n=$1 model=$2 path=$3 layers batch prec tensor=1 pipeline=1 micro=1
  case $model in
    small) layers="[784, 512, 512, 10]"; batch=128; prec=fp32 ;;
    large) layers="[784, 4096, 4096, 4096, 10]"; batch=1024; prec=tf32 ;;
    tensor2) layers="[784, 4096, 4096, 4096, 10]"; batch=1024; prec=tf32; tensor=2 ;;
    pipe2) layers="[784, 4096, 4096, 4096, 10]"; batch=1024; prec=tf32; pipeline=2; micro=4 ;;
  esac
  local dir="$OUT/scaling/$model-$n-$path"
  rm -rf "$dir"
  if [ -n "${DEADLINE:-}" ] && [ "$(date +%s)" -ge "$DEADLINE" ]; then echo "skipped (time)" > "$dir.log"; return; fi
  # shellcheck disable=SC2086
  timeout -k 5 "$CAP" mpirun -n "$n" --bind-to none --oversubscribe ${MPI_EXTRA:-} -x LD_LIBRARY_PATH "$HV" train jobs/fashion-mnist.toml \
    --set 'training.device="cuda"' --set "model.layers=$layers" --set "training.batch_size=$batch" \
    --set "training.precision=\"$prec\"" --set "training.epochs=$EPOCHS" --set "distribution.gpu_allreduce=\"$path\"" \
    --set "parallel.tensor=$tensor" --set "parallel.pipeline=$pipeline" --set "parallel.micro_batches=$micro" \
    --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  echo "exit $?" >> "$dir.log"
}
for model in small large; do
  for n in "${counts[@]}"; do
    for path in nccl host; do run "$n" "$model" "$path"; done
  done
done
if [ "$gpus" -ge 2 ]; then for m in tensor2 pipe2; do for path in nccl host; do run 2 "$m" "$path"; done; done; fi
env -u LD_LIBRARY_PATH python3 - "$OUT" "${counts[*]}" <<'PY'
import json, os, re, sys
out, counts = sys.argv[1], [int(c) for c in sys.argv[2].split()]
rows, ok = [], True
def parse(model, n, path):
    log = os.path.join(out, "scaling", f"{model}-{n}-{path}.log")
    text = open(log).read() if os.path.exists(log) else ""
    ep = [l for l in text.splitlines() if re.search(r"epoch \d+/\d+: train_loss", l)]
    sps = re.search(r"([0-9.]+) samples/s", ep[-1]) if ep else None
    exp = re.search(r"exposed communication ([0-9.]+) ms/step", ep[-1]) if ep else None
    how = [l.split("gradient buckets: ", 1)[1] for l in text.splitlines() if "gradient buckets: " in l]
    return {"model": model, "gpus": n, "path": path, "samples_s": float(sps.group(1)) if sps else None,
            "exposed_ms": float(exp.group(1)) if exp else None, "how": how[0] if how else None,
            "done": "done:" in text}
def weights(d):
    import h5py, numpy as np
    f = h5py.File(os.path.join(d, "weights.h5"), "r")
    return {k: f[k][...] for k in f.keys() if k.startswith("dense") for k in [f"{k}/weight", f"{k}/bias"]}
bases = {}
split = {"tensor2": "tensor-parallel sums (activations and their gradients): GPU to GPU by NCCL",
         "pipe2": "pipeline messages (activations and their gradients): GPU to GPU by NCCL send/recv"}
for model in ("small", "large", "tensor2", "pipe2"):
    base = dict(bases.get("large", {})) if model in split else {}
    bases[model] = base
    for n in (counts if model not in split else [2] if max(counts) >= 2 else []):
        r = {p: parse(model, n, p) for p in ("nccl", "host")}
        for p in r:
            if n == 1 and r[p]["samples_s"]:
                base[p] = r[p]["samples_s"]
            r[p]["efficiency"] = (r[p]["samples_s"] / (n * base[p])) if r[p]["samples_s"] and base.get(p) else None
            rows.append(r[p])
        try:
            a = weights(os.path.join(out, "scaling", f"{model}-{n}-nccl"))
            b = weights(os.path.join(out, "scaling", f"{model}-{n}-host"))
            diff = max(float(abs(a[k] - b[k]).max()) for k in a)
        except Exception as e:
            diff = None
        r["nccl"]["max_weight_diff_vs_host"] = diff
        ok &= bool(r["nccl"]["done"] and r["host"]["done"] and diff is not None and diff <= 1e-4)
        ok &= bool(r["nccl"]["how"] and "NCCL" in r["nccl"]["how"])
        if model in split:
            log = open(os.path.join(out, "scaling", f"{model}-2-nccl.log")).read()
            ok &= split[model] in log
json.dump(rows, open(os.path.join(out, "gpu-scaling.json"), "w"), indent=1)
with open(os.path.join(out, "gpu-scaling.md"), "w") as f:
    f.write("# Data-parallel scaling over one node's GPUs: NCCL against the host path\n\n")
    f.write("`bash bench/gpu_scaling.sh` (Fashion-MNIST; small 784-512-512-10 at 128 rows a rank fp32, "
            "large 784-4096-4096-4096-10 at 1024 rows a rank TF32; the last epoch's figures).\n\n")
    f.write("| model | GPUs | path | samples/s | exposed comm. ms/step | efficiency | max |w diff| vs host |\n|---|---:|---|---:|---:|---:|---:|\n")
    for r in rows:
        fmt = lambda v, s: ("-" if v is None else s.format(v))
        f.write(f"| {r['model']} | {r['gpus']} | {r['path']} | {fmt(r['samples_s'], '{:,.0f}')} | {fmt(r['exposed_ms'], '{:.3f}')} | "
                f"{fmt(r['efficiency'], '{:.2f}')} | {fmt(r.get('max_weight_diff_vs_host'), '{:.2g}')} |\n")
    f.write("\ntensor2: the large model with parallel.tensor = 2 on 2 GPUs (one tensor group, no data parallelism); "
            "pipe2: the same model with parallel.pipeline = 2, 4 micro-batches, on 2 GPUs; "
            "their efficiency is against 1 GPU of the large model's runs.\n")
    f.write(f"\nVerdict: {'PASS' if ok else 'FAIL'} (every run done, NCCL used where asked, NCCL's weights within 1e-4 of the host path's)\n")
print(open(os.path.join(out, "gpu-scaling.md")).read())
sys.exit(0 if ok else 1)
PY
