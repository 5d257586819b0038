//! Packet capture: every RoCEv2 packet a node sends or receives, written as a classic pcap
//! file (link type Ethernet) with synthesized Ethernet, IPv4 and UDP headers around the
//! UDP payload, so that tshark/Wireshark decode it as RoCE (UDP port 4791).

use rnic_emu_core::rnic::fabric::packet::{ipv4_header, udp_header, Endpoints};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

pub struct PcapWriter {
    out: BufWriter<File>,
}

/// A locally administered MAC derived from an IPv4 address.
fn mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
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

    /// Appends one packet: `payload` is the UDP payload (RoCEv2 headers through ICRC).
    pub fn packet(&mut self, ep: &Endpoints, payload: &[u8]) -> std::io::Result<()> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
        let len = 14 + 20 + 8 + payload.len();
        self.out.write_all(&(now.as_secs() as u32).to_le_bytes())?;
        self.out.write_all(&now.subsec_micros().to_le_bytes())?;
        self.out.write_all(&(len as u32).to_le_bytes())?;
        self.out.write_all(&(len as u32).to_le_bytes())?;
        self.out.write_all(&mac(ep.dst))?;
        self.out.write_all(&mac(ep.src))?;
        self.out.write_all(&0x0800u16.to_be_bytes())?;
        self.out.write_all(&ipv4_header(ep, 8 + payload.len()))?;
        self.out.write_all(&udp_header(ep, payload.len()))?;
        self.out.write_all(payload)?;
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
        let ep = Endpoints { src: Ipv4Addr::new(127, 0, 0, 11), dst: Ipv4Addr::new(127, 0, 0, 12), src_port: 4791 };
        w.packet(&ep, &[0u8; 16]).unwrap();
        drop(w);
        let b = std::fs::read(&p).unwrap();
        assert_eq!(b.len(), 24 + 16 + 14 + 20 + 8 + 16);
        assert_eq!(&b[..4], &0xa1b2_c3d4u32.to_le_bytes());
        assert_eq!(&b[40 + 12..40 + 14], &[0x08, 0x00], "EtherType IPv4");
        assert_eq!(&b[40 + 14 + 20 + 2..40 + 14 + 20 + 4], &4791u16.to_be_bytes(), "UDP destination 4791");
    }
}
