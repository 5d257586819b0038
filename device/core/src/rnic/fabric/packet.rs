//! RoCEv2 packets (InfiniBand Architecture vol. 1 ch. 9 transport headers over UDP port
//! 4791, annex A17): BTH, RETH, AETH and immediate data, payload with pad, and the
//! invariant CRC. Encoding and decoding of the UDP payload: the frames around it, and the
//! ICRC over their headers as sent and received, are [`super::frame`]'s; the
//! [`Endpoints`] form (the ICRC over the IPv4/UDP headers the device would build for two
//! addresses) serves tests and fuzzing. Decoding trusts nothing: length, opcode, header
//! presence, pad and ICRC are checked.
//!
//! Only the Reliable Connection opcodes the engine uses are known (atomics with their
//! AtomicETH and AtomicAckETH from contract minor 12), and from contract minor 13 the
//! Unreliable Connection SEND and WRITE opcodes (the RC ones with [`op::UC`] set, the same
//! headers), from minor 16 the Unreliable Datagram SEND ONLY opcodes with their DETH
//! (Q_Key and source QP); anything else is an error (`UnknownOpcode`). A decoded UD packet
//! keeps the GRH area it came with ([`Grh`]: what a UD receive places before the payload).

use std::net::Ipv4Addr;
use thiserror::Error;

pub const ROCE_UDP_PORT: u16 = 4791;
pub const BTH_LEN: usize = 12;
pub const RETH_LEN: usize = 16;
pub const AETH_LEN: usize = 4;
pub const IMM_LEN: usize = 4;
pub const ICRC_LEN: usize = 4;
/// AtomicETH (IBA 9.3.4): VA, R_Key, swap (or add) data, compare data.
pub const ATOMIC_ETH_LEN: usize = 28;
/// AtomicAckETH (IBA 9.3.6): the original data at the target.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// FLUSH extended transport header (IBTA 1.5): selectivity level and placement type.
pub const FETH_LEN: usize = 4;
/// Datagram extended transport header (IBA 9.3.2): Q_Key, source QP.
pub const DETH_LEN: usize = 8;
/// The GRH area of a UD receive buffer (IBA 11.4.1.1; RoCEv2: annex A17.4.5.1).
pub const GRH_LEN: usize = 40;
/// PSNs are 24-bit.
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// RC opcodes (IBA table 38), and the UC prefix.
pub mod op {
    pub const SEND_FIRST: u8 = 0x00;
    pub const SEND_MIDDLE: u8 = 0x01;
    pub const SEND_LAST: u8 = 0x02;
    pub const SEND_LAST_IMM: u8 = 0x03;
    pub const SEND_ONLY: u8 = 0x04;
    pub const SEND_ONLY_IMM: u8 = 0x05;
    pub const WRITE_FIRST: u8 = 0x06;
    pub const WRITE_MIDDLE: u8 = 0x07;
    pub const WRITE_LAST: u8 = 0x08;
    pub const WRITE_LAST_IMM: u8 = 0x09;
    pub const WRITE_ONLY: u8 = 0x0a;
    pub const WRITE_ONLY_IMM: u8 = 0x0b;
    pub const READ_REQUEST: u8 = 0x0c;
    pub const READ_RESPONSE_FIRST: u8 = 0x0d;
    pub const READ_RESPONSE_MIDDLE: u8 = 0x0e;
    pub const READ_RESPONSE_LAST: u8 = 0x0f;
    pub const READ_RESPONSE_ONLY: u8 = 0x10;
    pub const ACK: u8 = 0x11;
    pub const ATOMIC_ACK: u8 = 0x12;
    pub const COMPARE_SWAP: u8 = 0x13;
    pub const FETCH_ADD: u8 = 0x14;
    /// IBTA 1.5 (contract minor 14): FETH and RETH, no payload.
    pub const FLUSH: u8 = 0x1c;
    /// IBTA 1.5 (contract minor 14): RETH and the 8 bytes to write.
    pub const ATOMIC_WRITE: u8 = 0x1d;
    /// The Unreliable Connection opcodes (IBA table 38, 001xxxxx): SEND_FIRST ..=
    /// WRITE_ONLY_IMM with this bit set.
    pub const UC: u8 = 0x20;
    /// The Unreliable Datagram opcodes (IBA table 38, 011xxxxx; contract minor 16): SEND
    /// ONLY and SEND ONLY with immediate, with a DETH.
    pub const UD_SEND_ONLY: u8 = 0x64;
    pub const UD_SEND_ONLY_IMM: u8 = 0x65;

    /// Whether `opcode` is a UC one, and its RC counterpart (the same headers and place).
    pub fn uc_base(opcode: u8) -> Option<u8> {
        (opcode & 0xe0 == UC && opcode & 0x1f <= WRITE_ONLY_IMM).then_some(opcode & 0x1f)
    }

    /// Whether `opcode` is a UD one, and the RC SEND ONLY opcode of its place.
    pub fn ud_base(opcode: u8) -> Option<u8> {
        matches!(opcode, UD_SEND_ONLY | UD_SEND_ONLY_IMM).then(|| opcode - UD_SEND_ONLY + SEND_ONLY)
    }
}

/// Which extension headers and payload an opcode carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub reth: bool,
    pub aeth: bool,
    pub imm: bool,
    pub payload: bool,
    /// AtomicETH (atomic requests).
    pub atomic: bool,
    /// AtomicAckETH (ATOMIC ACKNOWLEDGE).
    pub atomic_ack: bool,
    /// FETH (FLUSH), before the RETH.
    pub feth: bool,
    /// DETH (UD), right after the BTH.
    pub deth: bool,
}

pub fn layout(opcode: u8) -> Option<Layout> {
    use op::*;
    let l = |reth, aeth, imm, payload| Some(Layout { reth, aeth, imm, payload, atomic: false, atomic_ack: false, feth: false, deth: false });
    let none = Layout { reth: false, aeth: false, imm: false, payload: false, atomic: false, atomic_ack: false, feth: false, deth: false };
    if let Some(base) = ud_base(opcode) {
        return layout(base).map(|l| Layout { deth: true, ..l });
    }
    match uc_base(opcode).unwrap_or(opcode) {
        SEND_FIRST | SEND_MIDDLE | SEND_LAST | SEND_ONLY | WRITE_MIDDLE | WRITE_LAST => l(false, false, false, true),
        SEND_LAST_IMM | SEND_ONLY_IMM | WRITE_LAST_IMM => l(false, false, true, true),
        WRITE_FIRST | WRITE_ONLY => l(true, false, false, true),
        WRITE_ONLY_IMM => l(true, false, true, true),
        READ_REQUEST => l(true, false, false, false),
        READ_RESPONSE_FIRST | READ_RESPONSE_LAST | READ_RESPONSE_ONLY => l(false, true, false, true),
        READ_RESPONSE_MIDDLE => l(false, false, false, true),
        ACK => l(false, true, false, false),
        COMPARE_SWAP | FETCH_ADD => Some(Layout { atomic: true, ..none }),
        ATOMIC_ACK => Some(Layout { aeth: true, atomic_ack: true, ..none }),
        FLUSH => Some(Layout { feth: true, reth: true, ..none }),
        ATOMIC_WRITE => l(true, false, false, true),
        _ => None,
    }
}

/// Base transport header (IBA 9.2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bth {
    pub opcode: u8,
    pub solicited: bool,
    pub pad: u8,
    pub pkey: u16,
    pub dest_qp: u32,
    pub ack_req: bool,
    pub psn: u32,
}

/// RDMA extended transport header (IBA 9.3.3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reth {
    pub va: u64,
    pub rkey: u32,
    pub len: u32,
}

/// Atomic extended transport header (IBA 9.3.4): the 8 bytes at `va` under `rkey`;
/// COMPARE_SWAP writes `swap_add` if they equal `compare`, FETCH_ADD adds `swap_add`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AtomicEth {
    pub va: u64,
    pub rkey: u32,
    pub swap_add: u64,
    pub compare: u64,
}

/// Datagram extended transport header (IBA 9.3.2): the Q_Key the receiving QP must have,
/// and the sending QP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deth {
    pub qkey: u32,
    pub src_qp: u32,
}

/// The 40-byte GRH area of a received UD packet as its receive buffer gets it: over IPv4
/// 20 bytes of 0 and the IPv4 header, over IPv6 the IPv6 header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grh(pub [u8; GRH_LEN]);

impl Default for Grh {
    fn default() -> Self {
        Grh([0; GRH_LEN])
    }
}

impl Grh {
    /// Whether the packet came over IPv6.
    pub fn is_ipv6(&self) -> bool {
        self.0[0] >> 4 == 6
    }
}

/// ACK extended transport header (IBA 9.3.5): syndrome and message sequence number.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Aeth {
    pub syndrome: u8,
    pub msn: u32,
}

/// AETH syndromes (IBA 9.7.5.2.2 table 42).
pub mod syndrome {
    /// ACK; low 5 bits: credit count (0x1f: invalid/unlimited).
    pub const ACK: u8 = 0x1f;
    /// RNR NAK; low 5 bits: the RNR timer code.
    pub const RNR_NAK: u8 = 0x20;
    pub const NAK_SEQ_ERR: u8 = 0x60;
    pub const NAK_INV_REQ: u8 = 0x61;
    pub const NAK_REM_ACCESS: u8 = 0x62;
    pub const NAK_REM_OP: u8 = 0x63;
    pub const KIND_MASK: u8 = 0xe0;
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    pub bth: Bth,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub imm: Option<u32>,
    pub atomic: Option<AtomicEth>,
    /// An ATOMIC ACKNOWLEDGE's original data.
    pub atomic_ack: Option<u64>,
    /// A FLUSH's FETH (the 32-bit word as on the wire: level in bits [5:4], type in [3:0]).
    pub feth: Option<u32>,
    /// A UD packet's DETH (minor 16).
    pub deth: Option<Deth>,
    /// Received UD packets: the GRH area of the IP header they came with (not encoded;
    /// zeroes for other packets).
    pub grh: Grh,
    pub payload: Vec<u8>,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum PacketError {
    #[error("{0} bytes: shorter than the headers its opcode needs")]
    Short(usize),
    #[error("unknown or unsupported opcode {0:#04x}")]
    UnknownOpcode(u8),
    #[error("transport header version {0} is not 0")]
    Version(u8),
    #[error("pad count {pad} exceeds the {len}-byte payload, pads a packet without payload, or leaves it off a 4-byte boundary")]
    Pad { pad: u8, len: usize },
    #[error("ICRC mismatch: carried {carried:#010x}, computed {computed:#010x}")]
    Icrc { carried: u32, computed: u32 },
}

/// The addresses a packet travels between (for the ICRC and pcap headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoints {
    pub src: Ipv4Addr,
    pub dst: Ipv4Addr,
    pub src_port: u16,
}

/// A synthesized IPv4 header for a UDP datagram of `udp_len` bytes (ID 0, DF, TTL 64).
pub fn ipv4_header(ep: &Endpoints, udp_len: usize) -> [u8; 20] {
    let mut h = [0u8; 20];
    h[0] = 0x45;
    h[2..4].copy_from_slice(&((20 + udp_len) as u16).to_be_bytes());
    h[6] = 0x40; // don't fragment
    h[8] = 64;
    h[9] = 17;
    h[12..16].copy_from_slice(&ep.src.octets());
    h[16..20].copy_from_slice(&ep.dst.octets());
    let mut sum: u32 = h.chunks_exact(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    h
}

/// The UDP header of a RoCEv2 datagram (checksum 0: not used over IPv4).
pub fn udp_header(ep: &Endpoints, udp_payload_len: usize) -> [u8; 8] {
    let mut h = [0u8; 8];
    h[0..2].copy_from_slice(&ep.src_port.to_be_bytes());
    h[2..4].copy_from_slice(&ROCE_UDP_PORT.to_be_bytes());
    h[4..6].copy_from_slice(&((8 + udp_payload_len) as u16).to_be_bytes());
    h
}

/// The invariant CRC of a RoCEv2 packet over IPv4 (annex A17.3.3): CRC-32 over 8 bytes of
/// ones, the IPv4 header with TOS, TTL and checksum set to ones, the UDP header with its
/// checksum set to ones, the BTH with its reserved byte (FECN/BECN/resv) set to ones, and
/// the rest of the packet up to the ICRC. `body` is the UDP payload without the ICRC.
pub fn icrc(ep: &Endpoints, body: &[u8]) -> u32 {
    let mut hdrs = [0u8; 28];
    hdrs[..20].copy_from_slice(&ipv4_header(ep, 8 + body.len() + ICRC_LEN));
    hdrs[20..].copy_from_slice(&udp_header(ep, body.len() + ICRC_LEN));
    icrc_over(&hdrs, body)
}

/// The invariant CRC over the IP and UDP headers at `hdrs` (as in the frame) and the
/// RoCE packet `body` (BTH up to the ICRC): CRC-32 over 8 bytes of ones (the masked LRH
/// of annex A17.3.3), the IP header with IPv4 TOS, TTL and checksum or IPv6 traffic class,
/// flow label and hop limit set to ones, the UDP header with its checksum set to ones, the
/// BTH with its reserved byte (FECN, BECN, resv6) set to ones, and the rest.
pub fn icrc_over(hdrs: &[u8], body: &[u8]) -> u32 {
    let mut h = [0u8; 40 + 8];
    let n = hdrs.len().min(h.len());
    h[..n].copy_from_slice(&hdrs[..n]);
    let ip_len = if h[0] >> 4 == 6 {
        h[0] |= 0x0f;
        h[1] = 0xff;
        h[2] = 0xff;
        h[3] = 0xff;
        h[7] = 0xff;
        40
    } else {
        h[1] = 0xff;
        h[8] = 0xff;
        h[10] = 0xff;
        h[11] = 0xff;
        usize::from(h[0] & 0x0f) * 4
    };
    if n >= ip_len + 8 {
        h[ip_len + 6] = 0xff;
        h[ip_len + 7] = 0xff;
    }
    // CRC-32 (ISO-HDLC) with hardware carry-less multiply where the CPU has it: the ICRC
    // covers every payload byte of every packet, both ways.
    let mut digest = crc32fast::Hasher::new();
    digest.update(&[0xff; 8]);
    digest.update(&h[..n]);
    if hdrs.len() > n {
        digest.update(&hdrs[n..]); // IPv4 options: covered as they are
    }
    if body.len() >= BTH_LEN {
        let mut bth = [0u8; BTH_LEN];
        bth.copy_from_slice(&body[..BTH_LEN]);
        bth[4] = 0xff;
        digest.update(&bth);
        digest.update(&body[BTH_LEN..]);
    } else {
        digest.update(body);
    }
    digest.finalize()
}

impl Packet {
    /// The UDP payload: headers, payload, pad to 4 bytes, ICRC (little-endian).
    pub fn encode(&self, ep: &Endpoints) -> Vec<u8> {
        let mut b = Vec::with_capacity(BTH_LEN + RETH_LEN + 8 + self.payload.len() + 3 + ICRC_LEN);
        self.encode_into(ep, &mut b);
        b
    }

    /// Like [`Packet::encode`], into a caller's buffer (cleared first; its capacity is
    /// reused, so a pooled buffer costs no allocation).
    pub fn encode_into(&self, ep: &Endpoints, b: &mut Vec<u8>) {
        b.clear();
        self.encode_body_into(b);
        let crc = icrc(ep, b);
        b.extend_from_slice(&crc.to_le_bytes());
    }

    /// Appends the packet without its ICRC (headers, payload, pad) to `b`; the caller
    /// computes the ICRC over the headers it sends ([`super::frame::encode_roce`]).
    pub fn encode_body_into(&self, b: &mut Vec<u8>) {
        let pad = (4 - self.payload.len() % 4) % 4;
        let h = &self.bth;
        b.push(h.opcode);
        b.push(u8::from(h.solicited) << 7 | (pad as u8) << 4); // MigReq 0, TVer 0
        b.extend_from_slice(&h.pkey.to_be_bytes());
        b.extend_from_slice(&(h.dest_qp & PSN_MASK).to_be_bytes()); // resv8 = 0
        b.extend_from_slice(&((u32::from(h.ack_req) << 31) | (h.psn & PSN_MASK)).to_be_bytes());
        if let Some(d) = &self.deth {
            b.extend_from_slice(&d.qkey.to_be_bytes());
            b.extend_from_slice(&(d.src_qp & PSN_MASK).to_be_bytes()); // reserved byte 0
        }
        if let Some(f) = self.feth {
            b.extend_from_slice(&f.to_be_bytes());
        }
        if let Some(r) = &self.reth {
            b.extend_from_slice(&r.va.to_be_bytes());
            b.extend_from_slice(&r.rkey.to_be_bytes());
            b.extend_from_slice(&r.len.to_be_bytes());
        }
        if let Some(a) = &self.atomic {
            b.extend_from_slice(&a.va.to_be_bytes());
            b.extend_from_slice(&a.rkey.to_be_bytes());
            b.extend_from_slice(&a.swap_add.to_be_bytes());
            b.extend_from_slice(&a.compare.to_be_bytes());
        }
        if let Some(a) = &self.aeth {
            b.extend_from_slice(&(u32::from(a.syndrome) << 24 | (a.msn & PSN_MASK)).to_be_bytes());
        }
        if let Some(v) = self.atomic_ack {
            b.extend_from_slice(&v.to_be_bytes());
        }
        if let Some(imm) = self.imm {
            b.extend_from_slice(&imm.to_be_bytes());
        }
        b.extend_from_slice(&self.payload);
        b.resize(b.len() + pad, 0);
    }

    /// Parses and checks a received UDP payload.
    pub fn decode(data: &[u8], ep: &Endpoints) -> Result<Packet, PacketError> {
        let mut pkt = Packet::default();
        pkt.decode_into(data, ep)?;
        Ok(pkt)
    }

    /// Like [`Packet::decode`], into this packet (its payload buffer is reused, so a
    /// receive loop decodes without allocating). On error the packet's contents are
    /// unspecified.
    pub fn decode_into(&mut self, data: &[u8], ep: &Endpoints) -> Result<(), PacketError> {
        self.decode_checked_into(data, |body| icrc(ep, body))?;
        if self.deth.is_some() {
            self.grh.0[20..].copy_from_slice(&ipv4_header(ep, 8 + data.len()));
        }
        Ok(())
    }

    /// Like [`Packet::decode_into`], with the ICRC of the packet's body (without the ICRC)
    /// computed by `icrc` (over the headers the packet arrived with:
    /// [`super::frame::decode_roce`]).
    pub fn decode_checked_into(&mut self, data: &[u8], icrc: impl FnOnce(&[u8]) -> u32) -> Result<(), PacketError> {
        let short = PacketError::Short(data.len());
        if data.len() < BTH_LEN + ICRC_LEN {
            return Err(short);
        }
        let (body, crc_bytes) = data.split_at(data.len() - ICRC_LEN);
        let opcode = body[0];
        let l = layout(opcode).ok_or(PacketError::UnknownOpcode(opcode))?;
        let tver = body[1] & 0x0f;
        if tver != 0 {
            return Err(PacketError::Version(tver));
        }
        let be32 = |at: usize| u32::from_be_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
        let bth = Bth {
            opcode,
            solicited: body[1] & 0x80 != 0,
            pad: (body[1] >> 4) & 3,
            pkey: u16::from_be_bytes([body[2], body[3]]),
            dest_qp: be32(4) & PSN_MASK,
            ack_req: body[8] & 0x80 != 0,
            psn: be32(8) & PSN_MASK,
        };
        let need = BTH_LEN
            + if l.reth { RETH_LEN } else { 0 }
            + if l.aeth { AETH_LEN } else { 0 }
            + if l.imm { IMM_LEN } else { 0 }
            + if l.atomic { ATOMIC_ETH_LEN } else { 0 }
            + if l.atomic_ack { ATOMIC_ACK_ETH_LEN } else { 0 }
            + if l.feth { FETH_LEN } else { 0 }
            + if l.deth { DETH_LEN } else { 0 };
        if body.len() < need {
            return Err(short);
        }
        let carried = u32::from_le_bytes([crc_bytes[0], crc_bytes[1], crc_bytes[2], crc_bytes[3]]);
        let computed = icrc(body);
        if carried != computed {
            return Err(PacketError::Icrc { carried, computed });
        }
        let mut at = BTH_LEN;
        self.bth = bth;
        self.reth = None;
        self.aeth = None;
        self.imm = None;
        self.atomic = None;
        self.atomic_ack = None;
        self.feth = None;
        self.deth = None;
        self.grh = Grh::default();
        let be64 = |at: usize| body.get(at..at + 8).and_then(|b| b.try_into().ok()).map(u64::from_be_bytes).ok_or(PacketError::Short(data.len()));
        if l.deth {
            self.deth = Some(Deth { qkey: be32(at), src_qp: be32(at + 4) & PSN_MASK });
            at += DETH_LEN;
        }
        if l.feth {
            self.feth = Some(be32(at));
            at += FETH_LEN;
        }
        if l.reth {
            let va = u64::from_be_bytes(body[at..at + 8].try_into().map_err(|_| PacketError::Short(data.len()))?);
            self.reth = Some(Reth { va, rkey: be32(at + 8), len: be32(at + 12) });
            at += RETH_LEN;
        }
        if l.atomic {
            self.atomic = Some(AtomicEth { va: be64(at)?, rkey: be32(at + 8), swap_add: be64(at + 12)?, compare: be64(at + 20)? });
            at += ATOMIC_ETH_LEN;
        }
        if l.aeth {
            let v = be32(at);
            self.aeth = Some(Aeth { syndrome: (v >> 24) as u8, msn: v & PSN_MASK });
            at += AETH_LEN;
        }
        if l.atomic_ack {
            self.atomic_ack = Some(be64(at)?);
            at += ATOMIC_ACK_ETH_LEN;
        }
        if l.imm {
            self.imm = Some(be32(at));
            at += IMM_LEN;
        }
        let rest = &body[at..];
        let pad = usize::from(bth.pad);
        // Headers are whole 4-byte words, so payload plus pad must be one too (IBA 9.3,
        // "Pad Count"): a packet whose length is not is malformed.
        if pad > rest.len() || (!l.payload && !rest.is_empty()) || rest.len() % 4 != 0 {
            return Err(PacketError::Pad { pad: bth.pad, len: rest.len() });
        }
        self.payload.clear();
        self.payload.extend_from_slice(&rest[..rest.len() - pad]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep() -> Endpoints {
        Endpoints { src: Ipv4Addr::new(127, 0, 0, 10), dst: Ipv4Addr::new(127, 0, 0, 11), src_port: 49152 }
    }

    fn write_first() -> Packet {
        Packet {
            bth: Bth { opcode: op::WRITE_FIRST, pkey: 0xffff, dest_qp: 0x12, psn: 0x00ab_cdef, ack_req: false, ..Default::default() },
            reth: Some(Reth { va: 0x7f00_0000_1000, rkey: 0x0102, len: 9000 }),
            payload: (0..4095u32).map(|i| i as u8).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn round_trip_with_pad_and_every_header() {
        let p = write_first();
        let wire = p.encode(&ep());
        assert_eq!(wire.len(), 12 + 16 + 4096 + 4, "payload padded to 4 bytes");
        assert_eq!(wire[1] >> 4 & 3, 1, "pad count");
        let mut expect = p.clone();
        expect.bth.pad = 1;
        assert!(Packet::decode(&wire, &ep()) == Ok(expect));
        let ack = Packet {
            bth: Bth { opcode: op::ACK, dest_qp: 7, psn: 5, ..Default::default() },
            aeth: Some(Aeth { syndrome: syndrome::ACK, msn: 3 }),
            ..Default::default()
        };
        assert_eq!(Packet::decode(&ack.encode(&ep()), &ep()), Ok(ack));
        let imm = Packet {
            bth: Bth { opcode: op::SEND_ONLY_IMM, solicited: true, psn: PSN_MASK, pad: 1, ..Default::default() },
            imm: Some(0xdead_beef),
            payload: vec![1, 2, 3],
            ..Default::default()
        };
        assert_eq!(Packet::decode(&imm.encode(&ep()), &ep()), Ok(imm));
    }

    #[test]
    fn into_variants_reuse_buffers_and_match() {
        let e = ep();
        let p = write_first();
        let mut buf = vec![0xee; 3];
        p.encode_into(&e, &mut buf);
        assert_eq!(buf, p.encode(&e), "encode_into clears the buffer first");
        let ack =
            Packet { bth: Bth { opcode: op::ACK, psn: 9, ..Default::default() }, aeth: Some(Aeth { syndrome: syndrome::ACK, msn: 1 }), ..Default::default() };
        let mut reused = Packet::decode(&buf, &e).unwrap();
        let cap = reused.payload.capacity();
        reused.decode_into(&ack.encode(&e), &e).unwrap();
        assert_eq!(reused, ack, "every header of the earlier packet is cleared");
        assert_eq!(reused.payload.capacity(), cap, "the payload buffer is kept");
        reused.decode_into(&buf, &e).unwrap();
        assert_eq!(reused, Packet::decode(&buf, &e).unwrap());
    }

    #[test]
    fn flush_and_atomic_write_round_trip_with_feth_before_reth() {
        let reth = Reth { va: 0x1122_3344_5566_7788, rkey: 0xaabb_ccdd, len: 8 };
        let flush = Packet {
            bth: Bth { opcode: op::FLUSH, pkey: 0xffff, dest_qp: 3, psn: 7, ack_req: true, ..Default::default() },
            feth: Some(0x11),
            reth: Some(reth),
            ..Default::default()
        };
        let wire = flush.encode(&ep());
        assert_eq!(wire.len(), BTH_LEN + FETH_LEN + RETH_LEN + ICRC_LEN);
        assert_eq!(&wire[12..16], &0x11u32.to_be_bytes(), "FETH right after the BTH");
        assert_eq!(&wire[16..24], &reth.va.to_be_bytes(), "then the RETH");
        assert_eq!(Packet::decode(&wire, &ep()).unwrap(), flush);
        let with_payload = Packet { payload: vec![0; 4], ..flush.clone() }.encode(&ep());
        assert!(matches!(Packet::decode(&with_payload, &ep()), Err(PacketError::Pad { .. })), "a FLUSH carries no payload");
        let aw = Packet { bth: Bth { opcode: op::ATOMIC_WRITE, ..flush.bth }, reth: Some(reth), payload: vec![1, 2, 3, 4, 5, 6, 7, 8], ..Default::default() };
        let wire = aw.encode(&ep());
        assert_eq!(wire.len(), BTH_LEN + RETH_LEN + 8 + ICRC_LEN);
        assert_eq!(&wire[28..36], &[1, 2, 3, 4, 5, 6, 7, 8], "the 8 bytes after the RETH");
        assert_eq!(Packet::decode(&wire, &ep()).unwrap(), aw);
    }

    #[test]
    fn atomics_round_trip_with_their_headers_in_iba_order() {
        let cas = Packet {
            bth: Bth { opcode: op::COMPARE_SWAP, pkey: 0xffff, dest_qp: 3, psn: 7, ack_req: true, ..Default::default() },
            atomic: Some(AtomicEth { va: 0x1122_3344_5566_7788, rkey: 0xaabb_ccdd, swap_add: 0x0102_0304_0506_0708, compare: 9 }),
            ..Default::default()
        };
        let wire = cas.encode(&ep());
        assert_eq!(wire.len(), BTH_LEN + ATOMIC_ETH_LEN + ICRC_LEN);
        assert_eq!(&wire[12..20], &0x1122_3344_5566_7788u64.to_be_bytes(), "AtomicETH: VA, R_Key, swap, compare");
        assert_eq!(&wire[20..24], &0xaabb_ccddu32.to_be_bytes());
        assert_eq!(&wire[24..32], &0x0102_0304_0506_0708u64.to_be_bytes());
        assert_eq!(Packet::decode(&wire, &ep()), Ok(cas.clone()));
        let ack = Packet {
            bth: Bth { opcode: op::ATOMIC_ACK, dest_qp: 4, psn: 7, ..Default::default() },
            aeth: Some(Aeth { syndrome: syndrome::ACK, msn: 2 }),
            atomic_ack: Some(u64::MAX - 1),
            ..Default::default()
        };
        let wire = ack.encode(&ep());
        assert_eq!(wire.len(), BTH_LEN + AETH_LEN + ATOMIC_ACK_ETH_LEN + ICRC_LEN);
        assert_eq!(&wire[16..24], &(u64::MAX - 1).to_be_bytes(), "AtomicAckETH after the AETH");
        assert_eq!(Packet::decode(&wire, &ep()), Ok(ack));
        // Cut short of its AtomicETH: refused.
        let mut short = cas.encode(&ep());
        short.drain(20..28);
        assert!(matches!(Packet::decode(&short, &ep()), Err(PacketError::Short(_))));
    }

    #[test]
    fn header_bytes_follow_iba() {
        let wire = write_first().encode(&ep());
        assert_eq!(&wire[..12], &[0x06, 0x10, 0xff, 0xff, 0, 0, 0, 0x12, 0, 0xab, 0xcd, 0xef]);
        assert_eq!(&wire[12..20], &0x7f00_0000_1000u64.to_be_bytes(), "RETH VA big-endian");
    }

    #[test]
    fn icrc_covers_headers_and_masks_variant_fields() {
        let p = write_first();
        let wire = p.encode(&ep());
        // FECN/BECN (BTH byte 4) are variant: flipping them keeps the ICRC valid.
        let mut fecn = wire.clone();
        fecn[4] = 0xc0;
        assert!(Packet::decode(&fecn, &ep()).is_ok());
        // Anything invariant breaks it: a payload bit, the PSN, or the addresses.
        let mut bad = wire.clone();
        bad[200] ^= 1;
        assert!(matches!(Packet::decode(&bad, &ep()), Err(PacketError::Icrc { .. })));
        let mut bad = wire.clone();
        bad[11] ^= 1;
        assert!(matches!(Packet::decode(&bad, &ep()), Err(PacketError::Icrc { .. })));
        let other = Endpoints { src_port: 49153, ..ep() };
        assert!(matches!(Packet::decode(&wire, &other), Err(PacketError::Icrc { .. })));
    }

    #[test]
    fn hostile_packets_are_rejected() {
        let e = ep();
        assert_eq!(Packet::decode(&[], &e), Err(PacketError::Short(0)));
        assert_eq!(Packet::decode(&[0u8; 15], &e), Err(PacketError::Short(15)));
        let mut unknown = vec![0x66u8; 16]; // a UD opcode the device does not speak (UD SEND ONLY is 0x64)
        unknown[1] = 0;
        assert_eq!(Packet::decode(&unknown, &e), Err(PacketError::UnknownOpcode(0x66)));
        // READ REQUEST truncated inside its RETH.
        let rr = Packet { bth: Bth { opcode: op::READ_REQUEST, ..Default::default() }, reth: Some(Reth::default()), ..Default::default() };
        let wire = rr.encode(&e);
        let mut cut = wire[..20].to_vec();
        cut.extend_from_slice(&icrc(&e, &wire[..16]).to_le_bytes());
        assert!(matches!(Packet::decode(&cut, &e), Err(PacketError::Short(_))));
        // A pad count larger than the payload, with a valid ICRC.
        let mut body = Packet { bth: Bth { opcode: op::SEND_ONLY, ..Default::default() }, payload: vec![9; 4], ..Default::default() }.encode(&e);
        body.truncate(body.len() - 4 - 4);
        body[1] |= 3 << 4;
        let crc = icrc(&e, &body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert!(matches!(Packet::decode(&body, &e), Err(PacketError::Pad { .. })));
        // Payload and pad that end off a 4-byte boundary (5 bytes, pad count 0), with a
        // valid ICRC: rxe and every IBA sender pad to whole words.
        let mut odd = Packet { bth: Bth { opcode: op::SEND_ONLY, ..Default::default() }, payload: vec![9; 8], ..Default::default() }.encode(&e);
        odd.truncate(odd.len() - 4 - 3);
        let crc = icrc(&e, &odd);
        odd.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(Packet::decode(&odd, &e), Err(PacketError::Pad { pad: 0, len: 5 }));
    }

    #[test]
    fn ipv4_header_checksum_verifies() {
        let h = ipv4_header(&ep(), 100);
        let mut sum: u32 = h.chunks_exact(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }
}
