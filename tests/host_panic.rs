//! Host-level test of the verbs engine's failure containment (docs/verbs.md §2.4,
//! docs/programming.md R-FAT-1), no QEMU: a node server with two RNICs, started with the
//! engine's test hooks on (`RNIC_EMU_TEST_HOOKS=1`, off by default), is made to panic in
//! one RNIC's engine, once inside a command and once inside a pass of the event loop. The
//! driver sees STATUS_FATAL, ASYNC_ERR_FATAL in RNIC_REG_LAST_ERROR with the async vector,
//! error completions for the queued receives, commands refused and doorbells ignored; the
//! other RNIC of the node keeps working; RNIC_REG_RESET (and a vfio-user device reset)
//! brings the failed one back to verified WRITEs. Last, the engine's loop is made to stall:
//! a command times out after the server's real command timeout, the device is FATAL, and a
//! reset once the loop runs again recovers it.

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::contract::counters::Counter;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_core::rnic::verbs::runner::{CMD_TEST_PANIC, COMMAND_TIMEOUT, TEST_HOOKS_ENV, TEST_STALL};
use rnic_emu_testkit::hostdrv::{HostDriver, ServerProcess, VA};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::*;

const MIB: u64 = 1 << 20;
const ACCESS: u8 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const LEN: u64 = 64 << 10;
const WAIT: Duration = Duration::from_secs(10);

const TOPOLOGY: &str = r#"name = "two-rnics"
description = "one node, two RNICs on their own root ports"
[[node]]
name = "node0"
port = [ { id = "rp0", kind = "root-port" }, { id = "rp1", kind = "root-port" } ]
device = [ { id = "rnic0", kind = "rnic", port = "rp0" }, { id = "rnic1", kind = "rnic", port = "rp1" } ]
"#;

/// A driver with CQ 1 and QP 1 (connected to itself) and a source and destination MR.
struct Dev {
    h: HostDriver,
    src: u64,
    dst: u64,
    keys: (u32, u32),
}

impl Dev {
    fn connect(server: &ServerProcess, rnic: &str) -> Dev {
        let h = HostDriver::connect(&server.socket(rnic), 16 * MIB).unwrap();
        let mut d = Dev { h, src: 0, dst: 0, keys: (0, 0) };
        d.load();
        d
    }

    fn load(&mut self) {
        let h = &mut self.h;
        h.create_cq(1, 8, 1).unwrap();
        h.create_qp(1, 1, 1, 6, ACCESS).unwrap();
        h.connect_qp(1, 1).unwrap();
        self.src = h.alloc(LEN, 4096);
        self.dst = h.alloc(LEN, 4096);
        self.keys = (h.reg_mr(1, 1, ACCESS, self.src, LEN).unwrap(), h.reg_mr(2, 1, ACCESS, self.dst, LEN).unwrap());
    }

    fn post_write(&mut self, wr_id: u64) {
        let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, wr_id, VA + self.dst, self.keys.1);
        let sge = Sge { addr: VA + self.src, length: LEN as u32, lkey: self.keys.0 };
        self.h.post(1, true, &[(hdr, vec![sge])]).unwrap();
    }

    /// A WRITE of LEN patterned bytes completes and the bytes arrive.
    fn verified_write(&mut self, seed: u32) {
        self.h.ram.write(self.src, &pattern(seed, 0, LEN as usize)).unwrap();
        self.post_write(u64::from(seed));
        let c = self.h.wait(1, WAIT).unwrap();
        assert_eq!((c.wr_id, c.status), (u64::from(seed), WC_SUCCESS));
        let mut got = vec![0u8; LEN as usize];
        self.h.ram.read(self.dst, &mut got).unwrap();
        assert!(got == pattern(seed, 0, LEN as usize), "WRITE {seed}: bytes differ");
    }

    fn post_recvs(&mut self, ids: &[u64]) {
        let wqes: Vec<_> = ids
            .iter()
            .map(|&wr_id| {
                let hdr = WqeHeader { opcode: WQE_OP_RECV, num_sge: 1, wr_id, ..Default::default() };
                (hdr, vec![Sge { addr: VA + self.dst, length: 64, lkey: self.keys.1 }])
            })
            .collect();
        self.h.post(1, false, &wqes).unwrap();
    }

    fn status(&mut self) -> u64 {
        u64::from(self.h.r32(RNIC_REG_STATUS).unwrap())
    }
}

fn vector0(h: &mut HostDriver) -> File {
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    let efd = unsafe { File::from_raw_fd(fd) };
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    h.client.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 0, 1, &[efd.as_raw_fd()]).unwrap();
    efd
}

/// What the driver sees of a failed engine with two RECVs (ids 70, 71) queued.
fn expect_fatal(d: &mut Dev, async_irq: &mut File) {
    assert!(wait_until(WAIT, || d.status() & STATUS_FATAL != 0), "STATUS_FATAL set");
    let mut n = [0u8; 8];
    assert!(wait_until(WAIT, || async_irq.read(&mut n).is_ok()), "async error vector 0 raised");
    assert_eq!(u64::from(d.h.r32(RNIC_REG_LAST_ERROR).unwrap()), u64::from(ASYNC_ERR_FATAL) << 24);
    assert_ne!(d.status() & STATUS_FATAL, 0, "reading LAST_ERROR does not clear FATAL");
    for id in [70, 71] {
        let c = d.h.wait(1, WAIT).unwrap();
        assert_eq!((c.wr_id, c.status, c.opcode), (id, WC_WR_FLUSH_ERR, CQE_OP_RECV), "queued RECV flushed");
    }
    assert_eq!(d.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_ERR_FATAL, "commands refused while fatal");
    assert_eq!(d.h.cmd(CMD_DESTROY_CQ, 1).unwrap(), CMD_ERR_FATAL);
    // A doorbell is ignored: no completion, no byte moved.
    d.h.ram.write(d.src, &[0xab; 64]).unwrap();
    d.h.ram.write(d.dst, &[0; 64]).unwrap();
    d.post_write(99);
    std::thread::sleep(Duration::from_millis(300));
    assert!(d.h.poll(1).unwrap().is_none(), "no completion while fatal");
    let mut b = [0u8; 64];
    d.h.ram.read(d.dst, &mut b).unwrap();
    assert_eq!(b, [0; 64], "no DMA while fatal");
}

#[test]
fn an_engine_panic_is_fatal_for_its_rnic_only_and_a_reset_recovers() {
    // Only this test runs in this binary: the server inherits the hook switch.
    std::env::set_var(TEST_HOOKS_ENV, "1");
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("two-rnics.toml");
    std::fs::write(&topo, TOPOLOGY).unwrap();
    let server = ServerProcess::start(std::path::Path::new(bin()), &topo, dir.path(), None).unwrap();
    let mut a = Dev::connect(&server, "rnic0");
    let mut b = Dev::connect(&server, "rnic1");
    let mut irq = vector0(&mut a.h);
    a.verified_write(1);
    b.verified_write(2);

    // 1. A panic inside a command.
    a.post_recvs(&[70, 71]);
    assert_eq!(a.h.cmd(CMD_TEST_PANIC, 0).unwrap(), CMD_ERR_FATAL, "the failing command answers FATAL");
    expect_fatal(&mut a, &mut irq);
    b.verified_write(3); // the node's other engine, on the same event loop, is unaffected
    assert_eq!(b.status() & STATUS_FATAL, 0);
    a.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    assert_eq!(a.status() & (STATUS_FATAL | STATUS_ERROR), 0, "reset clears the fatal state");
    a.h.reload().unwrap();
    a.load();
    a.verified_write(4);

    // 2. A panic inside a pass of the event loop, recovered by a vfio-user device reset.
    irq = vector0(&mut a.h);
    a.post_recvs(&[70, 71]);
    assert_eq!(a.h.cmd(CMD_TEST_PANIC, 1).unwrap(), CMD_OK, "armed for the next pass");
    a.h.w32(CQ_ARM, 1 << 16).unwrap(); // any event: the loop makes a pass
    expect_fatal(&mut a, &mut irq);
    b.verified_write(5);
    a.h.client.reset().unwrap();
    assert_eq!(a.status() & STATUS_FATAL, 0, "vfio-user reset clears the fatal state");
    a.h.reload().unwrap();
    a.load();
    a.verified_write(6);
    b.verified_write(7);

    // 3. A panic as the loop goes to sleep (publishing event indices), once it is idle.
    irq = vector0(&mut a.h);
    a.post_recvs(&[70, 71]);
    assert_eq!(a.h.cmd(CMD_TEST_PANIC, 2).unwrap(), CMD_OK, "armed for the next sleep");
    expect_fatal(&mut a, &mut irq);
    b.verified_write(8);
    a.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    assert_eq!(a.status() & STATUS_FATAL, 0);
    a.h.reload().unwrap();
    a.load();
    a.verified_write(9);
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert_eq!(log.matches("the verbs engine failed in").count(), 3, "one line per failure:\n{log}");

    // 4. An engine that takes no call within COMMAND_TIMEOUT (its loop stalls: test hook),
    //    with the server's real timeout: the command waits that long, answers
    //    CMD_ERR_TIMEOUT and never runs; the device is FATAL, counted in ENGINE_TIMEOUTS,
    //    and a reset the engine takes, once it runs again, recovers it (docs/programming.md
    //    R-CMD-6, R-RST-8).
    assert_eq!(a.h.cmd(CMD_TEST_PANIC, 3).unwrap(), CMD_OK, "armed: the next pass stalls");
    let armed = Instant::now();
    a.h.w32(CQ_ARM, 1 << 16).unwrap(); // any event: the loop makes a pass, and stalls
    std::thread::sleep(Duration::from_millis(200));
    let asked = Instant::now();
    assert_eq!(a.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_ERR_TIMEOUT, "the engine did not take it");
    assert!(asked.elapsed() >= COMMAND_TIMEOUT, "answered before the command timeout: {:?}", asked.elapsed());
    assert_ne!(a.status() & STATUS_FATAL, 0, "FATAL after a timeout");
    assert_eq!(a.h.r64(STATS_BASE + 8 * Counter::EngineTimeouts as u64).unwrap(), 1);
    assert_eq!(a.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_ERR_FATAL, "no command while FATAL");
    // The reset must be one the engine takes: after the stall.
    std::thread::sleep((armed + TEST_STALL + Duration::from_secs(1)).saturating_duration_since(Instant::now()));
    a.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    assert_eq!(a.status() & STATUS_FATAL, 0, "the engine took the reset");
    a.h.reload().unwrap();
    a.load();
    a.verified_write(10);
    b.verified_write(11);
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    assert!(log.contains("test hook: the engine stalls"), "the stall ran:\n{log}");
}
