//! Guest-level verbs tests: one boot of the single-switch topology runs the guest driver's
//! tools against the emulated RNIC, and the host checks what they report and what the device
//! counted: loopback WRITE, READ, SEND/RECV and WRITE_WITH_IMM at 1 B, 4 KiB, a size that is
//! not a multiple of the page size and 1 MiB, verified byte for byte in the guest; every
//! error scenario's completion status (the rnic-verbs-check scenarios docs/programming.md
//! names as `guest:` checks); 10,000 small writes with no lost or duplicated
//! completion (the device's own counters read back); and a device still serving afterwards.

mod common;
use common::*;
use std::collections::HashMap;

const SIZES: [u64; 4] = [1, 4096, 5000, 1 << 20];
const ITERS: u64 = 8;

/// The device counters the driver prints in sysfs, from the section after `marker`.
fn stats_after(out: &str, marker: &str) -> HashMap<String, u64> {
    let start = out.find(marker).unwrap_or_else(|| panic!("no '{marker}' in the guest output"));
    out[start + marker.len()..]
        .lines()
        .skip(1)
        .map_while(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next().and_then(|v| v.parse().ok()), w.next()) {
                (Some(k), Some(v), None) => Some((k.to_string(), v)),
                _ => None,
            }
        })
        .collect()
}

#[test]
fn loopback_verbs_errors_and_ten_thousand_writes() {
    let sizes = SIZES.map(|s| s.to_string()).join(" ");
    let script = format!(
        "stats() {{ cat /sys/bus/pci/devices/$(rnic-bar find rnic)/stats; }}
         for op in write read send write-imm; do for s in {sizes}; do
             rnic-perf $op -s $s -n {ITERS} --verify --json || echo \"perf_failed: $op $s\"
         done; done
         rnic-verbs-check all
         echo '== before-small'; stats
         rnic-perf write -s 64 -n 10000 --json || echo 'perf_failed: small'
         echo '== after-small'; stats
         rnic-perf send -s 4096 -n 10 --verify --json || echo 'perf_failed: after'"
    );
    let run = run_guest(&topology("single-switch"), &[], &script);
    assert_eq!(run.code, Some(0));
    let out = &run.stdout;
    assert!(!out.contains("perf_failed"), "a rnic-perf run failed");

    // Every (operation, size) ran and verified every byte it moved.
    let results: Vec<serde_json::Value> = out.lines().filter(|l| l.starts_with('{')).map(|l| serde_json::from_str(l).expect("JSON line")).collect();
    for op in ["write", "read", "send", "write-imm"] {
        for size in SIZES {
            let r = results
                .iter()
                .find(|r| r["test"] == op && r["size"] == size && r["iterations"] == ITERS)
                .unwrap_or_else(|| panic!("no result for {op} {size}"));
            assert_eq!(r["bytes_verified"], size * ITERS, "{op} {size}: bytes verified in the guest");
            assert!(r["gbps"].as_f64().is_some());
        }
    }

    // Error semantics, as the guest saw them in its completions.
    let sc = scenarios(out);
    let get = |s: &str, k: &str| sc.get(s).and_then(|m| m.get(k)).map(String::as_str).unwrap_or("<missing>");
    for s in ["rkey-error", "access-error", "range-error"] {
        assert_eq!(get(s, "status"), "REM_ACCESS_ERR", "{s}");
        assert_eq!(get(s, "qp_state"), "ERR", "{s}");
    }
    assert_eq!(get("access-error", "dst_untouched"), "1", "nothing written on a refused WRITE");
    assert_eq!(get("range-error", "dst_untouched"), "1");
    assert_eq!(get("rkey-error", "next_status"), "WR_FLUSH_ERR");
    assert_eq!(get("lkey-error", "status"), "LOC_PROT_ERR");
    assert_eq!(get("rnr", "status"), "RNR_RETRY_EXC_ERR");
    assert_eq!(get("send-too-long", "status"), "REM_INV_REQ_ERR");
    assert_eq!(get("send-too-long", "recv_status"), "LOC_LEN_ERR");
    assert_eq!(get("flush", "wr_ids"), "100 101 102 103 104");
    assert_eq!(get("flush", "flushed"), "5");
    assert_eq!(get("write-imm", "recv_opcode"), "RECV_RDMA_WITH_IMM");
    assert_eq!(get("write-imm", "recv_imm"), "0x12345678");
    assert_eq!(get("write-imm", "data_ok"), "1");
    assert_eq!(get("driver-checks", "stale_rkey_status"), "REM_ACCESS_ERR");
    // MODIFY_QP's READ/atomic limits (minor 12): 1..16 each, each only on its own edge and
    // with its attribute bit; an unknown attribute bit is refused. (The QP is in INIT: the
    // RTR attempts are otherwise valid loopback ones.)
    for k in ["unknown_attr_bit", "max_dest_rd_atomic_17", "max_dest_rd_atomic_0", "rd_atomic_without_its_bit", "max_rd_atomic_at_rtr"] {
        assert_eq!(get("remote-attrs", k), "EINVAL", "remote-attrs {k}");
    }
    // Teardown quiescence (docs/programming.md R-RST-4): no DMA into poisoned memory after
    // DESTROY_QP and DEREG_MR returned.
    assert_eq!(get("teardown-poison", "stale_status"), "REM_OP_ERR", "the peer QP is gone");
    assert_eq!(get("teardown-poison", "untouched"), "1", "bytes changed: {}", get("teardown-poison", "bytes_changed"));
    assert!(sc.values().all(|m| m.get("ran").map(String::as_str) == Some("1")), "every scenario ran");

    // 10,000 signaled 64-byte writes: exactly 10,000 WQEs and CQEs, no error, per the device.
    let (before, after) = (stats_after(out, "== before-small"), stats_after(out, "== after-small"));
    let delta = |k: &str| after[k] - before[k];
    assert_eq!(delta("send_wqes"), 10_000);
    assert_eq!(delta("cqes"), 10_000, "no completion lost or duplicated");
    assert_eq!(delta("error_cqes"), 0);
    assert_eq!(delta("bytes_written"), 640_000);
    assert!(after["qp_errors"] >= 6, "the error scenarios moved QPs to ERROR");

    // After all those errors the device still serves: a verified SEND run at the end.
    let last = results.last().unwrap();
    assert_eq!((last["test"].as_str(), last["bytes_verified"].as_u64()), (Some("send"), Some(40960)));
}

/// The doorbell page (docs/verbs.md §3.1): three processes post bursts of small WRITEs at
/// once, with pauses that let the engine go to sleep between bursts, so both paths run:
/// indices taken from the page while the engine polls, and MMIO doorbells rung when the
/// published event index asks for one. A lost wake-up leaves a WQE unexecuted and its
/// rnic-perf waiting until it fails. Then the driver is reloaded with `db_page=0`: the
/// same work through the MMIO doorbells alone, the page untouched. The whole run is
/// recorded with `--trace FILE` (docs/trace.md): the MMIO-only `rnic-perf write` shows up
/// in it as the driver's register writes, the doorbell, the WQE fetch, the payload DMA
/// and the CQE write, in that order.
#[test]
fn doorbell_page_bursts_from_several_processes_and_mmio_fallback() {
    const PROCS: u64 = 3;
    const BURSTS: u64 = 25;
    const N: u64 = 40;
    let script = format!(
        "stats() {{ cat /sys/bus/pci/devices/$(rnic-bar find rnic)/stats; }}
         dmesg | grep -q 'doorbell page in BAR2' && echo page_mapped
         echo '== before'; stats
         for p in $(seq {PROCS}); do
           ( for i in $(seq {BURSTS}); do
               rnic-perf write -s 64 -n {N} --verify --json >/dev/null || echo perf_failed
               usleep $(( (p * 1777 + i * 911) % 5000 ))
             done ) &
         done
         wait
         echo '== after'; stats
         rmmod rnic_emu && modprobe rnic_emu db_page=0 || echo reload_failed
         rnic-perf write -s 4096 -n 200 --verify --json >/dev/null || echo perf_failed
         echo '== mmio'; stats"
    );
    let dir = tempfile::tempdir().unwrap();
    let trace_file = dir.path().join("trace.jsonl");
    let run = run_guest(&topology("single-switch"), &["--trace", trace_file.to_str().unwrap()], &script);
    assert_eq!(run.code, Some(0));
    let out = &run.stdout;
    assert!(out.contains("page_mapped"), "the driver mapped the doorbell page");
    check_trace(&std::fs::read_to_string(&trace_file).unwrap());
    assert!(!out.contains("perf_failed") && !out.contains("reload_failed"), "every run completed");
    let (before, after, mmio) = (stats_after(out, "== before"), stats_after(out, "== after"), stats_after(out, "== mmio"));
    let delta = |k: &str| after[k] - before[k];
    let wqes = PROCS * BURSTS * N;
    eprintln!(
        "doorbell page: {wqes} WQEs, {} MMIO doorbells, {} page updates; MMIO-only run: {} doorbells",
        delta("doorbells"),
        delta("db_page_updates"),
        mmio["doorbells"]
    );
    assert_eq!(delta("send_wqes"), wqes);
    assert_eq!(delta("cqes"), wqes, "no completion lost or duplicated");
    assert!(delta("db_page_updates") > 0, "indices were taken from the page");
    assert!(delta("doorbells") > 0, "the engine slept and asked for MMIO doorbells");
    assert!(delta("doorbells") < wqes / 4, "most doorbells cost no MMIO write: {} MMIO doorbells for {wqes} WQEs", delta("doorbells"));
    // Reloading reset the device (counters start again); the MMIO-only driver never
    // touched the page.
    assert_eq!(mmio["send_wqes"], 200);
    assert_eq!(mmio["db_page_updates"], 0);
    assert!(mmio["doorbells"] >= 200 / 32, "every post rang the MMIO doorbell");
}

/// The MMIO-only `rnic-perf write -s 4096` at the end of the run, as the trace recorded
/// it: after the driver's reload (its last QP_CTX_BASE write), commands set up the CQs,
/// QPs and MRs, then the first doorbell, the WQE fetch of that QP, 4096 payload bytes read
/// and written, and a 32-byte CQE.
fn check_trace(text: &str) {
    let events: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    assert!(events.iter().all(|e| e["node"] == "node0"), "every event names its node");
    let lost: u64 = events.iter().filter_map(|e| e["lost"].as_u64()).sum();
    eprintln!("trace: {} events, {lost} lost to ring overflow", events.len());
    let after = |from: usize, what: &str, pred: &dyn Fn(&serde_json::Value) -> bool| -> usize {
        from + events[from..].iter().position(pred).unwrap_or_else(|| panic!("no {what} in the trace after event {from}"))
    };
    assert!(events.iter().any(|e| e["kind"] == "mmio" && e["bar"].is_null() && e["reg"] == "VENDOR_ID"), "the probe's config reads");
    let reload = events.iter().rposition(|e| e["reg"] == "QP_CTX_BASE" && e["dir"] == "write").expect("the driver's QP_CTX_BASE write");
    let dma_ctrl = after(reload, "DMA_CTRL write", &|e| e["reg"] == "DMA_CTRL" && e["dir"] == "write");
    let cmd = after(dma_ctrl, "command", &|e| e["reg"] == "RNIC_REG_CMD" && e["dir"] == "write");
    after(cmd, "command DMA", &|e| e["kind"] == "dma" && e["what"] == "command");
    let db = after(cmd, "doorbell", &|e| e["reg"] == "WQE_DB_IDX" && e["dir"] == "write");
    let qp = events[db]["qp"].as_u64().expect("the doorbell names its QP");
    let fetch = after(db, "WQE fetch", &|e| e["what"] == "wqe_fetch" && e["qp"].as_u64() == Some(qp));
    assert_eq!((events[fetch]["dir"].as_str(), events[fetch]["path"].as_str()), (Some("read"), Some("host")));
    let read = after(fetch, "payload read", &|e| e["what"] == "payload" && e["dir"] == "read");
    let write = after(read, "payload write", &|e| e["what"] == "payload" && e["dir"] == "write");
    let cqe = after(write, "CQE write", &|e| e["what"] == "cqe" && e["dir"] == "write");
    let bytes = |dir: &str| -> u64 { events[read..cqe].iter().filter(|e| e["what"] == "payload" && e["dir"] == dir).filter_map(|e| e["len"].as_u64()).sum() };
    assert_eq!((bytes("read"), bytes("write")), (4096, 4096), "the first WRITE's payload, before its CQE");
    let slot = events[cqe]["addr"].as_u64().unwrap();
    let in_slot = |e: &&serde_json::Value| e["what"] == "cqe" && e["addr"].as_u64().is_some_and(|a| a >= slot && a < slot + 32);
    let cqe_bytes: u64 = events[cqe..].iter().take(16).filter(in_slot).filter_map(|e| e["len"].as_u64()).sum();
    assert_eq!(cqe_bytes, 32, "one CQE, written in pieces, owner byte last");
}
