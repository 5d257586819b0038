//! How the requester, responder and completer reach their peer QP (as rxe's `rxe_net.c`
//! with its loopback path): a [`Transport`] takes one message (a request, an ACK/NAK or a
//! READ response) and carries it. Two implementations:
//!
//! - [`Loopback`]: the peer QP is on the same engine. The message goes into a queue the
//!   engine drains in the same pass; the MTU is the whole message and the payload travels
//!   as segment descriptors of the source memory, so a local WRITE, SEND or READ is still
//!   one memory-to-memory copy (done by whoever places the data). Nothing is ever lost,
//!   but PSNs and ACKs run exactly as on the wire.
//! - [`Fabric`]: RoCEv2 packets through the node's [`Wire`], at most the path MTU each;
//!   the payload is gathered from guest memory into one scratch packet the engine reuses
//!   (no allocation per packet once its buffer has grown).
//!
//! The roles never know which one carries them. A fabric peer is an IPv4 or (contract minor
//! 9) an IPv6 address ([`Dest`]). A UD message (minor 16) carries its DETH, and the GRH
//! area its receiver places: the received packet's, or on loopback the one its frame would
//! have had. Not modelled: VLANs.

use super::mr::Segment;
use crate::contract::counters::{Counter, Stats};
use crate::platform::mem::access::{self as copy, GuestMem};
use crate::platform::mem::dma::DmaError;
use crate::rnic::fabric::frame::{mac_of_ipv4, Mac, DEFAULT_TTL};
use crate::rnic::fabric::packet::{op, syndrome, Aeth, AtomicEth, Bth, Deth, Grh, Packet, Reth, PSN_MASK};
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};

/// Where a connected QP's packets go on the wire: the QP context's path (the address
/// vector the driver resolved: destination IP and next-hop MAC, traffic class, hop limit).
/// `ip` and `src` are of one family: an IPv6 destination always has its source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    pub ip: IpAddr,
    /// The source address (a GID of the port); None: the port's own (RNIC_REG_IPV4).
    pub src: Option<IpAddr>,
    pub mac: Mac,
    pub tclass: u8,
    pub ttl: u8,
}

impl Dest {
    /// A peer on this segment by address alone: the MAC an rnic-emu port has for `ip`
    /// (the convention of contexts whose dest_mac is 0), default traffic class and TTL.
    pub fn of_ip(ip: Ipv4Addr) -> Dest {
        Dest { ip: IpAddr::V4(ip), src: None, mac: mac_of_ipv4(ip), tclass: 0, ttl: DEFAULT_TTL }
    }
}

/// Sends packets to other nodes (the node's fabric port, in the server crate; an in-memory
/// wire in tests).
pub trait Wire: Send + Sync {
    fn address(&self) -> Ipv4Addr;
    /// A RoCE packet of a QP to `dst`.
    fn send(&self, dst: &Dest, pkt: &Packet);
    /// A whole Ethernet frame from the netdev's transmit ring (header included, no FCS).
    /// A wire that carries only RoCE packets (the engine's unit-test wires) drops it.
    fn send_frame(&self, frame: &[u8]) {
        let _ = frame;
    }
}

/// The loopback MTU: a message of up to 1 MiB is one request (one memory-to-memory
/// copy); a longer one is cut like a fabric message, so that one step of a loopback QP
/// moves at most a burst of them and a 2 GiB WRITE does not hold the engine for a whole
/// copy (docs/verbs.md §8).
pub const LOOPBACK_MTU: u32 = 1 << 20;

pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// `a - b` in PSN space, as a signed distance within half the space.
pub fn psn_diff(a: u32, b: u32) -> i32 {
    let d = a.wrapping_sub(b) & PSN_MASK;
    if d & 0x0080_0000 != 0 {
        d as i32 - 0x0100_0000
    } else {
        d as i32
    }
}

/// Messages one role sends per step before other QPs and incoming packets get a turn.
pub const BURST: u32 = 8;

/// Requests (or READ responses) a message of `len` bytes takes at `mtu` bytes each.
pub fn packets_for(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu.max(1))).max(1) as u32
}

/// The payload of a message.
#[derive(Clone, Copy, Debug)]
pub enum Payload<'a> {
    None,
    /// Bytes in hand (inline WQE data, a received packet).
    Bytes(&'a [u8]),
    /// `len` bytes from `off` bytes into a segment list of guest memory.
    Segs {
        segs: &'a [Segment],
        off: u64,
        len: u64,
    },
}

impl Payload<'_> {
    pub fn len(&self) -> u64 {
        match self {
            Payload::None => 0,
            Payload::Bytes(b) => b.len() as u64,
            Payload::Segs { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Places the payload `dst_off` bytes into `dst` (one copy, memory to memory for
    /// segment payloads).
    pub fn place(&self, mem: &dyn GuestMem, dst: &[Segment], dst_off: u64) -> Result<(), DmaError> {
        match *self {
            Payload::None => Ok(()),
            Payload::Bytes(b) => copy::write_at(mem, dst, dst_off, b),
            Payload::Segs { segs, off, len } => copy::copy_at(mem, &copy::Source::Segments(segs), off, dst, dst_off, len),
        }
    }
}

/// One message between QPs: the transport headers and the payload.
#[derive(Clone, Copy, Debug)]
pub struct Msg<'a> {
    pub bth: Bth,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub imm: Option<u32>,
    /// An atomic request's operands (AtomicETH), an ATOMIC ACKNOWLEDGE's original value.
    pub atomic: Option<AtomicEth>,
    pub atomic_ack: Option<u64>,
    /// A FLUSH's FETH (contract minor 14).
    pub feth: Option<u32>,
    /// A UD message's DETH and the GRH area its receiver gets (minor 16).
    pub deth: Option<Deth>,
    pub grh: Option<Grh>,
    pub payload: Payload<'a>,
    /// For an error NAK: the (status, reason) the requester's completion reports when the
    /// transport can carry it. On one engine a DMA fault while placing data is the
    /// device's own (fatal) error; on the wire only the syndrome travels.
    pub detail: Option<(u8, u8)>,
}

impl<'a> Msg<'a> {
    pub fn new(bth: Bth) -> Msg<'a> {
        Msg { bth, reth: None, aeth: None, imm: None, atomic: None, atomic_ack: None, feth: None, deth: None, grh: None, payload: Payload::None, detail: None }
    }

    /// An ACK or NAK.
    pub fn ack(dest_qp: u32, psn: u32, syn: u8, msn: u32) -> Msg<'a> {
        let bth = Bth { opcode: op::ACK, pkey: 0xffff, dest_qp, psn, ..Default::default() };
        Msg { aeth: Some(Aeth { syndrome: syn, msn }), ..Msg::new(bth) }
    }

    fn from_packet(pkt: &'a Packet) -> Msg<'a> {
        let (atomic, atomic_ack, feth, deth) = (pkt.atomic, pkt.atomic_ack, pkt.feth, pkt.deth);
        let grh = deth.map(|_| pkt.grh);
        Msg {
            bth: pkt.bth,
            reth: pkt.reth,
            aeth: pkt.aeth,
            imm: pkt.imm,
            atomic,
            atomic_ack,
            feth,
            deth,
            grh,
            payload: Payload::Bytes(&pkt.payload),
            detail: None,
        }
    }
}

/// Carries messages to the peer QP.
pub trait Transport {
    /// Largest payload of one message.
    fn mtu(&self) -> u32;
    /// Sends `msg` (it may be queued). Fails only when the payload cannot be read.
    fn send(&mut self, mem: &dyn GuestMem, msg: &Msg<'_>) -> Result<(), DmaError>;
}

/// The payload of a queued loopback message, owned.
#[derive(Clone, Debug)]
pub enum LoopPayload {
    None,
    Bytes(Vec<u8>),
    Segs(Vec<Segment>),
}

/// A message between two QPs of the same engine.
#[derive(Clone, Debug)]
pub struct LoopMsg {
    pub from: u32,
    pub to: u32,
    pub bth: Bth,
    pub reth: Option<Reth>,
    pub aeth: Option<Aeth>,
    pub imm: Option<u32>,
    pub atomic: Option<AtomicEth>,
    pub atomic_ack: Option<u64>,
    pub feth: Option<u32>,
    pub deth: Option<Deth>,
    pub grh: Option<Grh>,
    pub payload: LoopPayload,
    pub detail: Option<(u8, u8)>,
}

impl LoopMsg {
    /// The message as the receiving role sees it.
    pub fn msg(&self) -> Msg<'_> {
        let payload = match &self.payload {
            LoopPayload::None => Payload::None,
            LoopPayload::Bytes(b) => Payload::Bytes(b),
            LoopPayload::Segs(s) => Payload::Segs { segs: s, off: 0, len: copy::total_len(s) },
        };
        let (atomic, atomic_ack, feth, deth, grh) = (self.atomic, self.atomic_ack, self.feth, self.deth, self.grh);
        Msg { bth: self.bth, reth: self.reth, aeth: self.aeth, imm: self.imm, atomic, atomic_ack, feth, deth, grh, payload, detail: self.detail }
    }
}

/// QP `from` to QP `to` on the same engine.
pub struct Loopback<'a> {
    pub queue: &'a mut VecDeque<LoopMsg>,
    pub from: u32,
    pub to: u32,
}

impl Transport for Loopback<'_> {
    fn mtu(&self) -> u32 {
        LOOPBACK_MTU
    }

    fn send(&mut self, _mem: &dyn GuestMem, msg: &Msg<'_>) -> Result<(), DmaError> {
        let payload = match msg.payload {
            Payload::None => LoopPayload::None,
            Payload::Bytes(b) => LoopPayload::Bytes(b.to_vec()),
            Payload::Segs { segs, off, len } => {
                let mut v = Vec::with_capacity(segs.len());
                copy::sub_segments(segs, off, len, &mut v).ok_or(DmaError::Unmapped { addr: 0, len: len as usize })?;
                LoopPayload::Segs(v)
            }
        };
        let (from, to) = (self.from, self.to);
        let (atomic, atomic_ack, feth, deth, grh) = (msg.atomic, msg.atomic_ack, msg.feth, msg.deth, msg.grh);
        let m =
            LoopMsg { from, to, bth: msg.bth, reth: msg.reth, aeth: msg.aeth, imm: msg.imm, atomic, atomic_ack, feth, deth, grh, payload, detail: msg.detail };
        self.queue.push_back(m);
        Ok(())
    }
}

/// RoCEv2 over the node's wire, to `dst`.
pub struct Fabric<'a> {
    pub wire: &'a dyn Wire,
    pub dst: Dest,
    pub mtu: u32,
    /// Reused for every packet this engine sends.
    pub scratch: &'a mut Packet,
    pub stats: &'a Stats,
}

impl Transport for Fabric<'_> {
    fn mtu(&self) -> u32 {
        self.mtu
    }

    fn send(&mut self, mem: &dyn GuestMem, msg: &Msg<'_>) -> Result<(), DmaError> {
        let p = &mut *self.scratch;
        p.bth = msg.bth;
        p.reth = msg.reth;
        p.aeth = msg.aeth;
        p.imm = msg.imm;
        p.atomic = msg.atomic;
        p.atomic_ack = msg.atomic_ack;
        p.feth = msg.feth;
        p.deth = msg.deth;
        p.payload.clear();
        match msg.payload {
            Payload::None => {}
            Payload::Bytes(b) => p.payload.extend_from_slice(b),
            Payload::Segs { segs, off, len } => {
                p.payload.resize(len as usize, 0);
                copy::read_at(mem, segs, off, &mut p.payload)?;
            }
        }
        if msg.bth.opcode == op::ACK {
            let ack = msg.aeth.is_some_and(|a| a.syndrome == syndrome::ACK);
            self.stats.inc(if ack { Counter::AcksSent } else { Counter::NaksSent });
        }
        self.wire.send(&self.dst, p);
        Ok(())
    }
}

/// A transport that is not there (a QP that is not connected): drops everything.
pub struct Nowhere;

impl Transport for Nowhere {
    fn mtu(&self) -> u32 {
        LOOPBACK_MTU
    }

    fn send(&mut self, _mem: &dyn GuestMem, _msg: &Msg<'_>) -> Result<(), DmaError> {
        Ok(())
    }
}

/// A received packet as a message.
pub fn packet_msg(pkt: &Packet) -> Msg<'_> {
    Msg::from_packet(pkt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn psn_arithmetic_wraps_at_24_bits() {
        assert_eq!(psn_add(PSN_MASK, 1), 0);
        assert_eq!(psn_diff(0, PSN_MASK), 1);
        assert_eq!(psn_diff(PSN_MASK, 0), -1);
        assert_eq!(psn_diff(5, 5), 0);
        assert_eq!(psn_diff(10, 3), 7);
    }

    #[test]
    fn loopback_hands_over_descriptors_not_bytes() {
        let mut q = VecDeque::new();
        let mut t = Loopback { queue: &mut q, from: 1, to: 2 };
        let segs = [Segment { addr: 0x1000, len: 100 }, Segment { addr: 0x9000, len: 100 }];
        let msg = Msg { payload: Payload::Segs { segs: &segs, off: 50, len: 100 }, ..Msg::new(Bth::default()) };
        t.send(&crate::platform::mem::dma::DmaMaps::default(), &msg).unwrap();
        let m = q.pop_front().unwrap();
        assert_eq!((m.from, m.to), (1, 2));
        match m.payload {
            LoopPayload::Segs(s) => assert_eq!(s, [Segment { addr: 0x1032, len: 50 }, Segment { addr: 0x9000, len: 50 }]),
            other => panic!("{other:?}"),
        }
    }
}
