//! Host-level MMIO/DMA trace test, no QEMU: a real node server (RNIC + GPU below one
//! switch) driven by `hostdrv`, its trace switched on and read back with `rnic-emu trace
//! --mmio --dma`. One RDMA WRITE on a loopback QP must show, in this order and with the
//! contract's register names: the driver's register writes, the doorbell, the WQE fetch,
//! the payload read and written (4096 bytes each way), and the CQE written (32 bytes).
//! The filters (`--mmio`, `--dma`, `--function`, `--qp`, `--reg`), the live follow mode
//! and the ring's overflow count are checked on the same server.

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_testkit::hostdrv::{place_gpu_bar1, HostDriver, ServerProcess, VA};
use serde_json::Value;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const GPU_BAR: u64 = 0x1_0000_0000;

/// `rnic-emu trace --socket-dir DIR ARGS...`: (exit code, stdout, stderr).
fn trace(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(bin()).arg("trace").arg("--socket-dir").arg(dir).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

/// The position of the first event after `from` that `pred` accepts.
fn find(events: &[Value], from: usize, what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    match events.iter().skip(from).position(pred) {
        Some(i) => from + i,
        None => panic!("no {what} after event {from}:\n{}", events.iter().map(Value::to_string).collect::<Vec<_>>().join("\n")),
    }
}

#[test]
fn a_write_shows_register_writes_doorbell_wqe_fetch_payload_and_cqe_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(Path::new(bin()), &topology("single-switch"), dir.path(), None).unwrap();
    assert!(wait_until(Duration::from_secs(10), || server.socket("gpu0").exists() && server.socket("rnic0").exists()));
    let (code, out, _) = trace(dir.path(), &["--mmio", "--dma"]);
    assert_eq!(code, Some(0));
    assert!(out.is_empty(), "off by default: nothing recorded: {out}");
    let (code, out, err) = trace(dir.path(), &["--mmio", "--record", "on"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("iotrace on"), "{out}");

    let _gpu = place_gpu_bar1(&server.socket("gpu0"), GPU_BAR).unwrap();
    let mut h = HostDriver::connect(&server.socket("rnic0"), 64 << 20).unwrap();
    let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    h.create_cq(1, 8, 1).unwrap();
    h.create_qp(1, 1, 1, 6, access).unwrap();
    h.connect_qp(1, 1).unwrap();
    let buf = h.alloc(1 << 20, 4096);
    let key = h.reg_mr(1, 1, access, buf, 1 << 20).unwrap();
    let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, 0x99, VA + buf + 8192, key);
    h.post(1, true, &[(hdr, vec![Sge { addr: VA + buf, length: 4096, lkey: key }])]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);

    let (code, out, err) = trace(dir.path(), &["--mmio", "--dma", "--json"]);
    assert_eq!(code, Some(0), "{err}");
    let all = json_lines(&out);
    assert!(all.windows(2).all(|w| w[0]["seq"].as_u64() < w[1]["seq"].as_u64()), "in sequence");
    // The GPU's BAR placement: configuration writes named from the header.
    let gpu_bar = find(&all, 0, "GPU BAR1 write", |e| {
        e["dev"] == "gpu" && e["bar"].is_null() && e["dir"] == "write" && e["reg"].as_str().is_some_and(|r| r.starts_with("BAR"))
    });
    // The driver's load: the context tables and DMA_CTRL, by name, in program order.
    let qp_ctx = find(&all, gpu_bar, "QP_CTX_BASE write", |e| e["reg"] == "QP_CTX_BASE" && e["dir"] == "write" && e["function"] == "node0-rnic0");
    let mtt = find(&all, qp_ctx, "MTT_BASE write", |e| e["reg"] == "MTT_BASE" && e["dir"] == "write");
    let dma_ctrl = find(&all, mtt, "DMA_CTRL write", |e| e["reg"] == "DMA_CTRL" && e["value"] == 3);
    // CREATE_CQ: the command register, then the command's DMA reading the CQ context.
    let cmd = find(&all, dma_ctrl, "RNIC_REG_CMD write", |e| e["reg"] == "RNIC_REG_CMD" && e["dir"] == "write");
    find(&all, cmd, "command DMA", |e| e["kind"] == "dma" && e["what"] == "command" && e["dir"] == "read" && e["path"] == "host");
    // The WRITE: doorbell, WQE fetch, payload out and in, CQE.
    let db = find(&all, cmd, "doorbell", |e| e["reg"] == "WQE_DB_IDX" && e["dir"] == "write" && e["qp"] == 1);
    assert_eq!((all[db]["value"].as_u64(), all[db]["width"].as_u64(), all[db]["bar"].as_u64()), (Some(1 << 16 | 1), Some(4), Some(0)));
    let fetch = find(&all, db, "WQE fetch", |e| e["what"] == "wqe_fetch" && e["qp"] == 1);
    assert_eq!((all[fetch]["dir"].as_str(), all[fetch]["len"].as_u64(), all[fetch]["path"].as_str()), (Some("read"), Some(64), Some("host")), "{}", all[fetch]);
    let wqe_addr = all[fetch]["addr"].as_u64().unwrap();
    assert!(wqe_addr >= rnic_emu_testkit::hostdrv::IOVA, "a bus address in the mapped RAM: {wqe_addr:#x}");
    let read = find(&all, fetch, "payload read", |e| e["what"] == "payload" && e["dir"] == "read");
    let write = find(&all, read, "payload write", |e| e["what"] == "payload" && e["dir"] == "write");
    let payload = |dir: &str| -> u64 { all[read..].iter().filter(|e| e["what"] == "payload" && e["dir"] == dir).filter_map(|e| e["len"].as_u64()).sum() };
    assert_eq!((payload("read"), payload("write")), (4096, 4096), "the payload, once each way");
    assert_eq!(
        (all[read]["addr"].as_u64(), all[write]["addr"].as_u64()),
        (Some(rnic_emu_testkit::hostdrv::IOVA + buf), Some(rnic_emu_testkit::hostdrv::IOVA + buf + 8192))
    );
    assert_eq!((all[write]["mr"].as_u64(), all[write]["path"].as_str()), (Some(1), Some("host")));
    let cqe = find(&all, write, "CQE write", |e| e["what"] == "cqe");
    let cqe_bytes: u64 = all[cqe..].iter().filter(|e| e["what"] == "cqe").filter_map(|e| e["len"].as_u64()).sum();
    assert_eq!(cqe_bytes, 32, "one 32-byte CQE (owner byte last)");
    assert_eq!((all[cqe]["qp"].as_u64(), all[cqe]["cq"].as_u64(), all[cqe]["dir"].as_str()), (Some(1), Some(1), Some("write")));

    // Text: one line per event, with the register name and the value.
    let (_, text, _) = trace(dir.path(), &["--mmio", "--reg", "WQE_DB"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("BAR0+0x1008") && lines[0].contains("WQE_DB_IDX") && lines[0].contains("= 0x10001") && lines[0].ends_with("qp 1"), "{text}");
    // Filters.
    let only = |args: &[&str]| json_lines(&trace(dir.path(), &[args, &["--json"]].concat()).1);
    let dma = only(&["--dma"]);
    assert!(!dma.is_empty() && dma.iter().all(|e| e["kind"] == "dma"));
    let mmio = only(&["--mmio"]);
    assert!(!mmio.is_empty() && mmio.iter().all(|e| e["kind"] == "mmio"));
    assert_eq!(dma.len() + mmio.len(), all.len());
    let gpu = only(&["--mmio", "--dma", "--function", "gpu"]);
    assert!(!gpu.is_empty() && gpu.iter().all(|e| e["dev"] == "gpu" && e["function"] == "node0-gpu0"));
    let qp1 = only(&["--mmio", "--dma", "--qp", "1"]);
    assert!(qp1.iter().all(|e| e["qp"] == 1));
    let kinds: Vec<&str> = qp1.iter().map(|e| e["what"].as_str().or(e["reg"].as_str()).unwrap()).collect();
    let tail = &kinds[kinds.iter().position(|k| *k == "WQE_DB_IDX").unwrap()..];
    let mut dedup = tail.to_vec();
    dedup.dedup();
    assert_eq!(dedup, ["WQE_DB_IDX", "wqe_fetch", "payload", "cqe"], "the WRITE of QP 1 alone, in order: {kinds:?}");
    let reg = only(&["--mmio", "--dma", "--reg", "stats."]);
    assert!(reg.is_empty(), "no statistics read yet");
    let (code, _, err) = trace(dir.path(), &["--reg", "WQE_DB_IDX"]);
    assert_ne!(code, Some(0), "--reg without --mmio/--dma is refused");
    assert!(err.contains("--mmio"), "{err}");

    // Follow: a line for a register write made after it started.
    let mut child = Command::new(bin())
        .args(["trace", "--mmio", "--follow", "--reg", "RNIC_REG_SCRATCH", "--socket-dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    // The follower may take any time to start: the write is repeated until it shows one
    // (bounded), instead of assuming the follower is up after a fixed delay.
    let deadline = Instant::now() + Duration::from_secs(20);
    let line = loop {
        h.w32(RNIC_REG_SCRATCH, 0x5eed).unwrap();
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(line) => break Ok(line),
            Err(e) if Instant::now() > deadline => break Err(e),
            Err(_) => {}
        }
    };
    let _ = child.kill(); // our child, by its handle
    let _ = child.wait();
    let line = line.expect("the follower printed the write");
    assert!(line.contains("RNIC_REG_SCRATCH") && line.contains("write") && line.contains("= 0x5eed"), "{line}");

    // Overflow: more events than the ring holds; the oldest go, counted and reported.
    for _ in 0..rnic_emu_core::observe::iotrace::CAPACITY / 2 + 100 {
        h.r64(STATS_BASE).unwrap(); // one register read each
        h.r32(RNIC_REG_SCRATCH).unwrap();
    }
    let (_, out, err) = trace(dir.path(), &["--mmio", "--json"]);
    let kept = json_lines(&out);
    assert_eq!(kept.len(), rnic_emu_core::observe::iotrace::CAPACITY, "the ring is full and bounded");
    assert_eq!(kept.last().unwrap()["reg"], "RNIC_REG_SCRATCH");
    assert!(kept.iter().any(|e| e["reg"] == "STATS.send_wqes"), "statistics reads are named");
    assert!(err.contains("events lost"), "a reader that starts late is told what it missed: {err}");
    let reply = rnic_emu_server::serve::control_request(dir.path(), "node0", "iotrace since=0 max=1").unwrap();
    let batch: Value = serde_json::from_str(reply["ok"].as_str().unwrap()).unwrap();
    let overflow = batch["overflow"].as_u64().unwrap();
    let first = batch["first"].as_u64().unwrap();
    assert!(overflow > 0 && overflow == first - 1, "overflow {overflow} counts the events before the oldest kept ({first})");
    assert_eq!(batch["capacity"].as_u64(), Some(rnic_emu_core::observe::iotrace::CAPACITY as u64));

    // Off again: nothing more is recorded.
    trace(dir.path(), &["--dma", "--record", "off"]);
    h.w32(RNIC_REG_SCRATCH, 1).unwrap();
    let (_, out, err) = trace(dir.path(), &["--mmio", "--reg", "RNIC_REG_SCRATCH", "--json"]);
    assert!(json_lines(&out).iter().all(|e| e["value"] != 1), "{out}");
    assert!(err.contains("is off"), "{err}");
}
