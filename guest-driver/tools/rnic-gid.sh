#!/bin/sh
# rnic-gid DEVICE ADDRESS: prints the index of DEVICE's RoCE v2 GID for the IPv4 ADDRESS
# (the GID ::ffff:ADDRESS that ib_core lists once ADDRESS is on the device's netdev), for
# perftest's -x and ibv_rc_pingpong's -g; works for any RDMA device (rnic0, rxe0). Waits up
# to 60 s for the entry (ib_core adds it shortly after the address); exit 1 if none.
dev=$1 addr=$2
[ -n "$dev" ] && [ -n "$addr" ] || { echo "usage: rnic-gid DEVICE IPV4-ADDRESS" >&2; exit 2; }
hex=$(echo "$addr" | awk -F. '{ printf "%02x%02x:%02x%02x", $1, $2, $3, $4 }')
port=/sys/class/infiniband/$dev/ports/1
n=0
while [ $n -lt 600 ]; do
    for f in "$port"/gids/*; do
        i=${f##*/}
        case "$(cat "$f" 2>/dev/null)" in
        *ffff:$hex)
            [ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ] && { echo "$i"; exit 0; } ;;
        esac
    done
    n=$((n + 1))
    sleep 0.1
done
echo "rnic-gid: $dev has no RoCE v2 GID for $addr" >&2
exit 1
