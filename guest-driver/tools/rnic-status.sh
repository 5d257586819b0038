#!/bin/sh
# rnic-status: what the guest sees of the emulated RNIC and GPU: the PCIe tree, where each
# function sits, its driver, identification and BARs, and an MSI-X self-test per vector.
# Output is "key: value" lines, stable enough for scripts to grep.

echo "== PCIe tree"
lspci -tv

status=0
for kind in rnic gpu; do
    for bdf in $(rnic-bar find "$kind" 2>/dev/null); do
        dev=/sys/bus/pci/devices/$bdf
        echo "== $kind $bdf"
        echo "ids: $(cat "$dev/vendor"):$(cat "$dev/device") class $(cat "$dev/class")"
        # Ports between the function and the host bridge, nearest first.
        path=$(readlink -f "$dev" | tr '/' '\n' | grep -E '^[0-9a-f]{4}:' | grep -v "^$bdf\$" | tac | tr '\n' ' ')
        echo "upstream ports: $path"
        for port in $path; do
            echo "  $port $(cat /sys/bus/pci/devices/$port/vendor):$(cat /sys/bus/pci/devices/$port/device) $(lspci -s "$port" | cut -d' ' -f2-)"
        done
        if [ -e "$dev/driver" ]; then
            echo "driver: $(basename "$(readlink "$dev/driver")")"
        else
            echo "driver: none"
            status=1
            continue
        fi
        echo "hw_id: $(cat "$dev/hw_id")"
        echo "hw_version: $(cat "$dev/hw_version")"
        [ -e "$dev/mem_size" ] && echo "mem_size: $(cat "$dev/mem_size")"
        [ -e "$dev/mem_bus_addr" ] && echo "mem_bus_addr: $(cat "$dev/mem_bus_addr")"
        n=0
        for _ in $(cat "$dev/irq_counts"); do
            if echo "$n" > "$dev/irq_test"; then :; else status=1; fi
            n=$((n + 1))
        done
        echo "msix_vectors: $n"
        echo "irq_counts_after_self_test: $(cat "$dev/irq_counts")"
    done
done
exit $status
