# Two-node emulation for the network benches (sourced after lib.sh): network namespaces made by
# tests/multihost/setup.sh (h1, h2, h3 on a bridge; removed on exit), the link rate of h1's and
# h2's switch ports set by `shape` (tc tbf; this VM's kernel has no netem, so no added delay),
# and `on_nodes K ARGS...`: mpirun started inside h1, K ranks on each of h1 and h2.
NETNS_PREFIX=hvtbench-net
NETNS_SUBNET=10.77.0.0/24
netns_down() { tests/multihost/teardown.sh "$NETNS_PREFIX" >/dev/null 2>&1 || true; }
trap 'netns_down; rm -rf "$work"' EXIT
tests/multihost/setup.sh "$NETNS_PREFIX" >/dev/null
export HVTMH_PREFIX=$NETNS_PREFIX

# shape "tbf rate 1gbit burst 256kb latency 100ms" | shape "" (unshaped)
shape() {
    for port in vh1 vh2; do
        ip netns exec "$NETNS_PREFIX-br" tc qdisc del dev "$port" root 2>/dev/null || true
        [ -z "$1" ] || ip netns exec "$NETNS_PREFIX-br" tc qdisc replace dev "$port" root $1
    done
}

on_nodes() {
    local k=$1
    shift
    timeout 900 ip netns exec "$NETNS_PREFIX-h1" mpirun --bind-to none --mca mpi_yield_when_idle 1 \
        --mca plm_rsh_agent "$PWD/tests/multihost/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
        --mca btl_tcp_if_include "$NETNS_SUBNET" --mca oob_tcp_if_include "$NETNS_SUBNET" --mca btl tcp,self,vader \
        -x HVTMH_PREFIX --host "10.77.0.1:$k,10.77.0.2:$k" -n $((2 * k)) "$PWD/$BIN" "$@"
}

# The link settings both network benches use: name|tbf parameters (empty: unshaped).
LINKS=("1gbe|tbf rate 1gbit burst 256kb latency 100ms" "10gbe|tbf rate 10gbit burst 2mb latency 100ms" "fabric|")
