//! `rnic-emu run`: boot one node of a topology, run a shell command in the guest, return
//! its output and exit code. Starts the node's server and QEMU as child processes and ends
//! them (by pid) on every path out: success, failure, timeout and Ctrl-C.
//!
//! Guest protocol (images/init.sh): a second cpio archive appended to the initramfs carries
//! /rnic-emu/cmd.sh and /rnic-emu/env; the command's output arrives on serial port 1,
//! ending with the line "@@RNIC-EMU-EXIT@@ <code>".

use crate::image::Image;
use crate::qemu::{self, GuestFiles};
use crate::topology::Topology;
use anyhow::{bail, Context};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const EXIT_MARKER: &[u8] = b"@@RNIC-EMU-EXIT@@ ";

/// Set by the Ctrl-C handler of the binary; a running `run` then cleans up and stops.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub struct RunOptions {
    pub topology: PathBuf,
    /// Node name or index.
    pub node: String,
    pub command: String,
    pub timeout: Duration,
    /// The `rnic-emu` binary to start as the node's server.
    pub server_bin: PathBuf,
    /// Back GPU memory with files in this directory (kept after the run).
    pub gpu_mem_dir: Option<PathBuf>,
    /// Load the rnic_emu driver before the command (default yes).
    pub load_driver: bool,
    /// Keep the working directory (logs, sockets) even on success.
    pub keep_workdir: bool,
    /// Write the node server's counters (JSON) here once the guest command has finished.
    pub stats_file: Option<PathBuf>,
}

pub struct RunOutcome {
    pub exit_code: i32,
    pub workdir: Option<PathBuf>,
}

/// A child process that is killed (by its pid) and reaped when dropped.
struct ChildGuard {
    what: String,
    child: Child,
}

impl ChildGuard {
    fn spawn(what: &str, cmd: &mut Command) -> anyhow::Result<ChildGuard> {
        // SAFETY: prctl is async-signal-safe; it makes the kernel end the child if we die
        // without running destructors (SIGKILL), so no process outlives its `run`.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd.spawn().with_context(|| format!("starting {what}"))?;
        log::debug!("started {what} (pid {})", child.id());
        Ok(ChildGuard { what: what.to_string(), child })
    }

    fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)) | Err(_))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let pid = self.child.id() as libc::pid_t;
            // SAFETY: signalling our own child by pid; it is not reaped yet, so the pid
            // still names it.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Ok(None) = self.child.try_wait() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
        log::debug!("{} ended", self.what);
    }
}

fn wait_until(deadline: Instant, mut cond: impl FnMut() -> bool) -> bool {
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

/// Builds the guest's initrd: our initramfs plus an archive with the command.
fn write_initrd(img: &Image, dest: &Path, command: &str, load_driver: bool) -> anyhow::Result<()> {
    let mut out = std::fs::File::create(dest)?;
    let len = std::io::copy(&mut std::fs::File::open(&img.initramfs)?, &mut out)?;
    // The kernel only looks for a further archive at a 4-byte aligned offset; it skips
    // zero padding between archives.
    out.write_all(&[0u8; 4][..((4 - len % 4) % 4) as usize])?;
    let env = format!("RNIC_EMU_LOAD_DRIVER={}\n", u8::from(load_driver));
    let script = format!("{command}\n");
    let entries = vec![
        (cpio::NewcBuilder::new("rnic-emu").mode(0o040755), std::io::Cursor::new(Vec::new())),
        (cpio::NewcBuilder::new("rnic-emu/env").mode(0o100644), std::io::Cursor::new(env.into_bytes())),
        (cpio::NewcBuilder::new("rnic-emu/cmd.sh").mode(0o100755), std::io::Cursor::new(script.into_bytes())),
    ];
    cpio::write_cpio(entries.into_iter(), &mut out)?;
    out.flush()?;
    Ok(())
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Follows the guest output file: passes new bytes (minus the exit marker) to `sink` and
/// returns the exit code once the marker line is complete.
struct OutputFollower {
    file: Option<std::fs::File>,
    path: PathBuf,
    pending: Vec<u8>,
    exit_code: Option<i32>,
}

impl OutputFollower {
    fn poll(&mut self, sink: &mut dyn FnMut(&[u8])) {
        if self.file.is_none() {
            self.file = std::fs::File::open(&self.path).ok();
        }
        let Some(f) = self.file.as_mut() else { return };
        let mut buf = Vec::new();
        if f.read_to_end(&mut buf).is_err() {
            return;
        }
        self.pending.extend_from_slice(&buf);
        // Emit complete lines; hold back a partial line that might be the marker.
        while let Some(pos) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=pos).collect();
            if let Some(rest) = line.strip_prefix(EXIT_MARKER) {
                let code = String::from_utf8_lossy(rest).trim().parse().unwrap_or(255);
                self.exit_code.get_or_insert(code);
            } else if self.exit_code.is_none() {
                sink(&line);
            }
        }
        if !self.pending.is_empty() && !EXIT_MARKER.starts_with(&self.pending[..self.pending.len().min(EXIT_MARKER.len())]) {
            sink(&std::mem::take(&mut self.pending));
        }
    }
}

/// Boots the node, runs the command, streams its output to `sink`.
pub fn run(opts: &RunOptions, img: &Image, sink: &mut dyn FnMut(&[u8])) -> anyhow::Result<RunOutcome> {
    let topo = Topology::load(&opts.topology)?;
    let (index, node) = topo
        .node(&opts.node)
        .with_context(|| format!("topology {} has no node '{}'", topo.name, opts.node))?;
    let workdir = tempfile::Builder::new().prefix("rnic-emu-run-").tempdir()?;
    let wd = workdir.path().to_path_buf();
    let sockets = wd.join("sockets");
    std::fs::create_dir_all(&sockets)?;
    let server_log = std::fs::File::create(wd.join(format!("server-{}.log", node.name)))?;

    let mut server_cmd = Command::new(&opts.server_bin);
    server_cmd
        .arg("serve")
        .arg("--topology")
        .arg(&opts.topology)
        .arg("--node")
        .arg(&node.name)
        .arg("--socket-dir")
        .arg(&sockets)
        .stdin(Stdio::null())
        .stdout(server_log.try_clone()?)
        .stderr(server_log);
    if let Some(dir) = &opts.gpu_mem_dir {
        server_cmd.arg("--gpu-mem-dir").arg(dir);
    }
    if std::env::var_os("RUST_LOG").is_none() {
        server_cmd.env("RUST_LOG", "info");
    }
    let mut server = ChildGuard::spawn("rnic-emu serve", &mut server_cmd)?;
    let socket_paths: Vec<PathBuf> = node.devices.iter().map(|d| sockets.join(node.socket_name(d))).collect();
    let ready = wait_until(Instant::now() + Duration::from_secs(20), || {
        server.exited() || socket_paths.iter().all(|p| p.exists())
    });
    let server_log_path = wd.join(format!("server-{}.log", node.name));
    if !ready || server.exited() {
        bail!("the node server did not come up:\n{}", tail(&server_log_path, 20));
    }

    let initrd = wd.join("initrd.img");
    write_initrd(img, &initrd, &opts.command, opts.load_driver)?;
    let console_log = wd.join(format!("console-{}.log", node.name));
    let output_log = wd.join(format!("output-{}.log", node.name));
    let files = GuestFiles { kernel: &img.kernel, initrd: &initrd, console_log: &console_log, output_log: &output_log };
    let args = qemu::command_line(&topo, index, &sockets, &files);
    std::fs::write(wd.join("qemu-cmdline.txt"), args.join("\n"))?;
    let qemu_log = std::fs::File::create(wd.join(format!("qemu-{}.log", node.name)))?;
    let mut qemu_cmd = Command::new(&img.qemu);
    qemu_cmd.args(&args).stdin(Stdio::null()).stdout(qemu_log.try_clone()?).stderr(qemu_log);
    let mut qemu = ChildGuard::spawn("qemu", &mut qemu_cmd)?;

    let mut follower = OutputFollower { file: None, path: output_log, pending: Vec::new(), exit_code: None };
    let deadline = Instant::now() + opts.timeout;
    let mut poweroff_deadline = None;
    let failure = loop {
        follower.poll(sink);
        if follower.exit_code.is_some() {
            // The command is done; the guest powers off next. Do not wait forever on it.
            let d = *poweroff_deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(20));
            if Instant::now() > d {
                log::warn!("the guest reported its exit code but did not power off; stopping QEMU");
                break None;
            }
        }
        if qemu.exited() {
            follower.poll(sink);
            break match follower.exit_code {
                Some(_) => None,
                None => Some(format!(
                    "the guest stopped without reporting an exit code.\nQEMU: {}\nconsole (last lines):\n{}",
                    tail(&wd.join(format!("qemu-{}.log", node.name)), 10),
                    tail(&console_log, 30)
                )),
            };
        }
        if server.exited() {
            break Some(format!("the node server died:\n{}", tail(&server_log_path, 20)));
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            break Some("interrupted".to_string());
        }
        if Instant::now() > deadline {
            break Some(format!(
                "timed out after {:?}; console (last lines):\n{}",
                opts.timeout,
                tail(&console_log, 30)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(qemu);
    if let (None, Some(file)) = (&failure, &opts.stats_file) {
        let stats = crate::serve::query_stats(&sockets, &node.name)?;
        std::fs::write(file, serde_json::to_string_pretty(&stats)?)?;
    }
    drop(server);
    let keep = failure.is_some() || opts.keep_workdir;
    let workdir_path = keep.then(|| workdir.keep());
    if let Some(msg) = failure {
        let where_ = workdir_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        bail!("{msg}\n(logs kept in {where_})");
    }
    Ok(RunOutcome { exit_code: follower.exit_code.unwrap_or(255), workdir: workdir_path })
}
