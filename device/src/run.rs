//! `rnic-emu run`: boot one node of a topology, run a shell command in the guest, return
//! its output and exit code. Starts the node's server and QEMU as child processes and ends
//! them (by pid) on every path out: success, failure, timeout and Ctrl-C.
//!
//! Guest protocol (images/init.sh): a second cpio archive appended to the initramfs carries
//! /rnic-emu/cmd.sh and /rnic-emu/env; the command's output arrives on serial port 1,
//! ending with the line "@@RNIC-EMU-EXIT@@ <code>".
//!
//! A node whose console stays silent for `boot_timeout` before its kernel starts /init
//! (or whose QEMU ends before that) stalled or died in early boot, before anything of the
//! image ran: it is stopped and booted again with a fresh node server, up to
//! `boot_attempts` boots, its earlier logs kept as `<log>.boot<N>` (`bootwatch`). Under
//! TCG on a loaded host such boots happen (a lost wake-up in a stop_machine rendezvous,
//! an int3 while the kernel patches its text).
//!
//! With `--trace FILE` every node's MMIO/DMA trace is on from before QEMU starts, read
//! over the control sockets while the run goes and written to FILE as JSON lines, each
//! with its node (docs/trace.md).

use crate::bootwatch::BootWatch;
use crate::image::Image;
use crate::kv::KvStore;
use crate::qemu::{self, GuestFiles};
use anyhow::{bail, Context};
use rnic_emu_core::platform::topology::Topology;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const EXIT_MARKER: &[u8] = b"@@RNIC-EMU-EXIT@@ ";

/// Set by the Ctrl-C handler of the binary; a running `run` then cleans up and stops.
pub static INTERRUPTED: AtomicBool = AtomicBool::new(false);

#[derive(Clone)]
pub struct RunOptions {
    pub topology: PathBuf,
    /// (node name or index, guest command) for every node that runs something. One entry:
    /// the classic single-guest run (output unprefixed); several: a multi-node run where
    /// every listed node boots at once and output lines are prefixed "[node] ".
    pub commands: Vec<(String, String)>,
    pub timeout: Duration,
    /// A node whose console has been silent this long before its kernel started /init is
    /// booted again.
    pub boot_timeout: Duration,
    /// Boots a node gets before a stall in early boot fails the run (at least 1).
    pub boot_attempts: u32,
    /// The `rnic-emu` binary to start as the node's server.
    pub server_bin: PathBuf,
    /// Back GPU memory with files in this directory (kept after the run).
    pub gpu_mem_dir: Option<PathBuf>,
    /// Load the rnic_emu driver before the command (default yes).
    pub load_driver: bool,
    /// Keep the working directory (logs, sockets) even on success.
    pub keep_workdir: bool,
    /// Write the node servers' counters (JSON) here once the guest commands have finished.
    pub stats_file: Option<PathBuf>,
    /// Write every fabric packet of every node to `<prefix>` (one node) or
    /// `<prefix>.<node>` (several).
    pub pcap: Option<PathBuf>,
    /// The size bound of each pcap file, MiB (None: the server's default).
    pub pcap_max_mib: Option<u64>,
    /// The fabric segment the nodes join (None: one of the run's own, on loopback).
    pub segment: Option<rnic_emu_server::fabric::segment::SegmentAddr>,
    /// Record every node's MMIO/DMA trace to this file (JSON lines).
    pub trace_file: Option<PathBuf>,
}

enum BootState {
    /// Booted, or still within its boot time.
    Going,
    /// Stopped or stalled before /init; boot it again.
    Again,
    /// Stalled before /init on its last boot: the run fails with this message.
    Stalled(String),
}

/// Where a node's boot stands; a QEMU that ended before /init on its last boot is left
/// to [`NodeRun::poll`], which reports it with the console's last lines.
fn boot_check(n: &mut NodeRun, opts: &RunOptions) -> BootState {
    if n.boot.reached_init() {
        return BootState::Going;
    }
    let ended = n.qemu.exited();
    let stalled = n.boot.silent_for() > opts.boot_timeout;
    match (ended || stalled, n.attempt < opts.boot_attempts.max(1)) {
        (false, _) => BootState::Going,
        (true, true) => BootState::Again,
        (true, false) if ended => BootState::Going,
        (true, false) => BootState::Stalled(format!(
            "{}: the guest kernel stalled before starting /init: its console was silent for {:?} ({} boots)\nconsole (last lines):\n{}",
            n.name,
            opts.boot_timeout,
            n.attempt,
            tail(&n.console_log, 30)
        )),
    }
}

/// Writes the MMIO/DMA traces of a run's nodes to one file as they come.
struct TraceFile {
    out: std::io::BufWriter<std::fs::File>,
    readers: Vec<crate::iotrace_client::Reader>,
}

impl TraceFile {
    /// Reads what every node recorded since the last call and appends it, each event
    /// with its node; a gap the ring's overflow left is written as a `lost` line.
    fn drain(&mut self) -> anyhow::Result<()> {
        for r in &mut self.readers {
            let polled = r.poll()?;
            if polled.lost > 0 {
                writeln!(self.out, "{}", serde_json::json!({ "node": r.node, "lost": polled.lost, "overflow": polled.overflow }))?;
            }
            for mut e in polled.events {
                if let serde_json::Value::Object(m) = &mut e {
                    m.insert("node".into(), r.node.clone().into());
                }
                writeln!(self.out, "{e}")?;
            }
        }
        self.out.flush()?;
        Ok(())
    }

    /// A node was booted again: its new server's trace starts from the beginning.
    fn restarted(&mut self, node: &str) {
        for r in self.readers.iter_mut().filter(|r| r.node == node) {
            r.restart();
        }
    }
}

pub struct RunOutcome {
    /// The command's exit code (several nodes: the first non-zero one, else 0).
    pub exit_code: i32,
    /// (node, exit code) for every node that ran a command.
    pub per_node: Vec<(String, i32)>,
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
        self.stop();
    }
}

impl ChildGuard {
    /// Ends the child (SIGTERM, then SIGKILL after 3 s) and reaps it; a no-op once done.
    fn stop(&mut self) {
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
pub fn write_initrd(img: &Image, dest: &Path, command: &str, load_driver: bool) -> anyhow::Result<()> {
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

/// What a stuck node was doing (a run that timed out): its console's last lines and, for a
/// node with a server, the server log's and the device counters that are not zero.
fn node_state(n: &NodeRun, sockets: &Path) -> String {
    let mut s = format!("{} console:\n{}", n.name, tail(&n.console_log, 20));
    if n.server.is_some() {
        s += &format!("\n{} server log:\n{}", n.name, tail(&n.server_log, 20));
        match rnic_emu_server::serve::query_stats(sockets, &n.name) {
            Ok(v) => s += &format!("\n{} counters: {}", n.name, nonzero_counters(&v)),
            Err(e) => s += &format!("\n{} counters: unavailable ({e:#})", n.name),
        }
    }
    s
}

/// `function.counter=value` for each counter of a stats reply that is not zero.
fn nonzero_counters(stats: &serde_json::Value) -> String {
    let mut out = Vec::new();
    for (function, counters) in stats.as_object().into_iter().flatten() {
        for (name, v) in counters.as_object().into_iter().flatten() {
            if v.as_u64().is_some_and(|x| x != 0) {
                out.push(format!("{function}.{name}={v}"));
            }
        }
    }
    out.join(" ")
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

fn rendezvous_path(wd: &Path, node: &str) -> PathBuf {
    wd.join(format!("kv-{node}.sock"))
}

/// Serves the rendezvous store to a node's guests (its third serial port) for the whole
/// run: a node booted again reconnects to the same socket.
fn start_rendezvous(wd: &Path, node: &str, kv: &Arc<KvStore>) -> anyhow::Result<()> {
    let listener = std::os::unix::net::UnixListener::bind(rendezvous_path(wd, node))?;
    let (store, name) = (kv.clone(), node.to_string());
    std::thread::spawn(move || crate::kv::serve(listener, store, name));
    Ok(())
}

/// Moves a stalled boot's logs aside (`<log>.boot<N>`) so the next boot starts fresh ones.
fn keep_boot_logs(n: &NodeRun) {
    for log in [&n.console_log, &n.server_log, &n.qemu_log] {
        let mut kept = log.clone().into_os_string();
        kept.push(format!(".boot{}", n.attempt));
        let _ = std::fs::rename(log, kept);
    }
}

/// One booted node of a run.
struct NodeRun {
    name: String,
    /// The node's index in the topology and its command (to boot it again).
    index: usize,
    command: String,
    /// Which boot this is (1 = the first).
    attempt: u32,
    boot: BootWatch,
    /// The node server (None: a plain node).
    server: Option<ChildGuard>,
    qemu: ChildGuard,
    follower: OutputFollower,
    console_log: PathBuf,
    server_log: PathBuf,
    qemu_log: PathBuf,
    /// Partial output line (multi-node runs prefix whole lines).
    line: Vec<u8>,
    poweroff_deadline: Option<Instant>,
    done: bool,
}

fn start_node(opts: &RunOptions, img: &Image, topo: &Topology, index: usize, command: &str, wd: &Path, attempt: u32) -> anyhow::Result<NodeRun> {
    let node = &topo.nodes[index];
    let sockets = wd.join("sockets");
    std::fs::create_dir_all(&sockets)?;
    let server_log = wd.join(format!("server-{}.log", node.name));
    let log = std::fs::File::create(&server_log)?;
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
        .stdout(log.try_clone()?)
        .stderr(log);
    if let Some(dir) = &opts.gpu_mem_dir {
        server_cmd.arg("--gpu-mem-dir").arg(dir);
    }
    if let Some(seg) = &opts.segment {
        server_cmd.arg("--segment").arg(seg.to_string());
    }
    if let Some(prefix) = &opts.pcap {
        let file = if opts.commands.len() > 1 { PathBuf::from(format!("{}.{}", prefix.display(), node.name)) } else { prefix.clone() };
        server_cmd.arg("--pcap").arg(file);
        if let Some(mib) = opts.pcap_max_mib {
            server_cmd.arg("--pcap-max-mib").arg(mib.to_string());
        }
    }
    if std::env::var_os("RUST_LOG").is_none() {
        server_cmd.env("RUST_LOG", "info");
    }
    let ctl = rnic_emu_server::serve::control_path(&sockets, &node.name);
    // A server of an earlier boot that had to be killed leaves its control socket behind.
    let _ = std::fs::remove_file(&ctl);
    // A plain node (no emulated function) has no server: its guest joins the segment with
    // a NIC of QEMU's own.
    let server = if node.is_plain() {
        None
    } else {
        let mut server = ChildGuard::spawn(&format!("rnic-emu serve ({})", node.name), &mut server_cmd)?;
        let ready = wait_until(Instant::now() + Duration::from_secs(20), || server.exited() || ctl.exists());
        if !ready || server.exited() {
            bail!("the server of {} did not come up:\n{}", node.name, tail(&server_log, 20));
        }
        if opts.trace_file.is_some() {
            crate::iotrace_client::Reader::new(&sockets, &node.name).request("on")?;
        }
        Some(server)
    };
    let kv_sock = rendezvous_path(wd, &node.name);
    let initrd = wd.join(format!("initrd-{}.img", node.name));
    write_initrd(img, &initrd, command, opts.load_driver)?;
    let console_log = wd.join(format!("console-{}.log", node.name));
    let output_log = wd.join(format!("output-{}.log", node.name));
    let segment = opts.segment.clone().unwrap_or_else(|| rnic_emu_server::serve::default_segment(topo));
    if let Err(e) = qemu::nic_args(topo, index, &segment) {
        bail!(e);
    }
    let files = GuestFiles {
        kernel: &img.kernel,
        initrd: &initrd,
        console_log: &console_log,
        output_log: &output_log,
        kv_socket: Some(&kv_sock),
        segment: Some(segment),
    };
    let args = qemu::command_line(topo, index, &sockets, &files);
    std::fs::write(wd.join(format!("qemu-cmdline-{}.txt", node.name)), args.join("\n"))?;
    let qemu_log = wd.join(format!("qemu-{}.log", node.name));
    let qlog = std::fs::File::create(&qemu_log)?;
    let mut qemu_cmd = Command::new(&img.qemu);
    qemu_cmd.args(&args).stdin(Stdio::null()).stdout(qlog.try_clone()?).stderr(qlog);
    let qemu = ChildGuard::spawn(&format!("qemu ({})", node.name), &mut qemu_cmd)?;
    Ok(NodeRun {
        name: node.name.clone(),
        index,
        command: command.to_string(),
        attempt,
        boot: BootWatch::new(console_log.clone()),
        server,
        qemu,
        follower: OutputFollower { file: None, path: output_log, pending: Vec::new(), exit_code: None },
        console_log,
        server_log,
        qemu_log,
        line: Vec::new(),
        poweroff_deadline: None,
        done: false,
    })
}

impl NodeRun {
    /// Streams new output; returns an error message if the node failed, and marks it done
    /// once its guest has stopped (or reported and lingered).
    fn poll(&mut self, sink: &mut dyn FnMut(&[u8]), prefix: bool) -> Option<String> {
        let (name, line) = (&self.name, &mut self.line);
        let mut emit = |b: &[u8]| {
            if !prefix {
                return sink(b);
            }
            for &c in b {
                line.push(c);
                if c == b'\n' {
                    let mut out = format!("[{name}] ").into_bytes();
                    out.append(line);
                    sink(&out);
                }
            }
        };
        self.follower.poll(&mut emit);
        if self.follower.exit_code.is_some() {
            let d = *self.poweroff_deadline.get_or_insert_with(|| Instant::now() + Duration::from_secs(20));
            if Instant::now() > d {
                log::warn!("{}: the guest reported its exit code but did not power off", self.name);
                self.done = true;
            }
        }
        if self.qemu.exited() {
            self.follower.poll(&mut emit);
            self.done = true;
            if self.follower.exit_code.is_none() {
                return Some(format!(
                    "{}: the guest stopped without reporting an exit code.\nQEMU: {}\nconsole (last lines):\n{}",
                    self.name,
                    tail(&self.qemu_log, 10),
                    tail(&self.console_log, 30)
                ));
            }
        }
        if self.server.as_mut().is_some_and(|s| s.exited()) {
            return Some(format!("{}: the node server died:\n{}", self.name, tail(&self.server_log, 20)));
        }
        None
    }
}

/// Boots the nodes, runs their commands, streams their output to `sink`.
pub fn run(opts: &RunOptions, img: &Image, sink: &mut dyn FnMut(&[u8])) -> anyhow::Result<RunOutcome> {
    let topo = Topology::load(&opts.topology)?;
    let mut targets = Vec::new();
    for (which, command) in &opts.commands {
        let (index, _) = topo.node(which).with_context(|| format!("topology {} has no node '{which}'", topo.name))?;
        if targets.iter().any(|(i, _)| *i == index) {
            bail!("node '{which}' is given more than one command");
        }
        targets.push((index, command.as_str()));
    }
    if targets.is_empty() {
        bail!("no guest command given");
    }
    // A segment of this run's own unless one is given: held until the run ends.
    let mut own = opts.clone();
    if opts.segment.as_ref().is_some_and(|s| s.is_exclusive()) && targets.len() > 1 {
        bail!("a VXLAN or TAP segment takes one node of a run: start each node with `rnic-emu serve --segment` (docs/fabric.md, \"Backends\")");
    }
    let _segment_hold = match (&opts.segment, topo.nodes.len() > 1) {
        (None, true) => {
            let (seg, hold) = rnic_emu_server::fabric::segment::reserve(std::net::Ipv4Addr::LOCALHOST).context("reserving the run's fabric segment")?;
            own.segment = Some(seg.into());
            Some(hold)
        }
        _ => None,
    };
    let opts = &own;
    let workdir = tempfile::Builder::new().prefix("rnic-emu-run-").tempdir()?;
    let wd = workdir.path().to_path_buf();
    let kv = Arc::new(KvStore::default());
    let mut nodes = Vec::new();
    for (index, command) in &targets {
        start_rendezvous(&wd, &topo.nodes[*index].name, &kv)?;
        nodes.push(start_node(opts, img, &topo, *index, command, &wd, 1)?);
    }
    let mut trace = match &opts.trace_file {
        Some(f) => {
            let file = std::fs::File::create(f).with_context(|| format!("creating the trace file {}", f.display()))?;
            let readers = nodes.iter().filter(|n| n.server.is_some()).map(|n| crate::iotrace_client::Reader::new(&wd.join("sockets"), &n.name)).collect();
            Some(TraceFile { out: std::io::BufWriter::new(file), readers })
        }
        None => None,
    };
    let prefix = nodes.len() > 1;
    let deadline = Instant::now() + opts.timeout;
    let failure = loop {
        if let Some(t) = trace.as_mut() {
            if let Err(e) = t.drain() {
                log::warn!("reading the MMIO/DMA trace: {e:#}");
            }
        }
        let mut failure = None;
        for n in nodes.iter_mut().filter(|n| !n.done) {
            match boot_check(n, opts) {
                BootState::Going => {}
                BootState::Stalled(msg) => {
                    failure = Some(msg);
                    break;
                }
                BootState::Again => {
                    log::warn!(
                        "{}: the guest kernel stopped or stalled before starting /init (boot {} of {}; nothing of the image ran): booting it again",
                        n.name,
                        n.attempt,
                        opts.boot_attempts
                    );
                    n.qemu.stop();
                    if let Some(s) = &mut n.server {
                        s.stop();
                    }
                    keep_boot_logs(n);
                    match start_node(opts, img, &topo, n.index, &n.command, &wd, n.attempt + 1) {
                        Ok(fresh) => *n = fresh,
                        Err(e) => {
                            failure = Some(format!("{}: booting it again failed: {e:#}", n.name));
                            break;
                        }
                    }
                    if let Some(t) = trace.as_mut() {
                        t.restarted(&n.name);
                    }
                }
            }
        }
        if failure.is_some() {
            break failure;
        }
        for n in nodes.iter_mut().filter(|n| !n.done) {
            if let Some(f) = n.poll(sink, prefix) {
                failure = Some(f);
                break;
            }
        }
        if failure.is_some() {
            break failure;
        }
        if nodes.iter().all(|n| n.done) {
            break None;
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            break Some("interrupted".to_string());
        }
        if Instant::now() > deadline {
            let states: Vec<String> = nodes.iter().map(|n| node_state(n, &wd.join("sockets"))).collect();
            break Some(format!("timed out after {:?}\n{}", opts.timeout, states.join("\n")));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    if let Some(t) = trace.as_mut() {
        if let Err(e) = t.drain() {
            log::warn!("reading the MMIO/DMA trace: {e:#}");
        }
    }
    if let (None, Some(file)) = (&failure, &opts.stats_file) {
        let mut all = serde_json::Map::new();
        for n in nodes.iter().filter(|n| n.server.is_some()) {
            let stats = rnic_emu_server::serve::query_stats(&wd.join("sockets"), &n.name)?;
            if let serde_json::Value::Object(m) = stats {
                all.extend(m);
            }
        }
        std::fs::write(file, serde_json::to_string_pretty(&all)?)?;
    }
    let per_node: Vec<(String, i32)> = nodes.iter().map(|n| (n.name.clone(), n.follower.exit_code.unwrap_or(255))).collect();
    drop(nodes);
    let keep = failure.is_some() || opts.keep_workdir;
    let workdir_path = keep.then(|| workdir.keep());
    if let Some(msg) = failure {
        let where_ = workdir_path.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
        bail!("{msg}\n(logs kept in {where_})");
    }
    let exit_code = per_node.iter().map(|(_, c)| *c).find(|c| *c != 0).unwrap_or(0);
    Ok(RunOutcome { exit_code, per_node, workdir: workdir_path })
}

#[cfg(test)]
mod tests {
    use super::nonzero_counters;

    #[test]
    fn a_stuck_runs_counters_name_only_what_moved() {
        let v = serde_json::json!({"node0-rnic0": {"pkts_sent": 12, "retransmits": 0}, "node0-segment": {"rx_frames": 3}});
        assert_eq!(nonzero_counters(&v), "node0-rnic0.pkts_sent=12 node0-segment.rx_frames=3");
    }
}
