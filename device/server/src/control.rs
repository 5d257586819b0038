//! A node's control socket (`<socket_dir>/<node>.ctl`): one request per line, one JSON
//! reply line per request (`stats`, `iotrace ...`, `faults tx|rx ...`, and whatever a
//! function's `control` takes). Its clients are local but hostile, so every resource one
//! can hold is bounded (docs/verbs.md §8):
//! - the socket file is made mode 0600, and a peer whose uid (`SO_PEERCRED`) is neither
//!   ours nor root's is refused with an error line (counted, logged rate-limited);
//! - at most [`MAX_CLIENTS`] connections are served at once, each by one of
//!   [`MAX_CLIENTS`] threads started with the socket, so a slow client never delays
//!   another and a client costs no thread (the server's threads and mappings are fixed
//!   once it serves); one more gets an error line and is closed;
//! - a request line is at most [`MAX_LINE`] bytes: a longer one gets an error reply and
//!   the connection is closed;
//! - a whole request line must arrive within [`REQUEST_DEADLINE`] (not per read: a client
//!   sending a byte now and then is dropped too), and a reply must be taken within it;
//! - a connection serves at most [`MAX_REQUESTS`] requests.
//!
//! [`Control::respond`] is the dispatcher (the fuzz target `control` feeds it).

use crate::fabric::port::{self, FabricPort};
use crate::serve::stats_json_with_ports;
use crate::vfio::{self, SharedFunction};
use rnic_emu_core::observe::iotrace::IoTrace;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Longest request line, newline excluded.
pub const MAX_LINE: usize = 64 * 1024;
/// Time a client has to send one whole request line (and to take its reply).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Connections served at once.
pub const MAX_CLIENTS: usize = 8;
/// Requests served per connection.
pub const MAX_REQUESTS: usize = 64;

static LINES_TOO_LONG: AtomicU64 = AtomicU64::new(0);
static TIMEOUTS: AtomicU64 = AtomicU64::new(0);
static CLIENTS_REFUSED: AtomicU64 = AtomicU64::new(0);
static PEERS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// The control socket's counters, as `<node>-server` shows them in `stats`.
pub fn counters() -> [(&'static str, u64); 4] {
    [
        ("control_lines_too_long", LINES_TOO_LONG.load(Ordering::Relaxed)),
        ("control_timeouts", TIMEOUTS.load(Ordering::Relaxed)),
        ("control_clients_refused", CLIENTS_REFUSED.load(Ordering::Relaxed)),
        ("control_peers_refused", PEERS_REFUSED.load(Ordering::Relaxed)),
    ]
}

fn error_reply(msg: &str) -> String {
    serde_json::json!({ "error": msg }).to_string()
}

fn reply(r: Result<String, String>) -> String {
    match r {
        Ok(msg) => serde_json::json!({ "ok": msg }).to_string(),
        Err(e) => error_reply(&e),
    }
}

/// What the control requests act on.
pub struct Control {
    pub node: String,
    pub functions: Vec<(PathBuf, SharedFunction)>,
    pub ports: Vec<Arc<FabricPort>>,
    pub io: Arc<IoTrace>,
}

impl Control {
    /// The reply to one request line (arbitrary bytes: not UTF-8 is an error reply).
    pub fn respond(&self, line: &[u8]) -> String {
        let Ok(line) = std::str::from_utf8(line) else { return error_reply("the request is not UTF-8") };
        match line.trim() {
            "stats" => stats_json_with_ports(&self.node, &self.functions, &self.ports).to_string(),
            other if other.split_whitespace().next() == Some("iotrace") => reply(self.io.control(&other["iotrace".len()..])),
            other if other.split_whitespace().next() == Some("faults") => reply(control_faults(&self.ports, other)),
            other => {
                for (_, f) in &self.functions {
                    if let Some(r) = vfio::lock(f).control(other) {
                        return reply(r);
                    }
                }
                let shown: String = other.chars().take(64).collect();
                error_reply(&format!("unknown request '{shown}'"))
            }
        }
    }
}

/// `faults tx|rx key=value ...` changes the fault injection of the node's fabric port.
fn control_faults(ports: &[Arc<FabricPort>], request: &str) -> Result<String, String> {
    let mut words = request.split_whitespace().skip(1);
    let dir = words.next();
    let Some(port) = ports.first() else { return Err("this node has no fabric".into()) };
    let f = port::parse_faults(words)?;
    match dir {
        Some("tx") => port.set_faults(Some(f), None),
        Some("rx") => port.set_faults(None, Some(f)),
        _ => return Err("expected 'faults tx|rx key=value ...'".into()),
    }
    Ok(format!("{} faults set", dir.unwrap_or("")))
}

/// Bytes received on a connection, cut into request lines of at most [`MAX_LINE`] bytes.
#[derive(Default)]
pub struct Lines {
    buf: Vec<u8>,
}

/// A line longer than [`MAX_LINE`].
#[derive(Debug, PartialEq, Eq)]
pub struct TooLong;

impl Lines {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next complete line (without its newline), if one is buffered.
    pub fn next_line(&mut self) -> Option<Result<Vec<u8>, TooLong>> {
        match self.buf.iter().position(|&b| b == b'\n') {
            Some(n) if n > MAX_LINE => Some(Err(TooLong)),
            Some(n) => {
                let mut line: Vec<u8> = self.buf.drain(..=n).collect();
                line.pop();
                Some(Ok(line))
            }
            None if self.buf.len() > MAX_LINE => Some(Err(TooLong)),
            None => None,
        }
    }

    /// What is left at end of stream (a last line without a newline).
    pub fn rest(&mut self) -> Option<Vec<u8>> {
        (!self.buf.is_empty()).then(|| std::mem::take(&mut self.buf))
    }
}

/// The uid of the process at the other end of `conn`.
fn peer_uid(conn: &UnixStream) -> std::io::Result<u32> {
    let mut cred = libc::ucred { pid: 0, uid: 0, gid: 0 };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: cred and len are valid for writes of the sizes given; the fd is open.
    let rc = unsafe { libc::getsockopt(conn.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERCRED, (&raw mut cred).cast(), &mut len) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(cred.uid)
}

/// Sends one short line to a client that is about to be closed, without waiting for it.
fn refuse(mut conn: UnixStream, msg: &str) {
    let _ = conn.set_nonblocking(true);
    let _ = writeln!(conn, "{}", error_reply(msg));
}

/// Makes the socket file owner-only, then accepts clients until the listener fails.
pub fn serve(ctx: Control, listener: UnixListener, path: &std::path::Path) {
    use std::os::unix::fs::PermissionsExt;
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)) {
        log::warn!("making {} owner-only: {e}", path.display());
    }
    let ctx = Arc::new(ctx);
    let to_workers = match start_workers(&ctx) {
        Ok(tx) => tx,
        Err(e) => {
            log::warn!("control socket: starting its client threads: {e}; not serving it");
            return;
        }
    };
    let active = Arc::new(AtomicUsize::new(0));
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    for conn in listener.incoming() {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => {
                log::warn!("control socket: accept: {e}");
                std::thread::sleep(Duration::from_millis(50)); // no hot loop (EMFILE)
                continue;
            }
        };
        match peer_uid(&conn) {
            Ok(uid) if uid == me || uid == 0 => {}
            other => {
                PEERS_REFUSED.fetch_add(1, Ordering::Relaxed);
                rnic_emu_core::guest_warn!("control socket: refused a client of uid {other:?} (only uid {me} or root)");
                refuse(conn, "permission denied: the control socket serves its owner and root only");
                continue;
            }
        }
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CLIENTS {
            active.fetch_sub(1, Ordering::SeqCst);
            CLIENTS_REFUSED.fetch_add(1, Ordering::Relaxed);
            rnic_emu_core::guest_warn!("control socket: refused a client: {MAX_CLIENTS} already connected");
            refuse(conn, &format!("busy: {MAX_CLIENTS} control clients are connected; try again later"));
            continue;
        }
        // Never blocks: at most MAX_CLIENTS connections hold a slot, and the channel
        // holds MAX_CLIENTS.
        if to_workers.send((Slot(active.clone()), conn)).is_err() {
            log::warn!("control socket: no client thread is left; closing");
            return;
        }
    }
}

/// Starts the [`MAX_CLIENTS`] threads that serve connections; returns where to send them.
fn start_workers(ctx: &Arc<Control>) -> std::io::Result<SyncSender<(Slot, UnixStream)>> {
    let (tx, rx) = sync_channel::<(Slot, UnixStream)>(MAX_CLIENTS);
    let rx = Arc::new(Mutex::new(rx));
    for _ in 0..MAX_CLIENTS {
        let (ctx, rx) = (ctx.clone(), rx.clone());
        std::thread::Builder::new().name(format!("{}-ctl", ctx.node)).spawn(move || loop {
            // The lock is held only while waiting for the next connection.
            let next = rx.lock().map_err(|_| ()).and_then(|r| r.recv().map_err(|_| ()));
            let Ok((_slot, conn)) = next else { return };
            serve_client(&ctx, conn);
        })?;
    }
    Ok(tx)
}

/// A connection's place among the [`MAX_CLIENTS`]; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

enum Next {
    Line(Vec<u8>),
    End,
}

/// Reads the next request line before `deadline`.
fn read_line(conn: &mut UnixStream, lines: &mut Lines, deadline: Instant) -> Next {
    let mut chunk = [0u8; 4096];
    loop {
        match lines.next_line() {
            Some(Ok(line)) => return Next::Line(line),
            Some(Err(TooLong)) => {
                LINES_TOO_LONG.fetch_add(1, Ordering::Relaxed);
                rnic_emu_core::guest_warn!("control socket: a request line longer than {MAX_LINE} bytes; connection closed");
                let _ = writeln!(conn, "{}", error_reply(&format!("request line longer than {MAX_LINE} bytes")));
                return Next::End;
            }
            None => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || conn.set_read_timeout(Some(left)).is_err() {
            TIMEOUTS.fetch_add(1, Ordering::Relaxed);
            rnic_emu_core::guest_info!("control socket: no whole request line within {REQUEST_DEADLINE:?}; connection closed");
            return Next::End;
        }
        match conn.read(&mut chunk) {
            Ok(0) => return lines.rest().map_or(Next::End, Next::Line),
            Ok(n) => lines.push(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(_) => return Next::End,
        }
    }
}

fn serve_client(ctx: &Control, mut conn: UnixStream) {
    let mut lines = Lines::default();
    if conn.set_write_timeout(Some(REQUEST_DEADLINE)).is_err() {
        return;
    }
    for _ in 0..MAX_REQUESTS {
        let Next::Line(line) = read_line(&mut conn, &mut lines, Instant::now() + REQUEST_DEADLINE) else { return };
        if writeln!(conn, "{}", ctx.respond(&line)).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_and_bounded() {
        let mut l = Lines::default();
        l.push(b"stats\niotr");
        assert_eq!(l.next_line(), Some(Ok(b"stats".to_vec())));
        assert_eq!(l.next_line(), None);
        l.push(b"ace\n");
        assert_eq!(l.next_line(), Some(Ok(b"iotrace".to_vec())));
        l.push(&vec![b'x'; MAX_LINE]);
        assert_eq!(l.next_line(), None, "exactly MAX_LINE bytes may still end with a newline");
        l.push(b"\n");
        assert_eq!(l.next_line().map(|r| r.map(|v| v.len())), Some(Ok(MAX_LINE)));
        l.push(&vec![b'x'; MAX_LINE + 1]);
        assert_eq!(l.next_line(), Some(Err(TooLong)));
    }
}
