//! Guest-level tests: boot each topology once under QEMU (TCG) through `rnic-emu run`, and
//! check what the guest really saw and did: where each function sits in the PCIe tree, the
//! driver bound to both, BAR1's size, data written through BAR1 arriving in the server's
//! shared memory (and the reverse), MSI-X self-tests, and 20 driver reloads.

mod common;
use common::*;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;

const MIB: u64 = 1 << 20;
const HOST_SEED: u32 = 0x1234_abcd;
const GUEST_SEED: u32 = 0x0005_eed5;

/// Checks the rnic-status sections both topologies share; returns (rnic, gpu) sections.
fn check_functions(stdout: &str, bar1_size: u64) -> ((String, String), (String, String)) {
    let sections = status_sections(stdout);
    let kinds: Vec<&str> = sections.iter().map(|(k, _, _)| k.as_str()).collect();
    assert_eq!(kinds, ["rnic", "gpu"], "exactly one RNIC and one GPU");
    let (_, rnic_bdf, rnic) = &sections[0];
    let (_, gpu_bdf, gpu) = &sections[1];
    assert_eq!(value(rnic, "ids"), "0x1234:0x52e1 class 0x020000");
    assert_eq!(value(gpu, "ids"), "0x1234:0x52e2 class 0x030200");
    assert_eq!(value(rnic, "driver"), "rnic_emu");
    assert_eq!(value(gpu, "driver"), "rnic_emu_gpu");
    assert_eq!(value(rnic, "hw_id"), "0x524e4943", "RNIC_REG_ID as the driver read it");
    assert_eq!(value(gpu, "hw_id"), "0x52475055");
    assert_eq!(value(rnic, "hw_version"), contract_version());
    assert_eq!(value(gpu, "mem_size"), bar1_size.to_string());
    assert_eq!(value(rnic, "irq_counts_after_self_test"), "1 1 1 1 1 1 1 1", "every MSI-X vector fired once");
    assert_eq!(value(gpu, "irq_counts_after_self_test"), "1 1");
    ((rnic_bdf.clone(), rnic.clone()), (gpu_bdf.clone(), gpu.clone()))
}

fn upstream_ports(section: &str) -> Vec<String> {
    value(section, "upstream ports").split_whitespace().map(String::from).collect()
}

/// The vendor:device of an upstream port, from the indented lines under "upstream ports".
fn port_ids(section: &str, port: &str) -> String {
    section.lines().find_map(|l| l.trim_start().strip_prefix(port).map(|r| r.split_whitespace().next().unwrap_or("").to_string())).unwrap_or_default()
}

/// "major.minor" of the register contract, as the driver prints it.
fn contract_version() -> String {
    let v = rnic_emu_core::regs::CONTRACT_VERSION;
    format!("{}.{}", v >> 16, v & 0xffff)
}

const XIO3130_DOWNSTREAM: &str = "0x104c:0x8233";
const XIO3130_UPSTREAM: &str = "0x104c:0x8232";
const QEMU_ROOT_PORT: &str = "0x1b36:0x000c";

#[test]
fn single_switch_topology_driver_bar1_and_reloads() {
    let bar1 = 256 * MIB;
    let mem_dir = tempfile::tempdir().unwrap();
    // The host writes a pattern into GPU memory before boot; the guest must read it.
    let backing = mem_dir.path().join("node0-gpu0.bar1");
    let f = OpenOptions::new().create(true).truncate(true).read(true).write(true).open(&backing).unwrap();
    f.set_len(bar1).unwrap();
    f.write_all_at(&pattern(HOST_SEED, MIB, MIB as usize), MIB).unwrap();
    drop(f);

    let ver = contract_version();
    let script = format!(
        "rnic-status; echo status_rc: $?
         echo dmesg_rnic_id_logged: $(dmesg | grep -c 'rnic-emu RNIC: id 0x524e4943 version {ver}, 8 MSI-X vectors')
         echo dmesg_gpu_id_logged: $(dmesg | grep -c 'rnic-emu GPU: id 0x52475055 version {ver}, 2 MSI-X vectors')
         gpu=$(rnic-bar find gpu)
         set -- $(sed -n 2p /sys/bus/pci/devices/$gpu/resource)
         echo bar1_resource_size: $(( $2 - $1 + 1 ))
         echo host_pattern: $(rnic-bar pattern-check gpu 1 1M 1M {HOST_SEED:#x})
         echo guest_write: $(rnic-bar pattern-write gpu 1 8M 4M {GUEST_SEED:#x})
         i=0; while [ $i -lt 20 ]; do rmmod rnic_emu && modprobe rnic_emu || break; i=$((i+1)); done
         echo reloads: $i
         echo probes_logged: $(dmesg | grep -c 'rnic-emu RNIC: id 0x524e4943')
         echo kernel_warnings: $(dmesg | grep -c -E 'WARNING|BUG:|Call Trace|refcount')
         echo rnic_driver_after_reloads: $(basename $(readlink /sys/bus/pci/devices/$(rnic-bar find rnic)/driver))
         echo gpu_driver_after_reloads: $(basename $(readlink /sys/bus/pci/devices/$gpu/driver))
         echo 1 > /sys/bus/pci/devices/$gpu/irq_test && echo irq_after_reloads: $(cat /sys/bus/pci/devices/$gpu/irq_counts)"
    );
    let mem_arg = mem_dir.path().to_str().unwrap();
    let run = run_guest(&topology("single-switch"), &["--gpu-mem-dir", mem_arg], &script);
    assert_eq!(run.code, Some(0), "guest command failed");
    let out = &run.stdout;
    assert_eq!(value(out, "status_rc"), "0");

    // lspci -t: both functions below the switch's two downstream ports.
    assert!(out.contains("+-00.0-[03]----00.0  Device 1234:52e1"), "RNIC under downstream port 0");
    assert!(out.contains("\\-01.0-[04]----00.0  Device 1234:52e2"), "GPU under downstream port 1");
    let ((_, rnic), (_, gpu)) = check_functions(out, bar1);
    let (rp, gp) = (upstream_ports(&rnic), upstream_ports(&gpu));
    assert_eq!((rp.len(), gp.len()), (3, 3), "downstream port, upstream port, root port");
    assert_ne!(rp[0], gp[0], "different downstream ports");
    assert_eq!(rp[1..], gp[1..], "the same switch and root port");
    assert_eq!(port_ids(&rnic, &rp[0]), XIO3130_DOWNSTREAM);
    assert_eq!(port_ids(&gpu, &gp[0]), XIO3130_DOWNSTREAM);
    assert_eq!(port_ids(&rnic, &rp[1]), XIO3130_UPSTREAM);
    assert_eq!(port_ids(&rnic, &rp[2]), QEMU_ROOT_PORT);

    assert_eq!(value(out, "dmesg_rnic_id_logged"), "1");
    assert_eq!(value(out, "dmesg_gpu_id_logged"), "1");
    assert_eq!(value(out, "bar1_resource_size"), bar1.to_string());
    assert_eq!(value(out, "host_pattern"), "ok 1048576 bytes", "guest reads what the host wrote");
    assert_eq!(value(out, "guest_write"), "wrote 4194304 bytes");

    // What the guest wrote through BAR1 is in the server's shared memory, and nothing more.
    let f = std::fs::File::open(&backing).unwrap();
    let mut got = vec![0u8; 4 * MIB as usize];
    f.read_exact_at(&mut got, 8 * MIB).unwrap();
    let want = pattern(GUEST_SEED, 8 * MIB, 4 * MIB as usize);
    let bad = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(bad, 0, "{bad} bytes differ in the GPU memory the guest wrote");
    let mut around = vec![0xffu8; 4096];
    f.read_exact_at(&mut around, 12 * MIB).unwrap();
    assert!(around.iter().all(|&b| b == 0), "bytes after the guest's write stay zero");
    f.read_exact_at(&mut around, 8 * MIB - 4096).unwrap();
    assert!(around.iter().all(|&b| b == 0), "bytes before the guest's write stay zero");

    assert_eq!(value(out, "reloads"), "20");
    assert_eq!(value(out, "probes_logged"), "21", "one probe at boot plus 20 reloads");
    assert_eq!(value(out, "kernel_warnings"), "0");
    assert_eq!(value(out, "rnic_driver_after_reloads"), "rnic_emu");
    assert_eq!(value(out, "gpu_driver_after_reloads"), "rnic_emu_gpu");
    assert_eq!(value(out, "irq_after_reloads"), "0 1", "counters restart at probe; vector 1 fired");
}

#[test]
fn separate_root_ports_topology() {
    let mem_dir = tempfile::tempdir().unwrap();
    let script = format!(
        "rnic-status; echo status_rc: $?
         echo guest_write: $(rnic-bar pattern-write gpu 1 0 64K {GUEST_SEED:#x})"
    );
    let mem_arg = mem_dir.path().to_str().unwrap();
    let run = run_guest(&topology("separate-root-ports"), &["--gpu-mem-dir", mem_arg], &script);
    assert_eq!(run.code, Some(0), "guest command failed");
    let out = &run.stdout;
    assert_eq!(value(out, "status_rc"), "0");
    let ((_, rnic), (_, gpu)) = check_functions(out, 256 * MIB);
    let (rp, gp) = (upstream_ports(&rnic), upstream_ports(&gpu));
    assert_eq!((rp.len(), gp.len()), (1, 1), "directly below a root port each");
    assert_ne!(rp[0], gp[0], "different root ports");
    assert_eq!(port_ids(&rnic, &rp[0]), QEMU_ROOT_PORT);
    assert_eq!(port_ids(&gpu, &gp[0]), QEMU_ROOT_PORT);
    assert!(!out.contains("XIO3130"), "no switch in this topology");
    assert_eq!(value(out, "guest_write"), "wrote 65536 bytes");
    let got = std::fs::read(mem_dir.path().join("node0-gpu0.bar1")).unwrap();
    assert_eq!(got.len() as u64, 256 * MIB);
    assert!(got[..65536] == pattern(GUEST_SEED, 0, 65536)[..], "guest BAR1 writes reach the server's memory");
}

#[test]
fn run_reports_the_guest_exit_code_and_output() {
    let run = run_guest(&topology("single-switch"), &["--no-driver"], "echo out-line; echo err-line >&2; lsmod | grep -c rnic_emu; exit 7");
    assert_eq!(run.code, Some(7));
    assert_eq!(run.stdout, "out-line\nerr-line\n0\n", "stdout and stderr of the command, driver not loaded");
}
