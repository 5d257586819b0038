//! Two runs of one topology at once on one host: each run's nodes join a fabric segment of
//! the run's own (a multicast port reserved per run, docs/fabric.md), so both complete,
//! with and without `rnic-emu run --netns` (each run in a network namespace of its own).
//! Host-level: the node servers are real, QEMU is the stand-in of `common::fake_qemu`,
//! which keeps each run up for a few seconds so that the two overlap. Needs root (with
//! CAP_SYS_ADMIN; skipped, saying so, where namespaces cannot be made).

mod common;
use common::fake_qemu::FakeQemu;
use common::{topology, wait_until};
use std::process::{Output, Stdio};
use std::time::Duration;

/// Starts two `rnic-emu run`s of two-node.toml, the second once both guests of the first
/// have started (so its node servers are on their segment); each guest stays up 4 s.
fn two_runs_at_once(netns: bool) -> [Output; 2] {
    let fake = FakeQemu::new();
    let start = || {
        let mut c = fake.run("stall", 1, 4);
        if netns {
            c.arg("--netns");
        }
        c.args(["--timeout", "60", "--topology", topology("two-node").to_str().unwrap(), "--on", "0", "true", "--on", "1", "true"]);
        c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("running rnic-emu run")
    };
    let first = start();
    assert!(wait_until(Duration::from_secs(30), || fake.boots() >= 2), "the first run's guests did not start");
    let second = start();
    [first.wait_with_output().unwrap(), second.wait_with_output().unwrap()]
}

/// Whether this process may create network namespaces (root with CAP_SYS_ADMIN: not in
/// every container), probed in a child so that this process's namespace stays as it is.
fn can_unshare_net() -> bool {
    std::process::Command::new("unshare").args(["--net", "true"]).status().is_ok_and(|s| s.success())
}

fn check_both_completed(runs: &[Output; 2]) {
    for (i, o) in runs.iter().enumerate() {
        let (out, err) = (String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(7), "run {i} ran both guests to their exit code: {err}");
        assert!(out.contains("[node0] ran on boot") && out.contains("[node1] ran on boot"), "run {i}: {out}");
    }
}

#[test]
fn two_runs_of_one_topology_at_once_each_on_a_segment_of_its_own() {
    check_both_completed(&two_runs_at_once(false));
}

#[test]
fn two_runs_of_one_topology_at_once_each_in_its_own_network_namespace() {
    if !can_unshare_net() {
        eprintln!("skipped: this process may not create network namespaces (--netns needs root with CAP_SYS_ADMIN)");
        return;
    }
    check_both_completed(&two_runs_at_once(true));
}
