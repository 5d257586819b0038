//! Packet capture: every frame a node's port sends or receives, as it is on the segment,
//! written as a classic pcap file (link type Ethernet), so that tshark/Wireshark decode
//! the netdev's traffic and RoCE (UDP port 4791) alike. Nothing is synthesized.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub struct PcapWriter {
    out: BufWriter<File>,
}

impl PcapWriter {
    pub fn create(path: &Path) -> std::io::Result<PcapWriter> {
        let mut out = BufWriter::new(File::create(path)?);
        out.write_all(&0xa1b2_c3d4u32.to_le_bytes())?; // microsecond timestamps
        out.write_all(&2u16.to_le_bytes())?;
        out.write_all(&4u16.to_le_bytes())?;
        out.write_all(&0i32.to_le_bytes())?;
        out.write_all(&0u32.to_le_bytes())?;
        out.write_all(&65535u32.to_le_bytes())?; // snaplen
        out.write_all(&1u32.to_le_bytes())?; // LINKTYPE_ETHERNET
        out.flush()?;
        Ok(PcapWriter { out })
    }

    /// Appends one frame (Ethernet header first, no FCS).
    pub fn frame(&mut self, frame: &[u8]) -> std::io::Result<()> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = frame.len() as u32;
        self.out.write_all(&(now.as_secs() as u32).to_le_bytes())?;
        self.out.write_all(&now.subsec_micros().to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(&len.to_le_bytes())?;
        self.out.write_all(frame)?;
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_header_and_records() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.pcap");
        let mut w = PcapWriter::create(&p).unwrap();
        let frame: Vec<u8> = (0..60u8).collect();
        w.frame(&frame).unwrap();
        drop(w);
        let b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 24 + 16 + 60);
        assert_eq!(&b[..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(&b[20..24], &1u32.to_le_bytes(), "link type Ethernet");
        assert_eq!(&b[40..], &frame[..], "the frame as given");
    }
}
