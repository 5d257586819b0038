//! Host-level verbs test: the real `rnic-emu serve` process driven over its vfio-user socket
//! by `hostdrv` (a minimal driver following docs/verbs.md), with a memfd as guest RAM handed
//! over by DMA_MAP: commands, WQEs, doorbells, CQEs read back from "guest memory", MSI-X
//! through an eventfd, statistics through BAR0, reset. No QEMU.

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::contract::counters::Counter;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_testkit::hostdrv::{HostDriver, VA};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::process::{Command, Stdio};
use std::time::Duration;
use vfio_bindings::bindings::vfio::*;

const SECOND: Duration = Duration::from_secs(10);

fn eventfd() -> File {
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    unsafe { File::from_raw_fd(fd) }
}

fn wqe(opcode: u8, wr_id: u64, remote: u64, rkey: u32, sge: Sge) -> (WqeHeader, Vec<Sge>) {
    let hdr = WqeHeader { opcode, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id, remote_addr: remote, rkey, imm_data: 0xfeed, ..Default::default() };
    (hdr, vec![sge])
}

#[test]
fn verbs_over_the_vfio_user_socket() {
    let dir = tempfile::tempdir().unwrap();
    let child = Command::new(bin())
        .args(["serve", "--topology"])
        .arg(topology("single-switch"))
        .arg("--socket-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let _server = Proc(child);
    let sock = dir.path().join("node0-rnic0.sock");
    assert!(wait_until(Duration::from_secs(10), || sock.exists()));
    let mut h = HostDriver::connect(&sock, 32 << 20).unwrap();
    assert_ne!(u64::from(h.r32(RNIC_REG_CAPS).unwrap()) & CAP_VERBS, 0);

    // MSI-X vector 1 as an eventfd; both CQs interrupt on it.
    let mut efd = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    h.client.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 1, 1, &[efd.as_raw_fd()]).unwrap();
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    for n in [1, 2] {
        h.create_cq(n, 6, 1).unwrap();
        h.create_qp(n, 1, n, 4, access).unwrap();
    }
    h.connect_qp(1, 2).unwrap();
    h.connect_qp(2, 1).unwrap();
    let len = 1u64 << 20;
    let (src, dst) = (h.alloc(len, 4096), h.alloc(len, 4096));
    let mr_access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
    let lkey = h.reg_mr(1, 1, mr_access, src, len).unwrap();
    let rkey = h.reg_mr(2, 1, mr_access, dst, len).unwrap();
    let data = pattern(7, 0, len as usize);
    h.ram.write(src, &data).unwrap();

    // RDMA WRITE of 1 MiB.
    h.post(1, true, &[wqe(WQE_OP_RDMA_WRITE, 0xabc, VA + dst, rkey, Sge { addr: VA + src, length: len as u32, lkey })]).unwrap();
    let c = h.wait(1, SECOND).unwrap();
    assert_eq!((c.status, c.wr_id, c.byte_len, c.opcode), (WC_SUCCESS, 0xabc, len as u32, CQE_OP_RDMA_WRITE));
    let mut got = vec![0u8; len as usize];
    h.ram.read(dst, &mut got).unwrap();
    assert!(got == data, "the 1 MiB written through the socket-driven engine matches");

    // SEND_IMM into a posted RECV on QP 2, with CQ 2 armed: one interrupt.
    h.post(
        2,
        false,
        &[(WqeHeader { opcode: WQE_OP_RECV, num_sge: 1, wr_id: 0x77, ..Default::default() }, vec![Sge { addr: VA + dst, length: 4096, lkey: rkey }])],
    )
    .unwrap();
    h.w32(CQ_ARM, 2 << 16).unwrap();
    h.post(1, true, &[wqe(WQE_OP_SEND_IMM, 0xabd, 0, 0, Sge { addr: VA + src, length: 100, lkey })]).unwrap();
    let r = h.wait(2, SECOND).unwrap();
    assert_eq!((r.wr_id, r.opcode, r.byte_len, r.imm_data, r.src_qp, r.flags), (0x77, CQE_OP_RECV, 100, 0xfeed, 1, CQE_FLAG_IMM));
    assert_eq!(h.wait(1, SECOND).unwrap().wr_id, 0xabd);
    let mut n = [0u8; 8];
    assert!(wait_until(Duration::from_secs(5), || efd.read(&mut n).is_ok()), "the armed CQ raised its MSI-X vector");

    // A bad rkey: REM_ACCESS_ERR, the QP goes to ERROR, the error is latched.
    h.post(1, true, &[wqe(WQE_OP_RDMA_WRITE, 0xbad, VA + dst, rkey ^ 0x100, Sge { addr: VA + src, length: 8, lkey })]).unwrap();
    let e = h.wait(1, SECOND).unwrap();
    assert_eq!((e.wr_id, e.status, e.syndrome), (0xbad, WC_REM_ACCESS_ERR, u32::from(QP_ERR_REMOTE_ACCESS)));
    assert_ne!(u64::from(h.r32(RNIC_REG_STATUS).unwrap()) & STATUS_ERROR, 0);
    // The newest QP error: the responder's (QP 2), in ERROR once its NAK reached QP 1
    // (docs/programming.md R-EQ-4), possibly just after QP 1's completion was written.
    let latched = || h.r32(RNIC_REG_LAST_ERROR).unwrap() == ASYNC_ERR_QP << 24 | 2;
    assert!(wait_until(SECOND, latched), "the responder's error latched last");
    assert_eq!(h.r32(RNIC_REG_LAST_ERROR).unwrap(), 0, "read to clear");
    assert_eq!(h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_OK);

    // Statistics through BAR0, 64-bit and in halves.
    let stat = |c: Counter| STATS_BASE + 8 * c as u64;
    assert_eq!(h.r64(stat(Counter::BytesWritten)).unwrap(), len);
    assert_eq!(h.r64(stat(Counter::BytesSent)).unwrap(), 100);
    assert_eq!(h.r64(stat(Counter::SendWqes)).unwrap(), 3);
    assert_eq!(h.r32(stat(Counter::ErrorCqes)).unwrap(), 1);
    assert_eq!(h.r32(stat(Counter::Interrupts) + 4).unwrap(), 0);
    assert!(h.r64(stat(Counter::Interrupts)).unwrap() >= 1);
    // Reset forgets everything.
    h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    assert_eq!(h.r64(stat(Counter::BytesWritten)).unwrap(), 0);
    assert_eq!(h.cmd(CMD_DESTROY_CQ, 1).unwrap(), CMD_ERR_NOT_FOUND);
}
