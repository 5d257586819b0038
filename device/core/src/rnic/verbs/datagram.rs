//! Unreliable Datagram QPs (contract minor 16; IBA 9.8.3 and 10.2.5, as rxe's UD paths):
//! both sides of a UD SEND.
//!
//! - Sending ([`take_next`], [`transmit`]): the head send WQE is read once with its
//!   address vector, checked (SEND or SEND_IMM only, local buffers, at most the MTU in
//!   all: else a local length error), then sent as one UD SEND ONLY packet with a DETH
//!   (the WQE's Q_Key, or the QP's when bit 31 of the WQE's is set; this QP as the source)
//!   and completed at once: nothing is acknowledged. Between the two calls the engine has
//!   [`route`] resolve the vector against the port's addresses and builds the transport.
//! - Receiving ([`receive`]): a UD SEND from any source whose DETH Q_Key is the QP's
//!   (else dropped: QKEY_VIOLATIONS) takes the head RECV; the GRH area goes into its first
//!   40 bytes and the payload after it, and the completion reports the DETH's source QP.
//!   With no RECV posted, or one too small, the message is dropped and the RECV stays
//!   (IBA's class D: no error of the QP's; UD_DROPPED). A malformed RECV completes in
//!   error as on RC ([`super::recv`]).

use super::ctx::{dma_fault, fail, Ctx, Failure};
use super::qp::Qp;
use super::recv::next_recv;
use super::requester::Requester;
use super::sgl::Sgl;
use super::transport::{psn_add, Dest, Msg, Payload, Transport, Wire};
use super::wqe::{read_ud_wqe, SlotError};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::platform::mem::access::{DmaKind, DmaTag};
use crate::rnic::eth::{mac_from_reg, EthShared};
use crate::rnic::fabric::frame::{grh_of, mac_of_ipv4, RoceAddr, DEFAULT_TTL};
use crate::rnic::fabric::packet::{op, Bth, Deth, Grh, GRH_LEN};
use crate::rnic::gid;
use std::net::IpAddr;

/// A Q_Key with this bit set in a send WQE stands for the QP's own (IBA 10.2.5).
pub const QKEY_USE_QP: u32 = 0x8000_0000;

/// A UD send WQE read and checked, waiting for its route.
#[derive(Clone, Debug)]
pub struct UdSend {
    pub hdr: WqeHeader,
    pub av: UdAv,
    inline: Vec<u8>,
    local: Sgl,
    pub len: u64,
}

impl UdSend {
    /// The destination QP.
    pub fn dest_qpn(&self) -> u32 {
        (self.hdr.remote_addr & 0x00ff_ffff) as u32
    }

    pub fn imm(&self) -> bool {
        self.hdr.opcode == WQE_OP_SEND_IMM
    }
}

/// What the head of a UD QP's send queue gave.
pub enum Next {
    /// Nothing posted.
    Idle,
    /// A WQE failed its checks and completed in error (the QP is in ERROR).
    Failed,
    /// A WQE to send once routed.
    Send(UdSend),
}

/// Reads and checks the head send WQE of UD QP `qpn` (messages of at most `mtu` bytes).
pub fn take_next(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, mtu: u32) -> Next {
    if qp.sq.is_empty() {
        return Next::Idle;
    }
    ctx.mem.tag(DmaTag::qp(DmaKind::WqeFetch, qpn));
    let checked = match read_ud_wqe(ctx.mem, &qp.sq, qp.sq.ci) {
        Ok(w) => {
            let local = if w.hdr.flags & WQE_FLAG_INLINE != 0 { Ok(Sgl::default()) } else { ctx.local_sgl(&w.sges, qp.pd, 0) };
            let len = |l: &Sgl| if w.hdr.flags & WQE_FLAG_INLINE != 0 { w.inline.len() as u64 } else { l.len() };
            match local {
                Ok(l) if len(&l) > u64::from(mtu) => Err((fail(WC_LOC_LEN_ERR, QP_ERR_LENGTH), w.hdr)),
                Ok(l) => Ok(UdSend { hdr: w.hdr, av: w.av.unwrap_or_default(), len: len(&l), inline: w.inline, local: l }),
                Err(f) => Err((f, w.hdr)),
            }
        }
        Err(SlotError::Dma) => Err((fail(WC_FATAL_ERR, QP_ERR_DMA), WqeHeader::default())),
        Err(SlotError::Malformed(h)) => Err((fail(WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE), h)),
    };
    match checked {
        Ok(s) => Next::Send(s),
        Err((f, hdr)) => {
            fail_send(ctx, qpn, qp, &hdr, f);
            Next::Failed
        }
    }
}

/// Completes WQE `hdr` at the head of the send queue in error.
pub fn fail_send(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, hdr: &WqeHeader, f: Failure) {
    if f.reason == QP_ERR_DMA {
        ctx.stats().inc(Counter::DmaErrors);
        crate::guest_warn!("{}: UD QP {qpn} send queue at {:#x} is not mapped guest memory", ctx.name, qp.sq.addr);
    } else {
        ctx.stats().inc(Counter::SendWqes);
        crate::guest_warn!("{}: UD QP {qpn} WQE {:#x} refused: status {} reason {}", ctx.name, hdr.wr_id, f.status, f.reason);
    }
    ctx.finish_send(qpn, qp, hdr, Err(f));
}

/// Sends checked WQE `s` of UD QP `qpn` through `t` and completes it; `grh`: the GRH area
/// a loopback receiver gets (on the wire the frame carries it).
pub fn transmit(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, s: &UdSend, grh: Option<Grh>, t: &mut dyn Transport) {
    let qkey = if s.hdr.rkey & QKEY_USE_QP != 0 { qp.qkey } else { s.hdr.rkey };
    let bth = Bth {
        opcode: if s.imm() { op::UD_SEND_ONLY_IMM } else { op::UD_SEND_ONLY },
        solicited: s.hdr.flags & WQE_FLAG_SOLICITED != 0,
        pkey: 0xffff,
        dest_qp: s.dest_qpn(),
        psn: rq.next_psn,
        ..Default::default()
    };
    rq.next_psn = psn_add(rq.next_psn, 1);
    let inline = s.hdr.flags & WQE_FLAG_INLINE != 0;
    let segs = match if inline { Ok(Vec::new()) } else { ctx.local_part(&s.local, 0, s.len) } {
        Ok(segs) => segs,
        Err(f) => return fail_send(ctx, qpn, qp, &s.hdr, f),
    };
    let payload = if inline { Payload::Bytes(&s.inline) } else { Payload::Segs { segs: &segs, off: 0, len: s.len } };
    let deth = Deth { qkey, src_qp: qpn };
    let msg = Msg { deth: Some(deth), grh, imm: s.imm().then_some(s.hdr.imm_data), payload, ..Msg::new(bth) };
    ctx.mem.tag(DmaTag { mr: s.local.first_mr(), ..DmaTag::qp(DmaKind::Payload, qpn) });
    if let Err(e) = t.send(ctx.mem, &msg) {
        crate::guest_warn!("{}: UD QP {qpn}: {e}", ctx.name);
        let f = dma_fault(ctx.stats(), &e);
        return fail_send(ctx, qpn, qp, &s.hdr, f);
    }
    ctx.stats().inc(Counter::SendWqes);
    ctx.stats().inc(Counter::UdSent);
    ctx.finish_send(qpn, qp, &s.hdr, Ok(s.len));
}

/// A UD SEND for UD QP `qpn` (in RTR or RTS).
pub fn receive(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, m: &Msg) {
    let (Some(deth), Some(grh)) = (m.deth, m.grh) else {
        ctx.stats().inc(Counter::UdDropped);
        crate::guest_info!("{}: UD QP {qpn}: dropped opcode {:#04x}, not a UD SEND", ctx.name, m.bth.opcode);
        return;
    };
    if deth.qkey != qp.qkey {
        ctx.stats().inc(Counter::QkeyViolations);
        crate::guest_info!("{}: UD QP {qpn}: dropped a SEND from QP {} with Q_Key {:#x} (the QP's is {:#x})", ctx.name, deth.src_qp, deth.qkey, qp.qkey);
        return;
    }
    let len = m.payload.len();
    let recv = match next_recv(ctx, qpn, qp, deth.src_qp) {
        Ok(Some(r)) => r,
        Ok(None) => return drop(ctx, qpn, deth.src_qp, "no RECV is posted"),
        Err(_) => return, // a malformed RECV: completed in error, the QP in ERROR
    };
    let need = len + GRH_LEN as u64;
    if recv.sgl.len() < need {
        return drop(ctx, qpn, deth.src_qp, "the RECV is shorter than the GRH area and the payload");
    }
    let placed = ctx.local_part(&recv.sgl, 0, GRH_LEN as u64).and_then(|g| Ok((g, ctx.local_part(&recv.sgl, GRH_LEN as u64, len)?))).and_then(|(g, p)| {
        ctx.mem.tag(DmaTag { mr: recv.sgl.first_mr(), ..DmaTag::qp(DmaKind::Payload, qpn) });
        let fault = |e| {
            crate::guest_warn!("{}: UD QP {qpn}: {e}", ctx.name);
            dma_fault(ctx.stats(), &e)
        };
        Payload::Bytes(&grh.0).place(ctx.mem, &g, 0).map_err(fault)?;
        m.payload.place(ctx.mem, &p, 0).map_err(fault)
    });
    let mut cqe = Cqe { opcode: CQE_OP_RECV, byte_len: need as u32, flags: CQE_FLAG_GRH, ..Default::default() };
    if grh.is_ipv6() {
        cqe.flags |= CQE_FLAG_IPV6;
    }
    if let Some(imm) = m.imm {
        cqe.imm_data = imm;
        cqe.flags |= CQE_FLAG_IMM;
    }
    if let Err(f) = placed {
        cqe = Cqe { opcode: CQE_OP_RECV, status: f.status, syndrome: u32::from(f.reason), ..Default::default() };
    } else {
        ctx.stats().inc(Counter::UdReceived);
        ctx.stats().add(Counter::BytesSent, len);
    }
    ctx.complete_recv(qpn, qp, recv.wr_id, deth.src_qp, cqe);
}

fn drop(ctx: &Ctx, qpn: u32, src_qp: u32, why: &str) {
    ctx.stats().inc(Counter::UdDropped);
    crate::guest_info!("{}: UD QP {qpn}: dropped a SEND from QP {src_qp}: {why}", ctx.name);
}

/// Where a UD send goes (minor 16).
pub enum Route {
    /// To a QP of this engine, which gets this GRH area.
    Loopback(Grh),
    Fabric(Dest),
}

/// The route of UD send `s` from its address vector: the destination GID's family, the
/// source GID at sgid_index of that family, the next-hop MAC (0: the rnic-emu convention,
/// IPv4 only); a destination that is an address of the port (or, with no port, the wire's,
/// or anything with no wire) is this engine. A vector that gives no route is a local QP
/// operation error.
pub fn route(port: Option<&EthShared>, wire: Option<&dyn Wire>, s: &UdSend) -> Result<Route, Failure> {
    let bad = |why: &str| {
        crate::guest_info!("UD address vector {:?} refused: {why}", s.av);
        fail(WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE)
    };
    let av = &s.av;
    let gid = gid::of_halves(av.dest_gid_lo, av.dest_gid_hi);
    let sgid = usize::from(av.sgid_index);
    let (dst, src) = match gid::ipv4_of(&gid) {
        Some(ip) => {
            if ip.is_multicast() || ip.is_broadcast() || ip.is_unspecified() {
                return Err(bad("not a unicast IPv4 destination"));
            }
            let src = match (port, wire) {
                (Some(p), _) => p.gids.ipv4(sgid),
                (None, Some(w)) => Some(w.address()),
                (None, None) => Some(ip), // one engine and nothing else: its own QPs
            };
            (IpAddr::V4(ip), IpAddr::V4(src.ok_or_else(|| bad("no IPv4 GID at sgid_index"))?))
        }
        None => {
            let ip = gid::ipv6_of(&gid).ok_or_else(|| bad("not a unicast destination GID"))?;
            let src = port.and_then(|p| p.gids.ipv6(sgid)).ok_or_else(|| bad("no IPv6 GID at sgid_index"))?;
            (IpAddr::V6(ip), IpAddr::V6(src))
        }
    };
    let ttl = if av.hop_limit == 0 { DEFAULT_TTL } else { av.hop_limit };
    let own = match (port, dst) {
        (Some(p), IpAddr::V4(ip)) => p.gids.has_ipv4(ip) || wire.is_some_and(|w| w.address() == ip),
        (Some(p), IpAddr::V6(ip)) => p.gids.has_ipv6(ip),
        (None, IpAddr::V4(ip)) => wire.is_none_or(|w| w.address() == ip),
        (None, IpAddr::V6(_)) => wire.is_none(),
    };
    if own || wire.is_none() {
        let a = RoceAddr { dst_mac: [0; 6], src_mac: [0; 6], src_ip: src, dst_ip: dst, src_port: 0, tclass: av.traffic_class, ttl };
        return Ok(Route::Loopback(grh_of(&a, s.imm(), s.len as usize)));
    }
    let mac = match (av.dest_mac, dst) {
        (0, IpAddr::V4(ip)) => mac_of_ipv4(ip),
        (0, IpAddr::V6(_)) => return Err(bad("an IPv6 destination needs its MAC")),
        (m, _) if m & 1 != 0 => return Err(bad("a group MAC")),
        (m, _) => mac_from_reg(m),
    };
    Ok(Route::Fabric(Dest { ip: dst, src: Some(src), mac, tclass: av.traffic_class, ttl }))
}
