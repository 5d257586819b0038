//! Guest-level tests of the standard RDMA stack on rnic-emu (docs/ibverbs.md): the guest
//! driver registers each RNIC with the kernel's RDMA core as `rnicN`, and libibverbs loads
//! our rdma-core provider for it (guest-driver/provider/, built inside Debian's rdma-core
//! source by images/build.sh). Unmodified rdma-core tools run in two guests of the two-node
//! topology (`ibv_devices`, `ibv_devinfo`, `ibv_rc_pingpong` through the provider's kernel-
//! bypass data path), and the host checks what they printed against each node's address.

mod common;
use common::*;

/// Each guest's output lines ("[nodeN] ..." prefix removed), whitespace runs as one space.
fn node_lines(stdout: &str, node: usize) -> Vec<String> {
    let prefix = format!("[node{node}] ");
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Device listing, then `ibv_rc_pingpong` (node0 server, node1 client) over the two-node
/// virtio-net link for its TCP exchange, each side validating the received buffers (`-c`):
/// once polling, once sleeping on completion events (`-e`: req_notify_cq and the CQ's
/// interrupt through ib_core's completion channel).
fn script(node: usize) -> String {
    let mut s = String::from(
        "ibv_devices || echo failed: ibv_devices
        ibv_devinfo -v -d rnic0 || echo failed: ibv_devinfo
        p=/sys/class/infiniband/rnic0/ports/1
        echo \"sysfs-gid1: $(cat $p/gids/1) $(cat $p/gid_attrs/types/1) $(cat $p/gid_attrs/ndevs/1)\"
        echo \"sysfs-parent: $(basename $(readlink -f /sys/class/infiniband/rnic0/device))\"
        echo \"pci-rnic: $(rnic-bar find rnic)\"
        modprobe virtio_net || echo failed: virtio_net
        ip link set eth0 up && ip addr add 10.9.0.$((NODE+1))/24 dev eth0 || echo failed: eth0
        ",
    )
    .replace("NODE", &node.to_string());
    for (id, extra) in [("poll", ""), ("events", " -e")] {
        let pp = format!("ibv_rc_pingpong -d rnic0 -g 1 -c -n 200 -s 4096{extra}");
        if node == 0 {
            s += &format!(
                "{pp} > /tmp/pp-{id} 2>&1 & pid=$!; sleep 2; rnic-kv put pp-{id} up
                 wait $pid; echo \"pp-{id}-rc: $?\"; sed 's/^/pp-{id}: /' /tmp/pp-{id}\n"
            );
        } else {
            s += &format!(
                "rnic-kv get pp-{id} 120000 >/dev/null
                 {pp} 10.9.0.1 > /tmp/pp-{id} 2>&1; echo \"pp-{id}-rc: $?\"; sed 's/^/pp-{id}: /' /tmp/pp-{id}\n"
            );
        }
    }
    s
}

#[test]
fn devinfo_and_rc_pingpong_between_two_guests() {
    ensure_image();
    let out = std::process::Command::new(bin())
        .args(["run", "--no-build", "--timeout", "900", "--topology"])
        .arg(topology("two-node"))
        .args(["--on", "0", &script(0), "--on", "1", &script(1)])
        .output()
        .expect("rnic-emu run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "both guests ran their script");
    assert!(!stdout.contains("failed:"), "a guest command failed");

    let addrs = ["127.0.0.11", "127.0.0.12"];
    for (node, addr) in addrs.iter().enumerate() {
        let lines = node_lines(&stdout, node);
        let has = |want: &str| lines.iter().any(|l| l == want);
        let has_prefix = |want: &str| lines.iter().any(|l| l.starts_with(want));
        // ibv_devices and ibv_devinfo found the device through our provider (PCI match).
        assert!(has_prefix("rnic0 "), "node{node}: ibv_devices lists rnic0");
        assert!(has("hca_id: rnic0"), "node{node}");
        assert!(has("transport: InfiniBand (0)"), "node{node}: transport");
        assert!(has("vendor_id: 0x1234"), "node{node}: vendor");
        assert!(has("vendor_part_id: 21217"), "node{node}: device 0x52e1");
        assert!(has("state: PORT_ACTIVE (4)"), "node{node}: port state");
        assert!(has("link_layer: Ethernet"), "node{node}: link layer");
        // Device attributes are the driver's (rnic_ib.c): the WQE's SGE limit, no atomics.
        assert!(has("max_sge: 14") && has("atomic_cap: ATOMIC_NONE (0)"), "node{node}: device attributes");
        // The RoCEv2 GID of the node's fabric address, from the netdev ib_core tied to the port.
        let gid = format!("::ffff:{addr}, RoCE v2");
        assert!(lines.iter().any(|l| l.starts_with("GID[") && l.ends_with(&gid)), "node{node}: GID {gid}");
        let v4 = addr.split('.').map(|b| b.parse::<u8>().unwrap()).collect::<Vec<_>>();
        let sysfs_gid = format!(
            "sysfs-gid1: 0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x} RoCE v2 reth0",
            v4[0], v4[1], v4[2], v4[3]
        );
        assert!(has(&sysfs_gid), "node{node}: {sysfs_gid}");
        // The RDMA device is the RNIC's PCI function.
        let pci = lines.iter().find_map(|l| l.strip_prefix("pci-rnic: ")).expect("rnic-bar find rnic");
        assert!(has(&format!("sysfs-parent: {pci}")), "node{node}: rnic0's parent is {pci}");

        // ibv_rc_pingpong: both runs completed their 200 round trips of 4 KiB (it counts both
        // directions) with every received buffer validated (-c exits non-zero on a
        // mismatch), each side addressing the other by its RoCE v2 GID.
        let peer = addrs[1 - node];
        for id in ["poll", "events"] {
            assert!(has(&format!("pp-{id}-rc: 0")), "node{node}: ibv_rc_pingpong ({id}) exit status");
            assert!(has_prefix(&format!("pp-{id}: 1638400 bytes in ")), "node{node}: {id}: bytes moved");
            assert!(has_prefix(&format!("pp-{id}: 200 iters in ")), "node{node}: {id}: iterations");
            assert!(
                lines.iter().any(|l| l.starts_with(&format!("pp-{id}: local address: ")) && l.ends_with(&format!("GID ::ffff:{addr}"))),
                "node{node}: {id}: local GID"
            );
            assert!(
                lines.iter().any(|l| l.starts_with(&format!("pp-{id}: remote address: ")) && l.ends_with(&format!("GID ::ffff:{peer}"))),
                "node{node}: {id}: remote GID"
            );
        }
    }
}
