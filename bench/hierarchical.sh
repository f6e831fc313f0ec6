#!/usr/bin/env bash
# Flat against hierarchical all-reduce (#30 item 5) across two "nodes": network namespaces
# made by tests/multihost/setup.sh (h1, h2 on a bridge), the link between them shaped with a
# token bucket (tc tbf) on both switch ports:
#   1gbe:   1 Gbit/s (a slow inter-node network: there hierarchical should matter most)
#   10gbe:  10 Gbit/s (10 GbE's rate)
#   fabric: unshaped: the veth pair's own speed, a few Gbit/s to tens on this machine, which
#           stands in for a fast fabric (HDR InfiniBand's 200 Gbit/s is beyond any veth here)
# No delay is added: this VM's kernel has no netem (CONFIG_NET_SCH_NETEM is not set; only tbf
# and htb are built in), so the links have the veth's microseconds of latency, not a real
# network's. 2 x 2 and 2 x 4 ranks (ranks 0..k-1 on h1). Each run is `hvtrain bench allreduce
# --hierarchical`, which times the flat MPI_Allreduce ("raw") and the engine's hierarchical
# path ("fused": reduce in the node, all-reduce between the two leaders, broadcast) in the
# same run, on the same buffers, each checked against the exact sum.
#
#   bash bench/hierarchical.sh [OUT.md]       (root: namespaces; iproute2's tc, sch_netem)
#
# The machine has 2 cores: 4 and 8 ranks share them, so the in-node steps are slower than on a
# real node; both columns pay that alike.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-bench/results/hierarchical-$(date +%F).md}
source bench/netns.sh
{
    echo "# Flat vs hierarchical all-reduce across 2 emulated nodes ($(date +%F))"
    echo
    echo "Machine: $(hostname), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs;"
    echo "Open MPI $(mpirun --version | head -1 | awk '{print $NF}'); nodes = network namespaces h1, h2 (tests/multihost/setup.sh),"
    echo "TCP between them, shared memory (vader) inside; link rate shaped by tc tbf on both switch ports (no added delay: no netem in this kernel)."
    echo "Command: \`bash bench/hierarchical.sh\`. Columns as \`hvtrain bench allreduce\` prints them:"
    echo "raw = flat MPI_Allreduce, fused = the hierarchical path inline, thread = on the communication thread;"
    echo "fused/raw > 1 means hierarchical is faster. busbw = bytes/time x 2(n-1)/n."
} >"$OUT"

for link in "${LINKS[@]}"; do
    name=${link%%|*}
    params=${link#*|}
    shape "$params"
    for k in 2 4; do
        n=$((2 * k))
        echo "== $name, 2 x $k ranks" >&2
        {
            echo
            echo "## $name (${params:-unshaped}), 2 nodes x $k ranks"
            echo
            echo '```'
            on_nodes "$k" bench allreduce --hierarchical --min-bytes 4096 --max-bytes "${MAX_BYTES:-67108864}" \
                --seconds "${SECONDS_PER_POINT:-0.3}" 2>/dev/null | grep -v '^\[' 
            echo '```'
        } >>"$OUT"
    done
done
echo "wrote $OUT" >&2
