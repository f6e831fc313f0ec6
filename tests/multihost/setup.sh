#!/bin/sh
# Make three "hosts" as network namespaces on this machine, wired to one switch:
#   PREFIX-h1, PREFIX-h2, PREFIX-h3   each with lo up and eth0 = 10.77.0.N/24 (N = 1, 2, 3)
#   PREFIX-br                         the switch: bridge br0 with ports vh1, vh2, vh3
# Each hN's eth0 is one end of a veth pair whose other end (vhN) is a port of br0. Nothing is
# created in the root namespace, and the namespaces have no route but 10.77.0.0/24, so
# traffic can only go between these hosts (or to their own loopback).
# Also writes DIR/hostfile (one line per host, by IP, slots=1) when DIR is given.
#
#   tests/multihost/setup.sh PREFIX [DIR]       (root; needs iproute2)
# Anything left under PREFIX by an earlier run (a crashed test) is removed first.
set -eu
P=${1:?usage: setup.sh PREFIX [DIR]}
DIR=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
SUBNET=10.77.0

"$HERE/teardown.sh" "$P"

ip netns add "$P-br"
ip -n "$P-br" link set lo up
ip -n "$P-br" link add br0 type bridge
# Forward at once: no STP, no listening/learning delay.
ip -n "$P-br" link set br0 type bridge forward_delay 0 stp_state 0 2>/dev/null || true
ip -n "$P-br" link set br0 up
ip netns exec "$P-br" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true

for i in 1 2 3; do
    h="$P-h$i"
    ip netns add "$h"
    ip netns exec "$h" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 2>/dev/null || true
    ip netns exec "$h" sysctl -qw net.ipv6.conf.default.disable_ipv6=1 2>/dev/null || true
    # A host that drops off the network must be declared lost in seconds, not the ~15 min of
    # Linux's default TCP retransmission limit (tcp_retries2 = 15). Open MPI's keepalive
    # settings cover an idle connection only: once the job is being aborted, mpirun has
    # unacknowledged data queued for the lost host's daemon and waits for the retransmission
    # limit. 3 retries is about 3 s on this link (200 ms minimum RTO, doubling). These sysctls
    # belong to the namespace: nothing changes for the rest of the machine.
    ip netns exec "$h" sysctl -qw net.ipv4.tcp_retries2=3
    ip -n "$h" link set lo up
    # The switch-side end vhN is made in the bridge namespace, the host end eth0 in hN.
    ip -n "$P-br" link add "vh$i" type veth peer name eth0 netns "$h"
    ip -n "$P-br" link set "vh$i" master br0
    ip -n "$P-br" link set "vh$i" up
    ip -n "$h" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$h" link set eth0 up
done

# Wait (at most ~5 s) until every link is up (carrier on both veth ends, bridge port
# forwarding), and, when ping is installed, until every host reaches every other one.
for i in 1 2 3; do
    ok=0
    for _ in $(seq 1 50); do
        if ip -n "$P-h$i" link show eth0 | grep -q 'state UP' &&
            ip -n "$P-br" link show "vh$i" | grep -q 'state UP'; then ok=1; break; fi
        sleep 0.1
    done
    [ "$ok" = 1 ] || { echo "setup.sh: the link of $P-h$i did not come up:" >&2; ip -n "$P-h$i" link show eth0 >&2; exit 1; }
done
if command -v ping >/dev/null 2>&1; then
    for i in 1 2 3; do
        for j in 1 2 3; do
            [ "$i" = "$j" ] && continue
            ok=0
            for _ in 1 2 3 4 5 6 7 8 9 10; do
                if ip netns exec "$P-h$i" ping -c 1 -W 1 "$SUBNET.$j" >/dev/null 2>&1; then ok=1; break; fi
                sleep 0.5
            done
            [ "$ok" = 1 ] || { echo "setup.sh: $P-h$i cannot reach $SUBNET.$j" >&2; exit 1; }
        done
    done
fi

if [ -n "$DIR" ]; then
    mkdir -p "$DIR"
    printf '%s.1 slots=1\n%s.2 slots=1\n%s.3 slots=1\n' "$SUBNET" "$SUBNET" "$SUBNET" > "$DIR/hostfile"
fi
echo "setup.sh: hosts $P-h1..3 = $SUBNET.1..3 on bridge br0 in $P-br"
