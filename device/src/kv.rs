//! The rendezvous store of a multi-node run (docs/fabric.md, "Bootstrap"): a key-value
//! store on the host, shared by every guest of the run, reached from each guest on its third
//! serial port. Like a job launcher's store: guests publish their QP numbers, PSNs and keys
//! and wait for their peers'. Lines from the guest are hostile input: bounded, validated,
//! and answered with ERR when malformed.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixListener;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const MAX_KEY: usize = 64;
const MAX_VALUE: usize = 1024;
const MAX_LINE: usize = 2048;
/// Longest a GET may wait.
const MAX_WAIT: Duration = Duration::from_secs(600);
/// Most keys one run may hold.
const MAX_KEYS: usize = 4096;

#[derive(Default)]
pub struct KvStore {
    map: Mutex<HashMap<String, String>>,
    changed: Condvar,
}

fn valid(s: &str, max: usize) -> bool {
    !s.is_empty() && s.len() <= max && s.bytes().all(|b| b.is_ascii_graphic())
}

impl KvStore {
    /// Handles one request line; returns the reply (without newline).
    pub fn request(&self, line: &str) -> String {
        let mut words = line.split(' ');
        match (words.next(), words.next(), words.next(), words.next()) {
            (Some("PUT"), Some(k), Some(v), None) if valid(k, MAX_KEY) && valid(v, MAX_VALUE) => {
                let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
                if map.len() >= MAX_KEYS && !map.contains_key(k) {
                    return "ERR store full".into();
                }
                map.insert(k.to_string(), v.to_string());
                self.changed.notify_all();
                "OK".into()
            }
            (Some("GET"), Some(k), Some(t), None) if valid(k, MAX_KEY) => {
                let Ok(ms) = t.parse::<u64>() else { return "ERR bad timeout".into() };
                let deadline = Instant::now() + Duration::from_millis(ms).min(MAX_WAIT);
                let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if let Some(v) = map.get(k) {
                        return format!("VAL {v}");
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        return "TIMEOUT".into();
                    }
                    map = self.changed.wait_timeout(map, deadline - now).map(|(g, _)| g).unwrap_or_else(|p| p.into_inner().0);
                }
            }
            _ => "ERR expected 'PUT <key> <value>' or 'GET <key> <timeout_ms>'".into(),
        }
    }
}

/// Serves one guest's serial connection (QEMU connects as the client).
pub fn serve(listener: UnixListener, store: Arc<KvStore>, node: String) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let Ok(mut out) = conn.try_clone() else { continue };
        let mut reader = BufReader::new(conn);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.by_ref().take(MAX_LINE as u64).read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            let line = String::from_utf8_lossy(&buf);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                continue;
            }
            let reply = store.request(line);
            log::debug!("{node}: rendezvous '{line}' -> '{reply}'");
            if writeln!(out, "{reply}").is_err() {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_and_hostile_lines() {
        let kv = Arc::new(KvStore::default());
        assert_eq!(kv.request("GET a 10"), "TIMEOUT");
        assert_eq!(kv.request("PUT a 1,2,3"), "OK");
        assert_eq!(kv.request("GET a 10"), "VAL 1,2,3");
        let waiter = {
            let kv = kv.clone();
            std::thread::spawn(move || kv.request("GET later 5000"))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(kv.request("PUT later x"), "OK");
        assert_eq!(waiter.join().unwrap(), "VAL x", "a waiting GET wakes on PUT");
        for bad in ["PUT", "PUT a", "PUT a b c", "GET a", "GET a x", "DEL a", "PUT \u{7f} b", &format!("PUT {} v", "k".repeat(65))] {
            assert!(kv.request(bad).starts_with("ERR"), "{bad}");
        }
    }
}
