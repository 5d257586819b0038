//! `cargo bench --bench verbs`: the RNIC engine measured on the host through a real
//! `rnic-emu serve` process and its vfio-user socket (no QEMU), each figure next to a
//! baseline taken in the same run on the same buffers, first with MMIO doorbells (one
//! vfio-user message each), then with the doorbell page (docs/verbs.md §3.1):
//! - RDMA WRITE bandwidth, 64 KiB .. 4 MiB, 16 WQEs per doorbell (the last signaled, as
//!   perftest keeps a window in flight), against one plain memcpy of the same bytes;
//! - small (64-byte) RDMA WRITEs per second, posted 32 per doorbell, against the bare cost
//!   of one vfio-user register round trip;
//! - both again (doorbell page) with the node's MMIO/DMA trace recording, the cost of
//!   `rnic-emu trace --record on` (off, each access pays one relaxed atomic load).
//!
//! Prints tables; the ratios are what to compare between runs (machines are noisy).

use rnic_emu_core::contract::abi::*;
use rnic_emu_core::regs::rnic::RNIC_REG_SCRATCH;
use rnic_emu_testkit::hostdrv::{HostDriver, ServerProcess, VA};
use std::path::Path;
use std::time::{Duration, Instant};

struct Buffers {
    src: u64,
    dst: u64,
    lkey: u32,
    rkey: u32,
    max: u64,
}

fn bandwidth(h: &mut HostDriver, b: &Buffers, how: &str) -> anyhow::Result<()> {
    println!("RDMA WRITE bandwidth (16 WQEs per post, {how}) vs memcpy of the same buffers");
    println!("{:>8} {:>12} {:>12} {:>8}", "size", "rnic GB/s", "memcpy GB/s", "ratio");
    let mut size = 64u64 << 10;
    while size <= b.max {
        const WINDOW: u64 = 16;
        let iters = ((1024u64 << 20) / size / WINDOW).max(4);
        let hdr = WqeHeader { opcode: WQE_OP_RDMA_WRITE, num_sge: 1, remote_addr: VA + b.dst, rkey: b.rkey, ..Default::default() };
        let mut batch = vec![(hdr, vec![Sge { addr: VA + b.src, length: size as u32, lkey: b.lkey }]); WINDOW as usize];
        batch[WINDOW as usize - 1].0.flags = WQE_FLAG_SIGNALED;
        let wr = |h: &mut HostDriver| -> anyhow::Result<()> {
            h.post(1, true, &batch)?;
            let c = h.wait(1, Duration::from_secs(10))?;
            anyhow::ensure!(c.status == WC_SUCCESS, "status {}", c.status);
            Ok(())
        };
        wr(h)?; // warm-up
        let t = Instant::now();
        for _ in 0..iters {
            wr(h)?;
        }
        let rnic = (size * iters * WINDOW) as f64 / t.elapsed().as_secs_f64() / 1e9;
        let t = Instant::now();
        for _ in 0..iters * WINDOW {
            h.ram.copy_within(b.src, b.dst, size as usize)?;
        }
        let memcpy = (size * iters * WINDOW) as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!("{:>7}K {rnic:>12.2} {memcpy:>12.2} {:>8.2}", size >> 10, rnic / memcpy);
        size *= 2;
    }
    Ok(())
}

fn small_writes(h: &mut HostDriver, b: &Buffers, how: &str) -> anyhow::Result<()> {
    let rounds = 20_000;
    let t = Instant::now();
    for _ in 0..rounds {
        h.r32(RNIC_REG_SCRATCH)?;
    }
    let rt_per_s = f64::from(rounds) / t.elapsed().as_secs_f64();
    let batch = 32;
    let batches = 2_000;
    let hdr = WqeHeader { opcode: WQE_OP_RDMA_WRITE, num_sge: 1, remote_addr: VA + b.dst, rkey: b.rkey, ..Default::default() };
    let small = (hdr, vec![Sge { addr: VA + b.src, length: 64, lkey: b.lkey }]);
    let mut wqes = vec![small; batch];
    wqes[batch - 1].0.flags = WQE_FLAG_SIGNALED;
    let t = Instant::now();
    for _ in 0..batches {
        h.post(1, true, &wqes)?;
        h.wait(1, Duration::from_secs(10))?;
    }
    let ops = (batch * batches) as f64 / t.elapsed().as_secs_f64();
    println!();
    println!("64-byte RDMA WRITEs ({batch} per post, {how}) vs one vfio-user register round trip");
    println!("{:>16} {:>18} {:>8}", "writes/s", "round trips/s", "ratio");
    println!("{ops:>16.0} {rt_per_s:>18.0} {:>8.2}", ops / rt_per_s);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../qemu-configs/single-switch.toml");
    let server = ServerProcess::start(Path::new(env!("CARGO_BIN_EXE_rnic-emu")), &topo, dir.path(), None)?;
    let max = 4u64 << 20;
    let mut h = HostDriver::connect(&server.socket("rnic0"), 64 << 20)?;
    let access = ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    for n in [1, 2] {
        h.create_cq(n, 10, 1)?;
        h.create_qp(n, 1, n, 9, access)?;
    }
    h.connect_qp(1, 2)?;
    h.connect_qp(2, 1)?;
    let (src, dst) = (h.alloc(max, 4096), h.alloc(max, 4096));
    let mr = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
    let lkey = h.reg_mr(1, 1, mr, src, max)?;
    let rkey = h.reg_mr(2, 1, mr, dst, max)?;
    h.ram.write(src, &vec![0xa5; max as usize])?;
    let b = Buffers { src, dst, lkey, rkey, max };
    bandwidth(&mut h, &b, "MMIO doorbells")?;
    small_writes(&mut h, &b, "MMIO doorbells")?;
    h.use_doorbell_page()?;
    println!();
    bandwidth(&mut h, &b, "doorbell page")?;
    small_writes(&mut h, &b, "doorbell page")?;
    // The MMIO/DMA trace (docs/trace.md) recording every WQE fetch, payload and CQE DMA:
    // what it costs when on; off, each access pays one relaxed atomic load (the runs above).
    let trace = rnic_emu::iotrace_client::Reader::new(dir.path(), "node0");
    trace.request("on")?;
    println!();
    bandwidth(&mut h, &b, "doorbell page, MMIO/DMA trace recording")?;
    small_writes(&mut h, &b, "doorbell page, MMIO/DMA trace recording")?;
    trace.request("off")?;
    Ok(())
}
