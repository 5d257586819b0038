#!/bin/sh
# rnic-gid DEVICE ADDRESS: prints the index of DEVICE's RoCE v2 GID for ADDRESS, for
# perftest's -x and ibv_rc_pingpong's -g; works for any RDMA device (rnic0, rxe0). An IPv4
# ADDRESS a.b.c.d names the GID ::ffff:a.b.c.d, an IPv6 one (with a ':', "::" allowed) the
# GID that is that address; ib_core lists it once ADDRESS is on the device's netdev. Waits
# up to 60 s for the entry (ib_core adds it shortly after the address); exit 1 if none.
dev=$1 addr=$2
[ -n "$dev" ] && [ -n "$addr" ] || { echo "usage: rnic-gid DEVICE IPV4-OR-IPV6-ADDRESS" >&2; exit 2; }
case "$addr" in
*:*)
    # The full form sysfs prints: eight groups of four lower-case hex digits.
    want=$(echo "$addr" | awk -F'::' '{
        nl = ($1 == "") ? 0 : split($1, l, ":"); nr = (NF > 1 && $2 != "") ? split($2, r, ":") : 0
        out = ""
        for (i = 1; i <= nl; i++) out = out substr("0000" l[i], length(l[i]) + 1) ":"
        for (i = 0; i < 8 - nl - nr; i++) out = out "0000:"
        for (i = 1; i <= nr; i++) out = out substr("0000" r[i], length(r[i]) + 1) ":"
        print tolower(substr(out, 1, length(out) - 1)) }')
    ;;
*)
    want="0000:0000:0000:0000:0000:ffff:$(echo "$addr" | awk -F. '{ printf "%02x%02x:%02x%02x", $1, $2, $3, $4 }')"
    ;;
esac
port=/sys/class/infiniband/$dev/ports/1
n=0
while [ $n -lt 600 ]; do
    for f in "$port"/gids/*; do
        i=${f##*/}
        if [ "$(cat "$f" 2>/dev/null)" = "$want" ] &&
           [ "$(cat "$port/gid_attrs/types/$i" 2>/dev/null)" = "RoCE v2" ]; then
            echo "$i"
            exit 0
        fi
    done
    n=$((n + 1))
    sleep 0.1
done
echo "rnic-gid: $dev has no RoCE v2 GID for $addr" >&2
exit 1
