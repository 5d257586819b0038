//! The requester (as rxe's `rxe_req.c`): per-QP send-side state (PSNs, the window, the
//! WQEs in flight, the next SQ index to start) and the work of turning send WQEs into
//! request messages: fetch the WQE once, validate it, check its local SGEs against the
//! MR table, cut the message into requests of at most the transport's MTU with
//! consecutive 24-bit PSNs, and hand them to the transport. Go-back-N: the completer
//! rewinds `send_psn` and the requester sends again from there (payload is re-read from
//! memory; an in-flight WQE keeps its checked SGE list, translated per request).
//!
//! Local errors (malformed WQE, bad lkey, message too long) complete in order: once
//! everything before the faulty WQE has completed.
//!
//! A UC QP (contract minor 13) sends the UC opcodes, asks for no acknowledgement, arms no
//! timer and completes each WQE as its last request leaves; READs and atomics are not
//! its operations (a local QP operation error).
//!
//! FLUSH and ATOMIC WRITE (IBTA 1.5, contract minor 14) are one request each with no
//! local buffer (an ATOMIC WRITE's 8 bytes travel from the WQE); like a READ they count
//! against max_rd_atomic and complete with their (zero-length) READ response.

use super::ctx::{dma_fault, fail, Ctx, Failure};
use super::mr::Segment;
use super::opcode::{atomic_opcode, opcode_for, wqe_op, Kind};
use super::qp::{Qp, Service};
use super::sgl::Sgl;
use super::transport::{packets_for, psn_add, psn_diff, Msg, Payload, Transport, BURST};
use super::wqe::{read_wqe, SlotError, Wqe};
use crate::contract::abi::*;
use crate::contract::counters::Counter;
use crate::observe::timing::wqe_log::{Pending, Stage, WqeLog};
use crate::platform::mem::access::{DmaKind, DmaTag};
use crate::rnic::fabric::packet::{op, AtomicEth, Bth, Reth, PSN_MASK};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Requests one QP may have unacknowledged.
pub const WINDOW_PKTS: i32 = 32;
/// A request whose PSN is a multiple of this, minus one, asks for an ACK (AckReq) even in
/// the middle of a message: a responder need only acknowledge requests that ask (IBA
/// 9.7.6.1.3; rxe acknowledges nothing else), so without it a message longer than the
/// window would stall until the retransmission timer. Half the window: an ACK is on its
/// way before the window closes.
pub const ACK_REQ_EVERY: u32 = (WINDOW_PKTS / 2) as u32;
/// RDMA READs and atomics one QP may have outstanding, unless its context says fewer
/// (`rd_atomic`, contract minor 12).
pub const MAX_READS: usize = 16;

/// A `rd_atomic` nibble as a count: 1..=15, 0 meaning the device's 16.
pub fn rd_atomic_limit(nibble: u8) -> usize {
    match nibble & 0xf {
        0 => MAX_READS,
        n => usize::from(n),
    }
}

/// A send WQE between its first request and its completion.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub hdr: WqeHeader,
    pub kind: Kind,
    pub imm: bool,
    pub inline: Vec<u8>,
    /// Local buffers (source for WRITE/SEND, destination for READ), checked when the WQE
    /// started and translated per packet.
    pub local: Sgl,
    pub len: u64,
    pub first_psn: u32,
    pub npkts: u32,
    /// READ: response packets received so far.
    pub received: u32,
    /// An atomic's operands.
    pub atomic: Option<AtomicOps>,
    /// Its stage times so far, for the WQE log (`rnic-emu trace`).
    pub stamps: Option<Pending>,
}

impl InFlight {
    pub fn is_read(&self) -> bool {
        self.kind == Kind::ReadRequest
    }

    /// A READ, an atomic, a FLUSH or an ATOMIC WRITE: it completes with its response,
    /// not with an ACK, and counts against the outstanding READs and atomics.
    pub fn needs_response(&self) -> bool {
        matches!(self.kind, Kind::ReadRequest | Kind::Atomic | Kind::AtomicWrite | Kind::Flush)
    }

    /// Answered by RDMA READ responses: a READ with its data, a FLUSH or an ATOMIC WRITE
    /// with one of zero length.
    pub fn answered_by_read_response(&self) -> bool {
        matches!(self.kind, Kind::ReadRequest | Kind::AtomicWrite | Kind::Flush)
    }

    pub fn last_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts - 1)
    }
}

/// Send-side state of one QP (shared with the completer, which acknowledges it).
#[derive(Clone, Debug, Default)]
pub struct Requester {
    /// Payload bytes per request (the transport's MTU, fixed at RTR).
    pub mtu: u32,
    /// PSN of the next new request.
    pub next_psn: u32,
    /// Next PSN to transmit (rewound to the first unacknowledged one to retransmit).
    pub send_psn: u32,
    /// Oldest unacknowledged PSN.
    pub una: u32,
    /// One past the highest PSN ever sent (what is below it and sent again is a retransmission).
    pub sent_high: u32,
    /// Next SQ index to start (`sq.ci..started` are in flight).
    pub started: u16,
    pub inflight: VecDeque<InFlight>,
    /// Retransmission timeout (None: wait forever, IBA timeout 0).
    pub timeout: Option<Duration>,
    /// When the retransmission timer fires.
    pub timer: Option<Instant>,
    /// Where to resend from once `hold_until` has passed (RNR NAK, sequence NAK).
    pub resend_from: Option<u32>,
    /// Waiting (RNR) until then.
    pub hold_until: Option<Instant>,
    /// The earliest send doorbell whose WQEs have not all started (the WQE log's time
    /// zero).
    pub rang: Option<Instant>,
    /// READs and atomics this QP may have outstanding (max_rd_atomic, taken at RTS).
    pub max_rd_atomic: usize,
}

impl Requester {
    pub fn new(mtu: u32) -> Requester {
        Requester { mtu, ..Default::default() }
    }

    /// Takes the RTS attributes (`rd_atomic`: the context's byte, its low nibble).
    pub fn ready_to_send(&mut self, sq_psn: u32, timeout: u8, sq_ci: u16, rd_atomic: u8) {
        self.max_rd_atomic = rd_atomic_limit(rd_atomic);
        self.next_psn = sq_psn & PSN_MASK;
        self.send_psn = self.next_psn;
        self.una = self.next_psn;
        self.sent_high = self.next_psn;
        // 4.096 us * 2^timeout; at least 2 ms here, since both ends are host processes.
        self.timeout = (timeout != 0).then(|| Duration::from_nanos(4096u64 << timeout.min(31)).max(Duration::from_millis(2)));
        self.started = sq_ci;
    }

    fn window_open(&self) -> bool {
        psn_diff(self.send_psn, self.una) < WINDOW_PKTS
    }

    /// Rewinds the sender to `psn` (go-back-N) if it is still unacknowledged and sent.
    pub fn rewind(&mut self, psn: u32) {
        if psn_diff(psn, self.una) >= 0 && psn_diff(self.send_psn, psn) > 0 {
            self.send_psn = psn;
        }
    }

    /// When this QP needs the engine again (timer or RNR wait).
    pub fn deadline(&self) -> Option<Instant> {
        [self.timer, self.hold_until].into_iter().flatten().min()
    }

    /// Restarts (or stops, when nothing is in flight) the retransmission timer.
    pub fn restart_timer(&mut self, now: Instant) {
        self.timer = if self.inflight.is_empty() { None } else { self.timeout.map(|t| now + t) };
    }

    /// A WQE started: once every rung WQE has, the doorbell time is spent.
    fn note_started(&mut self, pi: u16) {
        if self.started == pi {
            self.rang = None;
        }
    }

    /// Whether a WQE in flight uses MR `index`.
    pub fn uses_mr(&self, index: u32) -> bool {
        self.inflight.iter().any(|w| w.local.uses(index))
    }

    /// Ends the record of WQE `w` (completed with `status`) into the WQE log.
    pub fn log_done(&self, log: &WqeLog, qpn: u32, dest_qpn: u32, w: &mut InFlight, status: u8) {
        let Some(p) = w.stamps.take() else { return };
        let op = match w.kind {
            Kind::ReadRequest => "read",
            Kind::Send => "send",
            Kind::Atomic => "atomic",
            Kind::AtomicWrite => "atomic-write",
            Kind::Flush => "flush",
            _ => "write",
        };
        let loopback = self.mtu == super::transport::LOOPBACK_MTU;
        log.finish(p, qpn, w.hdr.wr_id, op, w.len, loopback.then_some(dest_qpn), status);
    }
}

/// Request `i` of in-flight WQE `w` to QP `dest` (a READ: one request for what is still
/// missing).
/// `segs`: the bus segments of that request's payload (from [`payload_of`]).
fn request<'a>(qp: &Qp, mtu: u32, w: &'a InFlight, i: u32, segs: &'a [Segment]) -> Msg<'a> {
    let dest = qp.dest_qpn;
    let h = &w.hdr;
    let off = u64::from(i) * u64::from(mtu);
    let psn = psn_add(w.first_psn, i);
    if matches!(w.kind, Kind::AtomicWrite | Kind::Flush) {
        let (opcode, feth, len) = if w.kind == Kind::Flush { (op::FLUSH, Some(u32::from(h.rsvd0)), h.imm_data) } else { (op::ATOMIC_WRITE, None, 8) };
        let bth = Bth { opcode, pkey: 0xffff, dest_qp: dest, psn, ack_req: true, ..Default::default() };
        let reth = Reth { va: h.remote_addr, rkey: h.rkey, len };
        return Msg { reth: Some(reth), feth, payload: Payload::Bytes(&w.inline), ..Msg::new(bth) };
    }
    if let Some(ops) = w.atomic {
        let bth = Bth { opcode: atomic_opcode(h.opcode), pkey: 0xffff, dest_qp: dest, psn, ack_req: true, ..Default::default() };
        let atomic = AtomicEth { va: h.remote_addr, rkey: h.rkey, swap_add: ops.swap_add, compare: ops.compare };
        return Msg { atomic: Some(atomic), ..Msg::new(bth) };
    }
    if w.is_read() {
        let bth = Bth { opcode: opcode_for(Kind::ReadRequest, false, 0, 1), pkey: 0xffff, dest_qp: dest, psn, ack_req: true, ..Default::default() };
        let reth = Reth { va: h.remote_addr.wrapping_add(off), rkey: h.rkey, len: w.len.saturating_sub(off) as u32 };
        return Msg { reth: Some(reth), ..Msg::new(bth) };
    }
    let n = (w.len - off.min(w.len)).min(u64::from(mtu));
    let payload = if h.flags & WQE_FLAG_INLINE != 0 {
        // off + n <= len == inline.len(), both below 2^31.
        Payload::Bytes(w.inline.get(off as usize..(off + n) as usize).unwrap_or_default())
    } else {
        Payload::Segs { segs, off: 0, len: n }
    };
    let last = i + 1 == w.npkts;
    // UC: the UC opcode of the same place, and nothing to acknowledge.
    let uc = qp.service == Service::Uc;
    let bth = Bth {
        opcode: opcode_for(w.kind, w.imm, i, w.npkts) | if uc { op::UC } else { 0 },
        solicited: last && h.flags & WQE_FLAG_SOLICITED != 0,
        pkey: 0xffff,
        dest_qp: dest,
        psn,
        ack_req: !uc && (last || psn % ACK_REQ_EVERY == ACK_REQ_EVERY - 1),
        ..Default::default()
    };
    let reth = (i == 0 && w.kind == Kind::Write).then_some(Reth { va: h.remote_addr, rkey: h.rkey, len: w.len as u32 });
    let imm = (last && w.imm).then_some(h.imm_data);
    Msg { reth, imm, payload, ..Msg::new(bth) }
}

/// The bus segments of request `i`'s payload of `w` (none for inline data and READs).
fn payload_of(ctx: &Ctx, mtu: u32, w: &InFlight, i: u32) -> Result<Vec<Segment>, Failure> {
    if w.needs_response() || w.hdr.flags & WQE_FLAG_INLINE != 0 {
        return Ok(Vec::new());
    }
    let off = u64::from(i) * u64::from(mtu);
    let n = (w.len - off.min(w.len)).min(u64::from(mtu));
    ctx.local_part(&w.local, off, n)
}

/// Checks a parsed WQE: (its local buffers, its length).
fn resolve(ctx: &Ctx, qp: &Qp, w: &Wqe) -> Result<(Sgl, u64), Failure> {
    // UC carries SENDs and WRITEs only (IBA 9.8.4): a READ or an atomic is no operation of
    // the QP's, as rxe's requester refuses an opcode its QP type lacks.
    let kind = wqe_op(w.hdr.opcode).map(|o| o.kind);
    if qp.service == Service::Uc && matches!(kind, Some(Kind::ReadRequest | Kind::Atomic | Kind::AtomicWrite | Kind::Flush)) {
        return Err(fail(WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE));
    }
    // No local buffer: nothing to check, one request.
    if matches!(kind, Some(Kind::AtomicWrite | Kind::Flush)) {
        return Ok((Sgl::default(), 0));
    }
    if w.hdr.flags & WQE_FLAG_INLINE != 0 {
        return Ok((Sgl::default(), w.inline.len() as u64));
    }
    let access = wqe_op(w.hdr.opcode).map_or(0, |o| o.local_access);
    let sgl = ctx.local_sgl(&w.sges, qp.pd, access)?;
    let len = sgl.len();
    // An atomic's one SGE takes the 8-byte original value: any other length is a local
    // length error (as rxe's; IBA leaves it to the HCA).
    if w.atomic.is_some() && len != 8 {
        return Err(fail(WC_LOC_LEN_ERR, QP_ERR_LENGTH));
    }
    Ok((sgl, len))
}

/// Starts the next WQE if the window allows; true if anything happened.
pub fn start_next(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, t: &mut dyn Transport) -> bool {
    if rq.started == qp.sq.pi || !rq.window_open() {
        return false;
    }
    let limit = if rq.max_rd_atomic == 0 { MAX_READS } else { rq.max_rd_atomic };
    if rq.inflight.iter().filter(|w| w.needs_response()).count() >= limit {
        return false;
    }
    let idle = rq.inflight.is_empty();
    // A failure carries the header the error completion reports.
    let on = ctx.wqe_log.enabled();
    let mut stamps = Pending::start(rq.rang.unwrap_or_else(Instant::now), on);
    ctx.mem.tag(DmaTag::qp(DmaKind::WqeFetch, qpn));
    let started: Result<(Wqe, Sgl, u64), (Failure, WqeHeader)> = match read_wqe(ctx.mem, &qp.sq, rq.started, true) {
        Ok(w) => {
            stamps.stamp(Stage::WqeData);
            match resolve(ctx, qp, &w) {
                Ok((segs, len)) => Ok((w, segs, len)),
                Err(f) => Err((f, w.hdr)),
            }
        }
        Err(SlotError::Dma) => Err((fail(WC_FATAL_ERR, QP_ERR_DMA), WqeHeader::default())),
        Err(SlotError::Malformed(h)) => Err((fail(WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE), h)),
    };
    let (w, local, len) = match started {
        Ok(v) => v,
        Err((f, hdr)) => {
            // Errors complete in order: wait until everything before it is done.
            if !idle {
                return false;
            }
            if f.reason == QP_ERR_DMA {
                ctx.stats().inc(Counter::DmaErrors);
                crate::guest_warn!("{}: QP {qpn} send queue at {:#x} is not mapped guest memory", ctx.name, qp.sq.addr);
            } else {
                ctx.stats().inc(Counter::SendWqes);
                if f.reason == QP_ERR_BAD_WQE {
                    crate::guest_warn!("{}: QP {qpn} malformed WQE {hdr:?}", ctx.name);
                }
            }
            rq.started = rq.started.wrapping_add(1);
            rq.note_started(qp.sq.pi);
            ctx.finish_send(qpn, qp, &hdr, Err(f));
            return true;
        }
    };
    stamps.stamp(Stage::SglParsed);
    // The path of the local buffer (source of WRITE/SEND, destination of a READ).
    let first = if on { ctx.local_part(&local, 0, local.len().min(1)).unwrap_or_default() } else { Vec::new() };
    let path = first.first().map(|s| ctx.mem.path_of(s.addr));
    if wqe_op(w.hdr.opcode).is_some_and(|o| o.kind == Kind::ReadRequest) {
        stamps.dst = path;
    } else {
        stamps.src = path;
    }
    ctx.stats().inc(Counter::SendWqes);
    let op = wqe_op(w.hdr.opcode).copied();
    let (kind, imm) = op.map_or((Kind::Write, false), |o| (o.kind, o.imm));
    let npkts = packets_for(len, rq.mtu);
    // An ATOMIC WRITE's 8 bytes are its payload (in memory order); its operands are no
    // atomic's (whose ACK carries a value).
    let (inline, atomic) = match (kind, w.atomic) {
        (Kind::AtomicWrite, Some(ops)) => (ops.swap_add.to_le_bytes().to_vec(), None),
        _ => (w.inline, w.atomic),
    };
    let fl = InFlight { hdr: w.hdr, kind, imm, inline, local, len, first_psn: rq.next_psn, npkts, received: 0, atomic, stamps: on.then_some(stamps) };
    rq.next_psn = psn_add(rq.next_psn, npkts);
    rq.started = rq.started.wrapping_add(1);
    rq.note_started(qp.sq.pi);
    rq.inflight.push_back(fl);
    send_burst(ctx, qpn, qp, rq, t);
    true
}

/// Sends up to `BURST` requests from `send_psn` while the window is open.
pub fn send_burst(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, t: &mut dyn Transport) -> bool {
    let mut sent = 0;
    while sent < BURST {
        if rq.send_psn == rq.next_psn || !rq.window_open() {
            break;
        }
        let psn = rq.send_psn;
        let found = rq.inflight.iter().position(|w| psn_diff(psn, w.first_psn) >= 0 && psn_diff(psn, w.last_psn()) <= 0);
        let Some(pos) = found else {
            rq.send_psn = rq.next_psn; // nothing left to (re)send
            break;
        };
        let w = &rq.inflight[pos];
        let i = psn_diff(psn, w.first_psn) as u32;
        let (i, next) = if w.is_read() { (i.max(w.received), psn_add(w.first_psn, w.npkts)) } else { (i, psn_add(psn, 1)) };
        ctx.mem.tag(DmaTag { mr: w.local.first_mr(), ..DmaTag::qp(DmaKind::Payload, qpn) });
        let result = match payload_of(ctx, rq.mtu, w, i) {
            Ok(segs) => t.send(ctx.mem, &request(qp, rq.mtu, w, i, &segs)).map_err(|e| {
                crate::guest_warn!("{}: QP {qpn}: {e}", ctx.name);
                dma_fault(ctx.stats(), &e)
            }),
            Err(f) => Err(f),
        };
        let last = w.is_read() || i + 1 == w.npkts;
        if let Some(tr) = rq.inflight[pos].stamps.as_mut() {
            tr.stamp(Stage::Packetized);
            if last {
                tr.stamp(Stage::OnWire);
            }
        }
        rq.send_psn = next;
        let again = psn_diff(psn, rq.sent_high) < 0;
        if !again {
            rq.sent_high = next;
        }
        if rq.timer.is_none() {
            let now = ctx.now();
            rq.timer = rq.timeout.map(|t| now + t);
        }
        if again {
            ctx.stats().inc(Counter::Retransmits);
        }
        if let Err(f) = result {
            fail_front(ctx, qpn, qp, rq, f);
            break;
        }
        sent += 1;
        if qp.service == Service::Uc {
            uc_sent(ctx, qpn, qp, rq, next, last);
        }
    }
    sent > 0
}

/// UC: a request is done once sent (nothing comes back); the WQE of the last one completes.
/// UC sends in order and never again, so that WQE is the oldest in flight.
fn uc_sent(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, next: u32, last: bool) {
    rq.una = next;
    if !last {
        return;
    }
    complete_front(ctx, qpn, qp, rq);
}

/// Completes the oldest in-flight WQE with success (acknowledged, or a UC one sent).
pub fn complete_front(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester) {
    let Some(mut w) = rq.inflight.pop_front() else { return };
    if let Some(t) = w.stamps.as_mut() {
        t.stamp(Stage::Ack);
    }
    rq.log_done(ctx.wqe_log, qpn, qp.dest_qpn, &mut w, WC_SUCCESS);
    ctx.finish_send(qpn, qp, &w.hdr, Ok(w.len));
}

/// Fails the oldest in-flight WQE (the QP then goes to ERROR and flushes the rest).
pub fn fail_front(ctx: &mut Ctx, qpn: u32, qp: &mut Qp, rq: &mut Requester, f: Failure) {
    let Some(mut w) = rq.inflight.pop_front() else { return };
    rq.log_done(ctx.wqe_log, qpn, qp.dest_qpn, &mut w, f.status);
    rq.inflight.clear();
    rq.timer = None;
    rq.hold_until = None;
    ctx.finish_send(qpn, qp, &w.hdr, Err(f));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rnic::fabric::packet::op;

    /// An RC QP whose requests go to QP 4.
    fn to_qp4() -> Qp {
        Qp { dest_qpn: 4, ..Qp::new() }
    }

    #[test]
    fn a_long_message_asks_for_acks_before_the_window_closes() {
        let w = InFlight {
            hdr: WqeHeader { opcode: WQE_OP_RDMA_WRITE, ..Default::default() },
            kind: Kind::Write,
            imm: false,
            inline: Vec::new(),
            local: Sgl::default(),
            len: 64 << 10,
            first_psn: 5,
            npkts: 64,
            received: 0,
            atomic: None,
            stamps: None,
        };
        let asks: Vec<u32> = (0..64).filter(|&i| request(&to_qp4(), 1024, &w, i, &[]).bth.ack_req).map(|i| 5 + i).collect();
        assert_eq!(asks, [15, 31, 47, 63, 68], "every 16th PSN and the last");
        assert!(asks.windows(2).all(|p| (p[1] - p[0]) as i32 <= WINDOW_PKTS / 2));
    }

    #[test]
    fn a_message_is_cut_at_the_mtu() {
        assert_eq!(packets_for(0, 4096), 1);
        assert_eq!(packets_for(4097, 4096), 2);
        assert_eq!(packets_for(1 << 20, super::super::transport::LOOPBACK_MTU), 1, "loopback: one request up to 1 MiB");
        assert_eq!(packets_for(1 << 31, super::super::transport::LOOPBACK_MTU), 2048);
        let w = InFlight {
            hdr: WqeHeader { opcode: WQE_OP_SEND_IMM, imm_data: 9, ..Default::default() },
            kind: Kind::Send,
            imm: true,
            inline: Vec::new(),
            local: Sgl::default(),
            len: 5000,
            first_psn: PSN_MASK,
            npkts: 2,
            received: 0,
            atomic: None,
            stamps: None,
        };
        let qp = to_qp4();
        let a = request(&qp, 4096, &w, 0, &[]);
        let b = request(&qp, 4096, &w, 1, &[]);
        assert_eq!(
            (a.bth.opcode, a.bth.psn, a.payload.len(), a.imm, a.bth.ack_req),
            (op::SEND_FIRST, PSN_MASK, 4096, None, true),
            "PSN 0xffffff = 15 mod 16 asks for an ACK"
        );
        assert_eq!((b.bth.opcode, b.bth.psn, b.payload.len(), b.imm, b.bth.ack_req), (op::SEND_LAST_IMM, 0, 904, Some(9), true));
    }
}
