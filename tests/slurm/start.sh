#!/bin/bash
# Start a private single-node Slurm (munged + slurmctld + slurmd, all run as root) with every
# file under DIR, for tests/slurm.rs. Usage: tests/slurm/start.sh DIR [CPUS]
# Afterwards: `export SLURM_CONF=DIR/slurm.conf` for sbatch/squeue/scontrol/scancel, and
# tests/slurm/stop.sh DIR to stop the daemons (by the PIDs recorded in DIR/*.pid).
# The node claims CPUS CPUs (default 4, more than the machine may have: config_overrides) and
# two pretend GPUs (gres without device files) so jobs/gpu-node.sbatch can be scheduled.
# Ports: SLURM_TEST_PORT (default 6817) for slurmctld, +1 for slurmd.
set -euo pipefail
D=$(realpath -m "${1:?usage: start.sh DIR [CPUS]}")
CPUS=${2:-4}
PORT=${SLURM_TEST_PORT:-6817}
for c in munged slurmctld slurmd sinfo; do
  command -v "$c" >/dev/null || { echo "start.sh: $c not found (Debian: apt-get install slurm-wlm munge)" >&2; exit 3; }
done
HOST=$(hostname -s)
mkdir -p "$D"/{munge,ctld,spool,log,tmp}
chmod 0755 "$D"
chmod 0755 "$D/munge"   # munged refuses a socket dir others may write to; clients must reach it

# munge: a fresh key, socket in DIR (not /run/munge), so a system munged is never touched.
dd if=/dev/urandom of="$D/munge.key" bs=1 count=1024 status=none
chmod 0400 "$D/munge.key"
munged -F --force --key-file="$D/munge.key" --socket="$D/munge/munge.socket" \
  --pid-file="$D/munged.pid.unused" --log-file="$D/log/munged.log" --seed-file="$D/munge.seed" \
  >>"$D/log/munged.out" 2>&1 &
echo $! >"$D/munged.pid"

cat >"$D/slurm.conf" <<CONF
ClusterName=hvtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$D/munge/munge.socket
StateSaveLocation=$D/ctld
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid.unused
SlurmdPidFile=$D/slurmd.pid.unused
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=${SLURMD_DEBUG:-info}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
TmpFS=$D/tmp
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
KillWait=10
MinJobAge=600
GresTypes=gpu
NodeName=$HOST NodeAddr=127.0.0.1 CPUs=$CPUS Gres=gpu:2 State=UNKNOWN
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
# PMIx's per-step client directories (spmix_appdir_UID_JOB.STEP) under DIR, not /tmp: a step
# killed by scancel can leave its directory behind, and job ids restart at 1 with each fresh
# state, so a later run's step of the same id would fail with "File exists".
echo "PMIxCliTmpDirBase=$D/tmp" >"$D/mpi.conf"
# Two pretend GPUs: Slurm drops file-less GPUs, so point it at two empty files.
mkdir -p "$D/dev" && ln -sf /dev/null "$D/dev/gpu0" && ln -sf /dev/null "$D/dev/gpu1"
echo "NodeName=$HOST Name=gpu File=$D/dev/gpu[0-1]" >"$D/gres.conf"
export SLURM_CONF="$D/slurm.conf"

# munged must answer before the Slurm daemons start.
for _ in $(seq 50); do [ -S "$D/munge/munge.socket" ] && break; sleep 0.1; done
[ -S "$D/munge/munge.socket" ] || { echo "start.sh: munged did not start:" >&2; cat "$D"/log/munged.* >&2; exit 1; }

slurmctld -D -c -f "$SLURM_CONF" >>"$D/log/slurmctld.out" 2>&1 &
echo $! >"$D/slurmctld.pid"
slurmd -D -f "$SLURM_CONF" -N "$HOST" >>"$D/log/slurmd.out" 2>&1 &
echo $! >"$D/slurmd.pid"

# Bounded wait (30 s) for the node to be idle.
for _ in $(seq 150); do
  state=$(sinfo -h -n "$HOST" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && { echo "start.sh: Slurm up in $D (node $HOST idle, $CPUS CPUs)"; exit 0; }
  sleep 0.2
done
echo "start.sh: node not idle after 30 s (state: '${state:-none}'); logs:" >&2
tail -n 20 "$D"/log/* >&2
exit 1
