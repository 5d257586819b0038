//! `cargo bench --bench gpudirect`: RDMA WRITE from host memory into GPU memory, measured on
//! the host through a real node server (no QEMU), three ways in the same run on the same
//! buffers:
//! - P2P: the RNIC writes straight into the GPU's BAR1 (what GPUDirect RDMA does);
//! - bounce: the RNIC writes into a host buffer, then the CPU copies it into GPU memory
//!   (what the driver's fallback does when Linux refuses P2P);
//! - memcpy: one plain copy of the same bytes, the ceiling.
//!
//! 16 WRITEs per doorbell, the last signaled. Ratios are what to compare between runs.

use rnic_emu_core::contract::abi::*;
use rnic_emu_core::platform::shm::SharedMemory;
use rnic_emu_core::regs::rnic::BAR1_APERTURE;
use rnic_emu_testkit::hostdrv::{place_gpu_bar1, HostDriver, ServerProcess, VA};
use std::path::Path;
use std::time::{Duration, Instant};

const GPU_BAR: u64 = 0x1_0000_0000;
const GPU_VA: u64 = 0x7e00_0000_0000;
const WINDOW: u64 = 16;

fn main() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let mem_dir = dir.path().join("mem");
    std::fs::create_dir(&mem_dir)?;
    let topo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../qemu-configs/single-switch.toml");
    let server = ServerProcess::start(Path::new(env!("CARGO_BIN_EXE_rnic-emu")), &topo, dir.path(), Some(&mem_dir))?;
    let _gpu_client = place_gpu_bar1(&server.socket("gpu0"), GPU_BAR)?;
    // The same GPU memory the server serves, mapped here for the bounce copy and memcpy.
    let gpu = SharedMemory::file(&mem_dir.join("node0-gpu0.bar1"), 256 << 20)?;
    let max = 4u64 << 20;
    let mut h = HostDriver::connect(&server.socket("rnic0"), 64 << 20)?;
    h.w64(BAR1_APERTURE, GPU_BAR)?;
    h.create_cq(1, 10, 1)?;
    h.create_qp(1, 1, 1, 9, ACCESS_REMOTE_WRITE)?;
    h.connect_qp(1, 1)?;
    let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE;
    let (src, bounce) = (h.alloc(max, 4096), h.alloc(max, 4096));
    let src_key = h.reg_mr(1, 1, access, src, max)?;
    let bounce_key = h.reg_mr(2, 1, access, bounce, max)?;
    let pages: Vec<u64> = (0..max / 4096).map(|p| GPU_BAR + p * 4096).collect();
    let gpu_key = h.reg_mr_pages(3, 1, access, GPU_VA, max, &pages)?;
    h.ram.write(src, &vec![0x5a; max as usize])?;

    println!("host -> GPU memory, {WINDOW} RDMA WRITEs per doorbell");
    println!("{:>8} {:>10} {:>12} {:>12} {:>10} {:>10}", "size", "P2P GB/s", "bounce GB/s", "memcpy GB/s", "P2P/bounce", "P2P/memcpy");
    let mut size = 64u64 << 10;
    while size <= max {
        let iters = ((1024u64 << 20) / size / WINDOW).max(4);
        let run = |h: &mut HostDriver, dst: u64, rkey: u32| -> anyhow::Result<()> {
            let hdr = WqeHeader { opcode: WQE_OP_RDMA_WRITE, num_sge: 1, remote_addr: dst, rkey, ..Default::default() };
            let mut batch = vec![(hdr, vec![Sge { addr: VA + src, length: size as u32, lkey: src_key }]); WINDOW as usize];
            batch[WINDOW as usize - 1].0.flags = WQE_FLAG_SIGNALED;
            h.post(1, true, &batch)?;
            let c = h.wait(1, Duration::from_secs(10))?;
            anyhow::ensure!(c.status == WC_SUCCESS, "status {}", c.status);
            Ok(())
        };
        run(&mut h, GPU_VA, gpu_key)?;
        let bytes = (size * iters * WINDOW) as f64;
        let t = Instant::now();
        for _ in 0..iters {
            run(&mut h, GPU_VA, gpu_key)?;
        }
        let p2p = bytes / t.elapsed().as_secs_f64() / 1e9;
        let mut staging = vec![0u8; size as usize];
        let t = Instant::now();
        for _ in 0..iters {
            run(&mut h, VA + bounce, bounce_key)?;
            for _ in 0..WINDOW {
                h.ram.read(bounce, &mut staging)?;
                gpu.write(0, &staging)?;
            }
        }
        let bounced = bytes / t.elapsed().as_secs_f64() / 1e9;
        let t = Instant::now();
        for _ in 0..iters * WINDOW {
            h.ram.read(src, &mut staging)?;
        }
        let memcpy = bytes / t.elapsed().as_secs_f64() / 1e9;
        println!("{:>7}K {p2p:>10.2} {bounced:>12.2} {memcpy:>12.2} {:>10.2} {:>10.2}", size >> 10, p2p / bounced, p2p / memcpy);
        size *= 2;
    }
    Ok(())
}
