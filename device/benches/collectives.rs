//! `cargo bench --bench collectives`: `rnic-coll` (guest-driver/tools/rnic-coll.c) on four
//! guests, each figure against a baseline measured in the same run:
//! - four-node: all_reduce busbw at 16 and 32 MiB against the point-to-point RDMA WRITE
//!   bandwidth (`rnic-perf write`, GPU to GPU, 16 MiB messages) between two of the same
//!   guests in the same boot: the fraction of the link the ring reaches (NCCL: 0.82-0.96);
//! - GDR on vs off: the same all_reduce on four-node (P2P) and four-node-bounce (Linux
//!   refuses P2P, host bounce buffers), busbw ratio and per-call P50/P99/P999 of a small
//!   (64 KiB) all_reduce, printed beside the reference figures of docs/timing.md (8 nodes RoCEv2:
//!   48.5 vs 18.2 GB/s, P999 12.5 vs 45.2 us) for shape, not absolute value;
//! - eight-node all_reduce only with RNIC_BENCH_EIGHT=1 (eight TCG guests: slow).
//!
//! Needs the guest image (`make test` or `rnic-emu image` builds it).

use serde_json::Value;
use std::process::Command;

const BIG: [u64; 2] = [16 << 20, 32 << 20];
const SMALL: u64 = 64 << 10;

fn run(topo: &str, scripts: &[String]) -> anyhow::Result<Vec<(String, Value)>> {
    let topo = format!("{}/../qemu-configs/{topo}.toml", env!("CARGO_MANIFEST_DIR"));
    let mut args = vec!["run".to_string(), "--timeout".into(), "1500".into(), "--topology".into(), topo];
    for (i, s) in scripts.iter().enumerate() {
        args.extend(["--on".to_string(), i.to_string(), s.clone()]);
    }
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-emu")).args(&args).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(out.status.success(), "guests failed:\n{text}\n{}", String::from_utf8_lossy(&out.stderr));
    Ok(text
        .lines()
        .filter_map(|l| {
            let (node, rest) = l.strip_prefix('[')?.split_once("] ")?;
            Some((node.to_string(), serde_json::from_str(rest.trim()).ok()?))
        })
        .collect())
}

/// The collective part of every node's script: big all_reduce sizes, then a small one for
/// per-call latency percentiles.
fn coll_script() -> String {
    format!(
        "rnic-coll all_reduce --id big -b {} -e {} -f 2 -n 4 -w 1 -c 0 --json || exit 1
         rnic-coll all_reduce --id small -b {SMALL} -e {SMALL} -n 200 -w 5 -c 0 --json || exit 1\n",
        BIG[0], BIG[1]
    )
}

fn row<'a>(rows: &'a [(String, Value)], op: &str, size: u64) -> &'a Value {
    rows.iter().map(|(_, v)| v).find(|v| v["op"] == op && v["size"] == size && v["summary"].is_null()).unwrap_or_else(|| panic!("no {op} row for {size}"))
}

fn f(v: &Value, k: &str) -> f64 {
    v[k].as_f64().unwrap_or(f64::NAN)
}

fn main() -> anyhow::Result<()> {
    // Four-node, P2P: first the point-to-point baseline between nodes 0 and 1 (nodes 2 and
    // 3 wait), then the collectives on all four.
    let p2p = format!("rnic-perf write --server --id p2p -s {} -n 8 --src gpu --dst gpu --json || exit 1\n", BIG[0]);
    let p2c = format!("rnic-perf write --id p2p -s {} -n 8 --src gpu --dst gpu --json 0 || exit 1\n", BIG[0]);
    let wait = "rnic-kv get p2p.done 600000 >/dev/null || exit 1\n";
    let scripts = vec![
        p2p + wait + &coll_script(),
        p2c + "rnic-kv put p2p.done 1\n" + &coll_script(),
        wait.to_string() + &coll_script(),
        wait.to_string() + &coll_script(),
    ];
    let on = run("four-node", &scripts)?;
    let link = on.iter().find(|(n, v)| n == "node1" && v["test"] == "write").map(|(_, v)| f(v, "gbps") / 8.0).unwrap_or(f64::NAN);
    let off = run("four-node-bounce", &vec![coll_script(); 4])?;

    println!("all_reduce on 4 guests (four-node, GPU memory to GPU memory, P2P) vs point-to-point RDMA WRITE between two of them");
    println!("point-to-point WRITE, GPU to GPU, {} MiB: {link:.3} GB/s", BIG[0] >> 20);
    println!("{:>8} {:>12} {:>12} {:>12}", "size", "busbw GB/s", "of link", "host bytes");
    for size in BIG {
        let r = row(&on, "all_reduce", size);
        let bw = f(r, "oop_busbw").max(f(r, "ip_busbw"));
        println!("{:>7}M {bw:>12.3} {:>12.2} {:>12}", size >> 20, bw / link, r["bytes_host"]);
    }
    println!();
    println!("GDR on (four-node, P2P) vs GDR off (four-node-bounce, host bounce buffers), all_reduce, 4 ranks");
    println!("{:>22} {:>10} {:>10} {:>8}   reference (docs/timing.md, 8 nodes RoCEv2): on / off", "", "GDR on", "GDR off", "on/off");
    for size in BIG {
        let (a, b) = (f(row(&on, "all_reduce", size), "oop_busbw"), f(row(&off, "all_reduce", size), "oop_busbw"));
        println!("{:>22} {a:>10.3} {b:>10.3} {:>8.2}   48.5 / 18.2 GB/s (2.66)", format!("busbw {} MiB GB/s", size >> 20), a / b);
    }
    let (a, b) = (row(&on, "all_reduce", SMALL), row(&off, "all_reduce", SMALL));
    for (name, key, seed) in [("P50", "oop_p50_us", "-"), ("P99", "oop_p99_us", "-"), ("P999", "oop_p999_us", "12.5 / 45.2 us (0.28)")] {
        let (x, y) = (f(a, key), f(b, key));
        println!("{:>22} {x:>10.0} {y:>10.0} {:>8.2}   {seed}", format!("{name} {} KiB us/call", SMALL >> 10), x / y);
    }
    println!("{:>22} {:>10} {:>10}", "host bytes (32 MiB)", row(&on, "all_reduce", BIG[1])["bytes_host"], row(&off, "all_reduce", BIG[1])["bytes_host"]);

    if std::env::var_os("RNIC_BENCH_EIGHT").is_some() {
        let t0 = std::time::Instant::now();
        let eight = run("eight-node", &vec!["rnic-coll all_reduce -b 4M -e 4M -n 3 -c 1 --json || exit 1".to_string(); 8])?;
        let r = row(&eight, "all_reduce", 4 << 20);
        println!();
        println!(
            "eight-node all_reduce 4 MiB: busbw {:.3} GB/s, #wrong {} / {}, host bytes {} ({:.0} s with boots)",
            f(r, "oop_busbw"),
            r["oop_wrong"],
            r["ip_wrong"],
            r["bytes_host"],
            t0.elapsed().as_secs_f64()
        );
    } else {
        println!();
        println!("eight-node: set RNIC_BENCH_EIGHT=1 (eight TCG guests; minutes on a 2-core host)");
    }
    Ok(())
}
