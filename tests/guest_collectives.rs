//! Guest-level tests of `rnic-coll` (guest-driver/tools/rnic-coll.c): one rank per guest,
//! ranks meeting through the run's rendezvous store, data moving GPU memory to GPU memory
//! over RoCEv2 between the nodes. Each topology boots once and runs several collectives;
//! every result the tool reports was checked in the guest against a reference computed on
//! the CPU from the seeds (never by the device), and the tests assert on those counts
//! (#wrong 0, checked), on what the tool could not fake (the RNIC's per-path DMA counters:
//! no host-memory byte with P2P, host bytes with the bounce topology; retransmissions under
//! injected loss), on the shape of the output (nccl-tests table, per-layer arrivals) and on
//! the modelled columns (positive, monotone in size).
//! Sizes are small (TCG guests on a shared host); the boots run one after another.

mod common;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::sync::Mutex;

/// One boot at a time: four-node topologies share addresses, and the host is small.
static SERIAL: Mutex<()> = Mutex::new(());

/// JSON objects printed by each node, as (node name, object).
struct Outcome {
    code: Option<i32>,
    stdout: String,
    json: Vec<(String, Value)>,
}

fn run_nodes(topo: &Path, cmds: &[String]) -> Outcome {
    ensure_image();
    let mut args = vec!["run".to_string(), "--no-build".into(), "--timeout".into(), "600".into(), "--topology".into()];
    args.push(topo.display().to_string());
    for (i, c) in cmds.iter().enumerate() {
        args.extend(["--on".to_string(), i.to_string(), c.clone()]);
    }
    let t0 = std::time::Instant::now();
    let out = std::process::Command::new(bin()).args(&args).output().expect("running rnic-emu run");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}\n{}\n({} nodes, {:.0} s)", String::from_utf8_lossy(&out.stderr), cmds.len(), t0.elapsed().as_secs_f64());
    let json = stdout
        .lines()
        .filter_map(|l| {
            let (node, rest) = l.strip_prefix('[')?.split_once("] ")?;
            let v: Value = serde_json::from_str(rest.trim()).ok()?;
            Some((node.to_string(), v))
        })
        .collect();
    Outcome { code: out.status.code(), stdout, json }
}

/// The same script on every node.
fn everywhere(n: usize, script: &str) -> Vec<String> {
    (0..n).map(|_| script.to_string()).collect()
}

impl Outcome {
    fn rows(&self, node: &str, op: &str, id_size: Option<u64>) -> Vec<&Value> {
        self.json
            .iter()
            .filter(|(n, v)| n == node && v["op"] == op && v["summary"].is_null() && id_size.is_none_or(|s| v["size"] == s))
            .map(|(_, v)| v)
            .collect()
    }

    fn assert_ok(&self) {
        assert_eq!(self.code, Some(0), "every rank succeeded");
        assert!(!self.stdout.contains("failed"), "no command failed");
    }

    /// A bandwidth collective's rows on rank 0: checked, 0 wrong in both placements, and
    /// the payload's path as the RNICs counted it.
    fn assert_bw(&self, op: &str, sizes: &[u64], p2p: bool) {
        for &size in sizes {
            let rows = self.rows("node0", op, Some(size));
            assert_eq!(rows.len(), 1, "{op} {size}: one row");
            let r = rows[0];
            assert_eq!(r["checked"], true, "{op} {size}: {r}");
            assert_eq!((r["oop_wrong"].as_u64(), r["ip_wrong"].as_u64()), (Some(0), Some(0)), "{op} {size}: #wrong: {r}");
            assert!(r["oop_busbw"].as_f64().unwrap() > 0.0 && r["ip_busbw"].as_f64().unwrap() > 0.0, "{op} {size}: {r}");
            let (host, sw) = (r["bytes_host"].as_u64().unwrap(), r["bytes_p2p_switch"].as_u64().unwrap());
            if p2p {
                assert_eq!(host, 0, "{op} {size}: no payload byte through host memory on any rank: {r}");
                // Every rank sends and receives at least (N-1)/N of the buffer per call.
                assert!(sw >= size, "{op} {size}: the data went peer-to-peer: {r}");
            } else {
                assert!(host >= size, "{op} {size}: bounce buffers in host memory: {r}");
            }
        }
        let summary = self.json.iter().find(|(n, v)| n == "node0" && v["op"] == op && v["summary"] == true);
        assert_eq!(summary.map(|(_, v)| v["wrong"].as_u64()), Some(Some(0)), "{op}: summary");
    }

    fn assert_moe(&self, ranks: u64) {
        let r = self.rows("node0", "moe", None);
        assert_eq!(r.len(), 1, "one moe row");
        let r = r[0];
        assert_eq!((r["checked"].as_bool(), r["wrong"].as_u64(), r["ranks"].as_u64()), (Some(true), Some(0), Some(ranks)), "moe: {r}");
        let (wqes, remote) = (r["wqes"].as_u64().unwrap(), r["remote_tokens"].as_u64().unwrap());
        // 256 tokens per rank spread over 2N experts: most go to other ranks, 14 per SEND.
        assert!(remote > 256 * ranks / 4 && wqes * 10 < remote * 2, "moe: tokens aggregated into few SENDs: {r}");
        assert!(r["tokens_per_s"].as_f64().unwrap() > 0.0 && r["busbw"].as_f64().unwrap() > 0.0, "moe: {r}");
        assert_eq!(r["bytes_host"].as_u64(), Some(0), "moe: GPU to GPU: {r}");
    }
}

#[test]
fn two_ranks_every_collective() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // 1000006 bytes: 250001 floats (2 bytes left over), odd, so the halves differ.
    let script = "rnic-coll all_reduce -b 1M -e 2M -n 2 --json || echo failed
         rnic-coll all_reduce --id ar_odd -b 1000006 -n 2 --json || echo failed
         rnic-coll reduce_scatter -b 1000006 -n 2 --json || echo failed
         rnic-coll all_gather -b 1000006 -n 2 --json || echo failed
         rnic-coll all_to_all -b 1M -n 2 --json || echo failed
         rnic-coll moe -n 2 --json || echo failed
         rnic-coll kv_transfer -n 2 --layers 4 --tokens 64 --json || echo failed
         if rnic-coll all_reduce --id ar_bad -b 64K -n 1 --inject-error --json; then echo failed; fi";
    let out = run_nodes(&topology("two-node"), &everywhere(2, script));
    out.assert_ok();
    out.assert_bw("all_reduce", &[1 << 20, 2 << 20, 1_000_004], true);
    out.assert_bw("reduce_scatter", &[1_000_004], true);
    out.assert_bw("all_gather", &[1_000_004], true);
    out.assert_bw("all_to_all", &[1 << 20], true);
    // The modelled columns from the RNIC's model summary: positive, longer for more bytes.
    let model = |op: &str, size: u64| {
        let r = out.rows("node0", op, Some(size))[0];
        let (t, bw) = (r["model_time_us"].as_f64().unwrap_or(-1.0), r["model_busbw"].as_f64().unwrap_or(-1.0));
        assert!(t > 0.0 && bw > 0.0, "{op} {size}: modelled columns: {r}");
        t
    };
    assert!(model("all_reduce", 2 << 20) > model("all_reduce", 1 << 20), "monotone in size");
    assert!(model("all_reduce", 1_000_004) > model("reduce_scatter", 1_000_004), "all_reduce is both halves");
    model("all_gather", 1_000_004);
    model("all_to_all", 1 << 20);
    out.assert_moe(2);
    let decode = out.rows("node1", "kv_transfer", None);
    assert_eq!(decode.len(), 1);
    let d = decode[0];
    assert_eq!((d["role"].as_str(), d["checked"].as_bool(), d["wrong"].as_u64()), (Some("decode"), Some(true), Some(0)), "{d}");
    let arrivals: Vec<f64> = d["layer_arrival_us"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert_eq!(arrivals.len(), 4, "one arrival per layer: {d}");
    assert!(arrivals[0] > 0.0 && arrivals.windows(2).all(|w| w[0] <= w[1]), "layers arrive in order: {arrivals:?}");
    // 4 layers x (K + V) x 64 tokens x 8 heads x 64 dims x 2 bytes, written into GPU memory.
    assert_eq!(d["bytes"].as_u64(), Some(4 * 2 * 64 * 8 * 64 * 2));
    // A wrong contribution is visible: rank 1's first input off by one (--inject-error)
    // makes element 0 of the sum wrong on both ranks, in both placements, and the run fail.
    let bad = out.rows("node0", "all_reduce", Some(64 << 10));
    assert_eq!(bad.len(), 1);
    assert_eq!((bad[0]["oop_wrong"].as_u64(), bad[0]["ip_wrong"].as_u64()), (Some(2), Some(2)), "{}", bad[0]);
    assert!(out.stdout.contains("[node0] # rank 0 all_reduce out-of-place: 1 wrong of 16384, first at element 0"), "the wrong element is reported");
    for role in ["node0", "node1"] {
        let r = out.rows(role, "kv_transfer", None)[0];
        assert_eq!(r["bytes_host"].as_u64(), Some(0), "kv_transfer {role}: {r}");
        assert!(r["bytes_p2p"].as_u64().unwrap() >= 3 * d["bytes"].as_u64().unwrap(), "kv_transfer {role}: P2P: {r}");
    }
}

#[test]
fn three_ranks_uneven_counts() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // 262144 and 250000 floats: neither divides by 3.
    let script = "rnic-coll all_reduce -b 1M -e 2M -n 2 --json || echo failed
         rnic-coll reduce_scatter -b 1000000 -n 2 --json || echo failed
         rnic-coll all_gather -b 1000000 -n 2 --json || echo failed
         rnic-coll all_to_all -b 1M -n 2 --json || echo failed
         rnic-coll moe -n 2 --json || echo failed";
    let out = run_nodes(&topology("three-node"), &everywhere(3, script));
    out.assert_ok();
    out.assert_bw("all_reduce", &[1 << 20, 2 << 20], true);
    out.assert_bw("reduce_scatter", &[1_000_000], true);
    out.assert_bw("all_gather", &[1_000_000], true);
    // 87381 floats per block (1 MiB / 4 / 3, rounded down)
    out.assert_bw("all_to_all", &[87381 * 3 * 4], true);
    out.assert_moe(3);
}

#[test]
fn four_ranks_all_reduce_table_and_moe() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let script = "rnic-coll all_reduce -b 1M -e 4M -f 2 -n 2 || echo failed
         rnic-coll all_reduce --id ar_json -b 1M -e 2M -n 2 --json || echo failed
         rnic-coll all_reduce --id ar_odd -b 1000006 -n 2 --json || echo failed
         rnic-coll moe -n 2 --json || echo failed";
    let out = run_nodes(&topology("four-node"), &everywhere(4, script));
    out.assert_ok();
    // The nccl-tests table, as a user sees it: a row per size with 0 wrong in both columns.
    let table: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("[node0] "))
        .filter(|l| !l.starts_with('#') && !l.starts_with('{'))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(table.iter().map(|r| r[0]).collect::<Vec<_>>(), ["1048576", "2097152", "4194304"], "{table:?}");
    for r in &table {
        assert_eq!((r.len(), r[2], r[3], r[8], r[12]), (13, "float", "sum", "0", "0"), "row {r:?}");
    }
    assert!(out.stdout.contains("[node0] # Out of bounds values : 0 OK"));
    assert!(out.stdout.contains("[node0] # Avg bus bandwidth"));
    assert!(out.stdout.contains("payload bytes through host memory, all ranks: 0"));
    out.assert_bw("all_reduce", &[1 << 20, 2 << 20, 1_000_004], true);
    out.assert_moe(4);
}

#[test]
fn four_ranks_all_reduce_under_one_percent_loss() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // four-node.toml with 1% of every node's packets dropped (seeded), (each run has a segment of its own).
    let text = std::fs::read_to_string(topology("four-node")).unwrap().to_string();
    let mut lossy = String::new();
    for (i, line) in text.lines().enumerate() {
        lossy += line;
        lossy.push('\n');
        if line.starts_with("address = ") {
            lossy += &format!("faults = {{ seed = {}, tx = {{ drop = 0.01 }} }}\n", 17 + i);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("four-node-lossy.toml");
    std::fs::write(&topo, lossy).unwrap();
    let out = run_nodes(&topo, &everywhere(4, "rnic-coll all_reduce -b 2M -e 2M -n 3 --json || echo failed"));
    out.assert_ok();
    out.assert_bw("all_reduce", &[2 << 20], true);
    let r = out.rows("node0", "all_reduce", Some(2 << 20))[0];
    assert!(r["retransmits"].as_u64().unwrap() > 0, "the loss was real and repaired: {r}");
}

#[test]
fn four_ranks_bounce_buffers_without_p2p() {
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let out = run_nodes(&topology("four-node-bounce"), &everywhere(4, "rnic-coll all_reduce -b 1M -e 1M -n 2 --json || echo failed"));
    out.assert_ok();
    out.assert_bw("all_reduce", &[1 << 20], false);
    let summary = out.json.iter().find(|(n, v)| n == "node0" && v["summary"] == true).unwrap();
    assert_eq!(summary.1["path"], "bounce", "Linux refused P2P between RNIC and GPU: {}", summary.1);
}
