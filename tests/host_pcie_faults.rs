//! Host-level tests of PCIe-side fault injection (docs/faults.md), no QEMU: a real node
//! server driven by `hostdrv`, faults injected through `rnic-emu fault` (the CLI and the
//! control socket) and a topology's `[node.faults] pcie`. Each test checks the device-side
//! effect the document promises: the error CQE and its syndrome, the bytes in memory, the
//! interrupt eventfds, registers and configuration space, the fault counters, and that a
//! reset (or FLR) brings the device back to verified WRITEs.

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_testkit::hostdrv::{HostDriver, ServerProcess, IOVA, VA};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::*;

const MIB: u64 = 1 << 20;
const ACCESS: u8 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
const LEN: u64 = 16 << 10;
const WAIT: Duration = Duration::from_secs(10);
const CFG: u32 = VFIO_PCI_CONFIG_REGION_INDEX;
/// The AER capability is the first extended capability (device/core/src/function.rs).
const AER: u64 = 0x100;

const TOPOLOGY: &str = r#"name = "one-rnic"
[[node]]
name = "node0"
port = [ { id = "rp0", kind = "root-port" } ]
device = [ { id = "rnic0", kind = "rnic", port = "rp0" } ]
"#;

struct Dev {
    server: ServerProcess,
    h: HostDriver,
    src: u64,
    dst: u64,
    keys: (u32, u32),
    _dir: tempfile::TempDir,
}

impl Dev {
    fn start(topology: &str) -> Dev {
        let dir = tempfile::tempdir().unwrap();
        let topo = dir.path().join("t.toml");
        std::fs::write(&topo, topology).unwrap();
        let server = ServerProcess::start(Path::new(bin()), &topo, dir.path(), None).unwrap();
        let h = HostDriver::connect(&server.socket("rnic0"), 16 * MIB).unwrap();
        let mut d = Dev { server, h, src: 0, dst: 0, keys: (0, 0), _dir: dir };
        d.load();
        d
    }

    /// CQ 1 (vector 1), QP 1 connected to itself, a source and a destination MR.
    fn load(&mut self) {
        let h = &mut self.h;
        h.create_cq(1, 6, 1).unwrap();
        h.create_qp(1, 1, 1, 6, ACCESS).unwrap();
        h.connect_qp(1, 1).unwrap();
        self.src = h.alloc(LEN, 4096);
        self.dst = h.alloc(LEN, 4096);
        self.keys = (h.reg_mr(1, 1, ACCESS, self.src, LEN).unwrap(), h.reg_mr(2, 1, ACCESS, self.dst, LEN).unwrap());
    }

    /// Register reset, then the driver's load again.
    fn reset_and_reload(&mut self) {
        self.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
        self.h.reload().unwrap();
        self.load();
    }

    fn fault(&self, args: &str) -> String {
        let out = std::process::Command::new(bin())
            .args(["fault", "--socket-dir"])
            .arg(&self.server.socket_dir)
            .args(["--node", "node0"])
            .args(args.split_whitespace())
            .output()
            .unwrap();
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "rnic-emu fault {args}: {stderr}");
        stdout.into_owned()
    }

    fn counter(&self, name: &str) -> u64 {
        let all = rnic_emu_server::serve::query_stats(&self.server.socket_dir, "node0").unwrap();
        all["node0-rnic0"][name].as_u64().unwrap_or_else(|| panic!("no counter {name}"))
    }

    /// Posts a signaled WRITE of LEN patterned bytes src -> dst.
    fn post_write(&mut self, seed: u32) {
        self.h.ram.write(self.src, &pattern(seed, 0, LEN as usize)).unwrap();
        self.h.ram.write(self.dst, &vec![0u8; LEN as usize]).unwrap();
        let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, u64::from(seed), VA + self.dst, self.keys.1);
        let sge = Sge { addr: VA + self.src, length: LEN as u32, lkey: self.keys.0 };
        self.h.post(1, true, &[(hdr, vec![sge])]).unwrap();
    }

    fn dst_bytes(&self) -> Vec<u8> {
        let mut got = vec![0u8; LEN as usize];
        self.h.ram.read(self.dst, &mut got).unwrap();
        got
    }

    fn verified_write(&mut self, seed: u32) {
        self.post_write(seed);
        let c = self.h.wait(1, WAIT).unwrap();
        assert_eq!((c.wr_id, c.status), (u64::from(seed), WC_SUCCESS));
        assert!(self.dst_bytes() == pattern(seed, 0, LEN as usize), "WRITE {seed}: bytes differ");
    }

    fn cfg32(&mut self, off: u64) -> u32 {
        let mut b = [0u8; 4];
        self.h.client.region_read(CFG, off, &mut b).unwrap();
        u32::from_le_bytes(b)
    }

    fn status(&mut self) -> u64 {
        u64::from(self.h.r32(RNIC_REG_STATUS).unwrap())
    }
}

/// Eventfds on vectors 0..n (non-blocking).
fn vectors(h: &mut HostDriver, n: u32) -> Vec<File> {
    let files: Vec<File> = (0..n)
        .map(|_| {
            // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
            assert!(fd >= 0);
            // SAFETY: fd is valid and owned.
            unsafe { File::from_raw_fd(fd) }
        })
        .collect();
    let fds: Vec<_> = files.iter().map(|f| f.as_raw_fd()).collect();
    h.client.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER, 0, n, &fds).unwrap();
    files
}

fn fired(f: &mut File) -> u64 {
    let mut n = [0u8; 8];
    f.read(&mut n).map_or(0, |_| u64::from_ne_bytes(n))
}

#[test]
fn dma_read_write_failures_and_poison_complete_in_error() {
    let mut d = Dev::start(TOPOLOGY);
    d.verified_write(1);

    // A failed read of the source buffer: the WRITE completes with WC_FATAL_ERR / QP_ERR_DMA.
    let src = IOVA + d.src;
    assert!(d.fault(&format!("dma-read-fail count=1 addr={src:#x} len={LEN}")).contains("armed dma-read-fail"));
    d.post_write(2);
    let c = d.h.wait(1, WAIT).unwrap();
    assert_eq!((c.wr_id, c.status, c.syndrome), (2, WC_FATAL_ERR, u32::from(QP_ERR_DMA)), "{c:?}");
    assert_eq!(d.dst_bytes(), vec![0u8; LEN as usize], "nothing placed");
    assert_eq!(d.counter("fault_dma_read_fail"), 1);
    d.reset_and_reload();
    d.verified_write(3);

    // A failed write of the destination.
    let dst = IOVA + d.dst;
    d.fault(&format!("dma-write-fail addr={dst:#x} len={LEN}"));
    d.post_write(4);
    let c = d.h.wait(1, WAIT).unwrap();
    assert_eq!((c.wr_id, c.status, c.syndrome), (4, WC_FATAL_ERR, u32::from(QP_ERR_DMA)), "{c:?}");
    assert_eq!(d.counter("fault_dma_write_fail"), 1);
    d.reset_and_reload();

    // Poisoned data: the destination gets the bytes corrupted, the CQE says so, and AER
    // logs Poisoned TLP Received (bit 12) with the First Error Pointer on it.
    let src = IOVA + d.src;
    d.fault(&format!("poison addr={src:#x} len={LEN}"));
    d.post_write(5);
    let c = d.h.wait(1, WAIT).unwrap();
    assert_eq!((c.wr_id, c.status, c.syndrome), (5, WC_FATAL_ERR, u32::from(QP_ERR_POISONED)), "{c:?}");
    let inverted: Vec<u8> = pattern(5, 0, LEN as usize).iter().map(|b| !b).collect();
    assert!(d.dst_bytes() == inverted, "the poisoned bytes were forwarded");
    assert_eq!(d.cfg32(AER + 0x04), 1 << 12, "AER uncorrectable status: Poisoned TLP");
    assert_eq!(d.cfg32(AER + 0x18) & 0x1f, 12, "First Error Pointer");
    d.h.client.region_write(CFG, AER + 0x04, &(1u32 << 12).to_le_bytes()).unwrap();
    assert_eq!(d.cfg32(AER + 0x04), 0, "write-one-to-clear");
    d.reset_and_reload();
    d.verified_write(6);

    // The next N reads of any kind: the WQE fetch fails first.
    d.fault("dma-read-fail count=1");
    d.post_write(7);
    let c = d.h.wait(1, WAIT).unwrap();
    assert_eq!((c.status, c.syndrome), (WC_FATAL_ERR, u32::from(QP_ERR_DMA)), "{c:?}");
    assert!(d.counter("dma_errors") >= 1);
    d.reset_and_reload();
    d.verified_write(8);
}

#[test]
fn completions_delayed_and_duplicated_never_overwrite_a_slot() {
    let mut d = Dev::start(TOPOLOGY);
    // Delay: the CQE is not there before the delay, arrives after it, data first.
    // Speed-independent: the data is awaited (not assumed placed after a fixed sleep), and
    // the CQE's absence is asserted only for a poll known to have run inside the delay.
    const DELAY: Duration = Duration::from_millis(2000);
    d.fault(&format!("cqe-delay ms={}", DELAY.as_millis()));
    let t0 = Instant::now();
    d.post_write(1);
    let placed = loop {
        let placed = d.dst_bytes() == pattern(1, 0, LEN as usize);
        if placed || t0.elapsed() > WAIT {
            break placed;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(placed, "the data is placed before the delayed CQE");
    let early = d.h.poll(1).unwrap();
    if t0.elapsed() < DELAY {
        assert!(early.is_none(), "held back");
    }
    let c = match early {
        Some(c) => c,
        None => d.h.wait(1, WAIT).unwrap(),
    };
    assert!(t0.elapsed() >= DELAY, "{:?}", t0.elapsed());
    assert_eq!((c.wr_id, c.status), (1, WC_SUCCESS));
    assert_eq!(d.counter("fault_cqe_delay"), 1);

    // Duplicate attempt, detected: exactly one CQE, the next slot stays invalid.
    d.fault("cqe-duplicate");
    d.verified_write(2);
    std::thread::sleep(Duration::from_millis(100));
    assert!(d.h.poll(1).unwrap().is_none(), "the duplicate was dropped");
    assert_eq!((d.counter("fault_cqe_duplicate"), d.counter("fault_cqe_duplicate_dropped")), (1, 1));
    d.verified_write(3);

    // Without the check (deliver): the duplicate goes into the next free slot.
    d.fault("cqe-duplicate deliver");
    d.verified_write(4);
    let dup = d.h.wait(1, WAIT).unwrap();
    assert_eq!((dup.wr_id, dup.status), (4, WC_SUCCESS), "the same completion a second time");

    // Never into an unconsumed slot: a full CQ drops the duplicate as an overflow.
    let cqes = d.counter("cqes");
    d.fault("cqe-duplicate deliver count=always");
    for i in 0..32 {
        d.post_write(100 + i);
    }
    // Awaited, not assumed done after a fixed time: the 64 CQEs; then a pause in which
    // not one more may come.
    assert!(wait_until(WAIT, || d.counter("send_wqes") >= 4 + 32 && d.counter("cqes") - cqes >= 64));
    std::thread::sleep(Duration::from_millis(200));
    let written = d.counter("cqes") - cqes;
    assert_eq!(written, 64, "a 64-entry CQ holds 64 and not one more");
    let mut seen = 0;
    while d.h.poll(1).unwrap().is_some() {
        seen += 1;
    }
    assert_eq!(seen, 64);
}

#[test]
fn interrupts_lost_and_spurious() {
    let mut d = Dev::start(TOPOLOGY);
    let mut v = vectors(&mut d.h, 2);
    // Armed CQ, completion written, but the message is lost.
    d.fault("msi-lost vector=1");
    d.h.w32(CQ_ARM, 1 << 16).unwrap();
    d.verified_write(1);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(fired(&mut v[1]), 0, "lost");
    assert_eq!(d.counter("fault_msi_lost"), 1);
    d.h.w32(CQ_ARM, 1 << 16).unwrap();
    d.verified_write(2);
    assert!(wait_until(WAIT, || fired(&mut v[1]) == 1), "the next one arrives");
    // Spurious: a message with nothing behind it.
    d.fault("msi-spurious vector=1");
    assert!(wait_until(WAIT, || fired(&mut v[1]) == 1));
    assert!(d.h.poll(1).unwrap().is_none(), "no completion behind it");
    assert_eq!(d.counter("fault_msi_spurious"), 1);
}

#[test]
fn command_timeout_async_events_and_fatal_need_a_reset() {
    let mut d = Dev::start(TOPOLOGY);
    let mut v = vectors(&mut d.h, 1);
    d.fault("cmd-timeout");
    assert_eq!(d.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_BUSY);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(d.h.r32(RNIC_REG_CMD_STATUS).unwrap(), CMD_BUSY, "never leaves BUSY");
    assert_eq!(d.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_BUSY, "later commands neither");
    d.reset_and_reload();
    assert_eq!(d.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_OK);
    d.verified_write(1);

    d.fault("async code=1 index=9");
    assert!(wait_until(WAIT, || fired(&mut v[0]) == 1), "async vector 0");
    assert_ne!(d.status() & STATUS_ERROR, 0);
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_CQ_OVERFLOW << 24 | 9);
    assert_eq!(d.status() & STATUS_ERROR, 0, "read-to-clear");
    d.verified_write(2);

    // Fatal: queued RECVs flushed, commands refused, a register reset recovers.
    let hdr = WqeHeader { opcode: WQE_OP_RECV, num_sge: 1, wr_id: 70, ..Default::default() };
    d.h.post(1, false, &[(hdr, vec![Sge { addr: VA + d.dst, length: 64, lkey: d.keys.1 }])]).unwrap();
    d.fault("fatal");
    assert_ne!(d.status() & STATUS_FATAL, 0);
    assert!(wait_until(WAIT, || fired(&mut v[0]) == 1));
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_FATAL << 24);
    let c = d.h.wait(1, WAIT).unwrap();
    assert_eq!((c.wr_id, c.status), (70, WC_WR_FLUSH_ERR));
    assert_eq!(d.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_ERR_FATAL);
    d.reset_and_reload();
    assert_eq!(d.status() & STATUS_FATAL, 0);
    d.verified_write(3);
}

#[test]
fn aer_link_and_flr_required() {
    let mut d = Dev::start(TOPOLOGY);
    let mut v = vectors(&mut d.h, 1);
    // AER correctable (Bad TLP) and uncorrectable fatal (Malformed TLP).
    assert!(d.fault("aer correctable").contains("correctable error, status bit 6"));
    assert_eq!(d.cfg32(AER + 0x10), 1 << 6);
    assert!(wait_until(WAIT, || fired(&mut v[0]) == 1));
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_AER << 24);
    assert!(d.fault("aer uncorrectable bit=18").contains("fatal"));
    assert_eq!(d.cfg32(AER + 0x04), 1 << 18);
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_AER << 24 | 2);
    // Device Status (PCIe capability after PM and MSI-X: find it through the list).
    let mut at = u64::from(d.cfg32(0x34) & 0xff);
    while d.cfg32(at) & 0xff != 0x10 {
        at = u64::from(d.cfg32(at) >> 8 & 0xff);
    }
    assert_eq!(d.cfg32(at + 0x08) >> 16 & 0x7, 0b101, "DevSta: correctable and fatal detected");
    d.verified_write(1);

    // Link down: config and BAR reads return all-ones, DMA stops; link up resets.
    d.fault("link down");
    assert_eq!((d.cfg32(0), d.h.r32(RNIC_REG_ID).unwrap()), (u32::MAX, u32::MAX));
    d.post_write(2);
    std::thread::sleep(Duration::from_millis(200));
    assert!(d.h.poll(1).unwrap().is_none(), "no completion while the link is down");
    d.fault("link up");
    assert_eq!(d.h.r32(RNIC_REG_ID).unwrap(), ID_MAGIC);
    assert_eq!(d.h.r32(DMA_CTRL).unwrap(), 1, "the function came back reset");
    assert_eq!((d.counter("fault_link_down"), d.counter("fault_link_up")), (1, 1));
    d.h.reload().unwrap();
    d.load();
    d.verified_write(3);

    // FLR required: FATAL and FLR_REQUIRED, RNIC_REG_RESET ignored, an FLR recovers.
    d.fault("flr-required");
    let both = STATUS_FATAL | STATUS_FLR_REQUIRED;
    assert_eq!(d.status() & both, both);
    assert_eq!(d.h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_FLR_REQUIRED << 24);
    d.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    assert_eq!(d.status() & both, both, "a register reset does not recover");
    assert_eq!(d.h.cmd(CMD_QUERY_QP, 1).unwrap(), CMD_ERR_FATAL);
    let devctl = d.cfg32(at + 0x08) as u16;
    d.h.client.region_write(CFG, at + 0x08, &(devctl | 0x8000).to_le_bytes()).unwrap();
    assert_eq!(d.status() & both, 0, "FLR clears it");
    d.h.reload().unwrap();
    d.load();
    d.verified_write(4);
}

fn fault_cli(socket_dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(bin()).args(["fault", "--socket-dir"]).arg(socket_dir).args(args).output().unwrap()
}

#[test]
fn topology_faults_are_armed_at_start_and_bad_ones_refused() {
    let dir = tempfile::tempdir().unwrap();
    let topo = dir.path().join("t.toml");
    let text = TOPOLOGY.replace("name = \"node0\"", "name = \"node0\"\nfaults = { seed = 3, pcie = [\"cmd-timeout\"] }");
    std::fs::write(&topo, text).unwrap();
    let server = ServerProcess::start(Path::new(bin()), &topo, dir.path(), None).unwrap();
    let mut h = HostDriver::connect(&server.socket("rnic0"), 16 * MIB).unwrap();
    let status = |d: &Path| -> serde_json::Value {
        let out = fault_cli(d, &["status"]);
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(status(dir.path())["armed"][0], "cmd-timeout count=1", "armed from the topology");
    assert_eq!(h.cmd(CMD_QUERY_QP, 0).unwrap(), CMD_BUSY, "the first command of the run hangs");
    let s = status(dir.path());
    assert_eq!((s["armed"].as_array().map(Vec::len), &s["counters"]["fault_cmd_timeout"]), (Some(0), &serde_json::json!(1)));
    h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
    assert_eq!(h.cmd(CMD_QUERY_QP, 0).unwrap(), CMD_OK);

    // Errors name the problem; immediate faults do not belong in a topology.
    let out = fault_cli(dir.path(), &["aer", "sideways"]);
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected 'correctable' or 'uncorrectable'"));
    let out = fault_cli(dir.path(), &["--device", "rnic9", "fatal"]);
    assert_eq!(out.status.code(), Some(125), "no such RNIC: nobody takes the request");
    let bad = TOPOLOGY.replace("name = \"node0\"", "name = \"node0\"\nfaults = { pcie = [\"link down\"] }");
    let err = rnic_emu_core::platform::topology::Topology::parse(&bad, "bad").unwrap_err();
    assert!(format!("{err}").contains("only faults that are armed"), "{err}");
}
