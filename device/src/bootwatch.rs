//! Watches a guest's serial console for the line the kernel prints when it starts the
//! initramfs's init ("Run /init as init process"), and for how long the console has been
//! silent. `rnic-emu run` uses it to tell a guest kernel that stalled or died in early
//! boot (before any of the image's code ran) from one that is slow, and from a guest whose
//! command failed, and to boot a stalled node again (`--boot-timeout`, `--boot-attempts`).
//! Silence, not the time since start, is what counts: on a host with more vCPUs than
//! cores a boot can take minutes and still print a line every few seconds.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What the kernel prints as it hands over to /init.
pub const INIT_LINE: &[u8] = b"Run /init as init process";

/// Console silence before /init after which a boot counts as stalled (`--boot-timeout`):
/// boots on a busy host print at most ~8 s apart.
pub const STALL_SILENCE: Duration = Duration::from_secs(60);

/// Boots a node gets before a stall fails the run (`--boot-attempts`).
pub const BOOT_ATTEMPTS: u32 = 3;

/// Follows one console log file from where it last stopped reading.
pub struct BootWatch {
    path: PathBuf,
    offset: u64,
    /// The end of the previous read, so a line split across two reads is still seen.
    carry: Vec<u8>,
    reached: bool,
    /// When the console last grew (or the watch started).
    last_growth: Instant,
}

impl BootWatch {
    pub fn new(path: PathBuf) -> BootWatch {
        BootWatch { path, offset: 0, carry: Vec::new(), reached: false, last_growth: Instant::now() }
    }

    /// Whether the kernel has started /init (reads what the console got since last time).
    pub fn reached_init(&mut self) -> bool {
        if self.reached {
            return true;
        }
        let Ok(mut f) = std::fs::File::open(&self.path) else { return false };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return false;
        }
        let mut buf = std::mem::take(&mut self.carry);
        let before = buf.len();
        if f.read_to_end(&mut buf).is_err() {
            self.carry = buf;
            return false;
        }
        let grown = (buf.len() - before) as u64;
        if grown > 0 {
            self.last_growth = Instant::now();
        }
        self.offset += grown;
        self.reached = buf.windows(INIT_LINE.len()).any(|w| w == INIT_LINE);
        let keep = buf.len().min(INIT_LINE.len() - 1);
        self.carry = buf.split_off(buf.len() - keep);
        self.reached
    }

    /// How long the console has not grown (as of the last [`BootWatch::reached_init`]).
    pub fn silent_for(&self) -> Duration {
        self.last_growth.elapsed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn sees_the_init_line_even_when_it_arrives_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        let mut w = BootWatch::new(path.clone());
        assert!(!w.reached_init(), "no file yet");
        let mut f = std::fs::File::create(&path).unwrap();
        f.write_all(b"[    1.2] hpet0: 3 comparators\n[    2.5] Run /in").unwrap();
        assert!(!w.reached_init());
        f.write_all(b"it as init").unwrap();
        assert!(!w.reached_init());
        f.write_all(b" process\n  with arguments:\n").unwrap();
        assert!(w.reached_init());
        assert!(w.reached_init(), "stays reached");
    }

    #[test]
    fn silence_is_measured_from_the_last_console_growth() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        std::fs::write(&path, "[    0.0] Linux version 7.3\n").unwrap();
        let mut w = BootWatch::new(path.clone());
        std::thread::sleep(Duration::from_millis(60));
        assert!(!w.reached_init());
        assert!(w.silent_for() < Duration::from_millis(50), "the first read is growth");
        std::thread::sleep(Duration::from_millis(60));
        assert!(!w.reached_init());
        assert!(w.silent_for() >= Duration::from_millis(60), "nothing new since");
    }

    #[test]
    fn a_console_without_the_line_never_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("console.log");
        std::fs::write(&path, "Kernel panic - not syncing: IO-APIC + timer doesn't work!\nRun /sbin/init\n").unwrap();
        let mut w = BootWatch::new(path);
        assert!(!w.reached_init());
        assert!(!w.reached_init());
    }
}
