#!/bin/bash
# Stop the daemons tests/slurm/start.sh started in DIR, by their recorded PIDs: SIGTERM,
# then SIGKILL after 10 s. Running jobs are cancelled first. Usage: tests/slurm/stop.sh DIR
D=${1:?usage: stop.sh DIR}
# First cancel every job of this private cluster (bounded: 15 s), so no rank is left behind.
if [ -f "$D/slurm.conf" ] && [ -f "$D/slurmctld.pid" ] && kill -0 "$(cat "$D/slurmctld.pid")" 2>/dev/null; then
  export SLURM_CONF=$D/slurm.conf
  timeout 5 scancel --user="$(id -un)" 2>/dev/null
  for _ in $(seq 75); do [ -z "$(timeout 5 squeue -h -t R,CG 2>/dev/null)" ] && break; sleep 0.2; done
fi
pids=()
for f in slurmd slurmctld munged; do
  p=$(cat "$D/$f.pid" 2>/dev/null) || continue
  kill -TERM "$p" 2>/dev/null && pids+=("$p")
done
for _ in $(seq 100); do
  alive=()
  for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive+=("$p"); done
  [ ${#alive[@]} = 0 ] && exit 0
  sleep 0.1
done
kill -KILL "${alive[@]}" 2>/dev/null
exit 0
