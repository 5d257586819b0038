//! What the requester, responder and completer reach besides their own QP: guest memory,
//! the MR table (local SGE and remote key resolution, as rxe's `lookup_mr`/`copy_data`
//! checks), the CQ table with the completion path (CQE written owner byte last, the
//! vector raised if armed, overflow latched as an async error), the event queue, and the
//! QP error path (ERROR state with a reason, async error and event, flushing one WQE at a
//! time).
//!
//! The roles never reach the engine itself; the engine hands them a [`Ctx`].

use super::cq::{Cq, OWNER_OFFSET};
use super::events::EventQueue;
use super::mr::{MrTable, Segment};
use super::opcode::send_cqe_opcode;
use super::qp::{Qp, QpState, Ring};
use super::sgl::Sgl;
use super::wqe::read_header;
use crate::contract::abi::*;
use crate::contract::counters::{Counter, Stats};
use crate::observe::timing::wqe_log::WqeLog;
use crate::platform::mem::access::{DmaKind, DmaTag, GuestMem};
use crate::platform::mem::dma::DmaError;
use crate::platform::msix::Interrupts;
use crate::platform::pcie_fault::{Count, PcieFaults};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Largest message: 2^31 bytes (IBA 9.4.1).
pub const MAX_MSG: u64 = 1 << 31;
/// The MSI-X vector for asynchronous errors.
pub const ASYNC_VECTOR: usize = 0;

/// State shared with the MMIO side: interrupts, statistics, the async error latch.
#[derive(Clone)]
pub struct Shared {
    pub irqs: Arc<Interrupts>,
    pub stats: Arc<Stats>,
    /// RNIC_REG_LAST_ERROR: code << 24 | index; 0 when none.
    pub last_error: Arc<AtomicU64>,
    /// STATUS_FATAL: the engine failed internally; set by its driver, cleared by reset.
    pub fatal: Arc<AtomicBool>,
    /// What the protocol timers read (the real clock unless a harness drives it).
    pub clock: super::clock::Clock,
}

/// An error completion: WC status and QP error reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    pub status: u8,
    pub reason: u8,
}

pub fn fail(status: u8, reason: u8) -> Failure {
    Failure { status, reason }
}

fn local_protection() -> Failure {
    fail(WC_LOC_PROT_ERR, QP_ERR_LOCAL_ACCESS)
}

/// The failure a DMA fault gives (the router counts aperture faults itself).
pub fn dma_fault(stats: &Stats, e: &DmaError) -> Failure {
    if matches!(e, DmaError::Aperture { .. }) {
        return fail(WC_FATAL_ERR, QP_ERR_APERTURE);
    }
    stats.inc(Counter::DmaErrors);
    if matches!(e, DmaError::Poisoned { .. }) {
        return fail(WC_FATAL_ERR, QP_ERR_POISONED);
    }
    fail(WC_FATAL_ERR, QP_ERR_DMA)
}

/// Most CQEs a completion delay holds back; past it they are released early.
const MAX_HELD: usize = 1 << 16;

/// The completion queues and everything a completion or a QP error notifies.
pub struct Cqs {
    pub cqs: Vec<Option<Cq>>,
    pub shared: Shared,
    pub int_enabled: bool,
    /// PCIe-side faults on the completion path (cqe-delay, cqe-duplicate).
    pub faults: Arc<PcieFaults>,
    /// CQEs a completion delay holds back, in order, until `hold_until`.
    pub held: VecDeque<(u32, Cqe)>,
    pub hold_until: Option<Instant>,
    /// CQs that overflowed since the engine last moved their QPs to ERROR.
    pub overflowed: Vec<u32>,
    /// The asynchronous event queue (minor 11).
    pub eq: EventQueue,
    /// Responders that refused a request since the engine last moved them to ERROR:
    /// (QPN, QP_ERR_* reason, EQE_* event).
    pub refused: Vec<(u32, u8, u8)>,
}

impl Cqs {
    pub fn get(&self, cqn: u32) -> Option<&Cq> {
        self.cqs.get(cqn as usize).and_then(Option::as_ref)
    }

    pub fn get_mut(&mut self, cqn: u32) -> Option<&mut Cq> {
        self.cqs.get_mut(cqn as usize).and_then(Option::as_mut)
    }

    pub fn stats(&self) -> &Stats {
        &self.shared.stats
    }

    pub fn new(count: usize, shared: Shared) -> Cqs {
        Cqs {
            cqs: vec![None; count],
            shared,
            int_enabled: false,
            faults: Arc::default(),
            held: VecDeque::new(),
            hold_until: None,
            overflowed: Vec::new(),
            eq: EventQueue::default(),
            refused: Vec::new(),
        }
    }

    /// Writes a CQE to `cqn` (owner byte last) and raises the CQ's vector if armed.
    /// Returns false when the CQE could not be delivered (no CQ, overflow, DMA error).
    ///
    /// Fault hooks (docs/faults.md): a completion delay holds this CQE and every later one
    /// (order is kept) until it expires ([`Cqs::release_held`]); a duplicate attempt after
    /// the write is detected and dropped, or with `deliver` written into the next free
    /// slot: never into one the driver has not consumed (overflow rules apply).
    pub fn complete(&mut self, name: &str, mem: &dyn GuestMem, cqn: u32, cqe: Cqe) -> bool {
        if self.hold_until.is_none() {
            self.hold_until = self.faults.cqe_delay().map(|d| Instant::now() + d);
        }
        if self.hold_until.is_some() && self.get(cqn).is_some() && self.held.len() < MAX_HELD {
            self.held.push_back((cqn, cqe));
            return true;
        }
        let ok = self.write_cqe(name, mem, cqn, cqe);
        match self.faults.cqe_duplicate() {
            // Only into a free slot: a duplicate the ring has no room for is not an overflow
            // (which would put the CQ in error), it is skipped.
            Some(true) if ok && self.get(cqn).is_some_and(|cq| cq.used() < cq.size()) => {
                crate::guest_warn!("{name}: CQ {cqn}: duplicate CQE for QP {} wr_id {:#x} written (fault, no duplicate check)", cqe.qpn, cqe.wr_id);
                self.write_cqe(name, mem, cqn, cqe);
            }
            Some(false) if ok => {
                self.faults.count(Count::FaultCqeDuplicateDropped);
                crate::guest_warn!("{name}: CQ {cqn}: second completion of QP {} wr_id {:#x} detected and dropped", cqe.qpn, cqe.wr_id);
            }
            _ => {}
        }
        ok
    }

    /// Writes the CQEs a completion delay held, once it has expired (or `now`). True if
    /// any was written.
    pub fn release_held(&mut self, name: &str, mem: &dyn GuestMem, now: bool) -> bool {
        match self.hold_until {
            Some(t) if now || Instant::now() >= t => {}
            _ => return false,
        }
        self.hold_until = None;
        let held = std::mem::take(&mut self.held);
        for (cqn, cqe) in &held {
            self.write_cqe(name, mem, *cqn, *cqe);
        }
        !held.is_empty()
    }

    fn write_cqe(&mut self, name: &str, mem: &dyn GuestMem, cqn: u32, cqe: Cqe) -> bool {
        let Some(cq) = self.cqs.get_mut(cqn as usize).and_then(Option::as_mut) else {
            crate::guest_warn!("{name}: completion for missing CQ {cqn} dropped");
            return false;
        };
        let was_error = cq.error;
        let Some(slot) = cq.push(cqe) else {
            if was_error {
                return false; // reported when it overflowed
            }
            crate::guest_warn!("{name}: CQ {cqn} overflow: completion dropped; the CQ is in error until destroyed, its QPs go to ERROR");
            self.overflowed.push(cqn);
            self.event(EQE_CQ_ERR, cqn, 0);
            self.shared.last_error.store(u64::from(ASYNC_ERR_CQ_OVERFLOW) << 24 | u64::from(cqn), Ordering::SeqCst);
            self.raise_async();
            return false;
        };
        let owner = slot.addr + OWNER_OFFSET as u64; // inside the ring, checked at CREATE_CQ
        mem.tag(DmaTag { cq: Some(cqn), ..DmaTag::qp(DmaKind::Cqe, cqe.qpn) });
        let body = mem
            .write(slot.addr, &slot.bytes[..OWNER_OFFSET])
            .and_then(|_| mem.write(owner + 1, &slot.bytes[OWNER_OFFSET + 1..]))
            .and_then(|_| mem.write(owner, &slot.bytes[OWNER_OFFSET..OWNER_OFFSET + 1]));
        if body.is_err() {
            self.shared.stats.inc(Counter::DmaErrors);
            crate::guest_warn!("{name}: CQ {cqn} ring at {:#x} is not mapped guest memory", slot.addr);
            return false;
        }
        self.shared.stats.inc(Counter::Cqes);
        if cqe.status != WC_SUCCESS {
            self.shared.stats.inc(Counter::ErrorCqes);
        }
        let (armed, vector) = (cq.armed, cq.vector);
        if armed && self.int_enabled {
            cq.armed = false;
            if self.shared.irqs.trigger(usize::from(vector)) {
                self.shared.stats.inc(Counter::Interrupts);
            }
        }
        true
    }

    /// Queues event `event` (EQE_*) about `object` for the event queue.
    pub fn event(&mut self, event: u8, object: u32, syndrome: u32) {
        self.eq.push(&self.shared.stats, event, object, syndrome);
    }

    pub fn raise_async(&mut self) {
        if self.int_enabled && self.shared.irqs.trigger(ASYNC_VECTOR) {
            self.shared.stats.inc(Counter::Interrupts);
        }
    }

    /// Moves a QP to ERROR (once) with `reason`; its queues are flushed afterwards.
    /// `event`: the EQE_* that tells the driver, 0 when a completion (or the driver's own
    /// MODIFY) already does.
    pub fn qp_error(&mut self, name: &str, qpn: u32, qp: &mut Qp, reason: u8, event: u8) {
        if qp.state == QpState::Err || qp.state == QpState::Reset {
            return;
        }
        if event != 0 {
            self.event(event, qpn, u32::from(reason));
        }
        qp.state = QpState::Err;
        qp.err_reason = reason;
        self.shared.stats.inc(Counter::QpErrors);
        crate::guest_info!("{name}: QP {qpn} -> ERROR (reason {reason})");
        self.shared.last_error.store(u64::from(ASYNC_ERR_QP) << 24 | u64::from(qpn), Ordering::SeqCst);
        self.raise_async();
    }
}

/// The SRQ a responder QP receives from, for one call (contract minor 15): a copy of its
/// ring, PD and limit, which the engine writes back afterwards (the SRQ is another QPN's
/// entry of the table the QP itself is borrowed from).
#[derive(Clone, Copy, Debug)]
pub struct SrqView {
    pub qpn: u32,
    pub ring: Ring,
    pub pd: u32,
    pub limit: u32,
}

/// Everything a role needs besides its QP.
pub struct Ctx<'a> {
    pub name: &'a str,
    pub mem: &'a dyn GuestMem,
    pub mrs: &'a MrTable,
    pub cqs: &'a mut Cqs,
    /// The engine's WQE log (stage times of recent work requests).
    pub wqe_log: &'a WqeLog,
    /// The SRQ of the QP a request is for, when it has one.
    pub srq: Option<&'a mut SrqView>,
}

impl Ctx<'_> {
    pub fn stats(&self) -> &Stats {
        &self.cqs.shared.stats
    }

    /// The time the protocol timers read.
    pub fn now(&self) -> std::time::Instant {
        self.cqs.shared.clock.now()
    }

    /// A QP error a completion reports (QP_ERR_CQ: none can, the event queue does).
    pub fn qp_error(&mut self, qpn: u32, qp: &mut Qp, reason: u8) {
        let event = if reason == QP_ERR_CQ { EQE_QP_FATAL } else { 0 };
        self.cqs.qp_error(self.name, qpn, qp, reason, event);
    }

    /// The responder refused request `f` with a NAK: for an invalid request or a remote
    /// access error its QP goes to ERROR with the affiliated event (IBA 9.9.3.1,
    /// 11.6.3.1), once the NAK has reached the requester (the engine applies it after the
    /// packet, or after the pass's loopback messages), so that a QP connected to itself
    /// first completes its WQE with the refusal. Other NAKs leave the responder as it is.
    pub fn responder_error(&mut self, qpn: u32, _qp: &mut Qp, f: Failure) {
        let event = match f.status {
            WC_REM_ACCESS_ERR => EQE_QP_ACCESS_ERR,
            WC_REM_INV_REQ_ERR => EQE_QP_REQ_ERR,
            _ => return,
        };
        self.cqs.refused.push((qpn, f.reason, event));
    }

    /// Retires the head send WQE with its completion (success: only when signaled).
    pub fn finish_send(&mut self, qpn: u32, qp: &mut Qp, hdr: &WqeHeader, result: Result<u64, Failure>) {
        qp.sq.ci = qp.sq.ci.wrapping_add(1);
        let mut cqe = Cqe { wr_id: hdr.wr_id, qpn, opcode: send_cqe_opcode(hdr.opcode), ..Default::default() };
        match result {
            Ok(byte_len) => {
                if hdr.flags & WQE_FLAG_SIGNALED != 0 {
                    cqe.byte_len = byte_len as u32;
                    if !self.cqs.complete(self.name, self.mem, qp.send_cqn, cqe) {
                        self.qp_error(qpn, qp, QP_ERR_CQ);
                    }
                }
            }
            Err(f) => {
                cqe.status = f.status;
                cqe.syndrome = u32::from(f.reason);
                crate::guest_info!("{}: QP {qpn} WQE {:#x} failed: status {} reason {}", self.name, hdr.wr_id, f.status, f.reason);
                self.cqs.complete(self.name, self.mem, qp.send_cqn, cqe);
                self.qp_error(qpn, qp, f.reason);
            }
        }
    }

    /// Retires the head RECV with a completion (an error one moves the QP to ERROR).
    pub fn complete_recv(&mut self, qpn: u32, qp: &mut Qp, wr_id: u64, src_qp: u32, cqe: Cqe) {
        // An SRQ's WQE left its ring when it was taken (minor 15).
        if qp.srq.is_none() {
            qp.rq.ci = qp.rq.ci.wrapping_add(1);
        }
        self.stats().inc(Counter::RecvWqes);
        let cqe = Cqe { wr_id, qpn, src_qp, ..cqe };
        let ok = self.cqs.complete(self.name, self.mem, qp.recv_cqn, cqe);
        if cqe.status != WC_SUCCESS {
            self.qp_error(qpn, qp, (cqe.syndrome & 0xff) as u8);
        } else if !ok {
            self.qp_error(qpn, qp, QP_ERR_CQ);
        }
    }

    /// Flushes one WQE of an ERROR QP (send queue first); true if it did.
    pub fn flush_one(&mut self, qpn: u32, qp: &mut Qp) -> bool {
        let (send, ring, cqn): (bool, Ring, u32) = if !qp.sq.is_empty() {
            (true, qp.sq, qp.send_cqn)
        } else if !qp.rq.is_empty() {
            (false, qp.rq, qp.recv_cqn)
        } else {
            return false;
        };
        self.mem.tag(DmaTag::qp(if send { DmaKind::WqeFetch } else { DmaKind::RqWqeFetch }, qpn));
        let hdr = read_header(self.mem, &ring, ring.ci);
        let opcode = if send { send_cqe_opcode(hdr.opcode) } else { CQE_OP_RECV };
        let cqe = Cqe { wr_id: hdr.wr_id, qpn, opcode, status: WC_WR_FLUSH_ERR, syndrome: u32::from(QP_ERR_NONE), ..Default::default() };
        if send {
            qp.sq.ci = qp.sq.ci.wrapping_add(1);
        } else {
            qp.rq.ci = qp.rq.ci.wrapping_add(1);
        }
        self.cqs.complete(self.name, self.mem, cqn, cqe);
        true
    }

    /// Checks a local SGE list in protection domain `pd` needing `access` (at most 2^31
    /// bytes in all); it is translated later, one packet's share at a time
    /// ([`Ctx::local_part`]).
    pub fn local_sgl(&self, sges: &[Sge], pd: u32, access: u8) -> Result<Sgl, Failure> {
        let total = sges.iter().fold(0u64, |t, s| t.saturating_add(u64::from(s.length)));
        if total > MAX_MSG {
            return Err(fail(WC_LOC_LEN_ERR, QP_ERR_LENGTH));
        }
        Sgl::check(self.mrs, sges, pd, access).map_err(|_| local_protection())
    }

    /// The bus segments of bytes `[off, off + len)` of a checked SGE list.
    pub fn local_part(&self, sgl: &Sgl, off: u64, len: u64) -> Result<Vec<Segment>, Failure> {
        sgl.segments(self.mrs, off, len).map_err(|_| local_protection())
    }

    /// Checks [addr, +len) under `rkey` for responder QP `qp`, which must grant `access`
    /// (REM_ACCESS otherwise). Nothing is translated, read or written here: the responder
    /// translates one packet's share at a time ([`Ctx::remote_part`]), so a request
    /// naming 2 GiB costs the host no more than one naming a page.
    pub fn remote_check(&self, qpn: u32, qp: &Qp, rkey: u32, addr: u64, len: u64, access: u8) -> Result<(), Failure> {
        if len == 0 {
            return Ok(());
        }
        if qp.access & access != access {
            crate::guest_info!("{}: QP {qpn} (access {:#x}) does not grant access {access:#x}", self.name, qp.access);
            return Err(fail(WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS));
        }
        self.mrs.check(rkey, qp.pd, access, addr, len).map(|_| ()).map_err(|e| {
            crate::guest_info!("{}: rkey {rkey:#x} refused at QP {qpn} for [{addr:#x}, +{len:#x}): {e:?}", self.name);
            fail(WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS)
        })
    }

    /// The bus segments of [addr, +len) under `rkey` in protection domain `pd`, checked
    /// again (the MR may have changed since [`Ctx::remote_check`]).
    pub fn remote_part(&self, rkey: u32, pd: u32, access: u8, addr: u64, len: u64) -> Result<Vec<Segment>, Failure> {
        let mut segs = Vec::new();
        if len == 0 {
            return Ok(segs);
        }
        let remote_access = || fail(WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS);
        let mr = self.mrs.check(rkey, pd, access, addr, len).map_err(|_| remote_access())?;
        mr.segments(addr, len, &mut segs).map_err(|_| remote_access())?;
        Ok(segs)
    }
}
