//! Host-level test of rnic-coll's schedule (guest-driver/tools/rnic_tool_coll_sched.h): the
//! system C compiler builds `tests/coll/sched_check.c` against the header, which simulates
//! the ring on contribution sets for 2..12 and 64 ranks and counts that do and do not divide
//! (every chunk reduced exactly once per rank, every rank ends with every chunk, chunk and
//! slice offsets cover the buffer), round-trips immediates and checks the reference sums.
//! This side recomputes the step table for 3 and 4 ranks from the ring's definition (the
//! chunk a rank forwards is the one it received one step earlier; reduce-scatter ends with
//! rank r owning chunk r, all-gather starts from it) and compares it line by line.

use std::process::Command;

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The ring from its definition, by walking chunks backwards from where they must end.
fn expected(n: i64, r: i64, s: i64) -> [i64; 4] {
    let m = |x: i64| x.rem_euclid(n);
    // Reduce-scatter: rank r owns chunk r after step n-2, so it received chunk r at step
    // n-2; what it receives at step s is the chunk it will own n-2-s hops later, shifted by
    // one rank per step: chunk r - (n-2-s) - ... ; by induction recv(r, s) = r - s - 2.
    let rs_recv = m(r - s - 2);
    // It sends at step s what rank r+1 receives at step s.
    let rs_send = m((r + 1) - s - 2);
    // All-gather: rank r starts with its own chunk r, then forwards what it received.
    let ag_send = m(r - s);
    let ag_recv = m((r - 1) - s);
    [rs_send, rs_recv, ag_send, ag_recv]
}

#[test]
fn ring_schedule_simulated_and_tabulated() {
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("sched_check");
    let out = Command::new("cc")
        .args(["-std=gnu11", "-O1", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(repo().join("guest-driver/tools"))
        .arg("-o")
        .arg(&exe)
        .arg(repo().join("tests/coll/sched_check.c"))
        .output()
        .expect("running cc");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let run = Command::new(&exe).output().unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let fails: Vec<&str> = stdout.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(fails.is_empty() && run.status.success(), "schedule checks failed:\n{}", fails.join("\n"));
    let ok: u64 = stdout.lines().find_map(|l| l.strip_prefix("ok ")).expect("an ok line").parse().unwrap();
    assert!(ok > 100_000, "the simulation ran its checks: {ok}");

    let mut rows = 0;
    for line in stdout.lines().filter_map(|l| l.strip_prefix("sched ")) {
        let v: Vec<i64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
        let (n, r, s) = (v[0], v[1], v[2]);
        assert_eq!(&v[3..], &expected(n, r, s), "n {n} rank {r} step {s}: rs_send rs_recv ag_send ag_recv");
        rows += 1;
    }
    assert_eq!(rows, 3 * 2 + 4 * 3, "a row per rank and step for 3 and 4 ranks");
}
