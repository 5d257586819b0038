//! Guest-level test of nodes on two hosts (docs/fabric.md "Backends"): two network
//! namespaces the test makes (`rnic_emu_testkit::netns`, deleted at the end), joined by a
//! veth pair, stand for two hosts. Each runs `rnic-emu run` for one node of
//! qemu-configs/two-node.toml on a VXLAN segment to the other, and the two guests run
//! unmodified `ib_write_bw` between their `rnic0`s. perftest exchanges its connection data
//! over TCP on `reth0`, across the VXLAN segment too: nothing is relayed by the host (the
//! runs' rendezvous stores are separate and unused). The host checks both programs'
//! results and each run's segment counters (datagrams both ways, none from strangers).
//!
//! Then four nodes (four-node.toml), two on each host, each with a VXLAN port of its own,
//! run `rnic-coll all_reduce` as one ring across both hosts: the ranks bootstrap through a
//! store that rank 0's guest serves over TCP on `reth0` (`rnic-kv serve`,
//! `RNIC_KV_ADDR`), so again nothing is relayed by the host.
//!
//! Then the far end is Linux's own: host B has a bridge with a vxlan device (the VTEP for
//! host A's node) and a TAP device, on which a plain guest (softroce-interop's node2,
//! virtio-net on `-netdev tap`) runs Soft-RoCE; `ib_write_bw` and `ibv_rc_pingpong --chk`
//! run between rnic0 on host A and rxe0 on host B through Linux's VXLAN and bridge.
//! Needs root and iproute2; skipped, with the reason printed, without them.

mod common;
use common::*;
use rnic_emu_testkit::netns::{self, Netns};
use std::process::{Command, Stdio};

/// The tests' guests boot one test at a time (a small host runs 2 or 4 TCG guests at once,
/// not 8).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The underlay: each namespace's veth address.
fn underlay(i: usize) -> String {
    format!("10.201.{}.{}", std::process::id() % 200, i + 1)
}

/// Node `node`'s guest script: node0 serves, node1 connects (retrying until the server is
/// up).
fn script(node: usize) -> String {
    let common = format!("G=$(rnic-gid rnic0 10.0.0.{}) || echo failed: no GID\n", 11 + node);
    let bw = "ib_write_bw -F -d rnic0 -x $G -s 65536 -n 200 --report_gbits";
    if node == 0 {
        format!("{common}echo \"gid: $G\"; {bw} > /tmp/out 2>&1; echo \"rc $?\"; sed 's/^/bw: /' /tmp/out\n")
    } else {
        format!(
            "{common}n=0; while :; do {bw} 10.0.0.11 > /tmp/out 2>&1; rc=$?
             grep -qi \"couldn't connect\" /tmp/out && [ $n -lt 120 ] || break; n=$((n + 1)); sleep 1; done
             echo \"rc $rc\"; sed 's/^/bw: /' /tmp/out\n"
        )
    }
}

/// ib_write_bw's average bandwidth (Gb/s) from its 65536-byte result row.
fn bandwidth(lines: &[String]) -> Option<f64> {
    perftest_row(lines, "bw", "65536").and_then(|f| f[3].parse().ok())
}

/// Two namespaces as two hosts, joined by a veth pair with room for a 1514-byte frame plus
/// the 50 bytes of VXLAN encapsulation; None (skip) without root or iproute2.
fn two_hosts(tag: &str) -> Option<[Netns; 2]> {
    if let Some(why) = netns::unavailable() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with iproute2: {why}");
        eprintln!("skipped: {why}");
        return None;
    }
    ensure_image();
    let ns = [Netns::create(&format!("{tag}a")).unwrap(), Netns::create(&format!("{tag}b")).unwrap()];
    netns::veth_pair(&ns[0], "va", &format!("{}/24", underlay(0)), &ns[1], "vb", &format!("{}/24", underlay(1))).unwrap();
    ns[0].ip(&["link", "set", "va", "mtu", "1600"]).unwrap();
    ns[1].ip(&["link", "set", "vb", "mtu", "1600"]).unwrap();
    Some(ns)
}

/// Runs `rnic-emu run` with `args` in each namespace at once (see [`run_all`]).
fn run_on_both(ns: &[Netns; 2], args: [Vec<String>; 2]) -> Vec<Vec<String>> {
    let [a, b] = args;
    run_all(&[(&ns[0], a), (&ns[1], b)])
}

/// Runs `rnic-emu run` with each set of arguments in its namespace, all at once; each run's
/// output lines (whitespace runs as one space), after checking that every run succeeded.
fn run_all(runs_in: &[(&Netns, Vec<String>)]) -> Vec<Vec<String>> {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
    let mut runs = Vec::new();
    for (n, a) in runs_in {
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--no-build", "--timeout", "600"]).args(a);
        runs.push(n.exec(&cmd).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("starting rnic-emu run in a namespace"));
    }
    let outs: Vec<_> = runs.into_iter().map(|c| c.wait_with_output().expect("waiting for a run")).collect();
    for (i, o) in outs.iter().enumerate() {
        eprintln!("== host {i}\n{}\n{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    }
    let mut lines = Vec::new();
    for (i, o) in outs.iter().enumerate() {
        let text = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(0), "host {i}: the run succeeded");
        assert!(!text.contains("failed:"), "host {i}: a step failed");
        lines.push(text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<String>>());
    }
    lines
}

#[test]
fn ib_write_bw_between_guests_on_two_hosts_over_vxlan() {
    let Some(ns) = two_hosts("g") else { return };
    let dir = tempfile::tempdir().unwrap();
    let args = [0, 1].map(|i: usize| {
        let segment = format!("vxlan:42@{},remote={}", underlay(i), underlay(1 - i));
        let stats = dir.path().join(format!("stats{i}.json")).display().to_string();
        let topo = topology("two-node").display().to_string();
        vec!["--topology".into(), topo, "--segment".into(), segment, "--stats".into(), stats, "--on".into(), i.to_string(), script(i)]
    });
    let lines = run_on_both(&ns, args);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(line_after(l, "rc "), Some("0"), "host {i}: ib_write_bw's exit status");
        let bw = bandwidth(l).unwrap_or_else(|| panic!("host {i}: no ib_write_bw result row"));
        assert!(bw > 0.0, "host {i}: {bw} Gb/s");
    }
    // Each node's segment: VXLAN datagrams both ways, none refused.
    for i in 0..2 {
        let stats: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join(format!("stats{i}.json"))).unwrap()).unwrap();
        let seg = &stats[format!("node{i}-segment")];
        let n = |k: &str| seg[k].as_u64().unwrap_or_else(|| panic!("host {i}: no segment counter {k}: {stats}"));
        assert!(n("tx_datagrams") > 200 && n("rx_datagrams") > 200, "host {i}: the WRITEs and their ACKs crossed the VXLAN segment: {seg}");
        assert_eq!((n("rx_foreign"), n("rx_bad_header")), (0, 0), "host {i}: {seg}");
    }
}

#[test]
fn rxe_behind_linux_vxlan_and_a_bridge_meets_rnic0() {
    let Some(ns) = two_hosts("x") else { return };
    // Host B: br0 holds vx0 (Linux's VTEP, to host A) and tg0 (the plain guest's TAP).
    let b = &ns[1];
    for args in [
        vec!["link", "add", "br0", "type", "bridge"],
        vec!["link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789", "remote", &underlay(0), "local", &underlay(1)],
        vec!["link", "set", "vx0", "mtu", "1500", "master", "br0", "up"],
        vec!["tuntap", "add", "dev", "tg0", "mode", "tap"],
        vec!["link", "set", "tg0", "master", "br0", "up"],
        vec!["link", "set", "br0", "up"],
    ] {
        b.ip(&args).unwrap();
    }
    let rnic = "G=$(rnic-gid rnic0 10.0.0.11) || echo failed: no GID
        ib_write_bw -F -d rnic0 -x $G -s 65536 -n 200 --report_gbits > /tmp/out 2>&1; echo \"rc bw $?\"; sed 's/^/bw: /' /tmp/out
        n=0; while :; do ibv_rc_pingpong --chk -s 4096 -n 200 -d rnic0 -g $G 10.0.0.13 > /tmp/out 2>&1; rc=$?
            grep -qi \"couldn't connect\" /tmp/out && [ $n -lt 120 ] || break; n=$((n + 1)); sleep 1; done
        echo \"rc pp $rc\"; sed 's/^/pp: /' /tmp/out\n";
    let rxe = "modprobe virtio_net && modprobe rdma_rxe && modprobe ib_uverbs || echo failed: modules
        ip link set eth0 up && ip addr add 10.0.0.13/24 dev eth0 || echo failed: eth0
        rdma link add rxe0 type rxe netdev eth0 || echo failed: rxe0
        G=$(rnic-gid rxe0 10.0.0.13) || echo failed: no GID
        n=0; while :; do ib_write_bw -F -d rxe0 -x $G -s 65536 -n 200 --report_gbits 10.0.0.11 > /tmp/out 2>&1; rc=$?
            grep -qi \"couldn't connect\" /tmp/out && [ $n -lt 120 ] || break; n=$((n + 1)); sleep 1; done
        echo \"rc bw $rc\"; sed 's/^/bw: /' /tmp/out
        ibv_rc_pingpong --chk -s 4096 -n 200 -d rxe0 -g $G > /tmp/out 2>&1; echo \"rc pp $?\"; sed 's/^/pp: /' /tmp/out\n";
    let topo = topology("softroce-interop").display().to_string();
    let vxlan = format!("vxlan:42@{},remote={}", underlay(0), underlay(1));
    let lines = run_on_both(
        &ns,
        [
            vec!["--topology".into(), topo.clone(), "--segment".into(), vxlan, "--on".into(), "0".into(), rnic.into()],
            vec!["--topology".into(), topo, "--segment".into(), "tap:tg0".into(), "--on".into(), "2".into(), rxe.into()],
        ],
    );
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(line_after(l, "rc bw "), Some("0"), "host {i}: ib_write_bw");
        assert!(bandwidth(l).is_some_and(|b| b > 0.0), "host {i}: ib_write_bw's result row");
        assert_eq!(line_after(l, "rc pp "), Some("0"), "host {i}: ibv_rc_pingpong --chk");
        assert!(l.iter().any(|x| x.starts_with("pp: 200 iters in ")), "host {i}: 200 x 4096 bytes ponged, every buffer checked");
    }
    // Linux's vxlan learned host A's port behind A's address.
    let fdb = std::process::Command::new("bridge")
        .args(["-n", &b.name, "fdb", "show", "dev", "vx0"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    assert!(fdb.contains("02:e1:0a:00:00:0b") && fdb.contains(&underlay(0)), "vx0's forwarding table: {fdb}");
}

#[test]
fn all_reduce_over_four_nodes_on_two_hosts() {
    let Some(ns) = two_hosts("c") else { return };
    // Node i: host i / 2, VXLAN port 4789 + i % 2; every other node's port a remote.
    let vtep = |i: usize| format!("{}:{}", underlay(i / 2), 4789 + i % 2);
    let topo = topology("four-node").display().to_string();
    let runs: Vec<(&Netns, Vec<String>)> = (0..4)
        .map(|i| {
            let remotes: Vec<String> = (0..4).filter(|&j| j != i).map(|j| format!("remote={}", vtep(j))).collect();
            let segment = format!("vxlan:42@{},{}", vtep(i), remotes.join(","));
            let serve = if i == 0 { "rnic-kv serve 7000 & " } else { "" };
            let script = format!("export RNIC_KV_ADDR=10.0.0.11:7000; {serve}rnic-coll all_reduce -b 1M -e 2M -f 2 -n 2 --json || echo failed: all_reduce\n");
            (&ns[i / 2], vec!["--topology".into(), topo.clone(), "--segment".into(), segment, "--on".into(), i.to_string(), script])
        })
        .collect();
    let lines = run_all(&runs);
    // Every run succeeded (run_all); rank 0 prints the results, every element checked.
    for (i, l) in lines.iter().enumerate().take(1) {
        let rows: Vec<serde_json::Value> =
            l.iter().filter_map(|x| serde_json::from_str::<serde_json::Value>(x).ok()).filter(|v| v["op"] == "all_reduce" && v["summary"].is_null()).collect();
        let sizes: Vec<u64> = rows.iter().filter_map(|r| r["size"].as_u64()).collect();
        assert_eq!(sizes, [1 << 20, 2 << 20], "rank {i}: one row per size: {rows:?}");
        for r in &rows {
            assert_eq!(r["checked"], true, "rank {i}: {r}");
            assert_eq!((r["oop_wrong"].as_u64(), r["ip_wrong"].as_u64()), (Some(0), Some(0)), "rank {i}: #wrong: {r}");
        }
    }
}
