#!/usr/bin/env bash
# Latency of the emulated inter-node link that bench/hierarchical.sh and bench/autotune.sh use
# (#30 item 5 asked for a 10 GbE's and an HDR InfiniBand link's delay, with tc netem, which
# this VM's kernel lacks): what the two namespace "nodes" already have without any added
# delay, to compare with a real link's. Per link setting: `hvtrain bench allreduce` on 2 ranks,
# one per node, at 4 bytes to 4 KiB (a latency-bound exchange: its time is about one one-way
# trip plus both MPI stacks, as OSU's osu_allreduce at 2 ranks measures a real link).
#
#   bash bench/link_latency.sh [OUT.md]       (root: namespaces; iproute2)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-bench/results/link-latency-$(date +%F).md}
source bench/netns.sh
{
    echo "# Latency of the emulated inter-node link ($(date +%F))"
    echo
    echo "Machine: $(hostname), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs,"
    echo "kernel $(uname -r); Open MPI $(mpirun --version | head -1 | awk '{print $NF}'); nodes h1, h2 = network namespaces on a"
    echo "bridge (tests/multihost/setup.sh), link rates as bench/hierarchical.sh sets them (tc tbf), no delay added."
    echo "Command: \`bash bench/link_latency.sh\`."
} >"$OUT"
for link in "${LINKS[@]}"; do
    name=${link%%|*}
    params=${link#*|}
    shape "$params"
    echo "== $name" >&2
    {
        echo
        echo "## $name (${params:-unshaped})"
        echo
        echo '```'
        on_nodes 1 bench allreduce --min-bytes 4 --max-bytes 4096 --seconds "${SECONDS_PER_POINT:-0.5}" 2>/dev/null |
            grep -v '^\['
        echo '```'
    } >>"$OUT"
done
echo "wrote $OUT" >&2
