//! Guest-level tests of the standard RDMA stack on rnic-emu (docs/ibverbs.md): the guest
//! driver registers each RNIC with the kernel's RDMA core as `rnicN`, and libibverbs loads
//! our rdma-core provider for it (guest-driver/provider/, built inside Debian's rdma-core
//! source by images/build.sh). Unmodified rdma-core tools run in two guests of the two-node
//! topology, and the host checks what they printed against each node's fabric address.

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

#[test]
fn ibv_devinfo_lists_the_rnic_with_its_roce_v2_gid() {
    ensure_image();
    let script = "ibv_devices || echo failed: ibv_devices
        ibv_devinfo -v -d rnic0 || echo failed: ibv_devinfo
        p=/sys/class/infiniband/rnic0/ports/1
        echo \"sysfs-gid1: $(cat $p/gids/1) $(cat $p/gid_attrs/types/1) $(cat $p/gid_attrs/ndevs/1)\"
        echo \"sysfs-parent: $(basename $(readlink -f /sys/class/infiniband/rnic0/device))\"
        echo \"pci-rnic: $(rnic-bar find rnic)\"";
    let out = std::process::Command::new(bin())
        .args(["run", "--no-build", "--timeout", "600", "--topology"])
        .arg(topology("two-node"))
        .args(["--on", "0", script, "--on", "1", script])
        .output()
        .expect("rnic-emu run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "both guests ran their script");
    assert!(!stdout.contains("failed:"), "an rdma-core tool failed");

    for (node, addr) in [(0, "127.0.0.11"), (1, "127.0.0.12")] {
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
    }
}
