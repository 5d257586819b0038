//! Ethernet frames on the port (docs/fabric.md "Frames"): Ethernet II, then IPv4 or IPv6,
//! then UDP to port 4791 with a RoCEv2 packet ([`super::packet`]) whose invariant CRC is
//! computed over the IP and UDP headers exactly as they are in the frame (IBA annex
//! A17.3.3). Building a RoCE frame, and classifying a received one: RoCE for this port
//! (headers checked, addresses returned for the source checks), another frame for the
//! netdev, or malformed (with the reason, for the port's counters).
//!
//! No FCS: the link framings the port speaks (datagrams, streams with a length, TAP)
//! carry frames without it, and a datagram arrives whole or not at all.

pub use super::packet::icrc_over as icrc;
use super::packet::{Packet, PacketError, BTH_LEN, ICRC_LEN, ROCE_UDP_PORT};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use thiserror::Error;

pub type Mac = [u8; 6];

pub const ETH_HLEN: usize = 14;
pub const IPV4_HLEN: usize = 20;
pub const IPV6_HLEN: usize = 40;
pub const UDP_HLEN: usize = 8;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
pub const ETHERTYPE_ARP: u16 = 0x0806;
const IPPROTO_UDP: u8 = 17;
/// Broadcast MAC.
pub const BROADCAST: Mac = [0xff; 6];
/// Hop limit / TTL of the frames the device builds.
pub const DEFAULT_TTL: u8 = 64;

/// True for group (broadcast and multicast) MAC addresses: bit 0 of the first byte.
pub fn is_group(mac: &Mac) -> bool {
    mac[0] & 1 != 0
}

/// The MAC a node's port has by default (`ETH_PERM_MAC`): locally administered, from the
/// node's IPv4 address (02:e1:a:b:c:d).
pub fn mac_of_ipv4(ip: Ipv4Addr) -> Mac {
    let o = ip.octets();
    [0x02, 0xe1, o[0], o[1], o[2], o[3]]
}

/// The addresses of one RoCEv2 frame, as sent or as received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceAddr {
    pub dst_mac: Mac,
    pub src_mac: Mac,
    /// Both addresses of one family.
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub src_port: u16,
    /// IPv4 TOS / IPv6 traffic class (DSCP and ECN).
    pub tclass: u8,
    /// IPv4 TTL / IPv6 hop limit.
    pub ttl: u8,
}

/// Why a received frame was dropped before any verbs processing.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("runt frame of {0} bytes")]
    Runt(usize),
    #[error("bad IP header: {0}")]
    BadIp(&'static str),
    #[error("an IP fragment of a RoCE packet")]
    Fragment,
    #[error("bad UDP header: {0}")]
    BadUdp(&'static str),
    #[error("RoCE packet: {0}")]
    Packet(#[from] PacketError),
}

/// What a received frame is.
#[derive(Debug, PartialEq, Eq)]
pub enum Kind {
    /// A RoCEv2 packet (UDP to 4791): its addresses and where the UDP payload (BTH through
    /// ICRC) starts and ends in the frame, the IP and UDP headers at `l3..payload`.
    Roce { addr: RoceAddr, l3: usize, payload: std::ops::Range<usize> },
    /// Anything else (ARP, other IP traffic, other ethertypes): the netdev's business.
    Other,
}

/// A received frame's Ethernet header and kind.
#[derive(Debug, PartialEq, Eq)]
pub struct Classified {
    pub dst_mac: Mac,
    pub src_mac: Mac,
    pub ethertype: u16,
    pub kind: Kind,
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The one's-complement sum of `data` folded into `sum` (for the IPv4 header checksum and
/// the UDP checksum over IPv6).
fn ones_sum(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Reads the Ethernet header and tells RoCE from other traffic. Checks what a NIC's
/// parser checks on the way to its RoCE engine: the IP header (version, length, IPv4
/// checksum), fragments, the UDP header and its length. Frames that are not UDP to 4791
/// are `Kind::Other` without further checks (the guest's stack judges them).
pub fn classify(frame: &[u8]) -> Result<Classified, FrameError> {
    if frame.len() < ETH_HLEN {
        return Err(FrameError::Runt(frame.len()));
    }
    let mut dst_mac = [0u8; 6];
    let mut src_mac = [0u8; 6];
    dst_mac.copy_from_slice(&frame[0..6]);
    src_mac.copy_from_slice(&frame[6..12]);
    let ethertype = be16(frame, 12);
    let other = Classified { dst_mac, src_mac, ethertype, kind: Kind::Other };
    let l3 = ETH_HLEN;
    let ip = &frame[l3..];
    let (src_ip, dst_ip, tclass, ttl, udp_at, ip_end) = match ethertype {
        ETHERTYPE_IPV4 => {
            if ip.len() < IPV4_HLEN || ip[0] >> 4 != 4 || ip[9] != IPPROTO_UDP {
                return Ok(other);
            }
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(be16(ip, 2));
            if ihl < IPV4_HLEN || total < ihl || total > ip.len() {
                return Err(FrameError::BadIp("header or total length"));
            }
            // Fragments: only the first carries the UDP header; a RoCE NIC reassembles
            // nothing, so a first fragment to 4791 is dropped and later ones are not RoCE.
            let frag = be16(ip, 6);
            let (more, offset) = (frag & 0x2000 != 0, frag & 0x1fff);
            if offset != 0 {
                return Ok(other);
            }
            if ip.len() < ihl + UDP_HLEN || be16(ip, ihl + 2) != ROCE_UDP_PORT {
                return Ok(other);
            }
            if more {
                return Err(FrameError::Fragment);
            }
            if fold(ones_sum(0, &ip[..ihl])) != 0xffff {
                return Err(FrameError::BadIp("IPv4 header checksum"));
            }
            let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (IpAddr::V4(src), IpAddr::V4(dst), ip[1], ip[8], l3 + ihl, l3 + total)
        }
        ETHERTYPE_IPV6 => {
            // Extension headers (fragment header included) are not RoCE's: next header must
            // be UDP directly.
            if ip.len() < IPV6_HLEN + UDP_HLEN || ip[0] >> 4 != 6 || ip[6] != IPPROTO_UDP || be16(ip, IPV6_HLEN + 2) != ROCE_UDP_PORT {
                return Ok(other);
            }
            let plen = usize::from(be16(ip, 4));
            if IPV6_HLEN + plen > ip.len() {
                return Err(FrameError::BadIp("IPv6 payload length"));
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&ip[8..24]);
            d.copy_from_slice(&ip[24..40]);
            let tclass = ((ip[0] & 0x0f) << 4) | (ip[1] >> 4);
            (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)), tclass, ip[7], l3 + IPV6_HLEN, l3 + IPV6_HLEN + plen)
        }
        _ => return Ok(other),
    };
    let udp = &frame[udp_at..ip_end];
    if udp.len() < UDP_HLEN {
        return Err(FrameError::BadUdp("shorter than its header"));
    }
    let ulen = usize::from(be16(udp, 4));
    if ulen != udp.len() {
        return Err(FrameError::BadUdp("length disagrees with the IP length"));
    }
    if ulen < UDP_HLEN + BTH_LEN + ICRC_LEN {
        return Err(FrameError::Packet(PacketError::Short(ulen.saturating_sub(UDP_HLEN))));
    }
    if src_ip.is_ipv6() && be16(udp, 6) != 0 && fold(ones_sum(udp_pseudo_v6(frame, l3, ulen), udp)) != 0xffff {
        return Err(FrameError::BadUdp("IPv6 UDP checksum"));
    }
    let addr = RoceAddr { dst_mac, src_mac, src_ip, dst_ip, src_port: be16(udp, 0), tclass, ttl };
    Ok(Classified { dst_mac, src_mac, ethertype, kind: Kind::Roce { addr, l3, payload: udp_at + UDP_HLEN..ip_end } })
}

/// The IPv6 pseudo-header's sum (addresses, UDP length, next header) for the UDP checksum.
fn udp_pseudo_v6(frame: &[u8], l3: usize, ulen: usize) -> u32 {
    let sum = ones_sum(0, &frame[l3 + 8..l3 + 40]);
    sum + (ulen as u32 >> 16) + (ulen as u32 & 0xffff) + u32::from(IPPROTO_UDP)
}

/// Builds the whole frame of `pkt` from `a` into `out` (cleared first; a pooled buffer
/// costs no allocation): Ethernet II, IPv4 (DF, ID 0, checksum) or IPv6, UDP to 4791
/// (checksum 0 over IPv4, computed over IPv6), the packet and its ICRC.
pub fn encode_roce(a: &RoceAddr, pkt: &Packet, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&a.dst_mac);
    out.extend_from_slice(&a.src_mac);
    let v6 = matches!(a.src_ip, IpAddr::V6(_));
    out.extend_from_slice(&(if v6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 }).to_be_bytes());
    let l3 = out.len();
    let ip_len = if v6 { IPV6_HLEN } else { IPV4_HLEN };
    out.resize(l3 + ip_len + UDP_HLEN, 0);
    pkt.encode_body_into(out);
    let body_end = out.len();
    let ulen = body_end + ICRC_LEN - (l3 + ip_len);
    {
        let ip = &mut out[l3..l3 + ip_len];
        match (a.src_ip, a.dst_ip) {
            (IpAddr::V6(s), d) => {
                let d = match d {
                    IpAddr::V6(d) => d,
                    IpAddr::V4(d) => d.to_ipv6_mapped(),
                };
                ip[0] = 0x60 | (a.tclass >> 4);
                ip[1] = a.tclass << 4;
                ip[4..6].copy_from_slice(&(ulen as u16).to_be_bytes());
                ip[6] = IPPROTO_UDP;
                ip[7] = a.ttl;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
            }
            (IpAddr::V4(s), d) => {
                let d = match d {
                    IpAddr::V4(d) => d,
                    IpAddr::V6(d) => d.to_ipv4_mapped().unwrap_or(Ipv4Addr::UNSPECIFIED),
                };
                ip[0] = 0x45;
                ip[1] = a.tclass;
                ip[2..4].copy_from_slice(&((IPV4_HLEN + ulen) as u16).to_be_bytes());
                ip[6] = 0x40; // don't fragment
                ip[8] = a.ttl;
                ip[9] = IPPROTO_UDP;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                let sum = !fold(ones_sum(0, ip));
                ip[10..12].copy_from_slice(&sum.to_be_bytes());
            }
        }
    }
    let udp_at = l3 + ip_len;
    out[udp_at..udp_at + 2].copy_from_slice(&a.src_port.to_be_bytes());
    out[udp_at + 2..udp_at + 4].copy_from_slice(&ROCE_UDP_PORT.to_be_bytes());
    out[udp_at + 4..udp_at + 6].copy_from_slice(&(ulen as u16).to_be_bytes());
    let crc = icrc(&out[l3..udp_at + UDP_HLEN], &out[udp_at + UDP_HLEN..body_end]);
    out.extend_from_slice(&crc.to_le_bytes());
    if v6 {
        let mut sum = fold(ones_sum(udp_pseudo_v6(out, l3, ulen), &out[udp_at..]));
        sum = !sum;
        if sum == 0 {
            sum = 0xffff;
        }
        out[udp_at + 6..udp_at + 8].copy_from_slice(&sum.to_be_bytes());
    }
}

/// Decodes the RoCE packet of a frame [`classify`] found to be RoCE, checking its ICRC
/// over the headers as received.
pub fn decode_roce(frame: &[u8], l3: usize, payload: &std::ops::Range<usize>, pkt: &mut Packet) -> Result<(), PacketError> {
    let data = frame.get(payload.clone()).ok_or(PacketError::Short(0))?;
    let hdrs = frame.get(l3..payload.start).ok_or(PacketError::Short(0))?;
    pkt.decode_checked_into(data, |body| icrc(hdrs, body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::fabric::packet::{op, Bth, Endpoints, Reth};

    fn v4() -> RoceAddr {
        RoceAddr {
            dst_mac: [0x02, 0xe1, 10, 0, 0, 2],
            src_mac: [0x02, 0xe1, 10, 0, 0, 1],
            src_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            src_port: 0xc123,
            tclass: 0,
            ttl: DEFAULT_TTL,
        }
    }

    fn write() -> Packet {
        Packet {
            bth: Bth { opcode: op::WRITE_ONLY, pkey: 0xffff, dest_qp: 0x11, psn: 77, ack_req: true, ..Default::default() },
            reth: Some(Reth { va: 0x1000, rkey: 0x102, len: 1001 }),
            payload: (0..1001u32).map(|i| i as u8).collect(),
            ..Default::default()
        }
    }

    fn round_trip(a: &RoceAddr) -> (Vec<u8>, Packet) {
        let mut f = Vec::new();
        encode_roce(a, &write(), &mut f);
        let c = classify(&f).expect("a valid frame");
        let Kind::Roce { addr, l3, payload } = c.kind else { panic!("not RoCE") };
        assert_eq!(addr, *a);
        let mut p = Packet::default();
        decode_roce(&f, l3, &payload, &mut p).expect("ICRC and headers check");
        (f, p)
    }

    #[test]
    fn ipv4_frames_round_trip_and_match_the_udp_payload_encoding() {
        let (f, p) = round_trip(&v4());
        assert_eq!(p.payload, write().payload);
        assert_eq!(be16(&f, 12), ETHERTYPE_IPV4);
        assert_eq!(fold(ones_sum(0, &f[14..34])), 0xffff, "IPv4 checksum");
        // The same packet as the older UDP-payload encoder builds it for the same headers:
        // both compute the ICRC over identical bytes.
        let ep = Endpoints { src: Ipv4Addr::new(10, 0, 0, 1), dst: Ipv4Addr::new(10, 0, 0, 2), src_port: 0xc123 };
        assert_eq!(&f[42..], &write().encode(&ep)[..]);
    }

    #[test]
    fn ipv6_frames_carry_a_valid_udp_checksum() {
        let mut a = v4();
        a.src_ip = IpAddr::V6("fe80::e1:a00:1".parse().unwrap());
        a.dst_ip = IpAddr::V6("fe80::e1:a00:2".parse().unwrap());
        a.tclass = 0x68;
        let (f, _) = round_trip(&a);
        assert_eq!(be16(&f, 12), ETHERTYPE_IPV6);
        let mut bad = f.clone();
        let n = bad.len();
        bad[n - 10] ^= 1;
        assert!(matches!(classify(&bad), Err(FrameError::BadUdp(_))), "payload change caught by the UDP checksum");
    }

    #[test]
    fn the_icrc_ignores_masked_fields_and_covers_the_rest() {
        let mut f = Vec::new();
        encode_roce(&v4(), &write(), &mut f);
        let check = |f: &[u8]| {
            let c = classify(f)?;
            let Kind::Roce { l3, payload, .. } = c.kind else { panic!() };
            decode_roce(f, l3, &payload, &mut Packet::default()).map_err(FrameError::from)
        };
        // TTL and TOS change on the way (the header checksum with them): still valid.
        let mut g = f.clone();
        g[14 + 8] = 3;
        g[14 + 1] = 0x02;
        let sum = {
            g[24] = 0;
            g[25] = 0;
            !fold(ones_sum(0, &g[14..34]))
        };
        g[24..26].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(check(&g), Ok(()));
        // The IP identification is covered.
        let mut g = f.clone();
        g[18] = 1;
        g[24] = 0;
        g[25] = 0;
        let sum = !fold(ones_sum(0, &g[14..34]));
        g[24..26].copy_from_slice(&sum.to_be_bytes());
        assert!(matches!(check(&g), Err(FrameError::Packet(PacketError::Icrc { .. }))));
    }

    #[test]
    fn malformed_frames_are_classified() {
        let mut f = Vec::new();
        encode_roce(&v4(), &write(), &mut f);
        assert_eq!(classify(&f[..10]), Err(FrameError::Runt(10)));
        let mut g = f.clone();
        g[14 + 6] |= 0x20; // more fragments
        assert_eq!(classify(&g), Err(FrameError::Fragment));
        let mut g = f.clone();
        g[14 + 10] ^= 0xff;
        assert_eq!(classify(&g), Err(FrameError::BadIp("IPv4 header checksum")));
        let mut g = f.clone();
        g.truncate(g.len() - 8);
        assert!(classify(&g).is_err(), "IP length beyond the frame");
        let mut arp = f[..42].to_vec();
        arp[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        assert_eq!(classify(&arp).map(|c| c.kind), Ok(Kind::Other));
        // Ethernet padding after the IP packet is allowed.
        let mut g = f.clone();
        g.extend_from_slice(&[0; 6]);
        assert!(matches!(classify(&g).map(|c| c.kind), Ok(Kind::Roce { .. })));
    }
}
