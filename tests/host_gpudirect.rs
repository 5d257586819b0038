//! Host-level GPUDirect test, no QEMU: a real node server (RNIC + GPU below one switch),
//! the GPU's BAR1 placed and enabled through its config space over the GPU's socket, and
//! the RNIC driven by `hostdrv`: RDMA between host memory and GPU memory and GPU to GPU
//! memory through the DMA router, BAR1_APERTURE enforcement, per-path byte counters (BAR0
//! and `rnic-emu stats`), and the GPU's fill/copy/reduce engine with its interrupt.

mod common;
use common::*;
use rnic_emu_core::contract::abi::*;
use rnic_emu_core::contract::counters::Counter;
use rnic_emu_core::regs::{gpu, rnic::*};
use rnic_emu_testkit::hostdrv::{HostDriver, ServerProcess, VA};
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::FileExt;
use std::time::Duration;
use vfio_bindings::bindings::vfio::*;
use vfio_user::Client;

const GPU_BAR: u64 = 0x1_0000_0000; // where the "BIOS" puts GPU BAR1
const MIB: u64 = 1 << 20;

fn eventfd() -> File {
    // SAFETY: eventfd returns a new descriptor or -1 (checked); we own it.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    assert!(fd >= 0);
    // SAFETY: fd is valid and owned.
    unsafe { File::from_raw_fd(fd) }
}

fn w32(c: &mut Client, region: u32, off: u64, v: u32) {
    c.region_write(region, off, &v.to_le_bytes()).unwrap();
}

fn r32(c: &mut Client, region: u32, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(region, off, &mut b).unwrap();
    u32::from_le_bytes(b)
}

fn write_wqe(dst_va: u64, rkey: u32, src_va: u64, lkey: u32, len: u64, wr_id: u64) -> (WqeHeader, Vec<Sge>) {
    let hdr = WqeHeader { opcode: WQE_OP_RDMA_WRITE, flags: WQE_FLAG_SIGNALED, num_sge: 1, wr_id, remote_addr: dst_va, rkey, ..Default::default() };
    (hdr, vec![Sge { addr: src_va, length: len as u32, lkey }])
}

#[test]
fn rdma_to_and_from_gpu_memory_through_the_router() {
    let dir = tempfile::tempdir().unwrap();
    let mem_dir = dir.path().join("mem");
    std::fs::create_dir(&mem_dir).unwrap();
    let server = ServerProcess::start(std::path::Path::new(bin()), &topology("single-switch"), dir.path(), Some(&mem_dir)).unwrap();
    let (rsock, gsock) = (server.socket("rnic0"), server.socket("gpu0"));

    // Place GPU BAR1 at 4 GiB and turn memory decoding on, as firmware and Linux would.
    let mut g = Client::new(&gsock).unwrap();
    let cfg = VFIO_PCI_CONFIG_REGION_INDEX;
    w32(&mut g, cfg, 0x14, GPU_BAR as u32);
    w32(&mut g, cfg, 0x18, (GPU_BAR >> 32) as u32);
    w32(&mut g, cfg, 0x04, 0x6);

    let mut h = HostDriver::connect(&rsock, 64 << 20).unwrap();
    assert_eq!(h.r32(RNIC_REG_NUM_GPUS).unwrap(), 1);
    h.create_cq(1, 8, 1).unwrap();
    h.create_qp(1, 1, 1, 6, ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ).unwrap();
    h.connect_qp(1, 1).unwrap();
    let access = ACCESS_LOCAL_WRITE | ACCESS_REMOTE_WRITE | ACCESS_REMOTE_READ;
    let host = h.alloc(4 * MIB, 4096);
    let host_key = h.reg_mr(1, 1, access, host, 4 * MIB).unwrap();
    // GPU memory: MR 2 over BAR1 [0, 8 MiB), virtual addresses VA_GPU + offset.
    let va_gpu = 0x7e00_0000_0000u64;
    let pages: Vec<u64> = (0..(8 * MIB / 4096)).map(|p| GPU_BAR + p * 4096).collect();
    let gpu_key = h.reg_mr_pages(2, 1, access, va_gpu, 8 * MIB, &pages).unwrap();
    let data = pattern(3, 0, (2 * MIB) as usize);
    h.ram.write(host, &data).unwrap();
    let stat = |h: &mut HostDriver, c: Counter| h.r64(STATS_BASE + 8 * c as u64).unwrap();

    // No aperture yet: the WRITE into GPU memory fails, nothing lands.
    h.post(1, true, &[write_wqe(va_gpu, gpu_key, VA + host, host_key, 4096, 1)]).unwrap();
    let c = h.wait(1, Duration::from_secs(10)).unwrap();
    assert_eq!((c.status, c.syndrome), (WC_FATAL_ERR, u32::from(QP_ERR_APERTURE)));
    assert_eq!(stat(&mut h, Counter::ApertureErrors), 1);
    let gpu_mem = File::open(mem_dir.join("node0-gpu0.bar1")).unwrap();
    let mut first = vec![0u8; 4096];
    gpu_mem.read_exact_at(&mut first, 0).unwrap();
    assert!(first.iter().all(|&b| b == 0));

    // An aperture that names no GPU is reported; the right one enables P2P.
    h.w64(BAR1_APERTURE_1, 0x1234_0000).unwrap();
    assert_eq!(h.r32(RNIC_REG_LAST_ERROR).unwrap(), ASYNC_ERR_APERTURE << 24 | 1);
    h.w64(BAR1_APERTURE, GPU_BAR).unwrap();
    h.create_qp(2, 1, 1, 6, access).unwrap();
    h.connect_qp(2, 2).unwrap();
    let before_host = stat(&mut h, Counter::DmaHostBytes);

    // Host -> GPU, 2 MiB.
    h.post(2, true, &[write_wqe(va_gpu, gpu_key, VA + host, host_key, 2 * MIB, 2)]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);
    let mut got = vec![0u8; (2 * MIB) as usize];
    gpu_mem.read_exact_at(&mut got, 0).unwrap();
    assert!(got == data, "host -> GPU: GPU memory holds the data");
    assert_eq!(stat(&mut h, Counter::DmaP2pSwitchBytes), 2 * MIB);
    assert_eq!(stat(&mut h, Counter::DmaHostBytes) - before_host, 2 * MIB);

    // GPU -> GPU (another 2 MiB of the same BAR): no host memory touched.
    h.post(2, true, &[write_wqe(va_gpu + 4 * MIB, gpu_key, va_gpu, gpu_key, 2 * MIB, 3)]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);
    gpu_mem.read_exact_at(&mut got, 4 * MIB).unwrap();
    assert!(got == data, "GPU -> GPU");
    assert_eq!(stat(&mut h, Counter::DmaHostBytes) - before_host, 2 * MIB, "GPU to GPU added no host bytes");
    assert_eq!(stat(&mut h, Counter::DmaP2pSwitchBytes), 6 * MIB);

    // RDMA READ of GPU memory into host memory.
    let hdr = rdma_wqe(WQE_OP_RDMA_READ, 4, va_gpu + 4 * MIB, gpu_key);
    h.post(2, true, &[(hdr, vec![Sge { addr: VA + host + 2 * MIB, length: MIB as u32, lkey: host_key }])]).unwrap();
    assert_eq!(h.wait(1, Duration::from_secs(10)).unwrap().status, WC_SUCCESS);
    let mut back = vec![0u8; MIB as usize];
    h.ram.read(host + 2 * MIB, &mut back).unwrap();
    assert!(back == data[..MIB as usize]);
    assert_eq!(stat(&mut h, Counter::DmaP2pRootComplexBytes), 0, "single switch: nothing through the root complex");

    // The same counters from the host side.
    let js = rnic_emu_server::serve::query_stats(dir.path(), "node0").unwrap();
    assert_eq!(js["node0-rnic0"]["dma_p2p_switch_bytes"], 7 * MIB);

    // GPU engine: fill then reduce, with its interrupt on vector 1.
    let mut efd = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    g.set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 1, 1, &[efd.as_raw_fd()]).unwrap();
    let launch = |g: &mut Client, op: u64, src: u64, src2: u64, dst: u64, len: u64, value: u32| {
        for (reg, v) in [(gpu::GPU_ENG_SRC, src), (gpu::GPU_ENG_SRC2, src2), (gpu::GPU_ENG_DST, dst), (gpu::GPU_ENG_LEN, len)] {
            g.region_write(0, reg, &v.to_le_bytes()).unwrap();
        }
        w32(g, 0, gpu::GPU_ENG_VALUE, value);
        w32(g, 0, gpu::GPU_ENG_VECTOR, 1);
        w32(g, 0, gpu::GPU_ENG_LAUNCH, op as u32);
        assert!(wait_until(Duration::from_secs(10), || r32(g, 0, gpu::GPU_ENG_STATUS) & 1 == 0));
        r32(g, 0, gpu::GPU_ENG_STATUS) >> 8
    };
    assert_eq!(launch(&mut g, gpu::ENG_OP_FILL32, 0, 0, 16 * MIB, MIB, 2.5f32.to_bits()), 0);
    assert_eq!(launch(&mut g, gpu::ENG_OP_REDUCE_SUM_F32, 16 * MIB, 16 * MIB, 17 * MIB, MIB, 0), 0);
    let mut sums = vec![0u8; MIB as usize];
    gpu_mem.read_exact_at(&mut sums, 17 * MIB).unwrap();
    assert!(sums.chunks_exact(4).all(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) == 5.0));
    let mut n = [0u8; 8];
    assert!(efd.read(&mut n).is_ok(), "the engine raised its vector");
    assert_eq!(launch(&mut g, gpu::ENG_OP_COPY, 0, 0, 255 * MIB, 2 * MIB, 0) as u64, gpu::ENG_ERR_RANGE);
    assert_eq!(r32(&mut g, 0, gpu::GPU_ENG_DONE), 3);
    assert_eq!(r32(&mut g, 0, gpu::GPU_STAT_OPS), 2);
}
