//! The structure-aware verbs target (`verbs_ops`): a fuzz input is a sequence of typed
//! operations ([`Op`], decoded with the `arbitrary` crate's `Unstructured`) applied to a
//! verbs engine whose context tables, rings and data area the harness places in guest RAM
//! itself, so that any input, however short, can create CQs, walk QPs to RTS, register MRs
//! with chosen MTT entries (mapped pages, pages near 2^64, unmapped bus addresses), post
//! WQEs with chosen opcodes and SGEs, ring doorbells with chosen indices, map and unmap
//! more DMA ranges (adjacent, with a gap, near 2^64, without memory), reset, and move data.
//!
//! QPs whose destination is the fabric peer [`PEER`] send through a recording wire; the
//! [`Op::Reflect`] operation hands a recorded packet back to the engine as if the peer had
//! sent it, so two fabric QPs of the one engine talk RC to each other (requests, ACKs,
//! READ responses, NAKs) and the fuzzer can also corrupt, drop, repeat or reorder them.
//! [`Op::Packet`] delivers a packet built from the input.
//!
//! The engine runs inside the event loop's [`EngineRunner`] (failure containment, the doorbell
//! page), reaches memory through the DMA router (guest RAM plus one GPU BAR1 window behind
//! a BAR1_APERTURE slot) and reads a manual clock: [`Op::Advance`] expires retransmission
//! and RNR timers when the input says so. The `dbpage` target turns the doorbell page on
//! and posts as a driver does (index stored in the page, MMIO doorbell only when the
//! device's event index asks for it); any input may also store raw page values.
//!
//! A second GPU window sits behind the root complex (fixed, its aperture in slot 1). The
//! MSI-X vectors are enabled with eventfds nobody reads, so armed CQs raise them.

use super::layout::{self, CQ_TABLE, MR_TABLE, MTT, QP_TABLE, RAM_BASE};
use super::wire::RecordingWire;
use arbitrary::Unstructured;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::contract::counters::{Counter, Stats};
use rnic_emu_core::platform::mem::dma::{test_ram, DmaMaps};
use rnic_emu_core::platform::mem::router::{P2pPath, Peer, PeerWindow, Router};
use rnic_emu_core::platform::msix::Interrupts;
use rnic_emu_core::platform::shm::SharedMemory;
use rnic_emu_core::regs::rnic::dbpage;
use rnic_emu_core::ring::{self, WrId};
use rnic_emu_core::rnic::doorbell::DoorbellPage;
use rnic_emu_core::rnic::fabric::packet::{Aeth, AtomicEth, Bth, Deth, Grh, Packet, Reth};
use rnic_emu_core::rnic::verbs::clock::Clock;
use rnic_emu_core::rnic::verbs::engine::{Engine, Shared, Tables};
use rnic_emu_core::rnic::verbs::mr::ACCESS_ALL;
use rnic_emu_core::rnic::verbs::runner::{EngineRunner, Event};
use std::time::Duration;

mod op;
pub use op::Op;
use std::net::Ipv4Addr;
use std::sync::Arc;
use vm_memory::ByteValued;

/// The size of guest RAM (at layout::RAM_BASE).
const RAM: u64 = 2 << 20;
/// The harness's MTT entries, rings and data (offsets in RAM after the tables).
const MTT_ENTRIES: u64 = 512;
const QP_RINGS: u64 = 0x1_0000;
const CQ_RINGS: u64 = 0x3_0000;
const DATA: u64 = 0x4_0000;
/// Objects the harness uses (indices beyond are still reachable through raw fields).
const QPS: usize = 8;
const CQS: usize = 8;
const MRS: usize = 16;
/// MTT entries per MR slot (MR i uses entries i * MTT_SLOT ..).
const MTT_SLOT: u32 = 32;
/// The engine's bound on MR page lists here: four MRs of a full slot fit, a fifth not.
const MR_PAGES_LIMIT: u64 = 4 * MTT_SLOT as u64 + 8;
/// Virtual addresses MRs of the harness use (VA + data offset).
const VA: u64 = 0x7f00_0000_0000;
/// The engine's fabric address and its one peer's ([`verbs_ops`]: its packets are the
/// engine's own, reflected; [`verbs_pair`]: the other engine).
const LOCAL: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const PEER: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
/// The GPU's BAR1 (64 KiB): where its window decodes, and where a move puts it.
const GPU_BAR: u64 = 0x40_0000_0000;
const GPU_BAR_MOVED: u64 = 0x50_0000_0000;
const GPU_BAR_SIZE: u64 = 0x1_0000;
/// The second GPU's BAR1 (behind the root complex; never moves).
const GPU2_BAR: u64 = 0x60_0000_0000;
/// Packets the recording wire keeps.
const WIRE_KEEP: usize = 256;
/// Operations per input, engine passes per run.
const MAX_OPS: usize = 256;
const MAX_PASSES: usize = 64;

/// The ring layout of a QP as last written by the harness.
#[derive(Clone, Copy, Default)]
struct Rings {
    sq_log: u8,
    rq_log: u8,
    sq_stride: u8,
    rq_stride: u8,
}

struct Harness {
    ram: SharedMemory,
    /// Guest RAM and the extra maps (the router's DMA maps) plus the GPU window.
    router: Router,
    gpu: Arc<PeerWindow>,
    /// The engine with its doorbell page, as the event loop drives it.
    d: EngineRunner,
    page: DoorbellPage,
    /// Whether DMA_CTRL turns the doorbell page on (the `dbpage` target).
    use_page: bool,
    clock: Clock,
    /// The engine's counters (the tests check the seeds move data with them).
    #[cfg_attr(not(test), allow(dead_code))]
    stats: Arc<Stats>,
    wire: Arc<RecordingWire>,
    /// Where fabric QPs send (and where packets come from).
    peer: Ipv4Addr,
    rings: [Rings; QPS],
    sq_pi: [u16; QPS],
    rq_pi: [u16; QPS],
    cq_ci: [u16; CQS],
    cq_log: [u8; CQS],
    /// Events consumed from the event queue.
    eq_ci: u32,
    /// Extra DMA maps (bus address, size) and their memory (kept alive).
    maps: Vec<(u64, u64)>,
    _extra: Vec<SharedMemory>,
}

/// `n` MSI-X vectors, each with an eventfd (nobody reads them; a raise is a counter add).
fn enabled_vectors(n: u16) -> Arc<Interrupts> {
    use std::os::fd::FromRawFd;
    use vfio_bindings::bindings::vfio::{VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD};
    let irqs = Arc::new(Interrupts::new(n));
    let fds: Vec<std::fs::File> = (0..n)
        .filter_map(|_| {
            // SAFETY: eventfd() returns a new descriptor (or -1); a valid one is owned by
            // the File from here on.
            let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
            // SAFETY: fd is that new descriptor, owned by nothing else.
            (fd >= 0).then(|| unsafe { std::fs::File::from_raw_fd(fd) })
        })
        .collect();
    let _ = irqs.set(VFIO_IRQ_SET_ACTION_TRIGGER | VFIO_IRQ_SET_DATA_EVENTFD, 0, fds.len() as u32, fds);
    irqs
}

fn tables() -> Tables {
    layout::tables(MTT_ENTRIES)
}

fn mr_key(index: usize) -> u32 {
    (index as u32) << 8 | (index as u32 * 7 + 1) & 0xff
}

/// MR `index`'s virtual address when the harness placed it: VA + its data slot.
fn mr_va(index: usize) -> u64 {
    VA + DATA + index as u64 * 0x1_0000
}

impl Harness {
    fn new(own: Ipv4Addr, peer: Ipv4Addr, use_page: bool) -> Option<Harness> {
        let (ram, fd) = test_ram(RAM).ok()?;
        let mut mem = DmaMaps::default();
        mem.map(RAM_BASE, RAM, Some(fd), 0).ok()?;
        let stats = Arc::new(Stats::default());
        let gpu = Arc::new(PeerWindow::new(Arc::new(SharedMemory::memfd("fuzz-gpu", GPU_BAR_SIZE).ok()?)));
        gpu.set(Some(GPU_BAR));
        let gpu2 = Arc::new(PeerWindow::new(Arc::new(SharedMemory::memfd("fuzz-gpu2", GPU_BAR_SIZE).ok()?)));
        gpu2.set(Some(GPU2_BAR));
        let peers = vec![Peer { window: gpu.clone(), path: P2pPath::Switch }, Peer { window: gpu2, path: P2pPath::RootComplex }];
        let router = Router::new(Arc::new(std::sync::RwLock::new(mem)), peers, stats.clone());
        router.apertures[0].store(GPU_BAR, std::sync::atomic::Ordering::SeqCst);
        router.apertures[1].store(GPU2_BAR, std::sync::atomic::Ordering::SeqCst);
        let clock = Clock::manual();
        let shared = Shared { irqs: enabled_vectors(4), stats: stats.clone(), last_error: Default::default(), fatal: Default::default(), clock: clock.clone() };
        let mut e = Engine::new("fuzz".into(), shared);
        let wire = Arc::new(RecordingWire::new(own, WIRE_KEEP));
        e.set_wire(wire.clone());
        // Room for a few full MRs only, so that inputs reach CMD_ERR_NO_RESOURCES.
        e.limit_mr_pages(MR_PAGES_LIMIT);
        let page = DoorbellPage::new(Arc::new(SharedMemory::memfd("fuzz-dbpage", rnic_emu_core::regs::pci_ids::RNIC_DB_BAR_SIZE).ok()?));
        let mut d = EngineRunner::new(e, Some(page.clone()));
        d.set_test_hooks(false);
        let mut h = Harness {
            ram,
            router,
            gpu,
            d,
            page,
            use_page,
            clock,
            stats,
            wire,
            peer,
            rings: [Rings::default(); QPS],
            sq_pi: [0; QPS],
            rq_pi: [0; QPS],
            cq_ci: [0; CQS],
            cq_log: [0; CQS],
            eq_ci: 0,
            maps: Vec::new(),
            _extra: Vec::new(),
        };
        h.dma_ctrl(true, true);
        h.set_gid();
        Some(h)
    }

    /// The port's address as its GID 0, as ib_core gives it (UD vectors send from it).
    fn set_gid(&self) {
        let own = rnic_emu_core::rnic::verbs::transport::Wire::address(&*self.wire);
        self.d.eth_shared().gids.set(0, Some(own.to_ipv6_mapped().octets()));
    }

    /// DMA_CTRL (with the doorbell page when the target uses it).
    fn dma_ctrl(&mut self, enabled: bool, int_enabled: bool) {
        let (reply, _rx) = rnic_emu_core::rnic::verbs::call::channel();
        let view = self.router.view();
        self.d.handle(&view, Event::DmaCtrl { enabled, int_enabled, db_page: self.use_page, reply });
        let _ = self.ram.write(layout::EQ, &[0u8; 16 << layout::EQ_LOG]);
        if enabled && self.cmd(CMD_SET_EQ, 0) == CMD_OK {
            self.eq_ci = 0;
        }
    }

    /// An event for the engine (doorbells, consumer indices, arms).
    fn event(&mut self, ev: Event) {
        let view = self.router.view();
        self.d.handle(&view, ev);
    }

    /// One pass of the event loop; true when anything moved.
    fn pass(&mut self) -> bool {
        let view = self.router.view();
        self.d.pass(&view)
    }

    fn on_packet(&mut self, pkt: &Packet) {
        let view = self.router.view();
        self.d.on_packet(&view, self.peer.into(), pkt);
    }

    /// A driver's 32-bit store into the doorbell page.
    fn page_store(&self, offset: u64, value: u16) {
        let _ = self.page.memory().write(offset, &u32::from(value).to_le_bytes());
    }

    fn page_load(&self, offset: u64) -> u16 {
        let mut v = [0u8; 4];
        let _ = self.page.memory().read(offset, &mut v);
        u32::from_le_bytes(v) as u16
    }

    fn put<T: ByteValued>(&self, off: u64, v: &T) {
        let _ = self.ram.write(off, v.as_slice());
    }

    fn cmd(&mut self, op: u32, index: u32) -> u32 {
        let (reply, rx) = rnic_emu_core::rnic::verbs::call::channel();
        self.event(Event::Command { op, index, tables: tables(), reply });
        rx.try_recv().unwrap_or(CMD_ERR_FATAL)
    }

    /// A bus address for an MTT entry: a data page, the last page below 2^64, a bus
    /// address no map covers, an extra map, or the raw value.
    fn page(&self, kind: u8, v: u64) -> u64 {
        match kind % 6 {
            0 => RAM_BASE + DATA + (v % ((RAM - DATA) >> 12)) * 4096,
            5 => [GPU_BAR, GPU2_BAR][(v >> 8) as usize & 1] + (v % (GPU_BAR_SIZE >> 12)) * 4096,
            1 => 0xffff_ffff_ffff_f000 - (v % 4) * 4096,
            2 => RAM_BASE + RAM + 0x100_0000 + (v % 16) * 4096,
            3 => self.maps.get(v as usize % self.maps.len().max(1)).map_or(v, |m| m.0 + (((v >> 8) % m.1.max(1)) & !0xfff)),
            _ => v,
        }
    }

    fn qp_ctx(&self, qpn: usize) -> QpCtx {
        let mut c = QpCtx::default();
        let _ = self.ram.read(QP_TABLE + qpn as u64 * QpCtx::ABI.size as u64, c.as_mut_slice());
        c
    }

    fn modify(&mut self, qpn: usize, c: &QpCtx) -> u32 {
        self.put(QP_TABLE + qpn as u64 * QpCtx::ABI.size as u64, c);
        let st = self.cmd(CMD_MODIFY_QP, qpn as u32);
        if st == CMD_OK && c.state == QPS_INIT {
            self.rings[qpn] = Rings { sq_log: c.sq_log_size, rq_log: c.rq_log_size, sq_stride: c.sq_log_stride, rq_stride: c.rq_log_stride };
            self.sq_pi[qpn] = 0;
            self.rq_pi[qpn] = 0;
        }
        st
    }

    /// A QP context in INIT with the harness's rings for `qpn`.
    fn init_ctx(qpn: usize, cqs: u8, sizes: u8, strides: u8, access: u8, pd: u8) -> QpCtx {
        let base = RAM_BASE + QP_RINGS + qpn as u64 * 0x4000;
        QpCtx {
            state: QPS_INIT,
            sq_log_size: sizes % 6,
            rq_log_size: (sizes >> 4) % 6,
            sq_log_stride: 6 + strides % 3,
            rq_log_stride: 6 + (strides >> 4) % 3,
            access: access & ACCESS_ALL,
            rnr_retry: 1,
            pd: u32::from(pd % 2),
            send_cqn: u32::from(cqs) % CQS as u32,
            recv_cqn: u32::from(cqs >> 4) % CQS as u32,
            sq_addr: base,
            rq_addr: base + 0x2000,
            ..Default::default()
        }
    }

    /// Applies `op`; the engine must not have failed (a panic the [`EngineRunner`] contained is
    /// a crash all the same).
    fn apply(&mut self, op: &Op) {
        self.apply_op(op);
        assert!(!self.d.is_fatal(), "the verbs engine failed (contained panic) in {op:?}");
    }

    fn apply_op(&mut self, op: &Op) {
        match *op {
            Op::CreateCq { cqn, log_size, vector } => {
                let c = usize::from(cqn) % CQS;
                let log = log_size % 8;
                let ring = RAM_BASE + CQ_RINGS + c as u64 * 0x1000;
                let _ = self.ram.write(ring - RAM_BASE, &[0u8; 0x1000]);
                self.put(CQ_TABLE + c as u64 * 32, &CqCtx { ring_addr: ring, log_size: log, msix_vector: u16::from(vector % 5), ..Default::default() });
                if self.cmd(CMD_CREATE_CQ, c as u32) == CMD_OK {
                    (self.cq_ci[c], self.cq_log[c]) = (0, log);
                }
            }
            Op::DestroyCq { cqn } => {
                self.cmd(CMD_DESTROY_CQ, u32::from(cqn) % (CQS as u32 + 1));
            }
            Op::ModifyQp { qpn, state, dest, access, pd, cqs, sizes, strides, fabric, mtu, psn } => {
                let q = usize::from(qpn) % QPS;
                let mut c = if state % 6 == 0 { Self::init_ctx(q, cqs, sizes, strides, access, pd) } else { self.qp_ctx(q) };
                c.state = [QPS_INIT, QPS_RTR, QPS_RTS, QPS_ERR, QPS_RESET, state][usize::from(state % 6)];
                c.dest_qpn = u32::from(dest) % (QPS as u32 + 1);
                // Bit 7 of `access` (outside ACCESS_ALL) makes the QP UC at RESET -> INIT, bits
                // 7 and 6 UD (minor 16; its Q_Key dest_ip below).
                if state % 6 == 0 && access & 0x80 != 0 {
                    let service = if access & 0x40 != 0 { QP_TYPE_UD } else { QP_TYPE_UC };
                    c.dest_qpn |= u32::from(service) << 24;
                }
                // Bit 7 of `strides` makes it an SRQ (minor 15; its limit psn % 8), bit 3 a
                // QP that receives from the SRQ (or whatever) at `dest`.
                if state % 6 == 0 && strides & 0x80 != 0 {
                    c.dest_qpn = u32::from(QP_TYPE_SRQ) << 24;
                    c.rnr_timer_us = psn % 8;
                } else if state % 6 == 0 && strides & 0x08 != 0 {
                    (c.rq_log_stride, c.rq_addr) = (0, u64::from(dest) % (QPS as u64 + 1));
                }
                c.dest_ip = if fabric & 1 == 1 { u32::from(self.peer) } else { 0 };
                c.path_mtu = mtu % 14;
                (c.sq_psn, c.rq_psn) = (psn, psn.rotate_left(8));
                (c.retry_cnt, c.timeout, c.rnr_retry) = (fabric >> 1 & 7, fabric >> 4, mtu >> 5);
                self.modify(q, &c);
            }
            Op::Connect { a, b, fabric } => {
                let (a, b) = (usize::from(a) % QPS, usize::from(b) % QPS);
                for (x, y) in [(a, b), (b, a)] {
                    if self.d.engine.qp(x as u32).is_some_and(|q| q.state == rnic_emu_core::rnic::verbs::qp::QpState::Reset) {
                        let c = Self::init_ctx(x, (x | x << 4) as u8, 0x44, 0x11, 7, 0);
                        self.modify(x, &c);
                    }
                    for state in [QPS_RTR, QPS_RTS] {
                        let mut c = self.qp_ctx(x);
                        (c.state, c.dest_qpn) = (state, y as u32);
                        c.dest_ip = if fabric & 1 == 1 { u32::from(self.peer) } else { 0 };
                        // Timers armed (a manual clock: they expire only through Op::Advance);
                        // RNR retries unbounded unless the input asks for a budget.
                        (c.path_mtu, c.retry_cnt, c.timeout, c.rnr_retry) = (8 + fabric % 5, 3, 1 + (fabric >> 4), 7 - (fabric >> 1 & 7));
                        self.modify(x, &c);
                    }
                }
            }
            Op::DestroyQp { qpn } => {
                self.cmd(CMD_DESTROY_QP, u32::from(qpn) % (QPS as u32 + 1));
            }
            Op::QueryQp { qpn } => {
                self.cmd(CMD_QUERY_QP, u32::from(qpn) % (QPS as u32 + 1));
            }
            Op::RegMr { index, pd, access, iova_kind, iova, length, page_shift, ref pages } => {
                let i = usize::from(index) % MRS;
                let first = i as u32 * MTT_SLOT;
                for (n, &(kind, v)) in pages.iter().enumerate() {
                    let _ = self.ram.write(MTT + u64::from(first + n as u32) * 8, &self.page(kind, v).to_le_bytes());
                }
                let iova = match iova_kind % 3 {
                    0 => mr_va(i) + iova % 0x1000,
                    1 => u64::MAX - iova % 0x2_0000,
                    _ => iova,
                };
                let length = if iova_kind & 4 == 0 { u64::from(length) % (pages.len() as u64 * 4096 + 1) } else { u64::from(length) };
                let page_shift = if page_shift & 0x80 == 0 { 12 } else { page_shift % 40 };
                let ctx = MrCtx {
                    iova,
                    length,
                    pd: u32::from(pd % 2),
                    mtt_offset: first,
                    npages: pages.len() as u32,
                    access: access & ACCESS_ALL,
                    key: mr_key(i) as u8,
                    page_shift,
                    rsvd0: 0,
                };
                self.put(MR_TABLE + i as u64 * 32, &ctx);
                self.cmd(CMD_REG_MR, i as u32);
            }
            Op::DeregMr { index } => {
                self.cmd(CMD_DEREG_MR, u32::from(index) % MRS as u32);
            }
            Op::Post { qpn, send, opcode, flags, ref sges, remote, inline } => self.post(qpn, send, opcode, flags, sges, remote, inline),
            Op::Doorbell { qpn, send, delta } => {
                let q = usize::from(qpn) % QPS;
                let qpn = q as u32;
                if send & 1 == 1 {
                    self.event(Event::SqDoorbell { qpn, pi: self.sq_pi[q].wrapping_add(delta) });
                } else {
                    self.event(Event::RqDoorbell { qpn, pi: self.rq_pi[q].wrapping_add(delta) });
                }
            }
            Op::Poll { cqn } => self.poll(usize::from(cqn) % CQS),
            Op::Consumed { cqn, ci } => self.event(Event::CqConsumed { cqn: u32::from(cqn) % CQS as u32, ci }),
            Op::Arm { cqn } => self.event(Event::CqArm { cqn: u32::from(cqn) % CQS as u32 }),
            Op::Map { kind, pages } => self.map(kind, pages),
            Op::Unmap { which } => {
                let (iova, size) = match self.maps.get(usize::from(which)) {
                    Some(&m) => m,
                    None => (RAM_BASE, RAM),
                };
                let _ = self.router.dma.write().unwrap_or_else(|p| p.into_inner()).unmap(iova, size);
                self.maps.retain(|m| m.0 != iova);
            }
            Op::Reset => {
                let (reply, _rx) = rnic_emu_core::rnic::verbs::call::channel();
                self.event(Event::Reset { reply });
                self.dma_ctrl(true, true);
                self.set_gid();
                (self.sq_pi, self.rq_pi, self.cq_ci) = ([0; QPS], [0; QPS], [0; CQS]);
            }
            Op::DmaCtrl { bits } => self.dma_ctrl(bits & 1 == 1, bits & 2 == 2),
            Op::Packet { qpn, opcode, psn, va, rkey, len, syndrome, payload } => {
                // The default partition, unless bit 4 of the syndrome byte asks for a P_Key
                // made of the PSN's high bytes (most of them another partition).
                let pkey = if syndrome & 0x10 == 0 { 0xffff } else { (psn >> 8) as u16 };
                let bth =
                    Bth { opcode, pkey, dest_qp: u32::from(qpn) % (QPS as u32 + 1), psn: psn & 0xff_ffff, ack_req: psn >> 24 & 1 == 1, ..Default::default() };
                let reth = (syndrome & 0x80 == 0).then_some(Reth { va, rkey, len });
                let aeth = (syndrome & 0x40 == 0).then_some(Aeth { syndrome: syndrome & 0x7f, msn: psn >> 8 });
                let atomic = (syndrome & 0x08 == 0).then_some(AtomicEth { va, rkey, swap_add: u64::from(len), compare: u64::from(psn) });
                let atomic_ack = (syndrome & 0x04 == 0).then_some(va);
                let imm = (syndrome & 0x20 == 0).then_some(rkey);
                // A FETH (FLUSH): its top byte of len, valid and invalid levels and types.
                let feth = (syndrome & 0x02 == 0).then_some(len >> 24);
                // A DETH (UD): the rkey as its Q_Key, or the peer's address (the Q_Key of a
                // UD QP made with the fabric bit), and a source QP.
                let qkey = if syndrome & 0x08 == 0 { u32::from(self.peer) } else { rkey };
                let deth = (syndrome & 0x01 == 0).then_some(Deth { qkey, src_qp: len & 0xff_ffff });
                let mut grh = Grh::default();
                grh.0[..8].copy_from_slice(&va.to_be_bytes());
                let pkt = Packet { bth, reth, aeth, imm, atomic, atomic_ack, feth, deth, grh, payload: vec![payload; usize::from(payload)] };
                self.on_packet(&pkt);
            }
            Op::Reflect { pick, how } => {
                if let Some(pkt) = self.take_sent(pick) {
                    self.deliver(pkt, how);
                }
            }
            Op::Run { passes } => {
                for _ in 0..usize::from(passes) % MAX_PASSES + 1 {
                    if !self.pass() {
                        break;
                    }
                }
            }
            Op::Advance { ms } => {
                self.clock.advance(Duration::from_millis(u64::from(ms)));
                self.pass();
            }
            Op::PageStore { field, index, value } => {
                let (base, fields) = match field % 5 {
                    4 => (dbpage::CQ_PAGES, [dbpage::CQ_CI; 4]),
                    _ => (dbpage::QP_PAGES, [dbpage::SQ_PI, dbpage::RQ_PI, dbpage::SQ_EVENT, dbpage::RQ_EVENT]),
                };
                // Objects the harness uses, or (index >= 0xf0) any page offset at all.
                let offset = if index >= 0xf0 {
                    u64::from(value) << 8 | u64::from(index)
                } else {
                    base + u64::from(index % 16) * dbpage::PAGE + fields[usize::from(field % 4)]
                };
                self.page_store(offset, value);
            }
            Op::Sleep => {
                let view = self.router.view();
                self.d.prepare_sleep(&view);
            }
            Op::Window { kind } => self.gpu.set([Some(GPU_BAR), Some(GPU_BAR_MOVED), None][usize::from(kind % 3)]),
            Op::Aperture { slot, kind } => {
                let v = [GPU_BAR, 0, GPU_BAR_MOVED, RAM_BASE][usize::from(kind % 4)];
                self.router.apertures[usize::from(slot) % self.router.apertures.len()].store(v, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }

    /// Takes recorded packet `pick` (any order: reordering) off the wire.
    fn take_sent(&self, pick: u8) -> Option<Packet> {
        let mut q = self.wire.sent();
        let i = usize::from(pick) % q.len().max(1);
        q.remove(i).map(|(_, p)| p)
    }

    /// A packet from the peer: as sent, with its PSN or opcode changed, twice, or lost.
    fn deliver(&mut self, mut pkt: Packet, how: u8) {
        match how % 8 {
            0 => return, // lost
            1 => pkt.bth.psn = (pkt.bth.psn + u32::from(how >> 3)) & 0xff_ffff,
            2 => pkt.bth.opcode ^= how >> 3,
            3 => self.on_packet(&pkt), // duplicated
            _ => {}
        }
        self.on_packet(&pkt);
    }

    #[allow(clippy::too_many_arguments)]
    fn post(&mut self, qpn: u8, send: u8, opcode: u8, flags: u8, sges: &[(u8, u8, u32, u32, u8)], remote: (u8, u8, u32), inline: u8) {
        let q = usize::from(qpn) % QPS;
        let r = self.rings[q];
        let send = send & 1 == 1;
        let (base, log, stride, pi) = if send {
            (QP_RINGS + q as u64 * 0x4000, r.sq_log, r.sq_stride, self.sq_pi[q])
        } else {
            (QP_RINGS + q as u64 * 0x4000 + 0x2000, r.rq_log, r.rq_stride, self.rq_pi[q])
        };
        let opcode = match opcode % 8 {
            0 => WQE_OP_RDMA_WRITE,
            1 => WQE_OP_RDMA_WRITE_IMM,
            2 => WQE_OP_RDMA_READ,
            3 => WQE_OP_SEND,
            4 => WQE_OP_SEND_IMM,
            5 => WQE_OP_RECV,
            6 if opcode & 0xc0 == 0 => WQE_OP_ATOMIC_CMP_SWP,
            7 if opcode & 0xc0 == 0 => WQE_OP_ATOMIC_FETCH_ADD,
            6 if opcode & 0xc0 == 0x40 => WQE_OP_ATOMIC_WRITE,
            7 if opcode & 0xc0 == 0x40 => WQE_OP_FLUSH,
            _ => opcode,
        };
        // An atomic's SGE follows its 16 bytes of operands (which the first SGE slot's
        // bytes would otherwise be); an ATOMIC WRITE has the operands and no SGE.
        // Bit 7 of `flags`: a UD send (minor 16), its address vector (to this node or its
        // peer, from GID 0) before its SGEs, the destination QP and Q_Key in remote.
        let ud = send && flags & 0x80 != 0;
        let first = if ud {
            64
        } else if matches!(opcode, WQE_OP_ATOMIC_CMP_SWP | WQE_OP_ATOMIC_FETCH_ADD | WQE_OP_ATOMIC_WRITE) {
            48
        } else {
            32
        };
        let addr_of = |kind: u8, mr: u8, off: u32| match kind % 3 {
            0 => mr_va(usize::from(mr) % MRS) + u64::from(off) % 0x1_0000,
            1 => u64::MAX - u64::from(off),
            _ => u64::from(off) << 16 | u64::from(mr),
        };
        let key_of = |kind: u8, mr: u8| match kind % 3 {
            0 => mr_key(usize::from(mr) % MRS),
            1 => mr_key(usize::from(mr) % MRS) ^ 1,
            _ => u32::from(kind) << 16 | u32::from(mr),
        };
        let stride_bytes = 1usize << stride.clamp(6, 8);
        let mut buf = vec![0u8; stride_bytes];
        let hdr = WqeHeader {
            opcode,
            flags: flags & 7,
            num_sge: sges.len() as u8,
            wr_id: WrId { gen: u32::from(qpn), recv: !send, index: pi }.encode(),
            remote_addr: addr_of(remote.0, remote.1, remote.2),
            rkey: key_of(remote.0 >> 2, remote.1),
            imm_data: remote.2,
            inline_len: u32::from(inline),
            // A FLUSH's FETH byte from the flags' upper bits (type in [3:0], level bit 4).
            rsvd0: if opcode == WQE_OP_FLUSH { flags >> 3 } else { 0 },
        };
        buf[..32].copy_from_slice(hdr.as_slice());
        if ud {
            let dst = [rnic_emu_core::rnic::verbs::transport::Wire::address(&*self.wire), self.peer][usize::from(remote.0 & 1)];
            let gid = dst.to_ipv6_mapped().octets();
            let av = UdAv {
                dest_gid_lo: u64::from_le_bytes(gid[..8].try_into().unwrap_or_default()),
                dest_gid_hi: u64::from_le_bytes(gid[8..].try_into().unwrap_or_default()),
                hop_limit: flags >> 3,
                ..Default::default()
            };
            let hdr = WqeHeader {
                remote_addr: u64::from(remote.1) % (QPS as u64 + 1),
                rkey: if remote.0 & 2 != 0 { 0x8000_0000 } else { u32::from(self.peer) },
                ..hdr
            };
            buf[..32].copy_from_slice(hdr.as_slice());
            buf[32..64].copy_from_slice(av.as_slice());
        }
        if first == 48 {
            // An atomic's operands: remote.2's high half to swap or add, inline to compare.
            let ops = AtomicOps { swap_add: u64::from(remote.2 >> 16), compare: u64::from(inline) };
            buf[32..48].copy_from_slice(ops.as_slice());
        }
        for (n, &(kind, mr, off, len, key)) in sges.iter().enumerate() {
            let sge = Sge { addr: addr_of(kind, mr, off), length: if kind & 0x80 == 0 { len % 0x2_0000 } else { len }, lkey: key_of(key, mr) };
            if let Some(slot) = buf.get_mut(first + n * 16..first + 16 + n * 16) {
                slot.copy_from_slice(sge.as_slice());
            }
        }
        let _ = self.ram.write(base + ring::slot_offset(pi, log.min(15), stride.clamp(6, 8)), &buf);
        let (old, pi) = (pi, pi.wrapping_add(1));
        let qpn = q as u32;
        if send {
            self.sq_pi[q] = pi;
        } else {
            self.rq_pi[q] = pi;
        }
        if self.d.page_on() {
            // The driver's side of the page protocol (rnic_emu_core::rnic::doorbell): index, fence, event.
            let qp_page = ring::dbp_qp(qpn);
            self.page_store(qp_page + ring::dbp_pi(!send), pi);
            std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
            if !ring::need_kick(self.page_load(qp_page + ring::dbp_event(!send)), pi, old) {
                return;
            }
        }
        self.event(if send { Event::SqDoorbell { qpn, pi } } else { Event::RqDoorbell { qpn, pi } });
    }

    fn poll(&mut self, c: usize) {
        let log = self.cq_log[c];
        let cq_ring = CQ_RINGS + c as u64 * 0x1000;
        for _ in 0..1u32 << log {
            let ci = self.cq_ci[c];
            let mut owner = [0u8];
            let _ = self.ram.read(cq_ring + ring::slot_offset(ci, log, ring::CQE_LOG_STRIDE) + 27, &mut owner);
            if owner[0] != ring::owner(ci, log) {
                break;
            }
            self.cq_ci[c] = ci.wrapping_add(1);
        }
        if self.d.page_on() {
            self.page_store(ring::dbp_cq(c as u32) + dbpage::CQ_CI, self.cq_ci[c]);
        } else {
            self.event(Event::CqConsumed { cqn: c as u32, ci: self.cq_ci[c] });
        }
        self.poll_events();
    }

    /// Consumes what the event queue holds (owner byte at offset 3, 1 on the first pass).
    fn poll_events(&mut self) {
        let start = self.eq_ci;
        loop {
            let slot = u64::from(self.eq_ci) & ((1 << layout::EQ_LOG) - 1);
            let mut owner = [0u8];
            let _ = self.ram.read(layout::EQ + slot * 16 + 3, &mut owner);
            if owner[0] != u8::from((self.eq_ci >> layout::EQ_LOG) & 1 == 0) {
                break;
            }
            self.eq_ci = self.eq_ci.wrapping_add(1);
        }
        if self.eq_ci != start {
            self.event(Event::EqConsumed { ci: self.eq_ci });
        }
    }

    fn map(&mut self, kind: u8, pages: u8) {
        if self.maps.len() >= 4 {
            return;
        }
        let size = (u64::from(pages % 16) + 1) * 4096;
        let end = self.maps.iter().map(|m| m.0 + m.1).max().unwrap_or(RAM_BASE + RAM);
        let iova = match kind % 4 {
            0 => end,                              // adjacent to the last map
            1 => end + 0x10_0000,                  // after a gap
            2 => 0u64.wrapping_sub(size) & !0xfff, // the last pages below 2^64
            _ => RAM_BASE - size,                  // just below RAM
        };
        let memory = kind & 0x80 == 0;
        let fd = if memory {
            match test_ram(size) {
                Ok((m, fd)) => {
                    self._extra.push(m);
                    Some(fd)
                }
                Err(_) => return,
            }
        } else {
            None
        };
        if self.router.dma.write().unwrap_or_else(|p| p.into_inner()).map(iova, size, fd, 0).is_ok() {
            self.maps.push((iova, size));
        }
    }
}

/// The `verbs_ops` target: decodes operations until the input runs out.
pub fn verbs_ops(data: &[u8]) {
    run_ops(data, false);
}

/// The `dbpage` target: the operations of [`verbs_ops`] with the doorbell page on, WQEs
/// posted through it as a driver does, raw page stores and the loop's sleep (event index
/// publication) among the operations.
pub fn dbpage(data: &[u8]) {
    run_ops(data, true);
}

fn run_ops(data: &[u8], use_page: bool) {
    let mut u = Unstructured::new(data);
    let Some(mut h) = Harness::new(LOCAL, PEER, use_page) else { return };
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let Ok(op) = u.arbitrary::<Op>() else { break };
        h.apply(&op);
    }
    h.apply(&Op::Run { passes: 255 });
}

/// The `verbs_pair` target: two engines (at [`LOCAL`] and [`PEER`], each with its own
/// RAM) joined by an in-memory wire. Each operation is preceded by a byte whose bit 0
/// picks the node; [`Op::Reflect`] on a node moves one of its sent packets to the other
/// node (lost, corrupted, duplicated or out of order as the operation says).
pub fn verbs_pair(data: &[u8]) {
    run_pair(data);
}

/// [`verbs_pair`], returning its oracle (for the tests: that the seeds are checked).
fn run_pair(data: &[u8]) -> RcOracle {
    let mut u = Unstructured::new(data);
    let (Some(a), Some(b)) = (Harness::new(LOCAL, PEER, false), Harness::new(PEER, LOCAL, false)) else { return RcOracle::default() };
    let mut nodes = [a, b];
    let mut oracle = RcOracle::default();
    for n in &nodes {
        let _ = n.d.engine.wqe_log().control("on");
    }
    for _ in 0..MAX_OPS {
        if u.is_empty() {
            break;
        }
        let (Ok(sel), Ok(op)) = (u.arbitrary::<u8>(), u.arbitrary::<Op>()) else { break };
        oracle.note_op(sel, &op);
        pair_step(&mut nodes, sel, &op);
        oracle.collect(&nodes);
    }
    // Let both sides finish: run and exchange until nothing moves.
    for _ in 0..MAX_PASSES {
        let mut moved = false;
        for i in 0..2 {
            moved |= nodes[i].pass();
            while let Some(pkt) = nodes[i].take_sent(0) {
                nodes[1 - i].deliver(pkt, 4);
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    oracle.collect(&nodes);
    oracle.check(&nodes);
    oracle
}

/// The RC oracle of `verbs_pair`: a requester's success completion means its peer took the
/// bytes. Over both nodes, the bytes of WRITEs and SENDs completed with success (the WQE
/// log's requester records) cannot exceed the bytes responders placed, nor those of READs
/// the bytes READ responses placed. It holds whatever the wire loses, duplicates or
/// reorders; it is not checked after a forged packet (a PSN or opcode changed, a packet
/// built from the input: a forger inside the window is trusted, as on a real wire; the
/// unit tests of `rnic/verbs/tests_integrity.rs` cover what such packets may do), a reset
/// (which zeroes the counters), or once the input has made a requester and its responder
/// disagree on PSNs (a QP modified by hand or destroyed, two requesters connected to one
/// responder QP), where a new request can be acknowledged as a duplicate (R-FAB-4). The WQE log keeps the newest records, so a run that
/// completes more than it holds between two operations is undercounted: never a false
/// alarm.
#[derive(Default)]
struct RcOracle {
    /// Bytes claimed: WRITE, SEND, READ.
    claimed: [u64; 3],
    /// Per node, the newest WQE-log record seen.
    seen: [u64; 2],
    /// Which (node, QP) a connection made sends to each (node, QP).
    senders: std::collections::HashMap<(usize, usize), (usize, usize)>,
    unchecked: bool,
}

impl RcOracle {
    fn note_op(&mut self, sel: u8, op: &Op) {
        self.unchecked |= match *op {
            Op::Reflect { how, .. } => matches!(how % 8, 1 | 2),
            // PSNs a requester and its responder no longer agree on (R-FAB-4: a request
            // behind the expected PSN is acknowledged as a duplicate, not executed).
            Op::Packet { .. } | Op::Reset | Op::DestroyQp { .. } => true,
            // To INIT with PSN 0 (what Connect then keeps) or to ERROR keeps the contract; a
            // UC QP completes what it sends whether or not it lands (R-UC-2): no RC claim.
            Op::ModifyQp { state, psn, access, .. } => !(state % 6 == 0 && psn == 0 && access & 0x80 == 0 || state % 6 == 3),
            Op::Connect { a, b, fabric } => {
                // Two requesters sending to one responder QP share its PSN space: the same.
                let node = usize::from(sel & 1);
                let (a, b) = (usize::from(a) % QPS, usize::from(b) % QPS);
                let peer = if fabric & 1 == 1 { 1 - node } else { node };
                let mut clash = false;
                for (x, y) in [(a, b), (b, a)] {
                    let from = (node, x);
                    clash |= self.senders.insert((peer, y), from).is_some_and(|other| other != from);
                }
                clash
            }
            _ => false,
        };
    }

    fn collect(&mut self, nodes: &[Harness; 2]) {
        for (i, n) in nodes.iter().enumerate() {
            for r in n.d.engine.wqe_log().since(self.seen[i], None) {
                self.seen[i] = r.seq;
                let k = match r.op {
                    "write" => 0,
                    "send" => 1,
                    _ => 2,
                };
                if r.role == "requester" && r.status == WC_SUCCESS {
                    self.claimed[k] += r.len;
                }
            }
        }
    }

    fn check(&self, nodes: &[Harness; 2]) {
        if self.unchecked {
            return;
        }
        for (k, c) in [Counter::BytesWritten, Counter::BytesSent, Counter::BytesRead].into_iter().enumerate() {
            let placed: u64 = nodes.iter().map(|n| n.stats.get(c)).sum();
            assert!(self.claimed[k] <= placed, "RC integrity: {} bytes completed with success, {placed} placed ({c:?})", self.claimed[k]);
        }
    }
}

/// Operation `op` on node `sel & 1`; a reflect moves that node's packet to the other.
fn pair_step(nodes: &mut [Harness; 2], sel: u8, op: &Op) {
    let (i, j) = (usize::from(sel & 1), usize::from(!sel & 1));
    match *op {
        Op::Reflect { pick, how } => {
            if let Some(pkt) = nodes[i].take_sent(pick) {
                nodes[j].deliver(pkt, how);
            }
        }
        ref op => nodes[i].apply(op),
    }
}

/// Seeds of `verbs_pair`: each node builds the fabric pair of [`seeds`] (node 0's QP 1
/// talks to node 1's QP 2 and the other way), both post, packets cross both ways.
/// The second seed is [`uc_ops`].
pub fn pair_seeds() -> Vec<Vec<u8>> {
    [seed_ops(1), uc_ops()]
        .iter()
        .map(|ops| {
            let mut out = Vec::new();
            for op in ops {
                for node in 0..2u8 {
                    out.push(node);
                    op.encode(&mut out);
                }
            }
            out
        })
        .collect()
}

fn seed_mr(index: u8, pages: Vec<(u8, u64)>) -> Op {
    Op::RegMr { index, pd: 0, access: 7, iova_kind: 0, iova: 0, length: 8192, page_shift: 0, pages }
}

fn seed_sge(mr: u8, len: u32) -> (u8, u8, u32, u32, u8) {
    (0, mr, 0, len, 0)
}

fn seed_post(qpn: u8, send: u8, opcode: u8, sges: Vec<(u8, u8, u32, u32, u8)>) -> Op {
    Op::Post { qpn, send, opcode, flags: 1, sges, remote: (0, 2, 0), inline: 0 }
}

/// CQs 1 and 2, QPs 1 <-> 2 on loopback (`fabric` 0) or through the wire (1), two MRs,
/// then each opcode once from QP 1 with a RECV posted on QP 2, packets reflected.
fn seed_ops(fabric: u8) -> Vec<Op> {
    let mut ops = seed_pair(fabric, 7);
    for opcode in 0..5 {
        ops.push(seed_post(2, 0, 5, vec![seed_sge(2, 4096)]));
        ops.push(seed_post(1, 1, opcode, vec![seed_sge(1, 3000)]));
        ops.push(Op::Run { passes: 8 });
        for _ in 0..6 {
            ops.push(Op::Reflect { pick: 0, how: 4 });
        }
        ops.push(Op::Poll { cqn: 1 });
        ops.push(Op::Poll { cqn: 2 });
    }
    ops
}

/// CQs 1 and 2, QPs 1 <-> 2 of ModifyQp `access` (0x80: UC) on loopback or the wire, MRs 1
/// and 2.
fn seed_pair(fabric: u8, access: u8) -> Vec<Op> {
    let mut ops = vec![Op::CreateCq { cqn: 1, log_size: 6, vector: 1 }, Op::CreateCq { cqn: 2, log_size: 6, vector: 2 }];
    ops.push(Op::ModifyQp { qpn: 1, state: 0, dest: 0, access, pd: 0, cqs: 0x11, sizes: 0x44, strides: 0x11, fabric: 0, mtu: 0, psn: 0 });
    ops.push(Op::ModifyQp { qpn: 2, state: 0, dest: 0, access, pd: 0, cqs: 0x22, sizes: 0x44, strides: 0x11, fabric: 0, mtu: 0, psn: 0 });
    ops.push(Op::Connect { a: 1, b: 2, fabric });
    ops.push(seed_mr(1, vec![(0, 0), (0, 1)]));
    ops.push(seed_mr(2, vec![(0, 16), (0, 17)]));
    ops
}

/// UC QPs 1 <-> 2 through the wire: a SEND whose middle packet is lost (dropped whole,
/// the RECV kept), SENDs and WRITEs that land, a SEND with no RECV left, then a READ (not a
/// UC operation: QP 1 to ERROR).
fn uc_ops() -> Vec<Op> {
    let mut ops = seed_pair(1, 0x87);
    ops.push(seed_post(2, 0, 5, vec![seed_sge(2, 4096)]));
    ops.push(seed_post(2, 0, 5, vec![seed_sge(2, 4096)]));
    ops.push(seed_post(1, 1, 3, vec![seed_sge(1, 3000)]));
    // 3000 bytes are 6 packets at the pair's 512-byte MTU: the second is lost.
    ops.extend([Op::Run { passes: 8 }, Op::Reflect { pick: 0, how: 4 }, Op::Reflect { pick: 0, how: 0 }]);
    ops.extend(std::iter::repeat_n(Op::Reflect { pick: 0, how: 4 }, 4));
    for opcode in [3, 0, 1, 4] {
        ops.push(seed_post(1, 1, opcode, vec![seed_sge(1, 3000)]));
        ops.push(Op::Run { passes: 8 });
        for _ in 0..8 {
            ops.push(Op::Reflect { pick: 0, how: 4 });
        }
    }
    ops.push(seed_post(1, 1, 2, vec![seed_sge(1, 64)]));
    ops.extend([Op::Run { passes: 8 }, Op::Poll { cqn: 1 }, Op::Poll { cqn: 2 }]);
    ops
}

/// UD QPs 1 and 2 (minor 16; Q_Key the peer's address): SENDs from QP 1 to QP 2 on this
/// node (loopback) and to the peer (reflected back as the peer's), to a QP that does not
/// exist, with the QP's own Q_Key, inline, with no RECV and into one too small; UD packets
/// from the input; last a WRITE (no UD operation).
fn ud_ops() -> Vec<Op> {
    let mut ops = vec![Op::CreateCq { cqn: 1, log_size: 6, vector: 1 }, Op::CreateCq { cqn: 2, log_size: 6, vector: 2 }];
    for (qpn, cqs) in [(1, 0x11), (2, 0x22)] {
        ops.push(Op::ModifyQp { qpn, state: 0, dest: 0, access: 0xc0, pd: 0, cqs, sizes: 0x44, strides: 0x11, fabric: 1, mtu: 0, psn: 0 });
        ops.push(Op::ModifyQp { qpn, state: 1, dest: 0, access: 0, pd: 0, cqs, sizes: 0x44, strides: 0x11, fabric: 1, mtu: 0, psn: 0 });
        ops.push(Op::ModifyQp { qpn, state: 2, dest: 0, access: 0, pd: 0, cqs, sizes: 0x44, strides: 0x11, fabric: 1, mtu: 0, psn: 0 });
    }
    ops.push(seed_mr(1, vec![(0, 0), (0, 1)]));
    ops.push(seed_mr(2, vec![(0, 16), (0, 17)]));
    for (to, opcode, flags) in [(0, 3, 0x81), (1, 4, 0x81), (2, 3, 0x81), (0, 3, 0x81)] {
        ops.push(seed_post(2, 0, 5, vec![seed_sge(2, 4096)]));
        ops.push(Op::Post { qpn: 1, send: 1, opcode, flags, sges: vec![seed_sge(1, 1000)], remote: (to, 2, 0), inline: 0 });
        ops.extend([Op::Run { passes: 4 }, Op::Reflect { pick: 0, how: 4 }, Op::Run { passes: 2 }, Op::Poll { cqn: 1 }, Op::Poll { cqn: 2 }]);
    }
    ops.push(Op::Packet { qpn: 2, opcode: 0x64, psn: 5, va: 0x4500, rkey: 0, len: 3, syndrome: 0xe6, payload: 16 });
    // The QP's own Q_Key (bit 31), an inline SEND, a SEND with no RECV left, one into a
    // RECV too small for the GRH area, and a packet with another Q_Key.
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 3, flags: 0x81, sges: vec![seed_sge(1, 100)], remote: (2, 2, 0), inline: 0 });
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 4, flags: 0x83, sges: vec![], remote: (0, 2, 0), inline: 48 });
    ops.push(Op::Run { passes: 4 });
    ops.push(seed_post(2, 0, 5, vec![seed_sge(2, 16)]));
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 3, flags: 0x81, sges: vec![seed_sge(1, 100)], remote: (0, 2, 0), inline: 0 });
    ops.push(Op::Packet { qpn: 2, opcode: 0x65, psn: 6, va: 0x4500, rkey: 7, len: 3, syndrome: 0xee, payload: 8 });
    ops.extend([Op::Run { passes: 2 }, Op::Poll { cqn: 1 }, Op::Poll { cqn: 2 }]);
    // Last, a WRITE: no UD operation (QP 1 to ERROR).
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 0, flags: 0x81, sges: vec![seed_sge(1, 64)], remote: (0, 2, 0), inline: 0 });
    ops.extend([Op::Run { passes: 4 }, Op::Poll { cqn: 1 }]);
    ops
}

/// The fabric pair of [`seed_ops`], then the timers on the manual clock: a SEND before
/// its RECV (RNR NAK, wait, resend), a WRITE whose request is lost (retransmission
/// timeout, go-back-N), and one lost until the retry budget is spent (QP error).
fn timer_ops() -> Vec<Op> {
    let mut ops = seed_ops(1);
    let exchange = |ops: &mut Vec<Op>, n: usize| {
        for _ in 0..n {
            ops.push(Op::Run { passes: 4 });
            ops.push(Op::Reflect { pick: 0, how: 4 });
        }
    };
    // What the rounds above left on the wire, then two SENDs for the two RECVs left
    // from them (rings of 4): the third SEND finds none.
    exchange(&mut ops, 12);
    for _ in 0..3 {
        ops.push(seed_post(1, 1, 3, vec![seed_sge(1, 100)]));
        exchange(&mut ops, 4);
    }
    ops.push(Op::Advance { ms: 1 });
    exchange(&mut ops, 3);
    ops.push(seed_post(2, 0, 5, vec![seed_sge(2, 4096)]));
    ops.push(Op::Advance { ms: 1 });
    exchange(&mut ops, 4);
    ops.push(seed_post(1, 1, 0, vec![seed_sge(1, 3000)]));
    ops.extend([Op::Run { passes: 4 }, Op::Reflect { pick: 0, how: 0 }, Op::Advance { ms: 100 }]);
    exchange(&mut ops, 4);
    ops.push(seed_post(1, 1, 0, vec![seed_sge(1, 64)]));
    for _ in 0..5 {
        ops.extend([Op::Run { passes: 4 }, Op::Reflect { pick: 0, how: 0 }, Op::Advance { ms: 100 }]);
    }
    ops.extend([Op::Poll { cqn: 1 }, Op::Poll { cqn: 2 }]);
    ops
}

/// Error paths the seeds above do not take: a CQ of one entry overflowing, requests
/// reflected out of order (sequence NAK, go-back-N), an RNR NAK with no retries left, a
/// READ response lost until the timer resends the READ, an inline WRITE, and an MR
/// deregistered under queued work.
fn error_ops() -> Vec<Op> {
    let mut ops = seed_ops(1);
    let cq = |cqn, log_size| Op::CreateCq { cqn, log_size, vector: 0 };
    ops.extend([cq(3, 4), cq(4, 4), cq(5, 0), cq(6, 0)]);
    // QPs 3 <-> 4 through the wire with no RNR retries (fabric 15: rnr_retry 0).
    ops.push(Op::Connect { a: 3, b: 4, fabric: 15 });
    ops.push(seed_post(3, 1, 3, vec![seed_sge(1, 64)]));
    for _ in 0..3 {
        ops.extend([Op::Run { passes: 2 }, Op::Reflect { pick: 0, how: 4 }]);
    }
    // QPs 5 <-> 6 on loopback, completions into one-entry CQs nobody polls.
    ops.push(Op::Connect { a: 5, b: 6, fabric: 0 });
    for _ in 0..3 {
        ops.push(seed_post(5, 1, 0, vec![seed_sge(1, 64)]));
    }
    ops.push(Op::Run { passes: 8 });
    // QPs 1 -> 2: two WRITEs, the second's packet delivered first; a READ whose response
    // is lost until the timer fires; an inline WRITE; MR 2 deregistered under a WRITE.
    ops.push(seed_post(1, 1, 0, vec![seed_sge(1, 3000)]));
    ops.push(seed_post(1, 1, 0, vec![seed_sge(1, 3000)]));
    ops.extend([Op::Run { passes: 4 }, Op::Reflect { pick: 2, how: 4 }]);
    for _ in 0..8 {
        ops.extend([Op::Run { passes: 2 }, Op::Reflect { pick: 0, how: 4 }]);
    }
    ops.push(seed_post(1, 1, 2, vec![seed_sge(1, 5000)]));
    ops.extend([Op::Run { passes: 2 }, Op::Reflect { pick: 0, how: 4 }, Op::Run { passes: 2 }, Op::Reflect { pick: 0, how: 0 }, Op::Advance { ms: 50 }]);
    for _ in 0..6 {
        ops.extend([Op::Run { passes: 2 }, Op::Reflect { pick: 0, how: 4 }]);
    }
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 0, flags: 3, sges: Vec::new(), remote: (0, 2, 0), inline: 40 });
    ops.push(seed_post(1, 1, 0, vec![seed_sge(1, 64)]));
    ops.push(Op::DeregMr { index: 2 });
    for _ in 0..6 {
        ops.extend([Op::Run { passes: 2 }, Op::Reflect { pick: 0, how: 4 }]);
    }
    ops.extend([Op::Poll { cqn: 1 }, Op::Poll { cqn: 2 }, Op::Poll { cqn: 3 }]);
    ops
}

/// Atomics (contract 1.12) on a pair whose QPs and MRs allow them (`fabric` as in
/// [`seed_ops`]): fetch-and-add, a compare-and-swap that does not match, on the fabric a
/// request duplicated (answered from the responder's history) and an acknowledge lost (the
/// timer resends, the responder replays), acknowledges out of place; then a misaligned
/// one (both QPs to ERROR) and, on a second pair, one with a 4-byte buffer.
fn atomic_ops(fabric: u8) -> Vec<Op> {
    let mut ops = vec![Op::CreateCq { cqn: 1, log_size: 6, vector: 1 }, Op::CreateCq { cqn: 2, log_size: 6, vector: 2 }];
    // Access 0x2f: everything up to atomics, and FLUSH to global visibility (minor 14).
    ops.push(Op::ModifyQp { qpn: 1, state: 0, dest: 0, access: 0x2f, pd: 0, cqs: 0x11, sizes: 0x44, strides: 0x11, fabric: 0, mtu: 0, psn: 0 });
    ops.push(Op::ModifyQp { qpn: 2, state: 0, dest: 0, access: 0x2f, pd: 0, cqs: 0x22, sizes: 0x44, strides: 0x11, fabric: 0, mtu: 0, psn: 0 });
    ops.push(Op::Connect { a: 1, b: 2, fabric });
    for (index, first) in [(1, 0), (2, 16)] {
        ops.push(Op::RegMr { index, pd: 0, access: 0x2f, iova_kind: 0, iova: 0, length: 8192, page_shift: 0, pages: vec![(0, first), (0, first + 1)] });
    }
    // remote.2's high half gives the operand (swap or add), inline the compare value.
    let atomic = |qpn: u8, opcode: u8, off: u32, len: u32, operand: u32, compare: u8| Op::Post {
        qpn,
        send: 1,
        opcode,
        flags: 1,
        sges: vec![seed_sge(1, len)],
        remote: (0, 2, off | operand << 16),
        inline: compare,
    };
    let exchange = |ops: &mut Vec<Op>, how: u8| ops.extend([Op::Run { passes: 2 }, Op::Reflect { pick: 0, how }]);
    ops.push(atomic(1, 7, 0, 8, 5, 0));
    exchange(&mut ops, 4);
    exchange(&mut ops, 4);
    ops.push(atomic(1, 6, 0, 8, 9, 1)); // 5 is not 1: unchanged
    exchange(&mut ops, 4);
    exchange(&mut ops, 4);
    ops.push(atomic(1, 7, 0, 8, 1, 0));
    exchange(&mut ops, 3); // the request twice: executed once, answered twice
    exchange(&mut ops, 4);
    exchange(&mut ops, 4);
    ops.push(atomic(1, 6, 0, 8, 2, 6));
    exchange(&mut ops, 4); // the request
    exchange(&mut ops, 0); // its acknowledge lost
    ops.push(Op::Advance { ms: 100 });
    for _ in 0..4 {
        exchange(&mut ops, 4);
    }
    // IBTA 1.5 (minor 14): an ATOMIC WRITE (opcode 6 | 0x40), then a FLUSH of a range
    // (7 | 0x40; FETH 0x01 from the flags) delivered twice, then one of the whole MR
    // asking for persistence the MR does not grant (FETH 0x12).
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 0x46, flags: 1, sges: Vec::new(), remote: (0, 2, 8 | 3 << 16), inline: 0 });
    exchange(&mut ops, 4);
    exchange(&mut ops, 4);
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 0x47, flags: 1 | 0x01 << 3, sges: Vec::new(), remote: (0, 2, 64), inline: 0 });
    exchange(&mut ops, 3);
    exchange(&mut ops, 4);
    exchange(&mut ops, 4);
    // Out of place: an acknowledge where a READ's response is due, one for nothing sent.
    ops.push(Op::Post { qpn: 1, send: 1, opcode: 2, flags: 1, sges: vec![seed_sge(1, 64)], remote: (0, 2, 0), inline: 0 });
    ops.push(Op::Run { passes: 2 });
    ops.push(Op::Reflect { pick: 0, how: 2 | (0x1e << 3) }); // READ_REQUEST ^ 0x1e = ATOMIC_ACK
    ops.push(Op::Packet { qpn: 1, opcode: 0x12, psn: 0x77, va: 0, rkey: 0, len: 0, syndrome: 0x1f, payload: 0 });
    // Misaligned: an invalid request, both QPs to ERROR.
    ops.push(atomic(1, 7, 4, 8, 1, 0));
    exchange(&mut ops, 4);
    exchange(&mut ops, 4);
    // A second pair: a 4-byte buffer is a local length error, nothing sent.
    ops.extend([Op::CreateCq { cqn: 3, log_size: 4, vector: 0 }, Op::CreateCq { cqn: 4, log_size: 4, vector: 0 }]);
    ops.push(Op::Connect { a: 3, b: 4, fabric });
    ops.push(atomic(3, 7, 0, 4, 1, 0));
    exchange(&mut ops, 4);
    ops.extend([Op::Poll { cqn: 1 }, Op::Poll { cqn: 2 }, Op::Poll { cqn: 3 }]);
    ops
}

/// An SRQ (QP 5, limit 3) that QPs 2 and 4 receive from, fed by QPs 1 and 3 (loopback or
/// the wire): four RECVs taken in ring order by SENDs from both, the limit event, a
/// WRITE and a READ beside them, the SRQ's destroy refused, QP 2 to ERROR (LAST_WQE), a
/// receive doorbell on QP 4 (no RQ), then the rest.
fn srq_ops(fabric: u8) -> Vec<Op> {
    let mut ops: Vec<Op> = (1..=4).map(|cqn| Op::CreateCq { cqn, log_size: 6, vector: 1 }).collect();
    let modify = |qpn: u8, dest: u8, cqs: u8, strides: u8, psn: u32| Op::ModifyQp {
        qpn,
        state: 0,
        dest,
        access: 7,
        pd: 0,
        cqs,
        sizes: 0x44,
        strides,
        fabric: 0,
        mtu: 0,
        psn,
    };
    ops.push(modify(5, 0, 0x00, 0x91, 3));
    ops.extend([modify(1, 0, 0x11, 0x11, 0), modify(3, 0, 0x33, 0x11, 0), modify(2, 5, 0x22, 0x19, 0), modify(4, 5, 0x44, 0x19, 0)]);
    ops.extend([Op::Connect { a: 1, b: 2, fabric }, Op::Connect { a: 3, b: 4, fabric }]);
    ops.extend([seed_mr(1, vec![(0, 0), (0, 1)]), seed_mr(2, vec![(0, 16), (0, 17)])]);
    for _ in 0..4 {
        ops.push(seed_post(5, 0, 5, vec![seed_sge(2, 4096)]));
    }
    for (qpn, opcode) in [(1, 3), (3, 3), (1, 0), (3, 2), (1, 3), (3, 3)] {
        ops.push(seed_post(qpn, 1, opcode, vec![seed_sge(1, 3000)]));
        ops.push(Op::Run { passes: 8 });
        for _ in 0..6 {
            ops.push(Op::Reflect { pick: 0, how: 4 });
        }
    }
    ops.extend([
        Op::DestroyQp { qpn: 5 },
        Op::ModifyQp { qpn: 2, state: 3, dest: 0, access: 0, pd: 0, cqs: 0, sizes: 0, strides: 0, fabric: 0, mtu: 0, psn: 0 },
    ]);
    ops.push(Op::Doorbell { qpn: 4, send: 0, delta: 1 });
    ops.push(Op::Run { passes: 8 });
    ops.extend((1..=4).map(|cqn| Op::Poll { cqn }));
    ops
}

fn encode(ops: &[Op]) -> Vec<u8> {
    let mut out = Vec::new();
    ops.iter().for_each(|op| op.encode(&mut out));
    out
}

/// The MTT-wrap regression (issue found by hand): a loopback pair, an MR whose MTT holds
/// the last page below 2^64 followed by an ordinary page, used as a local SGE (a WRITE
/// from it) and through its remote key (a WRITE into it). Once `last.addr + last.len`
/// overflowed in `rnic/verbs/mr.rs`; now REG_MR refuses the MR and both WRITEs complete in
/// error.
#[cfg(test)]
pub fn mtt_wrap_ops() -> Vec<Op> {
    let mut ops = seed_ops(0);
    ops.push(seed_mr(7, vec![(1, 0), (0, 5)]));
    ops.push(seed_post(1, 1, 0, vec![seed_sge(7, 8192)]));
    ops.push(Op::Run { passes: 4 });
    ops.extend([Op::CreateCq { cqn: 3, log_size: 4, vector: 0 }, Op::CreateCq { cqn: 4, log_size: 4, vector: 0 }]);
    ops.push(Op::Connect { a: 3, b: 4, fabric: 0 });
    ops.push(Op::Post { qpn: 3, send: 1, opcode: 0, flags: 1, sges: vec![seed_sge(1, 64)], remote: (0, 7, 0xfff), inline: 0 });
    ops.push(Op::Run { passes: 4 });
    ops
}

/// Seeds of `dbpage`: the loopback and fabric pairs posting through the page, the loop
/// sleeping between posts (event indices published), raw stores of stale, overrunning
/// and out-of-range indices, and the page turned off and on again.
pub fn page_seeds() -> Vec<Vec<u8>> {
    let mut hostile = seed_ops(0);
    hostile.extend([
        Op::Sleep,
        seed_post(1, 1, 0, vec![seed_sge(1, 64)]),
        Op::Sleep,
        seed_post(1, 1, 0, vec![seed_sge(1, 64)]),
        Op::PageStore { field: 0, index: 1, value: 0x8000 },
        Op::PageStore { field: 1, index: 2, value: 3 },
        Op::PageStore { field: 4, index: 1, value: 0x40 },
        Op::PageStore { field: 2, index: 1, value: 0 },
        Op::PageStore { field: 0, index: 0xff, value: 0xffff },
        Op::Run { passes: 8 },
        Op::DmaCtrl { bits: 3 },
        Op::Sleep,
        Op::Reset,
        seed_post(1, 1, 0, vec![seed_sge(1, 64)]),
    ]);
    let mut around = seed_ops(1);
    for _ in 0..3 {
        around.extend([
            Op::Sleep,
            seed_post(2, 0, 5, vec![seed_sge(2, 64)]),
            seed_post(1, 1, 3, vec![seed_sge(1, 64)]),
            Op::Run { passes: 4 },
            Op::Reflect { pick: 0, how: 4 },
            Op::Reflect { pick: 0, how: 4 },
        ]);
    }
    [seed_ops(0), around, hostile].iter().map(|ops| encode(ops)).collect()
}

/// Seed inputs: loopback and fabric pairs moving data with each opcode, MRs whose MTT
/// holds pages at the end of the bus address space and an unmapped page, and hostile
/// doorbells and maps.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut wrap = seed_ops(0);
    wrap.extend([
        seed_mr(3, vec![(1, 1), (1, 0)]),
        seed_mr(4, vec![(0, 3), (2, 0)]),
        seed_post(1, 1, 0, vec![seed_sge(3, 8192)]),
        Op::Post { qpn: 1, send: 1, opcode: 0, flags: 1, sges: vec![seed_sge(1, 64)], remote: (0, 3, 0), inline: 0 },
        Op::Post { qpn: 2, send: 1, opcode: 2, flags: 1, sges: vec![seed_sge(2, 64)], remote: (0, 4, 0), inline: 0 },
    ]);
    let mut hostile = seed_ops(1);
    hostile.extend([
        Op::Map { kind: 0, pages: 3 },
        Op::Map { kind: 0x82, pages: 1 },
        seed_mr(5, vec![(3, 0), (3, 1 << 8)]),
        seed_post(1, 1, 0, vec![seed_sge(5, 8192)]),
        Op::Doorbell { qpn: 1, send: 1, delta: 0x8000 },
        Op::Reflect { pick: 3, how: 1 | 8 },
        Op::Reflect { pick: 0, how: 3 },
        Op::Unmap { which: 0 },
        Op::Run { passes: 20 },
        Op::Reset,
        Op::Run { passes: 1 },
    ]);
    let mut gpu = seed_ops(0);
    gpu.extend([
        seed_mr(6, vec![(5, 0), (5, 1)]),
        Op::Post { qpn: 1, send: 1, opcode: 0, flags: 1, sges: vec![seed_sge(1, 4096)], remote: (0, 6, 0), inline: 0 },
        Op::Run { passes: 4 },
        seed_mr(8, vec![(5, 0x100), (5, 0x101)]),
        Op::Arm { cqn: 1 },
        Op::Post { qpn: 1, send: 1, opcode: 0, flags: 1, sges: vec![seed_sge(1, 4096)], remote: (0, 8, 0), inline: 0 },
        Op::Run { passes: 4 },
        Op::Aperture { slot: 0, kind: 1 },
        Op::Post { qpn: 1, send: 1, opcode: 0, flags: 1, sges: vec![seed_sge(6, 64)], remote: (0, 2, 0), inline: 0 },
        Op::Run { passes: 4 },
        Op::Window { kind: 1 },
        Op::Aperture { slot: 1, kind: 2 },
        Op::Post { qpn: 2, send: 1, opcode: 2, flags: 1, sges: vec![seed_sge(2, 64)], remote: (0, 6, 0), inline: 0 },
        Op::Run { passes: 4 },
        Op::Window { kind: 2 },
        Op::Poll { cqn: 1 },
    ]);
    [seed_ops(0), seed_ops(1), wrap, hostile, timer_ops(), gpu, error_ops(), ud_ops(), srq_ops(0), srq_ops(1), atomic_ops(0), atomic_ops(1)]
        .iter()
        .map(|ops| encode(ops))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_emu_core::contract::counters::Counter;

    #[test]
    fn seeds_decode_to_the_operations_they_encode() {
        let ops = vec![
            Op::RegMr { index: 3, pd: 1, access: 7, iova_kind: 1, iova: u64::MAX, length: 9, page_shift: 12, pages: vec![(1, 2), (4, 5)] },
            Op::Post { qpn: 1, send: 1, opcode: 2, flags: 3, sges: vec![(0, 1, 2, 3, 4)], remote: (5, 6, 7), inline: 8 },
            Op::Packet { qpn: 1, opcode: 2, psn: 3, va: 4, rkey: 5, len: 6, syndrome: 7, payload: 8 },
            Op::Reset,
            Op::Consumed { cqn: 1, ci: 0xfffe },
        ];
        let mut bytes = Vec::new();
        ops.iter().for_each(|op| op.encode(&mut bytes));
        let mut u = Unstructured::new(&bytes);
        let back: Vec<Op> = (0..ops.len()).map(|_| u.arbitrary::<Op>().unwrap()).collect();
        assert_eq!(back, ops);
        assert!(u.is_empty());
    }

    /// The seeds move data: a loopback pair completes WRITEs, a fabric pair talks RC
    /// through the recording wire (requests and ACKs both ways).
    #[test]
    fn seeds_reach_rts_and_move_data() {
        let seeds = seeds();
        for (n, seed) in seeds.iter().enumerate() {
            let mut u = Unstructured::new(seed);
            let mut h = Harness::new(LOCAL, PEER, false).unwrap();
            while let (false, Ok(op)) = (u.is_empty(), u.arbitrary::<Op>()) {
                h.apply(&op);
            }
            h.apply(&Op::Run { passes: 255 });
            let s = &h.stats;
            let all = s.snapshot();
            assert!(s.get(Counter::Cqes) >= 5, "seed {n}: too few CQEs ({all:?})");
            // The atomic seeds (the last two) move 8-byte values, not payload.
            let moved = if n + 5 == seeds.len() {
                // The UD seed (before the SRQ ones): SENDs looped back and reflected land,
                // the one to a QP with no RECV is dropped, the WRITE refused.
                s.get(Counter::UdSent) >= 3 && s.get(Counter::UdReceived) >= 2 && s.get(Counter::ErrorCqes) >= 1
            } else if n + 2 >= seeds.len() {
                // The fabric one (the last) replays duplicates: an atomic's and a FLUSH's.
                let replayed = n + 1 < seeds.len() || s.get(Counter::AtomicsReplayed) >= 2;
                s.get(Counter::Atomics) >= 2 && s.get(Counter::AtomicWrites) == 1 && s.get(Counter::Flushes) == 1 && replayed
            } else {
                s.get(Counter::BytesWritten) > 0 && s.get(Counter::BytesSent) > 0 && s.get(Counter::BytesRead) > 0
            };
            assert!(moved, "seed {n}: data did not move ({all:?})");
            // The SRQ seeds (before the atomic ones): RECVs taken from the SRQ, its limit
            // event and QP 2's LAST_WQE, the destroy refused, the doorbell refused.
            if n + 4 == seeds.len() || n + 3 == seeds.len() {
                let srq =
                    s.get(Counter::RecvWqes) >= 3 && s.get(Counter::EqEvents) >= 2 && s.get(Counter::CommandErrors) >= 1 && s.get(Counter::GuestErrors) >= 1;
                assert!(srq, "seed {n}: the SRQ was not used ({all:?})");
            }
            if n == 1 {
                assert!(s.get(Counter::PktsReceived) >= 10 && s.get(Counter::AcksSent) > 0, "seed {n}: the fabric pair did not talk RC ({all:?})");
            }
        }
    }

    fn replay(seed: &[u8], use_page: bool) -> Harness {
        let mut u = Unstructured::new(seed);
        let mut h = Harness::new(LOCAL, PEER, use_page).unwrap();
        while let (false, Ok(op)) = (u.is_empty(), u.arbitrary::<Op>()) {
            h.apply(&op);
        }
        h
    }

    /// Both nodes of `verbs_pair` after the operations of `seed` (no final exchange).
    fn replay_pair(seed: &[u8]) -> [Harness; 2] {
        let mut u = Unstructured::new(seed);
        let mut nodes = [Harness::new(LOCAL, PEER, false).unwrap(), Harness::new(PEER, LOCAL, false).unwrap()];
        while let (false, Ok(sel), Ok(op)) = (u.is_empty(), u.arbitrary::<u8>(), u.arbitrary::<Op>()) {
            pair_step(&mut nodes, sel, &op);
        }
        nodes
    }

    /// The manual clock drives the timers: the timer seed waits out an RNR NAK, a
    /// retransmission timeout, and spends a retry budget (retry-exceeded completion).
    #[test]
    fn the_timer_seed_expires_rnr_and_retransmission_timers() {
        let h = replay(&encode(&timer_ops()), false);
        let s = &h.stats;
        let all = s.snapshot();
        assert!(s.get(Counter::RnrRetries) > 0, "no RNR wait ({all:?})");
        assert!(s.get(Counter::Retransmits) > 0, "no retransmission ({all:?})");
        let q1 = h.d.engine.qp(1).unwrap();
        assert_eq!(q1.state, rnic_emu_core::rnic::verbs::qp::QpState::Err, "the retry budget was spent: QP 1 in ERROR");
    }

    /// The error seed takes the error paths it names.
    #[test]
    fn the_error_seed_reaches_overflow_nak_and_rnr_failures() {
        let h = replay(&encode(&error_ops()), false);
        let s = &h.stats;
        let all = s.snapshot();
        assert!(s.get(Counter::NaksSent) > 0 && s.get(Counter::Retransmits) > 0, "no sequence NAK / go-back-N ({all:?})");
        assert!(s.get(Counter::ErrorCqes) > 0 && s.get(Counter::QpErrors) >= 2, "no failures ({all:?})");
        let errs: Vec<_> = cqes(&h, 3).iter().map(|c| c.status).collect();
        assert!(errs.contains(&WC_RNR_RETRY_EXC_ERR), "RNR retries exceeded on QP 3: {errs:?}");
    }

    /// The page seeds post through the doorbell page: the engine takes indices from it.
    #[test]
    fn page_seeds_move_data_through_the_doorbell_page() {
        for (n, seed) in page_seeds().iter().enumerate() {
            let h = replay(seed, true);
            let s = &h.stats;
            let all = s.snapshot();
            assert!(s.get(Counter::DbPageUpdates) > 0 && s.get(Counter::BytesWritten) > 0, "seed {n}: nothing through the page ({all:?})");
        }
    }

    /// The GPU seed moves data into and out of the GPU windows (P2P through the switch
    /// and the root complex), is refused once an aperture slot is cleared, and its armed
    /// CQ raises a vector.
    #[test]
    fn the_gpu_seed_reaches_the_peer_window() {
        let h = replay(&seeds()[5], false);
        let s = &h.stats;
        let all = s.snapshot();
        assert!(s.get(Counter::DmaP2pSwitchBytes) >= 4096 && s.get(Counter::DmaP2pRootComplexBytes) >= 4096, "no P2P DMA ({all:?})");
        assert!(s.get(Counter::Interrupts) > 0, "the armed CQ raised no vector ({all:?})");
        assert!(s.get(Counter::ApertureErrors) > 0, "no aperture refusal ({all:?})");
    }

    /// The CQEs of CQ `cqn` the harness's ring holds (valid ones, in order).
    fn cqes(h: &Harness, cqn: usize) -> Vec<Cqe> {
        let ring = CQ_RINGS + cqn as u64 * 0x1000;
        let mut out = Vec::new();
        for i in 0..1u64 << h.cq_log[cqn] {
            let mut c = Cqe::default();
            let _ = h.ram.read(ring + i * 32, c.as_mut_slice());
            if c.owner == 1 {
                out.push(c);
            }
        }
        out
    }

    /// Regression: the MTT-wrap input, from the local SGE path and the remote-key path,
    /// runs in every `cargo test` (and is kept as corpus/verbs_ops/regression-mtt-wrap).
    #[test]
    fn the_mtt_wrap_input_is_refused_and_completes_in_error() {
        let ops = mtt_wrap_ops();
        let kept = std::fs::read(crate::fuzzing::corpus_dir("verbs_ops").join("regression-mtt-wrap")).unwrap();
        assert_eq!(kept, encode(&ops), "the kept regression input is this one");
        let mut h = Harness::new(LOCAL, PEER, false).unwrap();
        let reg = ops.iter().position(|op| matches!(op, Op::RegMr { index: 7, .. })).unwrap();
        for op in &ops[..reg] {
            h.apply(op);
        }
        let refused = h.stats.get(Counter::CommandErrors);
        h.apply(&ops[reg]);
        assert_eq!(h.stats.get(Counter::CommandErrors), refused + 1, "REG_MR of the wrapping MTT refused");
        for op in &ops[reg + 1..] {
            h.apply(op);
        }
        let errors: Vec<_> = [1, 3].iter().flat_map(|&c| cqes(&h, c)).filter(|c| c.status != WC_SUCCESS).map(|c| (c.qpn, c.status)).collect();
        assert!(errors.iter().any(|&(q, st)| q == 1 && st == WC_LOC_PROT_ERR), "local SGE path: {errors:?}");
        assert!(errors.iter().any(|&(q, st)| q == 3 && st == WC_REM_ACCESS_ERR), "remote-key path: {errors:?}");
        assert!(!h.d.is_fatal());
    }

    /// The pair seed moves data between two engines over the in-memory wire, both ways.
    #[test]
    fn pair_seed_talks_rc_between_two_engines() {
        let seed = &pair_seeds()[0];
        let nodes = replay_pair(seed);
        for (n, h) in nodes.iter().enumerate() {
            let s = &h.stats;
            let all = s.snapshot();
            assert!(s.get(Counter::PktsReceived) >= 10 && s.get(Counter::AcksSent) > 0, "node {n}: no RC traffic ({all:?})");
            assert!(
                s.get(Counter::BytesWritten) > 0 && s.get(Counter::BytesRead) > 0 && s.get(Counter::BytesSent) > 0,
                "node {n}: data did not move ({all:?})"
            );
        }
        verbs_pair(seed);
    }

    /// The UC pair seed: messages land unacknowledged, the one with a lost packet is dropped
    /// whole and its RECV taken by the next, the one without a RECV dropped, the READ a
    /// local QP operation error; the oracle does not judge UC.
    #[test]
    fn uc_pair_seed_drops_whole_messages_and_acknowledges_nothing() {
        let seed = &pair_seeds()[1];
        let nodes = replay_pair(seed);
        for (n, h) in nodes.iter().enumerate() {
            let s = &h.stats;
            let all = s.snapshot();
            assert_eq!(s.get(Counter::AcksSent) + s.get(Counter::NaksSent), 0, "node {n}: UC acknowledged ({all:?})");
            assert!(s.get(Counter::BytesWritten) >= 6000 && s.get(Counter::BytesSent) >= 3000, "node {n}: data did not move ({all:?})");
            assert!(s.get(Counter::UcDropped) >= 2, "node {n}: the gapped SEND and the one without a RECV ({all:?})");
            let errs: Vec<u8> = cqes(h, 1).iter().filter(|c| c.status != WC_SUCCESS).map(|c| c.status).collect();
            assert!(errs.contains(&WC_LOC_QP_OP_ERR), "node {n}: the READ on UC: {errs:?}");
        }
        assert!(run_pair(seed).unchecked, "UC is not an RC claim");
    }

    /// The RC oracle is not vacuous: it checks the pair seed, which completes WRITEs,
    /// SENDs and READs with success; a claim it cannot back fails it.
    #[test]
    fn the_rc_oracle_checks_the_pair_seed_and_refuses_an_unbacked_claim() {
        let o = run_pair(&pair_seeds()[0]);
        assert!(!o.unchecked, "the seed keeps the PSN contract and forges nothing");
        assert!(o.claimed.iter().all(|&c| c > 0), "claimed {:?}", o.claimed);
        let nodes = [Harness::new(LOCAL, PEER, false).unwrap(), Harness::new(PEER, LOCAL, false).unwrap()];
        let ghost = RcOracle { claimed: [64, 0, 0], ..RcOracle::default() };
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ghost.check(&nodes)));
        assert!(r.is_err(), "64 bytes completed, none placed: flagged");
    }
}
