//! Transmit offloads of the Ethernet port (contract minor 9, `CAP_ETH_OFFLOAD`;
//! docs/programming.md "The Ethernet port"): the work a driver asks for in the first
//! descriptor of a frame, done on the gathered frame before it goes to the wire.
//!
//! - [`insert_csum`] (`TX_CSUM`): the 16-bit ones'-complement checksum of the frame from
//!   `csum_start` to its end, stored at `csum_start + csum_offset` (what Linux calls
//!   `CHECKSUM_PARTIAL`: the field holds the pseudo-header's sum and is summed with the rest).
//! - [`Tso::parse`] and [`Tso::segment`] (`TX_TSO`): one IPv4 or IPv6 TCP packet cut into
//!   segments of `mss` payload bytes, each a copy of the headers with the IPv4 total length,
//!   ID (+1 per segment) and header checksum, or the IPv6 payload length, the TCP sequence
//!   number and flags (FIN and PSH only on the last segment, CWR only on the first) and the
//!   TCP checksum (pseudo-header included) made right.
//! - [`rx_csum_ok`] (receive, `ETH_CTRL_RX_CSUM`): whether a received frame is an IPv4 or
//!   IPv6 TCP or UDP packet with right checksums, so the driver need not sum it again.
//!
//! Every offset and length comes from the guest: each is checked against the frame before
//! it is used, and a refusal says why (the caller counts it and drops the frame). No
//! options are parsed: IPv4 options and TCP options are copied as they are; IPv6 extension
//! headers, IP fragments, VLAN tags and anything but TCP are refused for TSO.

use crate::regs::rnic::eth::{HEADER_LEN, TSO_MAX_PAYLOAD};

/// Ethertypes the port segments.
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
/// IP protocol number of TCP.
const PROTO_TCP: u8 = 6;
/// Offset of the TCP checksum in its header.
pub const TCP_CSUM_OFFSET: usize = 16;
/// TCP flag bits in byte 13 of its header.
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;
/// Longest headers of a TSO frame: Ethernet, IPv4 with 40 bytes of options, TCP with 40.
pub const TSO_MAX_HEADERS: usize = HEADER_LEN as usize + 60 + 60;
/// Longest frame a TX_TSO request may carry.
pub const TSO_MAX_FRAME: usize = TSO_MAX_HEADERS + TSO_MAX_PAYLOAD as usize;

/// The ones'-complement sum of `data` as big-endian 16-bit words (an odd last byte is the
/// high half of a word), added to `sum`, not yet folded. Taken four bytes at a time: a
/// big-endian 32-bit word is two 16-bit words, and 2^16 = 1 modulo 0xffff, so folding
/// gives the same result as a sum of 16-bit words (the checksum of every frame the port
/// sends or checks goes through here).
pub fn sum16(sum: u64, data: &[u8]) -> u64 {
    let mut s = sum;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        s += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    let mut rest = words.remainder().chunks_exact(2);
    for w in &mut rest {
        s += u64::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [last] = rest.remainder() {
        s += u64::from(*last) << 8;
    }
    s
}

/// `sum` folded into 16 bits (end-around carry).
pub fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

fn be16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

fn put16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

/// TX_CSUM: stores the complement of the sum of `frame[start..]` at `start + offset`
/// (0 sent as 0xffff, as Linux does for UDP). Err: the offsets do not fit the frame.
pub fn insert_csum(frame: &mut [u8], start: usize, offset: usize) -> Result<(), String> {
    let at = start.checked_add(offset).filter(|&at| at.checked_add(2).is_some_and(|end| end <= frame.len()));
    let Some(at) = at else {
        return Err(format!("checksum at {start} + {offset} outside the frame of {} bytes", frame.len()));
    };
    let c = !fold(sum16(0, &frame[start..]));
    put16(frame, at, if c == 0 { 0xffff } else { c });
    Ok(())
}

/// The headers of a frame that TX_TSO may cut, checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tso {
    /// IPv6 (else IPv4).
    pub v6: bool,
    /// Offset of the TCP header (the IP header starts at HEADER_LEN).
    pub l4: usize,
    /// Length of all the headers: Ethernet, IP, TCP with its options.
    pub hdr_len: usize,
    /// TCP payload bytes per segment.
    pub mss: usize,
}

impl Tso {
    /// The headers of `frame` for segments of `mss` payload bytes in frames of at most
    /// `max_frame` bytes; `csum_start`/`csum_offset` must name the TCP checksum.
    pub fn parse(frame: &[u8], csum_start: usize, csum_offset: usize, mss: usize, max_frame: usize) -> Result<Tso, String> {
        let l3 = HEADER_LEN as usize;
        if frame.len() > TSO_MAX_FRAME {
            return Err(format!("TSO frame of {} bytes (at most {TSO_MAX_FRAME})", frame.len()));
        }
        if frame.len() < l3 + 40 {
            return Err(format!("TSO frame of {} bytes is too short for IP and TCP headers", frame.len()));
        }
        let (v6, l4) = match be16(frame, 12) {
            ETHERTYPE_IPV4 => {
                let ihl = usize::from(frame[l3] & 0x0f) * 4;
                if frame[l3] >> 4 != 4 || ihl < 20 {
                    return Err(format!("TSO frame: bad IPv4 version/IHL byte {:#04x}", frame[l3]));
                }
                if frame[l3 + 9] != PROTO_TCP {
                    return Err(format!("TSO frame: IPv4 protocol {} is not TCP", frame[l3 + 9]));
                }
                if be16(frame, l3 + 6) & 0x3fff != 0 {
                    return Err("TSO frame: an IPv4 fragment".into());
                }
                (false, l3 + ihl)
            }
            ETHERTYPE_IPV6 => {
                if frame[l3] >> 4 != 6 {
                    return Err(format!("TSO frame: IPv6 ethertype with IP version {}", frame[l3] >> 4));
                }
                if frame[l3 + 6] != PROTO_TCP {
                    return Err(format!("TSO frame: IPv6 next header {} is not TCP", frame[l3 + 6]));
                }
                (true, l3 + 40)
            }
            t => return Err(format!("TSO frame of ethertype {t:#06x} (IPv4 or IPv6 only)")),
        };
        if csum_start != l4 || csum_offset != TCP_CSUM_OFFSET {
            return Err(format!("TSO frame: csum_start {csum_start}/csum_offset {csum_offset} do not name the TCP checksum at {l4} + 16"));
        }
        if l4 + 20 > frame.len() {
            return Err(format!("TSO frame: TCP header at {l4} past the frame of {} bytes", frame.len()));
        }
        let doff = usize::from(frame[l4 + 12] >> 4) * 4;
        let hdr_len = l4 + doff;
        if doff < 20 || hdr_len >= frame.len() {
            return Err(format!("TSO frame: headers of {hdr_len} bytes (TCP data offset {doff}) leave no payload in {} bytes", frame.len()));
        }
        if mss == 0 || hdr_len + mss > max_frame {
            return Err(format!("TSO frame: mss {mss} with {hdr_len} bytes of headers outside 1..={}", max_frame.saturating_sub(hdr_len)));
        }
        if frame.len() - hdr_len > TSO_MAX_PAYLOAD as usize {
            return Err(format!("TSO frame: {} payload bytes (at most {TSO_MAX_PAYLOAD})", frame.len() - hdr_len));
        }
        Ok(Tso { v6, l4, hdr_len, mss })
    }

    /// How many segments `frame` (the one [`Tso::parse`] checked) becomes.
    pub fn segments(&self, frame: &[u8]) -> usize {
        (frame.len() - self.hdr_len).div_ceil(self.mss)
    }

    /// Builds each segment of `frame` in `seg` and hands it to `emit`, in order.
    pub fn segment(&self, frame: &[u8], seg: &mut Vec<u8>, mut emit: impl FnMut(&[u8])) {
        let (l3, l4, hdr) = (HEADER_LEN as usize, self.l4, self.hdr_len);
        let payload = &frame[hdr..];
        let n = self.segments(frame);
        let seq0 = u32::from_be_bytes([frame[l4 + 4], frame[l4 + 5], frame[l4 + 6], frame[l4 + 7]]);
        let id0 = be16(frame, l3 + 4);
        for (i, piece) in payload.chunks(self.mss).enumerate() {
            seg.clear();
            seg.extend_from_slice(&frame[..hdr]);
            seg.extend_from_slice(piece);
            let tcp_len = seg.len() - l4;
            let pseudo = if self.v6 {
                put16(seg, l3 + 4, tcp_len as u16);
                sum16(sum16(0, &seg[l3 + 8..l3 + 40]), &(tcp_len as u32).to_be_bytes()) + u64::from(PROTO_TCP)
            } else {
                put16(seg, l3 + 2, (tcp_len + (l4 - l3)) as u16);
                put16(seg, l3 + 4, id0.wrapping_add(i as u16));
                put16(seg, l3 + 10, 0);
                let ip = !fold(sum16(0, &seg[l3..l4]));
                put16(seg, l3 + 10, ip);
                sum16(0, &seg[l3 + 12..l3 + 20]) + u64::from(PROTO_TCP) + tcp_len as u64
            };
            let seq = seq0.wrapping_add((i * self.mss) as u32);
            seg[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
            if i + 1 < n {
                seg[l4 + 13] &= !(TCP_FIN | TCP_PSH);
            }
            if i > 0 {
                seg[l4 + 13] &= !TCP_CWR;
            }
            put16(seg, l4 + TCP_CSUM_OFFSET, 0);
            let c = !fold(sum16(pseudo, &seg[l4..]));
            put16(seg, l4 + TCP_CSUM_OFFSET, c);
            emit(seg);
        }
    }
}

/// Receive: whether `frame` is an unfragmented IPv4 (header checksum right) or IPv6 (no
/// extension headers) TCP or UDP packet whose checksum, pseudo-header included, is right.
/// False for anything else, a UDP packet without a checksum, or lengths that do not fit.
pub fn rx_csum_ok(frame: &[u8]) -> bool {
    const PROTO_UDP: u8 = 17;
    let l3 = HEADER_LEN as usize;
    if frame.len() < l3 + 40 {
        return false;
    }
    let (proto, l4, end, pseudo) = match be16(frame, 12) {
        ETHERTYPE_IPV4 => {
            let ihl = usize::from(frame[l3] & 0x0f) * 4;
            let end = l3 + usize::from(be16(frame, l3 + 2));
            if frame[l3] >> 4 != 4 || ihl < 20 || end > frame.len() || l3 + ihl > end || be16(frame, l3 + 6) & 0x3fff != 0 {
                return false;
            }
            if fold(sum16(0, &frame[l3..l3 + ihl])) != 0xffff {
                return false;
            }
            let proto = frame[l3 + 9];
            (proto, l3 + ihl, end, sum16(0, &frame[l3 + 12..l3 + 20]) + u64::from(proto) + (end - l3 - ihl) as u64)
        }
        ETHERTYPE_IPV6 => {
            let end = l3 + 40 + usize::from(be16(frame, l3 + 4));
            if frame[l3] >> 4 != 6 || end > frame.len() {
                return false;
            }
            let proto = frame[l3 + 6];
            (proto, l3 + 40, end, sum16(0, &frame[l3 + 8..l3 + 40]) + u64::from(proto) + (end - l3 - 40) as u64)
        }
        _ => return false,
    };
    let min = match proto {
        PROTO_TCP => 20,
        PROTO_UDP => 8,
        _ => return false,
    };
    if l4 + min > end || (proto == PROTO_UDP && be16(frame, l4 + 6) == 0) {
        return false;
    }
    fold(sum16(pseudo, &frame[l4..end])) == 0xffff
}
