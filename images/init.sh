#!/bin/sh
# /init of the rnic-emu guest (PID 1, busybox sh).
#
# Protocol with the host (`rnic-emu run`, device/src/run.rs): the host appends a second cpio
# archive holding /rnic-emu/cmd.sh (the command to run) and /rnic-emu/env (settings). The
# command's stdout and stderr go to the second serial port (ttyS1), raw; then one line
# "@@RNIC-EMU-EXIT@@ <code>" and the guest powers off. Kernel messages stay on ttyS0.
# Without /rnic-emu/cmd.sh the guest starts an interactive shell on the console.
export PATH=/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
hostname rnic-guest
ln -sf /proc/self/fd /dev/fd

RNIC_EMU_LOAD_DRIVER=1
[ -f /rnic-emu/env ] && . /rnic-emu/env

out=/dev/ttyS1
[ -c "$out" ] || out=/dev/console
stty -F "$out" raw -echo 2>/dev/null

if [ "$RNIC_EMU_LOAD_DRIVER" = 1 ]; then
    if modprobe rnic_emu; then
        rnic-netdev-up
    else
        echo "rnic-emu guest: loading the rnic_emu driver failed (see the console log)" >"$out"
    fi
fi

# The loopback device, for what a guest says to itself (a store it serves on its own
# address, rnic-kv serve); left down where a fabric address is in 127.0.0.0/8, which
# rnic-netdev-up routes through rethN instead.
ip -4 addr show | grep -q 'inet 127\.' || ip link set lo up

if [ -f /rnic-emu/cmd.sh ]; then
    cd /root
    sh /rnic-emu/cmd.sh </dev/null >"$out" 2>&1
    rc=$?
    echo "@@RNIC-EMU-EXIT@@ $rc" >"$out"
    sync
    poweroff -f
fi

echo "rnic-emu guest: no command given; interactive shell (exit powers off)"
setsid cttyhack sh
poweroff -f
