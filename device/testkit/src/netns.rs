//! Network namespaces for host-level tests of the fabric's backends (`tests/host_multihost.rs`):
//! a test makes namespaces of its own ([`Netns::create`], named after the test process's
//! pid, deleted when dropped, even on a failed assertion), runs `ip` in them, starts node
//! servers in them ([`Netns::exec`] wraps a command in `ip netns exec`), runs a closure on
//! a thread that entered one ([`Netns::run`]: a socket made there lives there) and
//! captures an interface's frames ([`Capture`], an `AF_PACKET` socket). Needs root and
//! iproute2; [`unavailable`] says why not, for a test to skip.

use anyhow::{bail, Context};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Prefix of every namespace made here: `rnicmh-<pid>-<tag>`.
const PREFIX: &str = "rnicmh-";

/// Why namespaces cannot be made here (not root, no `ip netns`), or None (probed once
/// per process).
pub fn unavailable() -> Option<String> {
    static PROBED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    PROBED.get_or_init(probe).clone()
}

fn probe() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces, veth and vxlan devices need root)".into());
    }
    let probe = format!("{PREFIX}{}-probe", std::process::id());
    match Command::new("ip").args(["netns", "add", &probe]).output() {
        Ok(o) if o.status.success() => {
            let _ = Command::new("ip").args(["netns", "del", &probe]).status();
            None
        }
        Ok(o) => Some(format!("`ip netns add` fails here: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Some(format!("no `ip` command (iproute2): {e}")),
    }
}

/// Runs `ip` with `args`; fails with its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    let o = Command::new("ip").args(args).output().context("running ip")?;
    if !o.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&o.stderr).trim());
    }
    Ok(())
}

/// Deletes namespaces an earlier test process left (killed before its clean-up): ours by
/// name, whose process is gone.
fn remove_stale() {
    let Ok(o) = Command::new("ip").args(["netns", "list"]).output() else { return };
    for line in String::from_utf8_lossy(&o.stdout).lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|r| r.split('-').next()).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = Command::new("ip").args(["netns", "del", name]).status();
        }
    }
}

/// A network namespace of this test process, deleted when dropped.
pub struct Netns {
    pub name: String,
}

impl Netns {
    /// Makes `rnicmh-<pid>-<tag>` with its loopback up.
    pub fn create(tag: &str) -> anyhow::Result<Netns> {
        remove_stale();
        let name = format!("{PREFIX}{}-{tag}", std::process::id());
        let _ = Command::new("ip").args(["netns", "del", &name]).output(); // a leftover of a pid reused
        ip(&["netns", "add", &name])?;
        let ns = Netns { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// Runs `ip -n <name> args...`.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<()> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// The output of `ip -n <name> args...`.
    pub fn ip_output(&self, args: &[&str]) -> anyhow::Result<String> {
        let o = Command::new("ip").arg("-n").arg(&self.name).args(args).output().context("running ip")?;
        if !o.status.success() {
            bail!("ip -n {} {}: {}", self.name, args.join(" "), String::from_utf8_lossy(&o.stderr).trim());
        }
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// `cmd` run inside the namespace: `ip netns exec <name> <cmd>`, with its environment
    /// (`ip netns exec` execs the program: the child's pid is the program's).
    pub fn exec(&self, cmd: &Command) -> Command {
        let mut w = Command::new("ip");
        w.args(["netns", "exec", &self.name]).arg(cmd.get_program()).args(cmd.get_args());
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => w.env(k, v),
                None => w.env_remove(k),
            };
        }
        w
    }

    /// Runs `f` on a thread that entered the namespace (sockets it makes live there).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        let path = format!("/run/netns/{}", self.name);
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        std::thread::scope(|s| {
            s.spawn(|| {
                use std::os::fd::AsRawFd;
                // SAFETY: setns(2) on a namespace fd we hold; it moves this thread only.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!("setns into {}: {}", self.name, std::io::Error::last_os_error());
                }
                Ok(f())
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the thread in {} panicked", self.name))?
        })
    }

    /// The MAC of interface `dev` (from `ip link show`).
    pub fn mac(&self, dev: &str) -> anyhow::Result<[u8; 6]> {
        let out = self.ip_output(&["link", "show", dev])?;
        let hex = out.split_whitespace().skip_while(|w| *w != "link/ether").nth(1).context("no link/ether")?;
        let bytes: Vec<u8> = hex.split(':').map(|b| u8::from_str_radix(b, 16)).collect::<Result<_, _>>()?;
        bytes.try_into().map_err(|_| anyhow::anyhow!("a MAC of 6 bytes: {hex}"))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
    }
}

/// Joins `a` and `b` by a veth pair, `a_if` in `a` with `a_cidr` and `b_if` in `b` with
/// `b_cidr` (`10.77.0.1/24`), both up.
pub fn veth_pair(a: &Netns, a_if: &str, a_cidr: &str, b: &Netns, b_if: &str, b_cidr: &str) -> anyhow::Result<()> {
    a.ip(&["link", "add", a_if, "type", "veth", "peer", "name", b_if, "netns", &b.name])?;
    a.ip(&["addr", "add", a_cidr, "dev", a_if])?;
    b.ip(&["addr", "add", b_cidr, "dev", b_if])?;
    a.ip(&["link", "set", a_if, "up"])?;
    b.ip(&["link", "set", b_if, "up"])?;
    Ok(())
}

/// A captured frame: whole, and whether the interface sent it (else received it).
#[derive(Clone, Debug)]
pub struct Frame {
    pub outgoing: bool,
    pub data: Vec<u8>,
}

/// Every frame an interface of a namespace sends and receives, from [`Capture::start`]
/// until [`Capture::stop`] (at most `MAX_FRAMES`), taken on a thread of its own.
pub struct Capture {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<Vec<Frame>>>>,
}

/// Frames a capture keeps at most.
const MAX_FRAMES: usize = 100_000;

impl Capture {
    /// Starts capturing on `dev` of `ns`; returns once the socket is bound.
    pub fn start(ns: &Netns, dev: &str) -> anyhow::Result<Capture> {
        let path = format!("/run/netns/{}", ns.name);
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        let dev = std::ffi::CString::new(dev)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || -> anyhow::Result<Vec<Frame>> {
            use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
            let setup = || -> anyhow::Result<OwnedFd> {
                // SAFETY: setns(2) on a namespace fd we hold; it moves this thread only.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    bail!("setns: {}", std::io::Error::last_os_error());
                }
                let proto = (libc::ETH_P_ALL as u16).to_be();
                // SAFETY: a plain socket(2) call; the fd is owned from here on.
                let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, i32::from(proto)) };
                if fd < 0 {
                    bail!("AF_PACKET socket: {}", std::io::Error::last_os_error());
                }
                // SAFETY: fd is a fresh socket nobody else owns.
                let sock = unsafe { OwnedFd::from_raw_fd(fd) };
                // SAFETY: if_nametoindex reads a NUL-terminated string we own.
                let index = unsafe { libc::if_nametoindex(dev.as_ptr()) };
                if index == 0 {
                    bail!("no interface {dev:?}");
                }
                // SAFETY: all-zero is a valid sockaddr_ll.
                let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                sll.sll_family = libc::AF_PACKET as u16;
                sll.sll_protocol = proto;
                sll.sll_ifindex = index as i32;
                // SAFETY: bind with a valid sockaddr_ll and its size.
                let rc = unsafe { libc::bind(fd, (&sll as *const libc::sockaddr_ll).cast(), std::mem::size_of::<libc::sockaddr_ll>() as u32) };
                if rc != 0 {
                    bail!("binding the capture to {dev:?}: {}", std::io::Error::last_os_error());
                }
                // Room for a burst while this thread waits for a core (root: beyond rmem_max).
                let size: libc::c_int = 64 << 20;
                // SAFETY: setsockopt with a pointer to a live c_int and its size.
                unsafe { libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, (&size as *const libc::c_int).cast(), 4) };
                let tv = libc::timeval { tv_sec: 0, tv_usec: 20_000 };
                // SAFETY: setsockopt with a pointer to a live timeval and its size.
                unsafe {
                    libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, (&tv as *const libc::timeval).cast(), std::mem::size_of::<libc::timeval>() as u32)
                };
                Ok(sock)
            };
            let sock = match setup() {
                Ok(s) => {
                    let _ = ready_tx.send(Ok(()));
                    s
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return Err(e);
                }
            };
            let mut frames = Vec::new();
            let mut buf = vec![0u8; 65536];
            // Until told to stop, then what is still queued (without waiting).
            let mut stopping = false;
            loop {
                stopping = stopping || flag.load(Ordering::SeqCst);
                // SAFETY: all-zero is a valid sockaddr_ll.
                let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
                let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
                let flags = if stopping { libc::MSG_DONTWAIT } else { 0 };
                let at = (&mut from as *mut libc::sockaddr_ll).cast();
                // SAFETY: recvfrom into our buffer and address, each with its real size.
                let n = unsafe { libc::recvfrom(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags, at, &mut len) };
                if n > 0 && frames.len() < MAX_FRAMES {
                    frames.push(Frame { outgoing: from.sll_pkttype == libc::PACKET_OUTGOING, data: buf[..n as usize].to_vec() });
                } else if n < 0 && stopping {
                    break;
                }
            }
            // SAFETY: all-zero is a valid tpacket_stats.
            let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
            let at = (&mut st as *mut libc::tpacket_stats).cast();
            // SAFETY: getsockopt into a live tpacket_stats with its size.
            if unsafe { libc::getsockopt(sock.as_raw_fd(), libc::SOL_PACKET, libc::PACKET_STATISTICS, at, &mut len) } == 0 && st.tp_drops > 0 {
                bail!("the capture lost {} frames (its socket overflowed)", st.tp_drops);
            }
            Ok(frames)
        });
        match ready_rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(())) => Ok(Capture { stop, thread: Some(thread) }),
            Ok(Err(e)) => bail!("capture on {}: {e}", ns.name),
            Err(_) => bail!("the capture on {} did not start", ns.name),
        }
    }

    /// Stops capturing; the frames, in order (an error if the capture lost any).
    pub fn stop(mut self) -> anyhow::Result<Vec<Frame>> {
        self.stop.store(true, Ordering::SeqCst);
        let t = self.thread.take().context("stopped once")?;
        t.join().map_err(|_| anyhow::anyhow!("the capture thread panicked"))?
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
