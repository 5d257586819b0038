//! `rnic-emu run` boots a node again when its kernel stalls or dies before starting /init
//! (`--boot-timeout`, `--boot-attempts`). Host-level: a stand-in QEMU (a shell script,
//! through `RNIC_EMU_QEMU`) plays a guest that stalls or dies in early boot on its first
//! boots and then runs; the node's real server is started for every boot.

use std::path::Path;
use std::process::Command;

/// A stand-in for QEMU: writes the console (first `-serial file:`) and the command's
/// output (second); counts its boots in $FAKE_STATE; boots before $FAKE_GOOD_BOOT stall
/// ($FAKE_MODE=stall) or end at once after a panic line (die).
const FAKE_QEMU: &str = r#"#!/bin/bash
cons=; out=; prev=
for a in "$@"; do
  if [ "$prev" = -serial ]; then
    case "$a" in file:*) if [ -z "$cons" ]; then cons=${a#file:}; elif [ -z "$out" ]; then out=${a#file:}; fi ;; esac
  fi
  prev=$a
done
n=$(( $(cat "$FAKE_STATE" 2>/dev/null || echo 0) + 1 ))
echo $n > "$FAKE_STATE"
echo "[    1.2] hpet0: 3 comparators, 64-bit 100.000000 MHz counter (boot $n)" > "$cons"
if [ "$n" -lt "$FAKE_GOOD_BOOT" ]; then
  case "$FAKE_MODE" in
    stall) exec sleep 300 ;;
    die) echo "[    0.05] Kernel panic - not syncing: IO-APIC + timer doesn't work!" >> "$cons"; exit 0 ;;
  esac
fi
echo "[    2.0] Run /init as init process" >> "$cons"
printf 'ran on boot %s\n@@RNIC-EMU-EXIT@@ 7\n' "$n" > "$out"
"#;

struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    boots: u32,
}

fn run(mode: &str, good_boot: u32, extra: &[&str]) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let qemu = dir.path().join("qemu-system-x86_64");
    std::fs::write(&qemu, FAKE_QEMU).unwrap();
    std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // An image directory with a kernel and an initramfs (the stand-in reads neither).
    let image = dir.path().join("image");
    std::fs::create_dir(&image).unwrap();
    std::fs::write(image.join("vmlinuz"), b"not a kernel").unwrap();
    std::fs::write(image.join("initramfs.cpio.gz"), b"not an initramfs").unwrap();
    let state = dir.path().join("boots");
    let topology = Path::new(env!("CARGO_MANIFEST_DIR")).join("../qemu-configs/single-switch.toml");
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-emu"))
        .args(["run", "--no-build", "--timeout", "120", "--topology", topology.to_str().unwrap()])
        .args(extra)
        .args(["--", "true"])
        .env("RNIC_EMU_QEMU", &qemu)
        .env("RNIC_EMU_IMAGE_DIR", &image)
        .env("FAKE_STATE", &state)
        .env("FAKE_MODE", mode)
        .env("FAKE_GOOD_BOOT", good_boot.to_string())
        .output()
        .expect("running rnic-emu run");
    Outcome {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        boots: std::fs::read_to_string(&state).unwrap().trim().parse().unwrap(),
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
