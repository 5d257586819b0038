//! Turns a topology node into QEMU arguments: the PCIe tree (root ports, switch ports) with
//! a `vfio-user-pci` device per function, plus the machine around it (q35, TCG, guest RAM
//! in a shared memfd so the server can DMA into it, two serial ports: console and output),
//! and the node's own QEMU NIC on the fabric's segment if it has one (`nic`).

use rnic_emu_core::platform::topology::{GuestNic, Node, PortKind, Topology};
use rnic_emu_server::fabric::segment::SegmentAddr;
use serde_json::json;
use std::path::Path;

/// Where a booted guest's files are.
pub struct GuestFiles<'a> {
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    /// Serial port 0: the kernel console.
    pub console_log: &'a Path,
    /// Serial port 1: the guest command's output (see images/init.sh).
    pub output_log: &'a Path,
    /// Serial port 2: the run's rendezvous store (a Unix socket QEMU connects to).
    pub kv_socket: Option<&'a Path>,
    /// The fabric's segment, which the node's `nic` joins ([`nic_args`]; None: the guest
    /// gets no `nic`).
    pub segment: Option<SegmentAddr>,
}

/// The `-netdev`/`-device` pair of a node's QEMU NIC on the segment, with QEMU's own
/// backends: `-netdev dgram` on a multicast segment (its framing), `-netdev tap` on a TAP
/// segment (the TAP device, which the host bridges or routes). Err for a VXLAN segment,
/// saying what to do instead: QEMU has no VXLAN backend.
pub fn nic_args(topo: &Topology, index: usize, segment: &SegmentAddr) -> Result<Vec<String>, String> {
    let Some(GuestNic::VirtioNet) = topo.nodes[index].nic else { return Ok(Vec::new()) };
    let m = Node::nic_mac(topo.address(index));
    let mac = m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":");
    // On a TAP the guest computes its own checksums (csum=off; TSO goes with it): a frame
    // with a checksum left to offload would reach the host's stack unfinished, and a
    // bridge, vxlan and veth pass it on so to the far end, as no wire would.
    let (netdev, offload) = match segment {
        SegmentAddr::Multicast(m) => (m.qemu_netdev("fabric"), ""),
        SegmentAddr::Tap(name) => (format!("tap,id=fabric,ifname={name},script=no,downscript=no"), ",csum=off"),
        SegmentAddr::Vxlan(_) => {
            return Err(format!(
                "{}: QEMU has no VXLAN backend for the node's nic: give it a TAP segment (a TAP in a bridge with Linux's vxlan device; docs/fabric.md)",
                topo.nodes[index].name
            ))
        }
    };
    Ok(vec!["-netdev".into(), netdev, "-device".into(), format!("virtio-net-pci,netdev=fabric,romfile=,mac={mac}{offload}")])
}

/// The `-device` arguments of a node's PCIe tree and functions. Users who bring their own
/// QEMU command line can take just these (`rnic-emu qemu-args --devices-only`).
pub fn device_args(node: &Node, socket_dir: &Path) -> Vec<String> {
    let mut args = Vec::new();
    let mut chassis = 0u32;
    let mut root_slot = 3u32; // 00:00 host bridge, 00:1f LPC/SATA/SMBus on q35
    let mut downstream_index = std::collections::HashMap::<&str, u32>::new();
    for port in &node.ports {
        chassis += 1;
        let arg = match port.kind {
            PortKind::RootPort => {
                let a = format!("pcie-root-port,id={},bus=pcie.0,addr={:#x}.0,chassis={chassis},slot=0", port.id, root_slot);
                root_slot += 1;
                a
            }
            PortKind::SwitchUpstream => {
                format!("x3130-upstream,id={},bus={}", port.id, port.parent.as_deref().unwrap_or(""))
            }
            PortKind::SwitchDownstream => {
                let parent = port.parent.as_deref().unwrap_or("");
                let n = downstream_index.entry(parent).or_insert(0);
                let a = format!("xio3130-downstream,id={},bus={parent},addr={n}.0,port={n},chassis={chassis},slot=0", port.id);
                *n += 1;
                a
            }
        };
        args.push("-device".into());
        args.push(arg);
    }
    for dev in &node.devices {
        let mut d = json!({
            "driver": "vfio-user-pci",
            "id": dev.id,
            "bus": dev.port,
            "addr": format!("00.{}", dev.function),
            "socket": { "type": "unix", "path": socket_dir.join(node.socket_name(dev)) },
        });
        if dev.function == 0 && node.is_multifunction_slot(dev) {
            d["multifunction"] = json!(true);
        }
        args.push("-device".into());
        args.push(d.to_string());
    }
    args
}

/// The whole QEMU argument list (without the binary) for node `index` of `topo`.
pub fn command_line(topo: &Topology, index: usize, socket_dir: &Path, files: &GuestFiles) -> Vec<String> {
    let g = &topo.guest;
    let node = &topo.nodes[index];
    // no_timer_check: the kernel's check that the timer interrupt arrives within a few
    // calibrated delay loops fails under TCG on a loaded host (no vCPU time, no tick) and
    // panics "IO-APIC + timer doesn't work!"; QEMU's timer does work.
    let mut append = format!("console=ttyS0 panic=-1 oops=panic no_timer_check rnic_emu.node={index}");
    if !g.kernel_args.is_empty() {
        append.push(' ');
        append.push_str(&g.kernel_args);
    }
    let mut args: Vec<String> = vec![
        "-name".into(),
        format!("rnic-emu-{}-{}", topo.name, node.name),
        "-machine".into(),
        "q35,accel=tcg,memory-backend=mem".into(),
        "-object".into(),
        format!("memory-backend-memfd,id=mem,size={}M,share=on", g.memory_mib),
        "-m".into(),
        format!("{}M", g.memory_mib),
        "-smp".into(),
        g.cpus.to_string(),
        "-cpu".into(),
        g.cpu.clone(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-no-reboot".into(),
        "-serial".into(),
        format!("file:{}", files.console_log.display()),
        "-serial".into(),
        format!("file:{}", files.output_log.display()),
        "-kernel".into(),
        files.kernel.display().to_string(),
        "-initrd".into(),
        files.initrd.display().to_string(),
        "-append".into(),
        append,
    ];
    if let Some(kv) = files.kv_socket {
        args.push("-chardev".into());
        args.push(format!("socket,id=kv,path={}", kv.display()));
        args.push("-serial".into());
        args.push("chardev:kv".into());
    }
    args.extend(device_args(node, socket_dir));
    if let Some(segment) = &files.segment {
        args.extend(nic_args(topo, index, segment).unwrap_or_default());
    }
    args.extend(g.qemu_args.iter().cloned());
    args.extend(node.qemu_args.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn switch_topology_arguments() {
        let t = Topology::parse(rnic_emu_core::platform::topology::samples::SWITCH, "t").unwrap();
        let args = device_args(&t.nodes[0], Path::new("/s"));
        assert_eq!(args[1], "pcie-root-port,id=rp0,bus=pcie.0,addr=0x3.0,chassis=1,slot=0");
        assert_eq!(args[3], "x3130-upstream,id=up,bus=rp0");
        assert_eq!(args[5], "xio3130-downstream,id=dn0,bus=up,addr=0.0,port=0,chassis=3,slot=0");
        assert_eq!(args[7], "xio3130-downstream,id=dn1,bus=up,addr=1.0,port=1,chassis=4,slot=0");
        let rnic: serde_json::Value = serde_json::from_str(&args[9]).unwrap();
        assert_eq!(rnic["bus"], "dn0");
        assert_eq!(rnic["socket"]["path"], "/s/node0-rnic0.sock");
        assert!(rnic.get("multifunction").is_none());
    }

    #[test]
    fn multifunction_slot_sets_the_flag_on_function_zero() {
        let t = Topology::parse(rnic_emu_core::platform::topology::samples::MULTIFUNCTION, "t").unwrap();
        let args = device_args(&t.nodes[0], Path::new("/s"));
        let gpu: serde_json::Value = serde_json::from_str(&args[3]).unwrap();
        let rnic: serde_json::Value = serde_json::from_str(&args[5]).unwrap();
        assert_eq!((gpu["addr"].as_str(), gpu["multifunction"].as_bool()), (Some("00.0"), Some(true)));
        assert_eq!((rnic["addr"].as_str(), rnic.get("multifunction")), (Some("00.1"), None));
    }
}
