//! Host-level tests of a node's control socket against hostile local clients (no QEMU):
//! a client trickling a byte now and then neither holds the socket nor delays another
//! client, an over-long request line is refused, one client beyond the bound is refused
//! while the others keep working, and the socket is its owner's only.

mod common;
use common::*;
use rnic_emu_server::control::{MAX_CLIENTS, MAX_LINE};
use rnic_emu_server::serve::{control_path, server_stats_key};
use rnic_emu_testkit::hostdrv::ServerProcess;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Failure guard for a reply that should come at once.
const GUARD: Duration = Duration::from_secs(20);

fn single_switch(dir: &std::path::Path) -> ServerProcess {
    ServerProcess::start(std::path::Path::new(bin()), &topology("single-switch"), dir, None).unwrap()
}

fn connect(server: &ServerProcess) -> UnixStream {
    let s = UnixStream::connect(control_path(&server.socket_dir, &server.node)).unwrap();
    s.set_read_timeout(Some(GUARD)).unwrap();
    s
}

/// Sends one request on `s` and reads its reply line.
fn request(s: &mut UnixStream, req: &str) -> serde_json::Value {
    writeln!(s, "{req}").unwrap();
    let mut line = String::new();
    BufReader::new(s.try_clone().unwrap()).read_line(&mut line).expect("a reply line (server hung?)");
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?}: {e}"))
}

fn server_counter(server: &ServerProcess, name: &str) -> u64 {
    let all = rnic_emu_server::serve::query_stats(&server.socket_dir, &server.node).unwrap();
    all[&server_stats_key(&server.node)][name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {all}"))
}

/// A client that sends "st", then one more byte every 200 ms until told to stop (it never
/// completes its line): the slow loris.
fn trickle(server: &ServerProcess, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<bool> {
    let mut s = connect(server);
    s.write_all(b"st").unwrap();
    std::thread::spawn(move || {
        let start = Instant::now();
        while !stop.load(Ordering::SeqCst) && start.elapsed() < GUARD {
            std::thread::sleep(Duration::from_millis(200));
            if s.write_all(b"a").is_err() {
                return true; // the server closed it
            }
        }
        false
    })
}

#[test]
fn a_slow_client_does_not_delay_another() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let stop = Arc::new(AtomicBool::new(false));
    let loris = trickle(&server, stop.clone());
    // While the slow client holds its connection, a second one is answered.
    let mut other = connect(&server);
    let reply = request(&mut other, "stats");
    let answered_while_trickling = !loris.is_finished();
    stop.store(true, Ordering::SeqCst);
    let _ = loris.join();
    assert!(reply.get(server_stats_key(&server.node)).is_some(), "stats reply: {reply}");
    assert!(answered_while_trickling, "the second client was answered only after the slow one went");
}

#[test]
fn a_trickling_client_is_dropped_at_the_request_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut s = connect(&server);
    s.write_all(b"st").unwrap();
    // A byte every 200 ms never lets a per-read timeout expire; the whole-request
    // deadline ends the connection (EOF or a failed write), well before the guard.
    let start = Instant::now();
    let mut closed = false;
    while !closed && start.elapsed() < GUARD {
        std::thread::sleep(Duration::from_millis(200));
        closed = s.write_all(b"a").is_err() || {
            s.set_nonblocking(true).unwrap();
            let mut b = [0u8; 16];
            let r = s.read(&mut b);
            s.set_nonblocking(false).unwrap();
            matches!(r, Ok(0))
        };
    }
    assert!(closed, "a client trickling its request line held the connection for {GUARD:?}");
    assert_eq!(server_counter(&server, "control_timeouts"), 1);
}

#[test]
fn an_over_long_request_line_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut s = connect(&server);
    let long = vec![b'x'; MAX_LINE + 1];
    // The server may close before it has read everything: a failed write is fine.
    let _ = s.write_all(&long);
    let mut line = String::new();
    BufReader::new(s.try_clone().unwrap()).read_line(&mut line).expect("an error reply");
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?}: {e}"));
    assert!(reply["error"].as_str().is_some_and(|e| e.contains("longer than")), "reply: {reply}");
    let mut rest = Vec::new();
    assert_eq!(s.read_to_end(&mut rest).map(|_| rest.len()).unwrap_or(0), 0, "the connection is closed after the refusal");
    assert_eq!(server_counter(&server, "control_lines_too_long"), 1);
    // The largest line allowed is still served (an unknown request: an error reply).
    let mut ok = connect(&server);
    let reply = request(&mut ok, &"y".repeat(MAX_LINE));
    assert!(reply["error"].as_str().is_some_and(|e| e.starts_with("unknown request")), "reply: {reply}");
}

#[test]
fn one_client_beyond_the_bound_is_refused_while_the_others_work() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut held: Vec<UnixStream> = (0..MAX_CLIENTS).map(|_| connect(&server)).collect();
    for s in &mut held {
        assert!(request(s, "stats").get(server_stats_key(&server.node)).is_some());
    }
    let mut extra = connect(&server);
    let mut line = String::new();
    BufReader::new(extra.try_clone().unwrap()).read_line(&mut line).expect("a refusal line");
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("reply {line:?}: {e}"));
    assert!(reply["error"].as_str().is_some_and(|e| e.starts_with("busy")), "reply: {reply}");
    let mut rest = Vec::new();
    assert_eq!(extra.read_to_end(&mut rest).map(|_| rest.len()).unwrap_or(0), 0, "refused and closed");
    for s in &mut held {
        assert!(request(s, "stats").get(server_stats_key(&server.node)).is_some(), "the connected clients keep working");
    }
    drop(held);
    // Once they have gone, a new client is served again and sees the refusal counted.
    assert_eq!(server_counter(&server, "control_clients_refused"), 1);
}

#[test]
fn the_control_socket_serves_its_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let ctl = control_path(&server.socket_dir, &server.node);
    // The mode is set just after bind: wait (bounded) for the first reply first.
    assert!(request(&mut connect(&server), "stats").is_object());
    assert_eq!(std::fs::metadata(&ctl).unwrap().permissions().mode() & 0o777, 0o600);
    // Another user who gets past the file mode (opened here on purpose) is refused by the
    // peer check.
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return; // only root can run a client as another uid; the mode check above stands
    }
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&ctl, std::fs::Permissions::from_mode(0o666)).unwrap();
    // The refusal comes at accept, before any request is read: the client only reads (a
    // request sent first could meet the closed connection, EPIPE).
    let script = "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\nprint(s.makefile().readline())";
    let out = std::process::Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(&ctl)
        .uid(65534)
        .gid(65534)
        .output()
        .expect("running /usr/bin/python3 as uid 65534");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("permission denied"), "another uid's request: {text} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server_counter(&server, "control_peers_refused"), 1);
}
