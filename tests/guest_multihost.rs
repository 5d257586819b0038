//! Guest-level test of nodes on two hosts (docs/fabric.md "Backends"): two network
//! namespaces the test makes (`rnic_emu_testkit::netns`, deleted at the end), joined by a
//! veth pair, stand for two hosts. Each runs `rnic-emu run` for one node of
//! qemu-configs/two-node.toml on a VXLAN segment to the other, and the two guests run
//! unmodified `ib_write_bw` between their `rnic0`s. perftest exchanges its connection data
//! over TCP on `reth0`, across the VXLAN segment too: nothing is relayed by the host (the
//! runs' rendezvous stores are separate and unused). The host checks both programs'
//! results and each run's segment counters (datagrams both ways, none from strangers).
//! Needs root and iproute2; skipped, with the reason printed, without them.

mod common;
use common::*;
use rnic_emu_testkit::netns::{self, Netns};
use std::process::{Command, Stdio};

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

/// The result row of ib_write_bw: the line under its header whose first field is 65536.
fn bandwidth(lines: &[String]) -> Option<f64> {
    lines.iter().filter_map(|l| l.strip_prefix("bw: ")).map(|l| l.split_whitespace().collect::<Vec<_>>()).find(|f| f.first() == Some(&"65536") && f.len() >= 4).and_then(|f| f[3].parse().ok())
}

#[test]
fn ib_write_bw_between_guests_on_two_hosts_over_vxlan() {
    if let Some(why) = netns::unavailable() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root with iproute2: {why}");
        eprintln!("skipped: {why}");
        return;
    }
    ensure_image();
    let ns = [Netns::create("ga").unwrap(), Netns::create("gb").unwrap()];
    netns::veth_pair(&ns[0], "va", &format!("{}/24", underlay(0)), &ns[1], "vb", &format!("{}/24", underlay(1))).unwrap();
    // Room for a 1514-byte frame plus the 50 bytes of VXLAN encapsulation.
    ns[0].ip(&["link", "set", "va", "mtu", "1600"]).unwrap();
    ns[1].ip(&["link", "set", "vb", "mtu", "1600"]).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for i in 0..2 {
        let segment = format!("vxlan:42@{},remote={}", underlay(i), underlay(1 - i));
        let mut cmd = Command::new(bin());
        cmd.args(["run", "--no-build", "--timeout", "600", "--topology"])
            .arg(topology("two-node"))
            .args(["--segment", &segment, "--stats"])
            .arg(dir.path().join(format!("stats{i}.json")))
            .args(["--on", &i.to_string(), &script(i)]);
        let child = ns[i].exec(&cmd).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("starting rnic-emu run in a namespace");
        runs.push(child);
    }
    let outs: Vec<_> = runs.into_iter().map(|c| c.wait_with_output().expect("waiting for a run")).collect();
    let mut lines = Vec::new();
    for (i, o) in outs.iter().enumerate() {
        let text = String::from_utf8_lossy(&o.stdout);
        eprintln!("== host {i}\n{text}\n{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "host {i}: the run succeeded");
        assert!(!text.contains("failed:"), "host {i}: a step failed");
        lines.push(text.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect::<Vec<String>>());
    }
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
