//! rdma-core's own test suite (pyverbs, `tests/` of the rdma-core source the guest's
//! libibverbs is built from; images/build.sh) on rnic-emu, with Linux Soft-RoCE in the same
//! guest as the reference (docs/ibverbs.md, "rdma-core's test suite").
//!
//! One boot of single-switch: the suite runs as rdma-core's `run_tests.py` runs it
//! (`python3 -m unittest` over the suite's modules, verbose) once with `--dev rnic0 --gid 1`
//! (the RoCE v2 GID of the node's address) and once with `--dev rxe0` on rdma_rxe over a
//! dummy netdev (its RoCE v2 GID of the dummy's IPv4 address). Each test talks to itself
//! through two QPs of the same device (loopback). The host parses every test's result on
//! both devices and asserts: no test fails or errors on rnic0; every test that passes on rxe0
//! passes on rnic0 or skips with one of the reasons of SKIPS (a feature the RNIC does not
//! offer, reported through the device's capabilities or an EOPNOTSUPP); the run is complete
//! (as many results as "Ran N tests" says, nothing missing a module).
//!
//! Not run: the modules of MODULES_NOT_RUN (vendor-specific, or needing something neither
//! device has here); the table in docs/ibverbs.md lists them with the reason.

mod common;
use common::*;
use std::collections::BTreeMap;

/// rdma-core test modules run on both devices.
const MODULES: &[&str] = &[
    "test_device",
    "test_pd",
    "test_mr",
    "test_cq",
    "test_cq_events",
    "test_cqex",
    "test_qp",
    "test_qpex",
    "test_srq",
    "test_atomic",
    "test_addr",
    "test_odp",
    "test_parent_domain",
    "test_shared_pd",
    "test_relaxed_ordering",
    "test_fork",
];

/// Why an rnic0 test that passes on rxe0 may skip: the suite's skip message contains one
/// of these (the suite words them), and the reason is a feature docs/ibverbs.md lists as
/// not offered.
const SKIPS: &[(&str, &str)] = &[];

/// A test's outcome as unittest's verbose runner prints it.
#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Pass,
    Skip(String),
    Fail(String),
}

/// Parses unittest's verbose output (`name (id) ... result`, where a test with a docstring
/// puts the docstring's first line, and the result, on the next line, and a test's own
/// output may come between): test id -> outcome. Also returns "Ran N tests"'s N.
fn parse(text: &str) -> (BTreeMap<String, Outcome>, Option<usize>) {
    let mut out = BTreeMap::new();
    let mut pending: Option<String> = None;
    let mut ran = None;
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(n) = line.strip_prefix("Ran ").and_then(|r| r.split_whitespace().next()) {
            ran = n.parse().ok();
        }
        if let Some(id) = test_id(line) {
            pending = Some(id);
        }
        let Some(id) = pending.clone() else { continue };
        let result = match line.rsplit_once(" ... ") {
            Some((_, r)) => r,
            None => line,
        };
        let outcome = match result {
            "ok" | "expected failure" => Outcome::Pass,
            "FAIL" | "ERROR" | "unexpected success" => Outcome::Fail(result.to_string()),
            r if r.starts_with("skipped ") => Outcome::Skip(r["skipped ".len()..].trim_matches('\'').to_string()),
            _ => continue,
        };
        out.insert(id, outcome);
        pending = None;
    }
    (out, ran)
}

/// The id of a verbose test line `test_name (tests.module.Class.test_name)...`.
fn test_id(line: &str) -> Option<String> {
    let (name, rest) = line.split_once(" (")?;
    let (id, _) = rest.split_once(')')?;
    let ok = name.starts_with("test") && !name.contains(' ') && id.starts_with("tests.") && id.ends_with(name);
    ok.then(|| id.to_string())
}

/// The guest's lines for one device: "<dev>| " prefix removed.
fn device_text(stdout: &str, dev: &str) -> String {
    let prefix = format!("{dev}| ");
    stdout.lines().filter_map(|l| l.strip_prefix(prefix.as_str())).collect::<Vec<_>>().join("\n")
}

fn cell(o: Option<&Outcome>) -> String {
    match o {
        None => "-".into(),
        Some(Outcome::Pass) => "pass".into(),
        Some(Outcome::Skip(r)) => format!("skip ({r})"),
        Some(Outcome::Fail(r)) => r.to_lowercase(),
    }
}

#[test]
fn rdma_core_test_suite_on_rnic0_and_rxe0() {
    ensure_image();
    let modules = MODULES.join(" ");
    // rxe0's RoCE v2 GID of 10.77.0.1 (rxe lists each address as RoCE v1 and v2).
    let script = format!(
        "modprobe rdma_rxe && modprobe dummy || echo failed: modules
        ip link add pv0 type dummy && ip link set pv0 up && ip addr add 10.77.0.1/24 dev pv0 || echo failed: pv0
        rdma link add rxe0 type rxe netdev pv0 || echo failed: rxe0
        sleep 1
        rxegid=
        for g in /sys/class/infiniband/rxe0/ports/1/gids/*; do
            i=${{g##*/}}
            [ \"$(cat $g 2>/dev/null)\" = 0000:0000:0000:0000:0000:ffff:0a4d:0001 ] &&
                [ \"$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)\" = 'RoCE v2' ] && rxegid=$i
        done
        echo \"rxe-gid: $rxegid\"
        echo \"rnic-gid1: $(cat /sys/class/infiniband/rnic0/ports/1/gids/1)\"
        cd /usr/lib/rdma-core/tests
        for run in rnic0:1 rxe0:$rxegid; do
            dev=${{run%%:*}}; gid=${{run#*:}}
            start=$(date +%s)
            timeout 600 python3 run_tests.py --dev $dev --gid $gid -v {modules} >/tmp/$dev.out 2>&1
            echo \"$dev-rc: $? seconds: $(( $(date +%s) - start ))\"
            sed \"s/^/$dev| /\" /tmp/$dev.out
        done
        dmesg | grep -cE 'WARNING|BUG:|Oops' | sed 's/^/kernel-warnings: /'"
    );
    let run = run_guest(&topology("single-switch"), &[], &script);
    assert_eq!(run.code, Some(0), "the guest script ran to its end");
    assert!(!run.stdout.contains("failed: "), "rxe0 set up over a dummy netdev");
    assert!(run.stdout.lines().any(|l| l.starts_with("rxe-gid: ") && l.len() > "rxe-gid: ".len()), "rxe0 has a RoCE v2 GID");
    assert!(!run.stdout.contains("No module named"), "the image has every module the suite imports");

    let (rnic, rnic_ran) = parse(&device_text(&run.stdout, "rnic0"));
    let (rxe, rxe_ran) = parse(&device_text(&run.stdout, "rxe0"));
    assert_eq!(rnic_ran, Some(rnic.len()), "every rnic0 test's result parsed");
    assert_eq!(rxe_ran, Some(rxe.len()), "every rxe0 test's result parsed");

    // The table (docs/ibverbs.md), printed for the record.
    let mut ids: Vec<&String> = rnic.keys().chain(rxe.keys()).collect();
    ids.sort();
    ids.dedup();
    eprintln!("| test | rnic0 | rxe0 |\n|---|---|---|");
    for id in &ids {
        eprintln!("| {} | {} | {} |", id.trim_start_matches("tests."), cell(rnic.get(*id)), cell(rxe.get(*id)));
    }
    let count = |m: &BTreeMap<String, Outcome>, f: fn(&Outcome) -> bool| m.values().filter(|o| f(o)).count();
    for (dev, m) in [("rnic0", &rnic), ("rxe0", &rxe)] {
        eprintln!(
            "{dev}: {} pass, {} skip, {} fail",
            count(m, |o| *o == Outcome::Pass),
            count(m, |o| matches!(o, Outcome::Skip(_))),
            count(m, |o| matches!(o, Outcome::Fail(_)))
        );
    }

    assert_eq!(rnic.len(), rxe.len(), "the same tests ran on both devices");
    assert!(count(&rxe, |o| *o == Outcome::Pass) >= 20, "the reference (rxe0) really passes tests");
    assert!(count(&rnic, |o| *o == Outcome::Pass) >= 20, "rnic0 really passes tests");
    let mut wrong = Vec::new();
    for (id, o) in &rnic {
        match (o, rxe.get(id)) {
            (Outcome::Pass, _) => {}
            (Outcome::Fail(r), _) => wrong.push(format!("{id}: {r} on rnic0")),
            (Outcome::Skip(why), Some(Outcome::Pass)) => {
                if !SKIPS.iter().any(|(needle, _)| why.contains(needle)) {
                    wrong.push(format!("{id}: skipped on rnic0 ({why}) but passes on rxe0"));
                }
            }
            (Outcome::Skip(_), _) => {}
        }
    }
    assert!(wrong.is_empty(), "rnic0 against rxe0:\n{}", wrong.join("\n"));
    assert!(run.stdout.contains("kernel-warnings: 0"), "no kernel warning");
}

#[test]
fn parse_unittest_verbose_output() {
    let text = "test_a (tests.test_x.T.test_a) ... ok\n\
        test_b (tests.test_x.T.test_b)\nDoc line of b ... skipped 'no SRQ'\n\
        test_c (tests.test_x.T.test_c) ... some output\nFAIL\n\
        test_d (tests.test_x.T.test_d) ... ERROR\n\nRan 4 tests in 1.0s\n";
    let (m, ran) = parse(text);
    assert_eq!(ran, Some(4));
    assert_eq!(m["tests.test_x.T.test_a"], Outcome::Pass);
    assert_eq!(m["tests.test_x.T.test_b"], Outcome::Skip("no SRQ".into()));
    assert_eq!(m["tests.test_x.T.test_c"], Outcome::Fail("FAIL".into()));
    assert_eq!(m["tests.test_x.T.test_d"], Outcome::Fail("ERROR".into()));
}
