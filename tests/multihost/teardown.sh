#!/bin/sh
# Remove what setup.sh PREFIX made: end the processes still inside those namespaces (only
# processes that the tests started there can be inside them), then delete the namespaces
# (which deletes their veths and the bridge). Safe to run when nothing is there.
#   tests/multihost/teardown.sh PREFIX
set -u
P=${1:?usage: teardown.sh PREFIX}
for ns in "$P-h1" "$P-h2" "$P-h3" "$P-br"; do
    [ -e "/run/netns/$ns" ] || [ -e "/var/run/netns/$ns" ] || continue
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [ -n "$pids" ]; then
        # shellcheck disable=SC2086
        kill -9 $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
done
exit 0
