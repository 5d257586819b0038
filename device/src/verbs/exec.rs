//! Executing send-queue WQEs (docs/verbs.md §4): copy the WQE once, validate it, resolve
//! every key and range of both sides, and only then move data; then complete it. On one
//! node the responder is the destination QP on the same engine; the requester/responder
//! split (`responder_*`) is where the fabric will plug in for remote peers.

use super::abi::*;
use super::copy::{copy, GuestMem, Source};
use super::engine::{send_cqe_opcode, Engine};
use super::mr::{KeyError, Segment};
use super::qp::{QpState, Ring, RnrWait};
use super::stats::Counter;
use crate::dma::DmaError;
use std::time::{Duration, Instant};
use vm_memory::ByteValued;

const HDR: usize = std::mem::size_of::<WqeHeader>();
const SGE: usize = std::mem::size_of::<Sge>();
/// Largest message: 2^31 bytes (IBA 9.4.1).
const MAX_MSG: u64 = 1 << 31;
const MIN_RNR_DELAY: Duration = Duration::from_micros(10);

/// A WQE copied out of guest memory and parsed.
pub(super) struct Wqe {
    pub(super) hdr: WqeHeader,
    pub(super) sges: Vec<Sge>,
    pub(super) inline: Vec<u8>,
}

/// An error completion for the requester, and optionally one for the responder's RECV.
pub(super) struct Failure {
    pub(super) status: u8,
    pub(super) reason: u8,
    /// (status, reason) for the responder's consumed RECV; the responder QP goes to ERROR.
    pub(super) responder: Option<(u8, u8)>,
}

pub(super) fn fail(status: u8, reason: u8) -> Failure {
    Failure { status, reason, responder: None }
}

pub(super) enum Outcome {
    Done { byte_len: u64 },
    Failed(Failure),
    /// No RECV posted at the responder.
    Rnr,
}

/// A RECV WQE at the responder, resolved to its buffers.
pub(super) struct Recv {
    pub(super) wr_id: u64,
    pub(super) segs: Vec<Segment>,
    pub(super) capacity: u64,
}

/// Why a ring slot gave no WQE.
pub(super) enum SlotError {
    /// The slot is not mapped guest memory.
    Dma,
    /// The WQE is malformed; its header as read (for the error completion).
    Malformed(WqeHeader),
}

/// Reads and checks WQE slot `idx` of `ring` (a send queue when `send`).
pub(super) fn read_wqe(mem: &dyn GuestMem, ring: &Ring, idx: u16, send: bool) -> Result<Wqe, SlotError> {
    let stride = ring.stride() as usize;
    let mut buf = [0u8; 256];
    let slot = buf.get_mut(..stride).ok_or(SlotError::Dma)?;
    let addr = ring.slot_addr(idx).ok_or(SlotError::Dma)?;
    mem.read(addr, slot).map_err(|_| SlotError::Dma)?;
    parse(slot, stride, send).map_err(|()| {
        let mut hdr = WqeHeader::default();
        hdr.as_mut_slice().copy_from_slice(&slot[..HDR]);
        SlotError::Malformed(hdr)
    })
}

fn parse(buf: &[u8], stride: usize, send: bool) -> Result<Wqe, ()> {
    let mut hdr = WqeHeader::default();
    hdr.as_mut_slice().copy_from_slice(buf.get(..HDR).ok_or(())?);
    let room = stride - HDR;
    let op_ok = if send {
        matches!(hdr.opcode, WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM | WQE_OP_RDMA_READ | WQE_OP_SEND | WQE_OP_SEND_IMM)
    } else {
        hdr.opcode == WQE_OP_RECV
    };
    let known_flags = WQE_FLAG_SIGNALED | WQE_FLAG_INLINE | WQE_FLAG_SOLICITED;
    if !op_ok || hdr.flags & !known_flags != 0 || hdr.rsvd0 != 0 {
        return Err(());
    }
    if hdr.flags & WQE_FLAG_INLINE != 0 {
        let inline_ok = send && hdr.opcode != WQE_OP_RDMA_READ && (hdr.inline_len as usize) <= room && hdr.num_sge == 0;
        if !inline_ok {
            return Err(());
        }
        let data = buf.get(HDR..HDR + hdr.inline_len as usize).ok_or(())?.to_vec();
        return Ok(Wqe { hdr, sges: Vec::new(), inline: data });
    }
    if usize::from(hdr.num_sge) > room / SGE {
        return Err(());
    }
    let mut sges = Vec::with_capacity(usize::from(hdr.num_sge));
    for i in 0..usize::from(hdr.num_sge) {
        let mut s = Sge::default();
        s.as_mut_slice().copy_from_slice(buf.get(HDR + i * SGE..HDR + (i + 1) * SGE).ok_or(())?);
        sges.push(s);
    }
    Ok(Wqe { hdr, sges, inline: Vec::new() })
}

impl Engine {
    /// Runs every runnable QP for a while; returns whether anything happened.
    pub fn run(&mut self, mem: &dyn GuestMem, budget: usize) -> bool {
        let mut progress = false;
        let n = self.qps.len();
        for k in 0..n {
            let qpn = ((self.next_qp + k) % n) as u32;
            // A remote QP gets one step (a burst of packets) per pass, so that incoming
            // ACKs are handled between bursts.
            let steps = if self.qps[qpn as usize].remote.is_some() { 1 } else { budget };
            for _ in 0..steps {
                if !self.step(mem, qpn) {
                    break;
                }
                progress = true;
            }
        }
        self.next_qp = (self.next_qp + 1) % n;
        progress
    }

    /// One unit of work on a QP: a flush in ERROR, or one send WQE in RTS.
    fn step(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let qp = &self.qps[qpn as usize];
        match qp.state {
            QpState::Err => self.flush_one(mem, qpn),
            QpState::Rtr | QpState::Rts if qp.remote.is_some() => self.remote_step(mem, qpn),
            QpState::Rts if self.enabled && !qp.sq.is_empty() => {
                if qp.rnr.is_some_and(|w| Instant::now() < w.next_try) {
                    return false;
                }
                self.execute_head(mem, qpn)
            }
            _ => false,
        }
    }

    fn execute_head(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let qp = &self.qps[qpn as usize];
        let wqe = match read_wqe(mem, &qp.sq, qp.sq.ci, true) {
            Ok(w) => w,
            Err(SlotError::Dma) => {
                self.shared.stats.inc(Counter::DmaErrors);
                log::warn!("{}: QP {qpn} send queue at {:#x} is not mapped guest memory", self.name, qp.sq.addr);
                self.finish_send(mem, qpn, &WqeHeader::default(), Err(fail(WC_FATAL_ERR, QP_ERR_DMA)));
                return true;
            }
            Err(SlotError::Malformed(hdr)) => {
                self.shared.stats.inc(Counter::SendWqes);
                log::warn!("{}: QP {qpn} malformed WQE {hdr:?}", self.name);
                self.finish_send(mem, qpn, &hdr, Err(fail(WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE)));
                return true;
            }
        };
        self.shared.stats.inc(Counter::SendWqes);
        match self.execute(mem, qpn, &wqe) {
            Outcome::Done { byte_len } => self.finish_send(mem, qpn, &wqe.hdr, Ok(byte_len)),
            Outcome::Failed(f) => self.finish_send(mem, qpn, &wqe.hdr, Err(f)),
            Outcome::Rnr => return self.rnr(mem, qpn, &wqe.hdr),
        }
        true
    }

    /// The responder had no RECV: schedule a retry, or fail once the budget is spent.
    fn rnr(&mut self, mem: &dyn GuestMem, qpn: u32, hdr: &WqeHeader) -> bool {
        let qp = &mut self.qps[qpn as usize];
        let done = qp.rnr.map_or(0, |w| w.retries_done);
        if qp.rnr_retry != 7 && done >= qp.rnr_retry {
            qp.rnr = None;
            self.finish_send(mem, qpn, hdr, Err(fail(WC_RNR_RETRY_EXC_ERR, QP_ERR_RNR)));
            return true;
        }
        let delay = Duration::from_micros(u64::from(qp.rnr_timer_us)).max(MIN_RNR_DELAY);
        let retries_done = if qp.rnr.is_some() { done.saturating_add(1) } else { 0 };
        qp.rnr = Some(RnrWait { retries_done, next_try: Instant::now() + delay });
        if retries_done > 0 {
            self.shared.stats.inc(Counter::RnrRetries);
        }
        false
    }

    /// Retires the head send WQE with its completion (success: only when signaled).
    pub(super) fn finish_send(&mut self, mem: &dyn GuestMem, qpn: u32, hdr: &WqeHeader, result: Result<u64, Failure>) {
        let qp = &mut self.qps[qpn as usize];
        qp.sq.ci = qp.sq.ci.wrapping_add(1);
        qp.rnr = None;
        let cqn = qp.send_cqn;
        let mut cqe = Cqe { wr_id: hdr.wr_id, qpn, opcode: send_cqe_opcode(hdr.opcode), ..Default::default() };
        match result {
            Ok(byte_len) => {
                if hdr.flags & WQE_FLAG_SIGNALED != 0 {
                    cqe.byte_len = byte_len as u32;
                    if !self.complete(mem, cqn, cqe) {
                        self.qp_error(qpn, QP_ERR_CQ);
                    }
                }
            }
            Err(f) => {
                cqe.status = f.status;
                cqe.syndrome = u32::from(f.reason);
                log::info!("{}: QP {qpn} WQE {:#x} failed: status {} reason {}", self.name, hdr.wr_id, f.status, f.reason);
                self.complete(mem, cqn, cqe);
                self.qp_error(qpn, f.reason);
            }
        }
    }

    /// Resolves a local SGE list in protection domain `pd` needing `access`.
    pub(super) fn local_segments(&self, sges: &[Sge], pd: u32, access: u8) -> Result<(Vec<Segment>, u64), Failure> {
        let total: u64 = sges.iter().map(|s| u64::from(s.length)).sum();
        if total > MAX_MSG {
            return Err(fail(WC_LOC_LEN_ERR, QP_ERR_LENGTH));
        }
        let mut segs = Vec::new();
        for s in sges {
            if s.length == 0 {
                continue;
            }
            let mr = self.mrs.check(s.lkey, pd, access, s.addr, u64::from(s.length)).map_err(|_| fail(WC_LOC_PROT_ERR, QP_ERR_LOCAL_ACCESS))?;
            mr.segments(s.addr, u64::from(s.length), &mut segs);
        }
        Ok((segs, total))
    }

    /// Checks the responder QP and resolves [remote_addr, +len) under `rkey`.
    pub(super) fn responder_range(&self, dest: u32, rkey: u32, addr: u64, len: u64, access: u8) -> Result<Vec<Segment>, Failure> {
        let Some(rqp) = self.qp(dest).filter(|q| q.state.can_receive()) else {
            return Err(fail(WC_REM_OP_ERR, QP_ERR_REMOTE_INVALID));
        };
        let mut segs = Vec::new();
        if len == 0 {
            return Ok(segs);
        }
        let remote_access = || fail(WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS);
        if rqp.access & access != access {
            return Err(remote_access());
        }
        let mr = self.mrs.check(rkey, rqp.pd, access, addr, len).map_err(|e: KeyError| {
            log::info!("{}: rkey {rkey:#x} refused at QP {dest}: {e:?}", self.name);
            remote_access()
        })?;
        mr.segments(addr, len, &mut segs);
        Ok(segs)
    }

    /// Looks at the responder's next RECV: None if there is none (RNR). A malformed RECV
    /// or one whose buffers fail their checks fails both sides.
    pub(super) fn responder_recv(&mut self, mem: &dyn GuestMem, dest: u32) -> Result<Option<Recv>, Failure> {
        let Some(rqp) = self.qp(dest).filter(|q| q.state.can_receive()) else {
            return Err(fail(WC_REM_OP_ERR, QP_ERR_REMOTE_INVALID));
        };
        if rqp.rq.is_empty() {
            return Ok(None);
        }
        let pd = rqp.pd;
        let remote_op = |status, reason| Failure { status: WC_REM_OP_ERR, reason: QP_ERR_REMOTE_INVALID, responder: Some((status, reason)) };
        let wqe = match read_wqe(mem, &rqp.rq, rqp.rq.ci, false) {
            Ok(w) => w,
            Err(SlotError::Dma) => return Err(remote_op(WC_FATAL_ERR, QP_ERR_DMA)),
            Err(SlotError::Malformed(_)) => return Err(remote_op(WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE)),
        };
        match self.local_segments(&wqe.sges, pd, ACCESS_LOCAL_WRITE) {
            Ok((segs, capacity)) => Ok(Some(Recv { wr_id: wqe.hdr.wr_id, segs, capacity })),
            Err(f) => Err(remote_op(f.status, f.reason)),
        }
    }

    /// Retires the responder's head RECV with a completion.
    pub(super) fn complete_recv(&mut self, mem: &dyn GuestMem, dest: u32, wr_id: u64, src_qp: u32, cqe: Cqe) {
        let rqp = &mut self.qps[dest as usize];
        rqp.rq.ci = rqp.rq.ci.wrapping_add(1);
        let cqn = rqp.recv_cqn;
        self.shared.stats.inc(Counter::RecvWqes);
        let cqe = Cqe { wr_id, qpn: dest, src_qp, ..cqe };
        let ok = self.complete(mem, cqn, cqe);
        if cqe.status != WC_SUCCESS {
            self.qp_error(dest, (cqe.syndrome & 0xff) as u8);
        } else if !ok {
            self.qp_error(dest, QP_ERR_CQ);
        }
    }

    fn execute(&mut self, mem: &dyn GuestMem, qpn: u32, wqe: &Wqe) -> Outcome {
        let qp = &self.qps[qpn as usize];
        let (pd, dest) = (qp.pd, qp.dest_qpn);
        let h = &wqe.hdr;
        let inline = h.flags & WQE_FLAG_INLINE != 0;
        let local_access = if h.opcode == WQE_OP_RDMA_READ { ACCESS_LOCAL_WRITE } else { 0 };
        let (local, len) = if inline {
            (Vec::new(), wqe.inline.len() as u64)
        } else {
            match self.local_segments(&wqe.sges, pd, local_access) {
                Ok(v) => v,
                Err(f) => return Outcome::Failed(f),
            }
        };
        let src = if inline { Source::Inline(&wqe.inline) } else { Source::Segments(&local) };
        let imm = matches!(h.opcode, WQE_OP_RDMA_WRITE_IMM | WQE_OP_SEND_IMM);
        let result = match h.opcode {
            WQE_OP_RDMA_WRITE | WQE_OP_RDMA_WRITE_IMM => {
                let remote = match self.responder_range(dest, h.rkey, h.remote_addr, len, ACCESS_REMOTE_WRITE) {
                    Ok(r) => r,
                    Err(f) => return Outcome::Failed(f),
                };
                let recv = if imm {
                    match self.responder_recv(mem, dest) {
                        Ok(Some(r)) => Some(r),
                        Ok(None) => return Outcome::Rnr,
                        Err(f) => return self.fail_with_responder(mem, qpn, dest, None, f),
                    }
                } else {
                    None
                };
                if let Err(e) = copy(mem, &src, &remote, len) {
                    return self.dma_failure(qpn, &e);
                }
                self.shared.stats.add(Counter::BytesWritten, len);
                if let Some(r) = recv {
                    let cqe = Cqe { opcode: CQE_OP_RECV_RDMA_IMM, byte_len: len as u32, imm_data: h.imm_data, flags: CQE_FLAG_IMM, ..Default::default() };
                    self.complete_recv(mem, dest, r.wr_id, qpn, cqe);
                }
                Ok(len)
            }
            WQE_OP_RDMA_READ => {
                let remote = match self.responder_range(dest, h.rkey, h.remote_addr, len, ACCESS_REMOTE_READ) {
                    Ok(r) => r,
                    Err(f) => return Outcome::Failed(f),
                };
                if let Err(e) = copy(mem, &Source::Segments(&remote), &local, len) {
                    return self.dma_failure(qpn, &e);
                }
                self.shared.stats.add(Counter::BytesRead, len);
                Ok(len)
            }
            _ => {
                // SEND, SEND_IMM
                let recv = match self.responder_recv(mem, dest) {
                    Ok(Some(r)) => r,
                    Ok(None) => return Outcome::Rnr,
                    Err(f) => return self.fail_with_responder(mem, qpn, dest, None, f),
                };
                if len > recv.capacity {
                    let f = Failure { status: WC_REM_INV_REQ_ERR, reason: QP_ERR_REMOTE_INVALID, responder: Some((WC_LOC_LEN_ERR, QP_ERR_LENGTH)) };
                    return self.fail_with_responder(mem, qpn, dest, Some(recv.wr_id), f);
                }
                if let Err(e) = copy(mem, &src, &recv.segs, len) {
                    return self.dma_failure(qpn, &e);
                }
                self.shared.stats.add(Counter::BytesSent, len);
                let mut cqe = Cqe { opcode: CQE_OP_RECV, byte_len: len as u32, ..Default::default() };
                if imm {
                    cqe.imm_data = h.imm_data;
                    cqe.flags = CQE_FLAG_IMM;
                }
                self.complete_recv(mem, dest, recv.wr_id, qpn, cqe);
                Ok(len)
            }
        };
        match result {
            Ok(byte_len) => Outcome::Done { byte_len },
            Err(f) => Outcome::Failed(f),
        }
    }

    /// A failure that also consumes (and fails) the responder's head RECV.
    pub(super) fn fail_with_responder(&mut self, mem: &dyn GuestMem, _qpn: u32, dest: u32, wr_id: Option<u64>, f: Failure) -> Outcome {
        if let Some((status, reason)) = f.responder {
            let head_wr_id = wr_id.unwrap_or_else(|| self.head_recv_wr_id(mem, dest));
            let cqe = Cqe { opcode: CQE_OP_RECV, status, syndrome: u32::from(reason), ..Default::default() };
            self.complete_recv(mem, dest, head_wr_id, _qpn, cqe);
        }
        Outcome::Failed(Failure { responder: None, ..f })
    }

    fn head_recv_wr_id(&self, mem: &dyn GuestMem, dest: u32) -> u64 {
        let rqp = &self.qps[dest as usize];
        let mut hdr = WqeHeader::default();
        match rqp.rq.slot_addr(rqp.rq.ci) {
            Some(a) if mem.read(a, hdr.as_mut_slice()).is_ok() => hdr.wr_id,
            _ => 0,
        }
    }

    fn dma_failure(&mut self, qpn: u32, e: &DmaError) -> Outcome {
        log::warn!("{}: QP {qpn}: {e}", self.name);
        if matches!(e, DmaError::Aperture { .. }) {
            return Outcome::Failed(fail(WC_FATAL_ERR, QP_ERR_APERTURE));
        }
        self.shared.stats.inc(Counter::DmaErrors);
        Outcome::Failed(fail(WC_FATAL_ERR, QP_ERR_DMA))
    }
}
