#!/bin/sh
# rnic-netdev-up: puts each RNIC's fabric address (sysfs `ipv4` of the PCI function,
# RNIC_REG_IPV4) on the RNIC's netdev (rethN, guest-driver/rnic_netdev.c) and brings it up,
# so that the RDMA core lists the RoCEv2 GID ::ffff:<address> for the rnicN device.
# The guest's /init runs it after loading rnic_emu; tests that load the driver later run it
# themselves. `ip link set up` opens the netdev (its rings on the device's Ethernet port,
# contract 1.7); the carrier follows the port's link (ETH_LINK).
#
# The other nodes' addresses must be routable through rethN: the RDMA core resolves a
# destination GID's address to a neighbour on the source GID's netdev before it lets a QP
# reach RTR. Fabric addresses in 127.0.0.0/8 (the topologies' defaults) get that whole net
# on rethN with route_localnet (the guest's own loopback device stays down); others a /24.
rc=0
for n in /sys/class/net/*; do
    [ -f "$n/device/ipv4" ] || continue
    dev=${n##*/}
    addr=$(cat "$n/device/ipv4")
    ip link set "$dev" up || rc=1
    [ "$addr" = 0.0.0.0 ] && continue
    prefix=24
    case $addr in
        127.*) prefix=8; echo 1 > "/proc/sys/net/ipv4/conf/$dev/route_localnet" || rc=1 ;;
    esac
    if ! ip -4 addr show dev "$dev" | grep -q "inet $addr/"; then
        ip addr add "$addr/$prefix" dev "$dev" || rc=1
    fi
done
exit $rc
