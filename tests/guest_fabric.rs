//! Guest-level fabric test: two guests (two-node topology, each an RNIC and a GPU behind a
//! switch) run `rnic-perf` as server and client, exchanging QP numbers, PSNs and keys
//! through the host rendezvous store, and move data over RoCEv2 between the nodes. The
//! receiving side verifies every byte; the device counters on both sides prove the data
//! went GPU -> NIC -> wire -> NIC -> GPU with no host-memory bounce (single-switch nodes).

mod common;
use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;

/// (test id, rnic-perf test, size, iterations, src, dst)
const CASES: &[(&str, &str, u64, u64, &str, &str)] = &[
    ("w4k", "write", 4096, 20, "gpu", "gpu"),
    ("w1m", "write", MIB, 8, "gpu", "gpu"),
    ("w64m", "write", 64 * MIB, 1, "gpu", "gpu"),
    ("r1m", "read", MIB, 8, "gpu", "gpu"),
    ("r64m", "read", 64 * MIB, 2, "gpu", "gpu"),
    ("s64k", "send", 64 << 10, 20, "host", "host"),
];

fn result<'a>(out: &'a [Value], node: &str, role: &str, test: &str, size: u64) -> &'a Value {
    out.iter()
        .find(|r| r["node_name"] == node && r["role"] == role && r["test"] == test && r["size"] == size)
        .unwrap_or_else(|| panic!("no {role} result for {test} {size} on {node}"))
}

#[test]
fn gpu_to_gpu_rdma_across_two_guests() {
    let (mut server, mut client) = (String::new(), String::new());
    for (id, test, size, n, src, dst) in CASES {
        let common = format!("{test} --id {id} -s {size} -n {n} --src {src} --dst {dst} --verify --json");
        server += &format!("rnic-perf {common} --server || echo failed\n");
        client += &format!("rnic-perf {common} 0 || echo failed\n");
    }
    let stats = tempfile::NamedTempFile::new().unwrap();
    let topo = topology("two-node");
    let out = std::process::Command::new(bin())
        .args(["run", "--no-build", "--timeout", "900", "--topology"])
        .arg(&topo)
        .arg("--stats")
        .arg(stats.path())
        .args(["--on", "0", &server, "--on", "1", &client])
        .output()
        .expect("running rnic-emu run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "both guests succeeded");
    assert!(!stdout.contains("failed"));
    // "[node0] {...}" lines: tag each result with its node.
    let results: Vec<Value> = stdout
        .lines()
        .filter_map(|l| {
            let (node, json) = l.strip_prefix('[')?.split_once("] ")?;
            let mut v: Value = serde_json::from_str(json.strip_prefix('{').map(|_| json)?).ok()?;
            v["node_name"] = node.into();
            Some(v)
        })
        .collect();
    for (_, test, size, n, _, _) in CASES {
        let (srv, cli) = (result(&results, "node0", "server", test, *size), result(&results, "node1", "client", test, *size));
        // The side where the data lands verified it: the server for write/send, the client for read.
        let receiver = if *test == "read" { cli } else { srv };
        // The client's modelled columns (the RNIC's model summary, docs/timing.md).
        assert!(cli["model_lat_us"].as_f64().is_some_and(|v| v > 0.0) && cli["model_gbps"].as_f64().is_some_and(|v| v > 0.0), "{cli}");
        assert_eq!(receiver["bytes_verified"].as_u64(), Some(size * n), "{test} {size}: verified on the receiving side");
        if srv["src"] == "gpu" || srv["dst"] == "gpu" {
            // GPU to GPU across the wire: each side moved every byte peer-to-peer through
            // its own switch (retransmissions may move some twice), none through host memory.
            for side in [srv, cli] {
                assert_eq!(side["bytes_host"].as_u64(), Some(0), "{test} {size}: no host bounce: {side}");
                let p2p = side["bytes_p2p_switch"].as_u64().unwrap_or(0);
                assert!(p2p >= size * n && p2p <= 2 * size * n, "{test} {size}: P2P bytes {p2p}: {side}");
            }
        }
    }
    // The wire, as the node servers counted it.
    let js: Value = serde_json::from_str(&std::fs::read_to_string(stats.path()).unwrap()).unwrap();
    let (n0, n1) = (&js["node0-rnic0"], &js["node1-rnic0"]);
    assert!(n1["pkts_sent"].as_u64().unwrap() > 16 * 1024, "the client put the writes on the wire: {n1}");
    assert!(n0["pkts_sent"].as_u64().unwrap() > 32 * 1024, "the server answered the reads: {n0}");
    assert_eq!((n0["pkts_dropped"].as_u64(), n1["pkts_dropped"].as_u64()), (Some(0), Some(0)));
}

/// A ring (ring AllReduce's communication pattern, as rnic-coll runs it): four guests, each writing
/// from its GPU into the next node's GPU while receiving from the previous one, all at once.
#[test]
fn four_node_ring_of_gpu_writes() {
    let ring = |me: usize| {
        let next = (me + 1) % 4;
        format!(
            "rnic-perf write --server --id r{me} -s 1M -n 4 --src gpu --dst gpu --verify --json > /tmp/s.json & sp=$!
             rnic-perf write --id r{next} -s 1M -n 4 --src gpu --dst gpu --verify --json {next} > /tmp/c.json; c=$?
             wait $sp; s=$?
             cat /tmp/s.json /tmp/c.json
             exit $((c + s))"
        )
    };
    let cmds: Vec<String> = (0..4).map(ring).collect();
    let mut args = vec!["run".to_string(), "--no-build".into(), "--timeout".into(), "600".into(), "--topology".into()];
    args.push(topology("four-node").display().to_string());
    for (i, c) in cmds.iter().enumerate() {
        args.extend(["--on".to_string(), i.to_string(), c.clone()]);
    }
    let out = std::process::Command::new(bin()).args(&args).output().expect("running rnic-emu run");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "all four guests succeeded");
    for node in 0..4 {
        let server: Value = stdout
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("[node{node}] ")))
            .filter_map(|j| serde_json::from_str::<Value>(j).ok())
            .find(|v| v["role"] == "server")
            .unwrap_or_else(|| panic!("node{node}: no server result"));
        assert_eq!(server["bytes_verified"].as_u64(), Some(4 * MIB), "node{node} verified what its neighbour wrote");
        assert_eq!(server["bytes_host"].as_u64(), Some(0), "node{node}: GPU to GPU, no host bounce");
    }
}
