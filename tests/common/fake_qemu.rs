//! A stand-in for QEMU (a shell script, named through `RNIC_EMU_QEMU`) and an image
//! directory for it, so host-level tests can drive `rnic-emu run` (the node servers are
//! real) without booting anything: the script writes the console (the first `-serial
//! file:`) and the command's output (the second), counts its boots in a state file, and
//! plays a guest that stalls or dies in early boot on its first boots, then runs.

use std::path::PathBuf;
use std::process::Command;

/// Boots before $FAKE_GOOD_BOOT stall ($FAKE_MODE=stall) or end at once after a panic
/// line (die); a good boot prints the kernel's /init line, reports exit code 7 and stays
/// up $FAKE_LINGER seconds before it ends (as a guest powering off late).
const SCRIPT: &str = r#"#!/bin/bash
cons=; out=; prev=
for a in "$@"; do
  if [ "$prev" = -serial ]; then
    case "$a" in file:*) if [ -z "$cons" ]; then cons=${a#file:}; elif [ -z "$out" ]; then out=${a#file:}; fi ;; esac
  fi
  prev=$a
done
exec 9>>"$FAKE_STATE.lock"; flock 9
n=$(( $(cat "$FAKE_STATE" 2>/dev/null || echo 0) + 1 ))
echo $n > "$FAKE_STATE"
flock -u 9
echo "[    1.2] hpet0: 3 comparators, 64-bit 100.000000 MHz counter (boot $n)" > "$cons"
if [ "$n" -lt "$FAKE_GOOD_BOOT" ]; then
  case "$FAKE_MODE" in
    stall) exec sleep 300 ;;
    die) echo "[    0.05] Kernel panic - not syncing: IO-APIC + timer doesn't work!" >> "$cons"; exit 0 ;;
  esac
fi
echo "[    2.0] Run /init as init process" >> "$cons"
printf 'ran on boot %s\n@@RNIC-EMU-EXIT@@ 7\n' "$n" > "$out"
exec sleep "$FAKE_LINGER"
"#;

pub struct FakeQemu {
    dir: tempfile::TempDir,
}

impl FakeQemu {
    /// The script and an image directory (a kernel and an initramfs the script never reads).
    pub fn new() -> FakeQemu {
        let dir = tempfile::tempdir().unwrap();
        let qemu = dir.path().join("qemu-system-x86_64");
        std::fs::write(&qemu, SCRIPT).unwrap();
        std::fs::set_permissions(&qemu, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let image = dir.path().join("image");
        std::fs::create_dir(&image).unwrap();
        std::fs::write(image.join("vmlinuz"), b"not a kernel").unwrap();
        std::fs::write(image.join("initramfs.cpio.gz"), b"not an initramfs").unwrap();
        FakeQemu { dir }
    }

    /// `rnic-emu run --no-build` with this stand-in; the caller adds the rest.
    pub fn run(&self, mode: &str, good_boot: u32, linger_s: u32) -> Command {
        let mut c = Command::new(super::bin());
        c.args(["run", "--no-build"])
            .env("RNIC_EMU_QEMU", self.dir.path().join("qemu-system-x86_64"))
            .env("RNIC_EMU_IMAGE_DIR", self.dir.path().join("image"))
            .env("FAKE_STATE", self.state())
            .env("FAKE_MODE", mode)
            .env("FAKE_GOOD_BOOT", good_boot.to_string())
            .env("FAKE_LINGER", linger_s.to_string());
        c
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("boots")
    }

    /// How many times the stand-in was started.
    pub fn boots(&self) -> u32 {
        std::fs::read_to_string(self.state()).map_or(0, |s| s.trim().parse().unwrap_or(0))
    }
}
