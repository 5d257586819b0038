//! Host-level verbs test: the real `rnic-emu serve` process driven over its vfio-user socket
//! like a guest driver would (docs/verbs.md), with a memfd as guest RAM handed over by
//! DMA_MAP: tables, commands, WQEs, doorbells, CQEs read back from "guest memory", MSI-X
//! through an eventfd, statistics through BAR0. No QEMU.

mod common;
use common::*;
use rnic_emu::regs::rnic::*;
use rnic_emu::verbs::abi::*;
use rnic_emu::verbs::stats::Counter;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::*;
use vfio_user::Client;
use vm_memory::ByteValued;

const RAM: u64 = 32 << 20;
const IOVA: u64 = 0x4000_0000; // where "guest RAM" sits in bus address space
const QPT: u64 = 0x1_0000;
const CQT: u64 = 0x2_0000;
const MRT: u64 = 0x3_0000;
const MTT: u64 = 0x6_0000;
const SQ1: u64 = 0x10_0000;
const RQ2: u64 = 0x11_0000;
const CQ1: u64 = 0x12_0000;
const CQ2: u64 = 0x13_0000;
const SRC: u64 = 0x40_0000;
const DST: u64 = 0x100_0000;
const VA: u64 = 0x7f00_0000_0000;

struct Host {
    c: Client,
    ram: rnic_emu::shm::SharedMemory,
    _fd: File,
    _proc: Proc,
    _dir: tempfile::TempDir,
}

impl Host {
    fn w32(&mut self, off: u64, v: u32) {
        self.c.region_write(0, off, &v.to_le_bytes()).unwrap();
    }
    fn w64(&mut self, off: u64, v: u64) {
        self.c.region_write(0, off, &v.to_le_bytes()).unwrap();
    }
    fn r32(&mut self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        self.c.region_read(0, off, &mut b).unwrap();
        u32::from_le_bytes(b)
    }
    fn r64(&mut self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.c.region_read(0, off, &mut b).unwrap();
        u64::from_le_bytes(b)
    }
    fn put<T: ByteValued>(&self, off: u64, v: &T) {
        self.ram.write(off, v.as_slice()).unwrap();
    }
    fn cmd(&mut self, op: u32, index: u32) -> u32 {
        self.w32(RNIC_REG_CMD, op << 24 | index);
        self.r32(RNIC_REG_CMD_STATUS)
    }
    fn cqe(&self, ring: u64, i: u64) -> Cqe {
        let mut c = Cqe::default();
        self.ram.read(ring + i * 32, c.as_mut_slice()).unwrap();
        c
    }
    fn wait_cqe(&self, ring: u64, i: u64) -> Cqe {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let c = self.cqe(ring, i);
            if c.owner == 1 || Instant::now() > deadline {
                return c;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn start() -> Host {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bin())
        .args(["serve", "--topology"])
        .arg(topology("single-switch"))
        .arg("--socket-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let proc_ = Proc(child);
    let sock = dir.path().join("node0-rnic0.sock");
    assert!(wait_until(Duration::from_secs(10), || sock.exists()));
    let mut c = Client::new(&sock).unwrap();
    let (ram, fd) = rnic_emu::dma::test_ram(RAM).unwrap();
    c.dma_map(0, IOVA, RAM, fd.as_raw_fd()).unwrap();
    Host { c, ram, _fd: fd, _proc: proc_, _dir: dir }
}

fn eventfd() -> File {
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    unsafe { File::from_raw_fd(fd) }
}

#[test]
fn verbs_over_the_vfio_user_socket() {
    let mut h = start();
    assert_ne!(u64::from(h.r32(RNIC_REG_CAPS)) & CAP_VERBS, 0);
    h.w64(QP_CTX_BASE, IOVA + QPT);
    h.w64(CQ_CTX_BASE, IOVA + CQT);
    h.w64(MR_CTX_BASE, IOVA + MRT);
    h.w64(MTT_BASE, IOVA + MTT);
    h.w32(MTT_ENTRIES, 8192);
    h.w32(DMA_CTRL, (DMA_CTRL_ENABLE | DMA_CTRL_INT_ENABLE) as u32);

    // MSI-X vector 1 for CQ 2 (receive side).
    let mut efd = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    h.c.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 1, 1, &[efd.as_raw_fd()]).unwrap();

    for (cqn, ring) in [(1u32, CQ1), (2, CQ2)] {
        h.put(CQT + u64::from(cqn) * 32, &CqCtx { ring_addr: IOVA + ring, log_size: 6, msix_vector: 1, ..Default::default() });
        assert_eq!(h.cmd(CMD_CREATE_CQ, cqn), CMD_OK);
    }
    for (qpn, dest) in [(1u32, 2u32), (2, 1)] {
        let ctx = QpCtx {
            state: QPS_INIT,
            sq_log_size: 4,
            rq_log_size: 4,
            sq_log_stride: 6,
            rq_log_stride: 6,
            access: ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ,
            pd: 1,
            send_cqn: qpn,
            recv_cqn: qpn,
            sq_addr: IOVA + if qpn == 1 { SQ1 } else { SQ1 + 0x1000 },
            rq_addr: IOVA + if qpn == 1 { RQ2 + 0x1000 } else { RQ2 },
            ..Default::default()
        };
        h.put(QPT + u64::from(qpn) * 64, &ctx);
        assert_eq!(h.cmd(CMD_MODIFY_QP, qpn), CMD_OK);
        h.put(QPT + u64::from(qpn) * 64, &QpCtx { state: QPS_RTR, dest_qpn: dest, ..ctx });
        assert_eq!(h.cmd(CMD_MODIFY_QP, qpn), CMD_OK);
        h.put(QPT + u64::from(qpn) * 64, &QpCtx { state: QPS_RTS, dest_qpn: dest, ..ctx });
        assert_eq!(h.cmd(CMD_MODIFY_QP, qpn), CMD_OK);
    }
    // MRs: 1 MiB source (MR 1) and destination (MR 2), 4 KiB pages in the MTT.
    let len = 1u64 << 20;
    for (i, bus) in [(1u32, SRC), (2, DST)] {
        let first = (i - 1) * 256;
        for p in 0..256u64 {
            h.ram.write(MTT + (u64::from(first) + p) * 8, &(IOVA + bus + p * 4096).to_le_bytes()).unwrap();
        }
        let ctx = MrCtx { iova: VA + bus, length: len, pd: 1, mtt_offset: first, npages: 256, access: ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE, key: 0x42, page_shift: 12, rsvd0: 0 };
        h.put(MRT + u64::from(i) * 32, &ctx);
        assert_eq!(h.cmd(CMD_REG_MR, i), CMD_OK);
    }
    let (lkey, rkey) = (1 << 8 | 0x42, 2 << 8 | 0x42);
    let data = pattern(7, 0, len as usize);
    h.ram.write(SRC, &data).unwrap();

    // RDMA WRITE of 1 MiB, signaled.
    let wqe = WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id: 0xabc, remote_addr: VA + DST, rkey, ..Default::default() };
    h.put(SQ1, &wqe);
    h.put(SQ1 + 32, &Sge { addr: VA + SRC, length: len as u32, lkey });
    h.w32(WQE_DB_IDX, 1 << 16 | 1);
    let c = h.wait_cqe(CQ1, 0);
    assert_eq!((c.owner, c.status, c.wr_id, c.byte_len), (1, WC_SUCCESS, 0xabc, len as u32));
    let mut got = vec![0u8; len as usize];
    h.ram.read(DST, &mut got).unwrap();
    assert!(got == data, "the 1 MiB written through the socket-driven engine matches");
    h.w32(CQE_CONS_IDX, 1 << 16 | 1);

    // SEND into a posted RECV on QP 2, with CQ 2 armed: one interrupt.
    h.put(RQ2, &WqeHeader { opcode: WQE_OP_RECV, num_sge: 1, wr_id: 0x77, ..Default::default() });
    h.put(RQ2 + 32, &Sge { addr: VA + DST, length: 4096, lkey: rkey });
    h.w32(RQ_DB_IDX, 2 << 16 | 1);
    h.w32(CQ_ARM, 2 << 16);
    h.put(SQ1 + 64, &WqeHeader { opcode: WQE_OP_SEND_IMM, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id: 0xabd, imm_data: 0xfeed, ..Default::default() });
    h.put(SQ1 + 96, &Sge { addr: VA + SRC, length: 100, lkey });
    h.w32(WQE_DB_IDX, 1 << 16 | 2);
    let r = h.wait_cqe(CQ2, 0);
    assert_eq!((r.wr_id, r.opcode, r.byte_len, r.imm_data, r.src_qp), (0x77, CQE_OP_RECV, 100, 0xfeed, 1));
    let mut n = [0u8; 8];
    assert!(wait_until(Duration::from_secs(5), || efd.read(&mut n).is_ok()), "armed CQ raised its MSI-X vector");

    // A bad rkey: REM_ACCESS_ERR, the QP goes to ERROR, the error is latched.
    h.put(SQ1 + 128, &WqeHeader { opcode: WQE_OP_RDMA_WRITE, num_sge: 1, wr_id: 0xbad, remote_addr: VA + DST, rkey: rkey ^ 0x100, ..Default::default() });
    h.put(SQ1 + 160, &Sge { addr: VA + SRC, length: 8, lkey });
    h.w32(WQE_DB_IDX, 1 << 16 | 3);
    let e = h.wait_cqe(CQ1, 2);
    assert_eq!((e.wr_id, e.status, e.syndrome), (0xbad, WC_REM_ACCESS_ERR, u32::from(QP_ERR_REMOTE_ACCESS)));
    assert_ne!(u64::from(h.r32(RNIC_REG_STATUS)) & STATUS_ERROR, 0);
    assert_eq!(h.r32(RNIC_REG_LAST_ERROR), ASYNC_ERR_QP << 24 | 1);
    assert_eq!(h.r32(RNIC_REG_LAST_ERROR), 0, "read to clear");
    assert_eq!(h.cmd(CMD_QUERY_QP, 1), CMD_OK);
    let mut q = QpCtx::default();
    h.ram.read(QPT + 64, q.as_mut_slice()).unwrap();
    assert_eq!((q.state, q.err_reason, q.sq_ci), (QPS_ERR, QP_ERR_REMOTE_ACCESS, 3));

    // Statistics through BAR0, 64-bit and in halves.
    let stat = |c: Counter| STATS_BASE + 8 * c as u64;
    assert_eq!(h.r64(stat(Counter::BytesWritten)), len);
    assert_eq!(h.r64(stat(Counter::BytesSent)), 100);
    assert_eq!(h.r64(stat(Counter::SendWqes)), 3);
    assert_eq!(h.r32(stat(Counter::ErrorCqes)), 1);
    assert_eq!(h.r32(stat(Counter::Interrupts) + 4), 0);
    assert!(h.r64(stat(Counter::Interrupts)) >= 1);
    // Reset forgets everything: commands on old objects fail.
    h.w32(RNIC_REG_RESET, RESET_MAGIC as u32);
    assert_eq!(h.r64(stat(Counter::BytesWritten)), 0);
    assert_eq!(h.cmd(CMD_DESTROY_CQ, 1), CMD_ERR_NOT_FOUND);
}
