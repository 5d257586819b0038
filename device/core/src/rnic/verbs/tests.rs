//! Engine unit tests against a memfd standing in for guest RAM: each opcode, each error
//! status, flushing, RNR, CQ overflow, commands and hostile input. The harness plays the
//! driver: it writes contexts, rings and WQEs the way docs/verbs.md says.

use super::engine::{Engine, Shared, Tables};
use crate::contract::abi::*;
use crate::contract::counters::{Counter, Stats};
use crate::platform::mem::dma::{test_ram, DmaMaps};
use crate::platform::msix::Interrupts;
use crate::platform::shm::SharedMemory;
use crate::ring;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use vm_memory::ByteValued;

pub(super) const RAM: u64 = 64 << 20;
pub(super) const QP_TABLE: u64 = 0x1_0000;
pub(super) const CQ_TABLE: u64 = 0x2_0000;
pub(super) const MR_TABLE: u64 = 0x3_0000;
pub(super) const MTT: u64 = 0x5_0000;
pub(super) const MTT_ENTRIES: u64 = 0x4000;
pub(super) const PATH_TABLE: u64 = 0x8_0000;
pub(super) const GID_TABLE: u64 = 0x8_4000;
pub(super) const EQ: u64 = 0x8_8000;
pub(super) const EQ_LOG: u64 = 6;
pub(super) const RINGS: u64 = 0x10_0000;
pub(super) const DATA: u64 = 0x100_0000;
/// User virtual addresses are bus addresses plus this (as if mapped by a process).
pub(super) const VA: u64 = 0x7f00_0000_0000;

pub(super) struct Dev {
    pub(super) e: Engine,
    pub(super) mem: DmaMaps,
    pub(super) ram: SharedMemory,
    pub(super) stats: Arc<Stats>,
    pub(super) last_error: Arc<AtomicU64>,
    pub(super) sq_pi: Vec<u16>,
    pub(super) rq_pi: Vec<u16>,
    pub(super) cq_ci: Vec<u16>,
    pub(super) mtt_next: u32,
    pub(super) eq_ci: u32,
}

pub(super) fn tables() -> Tables {
    Tables {
        qp_ctx: QP_TABLE,
        cq_ctx: CQ_TABLE,
        mr_ctx: MR_TABLE,
        mtt: MTT,
        mtt_entries: MTT_ENTRIES,
        qp_path: PATH_TABLE,
        gid_table: GID_TABLE,
        eq: EQ,
        eq_log: EQ_LOG,
    }
}

impl Dev {
    pub(super) fn new() -> Dev {
        let (ram, fd) = test_ram(RAM).unwrap();
        let mut mem = DmaMaps::default();
        mem.map(0, RAM, Some(fd), 0).unwrap();
        let stats = Arc::new(Stats::default());
        let last_error = Arc::new(AtomicU64::new(0));
        let shared = Shared {
            irqs: Arc::new(Interrupts::new(4)),
            stats: stats.clone(),
            last_error: last_error.clone(),
            fatal: Default::default(),
            clock: Default::default(),
        };
        let mut e = Engine::new("test".into(), shared);
        e.set_dma_ctrl(true, true);
        let mut d = Dev { e, mem, ram, stats, last_error, sq_pi: vec![0; 8], rq_pi: vec![0; 8], cq_ci: vec![0; 8], mtt_next: 0, eq_ci: 0 };
        assert_eq!(d.cmd(CMD_SET_EQ, 0), CMD_OK);
        d
    }

    pub(super) fn cmd(&mut self, op: u32, index: u32) -> u32 {
        self.e.command(&self.mem, op, index, tables())
    }

    pub(super) fn put<T: ByteValued>(&self, addr: u64, v: &T) {
        self.ram.write(addr, v.as_slice()).unwrap();
    }

    pub(super) fn create_cq(&mut self, cqn: u32, log_size: u8) {
        let ctx = CqCtx { ring_addr: RINGS + 0x8_0000 + u64::from(cqn) * 0x2_0000, log_size, msix_vector: 1, ..Default::default() };
        self.ram.write(ctx.ring_addr, &vec![0u8; 32 << log_size]).unwrap();
        self.put(CQ_TABLE + u64::from(cqn) * 32, &ctx);
        assert_eq!(self.cmd(CMD_CREATE_CQ, cqn), CMD_OK);
    }

    pub(super) fn qp_ctx(&self, qpn: u32) -> QpCtx {
        let mut c = QpCtx::default();
        self.ram.read(QP_TABLE + u64::from(qpn) * QpCtx::ABI.size as u64, c.as_mut_slice()).unwrap();
        c
    }

    pub(super) fn modify(&mut self, qpn: u32, f: impl FnOnce(&mut QpCtx)) -> u32 {
        let mut c = self.qp_ctx(qpn);
        f(&mut c);
        self.put(QP_TABLE + u64::from(qpn) * QpCtx::ABI.size as u64, &c);
        self.cmd(CMD_MODIFY_QP, qpn)
    }

    /// QP qpn with both queues of 2^6 slots of 128 bytes, completions on CQ qpn.
    pub(super) fn create_qp(&mut self, qpn: u32, pd: u32, access: u8, rnr_retry: u8) {
        self.create_qp_rnr(qpn, pd, access, rnr_retry, 0);
    }

    /// [`Dev::create_qp`] with an RNR wait of `rnr_timer_us` (0: the shortest).
    pub(super) fn create_qp_rnr(&mut self, qpn: u32, pd: u32, access: u8, rnr_retry: u8, rnr_timer_us: u32) {
        assert_eq!(self.create_qp_typed(qpn, pd, access, rnr_retry, rnr_timer_us, QP_TYPE_RC), CMD_OK);
    }

    /// [`Dev::create_qp_rnr`] of service `qp_type` (QP_TYPE_*, contract minor 13); the
    /// command's status.
    pub(super) fn create_qp_typed(&mut self, qpn: u32, pd: u32, access: u8, rnr_retry: u8, rnr_timer_us: u32, qp_type: u8) -> u32 {
        self.create_qp_with(qpn, pd, access, rnr_retry, rnr_timer_us, qp_type, |_| {})
    }

    /// As [`Dev::create_qp_typed`], the context changed by `f` before the command.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_qp_with(&mut self, qpn: u32, pd: u32, access: u8, rnr_retry: u8, rnr_timer_us: u32, qp_type: u8, f: impl FnOnce(&mut QpCtx)) -> u32 {
        let base = RINGS + u64::from(qpn) * 0x4000;
        self.modify(qpn, |c| {
            *c = QpCtx {
                state: QPS_INIT,
                sq_log_size: 6,
                rq_log_size: 6,
                sq_log_stride: 7,
                rq_log_stride: 7,
                access,
                rnr_retry,
                rnr_timer_us,
                pd,
                send_cqn: qpn,
                recv_cqn: qpn,
                sq_addr: base,
                rq_addr: base + 0x2000,
                dest_qpn: u32::from(qp_type) << 24,
                ..Default::default()
            };
            f(c);
        })
    }

    pub(super) fn connect(&mut self, a: u32, b: u32) {
        let pairs = if a == b { vec![(a, a)] } else { vec![(a, b), (b, a)] };
        for (x, y) in pairs {
            assert_eq!(
                self.modify(x, |c| {
                    c.state = QPS_RTR;
                    c.dest_qpn = y;
                }),
                CMD_OK
            );
            assert_eq!(self.modify(x, |c| c.state = QPS_RTS), CMD_OK);
        }
    }

    /// A pair of connected QPs 1 <-> 2 in PD 7, CQs 1 and 2.
    pub(super) fn pair(access: u8) -> Dev {
        let mut d = Dev::new();
        d.load_pair(access);
        d
    }

    /// CQs 1 and 2 and the connected QPs 1 <-> 2 in PD 7 (again after a reset).
    pub(super) fn load_pair(&mut self, access: u8) {
        self.create_cq(1, 6);
        self.create_cq(2, 6);
        self.create_qp(1, 7, access, 0);
        self.create_qp(2, 7, access, 0);
        self.connect(1, 2);
    }

    /// Registers [bus, bus+len) as MR `index` at VA + bus; returns the key.
    pub(super) fn reg_mr(&mut self, index: u32, pd: u32, access: u8, bus: u64, len: u64) -> u32 {
        let first = bus & !0xfff;
        let npages = (bus + len - first).div_ceil(4096) as u32;
        for i in 0..npages {
            self.ram.write(MTT + u64::from(self.mtt_next + i) * 8, &(first + u64::from(i) * 4096).to_le_bytes()).unwrap();
        }
        let key = (index as u8).wrapping_mul(3).wrapping_add(1);
        let ctx = MrCtx { iova: VA + bus, length: len, pd, mtt_offset: self.mtt_next, npages, access, key, page_shift: 12, rsvd0: 0 };
        self.mtt_next += npages;
        self.put(MR_TABLE + u64::from(index) * 32, &ctx);
        assert_eq!(self.cmd(CMD_REG_MR, index), CMD_OK);
        index << 8 | u32::from(key)
    }

    pub(super) fn post(&mut self, qpn: u32, send: bool, hdr: WqeHeader, sges: &[Sge], inline: &[u8]) {
        let qp = self.e.qp(qpn).unwrap().clone();
        let wq = if send { qp.sq } else { qp.rq };
        let pi = if send { self.sq_pi[qpn as usize] } else { self.rq_pi[qpn as usize] };
        let addr = wq.addr + ring::slot_offset(pi, wq.log_size, wq.log_stride);
        let mut buf = vec![0u8; 128];
        buf[..32].copy_from_slice(hdr.as_slice());
        for (i, s) in sges.iter().enumerate() {
            buf[32 + i * 16..48 + i * 16].copy_from_slice(s.as_slice());
        }
        buf[32..32 + inline.len()].copy_from_slice(inline);
        self.ram.write(addr, &buf).unwrap();
        let pi = pi.wrapping_add(1);
        if send {
            self.sq_pi[qpn as usize] = pi;
            self.e.sq_doorbell(qpn, pi);
        } else {
            self.rq_pi[qpn as usize] = pi;
            self.e.rq_doorbell(qpn, pi);
        }
    }

    pub(super) fn send(&mut self, qpn: u32, op: u8, wr_id: u64, sges: &[Sge], remote: u64, rkey: u32) {
        let hdr = WqeHeader {
            opcode: op,
            flags: WQE_FLAG_SIGNALED,
            num_sge: sges.len() as u8,
            wr_id,
            remote_addr: remote,
            rkey,
            imm_data: 0x1234_5678,
            ..Default::default()
        };
        self.post(qpn, true, hdr, sges, &[]);
    }

    pub(super) fn recv(&mut self, qpn: u32, wr_id: u64, sges: &[Sge]) {
        let hdr = WqeHeader { opcode: WQE_OP_RECV, num_sge: sges.len() as u8, wr_id, ..Default::default() };
        self.post(qpn, false, hdr, sges, &[]);
    }

    /// The events the event queue holds, consumed: (EQE_*, object, syndrome).
    pub(super) fn events(&mut self) -> Vec<(u8, u32, u32)> {
        let mut out = Vec::new();
        loop {
            let slot = u64::from(self.eq_ci) & ((1 << EQ_LOG) - 1);
            let mut e = Eqe::default();
            self.ram.read(EQ + slot * 16, e.as_mut_slice()).unwrap();
            if e.owner != u8::from((self.eq_ci >> EQ_LOG) & 1 == 0) {
                break;
            }
            out.push((e.event, e.object, e.syndrome));
            self.eq_ci = self.eq_ci.wrapping_add(1);
        }
        self.e.eq_consumed(self.eq_ci);
        out
    }

    pub(super) fn run(&mut self) {
        while self.e.run(&self.mem, 64) {}
    }

    /// Runs until `cqn` has `n` CQEs or a deadline passes (RNR waits are real time).
    pub(super) fn run_until(&mut self, cqn: u32, n: usize) -> Vec<Cqe> {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut got = Vec::new();
        while got.len() < n && Instant::now() < deadline {
            self.run();
            got.extend(self.poll(cqn));
            std::thread::sleep(Duration::from_micros(50));
        }
        got
    }

    pub(super) fn poll(&mut self, cqn: u32) -> Vec<Cqe> {
        let cq = self.e.cq(cqn).unwrap().clone();
        let mut out = Vec::new();
        loop {
            let ci = self.cq_ci[cqn as usize];
            let mut c = Cqe::default();
            self.ram.read(cq.ring_addr + ring::slot_offset(ci, cq.log_size, ring::CQE_LOG_STRIDE), c.as_mut_slice()).unwrap();
            if c.owner != ring::owner(ci, cq.log_size) {
                break;
            }
            out.push(c);
            self.cq_ci[cqn as usize] = ci.wrapping_add(1);
            self.e.cq_consumed(cqn, ci.wrapping_add(1));
        }
        out
    }

    pub(super) fn fill(&self, bus: u64, len: usize, seed: u8) -> Vec<u8> {
        let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        self.ram.write(bus, &data).unwrap();
        data
    }

    pub(super) fn read(&self, bus: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.ram.read(bus, &mut v).unwrap();
        v
    }
}

pub(super) fn sge(bus: u64, len: u32, lkey: u32) -> Sge {
    Sge { addr: VA + bus, length: len, lkey }
}

pub(super) const RW: u8 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
pub(super) const SRC: u64 = DATA;
pub(super) const DST: u64 = DATA + (8 << 20);

#[test]
fn rdma_write_moves_every_byte_at_each_size() {
    for len in [1usize, 4096, 5000, 1 << 20] {
        let mut d = Dev::pair(RW);
        let lk = d.reg_mr(1, 7, RW, SRC + 3, len as u64);
        let rk = d.reg_mr(2, 7, RW, DST + 5, len as u64);
        let data = d.fill(SRC + 3, len, 9);
        d.send(1, WQE_OP_RDMA_WRITE, 42, &[sge(SRC + 3, len as u32, lk)], VA + DST + 5, rk);
        let cqes = d.run_until(1, 1);
        assert_eq!(cqes.len(), 1);
        assert_eq!((cqes[0].status, cqes[0].wr_id, cqes[0].byte_len), (WC_SUCCESS, 42, len as u32));
        assert_eq!(cqes[0].opcode, CQE_OP_RDMA_WRITE);
        assert!(d.read(DST + 5, len) == data, "{len} bytes differ");
        assert_eq!(d.read(DST + 5 + len as u64, 1), [0], "no byte beyond the write");
        assert_eq!(d.stats.get(Counter::BytesWritten), len as u64);
    }
}

#[test]
fn rdma_read_and_scatter_gather() {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 16384);
    let rk = d.reg_mr(2, 7, RW, DST, 8192);
    let data = d.fill(DST, 6000, 3);
    d.send(1, WQE_OP_RDMA_READ, 7, &[sge(SRC, 1000, lk), sge(SRC + 4096, 5000, lk)], VA + DST, rk);
    let c = d.run_until(1, 1);
    assert_eq!((c[0].status, c[0].opcode, c[0].byte_len), (WC_SUCCESS, CQE_OP_RDMA_READ, 6000));
    assert_eq!(d.read(SRC, 1000), data[..1000]);
    assert_eq!(d.read(SRC + 4096, 5000), data[1000..]);
}

#[test]
fn send_recv_with_and_without_immediate() {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    let data = d.fill(SRC, 3000, 1);
    d.recv(2, 100, &[sge(DST, 2000, rk), sge(DST + 2048, 2048, rk)]);
    d.recv(2, 101, &[sge(DST, 4096, rk)]);
    d.send(1, WQE_OP_SEND, 1, &[sge(SRC, 3000, lk)], 0, 0);
    d.send(1, WQE_OP_SEND_IMM, 2, &[sge(SRC, 10, lk)], 0, 0);
    let s = d.run_until(1, 2);
    assert!(s.iter().all(|c| c.status == WC_SUCCESS && c.opcode == CQE_OP_SEND));
    let r = d.run_until(2, 2);
    assert_eq!((r[0].wr_id, r[0].byte_len, r[0].opcode, r[0].src_qp, r[0].flags), (100, 3000, CQE_OP_RECV, 1, 0));
    assert_eq!((r[1].wr_id, r[1].byte_len, r[1].imm_data, r[1].flags), (101, 10, 0x1234_5678, CQE_FLAG_IMM));
    assert_eq!(d.read(DST, 10), data[..10], "second message landed at the start of its buffer");
    assert_eq!(d.read(DST + 2048, 1000), data[2000..3000], "first message continued in its second SGE");
}

#[test]
fn write_with_immediate_consumes_a_recv() {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    let data = d.fill(SRC, 4096, 5);
    d.recv(2, 55, &[]);
    d.send(1, WQE_OP_RDMA_WRITE_IMM, 9, &[sge(SRC, 4096, lk)], VA + DST, rk);
    assert_eq!(d.run_until(1, 1)[0].status, WC_SUCCESS);
    let r = d.run_until(2, 1);
    assert_eq!((r[0].wr_id, r[0].opcode, r[0].imm_data, r[0].byte_len), (55, CQE_OP_RECV_RDMA_IMM, 0x1234_5678, 4096));
    assert_eq!(d.read(DST, 4096), data);
}

#[test]
fn inline_send_and_unsignaled_writes() {
    let mut d = Dev::pair(RW);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    d.recv(2, 1, &[sge(DST, 100, rk)]);
    let hdr = WqeHeader { opcode: WQE_OP_SEND, flags: WQE_FLAG_INLINE | WQE_FLAG_SIGNALED, inline_len: 11, wr_id: 3, ..Default::default() };
    d.post(1, true, hdr, &[], b"hello world");
    let hdr = WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: WQE_FLAG_INLINE, inline_len: 4, remote_addr: VA + DST + 200, rkey: rk, ..Default::default() };
    d.post(1, true, hdr, &[], b"abcd");
    d.run();
    assert_eq!(d.poll(1).len(), 1, "the unsignaled write completes silently");
    assert_eq!(d.read(DST, 11), b"hello world");
    assert_eq!(d.read(DST + 200, 4), b"abcd");
    let hdr = WqeHeader { opcode: WQE_OP_SEND, flags: WQE_FLAG_INLINE, inline_len: 97, ..Default::default() };
    d.post(1, true, hdr, &[], &[]);
    assert_eq!(d.run_until(1, 1)[0].status, WC_LOC_QP_OP_ERR, "inline longer than stride - 32");
}

fn expect_error_then_flush(d: &mut Dev, status: u8, reason: u8) {
    let lk = d.reg_mr(9, 7, RW, SRC + 0x10_0000, 64);
    d.send(1, WQE_OP_RDMA_WRITE, 2, &[sge(SRC + 0x10_0000, 8, lk)], 0, 0);
    let c = d.run_until(1, 2);
    assert_eq!((c[0].wr_id, c[0].status, c[0].syndrome), (1, status, u32::from(reason)));
    assert_eq!((c[1].wr_id, c[1].status), (2, WC_WR_FLUSH_ERR), "later WQEs are flushed");
    assert_eq!(d.cmd(CMD_QUERY_QP, 1), CMD_OK);
    assert_eq!((d.qp_ctx(1).state, d.qp_ctx(1).err_reason), (QPS_ERR, reason));
    // The latch keeps the newest QP error: QP 1's, or for a remote access error the
    // responder's (QP 2), which goes to ERROR once its NAK has reached QP 1.
    let last = if status == WC_REM_ACCESS_ERR { 2 } else { 1 };
    assert_eq!(d.last_error.load(Ordering::SeqCst), u64::from(ASYNC_ERR_QP) << 24 | last);
}

#[test]
fn remote_access_errors() {
    // wrong rkey, MR without REMOTE_WRITE, outside the MR, wrong PD, QP without REMOTE_WRITE
    for case in 0..5 {
        let qp_access = if case == 4 { ACCESS_REMOTE_READ } else { RW };
        let mut d = Dev::pair(qp_access);
        let lk = d.reg_mr(1, 7, RW, SRC, 4096);
        let mr_access = if case == 1 { ACCESS_LOCAL_WRITE | ACCESS_REMOTE_READ } else { RW };
        let pd = if case == 3 { 8 } else { 7 };
        let rk = d.reg_mr(2, pd, mr_access, DST, 4096);
        let (rkey, off) = match case {
            0 => (rk ^ 1, 0),
            2 => (rk, 4000),
            _ => (rk, 0),
        };
        d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 200, lk)], VA + DST + off, rkey);
        expect_error_then_flush(&mut d, WC_REM_ACCESS_ERR, QP_ERR_REMOTE_ACCESS);
        assert_eq!(d.read(DST, 200), vec![0; 200], "case {case}: nothing written");
    }
}

#[test]
fn local_protection_and_length_errors() {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, ACCESS_REMOTE_READ, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    d.send(1, WQE_OP_RDMA_READ, 1, &[sge(SRC, 10, lk)], VA + DST, rk);
    expect_error_then_flush(&mut d, WC_LOC_PROT_ERR, QP_ERR_LOCAL_ACCESS);

    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 2, lk), sge(SRC + 2, 4095, lk)], VA + DST, rk);
    expect_error_then_flush(&mut d, WC_LOC_PROT_ERR, QP_ERR_LOCAL_ACCESS);

    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 1 << 31, lk), sge(SRC, 1, lk)], VA + DST, rk);
    expect_error_then_flush(&mut d, WC_LOC_LEN_ERR, QP_ERR_LENGTH);
}

#[test]
fn malformed_wqes_fail_the_qp() {
    for hdr in [
        WqeHeader { opcode: 0x33, wr_id: 1, ..Default::default() },
        WqeHeader { opcode: WQE_OP_RDMA_WRITE, num_sge: 7, wr_id: 1, ..Default::default() },
        WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: 0x80, wr_id: 1, ..Default::default() },
        WqeHeader { opcode: WQE_OP_RDMA_READ, flags: WQE_FLAG_INLINE, wr_id: 1, ..Default::default() },
    ] {
        let mut d = Dev::pair(RW);
        d.post(1, true, hdr, &[], &[]);
        expect_error_then_flush(&mut d, WC_LOC_QP_OP_ERR, QP_ERR_BAD_WQE);
    }
}

#[test]
fn receiver_not_ready_retries_then_fails_or_succeeds() {
    // rnr_retry 0: the first miss fails.
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    d.send(1, WQE_OP_SEND, 1, &[sge(SRC, 8, lk)], 0, 0);
    expect_error_then_flush(&mut d, WC_RNR_RETRY_EXC_ERR, QP_ERR_RNR);

    // rnr_retry 3: three retries, then failure.
    let mut d = Dev::new();
    d.create_cq(1, 6);
    d.create_cq(2, 6);
    d.create_qp(1, 7, RW, 3);
    d.create_qp(2, 7, RW, 3);
    d.connect(1, 2);
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    d.send(1, WQE_OP_SEND, 1, &[sge(SRC, 8, lk)], 0, 0);
    let c = d.run_until(1, 1);
    assert_eq!(c[0].status, WC_RNR_RETRY_EXC_ERR);
    assert_eq!(d.stats.get(Counter::RnrRetries), 3);

    // a RECV posted while waiting: the SEND completes.
    let mut d = Dev::new();
    d.create_cq(1, 6);
    d.create_cq(2, 6);
    // An RNR wait of 50 ms: `run` returns while the wait is pending, however long each
    // pass takes (with the shortest wait, 10 us, a slow pass finds it over every time and
    // the retries never stop inside `run`).
    d.create_qp_rnr(1, 7, RW, 7, 50_000);
    d.create_qp(2, 7, RW, 7);
    d.connect(1, 2);
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    let rk = d.reg_mr(2, 7, RW, DST, 64);
    d.send(1, WQE_OP_SEND, 1, &[sge(SRC, 8, lk)], 0, 0);
    d.run();
    assert!(d.poll(1).is_empty());
    d.recv(2, 5, &[sge(DST, 64, rk)]);
    assert_eq!(d.run_until(1, 1)[0].status, WC_SUCCESS);
    assert_eq!(d.run_until(2, 1)[0].wr_id, 5);
}

#[test]
fn send_longer_than_the_recv_fails_both_sides() {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    d.recv(2, 77, &[sge(DST, 100, rk)]);
    d.recv(2, 78, &[sge(DST, 100, rk)]);
    d.send(1, WQE_OP_SEND, 1, &[sge(SRC, 101, lk)], 0, 0);
    let r = d.run_until(2, 2);
    assert_eq!((r[0].wr_id, r[0].status), (77, WC_LOC_LEN_ERR));
    assert_eq!((r[1].wr_id, r[1].status), (78, WC_WR_FLUSH_ERR), "responder QP flushed too");
    expect_error_then_flush(&mut d, WC_REM_INV_REQ_ERR, QP_ERR_REMOTE_INVALID);
}

#[test]
fn modify_to_error_flushes_posted_receives_in_order() {
    let mut d = Dev::pair(RW);
    for i in 0..5 {
        d.recv(2, 1000 + i, &[]);
    }
    assert_eq!(d.modify(2, |c| c.state = QPS_ERR), CMD_OK);
    let r = d.run_until(2, 5);
    let ids: Vec<u64> = r.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1000, 1001, 1002, 1003, 1004]);
    assert!(r.iter().all(|c| c.status == WC_WR_FLUSH_ERR && c.opcode == CQE_OP_RECV));
    d.recv(2, 2000, &[]);
    assert_eq!(d.run_until(2, 1)[0].wr_id, 2000, "WQEs rung later are flushed as well");
}

#[test]
fn ten_thousand_small_writes_no_lost_or_duplicated_cqe() {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    let mut seen = vec![0u8; 10_000];
    let mut posted = 0u64;
    while posted < 10_000 || seen.contains(&0) {
        while posted < 10_000 && d.sq_pi[1].wrapping_sub(d.cq_ci[1]) < 32 {
            d.send(1, WQE_OP_RDMA_WRITE, posted, &[sge(SRC, 64, lk)], VA + DST, rk);
            posted += 1;
        }
        d.run();
        for c in d.poll(1) {
            assert_eq!(c.status, WC_SUCCESS);
            seen[c.wr_id as usize] += 1;
        }
    }
    assert!(seen.iter().all(|&s| s == 1), "every wr_id completed exactly once");
    assert_eq!(d.stats.get(Counter::Cqes), 10_000);
}

#[test]
fn commands_validate_before_committing() {
    let mut d = Dev::new();
    assert_eq!(d.cmd(99, 0), CMD_ERR_BAD_OP);
    assert_eq!(d.cmd(CMD_CREATE_CQ, 256), CMD_ERR_BAD_INDEX);
    assert_eq!(d.cmd(CMD_MODIFY_QP, 0xff_ffff), CMD_ERR_BAD_INDEX);
    assert_eq!(d.cmd(CMD_REG_MR, 4096), CMD_ERR_BAD_INDEX);
    assert_eq!(d.cmd(CMD_DESTROY_CQ, 3), CMD_ERR_NOT_FOUND);
    // a CQ whose vector does not exist, or whose ring is unaligned
    d.put(CQ_TABLE, &CqCtx { ring_addr: RINGS, log_size: 4, msix_vector: 9, ..Default::default() });
    assert_eq!(d.cmd(CMD_CREATE_CQ, 0), CMD_ERR_INVALID);
    d.put(CQ_TABLE, &CqCtx { ring_addr: RINGS + 4, log_size: 4, ..Default::default() });
    assert_eq!(d.cmd(CMD_CREATE_CQ, 0), CMD_ERR_INVALID);
    // a QP referencing a missing CQ stays in RESET
    assert_eq!(
        d.modify(1, |c| {
            c.state = QPS_INIT;
            c.send_cqn = 5;
            c.recv_cqn = 5;
            c.sq_addr = RINGS;
            c.rq_addr = RINGS;
            c.sq_log_stride = 6;
            c.rq_log_stride = 6;
        }),
        CMD_ERR_INVALID
    );
    assert_eq!(d.qp_ctx(1).state, QPS_RESET, "written back: still RESET");
    d.create_cq(1, 4);
    d.create_qp(1, 1, RW, 0);
    assert_eq!(d.modify(1, |c| c.state = QPS_RTS), CMD_ERR_STATE, "INIT -> RTS skips RTR");
    assert_eq!(d.modify(1, |c| c.state = 4), CMD_ERR_INVALID, "no such state");
    assert_eq!(d.cmd(CMD_DESTROY_CQ, 1), CMD_ERR_BUSY, "in use by QP 1");
    assert_eq!(d.cmd(CMD_DESTROY_QP, 1), CMD_OK);
    assert_eq!(d.cmd(CMD_DESTROY_CQ, 1), CMD_OK);
    // MR context with an MTT range beyond MTT_ENTRIES, and a duplicate registration
    d.put(MR_TABLE, &MrCtx { iova: 0, length: 4096, mtt_offset: MTT_ENTRIES as u32, npages: 1, page_shift: 12, ..Default::default() });
    assert_eq!(d.cmd(CMD_REG_MR, 0), CMD_ERR_INVALID);
    let key = d.reg_mr(3, 1, RW, SRC, 10);
    assert_eq!(d.cmd(CMD_REG_MR, 3), CMD_ERR_BUSY);
    assert_eq!(d.cmd(CMD_DEREG_MR, key >> 8), CMD_OK);
    assert_eq!(d.cmd(CMD_DEREG_MR, key >> 8), CMD_ERR_NOT_FOUND);
    // no tables configured
    let mut e = Dev::new();
    assert_eq!(e.e.command(&e.mem, CMD_CREATE_CQ, 0, Tables::default()), CMD_ERR_DMA);
    assert_eq!(e.stats.get(Counter::CommandErrors), 1);
}

#[test]
fn unmapped_rings_and_buffers_are_fatal_errors_not_crashes() {
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    // an MR whose pages point outside guest RAM
    d.ram.write(MTT + 1000 * 8, &(RAM + 0x1000).to_le_bytes()).unwrap();
    d.put(MR_TABLE + 5 * 32, &MrCtx { iova: 0x5000, length: 4096, pd: 7, mtt_offset: 1000, npages: 1, access: RW, key: 1, page_shift: 12, rsvd0: 0 });
    assert_eq!(d.cmd(CMD_REG_MR, 5), CMD_OK);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 64, lk)], 0x5000, 5 << 8 | 1);
    expect_error_then_flush(&mut d, WC_FATAL_ERR, QP_ERR_DMA);
    // a QP whose SQ lies outside guest RAM
    let mut d = Dev::new();
    d.create_cq(1, 4);
    assert_eq!(
        d.modify(1, |c| {
            *c = QpCtx { state: QPS_INIT, send_cqn: 1, recv_cqn: 1, sq_addr: RAM, rq_addr: RAM, sq_log_stride: 6, rq_log_stride: 6, ..Default::default() };
        }),
        CMD_OK
    );
    d.connect(1, 1);
    d.e.sq_doorbell(1, 1);
    let c = d.run_until(1, 1);
    assert_eq!(c[0].status, WC_FATAL_ERR);
    // a doorbell that overruns the ring
    d.e.sq_doorbell(1, 0x8000);
    assert_eq!(d.e.qp(1).unwrap().state, super::qp::QpState::Err);
}

#[test]
fn arming_a_cq_with_unconsumed_completions_interrupts_at_once() {
    use std::io::Read;
    let mut d = Dev::pair(RW);
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    let mut efd = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let flags = vfio_bindings::bindings::vfio::VFIO_IRQ_SET_DATA_EVENTFD | vfio_bindings::bindings::vfio::VFIO_IRQ_SET_ACTION_TRIGGER;
    d.e.shared.irqs.set(flags, 1, 1, vec![efd.try_clone().unwrap()]).unwrap();
    let lk = d.reg_mr(1, 7, RW, SRC, 64);
    let rk = d.reg_mr(2, 7, RW, DST, 64);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[sge(SRC, 8, lk)], VA + DST, rk);
    d.run(); // the CQE lands before the driver arms
    d.e.cq_arm(1);
    let mut n = [0u8; 8];
    assert!(efd.read(&mut n).is_ok(), "armed with an unconsumed CQE: interrupt at once");
    assert_eq!(d.poll(1).len(), 1);
    d.e.cq_arm(1); // now empty: armed, no interrupt yet
    assert!(efd.read(&mut n).is_err());
    d.send(1, WQE_OP_RDMA_WRITE, 2, &[sge(SRC, 8, lk)], VA + DST, rk);
    d.run();
    assert!(efd.read(&mut n).is_ok(), "the next completion interrupts");
}

#[test]
fn context_and_mtt_addresses_near_2_pow_64_fail_cleanly() {
    // engine.rs `addr + offs`: a QP context table whose entry 0 ends past 2^64.
    let mut d = Dev::new();
    let top = Tables { qp_ctx: u64::MAX - 0x20, ..tables() };
    assert_eq!(d.e.command(&d.mem, CMD_QUERY_QP, 0, top), CMD_OK, "query works; the write-back is refused, not wrapped");
    assert_eq!(d.e.command(&d.mem, CMD_MODIFY_QP, 0, top), CMD_ERR_DMA);
    // mr.rs: an MTT entry at the last page of the address space is refused by REG_MR.
    d.ram.write(MTT + 2000 * 8, &0xFFFF_FFFF_FFFF_F000u64.to_le_bytes()).unwrap();
    d.ram.write(MTT + 2001 * 8, &0x1000u64.to_le_bytes()).unwrap();
    d.put(MR_TABLE + 6 * 32, &MrCtx { iova: 0x5000, length: 8192, pd: 7, mtt_offset: 2000, npages: 2, access: RW, key: 1, page_shift: 12, rsvd0: 0 });
    assert_eq!(d.cmd(CMD_REG_MR, 6), CMD_ERR_INVALID);
    // A WRITE through an SGE whose address + length wraps is a local protection error.
    let mut d = Dev::pair(RW);
    let lk = d.reg_mr(1, 7, RW, SRC, 4096);
    let rk = d.reg_mr(2, 7, RW, DST, 4096);
    d.send(1, WQE_OP_RDMA_WRITE, 1, &[Sge { addr: u64::MAX - 8, length: 64, lkey: lk }], VA + DST, rk);
    expect_error_then_flush(&mut d, WC_LOC_PROT_ERR, QP_ERR_LOCAL_ACCESS);
}
