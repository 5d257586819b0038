//! The verbs engine: the QP/CQ/MR tables, the commands of RNIC_REG_CMD (docs/verbs.md
//! §2), doorbells, and the scheduling of the roles: each pass runs every QP's requester
//! (and its completer's timers), hands incoming fabric packets and loopback messages to
//! the responder or completer of the QP they name, and flushes QPs in ERROR.
//!
//! The protocol itself is in [`super::requester`], [`super::responder`] and
//! [`super::completer`], which reach their peer only through a
//! [`super::transport::Transport`]: [`Loopback`] when the peer QP is on this engine,
//! [`Fabric`] when it is on another node. The engine starts no thread: the node's event
//! loop runs it (inside a [`super::runner::EngineRunner`]), or, before the RNIC is handed
//! to one, the thread of the register access that posted the work; it reaches guest
//! memory only through [`GuestMem`].

use super::completer::{self, Completer};
use super::cq::Cq;
use super::ctx::{fail, Cqs, Ctx, SrqView};
pub use super::ctx::{Shared, ASYNC_VECTOR};
use super::datagram::{self, Next};
use super::mr::{Mr, MrTable};
use super::opcode::info;
use super::qp::{transition, Edge, Qp, QpState, Ring, Service, DEST_QPN_MASK};
use super::requester::{self, Requester};
use super::responder::{self, Responder};
use super::transport::{packet_msg, Dest, Fabric, LoopMsg, Loopback, Msg, Nowhere, Transport, Wire};
use crate::contract::abi::*;
use crate::contract::counters::{Counter, Stats};
use crate::observe::timing::wqe_log::WqeLog;
use crate::platform::mem::access::{DmaKind, DmaTag, GuestMem};
use crate::platform::mem::dma::DmaError;
use crate::regs::rnic::{MAX_CQ, MAX_MR, MAX_QP, MAX_RING_LOG2};
use crate::rnic::eth::mac_from_reg;
use crate::rnic::fabric::frame::DEFAULT_TTL;
use crate::rnic::fabric::packet::Packet;
use std::collections::VecDeque;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::Ordering;
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
    /// QP path table (0: none).
    pub qp_path: u64,
    /// GID table (0: none).
    pub gid_table: u64,
    /// The event queue and its log2 entries (minor 11; EQ_BASE, EQ_LOG).
    pub eq: u64,
    pub eq_log: u64,
}

/// Where a connected QP's peer is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Path {
    /// Not connected (RESET, INIT).
    #[default]
    None,
    /// The peer QP is on this engine.
    Loopback,
    /// The peer is at `peer` on the fabric; requests carry at most `mtu` bytes.
    Fabric { peer: Dest, mtu: u32 },
    /// A UD QP (minor 16): each WQE names its destination; messages of at most `mtu` bytes.
    Datagram { mtu: u32 },
}

/// The per-QP state of the three roles, and where the peer is.
#[derive(Clone, Debug, Default)]
pub struct Roles {
    pub path: Path,
    pub req: Requester,
    pub resp: Responder,
    pub comp: Completer,
}

pub struct Engine {
    pub(super) name: String,
    pub(super) qps: Vec<Qp>,
    pub(super) roles: Vec<Roles>,
    pub(super) cqs: Cqs,
    pub(super) mrs: MrTable,
    pub(super) tables: Tables,
    pub(super) enabled: bool,
    pub(super) shared: Shared,
    /// Round-robin start for fairness between QPs.
    pub(super) next_qp: usize,
    /// The fabric, for QPs whose destination is another node.
    pub(super) wire: Option<Arc<dyn Wire>>,
    /// The Ethernet port's settings: its MTU caps the path MTU of fabric QPs.
    pub(super) port: Option<Arc<crate::rnic::eth::EthShared>>,
    /// The one packet every fabric send is built in.
    scratch: Packet,
    /// Loopback messages not yet delivered (drained in the same pass).
    loopq: VecDeque<LoopMsg>,
    /// The WQE log (`rnic-emu trace`): what the roles record of recent work requests.
    wqe_log: Arc<WqeLog>,
}

/// The transport of one QP for one call.
enum Link<'a> {
    Loopback(Loopback<'a>),
    Fabric(Fabric<'a>),
    Nowhere(Nowhere),
}

impl Transport for Link<'_> {
    fn mtu(&self) -> u32 {
        match self {
            Link::Loopback(t) => t.mtu(),
            Link::Fabric(t) => t.mtu(),
            Link::Nowhere(t) => t.mtu(),
        }
    }

    fn send(&mut self, mem: &dyn GuestMem, msg: &Msg<'_>) -> Result<(), DmaError> {
        match self {
            Link::Loopback(t) => t.send(mem, msg),
            Link::Fabric(t) => t.send(mem, msg),
            Link::Nowhere(t) => t.send(mem, msg),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn link<'a>(
    path: Path,
    from: u32,
    to: u32,
    loopq: &'a mut VecDeque<LoopMsg>,
    wire: &'a Option<Arc<dyn Wire>>,
    scratch: &'a mut Packet,
    stats: &'a Stats,
) -> Link<'a> {
    match (path, wire) {
        (Path::Loopback, _) => Link::Loopback(Loopback { queue: loopq, from, to }),
        (Path::Fabric { peer, mtu }, Some(w)) => Link::Fabric(Fabric { wire: &**w, dst: peer, mtu, scratch, stats }),
        _ => Link::Nowhere(Nowhere),
    }
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
            roles: vec![Roles::default(); MAX_QP as usize],
            cqs: Cqs::new(MAX_CQ as usize, shared.clone()),
            mrs: MrTable::new(MAX_MR as usize),
            tables: Tables::default(),
            enabled: true,
            shared,
            next_qp: 0,
            wire: None,
            port: None,
            scratch: Packet::default(),
            loopq: VecDeque::new(),
            wqe_log: Arc::default(),
        }
    }

    /// The engine's WQE log: its RNIC answers the log's control requests and clears it
    /// with the counters.
    pub fn wqe_log(&self) -> &Arc<WqeLog> {
        &self.wqe_log
    }

    /// The function's PCIe-side faults, for the completion path (docs/faults.md).
    pub fn set_faults(&mut self, faults: Arc<crate::platform::pcie_fault::PcieFaults>) {
        self.cqs.faults = faults;
    }

    /// Attaches the node's fabric port.
    /// Lowers the bound on MR page lists below `MAX_MR_PAGES` (a harness with a small MTT
    /// that must reach it; docs/verbs.md §8).
    pub fn limit_mr_pages(&mut self, limit: u64) {
        self.mrs.limit_pages(limit);
    }

    pub fn set_wire(&mut self, wire: Arc<dyn Wire>) {
        self.wire = Some(wire);
    }

    /// Forgets every object (device reset; the statistics are the caller's to clear).
    pub fn reset(&mut self) {
        self.qps.iter_mut().for_each(|q| *q = Qp::new());
        self.roles.iter_mut().for_each(|r| *r = Roles::default());
        self.cqs.cqs.iter_mut().for_each(|c| *c = None);
        self.mrs.clear();
        self.loopq.clear();
        self.tables = Tables::default();
        self.enabled = true;
        self.cqs.int_enabled = false;
        self.cqs.held.clear();
        self.cqs.hold_until = None;
        self.cqs.eq = Default::default();
        self.shared.last_error.store(0, Ordering::SeqCst);
    }

    /// After an internal failure (docs/verbs.md §5.1): every QP not in RESET goes to
    /// ERROR with QP_ERR_FATAL, the head send WQE of each completes with WC_FATAL_ERR and
    /// the rest of both queues is flushed, as far as the tables still allow. Messages in
    /// flight are dropped. No async error per QP: the caller latches one fatal error.
    pub fn fail_all(&mut self, mem: &dyn GuestMem) {
        self.loopq.clear();
        self.cqs.release_held(&self.name, mem, true);
        let Engine { qps, cqs, mrs, name, enabled, roles, wqe_log, .. } = self;
        for (qpn, qp) in qps.iter_mut().enumerate() {
            if qp.state == QpState::Reset {
                continue;
            }
            roles[qpn] = Roles::default();
            if qp.state != QpState::Err {
                qp.state = QpState::Err;
                qp.err_reason = QP_ERR_FATAL;
                cqs.stats().inc(Counter::QpErrors);
            }
            if !*enabled {
                continue; // no DMA with ENABLE clear: the driver flushes after its reset
            }
            let mut ctx = Ctx { name, mem, mrs, cqs, wqe_log, srq: None };
            let qpn = qpn as u32;
            if !qp.sq.is_empty() {
                mem.tag(DmaTag::qp(DmaKind::WqeFetch, qpn));
                let hdr = super::wqe::read_header(mem, &qp.sq, qp.sq.ci);
                ctx.finish_send(qpn, qp, &hdr, Err(fail(WC_FATAL_ERR, QP_ERR_FATAL)));
            }
            while ctx.flush_one(qpn, qp) {}
        }
    }

    pub fn set_dma_ctrl(&mut self, enabled: bool, int_enabled: bool) {
        self.enabled = enabled;
        self.cqs.int_enabled = int_enabled;
    }

    pub fn qp(&self, qpn: u32) -> Option<&Qp> {
        self.qps.get(qpn as usize)
    }

    pub fn cq(&self, cqn: u32) -> Option<&Cq> {
        self.cqs.get(cqn)
    }

    // ---- commands (docs/verbs.md §2) ----

    /// Executes one RNIC_REG_CMD command; returns CMD_OK or a CMD_ERR_* code.
    pub fn command(&mut self, mem: &dyn GuestMem, op: u32, index: u32, tables: Tables) -> u32 {
        self.tables = tables;
        self.shared.stats.inc(Counter::Commands);
        let object = Some(index);
        let tag = match op {
            CMD_CREATE_CQ | CMD_DESTROY_CQ => DmaTag { cq: object, ..DmaTag::default() },
            CMD_REG_MR | CMD_DEREG_MR => DmaTag { mr: object, ..DmaTag::default() },
            _ => DmaTag { qp: object, ..DmaTag::default() },
        };
        mem.tag(DmaTag { what: DmaKind::Command, ..tag });
        let status = match op {
            CMD_CREATE_CQ => self.create_cq(mem, index),
            CMD_DESTROY_CQ => self.destroy_cq(index),
            CMD_MODIFY_QP => self.modify_qp(mem, index),
            CMD_QUERY_QP => self.qps.get(index as usize).map(|_| ()).ok_or(CMD_ERR_BAD_INDEX),
            CMD_DESTROY_QP => self.forget_qp(index),
            CMD_REG_MR => self.reg_mr(mem, index),
            CMD_DEREG_MR => self.dereg_mr(mem, index),
            CMD_SET_GID => self.set_gid(mem, index),
            CMD_SET_EQ if index != 0 => Err(CMD_ERR_BAD_INDEX),
            CMD_SET_EQ => self.cqs.eq.set(tables.eq, tables.eq_log),
            _ => Err(CMD_ERR_BAD_OP),
        };
        if matches!(op, CMD_MODIFY_QP | CMD_QUERY_QP | CMD_DESTROY_QP) && (index as u64) < MAX_QP {
            self.write_back_qp(mem, index);
        }
        self.flush_events(mem);
        match status {
            Ok(()) => CMD_OK,
            Err(code) => {
                self.shared.stats.inc(Counter::CommandErrors);
                crate::guest_warn!("{}: command {op} on object {index} failed with code {code}", self.name);
                code
            }
        }
    }

    /// Back to RESET: attributes and role state forgotten.
    fn forget_qp(&mut self, qpn: u32) -> Result<(), u32> {
        // An SRQ some QP still receives from stays (minor 15).
        let attached = |q: &Qp| q.state != QpState::Reset && q.srq == Some(qpn);
        if self.qps.get(qpn as usize).is_some_and(|q| q.service == Service::Srq) && self.qps.iter().any(attached) {
            return Err(CMD_ERR_BUSY);
        }
        let (qp, roles) = (self.qps.get_mut(qpn as usize), self.roles.get_mut(qpn as usize));
        let (Some(qp), Some(roles)) = (qp, roles) else { return Err(CMD_ERR_BAD_INDEX) };
        *qp = Qp::new();
        *roles = Roles::default();
        Ok(())
    }

    fn create_cq(&mut self, mem: &dyn GuestMem, cqn: u32) -> Result<(), u32> {
        if u64::from(cqn) >= MAX_CQ {
            return Err(CMD_ERR_BAD_INDEX);
        }
        if self.cqs.get(cqn).is_some() {
            return Err(CMD_ERR_BUSY);
        }
        let addr = table_entry(self.tables.cq_ctx, cqn, 32)?;
        let ctx: CqCtx = read_obj(mem, addr).ok_or(CMD_ERR_DMA)?;
        let vectors = self.shared.irqs.count();
        let ring_bytes = 32u64 << ctx.log_size.min(63);
        let valid = u64::from(ctx.log_size) <= MAX_RING_LOG2
            && ctx.ring_addr != 0
            && ctx.ring_addr.is_multiple_of(32)
            && ctx.ring_addr.checked_add(ring_bytes).is_some()
            && usize::from(ctx.msix_vector) < vectors
            && ctx.rsvd0 == 0;
        if !valid {
            return Err(CMD_ERR_INVALID);
        }
        self.cqs.cqs[cqn as usize] = Some(Cq::new(ctx.ring_addr, ctx.log_size, ctx.msix_vector));
        Ok(())
    }

    fn destroy_cq(&mut self, cqn: u32) -> Result<(), u32> {
        let slot = self.cqs.cqs.get(cqn as usize).ok_or(CMD_ERR_BAD_INDEX)?;
        if slot.is_none() {
            return Err(CMD_ERR_NOT_FOUND);
        }
        if self.qps.iter().any(|q| q.uses_cq(cqn)) {
            return Err(CMD_ERR_BUSY);
        }
        self.cqs.cqs[cqn as usize] = None;
        Ok(())
    }

    /// CMD_MODIFY_QP: the edge comes from the transition table; its attribute check runs
    /// on a copy, committed only if all is well.
    fn modify_qp(&mut self, mem: &dyn GuestMem, qpn: u32) -> Result<(), u32> {
        if u64::from(qpn) >= MAX_QP {
            return Err(CMD_ERR_BAD_INDEX);
        }
        let addr = table_entry(self.tables.qp_ctx, qpn, QP_CTX_SIZE)?;
        let ctx: QpCtx = read_obj(mem, addr).ok_or(CMD_ERR_DMA)?;
        let to = QpState::from_abi(ctx.state).ok_or(CMD_ERR_INVALID)?;
        let cur = &self.qps[qpn as usize];
        let edge = transition(cur.state, to).ok_or(CMD_ERR_STATE)?;
        let mut next = cur.clone();
        let mut roles = None;
        // An SRQ (minor 15) is created, re-armed (INIT -> INIT: its limit) and reset only.
        if cur.state != QpState::Reset && cur.service == Service::Srq {
            return match edge {
                Edge::Access => {
                    self.qps[qpn as usize].srq_limit = ctx.rnr_timer_us;
                    Ok(())
                }
                Edge::Reset => self.forget_qp(qpn),
                _ => Err(CMD_ERR_STATE),
            };
        }
        match edge {
            Edge::Reset => return self.forget_qp(qpn),
            Edge::Error => {
                let qp = &mut self.qps[qpn as usize];
                self.cqs.qp_error(&self.name, qpn, qp, QP_ERR_MODIFY, 0);
                return Ok(());
            }
            Edge::Create => next = self.check_create(&ctx)?,
            Edge::Access => next.access = check_access(&ctx)?,
            // A UD QP (minor 16) has no destination: RTR only fixes its MTU.
            Edge::Connect if cur.service == Service::Ud => {
                let mtu = self.ud_mtu();
                next.state = QpState::Rtr;
                roles = Some(Roles { path: Path::Datagram { mtu }, req: Requester::new(mtu), ..Roles::default() });
            }
            Edge::Connect => {
                let path = self.check_connect(mem, qpn, &ctx)?;
                let mtu = match path {
                    Path::Fabric { mtu, .. } => mtu,
                    _ => super::transport::LOOPBACK_MTU,
                };
                next.dest_qpn = ctx.dest_qpn & DEST_QPN_MASK;
                next.access = ctx.access;
                next.state = QpState::Rtr;
                roles = Some(Roles { path, req: Requester::new(mtu), resp: Responder::new(ctx.rq_psn, ctx.rd_atomic >> 4), comp: Completer::default() });
            }
            Edge::Ready => {
                if ctx.rnr_retry > 7 || ctx.retry_cnt > 7 || ctx.timeout > 31 {
                    return Err(CMD_ERR_INVALID);
                }
                next.rnr_retry = ctx.rnr_retry;
                next.rnr_timer_us = ctx.rnr_timer_us;
                next.state = QpState::Rts;
                let r = &mut self.roles[qpn as usize];
                // UC waits for nothing: no retransmission timer.
                let timeout = if matches!(next.service, Service::Uc | Service::Ud) { 0 } else { ctx.timeout };
                r.req.ready_to_send(ctx.sq_psn, timeout, next.sq.ci, ctx.rd_atomic);
                r.comp.ready_to_send(ctx.retry_cnt, ctx.rnr_retry);
            }
        }
        // A UD QP's Q_Key comes with every edge that takes attributes (minor 16).
        if next.service == Service::Ud {
            next.qkey = ctx.dest_ip;
        }
        self.qps[qpn as usize] = next;
        if let Some(r) = roles {
            self.roles[qpn as usize] = r;
        }
        Ok(())
    }

    /// RESET -> INIT: the QP's rings, CQs, access and RNR attributes.
    fn check_create(&self, ctx: &QpCtx) -> Result<Qp, u32> {
        let cq_exists = |n: u32| self.cqs.get(n).is_some();
        let ring_ok = |addr: u64, log_size: u8, log_stride: u8| {
            u64::from(log_size) <= MAX_RING_LOG2
                && (6..=8).contains(&log_stride)
                && addr != 0
                && addr.is_multiple_of(1 << log_stride)
                && addr.checked_add(1u64 << (log_size + log_stride)).is_some()
        };
        let rq = Ring { addr: ctx.rq_addr, log_size: ctx.rq_log_size, log_stride: ctx.rq_log_stride, pi: 0, ci: 0 };
        let service = Service::from_abi((ctx.dest_qpn >> 24) as u8);
        if service == Some(Service::Srq) {
            // Its receive ring and PD, its limit; nothing else of the context is looked at.
            if !ring_ok(ctx.rq_addr, ctx.rq_log_size, ctx.rq_log_stride) {
                return Err(CMD_ERR_INVALID);
            }
            return Ok(Qp { state: QpState::Init, service: Service::Srq, pd: ctx.pd, rq, srq_limit: ctx.rnr_timer_us, ..Qp::new() });
        }
        // rq_log_stride 0 (minor 15): no RQ of its own; an RC QP receives from an SRQ.
        let srq = (ctx.rq_log_stride == 0).then_some(ctx.rq_addr);
        let srq_ok =
            srq.is_none_or(|s| service == Some(Service::Rc) && self.qps.get(s as usize).is_some_and(|q| q.service == Service::Srq && q.state == QpState::Init));
        let ok = cq_exists(ctx.send_cqn)
            && cq_exists(ctx.recv_cqn)
            && ring_ok(ctx.sq_addr, ctx.sq_log_size, ctx.sq_log_stride)
            && (srq.is_some() || ring_ok(ctx.rq_addr, ctx.rq_log_size, ctx.rq_log_stride))
            && srq_ok
            && ctx.rnr_retry <= 7;
        let (true, Some(service)) = (ok, service) else {
            return Err(CMD_ERR_INVALID);
        };
        Ok(Qp {
            state: QpState::Init,
            service,
            err_reason: QP_ERR_NONE,
            pd: ctx.pd,
            send_cqn: ctx.send_cqn,
            recv_cqn: ctx.recv_cqn,
            dest_qpn: 0,
            access: check_access(ctx)?,
            rnr_retry: ctx.rnr_retry,
            rnr_timer_us: ctx.rnr_timer_us,
            sq: Ring { addr: ctx.sq_addr, log_size: ctx.sq_log_size, log_stride: ctx.sq_log_stride, pi: 0, ci: 0 },
            rq: if srq.is_some() { Ring::default() } else { rq },
            srq: srq.map(|s| s as u32),
            srq_limit: 0,
            qkey: if service == Service::Ud { ctx.dest_ip } else { 0 },
        })
    }

    /// INIT -> RTR: where the peer is (this engine, or a node of the fabric over IPv4 or,
    /// with PATH_FLAG_IPV6, IPv6). The path entry is read whenever the table is set: with
    /// dest_ip 0 only its PATH_FLAG_IPV6 matters (without it the QP is loopback).
    fn check_connect(&self, mem: &dyn GuestMem, qpn: u32, ctx: &QpCtx) -> Result<Path, u32> {
        let mtu_ok = ctx.path_mtu == 0 || (8..=12).contains(&ctx.path_mtu);
        check_access(ctx)?;
        if !mtu_ok {
            return Err(CMD_ERR_INVALID);
        }
        let path = match self.tables.qp_path {
            0 => QpPath::default(),
            base => read_obj(mem, table_entry(base, qpn, QP_PATH_SIZE)?).ok_or(CMD_ERR_DMA)?,
        };
        let ipv6 = u32::from(path.flags) & PATH_FLAG_IPV6 != 0;
        if ctx.dest_ip == 0 && !ipv6 {
            return if u64::from(ctx.dest_qpn & DEST_QPN_MASK) >= MAX_QP { Err(CMD_ERR_INVALID) } else { Ok(Path::Loopback) };
        }
        if self.wire.is_none() {
            return Err(CMD_ERR_INVALID);
        }
        let log = if ctx.path_mtu == 0 { 12 } else { ctx.path_mtu.clamp(8, 12) };
        let mtu = (1u32 << log).min(self.port.as_ref().map_or(u32::MAX, |p| roce_mtu(p.mtu())));
        if path.dest_mac >> 48 != 0 || path.dest_mac & 1 != 0 || u32::from(path.flags) & !(PATH_FLAG_SGID | PATH_FLAG_IPV6) != 0 {
            return Err(CMD_ERR_INVALID); // not a unicast MAC, or an unknown flag
        }
        if ipv6 {
            return Ok(Path::Fabric { peer: self.ipv6_dest(ctx, &path)?, mtu });
        }
        let mut dest = dest_of(Dest::of_ip(Ipv4Addr::from(ctx.dest_ip)), &path);
        if u32::from(path.flags) & PATH_FLAG_SGID != 0 {
            // The source must be an IPv4 address of the port now.
            let src = self.port.as_ref().and_then(|p| p.gids.ipv4(usize::from(path.sgid_index)));
            dest.src = Some(IpAddr::V4(src.ok_or(CMD_ERR_INVALID)?));
        }
        Ok(Path::Fabric { peer: dest, mtu })
    }

    /// The destination of a path with PATH_FLAG_IPV6 (minor 9): dest_ip 0, PATH_FLAG_SGID
    /// naming an IPv6 GID of the port as the source, a resolved next-hop MAC, and a
    /// destination GID that is a unicast IPv6 address (not IPv4-mapped, unspecified,
    /// loopback or multicast); CMD_ERR_INVALID otherwise.
    fn ipv6_dest(&self, ctx: &QpCtx, path: &QpPath) -> Result<Dest, u32> {
        if ctx.dest_ip != 0 || u32::from(path.flags) & PATH_FLAG_SGID == 0 || path.dest_mac == 0 {
            return Err(CMD_ERR_INVALID);
        }
        let gid = crate::rnic::gid::of_halves(path.dest_gid_lo, path.dest_gid_hi);
        let ip = crate::rnic::gid::ipv6_of(&gid).ok_or(CMD_ERR_INVALID)?;
        let src = self.port.as_ref().and_then(|p| p.gids.ipv6(usize::from(path.sgid_index))).ok_or(CMD_ERR_INVALID)?;
        let base = Dest { ip: IpAddr::V6(ip), src: Some(IpAddr::V6(src)), mac: [0; 6], tclass: 0, ttl: DEFAULT_TTL };
        Ok(dest_of(base, path)) // dest_mac is not 0: checked above
    }

    /// The MTU of UD messages (minor 16): the port's RoCE MTU, at most 4096.
    fn ud_mtu(&self) -> u32 {
        self.port.as_ref().map_or(4096, |p| roce_mtu(p.mtu())).min(4096)
    }

    /// CMD_SET_GID: entry `index` of the driver's GID table becomes the port's.
    fn set_gid(&mut self, mem: &dyn GuestMem, index: u32) -> Result<(), u32> {
        if index >= GID_TABLE_LEN {
            return Err(CMD_ERR_BAD_INDEX);
        }
        let port = self.port.clone().ok_or(CMD_ERR_INVALID)?;
        let base = self.tables.gid_table;
        let entry: GidEntry = read_obj(mem, table_entry(base, index, GidEntry::ABI.size as u64)?).ok_or(CMD_ERR_DMA)?;
        port.gids.set(index as usize, crate::rnic::gid::parse(&entry)?);
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
            crate::guest_warn!("{}: MR {index} context refused: {why}", self.name);
            return Err(CMD_ERR_INVALID);
        }
        if self.tables.mtt == 0 {
            return Err(CMD_ERR_DMA);
        }
        if !self.mrs.has_room(u64::from(ctx.npages)) {
            crate::guest_warn!("{}: MR {index} refused: {} more pages would pass the {MAX_MR_PAGES} the device holds", self.name, ctx.npages);
            return Err(CMD_ERR_NO_RESOURCES);
        }
        const CHUNK: u64 = 4096;
        // Grown as entries are read, not sized by the guest's count up front.
        let mut pages = Vec::with_capacity((ctx.npages as usize).min(CHUNK as usize));
        let mut buf = vec![0u8; 8 * CHUNK as usize];
        let mut next = u64::from(ctx.mtt_offset);
        let end = next + u64::from(ctx.npages); // both u32: cannot overflow
        while next < end {
            let n = (end - next).min(CHUNK);
            let at = next.checked_mul(8).and_then(|o| self.tables.mtt.checked_add(o)).ok_or(CMD_ERR_DMA)?;
            mem.read(at, &mut buf[..(n * 8) as usize]).map_err(|_| CMD_ERR_DMA)?;
            pages.extend(buf[..(n * 8) as usize].chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))));
            next += n;
        }
        let mr = Mr::from_ctx(&ctx, pages).map_err(|why| {
            crate::guest_warn!("{}: MR {index} refused: {why}", self.name);
            CMD_ERR_INVALID
        })?;
        self.mrs.insert(index as usize, mr);
        Ok(())
    }

    /// Removes MR `index`, and with it every use still in flight (docs/programming.md
    /// R-MR-3): a requester whose outstanding WQE holds its pages fails its oldest WQE
    /// (LOC_PROT_ERR; the QP goes to ERROR, the rest is flushed, late responses are
    /// dropped), a responder forgets the message or READ responses that use it. After the
    /// command no byte of the MR's pages moves.
    fn dereg_mr(&mut self, mem: &dyn GuestMem, index: u32) -> Result<(), u32> {
        if u64::from(index) >= MAX_MR {
            return Err(CMD_ERR_BAD_INDEX);
        }
        self.mrs.remove(index as usize).ok_or(CMD_ERR_NOT_FOUND)?;
        let Engine { qps, roles, cqs, mrs, name, wqe_log, .. } = self;
        for (qpn, (qp, r)) in qps.iter_mut().zip(roles.iter_mut()).enumerate() {
            r.resp.drop_mr(index);
            if r.req.uses_mr(index) {
                let mut ctx = Ctx { name, mem, mrs: &*mrs, cqs: &mut *cqs, wqe_log, srq: None };
                requester::fail_front(&mut ctx, qpn as u32, qp, &mut r.req, fail(WC_LOC_PROT_ERR, QP_ERR_LOCAL_ACCESS));
            }
        }
        Ok(())
    }

    fn write_back_qp(&self, mem: &dyn GuestMem, qpn: u32) {
        let Ok(addr) = table_entry(self.tables.qp_ctx, qpn, QP_CTX_SIZE) else { return };
        let qp = &self.qps[qpn as usize];
        let head = [qp.state.to_abi(), qp.err_reason];
        let mut idx = [0u8; 4];
        idx[..2].copy_from_slice(&qp.sq.ci.to_le_bytes());
        idx[2..].copy_from_slice(&qp.rq.ci.to_le_bytes());
        let offs = std::mem::offset_of!(QpCtx, sq_ci) as u64;
        mem.tag(DmaTag::qp(DmaKind::QpCtx, qpn));
        let written = match addr.checked_add(offs) {
            Some(at) => mem.write(addr, &head).and_then(|_| mem.write(at, &idx)).is_ok(),
            None => false,
        };
        if !written {
            crate::guest_warn!("{}: QP {qpn} context write-back failed (table unmapped)", self.name);
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
        // A requester on this engine waiting for a RECV on this QP (or, for an SRQ, on a
        // QP that receives from it) retries at once.
        let now = self.shared.clock.now();
        let qps = &self.qps;
        let is_srq = qps.get(qpn as usize).is_some_and(|q| q.service == Service::Srq);
        let on_this_srq = |dest: u32| is_srq && qps.get(dest as usize).is_some_and(|d| d.srq == Some(qpn));
        for (qp, r) in qps.iter().zip(self.roles.iter_mut()) {
            let waits_here = qp.dest_qpn == qpn || on_this_srq(qp.dest_qpn);
            if waits_here && r.path == Path::Loopback && r.req.hold_until.is_some() {
                r.req.hold_until = Some(now);
            }
        }
    }

    fn doorbell(&mut self, qpn: u32, pi: u16, send: bool) {
        let Some(qp) = self.qps.get_mut(qpn as usize) else {
            crate::guest_warn!("{}: doorbell for QP {qpn} beyond MAX_QP ignored", self.name);
            return;
        };
        if qp.state == QpState::Reset {
            crate::guest_warn!("{}: doorbell for QP {qpn} in RESET ignored", self.name);
            return;
        }
        // A QP on an SRQ has no RQ, an SRQ no SQ (minor 15).
        if (!send && qp.srq.is_some()) || (send && qp.service == Service::Srq) {
            self.shared.stats.inc(Counter::GuestErrors);
            crate::guest_warn!("{}: {} doorbell for QP {qpn}, which has no such queue: ignored", self.name, if send { "send" } else { "receive" });
            return;
        }
        if send {
            if let Some(r) = self.roles.get_mut(qpn as usize) {
                r.req.rang.get_or_insert_with(Instant::now);
            }
        }
        let ring = if send { &mut qp.sq } else { &mut qp.rq };
        // An index behind the one already taken is a doorbell overtaken by a later one
        // (two CPUs, or reordered writes): ignored, never a step back.
        if (pi.wrapping_sub(ring.pi) as i16) < 0 {
            self.shared.stats.inc(Counter::StaleDoorbells);
            crate::guest_info!("{}: QP {qpn} doorbell {pi} behind the producer index {} already taken: ignored", self.name, ring.pi);
            return;
        }
        if !ring.ring(pi) {
            crate::guest_warn!("{}: QP {qpn} doorbell {pi} overruns its ring (ci {})", self.name, ring.ci);
            self.cqs.qp_error(&self.name, qpn, qp, QP_ERR_BAD_WQE, EQE_QP_FATAL);
        }
    }

    /// EQ_CI: the driver consumed events up to `ci`; the waiting ones go at the next pass.
    pub fn eq_consumed(&mut self, ci: u32) {
        if !self.cqs.eq.consumed(ci) {
            crate::guest_warn!("{}: EQ_CI {ci} is behind the index taken or past the events written: ignored", self.name);
        }
    }

    /// Writes the events waiting for the event queue; raises the async vector if any went.
    pub fn flush_events(&mut self, mem: &dyn GuestMem) -> bool {
        if !self.enabled {
            return false; // no DMA with ENABLE clear
        }
        let wrote = self.cqs.eq.flush(mem, &self.shared.stats);
        if wrote {
            self.cqs.raise_async();
        }
        wrote
    }

    pub fn cq_consumed(&mut self, cqn: u32, ci: u16) {
        match self.cqs.get_mut(cqn).map(|cq| cq.consume(ci)) {
            Some(true) => {}
            Some(false) => crate::guest_warn!("{}: CQ {cqn} consumer index {ci} ahead of the producer: ignored", self.name),
            None => crate::guest_warn!("{}: consumer index for CQ {cqn}, which does not exist", self.name),
        }
    }

    /// Arms a CQ. If it already holds completions software has not consumed (per the last
    /// CQE_CONS_IDX), the vector is raised at once instead: a completion that landed
    /// between the driver's last poll and its arm must not go unnoticed.
    pub fn cq_arm(&mut self, cqn: u32) {
        let int_enabled = self.cqs.int_enabled;
        let Some(cq) = self.cqs.get_mut(cqn) else {
            crate::guest_warn!("{}: arm of CQ {cqn}, which does not exist", self.name);
            return;
        };
        if cq.used() == 0 {
            cq.armed = true;
            return;
        }
        cq.armed = false;
        let vector = usize::from(cq.vector);
        if int_enabled && self.shared.irqs.trigger(vector) {
            self.shared.stats.inc(Counter::Interrupts);
        }
    }

    // ---- scheduling the roles ----

    /// Runs every runnable QP for a while; returns whether anything happened.
    pub fn run(&mut self, mem: &dyn GuestMem, budget: usize) -> bool {
        self.fail_overflowed_cq_users();
        let mut progress = self.cqs.release_held(&self.name, mem, false);
        let n = self.qps.len();
        for k in 0..n {
            let qpn = ((self.next_qp + k) % n) as u32;
            // A fabric QP gets one step (a burst of packets) per pass, so that incoming
            // ACKs are handled between bursts; a loopback QP's peer answers in the pass.
            let steps = if matches!(self.roles[qpn as usize].path, Path::Fabric { .. }) { 1 } else { budget };
            let start = self.payload_bytes();
            for _ in 0..steps {
                let stepped = self.step(mem, qpn);
                let delivered = self.drain(mem);
                if !stepped && !delivered {
                    break;
                }
                progress = true;
                // A byte budget besides the WQE budget: 64 large loopback WRITEs would
                // otherwise copy gigabytes before the next QP, the fabric port or the
                // GPU engines get a turn.
                if self.payload_bytes().wrapping_sub(start) >= PASS_BYTES {
                    break;
                }
            }
        }
        self.next_qp = (self.next_qp + 1) % n;
        self.fail_overflowed_cq_users();
        self.flush_events(mem) || progress
    }

    /// Moves every QP of a CQ that overflowed to ERROR (QP_ERR_CQ): the CQ lost a
    /// completion and takes no more, so its QPs' work cannot be reported (IBA 11.4.2.1;
    /// rxe and mlx5 raise the CQ error event the same way). The driver destroys the QPs and
    /// the CQ; their flush completions are not written.
    fn fail_overflowed_cq_users(&mut self) {
        if self.cqs.overflowed.is_empty() {
            return;
        }
        let cqns = std::mem::take(&mut self.cqs.overflowed);
        for (qpn, qp) in self.qps.iter_mut().enumerate() {
            if cqns.iter().any(|&c| qp.uses_cq(c)) {
                self.cqs.qp_error(&self.name, qpn as u32, qp, QP_ERR_CQ, EQE_QP_FATAL);
            }
        }
        // The QP errors overwrote RNIC_REG_LAST_ERROR: latch the overflow again, last, so
        // that the driver's next read names the CQ (whose QPs are all in ERROR by now).
        for cqn in cqns {
            self.shared.last_error.store(u64::from(ASYNC_ERR_CQ_OVERFLOW) << 24 | u64::from(cqn), Ordering::SeqCst);
            self.cqs.raise_async();
        }
    }

    /// Payload bytes placed so far (SEND, WRITE and READ data): what a pass's byte budget
    /// counts.
    fn payload_bytes(&self) -> u64 {
        let s = &self.shared.stats;
        [Counter::BytesSent, Counter::BytesWritten, Counter::BytesRead].iter().fold(0u64, |t, c| t.wrapping_add(s.get(*c)))
    }

    /// One unit of work on a QP: a flush in ERROR; READ responses to send, a timer, a
    /// retransmission or a new WQE in RTR/RTS.
    fn step(&mut self, mem: &dyn GuestMem, qpn: u32) -> bool {
        let i = qpn as usize;
        let Engine { qps, roles, cqs, mrs, name, enabled, loopq, wire, scratch, shared, wqe_log, port, .. } = self;
        let (qp, r) = (&mut qps[i], &mut roles[i]);
        // DMA_CTRL ENABLE clear: no DMA at all, flushes and responses included
        // (docs/programming.md R-RST-2); the work waits.
        if !*enabled {
            return false;
        }
        let mut ctx = Ctx { name, mem, mrs, cqs, wqe_log, srq: None };
        match qp.state {
            QpState::Err if qp.srq.is_some() && !r.resp.last_wqe_reached() => {
                responder::leave_srq(&mut ctx, qpn, qp, &mut r.resp);
                true
            }
            QpState::Err => ctx.flush_one(qpn, qp),
            QpState::Rts if matches!(r.path, Path::Datagram { .. }) => {
                let Path::Datagram { mtu } = r.path else { return false };
                let s = match datagram::take_next(&mut ctx, qpn, qp, mtu) {
                    Next::Idle => return false,
                    Next::Failed => return true,
                    Next::Send(s) => s,
                };
                match datagram::route(port.as_deref(), wire.as_deref(), &s) {
                    Err(f) => datagram::fail_send(&mut ctx, qpn, qp, &s.hdr, f),
                    Ok(datagram::Route::Loopback(grh)) => {
                        let mut t = Loopback { queue: loopq, from: qpn, to: s.dest_qpn() };
                        datagram::transmit(&mut ctx, qpn, qp, &mut r.req, &s, Some(grh), &mut t);
                    }
                    Ok(datagram::Route::Fabric(dst)) => {
                        let Some(w) = wire.as_deref() else { return false }; // a fabric route has a wire
                        let mut t = Fabric { wire: w, dst, mtu, scratch, stats: &shared.stats };
                        datagram::transmit(&mut ctx, qpn, qp, &mut r.req, &s, None, &mut t);
                    }
                }
                true
            }
            QpState::Rtr | QpState::Rts if matches!(r.path, Path::Loopback | Path::Fabric { .. }) => {
                let mut t = link(r.path, qpn, qp.dest_qpn, loopq, wire, scratch, &shared.stats);
                let responded = responder::send_responses(&mut ctx, &mut r.resp, qp.dest_qpn, &mut t);
                if qp.state != QpState::Rts {
                    return responded;
                }
                let now = shared.clock.now();
                if r.req.timer.is_some_and(|at| now >= at) {
                    completer::on_timeout(&mut ctx, qpn, qp, &mut r.req, &mut r.comp);
                    return true;
                }
                if r.req.hold_until.is_some_and(|at| now < at) {
                    return responded;
                }
                r.req.hold_until = None;
                if let Some(from) = r.req.resend_from.take() {
                    r.req.rewind(from);
                }
                let worked = if r.req.send_psn != r.req.next_psn {
                    requester::send_burst(&mut ctx, qpn, qp, &mut r.req, &mut t)
                } else {
                    requester::start_next(&mut ctx, qpn, qp, &mut r.req, &mut t)
                };
                worked || responded
            }
            _ => false,
        }
    }

    /// Delivers every queued loopback message (and what it provokes); true if any.
    fn drain(&mut self, mem: &dyn GuestMem) -> bool {
        let mut any = false;
        while let Some(m) = self.loopq.pop_front() {
            any = true;
            self.deliver(mem, &m);
        }
        self.fail_refusing_responders();
        any
    }

    /// Moves the responders that refused a request to ERROR, with their events
    /// ([`Ctx::responder_error`]), now that their NAKs have been handled.
    fn fail_refusing_responders(&mut self) {
        for (qpn, reason, event) in std::mem::take(&mut self.cqs.refused) {
            if let Some(qp) = self.qps.get_mut(qpn as usize) {
                self.cqs.qp_error(&self.name, qpn, qp, reason, event);
            }
        }
    }

    /// A loopback message to the responder or completer of the QP it names.
    fn deliver(&mut self, mem: &dyn GuestMem, lm: &LoopMsg) {
        let i = lm.to as usize;
        let mut view = srq_view(&self.qps, i);
        let Engine { qps, roles, cqs, mrs, name, loopq, wqe_log, .. } = self;
        let (Some(qp), Some(r)) = (qps.get_mut(i), roles.get_mut(i)) else { return };
        let msg = lm.msg();
        let mut ctx = Ctx { name, mem, mrs, cqs, wqe_log, srq: view.as_mut() };
        let mut t = Loopback { queue: loopq, from: lm.to, to: lm.from };
        if qp.service == Service::Ud {
            if qp.state.can_receive() {
                datagram::receive(&mut ctx, lm.to, qp, &msg);
            } else {
                ctx.stats().inc(Counter::UdDropped);
            }
        } else if info(msg.bth.opcode).is_some_and(|o| o.request) {
            if !qp.state.can_receive() || r.path == Path::None {
                responder::refuse(&ctx, &mut t, lm.from, &msg);
                return;
            }
            responder::receive(&mut ctx, lm.to, qp, &mut r.resp, lm.from, &msg, &mut t);
            while responder::send_responses(&mut ctx, &mut r.resp, lm.from, &mut t) {}
        } else if qp.state == QpState::Rts && r.path == Path::Loopback {
            completer::on_response(&mut ctx, lm.to, qp, &mut r.req, &mut r.comp, &msg);
        }
        put_srq_view(qps, view);
    }

    /// A packet from the fabric: to the QP it names, if that QP talks to its sender.
    pub fn on_packet(&mut self, mem: &dyn GuestMem, from: IpAddr, pkt: &Packet) {
        let qpn = pkt.bth.dest_qp;
        let i = qpn as usize;
        // A UD QP (minor 16) takes datagrams from anyone.
        let connected = |qp: &Qp, r: &Roles| {
            let path_ok = match r.path {
                Path::Fabric { peer, .. } => peer.ip == from,
                Path::Datagram { .. } => true,
                _ => false,
            };
            path_ok && qp.state.can_receive()
        };
        // A packet of another service than the QP's is not for it (IBA 9.6.1.2).
        let same_service = |qp: &Qp| super::opcode::service_of(pkt.bth.opcode) == qp.service;
        let ok = self.qps.get(i).zip(self.roles.get(i)).is_some_and(|(qp, r)| connected(qp, r) && same_service(qp));
        // With DMA disabled the node is as if its link were down: the peer retransmits.
        if !ok || !self.enabled {
            self.shared.stats.inc(Counter::PktsDropped);
            log::debug!(
                "{}: packet {:#x} psn {} for QP {qpn} from {from} dropped (no such connected QP of its service)",
                self.name,
                pkt.bth.opcode,
                pkt.bth.psn
            );
            return;
        }
        // Every QP is in the default partition (the P_Key table has one entry, 0xffff, as
        // rxe's): a packet of another partition is dropped silently (IBA 9.6.1.1, 10.9.3).
        if pkt.bth.pkey & PKEY_MASK != DEFAULT_PKEY & PKEY_MASK {
            self.shared.stats.inc(Counter::PkeyViolations);
            self.shared.stats.inc(Counter::PktsDropped);
            crate::guest_info!(
                "{}: packet {:#x} psn {} for QP {qpn} from {from} with P_Key {:#06x} dropped (not the default partition)",
                self.name,
                pkt.bth.opcode,
                pkt.bth.psn,
                pkt.bth.pkey
            );
            return;
        }
        self.shared.stats.inc(Counter::PktsReceived);
        if from.is_ipv6() {
            self.shared.stats.inc(Counter::PktsReceivedIpv6);
        }
        let mut view = srq_view(&self.qps, i);
        let Engine { qps, roles, cqs, mrs, name, loopq, wire, scratch, shared, wqe_log, .. } = self;
        let (qp, r) = (&mut qps[i], &mut roles[i]);
        let msg = packet_msg(pkt);
        let mut ctx = Ctx { name, mem, mrs, cqs, wqe_log, srq: view.as_mut() };
        if qp.service == Service::Ud {
            datagram::receive(&mut ctx, qpn, qp, &msg);
        } else if info(msg.bth.opcode).is_some_and(|o| o.request) {
            let mut t = link(r.path, qpn, qp.dest_qpn, loopq, wire, scratch, &shared.stats);
            responder::receive(&mut ctx, qpn, qp, &mut r.resp, qp.dest_qpn, &msg, &mut t);
        } else if qp.state == QpState::Rts {
            completer::on_response(&mut ctx, qpn, qp, &mut r.req, &mut r.comp, &msg);
        }
        put_srq_view(qps, view);
        self.fail_refusing_responders();
        self.flush_events(mem);
    }

    /// The earliest time a requester wants to run again (retransmission timer, RNR wait).
    pub fn next_deadline(&self) -> Option<Instant> {
        if !self.enabled {
            return None; // nothing runs until DMA_CTRL enables the engine again
        }
        let rts = self.qps.iter().zip(&self.roles).filter(|(q, r)| q.state == QpState::Rts && r.path != Path::None);
        rts.filter_map(|(_, r)| r.req.deadline()).chain(self.cqs.hold_until).min()
    }
}

/// The SRQ view of QP `i`'s SRQ, if it receives from one (minor 15).
fn srq_view(qps: &[Qp], i: usize) -> Option<SrqView> {
    let n = qps.get(i)?.srq?;
    let s = qps.get(n as usize).filter(|s| s.service == Service::Srq)?;
    Some(SrqView { qpn: n, ring: s.rq, pd: s.pd, limit: s.srq_limit })
}

/// Writes back what a call took from the SRQ: its consumer index and its limit.
fn put_srq_view(qps: &mut [Qp], view: Option<SrqView>) {
    if let Some(v) = view {
        if let Some(s) = qps.get_mut(v.qpn as usize).filter(|s| s.service == Service::Srq) {
            s.rq.ci = v.ring.ci;
            s.srq_limit = v.limit;
        }
    }
}

/// The largest RoCE path MTU (256..=4096) whose packets fit an Ethernet MTU of `eth_mtu`
/// bytes, with the headers Linux reserves for it (`iboe_get_mtu`: GRH 40, BTH 12, XRC 4,
/// atomic 28, ICRC 4), so that the device caps what ib_core reports as the active MTU.
pub fn roce_mtu(eth_mtu: u32) -> u32 {
    let room = eth_mtu.saturating_sub(88);
    (8..=12u32).rev().map(|l| 1 << l).find(|m| *m <= room).unwrap_or(256)
}

/// Payload bytes one QP may move in one pass before the next QP's turn (with the WQE
/// budget the caller gives); a loopback step moves at most a burst of `LOOPBACK_MTU`
/// requests, so a pass of one QP stays within a few of these.
pub const PASS_BYTES: u64 = 8 << 20;

/// The P_Key of the default partition, the one entry of the port's P_Key table; bit 15 is
/// the membership (full), the rest the partition.
pub const DEFAULT_PKEY: u16 = 0xffff;
const PKEY_MASK: u16 = 0x7fff;

/// Bytes of one QP context in the table.
const QP_CTX_SIZE: u64 = QpCtx::ABI.size as u64;

/// Bytes of one QP path entry.
const QP_PATH_SIZE: u64 = QpPath::ABI.size as u64;

/// Where a fabric QP sends: its path entry over `dest` (the rnic-emu convention of an IPv4
/// peer, [`Dest::of_ip`], where the entry is 0).
fn dest_of(mut dest: Dest, path: &QpPath) -> Dest {
    if path.dest_mac != 0 {
        dest.mac = mac_from_reg(path.dest_mac);
    }
    dest.tclass = path.traffic_class;
    if path.hop_limit != 0 {
        dest.ttl = path.hop_limit;
    }
    dest
}

/// The access flags of a context, if they are known ones.
fn check_access(ctx: &QpCtx) -> Result<u8, u32> {
    if ctx.access & !super::mr::ACCESS_ALL == 0 {
        Ok(ctx.access)
    } else {
        Err(CMD_ERR_INVALID)
    }
}

/// Bus address of entry `index` of a table of `entry`-byte contexts (CMD_ERR_DMA if unset).
fn table_entry(base: u64, index: u32, entry: u64) -> Result<u64, u32> {
    if base == 0 {
        return Err(CMD_ERR_DMA);
    }
    base.checked_add(u64::from(index) * entry).ok_or(CMD_ERR_DMA)
}
