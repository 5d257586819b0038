//! Packet capture: every frame a node's port sends or receives, as it is on the segment,
//! written as a classic pcap file (link type Ethernet), so that tshark/Wireshark decode
//! the netdev's traffic and RoCE (UDP port 4791) alike. Nothing is synthesized.
//!
//! A peer decides what the node receives, so the file is bounded: once its next record
//! would pass the size bound (`--pcap-max-mib`, [`DEFAULT_MAX_BYTES`]) recording stops,
//! with one log line; [`PcapWriter::frame`] then returns false and the port counts the
//! frames not recorded (`PCAP_DROPPED`). The file is opened without following a symlink
//! at its path, and an existing file must be a regular one (it is then truncated).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// The default size bound of a capture file (256 MiB).
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;

const HEADER: u64 = 24;
const RECORD_HEADER: u64 = 16;

pub struct PcapWriter {
    out: BufWriter<File>,
    written: u64,
    max_bytes: u64,
    full: bool,
}

/// Opens `path` for writing from its start: never through a symlink, never anything but a
/// regular file (a FIFO is not waited for: the open does not block).
pub fn open_regular(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::FileTypeExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::new(e.kind(), format!("{} is a symlink: refused", path.display())),
            _ => e,
        })?;
    let ft = file.metadata()?.file_type();
    if !ft.is_file() || ft.is_fifo() {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{} is not a regular file: refused", path.display())));
    }
    file.set_len(0)?;
    Ok(file)
}

impl PcapWriter {
    /// A capture file at `path` of at most `max_bytes` bytes (its header included).
    pub fn create(path: &Path, max_bytes: u64) -> std::io::Result<PcapWriter> {
        let mut out = BufWriter::new(open_regular(path)?);
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?; // microsecond timestamps
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&65535u32.to_le_bytes())?; // snaplen
        out.write_all(&1u32.to_le_bytes())?; // LINKTYPE_ETHERNET
        out.flush()?;
        Ok(PcapWriter { out, written: HEADER, max_bytes, full: false })
    }

    /// Appends one frame (Ethernet header first, no FCS); Ok(false) when the size bound
    /// left no room for it (nothing is recorded from then on).
    pub fn frame(&mut self, frame: &[u8]) -> std::io::Result<bool> {
        let size = RECORD_HEADER + frame.len() as u64;
        if self.full || self.written.saturating_add(size) > self.max_bytes {
            if !self.full {
                self.full = true;
                log::warn!("pcap: the capture reached its bound of {} bytes; recording stopped", self.max_bytes);
            }
            return Ok(false);
        }
        self.written += size;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = frame.len() as u32;
        self.out.write_all(&(now.as_secs() as u32).to_le_bytes())?;
        self.out.write_all(&now.subsec_micros().to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(frame)?;
        self.out.flush()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_header_and_records() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pcap");
        let mut w = PcapWriter::create(&p, DEFAULT_MAX_BYTES).unwrap();
        let frame: Vec<u8> = (0..60u8).collect();
        assert!(w.frame(&frame).unwrap());
        drop(w);
        let b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 24 + 16 + 60);
        assert_eq!(&b[..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(&b[20..24], &1u32.to_le_bytes(), "link type Ethernet");
        assert_eq!(&b[40..], &frame[..], "the frame as given");
    }

    #[test]
    fn the_bound_stops_recording() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pcap");
        let mut w = PcapWriter::create(&p, 24 + 2 * 76).unwrap();
        let frame = [0u8; 60];
        assert!(w.frame(&frame).unwrap());
        assert!(w.frame(&frame).unwrap());
        assert!(!w.frame(&frame).unwrap(), "no room for a third");
        assert!(!w.frame(&[0u8; 1]).unwrap(), "stopped for good");
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 24 + 2 * 76);
    }

    #[test]
    fn symlinks_and_special_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("precious");
        std::fs::write(&target, b"keep me").unwrap();
        let link = dir.path().join("x.pcap");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(PcapWriter::create(&link, DEFAULT_MAX_BYTES).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo with a valid path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(PcapWriter::create(&fifo, DEFAULT_MAX_BYTES).is_err(), "a FIFO is refused without blocking");
    }
}
