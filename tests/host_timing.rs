//! Host-level trace test, no QEMU: a real node server (RNIC + GPU below one switch)
//! driven by `hostdrv`; a GPU-to-GPU RDMA WRITE and a host-to-host one on a loopback QP,
//! and a READ of GPU memory into host memory on a loopback QP, then the device's WQE
//! trace read back over the control socket (`trace` request) and through `rnic-emu
//! trace`: every stage present and in time order, the P2P WRITE's payload never in host
//! memory (measured paths and modelled stages), the host WRITE's in host memory, the
//! READ's responder source path (GPU BAR1 through the switch) recorded.

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_testkit::hostdrv::{place_gpu_bar1, HostDriver, ServerProcess, VA};
use std::process::Command;
use std::time::Duration;

const GPU_BAR: u64 = 0x1_0000_0000;
const MIB: u64 = 1 << 20;

fn write_wqe(dst_va: u64, rkey: u32, src_va: u64, lkey: u32, len: u64, wr_id: u64) -> (WqeHeader, Vec<Sge>) {
    let hdr = WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id, remote_addr: dst_va, rkey, ..Default::default() };
    (hdr, vec![Sge { addr: src_va, length: len as u32, lkey }])
}

#[test]
fn the_trace_shows_each_wqe_stage_in_order_and_a_p2p_write_never_in_host_memory() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(std::path::Path::new(bin()), &topology("single-switch"), dir.path(), None).unwrap();
    // The control socket comes first; the function sockets follow.
    assert!(wait_until(Duration::from_secs(10), || server.socket("gpu0").exists() && server.socket("rnic0").exists()));
    // Recording is off by default (it costs the small-message rate); the command turns it on.
    let on = Command::new(bin()).args(["trace", "--record", "on", "--socket-dir"]).arg(dir.path()).output().unwrap();
    assert!(String::from_utf8_lossy(&on.stdout).contains("trace on"), "{on:?}");
    let _gpu = place_gpu_bar1(&server.socket("gpu0"), GPU_BAR).unwrap();
    let mut h = HostDriver::connect(&server.socket("rnic0"), 64 << 20).unwrap();
    h.w64(BAR1_APERTURE, GPU_BAR).unwrap();
    let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    h.create_cq(1, 8, 1).unwrap();
    h.create_qp(1, 1, 1, 6, access).unwrap();
    h.connect_qp(1, 1).unwrap();
    let host = h.alloc(MIB, 4096);
    let host_key = h.reg_mr(1, 1, access, host, MIB).unwrap();
    let va_gpu = 0x7e00_0000_0000u64;
    let pages: Vec<u64> = (0..(2 * MIB / 4096)).map(|p| GPU_BAR + p * 4096).collect();
    let gpu_key = h.reg_mr_pages(2, 1, access, va_gpu, 2 * MIB, &pages).unwrap();

    h.post(1, true, &[write_wqe(va_gpu + MIB, gpu_key, va_gpu, gpu_key, 4096, 0x77)]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);
    h.post(1, true, &[write_wqe(VA + host + 8192, host_key, VA + host, host_key, 4096, 0x78)]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);
    // A loopback READ of GPU memory into host memory: the responder's source path.
    let (mut hdr, sges) = write_wqe(va_gpu, gpu_key, VA + host + 16384, host_key, 4096, 0x7a);
    hdr.opcode = WQE_OP_RDMA_READ;
    h.post(1, true, &[(hdr, sges)]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);

    let reply = rnic_emu_server::serve::control_request(dir.path(), "node0", "trace qp=1").unwrap();
    let records: Vec<serde_json::Value> = serde_json::from_str(reply["ok"].as_str().expect("trace reply")).unwrap();
    let find = |wr: u64| records.iter().find(|r| r["wr_id"] == wr && r["role"] == "requester").unwrap_or_else(|| panic!("no record {wr:#x}: {reply}"));
    let expect = ["doorbell", "wqe_data", "sgl_parsed", "packetized", "on_wire", "placed", "ack", "cqe"];
    for (wr, path) in [(0x77, "p2p-switch"), (0x78, "host")] {
        let r = find(wr);
        assert_eq!((r["op"].as_str(), r["len"].as_u64(), r["transport"].as_str()), (Some("write"), Some(4096), Some("loopback")));
        assert_eq!((r["src"].as_str(), r["dst"].as_str(), r["status"].as_u64()), (Some(path), Some(path), Some(0)), "{r}");
        let stages: Vec<(&str, u64)> = r["stages"].as_array().unwrap().iter().map(|s| (s[0].as_str().unwrap(), s[1].as_u64().unwrap())).collect();
        let keys: Vec<&str> = stages.iter().map(|s| s.0).collect();
        assert_eq!(keys, expect, "{r}");
        assert!(stages.windows(2).all(|w| w[0].1 <= w[1].1), "measured stages in time order: {r}");
    }
    let read = find(0x7a);
    assert_eq!((read["op"].as_str(), read["transport"].as_str()), (Some("read"), Some("loopback")), "{read}");
    assert_eq!((read["src"].as_str(), read["dst"].as_str()), (Some("p2p-switch"), Some("host")), "the responder read GPU BAR1 through the switch: {read}");
    let keys: Vec<&str> = read["stages"].as_array().unwrap().iter().map(|s| s[0].as_str().unwrap()).collect();
    assert!(keys.contains(&"remote_read") && keys.first() == Some(&"doorbell") && keys.last() == Some(&"cqe"), "{read}");
    let off = Command::new(bin()).args(["trace", "--record", "off", "--socket-dir"]).arg(dir.path()).output().unwrap();
    assert!(String::from_utf8_lossy(&off.stdout).contains("trace off"));
    h.post(1, true, &[write_wqe(VA + host + 8192, host_key, VA + host, host_key, 64, 0x79)]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);
    let reply = rnic_emu_server::serve::control_request(dir.path(), "node0", "trace").unwrap();
    assert!(!reply["ok"].as_str().unwrap().contains("\"wr_id\":121"), "recording off: {reply}");
    let bad = rnic_emu_server::serve::control_request(dir.path(), "node0", "trace qp=oops").unwrap();
    assert!(bad["error"].as_str().is_some_and(|e| e.contains("bad qp")), "{bad}");

    // The command: measured beside modelled; the P2P WRITE's modelled payload stages are
    // on the GPU's path, none in host memory.
    let out = Command::new(bin()).args(["trace", "--node", "node0", "--qp", "1", "--socket-dir"]).arg(dir.path()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    assert!(out.status.success(), "{text}");
    let p2p = text.split('#').find(|b| b.contains("wr_id 0x77")).unwrap_or_else(|| panic!("{text}"));
    assert!(p2p.contains("src p2p-switch, dst p2p-switch") && p2p.contains("measured [T+0ns] doorbell"), "{p2p}");
    assert!(p2p.contains("source data back (4096 B, GPU BAR1, P2P through the PCIe switch)"), "{p2p}");
    let payload_in_host = p2p.lines().any(|l| (l.contains("source data") || l.contains("data placed")) && l.contains("host memory"));
    assert!(!payload_in_host, "{p2p}");
    let readt = text.split('#').find(|b| b.contains("wr_id 0x7a")).unwrap_or_else(|| panic!("{text}"));
    assert!(
        readt.contains("(src p2p-switch, dst host)") && readt.contains("remote: responder has the data (GPU BAR1, P2P through the PCIe switch)"),
        "{readt}"
    );
    let hostw = text.split('#').find(|b| b.contains("wr_id 0x78")).unwrap();
    assert!(hostw.contains("source data back (4096 B, host memory via the root complex)"), "{hostw}");
}

/// Across the fabric each node keeps its side: the requester's record (no placement, no
/// remote path) and the responder's placement with its path.
#[test]
fn across_the_fabric_each_node_traces_its_side() {
    use rnic_emu_testkit::hostdrv::{NodePair, PairOptions};
    let dir = tempfile::tempdir().unwrap();
    let ips = [std::net::Ipv4Addr::new(127, 90, 0, 1), std::net::Ipv4Addr::new(127, 90, 0, 2)];
    let o = PairOptions { ips, node_toml: "", retry_cnt: 7, timeout: 10, capture: false, rnr_retry: 7, eth_mtu: 0 };
    let mut p = NodePair::start(std::path::Path::new(bin()), dir.path(), &o).unwrap();
    for i in 0..2 {
        let on = rnic_emu_server::serve::control_request(&p.servers[i].socket_dir, &format!("node{i}"), "trace on").unwrap();
        assert_eq!(on["ok"].as_str(), Some("trace on"), "{on}");
    }
    p.write(0, 0, 64 << 10, 0x99, true).unwrap();
    assert_eq!(p.h[0].wait(1, Duration::from_secs(20)).unwrap().status, WC_SUCCESS);
    let trace = |i: usize| -> Vec<serde_json::Value> {
        let reply = rnic_emu_server::serve::control_request(&p.servers[i].socket_dir, &format!("node{i}"), "trace").unwrap();
        serde_json::from_str(reply["ok"].as_str().expect("trace reply")).unwrap()
    };
    let req = trace(0);
    let r = req.iter().find(|r| r["wr_id"] == 0x99).unwrap_or_else(|| panic!("{req:?}"));
    assert_eq!((r["transport"].as_str(), r["src"].as_str(), r["dst"].as_str()), (Some("fabric"), Some("host"), None), "{r}");
    let keys: Vec<&str> = r["stages"].as_array().unwrap().iter().map(|s| s[0].as_str().unwrap()).collect();
    assert_eq!(keys, ["doorbell", "wqe_data", "sgl_parsed", "packetized", "on_wire", "ack", "cqe"], "{r}");
    let ns: Vec<u64> = r["stages"].as_array().unwrap().iter().map(|s| s[1].as_u64().unwrap()).collect();
    assert!(ns.windows(2).all(|w| w[0] <= w[1]), "{r}");
    let resp = trace(1);
    let placed = resp.iter().find(|r| r["role"] == "responder").unwrap_or_else(|| panic!("{resp:?}"));
    assert_eq!((placed["op"].as_str(), placed["len"].as_u64(), placed["dst"].as_str()), (Some("write"), Some(64 << 10), Some("host")), "{placed}");
}

/// `rnic-emu model`: the 4 KiB GPUDirect WRITE beside the design document's timeline
/// (with the physical defaults: each interval classified; with the explicit
/// reference-timing parameter set: every stage agreeing), and the ring all_reduce rows
/// beside the document's, 8 nodes on RoCEv2 and 128 on InfiniBand NDR.
#[test]
fn the_model_command_prints_the_reference_timeline_and_the_ring_rows() {
    let model = |args: &[&str]| {
        let out = Command::new(bin()).arg("model").args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let write4k = ["--op", "write", "--size", "4096", "--src", "gpu", "--dst", "gpu"];
    let topo = topology("single-switch");
    let text = model(&[&["--topology", topo.to_str().unwrap()], &write4k[..]].concat());
    for (span, verdict) in [
        ("doorbell -> wqe_fetch", "agrees"),
        ("wqe_fetch -> wqe_data", "below cited latency"),
        ("source_read -> source_data", "BELOW RATE FLOOR"),
        ("tx_fifo -> on_wire", "BELOW RATE FLOOR"),
        ("remote_write -> remote_cqe", "below cited latency"),
    ] {
        let line = text.lines().find(|l| l.trim_start().starts_with(span)).unwrap_or_else(|| panic!("{span} missing:\n{text}"));
        assert!(line.contains(verdict), "{line}");
    }
    let reference = topology("reference-timing");
    let text = model(&[&["--topology", reference.to_str().unwrap()], &write4k[..]].concat());
    for stage in [
        "[T0ns]",
        "[T5ns]",
        "[T50ns]",
        "[T55ns]",
        "[T60ns]",
        "[T120ns]",
        "[T125ns]",
        "[T130ns]",
        "[T200ns]",
        "[T200ns+RTT+0ns]",
        "[T200ns+RTT+50ns]",
        "[T200ns+RTT+100ns]",
    ] {
        let line = text.lines().find(|l| l.contains(stage)).unwrap_or_else(|| panic!("{stage} missing:\n{text}"));
        assert!(line.contains(" ok "), "{line}");
    }
    for (nodes, fabric, label) in [("8", "roce", "reference (RoCEv2 400G)"), ("128", "ib-ndr", "reference (IB NDR 400G)")] {
        let args = ["--json", "--collective", "all_reduce", "--nodes", nodes, "--size", "4194304", "--fabric", fabric];
        let json: serde_json::Value = serde_json::from_str(&model(&args)).unwrap();
        let rows = json.as_array().unwrap();
        assert_eq!(rows.len(), 2, "GPUDirect on and off");
        for row in rows {
            assert!(row["reference"]["busbw_gbps"].as_f64().is_some(), "{row}");
            let (m, l) = (&row["model"], &row["model"]["latency"]);
            assert!(m["busbw_gbps"].as_f64().unwrap() > 0.0 && l["p50_us"].as_f64().unwrap() > 0.0, "{row}");
            assert!(l["p999_us"].as_f64().unwrap() >= l["p99_us"].as_f64().unwrap() && l["p99_us"].as_f64().unwrap() >= l["p50_us"].as_f64().unwrap());
        }
        let text = model(&args[1..]);
        assert!(text.contains(label) && text.contains("P999 us") && text.contains("egress queues"), "{text}");
    }
    let bad = Command::new(bin()).args(["model", "--op", "atomic"]).output().unwrap();
    assert!(!bad.status.success());
    let bad = Command::new(bin()).args(["model", "--fabric", "token-ring"]).output().unwrap();
    assert!(!bad.status.success());
}
