//! Conformance scenarios of docs/programming.md: each `#[test]` here is the check a rule
//! names as `host:<test>`. The real `rnic-emu serve` process is driven over its vfio-user
//! socket by `hostdrv` (no QEMU), so the register-level rules (invalid contexts, reserved
//! bits, split 64-bit writes, reset, DMA_CTRL, interrupts) reach the device exactly as
//! written, without a guest driver validating them first. Quiescence is checked by
//! poisoning memory the device must no longer touch and watching it for DMA.
//!
//! `every_rule_has_a_scenario` fails if a numbered rule in docs/programming.md has no
//! check, or names a scenario that does not exist (here, in rnic-verbs-check, or a
//! named test file).

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::contract::counters::Counter;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_testkit::hostdrv::{Connection, HostDriver, ServerProcess, IOVA, VA};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::time::Duration;
use vfio_bindings::bindings::vfio::*;
use vm_memory::ByteValued;

const SECOND: Duration = Duration::from_secs(10);
/// How long a quiescence check watches poisoned memory.
const WATCH: Duration = Duration::from_millis(300);
const POISON: u8 = 0xa5;
const BUF: u64 = 64 << 10;
const QP_ACC: u8 = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const MR_ACC: u8 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;

/// The scenarios run one at a time: each starts its own server, and dozens of them starting
/// at once on a loaded machine would turn timing margins into failures.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serialized() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// One node server and a host driver on its RNIC; QP 1 -> QP 2 loopback over CQ 1 / CQ 2,
/// MR 1 (src) and MR 2 (dst), `BUF` bytes each.
struct Dev {
    h: HostDriver,
    src: u64,
    dst: u64,
    lkey: u32,
    rkey: u32,
    _server: ServerProcess,
    _dir: tempfile::TempDir,
    _turn: std::sync::MutexGuard<'static, ()>,
}

fn dev() -> Dev {
    let turn = serialized();
    let dir = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(Path::new(bin()), &topology("single-switch"), dir.path(), None).unwrap();
    let mut h = HostDriver::connect(&server.socket("rnic0"), 32 << 20).unwrap();
    for n in [1, 2] {
        h.create_cq(n, 6, 1).unwrap();
        h.create_qp(n, 1, n, 4, QP_ACC).unwrap();
    }
    h.connect_qp(1, 2).unwrap();
    h.connect_qp(2, 1).unwrap();
    let (src, dst) = (h.alloc(BUF, 4096), h.alloc(BUF, 4096));
    h.ram.write(src, &pattern(3, 0, BUF as usize)).unwrap();
    let lkey = h.reg_mr(1, 1, MR_ACC, src, BUF).unwrap();
    let rkey = h.reg_mr(2, 1, MR_ACC, dst, BUF).unwrap();
    Dev { h, src, dst, lkey, rkey, _server: server, _dir: dir, _turn: turn }
}

impl Dev {
    fn write_wqe(&self, wr_id: u64, len: u32) -> (WqeHeader, Vec<Sge>) {
        let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, wr_id, VA + self.dst, self.rkey);
        (hdr, vec![Sge { addr: VA + self.src, length: len, lkey: self.lkey }])
    }

    fn recv_wqe(&self, wr_id: u64) -> (WqeHeader, Vec<Sge>) {
        let hdr = WqeHeader { opcode: WQE_OP_RECV, num_sge: 1, wr_id, ..Default::default() };
        (hdr, vec![Sge { addr: VA + self.dst, length: 4096, lkey: self.rkey }])
    }

    /// A connected pair `a` -> 2 over CQ `cqn` (created with 2^log entries if missing).
    fn qp_to_2(&mut self, a: u32, cqn: u32, log: u8) {
        if cqn > 2 {
            self.h.create_cq(cqn, log, 1).unwrap();
        }
        self.h.create_qp(a, 1, cqn, 4, QP_ACC).unwrap();
        self.h.connect_qp(a, 2).unwrap();
    }

    /// Table base (RAM offset) of a context table register.
    fn table(&mut self, reg: u64) -> u64 {
        self.h.r64(reg).unwrap() - IOVA
    }

    /// QUERY_QP n, then its context as written back.
    fn query(&mut self, qpn: u32) -> QpCtx {
        assert_eq!(self.h.cmd(CMD_QUERY_QP, qpn).unwrap(), CMD_OK);
        self.ctx_of(qpn)
    }

    fn ctx_of(&mut self, qpn: u32) -> QpCtx {
        let at = self.table(QP_CTX_BASE) + u64::from(qpn) * 64;
        let mut c = QpCtx::default();
        self.h.ram.read(at, c.as_mut_slice()).unwrap();
        c
    }

    /// Writes QP context n and runs CMD_MODIFY_QP on it; returns the status.
    fn modify(&mut self, qpn: u32, ctx: QpCtx) -> u32 {
        let at = self.table(QP_CTX_BASE) + u64::from(qpn) * 64;
        self.h.put(at, &ctx).unwrap();
        self.h.cmd(CMD_MODIFY_QP, qpn).unwrap()
    }

    fn set_state(&mut self, qpn: u32, state: u8) -> u32 {
        let mut c = self.ctx_of(qpn);
        c.state = state;
        self.modify(qpn, c)
    }

    fn stat(&mut self, c: Counter) -> u64 {
        self.h.r64(STATS_BASE + 8 * c as u64).unwrap()
    }

    fn fill(&self, off: u64, len: u64, byte: u8) {
        self.h.ram.write(off, &vec![byte; len as usize]).unwrap();
    }

    fn untouched(&self, off: u64, len: u64, byte: u8) -> bool {
        let mut got = vec![0u8; len as usize];
        self.h.ram.read(off, &mut got).unwrap();
        got.iter().all(|b| *b == byte)
    }

    /// RAM offset and size of CQ n's ring, from its context.
    fn cq_ring(&mut self, cqn: u32) -> (u64, u64) {
        let at = self.table(CQ_CTX_BASE) + u64::from(cqn) * 32;
        let mut c = CqCtx::default();
        self.h.ram.read(at, c.as_mut_slice()).unwrap();
        (c.ring_addr - IOVA, 32u64 << c.log_size)
    }

    fn no_cqe(&mut self, cqn: u32) -> bool {
        std::thread::sleep(WATCH);
        self.h.poll(cqn).unwrap().is_none()
    }
}

fn eventfd() -> File {
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    unsafe { File::from_raw_fd(fd) }
}

/// MSI-X vector `v` as an eventfd.
fn vector(h: &mut HostDriver, v: u32) -> File {
    let efd = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    h.client.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, v, 1, &[efd.as_raw_fd()]).unwrap();
    efd
}

fn fired(efd: &mut File, within: Duration) -> bool {
    let mut n = [0u8; 8];
    wait_until(within, || efd.read(&mut n).is_ok())
}

fn quiet(efd: &mut File) -> bool {
    std::thread::sleep(WATCH);
    let mut n = [0u8; 8];
    efd.read(&mut n).is_err()
}

// ---- device, registers ----

#[test]
fn identity() {
    let mut d = dev();
    let h = &mut d.h;
    assert_eq!(h.r32(RNIC_REG_ID).unwrap(), ID_MAGIC);
    assert_eq!(h.r32(RNIC_REG_VERSION).unwrap(), rnic_emu_core::regs::CONTRACT_VERSION);
    assert_eq!(h.r32(RNIC_REG_VERSION).unwrap() >> 16, 1, "major 1");
    assert_eq!(u64::from(h.r32(RNIC_REG_CAPS).unwrap()), CAPS_ALL);
    assert_eq!(u64::from(h.r32(RNIC_REG_STATUS).unwrap()), STATUS_READY | STATUS_DMA_ENABLED);
    assert_eq!(h.r32(RNIC_REG_NUM_VECTORS).unwrap(), 8);
    assert_eq!(u64::from(h.r32(RNIC_REG_MAX_QP).unwrap()), MAX_QP);
    assert_eq!(u64::from(h.r32(RNIC_REG_MAX_RING_LOG2).unwrap()), MAX_RING_LOG2);
}

#[test]
fn register_access() {
    let mut d = dev();
    let mut two = [0u8; 2];
    d.h.client.region_read(0, RNIC_REG_ID, &mut two).unwrap();
    assert_eq!(two, [0xff, 0xff], "a 2-byte read reads all-ones");
    assert_eq!(d.h.r32(0x7000).unwrap(), u32::MAX, "unmapped offset");
    assert_eq!(d.h.r32(RNIC_REG_ID + 2).unwrap_or(u32::MAX), u32::MAX, "misaligned");
    d.h.w32(RNIC_REG_ID, 0).unwrap();
    assert_eq!(d.h.r32(RNIC_REG_ID).unwrap(), ID_MAGIC, "RO write ignored");
    assert_eq!(d.h.r32(RNIC_REG_CMD).unwrap(), 0, "WO reads 0");
    // A 64-bit register in two halves, low first: each half lands when written.
    let base = d.h.r64(QP_CTX_BASE).unwrap();
    d.h.w32(QP_CTX_BASE, (base as u32) ^ 0x1000).unwrap();
    assert_eq!(d.h.r64(QP_CTX_BASE).unwrap(), base ^ 0x1000);
    d.h.w32(QP_CTX_BASE, base as u32).unwrap();
    d.h.w32(QP_CTX_BASE + 4, (base >> 32) as u32).unwrap();
    assert_eq!(d.h.r64(QP_CTX_BASE).unwrap(), base);
    // DMA_CTRL bits 3-7: stored, read back, no effect.
    let ctrl = (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32 | 0xf8;
    d.h.w32(DMA_CTRL, ctrl).unwrap();
    assert_eq!(d.h.r32(DMA_CTRL).unwrap(), ctrl);
    let w = d.write_wqe(1, 512);
    d.h.post(1, true, &[w]).unwrap();
    assert_eq!(d.h.wait(1, SECOND).unwrap().status, WC_SUCCESS);
    assert_eq!(d.stat(Counter::DbPageUpdates), 0, "bit 2 not set: no page");
}

#[test]
fn split_aperture_write() {
    let mut d = dev();
    let bogus: u64 = 0x12_3450_0000;
    d.h.w32(BAR1_APERTURE_1, bogus as u32).unwrap();
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), 0, "the low half alone is not checked");
    d.h.w32(BAR1_APERTURE_1 + 4, (bogus >> 32) as u32).unwrap();
    assert_eq!(d.h.r64(BAR1_APERTURE_1).unwrap(), bogus);
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_APERTURE << 24 | 1, "checked on the high half");
    d.h.w64(BAR1_APERTURE_2, bogus).unwrap();
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_APERTURE << 24 | 2, "checked on a full write");
    d.h.w64(BAR1_APERTURE_2, 0).unwrap();
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), 0, "0 means unused: no error");
}

#[test]
fn cmd_errors() {
    let mut d = dev();
    let h = &mut d.h;
    assert_eq!(h.cmd(0x7f, 1).unwrap(), CMD_ERR_BAD_OP);
    assert_eq!(h.cmd(CMD_CREATE_CQ, MAX_CQ as u32).unwrap(), CMD_ERR_BAD_INDEX);
    assert_eq!(h.cmd(CMD_MODIFY_QP, MAX_QP as u32).unwrap(), CMD_ERR_BAD_INDEX);
    assert_eq!(h.cmd(CMD_QUERY_QP, MAX_QP as u32).unwrap(), CMD_ERR_BAD_INDEX);
    assert_eq!(h.cmd(CMD_DESTROY_QP, 0xff_ffff).unwrap(), CMD_ERR_BAD_INDEX);
    assert_eq!(h.cmd(CMD_REG_MR, MAX_MR as u32).unwrap(), CMD_ERR_BAD_INDEX);
    assert_eq!(h.cmd(CMD_DESTROY_CQ, 9).unwrap(), CMD_ERR_NOT_FOUND);
    assert_eq!(h.cmd(CMD_DEREG_MR, 77).unwrap(), CMD_ERR_NOT_FOUND);
    assert_eq!(h.cmd(CMD_CREATE_CQ, 1).unwrap(), CMD_ERR_BUSY, "CQ 1 exists");
    assert_eq!(h.cmd(CMD_REG_MR, 1).unwrap(), CMD_ERR_BUSY, "MR 1 exists");
    assert_eq!(h.cmd(CMD_DESTROY_CQ, 1).unwrap(), CMD_ERR_BUSY, "QP 1 uses CQ 1");
    // Table unset or unmapped: CMD_ERR_DMA.
    let qp_base = h.r64(QP_CTX_BASE).unwrap();
    h.w64(QP_CTX_BASE, 0).unwrap();
    assert_eq!(h.cmd(CMD_MODIFY_QP, 5).unwrap(), CMD_ERR_DMA);
    h.w64(QP_CTX_BASE, qp_base).unwrap();
    let cq_base = h.r64(CQ_CTX_BASE).unwrap();
    h.w64(CQ_CTX_BASE, 0x10).unwrap();
    assert_eq!(h.cmd(CMD_CREATE_CQ, 5).unwrap(), CMD_ERR_DMA, "unmapped bus address");
    h.w64(CQ_CTX_BASE, cq_base).unwrap();
    assert_eq!(h.r64(STATS_BASE + 8 * Counter::CommandErrors as u64).unwrap(), 13);
}

// ---- tables, MRs ----

#[test]
fn tables_move() {
    let mut d = dev();
    // New (zeroed) QP, CQ, MR tables and MTT between commands, with objects in use.
    let (qp, cq, mr) = (d.h.alloc(MAX_QP * 64, 64), d.h.alloc(MAX_CQ * 32, 32), d.h.alloc(MAX_MR * 32, 32));
    d.h.w64(QP_CTX_BASE, IOVA + qp).unwrap();
    d.h.w64(CQ_CTX_BASE, IOVA + cq).unwrap();
    d.h.w64(MR_CTX_BASE, IOVA + mr).unwrap();
    let w = d.write_wqe(5, 4096);
    d.h.post(1, true, &[w]).unwrap();
    assert_eq!(d.h.wait(1, SECOND).unwrap().status, WC_SUCCESS, "objects keep working");
    let mut got = vec![0u8; 4096];
    d.h.ram.read(d.dst, &mut got).unwrap();
    assert_eq!(got, pattern(3, 0, 4096), "the WRITE landed");
    let q = d.query(1);
    assert_eq!((q.state, q.sq_ci), (QPS_RTS, 1), "write-back goes to the new table");
}

#[test]
fn mr_invalid() {
    let mut d = dev();
    let mr_tab = d.table(MR_CTX_BASE);
    let good = MrCtx { iova: VA, length: 8192, pd: 1, mtt_offset: 100, npages: 2, access: MR_ACC, key: 1, page_shift: 12, rsvd0: 0 };
    let mtt = d.table(MTT_BASE);
    for i in 0..2u64 {
        d.h.ram.write(mtt + (100 + i) * 8, &(IOVA + d.dst + i * 4096).to_le_bytes()).unwrap();
    }
    let entries = u64::from(d.h.r32(MTT_ENTRIES).unwrap());
    let bad = [
        MrCtx { page_shift: 11, ..good },
        MrCtx { page_shift: 31, ..good },
        MrCtx { access: 0x10 | MR_ACC, ..good },
        MrCtx { access: ACCESS_REMOTE_WRITE, ..good },
        MrCtx { access: ACCESS_REMOTE_ATOMIC | ACCESS_REMOTE_READ, ..good },
        MrCtx { length: 0, ..good },
        MrCtx { iova: u64::MAX - 100, ..good },
        MrCtx { rsvd0: 1, ..good },
        MrCtx { npages: 1, ..good },
        MrCtx { mtt_offset: (entries - 1) as u32, ..good },
    ];
    for (i, ctx) in bad.iter().enumerate() {
        d.h.put(mr_tab + 9 * 32, ctx).unwrap();
        assert_eq!(d.h.cmd(CMD_REG_MR, 9).unwrap(), CMD_ERR_INVALID, "bad MR context {i}");
    }
    d.h.ram.write(mtt + 100 * 8, &(IOVA + d.dst + 8).to_le_bytes()).unwrap();
    d.h.put(mr_tab + 9 * 32, &good).unwrap();
    assert_eq!(d.h.cmd(CMD_REG_MR, 9).unwrap(), CMD_ERR_INVALID, "MTT entry not page aligned");
    let base = d.h.r64(MTT_BASE).unwrap();
    d.h.w64(MTT_BASE, 0).unwrap();
    d.h.ram.write(mtt + 100 * 8, &(IOVA + d.dst).to_le_bytes()).unwrap();
    assert_eq!(d.h.cmd(CMD_REG_MR, 9).unwrap(), CMD_ERR_DMA, "MTT_BASE unset");
    d.h.w64(MTT_BASE, base).unwrap();
    assert_eq!(d.h.cmd(CMD_REG_MR, 9).unwrap(), CMD_OK);
    assert_eq!(d.h.cmd(CMD_REG_MR, 9).unwrap(), CMD_ERR_BUSY);
}

#[test]
fn mr_mtt_copied() {
    let mut d = dev();
    let other = d.h.alloc(4096, 4096);
    d.fill(other, 4096, POISON);
    let key = d.h.reg_mr(3, 1, MR_ACC, d.dst, 4096).unwrap();
    let mr_tab = d.table(MR_CTX_BASE);
    let mut ctx = MrCtx::default();
    d.h.ram.read(mr_tab + 3 * 32, ctx.as_mut_slice()).unwrap();
    let mtt = d.table(MTT_BASE);
    d.h.ram.write(mtt + u64::from(ctx.mtt_offset) * 8, &(IOVA + other).to_le_bytes()).unwrap();
    let (mut hdr, sges) = d.write_wqe(1, 4096);
    hdr.rkey = key;
    d.h.post(1, true, &[(hdr, sges)]).unwrap();
    assert_eq!(d.h.wait(1, SECOND).unwrap().status, WC_SUCCESS);
    assert!(d.untouched(other, 4096, POISON), "the MTT change after REG_MR has no effect");
    let mut got = vec![0u8; 4096];
    d.h.ram.read(d.dst, &mut got).unwrap();
    assert_eq!(got, pattern(3, 0, 4096), "written through the page list copied at REG_MR");
}

#[test]
fn dereg_quiescent() {
    let mut d = dev();
    assert_eq!(d.h.cmd(CMD_DEREG_MR, 2).unwrap(), CMD_OK);
    d.fill(d.dst, BUF, POISON);
    let w = d.write_wqe(7, 4096);
    d.h.post(1, true, &[w]).unwrap();
    let c = d.h.wait(1, SECOND).unwrap();
    assert_eq!((c.status, c.syndrome), (WC_REM_ACCESS_ERR, u32::from(QP_ERR_REMOTE_ACCESS)));
    // The local key of a deregistered MR: LOC_PROT_ERR on a fresh QP.
    assert_eq!(d.h.cmd(CMD_DEREG_MR, 1).unwrap(), CMD_OK);
    d.qp_to_2(3, 3, 4);
    let w = d.write_wqe(8, 64);
    d.h.post(3, true, &[w]).unwrap();
    let c = d.h.wait(3, SECOND).unwrap();
    assert_eq!((c.status, c.syndrome), (WC_LOC_PROT_ERR, u32::from(QP_ERR_LOCAL_ACCESS)));
    std::thread::sleep(WATCH);
    assert!(d.untouched(d.dst, BUF, POISON), "no DMA into a deregistered MR's pages");
}

// ---- CQs ----

#[test]
fn cq_invalid() {
    let mut d = dev();
    let tab = d.table(CQ_CTX_BASE);
    let ring = d.h.alloc(32 << 4, 4096);
    let good = CqCtx { ring_addr: IOVA + ring, log_size: 4, msix_vector: 1, ..Default::default() };
    let bad = [
        CqCtx { log_size: 16, ..good },
        CqCtx { ring_addr: 0, ..good },
        CqCtx { ring_addr: IOVA + ring + 16, ..good },
        CqCtx { ring_addr: u64::MAX - 31, log_size: 1, ..good },
        CqCtx { msix_vector: 8, ..good },
        CqCtx { rsvd0: 1, ..good },
    ];
    for (i, ctx) in bad.iter().enumerate() {
        d.h.put(tab + 7 * 32, ctx).unwrap();
        assert_eq!(d.h.cmd(CMD_CREATE_CQ, 7).unwrap(), CMD_ERR_INVALID, "bad CQ context {i}");
    }
    d.h.put(tab + 7 * 32, &good).unwrap();
    assert_eq!(d.h.cmd(CMD_CREATE_CQ, 7).unwrap(), CMD_OK);
    assert_eq!(d.h.cmd(CMD_DESTROY_CQ, 7).unwrap(), CMD_OK);
}

#[test]
fn cq_owner_and_ci() {
    let mut d = dev();
    d.qp_to_2(7, 7, 2); // CQ 7: 4 entries
    for i in 0..6u64 {
        let w = d.write_wqe(i, 64);
        d.h.post(7, true, &[w]).unwrap();
        let c = d.h.wait(7, SECOND).unwrap();
        assert_eq!((c.wr_id, c.status), (i, WC_SUCCESS));
        assert_eq!(c.owner, if i < 4 { 1 } else { 0 }, "owner flips on the second pass");
    }
    // A consumer index ahead of the producer is ignored: the CQ still has 4 free slots
    // and the next completions land normally.
    d.h.w32(CQE_CONS_IDX, 7 << 16 | 9).unwrap();
    for i in 6..10u64 {
        let w = d.write_wqe(i, 64);
        d.h.post(7, true, &[w]).unwrap();
    }
    for i in 6..10u64 {
        assert_eq!(d.h.wait(7, SECOND).unwrap().wr_id, i);
    }
    assert_eq!(d.query(7).state, QPS_RTS, "no overflow");
}

#[test]
fn cq_overflow() {
    let mut d = dev();
    let mut efd = vector(&mut d.h, 0);
    d.qp_to_2(8, 8, 1); // CQ 8: 2 entries
    let ws: Vec<_> = (0..3).map(|i| d.write_wqe(i, 64)).collect();
    d.h.post(8, true, &ws).unwrap();
    assert!(wait_until(SECOND, || d.stat(Counter::QpErrors) == 1), "the overflow moves the QP to ERROR");
    assert!(fired(&mut efd, SECOND), "async error on vector 0");
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_CQ_OVERFLOW << 24 | 8, "latched last: the CQ's, after its QPs'");
    let q = d.query(8);
    assert_eq!((q.state, q.err_reason), (QPS_ERR, QP_ERR_CQ));
    let (c0, c1) = (d.h.wait(8, SECOND).unwrap(), d.h.wait(8, SECOND).unwrap());
    assert_eq!((c0.wr_id, c1.wr_id, c0.status, c1.status), (0, 1, WC_SUCCESS, WC_SUCCESS), "never overwritten");
    assert!(d.no_cqe(8), "the third completion was dropped");
    // The CQ is in error (IBA's CQ overrun): consumed or not, it takes no CQE; a QP put on
    // it meets that at its first completion.
    d.h.create_qp(9, 1, 8, 4, QP_ACC).unwrap();
    d.h.connect_qp(9, 2).unwrap();
    let w = d.write_wqe(42, 64);
    d.h.post(9, true, &[w]).unwrap();
    assert!(wait_until(SECOND, || d.stat(Counter::QpErrors) == 2), "QP 9 to ERROR");
    assert!(d.no_cqe(8), "nothing written to the CQ in error");
    // Recovery: its QPs destroyed, the CQ destroyed and created again.
    for qpn in [8, 9] {
        assert_eq!(d.h.cmd(CMD_DESTROY_QP, qpn).unwrap(), CMD_OK);
    }
    assert_eq!(d.h.cmd(CMD_DESTROY_CQ, 8).unwrap(), CMD_OK);
    d.qp_to_2(8, 8, 1);
    let w = d.write_wqe(43, 64);
    d.h.post(8, true, &[w]).unwrap();
    let c = d.h.wait(8, SECOND).unwrap();
    assert_eq!((c.wr_id, c.status, c.qpn), (43, WC_SUCCESS, 8));
}

#[test]
fn cq_destroy_busy() {
    let mut d = dev();
    d.qp_to_2(3, 3, 4);
    assert_eq!(d.h.cmd(CMD_DESTROY_CQ, 3).unwrap(), CMD_ERR_BUSY, "QP 3 (RTS) uses it");
    assert_eq!(d.set_state(3, QPS_ERR), CMD_OK);
    assert_eq!(d.h.cmd(CMD_DESTROY_CQ, 3).unwrap(), CMD_ERR_BUSY, "QP 3 in ERROR still uses it");
    assert_eq!(d.h.cmd(CMD_DESTROY_QP, 3).unwrap(), CMD_OK);
    let (ring, len) = d.cq_ring(3);
    assert_eq!(d.h.cmd(CMD_DESTROY_CQ, 3).unwrap(), CMD_OK);
    d.fill(ring, len, POISON);
    // Work on other QPs, and doorbells naming the gone CQ: nothing reaches its ring.
    let w = d.write_wqe(1, 64);
    d.h.post(1, true, &[w]).unwrap();
    d.h.wait(1, SECOND).unwrap();
    d.h.w32(CQ_ARM, 3 << 16).unwrap();
    d.h.w32(CQE_CONS_IDX, 3 << 16 | 1).unwrap();
    std::thread::sleep(WATCH);
    assert!(d.untouched(ring, len, POISON));
}

// ---- QPs ----

#[test]
fn qp_states() {
    let mut d = dev();
    d.h.create_qp(3, 1, 1, 4, QP_ACC).unwrap();
    for bad in [4u8, 5, 7, 0xff] {
        assert_eq!(d.set_state(3, bad), CMD_ERR_INVALID, "state value {bad}");
    }
    assert_eq!(d.set_state(3, QPS_RTS), CMD_ERR_STATE, "INIT -> RTS");
    let c = d.ctx_of(3);
    assert_eq!(c.state, QPS_INIT, "written back after a failed command: unchanged");
    assert_eq!(d.set_state(3, QPS_ERR), CMD_OK);
    assert_eq!(d.set_state(3, QPS_INIT), CMD_ERR_STATE, "ERR -> INIT");
    let c = d.ctx_of(3);
    assert_eq!((c.state, c.err_reason), (QPS_ERR, QP_ERR_MODIFY));
    assert_eq!(d.set_state(3, QPS_RESET), CMD_OK);
    let c = d.ctx_of(3);
    assert_eq!((c.state, c.err_reason, c.sq_ci, c.rq_ci), (QPS_RESET, QP_ERR_NONE, 0, 0));
    assert_eq!(d.set_state(3, QPS_RTR), CMD_ERR_STATE, "RESET -> RTR");
}

#[test]
fn qp_invalid() {
    let mut d = dev();
    let (sq, rq) = (d.h.alloc(64 << 4, 4096), d.h.alloc(64 << 4, 4096));
    let good = QpCtx {
        state: QPS_INIT,
        sq_log_size: 4,
        rq_log_size: 4,
        sq_log_stride: 6,
        rq_log_stride: 6,
        access: QP_ACC,
        rnr_retry: 7,
        pd: 1,
        send_cqn: 1,
        recv_cqn: 1,
        sq_addr: IOVA + sq,
        rq_addr: IOVA + rq,
        ..Default::default()
    };
    let bad = [
        QpCtx { send_cqn: 50, ..good },
        QpCtx { recv_cqn: 50, ..good },
        QpCtx { sq_log_stride: 5, ..good },
        QpCtx { rq_log_stride: 9, ..good },
        QpCtx { sq_addr: IOVA + sq + 32, ..good },
        QpCtx { rq_addr: 0, ..good },
        QpCtx { sq_log_size: 16, ..good },
        QpCtx { sq_addr: u64::MAX - 63, sq_log_size: 1, ..good },
        QpCtx { rnr_retry: 8, ..good },
        QpCtx { access: 0x10, ..good },
    ];
    for (i, ctx) in bad.iter().enumerate() {
        assert_eq!(d.modify(4, *ctx), CMD_ERR_INVALID, "bad RESET->INIT context {i}");
        assert_eq!(d.ctx_of(4).state, QPS_RESET, "nothing applied");
    }
    assert_eq!(d.modify(4, good), CMD_OK);
    assert_eq!(d.modify(4, QpCtx { access: 0x80, ..good }), CMD_ERR_INVALID, "INIT->INIT, unknown access bit");
    assert_eq!(d.h.r32(RNIC_REG_IPV4).unwrap(), 0, "single-switch has no fabric");
    assert_eq!(d.modify(4, QpCtx { state: QPS_RTR, dest_qpn: 2, dest_ip: 0x7f00_0001, ..good }), CMD_ERR_INVALID, "dest_ip without a fabric");
    for (i, c) in [QpCtx { state: QPS_RTR, dest_qpn: MAX_QP as u32, ..good }, QpCtx { state: QPS_RTR, dest_qpn: 2, path_mtu: 7, ..good }].iter().enumerate() {
        assert_eq!(d.modify(4, *c), CMD_ERR_INVALID, "bad INIT->RTR context {i}");
    }
    assert_eq!(d.modify(4, QpCtx { state: QPS_RTR, dest_qpn: 2, ..good }), CMD_OK);
    for (i, c) in [QpCtx { retry_cnt: 8, ..good }, QpCtx { rnr_retry: 8, ..good }, QpCtx { timeout: 32, ..good }].iter().enumerate() {
        assert_eq!(d.modify(4, QpCtx { state: QPS_RTS, dest_qpn: 2, ..*c }), CMD_ERR_INVALID, "bad RTR->RTS context {i}");
    }
    assert_eq!(d.modify(4, QpCtx { state: QPS_RTS, dest_qpn: 2, ..good }), CMD_OK);
}

#[test]
fn qp_destroy_quiescent() {
    let mut d = dev();
    d.h.w32(DMA_CTRL, DMA_CTRL_INT_ENABLE as u32).unwrap(); // the WQEs wait
    let ws: Vec<_> = (0..4).map(|i| d.write_wqe(i, 4096)).collect();
    d.h.post(1, true, &ws).unwrap();
    let r = d.recv_wqe(9);
    d.h.post(2, false, &[r]).unwrap();
    assert_eq!(d.h.cmd(CMD_DESTROY_QP, 1).unwrap(), CMD_OK);
    assert_eq!(d.h.cmd(CMD_DESTROY_QP, 2).unwrap(), CMD_OK);
    let (r1, l1) = d.cq_ring(1);
    let (r2, l2) = d.cq_ring(2);
    d.fill(d.dst, BUF, POISON);
    d.fill(r1, l1, POISON);
    d.fill(r2, l2, POISON);
    d.h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32).unwrap();
    d.h.w32(WQE_DB_IDX, 1 << 16 | 4).unwrap(); // a doorbell to a QP in RESET: ignored
    std::thread::sleep(WATCH);
    assert!(d.untouched(d.dst, BUF, POISON), "no payload DMA after DESTROY_QP");
    assert!(d.untouched(r1, l1, POISON) && d.untouched(r2, l2, POISON), "no CQE after DESTROY_QP");
    assert_eq!(d.stat(Counter::SendWqes), 0);
    assert_eq!(d.stat(Counter::Cqes), 0);
}

// ---- doorbells, WQEs ----

#[test]
fn doorbell_states() {
    let mut d = dev();
    d.h.w32(WQE_DB_IDX, 300 << 16 | 1).unwrap(); // no such QP
    d.h.w32(WQE_DB_IDX, 5 << 16 | 3).unwrap(); // QP 5 in RESET
                                               // QP 3 in INIT: the doorbell is kept, the WQE runs once the QP reaches RTS.
    d.h.create_cq(3, 4, 1).unwrap();
    d.h.create_qp(3, 1, 3, 4, QP_ACC).unwrap();
    let w = d.write_wqe(33, 128);
    d.h.post(3, true, &[w]).unwrap();
    assert!(d.no_cqe(3), "nothing runs in INIT");
    d.h.connect_qp(3, 2).unwrap();
    let c = d.h.wait(3, SECOND).unwrap();
    assert_eq!((c.wr_id, c.status), (33, WC_SUCCESS));
    // QP 5, created after the ignored doorbell, starts at index 0.
    d.qp_to_2(5, 5, 4);
    let w = d.write_wqe(55, 64);
    d.h.post(5, true, &[w]).unwrap();
    let c = d.h.wait(5, SECOND).unwrap();
    assert_eq!((c.wr_id, c.status), (55, WC_SUCCESS));
    assert!(d.no_cqe(5), "exactly one WQE ran");
    // RECVs are taken from INIT on.
    d.h.create_cq(6, 4, 1).unwrap();
    d.h.create_qp(6, 1, 6, 4, QP_ACC).unwrap();
    let r = d.recv_wqe(66);
    d.h.post(6, false, &[r]).unwrap();
    d.h.connect_qp(6, 3).unwrap();
    let hdr = WqeHeader { opcode: WQE_OP_SEND, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id: 34, ..Default::default() };
    let q3 = d.ctx_of(3);
    let mut ctx = q3;
    ctx.state = QPS_RESET;
    assert_eq!(d.modify(3, ctx), CMD_OK);
    d.h.create_qp(3, 1, 3, 4, QP_ACC).unwrap();
    d.h.connect_qp(3, 6).unwrap();
    d.h.post(3, true, &[(hdr, vec![Sge { addr: VA + d.src, length: 100, lkey: d.lkey }])]).unwrap();
    let r = d.h.wait(6, SECOND).unwrap();
    assert_eq!((r.wr_id, r.opcode, r.byte_len), (66, CQE_OP_RECV, 100));
}

#[test]
fn doorbell_overrun() {
    let mut d = dev();
    d.h.create_cq(6, 4, 1).unwrap();
    d.h.create_qp(6, 1, 6, 2, QP_ACC).unwrap(); // 4-entry rings
    d.h.connect_qp(6, 2).unwrap();
    d.h.w32(WQE_DB_IDX, 6 << 16 | 5).unwrap();
    assert!(wait_until(SECOND, || d.query(6).state == QPS_ERR));
    assert_eq!(d.query(6).err_reason, QP_ERR_BAD_WQE);
    assert_eq!(d.stat(Counter::SendWqes), 0, "no WQE of the overrun executed");
}

#[test]
fn wqe_malformed() {
    let mut d = dev();
    let base = rdma_wqe(WQE_OP_RDMA_WRITE, 1, VA + d.dst, d.rkey);
    let bad = [
        WqeHeader { opcode: 9, ..base },
        WqeHeader { opcode: WQE_OP_RECV, ..base },
        WqeHeader { flags: WQE_FLAG_SIGNALED | 0x80, ..base },
        WqeHeader { rsvd0: 1, ..base },
        WqeHeader { num_sge: 3, ..base },
        WqeHeader { opcode: WQE_OP_RDMA_READ, flags: WQE_FLAG_SIGNALED | WQE_FLAG_INLINE, num_sge: 0, inline_len: 8, ..base },
        WqeHeader { flags: WQE_FLAG_SIGNALED | WQE_FLAG_INLINE, num_sge: 0, inline_len: 33, ..base },
        WqeHeader { flags: WQE_FLAG_SIGNALED | WQE_FLAG_INLINE, num_sge: 1, inline_len: 8, ..base },
    ];
    for (i, hdr) in bad.iter().enumerate() {
        let qpn = 10 + i as u32;
        d.h.create_qp(qpn, 1, 1, 4, QP_ACC).unwrap();
        d.h.connect_qp(qpn, 2).unwrap();
        d.h.post(qpn, true, &[(WqeHeader { wr_id: 100 + i as u64, ..*hdr }, vec![Sge { addr: VA + d.src, length: 8, lkey: d.lkey }])]).unwrap();
        let c = d.h.wait(1, SECOND).unwrap();
        assert_eq!((c.wr_id, c.status, c.syndrome), (100 + i as u64, WC_LOC_QP_OP_ERR, u32::from(QP_ERR_BAD_WQE)), "malformed WQE {i}");
        assert_eq!(d.query(qpn).state, QPS_ERR);
    }
    // A malformed RECV (a send opcode on the RQ) fails when a message needs it.
    let hdr = WqeHeader { opcode: WQE_OP_SEND, num_sge: 1, wr_id: 200, ..Default::default() };
    d.h.post(2, false, &[(hdr, vec![Sge { addr: VA + d.dst, length: 64, lkey: d.rkey }])]).unwrap();
    let send = WqeHeader { opcode: WQE_OP_SEND, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id: 201, ..Default::default() };
    d.h.post(1, true, &[(send, vec![Sge { addr: VA + d.src, length: 8, lkey: d.lkey }])]).unwrap();
    let r = d.h.wait(2, SECOND).unwrap();
    assert_eq!((r.wr_id, r.status), (200, WC_LOC_QP_OP_ERR));
}

#[test]
fn wqe_zero_sge() {
    let mut d = dev();
    let r = (WqeHeader { opcode: WQE_OP_RECV, num_sge: 0, wr_id: 70, ..Default::default() }, vec![]);
    d.h.post(2, false, &[r]).unwrap();
    let write = WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: WQE_FLAG_SIGNALED, wr_id: 71, remote_addr: VA + d.dst, rkey: d.rkey, ..Default::default() };
    let send = WqeHeader { opcode: WQE_OP_SEND, flags: WQE_FLAG_SIGNALED | WQE_FLAG_SOLICITED, wr_id: 72, ..Default::default() };
    d.fill(d.dst, 64, POISON);
    d.h.post(1, true, &[(write, vec![]), (send, vec![])]).unwrap();
    let (a, b) = (d.h.wait(1, SECOND).unwrap(), d.h.wait(1, SECOND).unwrap());
    assert_eq!((a.wr_id, a.status, a.byte_len), (71, WC_SUCCESS, 0));
    assert_eq!((b.wr_id, b.status, b.byte_len), (72, WC_SUCCESS, 0));
    let r = d.h.wait(2, SECOND).unwrap();
    assert_eq!((r.wr_id, r.status, r.byte_len, r.opcode), (70, WC_SUCCESS, 0, CQE_OP_RECV));
    assert!(d.untouched(d.dst, 64, POISON), "a zero-length WRITE moves no byte");
}

#[test]
fn doorbell_page_fields() {
    use rnic_emu_core::regs::pci_ids::RNIC_DB_BAR;
    use rnic_emu_core::regs::rnic::dbpage::*;
    let mut d = dev();
    let bar = RNIC_DB_BAR as u32;
    let rd = |d: &mut Dev, off: u64| {
        let mut b = [0u8; 4];
        d.h.client.region_read(bar, off, &mut b).unwrap();
        u32::from_le_bytes(b)
    };
    let ws: Vec<_> = (0..3).map(|i| d.write_wqe(i, 64)).collect();
    d.h.post(1, true, &ws).unwrap(); // MMIO doorbell, page off
    for _ in 0..3 {
        d.h.wait(1, SECOND).unwrap();
    }
    let q1 = QP_PAGES + PAGE;
    assert_eq!((rd(&mut d, q1 + SQ_PI), rd(&mut d, q1 + SQ_EVENT)), (0, 0), "page off: untouched");
    d.h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE | DMA_CTRL_DB_PAGE) as u32).unwrap();
    assert_eq!((rd(&mut d, q1 + SQ_PI), rd(&mut d, q1 + SQ_EVENT)), (3, 3), "turning it on copies the indices");
    assert_eq!(d.h.cmd(CMD_DESTROY_QP, 1).unwrap(), CMD_OK);
    assert_eq!((rd(&mut d, q1 + SQ_PI), rd(&mut d, q1 + SQ_EVENT)), (0, 0), "a QP entering RESET: zeroed");
    let c5 = CQ_PAGES + 5 * PAGE + CQ_CI;
    d.h.client.region_write(bar, c5, &7u32.to_le_bytes()).unwrap();
    d.h.create_cq(5, 4, 1).unwrap();
    assert_eq!(rd(&mut d, c5), 0, "CREATE_CQ zeroes the CQ's consumer index");
    d.h.client.region_write(bar, q1 + RQ_PI, &9u32.to_le_bytes()).unwrap();
    d.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    assert_eq!(rd(&mut d, q1 + RQ_PI), 0, "RESET zeroes the page");
}

// ---- completions, errors, interrupts ----

#[test]
fn flush_contents() {
    let mut d = dev();
    d.h.w32(DMA_CTRL, DMA_CTRL_INT_ENABLE as u32).unwrap();
    let w = d.write_wqe(1, 64);
    let s = (WqeHeader { opcode: WQE_OP_SEND, flags: 0, num_sge: 0, wr_id: 2, ..Default::default() }, vec![]);
    d.h.post(1, true, &[w, s]).unwrap();
    let rs = [d.recv_wqe(3), d.recv_wqe(4)];
    d.h.post(1, false, &rs).unwrap();
    assert_eq!(d.set_state(1, QPS_ERR), CMD_OK);
    d.h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32).unwrap();
    let want = [(1, CQE_OP_RDMA_WRITE), (2, CQE_OP_SEND), (3, CQE_OP_RECV), (4, CQE_OP_RECV)];
    for (id, op) in want {
        let c = d.h.wait(1, SECOND).unwrap();
        assert_eq!((c.wr_id, c.opcode, c.status, c.byte_len, c.syndrome, c.qpn), (id, op, WC_WR_FLUSH_ERR, 0, 0, 1), "flush of {id}");
    }
    let late = d.write_wqe(5, 64); // rung in ERROR: flushed too
    d.h.post(1, true, &[late]).unwrap();
    let c = d.h.wait(1, SECOND).unwrap();
    assert_eq!((c.wr_id, c.status), (5, WC_WR_FLUSH_ERR));
}

#[test]
fn async_errors() {
    let mut d = dev();
    let mut efd = vector(&mut d.h, 0);
    for q in [3, 4, 5] {
        d.h.create_qp(q, 1, 1, 4, QP_ACC).unwrap();
    }
    assert_eq!(d.set_state(3, QPS_ERR), CMD_OK);
    assert!(fired(&mut efd, SECOND), "vector 0 raised");
    assert_ne!(u64::from(d.h.r32(RNIC_REG_STATUS).unwrap()) & STATUS_ERROR, 0);
    assert_eq!(d.set_state(4, QPS_ERR), CMD_OK);
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_QP << 24 | 4, "a second error replaces the first");
    assert_eq!(u64::from(d.h.r32(RNIC_REG_STATUS).unwrap()) & STATUS_ERROR, 0, "reading LAST_ERROR clears STATUS_ERROR");
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), 0);
    fired(&mut efd, Duration::from_millis(50)); // drain the second error's interrupt
    d.h.w32(DMA_CTRL, DMA_CTRL_ENABLE as u32).unwrap();
    assert_eq!(d.set_state(5, QPS_ERR), CMD_OK);
    assert!(quiet(&mut efd), "INT_ENABLE clear: no interrupt");
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_QP << 24 | 5, "latched all the same");
}

#[test]
fn arm_interrupts() {
    let mut d = dev();
    let mut efd = vector(&mut d.h, 1);
    let (ring, _) = d.cq_ring(1);
    // Armed: the completion raises the vector once, the CQE already in memory.
    d.h.w32(CQ_ARM, 1 << 16 | 0xbeef).unwrap(); // bits [15:0] ignored
    let w = d.write_wqe(1, 64);
    d.h.post(1, true, &[w]).unwrap();
    assert!(fired(&mut efd, SECOND));
    let mut cqe = Cqe::default();
    d.h.ram.read(ring, cqe.as_mut_slice()).unwrap();
    assert_eq!((cqe.owner, cqe.wr_id), (1, 1), "the CQE is visible when the interrupt arrives");
    d.h.poll(1).unwrap();
    let w = d.write_wqe(2, 64);
    d.h.post(1, true, &[w]).unwrap();
    d.h.wait(1, SECOND).unwrap();
    assert!(quiet(&mut efd), "one-shot: not re-armed, no interrupt");
    // Arming over an unconsumed completion raises at once.
    let w = d.write_wqe(3, 64);
    d.h.post(1, true, &[w]).unwrap();
    assert!(wait_until(SECOND, || d.stat(Counter::Cqes) == 3));
    d.h.w32(CQ_ARM, 1 << 16).unwrap();
    assert!(fired(&mut efd, SECOND), "arm with a completion pending");
    d.h.wait(1, SECOND).unwrap();
    // INT_ENABLE clear: nothing raised and nothing pending; the arm stays.
    d.h.w32(DMA_CTRL, DMA_CTRL_ENABLE as u32).unwrap();
    d.h.w32(CQ_ARM, 1 << 16).unwrap();
    let w = d.write_wqe(4, 64);
    d.h.post(1, true, &[w]).unwrap();
    d.h.wait(1, SECOND).unwrap();
    d.h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32).unwrap();
    assert!(quiet(&mut efd), "not pending after INT_ENABLE is set again");
    let w = d.write_wqe(5, 64);
    d.h.post(1, true, &[w]).unwrap();
    assert!(fired(&mut efd, SECOND), "the arm survived the completion that raised nothing");
    d.h.wait(1, SECOND).unwrap();
    // INT_ENABLE clear and an arm over an unconsumed completion: disarmed, nothing raised.
    d.h.w32(DMA_CTRL, DMA_CTRL_ENABLE as u32).unwrap();
    let w = d.write_wqe(6, 64);
    d.h.post(1, true, &[w]).unwrap();
    assert!(wait_until(SECOND, || d.stat(Counter::Cqes) == 6));
    d.h.w32(CQ_ARM, 1 << 16).unwrap();
    d.h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32).unwrap();
    d.h.wait(1, SECOND).unwrap();
    let w = d.write_wqe(7, 64);
    d.h.post(1, true, &[w]).unwrap();
    d.h.wait(1, SECOND).unwrap();
    assert!(quiet(&mut efd), "that arm was used up without an interrupt");
}

// ---- reset, enable ----

#[test]
fn dma_disable_quiescent() {
    let mut d = dev();
    d.h.w32(DMA_CTRL, DMA_CTRL_INT_ENABLE as u32).unwrap();
    assert_eq!(u64::from(d.h.r32(RNIC_REG_STATUS).unwrap()) & STATUS_DMA_ENABLED, 0);
    d.fill(d.dst, BUF, POISON);
    let w = d.write_wqe(1, 4096);
    d.h.post(1, true, &[w]).unwrap();
    // Commands still run: a QP created, given RECVs and moved to ERROR (its flushes wait).
    d.qp_to_2(3, 3, 4);
    let rs = [d.recv_wqe(2), d.recv_wqe(3)];
    d.h.post(3, false, &rs).unwrap();
    assert_eq!(d.set_state(3, QPS_ERR), CMD_OK, "commands work with DMA disabled");
    let (r1, l1) = d.cq_ring(1);
    let (r3, l3) = d.cq_ring(3);
    std::thread::sleep(WATCH);
    assert!(d.untouched(d.dst, BUF, POISON), "no WQE executed");
    assert!(d.untouched(r1, l1, 0) && d.untouched(r3, l3, 0), "no CQE written, flushes included");
    d.h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32).unwrap();
    assert_eq!(d.h.wait(1, SECOND).unwrap().status, WC_SUCCESS, "the doorbell was kept");
    assert_eq!(d.h.wait(3, SECOND).unwrap().status, WC_WR_FLUSH_ERR);
    assert_eq!(d.h.wait(3, SECOND).unwrap().status, WC_WR_FLUSH_ERR);
}

#[test]
fn reset() {
    let mut d = dev();
    let mut efd = vector(&mut d.h, 1);
    d.h.w32(RNIC_REG_SCRATCH, 0x55).unwrap();
    d.h.w32(RNIC_REG_RESET, 2).unwrap();
    assert_eq!(d.h.r32(RNIC_REG_SCRATCH).unwrap(), 0x55, "only RESET_MAGIC resets");
    d.h.w32(DMA_CTRL, DMA_CTRL_INT_ENABLE as u32).unwrap();
    let w = d.write_wqe(1, 4096);
    d.h.post(1, true, &[w]).unwrap(); // waits: DMA disabled
    let (r1, l1) = d.cq_ring(1);
    d.fill(d.dst, BUF, POISON);
    d.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    // Synchronous: everything is back to reset values at the next access.
    for r in REGS {
        if r.access != rnic_emu_core::regs::Access::Wo && !matches!(r.offset, RNIC_REG_INT_COUNT) {
            let got = if r.width == 8 { d.h.r64(r.offset).unwrap() } else { u64::from(d.h.r32(r.offset).unwrap()) };
            let want = match r.offset {
                RNIC_REG_NUM_VECTORS => 8,
                RNIC_REG_NUM_GPUS => got,
                RNIC_REG_IPV4 => got,
                // Per node: the permanent MAC, which ETH_MAC copies; the link is physical.
                ETH_PERM_MAC | ETH_LINK => got,
                ETH_MAC => d.h.r64(ETH_PERM_MAC).unwrap(),
                _ => r.reset,
            };
            assert_eq!(got, want, "{} after reset", r.name);
        }
    }
    assert_eq!(d.stat(Counter::Commands), 0, "statistics cleared");
    assert_eq!(d.h.cmd(CMD_DESTROY_QP, 1).unwrap(), CMD_OK);
    assert_eq!(d.h.cmd(CMD_DESTROY_CQ, 1).unwrap(), CMD_ERR_NOT_FOUND, "objects forgotten");
    assert_eq!(d.h.cmd(CMD_DEREG_MR, 1).unwrap(), CMD_ERR_NOT_FOUND);
    std::thread::sleep(WATCH);
    assert!(d.untouched(d.dst, BUF, POISON) && d.untouched(r1, l1, 0), "the pending WQE never ran");
    // The MSI-X table is the VMM's: the vector still reaches its eventfd.
    d.h.w32(RNIC_REG_INT_TRIGGER, 1).unwrap();
    assert!(fired(&mut efd, SECOND), "MSI-X routing kept across RESET");
    assert_eq!(d.h.r32(RNIC_REG_INT_COUNT).unwrap(), 1);
    d.h.w32(RNIC_REG_INT_TRIGGER, 8).unwrap(); // beyond NUM_VECTORS
    d.h.w32(RNIC_REG_INT_TRIGGER, 2).unwrap(); // not enabled by the VMM
    assert_eq!(d.h.r32(RNIC_REG_INT_COUNT).unwrap(), 1, "nothing raised");
}

// ---- fabric ----

/// A frame of `len` bytes from this port's MAC to the broadcast address.
fn eth_frame(mac: u64, len: usize, seed: u8) -> Vec<u8> {
    let mut f = vec![0xffu8; 6];
    f.extend_from_slice(&mac.to_le_bytes()[..6]);
    f.extend_from_slice(&[0x88, 0xb5]); // local experimental EtherType
    f.extend((0..len.saturating_sub(14)).map(|i| seed.wrapping_add(i as u8)));
    f.truncate(len);
    f
}

#[test]
fn eth_port() {
    let mut d = dev();
    // Identity: a locally administered unicast MAC, copied into ETH_MAC.
    let perm = d.h.r64(ETH_PERM_MAC).unwrap();
    assert!(perm != 0 && perm & 0x3 == 0x2, "ETH_PERM_MAC {perm:#x}");
    assert_eq!(d.h.r64(ETH_MAC).unwrap(), perm);
    assert_eq!(u64::from(d.h.r32(ETH_SPEED).unwrap()), 100_000);
    // MTU bounds: a refused value leaves the register as it was.
    let errors = d.stat(Counter::GuestErrors);
    d.h.w32(ETH_MTU, 67).unwrap();
    d.h.w32(ETH_MTU, 9001).unwrap();
    assert_eq!(d.h.r32(ETH_MTU).unwrap(), 1500);
    d.h.w32(ETH_MTU, 9000).unwrap();
    assert_eq!(d.h.r32(ETH_MTU).unwrap(), 9000);
    d.h.w32(ETH_MTU, 1500).unwrap();
    // A misaligned ring is refused and reads back off.
    d.h.w64(ETH_TXQ_BASE, IOVA + 0x1008).unwrap();
    d.h.w32(ETH_TXQ_LOG, 4).unwrap();
    d.h.w32(ETH_CTRL, eth::CTRL_TX_EN as u32).unwrap();
    assert_eq!(d.h.r32(ETH_CTRL).unwrap(), 0);
    assert_eq!(d.stat(Counter::GuestErrors), errors + 3);
    // Transmit: every descriptor completes, a runt with DESC_ERR; with the link down
    // (no segment attached) every frame is refused.
    d.h.eth_up(4).unwrap();
    let link = d.h.r32(ETH_LINK).unwrap() & eth::LINK_UP as u32 != 0;
    for (len, seed) in [(60, 1), (13, 2), (1514, 3)] {
        d.h.eth_send(&eth_frame(perm, len, seed)).unwrap();
    }
    let flags = d.h.eth_tx_done(SECOND).unwrap();
    let (ok, err) = (eth::DESC_DONE, eth::DESC_DONE | eth::DESC_ERR);
    assert_eq!(flags, if link { vec![ok, err, ok] } else { vec![err, err, err] }, "link up: {link}");
    assert_eq!(d.h.r32(ETH_TXQ_CI).unwrap(), 3);
    assert_eq!(d.stat(Counter::EthTxErrors), if link { 1 } else { 3 });
    // ETH_ARM: at once over unseen descriptors, else at the next one.
    let mut efd = vector(&mut d.h, 2);
    d.h.w32(ETH_VECTOR, 2).unwrap();
    d.h.w32(ETH_ARM, 0).unwrap();
    assert!(fired(&mut efd, SECOND), "the device is at 3, the driver saw 0");
    d.h.w32(ETH_ARM, 3).unwrap();
    assert!(quiet(&mut efd));
    d.h.eth_send(&eth_frame(perm, 60, 4)).unwrap();
    assert!(fired(&mut efd, SECOND), "the next completed descriptor");
    d.h.eth_tx_done(SECOND).unwrap();
    // Receive buffers are taken; no segment delivers frames here.
    d.h.eth_post_rx(8).unwrap();
    assert_eq!(d.h.r32(ETH_RXQ_CI).unwrap(), 0);
    // DMA_CTRL ENABLE clear: the frame waits, then goes.
    d.h.w32(DMA_CTRL, DMA_CTRL_INT_ENABLE as u32).unwrap();
    d.h.eth_send(&eth_frame(perm, 60, 5)).unwrap();
    assert!(d.h.eth_tx_done(WATCH).is_err(), "nothing moves with DMA disabled");
    assert_eq!(d.h.r32(ETH_TXQ_CI).unwrap(), 4);
    d.h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32).unwrap();
    assert_eq!(d.h.eth_tx_done(SECOND).unwrap().len(), 1);
    // Reset: both rings off, indices zero, MAC and MTU back.
    d.h.w64(ETH_MAC, 0x0605_0403_0206).unwrap();
    d.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    let after = [ETH_CTRL, ETH_TXQ_CI, ETH_RXQ_CI].map(|r| d.h.r32(r).unwrap());
    assert_eq!(after, [0, 0, 0]);
    assert_eq!((d.h.r64(ETH_MAC).unwrap(), d.h.r32(ETH_MTU).unwrap()), (perm, 1500));
}

#[test]
fn responder_not_ready_loopback() {
    let mut d = dev();
    assert_eq!(d.set_state(2, QPS_ERR), CMD_OK);
    let w = d.write_wqe(1, 64);
    d.h.post(1, true, &[w]).unwrap();
    let c = d.h.wait(1, SECOND).unwrap();
    assert_eq!((c.wr_id, c.status), (1, WC_REM_OP_ERR), "loopback: refused at once");
}

/// Two nodes (own loopback addresses): a responder in RESET drops packets (the requester
/// retries, then RETRY_EXC_ERR, and no byte reaches the destroyed QP's memory); mismatched
/// path MTUs are refused (REM_INV_REQ_ERR); a send PSN behind the responder's expected PSN
/// is taken for a duplicate (acknowledged, nothing written), one ahead of it is a sequence
/// error (retried, then RETRY_EXC_ERR); a QP whose dest_ip is its own
/// node's address goes through the fabric port like any remote QP.
#[test]
fn fabric_conformance() {
    use rnic_emu_testkit::hostdrv::NodePair;
    let _turn = serialized();
    let (mut p, _dir) = node_pair(110, "", 2, 10);
    let ips = p.ips;
    let write = |p: &mut NodePair, qpn: u32, from: usize, off: u64, len: u32, wr_id: u64| {
        let to = 1 - from;
        let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, wr_id, VA + p.buf[to] + off, p.key[to]);
        let sge = Sge { addr: VA + p.buf[from] + off, length: len, lkey: p.key[from] };
        p.h[from].post(qpn, true, &[(hdr, vec![sge])]).unwrap();
    };
    let untouched = |p: &NodePair, i: usize, off: u64, len: usize| {
        let mut got = vec![0u8; len];
        p.h[i].ram.read(p.buf[i] + off, &mut got).unwrap();
        got.iter().all(|b| *b == POISON)
    };
    p.h[0].ram.write(p.buf[0], &pattern(5, 0, 1 << 20)).unwrap();
    p.h[1].ram.write(p.buf[1], &vec![POISON; 1 << 20]).unwrap();
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    // QPs n = 2..=5 on both nodes, each with its own CQ, connected n <-> n with `c(n, i)`.
    let conn = |n: u32, i: usize| {
        // Generous timers where success is expected (a loaded machine delays ACKs); QP 2
        // must exhaust its retries: 2 x 16 ms.
        let (retry_cnt, timeout) = if matches!(n, 2 | 5) { (1, 12) } else { (7, 16) };
        let mut c = Connection { dest_qpn: n, dest_ip: Some(ips[1 - i]), retry_cnt, timeout, ..Default::default() };
        match n {
            3 => c.path_mtu_log = if i == 0 { 12 } else { 8 },
            4 => (c.sq_psn, c.rq_psn) = if i == 0 { (100, 100) } else { (300, 300) },
            5 => (c.sq_psn, c.rq_psn) = if i == 0 { (500, 500) } else { (300, 300) },
            _ => {}
        }
        c
    };
    for n in 2..=5u32 {
        for i in 0..2 {
            p.h[i].create_cq(n, 6, 1).unwrap();
            p.h[i].create_qp(n, 1, n, 6, access).unwrap();
            p.h[i].connect_with(n, &conn(n, i)).unwrap();
        }
    }
    // A responder QP in RESET: packets dropped, the requester exhausts its retries.
    assert_eq!(p.h[1].cmd(CMD_DESTROY_QP, 2).unwrap(), CMD_OK);
    let dropped = stat(&mut p.h[1], Counter::PktsDropped);
    write(&mut p, 2, 0, 0, 4096, 1);
    let c = p.h[0].wait(2, Duration::from_secs(30)).unwrap();
    assert_eq!((c.wr_id, c.status), (1, WC_RETRY_EXC_ERR));
    assert!(stat(&mut p.h[1], Counter::PktsDropped) > dropped, "dropped and counted");
    assert!(untouched(&p, 1, 0, 4096), "nothing written through a QP in RESET");
    // Path MTU 4096 against 256: the responder refuses the full-size packet.
    write(&mut p, 3, 0, 8192, 4096, 2);
    let c = p.h[0].wait(3, Duration::from_secs(30)).unwrap();
    assert_eq!((c.wr_id, c.status), (2, WC_REM_INV_REQ_ERR));
    assert!(untouched(&p, 1, 8192, 4096));
    // Send PSN 100 against expected 300: a "duplicate", acknowledged, never executed.
    write(&mut p, 4, 0, 16384, 4096, 3);
    let c = p.h[0].wait(4, Duration::from_secs(30)).unwrap();
    assert_eq!((c.wr_id, c.status), (3, WC_SUCCESS));
    assert!(untouched(&p, 1, 16384, 4096), "PSN mismatch: the data never lands");
    // Send PSN 500 against expected 300: a sequence error, retried, then RETRY_EXC_ERR.
    write(&mut p, 5, 0, 24576, 4096, 5);
    let c = p.h[0].wait(5, Duration::from_secs(30)).unwrap();
    assert_eq!((c.wr_id, c.status), (5, WC_RETRY_EXC_ERR));
    assert!(untouched(&p, 1, 24576, 4096));
    // dest_ip = this node's own address: through the fabric port, like a remote node.
    let sent = stat(&mut p.h[0], Counter::PktsSent);
    for q in [6u32, 7] {
        p.h[0].create_cq(q, 6, 1).unwrap();
        p.h[0].create_qp(q, 1, q, 6, access).unwrap();
        let c = Connection { dest_qpn: 13 - q, dest_ip: Some(ips[0]), timeout: 16, ..Default::default() };
        p.h[0].connect_with(q, &c).unwrap();
    }
    let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, 4, VA + p.buf[0] + (2 << 20), p.key[0]);
    p.h[0].post(6, true, &[(hdr, vec![Sge { addr: VA + p.buf[0], length: 8192, lkey: p.key[0] }])]).unwrap();
    let c = p.h[0].wait(6, Duration::from_secs(30)).unwrap();
    assert_eq!((c.wr_id, c.status), (4, WC_SUCCESS));
    let mut got = vec![0u8; 8192];
    p.h[0].ram.read(p.buf[0] + (2 << 20), &mut got).unwrap();
    assert_eq!(got, pattern(5, 0, 8192));
    assert!(stat(&mut p.h[0], Counter::PktsSent) > sent, "the packets went through the fabric port");
}

/// R-FAB-9, R-FAB-10: a QP's path entry (next-hop MAC, source GID) and the port's GID
/// table, between two node servers. Node 1 gets a second address as a GID; node 0's QP 8
/// reaches it by that address and node 1's MAC from its path, node 1's QP 8 answers from
/// it (its path names the GID), and the WRITE lands. A path to a MAC nobody has is
/// filtered by the peer and ends in retries; GID and path entries no port may have are
/// refused.
#[test]
fn qp_paths_and_gids() {
    use rnic_emu_core::rnic::eth::{mac_from_reg, mac_to_reg};
    use std::net::Ipv4Addr;
    let _turn = serialized();
    let (mut p, _dir) = node_pair(112, "", 2, 10);
    let ips = p.ips;
    let alias = Ipv4Addr::new(127, 113, ips[1].octets()[2], 2);
    let mapped = |ip: Ipv4Addr| ip.to_ipv6_mapped().octets();
    for h in &mut p.h {
        h.use_paths().unwrap();
    }
    // The GID table refuses what no port may have, takes the alias.
    assert_eq!(p.h[1].set_gid(GID_TABLE_LEN, Some(mapped(alias))).unwrap(), CMD_ERR_BAD_INDEX);
    assert_eq!(p.h[1].set_gid(1, Some(mapped(Ipv4Addr::new(224, 0, 0, 5)))).unwrap(), CMD_ERR_INVALID);
    assert_eq!(p.h[1].set_gid(1, Some(mapped(alias))).unwrap(), CMD_OK);
    let mac1 = mac_from_reg(p.h[1].r64(ETH_MAC).unwrap());
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let conn = |dest: Ipv4Addr, q: u32| Connection { dest_qpn: q, dest_ip: Some(dest), retry_cnt: 7, timeout: 16, ..Default::default() };
    for i in 0..2 {
        p.h[i].create_cq(8, 6, 1).unwrap();
        p.h[i].create_qp(8, 1, 8, 6, access).unwrap();
    }
    // Node 1's QP 8 names an empty GID entry as its source: refused, stays in INIT.
    p.h[1].set_path(8, &QpPath { sgid_index: 2, flags: PATH_FLAG_SGID as u8, ..Default::default() }).unwrap();
    assert!(p.h[1].connect_with(8, &conn(ips[0], 8)).is_err(), "RTR with an empty source GID");
    p.h[1].set_path(8, &QpPath { sgid_index: 1, flags: PATH_FLAG_SGID as u8, ..Default::default() }).unwrap();
    p.h[1].connect_with(8, &conn(ips[0], 8)).unwrap();
    // Node 0's QP 8: to the alias, next hop node 1's MAC (the convention would give the
    // alias's own 02:e1 MAC, which no port has).
    p.h[0].set_path(8, &QpPath { dest_mac: mac_to_reg(mac1), ..Default::default() }).unwrap();
    p.h[0].connect_with(8, &conn(alias, 8)).unwrap();
    p.h[0].ram.write(p.buf[0], &pattern(8, 0, 3 << 12)).unwrap();
    let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, 81, VA + p.buf[1] + (4 << 20), p.key[1]);
    p.h[0].post(8, true, &[(hdr, vec![Sge { addr: VA + p.buf[0], length: 3 << 12, lkey: p.key[0] }])]).unwrap();
    let c = p.h[0].wait(8, Duration::from_secs(30)).unwrap();
    assert_eq!((c.wr_id, c.status), (81, WC_SUCCESS), "to the alias and back from it");
    let mut got = vec![0u8; 3 << 12];
    p.h[1].ram.read(p.buf[1] + (4 << 20), &mut got).unwrap();
    assert_eq!(got, pattern(8, 0, 3 << 12), "the WRITE landed at the alias's node");
    // A next hop nobody has: node 1 filters the frames, the requester runs out of retries.
    let filtered = stat(&mut p.h[1], Counter::EthRxFiltered);
    p.h[0].create_cq(9, 6, 1).unwrap();
    p.h[0].create_qp(9, 1, 9, 6, access).unwrap();
    p.h[0].set_path(9, &QpPath { dest_mac: mac_to_reg([0x02, 0, 0, 0, 0, 0x77]), ..Default::default() }).unwrap();
    p.h[0].connect_with(9, &Connection { retry_cnt: 1, timeout: 12, ..conn(ips[1], 8) }).unwrap();
    let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, 91, VA + p.buf[1] + (5 << 20), p.key[1]);
    p.h[0].post(9, true, &[(hdr, vec![Sge { addr: VA + p.buf[0], length: 4096, lkey: p.key[0] }])]).unwrap();
    let c = p.h[0].wait(9, Duration::from_secs(30)).unwrap();
    assert_eq!((c.wr_id, c.status), (91, WC_RETRY_EXC_ERR));
    assert!(stat(&mut p.h[1], Counter::EthRxFiltered) > filtered, "the frames went to the MAC the path named");
    // A group MAC as next hop is refused at RTR.
    p.h[0].create_cq(10, 6, 1).unwrap();
    p.h[0].create_qp(10, 1, 10, 6, access).unwrap();
    p.h[0].set_path(10, &QpPath { dest_mac: 0xff_ffff_ffff_ffff, ..Default::default() }).unwrap();
    assert!(p.h[0].connect_with(10, &conn(ips[1], 8)).is_err(), "a broadcast next hop");
    // The alias removed: node 1 no longer takes packets to it.
    assert_eq!(p.h[1].set_gid(1, None).unwrap(), CMD_OK);
    let dropped = stat(&mut p.h[0], Counter::Retransmits);
    let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, 82, VA + p.buf[1] + (6 << 20), p.key[1]);
    p.h[0].post(8, true, &[(hdr, vec![Sge { addr: VA + p.buf[0], length: 4096, lkey: p.key[0] }])]).unwrap();
    let c = p.h[0].wait(8, Duration::from_secs(60)).unwrap();
    assert_eq!((c.wr_id, c.status), (82, WC_RETRY_EXC_ERR), "nobody has the alias now");
    assert!(stat(&mut p.h[0], Counter::Retransmits) > dropped);
}

/// R-FAB-11: RoCEv2 over IPv6 between two node servers. Each port gets an IPv6 GID; QP 8
/// of each names the peer's GID with PATH_FLAG_IPV6 (dest_ip 0) and its own as the source;
/// a WRITE and a READ complete, every RoCE packet of both went over IPv6, and paths the
/// device must refuse are refused at RTR.
#[test]
fn roce_over_ipv6_paths() {
    use std::net::Ipv6Addr;
    let _turn = serialized();
    let (mut p, _dir) = node_pair(114, "", 2, 10);
    let ips = p.ips;
    let gids: [Ipv6Addr; 2] = ["fd00::a".parse().unwrap(), "fd00::b".parse().unwrap()];
    let macs: Vec<u64> = p.h.iter_mut().map(|h| h.r64(ETH_MAC).unwrap()).collect();
    let half = |g: &Ipv6Addr, i: usize| u64::from_le_bytes(g.octets()[i * 8..i * 8 + 8].try_into().unwrap());
    let path = |to: usize| QpPath {
        dest_mac: macs[to],
        sgid_index: 3,
        flags: (PATH_FLAG_SGID | PATH_FLAG_IPV6) as u8,
        dest_gid_lo: half(&gids[to], 0),
        dest_gid_hi: half(&gids[to], 1),
        ..Default::default()
    };
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let conn = Connection { dest_qpn: 8, dest_ip: None, retry_cnt: 7, timeout: 16, ..Default::default() };
    for (h, gid) in p.h.iter_mut().zip(gids) {
        h.use_paths().unwrap();
        assert_eq!(h.set_gid(3, Some(gid.octets())).unwrap(), CMD_OK);
        h.create_cq(8, 6, 1).unwrap();
        h.create_qp(8, 1, 8, 6, access).unwrap();
    }
    // Refused: a multicast destination, a source entry that is empty or IPv4.
    assert_eq!(p.h[0].set_gid(4, Some(ips[0].to_ipv6_mapped().octets())).unwrap(), CMD_OK);
    let multicast: Ipv6Addr = "ff02::1".parse().unwrap();
    for bad in [
        QpPath { dest_gid_lo: half(&multicast, 0), dest_gid_hi: half(&multicast, 1), ..path(1) },
        QpPath { sgid_index: 5, ..path(1) },
        QpPath { sgid_index: 4, ..path(1) },
    ] {
        p.h[0].set_path(8, &bad).unwrap();
        assert!(p.h[0].connect_with(8, &conn).is_err(), "refused: {bad:?}");
    }
    for i in 0..2 {
        p.h[i].set_path(8, &path(1 - i)).unwrap();
        p.h[i].connect_with(8, &conn).unwrap();
    }
    let v4_sent = stat(&mut p.h[0], Counter::PktsSent) - stat(&mut p.h[0], Counter::PktsSentIpv6);
    p.h[0].ram.write(p.buf[0], &pattern(11, 0, 3 << 12)).unwrap();
    p.h[1].ram.write(p.buf[1] + (1 << 20), &pattern(12, 0, 3 << 12)).unwrap();
    let write = rdma_wqe(WQE_OP_RDMA_WRITE, 1, VA + p.buf[1] + (4 << 20), p.key[1]);
    let read = rdma_wqe(WQE_OP_RDMA_READ, 2, VA + p.buf[1] + (1 << 20), p.key[1]);
    let sge = |addr: u64| vec![Sge { addr: VA + addr, length: 3 << 12, lkey: p.key[0] }];
    p.h[0].post(8, true, &[(write, sge(p.buf[0])), (read, sge(p.buf[0] + (2 << 20)))]).unwrap();
    for id in [1, 2] {
        let c = p.h[0].wait(8, Duration::from_secs(30)).unwrap();
        assert_eq!((c.wr_id, c.status), (id, WC_SUCCESS), "over IPv6");
    }
    let mut got = vec![0u8; 3 << 12];
    p.h[1].ram.read(p.buf[1] + (4 << 20), &mut got).unwrap();
    assert_eq!(got, pattern(11, 0, 3 << 12), "the WRITE landed");
    p.h[0].ram.read(p.buf[0] + (2 << 20), &mut got).unwrap();
    assert_eq!(got, pattern(12, 0, 3 << 12), "the READ returned node 1's bytes");
    for h in &mut p.h {
        let (sent, sent6) = (stat(h, Counter::PktsSent), stat(h, Counter::PktsSentIpv6));
        let (recv, recv6) = (stat(h, Counter::PktsReceived), stat(h, Counter::PktsReceivedIpv6));
        assert!(sent6 > 0 && recv6 > 0 && recv6 == recv, "sent {sent} ({sent6} IPv6), received {recv} ({recv6} IPv6)");
    }
    assert_eq!(stat(&mut p.h[0], Counter::PktsSent) - stat(&mut p.h[0], Counter::PktsSentIpv6), v4_sent, "no IPv4 RoCE packet");
}

/// DEREG_MR while a message over the fabric still holds the MR's pages (every packet
/// delayed 20 ms, so messages stay in flight): a READ's destination on the requester, and
/// a multi-packet WRITE's destination on the responder. From the command's return no byte
/// lands in either (each buffer is poisoned again once the command returned, and the
/// placed-byte counter stays where it was).
#[test]
fn fabric_dereg_in_flight() {
    use rnic_emu_testkit::hostdrv::NodePair;
    let _turn = serialized();
    let (mut p, _dir) = node_pair(111, "faults = { tx = { delay_us = 20000 } }", 7, 16);
    let ips = p.ips;
    let acc = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let region = 8u64 << 20;
    let untouched = |p: &NodePair, i: usize, len: u64| {
        let mut got = vec![0u8; len as usize];
        p.h[i].ram.read(p.buf[i] + region, &mut got).unwrap();
        got.iter().all(|b| *b == POISON)
    };
    // Requester side: READ 1 MiB into node 0's MR 2, deregistered once the request is out.
    p.h[1].ram.write(p.buf[1], &pattern(9, 0, 1 << 20)).unwrap();
    p.h[0].ram.write(p.buf[0] + region, &vec![POISON; 1 << 20]).unwrap();
    let key = p.h[0].reg_mr(2, 1, acc, p.buf[0] + region, 1 << 20).unwrap();
    let sent = stat(&mut p.h[0], Counter::PktsSent);
    let hdr = rdma_wqe(WQE_OP_RDMA_READ, 21, VA + p.buf[1], p.key[1]);
    p.h[0].post(1, true, &[(hdr, vec![Sge { addr: VA + p.buf[0] + region, length: 1 << 20, lkey: key }])]).unwrap();
    assert!(wait_until(SECOND, || stat(&mut p.h[0], Counter::PktsSent) > sent), "the READ request went out");
    assert_eq!(p.h[0].cmd(CMD_DEREG_MR, 2).unwrap(), CMD_OK);
    // Responses that landed before the command returned are allowed (on a loaded host the
    // first ones can arrive before it runs): poison the buffer again, so what the check
    // below sees landed after DEREG_MR.
    p.h[0].ram.write(p.buf[0] + region, &vec![POISON; 1 << 20]).unwrap();
    let read = stat(&mut p.h[0], Counter::BytesRead);
    let c = p.h[0].wait(1, SECOND).unwrap();
    assert_eq!((c.wr_id, c.status, c.syndrome), (21, WC_LOC_PROT_ERR, u32::from(QP_ERR_LOCAL_ACCESS)), "the READ in flight fails");
    std::thread::sleep(Duration::from_millis(500));
    assert!(untouched(&p, 0, 1 << 20), "no READ response landed after DEREG_MR");
    assert_eq!(stat(&mut p.h[0], Counter::BytesRead), read, "no READ response bytes placed after DEREG_MR");
    // Responder side: a 4 MiB WRITE into node 1's MR 3, deregistered mid-message.
    let len = 4u64 << 20;
    p.h[1].ram.write(p.buf[1] + region, &vec![POISON; len as usize]).unwrap();
    let rkey = p.h[1].reg_mr(3, 1, acc, p.buf[1] + region, len).unwrap();
    let (mut q0, mut q1) = (Connection::default(), Connection::default());
    (q0.dest_qpn, q0.dest_ip, q0.timeout) = (2, Some(ips[1]), 16);
    (q1.dest_qpn, q1.dest_ip, q1.timeout) = (2, Some(ips[0]), 16);
    for (h, c) in p.h.iter_mut().zip([q0, q1]) {
        h.create_cq(2, 6, 1).unwrap();
        h.create_qp(2, 1, 2, 6, acc).unwrap();
        h.connect_with(2, &c).unwrap();
    }
    let got = stat(&mut p.h[1], Counter::PktsReceived);
    let hdr = WqeHeader {
        opcode: WQE_OP_RDMA_WRITE,
        flags: WQE_FLAG_SIGNALED,
        num_sge: 1,
        wr_id: 22,
        remote_addr: VA + p.buf[1] + region,
        rkey,
        ..Default::default()
    };
    p.h[0].post(2, true, &[(hdr, vec![Sge { addr: VA + p.buf[0], length: len as u32, lkey: p.key[0] }])]).unwrap();
    assert!(wait_until(SECOND, || stat(&mut p.h[1], Counter::PktsReceived) > got), "the WRITE started arriving");
    assert_eq!(p.h[1].cmd(CMD_DEREG_MR, 3).unwrap(), CMD_OK);
    let written = stat(&mut p.h[1], Counter::BytesWritten);
    assert!(written < len, "still mid-message: {written} bytes placed");
    p.h[1].ram.write(p.buf[1] + region, &vec![POISON; len as usize]).unwrap();
    let c = p.h[0].wait(2, Duration::from_secs(30)).unwrap();
    assert_eq!(c.wr_id, 22);
    assert_ne!(c.status, WC_SUCCESS, "the WRITE cannot complete");
    assert!(untouched(&p, 1, len), "nothing placed after DEREG_MR");
    assert_eq!(stat(&mut p.h[1], Counter::BytesWritten), written);
    // Its later packets were refused (NAK): the responder's QP is in ERROR, as after any
    // invalid request or remote access error (R-EQ-4), once it has sent the NAK.
    let at = p.h[1].r64(QP_CTX_BASE).unwrap() - IOVA + 2 * 64;
    let responder_state = |h: &mut HostDriver| {
        assert_eq!(h.cmd(CMD_QUERY_QP, 2).unwrap(), CMD_OK);
        let mut state = [0u8; 1];
        h.ram.read(at, &mut state).unwrap();
        state[0]
    };
    assert!(wait_until(SECOND, || responder_state(&mut p.h[1]) == QPS_ERR), "the responder refused the rest of the WRITE");
}

// ---- the rule index ----

/// The Rust sources under `dir`, concatenated.
fn sources_under(dir: &std::path::Path) -> String {
    let mut all = String::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            all += &sources_under(&p);
        } else if p.extension().is_some_and(|x| x == "rs") {
            all += &std::fs::read_to_string(&p).unwrap();
        }
    }
    all
}

/// Every numbered rule of docs/programming.md names at least one check, and every check
/// exists: `host:NAME` a test of this file, `guest:NAME` a rnic-verbs-check scenario that
/// tests/guest_verbs.rs runs and judges, `test:FILE::NAME` a test function of
/// tests/FILE.rs, `unit:NAME` a unit test under device/core/src or `unit:PATH::NAME` one in
/// the source file PATH.rs of the repository (for device behaviour only a unit test can
/// reach, such as an engine held busy); `driver` marks an obligation of the driver that no
/// device behaviour can break.
#[test]
fn every_rule_has_a_scenario() {
    let doc = std::fs::read_to_string(repo().join("docs/programming.md")).unwrap();
    let here = include_str!("host_conformance.rs");
    let tool = std::fs::read_to_string(repo().join("guest-driver/tools/rnic-verbs-check.c")).unwrap();
    let guest = std::fs::read_to_string(repo().join("tests/guest_verbs.rs")).unwrap();
    let unit_tests = sources_under(&repo().join("device/core/src"));
    let mut rules = Vec::new();
    for block in doc.split("\n- **R-").skip(1) {
        let id = format!("R-{}", block.split("**").next().unwrap());
        let body = block.split("\n\n").next().unwrap().replace('\n', " ");
        let checks = body.split("Check:").nth(1).unwrap_or_else(|| panic!("{id}: no 'Check:'"));
        let names: Vec<&str> = checks.split(|c: char| c.is_whitespace() || c == ',' || c == '`' || c == '.').filter(|w| !w.is_empty()).collect();
        assert!(!names.is_empty(), "{id}: empty Check");
        for n in names {
            if let Some(t) = n.strip_prefix("host:") {
                assert!(here.contains(&format!("fn {t}()")), "{id}: no host scenario {t}");
            } else if let Some(s) = n.strip_prefix("guest:") {
                assert!(tool.contains(&format!("{{ \"{s}\", sc_")), "{id}: no rnic-verbs-check scenario {s}");
                assert!(guest.contains(&format!("\"{s}\"")), "{id}: tests/guest_verbs.rs does not judge {s}");
            } else if let Some(u) = n.strip_prefix("unit:").filter(|u| !u.contains("::")) {
                assert!(unit_tests.contains(&format!("fn {u}()")), "{id}: no unit test {u} under device/core/src");
            } else if let Some(ft) = n.strip_prefix("test:") {
                let (file, f) = ft.split_once("::").unwrap_or_else(|| panic!("{id}: bad test check {ft}"));
                let src = std::fs::read_to_string(repo().join(format!("tests/{file}.rs"))).unwrap();
                assert!(src.contains(&format!("fn {f}(")), "{id}: no test {f} in tests/{file}.rs");
            } else if let Some(pt) = n.strip_prefix("unit:") {
                let (path, f) = pt.rsplit_once("::").unwrap_or_else(|| panic!("{id}: bad unit check {pt}"));
                let src = std::fs::read_to_string(repo().join(format!("{path}.rs"))).unwrap_or_else(|e| panic!("{id}: {path}.rs: {e}"));
                assert!(src.contains(&format!("fn {f}(")), "{id}: no unit test {f} in {path}");
            } else {
                assert_eq!(n, "driver", "{id}: unknown check '{n}'");
            }
        }
        assert!(!rules.contains(&id), "{id} numbered twice");
        rules.push(id);
    }
    assert!(rules.len() >= 40, "only {} rules found", rules.len());
}

/// Two node servers on the loopback addresses 127.`net`.x.1 and 127.`net`.x.2 (x from the
/// process id, so concurrent runs do not collide), each `[[node]]` with `node_toml`, the
/// QPs' retry count and ACK timeout exponent; the directory holds their sockets and logs.
fn node_pair(net: u8, node_toml: &str, retry_cnt: u8, timeout: u8) -> (rnic_emu_testkit::hostdrv::NodePair, tempfile::TempDir) {
    use rnic_emu_testkit::hostdrv::{NodePair, PairOptions};
    use std::net::Ipv4Addr;
    let dir = tempfile::tempdir().unwrap();
    let sub = (std::process::id() % 200) as u8;
    let ips = [Ipv4Addr::new(127, net, sub, 1), Ipv4Addr::new(127, net, sub, 2)];
    let o = PairOptions { ips, node_toml, retry_cnt, timeout, capture: false, rnr_retry: 7, eth_mtu: 0 };
    (NodePair::start(Path::new(bin()), dir.path(), &o).unwrap(), dir)
}

/// Device counter `c` of a node server.
fn stat(h: &mut HostDriver, c: Counter) -> u64 {
    h.r64(STATS_BASE + 8 * c as u64).unwrap()
}
