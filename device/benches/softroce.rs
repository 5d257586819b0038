//! `cargo bench --bench softroce`: guest to guest, rnic-emu against what users run today
//! without hardware, in the same run on the same two guests (qemu-configs/two-node.toml):
//! - rnic-emu: `rnic-perf write` / `write-lat` between the emulated RNICs over the RoCEv2
//!   fabric;
//! - rnic-emu through the standard stack: the same unmodified `ib_write_bw` / `ib_write_lat`
//!   on `rnic0` (ib_core device, our rdma-core provider; docs/ibverbs.md);
//! - Linux Soft-RoCE: `ib_write_bw` / `ib_write_lat` (perftest) on rdma_rxe over a
//!   virtio-net link between the same guests (QEMU `-netdev dgram` on loopback).
//!
//! Same sizes (64 KiB .. 4 MiB) and the same 64-byte latency test; ratios printed. Then
//! atomics (contract 1.12): `ib_atomic_bw` fetch-and-add and compare-and-swap on `rnic0`
//! and on `rxe0`, message rates compared; and UD (contract 1.16): `ib_send_bw -c UD` of
//! 1024-byte messages (the RoCE MTU of both links) on each, no more messages than the
//! server's RECVs (a UD message finding none is dropped and perftest's server would wait
//! for it forever).
//!
//! Then the mixed pair, in a second run (qemu-configs/softroce-mixed.toml): `ib_write_bw`
//! and `ib_write_lat` from `rnic0` to `rxe0` on a plain virtio-net guest of the same
//! segment, beside the same from another plain guest's `rxe0` to that `rxe0`.
//! Needs the guest image (`make test` or `rnic-emu image` builds it).

use std::process::Command;

const SIZES: [u64; 4] = [64 << 10, 256 << 10, 1 << 20, 4 << 20];

/// The guest script of node `n` (0: servers, 1: clients).
fn script(n: usize) -> String {
    let client = n == 1;
    let mut s = String::from(
        "modprobe virtio_net && modprobe rdma_rxe && modprobe ib_uverbs || exit 1
         n=$(rnic-kv rank); ip link set eth0 up; ip addr add 10.9.0.$((n+1))/24 dev eth0
         rdma link add rxe0 type rxe netdev eth0 || exit 1\n",
    );
    let (peer, srv) = if client { (" 0", "") } else { ("", " --server") };
    let rxe_peer = if client { " 10.9.0.1" } else { "" };
    for size in SIZES {
        let iters = ((64u64 << 20) / size).clamp(16, 1000);
        s += &format!("rnic-perf write{srv} --id bw{size} -s {size} -n {iters} --json{peer}\n");
        if client {
            s += &format!("rnic-kv get rxe{size} 60000 >/dev/null; sleep 1\n");
        } else {
            s += &format!("rnic-kv put rxe{size} up\n");
        }
        s += &format!("echo RXE_BW {size}; ib_write_bw -d rxe0 -s {size} -n {iters} --report_gbits{rxe_peer}\n");
        s += &sync(client, &format!("ib{size}"));
        s += &format!("echo IB_BW {size}; ib_write_bw {RNIC0} -s {size} -n {iters} --report_gbits{rxe_peer}\n");
    }
    s += &format!("rnic-perf write-lat{srv} --id lat -s 64 -n 1000 --json{peer}\n");
    if client {
        s += "rnic-kv get rxelat 60000 >/dev/null; sleep 1\n";
    } else {
        s += "rnic-kv put rxelat up\n";
    }
    s += &format!("echo RXE_LAT; ib_write_lat -d rxe0 -s 64 -n 1000{rxe_peer}\n");
    s += &sync(client, "iblat");
    s += &format!("echo IB_LAT; ib_write_lat {RNIC0} -s 64 -n 1000{rxe_peer}\n");
    for (tag, op) in ATOMICS {
        s += &sync(client, &format!("rxe{tag}"));
        s += &format!("echo RXE_{tag}; ib_atomic_bw -d rxe0 -n 2000 -A {op}{rxe_peer}\n");
        s += &sync(client, &format!("ib{tag}"));
        s += &format!("echo IB_{tag}; ib_atomic_bw {RNIC0} -n 2000 -A {op}{rxe_peer}\n");
    }
    s += &sync(client, "rxeUD");
    s += &format!("echo RXE_UD {UD_SIZE}; ib_send_bw -d rxe0 -c UD -s {UD_SIZE} -n {UD_ITERS} --report_gbits{rxe_peer}\n");
    s += &sync(client, "ibUD");
    s += &format!("echo IB_UD {UD_SIZE}; ib_send_bw {RNIC0} -c UD -s {UD_SIZE} -n {UD_ITERS} --report_gbits{rxe_peer}\n");
    s
}

/// UD SENDs: one MTU each, as many as the server posts RECVs for (perftest's UD depth).
const UD_SIZE: u64 = 1024;
const UD_ITERS: u64 = 500;

/// The atomic operations compared (marker tag, perftest's name).
const ATOMICS: [(&str, &str); 2] = [("FAA", "FETCH_AND_ADD"), ("CAS", "CMP_AND_SWAP")];

/// perftest on rnic-emu's ib_core device: GID index 1 (the node address).
const RNIC0: &str = "-d rnic0 -x 1";

/// The client waits until the server published `key` (its perftest server is starting).
fn sync(client: bool, key: &str) -> String {
    if client {
        format!("rnic-kv get {key} 60000 >/dev/null; sleep 1\n")
    } else {
        format!("rnic-kv put {key} up\n")
    }
}

/// The guest script of the mixed run: node1's rxe0 serves node0's rnic0, then node2's rxe0.
fn mixed_script(n: usize) -> String {
    let mut s = String::from(
        "client() { i=0; while :; do \"$@\" > /tmp/out 2>&1; grep -qi \"couldn't connect\" /tmp/out || break; i=$((i+1)); [ $i -ge 60 ] && break; sleep 1; done; cat /tmp/out; }\n",
    );
    if n > 0 {
        s += &format!(
            "modprobe virtio_net && modprobe rdma_rxe && modprobe ib_uverbs || exit 1
             ip link set eth0 up; ip addr add 10.0.0.1{}/24 dev eth0
             rdma link add rxe0 type rxe netdev eth0 || exit 1; G=$(rnic-gid rxe0 10.0.0.1{}) || exit 1\n",
            n + 1,
            n + 1
        );
    }
    let dev = if n == 0 { RNIC0 } else { "-d rxe0 -x $G" };
    let tests: Vec<String> = SIZES
        .iter()
        .map(|s| format!("ib_write_bw -F -s {s} -n {} --report_gbits", ((64u64 << 20) / s).clamp(16, 1000)))
        .chain(["ib_write_lat -F -s 64 -n 1000".to_string()])
        .collect();
    for (client, peer_tag) in [(0usize, "RNIC"), (2, "RXE")] {
        for (i, t) in tests.iter().enumerate() {
            let key = format!("{peer_tag}{i}");
            if n == 1 {
                s += &format!("rnic-kv put {key} up; {t} -d rxe0 -x $G >/dev/null 2>&1\n");
            } else if n == client {
                s += &format!("rnic-kv get {key} 300000 >/dev/null; echo MIX_{peer_tag} {i}; client {t} {dev} 10.0.0.12\n");
            }
        }
    }
    s
}

fn main() -> anyhow::Result<()> {
    let topo = concat!(env!("CARGO_MANIFEST_DIR"), "/../qemu-configs/two-node.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-emu"))
        .args(["run", "--timeout", "1200", "--topology", topo, "--on", "0", &script(0), "--on", "1", &script(1)])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "guests failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    // Client-side lines only (node1).
    let lines: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("[node1] ")).collect();
    let json = |test: &str, size: u64| -> Option<serde_json::Value> {
        lines.iter().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).find(|v| v["test"] == test && v["size"] == size)
    };
    // perftest prints "<bytes> <iters> <peak> <average> <msgrate>" under its header.
    let bw = |marker: &str, size: u64| -> Option<f64> {
        let at = lines.iter().position(|l| *l == format!("{marker} {size}"))?;
        let row = lines[at..].iter().find(|l| l.split_whitespace().next() == Some(&size.to_string()))?;
        row.split_whitespace().nth(3)?.parse().ok()
    };
    println!("guest to guest RDMA WRITE bandwidth, Gb/s: rnic-emu (rnic-perf; ib_write_bw on rnic0) vs Soft-RoCE (ib_write_bw on rxe0)");
    println!("{:>8} {:>10} {:>10} {:>10} {:>10} {:>10}", "size", "rnic-perf", "ib:rnic0", "ib:rxe0", "rnic0/rxe", "rnic0/perf");
    for size in SIZES {
        let ours = json("write", size).and_then(|v| v["gbps"].as_f64()).unwrap_or(f64::NAN);
        let ib = bw("IB_BW", size).unwrap_or(f64::NAN);
        let rxe = bw("RXE_BW", size).unwrap_or(f64::NAN);
        println!("{:>7}K {ours:>10.3} {ib:>10.3} {rxe:>10.3} {:>10.2} {:>10.2}", size >> 10, ib / rxe, ib / ours);
    }
    // ib_write_lat: "#bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9%".
    let lat_col = |marker: &str, i: usize| -> f64 {
        let at = lines.iter().position(|l| *l == marker).unwrap_or(lines.len());
        let row = lines[at..].iter().find(|l| l.split_whitespace().next() == Some("64"));
        row.and_then(|r| r.split_whitespace().nth(i)).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN)
    };
    // ib_atomic_bw: "<bytes> <iters> <peak> <average> <msgrate Mpps>" under its header.
    let rate = |marker: &str| -> f64 {
        let at = lines.iter().position(|l| *l == marker).unwrap_or(lines.len());
        let row = lines[at..].iter().find(|l| l.split_whitespace().next() == Some("8"));
        row.and_then(|r| r.split_whitespace().nth(4)).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN)
    };
    let lat = json("write-lat", 64).unwrap_or_default();
    println!();
    println!("64-byte RDMA WRITE latency (us): rnic-perf write-lat; ib_write_lat on rnic0 and on rxe0 (typical, 99%, 99.9%)");
    println!("{:>6} {:>10} {:>10} {:>10} {:>10}", "", "rnic-perf", "ib:rnic0", "ib:rxe0", "rnic0/rxe");
    for (name, key, c) in [("P50", "p50_us", 4), ("P99", "p99_us", 7), ("P999", "p999_us", 8)] {
        let ours = lat[key].as_f64().unwrap_or(f64::NAN);
        let (ib, rxe) = (lat_col("IB_LAT", c), lat_col("RXE_LAT", c));
        println!("{name:>6} {ours:>10.1} {ib:>10.1} {rxe:>10.1} {:>10.2}", ib / rxe);
    }
    println!();
    println!("8-byte atomics, ib_atomic_bw message rate (Mpps): rnic0 vs rxe0");
    for (tag, op) in ATOMICS {
        let (ib, rxe) = (rate(&format!("IB_{tag}")), rate(&format!("RXE_{tag}")));
        println!("{op:>14} {ib:>10.4} {rxe:>10.4} {:>10.2}", ib / rxe);
    }
    println!();
    println!("UD SEND, ib_send_bw -c UD ({UD_SIZE} B, {UD_ITERS} messages), Gb/s: rnic0 vs rxe0");
    let (ib, rxe) = (bw("IB_UD", UD_SIZE).unwrap_or(f64::NAN), bw("RXE_UD", UD_SIZE).unwrap_or(f64::NAN));
    println!("{:>14} {ib:>10.3} {rxe:>10.3} {:>10.2}", "UD 1024", ib / rxe);
    mixed()
}

/// The mixed pair: rnic0 -> rxe0 beside rxe0 -> rxe0, one run, the same server guest.
fn mixed() -> anyhow::Result<()> {
    let topo = concat!(env!("CARGO_MANIFEST_DIR"), "/../qemu-configs/softroce-mixed.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-emu"))
        .args(["run", "--timeout", "1800", "--topology", topo])
        .args(["--on", "0", &mixed_script(0), "--on", "1", &mixed_script(1), "--on", "2", &mixed_script(2)])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "guests failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let rows = |node: usize, tag: &str, i: usize, first: &str, col: usize| -> f64 {
        let lines: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix(&format!("[node{node}] ") as &str)).collect();
        let at = lines.iter().position(|l| *l == format!("MIX_{tag} {i}")).unwrap_or(lines.len());
        let row = lines[at..].iter().find(|l| l.split_whitespace().next() == Some(first));
        row.and_then(|r| r.split_whitespace().nth(col)).and_then(|v| v.parse().ok()).unwrap_or(f64::NAN)
    };
    println!();
    println!("mixed pair, ib_write_bw Gb/s to node1's rxe0: from rnic0 (node0) vs from rxe0 (node2), same run");
    println!("{:>8} {:>12} {:>12} {:>10}", "size", "rnic0->rxe0", "rxe0->rxe0", "ratio");
    for (i, size) in SIZES.iter().enumerate() {
        let (a, b) = (rows(0, "RNIC", i, &size.to_string(), 3), rows(2, "RXE", i, &size.to_string(), 3));
        println!("{:>7}K {a:>12.3} {b:>12.3} {:>10.2}", size >> 10, a / b);
    }
    let i = SIZES.len();
    let (a, b) = (rows(0, "RNIC", i, "64", 4), rows(2, "RXE", i, "64", 4));
    println!("64-byte ib_write_lat typical (us): rnic0->rxe0 {a:.1}, rxe0->rxe0 {b:.1}, ratio {:.2}", a / b);
    Ok(())
}
