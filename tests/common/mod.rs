//! Helpers shared by the integration tests: the binary under test, guest runs through
//! `rnic-emu run`, parsing of guest output, the rnic-bar test pattern, child processes
//! that are ended by pid, the RDMA WQE header most host tests post.
#![allow(dead_code)]

pub mod fake_qemu;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rnic-emu")
}

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn topology(name: &str) -> PathBuf {
    repo().join("qemu-configs").join(format!("{name}.toml"))
}

/// Builds the guest image once per test binary (cached by images/build.sh).
pub fn ensure_image() {
    static IMAGE: Once = Once::new();
    IMAGE.call_once(|| {
        let status = Command::new(bin()).arg("image").status().expect("running rnic-emu image");
        assert!(status.success(), "building the guest image failed");
    });
}

pub struct GuestRun {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Starts QEMU for a test that drives the guest itself (not through `rnic-emu run`) and
/// returns once the guest kernel has started /init. A kernel that stalls (its console
/// silent for `STALL_SILENCE`) or dies in early boot (under TCG on a loaded host; nothing
/// of ours has run yet) is killed and started again, up to `BOOT_ATTEMPTS` boots, by the
/// rule and defaults of `rnic-emu run`; the vfio-user server serves the next QEMU after a
/// client goes.
pub fn spawn_qemu_until_init(qemu: &Path, args: &[String], console: &Path, log: &Path) -> Proc {
    spawn_qemu_counting_boots(qemu, args, console, log).0
}

/// As spawn_qemu_until_init, and also returns how many QEMU processes it started (each
/// one a vfio-user client the server will see come and go).
pub fn spawn_qemu_counting_boots(qemu: &Path, args: &[String], console: &Path, log: &Path) -> (Proc, usize) {
    use rnic_emu::bootwatch::{BootWatch, BOOT_ATTEMPTS, STALL_SILENCE};
    for boot in 1..=BOOT_ATTEMPTS {
        let out = std::fs::File::create(log).unwrap();
        let mut child = Proc(Command::new(qemu).args(args).stdin(Stdio::null()).stdout(out.try_clone().unwrap()).stderr(out).spawn().expect("starting QEMU"));
        let mut watch = BootWatch::new(console.to_path_buf());
        while !watch.reached_init() && watch.silent_for() < STALL_SILENCE && matches!(child.0.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(100));
        }
        if watch.reached_init() {
            return (child, boot as usize);
        }
        let console_text = std::fs::read_to_string(console).unwrap_or_default();
        eprintln!("boot {boot}: the guest kernel stalled or died before /init; console:\n{console_text}\nbooting again");
        drop(child);
    }
    panic!("the guest kernel did not start /init in {BOOT_ATTEMPTS} boots");
}

/// Boots `topology` with `rnic-emu run` and runs `script` in the guest.
pub fn run_guest(topology: &Path, extra: &[&str], script: &str) -> GuestRun {
    ensure_image();
    let out: Output = Command::new(bin())
        .args(["run", "--no-build", "--timeout", "600", "--topology"])
        .arg(topology)
        .args(extra)
        .arg("--")
        .arg(script)
        .stdin(Stdio::null())
        .output()
        .expect("running rnic-emu run");
    let run = GuestRun {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!("--- guest stdout ---\n{}\n--- rnic-emu stderr ---\n{}", run.stdout, run.stderr);
    run
}

/// The values of "key: value" lines, in order.
pub fn values<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    let prefix = format!("{key}: ");
    text.lines().filter_map(|l| l.strip_prefix(prefix.as_str())).map(str::trim).collect()
}

/// The single value of a "key: value" line; panics when it is missing or repeated.
pub fn value<'a>(text: &'a str, key: &str) -> &'a str {
    let v = values(text, key);
    assert_eq!(v.len(), 1, "expected one '{key}:' line, got {v:?}");
    v[0]
}

/// Output of the guest's scenario tools (`rnic-verbs-check`, `rnic-driver-check`): scenario
/// name (from "scenario: NAME" lines) -> the "key: value" lines after it.
pub fn scenarios(out: &str) -> std::collections::HashMap<String, std::collections::HashMap<String, String>> {
    let mut all: std::collections::HashMap<String, std::collections::HashMap<String, String>> = Default::default();
    let mut cur = None;
    for line in out.lines() {
        if let Some(name) = line.strip_prefix("scenario: ") {
            cur = Some(name.trim().to_string());
            all.entry(name.trim().to_string()).or_default();
        } else if let (Some(c), Some((k, v))) = (&cur, line.split_once(": ")) {
            all.get_mut(c).unwrap().insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    all
}

/// The sections `rnic-status` prints: ("rnic"|"gpu", bdf, body).
pub fn status_sections(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for chunk in text.split("== ").skip(1) {
        let (head, body) = chunk.split_once('\n').unwrap_or((chunk, ""));
        let mut words = head.split_whitespace();
        if let (Some(kind @ ("rnic" | "gpu")), Some(bdf)) = (words.next(), words.next()) {
            out.push((kind.to_string(), bdf.to_string(), body.to_string()));
        }
    }
    out
}

/// A multi-node run's output lines of node `node` ("[nodeN] " prefix removed), whitespace
/// runs as one space.
pub fn node_lines(stdout: &str, node: usize) -> Vec<String> {
    let prefix = format!("[node{node}] ");
    stdout.lines().filter_map(|l| l.strip_prefix(prefix.as_str())).map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect()
}

/// What follows `prefix` on the first of `lines` that starts with it.
pub fn line_after<'a>(lines: &'a [String], prefix: &str) -> Option<&'a str> {
    lines.iter().find_map(|l| l.strip_prefix(prefix))
}

/// perftest's result row among the lines tagged `tag` ("tag: ..."): the one whose first
/// field is the message size and second the iteration count, split into fields.
pub fn perftest_row<'a>(lines: &'a [String], tag: &str, size: &str) -> Option<Vec<&'a str>> {
    let p = format!("{tag}: ");
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(p.as_str()))
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.first() == Some(&size) && f.len() >= 4 && f[1].parse::<u64>().is_ok())
}

/// The byte `rnic-bar pattern-write` puts at BAR offset `i` (guest-driver/tools/rnic-bar.c).
pub fn pattern_byte(seed: u32, i: u64) -> u8 {
    let x = (i as u32).wrapping_mul(0x9E37_79B1).wrapping_add(seed.wrapping_mul(0x85EB_CA77));
    (x >> 24) as u8
}

pub fn pattern(seed: u32, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| pattern_byte(seed, offset + i)).collect()
}

/// A child process ended by its pid when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// The header of a signaled one-SGE RDMA WRITE or READ (`opcode`) of `remote_addr` under
/// `rkey`: the WQE most host tests post.
pub fn rdma_wqe(opcode: u8, wr_id: u64, remote_addr: u64, rkey: u32) -> rnic_emu_core::contract::abi::WqeHeader {
    use rnic_emu_core::contract::abi::{WqeHeader, WQE_FLAG_SIGNALED};
    WqeHeader { opcode, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id, remote_addr, rkey, ..Default::default() }
}
