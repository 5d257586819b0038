//! Guest-level fault tests: QEMU killed (SIGKILL) while its guest streams 4 MiB RDMA WRITEs
//! host -> GPU and GPU -> GPU, five times against the same `rnic-emu serve` process; then a
//! sixth guest on that server runs verified transfers. The server's open file descriptors
//! and memory mappings do not grow from cycle to cycle.
//!
//! The server runs on its own (hostdrv::ServerProcess) so that it outlives each QEMU; QEMU
//! is started here with the command line `rnic-emu run` uses (qemu::command_line).

mod common;
use common::*;
use rnic_emu_core::platform::topology::Topology;
use rnic_emu_testkit::hostdrv::ServerProcess;
use std::path::Path;
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

/// (open fds, mapping lines) of a process.
fn footprint(pid: u32) -> (usize, usize) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
    (fds, maps(pid).len())
}

/// A process's mappings: address range, permissions and what is mapped.
fn maps(pid: u32) -> Vec<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    text.lines().map(|l| l.split_whitespace().enumerate().filter(|(i, _)| ![2, 3, 4].contains(i)).map(|(_, w)| w).collect::<Vec<_>>().join(" ")).collect()
}

/// The mappings in `now` that `before` did not have, to name what grew.
fn new_mappings(before: &[String], now: &[String]) -> Vec<String> {
    now.iter().filter(|m| !before.contains(m)).cloned().collect()
}

fn counter(server: &ServerProcess, name: &str) -> u64 {
    let all = rnic_emu_server::serve::query_stats(&server.socket_dir, &server.node).unwrap();
    all["node0-rnic0"][name].as_u64().unwrap_or(0)
}

/// How many times the server has finished with a client of `function` (serve.rs logs a
/// line each time it has reset the function for the next one). A boot that stalled and
/// was started again is a client too, so the test compares this with the QEMU processes
/// it started, not with its cycle number.
fn clients_done(server: &ServerProcess, function: &str) -> usize {
    let log = std::fs::read_to_string(server.log_path()).unwrap_or_default();
    log.matches(&format!("node0-{function}: reset; waiting for the next client")).count()
}

/// Starts QEMU on node 0 of `topo` against the running server, the guest running `script`;
/// returns the process, the path of the guest's output and how many QEMUs it started.
fn boot(topo: &Topology, server: &ServerProcess, work: &Path, cycle: usize, script: &str) -> (Proc, std::path::PathBuf, usize) {
    let img = rnic_emu::image::ensure(false).unwrap();
    let initrd = work.join(format!("initrd-{cycle}.img"));
    rnic_emu::run::write_initrd(&img, &initrd, script, true).unwrap();
    let (console, output) = (work.join(format!("console-{cycle}.log")), work.join(format!("output-{cycle}.log")));
    let files = rnic_emu::qemu::GuestFiles { kernel: &img.kernel, initrd: &initrd, console_log: &console, output_log: &output, kv_socket: None, segment: None };
    let args = rnic_emu::qemu::command_line(topo, 0, &server.socket_dir, &files);
    let (qemu, started) = spawn_qemu_counting_boots(&img.qemu, &args, &console, &work.join(format!("qemu-{cycle}.log")));
    (qemu, output, started)
}

#[test]
fn qemu_killed_while_streaming_then_a_new_guest_is_served() {
    ensure_image();
    let work = tempfile::tempdir().unwrap();
    let path = topology("single-switch");
    let topo = Topology::load(&path).unwrap();
    let server = ServerProcess::start(Path::new(bin()), &path, work.path(), None).unwrap();
    let stream = "rnic-perf write -s 4M -n 1000000 --src host --dst gpu & rnic-perf write -s 4M -n 1000000 --src gpu --dst gpu & wait";
    let mut footprints = Vec::new();
    let mut clients = 0;
    let mut first_maps = Vec::new();
    let all_gone = |clients: usize| clients_done(&server, "rnic0") >= clients && clients_done(&server, "gpu0") >= clients;
    for cycle in 1..=5 {
        let (mut qemu, _, started) = boot(&topo, &server, work.path(), cycle, stream);
        clients += started;
        // Both streams running: host bytes grow (host -> GPU) and P2P bytes grow by more
        // than that (GPU -> GPU adds twice its size, host -> GPU once).
        let sample = || (counter(&server, "dma_host_bytes"), counter(&server, "dma_p2p_switch_bytes"));
        let deadline = Instant::now() + Duration::from_secs(240);
        let both = loop {
            assert!(Instant::now() < deadline, "cycle {cycle}: the guest never streamed both ways");
            let a = sample();
            std::thread::sleep(Duration::from_millis(500));
            let b = sample();
            let (host, p2p) = (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1));
            if host >= 4 * MIB && p2p > host + 4 * MIB {
                break (host, p2p);
            }
        };
        eprintln!("cycle {cycle}: streaming (0.5 s: {} MiB host, {} MiB P2P); kill -9 QEMU", both.0 >> 20, both.1 >> 20);
        qemu.0.kill().unwrap();
        qemu.0.wait().unwrap();
        assert!(wait_until(Duration::from_secs(30), || all_gone(clients)), "cycle {cycle}: the server did not see QEMU go");
        footprints.push(footprint(server.pid()));
        eprintln!("cycle {cycle}: server fds, mappings {:?}", footprints.last().unwrap());
        if cycle == 1 {
            first_maps = maps(server.pid());
        }
    }
    // A sixth guest on the same server: verified transfers both ways.
    let script = "rnic-perf write -s 4M -n 16 --src host --dst gpu --verify --json && rnic-perf write -s 4M -n 16 --src gpu --dst gpu --verify --json";
    let (mut qemu, output, started) = boot(&topo, &server, work.path(), 6, script);
    clients += started;
    let done = wait_until(Duration::from_secs(300), || std::fs::read_to_string(&output).unwrap_or_default().contains("@@RNIC-EMU-EXIT@@"));
    let out = std::fs::read_to_string(&output).unwrap_or_default();
    eprintln!("--- guest output ---\n{out}");
    assert!(done, "the sixth guest did not finish");
    assert!(out.contains("@@RNIC-EMU-EXIT@@ 0"), "the verified transfers failed");
    let results: Vec<serde_json::Value> = out.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(results.len(), 2);
    for r in &results {
        assert_eq!(r["bytes_verified"].as_u64(), Some(64 * MIB), "every byte checked in the guest: {r}");
    }
    let _ = qemu.0.wait();
    assert!(wait_until(Duration::from_secs(30), || all_gone(clients)), "the server did not see the sixth QEMU go");
    footprints.push(footprint(server.pid()));
    eprintln!("server fds, mappings per cycle: {footprints:?}");
    let first = footprints[0];
    for (i, f) in footprints.iter().enumerate().skip(1) {
        assert_eq!(f.0, first.0, "open fds after cycle {} vs cycle 1: {footprints:?}", i + 1);
        assert!(
            f.1 <= first.1,
            "memory mappings grew by cycle {}: {footprints:?}; new since cycle 1: {:#?}",
            i + 1,
            new_mappings(&first_maps, &maps(server.pid()))
        );
    }
}
