//! The framed client of the `vfio_stream` fuzz target (first byte bit 1): the stream is
//! cut into vfio-user messages, each after one control byte, and a DMA_MAP can carry a
//! descriptor the way QEMU passes guest RAM: a fresh memfd, optionally truncated once the
//! server has answered the map (a client that shrinks the file under a live mapping).
//! Only DMA_MAP messages get descriptors here (SET_IRQS eventfds are another target's).
//!
//! Record: `ctl`, then a 16-byte header (id, command, size, flags, error) and
//! `size - 16` payload bytes (fewer if the input ends first). `ctl` bit 0: attach a memfd
//! of `64 KiB << (ctl >> 5 & 3)` bytes (DMA_MAP only); bit 1: after the reply to this
//! message, truncate that memfd to `(ctl >> 2 & 7) * 4 KiB`.

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::time::Duration;
use vmm_sys_util::sock_ctrl_msg::ScmSocket;

/// vfio-user DMA_MAP.
const DMA_MAP: u16 = 2;
/// How long the client waits for the reply it truncates after: a failure guard only (the
/// server answers every message it reads, or hangs up).
const REPLY_WAIT: Duration = Duration::from_secs(10);

/// One framed record: its control byte and message.
struct Record<'a> {
    ctl: u8,
    msg: &'a [u8],
}

/// Cuts `data` into records; a size below the header's length carries no payload, a
/// size beyond the input takes what is left.
fn records(data: &[u8]) -> Vec<Record<'_>> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some((&ctl, tail)) = rest.split_first() {
        let head = tail.len().min(16);
        let size = tail.get(4..8).map_or(0, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let len = size.max(head).min(tail.len());
        out.push(Record { ctl, msg: &tail[..len] });
        rest = &tail[len..];
    }
    out
}

/// Reads replies until the one to message `id` (or the server hangs up, or the guard
/// ends the wait); false when the connection is done.
fn await_reply(s: &mut UnixStream, id: u16) -> bool {
    let mut hdr = [0u8; 16];
    loop {
        if s.read_exact(&mut hdr).is_err() {
            return false;
        }
        let size = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
        let mut body = vec![0u8; size.saturating_sub(16).min(1 << 20)];
        if s.read_exact(&mut body).is_err() {
            return false;
        }
        if u16::from_le_bytes([hdr[0], hdr[1]]) == id {
            return true;
        }
    }
}

/// Sends the records of `data`, attaching and truncating memfds as their control bytes
/// say, then half-closes and reads what is left.
pub fn client(mut s: UnixStream, data: &[u8]) {
    if s.set_read_timeout(Some(REPLY_WAIT)).is_err() {
        return;
    }
    // Keeps the memfds (and the server's view of them) alive for the whole stream.
    let mut files = Vec::new();
    for r in records(data) {
        let command = r.msg.get(2..4).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
        let fd = if r.ctl & 1 == 1 && command == DMA_MAP { rnic_emu_core::platform::mem::dma::test_ram(64 << 10 << (r.ctl >> 5 & 3)).ok() } else { None };
        let sent = match &fd {
            Some((_, file)) => s.send_with_fd(r.msg, file.as_raw_fd()).is_ok(),
            None => send_all(&s, r.msg),
        };
        if !sent {
            return;
        }
        if let Some((ram, file)) = fd {
            if r.ctl & 2 == 2 {
                let id = r.msg.get(..2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
                if !await_reply(&mut s, id) {
                    return;
                }
                let _ = file.set_len(u64::from(r.ctl >> 2 & 7) * 4096);
            }
            files.push((ram, file));
        }
    }
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut sink = vec![0u8; 1 << 16];
    while matches!(s.read(&mut sink), Ok(n) if n > 0) {}
}

/// Sends all of `msg` without SIGPIPE (the server may hang up first); false if it could not.
fn send_all(s: &UnixStream, msg: &[u8]) -> bool {
    let mut sent = 0;
    while sent < msg.len() {
        let rest = &msg[sent..];
        // SAFETY: send() reads at most rest.len() bytes from a live slice on an owned socket.
        let n = unsafe { libc::send(s.as_raw_fd(), rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
        if n <= 0 {
            return false;
        }
        sent += n as usize;
    }
    true
}

/// A framed session: version, a DMA_MAP of a memfd, one truncated (to nothing) once the
/// server has mapped it, a whole unmap, a partial unmap (refused), a read-only map, and
/// UNMAP_ALL. No device DMA reaches the truncated map.
pub fn seed() -> Vec<u8> {
    let le = |fields: &[(u64, usize)]| fields.iter().flat_map(|(v, w)| v.to_le_bytes()[..*w].to_vec()).collect::<Vec<u8>>();
    let map = |flags: u64, iova: u64, size: u64| le(&[(32, 4), (flags, 4), (0, 8), (iova, 8), (size, 8)]);
    let unmap = |flags: u64, iova: u64, size: u64| le(&[(32, 4), (flags, 4), (iova, 8), (size, 8)]);
    let mut version = le(&[(1, 2), (0, 2)]);
    version.extend_from_slice(b"{\"capabilities\":{\"max_msg_fds\":16}}\0");
    let msgs: [(u8, u16, Vec<u8>); 7] = [
        (0, 1, version),
        (1, DMA_MAP, map(3, 0x4000_0000, 0x1_0000)),
        (1 | 2, DMA_MAP, map(3, 0x5000_0000, 0x1_0000)),
        (0, 3, unmap(0, 0x4000_0000, 0x1_0000)),
        (0, 3, unmap(0, 0x5000_0000, 0x1000)),
        (1 | 1 << 5, DMA_MAP, map(1, 0x6000_0000, 0x2_0000)),
        (0, 3, unmap(2, 0, 0)),
    ];
    let mut s = vec![2u8];
    for (i, (ctl, cmd, payload)) in msgs.iter().enumerate() {
        s.push(*ctl);
        s.extend_from_slice(&super::vfio_message(i as u16, *cmd, payload));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_follow_the_headers_sizes_and_stop_at_the_end() {
        let a = super::super::vfio_message(1, 2, &[9; 8]);
        let data = [&[1u8][..], &a, &[0u8, 7, 7]].concat();
        let r = records(&data);
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].ctl, r[0].msg), (1, &a[..]));
        assert_eq!((r[1].ctl, r[1].msg), (0, &[7u8, 7][..]), "a short tail is sent as it is");
    }
}
