//! The verbs engine's state and control path: QP/CQ/MR tables, the commands of
//! RNIC_REG_CMD (docs/verbs.md §2), doorbells, completions, the ERROR state and flushing.
//! Work-request execution is in [`super::exec`]. The engine runs on its own thread
//! ([`super::worker`]) and reaches guest memory only through [`GuestMem`].

use super::abi::*;
use super::copy::GuestMem;
use super::cq::{Cq, OWNER_OFFSET};
use super::mr::{Mr, MrTable};
use super::qp::{transition_allowed, Qp, QpState, Ring};
use super::stats::{Counter, Stats};
use crate::msix::Interrupts;
use crate::regs::rnic::{MAX_CQ, MAX_MR, MAX_QP, MAX_RING_LOG2};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use vm_memory::ByteValued;

/// The context tables software configured (register snapshot taken with each command).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tables {
    pub qp_ctx: u64,
    pub cq_ctx: u64,
    pub mr_ctx: u64,
    pub mtt: u64,
    pub mtt_entries: u64,
}

/// State shared with the MMIO side: interrupts, statistics, the async error latch.
#[derive(Clone)]
pub struct Shared {
    pub irqs: Arc<Interrupts>,
    pub stats: Arc<Stats>,
    /// RNIC_REG_LAST_ERROR: code << 24 | index; 0 when none.
    pub last_error: Arc<AtomicU64>,
}

/// The MSI-X vector for asynchronous errors.
pub const ASYNC_VECTOR: usize = 0;

pub struct Engine {
    pub(super) name: String,
    pub(super) qps: Vec<Qp>,
    pub(super) cqs: Vec<Option<Cq>>,
    pub(super) mrs: MrTable,
    pub(super) tables: Tables,
    pub(super) enabled: bool,
    pub(super) int_enabled: bool,
    pub(super) shared: Shared,
    /// Round-robin start for fairness between QPs.
    pub(super) next_qp: usize,
    /// The fabric, for QPs whose destination is another node.
    pub(super) wire: Option<Arc<dyn super::rc::Wire>>,
}

fn read_obj<T: ByteValued + Default>(mem: &dyn GuestMem, addr: u64) -> Option<T> {
    let mut v = T::default();
    mem.read(addr, v.as_mut_slice()).ok()?;
    Some(v)
}

impl Engine {
    pub fn new(name: String, shared: Shared) -> Engine {
        Engine {
            name,
            qps: vec![Qp::new(); MAX_QP as usize],
            cqs: vec![None; MAX_CQ as usize],
            mrs: MrTable::new(MAX_MR as usize),
            tables: Tables::default(),
            enabled: true,
            int_enabled: false,
            shared,
            next_qp: 0,
            wire: None,
        }
    }

    /// Attaches the node's fabric port.
    pub fn set_wire(&mut self, wire: Arc<dyn super::rc::Wire>) {
        self.wire = Some(wire);
    }

    /// Forgets every object (device reset; the statistics are the caller's to clear).
    pub fn reset(&mut self) {
        self.qps.iter_mut().for_each(|q| *q = Qp::new());
        self.cqs.iter_mut().for_each(|c| *c = None);
        self.mrs.clear();
        self.tables = Tables::default();
        self.enabled = true;
        self.int_enabled = false;
        self.shared.last_error.store(0, Ordering::SeqCst);
    }

    pub fn set_dma_ctrl(&mut self, enabled: bool, int_enabled: bool) {
        self.enabled = enabled;
        self.int_enabled = int_enabled;
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(qpn as usize)
    }

    pub fn cq(&self, cqn: u32) -> Option<&Cq> {
        self.cqs.get(cqn as usize).and_then(Option::as_ref)
    }

    // ---- commands (docs/verbs.md §2) ----

    /// Executes one RNIC_REG_CMD command; returns CMD_OK or a CMD_ERR_* code.
    pub fn command(&mut self, mem: &dyn GuestMem, op: u32, index: u32, tables: Tables) -> u32 {
        self.tables = tables;
        self.shared.stats.inc(Counter::Commands);
        let status = match op {
            CMD_CREATE_CQ => self.create_cq(mem, index),
            CMD_DESTROY_CQ => self.destroy_cq(index),
            CMD_MODIFY_QP => self.modify_qp(mem, index),
            CMD_QUERY_QP => self.with_qp(index, |_| Ok(())),
            CMD_DESTROY_QP => self.with_qp(index, |qp| {
                *qp = Qp::new();
                Ok(())
            }),
            CMD_REG_MR => self.reg_mr(mem, index),
            CMD_DEREG_MR => self.dereg_mr(index),
            _ => Err(CMD_ERR_BAD_OP),
        };
        if matches!(op, CMD_MODIFY_QP | CMD_QUERY_QP | CMD_DESTROY_QP) && (index as u64) < MAX_QP {
            self.write_back_qp(mem, index);
        }
        match status {
            Ok(()) => CMD_OK,
            Err(code) => {
                self.shared.stats.inc(Counter::CommandErrors);
                log::warn!("{}: command {op} on object {index} failed with code {code}", self.name);
                code
            }
        }
    }

    fn with_qp(&mut self, index: u32, f: impl FnOnce(&mut Qp) -> Result<(), u32>) -> Result<(), u32> {
        f(self.qps.get_mut(index as usize).ok_or(CMD_ERR_BAD_INDEX)?)
    }

    fn create_cq(&mut self, mem: &dyn GuestMem, cqn: u32) -> Result<(), u32> {
        if u64::from(cqn) >= MAX_CQ {
            return Err(CMD_ERR_BAD_INDEX);
        }
        if self.cqs[cqn as usize].is_some() {
            return Err(CMD_ERR_BUSY);
        }
        let addr = table_entry(self.tables.cq_ctx, cqn, 32)?;
        let ctx: CqCtx = read_obj(mem, addr).ok_or(CMD_ERR_DMA)?;
        let vectors = self.shared.irqs.count();
        let ring_bytes = 32u64 << ctx.log_size.min(63);
        let valid = u64::from(ctx.log_size) <= MAX_RING_LOG2
            && ctx.ring_addr != 0
            && ctx.ring_addr % 32 == 0
            && ctx.ring_addr.checked_add(ring_bytes).is_some()
            && usize::from(ctx.msix_vector) < vectors
            && ctx.rsvd0 == 0;
        if !valid {
            return Err(CMD_ERR_INVALID);
        }
        self.cqs[cqn as usize] = Some(Cq::new(ctx.ring_addr, ctx.log_size, ctx.msix_vector));
        Ok(())
    }

    fn destroy_cq(&mut self, cqn: u32) -> Result<(), u32> {
        let slot = self.cqs.get(cqn as usize).ok_or(CMD_ERR_BAD_INDEX)?;
        if slot.is_none() {
            return Err(CMD_ERR_NOT_FOUND);
        }
        if self.qps.iter().any(|q| q.is_active() && (q.send_cqn == cqn || q.recv_cqn == cqn)) {
            return Err(CMD_ERR_BUSY);
        }
        self.cqs[cqn as usize] = None;
        Ok(())
    }

    fn modify_qp(&mut self, mem: &dyn GuestMem, qpn: u32) -> Result<(), u32> {
        if u64::from(qpn) >= MAX_QP {
            return Err(CMD_ERR_BAD_INDEX);
        }
        let addr = table_entry(self.tables.qp_ctx, qpn, 64)?;
        let ctx: QpCtx = read_obj(mem, addr).ok_or(CMD_ERR_DMA)?;
        let to = QpState::from_abi(ctx.state).ok_or(CMD_ERR_INVALID)?;
        let cur = self.qps[qpn as usize].clone();
        if !transition_allowed(cur.state, to) {
            return Err(CMD_ERR_STATE);
        }
        // Validate everything the transition takes, on a copy; commit only if all is well.
        let mut next = cur.clone();
        let access_ok = ctx.access & !super::mr::ACCESS_ALL == 0;
        match (cur.state, to) {
            (_, QpState::Reset) => next = Qp::new(),
            (_, QpState::Err) => {}
            (QpState::Reset, QpState::Init) => {
                let cq_exists = |n: u32| self.cqs.get(n as usize).is_some_and(Option::is_some);
                let ring_ok = |addr: u64, log_size: u8, log_stride: u8| {
                    u64::from(log_size) <= MAX_RING_LOG2
                        && (6..=8).contains(&log_stride)
                        && addr != 0
                        && addr % (1 << log_stride) == 0
                        && addr.checked_add(1u64 << (log_size + log_stride)).is_some()
                };
                let ok = cq_exists(ctx.send_cqn)
                    && cq_exists(ctx.recv_cqn)
                    && ring_ok(ctx.sq_addr, ctx.sq_log_size, ctx.sq_log_stride)
                    && ring_ok(ctx.rq_addr, ctx.rq_log_size, ctx.rq_log_stride)
                    && access_ok
                    && ctx.rnr_retry <= 7;
                if !ok {
                    return Err(CMD_ERR_INVALID);
                }
                next = Qp {
                    state: QpState::Init,
                    err_reason: QP_ERR_NONE,
                    pd: ctx.pd,
                    send_cqn: ctx.send_cqn,
                    recv_cqn: ctx.recv_cqn,
                    dest_qpn: 0,
                    access: ctx.access,
                    rnr_retry: ctx.rnr_retry,
                    rnr_timer_us: ctx.rnr_timer_us,
                    sq: Ring { addr: ctx.sq_addr, log_size: ctx.sq_log_size, log_stride: ctx.sq_log_stride, pi: 0, ci: 0 },
                    rq: Ring { addr: ctx.rq_addr, log_size: ctx.rq_log_size, log_stride: ctx.rq_log_stride, pi: 0, ci: 0 },
                    rnr: None,
                    remote: None,
                };
            }
            (QpState::Init, QpState::Init) | (QpState::Rts, QpState::Rts) => {
                if !access_ok {
                    return Err(CMD_ERR_INVALID);
                }
                next.access = ctx.access;
            }
            (QpState::Init, QpState::Rtr) => {
                let mtu_ok = ctx.path_mtu == 0 || (8..=12).contains(&ctx.path_mtu);
                if !mtu_ok || !access_ok || (ctx.dest_ip == 0 && u64::from(ctx.dest_qpn) >= MAX_QP) {
                    return Err(CMD_ERR_INVALID);
                }
                if ctx.dest_ip != 0 {
                    if self.wire.is_none() || ctx.dest_qpn > crate::fabric::packet::PSN_MASK {
                        return Err(CMD_ERR_INVALID);
                    }
                    let ip = std::net::Ipv4Addr::from(ctx.dest_ip);
                    next.remote = Some(Box::new(super::rc::Remote::new(ip, ctx.path_mtu, ctx.rq_psn)));
                }
                next.dest_qpn = ctx.dest_qpn;
                next.access = ctx.access;
                next.state = QpState::Rtr;
            }
            (QpState::Rtr, QpState::Rts) => {
                if ctx.rnr_retry > 7 || ctx.retry_cnt > 7 || ctx.timeout > 31 {
                    return Err(CMD_ERR_INVALID);
                }
                next.rnr_retry = ctx.rnr_retry;
                next.rnr_timer_us = ctx.rnr_timer_us;
                next.state = QpState::Rts;
                let sq_ci = next.sq.ci;
                if let Some(r) = next.remote.as_deref_mut() {
                    r.ready_to_send(ctx.sq_psn, ctx.retry_cnt, ctx.timeout, ctx.rnr_retry, sq_ci);
                }
            }
            _ => return Err(CMD_ERR_STATE),
        }
        if to == QpState::Err {
            self.qp_error(qpn, QP_ERR_MODIFY);
        } else {
            self.qps[qpn as usize] = next;
        }
        Ok(())
    }

    fn reg_mr(&mut self, mem: &dyn GuestMem, index: u32) -> Result<(), u32> {
        if u64::from(index) >= MAX_MR {
            return Err(CMD_ERR_BAD_INDEX);
        }
        if self.mrs.get(index as usize).is_some() {
            return Err(CMD_ERR_BUSY);
        }
        let addr = table_entry(self.tables.mr_ctx, index, 32)?;
        let ctx: MrCtx = read_obj(mem, addr).ok_or(CMD_ERR_DMA)?;
        if let Err(why) = Mr::check_ctx(&ctx, self.tables.mtt_entries) {
            log::warn!("{}: MR {index} context refused: {why}", self.name);
            return Err(CMD_ERR_INVALID);
        }
        if self.tables.mtt == 0 {
            return Err(CMD_ERR_DMA);
        }
        let mut pages = Vec::with_capacity(ctx.npages as usize);
        let mut buf = vec![0u8; 8 * 4096];
        let mut next = u64::from(ctx.mtt_offset);
        let end = next + u64::from(ctx.npages);
        while next < end {
            let n = (end - next).min(4096);
            let at = self.tables.mtt.checked_add(next * 8).ok_or(CMD_ERR_DMA)?;
            mem.read(at, &mut buf[..(n * 8) as usize]).map_err(|_| CMD_ERR_DMA)?;
            pages.extend(buf[..(n * 8) as usize].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))));
            next += n;
        }
        let mr = Mr::from_ctx(&ctx, pages).map_err(|why| {
            log::warn!("{}: MR {index} refused: {why}", self.name);
            CMD_ERR_INVALID
        })?;
        if let Some(slot) = self.mrs.slot(index as usize) {
            *slot = Some(mr);
        }
        Ok(())
    }

    fn dereg_mr(&mut self, index: u32) -> Result<(), u32> {
        let slot = self.mrs.slot(index as usize).ok_or(CMD_ERR_BAD_INDEX)?;
        slot.take().map(|_| ()).ok_or(CMD_ERR_NOT_FOUND)
    }

    fn write_back_qp(&self, mem: &dyn GuestMem, qpn: u32) {
        let Ok(addr) = table_entry(self.tables.qp_ctx, qpn, 64) else { return };
        let qp = &self.qps[qpn as usize];
        let head = [qp.state.to_abi(), qp.err_reason];
        let mut idx = [0u8; 4];
        idx[..2].copy_from_slice(&qp.sq.ci.to_le_bytes());
        idx[2..].copy_from_slice(&qp.rq.ci.to_le_bytes());
        let offs = std::mem::offset_of!(QpCtx, sq_ci) as u64;
        if mem.write(addr, &head).is_err() || mem.write(addr + offs, &idx).is_err() {
            log::warn!("{}: QP {qpn} context write-back failed (table unmapped)", self.name);
        }
    }

    // ---- doorbells ----

    /// An MMIO `WQE_DB_IDX` write.
    pub fn sq_doorbell(&mut self, qpn: u32, pi: u16) {
        self.shared.stats.inc(Counter::Doorbells);
        self.sq_doorbell_index(qpn, pi);
    }

    /// An MMIO `RQ_DB_IDX` write.
    pub fn rq_doorbell(&mut self, qpn: u32, pi: u16) {
        self.shared.stats.inc(Counter::Doorbells);
        self.rq_doorbell_index(qpn, pi);
    }

    /// A new send-queue producer index (MMIO doorbell or doorbell page).
    pub(super) fn sq_doorbell_index(&mut self, qpn: u32, pi: u16) {
        self.doorbell(qpn, pi, true);
    }

    /// A new receive-queue producer index (MMIO doorbell or doorbell page).
    pub(super) fn rq_doorbell_index(&mut self, qpn: u32, pi: u16) {
        self.doorbell(qpn, pi, false);
        // A requester waiting for a RECV on this QP retries at once.
        for qp in self.qps.iter_mut().filter(|q| q.dest_qpn == qpn) {
            if let Some(w) = qp.rnr.as_mut() {
                w.next_try = Instant::now();
            }
        }
    }

    fn doorbell(&mut self, qpn: u32, pi: u16, send: bool) {
        let Some(qp) = self.qps.get_mut(qpn as usize) else {
            log::warn!("{}: doorbell for QP {qpn} beyond MAX_QP ignored", self.name);
            return;
        };
        if qp.state == QpState::Reset {
            log::warn!("{}: doorbell for QP {qpn} in RESET ignored", self.name);
            return;
        }
        let ring = if send { &mut qp.sq } else { &mut qp.rq };
        if !ring.ring(pi) {
            log::warn!("{}: QP {qpn} doorbell {pi} overruns its ring (ci {})", self.name, ring.ci);
            self.qp_error(qpn, QP_ERR_BAD_WQE);
        }
    }

    pub fn cq_consumed(&mut self, cqn: u32, ci: u16) {
        match self.cqs.get_mut(cqn as usize).and_then(Option::as_mut).map(|cq| cq.consume(ci)) {
            Some(true) => {}
            Some(false) => log::warn!("{}: CQ {cqn} consumer index {ci} ahead of the producer: ignored", self.name),
            None => log::warn!("{}: consumer index for CQ {cqn}, which does not exist", self.name),
        }
    }

    /// Arms a CQ. If it already holds completions software has not consumed (per the last
    /// CQE_CONS_IDX), the vector is raised at once instead: a completion that landed
    /// between the driver's last poll and its arm must not go unnoticed.
    pub fn cq_arm(&mut self, cqn: u32) {
        let Some(cq) = self.cqs.get_mut(cqn as usize).and_then(Option::as_mut) else {
            log::warn!("{}: arm of CQ {cqn}, which does not exist", self.name);
            return;
        };
        if cq.used() == 0 {
            cq.armed = true;
            return;
        }
        cq.armed = false;
        let vector = usize::from(cq.vector);
        if self.int_enabled && self.shared.irqs.trigger(vector) {
            self.shared.stats.inc(Counter::Interrupts);
        }
    }

    // ---- completions and errors ----

    /// Writes a CQE to `cqn` (owner byte last) and raises the CQ's vector if armed.
    /// Returns false when the CQE could not be delivered (no CQ, overflow, DMA error).
    pub(super) fn complete(&mut self, mem: &dyn GuestMem, cqn: u32, cqe: Cqe) -> bool {
        let name = &self.name;
        let Some(cq) = self.cqs.get_mut(cqn as usize).and_then(Option::as_mut) else {
            log::warn!("{name}: completion for missing CQ {cqn} dropped");
            return false;
        };
        let Some(slot) = cq.push(cqe) else {
            log::warn!("{name}: CQ {cqn} overflow: completion dropped");
            self.shared.last_error.store(u64::from(ASYNC_ERR_CQ_OVERFLOW) << 24 | u64::from(cqn), Ordering::SeqCst);
            self.raise_async();
            return false;
        };
        let body = mem
            .write(slot.addr, &slot.bytes[..OWNER_OFFSET])
            .and_then(|_| mem.write(slot.addr + OWNER_OFFSET as u64 + 1, &slot.bytes[OWNER_OFFSET + 1..]))
            .and_then(|_| mem.write(slot.addr + OWNER_OFFSET as u64, &slot.bytes[OWNER_OFFSET..OWNER_OFFSET + 1]));
        if body.is_err() {
            self.shared.stats.inc(Counter::DmaErrors);
            log::warn!("{name}: CQ {cqn} ring at {:#x} is not mapped guest memory", slot.addr);
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

    fn raise_async(&mut self) {
        if self.int_enabled && self.shared.irqs.trigger(ASYNC_VECTOR) {
            self.shared.stats.inc(Counter::Interrupts);
        }
    }

    /// Moves a QP to ERROR (once) with `reason`; its queues are flushed by `run`.
    pub(super) fn qp_error(&mut self, qpn: u32, reason: u8) {
        let Some(qp) = self.qps.get_mut(qpn as usize) else { return };
        if qp.state == QpState::Err || qp.state == QpState::Reset {
            return;
        }
        qp.state = QpState::Err;
        qp.err_reason = reason;
        qp.rnr = None;
        if let Some(r) = qp.remote.as_deref_mut() {
            r.inflight.clear();
            r.timer = None;
            r.hold_until = None;
        }
        self.shared.stats.inc(Counter::QpErrors);
        log::info!("{}: QP {qpn} -> ERROR (reason {reason})", self.name);
        self.shared.last_error.store(u64::from(ASYNC_ERR_QP) << 24 | u64::from(qpn), Ordering::SeqCst);
        self.raise_async();
    }

    /// Flushes one WQE of an ERROR QP (send queue first); true if it did.
    pub(super) fn flush_one(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let qp = &self.qps[qpn as usize];
        let (send, ring, cqn) = if !qp.sq.is_empty() {
            (true, qp.sq, qp.send_cqn)
        } else if !qp.rq.is_empty() {
            (false, qp.rq, qp.recv_cqn)
        } else {
            return false;
        };
        let hdr: Option<WqeHeader> = ring.slot_addr(ring.ci).and_then(|a| read_obj(mem, a));
        let hdr = hdr.unwrap_or_default();
        let opcode = if send { send_cqe_opcode(hdr.opcode) } else { CQE_OP_RECV };
        let cqe = Cqe { wr_id: hdr.wr_id, qpn, opcode, status: WC_WR_FLUSH_ERR, syndrome: u32::from(QP_ERR_NONE), ..Default::default() };
        let qp = &mut self.qps[qpn as usize];
        if send {
            qp.sq.ci = qp.sq.ci.wrapping_add(1);
        } else {
            qp.rq.ci = qp.rq.ci.wrapping_add(1);
        }
        self.complete(mem, cqn, cqe);
        true
    }

    /// The earliest time a waiting (RNR) requester wants to run again.
    pub fn next_deadline(&self) -> Option<Instant> {
        let rts = self.qps.iter().filter(|q| q.state == QpState::Rts);
        rts.flat_map(|q| [q.rnr.map(|w| w.next_try), q.remote.as_ref().and_then(|r| r.deadline())]).flatten().min()
    }
}

/// The CQE opcode reporting a send-queue WQE's completion.
pub(super) fn send_cqe_opcode(wqe_op: u8) -> u8 {
    match wqe_op {
        WQE_OP_RDMA_READ => CQE_OP_RDMA_READ,
        WQE_OP_SEND | WQE_OP_SEND_IMM => CQE_OP_SEND,
        _ => CQE_OP_RDMA_WRITE,
    }
}

/// Bus address of entry `index` of a table of `entry`-byte contexts (CMD_ERR_DMA if unset).
fn table_entry(base: u64, index: u32, entry: u64) -> Result<u64, u32> {
    if base == 0 {
        return Err(CMD_ERR_DMA);
    }
    base.checked_add(u64::from(index) * entry).ok_or(CMD_ERR_DMA)
}
