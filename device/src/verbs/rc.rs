//! Reliable Connection transport over the fabric (IBA ch. 9.7, docs/fabric.md), for QPs
//! whose destination is another node (`dest_ip` != 0).
//!
//! Requester: WQEs become packets of at most the path MTU with consecutive 24-bit PSNs;
//! they stay in flight (as WQE positions: payload is re-read from memory to retransmit)
//! until acknowledged. ACKs complete WQEs in order; a sequence NAK or the retransmission
//! timer resends from the first unacknowledged PSN (counting against `retry_cnt`); an RNR
//! NAK waits and resends (counting against `rnr_retry`); access and invalid-request NAKs
//! fail the WQE and the QP. RDMA READ responses carry data back and acknowledge what
//! precedes them.
//!
//! Responder: accepts the expected PSN only; a duplicate is re-acknowledged (a duplicate
//! READ is answered again); a packet beyond the expected PSN draws one sequence NAK per
//! gap. It checks rkeys, ranges and lengths before placing any byte, consumes RECVs for
//! SEND and WRITE WITH IMMEDIATE (RNR NAK when none is posted), and acknowledges when the
//! requester asks (last packet of a message) or every 16 packets.
//!
//! Not implemented: atomics, UD, path migration, credit-based flow control.

use super::abi::*;
use super::copy::{self, GuestMem};
use super::engine::Engine;
use super::exec::{fail, read_wqe, Failure, SlotError, Wqe};
use super::mr::Segment;
use super::qp::QpState;
use super::stats::Counter;
use crate::fabric::packet::{op, syndrome, Aeth, Bth, Packet, Reth, PSN_MASK};
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Packets one QP may have unacknowledged (the loopback socket buffers hold about this).
const WINDOW_PKTS: i32 = 32;
/// Packets one step sends before letting other QPs and incoming packets have a turn.
const BURST: u32 = 8;
/// RDMA READs one QP may have outstanding.
const MAX_READS: usize = 16;
/// The responder acknowledges at least every this many packets.
const ACK_EVERY: u32 = 16;



/// Sends packets to other nodes (the node's UDP port; an in-memory wire in tests).
pub trait Wire: Send + Sync {
    fn address(&self) -> Ipv4Addr;
    fn send(&self, dst: Ipv4Addr, pkt: &Packet);
}

impl Wire for crate::fabric::port::FabricPort {
    fn address(&self) -> Ipv4Addr {
        self.address
    }

    fn send(&self, dst: Ipv4Addr, pkt: &Packet) {
        crate::fabric::port::FabricPort::send(self, dst, pkt)
    }
}

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

/// A send WQE on the wire.
#[derive(Clone, Debug)]
pub struct InFlight {
    pub hdr: WqeHeader,
    pub inline: Vec<u8>,
    /// Local buffers (source for WRITE/SEND, destination for READ).
    pub local: Vec<Segment>,
    pub len: u64,
    pub first_psn: u32,
    pub npkts: u32,
    /// READ: response packets received so far.
    pub received: u32,
}

impl InFlight {
    fn is_read(&self) -> bool {
        self.hdr.opcode == WQE_OP_RDMA_READ
    }

    fn last_psn(&self) -> u32 {
        psn_add(self.first_psn, self.npkts - 1)
    }
}

/// What the responder is in the middle of (multi-packet messages).
#[derive(Clone, Debug)]
pub enum Incoming {
    Send { wr_id: u64, segs: Vec<Segment>, capacity: u64, offset: u64 },
    Write { segs: Vec<Segment>, len: u64, offset: u64 },
}

#[derive(Clone, Debug)]
pub struct Remote {
    pub dest_ip: Ipv4Addr,
    pub mtu: u32,
    pub retry_cnt: u8,
    pub timeout: Option<Duration>,
    // requester
    pub next_psn: u32,
    /// Next PSN to transmit (rewound to the first unacknowledged one to retransmit).
    pub send_psn: u32,
    /// Oldest unacknowledged PSN.
    pub una: u32,
    /// One past the highest PSN ever sent (what is below it and sent again is a retransmission).
    pub sent_high: u32,
    /// Next SQ index to put on the wire (`sq.ci..started` are in flight).
    pub started: u16,
    pub inflight: VecDeque<InFlight>,
    pub retries_left: u8,
    pub rnr_left: u8,
    pub timer: Option<Instant>,
    pub resend_from: Option<u32>,
    pub hold_until: Option<Instant>,
    // responder
    pub epsn: u32,
    pub msn: u32,
    pub nak_sent: bool,
    pub incoming: Option<Incoming>,
    pub since_ack: u32,
    /// READ responses still to send, paced like requests.
    pub responses: VecDeque<ReadResponse>,
}

/// An RDMA READ being answered: data from `segs`, packets `next..npkts` still to send.
#[derive(Clone, Debug)]
pub struct ReadResponse {
    pub segs: Vec<Segment>,
    pub len: u64,
    pub first_psn: u32,
    pub npkts: u32,
    pub next: u32,
    pub msn: u32,
}

impl Remote {
    pub fn new(dest_ip: Ipv4Addr, path_mtu: u8, rq_psn: u32) -> Remote {
        let log = if path_mtu == 0 { 12 } else { path_mtu.clamp(8, 12) };
        Remote {
            dest_ip,
            mtu: 1 << log,
            retry_cnt: 7,
            timeout: None,
            next_psn: 0,
            send_psn: 0,
            una: 0,
            sent_high: 0,
            started: 0,
            inflight: VecDeque::new(),
            retries_left: 7,
            rnr_left: 7,
            timer: None,
            resend_from: None,
            hold_until: None,
            epsn: rq_psn & PSN_MASK,
            msn: 0,
            nak_sent: false,
            incoming: None,
            since_ack: 0,
            responses: VecDeque::new(),
        }
    }

    /// Takes the RTS attributes.
    pub fn ready_to_send(&mut self, sq_psn: u32, retry_cnt: u8, timeout: u8, rnr_retry: u8, sq_ci: u16) {
        self.next_psn = sq_psn & PSN_MASK;
        self.send_psn = self.next_psn;
        self.una = self.next_psn;
        self.sent_high = self.next_psn;
        self.retry_cnt = retry_cnt.min(7);
        self.retries_left = self.retry_cnt;
        self.rnr_left = rnr_retry;
        // 4.096 us * 2^timeout; at least 2 ms here, since both ends are host processes.
        self.timeout = (timeout != 0).then(|| Duration::from_nanos(4096u64 << timeout.min(31)).max(Duration::from_millis(2)));
        self.started = sq_ci;
    }

    /// Whether the window has room for another packet.
    fn window_open(&self) -> bool {
        psn_diff(self.send_psn, self.una) < WINDOW_PKTS
    }

    /// Rewinds the sender to `psn` (go-back-N) if it is still unsent-or-unacknowledged.
    fn rewind(&mut self, psn: u32) {
        if psn_diff(psn, self.una) >= 0 && psn_diff(self.send_psn, psn) > 0 {
            self.send_psn = psn;
        }
    }

    /// When this QP needs the engine again (timer or RNR wait).
    pub fn deadline(&self) -> Option<Instant> {
        [self.timer, self.hold_until].into_iter().flatten().min()
    }

    /// Whether there is work to do right away (read responses to send).
    pub fn busy(&self) -> bool {
        !self.responses.is_empty()
    }
}

fn packets_for(len: u64, mtu: u32) -> u32 {
    len.div_ceil(u64::from(mtu)).max(1) as u32
}

/// The request opcode of packet `i` of `n` of a WRITE/SEND message.
fn request_opcode(wqe_op: u8, i: u32, n: u32) -> u8 {
    let (first, last) = (i == 0, i + 1 == n);
    match (wqe_op, first, last) {
        (WQE_OP_RDMA_WRITE, true, true) => op::WRITE_ONLY,
        (WQE_OP_RDMA_WRITE_IMM, true, true) => op::WRITE_ONLY_IMM,
        (WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM, true, false) => op::WRITE_FIRST,
        (WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM, false, false) => op::WRITE_MIDDLE,
        (WQE_OP_RDMA_WRITE, false, true) => op::WRITE_LAST,
        (WQE_OP_RDMA_WRITE_IMM, false, true) => op::WRITE_LAST_IMM,
        (WQE_OP_SEND, true, true) => op::SEND_ONLY,
        (WQE_OP_SEND_IMM, true, true) => op::SEND_ONLY_IMM,
        (_, true, false) => op::SEND_FIRST,
        (_, false, false) => op::SEND_MIDDLE,
        (WQE_OP_SEND_IMM, false, true) => op::SEND_LAST_IMM,
        _ => op::SEND_LAST,
    }
}

/// Reads `len` payload bytes at `offset` of a segment list.
fn gather(mem: &dyn GuestMem, segs: &[Segment], offset: u64, len: usize) -> Option<Vec<u8>> {
    let mut out = vec![0u8; len];
    copy::read_at(mem, segs, offset, &mut out).ok()?;
    Some(out)
}

/// Packet `i` of in-flight WQE `w` for destination QP `dest` (a READ: one request for what
/// is still missing); None when the payload cannot be read.
fn request_packet(mem: &dyn GuestMem, dest: u32, mtu: u32, w: &InFlight, i: u32) -> Option<Packet> {
    let h = &w.hdr;
    let off = u64::from(i) * u64::from(mtu);
    if w.is_read() {
        let bth = Bth { opcode: op::READ_REQUEST, pkey: 0xffff, dest_qp: dest, psn: psn_add(w.first_psn, i), ack_req: true, ..Default::default() };
        let reth = Reth { va: h.remote_addr.wrapping_add(off), rkey: h.rkey, len: w.len.saturating_sub(off) as u32 };
        return Some(Packet { bth, reth: Some(reth), ..Default::default() });
    }
    let n = (w.len - off.min(w.len)).min(u64::from(mtu)) as usize;
    let payload = if h.flags & WQE_FLAG_INLINE != 0 {
        w.inline.get(off as usize..off as usize + n).map(<[u8]>::to_vec)
    } else {
        gather(mem, &w.local, off, n)
    }?;
    let last = i + 1 == w.npkts;
    let bth = Bth {
        opcode: request_opcode(h.opcode, i, w.npkts),
        solicited: last && h.flags & WQE_FLAG_SOLICITED != 0,
        pkey: 0xffff,
        dest_qp: dest,
        psn: psn_add(w.first_psn, i),
        ack_req: last,
        ..Default::default()
    };
    let reth = (i == 0 && matches!(h.opcode, WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM))
        .then_some(Reth { va: h.remote_addr, rkey: h.rkey, len: w.len as u32 });
    let imm = (last && matches!(h.opcode, WQE_OP_RDMA_WRITE_IMM | WQE_OP_SEND_IMM)).then_some(h.imm_data);
    Some(Packet { bth, reth, imm, payload, ..Default::default() })
}

/// Writes `data` at `offset` of a segment list.
fn scatter(mem: &dyn GuestMem, segs: &[Segment], offset: u64, data: &[u8]) -> bool {
    copy::write_at(mem, segs, offset, data).is_ok()
}

fn nak_for(status: u8) -> u8 {
    match status {
        WC_REM_ACCESS_ERR => syndrome::NAK_REM_ACCESS,
        WC_REM_INV_REQ_ERR => syndrome::NAK_INV_REQ,
        _ => syndrome::NAK_REM_OP,
    }
}

impl Engine {
    fn remote(&mut self, qpn: u32) -> Option<&mut Remote> {
        self.qps.get_mut(qpn as usize).and_then(|q| q.remote.as_deref_mut())
    }

    fn wire_send(&self, qpn: u32, pkt: Packet) {
        let (Some(wire), Some(dst)) = (&self.wire, self.qps[qpn as usize].remote.as_ref().map(|r| r.dest_ip)) else {
            return;
        };
        wire.send(dst, &pkt);
    }

    fn send_ack(&mut self, qpn: u32, psn: u32, syn: u8) {
        let qp = &self.qps[qpn as usize];
        let Some(r) = qp.remote.as_ref() else { return };
        let bth = Bth { opcode: op::ACK, pkey: 0xffff, dest_qp: qp.dest_qpn, psn, ..Default::default() };
        let pkt = Packet { bth, aeth: Some(Aeth { syndrome: syn, msn: r.msn }), ..Default::default() };
        let counter = if syn == syndrome::ACK { Counter::AcksSent } else { Counter::NaksSent };
        self.shared.stats.inc(counter);
        self.wire_send(qpn, pkt);
    }

    // ---- requester ----

    /// One unit of requester work for a remote QP in RTS; returns whether anything happened.
    pub(super) fn remote_step(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let responded = self.send_responses(mem, qpn);
        if self.qps[qpn as usize].state != QpState::Rts || !self.enabled {
            return responded;
        }
        let now = Instant::now();
        let Some(r) = self.remote(qpn) else { return responded };
        if r.timer.is_some_and(|t| now >= t) {
            self.on_timeout(mem, qpn);
            return true;
        }
        if r.hold_until.is_some_and(|t| now < t) {
            return false;
        }
        r.hold_until = None;
        if let Some(from) = r.resend_from.take() {
            r.rewind(from);
        }
        if r.send_psn != r.next_psn {
            return self.send_burst(mem, qpn) || responded;
        }
        self.start_next(mem, qpn) || responded
    }

    /// Sends up to `BURST` READ response packets.
    fn send_responses(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let mut sent = 0;
        while sent < BURST {
            let qp = &self.qps[qpn as usize];
            let Some(r) = qp.remote.as_deref() else { break };
            let Some(rr) = r.responses.front() else { break };
            let i = rr.next;
            let off = u64::from(i) * u64::from(r.mtu);
            let size = (rr.len - off.min(rr.len)).min(u64::from(r.mtu)) as usize;
            let opcode = match (i == 0, i + 1 == rr.npkts) {
                (true, true) => op::READ_RESPONSE_ONLY,
                (true, false) => op::READ_RESPONSE_FIRST,
                (false, false) => op::READ_RESPONSE_MIDDLE,
                (false, true) => op::READ_RESPONSE_LAST,
            };
            let aeth = (opcode != op::READ_RESPONSE_MIDDLE).then_some(Aeth { syndrome: syndrome::ACK, msn: rr.msn });
            let bth = Bth { opcode, pkey: 0xffff, dest_qp: qp.dest_qpn, psn: psn_add(rr.first_psn, i), ..Default::default() };
            let payload = gather(mem, &rr.segs, off, size);
            if let Some(r) = self.remote(qpn) {
                if let Some(front) = r.responses.front_mut() {
                    front.next += 1;
                    if front.next >= front.npkts {
                        r.responses.pop_front();
                    }
                }
            }
            let Some(payload) = payload else {
                self.shared.stats.inc(Counter::DmaErrors);
                continue;
            };
            self.wire_send(qpn, Packet { bth, aeth, payload, ..Default::default() });
            sent += 1;
        }
        sent > 0
    }

    fn on_timeout(&mut self, mem: &dyn GuestMem, qpn: u32) {
        let Some(r) = self.remote(qpn) else { return };
        r.timer = None;
        if r.inflight.is_empty() {
            return;
        }
        let exhausted = r.retries_left == 0;
        if !exhausted {
            r.retries_left -= 1;
            let una = r.una;
            r.rewind(una);
        }
        self.shared.stats.inc(Counter::Timeouts);
        if exhausted {
            log::info!("{}: QP {qpn}: retries exhausted", self.name);
            self.fail_front(mem, qpn, fail(WC_RETRY_EXC_ERR, QP_ERR_RETRY));
        }
    }

    /// Puts the next WQE on the wire if the window allows.
    fn start_next(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let qp = &self.qps[qpn as usize];
        let Some(r) = qp.remote.as_deref() else { return false };
        if r.started == qp.sq.pi || !r.window_open() {
            return false;
        }
        if r.inflight.iter().filter(|w| w.is_read()).count() >= MAX_READS {
            return false;
        }
        let parsed = read_wqe(mem, &qp.sq, r.started, true);
        let (pd, mtu, idle) = (qp.pd, r.mtu, r.inflight.is_empty());
        // A failure carries the header the error completion reports.
        let wqe: Result<(Wqe, Vec<Segment>, u64), (Failure, WqeHeader)> = match parsed {
            Ok(w) if w.hdr.flags & WQE_FLAG_INLINE != 0 => {
                let n = w.inline.len() as u64;
                Ok((w, Vec::new(), n))
            }
            Ok(w) => {
                let access = if w.hdr.opcode == WQE_OP_RDMA_READ { ACCESS_LOCAL_WRITE } else { 0 };
                match self.local_segments(&w.sges, pd, access) {
                    Ok((segs, len)) => Ok((w, segs, len)),
                    Err(f) => Err((f, w.hdr)),
                }
            }
            Err(SlotError::Dma) => Err((fail(WC_FATAL_ERR, QP_ERR_DMA), WqeHeader::default())),
            Err(SlotError::Malformed(h)) => Err((fail(WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE), h)),
        };
        let (w, local, len) = match wqe {
            Ok(v) => v,
            Err((f, hdr)) => {
                // Errors complete in order: wait until everything before it is done.
                if !idle {
                    return false;
                }
                self.shared.stats.inc(Counter::SendWqes);
                if let Some(r) = self.remote(qpn) {
                    r.started = r.started.wrapping_add(1);
                }
                self.finish_send(mem, qpn, &hdr, Err(f));
                return true;
            }
        };
        self.shared.stats.inc(Counter::SendWqes);
        let npkts = packets_for(len, mtu);
        let Some(r) = self.remote(qpn) else { return false };
        let fl = InFlight { hdr: w.hdr, inline: w.inline, local, len, first_psn: r.next_psn, npkts, received: 0 };
        r.next_psn = psn_add(r.next_psn, npkts);
        r.started = r.started.wrapping_add(1);
        r.inflight.push_back(fl);
        self.send_burst(mem, qpn);
        true
    }

    /// Sends up to `BURST` packets from `send_psn` while the window is open.
    fn send_burst(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let mut sent = 0;
        while sent < BURST {
            let qp = &self.qps[qpn as usize];
            let Some(r) = qp.remote.as_deref() else { break };
            if r.send_psn == r.next_psn || !r.window_open() {
                break;
            }
            let psn = r.send_psn;
            let found = r.inflight.iter().find(|w| psn_diff(psn, w.first_psn) >= 0 && psn_diff(psn, w.last_psn()) <= 0);
            let Some(w) = found else {
                if let Some(r) = self.remote(qpn) {
                    r.send_psn = r.next_psn; // nothing left to (re)send
                }
                break;
            };
            let i = psn_diff(psn, w.first_psn) as u32;
            let (i, next) = if w.is_read() { (i.max(w.received), psn_add(w.first_psn, w.npkts)) } else { (i, psn_add(psn, 1)) };
            let pkt = request_packet(mem, qp.dest_qpn, r.mtu, w, i);
            let Some(r) = self.remote(qpn) else { break };
            r.send_psn = next;
            let again = psn_diff(psn, r.sent_high) < 0;
            if !again {
                r.sent_high = next;
            }
            if r.timer.is_none() {
                r.timer = r.timeout.map(|t| Instant::now() + t);
            }
            if again {
                self.shared.stats.inc(Counter::Retransmits);
            }
            let Some(pkt) = pkt else {
                self.shared.stats.inc(Counter::DmaErrors);
                self.fail_front(mem, qpn, fail(WC_FATAL_ERR, QP_ERR_DMA));
                break;
            };
            self.wire_send(qpn, pkt);
            sent += 1;
        }
        sent > 0
    }

    /// Completes in-flight WQEs fully acknowledged through `psn` (READs need their data).
    fn acked_through(&mut self, mem: &dyn GuestMem, qpn: u32, psn: u32) {
        loop {
            let Some(r) = self.remote(qpn) else { return };
            let Some(front) = r.inflight.front() else { break };
            if front.is_read() || psn_diff(psn, front.last_psn()) < 0 {
                break;
            }
            let Some(w) = r.inflight.pop_front() else { break };
            self.finish_send(mem, qpn, &w.hdr, Ok(w.len));
        }
        if let Some(r) = self.remote(qpn) {
            let next = psn_add(psn, 1);
            if psn_diff(next, r.una) > 0 && psn_diff(r.next_psn, next) >= 0 {
                r.una = next;
                if psn_diff(r.send_psn, r.una) < 0 {
                    r.send_psn = r.una;
                }
            }
            r.retries_left = r.retry_cnt;
            r.timer = if r.inflight.is_empty() { None } else { r.timeout.map(|t| Instant::now() + t) };
        }
    }

    /// Fails the oldest in-flight WQE (the QP then goes to ERROR and flushes the rest).
    fn fail_front(&mut self, mem: &dyn GuestMem, qpn: u32, f: Failure) {
        let Some(r) = self.remote(qpn) else { return };
        let Some(w) = r.inflight.pop_front() else { return };
        r.inflight.clear();
        r.timer = None;
        self.finish_send(mem, qpn, &w.hdr, Err(f));
    }

    /// An ACK, NAK or READ response for a requester QP.
    fn on_response(&mut self, mem: &dyn GuestMem, qpn: u32, pkt: &Packet) {
        let psn = pkt.bth.psn;
        if pkt.bth.opcode == op::ACK {
            let Some(aeth) = pkt.aeth else { return };
            match aeth.syndrome & syndrome::KIND_MASK {
                0x00 => self.acked_through(mem, qpn, psn),
                syndrome::RNR_NAK => {
                    self.acked_through(mem, qpn, psn_add(psn, PSN_MASK));
                    let qp = &mut self.qps[qpn as usize];
                    let (infinite, delay) = (qp.rnr_retry == 7, Duration::from_micros(u64::from(qp.rnr_timer_us).max(10)));
                    let Some(r) = qp.remote.as_deref_mut() else { return };
                    if !infinite && r.rnr_left == 0 {
                        self.fail_front(mem, qpn, fail(WC_RNR_RETRY_EXC_ERR, QP_ERR_RNR));
                        return;
                    }
                    if !infinite {
                        r.rnr_left -= 1;
                    }
                    r.hold_until = Some(Instant::now() + delay);
                    r.resend_from = Some(psn);
                    self.shared.stats.inc(Counter::RnrRetries);
                }
                _ if aeth.syndrome == syndrome::NAK_SEQ_ERR => {
                    self.acked_through(mem, qpn, psn_add(psn, PSN_MASK));
                    let Some(r) = self.remote(qpn) else { return };
                    if r.retries_left == 0 {
                        self.fail_front(mem, qpn, fail(WC_RETRY_EXC_ERR, QP_ERR_RETRY));
                        return;
                    }
                    r.retries_left -= 1;
                    r.resend_from = Some(psn);
                }
                _ => {
                    self.acked_through(mem, qpn, psn_add(psn, PSN_MASK));
                    let (status, reason) = match aeth.syndrome {
                        syndrome::NAK_REM_ACCESS => (WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS),
                        syndrome::NAK_INV_REQ => (WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID),
                        _ => (WC_REM_OP_ERR, QP_ERR_REMOTE_INVALID),
                    };
                    self.fail_front(mem, qpn, fail(status, reason));
                }
            }
            return;
        }
        // READ response: must be the next packet the oldest READ expects.
        let Some(r) = self.remote(qpn) else { return };
        let Some(pos) = r.inflight.iter().position(InFlight::is_read) else { return };
        let w = &r.inflight[pos];
        if psn != psn_add(w.first_psn, w.received) {
            return; // out of order or duplicate: the timer recovers
        }
        if pos > 0 {
            // A READ response acknowledges everything before the READ.
            let before = psn_add(w.first_psn, PSN_MASK);
            self.acked_through(mem, qpn, before);
        }
        let Some(r) = self.remote(qpn) else { return };
        let Some(w) = r.inflight.front_mut().filter(|w| w.is_read() && psn == psn_add(w.first_psn, w.received)) else { return };
        let off = u64::from(w.received) * u64::from(r.mtu);
        let fits = off + pkt.payload.len() as u64 <= w.len && pkt.payload.len() as u32 <= r.mtu;
        if !fits || !scatter(mem, &w.local, off, &pkt.payload) {
            self.fail_front(mem, qpn, fail(WC_LOC_LEN_ERR, QP_ERR_LENGTH));
            return;
        }
        self.shared.stats.add(Counter::BytesRead, pkt.payload.len() as u64);
        let Some(r) = self.remote(qpn) else { return };
        let (retry_cnt, timeout) = (r.retry_cnt, r.timeout);
        let Some(w) = r.inflight.front_mut() else { return };
        w.received += 1;
        let done = w.received == w.npkts;
        let got = psn_add(w.first_psn, w.received);
        if psn_diff(got, r.una) > 0 {
            r.una = got;
        }
        r.retries_left = retry_cnt;
        r.timer = timeout.map(|t| Instant::now() + t);
        if done {
            if let Some(w) = r.inflight.pop_front() {
                self.finish_send(mem, qpn, &w.hdr, Ok(w.len));
            }
        }
    }

    // ---- responder ----

    /// A request packet for a responder QP.
    fn on_request(&mut self, mem: &dyn GuestMem, qpn: u32, src_qpn: u32, pkt: &Packet) {
        let Some(r) = self.remote(qpn) else { return };
        let d = psn_diff(pkt.bth.psn, r.epsn);
        if d > 0 {
            if !r.nak_sent {
                r.nak_sent = true;
                let epsn = r.epsn;
                self.send_ack(qpn, epsn, syndrome::NAK_SEQ_ERR);
            }
            return;
        }
        if d < 0 {
            if pkt.bth.opcode == op::READ_REQUEST {
                self.answer_read(qpn, pkt, false);
            } else {
                let last = psn_add(r.epsn, PSN_MASK);
                self.send_ack(qpn, last, syndrome::ACK);
            }
            return;
        }
        r.nak_sent = false;
        if pkt.bth.opcode == op::READ_REQUEST {
            self.answer_read(qpn, pkt, true);
            return;
        }
        match self.place(mem, qpn, src_qpn, pkt) {
            Ok(true) => {}
            Ok(false) => return, // RNR NAK sent, PSN not consumed
            Err(f) => {
                let epsn = pkt.bth.psn;
                if let Some(r) = self.remote(qpn) {
                    r.incoming = None;
                }
                self.send_ack(qpn, epsn, nak_for(f.status));
                return;
            }
        }
        let Some(r) = self.remote(qpn) else { return };
        r.epsn = psn_add(r.epsn, 1);
        r.since_ack += 1;
        if pkt.bth.ack_req || r.since_ack >= ACK_EVERY {
            r.since_ack = 0;
            self.send_ack(qpn, pkt.bth.psn, syndrome::ACK);
        }
    }

    /// Places a SEND or WRITE packet. Ok(false): no RECV posted (an RNR NAK went out).
    fn place(&mut self, mem: &dyn GuestMem, qpn: u32, src_qpn: u32, pkt: &Packet) -> Result<bool, Failure> {
        let opc = pkt.bth.opcode;
        let first = matches!(opc, op::SEND_FIRST | op::SEND_ONLY | op::SEND_ONLY_IMM | op::WRITE_FIRST | op::WRITE_ONLY | op::WRITE_ONLY_IMM);
        let last = !matches!(opc, op::SEND_FIRST | op::SEND_MIDDLE | op::WRITE_FIRST | op::WRITE_MIDDLE);
        let is_send = opc <= op::SEND_ONLY_IMM;
        let mtu = self.remote(qpn).map_or(4096, |r| r.mtu) as usize;
        let inv = || fail(WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID);
        if pkt.payload.len() > mtu || (!last && pkt.payload.len() != mtu) {
            return Err(inv());
        }
        if first {
            let incoming = if is_send {
                match self.responder_recv(mem, qpn) {
                    Ok(Some(rc)) => Incoming::Send { wr_id: rc.wr_id, segs: rc.segs, capacity: rc.capacity, offset: 0 },
                    Ok(None) => {
                        let psn = pkt.bth.psn;
                        self.send_ack(qpn, psn, syndrome::RNR_NAK | 1);
                        return Ok(false);
                    }
                    Err(f) => return Err(self.responder_failure(mem, qpn, src_qpn, f)),
                }
            } else {
                let reth = pkt.reth.ok_or_else(inv)?;
                let segs = self.responder_range(qpn, reth.rkey, reth.va, u64::from(reth.len), ACCESS_REMOTE_WRITE)?;
                Incoming::Write { segs, len: u64::from(reth.len), offset: 0 }
            };
            if let Some(r) = self.remote(qpn) {
                r.incoming = Some(incoming);
            }
        }
        let Some(incoming) = self.remote(qpn).and_then(|r| r.incoming.clone()) else { return Err(inv()) };
        let n = pkt.payload.len() as u64;
        match incoming {
            Incoming::Send { wr_id, segs, capacity, offset } => {
                if !is_send {
                    return Err(inv());
                }
                if offset + n > capacity {
                    let f = Failure { status: WC_REM_INV_REQ_ERR, reason: QP_ERR_REMOTE_INVALID, responder: Some((WC_LOC_LEN_ERR, QP_ERR_LENGTH)) };
                    return Err(self.responder_failure_with(mem, qpn, src_qpn, wr_id, f));
                }
                if !scatter(mem, &segs, offset, &pkt.payload) {
                    return Err(fail(WC_REM_OP_ERR, QP_ERR_DMA));
                }
                self.shared.stats.add(Counter::BytesSent, n);
                if last {
                    let mut cqe = Cqe { opcode: CQE_OP_RECV, byte_len: (offset + n) as u32, ..Default::default() };
                    if let Some(imm) = pkt.imm {
                        cqe.imm_data = imm;
                        cqe.flags = CQE_FLAG_IMM;
                    }
                    self.complete_recv(mem, qpn, wr_id, src_qpn, cqe);
                    self.end_message(qpn);
                } else if let Some(r) = self.remote(qpn) {
                    r.incoming = Some(Incoming::Send { wr_id, segs, capacity, offset: offset + n });
                }
            }
            Incoming::Write { segs, len, offset } => {
                if is_send || offset + n > len {
                    return Err(inv());
                }
                if last && pkt.imm.is_some() {
                    // WRITE WITH IMMEDIATE consumes a RECV: check before placing the data.
                    if self.qp(qpn).is_some_and(|q| q.rq.is_empty()) {
                        let psn = pkt.bth.psn;
                        self.send_ack(qpn, psn, syndrome::RNR_NAK | 1);
                        return Ok(false);
                    }
                }
                if !scatter(mem, &segs, offset, &pkt.payload) {
                    return Err(fail(WC_REM_OP_ERR, QP_ERR_DMA));
                }
                self.shared.stats.add(Counter::BytesWritten, n);
                if last {
                    if let Some(imm) = pkt.imm {
                        match self.responder_recv(mem, qpn) {
                            Ok(Some(rc)) => {
                                let cqe = Cqe { opcode: CQE_OP_RECV_RDMA_IMM, byte_len: (offset + n) as u32, imm_data: imm, flags: CQE_FLAG_IMM, ..Default::default() };
                                self.complete_recv(mem, qpn, rc.wr_id, src_qpn, cqe);
                            }
                            Ok(None) => return Ok(false),
                            Err(f) => return Err(self.responder_failure(mem, qpn, src_qpn, f)),
                        }
                    }
                    self.end_message(qpn);
                } else if let Some(r) = self.remote(qpn) {
                    r.incoming = Some(Incoming::Write { segs, len, offset: offset + n });
                }
            }
        }
        Ok(true)
    }

    fn end_message(&mut self, qpn: u32) {
        if let Some(r) = self.remote(qpn) {
            r.incoming = None;
            r.msn = psn_add(r.msn, 1);
        }
    }

    /// A RECV-side failure: the responder's RECV completes in error and its QP goes to
    /// ERROR; the requester gets the NAK for `f.status`.
    fn responder_failure(&mut self, mem: &dyn GuestMem, qpn: u32, src_qpn: u32, f: Failure) -> Failure {
        let _ = self.fail_with_responder(mem, src_qpn, qpn, None, Failure { status: f.status, reason: f.reason, responder: f.responder });
        fail(f.status, f.reason)
    }

    fn responder_failure_with(&mut self, mem: &dyn GuestMem, qpn: u32, src_qpn: u32, wr_id: u64, f: Failure) -> Failure {
        let _ = self.fail_with_responder(mem, src_qpn, qpn, Some(wr_id), Failure { status: f.status, reason: f.reason, responder: f.responder });
        fail(f.status, f.reason)
    }

    /// Answers an RDMA READ request (again, for a duplicate): response packets carry the data.
    fn answer_read(&mut self, qpn: u32, pkt: &Packet, fresh: bool) {
        let Some(reth) = pkt.reth else { return };
        let len = u64::from(reth.len);
        let segs = match self.responder_range(qpn, reth.rkey, reth.va, len, ACCESS_REMOTE_READ) {
            Ok(s) => s,
            Err(f) => {
                if fresh {
                    self.send_ack(qpn, pkt.bth.psn, nak_for(f.status));
                }
                return;
            }
        };
        let Some(r) = self.remote(qpn) else { return };
        let n = packets_for(len, r.mtu);
        // A duplicate request replaces what is queued for the same PSNs.
        let first_psn = pkt.bth.psn;
        r.responses.retain(|q| psn_diff(q.first_psn, first_psn) < 0 && psn_diff(psn_add(q.first_psn, q.npkts), first_psn) <= 0);
        r.responses.push_back(ReadResponse { segs, len, first_psn, npkts: n, next: 0, msn: r.msn });
        if fresh {
            if let Some(r) = self.remote(qpn) {
                r.epsn = psn_add(r.epsn, n);
                r.msn = psn_add(r.msn, 1);
            }
        }
    }

    /// A packet from the fabric: to the QP it names, if that QP talks to its sender.
    pub fn on_packet(&mut self, mem: &dyn GuestMem, from: Ipv4Addr, pkt: &Packet) {
        let qpn = pkt.bth.dest_qp;
        let ok = self.qp(qpn).is_some_and(|q| {
            q.remote.as_ref().is_some_and(|r| r.dest_ip == from) && matches!(q.state, QpState::Rtr | QpState::Rts)
        });
        if !ok {
            self.shared.stats.inc(Counter::PktsDropped);
            log::debug!("{}: packet {:#x} psn {} for QP {qpn} from {from} dropped (no such connected QP)", self.name, pkt.bth.opcode, pkt.bth.psn);
            return;
        }
        self.shared.stats.inc(Counter::PktsReceived);
        let src_qpn = self.qps[qpn as usize].dest_qpn;
        if matches!(pkt.bth.opcode, op::ACK | op::READ_RESPONSE_FIRST..=op::READ_RESPONSE_ONLY) {
            if self.qps[qpn as usize].state == QpState::Rts {
                self.on_response(mem, qpn, pkt);
            }
        } else {
            self.on_request(mem, qpn, src_qpn, pkt);
        }
    }
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
    fn opcodes_per_position() {
        assert_eq!(request_opcode(WQE_OP_RDMA_WRITE, 0, 1), op::WRITE_ONLY);
        assert_eq!(request_opcode(WQE_OP_RDMA_WRITE_IMM, 2, 3), op::WRITE_LAST_IMM);
        assert_eq!(request_opcode(WQE_OP_SEND, 1, 3), op::SEND_MIDDLE);
        assert_eq!(request_opcode(WQE_OP_SEND_IMM, 0, 1), op::SEND_ONLY_IMM);
        assert_eq!(packets_for(0, 4096), 1);
        assert_eq!(packets_for(4097, 4096), 2);
    }
}
