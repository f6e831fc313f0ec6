#!/bin/sh
# Open MPI launch agent (mpirun --mca plm_rsh_agent tests/multihost/agent.sh) standing in for
# ssh: mpirun calls it as `agent.sh [OPTIONS] HOST COMMAND...`, and it runs COMMAND with a
# shell (as sshd would) inside the namespace that plays HOST, in a fresh UTS namespace whose
# host name is hN, so each "host" also has its own name (MPI_Get_processor_name).
# HOST is 10.77.0.N or hN; the namespace prefix comes from HVTMH_PREFIX (set by the test,
# inherited through mpirun).
set -eu
while [ $# -gt 0 ]; do
    case $1 in
        -*) shift ;;        # ssh-style options (-x, ...): nothing to do here
        *) break ;;
    esac
done
host=${1:?agent.sh: no host}
shift
P=${HVTMH_PREFIX:?agent.sh: HVTMH_PREFIX is not set}
case $host in
    10.77.0.[123]) n=${host##*.} ;;
    h[123]) n=${host#h} ;;
    *) echo "agent.sh: unknown host $host" >&2; exit 255 ;;
esac
exec ip netns exec "$P-h$n" unshare --uts /bin/sh -c 'hostname "$1" && exec /bin/sh -c "$2"' agent "h$n" "$*"
