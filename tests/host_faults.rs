//! Host-level fault tests, no QEMU: a hostile vfio-user client flooding the server with
//! bad BAR accesses (the log stays small, the statistics count every one), resource bounds
//! at their limit plus one, DMA_UNMAP while a WRITE into the unmapped memory is in flight,
//! device reset and FLR with WQEs queued and in flight, a GPU's BAR1 moved while the
//! RNIC DMAs into it, DMA with bus mastering off and a partial DMA_UNMAP.

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::platform::shm::SharedMemory;
use rnic_emu_core::ratelimit;
use rnic_emu_core::regs::pci_ids::RNIC_BAR0_SIZE;
use rnic_emu_core::regs::rnic::*;
use rnic_emu_testkit::hostdrv::{HostDriver, ServerProcess, VA};
use rnic_emu_testkit::raw::Raw;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};
use vfio_bindings::bindings::vfio::VFIO_PCI_CONFIG_REGION_INDEX as CFG;

const REGION_READ: u16 = 9;
const REGION_WRITE: u16 = 10;
const FLAG_ERROR: u32 = 0x20;

fn single_switch(dir: &std::path::Path) -> ServerProcess {
    ServerProcess::start(std::path::Path::new(bin()), &topology("single-switch"), dir, None).unwrap()
}

/// A counter of the server process itself (not of one function).
fn server_counter(server: &ServerProcess, name: &str) -> u64 {
    let all = rnic_emu_server::serve::query_stats(&server.socket_dir, &server.node).unwrap();
    all[&rnic_emu_server::serve::server_stats_key(&server.node)][name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {all}"))
}

fn counter(server: &ServerProcess, function: &str, name: &str) -> u64 {
    let all = rnic_emu_server::serve::query_stats(&server.socket_dir, &server.node).unwrap();
    all[&format!("{}-{function}", server.node)][name].as_u64().unwrap_or_else(|| panic!("no counter {name} in {all}"))
}

/// One REGION_READ/REGION_WRITE message (vfio-user spec: header, offset, region, count, data).
fn access(out: &mut Vec<u8>, id: u16, write: bool, offset: u64, count: u32) {
    let data = if write { count } else { 0 };
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&(if write { REGION_WRITE } else { REGION_READ }).to_le_bytes());
    out.extend_from_slice(&(32 + data).to_le_bytes());
    out.extend_from_slice(&[0; 8]); // flags (command), error
    out.extend_from_slice(&offset.to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes()); // BAR0
    out.extend_from_slice(&count.to_le_bytes());
    out.resize(out.len() + data as usize, 0);
}

/// Reads one reply; returns whether it was an error reply.
fn reply(s: &mut UnixStream) -> bool {
    let mut hdr = [0u8; 16];
    s.read_exact(&mut hdr).expect("reply header (server hung or died?)");
    let size = u32::from_le_bytes(hdr[4..8].try_into().unwrap()) as usize;
    let mut body = vec![0u8; size.saturating_sub(16)];
    s.read_exact(&mut body).expect("reply payload");
    u32::from_le_bytes(hdr[8..12].try_into().unwrap()) & FLAG_ERROR != 0
}

/// A million bad BAR0 accesses, pipelined in batches: wrong widths, unmapped offsets and
/// offsets past the BAR. The server's log (info level, as `rnic-emu run` runs it) grows by
/// under 100 KB and `guest_errors` counts every access.
#[test]
fn a_million_bad_accesses_are_counted_not_logged() {
    const TOTAL: u64 = 1_000_000;
    const BATCH: u64 = 1000;
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut s = UnixStream::connect(server.socket("rnic0")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let log_before = std::fs::metadata(server.log_path()).unwrap().len();
    let kinds = [
        (false, RNIC_REG_ID, 3),            // odd width: all-ones, counted by the model
        (true, DMA_CTRL, 2),                // narrow write to a 32-bit register: dropped
        (false, 0x7000, 4),                 // no register there
        (false, RNIC_BAR0_SIZE - 2, 4),     // runs past BAR0: refused by the transport
        (true, RNIC_BAR0_SIZE + 0x1000, 4), // entirely outside BAR0
    ];
    let started = Instant::now();
    let (mut errors, mut msg) = (0u64, Vec::new());
    for batch in 0..TOTAL / BATCH {
        msg.clear();
        for i in 0..BATCH {
            let (write, offset, count) = kinds[((batch * BATCH + i) % kinds.len() as u64) as usize];
            access(&mut msg, i as u16, write, offset, count);
        }
        s.write_all(&msg).unwrap();
        errors += (0..BATCH).filter(|_| reply(&mut s)).count() as u64;
    }
    eprintln!("{TOTAL} bad accesses in {:?}", started.elapsed());
    assert_eq!(errors, 2 * TOTAL / kinds.len() as u64, "accesses outside BAR0 get error replies");
    // The device still answers properly on the same connection.
    let mut ok = Vec::new();
    access(&mut ok, 1, false, RNIC_REG_ID, 4);
    s.write_all(&ok).unwrap();
    assert!(!reply(&mut s));
    assert_eq!(counter(&server, "rnic0", "guest_errors"), TOTAL);
    // What the limiters dropped is in the statistics at once, whatever the flood's speed...
    let dropped = server_counter(&server, "log_lines_suppressed");
    assert!(dropped > 0, "the statistics count the suppressed lines");
    // ... and in the log once the limiter's interval is over: the flood has stopped, so no
    // next event brings the summary; the server writes it when the interval ends.
    let deadline = Instant::now() + ratelimit::INTERVAL + WAIT;
    let log = loop {
        let log = std::fs::read_to_string(server.log_path()).unwrap();
        if log.contains("suppressed") || Instant::now() > deadline {
            break log;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let grown = log.len() as u64 - log_before;
    eprintln!("log grew by {grown} bytes:\n{log}");
    assert!(grown < 100_000, "the log grew by {grown} bytes");
    assert!(log.contains("suppressed"), "the limiter reports what it dropped");
}

const MIB: u64 = 1 << 20;
const WAIT: Duration = Duration::from_secs(30);
const ACCESS: u8 = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
/// Bus address of the second RAM range the tests write into (as QEMU maps RAM above 4 GiB).
const RAM2: u64 = 0x2_0000_0000;
/// Virtual address of the MR over a second RAM range or GPU memory.
const VA2: u64 = 0x7e00_0000_0000;
/// A stream of WRITEs: this many WQEs of `PIECE` bytes, each to its own destination range,
/// behind one doorbell: more than one engine pass, so a request can arrive in between.
const WQES: u64 = 512;
const PIECE: u64 = 128 << 10;

/// A fresh server with the RNIC loaded by `hostdrv`; CQ 1 (1024 CQEs) and QP 1 (512 WQEs)
/// connected to itself, PIECE bytes of patterned source data registered as MR 1.
struct Rig {
    server: ServerProcess,
    h: HostDriver,
    src_key: u32,
    src: u64,
    _dir: tempfile::TempDir,
}

fn rig(gpu_mem: bool) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let mem_dir = dir.path().join("mem");
    std::fs::create_dir(&mem_dir).unwrap();
    let server = ServerProcess::start(std::path::Path::new(bin()), &topology("single-switch"), dir.path(), gpu_mem.then_some(mem_dir.as_path())).unwrap();
    let h = HostDriver::connect(&server.socket("rnic0"), 32 * MIB).unwrap();
    let mut r = Rig { server, h, src_key: 0, src: 0, _dir: dir };
    r.load_queues();
    r
}

impl Rig {
    /// CQ 1, QP 1 and the source MR (again after a reset).
    fn load_queues(&mut self) {
        let h = &mut self.h;
        h.create_cq(1, 10, 1).unwrap();
        h.create_qp(1, 1, 1, 9, ACCESS).unwrap();
        h.connect_qp(1, 1).unwrap();
        self.src = h.alloc(PIECE, 4096);
        h.ram.write(self.src, &pattern(7, 0, PIECE as usize)).unwrap();
        self.src_key = h.reg_mr(1, 1, ACCESS, self.src, PIECE).unwrap();
    }

    /// MR `index` over `len` bytes at bus address `bus` (contiguous 4 KiB pages), at VA2.
    fn reg_bus(&mut self, index: u32, bus: u64, len: u64) -> u32 {
        let pages: Vec<u64> = (0..len / 4096).map(|p| bus + p * 4096).collect();
        self.h.reg_mr_pages(index, 1, ACCESS, VA2, len, &pages).unwrap()
    }

    /// Posts `n` signaled WRITEs of PIECE bytes from the source MR to VA2 + i * PIECE.
    fn stream(&mut self, qpn: u32, key: u32, n: u64) {
        let wqes: Vec<_> = (0..n)
            .map(|i| {
                let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, i, VA2 + i * PIECE, key);
                (hdr, vec![Sge { addr: VA + self.src, length: PIECE as u32, lkey: self.src_key }])
            })
            .collect();
        self.h.post(qpn, true, &wqes).unwrap();
    }

    /// One verified WRITE of PIECE bytes on a new QP `qpn` to VA2 with `key`; `read` reads
    /// the destination back.
    fn verified_write(&mut self, qpn: u32, key: u32, read: impl Fn(&mut [u8])) {
        self.h.create_qp(qpn, 1, 1, 4, ACCESS).unwrap();
        self.h.connect_qp(qpn, qpn).unwrap();
        self.stream(qpn, key, 1);
        let c = self.h.wait(1, WAIT).unwrap();
        assert_eq!((c.status, c.wr_id), (WC_SUCCESS, 0), "{c:?}");
        let mut got = vec![0u8; PIECE as usize];
        read(&mut got);
        assert!(got == pattern(7, 0, PIECE as usize), "the WRITE landed");
    }

    fn counter(&self, name: &str) -> u64 {
        counter(&self.server, "rnic0", name)
    }
}

fn read_all(m: &SharedMemory, len: u64) -> Vec<u8> {
    let mut v = vec![0u8; len as usize];
    m.read(0, &mut v).unwrap();
    v
}

/// How many PIECE-sized destination ranges hold the source pattern.
fn landed(mem: &[u8]) -> usize {
    let want = pattern(7, 0, PIECE as usize);
    mem.chunks(PIECE as usize).filter(|c| *c == want.as_slice()).count()
}

/// DMA_UNMAP of the memory a stream of WRITEs is filling: after the unmap returns no byte
/// changes there, the WRITE that found its memory gone completes with an error (the rest
/// are flushed), every WRITE that succeeded did land, and the server keeps serving (a
/// new map at the same address works for a new QP).
#[test]
fn dma_unmap_during_a_write_stream() {
    let mut r = rig(false);
    let len = WQES * PIECE;
    let ram2 = r.h.map_more_ram(RAM2, len).unwrap();
    let key = r.reg_bus(2, RAM2, len);
    r.stream(1, key, WQES);
    r.h.client.dma_unmap(RAM2, len).unwrap();
    let after_unmap = read_all(&ram2, len);
    let statuses: Vec<u8> = (0..WQES).map(|_| r.h.wait(1, WAIT).unwrap().status).collect();
    std::thread::sleep(Duration::from_millis(200));
    assert!(read_all(&ram2, len) == after_unmap, "bytes changed after DMA_UNMAP returned");
    let ok = statuses.iter().take_while(|&&s| s == WC_SUCCESS).count();
    eprintln!("{ok} of {WQES} WRITEs completed before the unmap; first error {:?}", statuses.get(ok));
    assert!(ok < WQES as usize, "the unmap arrived while WRITEs were queued");
    assert!(statuses[ok..].iter().all(|&s| s != WC_SUCCESS), "nothing succeeds after the first error: {statuses:?}");
    assert_ne!(statuses[ok], WC_WR_FLUSH_ERR, "the WRITE that met the unmap reports its own error");
    assert!(r.counter("dma_errors") >= 1);
    assert!(landed(&after_unmap) >= ok, "every successful WRITE landed");

    let ram2 = r.h.map_more_ram(RAM2, len).unwrap();
    r.verified_write(2, key, |buf| ram2.read(0, buf).unwrap());
}

/// PCI bus mastering off (docs/programming.md R-DEV-9): a command that reads its context
/// fails with CMD_ERR_DMA and BUS_MASTER_ERRORS counts the refused access; a WRITE rung
/// meanwhile leaves its destination untouched; bus mastering on again, the same command
/// works.
#[test]
fn no_dma_while_bus_mastering_is_off() {
    let mut r = rig(false);
    let ram2 = r.h.map_more_ram(RAM2, PIECE).unwrap();
    let key = r.reg_bus(2, RAM2, PIECE);
    r.h.client.region_write(CFG, 0x04, &0x2u16.to_le_bytes()).unwrap(); // memory on, bus master off
    assert!(r.h.create_cq(5, 4, 1).is_err(), "the CQ context is not readable");
    assert_eq!(r.h.cmd(CMD_CREATE_CQ, 5).unwrap(), CMD_ERR_DMA);
    assert!(r.counter("bus_master_errors") >= 2);
    r.stream(1, key, 1);
    assert_eq!(r.h.cmd(CMD_CREATE_CQ, 5).unwrap(), CMD_ERR_DMA, "still off (the doorbell was handled before this command)");
    assert_eq!(landed(&read_all(&ram2, PIECE)), 0, "the WRITE reached nothing");
    r.h.client.region_write(CFG, 0x04, &0x6u16.to_le_bytes()).unwrap();
    assert_eq!(r.h.cmd(CMD_CREATE_CQ, 5).unwrap(), CMD_OK, "bus mastering on: DMA works again");
}

/// DMA_UNMAP of a range that cuts a mapping removes nothing and gets an error reply,
/// counted in guest_errors; the whole mapping unmaps (docs/architecture.md "Memory").
#[test]
fn a_partial_dma_unmap_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut raw = Raw::connect(&server.socket("rnic0"));
    raw.dma_map(0x1_0000_0000, 0x2000).unwrap();
    assert!(raw.dma_unmap(0x1_0000_0000, 0x1000, 0).is_err(), "cuts the map");
    assert!(raw.dma_unmap(0x1_0000_1000, 0x2000, 0).is_err(), "straddles its end");
    assert_eq!(counter(&server, "rnic0", "guest_errors"), 2);
    assert!(raw.dma_map(0x1_0000_1000, 0x1000).is_err(), "the map is still there (overlap)");
    raw.dma_unmap(0x1_0000_0000, 0x2000, 0).unwrap();
    raw.dma_map(0x1_0000_1000, 0x1000).unwrap();
    assert_eq!(raw.region_read(0, RNIC_REG_ID, 4).unwrap(), ID_MAGIC.to_le_bytes());
}

/// The PCI Express capability's offset, by walking the capability list over the socket.
fn pcie_cap(h: &mut HostDriver) -> u64 {
    let mut b = [0u8; 2];
    h.client.region_read(CFG, 0x34, &mut b[..1]).unwrap();
    let mut at = u64::from(b[0]);
    while at != 0 {
        h.client.region_read(CFG, at, &mut b).unwrap();
        if b[0] == 0x10 {
            return at;
        }
        at = u64::from(b[1]);
    }
    panic!("no PCI Express capability");
}

/// Register reset, FLR and vfio-user DEVICE_RESET, each with a stream of WRITEs queued and
/// in flight: after the reset returns nothing more is written, and the driver loads again
/// on the same connection and does a verified WRITE.
#[test]
fn resets_with_writes_in_flight() {
    let mut r = rig(false);
    let len = WQES * PIECE;
    let ram2 = r.h.map_more_ram(RAM2, len).unwrap();
    let devctl = pcie_cap(&mut r.h) + 8;
    for how in ["RNIC_REG_RESET", "FLR", "DEVICE_RESET"] {
        let mut partial = false;
        for _attempt in 0..3 {
            ram2.write(0, &vec![0u8; len as usize]).unwrap();
            let key = r.reg_bus(2, RAM2, len);
            r.stream(1, key, WQES);
            match how {
                "RNIC_REG_RESET" => r.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap(),
                "FLR" => r.h.client.region_write(CFG, devctl, &0x8000u16.to_le_bytes()).unwrap(),
                _ => r.h.client.reset().unwrap(),
            }
            let after_reset = read_all(&ram2, len);
            std::thread::sleep(Duration::from_millis(300));
            assert!(read_all(&ram2, len) == after_reset, "{how}: bytes written after the reset returned");
            let n = landed(&after_reset);
            eprintln!("{how}: {n} of {WQES} WRITEs landed before the reset");
            assert_eq!(r.counter("send_wqes"), 0, "{how}: the engine forgot its work (counters cleared)");
            r.h.reload().unwrap();
            r.load_queues();
            partial = n < WQES as usize;
            if partial {
                break;
            }
        }
        assert!(partial, "{how}: the reset never arrived while WRITEs were queued (three tries)");
        if how == "FLR" {
            assert_eq!(r.h.r32(RNIC_REG_ID).unwrap(), ID_MAGIC, "registers answer after FLR");
            // FLR returns config space to reset values: turn memory decoding back on.
            r.h.client.region_write(CFG, 0x04, &0x6u16.to_le_bytes()).unwrap();
        }
        let key = r.reg_bus(2, RAM2, len);
        let ram = &ram2;
        r.verified_write(2, key, |buf| ram.read(0, buf).unwrap());
        r.h.w32(RNIC_REG_RESET, RESET_MAGIC as u32).unwrap();
        r.h.reload().unwrap();
        r.load_queues();
    }
}

const OLD_BAR1: u64 = 0x1_0000_0000;
const NEW_BAR1: u64 = 0x3_0000_0000;

/// GPU memory (the server's BAR1 file), read and written by the test.
struct GpuMem(std::fs::File);

impl GpuMem {
    fn read(&self, off: u64, len: u64) -> Vec<u8> {
        let mut v = vec![0u8; len as usize];
        std::os::unix::fs::FileExt::read_exact_at(&self.0, &mut v, off).unwrap();
        v
    }
}

/// Places the GPU's BAR1 at OLD_BAR1, starts a stream of WRITEs into it and, once the
/// first has completed, moves BAR1 to NEW_BAR1 as Linux does (decoding off, new address,
/// decoding on). Returns the GPU's client, its memory, the memory as it was when the move
/// returned, and every WRITE's completion status.
fn move_bar1_during_a_stream(r: &mut Rig) -> (vfio_user::Client, GpuMem, Vec<u8>, Vec<u8>) {
    let mut g = rnic_emu_testkit::hostdrv::place_gpu_bar1(&r.server.socket("gpu0"), OLD_BAR1).unwrap();
    let file = std::fs::OpenOptions::new().read(true).write(true).open(r.server.socket_dir.join("mem/node0-gpu0.bar1")).unwrap();
    let len = WQES * PIECE;
    r.h.w64(BAR1_APERTURE, OLD_BAR1).unwrap();
    let key = r.reg_bus(2, OLD_BAR1, len);
    r.stream(1, key, WQES);
    let first = r.h.wait(1, WAIT).unwrap();
    assert_eq!((first.status, first.wr_id), (WC_SUCCESS, 0));
    g.region_write(CFG, 0x04, &0x0u16.to_le_bytes()).unwrap();
    g.region_write(CFG, 0x14, &(NEW_BAR1 as u32).to_le_bytes()).unwrap();
    g.region_write(CFG, 0x18, &((NEW_BAR1 >> 32) as u32).to_le_bytes()).unwrap();
    g.region_write(CFG, 0x04, &0x6u16.to_le_bytes()).unwrap();
    let mem = GpuMem(file);
    let after_move = mem.read(0, len);
    let statuses: Vec<u8> = std::iter::once(first.status).chain((1..WQES).map(|_| r.h.wait(1, WAIT).unwrap().status)).collect();
    let ok = statuses.iter().take_while(|&&s| s == WC_SUCCESS).count();
    eprintln!("{ok} of {WQES} WRITEs completed before BAR1 moved; first error {:?}", statuses.get(ok));
    assert!(ok < WQES as usize, "BAR1 moved while WRITEs were queued");
    assert!(statuses[ok..].iter().all(|&s| s != WC_SUCCESS), "nothing succeeds after the first error");
    assert_ne!(statuses[ok], WC_WR_FLUSH_ERR, "the WRITE that met the move reports its own error");
    (g, mem, after_move, statuses)
}

/// The GPU's BAR1 moved while a stream of WRITEs fills GPU memory: WRITEs through the old
/// address fail, and once they are all complete nothing more lands; DMA to the new window
/// is refused until the driver updates BAR1_APERTURE, and works afterwards.
#[test]
fn gpu_bar1_moved_during_dma() {
    let mut r = rig(true);
    let (_g, mem, _, statuses) = move_bar1_during_a_stream(&mut r);
    let len = WQES * PIECE;
    let settled = mem.read(0, len);
    std::thread::sleep(Duration::from_millis(200));
    assert!(mem.read(0, len) == settled, "GPU memory changed after every WRITE completed");
    let ok = statuses.iter().take_while(|&&s| s == WC_SUCCESS).count();
    assert!(landed(&settled) >= ok, "every successful WRITE landed");

    // The new window: refused until BAR1_APERTURE names it, then a verified WRITE.
    let new_key = r.reg_bus(3, NEW_BAR1, len);
    let aperture_errors = r.counter("aperture_errors");
    r.h.create_qp(2, 1, 1, 4, ACCESS).unwrap();
    r.h.connect_qp(2, 2).unwrap();
    r.stream(2, new_key, 1);
    let c = r.h.wait(1, WAIT).unwrap();
    assert_eq!((c.status, c.syndrome), (WC_FATAL_ERR, u32::from(QP_ERR_APERTURE)), "{c:?}");
    assert_eq!(r.counter("aperture_errors"), aperture_errors + 1);
    r.h.w64(BAR1_APERTURE, NEW_BAR1).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&mem.0, &vec![0u8; PIECE as usize], 0).unwrap();
    r.verified_write(3, new_key, |buf| buf.copy_from_slice(&mem.read(0, PIECE)));
}

/// Stricter: not one byte lands through the old address after the config write that moved
/// BAR1 has returned: the move waits for the copy under way at that moment (the DMA
/// router's in-flight guard, device/core/src/mem/router.rs).
#[test]
fn gpu_bar1_move_stops_dma_through_the_old_address_at_once() {
    let mut r = rig(true);
    let (_g, mem, after_move, _) = move_bar1_during_a_stream(&mut r);
    std::thread::sleep(Duration::from_millis(200));
    let now = mem.read(0, WQES * PIECE);
    let p = PIECE as usize;
    let changed: Vec<usize> = (0..WQES as usize).filter(|&i| now[i * p..][..p] != after_move[i * p..][..p]).collect();
    assert!(changed.is_empty(), "WRITEs {changed:?} landed after the move returned ({} before)", landed(&after_move));
}

/// Runs command `op` on object `index` after putting `ctx` at its context slot (table `t`
/// of `HostDriver::tables`, `size`-byte entries), even one past the table; returns the status.
fn cmd_with<T: vm_memory::ByteValued>(h: &mut HostDriver, t: usize, size: u64, op: u32, index: u32, ctx: &T) -> u32 {
    h.put(h.tables[t] + u64::from(index) * size, ctx).unwrap();
    h.cmd(op, index).unwrap()
}

/// Every object limit of docs/verbs.md ("Resource bounds") at the limit and one beyond:
/// the last index, the largest ring and the last MTT entry work; one more is a clean
/// command error, counted, and the device keeps working.
#[test]
fn resource_bounds_at_the_limit_and_one_beyond() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut h = HostDriver::connect(&server.socket("rnic0"), 64 * MIB).unwrap();
    let (last_qp, last_cq, last_mr, max_log) = ((MAX_QP - 1) as u32, (MAX_CQ - 1) as u32, (MAX_MR - 1) as u32, MAX_RING_LOG2 as u8);
    let errors = |h: &mut HostDriver| h.r64(STATS_BASE + 8 * rnic_emu_core::contract::counters::Counter::CommandErrors as u64).unwrap();

    // CQs: the last index with the largest ring; the index past the table; a ring too big.
    h.create_cq(last_cq, max_log, 0).unwrap();
    let ring = IOVA_OF(h.alloc(32 << max_log, 4096));
    let cq = |log_size| CqCtx { ring_addr: ring, log_size, ..Default::default() };
    assert_eq!(cmd_with(&mut h, 1, 32, CMD_CREATE_CQ, MAX_CQ as u32, &cq(1)), CMD_ERR_BAD_INDEX);
    assert_eq!(cmd_with(&mut h, 1, 32, CMD_CREATE_CQ, 1, &cq(max_log + 1)), CMD_ERR_INVALID);
    assert_eq!(cmd_with(&mut h, 1, 32, CMD_CREATE_CQ, 1, &cq(max_log)), CMD_OK);

    // QPs: the last QPN with the largest rings; the QPN past the table; rings too big.
    h.create_qp(last_qp, 1, last_cq, max_log, ACCESS).unwrap();
    let sq = IOVA_OF(h.alloc(64 << (max_log + 1), 4096));
    let qp = |log_size| QpCtx {
        state: QPS_INIT,
        sq_log_size: log_size,
        rq_log_size: 4,
        sq_log_stride: 6,
        rq_log_stride: 6,
        pd: 1,
        send_cqn: 1,
        recv_cqn: 1,
        sq_addr: sq,
        rq_addr: sq,
        access: ACCESS,
        ..Default::default()
    };
    assert_eq!(cmd_with(&mut h, 0, 64, CMD_MODIFY_QP, MAX_QP as u32, &qp(4)), CMD_ERR_BAD_INDEX);
    assert_eq!(cmd_with(&mut h, 0, 64, CMD_MODIFY_QP, 2, &qp(max_log + 1)), CMD_ERR_INVALID);

    // MRs: the last index; the index past the table. MTT: an MR ending at the last entry;
    // one entry beyond MTT_ENTRIES.
    let buf = h.alloc(8192, 4096);
    h.reg_mr(last_mr, 1, ACCESS, buf, 4096).unwrap();
    let last = u64::from(rnic_emu_testkit::hostdrv::MTT_ENTRIES_HOST) - 1;
    h.ram.write(h.tables[3] + last * 8, &IOVA_OF(buf).to_le_bytes()).unwrap();
    let mr = |npages: u32| MrCtx {
        iova: VA,
        length: u64::from(npages) * 4096,
        pd: 1,
        mtt_offset: last as u32,
        npages,
        access: ACCESS,
        key: 1,
        page_shift: 12,
        rsvd0: 0,
    };
    assert_eq!(cmd_with(&mut h, 2, 32, CMD_REG_MR, MAX_MR as u32, &mr(1)), CMD_ERR_BAD_INDEX);
    assert_eq!(cmd_with(&mut h, 2, 32, CMD_REG_MR, 1, &mr(2)), CMD_ERR_INVALID);
    assert_eq!(cmd_with(&mut h, 2, 32, CMD_REG_MR, 1, &mr(1)), CMD_OK);
    assert_eq!(errors(&mut h), 6, "every refusal counted");

    // The objects at the limits work: a WRITE on the last QP into the last MR, its CQE in
    // the last CQ.
    h.connect_qp(last_qp, last_qp).unwrap();
    let key = last_mr << 8 | 0x5a;
    h.ram.write(buf + 4096, &[0xab; 64]).unwrap();
    let src_key = h.reg_mr(2, 1, ACCESS, buf + 4096, 64).unwrap();
    let hdr = rdma_wqe(WQE_OP_RDMA_WRITE, 9, VA + buf, key);
    h.post(last_qp, true, &[(hdr, vec![Sge { addr: VA + buf + 4096, length: 64, lkey: src_key }])]).unwrap();
    let c = h.wait(last_cq, WAIT).unwrap();
    assert_eq!((c.status, c.wr_id), (WC_SUCCESS, 9));
    let mut got = [0u8; 64];
    h.ram.read(buf, &mut got).unwrap();
    assert_eq!(got, [0xab; 64]);
}

#[allow(non_snake_case)]
fn IOVA_OF(ram_offset: u64) -> u64 {
    rnic_emu_testkit::hostdrv::IOVA + ram_offset
}

/// vfio-user requests: MAX_DMA_MAPS maps are accepted, one more is refused and counted, and
/// the server keeps serving; an fd-backed map larger than its file is refused; a region
/// access of MAX_REGION_ACCESS bytes is served, one byte more is refused.
#[test]
fn vfio_user_bounds_at_the_limit_and_one_beyond() {
    use rnic_emu_server::vfio::MAX_DMA_MAPS;
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut raw = Raw::connect(&server.socket("rnic0"));
    for i in 0..MAX_DMA_MAPS as u64 {
        raw.dma_map(0x1_0000_0000 + i * 0x1000, 0x1000).unwrap_or_else(|e| panic!("map {i} refused: {e}"));
    }
    // (The library puts no errno in replies to requests a backend refused.)
    assert!(raw.dma_map(0x1_0000_0000 + MAX_DMA_MAPS as u64 * 0x1000, 0x1000).is_err(), "one map beyond the limit");
    assert_eq!(counter(&server, "rnic0", "guest_errors"), 1);
    assert_eq!(raw.region_read(0, RNIC_REG_ID, 4).unwrap(), ID_MAGIC.to_le_bytes());
    drop(raw);

    // A new client starts with no maps; an fd-backed map past the end of its file is
    // refused (an access there would raise SIGBUS in the server), one inside it is taken.
    let mut client = vfio_user::Client::new(&server.socket("rnic0")).unwrap();
    let (_ram, fd) = rnic_emu_core::platform::mem::dma::test_ram(1 << 20).unwrap();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&fd);
    let _ = client.dma_map(0, 0x4000_0000, 2 << 20, fd); // rust-vmm's client ignores error replies
    assert_eq!(counter(&server, "rnic0", "guest_errors"), 2, "the oversized map was refused");
    client.dma_map(0, 0x4000_0000, 1 << 20, fd).unwrap();
    assert_eq!(counter(&server, "rnic0", "guest_errors"), 2);
    drop(client);

    // The largest count a message can carry (fuzzing found it: the library allocates the
    // count before the backend refuses it): refused, and the server's memory does not grow.
    let rss = || {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
        let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB").trim().parse::<u64>().unwrap();
        kb << 10
    };
    let mut raw = Raw::connect(&server.socket("rnic0"));
    let before = rss();
    for _ in 0..8 {
        assert!(raw.region_read(0, 0, u32::MAX - 3).is_err());
    }
    assert!(rss() < before + 64 * MIB, "RSS grew from {before} to {} bytes", rss());
    assert_eq!(raw.region_read(0, RNIC_REG_ID, 4).unwrap(), ID_MAGIC.to_le_bytes());
    drop(raw);
    let max = rnic_emu_server::vfio::MAX_REGION_ACCESS as u32;
    let mut gpu = Raw::connect(&server.socket("gpu0"));
    assert_eq!(gpu.region_read(1, 0, max).unwrap().len(), max as usize, "a BAR1 read of the largest size");
    assert!(gpu.region_read(1, 0, max + 1).is_err());
    assert_eq!(counter(&server, "gpu0", "guest_errors"), 1);
    assert_eq!(counter(&server, "rnic0", "guest_errors"), 10);
}

/// An MR whose page count the MTT_ENTRIES the driver set allows, but whose page list no
/// guest could hold (2^32 - 16 pages, 32 GiB of MTT): a clean command error, and the
/// server does not reserve memory for the whole list before reading it (it reads the MTT
/// in chunks and stops at the first entry outside guest memory).
#[test]
fn mr_with_an_absurd_page_count_is_refused_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let mut h = HostDriver::connect(&server.socket("rnic0"), 16 * MIB).unwrap();
    h.w32(MTT_ENTRIES, u32::MAX).unwrap();
    // 2^32 - 16 pages: beyond what the device holds (MAX_MR_PAGES), refused before any
    // entry is read.
    let mr = |npages: u32| MrCtx { iova: VA, length: u64::from(npages) * 4096, pd: 1, mtt_offset: 0, npages, access: ACCESS, key: 1, page_shift: 12, rsvd0: 0 };
    assert_eq!(cmd_with(&mut h, 2, 32, CMD_REG_MR, 1, &mr(u32::MAX - 15)), CMD_ERR_NO_RESOURCES);
    // MAX_MR_PAGES pages: within the bound, but 32 MiB of MTT behind 16 MiB of guest RAM:
    // the first unreadable chunk ends it.
    assert_eq!(cmd_with(&mut h, 2, 32, CMD_REG_MR, 1, &mr(MAX_MR_PAGES as u32)), CMD_ERR_DMA);
    assert_eq!(h.r32(RNIC_REG_ID).unwrap(), ID_MAGIC, "the server is still there");
}

/// RDMA READs in flight per QP (docs/verbs.md, "Resource bounds"): with the responder
/// deaf, a QP with MAX_READS + 1 READs posted puts exactly MAX_READS requests on the wire
/// and holds the last one back; once the responder hears again, all complete with the data.
#[test]
fn reads_in_flight_per_qp_are_bounded() {
    use rnic_emu_testkit::hostdrv::{NodePair, PairOptions};
    const MAX_READS: u64 = 16;
    let dir = tempfile::tempdir().unwrap();
    let sub = (std::process::id() % 200) as u8;
    let ips = [std::net::Ipv4Addr::new(127, 98, sub, 1), std::net::Ipv4Addr::new(127, 98, sub, 2)];
    // Local ACK timeout 4.096 us * 2^18 (about 1 s): no retransmission while we count.
    let o = PairOptions { ips, node_toml: "", retry_cnt: 7, timeout: 18, capture: false, rnr_retry: 7, eth_mtu: 0 };
    let mut p = NodePair::start(std::path::Path::new(bin()), dir.path(), &o).unwrap();
    let data = pattern(11, 0, 64 * (MAX_READS as usize + 1));
    p.h[1].ram.write(p.buf[1], &data).unwrap();
    let deaf = |p: &NodePair, on: bool| {
        let req = format!("faults rx drop={}", if on { 1 } else { 0 });
        rnic_emu_server::serve::control_request(&p.servers[1].socket_dir, "node1", &req).unwrap()
    };
    let stat = |p: &NodePair, name: &str| counter(&p.servers[0], "rnic0", name);
    deaf(&p, true);
    let wqes: Vec<_> = (0..=MAX_READS)
        .map(|i| {
            let hdr = rdma_wqe(WQE_OP_RDMA_READ, i, VA + p.buf[1] + 64 * i, p.key[1]);
            (hdr, vec![Sge { addr: VA + p.buf[0] + 64 * i, length: 64, lkey: p.key[0] }])
        })
        .collect();
    p.h[0].post(1, true, &wqes).unwrap();
    assert!(wait_until(Duration::from_secs(10), || stat(&p, "pkts_sent") >= MAX_READS));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(stat(&p, "pkts_sent"), MAX_READS, "READ requests on the wire while the responder is deaf");
    assert_eq!(stat(&p, "retransmits"), 0);
    deaf(&p, false);
    for i in 0..=MAX_READS {
        let c = p.h[0].wait(1, WAIT).unwrap();
        assert_eq!((c.status, c.wr_id), (WC_SUCCESS, i), "{c:?}");
    }
    let mut got = vec![0u8; data.len()];
    p.h[0].ram.read(p.buf[0], &mut got).unwrap();
    assert!(got == data, "every READ returned its data");
}

/// A VERSION message shorter than its own header makes the vfio-user library panic; the
/// server drops that connection only. A thousand such connections leave the log small and
/// the server serving.
#[test]
fn library_panics_on_hostile_versions_are_rate_limited() {
    let dir = tempfile::tempdir().unwrap();
    let server = single_switch(dir.path());
    let before = std::fs::metadata(server.log_path()).unwrap().len();
    for id in 0..1000u16 {
        let mut s = UnixStream::connect(server.socket("rnic0")).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut msg = id.to_le_bytes().to_vec();
        msg.extend_from_slice(&1u16.to_le_bytes()); // VERSION
        msg.extend_from_slice(&16u32.to_le_bytes()); // size: less than the VERSION fields
        msg.extend_from_slice(&[0; 8]);
        msg.extend_from_slice(&[0, 0, 1, 0]); // major 0, minor 1
        s.write_all(&msg).unwrap();
        let mut sink = Vec::new();
        let _ = s.read_to_end(&mut sink); // the server hangs up
    }
    let mut raw = Raw::connect(&server.socket("rnic0"));
    assert_eq!(raw.region_read(0, RNIC_REG_ID, 4).unwrap(), ID_MAGIC.to_le_bytes());
    let grown = std::fs::metadata(server.log_path()).unwrap().len() - before;
    let log = std::fs::read_to_string(server.log_path()).unwrap();
    let reported = log.matches("vfio-user library panicked").count();
    eprintln!("log grew by {grown} bytes; {reported} panic reports; last lines:\n{}", log.lines().rev().take(8).collect::<Vec<_>>().join("\n"));
    assert!(reported > 0, "the panics are reported");
    assert!(reported <= 2 * rnic_emu_core::ratelimit::BURST as usize, "{reported} panic reports: not rate-limited");
    assert!(!log.contains("thread '"), "no default panic message");
}
