//! The responder (as rxe's `rxe_resp.c`): per-QP receive-side state (the expected PSN,
//! the MSN, the message being received, READ responses still to send) and the handling
//! of each request:
//!
//! - PSN check: only the expected PSN is executed; a duplicate is acknowledged up to its
//!   own PSN (a duplicate READ is answered again if it asks for one of the last
//!   [`MAX_READ_RESPONSES`] READs executed, from one of its PSNs, for what is left from
//!   there; else dropped and counted); one beyond it draws one sequence NAK per gap.
//! - Checks before placing any byte: opcode sequence, payload against the MTU, rkey,
//!   range and access (REM_ACCESS NAK), a RECV for SEND and WRITE WITH IMMEDIATE (RNR NAK
//!   when none is posted, the PSN not consumed), the SEND's length against the RECV
//!   (REM_INV_REQ NAK; the RECV completes with LOC_LEN and this QP goes to ERROR), a
//!   WRITE's packets against its RETH length (the last must end exactly there) and READ
//!   and WRITE lengths against IBA's 2^31 (REM_INV_REQ NAK).
//! - WRITE and READ ranges are checked whole when the request comes and translated one
//!   packet's share at a time, so what the host holds per request does not grow with the
//!   length a peer names.
//! - Placement (one copy from the request's payload), RECV completion, ACK coalescing
//!   (when the requester asks, or every [`ACK_EVERY`] requests), READ responses.
//!
//! A malformed RECV or one whose buffers fail their checks completes in error here (this
//! QP to ERROR) and the requester gets a REM_OP NAK. At most the QP's max_dest_rd_atomic
//! ([`MAX_READ_RESPONSES`] unless its context says fewer, minor 12) READs are answered at a
//! time; a new READ or atomic beyond them gets an invalid-request NAK.
//! - Atomics (minor 12): an 8-byte aligned target (else invalid request) under an rkey
//!   with REMOTE_ATOMIC on MR and QP (else remote access error), executed at once and
//!   answered with an ATOMIC ACKNOWLEDGE; a duplicate is answered from [`super::atomic`]'s
//!   history, never executed again. Not implemented: credits.
//! - FLUSH and ATOMIC WRITE (IBTA 1.5, minor 14, [`answer_once`]): a FLUSH needs, on MR
//!   and QP, the FLUSH access bit of each placement type its FETH names (else remote
//!   access error) and a valid FETH and range (else invalid request); an ATOMIC WRITE an
//!   8-byte aligned target of exactly 8 bytes under REMOTE_WRITE. Both are executed at
//!   once (the FLUSH has nothing left to do: every earlier request was placed before it
//!   is taken, and a fence orders it after them), count against the responder resources,
//!   and are answered with a zero-length READ RESPONSE ONLY; a duplicate is answered
//!   again from the history the atomics keep, never executed twice.
//! - SRQs (minor 15, [`super::recv`], [`leave_srq`]): a QP on an SRQ takes the SRQ's head
//!   WQE out of its ring when a message needs a RECV (the engine lends the SRQ's ring
//!   through `Ctx::srq`), raises the SRQ's limit event, and in ERROR flushes the WQE it had
//!   taken and raises EQE_QP_LAST_WQE.
//! - UC (minor 13, [`receive_uc`]): no acknowledgement of any kind; a message with a
//!   missing packet, no RECV, or a remote access or length error is dropped (UC_DROPPED)
//!   and the QP stays as it is; a packet of the other service than the QP's is dropped.

use super::atomic::{self, Done, History};
use super::ctx::{dma_fault, fail, Ctx, Failure, MAX_MSG};
use super::mr::Segment;
use super::opcode::{info, opcode_for, recv_cqe_opcode, service_of, Kind, OpInfo};
use super::qp::{Qp, QpState, Service};
use super::recv::{fail_recv, next_recv};
use super::sgl::Sgl;
use super::transport::{packets_for, psn_add, psn_diff, Msg, Payload, Transport, BURST};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::observe::timing::wqe_log::Side;
use crate::platform::mem::access::{DmaKind, DmaTag};
use crate::rnic::fabric::packet::{op, syndrome, Aeth, AtomicEth, Bth, Reth, PSN_MASK};
use std::collections::VecDeque;

/// The responder acknowledges at least every this many requests.
pub const ACK_EVERY: u32 = 16;

/// RDMA READs whose responses one QP holds at a time (its responder resources: the
/// `max_qp_rd_atom` the driver reports). A new READ beyond them is an invalid request.
pub const MAX_READ_RESPONSES: usize = 16;

/// What the responder is in the middle of (multi-packet messages).
#[derive(Clone, Debug)]
enum Incoming {
    /// The RECV's buffers, checked when it was taken, translated one packet at a time.
    Send { wr_id: u64, sgl: Sgl, offset: u64 },
    /// Checked whole at the first packet, translated one packet's share at a time.
    Write { rkey: u32, va: u64, len: u64, offset: u64, mr: u32 },
}

/// An RDMA READ being answered: `len` bytes at `va` under `rkey` (checked whole when the
/// request came, translated one packet at a time), packets `next..npkts` still to send.
#[derive(Clone, Debug)]
struct ReadResponse {
    /// The MR index of the rkey (CMD_DEREG_MR of it drops the response).
    mr: u32,
    rkey: u32,
    va: u64,
    pd: u32,
    access: u8,
    len: u64,
    first_psn: u32,
    npkts: u32,
    next: u32,
    msn: u32,
}

/// An RDMA READ the responder executed, as its request named it: what a duplicate of it
/// (a resend from any of its PSNs) must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ReadRequest {
    first_psn: u32,
    npkts: u32,
    va: u64,
    rkey: u32,
    len: u64,
}

impl ReadRequest {
    /// Whether `m` asks again for this READ from one of its PSNs: the same rkey, and the
    /// address and length of what is left from that PSN on (`mtu` bytes per packet).
    fn resent_as(&self, psn: u32, reth: &Reth, mtu: u32) -> bool {
        let k = psn_diff(psn, self.first_psn);
        if k < 0 || k as u32 >= self.npkts || reth.rkey != self.rkey {
            return false;
        }
        let off = u64::from(k as u32) * u64::from(mtu);
        self.va.checked_add(off) == Some(reth.va) && self.len.checked_sub(off) == Some(u64::from(reth.len))
    }
}

/// Receive-side state of one QP.
#[derive(Clone, Debug, Default)]
pub struct Responder {
    pub epsn: u32,
    pub msn: u32,
    nak_sent: bool,
    incoming: Option<Incoming>,
    since_ack: u32,
    responses: VecDeque<ReadResponse>,
    /// The newest READs executed (at most [`MAX_READ_RESPONSES`]): a duplicate READ is
    /// answered only if it matches one of them.
    reads: VecDeque<ReadRequest>,
    /// A request has arrived since RTR (EQE_COMM_EST was queued).
    established: bool,
    /// READs and atomics answered at a time (max_dest_rd_atomic, taken at RTR).
    max_outstanding: usize,
    /// The newest atomics executed, for duplicates.
    atomics: History,
    /// The wr_id of the SRQ WQE a SEND in progress took (minor 15): flushed if the QP
    /// fails before the SEND completes, since it is no longer in the SRQ's ring.
    srq_taken: Option<u64>,
    /// This QP in ERROR has left its SRQ (EQE_QP_LAST_WQE raised).
    left_srq: bool,
}

impl Responder {
    /// At RTR: the expected PSN, and the context's `rd_atomic` high nibble.
    pub fn new(rq_psn: u32, max_dest_rd_atomic: u8) -> Responder {
        let max_outstanding = super::requester::rd_atomic_limit(max_dest_rd_atomic);
        Responder { epsn: rq_psn & PSN_MASK, max_outstanding, ..Default::default() }
    }

    /// READs and atomics answered at a time (max_dest_rd_atomic; the device's 16 before
    /// an RTR set it).
    fn limit(&self) -> usize {
        if self.max_outstanding == 0 {
            MAX_READ_RESPONSES
        } else {
            self.max_outstanding
        }
    }

    /// Whether this QP, in ERROR, is done with its SRQ ([`leave_srq`]).
    pub fn last_wqe_reached(&self) -> bool {
        self.left_srq
    }

    /// READ responses are waiting to be sent.
    pub fn busy(&self) -> bool {
        !self.responses.is_empty()
    }

    /// Forgets the message being received and the READ responses that use MR `index`
    /// (CMD_DEREG_MR): their later packets are refused, their data never moves.
    pub fn drop_mr(&mut self, index: u32) {
        let uses = |i: &Incoming| match i {
            Incoming::Send { sgl, .. } => sgl.uses(index),
            Incoming::Write { mr, .. } => *mr == index,
        };
        if self.incoming.as_ref().is_some_and(uses) {
            self.incoming = None;
        }
        self.responses.retain(|r| r.mr != index);
        self.reads.retain(|r| r.rkey >> 8 != index);
        self.atomics.drop_mr(index);
    }
}

fn nak_for(status: u8) -> u8 {
    match status {
        WC_REM_ACCESS_ERR => syndrome::NAK_REM_ACCESS,
        WC_REM_INV_REQ_ERR => syndrome::NAK_INV_REQ,
        _ => syndrome::NAK_REM_OP,
    }
}

fn send_ack(ctx: &Ctx, rs: &Responder, t: &mut dyn Transport, to_qp: u32, psn: u32, syn: u8, detail: Option<(u8, u8)>) {
    let msg = Msg { detail, ..Msg::ack(to_qp, psn, syn, rs.msn) };
    let _ = t.send(ctx.mem, &msg); // no payload: cannot fail
}

/// A request for a QP that does not take requests (not RTR/RTS): a remote operational
/// error for the requester (a UC one gets nothing).
pub fn refuse(ctx: &Ctx, t: &mut dyn Transport, to_qp: u32, m: &Msg) {
    if info(m.bth.opcode).is_some_and(|o| o.request) && service_of(m.bth.opcode) == Service::Rc {
        let msg = Msg { detail: Some((WC_REM_OP_ERR, QP_ERR_REMOTE_INVALID)), ..Msg::ack(to_qp, m.bth.psn, syndrome::NAK_REM_OP, 0) };
        let _ = t.send(ctx.mem, &msg);
    }
}

/// A request from QP `src_qpn` for responder QP `qp`.
pub fn receive(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rs: &mut Responder, src_qpn: u32, m: &Msg, t: &mut dyn Transport) {
    let Some(op) = info(m.bth.opcode).filter(|o| o.request) else { return };
    // A packet of the other service is not for this QP (IBA 9.6.1.2 transport check).
    if service_of(m.bth.opcode) != qp.service {
        ctx.stats().inc(Counter::PktsDropped);
        crate::guest_info!("{}: QP {qpn}: dropped opcode {:#04x} of the other service (QP {:?})", ctx.name, m.bth.opcode, qp.service);
        return;
    }
    if qp.state == QpState::Rtr && !rs.established {
        rs.established = true;
        ctx.cqs.event(EQE_COMM_EST, qpn, 0);
    }
    if qp.service == Service::Uc {
        return receive_uc(ctx, qpn, qp, rs, src_qpn, op, m, t);
    }
    let psn = m.bth.psn;
    let d = psn_diff(psn, rs.epsn);
    if d > 0 {
        ctx.stats().inc(Counter::OutOfSequence);
        if !rs.nak_sent {
            rs.nak_sent = true;
            send_ack(ctx, rs, t, src_qpn, rs.epsn, syndrome::NAK_SEQ_ERR, None);
        }
        return;
    }
    if d < 0 {
        ctx.stats().inc(Counter::DuplicateRequests);
        if op.kind == Kind::Atomic {
            replay_atomic(ctx, qpn, rs, src_qpn, m, t);
        } else if op.kind == Kind::ReadRequest {
            answer_read(ctx, qpn, qp, rs, src_qpn, m, false, t);
        } else if matches!(op.kind, Kind::Flush | Kind::AtomicWrite) {
            replay_once(ctx, qpn, rs, m);
        } else {
            // Acknowledged up to its own PSN, not the newest executed: a requester resending
            // a message has not resent its later packets yet, and rxe's completer, given an
            // ACK for the last PSN of a WQE it is still resending, moves its expected PSN
            // past the WQE without completing it; when the ACKs to the rest of the resend
            // are lost it never retransmits again (docs/fabric.md, "Soft-RoCE interop").
            send_ack(ctx, rs, t, src_qpn, psn, syndrome::ACK, None);
        }
        return;
    }
    rs.nak_sent = false;
    if op.kind == Kind::ReadRequest {
        answer_read(ctx, qpn, qp, rs, src_qpn, m, true, t);
        return;
    }
    if op.kind == Kind::Atomic {
        answer_atomic(ctx, qpn, qp, rs, src_qpn, m, t);
        return;
    }
    if matches!(op.kind, Kind::Flush | Kind::AtomicWrite) {
        answer_once(ctx, qpn, qp, rs, src_qpn, op.kind, m, t);
        return;
    }
    match place(ctx, qpn, qp, rs, src_qpn, op, m, t) {
        Ok(true) => {}
        Ok(false) => {
            ctx.stats().inc(Counter::RnrNaksSent);
            send_ack(ctx, rs, t, src_qpn, psn, syndrome::RNR_NAK | 1, None);
            return;
        }
        Err(f) => {
            rs.incoming = None;
            send_ack(ctx, rs, t, src_qpn, psn, nak_for(f.status), Some((f.status, f.reason)));
            ctx.responder_error(qpn, qp, f);
            return;
        }
    }
    rs.epsn = psn_add(rs.epsn, 1);
    rs.since_ack += 1;
    if m.bth.ack_req || rs.since_ack >= ACK_EVERY {
        rs.since_ack = 0;
        send_ack(ctx, rs, t, src_qpn, psn, syndrome::ACK, None);
    }
}

/// A UC request (contract minor 13; IBA 9.8.4, as rxe's responder): nothing is ever
/// acknowledged. A packet other than the expected PSN ends the message in progress; a
/// first (or only) packet starts a new message there, any other is dropped until one does.
/// A message the QP cannot take whole (no RECV, a remote access or length error) is
/// dropped with no error: its RECV, if it had one, stays posted for the next message.
/// Errors of this QP's own (a malformed RECV, a DMA fault) are handled as on RC.
#[allow(clippy::too_many_arguments)]
fn receive_uc(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rs: &mut Responder, src_qpn: u32, op: &OpInfo, m: &Msg, t: &mut dyn Transport) {
    let psn = m.bth.psn;
    if psn != rs.epsn || op.first {
        if rs.incoming.take().is_some() {
            uc_drop(ctx, qpn, psn, "its last packets are missing");
        }
        if !op.first {
            ctx.stats().inc(Counter::OutOfSequence);
            return;
        }
        rs.epsn = psn;
    }
    let why = match place(ctx, qpn, qp, rs, src_qpn, op, m, t) {
        Ok(true) => {
            rs.epsn = psn_add(psn, 1);
            return;
        }
        Ok(false) => "no RECV is posted",
        Err(f) if matches!(f.status, WC_REM_ACCESS_ERR | WC_REM_INV_REQ_ERR) => "it breaks an access or length rule",
        Err(_) => {
            rs.incoming = None;
            return;
        }
    };
    // The rest of the message is out of sequence from here on: epsn stays.
    rs.incoming = None;
    uc_drop(ctx, qpn, psn, why);
}

fn uc_drop(ctx: &Ctx, qpn: u32, psn: u32, why: &str) {
    ctx.stats().inc(Counter::UcDropped);
    crate::guest_info!("{}: UC QP {qpn}: dropped the message at PSN {psn}: {why}", ctx.name);
}

/// A QP in ERROR that received from an SRQ takes no more of its WQEs (minor 15): the one a
/// SEND in progress had taken completes flushed, and EQE_QP_LAST_WQE is raised once.
pub fn leave_srq(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rs: &mut Responder) {
    if let Some(wr_id) = rs.srq_taken.take() {
        let cqe = Cqe { wr_id, qpn, opcode: CQE_OP_RECV, status: WC_WR_FLUSH_ERR, ..Default::default() };
        ctx.cqs.complete(ctx.name, ctx.mem, qp.recv_cqn, cqe);
    }
    rs.incoming = None;
    rs.left_srq = true;
    ctx.cqs.event(EQE_QP_LAST_WQE, qpn, 0);
}

/// Places a SEND or WRITE request. Ok(false): no RECV posted (RNR).
#[allow(clippy::too_many_arguments)]
fn place(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rs: &mut Responder, src_qpn: u32, op: &OpInfo, m: &Msg, t: &dyn Transport) -> Result<bool, Failure> {
    let mtu = u64::from(t.mtu());
    let inv = || fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID);
    let n = m.payload.len();
    if n > mtu || (!op.last && n != mtu) {
        return Err(inv());
    }
    if op.first {
        let incoming = if op.kind == Kind::Send {
            match next_recv(ctx, qpn, qp, src_qpn)? {
                Some(r) => {
                    if qp.srq.is_some() {
                        rs.srq_taken = Some(r.wr_id);
                    }
                    Incoming::Send { wr_id: r.wr_id, sgl: r.sgl, offset: 0 }
                }
                None => return Ok(false),
            }
        } else {
            let reth = m.reth.ok_or_else(inv)?;
            let len = u64::from(reth.len);
            if len > MAX_MSG {
                crate::guest_warn!("{}: QP {qpn}: an RDMA WRITE of {len} bytes (more than 2^31); invalid request", ctx.name);
                return Err(inv());
            }
            ctx.remote_check(qpn, qp, reth.rkey, reth.va, len, op.access)?;
            Incoming::Write { rkey: reth.rkey, va: reth.va, len, offset: 0, mr: reth.rkey >> 8 }
        };
        rs.incoming = Some(incoming);
    }
    let mut incoming = rs.incoming.take().ok_or_else(inv)?;
    let mr = match &incoming {
        Incoming::Write { mr, .. } => Some(*mr),
        Incoming::Send { sgl, .. } => sgl.first_mr(),
    };
    let placed = |ctx: &Ctx, segs: &[Segment]| {
        ctx.mem.tag(DmaTag { mr, ..DmaTag::qp(DmaKind::Payload, qpn) });
        m.payload.place(ctx.mem, segs, 0).map_err(|e| {
            crate::guest_warn!("{}: QP {qpn}: {e}", ctx.name);
            dma_fault(ctx.stats(), &e)
        })
    };
    match &mut incoming {
        Incoming::Send { wr_id, sgl, offset, .. } => {
            if op.kind != Kind::Send {
                return Err(inv());
            }
            if offset.checked_add(n).is_none_or(|end| end > sgl.len()) {
                // UC drops the message and keeps the RECV (IBA 9.8.4 class D, as rxe).
                if qp.service == Service::Rc {
                    fail_recv(ctx, qpn, qp, src_qpn, *wr_id, WC_LOC_LEN_ERR, QP_ERR_LENGTH);
                    rs.srq_taken = None;
                }
                return Err(inv());
            }
            let segs = ctx.local_part(sgl, *offset, n)?;
            placed(ctx, &segs)?;
            ctx.stats().add(Counter::BytesSent, n);
            *offset += n;
            if op.last {
                log_placed(ctx, qpn, "send", &segs, *offset, t);
                let mut cqe = Cqe { opcode: recv_cqe_opcode(op.kind), byte_len: *offset as u32, ..Default::default() };
                if let Some(imm) = m.imm {
                    cqe.imm_data = imm;
                    cqe.flags = CQE_FLAG_IMM;
                }
                ctx.complete_recv(qpn, qp, *wr_id, src_qpn, cqe);
                rs.srq_taken = None;
                rs.msn = psn_add(rs.msn, 1);
                return Ok(true);
            }
        }
        Incoming::Write { rkey, va, len, offset, .. } => {
            // Every packet inside RETH.len, and the last one ending exactly there: a WRITE
            // shorter than it announced is an invalid request (IBA 9.7.5.1.3 length error),
            // not a success with bytes the requester never sent.
            let end = offset.checked_add(n).filter(|&e| e <= *len && (!op.last || e == *len));
            if op.kind != Kind::Write || end.is_none() {
                crate::guest_info!(
                    "{}: QP {qpn}: WRITE packet of {n} bytes at offset {offset} of a {len}-byte RETH (last: {}); invalid request",
                    ctx.name,
                    op.last
                );
                return Err(inv());
            }
            // WRITE WITH IMMEDIATE consumes a RECV: take it before placing the data.
            let recv = if op.last && op.consumes_recv {
                match next_recv(ctx, qpn, qp, src_qpn)? {
                    Some(r) => Some(r),
                    None => {
                        rs.incoming = Some(incoming);
                        return Ok(false);
                    }
                }
            } else {
                None
            };
            let at = va.checked_add(*offset).ok_or_else(inv)?;
            let segs = ctx.remote_part(*rkey, qp.pd, op.access, at, n)?;
            placed(ctx, &segs)?;
            ctx.stats().add(Counter::BytesWritten, n);
            *offset += n;
            if op.last {
                log_placed(ctx, qpn, "write", &segs, *offset, t);
                if let Some(r) = recv {
                    let imm = m.imm.unwrap_or_default();
                    let cqe = Cqe { opcode: recv_cqe_opcode(op.kind), byte_len: *offset as u32, imm_data: imm, flags: CQE_FLAG_IMM, ..Default::default() };
                    ctx.complete_recv(qpn, qp, r.wr_id, src_qpn, cqe);
                }
                rs.msn = psn_add(rs.msn, 1);
                return Ok(true);
            }
        }
    }
    rs.incoming = Some(incoming);
    Ok(true)
}

/// WQE log: the last byte of a message is placed (the path of its first segment).
fn log_placed(ctx: &Ctx, qpn: u32, op: &'static str, segs: &[Segment], len: u64, t: &dyn Transport) {
    if !ctx.wqe_log.enabled() {
        return;
    }
    let path = segs.first().map(|s| ctx.mem.path_of(s.addr));
    ctx.wqe_log.responder(qpn, op, len, path, t.mtu() != super::transport::LOOPBACK_MTU, Side::Placed);
}

/// Answers an RDMA READ request (again, for a duplicate): the data goes back in READ
/// responses, sent by [`send_responses`].
#[allow(clippy::too_many_arguments)]
fn answer_read(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rs: &mut Responder, src_qpn: u32, m: &Msg, fresh: bool, t: &mut dyn Transport) {
    let Some(reth) = m.reth else { return };
    let len = u64::from(reth.len);
    let access = info(m.bth.opcode).map_or(ACCESS_REMOTE_READ, |o| o.access);
    let checked = if len > MAX_MSG {
        crate::guest_warn!("{}: QP {qpn}: an RDMA READ of {len} bytes (more than 2^31); invalid request", ctx.name);
        Err(fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID))
    } else {
        ctx.remote_check(qpn, qp, reth.rkey, reth.va, len, access)
    };
    if let Err(f) = checked {
        if fresh {
            send_ack(ctx, rs, t, src_qpn, m.bth.psn, nak_for(f.status), Some((f.status, f.reason)));
            ctx.responder_error(qpn, qp, f);
        }
        return;
    }
    let n = packets_for(len, t.mtu());
    let first_psn = m.bth.psn;
    // A duplicate must ask again for a READ executed (from one of its PSNs, for what is
    // left from there): anything else would read what no request named.
    if !fresh && !rs.reads.iter().any(|r| r.resent_as(first_psn, &reth, t.mtu())) {
        crate::guest_warn!("{}: QP {qpn}: a duplicate RDMA READ (PSN {first_psn}) that matches no READ executed; dropped", ctx.name);
        ctx.stats().inc(Counter::PktsDropped);
        return;
    }
    // A duplicate request replaces what is queued for the same PSNs.
    rs.responses.retain(|q| psn_diff(q.first_psn, first_psn) < 0 && psn_diff(psn_add(q.first_psn, q.npkts), first_psn) <= 0);
    if rs.responses.len() >= rs.limit() {
        // More READs outstanding than the responder resources the requester was told
        // of: a new one is refused (invalid request); a duplicate waits for its resend.
        if fresh {
            crate::guest_warn!("{}: QP {qpn}: an RDMA READ beyond {} outstanding; invalid request", ctx.name, rs.limit());
            let f = fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID);
            send_ack(ctx, rs, t, src_qpn, m.bth.psn, syndrome::NAK_INV_REQ, Some((f.status, f.reason)));
            ctx.responder_error(qpn, qp, f);
        }
        return;
    }
    if fresh && ctx.wqe_log.enabled() {
        let first = ctx.remote_part(reth.rkey, qp.pd, access, reth.va, len.min(1)).unwrap_or_default();
        let path = first.first().map(|s| ctx.mem.path_of(s.addr));
        ctx.wqe_log.responder(qpn, "read", len, path, t.mtu() != super::transport::LOOPBACK_MTU, Side::Sourced);
    }
    let response = ReadResponse { mr: reth.rkey >> 8, rkey: reth.rkey, va: reth.va, pd: qp.pd, access, len, first_psn, npkts: n, next: 0, msn: rs.msn };
    rs.responses.push_back(response);
    if fresh {
        if rs.reads.len() >= rs.limit() {
            rs.reads.pop_front();
        }
        rs.reads.push_back(ReadRequest { first_psn, npkts: n, va: reth.va, rkey: reth.rkey, len });
        rs.epsn = psn_add(rs.epsn, n);
        rs.msn = psn_add(rs.msn, 1);
    }
}

/// Sends up to a burst of queued READ response packets to QP `to_qp`; true if any went.
pub fn send_responses(ctx: &mut Ctx, rs: &mut Responder, to_qp: u32, t: &mut dyn Transport) -> bool {
    let mtu = u64::from(t.mtu());
    let mut sent = 0;
    while sent < BURST {
        let Some(rr) = rs.responses.front_mut() else { break };
        let i = rr.next;
        let off = u64::from(i) * mtu;
        let size = (rr.len - off.min(rr.len)).min(mtu);
        let opcode = opcode_for(Kind::ReadResponse, false, i, rr.npkts);
        let aeth = info(opcode).is_some_and(|o| o.aeth).then_some(Aeth { syndrome: syndrome::ACK, msn: rr.msn });
        let bth = Bth { opcode, pkey: 0xffff, dest_qp: to_qp, psn: psn_add(rr.first_psn, i), ..Default::default() };
        // This packet's share, translated now (checked whole when the READ came; an MR
        // deregistered since has dropped the response).
        let segs = rr.va.checked_add(off).ok_or(()).and_then(|va| ctx.remote_part(rr.rkey, rr.pd, rr.access, va, size).map_err(|_| ()));
        let result = match &segs {
            Ok(segs) => {
                let msg = Msg { aeth, payload: Payload::Segs { segs, off: 0, len: size }, ..Msg::new(bth) };
                ctx.mem.tag(DmaTag { mr: Some(rr.mr), ..DmaTag::qp(DmaKind::Payload, to_qp) });
                t.send(ctx.mem, &msg).map_err(|e| e.to_string())
            }
            Err(()) => Err(format!("rkey {:#x} no longer covers {size} bytes at offset {off}", rr.rkey)),
        };
        rr.next += 1;
        if rr.next >= rr.npkts {
            rs.responses.pop_front();
        }
        if let Err(e) = result {
            crate::guest_warn!("{}: READ response to QP {to_qp}: {e}", ctx.name);
            ctx.stats().inc(Counter::DmaErrors);
            continue;
        }
        sent += 1;
    }
    sent > 0
}

/// An atomic request, executed once: the 8 bytes at its target read, changed and written
/// back, the original value answered in an ATOMIC ACKNOWLEDGE.
fn answer_atomic(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rs: &mut Responder, src_qpn: u32, m: &Msg, t: &mut dyn Transport) {
    let Some(a) = m.atomic else { return };
    let psn = m.bth.psn;
    let refuse = |ctx: &mut Ctx, rs: &Responder, qp: &mut Qp, t: &mut dyn Transport, f: Failure| {
        send_ack(ctx, rs, t, src_qpn, psn, nak_for(f.status), Some((f.status, f.reason)));
        ctx.responder_error(qpn, qp, f);
    };
    if rs.responses.len() >= rs.limit() {
        crate::guest_warn!("{}: QP {qpn}: an atomic beyond {} READs outstanding; invalid request", ctx.name, rs.limit());
        return refuse(ctx, rs, qp, t, fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID));
    }
    if !a.va.is_multiple_of(8) {
        crate::guest_info!("{}: QP {qpn}: an atomic at {:#x}, not 8-byte aligned; invalid request", ctx.name, a.va);
        return refuse(ctx, rs, qp, t, fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID));
    }
    if let Err(f) = ctx.remote_check(qpn, qp, a.rkey, a.va, 8, ACCESS_REMOTE_ATOMIC) {
        return refuse(ctx, rs, qp, t, f);
    }
    let mut old = [0u8; 8];
    ctx.mem.tag(DmaTag::qp(DmaKind::Payload, qpn));
    let done = ctx.remote_part(a.rkey, qp.pd, ACCESS_REMOTE_ATOMIC, a.va, 8).and_then(|segs| {
        let fault = |e: crate::platform::mem::dma::DmaError| {
            crate::guest_warn!("{}: QP {qpn}: {e}", ctx.name);
            dma_fault(ctx.stats(), &e)
        };
        crate::platform::mem::access::read_at(ctx.mem, &segs, 0, &mut old).map_err(fault)?;
        let new = atomic::apply(m.bth.opcode, &a, u64::from_le_bytes(old));
        crate::platform::mem::access::write_at(ctx.mem, &segs, 0, &new.to_le_bytes()).map_err(fault)
    });
    if let Err(f) = done {
        return refuse(ctx, rs, qp, t, f);
    }
    ctx.stats().inc(Counter::Atomics);
    rs.epsn = psn_add(rs.epsn, 1);
    rs.msn = psn_add(rs.msn, 1);
    let d = Done { psn, opcode: m.bth.opcode, request: a, original: u64::from_le_bytes(old), msn: rs.msn };
    rs.atomics.record(d, rs.limit());
    send_atomic_ack(ctx, t, src_qpn, &d);
}

/// A duplicate atomic: answered again from the history if it repeats one executed, else
/// dropped (it cannot be answered without executing it again).
fn replay_atomic(ctx: &mut Ctx, qpn: u32, rs: &Responder, src_qpn: u32, m: &Msg, t: &mut dyn Transport) {
    let Some(d) = m.atomic.and_then(|a| rs.atomics.replay(m.bth.psn, m.bth.opcode, &a)) else {
        crate::guest_warn!("{}: QP {qpn}: a duplicate atomic (PSN {}) that matches none executed; dropped", ctx.name, m.bth.psn);
        ctx.stats().inc(Counter::PktsDropped);
        return;
    };
    ctx.stats().inc(Counter::AtomicsReplayed);
    send_atomic_ack(ctx, t, src_qpn, &d);
}

/// The history key of a FLUSH or ATOMIC WRITE (the atomics' record, with the RETH's
/// length and the FETH in the operand fields): what a duplicate must repeat.
fn once_key(m: &Msg, reth: &Reth) -> AtomicEth {
    AtomicEth { va: reth.va, rkey: reth.rkey, swap_add: u64::from(reth.len), compare: u64::from(m.feth.unwrap_or(0)) }
}

/// A FLUSH or an ATOMIC WRITE, executed once and answered with a zero-length READ
/// RESPONSE ONLY (queued for [`send_responses`]).
#[allow(clippy::too_many_arguments)]
fn answer_once(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rs: &mut Responder, src_qpn: u32, kind: Kind, m: &Msg, t: &mut dyn Transport) {
    let Some(reth) = m.reth else { return };
    let psn = m.bth.psn;
    let inv = || fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID);
    let done = if rs.responses.len() >= rs.limit() {
        crate::guest_warn!("{}: QP {qpn}: a FLUSH or ATOMIC WRITE beyond {} READs outstanding; invalid request", ctx.name, rs.limit());
        Err(inv())
    } else if kind == Kind::Flush {
        flush(ctx, qpn, qp, &reth, m.feth)
    } else {
        atomic_write(ctx, qpn, qp, &reth, m)
    };
    if let Err(f) = done {
        send_ack(ctx, rs, t, src_qpn, psn, nak_for(f.status), Some((f.status, f.reason)));
        ctx.responder_error(qpn, qp, f);
        return;
    }
    ctx.stats().inc(if kind == Kind::Flush { Counter::Flushes } else { Counter::AtomicWrites });
    rs.epsn = psn_add(rs.epsn, 1);
    rs.msn = psn_add(rs.msn, 1);
    let d = Done { psn, opcode: m.bth.opcode, request: once_key(m, &reth), original: 0, msn: rs.msn };
    rs.atomics.record(d, rs.limit());
    queue_empty_response(rs, &reth, psn, rs.msn);
}

/// A zero-length READ RESPONSE ONLY at `psn` (nothing is read, so no PD or access is
/// checked when it is sent).
fn queue_empty_response(rs: &mut Responder, reth: &Reth, psn: u32, msn: u32) {
    rs.responses.retain(|q| q.first_psn != psn);
    rs.responses.push_back(ReadResponse { mr: reth.rkey >> 8, rkey: reth.rkey, va: reth.va, pd: 0, access: 0, len: 0, first_psn: psn, npkts: 1, next: 0, msn });
}

/// A FLUSH: its FETH, access and range checked; then a fence, after which every byte the
/// responder placed before this request is visible (there is no persistent memory to
/// write back: guest RAM is what the device wrote into).
fn flush(ctx: &Ctx, qpn: u32, qp: &Qp, reth: &Reth, feth: Option<u32>) -> Result<(), Failure> {
    let inv = || fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID);
    let access_err = || fail(WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS);
    let feth = feth.and_then(|f| u8::try_from(f).ok()).filter(|&f| super::wqe::feth_ok(f)).ok_or_else(|| {
        crate::guest_info!("{}: QP {qpn}: a FLUSH with FETH {feth:?}; invalid request", ctx.name);
        inv()
    })?;
    let mut access = 0;
    if feth & FLUSH_TYPE_GLOBAL != 0 {
        access |= ACCESS_FLUSH_GLOBAL;
    }
    if feth & FLUSH_TYPE_PERSISTENT != 0 {
        access |= ACCESS_FLUSH_PERSISTENT;
    }
    if qp.access & access != access {
        crate::guest_info!("{}: QP {qpn}: a FLUSH (FETH {feth:#x}) the QP's access does not grant", ctx.name);
        return Err(access_err());
    }
    // The whole MR (its address and length), or the range the RETH names.
    let (va, len) = if feth >> 4 == FLUSH_LEVEL_MR {
        let mr = ctx.mrs.get((reth.rkey >> 8) as usize).filter(|mr| mr.key == reth.rkey as u8);
        mr.map_or((reth.va, 0), |mr| (mr.iova, mr.length))
    } else {
        (reth.va, u64::from(reth.len))
    };
    ctx.mrs.check(reth.rkey, qp.pd, access, va, len).map_err(|e| {
        crate::guest_info!("{}: rkey {:#x} refused a FLUSH at QP {qpn}: {e:?}", ctx.name, reth.rkey);
        access_err()
    })?;
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// An ATOMIC WRITE: 8 bytes to an 8-byte aligned target under REMOTE_WRITE, written with
/// one copy (atomic with respect to this device's other operations, one engine thread
/// running them all).
fn atomic_write(ctx: &Ctx, qpn: u32, qp: &Qp, reth: &Reth, m: &Msg) -> Result<(), Failure> {
    if reth.len != 8 || m.payload.len() != 8 || !reth.va.is_multiple_of(8) {
        crate::guest_info!("{}: QP {qpn}: an ATOMIC WRITE of {} bytes ({} carried) at {:#x}; invalid request", ctx.name, reth.len, m.payload.len(), reth.va);
        return Err(fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID));
    }
    ctx.remote_check(qpn, qp, reth.rkey, reth.va, 8, ACCESS_REMOTE_WRITE)?;
    let segs = ctx.remote_part(reth.rkey, qp.pd, ACCESS_REMOTE_WRITE, reth.va, 8)?;
    ctx.mem.tag(DmaTag { mr: Some(reth.rkey >> 8), ..DmaTag::qp(DmaKind::Payload, qpn) });
    m.payload.place(ctx.mem, &segs, 0).map_err(|e| {
        crate::guest_warn!("{}: QP {qpn}: {e}", ctx.name);
        dma_fault(ctx.stats(), &e)
    })?;
    ctx.stats().add(Counter::BytesWritten, 8);
    Ok(())
}

/// A duplicate FLUSH or ATOMIC WRITE: answered again if it repeats one executed, else
/// dropped.
fn replay_once(ctx: &mut Ctx, qpn: u32, rs: &mut Responder, m: &Msg) {
    let found = m.reth.and_then(|reth| rs.atomics.replay(m.bth.psn, m.bth.opcode, &once_key(m, &reth)).map(|d| (reth, d)));
    let Some((reth, d)) = found else {
        crate::guest_warn!("{}: QP {qpn}: a duplicate FLUSH or ATOMIC WRITE (PSN {}) that matches none executed; dropped", ctx.name, m.bth.psn);
        ctx.stats().inc(Counter::PktsDropped);
        return;
    };
    ctx.stats().inc(Counter::AtomicsReplayed);
    // The response goes to the QP's destination, as every queued READ response does.
    queue_empty_response(rs, &reth, d.psn, d.msn);
}

fn send_atomic_ack(ctx: &Ctx, t: &mut dyn Transport, to_qp: u32, d: &Done) {
    let bth = Bth { opcode: op::ATOMIC_ACK, pkey: 0xffff, dest_qp: to_qp, psn: d.psn, ..Default::default() };
    let msg = Msg { aeth: Some(Aeth { syndrome: syndrome::ACK, msn: d.msn }), atomic_ack: Some(d.original), ..Msg::new(bth) };
    let _ = t.send(ctx.mem, &msg); // no payload: cannot fail
}
