//! Ethernet frames on the port (docs/fabric.md "Frames"): Ethernet II, then IPv4 or IPv6,
//! then UDP to port 4791 with a RoCEv2 packet ([`super::packet`]) whose invariant CRC is
//! computed over the IP and UDP headers exactly as they are in the frame (IBA annex
//! A17.3.3). Building a RoCE frame, classifying a received one (RoCE, another frame for
//! the netdev, or malformed with the reason), and the port's receive path over that
//! ([`sort`]: malformed, oversized, filtered by MAC, RoCE from an impossible source, RoCE
//! that does not decode, each dropped with its counters; RoCE for the engine; the rest
//! for the netdev), which the server's fabric port runs on every frame from the segment
//! and the `frame` fuzz target runs on arbitrary bytes (docs/fabric.md "Frames").
//!
//! No FCS: the link framings the port speaks (datagrams, streams with a length, TAP)
//! carry frames without it, and a datagram arrives whole or not at all.

pub use super::packet::icrc_over as icrc;
use super::packet::{Grh, Packet, PacketError, BTH_LEN, DETH_LEN, GRH_LEN, ICRC_LEN, IMM_LEN, ROCE_UDP_PORT};
use crate::contract::counters::{Counter, Stats};
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
/// IPv6 fragment header (next header 44) and its length.
const IPPROTO_FRAGMENT: u8 = 44;
const FRAG_HLEN: usize = 8;
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
/// parser and receive checksum engine check, standing in for the FCS the link framings do
/// not carry (a frame cut short or corrupted on the way fails here, as it would fail the
/// FCS): the IP header of every IPv4 and IPv6 frame (version, lengths within the frame,
/// the IPv4 header checksum); for UDP to 4791, fragments (a RoCE NIC reassembles
/// nothing), the UDP length and a UDP checksum that is not 0. Anything that is not UDP to
/// 4791 is `Kind::Other` once its IP header passes (ARP, other ethertypes, 802.3 length
/// frames, TCP, other UDP, later fragments, IPv6 with extension headers other than a
/// fragment header): the guest's stack judges it, as a NIC hands such frames to its host.
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
            if ip.len() < IPV4_HLEN {
                return Err(FrameError::BadIp("IPv4 header cut short"));
            }
            if ip[0] >> 4 != 4 {
                return Err(FrameError::BadIp("IPv4 ethertype, another IP version"));
            }
            let ihl = usize::from(ip[0] & 0x0f) * 4;
            let total = usize::from(be16(ip, 2));
            if ihl < IPV4_HLEN || total < ihl || total > ip.len() {
                return Err(FrameError::BadIp("header or total length"));
            }
            if fold(ones_sum(0, &ip[..ihl])) != 0xffff {
                return Err(FrameError::BadIp("IPv4 header checksum"));
            }
            // Fragments: only the first carries the UDP header; a RoCE NIC reassembles
            // nothing, so a first fragment to 4791 is dropped and later ones are not RoCE.
            let frag = be16(ip, 6);
            let (more, offset) = (frag & 0x2000 != 0, frag & 0x1fff);
            if ip[9] != IPPROTO_UDP || offset != 0 || total < ihl + UDP_HLEN || be16(ip, ihl + 2) != ROCE_UDP_PORT {
                return Ok(other);
            }
            if more {
                return Err(FrameError::Fragment);
            }
            let src = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
            (IpAddr::V4(src), IpAddr::V4(dst), ip[1], ip[8], l3 + ihl, l3 + total)
        }
        ETHERTYPE_IPV6 => {
            if ip.len() < IPV6_HLEN {
                return Err(FrameError::BadIp("IPv6 header cut short"));
            }
            if ip[0] >> 4 != 6 {
                return Err(FrameError::BadIp("IPv6 ethertype, another IP version"));
            }
            let plen = usize::from(be16(ip, 4));
            if IPV6_HLEN + plen > ip.len() {
                return Err(FrameError::BadIp("IPv6 payload length"));
            }
            let body = &ip[IPV6_HLEN..IPV6_HLEN + plen];
            // A fragment header before UDP to 4791 (the first fragment, or an atomic one):
            // a RoCE packet split by a router, which the RNIC does not reassemble.
            let udp_fragment = ip[6] == IPPROTO_FRAGMENT && body.len() >= FRAG_HLEN + UDP_HLEN && body[0] == IPPROTO_UDP;
            if udp_fragment && be16(body, 2) & 0xfff8 == 0 && be16(body, FRAG_HLEN + 2) == ROCE_UDP_PORT {
                return Err(FrameError::Fragment);
            }
            // Other extension headers are not RoCE's: next header must be UDP directly.
            if ip[6] != IPPROTO_UDP || plen < UDP_HLEN || be16(body, 2) != ROCE_UDP_PORT {
                return Ok(other);
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
    // A UDP checksum of 0 means none (the RoCEv2 senders' choice over IPv4, allowed over
    // IPv6 for RoCE as for tunnels); any other value must check.
    if be16(udp, 6) != 0 {
        let pseudo = match (src_ip, dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => udp_pseudo_v4(s, d, ulen),
            _ => udp_pseudo_v6(frame, l3, ulen),
        };
        if fold(ones_sum(pseudo, udp)) != 0xffff {
            return Err(FrameError::BadUdp("UDP checksum"));
        }
    }
    let addr = RoceAddr { dst_mac, src_mac, src_ip, dst_ip, src_port: be16(udp, 0), tclass, ttl };
    Ok(Classified { dst_mac, src_mac, ethertype, kind: Kind::Roce { addr, l3, payload: udp_at + UDP_HLEN..ip_end } })
}

/// The IPv4 pseudo-header's sum (addresses, protocol, UDP length) for the UDP checksum.
fn udp_pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, ulen: usize) -> u32 {
    let sum = ones_sum(ones_sum(0, &src.octets()), &dst.octets());
    sum + ulen as u32 + u32::from(IPPROTO_UDP)
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
    write_ip_header(a, ulen, &mut out[l3..l3 + ip_len]);
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

/// Writes the IPv4 (DF, ID 0, checksum) or IPv6 header of a RoCE frame from `a` carrying
/// `ulen` bytes of UDP into `ip` (20 or 40 bytes, of `a`'s family).
fn write_ip_header(a: &RoceAddr, ulen: usize, ip: &mut [u8]) {
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

/// The GRH area a UD receive gets for a UD SEND ONLY of `payload` bytes (with immediate
/// data when `imm`) sent from `a` (minor 16): the IP header its frame would carry, as
/// [`encode_roce`] builds it (a loopback message has no frame).
pub fn grh_of(a: &RoceAddr, imm: bool, payload: usize) -> Grh {
    let pad = (4 - payload % 4) % 4;
    let headers = BTH_LEN + DETH_LEN + if imm { IMM_LEN } else { 0 };
    let ulen = UDP_HLEN + headers + payload + pad + ICRC_LEN;
    let mut g = Grh::default();
    match a.src_ip {
        IpAddr::V6(_) => write_ip_header(a, ulen, &mut g.0),
        IpAddr::V4(_) => write_ip_header(a, ulen, &mut g.0[GRH_LEN - IPV4_HLEN..]),
    }
    g
}

/// Decodes the RoCE packet of a frame [`classify`] found to be RoCE, checking its ICRC
/// over the headers as received.
pub fn decode_roce(frame: &[u8], l3: usize, payload: &std::ops::Range<usize>, pkt: &mut Packet) -> Result<(), PacketError> {
    let data = frame.get(payload.clone()).ok_or(PacketError::Short(0))?;
    let hdrs = frame.get(l3..payload.start).ok_or(PacketError::Short(0))?;
    pkt.decode_checked_into(data, |body| icrc(hdrs, body))?;
    if pkt.deth.is_none() {
        return Ok(());
    }
    // A UD packet's GRH area: the IPv6 header, or the IPv4 one (its first 20 bytes) after
    // 20 zeroes.
    let v6 = hdrs.first().is_some_and(|b| b >> 4 == 6);
    let (at, n) = if v6 { (0, IPV6_HLEN) } else { (GRH_LEN - IPV4_HLEN, IPV4_HLEN) };
    if let Some(h) = hdrs.get(..n) {
        pkt.grh.0[at..].copy_from_slice(h);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The port's receive path: what a NIC does with a frame from the segment.

/// The port's settings a received frame is judged against (its MAC filter, addresses, MTU).
#[derive(Clone, Copy, Debug)]
pub struct RxPort<'a> {
    /// The unicast MAC the port receives (`ETH_MAC`).
    pub mac: Mac,
    /// The RNIC's fabric address: RoCE packets to it (and to `mac`) are the engine's.
    pub ip: Ipv4Addr,
    /// The port's GIDs (CMD_SET_GID): RoCE packets to their IPv4 and IPv6 addresses are too.
    pub gids: Option<&'a crate::rnic::gid::GidTable>,
    /// Promiscuous mode: unicast frames for any MAC go to the netdev.
    pub promisc: bool,
    /// The longest frame the MTU allows (MTU + the Ethernet header).
    pub max_frame: usize,
}

impl RxPort<'_> {
    /// Whether `ip` is one of the port's addresses.
    pub fn is_own(&self, ip: IpAddr) -> bool {
        match ip {
            IpAddr::V4(ip) => ip == self.ip || self.gids.is_some_and(|g| g.has_ipv4(ip)),
            IpAddr::V6(ip) => self.gids.is_some_and(|g| g.has_ipv6(ip)),
        }
    }
}

/// Why the port dropped a received frame; [`Dropped::counters`] names what it counts.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum Dropped {
    /// Runt, bad IP or UDP header (length, checksum), RoCE fragment: `ETH_RX_ERRORS` (a
    /// fragment also `PKTS_DROPPED`).
    #[error("{0}")]
    Malformed(#[from] FrameError),
    /// Longer than the port's MTU allows: `ETH_RX_ERRORS`.
    #[error("a {len}-byte frame, longer than the MTU allows ({max})")]
    Oversized { len: usize, max: usize },
    /// Unicast for another MAC, not promiscuous: `ETH_RX_FILTERED`.
    #[error("unicast for another MAC")]
    Filtered,
    /// RoCE for this port from a source no peer can have: `ETH_RX_ERRORS`, `PKTS_DROPPED`.
    #[error("a RoCE packet from {0}")]
    BadSource(&'static str),
    /// RoCE for this port that does not decode (ICRC, opcode, lengths, pad):
    /// `PKTS_DROPPED` (a bad ICRC also `ICRC_ERRORS`).
    #[error("RoCE packet: {0}")]
    Packet(PacketError),
}

impl Dropped {
    /// The counters this drop adds one to.
    pub fn counters(&self) -> &'static [Counter] {
        use Counter::*;
        match self {
            Dropped::Malformed(FrameError::Fragment) => &[EthRxErrors, PktsDropped],
            Dropped::BadSource(_) => &[RoceBadSource, PktsDropped],
            Dropped::Malformed(_) | Dropped::Oversized { .. } => &[EthRxErrors],
            Dropped::Filtered => &[EthRxFiltered],
            Dropped::Packet(PacketError::Icrc { .. }) => &[PktsDropped, IcrcErrors],
            Dropped::Packet(_) => &[PktsDropped],
        }
    }

    /// Counts the drop.
    pub fn count(&self, stats: &Stats) {
        self.counters().iter().for_each(|c| stats.inc(*c));
    }
}

/// Where a received frame goes.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A RoCE packet for the verbs engine (decoded into the caller's packet), from the
    /// node at this address (IPv4, or IPv6 to an IPv6 GID of the port).
    Roce(IpAddr),
    /// The netdev's (its receive ring), as it is.
    Frame,
    /// Dropped, to be counted ([`Dropped::count`]) and logged.
    Dropped(Dropped),
}

/// A received frame's verdict, and the source MAC a learning segment may take from it.
#[derive(Debug, PartialEq, Eq)]
pub struct Sorted {
    pub verdict: Verdict,
    /// The frame's source MAC when its headers are sound and the address is a unicast
    /// other than the port's own (a member claiming the port's MAC must not steer its
    /// frames).
    pub learn: Option<Mac>,
}

/// Sorts one received frame as a NIC's receive path does, in this order: malformed
/// ([`classify`]), longer than the MTU allows, unicast for another MAC (unless
/// promiscuous); then UDP to 4791 for this port's MAC and address is RoCE, checked for
/// its source ([`check_source`]) and decoded into `pkt` (ICRC over the headers as
/// received); anything else is the netdev's. `from_wire`: the frame came from the
/// segment (false: turned around inside the port, whose own addresses are then its
/// legitimate source). Nothing is counted here: the caller counts a drop with
/// [`Dropped::count`].
pub fn sort(frame: &[u8], port: &RxPort, from_wire: bool, pkt: &mut Packet) -> Sorted {
    let c = match classify(frame) {
        Ok(c) => c,
        Err(e) => return Sorted { verdict: Verdict::Dropped(Dropped::Malformed(e)), learn: None },
    };
    let learn = (!is_group(&c.src_mac) && c.src_mac != port.mac).then_some(c.src_mac);
    let sorted = |verdict| Sorted { verdict, learn };
    if frame.len() > port.max_frame {
        return sorted(Verdict::Dropped(Dropped::Oversized { len: frame.len(), max: port.max_frame }));
    }
    let for_us = c.dst_mac == port.mac;
    if !for_us && !is_group(&c.dst_mac) && !port.promisc {
        return sorted(Verdict::Dropped(Dropped::Filtered));
    }
    let Kind::Roce { addr, l3, payload } = &c.kind else { return sorted(Verdict::Frame) };
    // UDP 4791 for another MAC or address (an IPv6 one that is no GID of the port, an
    // IPv4-mapped one inside IPv6) is the netdev's.
    let mapped = matches!(addr.dst_ip, IpAddr::V6(ip) if ip.to_ipv4_mapped().is_some());
    if !for_us || mapped || !port.is_own(addr.dst_ip) {
        return sorted(Verdict::Frame);
    }
    let src = addr.src_ip;
    if let Err(why) = check_source(addr, port, from_wire) {
        return sorted(Verdict::Dropped(Dropped::BadSource(why)));
    }
    match decode_roce(frame, *l3, payload, pkt) {
        Ok(()) => sorted(Verdict::Roce(src)),
        Err(e) => sorted(Verdict::Dropped(Dropped::Packet(e))),
    }
}

/// Whether a RoCE packet for this port can have come from a peer: a source MAC that is a
/// unicast address, an IPv4 source that a host may send from (not multicast, not the
/// broadcast address, not in 0.0.0.0/8, not loopback unless the port's own address is;
/// the martian sources an IP stack drops), an IPv6 source likewise (not multicast,
/// unspecified, loopback or IPv4-mapped), a UDP source port other than 0. From the
/// segment, neither the port's own MAC nor its own address. Err: what is wrong.
pub fn check_source(a: &RoceAddr, port: &RxPort, from_wire: bool) -> Result<(), &'static str> {
    if is_group(&a.src_mac) {
        return Err("a group source MAC");
    }
    if from_wire && a.src_mac == port.mac {
        return Err("the port's own MAC, from the segment");
    }
    if let IpAddr::V4(ip) = a.src_ip {
        if ip.is_multicast() {
            return Err("a multicast source address");
        }
        if ip.is_broadcast() {
            return Err("the broadcast source address");
        }
        if ip.octets()[0] == 0 {
            return Err("an unspecified source address (0.0.0.0/8)");
        }
        if ip.is_loopback() && !port.ip.is_loopback() {
            return Err("a loopback source address");
        }
    }
    if let IpAddr::V6(ip) = a.src_ip {
        if ip.is_multicast() {
            return Err("a multicast source address");
        }
        if ip.is_unspecified() {
            return Err("the unspecified source address (::)");
        }
        if ip.is_loopback() {
            return Err("a loopback source address");
        }
        if ip.to_ipv4_mapped().is_some() {
            return Err("an IPv4-mapped source address in IPv6");
        }
    }
    if from_wire && port.is_own(a.src_ip) {
        return Err("the port's own address, from the segment");
    }
    if a.src_port == 0 {
        return Err("UDP source port 0");
    }
    Ok(())
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
        assert_eq!(classify(&g), Err(FrameError::BadIp("IPv4 header checksum")), "the header checksum first");
        fix_ipv4_sum(&mut g);
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

    /// Rewrites the IPv4 header checksum of `f` (after an edit of the header).
    fn fix_ipv4_sum(f: &mut [u8]) {
        let ihl = usize::from(f[14] & 0x0f) * 4;
        f[24] = 0;
        f[25] = 0;
        let sum = !fold(ones_sum(0, &f[14..14 + ihl]));
        f[24..26].copy_from_slice(&sum.to_be_bytes());
    }

    /// An IPv4 frame of protocol `proto` (not UDP to 4791) with a valid header.
    fn ipv4_other(proto: u8) -> Vec<u8> {
        let mut f = Vec::new();
        encode_roce(&v4(), &write(), &mut f);
        f[14 + 9] = proto;
        fix_ipv4_sum(&mut f);
        f
    }

    #[test]
    fn every_ip_header_is_checked_as_a_nic_checks_its_fcs() {
        // A TCP segment: the netdev's, once its IP header passes.
        let tcp = ipv4_other(6);
        assert_eq!(classify(&tcp).map(|c| c.kind), Ok(Kind::Other));
        let mut g = tcp.clone();
        g[14 + 12] ^= 0x10; // a bit flipped in the source address
        assert_eq!(classify(&g), Err(FrameError::BadIp("IPv4 header checksum")));
        assert_eq!(classify(&tcp[..tcp.len() - 1]), Err(FrameError::BadIp("header or total length")), "cut short");
        assert_eq!(classify(&tcp[..14 + 19]), Err(FrameError::BadIp("IPv4 header cut short")));
        let mut g = tcp.clone();
        g[14] = 0x65;
        assert_eq!(classify(&g), Err(FrameError::BadIp("IPv4 ethertype, another IP version")));
        let mut g = tcp.clone();
        g[14] = 0x44; // IHL 16 bytes
        assert_eq!(classify(&g), Err(FrameError::BadIp("header or total length")));
        // IPv6: version and payload length, whatever the next header.
        let mut a = v4();
        a.src_ip = IpAddr::V6("fd00::1".parse().unwrap());
        a.dst_ip = IpAddr::V6("fd00::2".parse().unwrap());
        let mut f6 = Vec::new();
        encode_roce(&a, &write(), &mut f6);
        let mut g = f6.clone();
        g[14 + 6] = 6; // TCP
        assert_eq!(classify(&g).map(|c| c.kind), Ok(Kind::Other));
        assert_eq!(classify(&g[..g.len() - 1]), Err(FrameError::BadIp("IPv6 payload length")));
        assert_eq!(classify(&g[..14 + 39]), Err(FrameError::BadIp("IPv6 header cut short")));
        g[14] = 0x40;
        assert_eq!(classify(&g), Err(FrameError::BadIp("IPv6 ethertype, another IP version")));
    }

    #[test]
    fn a_udp_checksum_other_than_zero_must_check_over_ipv4_too() {
        let mut f = Vec::new();
        encode_roce(&v4(), &write(), &mut f);
        let sum = !fold(ones_sum(udp_pseudo_v4(Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2), f.len() - 34), &f[34..]));
        let mut g = f.clone();
        g[40..42].copy_from_slice(&sum.to_be_bytes());
        assert!(matches!(classify(&g).map(|c| c.kind), Ok(Kind::Roce { .. })), "a valid checksum");
        g[60] ^= 1; // a payload bit: the checksum fails before the ICRC is looked at
        assert_eq!(classify(&g), Err(FrameError::BadUdp("UDP checksum")));
        let mut g = f.clone();
        g[60] ^= 1;
        assert!(matches!(classify(&g).map(|c| c.kind), Ok(Kind::Roce { .. })), "checksum 0: only the ICRC can tell");
        let mut g = f.clone();
        g[38..40].copy_from_slice(&((f.len() - 34 - 1) as u16).to_be_bytes());
        assert_eq!(classify(&g), Err(FrameError::BadUdp("length disagrees with the IP length")));
    }

    #[test]
    fn fragments_of_roce_packets_are_told_and_later_ones_are_not_roce() {
        let mut f = Vec::new();
        encode_roce(&v4(), &write(), &mut f);
        let mut later = f.clone();
        later[14 + 6] = 0x00;
        later[14 + 7] = 0x10; // offset 128 bytes
        fix_ipv4_sum(&mut later);
        assert_eq!(classify(&later).map(|c| c.kind), Ok(Kind::Other), "no UDP header: the netdev's stack reassembles or drops");
        let mut first = f.clone();
        first[14 + 6] = 0x20;
        fix_ipv4_sum(&mut first);
        assert_eq!(classify(&first), Err(FrameError::Fragment));
        // IPv6: a fragment header before UDP to 4791, first or atomic fragment.
        let mut a = v4();
        a.src_ip = IpAddr::V6("fd00::1".parse().unwrap());
        a.dst_ip = IpAddr::V6("fd00::2".parse().unwrap());
        let mut f6 = Vec::new();
        encode_roce(&a, &write(), &mut f6);
        let frag6 = |offset_flags: u16| {
            let mut g = f6[..54].to_vec();
            g[14 + 6] = IPPROTO_FRAGMENT;
            let plen = be16(&f6, 18) + FRAG_HLEN as u16;
            g[18..20].copy_from_slice(&plen.to_be_bytes());
            g.extend_from_slice(&[IPPROTO_UDP, 0]);
            g.extend_from_slice(&offset_flags.to_be_bytes());
            g.extend_from_slice(&[0, 0, 0, 7]);
            g.extend_from_slice(&f6[54..]);
            g
        };
        assert_eq!(classify(&frag6(1)), Err(FrameError::Fragment), "first fragment");
        assert_eq!(classify(&frag6(0)), Err(FrameError::Fragment), "atomic fragment");
        assert_eq!(classify(&frag6(0x100)).map(|c| c.kind), Ok(Kind::Other), "a later fragment");
    }

    #[test]
    fn unknown_ethertypes_and_length_frames_are_the_netdevs() {
        for ethertype in [0x88b5u16, 0x8100, 0x0060, 0x05dc] {
            let mut f = vec![0u8; 60];
            f[..6].copy_from_slice(&[0x02, 0xe1, 10, 0, 0, 2]);
            f[12..14].copy_from_slice(&ethertype.to_be_bytes());
            assert_eq!(classify(&f).map(|c| c.kind), Ok(Kind::Other), "{ethertype:#x}");
        }
        assert_eq!(classify(&[0; 14]).map(|c| c.kind), Ok(Kind::Other), "a bare header");
        assert_eq!(classify(&[0; 13]), Err(FrameError::Runt(13)));
    }

    /// Port 10.0.0.2 (v4()'s destination), MTU 1500.
    fn port() -> RxPort<'static> {
        RxPort { mac: v4().dst_mac, ip: Ipv4Addr::new(10, 0, 0, 2), gids: None, promisc: false, max_frame: 1514 }
    }

    fn sorted(f: &[u8], from_wire: bool) -> Verdict {
        sort(f, &port(), from_wire, &mut Packet::default()).verdict
    }

    fn frame_of(a: &RoceAddr) -> Vec<u8> {
        let mut f = Vec::new();
        encode_roce(a, &write(), &mut f);
        f
    }

    #[test]
    fn the_receive_path_sorts_every_case_with_its_counters() {
        let good = frame_of(&v4());
        let mut p = Packet::default();
        let s = sort(&good, &port(), true, &mut p);
        assert_eq!(s, Sorted { verdict: Verdict::Roce(Ipv4Addr::new(10, 0, 0, 1).into()), learn: Some(v4().src_mac) });
        assert_eq!((p.bth.psn, &p.reth, &p.payload), (77, &write().reth, &write().payload));
        let drop = |v: Verdict| match v {
            Verdict::Dropped(d) => d,
            v => panic!("not dropped: {v:?}"),
        };
        use Counter::*;
        // Runt and malformed: not learned from.
        let s = sort(&good[..13], &port(), true, &mut p);
        assert_eq!((drop(s.verdict).counters(), s.learn), (&[EthRxErrors][..], None));
        let mut frag = good.clone();
        frag[20] |= 0x20;
        fix_ipv4_sum(&mut frag);
        assert_eq!(drop(sorted(&frag, true)).counters(), &[EthRxErrors, PktsDropped]);
        // Longer than the MTU allows (9000 would take it).
        let mut big = write();
        big.payload = vec![1; 1500];
        let mut f = Vec::new();
        encode_roce(&v4(), &big, &mut f);
        assert_eq!(drop(sorted(&f, true)), Dropped::Oversized { len: f.len(), max: 1514 });
        assert_eq!(sort(&f, &RxPort { max_frame: 9014, ..port() }, true, &mut p).verdict, Verdict::Roce(Ipv4Addr::new(10, 0, 0, 1).into()));
        // Another MAC: filtered, unless promiscuous (then the netdev's, RoCE or not).
        let other = frame_of(&RoceAddr { dst_mac: [0x02, 0xe1, 10, 0, 0, 9], ..v4() });
        assert_eq!(drop(sorted(&other, true)).counters(), &[EthRxFiltered]);
        assert_eq!(sort(&other, &RxPort { promisc: true, ..port() }, true, &mut p).verdict, Verdict::Frame);
        // Group destinations, RoCE for another address, IPv6 RoCE: the netdev's.
        for a in [
            RoceAddr { dst_mac: BROADCAST, ..v4() },
            RoceAddr { dst_mac: [0x01, 0x00, 0x5e, 0, 0, 1], ..v4() },
            RoceAddr { dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)), ..v4() },
            RoceAddr { src_ip: IpAddr::V6("fd00::1".parse().unwrap()), dst_ip: IpAddr::V6("::ffff:10.0.0.2".parse().unwrap()), ..v4() },
        ] {
            assert_eq!(sorted(&frame_of(&a), true), Verdict::Frame, "{a:?}");
        }
        // An address the port has as a GID (a second address of the netdev): the engine's.
        let gids = crate::rnic::gid::GidTable::default();
        gids.set(2, Some(Ipv4Addr::new(10, 0, 0, 3).to_ipv6_mapped().octets()));
        let to_gid = frame_of(&RoceAddr { dst_ip: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)), ..v4() });
        assert_eq!(sort(&to_gid, &RxPort { gids: Some(&gids), ..port() }, true, &mut p).verdict, Verdict::Roce(Ipv4Addr::new(10, 0, 0, 1).into()));
        // A bad ICRC, an unknown opcode.
        let mut f = good.clone();
        *f.last_mut().unwrap() ^= 1;
        assert!(matches!(drop(sorted(&f, true)), Dropped::Packet(PacketError::Icrc { .. })));
        assert_eq!(drop(sorted(&f, true)).counters(), &[PktsDropped, IcrcErrors]);
        let unknown = Packet { bth: Bth { opcode: 0x66, ..write().bth }, ..write() };
        let mut f = Vec::new();
        encode_roce(&v4(), &unknown, &mut f);
        assert_eq!(drop(sorted(&f, true)), Dropped::Packet(PacketError::UnknownOpcode(0x66)));
        // ARP for us: the netdev's.
        let mut arp = good[..42].to_vec();
        arp[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
        assert_eq!(sorted(&arp, true), Verdict::Frame);
    }

    #[test]
    fn roce_from_an_impossible_source_is_dropped_and_counted() {
        let ip = |a, b, c, d| IpAddr::V4(Ipv4Addr::new(a, b, c, d));
        let own_mac = port().mac;
        let cases = [
            (RoceAddr { src_mac: BROADCAST, ..v4() }, "a group source MAC"),
            (RoceAddr { src_mac: [0x33, 0x33, 0, 0, 0, 1], ..v4() }, "a group source MAC"),
            (RoceAddr { src_mac: own_mac, ..v4() }, "the port's own MAC, from the segment"),
            (RoceAddr { src_ip: ip(224, 0, 0, 1), ..v4() }, "a multicast source address"),
            (RoceAddr { src_ip: ip(255, 255, 255, 255), ..v4() }, "the broadcast source address"),
            (RoceAddr { src_ip: ip(0, 0, 0, 0), ..v4() }, "an unspecified source address (0.0.0.0/8)"),
            (RoceAddr { src_ip: ip(0, 1, 2, 3), ..v4() }, "an unspecified source address (0.0.0.0/8)"),
            (RoceAddr { src_ip: ip(127, 0, 0, 1), ..v4() }, "a loopback source address"),
            (RoceAddr { src_ip: ip(10, 0, 0, 2), ..v4() }, "the port's own address, from the segment"),
            (RoceAddr { src_port: 0, ..v4() }, "UDP source port 0"),
        ];
        for (a, why) in cases {
            let d = match sorted(&frame_of(&a), true) {
                Verdict::Dropped(d) => d,
                v => panic!("{a:?}: {v:?}"),
            };
            assert_eq!(d, Dropped::BadSource(why));
            assert_eq!(d.counters(), &[Counter::RoceBadSource, Counter::PktsDropped], "its own counter, not a malformed frame's");
        }
        let s = sort(&frame_of(&RoceAddr { src_mac: BROADCAST, ..v4() }), &port(), true, &mut Packet::default());
        assert_eq!(s.learn, None, "a group source is not learned");
        // Turned around inside the port, its own MAC and address are its source.
        let own = RoceAddr { src_mac: own_mac, src_ip: ip(10, 0, 0, 2), ..v4() };
        assert_eq!(sorted(&frame_of(&own), false), Verdict::Roce(Ipv4Addr::new(10, 0, 0, 2).into()));
        assert_eq!(sort(&frame_of(&own), &port(), false, &mut Packet::default()).learn, None);
        // A node whose own address is loopback talks to loopback peers.
        let lo = RxPort { ip: Ipv4Addr::new(127, 0, 0, 12), ..port() };
        let a = RoceAddr { src_ip: ip(127, 0, 0, 11), dst_ip: ip(127, 0, 0, 12), ..v4() };
        assert_eq!(sort(&frame_of(&a), &lo, true, &mut Packet::default()).verdict, Verdict::Roce(Ipv4Addr::new(127, 0, 0, 11).into()));
    }

    #[test]
    fn ipv6_roce_to_an_ipv6_gid_of_the_port_is_the_engines_and_checked_for_its_source() {
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        let a = RoceAddr { src_ip: v6("fd00::1"), dst_ip: v6("fd00::2"), ..v4() };
        let gids = crate::rnic::gid::GidTable::default();
        let with_gid = RxPort { gids: Some(&gids), ..port() };
        let mut p = Packet::default();
        assert_eq!(sort(&frame_of(&a), &with_gid, true, &mut p).verdict, Verdict::Frame, "no such GID yet: the netdev's");
        gids.set(5, Some("fd00::2".parse::<Ipv6Addr>().unwrap().octets()));
        assert_eq!(sort(&frame_of(&a), &with_gid, true, &mut p).verdict, Verdict::Roce(v6("fd00::1")));
        assert_eq!((p.bth.psn, &p.payload), (77, &write().payload), "decoded, ICRC over the IPv6 headers");
        let other = RoceAddr { dst_ip: v6("fd00::3"), ..a };
        assert_eq!(sort(&frame_of(&other), &with_gid, true, &mut p).verdict, Verdict::Frame, "another IPv6 address");
        for (src, why) in [
            ("ff02::1", "a multicast source address"),
            ("::", "the unspecified source address (::)"),
            ("::1", "a loopback source address"),
            ("::ffff:10.0.0.1", "an IPv4-mapped source address in IPv6"),
            ("fd00::2", "the port's own address, from the segment"),
        ] {
            let bad = RoceAddr { src_ip: v6(src), ..a };
            let v = sort(&frame_of(&bad), &with_gid, true, &mut p).verdict;
            assert_eq!(v, Verdict::Dropped(Dropped::BadSource(why)), "{src}");
        }
        let own = RoceAddr { src_ip: v6("fd00::2"), src_mac: port().mac, ..a };
        assert_eq!(sort(&frame_of(&own), &with_gid, false, &mut p).verdict, Verdict::Roce(v6("fd00::2")), "turned around");
    }

    #[test]
    fn a_drop_counts_what_it_names() {
        let stats = Stats::default();
        Dropped::Packet(PacketError::Icrc { carried: 1, computed: 2 }).count(&stats);
        Dropped::Filtered.count(&stats);
        assert_eq!((stats.get(Counter::PktsDropped), stats.get(Counter::IcrcErrors), stats.get(Counter::EthRxFiltered)), (1, 1, 1));
        assert_eq!(stats.snapshot().iter().map(|(_, v)| v).sum::<u64>(), 3, "nothing else");
    }
}
