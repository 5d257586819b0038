#!/bin/sh
# rnic-netdev-up: puts each RNIC's fabric address (sysfs `ipv4` of the PCI function,
# RNIC_REG_IPV4) on the RNIC's netdev (rethN, guest-driver/rnic_netdev.c) and brings it up,
# so that the RDMA core lists the RoCEv2 GID ::ffff:<address> for the rnicN device.
# The guest's /init runs it after loading rnic_emu; tests that load the driver later run it
# themselves. The netdev carries no IP traffic (docs/ibverbs.md).
rc=0
for n in /sys/class/net/*; do
    [ -f "$n/device/ipv4" ] || continue
    dev=${n##*/}
    addr=$(cat "$n/device/ipv4")
    ip link set "$dev" up || rc=1
    if [ "$addr" != 0.0.0.0 ] && ! ip -4 addr show dev "$dev" | grep -q "inet $addr/"; then
        ip addr add "$addr/32" dev "$dev" || rc=1
    fi
done
exit $rc
