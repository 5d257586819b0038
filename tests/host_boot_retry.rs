//! `rnic-emu run` boots a node again when its kernel stalls or dies before starting /init
//! (`--boot-timeout`, `--boot-attempts`). Host-level: a stand-in QEMU (a shell script,
//! through `RNIC_EMU_QEMU`) plays a guest that stalls or dies in early boot on its first
//! boots and then runs; the node's real server is started for every boot.

mod common;
use common::fake_qemu::FakeQemu;
use common::topology;
use std::path::Path;

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    boots: u32,
}

fn run(mode: &str, good_boot: u32, extra: &[&str]) -> Outcome {
    let fake = FakeQemu::new();
    let out = fake
        .run(mode, good_boot, 0)
        .args(["--timeout", "120", "--topology", topology("single-switch").to_str().unwrap()])
        .args(extra)
        .args(["--", "true"])
        .output()
        .expect("running rnic-emu run");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        boots: fake.boots(),
    }
}

#[test]
fn a_kernel_that_stalls_before_init_is_booted_again() {
    let o = run("stall", 3, &["--boot-timeout", "2"]);
    assert_eq!((o.code, o.boots), (Some(7), 3), "the third boot ran the command: {}", o.stderr);
    assert_eq!(o.stdout, "ran on boot 3\n");
    assert_eq!(o.stderr.matches("stopped or stalled before starting /init").count(), 2, "{}", o.stderr);
    assert!(o.stderr.contains("(boot 1 of 3; nothing of the image ran): booting it again"), "{}", o.stderr);
}

#[test]
fn a_kernel_that_dies_before_init_is_booted_again() {
    let o = run("die", 2, &["--boot-timeout", "60"]);
    assert_eq!((o.code, o.boots), (Some(7), 2), "{}", o.stderr);
    assert_eq!(o.stdout, "ran on boot 2\n");
}

#[test]
fn a_stall_on_every_boot_fails_the_run_and_keeps_each_boots_console() {
    let o = run("stall", 99, &["--boot-timeout", "1", "--boot-attempts", "2"]);
    assert_eq!((o.code, o.boots), (Some(125), 2), "rnic-emu failed, after two boots: {}", o.stderr);
    assert!(o.stderr.contains("node0: the guest kernel stalled before starting /init: its console was silent for 1s (2 boots)"), "{}", o.stderr);
    assert!(o.stderr.contains("hpet0: 3 comparators, 64-bit 100.000000 MHz counter (boot 2)"), "the last console: {}", o.stderr);
    let kept = o.stderr.split("(logs kept in ").nth(1).and_then(|s| s.split(')').next()).expect("logs kept");
    let first = std::fs::read_to_string(Path::new(kept).join("console-node0.log.boot1")).unwrap();
    assert!(first.contains("(boot 1)"), "{first}");
    assert!(Path::new(kept).join("server-node0.log.boot1").exists());
    std::fs::remove_dir_all(kept).unwrap();
}
